/* template_value.c: the interpreter's value type with Python semantics (truth, equality, ordering,
 * str() and repr()), its strings, lists and dicts, UTF-8 helpers, and the per-render heap on which
 * everything is allocated and which is freed in one go when a render ends (errors included). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>
#include "text/template_impl.h"

struct hp_block {
    hp_block *prev, *next;
    size_t size;
    max_align_t data[];
};

void *hp_alloc(tctx *c, size_t size) {
    if (size > c->heap.max_bytes || c->heap.bytes > c->heap.max_bytes - size)
        tv_throw(c, "template uses more than %zu bytes of memory", c->heap.max_bytes);
    hp_block *b = malloc(sizeof(hp_block) + size);
    if (!b) tv_throw(c, "out of memory");
    b->size = size;
    b->prev = NULL;
    b->next = c->heap.head;
    if (c->heap.head) c->heap.head->prev = b;
    c->heap.head = b;
    c->heap.bytes += size;
    return b->data;
}

void *hp_realloc(tctx *c, void *p, size_t size) {
    if (!p) return hp_alloc(c, size);
    hp_block *b = (hp_block *)((char *)p - offsetof(hp_block, data));
    if (size > b->size && (size - b->size > c->heap.max_bytes || c->heap.bytes > c->heap.max_bytes - (size - b->size)))
        tv_throw(c, "template uses more than %zu bytes of memory", c->heap.max_bytes);
    hp_block *prev = b->prev, *next = b->next;
    size_t old = b->size;
    hp_block *nb = realloc(b, sizeof(hp_block) + size);
    if (!nb) tv_throw(c, "out of memory");
    if (prev) prev->next = nb; else c->heap.head = nb;
    if (next) next->prev = nb;
    nb->size = size;
    c->heap.bytes = c->heap.bytes - old + size;
    return nb->data;
}

void hp_free_all(theap *h) {
    hp_block *b = h->head;
    while (b) {
        hp_block *n = b->next;
        free(b);
        b = n;
    }
    h->head = NULL;
    h->bytes = 0;
}

_Noreturn void tv_throw(tctx *c, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    cf_fail(c->err, CINFER_E_TEMPLATE, "template line %d: %s", c->line, msg);
    longjmp(c->jmp, 1);
}

/* ---- constructors ---- */

tv tv_undef(const char *name) { tv v = {.k = TV_UNDEF}; v.u.undef_name = name; return v; }
tv tv_none(void) { tv v = {.k = TV_NONE}; return v; }
tv tv_bool(int b) { tv v = {.k = TV_BOOL}; v.u.b = b != 0; return v; }
tv tv_int(int64_t i) { tv v = {.k = TV_INT}; v.u.i = i; return v; }
tv tv_float(double f) { tv v = {.k = TV_FLOAT}; v.u.f = f; return v; }

tv tv_strn(tctx *c, const char *s, size_t n) {
    tv_str *o = hp_alloc(c, sizeof(tv_str) + n + 1);
    o->len = n;
    o->markup = 0;
    if (n) memcpy(o->s, s, n);
    o->s[n] = 0;
    tv v = {.k = TV_STR};
    v.u.s = o;
    return v;
}

tv tv_cstr(tctx *c, const char *s) { return tv_strn(c, s, strlen(s)); }

tv tv_markup(tctx *c, const char *s, size_t n) {
    tv v = tv_strn(c, s, n);
    v.u.s->markup = 1;
    return v;
}

tv tv_new_list(tctx *c, int flags) {
    tv_list *l = hp_alloc(c, sizeof *l);
    memset(l, 0, sizeof *l);
    l->flags = flags;
    tv v = {.k = TV_LIST};
    v.u.l = l;
    return v;
}

static int tv_height(tv v) {
    return v.k == TV_LIST ? v.u.l->height : v.k == TV_DICT ? v.u.d->height : 0;
}

