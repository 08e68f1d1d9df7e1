/* gen.h: what `cinfer run` and `cinfer chat` share: the generation flags (sampling, penalties, stops,
 * limits, logprobs, stats), loading a model with its engine, and the end-of-run statistics line.
 * Implemented in cmd_run.c. */
#ifndef CF_CLI_GEN_H
#define CF_CLI_GEN_H

#include "cli/cli.h"

typedef struct cf_gen_opts {
    cf_common_opts common;
    cinfer_request req;     /* the sampling fields, max_tokens, seed, stops, ignore_eos, logprobs */
    const char **stop;      /* --stop values (argv strings), owned array */
    int stats;
    const char *spec;       /* --spec ngram|draft|none: the draft source (req.draft) */
    const char *draft_dir;  /* --draft-model DIR */
    cinfer_model *draft;    /* loaded by cf_gen_load, freed by cf_gen_opts_free (after the engine) */
} cf_gen_opts;

/* Defaults: the embedded model on the CPU, greedy decoding, at most 512 new tokens. */
void cf_gen_opts_init(cf_gen_opts *o);
void cf_gen_opts_free(cf_gen_opts *o);
/* Handles one generation or common flag at argv[*i]; same return convention as cf_flag_value. */
int cf_gen_flag(const char *verb, int argc, char **argv, int *i, cf_gen_opts *o);
/* The help text of the flags cf_gen_flag handles. */
extern const char *const cf_gen_flags_help;

/* Loads the model (and the draft model of --spec draft) and creates the engine. */
cinfer_status cf_gen_load(cf_gen_opts *o, cinfer_model **m, cinfer_engine **e, cinfer_error *err);
/* The draft model folder of --spec draft: --draft-model, else the embedded draft (models/cinfer-tiny-draft) when
 * the model is the embedded one; NULL when there is none. */
const char *cf_gen_draft_dir(const char *model_dir, const char *draft_dir);
/* "cinfer VERB: N tokens (finish ...) ..., TTFT, prefill and decode tokens/s, plan" on stderr. */
void cf_gen_print_stats(const char *verb, const cinfer_result *r);

#endif
