/* test_block_pool.c: the paged KV block pool. Allocation limits, reference counts, LRU eviction order,
 * prefix matches (exact tokens, salt, stale parents), copy-on-write after fork and truncate, all-or-nothing
 * reserve, and a random walk of many tables over a simulated KV memory: every table must read back exactly
 * the tokens it wrote, whatever was shared, cached, evicted or copied on the way. */
#include "kv/block_pool.h"
#include "../check.h"

#include <stdlib.h>
#include <string.h>

static cf_block_pool *make(int n_blocks, int bs) {
    cf_block_pool *p = NULL;
    cinfer_error err = {0};
    CHECK(cf_block_pool_create(n_blocks, bs, &p, &err) == CINFER_OK, "create: %s", err.message);
    return p;
}

/* Simulated KV memory: the slot of position pos holds a digest of tokens[0, pos], as a real key or value
 * depends on the whole prefix. */
static int32_t *MEM;
static int BS;

static int32_t kv_of(const int32_t *tokens, int pos) {
    uint32_t h = 2166136261u;
    for (int i = 0; i <= pos; i++) h = (h ^ (uint32_t)tokens[i]) * 16777619u;
    return (int32_t)h;
}

static void apply_copies(const cf_block_copy *c, int n) {
    for (int i = 0; i < n; i++) memcpy(MEM + (size_t)c[i].dst * BS, MEM + (size_t)c[i].src * BS, (size_t)BS * sizeof *MEM);
}

/* Appends tokens[t->n_tokens, t->n_tokens + n) to t as a forward pass would: reserve, copy, write, commit. */
static cinfer_status append(cf_block_pool *p, cf_block_table *t, const int32_t *tokens, int n, uint64_t salt) {
    cf_block_copy c[1];
    int nc = 0;
    cinfer_error err = {0};
    cinfer_status st = cf_block_table_reserve(p, t, n, c, &nc, &err);
    if (st != CINFER_OK) return st;
    apply_copies(c, nc);
    for (int i = 0; i < n; i++) {
        int pos = t->n_tokens + i;
        MEM[(size_t)t->blocks[pos / BS] * BS + pos % BS] = kv_of(tokens, pos);
    }
    cf_block_table_commit(p, t, tokens, n, salt);
    return CINFER_OK;
}

static int reads_back(const cf_block_table *t, const int32_t *tokens) {
    for (int pos = 0; pos < t->n_tokens; pos++)
        if (MEM[(size_t)t->blocks[pos / BS] * BS + pos % BS] != kv_of(tokens, pos)) return 0;
    return 1;
}

static void test_create_and_alloc(void) {
    cf_block_pool *p = NULL;
    cinfer_error err = {0};
    CHECK(cf_block_pool_create(0, 16, &p, &err) == CINFER_E_INVALID_ARGUMENT && !p, "0 blocks accepted");
    CHECK(cf_block_pool_create(8, 0, &p, &err) == CINFER_E_INVALID_ARGUMENT && !p, "block size 0 accepted");
    p = make(3, 4);
    int32_t a = -1, b = -2, c = -3, d = -4;
    CHECK(cf_block_alloc(p, &a, &err) == CINFER_OK && cf_block_alloc(p, &b, &err) == CINFER_OK &&
          cf_block_alloc(p, &c, &err) == CINFER_OK, "alloc 3 of 3");
    CHECK(a != b && b != c && a != c, "distinct blocks");
    CHECK(cf_block_alloc(p, &d, &err) == CINFER_E_OUT_OF_MEMORY && strstr(err.message, "in use"), "4th: %s", err.message);
    cf_block_ref(p, b);
    cf_block_unref(p, b);
    CHECK(cf_block_refs(p, b) == 1 && cf_block_pool_available(p) == 0, "ref/unref balance");
    cf_block_unref(p, b);
    CHECK(cf_block_pool_available(p) == 1 && cf_block_alloc(p, &d, &err) == CINFER_OK && d == b, "freed block reused");
    cf_block_unref(p, a);
    cf_block_unref(p, c);
    cf_block_unref(p, d);
    CHECK(cf_block_pool_available(p) == 3 && cf_block_pool_cached(p) == 0, "all back");
    cf_block_pool_free(p);
}

