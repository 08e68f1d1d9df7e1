/* kv_split.h: how many blocks each pool of the paged KV memory (kv/kv_pool.h) gets out of a byte budget. The
 * budget is split in proportion to what a sequence needs of each: its whole context of the full pool, and of the
 * window pool what its window layers keep (window + rollback + one decode row), plus room once for the largest
 * step a single sequence can append. */
#ifndef CF_KV_SPLIT_H
#define CF_KV_SPLIT_H

#include <stdint.h>
#include "cinfer.h"

typedef struct cf_kv_split_in {
    int64_t kv_bytes;        /* the budget; 0 = room for max_seqs full contexts, within mem_cap */
    int64_t mem_cap;         /* bytes the default may take at most; 0 = no limit */
    int64_t full_bytes;      /* a full-pool block over its layers (0: no full layer, the pool only keeps token chains) */
    int64_t win_bytes;       /* a window-pool block over its layers; 0 = no window pool */
    int max_seqs, block_size;
    int ctx_blocks;          /* full-pool blocks of one full context */
    int win_blocks_decode;   /* window-pool blocks a sequence holds at most while decoding */
    int win_blocks_step;     /* ... after appending the largest step */
} cf_kv_split_in;

typedef struct cf_kv_split_out {
    int64_t n_full, n_win;
    int64_t bytes;           /* what they take */
} cf_kv_split_out;

/* Fails (CINFER_E_INVALID_ARGUMENT, saying what the least budget is) when the budget holds no full-pool block, or
 * not a single sequence's window blocks. */
cinfer_status cf_kv_split(const cf_kv_split_in *in, cf_kv_split_out *out, cinfer_error *err);

#endif
