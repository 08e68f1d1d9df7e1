/* test_spec.c: speculative decoding (src/spec, the engine's verification inside the continuous batch).
 *
 *   test_spec --unit             the n-gram source against a brute-force prompt lookup (incremental commits
 *                                and prefill alike), cf_draft_many (looping, got reset on failure), the replay
 *                                source
 *   test_spec MODEL_DIR          greedy output identical with and without ngram and oracle (replay of the
 *                                plain output, every draft accepted) drafts; rollback: a verification's
 *                                truncate leaves logits bit-identical to a fresh run (runner level)
 *   test_spec --tiny TMP_DIR     writes the tiny model and adds: sampled output identical for a seed with and
 *                                without speculation (temperature, top-k/p, min-p, penalties, logit bias,
 *                                logprobs); a chi-square test that tokens sampled through verification rows
 *                                follow the target distribution; cancellation in the middle of a verified run
 *                                (by the consumer and from another thread); a batch of mixed requests (plain
 *                                and speculating, stop strings and stop ids and max_tokens inside accepted
 *                                runs) identical to each run alone without speculation; preemption with
 *                                drafts; bad draft names and default_draft refused; blocks all returned
 *   test_spec --copy MODEL_DIR   a text model: on a prompt the answer copies, ngram drafts are accepted
 * CINFER_TEST_THREADS sets the CPU threads (default 2). */
#include "cinfer.h"
#include "base/status.h"
#include "engine/engine.h"
#include "model/model.h"
#include "model/runner.h"
#include "spec/draft.h"
#include "spec/ngram.h"
#include "spec/replay.h"
#include "../engine/gate.h"
#include "../engine/tiny_model.h"
#include "../check.h"
#include "../stats.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int THREADS = 2;
/* engines draft whenever their sources propose (cf_engine_spec_always), so that counts of drafts do not depend on
 * timings; the first greedy checks run with the cost policy as shipped */
static int SPEC_ALWAYS = 1;
static int TINY;   /* the tiny model (--tiny) */

/* ---- unit: the n-gram source ---- */

/* Prompt lookup by brute force: the longest suffix (max_n .. min_n) occurring earlier with a token after it,
 * its most recent occurrence, what followed (repeating with the match's period past the end). */
static int ref_lookup(const int32_t *ids, int n, int min_n, int max_n, int want, int32_t *out) {
    for (int g = max_n; g >= min_n; g--) {
        if (g >= n) continue;
        for (int end = n - 1; end >= g; end--) {   /* the earlier occurrence ends before position end */
            if (memcmp(ids + end - g, ids + n - g, (size_t)g * sizeof *ids)) continue;
            const int period = n - end;
            for (int k = 0; k < want; k++) out[k] = end + k < n ? ids[end + k] : out[k - period];
            return want;
        }
    }
    return 0;
}

static void unit_ngram(void) {
    cinfer_error err = {0};
    cf_draft_provider *p = NULL;
    CHECK(cf_ngram_provider_create(0, 5, &p, &err) == CINFER_E_INVALID_ARGUMENT && !p, "ngram 0..5 accepted");
    CHECK(cf_ngram_provider_create(3, 2, &p, &err) == CINFER_E_INVALID_ARGUMENT && !p, "ngram 3..2 accepted");
    CHECK(cf_ngram_provider_create(1, 17, &p, &err) == CINFER_E_INVALID_ARGUMENT && !p, "ngram 1..17 accepted");
    /* a hand-worked case: "a b c d a b" -> after "a b" came "c d a b" */
    CHECK(cf_ngram_provider_create(0, 0, &p, &err) == CINFER_OK, "ngram defaults: %s", err.message);
    cf_draft_source *s = NULL;
    CHECK(cf_draft_open(p, &s, &err) == CINFER_OK, "open: %s", err.message);
    const int32_t abc[] = {1, 2, 3, 4, 1, 2};
    int32_t d[CF_DRAFT_MAX];
    int got = -1;
    CHECK(s->ops->prefill(s, abc, 6, &err) == CINFER_OK, "prefill");
    CHECK(s->ops->draft(s, 3, d, &got, &err) == CINFER_OK && got == 3 && d[0] == 3 && d[1] == 4 && d[2] == 1,
          "a b c d a b -> %d: %d %d %d", got, d[0], d[1], d[2]);
    CHECK(s->ops->draft(s, 8, d, &got, &err) == CINFER_OK && got == 8 && d[4] == 3 && d[7] == 2, "periodic extension");
    const int32_t none[] = {1, 2, 3, 4, 5};
    CHECK(s->ops->prefill(s, none, 5, &err) == CINFER_OK && s->ops->draft(s, 4, d, &got, &err) == CINFER_OK && got == 0,
          "no repeat, no draft (%d)", got);
    /* the most recent occurrence wins: 7 9 | 7 8 | 7 -> 8 */
    const int32_t recent[] = {7, 9, 7, 8, 7};
    CHECK(s->ops->prefill(s, recent, 5, &err) == CINFER_OK && s->ops->draft(s, 1, d, &got, &err) == CINFER_OK && got == 1 &&
              d[0] == 8, "most recent: %d", d[0]);
    /* the longest suffix wins: 5 1 2 | 6 1 2 | 3 ... 1 2 with "6 1 2" earlier: 9 1 2 -> the 2-gram "1 2" (most recent: 3);
     * with the 3-gram "6 1 2" present it wins */
    const int32_t longest[] = {6, 1, 2, 8, 5, 1, 2, 3, 6, 1, 2};
    CHECK(s->ops->prefill(s, longest, 11, &err) == CINFER_OK && s->ops->draft(s, 1, d, &got, &err) == CINFER_OK && got == 1 &&
              d[0] == 8, "longest: %d", d[0]);
    cf_draft_close(s);
    cf_draft_provider_free(p);

    /* random contexts over small vocabularies, built by commits of 1-3 tokens, against the brute force */
    for (int cfg = 0; cfg < 3; cfg++) {
        const int min_n = cfg == 2 ? 2 : 1, max_n = cfg == 0 ? 4 : cfg == 1 ? 1 : 6, vocab = cfg == 1 ? 50 : 6;
        CHECK(cf_ngram_provider_create(min_n, max_n, &p, &err) == CINFER_OK, "ngram %d..%d", min_n, max_n);
        cf_draft_source *inc = NULL, *pre = NULL;
        cf_draft_open(p, &inc, &err);
        cf_draft_open(p, &pre, &err);
        enum { N = 3000 };
        static int32_t ctx[N];
        unsigned seed = 1234u + (unsigned)cfg;
        int n = 3;
        for (int i = 0; i < n; i++) ctx[i] = (int32_t)(i % vocab);
        inc->ops->prefill(inc, ctx, n, &err);
        int bad = 0, hits = 0;
        while (n < N - 4) {
            seed = seed * 1103515245u + 12345u;
            const int add = 1 + (int)((seed >> 16) % 3);
            for (int i = 0; i < add; i++) {
                seed = seed * 1103515245u + 12345u;
                /* mostly copies of an earlier stretch, so that long matches occur */
                ctx[n + i] = (seed >> 20) % 4 ? ctx[(n + i) / 2] : (int32_t)((seed >> 8) % (unsigned)vocab);
            }
            n += add;
            CHECK(inc->ops->commit(inc, 0, ctx, n, &err) == CINFER_OK, "commit: %s", err.message);
            int32_t want_d[CF_DRAFT_MAX], got_d[CF_DRAFT_MAX];
            const int want = 1 + (int)((seed >> 4) % CF_DRAFT_MAX);
            const int rg = ref_lookup(ctx, n, min_n, max_n, want, want_d);
            int g = -1;
            inc->ops->draft(inc, want, got_d, &g, &err);
            if (g != rg || memcmp(got_d, want_d, (size_t)g * sizeof *got_d)) bad++;
            hits += rg > 0;
            if (n % 97 < 3) {   /* a prefill of the same context agrees */
                pre->ops->prefill(pre, ctx, n, &err);
                pre->ops->draft(pre, want, got_d, &g, &err);
                if (g != rg || memcmp(got_d, want_d, (size_t)g * sizeof *got_d)) bad++;
            }
        }
        CHECK(!bad && hits > 100, "ngram %d..%d: %d drafts differ from the brute-force lookup (%d hits)", min_n, max_n, bad, hits);
        printf("  ngram %d..%d on %d tokens: incremental and prefilled drafts match the brute force (%d with drafts)\n", min_n,
               max_n, n, hits);
        cf_draft_close(inc);
        cf_draft_close(pre);
        cf_draft_provider_free(p);
    }
}

