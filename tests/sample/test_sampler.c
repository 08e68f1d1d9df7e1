/* test_sampler.c: sampler correctness. Validation codes, processors against hand-computed values,
 * argmax ties, log-probabilities against a direct log-softmax, seeded determinism, selection helpers
 * against full sorts, the vectorized row kernels against scalar references, and chi-square goodness of fit of the sampled distributions (with a check that
 * the chi-square routine rejects a wrong distribution). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "sample/sampler.h"
#include "sample/kernels.h"
#include "sample/select.h"

#include "../check.h"
#include "../stats.h"

/* Test-side generator for logits, unrelated to the sampler's. */
static uint64_t tstate = 88172645463325252ull;
static double trand(void) {
    tstate ^= tstate << 13;
    tstate ^= tstate >> 7;
    tstate ^= tstate << 17;
    return (double)(tstate >> 11) * 0x1.0p-53;
}
static float tgauss(void) {
    double u = trand(), v = trand();
    return (float)(sqrt(-2 * log(u + 1e-300)) * cos(6.283185307179586 * v));
}

static cf_sampler *make(const cf_sampling_params *p, int32_t vocab) {
    cf_sampler *s = NULL;
    cinfer_error err = {0};
    cinfer_status st = cf_sampler_create(p, vocab, &s, &err);
    CHECK(st == CINFER_OK, "create: %s", err.message);
    return s;
}

/* ---- validation ---- */

static void expect_code(cf_sampling_params p, int32_t vocab, cinfer_status want, const char *field) {
    cinfer_error err = {0};
    cinfer_status got = cf_sampling_validate(&p, vocab, &err);
    CHECK(got == want, "%s: got %s, want %s", field, cinfer_status_name(got), cinfer_status_name(want));
    CHECK(got == CINFER_OK || strstr(err.message, field), "message \"%s\" does not name %s", err.message, field);
    cf_sampler *s = (cf_sampler *)1;
    CHECK(cf_sampler_create(&p, vocab, &s, NULL) == want && (want == CINFER_OK ? s != NULL : s == NULL),
          "create disagrees with validate on %s", field);
    cf_sampler_free(want == CINFER_OK ? s : NULL);
}

