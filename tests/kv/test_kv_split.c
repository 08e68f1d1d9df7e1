/* test_kv_split.c: the KV byte budget split between the full and the window pool (kv/kv_split.h): one pool as
 * before; the default (max_seqs contexts) and its memory cap; a budget split in proportion to what a sequence
 * needs of each pool, never leaving the window pool less than one sequence's step; the errors. */
#include "kv/kv_split.h"
#include "../check.h"

#include <string.h>

static cf_kv_split_in shape(int64_t kv_bytes, int64_t full, int64_t win) {
    return (cf_kv_split_in){.kv_bytes = kv_bytes, .mem_cap = 0, .full_bytes = full, .win_bytes = win, .max_seqs = 4, .block_size = 16,
                            .ctx_blocks = 100, .win_blocks_decode = 10, .win_blocks_step = 30};
}

int main(void) {
    cinfer_error err = {0};
    cf_kv_split_out o;
    /* one pool: bytes / block, or max_seqs contexts capped by the memory */
    cf_kv_split_in in = shape(1000 * 64, 64, 0);
    CHECK(cf_kv_split(&in, &o, &err) == CINFER_OK && o.n_full == 1000 && o.n_win == 0 && o.bytes == 64000, "one pool: %lld",
          (long long)o.n_full);
    in.kv_bytes = 0;
    CHECK(cf_kv_split(&in, &o, &err) == CINFER_OK && o.n_full == 400, "one pool by default: %lld", (long long)o.n_full);
    in.mem_cap = 64 * 250;
    CHECK(cf_kv_split(&in, &o, &err) == CINFER_OK && o.n_full == 250, "one pool capped: %lld", (long long)o.n_full);
    in = shape(63, 64, 0);
    CHECK(cf_kv_split(&in, &o, &err) == CINFER_E_INVALID_ARGUMENT && strstr(err.message, "no block"), "too small: %s", err.message);

    /* two pools by default: every sequence's context and decode window, and one step's room */
    in = shape(0, 64, 320);
    CHECK(cf_kv_split(&in, &o, &err) == CINFER_OK && o.n_full == 400 && o.n_win == 4 * 10 + 20 && o.bytes == 400 * 64 + 60 * 320,
          "default: %lld full, %lld window", (long long)o.n_full, (long long)o.n_win);
    /* a budget: the same proportions for the sequences it holds (2 here), the step's room once */
    const int64_t two = 2 * (100 * 64 + 10 * 320) + 20 * 320;
    in = shape(two, 64, 320);
    CHECK(cf_kv_split(&in, &o, &err) == CINFER_OK && o.n_full == 200 && o.n_win == 40, "budget of two: %lld full, %lld window",
          (long long)o.n_full, (long long)o.n_win);
    CHECK(o.bytes <= two, "the split takes %lld of %lld bytes", (long long)o.bytes, (long long)two);
    /* the default over its cap falls back to the cap as a budget */
    in = shape(0, 64, 320);
    in.mem_cap = two;
    CHECK(cf_kv_split(&in, &o, &err) == CINFER_OK && o.n_full == 200 && o.n_win == 40, "capped default: %lld, %lld",
          (long long)o.n_full, (long long)o.n_win);
    /* less than a sequence: the window pool keeps one sequence's step, the full pool gets the rest */
    in = shape(30 * 320 + 10 * 64, 64, 320);
    CHECK(cf_kv_split(&in, &o, &err) == CINFER_OK && o.n_win == 30 && o.n_full == 10, "one step's window: %lld full, %lld window",
          (long long)o.n_full, (long long)o.n_win);
    in.kv_bytes = 30 * 320 + 63;
    CHECK(cf_kv_split(&in, &o, &err) == CINFER_E_INVALID_ARGUMENT && strstr(err.message, "sliding-window"), "below a step: %s",
          err.message);
    /* no full layer: the full pool only keeps token chains (room for every context), the window pool gets the bytes */
    in = shape(100 * 320, 0, 320);
    CHECK(cf_kv_split(&in, &o, &err) == CINFER_OK && o.n_full == 400 && o.n_win == 100 && o.bytes == 100 * 320, "window only: %lld, %lld",
          (long long)o.n_full, (long long)o.n_win);
    in.kv_bytes = 29 * 320;
    CHECK(cf_kv_split(&in, &o, &err) == CINFER_E_INVALID_ARGUMENT, "window only, below a step");
    printf("%d checks, %d failed\n", checks, failures);
    return failures ? 1 : 0;
}
