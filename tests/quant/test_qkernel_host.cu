/* test_qkernel_host.cu: the arithmetic of the CUDA quantized kernels (backend/cuda/k_quant.cuh), compiled for the
 * host and run without a GPU, against the reference dequantizer (base/qweight.h): each packed value of a 16-byte
 * chunk dotted with a one-hot x gives exactly that value (dot_q4 / dot_q8: the in-place nibble and PRMT tricks and
 * the value order); the GEMV's chunk loop as k_quant.cu runs it (group of chunk c: (c * values a chunk) >> log2 group,
 * scale * sum(x q) + bias * sum(x)) within f32 rounding of the exact product; a tensor-core tile piece
 * (dequant16: value c0 .. c0 + 15 from words c0 * bits / 32 on) equal to the reference values rounded to bf16.
 * Bits 4 and 8, groups 32, 64, 128, scales in bf16, f16 and f32. */
#include "backend/cuda/k_quant.cuh"
extern "C" {
#include "base/qweight.h"
}

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include "../check.h"


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
        /* tile pieces of the tensor-core kernel */
        for (int64_t c0 = 0; c0 < cols; c0 += 16) {
            const uint32_t *pw = row + (BITS == 4 ? c0 / 8 : c0 / 4);
            const int64_t gi = r * G + (c0 >> gsh);
            uint32_t p[8];
            dequant16<BITS>(pw, ld(s, sb, gi), ld(b, sb, gi), p);
            for (int e = 0; e < 16; e++) {
                const uint16_t h = (uint16_t)(p[e / 2] >> (16 * (e % 2)));
                bad_piece += h != cf_f32_to_bf16(wd[c0 + e]);
            }
        }
    }
    CHECK(!bad_onehot, "%d bits group %d %s: %d one-hot dots differ from the packed value", BITS, group, cf_dtype_name(sb), bad_onehot);
    CHECK(!bad_dot, "%d bits group %d %s: %d GEMV rows off", BITS, group, cf_dtype_name(sb), bad_dot);
    CHECK(!bad_piece, "%d bits group %d %s: %d tile values differ from the reference rounded to bf16", BITS, group, cf_dtype_name(sb), bad_piece);
    free(f);
    free(wd);
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
    /* PRMT selector 0x7440 + i: byte i of x, then 0, 0, 0x4B */
    CHECK(q_byte_perm(0xA1B2C3D4u, 0x4B000000u, 0x7440) == 0x4B0000D4u && q_byte_perm(0xA1B2C3D4u, 0x4B000000u, 0x7443) == 0x4B0000A1u,
          "byte_perm emulation");
    printf("%d checks, %d failures\n", checks, failures);
    return failures != 0;
}
