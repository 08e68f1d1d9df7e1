/* cpu_bf16.c: out = x . w^T for bf16 weight rows (used in place). The activations are rounded to bf16 first,
 * as llama.cpp's BF16 matmul and a bf16 model's own arithmetic in PyTorch do, so that the AVX512-BF16 dot
 * product (vdpbf16ps: two bf16 products per 32-bit lane, accumulated in f32) computes every element; AVX2 and
 * portable C emulate that instruction step for step.
 *
 * The definition, the same bits for any n, row position in x, split of the weight rows and instruction set:
 *  - x is rounded to bf16, to nearest even; a subnormal becomes a zero of its sign, a NaN a quiet NaN;
 *  - a 16-lane f32 accumulator, lane l, takes for each chunk of 32 columns c (the last one zero padded)
 *        acc = fma(x[c + 2l + 1], w[c + 2l + 1], acc), then acc = fma(x[c + 2l], w[c + 2l], acc),
 *    each step reading a subnormal input as zero and flushing a subnormal result to zero (the instruction's
 *    DAZ and FTZ; the product of two bf16 values is exact in f32, so each step rounds once);
 *  - the lanes are summed by the tree of cpu_kernels.c: distance 8, then 4, 2, 1, plain f32 adds.
 * Rounding x changes each product by at most 2^-8 of its size (tests/backend/test_cpu_kernels.c bounds it).
 *
 * Kernels: portable C (the definition written out); AVX2 (the two halves of each pair split with a mask and
 * a shift, two fmas under MXCSR flush-to-zero and denormals-are-zero; from 8 rows of x, x widened once and
 * each tile's lanes 0-7, then 8-15, over a block of k: rows_avx2); AVX-512 with BF16 (vdpbf16ps: the
 * tiles of cpu_kernels.c with 32 columns a step for fewer than PANEL_MIN_ROWS rows of x, else the 4 x 6
 * register tiles of cpu_tile512.h swept over blocks of weight rows read in place). A CPU with AVX-512 but
 * without BF16 runs the AVX2 kernel. */
#include "backend/cpu/cpu_kernels.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_driver.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#include "backend/cpu/cpu_tile512.h"
#define CF_X86 1
#endif

#define INL inline __attribute__((always_inline))

/* x rows of kp = k rounded up to 32 values (zeros after k), rounded to bf16 */
static int64_t padded(int64_t k) { return (k + 31) & ~(int64_t)31; }

static INL uint16_t round_bf16(float v) {
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    if ((u & 0x7F800000u) == 0) u &= 0x80000000u;
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)(u >> 16 | 0x40);
    return (uint16_t)((u + 0x7FFFu + (u >> 16 & 1)) >> 16);
}

static INL void round_row_c(const float *x, int64_t k, uint16_t *xb) {
    for (int64_t c = 0; c < k; c++) xb[c] = round_bf16(x[c]);
}

/* The rounded rows: a stack buffer when they fit, else the heap; NULL when out of memory (the caller writes
 * NaN: never a silent wrong value). */
#define STACK_X 16384
typedef struct xbuf {
    uint16_t *p;
    void *heap;
    _Alignas(64) uint16_t stack[STACK_X];
} xbuf;

static uint16_t *xbuf_get(xbuf *b, int64_t n, int64_t kp) {
    b->heap = NULL;
    if (n * kp <= STACK_X) return b->p = b->stack;
    return b->p = b->heap = aligned_alloc(64, (size_t)(n * kp) * sizeof(uint16_t));
}

static void fill_nan(int64_t n, int64_t d, float *out, int64_t os) {
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < d; j++) out[i * os + j] = NAN;
}

/* ---- portable C: the definition, written out ---- */

static INL float widen(uint16_t h) {
    const uint32_t u = (h & 0x7F80u) ? (uint32_t)h << 16 : (uint32_t)(h & 0x8000u) << 16;  /* subnormal: zero */
    float v;
    memcpy(&v, &u, sizeof v);
    return v;
}

static INL float step(float acc, uint16_t a, uint16_t b) {
    const float r = fmaf(widen(a), widen(b), acc);
    return fabsf(r) < FLT_MIN ? copysignf(0.0f, r) : r;
}

