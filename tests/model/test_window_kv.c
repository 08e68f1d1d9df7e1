/* test_window_kv.c: the runner's window pool (model/runner.h, kv/kv_pool.h) on a model folder with sliding-window
 * layers, on the CPU, where every logits row must equal the reference (one sequence alone, cf_seq) bit for bit:
 *   - as sequences advance, their window blocks go back to the pool (pool counts, at most window + rollback + a
 *     step held), and the logits equal those of a runner with one pool that frees nothing;
 *   - after blocks were freed, a truncate within the rollback or back over the last step, a fork, and a truncate
 *     to 0 stay exact; one below the floor fails and changes nothing;
 *   - a prefix is reused with its window blocks while they are cached, less once they were evicted, exact both ways;
 *   - a sequence of the whole context runs in KV memory where one pool cannot hold it, and a budget below one
 *     sequence's window is refused with a clear error.
 *
 * usage: test_window_kv MODEL_DIR */
#include "model/model.h"
#include "model/runner.h"
#include "base/status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../check.h"
#include "../model_ref.h"

#define BS 4
#define ROLLBACK 4
#define STEP 16

static int V, L, WIN;   /* vocab, the context used, the largest window */

static void fill_ids(int32_t *ids, int n, unsigned seed) {
    for (int i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        ids[i] = (int32_t)((seed >> 8) % (unsigned)V);
    }
}

static cf_runner *runner(cf_model *m, int max_seqs, int64_t kv_bytes, int single_pool) {
    cf_runner_params p = cf_runner_default_params();
    p.block_size = BS;
    p.max_seqs = max_seqs;
    p.max_batch_tokens = STEP;
    p.rollback = ROLLBACK;
    p.kv_bytes = kv_bytes;
    p.single_pool = single_pool;
    cf_runner *r = NULL;
    cinfer_error err = {0};
    CHECK(cf_runner_create(m, &p, &r, &err) == CINFER_OK, "runner: %s", err.message);
    return r;
}

/* window blocks a sequence may hold right after appending n positions */
static int bound(int n) { return (WIN - 1 + ROLLBACK + n + BS - 1) / BS + 1; }

/* Appends ids[len, len + n) to s in one step with every row's logits; returns how many rows differ from ref. */
static int feed(cf_runner *r, cf_rseq *s, const int32_t *ids, int n, const float *ref, cinfer_status *st) {
    cinfer_error err = {0};
    const int len = cf_rseq_len(s);
    cf_batch_item it = {.seq = s, .ids = ids + len, .n = n, .logits = CF_LOGITS_ALL};
    *st = cf_runner_step(r, &it, 1, &err);
    if (*st != CINFER_OK) return 0;
    int bad = 0;
    for (int j = 0; j < n; j++) bad += memcmp(it.out + (size_t)j * V, ref + (size_t)(len + j) * V, (size_t)V * sizeof(float)) != 0;
    return bad;
}

/* Two sequences prefilled in chunks, then decoded together to the end of the context, on the window pool and on
 * one pool side by side. */
