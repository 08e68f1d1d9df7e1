/* server_gen.c: the generation routes (chat completions, completions, messages): the request parsed by
 * api.h, one engine session per choice in CALLBACK mode whose events are copied into a queue on the
 * engine's thread (which does nothing slower), the writer run on the connection's thread, and the
 * connection suspended whenever it has nothing to send, so neither a stream nor a slow client holds a
 * thread. A generation is freed by whichever drops its last reference: MHD completing the request or the
 * END of its last session. */
#define _GNU_SOURCE
#include "server/server_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

static void random_id(char *out, size_t cap, const char *prefix) {
    static const char alphabet[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    static _Atomic unsigned long counter;
    unsigned char rnd[24];
    if (getrandom(rnd, sizeof rnd, GRND_NONBLOCK) != (ssize_t)sizeof rnd) {
        unsigned long x = (unsigned long)time(NULL) * 2654435761u ^ atomic_fetch_add(&counter, 1) * 0x9e3779b97f4a7c15ull;
        for (size_t i = 0; i < sizeof rnd; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            rnd[i] = (unsigned char)x;
        }
    }
    size_t n = (size_t)snprintf(out, cap, "%s", prefix);
    for (size_t i = 0; i < sizeof rnd && n + 1 < cap; i++) out[n++] = alphabet[rnd[i] % (sizeof alphabet - 1)];
    out[n] = 0;
}

/* ---- under g->mu ---- */

static int writable(const cf_gen *g) { return !g->conn_gone && !g->broken && !g->discard; }

static void cancel_locked(cf_gen *g) {
    g->cancelled = 1;
    for (int i = 0; i < g->n_ch; i++)
        if (g->ch[i].s && !g->ch[i].ended) cinfer_session_cancel(g->ch[i].s);
}

static void broke(cf_gen *g) {
    g->broken = 1;
    cancel_locked(g);
}

/* Whether the connection has something to do and MHD holds it suspended: the caller then resumes it,
 * after releasing g->mu (MHD's own locks are never taken under it). The connection stays suspended, so g
 * stays alive, until then. */
static int wake(cf_gen *g) {
    if (!g->suspended || g->resume_asked) return 0;
    int ready = g->stream ? g->pend.n || g->n_ended > g->n_closed || g->broken : g->n_ended == g->n_open;
    if (ready) g->resume_asked = 1;
    return ready;
}

/* Copies ev into q; -1 when memory runs out. */
static int queue_event(cf_pending_queue *q, int choice, const cinfer_event *ev) {
    if (q->n == q->cap) {
        size_t cap = q->cap ? q->cap * 2 : 16;
        cf_pending *items = realloc(q->items, cap * sizeof *items);
        if (!items) return -1;
        q->items = items;
        q->cap = cap;
    }
    cf_pending *p = &q->items[q->n];
    p->choice = choice;
    p->ev = *ev;
    p->text_off = q->text.len;
    p->has_lp = ev->logprobs != NULL;
    if (p->has_lp) p->lp = *ev->logprobs;
    if (ev->text_len && cf_buf_append(&q->text, ev->text, ev->text_len)) return -1;
    q->n++;
    return 0;
}

static void queue_free(cf_pending_queue *q) {
    free(q->items);
    cf_buf_free(&q->text);
}

/* On the connection's MHD thread, which may suspend it only from its callbacks. */
static void suspend(cf_gen *g) {
    g->suspended = 1;
    atomic_fetch_add(&g->srv->n_suspended, 1);
    MHD_suspend_connection(g->mc);
}

static void mark_resumed(cf_gen *g) {
    if (!g->suspended) return;
    g->suspended = g->resume_asked = 0;
    atomic_fetch_sub(&g->srv->n_suspended, 1);
}

/* A choice's result: metrics, token counts, and whether it was cancelled (a non-streaming answer is then
 * an error: the connection is alive, so the server is stopping). */
static void account(cf_gen *g, const cinfer_result *res) {
    cf_metrics *m = &g->srv->metrics;
    g->prompt_tokens += res->usage.prompt_tokens;
    g->completion_tokens += res->usage.completion_tokens;
    cf_gen_outcome o = res->outcome == CINFER_OUTCOME_COMPLETED ? CF_GEN_COMPLETED
                       : res->outcome == CINFER_OUTCOME_FAILED  ? CF_GEN_FAILED
                                                                : CF_GEN_CANCELLED;
    cf_metrics_generation(m, o, res->usage.prompt_tokens, res->usage.cached_tokens);
    cf_metrics_drafts(m, res->usage.draft_tokens, res->usage.accepted_tokens);
    if (o == CF_GEN_CANCELLED) g->stopped = 1;
}

/* ---- life ---- */

/* Unlinked first, under the server's lock: cf_server_stop walks the list under it and cancels what it finds,
 * so nothing of g may be freed while g can still be found there. */
static void gen_free(cf_gen *g) {
    cf_server *s = g->srv;
    pthread_mutex_lock(&s->mu);
    if (g->prev) g->prev->next = g->next;
    else s->gens = g->next;
    if (g->next) g->next->prev = g->prev;
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < g->n_ch; i++) {
        if (g->ch[i].s && !g->ch[i].closed) cf_metrics_generation(&s->metrics, CF_GEN_CANCELLED, 0, 0);
        cinfer_session_free(g->ch[i].s);
    }
    cf_api_writer_free(g->w);
    cf_api_request_free(g->api);
    queue_free(&g->pend);
    queue_free(&g->spare);
    cf_buf_free(&g->out);
    free(g->ch);
    free(g->model_name);
    pthread_mutex_destroy(&g->mu);
    free(g);
    pthread_mutex_lock(&s->mu);
    s->n_gens--;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

/* Drops a reference; g->mu is held on entry and released. */
static void unref_unlock(cf_gen *g) {
    int last = --g->refs == 0;
    pthread_mutex_unlock(&g->mu);
    if (last) gen_free(g);
}

/* A new generation registered with the server (NULL when it is stopping or memory runs out; *api is then
 * still the caller's). */
static cf_gen *gen_create(cf_req *r, cf_api_request *api, int *stopping) {
    cf_server *s = r->srv;
    cf_gen *g = calloc(1, sizeof *g);
    cf_choice *ch = calloc((size_t)api->n_reqs, sizeof *ch);
    char *name = strdup(api->model && *api->model ? api->model : s->model_name);
    if (!g || !ch || !name) {
        free(g);
        free(ch);
        free(name);
        return NULL;
    }
    pthread_mutex_init(&g->mu, NULL);
    g->srv = s;
    g->mc = r->mc;
    g->kind = cf_route_api(r->route);
    g->api = api;
    g->ch = ch;
    g->n_ch = api->n_reqs;
    g->refs = 1;
    g->stream = api->stream;
    g->t_start = r->t_start;
    g->model_name = name;
    random_id(g->id, sizeof g->id, g->kind == CF_API_MESSAGES ? "msg_" : g->kind == CF_API_CHAT ? "chatcmpl-" : "cmpl-");
    snprintf(g->fingerprint, sizeof g->fingerprint, "fp_cinfer%d", CINFER_API_VERSION);
    for (int i = 0; i < g->n_ch; i++) ch[i] = (cf_choice){.g = g, .index = i};
    pthread_mutex_lock(&s->mu);
    *stopping = s->stopping;
    if (!*stopping) {
        g->next = s->gens;
        if (s->gens) s->gens->prev = g;
        s->gens = g;
        s->n_gens++;
        if (r->conn) r->conn->gen = g;
    }
    pthread_mutex_unlock(&s->mu);
    if (*stopping) {
        g->api = NULL;
        pthread_mutex_destroy(&g->mu);
        free(ch);
        free(name);
        free(g);
        return NULL;
    }
    return g;
}

/* ---- the engine's thread ---- */

static int on_event(const cinfer_event *ev, void *user) {
    cf_choice *c = user;
    cf_gen *g = c->g;
    cf_metrics *m = &g->srv->metrics;
    const double now = cf_monotonic_seconds();
    pthread_mutex_lock(&g->mu);
    if (ev->kind == CINFER_EVENT_TOKEN) {
        cf_metrics_tokens(m, 1);
        if (!c->n_tokens) cf_metrics_ttft(m, now - g->t_start);
        else cf_metrics_itl(m, now - c->t_last);
        c->n_tokens++;
        c->t_last = now;
    }
    /* a whole answer is made from the results alone: only streams take the events */
    if (g->stream && writable(g) && queue_event(&g->pend, c->index, ev)) broke(g);
    const int cancel = g->cancelled;
    struct MHD_Connection *mc = g->mc;
    if (ev->kind != CINFER_EVENT_END) {
        int resume = wake(g);
        pthread_mutex_unlock(&g->mu);
        if (resume) MHD_resume_connection(mc);
        return cancel;
    }
    c->ended = 1;
    g->n_ended++;
    int resume = wake(g);
    g->refs--;  /* a connection to resume still holds its reference, so g outlives the resume */
    if (!g->refs) {
        pthread_mutex_unlock(&g->mu);
        gen_free(g);
        return 0;
    }
    pthread_mutex_unlock(&g->mu);
    if (resume) MHD_resume_connection(mc);
    return 0;
}

/* ---- the connection's MHD thread ---- */

/* Writes the queued events, then ends the choices whose END was among them (their results, read once
 * the engine let go of them), then the response once every choice has ended. The writer and g->out are
 * this thread's: only the flags shared with the engine's thread are taken under g->mu. */
static void write_ready(cf_gen *g) {
    pthread_mutex_lock(&g->mu);
    cf_pending_queue q = g->pend;
    g->pend = g->spare;
    for (int i = 0; i < g->n_ch; i++) g->ch[i].closable = g->ch[i].ended;
    int ok = writable(g);
    pthread_mutex_unlock(&g->mu);
    for (size_t i = 0; i < q.n && ok; i++) {
        cf_pending *p = &q.items[i];
        cinfer_event ev = p->ev;
        ev.text = p->ev.text_len ? q.text.data + p->text_off : "";
        ev.logprobs = p->has_lp ? &p->lp : NULL;
        ok = cf_api_writer_event(g->w, p->choice, &ev, &g->out) == CINFER_OK;
    }
    q.n = 0;
    q.text.len = 0;
    pthread_mutex_lock(&g->mu);
    g->spare = q;
    if (!ok && writable(g)) broke(g);
    for (;;) {
        cf_choice *c = NULL;
        for (int i = 0; i < g->n_ch && !c; i++)
            if (g->ch[i].closable && !g->ch[i].closed) c = &g->ch[i];
        if (!c) break;
        pthread_mutex_unlock(&g->mu);
        const cinfer_result *res = NULL;
        cinfer_session_wait(c->s, -1, &res, NULL);
        pthread_mutex_lock(&g->mu);
        c->closed = 1;
        g->n_closed++;
        account(g, res);
        ok = writable(g);
        pthread_mutex_unlock(&g->mu);
        if (ok && cf_api_writer_end_choice(g->w, c->index, res, &g->out) != CINFER_OK) ok = 0;
        pthread_mutex_lock(&g->mu);
        if (!ok && writable(g)) broke(g);
    }
    const int finish = g->n_closed == g->n_ch && !g->finished && writable(g);
    if (finish) g->finished = 1;
    pthread_mutex_unlock(&g->mu);
    if (finish && cf_api_writer_finish(g->w, &g->out) != CINFER_OK) {
        pthread_mutex_lock(&g->mu);
        broke(g);
        pthread_mutex_unlock(&g->mu);
    }
}

static ssize_t read_stream(void *cls, uint64_t pos, char *buf, size_t max) {
    cf_gen *g = cls;
    pthread_mutex_lock(&g->mu);
    mark_resumed(g);
    pthread_mutex_unlock(&g->mu);
    for (;;) {
        write_ready(g);
        pthread_mutex_lock(&g->mu);
        if (g->out.len && !g->broken) {
            pthread_mutex_unlock(&g->mu);
            size_t n = g->out.len < max ? g->out.len : max;
            memcpy(buf, g->out.data, n);
            cf_buf_consume(&g->out, n);
            return (ssize_t)n;
        }
        ssize_t end = g->broken || g->conn_gone ? MHD_CONTENT_READER_END_WITH_ERROR
                      : g->finished             ? MHD_CONTENT_READER_END_OF_STREAM
                                                : 0;
        int again = !end && (g->pend.n || g->n_ended > g->n_closed);
        if (!end && !again) suspend(g);
        pthread_mutex_unlock(&g->mu);
        if (!again) return end;
    }
}

/* A non-streaming answer once every choice has ended: the body, in the status the writer gives it (an
 * error body when a choice failed). */
static enum MHD_Result answer_whole(cf_req *r) {
    cf_gen *g = r->gen;
    write_ready(g);
    pthread_mutex_lock(&g->mu);
    const int stopped = g->stopped, hung_up = g->hung_up, ok = !g->broken && g->finished && g->out.len;
    pthread_mutex_unlock(&g->mu);
    if (hung_up) {
        enum MHD_Result res = cf_respond_error(r, 503, NULL, "the request was cancelled: the client hung up");
        r->status = 499;
        return res;
    }
    if (stopped) return cf_respond_error(r, 503, NULL, "the request was cancelled: the server is stopping");
    if (!ok) return cf_respond_error(r, 500, NULL, "the response could not be written (out of memory)");
    return cf_respond(r, cf_api_writer_http_status(g->w), "application/json", g->out.data, g->out.len);
}

enum MHD_Result cf_gen_resumed(cf_req *r) {
    pthread_mutex_lock(&r->gen->mu);
    mark_resumed(r->gen);
    pthread_mutex_unlock(&r->gen->mu);
    return answer_whole(r);
}

static enum MHD_Result respond_api_error(cf_req *r, const cf_api_error *e) {
    char *json = cf_api_error_json(cf_route_api(r->route), e);
    if (!json) return MHD_NO;
    enum MHD_Result ok = cf_respond(r, e->status, "application/json", json, (size_t)-1);
    free(json);
    return ok;
}

/* Opens a session per choice; on a refusal, cancels those opened and returns the refusal. */
static cinfer_status open_sessions(cf_gen *g, cinfer_engine *e, cinfer_error *err) {
    cinfer_session_params sp = cinfer_session_default_params();
    sp.output = CINFER_OUTPUT_CALLBACK;
    sp.on_event = on_event;
    for (int i = 0; i < g->n_ch; i++) {
        pthread_mutex_lock(&g->mu);
        g->refs++;
        g->n_open++;
        pthread_mutex_unlock(&g->mu);
        sp.user = &g->ch[i];
        cinfer_session *s = NULL;
        cinfer_status st = cinfer_session_open(e, &g->api->reqs[i], &sp, &s, err);
        pthread_mutex_lock(&g->mu);
        if (st != CINFER_OK) {
            g->refs--;
            g->n_open--;
            g->discard = 1;
            cancel_locked(g);
            pthread_mutex_unlock(&g->mu);
            return st;
        }
        g->ch[i].s = s;
        if (g->cancelled) cinfer_session_cancel(s);
        pthread_mutex_unlock(&g->mu);
    }
    return CINFER_OK;
}

enum MHD_Result cf_gen_start(cf_req *r) {
    cf_server *s = r->srv;
    cinfer_model *m = atomic_load(&s->model);
    cinfer_engine *e = atomic_load(&s->engine);
    const cf_api_kind kind = cf_route_api(r->route);
    const cf_api_limits lim = {.max_tokens_cap = s->p.max_tokens_cap, .max_choices = s->p.max_choices, .max_tools = 128};
    cf_api_request *api = NULL;
    cf_api_error ae = {0};
    if (cf_api_parse(kind, r->body.data ? r->body.data : "", r->body.len, &lim, m, &api, &ae)) return respond_api_error(r, &ae);
    int stopping = 0;
    cf_gen *g = gen_create(r, api, &stopping);
    if (!g) {
        cf_api_request_free(api);
        return stopping ? cf_respond_error(r, 503, NULL, "the server is shutting down")
                        : cf_respond_error(r, 500, NULL, "out of memory for the request");
    }
    r->gen = g;
    const cf_api_meta meta = {.id = g->id, .created = (int64_t)time(NULL), .model = g->model_name,
                              .fingerprint = g->fingerprint, .m = m};
    cinfer_error err = {0};
    cinfer_status st = cf_api_writer_create(api, &meta, &g->w, &err);
    if (st != CINFER_OK) {
        g->discard = 1;
        return cf_respond_error(r, 500, NULL, "cannot write the response: %s", err.message);
    }
    st = open_sessions(g, e, &err);
    if (st != CINFER_OK) {
        cf_api_error_from_status(kind, st, err.message, &ae);
        return respond_api_error(r, &ae);
    }
    /* The sessions' events wait in their queues until this thread drains them, after the first bytes. */
    for (int i = 0; i < g->n_ch; i++) cf_api_writer_set_prompt_tokens(g->w, i, cinfer_session_prompt_tokens(g->ch[i].s));
    if (g->stream && cf_api_writer_begin(g->w, &g->out) != CINFER_OK) {
        pthread_mutex_lock(&g->mu);
        g->discard = 1;
        cancel_locked(g);
        pthread_mutex_unlock(&g->mu);
        return cf_respond_error(r, 500, NULL, "cannot write the response (out of memory)");
    }
    if (g->stream) {
        struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, read_stream, g, NULL);
        if (!resp) return MHD_NO;
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
        MHD_add_response_header(resp, "X-Accel-Buffering", "no");
        enum MHD_Result ok = MHD_queue_response(r->mc, 200, resp);
        MHD_destroy_response(resp);
        r->status = 200;
        r->answered = 1;
        return ok;
    }
    pthread_mutex_lock(&g->mu);
    if (g->n_ended < g->n_open) {
        suspend(g);
        pthread_mutex_unlock(&g->mu);
        return MHD_YES;
    }
    pthread_mutex_unlock(&g->mu);
    return answer_whole(r);
}

void cf_gen_detach(cf_gen *g) {
    pthread_mutex_lock(&g->mu);
    mark_resumed(g);  /* MHD may close a resumed connection without calling back first */
    g->conn_gone = 1;
    cancel_locked(g);
    unref_unlock(g);
}

void cf_gen_cancel(cf_gen *g, int client_gone) {
    pthread_mutex_lock(&g->mu);
    g->hung_up |= client_gone;
    cancel_locked(g);
    pthread_mutex_unlock(&g->mu);
}
