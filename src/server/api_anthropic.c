/* api_anthropic.c: Anthropic's Messages responses: the SSE events (message_start, content blocks of text,
 * thinking and tool_use with their deltas, message_delta with stop_reason and usage, message_stop, error)
 * and the message body. */
#include "server/api_writer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"

#define OOM CINFER_E_OUT_OF_MEMORY

static const char *stop_reason(const cf_api_choice *ch) {
    if (ch->finish == CINFER_FINISH_LENGTH) return "max_tokens";
    if (ch->n_tool_calls) return "tool_use";
    return ch->stop_sequence ? "stop_sequence" : "end_turn";
}

static cJSON *usage(const cf_api_writer *w) {
    int32_t prompt, cached, completion;
    cf_api_total_usage(w, &prompt, &cached, &completion);
    cJSON *u = cJSON_CreateObject();
    int ok = u && cJSON_AddNumberToObject(u, "input_tokens", prompt - cached) &&
             cJSON_AddNumberToObject(u, "cache_read_input_tokens", cached) && cJSON_AddNumberToObject(u, "output_tokens", completion);
    if (!ok) cJSON_Delete(u);
    return ok ? u : NULL;
}


/* {"type": "message", ...} with content (taken) and the stop fields (null while streaming). */
static cJSON *message(const cf_api_writer *w, cJSON *content, int final) {
    const cf_api_choice *ch = &w->ch[0];
    cJSON *m = cJSON_CreateObject(), *u;
    int ok = m && cJSON_AddStringToObject(m, "id", w->id) && cJSON_AddStringToObject(m, "type", "message") &&
             cJSON_AddStringToObject(m, "role", "assistant") && cJSON_AddStringToObject(m, "model", w->model);
    if (!ok) cJSON_Delete(content);
    else ok = cf_api_add(m, "content", content);
    ok = ok && (final ? cJSON_AddStringToObject(m, "stop_reason", stop_reason(ch)) : cJSON_AddNullToObject(m, "stop_reason")) &&
         (final && ch->stop_sequence ? cJSON_AddStringToObject(m, "stop_sequence", ch->stop_sequence)
                                     : cJSON_AddNullToObject(m, "stop_sequence"));
    if (ok && final) ok = cf_api_add(m, "usage", usage(w));
    else if (ok)
        ok = (u = cJSON_AddObjectToObject(m, "usage")) && cJSON_AddNumberToObject(u, "input_tokens", w->ch[0].prompt_tokens) &&
             cJSON_AddNumberToObject(u, "output_tokens", 0);
    if (!ok) cJSON_Delete(m);
    return ok ? m : NULL;
}

/* An event {"type": type, ...}: the object to fill, or NULL. */
static cJSON *event(const char *type) {
    cJSON *e = cJSON_CreateObject();
    if (e && !cJSON_AddStringToObject(e, "type", type)) {
        cJSON_Delete(e);
        return NULL;
    }
    return e;
}

static cinfer_status emit(cf_buf *out, const char *type, cJSON *e) {
    return e ? cf_api_sse(out, type, e) : OOM;
}

/* ---- streaming ---- */

static cinfer_status block_stop(cf_api_choice *ch, cf_buf *out) {
    if (ch->block == CF_BLOCK_NONE) return CINFER_OK;
    cJSON *e = event("content_block_stop");
    if (e && !cJSON_AddNumberToObject(e, "index", ch->n_blocks)) {
        cJSON_Delete(e);
        e = NULL;
    }
    ch->block = CF_BLOCK_NONE;
    ch->n_blocks++;
    return emit(out, "content_block_stop", e);
}

/* content_block_start of block (taken) at the next index. */
static cinfer_status block_start(cf_api_choice *ch, cJSON *block, cf_buf *out) {
    CF_TRY(block_stop(ch, out));
    cJSON *e = event("content_block_start");
    int ok = e && cJSON_AddNumberToObject(e, "index", ch->n_blocks);
    if (!ok) cJSON_Delete(block);
    else ok = cf_api_add(e, "content_block", block);
    if (!ok) cJSON_Delete(e);
    return emit(out, "content_block_start", ok ? e : NULL);
}

