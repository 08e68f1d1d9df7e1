/* kv_cache.h: the key/value cache of one sequence. Each layer that owns a cache has K and V tensors of
 * `cap` slots; position p lives in slot p % cap. Full-attention layers get cap = max context; sliding-
 * window layers get cap = window + chunk (the largest batch of positions appended at once), so they
 * hold only what their window can still see, and a rollback of up to chunk + 1 positions from the furthest
 * position written stays exact (`floor`). KV-shared layers (spec.shared) allocate nothing and read another
 * layer's cache. */
#ifndef CF_KV_CACHE_H
#define CF_KV_CACHE_H

#include "cinfer.h"
#include "backend/backend.h"

typedef struct cf_kv_layer {
    cf_tensor k, v;     /* [cap, n_kv_heads*head_dim], [cap, n_kv_heads*v_head_dim]; data NULL if shared */
    int cap;
    int window;         /* 0 = full */
} cf_kv_layer;

typedef struct cf_kv_spec {
    int n_kv_heads, head_dim, v_head_dim, window;
    int shared;         /* reads another layer's cache: nothing allocated */
    cf_dtype dtype;     /* of its K and V tensors (cf_model.kv_dtype) */
} cf_kv_spec;

typedef struct cf_kv_cache {
    cf_backend *be;
    int n_layers;
    cf_kv_layer *layers;
    int max_ctx;
    int chunk;
    int n;              /* positions held */
    int floor;          /* lowest position a truncate may return to (window layers forget) */
} cf_kv_cache;

cinfer_status cf_kv_create(cf_backend *be, const cf_kv_spec *specs, int n_layers, int max_ctx, int chunk,
                           cf_kv_cache **out, cinfer_error *err);
void cf_kv_free(cf_kv_cache *kv);
/* Records that the slots of positions below end are about to be written, perhaps past n (a decode step
 * queued ahead): the floor rises to what they leave. Every write of the cache is announced so, before it
 * is enqueued. */
void cf_kv_written(cf_kv_cache *kv, int end);
/* Records that positions [n, n + count), announced with cf_kv_written, now hold the sequence's tokens. */
void cf_kv_advance(cf_kv_cache *kv, int count);
cinfer_status cf_kv_truncate(cf_kv_cache *kv, int n, cinfer_error *err);
int64_t cf_kv_bytes(const cf_kv_cache *kv);

#endif
