/* server.h: the HTTP server of `cinfer serve`: libmicrohttpd in event-driven mode, the routes, limits,
 * authentication, one engine session per choice, and the reaper that enforces the header deadline and
 * notices clients that went away. The model and engine belong to the caller. */
#ifndef CF_SERVER_SERVER_H
#define CF_SERVER_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include "cinfer.h"

typedef struct cf_server_params {
    const char *host;            /* address to bind: "127.0.0.1" (default), "::1", "0.0.0.0", ... */
    int port;                    /* 0 = an ephemeral port (read it with cf_server_port) */
    const char *api_key;         /* NULL or "": no authentication */
    const char *model_name;      /* the name /v1/models lists and responses report */
    int max_connections;         /* open connections at once (default 256) */
    size_t max_body;             /* request body bytes (default 8 MiB) */
    int32_t max_tokens_cap;      /* a request's max_tokens at most (default 4096) */
    int max_choices;             /* n (times the prompts) per request (default 16) */
    int idle_timeout_s;          /* a connection with no traffic is closed after this (default 60) */
    double header_timeout_s;     /* a request's headers must arrive within this (default 10) */
    double body_timeout_s;       /* and its body within this after the headers (default 60) */
    int threads;                 /* event-loop threads (default 2) */
    int log_requests;            /* one line per request on stderr (default 1) */
    int log_prompts;             /* also the request body (default 0) */
    int log_http;                /* libmicrohttpd's messages (failed sends to clients that left, ...) (default 0) */
} cf_server_params;

typedef struct cf_server cf_server;

cf_server_params cf_server_default_params(void);

/* Starts listening. model and engine may be NULL while the model loads (/health answers 503, generation
 * routes 503) and be attached later with cf_server_attach. */
cinfer_status cf_server_start(cinfer_model *model, cinfer_engine *engine, const cf_server_params *p, cf_server **out,
                              cinfer_error *err);
void cf_server_attach(cf_server *s, cinfer_model *model, cinfer_engine *engine);
/* The port it listens on, and the address as "http://host:port". */
int cf_server_port(const cf_server *s);
const char *cf_server_url(const cf_server *s);
/* Cancels the requests in flight (new ones are answered 503), waits for them to end, closes the port and frees the
 * server. */
void cf_server_stop(cf_server *s);

#endif
