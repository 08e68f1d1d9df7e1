/* scheduler.c: the engine: one per model, owning the scheduler thread, the FIFO of sessions waiting for
 * their turn, and the step function that advances a session by one prompt chunk or one decoded token.
 * The loop runs one session at a time (the plan "text:serial"); continuous batching replaces the loop's
 * choice of what to step, not the step.
 *
 * Two ways to pick a token: on the device (cf_model_decode_run: only the id crosses to the host, the step
 * replays as a graph where the backend records them, and the device runs one step ahead of the host, up
 * to RUN_AHEAD tokens a loop step) when the request needs nothing but temperature, top-k, top-p and min-p
 * and the backend has the op; otherwise the logits are read back and the host sampler runs its
 * processors and log-probabilities. Both draw with the sampler's seeded uniform
 * (cf_sampler_uniform), so a seed repeats its output, and on the CPU both paths give the same tokens.
 * CINFER_DEVICE_SAMPLING=0 in the environment keeps every request on the host path. */
#include "engine/engine.h"
#include "base/status.h"
#include "text/detok.h"
#include "text/stop.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct cinfer_engine {
    cinfer_model *model;
    cinfer_engine_params p;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    cinfer_session *head, *tail;  /* waiting, FIFO */
    int n_queued;
    int closing;
    uint64_t next_id;
};

static double monotonic_now(void *user) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
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

cinfer_engine_params cinfer_engine_default_params(void) {
    return (cinfer_engine_params){.struct_size = sizeof(cinfer_engine_params)};
}

/* ---- the step ---- */

typedef struct step_end {
    cinfer_outcome outcome;
    cinfer_finish finish;
    cinfer_error err;
} step_end;

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
    const char *env = getenv("CINFER_DEVICE_SAMPLING");
    if (env && !strcmp(env, "0")) return 0;
    if (p->repetition_penalty != 1.0f || p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f || p->n_logit_bias > 0 ||
        p->logprobs || p->top_logprobs > 0)
        return 0;
    return cf_model_can_pick_on_device(m, sa);
}

