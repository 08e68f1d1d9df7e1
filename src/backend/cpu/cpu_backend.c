/* cpu_backend.c: the reference backend. Float32 activations, weights used in place from the mmapped
 * files (f32, bf16, f16, and MLX affine-quantized: matmul through cf_cpu_qgemm; a float matrix off a 64-byte
 * boundary is copied to one), its worker pool (cpu_workers.h)
 * over output rows. Every operation but attention (cpu_attention.c) is written out plainly: this file is
 * the definition of what each op in backend.h computes. Its memory is host memory, so the *_pos ops read
 * their positions directly and sample runs the host sampler (sample/sampler.h); there are no graph ops.
 * The only op that can fail is sample: its failure is kept and reported (then forgotten) by the next
 * read or sync. */
#define _DEFAULT_SOURCE   /* madvise */
#include "backend/backend.h"
#include "backend/cpu/cpu_attention.h"
#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/cpu_workers.h"
#include "backend/cpu/cpu_quant.h"
#include "base/status.h"
#include "sample/sampler.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* A quantized weight as uploaded: the descriptor (first, so a CF_Q tensor's data reads as a cf_qweight) and,
 * where the AVX2 or AVX-512 kernels run, the 4- and 8-bit values regrouped for their decode (cf_cpu_qpack), owned here. */
typedef struct cpu_qweight {
    cf_qweight w;
    uint8_t *tiles;
} cpu_qweight;

typedef struct cpu_backend {
    cf_backend base;
    cf_backend_ops ops;       /* cpu_ops, less the fused ops where tuning.fused_ops is 0 */
    cinfer_status status;     /* the first failure since the last read or sync */
    char message[sizeof(((cinfer_error *)0)->message)];
    cf_sampler *smp;          /* op sample: a sampler with smp_args over smp_vocab tokens, kept between calls */
    cf_sample_args smp_args;
    int64_t smp_vocab;
    float read_vals[2][CF_READ_SLOT_VALUES];   /* read_begin's slots (ops run when enqueued: the values are read at once) */
    int read_n[2];
    cf_workers *pool;            /* base.n_threads threads, this one included */
    cf_attn_scratch attn;     /* the attention's work space, grown as needed and kept */
    cf_cpu_isa_level isa;     /* the attention kernels' instruction set */
    cpu_qweight **qw;         /* the quantized weights uploaded (CF_Q tensors point at them) */
    int n_qw;
    void **copies;            /* 64-byte aligned copies of weights whose mapping was not (cpu_upload_weight) */
    int n_copies;
} cpu_backend;

static cpu_backend *CPU(cf_backend *be) { return (cpu_backend *)be; }

/* what the quantized kernels take: the descriptor, with the packed copy where there is one */
static cf_qmat qmat_of(const cpu_qweight *cq) {
    const cf_qweight *q = &cq->w;
    return (cf_qmat){.q = q->q, .scales = q->scales, .biases = q->biases, .sb_dtype = q->sb_dtype, .bits = q->bits,
                     .group = q->group, .rows = q->rows, .cols = q->cols, .tiles = cq->tiles};
}

static void fail(cpu_backend *b, cinfer_status code, const char *msg) {
    if (b->status != CINFER_OK) return;
    b->status = code;
    snprintf(b->message, sizeof b->message, "%s", msg);
}

static cinfer_status report(cpu_backend *b, cinfer_error *err) {
    cinfer_status st = b->status;
    if (st == CINFER_OK) return CINFER_OK;
    b->status = CINFER_OK;
    return cf_fail(err, st, "%s", b->message);
}

/* Below this many multiply-adds an op runs on one thread: waking the workers costs more than it saves. */
#define PAR_MIN_WORK (1 << 18)

static float *row(cf_tensor t, int64_t r) { return (float *)t.data + r * t.stride; }

/* An op over rows: body(ctx, r0, r1) on shares of the rows, on every thread when `parallel`. */
typedef struct rows_job {
    void (*body)(void *ctx, int64_t r0, int64_t r1);
    void *ctx;
    int64_t rows;
} rows_job;

static void rows_share(void *arg, int t, int T) {
    const rows_job *j = arg;
    int64_t r0, r1;
    cf_workers_share(j->rows, 1, t, T, &r0, &r1);
    if (r0 < r1) j->body(j->ctx, r0, r1);
}

