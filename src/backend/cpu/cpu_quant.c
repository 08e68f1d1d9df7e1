/* cpu_quant.c: out = x . w^T for f32 activation rows against MLX affine-quantized weight rows (cf_qmat, read
 * in place); owns no memory beyond a call (the AVX-512 tiled path's scratch is allocated and freed by the call,
 * the others' is on the stack: at most 128 KiB).
 *
 * One definition of every output element (cpu_quant.h): w = fmaf(scale, q, bias) in f32, then the 16-lane
 * fma accumulation (4 bits in pair order: lane l takes columns 2l, 2l + 1 of every 32, the low and high
 * nibbles of byte l) and the tree reduction of cpu_kernels.c. Every path below computes exactly that, so
 * results do not depend on n, r0, r1, the thread split or the instruction set:
 *  - portable C (`generic`): every bit width; unpacks each group of a row (values straddling words for 3,
 *    5, 6 bits), dequantizes it once for a panel of up to 16 rows of x. Compiled three times, plain and with
 *    the AVX2 and AVX-512 target attributes (the same source: fmaf is exact, so the same bits), and is the
 *    kernel for 2, 3, 5 and 6 bits everywhere and for all widths where no vector unit is available.
 *  - decode (n = 1), 4 and 8 bits: dequantize-in-register dot products over 8 weight rows at a time (4 on
 *    AVX2: independent fma chains sharing each vector of x), specialized per group size and scale type,
 *    with a software prefetch of the next rows' packed weights. 4 bits on AVX-512: a 16-entry table per
 *    group and row (scale * v + bias for v = 0..15, one fma) looked up by vpermps, which reads an index's
 *    low 4 bits: 16 packed bytes widened to 16 int32 lanes give the low nibbles' weights directly and the
 *    high nibbles' after one shift, so 32 weights cost a widening load, a shift and two lookups, and x is
 *    split into its even and odd columns once for the 8 rows; 8 bits: a widening load, a conversion and the
 *    dequantizing fma per 16 weights. The 4-bit pair order exists for this kernel: natural order would
 *    cost an interleave of the nibbles per row instead of a split of x shared by all rows.
 *  - 2 to 63 (4 bits) or 15 (8 bits) rows of x on AVX-512 (batched decode, short prompts): the same kernel
 *    on 4 weight rows x up to 4 rows of x, each dequantized vector feeding every row of x.
 *  - more rows of x, 4 and 8 bits (prefill, larger batches): per panel of rows of x and block of weight
 *    rows, the block is dequantized 256 columns at a time into an f32 tile (once for the whole panel; the
 *    next block's packed weights prefetched meanwhile) and swept by register tiles, the accumulators kept
 *    in a buffer between the 256-column steps; for 4 bits the step's columns of x are first put in pair
 *    order. AVX-512: panels of up to 48 rows, blocks of 64 (4 bits) or 16 (8 bits) weight rows, the 4 x 6
 *    tiles of cpu_tile512.h (24 accumulators), the last step summing in registers; AVX2: panels and blocks
 *    of 32, tiles of 2 x 2.
 * The AVX2 and AVX-512 versions are compiled with target attributes and chosen at run time (cpu_kernels.c's
 * detection). The bias is not folded out as bias * sum(x over the group): dequantizing first keeps one
 * definition for the decode and tiled paths (the tiled path sweeps plain f32 tiles at full rate), and it
 * is free in the 4-bit table; folding would save only the 8-bit dequantizing fma. No int8 activations
 * (VNNI): quantizing x would change the f32 definition and break the agreement with the f32 reference. */
#include "backend/cpu/cpu_quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CF_X86 1
#include "backend/cpu/cpu_tile512.h"
#endif

#define INL inline __attribute__((always_inline))

static INL int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* the sum of the 16 lanes: distance 8, then 4, 2, 1 */
static INL float tree16(const float *a) {
    float t[16];
    memcpy(t, a, sizeof t);
    for (int h = 8; h >= 1; h /= 2)
        for (int l = 0; l < h; l++) t[l] = t[l] + t[l + h];
    return t[0];
}

static INL float sb_c(const void *p, int t, int64_t i) {
    switch (t) {
    case CF_BF16: return cf_bf16_to_f32(((const uint16_t *)p)[i]);
    case CF_F16: return cf_f16_to_f32(((const uint16_t *)p)[i]);
    default: return ((const float *)p)[i];
    }
}

/* value c of a packed row of `bits`-bit values (a value may straddle two words) */
static INL uint32_t qval(const uint32_t *row, int bits, int64_t c) {
    const uint64_t off = (uint64_t)c * (uint64_t)bits;
    const uint64_t wi = off >> 5;
    const unsigned sh = (unsigned)(off & 31);
    uint64_t v = row[wi] >> sh;
    if (sh + (unsigned)bits > 32) v |= (uint64_t)row[wi + 1] << (32 - sh);
    return (uint32_t)v & ((1u << bits) - 1u);
}

/* ---- portable C: every bit width ---- */
#define C_PANEL 16

