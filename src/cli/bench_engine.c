/* bench_engine.c: `cinfer bench --concurrency 1,8,...`: the engine measured as users call it. For each
 * concurrency c, c in-process clients open greedy sessions at once through the public API (distinct random
 * prompts, ignore_eos, max_tokens = --gen) and stamp every token event as it is delivered. Reported per run:
 * aggregate decode tokens/s (tokens after each session's first / the span from the earliest first token to
 * the last token, so other sessions' prefills chunked into those steps count against it), the steady rate
 * while all c sessions decode (tokens delivered from the last session's first token to the first session's
 * last token / that span: what llama-batched-bench calls generation speed; 0 when no such span), output
 * tokens/s over the whole run, time to first token and inter-token latency (p50,
 * p99), and the aggregate against its bandwidth roofline (c tokens a step read the weights once and c
 * sequences' KV: c x bandwidth / (weight bytes + c x KV bytes)). The KV memory's pools are reported too: the
 * full-attention layers' blocks, the sliding-window layers' own blocks, and the blocks one pool for every layer
 * would have had in the same bytes.
 *
 * With --requests N (a stream): the c clients, one thread each, open their next request as soon as their last one
 * ended, N requests in all (sessions join and leave the batch all along, as on a server). Its rates: decode and
 * output over the whole run as above, and the steady rate while every client has a request running (from the
 * latest first token of a client's first request to the moment the first client finds no request left); TTFT from
 * each request's open. */
#include "base/clock.h"
#include "cli/bench_engine.h"
#include "engine/engine.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct client {
    double *t;        /* [n_gen]: when each token event arrived */
    int n;
} client;

static int on_event(const cinfer_event *ev, void *user) {
    client *c = user;
    if (ev->kind == CINFER_EVENT_TOKEN && c->n >= 0) c->t[c->n++] = cf_monotonic_seconds();
    return 0;
}

int cf_bench_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The q-quantile (0..1) of v[0, n), sorted in place (nearest rank). */
static double quantile(double *v, size_t n, double q) {
    if (!n) return 0;
    qsort(v, n, sizeof *v, cf_bench_cmp_double);
    size_t k = (size_t)ceil(q * (double)n);
    return v[k ? k - 1 : 0];
}

typedef struct run_result {
    int concurrency, requests;
    double decode_tps, all_tps, output_tps, ttft_p50, ttft_p99, itl_p50, itl_p99, roofline_tps, wall_s;
    long steps, queued, joins;            /* steps, those queued behind the one in flight (lookahead), sessions joining them */
    double turn_ms, runner_ms, wait_ms;   /* a step's turn of the engine thread, the runner's step in it, the wait for the device */
    char plan[48];
} run_result;

/* milliseconds a step of seconds s0 -> s1 over steps steps */
static double ms_per_step(double s0, double s1, long steps) { return steps ? 1e3 * (s1 - s0) / (double)steps : 0; }

/* The engine's steps between stats s0 and s1 into r: their count, those queued and joined, and a step's times. */
static void step_stats(run_result *r, const cinfer_engine_stats *s0, const cinfer_engine_stats *s1) {
    r->steps = s1->steps - s0->steps;
    r->queued = s1->lookahead_steps - s0->lookahead_steps;
    r->joins = s1->lookahead_joins - s0->lookahead_joins;
    r->turn_ms = ms_per_step(s0->turn_seconds, s1->turn_seconds, r->steps);
    r->runner_ms = ms_per_step(s0->runner_seconds, s1->runner_seconds, r->steps);
    r->wait_ms = ms_per_step(s0->device_wait_seconds, s1->device_wait_seconds, r->steps);
}

static const char *run_draft;   /* the sessions' draft source, or NULL */

/* The bench's request: n_prompt random ids into prompt (xorshift state *x), greedy, max_tokens n_gen, no end token;
 * and the session params that stamp its token events in c. */
static void bench_request(int32_t *prompt, int n_prompt, int n_gen, int vocab, uint64_t *x, client *c, cinfer_request *q,
                          cinfer_session_params *sp) {
    for (int k = 0; k < n_prompt; k++) {
        *x ^= *x << 13; *x ^= *x >> 7; *x ^= *x << 17;
        prompt[k] = (int32_t)(*x % (uint64_t)vocab);
    }
    *q = cinfer_request_default();
    q->prompt_ids = prompt;
    q->n_prompt_ids = (size_t)n_prompt;
    q->max_tokens = n_gen;
    q->temperature = 0.0f;
    q->ignore_eos = 1;
    q->ids_only = 1;
    q->draft = run_draft;
    *sp = cinfer_session_default_params();
    sp->output = CINFER_OUTPUT_CALLBACK;
    sp->on_event = on_event;
    sp->user = c;
}