static void par_rows(cf_backend *be, int64_t rows, int parallel, void (*body)(void *, int64_t, int64_t), void *ctx) {
    rows_job j = {body, ctx, rows};
    cf_workers_run(CPU(be)->pool, parallel ? be->n_threads : 1, rows_share, &j);
}

static void cpu_destroy(cf_backend *be) {
    cf_sampler_free(CPU(be)->smp);
    free(CPU(be)->attn.buf);
    for (int i = 0; i < CPU(be)->n_qw; i++) {
        free(CPU(be)->qw[i]->tiles);
        free(CPU(be)->qw[i]);
    }
    free(CPU(be)->qw);
    for (int i = 0; i < CPU(be)->n_copies; i++) free(CPU(be)->copies[i]);
    free(CPU(be)->copies);
    cf_workers_free(CPU(be)->pool);
    free(be);
}

static cinfer_status cpu_alloc(cf_backend *be, cf_dtype dt, int64_t rows, int64_t cols, cf_tensor *out, cinfer_error *err) {
    size_t bytes = (size_t)(rows * cols) * cf_dtype_size(dt);
    size_t padded = (bytes + 63) & ~(size_t)63;
    void *p = aligned_alloc(64, padded ? padded : 64);
    if (!p) return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "cannot allocate %zu bytes of host memory", bytes);
    memset(p, 0, padded ? padded : 64);
    *out = (cf_tensor){.data = p, .dtype = dt, .rows = rows, .cols = cols, .stride = cols};
    return CINFER_OK;
}

static cinfer_status cpu_upload_weight(cf_backend *be, const void *host, cf_dtype dt, int64_t rows, int64_t cols,
                                       cf_tensor *out, cinfer_error *err) {
    if (dt != CF_F32 && dt != CF_BF16 && dt != CF_F16)
        return cf_fail(err, CINFER_E_UNSUPPORTED, "the CPU backend computes with F32, BF16 or F16 weights, not %s", cf_dtype_name(dt));
    *out = (cf_tensor){.data = (void *)host, .dtype = dt, .rows = rows, .cols = cols, .stride = cols};
    if ((uintptr_t)host % 64 == 0 || rows < 2) return CINFER_OK;
    /* A matrix off a 64-byte boundary (safetensors aligns its data to 8 bytes) is copied to one: every 64-byte
     * load of it would otherwise span two cache lines (bench_cpu_matmul, bf16 at 16 bytes off: prefill GEMM 15-18%
     * slower, one-row GEMV 10-25%). */
    cpu_backend *b = CPU(be);
    const size_t bytes = (size_t)(rows * cols) * cf_dtype_size(dt);
    void **nc = realloc(b->copies, (size_t)(b->n_copies + 1) * sizeof *nc);
    if (!nc) return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory");
    b->copies = nc;
    void *p = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    if (!p) return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "cannot allocate %zu bytes of host memory for an aligned weight copy", bytes);
    memcpy(p, host, bytes);
    b->copies[b->n_copies++] = p;
#ifdef MADV_COLD
    /* the source's whole pages are now read only by whoever else maps them: first in line for reclaim (a hint;
     * their contents stay), so a model does not hold its file pages and its copy both */
    const uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE), a = ((uintptr_t)host + pg - 1) & ~(pg - 1),
                    e = ((uintptr_t)host + bytes) & ~(pg - 1);
    if (e > a) madvise((void *)a, e - a, MADV_COLD);
#endif
    out->data = p;
    return CINFER_OK;
}

/* The packed values, scales and biases stay where they are (the mapping); the backend owns a copy of the
 * descriptor, which the CF_Q tensor points to, and, where the AVX2 or AVX-512 kernels run, a copy of 4- and
 * 8-bit values regrouped for them (decoding reads it as one stream per 16 rows; without memory for it the
 * mapping serves, slower, with the same results). */