static INL void generic(const float *x, int64_t xs, int64_t n, const cf_qmat *w, int64_t r0, int64_t r1, float *out,
                        int64_t os, float (*sb)(const void *, int, int64_t)) {
    const int G = w->group, bits = w->bits;
    const int64_t K = w->cols, ng = K / G, wpr = K * bits / 32;
    float acc[C_PANEL][16], wg[128];
    for (int64_t i0 = 0; i0 < n; i0 += C_PANEL) {
        const int np = (int)min64(C_PANEL, n - i0);
        for (int64_t r = r0; r < r1; r++) {
            const uint32_t *qr = w->q + r * wpr;
            memset(acc, 0, sizeof acc);
            for (int64_t g = 0; g < ng; g++) {
                const float s = sb(w->scales, w->sb_dtype, r * ng + g), b = sb(w->biases, w->sb_dtype, r * ng + g);
                if (bits == 4 || bits == 8) {
                    const uint8_t *qb = (const uint8_t *)qr + g * G * bits / 8;
                    if (bits == 8)
                        for (int j = 0; j < G; j++) wg[j] = fmaf(s, (float)qb[j], b);
                    else
                        for (int j = 0; j < G; j++) wg[j] = fmaf(s, (float)((qb[j / 2] >> (4 * (j & 1))) & 15), b);
                } else {
                    for (int j = 0; j < G; j++) wg[j] = fmaf(s, (float)qval(qr, bits, g * G + j), b);
                }
                for (int i = 0; i < np; i++) {
                    const float *xr = x + (i0 + i) * xs + g * G;
                    float *a = acc[i];
                    if (bits == 4) /* pair order: lane l takes columns 2l, 2l + 1 of each 32 */
                        for (int j = 0; j < G; j += 32)
                            for (int l = 0; l < 16; l++) {
                                a[l] = fmaf(xr[j + 2 * l], wg[j + 2 * l], a[l]);
                                a[l] = fmaf(xr[j + 2 * l + 1], wg[j + 2 * l + 1], a[l]);
                            }
                    else
                        for (int j = 0; j < G; j += 16)
                            for (int l = 0; l < 16; l++) a[l] = fmaf(xr[j + l], wg[j + l], a[l]);
                }
            }
            for (int i = 0; i < np; i++) out[(i0 + i) * os + (r - r0)] = tree16(acc[i]);
        }
    }
}

static float sb_plain(const void *p, int t, int64_t i) { return sb_c(p, t, i); }

static void generic_c(const float *x, int64_t xs, int64_t n, const cf_qmat *w, int64_t r0, int64_t r1, float *out,
                      int64_t os) {
    generic(x, xs, n, w, r0, r1, out, os, sb_plain);
}

#ifdef CF_X86

#define AVX2 __attribute__((target("avx2,fma,f16c")))
#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))

/* scale or bias i widened to f32, F16 by the F16C instruction */
AVX2 static INL float sb_x86(const void *p, int t, int64_t i) {
    switch (t) {
    case CF_BF16: return cf_bf16_to_f32(((const uint16_t *)p)[i]);
    case CF_F16: return _cvtsh_ss(((const uint16_t *)p)[i]);
    default: return ((const float *)p)[i];
    }
}

AVX2 static float sb_avx2(const void *p, int t, int64_t i) { return sb_x86(p, t, i); }

/* scale or bias i widened to f32 in every lane. BF16: the 32-bit word that ends with value i, broadcast
 * from memory (a load, no shuffle and no move from a general register) and masked to its high half, which
 * is value i's f32 bits (value 0, which has no word before it, is shifted up instead). */
AVX2 static INL __m256 sb_bcast_avx2(const void *p, const int t, int64_t i) {
    if (t == CF_BF16) {
        const uint16_t *h = p;
        int32_t wd;
        if (i == 0) return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_set1_epi32(h[0]), 16));
        memcpy(&wd, h + i - 1, sizeof wd);
        return _mm256_castsi256_ps(_mm256_and_si256(_mm256_set1_epi32(wd), _mm256_set1_epi32((int32_t)0xFFFF0000u)));
    }
    return _mm256_set1_ps(sb_x86(p, t, i));
}

AVX2 static void generic_avx2(const float *x, int64_t xs, int64_t n, const cf_qmat *w, int64_t r0, int64_t r1,
                              float *out, int64_t os) {
    generic(x, xs, n, w, r0, r1, out, os, sb_avx2);
}

AVX512 static void generic_avx512(const float *x, int64_t xs, int64_t n, const cf_qmat *w, int64_t r0, int64_t r1,
                                  float *out, int64_t os) {
    generic(x, xs, n, w, r0, r1, out, os, sb_avx2);
}

/* Tiled path geometry (shared by both instruction sets): rows of x per panel, weight rows per block,
 * columns per dequantized step (a multiple of every group size). */
#define T_PANEL 32
#define T_BLOCK 32
#define T_KB 256

/* Decode: software prefetch of the next step's R packed weight rows (one contiguous run of R * rb bytes, when
 * they exist), spread evenly over this step's COLS-column iterations: a row of a few hundred bytes to a few
 * KiB is too short a stream for the hardware prefetchers to ramp up on, and R of them run side by side. */
#define PF_SETUP(COLS)                                                                                         \
    const char *pf = r + 2 * R <= w->rows ? (const char *)q + R * rb : NULL;                                   \
    const int64_t pf_iters = K / (COLS), pf_step = ((R * rb + pf_iters - 1) / pf_iters + 63) & ~(int64_t)63;