static void check_advance(cf_model *m) {
    cinfer_error err = {0};
    cf_runner *w = runner(m, 4, 0, 0), *one = runner(m, 4, 0, 1);
    if (!w || !one) return;
    CHECK(cf_runner_wblocks_total(w) > 0 && cf_runner_window(w) == WIN, "a window pool of %d blocks, window %d (the model's %d)",
          cf_runner_wblocks_total(w), cf_runner_window(w), WIN);
    CHECK(cf_runner_wblocks_total(one) == 0 && cf_runner_window(one) == 0, "single_pool: no window pool");
    int32_t *ids[2];
    float *ref[2];
    cf_rseq *s[2], *t[2];
    for (int i = 0; i < 2; i++) {
        ids[i] = malloc((size_t)L * sizeof *ids[i]);
        fill_ids(ids[i], L, 11u + 7u * (unsigned)i);
        ref[i] = ref_logits(m, V, ids[i], L);
        CHECK(cf_rseq_create(w, &s[i], &err) == CINFER_OK && cf_rseq_create(one, &t[i], &err) == CINFER_OK, "sequences");
    }
    const int prompt[2] = {37, 5};
    int bad_ref = 0, bad_one = 0, bad_held = 0, bad_count = 0, worst = 0, steps = 0;
    while (cf_rseq_len(s[0]) < L || cf_rseq_len(s[1]) < L) {
        cf_batch_item a[2], b[2];
        int n = 0;
        for (int i = 0; i < 2; i++) {
            const int len = cf_rseq_len(s[i]);
            if (len >= L) continue;
            int k = len < prompt[i] ? prompt[i] - len : 1;
            if (k > STEP / 2) k = STEP / 2;
            a[n] = (cf_batch_item){.seq = s[i], .ids = ids[i] + len, .n = k, .logits = CF_LOGITS_ALL};
            b[n] = a[n];
            b[n].seq = t[i];
            n++;
        }
        cinfer_status sa = cf_runner_step(w, a, n, &err), sb = cf_runner_step(one, b, n, &err);
        CHECK(sa == CINFER_OK && sb == CINFER_OK, "step %d: %s", steps, err.message);
        if (sa != CINFER_OK || sb != CINFER_OK) break;
        for (int j = 0; j < n; j++) {
            const int i = a[j].seq == s[0] ? 0 : 1, len = cf_rseq_len(s[i]) - a[j].n;
            for (int r = 0; r < a[j].n; r++) {
                bad_ref += memcmp(a[j].out + (size_t)r * V, ref[i] + (size_t)(len + r) * V, (size_t)V * sizeof(float)) != 0;
                bad_one += memcmp(a[j].out + (size_t)r * V, b[j].out + (size_t)r * V, (size_t)V * sizeof(float)) != 0;
            }
            const int held = cf_rseq_wblocks_held(s[i]);
            bad_held += held > bound(a[j].n);
            if (held > worst) worst = held;
        }
        /* every referenced window block is one of theirs (nothing shared here) */
        bad_count += cf_runner_wblocks_total(w) - cf_runner_wblocks_available(w) != cf_rseq_wblocks_held(s[0]) + cf_rseq_wblocks_held(s[1]);
        steps++;
    }
    CHECK(bad_ref == 0, "%d rows of the window pool differ from the sequence alone", bad_ref);
    CHECK(bad_one == 0, "%d rows of the window pool differ from one pool", bad_one);
    CHECK(bad_held == 0 && worst > 0, "%d steps held more window blocks than the bound (worst %d, bound %d)", bad_held, worst,
          bound(STEP / 2));
    CHECK(bad_count == 0, "%d steps where the window pool's count of used blocks was not the sequences'", bad_count);
    const int dropped = (L - (WIN - 1) - ROLLBACK) / BS;
    CHECK(cf_rseq_wblocks_held(s[0]) == cf_rseq_blocks_held(s[0]) - dropped, "at %d tokens: %d window blocks held of %d, %d dropped", L,
          cf_rseq_wblocks_held(s[0]), cf_rseq_blocks_held(s[0]), dropped);
    CHECK(cf_rseq_blocks_held(t[0]) == (L + BS - 1) / BS, "one pool keeps every block (%d)", cf_rseq_blocks_held(t[0]));
    printf("advance: %d steps; a sequence of %d tokens holds %d window blocks (one pool: %d blocks for every layer)\n", steps, L,
           cf_rseq_wblocks_held(s[0]), cf_rseq_blocks_held(t[0]));
    for (int i = 0; i < 2; i++) {
        cf_rseq_free(s[i]);
        cf_rseq_free(t[i]);
        free(ids[i]);
        free(ref[i]);
    }
    CHECK(cf_runner_wblocks_available(w) == cf_runner_wblocks_total(w) && cf_runner_blocks_available(w) == cf_runner_blocks_total(w),
          "every block back in both pools");
    cf_runner_free(w);
    cf_runner_free(one);
}

