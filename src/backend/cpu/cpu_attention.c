/* cpu_attention.c: attention over cache rows of f32, bf16 or f16 (cpu_attention.h), owning its kernels and
 * thread split.
 *
 * A task is one query row and one block of BLOCK_KEYS of its keys, for one kv head (many rows, as in prefill) or
 * for every kv head (a few rows, as in decode, where the threads then split a row's blocks; the block's rows are
 * first read in address order, see attend). It gathers the block's cache rows across ring wraps and cache blocks
 * as row pointers and walks them in tiles of up to KT: per kv head, the scores of all G query heads of the group
 * against each key row (16-bit keys widened to f32 in registers), then per head the running max m, the rescale of
 * the sum l and accumulator by exp(m_old - m_new), p = exp(score - m_new), and acc += p * v for each value row.
 * A row of one block accumulates into its output row, divided by l at the end; a row of several keeps (m, l, acc)
 * per block in the scratch and merges them in block order: M = max m_b, L = sum l_b e^(m_b - M),
 * out = sum acc_b e^(m_b - M) / L.
 * The AVX2 and AVX-512 kernels use a polynomial exp (relative error ~1e-7) and tanh = 1 - 2 / (e^2x + 1);
 * the portable C kernel uses expf and tanhf and is the reference the tests hold the others to. */
#include "backend/cpu/cpu_attention.h"
#include "base/status.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CF_X86 1
#endif

#define INL inline __attribute__((always_inline))
#define KT 64                 /* keys per tile */
#define BLOCK_KEYS 256        /* keys of a block (see attn_job) */
#define FEW_ROWS 4            /* calls of at most this many rows spread a row's blocks over the threads */
#define MAX_GROUP_HEADS 64    /* kv heads one task takes at most */
#define PAR_MIN_WORK (1 << 18)

/* The shape a kernel sees: G query heads (contiguous rows of hd) against key rows of hd, value rows of vhd. */
typedef struct dims {
    int G, hd, vhd;
    float scale, softcap;
} dims;

/* One tile: nt key/value row pointers (this kv head's slice of a cache row, elements of the call's KV type); m, l:
 * G floats; acc: G rows of vhd; sc: G * KT floats of work space. */
typedef void (*tile_fn)(const dims *d, const float *q, const void *const *kr, const void *const *vr, int nt, float *m,
                        float *l, float *acc, float *sc);

/* Per head after its scores are in sc[0..nt): the new max, the rescale of l and acc, and p in place of the
 * scores; returns the sum of p. expf of -inf is 0, so the first tile starts from m = -inf, l = 0. */
static INL void rescale(const dims *d, int g, float mt, float *m, float *l, float *acc, float *mnew) {
    const float mn = mt > m[g] ? mt : m[g];
    const float alpha = expf(m[g] - mn);
    if (alpha != 1.0f) {
        float *a = acc + (int64_t)g * d->vhd;
        for (int c = 0; c < d->vhd; c++) a[c] *= alpha;
        l[g] *= alpha;
    }
    m[g] = mn;
    *mnew = mn;
}

/* ---- portable C: the reference ---- */

static INL float kv_at(const cf_dtype T, const void *r, int c) {
    if (T == CF_BF16) return cf_bf16_to_f32(((const uint16_t *)r)[c]);
    if (T == CF_F16) return cf_f16_to_f32(((const uint16_t *)r)[c]);
    return ((const float *)r)[c];
}

static INL void tile_c(const cf_dtype T, const dims *d, const float *q, const void *const *kr, const void *const *vr, int nt,
                       float *m, float *l, float *acc, float *sc) {
    for (int g = 0; g < d->G; g++) {
        const float *qg = q + (int64_t)g * d->hd;
        float *s = sc + g * KT, mt = -INFINITY;
        for (int j = 0; j < nt; j++) {
            float t = 0;
            for (int c = 0; c < d->hd; c++) t += qg[c] * kv_at(T, kr[j], c);
            t *= d->scale;
            if (d->softcap > 0) t = d->softcap * tanhf(t / d->softcap);
            s[j] = t;
            if (t > mt) mt = t;
        }
        float mn, sum = 0;
        rescale(d, g, mt, m, l, acc, &mn);
        for (int j = 0; j < nt; j++) {
            s[j] = expf(s[j] - mn);
            sum += s[j];
        }
        l[g] += sum;
        float *a = acc + (int64_t)g * d->vhd;
        for (int j = 0; j < nt; j++)
            for (int c = 0; c < d->vhd; c++) a[c] += s[j] * kv_at(T, vr[j], c);
    }
}