static float dot_c(const uint16_t *xb, const uint16_t *w, int64_t k) {
    float acc[16] = {0};
    for (int64_t c = 0; c < k; c += 32)
        for (int l = 0; l < 16; l++) {
            const int64_t o = c + 2 * l + 1, e = c + 2 * l;
            acc[l] = step(acc[l], xb[o], o < k ? w[o] : 0);
            acc[l] = step(acc[l], xb[e], e < k ? w[e] : 0);
        }
    for (int h = 8; h >= 1; h /= 2)
        for (int l = 0; l < h; l++) acc[l] = acc[l] + acc[l + h];
    return acc[0];
}

static void gemm_c(const float *x, int64_t xs, int64_t n, const void *w, int64_t ws, int64_t d, int64_t k, float *out,
                   int64_t os) {
    const int64_t kp = padded(k), P = cf_panel_rows(2 * kp);
    xbuf b;
    uint16_t *xb = xbuf_get(&b, n, kp);
    if (!xb) { fill_nan(n, d, out, os); return; }
    for (int64_t i = 0; i < n; i++) {
        round_row_c(x + i * xs, k, xb + i * kp);
        memset(xb + i * kp + k, 0, (size_t)(kp - k) * sizeof(uint16_t));
    }
    for (int64_t i0 = 0; i0 < n; i0 += P)
        for (int64_t j = 0; j < d; j++)
            for (int64_t i = i0; i < cf_min64(n, i0 + P); i++) out[i * os + j] = dot_c(xb + i * kp, (const uint16_t *)w + j * ws, k);
    free(b.heap);
}

#ifdef CF_X86

/* ---- AVX2: vdpbf16ps emulated, each 16-lane accumulator in two registers, 4 accumulators per tile ---- */
#define AVX2 __attribute__((target("avx2,fma,f16c")))

AVX2 static INL void round_rows_avx2(const float *x, int64_t xs, int64_t n, int64_t k, uint16_t *xb, int64_t kp) {
    const __m256i expm = _mm256_set1_epi32(0x7F800000), sign = _mm256_set1_epi32((int)0x80000000u),
                  absm = _mm256_set1_epi32(0x7FFFFFFF), bias = _mm256_set1_epi32(0x7FFF), one = _mm256_set1_epi32(1),
                  quiet = _mm256_set1_epi32(0x40);
    for (int64_t i = 0; i < n; i++) {
        const float *xr = x + i * xs;
        uint16_t *o = xb + i * kp;
        int64_t c = 0;
        for (; c + 16 <= k; c += 16) {
            __m256i r[2];
            for (int h = 0; h < 2; h++) {
                __m256i u = _mm256_loadu_si256((const __m256i *)(xr + c + 8 * h));
                const __m256i sub = _mm256_cmpeq_epi32(_mm256_and_si256(u, expm), _mm256_setzero_si256());
                u = _mm256_blendv_epi8(u, _mm256_and_si256(u, sign), sub);
                const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, absm), expm);
                const __m256i hi = _mm256_srli_epi32(u, 16);
                const __m256i rn = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(bias, _mm256_and_si256(hi, one))), 16);
                r[h] = _mm256_blendv_epi8(rn, _mm256_or_si256(hi, quiet), nan);
            }
            /* packus interleaves 128-bit halves: 0-3 8-11 4-7 12-15 -> put them back in order */
            _mm256_storeu_si256((__m256i *)(o + c), _mm256_permute4x64_epi64(_mm256_packus_epi32(r[0], r[1]), 0xD8));
        }
        round_row_c(xr + c, k - c, o + c);
        memset(o + k, 0, (size_t)(kp - k) * sizeof(uint16_t));
    }
}

/* 16 bf16 values (8 pairs) -> the odd (the high half) or the even one of each pair as f32, or both */
AVX2 static INL __m256 odd8(__m256i v) { return _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32((int)0xFFFF0000u))); }
AVX2 static INL __m256 even8(__m256i v) { return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)); }
AVX2 static INL void split8(__m256i v, __m256 *odd, __m256 *even) {
    *odd = odd8(v);
    *even = even8(v);
}

/* MR x NR = 4: rows of x at x + r * xs (bf16, padded to a multiple of 32), rows of w at w + m * rb bytes;
 * out[r * os + m]; G weight rows at a time; pf: the next tile's weight rows to prefetch, or NULL. */
