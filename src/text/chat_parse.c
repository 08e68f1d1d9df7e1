/* chat_parse.c: chat reply formats and the streaming reply parser. The format (reasoning markers,
 * tool-call syntax) is read from a chat template's source and the vocabulary; the parser keeps the
 * unconsumed reply text in one buffer and, in each mode, either hands text out or waits, deciding only
 * on what it has seen, so the deltas do not depend on how the reply was split into feeds. Text is held
 * back only while it may still be markup: the tail of the buffer that begins a marker, an open tool
 * call, and (Llama 3, tools offered) the reply's leading whitespace. */
#include "text/chat_parse.h"
#include "base/status.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

/* ---- formats ---- */

static const char *reasoning_open(cf_reasoning_syntax r) {
    return r == CF_REASONING_THINK ? "<think>" : r == CF_REASONING_CHANNEL ? "<|channel>thought" : NULL;
}

static const char *reasoning_close(cf_reasoning_syntax r) {
    return r == CF_REASONING_THINK ? "</think>" : r == CF_REASONING_CHANNEL ? "<channel|>" : NULL;
}

static const char *tool_open(cf_tool_syntax t) {
    switch (t) {
    case CF_TOOLS_HERMES: return "<tool_call>";
    case CF_TOOLS_LLAMA3: return "<|python_tag|>";
    case CF_TOOLS_MISTRAL: return "[TOOL_CALLS]";
    case CF_TOOLS_GEMMA4: return "<|tool_call>";
    case CF_TOOLS_FUNCTIONGEMMA: return "<start_function_call>";
    default: return NULL;
    }
}

static const char *tool_close(cf_tool_syntax t) {
    switch (t) {
    case CF_TOOLS_HERMES: return "</tool_call>";
    case CF_TOOLS_GEMMA4: return "<tool_call|>";
    case CF_TOOLS_FUNCTIONGEMMA: return "<end_function_call>";
    default: return NULL;
    }
}

/* The string delimiter of Gemma's call syntax. */
static const char *gemma_quote(cf_tool_syntax t) { return t == CF_TOOLS_GEMMA4 ? "<|\"|>" : "<escape>"; }

const char *cf_reasoning_syntax_name(cf_reasoning_syntax r) {
    return r == CF_REASONING_THINK ? "think" : r == CF_REASONING_CHANNEL ? "channel" : "none";
}

const char *cf_tool_syntax_name(cf_tool_syntax t) {
    switch (t) {
    case CF_TOOLS_HERMES: return "hermes";
    case CF_TOOLS_LLAMA3: return "llama3";
    case CF_TOOLS_MISTRAL: return "mistral";
    case CF_TOOLS_GEMMA4: return "gemma4";
    case CF_TOOLS_FUNCTIONGEMMA: return "functiongemma";
    default: return "none";
    }
}

static int in_template(const char *src, const char *s) { return src && strstr(src, s) != NULL; }
static int in_vocab(const cf_tokenizer *tok, const char *s) { return tok && cf_tokenizer_token_id(tok, s) >= 0; }

static int is_special_token(const cf_tokenizer *tok, const char *s) {
    int32_t id = tok ? cf_tokenizer_token_id(tok, s) : -1;
    return id >= 0 && cf_tokenizer_is_special(tok, id);
}

