/* template_builtins.c: what a Jinja template can call — jinja2's filters and tests, attribute and item
 * access with the sandbox's rules, the Python str/dict/list methods chat templates use, the globals
 * (range, dict, namespace, raise_exception, strftime_now), arithmetic, slicing and %-formatting. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <utf8proc.h>
#include "text/template_impl.h"

/* ---- names ---- */

enum {
    F_ABS, F_ATTR, F_BATCH, F_CAPITALIZE, F_CENTER, F_COUNT, F_D, F_DEFAULT, F_DICTSORT, F_E, F_ESCAPE, F_FIRST,
    F_FLOAT, F_FORCEESCAPE, F_FORMAT, F_INDENT, F_INT, F_ITEMS, F_JOIN, F_LAST, F_LENGTH, F_LIST, F_LOWER,
    F_MAP, F_MAX, F_MIN, F_REJECT, F_REJECTATTR, F_REPLACE, F_REVERSE, F_ROUND, F_SAFE, F_SELECT,
    F_SELECTATTR, F_SORT, F_STRING, F_SUM, F_TITLE, F_TOJSON, F_TRIM, F_UNIQUE, F_UPPER, F_WORDCOUNT,
    F_SUPPORTED_END,
    /* jinja2 filters outside the subset */
    F_FILESIZEFORMAT = F_SUPPORTED_END, F_GROUPBY, F_PPRINT, F_RANDOM, F_SLICE, F_STRIPTAGS,
    F_TRUNCATE, F_URLENCODE, F_URLIZE, F_WORDWRAP, F_XMLATTR, F_COUNT_ALL
};

static const char *const FILTERS[F_COUNT_ALL] = {
    "abs", "attr", "batch", "capitalize", "center", "count", "d", "default", "dictsort", "e", "escape", "first",
    "float", "forceescape", "format", "indent", "int", "items", "join", "last", "length", "list", "lower",
    "map", "max", "min", "reject", "rejectattr", "replace", "reverse", "round", "safe", "select",
    "selectattr", "sort", "string", "sum", "title", "tojson", "trim", "unique", "upper", "wordcount",
    "filesizeformat", "groupby", "pprint", "random", "slice", "striptags", "truncate",
    "urlencode", "urlize", "wordwrap", "xmlattr"};

enum {
    T_BOOLEAN, T_CALLABLE, T_DEFINED, T_DIVISIBLEBY, T_EQ, T_EQUALTO, T_EQ_OP, T_ESCAPED, T_EVEN, T_FALSE,
    T_FILTER, T_FLOAT, T_GE, T_GE_OP, T_GREATERTHAN, T_GT, T_GT_OP, T_IN, T_INTEGER, T_ITERABLE, T_LE,
    T_LE_OP, T_LESSTHAN, T_LOWER, T_LT, T_LT_OP, T_MAPPING, T_NE, T_NE_OP, T_NONE, T_NUMBER, T_ODD,
    T_SAMEAS, T_SEQUENCE, T_STRING, T_TEST, T_TRUE, T_UNDEFINED, T_UPPER, T_COUNT_ALL
};

static const char *const TESTS[T_COUNT_ALL] = {
    "boolean", "callable", "defined", "divisibleby", "eq", "equalto", "==", "escaped", "even", "false",
    "filter", "float", "ge", ">=", "greaterthan", "gt", ">", "in", "integer", "iterable", "le", "<=",
    "lessthan", "lower", "lt", "<", "mapping", "ne", "!=", "none", "number", "odd", "sameas", "sequence",
    "string", "test", "true", "undefined", "upper"};

static int find_name(const char *const *names, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (strcmp(names[i], name) == 0) return i;
    return -1;
}

int tb_filter_id(const char *name) { return find_name(FILTERS, F_COUNT_ALL, name); }
int tb_test_id(const char *name) { return find_name(TESTS, T_COUNT_ALL, name); }
int tb_filter_supported(int id) { return id >= 0 && id < F_SUPPORTED_END; }

/* ---- argument helpers ---- */

typedef struct {
    int argc;
    const tv *argv;
    const char **kwn;
} targs;

/* The pos-th positional argument (0-based, after the operand) or the keyword `name`. */
static int arg_get(const targs *a, int pos, const char *name, tv *out) {
    int k = 0;
    for (int i = 0; i < a->argc; i++) {
        if (a->kwn && a->kwn[i]) {
            if (name && strcmp(a->kwn[i], name) == 0) { *out = a->argv[i]; return 1; }
        } else if (k++ == pos) {
            *out = a->argv[i];
            return 1;
        }
    }
    return 0;
}

static tv arg_or(const targs *a, int pos, const char *name, tv def) {
    tv v;
    return arg_get(a, pos, name, &v) ? v : def;
}

static int n_positional(const targs *a) {
    int k = 0;
    for (int i = 0; i < a->argc; i++)
        if (!a->kwn || !a->kwn[i]) k++;
    return k;
}

static void check_kwargs(tctx *c, const targs *a, const char *what, const char *const *allowed) {
    for (int i = 0; i < a->argc; i++) {
        if (!a->kwn || !a->kwn[i]) continue;
        int ok = 0;
        for (int k = 0; allowed && allowed[k]; k++)
            if (strcmp(allowed[k], a->kwn[i]) == 0) ok = 1;
        if (!ok) tv_throw(c, "%s() got an unexpected keyword argument '%s'", what, a->kwn[i]);
    }
}

_Noreturn static void throw_undef(tctx *c, tv v) {
    if (v.u.undef_name) tv_throw(c, "'%s' is undefined", v.u.undef_name);
    tv_throw(c, "undefined value used");
}

static tv need_str(tctx *c, tv v, const char *what) {
    if (v.k != TV_STR) tv_throw(c, "%s expects a string, not '%s'", what, tv_type_name(v));
    return v;
}

static int64_t need_int(tctx *c, tv v, const char *what) {
    if (v.k == TV_INT) return v.u.i;
    if (v.k == TV_BOOL) return v.u.b;
    if (v.k == TV_UNDEF) throw_undef(c, v);
    tv_throw(c, "%s expects an integer, not '%s'", what, tv_type_name(v));
}

static tv str_with(tctx *c, const char *s, size_t n, int markup) {
    tv r = tv_strn(c, s, n);
    r.u.s->markup = markup;
    return r;
}

/* soft_str: str() of a value, keeping Markup */
static tv soft_str(tctx *c, tv v) { return tv_to_str(c, v); }

/* ---- string helpers (code point aware) ---- */

typedef uint32_t (*cp_map)(uint32_t);
static uint32_t cp_upper(uint32_t cp) { return (uint32_t)utf8proc_toupper((utf8proc_int32_t)cp); }
static uint32_t cp_lower(uint32_t cp) { return (uint32_t)utf8proc_tolower((utf8proc_int32_t)cp); }
static uint32_t cp_title(uint32_t cp) { return (uint32_t)utf8proc_totitle((utf8proc_int32_t)cp); }

static void put_cp(tctx *c, tbuf *b, uint32_t cp) {
    utf8proc_uint8_t t[4];
    utf8proc_ssize_t n = utf8proc_encode_char((utf8proc_int32_t)cp, t);
    tb_put(c, b, (const char *)t, (size_t)n);
}

static int cp_cased(uint32_t cp) { return cp_upper(cp) != cp || cp_lower(cp) != cp || cp_title(cp) != cp; }

/* Python's upper() expands these (SpecialCasing.txt); utf8proc maps code points one to one. */
static const char *upper_expansion(uint32_t cp) {
    switch (cp) {
    case 0xDF: return "SS";
    case 0x149: return "\u02BCN";
    case 0xFB00: return "FF";
    case 0xFB01: return "FI";
    case 0xFB02: return "FL";
    case 0xFB03: return "FFI";
    case 0xFB04: return "FFL";
    case 0xFB05: case 0xFB06: return "ST";
    default: return NULL;
    }
}

static tv map_str(tctx *c, tv s, cp_map first, cp_map rest) {
    tbuf b = {0};
    int at_first = 1;
    for (size_t i = 0; i < s.u.s->len;) {
        uint32_t cp;
        i += tv_utf8_next(s.u.s->s + i, s.u.s->len - i, &cp);
        cp_map m = at_first ? first : rest;
        const char *x = m == cp_upper ? upper_expansion(cp) : NULL;
        if (x) tb_put(c, &b, x, strlen(x));
        else put_cp(c, &b, m(cp));
        at_first = 0;
    }
    return str_with(c, b.p ? b.p : "", b.n, s.u.s->markup);
}

/* Python str.title(): a cased character after an uncased one starts a word. */
static tv py_title(tctx *c, tv s) {
    tbuf b = {0};
    int prev_cased = 0;
    for (size_t i = 0; i < s.u.s->len;) {
        uint32_t cp;
        i += tv_utf8_next(s.u.s->s + i, s.u.s->len - i, &cp);
        put_cp(c, &b, prev_cased ? cp_lower(cp) : cp_title(cp));
        prev_cased = cp_cased(cp);
    }
    return str_with(c, b.p ? b.p : "", b.n, s.u.s->markup);
}

static int in_chars(uint32_t cp, tv chars) {
    if (chars.k != TV_STR) return tv_py_space(cp);
    for (size_t i = 0; i < chars.u.s->len;) {
        uint32_t x;
        i += tv_utf8_next(chars.u.s->s + i, chars.u.s->len - i, &x);
        if (x == cp) return 1;
    }
    return 0;
}

/* strip: which = 1 left, 2 right, 3 both; chars none = whitespace */
static tv py_strip(tctx *c, tv s, tv chars, int which) {
    const char *p = s.u.s->s;
    size_t st = 0, en = s.u.s->len;
    if (which & 1)
        while (st < en) {
            uint32_t cp;
            size_t k = tv_utf8_next(p + st, en - st, &cp);
            if (!in_chars(cp, chars)) break;
            st += k;
        }
    if (which & 2)
        while (en > st) {
            size_t b = en - 1;
            while (b > st && ((unsigned char)p[b] & 0xC0) == 0x80) b--;
            uint32_t cp;
            tv_utf8_next(p + b, en - b, &cp);
            if (!in_chars(cp, chars)) break;
            en = b;
        }
    return str_with(c, p + st, en - st, s.u.s->markup);
}

static const char *memfind(const char *h, size_t hn, const char *n, size_t nn) {
    if (nn == 0) return h;
    for (size_t i = 0; i + nn <= hn; i++)
        if (memcmp(h + i, n, nn) == 0) return h + i;
    return NULL;
}