AVX2 static INL void tile8(const int MR, const int NR, const int G, const int T, const int L1, const uint16_t *x, int64_t xs, int nv,
                           const char *w, int64_t rb, int mv, int64_t k, float *o, int64_t os, const char *pf) {
    (void)T;
    const uint16_t *xr[4];
    const char *wr[4];
    __m256 acc[8];
    for (int r = 0; r < NR; r++) xr[r] = x + (r < nv ? r : nv - 1) * xs;
    for (int m = 0; m < MR; m++) wr[m] = w + (m < mv ? m : mv - 1) * rb;
    for (int a = 0; a < 8; a++) acc[a] = _mm256_setzero_ps();
    const int64_t pstep = cf_pf_step(MR * rb, MR / G * (k / 32));
    const unsigned csr = _mm_getcsr();
    _mm_setcsr(csr | 0x8040);  /* FTZ, DAZ */
    for (int g = 0; g < MR; g += G)
        for (int64_t i = 0; i < k; i += 32) {
            if (pf && i + 32 <= k) cf_prefetch(&pf, pstep, L1);
            _Alignas(32) uint16_t wt[4][32];
            const uint16_t *wp[4];
            for (int m = g; m < g + G; m++) {
                wp[m - g] = (const uint16_t *)wr[m] + i;
                if (i + 32 > k) {  /* the zero-padded last chunk */
                    memset(wt[m - g], 0, sizeof wt[0]);
                    memcpy(wt[m - g], wp[m - g], (size_t)(k - i) * sizeof(uint16_t));
                    wp[m - g] = wt[m - g];
                }
            }
            for (int h = 0; h < 2; h++) {  /* lanes 0-7 (columns 0-15), then 8-15 */
                __m256 xo[4], xe[4];
                for (int r = 0; r < NR; r++) split8(_mm256_loadu_si256((const __m256i *)(xr[r] + i + 16 * h)), &xo[r], &xe[r]);
                for (int m = g; m < g + G; m++) {
                    __m256 wo, we;
                    split8(_mm256_loadu_si256((const __m256i *)(wp[m - g] + 16 * h)), &wo, &we);
                    for (int r = 0; r < NR; r++) {
                        const int a = 2 * (m * NR + r) + h;
                        acc[a] = _mm256_fmadd_ps(xo[r], wo, acc[a]);
                        acc[a] = _mm256_fmadd_ps(xe[r], we, acc[a]);
                    }
                }
            }
        }
    _mm_setcsr(csr);
    cf_avx2_store(acc, NR, nv, mv, o, os);
}

CF_DEFINE_TILE(AVX2, tile8, t8_2x2, 2, 2, 2, 0, 0, uint16_t)
CF_DEFINE_TILE(AVX2, tile8, t8_2x2s, 2, 2, 2, 0, 1, uint16_t)
CF_DEFINE_TILE(AVX2, tile8, t8_4x1, 4, 1, 4, 0, 1, uint16_t)
/* The driver's TILE_S (one row of x, rows of at most CF_SEQ_K values): four rows at once, prefetching the next block of
 * four into L1 over this one's steps, where the AVX-512 kernel reads rows one after another. On a Zen 3 (bench_cpu_matmul
 * --n 1, GB/s, medians of 4-5 alternated rounds, 2048x2048 / 8192x2048): 1 thread 9.7 / 9.6 one row at a time, 13.3 /
 * 13.2 four at once, 14.2 / 13.7 with the prefetch; 2 threads 15.9 / 15.4, 18.1 / 19.9, 21.6 / 21.7 (read pass 22-26).
 * The last block prefetches past the weights, which is harmless: a prefetch never faults. The driver passes TILE_S no
 * prefetch address (pf is NULL): the next block is always the four rows after these. */
AVX2 static void t8_4x1_next(const uint16_t *x, int64_t xs, int nv, const char *w, int64_t rb, int mv, int64_t k, float *o,
                             int64_t os, const char *pf) {
    (void)pf;
    tile8(4, 1, 4, 0, 1, x, xs, nv, w, rb, mv, k, o, os, w + 4 * rb);
}
CF_DEFINE_DRIVER(AVX2, tiles_avx2, 2, uint16_t, t8_2x2, t8_2x2s, 2, 2, t8_4x1, t8_4x1, 0, t8_4x1, 4, t8_4x1, 4, t8_4x1_next)

