/* cinfer.h: the public C API of cinfer. Opaque handles, *_default_params() structs, status codes
 * with a message a person can act on; library code never aborts on caller input. */
#ifndef CINFER_H
#define CINFER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CINFER_API_VERSION 1

/* Every fallible call returns one of these; details go to a cinfer_error when the caller passes one. */
typedef enum cinfer_status {
    CINFER_OK = 0,
    CINFER_E_INVALID_ARGUMENT,   /* a parameter is malformed; the message names it */
    CINFER_E_IO,                 /* a file could not be opened, read or mapped */
    CINFER_E_FORMAT,             /* a file is malformed: truncated, bad header, wrong shape or dtype */
    CINFER_E_UNSUPPORTED,        /* valid input we do not handle (architecture, dtype, template construct) */
    CINFER_E_OUT_OF_MEMORY,
    CINFER_E_DEVICE,             /* the compute device failed or is absent */
    CINFER_E_NO_DEVICE,          /* no usable GPU is present */
    CINFER_E_CANCELLED,
    CINFER_E_INTERNAL,
    CINFER_E_TOKENIZER,          /* tokenizer.json could not be used */
    CINFER_E_TEMPLATE,           /* a chat template failed to parse or render */
    /* request validation (engine contract): each failure has its own code */
    CINFER_E_EMPTY_PROMPT,
    CINFER_E_TOKEN_OUT_OF_RANGE,
    CINFER_E_MAX_TOKENS,
    CINFER_E_CONTEXT_OVERFLOW,
    CINFER_E_TOP_LOGPROBS,
    CINFER_E_TEMPERATURE,
    CINFER_E_TOP_K,
    CINFER_E_TOP_P,
    CINFER_E_MIN_P,
    CINFER_E_PENALTY,
    CINFER_E_NOT_A_NUMBER,
    CINFER_E_BUSY,
    CINFER_E_TIMEOUT,            /* a wait ended before its event (cinfer_session_next / _wait) */
    CINFER_STATUS_COUNT
} cinfer_status;

/* Filled by a failing call when the caller passes a non-NULL pointer. */
typedef struct cinfer_error {
    cinfer_status code;
    char message[512];
} cinfer_error;

/* A short stable name for a status code ("invalid_argument", "io", ...). */
const char *cinfer_status_name(cinfer_status s);

/* ---- models ---------------------------------------------------------------------------------- */

typedef enum cinfer_device { CINFER_DEVICE_CPU, CINFER_DEVICE_CUDA } cinfer_device;

typedef struct cinfer_model_params {
    size_t struct_size;          /* sizeof(cinfer_model_params), set by cinfer_model_default_params */
    cinfer_device device;
    int gpu_index;
    int n_threads;               /* CPU threads; 0 = one per physical core */
    /* Called with 0 at the start, after each loading stage (weights, tokenizer, chat template) and
     * with 1 at the end. */
    void (*progress)(float fraction, void *user);
    /* Polled between stages; non-zero stops the load with CINFER_E_CANCELLED. */
    int (*cancel)(void *user);
    void *user;
} cinfer_model_params;

typedef struct cinfer_model cinfer_model;

typedef struct cinfer_model_info {
    const char *architecture;    /* config.json's architectures[0] */
    int vocab;                   /* rows of the logits; valid token ids are [0, vocab) */
    int context;                 /* the model's context length */
    int has_tokenizer;           /* tokenizer.json was found: text prompts work */
    int has_chat_template;       /* the folder has a chat template (a broken one fails chat requests with its error) */
    int n_eos;                   /* ids that end generation unless ignore_eos */
    const int32_t *eos_ids;
} cinfer_model_info;

cinfer_model_params cinfer_model_default_params(void);
/* Loads a Hugging Face model folder: config.json, *.safetensors, and when present tokenizer.json and a
 * chat template. */
cinfer_status cinfer_model_load(const char *dir, const cinfer_model_params *p, cinfer_model **out,
                                cinfer_error *err);
/* Frees the model; an engine still open on it is freed first (see cinfer_engine_free). */
void cinfer_model_free(cinfer_model *m);
cinfer_model_info cinfer_model_get_info(const cinfer_model *m);

/* Text to ids as the model's tokenizer does (add_special: BOS/EOS as the tokenizer's post-processor
 * adds them). *ids is released with cinfer_free. */