static cinfer_status cpu_upload_qweight(cf_backend *be, const cf_qweight *w, cf_tensor *out, cinfer_error *err) {
    cpu_backend *b = CPU(be);
    if (!cf_qweight_bits_ok(w->bits) || !cf_qweight_group_ok(w->group) || w->cols % w->group)
        return cf_fail(err, CINFER_E_UNSUPPORTED, "the CPU backend has no %d-bit, group-%d quantized matmul for %lld columns", w->bits,
                       w->group, (long long)w->cols);
    if (w->sb_dtype != CF_F32 && w->sb_dtype != CF_BF16 && w->sb_dtype != CF_F16)
        return cf_fail(err, CINFER_E_UNSUPPORTED, "quantized weight scales of dtype %s (supported: F32, F16, BF16)", cf_dtype_name(w->sb_dtype));
    cpu_qweight *d = malloc(sizeof *d);
    cpu_qweight **nq = realloc(b->qw, (size_t)(b->n_qw + 1) * sizeof *nq);
    if (!d || !nq) {
        free(d);
        if (nq) b->qw = nq;
        return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory");
    }
    d->w = *w;
    d->tiles = NULL;
    if ((w->bits == 4 || w->bits == 8) && cf_cpu_qpack_useful()) {
        const cf_qmat qm = qmat_of(d);
        d->tiles = cf_cpu_qpack(&qm);
    }
    b->qw = nq;
    b->qw[b->n_qw++] = d;
    *out = (cf_tensor){.data = d, .dtype = CF_Q, .rows = w->rows, .cols = w->cols, .stride = w->cols};
    return CINFER_OK;
}

static void cpu_free_tensor(cf_backend *be, cf_tensor *t) {
    free(t->data);
    t->data = NULL;
}

static void cpu_write(cf_backend *be, cf_tensor dst, const void *host) {
    size_t rb = (size_t)dst.cols * cf_dtype_size(dst.dtype);
    for (int64_t r = 0; r < dst.rows; r++)
        memcpy((char *)dst.data + (size_t)(r * dst.stride) * cf_dtype_size(dst.dtype), (const char *)host + r * rb, rb);
}

static void cpu_fill(cf_backend *be, cf_tensor dst, float v) {
    for (int64_t r = 0; r < dst.rows; r++)
        for (int64_t c = 0; c < dst.cols; c++) row(dst, r)[c] = v;
}

static cinfer_status cpu_read(cf_backend *be, float *host, cf_tensor src, cinfer_error *err) {
    size_t es = cf_dtype_size(src.dtype);
    for (int64_t r = 0; r < src.rows; r++)
        cf_to_f32(host + r * src.cols, (const char *)src.data + (size_t)(r * src.stride) * es, src.dtype, (size_t)src.cols);
    return report(CPU(be), err);
}

static void cpu_read_begin(cf_backend *be, cf_tensor src, int slot) {
    cpu_backend *b = CPU(be);
    const int64_t n = src.rows * src.cols;
    if (slot < 0 || slot > 1 || n > CF_READ_SLOT_VALUES || (src.rows > 1 && src.stride != src.cols)) {
        fail(b, CINFER_E_INVALID_ARGUMENT, "read_begin: slot 0 or 1, at most 4096 contiguous values (CF_READ_SLOT_VALUES)");
        return;
    }
    cf_to_f32(b->read_vals[slot], src.data, src.dtype, (size_t)n);
    b->read_n[slot] = (int)n;
}

static cinfer_status cpu_read_end(cf_backend *be, int slot, float *host, cinfer_error *err) {
    cpu_backend *b = CPU(be);
    if (slot < 0 || slot > 1) return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "read_end: slot %d of 0..1", slot);
    memcpy(host, b->read_vals[slot], (size_t)b->read_n[slot] * sizeof *host);
    return report(b, err);
}

static cinfer_status cpu_sync(cf_backend *be, cinfer_error *err) { return report(CPU(be), err); }

/* An id outside the table (an argmax's -1 for non-finite logits, copied into a queued step's input) gathers
 * zeros, as on CUDA. */
static void cpu_embed(cf_backend *be, cf_tensor out, cf_tensor table, cf_tensor ids, float scale) {
    const int32_t *id = ids.data;
    size_t es = cf_dtype_size(table.dtype);
    for (int64_t i = 0; i < out.rows; i++) {
        float *o = row(out, i);
        if (id[i] < 0 || id[i] >= table.rows) {
            memset(o, 0, (size_t)out.cols * sizeof *o);
            continue;
        }
        if (table.dtype == CF_Q) cf_qweight_dequant_row(table.data, id[i], o);
        else cf_to_f32(o, (const char *)table.data + (size_t)((int64_t)id[i] * table.stride) * es, table.dtype, (size_t)out.cols);
        if (scale != 1.0f)
            for (int64_t c = 0; c < out.cols; c++) o[c] *= scale;
    }
}

