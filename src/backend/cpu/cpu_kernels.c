/* cpu_kernels.c: out = x . w^T for f32 activation rows against f32/bf16/f16 weight rows (used in place).
 *
 * One definition of every output element, whatever n, wherever its row sits in x, however the weight rows
 * are split, and whichever kernel runs (batch invariance, and the same bits on AVX-512, AVX2 and portable
 * C): a 16-lane accumulator, lane l, takes fma(x[i], w[i], acc) for i = l, l + 16, l + 32, ... in order,
 * the last partial group of 16 zero padded; then the lanes are summed by one tree, distance 8 first, then
 * 4, 2, 1 (the order of _mm512_reduce_add_ps). AVX-512 holds the accumulator in one register, AVX2 in two
 * halves (lanes 0-7 and 8-15, added first), portable C in 16 floats with fmaf.
 *
 * Only the tiling changes with n. A tile holds the accumulators of MR weight rows x NR activation rows (16
 * on AVX-512: 4x4, 8x2, 16x1, and 8x1 for the GEMV; 4 on AVX2: 2x2, 4x1), each weight vector widened to f32 once for the tile's
 * activation rows, and sums them together with a butterfly that adds the same lanes in the same order as
 * the tree. Missing rows of a partial tile repeat its last row; their results are dropped. Activation rows
 * are taken in panels that fit in L2 (the weights are read once per panel), split into sub-panels that fit
 * in L1, each swept by a block of weight rows that stays in cache. On AVX-512, 24 or more rows of x (prefill,
 * batches) take panel_gemm instead: blocks of 16 weight rows widened to f32 256 columns at a time, once per
 * panel, and swept by the 4 x 6 register tiles of cpu_tile512.h (shared with cpu_quant.c).
 * The AVX2 and AVX-512 versions are compiled with target attributes and chosen at run time, so the default
 * build needs no -march flags. */
#include "backend/cpu/cpu_kernels.h"

#include <math.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>

#include "backend/cpu/cpu_tile512.h"
#define CF_X86 1
#endif

#define INL inline __attribute__((always_inline))

/* Rows of x per panel: the panel (f32) stays within this many bytes of L2, the weights stream past it. */
#define PANEL_BYTES (384 * 1024)

static int64_t panel_rows(int64_t k) {
    int64_t p = PANEL_BYTES / (4 * (k > 0 ? k : 1));
    p &= ~(int64_t)3;
    return p < 4 ? 4 : p;
}

/* Rows of x per sub-panel: the weight block is applied to one sub-panel at a time, which stays in L1. */
#define SUB_PANEL_BYTES (24 * 1024)

static int64_t sub_rows(int64_t k, int64_t nr) {
    int64_t p = SUB_PANEL_BYTES / (4 * (k > 0 ? k : 1));
    p -= p % nr;
    return p < nr ? nr : p;
}

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

static INL size_t esize(int T) { return T == CF_F32 ? 4 : 2; }