static cinfer_status block_delta(cf_api_choice *ch, const char *type, const char *key, cJSON *value, cf_buf *out) {
    cJSON *e = event("content_block_delta"), *d = NULL;
    int ok = e && cJSON_AddNumberToObject(e, "index", ch->n_blocks) && (d = cJSON_AddObjectToObject(e, "delta")) &&
             cJSON_AddStringToObject(d, "type", type);
    if (!ok) cJSON_Delete(value);
    else ok = cf_api_add(d, key, value);
    if (!ok) cJSON_Delete(e);
    return emit(out, "content_block_delta", ok ? e : NULL);
}

static cJSON *empty_block(cf_block_kind kind) {
    cJSON *b = cJSON_CreateObject();
    int ok = b && (kind == CF_BLOCK_TEXT ? cJSON_AddStringToObject(b, "type", "text") && cJSON_AddStringToObject(b, "text", "")
                                         : cJSON_AddStringToObject(b, "type", "thinking") &&
                                               cJSON_AddStringToObject(b, "thinking", "") && cJSON_AddStringToObject(b, "signature", ""));
    if (!ok) cJSON_Delete(b);
    return ok ? b : NULL;
}

static int stream_delta(cf_api_writer *w, int i, const cinfer_chat_delta *d, cf_buf *out) {
    cf_api_choice *ch = &w->ch[i];
    if (d->kind == CINFER_DELTA_TOOL_CALL) {
        char id[64];
        cf_api_tool_id(w, "toolu_", i, d->tool_index, id, sizeof id);
        cJSON *b = cJSON_CreateObject();
        int ok = b && cJSON_AddStringToObject(b, "type", "tool_use") && cJSON_AddStringToObject(b, "id", id) &&
                 cJSON_AddStringToObject(b, "name", d->tool_name) && cJSON_AddObjectToObject(b, "input");
        if (!ok) cJSON_Delete(b);
        if (!ok || block_start(ch, b, out)) return -1;
        ch->block = CF_BLOCK_TOOL;
        if (block_delta(ch, "input_json_delta", "partial_json", cJSON_CreateString(d->tool_arguments), out)) return -1;
        return block_stop(ch, out) ? -1 : 0;
    }
    if (!d->text_len) return 0;
    cf_block_kind kind = d->kind == CINFER_DELTA_REASONING ? CF_BLOCK_THINKING : CF_BLOCK_TEXT;
    if (ch->block != kind) {
        if (block_start(ch, empty_block(kind), out)) return -1;
        ch->block = kind;
    }
    return block_delta(ch, kind == CF_BLOCK_TEXT ? "text_delta" : "thinking_delta", kind == CF_BLOCK_TEXT ? "text" : "thinking",
                       cf_api_string_n(d->text, d->text_len), out)
               ? -1
               : 0;
}

cinfer_status cf_api_anthropic_begin(cf_api_writer *w, cf_buf *out) {
    cJSON *e = event("message_start");
    if (!e || !cf_api_add(e, "message", message(w, cJSON_CreateArray(), 0))) {
        cJSON_Delete(e);
        return OOM;
    }
    return cf_api_sse(out, "message_start", e);
}

cinfer_status cf_api_anthropic_event(cf_api_writer *w, int i, const cinfer_event *ev, cf_buf *out) {
    return cf_api_feed(w, i, ev->text, ev->text_len, stream_delta, out);
}

static cinfer_status error_event(cf_api_writer *w, const cf_api_choice *ch, cf_buf *out) {
    cf_api_error e = {.status = ch->error_status};
    snprintf(e.message, sizeof e.message, "%s", ch->error);
    char *body = cf_api_error_json(w->kind, &e);
    int rc = !body || cf_buf_puts(out, "event: error\ndata: ") || cf_buf_puts(out, body) || cf_buf_puts(out, "\n\n");
    free(body);
    return rc ? OOM : CINFER_OK;
}

/* ---- the whole message ---- */