/* AVX2, many rows of x (prefill, batches). The tiles above hold both halves of each 16-lane accumulator and split
 * x in registers: 8 fma chains a tile, 24 other instructions to 16 fmas. Here x is widened once per call to f32 in the
 * split order (per 32 values and half h, the odd value of each of its 8 pairs, then the even one), and a tile runs
 * lanes 0-7 of every accumulator, then lanes 8-15: the same steps in the same order for every lane, so the same bits,
 * with half the registers. A tile is 3 weight rows x 3 rows of x: 9 chains, x in registers (the odd values of each
 * row, then the even ones), each weight row split on its way in from memory: 18 fmas to 12 loads and 6 other
 * instructions a half-chunk. Per panel of RT_PANEL rows of x, block of RT_BLOCK weight rows and k-block of RT_KC
 * columns, each x tile (12 KiB) stays in L1 while the block's weight rows stream past from L2; the accumulators
 * wait in memory between k-blocks. 1 thread on a Zen 3 (bench_cpu_matmul --n 128, GFLOP/s, medians of 3 alternated
 * rounds, 2048x2048 / 8192x2048 / 2048x8192): 46 / 48 / 41 with 3 x 4 tiles over all of k and x from memory, 56 / 50
 * / 52 so (the same loop alone in L1: 61; about 84 is the core's fma peak). */
#define RT_M 3
#define RT_N 3
#define RT_PANEL 48  /* rows of x */
#define RT_BLOCK 48  /* weight rows */
#define RT_KC 1024   /* columns a k-block */
#define RT_TILES (RT_PANEL / RT_N * (RT_BLOCK / RT_M))

AVX2 static void widen_split_avx2(const uint16_t *xb, int64_t count, float *xf) {
    for (int64_t i = 0; i < count; i += 16) {
        __m256 o, e;
        split8(_mm256_loadu_si256((const __m256i *)(xb + i)), &o, &e);
        _mm256_store_ps(xf + i, o);
        _mm256_store_ps(xf + i + 8, e);
    }
}

/* one half-chunk (16 values at c + 16h) for the tile: the odd value of every pair, then the even one; x from registers,
 * each weight row split on its way in from memory */
AVX2 static INL void rt_step(const float *const *xr, const uint16_t *const *wp, int64_t off, __m256 acc[RT_M][RT_N]) {
    __m256 xv[RT_N];
    for (int r = 0; r < RT_N; r++) xv[r] = _mm256_load_ps(xr[r] + off);
    for (int m = 0; m < RT_M; m++) {
        const __m256 wo = odd8(_mm256_loadu_si256((const __m256i *)wp[m]));
        for (int r = 0; r < RT_N; r++) acc[m][r] = _mm256_fmadd_ps(xv[r], wo, acc[m][r]);
    }
    for (int r = 0; r < RT_N; r++) xv[r] = _mm256_load_ps(xr[r] + off + 8);
    for (int m = 0; m < RT_M; m++) {
        const __m256 we = even8(_mm256_loadu_si256((const __m256i *)wp[m]));
        for (int r = 0; r < RT_N; r++) acc[m][r] = _mm256_fmadd_ps(xv[r], we, acc[m][r]);
    }
}

/* A tile's accumulators between k-blocks: lanes 0-7 (h = 0) and 8-15 of weight row m against x row r */
typedef struct rt_acc {
    __m256 a[2][RT_M][RT_N];
} rt_acc;

/* Columns [c0, c1) of the tile (multiples of 32; the last block ends at kp) into *st, which first starts at zero;
 * under FTZ and DAZ (the caller's). Weight rows w + m * ws (rows past mv repeat the last), rows of xf at xf + r * kp
 * (past nv likewise). */