#ifdef CF_X86

/* ---- AVX-512 ---- */
#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,fma")))

AVX512 static INL __m512 exp16(__m512 x) {
    x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.0f)), _mm512_set1_ps(88.0f));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145752f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.42860677e-6f), r);
    __m512 p = _mm512_set1_ps(1.0f / 5040);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    const __m512i e = _mm512_slli_epi32(_mm512_cvtps_epi32(n), 23);
    return _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(p), e));
}

static INL __mmask16 mask16(int rest) { return rest >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << rest) - 1); }

/* 16 elements (lanes past mk zero) of a K or V row slice from element c, as f32 */
AVX512 static INL __m512 ldkv16(const cf_dtype T, const void *r, int c, __mmask16 mk) {
    if (T == CF_F32) return _mm512_maskz_loadu_ps(mk, (const float *)r + c);
    const __m256i h = _mm256_maskz_loadu_epi16(mk, (const uint16_t *)r + c);
    if (T == CF_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

AVX512 static INL __m256 hi256(__m512 a) { return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1)); }

/* four 16-lane sums -> lanes 0..3 */
AVX512 static INL __m128 sum4_512(__m512 a0, __m512 a1, __m512 a2, __m512 a3) {
    const __m256 b0 = _mm256_add_ps(_mm512_castps512_ps256(a0), hi256(a0));
    const __m256 b1 = _mm256_add_ps(_mm512_castps512_ps256(a1), hi256(a1));
    const __m256 b2 = _mm256_add_ps(_mm512_castps512_ps256(a2), hi256(a2));
    const __m256 b3 = _mm256_add_ps(_mm512_castps512_ps256(a3), hi256(a3));
    const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(b0, b1), _mm256_hadd_ps(b2, b3));
    return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

/* scores of heads g..g+GN-1 (GN = 1 to 4: the rows of each key read once for all of them) against key rows 0..nt
 * into sc[h * KT + j] */
AVX512 static INL void scores512(const int GN, const cf_dtype T, const dims *d, const float *q, const void *const *kr, int nt, int g,
                                 float *sc) {
    const int hd = d->hd;
    for (int j = 0; j < nt; j++) {
        __m512 a[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
        for (int c = 0; c < hd; c += 16) {
            const __mmask16 mk = mask16(hd - c);
            const __m512 kv = ldkv16(T, kr[j], c, mk);
            for (int h = 0; h < GN; h++)
                a[h] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mk, q + (int64_t)(g + h) * hd + c), kv, a[h]);
        }
        if (GN > 1) {
            float t[4];
            _mm_storeu_ps(t, sum4_512(a[0], a[1], a[2], a[3]));
            for (int h = 0; h < GN; h++) sc[(g + h) * KT + j] = t[h];
        } else {
            sc[g * KT + j] = _mm512_reduce_add_ps(a[0]);
        }
    }
}

/* acc[h] += sum_j p[h][j] * v[j] for heads g..g+GN */
AVX512 static INL void values512(const int GN, const cf_dtype T, const dims *d, const void *const *vr, int nt, int g, const float *sc,
                                 float *acc) {
    const int vhd = d->vhd;
    for (int c = 0; c < vhd; c += 16) {
        const __mmask16 mk = mask16(vhd - c);
        __m512 a[4];
        for (int h = 0; h < GN; h++) a[h] = _mm512_maskz_loadu_ps(mk, acc + (int64_t)(g + h) * vhd + c);
        for (int j = 0; j < nt; j++) {
            const __m512 vv = ldkv16(T, vr[j], c, mk);
            for (int h = 0; h < GN; h++) a[h] = _mm512_fmadd_ps(_mm512_set1_ps(sc[(g + h) * KT + j]), vv, a[h]);
        }
        for (int h = 0; h < GN; h++) _mm512_mask_storeu_ps(acc + (int64_t)(g + h) * vhd + c, mk, a[h]);
    }
}

