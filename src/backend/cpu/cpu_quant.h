/* cpu_quant.h: the CPU matrix product against MLX affine-quantized weights (2, 3, 4, 5, 6, 8 bits, groups
 * of 32, 64, 128 along the input dimension), f32 activations (rounded to int8 per block of 32 for 4 and 8
 * bits) and outputs, with runtime selection between AVX-512 (with VNNI), AVX2+FMA+F16C and portable C. Owns
 * nothing: the weights are read in place (from the mmap). */
#ifndef CF_BACKEND_CPU_QUANT_H
#define CF_BACKEND_CPU_QUANT_H

#include <stdint.h>

#include "backend/cpu/cpu_kernels.h"
#include "base/dtype.h"

/* An MLX affine-quantized weight matrix: w[r][c] = scale[r][c / group] * q[r][c] + bias[r][c / group],
 * q packed `bits` per value little-endian from the lowest bits of uint32 words along each row (3, 5 and 6
 * bits straddle words), each row starting a new word: words_per_row = cols * bits / 32. */
typedef struct cf_qmat {
    const uint32_t *q;
    const void *scales, *biases;  /* [rows, cols / group] of sb_dtype: CF_BF16, CF_F16 or CF_F32 */
    cf_dtype sb_dtype;
    int bits;                     /* 2, 3, 4, 5, 6, 8 */
    int group;                    /* 32, 64, 128 */
    int64_t rows, cols;           /* output features, input features */
    const uint8_t *tiles;         /* NULL, or the same weights regrouped by cf_cpu_qpack (AVX2 and AVX-512) */
} cf_qmat;

/* The 4- and 8-bit weights regrouped for the AVX2 and AVX-512 VNNI kernels: weight rows as vector lanes, so a block's
 * dot products need no horizontal sums, and one sequential stream per 16 rows. Per tile of 16 rows (a partial
 * last tile repeats its last row), cf_cpu_qpack_tile_bytes each, in order:
 *  - per line of 64 bytes of scales (2 groups of 16 rows' scales for 16-bit sb_dtype, 1 for f32; zeros past
 *    the last group): the line, then the blocks of its groups, each as bits vectors of 64 bytes whose lane m
 *    is row m's 32-bit word t of the block (t = 0 .. bits - 1);
 *  - the biases, in lines as the scales.
 * The bytes are those of the matrix (same values, same scale and bias types), regrouped. */
int64_t cf_cpu_qpack_tile_bytes(const cf_qmat *w);
/* The packed copy of w (4 or 8 bits; ceil(rows / 16) tiles, 64-byte aligned): the caller frees it; NULL when
 * w is not 4- or 8-bit or out of memory. */
uint8_t *cf_cpu_qpack(const cf_qmat *w);
/* Whether kernels that read the packed copy run here (AVX2, AVX-512 VNNI): a copy is worth making. */
int cf_cpu_qpack_useful(void);

/* out[i][r - r0] = sum_c x[i][c] * w[r][c] for i < n and weight rows r0 <= r < r1 (x: f32 rows of stride xs,
 * out: f32 rows of stride os). Every output element is computed the same way whatever n, r0, r1 and the
 * thread count (batch invariance: a sequence's logits must not depend on its batch), and the same bits on
 * AVX-512, AVX2 and portable C. Single-threaded; the caller splits rows between threads.
 *
 * 4 and 8 bits (int8 activations, as llama.cpp's Q8_0 activations for its Q4_0 and Q8_0 weights): each row of x
 * is quantized per block of 32 columns: amax = max |x| over the block, d = amax / 127 (f32),
 * xq = rint(x * (127 / amax)) in [-127, 127] (0 where amax is 0; a NaN or infinity in the block makes its d
 * NaN). Per block b of weight row r (group g = b * 32 / group): P = sum of q * xq over the block, an exact
 * integer; acc = fmaf((float)P, scale_g * d_b, acc) over the blocks in order from acc = 0 (scale_g * d_b
 * rounded to f32 first); then per group in order acc = fmaf(bias_g, xs_g, acc), where xs_g is the fma chain
 * over g's blocks of d_b * (float)(sum of the block's xq) from 0. Scales and biases are widened to f32. The
 * error against the exact product is the activations' rounding, at most d / 2 per column (times |w|), plus
 * the chain's f32 roundings.
 * 2, 3, 5, 6 bits (f32 activations): each weight is dequantized to f32 as w = fmaf(scale, (float)q, bias);
 * a 16-lane accumulator, lane l, takes fmaf(x[c], w[c], acc[l]) for c = l, l + 16, l + 32, ... in order; then
 * the lanes are summed by one tree, distance 8 first, then 4, 2, 1.
 * Preconditions (the loader checks them and reports CINFER_E_FORMAT): cols is a multiple of group, bits and
 * group are among those above, sb_dtype is BF16, F16 or F32, 0 <= r0 <= r1 <= rows; a matrix that breaks them
 * gives NaN outputs (the sizes of q, scales and biases cannot be checked here), as does a 4- or 8-bit call whose
 * scratch cannot be allocated. */
void cf_cpu_qgemm(const float *x, int64_t xs, int64_t n, const cf_qmat *w, int64_t r0, int64_t r1,
                  float *out, int64_t os);

/* The same computed by one instruction set's kernels; returns 0 (and computes nothing) when this CPU or
 * build lacks it: for tests and benchmarks. */
int cf_cpu_qgemm_isa(cf_cpu_isa_level isa, const float *x, int64_t xs, int64_t n, const cf_qmat *w, int64_t r0,
                     int64_t r1, float *out, int64_t os);

#endif