#define PF_STEP()                                                                                              \
    do {                                                                                                       \
        if (pf) {                                                                                              \
            for (int64_t pb = 0; pb < pf_step; pb += 64) _mm_prefetch(pf + pb, _MM_HINT_T0);                   \
            pf += pf_step;                                                                                     \
        }                                                                                                      \
    } while (0)

typedef void (*gemv_fn)(const float *x, const cf_qmat *w, int64_t r0, int64_t r1, float *o);

/* The decode kernels of one instruction set, one per bits (4, 8) x group (32, 64, 128) x scale type (F32,
 * F16, BF16: the cf_dtype order), each a loop over RW weight rows at a time (independent fma chains sharing each vector of x: 8 on AVX-512, 4 on
 * AVX2), then 4, then single rows. */
#define GEMV_FN(ISA, B, G, SB) gemv_##ISA##_##B##_##G##_##SB
#define DEF_GEMV(ATTR, ISA, B, G, SB)                                                                          \
    ATTR static void GEMV_FN(ISA, B, G, SB)(const float *x, const cf_qmat *w, int64_t r0, int64_t r1, float *o) { \
        int64_t r = r0;                                                                                        \
        for (; r + RW_##ISA <= r1; r += RW_##ISA) gemv_rows_##ISA(B, G, SB, RW_##ISA, x, w, r, o + (r - r0));   \
        for (; r + 4 <= r1; r += 4) gemv_rows_##ISA(B, G, SB, 4, x, w, r, o + (r - r0));                       \
        for (; r < r1; r++) gemv_rows_##ISA(B, G, SB, 1, x, w, r, o + (r - r0));                              \
    }
#define RW_avx2 4   /* AVX2 has 16 registers: 4 rows of two-register accumulators */
#define RW_avx512 8
#define DEF_GEMV_SB(ATTR, ISA, B, G) \
    DEF_GEMV(ATTR, ISA, B, G, CF_F32) DEF_GEMV(ATTR, ISA, B, G, CF_F16) DEF_GEMV(ATTR, ISA, B, G, CF_BF16)
#define DEF_GEMV_ALL(ATTR, ISA)                                                                               \
    DEF_GEMV_SB(ATTR, ISA, 4, 32) DEF_GEMV_SB(ATTR, ISA, 4, 64) DEF_GEMV_SB(ATTR, ISA, 4, 128)                \
    DEF_GEMV_SB(ATTR, ISA, 8, 32) DEF_GEMV_SB(ATTR, ISA, 8, 64) DEF_GEMV_SB(ATTR, ISA, 8, 128)
#define TAB_SB(ISA, B, G) {GEMV_FN(ISA, B, G, CF_F32), GEMV_FN(ISA, B, G, CF_F16), GEMV_FN(ISA, B, G, CF_BF16)}
#define TAB_G(ISA, B) {TAB_SB(ISA, B, 32), TAB_SB(ISA, B, 64), TAB_SB(ISA, B, 128)}
#define GEMV_TABLE(ISA) static const gemv_fn gemv_tab_##ISA[2][3][3] = {TAB_G(ISA, 4), TAB_G(ISA, 8)};

static gemv_fn gemv_pick(const gemv_fn tab[2][3][3], const cf_qmat *w) {
    return tab[w->bits == 8][w->group == 32 ? 0 : w->group == 64 ? 1 : 2][w->sb_dtype == CF_F32 ? 0 : w->sb_dtype == CF_F16 ? 1 : 2];
}

/* ---- AVX2 + FMA + F16C: each 16-lane accumulator in two registers (lanes 0-7, 8-15) ---- */

/* 4 bits: the 32 weights of 16 packed bytes at p in pair order: a[0..1] the low nibbles (columns 0, 2, .., 30),
 * b[0..1] the high ones (columns 1, 3, .., 31), dequantized */
AVX2 static INL void deq32_q4_avx2(const uint8_t *p, __m256 s, __m256 bias, __m256 *a, __m256 *b) {
    const __m256i v0 = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p));
    const __m256i v1 = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(p + 8)));
    const __m256i m = _mm256_set1_epi32(15);
    a[0] = _mm256_fmadd_ps(s, _mm256_cvtepi32_ps(_mm256_and_si256(v0, m)), bias);
    a[1] = _mm256_fmadd_ps(s, _mm256_cvtepi32_ps(_mm256_and_si256(v1, m)), bias);
    b[0] = _mm256_fmadd_ps(s, _mm256_cvtepi32_ps(_mm256_srli_epi32(v0, 4)), bias);
    b[1] = _mm256_fmadd_ps(s, _mm256_cvtepi32_ps(_mm256_srli_epi32(v1, 4)), bias);
}

/* 8 bits: the 16 weights of 16 bytes at p */
AVX2 static INL void deq16_q8_avx2(const uint8_t *p, __m256 s, __m256 bias, __m256 *a) {
    a[0] = _mm256_fmadd_ps(s, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p))), bias);
    a[1] = _mm256_fmadd_ps(s, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(p + 8)))), bias);
}

/* 32 values of x in pair order: e[0..1] the even columns, o[0..1] the odd ones */
AVX2 static INL void xpair_avx2(const float *x, __m256 *e, __m256 *o) {
    const __m256 v0 = _mm256_loadu_ps(x), v1 = _mm256_loadu_ps(x + 8), v2 = _mm256_loadu_ps(x + 16), v3 = _mm256_loadu_ps(x + 24);
#define CF_Q_EV(a, b, imm) _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, imm)), 0xD8))
    e[0] = CF_Q_EV(v0, v1, 0x88), o[0] = CF_Q_EV(v0, v1, 0xDD);
    e[1] = CF_Q_EV(v2, v3, 0x88), o[1] = CF_Q_EV(v2, v3, 0xDD);
#undef CF_Q_EV
}

