/* runner.h: the model runner, one per model: it runs a batch of rows from many sequences in one forward
 * pass, so the weights are read once per step for all of them. The runner owns the scratch buffers (sized
 * by a token budget per step, not per sequence), the paged KV memory (kv/kv_pool.h) and the recorded decode
 * graphs (one per batch-size bucket). A sequence (cf_rseq) owns only its block table and its tokens.
 *
 * A step appends tokens to sequences: item i appends ids[0, n) to its sequence at positions len .. len+n-1
 * and asks for the logits of its last row, of all its rows, or for a token picked on the device from its
 * last row. A step reserves the KV blocks it needs for every item first, all or nothing: when the pool
 * cannot give them it fails with CINFER_E_OUT_OF_MEMORY and changes nothing (the scheduler then preempts a
 * sequence and tries again). Full blocks are published to the prefix cache as they fill, under the chain
 * of their tokens; a new sequence adopts the longest cached prefix of its prompt (cf_rseq_adopt_prefix).
 *
 * Sliding-window layers (whose readers all look back at most `window` positions) keep their K/V in a second pool
 * (kv/kv_pool.h) where a sequence holds only what its future queries can see: after each step, the blocks whose
 * positions all lie more than window - 1 + max(rollback, the step's tokens) positions behind its end go back to
 * that pool (those of the step itself when the next step begins), so a truncate (rollback) of up to `rollback`
 * positions, or to before its last step, stays exact; one further back fails, except to 0 (cf_rseq_floor). A
 * prefix is reused only as far as the window layers' blocks its next query needs are still cached. The KV
 * memory is split between the pools in proportion to what a sequence needs of each (kv/kv_split.h); a model
 * without such layers has one pool, as has a runner with single_pool set.
 *
 * A step holds a write lease (kv/lease.h) on each of its sequences, taken all or nothing before anything
 * else and released on every path.
 *
 * Exactness: a row's result depends only on its sequence's tokens, never on the other rows of the step
 * (on the CPU bit for bit; on the GPU the GEMM for a larger batch may sum in another order). */
#ifndef CF_MODEL_RUNNER_H
#define CF_MODEL_RUNNER_H

#include <stdint.h>
#include "cinfer.h"
#include "model/model.h"

typedef struct cf_runner_params {
    int max_seqs;          /* sequences in one step at most; 0 = 128 */
    int max_batch_tokens;  /* rows in one step at most (the token budget); 0 = the backend's prefill chunk */
    int max_ctx;           /* positions per sequence at most; 0 = the model's context */
    int64_t kv_bytes;      /* KV memory; 0 = room for max_seqs full contexts, within 90% of the device's free memory */
    int block_size;        /* token slots per KV block; 0 = 16 */
    int graphs;            /* record decode steps (one graph per batch-size bucket) where the backend can; 0 = never */
    int rollback;          /* window pool: positions a truncate can always go back; 0 = 32 */
    int single_pool;       /* 1: every layer in one pool (sliding-window layers keep every block) */
} cf_runner_params;

cf_runner_params cf_runner_default_params(void);

typedef struct cf_runner cf_runner;

cinfer_status cf_runner_create(cf_model *m, const cf_runner_params *p, cf_runner **out, cinfer_error *err);
/* Every sequence must be freed first. */
void cf_runner_free(cf_runner *r);

const cf_runner_params *cf_runner_params_of(const cf_runner *r);   /* with the defaults filled in */
cf_model *cf_runner_model(const cf_runner *r);
/* Seconds the steps so far spent from enqueuing their picks and reads to the end of the device's work (the host
 * waiting for the device, mostly). */
double cf_runner_wait_seconds(const cf_runner *r);
int cf_runner_blocks_total(const cf_runner *r);
int cf_runner_blocks_available(const cf_runner *r);   /* free + cached (unreferenced prefix blocks) */
int cf_runner_blocks_cached(const cf_runner *r);
int64_t cf_runner_block_bytes(const cf_runner *r);      /* a full-pool block over its layers */
/* The window pool (0 for each when there is none): its blocks, the positions its layers look back, bytes a block. */
int cf_runner_wblocks_total(const cf_runner *r);
int cf_runner_wblocks_available(const cf_runner *r);
int cf_runner_wblocks_cached(const cf_runner *r);
int cf_runner_window(const cf_runner *r);
int64_t cf_runner_wblock_bytes(const cf_runner *r);
/* Window-pool blocks a new sequence takes at most while n positions are appended to it in steps. */
int cf_runner_wblocks_for(const cf_runner *r, int n);

