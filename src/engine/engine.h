/* engine.h: the insides of the public handles (cinfer_model, cinfer_engine, cinfer_session) shared by
 * the engine's files: the validated copy of a request, the planner, the session's published output and
 * the scheduler's per-session state (its runner sequence, sampler, detokenizer, stop matcher). */
#ifndef CF_ENGINE_ENGINE_H
#define CF_ENGINE_ENGINE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include "cinfer.h"
#include "model/model.h"
#include "model/runner.h"
#include "sample/sampler.h"
#include "spec/draft.h"
#include "spec/target.h"

typedef struct cf_tokenizer cf_tokenizer;
typedef struct cf_chat_template cf_chat_template;
typedef struct cf_detok cf_detok;
typedef struct cf_stop cf_stop;

struct cinfer_model {
    cf_model *m;
    cf_tokenizer *tok;          /* NULL when the folder has no tokenizer.json */
    cf_chat_template *tmpl;     /* NULL when it has no chat template or a broken one */
    cinfer_error tmpl_err;      /* code != CINFER_OK: the folder's template failed to load; chat requests get this */
    int32_t *eos;               /* config/generation_config EOS ids and the tokenizer's, deduplicated */
    int n_eos;
    cinfer_engine *engine;      /* the one engine on this model, or NULL */
};

/* A public handle around an already built model (random weights for benchmarks: no tokenizer, no
 * template). Takes ownership of model, also on failure. */
cinfer_status cf_model_handle_wrap(cf_model *model, cinfer_model **out, cinfer_error *err);

/* A request as the engine keeps it: validated, every buffer owned. */
typedef struct cf_request {
    int32_t *prompt;
    int n_prompt;
    int max_tokens;
    cf_sampling_params sp;      /* sp.logit_bias points into bias */
    cf_logit_bias *bias;
    char **stop;
    int n_stop;
    int32_t *stop_ids;
    int n_stop_ids;
    int ignore_eos;
    int ids_only;
    int fit_context;            /* max_tokens may be lowered to what the engine's KV memory leaves */
    int keep_special;           /* the text keeps special tokens (a chat reply whose markup is made of them) */
    char draft[64];             /* "" = the engine's default */
    int draft_max;              /* 0 = adaptive */
} cf_request;

/* Checks and copies r. Nothing is allocated unless every field is valid. */
cinfer_status cf_request_build(const cinfer_model *m, const cinfer_request *r, cf_request *out, cinfer_error *err);
void cf_request_free(cf_request *q);

/* How a request runs; chosen once at open, never changed. */
typedef enum cf_mechanism { CF_MECH_CONTINUOUS, CF_MECH_SPECULATIVE } cf_mechanism;

typedef struct cf_plan {
    cf_mechanism mechanism;
    char id[48];                /* "text:continuous", "text:spec-ngram" */
    char source[32];            /* SPECULATIVE: the draft source's name */
    int output_limit;           /* tokens the request may generate */
} cf_plan;

/* Chooses the plan of a validated request without touching device state. sources: the names of the engine's
 * draft providers; default_draft: the source of a request naming none (NULL = plain). */
cinfer_status cf_plan_request(const cf_request *q, const char *const *sources, int n_sources, const char *default_draft,
                              cf_plan *out, cinfer_error *err);

/* Adds a draft provider under name (tests and benchmarks: the replay "oracle"), owned by the engine from then on
 * (freed on failure too). Call it before opening sessions. */
cinfer_status cf_engine_add_draft_provider(cinfer_engine *e, const char *name, cf_draft_provider *p, cinfer_error *err);
/* Tests: on = every speculating session drafts whenever its source proposes (the cost rule's threshold is 0, so it
 * never pauses), making the drafts independent of step timings. Call it before opening sessions. */
void cf_engine_spec_always(cinfer_engine *e, int on);
/* Tests: the guard pauses speculation for everyone for the next `steps` steps (as when steps with drafts measured
 * slower), independent of step timings. Call it before opening sessions. */
void cf_engine_spec_pause(cinfer_engine *e, int steps);

/* How a session's generation ended (the scheduler's). */
typedef struct cf_step_end {
    cinfer_outcome outcome;
    cinfer_finish finish;
    cinfer_error err;
} cf_step_end;

struct cinfer_session {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t id;
    cinfer_engine *engine;      /* valid until released */
    pthread_t sched_thread;

    /* fixed at open */
    cf_request req;
    cf_plan plan;
    cinfer_session_params ctl;
    double (*now)(void *);
    void *now_user;
    double t_open;

    _Atomic int state;          /* cinfer_session_state */
    _Atomic int cancel;         /* cinfer_cancel_reason; the first reason wins */