/* r's latency quantiles: time to first token over ttft[0, n_ttft), inter-token over itl[0, n_itl) (sorted in place) */
static void latencies(run_result *r, double *ttft, size_t n_ttft, double *itl, size_t n_itl) {
    r->ttft_p50 = quantile(ttft, n_ttft, 0.5);
    r->ttft_p99 = quantile(ttft, n_ttft, 0.99);
    r->itl_p50 = quantile(itl, n_itl, 0.5);
    r->itl_p99 = quantile(itl, n_itl, 0.99);
}

/* One run of c sessions; fills r. Returns 0, or 1 after printing why. */
static int run_once(cinfer_engine *e, int vocab, int c, int n_prompt, int n_gen, uint64_t seed, run_result *r) {
    client *cl = calloc((size_t)c, sizeof *cl);
    cinfer_session **ss = calloc((size_t)c, sizeof *ss);
    int32_t *prompt = malloc((size_t)n_prompt * sizeof *prompt);
    double *ttft = malloc((size_t)c * sizeof *ttft), *itl = malloc((size_t)c * (size_t)n_gen * sizeof *itl);
    int rc = !cl || !ss || !prompt || !ttft || !itl;
    for (int i = 0; !rc && i < c; i++) rc = !(cl[i].t = malloc((size_t)n_gen * sizeof(double)));
    if (rc) fprintf(stderr, "cinfer bench: out of memory for %d clients\n", c);
    uint64_t x = seed;
    cinfer_engine_stats s0, s1;
    cinfer_engine_get_stats(e, &s0);
    const double t0 = cf_monotonic_seconds();
    for (int i = 0; !rc && i < c; i++) {
        cinfer_request q;
        cinfer_session_params sp;
        bench_request(prompt, n_prompt, n_gen, vocab, &x, &cl[i], &q, &sp);
        cinfer_error err = {0};
        if (cinfer_session_open(e, &q, &sp, &ss[i], &err) != CINFER_OK) {
            fprintf(stderr, "cinfer bench: opening session %d of %d: %s\n", i + 1, c, err.message);
            rc = 1;
        }
    }
    double first = INFINITY, last = 0;
    long decoded = 0, output = 0;
    size_t n_itl = 0;
    for (int i = 0; i < c && ss[i]; i++) {
        if (rc) break;   /* the sessions still live are cancelled when freed */
        const cinfer_result *res = NULL;
        cinfer_error err = {0};
        cinfer_session_wait(ss[i], -1, &res, &err);
        if (res->outcome != CINFER_OUTCOME_COMPLETED || cl[i].n != n_gen) {
            fprintf(stderr, "cinfer bench: session %d of %d ended %s after %d of %d tokens: %s\n", i + 1, c,
                    cinfer_outcome_name(res->outcome), cl[i].n, n_gen, res->error.message);
            rc = 1;
            continue;
        }
        snprintf(r->plan, sizeof r->plan, "%s", cinfer_session_plan(ss[i]));
        ttft[i] = cl[i].t[0] - t0;
        first = fmin(first, cl[i].t[0]);
        last = fmax(last, cl[i].t[n_gen - 1]);
        for (int k = 1; k < n_gen; k++) itl[n_itl++] = cl[i].t[k] - cl[i].t[k - 1];
        decoded += n_gen - 1;
        output += n_gen;
    }
    double all_first = 0, all_last = INFINITY;   /* the span in which every session decodes */
    for (int i = 0; !rc && i < c; i++) {
        all_first = fmax(all_first, cl[i].t[0]);
        all_last = fmin(all_last, cl[i].t[n_gen - 1]);
    }
    long in_span = 0;
    for (int i = 0; !rc && i < c && all_last > all_first; i++)
        for (int k = 1; k < n_gen; k++) in_span += cl[i].t[k] > all_first && cl[i].t[k] <= all_last;
    cinfer_engine_get_stats(e, &s1);
    if (!rc) {
        r->concurrency = c;
        r->requests = c;
        step_stats(r, &s0, &s1);
        r->all_tps = all_last > all_first ? (double)in_span / (all_last - all_first) : 0;
        r->wall_s = last - t0;
        r->decode_tps = last > first ? (double)decoded / (last - first) : 0;
        r->output_tps = (double)output / (last - t0);
        latencies(r, ttft, (size_t)c, itl, n_itl);
    }
    for (int i = 0; i < c; i++) {
        if (ss && ss[i]) cinfer_session_free(ss[i]);
        if (cl) free(cl[i].t);
    }
    free(cl);
    free(ss);
    free(prompt);
    free(ttft);
    free(itl);
    return rc;
}

