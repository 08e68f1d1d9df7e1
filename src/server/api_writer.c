/* api_writer.c: cf_api_writer's life and dispatch to the per-API writers, and what they share: SSE framing,
 * the chat parser feed, token text for logprobs, tool call ids, results and usage. */
#include "server/api_writer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"

int cf_api_add(cJSON *o, const char *k, cJSON *v) {
    if (!v) return 0;
    if (o && cJSON_AddItemToObject(o, k, v)) return 1;
    cJSON_Delete(v);
    return 0;
}

int cf_api_push(cJSON *a, cJSON *v) {
    if (!v) return 0;
    if (a && cJSON_AddItemToArray(a, v)) return 1;
    cJSON_Delete(v);
    return 0;
}

cinfer_status cf_api_put_json(cf_buf *out, cJSON *j) {
    char *text = j ? cJSON_PrintUnformatted(j) : NULL;
    cJSON_Delete(j);
    int rc = text ? cf_buf_puts(out, text) : -1;
    cJSON_free(text);
    return rc ? CINFER_E_OUT_OF_MEMORY : CINFER_OK;
}

cinfer_status cf_api_sse(cf_buf *out, const char *event, cJSON *j) {
    size_t mark = out->len;
    if ((event && cf_buf_printf(out, "event: %s\n", event)) || cf_buf_puts(out, "data: ") || cf_api_put_json(out, j) ||
        cf_buf_puts(out, "\n\n")) {
        out->len = mark;
        if (out->data) out->data[mark] = 0;
        return CINFER_E_OUT_OF_MEMORY;
    }
    return CINFER_OK;
}

cJSON *cf_api_string_n(const char *s, size_t n) {
    char *t = malloc(n + 1);
    if (!t) return NULL;
    memcpy(t, s, n);
    t[n] = 0;
    cJSON *j = cJSON_CreateString(t);
    free(t);
    return j;
}

cJSON *cf_api_float(float v) {
    char s[32];
    for (int digits = 6; digits <= 9; digits++) {
        snprintf(s, sizeof s, "%.*g", digits, (double)v);
        if (strtof(s, NULL) == v) break;
    }
    return cJSON_CreateNumber(strtod(s, NULL));
}

/* The length of the well-formed UTF-8 sequence at p, or 0. */
static size_t utf8_len(const unsigned char *p, size_t n) {
    for (size_t k = 1; k <= 4 && k <= n; k++)
        if (cf_api_valid_utf8((const char *)p, k)) return k;
    return 0;
}

cJSON *cf_api_token_text(const cf_api_writer *w, int32_t token, cJSON **bytes) {
    char *text = NULL;
    size_t len = 0;
    if (!w->m || cinfer_detokenize(w->m, &token, 1, &text, &len, NULL) != CINFER_OK) len = 0;
    cf_buf clean = {0};
    int oom = 0;
    *bytes = cJSON_CreateArray();
    for (size_t i = 0; i < len && *bytes && !oom;) {
        size_t k = utf8_len((const unsigned char *)text + i, len - i);
        oom |= k ? cf_buf_append(&clean, text + i, k) : cf_buf_puts(&clean, "\xEF\xBF\xBD");
        for (size_t b = 0; b < (k ? k : 1); b++) {
            cJSON *num = cJSON_CreateNumber((unsigned char)text[i + b]);
            oom |= !num || !cJSON_AddItemToArray(*bytes, num);
        }
        i += k ? k : 1;
    }
    cinfer_free(text);
    cJSON *s = oom ? NULL : cJSON_CreateString(clean.len ? clean.data : "");
    cf_buf_free(&clean);
    if (!s) {
        cJSON_Delete(*bytes);
        *bytes = NULL;
    }
    return s;
}

