/* model.h: a loaded model (hyper-parameters + weights bound on a backend) and the state of one
 * sequence (its KV cache and scratch), with the forward pass that advances it. */
#ifndef CF_MODEL_MODEL_H
#define CF_MODEL_MODEL_H

#include <stdint.h>
#include "cinfer.h"
#include "backend/backend.h"
#include "model/arch.h"
#include "kv/kv_cache.h"

/* One layer's weights; a tensor the layer does not have is zeroed (data NULL). */
typedef struct cf_layer_w {
    cf_tensor attn_norm, wq, wk, wv, wo, bq, bk, bv, q_norm, k_norm, post_attn_norm;
    cf_tensor ffn_norm, w_gate, w_up, w_down, post_ffn_norm;
    cf_tensor ple_gate, ple_proj, ple_norm;                 /* per-layer input: [P, D], [D, P], [D] */
    cf_tensor router, router_scale;                         /* MoE: [E, D], [D] */
    cf_tensor ffn_post_norm_1, ffn_pre_norm_2, ffn_post_norm_2;
    cf_tensor exp_gate_up, exp_down;                        /* [E * 2I, D] (gate rows, then up rows, per expert), [E * D, I] */
} cf_layer_w;

typedef struct cf_model {
    cf_hparams hp;
    cf_backend *be;           /* owned */
    struct cf_st_set *st;     /* mapped weights, owned (NULL for random weights) */
    void **host_bufs;         /* random weights, owned */
    int n_host_bufs;
    cf_tensor tok_embd, out_norm, output;
    cf_tensor ple_embd, ple_model_proj, ple_proj_norm;     /* per-layer inputs: [V, L*P], [L*P, D], [P] */
    cf_layer_w *lw;
    float embed_scale;        /* hp.embed_scale rounded to the embedding's dtype, as transformers applies it */
    float ple_scale;          /* sqrt(ple_dim) likewise, for the per-layer embedding table */
    float *layer_scalar;      /* per layer (1 where the model has none), owned */
    float *expert_scale;      /* MoE: per layer, per expert multipliers of the routing weights, owned */
    cf_tensor ones;           /* [1, max head_dim] of 1: the weight of a norm without one (owned, or NULL) */
    cf_tensor rope_freq[CF_MAX_ROPE_SETS];
    int64_t weight_bytes;     /* bytes of all weights as stored on the backend */
    int64_t decode_bytes;     /* weight bytes read per decoded token (embedding rows excluded) */
    char dtype_summary[64];   /* e.g. "BF16" or "F32+BF16" */
} cf_model;

typedef struct cf_model_params {
    cf_backend_params backend;
} cf_model_params;

cf_model_params cf_model_default_params(void);

/* Loads a Hugging Face model folder. */
cinfer_status cf_model_load(const char *dir, const cf_model_params *p, cf_model **out, cinfer_error *err);
/* Builds a model with seeded random bf16 weights from a config.json (benchmarks). */
cinfer_status cf_model_random(const char *config_path, uint64_t seed, const cf_model_params *p, cf_model **out, cinfer_error *err);
void cf_model_free(cf_model *m);

/* One sequence's state. max_ctx 0 = the model's context. */
typedef struct cf_seq cf_seq;
cinfer_status cf_seq_create(cf_model *m, int max_ctx, cf_seq **out, cinfer_error *err);
/* The same with at most chunk (1..256) positions per forward pass instead of 256: sliding-window layers
 * then keep window + chunk cache slots, and a rollback (cf_seq_truncate) of up to chunk + 1 positions is
 * always possible. */
cinfer_status cf_seq_create_chunked(cf_model *m, int max_ctx, int chunk, cf_seq **out, cinfer_error *err);
void cf_seq_free(cf_seq *s);
int cf_seq_len(const cf_seq *s);
int cf_seq_max_ctx(const cf_seq *s);
/* Drops the tokens after the first n (rollback). Fails without changing anything when a sliding-window
 * layer no longer holds what position n would need: going back chunk + 1 positions (257 by default) from
 * the furthest point reached always works. */
cinfer_status cf_seq_truncate(cf_seq *s, int n, cinfer_error *err);

/* Appends n tokens to the sequence and computes logits. logits: [n, vocab] if all_rows, else [vocab] of
 * the last token (NULL: none). Bad ids or a full context fail before anything changes. */
cinfer_status cf_model_eval(cf_model *m, cf_seq *s, const int32_t *ids, int n, float *logits, int all_rows, cinfer_error *err);

#endif