    /* the scheduler's: native resources and progress, touched by the engine thread only. Everything but rs
     * outlives a preemption: the sampler's history and seeded draws, the text held back, the tokens. */
    int prepared;               /* smp, detok, stop, logits and ids exist */
    cf_rseq *rs;                /* the sequence in the runner; NULL while waiting */
    cf_target_txn *txn;         /* a verify step's rollback over rs (contract 6): bound before the step, ended by verify */
    cf_sampler *smp;            /* the history and the seeded uniforms, on either path */
    int device_pick;            /* tokens are picked on the device by the runner, not from host logits */
    cf_sample_args pick_args;
    cf_detok *detok;            /* NULL without a tokenizer: the output has no text */
    cf_stop *stop;              /* NULL without stop strings */
    float *logits;              /* host picks: a copy of the step's row, processed in place by the sampler */
    int32_t *ids;               /* the prompt, then each committed token: what the sequence must hold */
    int n_ids;
    int cached;                 /* prompt tokens the first admission took from the prefix cache */
    int ending;                 /* generation ended while a step after it was in flight (lookahead): end holds how,
                                   and it settles when that step is collected */
    long queued_in;             /* the queued step (cinfer_engine's n_follow_ups) that last gave it a row */
    cf_step_end end;
    int n_preempted;
    int n_sampled;

    /* speculative decoding (plan SPECULATIVE), the scheduler's */
    cf_draft_provider *prov;    /* the plan's provider */
    cf_draft_source *src;       /* open while admitted; NULL otherwise or when speculation failed */
    int32_t draft[CF_DRAFT_MAX];
    int n_draft;                /* drafts proposed for this step */
    int spec_k;                 /* the adaptive draft length */
    int spec_off;               /* steps left without speculating (it did not pay) */
    int spec_backoff;           /* the next pause's length */
    int spec_probe;             /* the pause is over: the next verification probes with one draft */
    double acc_hit, acc_try;    /* exponential averages: drafts accepted, drafts verified up to the first miss */
    int32_t draft_tokens, accepted_tokens;
    double t_prep, t_prefilled, t_first, t_last;

    /* published output, under mu */
    int32_t *tokens;
    size_t n_tokens, cap_tokens;
    size_t *text_end;           /* text length after token i's event */
    cinfer_logprobs *lp;        /* per token when logprobs were asked for */
    char *text;
    size_t text_len, text_cap;
    cinfer_result result;       /* complete once state is TERMINAL */
    int released;               /* the engine will not touch the session again */
    int orphaned;               /* freed from the engine's thread: the engine frees it when done */

    /* PULL consumer side, under mu */
    size_t n_read;
    int end_read;
    double t_unread;            /* since when the oldest unread event has waited */
    char *ev_text;
    size_t ev_cap;
    cinfer_logprobs ev_lp;

    cinfer_session *next;       /* the engine's waiting list */
};

/* session.c: publishing, for the scheduler. */
cinfer_status cf_session_publish(cinfer_session *s, int32_t token, const cf_sample_result *sr, const char *text,
                                 size_t len, cinfer_error *err);
/* Appends the text released at the end (held-back text) to the output. */
cinfer_status cf_session_publish_tail(cinfer_session *s, const char *text, size_t len, cinfer_error *err);
/* Sets the outcome, marks the session terminal and wakes its waiters. */
void cf_session_finish(cinfer_session *s, cinfer_outcome o, cinfer_finish f, const cinfer_error *e);
/* The engine is done with s: END to a callback consumer, then released (or freed when orphaned). */
void cf_session_release(cinfer_session *s);
/* Records a cancel reason if none is recorded yet. */
void cf_session_request_cancel(cinfer_session *s, cinfer_cancel_reason r);
void cf_session_destroy(cinfer_session *s);

/* The engine's batch and KV memory, for tests: blocks in all, available (free or cached) and cached
 * (unreferenced prefix blocks), of which every one is available again once no session is admitted; the
 * most sessions one step ran, the steps and the preemptions so far. Read it while the engine is idle (after
 * its sessions ended). */
typedef struct cf_engine_stats {
    int blocks_total, blocks_available, blocks_cached;
    int block_size;             /* token positions per block */
    int64_t block_bytes;
    int peak_batch;
    long steps, preemptions;
    long lookahead_steps;       /* steps queued behind the one in flight (lookahead) */
    long lookahead_joins;       /* sessions that joined the batch in such a step */
} cf_engine_stats;
cf_engine_stats cf_engine_get_stats(const cinfer_engine *e);

#endif