/* Moves the text gathered for the open block into the content array. */
static int flush_block(cf_api_choice *ch) {
    if (ch->block == CF_BLOCK_NONE) return 0;
    cJSON *b = empty_block(ch->block);
    const char *key = ch->block == CF_BLOCK_TEXT ? "text" : "thinking";
    int ok = b && cJSON_ReplaceItemInObjectCaseSensitive(b, key, cf_api_string_n(ch->content.data ? ch->content.data : "", ch->content.len));
    if (!ok) cJSON_Delete(b);
    ok = ok && cf_api_push(ch->body, b);
    cf_buf_consume(&ch->content, ch->content.len);
    ch->block = CF_BLOCK_NONE;
    return ok ? 0 : -1;
}

static int collect_delta(cf_api_writer *w, int i, const cinfer_chat_delta *d, cf_buf *out) {
    cf_api_choice *ch = &w->ch[i];
    if (d->kind == CINFER_DELTA_TOOL_CALL) {
        if (flush_block(ch)) return -1;
        char id[64];
        cf_api_tool_id(w, "toolu_", i, d->tool_index, id, sizeof id);
        cJSON *input = cJSON_Parse(d->tool_arguments), *b = cJSON_CreateObject();
        if (input && !cJSON_IsObject(input)) {
            cJSON_Delete(input);
            input = NULL;
        }
        int ok = cf_api_push(ch->body, b) && cJSON_AddStringToObject(b, "type", "tool_use") && cJSON_AddStringToObject(b, "id", id) &&
                 cJSON_AddStringToObject(b, "name", d->tool_name);
        if (!ok) cJSON_Delete(input);
        return ok && cf_api_add(b, "input", input ? input : cJSON_CreateObject()) ? 0 : -1;
    }
    if (!d->text_len) return 0;
    cf_block_kind kind = d->kind == CINFER_DELTA_REASONING ? CF_BLOCK_THINKING : CF_BLOCK_TEXT;
    if (ch->block != kind && flush_block(ch)) return -1;
    ch->block = kind;
    return cf_buf_append(&ch->content, d->text, d->text_len);
}

cinfer_status cf_api_anthropic_end(cf_api_writer *w, int i, const cinfer_result *res, cf_buf *out) {
    cf_api_choice *ch = &w->ch[i];
    cf_api_record_result(w, i, res);
    if (w->r->stream) {
        if (res->outcome != CINFER_OUTCOME_COMPLETED) return error_event(w, ch, out);
        CF_TRY(cf_api_feed_end(w, i, stream_delta, out));
        return block_stop(ch, out);
    }
    if (res->outcome != CINFER_OUTCOME_COMPLETED) return CINFER_OK;
    if (!(ch->body = cJSON_CreateArray())) return OOM;
    CF_TRY(cf_api_feed(w, i, res->text, res->text_len, collect_delta, NULL));
    CF_TRY(cf_api_feed_end(w, i, collect_delta, NULL));
    return flush_block(ch) ? OOM : CINFER_OK;
}

cinfer_status cf_api_anthropic_finish(cf_api_writer *w, cf_buf *out) {
    const cf_api_choice *ch = &w->ch[0];
    if (!w->r->stream) {
        cJSON *m = message(w, w->ch[0].body, 1);
        w->ch[0].body = NULL;
        return m ? cf_api_put_json(out, m) : OOM;
    }
    if (ch->outcome != CINFER_OUTCOME_COMPLETED) return CINFER_OK; /* the error event ended the stream */
    cJSON *e = event("message_delta"), *d = NULL;
    int ok = e && (d = cJSON_AddObjectToObject(e, "delta")) && cJSON_AddStringToObject(d, "stop_reason", stop_reason(ch)) &&
             (ch->stop_sequence ? cJSON_AddStringToObject(d, "stop_sequence", ch->stop_sequence)
                                : cJSON_AddNullToObject(d, "stop_sequence")) &&
             cf_api_add(e, "usage", usage(w));
    if (!ok) cJSON_Delete(e);
    CF_TRY(emit(out, "message_delta", ok ? e : NULL));
    return emit(out, "message_stop", event("message_stop"));
}
