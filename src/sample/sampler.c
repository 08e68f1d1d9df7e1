/* sampler.c: the cf_sampler object: token history, logits processors, temperature, truncation,
 * the seeded draw and log-probabilities (order and costs documented in sampler.h). */
#include "sample/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "base/status.h"
#include "sample/kernels.h"
#include "sample/select.h"

struct cf_sampler {
    cf_sampling_params p;
    cf_logit_bias *bias;    /* p.logit_bias points here */
    int32_t vocab;
    int32_t *hist;
    size_t n_hist, cap_hist;
    int32_t *count;         /* [vocab], all zero between calls */
    cf_cand *cand;          /* [vocab] scratch */
    float *w;               /* [vocab] scratch: unnormalized probabilities */
    double *blocks;         /* [vocab / CF_EXP_BLOCK rounded up] block sums of w */
    double *mass_hist;      /* [CF_MASS_HIST] */
};

cinfer_status cf_sampler_create(const cf_sampling_params *p, int32_t vocab, cf_sampler **out,
                                cinfer_error *err) {
    *out = NULL;
    CF_TRY(cf_sampling_validate(p, vocab, err));
    cf_sampler *s = calloc(1, sizeof *s);
    if (!s) return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "sampler: out of memory");
    s->p = *p;
    s->vocab = vocab;
    s->count = calloc((size_t)vocab, sizeof *s->count);
    s->cand = malloc((size_t)vocab * sizeof *s->cand);
    s->w = malloc((size_t)vocab * sizeof *s->w);
    s->blocks = malloc(((size_t)vocab + CF_EXP_BLOCK - 1) / CF_EXP_BLOCK * sizeof *s->blocks);
    s->mass_hist = malloc(CF_MASS_HIST * sizeof *s->mass_hist);
    if (p->n_logit_bias > 0) {
        s->bias = malloc((size_t)p->n_logit_bias * sizeof *s->bias);
        if (s->bias) memcpy(s->bias, p->logit_bias, (size_t)p->n_logit_bias * sizeof *s->bias);
    }
    s->p.logit_bias = s->bias;
    if (!s->count || !s->cand || !s->w || !s->blocks || !s->mass_hist || (p->n_logit_bias > 0 && !s->bias)) {
        cf_sampler_free(s);
        return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "sampler: out of memory for a vocabulary of %d", (int)vocab);
    }
    *out = s;
    return CINFER_OK;
}

void cf_sampler_free(cf_sampler *s) {
    if (!s) return;
    free(s->bias);
    free(s->hist);
    free(s->count);
    free(s->cand);
    free(s->w);
    free(s->blocks);
    free(s->mass_hist);
    free(s);
}

cinfer_status cf_sampler_accept_many(cf_sampler *s, const int32_t *tokens, size_t n, cinfer_error *err) {
    for (size_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= s->vocab)
            return cf_fail(err, CINFER_E_TOKEN_OUT_OF_RANGE, "token %d at position %zu is outside [0, %d)",
                           (int)tokens[i], i, (int)s->vocab);
    if (s->n_hist + n > s->cap_hist) {
        size_t cap = s->cap_hist ? s->cap_hist : 256;
        while (cap < s->n_hist + n) cap *= 2;
        int32_t *h = realloc(s->hist, cap * sizeof *h);
        if (!h) return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "sampler: out of memory for %zu history tokens", cap);
        s->hist = h;
        s->cap_hist = cap;
    }
    memcpy(s->hist + s->n_hist, tokens, n * sizeof *tokens);
    s->n_hist += n;
    return CINFER_OK;
}

cinfer_status cf_sampler_accept(cf_sampler *s, int32_t token, cinfer_error *err) {
    return cf_sampler_accept_many(s, &token, 1, err);
}

void cf_sampler_truncate(cf_sampler *s, size_t n) {
    s->n_hist = n < s->n_hist ? s->n_hist - n : 0;
}

size_t cf_sampler_history_len(const cf_sampler *s) {
    return s->n_hist;
}

