/* test_qmatmul.c: the CPU backend with quantized weights (upload_qweight), through its ops as the model
 * calls them: matmul (with a bias, n = 1, 3, 17 rows, 1 and 2 threads) against a double-precision product
 * with the reference dequantizer's weights (4 and 8 bits: within the int8 rounding of x that cpu_quant.h
 * defines), every bits x group and scale dtype; a row's result the same bits
 * whatever the batch and thread count; the fused matmul_glu equal to its plain sequence; embed of a quantized
 * table equal to the dequantized rows times the scale (ids outside give zeros). */
#include "backend/backend.h"
#include "base/qweight.h"
#include "check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng = 99;
static float frand(void) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)(rng >> 40) / (float)(1 << 24) * 2.0f - 1.0f;
}

static cf_backend *make(int threads) {
    cf_backend_params p = cf_backend_default_params();
    p.device = CF_DEVICE_CPU;
    p.n_threads = threads;
    cf_backend *be = NULL;
    cinfer_error e = {0};
    if (cf_backend_create(&p, &be, &e) != CINFER_OK) {
        fprintf(stderr, "cpu backend: %s\n", e.message);
        exit(1);
    }
    return be;
}

typedef struct qbuf {
    uint32_t *q;
    void *s, *b;
    cf_qweight w;
} qbuf;

static void qbuf_make(qbuf *o, int64_t rows, int64_t cols, int bits, int group, cf_dtype sb) {
    float *f = malloc((size_t)(rows * cols) * sizeof *f);
    for (int64_t i = 0; i < rows * cols; i++) f[i] = 0.05f * frand() + (i % 97 == 0 ? 0.2f : 0.0f);
    const int64_t wpr = cf_qweight_words_per_row(bits, cols), G = cols / group;
    o->q = malloc((size_t)(rows * wpr) * 4);
    o->s = malloc((size_t)(rows * G) * 4);
    o->b = malloc((size_t)(rows * G) * 4);
    cf_qweight_quantize(f, rows, cols, bits, group, sb, o->q, o->s, o->b);
    o->w = (cf_qweight){.q = o->q, .scales = o->s, .biases = o->b, .sb_dtype = sb, .bits = bits, .group = group, .rows = rows, .cols = cols};
    free(f);
}

static void qbuf_free(qbuf *o) {
    free(o->q);
    free(o->s);
    free(o->b);
}

static void test_matmul(void) {
    const int bits_l[] = {2, 3, 4, 5, 6, 8}, groups[] = {32, 64, 128};
    const cf_dtype dts[] = {CF_BF16, CF_F16, CF_F32};
    const int64_t d = 70, k = 384;
    cf_backend *be1 = make(1), *be2 = make(2);
    double worst = 0;
    for (int bi = 0; bi < 6; bi++)
        for (int gi = 0; gi < 3; gi++) {
            const cf_dtype sb = dts[(bi + gi) % 3];
            const int bits = bits_l[bi], group = groups[gi];
            qbuf qb;
            qbuf_make(&qb, d, k, bits, group, sb);
            float *wd = malloc((size_t)(d * k) * sizeof *wd), bias[70];
            for (int64_t r = 0; r < d; r++) cf_qweight_dequant_row(&qb.w, r, wd + r * k);
            for (int64_t r = 0; r < d; r++) bias[r] = 0.1f * frand();
            float single[17 * 70];
            for (int t = 0; t < 2; t++) {
                cf_backend *be = t ? be2 : be1;
                cf_tensor w, x, out, bt;
                cinfer_error e = {0};
                CHECK(be->ops->upload_qweight(be, &qb.w, &w, &e) == CINFER_OK, "upload: %s", e.message);
                CHECK(w.dtype == CF_Q && w.rows == d && w.cols == k, "upload: a CF_Q [%lld, %lld] tensor", (long long)d, (long long)k);
                be->ops->alloc(be, CF_F32, 17, k, &x, &e);
                be->ops->alloc(be, CF_F32, 17, d, &out, &e);
                be->ops->alloc(be, CF_F32, 1, d, &bt, &e);
                be->ops->write(be, bt, bias);
                rng = 5;   /* the same x for both thread counts */
                for (int64_t i = 0; i < 17 * k; i++) ((float *)x.data)[i] = frand();
                const int ns[] = {1, 3, 17};
                for (int ni = 0; ni < 3; ni++) {
                    const int n = ns[ni];
                    be->ops->matmul(be, cf_rows(out, 0, n), cf_rows(x, 0, n), w, bt);
                    int bad = 0;
                    for (int i = 0; i < n; i++)
                        for (int64_t r = 0; r < d; r++) {
                            double ref = bias[r], mag = fabs(bias[r]), act = 0;
                            for (int64_t c = 0; c < k; c++) {
                                const float *xb = (float *)x.data + i * k + c / 32 * 32;
                                double amax = 0;
                                for (int j = 0; j < 32; j++) amax = fmax(amax, fabs((double)xb[j]));
                                ref += (double)((float *)x.data)[i * k + c] * wd[r * k + c];
                                mag += fabs((double)((float *)x.data)[i * k + c] * wd[r * k + c]);
                                act += fabs((double)wd[r * k + c]) * amax / 127 * (0.5 + 1.0 / 4096);
                            }
                            const double got = ((float *)out.data)[i * d + r], err = fabs(got - ref);
                            /* f32 accumulation of k products: within k * 2^-24 of the magnitude sum, with margin;
                             * 4 and 8 bits: plus the int8 rounding of x, d / 2 per column (cpu_quant.h) */
                            if (err > 4.0 * (double)k * 5.96e-8 * mag + 1e-6 + (bits == 4 || bits == 8 ? act : 0)) bad++;
                            if (mag > 0 && err / mag > worst) worst = err / mag;
                        }
                    CHECK(!bad, "matmul %d bits group %d %s n %d threads %d: %d values off", bits, group, cf_dtype_name(sb), n, t + 1, bad);
                    /* batch invariance: the row of n = 1 (thread count 1) and every row of any batch, same bits */
                    if (n == 1 && t == 0) memcpy(single, out.data, (size_t)d * sizeof(float));
                    CHECK(!memcmp(single, out.data, (size_t)d * sizeof(float)), "matmul %d bits group %d: row 0 of n %d (%d threads) differs from n 1",
                          bits, group, n, t + 1);
                }
                be->ops->free_tensor(be, &x);
                be->ops->free_tensor(be, &out);
                be->ops->free_tensor(be, &bt);
            }
            free(wd);
            qbuf_free(&qb);
        }
    printf("matmul: worst |error| / sum |x w| = %.3g\n", worst);
    cf_backend_destroy(be1);
    cf_backend_destroy(be2);
}

