/* cpu_kernels.c: dot products of up to 4 f32 activation rows with one weight row (f32, bf16 or f16),
 * one weight load feeding 4 FMAs. The AVX2 versions are compiled with target attributes and chosen at
 * run time, so the default build needs no -march flags. */
#include "backend/cpu/cpu_kernels.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CF_X86 1
#endif

static inline float wval(const void *w, cf_dtype t, int i) {
    switch (t) {
    case CF_BF16: return cf_bf16_to_f32(((const uint16_t *)w)[i]);
    case CF_F16: return cf_f16_to_f32(((const uint16_t *)w)[i]);
    default: return ((const float *)w)[i];
    }
}

#define DEFINE_SCALAR(name, T)                                                                      \
    static void name(const float *x, int64_t xs, int nx, const void *w, int k, float *out, int64_t os) { \
        for (int r = 0; r < nx; r++) {                                                              \
            float acc[8] = {0};                                                                     \
            const float *xr = x + r * xs;                                                           \
            int i = 0;                                                                              \
            for (; i + 8 <= k; i += 8)                                                              \
                for (int l = 0; l < 8; l++) acc[l] += xr[i + l] * wval(w, T, i + l);               \
            float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])); \
            for (; i < k; i++) s += xr[i] * wval(w, T, i);                                          \
            out[r * os] = s;                                                                        \
        }                                                                                           \
    }
DEFINE_SCALAR(dot_f32_c, CF_F32)
DEFINE_SCALAR(dot_bf16_c, CF_BF16)
DEFINE_SCALAR(dot_f16_c, CF_F16)

#ifdef CF_X86
#define AVX2 __attribute__((target("avx2,fma,f16c")))

AVX2 static inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

AVX2 static inline __m256 load_f32(const void *w, int i) { return _mm256_loadu_ps((const float *)w + i); }
AVX2 static inline __m256 load_bf16(const void *w, int i) {
    __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)w + i));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
AVX2 static inline __m256 load_f16(const void *w, int i) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)w + i)));
}

#define DEFINE_AVX2(name, LOAD, T)                                                                  \
    AVX2 static void name(const float *x, int64_t xs, int nx, const void *w, int k, float *out, int64_t os) { \
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;                                 \
        const float *x0 = x, *x1 = x + xs, *x2 = x + 2 * xs, *x3 = x + 3 * xs;                     \
        int i = 0;                                                                                  \
        if (nx == 4) {                                                                              \
            for (; i + 8 <= k; i += 8) {                                                            \
                __m256 wv = LOAD(w, i);                                                             \
                a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x0 + i), wv, a0);                              \
                a1 = _mm256_fmadd_ps(_mm256_loadu_ps(x1 + i), wv, a1);                              \
                a2 = _mm256_fmadd_ps(_mm256_loadu_ps(x2 + i), wv, a2);                              \
                a3 = _mm256_fmadd_ps(_mm256_loadu_ps(x3 + i), wv, a3);                              \
            }                                                                                       \
        } else if (nx == 1) {                                                                       \
            for (; i + 16 <= k; i += 16) {                                                          \
                a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x0 + i), LOAD(w, i), a0);                      \
                a1 = _mm256_fmadd_ps(_mm256_loadu_ps(x0 + i + 8), LOAD(w, i + 8), a1);              \
            }                                                                                       \
            for (; i + 8 <= k; i += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x0 + i), LOAD(w, i), a0); \
            a0 = _mm256_add_ps(a0, a1);                                                             \
            a1 = _mm256_setzero_ps();                                                               \
        } else {                                                                                    \
            for (; i + 8 <= k; i += 8) {                                                            \
                __m256 wv = LOAD(w, i);                                                             \
                a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x0 + i), wv, a0);                              \
                if (nx > 1) a1 = _mm256_fmadd_ps(_mm256_loadu_ps(x1 + i), wv, a1);                  \
                if (nx > 2) a2 = _mm256_fmadd_ps(_mm256_loadu_ps(x2 + i), wv, a2);                  \
            }                                                                                       \
        }                                                                                           \
        float s[4] = {hsum8(a0), hsum8(a1), hsum8(a2), hsum8(a3)};                                  \
        for (; i < k; i++) {                                                                        \
            float wi = wval(w, T, i);                                                               \
            for (int r = 0; r < nx; r++) s[r] += x[r * xs + i] * wi;                                \
        }                                                                                           \
        for (int r = 0; r < nx; r++) out[r * os] = s[r];                                            \
    }
DEFINE_AVX2(dot_f32_avx2, load_f32, CF_F32)
DEFINE_AVX2(dot_bf16_avx2, load_bf16, CF_BF16)
DEFINE_AVX2(dot_f16_avx2, load_f16, CF_F16)

static int have_avx2(void) {
    static int cached = -1;
    if (cached < 0) {
        __builtin_cpu_init();
        cached = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    }
    return cached;
}
#else
static int have_avx2(void) { return 0; }
#endif

cf_dot_fn cf_cpu_dot_kernel(cf_dtype wdt) {
#ifdef CF_X86
    if (have_avx2()) {
        switch (wdt) {
        case CF_BF16: return dot_bf16_avx2;
        case CF_F16: return dot_f16_avx2;
        default: return dot_f32_avx2;
        }
    }
#endif
    switch (wdt) {
    case CF_BF16: return dot_bf16_c;
    case CF_F16: return dot_f16_c;
    default: return dot_f32_c;
    }
}

const char *cf_cpu_isa(void) { return have_avx2() ? "avx2+fma" : "portable C"; }
