/* metrics.h: the server's counters and latency histograms, and their Prometheus text exposition (with the
 * engine's load read at scrape time). Every recording call is thread-safe. */
#ifndef CF_SERVER_METRICS_H
#define CF_SERVER_METRICS_H

#include <pthread.h>
#include <stdint.h>

#include "cinfer.h"
#include "server/buf.h"

typedef enum cf_route {
    CF_ROUTE_CHAT,
    CF_ROUTE_COMPLETIONS,
    CF_ROUTE_MESSAGES,
    CF_ROUTE_MODELS,
    CF_ROUTE_HEALTH,
    CF_ROUTE_METRICS,
    CF_ROUTE_TOKENIZE,
    CF_ROUTE_DETOKENIZE,
    CF_ROUTE_PAGE,
    CF_ROUTE_OTHER,              /* no such path */
    CF_ROUTE_COUNT
} cf_route;

/* The path a route answers ("/v1/chat/completions"; "other" for CF_ROUTE_OTHER). */
const char *cf_route_path(cf_route r);

/* How a generation ended, as the server saw it. */
typedef enum cf_gen_outcome {
    CF_GEN_COMPLETED,
    CF_GEN_CANCELLED,            /* the client went away, or the server stopped */
    CF_GEN_FAILED,
    CF_GEN_OUTCOME_COUNT
} cf_gen_outcome;

#define CF_METRICS_STATUSES 12
#define CF_HIST_BUCKETS 14

typedef struct cf_histogram {
    const double *bounds;        /* CF_HIST_BUCKETS upper bounds, ascending; +Inf is implied */
    uint64_t counts[CF_HIST_BUCKETS + 1];
    double sum;
    uint64_t n;
} cf_histogram;

typedef struct cf_metrics {
    pthread_mutex_t mu;
    uint64_t requests[CF_ROUTE_COUNT][CF_METRICS_STATUSES];
    uint64_t generations[CF_GEN_OUTCOME_COUNT];
    uint64_t prompt_tokens, cached_tokens, generated_tokens;
    uint64_t draft_tokens, accepted_tokens;   /* speculative decoding */
    cf_histogram ttft, itl;      /* seconds: time to first token, time between tokens */
    int64_t in_flight;           /* requests being answered */
} cf_metrics;

void cf_metrics_init(cf_metrics *m);
void cf_metrics_destroy(cf_metrics *m);
void cf_metrics_request(cf_metrics *m, cf_route r, int status);
void cf_metrics_in_flight(cf_metrics *m, int delta);
void cf_metrics_generation(cf_metrics *m, cf_gen_outcome o, int32_t prompt_tokens, int32_t cached_tokens);
void cf_metrics_tokens(cf_metrics *m, int n);
/* A finished generation's speculative decoding: tokens drafted and accepted. */
void cf_metrics_drafts(cf_metrics *m, int32_t drafted, int32_t accepted);
void cf_metrics_ttft(cf_metrics *m, double seconds);
void cf_metrics_itl(cf_metrics *m, double seconds);

/* Appends the exposition; the engine may be NULL (model still loading). 0, or -1 when memory runs out. */
int cf_metrics_render(cf_metrics *m, cinfer_engine *e, int model_loaded, cf_buf *out);

#endif