void cf_api_tool_id(const cf_api_writer *w, const char *prefix, int choice, int index, char *out, size_t cap) {
    static const char digits[] = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    uint64_t h = 1469598103934665603ull;
    for (const char *p = w->id; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
    h = (h ^ (uint64_t)choice) * 1099511628211ull;
    h = (h ^ (uint64_t)index) * 1099511628211ull;
    char tail[25];
    for (int i = 0; i < 24; i++) {
        uint64_t z = (h += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        tail[i] = digits[(z ^ (z >> 31)) % 62];
    }
    tail[24] = 0;
    snprintf(out, cap, "%s%s", prefix, tail);
}

typedef struct feed_ctx {
    cf_api_writer *w;
    int choice;
    cf_api_delta_fn fn;
    cf_buf *out;
} feed_ctx;

static int on_delta(const cinfer_chat_delta *d, void *user) {
    feed_ctx *f = user;
    if (d->kind == CINFER_DELTA_TOOL_CALL) f->w->ch[f->choice].n_tool_calls++;
    return f->fn(f->w, f->choice, d, f->out);
}

cinfer_status cf_api_feed(cf_api_writer *w, int choice, const char *text, size_t len, cf_api_delta_fn fn, cf_buf *out) {
    cf_api_choice *ch = &w->ch[choice];
    if (!ch->parser) {
        if (!len) return CINFER_OK;
        cinfer_chat_delta d = {.kind = CINFER_DELTA_CONTENT, .text = text, .text_len = len};
        return fn(w, choice, &d, out) ? CINFER_E_OUT_OF_MEMORY : CINFER_OK;
    }
    feed_ctx f = {w, choice, fn, out};
    cinfer_status st = cinfer_chat_parser_feed(ch->parser, text, len, on_delta, &f, NULL);
    return st == CINFER_E_CANCELLED ? CINFER_E_OUT_OF_MEMORY : st;
}

cinfer_status cf_api_feed_end(cf_api_writer *w, int choice, cf_api_delta_fn fn, cf_buf *out) {
    cf_api_choice *ch = &w->ch[choice];
    if (!ch->parser) return CINFER_OK;
    feed_ctx f = {w, choice, fn, out};
    cinfer_status st = cinfer_chat_parser_finish(ch->parser, on_delta, &f, NULL);
    return st == CINFER_E_CANCELLED ? CINFER_E_OUT_OF_MEMORY : st;
}

/* Anthropic: the stop string that ended the reply. The result's tokens include the one that completed the
 * stop string while its text does not, so the text the tokens spell continues with it. */
static const char *matched_stop(const cf_api_writer *w, int choice, const cinfer_result *res) {
    const cinfer_request *q = &w->r->reqs[choice];
    if (!q->n_stop || !w->m || res->finish != CINFER_FINISH_STOP || !res->n_tokens) return NULL;
    char *all = NULL;
    size_t len = 0;
    if (cinfer_detokenize(w->m, res->tokens, res->n_tokens, &all, &len, NULL) != CINFER_OK) return NULL;
    const char *best = NULL;
    if (len > res->text_len && !memcmp(all, res->text, res->text_len))
        for (size_t k = 0; k < q->n_stop; k++) {
            size_t n = strlen(q->stop[k]);
            if (n <= len - res->text_len && !memcmp(all + res->text_len, q->stop[k], n) && (!best || n < strlen(best)))
                best = q->stop[k];
        }
    cinfer_free(all);
    return best;
}

void cf_api_record_result(cf_api_writer *w, int choice, const cinfer_result *res) {
    cf_api_choice *ch = &w->ch[choice];
    ch->ended = 1;
    ch->outcome = res->outcome;
    ch->finish = res->finish;
    ch->usage = res->usage;
    ch->usage.completion_tokens = (int32_t)res->n_tokens;
    if (res->outcome == CINFER_OUTCOME_FAILED) {
        ch->error_status = 500;
        snprintf(ch->error, sizeof ch->error, "generation failed: %s", res->error.message);
    } else if (res->outcome == CINFER_OUTCOME_CANCELLED) {
        ch->error_status = 503;
        snprintf(ch->error, sizeof ch->error, "generation was cancelled (%s)", cinfer_cancel_reason_name(res->cancel_reason));
    }
    if (w->kind == CF_API_MESSAGES) ch->stop_sequence = matched_stop(w, choice, res);
}

void cf_api_total_usage(const cf_api_writer *w, int32_t *prompt, int32_t *cached, int32_t *completion) {
    cf_api_storage *st = w->r->storage;
    int per = st && st->n_per_prompt > 0 ? st->n_per_prompt : 1;
    *prompt = *cached = *completion = 0;
    for (int p = 0; p * per < w->n; p++) {
        const cinfer_usage *best = NULL;
        for (int i = p * per; i < (p + 1) * per && i < w->n; i++)
            if (!best || w->ch[i].usage.prompt_tokens > best->prompt_tokens) best = &w->ch[i].usage;
        *prompt += best->prompt_tokens;
        *cached += best->cached_tokens;
    }
    for (int i = 0; i < w->n; i++) *completion += w->ch[i].usage.completion_tokens;
}

void cf_api_total_drafts(const cf_api_writer *w, int32_t *drafted, int32_t *accepted) {
    *drafted = *accepted = 0;
    for (int i = 0; i < w->n; i++) {
        *drafted += w->ch[i].usage.draft_tokens;
        *accepted += w->ch[i].usage.accepted_tokens;
    }
}

static char *dup_or_empty(const char *s) {
    return strdup(s ? s : "");
}

cinfer_status cf_api_writer_create(const cf_api_request *r, const cf_api_meta *meta, cf_api_writer **out, cinfer_error *err) {
    *out = NULL;
    cf_api_writer *w = calloc(1, sizeof *w);
    if (!w) return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory for a response writer");
    w->r = r;
    w->kind = r->kind;
    w->n = r->n_reqs;
    w->created = meta->created;
    w->m = meta->m;
    w->http_status = 200;
    w->id = dup_or_empty(meta->id);
    w->model = dup_or_empty(meta->model);
    w->fingerprint = meta->fingerprint ? strdup(meta->fingerprint) : NULL;
    w->ch = calloc((size_t)(w->n ? w->n : 1), sizeof *w->ch);
    if (!w->id || !w->model || (meta->fingerprint && !w->fingerprint) || !w->ch) {
        cf_api_writer_free(w);
        return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory for a response writer");
    }
    for (int i = 0; w->kind != CF_API_COMPLETIONS && w->m && i < w->n; i++) {
        cinfer_chat_parser_params pp = cinfer_chat_parser_default_params();
        pp.parse_tool_calls = r->tools_offered;
        pp.request = &r->reqs[i];
        cinfer_status st = cinfer_chat_parser_create(w->m, &pp, &w->ch[i].parser, err);
        /* a prompt the template cannot render fails the session's open, which reports it to the client (400):
         * meanwhile the parser reads the reply as one that starts outside reasoning */
        if (st == CINFER_E_TEMPLATE || st == CINFER_E_INVALID_ARGUMENT) {
            pp.request = NULL;
            st = cinfer_chat_parser_create(w->m, &pp, &w->ch[i].parser, err);
        }
        if (st != CINFER_OK) {
            cf_api_writer_free(w);
            return st;
        }
    }
    *out = w;
    return CINFER_OK;
}

void cf_api_writer_set_prompt_tokens(cf_api_writer *w, int choice, int32_t n) {
    if (choice >= 0 && choice < w->n) w->ch[choice].prompt_tokens = n;
}

cinfer_status cf_api_writer_begin(cf_api_writer *w, cf_buf *out) {
    if (!w->r->stream) return CINFER_OK;
    return w->kind == CF_API_MESSAGES ? cf_api_anthropic_begin(w, out) : cf_api_openai_begin(w, out);
}

static cinfer_status event(cf_api_writer *w, int choice, const cinfer_event *ev, cf_buf *out) {
    w->ch[choice].fed += ev->text_len;
    return w->kind == CF_API_MESSAGES ? cf_api_anthropic_event(w, choice, ev, out) : cf_api_openai_event(w, choice, ev, out);
}

cinfer_status cf_api_writer_event(cf_api_writer *w, int choice, const cinfer_event *ev, cf_buf *out) {
    if (choice < 0 || choice >= w->n) return CINFER_E_INVALID_ARGUMENT;
    if (!w->r->stream || w->ch[choice].ended) return CINFER_OK;
    return event(w, choice, ev, out);
}

cinfer_status cf_api_writer_end_choice(cf_api_writer *w, int choice, const cinfer_result *res, cf_buf *out) {
    if (choice < 0 || choice >= w->n) return CINFER_E_INVALID_ARGUMENT;
    cf_api_choice *ch = &w->ch[choice];
    if (ch->ended) return CINFER_OK;
    /* text the events did not carry (an END not passed on) is the result's tail */
    if (w->r->stream && res->outcome == CINFER_OUTCOME_COMPLETED && res->text_len > ch->fed) {
        cinfer_event tail = {.kind = CINFER_EVENT_END, .index = (int32_t)res->n_tokens, .token = -1,
                             .text = res->text + ch->fed, .text_len = res->text_len - ch->fed};
        CF_TRY(event(w, choice, &tail, out));
    }
    return w->kind == CF_API_MESSAGES ? cf_api_anthropic_end(w, choice, res, out) : cf_api_openai_end(w, choice, res, out);
}

cinfer_status cf_api_writer_finish(cf_api_writer *w, cf_buf *out) {
    if (!w->r->stream) {
        for (int i = 0; i < w->n; i++) {
            if (w->ch[i].outcome == CINFER_OUTCOME_COMPLETED) continue;
            cf_api_error e = {.status = w->ch[i].ended ? w->ch[i].error_status : 500};
            snprintf(e.message, sizeof e.message, "%s", w->ch[i].ended ? w->ch[i].error : "a choice never ended");
            char *body = cf_api_error_json(w->kind, &e);
            if (!body) return CINFER_E_OUT_OF_MEMORY;
            int rc = cf_buf_puts(out, body);
            free(body);
            w->http_status = e.status;
            return rc ? CINFER_E_OUT_OF_MEMORY : CINFER_OK;
        }
    }
    return w->kind == CF_API_MESSAGES ? cf_api_anthropic_finish(w, out) : cf_api_openai_finish(w, out);
}

int cf_api_writer_http_status(const cf_api_writer *w) {
    return w->http_status;
}

void cf_api_writer_free(cf_api_writer *w) {
    if (!w) return;
    for (int i = 0; w->ch && i < w->n; i++) {
        cf_api_choice *ch = &w->ch[i];
        cinfer_chat_parser_free(ch->parser);
        cJSON_Delete(ch->pending_logprobs);
        cJSON_Delete(ch->body);
        cJSON_Delete(ch->tool_calls);
        cf_buf_free(&ch->content);
        cf_buf_free(&ch->reasoning);
    }
    free(w->ch);
    free(w->id);
    free(w->model);
    free(w->fingerprint);
    free(w);
}
