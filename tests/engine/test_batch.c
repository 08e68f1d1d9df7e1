/* test_batch.c: the engine's continuous batch through the public API, on the CPU:
 *   - batch invariance: each of 16 mixed requests (prompt lengths from 1 to 64 tokens, greedy and seeded
 *     sampling picked on the device, penalties, a logit bias and logprobs picked on the host, stop strings,
 *     one cancelled by its consumer mid-way) gives the same tokens, text, logprobs and outcome alone (an
 *     engine of max_batch 1) as inside one batch, with long prompts prefilled in chunks beside the others'
 *     decode rows, cold and again with the prefix cache warm;
 *   - preemption: in a KV memory too small for them all, sequences are preempted and recomputed, and every
 *     output is still the same;
 *   - admission: a request that can never fit the KV memory is refused at open with a message naming the
 *     numbers (fit_context lowers max_tokens instead); requests that fit only one at a time all complete;
 *   - prefix cache: a request sharing a long prefix with an earlier one, and a chat's second turn, report
 *     the reused tokens in usage.cached_tokens and give the output of a cold run (cf_model_eval + argmax);
 *   - lookahead (a decode step queued behind the one in flight, its inputs picked on the device): each request
 *     alone and the batch of those that pick on the device give the same outputs with it as without, with
 *     stops, a cancellation, preemption and sessions ending while the step after theirs is in flight;
 *   - engine parameters are validated; every KV block is back in the pool when the sessions have ended.
 *
 * usage: test_batch MODEL_DIR | test_batch --tiny TMP_DIR (writes the tiny model there)
 * CINFER_TEST_THREADS sets the CPU threads (default 2). */
#include "cinfer.h"
#include "engine/engine.h"
#include "model/model.h"
#include "tiny_model.h"
#include "gate.h"
#include "../check.h"
#include "../model_ref.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static cinfer_model *M;
static cf_model *REF;
static int V, CTX, THREADS = 2, HAS_TEXT;
static int LOOKAHEAD = -1;   /* the engines' cinfer_engine_params.lookahead */

/* ---- requests ---- */

enum { N_SPECS = 16, MAX_PROMPT = 96 };

typedef struct spec {
    int np, max_tokens;
    int32_t prompt[MAX_PROMPT];
    float temperature, top_p, min_p, repetition_penalty, presence, frequency;
    int top_k, logprobs, top_logprobs, ignore_eos;
    int64_t seed;
    cinfer_logit_bias bias[2];
    int n_bias;
    char stop[8];       /* "" = none */
    int cancel_at;      /* > 0: the consumer cancels at this token index */
} spec;

static void fill_prompt(int32_t *ids, int n, unsigned seed) {
    for (int i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        ids[i] = 3 + (int32_t)((seed >> 8) % (unsigned)(V - 3));
    }
}

static spec make_spec(int np, int max_tokens, unsigned seed) {
    spec s;
    memset(&s, 0, sizeof s);
    s.np = np;
    s.max_tokens = max_tokens;
    fill_prompt(s.prompt, np, seed);
    s.temperature = 0;
    s.top_p = 1;
    s.repetition_penalty = 1;
    s.ignore_eos = 1;
    s.seed = -1;
    return s;
}

static void make_specs(spec *sp) {
    sp[0] = make_spec(1, 24, 100);
    sp[1] = make_spec(5, 30, 101);
    sp[2] = make_spec(9, 28, 102); sp[2].temperature = 1.0f; sp[2].seed = 11;
    sp[3] = make_spec(17, 26, 103); sp[3].temperature = 0.8f; sp[3].top_k = 20; sp[3].seed = 12;
    sp[4] = make_spec(33, 22, 104); sp[4].temperature = 1.0f; sp[4].top_p = 0.9f; sp[4].seed = 13;
    sp[5] = make_spec(40, 20, 105); sp[5].temperature = 1.1f; sp[5].min_p = 0.05f; sp[5].seed = 14;
    sp[6] = make_spec(12, 30, 106); sp[6].repetition_penalty = 1.3f;
    sp[7] = make_spec(20, 25, 107); sp[7].temperature = 0.9f; sp[7].presence = 0.5f; sp[7].frequency = 0.3f; sp[7].seed = 15;
    sp[8] = make_spec(7, 30, 108); sp[8].n_bias = 2;
    sp[8].bias[0] = (cinfer_logit_bias){5, 3.0f};
    sp[8].bias[1] = (cinfer_logit_bias){6, -2.0f};
    sp[9] = make_spec(24, 20, 109); sp[9].logprobs = 1; sp[9].top_logprobs = 5;
    sp[10] = make_spec(50, 18, 110); sp[10].temperature = 0.7f; sp[10].logprobs = 1; sp[10].top_logprobs = 3; sp[10].seed = 16;
    sp[11] = make_spec(14, 30, 111);                        /* stop string, set from its own output */
    sp[12] = make_spec(28, 30, 112); sp[12].temperature = 1.0f; sp[12].seed = 17;   /* likewise */
    sp[13] = make_spec(45, 30, 113); sp[13].cancel_at = 5;
    sp[14] = make_spec(64, 30, 114);
    sp[15] = make_spec(3, 30, 115); sp[15].ignore_eos = 0;
}