/* A provider without draft_many whose sources propose 7 7 7... and fail once asked for more than 5. */
typedef struct fake_src {
    cf_draft_source base;
    int drafted;
} fake_src;
static cinfer_status fk_prefill(cf_draft_source *s, const int32_t *ids, int n, cinfer_error *err) { return CINFER_OK; }
static cinfer_status fk_draft(cf_draft_source *s, int n, int32_t *out, int *got, cinfer_error *err) {
    if (n > 5) return cf_fail(err, CINFER_E_INTERNAL, "asked for %d", n);
    for (int i = 0; i < n; i++) out[i] = 7;
    *got = n;
    ((fake_src *)s)->drafted += n;
    return CINFER_OK;
}
static cinfer_status fk_commit(cf_draft_source *s, int a, const int32_t *ids, int n, cinfer_error *err) { return CINFER_OK; }
static void fk_close(cf_draft_source *s) { free(s); }
static const cf_draft_source_ops fk_sops = {fk_prefill, fk_draft, fk_commit, fk_close};
static cinfer_status fk_open(cf_draft_provider *p, cf_draft_source **out, cinfer_error *err) {
    fake_src *s = calloc(1, sizeof *s);
    s->base.ops = &fk_sops;
    s->base.provider = p;
    *out = &s->base;
    return CINFER_OK;
}
static void fk_free(cf_draft_provider *p) { (void)p; }
static const cf_draft_provider_ops fk_pops = {.name = "fake", .open = fk_open, .draft_many = NULL, .free = fk_free};

static void unit_many_and_replay(void) {
    cinfer_error err = {0};
    cf_draft_provider fp = {&fk_pops};
    cf_draft_source *src[3];
    for (int i = 0; i < 3; i++) cf_draft_open(&fp, &src[i], &err);
    int32_t b0[CF_DRAFT_MAX], b1[CF_DRAFT_MAX], b2[CF_DRAFT_MAX];
    int32_t *const outs[3] = {b0, b1, b2};
    int want[3] = {2, 0, 4}, got[3] = {-1, -1, -1};
    CHECK(cf_draft_many(&fp, src, 3, want, outs, got, &err) == CINFER_OK && got[0] == 2 && got[1] == 0 && got[2] == 4 && b2[3] == 7,
          "draft_many by loop: %d %d %d", got[0], got[1], got[2]);
    int want2[3] = {2, 6, 1};
    CHECK(cf_draft_many(&fp, src, 3, want2, outs, got, &err) != CINFER_OK && !got[0] && !got[1] && !got[2],
          "a failing source: got %d %d %d, all must be 0", got[0], got[1], got[2]);
    int want3[1] = {CF_DRAFT_MAX + 1};
    CHECK(cf_draft_many(&fp, src, 1, want3, outs, got, &err) == CINFER_E_INVALID_ARGUMENT && !got[0], "want above CF_DRAFT_MAX");
    for (int i = 0; i < 3; i++) cf_draft_close(src[i]);

    const int32_t r0[] = {1, 2, 3, 4, 5, 6}, r1[] = {1, 2, 9, 9};
    const int32_t *const seqs[] = {r0, r1};
    const int lens[] = {6, 4};
    cf_draft_provider *rp = NULL;
    CHECK(cf_replay_provider_create(seqs, lens, 2, &rp, &err) == CINFER_OK, "replay: %s", err.message);
    cf_draft_source *s = NULL;
    cf_draft_open(rp, &s, &err);
    int g = -1;
    s->ops->prefill(s, r0, 2, &err);
    CHECK(s->ops->draft(s, 3, b0, &g, &err) == CINFER_OK && g == 3 && b0[0] == 3 && b0[2] == 5, "replay follows the longest");
    s->ops->commit(s, 3, r0, 5, &err);
    CHECK(s->ops->draft(s, 3, b0, &g, &err) == CINFER_OK && g == 1 && b0[0] == 6, "replay near its end: %d", g);
    const int32_t off[] = {1, 2, 3, 8};
    s->ops->commit(s, 0, off, 4, &err);
    CHECK(s->ops->draft(s, 3, b0, &g, &err) == CINFER_OK && g == 0, "replay off its recordings: %d", g);
    s->ops->prefill(s, r1, 3, &err);
    CHECK(s->ops->draft(s, 3, b0, &g, &err) == CINFER_OK && g == 1 && b0[0] == 9, "replay of the other recording");
    cf_draft_close(s);
    /* a recording replaced: sources opened afterwards follow the new one; a bad index or length changes nothing */
    const int32_t r2[] = {1, 2, 3, 7, 7};
    CHECK(cf_replay_provider_replace(rp, 0, r2, 5, &err) == CINFER_OK, "replace: %s", err.message);
    CHECK(cf_replay_provider_replace(rp, 2, r2, 5, &err) == CINFER_E_INVALID_ARGUMENT, "replace recording 2 of 2");
    CHECK(cf_replay_provider_replace(rp, 0, r2, -1, &err) == CINFER_E_INVALID_ARGUMENT, "replace with length -1");
    cf_draft_open(rp, &s, &err);
    s->ops->prefill(s, r2, 3, &err);
    CHECK(s->ops->draft(s, 3, b0, &g, &err) == CINFER_OK && g == 2 && b0[0] == 7 && b0[1] == 7, "the replaced recording: %d", g);
    cf_draft_close(s);
    cf_draft_provider_free(rp);
}

/* ---- engine ---- */

static cinfer_model *M;
static int V, CTX, HAS_TEXT;

typedef struct out {
    cinfer_outcome outcome;
    cinfer_finish finish;
    int32_t tokens[256];
    int n;
    char text[2048];
    size_t text_len;
    cinfer_logprobs lp[256];
    int has_lp;
    int drafted, accepted, cached;
    char plan[48];
} out;

