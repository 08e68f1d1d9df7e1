/* api_openai.c: OpenAI's responses: chat.completion.chunk and text_completion SSE chunks (role, content,
 * reasoning_content and tool_calls deltas, logprobs, finish reasons, the usage chunk, [DONE]), error
 * events, and the chat.completion / text_completion bodies. */
#include "server/api_writer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"

#define OOM CINFER_E_OUT_OF_MEMORY

static int chat(const cf_api_writer *w) {
    return w->kind == CF_API_CHAT;
}

static const char *finish_reason(const cf_api_writer *w, const cf_api_choice *ch) {
    if (ch->finish == CINFER_FINISH_LENGTH) return "length";
    return chat(w) && ch->n_tool_calls ? "tool_calls" : "stop";
}

/* The fields every chunk and body opens with; choices is set to the (empty) choices array. */
static cJSON *envelope(const cf_api_writer *w, const char *object, cJSON **choices) {
    cJSON *j = cJSON_CreateObject();
    int ok = j && cJSON_AddStringToObject(j, "id", w->id) && cJSON_AddStringToObject(j, "object", object) &&
             cJSON_AddNumberToObject(j, "created", (double)w->created) && cJSON_AddStringToObject(j, "model", w->model) &&
             (w->fingerprint ? cJSON_AddStringToObject(j, "system_fingerprint", w->fingerprint)
                             : cJSON_AddNullToObject(j, "system_fingerprint")) &&
             (*choices = cJSON_AddArrayToObject(j, "choices"));
    if (!ok) cJSON_Delete(j);
    return ok ? j : NULL;
}

static cJSON *chunk(const cf_api_writer *w, cJSON **choices) {
    cJSON *j = envelope(w, chat(w) ? "chat.completion.chunk" : "text_completion", choices);
    if (j && w->r->include_usage && !cJSON_AddNullToObject(j, "usage")) {
        cJSON_Delete(j);
        return NULL;
    }
    return j;
}

static cJSON *usage(const cf_api_writer *w) {
    int32_t prompt, cached, completion;
    cf_api_total_usage(w, &prompt, &cached, &completion);
    cJSON *u = cJSON_CreateObject(), *d;
    int ok = u && cJSON_AddNumberToObject(u, "prompt_tokens", prompt) && cJSON_AddNumberToObject(u, "completion_tokens", completion) &&
             cJSON_AddNumberToObject(u, "total_tokens", (double)prompt + completion) &&
             (d = cJSON_AddObjectToObject(u, "prompt_tokens_details")) && cJSON_AddNumberToObject(d, "cached_tokens", cached);
    /* speculative decoding, in the fields OpenAI's Predicted Outputs use: drafts the model accepted and rejected */
    int32_t drafted, accepted;
    cf_api_total_drafts(w, &drafted, &accepted);
    if (ok && drafted > 0)
        ok = (d = cJSON_AddObjectToObject(u, "completion_tokens_details")) &&
             cJSON_AddNumberToObject(d, "accepted_prediction_tokens", accepted) &&
             cJSON_AddNumberToObject(d, "rejected_prediction_tokens", (double)drafted - accepted);
    if (!ok) cJSON_Delete(u);
    return ok ? u : NULL;
}

/* ---- logprobs ---- */

/* {"token", "logprob", "bytes"}: one alternative of the chat shape. */
static cJSON *chat_alt(const cf_api_writer *w, int32_t token, float logprob) {
    cJSON *bytes = NULL, *text = cf_api_token_text(w, token, &bytes), *o = cJSON_CreateObject();
    if (!text || !o) {
        cJSON_Delete(text);
        cJSON_Delete(bytes);
        cJSON_Delete(o);
        return NULL;
    }
    /* each add takes its value, so all run */
    int ok = cf_api_add(o, "token", text) & cf_api_add(o, "logprob", cf_api_float(logprob)) & cf_api_add(o, "bytes", bytes);
    if (!ok) cJSON_Delete(o);
    return ok ? o : NULL;
}

static cJSON *chat_logprob(const cf_api_writer *w, const cinfer_logprobs *lp) {
    cJSON *e = chat_alt(w, lp->token, lp->logprob), *top = cJSON_CreateArray();
    int ok = cf_api_add(e, "top_logprobs", top);
    for (int k = 0; ok && k < lp->n_top; k++) ok = cf_api_push(top, chat_alt(w, lp->top[k].token, lp->top[k].logprob));
    if (!ok) cJSON_Delete(e);
    return ok ? e : NULL;
}

