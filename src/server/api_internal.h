/* api_internal.h: what the api_*.c files share: the arena that owns a parsed request's storage, typed
 * readers of JSON fields that name the offending field on failure, and the per-kind request parsers. */
#ifndef CF_SERVER_API_INTERNAL_H
#define CF_SERVER_API_INTERNAL_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "server/api.h"

/* Nesting deeper than this is refused before cJSON sees the body (tool schemas need a few dozen). */
#define CF_API_MAX_DEPTH 128
/* Stop strings per request: OpenAI allows 4; cinfer allows this many. */
#define CF_API_MAX_STOP 16

typedef struct cf_arena_block cf_arena_block;
typedef struct cf_arena {
    cf_arena_block *head;
} cf_arena;

void *cf_arena_alloc(cf_arena *a, size_t n);           /* zeroed; NULL when memory runs out */
char *cf_arena_strndup(cf_arena *a, const char *s, size_t n);
char *cf_arena_strdup(cf_arena *a, const char *s);
char *cf_arena_json(cf_arena *a, const cJSON *item);   /* unformatted JSON text of item */
void cf_arena_free(cf_arena *a);

/* The storage behind a cf_api_request (its void *storage). */
typedef struct cf_api_storage {
    cf_arena arena;
    int n_per_prompt;            /* OpenAI's n: reqs[p * n + i] is choice i of prompt p */
    const char **echo;           /* completions with echo: the text of each prompt */
    char **stop;                 /* the stop strings of every request */
    size_t n_stop;
    int tool_choice_none;
} cf_api_storage;

/* Parsing state of one request. */
typedef struct cf_api_ctx {
    cf_api_error *err;
    const cf_api_limits *lim;
    const cinfer_model *m;       /* may be NULL: token ranges then go unchecked here (the engine checks) */
    int vocab, context;
    cf_arena *arena;
    cf_api_storage *st;
} cf_api_ctx;

/* Fills err (status, param, message) and returns -1. */
int cf_api_fail(cf_api_error *err, int status, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
int cf_api_oom(cf_api_error *err);

/* The value of key in obj, or NULL (also when obj is no object). A key given twice means its last value,
 * as JSON.parse and Python's json read it. */
const cJSON *cf_api_get(const cJSON *obj, const char *key);

/* Field readers: 1 when the key is present and valid (*out set), 0 when absent or null, -1 (err filled,
 * naming param, or the key when param is NULL) when it has the wrong type or range. */
int cf_api_get_bool(const cJSON *obj, const char *key, const char *param, int *out, cf_api_error *err);
int cf_api_get_int(const cJSON *obj, const char *key, const char *param, int64_t lo, int64_t hi, int64_t *out,
                   cf_api_error *err);
int cf_api_get_number(const cJSON *obj, const char *key, const char *param, double lo, double hi, double *out,
                      cf_api_error *err);
int cf_api_get_string(const cJSON *obj, const char *key, const char *param, const char **out, cf_api_error *err);
/* An item (not a key) as an integer in [lo, hi]. */
int cf_api_item_int(const cJSON *it, const char *param, int64_t lo, int64_t hi, int64_t *out, cf_api_error *err);
const char *cf_api_type_name(const cJSON *it);

/* The sampling fields shared by the OpenAI endpoints, into base. */
int cf_api_parse_openai_sampling(cf_api_ctx *c, const cJSON *root, cinfer_request *base);
/* max_tokens (or max_completion_tokens): absent = the cap, fitted to the context. */
int cf_api_parse_max_tokens(cf_api_ctx *c, const cJSON *root, const char *key, int required, cinfer_request *base);
/* A string or a list of strings into base->stop (key names the field: "stop", "stop_sequences"). */
int cf_api_parse_stop(cf_api_ctx *c, const cJSON *root, const char *key, int string_allowed, cinfer_request *base);
int cf_api_parse_seed(cf_api_ctx *c, const cJSON *root, cinfer_request *base);
/* Speculative decoding: "speculative": {"source", "n_max", "n_min"} and llama-server's flat "speculative.n_max",
 * "speculative.n_min" into base->draft and base->draft_max. */
int cf_api_parse_speculative(cf_api_ctx *c, const cJSON *root, cinfer_request *base);

int cf_api_parse_chat(cf_api_ctx *c, const cJSON *root, cf_api_request *r, cinfer_request *base);
int cf_api_parse_completions(cf_api_ctx *c, const cJSON *root, cf_api_request *r, cinfer_request *base,
                             const char ***prompts_text, int32_t ***prompt_ids, size_t **n_ids, int *n_prompts);
int cf_api_parse_messages(cf_api_ctx *c, const cJSON *root, cf_api_request *r, cinfer_request *base);

/* The text of OpenAI content (a string or an array of text parts), joined; param names the content. */
int cf_api_text_content(cf_api_ctx *c, const cJSON *content, const char *param, int allow_refusal,
                        const char **out);

int cf_api_valid_utf8(const char *s, size_t n);

#endif