static void keep(const cinfer_result *r, out *o) {
    memset(o, 0, sizeof *o);
    o->outcome = r->outcome;
    o->finish = r->finish;
    o->n = r->n_tokens < 256 ? (int)r->n_tokens : 256;
    memcpy(o->tokens, r->tokens, (size_t)o->n * sizeof *o->tokens);
    o->text_len = r->text_len < sizeof o->text ? r->text_len : sizeof o->text - 1;
    memcpy(o->text, r->text, o->text_len);
    o->has_lp = r->logprobs != NULL;
    if (r->logprobs) memcpy(o->lp, r->logprobs, (size_t)o->n * sizeof *o->lp);
    o->drafted = r->usage.draft_tokens;
    o->accepted = r->usage.accepted_tokens;
    o->cached = r->usage.cached_tokens;
    snprintf(o->plan, sizeof o->plan, "%s", r->plan);
    if (r->outcome == CINFER_OUTCOME_FAILED) fprintf(stderr, "  (failed: %s)\n", r->error.message);
}

static int same(const out *a, const out *b, char *why, size_t len) {
    if (a->outcome != b->outcome || a->finish != b->finish) {
        snprintf(why, len, "outcome %s/%s vs %s/%s", cinfer_outcome_name(a->outcome), cinfer_finish_name(a->finish),
                 cinfer_outcome_name(b->outcome), cinfer_finish_name(b->finish));
        return 0;
    }
    if (a->n != b->n || memcmp(a->tokens, b->tokens, (size_t)a->n * sizeof *a->tokens)) {
        int k = 0;
        while (k < a->n && k < b->n && a->tokens[k] == b->tokens[k]) k++;
        snprintf(why, len, "%d vs %d tokens, first difference at %d", a->n, b->n, k);
        return 0;
    }
    if (a->text_len != b->text_len || memcmp(a->text, b->text, a->text_len)) {
        snprintf(why, len, "text differs");
        return 0;
    }
    if (a->has_lp != b->has_lp) {
        snprintf(why, len, "logprobs on one side only");
        return 0;
    }
    for (int i = 0; a->has_lp && i < a->n; i++) {
        const cinfer_logprobs *x = &a->lp[i], *y = &b->lp[i];
        int eq = x->token == y->token && !memcmp(&x->logprob, &y->logprob, sizeof x->logprob) && x->n_top == y->n_top;
        for (int k = 0; eq && k < x->n_top; k++)
            eq = x->top[k].token == y->top[k].token && !memcmp(&x->top[k].logprob, &y->top[k].logprob, sizeof(float));
        if (!eq) {
            snprintf(why, len, "logprobs of token %d differ", i);
            return 0;
        }
    }
    return 1;
}

static cinfer_engine *engine_with(int max_batch, int64_t kv, const char *default_draft, cf_draft_provider *oracle) {
    cinfer_engine_params ep = cinfer_engine_default_params();
    ep.max_batch = max_batch;
    ep.kv_memory = kv;
    ep.default_draft = default_draft;
    ep.lookahead = 1;   /* plain sessions' steps queued ahead where the batch allows (as on CUDA) */
    cinfer_engine *e = NULL;
    cinfer_error err = {0};
    CHECK(cinfer_engine_create(M, &ep, &e, &err) == CINFER_OK, "engine: %s", err.message);
    if (e && oracle) CHECK(cf_engine_add_draft_provider(e, "oracle", oracle, &err) == CINFER_OK, "oracle: %s", err.message);
    if (e) cf_engine_spec_always(e, SPEC_ALWAYS);
    return e;
}

typedef struct req {
    int32_t prompt[64];
    int np, max_tokens;
    float temperature, top_p, min_p, rep, presence, frequency;
    int top_k, logprobs, top_logprobs, ignore_eos, draft_max;
    int64_t seed;
    cinfer_logit_bias bias[2];
    int n_bias;
    char stop[8];
    int32_t stop_id;    /* >= 0: a stop id */
    const char *draft;
    int cancel_at;
} req;

static req make_req(int np, int max_tokens, unsigned seed) {
    req r;
    memset(&r, 0, sizeof r);
    r.np = np;
    r.max_tokens = max_tokens;
    for (int i = 0; i < np; i++) {
        seed = seed * 1103515245u + 12345u;
        r.prompt[i] = 3 + (int32_t)((seed >> 8) % (unsigned)(V - 3));
    }
    r.top_p = 1;
    r.rep = 1;
    r.ignore_eos = 1;
    r.seed = -1;
    r.stop_id = -1;
    return r;
}

static cinfer_request request_of(const req *q, const char **stops, int32_t *stop_ids, const char *draft) {
    cinfer_request r = cinfer_request_default();
    r.prompt_ids = q->prompt;
    r.n_prompt_ids = (size_t)q->np;
    r.max_tokens = q->max_tokens;
    r.temperature = q->temperature;
    r.top_k = q->top_k;
    r.top_p = q->top_p;
    r.min_p = q->min_p;
    r.repetition_penalty = q->rep;
    r.presence_penalty = q->presence;
    r.frequency_penalty = q->frequency;
    r.logit_bias = q->n_bias ? q->bias : NULL;
    r.n_logit_bias = (size_t)q->n_bias;
    r.logprobs = q->logprobs;
    r.top_logprobs = q->top_logprobs;
    r.ignore_eos = q->ignore_eos;
    r.seed = q->seed;
    r.ids_only = !HAS_TEXT;
    r.draft = draft;
    r.draft_max = q->draft_max;
    if (q->stop[0]) {
        stops[0] = q->stop;
        r.stop = stops;
        r.n_stop = 1;
    }
    if (q->stop_id >= 0) {
        stop_ids[0] = q->stop_id;
        r.stop_ids = stop_ids;
        r.n_stop_ids = 1;
    }
    return r;
}

static int on_event(const cinfer_event *ev, void *user) {
    const req *q = user;
    return ev->kind == CINFER_EVENT_TOKEN && q->cancel_at > 0 && ev->index == q->cancel_at;
}

/* Runs the n requests at once (draft: each request's own q->draft when spec, else "none") and keeps their outputs;
 * gated: all opened behind the engine tests' gate (tests/engine/gate.h), so that they are queued before the first
 * step, whatever the threads' timing. */
static void run_behind(cinfer_engine *e, const req *qs, int n, int spec, int gated, out *o) {
    cinfer_session *gate = NULL;
    if (gated) {
        const req g = make_req(2, 2, 999);
        const char *stops[1];
        int32_t sid[1];
        cinfer_request r = request_of(&g, stops, sid, "none");
        cinfer_error err = {0};
        CHECK(gate_close(e, &r, &gate, &err) == CINFER_OK, "gate: %s", err.message);
    }
    cinfer_session **ss = calloc((size_t)n, sizeof *ss);
    for (int i = 0; i < n; i++) {
        const char *stops[1];
        int32_t sid[1];
        cinfer_request r = request_of(&qs[i], stops, sid, spec ? qs[i].draft : "none");
        cinfer_session_params p = cinfer_session_default_params();
        p.output = CINFER_OUTPUT_CALLBACK;
        p.on_event = on_event;
        p.user = (void *)&qs[i];
        cinfer_error err = {0};
        CHECK(cinfer_session_open(e, &r, &p, &ss[i], &err) == CINFER_OK, "open %d (%s): %s", i, r.draft ? r.draft : "-", err.message);
    }
    if (gate) gate_open();
    for (int i = 0; i < n; i++) {
        const cinfer_result *res = NULL;
        cinfer_error err = {0};
        memset(&o[i], 0, sizeof o[i]);
        if (ss[i] && cinfer_session_wait(ss[i], -1, &res, &err) == CINFER_OK) keep(res, &o[i]);
        cinfer_session_free(ss[i]);
    }
    cinfer_session_free(gate);
    free(ss);
}

static void run_all(cinfer_engine *e, const req *qs, int n, int spec, out *o) { run_behind(e, qs, n, spec, 0, o); }

