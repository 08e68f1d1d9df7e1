/* block_pool.c: paged KV bookkeeping: reference-counted blocks, the free list, the LRU list of cached
 * blocks, the exact prefix index (chained or keyed on another pool), and block tables with fork, truncate,
 * copy-on-write and the dropping of their oldest blocks. */
#include "kv/block_pool.h"
#include "base/status.h"

#include <stdlib.h>
#include <string.h>

enum { FREE, USED, CACHED };

typedef struct block {
    int32_t refs;
    uint32_t gen;            /* bumped when the block is allocated or its published contents change */
    int32_t prev, next;      /* free list (next only) or LRU list */
    int32_t hnext;           /* next block in its index bucket */
    uint8_t state, published;
    /* index key, while published */
    int32_t parent;
    uint32_t parent_gen;
    uint64_t salt, hash;
} block;

struct cf_block_pool {
    int n_blocks, block_size;
    block *b;
    int32_t *tokens;         /* [n_blocks * block_size]: a published block's token ids */
    int32_t *bucket;         /* [n_buckets]: first block of each index bucket, -1 if none */
    uint32_t bucket_mask;
    int32_t free_head;
    int32_t lru_head, lru_tail;  /* least and most recently released cached blocks */
    int n_free, n_cached;
};

static uint64_t mix(uint64_t h, uint64_t v) {
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    h ^= h >> 31;
    h *= 0xbf58476d1ce4e5b9ull;
    return h ^ (h >> 29);
}

static uint64_t key_hash(int32_t parent, uint32_t parent_gen, uint64_t salt, const int32_t *tokens, int n) {
    uint64_t h = mix(mix(mix(0x2545f4914f6cdd1dull, (uint64_t)(uint32_t)parent), parent_gen), salt);
    for (int i = 0; i < n; i++) h = mix(h, (uint64_t)(uint32_t)tokens[i]);
    return h;
}

cinfer_status cf_block_pool_create(int n_blocks, int block_size, cf_block_pool **out, cinfer_error *err) {
    *out = NULL;
    if (n_blocks < 1 || n_blocks > (1 << 28) || block_size < 1 || block_size > 4096)
        return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "a KV block pool of %d blocks of %d tokens is out of range "
                       "(1 to 2^28 blocks of 1 to 4096 tokens)", n_blocks, block_size);
    cf_block_pool *p = calloc(1, sizeof *p);
    uint32_t n_buckets = 16;
    while (n_buckets < 2u * (uint32_t)n_blocks) n_buckets *= 2;
    if (p) {
        p->b = calloc((size_t)n_blocks, sizeof *p->b);
        p->tokens = malloc((size_t)n_blocks * (size_t)block_size * sizeof *p->tokens);
        p->bucket = malloc(n_buckets * sizeof *p->bucket);
    }
    if (!p || !p->b || !p->tokens || !p->bucket) {
        cf_block_pool_free(p);
        return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory for the bookkeeping of %d KV blocks", n_blocks);
    }
    p->n_blocks = n_blocks;
    p->block_size = block_size;
    p->bucket_mask = n_buckets - 1;
    memset(p->bucket, 0xff, n_buckets * sizeof *p->bucket);
    for (int32_t i = 0; i < n_blocks; i++) {
        p->b[i].state = FREE;
        p->b[i].next = i + 1 < n_blocks ? i + 1 : -1;
    }
    p->free_head = 0;
    p->n_free = n_blocks;
    p->lru_head = p->lru_tail = -1;
    *out = p;
    return CINFER_OK;
}

void cf_block_pool_free(cf_block_pool *p) {
    if (!p) return;
    free(p->b);
    free(p->tokens);
    free(p->bucket);
    free(p);
}

int cf_block_pool_size(const cf_block_pool *p) { return p->n_blocks; }
int cf_block_pool_block_size(const cf_block_pool *p) { return p->block_size; }
int cf_block_pool_available(const cf_block_pool *p) { return p->n_free + p->n_cached; }
int cf_block_pool_cached(const cf_block_pool *p) { return p->n_cached; }
int cf_block_refs(const cf_block_pool *p, int32_t b) { return p->b[b].refs; }
uint32_t cf_block_gen(const cf_block_pool *p, int32_t b) { return p->b[b].gen; }
int cf_block_is_published(const cf_block_pool *p, int32_t b) { return p->b[b].published; }

static void lru_remove(cf_block_pool *p, int32_t i) {
    block *B = &p->b[i];
    if (B->prev >= 0) p->b[B->prev].next = B->next; else p->lru_head = B->next;
    if (B->next >= 0) p->b[B->next].prev = B->prev; else p->lru_tail = B->prev;
    p->n_cached--;
}