/* ---- sequences ---- */
typedef struct cf_rseq cf_rseq;

cinfer_status cf_rseq_create(cf_runner *r, cf_rseq **out, cinfer_error *err);
/* Releases the sequence's blocks: its published full blocks stay in the prefix cache. */
void cf_rseq_free(cf_rseq *s);
int cf_rseq_len(const cf_rseq *s);
const int32_t *cf_rseq_tokens(const cf_rseq *s);     /* [cf_rseq_len] */
/* Keeps the first n tokens (rollback); CINFER_E_BUSY while the sequence is leased; CINFER_E_INVALID_ARGUMENT for
 * 0 < n < cf_rseq_floor. Exact: feeding the dropped tokens again gives a fresh run's logits. */
cinfer_status cf_rseq_truncate(cf_rseq *s, int n, cinfer_error *err);
/* A new sequence sharing src's blocks (copy-on-write); reads src through a read lease (kv/lease.h). */
cinfer_status cf_rseq_fork(cf_rseq *src, cf_rseq **out, cinfer_error *err);
/* s empty: takes the longest cached prefix of ids[0, n), whole blocks only and leaving at least one token to
 * compute (its logits are needed); *reused = the tokens taken (they count in cf_rseq_len). */
cinfer_status cf_rseq_adopt_prefix(cf_rseq *s, const int32_t *ids, int n, int *reused, cinfer_error *err);
/* The least length above 0 a truncate can return to (0 when any can): the window pool freed what is below. */
int cf_rseq_floor(const cf_rseq *s);
/* The blocks appending n tokens in one step would take from the full pool now, and from the window pool (less
 * what the step's own drop gives back first). */
int cf_rseq_blocks_needed(const cf_rseq *s, int n);
int cf_rseq_wblocks_needed(const cf_rseq *s, int n);
/* Window-pool blocks appending n tokens in steps would take at most (a long input does not hold its whole length). */
int cf_rseq_wblocks_wanted(const cf_rseq *s, int n);
/* Blocks the sequence holds (shared ones included), in the full and the window pool. */
int cf_rseq_blocks_held(const cf_rseq *s);
int cf_rseq_wblocks_held(const cf_rseq *s);

/* ---- steps ---- */
typedef enum cf_logits_out { CF_LOGITS_NONE, CF_LOGITS_LAST, CF_LOGITS_ALL } cf_logits_out;

typedef struct cf_batch_item {
    cf_rseq *seq;
    const int32_t *ids;         /* n tokens, each in [0, vocab) */
    int n;                      /* >= 1 */
    cf_logits_out logits;       /* copied to the host as f32 (ALL with a pick: picked instead, see tokens) */
    const cf_sample_args *pick; /* non-NULL: pick a token on the device from the last row's logits; with logits
                                 * ALL (greedy only: a verification): from every row's, no logits copied back */
    float u;                    /* pick: the draw's uniform in [0, 1) (unused when greedy) */
    /* results */
    int32_t token;              /* pick: the (last row's) token; -1 when the logits were not finite */
    const int32_t *tokens;      /* pick with logits ALL: [n] every row's token (-1: not finite), valid until the runner's
                                 * next step; else NULL */
    const float *out;           /* logits: [1 or n, vocab], valid until the runner's next step (NULL when picked whole) */
} cf_batch_item;

/* Runs one forward pass over the items (at most max_seqs items, at most max_batch_tokens rows, no sequence twice,
 * logits rows (LAST: 1, ALL: n) at most max(max_seqs, 256) in all; no step in flight, else
 * CINFER_E_INVALID_ARGUMENT). Bad arguments, a sequence past max_ctx or too few free blocks (in either pool) fail
 * before anything changes; a device failure mid-step leaves the items' sequences as before the step too (the KV
 * rows past their length are not part of them). */