static void check_blocks(cinfer_engine *e, const char *when) {
    cf_engine_stats st = cf_engine_get_stats(e);
    CHECK(st.blocks_available == st.blocks_total, "%s: %d of %d KV blocks back", when, st.blocks_available, st.blocks_total);
}

/* An engine with an oracle replaying each request's plain output (prompt + tokens). */
static cinfer_engine *oracle_engine(int max_batch, int64_t kv, const req *qs, const out *plain, int n) {
    int32_t **seqs = calloc((size_t)n, sizeof *seqs);
    int *lens = calloc((size_t)n, sizeof *lens);
    for (int i = 0; i < n; i++) {
        seqs[i] = malloc((size_t)(qs[i].np + plain[i].n + 1) * sizeof **seqs);
        memcpy(seqs[i], qs[i].prompt, (size_t)qs[i].np * sizeof **seqs);
        memcpy(seqs[i] + qs[i].np, plain[i].tokens, (size_t)plain[i].n * sizeof **seqs);
        lens[i] = qs[i].np + plain[i].n;
    }
    cf_draft_provider *p = NULL;
    cinfer_error err = {0};
    CHECK(cf_replay_provider_create((const int32_t *const *)seqs, lens, n, &p, &err) == CINFER_OK, "replay: %s", err.message);
    for (int i = 0; i < n; i++) free(seqs[i]);
    free(seqs);
    free(lens);
    return engine_with(max_batch, kv, NULL, p);
}

/* Greedy: plain, ngram and oracle give the same tokens; the oracle's drafts are all accepted. */
static void check_greedy(void) {
    enum { NQ = 3 };
    req qs[NQ];
    qs[0] = make_req(8, 40, 7);
    qs[1] = make_req(3, 33, 8);
    qs[2] = make_req(20, 48, 9);
    /* a prompt that repeats itself, so that n-gram lookup finds matches early */
    for (int i = 10; i < 20; i++) qs[2].prompt[i] = qs[2].prompt[i - 10];
    out plain[NQ], ng[NQ], orc[NQ], policy[NQ];
    cinfer_engine *e = engine_with(1, 0, NULL, NULL);
    run_all(e, qs, NQ, 0, plain);
    for (int i = 0; i < NQ; i++) qs[i].draft = "ngram";
    run_all(e, qs, NQ, 1, ng);
    check_blocks(e, "greedy ngram");
    /* the prefix cache after verifications (blocks filled by drafts, some rejected, then truncated): a prompt
     * continuing request 2's output takes cached blocks and goes on as the plain run did */
    req cont = qs[2];
    const int keep = plain[2].n / 2;
    if (cont.np + keep <= (int)(sizeof cont.prompt / sizeof cont.prompt[0])) {
        memcpy(cont.prompt + cont.np, plain[2].tokens, (size_t)keep * sizeof *cont.prompt);
        cont.np += keep;
        cont.max_tokens = plain[2].n - keep;
        out co;
        run_all(e, &cont, 1, 0, &co);
        CHECK(co.n == cont.max_tokens && !memcmp(co.tokens, plain[2].tokens + keep, (size_t)co.n * sizeof *co.tokens),
              "a prompt continuing a speculative run differs from the plain run's continuation");
        CHECK(co.cached > 0, "the continuation took no cached blocks");
        printf("  a prompt continuing a speculative run: %d of %d prompt tokens from the prefix cache, output as plain\n", co.cached,
               cont.np);
    }
    cinfer_engine_free(e);
    SPEC_ALWAYS = 0;   /* the shipped policy: whatever it drafts, the output is the same */
    e = engine_with(4, 0, NULL, NULL);
    run_all(e, qs, NQ, 1, policy);
    cinfer_engine_free(e);
    SPEC_ALWAYS = 1;
    for (int i = 0; i < NQ; i++) {
        char why[160] = "";
        CHECK(same(&policy[i], &plain[i], why, sizeof why), "greedy %d: ngram under the cost policy differs: %s", i, why);
    }
    if (TINY) {   /* speculation paused for everyone (the guard's pause): the sessions with sources ride the lookahead */
        SPEC_ALWAYS = 0;
        e = engine_with(4, 0, NULL, NULL);
        cf_engine_spec_pause(e, 1 << 20);
        run_all(e, qs, NQ, 1, policy);
        const cf_engine_stats st = cf_engine_get_stats(e);
        cinfer_engine_free(e);
        SPEC_ALWAYS = 1;
        for (int i = 0; i < NQ; i++) {
            char why[160] = "";
            CHECK(same(&policy[i], &plain[i], why, sizeof why), "greedy %d: ngram with speculation paused differs: %s", i, why);
        }
        CHECK(st.lookahead_steps > 0, "speculation paused: no step queued behind the one in flight (of %ld)", st.steps);
        printf("  ngram with speculation paused: %ld of %ld steps queued behind the one in flight\n", st.lookahead_steps, st.steps);
    }
    e = oracle_engine(4, 0, qs, plain, NQ);
    for (int i = 0; i < NQ; i++) qs[i].draft = "oracle";
    run_all(e, qs, NQ, 1, orc);
    check_blocks(e, "greedy oracle");
    cinfer_engine_free(e);
    int drafted = 0, accepted = 0;
    for (int i = 0; i < NQ; i++) {
        char why[160] = "";
        CHECK(same(&ng[i], &plain[i], why, sizeof why), "greedy %d: ngram differs from plain: %s", i, why);
        CHECK(same(&orc[i], &plain[i], why, sizeof why), "greedy %d: oracle differs from plain: %s", i, why);
        CHECK(!strcmp(ng[i].plan, "text:spec-ngram") && !strcmp(orc[i].plan, "text:spec-oracle") &&
                  !strcmp(plain[i].plan, "text:continuous"), "plans %s %s %s", plain[i].plan, ng[i].plan, orc[i].plan);
        CHECK(orc[i].drafted > 0 && orc[i].accepted == orc[i].drafted, "greedy %d: the oracle's %d drafts, %d accepted", i,
              orc[i].drafted, orc[i].accepted);
        CHECK(ng[i].accepted <= ng[i].drafted && plain[i].drafted == 0, "usage counts");
        drafted += ng[i].drafted;
        accepted += ng[i].accepted;
    }
    printf("  greedy: plain = ngram (%d drafted, %d accepted) = oracle (%d of %d accepted)\n", drafted, accepted, orc[0].accepted,
           orc[0].drafted);
}

/* Rollback at the runner: a verification of k drafts then truncate leaves the sequence as if they had never been
 * fed: the next rows' logits are bit-identical to a sequence that never saw them. */
