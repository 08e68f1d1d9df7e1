/* api.h: translation between the HTTP APIs' JSON and the engine: OpenAI chat completions and completions,
 * Anthropic messages. Requests are parsed and validated into cinfer_requests (a bad field is named);
 * a writer turns a response's session events and results into the API's body or SSE events. No sockets
 * and no engine calls here: server.c owns the connections and the sessions. */
#ifndef CF_SERVER_API_H
#define CF_SERVER_API_H

#include <stdint.h>

#include "cinfer.h"
#include "server/buf.h"

typedef enum cf_api_kind {
    CF_API_CHAT,                 /* POST /v1/chat/completions */
    CF_API_COMPLETIONS,          /* POST /v1/completions */
    CF_API_MESSAGES,             /* POST /v1/messages (Anthropic) */
} cf_api_kind;

/* A request the client got wrong, or a failure to report in the API's error shape. */
typedef struct cf_api_error {
    int status;                  /* HTTP status */
    char message[512];
    char param[128];             /* the offending field, e.g. "messages[2].content"; "" when none */
} cf_api_error;

typedef struct cf_api_limits {
    int32_t max_tokens_cap;      /* a request asking for more is refused (400); its default is
                                    min(cap, the room left in the context) */
    int max_choices;             /* n (times the prompts of a completions request) at most this */
    int max_tools;
} cf_api_limits;

/* One parsed request. reqs[i] produces choice i (OpenAI's n copies, times each prompt of a completions
 * prompt list); every pointer in them points into this struct's own storage. */
typedef struct cf_api_request {
    cf_api_kind kind;
    cinfer_request *reqs;
    int n_reqs;
    int stream;
    int include_usage;           /* stream_options.include_usage */
    int echo;                    /* completions: the prompt's text before the completion */
    int tools_offered;           /* tool calls are parsed out of the replies */
    char *model;                 /* the name the client asked for, echoed back; NULL when absent */
    void *storage;               /* owned by api.c */
} cf_api_request;

/* Parses a request body. Returns 0 and sets *out, or fills *err (status 400, or 413/422 where the API
 * says so) and returns -1. Unknown fields are ignored; response_format is refused with a clear message. */
int cf_api_parse(cf_api_kind kind, const char *body, size_t len, const cf_api_limits *lim,
                 const cinfer_model *m, cf_api_request **out, cf_api_error *err);
void cf_api_request_free(cf_api_request *r);

/* The error body in the API's shape: OpenAI {"error": {"message", "type", "param", "code"}}, Anthropic
 * {"type": "error", "error": {"type", "message"}}. Routes of neither API use OpenAI's shape. NULL when
 * memory runs out. Released with free. */
char *cf_api_error_json(cf_api_kind kind, const cf_api_error *e);
/* A failure of the engine as the API reports it: what cinfer_session_open refused (400 naming the field
 * for a request it cannot take, 429 for CINFER_E_BUSY), or 500 / 503 for the server's own failures. */
void cf_api_error_from_status(cf_api_kind kind, cinfer_status st, const char *message, cf_api_error *out);

typedef struct cf_api_meta {
    const char *id;              /* "chatcmpl-...", "cmpl-...", "msg_..." made by the server */
    int64_t created;             /* unix seconds */
    const char *model;           /* the model name to report */
    const char *fingerprint;     /* system_fingerprint */
    const cinfer_model *m;       /* for token text (logprobs) and the chat parser */
} cf_api_meta;

/* Writes one response. Streaming: every call appends the SSE bytes to send now to out. Not streaming:
 * calls append nothing until cf_api_writer_finish appends the whole JSON body, made from the results
 * alone (so events need not be passed on). Calls for different choices may interleave; the caller
 * serializes them. */
typedef struct cf_api_writer cf_api_writer;

/* r must outlive the writer; meta's strings are copied. */
cinfer_status cf_api_writer_create(const cf_api_request *r, const cf_api_meta *meta, cf_api_writer **out,
                                   cinfer_error *err);
/* Choice i's prompt length (cinfer_session_prompt_tokens), for Anthropic's message_start, which comes
 * before any result; set it before cf_api_writer_begin. */
void cf_api_writer_set_prompt_tokens(cf_api_writer *w, int choice, int32_t n);
/* Before any event: OpenAI's first chunk of each choice (role), Anthropic's message_start. */
cinfer_status cf_api_writer_begin(cf_api_writer *w, cf_buf *out);
/* An event of choice i: each TOKEN, and its END (which carries the text held back at the end). */
cinfer_status cf_api_writer_event(cf_api_writer *w, int choice, const cinfer_event *ev, cf_buf *out);
/* Choice i is terminal (its END event has been passed on): its finish reason, or an error event when it
 * failed. */
cinfer_status cf_api_writer_end_choice(cf_api_writer *w, int choice, const cinfer_result *res, cf_buf *out);
/* Every choice has ended: usage, then data: [DONE] (OpenAI) or message_delta and message_stop
 * (Anthropic); not streaming, the whole body. */
cinfer_status cf_api_writer_finish(cf_api_writer *w, cf_buf *out);
/* Not streaming: the HTTP status of the body finish wrote: 200, or when a choice failed, the status of the
 * error in the API's shape that the body then is (500, or 503 when the engine was shut down). */
int cf_api_writer_http_status(const cf_api_writer *w);
void cf_api_writer_free(cf_api_writer *w);

#endif
