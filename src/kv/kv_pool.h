/* kv_pool.h: the paged KV memory of a runner. Every layer that owns a cache has a K and a V tensor on the
 * backend, in one of two pools of blocks of block_size token slots:
 *   - the full pool: layers that attend over the whole context (and every layer when there is no window pool);
 *   - the window pool: sliding-window layers whose readers all look back at most `window` positions. A sequence
 *     keeps only the blocks its future queries can still see there, so these layers hold window + a few steps
 *     a sequence instead of its whole context.
 * Block b of a pool is slots [b * block_size, (b + 1) * block_size) of each of that pool's tensors, and its
 * bookkeeping (references, the prefix index, block tables) is that pool's cf_block_pool (kv/block_pool.h); the
 * window pool's prefix index is keyed on the full pool's blocks. The last block of each pool is outside it: a
 * scratch block that padding rows and dropped table entries point at. When every layer is windowed the full
 * pool holds no tensors: its blocks only carry the token chains. KV-shared layers (spec.shared) allocate
 * nothing and read their source layer's tensors. */
#ifndef CF_KV_POOL_H
#define CF_KV_POOL_H

#include <stdint.h>
#include "cinfer.h"
#include "backend/backend.h"
#include "kv/block_pool.h"
#include "kv/kv_cache.h"

typedef struct cf_kv_pool {
    cf_backend *be;
    int n_layers;
    cf_tensor *k, *v;         /* per layer [(its pool's blocks + 1) * block_size, cols]; data NULL if shared */
    uint8_t *windowed;        /* per layer: its own cache is in the window pool */
    cf_block_pool *blocks;    /* the full pool */
    cf_block_pool *wblocks;   /* the window pool; NULL when no layer is windowed */
    int window;               /* positions the window pool's readers look back at most */
    int block_size;
    int scratch_block;        /* = the full pool's blocks */
    int wscratch_block;       /* = the window pool's blocks */
    int64_t bytes_per_block;  /* over the full pool's layers, K and V */
    int64_t wbytes_per_block; /* over the window pool's layers */
} cf_kv_pool;

/* in_window: per layer, whether its own cache goes to the window pool (NULL: none does). */
/* Bytes one block takes over the layers of one pool (window: 0 the full pool, 1 the window pool). */
int64_t cf_kv_pool_block_bytes(const cf_kv_spec *specs, const uint8_t *in_window, int n_layers, int block_size, int window);
/* n_wblocks: the window pool's blocks (unused when no layer is in it); window: the most positions its readers
 * look back. */
cinfer_status cf_kv_pool_create(cf_backend *be, const cf_kv_spec *specs, const uint8_t *in_window, int n_layers, int n_blocks,
                                int n_wblocks, int window, int block_size, cf_kv_pool **out, cinfer_error *err);
void cf_kv_pool_free(cf_kv_pool *p);
/* Enqueues the copy of block src's slots into block dst in every layer of one pool (copy-on-write). */
void cf_kv_pool_copy_block(cf_kv_pool *p, int windowed, int32_t src, int32_t dst);

#endif
