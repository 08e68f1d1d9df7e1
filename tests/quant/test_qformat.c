/* test_qformat.c: the MLX affine format without a backend. A plain-C reference dequantizer (bit by bit
 * from the packed stream) against words packed by hand for every bit width (straddling 3/5/6-bit values
 * included) and against cf_qweight_get / cf_qweight_dequant_row; cf_qweight_quantize on groups whose MLX
 * result is worked out by hand (both sides, round half to even, max == min); the quantize-then-dequantize
 * error bound on random data for every bits x group; config.json's quantization block. */
#include "base/qweight.h"
#include "format/mlx_quant.h"
#include "check.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* the reference: value c of a packed row, one bit at a time */
static uint32_t ref_get(const uint32_t *row, int bits, int64_t c) {
    uint32_t v = 0;
    for (int k = 0; k < bits; k++) {
        const int64_t bit = c * bits + k;
        v |= ((row[bit / 32] >> (bit % 32)) & 1u) << k;
    }
    return v;
}

static float ref_load(const void *p, cf_dtype t, int64_t i) {
    if (t == CF_BF16) return cf_bf16_to_f32(((const uint16_t *)p)[i]);
    if (t == CF_F16) return cf_f16_to_f32(((const uint16_t *)p)[i]);
    return ((const float *)p)[i];
}

static float ref_dequant(const cf_qweight *w, int64_t r, int64_t c) {
    const uint32_t *row = w->q + r * (w->cols * w->bits / 32);
    const int64_t g = r * (w->cols / w->group) + c / w->group;
    return fmaf(ref_load(w->scales, w->sb_dtype, g), (float)ref_get(row, w->bits, c), ref_load(w->biases, w->sb_dtype, g));
}

/* 32 values (7i + 3) mod 2^bits packed by hand, little-endian from the lowest bit */
static void test_hand_packings(void) {
    static const struct { int bits; uint32_t w[8]; } P[] = {
        {2, {0x1b1b1b1bu, 0x1b1b1b1bu}},
        {3, {0x53977053u, 0x70539770u, 0x97705397u}},
        {4, {0x4d6f81a3u, 0xc5e7092bu, 0x4d6f81a3u, 0xc5e7092bu}},
        {5, {0x4dfc4543u, 0x78245ba3u, 0x0753617du, 0x4b276cf4u, 0xe55c7066u}},
        {6, {0x9f611283u, 0x90bbd2d9u, 0xb2579740u, 0x8f201eb3u, 0x9cab91d5u, 0x71538703u}},
        {8, {0x18110a03u, 0x342d261fu, 0x5049423bu, 0x6c655e57u, 0x88817a73u, 0xa49d968fu, 0xc0b9b2abu, 0xdcd5cec7u}},
    };
    for (size_t k = 0; k < sizeof P / sizeof P[0]; k++) {
        const int bits = P[k].bits;
        CHECK(cf_qweight_words_per_row(bits, 32) == bits, "%d bits: %lld words for 32 values", bits,
              (long long)cf_qweight_words_per_row(bits, 32));
        int bad_ref = 0, bad_get = 0;
        for (int c = 0; c < 32; c++) {
            const uint32_t want = (uint32_t)(7 * c + 3) % (1u << bits);
            bad_ref += ref_get(P[k].w, bits, c) != want;
            bad_get += cf_qweight_get(P[k].w, bits, c) != want;
        }
        CHECK(!bad_ref && !bad_get, "%d bits: %d values wrong by the reference, %d by cf_qweight_get", bits, bad_ref, bad_get);
        /* the quantizer packs the same values: x = top - v with x[0] = top and x[1] = 0, so min 0, max top =
         * 2^bits - 1, |min| <= |max|: scale -(top / top) = -1, edge top, q0 = -top, scale top / -top = -1,
         * bias top, and q(x) = rint((x - top) / -1) = v exactly (c >= 2) */
        float x[32];
        const float top = (float)((1 << bits) - 1);
        for (int c = 0; c < 32; c++) x[c] = top - (float)((7 * c + 3) % (1 << bits));
        x[0] = top;
        x[1] = 0.0f;
        uint32_t q[8] = {0};
        float s = 0, b = 0;
        cf_qweight_quantize(x, 1, 32, bits, 32, CF_F32, q, &s, &b);
        int bad_q = cf_qweight_get(q, bits, 0) != 0 || cf_qweight_get(q, bits, 1) != (uint32_t)top;
        for (int c = 2; c < 32; c++) bad_q += cf_qweight_get(q, bits, c) != (uint32_t)(7 * c + 3) % (1u << bits);
        CHECK(!bad_q && s == -1.0f && b == top, "%d bits: quantizer: %d values wrong, scale %g bias %g (want -1, %g)", bits, bad_q,
              (double)s, (double)b, (double)top);
    }
}

