/* kv_cache.c: allocation, bookkeeping and rollback of a sequence's KV cache. */
#include "kv/kv_cache.h"
#include "base/status.h"

#include <stdint.h>
#include <stdlib.h>

cinfer_status cf_kv_create(cf_backend *be, const cf_kv_spec *specs, int n_layers, int max_ctx, int chunk,
                           cf_kv_cache **out, cinfer_error *err) {
    *out = NULL;
    if (n_layers < 1 || max_ctx < 1 || chunk < 1)
        return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "a KV cache of %d layers, %d positions and passes of %d", n_layers, max_ctx, chunk);
    cf_kv_cache *kv = calloc(1, sizeof *kv);
    if (!kv) return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory");
    kv->be = be;
    kv->n_layers = n_layers;
    kv->max_ctx = max_ctx;
    kv->chunk = chunk;
    kv->layers = calloc((size_t)n_layers, sizeof *kv->layers);
    if (!kv->layers) { free(kv); return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory"); }
    for (int l = 0; l < n_layers; l++) {
        const cf_kv_spec *s = &specs[l];
        cf_kv_layer *L = &kv->layers[l];
        L->window = s->window;
        L->cap = s->window > 0 && (int64_t)s->window + chunk < max_ctx ? s->window + chunk : max_ctx;
        if (s->shared) continue;
        const int cap = L->cap;
        const int64_t kcols = (int64_t)s->n_kv_heads * s->head_dim, vcols = (int64_t)s->n_kv_heads * s->v_head_dim;
        cinfer_status st = CINFER_OK;
        if (kcols < 1 || vcols < 1 || kcols > INT32_MAX || vcols > INT32_MAX || cap < 1)
            st = cf_fail(err, CINFER_E_INVALID_ARGUMENT, "a KV cache layer of %d slots of %lld and %lld values", cap, (long long)kcols,
                         (long long)vcols);
        else if ((kcols + vcols) * (int64_t)cf_dtype_size(s->dtype) > (int64_t)(SIZE_MAX / 2) / cap)
            st = cf_fail(err, CINFER_E_OUT_OF_MEMORY, "%d slots of %lld values do not fit in memory", cap, (long long)(kcols + vcols));
        if (st == CINFER_OK) st = be->ops->alloc(be, s->dtype, cap, kcols, &L->k, err);
        if (st == CINFER_OK) st = be->ops->alloc(be, s->dtype, cap, vcols, &L->v, err);
        if (st != CINFER_OK) {
            cf_kv_free(kv);
            return cf_wrap(err, st, "allocating the KV cache (layer %d of %d, %d slots)", l, n_layers, cap);
        }
    }
    *out = kv;
    return CINFER_OK;
}

void cf_kv_free(cf_kv_cache *kv) {
    if (!kv) return;
    for (int l = 0; l < kv->n_layers; l++) {
        if (kv->layers[l].k.data) kv->be->ops->free_tensor(kv->be, &kv->layers[l].k);
        if (kv->layers[l].v.data) kv->be->ops->free_tensor(kv->be, &kv->layers[l].v);
    }
    free(kv->layers);
    free(kv);
}

void cf_kv_written(cf_kv_cache *kv, int end) {
    /* A window layer of cap slots still holds positions >= end - cap; a query at position q needs
     * q - window + 1 and up, so truncating to q is exact while q - window + 1 >= end - cap. */
    for (int l = 0; l < kv->n_layers; l++) {
        const cf_kv_layer *L = &kv->layers[l];
        if (L->window > 0 && L->cap < kv->max_ctx) {
            int f = end - L->cap + L->window - 1;
            if (f > kv->floor) kv->floor = f;
        }
    }
}

void cf_kv_advance(cf_kv_cache *kv, int count) { kv->n += count; }

cinfer_status cf_kv_truncate(cf_kv_cache *kv, int n, cinfer_error *err) {
    if (n < 0 || n > kv->n)
        return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "cannot truncate a sequence of %d tokens to %d", kv->n, n);
    if (n < kv->floor)
        return cf_fail(err, CINFER_E_INVALID_ARGUMENT,
                       "cannot roll back to %d tokens: sliding-window layers only keep enough to return to %d", n, kv->floor);
    kv->n = n;
    return CINFER_OK;
}

int64_t cf_kv_bytes(const cf_kv_cache *kv) {
    int64_t b = 0;
    for (int l = 0; l < kv->n_layers; l++) {
        const cf_kv_layer *L = &kv->layers[l];
        if (L->k.data) b += L->k.rows * L->k.cols * (int64_t)cf_dtype_size(L->k.dtype);
        if (L->v.data) b += L->v.rows * L->v.cols * (int64_t)cf_dtype_size(L->v.dtype);
    }
    return b;
}
