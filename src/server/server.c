/* server.c: the server's life (start, attach, stop), libmicrohttpd's request callbacks (headers, body,
 * completion), routing, authentication, the body limit and the request log. */
#define _GNU_SOURCE
#include "server/server_impl.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "base/status.h"

cf_server_params cf_server_default_params(void) {
    return (cf_server_params){.host = "127.0.0.1",
                              .port = 8080,
                              .model_name = "cinfer",
                              .max_connections = 256,
                              .max_body = 8u << 20,
                              .max_tokens_cap = 4096,
                              .max_choices = 16,
                              .idle_timeout_s = 60,
                              .header_timeout_s = 10,
                              .body_timeout_s = 60,
                              .threads = 2,
                              .log_requests = 1};
}

/* ---- responses ---- */

cf_api_kind cf_route_api(cf_route r) { return r == CF_ROUTE_MESSAGES ? CF_API_MESSAGES : r == CF_ROUTE_COMPLETIONS ? CF_API_COMPLETIONS : CF_API_CHAT; }

enum MHD_Result cf_respond(cf_req *r, int status, const char *content_type, const char *body, size_t len) {
    if (len == (size_t)-1) len = strlen(body);
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!resp) return MHD_NO;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
    if (status == 405) {
        const char *allow = r->route == CF_ROUTE_CHAT || r->route == CF_ROUTE_COMPLETIONS || r->route == CF_ROUTE_MESSAGES ||
                                    r->route == CF_ROUTE_TOKENIZE || r->route == CF_ROUTE_DETOKENIZE
                                ? "POST"
                                : "GET, HEAD";
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, allow);
    }
    if (status == 401)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    if (status == 503 || status == 429) MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, "1");
    enum MHD_Result ok = MHD_queue_response(r->mc, (unsigned)status, resp);
    MHD_destroy_response(resp);
    r->status = status;
    r->answered = 1;
    return ok;
}

enum MHD_Result cf_respond_error(cf_req *r, int status, const char *param, const char *fmt, ...) {
    cf_api_error e = {.status = status};
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e.message, sizeof e.message, fmt, ap);
    va_end(ap);
    snprintf(e.param, sizeof e.param, "%s", param ? param : "");
    char *json = cf_api_error_json(cf_route_api(r->route), &e);
    if (!json) return MHD_NO;
    enum MHD_Result ok = cf_respond(r, status, "application/json", json, (size_t)-1);
    free(json);
    return ok;
}

/* ---- routing ---- */

static cf_route route_of(const char *url, const char **model_id) {
    static const struct { const char *path; cf_route r; } routes[] = {
        {"/v1/chat/completions", CF_ROUTE_CHAT}, {"/v1/completions", CF_ROUTE_COMPLETIONS},
        {"/v1/messages", CF_ROUTE_MESSAGES},     {"/v1/models", CF_ROUTE_MODELS},
        {"/health", CF_ROUTE_HEALTH},            {"/metrics", CF_ROUTE_METRICS},
        {"/tokenize", CF_ROUTE_TOKENIZE},        {"/detokenize", CF_ROUTE_DETOKENIZE},
        {"/", CF_ROUTE_PAGE},                    {"/index.html", CF_ROUTE_PAGE},
        {"/chat/completions", CF_ROUTE_CHAT},    {"/completions", CF_ROUTE_COMPLETIONS},
    };
    *model_id = NULL;
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
        if (!strcmp(url, routes[i].path)) return routes[i].r;
    if (!strncmp(url, "/v1/models/", 11) && url[11]) {
        *model_id = url + 11;
        return CF_ROUTE_MODELS;
    }
    return CF_ROUTE_OTHER;
}

static int route_is_post(cf_route r) {
    return r == CF_ROUTE_CHAT || r == CF_ROUTE_COMPLETIONS || r == CF_ROUTE_MESSAGES || r == CF_ROUTE_TOKENIZE ||
           r == CF_ROUTE_DETOKENIZE;
}

/* Equal strings, in time that depends on the key's length only. */
static int key_matches(const char *key, const char *given) {
    size_t kl = strlen(key), gl = given ? strlen(given) : 0;
    unsigned diff = (unsigned)(kl != gl) | (unsigned)!given;
    for (size_t i = 0; i < kl; i++) diff |= (unsigned char)key[i] ^ (unsigned char)(i < gl ? given[i] : 0);
    return diff == 0;
}

