/* bench_engine.h: `cinfer bench --concurrency`: aggregate decode through the public session API. */
#ifndef CF_CLI_BENCH_ENGINE_H
#define CF_CLI_BENCH_ENGINE_H

#include "model/model.h"

/* A qsort comparator of doubles, shared by both bench modes. */
int cf_bench_cmp_double(const void *a, const void *b);

typedef struct bench_engine_args {
    const int *concurrency;   /* sessions at once, one run each */
    int n_concurrency;
    int n_prompt, n_gen;
    int requests;             /* 0: each client one request; else a stream of this many a run (>= every concurrency) */
    double bandwidth_gbs;     /* copy bandwidth measured in the same process, for the roofline */
    int json;
    int max_batch;            /* engine parameters; 0 = the engine's defaults */
    int64_t kv_memory;
    int lookahead;            /* cinfer_engine_params.lookahead */
    const char *label, *device;
    const char *draft;        /* the sessions' draft source (--spec ngram); NULL = plain */
} bench_engine_args;

/* Runs the engine on model (taking ownership of it) at each concurrency and prints one table or one JSON
 * object. Returns the exit status (0, or 1 after printing why). */
int cf_bench_concurrency(cf_model *model, const bench_engine_args *a);

#endif