/* Values are immutable once built (namespaces, the one mutable kind, count as height 0 and compare by
 * identity), so a bound checked here holds for every recursive walk over a value. */
static int grow_height(tctx *c, int height, tv item) {
    int h = tv_height(item) + 1;
    if (h > TV_MAX_NEST) tv_throw(c, "value nested too deeply (more than %d levels of lists and dicts)", TV_MAX_NEST);
    return h > height ? h : height;
}

void tl_push(tctx *c, tv_list *l, tv v) {
    l->height = grow_height(c, l->height, v);
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 4;
        l->v = hp_realloc(c, l->v, l->cap * sizeof(tv));
    }
    l->v[l->n++] = v;
}

tv tv_new_dict(tctx *c) {
    tv_dict *d = hp_alloc(c, sizeof *d);
    memset(d, 0, sizeof *d);
    tv v = {.k = TV_DICT};
    v.u.d = d;
    return v;
}

/* ---- dicts: insertion-ordered, keys compared with Python equality ---- */

static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
    return h;
}

static uint64_t tv_hash(tv k) {
    switch (k.k) {
    case TV_STR: return hash_bytes(k.u.s->s, k.u.s->len);
    case TV_BOOL: return (uint64_t)k.u.b * 0x9E3779B97F4A7C15ull;
    case TV_INT: return (uint64_t)k.u.i * 0x9E3779B97F4A7C15ull;
    case TV_FLOAT:
        if (k.u.f == floor(k.u.f) && fabs(k.u.f) < 9.2e18) return (uint64_t)(int64_t)k.u.f * 0x9E3779B97F4A7C15ull;
        return hash_bytes((const char *)&k.u.f, sizeof k.u.f);
    default: return (uint64_t)k.k;
    }
}

static void td_reindex(tctx *c, tv_dict *d) {
    size_t cap = 16;
    while (cap < d->n * 2 + 2) cap *= 2;
    d->index = hp_realloc(c, d->index, cap * sizeof(uint32_t));
    memset(d->index, 0, cap * sizeof(uint32_t));
    d->index_cap = cap;
    for (size_t i = 0; i < d->n; i++) {
        size_t h = tv_hash(d->keys[i]) & (cap - 1);
        while (d->index[h]) h = (h + 1) & (cap - 1);
        d->index[h] = (uint32_t)i + 1;
    }
}

static long td_find(tctx *c, const tv_dict *d, tv key) {
    if (d->index) {
        size_t h = tv_hash(key) & (d->index_cap - 1);
        while (d->index[h]) {
            size_t i = d->index[h] - 1;
            if (tv_equal(c, d->keys[i], key)) return (long)i;
            h = (h + 1) & (d->index_cap - 1);
        }
        return -1;
    }
    for (size_t i = 0; i < d->n; i++)
        if (tv_equal(c, d->keys[i], key)) return (long)i;
    return -1;
}

void td_set(tctx *c, tv_dict *d, tv key, tv val) {
    d->height = grow_height(c, grow_height(c, d->height, key), val);
    long i = td_find(c, d, key);
    if (i >= 0) {
        d->vals[i] = val;
        return;
    }
    if (d->n == d->cap) {
        d->cap = d->cap ? d->cap * 2 : 4;
        d->keys = hp_realloc(c, d->keys, d->cap * sizeof(tv));
        d->vals = hp_realloc(c, d->vals, d->cap * sizeof(tv));
    }
    d->keys[d->n] = key;
    d->vals[d->n] = val;
    d->n++;
    if (d->n > 8 && (!d->index || d->n * 2 + 2 > d->index_cap)) {
        td_reindex(c, d);
    } else if (d->index) {
        size_t h = tv_hash(key) & (d->index_cap - 1);
        while (d->index[h]) h = (h + 1) & (d->index_cap - 1);
        d->index[h] = (uint32_t)d->n;
    }
}

int td_get(tctx *c, const tv_dict *d, tv key, tv *out) {
    long i = td_find(c, d, key);
    if (i < 0) return 0;
    *out = d->vals[i];
    return 1;
}

