/* kv_pool.c: allocation of the paged KV tensors of both pools and block copies. */
#include "kv/kv_pool.h"
#include "base/status.h"

#include <stdint.h>
#include <stdlib.h>

static int in_pool(const uint8_t *in_window, int l, int window) { return !(in_window && in_window[l]) == !window; }

int64_t cf_kv_pool_block_bytes(const cf_kv_spec *specs, const uint8_t *in_window, int n_layers, int block_size, int window) {
    int64_t b = 0;
    for (int l = 0; l < n_layers; l++)
        if (!specs[l].shared && in_pool(in_window, l, window))
            b += ((int64_t)specs[l].n_kv_heads * specs[l].head_dim + (int64_t)specs[l].n_kv_heads * specs[l].v_head_dim) *
                 block_size * (int64_t)cf_dtype_size(specs[l].dtype);
    return b;
}

cinfer_status cf_kv_pool_create(cf_backend *be, const cf_kv_spec *specs, const uint8_t *in_window, int n_layers, int n_blocks,
                                int n_wblocks, int window, int block_size, cf_kv_pool **out, cinfer_error *err) {
    *out = NULL;
    int any_windowed = 0;
    for (int l = 0; l < n_layers; l++) any_windowed |= !specs[l].shared && in_pool(in_window, l, 1);
    if (n_layers < 1 || n_blocks < 1 || block_size < 1 || (int64_t)(n_blocks + 1) * block_size > INT32_MAX ||
        (any_windowed && (n_wblocks < 1 || window < 1 || (int64_t)(n_wblocks + 1) * block_size > INT32_MAX)))
        return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "a KV pool of %d layers, %d full and %d window blocks of %d slots (window %d)",
                       n_layers, n_blocks, any_windowed ? n_wblocks : 0, block_size, window);
    cf_kv_pool *p = calloc(1, sizeof *p);
    if (p) {
        p->k = calloc((size_t)n_layers, sizeof *p->k);
        p->v = calloc((size_t)n_layers, sizeof *p->v);
        p->windowed = calloc((size_t)n_layers, sizeof *p->windowed);
    }
    if (!p || !p->k || !p->v || !p->windowed) {
        if (p) { free(p->k); free(p->v); free(p->windowed); }
        free(p);
        return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory");
    }
    p->be = be;
    p->n_layers = n_layers;
    p->block_size = block_size;
    p->scratch_block = n_blocks;
    p->wscratch_block = any_windowed ? n_wblocks : 0;
    p->window = any_windowed ? window : 0;
    p->bytes_per_block = cf_kv_pool_block_bytes(specs, in_window, n_layers, block_size, 0);
    p->wbytes_per_block = cf_kv_pool_block_bytes(specs, in_window, n_layers, block_size, 1);
    cinfer_status st = cf_block_pool_create(n_blocks, block_size, &p->blocks, err);
    if (st == CINFER_OK && any_windowed) st = cf_block_pool_create(n_wblocks, block_size, &p->wblocks, err);
    for (int l = 0; l < n_layers && st == CINFER_OK; l++) {
        const cf_kv_spec *s = &specs[l];
        if (s->shared) continue;
        p->windowed[l] = (uint8_t)in_pool(in_window, l, 1);
        const int64_t slots = (int64_t)((p->windowed[l] ? n_wblocks : n_blocks) + 1) * block_size;
        const int64_t kc = (int64_t)s->n_kv_heads * s->head_dim, vc = (int64_t)s->n_kv_heads * s->v_head_dim;
        if (kc < 1 || vc < 1 || kc > INT32_MAX || vc > INT32_MAX)
            st = cf_fail(err, CINFER_E_INVALID_ARGUMENT, "a KV layer of %lld and %lld values a slot", (long long)kc, (long long)vc);
        if (st == CINFER_OK) st = be->ops->alloc(be, s->dtype, slots, kc, &p->k[l], err);
        if (st == CINFER_OK) st = be->ops->alloc(be, s->dtype, slots, vc, &p->v[l], err);
        if (st != CINFER_OK)
            st = cf_wrap(err, st, "allocating the KV pool (layer %d of %d, %lld slots of the %s pool)", l, n_layers, (long long)slots,
                         p->windowed[l] ? "window" : "full");
    }
    if (st != CINFER_OK) {
        cf_kv_pool_free(p);
        return st;
    }
    *out = p;
    return CINFER_OK;
}

void cf_kv_pool_free(cf_kv_pool *p) {
    if (!p) return;
    for (int l = 0; l < p->n_layers; l++) {
        if (p->k[l].data) p->be->ops->free_tensor(p->be, &p->k[l]);
        if (p->v[l].data) p->be->ops->free_tensor(p->be, &p->v[l]);
    }
    cf_block_pool_free(p->blocks);
    cf_block_pool_free(p->wblocks);
    free(p->k);
    free(p->v);
    free(p->windowed);
    free(p);
}

void cf_kv_pool_copy_block(cf_kv_pool *p, int windowed, int32_t src, int32_t dst) {
    const int B = p->block_size;
    for (int l = 0; l < p->n_layers; l++) {
        if (!p->k[l].data || !p->windowed[l] != !windowed) continue;
        p->be->ops->copy(p->be, cf_rows(p->k[l], (int64_t)dst * B, B), cf_rows(p->k[l], (int64_t)src * B, B));
        p->be->ops->copy(p->be, cf_rows(p->v[l], (int64_t)dst * B, B), cf_rows(p->v[l], (int64_t)src * B, B));
    }
}