static void test_prefix(void) {
    BS = 4;
    cf_block_pool *p = make(16, BS);
    MEM = calloc(16 * 4, sizeof *MEM);
    int32_t toks[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    cf_block_table a = {0}, b = {0}, c = {0};
    CHECK(append(p, &a, toks, 10, 0) == CINFER_OK, "append 10");
    CHECK(a.n_blocks == 3 && a.n_published == 2, "10 tokens: 3 blocks, 2 published (%d, %d)", a.n_blocks, a.n_published);
    cf_block_table_release(p, &a);
    CHECK(cf_block_pool_cached(p) == 2 && cf_block_pool_available(p) == 16, "2 cached after release");

    int reused = -1;
    cinfer_error err = {0};
    CHECK(cf_block_table_adopt_prefix(p, &b, toks, 12, 0, &reused, &err) == CINFER_OK && reused == 8, "reused %d of 12", reused);
    CHECK(reads_back(&b, toks), "adopted prefix reads back");
    CHECK(append(p, &b, toks, 4, 0) == CINFER_OK && reads_back(&b, toks) && b.n_published == 3, "extend adopted");
    /* a whole-prompt match keeps one position to compute */
    CHECK(cf_block_table_adopt_prefix(p, &c, toks, 8, 0, &reused, &err) == CINFER_OK && reused == 4, "8-token prompt reuses %d", reused);
    cf_block_table_release(p, &c);
    /* another salt, or another token in the second block, stops the match */
    CHECK(cf_block_table_adopt_prefix(p, &c, toks, 12, 7, &reused, &err) == CINFER_OK && reused == 0, "salt ignored (%d)", reused);
    int32_t other[12];
    memcpy(other, toks, sizeof other);
    other[6] = 99;
    CHECK(cf_block_table_adopt_prefix(p, &c, other, 12, 0, &reused, &err) == CINFER_OK && reused == 4, "mismatch reuses %d", reused);
    cf_block_table_release(p, &c);
    /* the same first block under another parent chain does not match as a second block */
    int32_t shifted[12] = {5, 6, 7, 8, 1, 2, 3, 4, 0, 0, 0, 0};
    CHECK(cf_block_table_adopt_prefix(p, &c, shifted, 12, 0, &reused, &err) == CINFER_OK && reused == 0, "shifted reuses %d", reused);
    cf_block_table_release(p, &c);
    cf_block_table_release(p, &b);
    CHECK(cf_block_pool_available(p) == 16, "all back");
    cf_block_pool_free(p);
    free(MEM);
}

/* Eviction takes the least recently released block, and a block whose parent was evicted and reused never
 * matches under the new parent contents. */
static void test_eviction(void) {
    BS = 2;
    cf_block_pool *p = make(4, BS);
    MEM = calloc(4 * 2, sizeof *MEM);
    int32_t x[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    cf_block_table a = {0}, b = {0};
    CHECK(append(p, &a, x, 8, 0) == CINFER_OK && a.n_published == 4, "fill the pool");
    int32_t leaf = a.blocks[3], root = a.blocks[0];
    cf_block_table_release(p, &a);   /* releases the last block first: leaves are evicted first */
    CHECK(cf_block_pool_cached(p) == 4, "4 cached");
    int32_t got;
    cinfer_error err = {0};
    CHECK(cf_block_alloc(p, &got, &err) == CINFER_OK && got == leaf, "evicts the leaf (%d, want %d)", got, leaf);
    CHECK(!cf_block_is_published(p, leaf) && cf_block_pool_cached(p) == 3, "evicted block left the index");
    cf_block_unref(p, got);
    /* evict everything, then write other contents where the root was: its old children must not match */
    int32_t y[8] = {9, 9, 3, 4, 5, 6, 7, 8};
    CHECK(append(p, &b, y, 4, 0) == CINFER_OK, "append y");
    cf_block_table_release(p, &b);
    int reused = -1;
    CHECK(cf_block_table_adopt_prefix(p, &a, x, 8, 0, &reused, &err) == CINFER_OK, "adopt");
    CHECK(reads_back(&a, x), "x reads back after eviction (reused %d)", reused);
    cf_block_table_release(p, &a);
    CHECK(cf_block_pool_available(p) == 4, "all back");
    (void)root;
    cf_block_pool_free(p);
    free(MEM);
}

static void test_fork_truncate_cow(void) {
    BS = 4;
    cf_block_pool *p = make(8, BS);
    MEM = calloc(8 * 4, sizeof *MEM);
    int32_t x[16] = {1, 2, 3, 4, 5, 6, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    int32_t y[16] = {1, 2, 3, 4, 5, 6, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    cf_block_table a = {0}, b = {0};
    cinfer_error err = {0};
    CHECK(append(p, &a, x, 6, 0) == CINFER_OK, "append 6");
    CHECK(cf_block_table_fork(p, &a, &b, &err) == CINFER_OK && b.n_tokens == 6, "fork");
    CHECK(cf_block_refs(p, a.blocks[1]) == 2, "partial block shared");
    x[6] = 70;
    y[6] = 80;
    cf_block_copy c[1];
    int nc = -1;
    CHECK(cf_block_table_reserve(p, &a, 1, NULL, &nc, &err) == CINFER_E_INVALID_ARGUMENT, "copy without a list refused");
    CHECK(append(p, &a, x, 1, 0) == CINFER_OK && append(p, &b, y, 1, 0) == CINFER_OK, "both write position 6");
    CHECK(a.blocks[1] != b.blocks[1] && a.blocks[0] == b.blocks[0], "the partial block was copied, the full one shared");
    CHECK(reads_back(&a, x) && reads_back(&b, y), "each reads its own tokens");
    /* truncate into a published block, then write: the cached contents must not change under a match */
    x[6] = 7; x[7] = 8; x[8] = 9;
    cf_block_table_truncate(p, &a, 6);
    CHECK(append(p, &a, x, 3, 0) == CINFER_OK && a.n_published == 2 && reads_back(&a, x), "refill");
    int32_t pub = a.blocks[1];
    cf_block_table_truncate(p, &a, 5);
    CHECK(a.n_tokens == 5 && a.n_blocks == 2 && a.n_published == 1, "truncate to 5: %d %d %d", a.n_tokens, a.n_blocks, a.n_published);
    x[5] = 60;
    CHECK(cf_block_table_reserve(p, &a, 1, c, &nc, &err) == CINFER_OK && nc == 0 && !cf_block_is_published(p, pub),
          "unshared published block leaves the index before it is written");
    cf_block_table_release(p, &a);
    cf_block_table_release(p, &b);
    CHECK(cf_block_pool_available(p) == 8, "all back (%d)", cf_block_pool_available(p));
    /* a block rewritten in place after a truncate: the blocks cached after its old contents never match */
    int32_t u[13] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13};
    CHECK(append(p, &a, u, 12, 0) == CINFER_OK && a.n_published == 3, "3 published");
    cf_block_table_truncate(p, &a, 6);
    u[6] = 70;
    u[7] = 80;
    CHECK(append(p, &a, u, 2, 0) == CINFER_OK && a.n_published == 2, "rewritten and published again");
    int reused = -1;
    CHECK(cf_block_table_adopt_prefix(p, &b, u, 13, 0, &reused, &err) == CINFER_OK && reused == 8 && reads_back(&b, u),
          "a stale child matched (reused %d)", reused);
    cf_block_table_release(p, &a);
    cf_block_table_release(p, &b);
    /* all or nothing */
    int32_t z[64] = {0};
    cf_block_table t = {0};
    CHECK(append(p, &t, z, 30, 0) == CINFER_OK, "30 tokens in 8 blocks");
    int avail = cf_block_pool_available(p), nb = t.n_blocks;
    CHECK(cf_block_table_reserve(p, &t, 8, c, &nc, &err) == CINFER_E_OUT_OF_MEMORY && strstr(err.message, "available"),
          "over-reserve: %s", err.message);
    CHECK(cf_block_pool_available(p) == avail && t.n_blocks == nb && t.n_tokens == 30, "unchanged after a refused reserve");
    cf_block_table_release(p, &t);
    cf_block_pool_free(p);
    free(MEM);
}

/* Random walk: tables append, truncate, fork, release and adopt prefixes over a small alphabet (many
 * matches), in a pool small enough to evict; each table must always read back its own tokens. */
static uint64_t rs = 0x1234567;
static int rnd(int n) {
    rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17;
    return (int)(rs % (uint64_t)n);
}

static void test_random_walk(void) {
    enum { NT = 6, MAXT = 200, NB = 48 };
    BS = 4;
    cf_block_pool *p = make(NB, BS);
    MEM = calloc((size_t)NB * BS, sizeof *MEM);
    cf_block_table t[NT];
    int32_t tok[NT][MAXT];
    memset(t, 0, sizeof t);
    int bad = 0, hits = 0, copies = 0, refused = 0;
    cinfer_error err = {0};
    for (int step = 0; step < 20000; step++) {
        int i = rnd(NT), op = rnd(10);
        cf_block_table *T = &t[i];
        if (op < 5) {
            int n = 1 + rnd(9);
            if (T->n_tokens + n > MAXT) n = MAXT - T->n_tokens;
            if (n <= 0) continue;
            for (int k = 0; k < n; k++) tok[i][T->n_tokens + k] = rnd(3);
            cf_block_copy c[1];
            int nc = 0;
            if (cf_block_table_reserve(p, T, n, c, &nc, &err) != CINFER_OK) { refused++; continue; }
            copies += nc;
            apply_copies(c, nc);
            for (int k = 0; k < n; k++) {
                int pos = T->n_tokens + k;
                MEM[(size_t)T->blocks[pos / BS] * BS + pos % BS] = kv_of(tok[i], pos);
            }
            cf_block_table_commit(p, T, tok[i], n, 0);
        } else if (op < 7) {
            cf_block_table_truncate(p, T, T->n_tokens - rnd(6));
        } else if (op == 7) {
            int j = rnd(NT);
            if (j != i && t[j].n_tokens == 0) {
                cf_block_table_release(p, &t[j]);
                if (cf_block_table_fork(p, T, &t[j], &err) == CINFER_OK) memcpy(tok[j], tok[i], sizeof tok[i]);
            }
        } else if (op == 8) {
            cf_block_table_release(p, T);
        } else {
            int n = 1 + rnd(40);
            for (int k = 0; k < n; k++) tok[i][k] = rnd(2);
            int reused = 0;
            cf_block_table_release(p, T);
            CHECK(cf_block_table_adopt_prefix(p, T, tok[i], n, 0, &reused, &err) == CINFER_OK, "adopt");
            hits += reused > 0;
        }
        for (int k = 0; k < NT; k++) bad += !reads_back(&t[k], tok[k]);
        if (bad) { CHECK(0, "step %d: a table reads back wrong tokens", step); break; }
    }
    CHECK(hits > 100 && copies > 50 && refused > 0, "the walk exercised matches (%d), copies (%d), refusals (%d)", hits, copies, refused);
    for (int k = 0; k < NT; k++) cf_block_table_release(p, &t[k]);
    CHECK(cf_block_pool_available(p) == NB, "every block back (%d of %d)", cf_block_pool_available(p), NB);
    for (int b = 0; b < NB; b++) CHECK(cf_block_refs(p, b) == 0, "block %d keeps %d refs", b, cf_block_refs(p, b));
    cf_block_pool_free(p);
    free(MEM);
}

int main(void) {
    test_create_and_alloc();
    test_prefix();
    test_eviction();
    test_fork_truncate_cow();
    test_random_walk();
    printf("%d checks, %d failed\n", checks, failures);
    return failures ? 1 : 0;
}