static void check_rollback(void) {
    cinfer_error err = {0};
    cf_runner_params rp = cf_runner_default_params();
    rp.max_seqs = 4;
    cf_runner *r = NULL;
    CHECK(cf_runner_create(M->m, &rp, &r, &err) == CINFER_OK, "runner: %s", err.message);
    if (!r) return;
    req q = make_req(12, 1, 21);
    cf_rseq *a = NULL, *b = NULL;
    cf_rseq_create(r, &a, &err);
    cf_rseq_create(r, &b, &err);
    int32_t buf[32];
    memcpy(buf, q.prompt, 12 * sizeof *buf);
    buf[12] = 5;                               /* the pending token */
    for (int i = 0; i < 8; i++) buf[13 + i] = 3 + (i * 37) % (V - 3);   /* drafts */
    cf_batch_item it[2] = {{.seq = a, .ids = buf, .n = 12, .logits = CF_LOGITS_LAST}, {.seq = b, .ids = buf, .n = 12, .logits = CF_LOGITS_LAST}};
    CHECK(cf_runner_step(r, it, 2, &err) == CINFER_OK, "prefill: %s", err.message);
    it[0] = (cf_batch_item){.seq = a, .ids = buf + 12, .n = 9, .logits = CF_LOGITS_ALL};
    CHECK(cf_runner_step(r, it, 1, &err) == CINFER_OK, "verify: %s", err.message);
    CHECK(cf_rseq_truncate(a, 15, &err) == CINFER_OK, "truncate: %s", err.message);   /* pending + 2 drafts kept */
    /* both go on with the same tokens: a from its rollback, b fresh */
    int32_t next[4] = {buf[12], buf[13], buf[14], 9};
    it[0] = (cf_batch_item){.seq = b, .ids = next, .n = 3, .logits = CF_LOGITS_NONE};
    CHECK(cf_runner_step(r, it, 1, &err) == CINFER_OK, "b catches up: %s", err.message);
    float *la = malloc((size_t)V * 2 * sizeof *la);
    it[0] = (cf_batch_item){.seq = a, .ids = next + 3, .n = 1, .logits = CF_LOGITS_ALL};
    CHECK(cf_runner_step(r, it, 1, &err) == CINFER_OK, "a after rollback: %s", err.message);
    memcpy(la, it[0].out, (size_t)V * sizeof *la);
    it[0] = (cf_batch_item){.seq = b, .ids = next + 3, .n = 1, .logits = CF_LOGITS_ALL};
    CHECK(cf_runner_step(r, it, 1, &err) == CINFER_OK, "b: %s", err.message);
    memcpy(la + V, it[0].out, (size_t)V * sizeof *la);
    CHECK(cf_rseq_len(a) == 16 && cf_rseq_len(b) == 16, "lengths %d %d", cf_rseq_len(a), cf_rseq_len(b));
    CHECK(!memcmp(la, la + V, (size_t)V * sizeof *la), "logits after a rollback differ from a fresh run's");
    free(la);
    cf_rseq_free(a);
    cf_rseq_free(b);
    cf_runner_free(r);
}

/* ---- the tiny model's checks ---- */

/* Sampled requests: the same tokens, text and logprobs for a seed with and without drafts. */
static void make_mixed(req *qs, int *n) {
    int k = 0;
    qs[k] = make_req(9, 40, 100); qs[k].temperature = 1.0f; qs[k].seed = 11; qs[k].draft = "ngram"; k++;
    qs[k] = make_req(17, 40, 101); qs[k].temperature = 0.8f; qs[k].top_k = 20; qs[k].seed = 12; qs[k].draft = "oracle"; k++;
    qs[k] = make_req(30, 36, 102); qs[k].temperature = 1.0f; qs[k].top_p = 0.9f; qs[k].seed = 13; qs[k].draft = "oracle"; k++;
    qs[k] = make_req(12, 36, 103); qs[k].temperature = 1.1f; qs[k].min_p = 0.05f; qs[k].seed = 14; qs[k].draft = "ngram"; k++;
    qs[k] = make_req(12, 40, 104); qs[k].rep = 1.3f; qs[k].draft = "oracle"; k++;
    qs[k] = make_req(20, 40, 105); qs[k].temperature = 0.9f; qs[k].presence = 0.5f; qs[k].frequency = 0.3f; qs[k].seed = 15;
    qs[k].draft = "oracle"; k++;
    qs[k] = make_req(7, 40, 106); qs[k].n_bias = 2; qs[k].bias[0] = (cinfer_logit_bias){5, 3.0f};
    qs[k].bias[1] = (cinfer_logit_bias){6, -2.0f}; qs[k].draft = "oracle"; k++;
    qs[k] = make_req(24, 30, 107); qs[k].logprobs = 1; qs[k].top_logprobs = 5; qs[k].draft = "oracle"; k++;
    qs[k] = make_req(40, 30, 108); qs[k].temperature = 0.7f; qs[k].logprobs = 1; qs[k].top_logprobs = 3; qs[k].seed = 16;
    qs[k].draft = "oracle"; qs[k].draft_max = 3; k++;
    qs[k] = make_req(5, 40, 109); qs[k].draft = "none"; k++;                              /* plain beside them */
    qs[k] = make_req(6, 40, 110); qs[k].temperature = 1.0f; qs[k].seed = 17; qs[k].draft = NULL; k++;   /* the default */
    qs[k] = make_req(14, 7, 111); qs[k].draft = "oracle"; qs[k].draft_max = 16; k++;     /* max_tokens inside a run */
    qs[k] = make_req(14, 40, 112); qs[k].draft = "oracle"; k++;                           /* a stop id, set below */
    qs[k] = make_req(28, 40, 113); qs[k].draft = "oracle"; k++;                           /* a stop string, set below */
    qs[k] = make_req(33, 40, 114); qs[k].draft = "oracle"; qs[k].cancel_at = 9; k++;      /* cancelled mid-run */
    qs[k] = make_req(3, 40, 115); qs[k].ignore_eos = 0; qs[k].draft = "ngram"; k++;
    *n = k;
}

