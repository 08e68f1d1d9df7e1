/* cuda_backend.c: the CUDA backend's host side: device and stream setup, the memory pool, weight upload
 * (f32 matrices become bf16 on the device; MLX-quantized ones stay packed at 4 and 8 bits, others are dequantized to
 * bf16), the choice of quantized kernel by row count, host transfers, the op table (kernels are in k_*.cu, dense
 * products with many rows go to cuBLAS), the sticky error, and graph recording of a step.
 *
 * Activations are bf16 (act_dtype); every op also takes f32 (and f16) tensors and converts on the fly,
 * so the model may keep its residual stream and logits in f32. */
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/cuda_pool.h"
#include "base/status.h"

#include <cublas_v2.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STAGING_BYTES ((size_t)4 << 20)
#define STAGING_HALF (STAGING_BYTES / 2)
#define READ_SLOT_BYTES (CF_READ_SLOT_VALUES * 4)   /* read_begin's slots: after the staging buffer, in the same pinned allocation */
#define BLAS_WORKSPACE ((size_t)32 << 20)
#define POOL_RESERVE ((size_t)2 << 30)   /* left to the CUDA context, cuBLAS kernels and graphs */

cfk_config cfk_cfg = {.pdl = 1, .gemv_unroll = 0, .gemv_max_rows = 1, .gemv_tc_max_rows = 16, .gemv_warps = 8, .gemv_block_warps = 4,
                      .attn_bc = 32, .attn_hpb = 2, .attn_group = 1, .attn_group_splits = 64, .attn_cluster = 1,
                      .paged_mma_group = 0, .paged_sm_blocks = 3, .qmma_max_rows = 128, .qgemv_max_rows = 8, .qgemv_warps = 24, .qgemv_tc = 1, .qgemv_tc_splits = 8, .n_sm = 132};

typedef struct cuda_backend {
    cf_backend base;
    int device;
    cudaStream_t stream;
    cublasHandle_t blas;
    void *blas_ws;
    /* memory: one pool, or (CINFER_CUDA_DIRECT_ALLOC=1, for compute-sanitizer) one cudaMalloc per tensor */
    void *pool_mem;
    cf_pool pool;
    int direct;
    void **direct_ptrs;
    int n_direct, cap_direct;
    /* scratch for conversions and attention partials; grow-only, and outgrown buffers stay allocated until
     * destroy because a recorded graph may still use them */
    void *scratch;
    size_t scratch_size;
    void **retired;
    int n_retired;
    /* the bf16 weight block of a quantized matmul with many rows (dequantized, then cuBLAS): grow-only like scratch,
     * and apart from it because gemm() uses scratch for its conversions */
    void *wscratch;
    size_t wscratch_size;
    /* the descriptors of the packed quantized weights (CF_Q tensors point at them; their device memory is in the pool) */
    cf_qweight **qw;
    int n_qw;
    /* pinned host memory for write(): small writes are queued without waiting for the stream. It is used in two
     * halves in turn; a half is taken again once the copies queued from it are done (half_done), so a host that
     * queues step after step without waiting (a step in flight) does not wait for the stream either */
    unsigned char *staging;
    size_t staging_used;          /* in the current half */
    int half;
    cudaEvent_t half_done[2];
    int half_queued[2];           /* half_done[i] is recorded and not yet waited for */
    /* read_begin/read_end: each slot's type, count and event (its copy lands after the staging buffer) */
    cudaEvent_t read_done[2];
    cf_dtype read_dtype[2];
    int read_n[2];
    int *attn_counters;   /* zeroed; attention's split merge leaves them zeroed */
    unsigned long long *pick_state;   /* zeroed; argmax leaves it zeroed */
    int *one_seq;   /* {0, 0, 1, 0}: row_seq, seq_start and block table of a batch of one row (decode_as_paged) */
    int paged_d512;   /* tuning.attn_paged_d512 */
    int capturing;
    cf_backend_ops ops;   /* cuda_ops, less the fused ops where tuning.fused_ops is 0 */
    cinfer_status status;
    char message[400];
} cuda_backend;

struct cf_graph {
    cudaGraphExec_t exec;
};

static cuda_backend *CB(cf_backend *be) { return (cuda_backend *)be; }

static void fail(cuda_backend *b, cinfer_status code, const char *fmt, ...) CF_PRINTF(3, 4);
static void fail(cuda_backend *b, cinfer_status code, const char *fmt, ...) {
    if (b->status != CINFER_OK) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b->message, sizeof b->message, fmt, ap);
    va_end(ap);
    b->status = code;
}

static void check(cuda_backend *b, cudaError_t e, const char *what) {
    if (e == cudaSuccess) e = cudaGetLastError();
    if (e != cudaSuccess)
        fail(b, e == cudaErrorMemoryAllocation ? CINFER_E_OUT_OF_MEMORY : CINFER_E_DEVICE, "CUDA %s: %s (error %d)", what,
             cudaGetErrorString(e), (int)e);
}

static cinfer_status report(cuda_backend *b, cinfer_error *err) {
    if (b->status == CINFER_OK) return CINFER_OK;
    return cf_fail(err, b->status, "%s", b->message);
}

static size_t span_bytes(cf_tensor t) {
    if (t.rows <= 0 || t.cols <= 0) return 0;
    return (size_t)((t.rows - 1) * t.stride + t.cols) * cf_dtype_size(t.dtype);
}

static int empty(cf_tensor t) { return t.rows <= 0 || t.cols <= 0; }

/* ---- memory ---- */

static void *dev_alloc(cuda_backend *b, size_t bytes) {
    if (!b->direct) return cf_pool_alloc(&b->pool, bytes);
    if (b->n_direct == b->cap_direct) {
        int nc = b->cap_direct ? 2 * b->cap_direct : 64;
        void **np = realloc(b->direct_ptrs, (size_t)nc * sizeof *np);
        if (!np) return NULL;
        b->direct_ptrs = np;
        b->cap_direct = nc;
    }
    void *p = NULL;
    if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) {
        cudaGetLastError();
        return NULL;
    }
    b->direct_ptrs[b->n_direct++] = p;
    return p;
}

static void dev_free(cuda_backend *b, void *p) {
    if (!p) return;
    if (!b->direct) {
        cf_pool_free(&b->pool, p);
        return;
    }
    for (int i = 0; i < b->n_direct; i++)
        if (b->direct_ptrs[i] == p) {
            b->direct_ptrs[i] = b->direct_ptrs[--b->n_direct];
            cudaFree(p);
            return;
        }
}

static cinfer_status oom(cuda_backend *b, size_t bytes, const char *what, cinfer_error *err) {
    if (b->direct)
        return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of GPU memory: %s needs %zu bytes", what, bytes);
    return cf_fail(err, CINFER_E_OUT_OF_MEMORY,
                   "out of GPU memory: %s needs %zu bytes; the pool of %zu bytes has %zu in use, largest free block %zu",
                   what, bytes, b->pool.size, b->pool.used, cf_pool_largest_free(&b->pool));
}

static void *grow(cuda_backend *b, void **buf, size_t *size, size_t bytes) {
    if (bytes <= *size) return *buf;
    size_t want = bytes > 2 * *size ? bytes : 2 * *size;
    void *p = dev_alloc(b, want);
    if (!p) {
        cinfer_error e;
        oom(b, want, "scratch", &e);
        fail(b, CINFER_E_OUT_OF_MEMORY, "%s", e.message);
        return NULL;
    }
    if (*buf) {
        void **nr = realloc(b->retired, (size_t)(b->n_retired + 1) * sizeof *nr);
        if (!nr) {
            dev_free(b, p);
            fail(b, CINFER_E_OUT_OF_MEMORY, "out of host memory");
            return NULL;
        }
        b->retired = nr;
        b->retired[b->n_retired++] = *buf;
    }
    *buf = p;
    *size = want;
    return p;
}

static void *scratch(cuda_backend *b, size_t bytes) { return grow(b, &b->scratch, &b->scratch_size, bytes); }

static cinfer_status cuda_alloc(cf_backend *be, cf_dtype dt, int64_t rows, int64_t cols, cf_tensor *out, cinfer_error *err) {
    cuda_backend *b = CB(be);
    size_t bytes = (size_t)(rows * cols) * cf_dtype_size(dt);
    void *p = dev_alloc(b, bytes);
    if (!p) return oom(b, bytes, "a tensor", err);
    cudaError_t e = cudaMemsetAsync(p, 0, bytes, b->stream);
    if (e != cudaSuccess) {
        dev_free(b, p);
        return cf_fail(err, CINFER_E_DEVICE, "CUDA memset: %s", cudaGetErrorString(e));
    }
    *out = (cf_tensor){.data = p, .dtype = dt, .rows = rows, .cols = cols, .stride = cols};
    return CINFER_OK;
}

