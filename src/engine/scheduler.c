/* scheduler.c: the engine: one per model, owning the scheduler thread, the model runner (model/runner.h:
 * the scratch, the paged KV memory and its prefix cache), the list of sessions waiting for their turn and
 * the batch of admitted ones, and the loop that runs the batch by continuous (iteration-level) batching.
 *
 * Each turn of the loop: settle what was cancelled; admit waiting sessions in arrival order while the batch
 * has room and the KV memory has blocks for their input (a session that does not fit yet waits, and nothing
 * behind it overtakes it); then one runner step: a decode row for every generating session, then prompt
 * chunks of the sessions being prefilled, oldest first, within the step's token budget (a long prompt takes
 * several steps beside the others' decode rows instead of stalling them). When the pool cannot hold the
 * step, the newest admitted session is preempted: its sequence is freed (its full blocks stay in the prefix
 * cache) and it waits again with its sampler, text state and tokens, to recompute prompt + tokens when
 * readmitted. A row's result depends only on its own sequence, so a session's output is the same alone, in
 * any batch, and across preemptions.
 *
 * Two ways to pick a token, both inside the same step: on the device (the runner's pick: only the id comes
 * back) when the request needs nothing but temperature, top-k, top-p and min-p and the backend has the op;
 * otherwise the step returns the row's logits and the host sampler runs its processors and
 * log-probabilities. Both draw with the sampler's seeded uniform (cf_sampler_uniform), so a seed repeats its
 * output, and on the CPU both paths give the same tokens. tuning.device_sampling 0 (CINFER_DEVICE_SAMPLING=0
 * when the model loads) keeps every request on the host path.
 *
 * Speculative decoding (plans text:spec-<source>) happens inside the same step: before it, the speculating
 * sessions' sources draft (cf_draft_many, batched per provider); a generating session's item is then its pending
 * token followed by its drafts, with the logits of every row, which verify() samples in order with the session's
 * host sampler and commits while the samples equal the drafts. The drafts are appended inside a transaction of
 * the target port (spec/target.h, bound before the step): verify() commits it keeping what was committed, a failed
 * step aborts it to the exact prior state. How many drafts, and whether at all, is the policy's ("speculative decoding: the policy" below). */
#include "engine/engine.h"
#include "base/clock.h"
#include "base/status.h"
#include "spec/draft_model.h"
#include "spec/ngram.h"
#include "text/detok.h"
#include "text/stop.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CF_ENGINE_PROVIDERS 8
/* the speculation policy (see "speculative decoding: the policy" below) */
#define CF_SPEC_START_K 4
#define CF_SPEC_MIN_PAUSE 16
#define CF_SPEC_MAX_PAUSE 256
#define CF_SPEC_DECAY 0.8       /* of the acceptance averages, per verification */
#define CF_COST_DECAY 0.98      /* of the step cost fit, per step */
#define CF_GUARD_DECAY 0.95     /* of the guard's throughput sums, per step */
#define CF_GUARD_MIN 12.0       /* decayed steps of each kind before the guard compares */
#define CF_GUARD_MARGIN 0.97     /* with drafts slower than this share of without: pause */
#define CF_GUARD_MIN_PAUSE 64
#define CF_GUARD_MAX_PAUSE 1024


struct cinfer_engine {
    cinfer_model *model;
    cinfer_engine_params p;
    cf_runner *runner;
    cf_target *target;          /* the verifier's port on the runner (contract 4): its transactions roll drafts back */
    int max_batch, budget;        /* sessions and rows per step */
    int block_size, blocks_total;
    int64_t block_bytes;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    cinfer_session *head, *tail;  /* waiting, by arrival (preempted sessions go back to their place) */
    int n_queued;                 /* waiting sessions never admitted (max_queued counts these) */
    int closing;
    uint64_t next_id;
    /* the engine thread's */
    cinfer_session **run;         /* [max_batch] admitted, by arrival */
    int n_run;
    cf_batch_item *items;         /* [max_batch] the step being built: a half of items_mem (the other holds the step in flight) */
    cinfer_session **item_s;      /* [max_batch] the session of each item: the same half of item_s_mem */
    cf_batch_item *items_mem;     /* [2 * max_batch] */
    cinfer_session **item_s_mem;
    int lookahead;                /* steps may be left in flight (cinfer_engine_params.lookahead) */
    cf_batch_item *fly;           /* the step in flight (submitted, not collected) and its sessions; fly_n = 0: none */
    cinfer_session **fly_s;
    int fly_n;
    cinfer_session **fresh;       /* [max_batch] admitted in this turn */
    int peak_batch;
    long n_steps, n_preemptions, n_follow_ups, n_joins;
    int max_ctx, logit_rows;      /* the runner's positions per sequence and logits rows per step */
    /* speculative decoding: the draft providers by name, the default source, the drafting scratch and the
     * step cost model (decode-only steps: time = fixed + per_row * rows, fitted with forgetting) */
    cf_draft_provider *prov[CF_ENGINE_PROVIDERS];
    char prov_name[CF_ENGINE_PROVIDERS][32];
    const char *prov_names[CF_ENGINE_PROVIDERS];
    int n_prov;
    char default_draft[32];
    cinfer_session **d_s;         /* [max_batch] */
    cf_draft_source **d_src;
    int *d_want, *d_got;
    int32_t **d_out;
    double cw, cx, cy, cxx, cxy;  /* the fit's weighted sums */
    double c_fixed, c_row;        /* its last well-conditioned solution; c_row < 0: none yet */
    long spec_steps;
    int spec_always;              /* tests: theta 0 (draft whenever a source proposes) */
    /* the guard: tokens and seconds of decode-only steps with drafts [1] and without [0], decayed sums */
    double g_tok[2], g_time[2], g_n[2];
    int g_off, g_backoff;         /* steps left without drafts for anyone; the next pause's length */
    int step_tokens;              /* tokens committed by the current step */
    /* published under mu at the end of each turn, for cinfer_engine_get_stats */
    int pub_running, pub_blocks_available, pub_blocks_cached, pub_wblocks_available;
    long pub_steps, pub_follow_ups, pub_joins, pub_preemptions;
    double turn_s, runner_s, pub_turn_s, pub_runner_s, pub_wait_s;   /* cinfer_engine_stats' *_seconds */
};

static double monotonic_now(void *user) {
    (void)user;
    return cf_monotonic_seconds();
}

static void elog(const cinfer_engine *e, const char *fmt, ...) CF_PRINTF(2, 3);
static void elog(const cinfer_engine *e, const char *fmt, ...) {
    if (!e->p.log) return;
    char line[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    e->p.log(line, e->p.log_user);
}

/* n bytes in a unit that shows them: "512 B", "12.0 KiB", "3.5 GiB". */
static const char *bytes_text(int64_t n, char *buf, size_t len) {
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)n;
    int u = 0;
    while (v >= 1024 && u < 4) {
        v /= 1024;
        u++;
    }
    if (u) snprintf(buf, len, "%.1f %s", v, unit[u]);
    else snprintf(buf, len, "%lld B", (long long)n);
    return buf;
}

cinfer_engine_params cinfer_engine_default_params(void) {
    return (cinfer_engine_params){.struct_size = sizeof(cinfer_engine_params)};
}

cf_engine_stats cf_engine_get_stats(const cinfer_engine *e) {
    return (cf_engine_stats){.blocks_total = cf_runner_blocks_total(e->runner),
                             .blocks_available = cf_runner_blocks_available(e->runner),
                             .blocks_cached = cf_runner_blocks_cached(e->runner),
                             .block_size = e->block_size,
                             .block_bytes = e->block_bytes,
                             .peak_batch = e->peak_batch,
                             .steps = e->n_steps,
                             .preemptions = e->n_preemptions,
                             .lookahead_steps = e->n_follow_ups,
                             .lookahead_joins = e->n_joins};
}

/* ---- a session's resources and tokens ---- */

static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Whether q's tokens can be picked on the device: no processors (penalties, logit bias), no
 * log-probabilities, and the backend has the op for its temperature. *sa: the arguments. */
static int device_pick_ok(const cf_model *m, const cf_request *q, cf_sample_args *sa) {
    const cf_sampling_params *p = &q->sp;
    *sa = (cf_sample_args){.temperature = p->temperature, .top_k = p->top_k, .top_p = p->top_p, .min_p = p->min_p};
    if (!m->device_sampling) return 0;
    if (p->repetition_penalty != 1.0f || p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f || p->n_logit_bias > 0 ||
        p->logprobs || p->top_logprobs > 0)
        return 0;
    return cf_model_can_pick_on_device(m, sa);
}

static int blocks_for(const cinfer_engine *e, int64_t positions) {
    return (int)((positions + e->block_size - 1) / e->block_size);
}

