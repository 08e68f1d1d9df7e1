/* kv_pool.h: the paged KV memory of a runner. Every layer that owns a cache has a K and a V tensor of
 * (n_blocks + 1) * block_size slots on the backend; block b is slots [b * block_size, (b + 1) * block_size)
 * of each of them, and its bookkeeping (references, the prefix index, block tables) is the block pool's
 * (kv/block_pool.h). The last block is outside the pool: a scratch block that padding rows write and read.
 * KV-shared layers (spec.shared) allocate nothing and read their source layer's tensors. */
#ifndef CF_KV_POOL_H
#define CF_KV_POOL_H

#include "cinfer.h"
#include "backend/backend.h"
#include "kv/block_pool.h"
#include "kv/kv_cache.h"

typedef struct cf_kv_pool {
    cf_backend *be;
    int n_layers;
    cf_tensor *k, *v;         /* per layer [(n_blocks + 1) * block_size, cols]; data NULL if shared */
    cf_block_pool *blocks;
    int block_size;
    int scratch_block;        /* = n_blocks */
    int64_t bytes_per_block;  /* over all layers, K and V */
} cf_kv_pool;

/* Bytes one block takes over all layers with the backend's activation dtype. */
int64_t cf_kv_pool_block_bytes(cf_backend *be, const cf_kv_spec *specs, int n_layers, int block_size);
cinfer_status cf_kv_pool_create(cf_backend *be, const cf_kv_spec *specs, int n_layers, int n_blocks, int block_size,
                                cf_kv_pool **out, cinfer_error *err);
void cf_kv_pool_free(cf_kv_pool *p);
/* Enqueues the copy of block src's slots into block dst in every layer (copy-on-write). */
void cf_kv_pool_copy_block(cf_kv_pool *p, int32_t src, int32_t dst);

#endif