cinfer_status cinfer_tokenize(const cinfer_model *m, const char *text, size_t len, int add_special,
                              int32_t **ids, size_t *n_ids, cinfer_error *err);
/* Ids to text (special tokens skipped); *text is NUL-terminated and released with cinfer_free. */
cinfer_status cinfer_detokenize(const cinfer_model *m, const int32_t *ids, size_t n_ids, char **text,
                                size_t *len, cinfer_error *err);
void cinfer_free(void *p);

/* ---- engine ---------------------------------------------------------------------------------- */

typedef struct cinfer_engine_params {
    size_t struct_size;
    int max_queued;              /* sessions waiting for their turn; beyond it open fails with
                                    CINFER_E_BUSY. 0 = no limit */
    /* The continuous batch: every step runs one forward pass over the decode rows of every generating
     * session and prompt chunks of those being prefilled. */
    int max_batch;               /* sessions in the batch at once; 0 = 128 on CUDA, 16 on the CPU (where a
                                    step's matmuls stop gaining from more rows sooner) */
    int max_batch_tokens;        /* rows (tokens) per step, decode rows and prompt chunks together; 0 = the
                                    backend's prefill chunk (CPU 256); at least max_batch */
    int64_t kv_memory;           /* bytes of KV cache shared by all sessions; 0 = room for max_batch full
                                    contexts within 90% of the device's free memory. A request whose prompt
                                    plus max_tokens cannot fit in it is refused at open. With sliding-window
                                    layers it is split between their own pool, where a session holds only
                                    its window, and the full-attention layers' pool, in proportion to what a
                                    session needs of each */
    /* The clock behind deadlines and timings, in seconds (any origin, never decreasing), called from
     * the engine's and the consumers' threads; NULL = the monotonic clock. Tests inject one to drive
     * deadlines without sleeping. */
    double (*now)(void *user);
    void *now_user;
    /* Receives one line per notable event (each request's plan at open, each outcome), from any thread;
     * NULL = silent. */
    void (*log)(const char *line, void *user);
    void *log_user;
    /* Speculative decoding. draft_model: a smaller model whose greedy continuation drafts tokens for requests
     * naming draft "draft" (its tokenizer must agree with the engine's model; owned by the caller and outliving
     * the engine); NULL = none, and such requests are refused. default_draft: the draft source of requests
     * that name none: NULL or "" = plain decoding, "ngram", "draft" (needs draft_model), "none". */
    cinfer_model *draft_model;
    const char *default_draft;
    /* Lookahead: while the device runs a decode step, the next one is already queued behind it (its inputs are
     * the tokens picked on the device), so the device does not wait for the host between steps. The host reads
     * each step's tokens one step later; a session that stops there has its queued row discarded (one that reaches
     * max_tokens, or is cancelled, gets none). A session that joins the batch meanwhile comes with the queued step, its
     * prompt whole or in pieces within the step's token budget (a prompt in pieces goes on in the steps queued after). Only while every session picks on the device and drafts nothing in the
     * next step (a session whose speculation the cost policy has paused counts as plain); otherwise steps run one at
     * a time. Not for models whose sliding-window layers keep their own KV pool (Gemma's,
     * among others).
     * 0 = where the device runs apart from the host (CUDA), 1 = always, -1 = never. */
    int lookahead;
} cinfer_engine_params;

/* One engine per model: it owns the scheduler thread that runs the model's sessions in one continuous
 * batch, and the KV memory they share (with a prefix cache: a prompt that begins like an earlier one reuses
 * its computed blocks, reported as usage.cached_tokens). */
typedef struct cinfer_engine cinfer_engine;

cinfer_engine_params cinfer_engine_default_params(void);
/* CINFER_E_BUSY when the model already has an engine; CINFER_E_INVALID_ARGUMENT for a negative or
 * out-of-range batch or memory parameter; CINFER_E_OUT_OF_MEMORY when the KV memory cannot be allocated. */
cinfer_status cinfer_engine_create(cinfer_model *m, const cinfer_engine_params *p, cinfer_engine **out,
                                   cinfer_error *err);
/* Cancels every session (reason CINFER_CANCEL_ENGINE_CLOSED), waits until each is terminal and its
 * native resources (sequence state, sampler) are released, stops the scheduler thread and frees the
 * engine. The sessions stay readable; each is still freed with cinfer_session_free. Not from a
 * callback. */
void cinfer_engine_free(cinfer_engine *e);