/* scale, softcap and max of s[0..nt), then p = exp(s - m) in place; returns the sum of p */
AVX512 static float softmax512(const dims *d, int g, float *s, int nt, float *m, float *l, float *acc) {
    const __m512 sc = _mm512_set1_ps(d->scale), cap = _mm512_set1_ps(d->softcap), inv = _mm512_set1_ps(d->softcap > 0 ? 2.0f / d->softcap : 0);
    __m512 mx = _mm512_set1_ps(-INFINITY);
    for (int j = 0; j < nt; j += 16) {
        const __mmask16 mk = mask16(nt - j);
        __m512 t = _mm512_mul_ps(_mm512_maskz_loadu_ps(mk, s + j), sc);
        if (d->softcap > 0) {  /* cap * (1 - 2 / (e^(2t/cap) + 1)) */
            const __m512 e = exp16(_mm512_mul_ps(t, inv));
            t = _mm512_mul_ps(cap, _mm512_sub_ps(_mm512_set1_ps(1.0f), _mm512_div_ps(_mm512_set1_ps(2.0f), _mm512_add_ps(e, _mm512_set1_ps(1.0f)))));
        }
        _mm512_mask_storeu_ps(s + j, mk, t);
        mx = _mm512_mask_max_ps(mx, mk, mx, t);
    }
    float mn;
    rescale(d, g, _mm512_reduce_max_ps(mx), m, l, acc, &mn);
    const __m512 mv = _mm512_set1_ps(mn);
    __m512 sum = _mm512_setzero_ps();
    for (int j = 0; j < nt; j += 16) {
        const __mmask16 mk = mask16(nt - j);
        const __m512 p = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(mk, s + j), mv));
        _mm512_mask_storeu_ps(s + j, mk, p);
        sum = _mm512_mask_add_ps(sum, mk, sum, p);
    }
    return _mm512_reduce_add_ps(sum);
}

AVX512 static INL void tile_avx512(const cf_dtype T, const dims *d, const float *q, const void *const *kr, const void *const *vr,
                                   int nt, float *m, float *l, float *acc, float *sc) {
    int g = 0;
    for (; g + 4 <= d->G; g += 4) scores512(4, T, d, q, kr, nt, g, sc);
    if (d->G - g == 3) scores512(3, T, d, q, kr, nt, g, sc);
    else if (d->G - g == 2) scores512(2, T, d, q, kr, nt, g, sc);
    else if (d->G - g == 1) scores512(1, T, d, q, kr, nt, g, sc);
    for (g = 0; g < d->G; g++) {
        const float sum = softmax512(d, g, sc + g * KT, nt, m, l, acc);
        l[g] += sum;
    }
    for (g = 0; g + 4 <= d->G; g += 4) values512(4, T, d, vr, nt, g, sc, acc);
    if (d->G - g == 3) values512(3, T, d, vr, nt, g, sc, acc);
    else if (d->G - g == 2) values512(2, T, d, vr, nt, g, sc, acc);
    else if (d->G - g == 1) values512(1, T, d, vr, nt, g, sc, acc);
}

/* ---- AVX2 + FMA ---- */
#define AVX2 __attribute__((target("avx2,fma,f16c")))

AVX2 static INL __m256 exp8(__m256 x) {
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.0f)), _mm256_set1_ps(88.0f));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145752f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.42860677e-6f), r);
    __m256 p = _mm256_set1_ps(1.0f / 5040);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    const __m256i e = _mm256_slli_epi32(_mm256_cvtps_epi32(n), 23);
    return _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(p), e));
}

/* lanes 0..rest-1 all ones (rest < 8), as a mask for maskload/maskstore */
AVX2 static INL __m256i mask8(int rest) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(rest), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

AVX2 static INL __m256 ld8m(const float *p, int rest) {
    return rest >= 8 ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, mask8(rest));
}

AVX2 static INL void st8m(float *p, int rest, __m256 v) {
    if (rest >= 8) _mm256_storeu_ps(p, v);
    else _mm256_maskstore_ps(p, mask8(rest), v);
}