/* ---- a stream of requests (--requests) ---- */

typedef struct stream {
    cinfer_engine *e;
    int vocab, n_prompt, n_gen, n_requests;
    uint64_t seed;
    atomic_int next, failed;
    double *t;        /* [n_requests][n_gen]: when each token event arrived */
    double *opened;   /* [n_requests] */
    char plan[48];
} stream;

typedef struct stream_client {
    stream *st;
    pthread_t th;
    double first;   /* the first token of its first request (-1: none yet) */
    double idle;    /* when it found no request left */
} stream_client;

static void *stream_client_main(void *arg) {
    stream_client *sc = arg;
    stream *st = sc->st;
    int32_t *prompt = malloc((size_t)st->n_prompt * sizeof *prompt);
    if (!prompt) atomic_store(&st->failed, 1);
    for (int i; prompt && !atomic_load(&st->failed) && (i = atomic_fetch_add(&st->next, 1)) < st->n_requests;) {
        uint64_t x = st->seed ^ (0x9e3779b97f4a7c15ull * (uint64_t)(i + 1));
        client c = {.t = st->t + (size_t)i * (size_t)st->n_gen, .n = 0};
        cinfer_request q;
        cinfer_session_params sp;
        bench_request(prompt, st->n_prompt, st->n_gen, st->vocab, &x, &c, &q, &sp);
        cinfer_session *s = NULL;
        cinfer_error err = {0};
        const cinfer_result *res = NULL;
        st->opened[i] = cf_monotonic_seconds();
        if (cinfer_session_open(st->e, &q, &sp, &s, &err) != CINFER_OK) {
            fprintf(stderr, "cinfer bench: opening request %d of %d: %s\n", i + 1, st->n_requests, err.message);
            atomic_store(&st->failed, 1);
        } else if (cinfer_session_wait(s, -1, &res, &err) != CINFER_OK || res->outcome != CINFER_OUTCOME_COMPLETED || c.n != st->n_gen) {
            fprintf(stderr, "cinfer bench: request %d of %d ended %s after %d of %d tokens: %s\n", i + 1, st->n_requests,
                    res ? cinfer_outcome_name(res->outcome) : "without a result", c.n, st->n_gen, res ? res->error.message : err.message);
            atomic_store(&st->failed, 1);
        } else {
            if (i == 0) snprintf(st->plan, sizeof st->plan, "%s", cinfer_session_plan(s));
            if (sc->first < 0) sc->first = c.t[0];
        }
        cinfer_session_free(s);
    }
    sc->idle = cf_monotonic_seconds();
    free(prompt);
    return NULL;
}

/* One stream of n requests over c clients; fills r. Returns 0, or 1 after printing why. */
static int run_stream(cinfer_engine *e, int vocab, int c, int n, int n_prompt, int n_gen, uint64_t seed, run_result *r) {
    stream st = {.e = e, .vocab = vocab, .n_prompt = n_prompt, .n_gen = n_gen, .n_requests = n, .seed = seed};
    atomic_init(&st.next, 0);
    atomic_init(&st.failed, 0);
    st.t = malloc((size_t)n * (size_t)n_gen * sizeof *st.t);
    st.opened = malloc((size_t)n * sizeof *st.opened);
    stream_client *cl = calloc((size_t)c, sizeof *cl);
    double *ttft = malloc((size_t)n * sizeof *ttft), *itl = malloc((size_t)n * (size_t)n_gen * sizeof *itl);
    int rc = !st.t || !st.opened || !cl || !ttft || !itl;
    if (rc) fprintf(stderr, "cinfer bench: out of memory for %d requests\n", n);
    cinfer_engine_stats s0, s1;
    cinfer_engine_get_stats(e, &s0);
    const double t0 = cf_monotonic_seconds();
    int started = 0;
    for (; !rc && started < c; started++) {
        cl[started] = (stream_client){.st = &st, .first = -1};
        if (pthread_create(&cl[started].th, NULL, stream_client_main, &cl[started])) {
            fprintf(stderr, "cinfer bench: cannot start client %d of %d\n", started + 1, c);
            atomic_store(&st.failed, 1);
            rc = 1;
            break;
        }
    }
    for (int i = 0; i < started; i++) pthread_join(cl[i].th, NULL);
    rc = rc || atomic_load(&st.failed);
    cinfer_engine_get_stats(e, &s1);
    if (!rc) {
        double first = INFINITY, last = 0, w0 = 0, w1 = INFINITY;   /* [w0, w1]: every client has a request running */
        long in_span = 0;
        size_t n_itl = 0;
        for (int k = 0; k < c; k++) {
            w0 = fmax(w0, cl[k].first < 0 ? INFINITY : cl[k].first);
            w1 = fmin(w1, cl[k].idle);
        }
        for (int i = 0; i < n; i++) {
            const double *t = st.t + (size_t)i * (size_t)n_gen;
            ttft[i] = t[0] - st.opened[i];
            first = fmin(first, t[0]);
            last = fmax(last, t[n_gen - 1]);
            for (int k = 1; k < n_gen; k++) {
                itl[n_itl++] = t[k] - t[k - 1];
                in_span += t[k] > w0 && t[k] <= w1;
            }
        }
        r->concurrency = c;
        r->requests = n;
        snprintf(r->plan, sizeof r->plan, "%s", st.plan);
        step_stats(r, &s0, &s1);
        r->all_tps = w1 > w0 ? (double)in_span / (w1 - w0) : 0;
        r->wall_s = last - t0;
        r->decode_tps = last > first ? (double)n * (n_gen - 1) / (last - first) : 0;
        r->output_tps = (double)n * n_gen / (last - t0);
        latencies(r, ttft, (size_t)n, itl, n_itl);
    }
    free(st.t);
    free(st.opened);
    free(cl);
    free(ttft);
    free(itl);
    return rc;
}