/* The engine's load as of its last step, for monitoring; any thread, any time. */
typedef struct cinfer_engine_stats {
    int queued;                  /* sessions waiting for their turn (preempted ones included) */
    int running;                 /* sessions in the batch */
    int kv_blocks_total;         /* blocks of the KV memory */
    int kv_blocks_used;          /* held by sessions (not free, not merely cached) */
    int kv_blocks_cached;        /* free blocks that still hold a cached prompt prefix */
    int kv_block_tokens;         /* token positions per block */
    int64_t kv_block_bytes;
    long steps;                  /* forward steps run so far */
    /* where the scheduler thread's time went, seconds so far: the batch's turns (from settling cancellations to
     * handing out the step's tokens; runner_seconds included), and in those the runner's steps (the forward pass,
     * waiting for the device included), and in those the wait for the device (from enqueuing the step's picks and
     * reads to its end). The rest of a turn is the host's: building the step, the runner's bookkeeping and launches,
     * sampling on the host, text, stops, handing tokens to sessions. */
    double turn_seconds, runner_seconds, device_wait_seconds;
    /* Sliding-window layers' own KV memory, where a sequence holds only the blocks its window still sees (the
     * kv_blocks above are then the full-attention layers'); all 0 when the model has no such layers. */
    int kv_window_blocks_total;
    int kv_window_blocks_used;   /* held by sessions */
    int64_t kv_window_block_bytes;
    int kv_window;               /* positions those layers look back */
    long lookahead_steps;        /* of the steps, those queued behind the one in flight (cinfer_engine_params.lookahead) */
    long lookahead_joins;        /* sessions that joined the batch in such a step rather than waiting for the one in flight */
    long preemptions;            /* sessions sent back to the queue to free KV memory (they recompute when readmitted) */
} cinfer_engine_stats;
void cinfer_engine_get_stats(cinfer_engine *e, cinfer_engine_stats *out);

/* ---- requests -------------------------------------------------------------------------------- */

#define CINFER_MAX_TOP_LOGPROBS 20

typedef struct cinfer_message {
    const char *role;            /* "system", "user", "assistant", "tool", ... as the template knows them */
    const char *content;         /* may be NULL only for an assistant message with tool_calls_json */
    /* assistant: the tools it called, a JSON array in OpenAI's form
     * [{"id": ..., "type": "function", "function": {"name": ..., "arguments": "<JSON text>"}}], or NULL */
    const char *tool_calls_json;
    const char *tool_call_id;    /* role "tool": the id of the call this message answers, or NULL */
    const char *name;            /* role "tool": the function's name, or NULL */
} cinfer_message;

typedef struct cinfer_logit_bias {
    int32_t token;
    float bias;
} cinfer_logit_bias;

/* One generation request. The prompt is exactly one of: token ids, text (tokenized with the model's
 * tokenizer, special tokens added as its post-processor does), or chat messages (rendered with the
 * model's chat template, then tokenized without adding special tokens). Everything is copied at open:
 * the caller may free or reuse its buffers as soon as cinfer_session_open returns. */
