/* kernels.h: passes over a whole logits row, written with GCC/Clang vector extensions (4 float lanes:
 * SSE2 on x86-64, NEON on arm64) so they vectorize without -ffast-math: the max and NaN scan, a
 * threshold scan, and a bounded exp with per-block sums. Owned by src/sample/kernels.c. */
#ifndef CF_SAMPLE_KERNELS_H
#define CF_SAMPLE_KERNELS_H

#include <stdbool.h>
#include <stdint.h>

#define CF_EXP_BLOCK 256

/* Largest value of v[0..n); *bad is set when some value is NaN or +inf. */
float cf_row_max(const float *v, int32_t n, bool *bad);

/* The first index j >= i with v[j] > x, or n. Scans 16 values per step: cheap when hits are rare. */
int32_t cf_row_next_above(const float *v, int32_t n, int32_t i, float x);

/* exp(x) for x <= 0 (including -inf): relative error below 3e-7, exactly 0 below -87, exactly 1 at 0.
 * cf_row_exp gives bit-identical results. */
float cf_exp_neg(float x);

/* w[i] = cf_exp_neg((v[i] - shift) * scale) for v[i] <= shift; returns the sum. When blocks is not
 * NULL, blocks[b] receives the sum of w over [b * CF_EXP_BLOCK, (b + 1) * CF_EXP_BLOCK). */
double cf_row_exp(const float *v, float *w, int32_t n, float shift, float scale, double *blocks);

#endif
