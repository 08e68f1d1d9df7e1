/* cpu_tile512.h: the AVX-512 pieces shared by the prefill (many-row) paths of cpu_kernels.c and cpu_quant.c: a
 * register tile that sweeps an f32 weight tile (already widened or dequantized, in L1) with rows of x, its
 * accumulators kept in a buffer between column steps and summed by the tree in registers after the last.
 * Both files define every output element as a 16-lane fma accumulation along k then one tree (distance 8,
 * 4, 2, 1); these functions compute exactly that, only the grouping of the work is theirs. Included only by
 * x86 builds; the functions carry their own target attribute, so no -march flags are needed. */
#ifndef CF_BACKEND_CPU_TILE512_H
#define CF_BACKEND_CPU_TILE512_H

#include <immintrin.h>
#include <stdint.h>

#define CF_T512 __attribute__((target("avx512f,avx512bw,avx512vl,fma,f16c")))
#define CF_T512_INL inline __attribute__((always_inline))

/* Rows of x per register tile (the tile is 4 weight rows x CF_T512_NR rows of x: 24 accumulators, the 4
 * weight vectors and a vector of x in the 32 registers; 10 loads per 24 fmas). */
#define CF_T512_NR 6

/* Accumulators of a panel: tile by tile in the order cf_t512_sweep visits them (a sequential stream), tiles of
 * CF_T512_NR rows of x x 4 weight rows, mb / 4 tiles per CF_T512_NR rows of x. The accumulator of x row i and
 * weight row m: */
static inline int64_t cf_t512_acc_at(int64_t i, int64_t m, int64_t mb) {
    return (((i / CF_T512_NR) * (mb / 4) + m / 4) * (4 * CF_T512_NR) + (i % CF_T512_NR) * 4 + m % 4) * 16;
}

/* v[0..16) -> one vector; lane 4 * (a % 4) + a / 4 holds the sum of the lanes of v[a], added in the order of
 * _mm512_reduce_add_ps: distance 8, then 4, 2, 1. */
CF_T512 static CF_T512_INL __m512 cf_t512_red16(const __m512 *v) {
    __m512 r[8], t[4], y[2];
    for (int p = 0; p < 8; p++)
        r[p] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * p], v[2 * p + 1], 0x44), _mm512_shuffle_f32x4(v[2 * p], v[2 * p + 1], 0xEE));
    for (int q = 0; q < 4; q++)
        t[q] = _mm512_add_ps(_mm512_shuffle_f32x4(r[2 * q], r[2 * q + 1], 0x88), _mm512_shuffle_f32x4(r[2 * q], r[2 * q + 1], 0xDD));
    for (int s = 0; s < 2; s++)
        y[s] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[2 * s]), _mm512_castps_pd(t[2 * s + 1]))),
                             _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[2 * s]), _mm512_castps_pd(t[2 * s + 1]))));
    return _mm512_add_ps(_mm512_shuffle_ps(y[0], y[1], 0x88), _mm512_shuffle_ps(y[0], y[1], 0xDD));
}

