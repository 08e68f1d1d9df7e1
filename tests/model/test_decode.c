/* test_decode.c: the device decode step (cf_model_decode_step, cf_model_pick_last) against the host
 * path (cf_model_eval, then argmax or the host sampler), token for token:
 *   - greedy continuations equal cf_model_eval + argmax; seeded sampling (temperature, top-k, top-p, min-p)
 *     equals cf_sampler_sample with the same seed, the uniforms taken from cf_sampler_uniform;
 *   - sampling arguments changing from step to step, rollback (cf_seq_truncate) after device steps;
 *   - failures (bad ids, bad arguments, a full context, nothing to pick from) change nothing;
 *   - cf_model_decode_run (one step ahead) gives the same tokens, stops where told, and goes on after;
 *   - only the picked id is read back (never a logits row).
 * Each check runs twice: on the CPU backend op by op, and on the CPU backend wrapped with a test recorder that implements the graph ops the way CUDA graphs behave: between graph_begin and
 * graph_end the ops are recorded with their host arguments frozen, and graph_launch replays them on the
 * tensors' contents at launch. A step whose ops depended on the position through a host argument would
 * replay at the wrong position and fail the comparison. MoE models cannot be recorded and run eagerly.
 *
 * usage: test_decode MODEL_DIR            the checks above on a model folder
 *        test_decode --chunks CONFIG TMP  long passes on random weights (CONFIG with a larger context):
 *                                         passes of up to 4096 positions, the logits scratch kept at 256
 *                                         rows, sliding windows with long passes, the backend's default */
#include "model/model.h"
#include "model/seq.h"
#include "sample/sampler.h"
#include "base/file.h"
#include "base/status.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../check.h"

#include "recorder.h"

/* ---- helpers ---- */

static int V;
static int graphs;  /* the recorder is in place */

static int argmax(const float *v, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[b]) b = i;
    return b;
}

static cf_sampling_params params_of(const cf_sample_args *sa, uint64_t seed) {
    cf_sampling_params p = cf_sampling_truncation(sa->temperature, sa->top_k, sa->top_p, sa->min_p);
    p.seed = seed;
    return p;
}

static const cf_sample_args GREEDY = {0.0f, 0, 1.0f, 0.0f};

/* The host path: prompt, then n tokens picked by argmax (sa NULL) or sampled (sa, seed). */
static int host_run(cf_model *m, const int32_t *prompt, int np, const cf_sample_args *sa, uint64_t seed, int n, int32_t *out) {
    cinfer_error err = {0};
    cf_seq *s = NULL;
    cf_sampler *smp = NULL;
    float *lg = malloc((size_t)V * sizeof *lg);
    int ok = cf_seq_create(m, 0, &s, &err) == CINFER_OK && cf_model_eval(m, s, prompt, np, lg, 0, &err) == CINFER_OK;
    if (ok && sa) {
        cf_sampling_params p = params_of(sa, seed);
        ok = cf_sampler_create(&p, V, &smp, &err) == CINFER_OK && cf_sampler_accept_many(smp, prompt, (size_t)np, &err) == CINFER_OK;
    }
    for (int i = 0; ok && i < n; i++) {
        if (sa) {
            cf_sample_result r;
            ok = cf_sampler_sample(smp, lg, &r, &err) == CINFER_OK && cf_sampler_accept(smp, r.token, &err) == CINFER_OK;
            out[i] = r.token;
        } else {
            out[i] = argmax(lg, V);
        }
        if (ok && i + 1 < n) ok = cf_model_eval(m, s, &out[i], 1, lg, 0, &err) == CINFER_OK;
    }
    if (!ok) fprintf(stderr, "host run: %s\n", err.message);
    cf_sampler_free(smp);
    cf_seq_free(s);
    free(lg);
    return ok;
}

/* The device path in s (prompt already evaluated): n tokens, the first picked from the prefill's logits;
 * sas[i % n_sas] picks token i, uniforms from a sampler per argument set sharing seed and history. */
static int device_run(cf_model *m, cf_seq *s, const int32_t *prompt, int np, const cf_sample_args *sas, int n_sas, uint64_t seed,
                      int n, int32_t *out) {
    cinfer_error err = {0};
    cf_sampler *smp = NULL;
    cf_sampling_params p = cf_sampling_default_params();
    p.seed = seed;
    int ok = cf_sampler_create(&p, V, &smp, &err) == CINFER_OK && cf_sampler_accept_many(smp, prompt, (size_t)np, &err) == CINFER_OK;
    for (int i = 0; ok && i < n; i++) {
        const cf_sample_args *sa = &sas[i % n_sas];
        float u = cf_sampler_uniform(smp);
        int reads = n_reads;
        ok = (i == 0 ? cf_model_pick_last(m, s, sa, u, &out[i], &err) : cf_model_decode_step(m, s, out[i - 1], sa, u, &out[i], &err)) ==
             CINFER_OK;
        if (ok && !m->hp.n_experts)
            CHECK(n_reads == reads + 1 && last_read_values == 1, "step %d: %d reads, the last of %lld values", i, n_reads - reads,
                  (long long)last_read_values);
        if (ok) ok = cf_sampler_accept(smp, out[i], &err) == CINFER_OK;
    }
    if (!ok) fprintf(stderr, "device run: %s\n", err.message);
    cf_sampler_free(smp);
    return ok;
}