static void cuda_free_tensor(cf_backend *be, cf_tensor *t) {
    dev_free(CB(be), t->data);
    t->data = NULL;
}

/* Matrices are stored bf16 (f32 ones converted here, chunk by chunk through scratch) or f16; vectors
 * (one row: norms, biases) keep f32, which costs nothing and keeps them exact. */
static cinfer_status cuda_upload_weight(cf_backend *be, const void *host, cf_dtype dt, int64_t rows, int64_t cols,
                                        cf_tensor *out, cinfer_error *err) {
    cuda_backend *b = CB(be);
    if (dt != CF_F32 && dt != CF_BF16 && dt != CF_F16)
        return cf_fail(err, CINFER_E_UNSUPPORTED, "the CUDA backend stores F32, BF16 or F16 weights, not %s", cf_dtype_name(dt));
    cf_dtype store = dt == CF_F32 && rows > 1 ? CF_BF16 : dt;
    size_t n = (size_t)(rows * cols), bytes = n * cf_dtype_size(store);
    void *p = dev_alloc(b, bytes);
    if (!p) return oom(b, bytes, "a weight", err);
    cudaError_t e = cudaSuccess;
    if (store == dt) {
        e = cudaMemcpyAsync(p, host, bytes, cudaMemcpyHostToDevice, b->stream);
    } else {
        const size_t chunk = (size_t)16 << 20;   /* f32 elements per step */
        float *tmp = scratch(b, (n < chunk ? n : chunk) * sizeof(float));
        for (size_t i = 0; tmp && i < n && e == cudaSuccess; i += chunk) {
            size_t c = n - i < chunk ? n - i : chunk;
            e = cudaMemcpyAsync(tmp, (const float *)host + i, c * sizeof(float), cudaMemcpyHostToDevice, b->stream);
            if (e == cudaSuccess) e = cfk_convert(b->stream, (uint16_t *)p + i, CF_BF16, tmp, CF_F32, (int64_t)c);
        }
        if (!tmp) {
            dev_free(b, p);
            return report(b, err);
        }
        /* the GEMV kernel prefetches weights before waiting for the kernel ahead of it (k_gemv.cuh): no
         * kernel that writes a weight may run right before one that reads it */
        if (e == cudaSuccess) e = cudaStreamSynchronize(b->stream);
    }
    if (e != cudaSuccess) {
        dev_free(b, p);
        return cf_fail(err, CINFER_E_DEVICE, "uploading a %lldx%lld weight: %s", (long long)rows, (long long)cols, cudaGetErrorString(e));
    }
    *out = (cf_tensor){.data = p, .dtype = store, .rows = rows, .cols = cols, .stride = cols};
    return CINFER_OK;
}

/* MLX affine-quantized weights are dequantized to bf16 here (scale * q + bias in f32, rounded to nearest even),
 * a block of rows at a time through host memory, and then are plain BF16 weights: there are no quantized CUDA
 * kernels yet, so a quantized model runs at bf16 speed and memory on the GPU (same results as the CPU up to
 * the bf16 rounding of each weight). */
static cinfer_status upload_qweight_bf16(cuda_backend *b, const cf_qweight *w, cf_tensor *out, cinfer_error *err) {
    if (!cf_qweight_bits_ok(w->bits) || !cf_qweight_group_ok(w->group) || w->cols <= 0 || w->cols % w->group)
        return cf_fail(err, CINFER_E_UNSUPPORTED, "the CUDA backend cannot dequantize a %d-bit, group-%d weight of %lld columns",
                       w->bits, w->group, (long long)w->cols);
    const size_t bytes = (size_t)(w->rows * w->cols) * sizeof(uint16_t);
    void *p = dev_alloc(b, bytes);
    if (!p) return oom(b, bytes, "a weight", err);
    int64_t block = ((int64_t)4 << 20) / w->cols;   /* rows per host block: about 4M values */
    if (block < 1) block = 1;
    if (block > w->rows) block = w->rows;
    uint16_t *host = malloc((size_t)(block * w->cols) * sizeof *host);
    float *rowf = malloc((size_t)w->cols * sizeof *rowf);
    cudaError_t e = cudaSuccess;
    for (int64_t r0 = 0; host && rowf && r0 < w->rows && e == cudaSuccess; r0 += block) {
        const int64_t nr = w->rows - r0 < block ? w->rows - r0 : block;
        for (int64_t r = 0; r < nr; r++) {
            cf_qweight_dequant_row(w, r0 + r, rowf);
            for (int64_t c = 0; c < w->cols; c++) host[r * w->cols + c] = cf_f32_to_bf16(rowf[c]);
        }
        e = cudaMemcpyAsync((uint16_t *)p + r0 * w->cols, host, (size_t)(nr * w->cols) * sizeof *host, cudaMemcpyHostToDevice,
                            b->stream);
        if (e == cudaSuccess) e = cudaStreamSynchronize(b->stream);   /* host is refilled by the next block */
    }
    const int no_mem = !host || !rowf;
    free(host);
    free(rowf);
    if (no_mem || e != cudaSuccess) {
        dev_free(b, p);
        if (no_mem) return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of host memory dequantizing a %lldx%lld weight", (long long)w->rows,
                                   (long long)w->cols);
        return cf_fail(err, CINFER_E_DEVICE, "uploading a %lldx%lld quantized weight: %s", (long long)w->rows, (long long)w->cols,
                       cudaGetErrorString(e));
    }
    *out = (cf_tensor){.data = p, .dtype = CF_BF16, .rows = w->rows, .cols = w->cols, .stride = w->cols};
    return CINFER_OK;
}

/* 4- and 8-bit weights stay packed (k_quant.cu reads them): the words copied as they are, one allocation with the
 * (scale, bias) pairs interleaved after them (cuda_internal.h), and a backend-owned descriptor the CF_Q tensor points
 * to. Other bit widths (2, 3, 5, 6: values straddle words; no kernels for them) and shapes the kernels do not take
 * (rows not a multiple of 16 bytes, which 4 and 8 bits with groups of 32 or more never give) are dequantized to bf16
 * by upload_qweight_bf16. */
static cinfer_status cuda_upload_qweight(cf_backend *be, const cf_qweight *w, cf_tensor *out, cinfer_error *err) {
    cuda_backend *b = CB(be);
    if (!cf_qweight_bits_ok(w->bits) || !cf_qweight_group_ok(w->group) || w->cols <= 0 || w->rows <= 0 || w->cols % w->group)
        return cf_fail(err, CINFER_E_UNSUPPORTED, "the CUDA backend cannot load a %d-bit, group-%d weight of %lld columns", w->bits,
                       w->group, (long long)w->cols);
    if (w->sb_dtype != CF_F32 && w->sb_dtype != CF_BF16 && w->sb_dtype != CF_F16)
        return cf_fail(err, CINFER_E_UNSUPPORTED, "quantized weight scales of dtype %s (supported: F32, F16, BF16)", cf_dtype_name(w->sb_dtype));
    const int64_t wpr = cf_qweight_words_per_row(w->bits, w->cols);
    if ((w->bits != 4 && w->bits != 8) || (wpr * 4) % 16 || w->cols % 32) return upload_qweight_bf16(b, w, out, err);
    const size_t es = cf_dtype_size(w->sb_dtype), ng = (size_t)(w->rows * (w->cols / w->group));
    const size_t qbytes = (size_t)(w->rows * wpr) * 4, qpad = (qbytes + 255) & ~(size_t)255, sbbytes = ng * 2 * es;
    unsigned char *pairs = malloc(sbbytes);
    cf_qweight *d = malloc(sizeof *d);
    cf_qweight **nq = realloc(b->qw, (size_t)(b->n_qw + 1) * sizeof *nq);
    if (nq) b->qw = nq;
    if (!pairs || !d || !nq) {
        free(pairs);
        free(d);
        return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of host memory uploading a %lldx%lld quantized weight", (long long)w->rows,
                       (long long)w->cols);
    }
    for (size_t i = 0; i < ng; i++) {
        memcpy(pairs + 2 * i * es, (const unsigned char *)w->scales + i * es, es);
        memcpy(pairs + (2 * i + 1) * es, (const unsigned char *)w->biases + i * es, es);
    }
    unsigned char *p = dev_alloc(b, qpad + sbbytes);
    if (!p) {
        free(pairs);
        free(d);
        return oom(b, qpad + sbbytes, "a quantized weight", err);
    }
    cudaError_t e = cudaMemcpyAsync(p, w->q, qbytes, cudaMemcpyHostToDevice, b->stream);
    if (e == cudaSuccess) e = cudaMemcpyAsync(p + qpad, pairs, sbbytes, cudaMemcpyHostToDevice, b->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(b->stream);   /* pairs is freed next */
    free(pairs);
    if (e != cudaSuccess) {
        free(d);
        dev_free(b, p);
        return cf_fail(err, CINFER_E_DEVICE, "uploading a %lldx%lld quantized weight: %s", (long long)w->rows, (long long)w->cols,
                       cudaGetErrorString(e));
    }
    *d = *w;
    d->q = (const uint32_t *)p;
    d->scales = p + qpad;
    d->biases = NULL;
    b->qw[b->n_qw++] = d;
    *out = (cf_tensor){.data = d, .dtype = CF_Q, .rows = w->rows, .cols = w->cols, .stride = w->cols};
    return CINFER_OK;
}