typedef struct norm_job {
    cf_tensor out, x;
    const float *w;
    float eps, w_offset;
} norm_job;

/* y = x / sqrt(mean(x^2) + eps) * (w + w_offset) */
static void rmsnorm_rows(void *ctx, int64_t r0, int64_t r1) {
    const norm_job *j = ctx;
    const int64_t n = j->x.cols;
    for (int64_t r = r0; r < r1; r++) {
        const float *xr = row(j->x, r);
        float *o = row(j->out, r);
        double ss = 0;
        for (int64_t c = 0; c < n; c++) ss += (double)xr[c] * xr[c];
        float inv = 1.0f / sqrtf((float)(ss / (double)n) + j->eps);
        for (int64_t c = 0; c < n; c++) o[c] = xr[c] * inv * (j->w[c] + j->w_offset);
    }
}

static void cpu_rmsnorm(cf_backend *be, cf_tensor out, cf_tensor x, cf_tensor w, float eps, float w_offset) {
    int64_t n = x.cols;
    float *wf = malloc((size_t)n * sizeof *wf);
    if (!wf) return;
    cf_to_f32(wf, w.data, w.dtype, (size_t)n);
    norm_job j = {out, x, wf, eps, w_offset};
    par_rows(be, x.rows, x.rows * x.cols >= PAR_MIN_WORK, rmsnorm_rows, &j);
    free(wf);
}

static float elem_f32(const void *p, cf_dtype t, int64_t i) {
    switch (t) {
    case CF_BF16: return cf_bf16_to_f32(((const uint16_t *)p)[i]);
    case CF_F16: return cf_f16_to_f32(((const uint16_t *)p)[i]);
    default: return ((const float *)p)[i];
    }
}

/* out = x . w^T, the share of thread t of T: a contiguous block of weight rows (whole tiles of
 * CF_GEMM_ROW_BLOCK rows), streamed once per L2-sized panel of x through the tiled kernel (quantized weights:
 * cf_cpu_qgemm). The kernels compute every element the same way for any n, row position or split, so a row's
 * values depend neither on the batch it is in nor on the thread count. */
static void matmul_share(cf_tensor out, cf_tensor x, cf_tensor w, int t, int T) {
    const int64_t n = x.rows, k = x.cols;
    int64_t j0, j1;
    cf_workers_share(w.rows, CF_GEMM_ROW_BLOCK, t, T, &j0, &j1);
    if (j1 <= j0) return;
    if (w.dtype == CF_Q) {
        const cf_qmat qm = qmat_of(w.data);
        cf_cpu_qgemm(x.data, x.stride, n, &qm, j0, j1, (float *)out.data + j0, out.stride);
        return;
    }
    const size_t wrow = (size_t)w.stride * cf_dtype_size(w.dtype);
    cf_cpu_gemm_kernel(w.dtype)(x.data, x.stride, n, (const char *)w.data + (size_t)j0 * wrow, w.stride, j1 - j0, k,
                                (float *)out.data + j0, out.stride);
}

static void add_bias(cf_tensor out, cf_tensor bias) {
    if (!bias.data) return;
    for (int64_t i = 0; i < out.rows; i++)
        for (int64_t j = 0; j < out.cols; j++) row(out, i)[j] += elem_f32(bias.data, bias.dtype, j);
}

/* out[e] = x . w[e]^T + bias[e] for `count` weights that share x, in one parallel region (one wake-up of the
 * threads instead of count: decoding runs a region in well under a millisecond); the values are those of
 * count separate products. */
typedef struct matmuls_job {
    int count;
    const cf_tensor *out, *w;
    cf_tensor x;
} matmuls_job;

static void matmuls_share(void *ctx, int t, int T) {
    const matmuls_job *j = ctx;
    for (int e = 0; e < j->count; e++) matmul_share(j->out[e], j->x, j->w[e], t, T);
}