static void lru_push(cf_block_pool *p, int32_t i) {
    block *B = &p->b[i];
    B->state = CACHED;
    B->prev = p->lru_tail;
    B->next = -1;
    if (p->lru_tail >= 0) p->b[p->lru_tail].next = i; else p->lru_head = i;
    p->lru_tail = i;
    p->n_cached++;
}

static void free_push(cf_block_pool *p, int32_t i) {
    p->b[i].state = FREE;
    p->b[i].next = p->free_head;
    p->free_head = i;
    p->n_free++;
}

void cf_block_unpublish(cf_block_pool *p, int32_t i) {
    block *B = &p->b[i];
    if (!B->published) return;
    int32_t *link = &p->bucket[B->hash & p->bucket_mask];
    while (*link != i) link = &p->b[*link].hnext;
    *link = B->hnext;
    B->published = 0;
    B->gen++;   /* children published under the old contents no longer match */
    if (B->state == CACHED) {
        lru_remove(p, i);
        free_push(p, i);
    }
}

cinfer_status cf_block_alloc(cf_block_pool *p, int32_t *out, cinfer_error *err) {
    int32_t i = p->free_head;
    if (i >= 0) {
        p->free_head = p->b[i].next;
        p->n_free--;
    } else if (p->lru_head >= 0) {
        i = p->lru_head;
        lru_remove(p, i);
        p->b[i].state = USED;   /* so that unpublish leaves it off the free list */
        cf_block_unpublish(p, i);
    } else {
        return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "all %d KV blocks (%d tokens each) are in use", p->n_blocks,
                       p->block_size);
    }
    block *B = &p->b[i];
    B->state = USED;
    B->refs = 1;
    B->gen++;
    B->prev = B->next = -1;
    *out = i;
    return CINFER_OK;
}

void cf_block_ref(cf_block_pool *p, int32_t i) {
    block *B = &p->b[i];
    if (B->state == CACHED) {
        lru_remove(p, i);
        B->state = USED;
    }
    B->refs++;
}

void cf_block_unref(cf_block_pool *p, int32_t i) {
    block *B = &p->b[i];
    if (--B->refs > 0) return;
    if (B->published) lru_push(p, i);
    else free_push(p, i);
}

static int32_t find(const cf_block_pool *p, uint64_t h, int32_t parent, uint32_t parent_gen, uint64_t salt,
                    const int32_t *tokens) {
    const size_t bytes = (size_t)p->block_size * sizeof *tokens;
    for (int32_t i = p->bucket[h & p->bucket_mask]; i >= 0; i = p->b[i].hnext) {
        const block *B = &p->b[i];
        if (B->hash == h && B->parent == parent && B->parent_gen == parent_gen && B->salt == salt &&
            !memcmp(p->tokens + (size_t)i * (size_t)p->block_size, tokens, bytes))
            return i;
    }
    return -1;
}

static int32_t publish(cf_block_pool *p, int32_t i, int32_t parent, uint32_t parent_gen, const int32_t *tokens, uint64_t salt) {
    block *B = &p->b[i];
    if (B->published) return i;
    uint64_t h = key_hash(parent, parent_gen, salt, tokens, p->block_size);
    int32_t old = find(p, h, parent, parent_gen, salt, tokens);
    if (old >= 0) return old;
    B->published = 1;
    B->parent = parent;
    B->parent_gen = parent_gen;
    B->salt = salt;
    B->hash = h;
    memcpy(p->tokens + (size_t)i * (size_t)p->block_size, tokens, (size_t)p->block_size * sizeof *tokens);
    uint32_t k = (uint32_t)(h & p->bucket_mask);
    B->hnext = p->bucket[k];
    p->bucket[k] = i;
    return i;
}

int32_t cf_block_publish(cf_block_pool *p, int32_t i, int32_t parent, const int32_t *tokens, uint64_t salt) {
    return publish(p, i, parent, parent >= 0 ? p->b[parent].gen : 0, tokens, salt);
}

int32_t cf_block_publish_keyed(cf_block_pool *p, int32_t i, int32_t key, uint32_t key_gen, const int32_t *tokens, uint64_t salt) {
    return publish(p, i, key, key_gen, tokens, salt);
}

int32_t cf_block_find_keyed(const cf_block_pool *p, int32_t key, uint32_t key_gen, const int32_t *tokens, uint64_t salt) {
    return find(p, key_hash(key, key_gen, salt, tokens, p->block_size), key, key_gen, salt, tokens);
}