static tv py_replace(tctx *c, tv s, tv old, tv new_, int64_t count, int markup) {
    tbuf b = {0};
    const char *p = s.u.s->s;
    size_t n = s.u.s->len, on = old.u.s->len, i = 0;
    int64_t done = 0;
    if (on == 0) { /* insert between every character, count times */
        for (;;) {
            if (count < 0 || done < count) { tb_put(c, &b, new_.u.s->s, new_.u.s->len); done++; }
            if (i >= n) break;
            uint32_t cp;
            size_t k = tv_utf8_next(p + i, n - i, &cp);
            tb_put(c, &b, p + i, k);
            i += k;
        }
        return str_with(c, b.p ? b.p : "", b.n, markup);
    }
    while (i < n) {
        const char *f = (count < 0 || done < count) ? memfind(p + i, n - i, old.u.s->s, on) : NULL;
        if (!f) break;
        tb_put(c, &b, p + i, (size_t)(f - (p + i)));
        tb_put(c, &b, new_.u.s->s, new_.u.s->len);
        i = (size_t)(f - p) + on;
        done++;
    }
    tb_put(c, &b, p + i, n - i);
    return str_with(c, b.p ? b.p : "", b.n, markup);
}

/* str.split(sep=None, maxsplit=-1); from the right when rsplit */
static tv py_split(tctx *c, tv s, tv sep, int64_t maxsplit, int rsplit) {
    tv out = tv_new_list(c, 0);
    const char *p = s.u.s->s;
    size_t n = s.u.s->len;
    int markup = s.u.s->markup;
    if (sep.k == TV_STR) {
        size_t sn = sep.u.s->len;
        if (sn == 0) tv_throw(c, "empty separator");
        if (!rsplit) {
            size_t i = 0;
            int64_t done = 0;
            for (;;) {
                const char *f = (maxsplit < 0 || done < maxsplit) ? memfind(p + i, n - i, sep.u.s->s, sn) : NULL;
                if (!f) break;
                tl_push(c, out.u.l, str_with(c, p + i, (size_t)(f - (p + i)), markup));
                i = (size_t)(f - p) + sn;
                done++;
            }
            tl_push(c, out.u.l, str_with(c, p + i, n - i, markup));
            return out;
        }
        tv rev = tv_new_list(c, 0);
        size_t en = n;
        int64_t done = 0;
        while (maxsplit < 0 || done < maxsplit) {
            size_t found = (size_t)-1;
            for (size_t i = en; i >= sn; i--)
                if (memcmp(p + i - sn, sep.u.s->s, sn) == 0) { found = i - sn; break; }
            if (found == (size_t)-1) break;
            tl_push(c, rev.u.l, str_with(c, p + found + sn, en - found - sn, markup));
            en = found;
            done++;
        }
        tl_push(c, rev.u.l, str_with(c, p, en, markup));
        for (size_t i = rev.u.l->n; i > 0; i--) tl_push(c, out.u.l, rev.u.l->v[i - 1]);
        return out;
    }
    /* whitespace runs; leading/trailing whitespace gives no empty strings */
    size_t i = 0;
    int64_t done = 0;
    if (rsplit && maxsplit >= 0) {
        tv rev = tv_new_list(c, 0);
        size_t en = n;
        for (;;) {
            while (en > 0) {
                size_t b = en - 1;
                while (b > 0 && ((unsigned char)p[b] & 0xC0) == 0x80) b--;
                uint32_t cp;
                tv_utf8_next(p + b, en - b, &cp);
                if (!tv_py_space(cp)) break;
                en = b;
            }
            if (en == 0) break;
            if (done == maxsplit) { tl_push(c, rev.u.l, str_with(c, p, en, markup)); break; }
            size_t st = en;
            while (st > 0) {
                size_t b = st - 1;
                while (b > 0 && ((unsigned char)p[b] & 0xC0) == 0x80) b--;
                uint32_t cp;
                tv_utf8_next(p + b, st - b, &cp);
                if (tv_py_space(cp)) break;
                st = b;
            }
            tl_push(c, rev.u.l, str_with(c, p + st, en - st, markup));
            en = st;
            done++;
        }
        for (size_t k = rev.u.l->n; k > 0; k--) tl_push(c, out.u.l, rev.u.l->v[k - 1]);
        return out;
    }
    for (;;) {
        while (i < n) {
            uint32_t cp;
            size_t k = tv_utf8_next(p + i, n - i, &cp);
            if (!tv_py_space(cp)) break;
            i += k;
        }
        if (i >= n) break;
        if (maxsplit >= 0 && done == maxsplit) {
            size_t en = n;
            while (en > i) {
                size_t b = en - 1;
                while (b > i && ((unsigned char)p[b] & 0xC0) == 0x80) b--;
                uint32_t cp;
                tv_utf8_next(p + b, en - b, &cp);
                if (!tv_py_space(cp)) break;
                en = b;
            }
            tl_push(c, out.u.l, str_with(c, p + i, en - i, markup));
            break;
        }
        size_t st = i;
        while (i < n) {
            uint32_t cp;
            size_t k = tv_utf8_next(p + i, n - i, &cp);
            if (tv_py_space(cp)) break;
            i += k;
        }
        tl_push(c, out.u.l, str_with(c, p + st, i - st, markup));
        done++;
    }
    return out;
}

static int is_line_break(uint32_t cp) {
    return cp == '\n' || cp == '\r' || cp == 0x0B || cp == 0x0C || cp == 0x1C || cp == 0x1D || cp == 0x1E ||
           cp == 0x85 || cp == 0x2028 || cp == 0x2029;
}

static tv py_splitlines(tctx *c, tv s) {
    tv out = tv_new_list(c, 0);
    const char *p = s.u.s->s;
    size_t n = s.u.s->len, i = 0, st = 0;
    while (i < n) {
        uint32_t cp;
        size_t k = tv_utf8_next(p + i, n - i, &cp);
        if (is_line_break(cp)) {
            tl_push(c, out.u.l, str_with(c, p + st, i - st, s.u.s->markup));
            i += k;
            if (cp == '\r' && i < n && p[i] == '\n') i++;
            st = i;
        } else {
            i += k;
        }
    }
    if (st < n) tl_push(c, out.u.l, str_with(c, p + st, n - st, s.u.s->markup));
    return out;
}

static int affix_match(tv s, tv affix, int end) {
    if (affix.k != TV_STR || affix.u.s->len > s.u.s->len) return 0;
    size_t off = end ? s.u.s->len - affix.u.s->len : 0;
    return memcmp(s.u.s->s + off, affix.u.s->s, affix.u.s->len) == 0;
}

static int py_affix(tctx *c, tv s, tv affix, int end) {
    if (affix.k == TV_LIST && (affix.u.l->flags & TL_TUPLE)) {
        for (size_t i = 0; i < affix.u.l->n; i++)
            if (affix_match(s, need_str(c, affix.u.l->v[i], end ? "endswith" : "startswith"), end)) return 1;
        return 0;
    }
    return affix_match(s, need_str(c, affix, end ? "endswith" : "startswith"), end);
}

static void html_escape(tctx *c, tbuf *b, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        switch (s[i]) {
        case '&': tb_put(c, b, "&amp;", 5); break;
        case '<': tb_put(c, b, "&lt;", 4); break;
        case '>': tb_put(c, b, "&gt;", 4); break;
        case '"': tb_put(c, b, "&#34;", 5); break;
        case '\'': tb_put(c, b, "&#39;", 5); break;
        default: tb_putc(c, b, s[i]);
        }
    }
}

static tv escape_value(tctx *c, tv v, int force) {
    if (v.k == TV_STR && v.u.s->markup && !force) return v;
    tv s = tv_to_str(c, v);
    tbuf b = {0};
    html_escape(c, &b, s.u.s->s, s.u.s->len);
    return tv_markup(c, b.p ? b.p : "", b.n);
}

/* ---- numbers ---- */

static int is_num(tv v) { return v.k == TV_INT || v.k == TV_FLOAT || v.k == TV_BOOL; }
static double as_f(tv v) { return v.k == TV_FLOAT ? v.u.f : v.k == TV_INT ? (double)v.u.i : (double)v.u.b; }
static int64_t as_i(tv v) { return v.k == TV_INT ? v.u.i : v.u.b; }

static int parse_py_int(const char *s, size_t n, int base, int64_t *out) {
    size_t i = 0;
    while (i < n && tv_py_space((unsigned char)s[i])) i++;
    while (n > i && tv_py_space((unsigned char)s[n - 1])) n--;
    int neg = 0;
    if (i < n && (s[i] == '+' || s[i] == '-')) neg = s[i++] == '-';
    if ((base == 16 || base == 0) && n - i > 2 && s[i] == '0' && (s[i + 1] | 32) == 'x') { base = 16; i += 2; }
    else if ((base == 8 || base == 0) && n - i > 2 && s[i] == '0' && (s[i + 1] | 32) == 'o') { base = 8; i += 2; }
    else if ((base == 2 || base == 0) && n - i > 2 && s[i] == '0' && (s[i + 1] | 32) == 'b') { base = 2; i += 2; }
    if (base == 0) base = 10;
    if (i >= n) return 0;
    uint64_t v = 0;
    int prev_digit = 0;
    for (; i < n; i++) {
        char ch = s[i];
        if (ch == '_' && prev_digit && i + 1 < n) { prev_digit = 0; continue; }
        int d = (ch >= '0' && ch <= '9') ? ch - '0' : ((ch | 32) >= 'a' && (ch | 32) <= 'z') ? (ch | 32) - 'a' + 10 : 99;
        if (d >= base) return 0;
        if (v > (uint64_t)INT64_MAX / (uint64_t)base) return 0;
        v = v * (uint64_t)base + (uint64_t)d;
        if (v > (uint64_t)INT64_MAX) return 0;
        prev_digit = 1;
    }
    if (!prev_digit) return 0;
    *out = neg ? -(int64_t)v : (int64_t)v;
    return 1;
}

static int parse_py_float(const char *s, size_t n, double *out) {
    char t[128];
    size_t i = 0, o = 0;
    while (i < n && tv_py_space((unsigned char)s[i])) i++;
    while (n > i && tv_py_space((unsigned char)s[n - 1])) n--;
    if (n - i == 0 || n - i >= sizeof t) return 0;
    for (; i < n; i++) {
        if (s[i] == '_') continue;
        if (s[i] == 'x' || s[i] == 'X' || s[i] == 'p' || s[i] == 'P') return 0; /* no hex floats */
        t[o++] = s[i];
    }
    t[o] = 0;
    char *end;
    double v = strtod(t, &end);
    if (*end) return 0;
    *out = v;
    return 1;
}