static int prefilled(cf_model *m, int max_ctx, const int32_t *prompt, int np, cf_seq **s) {
    cinfer_error err = {0};
    *s = NULL;
    if (cf_seq_create(m, max_ctx, s, &err) != CINFER_OK || cf_model_eval(m, *s, prompt, np, NULL, 0, &err) != CINFER_OK) {
        fprintf(stderr, "prefill: %s\n", err.message);
        return 0;
    }
    return 1;
}

static int same(const int32_t *a, const int32_t *b, int n) {
    for (int i = 0; i < n; i++)
        if (a[i] != b[i]) return i;
    return -1;
}

/* ---- checks ---- */

enum { N = 24 };

static void check_greedy(cf_model *m, const int32_t *prompt, int np) {
    int32_t want[N], got[N];
    cf_seq *s;
    int rec0 = n_recorded, launch0 = n_launched;
    widest_read = 0;
    if (!host_run(m, prompt, np, NULL, 0, N, want) || !prefilled(m, 0, prompt, np, &s)) { CHECK(0, "greedy setup"); return; }
    widest_read = 0;
    int ok = device_run(m, s, prompt, np, &GREEDY, 1, 0, N, got);
    int d = same(want, got, N);
    CHECK(ok && d < 0, "%d-token prompt: greedy on the device differs from cf_model_eval + argmax at step %d (%d vs %d)", np, d,
          d >= 0 ? got[d] : 0, d >= 0 ? want[d] : 0);
    CHECK(widest_read < V, "a row of %lld values (logits) was read back", (long long)widest_read);
    cf_seq_free(s);
    if (graphs && !m->hp.n_experts)
        CHECK(n_recorded == rec0 + 1 && n_launched == launch0 + N - 1, "greedy: %d recordings, %d launches for %d steps",
              n_recorded - rec0, n_launched - launch0, N - 1);
    if (graphs && m->hp.n_experts) CHECK(n_recorded == rec0 && n_launched == launch0, "an MoE step was recorded");
}

static void check_sampled(cf_model *m, const int32_t *prompt, int np) {
    const cf_sample_args cases[] = {
        {1.0f, 0, 1.0f, 0.0f}, {0.8f, 20, 1.0f, 0.0f}, {1.2f, 0, 0.9f, 0.0f}, {1.0f, 0, 1.0f, 0.05f}, {0.7f, 50, 0.8f, 0.02f},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int32_t want[N], got[N];
        cf_seq *s;
        const uint64_t seed = 1000 + c;
        if (!host_run(m, prompt, np, &cases[c], seed, N, want) || !prefilled(m, 0, prompt, np, &s)) { CHECK(0, "sampled setup"); return; }
        int ok = device_run(m, s, prompt, np, &cases[c], 1, seed, N, got);
        int d = same(want, got, N), distinct = 0;
        for (int i = 1; i < N; i++) distinct += got[i] != got[i - 1];
        CHECK(ok && d < 0, "case %zu: sampling on the device differs from the host sampler at step %d", c, d);
        CHECK(distinct > 0, "case %zu: %d tokens, all the same", c, N);
        cf_seq_free(s);
    }
}

/* arguments changing at every step: greedy, top-k, top-p in turn */
static void check_mixed(cf_model *m, const int32_t *prompt, int np) {
    const cf_sample_args sas[3] = {GREEDY, {0.9f, 30, 1.0f, 0.0f}, {1.1f, 0, 0.85f, 0.01f}};
    int32_t got[N];
    cf_seq *s, *h;
    cinfer_error err = {0};
    if (!prefilled(m, 0, prompt, np, &s) || !prefilled(m, 0, prompt, np, &h)) { CHECK(0, "mixed setup"); return; }
    int rec0 = n_recorded;
    int ok = device_run(m, s, prompt, np, sas, 3, 77, N, got);
    /* the host: the same tokens fed back, each step picked by its arguments */
    cf_sampler *smp[3] = {0};
    float *lg = malloc((size_t)V * sizeof *lg);
    for (int k = 0; k < 3; k++) {
        cf_sampling_params p = params_of(&sas[k], 77);
        ok &= cf_sampler_create(&p, V, &smp[k], &err) == CINFER_OK && cf_sampler_accept_many(smp[k], prompt, (size_t)np, &err) == CINFER_OK;
    }
    cf_seq_free(h);
    ok &= cf_seq_create(m, 0, &h, &err) == CINFER_OK && cf_model_eval(m, h, prompt, np, lg, 0, &err) == CINFER_OK;
    int agree = 0;
    for (int i = 0; ok && i < N; i++) {
        cf_sample_result r;
        ok = cf_sampler_sample(smp[i % 3], lg, &r, &err) == CINFER_OK;
        agree += ok && r.token == got[i];
        for (int k = 0; k < 3; k++) cf_sampler_accept(smp[k], got[i], NULL);
        if (ok && i + 1 < N) ok = cf_model_eval(m, h, &got[i], 1, lg, 0, &err) == CINFER_OK;
    }
    CHECK(ok && agree == N, "changing arguments: %d of %d steps agree with the host (%s)", agree, N, err.message);
    if (graphs && !m->hp.n_experts) CHECK(n_recorded - rec0 == N - 1, "%d recordings for %d argument changes", n_recorded - rec0, N - 1);
    for (int k = 0; k < 3; k++) cf_sampler_free(smp[k]);
    free(lg);
    cf_seq_free(s);
    cf_seq_free(h);
}