/* cf_qweight_dequant_row against the reference for every bits x group x scale dtype */
static void test_dequant_row(void) {
    const int bits_l[] = {2, 3, 4, 5, 6, 8}, groups[] = {32, 64, 128};
    const cf_dtype dts[] = {CF_F32, CF_BF16, CF_F16};
    const int64_t rows = 3, cols = 256;
    uint64_t seed = 42;
    for (int bi = 0; bi < 6; bi++)
        for (int gi = 0; gi < 3; gi++)
            for (int di = 0; di < 3; di++) {
                const int bits = bits_l[bi], group = groups[gi];
                const int64_t wpr = cf_qweight_words_per_row(bits, cols), G = cols / group;
                uint32_t *q = malloc((size_t)(rows * wpr) * 4);
                float sf[3 * 8], bf[3 * 8];
                uint16_t sh[3 * 8], bh[3 * 8];
                for (int64_t i = 0; i < rows * wpr; i++) {
                    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
                    q[i] = (uint32_t)(seed >> 32);
                }
                for (int64_t i = 0; i < rows * G; i++) {
                    sf[i] = 0.01f * (float)(i + 1) * (i % 2 ? -1.0f : 1.0f);
                    bf[i] = -0.3f + 0.07f * (float)i;
                    sh[i] = dts[di] == CF_BF16 ? cf_f32_to_bf16(sf[i]) : cf_f32_to_f16(sf[i]);
                    bh[i] = dts[di] == CF_BF16 ? cf_f32_to_bf16(bf[i]) : cf_f32_to_f16(bf[i]);
                }
                const cf_qweight w = {.q = q, .scales = dts[di] == CF_F32 ? (void *)sf : (void *)sh,
                                      .biases = dts[di] == CF_F32 ? (void *)bf : (void *)bh, .sb_dtype = dts[di], .bits = bits,
                                      .group = group, .rows = rows, .cols = cols};
                float out[256];
                int bad = 0;
                for (int64_t r = 0; r < rows; r++) {
                    cf_qweight_dequant_row(&w, r, out);
                    for (int64_t c = 0; c < cols; c++) bad += out[c] != ref_dequant(&w, r, c);
                }
                CHECK(!bad, "dequant_row %d bits group %d %s: %d values differ from the reference", bits, group, cf_dtype_name(dts[di]), bad);
                free(q);
            }
}

