/* qweight.c: the reference dequantizer and the MLX-exact quantizer of base/qweight.h. */
#include "base/qweight.h"

#include <math.h>
#include <string.h>

int cf_qweight_bits_ok(int bits) { return bits == 2 || bits == 3 || bits == 4 || bits == 5 || bits == 6 || bits == 8; }
int cf_qweight_group_ok(int group) { return group == 32 || group == 64 || group == 128; }

int64_t cf_qweight_bytes(const cf_qweight *w) {
    const int64_t groups = w->rows * (w->cols / w->group);
    return w->rows * cf_qweight_words_per_row(w->bits, w->cols) * 4 + 2 * groups * (int64_t)cf_dtype_size(w->sb_dtype);
}

static float load(const void *p, cf_dtype t, int64_t i) {
    switch (t) {
    case CF_BF16: return cf_bf16_to_f32(((const uint16_t *)p)[i]);
    case CF_F16: return cf_f16_to_f32(((const uint16_t *)p)[i]);
    default: return ((const float *)p)[i];
    }
}

static void store(void *p, cf_dtype t, int64_t i, float v) {
    switch (t) {
    case CF_BF16: ((uint16_t *)p)[i] = cf_f32_to_bf16(v); break;
    case CF_F16: ((uint16_t *)p)[i] = cf_f32_to_f16(v); break;
    default: ((float *)p)[i] = v; break;
    }
}

void cf_qweight_dequant_row(const cf_qweight *w, int64_t r, float *out) {
    const uint32_t *row = w->q + r * cf_qweight_words_per_row(w->bits, w->cols);
    const int64_t G = w->cols / w->group;
    for (int64_t g = 0; g < G; g++) {
        const float s = load(w->scales, w->sb_dtype, r * G + g), b = load(w->biases, w->sb_dtype, r * G + g);
        for (int64_t c = g * w->group; c < (g + 1) * w->group; c++) out[c] = fmaf(s, (float)cf_qweight_get(row, w->bits, c), b);
    }
}

void cf_qweight_quantize(const float *w, int64_t rows, int64_t cols, int bits, int group, cf_dtype sb_dtype, uint32_t *q,
                         void *scales, void *biases) {
    const float n_bins = (float)((1 << bits) - 1), eps = 1e-7f;
    const int64_t wpr = cf_qweight_words_per_row(bits, cols), G = cols / group;
    for (int64_t r = 0; r < rows; r++) {
        uint32_t *qr = q + r * wpr;
        memset(qr, 0, (size_t)wpr * sizeof *qr);
        for (int64_t g = 0; g < G; g++) {
            const float *x = w + r * cols + g * group;
            float mn = INFINITY, mx = -INFINITY;
            for (int j = 0; j < group; j++) {
                mx = fmaxf(mx, x[j]);
                mn = fminf(mn, x[j]);
            }
            const int neg_side = fabsf(mn) > fabsf(mx);
            float scale = fmaxf((mx - mn) / n_bins, eps);
            if (!neg_side) scale = -scale;
            const float edge = neg_side ? mn : mx;
            const float q0 = rintf(edge / scale);
            float bias = 0.0f;
            if (q0 != 0.0f) {
                scale = edge / q0;
                bias = edge;
            }
            for (int j = 0; j < group; j++) {
                float v = rintf((x[j] - bias) / scale);
                v = fminf(fmaxf(v, 0.0f), n_bins);
                const uint64_t bit = (uint64_t)(g * group + j) * (uint64_t)bits;
                const uint64_t val = (uint64_t)v << (bit & 31);
                qr[bit >> 5] |= (uint32_t)val;
                if ((bit & 31) + (uint64_t)bits > 32) qr[(bit >> 5) + 1] |= (uint32_t)(val >> 32);
            }
            store(scales, sb_dtype, r * G + g, scale);
            store(biases, sb_dtype, r * G + g, bias);
        }
    }
}
