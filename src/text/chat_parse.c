/* chat_parse.c: the streaming reply parser of cinfer_chat_parser, for a format from chat_format.c. It keeps
 * the unconsumed reply text in one buffer and, in each mode, either hands text out or waits, deciding only
 * on what it has seen, so the deltas do not depend on how the reply was split into feeds. Text is held
 * back only while it may still be markup: the tail of the buffer that begins a marker, an open tool
 * call, and (Llama 3, tools offered) the reply's leading whitespace. */
#include "text/chat_parse.h"
#include "base/status.h"
#include "text/chat_calls.h"
#include "text/chat_text.h"

#include <stdlib.h>
#include <string.h>

/* ---- JSON values in text: where one ends ---- */

typedef struct json_scan {
    int depth, in_str, esc;
} json_scan;

/* Continues scanning s[from, n) (a value that began with '{' or '['); returns the index just past the
 * value's end, or 0 when it has not ended yet. */
static size_t json_scan_feed(json_scan *j, const char *s, size_t from, size_t n) {
    for (size_t i = from; i < n; i++) {
        char c = s[i];
        if (j->in_str) {
            if (j->esc) j->esc = 0;
            else if (c == '\\') j->esc = 1;
            else if (c == '"') j->in_str = 0;
        } else if (c == '"') {
            j->in_str = 1;
        } else if (c == '{' || c == '[') {
            j->depth++;
        } else if (c == '}' || c == ']') {
            if (--j->depth == 0) return i + 1;
        }
    }
    return 0;
}

/* ---- the parser ---- */

typedef enum mode {
    M_CONTENT,
    M_REASONING,
    M_BLOCK,     /* a tool call between an opening and a closing marker (Hermes, Gemma) */
    M_LLAMA,     /* Llama 3 JSON calls */
    M_MISTRAL,   /* after [TOOL_CALLS] */
} mode;

typedef enum mistral_phase { MP_START, MP_ARRAY, MP_NAME, MP_CALL_ID, MP_ARGS, MP_OBJECT } mistral_phase;

struct cinfer_chat_parser {
    cf_chat_format f;
    int parse_tools, parse_reasoning;
    mode mode;
    int at_start;       /* nothing but whitespace has been seen (Llama 3: a reply that starts with a call) */
    int skip_ws;        /* drop the whitespace that follows a marker or a call */
    char *buf;          /* reply text not handed out yet; in the tool modes it starts at the call's markup */
    size_t off, len, cap;
    size_t scan;        /* tool modes: how far into buf + off the call has been read */
    size_t value_at;    /* where the JSON value (Llama, Mistral) began, relative to buf + off */
    size_t name_at, name_len; /* Mistral's name[ARGS] form */
    int llama_after_call; /* M_LLAMA: a call was just read; ';' and whitespace separate the next */
    int llama_in_value;
    mistral_phase mp;
    json_scan js;
    cf_tool_calls calls; /* the calls just decoded, before they are handed out */
    int32_t n_calls;
    int (*on_delta)(const cinfer_chat_delta *d, void *user);
    void *user;
    int stopped;        /* on_delta asked to stop */
};

cinfer_status cf_chat_parser_new(const cf_chat_format *f, int parse_tools, int parse_reasoning, int in_reasoning,
                                 cinfer_chat_parser **out, cinfer_error *err) {
    cinfer_chat_parser *p = calloc(1, sizeof *p);
    if (!p) return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory for a chat parser");
    p->f = *f;
    p->parse_tools = parse_tools && f->tools != CF_TOOLS_NONE;
    p->parse_reasoning = parse_reasoning && f->reasoning != CF_REASONING_NONE;
    p->mode = p->parse_reasoning && in_reasoning ? M_REASONING : M_CONTENT;
    p->skip_ws = p->mode == M_REASONING;
    p->at_start = 1;
    *out = p;
    return CINFER_OK;
}

void cinfer_chat_parser_free(cinfer_chat_parser *p) {
    if (!p) return;
    cf_tool_calls_clear(&p->calls);
    free(p->buf);
    free(p);
}

static int emit_text(cinfer_chat_parser *p, cinfer_chat_delta_kind kind, const char *s, size_t n) {
    if (!n || p->stopped) return p->stopped;
    cinfer_chat_delta d = {.kind = kind, .text = s, .text_len = n};
    if (p->on_delta(&d, p->user)) p->stopped = 1;
    return p->stopped;
}