int cf_block_match(cf_block_pool *p, const int32_t *tokens, int n, uint64_t salt, int32_t *blocks, int max_blocks) {
    int k = 0;
    int32_t parent = -1;
    for (; k < max_blocks && (int64_t)(k + 1) * p->block_size <= n; k++) {
        const int32_t *t = tokens + (size_t)k * (size_t)p->block_size;
        uint32_t parent_gen = parent >= 0 ? p->b[parent].gen : 0;
        int32_t i = find(p, key_hash(parent, parent_gen, salt, t, p->block_size), parent, parent_gen, salt, t);
        if (i < 0) break;
        cf_block_ref(p, i);
        blocks[k] = parent = i;
    }
    return k;
}

/* ---- block tables ---- */

static cinfer_status table_grow(cf_block_table *t, int n_blocks, cinfer_error *err) {
    if (n_blocks <= t->cap) return CINFER_OK;
    int cap = t->cap ? t->cap : 8;
    while (cap < n_blocks) cap *= 2;
    int32_t *nb = realloc(t->blocks, (size_t)cap * sizeof *nb);
    if (!nb) return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory for a block table of %d blocks", n_blocks);
    t->blocks = nb;
    t->cap = cap;
    return CINFER_OK;
}

cinfer_status cf_block_table_reserve(cf_block_pool *p, cf_block_table *t, int n, cf_block_copy *copies, int *n_copies,
                                     cinfer_error *err) {
    const int bs = p->block_size;
    if (n_copies) *n_copies = 0;
    if (n <= 0) return CINFER_OK;
    if ((int64_t)t->n_tokens + n > (int64_t)INT32_MAX - bs)
        return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "a sequence of %d + %d positions is too long", t->n_tokens, n);
    const int need = (t->n_tokens + n + bs - 1) / bs;
    /* the partly filled last block, if shared or published, is replaced by a copy */
    const int last = t->n_tokens % bs ? t->n_tokens / bs : -1;
    if (last >= 0 && t->blocks[last] < 0)
        return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "the KV block holding position %d was dropped; it cannot be written again",
                       t->n_tokens - 1);
    const int cow = last >= 0 && p->b[t->blocks[last]].refs > 1;
    const int fresh = need - t->n_blocks + cow;
    if (fresh > cf_block_pool_available(p))
        return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "%d more KV blocks are needed, %d are available", fresh,
                       cf_block_pool_available(p));
    if (cow && !copies)
        return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "writing into a shared KV block needs a copy, and no copy list was given");
    CF_TRY(table_grow(t, need, err));
    /* cannot fail from here: enough blocks are free or cached */
    if (last >= 0 && !cow) cf_block_unpublish(p, t->blocks[last]);
    if (cow) {
        int32_t nb;
        cf_block_alloc(p, &nb, NULL);
        copies[0] = (cf_block_copy){t->blocks[last], nb};
        *n_copies = 1;
        cf_block_unref(p, t->blocks[last]);
        t->blocks[last] = nb;
        if (t->n_published > last) t->n_published = last;
    }
    while (t->n_blocks < need) cf_block_alloc(p, &t->blocks[t->n_blocks++], NULL);
    return CINFER_OK;
}

/* Publishes t's newly filled blocks: block i under kt's block i (pool kp) when kt is given, else under t's block
 * i - 1. A block with the same contents in the index already replaces t's own. */
static void publish_filled(cf_block_pool *p, cf_block_table *t, const int32_t *tokens, uint64_t salt, const cf_block_pool *kp,
                           const cf_block_table *kt) {
    const int bs = p->block_size;
    while ((int64_t)(t->n_published + 1) * bs <= t->n_tokens) {
        const int i = t->n_published++;
        if (t->blocks[i] < 0) continue;
        const int32_t *tok = tokens + (size_t)i * (size_t)bs;
        int32_t kept;
        if (kt) {
            kept = cf_block_publish_keyed(p, t->blocks[i], kt->blocks[i], cf_block_gen(kp, kt->blocks[i]), tok, salt);
        } else {
            kept = cf_block_publish(p, t->blocks[i], i > 0 ? t->blocks[i - 1] : -1, tok, salt);
        }
        if (kept != t->blocks[i]) {  /* the same contents are cached already: share them */
            cf_block_ref(p, kept);
            cf_block_unref(p, t->blocks[i]);
            t->blocks[i] = kept;
        }
    }
}

void cf_block_table_commit(cf_block_pool *p, cf_block_table *t, const int32_t *tokens, int n, uint64_t salt) {
    t->n_tokens += n;
    publish_filled(p, t, tokens, salt, NULL, NULL);
}

