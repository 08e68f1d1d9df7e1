/* cli.h: the verbs of the cinfer program and the small argument helpers they share. Every verb takes
 * (argc, argv) with argv[0] its own name and returns the process exit status: 0 ok, 1 failure,
 * 2 bad usage (with a one-line reason on stderr). */
#ifndef CF_CLI_H
#define CF_CLI_H

#include <stdint.h>
#include <stdio.h>
#include "cinfer.h"
#include "backend/backend.h"

int cf_cmd_run(int argc, char **argv);
int cf_cmd_chat(int argc, char **argv);
int cf_cmd_logits(int argc, char **argv);
int cf_cmd_info(int argc, char **argv);
int cf_cmd_bench(int argc, char **argv);
int cf_cmd_tokenize(int argc, char **argv);
int cf_cmd_detokenize(int argc, char **argv);
int cf_cmd_chat_template(int argc, char **argv);
int cf_cmd_serve(int argc, char **argv);
int cf_cmd_quantize(int argc, char **argv);

#define CF_EXIT_USAGE 2

/* Prints "cinfer VERB: message" and returns CF_EXIT_USAGE. */
int cf_usage_error(const char *verb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prints "cinfer VERB: <error message>" and returns 1, or 2 when the caller's input was at fault. */
int cf_report(const char *verb, const cinfer_error *err);

/* Matches argv[*i] against a flag taking a value ("--flag V" or "--flag=V"). Returns 1 and sets *val
 * (advancing *i) on a match, 0 on no match, -1 (after printing the reason) if the value is missing. */
int cf_flag_value(const char *verb, int argc, char **argv, int *i, const char *flag, const char **val);
/* --spec ngram|draft|none at argv[*i]; same return convention as cf_flag_value. */
int cf_spec_flag(const char *verb, int argc, char **argv, int *i, const char **spec);
int cf_is_help(const char *arg);

/* Strict number parsing: plain decimal, nothing before or after, in [lo, hi] (finite for floats). 0 on
 * success. */
int cf_parse_long(const char *s, long lo, long hi, long *out);
int cf_parse_float(const char *s, float lo, float hi, float *out);
/* The one token-id list parser: "5,17,300" (decimal ids in [0, INT32_MAX] separated by single commas, no
 * spaces or signs) -> malloc'd ids. On failure returns -1 with the reason in why. */
int cf_parse_ids(const char *s, int32_t **ids, int *n, char *why, size_t why_len);

/* Input files (--file, --jsonl, --messages, --tools) are regular files of at most this many bytes. */
#define CF_MAX_INPUT_BYTES (256 << 20)
/* Reads the input file named by flag into *data (malloc'd, NUL-terminated; *len excludes the NUL).
 * Returns 0, or 1 after printing why the file cannot be used (never blocks on a FIFO). */
int cf_read_input(const char *verb, const char *flag, const char *path, char **data, size_t *len);
/* Output files (--out): 1 (after printing why) when path exists and is not a regular file, else 0. */
int cf_check_output(const char *verb, const char *flag, const char *path);
/* Opens the output file for writing from its start; NULL after printing why. */
FILE *cf_open_output(const char *verb, const char *flag, const char *path);

/* The embedded default model folder, or NULL if this build has none. */
const char *cf_default_model_dir(void);

/* Common flags shared by the model verbs. */
typedef struct cf_common_opts {
    const char *model;
    cf_device device;
    int threads;
} cf_common_opts;
/* Handles --model, --device, --threads at argv[*i]; same return convention as cf_flag_value. */
int cf_common_flag(const char *verb, int argc, char **argv, int *i, cf_common_opts *o);

#endif