/* decode: R weight rows (r + m) against one row of x, written to o[m] */
AVX2 static INL void gemv_rows_avx2(const int BITS, const int G, const int SB, const int R, const float *x,
                                    const cf_qmat *w, int64_t r, float *o) {
    const int64_t K = w->cols, ng = K / G, rb = K * BITS / 8;
    const uint8_t *q = (const uint8_t *)w->q + r * rb;
    PF_SETUP(BITS == 4 ? 32 : 16)
    __m256 a0[8], a1[8];
    for (int m = 0; m < R; m++) a0[m] = a1[m] = _mm256_setzero_ps();
    for (int64_t g = 0; g < ng; g++) {
        __m256 s[8], b[8];
        for (int m = 0; m < R; m++) {
            s[m] = sb_bcast_avx2(w->scales, SB, (r + m) * ng + g);
            b[m] = sb_bcast_avx2(w->biases, SB, (r + m) * ng + g);
        }
        if (BITS == 4) {
            for (int u = 0; u < G; u += 32) {
                const int64_t c = g * G + u;
                __m256 xe[2], xo[2];
                PF_STEP();
                xpair_avx2(x + c, xe, xo);
                for (int m = 0; m < R; m++) {
                    __m256 wa[2], wb[2];
                    deq32_q4_avx2(q + m * rb + c / 2, s[m], b[m], wa, wb);
                    a0[m] = _mm256_fmadd_ps(xe[0], wa[0], a0[m]);
                    a1[m] = _mm256_fmadd_ps(xe[1], wa[1], a1[m]);
                    a0[m] = _mm256_fmadd_ps(xo[0], wb[0], a0[m]);
                    a1[m] = _mm256_fmadd_ps(xo[1], wb[1], a1[m]);
                }
            }
        } else {
            for (int u = 0; u < G; u += 16) {
                const int64_t c = g * G + u;
                const __m256 x0 = _mm256_loadu_ps(x + c), x1 = _mm256_loadu_ps(x + c + 8);
                PF_STEP();
                for (int m = 0; m < R; m++) {
                    __m256 wv[2];
                    deq16_q8_avx2(q + m * rb + c, s[m], b[m], wv);
                    a0[m] = _mm256_fmadd_ps(x0, wv[0], a0[m]);
                    a1[m] = _mm256_fmadd_ps(x1, wv[1], a1[m]);
                }
            }
        }
    }
    for (int m = 0; m < R; m++) {
        float t[16];
        _mm256_storeu_ps(t, a0[m]);
        _mm256_storeu_ps(t + 8, a1[m]);
        o[m] = tree16(t);
    }
}

DEF_GEMV_ALL(AVX2, avx2)
GEMV_TABLE(avx2)

/* rows r .. r + nr of the block (the last one repeated up to T_BLOCK rows: their results are dropped),
 * columns k0 .. k0 + kl, dequantized into wt (row stride T_KB floats; 4 bits in pair order) */
AVX2 static INL void deq_tile_avx2(const int BITS, const cf_qmat *w, int64_t r, int nr, int64_t k0, int64_t kl,
                                   float *wt, int prefetch_next) {
    const int G = w->group;
    const int64_t ng = w->cols / G, rb = w->cols * BITS / 8;
    for (int m = 0; m < nr; m++) {
        const uint8_t *q = (const uint8_t *)w->q + (r + m) * rb;
        if (prefetch_next) /* the same columns of the next block's row: read one block from now */
            for (int64_t pb = 0; pb < kl * BITS / 8; pb += 64) _mm_prefetch((const char *)q + T_BLOCK * rb + k0 * BITS / 8 + pb, _MM_HINT_T0);
        float *wr = wt + m * T_KB;
        for (int64_t g = k0 / G; g < (k0 + kl) / G; g++) {
            const __m256 s = _mm256_set1_ps(sb_x86(w->scales, w->sb_dtype, (r + m) * ng + g));
            const __m256 b = _mm256_set1_ps(sb_x86(w->biases, w->sb_dtype, (r + m) * ng + g));
            for (int64_t c = g * G; c < (g + 1) * G; c += 32) {
                __m256 v[4];
                if (BITS == 4) deq32_q4_avx2(q + c / 2, s, b, v, v + 2);
                else deq16_q8_avx2(q + c, s, b, v), deq16_q8_avx2(q + c + 16, s, b, v + 2);
                for (int h = 0; h < 4; h++) _mm256_storeu_ps(wr + (c - k0) + 8 * h, v[h]);
            }
        }
    }
    for (int m = nr; m < T_BLOCK; m++) memcpy(wt + m * T_KB, wt + (nr - 1) * T_KB, (size_t)kl * sizeof(float));
}

/* MR = 2 weight rows (wt rows 0, 1) x NR rows of x, over kl columns, accumulators in acc
 * (entry (i, m) at acc + (i * T_BLOCK + m) * 16) */