/* sum (cf_t512_red16 of an MR x NR tile's accumulators, a = m * NR + r) -> out[r * os + m] for r < nv, m < mv */
CF_T512 static CF_T512_INL void cf_t512_store(__m512 sum, const int MR, const int NR, int nv, int mv, float *o, int64_t os) {
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

/* The sums of the tile's accumulators a[m][i] for rows i0 .. i0 + 3 of x (those below NR), written to
 * out[(i - i0) * os + m] for m < mv: lane 4 * (i - i0) + m of the reduction. */
CF_T512 static CF_T512_INL void cf_t512_tile_out(const int NR, __m512 a[4][CF_T512_NR], int i0, float *out, int64_t os, int mv) {
    __m512 v[16];
    for (int i = 0; i < 4; i++)
        for (int m = 0; m < 4; m++) v[4 * i + m] = i0 + i < NR ? a[m][i0 + i] : _mm512_setzero_ps();
    /* lane 4 * (a % 4) + a / 4 holds the sum of v[a]; a = 4 * i + m -> lane 4 * i + m */
    const __m512i idx = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    float s[16];
    _mm512_storeu_ps(s, _mm512_permutexvar_ps(idx, cf_t512_red16(v)));
    for (int i = 0; i < 4 && i0 + i < NR; i++) _mm_mask_storeu_ps(out + i * os, (__mmask8)((1u << mv) - 1), _mm_loadu_ps(s + 4 * i));
}

/* A register tile's accumulators a[m][i] (weight row m, row i of x): from acc + (i * 4 + m) * 16, or zero
 * (first); at the end, stored back there, or (out: the last columns) summed and written to out[i * os + m] for
 * m < mv. */
CF_T512 static CF_T512_INL void cf_t512_tile_begin(const int NR, __m512 a[4][CF_T512_NR], const float *acc, int first) {
    for (int m = 0; m < 4; m++)
        for (int i = 0; i < NR; i++) a[m][i] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(acc + (i * 4 + m) * 16);
}

CF_T512 static CF_T512_INL void cf_t512_tile_end(const int NR, __m512 a[4][CF_T512_NR], float *acc, float *out, int64_t os, int mv) {
    if (out) {
        cf_t512_tile_out(NR, a, 0, out, os, mv);
        if (NR > 4) cf_t512_tile_out(NR, a, 4, out + 4 * os, os, mv);
        return;
    }
    for (int m = 0; m < 4; m++)
        for (int i = 0; i < NR; i++) _mm512_storeu_ps(acc + (i * 4 + m) * 16, a[m][i]);
}

/* The register tile: 4 weight rows (wt + m * wts, f32, zero padded to a multiple of 16 columns) x NR rows of
 * x (x + i * xs), over kl columns, the last kl % 16 of x read masked (zeros after them). The accumulator of
 * x row i and weight row m is acc + (i * 4 + m) * 16 (one tile's accumulators are consecutive); first:
 * start from zero instead of reading them. out: NULL, or the last columns: the accumulators are summed (the
 * tree) and written to out[i * os + m] for m < mv instead of stored. */
CF_T512 static CF_T512_INL void cf_t512_tile(const int NR, const float *x, int64_t xs, const float *wt, int64_t wts,
                                             int64_t kl, float *acc, int first, float *out, int64_t os, int mv) {
    __m512 a[4][CF_T512_NR];
    cf_t512_tile_begin(NR, a, acc, first);
    int64_t c = 0;
    for (; c + 16 <= kl; c += 16) {
        const __m512 w0 = _mm512_loadu_ps(wt + c), w1 = _mm512_loadu_ps(wt + wts + c), w2 = _mm512_loadu_ps(wt + 2 * wts + c),
                     w3 = _mm512_loadu_ps(wt + 3 * wts + c);
        for (int i = 0; i < NR; i++) {
            const __m512 xv = _mm512_loadu_ps(x + i * xs + c);
            a[0][i] = _mm512_fmadd_ps(xv, w0, a[0][i]);
            a[1][i] = _mm512_fmadd_ps(xv, w1, a[1][i]);
            a[2][i] = _mm512_fmadd_ps(xv, w2, a[2][i]);
            a[3][i] = _mm512_fmadd_ps(xv, w3, a[3][i]);
        }
    }
    if (c < kl) {
        const __mmask16 mask = (__mmask16)((1u << (kl - c)) - 1);
        const __m512 w0 = _mm512_loadu_ps(wt + c), w1 = _mm512_loadu_ps(wt + wts + c), w2 = _mm512_loadu_ps(wt + 2 * wts + c),
                     w3 = _mm512_loadu_ps(wt + 3 * wts + c);
        for (int i = 0; i < NR; i++) {
            const __m512 xv = _mm512_maskz_loadu_ps(mask, x + i * xs + c);
            a[0][i] = _mm512_fmadd_ps(xv, w0, a[0][i]);
            a[1][i] = _mm512_fmadd_ps(xv, w1, a[1][i]);
            a[2][i] = _mm512_fmadd_ps(xv, w2, a[2][i]);
            a[3][i] = _mm512_fmadd_ps(xv, w3, a[3][i]);
        }
    }
    cf_t512_tile_end(NR, a, acc, out, os, mv);
}

/* cf_t512_tile over np rows of x (x + i * xs) and nr weight rows (rows up to a multiple of 4 present in wt, at
 * most mb), as CF_T512_SWEEP. Accumulators as cf_t512_acc_at; out: NULL, or the last columns: the results
 * out[i * os + m] (m < nr). */
/* TILE(NR) for every tile of np rows of x and nr weight rows: tiles of CF_T512_NR rows of x (from row i) x 4
 * weight rows (from row m), the rest of the rows of x in one smaller tile; each tile of x sweeps all the weight
 * rows while it is in L1. TILE reads i and m. */
#define CF_T512_SWEEP(np, nr, TILE)                                                                              \
    do {                                                                                                         \
        int i = 0;                                                                                               \
        for (; i + CF_T512_NR <= (np); i += CF_T512_NR)                                                          \
            for (int m = 0; m < (nr); m += 4) TILE(CF_T512_NR);                                                  \
        const int rest_ = (np) - i;                                                                              \
        if (rest_ > 0)                                                                                           \
            for (int m = 0; m < (nr); m += 4) {                                                                  \
                switch (rest_) {                                                                                 \
                case 5: TILE(5); break;                                                                          \
                case 4: TILE(4); break;                                                                          \
                case 3: TILE(3); break;                                                                          \
                case 2: TILE(2); break;                                                                          \
                default: TILE(1); break;                                                                         \
                }                                                                                                \
            }                                                                                                    \
    } while (0)

CF_T512 static CF_T512_INL void cf_t512_sweep(const float *x, int64_t xs, int np, const float *wt, int64_t wts, int nr,
                                              int mb, int64_t kl, float *acc, int first, float *out, int64_t os) {
#define CF_T512_TILE(NR)                                                                                         \
    cf_t512_tile(NR, x + i * xs, xs, wt + m * wts, wts, kl, acc + cf_t512_acc_at(i, m, mb), first,                \
                 out ? out + i * os + m : NULL, os, nr - m < 4 ? nr - m : 4)
    CF_T512_SWEEP(np, nr, CF_T512_TILE);
#undef CF_T512_TILE
}

#endif
