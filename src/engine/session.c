/* session.c: one request's life as its consumer sees it: the published output (tokens, text, logprobs),
 * the three ways of consuming it (collect, pull, callback), cancellation, waiting and freeing. The
 * scheduler publishes through cf_session_publish / _finish / _release; everything shared is guarded by
 * the session's own mutex, so a session outlives its engine. */
#include "engine/engine.h"
#include "base/status.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

cinfer_session_params cinfer_session_default_params(void) {
    return (cinfer_session_params){.struct_size = sizeof(cinfer_session_params), .output = CINFER_OUTPUT_COLLECT};
}

void cf_session_request_cancel(cinfer_session *s, cinfer_cancel_reason r) {
    int none = CINFER_CANCEL_NONE;
    if (atomic_load(&s->state) != CINFER_STATE_TERMINAL) atomic_compare_exchange_strong(&s->cancel, &none, (int)r);
}

void cinfer_session_cancel(cinfer_session *s) {
    if (s) cf_session_request_cancel(s, CINFER_CANCEL_REQUESTED);
}

cinfer_session_state cinfer_session_get_state(const cinfer_session *s) {
    return s ? (cinfer_session_state)atomic_load(&((cinfer_session *)s)->state) : CINFER_STATE_TERMINAL;
}

const char *cinfer_session_plan(const cinfer_session *s) {
    return s ? s->plan.id : "";
}

int32_t cinfer_session_prompt_tokens(const cinfer_session *s) {
    return s ? s->req.n_prompt : 0;
}

/* Grows the byte buffer *p of *cap bytes to hold at least need bytes. */
static int grow(char **p, size_t *cap, size_t need) {
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    char *np = realloc(*p, c);
    if (!np) return -1;
    *p = np;
    *cap = c;
    return 0;
}

static int append_text(cinfer_session *s, const char *text, size_t len) {
    if (grow(&s->text, &s->text_cap, s->text_len + len + 1)) return -1;
    memcpy(s->text + s->text_len, text, len);
    s->text_len += len;
    s->text[s->text_len] = 0;
    return 0;
}

static size_t text_start(const cinfer_session *s, size_t i) {
    return i ? s->text_end[i - 1] : 0;
}

/* Room for need tokens in the per-token arrays. */
static int reserve_tokens(cinfer_session *s, size_t need) {
    if (need <= s->cap_tokens) return 0;
    size_t c = s->cap_tokens ? s->cap_tokens * 2 : 64;
    while (c < need) c *= 2;
    int32_t *t = realloc(s->tokens, c * sizeof *t);
    if (!t) return -1;
    s->tokens = t;
    size_t *e = realloc(s->text_end, c * sizeof *e);
    if (!e) return -1;
    s->text_end = e;
    if (s->req.sp.logprobs) {
        cinfer_logprobs *l = realloc(s->lp, c * sizeof *l);
        if (!l) return -1;
        s->lp = l;
    }
    s->cap_tokens = c;
    return 0;
}

cinfer_status cf_session_publish(cinfer_session *s, int32_t token, const cf_sample_result *sr, const char *text,
                                 size_t len, cinfer_error *err) {
    const int want_lp = s->req.sp.logprobs;
    pthread_mutex_lock(&s->mu);
    size_t n = s->n_tokens;
    if (reserve_tokens(s, n + 1) || append_text(s, text, len)) {
        pthread_mutex_unlock(&s->mu);
        return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory for the output of %zu tokens", n + 1);
    }
    s->tokens[n] = token;
    s->text_end[n] = s->text_len;
    if (want_lp) {
        cinfer_logprobs *lp = &s->lp[n];
        lp->token = token;
        lp->logprob = sr->logprob;
        lp->n_top = sr->n_top;
        for (int i = 0; i < sr->n_top; i++) lp->top[i] = (cinfer_token_logprob){sr->top[i].token, sr->top[i].logprob};
    }
    if (s->n_read == n) s->t_unread = s->now(s->now_user);
    s->n_tokens = n + 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);

    if (s->ctl.output == CINFER_OUTPUT_CALLBACK) {
        cinfer_event ev = {.kind = CINFER_EVENT_TOKEN, .index = (int32_t)n, .token = token, .text = text, .text_len = len,
                           .logprobs = want_lp ? &s->lp[n] : NULL};
        if (s->ctl.on_event(&ev, s->ctl.user)) cf_session_request_cancel(s, CINFER_CANCEL_CONSUMER_CLOSED);
    }
    return CINFER_OK;
}