/* 8 elements (lanes from rest on zero) of a K or V row slice from element c, as f32 */
AVX2 static INL __m256 ldkv8(const cf_dtype T, const void *r, int c, int rest) {
    if (T == CF_F32) return ld8m((const float *)r + c, rest);
    __m128i h;
    if (rest >= 8) {
        h = _mm_loadu_si128((const __m128i *)((const uint16_t *)r + c));
    } else {
        uint16_t t[8] = {0};
        memcpy(t, (const uint16_t *)r + c, (size_t)rest * sizeof *t);
        h = _mm_loadu_si128((const __m128i *)t);
    }
    if (T == CF_F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

AVX2 static INL float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

AVX2 static INL float hmax8(__m256 v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_max_ss(s, _mm_movehdup_ps(s)));
}

AVX2 static INL void scores256(const int GN, const cf_dtype T, const dims *d, const float *q, const void *const *kr, int nt, int g,
                               float *sc) {
    const int hd = d->hd;
    for (int j = 0; j < nt; j++) {
        __m256 a[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
        for (int c = 0; c < hd; c += 8) {
            const __m256 kv = ldkv8(T, kr[j], c, hd - c);
            for (int h = 0; h < GN; h++) a[h] = _mm256_fmadd_ps(ld8m(q + (int64_t)(g + h) * hd + c, hd - c), kv, a[h]);
        }
        if (GN > 1) {
            const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
            float t[4];
            _mm_storeu_ps(t, _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1)));
            for (int k = 0; k < GN; k++) sc[(g + k) * KT + j] = t[k];
        } else {
            sc[g * KT + j] = hsum8(a[0]);
        }
    }
}

AVX2 static INL void values256(const int GN, const cf_dtype T, const dims *d, const void *const *vr, int nt, int g, const float *sc,
                               float *acc) {
    const int vhd = d->vhd;
    for (int c = 0; c < vhd; c += 8) {
        __m256 a[4];
        for (int h = 0; h < GN; h++) a[h] = ld8m(acc + (int64_t)(g + h) * vhd + c, vhd - c);
        for (int j = 0; j < nt; j++) {
            const __m256 vv = ldkv8(T, vr[j], c, vhd - c);
            for (int h = 0; h < GN; h++) a[h] = _mm256_fmadd_ps(_mm256_broadcast_ss(sc + (g + h) * KT + j), vv, a[h]);
        }
        for (int h = 0; h < GN; h++) st8m(acc + (int64_t)(g + h) * vhd + c, vhd - c, a[h]);
    }
}

AVX2 static float softmax256(const dims *d, int g, float *s, int nt, float *m, float *l, float *acc) {
    const __m256 sc = _mm256_set1_ps(d->scale), cap = _mm256_set1_ps(d->softcap), inv = _mm256_set1_ps(d->softcap > 0 ? 2.0f / d->softcap : 0);
    const __m256 ninf = _mm256_set1_ps(-INFINITY);
    __m256 mx = ninf;
    for (int j = 0; j < nt; j += 8) {
        const int rest = nt - j;
        __m256 t = _mm256_mul_ps(ld8m(s + j, rest), sc);
        if (d->softcap > 0) {
            const __m256 e = exp8(_mm256_mul_ps(t, inv));
            t = _mm256_mul_ps(cap, _mm256_sub_ps(_mm256_set1_ps(1.0f), _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(e, _mm256_set1_ps(1.0f)))));
        }
        st8m(s + j, rest, t);
        if (rest < 8) t = _mm256_blendv_ps(ninf, t, _mm256_castsi256_ps(mask8(rest)));
        mx = _mm256_max_ps(mx, t);
    }
    float mn;
    rescale(d, g, hmax8(mx), m, l, acc, &mn);
    const __m256 mv = _mm256_set1_ps(mn);
    __m256 sum = _mm256_setzero_ps();
    for (int j = 0; j < nt; j += 8) {
        const int rest = nt - j;
        __m256 p = exp8(_mm256_sub_ps(ld8m(s + j, rest), mv));
        if (rest < 8) p = _mm256_and_ps(p, _mm256_castsi256_ps(mask8(rest)));
        st8m(s + j, rest, p);
        sum = _mm256_add_ps(sum, p);
    }
    return hsum8(sum);
}

