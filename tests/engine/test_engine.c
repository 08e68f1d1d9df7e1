/* test_engine.c: the engine through the public API (include/cinfer.h): request validation (one status
 * code and message per mistake), the copy at open, greedy output against cf_model_eval + argmax,
 * log-probabilities against the model's logits, tokens picked on the device and on the host (the same for
 * a seed), stop ids, EOS and max_tokens, seeds, the three ways of consuming a session, cancellation from
 * another thread, the idle deadline on an injected clock, queue limits, and closing the engine with live
 * sessions.
 *
 * Text: prompts as text and as chat messages against their token ids, the streamed text against the
 * full decode, stop strings across token boundaries, held-back text released at the end.
 *
 * usage: test_engine MODEL_DIR        the checks that hold for any model (greedy, logprobs, text)
 *        test_engine --tiny TMP_DIR   writes the tiny model into TMP_DIR and runs every check
 * CINFER_TEST_THREADS sets the CPU threads (default 2); CINFER_TEST_LOOKAHEAD=1 runs every engine with lookahead
 * (cinfer_engine_params.lookahead 1: decode steps queued behind the one in flight, as on CUDA). */
#include "cinfer.h"
#include "model/model.h"
#include "tiny_model.h"
#include "gate.h"
#include "../check.h"

#include <ctype.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>


static cinfer_model *M;
static cinfer_engine *E;
static cf_model *REF;   /* the same folder loaded directly, for reference outputs */
static int V, CTX;
static int THREADS = 2;
static int LOOKAHEAD;   /* cinfer_engine_params.lookahead of every engine the test makes */
static const char *MODEL_DIR;

/* ---- helpers ---- */

static cinfer_engine_params engine_params(void) {
    cinfer_engine_params ep = cinfer_engine_default_params();
    ep.lookahead = LOOKAHEAD;
    return ep;
}

/* An engine on m with engine_params(). */
static cinfer_status engine_create(cinfer_model *m, cinfer_engine **e, cinfer_error *err) {
    const cinfer_engine_params ep = engine_params();
    return cinfer_engine_create(m, &ep, e, err);
}

static const int32_t PROMPT[] = {5, 17, 30, 2, 99, 41, 7};
enum { NP = sizeof PROMPT / sizeof PROMPT[0] };

static cinfer_request greedy_request(int max_tokens) {
    cinfer_request r = cinfer_request_default();
    r.prompt_ids = PROMPT;
    r.n_prompt_ids = NP;
    r.max_tokens = max_tokens;
    r.temperature = 0;
    r.ignore_eos = 1;
    return r;
}

/* Opens r in collect mode and waits for it; the session is returned for freeing. */
static const cinfer_result *run(const cinfer_request *r, cinfer_session **s) {
    cinfer_error err = {0};
    *s = NULL;
    cinfer_status st = cinfer_session_open(E, r, NULL, s, &err);
    CHECK(st == CINFER_OK, "open: %s", err.message);
    if (st != CINFER_OK) return NULL;
    const cinfer_result *res = NULL;
    CHECK(cinfer_session_wait(*s, -1, &res, &err) == CINFER_OK, "wait: %s", err.message);
    return res;
}

static int argmax(const float *v, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[b]) b = i;
    return b;
}

/* Greedy continuation by cf_model_eval + argmax; logits of every step into all (n * V) when non-NULL. */
static int ref_greedy(const int32_t *prompt, int np, int n, int32_t *out, float *all) {
    cinfer_error err = {0};
    cf_seq *s = NULL;
    float *lg = malloc((size_t)V * sizeof *lg);
    if (cf_seq_create(REF, 0, &s, &err) != CINFER_OK || cf_model_eval(REF, s, prompt, np, lg, 0, &err) != CINFER_OK) {
        fprintf(stderr, "reference: %s\n", err.message);
        free(lg);
        cf_seq_free(s);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        if (all) memcpy(all + (size_t)i * V, lg, (size_t)V * sizeof *lg);
        out[i] = argmax(lg, V);
        if (i + 1 < n) cf_model_eval(REF, s, &out[i], 1, lg, 0, &err);
    }
    free(lg);
    cf_seq_free(s);
    return 0;
}

static double log_sum_exp(const float *v, int n) {
    double mx = -INFINITY, s = 0;
    for (int i = 0; i < n; i++) mx = fmax(mx, v[i]);
    for (int i = 0; i < n; i++) s += exp(v[i] - mx);
    return mx + log(s);
}

/* The gate (gate.h) with a short greedy request: what is queued behind it stays queued. */
static cinfer_session *gate_close_engine(void) {
    cinfer_request r = greedy_request(2);
    cinfer_session *s = NULL;
    cinfer_error err = {0};
    CHECK(gate_close(E, &r, &s, &err) == CINFER_OK, "gate: %s", err.message);
    return s;
}

/* ---- checks that hold for any model ---- */

static void check_greedy(void) {
    enum { N = 24 };
    int32_t want[N];
    if (ref_greedy(PROMPT, NP, N, want, NULL)) { CHECK(0, "reference run failed"); return; }
    cinfer_request r = greedy_request(N);
    cinfer_session *s;
    const cinfer_result *res = run(&r, &s);
    if (res) {
        CHECK(res->outcome == CINFER_OUTCOME_COMPLETED && res->finish == CINFER_FINISH_LENGTH, "greedy: %s/%s",
              cinfer_outcome_name(res->outcome), cinfer_finish_name(res->finish));
        CHECK(res->n_tokens == N, "greedy: %zu tokens, want %d", res->n_tokens, N);
        int same = res->n_tokens == N;
        for (size_t i = 0; same && i < N; i++) same = res->tokens[i] == want[i];
        CHECK(same, "greedy output differs from cf_model_eval + argmax");
        CHECK(!strcmp(res->plan, "text:continuous") && !strcmp(cinfer_session_plan(s), "text:continuous"), "plan %s", res->plan);
        CHECK(res->usage.prompt_tokens == NP && res->usage.completion_tokens == N && res->usage.cached_tokens == 0,
              "usage %d/%d/%d", res->usage.prompt_tokens, res->usage.completion_tokens, res->usage.cached_tokens);
        CHECK(res->usage.ttft_s > 0 && res->usage.decode_tps > 0 && res->usage.total_s >= res->usage.ttft_s,
              "timings ttft %g decode %g total %g", res->usage.ttft_s, res->usage.decode_tps, res->usage.total_s);
        CHECK(res->logprobs == NULL, "logprobs without asking");
    }
    cinfer_session_free(s);
}

/* Log-probabilities, collected and streamed, against log-softmax of cf_model_eval's logits (plus the
 * logit bias, a processor). */