/* groups whose MLX quantization is worked out by hand (see each comment) */
static void test_hand_quantize(void) {
    float x[32], s, b;
    uint32_t q[8];
    /* 2 bits: -1 at even, 2 at odd. min -1, max 2: |min| <= |max| so scale = -(3 / 3) = -1, edge = max = 2,
     * q0 = rint(2 / -1) = -2 != 0: scale = 2 / -2 = -1, bias = 2. q(2) = 0, q(-1) = rint(-3 / -1) = 3:
     * pairs (3, 0) = 0b0011 per 4 bits -> 0x33333333 twice. */
    for (int c = 0; c < 32; c++) x[c] = c % 2 ? 2.0f : -1.0f;
    cf_qweight_quantize(x, 1, 32, 2, 32, CF_F32, q, &s, &b);
    CHECK(q[0] == 0x33333333u && q[1] == 0x33333333u && s == -1.0f && b == 2.0f, "2-bit hand case: %08x %08x scale %g bias %g", q[0],
          q[1], (double)s, (double)b);
    /* 4 bits, halves: values 0, 15, 0.5, 1.5, 2.5, then 0. scale -1, bias 15 (as above), q = rint(15 - w):
     * 15, 0, rint(14.5) = 14, rint(13.5) = 14, rint(12.5) = 12 (half to even; half away from zero would give
     * 15, 14, 13), then 15. */
    for (int c = 0; c < 32; c++) x[c] = 0.0f;
    x[1] = 15.0f, x[2] = 0.5f, x[3] = 1.5f, x[4] = 2.5f;
    cf_qweight_quantize(x, 1, 32, 4, 32, CF_F32, q, &s, &b);
    const uint32_t want4[5] = {15, 0, 14, 14, 12};
    int bad = 0;
    for (int c = 0; c < 5; c++) bad += cf_qweight_get(q, 4, c) != want4[c];
    for (int c = 5; c < 32; c++) bad += cf_qweight_get(q, 4, c) != 15;
    CHECK(!bad && s == -1.0f && b == 15.0f, "4-bit halves: %d values wrong, scale %g bias %g", bad, (double)s, (double)b);
    /* 2 bits, the negative side: min -4, max 1: |min| > |max| so scale = 5 / 3, edge = -4,
     * q0 = rint(-4 / (5/3)) = rint(-2.4) = -2: scale = -4 / -2 = 2, bias = -4. q(1) = rint(5 / 2) = 2 (even),
     * q(0) = 2, q(-3) = rint(0.5) = 0, q(-4) = 0, q(-1) = rint(1.5) = 2. */
    const float in5[5] = {-4, 1, 0, -3, -1};
    const uint32_t want2[5] = {0, 2, 2, 0, 2};
    for (int c = 0; c < 32; c++) x[c] = c < 5 ? in5[c] : -4.0f;
    cf_qweight_quantize(x, 1, 32, 2, 32, CF_F32, q, &s, &b);
    bad = 0;
    for (int c = 0; c < 5; c++) bad += cf_qweight_get(q, 2, c) != want2[c];
    CHECK(!bad && s == 2.0f && b == -4.0f, "2-bit negative side: %d values wrong, scale %g bias %g", bad, (double)s, (double)b);
    /* max == min: scale = max(0, 1e-7) negated = -1e-7, edge 0.75, q0 = rint(-7.5e6) != 0: scale =
     * 0.75 / q0, bias = 0.75; every q is rint(0) = 0, so each value comes back as exactly 0.75. All zero:
     * q0 = 0, scale -1e-7, bias 0, values 0. */
    for (int c = 0; c < 32; c++) x[c] = 0.75f;
    cf_qweight_quantize(x, 1, 32, 8, 32, CF_F32, q, &s, &b);
    bad = 0;
    for (int c = 0; c < 32; c++) bad += cf_qweight_get(q, 8, c) != 0;
    CHECK(!bad && b == 0.75f && s < 0 && s > -2e-7f, "constant group: %d nonzero q, scale %g bias %g", bad, (double)s, (double)b);
    for (int c = 0; c < 32; c++) x[c] = 0.0f;
    cf_qweight_quantize(x, 1, 32, 8, 32, CF_F32, q, &s, &b);
    CHECK(q[0] == 0 && s == -1e-7f && b == 0.0f, "zero group: q %08x scale %g bias %g", q[0], (double)s, (double)b);
    /* bf16 scales: stored rounded to nearest even, q computed from the f32 scale (MLX packs before it casts) */
    for (int c = 0; c < 32; c++) x[c] = (float)c / 31.0f * 0.3f - 0.1f;
    uint16_t sb16, bb16;
    float sf, bf;
    uint32_t q16[8], q32[8];
    cf_qweight_quantize(x, 1, 32, 4, 32, CF_BF16, q16, &sb16, &bb16);
    cf_qweight_quantize(x, 1, 32, 4, 32, CF_F32, q32, &sf, &bf);
    CHECK(!memcmp(q16, q32, sizeof(uint32_t) * 4) && sb16 == cf_f32_to_bf16(sf) && bb16 == cf_f32_to_bf16(bf),
          "bf16 scales: packing or rounding differs from the f32 run");
}

/* quantize then dequantize, random data: an element inside the group's range [bias, bias + n * scale] is
 * within |scale| / 2 of its value (plus f32 rounding); one beyond it (only at the far edge, after MLX moves
 * the scale so the near edge sits on a level) is clipped to the range end, within |scale| of it. */
static void test_round_trip(void) {
    const int bits_l[] = {2, 3, 4, 5, 6, 8}, groups[] = {32, 64, 128};
    const int64_t rows = 16, cols = 512;
    float *x = malloc((size_t)(rows * cols) * sizeof *x), *y = malloc((size_t)cols * sizeof *y);
    uint64_t seed = 7;
    for (int64_t i = 0; i < rows * cols; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = ((float)(seed >> 40) / (float)(1 << 24) - 0.5f) * (i % 3 == 0 ? 0.2f : 0.05f) + (i % 512 < 64 ? -0.03f : 0.0f);
    }
    for (int bi = 0; bi < 6; bi++)
        for (int gi = 0; gi < 3; gi++) {
            const int bits = bits_l[bi], group = groups[gi];
            const int64_t wpr = cf_qweight_words_per_row(bits, cols), G = cols / group;
            uint32_t *q = malloc((size_t)(rows * wpr) * 4);
            float *s = malloc((size_t)(rows * G) * 4), *b = malloc((size_t)(rows * G) * 4);
            cf_qweight_quantize(x, rows, cols, bits, group, CF_F32, q, s, b);
            const cf_qweight w = {.q = q, .scales = s, .biases = b, .sb_dtype = CF_F32, .bits = bits, .group = group, .rows = rows, .cols = cols};
            int bad = 0, clipped = 0;
            double worst = 0;
            const float nb = (float)((1 << bits) - 1);
            for (int64_t r = 0; r < rows; r++) {
                cf_qweight_dequant_row(&w, r, y);
                for (int64_t c = 0; c < cols; c++) {
                    const int64_t g = r * G + c / group;
                    const float sc = fabsf(s[g]), lo = fminf(b[g], b[g] + nb * s[g]), hi = fmaxf(b[g], b[g] + nb * s[g]);
                    const float v = x[r * cols + c], e = fabsf(y[c] - v);
                    const int inside = v >= lo - 1e-7f && v <= hi + 1e-7f;
                    const float bound = inside ? sc * 0.5f * (1 + 1e-4f) + 1e-7f : sc * (1 + 1e-4f);
                    clipped += !inside;
                    if (e > bound) bad++;
                    if (e / sc > worst) worst = e / sc;
                }
            }
            CHECK(!bad, "round trip %d bits group %d: %d elements beyond the bound (worst %.3f scales, %d clipped)", bits, group, bad,
                  worst, clipped);
            if (bits == 4 && group == 64) printf("round trip q4/g64: worst error %.3f scales, %d of %lld elements clipped\n", worst, clipped,
                                                 (long long)(rows * cols));
            free(q);
            free(s);
            free(b);
        }
    free(x);
    free(y);
}