AVX2 static INL void tile_avx2(const cf_dtype T, const dims *d, const float *q, const void *const *kr, const void *const *vr, int nt,
                               float *m, float *l, float *acc, float *sc) {
    int g = 0;
    for (; g + 4 <= d->G; g += 4) scores256(4, T, d, q, kr, nt, g, sc);
    if (d->G - g == 3) scores256(3, T, d, q, kr, nt, g, sc);
    else if (d->G - g == 2) scores256(2, T, d, q, kr, nt, g, sc);
    else if (d->G - g == 1) scores256(1, T, d, q, kr, nt, g, sc);
    for (g = 0; g < d->G; g++) {
        const float sum = softmax256(d, g, sc + g * KT, nt, m, l, acc);
        l[g] += sum;
    }
    for (g = 0; g + 4 <= d->G; g += 4) values256(4, T, d, vr, nt, g, sc, acc);
    if (d->G - g == 3) values256(3, T, d, vr, nt, g, sc, acc);
    else if (d->G - g == 2) values256(2, T, d, vr, nt, g, sc, acc);
    else if (d->G - g == 1) values256(1, T, d, vr, nt, g, sc, acc);
}
#endif

/* the tile kernels, one per instruction set and KV type */
#define TILE_FN(ATTR, name, kernel, T)                                                                                      \
    ATTR static void name(const dims *d, const float *q, const void *const *kr, const void *const *vr, int nt, float *m,  \
                          float *l, float *acc, float *sc) {                                                             \
        kernel(T, d, q, kr, vr, nt, m, l, acc, sc);                                                                      \
    }
TILE_FN(, tile_c_f32, tile_c, CF_F32)
TILE_FN(, tile_c_bf16, tile_c, CF_BF16)
TILE_FN(, tile_c_f16, tile_c, CF_F16)
#ifdef CF_X86
TILE_FN(AVX512, tile_avx512_f32, tile_avx512, CF_F32)
TILE_FN(AVX512, tile_avx512_bf16, tile_avx512, CF_BF16)
TILE_FN(AVX512, tile_avx512_f16, tile_avx512, CF_F16)
TILE_FN(AVX2, tile_avx2_f32, tile_avx2, CF_F32)
TILE_FN(AVX2, tile_avx2_bf16, tile_avx2, CF_BF16)
TILE_FN(AVX2, tile_avx2_f16, tile_avx2, CF_F16)
#endif

static tile_fn tile_for(cf_cpu_isa_level isa, cf_dtype kvt) {
    const int t = kvt == CF_BF16 ? 1 : kvt == CF_F16 ? 2 : 0;
#ifdef CF_X86
    static const tile_fn avx512[3] = {tile_avx512_f32, tile_avx512_bf16, tile_avx512_f16};
    static const tile_fn avx2[3] = {tile_avx2_f32, tile_avx2_bf16, tile_avx2_f16};
    if (isa == CF_ISA_AVX512) return avx512[t];
    if (isa == CF_ISA_AVX2) return avx2[t];
#endif
    static const tile_fn c[3] = {tile_c_f32, tile_c_bf16, tile_c_f16};
    return c[t];
}

/* ---- the driver ---- */

static int row_pos(const cf_attn_call *c, int i) { return c->pos ? c->pos[i] : c->pos0 + i; }
static int row_lo(const cf_attn_call *c, int p) { return c->window > 0 && p - c->window + 1 > 0 ? p - c->window + 1 : 0; }

static int64_t cache_row(const cf_attn_call *c, int i, int j) {
    if (!c->table) return j % c->cap;
    const int32_t *t = c->table + (int64_t)c->row_seq[i] * c->table_stride;
    return (int64_t)t[j / c->block] * c->block + j % c->block;
}

/* the cache rows (all heads) of keys a .. b - 1 of row i, b - a <= BLOCK_KEYS */
static void rows_of(const cf_attn_call *c, int i, int a, int b, const char **kb, const char **vb) {
    const size_t es = cf_dtype_size(c->kv_dtype);
    for (int j = a; j < b; j++) {
        const int64_t r = cache_row(c, i, j);
        kb[j - a] = (const char *)c->k + (size_t)(r * c->ks) * es;
        vb[j - a] = (const char *)c->v + (size_t)(r * c->vs) * es;
    }
}

/* keys a .. b-1 (b - a <= BLOCK_KEYS) of row i for kv heads h0 .. h0 + nh - 1, head h0 + h into (m[h], l[h],
 * acc[h]): tile by tile, every head on a tile before the next tile, so that the tile's cache rows (all heads' keys
 * or values of a position side by side) come from memory once and are used whole while they are in cache. */
