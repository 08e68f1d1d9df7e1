/* qweight.h: an MLX affine-quantized matrix in host memory (the layout mlx.nn.quantize and mlx_lm write),
 * with the plain reference dequantizer and the quantizer (MLX's CPU affine_quantize, value for value).
 * The format layer finds these in safetensors files (format/mlx_quant.h); backends take them through
 * upload_qweight (backend/backend.h). */
#ifndef CF_BASE_QWEIGHT_H
#define CF_BASE_QWEIGHT_H

#include <stddef.h>
#include <stdint.h>
#include "base/dtype.h"

/* w[r][c] = scale[r][c / group] * q[r][c] + bias[r][c / group]. The q values are a little-endian bit
 * stream along each row: value c of a row occupies bits [c * bits, (c + 1) * bits) counting from the lowest
 * bit of the row's first uint32 word, so 3-, 5- and 6-bit values straddle words; each row starts a new word
 * (words_per_row = cols * bits / 32). scales and biases: [rows, cols / group] of sb_dtype (F32, F16, BF16).
 * The struct borrows every pointer. */
typedef struct cf_qweight {
    const uint32_t *q;
    const void *scales, *biases;
    cf_dtype sb_dtype;
    int bits;           /* 2, 3, 4, 5, 6, 8 */
    int group;          /* 32, 64, 128 */
    int64_t rows, cols;
} cf_qweight;

/* 1 for the bit widths and group sizes MLX's affine mode has (bits 2, 3, 4, 5, 6, 8; groups 32, 64, 128). */
int cf_qweight_bits_ok(int bits);
int cf_qweight_group_ok(int group);
/* uint32 words per row: cols * bits / 32 (cols a multiple of 32). */
static inline int64_t cf_qweight_words_per_row(int bits, int64_t cols) { return cols * bits / 32; }
/* Bytes of the packed values, scales and biases together. */
int64_t cf_qweight_bytes(const cf_qweight *w);

/* Value c of the packed row (bits wide). */
static inline uint32_t cf_qweight_get(const uint32_t *row, int bits, int64_t c) {
    const uint64_t bit = (uint64_t)c * (uint64_t)bits;
    const uint64_t word = bit >> 5;
    const unsigned sh = (unsigned)(bit & 31);
    uint64_t v = row[word] >> sh;
    if (sh + (unsigned)bits > 32) v |= (uint64_t)row[word + 1] << (32 - sh);
    return (uint32_t)(v & ((1u << bits) - 1u));
}

/* Row r of w as f32 (cols values): fmaf(scale, q, bias) from the stored scale and bias widened to f32 (the
 * value cf_cpu_qgemm multiplies by for 2, 3, 5 and 6 bits; 4 and 8 bits multiply q by int8 activations). */
void cf_qweight_dequant_row(const cf_qweight *w, int64_t r, float *out);

/* Quantizes rows x cols values (cols a multiple of group) as MLX's CPU affine_quantize does, given the
 * values as MLX would read them from a tensor of sb_dtype (convert to f32 first: exact): per group, in f32,
 * scale = max((max - min) / (2^bits - 1), 1e-7), negated unless |min| > |max|; edge = min if |min| > |max|
 * else max; q0 = rint(edge / scale); if q0 != 0: scale = edge / q0 and bias = edge, else bias = 0; each
 * value q = clamp(rint((w - bias) / scale), 0, 2^bits - 1) (rint: round half to even). scale and bias are
 * stored rounded to sb_dtype (nearest even), the q values packed as cf_qweight says.
 * q: rows * words_per_row words; scales, biases: rows * (cols / group) elements of sb_dtype. */
void cf_qweight_quantize(const float *w, int64_t rows, int64_t cols, int bits, int group, cf_dtype sb_dtype, uint32_t *q,
                         void *scales, void *biases);

#endif
