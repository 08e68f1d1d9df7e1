/* cpu_kernels.c: out = x . w^T for f32 activation rows against f32 and f16 weight rows (used in place; bf16
 * weights are cpu_bf16.c's).
 *
 * One definition of every output element, whatever n, wherever its row sits in x, however the weight rows
 * are split, and whichever kernel runs (batch invariance, and the same bits on AVX-512, AVX2 and portable
 * C): a 16-lane accumulator, lane l, takes fma(x[i], w[i], acc) for i = l, l + 16, l + 32, ... in order,
 * the last partial group of 16 zero padded; then the lanes are summed by one tree, distance 8 first, then
 * 4, 2, 1 (the order of _mm512_reduce_add_ps). AVX-512 holds the accumulator in one register, AVX2 in two
 * halves (lanes 0-7 and 8-15, added first), portable C in 16 floats with fmaf.
 *
 * Only the tiling changes with n. A tile holds the accumulators of MR weight rows x NR activation rows (16
 * on AVX-512: 4x4, 8x2, 16x1, and 8x1 for the GEMV; 4 on AVX2: 2x2, 4x1), each weight vector widened to f32
 * once for the tile's activation rows, and sums them together with a butterfly that adds the same lanes in the same order as
 * the tree. Missing rows of a partial tile repeat its last row; their results are dropped. Activation rows
 * are taken in panels that fit in L2 (the weights are read once per panel), split into sub-panels that fit
 * in L1, each swept by a block of weight rows that stays in cache. On AVX-512, 24 or more rows of x (prefill,
 * batches) take panel_gemm instead: blocks of 16 weight rows widened to f32 256 columns at a time, once per
 * panel, and swept by the 4 x 6 register tiles of cpu_tile512.h (shared with cpu_quant.c). The walk over
 * panels and blocks (the driver) is cpu_driver.h's, shared with cpu_bf16.c. The AVX2 and AVX-512 versions are compiled with target attributes and chosen at run time, so the default
 * build needs no -march flags. */
#include "backend/cpu/cpu_kernels.h"

#include "backend/cpu/cpu_driver.h"

#include <math.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>

#include "backend/cpu/cpu_tile512.h"
#define CF_X86 1
#endif

#define INL inline __attribute__((always_inline))

static INL size_t esize(int T) { return T == CF_F32 ? 4 : 2; }

static INL float wval(const char *w, int T, int64_t i) {
    switch (T) {
    case CF_F16: return cf_f16_to_f32(((const uint16_t *)w)[i]);
    default: return ((const float *)w)[i];
    }
}

/* ---- portable C: the definition, written out ---- */

static INL float dot_c(const float *xr, const char *w, int T, int64_t k) {
    float acc[16] = {0};
    int64_t i = 0;
    for (; i + 16 <= k; i += 16)
        for (int l = 0; l < 16; l++) acc[l] = fmaf(xr[i + l], wval(w, T, i + l), acc[l]);
    if (i < k)
        for (int l = 0; l < 16; l++)
            acc[l] = fmaf(i + l < k ? xr[i + l] : 0.0f, i + l < k ? wval(w, T, i + l) : 0.0f, acc[l]);
    for (int h = 8; h >= 1; h /= 2)
        for (int l = 0; l < h; l++) acc[l] = acc[l] + acc[l + h];
    return acc[0];
}

static INL void gemm_c(int T, const float *x, int64_t xs, int64_t n, const void *w, int64_t ws, int64_t d, int64_t k,
                       float *out, int64_t os) {
    const int64_t P = cf_panel_rows(4 * k);
    for (int64_t i0 = 0; i0 < n; i0 += P)
        for (int64_t j = 0; j < d; j++) {
            const char *wr = (const char *)w + (size_t)(j * ws) * esize(T);
            for (int64_t i = i0; i < cf_min64(n, i0 + P); i++) out[i * os + j] = dot_c(x + i * xs, wr, T, k);
        }
}

static void gemm_f32_c(const float *x, int64_t xs, int64_t n, const void *w, int64_t ws, int64_t d, int64_t k, float *out, int64_t os) {
    gemm_c(CF_F32, x, xs, n, w, ws, d, k, out, os);
}
static void gemm_f16_c(const float *x, int64_t xs, int64_t n, const void *w, int64_t ws, int64_t d, int64_t k, float *out, int64_t os) {
    gemm_c(CF_F16, x, xs, n, w, ws, d, k, out, os);
}