static void test_fused_and_embed(void) {
    cf_backend *be = make(2);
    const int64_t D = 128, F = 256, V = 40;
    qbuf g, u, t;
    qbuf_make(&g, F, D, 4, 64, CF_BF16);
    qbuf_make(&u, F, D, 8, 32, CF_BF16);
    qbuf_make(&t, V, D, 4, 64, CF_F16);
    cf_tensor wg, wu, wt, x, gate, up, o1, o2, ids, emb;
    cinfer_error e = {0};
    CHECK(be->ops->upload_qweight(be, &g.w, &wg, &e) == CINFER_OK && be->ops->upload_qweight(be, &u.w, &wu, &e) == CINFER_OK &&
              be->ops->upload_qweight(be, &t.w, &wt, &e) == CINFER_OK,
          "upload: %s", e.message);
    be->ops->alloc(be, CF_F32, 5, D, &x, &e);
    be->ops->alloc(be, CF_F32, 5, F, &gate, &e);
    be->ops->alloc(be, CF_F32, 5, F, &up, &e);
    be->ops->alloc(be, CF_F32, 5, F, &o1, &e);
    be->ops->alloc(be, CF_F32, 5, F, &o2, &e);
    for (int64_t i = 0; i < 5 * D; i++) ((float *)x.data)[i] = frand();
    const cf_tensor none = {0};
    be->ops->matmul_glu(be, o1, x, wg, wu, CF_ACT_SILU, gate, up);
    be->ops->matmul(be, gate, x, wg, none);
    be->ops->matmul(be, up, x, wu, none);
    be->ops->glu(be, o2, gate, up, CF_ACT_SILU);
    CHECK(!memcmp(o1.data, o2.data, (size_t)(5 * F) * sizeof(float)), "matmul_glu with quantized weights differs from its plain sequence");
    be->ops->alloc(be, CF_I32, 4, 1, &ids, &e);
    be->ops->alloc(be, CF_F32, 4, D, &emb, &e);
    const int32_t id[4] = {0, 39, 7, 40};
    be->ops->write(be, ids, id);
    be->ops->embed(be, emb, wt, ids, 2.0f);
    float want[128];
    int bad = 0;
    for (int i = 0; i < 4; i++) {
        if (id[i] < V) cf_qweight_dequant_row(&t.w, id[i], want);
        for (int64_t c = 0; c < D; c++) bad += ((float *)emb.data)[i * D + c] != (id[i] < V ? want[c] * 2.0f : 0.0f);
    }
    CHECK(!bad, "embed of a quantized table: %d values differ from the dequantized rows", bad);
    cf_tensor *ts[] = {&x, &gate, &up, &o1, &o2, &ids, &emb};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) be->ops->free_tensor(be, ts[i]);
    cf_backend_destroy(be);
    qbuf_free(&g);
    qbuf_free(&u);
    qbuf_free(&t);
}

int main(void) {
    test_matmul();
    test_fused_and_embed();
    printf("%d checks, %d failures\n", checks, failures);
    return failures != 0;
}