/* Hands out the calls a decoder returned rc for: 1 handed out, 0 not calls, -1 out of memory. */
static int emit_calls(cinfer_chat_parser *p, int rc) {
    for (int i = 0; rc == 1 && i < p->calls.n; i++) {
        cinfer_chat_delta d = {.kind = CINFER_DELTA_TOOL_CALL, .tool_index = p->n_calls++,
                               .tool_name = p->calls.v[i].name, .tool_arguments = p->calls.v[i].arguments};
        if (!p->stopped && p->on_delta(&d, p->user)) p->stopped = 1;
    }
    cf_tool_calls_clear(&p->calls);
    return rc;
}

/* ---- the modes ---- */

static void consume(cinfer_chat_parser *p, size_t k) { p->off += k; }

/* The call markup read so far, s[0, k), was not a call: it is content; parsing goes on after it. */
static int fail_to_content(cinfer_chat_parser *p, const char *s, size_t k) {
    emit_text(p, CINFER_DELTA_CONTENT, s, k);
    consume(p, k);
    p->mode = M_CONTENT;
    p->at_start = 0;
    p->skip_ws = 0;
    return p->stopped;
}

static void call_done(cinfer_chat_parser *p, size_t k) {
    consume(p, k);
    p->mode = M_CONTENT;
    p->at_start = 0;
    p->skip_ws = 1;
}

static void enter_tool_mode(cinfer_chat_parser *p, mode m, size_t scan) {
    p->mode = m;
    p->scan = scan;
    p->js = (json_scan){0};
    p->mp = MP_START;
    p->llama_after_call = 0;
    p->llama_in_value = 0;
}

/* Each mode step returns 1 when it consumed something and parsing goes on, 0 when it needs more text,
 * -1 when out of memory. */

static int step_content(cinfer_chat_parser *p, const char *s, size_t n, int final) {
    if (p->parse_tools && p->f.tools == CF_TOOLS_LLAMA3 && p->at_start) {
        size_t i = cf_ws_prefix(s, n);
        if (i == n && !final) return 0;
        if (i < n && (s[i] == '{' || cf_starts_with(s + i, n - i, "<|python_tag|>"))) {
            enter_tool_mode(p, M_LLAMA, 0);
            return 1;
        }
        if (i < n && !final && cf_begins(s + i, n - i, "<|python_tag|>")) return 0;
        p->at_start = 0;
    }
    const char *markers[2] = {p->parse_reasoning ? cf_reasoning_open(p->f.reasoning) : NULL,
                              p->parse_tools ? cf_tool_open(p->f.tools) : NULL};
    size_t best = n;
    int which = -1;
    for (int m = 0; m < 2; m++) {
        if (!markers[m]) continue;
        size_t at = cf_find(s, n, markers[m]);
        if (at < best) {
            best = at;
            which = m;
        }
    }
    if (which < 0) {
        size_t hold = 0;
        for (int m = 0; m < 2 && !final; m++) {
            size_t h = markers[m] ? cf_partial_tail(s, n, markers[m]) : 0;
            if (h > hold) hold = h;
        }
        if (n - hold && !emit_text(p, CINFER_DELTA_CONTENT, s, n - hold)) p->at_start = 0;
        consume(p, n - hold);
        return 0;
    }
    emit_text(p, CINFER_DELTA_CONTENT, s, best);
    consume(p, best);
    p->at_start = 0;
    if (which == 0) {
        consume(p, strlen(markers[0]));
        p->mode = M_REASONING;
        p->skip_ws = 1;
    } else {
        mode m = p->f.tools == CF_TOOLS_MISTRAL ? M_MISTRAL : p->f.tools == CF_TOOLS_LLAMA3 ? M_LLAMA : M_BLOCK;
        enter_tool_mode(p, m, strlen(markers[1]));
        if (m == M_LLAMA) p->scan = 0;
    }
    return 1;
}

static int step_reasoning(cinfer_chat_parser *p, const char *s, size_t n, int final) {
    const char *close = cf_reasoning_close(p->f.reasoning);
    size_t at = cf_find(s, n, close);
    if (at < n) {
        emit_text(p, CINFER_DELTA_REASONING, s, at);
        consume(p, at + strlen(close));
        p->mode = M_CONTENT;
        p->skip_ws = 1;
        return 1;
    }
    size_t hold = final ? 0 : cf_partial_tail(s, n, close);
    emit_text(p, CINFER_DELTA_REASONING, s, n - hold);
    consume(p, n - hold);
    return 0;
}