AVX2 static void rt_tile(const float *xf, int64_t kp, int nv, const uint16_t *w, int64_t ws, int mv, int64_t k, int64_t c0,
                         int64_t c1, rt_acc *st, int first) {
    const float *xr[RT_N];
    const uint16_t *wr[RT_M], *wp[RT_M];
    for (int r = 0; r < RT_N; r++) xr[r] = xf + (r < nv ? r : nv - 1) * kp;
    for (int m = 0; m < RT_M; m++) wr[m] = w + (m < mv ? m : mv - 1) * ws;
    const int64_t kf = cf_min64(c1, k & ~(int64_t)31);
    for (int h = 0; h < 2; h++) {
        __m256 acc[RT_M][RT_N];
        for (int m = 0; m < RT_M; m++)
            for (int r = 0; r < RT_N; r++) acc[m][r] = first ? _mm256_setzero_ps() : st->a[h][m][r];
        int64_t c = c0;
        for (; c < kf; c += 32) {
            for (int m = 0; m < RT_M; m++) wp[m] = wr[m] + c + 16 * h;
            rt_step(xr, wp, c + 16 * h, acc);
        }
        if (c < c1) { /* the zero-padded last chunk */
            _Alignas(32) uint16_t wt[RT_M][16];
            for (int m = 0; m < RT_M; m++) {
                memset(wt[m], 0, sizeof wt[m]);
                const int64_t a = c + 16 * h, e = k < a + 16 ? k : a + 16;
                if (e > a) memcpy(wt[m], wr[m] + a, (size_t)(e - a) * sizeof(uint16_t));
                wp[m] = wt[m];
            }
            rt_step(xr, wp, c + 16 * h, acc);
        }
        for (int m = 0; m < RT_M; m++)
            for (int r = 0; r < RT_N; r++) st->a[h][m][r] = acc[m][r];
    }
}

/* out[r * os + m] for r < nv, m < mv: the lanes of the tile's accumulators summed (plain adds, no FTZ) */
AVX2 static void rt_store(const rt_acc *st, int nv, int mv, float *o, int64_t os) {
    for (int m = 0; m < mv; m++) {
        __m256 a[8] = {0};
        for (int r = 0; r < RT_N; r++) a[2 * r] = st->a[0][m][r], a[2 * r + 1] = st->a[1][m][r];
        cf_avx2_store(a, RT_N, nv, 1, o + m, os);
    }
}

/* xb: n rounded rows of kp values; xf: room for n * kp floats; st: RT_TILES accumulators */
AVX2 static void rows_avx2(const uint16_t *xb, int64_t n, int64_t kp, const uint16_t *w, int64_t ws, int64_t d, int64_t k,
                           float *out, int64_t os, float *xf, rt_acc *st) {
    widen_split_avx2(xb, n * kp, xf);
    const unsigned csr = _mm_getcsr();
    for (int64_t i0 = 0; i0 < n; i0 += RT_PANEL) {
        const int64_t i1 = cf_min64(n, i0 + RT_PANEL);
        for (int64_t jb = 0; jb < d; jb += RT_BLOCK) {
            const int64_t je = cf_min64(d, jb + RT_BLOCK);
            _mm_setcsr(csr | 0x8040); /* FTZ, DAZ for the steps */
            for (int64_t c0 = 0; c0 < kp; c0 += RT_KC) {
                rt_acc *t = st;
                for (int64_t i = i0; i < i1; i += RT_N)
                    for (int64_t j = jb; j < je; j += RT_M, t++)
                        rt_tile(xf + i * kp, kp, (int)cf_min64(RT_N, i1 - i), w + j * ws, ws, (int)cf_min64(RT_M, je - j), k, c0,
                                cf_min64(kp, c0 + RT_KC), t, c0 == 0);
            }
            _mm_setcsr(csr);
            const rt_acc *t = st;
            for (int64_t i = i0; i < i1; i += RT_N)
                for (int64_t j = jb; j < je; j += RT_M, t++)
                    rt_store(t, (int)cf_min64(RT_N, i1 - i), (int)cf_min64(RT_M, je - j), out + i * os + j, os);
        }
    }
}

AVX2 static void gemm_avx2(const float *x, int64_t xs, int64_t n, const void *w, int64_t ws, int64_t d, int64_t k, float *out,
                           int64_t os) {
    const int64_t kp = padded(k);
    xbuf b;
    uint16_t *xb = xbuf_get(&b, n, kp);
    if (!xb) { fill_nan(n, d, out, os); return; }
    round_rows_avx2(x, xs, n, k, xb, kp);
    /* the widened rows, then the tiles' accumulators (n * kp floats: a multiple of 128 bytes) */
    float *xf = n >= CF_BIG_ROWS ? aligned_alloc(64, (size_t)(n * kp) * sizeof(float) + RT_TILES * sizeof(rt_acc)) : NULL;
    if (xf) rows_avx2(xb, n, kp, w, ws, d, k, out, os, xf, (rt_acc *)(xf + n * kp));
    else tiles_avx2(xb, kp, n, w, ws, d, k, out, os); /* few rows, or no memory for the widened copy */
    free(xf);
    free(b.heap);
}

