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

#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,fma,f16c")))

AVX512 static inline __m512 load16_f32(const void *w, int i) { return _mm512_loadu_ps((const float *)w + i); }
AVX512 static inline __m512 load16_bf16(const void *w, int i) {
    __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)w + i));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
AVX512 static inline __m512 load16_f16(const void *w, int i) {
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)w + i)));
}

/* 16 lanes per step; each weight vector feeds every activation row. */
#define DEFINE_AVX512(name, LOAD, T)                                                                \
    AVX512 static void name(const float *x, int64_t xs, int nx, const void *w, int k, float *out, int64_t os) { \
        __m512 a[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()}; \
        int i = 0;                                                                                  \
        for (; i + 16 <= k; i += 16) {                                                              \
            __m512 wv = LOAD(w, i);                                                                 \
            for (int r = 0; r < nx; r++) a[r] = _mm512_fmadd_ps(_mm512_loadu_ps(x + r * xs + i), wv, a[r]); \
        }                                                                                           \
        float s[4];                                                                                 \
        for (int r = 0; r < 4; r++) s[r] = _mm512_reduce_add_ps(a[r]);                              \
        for (; i < k; i++) {                                                                        \
            float wi = wval(w, T, i);                                                               \
            for (int r = 0; r < nx; r++) s[r] += x[r * xs + i] * wi;                                \
        }                                                                                           \
        for (int r = 0; r < nx; r++) out[r * os] = s[r];                                            \
    }
DEFINE_AVX512(dot_f32_avx512, load16_f32, CF_F32)
DEFINE_AVX512(dot_bf16_avx512, load16_bf16, CF_BF16)
DEFINE_AVX512(dot_f16_avx512, load16_f16, CF_F16)

static int cpu_has(cf_cpu_isa_level isa) {
    static int avx2 = -1, avx512 = -1;
    if (avx2 < 0) {
        __builtin_cpu_init();
        avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
        avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                 __builtin_cpu_supports("avx512vl");
    }
    return isa == CF_ISA_C || (isa == CF_ISA_AVX2 && avx2) || (isa == CF_ISA_AVX512 && avx512);
}
#else
static int cpu_has(cf_cpu_isa_level isa) { return isa == CF_ISA_C; }
#endif

cf_dot_fn cf_cpu_dot_kernel_isa(cf_dtype wdt, cf_cpu_isa_level isa) {
    if (!cpu_has(isa)) return NULL;
    switch (isa) {
#ifdef CF_X86
    case CF_ISA_AVX512: return wdt == CF_BF16 ? dot_bf16_avx512 : wdt == CF_F16 ? dot_f16_avx512 : dot_f32_avx512;
    case CF_ISA_AVX2: return wdt == CF_BF16 ? dot_bf16_avx2 : wdt == CF_F16 ? dot_f16_avx2 : dot_f32_avx2;
#endif
    default: return wdt == CF_BF16 ? dot_bf16_c : wdt == CF_F16 ? dot_f16_c : dot_f32_c;
    }
}

static cf_cpu_isa_level best_isa(void) {
    return cpu_has(CF_ISA_AVX512) ? CF_ISA_AVX512 : cpu_has(CF_ISA_AVX2) ? CF_ISA_AVX2 : CF_ISA_C;
}

cf_dot_fn cf_cpu_dot_kernel(cf_dtype wdt) { return cf_cpu_dot_kernel_isa(wdt, best_isa()); }

const char *cf_cpu_isa(void) {
    static const char *names[] = {"portable C", "avx2+fma", "avx512"};
    return names[best_isa()];
}