/* Truncate, fork and truncate to 0 after the window pool freed blocks. */
static void check_rollback(cf_model *m) {
    cinfer_error err = {0};
    cf_runner *r = runner(m, 4, 0, 0);
    if (!r) return;
    const int n = L - 40;
    int32_t *ids = malloc((size_t)L * sizeof *ids), *alt = malloc((size_t)L * sizeof *alt);
    fill_ids(ids, L, 3);
    memcpy(alt, ids, (size_t)n * sizeof *ids);
    fill_ids(alt + n, L - n, 99);
    float *ref = ref_logits(m, V, ids, L), *ref_alt = ref_logits(m, V, alt, L);
    cf_rseq *s = NULL, *f = NULL;
    CHECK(cf_rseq_create(r, &s, &err) == CINFER_OK, "create");
    cinfer_status st = CINFER_OK;
    int bad = 0;
    while (cf_rseq_len(s) < n && st == CINFER_OK) bad += feed(r, s, ids, n - cf_rseq_len(s) < STEP ? n - cf_rseq_len(s) : STEP, ref, &st);
    CHECK(st == CINFER_OK && bad == 0, "prefill: %d rows differ", bad);
    const int floor = cf_rseq_floor(s);
    CHECK(floor > 0 && floor <= n - ROLLBACK, "floor %d at %d tokens (rollback %d)", floor, n, ROLLBACK);

    st = cf_rseq_truncate(s, floor - 1, &err);
    CHECK(st == CINFER_E_INVALID_ARGUMENT && cf_rseq_len(s) == n && strstr(err.message, "sliding-window"),
          "a truncate below the floor: %s, length %d", err.message, cf_rseq_len(s));
    CHECK(cf_rseq_fork(s, &f, &err) == CINFER_OK, "fork: %s", err.message);
    CHECK(cf_rseq_truncate(s, n - ROLLBACK, &err) == CINFER_OK, "truncate by the rollback: %s", err.message);
    bad = feed(r, s, ids, 10, ref, &st) + feed(r, s, ids, 1, ref, &st);
    CHECK(st == CINFER_OK && bad == 0, "after the truncate: %d rows differ (%s)", bad, err.message);
    /* a step longer than the rollback can be taken back until the next step begins */
    const int len = cf_rseq_len(s);
    bad = feed(r, s, ids, STEP, ref, &st);
    CHECK(st == CINFER_OK && bad == 0 && cf_rseq_truncate(s, len, &err) == CINFER_OK, "taking back a step of %d (rollback %d): %s", STEP,
          ROLLBACK, err.message);
    bad = feed(r, s, ids, STEP, ref, &st) + feed(r, s, ids, 1, ref, &st);
    CHECK(st == CINFER_OK && bad == 0, "after taking back a step: %d rows differ", bad);
    CHECK(cf_rseq_truncate(s, len, &err) == CINFER_E_INVALID_ARGUMENT && cf_rseq_len(s) == len + STEP + 1,
          "two steps back, past the rollback: %s", err.message);
    bad = 0;
    for (int i = 0; i < 12 && st == CINFER_OK; i++) bad += feed(r, f, alt, 1, ref_alt, &st);
    CHECK(st == CINFER_OK && bad == 0, "the fork going its own way: %d rows differ", bad);
    CHECK(cf_rseq_truncate(f, 0, &err) == CINFER_OK && cf_rseq_len(f) == 0 && cf_rseq_wblocks_held(f) == 0, "truncate to 0: %s",
          err.message);
    bad = 0;
    while (cf_rseq_len(f) < 40 && st == CINFER_OK) bad += feed(r, f, alt, STEP, ref_alt, &st);
    CHECK(st == CINFER_OK && bad == 0, "after a truncate to 0: %d rows differ", bad);
    cf_rseq_free(s);
    cf_rseq_free(f);
    CHECK(cf_runner_wblocks_available(r) == cf_runner_wblocks_total(r), "every window block back");
    cf_runner_free(r);
    free(ids);
    free(alt);
    free(ref);
    free(ref_alt);
}

