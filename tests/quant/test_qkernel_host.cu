/* test_qkernel_host.cu: the arithmetic of the CUDA quantized kernels (backend/cuda/k_quant.cuh), compiled for the
 * host and run without a GPU, against the reference dequantizer (base/qweight.h): each packed value of a 16-byte
 * chunk dotted with a one-hot x gives exactly that value (dot_q4 / dot_q8: the in-place nibble and PRMT tricks and
 * the value order); the GEMV's chunk loop as k_quant.cu runs it (group of chunk c: (c * values a chunk) >> log2 group,
 * scale * sum(x q) + bias * sum(x)) within f32 rounding of the exact product; the tensor-core GEMM's B fragment pieces
 * (qa_pair4 / qa_pair8: thread t's values 2t, 2t + 1, 2t + 8, 2t + 9 of a k16 step; qa_nibbles' exact 128 + q) equal to
 * the reference values rounded to bf16.
 * Bits 4 and 8, groups 32, 64, 128, scales in bf16, f16 and f32. */
#include "backend/cuda/k_quant.cuh"
extern "C" {
#include "base/qweight.h"
}

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../check.h"


/* half h of a bf16 pair as a float */
static float bf16_of(uint32_t u, int h) { return q_as_float(h ? u & 0xffff0000u : u << 16); }

static uint64_t rng = 11;
static float frand(void) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)(rng >> 40) / (float)(1 << 24) * 2.0f - 1.0f;
}

