/* test_cuda_fold.c: the residual fold (matmul_residual and the x_scale of qkv and matmul_glu) on the CUDA backend,
 * against the same block end as plain ops on the same backend: o = a W^T; add_norm(x, o) -> h; the consumer on h.
 * Weights bf16, 4-bit and 8-bit (group 64), the fold on for one row (tuning.residual_fold_rows 1): one activation
 * row (the kernels fold: the vector GEMV, the tensor-core GEMV with its k split over a cluster of 2) and three (the
 * fallback: the product, add_norm's deferred form, a row-scaled copy of the consumer's input). Each case runs twice in a row (the fold's counter must be back at 0) and
 * once more from a recorded graph.
 *
 * Bounds: the updated x is the same sum added to the same x, so equal to f32 rounding (1e-6 of max |x|); h_scale * h
 * against add_norm's h: both are one bf16 rounding of the same value computed in a different order, 8e-3 of max |h|;
 * the consumers' outputs (bf16) carry that input rounding, their own output rounding and, for the GLU, its product:
 * 2e-2 of the largest output. Exit 77 (ctest skip) without a GPU. */
#include "backend/backend.h"
#include "base/qweight.h"
#include "base/status.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static cf_backend *be;
static const cf_backend_ops *op;
static int failures, checks;

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float urand(float lo, float hi) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return lo + (hi - lo) * (float)(rng >> 40) / 16777216.0f;
}

static void die(const char *what, cinfer_error *e) {
    fprintf(stderr, "FATAL %s: %s\n", what, e->message);
    exit(1);
}

static cf_tensor alloc(cf_dtype dt, int64_t rows, int64_t cols) {
    cf_tensor t;
    cinfer_error e = {0};
    if (op->alloc(be, dt, rows, cols, &t, &e)) die("alloc", &e);
    return t;
}

/* a tensor of dt with uniform values in [lo, hi) (host copy in *host when asked) */
static cf_tensor rnd(cf_dtype dt, int64_t rows, int64_t cols, float lo, float hi) {
    cf_tensor t = alloc(dt, rows, cols);
    const size_t n = (size_t)(rows * cols);
    float *v = malloc(n * sizeof *v);
    uint16_t *h = malloc(n * sizeof *h);
    for (size_t i = 0; i < n; i++) v[i] = urand(lo, hi), h[i] = cf_f32_to_bf16(v[i]);
    op->write(be, t, dt == CF_BF16 ? (void *)h : (void *)v);
    free(v);
    free(h);
    return t;
}

/* a weight [rows, cols]: bf16, or quantized to `bits` (group 64, bf16 pairs); q4/q8 host buffers in *keep */
static cf_tensor weight(int bits, int64_t rows, int64_t cols, void **keep) {
    const size_t n = (size_t)(rows * cols);
    float *v = malloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++) v[i] = urand(-0.05f, 0.05f);
    cf_tensor t;
    cinfer_error e = {0};
    if (!bits) {
        if (op->upload_weight(be, v, CF_F32, rows, cols, &t, &e)) die("upload_weight", &e);
        free(v);
        *keep = NULL;
        return t;
    }
    const int64_t G = cols / 64;
    char *buf = malloc((size_t)(rows * cf_qweight_words_per_row(bits, cols)) * 4 + (size_t)(rows * G) * 4);
    uint32_t *q = (uint32_t *)buf;
    uint16_t *sc = (uint16_t *)(buf + (size_t)(rows * cf_qweight_words_per_row(bits, cols)) * 4), *bi = sc + rows * G;
    cf_qweight_quantize(v, rows, cols, bits, 64, CF_BF16, q, sc, bi);
    const cf_qweight w = {.q = q, .scales = sc, .biases = bi, .sb_dtype = CF_BF16, .bits = bits, .group = 64, .rows = rows, .cols = cols};
    if (op->upload_qweight(be, &w, &t, &e)) die("upload_qweight", &e);
    free(v);
    *keep = buf;
    return t;
}

static float *rd(cf_tensor t) {
    cinfer_error e = {0};
    float *h = malloc((size_t)(t.rows * t.cols) * sizeof *h);
    if (op->read(be, h, t, &e)) die("read", &e);
    return h;
}