cinfer_status cf_session_publish_tail(cinfer_session *s, const char *text, size_t len, cinfer_error *err) {
    if (!len) return CINFER_OK;
    pthread_mutex_lock(&s->mu);
    int oom = append_text(s, text, len);
    pthread_mutex_unlock(&s->mu);
    return oom ? cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory for the output text") : CINFER_OK;
}

void cf_session_finish(cinfer_session *s, cinfer_outcome o, cinfer_finish f, const cinfer_error *e) {
    pthread_mutex_lock(&s->mu);
    cinfer_result *r = &s->result;
    r->outcome = o;
    r->finish = o == CINFER_OUTCOME_COMPLETED ? f : CINFER_FINISH_NONE;
    r->cancel_reason = o == CINFER_OUTCOME_CANCELLED ? (cinfer_cancel_reason)atomic_load(&s->cancel) : CINFER_CANCEL_NONE;
    if (o == CINFER_OUTCOME_FAILED && e) r->error = *e;
    r->plan = s->plan.id;
    if (!s->text && append_text(s, "", 0)) {
        r->text = "";
        r->text_len = 0;
    } else {
        r->text = s->text;
        r->text_len = s->text_len;
    }
    r->tokens = s->tokens;
    r->n_tokens = s->n_tokens;
    r->logprobs = s->req.sp.logprobs ? s->lp : NULL;
    r->usage.completion_tokens = (int32_t)s->n_tokens;
    atomic_store(&s->state, CINFER_STATE_TERMINAL);
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

void cf_session_release(cinfer_session *s) {
    if (s->ctl.output == CINFER_OUTPUT_CALLBACK && !s->orphaned) {
        size_t start = text_start(s, s->n_tokens);
        cinfer_event ev = {.kind = CINFER_EVENT_END, .index = (int32_t)s->n_tokens, .token = -1,
                           .text = s->text ? s->text + start : "", .text_len = s->text_len - start};
        s->ctl.on_event(&ev, s->ctl.user);
    }
    pthread_mutex_lock(&s->mu);
    int orphaned = s->orphaned;
    s->released = 1;
    s->engine = NULL;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    if (orphaned) cf_session_destroy(s);
}

/* Waits on s->cv until *deadline (CLOCK_MONOTONIC); NULL waits without limit. Returns ETIMEDOUT. */
static int timed_wait(cinfer_session *s, const struct timespec *deadline) {
    if (!deadline) return pthread_cond_wait(&s->cv, &s->mu);
    return pthread_cond_timedwait(&s->cv, &s->mu, deadline);
}

static struct timespec deadline_after(double seconds) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    if (seconds > 1e9) seconds = 1e9;
    double whole = floor(seconds);
    ts.tv_sec += (time_t)whole;
    ts.tv_nsec += (long)((seconds - whole) * 1e9);
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

/* Copies text into the consumer's event buffer. */
static int event_text(cinfer_session *s, cinfer_event *ev, size_t start, size_t end) {
    if (grow(&s->ev_text, &s->ev_cap, end - start + 1)) return -1;
    memcpy(s->ev_text, s->text + start, end - start);
    s->ev_text[end - start] = 0;
    ev->text = s->ev_text;
    ev->text_len = end - start;
    return 0;
}

cinfer_status cinfer_session_next(cinfer_session *s, cinfer_event *ev, double timeout, cinfer_error *err) {
    if (!s || !ev) return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "cinfer_session_next needs a session and an event");
    if (s->ctl.output != CINFER_OUTPUT_PULL)
        return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "cinfer_session_next needs a session opened with CINFER_OUTPUT_PULL");
    if (isnan(timeout)) return cf_fail(err, CINFER_E_NOT_A_NUMBER, "the timeout is NaN");
    struct timespec dl = deadline_after(timeout > 0 ? timeout : 0);
    cinfer_status st = CINFER_OK;
    memset(ev, 0, sizeof *ev);
    pthread_mutex_lock(&s->mu);
    for (;;) {
        if (s->n_read < s->n_tokens) {
            size_t i = s->n_read;
            if (event_text(s, ev, text_start(s, i), s->text_end[i])) {
                st = cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory for an event's text");
                break;
            }
            ev->kind = CINFER_EVENT_TOKEN;
            ev->index = (int32_t)i;
            ev->token = s->tokens[i];
            if (s->req.sp.logprobs) {
                s->ev_lp = s->lp[i];
                ev->logprobs = &s->ev_lp;
            }
            s->n_read = i + 1;
            s->t_unread = s->now(s->now_user);
            break;
        }
        if (atomic_load(&s->state) == CINFER_STATE_TERMINAL) {
            if (event_text(s, ev, s->end_read ? s->text_len : text_start(s, s->n_tokens), s->text_len)) {
                st = cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory for an event's text");
                break;
            }
            ev->kind = CINFER_EVENT_END;
            ev->index = (int32_t)s->n_tokens;
            ev->token = -1;
            s->end_read = 1;
            break;
        }
        if (timeout == 0 || timed_wait(s, timeout < 0 ? NULL : &dl) == ETIMEDOUT) {
            st = cf_fail(err, CINFER_E_TIMEOUT, "no event within %g s", timeout);
            break;
        }
    }
    pthread_mutex_unlock(&s->mu);
    return st;
}