/* back 7 positions after device steps, then on: the same tokens again, from the same recording */
static void check_rollback(cf_model *m, const int32_t *prompt, int np) {
    int32_t first[N], again[N];
    cf_seq *s;
    cinfer_error err = {0};
    if (!prefilled(m, 0, prompt, np, &s)) { CHECK(0, "rollback setup"); return; }
    int ok = device_run(m, s, prompt, np, &GREEDY, 1, 0, N, first);
    CHECK(ok && cf_seq_len(s) == np + N - 1, "length %d after %d steps", cf_seq_len(s), N - 1);
    const int keep = N - 8;  /* prompt + first[0 .. keep-1] */
    int rec0 = n_recorded;
    CHECK(cf_seq_truncate(s, np + keep, &err) == CINFER_OK, "truncate: %s", err.message);
    int32_t t;
    CHECK(cf_model_pick_last(m, s, &GREEDY, 0, &t, &err) == CINFER_E_INVALID_ARGUMENT, "picked from logits a truncation dropped");
    memcpy(again, first, sizeof first);
    for (int i = keep + 1; ok && i < N; i++) ok = cf_model_decode_step(m, s, again[i - 1], &GREEDY, 0, &again[i], &err) == CINFER_OK;
    int d = same(first, again, N);
    CHECK(ok && d < 0, "after rolling back %d positions: step %d gives %d, before %d (%s)", N - 1 - keep, d, d >= 0 ? again[d] : 0,
          d >= 0 ? first[d] : 0, err.message);
    if (graphs) CHECK(n_recorded == rec0, "the rollback recorded again");
    /* and the host path continues the same sequence */
    float *lg = malloc((size_t)V * sizeof *lg);
    CHECK(cf_seq_truncate(s, np + keep - 1, &err) == CINFER_OK && cf_model_eval(m, s, &first[keep - 1], 1, lg, 0, &err) == CINFER_OK &&
              argmax(lg, V) == first[keep],
          "cf_model_eval after device steps and a rollback");
    free(lg);
    cf_seq_free(s);
}

typedef struct collected {
    int32_t tok[N];
    int n, stop_after;
} collected;

static int collect(void *ctx, int32_t token) {
    collected *c = ctx;
    if (c->n < N) c->tok[c->n] = token;
    c->n++;
    return c->n == c->stop_after;
}

/* cf_model_decode_run (one step ahead): the host path's tokens, greedy and sampled; a stop, then single
 * steps and another run going on; bad arguments change nothing */
