/* api_writer.h: the state of a cf_api_writer shared by api_writer.c (creation, dispatch, the chat parser,
 * token text, usage) and the per-API writers api_openai.c and api_anthropic.c. */
#ifndef CF_SERVER_API_WRITER_H
#define CF_SERVER_API_WRITER_H

#include <cjson/cJSON.h>

#include "server/api_internal.h"

typedef enum cf_block_kind { CF_BLOCK_NONE, CF_BLOCK_TEXT, CF_BLOCK_THINKING, CF_BLOCK_TOOL } cf_block_kind;

typedef struct cf_api_choice {
    cinfer_chat_parser *parser;  /* chat and messages with a model: splits reasoning and tool calls out */
    size_t fed;                  /* bytes of the reply's text passed on from events */
    int n_tool_calls;
    int ended;
    cinfer_outcome outcome;
    cinfer_finish finish;
    cinfer_usage usage;
    int32_t prompt_tokens;       /* known at open, before the result's usage */
    char error[512];             /* FAILED or CANCELLED: what to tell the client */
    int error_status;
    const char *stop_sequence;   /* Anthropic: the stop string that ended the reply, or NULL */
    /* streaming */
    cJSON *pending_logprobs;     /* OpenAI chat: entries not yet sent with a chunk */
    size_t text_offset;          /* completions: bytes of text sent before (echo included) */
    cf_block_kind block;         /* Anthropic: the open content block's kind */
    int n_blocks;                /* Anthropic: content blocks started */
    /* not streaming */
    cJSON *body;                 /* the finished choice (OpenAI) or content array (Anthropic) */
    cf_buf content, reasoning;   /* OpenAI chat: the text so far */
    cJSON *tool_calls;           /* OpenAI chat: the calls so far */
} cf_api_choice;

struct cf_api_writer {
    const cf_api_request *r;
    cf_api_kind kind;
    char *id, *model, *fingerprint;
    int64_t created;
    const cinfer_model *m;
    cf_api_choice *ch;
    int n;
    int http_status;
};

/* Adds v under key k (or to array a); deletes v when it cannot. 0 when v is NULL or memory ran out. */
int cf_api_add(cJSON *o, const char *k, cJSON *v);
int cf_api_push(cJSON *a, cJSON *v);

/* Appends "data: JSON\n\n" (event NULL) or "event: NAME\ndata: JSON\n\n", and deletes j. */
cinfer_status cf_api_sse(cf_buf *out, const char *event, cJSON *j);
/* Appends JSON and deletes j. */
cinfer_status cf_api_put_json(cf_buf *out, cJSON *j);
/* A string of n bytes (not NUL-terminated). */
cJSON *cf_api_string_n(const char *s, size_t n);
/* A float as the shortest decimal that reads back as the same float. */
cJSON *cf_api_float(float v);

/* The text of one token (as cinfer_detokenize gives it, invalid UTF-8 replaced with U+FFFD) and its raw
 * bytes as an array of numbers. */
cJSON *cf_api_token_text(const cf_api_writer *w, int32_t token, cJSON **bytes);
/* A tool call id: prefix and 24 letters and digits, unique per response id, choice and call. */
void cf_api_tool_id(const cf_api_writer *w, const char *prefix, int choice, int index, char *out, size_t cap);

typedef int (*cf_api_delta_fn)(cf_api_writer *w, int choice, const cinfer_chat_delta *d, cf_buf *out);
/* Passes text through choice's chat parser (or as content when it has none) to fn. */
cinfer_status cf_api_feed(cf_api_writer *w, int choice, const char *text, size_t len, cf_api_delta_fn fn, cf_buf *out);
/* The reply ended: flushes the parser to fn. */
cinfer_status cf_api_feed_end(cf_api_writer *w, int choice, cf_api_delta_fn fn, cf_buf *out);

/* Records res in the choice (outcome, finish, usage, the error to report). */
void cf_api_record_result(cf_api_writer *w, int choice, const cinfer_result *res);

/* The usage of the whole response: prompts counted once per prompt (not per choice), completions summed. */
void cf_api_total_usage(const cf_api_writer *w, int32_t *prompt, int32_t *cached, int32_t *completion);
/* Speculative decoding over every choice: tokens drafted and, of them, accepted. */
void cf_api_total_drafts(const cf_api_writer *w, int32_t *drafted, int32_t *accepted);

/* Per-API writers. */
cinfer_status cf_api_openai_begin(cf_api_writer *w, cf_buf *out);
cinfer_status cf_api_openai_event(cf_api_writer *w, int choice, const cinfer_event *ev, cf_buf *out);
cinfer_status cf_api_openai_end(cf_api_writer *w, int choice, const cinfer_result *res, cf_buf *out);
cinfer_status cf_api_openai_finish(cf_api_writer *w, cf_buf *out);
cinfer_status cf_api_anthropic_begin(cf_api_writer *w, cf_buf *out);
cinfer_status cf_api_anthropic_event(cf_api_writer *w, int choice, const cinfer_event *ev, cf_buf *out);
cinfer_status cf_api_anthropic_end(cf_api_writer *w, int choice, const cinfer_result *res, cf_buf *out);
cinfer_status cf_api_anthropic_finish(cf_api_writer *w, cf_buf *out);

#endif