static void cuda_write(cf_backend *be, cf_tensor dst, const void *host) {
    cuda_backend *b = CB(be);
    if (b->capturing) { fail(b, CINFER_E_INVALID_ARGUMENT, "write() while recording a graph"); return; }
    if (empty(dst)) return;
    size_t es = cf_dtype_size(dst.dtype), row = (size_t)dst.cols * es, bytes = row * (size_t)dst.rows;
    const void *src = host;
    if (bytes <= STAGING_HALF) {
        if (b->staging_used + bytes > STAGING_HALF) {   /* the other half, once its copies are done */
            check(b, cudaEventRecord(b->half_done[b->half], b->stream), "write");
            b->half_queued[b->half] = 1;
            b->half ^= 1;
            if (b->half_queued[b->half]) check(b, cudaEventSynchronize(b->half_done[b->half]), "write");
            b->half_queued[b->half] = 0;
            b->staging_used = 0;
        }
        unsigned char *at = b->staging + (size_t)b->half * STAGING_HALF + b->staging_used;
        memcpy(at, host, bytes);
        src = at;
        b->staging_used += (bytes + 63) & ~(size_t)63;
    }
    check(b, cudaMemcpy2DAsync(dst.data, (size_t)dst.stride * es, src, row, row, (size_t)dst.rows, cudaMemcpyHostToDevice, b->stream),
          "write");
}

static void cuda_read_begin(cf_backend *be, cf_tensor src, int slot) {
    cuda_backend *b = CB(be);
    const size_t n = (size_t)(src.rows * src.cols), bytes = n * cf_dtype_size(src.dtype);
    if (b->capturing) { fail(b, CINFER_E_INVALID_ARGUMENT, "read_begin() while recording a graph"); return; }
    if (slot < 0 || slot > 1 || bytes > READ_SLOT_BYTES || (src.rows > 1 && src.stride != src.cols)) {
        fail(b, CINFER_E_INVALID_ARGUMENT, "read_begin: slot %d of 0..1, %zu bytes of at most %d, contiguous", slot, bytes, READ_SLOT_BYTES);
        return;
    }
    if (src.dtype != CF_F32 && src.dtype != CF_I32 && src.dtype != CF_BF16 && src.dtype != CF_F16) {
        fail(b, CINFER_E_UNSUPPORTED, "read_begin: %s values", cf_dtype_name(src.dtype));
        return;
    }
    b->read_dtype[slot] = src.dtype;
    b->read_n[slot] = (int)n;
    check(b, cudaMemcpyAsync(b->staging + STAGING_BYTES + slot * READ_SLOT_BYTES, src.data, bytes, cudaMemcpyDeviceToHost, b->stream),
          "read_begin");
    check(b, cudaEventRecord(b->read_done[slot], b->stream), "read_begin");
}

static cinfer_status cuda_read_end(cf_backend *be, int slot, float *host, cinfer_error *err) {
    cuda_backend *b = CB(be);
    if (slot < 0 || slot > 1) return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "read_end: slot %d of 0..1", slot);
    check(b, cudaEventSynchronize(b->read_done[slot]), "read_end");
    if (b->status == CINFER_OK) cf_to_f32(host, b->staging + STAGING_BYTES + slot * READ_SLOT_BYTES, b->read_dtype[slot], (size_t)b->read_n[slot]);
    return report(b, err);
}

static void ew(cuda_backend *b, cfk_ew op, cf_tensor out, cf_tensor a, cf_tensor c, float s, const char *what) {
    if (!empty(out)) check(b, cfk_elementwise(b->stream, op, out, a, c, s), what);
}

static void cuda_fill(cf_backend *be, cf_tensor dst, float value) { ew(CB(be), CFK_FILL, dst, dst, dst, value, "fill"); }

static cinfer_status cuda_read(cf_backend *be, float *host, cf_tensor src, cinfer_error *err) {
    cuda_backend *b = CB(be);
    if (b->capturing) return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "read() while recording a graph");
    if (!empty(src)) {
        cf_tensor f = src;
        if (src.dtype != CF_F32) {
            f = (cf_tensor){.data = scratch(b, (size_t)(src.rows * src.cols) * sizeof(float)), .dtype = CF_F32,
                            .rows = src.rows, .cols = src.cols, .stride = src.cols};
            if (f.data) check(b, cfk_elementwise(b->stream, CFK_COPY, f, src, src, 0), "read");
        }
        /* small reads (logits, ids) land in the pinned staging buffer, after the writes queued before them
         * have consumed it in stream order, and are copied out after the sync */
        const size_t bytes = (size_t)(f.rows * f.cols) * 4;
        void *dst = bytes <= STAGING_BYTES ? (void *)b->staging : (void *)host;
        if (f.data && b->status == CINFER_OK)
            check(b, cudaMemcpy2DAsync(dst, (size_t)f.cols * 4, f.data, (size_t)f.stride * 4, (size_t)f.cols * 4, (size_t)f.rows,
                                       cudaMemcpyDeviceToHost, b->stream), "read");
        check(b, cudaStreamSynchronize(b->stream), "read");
        if (dst != host && b->status == CINFER_OK) memcpy(host, dst, bytes);
    } else {
        check(b, cudaStreamSynchronize(b->stream), "read");
    }
    b->staging_used = 0;
    return report(b, err);
}

static cinfer_status cuda_sync(cf_backend *be, cinfer_error *err) {
    cuda_backend *b = CB(be);
    if (b->capturing) return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "sync() while recording a graph");
    check(b, cudaStreamSynchronize(b->stream), "sync");
    b->staging_used = 0;
    return report(b, err);
}

/* ---- operations ---- */

static void cuda_embed(cf_backend *be, cf_tensor out, cf_tensor table, cf_tensor ids, float scale) {
    if (empty(out)) return;
    if (table.dtype == CF_Q) check(CB(be), cfk_qembed(CB(be)->stream, out, table.data, ids, scale), "embed (quantized)");
    else check(CB(be), cfk_embed(CB(be)->stream, out, table, ids, scale), "embed");
}

static void cuda_rmsnorm(cf_backend *be, cf_tensor out, cf_tensor x, cf_tensor w, float eps, float w_offset) {
    if (!empty(out)) check(CB(be), cfk_rmsnorm(CB(be)->stream, out, x, w, eps, w_offset), "rmsnorm");
}

static cudaDataType_t blas_type(cf_dtype t) {
    return t == CF_BF16 ? CUDA_R_16BF : t == CF_F16 ? CUDA_R_16F : CUDA_R_32F;
}

/* Many rows: cuBLAS with the activations in the weight's type (converted through scratch if needed) and
 * f32 accumulation, writing f32 or the weight's type (anything else through an f32 temporary). */
