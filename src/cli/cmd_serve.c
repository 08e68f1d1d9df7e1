/* cmd_serve.c: `cinfer serve`: the HTTP server (src/server) on one model and its engine. It listens before
 * the model loads (/health answers 503 until then) and stops cleanly on SIGINT or SIGTERM. */
#include "cli/cli.h"
#include "cli/gen.h"
#include "server/server.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *serve_help =
    "usage: cinfer serve [--model DIR] [options]\n"
    "Serves the model over HTTP: OpenAI /v1/chat/completions and /v1/completions, Anthropic /v1/messages,\n"
    "/v1/models, /health, /metrics, /tokenize, /detokenize, and a chat page at /.\n"
    "  --model DIR              Hugging Face model folder (default: the embedded model)\n"
    "  --host ADDR              address to bind (default 127.0.0.1)\n"
    "  --port N                 port (default 8080; 0 = any free port, printed)\n"
    "  --api-key KEY            require this key (Authorization: Bearer KEY or x-api-key); also from\n"
    "                           CINFER_API_KEY. /health and / need none\n"
    "  --model-name NAME        the model's name in /v1/models and responses (default: the folder's name)\n"
    "  --max-connections N      open connections at once (default 256)\n"
    "  --max-body BYTES         largest request body (default 8388608)\n"
    "  --max-tokens-cap N       largest max_tokens a request may ask for (default 4096)\n"
    "  --max-choices N          largest n (times the prompts) per request (default 16)\n"
    "  --max-queued N           requests waiting for the batch before new ones get 429 (default 256; 0 = no limit)\n"
    "  --timeout S              close connections idle this long (default 60)\n"
    "  --header-timeout S       close connections whose request headers take longer (default 10)\n"
    "  --body-timeout S         and those whose body takes longer after the headers (default 60)\n"
    "  --http-threads N         event-loop threads (default 2)\n"
    "  --log-prompts            log request bodies (prompts) with each request line\n"
    "  --quiet                  no request log\n"
    "  --verbose                also the engine's log (each session's plan and outcome) and libmicrohttpd's\n"
    "                           messages\n"
    "  --max-batch N            sessions in one engine step (default: 128 CUDA, 16 CPU)\n"
    "  --kv-memory MIB          KV cache memory in MiB (default: room for max-batch full contexts)\n"
    "  --spec ngram|draft|none  speculative decoding for requests that name no draft source (default none;\n"
    "                           --draft-model implies draft); a request's \"speculative\" field overrides it\n"
    "  --draft-model DIR        a draft model for \"draft\" (with --spec draft and the embedded model, by\n"
    "                           default models/cinfer-tiny-draft); its tokenizer must agree with the model's\n"
    "  --device cpu|cuda        compute device (default cpu)\n"
    "  --threads N              CPU threads (default: one per physical core)\n";

static atomic_int stop_requested;
static pthread_mutex_t stop_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t stop_cv = PTHREAD_COND_INITIALIZER;

/* Waits for SIGINT or SIGTERM (blocked in every thread) and asks main to stop. */
static void *signal_main(void *arg) {
    sigset_t *set = arg;
    int sig = 0;
    sigwait(set, &sig);
    pthread_mutex_lock(&stop_mu);
    atomic_store(&stop_requested, sig);
    pthread_cond_broadcast(&stop_cv);
    pthread_mutex_unlock(&stop_mu);
    return NULL;
}

static int load_cancelled(void *user) { return atomic_load(&stop_requested) != 0; }

static void engine_log(const char *line, void *user) { fprintf(stderr, "cinfer serve: %s\n", line); }

/* The folder's last path component, as the default model name. */
static const char *base_name(const char *dir, char *buf, size_t len) {
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/') n--;
    size_t start = n;
    while (start && dir[start - 1] != '/') start--;
    snprintf(buf, len, "%.*s", (int)(n - start), dir + start);
    return buf[0] ? buf : "cinfer";
}

typedef struct serve_opts {
    cf_common_opts common;
    cf_server_params sp;
    long max_batch, kv_mib, max_queued;
    int verbose;
    const char *spec, *draft_dir;   /* --spec: the default draft source; --draft-model */
} serve_opts;