/* Completions' legacy shape over n tokens: tokens, token_logprobs, top_logprobs, text_offset. */
static cJSON *legacy_logprobs(const cf_api_writer *w, const cinfer_logprobs *lp, size_t n, size_t offset) {
    cJSON *o = cJSON_CreateObject(), *toks = cJSON_CreateArray(), *lps = cJSON_CreateArray(), *tops = cJSON_CreateArray(),
          *offs = cJSON_CreateArray();
    int ok = cf_api_add(o, "tokens", toks) & cf_api_add(o, "token_logprobs", lps) & cf_api_add(o, "top_logprobs", tops) &
             cf_api_add(o, "text_offset", offs);
    for (size_t i = 0; ok && i < n; i++) {
        cJSON *bytes, *text = cf_api_token_text(w, lp[i].token, &bytes), *top = NULL;
        cJSON_Delete(bytes);
        if (!text) {
            ok = 0;
            break;
        }
        size_t len = strlen(text->valuestring);
        ok = cf_api_push(toks, text) && cf_api_push(lps, cf_api_float(lp[i].logprob)) &&
             cf_api_push(offs, cJSON_CreateNumber((double)offset)) && cf_api_push(tops, top = cJSON_CreateObject());
        offset += len;
        for (int k = 0; ok && k < lp[i].n_top; k++) {
            cJSON *alt = cf_api_token_text(w, lp[i].top[k].token, &bytes);
            cJSON_Delete(bytes);
            ok = alt != NULL;
            /* alternatives that spell the same text keep the likeliest */
            if (ok && !cJSON_GetObjectItemCaseSensitive(top, alt->valuestring))
                ok = cf_api_add(top, alt->valuestring, cf_api_float(lp[i].top[k].logprob));
            cJSON_Delete(alt);
        }
    }
    if (!ok) cJSON_Delete(o);
    return ok ? o : NULL;
}

/* ---- streaming ---- */

/* A chat chunk for choice i with delta (taken), the pending logprobs and finish (NULL = none yet). */
static cinfer_status chat_chunk(cf_api_writer *w, int i, cJSON *delta, const char *finish, cf_buf *out) {
    cf_api_choice *ch = &w->ch[i];
    cJSON *choices = NULL, *j = chunk(w, &choices), *c = cJSON_CreateObject(), *lp = NULL;
    int ok = cf_api_push(choices, c) && cJSON_AddNumberToObject(c, "index", i);
    if (!ok) cJSON_Delete(delta);
    else ok = cf_api_add(c, "delta", delta);
    if (ok && ch->pending_logprobs) {
        ok = cf_api_add(c, "logprobs", lp = cJSON_CreateObject());
        if (ok) ok = cf_api_add(lp, "content", ch->pending_logprobs);
        else cJSON_Delete(ch->pending_logprobs);
        ch->pending_logprobs = NULL;
    } else if (ok) {
        ok = cJSON_AddNullToObject(c, "logprobs") != NULL;
    }
    ok = ok && (finish ? cJSON_AddStringToObject(c, "finish_reason", finish) : cJSON_AddNullToObject(c, "finish_reason"));
    if (!ok) {
        cJSON_Delete(j);
        return OOM;
    }
    return cf_api_sse(out, NULL, j);
}

static int chat_stream_delta(cf_api_writer *w, int i, const cinfer_chat_delta *d, cf_buf *out) {
    cJSON *delta = cJSON_CreateObject();
    int ok = delta != NULL;
    if (d->kind == CINFER_DELTA_TOOL_CALL) {
        char id[64];
        cf_api_tool_id(w, "call_", i, d->tool_index, id, sizeof id);
        cJSON *calls = cJSON_AddArrayToObject(delta, "tool_calls"), *tc = cJSON_CreateObject(), *fn;
        ok = cf_api_push(calls, tc) && cJSON_AddNumberToObject(tc, "index", d->tool_index) && cJSON_AddStringToObject(tc, "id", id) &&
             cJSON_AddStringToObject(tc, "type", "function") && (fn = cJSON_AddObjectToObject(tc, "function")) &&
             cJSON_AddStringToObject(fn, "name", d->tool_name) && cJSON_AddStringToObject(fn, "arguments", d->tool_arguments);
    } else {
        if (!d->text_len) {
            cJSON_Delete(delta);
            return 0;
        }
        ok = cf_api_add(delta, d->kind == CINFER_DELTA_REASONING ? "reasoning_content" : "content",
                        cf_api_string_n(d->text, d->text_len));
    }
    if (!ok) {
        cJSON_Delete(delta);
        return -1;
    }
    return chat_chunk(w, i, delta, NULL, out) != CINFER_OK ? -1 : 0;
}

