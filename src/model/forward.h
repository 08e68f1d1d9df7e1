/* forward.h: the decoder's forward pass (forward.c) and the scratch buffers it computes in. The pass runs
 * either one sequence over its contiguous cache (cf_seq) or a batch of rows of many sequences over the paged
 * KV pool (the runner): only the cache store and the attention differ. */
#ifndef CF_MODEL_FORWARD_H
#define CF_MODEL_FORWARD_H

#include "model/model.h"
#include "kv/kv_pool.h"

/* Activations for up to `rows` rows, and logits for up to `logit_rows`. */
typedef struct cf_scratch {
    int rows, logit_rows;
    cf_tensor x, h, q, k, v, att, o, gate, up, ids, pos, logits;
    cf_tensor ple, ple_proj, ple_gate;                      /* per-layer inputs [C, L*P] x2, [C, P] */
    cf_tensor e_x, e_gu, e_act, e_out, e_acc, e_logits;     /* MoE: [C, D], [C, 2I], [C, I], [C, D], [C, D], [C, E] */
    float *route;                                           /* MoE: host copy of e_logits */
    int *route_n;                                           /* MoE: per expert, how many rows are routed to it, */
    int *route_tok;                                         /*      which ([E, C]) */
    float *route_w;                                         /*      and their weights */
} cf_scratch;

cinfer_status cf_scratch_alloc(cf_model *m, int rows, int logit_rows, cf_scratch *s, cinfer_error *err);
void cf_scratch_free(cf_model *m, cf_scratch *s);

/* One forward pass over n rows whose token ids are in s->ids (and positions in s->pos). With kv: one sequence
 * at positions kv->n onwards, stored and attended in its contiguous cache (pos_ops: positions read from s->pos
 * on the device, see kv_store_pos). With pool: a batch (bv) over the paged cache; max_keys bounds the keys a
 * row sees (see cf_paged_attn_args); layers whose cache is in the window pool store and read through bv_win
 * (the same rows, with the window pool's slots and block tables). */
typedef struct cf_pass {
    cf_scratch *s;
    int n;
    cf_kv_cache *kv;
    int pos_ops;
    const cf_kv_pool *pool;
    const cf_batch_view *bv;
    const cf_batch_view *bv_win;   /* NULL when the pool has no window layers */
    int max_keys;
    /* taps (optional): after decoder layer taps[j] its output (the residual stream after the whole layer) is
     * copied to columns [j*dim, (j+1)*dim) of tap_out's rows [0, n) (F32, at least n_taps*dim columns) */
    const int *taps;
    int n_taps;
    cf_tensor tap_out;
} cf_pass;

/* Taps are layer indices in [0, n_layers), any order, none twice, at most n_layers of them. */
cinfer_status cf_check_taps(const cf_model *m, const int *taps, int n_taps, cinfer_error *err);

/* Runs the layers: s->x rows [0, n) end as the final hidden states (before the output norm). Fails on bad
 * taps (before anything runs) and where it must read back from the device mid-pass (MoE routing). */
cinfer_status cf_forward_layers(cf_model *m, const cf_pass *p, cinfer_error *err);
/* logits rows [0, xl.rows) of s = norm(xl) Wout [softcap]; xl: F32 rows of hidden states (s->x or s->o rows). */
void cf_forward_logits(cf_model *m, cf_scratch *s, cf_tensor xl);

#endif