static void cpu_matmuls(cf_backend *be, int count, const cf_tensor *out, cf_tensor x, const cf_tensor *w, const cf_tensor *bias) {
    int64_t work = 0, blocks = 0;
    for (int e = 0; e < count; e++) {
        work += x.rows * x.cols * w[e].rows;
        const int64_t b = (w[e].rows + CF_GEMM_ROW_BLOCK - 1) / CF_GEMM_ROW_BLOCK;
        if (b > blocks) blocks = b;
    }
    int nt = work >= PAR_MIN_WORK ? be->n_threads : 1;
    if (nt > blocks) nt = blocks > 0 ? (int)blocks : 1;
    matmuls_job j = {count, out, w, x};
    cf_workers_run(CPU(be)->pool, nt, matmuls_share, &j);
    for (int e = 0; e < count; e++) add_bias(out[e], bias[e]);
}

static void cpu_matmul(cf_backend *be, cf_tensor out, cf_tensor x, cf_tensor w, cf_tensor bias) {
    cpu_matmuls(be, 1, &out, x, &w, &bias);
}

static void cpu_add(cf_backend *be, cf_tensor out, cf_tensor a, cf_tensor b) {
    for (int64_t r = 0; r < out.rows; r++) {
        float *o = row(out, r);
        const float *ar = row(a, r), *br = row(b, r);
        for (int64_t c = 0; c < out.cols; c++) o[c] = ar[c] + br[c];
    }
}

static void cpu_scale(cf_backend *be, cf_tensor x, float s) {
    for (int64_t r = 0; r < x.rows; r++)
        for (int64_t c = 0; c < x.cols; c++) row(x, r)[c] *= s;
}

typedef struct glu_job {
    cf_tensor out, gate, up;
    cf_act act;
} glu_job;

static void glu_rows(void *ctx, int64_t r0, int64_t r1) {
    const glu_job *j = ctx;
    const cf_tensor out = j->out;
    const cf_act act = j->act;
    for (int64_t r = r0; r < r1; r++) {
        float *o = row(out, r);
        const float *g = row(j->gate, r), *u = row(j->up, r);
        for (int64_t c = 0; c < out.cols; c++) {
            float a;
            if (act == CF_ACT_SILU) {
                a = g[c] / (1.0f + expf(-g[c]));                                   /* silu(g) = g * sigmoid(g) */
            } else {
                const float k0 = 0.7978845608028654f;                              /* sqrt(2/pi) */
                a = 0.5f * g[c] * (1.0f + tanhf(k0 * (g[c] + 0.044715f * g[c] * g[c] * g[c])));
            }
            o[c] = a * u[c];
        }
    }
}

static void cpu_glu(cf_backend *be, cf_tensor out, cf_tensor gate, cf_tensor up, cf_act act) {
    glu_job j = {out, gate, up, act};
    par_rows(be, out.rows, out.rows * out.cols >= PAR_MIN_WORK / 16, glu_rows, &j);
}

static void cpu_softcap(cf_backend *be, cf_tensor x, float cap) {
    for (int64_t r = 0; r < x.rows; r++)
        for (int64_t c = 0; c < x.cols; c++) row(x, r)[c] = cap * tanhf(row(x, r)[c] / cap);
}

/* In each head, (x[i], x[i + rot/2]) rotates by pos * inv_freq[i] ("rotate_half" layout). */
static void cpu_rope(cf_backend *be, cf_tensor x, cf_tensor pos, int n_heads, int head_dim, int rot_dim, cf_tensor inv_freq) {
    const int32_t *p = pos.data;
    const float *f = inv_freq.data;
    const int half = rot_dim / 2;
    for (int64_t t = 0; t < x.rows; t++) {
        float cs[512], sn[512];
        for (int i = 0; i < half && i < 512; i++) {
            float ang = (float)p[t] * f[i];
            cs[i] = cosf(ang);
            sn[i] = sinf(ang);
        }
        for (int h = 0; h < n_heads; h++) {
            float *v = row(x, t) + (int64_t)h * head_dim;
            for (int i = 0; i < half; i++) {
                float a = v[i], b = v[i + half];
                v[i] = a * cs[i] - b * sn[i];
                v[i + half] = b * cs[i] + a * sn[i];
            }
        }
    }
}

/* cache row r (f32, bf16 or f16) = row i of src (f32), rounded to the cache's type */
static void kv_put(cf_tensor cache, int64_t r, cf_tensor src, int64_t i) {
    cf_from_f32((char *)cache.data + (size_t)(r * cache.stride) * cf_dtype_size(cache.dtype), row(src, i), cache.dtype, (size_t)src.cols);
}

