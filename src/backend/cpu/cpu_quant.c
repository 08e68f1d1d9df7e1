/* cpu_quant.c: out = x . w^T for f32 activation rows against MLX affine-quantized weight rows (cf_qmat, read
 * in place); owns no memory beyond a call (a 4- or 8-bit call's scratch, from the heap: the rows of x in
 * int8 and one block of weight rows regrouped or unpacked; the other widths' is on the stack).
 *
 * 4 and 8 bits multiply in int8 (cpu_quant.h gives the definition): each row of x is quantized per block of
 * 32 columns, the dot product of a block's int8 values with the weights' q values is an exact integer, and
 * each output is one f32 fma chain over the blocks in order, then over the groups' biases. An integer sum
 * does not depend on the order of its terms, so every path below gives the same bits:
 *  - portable C: the definition written out, per weight row and row of x;
 *  - AVX2: each block's integer dot by vpmaddubsw + vpmaddwd (8 bits: q widened to 16 bits, or split in two
 *    parts, or offset by 128: a u8 x s8 pair of 255 * 127 * 2 would saturate 16 bits); one row of x: with the
 *    packed copy of cf_cpu_qpack, 16 weight rows as lanes of two vectors, one stream, no reductions
 *    (decode_packed_avx2); without it, 8 weight rows read in place, their dots reduced to one vector per
 *    block (lane = weight row); more rows: the tile below in 8 lanes;
 *  - AVX-512 with VNNI, one row of x (decode): 8 weight rows read side by side, 128 columns a step, one
 *    vpdpbusd per weight row and 64 columns (4 bits unpacked in registers: a block's 16 packed bytes give its
 *    low nibbles, then its high ones, and x is stored in that order: even columns, then odd), the lane sums
 *    reduced to one vector per block pair (lane = weight row), then the f32 steps of the 8 rows at once; with
 *    the packed copy of cf_cpu_qpack (the backend's, where VNNI runs): one vpdpbusd per packed vector and 4
 *    values of x broadcast, 16 weight rows in the lanes, no reductions (decode_packed);
 *  - AVX-512 with VNNI, 2 or more rows of x (prefill, batches): a block of 16 weight rows is unpacked once
 *    per call (from the packed copy when there is one) into a tile of 64-byte vectors, each 4 columns of the
 *    16 rows (lane = weight row), and swept
 *    by up to 8 rows of x at a time: one vpdpbusd per 4 columns, 16 rows and row of x (4 bytes of x
 *    broadcast), the f32 step once per block.
 * Scales and biases are widened to f32 for a block of weight rows first (transposed for the AVX-512 paths).
 * The AVX-512 path needs AVX512-VNNI; a CPU with AVX-512 but without it runs the AVX2 path (the same bits).
 *
 * 2, 3, 5 and 6 bits keep f32 activations (portable C, compiled plain and with the AVX2 and AVX-512 target
 * attributes): each group of a row unpacked and dequantized once for a panel of up to 16 rows of x,
 * w = fmaf(scale, q, bias), a 16-lane fma accumulation (lane l takes columns l, l + 16, ...) and one tree. */
#include "backend/cpu/cpu_quant.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CF_X86 1
#endif

#define INL inline __attribute__((always_inline))
#define QB 32 /* columns per block of x */

static INL int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

static INL float sb_c(const void *p, int t, int64_t i) {
    switch (t) {
    case CF_BF16: return cf_bf16_to_f32(((const uint16_t *)p)[i]);
    case CF_F16: return cf_f16_to_f32(((const uint16_t *)p)[i]);
    default: return ((const float *)p)[i];
    }
}

/* ---- 2, 3, 5, 6 bits: f32 activations, portable C ---- */