static void test_validation(void) {
    const cf_sampling_params d = cf_sampling_default_params();
    CHECK(d.temperature == 1.0f && d.top_p == 1.0f && d.top_k == 0 && d.min_p == 0.0f &&
              d.repetition_penalty == 1.0f && d.presence_penalty == 0.0f && d.frequency_penalty == 0.0f &&
              d.n_logit_bias == 0 && d.top_logprobs == 0 && !d.logprobs,
          "defaults are not neutral");
    expect_code(d, 100, CINFER_OK, "");
    cf_sampling_params p;
#define BAD(field, value, code)      \
    p = d;                           \
    p.field = value;                 \
    expect_code(p, 100, code, #field)
    BAD(temperature, -0.1f, CINFER_E_TEMPERATURE);
    BAD(temperature, NAN, CINFER_E_NOT_A_NUMBER);
    BAD(temperature, INFINITY, CINFER_E_NOT_A_NUMBER);
    BAD(top_k, -1, CINFER_E_TOP_K);
    BAD(top_p, 0.0f, CINFER_E_TOP_P);
    BAD(top_p, 1.01f, CINFER_E_TOP_P);
    BAD(top_p, NAN, CINFER_E_NOT_A_NUMBER);
    BAD(min_p, -0.01f, CINFER_E_MIN_P);
    BAD(min_p, 1.5f, CINFER_E_MIN_P);
    BAD(min_p, -INFINITY, CINFER_E_NOT_A_NUMBER);
    BAD(repetition_penalty, 0.0f, CINFER_E_PENALTY);
    BAD(repetition_penalty, NAN, CINFER_E_NOT_A_NUMBER);
    BAD(repetition_window, -1, CINFER_E_PENALTY);
    BAD(presence_penalty, 2.5f, CINFER_E_PENALTY);
    BAD(frequency_penalty, -2.5f, CINFER_E_PENALTY);
    BAD(penalty_window, -3, CINFER_E_PENALTY);
    BAD(top_logprobs, 21, CINFER_E_TOP_LOGPROBS);
    BAD(top_logprobs, -1, CINFER_E_TOP_LOGPROBS);
#undef BAD
    p = d;
    p.top_p = 1.0f;
    p.min_p = 1.0f;
    p.top_logprobs = 20;
    p.top_k = 1000;
    expect_code(p, 100, CINFER_OK, "");
    cf_logit_bias bad_id[] = {{5, 1.0f}, {100, 2.0f}};
    p = d;
    p.logit_bias = bad_id;
    p.n_logit_bias = 2;
    expect_code(p, 100, CINFER_E_TOKEN_OUT_OF_RANGE, "logit_bias");
    bad_id[1] = (cf_logit_bias){-1, 2.0f};
    expect_code(p, 100, CINFER_E_TOKEN_OUT_OF_RANGE, "logit_bias");
    bad_id[1] = (cf_logit_bias){7, NAN};
    expect_code(p, 100, CINFER_E_NOT_A_NUMBER, "logit_bias");
    expect_code(d, 0, CINFER_E_INVALID_ARGUMENT, "vocabulary");

    cf_sampler *s = make(&d, 10);
    cinfer_error err = {0};
    CHECK(cf_sampler_accept(s, 10, &err) == CINFER_E_TOKEN_OUT_OF_RANGE, "accept out of range");
    int32_t toks[] = {1, 2, -1};
    CHECK(cf_sampler_accept_many(s, toks, 3, &err) == CINFER_E_TOKEN_OUT_OF_RANGE, "accept_many out of range");
    CHECK(cf_sampler_history_len(s) == 0, "a refused accept changed the history");
    float nan_row[10] = {0, 1, NAN};
    cf_sample_result r;
    CHECK(cf_sampler_sample(s, nan_row, &r, &err) == CINFER_E_NOT_A_NUMBER, "NaN logit accepted");
    float inf_row[10] = {0, INFINITY};
    CHECK(cf_sampler_sample(s, inf_row, &r, &err) == CINFER_E_NOT_A_NUMBER, "+inf logit accepted");
    float masked[10];
    for (int i = 0; i < 10; i++) masked[i] = -INFINITY;
    CHECK(cf_sampler_sample(s, masked, &r, &err) == CINFER_E_INVALID_ARGUMENT, "all -inf accepted");
    cf_sampler_free(s);
}

/* ---- processors ---- */

static void test_penalties(void) {
    const float base[8] = {1.0f, -2.0f, 3.0f, 0.5f, -0.5f, 2.0f, 0.0f, 4.0f};
    const int32_t hist[] = {2, 5, 2, 1, 2, 6, 1};
    cf_logit_bias bias[] = {{3, 1.5f}, {4, -1.0f}, {0, 0.25f}};
    cf_sampling_params p = cf_sampling_default_params();
    p.temperature = 0;
    p.logit_bias = bias;
    p.n_logit_bias = 3;
    p.repetition_penalty = 2.0f;
    p.repetition_window = 4;   /* last 4: 1 2 6 1 */
    p.presence_penalty = 0.5f;
    p.frequency_penalty = 0.25f;
    p.penalty_window = 0;      /* all: 2 x3, 5 x1, 1 x2, 6 x1 */
    float want[8] = {
        1.0f + 0.25f,
        -2.0f * 2.0f - 0.5f - 2 * 0.25f,
        3.0f / 2.0f - 0.5f - 3 * 0.25f,
        0.5f + 1.5f,
        -0.5f - 1.0f,
        2.0f - 0.5f - 1 * 0.25f,
        0.0f - 0.5f - 1 * 0.25f,
        4.0f,
    };
    cf_sampler *s = make(&p, 8);
    CHECK(cf_sampler_accept_many(s, hist, 7, NULL) == CINFER_OK, "accept");
    float l[8];
    memcpy(l, base, sizeof l);
    cf_sample_result r;
    CHECK(cf_sampler_sample(s, l, &r, NULL) == CINFER_OK, "sample");
    for (int i = 0; i < 8; i++) CHECK(fabsf(l[i] - want[i]) < 1e-6f, "token %d: %g, want %g", i, l[i], want[i]);
    CHECK(r.token == 7, "greedy after penalties: %d", r.token);

    /* Truncating by 3 leaves 2 5 2 1: all of it in both windows. */
    cf_sampler_truncate(s, 3);
    CHECK(cf_sampler_history_len(s) == 4, "truncate");
    memcpy(l, base, sizeof l);
    CHECK(cf_sampler_sample(s, l, &r, NULL) == CINFER_OK, "sample");
    float want2[8] = {
        1.0f + 0.25f,
        -2.0f * 2.0f - 0.5f - 1 * 0.25f,
        3.0f / 2.0f - 0.5f - 2 * 0.25f,
        0.5f + 1.5f,
        -0.5f - 1.0f,
        2.0f / 2.0f - 0.5f - 1 * 0.25f,
        0.0f,
        4.0f,
    };
    for (int i = 0; i < 8; i++) CHECK(fabsf(l[i] - want2[i]) < 1e-6f, "after truncate token %d: %g, want %g", i, l[i], want2[i]);
    cf_sampler_truncate(s, 100);
    CHECK(cf_sampler_history_len(s) == 0, "truncate past the start");
    cf_sampler_free(s);

    /* Window 2 for presence/frequency: only 6 1. */
    p = cf_sampling_default_params();
    p.temperature = 0;
    p.frequency_penalty = -1.0f;
    p.penalty_window = 2;
    s = make(&p, 8);
    cf_sampler_accept_many(s, hist, 7, NULL);
    memcpy(l, base, sizeof l);
    cf_sampler_sample(s, l, &r, NULL);
    for (int i = 0; i < 8; i++) {
        float w = base[i] + (i == 6 || i == 1 ? 1.0f : 0.0f);
        CHECK(l[i] == w, "frequency window token %d: %g, want %g", i, l[i], w);
    }
    cf_sampler_free(s);
}

static void test_greedy_ties(void) {
    cf_sampling_params p = cf_sampling_default_params();
    p.temperature = 0;
    cf_sampler *s = make(&p, 6);
    float l[6] = {1, 3, -2, 3, 3, 0};
    cf_sample_result r;
    CHECK(cf_sampler_sample(s, l, &r, NULL) == CINFER_OK && r.token == 1, "tie went to %d, want 1", r.token);
    float l2[6] = {-INFINITY, -INFINITY, -5, -5, -INFINITY, -6};
    CHECK(cf_sampler_sample(s, l2, &r, NULL) == CINFER_OK && r.token == 2, "tie went to %d, want 2", r.token);
    cf_sampler_free(s);
    /* top_k = 1 at a positive temperature is greedy too, with the same tie rule. */
    p.temperature = 0.8f;
    p.top_k = 1;
    s = make(&p, 6);
    for (int i = 0; i < 50; i++) {
        float l3[6] = {1, 3, -2, 3, 3, 0};
        cf_sampler_sample(s, l3, &r, NULL);
        CHECK(r.token == 1, "top_k 1 gave %d", r.token);
        cf_sampler_accept(s, r.token, NULL);
    }
    cf_sampler_free(s);
}

/* ---- log-probabilities ---- */

static int cmp_desc(const void *a, const void *b) {
    const cf_cand *x = a, *y = b;
    if (x->v != y->v) return x->v > y->v ? -1 : 1;
    return x->id < y->id ? -1 : 1;
}

static void test_logprobs(void) {
    enum { V = 3000 };
    static float base[V], l[V];
    static double lp[V];
    static cf_cand sorted[V];
    for (int i = 0; i < V; i++) base[i] = 3 * tgauss();
    base[23] = base[2999] = 9.0f; /* a tie at the top */
    cf_logit_bias bias[] = {{5, 4.0f}};
    const float temps[] = {0.0f, 0.5f, 1.7f};
    for (int t = 0; t < 3; t++) {
        cf_sampling_params p = cf_sampling_default_params();
        p.temperature = temps[t];
        p.top_k = t == 1 ? 50 : 0;
        p.top_p = t == 2 ? 0.7f : 1.0f;
        p.top_logprobs = 20;
        p.logit_bias = bias;
        p.n_logit_bias = 1;
        p.repetition_penalty = 1.3f;
        cf_sampler *s = make(&p, V);
        int32_t hist[] = {17, 40, 41};
        cf_sampler_accept_many(s, hist, 3, NULL);
        /* The reference: processed logits by hand, then a double log-softmax. */
        double m = -INFINITY, sum = 0;
        float proc[V];
        for (int i = 0; i < V; i++) {
            float x = base[i] + (i == 5 ? 4.0f : 0.0f);
            if (i == 17 || i == 40 || i == 41) x = x > 0 ? x / 1.3f : x * 1.3f;
            proc[i] = x;
            if (x > m) m = x;
        }
        for (int i = 0; i < V; i++) sum += exp((double)proc[i] - m);
        for (int i = 0; i < V; i++) {
            lp[i] = (double)proc[i] - m - log(sum);
            sorted[i] = (cf_cand){proc[i], i};
        }
        qsort(sorted, V, sizeof *sorted, cmp_desc);
        for (int rep = 0; rep < 5; rep++) {
            memcpy(l, base, sizeof l);
            cf_sample_result r;
            CHECK(cf_sampler_sample(s, l, &r, NULL) == CINFER_OK, "sample");
            CHECK(fabs(r.logprob - lp[r.token]) < 1e-5, "T=%g chosen %d: %g, want %g", temps[t], r.token, r.logprob, lp[r.token]);
            CHECK(r.n_top == 20, "n_top %d", r.n_top);
            for (int i = 0; i < r.n_top; i++) {
                CHECK(r.top[i].token == sorted[i].id, "T=%g top[%d] is %d, want %d", temps[t], i, r.top[i].token, sorted[i].id);
                CHECK(fabs(r.top[i].logprob - lp[sorted[i].id]) < 1e-5, "top[%d] logprob %g, want %g", i, r.top[i].logprob, lp[sorted[i].id]);
            }
            if (temps[t] == 0) CHECK(r.token == sorted[0].id, "greedy %d, want %d", r.token, sorted[0].id);
            cf_sampler_accept(s, 40, NULL); /* next step, same penalties */
        }
        cf_sampler_free(s);
    }
    /* logprobs without top alternatives, and a vocabulary smaller than top_logprobs. */
    cf_sampling_params p = cf_sampling_default_params();
    p.logprobs = true;
    cf_sampler *s = make(&p, 3);
    float small[3] = {0, 0, 0};
    cf_sample_result r;
    cf_sampler_sample(s, small, &r, NULL);
    CHECK(fabs(r.logprob - log(1.0 / 3)) < 1e-6 && r.n_top == 0, "uniform logprob %g n_top %d", r.logprob, r.n_top);
    cf_sampler_free(s);
    p.top_logprobs = 5;
    s = make(&p, 3);
    cf_sampler_sample(s, small, &r, NULL);
    CHECK(r.n_top == 3 && r.top[0].token == 0 && r.top[2].token == 2, "small vocab top: n %d", r.n_top);
    cf_sampler_free(s);
}

/* ---- determinism ---- */

static void run_seq(uint64_t seed, int32_t *out, int n) {
    enum { V = 500 };
    cf_sampling_params p = cf_sampling_default_params();
    p.seed = seed;
    p.temperature = 1.2f;
    p.top_p = 0.95f;
    cf_sampler *s = make(&p, V);
    float base[V], l[V];
    for (int i = 0; i < V; i++) base[i] = (float)((i * 7919) % 113) / 20.0f;
    for (int i = 0; i < n; i++) {
        memcpy(l, base, sizeof l);
        cf_sample_result r;
        cf_sampler_sample(s, l, &r, NULL);
        out[i] = r.token;
        cf_sampler_accept(s, r.token, NULL);
    }
    cf_sampler_free(s);
}

static void test_determinism(void) {
    enum { N = 400 };
    int32_t a[N], b[N], c[N];
    run_seq(42, a, N);
    run_seq(42, b, N);
    run_seq(43, c, N);
    int same = 0, distinct = 0;
    for (int i = 0; i < N; i++) {
        CHECK(a[i] == b[i], "seed 42 differs at %d: %d vs %d", i, a[i], b[i]);
        same += a[i] == c[i];
        distinct += i > 0 && a[i] != a[i - 1];
    }
    CHECK(same < N / 4, "seeds 42 and 43 agree on %d of %d tokens", same, N);
    CHECK(distinct > N / 2, "sequence barely varies (%d changes)", distinct);

    /* Rolling back and resampling the same step gives the same draw. */
    cf_sampling_params p = cf_sampling_default_params();
    p.seed = 7;
    cf_sampler *s = make(&p, 64);
    float l[64];
    cf_sample_result r1, r2;
    int32_t first[20];
    for (int i = 0; i < 20; i++) {
        for (int j = 0; j < 64; j++) l[j] = 0;
        cf_sampler_sample(s, l, &r1, NULL);
        first[i] = r1.token;
        cf_sampler_accept(s, r1.token, NULL);
    }
    cf_sampler_truncate(s, 20);
    for (int i = 0; i < 20; i++) {
        for (int j = 0; j < 64; j++) l[j] = 0;
        cf_sampler_sample(s, l, &r2, NULL);
        CHECK(r2.token == first[i], "after rollback step %d: %d, want %d", i, r2.token, first[i]);
        cf_sampler_accept(s, (r2.token + 1) % 64, NULL); /* a different history, same length */
    }
    cf_sampler_free(s);
}

/* the truncation parameters with this seed */
static cf_sampling_params truncation(uint64_t seed, float t, int32_t top_k, float top_p, float min_p) {
    cf_sampling_params p = cf_sampling_truncation(t, top_k, top_p, min_p);
    p.seed = seed;
    return p;
}

/* The draw's uniform: 24 bits (a float), the one cf_sampler_sample uses; cf_sampler_sample_u with it
 * picks the same token, and u places the draw along the kept tokens. */
static void test_explicit_uniform(void) {
    enum { V = 300, STEPS = 150 };
    float base[V], l[V], l2[V];
    for (int i = 0; i < V; i++) base[i] = tgauss() * 2.0f;
    const struct { float t; int32_t k; float p, mp; } cfg[] = {{1.0f, 0, 1.0f, 0.0f}, {0.7f, 20, 1.0f, 0.0f}, {1.3f, 0, 0.9f, 0.0f},
                                                               {1.0f, 0, 1.0f, 0.05f}, {0.9f, 50, 0.8f, 0.02f}};
    for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
        cf_sampling_params p = truncation(99 + c, cfg[c].t, cfg[c].k, cfg[c].p, cfg[c].mp);
        cf_sampler *s = make(&p, V);
        int same = 0, exact = 0;
        for (int i = 0; i < STEPS; i++) {
            float u = cf_sampler_uniform(s);
            exact += u >= 0.0f && u < 1.0f && (double)u * 0x1.0p24 == floor((double)u * 0x1.0p24);
            memcpy(l, base, sizeof l);
            memcpy(l2, base, sizeof l2);
            cf_sample_result a, b;
            CHECK(cf_sampler_sample(s, l, &a, NULL) == CINFER_OK, "sample");
            CHECK(cf_sampler_sample_u(s, l2, u, &b, NULL) == CINFER_OK, "sample_u");
            same += a.token == b.token;
            cf_sampler_accept(s, a.token, NULL);
        }
        CHECK(exact == STEPS, "config %zu: %d of %d uniforms are 24-bit values in [0, 1)", c, exact, STEPS);
        CHECK(same == STEPS, "config %zu: cf_sampler_sample_u with cf_sampler_uniform agrees on %d of %d steps", c, same, STEPS);
        cf_sampler_free(s);
    }
    /* equal logits, no truncation: u = (k + 0.5) / 64 is token k */
    cf_sampling_params p = cf_sampling_default_params();
    cf_sampler *s = make(&p, 64);
    float flat[64];
    for (int k = 0; k < 64; k++) {
        for (int j = 0; j < 64; j++) flat[j] = 0.25f;
        cf_sample_result r;
        CHECK(cf_sampler_sample_u(s, flat, (k + 0.5f) / 64.0f, &r, NULL) == CINFER_OK && r.token == k, "u (%d + 0.5) / 64 gave %d", k,
              r.token);
    }
    cf_sample_result r;
    cinfer_error err = {0};
    CHECK(cf_sampler_sample_u(s, flat, 1.0f, &r, &err) == CINFER_E_INVALID_ARGUMENT, "u = 1 accepted");
    CHECK(cf_sampler_sample_u(s, flat, -0.25f, &r, &err) == CINFER_E_INVALID_ARGUMENT, "u < 0 accepted");
    CHECK(cf_sampler_sample_u(s, flat, NAN, &r, &err) == CINFER_E_NOT_A_NUMBER, "u NaN accepted");
    cf_sampler_free(s);
}