void cf_block_table_commit_keyed(cf_block_pool *p, cf_block_table *t, const int32_t *tokens, int n, uint64_t salt,
                                 const cf_block_pool *kp, const cf_block_table *kt) {
    t->n_tokens += n;
    publish_filled(p, t, tokens, salt, kp, kt);
}

int cf_block_table_drop(cf_block_pool *p, cf_block_table *t, int below) {
    const int bs = p->block_size;
    if (below > t->n_tokens) below = t->n_tokens;
    const int end = below > 0 ? below / bs : 0;
    int released = 0;
    for (; t->first < end && t->first < t->n_blocks; t->first++) {
        int32_t *b = &t->blocks[t->first];
        if (*b < 0) continue;
        cf_block_unref(p, *b);
        *b = -1;
        released++;
    }
    return released;
}

void cf_block_table_truncate(cf_block_pool *p, cf_block_table *t, int n) {
    const int bs = p->block_size;
    if (n < 0) n = 0;
    if (n > t->n_tokens) return;
    const int keep = (n + bs - 1) / bs;
    while (t->n_blocks > keep) {
        const int32_t b = t->blocks[--t->n_blocks];
        if (b >= 0) cf_block_unref(p, b);
    }
    if (t->first > t->n_blocks) t->first = t->n_blocks;
    t->n_tokens = n;
    if (t->n_published > n / bs) t->n_published = n / bs;
}

cinfer_status cf_block_table_fork(cf_block_pool *p, const cf_block_table *src, cf_block_table *dst, cinfer_error *err) {
    CF_TRY(table_grow(dst, src->n_blocks, err));
    for (int i = 0; i < src->n_blocks; i++) {
        if (src->blocks[i] >= 0) cf_block_ref(p, src->blocks[i]);
        dst->blocks[i] = src->blocks[i];
    }
    dst->n_blocks = src->n_blocks;
    dst->first = src->first;
    dst->n_tokens = src->n_tokens;
    dst->n_published = src->n_published;
    return CINFER_OK;
}

cinfer_status cf_block_table_adopt_prefix(cf_block_pool *p, cf_block_table *t, const int32_t *tokens, int n, uint64_t salt,
                                          int *reused, cinfer_error *err) {
    *reused = 0;
    const int max_blocks = n > 0 ? (n - 1) / p->block_size : 0;
    if (max_blocks == 0) return CINFER_OK;
    CF_TRY(table_grow(t, max_blocks, err));
    int k = cf_block_match(p, tokens, n, salt, t->blocks, max_blocks);
    t->n_blocks = t->n_published = k;
    t->n_tokens = *reused = k * p->block_size;
    return CINFER_OK;
}

cinfer_status cf_block_table_adopt_keyed(cf_block_pool *p, cf_block_table *t, const int32_t *tokens, int max_blocks, int window,
                                         uint64_t salt, const cf_block_pool *kp, const cf_block_table *kt, int *adopted,
                                         cinfer_error *err) {
    const int bs = p->block_size;
    *adopted = 0;
    if (max_blocks > kt->n_blocks) max_blocks = kt->n_blocks;
    if (max_blocks <= 0) return CINFER_OK;
    CF_TRY(table_grow(t, max_blocks, err));
    /* blocks[i] = the keyed block of kt's block i, or -1; then the largest k whose needed run [lo, k) is whole */
    int run = 0, k = 0;
    int32_t *found = t->blocks;
    for (int i = 0; i < max_blocks; i++) {
        found[i] = cf_block_find_keyed(p, kt->blocks[i], cf_block_gen(kp, kt->blocks[i]), tokens + (size_t)i * (size_t)bs, salt);
        run = found[i] >= 0 ? run + 1 : 0;
        const int64_t from = (int64_t)(i + 1) * bs - window + 1;
        const int lo = from > 0 ? (int)(from / bs) : 0;
        if (run >= i + 1 - lo) k = i + 1;
    }
    const int64_t from = (int64_t)k * bs - window + 1;
    const int lo = from > 0 ? (int)(from / bs) : 0;
    for (int i = 0; i < k; i++) {
        if (i < lo) found[i] = -1;
        else cf_block_ref(p, found[i]);
    }
    t->n_blocks = t->n_published = k;
    t->first = lo;
    t->n_tokens = k * bs;
    *adopted = k;
    return CINFER_OK;
}

void cf_block_table_release(cf_block_pool *p, cf_block_table *t) {
    for (int i = t->n_blocks - 1; i >= 0; i--)
        if (t->blocks[i] >= 0) cf_block_unref(p, t->blocks[i]);
    free(t->blocks);
    memset(t, 0, sizeof *t);
}