/* the sum of the 16 lanes: distance 8, then 4, 2, 1 */
static INL float tree16(const float *a) {
    float t[16];
    memcpy(t, a, sizeof t);
    for (int h = 8; h >= 1; h /= 2)
        for (int l = 0; l < h; l++) t[l] = t[l] + t[l + h];
    return t[0];
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

#define C_PANEL 16

static INL void generic(const float *x, int64_t xs, int64_t n, const cf_qmat *w, int64_t r0, int64_t r1, float *out,
                        int64_t os) {
    const int G = w->group, bits = w->bits;
    const int64_t K = w->cols, ng = K / G, wpr = K * bits / 32;
    float acc[C_PANEL][16], wg[128];
    for (int64_t i0 = 0; i0 < n; i0 += C_PANEL) {
        const int np = (int)min64(C_PANEL, n - i0);
        for (int64_t r = r0; r < r1; r++) {
            const uint32_t *qr = w->q + r * wpr;
            memset(acc, 0, sizeof acc);
            for (int64_t g = 0; g < ng; g++) {
                const float s = sb_c(w->scales, w->sb_dtype, r * ng + g), b = sb_c(w->biases, w->sb_dtype, r * ng + g);
                for (int j = 0; j < G; j++) wg[j] = fmaf(s, (float)qval(qr, bits, g * G + j), b);
                for (int i = 0; i < np; i++) {
                    const float *xr = x + (i0 + i) * xs + g * G;
                    float *a = acc[i];
                    for (int j = 0; j < G; j += 16)
                        for (int l = 0; l < 16; l++) a[l] = fmaf(xr[j + l], wg[j + l], a[l]);
                }
            }
            for (int i = 0; i < np; i++) out[(i0 + i) * os + (r - r0)] = tree16(acc[i]);
        }
    }
}

static void generic_c(const float *x, int64_t xs, int64_t n, const cf_qmat *w, int64_t r0, int64_t r1, float *out,
                      int64_t os) {
    generic(x, xs, n, w, r0, r1, out, os);
}

/* ---- 4 and 8 bits: int8 activations ---- */

/* ---- the packed layout of cf_cpu_qpack (cpu_quant.h) ---- */

static INL int64_t sb_size(cf_dtype t) { return t == CF_F32 ? 4 : 2; }
static INL int64_t sb_per_line(const cf_qmat *w) { return 64 / (16 * sb_size(w->sb_dtype)); }  /* groups */
static INL int64_t sb_lines(const cf_qmat *w) { return (w->cols / w->group + sb_per_line(w) - 1) / sb_per_line(w); }

int64_t cf_cpu_qpack_tile_bytes(const cf_qmat *w) { return 2 * 64 * sb_lines(w) + 2 * w->cols * w->bits; }

uint8_t *cf_cpu_qpack(const cf_qmat *w) {
    if ((w->bits != 4 && w->bits != 8) || w->rows <= 0 || w->cols <= 0 || w->cols % w->group || w->group % QB) return NULL;
    const int64_t tb = cf_cpu_qpack_tile_bytes(w), nt = (w->rows + 15) / 16, ng = w->cols / w->group, gl = sb_per_line(w);
    const int64_t es = sb_size(w->sb_dtype), wpr = w->cols * w->bits / 32, bpg = w->group / QB;
    uint8_t *p = aligned_alloc(64, (size_t)(nt * tb));
    if (!p) return NULL;
    for (int64_t t = 0; t < nt; t++) {
        uint8_t *o = p + t * tb;
        int64_t r[16];
        for (int m = 0; m < 16; m++) r[m] = 16 * t + m < w->rows ? 16 * t + m : w->rows - 1;
        for (int pass = 0; pass < 2; pass++)  /* scales with their blocks, then the biases */
            for (int64_t g0 = 0; g0 < ng; g0 += gl) {
                const char *sb = pass ? w->biases : w->scales;
                memset(o, 0, 64);
                for (int64_t j = 0; j < gl && g0 + j < ng; j++)
                    for (int m = 0; m < 16; m++) memcpy(o + (j * 16 + m) * es, sb + (r[m] * ng + g0 + j) * es, (size_t)es);
                o += 64;
                if (pass) continue;
                for (int64_t b = g0 * bpg; b < (g0 + gl < ng ? g0 + gl : ng) * bpg; b++)
                    for (int k = 0; k < w->bits; k++, o += 64)
                        for (int m = 0; m < 16; m++) memcpy(o + 4 * m, w->q + r[m] * wpr + b * w->bits + k, 4);
            }
    }
    return p;
}

/* A call's scratch (one allocation): the rows of x in int8 as every path reads them, and room for a block of
 * weight rows (wrow: one row unpacked, C; tile: 16 rows regrouped, AVX-512, or 8, AVX2; sf, bf: scales and
 * biases widened to f32). Rows of x are padded to an even number of blocks (nbp) and groups to a multiple of
 * 16 (ngp); the padding holds zeros. */
typedef struct qscratch {
    int64_t nb, nbp, ng, ngp;
    int8_t *xq;     /* row i at xq + i * nbp * QB; each block's 32 values in kernel order (kpos) */
    float *d;       /* row i at d + i * nbp: each block's step */
    float *xs;      /* row i at xs + i * ngp: per group, sum over its blocks of d * (sum of the block's values) */
    int32_t *sums;  /* row i at sums + i * nbp: the sum of each block's values */
    uint8_t *wrow;  /* nbp * QB bytes */
    uint8_t *tile;  /* nbp / 2 * 16 vectors of 64 bytes */
    float *sf, *bf; /* 16 * ngp each: one row (C), or transposed: sf[g * 16 + m] (AVX-512), sf[g * 8 + m] (AVX2) */
    float *rowf;    /* 2 * 16 * ngp: the rows' scales then biases in f32, row-major, before the transpose */
    void *mem;
} qscratch;

static INL size_t up64(size_t v) { return (v + 63) & ~(size_t)63; }

static int qscratch_alloc(qscratch *s, const cf_qmat *w, int64_t n) {
    s->nb = w->cols / QB, s->nbp = (s->nb + 1) & ~(int64_t)1;
    s->ng = w->cols / w->group, s->ngp = (s->ng + 15) & ~(int64_t)15;
    const size_t nn = (size_t)n, nbp = (size_t)s->nbp, ngp = (size_t)s->ngp;
    const size_t sz[] = {nn * nbp * QB, nn * nbp * 4, nn * ngp * 4, nn * nbp * 4, nbp * QB, nbp / 2 * 16 * 64,
                         16 * ngp * 4, 16 * ngp * 4, 2 * 16 * ngp * 4};
    size_t total = 0;
    for (size_t i = 0; i < sizeof sz / sizeof sz[0]; i++) total += up64(sz[i]);
    char *p = s->mem = aligned_alloc(64, total);
    if (!p) return 0;
    void **dst[] = {(void **)&s->xq, (void **)&s->d, (void **)&s->xs, (void **)&s->sums, (void **)&s->wrow,
                    (void **)&s->tile, (void **)&s->sf, (void **)&s->bf, (void **)&s->rowf};
    for (size_t i = 0; i < sizeof sz / sizeof sz[0]; i++) *dst[i] = p, p += up64(sz[i]);
    return 1;
}

/* where column j (0..31) of a block sits in kernel order: 4 bits, the even columns then the odd ones (the
 * order a block's packed bytes unpack in: low nibbles, then high), 8 bits in place */
static INL int kpos(int bits, int j) { return bits == 4 ? (j & 1) * 16 + (j >> 1) : j; }

/* Block b of a row of x: amax = max |x|; a NaN or infinity makes d NaN (and the values 0), so the outputs it
 * touches are NaN; else d = amax / 127, and each value q = rint(x * (127 / amax)) (0 when amax is 0), in
 * [-127, 127]. */
static INL int quant_block_bad(float amax, int nan, int8_t *q, float *d, int32_t *sum) {
    if (!nan && amax <= FLT_MAX) return 0;
    memset(q, 0, QB);
    *d = NAN, *sum = 0;
    return 1;
}

static INL void quant_row_c(const float *x, const qscratch *s, int bits, int8_t *q, float *d, int32_t *sums) {
    for (int64_t b = 0; b < s->nb; b++) {
        const float *xb = x + b * QB;
        float amax = 0;
        int nan = 0;
        for (int j = 0; j < QB; j++) {
            const float a = fabsf(xb[j]);
            nan |= a != a;
            amax = a > amax ? a : amax;
        }
        if (quant_block_bad(amax, nan, q + b * QB, d + b, sums + b)) continue;
        const float id = amax > 0 ? 127.0f / amax : 0.0f;
        int32_t sum = 0;
        d[b] = amax / 127.0f;
        for (int j = 0; j < QB; j++) {
            const int v = (int)rintf(xb[j] * id);
            q[b * QB + kpos(bits, j)] = (int8_t)v;
            sum += v;
        }
        sums[b] = sum;
    }
}

/* the padding block and groups of row i, and its group sums: xs[g] = fma chain over g's blocks in order
 * of d * (float)sum */
static INL void quant_row_finish(const qscratch *s, int64_t i, int G) {
    int8_t *q = s->xq + i * s->nbp * QB;
    float *d = s->d + i * s->nbp, *xs = s->xs + i * s->ngp;
    const int32_t *sums = s->sums + i * s->nbp;
    if (s->nbp > s->nb) memset(q + s->nb * QB, 0, QB), d[s->nb] = 0;
    const int bpg = G / QB;
    for (int64_t g = 0; g < s->ng; g++) {
        float v = 0;
        for (int t = 0; t < bpg; t++) v = fmaf(d[g * bpg + t], (float)sums[g * bpg + t], v);
        xs[g] = v;
    }
    for (int64_t g = s->ng; g < s->ngp; g++) xs[g] = 0;
}

/* weight row r's scales and biases widened to f32 */
static INL void row_sb_c(const cf_qmat *w, int64_t r, int64_t ng, float *sf, float *bf) {
    for (int64_t g = 0; g < ng; g++) sf[g] = sb_c(w->scales, w->sb_dtype, r * ng + g), bf[g] = sb_c(w->biases, w->sb_dtype, r * ng + g);
}

/* weight row r's q values, each block's 32 in kernel order, one byte each */
static INL void row_unpack_c(const int BITS, const cf_qmat *w, int64_t r, int64_t nb, uint8_t *out) {
    const uint8_t *p = (const uint8_t *)w->q + r * (w->cols * BITS / 8);
    for (int64_t b = 0; b < nb; b++)
        for (int j = 0; j < QB; j++)
            out[b * QB + kpos(BITS, j)] = BITS == 8 ? p[b * QB + j] : (uint8_t)(p[b * 16 + j / 2] >> 4 * (j & 1) & 15);
}

static INL int32_t dot32_c(const uint8_t *w, const int8_t *x) {
    int32_t s = 0;
    for (int j = 0; j < QB; j++) s += (int32_t)w[j] * x[j];
    return s;
}

/* The definition, for weight rows r0..r1 and the n quantized rows of x: per weight row (unpacked once), per
 * row of x, acc = fmaf((float)P_b, scale_g * d_b, acc) over the blocks, then fmaf(bias_g, xs_g, acc) over
 * the groups. */
static void rows_c(const int BITS, const qscratch *s, int64_t n, const cf_qmat *w, int64_t r0, int64_t r1, float *out,
                   int64_t os) {
    const int bpg = w->group / QB;
    for (int64_t r = r0; r < r1; r++) {
        row_sb_c(w, r, s->ng, s->sf, s->bf);
        row_unpack_c(BITS, w, r, s->nb, s->wrow);
        for (int64_t i = 0; i < n; i++) {
            const int8_t *xq = s->xq + i * s->nbp * QB;
            const float *d = s->d + i * s->nbp, *xs = s->xs + i * s->ngp;
            float acc = 0;
            for (int64_t b = 0; b < s->nb; b++) acc = fmaf((float)dot32_c(s->wrow + b * QB, xq + b * QB), s->sf[b / bpg] * d[b], acc);
            for (int64_t g = 0; g < s->ng; g++) acc = fmaf(s->bf[g], xs[g], acc);
            out[i * os + (r - r0)] = acc;
        }
    }
}

static INL void quant_rows_c(const float *x, int64_t xs, int64_t n, const qscratch *s, int bits, int G) {
    for (int64_t i = 0; i < n; i++) {
        quant_row_c(x + i * xs, s, bits, s->xq + i * s->nbp * QB, s->d + i * s->nbp, s->sums + i * s->nbp);
        quant_row_finish(s, i, G);
    }
}

#ifdef CF_X86

#define AVX2 __attribute__((target("avx2,fma,f16c")))
#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))
#define AVX512V __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")))

AVX2 static void generic_avx2(const float *x, int64_t xs, int64_t n, const cf_qmat *w, int64_t r0, int64_t r1,
                              float *out, int64_t os) {
    generic(x, xs, n, w, r0, r1, out, os);
}

AVX512 static void generic_avx512(const float *x, int64_t xs, int64_t n, const cf_qmat *w, int64_t r0, int64_t r1,
                                  float *out, int64_t os) {
    generic(x, xs, n, w, r0, r1, out, os);
}

/* ---- AVX2 ---- */

AVX2 static void quant_rows_avx2(const float *x, int64_t xs, int64_t n, const qscratch *s, int bits, int G) {
    quant_rows_c(x, xs, n, s, bits, G);
}

/* a block's integer dot in 8 lanes (their sum is the dot): 32 4-bit q values (bytes, kernel order) against
 * 32 int8 values of x */
AVX2 static INL __m256i dot4_avx2(__m256i wv, const int8_t *xb) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(wv, _mm256_loadu_si256((const __m256i *)xb)), _mm256_set1_epi16(1));
}