static void attend(const cf_attn_call *c, const dims *d, tile_fn tile, int i, int h0, int nh, int a, int b, int fetch,
                   float *const *m, float *const *l, float *const *acc, float *sc) {
    const char *kb[BLOCK_KEYS], *vb[BLOCK_KEYS];
    const void *kr[KT], *vr[KT];
    const int es = (int)cf_dtype_size(c->kv_dtype), n = b - a;
    rows_of(c, i, a, b, kb, vb);
    for (int h = 0; h < nh; h++) {
        for (int g = 0; g < d->G; g++) m[h][g] = -INFINITY, l[h][g] = 0;
        memset(acc[h], 0, (size_t)d->G * (size_t)d->vhd * sizeof *acc[h]);
    }
    /* The kernels read a head's slice of each row, rows a cache row apart: a pattern the hardware prefetchers do
     * not follow, and from a cold cache decode attention waited on memory. The block's K rows, then its V rows,
     * are first read in address order (one byte a line), which the prefetchers stream into L2; the tiles then
     * find them there. (Prefill rows share their keys, which stay in cache: fetch is 0 for them.) Measured with
     * bench_cpu_attention's cold table: 25-35% less time than prefetch instructions for every line of the block
     * and of the next tile, which filled the miss queues and stalled. */
    for (int pass = 0; fetch && pass < 2; pass++)
        for (int j = 0; j < n; j++) {
            const char *p = pass ? vb[j] + (int64_t)h0 * d->vhd * es : kb[j] + (int64_t)h0 * d->hd * es;
            const int bytes = nh * (pass ? d->vhd : d->hd) * es;
            for (int e = 0; e < bytes; e += 64) (void)*(const volatile char *)(p + e);
        }
    for (int j0 = 0; j0 < n; j0 += KT) {
        const int nt = n - j0 < KT ? n - j0 : KT;
        for (int h = 0; h < nh; h++) {
            const int64_t ko = (int64_t)(h0 + h) * d->hd * es, vo = (int64_t)(h0 + h) * d->vhd * es;
            for (int j = 0; j < nt; j++) kr[j] = kb[j0 + j] + ko, vr[j] = vb[j0 + j] + vo;
            const float *q = c->q + (int64_t)i * c->qs + (int64_t)(h0 + h) * d->G * d->hd;
            tile(d, q, kr, vr, nt, m[h], l[h], acc[h], sc);
        }
    }
}

/* One call's work. A row's keys are attended in blocks of BLOCK_KEYS from its first key; a row of several
 * blocks merges them in order (M = max m_b, L = sum l_b e^(m_b - M), out = sum acc_b e^(m_b - M) / L), whether
 * its blocks ran on one thread or several: a row's values never depend on the rows batched with it or on
 * the threads. A few rows (decode): tasks are (row, block) with every kv head, spread over the threads, their
 * partial results in `parts`, merged by a second job. Many rows: tasks are (row, kv head), each merging its
 * own blocks in its thread's scratch; where each row is a sequence of its own (a batch of decoding sequences,
 * whose rows share no keys), a task takes the row's every kv head, so that its cache rows are read whole and in
 * address order (see attend) instead of a head's slice at a time, a cache row apart. */
typedef struct attn_job {
    const cf_attn_call *c;
    dims d;
    tile_fn tile;
    int heads;              /* kv heads a task takes: all of them for a few rows or rows of their own, else 1 */
    int few_rows;
    int fetch;              /* rows read in address order before the tiles (attend) */
    int64_t *first;         /* few rows: row i's blocks are numbered first[i] .. first[i + 1] - 1 */
    float *buf, *parts;
    size_t per_thread, part;
    _Atomic int64_t next;   /* the next task to take */
} attn_job;

static int n_blocks(const cf_attn_call *c, int i) {
    const int p = row_pos(c, i), n = p - row_lo(c, p) + 1;
    return (n + BLOCK_KEYS - 1) / BLOCK_KEYS;
}

/* the keys [*a, *b) of block blk of row i */
static void block_keys(const cf_attn_call *c, int i, int blk, int *a, int *b) {
    const int p = row_pos(c, i);
    *a = row_lo(c, p) + blk * BLOCK_KEYS;
    *b = *a + BLOCK_KEYS < p + 1 ? *a + BLOCK_KEYS : p + 1;
}