static void cpu_kv_store(cf_backend *be, cf_tensor cache, cf_tensor src, int pos0, int cap) {
    for (int64_t i = 0; i < src.rows; i++) kv_put(cache, (pos0 + i) % cap, src, i);
}

static void run_attention(cpu_backend *b, const cf_attn_call *c) {
    cinfer_error e = {0};
    if (cf_cpu_attention(c, b->pool, b->isa, &b->attn, &e) != CINFER_OK) fail(b, e.code, e.message);
}

/* softmax(scale * q.k (softcapped)) . v over the visible keys of each query, per head (cpu_attention.c) */
static void cpu_attention(cf_backend *be, cf_tensor out, cf_tensor q, cf_tensor kc, cf_tensor vc, const cf_attn_args *a) {
    const cf_attn_call c = {.q = q.data, .qs = q.stride, .out = out.data, .os = out.stride, .k = kc.data, .v = vc.data,
                            .kv_dtype = kc.dtype, .ks = kc.stride, .vs = vc.stride, .n_rows = a->n_q, .n_heads = a->n_heads, .n_kv_heads = a->n_kv_heads,
                            .head_dim = a->head_dim, .v_head_dim = a->v_head_dim, .window = a->window, .scale = a->scale,
                            .softcap = a->softcap, .pos0 = a->pos0, .cap = a->cap};
    run_attention(CPU(be), &c);
}

/* ---- optional ops ---- */

static int32_t pos_at(cf_tensor pos, int64_t i) { return ((const int32_t *)pos.data)[i * pos.stride]; }

static void cpu_kv_store_pos(cf_backend *be, cf_tensor cache, cf_tensor src, cf_tensor pos, int cap) {
    for (int64_t i = 0; i < src.rows; i++) kv_put(cache, pos_at(pos, i) % cap, src, i);
}

static void cpu_attention_pos(cf_backend *be, cf_tensor out, cf_tensor q, cf_tensor kc, cf_tensor vc, const cf_attn_args *a,
                              cf_tensor pos) {
    cf_attn_args at = *a;
    at.pos0 = pos_at(pos, 0);
    cpu_attention(be, out, q, kc, vc, &at);
}

static int64_t cpu_mem_available(cf_backend *be) {
    long pages = sysconf(_SC_AVPHYS_PAGES), size = sysconf(_SC_PAGESIZE);
    return pages > 0 && size > 0 ? (int64_t)pages * size / 4 : 0;
}

static void cpu_kv_store_slots(cf_backend *be, cf_tensor cache, cf_tensor src, cf_tensor slot) {
    for (int64_t i = 0; i < src.rows; i++) kv_put(cache, pos_at(slot, i), src, i);
}

static void cpu_attention_paged(cf_backend *be, cf_tensor out, cf_tensor q, cf_tensor kp, cf_tensor vp,
                                const cf_paged_attn_args *a, const cf_batch_view *b) {
    const cf_attn_call c = {.q = q.data, .qs = q.stride, .out = out.data, .os = out.stride, .k = kp.data, .v = vp.data,
                            .kv_dtype = kp.dtype, .ks = kp.stride, .vs = vp.stride, .n_rows = b->n_rows, .n_heads = a->n_heads, .n_kv_heads = a->n_kv_heads,
                            .head_dim = a->head_dim, .v_head_dim = a->v_head_dim, .window = a->window, .scale = a->scale,
                            .softcap = a->softcap, .pos = b->pos.data, .table = b->block_table.data, .row_seq = b->row_seq.data,
                            .table_stride = b->block_table.stride, .block = a->block_size};
    run_attention(CPU(be), &c);
}

/* Largest value, ties to the lowest index; -1 for a row holding a NaN or +inf, as on CUDA. */
static void cpu_argmax(cf_backend *be, cf_tensor ids, cf_tensor logits) {
    for (int64_t r = 0; r < logits.rows; r++) {
        const float *l = row(logits, r);
        int64_t best = 0;
        for (int64_t i = 0; i < logits.cols && best >= 0; i++) {
            if (isnan(l[i]) || l[i] == INFINITY) best = -1;
            else if (l[i] > l[best]) best = i;
        }
        ((int32_t *)ids.data)[r * ids.stride] = (int32_t)best;
    }
}