static void test_config(void) {
    cf_mlxq_config c;
    cinfer_error e = {0};
    cinfer_status st = cf_mlxq_config_parse("{\"quantization\": {\"group_size\": 64, \"bits\": 4, \"mode\": \"affine\", "
                                            "\"model.layers.0.mlp.down_proj\": {\"group_size\": 32, \"bits\": 8}, "
                                            "\"lm_head\": false}}",
                                            "cfg", &c, &e);
    CHECK(st == CINFER_OK && c.present && c.bits == 4 && c.group == 64 && c.n_ov == 2, "mixed config: %d %s", st, e.message);
    if (st == CINFER_OK && c.n_ov == 2) {
        CHECK(!strcmp(c.ov[0].path, "model.layers.0.mlp.down_proj") && c.ov[0].quantized && c.ov[0].bits == 8 && c.ov[0].group == 32,
              "override 0");
        CHECK(!strcmp(c.ov[1].path, "lm_head") && !c.ov[1].quantized, "override 1 (false)");
    }
    cf_mlxq_config_free(&c);
    st = cf_mlxq_config_parse("{\"quantization_config\": {\"group_size\": 128, \"bits\": 3}}", "cfg", &c, &e);
    CHECK(st == CINFER_OK && c.present && c.bits == 3 && c.group == 128, "quantization_config only: %d %s", st, e.message);
    cf_mlxq_config_free(&c);
    st = cf_mlxq_config_parse("{\"hidden_size\": 8}", "cfg", &c, &e);
    CHECK(st == CINFER_OK && !c.present, "no block: %d", st);
    cf_mlxq_config_free(&c);
    const struct { const char *json, *needle; cinfer_status code; } bad[] = {
        {"{\"quantization\": {\"group_size\": 32, \"bits\": 4, \"mode\": \"mxfp4\"}}", "mxfp4", CINFER_E_UNSUPPORTED},
        {"{\"quantization\": {\"group_size\": 64, \"bits\": 7}}", "7 bits", CINFER_E_UNSUPPORTED},
        {"{\"quantization\": {\"group_size\": 16, \"bits\": 4}}", "group size 16", CINFER_E_UNSUPPORTED},
        {"{\"quantization_config\": {\"quant_method\": \"gptq\", \"bits\": 4}}", "gptq", CINFER_E_UNSUPPORTED},
        {"{\"quantization\": {\"group_size\": 64, \"bits\": 4, \"m.x\": {\"bits\": 4, \"mode\": \"nvfp4\"}}}", "m.x", CINFER_E_UNSUPPORTED},
        {"{\"quantization\": {\"bits\": 4}}", "group_size", CINFER_E_FORMAT},
        {"{\"quantization\": {\"group_size\": 64, \"bits\": \"4\"}}", "bits", CINFER_E_FORMAT},
        {"{\"quantization\": 4}", "not an object", CINFER_E_FORMAT},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        memset(&e, 0, sizeof e);
        st = cf_mlxq_config_parse(bad[i].json, "cfg", &c, &e);
        CHECK(st == bad[i].code && strstr(e.message, bad[i].needle), "bad config %zu: status %d, message '%s'", i, st, e.message);
        cf_mlxq_config_free(&c);
    }
}

int main(void) {
    test_hand_packings();
    test_dequant_row();
    test_hand_quantize();
    test_round_trip();
    test_config();
    printf("%d checks, %d failures\n", checks, failures);
    return failures != 0;
}