static int step_block(cinfer_chat_parser *p, const char *s, size_t n, int final) {
    const char *open = cf_tool_open(p->f.tools), *close = cf_tool_close(p->f.tools);
    size_t ol = strlen(open), cl = strlen(close);
    size_t at = cf_find(s + p->scan, n - p->scan, close) + p->scan;
    if (at >= n) {
        if (final) return fail_to_content(p, s, n) ? 0 : 1;
        p->scan = n - cf_partial_tail(s, n, close);
        if (p->scan < ol) p->scan = ol;
        return 0;
    }
    int rc = emit_calls(p, p->f.tools == CF_TOOLS_HERMES
                               ? cf_tool_calls_json(&p->calls, s + ol, at - ol)
                               : cf_tool_calls_gemma(&p->calls, s + ol, at - ol, cf_tool_quote(p->f.tools)));
    if (rc < 0) return -1;
    if (rc == 0) return fail_to_content(p, s, at + cl) ? 0 : 1;
    call_done(p, at + cl);
    return 1;
}

static int step_llama(cinfer_chat_parser *p, const char *s, size_t n, int final) {
    static const char tag[] = "<|python_tag|>";
    while (!p->llama_in_value) {
        size_t i = p->scan;
        if (i >= n) {
            if (!final) return 0;
            if (p->llama_after_call) {
                consume(p, n);
                p->mode = M_CONTENT;
                return 0;
            }
            return fail_to_content(p, s, n) ? 0 : 1;
        }
        if (cf_is_ws(s[i]) || (p->llama_after_call && s[i] == ';')) {
            p->scan++;
        } else if (!p->llama_after_call && cf_starts_with(s + i, n - i, tag)) {
            p->scan += sizeof tag - 1;
        } else if (!p->llama_after_call && !final && cf_begins(s + i, n - i, tag)) {
            return 0;
        } else if (s[i] == '{') {
            p->llama_in_value = 1;
            p->value_at = i;
            p->js = (json_scan){0};
        } else if (p->llama_after_call) {
            consume(p, i);  /* the separators after the last call */
            p->mode = M_CONTENT;
            p->at_start = 0;
            return 1;
        } else {
            return fail_to_content(p, s, i) ? 0 : 1;
        }
    }
    size_t end = json_scan_feed(&p->js, s, p->scan, n);
    if (!end) {
        p->scan = n;
        if (!final) return 0;
        return fail_to_content(p, s, n) ? 0 : 1;
    }
    int rc = emit_calls(p, cf_tool_calls_json(&p->calls, s + p->value_at, end - p->value_at));
    if (rc < 0) return -1;
    if (rc == 0) return fail_to_content(p, s, end) ? 0 : 1;
    consume(p, end);
    p->scan = 0;
    p->llama_after_call = 1;
    p->llama_in_value = 0;
    return 1;
}