/* CREATED -> PREPARING: the session's native resources. */
static cinfer_status prepare(cinfer_engine *e, cinfer_session *s, cinfer_error *err) {
    cf_model *m = e->model->m;
    const cf_request *q = &s->req;
    CF_TRY(cf_seq_create(m, q->n_prompt + q->max_tokens, &s->seq, err));
    CF_TRY(cf_sampler_create(&q->sp, m->hp.vocab, &s->smp, err));
    CF_TRY(cf_sampler_accept_many(s->smp, q->prompt, (size_t)q->n_prompt, err));
    s->logits = malloc((size_t)m->hp.vocab * sizeof *s->logits);
    if (!s->logits) return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory for the logits of %d tokens", m->hp.vocab);
    if (e->model->tok && !q->ids_only) CF_TRY(cf_detok_create(cf_detok_tokenizer_decode, e->model->tok, 1, &s->detok, err));
    if (q->n_stop) CF_TRY(cf_stop_create((const char *const *)q->stop, q->n_stop, NULL, 0, &s->stop, err));
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

/* Tokens a device-picking session decodes in one loop step (a cancellation or an idle consumer is seen
 * after every token). */
#define RUN_AHEAD 32

/* A pull consumer that has left tokens unread longer than its idle timeout: the session is cancelled. */
static int consumer_idle(cinfer_session *s) {
    if (s->ctl.output != CINFER_OUTPUT_PULL || s->ctl.idle_timeout <= 0) return 0;
    pthread_mutex_lock(&s->mu);
    int idle = s->n_read < s->n_tokens && s->now(s->now_user) - s->t_unread > s->ctl.idle_timeout;
    pthread_mutex_unlock(&s->mu);
    if (idle) cf_session_request_cancel(s, CINFER_CANCEL_CONSUMER_IDLE);
    return idle;
}

/* Commits a picked token: stop ids, the sampler's history, the text, the output limit. Returns 1 when
 * generation is over (*end says how). */
static int commit(cinfer_engine *e, cinfer_session *s, const cf_sample_result *sr, step_end *end) {
    cinfer_error *err = &end->err;
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
    s->last = sr->token;
    s->pending = 1;
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

typedef struct run_ctx {
    cinfer_engine *e;
    cinfer_session *s;
    step_end *end;
    int over;
} run_ctx;

/* cf_model_decode_run's callback: commits the token; stops the run when generation is over or cancelled */
static int run_token(void *ctx, int32_t token) {
    run_ctx *c = ctx;
    cf_sample_result sr;
    memset(&sr, 0, sizeof sr);
    sr.token = token;
    c->over = commit(c->e, c->s, &sr, c->end);
    return c->over || atomic_load(&c->s->cancel) != CINFER_CANCEL_NONE || consumer_idle(c->s);
}

/* Decodes: evaluates the last committed token (if any), picks, commits; on the device, a run of up to
 * RUN_AHEAD such steps. Returns 1 when generation is over (*end says how). */
static int decode(cinfer_engine *e, cinfer_session *s, step_end *end) {
    cf_model *m = e->model->m;
    cinfer_error *err = &end->err;
    cf_sample_result sr;
    memset(&sr, 0, sizeof sr);
    if (s->device_pick && s->pending) {
        /* no more steps than the context and the output limit leave (at least one: a full context fails) */
        int n = RUN_AHEAD, room = cf_seq_max_ctx(s->seq) - cf_seq_len(s->seq), left = s->plan.output_limit - (int)s->n_tokens;
        if (n > room) n = room;
        if (n > left) n = left;
        if (n < 1) n = 1;
        float u[RUN_AHEAD];   /* the uniforms the sampler would draw for these steps one by one */
        for (int k = 0; k < n; k++) u[k] = cf_sampler_uniform_ahead(s->smp, (size_t)k);
        run_ctx c = {e, s, end, 0};
        int done = 0;
        if (cf_model_decode_run(m, s->seq, s->last, &s->pick_args, u, n, run_token, &c, &done, err) != CINFER_OK) goto failed;
        return c.over;
    }
    if (s->device_pick) {
        /* the last prompt token's logits stay on the device after the prefill: the first pick reads them */
        if (cf_model_pick_last(m, s->seq, &s->pick_args, cf_sampler_uniform(s->smp), &sr.token, err) != CINFER_OK) goto failed;
    } else {
        if (s->pending) {
            if (cf_model_eval(m, s->seq, &s->last, 1, s->logits, 0, err) != CINFER_OK) goto failed;
            s->pending = 0;
        }
        if (cf_sampler_sample(s->smp, s->logits, &sr, err) != CINFER_OK) goto failed;
    }
    return commit(e, s, &sr, end);
failed:
    end->outcome = CINFER_OUTCOME_FAILED;
    return 1;
}

/* Advances s by one step. Returns 1 when the session's generation is over. */
static int step(cinfer_engine *e, cinfer_session *s, step_end *end) {
    if (atomic_load(&s->cancel) != CINFER_CANCEL_NONE) {
        end->outcome = CINFER_OUTCOME_CANCELLED;
        return 1;
    }
    if (consumer_idle(s)) {
        end->outcome = CINFER_OUTCOME_CANCELLED;
        return 1;
    }
    switch (atomic_load(&s->state)) {
    case CINFER_STATE_CREATED:
        s->t_prep = s->now(s->now_user);
        atomic_store(&s->state, CINFER_STATE_PREPARING);
        if (prepare(e, s, &end->err) != CINFER_OK) {
            end->outcome = CINFER_OUTCOME_FAILED;
            return 1;
        }
        return 0;
    case CINFER_STATE_PREPARING: {
        /* one forward pass per step: the granularity of cancellation during prefill */
        int n = s->req.n_prompt - s->n_prefilled;
        if (n > cf_seq_chunk(s->seq)) n = cf_seq_chunk(s->seq);
        int last = s->n_prefilled + n == s->req.n_prompt;
        float *logits = last && !s->device_pick ? s->logits : NULL;
        if (cf_model_eval(e->model->m, s->seq, s->req.prompt + s->n_prefilled, n, logits, 0, &end->err) != CINFER_OK) {
            end->outcome = CINFER_OUTCOME_FAILED;
            return 1;
        }
        s->n_prefilled += n;
        if (last) {
            s->t_prefilled = s->now(s->now_user);
            atomic_store(&s->state, CINFER_STATE_RUNNING);
        }
        return 0;
    }
    default:
        return decode(e, s, end);
    }
}

/* Releases the native resources, records usage and the outcome, and lets go of s. */
static void settle(cinfer_engine *e, cinfer_session *s, step_end *end) {
    atomic_store(&s->state, CINFER_STATE_SETTLING);
    cf_seq_free(s->seq);
    cf_sampler_free(s->smp);
    cf_detok_free(s->detok);
    cf_stop_free(s->stop);
    free(s->logits);
    s->seq = NULL;
    s->smp = NULL;
    s->detok = NULL;
    s->stop = NULL;
    s->logits = NULL;

    double now = s->now(s->now_user);
    cinfer_usage *u = &s->result.usage;
    u->prompt_tokens = s->req.n_prompt;
    u->cached_tokens = 0;
    if (s->t_prep > 0) u->queue_s = s->t_prep - s->t_open;
    if (s->n_sampled > 0) u->ttft_s = s->t_first - s->t_open;
    if (s->t_prefilled > s->t_prep) u->prefill_tps = s->req.n_prompt / (s->t_prefilled - s->t_prep);
    if (s->n_sampled > 1 && s->t_last > s->t_first) u->decode_tps = (s->n_sampled - 1) / (s->t_last - s->t_first);
    u->total_s = now - s->t_open;
    s->result.seed = s->req.sp.seed;
    cf_session_finish(s, end->outcome, end->finish, &end->err);

    const cinfer_result *r = &s->result;
    if (r->outcome == CINFER_OUTCOME_FAILED)
        elog(e, "session %llu: failed after %zu tokens: %s", (unsigned long long)s->id, r->n_tokens, r->error.message);
    else
        elog(e, "session %llu: %s%s%s, %d prompt + %zu generated tokens, %.1f tokens/s", (unsigned long long)s->id,
             cinfer_outcome_name(r->outcome), r->outcome == CINFER_OUTCOME_CANCELLED ? " by " : " with ",
             r->outcome == CINFER_OUTCOME_CANCELLED ? cinfer_cancel_reason_name(r->cancel_reason) : cinfer_finish_name(r->finish),
             u->prompt_tokens, r->n_tokens, u->decode_tps);
    cf_session_release(s);
}

/* ---- the loop ---- */

static void *sched_main(void *arg) {
    cinfer_engine *e = arg;
    cinfer_session *active = NULL;
    pthread_mutex_lock(&e->mu);
    for (;;) {
        while (!e->closing && !e->head && !active) pthread_cond_wait(&e->cv, &e->mu);
        if (e->closing) {
            if (active) cf_session_request_cancel(active, CINFER_CANCEL_ENGINE_CLOSED);
            for (cinfer_session *s = e->head; s; s = s->next) cf_session_request_cancel(s, CINFER_CANCEL_ENGINE_CLOSED);
        }
        /* Waiting sessions that were cancelled leave the queue now, not when their turn comes. */
        cinfer_session *gone = NULL, **link = &e->head;
        e->tail = NULL;
        while (*link) {
            cinfer_session *s = *link;
            if (atomic_load(&s->cancel) != CINFER_CANCEL_NONE) {
                *link = s->next;
                s->next = gone;
                gone = s;
                e->n_queued--;
            } else {
                e->tail = s;
                link = &s->next;
            }
        }
        if (!active && e->head) {
            active = e->head;
            e->head = active->next;
            if (!e->head) e->tail = NULL;
            active->next = NULL;
            e->n_queued--;
        }
        pthread_mutex_unlock(&e->mu);

        while (gone) {
            cinfer_session *s = gone;
            gone = s->next;
            step_end end = {.outcome = CINFER_OUTCOME_CANCELLED};
            settle(e, s, &end);
        }
        if (active) {
            step_end end = {0};
            if (step(e, active, &end)) {
                settle(e, active, &end);
                active = NULL;
            }
        }

        pthread_mutex_lock(&e->mu);
        if (e->closing && !e->head && !active) break;
    }
    pthread_mutex_unlock(&e->mu);
    return NULL;
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
    if (m->engine)
        return cf_fail(err, CINFER_E_BUSY, "the model already has an engine; free it before creating another");
    cinfer_engine *e = calloc(1, sizeof *e);
    if (!e) return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory for the engine");
    e->model = m;
    e->p = *p;
    if (!e->p.now) e->p.now = monotonic_now;
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    int rc = pthread_create(&e->thread, NULL, sched_main, e);
    if (rc) {
        pthread_cond_destroy(&e->cv);
        pthread_mutex_destroy(&e->mu);
        free(e);
        return cf_fail(err, CINFER_E_INTERNAL, "cannot start the scheduler thread: %s", strerror(rc));
    }
    m->engine = e;
    *out = e;
    return CINFER_OK;
}

void cinfer_engine_free(cinfer_engine *e) {
    if (!e) return;
    pthread_mutex_lock(&e->mu);
    e->closing = 1;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
    pthread_join(e->thread, NULL);
    e->model->engine = NULL;
    pthread_cond_destroy(&e->cv);
    pthread_mutex_destroy(&e->mu);
    free(e);
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
    cinfer_status st = cf_plan_request(&q, &plan, err);
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