static void check_mixed(void) {
    enum { NQ = 16 };
    req qs[NQ];
    int n = 0;
    make_mixed(qs, &n);
    out alone[NQ], got[NQ];
    cinfer_engine *e = engine_with(1, 0, NULL, NULL);
    run_all(e, qs, n, 0, alone);
    /* the stop id: the 10th token of its plain output; the stop string: two bytes from the middle of its text */
    qs[12].stop_id = alone[12].tokens[10];
    /* (a printable pair, else one printable character, past the first third of the text; other prompts are
     * tried until one has it) */
    for (int tries = 0; HAS_TEXT && !qs[13].stop[0] && tries < 40; tries++) {
        if (tries) {
            qs[13] = make_req(28, 40, 113 + 7919u * (unsigned)tries);
            qs[13].draft = "oracle";
            run_all(e, &qs[13], 1, 0, &alone[13]);
        }
        for (int width = 2; width >= 1 && !qs[13].stop[0]; width--)
            for (size_t at = alone[13].text_len / 3; at + (size_t)width <= alone[13].text_len; at++) {
                int ok = 1;
                for (int w = 0; w < width; w++) {
                    const unsigned char x = (unsigned char)alone[13].text[at + (size_t)w];
                    ok &= x > ' ' && x < 127;
                }
                if (!ok) continue;
                memcpy(qs[13].stop, alone[13].text + at, (size_t)width);
                qs[13].stop[width] = 0;
                break;
            }
    }
    CHECK(!HAS_TEXT || qs[13].stop[0], "no stop string found in 40 outputs");
    run_all(e, qs, n, 0, alone);   /* with the stops; every output of a run alone and plain */
    cinfer_engine_free(e);

    /* the oracle replays the plain outputs: every draft of greedy requests is accepted, and sampled ones are
     * verified with the same seeded draws */
    e = oracle_engine(16, 0, qs, alone, n);
    run_all(e, qs, n, 1, got);
    check_blocks(e, "mixed batch");
    cf_engine_stats st = cf_engine_get_stats(e);
    cinfer_engine_free(e);
    int drafted = 0, accepted = 0;
    for (int i = 0; i < n; i++) {
        char why[160] = "";
        CHECK(same(&got[i], &alone[i], why, sizeof why), "mixed %d (%s): differs from its plain run alone: %s", i,
              qs[i].draft ? qs[i].draft : "default", why);
        drafted += got[i].drafted;
        accepted += got[i].accepted;
    }
    CHECK(got[14].outcome == CINFER_OUTCOME_CANCELLED && got[14].n == 10 && got[14].drafted > 0,
          "cancelled at index 9 inside a verified run: %d tokens, %d drafted", got[14].n, got[14].drafted);
    CHECK(got[12].n == 10 && got[12].finish == CINFER_FINISH_STOP, "stop id: %d tokens", got[12].n);
    CHECK(got[11].n == 7 && got[11].finish == CINFER_FINISH_LENGTH && got[11].accepted > 0, "max_tokens 7: %d tokens, %d accepted",
          got[11].n, got[11].accepted);
    CHECK(got[4].accepted == got[4].drafted && got[4].drafted > 0, "greedy with a penalty: oracle %d of %d", got[4].accepted,
          got[4].drafted);
    CHECK(got[9].drafted == 0 && !strcmp(got[9].plan, "text:continuous"), "draft none speculated");
    CHECK(!HAS_TEXT || (got[13].finish == CINFER_FINISH_STOP && got[13].n > 1 && got[13].n < qs[13].max_tokens && got[13].drafted > 0),
          "stop string '%s': %s after %d tokens, %d drafted", qs[13].stop, cinfer_finish_name(got[13].finish), got[13].n,
          got[13].drafted);
    printf("  mixed batch of %d (peak %d rows a step): identical to plain runs alone; %d drafted, %d accepted; stop string '%s'\n",
           n, st.peak_batch, drafted, accepted, qs[13].stop);

    /* again with the ngram default and a KV memory that forces preemptions: still identical */
    for (int i = 0; i < n; i++)
        if (qs[i].draft && !strcmp(qs[i].draft, "oracle")) qs[i].draft = NULL;   /* the default */
    e = engine_with(16, 0, NULL, NULL);
    cf_engine_stats s0 = cf_engine_get_stats(e);
    cinfer_engine_free(e);
    const int64_t kv = (int64_t)s0.block_bytes * 24;   /* 24 blocks of 16: a few sessions at a time */
    e = engine_with(16, kv, "ngram", NULL);
    if (e) {
        run_behind(e, qs, n, 1, 1, got);   /* all queued at once: the preemptions do not hang on thread timing */
        check_blocks(e, "preempted batch");
        cf_engine_stats sp = cf_engine_get_stats(e);
        cinfer_engine_free(e);
        for (int i = 0; i < n; i++) {
            char why[160] = "";
            CHECK(same(&got[i], &alone[i], why, sizeof why), "preempted %d: differs: %s", i, why);
        }
        CHECK(sp.preemptions > 0, "no preemption in a KV memory of 24 blocks");
        printf("  ngram by default in 24 KV blocks: %ld preemptions, outputs identical\n", sp.preemptions);
    }
}

/* Cancellation from another thread while a verified run is being committed: the consumer's callback, at the first
 * token of a run of accepted drafts, has another thread cancel the session and waits for it; the engine stops
 * committing the run there. */
static void *cancel_main(void *arg) {
    cinfer_session_cancel(*(cinfer_session **)arg);
    return NULL;
}

static int cancel_cb(const cinfer_event *ev, void *user) {
    if (ev->kind == CINFER_EVENT_TOKEN && ev->index == 1) {   /* token 0 comes from the prompt's step, 1.. from a verification */
        pthread_t t;
        pthread_create(&t, NULL, cancel_main, user);
        pthread_join(t, NULL);
    }
    return 0;
}

static void check_cancel_thread(void) {
    req q = make_req(10, 60, 300);
    out plain;
    cinfer_engine *e = engine_with(1, 0, NULL, NULL);
    run_all(e, &q, 1, 0, &plain);
    cinfer_engine_free(e);
    e = oracle_engine(1, 0, &q, &plain, 1);
    const char *stops[1];
    int32_t sid[1];
    q.draft_max = 8;
    cinfer_request r = request_of(&q, stops, sid, "oracle");
    cinfer_session_params p = cinfer_session_default_params();
    p.output = CINFER_OUTPUT_CALLBACK;
    p.on_event = cancel_cb;
    cinfer_session *s = NULL;
    p.user = &s;
    cinfer_error err = {0};
    CHECK(cinfer_session_open(e, &r, &p, &s, &err) == CINFER_OK, "open: %s", err.message);
    const cinfer_result *res = NULL;
    if (s) cinfer_session_wait(s, -1, &res, &err);
    CHECK(res && res->outcome == CINFER_OUTCOME_CANCELLED && res->n_tokens == 2 && res->usage.draft_tokens > 0,
          "cancelled from another thread at token 1 of a verified run: %s after %zu tokens (%d drafted)",
          res ? cinfer_outcome_name(res->outcome) : "-", res ? res->n_tokens : 0, res ? res->usage.draft_tokens : 0);
    CHECK(res && res->n_tokens == 2 && !memcmp(res->tokens, plain.tokens, 2 * sizeof *plain.tokens), "tokens before the cancel");
    cinfer_session_free(s);
    check_blocks(e, "cancel");
    cinfer_engine_free(e);
}

/* ---- chi-square: verification rows sample the target's distribution ---- */

/* The softmax of logits with a bias on one token, at temperature T. */
static void target_probs(const float *lg, int32_t biased, float bias, float T, double *p) {
    double mx = -INFINITY, sum = 0;
    for (int i = 0; i < V; i++) {
        double l = (lg[i] + (i == biased ? bias : 0)) / T;
        if (l > mx) mx = l;
    }
    for (int i = 0; i < V; i++) sum += p[i] = exp((lg[i] + (i == biased ? bias : 0)) / T - mx);
    for (int i = 0; i < V; i++) p[i] /= sum;
}

/* Greedy continuation of ids[0, n) by the reference, under a logit bias, written after them (k tokens). */
static void ref_continue(int32_t *ids, int n, int k, int32_t biased, float bias, float *last_logits, float *prev_logits) {
    cf_seq *sq = NULL;
    cinfer_error err = {0};
    float *lg = malloc((size_t)V * sizeof *lg);
    CHECK(cf_seq_create(M->m, 0, &sq, &err) == CINFER_OK && cf_model_eval(M->m, sq, ids, n, lg, 0, &err) == CINFER_OK,
          "reference: %s", err.message);
    for (int j = 0; j < k; j++) {
        int32_t best = 0;
        for (int i = 1; i < V; i++)
            if (lg[i] + (i == biased ? bias : 0) > lg[best] + (best == biased ? bias : 0)) best = i;
        ids[n + j] = best;
        if (j == k - 2 && prev_logits) memcpy(prev_logits, lg, (size_t)V * sizeof *lg);
        if (j + 1 < k) CHECK(cf_model_eval(M->m, sq, &ids[n + j], 1, lg, 0, &err) == CINFER_OK, "reference: %s", err.message);
    }
    if (last_logits) memcpy(last_logits, lg, (size_t)V * sizeof *lg);
    free(lg);
    cf_seq_free(sq);
}