int td_get_str(tctx *c, const tv_dict *d, const char *key, size_t klen, tv *out) {
    tv_str *tmp = malloc(sizeof(tv_str) + klen + 1);
    if (!tmp) return 0;
    tmp->len = klen;
    tmp->markup = 0;
    memcpy(tmp->s, key, klen);
    tmp->s[klen] = 0;
    tv k = {.k = TV_STR};
    k.u.s = tmp;
    int r = td_get(c, d, k, out);
    free(tmp);
    return r;
}

/* ---- truth, equality, ordering ---- */

int tv_truthy(tctx *c, tv v) {
    switch (v.k) {
    case TV_UNDEF: case TV_NONE: return 0;
    case TV_BOOL: return v.u.b;
    case TV_INT: return v.u.i != 0;
    case TV_FLOAT: return v.u.f != 0.0;
    case TV_STR: return v.u.s->len != 0;
    case TV_LIST: return (v.u.l->flags & TL_GEN) ? 1 : v.u.l->n != 0;
    case TV_DICT: return v.u.d->n != 0;
    default: return 1;
    }
}

static int is_num(tv v) { return v.k == TV_BOOL || v.k == TV_INT || v.k == TV_FLOAT; }
static double num_f(tv v) { return v.k == TV_FLOAT ? v.u.f : v.k == TV_INT ? (double)v.u.i : (double)v.u.b; }
static int64_t num_i(tv v) { return v.k == TV_INT ? v.u.i : (int64_t)v.u.b; }

int tv_equal(tctx *c, tv a, tv b) {
    if (is_num(a) && is_num(b)) {
        if (a.k == TV_FLOAT || b.k == TV_FLOAT) return num_f(a) == num_f(b);
        return num_i(a) == num_i(b);
    }
    if (a.k != b.k) return 0;
    switch (a.k) {
    case TV_UNDEF: case TV_NONE: return 1;
    case TV_STR: return a.u.s->len == b.u.s->len && memcmp(a.u.s->s, b.u.s->s, a.u.s->len) == 0;
    case TV_LIST:
        if ((a.u.l->flags | b.u.l->flags) & TL_GEN) return a.u.l == b.u.l;
        if ((a.u.l->flags & TL_TUPLE) != (b.u.l->flags & TL_TUPLE) || a.u.l->n != b.u.l->n) return 0;
        te_step(c);
        for (size_t i = 0; i < a.u.l->n; i++)
            if (!tv_equal(c, a.u.l->v[i], b.u.l->v[i])) return 0;
        return 1;
    case TV_DICT:
        if (a.u.d->n != b.u.d->n) return 0;
        te_step(c);
        for (size_t i = 0; i < a.u.d->n; i++) {
            tv o;
            if (!td_get(c, b.u.d, a.u.d->keys[i], &o) || !tv_equal(c, a.u.d->vals[i], o)) return 0;
        }
        return 1;
    case TV_NS: return a.u.d == b.u.d;
    case TV_FUNC: return a.u.fn == b.u.fn;
    case TV_LOOP: return a.u.loop == b.u.loop;
    default: return 0;
    }
}