static cinfer_request request_of(const spec *s, const char **stops) {
    cinfer_request r = cinfer_request_default();
    r.prompt_ids = s->prompt;
    r.n_prompt_ids = (size_t)s->np;
    r.max_tokens = s->max_tokens;
    r.temperature = s->temperature;
    r.top_k = s->top_k;
    r.top_p = s->top_p;
    r.min_p = s->min_p;
    r.repetition_penalty = s->repetition_penalty;
    r.presence_penalty = s->presence;
    r.frequency_penalty = s->frequency;
    r.logit_bias = s->n_bias ? s->bias : NULL;
    r.n_logit_bias = (size_t)s->n_bias;
    r.logprobs = s->logprobs;
    r.top_logprobs = s->top_logprobs;
    r.ignore_eos = s->ignore_eos;
    r.seed = s->seed;
    r.ids_only = !HAS_TEXT;
    if (s->stop[0]) {
        stops[0] = s->stop;
        r.stop = stops;
        r.n_stop = 1;
    }
    return r;
}

/* ---- outputs ---- */

typedef struct output {
    cinfer_outcome outcome;
    cinfer_finish finish;
    cinfer_cancel_reason cancel;
    int32_t tokens[128];
    int n_tokens;
    char text[1024];
    size_t text_len;
    cinfer_logprobs lp[128];
    int has_lp;
    int cached;
    char error[256];
} output;

static void keep(const cinfer_result *r, output *o) {
    memset(o, 0, sizeof *o);
    o->outcome = r->outcome;
    o->finish = r->finish;
    o->cancel = r->cancel_reason;
    o->n_tokens = r->n_tokens < 128 ? (int)r->n_tokens : 128;
    memcpy(o->tokens, r->tokens, (size_t)o->n_tokens * sizeof *o->tokens);
    o->text_len = r->text_len < sizeof o->text ? r->text_len : sizeof o->text - 1;
    memcpy(o->text, r->text, o->text_len);
    o->has_lp = r->logprobs != NULL;
    if (r->logprobs) memcpy(o->lp, r->logprobs, (size_t)o->n_tokens * sizeof *o->lp);
    o->cached = r->usage.cached_tokens;
    snprintf(o->error, sizeof o->error, "%s", r->error.message);
}

/* Whether a and b are the same output: outcome, tokens, text and logprobs bit for bit. */
static int same_output(const output *a, const output *b, char *why, size_t len) {
    if (a->outcome != b->outcome || a->finish != b->finish || a->cancel != b->cancel) {
        snprintf(why, len, "outcome %s/%s vs %s/%s", cinfer_outcome_name(a->outcome), cinfer_finish_name(a->finish),
                 cinfer_outcome_name(b->outcome), cinfer_finish_name(b->finish));
        return 0;
    }
    if (a->n_tokens != b->n_tokens || memcmp(a->tokens, b->tokens, (size_t)a->n_tokens * sizeof *a->tokens)) {
        int k = 0;
        while (k < a->n_tokens && k < b->n_tokens && a->tokens[k] == b->tokens[k]) k++;
        snprintf(why, len, "%d vs %d tokens, first difference at %d", a->n_tokens, b->n_tokens, k);
        return 0;
    }
    if (a->text_len != b->text_len || memcmp(a->text, b->text, a->text_len)) {
        snprintf(why, len, "text '%s' vs '%s'", a->text, b->text);
        return 0;
    }
    if (a->has_lp != b->has_lp) {
        snprintf(why, len, "logprobs on one side only");
        return 0;
    }
    for (int i = 0; a->has_lp && i < a->n_tokens; i++) {
        const cinfer_logprobs *x = &a->lp[i], *y = &b->lp[i];
        int same = x->token == y->token && !memcmp(&x->logprob, &y->logprob, sizeof x->logprob) && x->n_top == y->n_top;
        for (int k = 0; same && k < x->n_top; k++)
            same = x->top[k].token == y->top[k].token && !memcmp(&x->top[k].logprob, &y->top[k].logprob, sizeof(float));
        if (!same) {
            snprintf(why, len, "logprobs of token %d differ", i);
            return 0;
        }
    }
    return 1;
}