static void gemm(cuda_backend *b, cf_tensor out, cf_tensor x, cf_tensor w, cf_tensor bias) {
    const int64_t n = x.rows, k = x.cols, d = w.rows;
    int conv_x = x.dtype != w.dtype, tmp_out = out.dtype != CF_F32 && out.dtype != w.dtype;
    size_t xb = conv_x ? (size_t)(n * k) * cf_dtype_size(w.dtype) : 0, ob = tmp_out ? (size_t)(n * d) * 4 : 0;
    xb = (xb + 255) & ~(size_t)255;
    char *s = xb + ob ? scratch(b, xb + ob) : NULL;
    if (xb + ob && !s) return;
    cf_tensor xa = x, oa = out;
    if (conv_x) {
        xa = (cf_tensor){.data = s, .dtype = w.dtype, .rows = n, .cols = k, .stride = k};
        check(b, cfk_elementwise(b->stream, CFK_COPY, xa, x, x, 0), "matmul (convert)");
    }
    if (tmp_out) oa = (cf_tensor){.data = s + xb, .dtype = CF_F32, .rows = n, .cols = d, .stride = d};
    const float one = 1.0f, zero = 0.0f;
    cublasStatus_t bs = cublasGemmEx(b->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)d, (int)n, (int)k, &one, w.data, blas_type(w.dtype),
                                     (int)w.stride, xa.data, blas_type(xa.dtype), (int)xa.stride, &zero, oa.data, blas_type(oa.dtype),
                                     (int)oa.stride, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (bs != CUBLAS_STATUS_SUCCESS) {
        fail(b, CINFER_E_DEVICE, "cuBLAS GemmEx [%lld x %lld] x [%lld x %lld]^T: %s", (long long)n, (long long)k, (long long)d,
             (long long)k, cublasGetStatusString(bs));
        return;
    }
    if (tmp_out) check(b, cfk_elementwise(b->stream, CFK_COPY, out, oa, oa, 0), "matmul (convert)");
    if (bias.data) check(b, cfk_elementwise(b->stream, CFK_ADD, out, out, bias, 0), "matmul (bias)");
}

/* whether a GEMV takes x's rows: the vector kernel up to gemv_max_rows, and f32 x up to 8 rows (cuBLAS would round it
 * to bf16 first); the tensor-core kernel up to gemv_tc_max_rows where it takes x and w; else cuBLAS */
static int gemv_rows(cf_tensor x, cf_tensor w) {
    if (x.rows <= cfk_cfg.gemv_max_rows || (x.dtype == CF_F32 && x.rows <= 8)) return 1;
    return x.rows <= cfk_cfg.gemv_tc_max_rows && cfk_gemv_tc_ok(x, w);
}

/* whether a GEMV (few rows: cfk_gemv) takes x . w^T */
static int gemv_ok(cf_tensor x, cf_tensor w) {
    return gemv_rows(x, w) && cfk_gemv_vec_ok(x, w);
}

static void qjob_run(cuda_backend *b, const cfk_qjob *j, cf_tensor gate, cf_tensor up, const char *what);

static void cuda_matmul(cf_backend *be, cf_tensor out, cf_tensor x, cf_tensor w, cf_tensor bias) {
    cuda_backend *b = CB(be);
    if (empty(out)) return;
    if (w.dtype == CF_Q) {
        const cf_tensor none = {0};
        const cfk_qjob j = {.x = x, .n_seg = 1, .w = {w.data}, .out = {out}, .bias = {bias}};
        qjob_run(b, &j, none, none, "matmul (quantized)");
        return;
    }
    if (!gemv_rows(x, w) && (w.dtype == CF_BF16 || w.dtype == CF_F16)) {
        gemm(b, out, x, w, bias);
        return;
    }
    cfk_gemv_job j = {.x = x, .n_seg = 1, .out = {out}, .w = {w}, .bias = {bias}};
    check(b, cfk_gemv(b->stream, &j), "matmul");
}

static void cuda_add(cf_backend *be, cf_tensor out, cf_tensor a, cf_tensor c) { ew(CB(be), CFK_ADD, out, a, c, 0, "add"); }
static void cuda_scale(cf_backend *be, cf_tensor x, float s) { ew(CB(be), CFK_SCALE, x, x, x, s, "scale"); }
static void cuda_softcap(cf_backend *be, cf_tensor x, float cap) { ew(CB(be), CFK_SOFTCAP, x, x, x, cap, "softcap"); }
static void cuda_copy(cf_backend *be, cf_tensor dst, cf_tensor src) {
    cuda_backend *b = CB(be);
    if (dst.dtype != src.dtype || empty(dst)) {
        ew(b, CFK_COPY, dst, src, src, 0, "copy");
        return;
    }
    /* same type: the copy engine's rate */
    size_t es = cf_dtype_size(dst.dtype);
    if (dst.stride == dst.cols && src.stride == src.cols) {
        check(b, cudaMemcpyAsync(dst.data, src.data, (size_t)(dst.rows * dst.cols) * es, cudaMemcpyDeviceToDevice, b->stream), "copy");
        return;
    }
    check(b, cudaMemcpy2DAsync(dst.data, (size_t)dst.stride * es, src.data, (size_t)src.stride * es, (size_t)dst.cols * es, (size_t)dst.rows,
                               cudaMemcpyDeviceToDevice, b->stream), "copy");
}
static void cuda_glu(cf_backend *be, cf_tensor out, cf_tensor gate, cf_tensor up, cf_act act) {
    ew(CB(be), act == CF_ACT_SILU ? CFK_GLU_SILU : CFK_GLU_GELU, out, gate, up, 0, "glu");
}

static void cuda_rope(cf_backend *be, cf_tensor x, cf_tensor pos, int n_heads, int head_dim, int rot_dim, cf_tensor inv_freq) {
    if (empty(x) || rot_dim < 2) return;
    check(CB(be), cfk_rope(CB(be)->stream, 1, &x, &n_heads, pos, head_dim, rot_dim, inv_freq, NULL), "rope");
}

static void kv_store(cuda_backend *b, cf_tensor cache, cf_tensor src, int pos0, cf_tensor pos, int cap) {
    if (empty(src)) return;
    cfk_kv_args kv = {.n = 1, .cache = {cache}, .src = {src}, .pos0 = pos0, .cap = cap, .pos = pos};
    check(b, cfk_kv_store(b->stream, &kv), "kv_store");
}

static void cuda_kv_store(cf_backend *be, cf_tensor cache, cf_tensor src, int pos0, int cap) {
    cf_tensor none = {0};
    kv_store(CB(be), cache, src, pos0, none, cap);
}

/* ---- quantized matmuls (CF_Q weights: k_quant.cu) ---- */

/* whether CF_Q tensors ws[0..n) can share one job (the same bit width) */
static int q_same(const cf_tensor *ws, int n) {
    for (int i = 0; i < n; i++)
        if (ws[i].dtype != CF_Q || ((const cf_qweight *)ws[i].data)->bits != ((const cf_qweight *)ws[0].data)->bits) return 0;
    return 1;
}

/* Many activation rows (a long prefill): each weight dequantized to bf16 in wscratch, at most 32M values (64 MiB)
 * a block of rows, then cuBLAS (gemm). Per weight that reads the packed bytes, writes and reads 2 bytes more (about
 * 4.6 bytes against 2 for a bf16 weight), a few per cent of a GEMM over more than qmma_max_rows (128) rows and less
 * than the tensor-core kernel of k_quant.cu loses to cuBLAS there; the GLU and the gate run as their own ops. */
static void qjob_dequant(cuda_backend *b, const cfk_qjob *j, cf_tensor gate, cf_tensor up) {
    const int glu = j->glu_out.data != NULL;
    const cf_tensor none = {0};
    for (int s = 0; s < j->n_seg && b->status == CINFER_OK; s++) {
        const cf_qweight *w = j->w[s];
        const cf_tensor out = glu ? (s == 0 ? gate : up) : j->out[s];
        /* rows a block: as many as 32 Mi values allow, the blocks even and a multiple of 128 rows (cuBLAS took an sm80
         * kernel at 2.3x the time for Llama-3-8B's down in blocks of 2,340 and 1,756 rows: bench/results/run39) */
        int64_t cap = ((int64_t)32 << 20) / w->cols;
        if (cap < 1) cap = 1;
        const int64_t nblk = (w->rows + cap - 1) / cap;
        int64_t blk = ((w->rows + nblk - 1) / nblk + 127) / 128 * 128;
        if (blk > w->rows) blk = w->rows;
        void *ws = grow(b, &b->wscratch, &b->wscratch_size, (size_t)(blk * w->cols) * 2);
        if (!ws) return;
        for (int64_t r0 = 0; r0 < w->rows && b->status == CINFER_OK; r0 += blk) {
            const int64_t nr = w->rows - r0 < blk ? w->rows - r0 : blk;
            check(b, cfk_qdequant(b->stream, w, r0, nr, ws), "matmul (dequantize)");
            const cf_tensor wt = {.data = ws, .dtype = CF_BF16, .rows = nr, .cols = w->cols, .stride = w->cols};
            gemm(b, cf_cols(out, r0, nr), j->x, wt, j->bias[s].data ? cf_cols(j->bias[s], r0, nr) : none);
        }
    }
    const cfk_ew op = j->act == CF_ACT_SILU ? CFK_GLU_SILU : CFK_GLU_GELU;
    if (glu) ew(b, op, j->glu_out, gate, up, 0, "matmul_glu (quantized)");
    if (j->mul.data) ew(b, op, j->out[0], j->out[0], j->mul, 0, "matmul_gated (quantized)");
}

