/* test_cpu_kernels.c: every matmul kernel this CPU runs (portable C, AVX2, AVX-512; each forced in turn) for
 * f32/bf16/f16 weights:
 *  - accuracy against a double precision reference, for 1 to 5 and 17 activation rows, lengths with and
 *    without a vector tail, on both sides of the 1-row path's switch from one fma chain to tiles of several
 *    weight rows (2048 values), weight row counts that leave partial tiles, strided rows and outputs;
 *  - batch invariance: out[i][j] is bit-identical to the row computed alone (n = 1) by the portable C kernel,
 *    for every kernel (so the instruction sets agree too), n = 1, 3, 4, 5, 8, 9, 13, 16, 17, 25, 26, 27, 64,
 *    101 (from 24 rows the AVX-512 prefill tiles of 6 rows of x, remainders 0 to 5, two panels of x at
 *    101), rows at several offsets in x, weight rows split at any row, panels of x crossed;
 *  - bf16 weights (x rounded to bf16, the AVX512-BF16 dot product and its emulation): the same bits on every
 *    kernel for subnormal, underflowing, infinite and NaN values;
 *  - the same through the backend's matmul (the kernel in use, 1 to 3 threads, with a bias). */
#include "backend/backend.h"
#include "backend/cpu/cpu_kernels.h"
#include "base/status.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../check.h"

static const char *isa_names[] = {"C", "AVX2", "AVX-512"};
static const cf_dtype types[] = {CF_F32, CF_BF16, CF_F16};

static uint64_t rs = 7;
static float frand(void) {  /* [-1, 1] in steps of 1/1000 */
    rs = rs * 6364136223846793005ull + 1;
    return (float)((rs >> 40) % 2001) / 1000.0f - 1.0f;
}

/* A weight matrix [d, ws] of type t with its f32 values, and activations [n, xs]; owned by the caller. */
typedef struct mats {
    void *w;
    float *wf, *x;
} mats;

static int make(mats *m, cf_dtype t, int64_t d, int64_t ws, int64_t n, int64_t xs) {
    m->w = malloc((size_t)(d * ws) * cf_dtype_size(t));  /* exact sizes: ASan sees any read past the end */
    m->wf = malloc((size_t)(d * ws) * sizeof(float));
    m->x = malloc((size_t)(n * xs) * sizeof(float));
    if (!m->w || !m->wf || !m->x) return 0;
    for (int64_t i = 0; i < d * ws; i++) {
        float v = frand();
        if (t == CF_F32) ((float *)m->w)[i] = m->wf[i] = v;
        else {
            uint16_t h = t == CF_BF16 ? cf_f32_to_bf16(v) : cf_f32_to_f16(v);
            ((uint16_t *)m->w)[i] = h;
            m->wf[i] = t == CF_BF16 ? cf_bf16_to_f32(h) : cf_f16_to_f32(h);
        }
    }
    for (int64_t i = 0; i < n * xs; i++) m->x[i] = frand();
    return 1;
}

static void unmake(mats *m) {
    free(m->w);
    free(m->wf);
    free(m->x);
}

/* x rounded to bf16 as the bf16 kernels define it: to nearest even, subnormals to zero (no NaN here) */
static float bf16_round(float v) {
    uint32_t u;
    memcpy(&u, &v, 4);
    if ((u & 0x7F800000u) == 0) u &= 0x80000000u;
    u = (u + 0x7FFFu + (u >> 16 & 1)) & 0xFFFF0000u;
    memcpy(&v, &u, 4);
    return v;
}

static const void *wrow(const mats *m, cf_dtype t, int64_t j, int64_t ws) {
    return (const char *)m->w + (size_t)(j * ws) * cf_dtype_size(t);
}