static void check_chi_square(void) {
    /* The first token comes from the prompt's step; the oracle then drafts x2 x3 (the biased greedy continuation
     * of prompt + x1), verified in one step: token 2 is sampled from the verification's row 0, token 3 (when
     * token 2 == x2) from its row 1. Conditioned on the tokens before them, each must follow the target's
     * distribution (temperature 1 with the bias). */
    req q = make_req(6, 3, 500);
    q.temperature = 1.0f;
    int32_t rec[16];
    memcpy(rec, q.prompt, (size_t)q.np * sizeof *rec);
    float *l1 = malloc((size_t)V * sizeof *l1), *l2 = malloc((size_t)V * sizeof *l2);
    ref_continue(rec, q.np, 1, -1, 0, NULL, NULL);
    const int32_t biased = rec[q.np];          /* x1: the unbiased argmax, biased up so that it is often drawn */
    ref_continue(rec, q.np, 3, biased, 3.0f, l2, l1);   /* x1 x2 x3; l1 after x1, l2 after x2 */
    q.n_bias = 1;
    q.bias[0] = (cinfer_logit_bias){biased, 3.0f};
    double *p1 = malloc((size_t)V * sizeof *p1), *p2 = malloc((size_t)V * sizeof *p2);
    target_probs(l1, biased, 3.0f, 1.0f, p1);
    target_probs(l2, biased, 3.0f, 1.0f, p2);
    long *c1 = calloc((size_t)V, sizeof *c1), *c2 = calloc((size_t)V, sizeof *c2);
    out fake = {0};
    fake.n = 3;
    memcpy(fake.tokens, rec + q.np, 3 * sizeof *rec);
    cinfer_engine *e = oracle_engine(16, 0, &q, &fake, 1);
    if (!e) return;
    enum { WAVE = 16 };
    const int RUNS = getenv("SPEC_CHI_RUNS") ? atoi(getenv("SPEC_CHI_RUNS")) : 6000;
    long n1 = 0, n2 = 0, drafted = 0;
    for (int w = 0; w < RUNS / WAVE; w++) {
        req qs[WAVE];
        out o[WAVE];
        for (int i = 0; i < WAVE; i++) {
            qs[i] = q;
            qs[i].seed = 1000 + w * WAVE + i;
            qs[i].draft = "oracle";
        }
        run_all(e, qs, WAVE, 1, o);
        for (int i = 0; i < WAVE; i++) {
            if (o[i].n != 3 || o[i].tokens[0] != rec[q.np]) continue;
            drafted += o[i].drafted;
            c1[o[i].tokens[1]]++;
            n1++;
            if (o[i].tokens[1] == rec[q.np + 1]) {
                c2[o[i].tokens[2]]++;
                n2++;
            }
        }
    }
    cinfer_engine_free(e);
    const double pv1 = stats_chi_square_p(c1, p1, V, n1), pv2 = stats_chi_square_p(c2, p2, V, n2);
    CHECK(pv1 > 1e-4 && pv2 > 1e-4, "chi-square: row 0 p = %.3g (%ld draws), row 1 p = %.3g (%ld draws)", pv1, n1, pv2, n2);
    CHECK(drafted > 0 && n2 > 300, "too few verified draws: %ld drafted, %ld from row 1", drafted, n2);
    /* the test rejects a wrong distribution: row 1's counts against row 0's probabilities */
    CHECK(stats_chi_square_p(c2, p1, V, n2) < 1e-4, "chi-square does not tell row 1 from row 0");
    printf("  chi-square over %d runs: verification row 0 (%ld draws) p = %.3f, row 1 (%ld draws) p = %.3f\n", RUNS, n1, pv1, n2,
           pv2);
    free(l1);
    free(l2);
    free(p1);
    free(p2);
    free(c1);
    free(c2);
}

/* A provider that misbehaves: its sources propose ids outside the vocabulary after two good ones, fail to draft every
 * fifth call, and one of them fails a commit and another its prefill. Speculation stops or shortens for them and
 * every output is still the plain one. */
typedef struct bad_src {
    cf_draft_source base;
    int calls, id, fail_prefill, fail_commit_at, commits;
    int32_t ctx_last;
} bad_src;
static int bad_opened;
static cinfer_status bd_prefill(cf_draft_source *s, const int32_t *ids, int n, cinfer_error *err) {
    bad_src *b = (bad_src *)s;
    b->ctx_last = ids[n - 1];
    return b->fail_prefill ? cf_fail(err, CINFER_E_INTERNAL, "prefill refused (test)") : CINFER_OK;
}
static cinfer_status bd_draft(cf_draft_source *s, int n, int32_t *d, int *got, cinfer_error *err) {
    bad_src *b = (bad_src *)s;
    if (++b->calls % 5 == 0) return cf_fail(err, CINFER_E_INTERNAL, "draft failed (test)");
    for (int i = 0; i < n; i++) d[i] = i < 2 ? (b->ctx_last + i) % V : (i % 2 ? V + 5 : -3);
    *got = n;
    return CINFER_OK;
}
static cinfer_status bd_commit(cf_draft_source *s, int a, const int32_t *ids, int n, cinfer_error *err) {
    bad_src *b = (bad_src *)s;
    b->ctx_last = ids[n - 1];
    if (++b->commits == b->fail_commit_at) return cf_fail(err, CINFER_E_INTERNAL, "commit failed (test)");
    return CINFER_OK;
}
static void bd_close(cf_draft_source *s) { free(s); }
static const cf_draft_source_ops bd_sops = {bd_prefill, bd_draft, bd_commit, bd_close};
static cinfer_status bd_open(cf_draft_provider *p, cf_draft_source **src, cinfer_error *err) {
    bad_src *b = calloc(1, sizeof *b);
    b->base.ops = &bd_sops;
    b->base.provider = p;
    b->id = bad_opened++;
    b->fail_prefill = b->id == 2;
    b->fail_commit_at = b->id == 1 ? 4 : -1;
    *src = &b->base;
    return CINFER_OK;
}
static void bd_free(cf_draft_provider *p) { free(p); }
static const cf_draft_provider_ops bd_pops = {.name = "bad", .open = bd_open, .draft_many = NULL, .free = bd_free};

static void check_bad_source(void) {
    enum { NQ = 4 };
    req qs[NQ];
    for (int i = 0; i < NQ; i++) {
        qs[i] = make_req(6 + i, 30, 700 + (unsigned)i);
        qs[i].draft = "bad";
        if (i == 3) {
            qs[i].temperature = 0.9f;
            qs[i].seed = 5;
        }
    }
    out plain[NQ], got[NQ];
    cinfer_engine *e = engine_with(1, 0, NULL, NULL);
    run_all(e, qs, NQ, 0, plain);
    cinfer_engine_free(e);
    cf_draft_provider *p = calloc(1, sizeof *p);
    p->ops = &bd_pops;
    bad_opened = 0;
    e = engine_with(1, 0, NULL, NULL);
    cinfer_error err = {0};
    CHECK(cf_engine_add_draft_provider(e, "bad", p, &err) == CINFER_OK, "bad provider: %s", err.message);
    CHECK(cf_engine_add_draft_provider(e, "bad", NULL, &err) != CINFER_OK, "a NULL provider accepted");
    cf_draft_provider *dup = calloc(1, sizeof *dup);
    dup->ops = &bd_pops;
    CHECK(cf_engine_add_draft_provider(e, "ngram", dup, &err) == CINFER_E_INVALID_ARGUMENT, "a second ngram accepted");
    run_all(e, qs, NQ, 1, got);
    check_blocks(e, "misbehaving source");
    cinfer_engine_free(e);
    for (int i = 0; i < NQ; i++) {
        char why[160] = "";
        CHECK(same(&got[i], &plain[i], why, sizeof why), "misbehaving source, request %d: %s", i, why);
        CHECK(got[i].accepted <= got[i].drafted, "request %d: %d accepted of %d", i, got[i].accepted, got[i].drafted);
    }
    CHECK(got[2].drafted == 0, "a source whose prefill failed drafted %d", got[2].drafted);
    printf("  a misbehaving source (bad ids, failed drafts, commit and prefill): outputs identical; drafted %d %d %d %d\n",
           got[0].drafted, got[1].drafted, got[2].drafted, got[3].drafted);
}