cf_chat_format cf_chat_format_detect(const char *src, const cf_tokenizer *tok) {
    cf_chat_format f = {0};
    if (in_template(src, "<|channel>") || (in_vocab(tok, "<|channel>") && in_vocab(tok, "<channel|>")))
        f.reasoning = CF_REASONING_CHANNEL;
    else if (in_template(src, "<think>") || (in_vocab(tok, "<think>") && in_vocab(tok, "</think>")))
        f.reasoning = CF_REASONING_THINK;

    /* The template is asked first (it is what the model was prompted with), then the vocabulary. */
    static const struct { const char *marker; cf_tool_syntax syntax; } by_marker[] = {
        {"<|tool_call>", CF_TOOLS_GEMMA4},
        {"<start_function_call>", CF_TOOLS_FUNCTIONGEMMA},
        {"[TOOL_CALLS]", CF_TOOLS_MISTRAL},
        {"<tool_call>", CF_TOOLS_HERMES},
        {"<|python_tag|>", CF_TOOLS_LLAMA3},
    };
    const size_t n = sizeof by_marker / sizeof by_marker[0];
    for (size_t i = 0; i < n && !f.tools; i++)
        if (in_template(src, by_marker[i].marker)) f.tools = by_marker[i].syntax;
    if (!f.tools && in_template(src, "\"parameters\": dictionary of argument name")) f.tools = CF_TOOLS_LLAMA3;
    for (size_t i = 0; i < n && !f.tools; i++)
        if (in_vocab(tok, by_marker[i].marker)) f.tools = by_marker[i].syntax;

    if (f.reasoning) f.reasoning_special = is_special_token(tok, reasoning_open(f.reasoning)) ||
                                           is_special_token(tok, "<|channel>") ||
                                           is_special_token(tok, reasoning_close(f.reasoning));
    if (f.tools) f.tools_special = is_special_token(tok, tool_open(f.tools)) ||
                                   (tool_close(f.tools) && is_special_token(tok, tool_close(f.tools))) ||
                                   is_special_token(tok, "[ARGS]") || is_special_token(tok, "<|\"|>") ||
                                   is_special_token(tok, "<escape>");
    return f;
}

static int is_ws(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

static size_t ws_prefix(const char *s, size_t n) {
    size_t i = 0;
    while (i < n && is_ws(s[i])) i++;
    return i;
}

/* Where m first occurs in s[0, n), or n. */
static size_t find(const char *s, size_t n, const char *m) {
    size_t k = strlen(m);
    for (size_t i = 0; i + k <= n; i++)
        if (s[i] == m[0] && memcmp(s + i, m, k) == 0) return i;
    return n;
}

static int starts_with(const char *s, size_t n, const char *m) {
    size_t k = strlen(m);
    return n >= k && memcmp(s, m, k) == 0;
}

/* s[0, n) is a proper beginning of m. */
static int begins(const char *s, size_t n, const char *m) {
    size_t k = strlen(m);
    return n < k && memcmp(s, m, n) == 0;
}

/* The length of the longest tail of s[0, n) that is a proper beginning of m. */
static size_t partial_tail(const char *s, size_t n, const char *m) {
    size_t k = strlen(m);
    for (size_t l = k - 1 < n ? k - 1 : n; l > 0; l--)
        if (memcmp(s + n - l, m, l) == 0) return l;
    return 0;
}

int cf_chat_prompt_opens_reasoning(const cf_chat_format *f, const char *prompt, size_t len) {
    const char *open = reasoning_open(f->reasoning);
    if (!open || !prompt) return 0;
    size_t k = strlen(open);
    for (size_t i = len >= k ? len - k + 1 : 0; i-- > 0;) {
        if (memcmp(prompt + i, open, k) != 0) continue;
        return ws_prefix(prompt + i + k, len - i - k) == len - i - k;
    }
    return 0;
}

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
    free(p->buf);
    free(p);
}

static int emit_text(cinfer_chat_parser *p, cinfer_chat_delta_kind kind, const char *s, size_t n) {
    if (!n || p->stopped) return p->stopped;
    cinfer_chat_delta d = {.kind = kind, .text = s, .text_len = n};
    if (p->on_delta(&d, p->user)) p->stopped = 1;
    return p->stopped;
}

/* Hands out one call; args is an object. Returns -1 when out of memory. */
static int emit_call(cinfer_chat_parser *p, const char *name, size_t name_len, const cJSON *args) {
    char *nm = malloc(name_len + 1);
    char *a = cJSON_PrintUnformatted(args);
    if (!nm || !a) {
        free(nm);
        cJSON_free(a);
        return -1;
    }
    memcpy(nm, name, name_len);
    nm[name_len] = 0;
    cinfer_chat_delta d = {.kind = CINFER_DELTA_TOOL_CALL, .tool_index = p->n_calls++, .tool_name = nm,
                           .tool_arguments = a};
    if (!p->stopped && p->on_delta(&d, p->user)) p->stopped = 1;
    free(nm);
    cJSON_free(a);
    return 0;
}

/* A call's arguments: an object, or a string holding one (as some models write them); NULL = absent.
 * Returns a new object, or NULL when they are not an object. */
