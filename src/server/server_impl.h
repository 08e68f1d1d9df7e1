/* server_impl.h: the insides of cf_server shared by its files: the server, its connections (for the
 * reaper), one HTTP request, and one generation (the sessions of a request's choices and the writer that
 * turns their events into the response). Lock order: cf_server.mu before cf_gen.mu; the metrics lock is
 * a leaf. */
#ifndef CF_SERVER_SERVER_IMPL_H
#define CF_SERVER_SERVER_IMPL_H

#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>

#include "base/clock.h"
#include "server/api.h"
#include "server/buf.h"
#include "server/metrics.h"
#include "server/server.h"

typedef struct cf_gen cf_gen;

typedef enum cf_conn_phase {
    CF_CONN_WAITING,             /* for a request's headers (since t_mark) */
    CF_CONN_BODY,                /* headers in; the body arriving (since t_phase) */
    CF_CONN_BUSY,                /* the request is complete and being answered */
} cf_conn_phase;

/* One TCP connection, from MHD's connection notification; under cf_server.mu. */
typedef struct cf_conn {
    int fd;
    cf_conn_phase phase;
    double t_mark;               /* opened, or the end of the previous request */
    double t_phase;
    int kept_alive;              /* a request has been answered on it */
    int shut;                    /* the reaper has shut it down */
    cf_gen *gen;                 /* the generation in flight on it: the reaper cancels it when the client hangs up */
    struct cf_conn *prev, *next;
} cf_conn;

struct cf_server {
    cf_server_params p;
    char *host, *api_key, *model_name;
    char url[128];
    int port;
    struct MHD_Daemon *d;
    _Atomic(cinfer_model *) model;
    _Atomic(cinfer_engine *) engine;
    cf_metrics metrics;
    int64_t created;             /* unix seconds, for /v1/models */

    pthread_mutex_t mu;
    pthread_cond_t cv;           /* the reaper's tick; a generation freed while stopping */
    cf_conn *conns;
    int n_conns;
    cf_gen *gens;                /* generations not yet freed */
    int n_gens;
    int stopping;
    int reaper_quit;
    pthread_t reaper;
    _Atomic int n_suspended;     /* connections MHD holds suspended */
};

/* One HTTP request; *con_cls of MHD. Touched by the connection's MHD thread only. */
typedef struct cf_req {
    cf_server *srv;
    struct MHD_Connection *mc;
    cf_conn *conn;
    cf_route route;
    char method[16];
    char path[256];
    const char *model_id;        /* /v1/models/ID: ID, in path */
    double t_start;
    cf_buf body;
    int status;                  /* the status answered; 0 until then */
    int answered;
    cf_gen *gen;
    int32_t prompt_tokens, completion_tokens; /* for the log line */
} cf_req;

/* A streamed event copied on the engine's thread, for the writer on the connection's thread. */
typedef struct cf_pending {
    int choice;
    cinfer_event ev;             /* text and logprobs are pointed at the copies when it is written */
    size_t text_off;             /* in the queue's text */
    int has_lp;
    cinfer_logprobs lp;
} cf_pending;

typedef struct cf_pending_queue {
    cf_pending *items;
    size_t n, cap;
    cf_buf text;
} cf_pending_queue;

typedef struct cf_choice {
    cf_gen *g;
    int index;
    cinfer_session *s;           /* set under g->mu once open returned */
    int ended;                   /* END seen */
    int closable;                /* its END has been taken from the queue for the writer */
    int closed;                  /* cf_api_writer_end_choice done */
    int n_tokens;
    double t_last;               /* the previous token (for the inter-token latency) */
} cf_choice;

struct cf_gen {
    pthread_mutex_t mu;
    cf_server *srv;
    struct MHD_Connection *mc;
    cf_api_kind kind;
    cf_api_request *api;
    cf_api_writer *w;
    cf_choice *ch;
    int n_ch;
    int refs;                    /* the connection's, and one per session whose END has not come */
    int n_open, n_ended, n_closed;
    int stream;
    int cancelled;               /* every session is to be cancelled (client gone, open failed, server stopping) */
    int conn_gone;               /* MHD completed the request: nothing is written any more */
    int broken;                  /* the writer failed: the response is cut */
    int discard;                 /* a session could not open: an error was answered instead */
    int finished;                /* cf_api_writer_finish done */
    int suspended;               /* MHD holds the connection suspended */
    int resume_asked;
    int stopped;                 /* a choice was cancelled while the connection lived */
    int hung_up;                 /* the reaper saw the client hang up */
    cf_pending_queue pend;       /* streamed events not yet written (under mu) */
    cf_pending_queue spare;      /* the connection thread's: the queue it last wrote, emptied */
    cf_buf out;                  /* bytes to send; the connection's thread's, as is the writer */
    double t_start;
    char id[48], fingerprint[32];
    char *model_name;
    int32_t prompt_tokens, completion_tokens;
    struct cf_gen *prev, *next;  /* cf_server.gens */
};

/* Queues a response with a copy of body (NUL-terminated when len is (size_t)-1); records the status. */
enum MHD_Result cf_respond(cf_req *r, int status, const char *content_type, const char *body, size_t len);
/* An error in the route's API shape. */
enum MHD_Result cf_respond_error(cf_req *r, int status, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
cf_api_kind cf_route_api(cf_route r);

/* server_conn.c: libmicrohttpd's connection notification, and the reaper thread (arg: the server). */
void cf_server_on_connection(void *cls, struct MHD_Connection *mc, void **socket_context,
                             enum MHD_ConnectionNotificationCode toe);
void *cf_server_reaper_main(void *arg);

/* server_routes.c: the routes that answer at once. */
enum MHD_Result cf_route_health(cf_req *r);
enum MHD_Result cf_route_models(cf_req *r, const char *model_id);
enum MHD_Result cf_route_metrics(cf_req *r);
enum MHD_Result cf_route_tokenize(cf_req *r);
enum MHD_Result cf_route_detokenize(cf_req *r);
enum MHD_Result cf_route_page(cf_req *r);

/* server_gen.c: the generation routes. */
enum MHD_Result cf_gen_start(cf_req *r);
/* The handler was called again for a request with a generation (a non-streaming one resumed). */
enum MHD_Result cf_gen_resumed(cf_req *r);
/* MHD completed the request: the generation loses its connection (and is cancelled if still running). */
void cf_gen_detach(cf_gen *g);
/* Cancels every session of g (thread-safe): the server is stopping, or (client_gone) its client hung up. */
void cf_gen_cancel(cf_gen *g, int client_gone);

#endif
