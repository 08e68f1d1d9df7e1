/* lease.c: read and write leases on block tables, singly and all or nothing. */
#include "kv/lease.h"
#include "base/status.h"

#include <stdlib.h>
#include <string.h>

cinfer_status cf_kv_lease_acquire(const cf_lease_request *rq, cf_kv_lease *out, cinfer_error *err) {
    memset(out, 0, sizeof *out);
    cf_lease_state *st = rq->state;
    const char *name = rq->name ? rq->name : "a sequence";
    if (st->writer)
        return cf_fail(err, CINFER_E_BUSY, "%s is being changed (a write lease is held); its KV state cannot be borrowed now", name);
    if (rq->mode == CF_LEASE_WRITE && st->readers)
        return cf_fail(err, CINFER_E_BUSY, "%s is being read (%d read lease%s held); it cannot be changed now", name, st->readers,
                       st->readers == 1 ? " is" : "s are");
    if (rq->mode == CF_LEASE_READ) {
        const cf_block_table *t = rq->table;
        if (t->n_blocks) {
            out->blocks = malloc((size_t)t->n_blocks * sizeof *out->blocks);
            if (!out->blocks) return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory for a view of %s's %d KV blocks", name, t->n_blocks);
            for (int i = 0; i < t->n_blocks; i++) {
                out->blocks[i] = t->blocks[i];
                if (t->blocks[i] >= 0) cf_block_ref(rq->pool, t->blocks[i]);
            }
        }
        out->n_blocks = t->n_blocks;
        out->n_tokens = t->n_tokens;
        st->readers++;
    } else {
        st->writer = 1;
    }
    out->pool = rq->pool;
    out->table = rq->table;
    out->state = st;
    out->mode = rq->mode;
    return CINFER_OK;
}

void cf_kv_lease_release(cf_kv_lease *l) {
    if (!l->state) return;
    if (l->mode == CF_LEASE_READ) {
        for (int i = l->n_blocks - 1; i >= 0; i--)
            if (l->blocks[i] >= 0) cf_block_unref(l->pool, l->blocks[i]);
        free(l->blocks);
        l->state->readers--;
    } else {
        l->state->writer = 0;
    }
    memset(l, 0, sizeof *l);
}

cinfer_status cf_kv_lease_acquire_all(const cf_lease_request *rq, int n, cf_kv_lease *out, cinfer_error *err) {
    for (int i = 0; i < n; i++) memset(&out[i], 0, sizeof out[i]);
    for (int i = 0; i < n; i++) {
        cinfer_status st = cf_kv_lease_acquire(&rq[i], &out[i], err);
        if (st != CINFER_OK) {
            for (int j = i - 1; j >= 0; j--) cf_kv_lease_release(&out[j]);
            return cf_wrap(err, st, "lease %d of %d (the %d acquired before it were released)", i + 1, n, i);
        }
    }
    return CINFER_OK;
}