/* A quantized job by its activation rows: at most qgemv_max_rows (at most 8): the GEMV; at most qmma_max_rows: the
 * tensor-core GEMM; more: dequantize and cuBLAS. x goes to bf16 in scratch first (with the GEMM's split-k partials after
 * it) where the kernel cannot read it: for the GEMV anything but F32/BF16 with 16-byte aligned rows, for the GEMM anything
 * but such BF16. gate, up: the GLU's work space for the cuBLAS path. */
static void qjob_run(cuda_backend *b, const cfk_qjob *j, cf_tensor gate, cf_tensor up, const char *what) {
    const cf_tensor x = j->x;
    const int64_t n = x.rows, k = x.cols;
    if (n <= 0) return;
    const int gmax = cfk_cfg.qgemv_max_rows;
    if (n > gmax && n > cfk_cfg.qmma_max_rows) {
        qjob_dequant(b, j, gate, up);
        return;
    }
    cfk_qjob jj = *j;
    const size_t xes = cf_dtype_size(x.dtype);
    const int x_ok = (x.dtype == CF_BF16 || (x.dtype == CF_F32 && n <= gmax)) && (uintptr_t)x.data % 16 == 0 && ((size_t)x.stride * xes) % 16 == 0;
    const size_t xb = x_ok ? 0 : ((size_t)(n * k) * 2 + 255) & ~(size_t)255;
    const size_t pb = n > gmax ? cfk_qmma_scratch(j) : 0;
    char *s = xb + pb ? scratch(b, xb + pb) : NULL;
    if (xb + pb && !s) return;
    if (!x_ok) {
        jj.x = (cf_tensor){.data = s, .dtype = CF_BF16, .rows = n, .cols = k, .stride = k};
        check(b, cfk_elementwise(b->stream, CFK_COPY, jj.x, x, x, 0), what);
    }
    if (!cfk_qjob_ok(&jj)) {
        fail(b, CINFER_E_UNSUPPORTED, "%s: quantized weights of %d bits, group %d, %lld columns, with %s activations of %lld columns",
             what, jj.w[0]->bits, jj.w[0]->group, (long long)jj.w[0]->cols, cf_dtype_name(x.dtype), (long long)k);
        return;
    }
    if (n <= gmax) check(b, cfk_qgemv(b->stream, &jj), what);
    else check(b, cfk_qmma(b->stream, &jj, pb ? s + xb : NULL), what);
}

/* ---- fused operations (backend.h) ---- */

/* the RoPE and the KV stores of a qkv for its GEMV to do (cfk_qkv_fold) */
static cfk_qkv_fold qkv_fold(const cf_qkv_args *a, int rope, int store) {
    cfk_qkv_fold f = {0};
    if (rope) {
        f.rope[0] = 1, f.rope[1] = a->own_kv;
        f.pos = a->pos, f.inv_freq = a->inv_freq, f.head_dim = a->head_dim;
    }
    if (store) {
        f.cache[1] = a->dest.k_cache, f.cache[2] = a->dest.v_cache;
        f.store_pos = a->dest.idx, f.store_pos0 = a->dest.pos0, f.cap = a->dest.cap;
    }
    return f;
}

/* q, k, v in one GEMV launch where the vector kernel (bf16) or the tensor-core GEMV (4/8 bits) takes them; the RoPE
 * and the stores are done by the GEMV's own blocks when there are no per-head norms and the rotation covers whole
 * heads (Llama, Qwen2), else by one launch of cfk_qkv_post (per-head norms, RoPE and stores of q, k, v: Qwen3, Gemma). */
static void cuda_qkv(cf_backend *be, cf_tensor x, const cf_qkv_args *a) {
    cuda_backend *b = CB(be);
    if (empty(x)) return;
    const int own = a->own_kv, v_from_k = own && !a->wv.data, store = own && a->dest.k_cache.data != NULL;
    const int norms = a->q_norm.data || (own && (a->k_norm.data || a->v_norm.data));
    const int rope = a->rot_dim >= 2;
    /* RoPE and the stores are all there is to do, in the form the GEMVs take */
    const int foldable = !norms && !v_from_k &&
                         (!rope || (a->rot_dim == a->head_dim && a->head_dim % 2 == 0 && a->inv_freq.dtype == CF_F32 && a->pos.dtype == CF_I32));
    const cf_tensor qw[3] = {a->wq, a->wk, a->wv};
    if (a->wq.dtype == CF_Q && (!own || q_same(qw, v_from_k ? 2 : 3))) {   /* q, k, v in one quantized job */
        const cf_tensor none = {0};
        cfk_qjob j = {.x = x, .n_seg = 1, .w = {a->wq.data}, .out = {a->q}, .bias = {a->bq}};
        if (own) {
            j.w[1] = a->wk.data, j.out[1] = a->k, j.bias[1] = a->bk, j.n_seg = 2;
            if (!v_from_k) j.w[2] = a->wv.data, j.out[2] = a->v, j.bias[2] = a->bv, j.n_seg = 3;
        }
        const int fold = foldable && x.rows <= cfk_cfg.qgemv_max_rows && cfk_qgemv_folds(&j);   /* the tensor-core GEMV runs */
        if (fold) j.fold = qkv_fold(a, rope, store);
        qjob_run(b, &j, none, none, "qkv (quantized)");
        if (v_from_k) cuda_copy(be, a->v, a->k);
        if (!fold && (norms || rope || store)) check(b, cfk_qkv_post(b->stream, a), "qkv (norms, rope, stores)");
        return;
    }
    int one = gemv_ok(x, a->wq) && (!own || (gemv_ok(x, a->wk) && a->wk.dtype == a->wq.dtype &&
                                             (v_from_k || (gemv_ok(x, a->wv) && a->wv.dtype == a->wq.dtype))));
    if (one) {
        cfk_gemv_job j = {.x = x, .n_seg = 1, .out = {a->q}, .w = {a->wq}, .bias = {a->bq}};
        if (own) {
            j.out[1] = a->k, j.w[1] = a->wk, j.bias[1] = a->bk;
            j.n_seg = 2;
            if (!v_from_k) j.out[2] = a->v, j.w[2] = a->wv, j.bias[2] = a->bv, j.n_seg = 3;
        }
        if (foldable) j.fold = qkv_fold(a, rope, store);
        check(b, cfk_gemv(b->stream, &j), "qkv");
        if (foldable) return;
    } else {
        cuda_matmul(be, a->q, x, a->wq, a->bq);
        if (own) cuda_matmul(be, a->k, x, a->wk, a->bk);
        if (own && !v_from_k) cuda_matmul(be, a->v, x, a->wv, a->bv);
    }
    if (v_from_k) cuda_copy(be, a->v, a->k);
    if (norms || rope || store) check(b, cfk_qkv_post(b->stream, a), "qkv (norms, rope, stores)");
}

/* gate and up paired row by row in one GEMV launch, the GLU at its end; many rows: two GEMMs and the GLU */
static void cuda_matmul_glu(cf_backend *be, cf_tensor out, cf_tensor x, cf_tensor w_gate, cf_tensor w_up, cf_act act,
                            cf_tensor gate, cf_tensor up) {
    cuda_backend *b = CB(be);
    if (empty(out)) return;
    const cf_tensor gu[2] = {w_gate, w_up};
    if (q_same(gu, 2) && w_gate.rows == w_up.rows) {
        const cfk_qjob j = {.x = x, .n_seg = 2, .w = {w_gate.data, w_up.data}, .glu_out = out, .act = act};
        qjob_run(b, &j, gate, up, "matmul_glu (quantized)");
        return;
    }
    if (gemv_ok(x, w_gate) && gemv_ok(x, w_up) && w_gate.dtype == w_up.dtype && w_gate.rows == w_up.rows) {
        cf_tensor none = {0};
        cfk_gemv_job j = {.x = x, .n_seg = 2, .out = {none, none}, .w = {w_gate, w_up}, .glu_out = out, .act = act};
        check(b, cfk_gemv(b->stream, &j), "matmul_glu");
        return;
    }
    cf_tensor none = {0};
    cuda_matmul(be, gate, x, w_gate, none);
    cuda_matmul(be, up, x, w_up, none);
    cuda_glu(be, out, gate, up, act);
}