typedef struct cinfer_request {
    size_t struct_size;
    const int32_t *prompt_ids;
    size_t n_prompt_ids;
    const char *prompt_text;
    const cinfer_message *messages;
    size_t n_messages;
    int add_generation_prompt;   /* messages: end with the assistant header (default 1) */
    const char *tools_json;      /* messages: the tools the model may call, a JSON array of OpenAI tool
                                    definitions [{"type": "function", "function": {"name", "description",
                                    "parameters"}}], handed to the chat template as `tools`; NULL = none */
    const char *template_kwargs_json; /* messages: a JSON object of extra template variables
                                    ({"enable_thinking": false}); NULL = none */

    int32_t max_tokens;          /* > 0; default 512 */
    int fit_context;             /* non-zero: lower max_tokens to the room the context (and the engine's
                                    KV memory) leaves after the prompt instead of failing with
                                    CINFER_E_CONTEXT_OVERFLOW (CINFER_E_OUT_OF_MEMORY) */
    float temperature;           /* >= 0, 0 = greedy; default 1 */
    int32_t top_k;               /* >= 0, 0 = off */
    float top_p;                 /* (0, 1], 1 = off */
    float min_p;                 /* [0, 1], 0 = off */
    float repetition_penalty;    /* > 0, 1 = off */
    int32_t repetition_window;   /* last N tokens (prompt included), 0 = all; default 20 */
    float presence_penalty;      /* [-2, 2] */
    float frequency_penalty;     /* [-2, 2] */
    const cinfer_logit_bias *logit_bias;
    size_t n_logit_bias;
    int64_t seed;                /* < 0: a fresh seed per request (default), reported in the result */
    const char *const *stop;     /* stop strings: generation ends before the first match; the match and
                                    anything after it are not emitted */
    size_t n_stop;
    const int32_t *stop_ids;     /* generated ids that end generation (not emitted) */
    size_t n_stop_ids;
    int ignore_eos;              /* do not end at the model's end-of-sequence ids */
    int logprobs;                /* report the log-probability of each generated token */
    int32_t top_logprobs;        /* and the most likely alternatives, [0, CINFER_MAX_TOP_LOGPROBS] */
    /* Speculative decoding (lossless: on the CPU the output is the one plain decoding gives, token for token,
     * for the same seed; on CUDA verification rows go through the GEMM path and plain decoding through the
     * decode kernels, so a near-tie may resolve differently, as batching can). draft: the source of drafted tokens: "ngram" (prompt lookup: what followed the context's
     * longest recent suffix earlier in it), "draft" (the engine's draft model), "none" (plain decoding), or
     * NULL / "" for the engine's default_draft. Plan "text:spec-ngram", "text:spec-draft". */
    const char *draft;
    int ids_only;                /* do not detokenize: events and the result carry ids and no text (so an
                                    id without text never fails a run); no stop strings */
    int32_t draft_max;           /* drafted tokens per step at most, [0, 16]; 0 = adaptive up to 16 */
} cinfer_request;

cinfer_request cinfer_request_default(void);

/* ---- sessions -------------------------------------------------------------------------------- */

typedef enum cinfer_session_state {
    CINFER_STATE_CREATED,        /* opened, waiting for its turn */
    CINFER_STATE_PREPARING,      /* sequence state allocated, prompt being evaluated */
    CINFER_STATE_RUNNING,        /* generating (also while preempted: waiting to recompute its KV) */
    CINFER_STATE_SETTLING,       /* generation over, native resources being released */
    CINFER_STATE_TERMINAL,       /* the outcome is final and the result is complete */
} cinfer_session_state;

typedef enum cinfer_outcome {
    CINFER_OUTCOME_NONE,         /* not terminal yet */
    CINFER_OUTCOME_COMPLETED,
    CINFER_OUTCOME_CANCELLED,
    CINFER_OUTCOME_FAILED,
} cinfer_outcome;

typedef enum cinfer_finish {
    CINFER_FINISH_NONE,
    CINFER_FINISH_STOP,          /* an end-of-sequence id, a stop id or a stop string */
    CINFER_FINISH_LENGTH,        /* max_tokens reached */
} cinfer_finish;

typedef enum cinfer_cancel_reason {
    CINFER_CANCEL_NONE,
    CINFER_CANCEL_REQUESTED,       /* cinfer_session_cancel */
    CINFER_CANCEL_CONSUMER_CLOSED, /* the callback returned non-zero, or the session was freed live */
    CINFER_CANCEL_CONSUMER_IDLE,   /* a pulling consumer left events unread past idle_timeout */
    CINFER_CANCEL_ENGINE_CLOSED,   /* cinfer_engine_free */
} cinfer_cancel_reason;

typedef struct cinfer_token_logprob {
    int32_t token;
    float logprob;
} cinfer_token_logprob;

/* Log-probabilities of one generated token: log-softmax of the logits after the processors (bias,
 * penalties), before temperature and truncation. */
typedef struct cinfer_logprobs {
    int32_t token;
    float logprob;
    int32_t n_top;
    cinfer_token_logprob top[CINFER_MAX_TOP_LOGPROBS]; /* most likely first */
} cinfer_logprobs;

typedef enum cinfer_event_kind {
    CINFER_EVENT_TOKEN,          /* one committed token */
    CINFER_EVENT_END,            /* the session is terminal; no event follows */
} cinfer_event_kind;

typedef struct cinfer_event {
    cinfer_event_kind kind;
    int32_t index;               /* TOKEN: position in the completion, from 0 */
    int32_t token;
    /* The text this event adds to the output (UTF-8, not NUL-terminated). Text is held back while it
     * may be the start of a stop string or ends inside a UTF-8 sequence, so a token can add nothing;
     * END carries whatever was held back when generation ended without a stop string. Valid until the
     * callback returns or the next cinfer_session_next call. */
    const char *text;
    size_t text_len;
    const cinfer_logprobs *logprobs; /* TOKEN when logprobs were asked for, else NULL */
} cinfer_event;