static void check_logprobs(void) {
    enum { N = 8, K = 5 };
    int32_t want[N];
    float *all = malloc((size_t)N * V * sizeof *all);
    if (ref_greedy(PROMPT, NP, N, want, all)) { CHECK(0, "reference run failed"); free(all); return; }
    /* a bias on a token that is not the argmax at step 0 changes the logprobs but not the first choice */
    int32_t biased = want[0] == 3 ? 4 : 3;
    float bias = -1.5f;
    cinfer_logit_bias lb = {biased, bias};
    for (int mode = 0; mode < 2; mode++) {
        cinfer_request r = greedy_request(1);
        r.logprobs = 1;
        r.top_logprobs = K;
        r.logit_bias = &lb;
        r.n_logit_bias = 1;
        r.max_tokens = 1;
        /* one token only: with the bias later tokens may differ from the unbiased reference */
        cinfer_session_params c = cinfer_session_default_params();
        c.output = mode ? CINFER_OUTPUT_PULL : CINFER_OUTPUT_COLLECT;
        cinfer_session *s = NULL;
        cinfer_error err = {0};
        CHECK(cinfer_session_open(E, &r, &c, &s, &err) == CINFER_OK, "open: %s", err.message);
        cinfer_logprobs got = {0};
        if (mode) {
            cinfer_event ev;
            CHECK(cinfer_session_next(s, &ev, -1, &err) == CINFER_OK && ev.kind == CINFER_EVENT_TOKEN && ev.logprobs,
                  "streamed token with logprobs");
            if (ev.logprobs) got = *ev.logprobs;
            CHECK(cinfer_session_next(s, &ev, -1, &err) == CINFER_OK && ev.kind == CINFER_EVENT_END, "END after one token");
        } else {
            const cinfer_result *res = NULL;
            cinfer_session_wait(s, -1, &res, &err);
            CHECK(res && res->logprobs && res->n_tokens == 1, "collected logprobs");
            if (res && res->logprobs) got = res->logprobs[0];
        }
        float *lg = malloc((size_t)V * sizeof *lg);
        memcpy(lg, all, (size_t)V * sizeof *lg);
        lg[biased] += bias;
        double lse = log_sum_exp(lg, V);
        CHECK(got.token == want[0], "token %d, want %d", got.token, want[0]);
        CHECK(fabs(got.logprob - (lg[want[0]] - lse)) < 1e-4, "logprob %g, want %g", got.logprob, lg[want[0]] - lse);
        CHECK(got.n_top == K, "n_top %d", got.n_top);
        for (int k = 0; k < got.n_top; k++) {
            int t = got.top[k].token;
            int rank = 0;
            for (int j = 0; j < V; j++) rank += lg[j] > lg[t] || (lg[j] == lg[t] && j < t);
            CHECK(rank == k, "top[%d] = token %d has rank %d", k, t, rank);
            CHECK(fabs(got.top[k].logprob - (lg[t] - lse)) < 1e-4, "top[%d] logprob %g, want %g", k, got.top[k].logprob, lg[t] - lse);
        }
        free(lg);
        cinfer_session_free(s);
    }
    /* several tokens without processors: every step's logprob */
    cinfer_request r = greedy_request(N);
    r.logprobs = 1;
    cinfer_session *s;
    const cinfer_result *res = run(&r, &s);
    if (res && res->logprobs && res->n_tokens == N) {
        double worst = 0;
        for (int i = 0; i < N; i++) {
            const float *lg = all + (size_t)i * V;
            worst = fmax(worst, fabs(res->logprobs[i].logprob - (lg[want[i]] - log_sum_exp(lg, V))));
            CHECK(res->logprobs[i].n_top == 0 && res->logprobs[i].token == want[i], "step %d", i);
        }
        CHECK(worst < 1e-4, "logprobs differ from log-softmax of the model's logits by %g", worst);
    } else {
        CHECK(0, "logprobs run");
    }
    cinfer_session_free(s);
    free(all);
}

/* ---- validation ---- */

static void expect_invalid(const char *what, const cinfer_request *r, cinfer_status want) {
    cinfer_session *s = (cinfer_session *)1;
    cinfer_error err = {0};
    cinfer_status st = cinfer_session_open(E, r, NULL, &s, &err);
    CHECK(st == want, "%s: %s, want %s (%s)", what, cinfer_status_name(st), cinfer_status_name(want), err.message);
    CHECK(s == NULL, "%s: session pointer not cleared", what);
    CHECK(err.code == want && err.message[0], "%s: error not filled", what);
    printf("  %-34s %-20s %s\n", what, cinfer_status_name(st), err.message);
    if (st == CINFER_OK) cinfer_session_free(s);
}

static void check_validation(void) {
    printf("validation errors:\n");
    cinfer_request r;
    int32_t bad_ids[] = {5, V};
    int32_t neg_ids[] = {-1};
    int32_t big_prompt[4096];
    for (int i = 0; i < CTX && i < 4096; i++) big_prompt[i] = i % V;
    const char *empty_stop[] = {""};
    cinfer_logit_bias bad_bias = {V + 3, 1.0f}, nan_bias = {3, NAN};

#define CASE(what, want, ...) do { r = greedy_request(8); __VA_ARGS__; expect_invalid(what, &r, want); } while (0)
    CASE("no prompt", CINFER_E_EMPTY_PROMPT, r.prompt_ids = NULL; r.n_prompt_ids = 0);
    CASE("zero prompt ids", CINFER_E_EMPTY_PROMPT, r.n_prompt_ids = 0);
    CASE("prompt id >= vocab", CINFER_E_TOKEN_OUT_OF_RANGE, r.prompt_ids = bad_ids; r.n_prompt_ids = 2);
    CASE("negative prompt id", CINFER_E_TOKEN_OUT_OF_RANGE, r.prompt_ids = neg_ids; r.n_prompt_ids = 1);
    CASE("max_tokens 0", CINFER_E_MAX_TOKENS, r.max_tokens = 0);
    CASE("max_tokens -5", CINFER_E_MAX_TOKENS, r.max_tokens = -5);
    CASE("prompt + max_tokens > context", CINFER_E_CONTEXT_OVERFLOW, r.max_tokens = CTX);
    CASE("prompt fills the context", CINFER_E_CONTEXT_OVERFLOW, r.prompt_ids = big_prompt; r.n_prompt_ids = (size_t)CTX;
         r.fit_context = 1);
    CASE("top_logprobs 21", CINFER_E_TOP_LOGPROBS, r.top_logprobs = 21);
    CASE("top_logprobs -1", CINFER_E_TOP_LOGPROBS, r.top_logprobs = -1);
    CASE("temperature -0.5", CINFER_E_TEMPERATURE, r.temperature = -0.5f);
    CASE("top_k -1", CINFER_E_TOP_K, r.top_k = -1);
    CASE("top_p 0", CINFER_E_TOP_P, r.top_p = 0);
    CASE("top_p 1.5", CINFER_E_TOP_P, r.top_p = 1.5f);
    CASE("min_p 2", CINFER_E_MIN_P, r.min_p = 2);
    CASE("repetition_penalty 0", CINFER_E_PENALTY, r.repetition_penalty = 0);
    CASE("repetition_window -1", CINFER_E_PENALTY, r.repetition_window = -1);
    CASE("presence_penalty 3", CINFER_E_PENALTY, r.presence_penalty = 3);
    CASE("frequency_penalty -2.5", CINFER_E_PENALTY, r.frequency_penalty = -2.5f);
    CASE("temperature NaN", CINFER_E_NOT_A_NUMBER, r.temperature = NAN);
    CASE("top_p inf", CINFER_E_NOT_A_NUMBER, r.top_p = INFINITY);
    CASE("logit_bias token >= vocab", CINFER_E_TOKEN_OUT_OF_RANGE, r.logit_bias = &bad_bias; r.n_logit_bias = 1);
    CASE("logit_bias NaN", CINFER_E_NOT_A_NUMBER, r.logit_bias = &nan_bias; r.n_logit_bias = 1);
    CASE("stop id >= vocab", CINFER_E_TOKEN_OUT_OF_RANGE, r.stop_ids = bad_ids + 1; r.n_stop_ids = 1);
    CASE("empty stop string", CINFER_E_INVALID_ARGUMENT, r.stop = empty_stop; r.n_stop = 1);
    CASE("two kinds of prompt", CINFER_E_INVALID_ARGUMENT, r.prompt_text = "hello");
    CASE("ids count without ids", CINFER_E_INVALID_ARGUMENT, r.prompt_ids = NULL);
    CASE("draft source 'medusa' (unknown)", CINFER_E_UNSUPPORTED, r.draft = "medusa");
    CASE("draft source 'draft' without a draft model", CINFER_E_UNSUPPORTED, r.draft = "draft");
    CASE("draft_max 17", CINFER_E_INVALID_ARGUMENT, r.draft_max = 17);
    CASE("draft_max -1", CINFER_E_INVALID_ARGUMENT, r.draft_max = -1);
    CASE("struct_size 0", CINFER_E_INVALID_ARGUMENT, r.struct_size = 0);
#undef CASE
    expect_invalid("NULL request", NULL, CINFER_E_INVALID_ARGUMENT);

    /* accepted: the limits themselves, draft "none", fit_context */
    r = greedy_request(CTX - NP);
    r.draft = "none";
    r.top_logprobs = CINFER_MAX_TOP_LOGPROBS;
    r.max_tokens = 2;
    cinfer_session *s;
    const cinfer_result *res = run(&r, &s);
    CHECK(res && res->outcome == CINFER_OUTCOME_COMPLETED, "draft none / top_logprobs 20");
    cinfer_session_free(s);
    r = greedy_request(100000);
    r.fit_context = 1;
    res = run(&r, &s);
    CHECK(res && res->finish == CINFER_FINISH_LENGTH && res->n_tokens == (size_t)(CTX - NP),
          "fit_context: %zu tokens, want %d", res ? res->n_tokens : 0, CTX - NP);
    cinfer_session_free(s);

    cinfer_session_params c = cinfer_session_default_params();
    c.output = CINFER_OUTPUT_CALLBACK;
    cinfer_error err = {0};
    r = greedy_request(2);
    CHECK(cinfer_session_open(E, &r, &c, &s, &err) == CINFER_E_INVALID_ARGUMENT, "callback mode without on_event");
    c = cinfer_session_default_params();
    c.idle_timeout = -1;
    CHECK(cinfer_session_open(E, &r, &c, &s, &err) == CINFER_E_INVALID_ARGUMENT, "negative idle_timeout");
    cinfer_engine *e2 = NULL;
    CHECK(cinfer_engine_create(M, NULL, &e2, &err) == CINFER_E_BUSY && !e2, "second engine on one model");
    cinfer_event ev;
    r = greedy_request(2);
    res = run(&r, &s);
    CHECK(cinfer_session_next(s, &ev, 0, &err) == CINFER_E_INVALID_ARGUMENT, "next on a collect session");
    cinfer_session_free(s);
}

