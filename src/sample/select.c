/* select.c: top-k heap selection, small sorts, mass quickselect (plain and bucketed) and gathering
 * over sampler candidates. */
#include "sample/select.h"

#include <math.h>
#include <string.h>
#include "sample/kernels.h"

static int better(cf_cand a, cf_cand b) {
    return a.v > b.v || (a.v == b.v && a.id < b.id);
}

static void swap(cf_cand *a, cf_cand *b) {
    cf_cand t = *a;
    *a = *b;
    *b = t;
}

/* Min-heap by `better`: h[0] is the worst element kept. */
static void sift_down(cf_cand *h, int32_t k, int32_t i) {
    for (;;) {
        int32_t l = 2 * i + 1, r = l + 1, w = i;
        if (l < k && better(h[w], h[l])) w = l;
        if (r < k && better(h[w], h[r])) w = r;
        if (w == i) return;
        swap(&h[i], &h[w]);
        i = w;
    }
}

void cf_select_top_k(const float *v, int32_t n, int32_t k, cf_cand *out) {
    if (k <= 0) return;
    for (int32_t i = 0; i < k; i++) out[i] = (cf_cand){v[i], i};
    for (int32_t i = k / 2 - 1; i >= 0; i--) sift_down(out, k, i);
    /* Later ids lose ties, so only a strictly larger value displaces the root. */
    for (int32_t i = cf_row_next_above(v, n, k, out[0].v); i < n; i = cf_row_next_above(v, n, i + 1, out[0].v)) {
        out[0] = (cf_cand){v[i], i};
        sift_down(out, k, 0);
    }
}

void cf_sort_small(cf_cand *c, int32_t n) {
    for (int32_t i = 1; i < n; i++) {
        cf_cand x = c[i];
        int32_t j = i;
        for (; j > 0 && better(x, c[j - 1]); j--) c[j] = c[j - 1];
        c[j] = x;
    }
}

/* splitmix64 step: deterministic pivot positions, independent of the sampler's random stream. */
static uint64_t next_pos(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static int32_t median3(const cf_cand *c, int32_t a, int32_t b, int32_t d) {
    if (better(c[a], c[b])) {
        if (better(c[b], c[d])) return b;
        return better(c[a], c[d]) ? d : a;
    }
    if (better(c[a], c[d])) return a;
    return better(c[b], c[d]) ? d : b;
}

int32_t cf_select_mass(cf_cand *c, int32_t n, double target) {
    int32_t lo = 0, hi = n;
    double need = target;
    uint64_t x = 0;
    /* Invariant: [0, lo) is kept and weighs target - need; the answer ends inside [lo, hi). */
    while (lo < hi) {
        uint32_t span = (uint32_t)(hi - lo);
        int32_t piv = median3(c, lo + (int32_t)(next_pos(&x) % span), lo + (int32_t)(next_pos(&x) % span),
                              lo + (int32_t)(next_pos(&x) % span));
        swap(&c[piv], &c[hi - 1]);
        cf_cand p = c[hi - 1];
        int32_t m = lo;
        double mass = 0;
        for (int32_t j = lo; j < hi - 1; j++) {
            /* Branch-free Lomuto step: [m, j) holds only worse values, so swapping with c[m] when c[j]
             * is worse too changes nothing that matters. */
            const int b = better(c[j], p);
            mass += b ? c[j].v : 0.0;
            swap(&c[m], &c[j]);
            m += b;
        }
        swap(&c[m], &c[hi - 1]);
        if (m > lo && mass >= need) {
            hi = m;
            continue;
        }
        need -= mass;
        if (p.v >= need) return m + 1;
        need -= p.v;
        lo = m + 1;
    }
    return lo;
}

static uint32_t bucket(float w) {
    uint32_t bits;
    memcpy(&bits, &w, sizeof bits);
    return bits >> 20; /* sign 0, 8 exponent bits, 3 mantissa bits: < 1024 for w in [0, 1] */
}

int32_t cf_select_mass_bucketed(cf_cand *c, int32_t n, double target, double *hist) {
    if (n <= 1024) return cf_select_mass(c, n, target);
    /* Four interleaved histograms keep consecutive updates of one bucket independent. */
    memset(hist, 0, CF_MASS_HIST * sizeof *hist);
    int32_t i = 0;
    for (; i + 4 <= n; i += 4)
        for (int j = 0; j < 4; j++) hist[j * 1024 + bucket(c[i + j].v)] += c[i + j].v;
    for (; i < n; i++) hist[bucket(c[i].v)] += c[i].v;
    double above = 0;
    int32_t b = 1023;
    for (; b >= 0; b--) {
        double mass = hist[b] + hist[1024 + b] + hist[2048 + b] + hist[3072 + b];
        if (above + mass >= target) break;
        above += mass;
    }
    if (b < 0) return n;
    int32_t kept = 0, edge;
    for (i = 0; i < n; i++) { /* branch-free, as in cf_select_mass */
        const int k = bucket(c[i].v) > (uint32_t)b;
        swap(&c[kept], &c[i]);
        kept += k;
    }
    for (i = edge = kept; i < n; i++) {
        const int e = bucket(c[i].v) == (uint32_t)b;
        swap(&c[edge], &c[i]);
        edge += e;
    }
    return kept + cf_select_mass(c + kept, edge - kept, target - above);
}

int32_t cf_gather(const float *w, int32_t n, float min_w, cf_cand *out) {
    const float below = nextafterf(min_w, -INFINITY); /* w > below exactly when w >= min_w */
    int32_t m = 0;
    for (int32_t i = cf_row_next_above(w, n, 0, below); i < n; i = cf_row_next_above(w, n, i, below)) {
        /* Hits cluster where the row is dense: take the next 16 without branches. */
        const int32_t end = n - i < 16 ? n : i + 16;
        for (; i < end; i++) {
            out[m] = (cf_cand){w[i], i};
            m += w[i] > below;
        }
    }
    return m;
}
