/* seq.h: the inside of a cf_seq, shared by model.c (which owns it) and forward.c (which runs it). */
#ifndef CF_MODEL_SEQ_H
#define CF_MODEL_SEQ_H

#include "model/model.h"

#define CF_CHUNK 256  /* positions evaluated per forward pass at most (the default) */

struct cf_seq {
    cf_model *m;
    cf_kv_cache *kv;
    int max_ctx;
    int chunk;                /* positions per forward pass at most (<= CF_CHUNK) */
    /* scratch for up to chunk rows */
    cf_tensor x, h, q, k, v, att, o, gate, up, ids, pos, logits;
    cf_tensor ple, ple_proj, ple_gate;                      /* per-layer inputs [C, L*P] x2, [C, P] */
    cf_tensor e_x, e_gu, e_act, e_out, e_acc, e_logits;     /* MoE: [C, D], [C, 2I], [C, I], [C, D], [C, D], [C, E] */
    float *route;                                           /* MoE: host copy of e_logits */
    int *route_n;                                           /* MoE: per expert, how many rows are routed to it, */
    int *route_tok;                                         /*      which ([E, C]) */
    float *route_w;                                         /*      and their weights */
};

/* Runs the decoder over the n tokens in s->ids at positions s->pos (s->kv->n onwards), writing their
 * keys and values into the cache and the logits of the last out_rows tokens into s->logits. Fails only
 * where it must read back from the device mid-pass (MoE routing). */
cinfer_status cf_forward_chunk(cf_model *m, cf_seq *s, int n, int out_rows, cinfer_error *err);

#endif
