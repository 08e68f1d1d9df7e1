/* test_window_engine.c: the engine on a model with sliding-window layers, whose KV memory is split into the full
 * layers' pool and the window layers' own pool (model/runner.h), through the public API on the CPU:
 *   - in KV memory where one pool for every layer would refuse the request at open (its prompt plus max_tokens
 *     do not fit), the request runs, and its greedy output is the cold reference's (cf_model_eval + argmax);
 *   - three such requests at once in memory for about one take turns (admission and preemption count both
 *     pools), each output exact;
 *   - a chat's second turn reuses the first turn's blocks (usage.cached_tokens: the whole blocks whose window
 *     blocks are still cached) and gives the cold output;
 *   - the stats report both pools, and every block of both is back when the sessions have ended.
 *
 * usage: test_window_engine MODEL_DIR */
#include "cinfer.h"
#include "model/model.h"
#include "../check.h"
#include "../model_ref.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { STEP = 16, PROMPT = 150, GEN = 90, MAX_IDS = 256 };

static cinfer_model *M;
static cf_model *REF;
static int V, CTX;

static void fill_prompt(int32_t *ids, int n, unsigned seed) {
    for (int i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        ids[i] = 3 + (int32_t)((seed >> 8) % (unsigned)(V - 3));
    }
}

static cinfer_engine *engine(int max_batch, int64_t kv_memory) {
    cinfer_engine_params ep = cinfer_engine_default_params();
    ep.max_batch = max_batch;
    ep.max_batch_tokens = STEP;
    ep.kv_memory = kv_memory;
    cinfer_engine *e = NULL;
    cinfer_error err = {0};
    CHECK(cinfer_engine_create(M, &ep, &e, &err) == CINFER_OK, "engine of %d, %lld bytes: %s", max_batch, (long long)kv_memory,
          err.message);
    return e;
}

typedef struct job {
    int32_t prompt[MAX_IDS];
    int np, max_tokens;
    cinfer_session *s;
    int32_t tokens[MAX_IDS];
    int n_tokens, cached;
    cinfer_outcome outcome;
} job;

static void open_job(cinfer_engine *e, job *j) {
    cinfer_request r = cinfer_request_default();
    r.prompt_ids = j->prompt;
    r.n_prompt_ids = (size_t)j->np;
    r.max_tokens = j->max_tokens;
    r.temperature = 0;
    r.ignore_eos = 1;
    r.ids_only = 1;
    cinfer_session_params p = cinfer_session_default_params();
    cinfer_error err = {0};
    CHECK(cinfer_session_open(e, &r, &p, &j->s, &err) == CINFER_OK, "open a request of %d + %d tokens: %s", j->np, j->max_tokens,
          err.message);
}

static void finish_job(job *j) {
    const cinfer_result *res = NULL;
    cinfer_error err = {0};
    j->outcome = CINFER_OUTCOME_FAILED;
    if (j->s && cinfer_session_wait(j->s, -1, &res, &err) == CINFER_OK) {
        j->outcome = res->outcome;
        j->n_tokens = (int)res->n_tokens;
        memcpy(j->tokens, res->tokens, res->n_tokens * sizeof *res->tokens);
        j->cached = res->usage.cached_tokens;
        CHECK(res->outcome == CINFER_OUTCOME_COMPLETED, "a request ended %s: %s", cinfer_outcome_name(res->outcome), res->error.message);
    }
    cinfer_session_free(j->s);
    j->s = NULL;
}

static void check_exact(const job *j, const char *what) {
    int32_t want[MAX_IDS];
    CHECK(!ref_greedy(REF, V, j->prompt, j->np, j->max_tokens, want) && j->n_tokens == j->max_tokens &&
              !memcmp(j->tokens, want, (size_t)j->max_tokens * sizeof *want),
          "%s: the output (%d tokens) differs from the cold reference", what, j->n_tokens);
}