int cf_bench_concurrency(cf_model *model, const bench_engine_args *a) {
    cinfer_model *m = NULL;
    cinfer_engine *e = NULL;
    cinfer_error err = {0};
    const int vocab = model->hp.vocab;
    const double weight_bytes = (double)model->decode_bytes;
    const double kv_bytes = (double)cf_hparams_kv_read_bytes(&model->hp, a->n_prompt + 1 + a->n_gen / 2,
                                                           cf_dtype_size(model->kv_dtype));
    cinfer_engine_params ep = cinfer_engine_default_params();
    ep.max_batch = a->max_batch;
    ep.kv_memory = a->kv_memory;
    ep.lookahead = a->lookahead;
    if (cf_model_handle_wrap(model, &m, &err) != CINFER_OK || cinfer_engine_create(m, &ep, &e, &err) != CINFER_OK) {
        fprintf(stderr, "cinfer bench: %s\n", err.message);
        cinfer_model_free(m);
        return 1;
    }
    cinfer_engine_stats kv;
    cinfer_engine_get_stats(e, &kv);
    const int64_t kv_total =
        (int64_t)kv.kv_blocks_total * kv.kv_block_bytes + (int64_t)kv.kv_window_blocks_total * kv.kv_window_block_bytes;
    const int64_t one_block = kv.kv_block_bytes + kv.kv_window_block_bytes;   /* a block over every layer */
    const int64_t one_pool = one_block ? kv_total / one_block : 0;
    run_draft = a->draft;
    run_result *runs = calloc((size_t)a->n_concurrency, sizeof *runs);
    run_result warm = {0};
    int rc = !runs || run_once(e, vocab, 1, a->n_prompt, a->n_gen < 8 ? a->n_gen : 8, 7, &warm);
    for (int k = 0; !rc && k < a->n_concurrency; k++) {
        const uint64_t seed = 88172645463325252ull + (uint64_t)k;
        rc = a->requests ? run_stream(e, vocab, a->concurrency[k], a->requests, a->n_prompt, a->n_gen, seed, &runs[k])
                         : run_once(e, vocab, a->concurrency[k], a->n_prompt, a->n_gen, seed, &runs[k]);
        const double c = a->concurrency[k];
        runs[k].roofline_tps = c * a->bandwidth_gbs * 1e9 / (weight_bytes + c * kv_bytes);
    }
    if (!rc && a->json) {
        printf("{\"model\":\"%s\",\"device\":\"%s\",\"prompt_tokens\":%d,\"gen_tokens\":%d,\"bandwidth_gb_s\":%.2f,\"runs\":[",
               a->label, a->device, a->n_prompt, a->n_gen, a->bandwidth_gbs);
        for (int k = 0; k < a->n_concurrency; k++) {
            const run_result *r = &runs[k];
            printf("%s{\"concurrency\":%d,\"requests\":%d,\"plan\":\"%s\",\"decode_tokens_per_s\":%.3f,\"all_decoding_tokens_per_s\":%.3f,"
                   "\"output_tokens_per_s\":%.3f,"
                   "\"ttft_p50_s\":%.5f,\"ttft_p99_s\":%.5f,\"itl_p50_s\":%.6f,\"itl_p99_s\":%.6f,"
                   "\"roofline_tokens_per_s\":%.3f,\"roofline_fraction\":%.4f,\"wall_s\":%.3f,"
                   "\"steps\":%ld,\"lookahead_steps\":%ld,\"lookahead_joins\":%ld,\"turn_ms\":%.4f,\"runner_ms\":%.4f,\"device_wait_ms\":%.4f}",
                   k ? "," : "", r->concurrency, r->requests, r->plan, r->decode_tps, r->all_tps, r->output_tps, r->ttft_p50, r->ttft_p99, r->itl_p50,
                   r->itl_p99, r->roofline_tps, r->decode_tps / r->roofline_tps, r->wall_s, r->steps, r->queued, r->joins, r->turn_ms, r->runner_ms, r->wait_ms);
        }
        printf("],\"kv\":{\"bytes\":%lld,\"block_tokens\":%d,\"full_blocks\":%d,\"window_blocks\":%d,\"window\":%d,"
               "\"one_pool_blocks\":%lld}}\n",
               (long long)kv_total, kv.kv_block_tokens, kv.kv_blocks_total, kv.kv_window_blocks_total, kv.kv_window, (long long)one_pool);
    } else if (!rc) {
        printf("engine       %s on %s, %d-token prompts, %d tokens each, greedy; bandwidth %.1f GB/s\n", a->label, a->device,
               a->n_prompt, a->n_gen, a->bandwidth_gbs);
        if (a->requests)
            printf("stream       %d requests a run, each client opening its next as its last one ends; \"all decoding\": the rate\n"
                   "             while every client has a request running\n",
                   a->requests);
        if (kv.kv_window_blocks_total)
            printf("kv           %.1f MiB: %d blocks of %d tokens for the full layers, %d for the sliding-window layers (window %d); "
                   "one pool for every layer: %lld blocks (%lld tokens)\n",
                   kv_total / 1048576.0, kv.kv_blocks_total, kv.kv_block_tokens, kv.kv_window_blocks_total, kv.kv_window,
                   (long long)one_pool, (long long)one_pool * kv.kv_block_tokens);
        else
            printf("kv           %.1f MiB: %d blocks of %d tokens\n", kv_total / 1048576.0, kv.kv_blocks_total, kv.kv_block_tokens);
        printf("%11s %-16s %14s %14s %14s %18s %18s %9s\n", "concurrency", "plan", "decode tok/s", "all decoding", "output tok/s",
               "TTFT p50/p99 ms", "ITL p50/p99 ms", "roofline");
        for (int k = 0; k < a->n_concurrency; k++) {
            const run_result *r = &runs[k];
            printf("%11d %-16s %14.2f %14.2f %14.2f %8.1f / %7.1f %8.2f / %7.2f %8.1f%%\n", r->concurrency, r->plan, r->decode_tps,
                   r->all_tps, r->output_tps, 1e3 * r->ttft_p50, 1e3 * r->ttft_p99, 1e3 * r->itl_p50, 1e3 * r->itl_p99,
                   100 * r->decode_tps / r->roofline_tps);
        }
        printf("engine thread, means of a step: its turn = the runner's step + the engine's work around it; the device wait\n"
               "is the part of the runner's step from enqueuing the picks to the device's end; the rest of the turn is host work\n"
               "(on the CPU the step computes on the host: the runner's host time holds the forward pass); queued: steps\n"
               "queued behind the one in flight (lookahead), whose host work overlaps the device's; joined: sessions that\n"
               "joined the batch in a queued step\n");
        printf("%11s %8s %8s %8s %10s %10s %10s %14s %12s %12s\n", "concurrency", "steps", "queued", "joined", "wall ms", "turn ms",
               "runner ms", "device wait ms", "runner host", "engine host");
        for (int k = 0; k < a->n_concurrency; k++) {
            const run_result *r = &runs[k];
            printf("%11d %8ld %8ld %8ld %10.3f %10.3f %10.3f %14.3f %12.3f %12.3f\n", r->concurrency, r->steps, r->queued, r->joins,
                   ms_per_step(0, r->wall_s, r->steps), r->turn_ms, r->runner_ms, r->wait_ms, r->runner_ms - r->wait_ms,
                   r->turn_ms - r->runner_ms);
        }
    }
    free(runs);
    cinfer_engine_free(e);
    cinfer_model_free(m);
    return rc;
}