#ifdef CF_X86

/* ---- AVX2 + FMA: each 16-lane accumulator in two registers, 4 accumulators per tile ---- */
#define AVX2 __attribute__((target("avx2,fma,f16c")))

AVX2 static INL __m256 ld8(const char *p, int T) {
    if (T == CF_F16) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
    return _mm256_loadu_ps((const float *)p);
}

/* MR x NR = 4: rows of x at x + r * xs (r < nv), rows of w at w + m * rb bytes (m < mv); out[r * os + m];
 * G weight rows at a time; pf: the next tile's weight rows to prefetch, or NULL. */
AVX2 static INL void tile8(const int MR, const int NR, const int G, const int T, const int L1, const float *x, int64_t xs, int nv,
                           const char *w, int64_t rb, int mv, int64_t k, float *o, int64_t os, const char *pf) {
    const float *xr[4];
    const char *wr[4];
    __m256 acc[8], xv[8];
    for (int r = 0; r < NR; r++) xr[r] = x + (r < nv ? r : nv - 1) * xs;
    for (int m = 0; m < MR; m++) wr[m] = w + (m < mv ? m : mv - 1) * rb;
    for (int a = 0; a < 8; a++) acc[a] = _mm256_setzero_ps();
    const size_t es = esize(T);
    const int64_t pstep = cf_pf_step(MR * rb, MR / G * (k / 16));
    for (int g = 0; g < MR; g += G) {  /* weight rows g..g+G at a time */
        int64_t i = 0;
        for (; i + 16 <= k; i += 16) {
            if (pf) cf_prefetch(&pf, pstep, L1);
            for (int r = 0; r < NR; r++) {
                xv[2 * r] = _mm256_loadu_ps(xr[r] + i);
                xv[2 * r + 1] = _mm256_loadu_ps(xr[r] + i + 8);
            }
            for (int m = g; m < g + G; m++) {
                const __m256 w0 = ld8(wr[m] + (size_t)i * es, T), w1 = ld8(wr[m] + (size_t)(i + 8) * es, T);
                for (int r = 0; r < NR; r++) {
                    const int a = m * NR + r;
                    acc[2 * a] = _mm256_fmadd_ps(xv[2 * r], w0, acc[2 * a]);
                    acc[2 * a + 1] = _mm256_fmadd_ps(xv[2 * r + 1], w1, acc[2 * a + 1]);
                }
            }
        }
        if (i < k) {  /* the zero-padded last group */
            const size_t rest = (size_t)(k - i);
            float xt[16];
            char wt[16 * 4];
            for (int r = 0; r < NR; r++) {
                memset(xt, 0, sizeof xt);
                memcpy(xt, xr[r] + i, rest * sizeof(float));
                xv[2 * r] = _mm256_loadu_ps(xt);
                xv[2 * r + 1] = _mm256_loadu_ps(xt + 8);
            }
            for (int m = g; m < g + G; m++) {
                memset(wt, 0, sizeof wt);
                memcpy(wt, wr[m] + (size_t)i * es, rest * es);
                const __m256 w0 = ld8(wt, T), w1 = ld8(wt + 8 * es, T);
                for (int r = 0; r < NR; r++) {
                    const int a = m * NR + r;
                    acc[2 * a] = _mm256_fmadd_ps(xv[2 * r], w0, acc[2 * a]);
                    acc[2 * a + 1] = _mm256_fmadd_ps(xv[2 * r + 1], w1, acc[2 * a + 1]);
                }
            }
        }
    }
    cf_avx2_store(acc, NR, nv, mv, o, os);
}