/* First admission (CREATED -> PREPARING): what the session keeps until it settles, preemptions included. */
static cinfer_status prepare(cinfer_engine *e, cinfer_session *s, cinfer_error *err) {
    cf_model *m = e->model->m;
    const cf_request *q = &s->req;
    s->prepared = 1;
    CF_TRY(cf_sampler_create(&q->sp, m->hp.vocab, &s->smp, err));
    CF_TRY(cf_sampler_accept_many(s->smp, q->prompt, (size_t)q->n_prompt, err));
    /* room for the drafts of a step past the committed tokens */
    const size_t n_ids = (size_t)q->n_prompt + (size_t)q->max_tokens + CF_DRAFT_MAX;
    s->ids = malloc(n_ids * sizeof *s->ids);
    if (!s->ids) return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory for %zu tokens", n_ids);
    memcpy(s->ids, q->prompt, (size_t)q->n_prompt * sizeof *s->ids);
    s->n_ids = q->n_prompt;
    if (!s->device_pick || s->prov) {
        s->logits = malloc((size_t)m->hp.vocab * sizeof *s->logits);
        if (!s->logits) return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory for the logits of %d tokens", m->hp.vocab);
    }
    if (e->model->tok && !q->ids_only) CF_TRY(cf_detok_create(cf_detok_tokenizer_decode, e->model->tok, !q->keep_special, &s->detok, err));
    if (q->n_stop) CF_TRY(cf_stop_create((const char *const *)q->stop, q->n_stop, NULL, 0, &s->stop, err));
    return CINFER_OK;
}

/* ---- speculative decoding: the session's draft source ---- */

/* Speculation failed for s (a source could not open, prefill, draft or commit): it goes on decoding plainly,
 * which gives the same tokens. */
static void spec_drop(cinfer_engine *e, cinfer_session *s, const char *what, const cinfer_error *err) {
    elog(e, "session %llu: speculative decoding stops (%s: %s); decoding goes on without drafts", (unsigned long long)s->id,
         what, err->message);
    cf_draft_close(s->src);
    s->src = NULL;
    s->prov = NULL;
    s->n_draft = 0;
}

/* Admission: a source for s, told the committed context (the prompt, or prompt + output after a preemption). */
static void spec_open(cinfer_engine *e, cinfer_session *s) {
    if (!s->prov) return;
    if (!s->spec_k) {
        s->spec_k = s->req.draft_max ? s->req.draft_max : CF_SPEC_START_K;
        s->spec_backoff = CF_SPEC_MIN_PAUSE;
        /* the prior: 3 of 4 drafts accepted, weighing as two verifications; it decays like the measurements */
        s->acc_hit = 1.5;
        s->acc_try = 2.0;
    }
    cinfer_error err = {0};
    if (!s->src && cf_draft_open(s->prov, &s->src, &err) != CINFER_OK) {
        s->src = NULL;
        spec_drop(e, s, "opening the source", &err);
        return;
    }
    if (s->src->ops->prefill(s->src, s->ids, s->n_ids, &err) != CINFER_OK) spec_drop(e, s, "prefill", &err);
}

/* After a step committed tokens to s (accepted drafts among them): the source learns the committed context. */
static void spec_commit(cinfer_engine *e, cinfer_session *s, int accepted) {
    if (!s->src) return;
    cinfer_error err = {0};
    if (s->src->ops->commit(s->src, accepted, s->ids, s->n_ids, &err) != CINFER_OK) spec_drop(e, s, "commit", &err);
}

/* Gives s a sequence holding the longest cached prefix of its tokens; the rest is computed by the steps. */
static cinfer_status admit(cinfer_engine *e, cinfer_session *s, cinfer_error *err) {
    if (!s->prepared) {
        s->t_prep = s->now(s->now_user);
        atomic_store(&s->state, CINFER_STATE_PREPARING);
        CF_TRY(prepare(e, s, err));
    }
    CF_TRY(cf_rseq_create(e->runner, &s->rs, err));
    int reused = 0;
    CF_TRY(cf_rseq_adopt_prefix(s->rs, s->ids, s->n_ids, &reused, err));
    if (!s->n_preempted) s->cached = reused;
    spec_open(e, s);
    return CINFER_OK;
}

/* A stop id, or an end-of-sequence id unless ignore_eos: generation ends and the token is not emitted. */
static int is_stop_id(const cinfer_engine *e, const cinfer_session *s, int32_t tok) {
    for (int i = 0; i < s->req.n_stop_ids; i++)
        if (s->req.stop_ids[i] == tok) return 1;
    if (s->req.ignore_eos) return 0;
    for (int i = 0; i < e->model->n_eos; i++)
        if (e->model->eos[i] == tok) return 1;
    return 0;
}

/* The text committed token tok adds to the output: detokenized, then held back while it may begin a
 * stop string. */
static cinfer_status text_of(cinfer_session *s, int32_t tok, cf_stop_result *r, cinfer_error *err) {
    const char *t = "";
    size_t n = 0;
    if (s->detok) CF_TRY(cf_detok_push(s->detok, tok, &t, &n, err));
    if (s->stop) return cf_stop_feed(s->stop, -1, t, n, r, err);
    *r = (cf_stop_result){.text = t, .len = n, .which = -1, .token = -1};
    return CINFER_OK;
}

/* Generation ended without a stop string: publishes what the detokenizer and the stop matcher held
 * back. *stopped is set when that text completes a stop string after all. */
static cinfer_status text_end(cinfer_session *s, int *stopped, cinfer_error *err) {
    const char *t = "";
    size_t n = 0;
    if (s->detok) CF_TRY(cf_detok_flush(s->detok, &t, &n, err));
    if (!s->stop) return cf_session_publish_tail(s, t, n, err);
    cf_stop_result r;
    CF_TRY(cf_stop_feed(s->stop, -1, t, n, &r, err));
    CF_TRY(cf_session_publish_tail(s, r.text, r.len, err));
    if (r.stopped) {
        *stopped = 1;
        return CINFER_OK;
    }
    CF_TRY(cf_stop_flush(s->stop, &r, err));
    return cf_session_publish_tail(s, r.text, r.len, err);
}

/* A pull consumer that has left tokens unread longer than its idle timeout: the session is cancelled. */
static int consumer_idle(cinfer_session *s) {
    if (s->ctl.output != CINFER_OUTPUT_PULL || s->ctl.idle_timeout <= 0) return 0;
    pthread_mutex_lock(&s->mu);
    int idle = s->n_read < s->n_tokens && s->now(s->now_user) - s->t_unread > s->ctl.idle_timeout;
    pthread_mutex_unlock(&s->mu);
    if (idle) cf_session_request_cancel(s, CINFER_CANCEL_CONSUMER_IDLE);
    return idle;
}

/* whether s is cancelled, by its caller or (now) its idle consumer */
static int cancelled(cinfer_session *s) { return atomic_load(&s->cancel) != CINFER_CANCEL_NONE || consumer_idle(s); }

/* Commits a picked token: stop ids, the sampler's history, the text, the output limit; a token that does
 * not end generation is the sequence's next input. Returns 1 when generation is over (*end says how). */
static int commit(cinfer_engine *e, cinfer_session *s, const cf_sample_result *sr, cf_step_end *end) {
    cinfer_error *err = &end->err;
    e->step_tokens++;
    double now = s->now(s->now_user);
    if (s->n_sampled++ == 0) s->t_first = now;
    s->t_last = now;
    end->outcome = CINFER_OUTCOME_COMPLETED;
    end->finish = CINFER_FINISH_STOP;
    if (is_stop_id(e, s, sr->token)) goto text_end;
    cf_stop_result r;
    if (cf_sampler_accept(s->smp, sr->token, err) != CINFER_OK || text_of(s, sr->token, &r, err) != CINFER_OK ||
        cf_session_publish(s, sr->token, sr, r.text, r.len, err) != CINFER_OK)
        goto failed;
    if (r.stopped) return 1;
    if ((int)s->n_tokens >= s->plan.output_limit) {
        end->finish = CINFER_FINISH_LENGTH;
        goto text_end;
    }
    s->ids[s->n_ids++] = sr->token;
    return 0;
text_end: {
        int stopped = 0;
        if (text_end(s, &stopped, err) != CINFER_OK) goto failed;
        if (stopped) end->finish = CINFER_FINISH_STOP;
        return 1;
    }
failed:
    end->outcome = CINFER_OUTCOME_FAILED;
    return 1;
}

/* Releases the native resources (the sequence's full blocks stay in the prefix cache), records usage and
 * the outcome, and lets go of s. */
static void settle(cinfer_engine *e, cinfer_session *s, cf_step_end *end) {
    atomic_store(&s->state, CINFER_STATE_SETTLING);
    cinfer_error ignored = {0};
    cf_target_txn_abort(s->txn, &ignored);
    s->txn = NULL;
    cf_draft_close(s->src);
    s->src = NULL;
    cf_rseq_free(s->rs);
    cf_sampler_free(s->smp);
    cf_detok_free(s->detok);
    cf_stop_free(s->stop);
    free(s->logits);
    free(s->ids);
    s->rs = NULL;
    s->smp = NULL;
    s->detok = NULL;
    s->stop = NULL;
    s->logits = NULL;
    s->ids = NULL;

    double now = s->now(s->now_user);
    cinfer_usage *u = &s->result.usage;
    u->prompt_tokens = s->req.n_prompt;
    u->cached_tokens = s->cached;
    if (s->t_prep > 0) u->queue_s = s->t_prep - s->t_open;
    if (s->n_sampled > 0) u->ttft_s = s->t_first - s->t_open;
    if (s->t_prefilled > s->t_prep) u->prefill_tps = (s->req.n_prompt - s->cached) / (s->t_prefilled - s->t_prep);
    if (s->n_sampled > 1 && s->t_last > s->t_first) u->decode_tps = (s->n_sampled - 1) / (s->t_last - s->t_first);
    u->total_s = now - s->t_open;
    u->draft_tokens = s->draft_tokens;
    u->accepted_tokens = s->accepted_tokens;
    s->result.seed = s->req.sp.seed;
    cf_session_finish(s, end->outcome, end->finish, &end->err);

    const cinfer_result *r = &s->result;
    if (r->outcome == CINFER_OUTCOME_FAILED)
        elog(e, "session %llu: failed after %zu tokens: %s", (unsigned long long)s->id, r->n_tokens, r->error.message);
    else
        elog(e, "session %llu: %s%s%s, %d prompt (%d cached) + %zu generated tokens, %.1f tokens/s, %d preemptions",
             (unsigned long long)s->id, cinfer_outcome_name(r->outcome), r->outcome == CINFER_OUTCOME_CANCELLED ? " by " : " with ",
             r->outcome == CINFER_OUTCOME_CANCELLED ? cinfer_cancel_reason_name(r->cancel_reason) : cinfer_finish_name(r->finish),
             u->prompt_tokens, u->cached_tokens, r->n_tokens, u->decode_tps, s->n_preempted);
    if (s->plan.mechanism == CF_MECH_SPECULATIVE)
        elog(e, "session %llu: %d tokens drafted, %d accepted (%.1f%%)", (unsigned long long)s->id, u->draft_tokens,
             u->accepted_tokens, u->draft_tokens ? 100.0 * u->accepted_tokens / u->draft_tokens : 0.0);
    cf_session_release(s);
}

