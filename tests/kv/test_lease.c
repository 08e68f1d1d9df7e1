/* test_lease.c: read and write leases on block tables (kv/lease.h): conflicts fail with CINFER_E_BUSY and
 * change nothing, a read lease keeps its blocks while the owner truncates, and acquiring several is all or
 * nothing (the partial failure releases what it took and names the lease that failed). */
#include "kv/lease.h"
#include "base/status.h"

#include <stdio.h>
#include <string.h>

#include "../check.h"

static void fill(cf_block_pool *p, cf_block_table *t, int n, int32_t base) {
    int32_t tok[64];
    for (int i = 0; i < n; i++) tok[i] = base + i;
    cinfer_error err = {0};
    CHECK(cf_block_table_reserve(p, t, n, NULL, NULL, &err) == CINFER_OK, "reserve: %s", err.message);
    cf_block_table_commit(p, t, tok, n, 0);
}

int main(void) {
    cinfer_error err = {0};
    cf_block_pool *p = NULL;
    CHECK(cf_block_pool_create(16, 4, &p, &err) == CINFER_OK, "pool: %s", err.message);
    cf_block_table a = {0}, b = {0}, c = {0};
    cf_lease_state sa = {0}, sb = {0}, sc = {0};
    fill(p, &a, 10, 0);
    fill(p, &b, 8, 100);
    fill(p, &c, 5, 200);
    const int avail = cf_block_pool_available(p);

    /* readers share; a writer waits for them; a writer excludes everyone */
    cf_lease_request ra = {p, &a, &sa, CF_LEASE_READ, "sequence a"}, wa = {p, &a, &sa, CF_LEASE_WRITE, "sequence a"};
    cf_kv_lease r1, r2, w;
    CHECK(cf_kv_lease_acquire(&ra, &r1, &err) == CINFER_OK && cf_kv_lease_acquire(&ra, &r2, &err) == CINFER_OK, "two readers: %s",
          err.message);
    CHECK(r1.n_tokens == 10 && r1.n_blocks == 3 && !memcmp(r1.blocks, a.blocks, 3 * sizeof *a.blocks), "the view is the table");
    CHECK(cf_kv_lease_acquire(&wa, &w, &err) == CINFER_E_BUSY && !w.state && strstr(err.message, "sequence a"), "a writer among readers: %s",
          err.message);
    /* the owner truncates while r1 still reads: the blocks stay referenced, so none returns to the pool */
    cf_block_table_truncate(p, &a, 2);
    CHECK(cf_block_pool_available(p) == avail, "truncating under a read lease freed blocks (%d available, %d before)",
          cf_block_pool_available(p), avail);
    cf_kv_lease_release(&r1);
    cf_kv_lease_release(&r2);
    cf_kv_lease_release(&r2);   /* twice: nothing */
    CHECK(sa.readers == 0 && cf_block_pool_available(p) == avail + 2, "after release: %d readers, %d available (expected %d)", sa.readers,
          cf_block_pool_available(p), avail + 2);
    CHECK(cf_kv_lease_acquire(&wa, &w, &err) == CINFER_OK && sa.writer, "a writer alone: %s", err.message);
    CHECK(cf_kv_lease_acquire(&ra, &r1, &err) == CINFER_E_BUSY && sa.readers == 0, "a reader under a writer: %s", err.message);
    cf_kv_lease_release(&w);

    /* all or nothing: c has a writer, so the third of three fails and the first two are given back */
    cf_kv_lease hold, got[3];
    cf_lease_request wc = {p, &c, &sc, CF_LEASE_WRITE, "sequence c"};
    CHECK(cf_kv_lease_acquire(&wc, &hold, &err) == CINFER_OK, "hold c: %s", err.message);
    cf_lease_request all[3] = {{p, &a, &sa, CF_LEASE_WRITE, "sequence a"}, {p, &b, &sb, CF_LEASE_READ, "sequence b"},
                               {p, &c, &sc, CF_LEASE_READ, "sequence c"}};
    const int before = cf_block_pool_available(p);
    cinfer_status st = cf_kv_lease_acquire_all(all, 3, got, &err);
    CHECK(st == CINFER_E_BUSY, "all three with c held: %s", cinfer_status_name(st));
    CHECK(strstr(err.message, "lease 3 of 3") && strstr(err.message, "sequence c") && strstr(err.message, "released"), "message: %s",
          err.message);
    CHECK(!sa.writer && sb.readers == 0 && !got[0].state && !got[1].state && !got[2].state && cf_block_pool_available(p) == before,
          "the partial failure left leases behind");
    cf_kv_lease_release(&hold);
    CHECK(cf_kv_lease_acquire_all(all, 3, got, &err) == CINFER_OK && sa.writer && sb.readers == 1 && sc.readers == 1, "all three: %s",
          err.message);
    for (int i = 0; i < 3; i++) cf_kv_lease_release(&got[i]);
    CHECK(!sa.writer && !sb.readers && !sc.readers, "released");

    cf_block_table_release(p, &a);
    cf_block_table_release(p, &b);
    cf_block_table_release(p, &c);
    CHECK(cf_block_pool_available(p) == 16, "every block back: %d", cf_block_pool_available(p));
    cf_block_pool_free(p);
    printf("%d checks, %d failed\n", checks, failures);
    return failures ? 1 : 0;
}