static void check_run(cf_model *m, const int32_t *prompt, int np) {
    int32_t want[N], t0 = -1;
    cf_seq *s;
    cinfer_error err = {0};
    int done = -1;
    if (!host_run(m, prompt, np, NULL, 0, N, want) || !prefilled(m, np + N - 1, prompt, np, &s)) { CHECK(0, "run setup"); return; }
    CHECK(cf_model_pick_last(m, s, &GREEDY, 0, &t0, &err) == CINFER_OK && t0 == want[0], "run: first pick %d, want %d", t0, want[0]);
    collected c = {.stop_after = 5};
    int reads = n_reads;
    widest_read = 0;
    CHECK(cf_model_decode_run(m, s, t0, &GREEDY, NULL, N - 1, collect, &c, &done, &err) == CINFER_OK && done == 5 && c.n == 5,
          "run with a stop after 5: %d done (%s)", done, err.message);
    const int ahead = graphs && !m->hp.n_experts;   /* one step ahead where steps are recorded, else one at a time */
    CHECK(m->hp.n_experts || (n_reads - reads == 5 + ahead && widest_read == 1), "run: %d reads (with the step past the stop: %d), widest %lld",
          n_reads - reads, ahead, (long long)widest_read);
    CHECK(cf_seq_len(s) == np + 5, "run: length %d after 5 tokens, want %d", cf_seq_len(s), np + 5);
    int32_t t = -1;
    cinfer_status pst = cf_model_pick_last(m, s, &GREEDY, 0, &t, &err);
    CHECK(ahead ? pst == CINFER_E_INVALID_ARGUMENT : pst == CINFER_OK, "pick_last after a stop: %s", cinfer_status_name(pst));
    int32_t got[N];
    got[0] = t0;
    memcpy(got + 1, c.tok, 5 * sizeof *got);
    for (int i = 6; i < 9; i++) CHECK(cf_model_decode_step(m, s, got[i - 1], &GREEDY, 0, &got[i], &err) == CINFER_OK, "step after a run");
    c = (collected){.stop_after = 0};
    CHECK(cf_model_decode_run(m, s, got[8], &GREEDY, NULL, N - 9, collect, &c, &done, &err) == CINFER_OK && done == N - 9,
          "run to the end: %d done (%s)", done, err.message);
    memcpy(got + 9, c.tok, (size_t)(N - 9) * sizeof *got);
    int d = same(want, got, N);
    CHECK(d < 0, "run: step %d gives %d, cf_model_eval + argmax %d", d, d >= 0 ? got[d] : 0, d >= 0 ? want[d] : 0);
    CHECK(cf_model_pick_last(m, s, &GREEDY, 0, &t, &err) == CINFER_OK, "pick_last after a run that was not stopped");
    /* the context is full: nothing changes */
    CHECK(cf_model_decode_run(m, s, got[N - 1], &GREEDY, NULL, 1, collect, &c, &done, &err) == CINFER_E_CONTEXT_OVERFLOW && done == 0 &&
              cf_seq_len(s) == np + N - 1,
          "a run past the context: %s", cinfer_status_name(err.code));
    cf_seq_free(s);

    /* sampled: uniforms as the host sampler draws them */
    const cf_sample_args sa = {0.8f, 20, 1.0f, 0.0f};
    cf_sampler *smp = NULL;
    cf_sampling_params p = cf_sampling_default_params();
    p.seed = 4242;
    float u[N];
    int ok = host_run(m, prompt, np, &sa, 4242, N, want) && prefilled(m, 0, prompt, np, &s) &&
             cf_sampler_create(&p, V, &smp, &err) == CINFER_OK && cf_sampler_accept_many(smp, prompt, (size_t)np, &err) == CINFER_OK;
    for (int i = 0; ok && i < N; i++) {   /* a step's uniform depends on the seed and the history's length */
        u[i] = cf_sampler_uniform(smp);
        ok = cf_sampler_accept(smp, 0, &err) == CINFER_OK;
    }
    cf_sampler_free(smp);
    c = (collected){.stop_after = 0};
    ok = ok && cf_model_pick_last(m, s, &sa, u[0], &got[0], &err) == CINFER_OK;
    /* bad arguments first: a uniform out of range in the middle, a bad id, no steps */
    float bad_u[N];
    memcpy(bad_u, u, sizeof u);
    bad_u[7] = 1.0f;
    CHECK(cf_model_decode_run(m, s, got[0], &sa, bad_u + 1, N - 1, collect, &c, &done, &err) == CINFER_E_INVALID_ARGUMENT,
          "a run with a uniform of 1: %s", cinfer_status_name(err.code));
    CHECK(cf_model_decode_run(m, s, V, &sa, u + 1, N - 1, collect, &c, &done, &err) == CINFER_E_TOKEN_OUT_OF_RANGE, "a run of id V");
    CHECK(cf_model_decode_run(m, s, got[0], &sa, u + 1, 0, collect, &c, &done, &err) == CINFER_E_INVALID_ARGUMENT, "a run of 0 steps");
    CHECK(cf_model_decode_run(m, s, got[0], &sa, NULL, N - 1, collect, &c, &done, &err) == CINFER_E_INVALID_ARGUMENT,
          "a sampled run without uniforms");
    CHECK(cf_seq_len(s) == np && c.n == 0, "refused runs changed the length to %d or gave %d tokens", cf_seq_len(s), c.n);
    ok = ok && cf_model_decode_run(m, s, got[0], &sa, u + 1, N - 1, collect, &c, &done, &err) == CINFER_OK;
    memcpy(got + 1, c.tok, (size_t)(N - 1) * sizeof *got);
    d = same(want, got, N);
    CHECK(ok && d < 0, "sampled run: step %d differs from the host sampler (%s)", d, err.message);
    cf_seq_free(s);
}

/* Exact rollback with RB_CHUNK positions per pass, so that sliding-window layers keep a ring of
 * window + RB_CHUNK slots that wraps many times: the prompt, then RB_STEPS greedy tokens by
 * cf_model_decode_step (run = 0) or by a cf_model_decode_run stopped there (run = 1; one step ahead where
 * steps are recorded, so the step queued past the stop writes a slot too); then back k positions and the
 * k tokens fed again: every logit equals, bit for bit, a fresh sequence fed the same tokens. k: 1, 2, the
 * chunk, the chunk + 1, and back to the floor; one position below the floor is refused and changes
 * nothing. Every token goes in on its own (a decode step's pass), so that the passes agree row for row. */
enum { RB_CHUNK = 4, RB_PROMPT = 11, RB_STEPS = 22, RB_N = RB_PROMPT + RB_STEPS };

static double diff_max(const float *a, const float *b, size_t n) {
    double d = 0;
    for (size_t i = 0; i < n; i++) d = fmax(d, fabs((double)a[i] - b[i]));
    return d;
}