static tv to_int(tctx *c, tv v, tv def, int base) {
    if (v.k == TV_INT) return v;
    if (v.k == TV_BOOL) return tv_int(v.u.b);
    if (v.k == TV_FLOAT) {
        if (!isfinite(v.u.f) || fabs(v.u.f) >= 9.2e18) tv_throw(c, "cannot convert float %g to integer", v.u.f);
        return tv_int((int64_t)v.u.f);
    }
    if (v.k == TV_STR) {
        int64_t i;
        double f;
        if (parse_py_int(v.u.s->s, v.u.s->len, base, &i)) return tv_int(i);
        if (parse_py_float(v.u.s->s, v.u.s->len, &f) && isfinite(f) && fabs(f) < 9.2e18) return tv_int((int64_t)f);
    }
    return def;
}

static tv to_float(tctx *c, tv v, tv def) {
    if (is_num(v)) return tv_float(as_f(v));
    if (v.k == TV_STR) {
        double f;
        if (parse_py_float(v.u.s->s, v.u.s->len, &f)) return tv_float(f);
    }
    return def;
}

static tv int_result(tctx *c, __int128 r) {
    if (r > INT64_MAX || r < INT64_MIN) tv_throw(c, "integer overflow");
    return tv_int((int64_t)r);
}

static double py_fmod(double a, double b, double *div) {
    double mod = fmod(a, b);
    if (mod != 0) {
        if ((b < 0) != (mod < 0)) mod += b;
    } else {
        mod = copysign(0.0, b);
    }
    if (div) {
        double d = (a - mod) / b, fl;
        if (d != 0) {
            fl = floor(d);
            if (d - fl > 0.5) fl += 1.0;
        } else {
            fl = copysign(0.0, a / b);
        }
        *div = fl;
    }
    return mod;
}

static tv percent_format(tctx *c, tv fmt, tv args);

tv tb_binop(tctx *c, int op, tv a, tv b) {
    if (a.k == TV_UNDEF) throw_undef(c, a);
    if (b.k == TV_UNDEF) throw_undef(c, b);
    if (is_num(a) && is_num(b)) {
        int fl = a.k == TV_FLOAT || b.k == TV_FLOAT;
        double x = as_f(a), y = as_f(b);
        int64_t i = as_i(a), j = as_i(b);
        switch (op) {
        case OP_ADD: return fl ? tv_float(x + y) : int_result(c, (__int128)i + j);
        case OP_SUB: return fl ? tv_float(x - y) : int_result(c, (__int128)i - j);
        case OP_MUL: return fl ? tv_float(x * y) : int_result(c, (__int128)i * j);
        case OP_DIV:
            if (y == 0) tv_throw(c, "division by zero");
            return tv_float(x / y);
        case OP_FLOORDIV: case OP_MOD:
            if (y == 0) tv_throw(c, fl ? "float division by zero" : "integer division or modulo by zero");
            if (fl) {
                double d, m = py_fmod(x, y, &d);
                return tv_float(op == OP_MOD ? m : d);
            } else {
                if (i == INT64_MIN && j == -1) tv_throw(c, "integer overflow");
                int64_t q = i / j, r = i % j;
                if (r != 0 && ((r < 0) != (j < 0))) { q--; r += j; }
                return tv_int(op == OP_MOD ? r : q);
            }
        case OP_POW:
            if (!fl && j >= 0) {
                __int128 r = 1, base = i;
                for (int64_t k = 0; k < j; k++) {
                    r *= base;
                    if (r > INT64_MAX || r < INT64_MIN) tv_throw(c, "integer overflow");
                }
                return tv_int((int64_t)r);
            }
            if (x == 0 && y < 0) tv_throw(c, "zero to a negative power");
            return tv_float(pow(x, y));
        }
    }
    if (op == OP_ADD && a.k == TV_STR && b.k == TV_STR) {
        tbuf buf = {0};
        int markup = a.u.s->markup || b.u.s->markup;
        if (markup && !a.u.s->markup) html_escape(c, &buf, a.u.s->s, a.u.s->len);
        else tb_put(c, &buf, a.u.s->s, a.u.s->len);
        if (markup && !b.u.s->markup) html_escape(c, &buf, b.u.s->s, b.u.s->len);
        else tb_put(c, &buf, b.u.s->s, b.u.s->len);
        return str_with(c, buf.p ? buf.p : "", buf.n, markup);
    }
    if (op == OP_ADD && a.k == TV_LIST && b.k == TV_LIST && !((a.u.l->flags | b.u.l->flags) & TL_GEN) &&
        (a.u.l->flags & TL_TUPLE) == (b.u.l->flags & TL_TUPLE)) {
        tv r = tv_new_list(c, a.u.l->flags & TL_TUPLE);
        for (size_t i = 0; i < a.u.l->n; i++) tl_push(c, r.u.l, a.u.l->v[i]);
        for (size_t i = 0; i < b.u.l->n; i++) tl_push(c, r.u.l, b.u.l->v[i]);
        return r;
    }
    if (op == OP_MUL && ((a.k == TV_STR || a.k == TV_LIST) && (b.k == TV_INT || b.k == TV_BOOL))) {
        int64_t times = as_i(b);
        if (a.k == TV_STR) {
            if (times > 0 && a.u.s->len * (uint64_t)times > c->opt->max_output)
                tv_throw(c, "string repetition exceeds %zu bytes", c->opt->max_output);
            tbuf buf = {0};
            for (int64_t k = 0; k < times; k++) tb_put(c, &buf, a.u.s->s, a.u.s->len);
            return str_with(c, buf.p ? buf.p : "", buf.n, a.u.s->markup);
        }
        if (!(a.u.l->flags & TL_GEN)) {
            if (times > 0 && a.u.l->n * (uint64_t)times > 10000000) tv_throw(c, "list repetition too large");
            tv r = tv_new_list(c, a.u.l->flags & TL_TUPLE);
            for (int64_t k = 0; k < times; k++)
                for (size_t i = 0; i < a.u.l->n; i++) tl_push(c, r.u.l, a.u.l->v[i]);
            return r;
        }
    }
    if (op == OP_MUL && (b.k == TV_STR || b.k == TV_LIST) && (a.k == TV_INT || a.k == TV_BOOL)) return tb_binop(c, op, b, a);
    if (op == OP_MOD && a.k == TV_STR) return percent_format(c, a, b);
    static const char *const names[] = {"+", "-", "*", "/", "//", "%", "**"};
    tv_throw(c, "unsupported operand type(s) for %s: '%s' and '%s'", names[op], tv_type_name(a), tv_type_name(b));
}

/* printf-style formatting: fmt % args */
static tv percent_format(tctx *c, tv fmt, tv args) {
    tbuf b = {0};
    const char *s = fmt.u.s->s;
    size_t n = fmt.u.s->len, argi = 0;
    int is_tuple = args.k == TV_LIST && (args.u.l->flags & TL_TUPLE);
    size_t nargs = is_tuple ? args.u.l->n : 1;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '%') { tb_putc(c, &b, s[i]); continue; }
        if (++i >= n) tv_throw(c, "incomplete format");
        tv val;
        int have_key = 0;
        if (s[i] == '(') {
            size_t st = ++i;
            while (i < n && s[i] != ')') i++;
            if (i >= n || args.k != TV_DICT) tv_throw(c, "format requires a mapping");
            if (!td_get_str(c, args.u.d, s + st, i - st, &val)) tv_throw(c, "KeyError in format");
            have_key = 1;
            i++;
        }
        char flags[8];
        int nf = 0;
        while (i < n && strchr("-+ #0", s[i]) && nf < 7) flags[nf++] = s[i++];
        flags[nf] = 0;
        int width = -1, prec = -1;
        if (i < n && s[i] >= '0' && s[i] <= '9') { width = 0; while (i < n && s[i] >= '0' && s[i] <= '9') width = width * 10 + (s[i++] - '0'); }
        if (i < n && s[i] == '.') { i++; prec = 0; while (i < n && s[i] >= '0' && s[i] <= '9') prec = prec * 10 + (s[i++] - '0'); }
        if (width > 1000 || prec > 1000) tv_throw(c, "format width too large");
        if (i >= n) tv_throw(c, "incomplete format");
        char conv = s[i];
        if (conv == '%') { tb_putc(c, &b, '%'); continue; }
        if (!have_key) {
            if (argi >= nargs) tv_throw(c, "not enough arguments for format string");
            val = is_tuple ? args.u.l->v[argi] : args;
            argi++;
        }
        char spec[32], out[1100];
        if (conv == 's' || conv == 'r' || conv == 'a') {
            tbuf t = {0};
            if (conv == 's') tv_write_str(c, &t, val);
            else tv_write_repr(c, &t, val);
            size_t len = t.n, cps = tv_utf8_count(t.p ? t.p : "", t.n);
            if (prec >= 0) { /* truncate to prec code points */
                size_t k = 0, cnt = 0;
                while (k < len && cnt < (size_t)prec) { uint32_t cp; k += tv_utf8_next(t.p + k, len - k, &cp); cnt++; }
                len = k;
                cps = cnt;
            }
            int left = strchr(flags, '-') != NULL;
            if (!left) for (int k = (int)cps; k < width; k++) tb_putc(c, &b, ' ');
            tb_put(c, &b, t.p ? t.p : "", len);
            if (left) for (int k = (int)cps; k < width; k++) tb_putc(c, &b, ' ');
            continue;
        }
        if (!is_num(val)) tv_throw(c, "%%%c format: a number is required, not %s", conv, tv_type_name(val));
        if (strchr("diuxXoc", conv)) {
            int64_t iv = val.k == TV_FLOAT ? (int64_t)val.u.f : as_i(val);
            char cc = conv == 'i' || conv == 'u' ? 'd' : conv;
            if (cc == 'c') { put_cp(c, &b, (uint32_t)iv); continue; }
            if (prec >= 0) snprintf(spec, sizeof spec, "%%%s%d.%dll%c", flags, width < 0 ? 0 : width, prec, cc);
            else snprintf(spec, sizeof spec, "%%%s%dll%c", flags, width < 0 ? 0 : width, cc);
            snprintf(out, sizeof out, spec, (long long)iv);
        } else if (strchr("eEfFgG", conv)) {
            snprintf(spec, sizeof spec, "%%%s%d.%d%c", flags, width < 0 ? 0 : width, prec < 0 ? 6 : prec, conv);
            snprintf(out, sizeof out, spec, as_f(val));
        } else {
            tv_throw(c, "unsupported format character '%c'", conv);
        }
        tb_put(c, &b, out, strlen(out));
    }
    if (args.k != TV_DICT && argi < nargs) tv_throw(c, "not all arguments converted during string formatting");
    return str_with(c, b.p ? b.p : "", b.n, fmt.u.s->markup);
}