/* out (G rows of vhd) from nb partial results (G * vhd acc, then G m, then G l), block b's at pa + b * stride */
static void merge(const dims *d, const float *pa, size_t stride, int nb, float *out) {
    for (int g = 0; g < d->G; g++) {
        float M = -INFINITY, L = 0;
        for (int b = 0; b < nb; b++) {
            const float mb = pa[stride * (size_t)b + (size_t)d->G * d->vhd + g];
            if (mb > M) M = mb;
        }
        float *og = out + (int64_t)g * d->vhd;
        memset(og, 0, (size_t)d->vhd * sizeof *og);
        for (int b = 0; b < nb; b++) {
            const float *pb = pa + stride * (size_t)b;
            const float mb = pb[(size_t)d->G * d->vhd + g], lb = pb[(size_t)d->G * d->vhd + d->G + g];
            if (lb == 0) continue;  /* an empty block */
            const float w = expf(mb - M);
            L += lb * w;
            for (int e = 0; e < d->vhd; e++) og[e] += w * pb[(int64_t)g * d->vhd + e];
        }
        const float inv = 1.0f / L;
        for (int e = 0; e < d->vhd; e++) og[e] *= inv;
    }
}

/* keys [a, b) of row i, kv heads h0 .. h0 + H - 1: into the output (a row of one block) or into the partial
 * results at part(h) */
static void run_block(attn_job *j, float *sc, int i, int h0, int a, int b, int whole, float *const *part) {
    const cf_attn_call *c = j->c;
    const dims *d = &j->d;
    const int H = j->heads;
    float *ml = sc + d->G * KT, *m[MAX_GROUP_HEADS], *l[MAX_GROUP_HEADS], *acc[MAX_GROUP_HEADS];
    for (int h = 0; h < H; h++) {
        if (whole) {   /* the accumulator is the output itself, divided by l at the end */
            acc[h] = c->out + (int64_t)i * c->os + (int64_t)(h0 + h) * d->G * d->vhd;
            m[h] = ml + (size_t)h * 2 * d->G;
        } else {
            acc[h] = part[h];
            m[h] = acc[h] + (size_t)d->G * d->vhd;
        }
        l[h] = m[h] + d->G;
    }
    attend(c, d, j->tile, i, h0, H, a, b, j->fetch, m, l, acc, sc);
    if (whole)
        for (int h = 0; h < H; h++)
            for (int g = 0; g < d->G; g++) {
                const float inv = 1.0f / l[h][g];
                for (int e = 0; e < d->vhd; e++) acc[h][(int64_t)g * d->vhd + e] *= inv;
            }
}

static void attn_tasks(void *arg, int t, int T) {
    attn_job *j = arg;
    const cf_attn_call *c = j->c;
    const dims d = j->d;
    float *sc = j->buf + j->per_thread * (size_t)t;
    if (j->few_rows) {
        const int64_t tasks = j->first[c->n_rows];
        for (int64_t k; (k = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed)) < tasks;) {
            int i = 0;
            while (j->first[i + 1] <= k) i++;
            const int nb = (int)(j->first[i + 1] - j->first[i]);
            int a0, a1;
            block_keys(c, i, (int)(k - j->first[i]), &a0, &a1);
            float *part[MAX_GROUP_HEADS];
            for (int h = 0; h < j->heads; h++) part[h] = j->parts + j->part * (size_t)(k * c->n_kv_heads + h);
            run_block(j, sc, i, 0, a0, a1, nb == 1, part);
        }
        return;
    }
    const int H = j->heads, per_row = c->n_kv_heads / H;
    float *local = sc + (size_t)d.G * (KT + 2 * (size_t)H);   /* this thread's partial results: block b, head h at b * H + h */
    const int64_t tasks = (int64_t)c->n_rows * per_row;
    for (int64_t k; (k = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed)) < tasks;) {
        const int i = (int)(k / per_row), h0 = (int)(k % per_row) * H, nb = n_blocks(c, i);
        for (int b = 0; b < nb; b++) {
            int a0, a1;
            block_keys(c, i, b, &a0, &a1);
            float *part[MAX_GROUP_HEADS];
            for (int h = 0; h < H; h++) part[h] = local + j->part * ((size_t)b * H + h);
            run_block(j, sc, i, h0, a0, a1, nb == 1, part);
        }
        if (nb > 1)
            for (int h = 0; h < H; h++)
                merge(&d, local + j->part * h, j->part * H, nb, c->out + (int64_t)i * c->os + (int64_t)(h0 + h) * d.G * d.vhd);
    }
    (void)T;
}