/* *s: the prompt (all[0 .. RB_PROMPT)), then RB_STEPS greedy tokens into all[RB_PROMPT ..] */
static int decoded(cf_model *m, int run, cf_seq **s, int32_t *all) {
    cinfer_error err = {0};
    int32_t *toks = all + RB_PROMPT;
    int ok = cf_seq_create_chunked(m, 0, RB_CHUNK, s, &err) == CINFER_OK;
    for (int i = 0; ok && i < RB_PROMPT; i++) ok = cf_model_eval(m, *s, &all[i], 1, NULL, 0, &err) == CINFER_OK;
    ok = ok && cf_model_pick_last(m, *s, &GREEDY, 0, &toks[0], &err) == CINFER_OK;
    if (ok && run) {
        collected c = {.stop_after = RB_STEPS};
        int done = 0;
        ok = cf_model_decode_run(m, *s, toks[0], &GREEDY, NULL, RB_STEPS + 2, collect, &c, &done, &err) == CINFER_OK &&
             done == RB_STEPS;
        memcpy(toks + 1, c.tok, (RB_STEPS - 1) * sizeof *toks);
    }
    for (int i = 1; ok && !run && i <= RB_STEPS; i++) {
        int32_t next = 0;
        ok = cf_model_decode_step(m, *s, toks[i - 1], &GREEDY, 0, &next, &err) == CINFER_OK;
        if (i < RB_STEPS) toks[i] = next;
    }
    if (!ok) fprintf(stderr, "decode: %s\n", err.message);
    return ok;
}

/* a fresh sequence fed all token by token: the logits at every position */
static int fresh_logits(cf_model *m, const int32_t *all, float *out) {
    cinfer_error err = {0};
    cf_seq *s = NULL;
    int ok = cf_seq_create_chunked(m, 0, RB_CHUNK, &s, &err) == CINFER_OK;
    for (int i = 0; ok && i < RB_N; i++) ok = cf_model_eval(m, s, &all[i], 1, out + (size_t)i * V, 0, &err) == CINFER_OK;
    if (!ok) fprintf(stderr, "fresh evaluation: %s\n", err.message);
    cf_seq_free(s);
    return ok;
}

static void check_exact_rollback(cf_model *m, const int32_t *prompt) {
    int window = 0;
    for (int l = 0; l < m->hp.n_layers; l++) window = m->hp.layers[l].window > window ? m->hp.layers[l].window : window;
    float *want = malloc((size_t)RB_N * V * sizeof *want), *got = malloc((size_t)V * sizeof *got);
    for (int run = 0; run < 2; run++) {
        const char *how = run ? "decode_run" : "decode_step";
        int32_t all[RB_N], again[RB_N];
        memcpy(all, prompt, RB_PROMPT * sizeof *all);
        memcpy(again, prompt, RB_PROMPT * sizeof *again);
        cf_seq *s = NULL;
        int ok = decoded(m, run, &s, all) && fresh_logits(m, all, want);
        cf_seq_free(s);
        if (!ok) { CHECK(0, "%s: exact rollback setup", how); continue; }
        const int ks[] = {1, 2, RB_CHUNK, RB_CHUNK + 1, 0};   /* 0: to the floor */
        for (size_t j = 0; j < sizeof ks / sizeof ks[0]; j++) {
            cinfer_error err = {0};
            if (!decoded(m, run, &s, again) || memcmp(all, again, sizeof all)) { CHECK(0, "%s: decoding again", how); cf_seq_free(s); continue; }
            const int fl = s->kv->floor, k = ks[j] ? ks[j] : RB_N - fl;
            if (window > 0 && window + RB_CHUNK < cf_seq_max_ctx(s))
                CHECK(fl > 0 && RB_N - fl >= RB_CHUNK, "%s: floor %d of %d positions (chunk %d)", how, fl, RB_N, RB_CHUNK);
            if (!ks[j]) {   /* one below the floor: refused, nothing changed */
                cinfer_status st = cf_seq_truncate(s, fl - 1, &err);
                CHECK(st == CINFER_E_INVALID_ARGUMENT && cf_seq_len(s) == RB_N && s->kv->floor == fl,
                      "%s: truncating to %d, below the floor %d: %s, length %d", how, fl - 1, fl, cinfer_status_name(st), cf_seq_len(s));
                CHECK(fl <= 0 || strstr(err.message, "roll back") != NULL, "%s: below the floor: '%s'", how, err.message);
            }
            if (k > RB_N - fl) { cf_seq_free(s); continue; }  /* steps keep chunk + 1 positions, a stopped run chunk */
            cinfer_status st = cf_seq_truncate(s, RB_N - k, &err);
            CHECK(st == CINFER_OK, "%s: truncate %d -> %d (floor %d): %s", how, RB_N, RB_N - k, fl, err.message);
            double worst = 0;
            for (int p = RB_N - k; st == CINFER_OK && p < RB_N; p++) {
                if (cf_model_eval(m, s, &all[p], 1, got, 0, &err) != CINFER_OK) { CHECK(0, "re-feed: %s", err.message); break; }
                const float *w = want + (size_t)p * V;
                worst = fmax(worst, diff_max(got, w, (size_t)V));
                CHECK(!memcmp(got, w, (size_t)V * sizeof *got), "%s, back %d to %d (floor %d): the logits at %d differ from a fresh evaluation by %g",
                      how, k, RB_N - k, fl, p, diff_max(got, w, (size_t)V));
            }
            if (!ks[j]) printf("  %s: back %d positions to the floor %d and on again: max error %g\n", how, k, fl, worst);
            cf_seq_free(s);
        }
    }
    free(want);
    free(got);
}