static cJSON *arguments_object(const cJSON *v) {
    if (!v || cJSON_IsNull(v)) return cJSON_CreateObject();
    if (cJSON_IsObject(v)) return cJSON_Duplicate(v, 1);
    if (cJSON_IsString(v)) {
        cJSON *o = cJSON_Parse(v->valuestring);
        if (cJSON_IsObject(o)) return o;
        cJSON_Delete(o);
    }
    return NULL;
}

static int valid_name(const char *s, size_t n) {
    if (!n || n > 256) return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c <= ' ' || c == '"' || c == '{' || c == '}' || c == '[' || c == ']' || c == ',' || c == '(' || c == ')')
            return 0;
    }
    return 1;
}

typedef struct call {
    const char *name;
    cJSON *args;
} call;

/* A call object {"name": ..., "arguments" | "parameters": {...}}. 0 when it is not one. */
static int call_of_json(const cJSON *o, call *c) {
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(o, "name");
    if (!cJSON_IsObject(o) || !cJSON_IsString(name) || !valid_name(name->valuestring, strlen(name->valuestring)))
        return 0;
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, "arguments");
    if (!a) a = cJSON_GetObjectItemCaseSensitive(o, "parameters");
    c->name = name->valuestring;
    c->args = arguments_object(a);
    return c->args != NULL;
}

static cJSON *parse_json(const char *s, size_t n) {
    const char *end = NULL;
    cJSON *v = cJSON_ParseWithLengthOpts(s, n, &end, 0);
    if (v && ws_prefix(end, (size_t)(s + n - end)) != (size_t)(s + n - end)) {
        cJSON_Delete(v);
        return NULL;
    }
    return v;
}

/* Emits the calls of a JSON object (one call) or array (several); 0 when it is not that, -1 when out
 * of memory. Nothing is emitted unless every call is valid. */
static int emit_json_calls(cinfer_chat_parser *p, const char *s, size_t n) {
    cJSON *v = parse_json(s, n);
    if (!v) return 0;
    int count = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : 1;
    call *calls = count ? calloc((size_t)count, sizeof *calls) : NULL;
    int ok = count > 0 && calls != NULL, got = 0;
    if (cJSON_IsArray(v)) {
        const cJSON *it;
        cJSON_ArrayForEach(it, v) {
            if (!ok) break;
            ok = call_of_json(it, &calls[got]);
            got += ok;
        }
    } else if (ok) {
        ok = call_of_json(v, &calls[0]);
        got += ok;
    }
    int rc = ok ? 1 : 0;
    for (int i = 0; i < got; i++) {
        if (ok && rc == 1 && emit_call(p, calls[i].name, strlen(calls[i].name), calls[i].args) < 0) rc = -1;
        cJSON_Delete(calls[i].args);
    }
    free(calls);
    cJSON_Delete(v);
    return rc;
}

/* ---- Gemma's call syntax: call:name{key:value,...} with strings between quote markers ---- */

typedef struct gemma_reader {
    const char *s, *end, *quote;
    size_t qlen;
    int depth;
} gemma_reader;

static void gr_ws(gemma_reader *r) { r->s += ws_prefix(r->s, (size_t)(r->end - r->s)); }

static cJSON *gr_value(gemma_reader *r);

/* A quoted string, or a bare word up to one of the stop characters. */
static cJSON *gr_text(gemma_reader *r, const char *stops, int *quoted) {
    gr_ws(r);
    size_t left = (size_t)(r->end - r->s);
    const char *from, *to;
    if (starts_with(r->s, left, r->quote)) {
        from = r->s + r->qlen;
        size_t at = find(from, (size_t)(r->end - from), r->quote);
        if (from + at >= r->end) return NULL;
        to = from + at;
        r->s = to + r->qlen;
        *quoted = 1;
    } else {
        from = r->s;
        while (r->s < r->end && !strchr(stops, *r->s)) r->s++;
        to = r->s;
        while (to > from && is_ws(to[-1])) to--;
        *quoted = 0;
    }
    char *t = malloc((size_t)(to - from) + 1);
    if (!t) return NULL;
    memcpy(t, from, (size_t)(to - from));
    t[to - from] = 0;
    cJSON *v = cJSON_CreateString(t);
    free(t);
    return v;
}