static float ld(const void *p, cf_dtype t, int64_t i) {
    return t == CF_BF16 ? cf_bf16_to_f32(((const uint16_t *)p)[i]) : t == CF_F16 ? cf_f16_to_f32(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

template <int BITS>
static void run(int group, cf_dtype sb) {
    constexpr int V = 128 / BITS;
    const int64_t rows = 9, cols = 512, wpr = cf_qweight_words_per_row(BITS, cols), G = cols / group;
    const int gsh = group == 32 ? 5 : group == 64 ? 6 : 7;
    float *f = (float *)malloc(sizeof(float) * rows * cols), *wd = (float *)malloc(sizeof(float) * cols), x[512];
    for (int64_t i = 0; i < rows * cols; i++) f[i] = 0.05f * frand() + (i % 37 == 0 ? 0.1f : 0.0f);
    uint32_t *q = (uint32_t *)malloc(4 * rows * wpr);
    void *s = malloc(4 * rows * G), *b = malloc(4 * rows * G);
    cf_qweight_quantize(f, rows, cols, BITS, group, sb, q, s, b);
    const cf_qweight w = {q, s, b, sb, BITS, group, rows, cols};
    int bad_onehot = 0, bad_dot = 0, bad_piece = 0;
    for (int64_t r = 0; r < rows; r++) {
        cf_qweight_dequant_row(&w, r, wd);
        const uint32_t *row = q + r * wpr;
        /* one-hot x: each value of each chunk exactly */
        for (int64_t c = 0; c < cols * BITS / 128; c++) {
            const uint4 u = make_uint4(row[4 * c], row[4 * c + 1], row[4 * c + 2], row[4 * c + 3]);
            for (int e = 0; e < V; e++) {
                float xo[V] = {0};
                xo[e] = 1.0f;
                float got;
                if constexpr (BITS == 4) got = dot_q4(u, xo);
                else got = dot_q8(u, xo);
                bad_onehot += got != (float)cf_qweight_get(row, BITS, c * V + e);
            }
        }
        /* the GEMV's chunk loop */
        for (int t = 0; t < 3; t++) {
            for (int64_t c = 0; c < cols; c++) x[c] = frand();
            float acc = 0.0f;
            for (int64_t c = 0; c < cols * BITS / 128; c++) {
                const uint4 u = make_uint4(row[4 * c], row[4 * c + 1], row[4 * c + 2], row[4 * c + 3]);
                const int64_t gi = r * G + ((c * V) >> gsh);
                const float sc = ld(s, sb, gi), bi = ld(b, sb, gi);
                float xf[V];
                for (int e = 0; e < V; e++) xf[e] = x[c * V + e];
                float sx = 0.0f;
                for (int e = 0; e < V; e++) sx += xf[e];
                float dq;
                if constexpr (BITS == 4) dq = dot_q4(u, xf);
                else dq = dot_q8(u, xf);
                acc = fmaf(sc, dq, fmaf(bi, sx, acc));
            }
            double ref = 0, mag2 = 0;
            for (int64_t c = 0; c < cols; c++) {
                ref += (double)x[c] * wd[c];
                mag2 += fabs((double)x[c]) * (fabs((double)wd[c]) + 2.0 * fabs((double)ld(b, sb, r * G + c / group)));
            }
            if (!(fabs(acc - ref) <= 4.0 * cols * 5.96e-8 * mag2 + 1e-6)) {
                if (bad_dot++ < 3) fprintf(stderr, "  row %lld: %.8g against %.8g\n", (long long)r, acc, ref);
            }
        }
        /* the tensor-core GEMM's B fragment pieces: thread t's values 2t, 2t + 1 and 2t + 8, 2t + 9 of each k16 step */
        for (int64_t c0 = 0; c0 < cols; c0 += 16) {
            const int64_t gi = r * G + (c0 >> gsh);
            const float sc = ld(s, sb, gi), bi = ld(b, sb, gi);
            for (int t = 0; t < 4; t++) {
                uint32_t p[2];
                if constexpr (BITS == 4) {
                    for (int h = 0; h < 2; h++) {
                        const uint32_t w = row[c0 / 8 + h];
                        p[h] = qa_pair4(w, t, sc, bi);
                        const uint32_t n = qa_nibbles(w, qa_sel(t));   /* (128 + q) pairs: the same values through them */
                        bad_piece += qa_pair4(w, t, sc, bi) != pack_bf16(fmaf(sc, bf16_of(n, 0) - 128.0f, bi), fmaf(sc, bf16_of(n, 1) - 128.0f, bi));
                    }
                } else {
                    p[0] = qa_pair8(row[c0 / 4 + t / 2], 2 * (t & 1), sc, bi);
                    p[1] = qa_pair8(row[c0 / 4 + 2 + t / 2], 2 * (t & 1), sc, bi);
                }
                const int64_t v[4] = {c0 + 2 * t, c0 + 2 * t + 1, c0 + 2 * t + 8, c0 + 2 * t + 9};
                for (int e = 0; e < 4; e++) bad_piece += (uint16_t)(p[e / 2] >> (16 * (e % 2))) != cf_f32_to_bf16(wd[v[e]]);
            }
        }
    }
    CHECK(!bad_onehot, "%d bits group %d %s: %d one-hot dots differ from the packed value", BITS, group, cf_dtype_name(sb), bad_onehot);
    CHECK(!bad_dot, "%d bits group %d %s: %d GEMV rows off", BITS, group, cf_dtype_name(sb), bad_dot);
    CHECK(!bad_piece, "%d bits group %d %s: %d GEMM fragment values differ from the reference rounded to bf16", BITS, group, cf_dtype_name(sb), bad_piece);
    free(f);
    free(wd);
    free(q);
    free(s);
    free(b);
}

/* ---- the tensor-core GEMV's fragments (qgemv_tc_kernel), emulated for one warp ---- */

static float bf16_lo(uint32_t u) { return q_as_float(u << 16); }
static float bf16_hi(uint32_t u) { return q_as_float(u & 0xffff0000u); }
static uint16_t to_bf16(float f) {   /* round to nearest even, as activations are stored */
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* d += A b for the warp's fragments, laid out as PTX's mma.m16n8k16 .row.col says: thread (gid, tig) holds A
 * (row gid, cols 2tig, 2tig + 1) in a[0], (row gid + 8, same cols) in a[1], (row gid, cols 2tig + 8, + 9) in a[2],
 * (row gid + 8, those) in a[3]; B (rows k = 2tig, 2tig + 1, col gid) in b[0], (k + 8) in b[1]; D (row gid, cols 2tig,
 * 2tig + 1) in d[0..1], (row gid + 8) in d[2..3]. */
static void mma_emulate(float (&d)[32][4], const uint32_t (&a)[32][4], const uint32_t (&b)[32][2]) {
    double A[16][16], B[16][8];
    for (int l = 0; l < 32; l++) {
        const int gid = l / 4, tig = l % 4;
        for (int h = 0; h < 2; h++) {
            const int r = gid + 8 * h;
            A[r][2 * tig] = bf16_lo(a[l][h]);
            A[r][2 * tig + 1] = bf16_hi(a[l][h]);
            A[r][2 * tig + 8] = bf16_lo(a[l][2 + h]);
            A[r][2 * tig + 9] = bf16_hi(a[l][2 + h]);
            B[2 * tig + 8 * h][gid] = bf16_lo(b[l][h]);
            B[2 * tig + 8 * h + 1][gid] = bf16_hi(b[l][h]);
        }
    }
    for (int l = 0; l < 32; l++) {
        const int gid = l / 4, tig = l % 4;
        for (int e = 0; e < 4; e++) {
            const int r = gid + 8 * (e / 2), c = 2 * tig + e % 2;
            double v = 0;
            for (int k = 0; k < 16; k++) v += A[r][k] * B[k][c];
            d[l][e] += (float)v;
        }
    }
}

/* 15 weight rows x cols, n activation rows: one warp's whole loop as qgemv_tc_kernel runs it (each group's words
 * dealt to the quad by quarters, two MMAs a word, MMA row 15 the sum row of zero words, its results shuffled from
 * lanes 28-31, tc_group_end) against the reference dequantized product */
template <int BITS>
static void run_tc(int group, cf_dtype sbt, int n, int64_t cols) {
    const int64_t rows = 15, wpr = cf_qweight_words_per_row(BITS, cols), G = cols / group;
    const int wg = group * BITS / 32, qw = wg / 4, vpw = 32 / BITS;   /* words a group, a quarter; values a word */
    float *f = (float *)malloc(sizeof(float) * rows * cols), *wd = (float *)malloc(sizeof(float) * rows * cols);
    float *x = (float *)malloc(sizeof(float) * 8 * cols);
    uint16_t *xb = (uint16_t *)calloc((size_t)(8 * cols), 2);
    for (int64_t i = 0; i < rows * cols; i++) f[i] = 0.05f * frand() + (i % 37 == 0 ? 0.1f : 0.0f) + 0.02f;
    for (int64_t i = 0; i < n * cols; i++) {
        xb[i] = to_bf16(2.0f * frand());
        x[i] = bf16_lo(xb[i]);
    }
    uint32_t *q = (uint32_t *)malloc(4 * rows * wpr);
    void *s = malloc(4 * rows * G), *b = malloc(4 * rows * G);
    cf_qweight_quantize(f, rows, cols, BITS, group, sbt, q, s, b);
    const cf_qweight w = {q, s, b, sbt, BITS, group, rows, cols};
    for (int64_t r = 0; r < rows; r++) cf_qweight_dequant_row(&w, r, wd + r * cols);

    float acc[32][4] = {};
    for (int64_t grp = 0; grp < G; grp++) {
        float c[32][4] = {};
        for (int j = 0; j < qw; j++)
            for (int st = 0; st < 2; st++) {
                uint32_t A[32][4], B[32][2];
                for (int l = 0; l < 32; l++) {
                    const int gi = l / 4, t = l % 4;
                    const int64_t word = grp * wg + t * qw + j;   /* of the row */
                    const uint32_t wA = q[gi * wpr + word], wB = gi < 7 ? q[(gi + 8) * wpr + word] : 0u;   /* row 15: the sum row */
                    uint32_t pa[4], pb[4], xp[4], bb[2];
                    uint16_t xv[8] = {};
                    if (gi < n)
                        for (int e = 0; e < vpw; e++) xv[e] = xb[gi * cols + word * vpw + e];
                    if (BITS == 4) {
                        tc_wpairs(wA, pa);
                        tc_wpairs(wB, pb);
                        tc_xpairs(make_uint4(xv[0] | (uint32_t)xv[1] << 16, xv[2] | (uint32_t)xv[3] << 16, xv[4] | (uint32_t)xv[5] << 16,
                                             xv[6] | (uint32_t)xv[7] << 16),
                                  xp);
                    } else {
                        tc_wpairs8(wA, pa, TC_HI8);
                        tc_wpairs8(wB, pb, gi < 7 ? TC_HI8 : 0u);
                        tc_xpairs8(make_uint2(xv[0] | (uint32_t)xv[1] << 16, xv[2] | (uint32_t)xv[3] << 16), xp);
                    }
                    tc_frags(pa, pb, xp, st, A[l], bb);
                    B[l][0] = bb[0];
                    B[l][1] = bb[1];
                }
                mma_emulate(c, A, B);
            }
        for (int l = 0; l < 32; l++) {
            const int gi = l / 4, t = l % 4;
            /* the (scale, bias) word the kernel reads: a bf16/f16 pair built from the two arrays */
            const uint16_t *s16 = (const uint16_t *)s, *b16 = (const uint16_t *)b;
            const int rb = gi < 7 ? gi + 8 : 0;   /* the sum row's pair: any finite one (its sums are not kept) */
            const uint32_t wa = s16[gi * G + grp] | (uint32_t)b16[gi * G + grp] << 16;
            const uint32_t wb = s16[rb * G + grp] | (uint32_t)b16[rb * G + grp] << 16;
            tc_group_end(acc[l], c[l], c[28 + t][2], c[28 + t][3], tc_sb(wa, sbt == CF_F16), tc_sb(wb, sbt == CF_F16),
                         BITS == 4 ? 128.0f : 2176.0f);
        }
    }
    int bad = 0;
    double worst = 0;
    for (int l = 0; l < 32; l++)
        for (int e = 0; e < 4; e++) {
            const int r = l / 4 + 8 * (e / 2), a = 2 * (l % 4) + e % 2;
            if (a >= n || r == 15) continue;
            double ref = 0, mag = 0;
            for (int64_t k = 0; k < cols; k++) {
                ref += (double)wd[r * cols + k] * x[a * cols + k];
                mag += fabs((double)wd[r * cols + k] * x[a * cols + k]);
            }
            const double err = fabs(acc[l][e] - ref) / (mag + 1e-30);
            worst = err > worst ? err : worst;
            bad += err > 2e-6 * sqrt((double)cols);
        }
    CHECK(bad == 0, "tensor-core GEMV, %d bits, group %d, %s pairs, %d activation rows, k %lld: %d sums off (worst %.3g of sum |w x|)",
          BITS, group, sbt == CF_F16 ? "f16" : "bf16", n, (long long)cols, bad, worst);
    free(f);
    free(wd);
    free(x);
    free(xb);
    free(q);
    free(s);
    free(b);
}

int main(void) {
    const int groups[3] = {32, 64, 128};
    const cf_dtype sbs[3] = {CF_BF16, CF_F16, CF_F32};
    for (int g = 0; g < 3; g++)
        for (int t = 0; t < 3; t++) {
            run<4>(groups[g], sbs[t]);
            run<8>(groups[g], sbs[t]);
        }
    for (int g = 0; g < 3; g++)
        for (int n = 1; n <= 8; n += 3) {
            run_tc<4>(groups[g], CF_BF16, n, 1024);
            run_tc<4>(groups[g], CF_F16, n, 256);
            run_tc<8>(groups[g], CF_BF16, n, 1024);
            run_tc<8>(groups[g], CF_F16, n, 256);
        }
    /* PRMT selector 0x7440 + i: byte i of x, then 0, 0, 0x4B */
    CHECK(q_byte_perm(0xA1B2C3D4u, 0x4B000000u, 0x7440) == 0x4B0000D4u && q_byte_perm(0xA1B2C3D4u, 0x4B000000u, 0x7443) == 0x4B0000A1u,
          "byte_perm emulation");
    printf("%d checks, %d failures\n", checks, failures);
    return failures != 0;
}
