/* cupti_trace.c: a CUDA injection library that records every kernel's start and end on the GPU clock,
 * inside CUDA graphs too, and writes one line per kernel at exit. It exists to see where a decode step's
 * time goes (the GPU machine has ncu but no Nsight Systems). Built as tools/trace/libcupti_trace.so in the
 * build folder where the CUDA toolkit has CUPTI:
 *   CUDA_INJECTION64_PATH=$PWD/build-gpu/tools/trace/libcupti_trace.so CUPTI_TRACE_OUT=trace.tsv \
 *       build-gpu/cinfer bench --device cuda ...
 *   python3 tools/trace/summarize.py trace.tsv 32 embed 7
 * Lines: start_ns end_ns graph_node_id kernel_name (tab-separated). */
#include <cupti.h>
#include <stdio.h>
#include <stdlib.h>

static FILE *out;

static void CUPTIAPI buffer_requested(uint8_t **buf, size_t *size, size_t *max_records) {
  *size = 8u << 20;
  *buf = aligned_alloc(8, *size);   /* NULL: CUPTI drops the records */
  *max_records = 0;
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buf, size_t size, size_t valid) {
  (void)ctx; (void)stream; (void)size;
  CUpti_Activity *rec = NULL;
  while (cuptiActivityGetNextRecord(buf, valid, &rec) == CUPTI_SUCCESS) {
    if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && rec->kind != CUPTI_ACTIVITY_KIND_KERNEL) continue;
    const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)rec;
    if (out) fprintf(out, "%llu\t%llu\t%llu\t%s\n", (unsigned long long)k->start, (unsigned long long)k->end,
                     (unsigned long long)k->graphNodeId, k->name ? k->name : "?");
  }
  free(buf);
}

static void flush_at_exit(void) {
  cuptiActivityFlushAll(1);
  if (out) fclose(out);
  out = NULL;
}

int InitializeInjection(void) {
  const char *path = getenv("CUPTI_TRACE_OUT");
  out = fopen(path ? path : "trace.tsv", "w");
  if (!out) return 0;
  if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS) return 0;
  if (cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) return 0;
  atexit(flush_at_exit);
  return 1;
}
