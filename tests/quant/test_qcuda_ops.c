/* test_qcuda_ops.c: the CUDA backend's kernels for packed 4- and 8-bit weights (k_quant.cu) through its ops, against
 * the plain reference dequantizer (cf_qweight_dequant_row) times x in double precision: matmul with a bias for
 * bits 4 and 8, groups 32/64/128, scales and biases in bf16/f16/f32, activation rows 1, 2, 3, 8, 12, 17, 64, 300, odd
 * output sizes, x in f32 and bf16; the fused matmul_glu, matmul_gated and qkv (one job of three products, and mixed
 * bit widths, which run apart; plain, and with RoPE and the KV stores against the reference turned in double); embed
 * of a quantized table; a decode matmul recorded in a graph. Each runs under three settings of
 * CINFER_QMMA_MAX_ROWS (tuning.qmma_max_rows): 128 (the default: rows 9..128 on the tensor-core kernel, 300
 * dequantized + cuBLAS), 4096 (every row count above 8 on the tensor-core kernel) and 0 (above 8 through cuBLAS); the
 * last also with the decode GEMV's k split over clusters of at most 4 blocks (tuning.qgemv_tc_splits; the
 * default allows 8, within one wave).
 *
 * Bounds. The GEMV (at most 8 rows) computes in f32 sum(scale * sum(x q) + bias * sum(x)) per chunk: within
 * 4 k 2^-24 (sum |x| (|w| + 2 |bias of the group|)) of the exact product. The other paths multiply bf16 operands
 * (x is drawn bf16-exact, the weight rounded to bf16: relative 2^-9 each) with f32 accumulation: within 2^-8 sum |x w|
 * plus the f32 term. 2-, 3-, 5- and 6-bit weights are BF16 tensors on CUDA (dequantized at upload), checked once.
 * Exits 77 (skip) without a GPU or a CUDA build. */
#include "backend/backend.h"
#include "base/qweight.h"
#include "check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng = 7;
static float frand(void) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)(rng >> 40) / (float)(1 << 24) * 2.0f - 1.0f;
}
/* a value exactly representable in bf16 */
static float brand(void) { return cf_bf16_to_f32(cf_f32_to_bf16(frand())); }

typedef struct qbuf {
    uint32_t *q;
    void *s, *b;
    cf_qweight w;
    float *wd;     /* the reference weights [rows, cols] */
    float *bmag;   /* |bias| of each value's group [rows, cols] */
} qbuf;