/* ---- AVX-512 with BF16: vdpbf16ps ---- */
#define BF512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,fma,f16c")))

BF512 static INL void round_rows_avx512(const float *x, int64_t xs, int64_t n, int64_t k, uint16_t *xb, int64_t kp) {
    const __m512i expm = _mm512_set1_epi32(0x7F800000), sign = _mm512_set1_epi32((int)0x80000000u),
                  absm = _mm512_set1_epi32(0x7FFFFFFF), bias = _mm512_set1_epi32(0x7FFF), one = _mm512_set1_epi32(1),
                  quiet = _mm512_set1_epi32(0x40);
    for (int64_t i = 0; i < n; i++) {
        const float *xr = x + i * xs;
        uint16_t *o = xb + i * kp;
        for (int64_t c = 0; c < kp; c += 16) {
            const __mmask16 in = c + 16 <= k ? (__mmask16)0xFFFF : c < k ? (__mmask16)((1u << (k - c)) - 1) : 0;
            __m512i u = _mm512_maskz_loadu_epi32(in, xr + c);
            u = _mm512_mask_and_epi32(u, _mm512_testn_epi32_mask(u, expm), u, sign);
            const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, absm), expm);
            const __m512i hi = _mm512_srli_epi32(u, 16);
            __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(bias, _mm512_and_si512(hi, one))), 16);
            r = _mm512_mask_or_epi32(r, nan, hi, quiet);
            _mm256_storeu_si256((__m256i *)(o + c), _mm512_cvtepi32_epi16(r));
        }
    }
}

/* 32 bf16 values of a weight row: all of them, or the first k - i (zeros after them, nothing past them read) */
BF512 static INL __m512bh ldw(const uint16_t *p, int64_t i, int64_t k) {
    if (i + 32 <= k) return (__m512bh)_mm512_loadu_si512(p + i);
    return (__m512bh)_mm512_maskz_loadu_epi16((__mmask32)((1ull << (k - i)) - 1), p + i);
}

/* MR x NR <= 16 (unused accumulators stay zero): as tile8, 32 columns a step */
BF512 static INL void tile16(const int MR, const int NR, const int G, const int T, const int L1, const uint16_t *x, int64_t xs, int nv,
                             const char *w, int64_t rb, int mv, int64_t k, float *o, int64_t os, const char *pf) {
    (void)T;
    const uint16_t *xr[16];
    const uint16_t *wr[16];
    __m512 acc[16];
    __m512bh xv[16];
    for (int r = 0; r < NR; r++) xr[r] = x + (r < nv ? r : nv - 1) * xs;
    for (int m = 0; m < MR; m++) wr[m] = (const uint16_t *)(w + (m < mv ? m : mv - 1) * rb);
    for (int a = 0; a < 16; a++) acc[a] = _mm512_setzero_ps();
    const int64_t pstep = cf_pf_step(MR * rb, MR / G * (k / 32));
    for (int g = 0; g < MR; g += G) {
        int64_t i = 0;
        for (; i + 32 <= k; i += 32) {
            if (pf && L1 >= 0) cf_prefetch(&pf, pstep, L1);
            for (int r = 0; r < NR; r++) xv[r] = (__m512bh)_mm512_loadu_si512(xr[r] + i);
            for (int m = g; m < g + G; m++) {
                const __m512bh wv = (__m512bh)_mm512_loadu_si512(wr[m] + i);
                for (int r = 0; r < NR; r++) acc[m * NR + r] = _mm512_dpbf16_ps(acc[m * NR + r], xv[r], wv);
            }
        }
        if (i < k) {
            for (int r = 0; r < NR; r++) xv[r] = (__m512bh)_mm512_loadu_si512(xr[r] + i);
            for (int m = g; m < g + G; m++) {
                const __m512bh wv = ldw(wr[m], i, k);
                for (int r = 0; r < NR; r++) acc[m * NR + r] = _mm512_dpbf16_ps(acc[m * NR + r], xv[r], wv);
            }
        }
    }
    cf_t512_store(cf_t512_red16(acc), MR, NR, nv, mv, o, os);
}