/* Drafts stay inside the context and the KV memory: a request filling the context to its last position, and one
 * in a KV memory that holds exactly its prompt and max_tokens, run with the oracle's 16 drafts a step to the end. */
static void check_edges(void) {
    req q[2];
    q[0] = make_req(64, CTX - 64, 900);
    q[1] = make_req(40, 41, 901);
    q[0].draft = q[1].draft = "oracle";
    q[0].draft_max = q[1].draft_max = 16;
    out plain[2], got[2];
    cinfer_engine *e = engine_with(1, 0, NULL, NULL);
    run_all(e, q, 2, 0, plain);
    cf_engine_stats st = cf_engine_get_stats(e);
    cinfer_engine_free(e);
    e = oracle_engine(1, 0, q, plain, 2);
    run_all(e, q, 1, 1, got);
    cinfer_engine_free(e);
    /* 80 positions (the prompt and max_tokens less the last token) in blocks of 16: 5 blocks */
    const int64_t kv = st.block_bytes * ((40 + 41 - 1 + st.block_size - 1) / st.block_size);
    e = oracle_engine(1, kv, q, plain, 2);
    if (e) {
        run_all(e, &q[1], 1, 1, &got[1]);
        cf_engine_stats s2 = cf_engine_get_stats(e);
        CHECK(s2.blocks_total * s2.block_size < 40 + 41 - 1 + s2.block_size && s2.preemptions == 0,
              "KV of %d blocks: %ld preemptions", s2.blocks_total, s2.preemptions);
        cinfer_engine_free(e);
    }
    for (int i = 0; i < 2; i++) {
        char why[160] = "";
        CHECK(same(&got[i], &plain[i], why, sizeof why) && got[i].n == q[i].max_tokens && got[i].accepted == got[i].drafted &&
                  got[i].drafted > 0, "edge %d: %s (%d tokens, %d of %d drafts)", i, why, got[i].n, got[i].accepted, got[i].drafted);
    }
    printf("  the context's last position and an exactly-sized KV memory reached with 16 drafts a step\n");
}

static void check_refusals(void) {
    cinfer_engine_params ep = cinfer_engine_default_params();
    cinfer_engine *e = NULL;
    cinfer_error err = {0};
    ep.default_draft = "medusa";
    CHECK(cinfer_engine_create(M, &ep, &e, &err) == CINFER_E_UNSUPPORTED && !e, "default_draft medusa: %s", err.message);
    ep.default_draft = "draft";
    CHECK(cinfer_engine_create(M, &ep, &e, &err) == CINFER_E_UNSUPPORTED && !e, "default_draft draft: %s", err.message);
    printf("  default_draft \"draft\" without a draft model: %s\n", err.message);
    e = engine_with(1, 0, NULL, NULL);
    req q = make_req(4, 4, 1);
    const char *names[] = {"medusa", "draft", "oracle", "NGRAM"};
    for (int i = 0; i < 4; i++) {
        const char *stops[1];
        int32_t sid[1];
        cinfer_request r = request_of(&q, stops, sid, names[i]);
        cinfer_session *s = NULL;
        CHECK(cinfer_session_open(e, &r, NULL, &s, &err) == CINFER_E_UNSUPPORTED && !s, "draft '%s' accepted", names[i]);
    }
    cinfer_engine_free(e);
}

/* ---- a text model: n-gram drafts on a prompt the answer copies ---- */

static void check_copy(void) {
    /* a passage given twice and begun a third time: the model goes on repeating it (with its own edits) */
    const char *text = "In the beginning God created the heaven and the earth. And the earth was without form, and void. "
                       "In the beginning God created the heaven and the earth. And the earth was without form, and void. "
                       "In the beginning God created";
    if (getenv("SPEC_COPY_TEXT")) text = getenv("SPEC_COPY_TEXT");
    cinfer_engine *e = engine_with(1, 0, NULL, NULL);
    out o[2];
    for (int k = 0; k < 2; k++) {
        cinfer_request r = cinfer_request_default();
        r.prompt_text = text;
        r.max_tokens = 48;
        r.temperature = 0;
        r.draft = k ? "ngram" : "none";
        cinfer_session *s = NULL;
        cinfer_error err = {0};
        const cinfer_result *res = NULL;
        CHECK(cinfer_session_open(e, &r, NULL, &s, &err) == CINFER_OK, "open: %s", err.message);
        if (s && cinfer_session_wait(s, -1, &res, &err) == CINFER_OK) keep(res, &o[k]);
        cinfer_session_free(s);
    }
    cinfer_engine_free(e);
    char why[160] = "";
    CHECK(same(&o[1], &o[0], why, sizeof why), "copy: ngram differs from plain: %s", why);
    CHECK(o[1].accepted > 0, "copy: %d drafted, none accepted", o[1].drafted);
    printf("  copy prompt: %d tokens, ngram drafted %d, accepted %d (%.0f%%): '%.*s'\n", o[1].n, o[1].drafted, o[1].accepted,
           o[1].drafted ? 100.0 * o[1].accepted / o[1].drafted : 0.0, (int)(o[1].text_len < 60 ? o[1].text_len : 60), o[1].text);
}

int main(int argc, char **argv) {
    const char *nt = getenv("CINFER_TEST_THREADS");
    if (nt && atoi(nt) > 0) THREADS = atoi(nt);
    if (argc == 2 && !strcmp(argv[1], "--unit")) {
        unit_ngram();
        unit_many_and_replay();
    } else {
        const int tiny = argc == 3 && !strcmp(argv[1], "--tiny"), copy = argc == 3 && !strcmp(argv[1], "--copy");
        TINY = tiny;
        if (!tiny && !copy && argc != 2) {
            fprintf(stderr, "usage: test_spec --unit | MODEL_DIR | --tiny TMP_DIR | --copy MODEL_DIR\n");
            return 2;
        }
        const char *dir = argc == 3 ? argv[2] : argv[1];
        if (tiny && tiny_model_write(dir, 0)) {
            fprintf(stderr, "cannot write the tiny model to %s\n", dir);
            return 1;
        }
        cinfer_error err = {0};
        cinfer_model_params mp = cinfer_model_default_params();
        mp.n_threads = THREADS;
        if (cinfer_model_load(dir, &mp, &M, &err) != CINFER_OK) {
            fprintf(stderr, "load %s: %s\n", dir, err.message);
            return 1;
        }
        cinfer_model_info info = cinfer_model_get_info(M);
        V = info.vocab;
        CTX = info.context;
        HAS_TEXT = info.has_tokenizer;
        if (copy) {
            check_copy();
        } else {
            check_greedy();
            check_rollback();
            if (tiny) {
                check_refusals();
                check_bad_source();
                check_edges();
                check_mixed();
                check_cancel_thread();
                check_chi_square();
            }
        }
        cinfer_model_free(M);
    }
    printf("%d checks, %d failed\n", checks, failures);
    return failures != 0;
}
