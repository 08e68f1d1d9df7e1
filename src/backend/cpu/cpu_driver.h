/* cpu_driver.h: the tiled matmul driver shared by the kernels of cpu_kernels.c (f32 and f16 weights) and
 * cpu_bf16.c (bf16 weights): how panels of activation rows and blocks of weight rows are walked, and the
 * software prefetch of the next tile's weights. The tiles themselves (the arithmetic) belong to those files;
 * the driver only chooses which tile runs where, so it never changes a value. */
#ifndef CF_BACKEND_CPU_DRIVER_H
#define CF_BACKEND_CPU_DRIVER_H

#include <stdint.h>

/* Rows of x per panel: the panel stays within this many bytes of L2, the weights stream past it. */
#define CF_PANEL_BYTES (384 * 1024)

static inline int64_t cf_panel_rows(int64_t row_bytes) {
    int64_t p = CF_PANEL_BYTES / (row_bytes > 0 ? row_bytes : 1);
    p &= ~(int64_t)3;
    return p < 4 ? 4 : p;
}

/* Rows of x per sub-panel: the weight block is applied to one sub-panel at a time, which stays in L1. */
#define CF_SUB_PANEL_BYTES (24 * 1024)

static inline int64_t cf_sub_rows(int64_t row_bytes, int64_t nr) {
    int64_t p = CF_SUB_PANEL_BYTES / (row_bytes > 0 ? row_bytes : 1);
    p -= p % nr;
    return p < nr ? nr : p;
}

static inline int64_t cf_min64(int64_t a, int64_t b) { return a < b ? a : b; }

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

/* Software prefetch of the next tile's weight rows (pf: their first byte), spread evenly over the k steps
 * of this tile: with short rows the hardware prefetchers do not catch on to a dozen row streams at once. */
static inline int64_t cf_pf_step(int64_t bytes, int64_t steps) {
    int64_t s = steps > 0 ? (bytes + steps - 1) / steps : bytes;
    return (s + 63) & ~(int64_t)63;
}

/* l1: into L1 (a streaming tile, whose rows are read once) or only into L2 (a block of rows that the next
 * tiles of a large panel read again, which would push the panel of x out of L1) */
static inline __attribute__((always_inline)) void cf_prefetch(const char **pf, int64_t step, const int l1) {
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
 * fewer than CF_BIG_ROWS rows (decoding) the weights are read once, by the tiles that prefetch into L1
 * (TILE_AS, TILE_BS, TILE_G). A 1-row panel (the GEMV) with rows of up to CF_SEQ_K values reads its weight rows
 * one after another in one fma chain (TILE_S, whole blocks): one sequential stream, which the hardware
 * prefetchers follow best; longer rows go through tiles of MR_G rows (MR_G fma chains sharing each vector
 * of x, which a long row would otherwise push out of L1 between its reads; cpu_bf16.c's AVX-512 TILE_G takes 16 rows
 * four at a time and prefetches nothing, which measured faster there, and its AVX2 TILE_S reads four rows at once,
 * which measured faster on a Zen 3). Measured on a 2-core Zen 5 VM
 * (bf16, one thread, GB/s): 2048-value rows 28 sequential against 24 in tiles of 8, 8192-value rows 20
 * sequential against 25 in tiles (two threads: 36 against 43). */
#define CF_SEQ_K 2048
#define CF_BIG_ROWS 8
#define CF_DEFINE_DRIVER(ATTR, name, WB, XT, TILE_A, TILE_AS, MR_A, NR_A, TILE_B, TILE_BS, MR_B, TILE_C, MR_C, TILE_G, MR_G, \
                      TILE_S)                                                                                      \
    ATTR static void name(const XT *x, int64_t xs, int64_t n, const void *w, int64_t ws, int64_t d, int64_t k,     \
                          float *out, int64_t os) {                                                                \
        const int64_t rb = ws * (int64_t)(WB), P = cf_panel_rows(k * (int64_t)sizeof(XT)), SP = cf_sub_rows(k * (int64_t)sizeof(XT), NR_A); \
        const char *wb = w;                                                                                        \
        for (int64_t i0 = 0; i0 < n; i0 += P) {                                                                    \
            const int64_t pn = cf_min64(P, n - i0), nf = pn - pn % NR_A;                                           \
            const int big = pn >= CF_BIG_ROWS;                                                                     \
            const XT *xp = x + i0 * xs;                                                                            \
            float *op = out + i0 * os;                                                                             \
            for (int64_t jb = 0; jb < d; jb += MR_C) {                                                             \
                const int64_t je = cf_min64(d, jb + MR_C);                                                         \
                for (int64_t s0 = 0; s0 < nf; s0 += SP)                                                            \
                    for (int64_t j = jb; j < je; j += MR_A)                                                        \
                        for (int64_t i = s0; i < cf_min64(nf, s0 + SP); i += NR_A) {                               \
                            const char *pf = i == 0 && j + MR_A < d ? wb + (j + MR_A) * rb : NULL;                 \
                            const int mv = (int)cf_min64(MR_A, je - j);                                            \
                            if (big) TILE_A(xp + i * xs, xs, NR_A, wb + j * rb, rb, mv, k, op + i * os + j, os, pf); \
                            else TILE_AS(xp + i * xs, xs, NR_A, wb + j * rb, rb, mv, k, op + i * os + j, os, pf);  \
                        }                                                                                          \
                int64_t i = nf;                                                                                    \
                if (MR_B > 0 && pn - i >= 2) {                                                                     \
                    for (int64_t j = jb; j < je; j += MR_B) {                                                      \
                        const char *pf = i == 0 && j + MR_B < d ? wb + (j + MR_B) * rb : NULL;                     \
                        const int mv = (int)cf_min64(MR_B, je - j);                                                \
                        if (big) TILE_B(xp + i * xs, xs, 2, wb + j * rb, rb, mv, k, op + i * os + j, os, pf);      \
                        else TILE_BS(xp + i * xs, xs, 2, wb + j * rb, rb, mv, k, op + i * os + j, os, pf);         \
                    }                                                                                              \
                    i += 2;                                                                                        \
                }                                                                                                  \
                if (pn == 1 && k <= CF_SEQ_K)                                                                      \
                    TILE_S(xp, xs, 1, wb + jb * rb, rb, (int)(je - jb), k, op + jb, os, NULL);                     \
                else if (pn == 1)                                                                                  \
                    for (int64_t j = jb; j < je; j += MR_G)                                                        \
                        TILE_G(xp, xs, 1, wb + j * rb, rb, (int)cf_min64(MR_G, je - j), k, op + j, os,             \
                               j + MR_G < d ? wb + (j + MR_G) * rb : NULL);                                        \
                else                                                                                               \
                    for (; i < pn; i++)                                                                            \
                        TILE_C(xp + i * xs, xs, 1, wb + jb * rb, rb, (int)(je - jb), k, op + i * os + jb, os, NULL); \
            }                                                                                                      \
        }                                                                                                          \
    }