/* ---- slicing ---- */

static void slice_indices(tctx *c, int64_t len, tv start, tv stop, tv step, int64_t *st, int64_t *en, int64_t *sp) {
    int64_t s = step.k == TV_NONE ? 1 : need_int(c, step, "slice step");
    if (s == 0) tv_throw(c, "slice step cannot be zero");
    int64_t lo = s < 0 ? -1 : 0, hi = s < 0 ? len - 1 : len;
    int64_t a, b;
    if (start.k == TV_NONE) a = s < 0 ? hi : lo;
    else {
        a = need_int(c, start, "slice index");
        if (a < 0) { a += len; if (a < lo) a = lo; }
        else if (a > hi) a = hi;
    }
    if (stop.k == TV_NONE) b = s < 0 ? lo : hi;
    else {
        b = need_int(c, stop, "slice index");
        if (b < 0) { b += len; if (b < lo) b = lo; }
        else if (b > hi) b = hi;
    }
    *st = a;
    *en = b;
    *sp = s;
}

tv tb_slice(tctx *c, tv obj, tv start, tv stop, tv step) {
    if (obj.k == TV_UNDEF) throw_undef(c, obj);
    if (obj.k == TV_STR) {
        tv_list *chars = tv_iterate(c, obj);
        int64_t a, b, s;
        slice_indices(c, (int64_t)chars->n, start, stop, step, &a, &b, &s);
        tbuf buf = {0};
        for (int64_t i = a; s > 0 ? i < b : i > b; i += s)
            tb_put(c, &buf, chars->v[i].u.s->s, chars->v[i].u.s->len);
        return str_with(c, buf.p ? buf.p : "", buf.n, obj.u.s->markup);
    }
    if (obj.k == TV_LIST && !(obj.u.l->flags & TL_GEN)) {
        int64_t a, b, s;
        slice_indices(c, (int64_t)obj.u.l->n, start, stop, step, &a, &b, &s);
        tv r = tv_new_list(c, obj.u.l->flags & TL_TUPLE);
        for (int64_t i = a; s > 0 ? i < b : i > b; i += s) tl_push(c, r.u.l, obj.u.l->v[i]);
        return r;
    }
    return tv_undef(NULL);
}

/* ---- methods and attributes ---- */

enum {
    M_UNSUPPORTED, M_UNSAFE,
    M_STRIP, M_LSTRIP, M_RSTRIP, M_SPLIT, M_RSPLIT, M_SPLITLINES, M_STARTSWITH, M_ENDSWITH, M_REPLACE,
    M_UPPER, M_LOWER, M_TITLE, M_CAPITALIZE, M_FIND, M_RFIND, M_COUNT, M_JOIN, M_ISDIGIT, M_ISALPHA,
    M_ISALNUM, M_ISSPACE, M_ISUPPER, M_ISLOWER, M_REMOVEPREFIX, M_REMOVESUFFIX, M_INDEX_S,
    M_GET, M_ITEMS, M_KEYS, M_VALUES, M_COPY,
    M_LINDEX, M_LCOUNT, M_LCOPY,
    M_CYCLE,
    G_RANGE, G_DICT, G_NAMESPACE, G_RAISE, G_STRFTIME
};

typedef struct { tv_kind kind; const char *name; int id; } method_def;

static const method_def METHODS[] = {
    {TV_STR, "strip", M_STRIP}, {TV_STR, "lstrip", M_LSTRIP}, {TV_STR, "rstrip", M_RSTRIP},
    {TV_STR, "split", M_SPLIT}, {TV_STR, "rsplit", M_RSPLIT}, {TV_STR, "splitlines", M_SPLITLINES},
    {TV_STR, "startswith", M_STARTSWITH}, {TV_STR, "endswith", M_ENDSWITH}, {TV_STR, "replace", M_REPLACE},
    {TV_STR, "upper", M_UPPER}, {TV_STR, "lower", M_LOWER}, {TV_STR, "title", M_TITLE},
    {TV_STR, "capitalize", M_CAPITALIZE}, {TV_STR, "find", M_FIND}, {TV_STR, "rfind", M_RFIND},
    {TV_STR, "count", M_COUNT}, {TV_STR, "join", M_JOIN}, {TV_STR, "isdigit", M_ISDIGIT},
    {TV_STR, "isalpha", M_ISALPHA}, {TV_STR, "isalnum", M_ISALNUM}, {TV_STR, "isspace", M_ISSPACE},
    {TV_STR, "isupper", M_ISUPPER}, {TV_STR, "islower", M_ISLOWER}, {TV_STR, "removeprefix", M_REMOVEPREFIX},
    {TV_STR, "removesuffix", M_REMOVESUFFIX}, {TV_STR, "index", M_INDEX_S},
    {TV_STR, "casefold", M_UNSUPPORTED}, {TV_STR, "center", M_UNSUPPORTED}, {TV_STR, "encode", M_UNSUPPORTED},
    {TV_STR, "expandtabs", M_UNSUPPORTED}, {TV_STR, "format", M_UNSUPPORTED}, {TV_STR, "format_map", M_UNSUPPORTED},
    {TV_STR, "isascii", M_UNSUPPORTED}, {TV_STR, "isdecimal", M_UNSUPPORTED}, {TV_STR, "isidentifier", M_UNSUPPORTED},
    {TV_STR, "isnumeric", M_UNSUPPORTED}, {TV_STR, "isprintable", M_UNSUPPORTED}, {TV_STR, "istitle", M_UNSUPPORTED},
    {TV_STR, "ljust", M_UNSUPPORTED}, {TV_STR, "maketrans", M_UNSUPPORTED}, {TV_STR, "partition", M_UNSUPPORTED},
    {TV_STR, "rindex", M_UNSUPPORTED}, {TV_STR, "rjust", M_UNSUPPORTED}, {TV_STR, "rpartition", M_UNSUPPORTED},
    {TV_STR, "swapcase", M_UNSUPPORTED}, {TV_STR, "translate", M_UNSUPPORTED}, {TV_STR, "zfill", M_UNSUPPORTED},
    {TV_DICT, "get", M_GET}, {TV_DICT, "items", M_ITEMS}, {TV_DICT, "keys", M_KEYS}, {TV_DICT, "values", M_VALUES},
    {TV_DICT, "copy", M_COPY}, {TV_DICT, "fromkeys", M_UNSUPPORTED}, {TV_DICT, "clear", M_UNSAFE},
    {TV_DICT, "pop", M_UNSAFE}, {TV_DICT, "popitem", M_UNSAFE}, {TV_DICT, "setdefault", M_UNSAFE},
    {TV_DICT, "update", M_UNSAFE},
    {TV_LIST, "index", M_LINDEX}, {TV_LIST, "count", M_LCOUNT}, {TV_LIST, "copy", M_LCOPY},
    {TV_LIST, "append", M_UNSAFE}, {TV_LIST, "clear", M_UNSAFE}, {TV_LIST, "extend", M_UNSAFE},
    {TV_LIST, "insert", M_UNSAFE}, {TV_LIST, "pop", M_UNSAFE}, {TV_LIST, "remove", M_UNSAFE},
    {TV_LIST, "reverse", M_UNSAFE}, {TV_LIST, "sort", M_UNSAFE},
    {TV_LOOP, "cycle", M_CYCLE},
};

static tv make_func(tctx *c, tv_func_kind kind, int id, const char *name, tv self) {
    tv_func *fn = hp_alloc(c, sizeof *fn);
    memset(fn, 0, sizeof *fn);
    fn->kind = kind;
    fn->id = id;
    fn->name = name;
    fn->self = self;
    tv v = {.k = TV_FUNC};
    v.u.fn = fn;
    return v;
}

/* Python attribute lookup; *found = 0 when the object has no such attribute. */
static tv py_attr(tctx *c, tv obj, const char *name, size_t len, int *found) {
    *found = 0;
    tv_kind k = obj.k == TV_NS ? TV_NS : obj.k;
    if (obj.k == TV_LIST && (obj.u.l->flags & TL_GEN)) return tv_undef(NULL);
    for (size_t i = 0; i < sizeof METHODS / sizeof METHODS[0]; i++) {
        if (METHODS[i].kind != k || strlen(METHODS[i].name) != len || memcmp(METHODS[i].name, name, len)) continue;
        *found = 1;
        if (METHODS[i].id == M_UNSAFE) return tv_undef(METHODS[i].name);
        return make_func(c, TF_METHOD, METHODS[i].id, METHODS[i].name, obj);
    }
    if (obj.k == TV_NS) {
        tv v;
        if (td_get_str(c, obj.u.d, name, len, &v)) { *found = 1; return v; }
    }
    if (obj.k == TV_LOOP) {
        tv_loop *l = obj.u.loop;
        char key[16];
        if (len >= sizeof key) return tv_undef(NULL);
        memcpy(key, name, len);
        key[len] = 0;
        *found = 1;
        if (!strcmp(key, "index")) return tv_int(l->index0 + 1);
        if (!strcmp(key, "index0")) return tv_int(l->index0);
        if (!strcmp(key, "revindex")) return tv_int(l->length - l->index0);
        if (!strcmp(key, "revindex0")) return tv_int(l->length - l->index0 - 1);
        if (!strcmp(key, "first")) return tv_bool(l->index0 == 0);
        if (!strcmp(key, "last")) return tv_bool(l->index0 == l->length - 1);
        if (!strcmp(key, "length")) return tv_int(l->length);
        if (!strcmp(key, "depth")) return tv_int(l->depth);
        if (!strcmp(key, "depth0")) return tv_int(l->depth - 1);
        if (!strcmp(key, "previtem")) return l->index0 > 0 ? l->items[l->index0 - 1] : tv_undef("previtem");
        if (!strcmp(key, "nextitem")) return l->index0 + 1 < l->length ? l->items[l->index0 + 1] : tv_undef("nextitem");
        if (!strcmp(key, "changed")) tv_throw(c, "loop.changed is not supported");
        *found = 0;
    }
    return tv_undef(NULL);
}

