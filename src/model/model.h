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
    void **host_bufs;         /* random (or randomly quantized) weights, owned */
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
    int decode_graphs;        /* decode steps are recorded and replayed (see cf_model_decode_step) */
    int device_sampling;      /* the engine may pick tokens on the device (tuning.device_sampling) */
    char dtype_summary[64];   /* e.g. "BF16" or "F32+BF16" */
    cf_dtype kv_dtype;        /* of the KV caches: the model's precision where the backend stores any (see finish_load) */
} cf_model;

typedef struct cf_model_params {
    cf_backend_params backend;
    int random_qbits;   /* cf_model_random: matrices quantized in memory to 4 or 8 bits, group 64, as cinfer
                           quantize would (0: bf16) */
} cf_model_params;

cf_model_params cf_model_default_params(void);

/* Each layer's KV cache shape and type (n_layers entries, malloc'd: the caller frees; NULL when out of memory). */
cf_kv_spec *cf_model_kv_specs(const cf_model *m);

/* Loads a Hugging Face model folder, MLX affine-quantized ones too (format/mlx_quant.h): a quantized matrix
 * goes to the backend through upload_qweight. Quantized MoE expert stacks are not supported yet. */
cinfer_status cf_model_load(const char *dir, const cf_model_params *p, cf_model **out, cinfer_error *err);
/* Builds a model with seeded random bf16 weights from a config.json (benchmarks). */
cinfer_status cf_model_random(const char *config_path, uint64_t seed, const cf_model_params *p, cf_model **out, cinfer_error *err);
void cf_model_free(cf_model *m);

/* One sequence's state. max_ctx 0 = the model's context. A forward pass takes at most the backend's
 * preferred number of positions (cf_backend.prefill_chunk: CPU 256, CUDA more; 256 when it names none),
 * and never more than max_ctx. */
typedef struct cf_seq cf_seq;
cinfer_status cf_seq_create(cf_model *m, int max_ctx, cf_seq **out, cinfer_error *err);
/* The positions per forward pass cf_seq_create asks for (before the cap at max_ctx). */
int cf_model_prefill_chunk(const cf_model *m);
/* The same with at most chunk (1..4096) positions per forward pass: sliding-window layers then keep
 * window + chunk cache slots, and a rollback (cf_seq_truncate) of up to chunk + 1 positions is always
 * possible. Activation scratch grows with chunk; the logits scratch stays at most 256 rows (all_rows
 * evaluations then run in passes of 256). */
cinfer_status cf_seq_create_chunked(cf_model *m, int max_ctx, int chunk, cf_seq **out, cinfer_error *err);
void cf_seq_free(cf_seq *s);
int cf_seq_len(const cf_seq *s);
int cf_seq_max_ctx(const cf_seq *s);
int cf_seq_chunk(const cf_seq *s);   /* positions per forward pass at most */
/* Drops the tokens after the first n (rollback). Fails without changing anything when a sliding-window
 * layer no longer holds what position n would need: going back chunk + 1 positions (257 on the CPU) from
 * the furthest position written always works, that is chunk positions from the end after a
 * cf_model_decode_run stopped with a step queued past the stop. Where it succeeds it is exact: the
 * tokens fed again give the logits of a fresh sequence. */
cinfer_status cf_seq_truncate(cf_seq *s, int n, cinfer_error *err);

/* Appends n tokens to the sequence and computes logits. logits: [n, vocab] if all_rows, else [vocab] of
 * the last token (NULL: none). Bad ids or a full context fail before anything changes. */
cinfer_status cf_model_eval(cf_model *m, cf_seq *s, const int32_t *ids, int n, float *logits, int all_rows, cinfer_error *err);

/* ---- decoding on the device: only token ids cross to the host ----
 * cf_model_decode_step appends one token and picks the next with the backend's argmax (temperature 0, or
 * one whose inverse overflows) or sample op (temperature, top-k, top-p, min-p: sample/sampler.h without
 * processors or log-probabilities; u in [0, 1) is the draw's uniform, e.g. cf_sampler_uniform), reading
 * back only the id. The forward pass takes its position from device memory (kv_store_pos, attention_pos,
 * when the backend has them), so the step's ops do not depend on the position: where the backend records
 * graphs (m->decode_graphs: graph ops, and no MoE, whose routing reads back mid-pass), the step is recorded
 * on the first call and replayed by later ones. A recording belongs to the sequence and to the sampling
 * arguments it was made with (a change of arguments records again); it is freed with the sequence. Without
 * graphs (CPU, MoE models, tuning.decode_graphs 0: CINFER_DECODE_GRAPHS=0) the step runs op by op, still picking
 * on the device.
 *
 * Exactness: the forward pass is cf_model_eval's, so on the CPU a greedy step gives the argmax (ties to
 * the lowest id) of the logits cf_model_eval would return, and a sampled step gives cf_sampler_sample_u's
 * token for the same u. cf_seq_truncate works as after cf_model_eval. */

/* The backend can pick a token with these arguments (op argmax for temperature 0, else op sample). */
int cf_model_can_pick_on_device(const cf_model *m, const cf_sample_args *sa);
/* The arguments are valid for cf_sampling_validate, u too when sampling, and the backend has the op. */
cinfer_status cf_model_check_pick(const cf_model *m, const cf_sample_args *sa, float u, cinfer_error *err);

/* Appends id at position cf_seq_len(s) and writes the token picked from its logits to *next. Bad sampling
 * arguments (the codes of cf_sampling_validate), u outside [0, 1) when sampling, a backend without the op,
 * a bad id or a full context fail before anything changes. */
cinfer_status cf_model_decode_step(cf_model *m, cf_seq *s, int32_t id, const cf_sample_args *sa, float u, int32_t *next,
                                   cinfer_error *err);

/* Up to n decode steps from id, as cf_model_decode_step n times, but one step ahead: step t + 1 is queued
 * (its input is step t's pick, copied on the device) before step t's token is read back, so the device
 * does not wait for the host between steps. on_token(ctx, token) gets each token in order (*n_done counts
 * them); a nonzero return stops the run there. The step queued past a stop runs too: it writes the cache
 * row past the sequence's end (the next step writes it again), which on sliding-window layers costs one
 * position of rollback (cf_seq_truncate), and leaves no logits to pick from. u: n
 * uniforms, one per step (NULL when greedy). Fails like cf_model_decode_step, before anything changes for
 * bad arguments or n tokens past the context; a failure mid-run leaves the tokens of *n_done appended.
 * Where the model does not record steps (CPU, MoE) or the backend lacks read_begin, it runs one step at a
 * time: there the ops run as they are enqueued, so a step queued ahead would only delay each token. */
cinfer_status cf_model_decode_run(cf_model *m, cf_seq *s, int32_t id, const cf_sample_args *sa, const float *u, int n,
                                  int (*on_token)(void *ctx, int32_t token), void *ctx, int *n_done, cinfer_error *err);

/* Picks, on the device, a token from the logits of the sequence's last token as the last cf_model_eval,
 * cf_model_decode_step or cf_model_decode_run left them there (cf_model_eval leaves them also when its
 * logits argument is NULL): the first token after a prefill. Changes nothing; fails with
 * CINFER_E_INVALID_ARGUMENT when there are none (a new sequence, after a truncation, a failed evaluation,
 * or a run stopped one step ahead). */
cinfer_status cf_model_pick_last(cf_model *m, cf_seq *s, const cf_sample_args *sa, float u, int32_t *next, cinfer_error *err);

#endif