static void check_errors(cf_model *m, const int32_t *prompt, int np) {
    cinfer_error err = {0};
    cf_seq *s;
    int32_t want[4], t = -1, t0 = -1;
    if (!host_run(m, prompt, np, NULL, 0, 4, want) || !prefilled(m, np + 3, prompt, np, &s)) { CHECK(0, "errors setup"); return; }
    CHECK(cf_model_pick_last(m, s, &GREEDY, 0, &t0, &err) == CINFER_OK && t0 == want[0], "pick_last: %d, want %d", t0, want[0]);
    const struct { int32_t id; cf_sample_args sa; float u; cinfer_status code; } bad[] = {
        {-1, GREEDY, 0, CINFER_E_TOKEN_OUT_OF_RANGE},
        {V, GREEDY, 0, CINFER_E_TOKEN_OUT_OF_RANGE},
        {0, {-1.0f, 0, 1.0f, 0.0f}, 0.5f, CINFER_E_TEMPERATURE},
        {0, {NAN, 0, 1.0f, 0.0f}, 0.5f, CINFER_E_NOT_A_NUMBER},
        {0, {1.0f, -1, 1.0f, 0.0f}, 0.5f, CINFER_E_TOP_K},
        {0, {1.0f, 0, 0.0f, 0.0f}, 0.5f, CINFER_E_TOP_P},
        {0, {1.0f, 0, 1.0f, 1.5f}, 0.5f, CINFER_E_MIN_P},
        {0, {1.0f, 0, 1.0f, 0.0f}, 1.0f, CINFER_E_INVALID_ARGUMENT},
        {0, {1.0f, 0, 1.0f, 0.0f}, -0.5f, CINFER_E_INVALID_ARGUMENT},
        {0, {1.0f, 0, 1.0f, 0.0f}, NAN, CINFER_E_NOT_A_NUMBER},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cinfer_status st = cf_model_decode_step(m, s, bad[i].id, &bad[i].sa, bad[i].u, &t, &err);
        CHECK(st == bad[i].code, "bad step %zu: %s, want %s", i, cinfer_status_name(st), cinfer_status_name(bad[i].code));
        CHECK(cf_seq_len(s) == np, "bad step %zu changed the length to %d", i, cf_seq_len(s));
        if (bad[i].id == 0) {
            st = cf_model_pick_last(m, s, &bad[i].sa, bad[i].u, &t, &err);
            CHECK(st == bad[i].code, "bad pick %zu: %s, want %s", i, cinfer_status_name(st), cinfer_status_name(bad[i].code));
        }
    }
    /* nothing changed: the same pick, then the steps of the host run; greedy ignores u */
    CHECK(cf_model_pick_last(m, s, &GREEDY, 0, &t, &err) == CINFER_OK && t == t0, "pick_last after failures: %d, want %d", t, t0);
    int32_t prev = want[0];
    for (int i = 1; i < 4; i++) {
        CHECK(cf_model_decode_step(m, s, prev, &GREEDY, 7.0f, &t, &err) == CINFER_OK && t == want[i], "step %d: %d, want %d (%s)", i, t,
              want[i], err.message);
        prev = t;
    }
    CHECK(cf_seq_len(s) == np + 3, "length %d", cf_seq_len(s));
    CHECK(cf_model_decode_step(m, s, prev, &GREEDY, 0, &t, &err) == CINFER_E_CONTEXT_OVERFLOW, "a step past the context: %s",
          cinfer_status_name(err.code));
    CHECK(cf_seq_len(s) == np + 3, "the overflow changed the length to %d", cf_seq_len(s));
    CHECK(cf_model_pick_last(m, s, &GREEDY, 0, &t, &err) == CINFER_OK && t == want[3], "pick_last after the overflow");
    cf_seq_free(s);
    /* nothing to pick from */
    CHECK(cf_seq_create(m, 0, &s, &err) == CINFER_OK, "seq");
    CHECK(cf_model_pick_last(m, s, &GREEDY, 0, &t, &err) == CINFER_E_INVALID_ARGUMENT, "picked in an empty sequence");
    CHECK(cf_model_eval(m, s, &V, 1, NULL, 0, &err) == CINFER_E_TOKEN_OUT_OF_RANGE &&
              cf_model_pick_last(m, s, &GREEDY, 0, &t, &err) == CINFER_E_INVALID_ARGUMENT,
          "picked after a refused evaluation");
    cf_seq_free(s);
}