/* The request is copied at open: the caller's buffers are freed and overwritten before the session runs. */
static void check_copy_at_open(void) {
    enum { N = 12 };
    cinfer_request r = greedy_request(N);
    cinfer_logit_bias lb = {7, 4.0f};
    r.logit_bias = &lb;
    r.n_logit_bias = 1;
    cinfer_session *s;
    const cinfer_result *res = run(&r, &s);
    if (!res) return;
    int32_t want[N];
    size_t n_want = res->n_tokens;
    memcpy(want, res->tokens, n_want * sizeof *want);
    /* a stop id that ends the run early, if the output has a token that first appears after position 2 */
    int32_t stop = -1;
    size_t stop_at = 0;
    for (size_t i = 2; i < n_want && stop < 0; i++) {
        int seen = 0;
        for (size_t j = 0; j < i; j++) seen |= want[j] == want[i];
        if (!seen) { stop = want[i]; stop_at = i; }
    }
    cinfer_session_free(s);

    cinfer_session *gate = gate_close_engine();
    int32_t *ids = malloc(sizeof PROMPT);
    memcpy(ids, PROMPT, sizeof PROMPT);
    cinfer_logit_bias *bias = malloc(sizeof *bias);
    *bias = lb;
    int32_t *stops = malloc(sizeof *stops);
    *stops = stop;
    r.prompt_ids = ids;
    r.logit_bias = bias;
    r.n_stop_ids = stop >= 0;
    r.stop_ids = stop >= 0 ? stops : NULL;
    cinfer_error err = {0};
    CHECK(cinfer_session_open(E, &r, NULL, &s, &err) == CINFER_OK, "open: %s", err.message);
    memset(ids, 0, sizeof PROMPT);
    bias->token = 0;
    bias->bias = -100;
    *stops = 0;
    free(ids);
    free(bias);
    free(stops);
    CHECK(cinfer_session_get_state(s) == CINFER_STATE_CREATED, "queued session state %s",
          cinfer_state_name(cinfer_session_get_state(s)));
    gate_open();
    cinfer_session_wait(s, -1, &res, &err);
    size_t n_exp = stop >= 0 ? stop_at : n_want;
    int same = res && res->n_tokens == n_exp;
    for (size_t i = 0; same && i < n_exp; i++) same = res->tokens[i] == want[i];
    CHECK(same, "output changed when the caller's buffers changed after open");
    CHECK(stop < 0 || (res && res->finish == CINFER_FINISH_STOP), "stop id did not end with finish stop");
    cinfer_session_free(s);
    cinfer_session_free(gate);
}

/* ---- stop ids, EOS, length, seeds ---- */

static void check_finish(void) {
    cinfer_session *s;
    cinfer_request r = greedy_request(5);
    const cinfer_result *res = run(&r, &s);
    CHECK(res && res->outcome == CINFER_OUTCOME_COMPLETED && res->finish == CINFER_FINISH_LENGTH && res->n_tokens == 5,
          "max_tokens 5 -> length");
    cinfer_session_free(s);

    cinfer_model_info info = cinfer_model_get_info(M);
    CHECK(info.n_eos >= 1, "the model has EOS ids");
    if (info.n_eos < 1) return;
    cinfer_logit_bias lb = {info.eos_ids[0], 1000.0f};
    r = greedy_request(6);
    r.logit_bias = &lb;
    r.n_logit_bias = 1;
    r.ignore_eos = 0;
    res = run(&r, &s);
    CHECK(res && res->finish == CINFER_FINISH_STOP && res->n_tokens == 0 && res->text_len == 0, "forced EOS -> stop, no tokens");
    cinfer_session_free(s);
    r.ignore_eos = 1;
    res = run(&r, &s);
    int all_eos = res && res->n_tokens == 6;
    for (size_t i = 0; all_eos && i < 6; i++) all_eos = res->tokens[i] == info.eos_ids[0];
    CHECK(all_eos && res->finish == CINFER_FINISH_LENGTH, "ignore_eos: EOS tokens are emitted until max_tokens");
    cinfer_session_free(s);

    /* stop id: the first token that is new after position 1 */
    int32_t ref[16];
    ref_greedy(PROMPT, NP, 16, ref, NULL);
    for (int k = 1; k < 16; k++) {
        int seen = 0;
        for (int j = 0; j < k; j++) seen |= ref[j] == ref[k];
        if (seen) continue;
        r = greedy_request(16);
        r.stop_ids = &ref[k];
        r.n_stop_ids = 1;
        res = run(&r, &s);
        CHECK(res && res->finish == CINFER_FINISH_STOP && res->n_tokens == (size_t)k, "stop id %d at %d: %zu tokens", ref[k], k,
              res ? res->n_tokens : 0);
        cinfer_session_free(s);
        break;
    }

    /* sampling: a named seed repeats; a fresh seed is reported and repeats when named */
    int32_t a[16], b[16];
    size_t na = 0;
    r = greedy_request(16);
    r.temperature = 1.0f;
    r.seed = 42;
    res = run(&r, &s);
    if (res) { na = res->n_tokens; memcpy(a, res->tokens, na * sizeof *a); CHECK(res->seed == 42, "seed %llu", (unsigned long long)res->seed); }
    cinfer_session_free(s);
    res = run(&r, &s);
    CHECK(res && res->n_tokens == na && !memcmp(res->tokens, a, na * sizeof *a), "same seed, different output");
    cinfer_session_free(s);
    r.seed = -1;
    res = run(&r, &s);
    uint64_t fresh = res ? res->seed : 0;
    size_t nb = res ? res->n_tokens : 0;
    if (res) memcpy(b, res->tokens, nb * sizeof *b);
    cinfer_session_free(s);
    CHECK(fresh <= (uint64_t)INT64_MAX, "fresh seed %llu cannot be named in a request", (unsigned long long)fresh);
    r.seed = (int64_t)(fresh & INT64_MAX);
    res = run(&r, &s);
    CHECK(res && res->n_tokens == nb && !memcmp(res->tokens, b, nb * sizeof *b), "the reported seed does not repeat the run");
    cinfer_session_free(s);
}