/* Runs ids[0, n) through a new sequence of r and frees it (its blocks stay cached). */
static void run_and_free(cf_runner *r, const int32_t *ids, int n, const float *ref) {
    cinfer_error err = {0};
    cf_rseq *s = NULL;
    CHECK(cf_rseq_create(r, &s, &err) == CINFER_OK, "create");
    cinfer_status st = CINFER_OK;
    int bad = 0;
    while (cf_rseq_len(s) < n && st == CINFER_OK) bad += feed(r, s, ids, n - cf_rseq_len(s) < STEP ? n - cf_rseq_len(s) : STEP, ref, &st);
    CHECK(st == CINFER_OK && bad == 0, "a run of %d tokens: %d rows differ", n, bad);
    cf_rseq_free(s);
}

/* Adopts the cached prefix of ids[0, n) and computes the rest; returns the tokens reused. */
static int adopt_and_finish(cf_runner *r, const int32_t *ids, int n, const float *ref) {
    cinfer_error err = {0};
    cf_rseq *s = NULL;
    int reused = -1;
    CHECK(cf_rseq_create(r, &s, &err) == CINFER_OK && cf_rseq_adopt_prefix(s, ids, n, &reused, &err) == CINFER_OK, "adopt: %s",
          err.message);
    cinfer_status st = CINFER_OK;
    int bad = 0;
    while (cf_rseq_len(s) < n && st == CINFER_OK) bad += feed(r, s, ids, n - cf_rseq_len(s) < STEP ? n - cf_rseq_len(s) : STEP, ref, &st);
    CHECK(st == CINFER_OK && bad == 0, "after adopting %d tokens: %d rows differ", reused, bad);
    cf_rseq_free(s);
    return reused;
}

static void check_prefix(cf_model *m) {
    int32_t *ids = malloc((size_t)L * sizeof *ids), *other = malloc((size_t)L * sizeof *other);
    fill_ids(ids, L, 21);
    fill_ids(other, L, 22);
    float *ref = ref_logits(m, V, ids, L), *ref_other = ref_logits(m, V, other, L);
    const int n = 101, full = (n - 1) / BS * BS;
    /* plenty of memory: the window blocks around position 100 left the first sequence but stay cached */
    cf_runner *r = runner(m, 4, 0, 0);
    if (r) {
        run_and_free(r, ids, 160, ref);
        CHECK(cf_runner_wblocks_cached(r) > 0, "window blocks stay cached");
        const int reused = adopt_and_finish(r, ids, n, ref);
        CHECK(reused == full, "reused %d of a %d-token prompt (want %d)", reused, n, full);
        cf_runner_free(r);
    }
    /* a window pool of two sequences' worth: another sequence's blocks evict the first one's, so only what the
     * window blocks still cached allow is reused (the full layers alone would give more) */
    cf_runner *probe = runner(m, 2, 0, 0);
    int64_t two = probe ? cf_runner_params_of(probe)->kv_bytes : 0;
    cf_runner_free(probe);
    r = two ? runner(m, 2, two, 0) : NULL;
    if (r) {
        run_and_free(r, ids, 160, ref);
        run_and_free(r, other, L, ref_other);
        const int reused = adopt_and_finish(r, ids, n, ref);
        CHECK(reused < full && reused % BS == 0, "reused %d after the window blocks were evicted (the full layers hold %d)", reused, full);
        printf("prefix: %d of %d tokens reused with the window blocks cached, %d once they were evicted\n", full, n, reused);
        cf_runner_free(r);
    }
    free(ids);
    free(other);
    free(ref);
    free(ref_other);
}