static void cuda_matmul_gated(cf_backend *be, cf_tensor out, cf_tensor x, cf_tensor w, cf_act act, cf_tensor m) {
    cuda_backend *b = CB(be);
    if (empty(out)) return;
    cf_tensor none = {0};
    if (w.dtype == CF_Q) {
        const cfk_qjob j = {.x = x, .n_seg = 1, .w = {w.data}, .out = {out}, .mul = m, .act = act};
        qjob_run(b, &j, none, none, "matmul_gated (quantized)");
        return;
    }
    if (gemv_ok(x, w)) {
        cfk_gemv_job j = {.x = x, .n_seg = 1, .out = {out}, .w = {w}, .bias = {none}, .mul = m, .act = act};
        check(b, cfk_gemv(b->stream, &j), "matmul_gated");
        return;
    }
    cuda_matmul(be, out, x, w, none);
    cuda_glu(be, out, out, m, act);
}

static void cuda_add_norm(cf_backend *be, cf_tensor x, cf_tensor o, cf_tensor w_o, float scale, cf_tensor h, cf_tensor w_h, float eps,
                          float w_offset) {
    if (!empty(x)) check(CB(be), cfk_add_norm(CB(be)->stream, x, o, w_o, scale, h, w_h, eps, w_offset), "add_norm");
}

static int64_t cuda_mem_available(cf_backend *be) {
    cuda_backend *b = CB(be);
    if (!b->direct) return (int64_t)cf_pool_largest_free(&b->pool);
    size_t free_b = 0, total = 0;
    return cudaMemGetInfo(&free_b, &total) == cudaSuccess ? (int64_t)free_b : 0;
}

static void cuda_kv_store_pos(cf_backend *be, cf_tensor cache, cf_tensor src, cf_tensor pos, int cap) {
    kv_store(CB(be), cache, src, 0, pos, cap);
}

static void attention(cuda_backend *b, cf_tensor out, cf_tensor q, cf_tensor k, cf_tensor v, const cf_attn_args *a,
                      const int32_t *pos_dev, int max_keys) {
    if (a->n_q <= 0) return;
    size_t sb = cfk_attention_scratch(k, v, a, max_keys);
    void *part = sb ? scratch(b, sb) : NULL;
    if (sb && !part) return;
    check(b, cfk_attention(b->stream, out, q, k, v, a, pos_dev, max_keys, part, b->attn_counters), "attention");
}

static void cuda_attention(cf_backend *be, cf_tensor out, cf_tensor q, cf_tensor k, cf_tensor v, const cf_attn_args *a) {
    int last = a->pos0 + a->n_q;   /* keys a query may see: at most last, at most window */
    attention(CB(be), out, q, k, v, a, NULL, a->window > 0 && a->window < last ? a->window : last);
}

static void cuda_attention_paged(cf_backend *be, cf_tensor out, cf_tensor q, cf_tensor k, cf_tensor v, const cf_paged_attn_args *a,
                                 const cf_batch_view *bv);

/* One query over a cache that holds every position (window 0: slot = position) at head size 512, which the
 * decode kernels of k_attention.cu do not take (their generic split kernel ran Gemma-4-E4B's full-attention
 * layers at 76 us each at ~200 keys on the H200): the paged decode kernel takes it, the cache seen as one
 * sequence whose one block is the whole cache (block size cap, table {0}). */
static int decode_as_paged(const cuda_backend *b, cf_tensor k, cf_tensor v, const cf_attn_args *a) {
    return b->paged_d512 && a->n_q == 1 && a->window == 0 && a->head_dim == 512 && a->v_head_dim == 512 && k.dtype == v.dtype &&
           (k.dtype == CF_BF16 || k.dtype == CF_F16);
}

static void cuda_attention_pos(cf_backend *be, cf_tensor out, cf_tensor q, cf_tensor k, cf_tensor v, const cf_attn_args *a, cf_tensor pos) {
    cuda_backend *b = CB(be);
    if (decode_as_paged(b, k, v, a)) {
        const cf_batch_view bv = {.pos = pos,
                                  .row_seq = {.data = b->one_seq, .dtype = CF_I32, .rows = 1, .cols = 1, .stride = 1},
                                  .seq_start = {.data = b->one_seq + 1, .dtype = CF_I32, .rows = 2, .cols = 1, .stride = 1},
                                  .slot = pos,   /* unread by attention_paged */
                                  .block_table = {.data = b->one_seq + 3, .dtype = CF_I32, .rows = 1, .cols = 1, .stride = 1},
                                  .n_rows = 1, .n_seqs = 1, .max_rows_per_seq = 1};
        const cf_paged_attn_args pa = {.n_heads = a->n_heads, .n_kv_heads = a->n_kv_heads, .head_dim = a->head_dim,
                                       .v_head_dim = a->v_head_dim, .block_size = a->cap, .table_cols = 1, .max_keys = a->cap,
                                       .window = 0, .scale = a->scale, .softcap = a->softcap};
        cuda_attention_paged(be, out, q, k, v, &pa, &bv);
        return;
    }
    attention(b, out, q, k, v, a, pos.data, a->window > 0 && a->window < a->cap ? a->window : a->cap);
}

/* cap 0: row i to slot[i] itself */
static void cuda_kv_store_slots(cf_backend *be, cf_tensor cache, cf_tensor src, cf_tensor slot) { kv_store(CB(be), cache, src, 0, slot, 0); }

static void cuda_attention_paged(cf_backend *be, cf_tensor out, cf_tensor q, cf_tensor k, cf_tensor v, const cf_paged_attn_args *a,
                                 const cf_batch_view *bv) {
    cuda_backend *b = CB(be);
    if (bv->n_rows <= 0) return;
    if (a->n_kv_heads <= 0 || a->n_heads % a->n_kv_heads || a->block_size <= 0 || a->head_dim > CFK_ATTN_MAX_D ||
        a->v_head_dim > CFK_ATTN_MAX_D) {
        fail(b, CINFER_E_UNSUPPORTED, "attention_paged: %d query heads over %d KV heads, head sizes %d/%d (at most %d), block size %d",
             a->n_heads, a->n_kv_heads, a->head_dim, a->v_head_dim, CFK_ATTN_MAX_D, a->block_size);
        return;
    }
    size_t sb = cfk_paged_scratch(k, v, a, bv);
    void *part = sb ? scratch(b, sb) : NULL;
    if (sb && !part) return;
    check(b, cfk_attention_paged(b->stream, out, q, k, v, a, bv, part, b->attn_counters), "attention_paged");
}

static void cuda_argmax(cf_backend *be, cf_tensor ids, cf_tensor logits) {
    if (!empty(logits)) check(CB(be), cfk_argmax(CB(be)->stream, ids, logits, CB(be)->pick_state), "argmax");
}

static void cuda_sample(cf_backend *be, cf_tensor ids, cf_tensor logits, cf_tensor u, const cf_sample_args *s) {
    if (!empty(logits)) check(CB(be), cfk_sample(CB(be)->stream, ids, logits, u, s), "sample");
}

/* ---- graphs ---- */

static cinfer_status cuda_graph_begin(cf_backend *be, cinfer_error *err) {
    cuda_backend *b = CB(be);
    if (b->capturing) return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "graph_begin while already recording");
    CF_TRY(report(b, err));
    cudaError_t e = cudaStreamBeginCapture(b->stream, cudaStreamCaptureModeThreadLocal);
    if (e != cudaSuccess) return cf_fail(err, CINFER_E_DEVICE, "CUDA graph capture: %s", cudaGetErrorString(e));
    b->capturing = 1;
    return CINFER_OK;
}

static cinfer_status cuda_graph_end(cf_backend *be, cf_graph **out, cinfer_error *err) {
    cuda_backend *b = CB(be);
    *out = NULL;
    if (!b->capturing) return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "graph_end without graph_begin");
    b->capturing = 0;
    cudaGraph_t g = NULL;
    check(b, cudaStreamEndCapture(b->stream, &g), "graph capture");
    cudaGraphExec_t exec = NULL;
    if (b->status == CINFER_OK) check(b, cudaGraphInstantiate(&exec, g, 0), "graph instantiate");
    if (g) cudaGraphDestroy(g);
    if (b->status != CINFER_OK) {
        if (exec) cudaGraphExecDestroy(exec);
        return report(b, err);
    }
    cf_graph *r = malloc(sizeof *r);
    if (!r) {
        cudaGraphExecDestroy(exec);
        return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory");
    }
    r->exec = exec;
    *out = r;
    return CINFER_OK;
}

static void cuda_graph_launch(cf_backend *be, cf_graph *g) {
    check(CB(be), cudaGraphLaunch(g->exec, CB(be)->stream), "graph launch");
}

static void cuda_graph_free(cf_backend *be, cf_graph *g) {
    if (!g) return;
    cudaGraphExecDestroy(g->exec);
    free(g);
}