AVX2 static INL void micro_avx2(const int NR, const float *x, int64_t xs, const float *wt, int64_t kl, float *acc) {
    __m256 a[2][2][2];
    for (int m = 0; m < 2; m++)
        for (int i = 0; i < NR; i++)
            for (int h = 0; h < 2; h++) a[m][i][h] = _mm256_loadu_ps(acc + (i * T_BLOCK + m) * 16 + 8 * h);
    for (int64_t c = 0; c < kl; c += 16) {
        __m256 xv[2][2];
        for (int i = 0; i < NR; i++)
            for (int h = 0; h < 2; h++) xv[i][h] = _mm256_loadu_ps(x + i * xs + c + 8 * h);
        for (int m = 0; m < 2; m++)
            for (int h = 0; h < 2; h++) {
                const __m256 wv = _mm256_loadu_ps(wt + m * T_KB + c + 8 * h);
                for (int i = 0; i < NR; i++) a[m][i][h] = _mm256_fmadd_ps(xv[i][h], wv, a[m][i][h]);
            }
    }
    for (int m = 0; m < 2; m++)
        for (int i = 0; i < NR; i++)
            for (int h = 0; h < 2; h++) _mm256_storeu_ps(acc + (i * T_BLOCK + m) * 16 + 8 * h, a[m][i][h]);
}

AVX2 static INL void tiled_avx2(const int BITS, const float *x, int64_t xs, int64_t n, const cf_qmat *w, int64_t r0,
                                int64_t r1, float *out, int64_t os) {
    float acc[T_PANEL * T_BLOCK * 16], wt[T_BLOCK * T_KB], xb[BITS == 4 ? T_PANEL * T_KB : 1];
    const int64_t K = w->cols;
    for (int64_t i0 = 0; i0 < n; i0 += T_PANEL) {
        const int np = (int)min64(T_PANEL, n - i0);
        const float *xp = x + i0 * xs;
        for (int64_t jb = r0; jb < r1; jb += T_BLOCK) {
            const int nr = (int)min64(T_BLOCK, r1 - jb);
            memset(acc, 0, sizeof(float) * (size_t)(np * T_BLOCK * 16));
            for (int64_t k0 = 0; k0 < K; k0 += T_KB) {
                const int64_t kl = min64(T_KB, K - k0);
                deq_tile_avx2(BITS, w, jb, nr, k0, kl, wt, jb + 2 * T_BLOCK <= w->rows);
                const float *xk = xp + k0;
                int64_t xks = xs;
                if (BITS == 4) { /* this step's columns of the panel in pair order */
                    for (int i = 0; i < np; i++)
                        for (int64_t c = 0; c < kl; c += 32) {
                            __m256 e[2], o[2];
                            xpair_avx2(xk + i * xs + c, e, o);
                            float *d = xb + i * T_KB + c;
                            _mm256_storeu_ps(d, e[0]), _mm256_storeu_ps(d + 8, e[1]);
                            _mm256_storeu_ps(d + 16, o[0]), _mm256_storeu_ps(d + 24, o[1]);
                        }
                    xk = xb, xks = T_KB;
                }
                for (int i = 0; i < np; i += 2)
                    for (int m = 0; m < nr; m += 2) {
                        float *a = acc + (i * T_BLOCK + m) * 16;
                        if (np - i >= 2) micro_avx2(2, xk + i * xks, xks, wt + m * T_KB, kl, a);
                        else micro_avx2(1, xk + i * xks, xks, wt + m * T_KB, kl, a);
                    }
            }
            for (int i = 0; i < np; i++)
                for (int m = 0; m < nr; m++) out[(i0 + i) * os + (jb - r0) + m] = tree16(acc + (i * T_BLOCK + m) * 16);
        }
    }
}

AVX2 static void tiled4_avx2(const float *x, int64_t xs, int64_t n, const cf_qmat *w, int64_t r0, int64_t r1,
                             float *out, int64_t os) {
    tiled_avx2(4, x, xs, n, w, r0, r1, out, os);
}

AVX2 static void tiled8_avx2(const float *x, int64_t xs, int64_t n, const cf_qmat *w, int64_t r0, int64_t r1,
                             float *out, int64_t os) {
    tiled_avx2(8, x, xs, n, w, r0, r1, out, os);
}

/* ---- AVX-512: one register per 16-lane accumulator ---- */

/* 4 bits: the table of a group, lane v = fma(scale, v, bias) */
AVX512 static INL __m512 table16(__m512 s, __m512 b) {
    const __m512 iota = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    return _mm512_fmadd_ps(s, iota, b);
}

/* sb_bcast_avx2 in 16 lanes */
AVX512 static INL __m512 sb_bcast_avx512(const void *p, const int t, int64_t i) {
    if (t == CF_BF16) {
        const uint16_t *h = p;
        int32_t wd;
        if (i == 0) return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_set1_epi32(h[0]), 16));
        memcpy(&wd, h + i - 1, sizeof wd);
        return _mm512_castsi512_ps(_mm512_and_si512(_mm512_set1_epi32(wd), _mm512_set1_epi32((int32_t)0xFFFF0000u)));
    }
    return _mm512_set1_ps(sb_x86(p, t, i));
}

/* 4 bits: the 32 weights of 16 packed bytes at p in pair order, looked up in the group's table (vpermps
 * reads the low 4 bits of each index): *a the low nibbles (columns 0, 2, .., 30), *b the high ones */