/* 8 bits in the |q'| form (q' = q ^ 0x80, signed): per 32-bit lane the sum of 4 products q' * x, as vpmaddubsw of
 * |q'| (aq) against x signed by q' */
AVX2 static INL __m256i qdot8_avx2(__m256i aq, __m256i q, __m256i xv) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(aq, _mm256_sign_epi8(xv, q)), _mm256_set1_epi16(1));
}

/* the 8 sums of v[0..8) (8 int32 lanes each) in one vector, lane m = sum of v[m] */
AVX2 static INL __m256i red8_avx2(const __m256i *v) {
    const __m256i q0 = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
    const __m256i q1 = _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
    return _mm256_add_epi32(_mm256_permute2x128_si256(q0, q1, 0x20), _mm256_permute2x128_si256(q0, q1, 0x31));
}

/* the q values of block b of a weight row (packed bytes at p), 32 bytes in kernel order */
AVX2 static INL __m256i wblock_avx2(const int BITS, const uint8_t *p, int64_t b) {
    if (BITS == 8) return _mm256_loadu_si256((const __m256i *)(p + b * QB));
    const __m128i pk = _mm_loadu_si128((const __m128i *)(p + b * 16)), m4 = _mm_set1_epi8(15);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(pk, 4), m4), _mm_and_si128(pk, m4));
}

/* r[0..8) -> c[0..8): lane m of c[t] = lane t of r[m] (32-bit elements) */
AVX2 static INL void tr8(const __m256i *r, __m256i *c) {
    __m256i a[8], b[8];
    for (int j = 0; j < 4; j++) {
        a[2 * j] = _mm256_unpacklo_epi32(r[2 * j], r[2 * j + 1]);
        a[2 * j + 1] = _mm256_unpackhi_epi32(r[2 * j], r[2 * j + 1]);
    }
    /* b[4j + e], 128-bit lane L: rows 4j..4j+3 at column 4L + e */
    for (int j = 0; j < 2; j++) {
        b[4 * j] = _mm256_unpacklo_epi64(a[4 * j], a[4 * j + 2]);
        b[4 * j + 1] = _mm256_unpackhi_epi64(a[4 * j], a[4 * j + 2]);
        b[4 * j + 2] = _mm256_unpacklo_epi64(a[4 * j + 1], a[4 * j + 3]);
        b[4 * j + 3] = _mm256_unpackhi_epi64(a[4 * j + 1], a[4 * j + 3]);
    }
    for (int e = 0; e < 4; e++) {
        c[e] = _mm256_permute2x128_si256(b[e], b[4 + e], 0x20);
        c[4 + e] = _mm256_permute2x128_si256(b[e], b[4 + e], 0x31);
    }
}

/* 8 scales (or biases) from element i of p, widened to f32 */
AVX2 static INL __m256i sb8v_avx2(const void *p, cf_dtype t, int64_t i) {
    if (t == CF_F32) return _mm256_loadu_si256((const __m256i *)((const float *)p + i));
    const __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)p + i));
    if (t == CF_F16) return _mm256_castps_si256(_mm256_cvtph_ps(h));
    return _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
}

/* weight rows r .. r + 8 (row r + nr - 1 repeated past nr): scales and biases in f32 as sf[g * 8 + m], 8
 * groups of the 8 rows at a time transposed in registers */
AVX2 static INL void sb8_avx2(const qscratch *s, const cf_qmat *w, int64_t r, int nr) {
    int64_t at[8];
    for (int m = 0; m < 8; m++) at[m] = (r + (m < nr ? m : nr - 1)) * s->ng;
    int64_t g = 0;
    for (; g + 8 <= s->ng; g += 8) {
        __m256i v[8], t[8];
        for (int m = 0; m < 8; m++) v[m] = sb8v_avx2(w->scales, w->sb_dtype, at[m] + g);
        tr8(v, t);
        for (int e = 0; e < 8; e++) _mm256_store_si256((__m256i *)(s->sf + (g + e) * 8), t[e]);
        for (int m = 0; m < 8; m++) v[m] = sb8v_avx2(w->biases, w->sb_dtype, at[m] + g);
        tr8(v, t);
        for (int e = 0; e < 8; e++) _mm256_store_si256((__m256i *)(s->bf + (g + e) * 8), t[e]);
    }
    for (; g < s->ng; g++)
        for (int m = 0; m < 8; m++)
            s->sf[g * 8 + m] = sb_c(w->scales, w->sb_dtype, at[m] + g), s->bf[g * 8 + m] = sb_c(w->biases, w->sb_dtype, at[m] + g);
}

/* The f32 steps of 8 weight rows for block b (lane = weight row): acc = fma(P, scale * d_b, acc) */
AVX2 static INL __m256 step8_avx2(const qscratch *s, int G, int64_t b, __m256i p, __m256 acc) {
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_mul_ps(_mm256_load_ps(s->sf + (b * QB / G) * 8), _mm256_set1_ps(s->d[b])), acc);
}

/* then the biases' steps, and the nr outputs */
AVX2 static INL void finish8_avx2(const qscratch *s, __m256 acc, float *out, int nr) {
    for (int64_t g = 0; g < s->ng; g++) acc = _mm256_fmadd_ps(_mm256_load_ps(s->bf + g * 8), _mm256_set1_ps(s->xs[g]), acc);
    float t[8];
    _mm256_storeu_ps(t, acc);
    memcpy(out, t, sizeof(float) * (size_t)nr);
}

/* One row of x on AVX2, 8 weight rows at a time; per block the 8 rows' integer dots reduced to one vector
 * (lane = weight row), then the f32 step of the 8 rows. 4 bits: two blocks per 32-byte load of a row (its low
 * nibbles are the blocks' even columns, its high ones their odd columns, against x's two halves of each
 * block), one vpmaddwd per row and pair of blocks, and one reduction for both blocks. 8 bits: the q values
 * and x widened to 16 bits (a u8 x s8 pair of 255 * 127 * 2 would saturate vpmaddubsw), two vpmaddwd per row
 * and block. */
