/* block_pool.h: the bookkeeping of paged KV memory. A pool hands out fixed-size blocks (block_size token
 * slots each) by id and counts references to them; a sequence names its blocks in a block table. Full blocks
 * can be published to the prefix index under the chain of their tokens (the parent block's identity, the
 * block's own token ids and a caller's salt for anything else that changes the contents): a later sequence
 * with the same prefix takes references to them instead of computing them again. A published block that no
 * sequence references stays cached until the pool needs its memory, least recently used first.
 *
 * The pool owns no KV memory itself: block b stands for slots [b * block_size, (b + 1) * block_size) of
 * every cache tensor that the owner of the pool allocates. Copies that copy-on-write requires are returned
 * to the caller as (source, destination) pairs, to be done on the device before the write.
 *
 * Matches are exact: the index compares the token ids themselves and identifies the parent by block id and
 * allocation generation, so neither a hash collision nor a reused parent block can return wrong contents.
 *
 * A second pool can be keyed on the first (sliding-window layers, kv/kv_pool.h): its block i of a sequence is
 * published under the identity (id and generation) of block i of the same sequence's table in the first pool,
 * which names the whole token chain up to it; when that block is evicted or rewritten its generation moves on,
 * and the keyed block can no longer be found. Such a table may drop its oldest blocks (cf_block_table_drop):
 * their entries become -1. */
#ifndef CF_KV_BLOCK_POOL_H
#define CF_KV_BLOCK_POOL_H

#include <stdint.h>
#include "cinfer.h"

typedef struct cf_block_pool cf_block_pool;

cinfer_status cf_block_pool_create(int n_blocks, int block_size, cf_block_pool **out, cinfer_error *err);
void cf_block_pool_free(cf_block_pool *p);

int cf_block_pool_size(const cf_block_pool *p);        /* blocks in all */
int cf_block_pool_block_size(const cf_block_pool *p);  /* token slots per block */
int cf_block_pool_available(const cf_block_pool *p);   /* blocks an allocation can take: free + cached */
int cf_block_pool_cached(const cf_block_pool *p);      /* published blocks that nothing references */
int cf_block_refs(const cf_block_pool *p, int32_t b);
uint32_t cf_block_gen(const cf_block_pool *p, int32_t b);   /* the allocation generation (the keyed index's key) */

/* A block with one reference, taken from the free list or else by evicting the least recently used cached
 * block. CINFER_E_OUT_OF_MEMORY when every block is referenced. */
cinfer_status cf_block_alloc(cf_block_pool *p, int32_t *b, cinfer_error *err);
void cf_block_ref(cf_block_pool *p, int32_t b);
/* Drops a reference; at zero a published block becomes cached, any other block free. */
void cf_block_unref(cf_block_pool *p, int32_t b);

/* Publishes full block b, which holds tokens[0, block_size) after the chain ending in block parent (-1 for
 * the first block of a sequence). Returns the block that holds this content in the index: b, or an older
 * block with the same chain (b then stays unpublished; the caller may switch to the older one). */
int32_t cf_block_publish(cf_block_pool *p, int32_t b, int32_t parent, const int32_t *tokens, uint64_t salt);
/* Publishes full block b under another pool's block (key, key_gen) instead of a parent in this pool. Returns as
 * cf_block_publish. */
int32_t cf_block_publish_keyed(cf_block_pool *p, int32_t b, int32_t key, uint32_t key_gen, const int32_t *tokens, uint64_t salt);
/* The block published under (key, key_gen, tokens[0, block_size), salt), or -1; takes no reference. */
int32_t cf_block_find_keyed(const cf_block_pool *p, int32_t key, uint32_t key_gen, const int32_t *tokens, uint64_t salt);
/* Removes b from the index (its contents are about to change). */
void cf_block_unpublish(cf_block_pool *p, int32_t b);
int cf_block_is_published(const cf_block_pool *p, int32_t b);