static float ld_sb(const void *p, cf_dtype t, int64_t i) {
    return t == CF_BF16 ? cf_bf16_to_f32(((const uint16_t *)p)[i]) : t == CF_F16 ? cf_f16_to_f32(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

static void qbuf_make(qbuf *o, int64_t rows, int64_t cols, int bits, int group, cf_dtype sb) {
    float *f = malloc((size_t)(rows * cols) * sizeof *f);
    for (int64_t i = 0; i < rows * cols; i++) f[i] = 0.05f * frand() + (i % 97 == 0 ? 0.2f : 0.0f) + (i / cols % 5 == 0 ? 0.03f : 0.0f);
    const int64_t wpr = cf_qweight_words_per_row(bits, cols), G = cols / group;
    o->q = malloc((size_t)(rows * wpr) * 4);
    o->s = malloc((size_t)(rows * G) * 4);
    o->b = malloc((size_t)(rows * G) * 4);
    cf_qweight_quantize(f, rows, cols, bits, group, sb, o->q, o->s, o->b);
    o->w = (cf_qweight){.q = o->q, .scales = o->s, .biases = o->b, .sb_dtype = sb, .bits = bits, .group = group, .rows = rows, .cols = cols};
    o->wd = f;
    o->bmag = malloc((size_t)(rows * cols) * sizeof *o->bmag);
    for (int64_t r = 0; r < rows; r++) {
        cf_qweight_dequant_row(&o->w, r, o->wd + r * cols);
        for (int64_t c = 0; c < cols; c++) o->bmag[r * cols + c] = fabsf(ld_sb(o->b, sb, r * G + c / group));
    }
}

static void qbuf_free(qbuf *o) {
    free(o->q);
    free(o->s);
    free(o->b);
    free(o->wd);
    free(o->bmag);
}

static int qmma_setting;
static cf_backend *make(int qmma_max_rows, int *skip) {
    cf_backend_params p = cf_backend_default_params();
    p.device = CF_DEVICE_CUDA;
    p.pool_bytes = (size_t)1 << 30;
    p.tuning.qmma_max_rows = qmma_max_rows;
    if (qmma_max_rows == 0) p.tuning.qgemv_tc_splits = 4;
    qmma_setting = qmma_max_rows;
    cf_backend *be = NULL;
    cinfer_error e = {0};
    cinfer_status st = cf_backend_create(&p, &be, &e);
    if (st == CINFER_E_NO_DEVICE || st == CINFER_E_UNSUPPORTED) {
        printf("SKIP: %s\n", e.message);
        *skip = 1;
        return NULL;
    }
    CHECK(st == CINFER_OK, "cuda backend: %s", e.message);
    return be;
}

static cf_tensor alloc(cf_backend *be, cf_dtype dt, int64_t rows, int64_t cols) {
    cf_tensor t = {0};
    cinfer_error e = {0};
    CHECK(be->ops->alloc(be, dt, rows, cols, &t, &e) == CINFER_OK, "alloc: %s", e.message);
    return t;
}

/* x [n, k] (host f32, bf16-exact) into a device tensor of dtype dt */
static cf_tensor put_x(cf_backend *be, const float *x, int64_t n, int64_t k, cf_dtype dt) {
    cf_tensor t = alloc(be, dt, n, k);
    if (dt == CF_F32) {
        be->ops->write(be, t, x);
    } else {
        uint16_t *h = malloc((size_t)(n * k) * 2);
        for (int64_t i = 0; i < n * k; i++) h[i] = cf_f32_to_bf16(x[i]);
        be->ops->write(be, t, h);
        free(h);
    }
    return t;
}

static float *get(cf_backend *be, cf_tensor t) {
    float *h = malloc((size_t)(t.rows * t.cols) * sizeof *h);
    cinfer_error e = {0};
    CHECK(be->ops->read(be, h, t, &e) == CINFER_OK, "read: %s", e.message);
    return h;
}

/* the reference of row i, output r of x . w^T (+ bias) and its bound for the path n rows take */
static double ref_dot(const qbuf *w, const float *x, int64_t k, int64_t i, int64_t r, double *bound, int n) {
    double s = 0, mag = 0, mag2 = 0;
    for (int64_t c = 0; c < k; c++) {
        const double xv = x[i * k + c], wv = w->wd[r * k + c];
        s += xv * wv;
        mag += fabs(xv * wv);
        mag2 += fabs(xv) * (fabs(wv) + 2.0 * w->bmag[r * k + c]);
    }
    const double f32 = 4.0 * (double)k * 5.96e-8 * mag2 + 1e-6;
    *bound = n <= 8 ? f32 : f32 + mag / 256.0;
    return s;
}

static double silu(double g) { return g / (1.0 + exp(-g)); }

static int64_t n_bad_out;
static void expect(double got, double want, double bound, const char *what) {
    if (!(fabs(got - want) <= bound)) {
        if (n_bad_out++ < 5) fprintf(stderr, "  %s: got %.7g want %.7g (bound %.3g)\n", what, got, want, bound);
    }
}

static const int NS[] = {1, 2, 3, 8, 12, 17, 64, 300};
#define N_NS 8
#define NMAX 300

static void test_matmul(cf_backend *be, int bits, int group, cf_dtype sb, int64_t d, int64_t k, cf_dtype xdt, int n_lim) {
    qbuf qb;
    qbuf_make(&qb, d, k, bits, group, sb);
    cf_tensor w = {0};
    cinfer_error e = {0};
    CHECK(be->ops->upload_qweight(be, &qb.w, &w, &e) == CINFER_OK, "upload: %s", e.message);
    CHECK(w.dtype == CF_Q && w.rows == d && w.cols == k, "%d-bit upload: a CF_Q [%lld, %lld] tensor", bits, (long long)d, (long long)k);
    float *x = malloc((size_t)(NMAX * k) * sizeof *x), *bias = malloc((size_t)d * sizeof *bias);
    for (int64_t i = 0; i < NMAX * k; i++) x[i] = brand();
    for (int64_t r = 0; r < d; r++) bias[r] = 0.1f * frand();
    cf_tensor xt = put_x(be, x, NMAX, k, xdt), bt = alloc(be, CF_F32, 1, d), out = alloc(be, CF_F32, NMAX, d);
    be->ops->write(be, bt, bias);
    for (int ni = 0; ni < N_NS; ni++) {
        const int n = NS[ni];
        if (n > n_lim) continue;
        be->ops->fill(be, out, NAN);   /* every value must be written */
        be->ops->matmul(be, cf_rows(out, 0, n), cf_rows(xt, 0, n), w, bt);
        float *o = get(be, cf_rows(out, 0, n));
        n_bad_out = 0;
        for (int64_t i = 0; i < n; i++)
            for (int64_t r = 0; r < d; r++) {
                double bound, want = ref_dot(&qb, x, k, i, r, &bound, n) + bias[r];
                expect(o[i * d + r], want, bound, "matmul");
            }
        CHECK(!n_bad_out, "matmul %d bits group %d %s, %lldx%lld, x %s, %d rows (qmma_max_rows %d): %lld values off", bits, group,
              cf_dtype_name(sb), (long long)d, (long long)k, cf_dtype_name(xdt), n, qmma_setting, (long long)n_bad_out);
        free(o);
    }
    be->ops->free_tensor(be, &xt);
    be->ops->free_tensor(be, &bt);
    be->ops->free_tensor(be, &out);
    free(x);
    free(bias);
    qbuf_free(&qb);
}

/* matmul_glu (gate, up of bits_g, bits_u), matmul_gated and qkv (three products of bits_q, bits_k, bits_v) */
/* group 0: mixed groups and (scale, bias) dtypes; else that group and one pair dtype for every product (f16 pairs
 * for groups of 32, bf16 for the others), as the tensor-core GEMV takes them */
static void test_fused(cf_backend *be, int bits_a, int bits_b, int64_t k, int group) {
    const int64_t F = 203, Q = 96, KV = 32;
    const cf_dtype one = group == 32 ? CF_F16 : CF_BF16;
    qbuf g, u, wq, wk, wv;
    qbuf_make(&g, F, k, bits_a, group ? group : 64, group ? one : CF_BF16);
    qbuf_make(&u, F, k, bits_b, group ? group : 32, group ? one : CF_F16);
    qbuf_make(&wq, Q, k, bits_a, group ? group : 128, group ? one : CF_BF16);
    qbuf_make(&wk, KV, k, bits_b, group ? group : 64, group ? one : CF_BF16);
    qbuf_make(&wv, KV, k, bits_a, group ? group : 64, group ? one : CF_F32);
    cf_tensor tg, tu, tq, tk, tv;
    cinfer_error e = {0};
    CHECK(be->ops->upload_qweight(be, &g.w, &tg, &e) == CINFER_OK && be->ops->upload_qweight(be, &u.w, &tu, &e) == CINFER_OK &&
              be->ops->upload_qweight(be, &wq.w, &tq, &e) == CINFER_OK && be->ops->upload_qweight(be, &wk.w, &tk, &e) == CINFER_OK &&
              be->ops->upload_qweight(be, &wv.w, &tv, &e) == CINFER_OK,
          "upload: %s", e.message);
    float *x = malloc((size_t)(NMAX * k) * sizeof *x), *m = malloc((size_t)(NMAX * F) * sizeof *m), bq[96];
    for (int64_t i = 0; i < NMAX * k; i++) x[i] = brand();
    for (int64_t i = 0; i < NMAX * F; i++) m[i] = frand();
    for (int i = 0; i < 96; i++) bq[i] = 0.1f * frand();
    cf_tensor xt = put_x(be, x, NMAX, k, CF_BF16), mt = alloc(be, CF_F32, NMAX, F), out = alloc(be, CF_F32, NMAX, F),
              gate = alloc(be, CF_F32, NMAX, F), up = alloc(be, CF_F32, NMAX, F), bqt = alloc(be, CF_F32, 1, Q),
              qo = alloc(be, CF_F32, NMAX, Q), ko = alloc(be, CF_F32, NMAX, KV), vo = alloc(be, CF_F32, NMAX, KV);
    be->ops->write(be, mt, m);
    be->ops->write(be, bqt, bq);
    const cf_tensor none = {0};
    for (int ni = 0; ni < N_NS; ni++) {
        const int n = NS[ni];
        /* matmul_glu: act(x g^T) * (x u^T) */
        be->ops->fill(be, out, NAN);
        be->ops->matmul_glu(be, cf_rows(out, 0, n), cf_rows(xt, 0, n), tg, tu, CF_ACT_SILU, cf_rows(gate, 0, n), cf_rows(up, 0, n));
        float *o = get(be, cf_rows(out, 0, n));
        n_bad_out = 0;
        for (int64_t i = 0; i < n; i++)
            for (int64_t r = 0; r < F; r++) {
                double b1, b2, a = ref_dot(&g, x, k, i, r, &b1, n), c = ref_dot(&u, x, k, i, r, &b2, n);
                /* |silu'| <= 1.1: the gate's error passes at most 1.1 times */
                expect(o[i * F + r], silu(a) * c, 1.1 * b1 * fabs(c) + b2 * fabs(silu(a)) + b1 * b2 * 1.1, "matmul_glu");
            }
        CHECK(!n_bad_out, "matmul_glu %d/%d bits, k %lld, %d rows (qmma_max_rows %d): %lld values off", bits_a, bits_b, (long long)k, n, qmma_setting,
              (long long)n_bad_out);
        free(o);
        /* matmul_gated: act(x g^T) * m */
        be->ops->fill(be, out, NAN);
        be->ops->matmul_gated(be, cf_rows(out, 0, n), cf_rows(xt, 0, n), tg, CF_ACT_SILU, cf_rows(mt, 0, n));
        o = get(be, cf_rows(out, 0, n));
        n_bad_out = 0;
        for (int64_t i = 0; i < n; i++)
            for (int64_t r = 0; r < F; r++) {
                double b1, a = ref_dot(&g, x, k, i, r, &b1, n);
                expect(o[i * F + r], silu(a) * m[i * F + r], 1.1 * b1 * fabs(m[i * F + r]) + 1e-6, "matmul_gated");
            }
        CHECK(!n_bad_out, "matmul_gated %d bits, %d rows (qmma_max_rows %d): %lld values off", bits_a, n, qmma_setting, (long long)n_bad_out);
        free(o);
        /* qkv without norms, RoPE or stores: q (with a bias), k, v */
        be->ops->fill(be, qo, NAN);
        be->ops->fill(be, ko, NAN);
        be->ops->fill(be, vo, NAN);
        cf_qkv_args a = {.q = cf_rows(qo, 0, n), .k = cf_rows(ko, 0, n), .v = cf_rows(vo, 0, n), .wq = tq, .wk = tk, .wv = tv, .bq = bqt,
                         .eps = 1e-6f, .own_kv = 1, .n_heads = 3, .n_kv_heads = 1, .head_dim = 32, .v_head_dim = 32, .rot_dim = 0};
        if (be->ops->qkv) {
            be->ops->qkv(be, cf_rows(xt, 0, n), &a);
            float *oq = get(be, cf_rows(qo, 0, n)), *ok = get(be, cf_rows(ko, 0, n)), *ov = get(be, cf_rows(vo, 0, n));
            n_bad_out = 0;
            for (int64_t i = 0; i < n; i++) {
                double bd = 0, want;
                for (int64_t r = 0; r < Q; r++) {
                    want = ref_dot(&wq, x, k, i, r, &bd, n) + bq[r];
                    expect(oq[i * Q + r], want, bd, "qkv q");
                }
                for (int64_t r = 0; r < KV; r++) {
                    want = ref_dot(&wk, x, k, i, r, &bd, n);
                    expect(ok[i * KV + r], want, bd, "qkv k");
                }
                for (int64_t r = 0; r < KV; r++) {
                    want = ref_dot(&wv, x, k, i, r, &bd, n);
                    expect(ov[i * KV + r], want, bd, "qkv v");
                }
            }
            CHECK(!n_bad_out, "qkv %d/%d bits, k %lld, %d rows (qmma_max_rows %d): %lld values off", bits_a, bits_b, (long long)k, n, qmma_setting, (long long)n_bad_out);
            free(oq);
            free(ok);
            free(ov);

            /* the same with RoPE over whole heads at positions 5 + 3i and k, v stored to f32 caches of CAP slots at
             * those positions (the tensor-core GEMV does both itself; the other paths in a launch after) */
            enum { CAP = 400 };
            int32_t pos[NMAX];
            float inv_freq[16];
            for (int i = 0; i < n; i++) pos[i] = 5 + 3 * i;
            for (int i = 0; i < 16; i++) inv_freq[i] = (float)pow(10000.0, -i / 16.0);
            cf_tensor post = alloc(be, CF_I32, n, 1), ift = alloc(be, CF_F32, 1, 16), kc = alloc(be, CF_F32, CAP, KV), vc = alloc(be, CF_F32, CAP, KV);
            be->ops->write(be, post, pos);
            be->ops->write(be, ift, inv_freq);
            be->ops->fill(be, kc, NAN);
            be->ops->fill(be, vc, NAN);
            be->ops->fill(be, qo, NAN);
            be->ops->fill(be, ko, NAN);
            be->ops->fill(be, vo, NAN);
            cf_qkv_args ar = a;
            ar.rot_dim = 32;
            ar.pos = post;
            ar.inv_freq = ift;
            ar.dest = (cf_kv_dest){.k_cache = kc, .v_cache = vc, .idx = post, .cap = CAP};
            be->ops->qkv(be, cf_rows(xt, 0, n), &ar);
            oq = get(be, cf_rows(qo, 0, n));
            ok = get(be, cf_rows(ko, 0, n));
            ov = get(be, cf_rows(vo, 0, n));
            float *kch = get(be, kc), *vch = get(be, vc);
            n_bad_out = 0;
            for (int64_t i = 0; i < n; i++) {
                const int64_t slot = pos[i] % CAP;
                for (int h = 0; h < 4; h++) {   /* q's heads 0-2, then k's */
                    const qbuf *w = h < 3 ? &wq : &wk;
                    const float *oh = h < 3 ? oq + i * Q + h * 32 : ok + i * KV;
                    for (int c = 0; c < 16; c++) {
                        const int64_t r = (h < 3 ? h * 32 : 0) + c;
                        double b0, b1;
                        const double x0 = ref_dot(w, x, k, i, r, &b0, n) + (h < 3 ? bq[r] : 0.0);
                        const double x1 = ref_dot(w, x, k, i, r + 16, &b1, n) + (h < 3 ? bq[r + 16] : 0.0);
                        const double ang = (double)pos[i] * inv_freq[c], cs = cos(ang), sn = sin(ang);
                        const double bd = b0 + b1 + 1e-5 * (fabs(x0) + fabs(x1));
                        expect(oh[c], x0 * cs - x1 * sn, bd, h < 3 ? "qkv+rope q" : "qkv+rope k");
                        expect(oh[c + 16], x1 * cs + x0 * sn, bd, h < 3 ? "qkv+rope q" : "qkv+rope k");
                    }
                }
                for (int64_t r = 0; r < KV; r++) {
                    double bd = 0;
                    const double want = ref_dot(&wv, x, k, i, r, &bd, n);
                    expect(ov[i * KV + r], want, bd, "qkv+rope v");
                    expect(kch[slot * KV + r], ok[i * KV + r], 0.0, "k cache");
                    expect(vch[slot * KV + r], ov[i * KV + r], 0.0, "v cache");
                }
            }
            CHECK(!n_bad_out, "qkv with RoPE and stores %d/%d bits, k %lld, %d rows (qmma_max_rows %d): %lld values off", bits_a, bits_b,
                  (long long)k, n, qmma_setting, (long long)n_bad_out);
            free(oq);
            free(ok);
            free(ov);
            free(kch);
            free(vch);
            cf_tensor *tt[] = {&post, &ift, &kc, &vc};
            for (size_t t = 0; t < 4; t++) be->ops->free_tensor(be, tt[t]);
        }
    }
    (void)none;
    cf_tensor *ts[] = {&xt, &mt, &out, &gate, &up, &bqt, &qo, &ko, &vo};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) be->ops->free_tensor(be, ts[i]);
    free(x);
    free(m);
    qbuf *qs[] = {&g, &u, &wq, &wk, &wv};
    for (int i = 0; i < 5; i++) qbuf_free(qs[i]);
}

static void test_embed(cf_backend *be, int bits) {
    const int64_t V = 41, D = 192;
    qbuf t;
    qbuf_make(&t, V, D, bits, 64, CF_F16);
    cf_tensor wt;
    cinfer_error e = {0};
    CHECK(be->ops->upload_qweight(be, &t.w, &wt, &e) == CINFER_OK, "upload: %s", e.message);
    const int32_t id[5] = {0, 40, 7, 41, -1};
    cf_tensor ids = alloc(be, CF_I32, 5, 1), emb = alloc(be, CF_F32, 5, D);
    be->ops->write(be, ids, id);
    be->ops->fill(be, emb, NAN);
    be->ops->embed(be, emb, wt, ids, 2.5f);
    float *o = get(be, emb);
    int bad = 0;
    for (int i = 0; i < 5; i++)
        for (int64_t c = 0; c < D; c++) bad += o[i * D + c] != (id[i] >= 0 && id[i] < V ? t.wd[id[i] * D + c] * 2.5f : 0.0f);
    CHECK(!bad, "embed of a %d-bit table: %d values differ from the dequantized rows times the scale", bits, bad);
    free(o);
    be->ops->free_tensor(be, &ids);
    be->ops->free_tensor(be, &emb);
    qbuf_free(&t);
}

/* a decode step's matmul and GLU recorded in a graph (no allocation or host sync inside), replayed on new x */
static void test_graph(cf_backend *be) {
    if (!be->ops->graph_begin) return;
    const int64_t k = 512, d = 333;
    const int ns[2] = {1, 64};
    qbuf w;
    qbuf_make(&w, d, k, 4, 64, CF_BF16);
    cf_tensor tw;
    cinfer_error e = {0};
    CHECK(be->ops->upload_qweight(be, &w.w, &tw, &e) == CINFER_OK, "upload: %s", e.message);
    float *x = malloc((size_t)(64 * k) * sizeof *x);
    cf_tensor xt = alloc(be, CF_BF16, 64, k), out = alloc(be, CF_F32, 64, d), gu = alloc(be, CF_F32, 64, d), uu = alloc(be, CF_F32, 64, d);
    const cf_tensor none = {0};
    for (int t = 0; t < 2; t++) {
        const int n = ns[t];
        cf_graph *g = NULL;
        CHECK(be->ops->graph_begin(be, &e) == CINFER_OK, "graph_begin: %s", e.message);
        be->ops->matmul(be, cf_rows(out, 0, n), cf_rows(xt, 0, n), tw, none);
        cinfer_status st = be->ops->graph_end(be, &g, &e);
        CHECK(st == CINFER_OK && g, "recording a quantized matmul of %d rows: %s", n, e.message);
        if (!g) continue;
        for (int rep = 0; rep < 2; rep++) {
            for (int64_t i = 0; i < 64 * k; i++) x[i] = brand();
            uint16_t *h = malloc((size_t)(64 * k) * 2);
            for (int64_t i = 0; i < 64 * k; i++) h[i] = cf_f32_to_bf16(x[i]);
            be->ops->write(be, xt, h);
            free(h);
            be->ops->fill(be, out, NAN);
            be->ops->graph_launch(be, g);
            float *o = get(be, cf_rows(out, 0, n));
            n_bad_out = 0;
            for (int64_t i = 0; i < n; i++)
                for (int64_t r = 0; r < d; r++) {
                    double bd, want = ref_dot(&w, x, k, i, r, &bd, n);
                    expect(o[i * d + r], want, bd, "graph");
                }
            CHECK(!n_bad_out, "graph replay %d of a %d-row quantized matmul: %lld values off", rep, n, (long long)n_bad_out);
            free(o);
        }
        be->ops->graph_free(be, g);
    }
    cf_tensor *ts[] = {&xt, &out, &gu, &uu};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) be->ops->free_tensor(be, ts[i]);
    free(x);
    qbuf_free(&w);
}