/* The host sampler with these truncations and no processors, u given per row. */
static void cpu_sample(cf_backend *be, cf_tensor ids, cf_tensor logits, cf_tensor u, const cf_sample_args *sa) {
    cpu_backend *b = CPU(be);
    cinfer_error e = {0};
    if (!b->smp || b->smp_vocab != logits.cols || !cf_sample_args_equal(&b->smp_args, sa)) {
        cf_sampler_free(b->smp);
        b->smp = NULL;
        cf_sampling_params p = cf_sampling_truncation(sa->temperature, sa->top_k, sa->top_p, sa->min_p);
        if (logits.cols > INT32_MAX) {
            fail(b, CINFER_E_INVALID_ARGUMENT, "sample: a row of more than 2^31 logits");
            return;
        }
        if (cf_sampler_create(&p, (int32_t)logits.cols, &b->smp, &e) != CINFER_OK) {
            fail(b, e.code, e.message);
            return;
        }
        b->smp_args = *sa;
        b->smp_vocab = logits.cols;
    }
    for (int64_t r = 0; r < logits.rows; r++) {
        cf_sample_result res;
        if (cf_sampler_sample_u(b->smp, row(logits, r), row(u, r)[0], &res, &e) != CINFER_OK) {
            fail(b, e.code, e.message);
            return;
        }
        ((int32_t *)ids.data)[r * ids.stride] = res.token;
    }
}

typedef struct copy_job {
    cf_tensor dst, src;
} copy_job;

static void copy_rows(void *ctx, int64_t r0, int64_t r1) {
    const copy_job *j = ctx;
    const cf_tensor dst = j->dst, src = j->src;
    const size_t es = cf_dtype_size(src.dtype);
    for (int64_t r = r0; r < r1; r++) {
        const char *from = (const char *)src.data + (size_t)(r * src.stride) * es;
        if (dst.dtype == src.dtype) memcpy((char *)dst.data + (size_t)(r * dst.stride) * es, from, (size_t)dst.cols * es);
        else cf_to_f32(row(dst, r), from, src.dtype, (size_t)dst.cols);
    }
}

/* dst is f32 (activations) or of src's type (token ids) */
static void cpu_copy(cf_backend *be, cf_tensor dst, cf_tensor src) {
    copy_job j = {dst, src};
    par_rows(be, dst.rows, dst.rows > 16, copy_rows, &j);
}

/* ---- fused ops: their definitions, as the plain op sequences they stand for ---- */

static void cpu_qkv(cf_backend *be, cf_tensor x, const cf_qkv_args *a) {
    const int64_t n = x.rows;
    const cf_tensor out[3] = {a->q, a->k, a->v}, w[3] = {a->wq, a->wk, a->wv}, bias[3] = {a->bq, a->bk, a->bv};
    cpu_matmuls(be, !a->own_kv ? 1 : a->wv.data ? 3 : 2, out, x, w, bias);  /* no wv: values = keys */
    if (a->own_kv && !a->wv.data) cpu_copy(be, a->v, a->k);
    if (a->q_norm.data) {
        cf_tensor qh = cf_reshape(a->q, n * a->n_heads, a->head_dim);
        cpu_rmsnorm(be, qh, qh, a->q_norm, a->eps, a->w_offset);
    }
    if (a->own_kv && a->k_norm.data) {
        cf_tensor kh = cf_reshape(a->k, n * a->n_kv_heads, a->head_dim);
        cpu_rmsnorm(be, kh, kh, a->k_norm, a->eps, a->w_offset);
    }
    if (a->own_kv && a->v_norm.data) {
        cf_tensor vh = cf_reshape(a->v, n * a->n_kv_heads, a->v_head_dim);
        cpu_rmsnorm(be, vh, vh, a->v_norm, a->eps, 0.0f);
    }
    if (a->rot_dim >= 2) {
        cpu_rope(be, a->q, a->pos, a->n_heads, a->head_dim, a->rot_dim, a->inv_freq);
        if (a->own_kv) cpu_rope(be, a->k, a->pos, a->n_kv_heads, a->head_dim, a->rot_dim, a->inv_freq);
    }
    const cf_kv_dest *d = &a->dest;
    if (!a->own_kv || !d->k_cache.data) return;
    if (!d->cap) {
        cpu_kv_store_slots(be, d->k_cache, a->k, d->idx);
        cpu_kv_store_slots(be, d->v_cache, a->v, d->idx);
    } else if (d->idx.data) {
        cpu_kv_store_pos(be, d->k_cache, a->k, d->idx, d->cap);
        cpu_kv_store_pos(be, d->v_cache, a->v, d->idx, d->cap);
    } else {
        cpu_kv_store(be, d->k_cache, a->k, d->pos0, d->cap);
        cpu_kv_store(be, d->v_cache, a->v, d->pos0, d->cap);
    }
}