/* A bare word as JSON: true, false, null, a number, else the text itself. */
static cJSON *bare_value(cJSON *word) {
    const char *w = word->valuestring;
    cJSON *v = NULL;
    if (!strcmp(w, "true")) v = cJSON_CreateTrue();
    else if (!strcmp(w, "false")) v = cJSON_CreateFalse();
    else if (!strcmp(w, "null") || !strcmp(w, "None")) v = cJSON_CreateNull();
    else if (*w) {
        cJSON *j = parse_json(w, strlen(w)); /* a number, or a string in JSON quotes */
        if (cJSON_IsNumber(j) || cJSON_IsString(j)) v = j;
        else cJSON_Delete(j);
    }
    if (!v) return word;
    cJSON_Delete(word);
    return v;
}

static cJSON *gr_container(gemma_reader *r, int object) {
    char close = object ? '}' : ']';
    cJSON *c = object ? cJSON_CreateObject() : cJSON_CreateArray();
    r->s++;
    gr_ws(r);
    if (r->s < r->end && *r->s == close) {
        r->s++;
        return c;
    }
    while (c) {
        cJSON *v = NULL;
        if (object) {
            int quoted;
            cJSON *key = gr_text(r, ":,}", &quoted);
            gr_ws(r);
            if (!key || !key->valuestring[0] || r->s >= r->end || *r->s != ':') {
                cJSON_Delete(key);
                cJSON_Delete(c);
                return NULL;
            }
            r->s++;
            v = gr_value(r);
            if (v && !cJSON_AddItemToObject(c, key->valuestring, v)) {
                cJSON_Delete(v);
                v = NULL;
            }
            cJSON_Delete(key);
        } else {
            v = gr_value(r);
            if (v && !cJSON_AddItemToArray(c, v)) {
                cJSON_Delete(v);
                v = NULL;
            }
        }
        gr_ws(r);
        if (!v || r->s >= r->end) break;
        if (*r->s == close) {
            r->s++;
            return c;
        }
        if (*r->s != ',') break;
        r->s++;
    }
    cJSON_Delete(c);
    return NULL;
}

static cJSON *gr_value(gemma_reader *r) {
    gr_ws(r);
    if (r->s >= r->end || ++r->depth > 64) return NULL;
    cJSON *v;
    if (*r->s == '{' || *r->s == '[') {
        v = gr_container(r, *r->s == '{');
    } else {
        int quoted;
        v = gr_text(r, ",}]", &quoted);
        if (v && !quoted) v = bare_value(v);
    }
    r->depth--;
    return v;
}