/* The whole context in the least KV memory the window pool needs for it, where one pool cannot hold it. */
static void check_long_fit(cf_model *m) {
    cinfer_error err = {0};
    cf_runner *probe = runner(m, 1, 0, 0);
    if (!probe) return;
    const int64_t least = cf_runner_params_of(probe)->kv_bytes;
    const int64_t window_least = (int64_t)cf_runner_wblocks_total(probe) * cf_runner_wblock_bytes(probe);   /* one sequence's */
    cf_runner_free(probe);
    int32_t *ids = malloc((size_t)L * sizeof *ids);
    fill_ids(ids, L, 5);
    float *ref = ref_logits(m, V, ids, L);

    cf_runner *one = runner(m, 1, least, 1);
    if (one) {
        CHECK((int64_t)cf_runner_blocks_total(one) * BS < L, "one pool of %lld bytes holds %d blocks of %d: %d positions, not %d",
              (long long)least, cf_runner_blocks_total(one), BS, cf_runner_blocks_total(one) * BS, L);
        cf_rseq *s = NULL;
        cf_rseq_create(one, &s, &err);
        cinfer_status st = CINFER_OK;
        while (cf_rseq_len(s) < L && st == CINFER_OK) feed(one, s, ids, STEP, ref, &st);
        CHECK(st == CINFER_E_OUT_OF_MEMORY, "one pool: %s after %d tokens", cinfer_status_name(st), cf_rseq_len(s));
        printf("long: %lld bytes of KV memory: one pool stops at %d of %d tokens", (long long)least, cf_rseq_len(s), L);
        cf_rseq_free(s);
        cf_runner_free(one);
    }
    cf_runner *w = runner(m, 1, least, 0);
    if (w) {
        cf_rseq *s = NULL;
        cf_rseq_create(w, &s, &err);
        cinfer_status st = CINFER_OK;
        int bad = 0, short_of = 0;
        while (cf_rseq_len(s) < L && st == CINFER_OK) {
            /* what the step needs, net of what its drop gives back, is there */
            short_of += cf_rseq_wblocks_needed(s, STEP) > cf_runner_wblocks_available(w) ||
                        cf_rseq_blocks_needed(s, STEP) > cf_runner_blocks_available(w);
            bad += feed(w, s, ids, STEP, ref, &st);
        }
        CHECK(st == CINFER_OK && cf_rseq_len(s) == L && bad == 0, "the window pool: %s at %d of %d tokens, %d rows differ",
              cinfer_status_name(st), cf_rseq_len(s), L, bad);
        CHECK(short_of == 0, "%d steps reported needing more blocks than were available, and ran", short_of);
        printf("; the window pools (%d full blocks, %d window blocks) hold all %d\n", cf_runner_blocks_total(w),
               cf_runner_wblocks_total(w), L);
        cf_rseq_free(s);
        cf_runner_free(w);
    }
    cf_runner_params p = cf_runner_default_params();
    p.block_size = BS;
    p.max_seqs = 1;
    p.max_batch_tokens = STEP;
    p.rollback = ROLLBACK;
    p.kv_bytes = window_least - 1;
    cf_runner *small = NULL;
    CHECK(cf_runner_create(m, &p, &small, &err) == CINFER_E_INVALID_ARGUMENT && !small && strstr(err.message, "sliding-window"),
          "a budget below one sequence's window: %s", err.message);
    free(ids);
    free(ref);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_window_kv MODEL_DIR\n");
        return 2;
    }
    cinfer_error err = {0};
    cf_model_params mp = cf_model_default_params();
    cf_model *m = NULL;
    if (cf_model_load(argv[1], &mp, &m, &err) != CINFER_OK) {
        fprintf(stderr, "%s\n", err.message);
        return 1;
    }
    V = m->hp.vocab;
    L = m->hp.max_ctx;
    for (int l = 0; l < m->hp.n_layers; l++)
        if (m->hp.layers[l].window > WIN) WIN = m->hp.layers[l].window;
    if (!WIN || WIN + ROLLBACK + 2 * BS >= L) {
        printf("skipped: %s has no sliding window shorter than its context\n", argv[1]);
        cf_model_free(m);
        return 77;
    }
    check_advance(m);
    check_rollback(m);
    check_prefix(m);
    check_long_fit(m);
    cf_model_free(m);
    printf("%d checks, %d failed\n", checks, failures);
    return failures ? 1 : 0;
}
