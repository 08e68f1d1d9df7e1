/* select.h: partial selection over (value, id) candidates, used by the sampler: the k best without a
 * full sort, the smallest best-first prefix reaching a given mass (plain and bucketed), and gathering
 * the heavy entries of a row. "Best" is the total order (value desc, id asc), so ties always resolve
 * to the lowest id. Owned by src/sample/select.c. */
#ifndef CF_SAMPLE_SELECT_H
#define CF_SAMPLE_SELECT_H

#include <stdint.h>

typedef struct cf_cand {
    float v;        /* a logit or an unnormalized probability, never NaN */
    int32_t id;
} cf_cand;

/* Writes the k best of v[0..n) to out (k <= n), in no particular order. A size-k heap whose root is
 * the worst kept: O(n) compares when most values lose to the root (the usual case), O(n log k) worst. */
void cf_select_top_k(const float *v, int32_t n, int32_t k, cf_cand *out);

/* Sorts best first; insertion sort, meant for small n (top logprobs). */
void cf_sort_small(cf_cand *c, int32_t n);

/* Reorders c[0..n) (values >= 0: weights) so that the smallest best-first prefix whose summed weight
 * is >= target sits at the front, and returns its length (>= 1 when n >= 1 and target > 0; if
 * rounding leaves the sums short of target, the prefix takes every candidate still in question).
 * Quickselect on mass: O(n) expected, no sort. */
int32_t cf_select_mass(cf_cand *c, int32_t n, double target);

/* Same result as cf_select_mass for weights in [0, 1], faster on large sets: one pass buckets the
 * weights by exponent and top three mantissa bits (steps of 2^(1/8)); everything in buckets above the
 * one where the running mass reaches target is kept without ordering, everything below is dropped,
 * and only that bucket goes through cf_select_mass. hist: CF_MASS_HIST doubles of scratch. */
#define CF_MASS_HIST (4 * 1024)
int32_t cf_select_mass_bucketed(cf_cand *c, int32_t n, double target, double *hist);

/* Copies the (w[i], i) with w[i] >= min_w to out (room for n) in id order; returns how many. */
int32_t cf_gather(const float *w, int32_t n, float min_w, cf_cand *out);

#endif
