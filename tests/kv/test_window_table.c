/* test_window_table.c: block tables of a sliding-window pool keyed on a full pool (kv/block_pool.h) over a
 * simulated KV memory: dropping the blocks that left the window gives them back (pool counts) and keeps what the
 * window still sees; keyed publication and adoption find exactly the blocks a query after the prefix needs and
 * adopt less when one was evicted or its key block changed; fork, truncate, copy-on-write and leases stay exact
 * with dropped entries. */
#include "kv/block_pool.h"
#include "kv/lease.h"
#include "../check.h"

#include <stdlib.h>
#include <string.h>

enum { BS = 2, WINDOW = 4, ROLLBACK = 1, NF = 64, NW = 32 };

static int32_t FMEM[NF * BS], WMEM[NW * BS];   /* slot -> digest of the tokens up to its position */

static int32_t kv_of(const int32_t *tokens, int pos) {
    uint32_t h = 2166136261u;
    for (int i = 0; i <= pos; i++) h = (h ^ (uint32_t)tokens[i]) * 16777619u;
    return (int32_t)h;
}

typedef struct seq {
    cf_block_table f, w;
} seq;

static cf_block_pool *F, *W;

/* Appends tokens[len, len + n) as a runner step does: reserve both, copy, write, commit the full table, then the
 * keyed window table, then drop what no query can see any more (keeping ROLLBACK positions). */
static cinfer_status append(seq *s, const int32_t *tokens, int n) {
    cf_block_copy fc[1], wc[1];
    int nfc = 0, nwc = 0;
    cinfer_error err = {0};
    cinfer_status st = cf_block_table_reserve(F, &s->f, n, fc, &nfc, &err);
    if (st == CINFER_OK) st = cf_block_table_reserve(W, &s->w, n, wc, &nwc, &err);
    for (int i = 0; i < nfc; i++) memcpy(FMEM + fc[i].dst * BS, FMEM + fc[i].src * BS, BS * sizeof *FMEM);
    for (int i = 0; i < nwc; i++) memcpy(WMEM + wc[i].dst * BS, WMEM + wc[i].src * BS, BS * sizeof *WMEM);
    if (st != CINFER_OK) {
        cf_block_table_truncate(F, &s->f, s->f.n_tokens);
        cf_block_table_truncate(W, &s->w, s->w.n_tokens);
        return st;
    }
    for (int i = 0; i < n; i++) {
        const int p = s->f.n_tokens + i;
        FMEM[s->f.blocks[p / BS] * BS + p % BS] = kv_of(tokens, p);
        WMEM[s->w.blocks[p / BS] * BS + p % BS] = kv_of(tokens, p);
    }
    cf_block_table_commit(F, &s->f, tokens, n, 0);
    cf_block_table_commit_keyed(W, &s->w, tokens, n, 0, F, &s->f);
    cf_block_table_drop(W, &s->w, s->w.n_tokens - (WINDOW - 1) - ROLLBACK);
    return CINFER_OK;
}

/* Whether the next query (at position len) finds the window it needs, and the full table everything. */
static int reads_back(const seq *s, const int32_t *tokens) {
    const int n = s->f.n_tokens;
    for (int p = 0; p < n; p++)
        if (FMEM[s->f.blocks[p / BS] * BS + p % BS] != kv_of(tokens, p)) return 0;
    for (int p = n - WINDOW + 1 > 0 ? n - WINDOW + 1 : 0; p < n; p++) {
        const int32_t b = s->w.blocks[p / BS];
        if (b < 0 || WMEM[b * BS + p % BS] != kv_of(tokens, p)) return 0;
    }
    return s->w.n_tokens == n;
}

static void release(seq *s) {
    cf_block_table_release(F, &s->f);
    cf_block_table_release(W, &s->w);
}

static int held(const cf_block_table *t) {
    int n = 0;
    for (int i = 0; i < t->n_blocks; i++) n += t->blocks[i] >= 0;
    return n;
}