static void test_accuracy(cf_gemm_fn gemm, int isa, cf_dtype t) {
    static const int lengths[] = {1, 7, 8, 15, 16, 17, 31, 64, 100, 2048, 2049, 4096 + 13};
    static const int rows[] = {1, 2, 3, 4, 5, 17};
    static const int douts[] = {1, 3, 16, 21, 45};  /* 45: two full 16-row blocks, then 8 + 5 rows of the 1-row tiles */
    enum { XS = 4200, WS = 4111, NMAX = 17, DMAX = 45, OS = 53 };
    mats m;
    if (!make(&m, t, DMAX, WS, NMAX, XS)) { CHECK(0, "out of memory"); unmake(&m); return; }
    float *out = malloc(sizeof(float) * NMAX * OS);
    for (size_t li = 0; li < sizeof lengths / sizeof lengths[0] && out; li++) {
        const int k = lengths[li];
        for (size_t ni = 0; ni < sizeof rows / sizeof rows[0]; ni++) {
            for (size_t di = 0; di < sizeof douts / sizeof douts[0]; di++) {
                const int n = rows[ni], d = douts[di];
                for (int i = 0; i < NMAX * OS; i++) out[i] = -1234.5f;
                gemm(m.x, XS, n, m.w, WS, d, k, out, OS);
                for (int i = 0; i < n; i++) {
                    for (int j = 0; j < OS; j++) {
                        if (j >= d) {
                            CHECK(out[i * OS + j] == -1234.5f, "%s %s: wrote outside [n, d] at %d,%d", isa_names[isa], cf_dtype_name(t), i, j);
                            continue;
                        }
                        /* ref: the kernel's definition in double (bf16 weights: x rounded to bf16);
                         * plain: the exact product, which rounding x moves by at most 2^-8 of each term */
                        double ref = 0, plain = 0, mag = 0;
                        for (int c = 0; c < k; c++) {
                            const float xv = m.x[i * XS + c], xr = t == CF_BF16 ? bf16_round(xv) : xv;
                            ref += (double)xr * m.wf[j * WS + c];
                            plain += (double)xv * m.wf[j * WS + c];
                            mag += fabs((double)xv * m.wf[j * WS + c]);
                        }
                        double e = fabs(out[i * OS + j] - ref);
                        CHECK(e <= 1e-6 * mag + 1e-6, "%s %s k=%d n=%d d=%d at %d,%d: %.9g vs %.9g", isa_names[isa], cf_dtype_name(t), k, n, d,
                              i, j, out[i * OS + j], ref);
                        CHECK(fabs(ref - plain) <= 0x1p-8 * mag, "%s %s: rounding x moved %d,%d by %g of %g", isa_names[isa],
                              cf_dtype_name(t), i, j, fabs(ref - plain), mag);
                    }
                }
                for (int i = n; i < NMAX; i++)
                    for (int j = 0; j < OS; j++) CHECK(out[i * OS + j] == -1234.5f, "%s: wrote row %d of %d", isa_names[isa], i, n);
            }
        }
    }
    free(out);
    unmake(&m);
}

/* every row of every call bit-identical to that row computed alone by the portable C kernel */
static void test_invariance(cf_dtype t) {
    static const int lengths[] = {64, 100, 768, 2049, 4096 + 13};  /* the last crosses panels of x at n = 64 */
    static const int ns[] = {1, 3, 4, 5, 8, 9, 13, 16, 17, 25, 26, 27, 64, 101};
    static const int offsets[] = {0, 1, 2, 3, 5};
    static const int wsplits[] = {0, 5, 16};  /* the call's first weight row */
    enum { NX = 101 + 5, XS = 4112, WS = 4110 };
    const int D = t == CF_BF16 ? 53 : 37;  /* bf16: past one block of weight rows of the AVX2 prefill (48) */
    mats m;
    float *alone = malloc(sizeof(float) * NX * D), *out = malloc(sizeof(float) * NX * D);
    if (!make(&m, t, D, WS, NX, XS) || !alone || !out) {
        CHECK(0, "out of memory");
        free(alone);
        free(out);
        unmake(&m);
        return;
    }
    for (size_t li = 0; li < sizeof lengths / sizeof lengths[0]; li++) {
        const int k = lengths[li];
        cf_gemm_fn ref = cf_cpu_gemm_kernel_isa(t, CF_ISA_C);
        for (int i = 0; i < NX; i++) ref(m.x + i * XS, XS, 1, m.w, WS, D, k, alone + i * D, D);
        for (int isa = CF_ISA_C; isa <= CF_ISA_AVX512; isa++) {
            cf_gemm_fn gemm = cf_cpu_gemm_kernel_isa(t, (cf_cpu_isa_level)isa);
            if (!gemm) continue;
            int bad = 0, calls = 0;
            for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++)
                for (size_t oi = 0; oi < sizeof offsets / sizeof offsets[0]; oi++)
                    for (size_t si = 0; si < sizeof wsplits / sizeof wsplits[0]; si++) {
                        const int n = ns[ni], off = offsets[oi], j0 = wsplits[si];
                        memset(out, 0, sizeof(float) * NX * D);
                        gemm(m.x + off * XS, XS, n, wrow(&m, t, j0, WS), WS, D - j0, k, out + j0, D);
                        calls++;
                        for (int i = 0; i < n; i++)
                            if (memcmp(out + i * D + j0, alone + (off + i) * D + j0, sizeof(float) * (D - j0))) bad++;
                    }
            gemm(m.x, XS, NX, m.w, WS, D, k, out, D);
            bad += memcmp(out, alone, sizeof(float) * NX * D) != 0;
            CHECK(!bad, "%s %s k=%d: %d rows (in %d calls) differ from the row computed alone by the C kernel", isa_names[isa],
                  cf_dtype_name(t), k, bad, calls + 1);
        }
    }
    free(alone);
    free(out);
    unmake(&m);
}