/* ---- selection helpers ---- */

static void test_select(void) {
    enum { N = 20000 };
    static cf_cand c[N], c2[N], ref[N];
    static float v[N];
    static double hist[CF_MASS_HIST];
    for (int trial = 0; trial < 40; trial++) {
        int n = 1 + (int)(trand() * (N - 1));
        for (int i = 0; i < n; i++) {
            /* weights in [0, 1]: coarse ones (many ties, zeros) or spread over many octaves */
            float w = trial % 3 == 0 ? (float)(int)(trand() * 8) / 8 : (float)exp(-4 * fabs(tgauss()));
            v[i] = w;
            c[i] = c2[i] = ref[i] = (cf_cand){w, i};
        }
        qsort(ref, (size_t)n, sizeof *ref, cmp_desc);
        double total = 0;
        for (int i = 0; i < n; i++) total += ref[i].v;
        double frac = 0.05 + 0.9 * trand(), target = frac * total, acc = 0;
        int want = 0;
        while (want < n && acc < target) acc += ref[want++].v;
        if (want == 0) want = 1;
        int got = cf_select_mass(c, n, target), got2 = cf_select_mass_bucketed(c2, n, target, hist);
        CHECK(got == want, "mass select kept %d, want %d (n %d)", got, want, n);
        CHECK(got2 == want, "bucketed mass select kept %d, want %d (n %d)", got2, want, n);
        if (got == want && got2 == want) {
            qsort(c, (size_t)got, sizeof *c, cmp_desc);
            qsort(c2, (size_t)got, sizeof *c2, cmp_desc);
            for (int i = 0; i < got; i++)
                CHECK(c[i].id == ref[i].id && c2[i].id == ref[i].id, "mass select sets differ at %d", i);
        }
        int k = 1 + (int)(trand() * (n < 200 ? n : 200));
        cf_select_top_k(v, n, k, c);
        cf_sort_small(c, k);
        for (int i = 0; i < k; i++) CHECK(c[i].id == ref[i].id, "top-%d differs at %d: %d vs %d", k, i, c[i].id, ref[i].id);
        float min_w = trial % 3 == 0 ? 0.5f : (float)trand();
        int m = cf_gather(v, n, min_w, c), expect = 0;
        for (int i = 0; i < n; i++)
            if (v[i] >= min_w) CHECK(expect < m && c[expect++].id == i, "gather missed %d", i);
        CHECK(m == expect, "gather kept %d, want %d", m, expect);
    }
}