/* ---- running ---- */

typedef struct client {
    int cancel_at;
} client;

static int on_event(const cinfer_event *ev, void *user) {
    const client *c = user;
    return ev->kind == CINFER_EVENT_TOKEN && c->cancel_at > 0 && ev->index == c->cancel_at;
}

/* The gate (gate.h) with request g of this file's kind. */
static cinfer_session *gate_close_spec(cinfer_engine *e, const spec *g) {
    const char *stops[1];
    cinfer_request r = request_of(g, stops);
    cinfer_session *s = NULL;
    cinfer_error err = {0};
    CHECK(gate_close(e, &r, &s, &err) == CINFER_OK, "gate: %s", err.message);
    return s;
}

/* Opens the n requests at once, behind the gate of request g when g is set (so that they start in the same turn),
 * and keeps their outputs. */
static void run_behind(cinfer_engine *e, const spec *sp, int n, const spec *g, output *out) {
    cinfer_session *gate = g ? gate_close_spec(e, g) : NULL;
    cinfer_session **ss = calloc((size_t)n, sizeof *ss);
    client *cl = calloc((size_t)n, sizeof *cl);
    for (int i = 0; i < n; i++) {
        const char *stops[1];
        cinfer_request r = request_of(&sp[i], stops);
        cinfer_session_params p = cinfer_session_default_params();
        p.output = CINFER_OUTPUT_CALLBACK;
        p.on_event = on_event;
        cl[i].cancel_at = sp[i].cancel_at;
        p.user = &cl[i];
        cinfer_error err = {0};
        CHECK(cinfer_session_open(e, &r, &p, &ss[i], &err) == CINFER_OK, "open %d: %s", i, err.message);
    }
    if (g) gate_open();
    for (int i = 0; i < n; i++) {
        const cinfer_result *res = NULL;
        cinfer_error err = {0};
        memset(&out[i], 0, sizeof out[i]);
        if (ss[i] && cinfer_session_wait(ss[i], -1, &res, &err) == CINFER_OK) keep(res, &out[i]);
        cinfer_session_free(ss[i]);
    }
    cinfer_session_free(gate);
    free(ss);
    free(cl);
}

/* the gate of run_all: a short request */
static spec short_gate(void) { return make_spec(2, 2, 999); }

/* run_behind with a short gate when gated */
static void run_all(cinfer_engine *e, const spec *sp, int n, int gated, output *out) {
    const spec g = short_gate();
    run_behind(e, sp, n, gated ? &g : NULL, out);
}

static void run_one(cinfer_engine *e, const spec *s, output *out) {
    run_all(e, s, 1, 0, out);
}

static cinfer_engine *engine(int max_batch, int max_batch_tokens, int64_t kv_memory) {
    cinfer_engine_params ep = cinfer_engine_default_params();
    ep.max_batch = max_batch;
    ep.max_batch_tokens = max_batch_tokens;
    ep.kv_memory = kv_memory;
    ep.lookahead = LOOKAHEAD;
    cinfer_engine *e = NULL;
    cinfer_error err = {0};
    CHECK(cinfer_engine_create(M, &ep, &e, &err) == CINFER_OK, "engine of %d, %d tokens, %lld bytes: %s", max_batch, max_batch_tokens,
          (long long)kv_memory, err.message);
    return e;
}

static void check_blocks_back(cinfer_engine *e, const char *when) {
    cf_engine_stats st = cf_engine_get_stats(e);
    CHECK(st.blocks_available == st.blocks_total, "%s: %d of %d KV blocks are back in the pool", when, st.blocks_available,
          st.blocks_total);
}