/* bf16 weights at the edges of the format: subnormal x (read as zero) and weights, products and sums that
 * fall below FLT_MIN (flushed to zero by the AVX512-BF16 instruction and by its emulation), infinities and
 * NaN: every kernel and n the same bits as the C kernel (NaN: a NaN) */
static void test_bf16_edges(void) {
    enum { K = 300, D = 37, NX = 30 };
    static const int ns[] = {1, 2, 5, 30};
    uint16_t *w = malloc(sizeof(uint16_t) * D * K);
    float *x = malloc(sizeof(float) * NX * K), *want = malloc(sizeof(float) * NX * D), *got = malloc(sizeof(float) * NX * D);
    if (!w || !x || !want || !got) { CHECK(0, "out of memory"); free(w), free(x), free(want), free(got); return; }
    for (int round = 0; round < 4; round++) {
        for (int i = 0; i < D * K; i++) {
            const int e = (int)((rs >> 33) % 100);
            float v = frand();
            /* round 0 and 1: tiny weights (products near FLT_MIN: partial sums go subnormal); 2: specials too */
            if (round < 2) v = ldexpf(v, -60 - (int)((rs >> 20) % 8));
            if (e < 3) v = ldexpf(v, -130);  /* subnormal */
            if (round >= 2 && e == 3) v = INFINITY;
            if (round >= 3 && e == 4) v = NAN;
            w[i] = cf_f32_to_bf16(v);
        }
        for (int i = 0; i < NX * K; i++) {
            const int e = (int)((rs >> 33) % 100);
            float v = frand();
            if (round < 2) v = ldexpf(v, round == 0 ? -65 : -58);
            if (e < 3) v = ldexpf(v, -128);  /* an f32 subnormal: zero in bf16 */
            if (e == 3) v = ldexpf(1.0f, -126) * (1.0f - 0x1p-10f);  /* rounds up to FLT_MIN... unless read as zero */
            if (round >= 2 && e == 4) v = -INFINITY;
            if (round >= 3 && e == 5) v = NAN;
            x[i] = v;
        }
        cf_cpu_gemm_kernel_isa(CF_BF16, CF_ISA_C)(x, K, NX, w, K, D, K, want, D);
        int zeros = 0;
        for (int i = 0; i < NX * D; i++) zeros += want[i] == 0;
        if (round == 0) CHECK(zeros > 0 && zeros < NX * D, "the tiny round gives %d zeros of %d", zeros, NX * D);
        for (int isa = CF_ISA_AVX2; isa <= CF_ISA_AVX512; isa++) {
            cf_gemm_fn gemm = cf_cpu_gemm_kernel_isa(CF_BF16, (cf_cpu_isa_level)isa);
            if (!gemm) continue;
            for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
                int bad = 0;
                for (int i0 = 0; i0 + ns[ni] <= NX; i0 += ns[ni]) {
                    gemm(x + i0 * K, K, ns[ni], w, K, D, K, got + i0 * D, D);
                    for (int j = 0; j < ns[ni] * D; j++) {
                        const float a = got[i0 * D + j], b = want[i0 * D + j];
                        bad += (a != a) != (b != b) || (a == a && memcmp(&a, &b, sizeof a));
                    }
                }
                CHECK(!bad, "%s bf16 edge round %d, n=%d: %d values differ from the C kernel", isa_names[isa], round, ns[ni], bad);
            }
        }
    }
    free(w), free(x), free(want), free(got);
}