static int authorized(const cf_req *r) {
    const cf_server *s = r->srv;
    if (!s->api_key || r->route == CF_ROUTE_HEALTH || r->route == CF_ROUTE_PAGE) return 1;
    const char *auth = MHD_lookup_connection_value(r->mc, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    const char *xkey = MHD_lookup_connection_value(r->mc, MHD_HEADER_KIND, "x-api-key");
    int ok = 0;
    if (auth && !strncasecmp(auth, "Bearer ", 7)) ok |= key_matches(s->api_key, auth + 7);
    if (xkey) ok |= key_matches(s->api_key, xkey);
    return ok;
}

static void set_phase(cf_server *s, cf_conn *c, cf_conn_phase ph) {
    if (!c) return;
    pthread_mutex_lock(&s->mu);
    c->phase = ph;
    c->t_phase = cf_monotonic_seconds();
    pthread_mutex_unlock(&s->mu);
}

/* The request is complete: answer it. */
static enum MHD_Result dispatch(cf_req *r) {
    cf_server *s = r->srv;
    set_phase(s, r->conn, CF_CONN_BUSY);
    switch (r->route) {
    case CF_ROUTE_HEALTH: return cf_route_health(r);
    case CF_ROUTE_PAGE: return cf_route_page(r);
    case CF_ROUTE_METRICS: return cf_route_metrics(r);
    case CF_ROUTE_MODELS: return cf_route_models(r, r->model_id);
    default: break;
    }
    if (!atomic_load(&s->model)) return cf_respond_error(r, 503, NULL, "the model is still loading; try again shortly");
    switch (r->route) {
    case CF_ROUTE_TOKENIZE: return cf_route_tokenize(r);
    case CF_ROUTE_DETOKENIZE: return cf_route_detokenize(r);
    default: return cf_gen_start(r);
    }
}

/* The first call for a request: its headers are in. Refusals that need no body happen here, before any
 * of it is read (MHD then closes the connection instead of reading the rest). */
static enum MHD_Result on_headers(cf_req *r, const char *method) {
    cf_server *s = r->srv;
    const int is_get = !strcmp(method, "GET") || !strcmp(method, "HEAD"), is_post = !strcmp(method, "POST");
    if (r->route == CF_ROUTE_OTHER) return cf_respond_error(r, 404, NULL, "no route for %s %s", method, r->path);
    if (route_is_post(r->route) ? !is_post : !is_get)
        return cf_respond_error(r, 405, NULL, "%s does not take %s (use %s)", r->path, method,
                                route_is_post(r->route) ? "POST" : "GET");
    if (!authorized(r)) return cf_respond_error(r, 401, NULL, "invalid or missing API key (send Authorization: Bearer KEY)");
    const char *cl = MHD_lookup_connection_value(r->mc, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl) {
        char *end;
        errno = 0;
        unsigned long long n = strtoull(cl, &end, 10);
        if (errno || *end || end == cl || n > s->p.max_body)
            return cf_respond_error(r, 413, NULL, "the request body is %s bytes; the limit is %zu", cl, s->p.max_body);
    }
    pthread_mutex_lock(&s->mu);
    int stopping = s->stopping;
    pthread_mutex_unlock(&s->mu);
    if (stopping) return cf_respond_error(r, 503, NULL, "the server is shutting down");
    return MHD_YES;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *mc, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_size, void **con_cls) {
    cf_server *s = cls;
    cf_req *r = *con_cls;
    if (!r) {
        r = calloc(1, sizeof *r);
        if (!r) return MHD_NO;
        r->srv = s;
        r->mc = mc;
        r->t_start = cf_monotonic_seconds();
        snprintf(r->method, sizeof r->method, "%s", method);
        snprintf(r->path, sizeof r->path, "%s", url);
        r->route = route_of(r->path, &r->model_id);
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(mc, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
        r->conn = ci ? ci->socket_context : NULL;
        set_phase(s, r->conn, CF_CONN_BODY);
        cf_metrics_in_flight(&s->metrics, 1);
        *con_cls = r;
        return on_headers(r, method);
    }
    if (r->gen) return cf_gen_resumed(r);
    if (r->answered) {
        *upload_size = 0;  /* a refused request's body: MHD closes the connection after the answer */
        return MHD_YES;
    }
    if (*upload_size) {
        if (r->body.len + *upload_size > s->p.max_body) {
            /* A body without Content-Length (chunked) passing the limit: libmicrohttpd cannot answer in the
             * middle of a body, so the connection is closed without reading the rest. */
            r->status = 413;
            return MHD_NO;
        }
        if (cf_buf_append(&r->body, upload_data, *upload_size)) return MHD_NO;
        *upload_size = 0;
        return MHD_YES;
    }
    return dispatch(r);
}

/* Up to 4 KiB of the body on one line: control bytes escaped. */
static void log_body(char *out, size_t cap, const cf_buf *body) {
    size_t n = 0;
    for (size_t i = 0; i < body->len && i < 4096 && n + 5 < cap; i++) {
        unsigned char c = (unsigned char)body->data[i];
        if (c < 0x20 || c == 0x7f) n += (size_t)snprintf(out + n, cap - n, "\\x%02x", c);
        else out[n++] = (char)c;
    }
    out[n] = 0;
}

static void log_request(const cf_req *r, enum MHD_RequestTerminationCode toe) {
    const cf_server *s = r->srv;
    if (!s->p.log_requests) return;
    char tokens[64] = "";
    if (r->gen || r->prompt_tokens || r->completion_tokens)
        snprintf(tokens, sizeof tokens, " %d+%d tokens", r->prompt_tokens, r->completion_tokens);
    const char *how = toe == MHD_REQUEST_TERMINATED_COMPLETED_OK        ? ""
                      : toe == MHD_REQUEST_TERMINATED_CLIENT_ABORT       ? " (client closed)"
                      : toe == MHD_REQUEST_TERMINATED_TIMEOUT_REACHED    ? " (timed out)"
                      : toe == MHD_REQUEST_TERMINATED_DAEMON_SHUTDOWN    ? " (server stopped)"
                                                                         : " (connection failed)";
    static char body[4 * 4096 + 16];  /* under log_mu */
    static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&log_mu);
    body[0] = 0;
    if (s->p.log_prompts && r->body.len) log_body(body, sizeof body, &r->body);
    fprintf(stderr, "cinfer serve: %s %s %d%s %.3f s%s%s%s\n", r->method, r->path, r->status, tokens, cf_monotonic_seconds() - r->t_start,
            how, body[0] ? " body " : "", body);
    pthread_mutex_unlock(&log_mu);
}

static void on_completed(void *cls, struct MHD_Connection *mc, void **con_cls, enum MHD_RequestTerminationCode toe) {
    cf_server *s = cls;
    cf_req *r = *con_cls;
    if (!r) return;
    *con_cls = NULL;
    pthread_mutex_lock(&s->mu);
    if (r->conn) {
        r->conn->gen = NULL;
        r->conn->phase = CF_CONN_WAITING;
        r->conn->t_mark = cf_monotonic_seconds();
        r->conn->kept_alive = 1;
    }
    pthread_mutex_unlock(&s->mu);
    if (r->gen) {
        r->prompt_tokens = r->gen->prompt_tokens;
        r->completion_tokens = r->gen->completion_tokens;
        cf_gen_detach(r->gen);
    }
    if (!r->status) r->status = toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? 500 : 499;  /* 499: the client closed first */
    cf_metrics_request(&s->metrics, r->route, r->status);
    cf_metrics_in_flight(&s->metrics, -1);
    log_request(r, toe);
    cf_buf_free(&r->body);
    free(r);
}

/* ---- life ---- */

static void mhd_log(void *cls, const char *fmt, va_list ap) {
    const cf_server *s = cls;
    if (!s->p.log_http) return;
    char line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    size_t n = strlen(line);
    while (n && line[n - 1] == '\n') line[--n] = 0;
    fprintf(stderr, "cinfer serve: libmicrohttpd: %s\n", line);
}

static char *dup_or_null(const char *s) { return s && *s ? strdup(s) : NULL; }

static void server_free(cf_server *s) {
    cf_metrics_destroy(&s->metrics);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s->host);
    free(s->api_key);
    free(s->model_name);
    free(s);
}