AVX512 static INL void deq32_q4_avx512(const uint8_t *p, __m512 tbl, __m512 *a, __m512 *b) {
    const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p));
    *a = _mm512_permutexvar_ps(v, tbl);
    *b = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), tbl);
}

/* 8 bits: the 16 weights of 16 bytes at p */
AVX512 static INL __m512 deq16_q8_avx512(const uint8_t *p, __m512 s, __m512 b) {
    return _mm512_fmadd_ps(s, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p))), b);
}

/* 32 values of x in pair order: *e the even columns, *o the odd ones */
AVX512 static INL void xpair_avx512(const float *x, __m512 *e, __m512 *o) {
    const __m512 v0 = _mm512_loadu_ps(x), v1 = _mm512_loadu_ps(x + 16);
    *e = _mm512_permutex2var_ps(v0, _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30), v1);
    *o = _mm512_permutex2var_ps(v0, _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31), v1);
}

/* decode and small batches: R weight rows (r + m) against NX rows of x (x + i * xs), out o[i * os + m]; every
 * dequantized weight vector feeds the NX rows (R x NX independent fma chains) */
AVX512 static INL void gemv_rows_x_avx512(const int BITS, const int G, const int SB, const int R, const int NX,
                                          const float *x, int64_t xs, const cf_qmat *w, int64_t r, float *o, int64_t os) {
    const int64_t K = w->cols, ng = K / G, rb = K * BITS / 8;
    const uint8_t *q = (const uint8_t *)w->q + r * rb;
    PF_SETUP(BITS == 4 ? 32 : 16)
    __m512 a[16];
    for (int m = 0; m < R * NX; m++) a[m] = _mm512_setzero_ps();
    for (int64_t g = 0; g < ng; g++) {
        if (BITS == 4) {
            __m512 tbl[8];
            for (int m = 0; m < R; m++)
                tbl[m] = table16(sb_bcast_avx512(w->scales, SB, (r + m) * ng + g), sb_bcast_avx512(w->biases, SB, (r + m) * ng + g));
            for (int u = 0; u < G; u += 32) {
                const int64_t c = g * G + u;
                __m512 xe[4], xo[4];
                PF_STEP();
                for (int i = 0; i < NX; i++) xpair_avx512(x + i * xs + c, &xe[i], &xo[i]);
                for (int m = 0; m < R; m++) {
                    __m512 wa, wb;
                    deq32_q4_avx512(q + m * rb + c / 2, tbl[m], &wa, &wb);
                    for (int i = 0; i < NX; i++) {
                        a[m * NX + i] = _mm512_fmadd_ps(xe[i], wa, a[m * NX + i]);
                        a[m * NX + i] = _mm512_fmadd_ps(xo[i], wb, a[m * NX + i]);
                    }
                }
            }
        } else {
            __m512 s[8], b[8];
            for (int m = 0; m < R; m++) {
                s[m] = sb_bcast_avx512(w->scales, SB, (r + m) * ng + g);
                b[m] = sb_bcast_avx512(w->biases, SB, (r + m) * ng + g);
            }
            for (int u = 0; u < G; u += 16) {
                const int64_t c = g * G + u;
                __m512 xv[4];
                for (int i = 0; i < NX; i++) xv[i] = _mm512_loadu_ps(x + i * xs + c);
                PF_STEP();
                for (int m = 0; m < R; m++) {
                    const __m512 wv = deq16_q8_avx512(q + m * rb + c, s[m], b[m]);
                    for (int i = 0; i < NX; i++) a[m * NX + i] = _mm512_fmadd_ps(xv[i], wv, a[m * NX + i]);
                }
            }
        }
    }
    for (int m = 0; m < R; m++)
        for (int i = 0; i < NX; i++) {
            float t[16];
            _mm512_storeu_ps(t, a[m * NX + i]);
            o[i * os + m] = tree16(t);
        }
}

AVX512 static INL void gemv_rows_avx512(const int BITS, const int G, const int SB, const int R, const float *x,
                                        const cf_qmat *w, int64_t r, float *o) {
    gemv_rows_x_avx512(BITS, G, SB, R, 1, x, 0, w, r, o, 0);
}

/* 2 to SMALL_N(bits) - 1 rows of x: the decode kernel on up to 4 rows at a time (the weights dequantized in
 * registers once per 4 rows). Measured against the tiled path (2 threads, Llama-3.2-1B shapes): 4 bits,
 * 204 / 110 GFLOP/s at 8 rows, 240 / 178 at 16, 233 / 193 at 32, 213 / 202 at 48, even at 64 and 128;
 * 8 bits, 226 / 169 at 8, even at 16, 242 / 269 at 32. */