/* ---- the batch ---- */

/* Inserts s into the waiting list in arrival order. Under e->mu. */
static void wait_in_order(cinfer_engine *e, cinfer_session *s) {
    cinfer_session **link = &e->head;
    while (*link && (*link)->id < s->id) link = &(*link)->next;
    s->next = *link;
    *link = s;
    if (!s->next) e->tail = s;
}

static void run_insert(cinfer_engine *e, cinfer_session *s) {
    int i = e->n_run++;
    while (i > 0 && e->run[i - 1]->id > s->id) {
        e->run[i] = e->run[i - 1];
        i--;
    }
    e->run[i] = s;
}

static void run_remove(cinfer_engine *e, const cinfer_session *s) {
    int i = 0;
    while (i < e->n_run && e->run[i] != s) i++;
    if (i == e->n_run) return;
    memmove(e->run + i, e->run + i + 1, (size_t)(e->n_run - i - 1) * sizeof *e->run);
    e->n_run--;
}

/* Blocks s may still take before its next token: the rest of its input and the token's row (the whole
 * input when it holds no sequence, as if nothing were cached). */
static int blocks_wanted(const cinfer_engine *e, const cinfer_session *s) {
    const int n = s->prepared ? s->n_ids : s->req.n_prompt;
    if (s->rs) return cf_rseq_blocks_needed(s->rs, n - cf_rseq_len(s->rs) + 1);
    return blocks_for(e, (int64_t)n + 1);
}

/* The same in the window pool of sliding-window layers (0 without one): what they hold at most on the way. */
static int wblocks_wanted(const cinfer_engine *e, const cinfer_session *s) {
    const int n = s->prepared ? s->n_ids : s->req.n_prompt;
    if (s->rs) return cf_rseq_wblocks_wanted(s->rs, n - cf_rseq_len(s->rs) + 1);
    return cf_runner_wblocks_for(e->runner, n + 1);
}

/* Frees the sequence of the newest admitted session and puts it back among the waiting ones; it keeps
 * everything else and recomputes its tokens when readmitted. */
static void preempt_newest(cinfer_engine *e, int need, int avail, int wneed, int wavail) {
    cinfer_session *s = e->run[e->n_run - 1];
    e->n_run--;
    const int held = cf_rseq_blocks_held(s->rs), wheld = cf_rseq_wblocks_held(s->rs);
    cf_rseq_free(s->rs);
    s->rs = NULL;
    cf_draft_close(s->src);   /* reopened and prefilled again at readmission */
    s->src = NULL;
    s->n_draft = 0;
    s->n_preempted++;
    e->n_preemptions++;
    pthread_mutex_lock(&e->mu);
    wait_in_order(e, s);
    pthread_mutex_unlock(&e->mu);
    if (wneed > wavail)
        elog(e, "session %llu: preempted after %zu tokens: the step needs %d KV blocks of the sliding-window layers and %d are "
                "available; its %d (and %d of the full layers) go back and it recomputes %d tokens when readmitted",
             (unsigned long long)s->id, s->n_tokens, wneed, wavail, wheld, held, s->n_ids);
    else
        elog(e, "session %llu: preempted after %zu tokens: the step needs %d KV blocks and %d are available; its %d blocks go "
                "back and it recomputes %d tokens when readmitted",
             (unsigned long long)s->id, s->n_tokens, need, avail, held, s->n_ids);
}

/* Item k of the step: n of s's tokens from position len, with the pick or logits of the last row when they
 * are the last of its input. */
static void add_item(cinfer_engine *e, int k, cinfer_session *s, int len, int n) {
    cf_batch_item *it = &e->items[k];
    *it = (cf_batch_item){.seq = s->rs, .ids = s->ids + len, .n = n, .logits = CF_LOGITS_NONE};
    if (len + n == s->n_ids) {
        if (s->device_pick) {
            it->pick = &s->pick_args;
            it->u = cf_sampler_uniform(s->smp);
        } else {
            it->logits = CF_LOGITS_LAST;
        }
    }
    e->item_s[k] = s;
}

/* Item k: s's pending token and its drafts d1..dk after it, with the logits of every row (verification), or every
 * row's token picked on the device where the session picks there and greedily (only ids come back). */
static void add_spec_item(cinfer_engine *e, int k, cinfer_session *s, int len) {
    memcpy(s->ids + s->n_ids, s->draft, (size_t)s->n_draft * sizeof *s->ids);
    e->items[k] = (cf_batch_item){.seq = s->rs, .ids = s->ids + len, .n = 1 + s->n_draft, .logits = CF_LOGITS_ALL};
    if (s->device_pick && cf_sampling_is_greedy(s->pick_args.temperature)) e->items[k].pick = &s->pick_args;
    e->item_s[k] = s;
}

/* Lays out the step: one decode row per generating session (with its drafts after it when it speculates and
 * drafts is set), then prompt chunks (or a preempted session's recomputation) oldest first within the token
 * budget. Returns the items. */
static int build_step(cinfer_engine *e, int drafts) {
    int n = 0, budget = e->budget;
    for (int i = 0; i < e->n_run; i++) {
        cinfer_session *s = e->run[i];
        const int len = cf_rseq_len(s->rs);
        if (s->n_ids - len != 1) continue;
        if (drafts && s->n_draft > 0) {
            add_spec_item(e, n++, s, len);
            budget -= 1 + s->n_draft;
        } else {
            add_item(e, n++, s, len, 1);
            budget--;
        }
    }
    for (int i = 0; i < e->n_run && budget > 0; i++) {
        cinfer_session *s = e->run[i];
        const int len = cf_rseq_len(s->rs), rest = s->n_ids - len;
        if (rest <= 1) continue;
        const int k = rest < budget ? rest : budget;
        add_item(e, n++, s, len, k);
        budget -= k;
    }
    return n;
}

/* ---- speculative decoding: the policy ----
 *
 * Cost. Decode-only steps (no prompt rows) are timed (drafting, the runner step and the sampling of its rows)
 * and fitted, with forgetting, as time = fixed + per_row * rows. A step of R decode rows yields R tokens in
 * fixed + per_row * R; j drafts more for one session cost per_row * j and yield the drafts accepted. The
 * j-th draft is accepted with probability alpha^j (alpha: the session's measured acceptance per draft, an
 * exponential average over its verifications), so it pays while
 *
 *     alpha^j  >  theta = per_row * R / (fixed + per_row * R)
 *
 * (the tokens it brings per unit of time beat the step's own rate). alpha starts from a prior of 3/4 that weighs as
 * two verifications and decays like them. theta is small when a step's time is
 * mostly fixed (reading the weights: few rows, memory-bound) and tends to 1 as the batch fills and every row
 * costs its share of compute, where only a session whose drafts are nearly always accepted still speculates:
 * under a full batch speculation stops by itself. Until the fit has two distinct row counts theta is 0 (the
 * drafts themselves give it the second one).
 *
 * Length. Each session drafts k = min(its adaptive length, draft_max, what max_tokens and the context leave)
 * drafts, fewer while the last one does not pay. The adaptive length starts at draft_max or 4, grows by half
 * (at least 1) when every draft was accepted and moves halfway down to accepted + 1 on a miss.
 *
 * Guard. The fit is linear and the real cost is not (a matmul tile more past 16 rows on the CPU, a step leaving
 * the recorded decode graph on CUDA), so the measured throughput of decode-only steps with drafts is compared with
 * that of steps without, and speculation pauses for everyone while it loses (guard_allows).
 *
 * Pause. A session whose first draft does not pay (alpha <= theta) pauses speculation for a number of steps
 * (16, doubling up to 256 while it keeps not paying, back to 16 once a probe is accepted), then probes with one
 * draft to measure alpha again (its averages keep their history). Sources that propose nothing (an n-gram without
 * a match) cost nothing. */

static double mono_now(void) {
    return monotonic_now(NULL);
}