/* few rows: the rows of several blocks, (row, head) pairs shared out among the threads */
static void attn_merge(void *arg, int t, int T) {
    const attn_job *j = arg;
    const cf_attn_call *c = j->c;
    const int64_t pairs = (int64_t)c->n_rows * c->n_kv_heads;
    for (int64_t pr = pairs * t / T; pr < pairs * (t + 1) / T; pr++) {
        const int i = (int)(pr / c->n_kv_heads), h = (int)(pr % c->n_kv_heads);
        const int nb = (int)(j->first[i + 1] - j->first[i]);
        if (nb > 1)
            merge(&j->d, j->parts + j->part * (size_t)(j->first[i] * c->n_kv_heads + h), j->part * (size_t)c->n_kv_heads, nb,
                  c->out + (int64_t)i * c->os + (int64_t)h * j->d.G * j->d.vhd);
    }
}

cinfer_status cf_cpu_attention(const cf_attn_call *c, cf_workers *pool, cf_cpu_isa_level isa, cf_attn_scratch *s, cinfer_error *err) {
    const dims d = {.G = c->n_heads / c->n_kv_heads, .hd = c->head_dim, .vhd = c->v_head_dim, .scale = c->scale, .softcap = c->softcap};
    int64_t keys = 0, first[FEW_ROWS + 1] = {0};
    int max_blocks = 0;
    for (int i = 0; i < c->n_rows; i++) {
        const int p = row_pos(c, i), nb = n_blocks(c, i);
        keys += p - row_lo(c, p) + 1;
        if (nb > max_blocks) max_blocks = nb;
        if (i < FEW_ROWS) first[i + 1] = first[i] + nb;
    }
    const int n_threads = cf_workers_threads(pool);
    const int nt = keys * c->n_heads * (c->head_dim + c->v_head_dim) >= PAR_MIN_WORK && n_threads > 1 ? n_threads : 1;
    const int few_rows = c->n_rows <= FEW_ROWS && c->n_kv_heads <= MAX_GROUP_HEADS;
    /* each row a sequence of its own, checked on neighbours (a batch keeps a sequence's rows together; were it not to,
     * only the split of the work would change, never a value) */
    int own_rows = !few_rows && c->table && c->row_seq && c->n_kv_heads <= MAX_GROUP_HEADS;
    for (int i = 1; own_rows && i < c->n_rows; i++) own_rows = c->row_seq[i] != c->row_seq[i - 1];
    const int heads = few_rows || own_rows ? c->n_kv_heads : 1;
    const size_t part = (size_t)d.G * (size_t)(d.vhd + 2);
    const size_t per_thread = few_rows ? (size_t)d.G * (KT + 2 * (size_t)c->n_kv_heads)
                                       : (size_t)d.G * (KT + 2 * (size_t)heads) + (max_blocks > 1 ? part * (size_t)heads * (size_t)max_blocks : 0);
    const size_t need = per_thread * (size_t)nt + (few_rows ? part * (size_t)(first[c->n_rows] * c->n_kv_heads) : 0);
    if (need > s->floats) {
        float *nb = malloc(need * sizeof *nb);
        if (!nb) return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "attention: out of memory for %zu bytes of work space", need * sizeof *nb);
        free(s->buf);
        s->buf = nb;
        s->floats = need;
    }
    attn_job j = {.c = c, .d = d, .tile = tile_for(isa, c->kv_dtype), .heads = heads, .few_rows = few_rows, .fetch = few_rows || own_rows,
                  .first = first, .buf = s->buf, .parts = s->buf + per_thread * (size_t)nt, .per_thread = per_thread, .part = part};
    atomic_init(&j.next, 0);
    cf_workers_run(pool, nt, attn_tasks, &j);
    if (few_rows && max_blocks > 1) cf_workers_run(pool, nt, attn_merge, &j);
    return CINFER_OK;
}