/* ---- lifetime ---- */

static void cuda_destroy(cf_backend *be) {
    cuda_backend *b = CB(be);
    if (b->capturing) {
        cudaGraph_t g = NULL;
        cudaStreamEndCapture(b->stream, &g);
        if (g) cudaGraphDestroy(g);
    }
    if (b->stream) cudaStreamSynchronize(b->stream);
    if (b->blas) cublasDestroy(b->blas);
    if (b->direct) {
        for (int i = 0; i < b->n_direct; i++) cudaFree(b->direct_ptrs[i]);
        free(b->direct_ptrs);
    } else {
        cf_pool_release(&b->pool);
        if (b->pool_mem) cudaFree(b->pool_mem);
    }
    free(b->retired);
    for (int i = 0; i < b->n_qw; i++) free(b->qw[i]);
    free(b->qw);
    if (b->staging) cudaFreeHost(b->staging);
    for (int i = 0; i < 2; i++) {
        if (b->read_done[i]) cudaEventDestroy(b->read_done[i]);
        if (b->half_done[i]) cudaEventDestroy(b->half_done[i]);
    }
    if (b->stream) cudaStreamDestroy(b->stream);
    free(b);
}

static const cf_backend_ops cuda_ops = {
    .name = "cuda",
    .destroy = cuda_destroy,
    .alloc = cuda_alloc,
    .upload_weight = cuda_upload_weight,
    .upload_qweight = cuda_upload_qweight,
    .free_tensor = cuda_free_tensor,
    .write = cuda_write,
    .fill = cuda_fill,
    .read = cuda_read,
    .read_begin = cuda_read_begin,
    .read_end = cuda_read_end,
    .sync = cuda_sync,
    .embed = cuda_embed,
    .rmsnorm = cuda_rmsnorm,
    .matmul = cuda_matmul,
    .add = cuda_add,
    .scale = cuda_scale,
    .glu = cuda_glu,
    .softcap = cuda_softcap,
    .rope = cuda_rope,
    .kv_store = cuda_kv_store,
    .attention = cuda_attention,
    .copy = cuda_copy,
    .kv_store_pos = cuda_kv_store_pos,
    .attention_pos = cuda_attention_pos,
    .mem_available = cuda_mem_available,
    .kv_store_slots = cuda_kv_store_slots,
    .attention_paged = cuda_attention_paged,
    .argmax = cuda_argmax,
    .sample = cuda_sample,
    .qkv = cuda_qkv,
    .matmul_glu = cuda_matmul_glu,
    .matmul_gated = cuda_matmul_gated,
    .add_norm = cuda_add_norm,
    .graph_begin = cuda_graph_begin,
    .graph_end = cuda_graph_end,
    .graph_launch = cuda_graph_launch,
    .graph_free = cuda_graph_free,
};

static cinfer_status setup(cuda_backend *b, const cf_backend_params *p, cinfer_error *err) {
    cudaError_t e = cudaStreamCreateWithFlags(&b->stream, cudaStreamNonBlocking);
    if (e == cudaSuccess) e = cfk_init();
    if (e == cudaSuccess) e = cfk_paged_init();
    if (e == cudaSuccess) e = cudaMallocHost((void **)&b->staging, STAGING_BYTES + 2 * READ_SLOT_BYTES);
    for (int i = 0; i < 2 && e == cudaSuccess; i++) e = cudaEventCreateWithFlags(&b->read_done[i], cudaEventDisableTiming);
    for (int i = 0; i < 2 && e == cudaSuccess; i++) e = cudaEventCreateWithFlags(&b->half_done[i], cudaEventDisableTiming);
    if (e != cudaSuccess) return cf_fail(err, CINFER_E_DEVICE, "CUDA setup: %s", cudaGetErrorString(e));
    b->direct = p->tuning.cuda_direct_alloc;
    if (!b->direct) {
        size_t free_b = 0, total = 0;
        e = cudaMemGetInfo(&free_b, &total);
        if (e != cudaSuccess) return cf_fail(err, CINFER_E_DEVICE, "cudaMemGetInfo: %s", cudaGetErrorString(e));
        size_t want = p->pool_bytes ? p->pool_bytes : free_b > 2 * POOL_RESERVE ? free_b - POOL_RESERVE : free_b / 2;
        if (cudaMalloc(&b->pool_mem, want) != cudaSuccess) {
            cudaGetLastError();
            return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "cannot allocate a GPU memory pool of %zu bytes (%zu of %zu free)", want,
                           free_b, total);
        }
        if (cf_pool_init(&b->pool, b->pool_mem, want)) return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory");
    }
    b->blas_ws = dev_alloc(b, BLAS_WORKSPACE);
    if (!b->blas_ws) return oom(b, BLAS_WORKSPACE, "the cuBLAS workspace", err);
    b->attn_counters = dev_alloc(b, CFK_ATTN_COUNTERS * sizeof(int));
    if (!b->attn_counters) return oom(b, CFK_ATTN_COUNTERS * sizeof(int), "attention counters", err);
    b->pick_state = dev_alloc(b, CFK_PICK_ROWS * 2 * sizeof(unsigned long long));
    if (!b->pick_state) return oom(b, CFK_PICK_ROWS * 2 * sizeof(unsigned long long), "argmax state", err);
    static const int one_seq[4] = {0, 0, 1, 0};
    b->one_seq = dev_alloc(b, sizeof one_seq);
    if (!b->one_seq) return oom(b, sizeof one_seq, "a batch table", err);
    e = cudaMemsetAsync(b->attn_counters, 0, CFK_ATTN_COUNTERS * sizeof(int), b->stream);
    if (e == cudaSuccess) e = cudaMemsetAsync(b->pick_state, 0, CFK_PICK_ROWS * 2 * sizeof(unsigned long long), b->stream);
    if (e == cudaSuccess) e = cudaMemcpyAsync(b->one_seq, one_seq, sizeof one_seq, cudaMemcpyHostToDevice, b->stream);
    if (e != cudaSuccess) return cf_fail(err, CINFER_E_DEVICE, "CUDA memset: %s", cudaGetErrorString(e));
    cublasStatus_t bs = cublasCreate(&b->blas);
    if (bs == CUBLAS_STATUS_SUCCESS) bs = cublasSetStream(b->blas, b->stream);
    if (bs == CUBLAS_STATUS_SUCCESS) bs = cublasSetWorkspace(b->blas, b->blas_ws, BLAS_WORKSPACE);
    if (bs != CUBLAS_STATUS_SUCCESS) return cf_fail(err, CINFER_E_DEVICE, "cuBLAS setup: %s", cublasGetStatusString(bs));
    return CINFER_OK;
}

