/* metrics.c: the server's counters and histograms (metrics.h) and their Prometheus text format. */
#include "server/metrics.h"

#include <stdio.h>
#include <string.h>

static const int statuses[CF_METRICS_STATUSES] = {200, 400, 401, 404, 405, 413, 422, 429, 499, 500, 503, 0};

static const double ttft_bounds[CF_HIST_BUCKETS] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                                    1,     2.5,  5,     10,   20,  40,   80};
static const double itl_bounds[CF_HIST_BUCKETS] = {0.001, 0.0025, 0.005, 0.0075, 0.01, 0.025, 0.05,
                                                   0.075, 0.1,    0.25,  0.5,    1,    2.5,   5};

static const char *const route_paths[CF_ROUTE_COUNT] = {
    "/v1/chat/completions", "/v1/completions", "/v1/messages", "/v1/models", "/health",
    "/metrics",             "/tokenize",       "/detokenize",  "/",          "other"};

static const char *const outcome_names[CF_GEN_OUTCOME_COUNT] = {"completed", "cancelled", "failed"};

const char *cf_route_path(cf_route r) { return (unsigned)r < CF_ROUTE_COUNT ? route_paths[r] : "other"; }

void cf_metrics_init(cf_metrics *m) {
    memset(m, 0, sizeof *m);
    pthread_mutex_init(&m->mu, NULL);
    m->ttft.bounds = ttft_bounds;
    m->itl.bounds = itl_bounds;
}

void cf_metrics_destroy(cf_metrics *m) { pthread_mutex_destroy(&m->mu); }

void cf_metrics_request(cf_metrics *m, cf_route r, int status) {
    int k = CF_METRICS_STATUSES - 1;
    for (int i = 0; i < CF_METRICS_STATUSES - 1; i++)
        if (statuses[i] == status) k = i;
    if ((unsigned)r >= CF_ROUTE_COUNT) r = CF_ROUTE_OTHER;
    pthread_mutex_lock(&m->mu);
    m->requests[r][k]++;
    pthread_mutex_unlock(&m->mu);
}

void cf_metrics_in_flight(cf_metrics *m, int delta) {
    pthread_mutex_lock(&m->mu);
    m->in_flight += delta;
    pthread_mutex_unlock(&m->mu);
}

void cf_metrics_generation(cf_metrics *m, cf_gen_outcome o, int32_t prompt_tokens, int32_t cached_tokens) {
    pthread_mutex_lock(&m->mu);
    m->generations[o]++;
    m->prompt_tokens += (uint64_t)(prompt_tokens > 0 ? prompt_tokens : 0);
    m->cached_tokens += (uint64_t)(cached_tokens > 0 ? cached_tokens : 0);
    pthread_mutex_unlock(&m->mu);
}

void cf_metrics_drafts(cf_metrics *m, int32_t drafted, int32_t accepted) {
    if (drafted <= 0) return;
    pthread_mutex_lock(&m->mu);
    m->draft_tokens += (uint64_t)drafted;
    m->accepted_tokens += (uint64_t)(accepted > 0 ? accepted : 0);
    pthread_mutex_unlock(&m->mu);
}

void cf_metrics_tokens(cf_metrics *m, int n) {
    pthread_mutex_lock(&m->mu);
    m->generated_tokens += (uint64_t)n;
    pthread_mutex_unlock(&m->mu);
}

static void observe(cf_histogram *h, double v) {
    int i = 0;
    while (i < CF_HIST_BUCKETS && v > h->bounds[i]) i++;
    h->counts[i]++;
    h->sum += v;
    h->n++;
}

void cf_metrics_ttft(cf_metrics *m, double seconds) {
    pthread_mutex_lock(&m->mu);
    observe(&m->ttft, seconds);
    pthread_mutex_unlock(&m->mu);
}

void cf_metrics_itl(cf_metrics *m, double seconds) {
    pthread_mutex_lock(&m->mu);
    observe(&m->itl, seconds);
    pthread_mutex_unlock(&m->mu);
}