static void test_drop(const int32_t *toks) {
    seq a = {0};
    int worst = 0, bad = 0;
    for (int i = 0; i < 24; i++) {
        CHECK(append(&a, toks, 1) == CINFER_OK, "append token %d", i);
        bad += !reads_back(&a, toks);
        if (held(&a.w) > worst) worst = held(&a.w);
        bad += cf_block_pool_size(W) - cf_block_pool_available(W) != held(&a.w);
    }
    /* held: window - 1 + rollback positions before the end, the new one, and partial blocks at both ends */
    const int bound = (WINDOW - 1 + ROLLBACK + 1 + BS - 1) / BS + 1;
    CHECK(bad == 0, "%d steps where the window or the pool counts were wrong", bad);
    CHECK(worst <= bound && worst >= 2, "the window table held up to %d blocks (bound %d)", worst, bound);
    CHECK(a.w.first == (24 - (WINDOW - 1) - ROLLBACK) / BS, "first held block %d", a.w.first);
    CHECK(cf_block_pool_cached(W) == a.w.first, "every dropped block was published and stays cached (%d of %d)",
          cf_block_pool_cached(W), a.w.first);
    for (int i = 0; i < a.w.first; i++) bad += a.w.blocks[i] != -1;
    CHECK(bad == 0, "dropped entries are -1");
    CHECK(cf_block_table_drop(W, &a.w, a.w.first * BS) == 0, "dropping again what is dropped releases nothing");
    release(&a);
    CHECK(cf_block_pool_available(W) == NW && cf_block_pool_available(F) == NF, "all back after release");
}

static void test_keyed_adopt(const int32_t *toks) {
    cinfer_error err = {0};
    seq a = {0}, b = {0};
    CHECK(append(&a, toks, 20) == CINFER_OK, "prefill 20");
    CHECK(reads_back(&a, toks), "prefill reads back");
    release(&a);
    /* the whole chain is cached: a 17-token prompt reuses 16 positions, window blocks included */
    int reused = 0, k = 0;
    CHECK(cf_block_table_adopt_prefix(F, &b.f, toks, 17, 0, &reused, &err) == CINFER_OK && reused == 16, "full reuse %d", reused);
    CHECK(cf_block_table_adopt_keyed(W, &b.w, toks, reused / BS, WINDOW, 0, F, &b.f, &k, &err) == CINFER_OK && k == 8,
          "window blocks adopted for %d blocks", k);
    CHECK(b.w.first == (16 - WINDOW + 1) / BS && held(&b.w) == 8 - b.w.first, "adopted only the window: first %d, held %d", b.w.first,
          held(&b.w));
    CHECK(reads_back(&b, toks), "the adopted prefix reads back");
    CHECK(append(&b, toks, 1) == CINFER_OK && reads_back(&b, toks), "goes on after adoption");
    release(&b);

    /* the window block under full block 7 leaves the index: only 7 blocks can be reused */
    CHECK(cf_block_table_adopt_prefix(F, &b.f, toks, 17, 0, &reused, &err) == CINFER_OK && reused == 16, "full reuse %d", reused);
    const int32_t key = b.f.blocks[7];
    const int32_t wb = cf_block_find_keyed(W, key, cf_block_gen(F, key), toks + 7 * BS, 0);
    CHECK(wb >= 0, "the window block of block 7 is in the index");
    if (wb >= 0) cf_block_unpublish(W, wb);
    CHECK(cf_block_table_adopt_keyed(W, &b.w, toks, reused / BS, WINDOW, 0, F, &b.f, &k, &err) == CINFER_OK && k == 7,
          "adopted %d blocks with block 7's window block gone", k);
    CHECK(cf_block_find_keyed(W, key, cf_block_gen(F, key), toks + 7 * BS, 0) < 0, "gone from the index");
    cf_block_table_truncate(F, &b.f, k * BS);
    CHECK(reads_back(&b, toks), "the shorter prefix reads back");
    CHECK(append(&b, toks, 3) == CINFER_OK && reads_back(&b, toks), "recomputes the rest");
    release(&b);

    /* a key block whose contents change (unpublished: its generation moves on) no longer finds its window block */
    CHECK(cf_block_table_adopt_prefix(F, &b.f, toks, 17, 0, &reused, &err) == CINFER_OK, "adopt");
    const int32_t k3 = b.f.blocks[3];
    const uint32_t gen = cf_block_gen(F, k3);
    CHECK(cf_block_find_keyed(W, k3, gen, toks + 3 * BS, 0) >= 0, "found under the current generation");
    cf_block_unpublish(F, k3);
    CHECK(cf_block_gen(F, k3) != gen && cf_block_find_keyed(W, k3, cf_block_gen(F, k3), toks + 3 * BS, 0) < 0,
          "not found once the key block changed");
    cf_block_table_release(F, &b.f);
    CHECK(cf_block_pool_available(W) == NW && cf_block_pool_available(F) == NF, "all back");
}