#define SMALL_N(bits) ((bits) == 4 ? 64 : 16)
AVX512 static INL void small_avx512(const int BITS, const float *x, int64_t xs, int64_t n, const cf_qmat *w, int64_t r0,
                                    int64_t r1, float *out, int64_t os) {
    const int G = w->group, SB = w->sb_dtype;
    for (int64_t i0 = 0; i0 < n; i0 += 4) {
        const int nx = (int)min64(4, n - i0);
        const float *xi = x + i0 * xs;
        float *oi = out + i0 * os;
        int64_t r = r0;
#define CF_Q_SMALL(R, NX) gemv_rows_x_avx512(BITS, G, SB, R, NX, xi, xs, w, r, oi + (r - r0), os)
        for (; r + 4 <= r1; r += 4) {
            if (nx == 4) CF_Q_SMALL(4, 4);
            else if (nx == 3) CF_Q_SMALL(4, 3);
            else if (nx == 2) CF_Q_SMALL(4, 2);
            else CF_Q_SMALL(4, 1);
        }
        for (; r < r1; r++) {
            if (nx == 4) CF_Q_SMALL(1, 4);
            else if (nx == 3) CF_Q_SMALL(1, 3);
            else if (nx == 2) CF_Q_SMALL(1, 2);
            else CF_Q_SMALL(1, 1);
        }
#undef CF_Q_SMALL
    }
}

AVX512 static void small4_avx512(const float *x, int64_t xs, int64_t n, const cf_qmat *w, int64_t r0, int64_t r1,
                                 float *out, int64_t os) {
    small_avx512(4, x, xs, n, w, r0, r1, out, os);
}

AVX512 static void small8_avx512(const float *x, int64_t xs, int64_t n, const cf_qmat *w, int64_t r0, int64_t r1,
                                 float *out, int64_t os) {
    small_avx512(8, x, xs, n, w, r0, r1, out, os);
}

DEF_GEMV_ALL(AVX512, avx512)
GEMV_TABLE(avx512)

/* AVX-512 prefill geometry: rows of x per panel (at most), weight rows per block: 64 for 4 bits, whose step
 * puts the panel's x in pair order once per block (measured: 8% faster than blocks of 32, 13% than 16), 16
 * for 8 bits. Scratch (floats): accumulators, the dequantized tile, 4 bits' x in pair order. */
#define Q_PANEL 48
#define Q_BLOCK(BITS) ((BITS) == 4 ? 64 : 16)
#define Q_SCRATCH(BITS) (((Q_PANEL + CF_T512_NR) * 16 + T_KB) * (size_t)Q_BLOCK(BITS) + ((BITS) == 4 ? Q_PANEL * T_KB : 0))

/* rows r .. r + nr of the block (the last one repeated up to a multiple of 4 rows: their results are dropped),
 * columns k0 .. k0 + kl, dequantized into wt (row stride T_KB floats; 4 bits in pair order); the same columns
 * of the next block's rows prefetched (prefetch_next) */
AVX512 static INL void deq_tile_avx512(const int BITS, const cf_qmat *w, int64_t r, int nr, int64_t k0, int64_t kl,
                                       float *wt, int prefetch_next) {
    const int G = w->group;
    const int64_t ng = w->cols / G, rb = w->cols * BITS / 8;
    for (int m = 0; m < nr; m++) {
        const uint8_t *q = (const uint8_t *)w->q + (r + m) * rb;
        if (prefetch_next)
            for (int64_t pb = 0; pb < kl * BITS / 8; pb += 64) _mm_prefetch((const char *)q + Q_BLOCK(BITS) * rb + k0 * BITS / 8 + pb, _MM_HINT_T0);
        float *wr = wt + m * T_KB;
        for (int64_t g = k0 / G; g < (k0 + kl) / G; g++) {
            if (BITS == 4) {
                const __m512 tbl = table16(sb_bcast_avx512(w->scales, w->sb_dtype, (r + m) * ng + g),
                                           sb_bcast_avx512(w->biases, w->sb_dtype, (r + m) * ng + g));
                for (int64_t c = g * G; c < (g + 1) * G; c += 32) {
                    __m512 wa, wb;
                    deq32_q4_avx512(q + c / 2, tbl, &wa, &wb);
                    _mm512_storeu_ps(wr + (c - k0), wa);
                    _mm512_storeu_ps(wr + (c - k0) + 16, wb);
                }
            } else {
                const __m512 sv = sb_bcast_avx512(w->scales, w->sb_dtype, (r + m) * ng + g),
                             bv = sb_bcast_avx512(w->biases, w->sb_dtype, (r + m) * ng + g);
                for (int64_t c = g * G; c < (g + 1) * G; c += 16) _mm512_storeu_ps(wr + (c - k0), deq16_q8_avx512(q + c, sv, bv));
            }
        }
    }
    for (int m = nr; m < ((nr + 3) & ~3); m++) memcpy(wt + m * T_KB, wt + (nr - 1) * T_KB, (size_t)kl * sizeof(float));
}

/* Per panel of rows of x and block of weight rows: each T_KB-column step of the block dequantized once
 * (deq_tile_avx512) and swept by cf_t512_sweep (4 weight rows x 6 rows of x), the accumulators kept between
 * the steps (cf_t512_acc_at's order), the last step writing the sums. Panels split n evenly. */