static int run_model(const char *dir) {
    cinfer_error err = {0};
    cf_model_params p = cf_model_default_params();
    p.backend.n_threads = 2;
    cf_model *m = NULL;
    if (cf_model_load(dir, &p, &m, &err) != CINFER_OK) { fprintf(stderr, "load %s: %s\n", dir, err.message); return 1; }
    V = m->hp.vocab;
    CHECK(!m->decode_graphs, "the CPU backend records graphs");
    cf_seq *s = NULL;
    const int want_chunk = m->hp.max_ctx < 256 ? m->hp.max_ctx : 256;
    CHECK(cf_seq_create(m, 0, &s, &err) == CINFER_OK && cf_seq_chunk(s) == want_chunk, "default chunk %d, want %d",
          s ? cf_seq_chunk(s) : -1, want_chunk);
    cf_seq_free(s);
    CHECK(cf_seq_create(m, 50, &s, &err) == CINFER_OK && cf_seq_chunk(s) == 50, "chunk of a 50-position sequence: %d",
          s ? cf_seq_chunk(s) : -1);
    cf_seq_free(s);

    int32_t prompts[3][40];
    const int lens[3] = {1, 7, 40};
    uint64_t x = 0x2545F4914F6CDD1Dull;
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < lens[k]; i++) {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            prompts[k][i] = 3 + (int32_t)(x % (uint64_t)(V - 3));
        }
    for (graphs = 0; graphs < 2; graphs++) {
        wrap(m, graphs);
        int f0 = failures;
        for (int k = 0; k < 3; k++) {
            check_greedy(m, prompts[k], lens[k]);
            check_sampled(m, prompts[k], lens[k]);
        }
        check_mixed(m, prompts[1], lens[1]);
        check_rollback(m, prompts[2], lens[2]);
        check_run(m, prompts[1], lens[1]);
        check_run(m, prompts[2], lens[2]);
        check_errors(m, prompts[1], lens[1]);
        check_exact_rollback(m, prompts[2]);
        printf("%s, %s: %s\n", dir, graphs ? (m->hp.n_experts ? "recorder backend (MoE: op by op)" : "recorded steps replayed") : "op by op",
               failures == f0 ? "ok" : "FAIL");
    }
    CHECK(misuse == 0, "%d transfers, syncs or allocations while recording", misuse);
    CHECK(n_live == 0 && n_freed == n_recorded, "%d recordings, %d freed", n_recorded, n_freed);
    printf("  %d recordings, %d replays\n", n_recorded, n_launched);
    cf_model_free(m);
    return 0;
}

/* ---- long passes (random weights) ---- */

static double max_diff(const float *a, const float *b, size_t n) {
    double d = 0;
    for (size_t i = 0; i < n; i++) d = fmax(d, fabs((double)a[i] - b[i]));
    return d;
}

/* logits of all n ids in a sequence of `chunk` positions per pass */
static int eval_all(cf_model *m, int chunk, const int32_t *ids, int n, float *out, int *logit_rows) {
    cinfer_error err = {0};
    cf_seq *s = NULL;
    int ok = cf_seq_create_chunked(m, 0, chunk, &s, &err) == CINFER_OK && cf_model_eval(m, s, ids, n, out, 1, &err) == CINFER_OK;
    if (!ok) fprintf(stderr, "eval (chunk %d): %s\n", chunk, err.message);
    if (s && logit_rows) *logit_rows = (int)s->sc.logits.rows;
    cf_seq_free(s);
    return ok;
}