/* ---- row kernels ---- */

static void test_kernels(void) {
    double worst = 0;
    for (int i = 0; i <= 90000; i++) {
        float x = -0.001f * (float)i;
        double e = exp((double)x), rel = fabs(cf_exp_neg(x) - e) / e;
        if (x < -87.0f)
            CHECK(cf_exp_neg(x) == 0, "exp(%g) is not flushed to 0", x);
        else if (rel > worst)
            worst = rel;
    }
    CHECK(worst < 3e-7, "exp relative error %g", worst);
    printf("exp: worst relative error %.3g on [-87, 0]\n", worst);
    CHECK(cf_exp_neg(0) == 1 && cf_exp_neg(-87.5f) == 0 && cf_exp_neg(-INFINITY) == 0, "exp edge values");

    enum { N = 1000 + 5 };
    static float v[N], w[N];
    static double blocks[(N + CF_EXP_BLOCK - 1) / CF_EXP_BLOCK];
    for (int i = 0; i < N; i++) v[i] = 6 * tgauss();
    v[17] = -INFINITY;
    const float shift = 20, scale = 0.8f;
    double total = cf_row_exp(v, w, N, shift, scale, blocks), ref = 0, from_blocks = 0;
    int same = 1;
    for (int i = 0; i < N; i++) {
        same &= w[i] == cf_exp_neg((v[i] - shift) * scale);
        ref += exp(((double)v[i] - shift) * scale);
    }
    for (int b = 0; b < (N + CF_EXP_BLOCK - 1) / CF_EXP_BLOCK; b++) from_blocks += blocks[b];
    CHECK(same, "row exp differs from the scalar exp");
    CHECK(fabs(total - ref) < 1e-6 * ref && total == from_blocks, "row exp sum %.9g, want %.9g (blocks %.9g)", total, ref,
          from_blocks);

    for (int n = 1; n < 60; n++) {
        float m = -INFINITY;
        for (int i = 0; i < n; i++) m = v[i] > m ? v[i] : m;
        bool bad = true;
        CHECK(cf_row_max(v, n, &bad) == m && !bad, "row max over %d", n);
        for (int q = 0; q < 5; q++) {
            float x = 4 * tgauss();
            int from = (int)(trand() * n), want = from;
            while (want < n && !(v[want] > x)) want++;
            CHECK(cf_row_next_above(v, n, from, x) == want, "next above %g from %d in %d", x, from, n);
        }
    }
    float row[40];
    for (int i = 0; i < 40; i++) row[i] = (float)i;
    bool bad = false;
    row[38] = NAN;
    cf_row_max(row, 40, &bad);
    CHECK(bad, "NaN in the tail not flagged");
    row[38] = 0;
    row[3] = INFINITY;
    cf_row_max(row, 40, &bad);
    CHECK(bad, "+inf not flagged");
    row[3] = -INFINITY;
    CHECK(cf_row_max(row, 40, &bad) == 39 && !bad, "-inf flagged or max wrong");
}