static void check_all_back(cinfer_engine *e, const char *when) {
    cinfer_engine_stats st;
    cinfer_engine_get_stats(e, &st);
    CHECK(st.kv_blocks_used == 0 && st.kv_window_blocks_used == 0, "%s: %d full and %d window blocks still held", when,
          st.kv_blocks_used, st.kv_window_blocks_used);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: test_window_engine MODEL_DIR\n");
        return 2;
    }
    cinfer_error err = {0};
    cinfer_model_params mp = cinfer_model_default_params();
    mp.n_threads = 2;
    if (cinfer_model_load(argv[1], &mp, &M, &err) != CINFER_OK) { fprintf(stderr, "load: %s\n", err.message); return 1; }
    cf_model_params rp = cf_model_default_params();
    rp.backend.n_threads = 2;
    if (cf_model_load(argv[1], &rp, &REF, &err) != CINFER_OK) { fprintf(stderr, "reference load: %s\n", err.message); return 1; }
    cinfer_model_info info = cinfer_model_get_info(M);
    V = info.vocab;
    CTX = info.context;
    if (CTX < PROMPT + GEN + 8 || CTX > MAX_IDS) {
        fprintf(stderr, "test_window_engine needs a context of %d to %d tokens\n", PROMPT + GEN + 8, MAX_IDS);
        return 1;
    }

    /* the least memory for one sequence of the whole context: what an engine of one sequence takes by default */
    cinfer_engine *e = engine(1, 0);
    if (!e) return 1;
    cinfer_engine_stats st;
    cinfer_engine_get_stats(e, &st);
    cinfer_engine_free(e);
    if (!st.kv_window_blocks_total) {
        printf("skipped: %s has no window pool\n", argv[1]);
        return 77;
    }
    const int64_t least = (int64_t)st.kv_blocks_total * st.kv_block_bytes + (int64_t)st.kv_window_blocks_total * st.kv_window_block_bytes;
    const int64_t one_pool_tokens = least / (st.kv_block_bytes + st.kv_window_block_bytes) * st.kv_block_tokens;
    CHECK(one_pool_tokens < PROMPT + GEN - 1, "one pool of %lld bytes would hold %lld tokens, enough for the request", (long long)least,
          (long long)one_pool_tokens);
    printf("%lld bytes of KV memory: one pool would hold %lld tokens; here %d full blocks and %d window blocks (window %d)\n",
           (long long)least, (long long)one_pool_tokens, st.kv_blocks_total, st.kv_window_blocks_total, st.kv_window);

    e = engine(3, least);
    if (!e) return 1;
    cinfer_engine_get_stats(e, &st);
    CHECK(st.kv_window_blocks_total > 0 && st.kv_window > 0 && st.kv_window_block_bytes > 0, "the stats show the window pool");

    /* one request that one pool would refuse */
    static job a, b, three[3];
    a.np = PROMPT;
    a.max_tokens = GEN;
    fill_prompt(a.prompt, a.np, 1);
    open_job(e, &a);
    finish_job(&a);
    check_exact(&a, "alone");
    /* the chat's second turn: the first turn's prompt and answer (all but the last answer token, never fed) and
     * a few new tokens; the blocks up to the last whole block of the first turn are reused */
    b.np = PROMPT + GEN + 5;
    b.max_tokens = 8;
    memcpy(b.prompt, a.prompt, PROMPT * sizeof *a.prompt);
    memcpy(b.prompt + PROMPT, a.tokens, GEN * sizeof *a.tokens);
    fill_prompt(b.prompt + PROMPT + GEN, 5, 2);
    open_job(e, &b);
    finish_job(&b);
    check_exact(&b, "second turn");
    const int want_cached = (PROMPT + GEN - 1) / st.kv_block_tokens * st.kv_block_tokens;
    CHECK(b.cached == want_cached, "the second turn reused %d tokens, want %d", b.cached, want_cached);
    check_all_back(e, "after the turns");

    /* three at once in memory for one */
    for (int i = 0; i < 3; i++) {
        three[i].np = PROMPT - 20 * i;
        three[i].max_tokens = GEN;
        fill_prompt(three[i].prompt, three[i].np, 10u + (unsigned)i);
        open_job(e, &three[i]);
    }
    for (int i = 0; i < 3; i++) finish_job(&three[i]);
    for (int i = 0; i < 3; i++) check_exact(&three[i], "three at once");
    check_all_back(e, "after three at once");
    cinfer_engine_free(e);
    cinfer_model_free(M);
    cf_model_free(REF);
    printf("%d checks, %d failed\n", checks, failures);
    return failures ? 1 : 0;
}