/* A decode-only step of rows rows took t seconds. */
static void cost_record(cinfer_engine *e, int rows, double t) {
    const double l = CF_COST_DECAY, x = rows;
    e->cw = e->cw * l + 1;
    e->cx = e->cx * l + x;
    e->cy = e->cy * l + t;
    e->cxx = e->cxx * l + x * x;
    e->cxy = e->cxy * l + x * t;
    const double var = e->cw * e->cxx - e->cx * e->cx;
    if (e->cw < 3 || var <= 0.05 * e->cw * e->cw) return;   /* rows barely varied: keep the last solution */
    double b = (e->cw * e->cxy - e->cx * e->cy) / var;
    if (b < 0) b = 0;
    double a = (e->cy - b * e->cx) / e->cw;
    if (a < 0) a = 0;
    e->c_row = b;
    e->c_fixed = a;
}

/* theta of the policy for a step of rows decode rows. */
static double spec_theta(const cinfer_engine *e, int rows) {
    if (e->c_row < 0) return 0;
    const double var = e->c_row * rows, all = e->c_fixed + var;
    return all > 0 ? var / all : 0;
}

/* The guard: a decode-only step with (drafts = 1) or without drafts committed tokens tokens in t seconds. */
static void guard_record(cinfer_engine *e, int drafts, int tokens, double t) {
    const double l = CF_GUARD_DECAY;
    e->g_tok[drafts] = e->g_tok[drafts] * l + tokens;
    e->g_time[drafts] = e->g_time[drafts] * l + t;
    e->g_n[drafts] = e->g_n[drafts] * l + 1;
}

/* Whether anyone may draft this step: not while the guard pauses speculation. The guard compares the measured
 * throughput (tokens committed per second) of decode-only steps with drafts against those without; when the
 * steps with drafts are slower (the cost fit is linear, the real cost is not: a matmul tile more, a recorded
 * graph left for the general path) it pauses speculation for everyone (64 steps, doubling up to 1024 while it
 * keeps losing, back to 64 once it wins), forgets the measurements with drafts, and lets the next steps with
 * drafts measure again. */
static int guard_allows(cinfer_engine *e) {
    if (e->spec_always) return 1;
    if (e->g_off > 0) {
        e->g_off--;
        return 0;
    }
    if (e->g_n[0] < CF_GUARD_MIN || e->g_n[1] < CF_GUARD_MIN) return 1;
    const double with = e->g_tok[1] / e->g_time[1], without = e->g_tok[0] / e->g_time[0];
    if (!e->g_backoff) e->g_backoff = CF_GUARD_MIN_PAUSE;
    if (with >= CF_GUARD_MARGIN * without) {
        e->g_backoff = CF_GUARD_MIN_PAUSE;
        return 1;
    }
    e->g_off = e->g_backoff;
    e->g_backoff = e->g_backoff * 2 < CF_GUARD_MAX_PAUSE ? e->g_backoff * 2 : CF_GUARD_MAX_PAUSE;
    e->g_tok[1] = e->g_time[1] = e->g_n[1] = 0;
    elog(e, "speculation paused for %d steps: steps with drafts gave %.1f tokens/s, steps without %.1f", e->g_off, with, without);
    return 0;
}

/* A step without drafts for s while its speculation is paused: one step nearer the pause's end, after which it
 * probes. Returns whether it was paused. */
static int spec_pause_tick(cinfer_session *s) {
    if (s->spec_off <= 0) return 0;
    if (!--s->spec_off) s->spec_probe = 1;
    return 1;
}

/* The measured acceptance per draft (the averages start from an optimistic prior, spec_open). */
static double spec_alpha(const cinfer_session *s) {
    return s->acc_try > 0 ? s->acc_hit / s->acc_try : 0;
}

/* How many drafts s asks for this step (0: none), within *rows_left and *logits_left, which it reduces. */
static int spec_want(cinfer_engine *e, cinfer_session *s, double theta, int *rows_left, int *logits_left) {
    if (spec_pause_tick(s)) return 0;
    const int limit = s->req.draft_max ? s->req.draft_max : CF_DRAFT_MAX;
    int k = s->spec_k < limit ? s->spec_k : limit;
    const int out_left = s->plan.output_limit - (int)s->n_tokens - 1;  /* the step commits up to k + 1 */
    const int ctx_left = e->max_ctx - s->n_ids;                          /* positions n_ids - 1 .. n_ids - 1 + k */
    if (k > out_left) k = out_left;
    if (k > ctx_left) k = ctx_left;
    if (k > *rows_left) k = *rows_left;
    if (k > *logits_left) k = *logits_left;
    if (k <= 0) return 0;
    const double alpha = spec_alpha(s);
    if (s->spec_probe) {
        k = 1;   /* after a pause: one draft measures the acceptance again */
    } else if (!e->spec_always && alpha <= theta) {
        /* the first draft does not pay: pause, then probe */
        s->spec_off = s->spec_backoff;
        s->spec_backoff = s->spec_backoff * 2 < CF_SPEC_MAX_PAUSE ? s->spec_backoff * 2 : CF_SPEC_MAX_PAUSE;
        return 0;
    } else {
        double pj = alpha;
        int j = 1;
        while (j < k && pj * alpha > theta) {
            pj *= alpha;
            j++;
        }
        k = j;
    }
    *rows_left -= k;
    *logits_left -= k;
    return k;
}

/* s verified k drafts and accepted a of them. */
static void spec_update(cinfer_session *s, int k, int a) {
    s->acc_hit = s->acc_hit * CF_SPEC_DECAY + a;
    s->acc_try = s->acc_try * CF_SPEC_DECAY + a + (a < k);
    if (a == k) {
        const int limit = s->req.draft_max ? s->req.draft_max : CF_DRAFT_MAX;
        s->spec_k += s->spec_k / 2 > 1 ? s->spec_k / 2 : 1;
        if (s->spec_k > limit) s->spec_k = limit;
    } else {
        s->spec_k = (s->spec_k + a + 2) / 2;
    }
    if (s->spec_probe && a == k) s->spec_backoff = CF_SPEC_MIN_PAUSE;   /* a probe that was accepted */
    s->spec_probe = 0;
}

/* Whether s generates in this step (its only missing input is its pending token). */
static int generating(const cinfer_session *s) {
    return s->n_ids - cf_rseq_len(s->rs) == 1;
}

/* Asks every speculating session's source for drafts, batched per provider (cf_draft_many). Returns the
 * drafts proposed in all. */
static int draft_phase(cinfer_engine *e) {
    int rows = 0, prefilling = 0, speculating = 0;
    for (int i = 0; i < e->n_run; i++) {
        cinfer_session *s = e->run[i];
        s->n_draft = 0;
        if (generating(s)) {
            rows++;
            speculating += s->src != NULL;
        } else {
            prefilling = 1;
        }
    }
    if (!speculating || !guard_allows(e)) return 0;
    const double theta = e->spec_always ? 0 : spec_theta(e, rows);
    /* drafts come before prompt chunks but leave them half the budget */
    int rows_left = e->budget - rows, logits_left = e->logit_rows - e->n_run;
    if (prefilling) rows_left /= 2;
    int total = 0;
    const int V = e->model->m->hp.vocab;
    for (int p = 0; p < e->n_prov; p++) {
        int n = 0;
        for (int i = 0; i < e->n_run; i++) {
            cinfer_session *s = e->run[i];
            if (!s->src || s->prov != e->prov[p] || !generating(s)) continue;
            const int k = spec_want(e, s, theta, &rows_left, &logits_left);
            if (!k) continue;
            e->d_s[n] = s;
            e->d_src[n] = s->src;
            e->d_want[n] = k;
            e->d_out[n] = s->draft;
            n++;
        }
        if (!n) continue;
        cinfer_error err = {0};
        if (cf_draft_many(e->prov[p], e->d_src, n, e->d_want, e->d_out, e->d_got, &err) != CINFER_OK) {
            for (int i = 0; i < n; i++) spec_drop(e, e->d_s[i], "drafting", &err);
            continue;
        }
        for (int i = 0; i < n; i++) {
            cinfer_session *s = e->d_s[i];
            int got = e->d_got[i] < e->d_want[i] ? e->d_got[i] : e->d_want[i];
            for (int k = 0; k < got; k++)
                if (s->draft[k] < 0 || s->draft[k] >= V) got = k;   /* a source's bad id ends its drafts */
            s->n_draft = got > 0 ? got : 0;
            total += s->n_draft;
        }
    }
    return total;
}

/* A token picked on the device (-1: the logits were not finite) as s's sample. */
static cinfer_status device_token(const cinfer_session *s, int32_t token, cf_sample_result *sr, cinfer_error *err) {
    if (token < 0) return cf_fail(err, CINFER_E_NOT_A_NUMBER, "the model produced non-finite logits (NaN/inf) at position %d", s->n_ids - 1);
    sr->token = token;
    return CINFER_OK;
}

/* The token the step gave s through its item: the device's pick, or the host sampler's from the logits. */
static cinfer_status pick(cinfer_engine *e, cinfer_session *s, const cf_batch_item *it, cf_sample_result *sr, cinfer_error *err) {
    memset(sr, 0, sizeof *sr);
    if (it->pick) return device_token(s, it->token, sr, err);
    memcpy(s->logits, it->out, (size_t)e->model->m->hp.vocab * sizeof *s->logits);
    return cf_sampler_sample(s->smp, s->logits, sr, err);
}