/* ---- chi-square goodness of fit ---- */

enum { DRAWS = 200000, SMALL_V = 10, SPREAD_V = 600 };
static const float small_logits[SMALL_V] = {2.0f, 1.5f, 1.4f, 0.3f, -0.2f, 1.5f, -1.0f, -3.0f, 0.9f, 0.0f};

/* Expected distribution computed independently: softmax(l / T), sort by (p desc, id asc), top-k,
 * renormalize, top-p prefix, renormalize, min-p against the max. */
static void expected(const float *logits, int V, const cf_sampling_params *p, double *prob) {
    int order[SPREAD_V];
    double w[SPREAD_V], m = -INFINITY, z = 0;
    for (int i = 0; i < V; i++) m = fmax(m, logits[i] / (double)p->temperature);
    for (int i = 0; i < V; i++) w[i] = exp(logits[i] / (double)p->temperature - m);
    for (int i = 0; i < V; i++) order[i] = i;
    for (int i = 1; i < V; i++)
        for (int j = i; j > 0 && (w[order[j]] > w[order[j - 1]] ||
                                  (w[order[j]] == w[order[j - 1]] && order[j] < order[j - 1])); j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    int keep = p->top_k > 0 && p->top_k < V ? p->top_k : V;
    for (int i = 0; i < keep; i++) z += w[order[i]];
    double acc = 0;
    int nucleus = 0;
    while (nucleus < keep && acc < p->top_p * z) acc += w[order[nucleus++]];
    keep = nucleus;
    double pmax = w[order[0]];
    int minp = 0;
    while (minp < keep && w[order[minp]] >= p->min_p * pmax) minp++;
    keep = minp;
    z = 0;
    for (int i = 0; i < keep; i++) z += w[order[i]];
    for (int i = 0; i < V; i++) prob[i] = 0;
    for (int i = 0; i < keep; i++) prob[order[i]] = w[order[i]] / z;
}

static void draw_counts(const float *logits, int V, const cf_sampling_params *p, long *count) {
    cf_sampler *s = make(p, V);
    float l[SPREAD_V];
    for (int i = 0; i < V; i++) count[i] = 0;
    for (long d = 0; d < DRAWS; d++) {
        memcpy(l, logits, (size_t)V * sizeof *l);
        cf_sample_result r;
        cf_sampler_sample(s, l, &r, NULL);
        count[r.token]++;
        cf_sampler_accept(s, r.token, NULL);
    }
    cf_sampler_free(s);
}

static void test_distribution(void) {
    /* The threshold: a false failure has probability 1e-6 per case (each at a fixed seed). */
    const double alpha = 1e-6;
    /* Twelve live tokens spread over three CF_EXP_BLOCK blocks, the rest masked: the full-row
     * draw has to walk the blocks. */
    static float spread[SPREAD_V];
    const int live[12] = {3, 40, 41, 200, 255, 256, 300, 301, 450, 511, 512, 599};
    for (int i = 0; i < SPREAD_V; i++) spread[i] = -INFINITY;
    for (int i = 0; i < 12; i++) spread[live[i]] = small_logits[i % SMALL_V] + 0.1f * (float)i;
    struct { const float *l; int v; float t, top_p, min_p; int top_k; } cases[] = {
        {small_logits, SMALL_V, 1.0f, 1.0f, 0.0f, 0},  {small_logits, SMALL_V, 0.7f, 1.0f, 0.0f, 0},
        {small_logits, SMALL_V, 1.8f, 1.0f, 0.0f, 0},  {small_logits, SMALL_V, 1.3f, 1.0f, 0.0f, 4},
        {small_logits, SMALL_V, 1.0f, 0.8f, 0.0f, 0},  {small_logits, SMALL_V, 0.6f, 0.5f, 0.0f, 0},
        {small_logits, SMALL_V, 0.9f, 1.0f, 0.15f, 0}, {small_logits, SMALL_V, 1.0f, 1.0f, 0.5f, 0},
        {small_logits, SMALL_V, 1.1f, 0.9f, 0.05f, 6}, {small_logits, SMALL_V, 2.0f, 0.75f, 0.3f, 0},
        {small_logits, SMALL_V, 1.0f, 0.95f, 0.0f, 3}, {small_logits, SMALL_V, 1.0f, 1.0f, 0.0f, 2},
        {spread, SPREAD_V, 0.8f, 1.0f, 0.0f, 0},       {spread, SPREAD_V, 1.0f, 0.85f, 0.0f, 0},
        {spread, SPREAD_V, 1.2f, 1.0f, 0.1f, 0},       {spread, SPREAD_V, 1.0f, 0.9f, 0.0f, 7},
    };
    static long count[SPREAD_V];
    static double prob[SPREAD_V];
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        cf_sampling_params p = truncation(1000 + c, cases[c].t, cases[c].top_k, cases[c].top_p, cases[c].min_p);
        expected(cases[c].l, cases[c].v, &p, prob);
        draw_counts(cases[c].l, cases[c].v, &p, count);
        double pv = stats_chi_square_p(count, prob, cases[c].v, DRAWS);
        CHECK(pv > alpha, "case %zu (V %d T %g top_k %d top_p %g min_p %g): p-value %g", c, cases[c].v, cases[c].t,
              cases[c].top_k, cases[c].top_p, cases[c].min_p, pv);
    }

    /* The routine must reject wrong distributions: samples at T = 0.7 against T = 0.8, and plain
     * samples against the right distribution with two adjacent probabilities moved by 3%. */
    cf_sampling_params p = cf_sampling_default_params();
    p.seed = 5;
    p.temperature = 0.7f;
    draw_counts(small_logits, SMALL_V, &p, count);
    p.temperature = 0.8f;
    expected(small_logits, SMALL_V, &p, prob);
    double pv = stats_chi_square_p(count, prob, SMALL_V, DRAWS);
    CHECK(pv < alpha, "T 0.7 samples pass as T 0.8 (p-value %g)", pv);
    p.temperature = 1.0f;
    draw_counts(small_logits, SMALL_V, &p, count);
    expected(small_logits, SMALL_V, &p, prob);
    CHECK(stats_chi_square_p(count, prob, SMALL_V, DRAWS) > alpha, "T 1 samples fail against T 1");
    prob[0] *= 1.03;
    prob[1] = 1 - (prob[0] + prob[2] + prob[3] + prob[4] + prob[5] + prob[6] + prob[7] + prob[8] + prob[9]);
    pv = stats_chi_square_p(count, prob, SMALL_V, DRAWS);
    CHECK(pv < alpha, "a 3%% shift of mass from token 1 to token 0 goes unnoticed (p-value %g)", pv);
    /* Drawing a token the expected distribution excludes fails outright. */
    p.top_k = 2;
    expected(small_logits, SMALL_V, &p, prob);
    CHECK(stats_chi_square_p(count, prob, SMALL_V, DRAWS) == 0, "draws outside the support pass");
}

