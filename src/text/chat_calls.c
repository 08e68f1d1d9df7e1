/* chat_calls.c: decoding the calls a model writes (chat_calls.h). Arguments are re-printed compactly by
 * cJSON; a string holding a JSON object is taken for the object, as some models quote their arguments. */
#include "text/chat_calls.h"
#include "text/chat_text.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

int cf_tool_name_valid(const char *s, size_t n) {
    if (!n || n > 256) return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c <= ' ' || c == '"' || c == '{' || c == '}' || c == '[' || c == ']' || c == ',' || c == '(' || c == ')')
            return 0;
    }
    return 1;
}

void cf_tool_calls_clear(cf_tool_calls *c) {
    for (int i = 0; i < c->n; i++) {
        free(c->v[i].name);
        cJSON_free(c->v[i].arguments);
    }
    free(c->v);
    memset(c, 0, sizeof *c);
}

/* Drops the calls from index keep on (a decoder that failed half-way). */
static void truncate_calls(cf_tool_calls *c, int keep) {
    while (c->n > keep) {
        c->n--;
        free(c->v[c->n].name);
        cJSON_free(c->v[c->n].arguments);
    }
}

/* Appends one call; args must be an object. -1 when out of memory. */
static int append(cf_tool_calls *c, const char *name, size_t name_len, const cJSON *args) {
    if (c->n == c->cap) {
        int cap = c->cap ? c->cap * 2 : 4;
        cf_tool_call *v = realloc(c->v, (size_t)cap * sizeof *v);
        if (!v) return -1;
        c->v = v;
        c->cap = cap;
    }
    char *nm = malloc(name_len + 1);
    char *a = cJSON_PrintUnformatted(args);
    if (!nm || !a) {
        free(nm);
        cJSON_free(a);
        return -1;
    }
    memcpy(nm, name, name_len);
    nm[name_len] = 0;
    c->v[c->n++] = (cf_tool_call){nm, a};
    return 0;
}

/* One JSON value with nothing but whitespace after it, or NULL. */
static cJSON *parse_whole(const char *s, size_t n) {
    const char *end = NULL;
    cJSON *v = cJSON_ParseWithLengthOpts(s, n, &end, 0);
    if (v && cf_ws_prefix(end, (size_t)(s + n - end)) != (size_t)(s + n - end)) {
        cJSON_Delete(v);
        return NULL;
    }
    return v;
}

/* A call's arguments: an object, or a string holding one; absent or null is {}. A new object, or NULL
 * when they are not an object. */
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

/* A call object {"name": ..., "arguments" | "parameters": ...}: 1 appended, 0 not a call, -1 out of memory. */
static int append_object(cf_tool_calls *c, const cJSON *o) {
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(o, "name");
    if (!cJSON_IsObject(o) || !cJSON_IsString(name) || !cf_tool_name_valid(name->valuestring, strlen(name->valuestring)))
        return 0;
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, "arguments");
    if (!a) a = cJSON_GetObjectItemCaseSensitive(o, "parameters");
    cJSON *args = arguments_object(a);
    if (!args) return 0;
    int rc = append(c, name->valuestring, strlen(name->valuestring), args) < 0 ? -1 : 1;
    cJSON_Delete(args);
    return rc;
}

int cf_tool_calls_json(cf_tool_calls *c, const char *s, size_t n) {
    cJSON *v = parse_whole(s, n);
    if (!v) return 0;
    int keep = c->n, rc = 0;
    if (cJSON_IsArray(v)) {
        const cJSON *it;
        cJSON_ArrayForEach(it, v) {
            if ((rc = append_object(c, it)) <= 0) break;
        }
    } else {
        rc = append_object(c, v);
    }
    if (rc <= 0) truncate_calls(c, keep);
    cJSON_Delete(v);
    return rc;
}

int cf_tool_calls_named(cf_tool_calls *c, const char *name, size_t name_len, const char *s, size_t n) {
    if (!cf_tool_name_valid(name, name_len)) return 0;
    cJSON *o = parse_whole(s, n);
    int rc = cJSON_IsObject(o) ? (append(c, name, name_len, o) < 0 ? -1 : 1) : 0;
    cJSON_Delete(o);
    return rc;
}

/* ---- Gemma's call syntax: call:name{key:value,...} with strings between quote markers ---- */

typedef struct gemma_reader {
    const char *s, *end, *quote;
    size_t qlen;
    int depth;
} gemma_reader;

static void gr_ws(gemma_reader *r) { r->s += cf_ws_prefix(r->s, (size_t)(r->end - r->s)); }

static cJSON *gr_value(gemma_reader *r);

/* A quoted string, or a bare word up to one of the stop characters. */
static cJSON *gr_text(gemma_reader *r, const char *stops, int *quoted) {
    gr_ws(r);
    size_t left = (size_t)(r->end - r->s);
    const char *from, *to;
    if (cf_starts_with(r->s, left, r->quote)) {
        from = r->s + r->qlen;
        size_t at = cf_find(from, (size_t)(r->end - from), r->quote);
        if (from + at >= r->end) return NULL;
        to = from + at;
        r->s = to + r->qlen;
        *quoted = 1;
    } else {
        from = r->s;
        while (r->s < r->end && !strchr(stops, *r->s)) r->s++;
        to = r->s;
        while (to > from && cf_is_ws(to[-1])) to--;
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
        cJSON *j = parse_whole(w, strlen(w)); /* a number, or a string in JSON quotes */
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

int cf_tool_calls_gemma(cf_tool_calls *c, const char *s, size_t n, const char *quote) {
    size_t i = cf_ws_prefix(s, n);
    if (!cf_starts_with(s + i, n - i, "call:")) return 0;
    i += 5;
    size_t name_at = i;
    while (i < n && s[i] != '{') i++;
    size_t name_end = i;
    while (name_end > name_at && cf_is_ws(s[name_end - 1])) name_end--;
    if (i >= n || !cf_tool_name_valid(s + name_at, name_end - name_at)) return 0;
    gemma_reader r = {.s = s + i, .end = s + n, .quote = quote, .qlen = strlen(quote)};
    cJSON *args = gr_value(&r);
    gr_ws(&r);
    int rc = 0;
    if (cJSON_IsObject(args) && r.s == r.end) rc = append(c, s + name_at, name_end - name_at, args) < 0 ? -1 : 1;
    cJSON_Delete(args);
    return rc;
}