cinfer_status cf_runner_step(cf_runner *r, cf_batch_item *items, int n_items, cinfer_error *err);

/* ---- steps in flight ----
 * cf_runner_submit starts a step and cf_runner_collect finishes the oldest one submitted: cf_runner_step is the
 * two at once. A step whose items ask for no logits (and no taps), each picking one token on the device or nothing (a
 * piece of a prompt short of its end; token -1), at least one picking, is left in flight by submit: its picks are read
 * back, its items' results filled in and its rows committed by collect, so the host can prepare and submit the next
 * step while the device runs this one.
 *
 * A second step may be submitted while one is in flight (then no more until a collect): its follow-up, whose items
 * are sequences of the step in flight (all or some, in its order), each one row with ids NULL and a pick: its input
 * is the token the step in flight picks for that sequence, copied on the device (the rows go one position past those
 * in flight). A sequence the step in flight ends (an end token) is left out of the follow-up, or its row there is
 * simply not used. A sequence whose item in flight picks nothing takes the next piece of its prompt (ids given,
 * anywhere among the items). Sequences not in flight may join in the follow-up, anywhere among its items, as items of
 * any step (ids given) that ask for no logits and pick on the device or nothing (a new session's prompt, whole or its
 * first piece). Not on a runner with a window pool (CINFER_E_UNSUPPORTED).
 *
 * The items and their sequences stay the caller's and must stay alive and unchanged until collected; the sequences
 * are leased meanwhile (no truncate or fork; free one only after the collect of its last step in flight). Errors of
 * submit change nothing (the step in flight stays so); a device failure seen by collect leaves every sequence in
 * flight as before the steps in flight, which are all dropped. */
cinfer_status cf_runner_submit(cf_runner *r, cf_batch_item *items, int n_items, cinfer_error *err);
cinfer_status cf_runner_collect(cf_runner *r, cinfer_error *err);
/* Steps submitted and not yet collected: 0, 1 or 2. */
int cf_runner_in_flight(const cf_runner *r);
/* Whether a follow-up may be submitted now: one step is in flight, left there by submit, on a runner without a
 * window pool. */
int cf_runner_can_follow(const cf_runner *r);

/* ---- hidden states and taps (the speculative target port, spec/target.h) ---- */
#define CF_RUNNER_MAX_TAPS 256

/* With hidden set, every step also returns each row's final hidden state (before the output norm) and the
 * outputs of the n tapped decoder layers (model/forward.h), and never runs as a recorded decode graph. The
 * default state is off. */
typedef struct cf_runner_taps {
    int hidden;
    int n;
    int layers[CF_RUNNER_MAX_TAPS];
} cf_runner_taps;

cf_runner_taps cf_runner_get_taps(const cf_runner *r);
/* Checks t's layers and makes room for their outputs; on failure nothing changes. Room only grows, so setting
 * again a state this runner had before (the one cf_runner_get_taps gave) always succeeds. */
cinfer_status cf_runner_set_taps(cf_runner *r, const cf_runner_taps *t, cinfer_error *err);
/* After a successful step with hidden set: its rows in item order (item i's n rows after those of items before
 * it): hidden [rows, dim] and taps [rows, n * dim] (tapped layer j in columns j*dim ..), valid until the next
 * step. NULL (and *rows 0) when the last step had hidden off or failed. */
const float *cf_runner_hidden(const cf_runner *r, int *rows);
const float *cf_runner_tapped(const cf_runner *r);
/* The logits [n, vocab] of n hidden rows (host f32, as cf_runner_hidden gives them): output norm, projection and
 * softcap, the numbers a step's logits have. n in [1, min(max_batch_tokens, max(max_seqs, 256))]; *logits valid
 * until the next step or projection (it reuses the steps' logits buffer). */
cinfer_status cf_runner_project_logits(cf_runner *r, const float *hidden, int n, const float **logits, cinfer_error *err);

#endif