/* body: call:name{...}. 0 when it is not a call, -1 when out of memory. */
static int emit_gemma_call(cinfer_chat_parser *p, const char *s, size_t n) {
    size_t i = ws_prefix(s, n);
    if (!starts_with(s + i, n - i, "call:")) return 0;
    i += 5;
    size_t name_at = i;
    while (i < n && s[i] != '{') i++;
    size_t name_end = i;
    while (name_end > name_at && is_ws(s[name_end - 1])) name_end--;
    if (i >= n || !valid_name(s + name_at, name_end - name_at)) return 0;
    gemma_reader r = {.s = s + i, .end = s + n, .quote = gemma_quote(p->f.tools)};
    r.qlen = strlen(r.quote);
    cJSON *args = gr_value(&r);
    gr_ws(&r);
    int rc = 0;
    if (cJSON_IsObject(args) && r.s == r.end) rc = emit_call(p, s + name_at, name_end - name_at, args) < 0 ? -1 : 1;
    cJSON_Delete(args);
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
        size_t i = ws_prefix(s, n);
        if (i == n && !final) return 0;
        if (i < n && (s[i] == '{' || starts_with(s + i, n - i, "<|python_tag|>"))) {
            enter_tool_mode(p, M_LLAMA, 0);
            return 1;
        }
        if (i < n && !final && begins(s + i, n - i, "<|python_tag|>")) return 0;
        p->at_start = 0;
    }
    const char *markers[2] = {p->parse_reasoning ? reasoning_open(p->f.reasoning) : NULL,
                              p->parse_tools ? tool_open(p->f.tools) : NULL};
    size_t best = n;
    int which = -1;
    for (int m = 0; m < 2; m++) {
        if (!markers[m]) continue;
        size_t at = find(s, n, markers[m]);
        if (at < best) {
            best = at;
            which = m;
        }
    }
    if (which < 0) {
        size_t hold = 0;
        for (int m = 0; m < 2 && !final; m++) {
            size_t h = markers[m] ? partial_tail(s, n, markers[m]) : 0;
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
    const char *close = reasoning_close(p->f.reasoning);
    size_t at = find(s, n, close);
    if (at < n) {
        emit_text(p, CINFER_DELTA_REASONING, s, at);
        consume(p, at + strlen(close));
        p->mode = M_CONTENT;
        p->skip_ws = 1;
        return 1;
    }
    size_t hold = final ? 0 : partial_tail(s, n, close);
    emit_text(p, CINFER_DELTA_REASONING, s, n - hold);
    consume(p, n - hold);
    return 0;
}

static int step_block(cinfer_chat_parser *p, const char *s, size_t n, int final) {
    const char *open = tool_open(p->f.tools), *close = tool_close(p->f.tools);
    size_t ol = strlen(open), cl = strlen(close);
    size_t at = find(s + p->scan, n - p->scan, close) + p->scan;
    if (at >= n) {
        if (final) return fail_to_content(p, s, n) ? 0 : 1;
        p->scan = n - partial_tail(s, n, close);
        if (p->scan < ol) p->scan = ol;
        return 0;
    }
    int rc = p->f.tools == CF_TOOLS_HERMES ? emit_json_calls(p, s + ol, at - ol) : emit_gemma_call(p, s + ol, at - ol);
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
        if (is_ws(s[i]) || (p->llama_after_call && s[i] == ';')) {
            p->scan++;
        } else if (!p->llama_after_call && starts_with(s + i, n - i, tag)) {
            p->scan += sizeof tag - 1;
        } else if (!p->llama_after_call && !final && begins(s + i, n - i, tag)) {
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
    const char *v = s + p->value_at;
    cJSON *o = parse_json(v, end - p->value_at);
    call c = {0};
    int ok = o && call_of_json(o, &c);
    int rc = ok ? emit_call(p, c.name, strlen(c.name), c.args) : 0;
    cJSON_Delete(c.args);
    cJSON_Delete(o);
    if (rc < 0) return -1;
    if (!ok) return fail_to_content(p, s, end) ? 0 : 1;
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
            i += ws_prefix(s + i, n - i);
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
            int rc;
            if (p->mp == MP_ARRAY) {
                rc = emit_json_calls(p, s + p->value_at, end - p->value_at);
            } else {
                cJSON *o = parse_json(s + p->value_at, end - p->value_at);
                rc = cJSON_IsObject(o) ? (emit_call(p, s + p->name_at, p->name_len, o) < 0 ? -1 : 1) : 0;
                cJSON_Delete(o);
            }
            if (rc < 0) return -1;
            if (rc == 0) return fail_to_content(p, s, end) ? 0 : 1;
            call_done(p, end);
            return 1;
        }
        case MP_NAME:
        case MP_CALL_ID: {
            while (i < n && s[i] != '[') {
                if (p->mp == MP_NAME && (!valid_name(s + i, 1) || i - p->name_at >= 256))
                    return fail_to_content(p, s, i) ? 0 : 1;
                i++;
            }
            p->scan = i;
            if (i < n && p->mp == MP_NAME && i == p->name_at) return fail_to_content(p, s, i) ? 0 : 1;
            if (i >= n) break;
            if (starts_with(s + i, n - i, "[ARGS]")) {
                if (p->mp == MP_NAME) p->name_len = i - p->name_at;
                p->mp = MP_ARGS;
                p->scan = i + 6;
                continue;
            }
            if (p->mp == MP_NAME && starts_with(s + i, n - i, "[CALL_ID]")) {
                p->name_len = i - p->name_at;
                p->mp = MP_CALL_ID;
                p->scan = i + 9;
                continue;
            }
            if (!final && (begins(s + i, n - i, "[ARGS]") || (p->mp == MP_NAME && begins(s + i, n - i, "[CALL_ID]"))))
                break;
            return fail_to_content(p, s, i) ? 0 : 1;
        }
        case MP_ARGS:
            i += ws_prefix(s + i, n - i);
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
            size_t k = ws_prefix(s, n);
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