static void compare_all(const char *what, const output *got, const output *want, int n) {
    for (int i = 0; i < n; i++) {
        char why[256] = "";
        CHECK(same_output(&got[i], &want[i], why, sizeof why), "%s: request %d differs from its run alone: %s", what, i, why);
    }
}

/* Requests sp[idx[0..n)] (n <= N_SPECS) opened at once behind gate g (run_behind), each compared with its run alone
 * (alone[idx[i]]). */
static void run_picked(cinfer_engine *e, const spec *sp, const output *alone, const int *idx, int n, const spec *g, const char *what) {
    static spec psp[N_SPECS];
    static output got[N_SPECS], want[N_SPECS];
    for (int i = 0; i < n; i++) psp[i] = sp[idx[i]], want[i] = alone[idx[i]];
    run_behind(e, psp, n, g, got);
    compare_all(what, got, want, n);
}

/* Two consecutive printable ASCII bytes of a text after its first 3, as a stop string; "" when none. */
static void stop_from(const output *o, char *stop) {
    stop[0] = 0;
    for (size_t i = 3; i + 1 < o->text_len; i++) {
        unsigned char a = (unsigned char)o->text[i], b = (unsigned char)o->text[i + 1];
        if (a > ' ' && a < 127 && b > ' ' && b < 127) {
            stop[0] = (char)a;
            stop[1] = (char)b;
            stop[2] = 0;
            return;
        }
    }
}

/* ---- the checks ---- */

static void check_params(void) {
    cinfer_error err = {0};
    cinfer_engine *e = NULL;
    cinfer_engine_params ep = cinfer_engine_default_params();
    ep.max_batch = -1;
    CHECK(cinfer_engine_create(M, &ep, &e, &err) == CINFER_E_INVALID_ARGUMENT && !e, "max_batch -1: %s", err.message);
    ep = cinfer_engine_default_params();
    ep.max_batch_tokens = -2;
    CHECK(cinfer_engine_create(M, &ep, &e, &err) == CINFER_E_INVALID_ARGUMENT && !e, "max_batch_tokens -2: %s", err.message);
    ep = cinfer_engine_default_params();
    ep.kv_memory = -1;
    CHECK(cinfer_engine_create(M, &ep, &e, &err) == CINFER_E_INVALID_ARGUMENT && !e, "kv_memory -1: %s", err.message);
    ep = cinfer_engine_default_params();
    ep.kv_memory = 1;
    cinfer_status st = cinfer_engine_create(M, &ep, &e, &err);
    CHECK(st != CINFER_OK && !e, "kv_memory of 1 byte: %s", err.message);
    printf("  kv_memory of 1 byte: %s: %s\n", cinfer_status_name(st), err.message);
    ep = cinfer_engine_default_params();
    ep.lookahead = 2;
    CHECK(cinfer_engine_create(M, &ep, &e, &err) == CINFER_E_INVALID_ARGUMENT && !e, "lookahead 2: %s", err.message);
    ep = cinfer_engine_default_params();
    ep.max_batch = 100000;
    st = cinfer_engine_create(M, &ep, &e, &err);
    CHECK(st == CINFER_E_INVALID_ARGUMENT && !e, "max_batch 100000: %s", err.message);
    printf("  max_batch 100000: %s: %s\n", cinfer_status_name(st), err.message);
}