/* ---- consumption ---- */

typedef struct collected {
    int n_tokens, n_end, bad_order;
    int32_t tokens[64];
} collected;

static int collect_cb(const cinfer_event *ev, void *user) {
    collected *c = user;
    if (ev->kind == CINFER_EVENT_TOKEN) {
        if (c->n_end || ev->index != c->n_tokens) c->bad_order = 1;
        if (c->n_tokens < 64) c->tokens[c->n_tokens] = ev->token;
        c->n_tokens++;
    } else {
        c->n_end++;
    }
    return 0;
}

static void check_modes(void) {
    enum { N = 10 };
    int32_t want[N];
    ref_greedy(PROMPT, NP, N, want, NULL);
    cinfer_request r = greedy_request(N);
    cinfer_error err = {0};

    collected c = {0};
    cinfer_session_params p = cinfer_session_default_params();
    p.output = CINFER_OUTPUT_CALLBACK;
    p.on_event = collect_cb;
    p.user = &c;
    cinfer_session *s;
    CHECK(cinfer_session_open(E, &r, &p, &s, &err) == CINFER_OK, "open: %s", err.message);
    const cinfer_result *res;
    cinfer_session_wait(s, -1, &res, &err);   /* returns after END was handled */
    CHECK(c.n_tokens == N && c.n_end == 1 && !c.bad_order && !memcmp(c.tokens, want, sizeof want), "callback stream");
    cinfer_session_free(s);

    p = cinfer_session_default_params();
    p.output = CINFER_OUTPUT_PULL;
    CHECK(cinfer_session_open(E, &r, &p, &s, &err) == CINFER_OK, "open: %s", err.message);
    int n = 0, ok = 1;
    cinfer_event ev;
    for (;;) {
        if (cinfer_session_next(s, &ev, -1, &err) != CINFER_OK) { ok = 0; break; }
        if (ev.kind == CINFER_EVENT_END) break;
        ok &= ev.index == n && n < N && ev.token == want[n];
        n++;
    }
    CHECK(ok && n == N, "pull stream: %d tokens", n);
    CHECK(cinfer_session_next(s, &ev, 0, &err) == CINFER_OK && ev.kind == CINFER_EVENT_END, "END repeats");
    CHECK(cinfer_session_get_state(s) == CINFER_STATE_TERMINAL, "terminal after END");
    cinfer_session_free(s);

    /* a timeout on an empty queue */
    cinfer_session *gate = gate_close_engine();
    CHECK(cinfer_session_open(E, &r, &p, &s, &err) == CINFER_OK, "open: %s", err.message);
    CHECK(cinfer_session_next(s, &ev, 0.01, &err) == CINFER_E_TIMEOUT, "next times out while queued");
    CHECK(cinfer_session_wait(s, 0, &res, &err) == CINFER_E_TIMEOUT && res == NULL, "wait(0) on a live session");
    gate_open();
    cinfer_session_free(s);
    cinfer_session_free(gate);
}

/* ---- cancellation ---- */

static void *cancel_thread(void *arg) {
    cinfer_session_cancel(arg);
    cinfer_session_cancel(arg);
    return NULL;
}

typedef struct cancel_at {
    cinfer_session *s;
    int at, seen;
    int close;        /* return non-zero instead of cancelling */
    int free_self;    /* free the session from inside the callback */
} cancel_at;

static int cancel_cb(const cinfer_event *ev, void *user) {
    cancel_at *c = user;
    if (ev->kind != CINFER_EVENT_TOKEN) return 0;
    c->seen++;
    if (ev->index != c->at) return 0;
    if (c->close) return 1;
    if (c->free_self) {
        cinfer_session_free(c->s);
        return 0;
    }
    pthread_t t;
    pthread_create(&t, NULL, cancel_thread, c->s);
    pthread_join(t, NULL);
    return 0;
}

static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static char last_log[1024];

static int n_device_picks, n_host_picks;  /* sessions opened on each path, from the engine's log */
static int n_idle_logs;                   /* outcome lines naming consumer_idle */

static void log_cb(const char *line, void *user) {
    pthread_mutex_lock(&log_mu);
    snprintf(last_log, sizeof last_log, "%s", line);
    n_device_picks += strstr(line, "tokens picked on the device") != NULL;
    n_host_picks += strstr(line, "tokens picked on the host") != NULL;
    n_idle_logs += strstr(line, "consumer_idle") != NULL;
    pthread_mutex_unlock(&log_mu);
}

static void pick_counts(int *device, int *host) {
    pthread_mutex_lock(&log_mu);
    *device = n_device_picks;
    *host = n_host_picks;
    pthread_mutex_unlock(&log_mu);
}

/* Requests with nothing but temperature and truncation pick their tokens on the device; a logit bias of 0
 * (a processor that changes nothing), log-probabilities or CINFER_DEVICE_SAMPLING=0 (at model load) keep them on the
 * host. Both paths give the same tokens for a seed (on the CPU, exactly). */
static void check_pick_paths(void) {
    enum { N = 20 };
    const struct { float t; int32_t k; float p, mp; } cfg[] = {{0, 0, 1, 0}, {1.0f, 0, 1, 0}, {0.8f, 10, 1, 0}, {1.2f, 0, 0.9f, 0},
                                                               {1.0f, 0, 1, 0.05f}, {0.9f, 40, 0.8f, 0.02f}};
    const cinfer_logit_bias zero = {3, 0.0f};
    int dev0, host0, dev, host;
    for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
        cinfer_request r = greedy_request(N);
        r.temperature = cfg[c].t;
        r.top_k = cfg[c].k;
        r.top_p = cfg[c].p;
        r.min_p = cfg[c].mp;
        r.seed = 4242 + (int64_t)c;
        int32_t a[N] = {0};
        size_t na = 0;
        cinfer_session *s;
        pick_counts(&dev0, &host0);
        const cinfer_result *res = run(&r, &s);
        pick_counts(&dev, &host);
        CHECK(dev == dev0 + 1 && host == host0, "config %zu: not picked on the device (%d, %d)", c, dev - dev0, host - host0);
        if (res) { na = res->n_tokens; memcpy(a, res->tokens, na * sizeof *a); }
        CHECK(na == N, "config %zu: %zu tokens", c, na);
        cinfer_session_free(s);
        r.logit_bias = &zero;
        r.n_logit_bias = 1;
        res = run(&r, &s);
        pick_counts(&dev0, &host0);
        CHECK(dev0 == dev && host0 == host + 1, "config %zu with a logit bias: not picked on the host", c);
        CHECK(res && res->n_tokens == na && !memcmp(res->tokens, a, na * sizeof *a), "config %zu: the device and host paths differ", c);
        cinfer_session_free(s);
    }
    cinfer_request r = greedy_request(2);
    r.logprobs = 1;
    cinfer_session *s;
    pick_counts(&dev0, &host0);
    run(&r, &s);
    cinfer_session_free(s);
    r.logprobs = 0;
    /* the knob is tuning, read once when a model loads: a second model and engine with it off */
    setenv("CINFER_DEVICE_SAMPLING", "0", 1);
    cinfer_error err = {0};
    cinfer_model *m2 = NULL;
    cinfer_engine *e2 = NULL;
    cinfer_model_params mp = cinfer_model_default_params();
    mp.n_threads = THREADS;
    cinfer_engine_params ep = engine_params();
    ep.log = log_cb;
    CHECK(cinfer_model_load(MODEL_DIR, &mp, &m2, &err) == CINFER_OK, "load with CINFER_DEVICE_SAMPLING=0: %s", err.message);
    unsetenv("CINFER_DEVICE_SAMPLING");
    if (m2 && cinfer_engine_create(m2, &ep, &e2, &err) == CINFER_OK) {
        const cinfer_result *res = NULL;
        s = NULL;
        CHECK(cinfer_session_open(e2, &r, NULL, &s, &err) == CINFER_OK && cinfer_session_wait(s, -1, &res, &err) == CINFER_OK,
              "run with CINFER_DEVICE_SAMPLING=0: %s", err.message);
        cinfer_session_free(s);
    }
    cinfer_model_free(m2);
    pick_counts(&dev, &host);
    CHECK(dev == dev0 && host == host0 + 2, "logprobs or CINFER_DEVICE_SAMPLING=0 picked on the device");
}