/* Truncation on a larger vocabulary: every draw lies inside the set computed from a full sort (with
 * a 1e-5 relative allowance at the top-p and min-p boundaries for float rounding), and the less
 * likely half of the set is drawn too. */
static void test_support_large(void) {
    enum { V = 20000, N_DRAWS = 3000 };
    static float base[V], l[V];
    static cf_cand sorted[V];
    static int rank[V];
    for (int i = 0; i < V; i++) base[i] = 2.5f * tgauss();
    const double t = 0.8;
    struct { int top_k; float top_p, min_p; } cases[] = {
        {0, 0.9f, 0}, {0, 0.3f, 0}, {0, 1, 0.05f}, {500, 0.95f, 0}, {0, 0.99f, 0.001f}, {40, 0.9f, 0},
    };
    for (int i = 0; i < V; i++) sorted[i] = (cf_cand){base[i], i};
    qsort(sorted, V, sizeof *sorted, cmp_desc);
    for (int i = 0; i < V; i++) rank[sorted[i].id] = i;
    const double m = sorted[0].v / t;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int keep = cases[c].top_k ? cases[c].top_k : V;
        double z = 0, acc = 0;
        for (int i = 0; i < keep; i++) z += exp(sorted[i].v / t - m);
        int n = 0;
        while (n < keep && acc < cases[c].top_p * z * (1 + 1e-5)) acc += exp(sorted[n++].v / t - m);
        while (n > 1 && exp(sorted[n - 1].v / t - m) < cases[c].min_p * (1 - 1e-5)) n--;

        cf_sampling_params p = cf_sampling_default_params();
        p.seed = c;
        p.temperature = (float)t;
        p.top_k = cases[c].top_k;
        p.top_p = cases[c].top_p;
        p.min_p = cases[c].min_p;
        cf_sampler *s = make(&p, V);
        int outside = 0, lower_half = 0;
        for (int d = 0; d < N_DRAWS; d++) {
            memcpy(l, base, sizeof l);
            cf_sample_result r;
            cf_sampler_sample(s, l, &r, NULL);
            outside += rank[r.token] >= n;
            lower_half += rank[r.token] >= n / 2;
            cf_sampler_accept(s, r.token, NULL);
        }
        CHECK(outside == 0, "case %zu: %d draws outside the %d-token truncated set", c, outside, n);
        CHECK(n < 4 || lower_half > 0, "case %zu: the less likely half of %d tokens is never drawn", c, n);
        cf_sampler_free(s);
    }
}

int main(void) {
    test_validation();
    test_penalties();
    test_greedy_ties();
    test_logprobs();
    test_determinism();
    test_explicit_uniform();
    test_select();
    test_kernels();
    test_distribution();
    test_support_large();
    printf("%d checks, %d failed\n", checks, failures);
    return failures ? 1 : 0;
}
