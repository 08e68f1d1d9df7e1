/* seq.h: the inside of a cf_seq, shared by model.c (which owns it) and forward.c (which runs it). */
#ifndef CF_MODEL_SEQ_H
#define CF_MODEL_SEQ_H

#include "model/model.h"
#include "model/forward.h"

#define CF_CHUNK 256        /* positions per forward pass by default (a backend's prefill_chunk overrides it) */
#define CF_MAX_CHUNK 4096   /* positions per forward pass at most */
#define CF_LOGIT_ROWS 256   /* rows of the logits scratch at most: all_rows evaluations go in passes of this many */

struct cf_seq {
    cf_model *m;
    cf_kv_cache *kv;
    int max_ctx;
    int chunk;                /* positions per forward pass at most (<= CF_MAX_CHUNK, <= max_ctx) */
    int last_row;             /* row of logits holding the last evaluated token's logits; -1: none */
    int32_t *pos_host;        /* [chunk]: the positions written to sc.pos */
    cf_scratch sc;            /* for up to chunk rows (logits: min(chunk, CF_LOGIT_ROWS)) */
    /* the device decode step (cf_model_decode_step, cf_model_decode_run) */
    cf_tensor u, next;        /* F32 [1, 1]: the draw's uniform; I32 [1, 1]: the token picked */
    cf_graph *graph;          /* the recorded step, or NULL */
    int id_staged;            /* a decode step ends by copying its pick into ids row 0: set while staged_id is there */
    int32_t staged_id;
    cf_sample_args graph_args; /* how it picks */
};

#endif