/* --flag with an integer value in [lo, hi]; same return convention as cf_flag_value. */
static int long_flag(const char *verb, int argc, char **argv, int *i, const char *flag, long lo, long hi, long *out) {
    const char *v;
    int r = cf_flag_value(verb, argc, argv, i, flag, &v);
    if (r <= 0) return r;
    if (cf_parse_long(v, lo, hi, out)) {
        cf_usage_error(verb, "%s must be an integer in [%ld, %ld], got '%s'", flag, lo, hi, v);
        return -1;
    }
    return 1;
}

static int serve_flag(const char *verb, int argc, char **argv, int *i, serve_opts *o) {
    cf_server_params *sp = &o->sp;
    long n;
    int r;
    if ((r = cf_common_flag(verb, argc, argv, i, &o->common)) != 0) return r;
    if ((r = cf_flag_value(verb, argc, argv, i, "--host", &sp->host)) != 0) return r;
    if ((r = cf_flag_value(verb, argc, argv, i, "--api-key", &sp->api_key)) != 0) return r;
    if ((r = cf_flag_value(verb, argc, argv, i, "--model-name", &sp->model_name)) != 0) return r;
    struct { const char *flag; long lo, hi; int *dst; } ints[] = {
        {"--port", 0, 65535, &sp->port},
        {"--max-connections", 1, 1 << 20, &sp->max_connections},
        {"--max-choices", 1, 1024, &sp->max_choices},
        {"--timeout", 1, 1 << 20, &sp->idle_timeout_s},
        {"--http-threads", 1, 256, &sp->threads},
    };
    for (size_t k = 0; k < sizeof ints / sizeof ints[0]; k++)
        if ((r = long_flag(verb, argc, argv, i, ints[k].flag, ints[k].lo, ints[k].hi, &n)) != 0) {
            if (r > 0) *ints[k].dst = (int)n;
            return r;
        }
    if ((r = long_flag(verb, argc, argv, i, "--max-tokens-cap", 1, 1 << 24, &n)) != 0) {
        if (r > 0) sp->max_tokens_cap = (int32_t)n;
        return r;
    }
    if ((r = long_flag(verb, argc, argv, i, "--max-body", 1, 1L << 32, &n)) != 0) {
        if (r > 0) sp->max_body = (size_t)n;
        return r;
    }
    if ((r = long_flag(verb, argc, argv, i, "--header-timeout", 1, 1 << 20, &n)) != 0) {
        if (r > 0) sp->header_timeout_s = (double)n;
        return r;
    }
    if ((r = long_flag(verb, argc, argv, i, "--body-timeout", 1, 1 << 20, &n)) != 0) {
        if (r > 0) sp->body_timeout_s = (double)n;
        return r;
    }
    if ((r = long_flag(verb, argc, argv, i, "--max-batch", 1, 2048, &o->max_batch)) != 0) return r;
    if ((r = long_flag(verb, argc, argv, i, "--kv-memory", 1, 1L << 30, &o->kv_mib)) != 0) return r;
    if ((r = long_flag(verb, argc, argv, i, "--max-queued", 0, 1 << 24, &o->max_queued)) != 0) return r;
    if ((r = cf_spec_flag(verb, argc, argv, i, &o->spec)) != 0) return r;
    if ((r = cf_flag_value(verb, argc, argv, i, "--draft-model", &o->draft_dir)) != 0) return r;
    if (!strcmp(argv[*i], "--log-prompts")) return sp->log_prompts = 1;
    if (!strcmp(argv[*i], "--quiet")) return (sp->log_requests = 0), 1;
    if (!strcmp(argv[*i], "--verbose")) return o->verbose = 1;
    return 0;
}