/* Cancels the session, then lets the engine go on (see gate_close). */
static void *wait_cancel_open(void *arg) {
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
    cinfer_session_cancel(arg);
    gate_open();
    return NULL;
}

static void check_cancel(void) {
    cinfer_error err = {0};
    cinfer_request r = greedy_request(40);
    cinfer_session_params p = cinfer_session_default_params();
    p.output = CINFER_OUTPUT_CALLBACK;
    p.on_event = cancel_cb;
    const cinfer_result *res;

    /* cancel from a second thread during token 3's event: no further token is committed */
    cancel_at c = {.at = 3};
    p.user = &c;
    CHECK(cinfer_session_open(E, &r, &p, &c.s, &err) == CINFER_OK, "open: %s", err.message);
    cinfer_session_wait(c.s, -1, &res, &err);
    CHECK(res->outcome == CINFER_OUTCOME_CANCELLED && res->cancel_reason == CINFER_CANCEL_REQUESTED && res->n_tokens == 4 &&
          c.seen == 4, "cancel at token 3: %s/%s with %zu tokens", cinfer_outcome_name(res->outcome),
          cinfer_cancel_reason_name(res->cancel_reason), res->n_tokens);
    cinfer_session_cancel(c.s);  /* idempotent after the end too */
    CHECK(res->outcome == CINFER_OUTCOME_CANCELLED && res->cancel_reason == CINFER_CANCEL_REQUESTED, "outcome changed");
    cinfer_session_free(c.s);

    /* the callback returns non-zero: consumer closed */
    c = (cancel_at){.at = 2, .close = 1};
    CHECK(cinfer_session_open(E, &r, &p, &c.s, &err) == CINFER_OK, "open: %s", err.message);
    cinfer_session_wait(c.s, -1, &res, &err);
    CHECK(res->outcome == CINFER_OUTCOME_CANCELLED && res->cancel_reason == CINFER_CANCEL_CONSUMER_CLOSED && res->n_tokens == 3,
          "consumer closed: %s with %zu tokens", cinfer_cancel_reason_name(res->cancel_reason), res->n_tokens);
    cinfer_session_free(c.s);

    /* freed from inside its own callback: the engine frees it when done */
    c = (cancel_at){.at = 1, .free_self = 1};
    CHECK(cinfer_session_open(E, &r, &p, &c.s, &err) == CINFER_OK, "open: %s", err.message);
    cinfer_request r2 = greedy_request(8);
    cinfer_session *after;
    res = run(&r2, &after);  /* admitted with it or after it: 8 tokens later the first one has settled */
    CHECK(c.seen == 2, "tokens after a free in the callback: %d", c.seen);
    cinfer_session_free(after);

    /* a pulling consumer blocked in next() while another thread cancels (its session waits behind a gate) */
    p = cinfer_session_default_params();
    p.output = CINFER_OUTPUT_PULL;
    r = greedy_request(CTX - NP);
    cinfer_session *s, *gate = gate_close_engine();
    CHECK(cinfer_session_open(E, &r, &p, &s, &err) == CINFER_OK, "open: %s", err.message);
    pthread_t t;
    pthread_create(&t, NULL, wait_cancel_open, s);
    cinfer_event ev;
    int n = 0;
    while (cinfer_session_next(s, &ev, -1, &err) == CINFER_OK && ev.kind == CINFER_EVENT_TOKEN) n++;
    pthread_join(t, NULL);
    cinfer_session_wait(s, -1, &res, &err);
    CHECK(ev.kind == CINFER_EVENT_END && res->outcome == CINFER_OUTCOME_CANCELLED && res->cancel_reason == CINFER_CANCEL_REQUESTED &&
          n == 0 && res->n_tokens == 0, "pull consumer sees END after a cancel (%d tokens)", n);
    cinfer_session_free(s);
    cinfer_session_free(gate);

    /* a queued session cancelled while another runs ends without running */
    gate = gate_close_engine();
    r = greedy_request(4);
    CHECK(cinfer_session_open(E, &r, NULL, &s, &err) == CINFER_OK, "open: %s", err.message);
    cinfer_session_cancel(s);
    gate_open();
    cinfer_session_wait(s, -1, &res, &err);
    CHECK(res->outcome == CINFER_OUTCOME_CANCELLED && res->n_tokens == 0 && res->cancel_reason == CINFER_CANCEL_REQUESTED,
          "queued then cancelled");
    cinfer_session_free(s);
    cinfer_session_free(gate);

    /* freeing a live session cancels it (consumer closed), as the engine's log says */
    gate = gate_close_engine();
    CHECK(cinfer_session_open(E, &r, NULL, &s, &err) == CINFER_OK, "open: %s", err.message);
    gate_open();
    cinfer_session_free(s);
    cinfer_session_free(gate);
    r2 = greedy_request(1);
    res = run(&r2, &after);
    cinfer_session_free(after);
}

/* ---- idle deadline on an injected clock ---- */

static pthread_t main_thread;
static _Atomic int engine_clock_calls;
static _Atomic long pull_clock;   /* the clock when the test drives it */
static _Atomic int clock_mode;    /* 0: 0 for the engine's first 4 readings, then 100; 1: pull_clock */

static double test_now(void *user) {
    if (atomic_load(&clock_mode) == 1) return (double)atomic_load(&pull_clock);
    if (pthread_equal(pthread_self(), main_thread)) return 0;
    return atomic_fetch_add(&engine_clock_calls, 1) < 4 ? 0 : 100;
}