tv tb_getattr(tctx *c, tv obj, const char *name, size_t len) {
    if (obj.k == TV_UNDEF) throw_undef(c, obj);
    if (len && name[0] == '_') return tv_undef(name);
    int found;
    tv v = py_attr(c, obj, name, len, &found);
    if (found) return v;
    if (obj.k == TV_DICT && td_get_str(c, obj.u.d, name, len, &v)) return v;
    return tv_undef(name);
}

tv tb_getitem(tctx *c, tv obj, tv key) {
    if (obj.k == TV_UNDEF) throw_undef(c, obj);
    tv v;
    if (obj.k == TV_DICT) {
        if (td_get(c, obj.u.d, key, &v)) return v;
    } else if ((obj.k == TV_LIST && !(obj.u.l->flags & TL_GEN)) || obj.k == TV_STR) {
        if (key.k == TV_INT || key.k == TV_BOOL) {
            int64_t i = as_i(key);
            if (obj.k == TV_LIST) {
                int64_t n = (int64_t)obj.u.l->n;
                if (i < 0) i += n;
                if (i >= 0 && i < n) return obj.u.l->v[i];
            } else {
                tv_list *chars = tv_iterate(c, obj);
                int64_t n = (int64_t)chars->n;
                if (i < 0) i += n;
                if (i >= 0 && i < n) return chars->v[i];
            }
            return tv_undef(NULL);
        }
    }
    if (key.k == TV_STR) {
        if (key.u.s->len && key.u.s->s[0] == '_') return tv_undef(NULL);
        int found;
        v = py_attr(c, obj, key.u.s->s, key.u.s->len, &found);
        if (found) return v;
    }
    return tv_undef(NULL);
}

/* make_attrgetter: "a.b.0" looked up item-first at each step */
static tv get_path(tctx *c, tv obj, tv attr) {
    if (attr.k != TV_STR) return tb_getitem(c, obj, attr);
    const char *s = attr.u.s->s;
    size_t n = attr.u.s->len, st = 0;
    for (size_t i = 0; i <= n; i++) {
        if (i < n && s[i] != '.') continue;
        int digits = i > st;
        for (size_t k = st; k < i; k++) digits &= s[k] >= '0' && s[k] <= '9';
        tv key;
        if (digits) {
            int64_t iv = 0;
            for (size_t k = st; k < i && iv < 1000000000; k++) iv = iv * 10 + (s[k] - '0');
            key = tv_int(iv);
        } else {
            key = tv_strn(c, s + st, i - st);
        }
        obj = tb_getitem(c, obj, key);
        st = i + 1;
    }
    return obj;
}

static int str_all(tv s, int (*pred)(uint32_t)) {
    if (s.u.s->len == 0) return 0;
    for (size_t i = 0; i < s.u.s->len;) {
        uint32_t cp;
        i += tv_utf8_next(s.u.s->s + i, s.u.s->len - i, &cp);
        if (!pred(cp)) return 0;
    }
    return 1;
}
static int cat_is(uint32_t cp, int lo, int hi) {
    int k = utf8proc_category((utf8proc_int32_t)cp);
    return k >= lo && k <= hi;
}
static int p_digit(uint32_t cp) { return utf8proc_category((utf8proc_int32_t)cp) == UTF8PROC_CATEGORY_ND; }
static int p_alpha(uint32_t cp) { return cat_is(cp, UTF8PROC_CATEGORY_LU, UTF8PROC_CATEGORY_LO); }
static int p_alnum(uint32_t cp) { return p_alpha(cp) || cat_is(cp, UTF8PROC_CATEGORY_ND, UTF8PROC_CATEGORY_NO); }
static int p_space(uint32_t cp) { return tv_py_space(cp); }

/* Python islower/isupper: at least one cased character and no cased character of the other case. */
static int py_case_is(tv s, int upper) {
    int cased = 0;
    for (size_t i = 0; i < s.u.s->len;) {
        uint32_t cp;
        i += tv_utf8_next(s.u.s->s + i, s.u.s->len - i, &cp);
        if (upper ? cp_lower(cp) != cp : cp_upper(cp) != cp) cased = 1;
        else if (upper ? cp_upper(cp) != cp : cp_lower(cp) != cp) return 0;
        else if (cp_title(cp) != cp) return 0;
    }
    return cased;
}

static int64_t str_find(tv s, tv sub, int rev) {
    const char *h = s.u.s->s;
    size_t hn = s.u.s->len, nn = sub.u.s->len;
    if (nn > hn) return -1;
    if (!rev) {
        const char *f = memfind(h, hn, sub.u.s->s, nn);
        return f ? (int64_t)tv_utf8_count(h, (size_t)(f - h)) : -1;
    }
    for (size_t i = hn - nn + 1; i > 0; i--)
        if (memcmp(h + i - 1, sub.u.s->s, nn) == 0) return (int64_t)tv_utf8_count(h, i - 1);
    return -1;
}

static tv items_of(tctx *c, tv_dict *d, int which, int gen) {
    tv r = tv_new_list(c, gen ? TL_GEN : 0);
    for (size_t i = 0; i < d->n; i++) {
        if (which == 0) {
            tv pair = tv_new_list(c, TL_TUPLE);
            tl_push(c, pair.u.l, d->keys[i]);
            tl_push(c, pair.u.l, d->vals[i]);
            tl_push(c, r.u.l, pair);
        } else {
            tl_push(c, r.u.l, which == 1 ? d->keys[i] : d->vals[i]);
        }
    }
    return r;
}

static tv call_method(tctx *c, const tv_func *fn, const targs *a) {
    tv self = fn->self;
    tv none = tv_none();
    int np = n_positional(a);
    switch (fn->id) {
    case M_STRIP: case M_LSTRIP: case M_RSTRIP:
        return py_strip(c, self, arg_or(a, 0, NULL, none), fn->id == M_STRIP ? 3 : fn->id == M_LSTRIP ? 1 : 2);
    case M_SPLIT: case M_RSPLIT: {
        tv sep = arg_or(a, 0, "sep", none);
        if (sep.k != TV_NONE) need_str(c, sep, "split");
        return py_split(c, self, sep, need_int(c, arg_or(a, 1, "maxsplit", tv_int(-1)), "split"), fn->id == M_RSPLIT);
    }
    case M_SPLITLINES: return py_splitlines(c, self);
    case M_STARTSWITH: case M_ENDSWITH: {
        tv x;
        if (!arg_get(a, 0, NULL, &x)) tv_throw(c, "%s() takes at least 1 argument", fn->name);
        return tv_bool(py_affix(c, self, x, fn->id == M_ENDSWITH));
    }
    case M_REPLACE: {
        tv o, n;
        if (!arg_get(a, 0, NULL, &o) || !arg_get(a, 1, NULL, &n)) tv_throw(c, "replace() takes at least 2 arguments");
        need_str(c, o, "replace");
        need_str(c, n, "replace");
        if (self.u.s->markup && !n.u.s->markup) n = escape_value(c, n, 0);
        return py_replace(c, self, o, n, need_int(c, arg_or(a, 2, "count", tv_int(-1)), "replace"), self.u.s->markup);
    }
    case M_UPPER: return map_str(c, self, cp_upper, cp_upper);
    case M_LOWER: return map_str(c, self, cp_lower, cp_lower);
    case M_TITLE: return py_title(c, self);
    case M_CAPITALIZE: return map_str(c, self, cp_title, cp_lower);
    case M_FIND: case M_RFIND: case M_INDEX_S: {
        tv x;
        if (!arg_get(a, 0, NULL, &x)) tv_throw(c, "%s() takes at least 1 argument", fn->name);
        if (np > 1) tv_throw(c, "%s() with start/end is not supported", fn->name);
        int64_t r = str_find(self, need_str(c, x, fn->name), fn->id == M_RFIND);
        if (r < 0 && fn->id == M_INDEX_S) tv_throw(c, "substring not found");
        return tv_int(r);
    }
    case M_COUNT: {
        tv x;
        if (!arg_get(a, 0, NULL, &x)) tv_throw(c, "count() takes at least 1 argument");
        need_str(c, x, "count");
        if (x.u.s->len == 0) return tv_int((int64_t)tv_utf8_count(self.u.s->s, self.u.s->len) + 1);
        int64_t k = 0;
        const char *p = self.u.s->s, *e = p + self.u.s->len;
        const char *f;
        while ((f = memfind(p, (size_t)(e - p), x.u.s->s, x.u.s->len))) { k++; p = f + x.u.s->len; }
        return tv_int(k);
    }
    case M_JOIN: {
        tv x;
        if (!arg_get(a, 0, NULL, &x)) tv_throw(c, "join() takes exactly one argument");
        tv_list *l = tv_iterate(c, x);
        tbuf b = {0};
        for (size_t i = 0; i < l->n; i++) {
            if (l->v[i].k != TV_STR) tv_throw(c, "sequence item %zu: expected str instance, %s found", i, tv_type_name(l->v[i]));
            if (i) tb_put(c, &b, self.u.s->s, self.u.s->len);
            tb_put(c, &b, l->v[i].u.s->s, l->v[i].u.s->len);
        }
        return str_with(c, b.p ? b.p : "", b.n, self.u.s->markup);
    }
    case M_ISDIGIT: return tv_bool(str_all(self, p_digit));
    case M_ISALPHA: return tv_bool(str_all(self, p_alpha));
    case M_ISALNUM: return tv_bool(str_all(self, p_alnum));
    case M_ISSPACE: return tv_bool(str_all(self, p_space));
    case M_ISUPPER: return tv_bool(py_case_is(self, 1));
    case M_ISLOWER: return tv_bool(py_case_is(self, 0));
    case M_REMOVEPREFIX: case M_REMOVESUFFIX: {
        tv x;
        if (!arg_get(a, 0, NULL, &x)) tv_throw(c, "%s() takes exactly one argument", fn->name);
        need_str(c, x, fn->name);
        int end = fn->id == M_REMOVESUFFIX;
        if (!affix_match(self, x, end)) return self;
        size_t n = self.u.s->len - x.u.s->len;
        return str_with(c, self.u.s->s + (end ? 0 : x.u.s->len), n, self.u.s->markup);
    }
    case M_GET: {
        tv k, v;
        if (!arg_get(a, 0, NULL, &k)) tv_throw(c, "get expected at least 1 argument");
        if (td_get(c, self.u.d, k, &v)) return v;
        return arg_or(a, 1, NULL, none);
    }
    case M_ITEMS: return items_of(c, self.u.d, 0, 0);
    case M_KEYS: return items_of(c, self.u.d, 1, 0);
    case M_VALUES: return items_of(c, self.u.d, 2, 0);
    case M_COPY: {
        tv d = tv_new_dict(c);
        for (size_t i = 0; i < self.u.d->n; i++) td_set(c, d.u.d, self.u.d->keys[i], self.u.d->vals[i]);
        return d;
    }
    case M_LINDEX: case M_LCOUNT: {
        tv x;
        if (!arg_get(a, 0, NULL, &x)) tv_throw(c, "%s() takes at least 1 argument", fn->name);
        int64_t k = 0;
        for (size_t i = 0; i < self.u.l->n; i++)
            if (tv_equal(c, self.u.l->v[i], x)) {
                if (fn->id == M_LINDEX) return tv_int((int64_t)i);
                k++;
            }
        if (fn->id == M_LINDEX) tv_throw(c, "value is not in list");
        return tv_int(k);
    }
    case M_LCOPY: {
        tv r = tv_new_list(c, self.u.l->flags & TL_TUPLE);
        for (size_t i = 0; i < self.u.l->n; i++) tl_push(c, r.u.l, self.u.l->v[i]);
        return r;
    }
    case M_CYCLE:
        if (a->argc == 0) tv_throw(c, "no items for cycling given");
        return a->argv[self.u.loop->index0 % a->argc];
    default:
        tv_throw(c, "%s.%s() is not supported", tv_type_name(self), fn->name);
    }
}

