/* bench_spec.h: `cinfer bench --spec ngram|draft|oracle`: speculative against plain decoding, side by side. */
#ifndef CF_CLI_BENCH_SPEC_H
#define CF_CLI_BENCH_SPEC_H

#include "model/model.h"

typedef struct bench_spec_args {
    const char *source;       /* "ngram", "draft" or "oracle" */
    const char *draft_dir;    /* draft: the draft model's folder */
    int draft_max;            /* 0: adaptive (ngram) / every k of the table (oracle) */
    int n_prompt, n_gen, reps;
    const char *label, *device;
    const char *dir;          /* model NULL: load this folder (with its tokenizer: the prompts are text) */
    cinfer_device dev;
    int threads;
} bench_spec_args;

/* Takes ownership of model (NULL: loads a->dir). Returns the exit status (0, or 1 after printing why). */
int cf_bench_spec(cf_model *model, const bench_spec_args *a);

#endif