static cinfer_status completion_chunk(cf_api_writer *w, int i, const char *text, size_t len, cJSON *logprobs,
                                      const char *finish, cf_buf *out) {
    cJSON *choices = NULL, *j = chunk(w, &choices), *c = cJSON_CreateObject();
    int ok = cf_api_push(choices, c) && cf_api_add(c, "text", cf_api_string_n(text, len)) && cJSON_AddNumberToObject(c, "index", i);
    if (!ok) cJSON_Delete(logprobs);
    else ok = logprobs ? cf_api_add(c, "logprobs", logprobs) : cJSON_AddNullToObject(c, "logprobs") != NULL;
    ok = ok && (finish ? cJSON_AddStringToObject(c, "finish_reason", finish) : cJSON_AddNullToObject(c, "finish_reason"));
    w->ch[i].text_offset += len;
    if (!ok) {
        cJSON_Delete(j);
        return OOM;
    }
    return cf_api_sse(out, NULL, j);
}

static const char *echo_of(const cf_api_writer *w, int i) {
    const cf_api_storage *st = w->r->storage;
    if (!w->r->echo || !st || !st->echo) return NULL;
    return st->echo[i / (st->n_per_prompt > 0 ? st->n_per_prompt : 1)];
}

cinfer_status cf_api_openai_begin(cf_api_writer *w, cf_buf *out) {
    for (int i = 0; i < w->n; i++) {
        if (chat(w)) {
            cJSON *delta = cJSON_CreateObject();
            if (!delta || !cJSON_AddStringToObject(delta, "role", "assistant") || !cJSON_AddStringToObject(delta, "content", "")) {
                cJSON_Delete(delta);
                return OOM;
            }
            CF_TRY(chat_chunk(w, i, delta, NULL, out));
        } else if (echo_of(w, i)) {
            const char *echo = echo_of(w, i);
            CF_TRY(completion_chunk(w, i, echo, strlen(echo), NULL, NULL, out));
        }
    }
    return CINFER_OK;
}

cinfer_status cf_api_openai_event(cf_api_writer *w, int i, const cinfer_event *ev, cf_buf *out) {
    cf_api_choice *ch = &w->ch[i];
    const cinfer_logprobs *lp = ev->kind == CINFER_EVENT_TOKEN ? ev->logprobs : NULL;
    if (!chat(w)) {
        if (!ev->text_len && !lp) return CINFER_OK;
        cJSON *legacy = lp ? legacy_logprobs(w, lp, 1, ch->text_offset) : NULL;
        if (lp && !legacy) return OOM;
        return completion_chunk(w, i, ev->text, ev->text_len, legacy, NULL, out);
    }
    if (lp) {
        if (!ch->pending_logprobs && !(ch->pending_logprobs = cJSON_CreateArray())) return OOM;
        if (!cf_api_push(ch->pending_logprobs, chat_logprob(w, lp))) return OOM;
    }
    return cf_api_feed(w, i, ev->text, ev->text_len, chat_stream_delta, out);
}

static cinfer_status error_event(cf_api_writer *w, const cf_api_choice *ch, cf_buf *out) {
    cf_api_error e = {.status = ch->error_status};
    snprintf(e.message, sizeof e.message, "%s", ch->error);
    char *body = cf_api_error_json(w->kind, &e);
    int rc = !body || cf_buf_puts(out, "data: ") || cf_buf_puts(out, body) || cf_buf_puts(out, "\n\n");
    free(body);
    return rc ? OOM : CINFER_OK;
}

/* ---- whole bodies ---- */

static int chat_collect_delta(cf_api_writer *w, int i, const cinfer_chat_delta *d, cf_buf *out) {
    cf_api_choice *ch = &w->ch[i];
    if (d->kind == CINFER_DELTA_CONTENT) return cf_buf_append(&ch->content, d->text, d->text_len);
    if (d->kind == CINFER_DELTA_REASONING) return cf_buf_append(&ch->reasoning, d->text, d->text_len);
    char id[64];
    cf_api_tool_id(w, "call_", i, d->tool_index, id, sizeof id);
    if (!ch->tool_calls && !(ch->tool_calls = cJSON_CreateArray())) return -1;
    cJSON *tc = cJSON_CreateObject(), *fn;
    int ok = cf_api_push(ch->tool_calls, tc) && cJSON_AddStringToObject(tc, "id", id) && cJSON_AddStringToObject(tc, "type", "function") &&
             (fn = cJSON_AddObjectToObject(tc, "function")) && cJSON_AddStringToObject(fn, "name", d->tool_name) &&
             cJSON_AddStringToObject(fn, "arguments", d->tool_arguments);
    return ok ? 0 : -1;
}

