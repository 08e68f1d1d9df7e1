/* cuda_internal.h: what the CUDA backend's host files (C) and kernel files (CUDA C++) share: the kernel
 * launchers (one per op family, each enqueueing on the given stream and returning the launch error) and
 * the tuning knobs set once at backend creation. */
#ifndef CF_BACKEND_CUDA_INTERNAL_H
#define CF_BACKEND_CUDA_INTERNAL_H

#include <cuda_runtime_api.h>
#include "backend/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Knobs read once by cf_cuda_backend_create (environment overrides for experiments and the sanitizer). */
typedef struct cfk_config {
    int pdl;            /* launch with programmatic dependent launch (overlaps a kernel's start with the previous one's end) */
    int gemv_unroll;    /* 16-byte weight loads in flight per lane in the GEMV kernel: 2, 4 or 8 */
    int gemv_max_rows;  /* matmuls with at most this many activation rows use the GEMV kernel, the rest cuBLAS */
    int n_sm;
} cfk_config;
extern cfk_config cfk_cfg;

cudaError_t cfk_init(void);   /* per-kernel attributes (large shared memory); once per process */

/* elementwise and row ops (k_elementwise.cu) */
typedef enum cfk_ew {
    CFK_ADD, CFK_MUL, CFK_SCALE, CFK_SOFTCAP, CFK_GLU_SILU, CFK_GLU_GELU, CFK_COPY, CFK_FILL
} cfk_ew;
/* out = f(a, b) elementwise over out's shape; b broadcast when it has one row; s = scalar argument */
cudaError_t cfk_elementwise(cudaStream_t st, cfk_ew op, cf_tensor out, cf_tensor a, cf_tensor b, float s);
cudaError_t cfk_embed(cudaStream_t st, cf_tensor out, cf_tensor table, cf_tensor ids, float scale);
cudaError_t cfk_rmsnorm(cudaStream_t st, cf_tensor out, cf_tensor x, cf_tensor w, float eps, float w_offset);
cudaError_t cfk_rope(cudaStream_t st, cf_tensor x, cf_tensor pos, int n_heads, int head_dim, int rot_dim, cf_tensor inv_freq);
/* rows of src to slots (pos0 + i) % cap, or pos[i] % cap when pos.data is set */
cudaError_t cfk_kv_store(cudaStream_t st, cf_tensor cache, cf_tensor src, int pos0, cf_tensor pos, int cap);
/* n contiguous elements of type from at src to type to at dst (weight upload, read-back) */
cudaError_t cfk_convert(cudaStream_t st, void *dst, cf_dtype to, const void *src, cf_dtype from, int64_t n);
/* uniform values in [-scale, scale) from a hash of (seed, index): benchmarks and tests */
cudaError_t cfk_fill_random(cudaStream_t st, cf_tensor t, uint64_t seed, float scale);

/* matrix-vector products for few activation rows (k_gemv.cu): out = x . w^T (+ bias) */
cudaError_t cfk_gemv(cudaStream_t st, cf_tensor out, cf_tensor x, cf_tensor w, cf_tensor bias);

/* attention (k_attention.cu). pos_dev: when non-NULL, pos0 is read from it on the device. partial: scratch
 * of cfk_attention_scratch() bytes. */
size_t cfk_attention_scratch(cf_tensor k, cf_tensor v, const cf_attn_args *a, int max_keys);
cudaError_t cfk_attention(cudaStream_t st, cf_tensor out, cf_tensor q, cf_tensor k, cf_tensor v, const cf_attn_args *a,
                          const int32_t *pos_dev, int max_keys, void *partial);

/* sampling (k_sample.cu) */
cudaError_t cfk_argmax(cudaStream_t st, cf_tensor ids, cf_tensor logits);
cudaError_t cfk_sample(cudaStream_t st, cf_tensor ids, cf_tensor logits, cf_tensor u, const cf_sample_args *s);

#ifdef __cplusplus
}
#endif
#endif