/* Verification of s's item [pending, d1..dk]: row r is sampled as plain decoding samples it (the processors
 * and the seeded draw see the history with every token committed before it) and committed; it goes on while
 * the sample equals the draft the next row was computed with. Stop ids, stop strings, max_tokens and a
 * cancellation end it where plain decoding would. The sequence is then cut back to the committed tokens
 * (the last one pending, as always) and the source told. Returns 1 when generation is over (*end says how). */
/* Ends the verify step's transaction keeping what was committed: the pending token and the accepted drafts
 * (the session's tokens past the sequence's length before the step, the last one pending again). */
static cinfer_status end_verify(cinfer_session *s, const cf_batch_item *it, cinfer_error *err) {
    const int len0 = cf_rseq_len(s->rs) - it->n;
    int keep = s->n_ids - 1 - len0;
    if (keep > it->n) keep = it->n;
    cinfer_status st = cf_target_txn_commit(s->txn, &keep, err);
    s->txn = NULL;
    return st;
}

static int verify(cinfer_engine *e, cinfer_session *s, const cf_batch_item *it, cf_step_end *end) {
    const int k = it->n - 1, V = e->model->m->hp.vocab;
    int a = 0;
    for (int r = 0; r <= k; r++) {
        cf_sample_result sr;
        memset(&sr, 0, sizeof sr);
        cinfer_status st;
        if (it->tokens) {   /* picked on the device, as plain decoding picks */
            st = device_token(s, it->tokens[r], &sr, &end->err);
        } else {
            memcpy(s->logits, it->out + (size_t)r * (size_t)V, (size_t)V * sizeof *s->logits);
            st = cf_sampler_sample(s->smp, s->logits, &sr, &end->err);
        }
        if (st != CINFER_OK) {
            end->outcome = CINFER_OUTCOME_FAILED;
            return 1;
        }
        if (commit(e, s, &sr, end)) {
            s->draft_tokens += k;
            s->accepted_tokens += a;
            cinfer_error ignored = {0};
            end_verify(s, it, &ignored);   /* the session ends: its sequence goes next */
            return 1;
        }
        const int hit = r < k && sr.token == s->draft[r];
        a += hit;
        if (!hit || atomic_load(&s->cancel) != CINFER_CANCEL_NONE) break;
    }
    s->draft_tokens += k;
    s->accepted_tokens += a;
    e->spec_steps++;
    if (end_verify(s, it, &end->err) != CINFER_OK) {
        end->outcome = CINFER_OUTCOME_FAILED;
        return 1;
    }
    spec_update(s, k, a);
    spec_commit(e, s, a);
    return 0;
}

/* The transactions of a step's verify items (those with every row's logits), one per sequence, all or none. */
static cinfer_status bind_verify(cinfer_engine *e, int n, cinfer_error *err) {
    for (int i = 0; i < n; i++) {
        if (e->items[i].logits != CF_LOGITS_ALL) continue;
        cinfer_session *s = e->item_s[i];
        cinfer_status st = cf_target_bind_rollback(e->target, &s->rs, 1, &s->txn, err);
        if (st != CINFER_OK) return st;
    }
    return CINFER_OK;
}

/* After a failed step (or bind): every verify item's sequence back to its length before it. */
static void abort_verify(cinfer_engine *e, int n) {
    for (int i = 0; i < n; i++) {
        cinfer_session *s = e->item_s[i];
        cinfer_error ignored = {0};
        cf_target_txn_abort(s->txn, &ignored);
        s->txn = NULL;
    }
}

/* Whether s drafts nothing in the next step, whatever its tokens: it has no draft source, or the policy has paused its
 * speculation (its own pause, or the guard's for everyone) for at least that step. */
static int spec_idle(const cinfer_engine *e, const cinfer_session *s) {
    return !s->src || (!e->spec_always && (e->g_off > 0 || s->spec_off > 0));
}

/* A step queued behind the one in flight counts for the policy's pauses as a step without drafts counts in
 * draft_phase: the guard's pause, else each speculating session's own, comes one step nearer its end. */
static void spec_pauses_step(cinfer_engine *e, cinfer_session **ss, int n) {
    int speculating = 0;
    for (int i = 0; i < n; i++) speculating |= ss[i]->src != NULL;
    if (!speculating || e->spec_always) return;
    if (e->g_off > 0) {
        e->g_off--;
        return;
    }
    for (int i = 0; i < n; i++)
        if (ss[i]->src) spec_pause_tick(ss[i]);
}

/* Whether the step of n items just submitted may be left in flight: lookahead is on, the runner can queue a step
 * behind it, and no session would draft in the next one (drafting needs the token in flight, and the policy times the
 * steps it drafts in). */
static int may_leave(const cinfer_engine *e, int n) {
    if (!e->lookahead || !cf_runner_can_follow(e->runner)) return 0;
    for (int i = 0; i < n; i++)
        if (!spec_idle(e, e->item_s[i])) return 0;
    return 1;
}

/* The step just submitted is the one in flight; the next one is built in the other half of the item arrays. */
static void leave_in_flight(cinfer_engine *e, int n) {
    e->fly = e->items;
    e->fly_s = e->item_s;
    e->fly_n = n;
    const size_t other = e->items == e->items_mem ? (size_t)e->max_batch : 0;
    e->items = e->items_mem + other;
    e->item_s = e->item_s_mem + other;
}

/* s leaves the batch and settles as cancelled (by its caller or its idle consumer) */
static void settle_cancelled(cinfer_engine *e, cinfer_session *s) {
    run_remove(e, s);
    cf_step_end end = {.outcome = CINFER_OUTCOME_CANCELLED};
    settle(e, s, &end);
}

/* A collected step's results: each session's token committed (or its drafts verified). A session whose generation
 * ends settles, unless the step after this one is in flight (follow) with a row of it: then it leaves the batch now
 * and settles when that step is collected, its row there unused (ending). landed: a step that was in flight, whose
 * token a session cancelled meanwhile does not take (its cancellation ends it where it would without lookahead): it
 * settles now, or, with a row in the step in flight after this one, when that one lands. Returns whether every row
 * was a decode row. */
static int take_results(cinfer_engine *e, const cf_batch_item *items, cinfer_session **item_s, int n, int follow, int landed) {
    int decode_only = 1;
    for (int i = 0; i < n; i++) {
        const cf_batch_item *it = &items[i];
        cinfer_session *s = item_s[i];
        if (s->ending) {
            s->ending = 0;
            settle(e, s, &s->end);
            continue;
        }
        if (landed && atomic_load(&s->cancel) != CINFER_CANCEL_NONE) {
            if (!(follow && s->queued_in == e->n_follow_ups)) settle_cancelled(e, s);
            continue;
        }
        if (it->n > 1 && it->logits != CF_LOGITS_ALL) decode_only = 0;
        if (!it->pick && it->logits == CF_LOGITS_NONE) {   /* a prompt chunk short of the end */
            decode_only = 0;
            continue;
        }
        if (atomic_load(&s->state) == CINFER_STATE_PREPARING) {
            s->t_prefilled = s->now(s->now_user);
            atomic_store(&s->state, CINFER_STATE_RUNNING);
            decode_only = 0;
        }
        cf_step_end end = {0};
        int over;
        if (it->logits == CF_LOGITS_ALL) {
            over = verify(e, s, it, &end);
        } else {
            cf_sample_result sr;
            over = pick(e, s, it, &sr, &end.err) != CINFER_OK;
            if (over) end.outcome = CINFER_OUTCOME_FAILED;
            else over = commit(e, s, &sr, &end);
            if (!over) spec_commit(e, s, 0);
        }
        if (!over) continue;
        run_remove(e, s);
        if (follow && s->queued_in == e->n_follow_ups) {
            s->ending = 1;
            s->end = end;
        } else {
            settle(e, s, &end);
        }
    }
    return decode_only;
}

/* Settles the sessions of a step that failed (those that had ended before it as they ended). */
static void fail_step(cinfer_engine *e, cinfer_session **item_s, int n, cinfer_status st, const cinfer_error *err) {
    for (int i = 0; i < n; i++) {
        cinfer_session *s = item_s[i];
        cf_step_end end = {.outcome = CINFER_OUTCOME_FAILED};
        if (s->ending) {
            s->ending = 0;
            end = s->end;
        } else {
            cf_fail(&end.err, st, "a step of %d sequences failed: %s", n, err->message);
            run_remove(e, s);
        }
        settle(e, s, &end);
    }
}

/* whether s may take a row in a step queued behind the one in flight: it picks on the device, drafts nothing in that
 * step, and is not cancelled */
static int may_queue(const cinfer_engine *e, cinfer_session *s) {
    return s->device_pick && spec_idle(e, s) && !cancelled(s);
}

/* The step after the one in flight, built in e->items when it can be queued now (lookahead), its sessions in the order
 * of the batch (so the step in flight's are always the batch's first): that step's sessions less those that ended
 * (whose rows in it are not used), those whose token in flight is their last and those cancelled (left out: they settle
 * when it lands), each picking on the device and drafting nothing, or, where their row in flight is a piece of their
 * prompt short of its end, with the next piece; then the sessions that joined the batch since (a new prompt, or a
 * preempted session's recomputation), each with what it has left to evaluate, picking on the device, or its first
 * piece; the pieces within the step's token budget after one row for each session decoding, and room in the KV
 * memory for all of it. Returns its items, 0 when the batch does not go on that way (then the step in flight is
 * collected first and the next one built as usual); *joining: the sessions joining. */
