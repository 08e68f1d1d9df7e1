/* stats.h: the chi-square goodness-of-fit test of the sampling tests (sampler and speculative verification):
 * observed counts of drawn tokens against their expected probabilities. */
#ifndef CF_TESTS_STATS_H
#define CF_TESTS_STATS_H

#include <math.h>

/* Regularized upper incomplete gamma Q(a, x): series below a + 1, Lentz continued fraction above. */
static inline double stats_gamma_q(double a, double x) {
    if (x <= 0) return 1;
    double lg = a * log(x) - x - lgamma(a);
    if (x < a + 1) {
        double term = 1 / a, sum = term;
        for (int n = 1; n < 1000; n++) {
            term *= x / (a + n);
            sum += term;
            if (term < sum * 1e-15) break;
        }
        return 1 - sum * exp(lg);
    }
    double b = x + 1 - a, c = 1 / 1e-300, d = 1 / b, h = d;
    for (int i = 1; i < 1000; i++) {
        double an = -i * (i - a);
        b += 2;
        d = an * d + b;
        if (fabs(d) < 1e-300) d = 1e-300;
        c = b + an / c;
        if (fabs(c) < 1e-300) c = 1e-300;
        d = 1 / d;
        double del = d * c;
        h *= del;
        if (fabs(del - 1) < 1e-15) break;
    }
    return exp(lg) * h;
}

/* p-value of counts[0, n) against probabilities prob (draws in all): 0 when a token of probability 0 was
 * drawn; cells expecting fewer than 5 draws are pooled into one. */
static inline double stats_chi_square_p(const long *count, const double *prob, int n, long draws) {
    double chi = 0, pool_e = 0;
    long pool_c = 0;
    int cells = 0;
    for (int i = 0; i < n; i++) {
        if (prob[i] == 0 && count[i]) return 0;
        const double e = prob[i] * (double)draws;
        if (e < 5) {
            pool_e += e;
            pool_c += count[i];
            continue;
        }
        chi += (count[i] - e) * (count[i] - e) / e;
        cells++;
    }
    if (pool_e > 0) {
        chi += (pool_c - pool_e) * (pool_c - pool_e) / pool_e;
        cells++;
    }
    return cells < 2 ? 1 : stats_gamma_q((cells - 1) / 2.0, chi / 2);
}

#endif
