/* template_json.c: JSON text to interpreter values as Python's json.loads builds them (ints stay
 * ints, floats floats, key order kept), and values back to JSON text as json.dumps writes it with
 * ensure_ascii=False (the tojson filter of transformers' chat templates). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "text/template_impl.h"

enum { J_MAX_DEPTH = 256 };

/* One step of the path from the root to the value being read: an object key or an array index. */
typedef struct {
    const tv_str *key;
    size_t index;
} jstep;

typedef struct {
    tctx *c;
    const char *s;
    size_t n, i;
    const char *root; /* the variable's name, the start of every path in a message */
    jstep path[J_MAX_DEPTH + 1];
    int depth;        /* steps of path in use */
    char *why;
    size_t why_cap;
    int failed;
} jparser;

/* "root[2].content" (keys that are not identifiers as ["..."]), at most cap bytes. */
static void write_path(const jparser *p, char *buf, size_t cap) {
    size_t o = (size_t)snprintf(buf, cap, "%s", p->root);
    for (int d = 0; d < p->depth && o < cap; d++) {
        const tv_str *k = p->path[d].key;
        int ident = k && k->len > 0 && k->len <= 40;
        for (size_t j = 0; ident && j < k->len; j++) {
            char ch = k->s[j];
            ident = ch == '_' || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (j && ch >= '0' && ch <= '9');
        }
        if (!k) o += (size_t)snprintf(buf + o, cap - o, "[%zu]", p->path[d].index);
        else if (ident) o += (size_t)snprintf(buf + o, cap - o, ".%s", k->s);
        else o += (size_t)snprintf(buf + o, cap - o, "[\"%.40s\"%s]", k->s, k->len > 40 ? "..." : "");
    }
}

/* A syntax error: the place is a byte offset in the JSON text. */
static void jfail(jparser *p, const char *what) {
    if (p->failed) return;
    char path[256];
    write_path(p, path, sizeof path);
    snprintf(p->why, p->why_cap, "%s: invalid JSON: %s at byte %zu", path, what, p->i);
    p->failed = 1;
}

/* Bad text inside a well-formed string: the place is a byte offset in the string's value. */
static void jfail_text(jparser *p, const char *what, size_t at) {
    if (p->failed) return;
    char path[256];
    write_path(p, path, sizeof path);
    snprintf(p->why, p->why_cap, "%s: %s at byte %zu", path, what, at);
    p->failed = 1;
}

static void jws(jparser *p) {
    while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\n' || p->s[p->i] == '\r'))
        p->i++;
}

static int hex4(const char *s, uint32_t *out) {
    uint32_t v = 0;
    for (int k = 0; k < 4; k++) {
        char ch = s[k];
        v <<= 4;
        if (ch >= '0' && ch <= '9') v |= (uint32_t)(ch - '0');
        else if (ch >= 'a' && ch <= 'f') v |= (uint32_t)(ch - 'a' + 10);
        else if (ch >= 'A' && ch <= 'F') v |= (uint32_t)(ch - 'A' + 10);
        else return 0;
    }
    *out = v;
    return 1;
}