AVX2 static void decode4_avx2(const qscratch *s, const cf_qmat *w, int64_t r0, int64_t r1, float *out) {
    const int G = w->group;
    const int64_t rb = w->cols / 2;
    const __m256i m4 = _mm256_set1_epi8(15), ones = _mm256_set1_epi16(1);
    for (int64_t r = r0; r < r1; r += 8) {
        const int nr = (int)min64(8, r1 - r);
        const uint8_t *rp[8];
        for (int m = 0; m < 8; m++) rp[m] = (const uint8_t *)w->q + (r + (m < nr ? m : nr - 1)) * rb;
        sb8_avx2(s, w, r, nr);
        __m256 acc = _mm256_setzero_ps();
        int64_t b = 0;
        for (; b + 2 <= s->nb; b += 2) {
            const int8_t *xb = s->xq + b * QB;
            const __m256i xe = _mm256_set_m128i(_mm_loadu_si128((const __m128i *)(xb + QB)), _mm_loadu_si128((const __m128i *)xb));
            const __m256i xo = _mm256_set_m128i(_mm_loadu_si128((const __m128i *)(xb + QB + 16)), _mm_loadu_si128((const __m128i *)(xb + 16)));
            __m256i v[8];
            for (int m = 0; m < 8; m++) {
                const __m256i q = _mm256_loadu_si256((const __m256i *)(rp[m] + b * 16));
                const __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(_mm256_and_si256(q, m4), xe),
                                                   _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4), xo));
                v[m] = _mm256_madd_epi16(p, ones);
            }
            /* lanes 0-3 of v[m] hold block b's partial sums, 4-7 block b + 1's */
            const __m256i g0 = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
            const __m256i g1 = _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
            acc = step8_avx2(s, G, b, _mm256_permute2x128_si256(g0, g1, 0x20), acc);
            acc = step8_avx2(s, G, b + 1, _mm256_permute2x128_si256(g0, g1, 0x31), acc);
        }
        if (b < s->nb) {
            __m256i v[8];
            for (int m = 0; m < 8; m++) v[m] = dot4_avx2(wblock_avx2(4, rp[m], b), s->xq + b * QB);
            acc = step8_avx2(s, G, b, red8_avx2(v), acc);
        }
        finish8_avx2(s, acc, out + (r - r0), nr);
    }
}

AVX2 static void decode8_avx2(const qscratch *s, const cf_qmat *w, int64_t r0, int64_t r1, float *out) {
    const int G = w->group;
    const int64_t rb = w->cols;
    for (int64_t r = r0; r < r1; r += 8) {
        const int nr = (int)min64(8, r1 - r);
        const uint8_t *rp[8];
        for (int m = 0; m < 8; m++) rp[m] = (const uint8_t *)w->q + (r + (m < nr ? m : nr - 1)) * rb;
        sb8_avx2(s, w, r, nr);
        __m256 acc = _mm256_setzero_ps();
        for (int64_t b = 0; b < s->nb; b++) {
            const int8_t *xb = s->xq + b * QB;
            const __m256i x0 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)xb));
            const __m256i x1 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(xb + 16)));
            __m256i v[8];
            for (int m = 0; m < 8; m++) {
                const __m128i *q = (const __m128i *)(rp[m] + b * QB);
                v[m] = _mm256_add_epi32(_mm256_madd_epi16(_mm256_cvtepu8_epi16(_mm_loadu_si128(q)), x0),
                                        _mm256_madd_epi16(_mm256_cvtepu8_epi16(_mm_loadu_si128(q + 1)), x1));
            }
            acc = step8_avx2(s, G, b, red8_avx2(v), acc);
        }
        finish8_avx2(s, acc, out + (r - r0), nr);
    }
}

/* One row of x on AVX2 over the packed copy (cf_cpu_qpack; where it exists, the backend's decode path): a
 * tile's 16 weight rows as the lanes of two 32-byte halves, read as one sequential stream, no reductions. 4
 * bits: per word of a block, the low and the high nibbles against 4 bytes of x broadcast (vpmaddubsw; the
 * block's 8 products a lane add up in 16 bits: at most 4 * 2 * 2 * 15 * 127 = 30,480), then vpmaddwd. 8 bits:
 * q = q' + 128 with q' = q ^ 0x80 signed, P = sum q' * x + 128 * (sum of the block's x); vpmaddubsw of |q'|
 * (at most 128) and x with q''s sign (at most 127): pairs fit 16 bits (2 * 128 * 127 = 32,512). */
AVX2 static INL void decode_packed_avx2(const int BITS, const qscratch *s, const cf_qmat *w, int64_t r0, int64_t r1, float *out) {
    const int64_t tb = cf_cpu_qpack_tile_bytes(w), ng = s->ng, gl = sb_per_line(w), es = sb_size(w->sb_dtype), bpg = w->group / QB;
    const __m256i m4 = _mm256_set1_epi8(15), ones = _mm256_set1_epi16(1), top = _mm256_set1_epi8((char)0x80);
    for (int64_t r = r0; r < r1; r += 16) {
        const uint8_t *p = w->tiles + (r / 16) * tb;
        __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
        int64_t b = 0;
        for (int64_t g0 = 0; g0 < ng; g0 += gl) {
            const uint8_t *line = p;
            p += 64;
            for (int64_t j = 0; j < gl && g0 + j < ng; j++) {
                const __m256 s0 = _mm256_castsi256_ps(sb8v_avx2(line + j * 16 * es, w->sb_dtype, 0));
                const __m256 s1 = _mm256_castsi256_ps(sb8v_avx2(line + j * 16 * es, w->sb_dtype, 8));
                for (int64_t e = 0; e < bpg; e++, b++, p += BITS * 64) {
                    const int8_t *xb = s->xq + b * QB;
                    __m256i p0, p1;
                    if (BITS == 4) {
                        __m256i h0 = _mm256_setzero_si256(), h1 = _mm256_setzero_si256();
                        for (int t = 0; t < 4; t++) {
                            int32_t xe, xo;
                            memcpy(&xe, xb + 4 * t, 4);
                            memcpy(&xo, xb + 16 + 4 * t, 4);
                            const __m256i ve = _mm256_set1_epi32(xe), vo = _mm256_set1_epi32(xo);
                            const __m256i a = _mm256_load_si256((const __m256i *)(p + t * 64)), c = _mm256_load_si256((const __m256i *)(p + t * 64 + 32));
                            h0 = _mm256_add_epi16(h0, _mm256_add_epi16(_mm256_maddubs_epi16(_mm256_and_si256(a, m4), ve),
                                                                       _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(a, 4), m4), vo)));
                            h1 = _mm256_add_epi16(h1, _mm256_add_epi16(_mm256_maddubs_epi16(_mm256_and_si256(c, m4), ve),
                                                                       _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(c, 4), m4), vo)));
                        }
                        p0 = _mm256_madd_epi16(h0, ones), p1 = _mm256_madd_epi16(h1, ones);
                    } else {
                        p0 = p1 = _mm256_set1_epi32(128 * s->sums[b]);
                        for (int t = 0; t < 8; t++) {
                            int32_t x4;
                            memcpy(&x4, xb + 4 * t, 4);
                            const __m256i xv = _mm256_set1_epi32(x4);
                            const __m256i a = _mm256_xor_si256(_mm256_load_si256((const __m256i *)(p + t * 64)), top);
                            const __m256i c = _mm256_xor_si256(_mm256_load_si256((const __m256i *)(p + t * 64 + 32)), top);
                            p0 = _mm256_add_epi32(p0, qdot8_avx2(_mm256_abs_epi8(a), a, xv));
                            p1 = _mm256_add_epi32(p1, qdot8_avx2(_mm256_abs_epi8(c), c, xv));
                        }
                    }
                    const __m256 dv = _mm256_set1_ps(s->d[b]);
                    acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0), _mm256_mul_ps(s0, dv), acc0);
                    acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p1), _mm256_mul_ps(s1, dv), acc1);
                }
            }
        }
        for (int64_t g0 = 0; g0 < ng; g0 += gl, p += 64)
            for (int64_t j = 0; j < gl && g0 + j < ng; j++) {
                const __m256 xs = _mm256_set1_ps(s->xs[g0 + j]);
                acc0 = _mm256_fmadd_ps(_mm256_castsi256_ps(sb8v_avx2(p + j * 16 * es, w->sb_dtype, 0)), xs, acc0);
                acc1 = _mm256_fmadd_ps(_mm256_castsi256_ps(sb8v_avx2(p + j * 16 * es, w->sb_dtype, 8)), xs, acc1);
            }
        float t[16];
        _mm256_storeu_ps(t, acc0);
        _mm256_storeu_ps(t + 8, acc1);
        memcpy(out + (r - r0), t, sizeof(float) * (size_t)(r1 - r < 16 ? r1 - r : 16));
    }
}