static int step_mistral(cinfer_chat_parser *p, const char *s, size_t n, int final) {
    for (;;) {
        size_t i = p->scan;
        switch (p->mp) {
        case MP_START:
            i += cf_ws_prefix(s + i, n - i);
            p->scan = i;
            if (i >= n) break;
            if (s[i] == '[') {
                p->mp = MP_ARRAY;
                p->value_at = i;
            } else {
                p->mp = MP_NAME;
                p->name_at = i;
            }
            continue;
        case MP_ARRAY:
        case MP_OBJECT: {
            size_t end = json_scan_feed(&p->js, s, i, n);
            if (!end) {
                p->scan = n;
                break;
            }
            const char *v = s + p->value_at;
            int rc = emit_calls(p, p->mp == MP_ARRAY ? cf_tool_calls_json(&p->calls, v, end - p->value_at)
                                                     : cf_tool_calls_named(&p->calls, s + p->name_at, p->name_len, v,
                                                                           end - p->value_at));
            if (rc < 0) return -1;
            if (rc == 0) return fail_to_content(p, s, end) ? 0 : 1;
            call_done(p, end);
            return 1;
        }
        case MP_NAME:
        case MP_CALL_ID: {
            while (i < n && s[i] != '[') {
                if (p->mp == MP_NAME && (!cf_tool_name_valid(s + i, 1) || i - p->name_at >= 256))
                    return fail_to_content(p, s, i) ? 0 : 1;
                i++;
            }
            p->scan = i;
            if (i < n && p->mp == MP_NAME && i == p->name_at) return fail_to_content(p, s, i) ? 0 : 1;
            if (i >= n) break;
            if (cf_starts_with(s + i, n - i, "[ARGS]")) {
                if (p->mp == MP_NAME) p->name_len = i - p->name_at;
                p->mp = MP_ARGS;
                p->scan = i + 6;
                continue;
            }
            if (p->mp == MP_NAME && cf_starts_with(s + i, n - i, "[CALL_ID]")) {
                p->name_len = i - p->name_at;
                p->mp = MP_CALL_ID;
                p->scan = i + 9;
                continue;
            }
            if (!final && (cf_begins(s + i, n - i, "[ARGS]") || (p->mp == MP_NAME && cf_begins(s + i, n - i, "[CALL_ID]"))))
                break;
            return fail_to_content(p, s, i) ? 0 : 1;
        }
        case MP_ARGS:
            i += cf_ws_prefix(s + i, n - i);
            p->scan = i;
            if (i >= n) break;
            if (s[i] != '{') return fail_to_content(p, s, i) ? 0 : 1;
            p->mp = MP_OBJECT;
            p->value_at = i;
            p->js = (json_scan){0};
            continue;
        }
        if (!final) return 0;
        return fail_to_content(p, s, n) ? 0 : 1;
    }
}

static cinfer_status run(cinfer_chat_parser *p, int final, cinfer_error *err) {
    int rc = 1;
    while (rc > 0 && !p->stopped) {
        const char *s = p->buf + p->off;
        size_t n = p->len - p->off;
        if (p->skip_ws && (p->mode == M_CONTENT || p->mode == M_REASONING)) {
            size_t k = cf_ws_prefix(s, n);
            consume(p, k);
            s += k;
            n -= k;
            if (!n) break;
            p->skip_ws = 0;
        }
        if (!n && p->mode != M_LLAMA) break;
        switch (p->mode) {
        case M_CONTENT: rc = step_content(p, s, n, final); break;
        case M_REASONING: rc = step_reasoning(p, s, n, final); break;
        case M_BLOCK: rc = step_block(p, s, n, final); break;
        case M_LLAMA: rc = step_llama(p, s, n, final); break;
        case M_MISTRAL: rc = step_mistral(p, s, n, final); break;
        }
    }
    if (p->mode == M_CONTENT || p->mode == M_REASONING) p->scan = 0;
    memmove(p->buf, p->buf + p->off, p->len - p->off);
    p->len -= p->off;
    p->off = 0;
    if (rc < 0) return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory parsing a tool call");
    if (p->stopped) return cf_fail(err, CINFER_E_CANCELLED, "the chat parser's consumer stopped it");
    return CINFER_OK;
}

static cinfer_status begin(cinfer_chat_parser *p, int (*on_delta)(const cinfer_chat_delta *, void *), void *user,
                           cinfer_error *err) {
    if (!p || !on_delta) return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "the chat parser and on_delta must not be NULL");
    p->on_delta = on_delta;
    p->user = user;
    p->stopped = 0;
    return CINFER_OK;
}

cinfer_status cinfer_chat_parser_feed(cinfer_chat_parser *p, const char *text, size_t len,
                                      int (*on_delta)(const cinfer_chat_delta *d, void *user), void *user,
                                      cinfer_error *err) {
    CF_TRY(begin(p, on_delta, user, err));
    if (!text && len) return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "the chat parser was fed NULL text of %zu bytes", len);
    if (p->len + len > p->cap) {
        size_t cap = p->cap ? p->cap : 256;
        while (cap < p->len + len) cap *= 2;
        char *b = realloc(p->buf, cap);
        if (!b) return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory holding %zu bytes of a reply", p->len + len);
        p->buf = b;
        p->cap = cap;
    }
    if (len) memcpy(p->buf + p->len, text, len);
    p->len += len;
    return run(p, 0, err);
}

cinfer_status cinfer_chat_parser_finish(cinfer_chat_parser *p,
                                        int (*on_delta)(const cinfer_chat_delta *d, void *user), void *user,
                                        cinfer_error *err) {
    CF_TRY(begin(p, on_delta, user, err));
    return run(p, 1, err);
}