CF_DEFINE_TILE(BF512, tile16, t16_4x4, 4, 4, 4, 0, 0, uint16_t)
CF_DEFINE_TILE(BF512, tile16, t16_4x4s, 4, 4, 4, 0, 1, uint16_t)
CF_DEFINE_TILE(BF512, tile16, t16_8x2, 8, 2, 8, 0, 0, uint16_t)
CF_DEFINE_TILE(BF512, tile16, t16_8x2s, 8, 2, 8, 0, 1, uint16_t)
CF_DEFINE_TILE(BF512, tile16, t16_16x1, 16, 1, 16, 0, 0, uint16_t)
CF_DEFINE_TILE(BF512, tile16, t16_16x1_1, 16, 1, 1, 0, 1, uint16_t)

/* The driver's TILE_G (one row of x against up to 16 long weight rows): four rows at a time, four fma chains sharing
 * each vector of x, and no software prefetch (L1 -1), whose next-tile rows (16 rows of 16 KiB at k = 8192) only pushed
 * the current ones out. bench_cpu_matmul --n 1 --shape 2048x8192, fastest of its batches in 4 alternated rounds: 1 thread
 * 28.4-33.9 GB/s against 24.2-28.2 for 8 rows at once with prefetch into L1; 2 threads 44-67 against 30-52. */
CF_DEFINE_TILE(BF512, tile16, t16_16x1_4, 16, 1, 4, 0, -1, uint16_t)
CF_DEFINE_DRIVER(BF512, tiles_avx512, 2, uint16_t, t16_4x4, t16_4x4s, 4, 4, t16_8x2, t16_8x2s, 8, t16_16x1, 16, t16_16x1_4, 16,
                 t16_16x1_1)

/* Prefill (PANEL_MIN_ROWS rows of x or more): per panel of up to PANEL_X rows of x, block of PANEL_W weight
 * rows and step of PANEL_K columns, the block's columns (read in place, the next step's prefetched)
 * are swept by register tiles of 4 weight rows x CF_T512_NR rows of x, whose accumulators wait in a stack
 * buffer (as cf_t512_acc_at) between steps; the last step writes the sums. Stack: about 210 KiB. PANEL_W 32: the
 * x panel is streamed from L2 once per block, half as often as with 16 (bench_cpu_matmul --threads 2 --n 128, medians of
 * 7 alternated rounds: 2048x2048 601 GFLOP/s against 576, 8192x2048 589 against 578, 2048x8192 514 against 482; 64
 * no better). */
#define PANEL_MIN_ROWS 24
#define PANEL_X 96
#define PANEL_W 32
#define PANEL_K 2048

/* 4 weight rows wr[0..3] x NR rows of x (x + i * xs), columns i0 .. i0 + kl of k; acc, first, out as cf_t512_tile */
BF512 static INL void ptile(const int NR, const uint16_t *x, int64_t xs, const uint16_t *const *wr, int64_t i0, int64_t kl,
                            int64_t k, float *acc, int first, float *out, int64_t os, int mv) {
    __m512 a[4][CF_T512_NR];
    cf_t512_tile_begin(NR, a, acc, first);
    const int64_t ce = i0 + kl, cf = cf_min64(ce, k & ~(int64_t)31);  /* full chunks end at cf */
    int64_t c = i0;
#define PSTEP(LD)                                                                                                  \
    {                                                                                                              \
        const __m512bh w0 = LD(wr[0]), w1 = LD(wr[1]), w2 = LD(wr[2]), w3 = LD(wr[3]);                            \
        for (int i = 0; i < NR; i++) {                                                                             \
            const __m512bh xv = (__m512bh)_mm512_loadu_si512(x + i * xs + c);                                      \
            a[0][i] = _mm512_dpbf16_ps(a[0][i], xv, w0);                                                           \
            a[1][i] = _mm512_dpbf16_ps(a[1][i], xv, w1);                                                           \
            a[2][i] = _mm512_dpbf16_ps(a[2][i], xv, w2);                                                           \
            a[3][i] = _mm512_dpbf16_ps(a[3][i], xv, w3);                                                           \
        }                                                                                                          \
    }
#define LD_FULL(p) (__m512bh) _mm512_loadu_si512((p) + c)
#define LD_TAIL(p) ldw(p, c, k)
    for (; c < cf; c += 32) PSTEP(LD_FULL)
    if (c < ce) PSTEP(LD_TAIL)
#undef PSTEP
#undef LD_FULL
#undef LD_TAIL
    cf_t512_tile_end(NR, a, acc, out, os, mv);
}