/* ---- globals ---- */

static const struct { const char *name; int id; } GLOBALS[] = {
    {"range", G_RANGE}, {"dict", G_DICT}, {"namespace", G_NAMESPACE}, {"raise_exception", G_RAISE},
    {"strftime_now", G_STRFTIME}, {"cycler", M_UNSUPPORTED}, {"joiner", M_UNSUPPORTED}, {"lipsum", M_UNSUPPORTED},
};

tv tb_global(tctx *c, const char *name, size_t len, int *found) {
    for (size_t i = 0; i < sizeof GLOBALS / sizeof GLOBALS[0]; i++) {
        if (strlen(GLOBALS[i].name) == len && memcmp(GLOBALS[i].name, name, len) == 0) {
            *found = 1;
            return make_func(c, TF_BUILTIN, GLOBALS[i].id, GLOBALS[i].name, tv_none());
        }
    }
    *found = 0;
    return tv_undef(NULL);
}

tv tb_call_builtin(tctx *c, const tv_func *fn, int argc, const tv *argv, const char **kwn) {
    targs a = {argc, argv, kwn};
    if (fn->kind == TF_METHOD) return call_method(c, fn, &a);
    switch (fn->id) {
    case G_RANGE: {
        check_kwargs(c, &a, "range", NULL);
        int np = n_positional(&a);
        if (np < 1 || np > 3) tv_throw(c, "range expected 1 to 3 arguments, got %d", np);
        int64_t start = 0, stop, step = 1;
        if (np == 1) stop = need_int(c, argv[0], "range");
        else {
            start = need_int(c, argv[0], "range");
            stop = need_int(c, argv[1], "range");
            if (np == 3) step = need_int(c, argv[2], "range");
        }
        if (step == 0) tv_throw(c, "range() arg 3 must not be zero");
        tv r = tv_new_list(c, 0);
        for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
            if (r.u.l->n >= 100000) tv_throw(c, "range too big, maximum size for range is 100000");
            tl_push(c, r.u.l, tv_int(i));
        }
        return r;
    }
    case G_DICT: case G_NAMESPACE: {
        tv d = tv_new_dict(c);
        for (int i = 0; i < argc; i++) {
            if (kwn && kwn[i]) td_set(c, d.u.d, tv_cstr(c, kwn[i]), argv[i]);
            else if (argv[i].k == TV_DICT || argv[i].k == TV_NS)
                for (size_t k = 0; k < argv[i].u.d->n; k++) td_set(c, d.u.d, argv[i].u.d->keys[k], argv[i].u.d->vals[k]);
            else tv_throw(c, "%s() takes keyword arguments or a mapping", fn->name);
        }
        if (fn->id == G_NAMESPACE) d.k = TV_NS;
        return d;
    }
    case G_RAISE: {
        tv msg = argc ? tv_to_str(c, argv[0]) : tv_cstr(c, "");
        tv_throw(c, "%s", msg.u.s->s);
    }
    case G_STRFTIME: {
        if (argc != 1) tv_throw(c, "strftime_now() takes exactly one argument");
        tv f = need_str(c, argv[0], "strftime_now");
        time_t t = (time_t)c->now;
        struct tm tm;
        localtime_r(&t, &tm);
        char buf[512];
        size_t n = f.u.s->len ? strftime(buf, sizeof buf, f.u.s->s, &tm) : 0;
        if (f.u.s->len && n == 0) tv_throw(c, "strftime_now: format too long");
        return tv_strn(c, buf, n);
    }
    default:
        tv_throw(c, "the global '%s' is not supported", fn->name);
    }
}

/* ---- sorting ---- */

typedef struct { tctx *c; int ignore_case; int reverse; } sort_ctx;

static tv sort_key(tctx *c, tv v, int ignore_case) {
    if (ignore_case && v.k == TV_STR) return map_str(c, v, cp_lower, cp_lower);
    return v;
}

static void merge_sort(sort_ctx *s, tv *keys, size_t *idx, size_t *tmp, size_t n) {
    if (n < 2) return;
    size_t h = n / 2;
    merge_sort(s, keys, idx, tmp, h);
    merge_sort(s, keys, idx + h, tmp, n - h);
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n) {
        int cmp = tv_compare(s->c, keys[idx[j]], keys[idx[i]]);
        if (s->reverse) cmp = -cmp;
        tmp[k++] = cmp < 0 ? idx[j++] : idx[i++];
    }
    while (i < h) tmp[k++] = idx[i++];
    while (j < n) tmp[k++] = idx[j++];
    memcpy(idx, tmp, n * sizeof(size_t));
}

/* Stable sort of items by keys (parallel arrays); returns the order. */
static size_t *sorted_order(tctx *c, tv *keys, size_t n, int reverse) {
    size_t *idx = hp_alloc(c, (n + 1) * sizeof(size_t)), *tmp = hp_alloc(c, (n + 1) * sizeof(size_t));
    for (size_t i = 0; i < n; i++) idx[i] = i;
    sort_ctx s = {c, 0, reverse};
    merge_sort(&s, keys, idx, tmp, n);
    return idx;
}

/* ---- filters ---- */

static tv do_select(tctx *c, tv seq, const targs *a, int by_attr, int select) {
    tv_list *l = tv_iterate(c, seq);
    tv out = tv_new_list(c, TL_GEN);
    int first = 0;
    tv attr = tv_none();
    if (by_attr) {
        if (!arg_get(a, 0, NULL, &attr)) tv_throw(c, "missing parameter for attribute name");
        first = 1;
    }
    tv tname;
    int test = -1;
    if (arg_get(a, first, NULL, &tname)) {
        test = tb_test_id(need_str(c, tname, "select").u.s->s);
        if (test < 0) tv_throw(c, "no test named '%s'", tname.u.s->s);
    }
    int extra = a->argc - first - 1;
    const tv *xargs = extra > 0 ? a->argv + first + 1 : NULL;
    for (size_t i = 0; i < l->n; i++) {
        tv item = by_attr ? get_path(c, l->v[i], attr) : l->v[i];
        int ok = test < 0 ? tv_truthy(c, item) : tb_apply_test(c, test, item, extra > 0 ? extra : 0, xargs);
        if (ok == select) tl_push(c, out.u.l, l->v[i]);
    }
    return out;
}

static tv do_indent(tctx *c, tv s, const targs *a) {
    tv w = arg_or(a, 0, "width", tv_int(4));
    int first = tv_truthy(c, arg_or(a, 1, "first", tv_bool(0)));
    int blank = tv_truthy(c, arg_or(a, 2, "blank", tv_bool(0)));
    tbuf ind = {0};
    if (w.k == TV_STR) tb_put(c, &ind, w.u.s->s, w.u.s->len);
    else for (int64_t k = need_int(c, w, "indent"); k > 0 && ind.n < 1000; k--) tb_putc(c, &ind, ' ');
    tbuf src = {0};
    tb_put(c, &src, s.u.s->s, s.u.s->len);
    tb_putc(c, &src, '\n');
    tv lines = py_splitlines(c, tv_strn(c, src.p, src.n));
    tbuf b = {0};
    if (first) tb_put(c, &b, ind.p ? ind.p : "", ind.n);
    for (size_t i = 0; i < lines.u.l->n; i++) {
        tv_str *ln = lines.u.l->v[i].u.s;
        if (i) {
            tb_putc(c, &b, '\n');
            if (blank || ln->len) tb_put(c, &b, ind.p ? ind.p : "", ind.n);
        }
        tb_put(c, &b, ln->s, ln->len);
    }
    return str_with(c, b.p ? b.p : "", b.n, s.u.s->markup);
}

static tv do_round(tctx *c, tv v, const targs *a) {
    int64_t prec = need_int(c, arg_or(a, 0, "precision", tv_int(0)), "round");
    tv m = arg_or(a, 1, "method", tv_cstr(c, "common"));
    const char *method = need_str(c, m, "round").u.s->s;
    if (!is_num(v)) tv_throw(c, "round() needs a number, not '%s'", tv_type_name(v));
    if (strcmp(method, "common") == 0) {
        if (v.k != TV_FLOAT) return tv_int(as_i(v));
        double x = v.u.f;
        if (!isfinite(x) || prec > 300) return v;
        if (prec >= 0) {
            char buf[400];
            snprintf(buf, sizeof buf, "%.*f", (int)prec, x);
            return tv_float(strtod(buf, NULL));
        }
        double p10 = pow(10.0, (double)-prec), y = x / p10, r = nearbyint(y);
        return tv_float(r * p10);
    }
    if (strcmp(method, "ceil") && strcmp(method, "floor")) tv_throw(c, "method must be common, ceil or floor");
    double p10 = pow(10.0, (double)prec), y = as_f(v) * p10;
    return tv_float((strcmp(method, "ceil") == 0 ? ceil(y) : floor(y)) / p10);
}