static void check_idle(void) {
    cinfer_error err = {0};
    cinfer_engine_free(E);
    cinfer_engine_params ep = engine_params();
    ep.now = test_now;
    ep.log = log_cb;
    E = NULL;
    CHECK(cinfer_engine_create(M, &ep, &E, &err) == CINFER_OK, "engine: %s", err.message);
    if (!E) return;

    /* nobody pulls: the engine's first readings (preparation, prefill, the first token) see 0, later
     * ones 100, so the first event has waited 100 s > 5 s and the session ends soon after it */
    cinfer_request r = greedy_request(40);
    cinfer_session_params p = cinfer_session_default_params();
    p.output = CINFER_OUTPUT_PULL;
    p.idle_timeout = 5;
    cinfer_session *s;
    const cinfer_result *res;
    pthread_mutex_lock(&log_mu);
    int idle_logs = n_idle_logs;
    pthread_mutex_unlock(&log_mu);
    CHECK(cinfer_session_open(E, &r, &p, &s, &err) == CINFER_OK, "open: %s", err.message);
    cinfer_session_wait(s, -1, &res, &err);
    CHECK(res->outcome == CINFER_OUTCOME_CANCELLED && res->cancel_reason == CINFER_CANCEL_CONSUMER_IDLE && res->n_tokens >= 1 &&
          res->n_tokens < 40,
          "idle consumer: %s/%s after %zu tokens", cinfer_outcome_name(res->outcome), cinfer_cancel_reason_name(res->cancel_reason),
          res->n_tokens);
    cinfer_session_free(s);  /* returns once the engine is done with s: its outcome line is logged */
    /* (not necessarily the last line: the open line, logged by this thread, may come after it) */
    pthread_mutex_lock(&log_mu);
    CHECK(n_idle_logs == idle_logs + 1, "no consumer_idle outcome in the log (last line: %s)", last_log);
    pthread_mutex_unlock(&log_mu);

    /* a consumer that pulls every event and lets 3 s pass after each: 120 s in all, never idle for 5 */
    atomic_store(&clock_mode, 1);
    CHECK(cinfer_session_open(E, &r, &p, &s, &err) == CINFER_OK, "open: %s", err.message);
    cinfer_event ev;
    while (cinfer_session_next(s, &ev, -1, &err) == CINFER_OK && ev.kind == CINFER_EVENT_TOKEN) atomic_fetch_add(&pull_clock, 3);
    cinfer_session_wait(s, -1, &res, &err);
    CHECK(res->outcome == CINFER_OUTCOME_COMPLETED && res->n_tokens == 40 && atomic_load(&pull_clock) == 120,
          "busy consumer: %s after %zu tokens", cinfer_outcome_name(res->outcome), res->n_tokens);
    /* timings come from the injected clock too: it only takes multiples of 3 up to 120 */
    CHECK(res->usage.total_s >= 0 && res->usage.total_s <= 120 && fmod(res->usage.total_s, 3) == 0, "total_s %g on the test clock",
          res->usage.total_s);
    cinfer_session_free(s);

    /* the queue limit */
    cinfer_engine_free(E);
    ep = engine_params();
    ep.max_queued = 1;
    CHECK(cinfer_engine_create(M, &ep, &E, &err) == CINFER_OK, "engine: %s", err.message);
    cinfer_session *gate = gate_close_engine(), *q1 = NULL, *q2 = NULL;
    r = greedy_request(2);
    CHECK(cinfer_session_open(E, &r, NULL, &q1, &err) == CINFER_OK, "first queued: %s", err.message);
    CHECK(cinfer_session_open(E, &r, NULL, &q2, &err) == CINFER_E_BUSY && !q2, "second queued: %s", err.message);
    printf("  %-34s %-20s %s\n", "queue full", cinfer_status_name(err.code), err.message);
    gate_open();
    cinfer_session_free(q1);
    cinfer_session_free(gate);
    cinfer_engine_free(E);
    E = NULL;
    CHECK(engine_create(M, &E, &err) == CINFER_OK, "engine: %s", err.message);
}

/* ---- closing the engine with live sessions ---- */

static _Atomic int slow_started;

static int slow_cb(const cinfer_event *ev, void *user) {
    atomic_store(&slow_started, 1);
    struct timespec ts = {0, 2 * 1000 * 1000};
    nanosleep(&ts, NULL);
    return 0;
}

static void check_close(void) {
    cinfer_error err = {0};
    cinfer_request r = greedy_request(CTX - NP);
    cinfer_session_params cb = cinfer_session_default_params();
    cb.output = CINFER_OUTPUT_CALLBACK;
    cb.on_event = slow_cb;
    cinfer_session_params pull = cinfer_session_default_params();
    pull.output = CINFER_OUTPUT_PULL;
    cinfer_session *s[4] = {0};
    CHECK(cinfer_session_open(E, &r, &cb, &s[0], &err) == CINFER_OK, "open: %s", err.message);
    CHECK(cinfer_session_open(E, &r, &pull, &s[1], &err) == CINFER_OK, "open: %s", err.message);
    CHECK(cinfer_session_open(E, &r, NULL, &s[2], &err) == CINFER_OK, "open: %s", err.message);
    CHECK(cinfer_session_open(E, &r, &cb, &s[3], &err) == CINFER_OK, "open: %s", err.message);
    while (!atomic_load(&slow_started)) {
        struct timespec ts = {0, 100 * 1000};
        nanosleep(&ts, NULL);
    }
    cinfer_engine_free(E);
    E = NULL;
    for (int i = 0; i < 4; i++) {
        CHECK(cinfer_session_get_state(s[i]) == CINFER_STATE_TERMINAL, "session %d not terminal after engine_free", i);
        const cinfer_result *res = NULL;
        CHECK(cinfer_session_wait(s[i], 0, &res, &err) == CINFER_OK, "wait");
        CHECK(res && res->outcome == CINFER_OUTCOME_CANCELLED && res->cancel_reason == CINFER_CANCEL_ENGINE_CLOSED,
              "session %d: %s/%s", i, res ? cinfer_outcome_name(res->outcome) : "-", res ? cinfer_cancel_reason_name(res->cancel_reason) : "-");
        /* the four share the batch: each may have a token of the step that was running */
        CHECK(res && (i > 0 || res->n_tokens >= 1) && res->n_tokens < (size_t)(CTX - NP), "session %d: %zu tokens", i,
              res ? res->n_tokens : 0);
    }
    cinfer_event ev;
    size_t pulled = 0;
    while (cinfer_session_next(s[1], &ev, -1, &err) == CINFER_OK && ev.kind == CINFER_EVENT_TOKEN) pulled++;
    CHECK(ev.kind == CINFER_EVENT_END, "pull session ends after its %zu tokens", pulled);
    for (int i = 0; i < 4; i++) cinfer_session_free(s[i]);
}

/* ---- text ---- */

/* Runs r in pull mode; the concatenated event texts (END's included) go to *stream (malloc'd). */
static const cinfer_result *run_pull(const cinfer_request *r, cinfer_session **s, char **stream, size_t *stream_len,
                                     size_t *end_len) {
    cinfer_error err = {0};
    cinfer_session_params p = cinfer_session_default_params();
    p.output = CINFER_OUTPUT_PULL;
    *stream = NULL;
    *stream_len = *end_len = 0;
    if (cinfer_session_open(E, r, &p, s, &err) != CINFER_OK) {
        CHECK(0, "open: %s", err.message);
        return NULL;
    }
    size_t len = 0, cap = 256;
    char *buf = malloc(cap);
    cinfer_event ev;
    while (cinfer_session_next(*s, &ev, -1, &err) == CINFER_OK) {
        while (len + ev.text_len + 1 > cap) buf = realloc(buf, cap *= 2);
        memcpy(buf + len, ev.text, ev.text_len);
        len += ev.text_len;
        if (ev.kind == CINFER_EVENT_END) {
            *end_len = ev.text_len;
            break;
        }
    }
    buf[len] = 0;
    *stream = buf;
    *stream_len = len;
    const cinfer_result *res = NULL;
    cinfer_session_wait(*s, -1, &res, &err);
    return res;
}

