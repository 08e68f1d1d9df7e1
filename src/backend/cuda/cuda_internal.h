/* cuda_internal.h: what the CUDA backend's host files (C) and kernel files (CUDA C++) share: the kernel
 * launchers (one per op family, each enqueueing on the given stream and returning the launch error) and
 * the tuning knobs set once at backend creation. */
#ifndef CF_BACKEND_CUDA_INTERNAL_H
#define CF_BACKEND_CUDA_INTERNAL_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* The project's headers get C linkage in the .cu files (their system headers are already included). */
#ifdef __cplusplus
extern "C" {
#endif
#include "backend/backend.h"

/* The kernels' copy of the tuning knobs (cf_tuning, backend.h), set by cf_cuda_backend_create. */
typedef struct cfk_config {
    int pdl;            /* launch with programmatic dependent launch (overlaps a kernel's start with the previous one's end) */
    int gemv_unroll;    /* 16-byte chunks of each of a unit's two rows per batch and lane in the GEMV kernel (two batches in flight): 1, 2, or 0: by row length */
    int gemv_max_rows;  /* bf16/f16 matmuls with at most this many activation rows (<= 8) use the GEMV kernel, the rest cuBLAS */
    int gemv_tc_max_rows;   /* bf16 matmuls with bf16 x and more rows than that, up to this many (<= 16): the tensor-core GEMV */
    int gemv_warps;     /* warps per SM a GEMV aims to keep busy: fewer weight rows than that are split over warps */
    int gemv_block_warps;   /* warps per GEMV block (2, 4 or 8): smaller blocks leave a shorter tail at the end of a launch */
    int attn_bc;        /* keys per tile of the prefill attention kernel for head size 128: 32 (faster on the H200) or 64 */
    int attn_hpb;       /* query heads of one GQA group per prefill attention block, sharing its K/V tiles: 1, 2 or 4 */
    int attn_group;     /* decode attention with one block per KV head (groups of 2, 4, 8; head size 64, 128) */
    int attn_group_splits;   /* its key splits per (query, KV head) at most: 1 to 64 (paged decode too) */
    int attn_cluster;   /* attn_decode_kernel's 2-8 key splits merge in a thread block cluster's shared memory */
    int paged_mma_group;     /* paged decode on tensor cores for GQA groups of at least this many query heads (0: never, the default) */
    int paged_sm_blocks;     /* blocks per SM a paged decode launch aims for before splitting keys further */
    int qmma_max_rows;       /* quantized matmuls with more activation rows than qgemv_max_rows and at most this many use the
                                tensor-core kernel of k_quant.cu; more: dequantize to bf16 scratch and cuBLAS */
    int qgemv_max_rows;      /* quantized matmuls with at most this many rows (<= 8) use the quantized GEMV */
    int qgemv_warps;         /* warps per SM the quantized GEMV aims for when it splits its units over warps */
    int qgemv_tc;            /* 4/8-bit decode on the tensor cores (qgemv_tc_kernel) where it applies */
    int qgemv_tc_splits;     /* at most this many blocks of a cluster split a unit's k in qgemv_tc_kernel (1, 2, 4, 8) */
    int n_sm;
} cfk_config;
extern cfk_config cfk_cfg;

cudaError_t cfk_init(void);   /* per-kernel attributes (large shared memory); once per process */

/* elementwise and row ops (k_elementwise.cu) */
typedef enum cfk_ew {
    CFK_ADD, CFK_SCALE, CFK_SOFTCAP, CFK_GLU_SILU, CFK_GLU_GELU, CFK_COPY, CFK_FILL
} cfk_ew;
/* out = f(a, b) elementwise over out's shape; b broadcast when it has one row; s = scalar argument */
cudaError_t cfk_elementwise(cudaStream_t st, cfk_ew op, cf_tensor out, cf_tensor a, cf_tensor b, float s);
cudaError_t cfk_embed(cudaStream_t st, cf_tensor out, cf_tensor table, cf_tensor ids, float scale);
cudaError_t cfk_rmsnorm(cudaStream_t st, cf_tensor out, cf_tensor x, cf_tensor w, float eps, float w_offset);
/* x = (x + [rmsnorm(o) * (w_o + w_offset)]) * scale, then h = rmsnorm(x) * (w_h + w_offset) where h.data
 * (op add_norm): one block a row */
cudaError_t cfk_add_norm(cudaStream_t st, cf_tensor x, cf_tensor o, cf_tensor w_o, float scale, cf_tensor h, cf_tensor w_h, float eps,
                         float w_offset);
/* op qkv after its projections: the per-head norms, RoPE and KV stores of a->q, a->k, a->v, one launch
 * (heads of at most CFK_QKV_MAX_HEAD values) */
#define CFK_QKV_MAX_HEAD 1024
cudaError_t cfk_qkv_post(cudaStream_t st, const cf_qkv_args *a);
/* n (1 or 2) KV-cache stores of the same row count (k and v): rows r of src[i] go to slots
 * (pos0 + r) % cap, or pos[r] % cap when pos.data is set (cap 0: pos[r]) */
typedef struct cfk_kv_args {
    int n;
    cf_tensor cache[2], src[2];
    int pos0, cap;
    cf_tensor pos;
} cfk_kv_args;
cudaError_t cfk_kv_store(cudaStream_t st, const cfk_kv_args *s);
/* attention_paged (backend.h), the plain kernel: head sizes up to 512 */
cudaError_t cfk_attention_paged_ref(cudaStream_t st, cf_tensor out, cf_tensor q, cf_tensor k, cf_tensor v, const cf_paged_attn_args *a,
                                    const cf_batch_view *b);
/* RoPE on n (1 or 2) tensors of the same rows, positions and frequencies (q and k in one launch); with
 * store (NULL: none), the KV stores that follow in the same launch: store->src[0] must be x[1] (stored
 * after its rotation), store->src[1] (v) as it is */
cudaError_t cfk_rope(cudaStream_t st, int n, const cf_tensor *x, const int *n_heads, cf_tensor pos, int head_dim, int rot_dim,
                     cf_tensor inv_freq, const cfk_kv_args *store);
/* n contiguous elements of type from at src to type to at dst (weight upload, read-back) */
cudaError_t cfk_convert(cudaStream_t st, void *dst, cf_dtype to, const void *src, cf_dtype from, int64_t n);
/* uniform values in [-scale, scale) from a hash of (seed, index): benchmarks and tests */
cudaError_t cfk_fill_random(cudaStream_t st, cf_tensor t, uint64_t seed, float scale);

/* Matrix-vector products for few activation rows (k_gemv.cu). One launch computes up to CFK_MAX_SEG
 * products out[s] = x . w[s]^T (+ bias[s]) that share x, and may finish, for two products of equal size,
 * with a GLU (glu_out = act(out[0]) * out[1], each warp computing a row of both; out[s].data NULL: those
 * not written), or for one product, with a gate (out = act(x . w^T) * mul). */
#define CFK_MAX_SEG 3
/* The attention inputs' fold, for a GEMV job computing q, k, v (cfk_gemv_job, cfk_qjob): RoPE of the products with
 * rope[s] set (whole heads of head_dim, positions pos, frequencies inv_freq), then a KV-cache store of those with
 * cache[s].data set (slots store_pos[r] % cap, or (store_pos0 + r) % cap when store_pos.data is NULL; cap 0:
 * store_pos[r] itself). All zero: none. */
typedef struct cfk_qkv_fold {
    int rope[CFK_MAX_SEG];
    cf_tensor pos, inv_freq;
    int head_dim;
    cf_tensor cache[CFK_MAX_SEG];
    cf_tensor store_pos;
    int store_pos0, cap;
} cfk_qkv_fold;
typedef struct cfk_gemv_job {
    cf_tensor x;
    int n_seg;
    cf_tensor out[CFK_MAX_SEG], w[CFK_MAX_SEG], bias[CFK_MAX_SEG];
    cf_tensor glu_out;   /* data NULL: none */
    cf_tensor mul;       /* data NULL: none */
    cf_act act;
    cfk_qkv_fold fold;   /* done by the GEMV's blocks where the vector kernel takes the job, else in launches after it */
} cfk_gemv_job;
/* whether x and w suit the vectorized kernel (the only one that fuses) */
int cfk_gemv_vec_ok(cf_tensor x, cf_tensor w);
/* whether the tensor-core GEMV takes x . w^T (bf16 both, k a multiple of 64, 16-byte aligned rows; it fuses as the
 * vectorized kernel does) */
int cfk_gemv_tc_ok(cf_tensor x, cf_tensor w);
cudaError_t cfk_gemv(cudaStream_t st, const cfk_gemv_job *job);

/* Quantized weights kept packed on the device (k_quant.cu; MLX affine, 4 and 8 bits, groups 32, 64, 128). A CF_Q
 * tensor of the CUDA backend points to a host cf_qweight (backend-owned) whose q is the device copy of the packed
 * words (rows of cols * bits / 32 words, each row 16-byte aligned) and whose scales points to (scale, bias) pairs
 * interleaved in device memory ([rows, cols / group] pairs of sb_dtype: F32, BF16 or F16); biases is NULL.
 * A job: up to CFK_QMAX_SEG products out[s] = x . w[s]^T (+ bias[s]) sharing x (q, k, v), or two products of equal
 * rows finished by the GLU (glu_out = act(x w0^T) * (x w1^T); out[] unused), or one times act() of a gate
 * (out = act(x w^T) * mul). x: F32 or BF16, rows 16-byte aligned. */
#define CFK_QMAX_SEG CFK_MAX_SEG
typedef struct cfk_qjob {
    cf_tensor x;
    int n_seg;
    const cf_qweight *w[CFK_QMAX_SEG];
    cf_tensor out[CFK_QMAX_SEG], bias[CFK_QMAX_SEG];
    cf_tensor glu_out, mul;   /* data NULL: none */
    cf_act act;
    cfk_qkv_fold fold;   /* only where cfk_qgemv_folds says the GEMV takes it */
} cfk_qjob;
/* whether the kernels take the job as it is (same bits, 4 or 8, for every product; x F32/BF16 and aligned; k a
 * multiple of 32; shapes of the GLU / gate forms) */
int cfk_qjob_ok(const cfk_qjob *j);
/* whether cfk_qgemv runs the job (its x as it is) on the tensor-core GEMV, which does the fold's RoPE and stores */
int cfk_qgemv_folds(const cfk_qjob *j);
/* few rows (any count; 8 a launch): the GEMV */
cudaError_t cfk_qgemv(cudaStream_t st, const cfk_qjob *j);
/* more rows: the tensor-core GEMM (bf16 x); partial: cfk_qmma_scratch(j) bytes of scratch (0: none needed) */
size_t cfk_qmma_scratch(const cfk_qjob *j);
cudaError_t cfk_qmma(cudaStream_t st, const cfk_qjob *j, void *partial);
cudaError_t cfk_quant_init(void);   /* the GEMM's large shared memory, both kernels' blocks an SM; once per process (from cfk_init) */
/* rows [r0, r0 + nr) of w dequantized to bf16 at out ([nr, cols], 16-byte aligned) */
cudaError_t cfk_qdequant(cudaStream_t st, const cf_qweight *w, int64_t r0, int64_t nr, void *out);
/* out[i] = dequantized row ids[i] of table * scale (zeros for ids outside the table) */
cudaError_t cfk_qembed(cudaStream_t st, cf_tensor out, const cf_qweight *table, cf_tensor ids, float scale);

/* attention (k_attention.cu). pos_dev: when non-NULL, pos0 is read from it on the device. partial: scratch
 * of cfk_attention_scratch() bytes; counters: CFK_ATTN_COUNTERS zeroed ints, left zeroed (the last block
 * of each (query, head) merges the key splits). */
#define CFK_ATTN_COUNTERS 65536
#define CFK_ATTN_MAX_D 512   /* the largest head size (keys and values) */
size_t cfk_attention_scratch(cf_tensor k, cf_tensor v, const cf_attn_args *a, int max_keys);
cudaError_t cfk_attention(cudaStream_t st, cf_tensor out, cf_tensor q, cf_tensor k, cf_tensor v, const cf_attn_args *a,
                          const int32_t *pos_dev, int max_keys, void *partial, int *counters);

/* attention_paged (backend.h), the tuned kernels (k_paged.cu; the plain one for what they do not take): partial
 * is scratch of cfk_paged_scratch() bytes, counters as cfk_attention's (CFK_ATTN_COUNTERS zeroed ints, left
 * zeroed). cfk_paged_init: the kernels' shared-memory limits, once per process. */
cudaError_t cfk_paged_init(void);
size_t cfk_paged_scratch(cf_tensor k, cf_tensor v, const cf_paged_attn_args *a, const cf_batch_view *b);
cudaError_t cfk_attention_paged(cudaStream_t st, cf_tensor out, cf_tensor q, cf_tensor k, cf_tensor v, const cf_paged_attn_args *a,
                                const cf_batch_view *b, void *partial, int *counters);

/* sampling (k_sample.cu). argmax's state: CFK_PICK_ROWS * 2 zeroed 64-bit words, left zeroed (rows up to
 * that many are spread over many blocks, whose last block per row writes the id) */
#define CFK_PICK_ROWS 1024
cudaError_t cfk_argmax(cudaStream_t st, cf_tensor ids, cf_tensor logits, unsigned long long *state);
cudaError_t cfk_sample(cudaStream_t st, cf_tensor ids, cf_tensor logits, cf_tensor u, const cf_sample_args *s);

#ifdef __cplusplus
}
#endif
#endif