#define DEFINE_TILES8(T, sfx)                                                                                     \
    CF_DEFINE_TILE(AVX2, tile8, t8_2x2_##sfx, 2, 2, 2, T, 0, float)                                                  \
    CF_DEFINE_TILE(AVX2, tile8, t8_2x2s_##sfx, 2, 2, 2, T, 1, float)                                                 \
    CF_DEFINE_TILE(AVX2, tile8, t8_4x1_##sfx, 4, 1, 4, T, 1, float)                                                  \
    CF_DEFINE_TILE(AVX2, tile8, t8_4x1_1_##sfx, 4, 1, 1, T, 1, float)                                                \
    CF_DEFINE_DRIVER(AVX2, gemm_##sfx##_avx2, esize(T), float, t8_2x2_##sfx, t8_2x2s_##sfx, 2, 2, t8_4x1_##sfx, t8_4x1_##sfx, 0,      \
                  t8_4x1_##sfx, 4, t8_4x1_##sfx, 4, t8_4x1_1_##sfx)
DEFINE_TILES8(CF_F32, f32)
DEFINE_TILES8(CF_F16, f16)

/* ---- AVX-512: 16 lanes, 16 accumulators per tile ---- */
#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,fma,f16c")))

AVX512 static INL __m512 ld16(const char *p, int T) {
    if (T == CF_F16) return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
    return _mm512_loadu_ps((const float *)p);
}

/* the first `rest` (< 16) elements, zeros after them (masked: nothing past them is read) */
AVX512 static INL __m512 ld16_part(const char *p, int T, __mmask16 mask) {
    if (T == CF_F16) return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, p));
    return _mm512_maskz_loadu_ps(mask, p);
}

/* MR x NR <= 16 (unused accumulators stay zero): rows of x at x + r * xs (r < nv), rows of w at w + m * rb
 * bytes (m < mv); out[r * os + m]; G weight rows at a time; pf: the next tile's weight rows to prefetch, or NULL. */
AVX512 static INL void tile16(const int MR, const int NR, const int G, const int T, const int L1, const float *x, int64_t xs, int nv, const char *w,
                              int64_t rb, int mv, int64_t k, float *o, int64_t os, const char *pf) {
    const float *xr[16];
    const char *wr[16];
    __m512 acc[16], xv[16];
    for (int r = 0; r < NR; r++) xr[r] = x + (r < nv ? r : nv - 1) * xs;
    for (int m = 0; m < MR; m++) wr[m] = w + (m < mv ? m : mv - 1) * rb;
    for (int a = 0; a < 16; a++) acc[a] = _mm512_setzero_ps();
    const size_t es = esize(T);
    const int64_t pstep = cf_pf_step(MR * rb, MR / G * (k / 16));
    for (int g = 0; g < MR; g += G) {  /* weight rows g..g+G at a time */
        int64_t i = 0;
        for (; i + 16 <= k; i += 16) {
            if (pf) cf_prefetch(&pf, pstep, L1);
            for (int r = 0; r < NR; r++) xv[r] = _mm512_loadu_ps(xr[r] + i);
            for (int m = g; m < g + G; m++) {
                const __m512 wv = ld16(wr[m] + (size_t)i * es, T);
                for (int r = 0; r < NR; r++) acc[m * NR + r] = _mm512_fmadd_ps(xv[r], wv, acc[m * NR + r]);
            }
        }
        if (i < k) {  /* the zero-padded last group */
            const __mmask16 mask = (__mmask16)((1u << (k - i)) - 1);
            for (int r = 0; r < NR; r++) xv[r] = _mm512_maskz_loadu_ps(mask, xr[r] + i);
            for (int m = g; m < g + G; m++) {
                const __m512 wv = ld16_part(wr[m] + (size_t)i * es, T, mask);
                for (int r = 0; r < NR; r++) acc[m * NR + r] = _mm512_fmadd_ps(xv[r], wv, acc[m * NR + r]);
            }
        }
    }
    cf_t512_store(cf_t512_red16(acc), MR, NR, nv, mv, o, os);
}

/* Prefill (PANEL_MIN_ROWS rows of x or more; measured, 2 threads, bf16: 0.79x the tiles above at 8 rows,
 * even at 16, 1.14x at 24, 1.03-1.11x at 48 to 128): per panel of up to PANEL_X rows of x and block of PANEL_W weight
 * rows, the block is widened to f32 PANEL_K columns at a time into a tile in L1 (once for the whole panel,
 * the next step's weights prefetched meanwhile) and swept by cf_t512_sweep (4 weight rows x 6 rows of x);
 * the accumulators wait in a stack buffer between the column steps and the last step writes the sums.
 * Stack: (PANEL_X + CF_T512_NR) * PANEL_W * 64 + PANEL_W * PANEL_K * 4 bytes (118 KiB). */
#define PANEL_MIN_ROWS 24
#define PANEL_X 96
#define PANEL_W 16
#define PANEL_K 256

/* Weight rows w + m * rb (m < nr; the last repeated up to a multiple of 4), columns k0 .. k0 + kl, widened
 * into wt (row stride PANEL_K floats, zeros after column kl up to a multiple of 16); pf_bytes of each row
 * at pf + m * rb prefetched meanwhile (pf: NULL for none). */
AVX512 static INL void widen_tile(const int T, const char *w, int64_t rb, int nr, int64_t k0, int64_t kl, float *wt,
                                  const char *pf, int64_t pf_bytes) {
    const size_t es = esize(T);
    for (int m = 0; m < ((nr + 3) & ~3); m++) {
        const char *wr = w + (m < nr ? m : nr - 1) * rb + (size_t)k0 * es;
        if (pf && m < nr)
            for (int64_t b = 0; b < pf_bytes; b += 64) _mm_prefetch(pf + m * rb + b, _MM_HINT_T0);
        float *o = wt + m * PANEL_K;
        int64_t c = 0;
        for (; c + 16 <= kl; c += 16) _mm512_storeu_ps(o + c, ld16(wr + (size_t)c * es, T));
        if (c < kl) _mm512_storeu_ps(o + c, ld16_part(wr + (size_t)c * es, T, (__mmask16)((1u << (kl - c)) - 1)));
    }
}

AVX512 static INL void panel_gemm(const int T, const float *x, int64_t xs, int64_t n, const void *w, int64_t ws, int64_t d,
                                  int64_t k, float *out, int64_t os) {
    _Alignas(64) float acc[(PANEL_X + CF_T512_NR) * PANEL_W * 16];
    _Alignas(64) float wt[PANEL_W * PANEL_K];
    const int64_t rb = ws * (int64_t)esize(T), panels = (n + PANEL_X - 1) / PANEL_X;
    int64_t P = (n + panels - 1) / panels;
    P = cf_min64(PANEL_X, (P + CF_T512_NR - 1) / CF_T512_NR * CF_T512_NR);
    for (int64_t i0 = 0; i0 < n; i0 += P) {
        const int np = (int)cf_min64(P, n - i0);
        for (int64_t jb = 0; jb < d; jb += PANEL_W) {
            const int nr = (int)cf_min64(PANEL_W, d - jb);
            const char *wb = (const char *)w + jb * rb;
            for (int64_t k0 = 0; k0 < k; k0 += PANEL_K) {
                const int64_t kl = cf_min64(PANEL_K, k - k0);
                /* prefetch: the next step's columns of these rows, or the next block's first columns */
                const char *pf = k0 + PANEL_K < k ? wb + (k0 + PANEL_K) * (int64_t)esize(T)
                               : jb + PANEL_W < d ? wb + PANEL_W * rb : NULL;
                const int64_t pfb = cf_min64(PANEL_K, k0 + PANEL_K < k ? k - k0 - PANEL_K : k) * (int64_t)esize(T);
                widen_tile(T, wb, rb, nr, k0, kl, wt, pf, pfb);
                cf_t512_sweep(x + i0 * xs + k0, xs, np, wt, PANEL_K, nr, PANEL_W, kl, acc, k0 == 0,
                              k0 + PANEL_K >= k ? out + i0 * os + jb : NULL, os);
            }
        }
    }
}

#define DEFINE_TILES16(T, sfx)                                                                                    \
    CF_DEFINE_TILE(AVX512, tile16, t16_4x4_##sfx, 4, 4, 4, T, 0, float)                                              \
    CF_DEFINE_TILE(AVX512, tile16, t16_4x4s_##sfx, 4, 4, 4, T, 1, float)                                             \
    CF_DEFINE_TILE(AVX512, tile16, t16_8x2_##sfx, 8, 2, 8, T, 0, float)                                              \
    CF_DEFINE_TILE(AVX512, tile16, t16_8x2s_##sfx, 8, 2, 8, T, 1, float)                                             \
    CF_DEFINE_TILE(AVX512, tile16, t16_16x1_##sfx, 16, 1, 16, T, 0, float)                                           \
    CF_DEFINE_TILE(AVX512, tile16, t16_8x1_##sfx, 8, 1, 8, T, 1, float)                                              \
    CF_DEFINE_TILE(AVX512, tile16, t16_16x1_1_##sfx, 16, 1, 1, T, 1, float)                                          \
    CF_DEFINE_DRIVER(AVX512, tiles_##sfx##_avx512, esize(T), float, t16_4x4_##sfx, t16_4x4s_##sfx, 4, 4, t16_8x2_##sfx, t16_8x2s_##sfx, 8, \
                  t16_16x1_##sfx, 16, t16_8x1_##sfx, 8, t16_16x1_1_##sfx)                                 \
    AVX512 static void gemm_##sfx##_avx512(const float *x, int64_t xs, int64_t n, const void *w, int64_t ws, int64_t d,  \
                                           int64_t k, float *out, int64_t os) {                                   \
        if (n >= PANEL_MIN_ROWS) panel_gemm(T, x, xs, n, w, ws, d, k, out, os);                                   \
        else tiles_##sfx##_avx512(x, xs, n, w, ws, d, k, out, os);                                                \
    }
DEFINE_TILES16(CF_F32, f32)
DEFINE_TILES16(CF_F16, f16)

/* bit 0: AVX2+FMA+F16C, bit 1: AVX-512 (F, BW, VL), bit 2: AVX512-BF16, bit 3: AVX512-VNNI (2 and 3 only with 1);
 * found once, atomically (threads of a parallel region may ask first, e.g. through cf_cpu_qgemm; racing first calls
 * store the same value) */
static int cpu_flags(void) {
    static int flags = -1;
    int f = __atomic_load_n(&flags, __ATOMIC_RELAXED);
    if (f < 0) {
        __builtin_cpu_init();
        /* F16C from CPUID leaf 1 (ECX bit 29): clang does not take "f16c" in __builtin_cpu_supports; the OS
         * saves the registers it uses whenever AVX2 is usable */
        unsigned a = 0, b = 0, c = 0, dd = 0;
        const int f16c = __get_cpuid(1, &a, &b, &c, &dd) && (c >> 29 & 1);
        const int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
        const int avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                           __builtin_cpu_supports("avx512vl");
        /* AVX512-BF16: leaf 7 subleaf 1, EAX bit 5; AVX512-VNNI: leaf 7 subleaf 0, ECX bit 11 */
        const int bf16 = avx512 && __get_cpuid_count(7, 1, &a, &b, &c, &dd) && (a >> 5 & 1);
        const int vnni = avx512 && __get_cpuid_count(7, 0, &a, &b, &c, &dd) && (c >> 11 & 1);
        f = avx2 | avx512 << 1 | bf16 << 2 | vnni << 3;
        __atomic_store_n(&flags, f, __ATOMIC_RELAXED);
    }
    return f;
}
#else
static int cpu_flags(void) { return 0; }
#endif

static int cpu_has(cf_cpu_isa_level isa) {
    const int f = cpu_flags();
    return isa == CF_ISA_C || (isa == CF_ISA_AVX2 && (f & 1)) || (isa == CF_ISA_AVX512 && (f & 2));
}

int cf_cpu_has_avx512_bf16(void) { return cpu_flags() >> 2 & 1; }
int cf_cpu_has_avx512_vnni(void) { return cpu_flags() >> 3 & 1; }

cf_gemm_fn cf_cpu_gemm_kernel_isa(cf_dtype wdt, cf_cpu_isa_level isa) {
    if (!cpu_has(isa)) return NULL;
    if (wdt == CF_BF16) return cf_cpu_bf16_kernel(isa);
    switch (isa) {
#ifdef CF_X86
    case CF_ISA_AVX512: return wdt == CF_F16 ? gemm_f16_avx512 : gemm_f32_avx512;
    case CF_ISA_AVX2: return wdt == CF_F16 ? gemm_f16_avx2 : gemm_f32_avx2;
#endif
    default: return wdt == CF_F16 ? gemm_f16_c : gemm_f32_c;
    }
}

int cf_cpu_isa_available(cf_cpu_isa_level isa) { return cpu_has(isa); }

static cf_cpu_isa_level best_isa(void) {
    return cpu_has(CF_ISA_AVX512) ? CF_ISA_AVX512 : cpu_has(CF_ISA_AVX2) ? CF_ISA_AVX2 : CF_ISA_C;
}

cf_gemm_fn cf_cpu_gemm_kernel(cf_dtype wdt) { return cf_cpu_gemm_kernel_isa(wdt, best_isa()); }

cf_cpu_isa_level cf_cpu_best_isa(void) { return best_isa(); }

const char *cf_cpu_isa(void) {
    static const char *names[] = {"portable C", "avx2+fma", "avx512"};
    return names[best_isa()];
}