cinfer_status cf_server_start(cinfer_model *model, cinfer_engine *engine, const cf_server_params *p, cf_server **out,
                              cinfer_error *err) {
    *out = NULL;
    if (!p->host || !*p->host) return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "the host to bind is empty");
    if (p->port < 0 || p->port > 65535) return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "port %d is not in [0, 65535]", p->port);
    if (p->max_connections < 1 || p->threads < 1 || p->max_body < 1 || p->max_tokens_cap < 1 || p->max_choices < 1 ||
        p->idle_timeout_s < 1 || !(p->header_timeout_s > 0) || !(p->body_timeout_s > 0))
        return cf_fail(err, CINFER_E_INVALID_ARGUMENT,
                       "server limits must be positive (connections %d, threads %d, body %zu, max tokens %d, choices %d, "
                       "timeouts %d/%g/%g s)",
                       p->max_connections, p->threads, p->max_body, p->max_tokens_cap, p->max_choices, p->idle_timeout_s,
                       p->header_timeout_s, p->body_timeout_s);

    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICHOST | AI_PASSIVE};
    struct addrinfo *ai = NULL;
    char port_s[16];
    snprintf(port_s, sizeof port_s, "%d", p->port);
    int gai = getaddrinfo(p->host, port_s, &hints, &ai);
    if (gai) {
        hints.ai_flags = AI_PASSIVE;
        gai = getaddrinfo(p->host, port_s, &hints, &ai);
    }
    if (gai) return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "cannot resolve host '%s': %s", p->host, gai_strerror(gai));

    cf_server *s = calloc(1, sizeof *s);
    if (!s) {
        freeaddrinfo(ai);
        return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory for the server");
    }
    s->p = *p;
    s->host = strdup(p->host);
    s->api_key = dup_or_null(p->api_key);
    s->model_name = strdup(p->model_name && *p->model_name ? p->model_name : "cinfer");
    s->p.host = s->host;
    s->p.api_key = s->api_key;
    s->p.model_name = s->model_name;
    atomic_store(&s->model, model);
    atomic_store(&s->engine, engine);
    s->created = (int64_t)time(NULL);
    cf_metrics_init(&s->metrics);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    if (!s->host || !s->model_name || (p->api_key && *p->api_key && !s->api_key)) {
        freeaddrinfo(ai);
        server_free(s);
        return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory for the server");
    }

    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
    if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
    s->d = MHD_start_daemon(flags, (uint16_t)p->port, NULL, NULL, on_request, s,
                            MHD_OPTION_EXTERNAL_LOGGER, mhd_log, s,
                            MHD_OPTION_SOCK_ADDR, ai->ai_addr,
                            MHD_OPTION_THREAD_POOL_SIZE, (unsigned)p->threads,
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)p->max_connections,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)p->idle_timeout_s,
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                            MHD_OPTION_NOTIFY_CONNECTION, cf_server_on_connection, s,
                            MHD_OPTION_END);
    int e = errno;
    freeaddrinfo(ai);
    if (!s->d) {
        server_free(s);
        return cf_fail(err, CINFER_E_IO, "cannot listen on %s port %d: %s", p->host, p->port,
                       e ? strerror(e) : "libmicrohttpd refused to start");
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : p->port;
    snprintf(s->url, sizeof s->url, strchr(s->host, ':') ? "http://[%s]:%d" : "http://%s:%d", s->host, s->port);
    int rc = pthread_create(&s->reaper, NULL, cf_server_reaper_main, s);
    if (rc) {
        MHD_stop_daemon(s->d);
        server_free(s);
        return cf_fail(err, CINFER_E_INTERNAL, "cannot start the server's reaper thread: %s", strerror(rc));
    }
    *out = s;
    return CINFER_OK;
}