typedef enum cinfer_output_mode {
    CINFER_OUTPUT_COLLECT,       /* read the result after cinfer_session_wait */
    CINFER_OUTPUT_PULL,          /* events through cinfer_session_next */
    CINFER_OUTPUT_CALLBACK,      /* events through on_event, on the engine's thread */
} cinfer_output_mode;

typedef struct cinfer_session_params {
    size_t struct_size;
    cinfer_output_mode output;
    /* CALLBACK: called for every event in order, END included; returning non-zero cancels the session
     * (reason CINFER_CANCEL_CONSUMER_CLOSED). It runs on the engine's thread, so it should return soon
     * (every session waits for it) and must not wait for a session or free the engine; it may cancel
     * any session or free one (the engine then releases it after the callback). */
    int (*on_event)(const cinfer_event *ev, void *user);
    void *user;
    /* PULL: cancel (reason CINFER_CANCEL_CONSUMER_IDLE) when events have waited unread for longer than
     * this many seconds of the engine's clock since the consumer last pulled. 0 = never. */
    double idle_timeout;
} cinfer_session_params;

typedef struct cinfer_usage {
    int32_t prompt_tokens;
    int32_t cached_tokens;       /* prompt tokens served from a prompt cache */
    int32_t completion_tokens;   /* tokens in the result */
    double queue_s;              /* open to the start of preparation */
    double ttft_s;               /* open to the first generated token */
    double prefill_tps;          /* prompt tokens / prompt evaluation time */
    double decode_tps;           /* tokens generated after the first / the time they took */
    double total_s;              /* open to terminal */
    int32_t draft_tokens;        /* speculative decoding: tokens drafted and verified */
    int32_t accepted_tokens;     /* of which the target accepted (each step also adds one token of its own) */
} cinfer_usage;

typedef struct cinfer_result {
    cinfer_outcome outcome;
    cinfer_finish finish;        /* COMPLETED */
    cinfer_cancel_reason cancel_reason; /* CANCELLED */
    cinfer_error error;          /* FAILED: what went wrong */
    const char *plan;            /* how the request ran, e.g. "text:continuous" */
    const char *text;            /* NUL-terminated */
    size_t text_len;
    const int32_t *tokens;       /* the committed tokens (end-of-sequence and stop ids excluded) */
    size_t n_tokens;
    const cinfer_logprobs *logprobs; /* n_tokens entries when logprobs were asked for, else NULL */
    uint64_t seed;               /* the sampling seed used (drawn fresh when the request named none) */
    cinfer_usage usage;
} cinfer_result;

typedef struct cinfer_session cinfer_session;

cinfer_session_params cinfer_session_default_params(void);
/* Validates and copies the request, plans it and queues it; *out is set before the session can run, so
 * callbacks may use it. A request that fails validation allocates
 * nothing and returns its own status (CINFER_E_EMPTY_PROMPT, _TOKEN_OUT_OF_RANGE, _MAX_TOKENS,
 * _CONTEXT_OVERFLOW, _TOP_LOGPROBS, _TEMPERATURE, _TOP_K, _TOP_P, _MIN_P, _PENALTY, _NOT_A_NUMBER,
 * _INVALID_ARGUMENT, _UNSUPPORTED for a draft source, _TOKENIZER / _TEMPLATE for text and messages);
 * CINFER_E_OUT_OF_MEMORY when its prompt plus max_tokens can never fit in the engine's KV memory (one
 * that fits once others end waits for its turn). */
cinfer_status cinfer_session_open(cinfer_engine *e, const cinfer_request *req, const cinfer_session_params *p,
                                  cinfer_session **out, cinfer_error *err);
/* Thread-safe and idempotent; takes effect within one decode step (or one prompt chunk). */
void cinfer_session_cancel(cinfer_session *s);
cinfer_session_state cinfer_session_get_state(const cinfer_session *s);
/* The plan chosen at open ("text:continuous"). */
const char *cinfer_session_plan(const cinfer_session *s);
/* The prompt's length in tokens, known at open (chat messages rendered and tokenized). */
int32_t cinfer_session_prompt_tokens(const cinfer_session *s);
/* PULL: the next event, waiting up to timeout seconds (< 0 = no limit, 0 = poll). CINFER_E_TIMEOUT when
 * none came in time; CINFER_E_INVALID_ARGUMENT in another output mode; after END, END again. */