cinfer_status cinfer_session_wait(cinfer_session *s, double timeout, const cinfer_result **result, cinfer_error *err) {
    if (!s || !result) return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "cinfer_session_wait needs a session and a result pointer");
    if (isnan(timeout)) return cf_fail(err, CINFER_E_NOT_A_NUMBER, "the timeout is NaN");
    *result = NULL;
    struct timespec dl = deadline_after(timeout > 0 ? timeout : 0);
    cinfer_status st = CINFER_OK;
    pthread_mutex_lock(&s->mu);
    while (atomic_load(&s->state) != CINFER_STATE_TERMINAL || (s->ctl.output == CINFER_OUTPUT_CALLBACK && !s->released)) {
        if (timeout == 0 || timed_wait(s, timeout < 0 ? NULL : &dl) == ETIMEDOUT) {
            st = cf_fail(err, CINFER_E_TIMEOUT, "the session did not end within %g s", timeout);
            break;
        }
    }
    if (st == CINFER_OK) *result = &s->result;
    pthread_mutex_unlock(&s->mu);
    return st;
}

void cf_session_destroy(cinfer_session *s) {
    cf_request_free(&s->req);
    free(s->tokens);
    free(s->text_end);
    free(s->lp);
    free(s->text);
    free(s->ev_text);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

void cinfer_session_free(cinfer_session *s) {
    if (!s) return;
    cf_session_request_cancel(s, CINFER_CANCEL_CONSUMER_CLOSED);
    pthread_mutex_lock(&s->mu);
    if (!s->released && pthread_equal(pthread_self(), s->sched_thread)) {
        /* Called from a callback on the engine's thread: the engine frees it once it lets go. */
        s->orphaned = 1;
        pthread_mutex_unlock(&s->mu);
        return;
    }
    while (!s->released) pthread_cond_wait(&s->cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
    cf_session_destroy(s);
}

const char *cinfer_state_name(cinfer_session_state s) {
    static const char *const n[] = {"created", "preparing", "running", "settling", "terminal"};
    return (unsigned)s < sizeof n / sizeof n[0] ? n[s] : "unknown";
}

const char *cinfer_outcome_name(cinfer_outcome o) {
    static const char *const n[] = {"none", "completed", "cancelled", "failed"};
    return (unsigned)o < sizeof n / sizeof n[0] ? n[o] : "unknown";
}

const char *cinfer_finish_name(cinfer_finish f) {
    static const char *const n[] = {"none", "stop", "length"};
    return (unsigned)f < sizeof n / sizeof n[0] ? n[f] : "unknown";
}

const char *cinfer_cancel_reason_name(cinfer_cancel_reason r) {
    static const char *const n[] = {"none", "requested", "consumer_closed", "consumer_idle", "engine_closed"};
    return (unsigned)r < sizeof n / sizeof n[0] ? n[r] : "unknown";
}