AVX2 static void decode_packed4_avx2(const qscratch *s, const cf_qmat *w, int64_t r0, int64_t r1, float *out) {
    decode_packed_avx2(4, s, w, r0, r1, out);
}

AVX2 static void decode_packed8_avx2(const qscratch *s, const cf_qmat *w, int64_t r0, int64_t r1, float *out) {
    decode_packed_avx2(8, s, w, r0, r1, out);
}

/* 2 or more rows of x on AVX2: the AVX-512 batch path's shape in 8 lanes. A block of 8 weight rows is
 * regrouped once per call into 32-byte vectors of 4 columns x 8 rows (8 bits: |q'| and q' = q ^ 0x80 in two
 * tiles), swept by up to 4 rows of x: per 4 columns vpmaddubsw with 4 bytes of x broadcast (8 bits: x signed
 * by q', plus 128 times the block's x sum), then vpmaddwd (4 bits: once per block, the products summed in 16
 * bits); the f32 step per block for the 8 rows at once. Scales and biases as sf[g * 8 + m]. */

AVX2 static INL void sweep_avx2(const int BITS, const int NX, const qscratch *s, int G, int64_t i, int nr, float *out,
                                int64_t os) {
    const int8_t *xq = s->xq + i * s->nbp * QB;
    const float *d = s->d + i * s->nbp, *xs = s->xs + i * s->ngp;
    const int64_t xstride = s->nbp * QB, hi_off = s->nbp * 8 * 32;
    __m256 acc[4];
    for (int j = 0; j < NX; j++) acc[j] = _mm256_setzero_ps();
    for (int64_t b = 0; b < s->nb; b++) {
        __m256i p[4];
        if (BITS == 4) { /* 16-bit sums over the block: at most 8 * 2 * 15 * 127 = 30,480 */
            for (int j = 0; j < NX; j++) p[j] = _mm256_setzero_si256();
            for (int t = 0; t < 8; t++) {
                const __m256i wv = _mm256_load_si256((const __m256i *)(s->tile + (b * 8 + t) * 32));
                for (int j = 0; j < NX; j++) {
                    int32_t x4;
                    memcpy(&x4, xq + j * xstride + b * QB + 4 * t, 4);
                    p[j] = _mm256_add_epi16(p[j], _mm256_maddubs_epi16(wv, _mm256_set1_epi32(x4)));
                }
            }
            for (int j = 0; j < NX; j++) p[j] = _mm256_madd_epi16(p[j], _mm256_set1_epi16(1));
        } else { /* |q'| and q' (q' = q ^ 0x80): sum q * x = sum |q'| * (x signed by q') + 128 * sum x */
            for (int j = 0; j < NX; j++) p[j] = _mm256_set1_epi32(128 * s->sums[(i + j) * s->nbp + b]);
            for (int t = 0; t < 8; t++) {
                const __m256i wa = _mm256_load_si256((const __m256i *)(s->tile + (b * 8 + t) * 32));
                const __m256i wq = _mm256_load_si256((const __m256i *)(s->tile + hi_off + (b * 8 + t) * 32));
                for (int j = 0; j < NX; j++) {
                    int32_t x4;
                    memcpy(&x4, xq + j * xstride + b * QB + 4 * t, 4);
                    p[j] = _mm256_add_epi32(p[j], qdot8_avx2(wa, wq, _mm256_set1_epi32(x4)));
                }
            }
        }
        const __m256 sv = _mm256_load_ps(s->sf + (b * QB / G) * 8);
        for (int j = 0; j < NX; j++)
            acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p[j]), _mm256_mul_ps(sv, _mm256_set1_ps(d[j * s->nbp + b])), acc[j]);
    }
    for (int64_t g = 0; g < s->ng; g++) {
        const __m256 bv = _mm256_load_ps(s->bf + g * 8);
        for (int j = 0; j < NX; j++) acc[j] = _mm256_fmadd_ps(bv, _mm256_set1_ps(xs[j * s->ngp + g]), acc[j]);
    }
    for (int j = 0; j < NX; j++) {
        float t[8];
        _mm256_storeu_ps(t, acc[j]);
        memcpy(out + j * os, t, sizeof(float) * (size_t)nr);
    }
}

AVX2 static void batch_avx2(const int BITS, const qscratch *s, int64_t n, const cf_qmat *w, int64_t r0, int64_t r1,
                            float *out, int64_t os) {
    const int G = w->group;
    const int64_t hi_off = s->nbp * 8 * 32;
    for (int64_t r = r0; r < r1; r += 8) {
        const int nr = (int)min64(8, r1 - r);
        sb8_avx2(s, w, r, nr);
        for (int64_t b = 0; b < s->nb; b++) {
            __m256i v[8], t[8];
            for (int m = 0; m < 8; m++) v[m] = wblock_avx2(BITS, (const uint8_t *)w->q + (r + (m < nr ? m : nr - 1)) * (w->cols * BITS / 8), b);
            tr8(v, t);
            for (int e = 0; e < 8; e++) {
                const __m256i q = BITS == 8 ? _mm256_xor_si256(t[e], _mm256_set1_epi8((char)0x80)) : t[e];
                if (BITS == 8) _mm256_store_si256((__m256i *)(s->tile + hi_off + (b * 8 + e) * 32), q);
                _mm256_store_si256((__m256i *)(s->tile + (b * 8 + e) * 32), BITS == 8 ? _mm256_abs_epi8(q) : q);
            }
        }
        float *o = out + (r - r0);
        int64_t i = 0;
        for (; i + 4 <= n; i += 4) sweep_avx2(BITS, 4, s, G, i, nr, o + i * os, os);
        switch (n - i) {
        case 3: sweep_avx2(BITS, 3, s, G, i, nr, o + i * os, os); break;
        case 2: sweep_avx2(BITS, 2, s, G, i, nr, o + i * os, os); break;
        case 1: sweep_avx2(BITS, 1, s, G, i, nr, o + i * os, os); break;
        default: break;
        }
    }
}

/* ---- AVX-512 with VNNI ---- */

AVX512V static void quant_rows_avx512(const float *x, int64_t xs, int64_t n, const qscratch *s, int bits, int G) {
    const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i od = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    for (int64_t i = 0; i < n; i++) {
        const float *xr = x + i * xs;
        int8_t *q = s->xq + i * s->nbp * QB;
        float *d = s->d + i * s->nbp;
        int32_t *sums = s->sums + i * s->nbp;
        for (int64_t b = 0; b < s->nb; b++) {
            const __m512 v0 = _mm512_loadu_ps(xr + b * QB), v1 = _mm512_loadu_ps(xr + b * QB + 16);
            const int nan = (_mm512_cmp_ps_mask(v0, v0, _CMP_UNORD_Q) | _mm512_cmp_ps_mask(v1, v1, _CMP_UNORD_Q)) != 0;
            const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
            if (quant_block_bad(amax, nan, q + b * QB, d + b, sums + b)) continue;
            const __m512 id = _mm512_set1_ps(amax > 0 ? 127.0f / amax : 0.0f);
            d[b] = amax / 127.0f;
            __m512i i0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, id)), i1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, id));
            if (bits == 4) {
                const __m512i e = _mm512_permutex2var_epi32(i0, ev, i1), o = _mm512_permutex2var_epi32(i0, od, i1);
                i0 = e, i1 = o;
            }
            _mm_storeu_si128((__m128i *)(q + b * QB), _mm512_cvtsepi32_epi8(i0));
            _mm_storeu_si128((__m128i *)(q + b * QB + 16), _mm512_cvtsepi32_epi8(i1));
            sums[b] = _mm512_reduce_add_epi32(_mm512_add_epi32(i0, i1));
        }
        quant_row_finish(s, i, G);
    }
}