static tv do_tojson(tctx *c, tv v, const targs *a) {
    static const char *const kw[] = {"ensure_ascii", "indent", "separators", "sort_keys", NULL};
    check_kwargs(c, a, "tojson", kw);
    int ascii = tv_truthy(c, arg_or(a, 0, "ensure_ascii", tv_bool(0)));
    tv ind = arg_or(a, 1, "indent", tv_none());
    tv seps = arg_or(a, 2, "separators", tv_none());
    int sort_keys = tv_truthy(c, arg_or(a, 3, "sort_keys", tv_bool(0)));
    const char *indent = NULL;
    tbuf ib = {0};
    if (ind.k == TV_STR) indent = ind.u.s->s;
    else if (ind.k != TV_NONE) {
        for (int64_t k = need_int(c, ind, "tojson indent"); k > 0 && ib.n < 1000; k--) tb_putc(c, &ib, ' ');
        indent = ib.p ? ib.p : "";
    }
    const char *isep = indent ? "," : ", ", *ksep = ": ";
    if (seps.k != TV_NONE) {
        if (seps.k != TV_LIST || seps.u.l->n != 2) tv_throw(c, "tojson separators must be a pair of strings");
        isep = need_str(c, seps.u.l->v[0], "separators").u.s->s;
        ksep = need_str(c, seps.u.l->v[1], "separators").u.s->s;
    }
    tbuf b = {0};
    tj_dump(c, &b, v, indent, isep, ksep, sort_keys, ascii);
    return tv_strn(c, b.p ? b.p : "", b.n);
}

static tv do_minmax(tctx *c, tv seq, const targs *a, int want_max) {
    int cs = tv_truthy(c, arg_or(a, 0, "case_sensitive", tv_bool(0)));
    tv attr = arg_or(a, 1, "attribute", tv_none());
    tv_list *l = tv_iterate(c, seq);
    if (!l->n) return tv_undef(want_max ? "max" : "min");
    size_t best = 0;
    tv bk = sort_key(c, attr.k == TV_NONE ? l->v[0] : get_path(c, l->v[0], attr), !cs);
    for (size_t i = 1; i < l->n; i++) {
        tv k = sort_key(c, attr.k == TV_NONE ? l->v[i] : get_path(c, l->v[i], attr), !cs);
        int cmp = tv_compare(c, k, bk);
        if (want_max ? cmp > 0 : cmp < 0) { best = i; bk = k; }
    }
    return l->v[best];
}

static tv do_title(tctx *c, tv s) {
    tbuf b = {0};
    int word_start = 1;
    for (size_t i = 0; i < s.u.s->len;) {
        uint32_t cp;
        i += tv_utf8_next(s.u.s->s + i, s.u.s->len - i, &cp);
        int sep = tv_py_space(cp) || cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<';
        if (sep) { put_cp(c, &b, cp); word_start = 1; continue; }
        put_cp(c, &b, word_start ? cp_upper(cp) : cp_lower(cp));
        word_start = 0;
    }
    return str_with(c, b.p ? b.p : "", b.n, s.u.s->markup);
}

static int is_word_cp(uint32_t cp) { return cp == '_' || p_alnum(cp); }

tv tb_apply_filter(tctx *c, int id, tv v, int argc, const tv *argv, const char **kwn) {
    targs a = {argc, argv, kwn};
    tv none = tv_none();
    switch (id) {
    case F_ABS:
        if (v.k == TV_INT) { if (v.u.i == INT64_MIN) tv_throw(c, "integer overflow"); return tv_int(v.u.i < 0 ? -v.u.i : v.u.i); }
        if (v.k == TV_BOOL) return tv_int(v.u.b);
        if (v.k == TV_FLOAT) return tv_float(fabs(v.u.f));
        if (v.k == TV_UNDEF) throw_undef(c, v);
        tv_throw(c, "bad operand type for abs(): '%s'", tv_type_name(v));
    case F_ATTR: {
        tv name = need_str(c, arg_or(&a, 0, "name", none), "attr");
        if (v.k == TV_UNDEF) throw_undef(c, v);
        if (name.u.s->len && name.u.s->s[0] == '_') return tv_undef(NULL);
        int found;
        tv r = py_attr(c, v, name.u.s->s, name.u.s->len, &found);
        return found ? r : tv_undef(NULL);
    }
    case F_BATCH: {
        int64_t per = need_int(c, arg_or(&a, 0, "linecount", none), "batch");
        if (per <= 0) tv_throw(c, "batch size must be positive");
        tv fill = arg_or(&a, 1, "fill_with", none);
        tv_list *l = tv_iterate(c, v);
        tv out = tv_new_list(c, TL_GEN), cur = tv_new_list(c, 0);
        for (size_t i = 0; i < l->n; i++) {
            if ((int64_t)cur.u.l->n == per) {
                tl_push(c, out.u.l, cur);
                cur = tv_new_list(c, 0);
            }
            tl_push(c, cur.u.l, l->v[i]);
        }
        if (cur.u.l->n) {
            while (fill.k != TV_NONE && (int64_t)cur.u.l->n < per) tl_push(c, cur.u.l, fill);
            tl_push(c, out.u.l, cur);
        }
        return out;
    }
    case F_CAPITALIZE: return map_str(c, soft_str(c, v), cp_title, cp_lower);
    case F_CENTER: {
        tv s = soft_str(c, v);
        int64_t width = need_int(c, arg_or(&a, 0, "width", tv_int(80)), "center");
        int64_t len = (int64_t)tv_utf8_count(s.u.s->s, s.u.s->len);
        if (width <= len) return s;
        if (width > 100000) tv_throw(c, "center width too large");
        int64_t marg = width - len, left = marg / 2 + (marg & width & 1);
        tbuf b = {0};
        for (int64_t k = 0; k < left; k++) tb_putc(c, &b, ' ');
        tb_put(c, &b, s.u.s->s, s.u.s->len);
        for (int64_t k = 0; k < marg - left; k++) tb_putc(c, &b, ' ');
        return str_with(c, b.p, b.n, s.u.s->markup);
    }
    case F_COUNT: case F_LENGTH: return tv_int(tv_length(c, v));
    case F_D: case F_DEFAULT: {
        tv def = arg_or(&a, 0, "default_value", tv_cstr(c, ""));
        int boolean = tv_truthy(c, arg_or(&a, 1, "boolean", tv_bool(0)));
        if (v.k == TV_UNDEF || (boolean && !tv_truthy(c, v))) return def;
        return v;
    }
    case F_DICTSORT: {
        if (v.k != TV_DICT) tv_throw(c, "dictsort expects a mapping, not '%s'", tv_type_name(v));
        int cs = tv_truthy(c, arg_or(&a, 0, "case_sensitive", tv_bool(0)));
        const char *by = need_str(c, arg_or(&a, 1, "by", tv_cstr(c, "key")), "dictsort").u.s->s;
        int rev = tv_truthy(c, arg_or(&a, 2, "reverse", tv_bool(0)));
        int pos = strcmp(by, "key") == 0 ? 0 : strcmp(by, "value") == 0 ? 1 : -1;
        if (pos < 0) tv_throw(c, "You can only sort by either \"key\" or \"value\"");
        size_t n = v.u.d->n;
        tv *keys = hp_alloc(c, (n + 1) * sizeof(tv));
        for (size_t i = 0; i < n; i++) keys[i] = sort_key(c, pos ? v.u.d->vals[i] : v.u.d->keys[i], !cs);
        size_t *ord = sorted_order(c, keys, n, rev);
        tv items = items_of(c, v.u.d, 0, 0), r = tv_new_list(c, 0);
        for (size_t i = 0; i < n; i++) tl_push(c, r.u.l, items.u.l->v[ord[i]]);
        return r;
    }
    case F_E: case F_ESCAPE: return escape_value(c, v, 0);
    case F_FORCEESCAPE: return escape_value(c, v, 1);
    case F_FIRST: {
        if (v.k == TV_UNDEF) return tv_undef("first");
        tv_list *l = tv_iterate(c, v);
        return l->n ? l->v[0] : tv_undef("first");
    }
    case F_LAST: {
        if (v.k == TV_LIST && (v.u.l->flags & TL_GEN)) tv_throw(c, "'generator' object is not reversible");
        if (v.k == TV_UNDEF) return tv_undef("last");
        tv_list *l = tv_iterate(c, v);
        return l->n ? l->v[l->n - 1] : tv_undef("last");
    }
    case F_FLOAT: return to_float(c, v, arg_or(&a, 0, "default", tv_float(0.0)));
    case F_INT: {
        tv def = arg_or(&a, 0, "default", tv_int(0));
        return to_int(c, v, def, (int)need_int(c, arg_or(&a, 1, "base", tv_int(10)), "int"));
    }
    case F_FORMAT: {
        tv s = soft_str(c, v);
        tv args = tv_new_list(c, TL_TUPLE), kwargs = tv_new_dict(c);
        for (int i = 0; i < argc; i++) {
            if (kwn && kwn[i]) td_set(c, kwargs.u.d, tv_cstr(c, kwn[i]), argv[i]);
            else tl_push(c, args.u.l, argv[i]);
        }
        if (args.u.l->n && kwargs.u.d->n) tv_throw(c, "can't handle positional and keyword arguments at the same time");
        return percent_format(c, s, kwargs.u.d->n ? kwargs : args);
    }
    case F_INDENT: return do_indent(c, soft_str(c, v), &a);
    case F_ITEMS:
        if (v.k == TV_UNDEF) return tv_new_list(c, TL_GEN);
        if (v.k != TV_DICT) tv_throw(c, "can only get item pairs from a mapping");
        return items_of(c, v.u.d, 0, 1);
    case F_JOIN: {
        tv d = tv_to_str(c, arg_or(&a, 0, "d", tv_cstr(c, "")));
        tv attr = arg_or(&a, 1, "attribute", none);
        tv_list *l = tv_iterate(c, v);
        tbuf b = {0};
        for (size_t i = 0; i < l->n; i++) {
            if (i) tb_put(c, &b, d.u.s->s, d.u.s->len);
            tv_write_str(c, &b, attr.k == TV_NONE ? l->v[i] : get_path(c, l->v[i], attr));
        }
        return tv_strn(c, b.p ? b.p : "", b.n);
    }
    case F_LIST: {
        tv_list *l = tv_iterate(c, v);
        tv r = tv_new_list(c, 0);
        for (size_t i = 0; i < l->n; i++) tl_push(c, r.u.l, l->v[i]);
        return r;
    }
    case F_LOWER: return map_str(c, soft_str(c, v), cp_lower, cp_lower);
    case F_UPPER: return map_str(c, soft_str(c, v), cp_upper, cp_upper);
    case F_MAP: {
        tv_list *l = tv_iterate(c, v);
        tv out = tv_new_list(c, TL_GEN), attr;
        if (arg_get(&a, -1, "attribute", &attr)) {
            tv def;
            int has_def = arg_get(&a, -1, "default", &def);
            for (size_t i = 0; i < l->n; i++) {
                tv r = get_path(c, l->v[i], attr);
                tl_push(c, out.u.l, (r.k == TV_UNDEF && has_def) ? def : r);
            }
            return out;
        }
        tv fname;
        if (!arg_get(&a, 0, NULL, &fname)) tv_throw(c, "map requires a filter argument");
        int fid = tb_filter_id(need_str(c, fname, "map").u.s->s);
        if (!tb_filter_supported(fid)) tv_throw(c, "no filter named '%s'", fname.u.s->s);
        for (size_t i = 0; i < l->n; i++)
            tl_push(c, out.u.l, tb_apply_filter(c, fid, l->v[i], argc - 1, argv + 1, kwn ? kwn + 1 : NULL));
        return out;
    }
    case F_MAX: case F_MIN: return do_minmax(c, v, &a, id == F_MAX);
    case F_REJECT: case F_SELECT: return do_select(c, v, &a, 0, id == F_SELECT);
    case F_REJECTATTR: case F_SELECTATTR: return do_select(c, v, &a, 1, id == F_SELECTATTR);
    case F_REPLACE: {
        tv s = soft_str(c, v);
        tv o = tv_to_str(c, arg_or(&a, 0, "old", tv_cstr(c, ""))), n = tv_to_str(c, arg_or(&a, 1, "new", tv_cstr(c, "")));
        tv cnt = arg_or(&a, 2, "count", none);
        return py_replace(c, s, o, n, cnt.k == TV_NONE ? -1 : need_int(c, cnt, "replace"), 0);
    }
    case F_REVERSE: {
        if (v.k == TV_STR) {
            tv_list *chars = tv_iterate(c, v);
            tbuf b = {0};
            for (size_t i = chars->n; i > 0; i--) tb_put(c, &b, chars->v[i - 1].u.s->s, chars->v[i - 1].u.s->len);
            return str_with(c, b.p ? b.p : "", b.n, v.u.s->markup);
        }
        tv_list *l = tv_iterate(c, v);
        tv r = tv_new_list(c, TL_GEN);
        for (size_t i = l->n; i > 0; i--) tl_push(c, r.u.l, l->v[i - 1]);
        return r;
    }
    case F_ROUND: return do_round(c, v, &a);
    case F_SAFE: {
        tv s = tv_to_str(c, v);
        return tv_markup(c, s.u.s->s, s.u.s->len);
    }
    case F_SORT: {
        int rev = tv_truthy(c, arg_or(&a, 0, "reverse", tv_bool(0)));
        int cs = tv_truthy(c, arg_or(&a, 1, "case_sensitive", tv_bool(0)));
        tv attr = arg_or(&a, 2, "attribute", none);
        tv_list *l = tv_iterate(c, v);
        tv *keys = hp_alloc(c, (l->n + 1) * sizeof(tv));
        for (size_t i = 0; i < l->n; i++) keys[i] = sort_key(c, attr.k == TV_NONE ? l->v[i] : get_path(c, l->v[i], attr), !cs);
        size_t *ord = sorted_order(c, keys, l->n, rev);
        tv r = tv_new_list(c, 0);
        for (size_t i = 0; i < l->n; i++) tl_push(c, r.u.l, l->v[ord[i]]);
        return r;
    }
    case F_STRING: return soft_str(c, v);
    case F_SUM: {
        tv attr = arg_or(&a, 0, "attribute", none);
        tv acc = arg_or(&a, 1, "start", tv_int(0));
        tv_list *l = tv_iterate(c, v);
        for (size_t i = 0; i < l->n; i++) acc = tb_binop(c, OP_ADD, acc, attr.k == TV_NONE ? l->v[i] : get_path(c, l->v[i], attr));
        return acc;
    }
    case F_TITLE: return do_title(c, soft_str(c, v));
    case F_TOJSON: return do_tojson(c, v, &a);
    case F_TRIM: {
        tv s = soft_str(c, v);
        tv chars = arg_or(&a, 0, "chars", none);
        if (chars.k != TV_NONE) need_str(c, chars, "trim");
        return py_strip(c, s, chars, 3);
    }
    case F_UNIQUE: {
        int cs = tv_truthy(c, arg_or(&a, 0, "case_sensitive", tv_bool(0)));
        tv attr = arg_or(&a, 1, "attribute", none);
        tv_list *l = tv_iterate(c, v);
        tv out = tv_new_list(c, TL_GEN), seen = tv_new_dict(c);
        for (size_t i = 0; i < l->n; i++) {
            tv k = sort_key(c, attr.k == TV_NONE ? l->v[i] : get_path(c, l->v[i], attr), !cs), dummy;
            if (k.k == TV_LIST && !(k.u.l->flags & TL_TUPLE)) tv_throw(c, "unhashable type: 'list'");
            if (k.k == TV_DICT) tv_throw(c, "unhashable type: 'dict'");
            if (td_get(c, seen.u.d, k, &dummy)) continue;
            td_set(c, seen.u.d, k, none);
            tl_push(c, out.u.l, l->v[i]);
        }
        return out;
    }
    case F_WORDCOUNT: {
        tv s = soft_str(c, v);
        int64_t n = 0;
        int in_word = 0;
        for (size_t i = 0; i < s.u.s->len;) {
            uint32_t cp;
            i += tv_utf8_next(s.u.s->s + i, s.u.s->len - i, &cp);
            int w = is_word_cp(cp);
            if (w && !in_word) n++;
            in_word = w;
        }
        return tv_int(n);
    }
    default:
        tv_throw(c, "filter '%s' is not supported", id >= 0 && id < F_COUNT_ALL ? FILTERS[id] : "?");
    }
}