/* The last `window` history tokens (all of them for 0). */
static const int32_t *tail(const cf_sampler *s, int32_t window, size_t *n) {
    *n = window > 0 && (size_t)window < s->n_hist ? (size_t)window : s->n_hist;
    return s->hist + (s->n_hist - *n);
}

static void process(cf_sampler *s, float *l) {
    const cf_sampling_params *p = &s->p;
    int32_t *count = s->count;
    size_t n;
    for (int32_t i = 0; i < p->n_logit_bias; i++) l[p->logit_bias[i].token] += p->logit_bias[i].bias;

    if (p->repetition_penalty != 1.0f) {
        const int32_t *w = tail(s, p->repetition_window, &n);
        for (size_t i = 0; i < n; i++) {
            int32_t t = w[i];
            if (count[t]) continue;
            count[t] = 1;
            l[t] = l[t] > 0 ? l[t] / p->repetition_penalty : l[t] * p->repetition_penalty;
        }
        for (size_t i = 0; i < n; i++) count[w[i]] = 0;
    }

    if (p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f) {
        const int32_t *w = tail(s, p->penalty_window, &n);
        for (size_t i = 0; i < n; i++) count[w[i]]++;
        for (size_t i = 0; i < n; i++) {
            int32_t t = w[i];
            if (!count[t]) continue;
            l[t] -= p->presence_penalty;
            l[t] -= (float)count[t] * p->frequency_penalty;
            count[t] = 0;
        }
    }
}

/* xoshiro256** (Blackman & Vigna), seeded per step through splitmix64. */
typedef struct rng {
    uint64_t s[4];
} rng;

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) {
    return (x << k) | (x >> (64 - k));
}

static uint64_t rng_next(rng *r) {
    uint64_t *s = r->s, out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
}

static rng rng_for_step(uint64_t seed, uint64_t step) {
    uint64_t x = seed;
    x = splitmix64(&x) ^ (step * 0xD1B54A32D192ED03ull);
    rng r;
    for (int i = 0; i < 4; i++) r.s[i] = splitmix64(&x);
    return r;
}

/* 24 bits: exactly a float, so a device-side draw handed the same uniform as an F32 (cf_sampler_uniform)
 * picks the same token. */
static double rng_uniform(rng *r) {
    return (double)(rng_next(r) >> 40) * 0x1.0p-24;
}

/* The first token at which the running sum of w passes target, walking whole blocks first. Should
 * rounding leave the walk short, the last token with weight in the block reached. */
static int32_t draw_row(const float *w, int32_t n, const double *blocks, double target) {
    const int32_t n_blocks = (n + CF_EXP_BLOCK - 1) / CF_EXP_BLOCK;
    double acc = 0;
    int32_t b = 0;
    for (; b < n_blocks - 1 && acc + blocks[b] <= target; b++) acc += blocks[b];
    const int32_t end = n - b * CF_EXP_BLOCK < CF_EXP_BLOCK ? n : (b + 1) * CF_EXP_BLOCK;
    int32_t last = -1;
    for (int32_t i = b * CF_EXP_BLOCK; i < end; i++) {
        if (w[i] <= 0) continue;
        last = i;
        acc += w[i];
        if (acc > target) break;
    }
    return last;
}