static int run_chunks(const char *config, const char *tmp) {
    /* the config with a context of 2048 */
    char *text = cf_read_file(config, NULL);
    cJSON *j = text ? cJSON_Parse(text) : NULL;
    free(text);
    if (!j) { fprintf(stderr, "cannot read %s\n", config); return 1; }
    cJSON *tc = cJSON_GetObjectItem(j, "text_config");
    cJSON_ReplaceItemInObject(tc ? tc : j, "max_position_embeddings", cJSON_CreateNumber(2048));
    mkdir(tmp, 0755);
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", tmp);
    char *out = cJSON_Print(j);
    FILE *fp = fopen(path, "wb");
    if (!fp) { fprintf(stderr, "cannot write %s\n", path); return 1; }
    fputs(out, fp);
    fclose(fp);
    free(out);
    cJSON_Delete(j);

    cinfer_error err = {0};
    cf_model_params p = cf_model_default_params();
    p.backend.n_threads = 2;
    cf_model *m = NULL;
    if (cf_model_random(path, 5, &p, &m, &err) != CINFER_OK) { fprintf(stderr, "random model: %s\n", err.message); return 1; }
    V = m->hp.vocab;
    int window = 0;
    for (int l = 0; l < m->hp.n_layers; l++) window = m->hp.layers[l].window > window ? m->hp.layers[l].window : window;
    enum { NT = 700 };
    int32_t ids[NT];
    uint64_t x = 88172645463325252ull;
    for (int i = 0; i < NT; i++) { x ^= x << 13; x ^= x >> 7; x ^= x << 17; ids[i] = (int32_t)(x % (uint64_t)V); }
    float *a = malloc((size_t)NT * V * sizeof *a), *b = malloc((size_t)NT * V * sizeof *b), *lg = malloc((size_t)V * sizeof *lg);

    /* all rows with passes of 4096 positions go in passes of 256 (the logits scratch): as chunk 256, bit for bit */
    int rows_big = 0, rows_small = 0;
    CHECK(eval_all(m, 4096, ids, NT, a, &rows_big) && eval_all(m, 256, ids, NT, b, &rows_small), "eval");
    CHECK(rows_big == CF_LOGIT_ROWS && rows_small == CF_LOGIT_ROWS, "logits scratch of %d and %d rows", rows_big, rows_small);
    CHECK(!memcmp(a, b, (size_t)NT * V * sizeof *a), "all rows with chunk 4096 differ from chunk 256: %g", max_diff(a, b, (size_t)NT * V));
    /* passes of 7 agree to rounding */
    CHECK(eval_all(m, 7, ids, NT, b, NULL), "eval 7");
    double d7 = max_diff(a, b, (size_t)NT * V);
    CHECK(d7 < 1e-4, "chunks of 7 vs 256: %g", d7);

    /* one pass of 700 (window layers hold window + 700 slots... or the context) for the last logits */
    cf_seq *s = NULL;
    CHECK(cf_seq_create_chunked(m, 0, 4096, &s, &err) == CINFER_OK, "seq: %s", err.message);
    if (s) {
        CHECK(cf_seq_chunk(s) == 2048, "chunk %d: not clamped to the context", cf_seq_chunk(s));
        for (int l = 0; l < m->hp.n_layers; l++)  /* window + 2048 is more than the context */
            if (m->hp.layers[l].kv_source == l) CHECK(s->kv->layers[l].cap == 2048, "layer %d: %d slots", l, s->kv->layers[l].cap);
        cf_seq_free(s);
    }
    CHECK(cf_seq_create_chunked(m, 0, 4097, &s, &err) == CINFER_E_INVALID_ARGUMENT, "a chunk of 4097 accepted");
    CHECK(cf_seq_create_chunked(m, 0, 0, &s, &err) == CINFER_E_INVALID_ARGUMENT, "a chunk of 0 accepted");
    const int chunk = 700;
    CHECK(cf_seq_create_chunked(m, 0, chunk, &s, &err) == CINFER_OK, "seq: %s", err.message);
    if (s) {
        for (int l = 0; l < m->hp.n_layers; l++) {
            const cf_layer_hp *L = &m->hp.layers[l];
            if (L->kv_source == l && L->window) CHECK(s->kv->layers[l].cap == L->window + chunk, "layer %d: %d slots", l, s->kv->layers[l].cap);
        }
        CHECK(cf_model_eval(m, s, ids, NT, lg, 0, &err) == CINFER_OK, "eval: %s", err.message);
        double d = max_diff(lg, a + (size_t)(NT - 1) * V, (size_t)V);
        printf("one pass of %d (window %d): last logits vs passes of 256: %.3g\n", NT, window, d);
        CHECK(d < 1e-4, "one pass of %d positions: last logits differ by %g", NT, d);
        /* then device steps and a rollback as long as the pass */
        int32_t t = 0;
        CHECK(cf_model_pick_last(m, s, &GREEDY, 0, &t, &err) == CINFER_OK && t == argmax(lg, V), "pick after a long pass");
        int32_t steps[8];
        for (int i = 0; i < 8; i++) CHECK(cf_model_decode_step(m, s, i ? steps[i - 1] : t, &GREEDY, 0, &steps[i], &err) == CINFER_OK, "step");
        CHECK(cf_seq_truncate(s, NT + 8 - chunk - 1, &err) == CINFER_OK, "rollback of chunk + 1: %s", err.message);
        CHECK(cf_model_eval(m, s, ids + NT - chunk + 7, chunk - 7, lg, 0, &err) == CINFER_OK, "re-eval: %s", err.message);
        d = max_diff(lg, a + (size_t)(NT - 1) * V, (size_t)V);
        CHECK(d < 1e-4, "after the rollback the last logits differ by %g", d);
        cf_seq_free(s);
    }
    printf("chunks: passes of 7, 256, 700 and 4096 over %d positions agree (7 vs 256: %.3g)\n", NT, d7);
    free(a);
    free(b);
    free(lg);
    cf_model_free(m);
    return 0;
}

int main(int argc, char **argv) {
    int rc;
    if (argc == 4 && !strcmp(argv[1], "--chunks")) rc = run_chunks(argv[2], argv[3]);
    else if (argc == 2) rc = run_model(argv[1]);
    else {
        fprintf(stderr, "usage: test_decode MODEL_DIR | test_decode --chunks CONFIG TMP_DIR\n");
        return 2;
    }
    printf("%d checks, %d failed\n", checks, failures);
    return rc || failures ? 1 : 0;
}