int tv_compare(tctx *c, tv a, tv b) {
    if (is_num(a) && is_num(b)) {
        if (a.k == TV_FLOAT || b.k == TV_FLOAT) {
            double x = num_f(a), y = num_f(b);
            return x < y ? -1 : x > y ? 1 : 0;
        }
        int64_t x = num_i(a), y = num_i(b);
        return x < y ? -1 : x > y ? 1 : 0;
    }
    if (a.k == TV_UNDEF || b.k == TV_UNDEF) {
        const char *n = a.k == TV_UNDEF ? a.u.undef_name : b.u.undef_name;
        tv_throw(c, "'%s' is undefined", n ? n : "value");
    }
    if (a.k == TV_STR && b.k == TV_STR) {
        size_t n = a.u.s->len < b.u.s->len ? a.u.s->len : b.u.s->len;
        int r = memcmp(a.u.s->s, b.u.s->s, n);
        if (r) return r < 0 ? -1 : 1;
        return a.u.s->len < b.u.s->len ? -1 : a.u.s->len > b.u.s->len ? 1 : 0;
    }
    if (a.k == TV_LIST && b.k == TV_LIST && !((a.u.l->flags | b.u.l->flags) & TL_GEN) &&
        (a.u.l->flags & TL_TUPLE) == (b.u.l->flags & TL_TUPLE)) {
        size_t n = a.u.l->n < b.u.l->n ? a.u.l->n : b.u.l->n;
        te_step(c);
        for (size_t i = 0; i < n; i++)
            if (!tv_equal(c, a.u.l->v[i], b.u.l->v[i])) return tv_compare(c, a.u.l->v[i], b.u.l->v[i]);
        return a.u.l->n < b.u.l->n ? -1 : a.u.l->n > b.u.l->n ? 1 : 0;
    }
    tv_throw(c, "'<' not supported between instances of '%s' and '%s'", tv_type_name(a), tv_type_name(b));
}

const char *tv_type_name(tv v) {
    switch (v.k) {
    case TV_UNDEF: return "Undefined";
    case TV_NONE: return "NoneType";
    case TV_BOOL: return "bool";
    case TV_INT: return "int";
    case TV_FLOAT: return "float";
    case TV_STR: return "str";
    case TV_LIST: return (v.u.l->flags & TL_GEN) ? "generator" : (v.u.l->flags & TL_TUPLE) ? "tuple" : "list";
    case TV_DICT: return "dict";
    case TV_NS: return "Namespace";
    case TV_FUNC: return "function";
    case TV_LOOP: return "LoopContext";
    }
    return "object";
}

/* ---- UTF-8 ---- */

size_t tv_utf8_next(const char *s, size_t n, uint32_t *cp) {
    utf8proc_int32_t c;
    utf8proc_ssize_t r = utf8proc_iterate((const utf8proc_uint8_t *)s, n > 4 ? 4 : (utf8proc_ssize_t)n, &c);
    if (r <= 0) {
        *cp = 0xFFFD;
        return 1;
    }
    *cp = (uint32_t)c;
    return (size_t)r;
}

size_t tv_utf8_count(const char *s, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (((uint8_t)s[i] & 0xC0) != 0x80) k++;
    return k;
}