/* the q values of blocks 2c and 2c + 1 of a weight row (bytes at p) in kernel order, 64 bytes; half: block
 * 2c only (the rest zero) */
AVX512V static INL __m512i wchunk(const int BITS, const uint8_t *p, int64_t c, int half) {
    if (BITS == 8) return half ? _mm512_maskz_loadu_epi8(0xFFFFFFFFull, p + c * 64) : _mm512_loadu_si512(p + c * 64);
    /* 128-bit lanes [block 2c, block 2c, block 2c + 1, block 2c + 1] packed, shifted by 0, 4, 0, 4 */
    const __m512i sh = _mm512_setr_epi32(0, 0, 0, 0, 0x40004, 0x40004, 0x40004, 0x40004, 0, 0, 0, 0, 0x40004, 0x40004, 0x40004, 0x40004);
    const __m512i m4 = _mm512_set1_epi8(15);
    if (half) return _mm512_maskz_and_epi32(0x00FF, _mm512_srlv_epi16(_mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(p + c * 32))), sh), m4);
    const __m512i z = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(p + c * 32)));
    return _mm512_and_si512(_mm512_srlv_epi16(_mm512_shuffle_i64x2(z, z, 0x50), sh), m4);
}

/* p[m] (16 int32 lanes each) -> *pa, *pb: lane m is the sum of lanes 0-7 (block A), 8-15 (block B) of p[m] */
AVX512V static INL void red16x2(const __m512i *p, __m512i *pa, __m512i *pb) {
    __m512i s1[8], s2[4];
    for (int j = 0; j < 8; j++)
        s1[j] = _mm512_add_epi32(_mm512_unpacklo_epi32(p[2 * j], p[2 * j + 1]), _mm512_unpackhi_epi32(p[2 * j], p[2 * j + 1]));
    /* s2[j], 128-bit lane L, element e: the sum of lanes 4L..4L+3 of p[4j + e] */
    for (int j = 0; j < 4; j++)
        s2[j] = _mm512_add_epi32(_mm512_unpacklo_epi64(s1[2 * j], s1[2 * j + 1]), _mm512_unpackhi_epi64(s1[2 * j], s1[2 * j + 1]));
    const __m512i w01 = _mm512_add_epi32(_mm512_shuffle_i32x4(s2[0], s2[1], 0x88), _mm512_shuffle_i32x4(s2[0], s2[1], 0xDD));
    const __m512i w23 = _mm512_add_epi32(_mm512_shuffle_i32x4(s2[2], s2[3], 0x88), _mm512_shuffle_i32x4(s2[2], s2[3], 0xDD));
    *pa = _mm512_shuffle_i32x4(w01, w23, 0x88);
    *pb = _mm512_shuffle_i32x4(w01, w23, 0xDD);
}

/* r[0..16) -> c[0..16): lane m of c[t] = lane t of r[m] (32-bit elements) */
AVX512V static INL void tr16(const __m512i *r, __m512i *c) {
    __m512i a[16], b[16];
    for (int j = 0; j < 8; j++) {
        a[2 * j] = _mm512_unpacklo_epi32(r[2 * j], r[2 * j + 1]);
        a[2 * j + 1] = _mm512_unpackhi_epi32(r[2 * j], r[2 * j + 1]);
    }
    /* b[4j + e], 128-bit lane L: rows 4j..4j+3 at column 4L + e */
    for (int j = 0; j < 4; j++) {
        b[4 * j] = _mm512_unpacklo_epi64(a[4 * j], a[4 * j + 2]);
        b[4 * j + 1] = _mm512_unpackhi_epi64(a[4 * j], a[4 * j + 2]);
        b[4 * j + 2] = _mm512_unpacklo_epi64(a[4 * j + 1], a[4 * j + 3]);
        b[4 * j + 3] = _mm512_unpackhi_epi64(a[4 * j + 1], a[4 * j + 3]);
    }
    for (int e = 0; e < 4; e++) {
        const __m512i u0 = _mm512_shuffle_i32x4(b[e], b[4 + e], 0x44), u1 = _mm512_shuffle_i32x4(b[e], b[4 + e], 0xEE);
        const __m512i u2 = _mm512_shuffle_i32x4(b[8 + e], b[12 + e], 0x44), u3 = _mm512_shuffle_i32x4(b[8 + e], b[12 + e], 0xEE);
        c[e] = _mm512_shuffle_i32x4(u0, u2, 0x88);
        c[4 + e] = _mm512_shuffle_i32x4(u0, u2, 0xDD);
        c[8 + e] = _mm512_shuffle_i32x4(u1, u3, 0x88);
        c[12 + e] = _mm512_shuffle_i32x4(u1, u3, 0xDD);
    }
}

/* 16 values of type t from p + i widened to f32 (m: the lanes to read, the others 0) */
AVX512V static INL __m512 sb16(const void *p, int t, int64_t i, __mmask16 m) {
    if (t == CF_BF16)
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, (const uint16_t *)p + i)), 16));
    if (t == CF_F16) return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, (const uint16_t *)p + i));
    return _mm512_maskz_loadu_ps(m, (const float *)p + i);
}

/* the scales and biases of weight rows r .. r + 16 (row r + nr - 1 repeated past nr) in f32, transposed:
 * s->sf[g * 16 + m], s->bf[g * 16 + m] */
AVX512V static INL void sb_tile(const qscratch *s, const cf_qmat *w, int64_t r, int nr) {
    const int64_t ng = s->ng, ngp = s->ngp;
    for (int m = 0; m < 16; m++) {
        const int64_t rr = r + (m < nr ? m : nr - 1);
        for (int64_t g = 0; g < ngp; g += 16) {
            const __mmask16 k = ng - g >= 16 ? 0xFFFF : (__mmask16)((1u << (ng - g)) - 1);
            _mm512_store_ps(s->rowf + m * ngp + g, sb16(w->scales, w->sb_dtype, rr * ng + g, k));
            _mm512_store_ps(s->rowf + (16 + m) * ngp + g, sb16(w->biases, w->sb_dtype, rr * ng + g, k));
        }
    }
    for (int h = 0; h < 2; h++)
        for (int64_t g = 0; g < ngp; g += 16) {
            __m512i v[16], t[16];
            for (int m = 0; m < 16; m++) v[m] = _mm512_load_si512(s->rowf + (h * 16 + m) * ngp + g);
            tr16(v, t);
            float *dst = (h ? s->bf : s->sf) + g * 16;
            for (int e = 0; e < 16; e++) _mm512_store_si512(dst + e * 16, t[e]);
        }
}

/* one row of x, weight rows r .. r + nr (nr <= 16): out[m], 8 rows at a time (8 streams side by side, as
 * the hardware prefetchers follow them, with the next 8 rows prefetched in software). Per 128 columns (a
 * 64-byte line of 4-bit weights, two of 8-bit), 16 lane sums (one vpdpbusd each: rows x two 64-column
 * halves) are reduced to one vector per block pair, then the f32 steps of the 8 rows' four blocks in order. */