static int build_follow_up(cinfer_engine *e, int *joining) {
    int need = 0, k = 0, n = 0, picks = 0, budget = e->budget;
    for (int i = 0; i < e->fly_n; i++) {   /* who goes on, and the rows the decoding ones take */
        cinfer_session *s = e->fly_s[i];
        if (s->ending) continue;
        if (k == e->n_run || e->run[k++] != s) return 0;
        if (cancelled(s)) continue;   /* settles when its step lands */
        if (!may_queue(e, s)) return 0;
        if (e->fly[i].pick && (int)s->n_tokens + 1 >= s->plan.output_limit) continue;   /* its last token is in flight */
        e->item_s[n++] = s;
        budget -= e->fly[i].pick != NULL;
    }
    for (int i = 0, f = 0; i < n; i++) {
        cinfer_session *s = e->item_s[i];
        while (e->fly_s[f] != s) f++;
        const int len = cf_rseq_len(s->rs), rows = e->fly[f].n;
        if (e->fly[f].pick) {   /* its draw comes one token after the one in flight */
            if (len + rows + 1 > e->max_ctx) return 0;
            need += cf_rseq_blocks_needed(s->rs, rows + 1);
            e->items[i] = (cf_batch_item){.seq = s->rs, .n = 1, .logits = CF_LOGITS_NONE, .pick = &s->pick_args,
                                          .u = cf_sampler_uniform_ahead(s->smp, 1)};
            picks++;
            continue;
        }
        const int rest = s->n_ids - len - rows, c = rest < budget ? rest : budget;
        if (c < 1) return 0;
        need += cf_rseq_blocks_needed(s->rs, rows + c);
        budget -= c;
        add_item(e, i, s, len + rows, c);
        picks += e->items[i].pick != NULL;
    }
    *joining = 0;
    for (int i = k; i < e->n_run && budget > 0; i++) {   /* joined since, in order, each whole or its first piece */
        cinfer_session *s = e->run[i];
        const int len = cf_rseq_len(s->rs), rest = s->n_ids - len, c = rest < budget ? rest : budget;
        if (rest < 1 || len + rest > e->max_ctx || !may_queue(e, s)) return 0;   /* it waits for no lookahead */
        need += cf_rseq_blocks_needed(s->rs, c);
        budget -= c;
        add_item(e, n, s, len, c);
        picks += e->items[n++].pick != NULL;
        (*joining)++;
    }
    if (!picks || need > cf_runner_blocks_available(e->runner)) return 0;
    return n;
}

/* A turn with a step in flight: queues the step after it when the batch goes on (build_follow_up: the inputs of the
 * sessions in flight are the tokens that step picks, on the device), then collects the step in flight and takes its
 * results. */
static void land(cinfer_engine *e, double t0) {
    const cf_batch_item *it = e->fly;
    cinfer_session **ss = e->fly_s;
    const int n = e->fly_n;
    cinfer_error err = {0};
    int joining = 0;
    const int nf = build_follow_up(e, &joining);
    int follow = nf > 0;
    if (follow) {
        const double tr = mono_now();
        follow = cf_runner_submit(e->runner, e->items, nf, &err) == CINFER_OK;   /* else one step at a time from here */
        e->runner_s += mono_now() - tr;
        if (follow) {
            e->n_steps++, e->n_follow_ups++, e->n_joins += joining;
            for (int i = 0; i < nf; i++) e->item_s[i]->queued_in = e->n_follow_ups;
            spec_pauses_step(e, e->item_s, nf);
        }
    }
    const double tr = mono_now();
    const cinfer_status st = cf_runner_collect(e->runner, &err);
    e->runner_s += mono_now() - tr;
    e->fly_n = 0;
    if (st != CINFER_OK) {   /* the runner dropped both steps */
        fail_step(e, ss, n, st, &err);
        e->turn_s += mono_now() - t0;
        return;
    }
    if (follow) leave_in_flight(e, nf);
    e->step_tokens = 0;
    take_results(e, it, ss, n, follow, 1);
    e->turn_s += mono_now() - t0;
}

/* One turn: with a step in flight, lands it (land); else settles what was cancelled, asks for drafts, runs one step
 * over the batch (dropping the drafts, then preempting, while the KV memory cannot hold it) and commits the tokens it
 * picked or verified, or leaves it in flight when it only picks on the device and lookahead is on. */
static void iterate(cinfer_engine *e) {
    const double t0 = mono_now();
    if (e->fly_n) {
        land(e, t0);
        return;
    }
    for (int i = 0; i < e->n_run;) {
        cinfer_session *s = e->run[i];
        if (cancelled(s)) {
            settle_cancelled(e, s);
            continue;
        }
        i++;
    }
    if (!e->n_run) return;

    int drafts = draft_phase(e) > 0;
    e->step_tokens = 0;
    cinfer_error err = {0};
    cinfer_status st;
    int n, left = 0;
    for (;;) {
        n = build_step(e, drafts);
        int need = 0, wneed = 0;
        for (int i = 0; i < n; i++) {
            need += cf_rseq_blocks_needed(e->items[i].seq, e->items[i].n);
            wneed += cf_rseq_wblocks_needed(e->items[i].seq, e->items[i].n);
        }
        const int avail = cf_runner_blocks_available(e->runner), wavail = cf_runner_wblocks_available(e->runner);
        const int short_of_blocks = need > avail || wneed > wavail;
        if (short_of_blocks && drafts) {   /* drafts go before anyone is preempted */
            drafts = 0;
            continue;
        }
        if (short_of_blocks && e->n_run > 1) {
            preempt_newest(e, need, avail, wneed, wavail);
            continue;
        }
        st = bind_verify(e, n, &err);
        const double tr = mono_now();
        if (st == CINFER_OK) st = cf_runner_submit(e->runner, e->items, n, &err);
        left = st == CINFER_OK && !drafts && may_leave(e, n);
        if (st == CINFER_OK && !left) st = cf_runner_collect(e->runner, &err);
        e->runner_s += mono_now() - tr;
        if (st != CINFER_OK) abort_verify(e, n);
        e->n_steps++;
        if (n > e->peak_batch) e->peak_batch = n;
        if (st == CINFER_E_OUT_OF_MEMORY && drafts) {
            drafts = 0;
            continue;
        }
        if (st == CINFER_E_OUT_OF_MEMORY && e->n_run > 1) {
            preempt_newest(e, need, avail, wneed, wavail);
            continue;
        }
        break;
    }
    if (st != CINFER_OK) {
        fail_step(e, e->item_s, n, st, &err);
        e->turn_s += mono_now() - t0;
        return;
    }
    if (left) {   /* its results come with the next turn's land */
        leave_in_flight(e, n);
        e->turn_s += mono_now() - t0;
        return;
    }
    int rows = 0;
    for (int i = 0; i < n; i++) rows += e->items[i].n;
    const int decode_only = take_results(e, e->items, e->item_s, n, 0, 0);
    const double t = mono_now() - t0;
    e->turn_s += t;
    if (decode_only && n) {
        cost_record(e, rows, t);
        guard_record(e, drafts, e->step_tokens, t);
    }
}


/* ---- the loop ---- */

/* Under e->mu, on the engine thread. */
static void publish_stats(cinfer_engine *e) {
    e->pub_running = e->n_run;
    e->pub_blocks_available = cf_runner_blocks_available(e->runner);
    e->pub_blocks_cached = cf_runner_blocks_cached(e->runner);
    e->pub_wblocks_available = cf_runner_wblocks_available(e->runner);
    e->pub_steps = e->n_steps;
    e->pub_follow_ups = e->n_follow_ups;
    e->pub_joins = e->n_joins;
    e->pub_preemptions = e->n_preemptions;
    e->pub_turn_s = e->turn_s;
    e->pub_runner_s = e->runner_s;
    e->pub_wait_s = cf_runner_wait_seconds(e->runner);
}

void cinfer_engine_get_stats(cinfer_engine *e, cinfer_engine_stats *out) {
    int queued = 0;
    pthread_mutex_lock(&e->mu);
    for (const cinfer_session *s = e->head; s; s = s->next) queued++;
    *out = (cinfer_engine_stats){.queued = queued,
                                 .running = e->pub_running,
                                 .kv_blocks_total = e->blocks_total,
                                 .kv_blocks_used = e->blocks_total - e->pub_blocks_available,
                                 .kv_blocks_cached = e->pub_blocks_cached,
                                 .kv_block_tokens = e->block_size,
                                 .kv_block_bytes = e->block_bytes,
                                 .steps = e->pub_steps,
                                 .turn_seconds = e->pub_turn_s,
                                 .runner_seconds = e->pub_runner_s,
                                 .device_wait_seconds = e->pub_wait_s,
                                 .kv_window_blocks_total = cf_runner_wblocks_total(e->runner),
                                 .kv_window_blocks_used = cf_runner_wblocks_total(e->runner) - e->pub_wblocks_available,
                                 .kv_window_block_bytes = cf_runner_wblock_bytes(e->runner),
                                 .kv_window = cf_runner_window(e->runner),
                                 .lookahead_steps = e->pub_follow_ups,
                                 .lookahead_joins = e->pub_joins,
                                 .preemptions = e->pub_preemptions};
    pthread_mutex_unlock(&e->mu);
}