static void put_utf8(tctx *c, tbuf *b, uint32_t cp) {
    char t[4];
    size_t n;
    if (cp < 0x80) { t[0] = (char)cp; n = 1; }
    else if (cp < 0x800) { t[0] = (char)(0xC0 | (cp >> 6)); t[1] = (char)(0x80 | (cp & 0x3F)); n = 2; }
    else if (cp < 0x10000) {
        t[0] = (char)(0xE0 | (cp >> 12)); t[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        t[2] = (char)(0x80 | (cp & 0x3F)); n = 3;
    } else {
        t[0] = (char)(0xF0 | (cp >> 18)); t[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        t[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); t[3] = (char)(0x80 | (cp & 0x3F)); n = 4;
    }
    tb_put(c, b, t, n);
}

static int jstring(jparser *p, tv *out) {
    tbuf b = {0};
    p->i++; /* opening quote */
    while (p->i < p->n) {
        unsigned char ch = (unsigned char)p->s[p->i];
        if (ch == '"') {
            p->i++;
            *out = tv_strn(p->c, b.p ? b.p : "", b.n);
            return 1;
        }
        if (ch < 0x20) { jfail(p, "control character in string"); return 0; }
        if (ch == '\\') {
            if (p->i + 1 >= p->n) break;
            char e = p->s[p->i + 1];
            p->i += 2;
            switch (e) {
            case '"': tb_putc(p->c, &b, '"'); break;
            case '\\': tb_putc(p->c, &b, '\\'); break;
            case '/': tb_putc(p->c, &b, '/'); break;
            case 'b': tb_putc(p->c, &b, '\b'); break;
            case 'f': tb_putc(p->c, &b, '\f'); break;
            case 'n': tb_putc(p->c, &b, '\n'); break;
            case 'r': tb_putc(p->c, &b, '\r'); break;
            case 't': tb_putc(p->c, &b, '\t'); break;
            case 'u': {
                uint32_t cp;
                if (p->i + 4 > p->n || !hex4(p->s + p->i, &cp)) { jfail(p, "bad \\u escape"); return 0; }
                p->i += 4;
                if (cp >= 0xD800 && cp < 0xDC00) {
                    uint32_t lo;
                    if (p->i + 6 <= p->n && p->s[p->i] == '\\' && p->s[p->i + 1] == 'u' &&
                        hex4(p->s + p->i + 2, &lo) && lo >= 0xDC00 && lo < 0xE000) {
                        p->i += 6;
                        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    } else {
                        cp = 0xFFFD;
                    }
                } else if (cp >= 0xDC00 && cp < 0xE000) {
                    cp = 0xFFFD;
                }
                put_utf8(p->c, &b, cp);
                break;
            }
            default: jfail(p, "bad escape"); return 0;
            }
            continue;
        }
        uint32_t cp;
        size_t k = tv_utf8_next(p->s + p->i, p->n - p->i, &cp);
        if (cp == 0xFFFD && k == 1 && ch >= 0x80) { jfail_text(p, "invalid UTF-8", b.n); return 0; }
        tb_put(p->c, &b, p->s + p->i, k);
        p->i += k;
    }
    jfail(p, "unterminated string");
    return 0;
}

static int jnumber(jparser *p, tv *out) {
    size_t st = p->i;
    int is_float = 0;
    if (p->s[p->i] == '-') p->i++;
    if (p->i >= p->n || p->s[p->i] < '0' || p->s[p->i] > '9') { jfail(p, "bad number"); return 0; }
    if (p->s[p->i] == '0') p->i++;
    else while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') p->i++;
    if (p->i < p->n && p->s[p->i] == '.') {
        is_float = 1;
        p->i++;
        if (p->i >= p->n || p->s[p->i] < '0' || p->s[p->i] > '9') { jfail(p, "bad number"); return 0; }
        while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') p->i++;
    }
    if (p->i < p->n && (p->s[p->i] == 'e' || p->s[p->i] == 'E')) {
        is_float = 1;
        p->i++;
        if (p->i < p->n && (p->s[p->i] == '+' || p->s[p->i] == '-')) p->i++;
        if (p->i >= p->n || p->s[p->i] < '0' || p->s[p->i] > '9') { jfail(p, "bad number"); return 0; }
        while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') p->i++;
    }
    char t[64];
    size_t len = p->i - st;
    if (len >= sizeof t) { is_float = 1; len = sizeof t - 1; }
    memcpy(t, p->s + st, len);
    t[len] = 0;
    if (!is_float) {
        char *end;
        errno = 0;
        long long v = strtoll(t, &end, 10);
        if (errno == 0) { *out = tv_int(v); return 1; }
    }
    *out = tv_float(strtod(t, NULL));
    return 1;
}

static int jvalue(jparser *p, tv *out, int depth) {
    if (depth > J_MAX_DEPTH) { jfail(p, "nested too deeply"); return 0; }
    jws(p);
    if (p->i >= p->n) { jfail(p, "unexpected end"); return 0; }
    char ch = p->s[p->i];
    if (ch == '{') {
        p->i++;
        tv d = tv_new_dict(p->c);
        jws(p);
        if (p->i < p->n && p->s[p->i] == '}') { p->i++; *out = d; return 1; }
        for (;;) {
            jws(p);
            if (p->i >= p->n || p->s[p->i] != '"') { jfail(p, "expected a key"); return 0; }
            tv k, v;
            if (!jstring(p, &k)) return 0;
            jws(p);
            if (p->i >= p->n || p->s[p->i] != ':') { jfail(p, "expected ':'"); return 0; }
            p->i++;
            p->path[depth] = (jstep){k.u.s, 0};
            p->depth = depth + 1;
            if (!jvalue(p, &v, depth + 1)) return 0;
            p->depth = depth;
            td_set(p->c, d.u.d, k, v);
            jws(p);
            if (p->i < p->n && p->s[p->i] == ',') { p->i++; continue; }
            if (p->i < p->n && p->s[p->i] == '}') { p->i++; *out = d; return 1; }
            jfail(p, "expected ',' or '}'");
            return 0;
        }
    }
    if (ch == '[') {
        p->i++;
        tv l = tv_new_list(p->c, 0);
        jws(p);
        if (p->i < p->n && p->s[p->i] == ']') { p->i++; *out = l; return 1; }
        for (;;) {
            tv v;
            p->path[depth] = (jstep){NULL, l.u.l->n};
            p->depth = depth + 1;
            if (!jvalue(p, &v, depth + 1)) return 0;
            p->depth = depth;
            tl_push(p->c, l.u.l, v);
            jws(p);
            if (p->i < p->n && p->s[p->i] == ',') { p->i++; continue; }
            if (p->i < p->n && p->s[p->i] == ']') { p->i++; *out = l; return 1; }
            jfail(p, "expected ',' or ']'");
            return 0;
        }
    }
    if (ch == '"') return jstring(p, out);
    if (ch == '-' || (ch >= '0' && ch <= '9')) return jnumber(p, out);
    static const struct { const char *w; int k; } words[] = {{"true", 1}, {"false", 2}, {"null", 3}};
    for (int w = 0; w < 3; w++) {
        size_t wl = strlen(words[w].w);
        if (p->n - p->i >= wl && memcmp(p->s + p->i, words[w].w, wl) == 0) {
            p->i += wl;
            *out = words[w].k == 3 ? tv_none() : tv_bool(words[w].k == 1);
            return 1;
        }
    }
    jfail(p, "unexpected character");
    return 0;
}

int tj_parse(tctx *c, const char *s, size_t n, const char *name, tv *out, char *why, size_t why_cap) {
    jparser *p = hp_alloc(c, sizeof *p);
    *p = (jparser){.c = c, .s = s, .n = n, .root = name, .why = why, .why_cap = why_cap};
    if (!jvalue(p, out, 0)) return 0;
    jws(p);
    if (p->i != p->n) { jfail(p, "trailing characters"); return 0; }
    return 1;
}

/* ---- dumping ---- */

static void dump_string(tctx *c, tbuf *b, const char *s, size_t n, int ascii) {
    tb_putc(c, b, '"');
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        const char *esc = NULL;
        char t[8];
        switch (ch) {
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        case '\b': esc = "\\b"; break;
        case '\f': esc = "\\f"; break;
        default:
            if (ch < 0x20) { snprintf(t, sizeof t, "\\u%04x", ch); esc = t; }
        }
        if (ascii && ch >= 0x80) {
            uint32_t cp;
            size_t k = tv_utf8_next(s + i, n - i, &cp);
            tb_put(c, b, s + run, i - run);
            char u[16];
            if (cp >= 0x10000) {
                uint32_t v = cp - 0x10000;
                snprintf(u, sizeof u, "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
            } else {
                snprintf(u, sizeof u, "\\u%04x", cp);
            }
            tb_put(c, b, u, strlen(u));
            i += k - 1;
            run = i + 1;
            continue;
        }
        if (esc) {
            tb_put(c, b, s + run, i - run);
            tb_put(c, b, esc, strlen(esc));
            run = i + 1;
        }
    }
    tb_put(c, b, s + run, n - run);
    tb_putc(c, b, '"');
}

static void dump_newline(tctx *c, tbuf *b, const char *indent, int level) {
    tb_putc(c, b, '\n');
    for (int i = 0; i < level; i++) tb_put(c, b, indent, strlen(indent));
}

static void dump_key(tctx *c, tbuf *b, tv k, int ascii) {
    char t[40];
    switch (k.k) {
    case TV_STR: dump_string(c, b, k.u.s->s, k.u.s->len, ascii); return;
    case TV_INT: snprintf(t, sizeof t, "\"%lld\"", (long long)k.u.i); break;
    case TV_FLOAT: { char f[32]; tv_float_repr(k.u.f, f, sizeof f); snprintf(t, sizeof t, "\"%s\"", f); break; }
    case TV_BOOL: snprintf(t, sizeof t, "\"%s\"", k.u.b ? "true" : "false"); break;
    case TV_NONE: snprintf(t, sizeof t, "\"null\""); break;
    default: tv_throw(c, "keys must be str, int, float, bool or None, not %s", tv_type_name(k));
    }
    tb_put(c, b, t, strlen(t));
}

static int key_cmp(tctx *c, const tv *a, const tv *b) { return tv_compare(c, *a, *b); }

static void dump_value(tctx *c, tbuf *b, tv v, const char *indent, const char *isep, const char *ksep,
                       int sort_keys, int ascii, int level) {
    if (level > TV_MAX_NEST) tv_throw(c, "value nested too deeply for tojson");
    if (v.k == TV_LIST || v.k == TV_DICT) te_step(c);
    char t[40];
    switch (v.k) {
    case TV_NONE: tb_put(c, b, "null", 4); return;
    case TV_BOOL: v.u.b ? tb_put(c, b, "true", 4) : tb_put(c, b, "false", 5); return;
    case TV_INT: snprintf(t, sizeof t, "%lld", (long long)v.u.i); tb_put(c, b, t, strlen(t)); return;
    case TV_FLOAT:
        if (isnan(v.u.f)) snprintf(t, sizeof t, "NaN");
        else if (isinf(v.u.f)) snprintf(t, sizeof t, v.u.f < 0 ? "-Infinity" : "Infinity");
        else tv_float_repr(v.u.f, t, sizeof t);
        tb_put(c, b, t, strlen(t));
        return;
    case TV_STR: dump_string(c, b, v.u.s->s, v.u.s->len, ascii); return;
    case TV_LIST:
        if (!(v.u.l->flags & TL_GEN)) {
            tv_list *l = v.u.l;
            if (l->n == 0) { tb_put(c, b, "[]", 2); return; }
            tb_putc(c, b, '[');
            for (size_t i = 0; i < l->n; i++) {
                if (i) tb_put(c, b, isep, strlen(isep));
                if (indent) dump_newline(c, b, indent, level + 1);
                dump_value(c, b, l->v[i], indent, isep, ksep, sort_keys, ascii, level + 1);
            }
            if (indent) dump_newline(c, b, indent, level);
            tb_putc(c, b, ']');
            return;
        }
        break;
    case TV_DICT: {
        tv_dict *d = v.u.d;
        if (d->n == 0) { tb_put(c, b, "{}", 2); return; }
        size_t *order = hp_alloc(c, d->n * sizeof(size_t));
        for (size_t i = 0; i < d->n; i++) order[i] = i;
        if (sort_keys) /* insertion sort keeps it stable and simple; dicts here are small */
            for (size_t i = 1; i < d->n; i++)
                for (size_t j = i; j > 0 && key_cmp(c, &d->keys[order[j - 1]], &d->keys[order[j]]) > 0; j--) {
                    size_t x = order[j]; order[j] = order[j - 1]; order[j - 1] = x;
                }
        tb_putc(c, b, '{');
        for (size_t i = 0; i < d->n; i++) {
            if (i) tb_put(c, b, isep, strlen(isep));
            if (indent) dump_newline(c, b, indent, level + 1);
            dump_key(c, b, d->keys[order[i]], ascii);
            tb_put(c, b, ksep, strlen(ksep));
            dump_value(c, b, d->vals[order[i]], indent, isep, ksep, sort_keys, ascii, level + 1);
        }
        if (indent) dump_newline(c, b, indent, level);
        tb_putc(c, b, '}');
        return;
    }
    default:
        break;
    }
    tv_throw(c, "Object of type %s is not JSON serializable", tv_type_name(v));
}

void tj_dump(tctx *c, tbuf *b, tv v, const char *indent, const char *item_sep, const char *key_sep,
             int sort_keys, int ensure_ascii) {
    dump_value(c, b, v, indent, item_sep, key_sep, sort_keys, ensure_ascii, 0);
}
