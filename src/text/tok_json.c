/* tok_json.c: a small JSON scanner for the bulk of tokenizer.json. A vocabulary and merge list hold
 * hundreds of thousands of strings; building cJSON nodes for them costs most of a load, so they are
 * read in place here (strings decoded with every escape, U+0000 included) and only the rest of the
 * file goes through cJSON. */
#include <string.h>

#include "text/tok_impl.h"

const char *tk_json_ws(const char *p, const char *end) {
    while (p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) p++;
    return p;
}

static int hex4(const char *p, unsigned *v) {
    *v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return -1;
        *v = *v * 16 + (unsigned)d;
    }
    return 0;
}

const char *tk_json_string(const char *p, const char *end, tk_buf *out) {
    if (p >= end || *p != '"') return NULL;
    p++;
    if (out) out->n = 0;
    for (;;) {
        const char *run = p;
        while (p < end && *p != '"' && *p != '\\' && (unsigned char)*p >= 0x20) p++;
        if (out) tk_buf_put(out, run, (size_t)(p - run));
        if (p >= end || (unsigned char)*p < 0x20) return NULL;
        if (*p == '"') return out && out->oom ? NULL : p + 1;
        if (++p >= end) return NULL;
        char e = *p++, c;
        switch (e) {
        case '"': case '\\': case '/': c = e; break;
        case 'b': c = '\b'; break;
        case 'f': c = '\f'; break;
        case 'n': c = '\n'; break;
        case 'r': c = '\r'; break;
        case 't': c = '\t'; break;
        case 'u': {
            unsigned cp, lo;
            if (end - p < 4 || hex4(p, &cp)) return NULL;
            p += 4;
            if (cp >= 0xDC00 && cp < 0xE000) return NULL; /* a lone trailing surrogate */
            if (cp >= 0xD800 && cp < 0xDC00) {
                if (end - p < 6 || p[0] != '\\' || p[1] != 'u' || hex4(p + 2, &lo) || lo < 0xDC00 || lo >= 0xE000)
                    return NULL;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                p += 6;
            }
            if (out) tk_buf_put_cp(out, (int32_t)cp);
            continue;
        }
        default: return NULL;
        }
        if (out) tk_buf_putc(out, c);
    }
}

static const char *skip(const char *p, const char *end, int depth) {
    p = tk_json_ws(p, end);
    if (p >= end || depth > 512) return NULL;
    if (*p == '"') return tk_json_string(p, end, NULL);
    if (*p == '{' || *p == '[') {
        char close = *p == '{' ? '}' : ']';
        p = tk_json_ws(p + 1, end);
        if (p < end && *p == close) return p + 1;
        for (;;) {
            if (close == '}') {
                p = tk_json_string(tk_json_ws(p, end), end, NULL);
                if (!p) return NULL;
                p = tk_json_ws(p, end);
                if (p >= end || *p++ != ':') return NULL;
            }
            p = skip(p, end, depth + 1);
            if (!p) return NULL;
            p = tk_json_ws(p, end);
            if (p >= end) return NULL;
            if (*p == close) return p + 1;
            if (*p++ != ',') return NULL;
        }
    }
    const char *start = p; /* number, true, false, null */
    while (p < end && (strchr("+-.eE", *p) || (*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'z'))) p++;
    return p > start ? p : NULL;
}

const char *tk_json_skip(const char *p, const char *end) { return skip(p, end, 0); }

int tk_json_member(const char *obj, const char *end, const char *key, const char **v, const char **vend) {
    const char *p = tk_json_ws(obj, end);
    if (p >= end || *p != '{') return -1;
    p = tk_json_ws(p + 1, end);
    if (p < end && *p == '}') return 0;
    size_t klen = strlen(key);
    for (;;) {
        p = tk_json_ws(p, end);
        const char *k = p;
        p = tk_json_string(p, end, NULL);
        if (!p) return -1;
        int match = (size_t)(p - k) == klen + 2 && memcmp(k + 1, key, klen) == 0;
        p = tk_json_ws(p, end);
        if (p >= end || *p++ != ':') return -1;
        const char *vs = tk_json_ws(p, end);
        p = tk_json_skip(vs, end);
        if (!p) return -1;
        if (match) {
            *v = vs;
            *vend = p;
            return 1;
        }
        p = tk_json_ws(p, end);
        if (p >= end) return -1;
        if (*p == '}') return 0;
        if (*p++ != ',') return -1;
    }
}