static void cpu_matmul_glu(cf_backend *be, cf_tensor out, cf_tensor x, cf_tensor w_gate, cf_tensor w_up, cf_act act, cf_tensor gate,
                           cf_tensor up) {
    const cf_tensor o[2] = {gate, up}, w[2] = {w_gate, w_up}, none[2] = {{0}, {0}};
    cpu_matmuls(be, 2, o, x, w, none);
    cpu_glu(be, out, gate, up, act);
}

static void cpu_matmul_gated(cf_backend *be, cf_tensor out, cf_tensor x, cf_tensor w, cf_act act, cf_tensor m) {
    const cf_tensor none = {0};
    cpu_matmul(be, out, x, w, none);
    cpu_glu(be, out, out, m, act);
}

static void cpu_add_norm(cf_backend *be, cf_tensor x, cf_tensor o, cf_tensor w_o, float scale, cf_tensor h, cf_tensor w_h, float eps,
                         float w_offset) {
    if (w_o.data) cpu_rmsnorm(be, o, o, w_o, eps, w_offset);
    cpu_add(be, x, x, o);
    if (scale != 1.0f) cpu_scale(be, x, scale);
    if (h.data) cpu_rmsnorm(be, h, x, w_h, eps, w_offset);
}

static const cf_backend_ops cpu_ops = {
    .name = "cpu",
    .destroy = cpu_destroy,
    .alloc = cpu_alloc,
    .upload_weight = cpu_upload_weight,
    .upload_qweight = cpu_upload_qweight,
    .free_tensor = cpu_free_tensor,
    .write = cpu_write,
    .fill = cpu_fill,
    .read = cpu_read,
    .read_begin = cpu_read_begin,
    .read_end = cpu_read_end,
    .sync = cpu_sync,
    .embed = cpu_embed,
    .rmsnorm = cpu_rmsnorm,
    .matmul = cpu_matmul,
    .add = cpu_add,
    .scale = cpu_scale,
    .glu = cpu_glu,
    .softcap = cpu_softcap,
    .rope = cpu_rope,
    .kv_store = cpu_kv_store,
    .attention = cpu_attention,
    .copy = cpu_copy,
    .kv_store_pos = cpu_kv_store_pos,
    .attention_pos = cpu_attention_pos,
    .mem_available = cpu_mem_available,
    .kv_store_slots = cpu_kv_store_slots,
    .attention_paged = cpu_attention_paged,
    .argmax = cpu_argmax,
    .sample = cpu_sample,
    .qkv = cpu_qkv,
    .matmul_glu = cpu_matmul_glu,
    .matmul_gated = cpu_matmul_gated,
    .add_norm = cpu_add_norm,
};

cinfer_status cf_cpu_backend_create(const cf_backend_params *p, cf_backend **out, cinfer_error *err) {
    cpu_backend *b = calloc(1, sizeof *b);
    if (!b) return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory");
    b->ops = cpu_ops;
    if (!p->tuning.fused_ops) b->ops.qkv = NULL, b->ops.matmul_glu = NULL, b->ops.matmul_gated = NULL, b->ops.add_norm = NULL;
    b->base.ops = &b->ops;
    b->base.act_dtype = CF_F32;
    b->base.kv_any_dtype = 1;
    b->base.n_threads = p->n_threads > 0 ? p->n_threads : cf_workers_default_threads();
    b->base.prefill_chunk = 256;
    b->isa = cf_cpu_best_isa();
    cinfer_status st = cf_workers_create(b->base.n_threads, &b->pool, err);
    if (st != CINFER_OK) {
        free(b);
        return st;
    }
    *out = &b->base;
    return CINFER_OK;
}