static cJSON *chat_body_choice(cf_api_writer *w, int i, const cinfer_result *res) {
    cf_api_choice *ch = &w->ch[i];
    if (cf_api_feed(w, i, res->text, res->text_len, chat_collect_delta, NULL) != CINFER_OK ||
        cf_api_feed_end(w, i, chat_collect_delta, NULL) != CINFER_OK)
        return NULL;
    cJSON *c = cJSON_CreateObject(), *msg, *lp = NULL;
    int ok = c && cJSON_AddNumberToObject(c, "index", i) && (msg = cJSON_AddObjectToObject(c, "message")) &&
             cJSON_AddStringToObject(msg, "role", "assistant") &&
             (ch->content.len || !ch->tool_calls ? cJSON_AddStringToObject(msg, "content", ch->content.len ? ch->content.data : "")
                                                 : cJSON_AddNullToObject(msg, "content"));
    if (ok && ch->reasoning.len) ok = cJSON_AddStringToObject(msg, "reasoning_content", ch->reasoning.data) != NULL;
    if (ok && ch->tool_calls) {
        ok = cf_api_add(msg, "tool_calls", ch->tool_calls);
        ch->tool_calls = NULL;
    }
    if (ok && res->logprobs) {
        cJSON *content = cJSON_CreateArray();
        ok = cf_api_add(c, "logprobs", lp = cJSON_CreateObject());
        if (ok) ok = cf_api_add(lp, "content", content);
        else cJSON_Delete(content);
        for (size_t k = 0; ok && k < res->n_tokens; k++) ok = cf_api_push(content, chat_logprob(w, &res->logprobs[k]));
    } else if (ok) {
        ok = cJSON_AddNullToObject(c, "logprobs") != NULL;
    }
    ok = ok && cJSON_AddStringToObject(c, "finish_reason", finish_reason(w, ch));
    if (!ok) cJSON_Delete(c);
    return ok ? c : NULL;
}

static cJSON *completion_body_choice(cf_api_writer *w, int i, const cinfer_result *res) {
    const char *echo = echo_of(w, i);
    size_t echo_len = echo ? strlen(echo) : 0;
    char *text = malloc(echo_len + res->text_len + 1);
    if (!text) return NULL;
    memcpy(text, echo ? echo : "", echo_len);
    memcpy(text + echo_len, res->text, res->text_len);
    text[echo_len + res->text_len] = 0;
    cJSON *c = cJSON_CreateObject();
    int ok = c && cJSON_AddStringToObject(c, "text", text) && cJSON_AddNumberToObject(c, "index", i) &&
             (res->logprobs ? cf_api_add(c, "logprobs", legacy_logprobs(w, res->logprobs, res->n_tokens, echo_len))
                            : cJSON_AddNullToObject(c, "logprobs") != NULL) &&
             cJSON_AddStringToObject(c, "finish_reason", finish_reason(w, &w->ch[i]));
    free(text);
    if (!ok) cJSON_Delete(c);
    return ok ? c : NULL;
}

cinfer_status cf_api_openai_end(cf_api_writer *w, int i, const cinfer_result *res, cf_buf *out) {
    cf_api_choice *ch = &w->ch[i];
    cf_api_record_result(w, i, res);
    if (!w->r->stream) {
        if (res->outcome != CINFER_OUTCOME_COMPLETED) return CINFER_OK;
        ch->body = chat(w) ? chat_body_choice(w, i, res) : completion_body_choice(w, i, res);
        return ch->body ? CINFER_OK : OOM;
    }
    if (res->outcome != CINFER_OUTCOME_COMPLETED) return error_event(w, ch, out);
    if (!chat(w)) return completion_chunk(w, i, "", 0, NULL, finish_reason(w, ch), out);
    CF_TRY(cf_api_feed_end(w, i, chat_stream_delta, out));
    cJSON *delta = cJSON_CreateObject();
    if (!delta) return OOM;
    return chat_chunk(w, i, delta, finish_reason(w, ch), out);
}

cinfer_status cf_api_openai_finish(cf_api_writer *w, cf_buf *out) {
    cJSON *choices = NULL;
    if (w->r->stream) {
        if (w->r->include_usage) {
            cJSON *j = envelope(w, chat(w) ? "chat.completion.chunk" : "text_completion", &choices);
            if (!cf_api_add(j, "usage", usage(w))) {
                cJSON_Delete(j);
                return OOM;
            }
            CF_TRY(cf_api_sse(out, NULL, j));
        }
        return cf_buf_puts(out, "data: [DONE]\n\n") ? OOM : CINFER_OK;
    }
    cJSON *j = envelope(w, chat(w) ? "chat.completion" : "text_completion", &choices);
    int ok = j != NULL;
    for (int i = 0; ok && i < w->n; i++) {
        ok = cf_api_push(choices, w->ch[i].body);
        w->ch[i].body = NULL;
    }
    ok = ok && cf_api_add(j, "usage", usage(w));
    if (!ok) {
        cJSON_Delete(j);
        return OOM;
    }
    return cf_api_put_json(out, j);
}