static void test_fork_truncate(const int32_t *toks) {
    cinfer_error err = {0};
    int32_t other[40];
    memcpy(other, toks, sizeof other);
    for (int i = 15; i < 40; i++) other[i] = 1000 + i;
    seq a = {0}, b = {0};
    CHECK(append(&a, toks, 15) == CINFER_OK, "prefill 15 (odd: a partial last block)");
    CHECK(a.w.first > 0, "blocks were dropped (first %d)", a.w.first);
    CHECK(cf_block_table_fork(F, &a.f, &b.f, &err) == CINFER_OK && cf_block_table_fork(W, &a.w, &b.w, &err) == CINFER_OK, "fork");
    CHECK(b.w.first == a.w.first && b.w.blocks[0] == -1, "the fork keeps the dropped entries");
    int shared = 1;
    for (int i = a.w.first; i < a.w.n_blocks; i++) shared &= cf_block_refs(W, a.w.blocks[i]) == 2;
    CHECK(shared, "held window blocks are shared");
    /* both go on: the shared partial block is copied, each reads its own tokens */
    int bad = 0;
    for (int i = 0; i < 10; i++) {
        CHECK(append(&a, toks, 1) == CINFER_OK && append(&b, other, 1) == CINFER_OK, "diverge %d", i);
        bad += !reads_back(&a, toks) + !reads_back(&b, other);
    }
    CHECK(bad == 0, "%d reads after the fork were wrong", bad);
    /* truncate within what is held (the rollback), and to 0; a truncate below the floor leaves a table
     * whose last block was dropped, and a reserve into it fails */
    const int n = a.f.n_tokens;
    cf_block_table_truncate(F, &a.f, n - ROLLBACK);
    cf_block_table_truncate(W, &a.w, n - ROLLBACK);
    CHECK(reads_back(&a, toks), "a rollback of %d reads back", ROLLBACK);
    CHECK(append(&a, toks, 1) == CINFER_OK && reads_back(&a, toks), "and goes on");
    seq c = {0};
    CHECK(cf_block_table_fork(F, &b.f, &c.f, &err) == CINFER_OK && cf_block_table_fork(W, &b.w, &c.w, &err) == CINFER_OK, "fork c");
    cf_block_table_truncate(W, &c.w, 3);
    cf_block_copy cp[1];
    int nc = 0;
    CHECK(cf_block_table_reserve(W, &c.w, 1, cp, &nc, &err) == CINFER_E_INVALID_ARGUMENT, "writing into a dropped block: %s",
          err.message);
    release(&c);
    /* a read lease over a table with dropped entries */
    cf_lease_state ls = {0};
    cf_lease_request rq = {W, &b.w, &ls, CF_LEASE_READ, "b"};
    cf_kv_lease l;
    const int avail = cf_block_pool_available(W);
    CHECK(cf_kv_lease_acquire(&rq, &l, &err) == CINFER_OK, "read lease: %s", err.message);
    release(&b);
    CHECK(cf_block_pool_available(W) == avail, "the lease keeps b's window blocks");
    cf_kv_lease_release(&l);
    CHECK(cf_block_pool_available(W) > avail, "released with the lease");
    cf_block_table_truncate(F, &a.f, 0);
    cf_block_table_truncate(W, &a.w, 0);
    CHECK(a.w.first == 0 && a.w.n_blocks == 0, "truncate to 0 empties the window table");
    CHECK(append(&a, toks, 12) == CINFER_OK && reads_back(&a, toks), "and it starts again");
    release(&a);
    CHECK(cf_block_pool_available(W) == NW && cf_block_pool_available(F) == NF, "all back");
}

int main(void) {
    cinfer_error err = {0};
    CHECK(cf_block_pool_create(NF, BS, &F, &err) == CINFER_OK && cf_block_pool_create(NW, BS, &W, &err) == CINFER_OK, "pools");
    int32_t toks[40];
    for (int i = 0; i < 40; i++) toks[i] = 7 + (i * 37) % 101;
    test_drop(toks);
    test_keyed_adopt(toks);
    test_fork_truncate(toks);
    cf_block_pool_free(F);
    cf_block_pool_free(W);
    printf("%d checks, %d failed\n", checks, failures);
    return failures ? 1 : 0;
}