static void *sched_main(void *arg) {
    cinfer_engine *e = arg;
    cinfer_session **fresh = e->fresh;
    pthread_mutex_lock(&e->mu);
    for (;;) {
        while (!e->closing && !e->head && !e->n_run && !e->fly_n) pthread_cond_wait(&e->cv, &e->mu);
        if (e->closing) {
            for (int i = 0; i < e->n_run; i++) cf_session_request_cancel(e->run[i], CINFER_CANCEL_ENGINE_CLOSED);
            for (cinfer_session *s = e->head; s; s = s->next) cf_session_request_cancel(s, CINFER_CANCEL_ENGINE_CLOSED);
        }
        /* Waiting sessions that were cancelled leave now, not when their turn comes. */
        cinfer_session *gone = NULL, **link = &e->head;
        e->tail = NULL;
        while (*link) {
            cinfer_session *s = *link;
            if (atomic_load(&s->cancel) != CINFER_CANCEL_NONE) {
                *link = s->next;
                s->next = gone;
                gone = s;
                if (!s->prepared) e->n_queued--;
            } else {
                e->tail = s;
                link = &s->next;
            }
        }
        /* Admission in arrival order: a session whose input the free KV blocks cannot hold beside what the
         * batch still needs waits, and so does everything behind it (an empty batch takes it anyway: every
         * request was checked at open to fit the whole pool). */
        int n_fresh = 0;
        if (!e->closing) {
            int room = cf_runner_blocks_available(e->runner), wroom = cf_runner_wblocks_available(e->runner);
            for (int i = 0; i < e->n_run; i++) {
                room -= blocks_wanted(e, e->run[i]);
                wroom -= wblocks_wanted(e, e->run[i]);
            }
            while (e->head && e->n_run + n_fresh < e->max_batch) {
                cinfer_session *s = e->head;
                const int want = blocks_wanted(e, s), wwant = wblocks_wanted(e, s);
                if ((e->n_run || n_fresh) && (want > room || wwant > wroom)) break;
                room -= want;
                wroom -= wwant;
                e->head = s->next;
                if (!e->head) e->tail = NULL;
                s->next = NULL;
                if (!s->prepared) e->n_queued--;
                fresh[n_fresh++] = s;
            }
        }
        pthread_mutex_unlock(&e->mu);

        while (gone) {
            cinfer_session *s = gone;
            gone = s->next;
            cf_step_end end = {.outcome = CINFER_OUTCOME_CANCELLED};
            settle(e, s, &end);
        }
        for (int i = 0; i < n_fresh; i++) {
            cinfer_session *s = fresh[i];
            cf_step_end end = {.outcome = CINFER_OUTCOME_FAILED};
            if (admit(e, s, &end.err) != CINFER_OK) settle(e, s, &end);
            else run_insert(e, s);
        }
        iterate(e);

        pthread_mutex_lock(&e->mu);
        publish_stats(e);
        if (e->closing && !e->head && !e->n_run && !e->fly_n) break;
    }
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

static void engine_destroy(cinfer_engine *e) {
    for (int i = 0; i < e->n_prov; i++) cf_draft_provider_free(e->prov[i]);
    free(e->d_s);
    free(e->d_src);
    free(e->d_want);
    free(e->d_got);
    free(e->d_out);
    cf_target_free(e->target);
    cf_runner_free(e->runner);
    free(e->run);
    free(e->items_mem);
    free(e->item_s_mem);
    free(e->fresh);
    pthread_cond_destroy(&e->cv);
    pthread_mutex_destroy(&e->mu);
    free(e);
}

cinfer_status cinfer_engine_create(cinfer_model *m, const cinfer_engine_params *p, cinfer_engine **out, cinfer_error *err) {
    if (!out) return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "cinfer_engine_create: out is NULL");
    *out = NULL;
    if (!m) return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "cinfer_engine_create: the model is NULL");
    cinfer_engine_params dp = cinfer_engine_default_params();
    if (!p) p = &dp;
    if (p->struct_size != sizeof *p)
        return cf_fail(err, CINFER_E_INVALID_ARGUMENT,
                       "cinfer_engine_params.struct_size is %zu, expected %zu: start from cinfer_engine_default_params()",
                       p->struct_size, sizeof *p);
    if (p->max_queued < 0)
        return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "max_queued is %d; it must be >= 0 (0 = no limit)", p->max_queued);
    if (p->max_batch < 0)
        return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "max_batch is %d; it must be >= 0 (0 = 128 on CUDA, 16 on the CPU)",
                       p->max_batch);
    if (p->max_batch_tokens < 0)
        return cf_fail(err, CINFER_E_INVALID_ARGUMENT,
                       "max_batch_tokens is %d; it must be >= 0 (0 = the backend's prefill chunk)", p->max_batch_tokens);
    if (p->kv_memory < 0)
        return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "kv_memory is %lld bytes; it must be >= 0 (0 = sized from free memory)",
                       (long long)p->kv_memory);
    if (p->lookahead < -1 || p->lookahead > 1)
        return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "lookahead is %d; it must be -1 (never), 0 (where the device runs apart) or 1",
                       p->lookahead);
    if (m->engine)
        return cf_fail(err, CINFER_E_BUSY, "the model already has an engine; free it before creating another");

    cf_runner_params rp = cf_runner_default_params();
    rp.max_seqs = p->max_batch ? p->max_batch : strcmp(m->m->be->ops->name, "cuda") ? 16 : 128;
    rp.max_batch_tokens = p->max_batch_tokens;
    rp.kv_bytes = p->kv_memory;
    cf_runner *runner = NULL;
    cinfer_status st = cf_runner_create(m->m, &rp, &runner, err);
    if (st != CINFER_OK) return cf_wrap(err, st, "creating the engine's batch of %d sequences", rp.max_seqs);
    const cf_runner_params *rq = cf_runner_params_of(runner);
    cinfer_engine *e = calloc(1, sizeof *e);
    if (e) {
        e->run = calloc((size_t)rq->max_seqs, sizeof *e->run);
        e->items = e->items_mem = calloc(2 * (size_t)rq->max_seqs, sizeof *e->items);
        e->item_s = e->item_s_mem = calloc(2 * (size_t)rq->max_seqs, sizeof *e->item_s);
        e->fresh = calloc((size_t)rq->max_seqs, sizeof *e->fresh);
        e->d_s = calloc((size_t)rq->max_seqs, sizeof *e->d_s);
        e->d_src = calloc((size_t)rq->max_seqs, sizeof *e->d_src);
        e->d_want = calloc((size_t)rq->max_seqs, sizeof *e->d_want);
        e->d_got = calloc((size_t)rq->max_seqs, sizeof *e->d_got);
        e->d_out = calloc((size_t)rq->max_seqs, sizeof *e->d_out);
    }
    if (!e || !e->run || !e->items || !e->item_s || !e->fresh || !e->d_s || !e->d_src || !e->d_want || !e->d_got || !e->d_out) {
        if (e) {
            free(e->run);
            free(e->items_mem);
            free(e->item_s_mem);
            free(e->fresh);
            free(e->d_s);
            free(e->d_src);
            free(e->d_want);
            free(e->d_got);
            free(e->d_out);
        }
        free(e);
        cf_runner_free(runner);
        return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory for the engine");
    }
    e->model = m;
    e->p = *p;
    if (!e->p.now) e->p.now = monotonic_now;
    e->runner = runner;
    e->max_batch = rq->max_seqs;
    e->budget = rq->max_batch_tokens;
    e->block_size = rq->block_size;
    e->blocks_total = cf_runner_blocks_total(runner);
    e->block_bytes = cf_runner_block_bytes(runner);
    e->pub_blocks_available = cf_runner_blocks_available(runner);
    e->pub_wblocks_available = cf_runner_wblocks_available(runner);
    e->max_ctx = rq->max_ctx;
    e->lookahead = p->lookahead > 0 || (p->lookahead == 0 && m->m->be->async);
    e->logit_rows = rq->max_seqs > 256 ? rq->max_seqs : 256;   /* the runner's logits scratch (runner.c) */
    e->c_row = -1;
    e->p.draft_model = NULL;
    e->p.default_draft = NULL;
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    /* the verifier's target port; the draft providers: n-gram always, the draft model when one is given */
    cf_draft_provider *prov = NULL;
    st = cf_target_create_over_runner(runner, &e->target, err);
    if (st == CINFER_OK) st = cf_ngram_provider_create(0, 0, &prov, err);
    if (st == CINFER_OK) st = cf_engine_add_draft_provider(e, "ngram", prov, err);
    if (st == CINFER_OK && p->draft_model) {
        st = cf_draft_model_provider_create(m, p->draft_model, rq->max_seqs, &prov, err);
        if (st != CINFER_OK) cf_wrap(err, st, "the engine's draft model");
        else st = cf_engine_add_draft_provider(e, "draft", prov, err);
    }
    if (st == CINFER_OK && p->default_draft && p->default_draft[0] && strcmp(p->default_draft, "none")) {
        cf_request probe = {0};
        cf_plan plan;
        snprintf(probe.draft, sizeof probe.draft, "%s", p->default_draft);
        if (strlen(p->default_draft) >= sizeof e->default_draft)
            st = cf_fail(err, CINFER_E_INVALID_ARGUMENT, "default_draft names a source of %zu bytes; no source name is that long",
                         strlen(p->default_draft));
        else if ((st = cf_plan_request(&probe, e->prov_names, e->n_prov, NULL, &plan, err)) != CINFER_OK)
            cf_wrap(err, st, "default_draft");
        else snprintf(e->default_draft, sizeof e->default_draft, "%s", p->default_draft);
    }
    if (st != CINFER_OK) {
        engine_destroy(e);
        return st;
    }
    int rc = pthread_create(&e->thread, NULL, sched_main, e);
    if (rc) {
        engine_destroy(e);
        return cf_fail(err, CINFER_E_INTERNAL, "cannot start the scheduler thread: %s", strerror(rc));
    }
    m->engine = e;
    *out = e;
    char kv_b[32], w_b[32];
    if (cf_runner_wblocks_total(runner))
        elog(e, "engine: batches of up to %d sequences and %d tokens a step; KV memory %s in %d blocks of %d tokens for the full "
                "layers and %d (%s) for the sliding-window layers (window %d)",
             e->max_batch, e->budget, bytes_text(rq->kv_bytes, kv_b, sizeof kv_b), e->blocks_total, e->block_size,
             cf_runner_wblocks_total(runner),
             bytes_text((int64_t)cf_runner_wblocks_total(runner) * cf_runner_wblock_bytes(runner), w_b, sizeof w_b),
             cf_runner_window(runner));
    else
        elog(e, "engine: batches of up to %d sequences and %d tokens a step; KV memory %s in %d blocks of %d tokens", e->max_batch,
             e->budget, bytes_text(rq->kv_bytes, kv_b, sizeof kv_b), e->blocks_total, e->block_size);
    return CINFER_OK;
}

