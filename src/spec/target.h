/* target.h: contract 4, the speculative target port: all a verifier (or a hidden-tap draft head) sees of one
 * target model, and nothing else.
 *
 *   descriptor        backend, graph ABI (architecture and the shapes a draft head or verifier relies on) and
 *                     state ABI (the paged KV layout); cf_target_check refuses a mismatch, naming the field,
 *                     before the first step
 *   eos               the target's end-of-sequence ids
 *   make_cache        a sequence (cf_rseq) in the target's paged KV memory
 *   bind_rollback     a transaction over caches: it records their lengths; commit(keep) keeps keep[i] of the
 *                     tokens appended since, abort drops them all. Both end the transaction; a bad keep aborts
 *                     and fails, so no path leaves a cache half-updated
 *   forward           appends ids to caches in one batched step and returns, for every row, the final hidden
 *                     state (before the output norm) and the outputs of the tap layers, concatenated in the
 *                     order asked (the residual stream after each whole decoder layer, what transformers'
 *                     output_hidden_states gives). Taps are per call: the runner's previous tap state is
 *                     restored on every path, errors included, and a failed call leaves the caches as before
 *   project_logits    the logits of hidden rows: output norm, projection, softcap (a step's very numbers)
 *
 * A target made over a cinfer_model owns its runner; one made over a runner borrows it (the runner outlives it). */
#ifndef CF_SPEC_TARGET_H
#define CF_SPEC_TARGET_H

#include <stdint.h>
#include "cinfer.h"
#include "model/runner.h"

typedef struct cf_target cf_target;
typedef struct cf_target_txn cf_target_txn;

typedef struct cf_target_descriptor {
    char backend[32];     /* "cpu", "cuda" */
    char graph_abi[256];  /* e.g. "LlamaForCausalLM hidden=64 layers=2 vocab=512 weights=F32 act=F32" */
    char state_abi[512];  /* e.g. "paged-kv block=16 dtype=F32 layers=2:2x16/16" (kv heads x head dim / value dim) */
} cf_target_descriptor;


/* Over a loaded model: the target owns a runner made with params (NULL: cf_runner_default_params). */
cinfer_status cf_target_create(cinfer_model *model, const cf_runner_params *params, cf_target **out, cinfer_error *err);
/* Over a runner it borrows; EOS ids from the model's config. */
cinfer_status cf_target_create_over_runner(cf_runner *r, cf_target **out, cinfer_error *err);
/* Every cache and transaction must be gone first. */
void cf_target_free(cf_target *t);

const cf_target_descriptor *cf_target_descriptor_of(const cf_target *t);
/* CINFER_E_INVALID_ARGUMENT naming the first field that differs from expected's, both values quoted. */
cinfer_status cf_target_check(const cf_target *t, const cf_target_descriptor *expected, cinfer_error *err);
const int32_t *cf_target_eos(const cf_target *t, int *n);
int cf_target_hidden_size(const cf_target *t);
int cf_target_vocab(const cf_target *t);
int cf_target_n_layers(const cf_target *t);
cf_runner *cf_target_runner(const cf_target *t);

/* An empty sequence in the target's KV memory; free it with cf_rseq_free. */
cinfer_status cf_target_make_cache(cf_target *t, cf_rseq **out, cinfer_error *err);

/* Records the lengths of caches[0, n) (distinct caches of this target). */
cinfer_status cf_target_bind_rollback(cf_target *t, cf_rseq *const *caches, int n, cf_target_txn **out, cinfer_error *err);
/* Keeps keep[i] of the tokens cache i gained since the bind (0 <= keep[i] <= what it gained) and ends the
 * transaction. A keep out of range aborts instead and fails. */
cinfer_status cf_target_txn_commit(cf_target_txn *x, const int *keep, cinfer_error *err);
/* Truncates every cache to its recorded length and ends the transaction (NULL: nothing). Fails only where a cache
 * cannot be truncated (borrowed, or already shorter than recorded); the others are still rolled back. */
cinfer_status cf_target_txn_abort(cf_target_txn *x, cinfer_error *err);

/* What a forward call returns, valid until the target's next forward, projection, or the runner's next step. */
typedef struct cf_target_out {
    int rows;             /* sum of n_ids: cache i's rows follow those of caches before it */
    int n_taps;
    const float *hidden;  /* [rows, hidden]: final hidden states, before the output norm */
    const float *taps;    /* [rows, n_taps * hidden]: tap layer j's output in columns j*hidden ..; NULL if no taps */
} cf_target_out;

/* Appends ids[i][0, n_ids[i]) to caches[i] for i < n in one step of the runner. tap_layers: n_taps distinct
 * decoder-layer indices in any order (NULL, 0: none). Bad taps, ids, lengths or a batch the runner cannot take
 * fail before anything changes. */
cinfer_status cf_target_forward(cf_target *t, cf_rseq *const *caches, const int32_t *const *ids, const int *n_ids, int n,
                                const int *tap_layers, int n_taps, cf_target_out *out, cinfer_error *err);

/* logits [n, vocab] of hidden rows [n, hidden] (host f32); valid as cf_target_out's arrays. */
cinfer_status cf_target_project_logits(cf_target *t, const float *hidden, int n, const float **logits, cinfer_error *err);

#endif