/* Temperature, top-k, top-p, min-p, draw with the uniform u. lmax is the largest logit (finite). */
static int32_t draw(cf_sampler *s, const float *l, float lmax, double u) {
    const cf_sampling_params *p = &s->p;
    const float inv_t = 1.0f / p->temperature;
    cf_cand *c = s->cand;
    const int32_t V = s->vocab;
    const bool top_k = p->top_k > 0 && p->top_k < V, top_p = p->top_p < 1.0f, min_p = p->min_p > 0.0f;
    int32_t n = 0;
    double z = 0;

    if (top_k) {
        cf_select_top_k(l, V, p->top_k, c);
        n = p->top_k;
        for (int32_t i = 0; i < n; i++) z += c[i].v = cf_exp_neg((c[i].v - lmax) * inv_t);
    } else if (top_p) {
        /* The tokens lighter than (1 - top_p) z / V weigh less than (1 - top_p) z together, so the
         * nucleus lies among the heavier ones: usually a few hundred. */
        z = cf_row_exp(l, s->w, V, lmax, inv_t, NULL);
        float min_w = (float)((1 - (double)p->top_p) * z / V * 0.999);
        n = cf_gather(s->w, V, min_w > p->min_p ? min_w : p->min_p, c);
    } else if (min_p) {
        /* Only the survivors need exp; the compare is loosened so that rounding in the exp cannot
         * drop a token the exact test below keeps. */
        const float cut = lmax + (logf(p->min_p) - 1e-3f) * p->temperature;
        for (int32_t i = cf_row_next_above(l, V, 0, cut); i < V; i = cf_row_next_above(l, V, i + 1, cut))
            c[n++] = (cf_cand){cf_exp_neg((l[i] - lmax) * inv_t), i};
    } else {
        const double total = cf_row_exp(l, s->w, V, lmax, inv_t, s->blocks);
        return draw_row(s->w, V, s->blocks, u * total);
    }

    /* Top-p and min-p each keep a best-first prefix of what top-k left, so either order gives the
     * shorter of the two prefixes: min-p's cheap filter goes first. The largest weight is 1. */
    if (min_p) {
        int32_t m = 0;
        for (int32_t i = 0; i < n; i++)
            if (c[i].v >= p->min_p) c[m++] = c[i];
        n = m;
    }
    if (top_p) n = cf_select_mass_bucketed(c, n, (double)p->top_p * z, s->mass_hist);

    double kept = 0;
    for (int32_t i = 0; i < n; i++) kept += c[i].v;
    double target = u * kept, acc = 0;
    int32_t last = c[0].id;
    for (int32_t i = 0; i < n; i++) {
        if (c[i].v <= 0) continue;
        acc += c[i].v;
        last = c[i].id;
        if (acc > target) break;
    }
    return last;
}

float cf_sampler_uniform(const cf_sampler *s) { return cf_sampler_uniform_ahead(s, 0); }

float cf_sampler_uniform_ahead(const cf_sampler *s, size_t k) {
    rng r = rng_for_step(s->p.seed, s->n_hist + k);
    return (float)rng_uniform(&r);
}

cinfer_status cf_sampler_sample(cf_sampler *s, float *l, cf_sample_result *out, cinfer_error *err) {
    return cf_sampler_sample_u(s, l, cf_sampler_uniform(s), out, err);
}

cinfer_status cf_sampler_sample_u(cf_sampler *s, float *l, float u, cf_sample_result *out, cinfer_error *err) {
    const cf_sampling_params *p = &s->p;
    const int32_t V = s->vocab;
    CF_TRY(cf_sampling_check_uniform(u, err));
    process(s, l);

    bool bad;
    const float lmax = cf_row_max(l, V, &bad);
    if (bad)
        for (int32_t i = 0; i < V; i++)
            if (isnan(l[i]) || l[i] == INFINITY)
                return cf_fail(err, CINFER_E_NOT_A_NUMBER, "logit of token %d is %s after processing", (int)i,
                               isnan(l[i]) ? "NaN" : "+inf");
    if (lmax == -INFINITY)
        return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "every logit is -inf: no token can be sampled");

    const bool greedy = cf_sampling_is_greedy(p->temperature);
    out->token = greedy ? cf_row_next_above(l, V, 0, nextafterf(lmax, -INFINITY)) : draw(s, l, lmax, (double)u);
    out->logprob = 0;
    out->n_top = 0;

    if (p->logprobs || p->top_logprobs > 0) {
        const double log_sum = log(cf_row_exp(l, s->w, V, lmax, 1.0f, NULL));
        out->logprob = (float)((double)(l[out->token] - lmax) - log_sum);
        int32_t k = p->top_logprobs < V ? p->top_logprobs : V;
        cf_cand top[CF_MAX_TOP_LOGPROBS];
        cf_select_top_k(l, V, k, top);
        cf_sort_small(top, k);
        for (int32_t i = 0; i < k; i++)
            out->top[i] = (cf_token_logprob){top[i].id, (float)((double)(top[i].v - lmax) - log_sum)};
        out->n_top = k;
    }
    return CINFER_OK;
}