/* 2-, 3-, 5-, 6-bit weights: dequantized to bf16 at upload */
static void test_other_bits(cf_backend *be) {
    const int bl[4] = {2, 3, 5, 6};
    for (int i = 0; i < 4; i++) {
        qbuf w;
        qbuf_make(&w, 40, 128, bl[i], 32, CF_BF16);
        cf_tensor t;
        cinfer_error e = {0};
        CHECK(be->ops->upload_qweight(be, &w.w, &t, &e) == CINFER_OK && t.dtype == CF_BF16, "%d-bit upload: a BF16 tensor (%s)", bl[i],
              e.message);
        qbuf_free(&w);
    }
}

int main(void) {
    const int settings[3] = {128, 4096, 0};
    const int groups[3] = {32, 64, 128};
    const cf_dtype sbs[3] = {CF_BF16, CF_F16, CF_F32};
    for (int si = 0; si < 3; si++) {
        int skip = 0;
        cf_backend *be = make(settings[si], &skip);
        if (skip) return 77;
        if (!be) break;
        for (int bi = 0; bi < 2; bi++)
            for (int gi = 0; gi < 3; gi++) {
                const int bits = bi ? 8 : 4;
                /* odd output sizes; x in f32 and bf16 */
                test_matmul(be, bits, groups[gi], sbs[(gi + bi) % 3], 77, 384, (gi & 1) ? CF_F32 : CF_BF16, NMAX);
                if (si == 0) test_matmul(be, bits, groups[gi], sbs[gi], 5, 128, (gi & 1) ? CF_BF16 : CF_F32, NMAX);
            }
        /* k of one stage (the tensor-core kernel without split-k), long rows (the GEMV's split over warps) */
        test_matmul(be, 4, 32, CF_BF16, 150, 32, CF_BF16, NMAX);
        test_matmul(be, 8, 32, CF_F16, 150, 32, CF_F32, NMAX);
        if (si == 0) {
            /* the tensor-core GEMM's k split: in 16 (few tiles), and in 3 with 70 tiles on a GPU of 132 SMs holding 2
             * blocks each */
            test_matmul(be, 4, 64, CF_BF16, 301, 4096, CF_BF16, 64);
            test_matmul(be, 8, 128, CF_BF16, 130, 8192, CF_F32, 17);
            test_matmul(be, 4, 64, CF_BF16, 70 * 128, 768, CF_BF16, 64);
        }
        test_fused(be, 4, 4, 256, 0);
        test_fused(be, 8, 8, 256, 0);
        test_fused(be, 4, 8, 256, 0);   /* mixed bit widths: separate launches */
        if (si == 0) {
            /* the tensor-core GEMV (4 and 8 bits, bf16 x, k a multiple of 128 and at least 512): every group size, f16
             * and bf16 pairs, rows not a multiple of its 16, the GLU and the three products of qkv in one launch */
            test_matmul(be, 4, 32, CF_F16, 77, 1024, CF_BF16, 8);
            test_matmul(be, 4, 128, CF_BF16, 45, 1536, CF_BF16, 8);
            test_matmul(be, 8, 32, CF_BF16, 77, 640, CF_BF16, 8);
            test_matmul(be, 8, 64, CF_F16, 45, 1024, CF_BF16, 8);
            test_matmul(be, 8, 128, CF_BF16, 33, 1536, CF_BF16, 8);
            test_fused(be, 4, 4, 1024, 64);
            test_fused(be, 4, 4, 512, 32);
            test_fused(be, 8, 8, 1024, 64);
            /* its k split over a cluster of blocks (few units), and its persistent blocks taking several units each
             * (more units than 4 blocks an SM: 9,000 rows; alone, and split in 2 with k of 8 k-blocks) */
            test_matmul(be, 4, 64, CF_BF16, 45, 3584, CF_BF16, 8);
            test_fused(be, 4, 4, 2048, 64);
            test_matmul(be, 4, 64, CF_BF16, 9000, 512, CF_BF16, 3);
            test_matmul(be, 8, 64, CF_BF16, 9000, 1024, CF_BF16, 2);
        }
        if (si == 0) {
            test_embed(be, 4);
            test_embed(be, 8);
            test_graph(be);
            test_other_bits(be);
        }
        cinfer_error e = {0};
        CHECK(be->ops->sync(be, &e) == CINFER_OK, "sync: %s", e.message);
        cf_backend_destroy(be);
    }
    printf("%d checks, %d failures\n", checks, failures);
    return failures != 0;
}
