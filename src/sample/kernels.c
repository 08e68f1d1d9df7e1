/* kernels.c: vectorized row passes for the sampler (max/NaN scan, threshold scan, exp with block
 * sums). The exp pass also has an AVX2 version, chosen at run time, whose results are bit-identical
 * (same operations, no fused multiply-add, same summation order). */
#include "sample/kernels.h"

#include <math.h>
#include <string.h>

typedef float v4f __attribute__((vector_size(16)));
typedef int32_t v4i __attribute__((vector_size(16)));

static v4f load4(const float *p) {
    v4f x;
    memcpy(&x, p, sizeof x);
    return x;
}

static v4f select4(v4i mask, v4f a, v4f b) {
    return (v4f)(((v4i)a & mask) | ((v4i)b & ~mask));
}

static bool any4(v4i m) {
    uint64_t half[2];
    memcpy(half, &m, sizeof half);
    return (half[0] | half[1]) != 0;
}

float cf_row_max(const float *v, int32_t n, bool *bad) {
    /* Four running maxima so that the compare-select chains overlap. */
    v4f m[4];
    v4i nan = {0, 0, 0, 0};
    for (int k = 0; k < 4; k++) m[k] = (v4f){-INFINITY, -INFINITY, -INFINITY, -INFINITY};
    int32_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int k = 0; k < 4; k++) {
            v4f x = load4(v + i + 4 * k);
            m[k] = select4(x > m[k], x, m[k]);
            nan |= x != x;
        }
    float r = -INFINITY;
    int32_t any_nan = any4(nan);
    for (int k = 0; k < 4; k++)
        for (int j = 0; j < 4; j++) r = m[k][j] > r ? m[k][j] : r;
    for (; i < n; i++) {
        r = v[i] > r ? v[i] : r;
        any_nan |= v[i] != v[i];
    }
    *bad = any_nan || r == INFINITY;
    return r;
}

int32_t cf_row_next_above(const float *v, int32_t n, int32_t i, float x) {
    const v4f xs = {x, x, x, x};
    for (; i + 16 <= n; i += 16) {
        v4i hit = (load4(v + i) > xs) | (load4(v + i + 4) > xs) | (load4(v + i + 8) > xs) | (load4(v + i + 12) > xs);
        if (any4(hit)) break;
    }
    for (; i < n; i++)
        if (v[i] > x) return i;
    return n;
}

/* exp(x) = 2^n * exp(r), n = round(x / ln 2), |r| <= ln 2 / 2 (ln 2 split in two so that n * hi is
 * exact), exp(r) by its degree-7 Taylor polynomial (truncation error < 6e-9). Lanes below -87 are
 * 0. One body for both vector widths. */
#define EXP_NEG(vf, vi, x, out)                                                          \
    do {                                                                                 \
        const vi under_ = (x) < -87.0f;                                                  \
        const vf xc_ = (vf)(((vi)(x) & ~under_) | ((vi)((vf){0} - 87.0f) & under_));     \
        const vf n_ = (xc_ * 1.44269504088896341f + 12582912.0f) - 12582912.0f;          \
        vf r_ = xc_ - n_ * 0.693359375f;                                                 \
        r_ = r_ + n_ * 2.12194440e-4f;                                                   \
        vf p_ = r_ * (1.0f / 5040) + 1.0f / 720;                                         \
        p_ = p_ * r_ + 1.0f / 120;                                                       \
        p_ = p_ * r_ + 1.0f / 24;                                                        \
        p_ = p_ * r_ + 1.0f / 6;                                                         \
        p_ = p_ * r_ + 0.5f;                                                             \
        p_ = p_ * r_ + 1.0f;                                                             \
        p_ = p_ * r_ + 1.0f;                                                             \
        const vi scale_ = (__builtin_convertvector(n_, vi) + 127) << 23;                 \
        (out) = (vf)((vi)(p_ * (vf)scale_) & ~under_);                                   \
    } while (0)

static v4f exp_neg4(v4f x) {
    v4f y;
    EXP_NEG(v4f, v4i, x, y);
    return y;
}

float cf_exp_neg(float x) {
    return exp_neg4((v4f){x, x, x, x})[0];
}

/* One step of the exp pass: 8 values, summed into 8 lanes (lane j takes elements j mod 8). */
static void exp8_portable(const float *v, float *w, float shift, float scale, float acc[8]) {
    for (int h = 0; h < 2; h++) {
        v4f y = exp_neg4((load4(v + 4 * h) - shift) * scale), a = load4(acc + 4 * h);
        memcpy(w + 4 * h, &y, sizeof y);
        a += y;
        memcpy(acc + 4 * h, &a, sizeof a);
    }
}

/* The pass itself, for either step: whole 8-value steps, a -inf-padded last step, lanes summed in
 * order into a double per block. */
#define DEFINE_ROW_EXP(name, step, attr)                                                             \
    attr static double name(const float *v, float *w, int32_t n, float shift, float scale, double *blocks) { \
        double total = 0;                                                                            \
        for (int32_t b = 0; b < n; b += CF_EXP_BLOCK) {                                              \
            const int32_t end = n - b < CF_EXP_BLOCK ? n : b + CF_EXP_BLOCK;                         \
            float acc[8] = {0};                                                                      \
            int32_t i = b;                                                                           \
            for (; i + 8 <= end; i += 8) step(v + i, w + i, shift, scale, acc);                      \
            if (i < end) {                                                                           \
                float in[8], out[8];                                                                 \
                for (int j = 0; j < 8; j++) in[j] = i + j < end ? v[i + j] : -INFINITY;              \
                step(in, out, shift, scale, acc);                                                    \
                memcpy(w + i, out, (size_t)(end - i) * sizeof *w);                                   \
            }                                                                                        \
            double sum = 0;                                                                          \
            for (int j = 0; j < 8; j++) sum += acc[j];                                               \
            if (blocks) blocks[b / CF_EXP_BLOCK] = sum;                                              \
            total += sum;                                                                            \
        }                                                                                            \
        return total;                                                                                \
    }

DEFINE_ROW_EXP(row_exp_portable, exp8_portable, )

#if defined(__x86_64__) && defined(__GNUC__)
#define AVX2 __attribute__((target("avx2")))
typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));

AVX2 static void exp8_avx2(const float *v, float *w, float shift, float scale, float acc[8]) {
    v8f x, y, a;
    memcpy(&x, v, sizeof x);
    memcpy(&a, acc, sizeof a);
    x = (x - shift) * scale;
    EXP_NEG(v8f, v8i, x, y);
    memcpy(w, &y, sizeof y);
    a += y;
    memcpy(acc, &a, sizeof a);
}

DEFINE_ROW_EXP(row_exp_avx2, exp8_avx2, AVX2)

static bool have_avx2(void) {
    static int cached = -1; /* a benign race: every thread computes the same value */
    if (cached < 0) cached = __builtin_cpu_supports("avx2") ? 1 : 0;
    return cached == 1;
}
#endif

double cf_row_exp(const float *v, float *w, int32_t n, float shift, float scale, double *blocks) {
#ifdef AVX2
    if (have_avx2()) return row_exp_avx2(v, w, n, shift, scale, blocks);
#endif
    return row_exp_portable(v, w, n, shift, scale, blocks);
}