/* max |got - want| <= tol * max |want|; got_scale: got's row r times it (h_scale) where set */
static void cmp(const char *what, cf_tensor got, const float *got_scale, cf_tensor want, double tol) {
    float *g = rd(got), *w = rd(want);
    double me = 0, mr = 0;
    int bad = 0;
    for (int64_t r = 0; r < want.rows; r++)
        for (int64_t c = 0; c < want.cols; c++) {
            const double gv = g[r * want.cols + c] * (got_scale ? got_scale[r] : 1.0f), wv = w[r * want.cols + c];
            if (!isfinite(gv)) bad = 1;
            if (fabs(gv - wv) > me) me = fabs(gv - wv);
            if (fabs(wv) > mr) mr = fabs(wv);
        }
    checks++;
    const int ok = !bad && me <= tol * mr;
    if (!ok) failures++;
    printf("%-4s %-58s max|err| %.3e  max|ref| %.3e  bound %.0e x max|ref|\n", ok ? "ok" : "FAIL", what, me, mr, tol);
    free(g);
    free(w);
}

enum { D = 1024, F = 4096, QD = 1024, KD = 256, HD = 128 };

static void one_case(int bits, int n, int graph) {
    const cf_tensor none = {0};
    const float eps = 1e-5f, off = 0.0f;
    void *k1, *k2, *k3, *k4, *k5, *k6;
    cf_tensor w_down = weight(bits, D, F, &k1), w_gate = weight(bits, 768, D, &k2), w_up = weight(bits, 768, D, &k3);
    cf_tensor wq = weight(bits, QD, D, &k4), wk = weight(bits, KD, D, &k5), wv = weight(bits, KD, D, &k6);
    cf_tensor a = rnd(CF_BF16, n, F, -1.0f, 1.0f), x0 = rnd(CF_F32, n, D, -2.0f, 2.0f), w_h = rnd(CF_BF16, 1, D, 0.5f, 1.5f);
    cf_tensor x_ref = alloc(CF_F32, n, D), x_fold = alloc(CF_F32, n, D), o = alloc(CF_F32, n, D);
    cf_tensor h_ref = alloc(CF_BF16, n, D), h_fold = alloc(CF_BF16, n, D), hs = alloc(CF_F32, n, 1);
    cf_tensor glu_ref = alloc(CF_BF16, n, 768), glu_fold = alloc(CF_BF16, n, 768), gate = alloc(CF_BF16, n, 768), up = alloc(CF_BF16, n, 768);
    cf_tensor q[2], k[2], v[2];
    for (int i = 0; i < 2; i++) q[i] = alloc(CF_BF16, n, QD), k[i] = alloc(CF_BF16, n, KD), v[i] = alloc(CF_BF16, n, KD);
    cf_tensor pos = alloc(CF_I32, n, 1), inv_freq = alloc(CF_F32, 1, HD / 2);
    int32_t p[3] = {5, 6, 7};
    float f[HD / 2];
    for (int i = 0; i < HD / 2; i++) f[i] = powf(10000.0f, -2.0f * i / HD);
    op->write(be, pos, p);
    op->write(be, inv_freq, f);
    cf_qkv_args qa = {.wq = wq, .wk = wk, .wv = wv, .eps = eps, .own_kv = 1, .n_heads = QD / HD, .n_kv_heads = KD / HD,
                      .head_dim = HD, .v_head_dim = HD, .rot_dim = HD, .pos = pos, .inv_freq = inv_freq};

    /* the reference: plain product, add_norm, consumers on the normed h */
    op->copy(be, x_ref, x0);
    op->matmul(be, o, a, w_down, none);
    op->add_norm(be, x_ref, o, none, 1.0f, h_ref, w_h, eps, off);
    op->matmul_glu(be, glu_ref, h_ref, none, w_gate, w_up, CF_ACT_SILU, gate, up);
    qa.q = q[0], qa.k = k[0], qa.v = v[0];
    op->qkv(be, h_ref, &qa);

    /* the fold, twice (or recorded once and launched twice) from the same x0 */
    cf_graph *g = NULL;
    for (int rep = 0; rep < 2; rep++) {
        op->copy(be, x_fold, x0);
        cinfer_error e = {0};
        if (graph && rep == 0 && op->graph_begin(be, &e)) die("graph_begin", &e);
        if (!graph || rep == 0) {
            op->matmul_residual(be, x_fold, a, w_down, h_fold, hs, w_h, eps, off);
            op->matmul_glu(be, glu_fold, h_fold, hs, w_gate, w_up, CF_ACT_SILU, gate, up);
            qa.q = q[1], qa.k = k[1], qa.v = v[1], qa.x_scale = hs;
            op->qkv(be, h_fold, &qa);
        }
        if (graph && rep == 0 && op->graph_end(be, &g, &e)) die("graph_end", &e);
        if (graph) op->graph_launch(be, g);
        if (op->sync(be, &e)) die("sync", &e);
    }
    if (g) op->graph_free(be, g);
    char what[160];
    const char *wn = bits == 4 ? "q4" : bits == 8 ? "q8" : "bf16";
    float *s = rd(hs);
    snprintf(what, sizeof what, "%s, %d row%s%s: x", wn, n, n > 1 ? "s" : "", graph ? ", graph" : "");
    cmp(what, x_fold, NULL, x_ref, 1e-6);
    snprintf(what, sizeof what, "%s, %d row%s%s: h_scale * h", wn, n, n > 1 ? "s" : "", graph ? ", graph" : "");
    cmp(what, h_fold, s, h_ref, 8e-3);
    snprintf(what, sizeof what, "%s, %d row%s%s: matmul_glu with x_scale", wn, n, n > 1 ? "s" : "", graph ? ", graph" : "");
    cmp(what, glu_fold, NULL, glu_ref, 2e-2);
    snprintf(what, sizeof what, "%s, %d row%s%s: qkv with x_scale (q, k, v)", wn, n, n > 1 ? "s" : "", graph ? ", graph" : "");
    cmp(what, q[1], NULL, q[0], 2e-2);
    cmp(what, k[1], NULL, k[0], 2e-2);
    cmp(what, v[1], NULL, v[0], 2e-2);
    free(s);

    /* without h (a model's last block): x alone */
    op->copy(be, x_fold, x0);
    op->matmul_residual(be, x_fold, a, w_down, none, none, none, eps, off);
    snprintf(what, sizeof what, "%s, %d row%s: x alone (no h)", wn, n, n > 1 ? "s" : "");
    cmp(what, x_fold, NULL, x_ref, 1e-6);

    cf_tensor *ts[] = {&w_down, &w_gate, &w_up, &wq, &wk, &wv, &a, &x0, &w_h, &x_ref, &x_fold, &o, &h_ref, &h_fold, &hs,
                       &glu_ref, &glu_fold, &gate, &up, &q[0], &q[1], &k[0], &k[1], &v[0], &v[1], &pos, &inv_freq};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
        if (ts[i]->dtype != CF_Q && i >= 6) op->free_tensor(be, ts[i]);
    void *ks[] = {k1, k2, k3, k4, k5, k6};
    for (int i = 0; i < 6; i++) free(ks[i]);
}

int main(void) {
    cf_backend_params p = cf_backend_default_params();
    p.device = CF_DEVICE_CUDA;
    p.pool_bytes = (size_t)2 << 30;
    p.tuning.residual_fold_rows = 1;
    cinfer_error e = {0};
    cinfer_status st = cf_backend_create(&p, &be, &e);
    if (st == CINFER_E_NO_DEVICE || st == CINFER_E_UNSUPPORTED) {
        printf("SKIP: %s\n", e.message);
        return 77;
    }
    if (st) die("cuda backend", &e);
    op = be->ops;
    if (!op->matmul_residual || be->residual_fold_rows < 1) {
        printf("FAIL: the CUDA backend offers no residual fold\n");
        return 1;
    }
    const int bits[3] = {0, 4, 8};
    for (int b = 0; b < 3; b++) {
        one_case(bits[b], 1, 0);
        one_case(bits[b], 3, 0);
        one_case(bits[b], 1, 1);
    }
    if (op->sync(be, &e)) die("sync", &e);
    cf_backend_destroy(be);
    printf("%d checks, %d failures\n", checks, failures);
    return failures != 0;
}
