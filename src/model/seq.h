/* seq.h: the inside of a cf_seq, shared by model.c (which owns it) and forward.c (which runs it). */
#ifndef CF_MODEL_SEQ_H
#define CF_MODEL_SEQ_H

#include "model/model.h"

#define CF_CHUNK 256        /* positions per forward pass by default (a backend's prefill_chunk overrides it) */
#define CF_MAX_CHUNK 4096   /* positions per forward pass at most */
#define CF_LOGIT_ROWS 256   /* rows of the logits scratch at most: all_rows evaluations go in passes of this many */

struct cf_seq {
    cf_model *m;
    cf_kv_cache *kv;
    int max_ctx;
    int chunk;                /* positions per forward pass at most (<= CF_MAX_CHUNK, <= max_ctx) */
    int logit_rows;           /* rows of logits: min(chunk, CF_LOGIT_ROWS) */
    int last_row;             /* row of logits holding the last evaluated token's logits; -1: none */
    int32_t *pos_host;        /* [chunk]: the positions written to pos */
    /* scratch for up to chunk rows (logits: logit_rows) */
    cf_tensor x, h, q, k, v, att, o, gate, up, ids, pos, logits;
    /* the device decode step (cf_model_decode_step, cf_model_decode_run) */
    cf_tensor u, next;        /* F32 [1, 1]: the draw's uniform; I32 [1, 1]: the token picked */
    cf_graph *graph;          /* the recorded step, or NULL */
    int id_staged;            /* a decode step ends by copying its pick into ids row 0: set while staged_id is there */
    int32_t staged_id;
    cf_sample_args graph_args; /* how it picks */
    cf_tensor ple, ple_proj, ple_gate;                      /* per-layer inputs [C, L*P] x2, [C, P] */
    cf_tensor e_x, e_gu, e_act, e_out, e_acc, e_logits;     /* MoE: [C, D], [C, 2I], [C, I], [C, D], [C, D], [C, E] */
    float *route;                                           /* MoE: host copy of e_logits */
    int *route_n;                                           /* MoE: per expert, how many rows are routed to it, */
    int *route_tok;                                         /*      which ([E, C]) */
    float *route_w;                                         /*      and their weights */
};

/* Runs the decoder over the n tokens in s->ids at positions s->pos (s->kv->n onwards), writing their
 * keys and values into the cache and the logits of the last out_rows (<= s->logit_rows) tokens into
 * s->logits. pos_ops: the cache stores and attention take their positions from s->pos on the device
 * (kv_store_pos, attention_pos) instead of s->kv->n, so the ops enqueued do not depend on the position
 * (a recorded step replays anywhere). Fails only where it must read back from the device mid-pass (MoE
 * routing). */
cinfer_status cf_forward_chunk(cf_model *m, cf_seq *s, int n, int out_rows, int pos_ops, cinfer_error *err);

#endif