/* ---- tests ---- */

int tb_apply_test(tctx *c, int id, tv v, int argc, const tv *argv) {
    tv arg = argc > 0 ? argv[0] : tv_undef(NULL);
    if (argc < 1 && (id == T_DIVISIBLEBY || id == T_EQ || id == T_EQUALTO || id == T_EQ_OP || id == T_NE ||
                     id == T_NE_OP || id == T_LT || id == T_LT_OP || id == T_LESSTHAN || id == T_LE ||
                     id == T_LE_OP || id == T_GT || id == T_GT_OP || id == T_GREATERTHAN || id == T_GE ||
                     id == T_GE_OP || id == T_IN || id == T_SAMEAS))
        tv_throw(c, "test '%s' needs an argument", TESTS[id]);
    switch (id) {
    case T_BOOLEAN: return v.k == TV_BOOL;
    case T_CALLABLE: return v.k == TV_FUNC;
    case T_DEFINED: return v.k != TV_UNDEF;
    case T_UNDEFINED: return v.k == TV_UNDEF;
    case T_DIVISIBLEBY: {
        tv r = tb_binop(c, OP_MOD, v, arg);
        return tv_equal(c, r, tv_int(0));
    }
    case T_EQ: case T_EQUALTO: case T_EQ_OP: return tv_equal(c, v, arg);
    case T_NE: case T_NE_OP: return !tv_equal(c, v, arg);
    case T_LT: case T_LT_OP: case T_LESSTHAN: return tv_compare(c, v, arg) < 0;
    case T_LE: case T_LE_OP: return tv_equal(c, v, arg) || tv_compare(c, v, arg) < 0;
    case T_GT: case T_GT_OP: case T_GREATERTHAN: return tv_compare(c, v, arg) > 0;
    case T_GE: case T_GE_OP: return tv_equal(c, v, arg) || tv_compare(c, v, arg) > 0;
    case T_ESCAPED: return v.k == TV_STR && v.u.s->markup;
    case T_EVEN: case T_ODD: {
        tv r = tb_binop(c, OP_MOD, v, tv_int(2));
        return tv_equal(c, r, tv_int(id == T_ODD ? 1 : 0));
    }
    case T_FALSE: return v.k == TV_BOOL && !v.u.b;
    case T_TRUE: return v.k == TV_BOOL && v.u.b;
    case T_FILTER: return v.k == TV_STR && tb_filter_supported(tb_filter_id(v.u.s->s));
    case T_TEST: return v.k == TV_STR && tb_test_id(v.u.s->s) >= 0;
    case T_FLOAT: return v.k == TV_FLOAT;
    case T_INTEGER: return v.k == TV_INT;
    case T_NUMBER: return is_num(v);
    case T_IN: {
        if (arg.k == TV_STR) {
            if (v.k != TV_STR) tv_throw(c, "'in <string>' requires string as left operand, not %s", tv_type_name(v));
            return memfind(arg.u.s->s, arg.u.s->len, v.u.s->s, v.u.s->len) != NULL;
        }
        if (arg.k == TV_DICT) { tv d; return td_get(c, arg.u.d, v, &d); }
        tv_list *l = tv_iterate(c, arg);
        for (size_t i = 0; i < l->n; i++)
            if (tv_equal(c, l->v[i], v)) return 1;
        return 0;
    }
    case T_ITERABLE: return v.k == TV_UNDEF || v.k == TV_STR || v.k == TV_LIST || v.k == TV_DICT || v.k == TV_LOOP;
    case T_SEQUENCE: return v.k == TV_STR || v.k == TV_DICT || (v.k == TV_LIST && !(v.u.l->flags & TL_GEN));
    case T_MAPPING: return v.k == TV_DICT;
    case T_NONE: return v.k == TV_NONE;
    case T_STRING: return v.k == TV_STR;
    case T_LOWER: { tv s = tv_to_str(c, v); return py_case_is(s, 0); }
    case T_UPPER: { tv s = tv_to_str(c, v); return py_case_is(s, 1); }
    case T_SAMEAS:
        if (v.k != arg.k) return 0;
        switch (v.k) {
        case TV_NONE: case TV_UNDEF: return 1;
        case TV_BOOL: return v.u.b == arg.u.b;
        case TV_INT: return v.u.i == arg.u.i && v.u.i >= -5 && v.u.i <= 256;
        case TV_STR: return v.u.s == arg.u.s;
        case TV_LIST: return v.u.l == arg.u.l;
        case TV_DICT: case TV_NS: return v.u.d == arg.u.d;
        case TV_FUNC: return v.u.fn == arg.u.fn;
        default: return 0;
        }
    default:
        tv_throw(c, "test '%s' is not supported", id >= 0 && id < T_COUNT_ALL ? TESTS[id] : "?");
    }
}