cinfer_status cinfer_session_next(cinfer_session *s, cinfer_event *ev, double timeout, cinfer_error *err);
/* Waits until the session is terminal (in CALLBACK mode: and its END event has been handled; so never
 * call it from the callback), timeout as above, and points *result at its result, which lives as long
 * as the session. Returns CINFER_OK for every outcome: read result->outcome. */
cinfer_status cinfer_session_wait(cinfer_session *s, double timeout, const cinfer_result **result,
                                  cinfer_error *err);
/* Cancels a live session (reason CINFER_CANCEL_CONSUMER_CLOSED), waits until the engine has released
 * it, and frees it. */
void cinfer_session_free(cinfer_session *s);

/* ---- chat replies ------------------------------------------------------------------------------ */

/* A chat model's reply is text in the model's own conventions: reasoning in <think> tags, tool calls as
 * <tool_call>{json}</tool_call> (Qwen, Hermes), a JSON object (Llama 3), [TOOL_CALLS][...] (Mistral) or
 * Gemma's call syntax. A chat parser, fed the reply's text as it streams, splits it into deltas of
 * content, reasoning and complete tool calls, holding back only text that may still turn out to be
 * markup. The format is found from the model's chat template and tokenizer. Where that markup is made of
 * special tokens (Mistral's [TOOL_CALLS], Gemma 4's <|tool_call> and thought channel), a chat request that
 * offers tools (or, for reasoning markup, any chat request) keeps special tokens in its text. */
typedef enum cinfer_chat_delta_kind {
    CINFER_DELTA_CONTENT,        /* text of the answer */
    CINFER_DELTA_REASONING,      /* text of the model's reasoning (inside <think>...</think>) */
    CINFER_DELTA_TOOL_CALL,      /* one complete tool call */
} cinfer_chat_delta_kind;

typedef struct cinfer_chat_delta {
    cinfer_chat_delta_kind kind;
    const char *text;            /* CONTENT, REASONING: UTF-8, not NUL-terminated */
    size_t text_len;
    int32_t tool_index;          /* TOOL_CALL: 0 for the reply's first call, then 1, ... */
    const char *tool_name;       /* TOOL_CALL: NUL-terminated */
    const char *tool_arguments;  /* TOOL_CALL: the arguments as JSON text of an object, NUL-terminated */
} cinfer_chat_delta;

typedef struct cinfer_chat_parser_params {
    size_t struct_size;
    int parse_tool_calls;        /* the request offered tools: parse calls out of the text (default 0) */
    int parse_reasoning;         /* split <think> reasoning out of the content (default 1) */
    /* The request as it was rendered: the parser reads its generation prompt (a template that opens
     * <think> in the prompt starts the reply inside reasoning). NULL = a plain reply. */
    const cinfer_request *request;
} cinfer_chat_parser_params;

typedef struct cinfer_chat_parser cinfer_chat_parser;

cinfer_chat_parser_params cinfer_chat_parser_default_params(void);
cinfer_status cinfer_chat_parser_create(const cinfer_model *m, const cinfer_chat_parser_params *p,
                                        cinfer_chat_parser **out, cinfer_error *err);
/* Feeds the next piece of the reply (an event's text); on_delta is called for each delta it completes,
 * in order, and its pointers are valid only during the call. A non-zero return from on_delta stops the
 * feed and is returned as CINFER_E_CANCELLED. */
cinfer_status cinfer_chat_parser_feed(cinfer_chat_parser *p, const char *text, size_t len,
                                      int (*on_delta)(const cinfer_chat_delta *d, void *user), void *user,
                                      cinfer_error *err);
/* The reply has ended: flushes held-back text (markup never closed is returned as content, a tool call
 * whose JSON does not parse as well). */
cinfer_status cinfer_chat_parser_finish(cinfer_chat_parser *p,
                                        int (*on_delta)(const cinfer_chat_delta *d, void *user), void *user,
                                        cinfer_error *err);
void cinfer_chat_parser_free(cinfer_chat_parser *p);

const char *cinfer_state_name(cinfer_session_state s);
const char *cinfer_outcome_name(cinfer_outcome o);
const char *cinfer_finish_name(cinfer_finish f);
const char *cinfer_cancel_reason_name(cinfer_cancel_reason r);

#ifdef __cplusplus
}
#endif
#endif