cinfer_status cf_cuda_backend_create(const cf_backend_params *p, cf_backend **out, cinfer_error *err) {
    *out = NULL;
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return cf_fail(err, CINFER_E_NO_DEVICE, "no usable CUDA device: %s (CUDA error %d)", cudaGetErrorString(e), (int)e);
    }
    if (count == 0) return cf_fail(err, CINFER_E_NO_DEVICE, "no CUDA device found");
    if (p->gpu_index < 0 || p->gpu_index >= count)
        return cf_fail(err, CINFER_E_NO_DEVICE, "GPU index %d does not exist (%d CUDA device%s)", p->gpu_index, count, count == 1 ? "" : "s");
    struct cudaDeviceProp prop;
    e = cudaSetDevice(p->gpu_index);
    if (e == cudaSuccess) e = cudaGetDeviceProperties(&prop, p->gpu_index);
    if (e != cudaSuccess) return cf_fail(err, CINFER_E_NO_DEVICE, "CUDA device %d: %s", p->gpu_index, cudaGetErrorString(e));
    if (prop.major < 9)
        return cf_fail(err, CINFER_E_UNSUPPORTED, "%s has compute capability %d.%d; this build of cinfer runs on 9.0 (Hopper) and newer",
                       prop.name, prop.major, prop.minor);
    cfk_cfg.n_sm = prop.multiProcessorCount;
    const cf_tuning *t = &p->tuning;
    cfk_cfg.pdl = t->pdl;
    cfk_cfg.gemv_unroll = t->gemv_unroll;
    /* gemv_max_rows 1 (f32 x: 8, see gemv_rows): Llama-3-8B through the engine on the H200, 8 sequences 1495 tokens/s (5.26 ms a step) with cuBLAS
     * from 2 rows against 588 (13.6 ms) with the GEMV up to 8 rows; the GEMV's cost grows with its rows (one load of x
     * and 16 FMAs a row per 16 bytes of weight: 22-27% of the copy rate at 8 rows) where cuBLAS's does not */
    cfk_cfg.gemv_max_rows = t->gemv_max_rows < 8 ? t->gemv_max_rows : 8;
    /* gemv_tc_max_rows 16: the tensor-core GEMV, not cuBLAS, for 2-16 rows. Llama-3-8B on an H100 (bench/results/run27,
     * bench/gemv_tc_ab.sh, two alternated rounds): the k = 8 verify step 1.126x / 1.124x a plain step against 1.248x /
     * 1.242x, 8 sequences through the engine 1,305 tokens/s against 1,179-1,180, 16: 2,340-2,343 against 2,197-2,209,
     * 1 the same. On the H200 an earlier variant (8 warps a block, chunks t and 4 + t) lost (1.336x against 1.284x,
     * 16 sequences 2,486 against 2,868); this one has not run there */
    cfk_cfg.gemv_tc_max_rows = t->gemv_tc_max_rows < 16 ? t->gemv_tc_max_rows : 16;
    /* gemv_warps 8: every Llama-3-8B GEMV one warp a unit (its step on the H200: 239.2 tokens/s against 236.6
     * with 16, one chunk a batch; one-row units earlier: 224.2-224.7 against 217.7-218.0 with 16, 215.9-216.3
     * with 32) */
    cfk_cfg.gemv_warps = t->gemv_warps;
    /* gemv_block_warps 4: on the H200 the Llama-3-8B step ran at 240.7 tokens/s with 4, 239.2 with 2 (one-row
     * units earlier: 219.2 with 4 or 2, 217.6-218.3 with 8) */
    cfk_cfg.gemv_block_warps = t->gemv_block_warps == 2 || t->gemv_block_warps == 8 ? t->gemv_block_warps : 4;
    cfk_cfg.attn_bc = t->attn_bc;
    /* attn_hpb 2: Llama-3-8B prefill of 4096 tokens at 29359 tokens/s on the H200, against 28922 with 1 and
     * 27674 with 4 */
    cfk_cfg.attn_hpb = t->attn_hpb;
    /* attn_group 1: Llama-3-8B decode (128 + 256) at 232.4 and 232.9 tokens/s on the H200, against 231.0 and
     * 231.3 with the kernel per query head; after 4096 tokens 210.4 against 202.8 */
    cfk_cfg.attn_group = t->attn_group;
    /* attn_group_splits 64: Llama-3-8B decode after 4096 tokens at 210.4 tokens/s on the H200, against 200.9
     * with 32 */
    cfk_cfg.attn_group_splits = t->attn_group_splits >= 1 && t->attn_group_splits <= 64 ? t->attn_group_splits : 64;
    /* attn_cluster 1: Gemma-4-E4B decode (128 + 256) at 223.49 and 223.50 tokens/s on the H100, against 221.81 and
     * 221.82; its 35 sliding-window attention launches 9.08 us each against 11.08 (bench/results/run33/attn-cluster) */
    cfk_cfg.attn_cluster = t->attn_cluster;
    /* paged_mma_group 0: on the H200 (cuda_bench --paged) the CUDA-core kernel decodes 32/8 heads of 128 in 5.7 us
     * at 1 x 256 keys and 40.5 at 64 x 256, against 8.0 and 42.5 on tensor cores; tensor cores win at 128 x 256
     * (58.5 against 62.0), at 32 x 4096 (213 with 8 blocks per SM, against 253) and for head size 512 at 8 x 256
     * (26.7 against 37.4), and lose at head size 512 otherwise (1 x 256: 22.3 against 19.1; 128 x 256: 114.8
     * against 90.6) */
    cfk_cfg.paged_mma_group = t->paged_mma_group;
    /* paged_sm_blocks 3: Llama-3-8B through the engine (128 + 128) on an H100, rate while all decode at 1 / 8 / 16 / 32 /
     * 64 / 128 sequences: 176.34 / 1,160 / 2,244 / 4,245 / 7,952 / 12,923 tokens/s, against 176.17 / 1,168 / 2,250 /
     * 4,227 / 7,669 / 12,932 with 4 (at 64 rows the 8 KV heads make 512 blocks; 4 a SM asked for a second split, which
     * only added partial writes and a merge); one sequence after 4096 tokens 161.67 against 161.83 */
    cfk_cfg.paged_sm_blocks = t->paged_sm_blocks >= 1 ? t->paged_sm_blocks : 3;
    /* qmma_max_rows 128: not measured yet; by count, the tensor-core kernel must beat cuBLAS on the dequantized
     * weight (about 4.6 bytes a weight instead of 0.56 read) while its math is not yet cuBLAS's */
    cfk_cfg.qmma_max_rows = t->qmma_max_rows;
    cfk_cfg.qgemv_max_rows = t->qgemv_max_rows < 8 ? t->qgemv_max_rows : 8;
    cfk_cfg.qgemv_warps = t->qgemv_warps >= 1 ? t->qgemv_warps : 24;   /* 24: not measured yet */
    cfk_cfg.qgemv_tc = t->qgemv_tc;
    /* qgemv_tc_splits 8: the split stays within one wave (k_quant.cu), which leaves Llama-3-8B at 2 for o and down.
     * H100, q4 decode 342.20 -> 361.07 tokens/s, q8 255.50 -> 259.78 against the old rule (bench/results/run36). The
     * old rule, splitting while the blocks were fewer than 4 an SM, spilled into a second wave: on the H200 339.84
     * tokens/s unsplit against 317.50 at 2 (run25), so it was off by default. */
    cfk_cfg.qgemv_tc_splits = t->qgemv_tc_splits >= 8 ? 8 : t->qgemv_tc_splits >= 4 ? 4 : t->qgemv_tc_splits >= 2 ? 2 : 1;

    cuda_backend *b = calloc(1, sizeof *b);
    if (!b) return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory");
    b->ops = cuda_ops;
    if (!t->fused_ops) b->ops.qkv = NULL, b->ops.matmul_glu = NULL, b->ops.matmul_gated = NULL, b->ops.add_norm = NULL;
    b->base.ops = &b->ops;
    b->base.act_dtype = t->cuda_f32_act ? CF_F32 : CF_BF16;
    b->paged_d512 = t->attn_paged_d512;
    b->base.n_threads = 1;
    b->base.async = 1;
    b->base.prefill_chunk = 4096;   /* measured on the H200 (cuda_bench): 4096 tokens at 59% of the GEMM rate in 4096-token passes, 37% in 256 */
    b->device = p->gpu_index;
    cinfer_status st = setup(b, p, err);
    if (st != CINFER_OK) {
        cuda_destroy(&b->base);
        return st;
    }
    *out = &b->base;
    return CINFER_OK;
}

/* ---- helpers for tests and benchmarks (cuda_backend.h) ---- */

void cf_cuda_fill_random(cf_backend *be, cf_tensor t, uint64_t seed, float scale) {
    if (empty(t)) return;
    check(CB(be), cfk_fill_random(CB(be)->stream, t, seed, scale), "fill_random");
    check(CB(be), cudaStreamSynchronize(CB(be)->stream), "fill_random");   /* it may fill weights: see upload_weight */
}

cinfer_status cf_cuda_memcpy_bandwidth(cf_backend *be, size_t bytes, int reps, double *gb_s, cinfer_error *err) {
    cuda_backend *b = CB(be);
    char *src = dev_alloc(b, bytes), *dst = dev_alloc(b, bytes);
    cudaEvent_t e0 = NULL, e1 = NULL;
    cinfer_status st = CINFER_OK;
    if (!src || !dst) st = oom(b, bytes, "the copy benchmark", err);
    if (st == CINFER_OK) {
        check(b, cudaMemsetAsync(src, 1, bytes, b->stream), "memset");
        check(b, cudaEventCreate(&e0), "event");
        check(b, cudaEventCreate(&e1), "event");
        check(b, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, b->stream), "memcpy");
        check(b, cudaEventRecord(e0, b->stream), "event");
        for (int r = 0; r < reps; r++) check(b, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, b->stream), "memcpy");
        check(b, cudaEventRecord(e1, b->stream), "event");
        check(b, cudaStreamSynchronize(b->stream), "memcpy");
        float ms = 0;
        if (b->status == CINFER_OK) check(b, cudaEventElapsedTime(&ms, e0, e1), "event");
        *gb_s = ms > 0 ? 2.0 * (double)bytes * reps / (ms * 1e-3) / 1e9 : 0;
        st = report(b, err);
    }
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    dev_free(b, src);
    dev_free(b, dst);
    return st;
}