/* The streamed text is the result's text and the full decode of the result's tokens. */
static void check_text_matches_decode(void) {
    cinfer_request r = greedy_request(24);
    cinfer_session *s;
    char *stream;
    size_t stream_len, end_len;
    const cinfer_result *res = run_pull(&r, &s, &stream, &stream_len, &end_len);
    if (res) {
        char *full = NULL;
        size_t full_len = 0;
        cinfer_error err = {0};
        CHECK(cinfer_detokenize(M, res->tokens, res->n_tokens, &full, &full_len, &err) == CINFER_OK, "detokenize: %s", err.message);
        CHECK(full && res->text_len == full_len && !memcmp(res->text, full, full_len) && res->text[res->text_len] == 0,
              "result text '%s' is not the decode of its tokens '%s'", res->text, full ? full : "");
        CHECK(stream_len == res->text_len && !memcmp(stream, res->text, res->text_len), "streamed text '%s' != result '%s'",
              stream, res->text);
        cinfer_free(full);
    }
    free(stream);
    cinfer_session_free(s);
}

static cinfer_logit_bias letters_only[TINY_VOCAB];
static size_t n_letters_only;

/* Greedy, restricted to lowercase letters and spaces so that every token is one byte of text. */
static cinfer_request letters_request(int max_tokens) {
    cinfer_request r = greedy_request(max_tokens);
    if (!n_letters_only)
        for (int id = 0; id < TINY_VOCAB; id++) {
            int b = id - TINY_BYTE;
            if (!(b >= 0 && (islower(b) || b == ' '))) letters_only[n_letters_only++] = (cinfer_logit_bias){id, -100.0f};
        }
    r.logit_bias = letters_only;
    r.n_logit_bias = n_letters_only;
    return r;
}

static void bytes_to_ids(const char *text, int32_t *ids, int *n) {
    for (const char *p = text; *p; p++) ids[(*n)++] = TINY_BYTE + (unsigned char)*p;
}

static int same_tokens(const cinfer_result *a, const int32_t *b, size_t n) {
    return a && a->n_tokens == n && !memcmp(a->tokens, b, n * sizeof *b);
}

static void check_text_prompts(void) {
    cinfer_error err = {0};
    int32_t ids[256];
    int n = 0;
    bytes_to_ids("hello world", ids, &n);
    int32_t *tok = NULL;
    size_t n_tok = 0;
    CHECK(cinfer_tokenize(M, "hello world", 11, 1, &tok, &n_tok, &err) == CINFER_OK && n_tok == (size_t)n &&
          !memcmp(tok, ids, n * sizeof *ids), "tokenize 'hello world'");
    cinfer_free(tok);

    enum { N = 12 };
    cinfer_request r = greedy_request(N);
    r.prompt_ids = ids;
    r.n_prompt_ids = (size_t)n;
    cinfer_session *s;
    const cinfer_result *res = run(&r, &s);
    int32_t want[N];
    size_t n_want = res ? res->n_tokens : 0;
    if (res) memcpy(want, res->tokens, n_want * sizeof *want);
    cinfer_session_free(s);
    r = greedy_request(N);
    r.prompt_ids = NULL;
    r.n_prompt_ids = 0;
    r.prompt_text = "hello world";
    res = run(&r, &s);
    CHECK(same_tokens(res, want, n_want) && res->usage.prompt_tokens == n, "text prompt differs from its ids");
    cinfer_session_free(s);

    /* chat messages rendered with the ChatML template, special tokens parsed */
    n = 0;
    ids[n++] = 1;
    bytes_to_ids("system\nbe brief", ids, &n);
    ids[n++] = 2;
    bytes_to_ids("\n", ids, &n);
    ids[n++] = 1;
    bytes_to_ids("user\nhi", ids, &n);
    ids[n++] = 2;
    bytes_to_ids("\n", ids, &n);
    int n_no_gen = n;
    ids[n++] = 1;
    bytes_to_ids("assistant\n", ids, &n);
    r = greedy_request(N);
    r.prompt_ids = ids;
    r.n_prompt_ids = (size_t)n;
    res = run(&r, &s);
    n_want = res ? res->n_tokens : 0;
    if (res) memcpy(want, res->tokens, n_want * sizeof *want);
    cinfer_session_free(s);
    cinfer_message msgs[] = {{.role = "system", .content = "be brief"}, {.role = "user", .content = "hi"}};
    r = greedy_request(N);
    r.prompt_ids = NULL;
    r.n_prompt_ids = 0;
    r.messages = msgs;
    r.n_messages = 2;
    res = run(&r, &s);
    CHECK(same_tokens(res, want, n_want) && res->usage.prompt_tokens == n, "chat prompt differs from its ids (%d prompt tokens, want %d)",
          res ? res->usage.prompt_tokens : -1, n);
    cinfer_session_free(s);
    r.add_generation_prompt = 0;
    res = run(&r, &s);
    CHECK(res && res->usage.prompt_tokens == n_no_gen, "without the generation prompt: %d tokens, want %d",
          res ? res->usage.prompt_tokens : -1, n_no_gen);
    cinfer_session_free(s);

    /* the user's own "<|im_end|>" in a message is the template's business; in a text prompt it is the special token */
    r = greedy_request(1);
    r.prompt_ids = NULL;
    r.n_prompt_ids = 0;
    r.prompt_text = "<|im_end|>";
    res = run(&r, &s);
    CHECK(res && res->usage.prompt_tokens == 1, "special token text: %d prompt tokens", res ? res->usage.prompt_tokens : -1);
    cinfer_session_free(s);

    r = greedy_request(4);
    const char *bad_stop[] = {"ok", "\xff\xfe"};
    r.stop = bad_stop;
    r.n_stop = 2;
    expect_invalid("stop string not UTF-8", &r, CINFER_E_INVALID_ARGUMENT);
    r = greedy_request(4);
    cinfer_message bad_msg[] = {{.role = NULL, .content = "x"}};
    r.prompt_ids = NULL;
    r.n_prompt_ids = 0;
    r.messages = bad_msg;
    r.n_messages = 1;
    expect_invalid("message without a role", &r, CINFER_E_INVALID_ARGUMENT);
    r.messages = msgs;
    r.n_messages = 0;
    expect_invalid("no messages", &r, CINFER_E_EMPTY_PROMPT);
    r = greedy_request(4);
    r.prompt_ids = NULL;
    r.n_prompt_ids = 0;
    r.prompt_text = "";
    expect_invalid("empty prompt text", &r, CINFER_E_EMPTY_PROMPT);
}

static void check_stop_strings(void) {
    enum { N = 40 };
    cinfer_request r = letters_request(N);
    cinfer_session *s;
    char *stream;
    size_t stream_len, end_len;
    const cinfer_result *res = run_pull(&r, &s, &stream, &stream_len, &end_len);
    if (!res || res->text_len != N) {
        CHECK(0, "letters-only run: %zu bytes of text", res ? res->text_len : 0);
        free(stream);
        cinfer_session_free(s);
        return;
    }
    char T[N + 1];
    memcpy(T, res->text, N + 1);
    int32_t toks[N];
    memcpy(toks, res->tokens, sizeof toks);
    free(stream);
    cinfer_session_free(s);
    printf("  letters-only greedy text: '%s'\n", T);

    /* a stop string over three tokens: the text ends before its first match, the token completing it is
     * the last one */
    char stop[4];
    memcpy(stop, T + 10, 3);
    stop[3] = 0;
    size_t at = (size_t)(strstr(T, stop) - T);
    const char *stops[] = {"never-generated-#", stop};
    r = letters_request(N);
    r.stop = stops;
    r.n_stop = 2;
    res = run_pull(&r, &s, &stream, &stream_len, &end_len);
    CHECK(res && res->finish == CINFER_FINISH_STOP && res->text_len == at && !memcmp(res->text, T, at) &&
          res->n_tokens == at + 3 && !memcmp(res->tokens, toks, (at + 3) * sizeof *toks),
          "stop '%s' at %zu: %s, text '%s', %zu tokens", stop, at, res ? cinfer_finish_name(res->finish) : "-",
          res ? res->text : "", res ? res->n_tokens : 0);
    CHECK(stream && !strcmp(stream, res ? res->text : ""), "streamed '%s'", stream ? stream : "");
    free(stream);
    cinfer_session_free(s);

    /* text that may begin a stop string is held back, and released at the end (in END) when the stop
     * never completes */
    char tail_stop[3] = {T[N - 1], '#', 0};
    const char *tail_stops[] = {tail_stop};
    r = letters_request(N);
    r.stop = tail_stops;
    r.n_stop = 1;
    res = run_pull(&r, &s, &stream, &stream_len, &end_len);
    CHECK(res && res->finish == CINFER_FINISH_LENGTH && !strcmp(res->text, T) && stream && !strcmp(stream, T) && end_len == 1,
          "held-back tail: %s, text '%s', END carried %zu bytes", res ? cinfer_finish_name(res->finish) : "-", res ? res->text : "",
          end_len);
    free(stream);
    cinfer_session_free(s);

    /* the same through a callback consumer */
    r = letters_request(N);
    r.stop = stops;
    r.n_stop = 2;
    res = run(&r, &s);
    CHECK(res && res->text_len == at && res->finish == CINFER_FINISH_STOP, "collected stop");
    cinfer_session_free(s);
}