void cf_server_attach(cf_server *s, cinfer_model *model, cinfer_engine *engine) {
    atomic_store(&s->engine, engine);
    atomic_store(&s->model, model);
}

int cf_server_port(const cf_server *s) { return s->port; }
const char *cf_server_url(const cf_server *s) { return s->url; }

static void sleep_ms(int ms) {
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

void cf_server_stop(cf_server *s) {
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    s->stopping = 1;
    for (cf_gen *g = s->gens; g; g = g->next) cf_gen_cancel(g, 0);
    pthread_mutex_unlock(&s->mu);
    /* The listening socket stays open until MHD_stop_daemon (a request arriving meanwhile is answered 503):
     * MHD_quiesce_daemon on an epoll daemon with its own threads races with the event loop removing the same socket
     * from its epoll set, and libmicrohttpd 0.9 aborts the process when it loses (MHD_PANIC, "Failed to remove listen
     * FD from epoll set"; seen in CI). */
    /* Cancelled generations end within a step and their answers (the end of a stream, a 503) go out;
     * a client that does not read them is not waited for longer than a few seconds. */
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 3;
    pthread_mutex_lock(&s->mu);
    while (s->n_gens && pthread_cond_timedwait(&s->cv, &s->mu, &until) == 0) {}
    pthread_mutex_unlock(&s->mu);
    /* MHD must have taken back every suspended connection before it stops. */
    for (int i = 0; i < 30000 && atomic_load(&s->n_suspended) > 0; i++) sleep_ms(1);
    MHD_stop_daemon(s->d);
    pthread_mutex_lock(&s->mu);
    while (s->n_gens) pthread_cond_wait(&s->cv, &s->mu);
    s->reaper_quit = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->reaper, NULL);
    server_free(s);
}