BF512 static void panel_gemm(const uint16_t *x, int64_t xs, int64_t n, const void *w, int64_t ws, int64_t d, int64_t k,
                             float *out, int64_t os) {
    _Alignas(64) float acc[(PANEL_X + CF_T512_NR) * PANEL_W * 16];
    const int64_t panels = (n + PANEL_X - 1) / PANEL_X;
    int64_t P = (n + panels - 1) / panels;
    P = cf_min64(PANEL_X, (P + CF_T512_NR - 1) / CF_T512_NR * CF_T512_NR);
    for (int64_t i0 = 0; i0 < n; i0 += P) {
        const int np = (int)cf_min64(P, n - i0);
        const uint16_t *xp = x + i0 * xs;
        for (int64_t jb = 0; jb < d; jb += PANEL_W) {
            const int nr = (int)cf_min64(PANEL_W, d - jb);
            const uint16_t *wr[PANEL_W];
            for (int m = 0; m < PANEL_W; m++) wr[m] = (const uint16_t *)w + (jb + (m < nr ? m : nr - 1)) * ws;
            for (int64_t k0 = 0; k0 < k; k0 += PANEL_K) {
                const int64_t kl = cf_min64(PANEL_K, k - k0);
                const int last = k0 + PANEL_K >= k;
                /* the next step's columns of these rows, or the next block's first columns */
                if (!last || jb + PANEL_W < d) {
                    const int64_t c0 = last ? 0 : k0 + PANEL_K, cl = cf_min64(PANEL_K, k - c0);
                    const int nn = last ? (int)cf_min64(PANEL_W, d - jb - PANEL_W) : nr;
                    for (int m = 0; m < nn; m++) {
                        const char *p = (const char *)((const uint16_t *)w + (last ? jb + PANEL_W + m : jb + m) * ws + c0);
                        for (int64_t b = 0; b < cl * 2; b += 64) _mm_prefetch(p + b, _MM_HINT_T0);
                    }
                }
#define PTILE(NR)                                                                                                  \
    ptile(NR, xp + i * xs, xs, wr + m, k0, kl, k, acc + cf_t512_acc_at(i, m, PANEL_W), k0 == 0,                    \
          last ? out + (i0 + i) * os + jb + m : NULL, os, nr - m < 4 ? nr - m : 4)
                CF_T512_SWEEP(np, nr, PTILE);
#undef PTILE
            }
        }
    }
}

BF512 static void gemm_avx512(const float *x, int64_t xs, int64_t n, const void *w, int64_t ws, int64_t d, int64_t k,
                              float *out, int64_t os) {
    /* rows 64 bytes longer than kp: rows a multiple of 4 KiB apart share L1 sets (measured 4% at k = 2048) */
    const int64_t kp = padded(k), xst = kp + 32;
    xbuf b;
    uint16_t *xb = xbuf_get(&b, n, xst);
    if (!xb) { fill_nan(n, d, out, os); return; }
    round_rows_avx512(x, xs, n, k, xb, xst);
    if (n >= PANEL_MIN_ROWS) panel_gemm(xb, xst, n, w, ws, d, k, out, os);
    else tiles_avx512(xb, xst, n, w, ws, d, k, out, os);
    free(b.heap);
}

#endif

cf_gemm_fn cf_cpu_bf16_kernel(cf_cpu_isa_level isa) {
    switch (isa) {
#ifdef CF_X86
    case CF_ISA_AVX512: return cf_cpu_has_avx512_bf16() ? gemm_avx512 : gemm_avx2;
    case CF_ISA_AVX2: return gemm_avx2;
#endif
    default: return gemm_c;
    }
}