AVX512V static INL void decode16(const int BITS, const qscratch *s, const cf_qmat *w, int64_t r, int nr, float *out) {
    const int G = w->group;
    const int64_t rb = w->cols * BITS / 8, steps = s->nbp / 2, nb = s->nb;
    sb_tile(s, w, r, nr);
    for (int h = 0; h < nr; h += 8) {
        const int64_t pf_step = ((8 * rb + steps - 1) / steps * 2 + 63) & ~(int64_t)63;
        const char *pf = r + h + 16 <= w->rows ? (const char *)w->q + (r + h + 8) * rb : NULL;
        const uint8_t *rp[8];
        for (int m = 0; m < 8; m++) rp[m] = (const uint8_t *)w->q + (r + (h + m < nr ? h + m : nr - 1)) * rb;
        __m256 acc = _mm256_setzero_ps();
        for (int64_t c = 0; c < steps; c += 2) {
            if (pf) {
                for (int64_t o = 0; o < pf_step; o += 64) _mm_prefetch(pf + o, _MM_HINT_T0);
                pf += pf_step;
            }
            const __m512i x0 = _mm512_load_si512(s->xq + c * 64);
            __m512i p[16], pa, pb;
            for (int m = 0; m < 8; m++) p[m] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wchunk(BITS, rp[m], c, 2 * c + 1 >= nb), x0);
            if (c + 1 < steps) {
                const __m512i x1 = _mm512_load_si512(s->xq + (c + 1) * 64);
                for (int m = 0; m < 8; m++) p[8 + m] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wchunk(BITS, rp[m], c + 1, 2 * c + 3 >= nb), x1);
            } else {
                for (int m = 0; m < 8; m++) p[8 + m] = _mm512_setzero_si512();
            }
            red16x2(p, &pa, &pb);
            /* lanes 0-7: blocks 2c (pa), 2c + 1 (pb); lanes 8-15: blocks 2c + 2, 2c + 3 */
            const __m512 fa = _mm512_cvtepi32_ps(pa), fb = _mm512_cvtepi32_ps(pb);
            const __m256 f[4] = {_mm512_castps512_ps256(fa), _mm512_castps512_ps256(fb), _mm512_extractf32x8_ps(fa, 1),
                                 _mm512_extractf32x8_ps(fb, 1)};
            for (int t = 0; t < 4 && 2 * c + t < nb; t++)
                acc = _mm256_fmadd_ps(f[t], _mm256_mul_ps(_mm256_load_ps(s->sf + ((2 * c + t) * QB / G) * 16 + h), _mm256_set1_ps(s->d[2 * c + t])), acc);
        }
        for (int64_t g = 0; g < s->ng; g++) acc = _mm256_fmadd_ps(_mm256_load_ps(s->bf + g * 16 + h), _mm256_set1_ps(s->xs[g]), acc);
        const int k = nr - h < 8 ? nr - h : 8;
        _mm256_mask_storeu_ps(out + h, (__mmask8)((1u << k) - 1), acc);
    }
}

/* NX rows of x from row i, against the tile of weight rows r .. r + nr: out[(i + j) * os + m] */
AVX512V static INL void sweep(const int NX, const qscratch *s, int G, int64_t i, int nr, float *out, int64_t os) {
    const int8_t *xq = s->xq + i * s->nbp * QB;
    const float *d = s->d + i * s->nbp, *xs = s->xs + i * s->ngp;
    const int64_t xstride = s->nbp * QB;
    __m512 acc[8];
    for (int j = 0; j < NX; j++) acc[j] = _mm512_setzero_ps();
    for (int64_t b = 0; b < s->nb; b++) {
        __m512i p[8];
        for (int j = 0; j < NX; j++) p[j] = _mm512_setzero_si512();
        for (int t = 0; t < 8; t++) {
            const __m512i wv = _mm512_load_si512(s->tile + (b * 8 + t) * 64);
            for (int j = 0; j < NX; j++) {
                int32_t x4;
                memcpy(&x4, xq + j * xstride + b * QB + 4 * t, 4);
                p[j] = _mm512_dpbusd_epi32(p[j], wv, _mm512_set1_epi32(x4));
            }
        }
        const __m512 sv = _mm512_load_ps(s->sf + (b * QB / G) * 16);
        for (int j = 0; j < NX; j++)
            acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p[j]), _mm512_mul_ps(sv, _mm512_set1_ps(d[j * s->nbp + b])), acc[j]);
    }
    for (int64_t g = 0; g < s->ng; g++) {
        const __m512 bv = _mm512_load_ps(s->bf + g * 16);
        for (int j = 0; j < NX; j++) acc[j] = _mm512_fmadd_ps(bv, _mm512_set1_ps(xs[j * s->ngp + g]), acc[j]);
    }
    for (int j = 0; j < NX; j++) _mm512_mask_storeu_ps(out + j * os, (__mmask16)((1u << nr) - 1), acc[j]);
}

/* 16 scales or biases of type t at p, widened to f32 */
AVX512V static INL __m512 sbv(const uint8_t *p, cf_dtype t) {
    if (t == CF_BF16) return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_load_si256((const __m256i *)p)), 16));
    if (t == CF_F16) return _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)p));
    return _mm512_load_ps((const float *)p);
}

/* The tile of weight rows r .. r + 16 (r a multiple of 16) from its packed copy (cf_cpu_qpack): the words of
 * each block are already the tile's vectors (4 bits: their low then their high nibbles); the scale and bias
 * lines widened to f32 are s->sf and s->bf as sb_tile makes them. */
AVX512V static INL void unpack_tile(const int BITS, const qscratch *s, const cf_qmat *w, int64_t r) {
    const int64_t ng = s->ng, gl = sb_per_line(w), es = sb_size(w->sb_dtype), bpg = w->group / QB;
    const uint8_t *p = w->tiles + (r / 16) * cf_cpu_qpack_tile_bytes(w);
    const __m512i m4 = _mm512_set1_epi8(15);
    int64_t b = 0;
    for (int64_t g0 = 0; g0 < ng; g0 += gl) {
        const uint8_t *line = p;
        p += 64;
        for (int64_t j = 0; j < gl && g0 + j < ng; j++) {
            _mm512_store_ps(s->sf + (g0 + j) * 16, sbv(line + j * 16 * es, w->sb_dtype));
            for (int64_t e = 0; e < bpg; e++, b++, p += BITS * 64)
                for (int t = 0; t < 4; t++) {
                    const __m512i v = _mm512_load_si512(p + t * 64);
                    if (BITS == 4) {
                        _mm512_store_si512(s->tile + (b * 8 + t) * 64, _mm512_and_si512(v, m4));
                        _mm512_store_si512(s->tile + (b * 8 + 4 + t) * 64, _mm512_and_si512(_mm512_srli_epi16(v, 4), m4));
                    } else {
                        _mm512_store_si512(s->tile + (b * 8 + t) * 64, v);
                        _mm512_store_si512(s->tile + (b * 8 + 4 + t) * 64, _mm512_load_si512(p + (4 + t) * 64));
                    }
                }
        }
    }
    for (int64_t g0 = 0; g0 < ng; g0 += gl, p += 64)
        for (int64_t j = 0; j < gl && g0 + j < ng; j++) _mm512_store_ps(s->bf + (g0 + j) * 16, sbv(p + j * 16 * es, w->sb_dtype));
}

/* n rows of x, weight rows r .. r + nr (nr <= 16): the rows regrouped into the tile once (from the packed copy
 * when there is one), then swept */
AVX512V static INL void batch16(const int BITS, const qscratch *s, int64_t n, const cf_qmat *w, int64_t r, int nr,
                                float *out, int64_t os) {
    if (w->tiles && r % 16 == 0) unpack_tile(BITS, s, w, r);
    else {
        const int64_t rb = w->cols * BITS / 8;
        const uint8_t *rp[16];
        for (int m = 0; m < 16; m++) rp[m] = (const uint8_t *)w->q + (r + (m < nr ? m : nr - 1)) * rb;
        sb_tile(s, w, r, nr);
        for (int64_t c = 0; c < s->nbp / 2; c++) {
            __m512i p[16], t[16];
            const int half = 2 * c + 1 >= s->nb;
            for (int m = 0; m < 16; m++) p[m] = wchunk(BITS, rp[m], c, half);
            tr16(p, t);
            for (int e = 0; e < 16; e++) _mm512_store_si512(s->tile + (c * 16 + e) * 64, t[e]);
        }
    }
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) sweep(8, s, w->group, i, nr, out + i * os, os);
    switch (n - i) {
    case 7: sweep(7, s, w->group, i, nr, out + i * os, os); break;
    case 6: sweep(6, s, w->group, i, nr, out + i * os, os); break;
    case 5: sweep(5, s, w->group, i, nr, out + i * os, os); break;
    case 4: sweep(4, s, w->group, i, nr, out + i * os, os); break;
    case 3: sweep(3, s, w->group, i, nr, out + i * os, os); break;
    case 2: sweep(2, s, w->group, i, nr, out + i * os, os); break;
    case 1: sweep(1, s, w->group, i, nr, out + i * os, os); break;
    default: break;
    }
}