/* the backend's matmul (the best kernel, threads split the weight rows): each row as computed alone by
 * the kernel, plus the bias */
static void test_backend(void) {
    enum { K = 300, D = 200, NX = 70 };
    const int ns[] = {1, 4, 16, 17, 64};
    for (int tt = 0; tt < 3; tt++) {
        const cf_dtype t = types[tt];
        mats m;
        float *alone = malloc(sizeof(float) * NX * D), *bias = malloc(sizeof(float) * D);
        if (!make(&m, t, D, K, NX, K) || !alone || !bias) {
            CHECK(0, "out of memory");
            free(alone);
            free(bias);
            unmake(&m);
            return;
        }
        for (int j = 0; j < D; j++) bias[j] = frand();
        cf_gemm_fn gemm = cf_cpu_gemm_kernel(t);
        for (int i = 0; i < NX; i++) {
            gemm(m.x + i * K, K, 1, m.w, K, D, K, alone + i * D, D);
            for (int j = 0; j < D; j++) alone[i * D + j] += bias[j];
        }
        for (int threads = 1; threads <= 3; threads++) {
            cf_backend_params p = cf_backend_default_params();
            p.device = CF_DEVICE_CPU;
            p.n_threads = threads;
            cf_backend *be = NULL;
            cinfer_error err = {0};
            if (cf_cpu_backend_create(&p, &be, &err) != CINFER_OK) { CHECK(0, "backend: %s", err.message); continue; }
            cf_tensor w, x, o, b;
            be->ops->upload_weight(be, m.w, t, D, K, &w, &err);
            be->ops->upload_weight(be, m.x, CF_F32, NX, K, &x, &err);
            be->ops->upload_weight(be, bias, CF_F32, 1, D, &b, &err);
            if (be->ops->alloc(be, CF_F32, NX, D, &o, &err) != CINFER_OK) {
                CHECK(0, "alloc: %s", err.message);
                cf_backend_destroy(be);
                continue;
            }
            float *got = malloc(sizeof(float) * NX * D);
            for (size_t ni = 0; ni < sizeof ns / sizeof ns[0] && got; ni++)
                for (int off = 0; off + ns[ni] <= NX; off += 3) {
                    be->ops->matmul(be, cf_rows(o, 0, ns[ni]), cf_rows(x, off, ns[ni]), w, b);
                    CHECK(be->ops->read(be, got, cf_rows(o, 0, ns[ni]), &err) == CINFER_OK, "read: %s", err.message);
                    CHECK(!memcmp(got, alone + off * D, sizeof(float) * ns[ni] * D), "backend %s, %d threads, n=%d at row %d: differs",
                          cf_dtype_name(t), threads, ns[ni], off);
                }
            free(got);
            be->ops->free_tensor(be, &o);
            cf_backend_destroy(be);
        }
        free(alone);
        free(bias);
        unmake(&m);
    }
}

int main(void) {
    int ran = 0;
    for (int isa = CF_ISA_C; isa <= CF_ISA_AVX512; isa++) {
        for (int t = 0; t < 3; t++) {
            cf_gemm_fn gemm = cf_cpu_gemm_kernel_isa(types[t], (cf_cpu_isa_level)isa);
            if (!gemm) { printf("skip %s (not on this CPU)\n", isa_names[isa]); break; }
            test_accuracy(gemm, isa, types[t]);
            ran++;
        }
    }
    for (int t = 0; t < 3; t++) test_invariance(types[t]);
    test_bf16_edges();
    test_backend();
    printf("%d kernels, %d checks, %d failed (kernel in use: %s)\n", ran, checks, failures, cf_cpu_isa());
    return failures || ran == 0;
}