/* A folder without tokenizer.json takes token ids only; one without a chat template takes no messages. */
static void check_missing_text_parts(const char *root) {
    char d[4096];
    cinfer_error err = {0};
    cinfer_message msgs[] = {{.role = "user", .content = "hi"}};
    const char *stops[] = {"x"};
    for (int flags = TINY_NO_TOKENIZER; flags <= TINY_NO_TEMPLATE; flags++) {
        snprintf(d, sizeof d, "%s-%s", root, flags == TINY_NO_TOKENIZER ? "no-tokenizer" : "no-template");
        cinfer_model *m = NULL;
        cinfer_engine *e = NULL;
        cinfer_model_params mp = cinfer_model_default_params();
        mp.n_threads = THREADS;
        if (tiny_model_write(d, flags) || cinfer_model_load(d, &mp, &m, &err) != CINFER_OK ||
            engine_create(m, &e, &err) != CINFER_OK) {
            CHECK(0, "%s: %s", d, err.message);
            cinfer_model_free(m);
            continue;
        }
        cinfer_model_info info = cinfer_model_get_info(m);
        CHECK(info.has_tokenizer == (flags != TINY_NO_TOKENIZER) && !info.has_chat_template, "%s: info", d);
        cinfer_engine *saved = E;
        E = e;
        cinfer_request r = greedy_request(4);
        r.prompt_ids = NULL;
        r.n_prompt_ids = 0;
        r.messages = msgs;
        r.n_messages = 1;
        expect_invalid(flags == TINY_NO_TOKENIZER ? "messages without a tokenizer" : "messages without a template", &r,
                       flags == TINY_NO_TOKENIZER ? CINFER_E_TOKENIZER : CINFER_E_TEMPLATE);
        if (flags == TINY_NO_TOKENIZER) {
            r = greedy_request(4);
            r.prompt_ids = NULL;
            r.n_prompt_ids = 0;
            r.prompt_text = "hi";
            expect_invalid("text without a tokenizer", &r, CINFER_E_TOKENIZER);
            r = greedy_request(4);
            r.stop = stops;
            r.n_stop = 1;
            expect_invalid("stop strings without a tokenizer", &r, CINFER_E_TOKENIZER);
            r = greedy_request(4);
            cinfer_session *s;
            const cinfer_result *res = run(&r, &s);
            CHECK(res && res->n_tokens == 4 && res->text_len == 0 && res->text && !res->text[0], "ids without a tokenizer: no text");
            cinfer_session_free(s);
        }
        E = saved;
        cinfer_model_free(m);  /* frees e too */
    }
}

/* ---- model loading ---- */

static int n_progress, cancel_after;
static float last_fraction;
static void progress_cb(float f, void *user) {
    n_progress++;
    last_fraction = f;
}
static int cancel_cb_load(void *user) { return n_progress >= cancel_after; }

static void check_load(const char *dir) {
    cinfer_error err = {0};
    cinfer_model *m = NULL;
    cinfer_model_params p = cinfer_model_default_params();
    p.progress = progress_cb;
    p.cancel = cancel_cb_load;
    p.n_threads = THREADS;
    cancel_after = 2;
    CHECK(cinfer_model_load(dir, &p, &m, &err) == CINFER_E_CANCELLED && !m, "cancelled load: %s", err.message);
    n_progress = 0;
    cancel_after = 1000;
    CHECK(cinfer_model_load(dir, &p, &m, &err) == CINFER_OK && n_progress >= 2 && last_fraction == 1.0f, "load with progress");
    /* freeing a model frees its engine */
    cinfer_engine *e = NULL;
    CHECK(engine_create(m, &e, &err) == CINFER_OK, "engine: %s", err.message);
    cinfer_model_free(m);
    p = cinfer_model_default_params();
    p.n_threads = -1;
    CHECK(cinfer_model_load(dir, &p, &m, &err) == CINFER_E_INVALID_ARGUMENT, "n_threads -1");
    CHECK(cinfer_model_load("/nonexistent/folder", NULL, &m, &err) == CINFER_E_IO, "missing folder: %s", err.message);
}

int main(int argc, char **argv) {
    const char *dir;
    int tiny = argc == 3 && !strcmp(argv[1], "--tiny");
    if (tiny) {
        dir = argv[2];
        if (tiny_model_write(dir, 0)) { fprintf(stderr, "cannot write the tiny model to %s\n", dir); return 1; }
    } else if (argc == 2) {
        dir = argv[1];
    } else {
        fprintf(stderr, "usage: test_engine MODEL_DIR | test_engine --tiny TMP_DIR\n");
        return 2;
    }
    main_thread = pthread_self();
    MODEL_DIR = dir;
    const char *nt = getenv("CINFER_TEST_THREADS"), *la = getenv("CINFER_TEST_LOOKAHEAD");
    if (nt && atoi(nt) > 0) THREADS = atoi(nt);
    if (la && atoi(la) == 1) LOOKAHEAD = 1;
    cinfer_error err = {0};
    cinfer_model_params mp = cinfer_model_default_params();
    mp.n_threads = THREADS;
    if (cinfer_model_load(dir, &mp, &M, &err) != CINFER_OK) { fprintf(stderr, "load %s: %s\n", dir, err.message); return 1; }
    cf_model_params rp = cf_model_default_params();
    rp.backend.n_threads = THREADS;
    if (cf_model_load(dir, &rp, &REF, &err) != CINFER_OK) { fprintf(stderr, "reference load: %s\n", err.message); return 1; }
    V = cinfer_model_get_info(M).vocab;
    CTX = cinfer_model_get_info(M).context;
    if (CTX > 4096) CTX = 4096;
    cinfer_engine_params ep = engine_params();
    ep.log = log_cb;
    if (cinfer_engine_create(M, &ep, &E, &err) != CINFER_OK) { fprintf(stderr, "engine: %s\n", err.message); return 1; }

    check_greedy();
    check_pick_paths();
    check_logprobs();
    if (cinfer_model_get_info(M).has_tokenizer) check_text_matches_decode();
    if (tiny) {
        check_text_prompts();
        check_stop_strings();
        check_missing_text_parts(dir);
        check_validation();
        check_copy_at_open();
        check_finish();
        check_modes();
        check_cancel();
        check_idle();
        check_close();
    }
    cinfer_engine_free(E);
    cinfer_model_free(M);
    cf_model_free(REF);
    if (tiny) check_load(dir);
    printf("%d checks, %d failed\n", checks, failures);
    return failures ? 1 : 0;
}