/* The longest run of published blocks that holds tokens[0, n) block by block (whole blocks only), at most
 * max_blocks: takes a reference on each and writes their ids to blocks. Returns how many. */
int cf_block_match(cf_block_pool *p, const int32_t *tokens, int n, uint64_t salt, int32_t *blocks, int max_blocks);

/* ---- a sequence's block table ---- */
typedef struct cf_block_table {
    int32_t *blocks;   /* blocks[i] holds positions [i * block_size, (i + 1) * block_size); -1 once dropped */
    int n_blocks, cap;
    int first;         /* blocks[0, first) were dropped (cf_block_table_drop) */
    int n_tokens;      /* positions in use */
    int n_published;   /* blocks[0, n_published) are in the prefix index */
} cf_block_table;

typedef struct cf_block_copy {
    int32_t src, dst;
} cf_block_copy;

/* Makes positions [t->n_tokens, t->n_tokens + n) writable: allocates the blocks they need, and replaces a
 * block that is shared with another table or published by a private copy (written to copies, at most 1
 * since only the last block of a table can be partly filled; *n_copies counts them; copies may be NULL when
 * the caller knows there are none). All or nothing: on failure the table and the pool are as before.
 * Then the caller writes the positions and calls cf_block_table_commit. */
cinfer_status cf_block_table_reserve(cf_block_pool *p, cf_block_table *t, int n, cf_block_copy *copies, int *n_copies,
                                     cinfer_error *err);
/* Records n written positions and publishes every block they filled; tokens holds the table's tokens from
 * position 0 (at least n_tokens + n of them). */
void cf_block_table_commit(cf_block_pool *p, cf_block_table *t, const int32_t *tokens, int n, uint64_t salt);
/* The same for a table keyed on table kt of pool kp (which holds the same tokens and was committed first):
 * block i is published under kt's block i. */
void cf_block_table_commit_keyed(cf_block_pool *p, cf_block_table *t, const int32_t *tokens, int n, uint64_t salt,
                                 const cf_block_pool *kp, const cf_block_table *kt);
/* Releases every block whose positions all lie below `below` (a published one stays cached) and marks it
 * dropped. Returns how many were released. */
int cf_block_table_drop(cf_block_pool *p, cf_block_table *t, int below);
/* Keeps the first n positions: blocks past them are released (n = n_tokens gives back what a reserve took). A kept partial block stays as it is (and may
 * still be matched whole) until the next reserve copies it or takes it out of the index. */
void cf_block_table_truncate(cf_block_pool *p, cf_block_table *t, int n);
/* dst (empty) shares src's blocks. */
cinfer_status cf_block_table_fork(cf_block_pool *p, const cf_block_table *src, cf_block_table *dst, cinfer_error *err);
/* Starts empty table t with the longest published prefix of tokens[0, n), leaving at least one position to
 * compute (a prefill needs the logits of its last token); *reused gets the positions it holds. */
cinfer_status cf_block_table_adopt_prefix(cf_block_pool *p, cf_block_table *t, const int32_t *tokens, int n, uint64_t salt,
                                          int *reused, cinfer_error *err);
/* Starts empty table t keyed on kt (pool kp, the same tokens) with what a query after the first k blocks' positions
 * needs: for the largest k <= max_blocks such that the blocks published under kt's blocks [lo, k) are all in the
 * index, lo = the block of position k * block_size - window + 1 (0 if none), takes a reference on each of those;
 * blocks [0, lo) are dropped. *adopted = k (0: t stays empty). */
cinfer_status cf_block_table_adopt_keyed(cf_block_pool *p, cf_block_table *t, const int32_t *tokens, int max_blocks, int window,
                                         uint64_t salt, const cf_block_pool *kp, const cf_block_table *kt, int *adopted,
                                         cinfer_error *err);
/* Releases every block and frees the table's memory. */
void cf_block_table_release(cf_block_pool *p, cf_block_table *t);

#endif