int cf_cmd_serve(int argc, char **argv) {
    const char *verb = "serve";
    serve_opts o = {.common = {.model = cf_default_model_dir(), .device = CF_DEVICE_CPU},
                    .sp = cf_server_default_params(),
                    .max_queued = 256};
    o.sp.api_key = getenv("CINFER_API_KEY");
    o.sp.model_name = NULL;
    for (int i = 1; i < argc; i++) {
        if (cf_is_help(argv[i])) {
            fputs(serve_help, stdout);
            return 0;
        }
        int r = serve_flag(verb, argc, argv, &i, &o);
        if (r == 0) return cf_usage_error(verb, "unknown argument '%s'", argv[i]);
        if (r < 0) return CF_EXIT_USAGE;
    }
    if (!o.common.model) return cf_usage_error(verb, "--model DIR is required (no embedded model in this build)");
    const char *spec = o.spec ? o.spec : o.draft_dir ? "draft" : NULL;
    /* the draft model: --draft-model, or with --spec draft and the embedded model its embedded draft */
    const char *draft_dir = cf_gen_draft_dir(o.common.model, o.draft_dir);
    if (spec && !strcmp(spec, "draft") && !draft_dir)
        return cf_usage_error(verb, "--spec draft needs --draft-model DIR (only the embedded model has a default draft)");
    o.sp.log_http = o.verbose;
    char name[256];
    if (!o.sp.model_name || !*o.sp.model_name) o.sp.model_name = base_name(o.common.model, name, sizeof name);

    /* Signals go to the signal thread only: every thread started from here on inherits the mask. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    pthread_t sig_thread;
    if (pthread_create(&sig_thread, NULL, signal_main, &set)) {
        fprintf(stderr, "cinfer serve: cannot start the signal thread\n");
        return 1;
    }
    pthread_detach(sig_thread);

    cinfer_error err = {0};
    cf_server *srv = NULL;
    if (cf_server_start(NULL, NULL, &o.sp, &srv, &err) != CINFER_OK) return cf_report(verb, &err);
    printf("cinfer serve: listening on %s (model %s loading)\n", cf_server_url(srv), o.sp.model_name);
    fflush(stdout);

    cinfer_model_params mp = cinfer_model_default_params();
    mp.device = o.common.device == CF_DEVICE_CUDA ? CINFER_DEVICE_CUDA : CINFER_DEVICE_CPU;
    mp.n_threads = o.common.threads;
    mp.cancel = load_cancelled;
    cinfer_engine_params ep = cinfer_engine_default_params();
    ep.max_batch = (int)o.max_batch;
    ep.kv_memory = (int64_t)o.kv_mib << 20;
    ep.max_queued = (int)o.max_queued;
    if (o.verbose) ep.log = engine_log;
    ep.default_draft = spec;
    cinfer_model *m = NULL, *dm = NULL;
    cinfer_engine *e = NULL;
    int rc = 0;
    cinfer_status st = cinfer_model_load(o.common.model, &mp, &m, &err);
    if (st == CINFER_OK && draft_dir && (o.draft_dir || (spec && !strcmp(spec, "draft")))) {
        if ((st = cinfer_model_load(draft_dir, &mp, &dm, &err)) != CINFER_OK) {
            cinfer_error inner = err;
            snprintf(err.message, sizeof err.message, "the draft model %s: %s", draft_dir, inner.message);
        }
        ep.draft_model = dm;
    }
    if (st != CINFER_OK || cinfer_engine_create(m, &ep, &e, &err) != CINFER_OK) {
        if (!atomic_load(&stop_requested)) rc = cf_report(verb, &err);
    } else {
        cf_server_attach(srv, m, e);
        printf("cinfer serve: model %s ready at %s\n", o.sp.model_name, cf_server_url(srv));
        fflush(stdout);
    }
    if (!rc) {
        pthread_mutex_lock(&stop_mu);
        while (!atomic_load(&stop_requested)) pthread_cond_wait(&stop_cv, &stop_mu);
        pthread_mutex_unlock(&stop_mu);
        fprintf(stderr, "cinfer serve: %s: stopping\n", atomic_load(&stop_requested) == SIGINT ? "SIGINT" : "SIGTERM");
    }
    cf_server_stop(srv);
    cinfer_engine_free(e);
    cinfer_model_free(dm);
    cinfer_model_free(m);
    return rc;
}