cinfer_status cf_engine_add_draft_provider(cinfer_engine *e, const char *name, cf_draft_provider *p, cinfer_error *err) {
    if (!p) return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "cf_engine_add_draft_provider: the provider is NULL");
    if (e->n_prov == CF_ENGINE_PROVIDERS || !name || !name[0] || strlen(name) >= sizeof e->prov_name[0]) {
        cf_draft_provider_free(p);
        return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "cf_engine_add_draft_provider: no room for a provider named '%s'",
                       name ? name : "(null)");
    }
    for (int i = 0; i < e->n_prov; i++)
        if (!strcmp(e->prov_name[i], name)) {
            cf_draft_provider_free(p);
            return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "the engine already has a draft provider named '%s'", name);
        }
    snprintf(e->prov_name[e->n_prov], sizeof e->prov_name[0], "%s", name);
    e->prov_names[e->n_prov] = e->prov_name[e->n_prov];
    e->prov[e->n_prov++] = p;
    return CINFER_OK;
}

void cf_engine_spec_always(cinfer_engine *e, int on) {
    e->spec_always = on;
}

void cf_engine_spec_pause(cinfer_engine *e, int steps) {
    e->g_off = steps;
}

void cinfer_engine_free(cinfer_engine *e) {
    if (!e) return;
    pthread_mutex_lock(&e->mu);
    e->closing = 1;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
    pthread_join(e->thread, NULL);
    e->model->engine = NULL;
    engine_destroy(e);
}

/* The KV memory holds the request's prompt and max_tokens (less the last token, which is never fed back),
 * or fit_context lowers max_tokens to what it holds. */
static cinfer_status fit_kv(const cinfer_engine *e, cf_request *q, cinfer_error *err) {
    const int64_t room = (int64_t)e->blocks_total * e->block_size;
    if ((int64_t)q->n_prompt + q->max_tokens - 1 <= room) return CINFER_OK;
    if (q->fit_context && q->n_prompt <= room) {
        q->max_tokens = (int)(room - q->n_prompt + 1);
        return CINFER_OK;
    }
    char need_b[32], pool_b[32];
    bytes_text((int64_t)e->blocks_total * e->block_bytes, pool_b, sizeof pool_b);
    if (q->n_prompt > room) {
        const int need = blocks_for(e, q->n_prompt);
        return cf_fail(err, CINFER_E_OUT_OF_MEMORY,
                       "the prompt of %d tokens needs %d KV blocks of %d tokens (%s), but the engine's KV memory holds %d blocks "
                       "(%s); shorten the prompt to at most %lld tokens or create the engine with a larger kv_memory",
                       q->n_prompt, need, e->block_size, bytes_text(need * e->block_bytes, need_b, sizeof need_b), e->blocks_total,
                       pool_b, (long long)room);
    }
    const int need = blocks_for(e, (int64_t)q->n_prompt + q->max_tokens - 1);
    return cf_fail(err, CINFER_E_OUT_OF_MEMORY,
                   "the prompt (%d tokens) plus max_tokens (%d) needs %d KV blocks of %d tokens (%s), but the engine's KV "
                   "memory holds %d blocks (%s); lower max_tokens to at most %lld, set fit_context, or create the engine "
                   "with a larger kv_memory",
                   q->n_prompt, q->max_tokens, need, e->block_size, bytes_text(need * e->block_bytes, need_b, sizeof need_b),
                   e->blocks_total, pool_b, (long long)(room - q->n_prompt + 1));
}

static cinfer_status check_control(const cinfer_session_params *c, cinfer_error *err) {
    if (c->struct_size != sizeof *c)
        return cf_fail(err, CINFER_E_INVALID_ARGUMENT,
                       "cinfer_session_params.struct_size is %zu, expected %zu: start from cinfer_session_default_params()",
                       c->struct_size, sizeof *c);
    if (c->output != CINFER_OUTPUT_COLLECT && c->output != CINFER_OUTPUT_PULL && c->output != CINFER_OUTPUT_CALLBACK)
        return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "output mode %d is not one of COLLECT, PULL, CALLBACK", (int)c->output);
    if (c->output == CINFER_OUTPUT_CALLBACK && !c->on_event)
        return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "CINFER_OUTPUT_CALLBACK needs on_event");
    if (isnan(c->idle_timeout)) return cf_fail(err, CINFER_E_NOT_A_NUMBER, "idle_timeout is NaN");
    if (c->idle_timeout < 0)
        return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "idle_timeout is %g; it must be >= 0 seconds (0 = never)", c->idle_timeout);
    return CINFER_OK;
}

static uint64_t fresh_seed(uint64_t id) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t z = mix64((uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec) ^ mix64(id + 0x9e3779b97f4a7c15ull);
    return z >> 1;  /* below 2^63, so a request can name it to repeat the run */
}

cinfer_status cinfer_session_open(cinfer_engine *e, const cinfer_request *req, const cinfer_session_params *ctl,
                                  cinfer_session **out, cinfer_error *err) {
    if (!out) return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "cinfer_session_open: out is NULL");
    *out = NULL;
    if (!e) return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "cinfer_session_open: the engine is NULL");
    cinfer_session_params dc = cinfer_session_default_params();
    if (!ctl) ctl = &dc;
    CF_TRY(check_control(ctl, err));

    cf_request q;
    CF_TRY(cf_request_build(e->model, req, &q, err));
    cf_plan plan;
    cinfer_status st = fit_kv(e, &q, err);
    if (st == CINFER_OK) st = cf_plan_request(&q, e->prov_names, e->n_prov, e->default_draft[0] ? e->default_draft : NULL, &plan, err);
    cinfer_session *s = st == CINFER_OK ? calloc(1, sizeof *s) : NULL;
    if (st == CINFER_OK && !s) st = cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory for a session");
    if (st != CINFER_OK) {
        cf_request_free(&q);
        return st;
    }
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&s->mu, NULL);
    s->engine = e;
    s->sched_thread = e->thread;
    s->req = q;
    s->plan = plan;
    for (int i = 0; plan.mechanism == CF_MECH_SPECULATIVE && i < e->n_prov; i++)
        if (!strcmp(plan.source, e->prov_names[i])) s->prov = e->prov[i];
    s->device_pick = device_pick_ok(e->model->m, &s->req, &s->pick_args);
    const int device_pick = s->device_pick;  /* s may be the caller's to free once the lock is released */
    s->ctl = *ctl;
    s->now = e->p.now;
    s->now_user = e->p.now_user;
    s->t_open = s->now(s->now_user);
    atomic_init(&s->state, CINFER_STATE_CREATED);
    atomic_init(&s->cancel, CINFER_CANCEL_NONE);

    *out = s;  /* before the engine can see it, so that its callbacks may use the handle */
    pthread_mutex_lock(&e->mu);
    if (e->closing) st = cf_fail(err, CINFER_E_INVALID_ARGUMENT, "the engine is closing; no session can be opened");
    else if (e->p.max_queued && e->n_queued >= e->p.max_queued)
        st = cf_fail(err, CINFER_E_BUSY, "%d sessions are already waiting (max_queued); try again later", e->n_queued);
    uint64_t id = 0;
    if (st == CINFER_OK) {
        s->id = id = ++e->next_id;
        if (req->seed < 0) s->req.sp.seed = fresh_seed(s->id);
        else s->req.sp.seed = (uint64_t)req->seed;
        if (e->tail) e->tail->next = s;
        else e->head = s;
        e->tail = s;
        e->n_queued++;
        pthread_cond_signal(&e->cv);
    }
    pthread_mutex_unlock(&e->mu);
    if (st != CINFER_OK) {
        *out = NULL;
        cf_session_destroy(s);
        return st;
    }
    elog(e, "session %llu: plan %s, %d prompt tokens, up to %d new, tokens picked on the %s", (unsigned long long)id, plan.id,
         q.n_prompt, plan.output_limit, device_pick ? "device" : "host");
    return CINFER_OK;
}