/* one tile function per shape and grouping: G weight rows at a time (G = MR: all at once); L1: prefetch
 * into L1 (1), L2 (0) or not at all (-1: cpu_bf16.c's AVX-512 tile16 only) */
#define CF_DEFINE_TILE(ATTR, TILE, name, MR, NR, G, T, L1, XT)                                                     \
    ATTR static void name(const XT *x, int64_t xs, int nv, const char *w, int64_t rb, int mv, int64_t k, float *o, \
                          int64_t os, const char *pf) {                                                            \
        TILE(MR, NR, G, T, L1, x, xs, nv, w, rb, mv, k, o, os, pf);                                                \
    }


/* v[0..4), each the lanes 0-7 + lanes 8-15 of an accumulator -> one vector; lane 4 * (a % 2) + a / 2 holds
 * the sum of v[a]'s lanes, added at distance 4, then 2, then 1 (lanes 2, 3, 6, 7 repeat others). */
__attribute__((target("avx2,fma"))) static inline __attribute__((always_inline)) __m256 cf_avx2_red4(const __m256 *v) {
    const __m256 r0 = _mm256_add_ps(_mm256_permute2f128_ps(v[0], v[1], 0x20), _mm256_permute2f128_ps(v[0], v[1], 0x31));
    const __m256 r1 = _mm256_add_ps(_mm256_permute2f128_ps(v[2], v[3], 0x20), _mm256_permute2f128_ps(v[2], v[3], 0x31));
    const __m256 t = _mm256_add_ps(_mm256_castpd_ps(_mm256_unpacklo_pd(_mm256_castps_pd(r0), _mm256_castps_pd(r1))),
                                   _mm256_castpd_ps(_mm256_unpackhi_pd(_mm256_castps_pd(r0), _mm256_castps_pd(r1))));
    return _mm256_add_ps(_mm256_shuffle_ps(t, t, 0x88), _mm256_shuffle_ps(t, t, 0xDD));
}

/* acc[2a], acc[2a + 1]: lanes 0-7 and 8-15 of the accumulator a = m * NR + r of a tile of 4 (MR x NR) ->
 * out[r * os + m] for r < nv, m < mv: the two halves added (distance 8), then cf_avx2_red4 */
__attribute__((target("avx2,fma"))) static inline __attribute__((always_inline)) void cf_avx2_store(const __m256 *acc, const int NR, int nv,
                                                                                                      int mv, float *o, int64_t os) {
    __m256 half[4];
    for (int a = 0; a < 4; a++) half[a] = _mm256_add_ps(acc[2 * a], acc[2 * a + 1]);
    float s[8];
    _mm256_storeu_ps(s, cf_avx2_red4(half));
    for (int m = 0; m < mv; m++)
        for (int r = 0; r < nv; r++) {
            const int a = m * NR + r;
            o[r * os + m] = s[4 * (a % 2) + a / 2];
        }
}

#endif
#endif