static int render_histogram(cf_buf *out, const char *name, const char *help, const cf_histogram *h) {
    int bad = cf_buf_printf(out, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cum = 0;
    for (int i = 0; i < CF_HIST_BUCKETS; i++) {
        cum += h->counts[i];
        bad |= cf_buf_printf(out, "%s_bucket{le=\"%g\"} %llu\n", name, h->bounds[i], (unsigned long long)cum);
    }
    cum += h->counts[CF_HIST_BUCKETS];
    bad |= cf_buf_printf(out, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.9g\n%s_count %llu\n", name, (unsigned long long)cum, name,
                         h->sum, name, (unsigned long long)h->n);
    return bad;
}

static int counter(cf_buf *out, const char *name, const char *help, uint64_t v) {
    return cf_buf_printf(out, "# HELP %s %s\n# TYPE %s counter\n%s %llu\n", name, help, name, name, (unsigned long long)v);
}

/* a series of one real value; type: "gauge", or "counter" for seconds */
static int real(cf_buf *out, const char *type, const char *name, const char *help, double v) {
    return cf_buf_printf(out, "# HELP %s %s\n# TYPE %s %s\n%s %.9g\n", name, help, name, type, name, v);
}
static int gauge(cf_buf *out, const char *name, const char *help, double v) { return real(out, "gauge", name, help, v); }
static int counter_s(cf_buf *out, const char *name, const char *help, double v) { return real(out, "counter", name, help, v); }

int cf_metrics_render(cf_metrics *m, cinfer_engine *e, int model_loaded, cf_buf *out) {
    cinfer_engine_stats es = {0};
    if (e) cinfer_engine_get_stats(e, &es);
    pthread_mutex_lock(&m->mu);
    cf_metrics s = *m;
    pthread_mutex_unlock(&m->mu);

    int bad = cf_buf_puts(out, "# HELP cinfer_requests_total HTTP requests answered, by route and status.\n"
                               "# TYPE cinfer_requests_total counter\n");
    for (int r = 0; r < CF_ROUTE_COUNT; r++)
        for (int k = 0; k < CF_METRICS_STATUSES; k++) {
            if (!s.requests[r][k]) continue;
            char code[16];
            if (statuses[k]) snprintf(code, sizeof code, "%d", statuses[k]);
            else snprintf(code, sizeof code, "other");
            bad |= cf_buf_printf(out, "cinfer_requests_total{route=\"%s\",status=\"%s\"} %llu\n", route_paths[r], code,
                                 (unsigned long long)s.requests[r][k]);
        }
    bad |= cf_buf_puts(out, "# HELP cinfer_generations_total Generations (one per choice), by outcome.\n"
                            "# TYPE cinfer_generations_total counter\n");
    for (int o = 0; o < CF_GEN_OUTCOME_COUNT; o++)
        bad |= cf_buf_printf(out, "cinfer_generations_total{outcome=\"%s\"} %llu\n", outcome_names[o],
                             (unsigned long long)s.generations[o]);
    bad |= counter(out, "cinfer_prompt_tokens_total", "Prompt tokens of finished generations.", s.prompt_tokens);
    bad |= counter(out, "cinfer_prompt_tokens_cached_total", "Prompt tokens served from the prefix cache.", s.cached_tokens);
    bad |= counter(out, "cinfer_generated_tokens_total", "Tokens generated.", s.generated_tokens);
    bad |= counter(out, "cinfer_draft_tokens_total", "Speculative decoding: tokens drafted and verified.", s.draft_tokens);
    bad |= counter(out, "cinfer_accepted_tokens_total", "Speculative decoding: drafted tokens the model accepted.", s.accepted_tokens);
    bad |= render_histogram(out, "cinfer_time_to_first_token_seconds", "From the request to its first generated token.",
                            &s.ttft);
    bad |= render_histogram(out, "cinfer_inter_token_latency_seconds", "Between consecutive tokens of one generation.",
                            &s.itl);
    bad |= gauge(out, "cinfer_requests_in_flight", "Requests being answered.", (double)s.in_flight);
    bad |= gauge(out, "cinfer_model_loaded", "1 once the model is loaded and requests are served.", model_loaded ? 1 : 0);
    bad |= gauge(out, "cinfer_queue_depth", "Sequences waiting for a place in the batch.", es.queued);
    bad |= gauge(out, "cinfer_running_sequences", "Sequences in the batch.", es.running);
    bad |= gauge(out, "cinfer_kv_blocks_total", "Blocks of the KV memory.", es.kv_blocks_total);
    bad |= gauge(out, "cinfer_kv_blocks_used", "KV blocks held by sequences.", es.kv_blocks_used);
    bad |= gauge(out, "cinfer_kv_blocks_cached", "Free KV blocks holding a cached prompt prefix.", es.kv_blocks_cached);
    bad |= gauge(out, "cinfer_kv_usage_ratio", "Fraction of the KV memory held by sequences.",
                 es.kv_blocks_total ? (double)es.kv_blocks_used / es.kv_blocks_total : 0);
    if (es.kv_window_blocks_total) {
        bad |= gauge(out, "cinfer_kv_window_blocks_total", "Blocks of the sliding-window layers' own KV memory.", es.kv_window_blocks_total);
        bad |= gauge(out, "cinfer_kv_window_blocks_used", "Sliding-window KV blocks held by sequences.", es.kv_window_blocks_used);
    }
    bad |= counter(out, "cinfer_engine_steps_total", "Forward steps the engine has run.", (uint64_t)es.steps);
    bad |= counter(out, "cinfer_engine_lookahead_steps_total", "Steps queued behind the one in flight (lookahead).",
                   (uint64_t)es.lookahead_steps);
    bad |= counter(out, "cinfer_engine_lookahead_joins_total", "Sequences that joined the batch in a step queued behind the one in flight.",
                   (uint64_t)es.lookahead_joins);
    bad |= counter(out, "cinfer_preemptions_total", "Sequences sent back to the queue to free KV memory (recomputed when readmitted).",
                   (uint64_t)es.preemptions);
    bad |= counter_s(out, "cinfer_engine_busy_seconds_total", "The engine thread's turns: building, running and taking its steps.",
                     es.turn_seconds);
    bad |= counter_s(out, "cinfer_engine_runner_seconds_total", "Of the turns, the model runner's steps (the forward pass).",
                     es.runner_seconds);
    bad |= counter_s(out, "cinfer_engine_device_wait_seconds_total", "Of the runner's steps, the wait for the device's results.",
                     es.device_wait_seconds);
    return bad ? -1 : 0;
}
