/* lease.h: state views (DESIGN.md contract 7). Code that reads a sequence's KV state (its block table) or
 * changes it borrows it through a lease and releases it on every path. A table has any number of read leases
 * or one write lease at a time; a request that conflicts fails with CINFER_E_BUSY and changes nothing.
 * A read lease is a snapshot: it copies the block ids and takes a reference on each, so the blocks it names
 * keep their contents (a truncate or a copy-on-write of the owner cannot hand them to someone else) until
 * it is released. A write lease views the live table. Acquiring several leases is all or nothing: on a
 * failure every lease already acquired is released and the error names the one that failed. */
#ifndef CF_KV_LEASE_H
#define CF_KV_LEASE_H

#include "cinfer.h"
#include "kv/block_pool.h"

/* Kept by the owner of a block table: who holds it now. */
typedef struct cf_lease_state {
    int readers;
    int writer;
} cf_lease_state;

typedef enum cf_lease_mode { CF_LEASE_READ, CF_LEASE_WRITE } cf_lease_mode;

typedef struct cf_kv_lease {
    cf_block_pool *pool;
    cf_block_table *table;    /* write: the live table */
    cf_lease_state *state;
    cf_lease_mode mode;
    int32_t *blocks;          /* read: the snapshot of the table's blocks, each referenced */
    int n_blocks, n_tokens;   /* read: the table's size when acquired */
} cf_kv_lease;

typedef struct cf_lease_request {
    cf_block_pool *pool;
    cf_block_table *table;
    cf_lease_state *state;
    cf_lease_mode mode;
    const char *name;         /* for messages: "sequence 3" */
} cf_lease_request;

cinfer_status cf_kv_lease_acquire(const cf_lease_request *rq, cf_kv_lease *out, cinfer_error *err);
/* Releases l (a zeroed or already released lease is left alone). Cannot fail. */
void cf_kv_lease_release(cf_kv_lease *l);
/* All n or none; out[i] is zeroed for every lease not held when it returns. */
cinfer_status cf_kv_lease_acquire_all(const cf_lease_request *rq, int n, cf_kv_lease *out, cinfer_error *err);

#endif