static INL float wval(const char *w, int T, int64_t i) {
    switch (T) {
    case CF_BF16: return cf_bf16_to_f32(((const uint16_t *)w)[i]);
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
    const int64_t P = panel_rows(k);
    for (int64_t i0 = 0; i0 < n; i0 += P)
        for (int64_t j = 0; j < d; j++) {
            const char *wr = (const char *)w + (size_t)(j * ws) * esize(T);
            for (int64_t i = i0; i < min64(n, i0 + P); i++) out[i * os + j] = dot_c(x + i * xs, wr, T, k);
        }
}

static void gemm_f32_c(const float *x, int64_t xs, int64_t n, const void *w, int64_t ws, int64_t d, int64_t k, float *out, int64_t os) {
    gemm_c(CF_F32, x, xs, n, w, ws, d, k, out, os);
}
static void gemm_bf16_c(const float *x, int64_t xs, int64_t n, const void *w, int64_t ws, int64_t d, int64_t k, float *out, int64_t os) {
    gemm_c(CF_BF16, x, xs, n, w, ws, d, k, out, os);
}
static void gemm_f16_c(const float *x, int64_t xs, int64_t n, const void *w, int64_t ws, int64_t d, int64_t k, float *out, int64_t os) {
    gemm_c(CF_F16, x, xs, n, w, ws, d, k, out, os);
}

#ifdef CF_X86

/* Software prefetch of the next tile's weight rows (pf: their first byte), spread evenly over the k steps
 * of this tile: with short rows the hardware prefetchers do not catch on to a dozen row streams at once. */
static int64_t pf_step(int64_t bytes, int64_t steps) {
    int64_t s = steps > 0 ? (bytes + steps - 1) / steps : bytes;
    return (s + 63) & ~(int64_t)63;
}

/* l1: into L1 (a streaming tile, whose rows are read once) or only into L2 (a block of rows that the next
 * tiles of a large panel read again, which would push the panel of x out of L1) */
static INL void prefetch(const char **pf, int64_t step, const int l1) {
    for (int64_t b = 0; b < step; b += 64) {
        if (l1) _mm_prefetch(*pf + b, _MM_HINT_T0);
        else _mm_prefetch(*pf + b, _MM_HINT_T1);
    }
    *pf += step;
}

/* The tiled driver, shared by both instruction sets. Per panel of x and block of MR_C weight rows: tiles of
 * NR_A activation rows over the block (MR_A weight rows each), then the panel's 2-row and 1-row rests with
 * tiles of MR_B and MR_C weight rows (the same accumulator count), while the block is still in cache.
 * Every tile holds all its weight rows at once (several independent fma chains sharing each vector of x).
 * The tile that first reads a block's rows from memory prefetches the next tile's rows, spread over its k
 * steps: rows of a few KiB, each its own page, are too short a stream for the hardware prefetchers alone.
 * In a large panel that is the first tile of activation rows (TILE_A, prefetching into L2); in a panel of
 * fewer than BIG_ROWS rows (decoding) the weights are read once, by the tiles that prefetch into L1
 * (TILE_AS, TILE_BS, TILE_G). A 1-row panel (the GEMV) with rows of up to SEQ_K values reads its weight rows
 * one after another in one fma chain (TILE_S, whole blocks): one sequential stream, which the hardware
 * prefetchers follow best; longer rows go through tiles of MR_G rows (MR_G fma chains sharing each vector
 * of x, which a long row would otherwise push out of L1 between its reads). Measured on a 2-core Zen 5 VM
 * (bf16, one thread, GB/s): 2048-value rows 28 sequential against 24 in tiles of 8, 8192-value rows 20
 * sequential against 25 in tiles (two threads: 36 against 43). */
#define SEQ_K 2048
#define BIG_ROWS 8
#define DEFINE_DRIVER(ATTR, name, T, TILE_A, TILE_AS, MR_A, NR_A, TILE_B, TILE_BS, MR_B, TILE_C, MR_C, TILE_G, MR_G,  \
                      TILE_S)                                                                                     \
    ATTR static void name(const float *x, int64_t xs, int64_t n, const void *w, int64_t ws, int64_t d, int64_t k,  \
                          float *out, int64_t os) {                                                                \
        const int64_t rb = ws * (int64_t)esize(T), P = panel_rows(k), SP = sub_rows(k, NR_A);                     \
        const char *wb = w;                                                                                       \
        for (int64_t i0 = 0; i0 < n; i0 += P) {                                                                   \
            const int64_t pn = min64(P, n - i0), nf = pn - pn % NR_A;                                             \
            const int big = pn >= BIG_ROWS;                                                                       \
            const float *xp = x + i0 * xs;                                                                        \
            float *op = out + i0 * os;                                                                            \
            for (int64_t jb = 0; jb < d; jb += MR_C) {                                                            \
                const int64_t je = min64(d, jb + MR_C);                                                           \
                for (int64_t s0 = 0; s0 < nf; s0 += SP)                                                           \
                    for (int64_t j = jb; j < je; j += MR_A)                                                       \
                        for (int64_t i = s0; i < min64(nf, s0 + SP); i += NR_A) {                                 \
                            const char *pf = i == 0 && j + MR_A < d ? wb + (j + MR_A) * rb : NULL;                \
                            const int mv = (int)min64(MR_A, je - j);                                              \
                            if (big) TILE_A(xp + i * xs, xs, NR_A, wb + j * rb, rb, mv, k, op + i * os + j, os, pf); \
                            else TILE_AS(xp + i * xs, xs, NR_A, wb + j * rb, rb, mv, k, op + i * os + j, os, pf);  \
                        }                                                                                         \
                int64_t i = nf;                                                                                   \
                if (MR_B > 0 && pn - i >= 2) {                                                                    \
                    for (int64_t j = jb; j < je; j += MR_B) {                                                     \
                        const char *pf = i == 0 && j + MR_B < d ? wb + (j + MR_B) * rb : NULL;                    \
                        const int mv = (int)min64(MR_B, je - j);                                                  \
                        if (big) TILE_B(xp + i * xs, xs, 2, wb + j * rb, rb, mv, k, op + i * os + j, os, pf);     \
                        else TILE_BS(xp + i * xs, xs, 2, wb + j * rb, rb, mv, k, op + i * os + j, os, pf);        \
                    }                                                                                             \
                    i += 2;                                                                                       \
                }                                                                                                 \
                if (pn == 1 && k <= SEQ_K)                                                                        \
                    TILE_S(xp, xs, 1, wb + jb * rb, rb, (int)(je - jb), k, op + jb, os, NULL);                    \
                else if (pn == 1)                                                                                 \
                    for (int64_t j = jb; j < je; j += MR_G)                                                       \
                        TILE_G(xp, xs, 1, wb + j * rb, rb, (int)min64(MR_G, je - j), k, op + j, os,               \
                               j + MR_G < d ? wb + (j + MR_G) * rb : NULL);                                       \
                else                                                                                              \
                    for (; i < pn; i++)                                                                           \
                        TILE_C(xp + i * xs, xs, 1, wb + jb * rb, rb, (int)(je - jb), k, op + i * os + jb, os, NULL); \
            }                                                                                                     \
        }                                                                                                         \
    }