int tv_py_space(uint32_t cp) {
    return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
           cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
           cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

/* ---- text buffers, str() and repr() ---- */

void tb_put(tctx *c, tbuf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n + 1) cap *= 2;
        b->p = hp_realloc(c, b->p, cap);
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

void tb_putc(tctx *c, tbuf *b, char ch) { tb_put(c, b, &ch, 1); }

static void tb_puts(tctx *c, tbuf *b, const char *s) { tb_put(c, b, s, strlen(s)); }

void tv_float_repr(double f, char *buf, size_t cap) {
    if (isnan(f)) { snprintf(buf, cap, "nan"); return; }
    if (isinf(f)) { snprintf(buf, cap, f < 0 ? "-inf" : "inf"); return; }
    if (f == 0) { snprintf(buf, cap, signbit(f) ? "-0.0" : "0.0"); return; }
    char e[40];
    int p;
    for (p = 1; p <= 17; p++) {
        snprintf(e, sizeof e, "%.*e", p - 1, f);
        if (strtod(e, NULL) == f) break;
    }
    /* e = [-]d[.ddd]e[+-]XX: collect the digits and the decimal exponent */
    char digits[24];
    int nd = 0, neg = 0;
    const char *q = e;
    if (*q == '-') { neg = 1; q++; }
    for (; *q && *q != 'e'; q++)
        if (*q >= '0' && *q <= '9') digits[nd++] = *q;
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    digits[nd] = 0;
    int exp10 = atoi(q + 1);
    int decpt = exp10 + 1; /* value = 0.digits * 10^decpt */
    char *o = buf;
    size_t left = cap;
#define OUT(...) do { int w_ = snprintf(o, left, __VA_ARGS__); if (w_ > 0 && (size_t)w_ < left) { o += w_; left -= (size_t)w_; } } while (0)
    if (neg) OUT("-");
    if (decpt > 16 || decpt < -3) {
        OUT("%c", digits[0]);
        if (nd > 1) OUT(".%s", digits + 1);
        OUT("e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
    } else if (decpt <= 0) {
        OUT("0.");
        for (int i = 0; i < -decpt; i++) OUT("0");
        OUT("%s", digits);
    } else {
        for (int i = 0; i < decpt; i++) OUT("%c", i < nd ? digits[i] : '0');
        OUT(".");
        if (nd > decpt) OUT("%s", digits + decpt);
        else OUT("0");
    }
#undef OUT
}

static void write_int(tctx *c, tbuf *b, int64_t i) {
    char t[32];
    snprintf(t, sizeof t, "%lld", (long long)i);
    tb_puts(c, b, t);
}

static int py_printable(uint32_t cp) {
    if (cp == ' ') return 1;
    if (cp < 0x20 || cp == 0x7F) return 0;
    if (cp < 0x7F) return 1;
    switch (utf8proc_category((utf8proc_int32_t)cp)) {
    case UTF8PROC_CATEGORY_CC: case UTF8PROC_CATEGORY_CF: case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO: case UTF8PROC_CATEGORY_CN: case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP: case UTF8PROC_CATEGORY_ZS:
        return 0;
    default:
        return 1;
    }
}

static void write_str_repr(tctx *c, tbuf *b, const char *s, size_t n) {
    int has_sq = memchr(s, '\'', n) != NULL, has_dq = memchr(s, '"', n) != NULL;
    char q = (has_sq && !has_dq) ? '"' : '\'';
    tb_putc(c, b, q);
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t k = tv_utf8_next(s + i, n - i, &cp);
        char t[16];
        if (cp == (uint32_t)q || cp == '\\') { tb_putc(c, b, '\\'); tb_putc(c, b, (char)cp); }
        else if (cp == '\n') tb_puts(c, b, "\\n");
        else if (cp == '\r') tb_puts(c, b, "\\r");
        else if (cp == '\t') tb_puts(c, b, "\\t");
        else if (py_printable(cp)) tb_put(c, b, s + i, k);
        else {
            if (cp < 0x100) snprintf(t, sizeof t, "\\x%02x", cp);
            else if (cp < 0x10000) snprintf(t, sizeof t, "\\u%04x", cp);
            else snprintf(t, sizeof t, "\\U%08x", cp);
            tb_puts(c, b, t);
        }
        i += k;
    }
    tb_putc(c, b, q);
}

static void write_value(tctx *c, tbuf *b, tv v, int repr, int depth) {
    if (depth > TV_MAX_NEST) tv_throw(c, "value nested too deeply to print");
    if (v.k == TV_LIST || v.k == TV_DICT || v.k == TV_NS) te_step(c);
    char t[40];
    switch (v.k) {
    case TV_UNDEF: if (repr) tb_puts(c, b, "Undefined"); return;
    case TV_NONE: tb_puts(c, b, "None"); return;
    case TV_BOOL: tb_puts(c, b, v.u.b ? "True" : "False"); return;
    case TV_INT: write_int(c, b, v.u.i); return;
    case TV_FLOAT: tv_float_repr(v.u.f, t, sizeof t); tb_puts(c, b, t); return;
    case TV_STR:
        if (!repr) tb_put(c, b, v.u.s->s, v.u.s->len);
        else {
            if (v.u.s->markup) tb_puts(c, b, "Markup(");
            write_str_repr(c, b, v.u.s->s, v.u.s->len);
            if (v.u.s->markup) tb_puts(c, b, ")");
        }
        return;
    case TV_LIST: {
        tv_list *l = v.u.l;
        if (l->flags & TL_GEN) { tb_puts(c, b, "<generator object>"); return; }
        int tuple = l->flags & TL_TUPLE;
        tb_putc(c, b, tuple ? '(' : '[');
        for (size_t i = 0; i < l->n; i++) {
            if (i) tb_puts(c, b, ", ");
            write_value(c, b, l->v[i], 1, depth + 1);
        }
        if (tuple && l->n == 1) tb_putc(c, b, ',');
        tb_putc(c, b, tuple ? ')' : ']');
        return;
    }
    case TV_DICT: case TV_NS: {
        tv_dict *d = v.u.d;
        tb_puts(c, b, v.k == TV_NS ? "<Namespace {" : "{");
        for (size_t i = 0; i < d->n; i++) {
            if (i) tb_puts(c, b, ", ");
            write_value(c, b, d->keys[i], 1, depth + 1);
            tb_puts(c, b, ": ");
            write_value(c, b, d->vals[i], 1, depth + 1);
        }
        tb_puts(c, b, v.k == TV_NS ? "}>" : "}");
        return;
    }
    case TV_FUNC:
        tb_puts(c, b, v.u.fn->kind == TF_MACRO ? "<Macro '" : "<built-in function ");
        tb_puts(c, b, v.u.fn->name);
        tb_puts(c, b, v.u.fn->kind == TF_MACRO ? "'>" : ">");
        return;
    case TV_LOOP: tb_puts(c, b, "<LoopContext>"); return;
    }
}

void tv_write_str(tctx *c, tbuf *b, tv v) { write_value(c, b, v, 0, 0); }
void tv_write_repr(tctx *c, tbuf *b, tv v) { write_value(c, b, v, 1, 0); }

tv tv_to_str(tctx *c, tv v) {
    if (v.k == TV_STR) return v;
    tbuf b = {0};
    tv_write_str(c, &b, v);
    return tv_strn(c, b.p ? b.p : "", b.n);
}

/* ---- iteration and length ---- */

tv_list *tv_iterate(tctx *c, tv v) {
    switch (v.k) {
    case TV_UNDEF: return tv_new_list(c, 0).u.l;
    case TV_LIST:
        if (v.u.l->flags & TL_GEN) {
            if (v.u.l->consumed) return tv_new_list(c, 0).u.l;
            v.u.l->consumed = 1;
        }
        return v.u.l;
    case TV_DICT: {
        tv_list *l = tv_new_list(c, 0).u.l;
        for (size_t i = 0; i < v.u.d->n; i++) tl_push(c, l, v.u.d->keys[i]);
        return l;
    }
    case TV_STR: {
        tv_list *l = tv_new_list(c, 0).u.l;
        const char *s = v.u.s->s;
        for (size_t i = 0; i < v.u.s->len;) {
            uint32_t cp;
            size_t k = tv_utf8_next(s + i, v.u.s->len - i, &cp);
            tv ch = tv_strn(c, s + i, k);
            ch.u.s->markup = v.u.s->markup;
            tl_push(c, l, ch);
            i += k;
        }
        return l;
    }
    default:
        tv_throw(c, "'%s' object is not iterable", tv_type_name(v));
    }
}

int64_t tv_length(tctx *c, tv v) {
    switch (v.k) {
    case TV_UNDEF: return 0;
    case TV_STR: return (int64_t)tv_utf8_count(v.u.s->s, v.u.s->len);
    case TV_LIST:
        if (v.u.l->flags & TL_GEN) tv_throw(c, "object of type 'generator' has no len()");
        return (int64_t)v.u.l->n;
    case TV_DICT: return (int64_t)v.u.d->n;
    default: tv_throw(c, "object of type '%s' has no len()", tv_type_name(v));
    }
}