AVX512V static void rows_avx512(const int BITS, const qscratch *s, int64_t n, const cf_qmat *w, int64_t r0, int64_t r1,
                                float *out, int64_t os) {
    for (int64_t r = r0; r < r1; r += 16) {
        const int nr = (int)min64(16, r1 - r);
        if (n == 1) decode16(BITS, s, w, r, nr, out + (r - r0));
        else batch16(BITS, s, n, w, r, nr, out + (r - r0), os);
    }
}

AVX512V static void rows4_avx512(const qscratch *s, int64_t n, const cf_qmat *w, int64_t r0, int64_t r1, float *out, int64_t os) {
    rows_avx512(4, s, n, w, r0, r1, out, os);
}

AVX512V static void rows8_avx512(const qscratch *s, int64_t n, const cf_qmat *w, int64_t r0, int64_t r1, float *out, int64_t os) {
    rows_avx512(8, s, n, w, r0, r1, out, os);
}

/* one row of x against packed tiles (cf_cpu_qpack) of weight rows r0 .. r1 (r0 a multiple of 16): per tile,
 * its 16 rows in the lanes of one accumulator, one sequential stream; per block, the words t of 16 rows x 4
 * columns against 4 values of x broadcast (vpdpbusd), two integer chains, then the block's f32 step. */
AVX512V static INL void decode_packed(const int BITS, const qscratch *s, const cf_qmat *w, int64_t r0, int64_t r1, float *out) {
    const int64_t tb = cf_cpu_qpack_tile_bytes(w), ng = s->ng, gl = sb_per_line(w), es = sb_size(w->sb_dtype), bpg = w->group / QB;
    const __m512i m4 = _mm512_set1_epi8(15);
    for (int64_t r = r0; r < r1; r += 16) {
        const uint8_t *p = w->tiles + (r / 16) * tb;
        __m512 acc = _mm512_setzero_ps();
        int64_t b = 0;
        for (int64_t g0 = 0; g0 < ng; g0 += gl) {
            const uint8_t *line = p;
            p += 64;
            for (int64_t j = 0; j < gl && g0 + j < ng; j++) {
                const __m512 sv = sbv(line + j * 16 * es, w->sb_dtype);
                for (int64_t e = 0; e < bpg; e++, b++, p += BITS * 64) {
                    const int8_t *xb = s->xq + b * QB;
                    __m512i p0 = _mm512_setzero_si512(), p1 = _mm512_setzero_si512();
                    for (int t = 0; t < 4; t++) {
                        int32_t x0, x1;
                        if (BITS == 4) {
                            const __m512i v = _mm512_load_si512(p + t * 64);
                            memcpy(&x0, xb + 4 * t, 4);
                            memcpy(&x1, xb + 16 + 4 * t, 4);
                            p0 = _mm512_dpbusd_epi32(p0, _mm512_and_si512(v, m4), _mm512_set1_epi32(x0));
                            p1 = _mm512_dpbusd_epi32(p1, _mm512_and_si512(_mm512_srli_epi16(v, 4), m4), _mm512_set1_epi32(x1));
                        } else {
                            memcpy(&x0, xb + 8 * t, 4);
                            memcpy(&x1, xb + 8 * t + 4, 4);
                            p0 = _mm512_dpbusd_epi32(p0, _mm512_load_si512(p + 2 * t * 64), _mm512_set1_epi32(x0));
                            p1 = _mm512_dpbusd_epi32(p1, _mm512_load_si512(p + (2 * t + 1) * 64), _mm512_set1_epi32(x1));
                        }
                    }
                    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(p0, p1)), _mm512_mul_ps(sv, _mm512_set1_ps(s->d[b])), acc);
                }
            }
        }
        for (int64_t g0 = 0; g0 < ng; g0 += gl, p += 64)
            for (int64_t j = 0; j < gl && g0 + j < ng; j++) acc = _mm512_fmadd_ps(sbv(p + j * 16 * es, w->sb_dtype), _mm512_set1_ps(s->xs[g0 + j]), acc);
        const int64_t k = r1 - r < 16 ? r1 - r : 16;
        _mm512_mask_storeu_ps(out + (r - r0), (__mmask16)((1u << k) - 1), acc);
    }
}

AVX512V static void decode_packed4(const qscratch *s, const cf_qmat *w, int64_t r0, int64_t r1, float *out) {
    decode_packed(4, s, w, r0, r1, out);
}

AVX512V static void decode_packed8(const qscratch *s, const cf_qmat *w, int64_t r0, int64_t r1, float *out) {
    decode_packed(8, s, w, r0, r1, out);
}

#endif

/* 4 and 8 bits on one instruction set: x quantized, then the weight rows */
static void int8_gemm(cf_cpu_isa_level isa, const float *x, int64_t xs, int64_t n, const cf_qmat *w, int64_t r0,
                      int64_t r1, float *out, int64_t os) {
    qscratch s;
    if (!qscratch_alloc(&s, w, n)) { /* no scratch: NaN, never a silent wrong value */
        for (int64_t i = 0; i < n; i++)
            for (int64_t r = r0; r < r1; r++) out[i * os + (r - r0)] = NAN;
        return;
    }
    const int bits = w->bits, G = w->group;
#ifdef CF_X86
    if (isa == CF_ISA_AVX512 && cf_cpu_has_avx512_vnni()) {
        quant_rows_avx512(x, xs, n, &s, bits, G);
        if (n == 1 && w->tiles && r0 % 16 == 0) (bits == 4 ? decode_packed4 : decode_packed8)(&s, w, r0, r1, out);
        else (bits == 4 ? rows4_avx512 : rows8_avx512)(&s, n, w, r0, r1, out, os);
    } else if (isa >= CF_ISA_AVX2) {
        quant_rows_avx2(x, xs, n, &s, bits, G);
        if (n == 1 && w->tiles && r0 % 16 == 0) (bits == 4 ? decode_packed4_avx2 : decode_packed8_avx2)(&s, w, r0, r1, out);
        else if (n == 1) (bits == 4 ? decode4_avx2 : decode8_avx2)(&s, w, r0, r1, out);
        else batch_avx2(bits, &s, n, w, r0, r1, out, os);
    } else
#endif
    {
        quant_rows_c(x, xs, n, &s, bits, G);
        rows_c(bits, &s, n, w, r0, r1, out, os);
    }
    free(s.mem);
}

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
    if (w->bits == 4 || w->bits == 8) {
        int8_gemm(isa, x, xs, n, w, r0, r1, out, os);
        return 1;
    }
    switch (isa) {
#ifdef CF_X86
    case CF_ISA_AVX512: generic_avx512(x, xs, n, w, r0, r1, out, os); return 1;
    case CF_ISA_AVX2: generic_avx2(x, xs, n, w, r0, r1, out, os); return 1;
#endif
    default: generic_c(x, xs, n, w, r0, r1, out, os); return 1;
    }
}

int cf_cpu_qpack_useful(void) { return cf_cpu_isa_available(CF_ISA_AVX2); }

void cf_cpu_qgemm(const float *x, int64_t xs, int64_t n, const cf_qmat *w, int64_t r0, int64_t r1, float *out,
                  int64_t os) {
    const cf_cpu_isa_level best = cf_cpu_isa_available(CF_ISA_AVX512) ? CF_ISA_AVX512
                                : cf_cpu_isa_available(CF_ISA_AVX2)   ? CF_ISA_AVX2
                                                                      : CF_ISA_C;
    cf_cpu_qgemm_isa(best, x, xs, n, w, r0, r1, out, os);
}