AVX512 static INL void tiled_avx512(const int BITS, const float *x, int64_t xs, int64_t n, const cf_qmat *w, int64_t r0,
                                    int64_t r1, float *out, int64_t os, float *scratch) {
    const int B = Q_BLOCK(BITS);
    float *acc = scratch, *wt = acc + (Q_PANEL + CF_T512_NR) * 16 * B, *xb = wt + B * T_KB;
    const int64_t K = w->cols, panels = (n + Q_PANEL - 1) / Q_PANEL;
    int64_t P = (n + panels - 1) / panels;
    P = min64(Q_PANEL, (P + CF_T512_NR - 1) / CF_T512_NR * CF_T512_NR);
    for (int64_t i0 = 0; i0 < n; i0 += P) {
        const int np = (int)min64(P, n - i0);
        const float *xp = x + i0 * xs;
        for (int64_t jb = r0; jb < r1; jb += B) {
            const int nr = (int)min64(B, r1 - jb);
            for (int64_t k0 = 0; k0 < K; k0 += T_KB) {
                const int64_t kl = min64(T_KB, K - k0);
                deq_tile_avx512(BITS, w, jb, nr, k0, kl, wt, jb + 2 * B <= w->rows);
                const float *xk = xp + k0;
                int64_t xks = xs;
                if (BITS == 4) { /* this step's columns of the panel in pair order */
                    for (int i = 0; i < np; i++)
                        for (int64_t c = 0; c < kl; c += 32) {
                            __m512 e, o;
                            xpair_avx512(xk + i * xs + c, &e, &o);
                            _mm512_storeu_ps(xb + i * T_KB + c, e);
                            _mm512_storeu_ps(xb + i * T_KB + c + 16, o);
                        }
                    xk = xb, xks = T_KB;
                }
                cf_t512_sweep(xk, xks, np, wt, T_KB, nr, B, kl, acc, k0 == 0, k0 + T_KB >= K ? out + i0 * os + (jb - r0) : NULL, os);
            }
        }
    }
}

/* The tiled path with its scratch (328 KiB for 4 bits, 70 KiB for 8: from the heap, not a thread's stack;
 * aligned to cache lines, as every vector access into it is); where that cannot be had, the small-batch
 * kernel (the same values, slower). */
AVX512 static void tiled4_avx512(const float *x, int64_t xs, int64_t n, const cf_qmat *w, int64_t r0, int64_t r1,
                                 float *out, int64_t os) {
    float *scratch = aligned_alloc(64, sizeof(float) * Q_SCRATCH(4));
    if (scratch) tiled_avx512(4, x, xs, n, w, r0, r1, out, os, scratch);
    else small_avx512(4, x, xs, n, w, r0, r1, out, os);
    free(scratch);
}

AVX512 static void tiled8_avx512(const float *x, int64_t xs, int64_t n, const cf_qmat *w, int64_t r0, int64_t r1,
                                 float *out, int64_t os) {
    float *scratch = aligned_alloc(64, sizeof(float) * Q_SCRATCH(8));
    if (scratch) tiled_avx512(8, x, xs, n, w, r0, r1, out, os, scratch);
    else small_avx512(8, x, xs, n, w, r0, r1, out, os);
    free(scratch);
}

#endif

int cf_cpu_qgemm_isa(cf_cpu_isa_level isa, const float *x, int64_t xs, int64_t n, const cf_qmat *w, int64_t r0,
                     int64_t r1, float *out, int64_t os) {
    if (!cf_cpu_isa_available(isa)) return 0;
    if (n <= 0 || r1 <= r0) return 1;
    const int bits_ok = w->bits == 2 || w->bits == 3 || w->bits == 4 || w->bits == 5 || w->bits == 6 || w->bits == 8;
    const int group_ok = (w->group == 32 || w->group == 64 || w->group == 128) && w->cols % w->group == 0;
    const int sb_ok = w->sb_dtype == CF_BF16 || w->sb_dtype == CF_F16 || w->sb_dtype == CF_F32;
    if (!bits_ok || !group_ok || !sb_ok || r0 < 0 || r1 > w->rows) { /* the loader's checks were skipped: NaN, not garbage */
        for (int64_t i = 0; i < n; i++)
            for (int64_t r = r0; r < r1; r++) out[i * os + (r - r0)] = NAN;
        return 1;
    }
    const int fast = w->bits == 4 || w->bits == 8;
    switch (isa) {
#ifdef CF_X86
    case CF_ISA_AVX512:
        if (!fast) generic_avx512(x, xs, n, w, r0, r1, out, os);
        else if (n == 1) gemv_pick(gemv_tab_avx512, w)(x, w, r0, r1, out);
        else if (n < SMALL_N(w->bits)) (w->bits == 4 ? small4_avx512 : small8_avx512)(x, xs, n, w, r0, r1, out, os);
        else (w->bits == 4 ? tiled4_avx512 : tiled8_avx512)(x, xs, n, w, r0, r1, out, os);
        return 1;
    case CF_ISA_AVX2:
        if (!fast) generic_avx2(x, xs, n, w, r0, r1, out, os);
        else if (n == 1) gemv_pick(gemv_tab_avx2, w)(x, w, r0, r1, out);
        else (w->bits == 4 ? tiled4_avx2 : tiled8_avx2)(x, xs, n, w, r0, r1, out, os);
        return 1;
#endif
    default: generic_c(x, xs, n, w, r0, r1, out, os); return 1;
    }
}

void cf_cpu_qgemm(const float *x, int64_t xs, int64_t n, const cf_qmat *w, int64_t r0, int64_t r1, float *out,
                  int64_t os) {
    const cf_cpu_isa_level best = cf_cpu_isa_available(CF_ISA_AVX512) ? CF_ISA_AVX512
                                : cf_cpu_isa_available(CF_ISA_AVX2)   ? CF_ISA_AVX2
                                                                      : CF_ISA_C;
    cf_cpu_qgemm_isa(best, x, xs, n, w, r0, r1, out, os);
}