static _Atomic int n_preempt_logs;
static void log_cb(const char *line, void *user) {
    if (strstr(line, "preempted")) atomic_fetch_add(&n_preempt_logs, 1);
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
        fprintf(stderr, "usage: test_batch MODEL_DIR | test_batch --tiny TMP_DIR\n");
        return 2;
    }
    const char *nt = getenv("CINFER_TEST_THREADS");
    if (nt && atoi(nt) > 0) THREADS = atoi(nt);
    cinfer_error err = {0};
    cinfer_model_params mp = cinfer_model_default_params();
    mp.n_threads = THREADS;
    if (cinfer_model_load(dir, &mp, &M, &err) != CINFER_OK) { fprintf(stderr, "load %s: %s\n", dir, err.message); return 1; }
    cf_model_params rp = cf_model_default_params();
    rp.backend.n_threads = THREADS;
    if (cf_model_load(dir, &rp, &REF, &err) != CINFER_OK) { fprintf(stderr, "reference load: %s\n", err.message); return 1; }
    cinfer_model_info info = cinfer_model_get_info(M);
    V = info.vocab;
    CTX = info.context;
    HAS_TEXT = info.has_tokenizer;
    if (CTX < 128) { fprintf(stderr, "test_batch needs a context of 128 tokens or more (this one: %d)\n", CTX); return 1; }

    check_params();

    static spec sp[N_SPECS];
    static output alone[N_SPECS], got[N_SPECS];
    make_specs(sp);

    /* alone: an engine that runs one session at a time */
    cinfer_engine *e = engine(1, 0, 0);
    if (!e) return 1;
    for (int i = 11; i <= 12 && HAS_TEXT; i++) {
        run_one(e, &sp[i], &alone[i]);
        stop_from(&alone[i], sp[i].stop);
        printf("  request %d stops at '%s'\n", i, sp[i].stop);
    }
    for (int i = 0; i < N_SPECS; i++) run_one(e, &sp[i], &alone[i]);
    for (int i = 0; i < 2; i++) {
        int32_t want[64];
        CHECK(!ref_greedy(REF, V, sp[i].prompt, sp[i].np, sp[i].max_tokens, want) && alone[i].n_tokens == sp[i].max_tokens &&
                  !memcmp(alone[i].tokens, want, (size_t)sp[i].max_tokens * sizeof *want),
              "request %d alone differs from cf_model_eval + argmax", i);
    }
    CHECK(alone[13].outcome == CINFER_OUTCOME_CANCELLED && alone[13].n_tokens == 6, "the cancelled request: %s after %d tokens",
          cinfer_outcome_name(alone[13].outcome), alone[13].n_tokens);
    CHECK(!HAS_TEXT || (alone[11].finish == CINFER_FINISH_STOP && alone[11].n_tokens < sp[11].max_tokens), "request 11 did not stop at '%s'",
          sp[11].stop);
    for (int i = 0; i < N_SPECS; i++) CHECK(alone[i].outcome != CINFER_OUTCOME_FAILED, "request %d failed: %s", i, alone[i].error);
    check_blocks_back(e, "alone");
    cinfer_engine_free(e);

    /* one batch: every request starts in the same turn; 24 tokens a step, so the long prompts take several
     * steps beside the others' decode rows */
    e = engine(32, 24, 0);
    if (!e) return 1;
    run_all(e, sp, N_SPECS, 1, got);
    compare_all("batch, cold", got, alone, N_SPECS);
    cf_engine_stats st = cf_engine_get_stats(e);
    /* the short ones finish while the long prompts are still being prefilled, so not all 16 need meet */
    CHECK(st.peak_batch >= 10, "the largest step ran %d sequences of the %d", st.peak_batch, N_SPECS);
    int any_cached = 0;
    for (int i = 0; i < N_SPECS; i++) any_cached |= got[i].cached > 0;
    CHECK(!any_cached, "a cold batch reported cached tokens");
    check_blocks_back(e, "batch, cold");
    /* again with their prompts in the prefix cache */
    run_all(e, sp, N_SPECS, 1, got);
    compare_all("batch, warm", got, alone, N_SPECS);
    CHECK(got[14].cached >= 48, "a 64-token prompt run before reused %d tokens", got[14].cached);
    check_blocks_back(e, "batch, warm");
    printf("  batch: %ld steps, up to %d sequences in one\n", cf_engine_get_stats(e).steps, cf_engine_get_stats(e).peak_batch);

    /* prefix cache: a second request sharing 48 tokens, and a chat's second turn */
    {
        enum { P = 48, N = 12 };
        spec a = make_spec(P + 5, N, 200), b = make_spec(P + 7, N, 201);
        memcpy(b.prompt, a.prompt, P * sizeof *a.prompt);
        output oa, ob;
        run_one(e, &a, &oa);
        run_one(e, &b, &ob);
        int32_t want[N];
        CHECK(!ref_greedy(REF, V, b.prompt, b.np, N, want) && ob.n_tokens == N && !memcmp(ob.tokens, want, sizeof want),
              "shared prefix: the output differs from a cold run");
        CHECK(oa.cached == 0 && ob.cached == P, "shared prefix: cached %d then %d tokens, want 0 then %d", oa.cached, ob.cached, P);

        spec t1 = make_spec(20, 20, 202);
        output o1, o2;
        run_one(e, &t1, &o1);
        spec t2 = make_spec(20 + o1.n_tokens + 6, 12, 203);
        memcpy(t2.prompt, t1.prompt, 20 * sizeof *t1.prompt);
        memcpy(t2.prompt + 20, o1.tokens, (size_t)o1.n_tokens * sizeof *o1.tokens);
        run_one(e, &t2, &o2);
        const int fed = 20 + o1.n_tokens - 1, bs = cf_engine_get_stats(e).block_size;
        CHECK(o2.cached == fed / bs * bs, "second turn: %d cached tokens, want %d (the first turn's full blocks)", o2.cached,
              fed / bs * bs);
        int32_t want2[12];
        CHECK(!ref_greedy(REF, V, t2.prompt, t2.np, 12, want2) && o2.n_tokens == 12 && !memcmp(o2.tokens, want2, sizeof want2),
              "second turn: the output differs from a cold run");
        printf("  prefix cache: %d of %d prompt tokens reused; a second turn of %d tokens reused %d\n", ob.cached, b.np, t2.np,
               o2.cached);
    }
    check_blocks_back(e, "prefix cache");
    cinfer_engine_free(e);

    /* preemption: a KV memory of 10 blocks, each request fitting alone (at most 6 blocks) but not all at once */
    cinfer_engine_params ep = cinfer_engine_default_params();
    cf_engine_stats kv0;
    {
        cinfer_engine *probe = engine(1, 0, 0);
        if (!probe) return 1;
        kv0 = cf_engine_get_stats(probe);
        cinfer_engine_free(probe);
    }
    ep.max_batch = 32;
    ep.kv_memory = 10 * kv0.block_bytes;
    ep.log = log_cb;
    e = NULL;
    CHECK(cinfer_engine_create(M, &ep, &e, &err) == CINFER_OK, "engine: %s", err.message);
    if (!e) return 1;
    CHECK(cf_engine_get_stats(e).blocks_total == 10, "a KV memory of 10 blocks has %d", cf_engine_get_stats(e).blocks_total);
    run_all(e, sp, N_SPECS, 1, got);
    compare_all("preempted", got, alone, N_SPECS);
    st = cf_engine_get_stats(e);
    CHECK(st.preemptions > 0 && atomic_load(&n_preempt_logs) == st.preemptions, "%ld preemptions, %d logged", st.preemptions,
          atomic_load(&n_preempt_logs));
    printf("  10 KV blocks: %ld preemptions in %ld steps\n", st.preemptions, st.steps);
    check_blocks_back(e, "preemption");
    cinfer_engine_free(e);

    /* admission: 6 blocks (96 positions) */
    e = engine(32, 0, 6 * kv0.block_bytes);
    if (!e) return 1;
    {
        spec big = make_spec(64, 40, 300);
        const char *stops[1];
        cinfer_request r = request_of(&big, stops);
        cinfer_session *s = (cinfer_session *)1;
        cinfer_status st2 = cinfer_session_open(e, &r, NULL, &s, &err);
        CHECK(st2 == CINFER_E_OUT_OF_MEMORY && !s && strstr(err.message, "7 KV blocks") && strstr(err.message, "holds 6 blocks") &&
                  strstr(err.message, "at most 33"),
              "a request that can never fit: %s: %s", cinfer_status_name(st2), err.message);
        printf("  never fits: %s: %s\n", cinfer_status_name(st2), err.message);
        r.fit_context = 1;
        const cinfer_result *res = NULL;
        CHECK(cinfer_session_open(e, &r, NULL, &s, &err) == CINFER_OK, "fit_context: %s", err.message);
        if (s == (cinfer_session *)1) s = NULL;
        CHECK(s && cinfer_session_wait(s, -1, &res, &err) == CINFER_OK && res->outcome == CINFER_OUTCOME_COMPLETED &&
                  res->n_tokens == 33 && res->finish == CINFER_FINISH_LENGTH,
              "fit_context lowers max_tokens to the KV memory: %zu tokens", res ? res->n_tokens : 0);
        cinfer_session_free(s);
        /* three that fit one at a time (5 blocks each), with the references of a run alone */
        spec three[3];
        output want[3], out3[3];
        for (int i = 0; i < 3; i++) three[i] = make_spec(40, 40, 310 + (unsigned)i);
        three[1].temperature = 1.0f;
        three[1].seed = 21;
        three[2].repetition_penalty = 1.2f;
        for (int i = 0; i < 3; i++) run_one(e, &three[i], &want[i]);
        run_all(e, three, 3, 1, out3);
        compare_all("one at a time", out3, want, 3);
        for (int i = 0; i < 3; i++)
            CHECK(out3[i].outcome == CINFER_OUTCOME_COMPLETED && out3[i].n_tokens == 40, "request %d: %s with %d tokens", i,
                  cinfer_outcome_name(out3[i].outcome), out3[i].n_tokens);
    }
    check_blocks_back(e, "admission");
    cinfer_engine_free(e);

    /* lookahead: every request alone, the requests that pick on the device in one batch (where every step can be
     * followed, prompts longer than the budget too), then all 16 in a small KV memory (preemption) */
    LOOKAHEAD = 1;
    e = engine(1, 0, 0);
    if (!e) return 1;
    for (int i = 0; i < N_SPECS; i++) run_one(e, &sp[i], &got[i]);
    compare_all("alone, lookahead", got, alone, N_SPECS);
    long follow_ups = cf_engine_get_stats(e).lookahead_steps;
    check_blocks_back(e, "alone, lookahead");
    cinfer_engine_free(e);
    {
        static const int dev[] = {0, 1, 2, 3, 4, 5, 11, 12, 13, 14, 15};
        e = engine(32, 24, 0);
        if (!e) return 1;
        const spec g = short_gate();
        run_picked(e, sp, alone, dev, sizeof dev / sizeof dev[0], &g, "device picks in one batch, lookahead");
        const long batch_follow_ups = cf_engine_get_stats(e).lookahead_steps;
        CHECK(batch_follow_ups > 0 && follow_ups > 0, "lookahead queued %ld steps alone and %ld in the batch", follow_ups,
              batch_follow_ups);
        /* with a budget of 24 tokens the prompts of 33, 45 and 64 go in pieces, queued like the rest: every step but
         * the gate's first (30 of 41 when a piece drained the lookahead) */
        CHECK(cf_engine_get_stats(e).steps - batch_follow_ups == 1, "%ld of %ld steps queued with prompts in pieces (all but the first)",
              batch_follow_ups, cf_engine_get_stats(e).steps);
        printf("  lookahead: %ld steps queued behind another alone, %ld in the batch (of %ld)\n", follow_ups, batch_follow_ups,
               cf_engine_get_stats(e).steps);
        check_blocks_back(e, "batch, lookahead");
        cinfer_engine_free(e);
    }
    {   /* requests opened while a step is in flight (the gate's session, with tokens to go, holds the engine's thread
         * while the step after its first is queued) join the step queued behind that one, and give their outputs alone;
         * one (13) is cancelled by its consumer and leaves without stopping the lookahead */
        static const int dev[] = {0, 1, 2, 3, 13, 15};
        enum { N_DEV = sizeof dev / sizeof dev[0] };
        e = engine(32, 128, 0);
        if (!e) return 1;
        const spec g = make_spec(4, 24, 998);
        run_picked(e, sp, alone, dev, N_DEV, &g, "joined behind a step in flight");
        const cf_engine_stats js = cf_engine_get_stats(e);
        CHECK(js.lookahead_joins == N_DEV, "%ld of %d requests joined behind a step in flight", js.lookahead_joins, N_DEV);
        /* every step but the gate's first is queued: the joins, and the sessions' last tokens (those that end by length
         * are left out of the step after their last one, and settle when it lands) */
        CHECK(js.steps - js.lookahead_steps == 1, "%ld of %ld steps queued behind the one in flight (all but the first)", js.lookahead_steps,
              js.steps);
        printf("  lookahead: %ld of %d requests joined behind a step in flight; %ld of %ld steps queued\n", js.lookahead_joins, N_DEV,
               js.lookahead_steps, js.steps);
        check_blocks_back(e, "joins, lookahead");
        cinfer_engine_free(e);
    }
    ep.lookahead = 1;
    e = NULL;
    CHECK(cinfer_engine_create(M, &ep, &e, &err) == CINFER_OK, "engine: %s", err.message);
    if (!e) return 1;
    run_all(e, sp, N_SPECS, 1, got);
    compare_all("preempted, lookahead", got, alone, N_SPECS);
    check_blocks_back(e, "preemption, lookahead");
    cinfer_engine_free(e);

    cinfer_model_free(M);
    cf_model_free(REF);
    printf("%d checks, %d failed\n", checks, failures);
    return failures ? 1 : 0;
}