/* one tile function per shape and grouping: G weight rows at a time (G = MR: all at once); L1: prefetch
 * into L1 (1) or L2 (0) */
#define DEFINE_TILE(ATTR, TILE, name, MR, NR, G, T, L1)                                                           \
    ATTR static void name(const float *x, int64_t xs, int nv, const char *w, int64_t rb, int mv, int64_t k, float *o, \
                          int64_t os, const char *pf) {                                                           \
        TILE(MR, NR, G, T, L1, x, xs, nv, w, rb, mv, k, o, os, pf);                                               \
    }

/* ---- AVX2 + FMA: each 16-lane accumulator in two registers, 4 accumulators per tile ---- */
#define AVX2 __attribute__((target("avx2,fma,f16c")))

AVX2 static INL __m256 ld8(const char *p, int T) {
    if (T == CF_BF16) return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
    if (T == CF_F16) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
    return _mm256_loadu_ps((const float *)p);
}

/* v[0..4), each the lanes 0-7 + lanes 8-15 of an accumulator -> one vector; lane 4 * (a % 2) + a / 2 holds
 * the sum of v[a]'s lanes, added at distance 4, then 2, then 1 (lanes 2, 3, 6, 7 repeat others). */
AVX2 static INL __m256 red4(const __m256 *v) {
    const __m256 r0 = _mm256_add_ps(_mm256_permute2f128_ps(v[0], v[1], 0x20), _mm256_permute2f128_ps(v[0], v[1], 0x31));
    const __m256 r1 = _mm256_add_ps(_mm256_permute2f128_ps(v[2], v[3], 0x20), _mm256_permute2f128_ps(v[2], v[3], 0x31));
    const __m256 t = _mm256_add_ps(_mm256_castpd_ps(_mm256_unpacklo_pd(_mm256_castps_pd(r0), _mm256_castps_pd(r1))),
                                   _mm256_castpd_ps(_mm256_unpackhi_pd(_mm256_castps_pd(r0), _mm256_castps_pd(r1))));
    return _mm256_add_ps(_mm256_shuffle_ps(t, t, 0x88), _mm256_shuffle_ps(t, t, 0xDD));
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
    const int64_t pstep = pf_step(MR * rb, MR / G * (k / 16));
    for (int g = 0; g < MR; g += G) {  /* weight rows g..g+G at a time */
        int64_t i = 0;
        for (; i + 16 <= k; i += 16) {
            if (pf) prefetch(&pf, pstep, L1);
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
    __m256 half[4];
    for (int a = 0; a < 4; a++) half[a] = _mm256_add_ps(acc[2 * a], acc[2 * a + 1]);  /* distance 8 */
    float s[8];
    _mm256_storeu_ps(s, red4(half));
    for (int m = 0; m < mv; m++)
        for (int r = 0; r < nv; r++) {
            const int a = m * NR + r;
            o[r * os + m] = s[4 * (a % 2) + a / 2];
        }
}

#define DEFINE_TILES8(T, sfx)                                                                                     \
    DEFINE_TILE(AVX2, tile8, t8_2x2_##sfx, 2, 2, 2, T, 0)                                                         \
    DEFINE_TILE(AVX2, tile8, t8_2x2s_##sfx, 2, 2, 2, T, 1)                                                        \
    DEFINE_TILE(AVX2, tile8, t8_4x1_##sfx, 4, 1, 4, T, 1)                                                         \
    DEFINE_TILE(AVX2, tile8, t8_4x1_1_##sfx, 4, 1, 1, T, 1)                                                       \
    DEFINE_DRIVER(AVX2, gemm_##sfx##_avx2, T, t8_2x2_##sfx, t8_2x2s_##sfx, 2, 2, t8_4x1_##sfx, t8_4x1_##sfx, 0,      \
                  t8_4x1_##sfx, 4, t8_4x1_##sfx, 4, t8_4x1_1_##sfx)
DEFINE_TILES8(CF_F32, f32)
DEFINE_TILES8(CF_BF16, bf16)
DEFINE_TILES8(CF_F16, f16)

/* ---- AVX-512: 16 lanes, 16 accumulators per tile ---- */
#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,fma,f16c")))

AVX512 static INL __m512 ld16(const char *p, int T) {
    if (T == CF_BF16) return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)), 16));
    if (T == CF_F16) return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
    return _mm512_loadu_ps((const float *)p);
}

/* the first `rest` (< 16) elements, zeros after them (masked: nothing past them is read) */
AVX512 static INL __m512 ld16_part(const char *p, int T, __mmask16 mask) {
    if (T == CF_BF16) return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mask, p)), 16));
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
    const int64_t pstep = pf_step(MR * rb, MR / G * (k / 16));
    for (int g = 0; g < MR; g += G) {  /* weight rows g..g+G at a time */
        int64_t i = 0;
        for (; i + 16 <= k; i += 16) {
            if (pf) prefetch(&pf, pstep, L1);
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
    const __m512 sum = cf_t512_red16(acc);
    if (MR == 4 && NR == 4 && mv == 4) {  /* lanes 4r..4r+3: out row r, weight rows 0..3 */
        for (int r = 0; r < nv; r++) {
            __m128 q = r == 0 ? _mm512_castps512_ps128(sum) : r == 1 ? _mm512_extractf32x4_ps(sum, 1)
                     : r == 2 ? _mm512_extractf32x4_ps(sum, 2) : _mm512_extractf32x4_ps(sum, 3);
            _mm_storeu_ps(o + r * os, q);
        }
        return;
    }
    float s[16];
    _mm512_storeu_ps(s, sum);
    for (int m = 0; m < mv; m++)
        for (int r = 0; r < nv; r++) {
            const int a = m * NR + r;
            o[r * os + m] = s[4 * (a % 4) + a / 4];
        }
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
    P = min64(PANEL_X, (P + CF_T512_NR - 1) / CF_T512_NR * CF_T512_NR);
    for (int64_t i0 = 0; i0 < n; i0 += P) {
        const int np = (int)min64(P, n - i0);
        for (int64_t jb = 0; jb < d; jb += PANEL_W) {
            const int nr = (int)min64(PANEL_W, d - jb);
            const char *wb = (const char *)w + jb * rb;
            for (int64_t k0 = 0; k0 < k; k0 += PANEL_K) {
                const int64_t kl = min64(PANEL_K, k - k0);
                /* prefetch: the next step's columns of these rows, or the next block's first columns */
                const char *pf = k0 + PANEL_K < k ? wb + (k0 + PANEL_K) * (int64_t)esize(T)
                               : jb + PANEL_W < d ? wb + PANEL_W * rb : NULL;
                const int64_t pfb = min64(PANEL_K, k0 + PANEL_K < k ? k - k0 - PANEL_K : k) * (int64_t)esize(T);
                widen_tile(T, wb, rb, nr, k0, kl, wt, pf, pfb);
                cf_t512_sweep(x + i0 * xs + k0, xs, np, wt, PANEL_K, nr, PANEL_W, kl, acc, k0 == 0,
                              k0 + PANEL_K >= k ? out + i0 * os + jb : NULL, os);
            }
        }
    }
}

#define DEFINE_TILES16(T, sfx)                                                                                    \
    DEFINE_TILE(AVX512, tile16, t16_4x4_##sfx, 4, 4, 4, T, 0)                                                     \
    DEFINE_TILE(AVX512, tile16, t16_4x4s_##sfx, 4, 4, 4, T, 1)                                                    \
    DEFINE_TILE(AVX512, tile16, t16_8x2_##sfx, 8, 2, 8, T, 0)                                                     \
    DEFINE_TILE(AVX512, tile16, t16_8x2s_##sfx, 8, 2, 8, T, 1)                                                    \
    DEFINE_TILE(AVX512, tile16, t16_16x1_##sfx, 16, 1, 16, T, 0)                                                  \
    DEFINE_TILE(AVX512, tile16, t16_8x1_##sfx, 8, 1, 8, T, 1)                                                     \
    DEFINE_TILE(AVX512, tile16, t16_16x1_1_##sfx, 16, 1, 1, T, 1)                                                 \
    DEFINE_DRIVER(AVX512, tiles_##sfx##_avx512, T, t16_4x4_##sfx, t16_4x4s_##sfx, 4, 4, t16_8x2_##sfx, t16_8x2s_##sfx, 8, \
                  t16_16x1_##sfx, 16, t16_8x1_##sfx, 8, t16_16x1_1_##sfx)                                 \
    AVX512 static void gemm_##sfx##_avx512(const float *x, int64_t xs, int64_t n, const void *w, int64_t ws, int64_t d,  \
                                           int64_t k, float *out, int64_t os) {                                   \
        if (n >= PANEL_MIN_ROWS) panel_gemm(T, x, xs, n, w, ws, d, k, out, os);                                   \
        else tiles_##sfx##_avx512(x, xs, n, w, ws, d, k, out, os);                                                \
    }
DEFINE_TILES16(CF_F32, f32)
DEFINE_TILES16(CF_BF16, bf16)
DEFINE_TILES16(CF_F16, f16)

static int cpu_has(cf_cpu_isa_level isa) {
    /* bit 0: AVX2+FMA+F16C, bit 1: AVX-512; found once, atomically (threads of a parallel region may ask first,
     * e.g. through cf_cpu_qgemm; racing first calls store the same value) */
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
        f = avx2 | avx512 << 1;
        __atomic_store_n(&flags, f, __ATOMIC_RELAXED);
    }
    return isa == CF_ISA_C || (isa == CF_ISA_AVX2 && (f & 1)) || (isa == CF_ISA_AVX512 && (f & 2));
}
#else
static int cpu_has(cf_cpu_isa_level isa) { return isa == CF_ISA_C; }
#endif

cf_gemm_fn cf_cpu_gemm_kernel_isa(cf_dtype wdt, cf_cpu_isa_level isa) {
    if (!cpu_has(isa)) return NULL;
    switch (isa) {
#ifdef CF_X86
    case CF_ISA_AVX512: return wdt == CF_BF16 ? gemm_bf16_avx512 : wdt == CF_F16 ? gemm_f16_avx512 : gemm_f32_avx512;
    case CF_ISA_AVX2: return wdt == CF_BF16 ? gemm_bf16_avx2 : wdt == CF_F16 ? gemm_f16_avx2 : gemm_f32_avx2;
#endif
    default: return wdt == CF_BF16 ? gemm_bf16_c : wdt == CF_F16 ? gemm_f16_c : gemm_f32_c;
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
