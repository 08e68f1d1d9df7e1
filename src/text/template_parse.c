/* template_parse.c: Jinja source to AST. The lexer follows jinja2 3.1's rules with trim_blocks and
 * lstrip_blocks (newline normalisation, one trailing newline dropped, '-'/'+' whitespace control, raw
 * blocks, comments); the recursive-descent parser follows jinja2's grammar and precedence. Syntax
 * errors and constructs outside the subset are CINFER_E_TEMPLATE errors naming the line. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "text/template_impl.h"

/* ---- arena: the AST and its strings live as long as the compiled template ---- */

typedef struct tchunk { struct tchunk *next; size_t used, cap; max_align_t data[]; } tchunk;
struct tarena { tchunk *head; };

void tp_arena_free(tarena *a) {
    if (!a) return;
    tchunk *c = a->head;
    while (c) {
        tchunk *n = c->next;
        free(c);
        c = n;
    }
    free(a);
}

typedef enum { K_DATA, K_VAR_BEGIN, K_VAR_END, K_BLOCK_BEGIN, K_BLOCK_END, K_NAME, K_STRING, K_INT, K_FLOAT,
               K_OP, K_EOF } tkind;

typedef struct {
    tkind k;
    int line;
    const char *s; /* text (name, op, data, unescaped string) */
    size_t n;
    int64_t i;
    double f;
} ttok;

typedef struct {
    tarena *arena;
    jmp_buf jmp;
    cinfer_error *err;
    const char *src; /* normalised source */
    size_t len;
    ttok *toks;
    size_t ntok, captok, pos;
    int loop_depth, macro_depth, depth;
} tparser;

_Noreturn static void pfail(tparser *p, int line, const char *fmt, ...) CF_PRINTF(3, 4);
_Noreturn static void pfail(tparser *p, int line, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    cf_fail(p->err, CINFER_E_TEMPLATE, "template line %d: %s", line, msg);
    longjmp(p->jmp, 1);
}

static void *palloc(tparser *p, size_t size) {
    size = (size + 15) & ~(size_t)15;
    tchunk *c = p->arena->head;
    if (!c || c->cap - c->used < size) {
        size_t cap = size > 65536 ? size : 65536;
        tchunk *nc = malloc(sizeof(tchunk) + cap);
        if (!nc) pfail(p, 0, "out of memory");
        nc->next = c;
        nc->used = 0;
        nc->cap = cap;
        p->arena->head = nc;
        c = nc;
    }
    void *r = (char *)c->data + c->used;
    c->used += size;
    memset(r, 0, size);
    return r;
}

static char *pstrdup(tparser *p, const char *s, size_t n) {
    char *r = palloc(p, n + 1);
    memcpy(r, s, n);
    r[n] = 0;
    return r;
}

/* ---- lexer ---- */

static void push_tok(tparser *p, tkind k, int line, const char *s, size_t n) {
    if (p->ntok == p->captok) {
        size_t cap = p->captok ? p->captok * 2 : 256;
        ttok *t = realloc(p->toks, cap * sizeof(ttok));
        if (!t) pfail(p, line, "out of memory");
        p->toks = t;
        p->captok = cap;
    }
    ttok *t = &p->toks[p->ntok++];
    memset(t, 0, sizeof *t);
    t->k = k;
    t->line = line;
    t->s = s;
    t->n = n;
}

/* Length of the Python whitespace code point at s, or 0. */
static size_t space_at(const char *s, size_t n) {
    if (!n) return 0;
    uint32_t cp;
    size_t k = tv_utf8_next(s, n, &cp);
    if (cp == 0xFFFD && k == 1) return 0;
    return tv_py_space(cp) ? k : 0;
}

static size_t skip_space(const char *s, size_t i, size_t n) {
    size_t k;
    while (i < n && (k = space_at(s + i, n - i))) i += k;
    return i;
}

/* Length of text with trailing Python whitespace removed. */
static size_t rstrip_len(const char *s, size_t n) {
    while (n > 0) {
        size_t st = n - 1;
        while (st > 0 && ((unsigned char)s[st] & 0xC0) == 0x80) st--;
        if (space_at(s + st, n - st) != n - st) break;
        n = st;
    }
    return n;
}

static int count_lines(const char *s, size_t from, size_t to) {
    int k = 0;
    for (size_t i = from; i < to; i++) k += s[i] == '\n';
    return k;
}

static int starts(const char *s, size_t i, size_t n, const char *w) {
    size_t l = strlen(w);
    return n - i >= l && memcmp(s + i, w, l) == 0;
}

/* Matches the end of a block/comment tag at i: "+%}", "-%}\s*" or "%}\n?" (trim_blocks). */
static size_t match_tag_end(const char *s, size_t i, size_t n, char close) {
    char plus[4] = {'+', close, '}', 0}, minus[4] = {'-', close, '}', 0}, plain[3] = {close, '}', 0};
    if (starts(s, i, n, plus)) return 3;
    if (starts(s, i, n, minus)) return skip_space(s, i + 3, n) - i;
    if (starts(s, i, n, plain)) return (i + 2 < n && s[i + 2] == '\n') ? 3 : 2;
    return 0;
}

/* Applies '-' / lstrip_blocks to the data before a tag; returns the kept length. */
static size_t strip_before(const char *text, size_t len, char sign, int is_var, int line_starting) {
    if (sign == '-') return rstrip_len(text, len);
    if (sign == '+' || is_var) return len;
    size_t l_pos = len;
    while (l_pos > 0 && text[l_pos - 1] != '\n') l_pos--;
    if ((l_pos > 0 || line_starting) && l_pos < len && skip_space(text, l_pos, len) == len) return l_pos;
    return len;
}

static int is_digit(char ch) { return ch >= '0' && ch <= '9'; }
static int is_name_start(char ch) { return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_'; }

/* (\d+_)*\d+ */
static size_t match_digits(const char *s, size_t i, size_t n) {
    size_t st = i;
    if (i >= n || !is_digit(s[i])) return 0;
    while (i < n && is_digit(s[i])) {
        while (i < n && is_digit(s[i])) i++;
        if (i + 1 < n && s[i] == '_' && is_digit(s[i + 1])) i++;
    }
    return i - st;
}

static size_t match_float(const char *s, size_t i, size_t n) {
    if (i > 0 && s[i - 1] == '.') return 0;
    size_t d = match_digits(s, i, n);
    if (!d) return 0;
    size_t j = i + d, frac = 0;
    if (j < n && s[j] == '.') frac = match_digits(s, j + 1, n);
    size_t k = frac ? j + 1 + frac : j;
    if (k < n && (s[k] == 'e' || s[k] == 'E')) {
        size_t e = k + 1;
        if (e < n && (s[e] == '+' || s[e] == '-')) e++;
        size_t ed = match_digits(s, e, n);
        if (ed) return e + ed - i;
    }
    return frac ? k - i : 0;
}

static void lex_string(tparser *p, size_t *pi, int line) {
    const char *s = p->src;
    size_t i = *pi, n = p->len;
    char q = s[i];
    size_t j = i + 1;
    while (j < n && s[j] != q) j += (s[j] == '\\' && j + 1 < n) ? 2 : 1;
    if (j >= n) pfail(p, line, "unexpected char %c%c%c", '\'', q, '\'');
    /* Python's unicode-escape decoding of the literal's body */
    char *out = palloc(p, j - i);
    size_t o = 0;
    for (size_t k = i + 1; k < j; k++) {
        if (s[k] != '\\') { out[o++] = s[k]; continue; }
        char e = s[++k];
        uint32_t cp = 0;
        int hex = 0;
        switch (e) {
        case '\n': break;
        case '\\': out[o++] = '\\'; break;
        case '\'': out[o++] = '\''; break;
        case '"': out[o++] = '"'; break;
        case 'a': out[o++] = '\a'; break;
        case 'b': out[o++] = '\b'; break;
        case 'f': out[o++] = '\f'; break;
        case 'n': out[o++] = '\n'; break;
        case 'r': out[o++] = '\r'; break;
        case 't': out[o++] = '\t'; break;
        case 'v': out[o++] = '\v'; break;
        case 'x': hex = 2; break;
        case 'u': hex = 4; break;
        case 'U': hex = 8; break;
        case 'N': pfail(p, line, "\\N{...} escapes are not supported");
        default:
            if (e >= '0' && e <= '7') {
                int d = 0;
                while (d < 3 && k < j && s[k] >= '0' && s[k] <= '7') cp = cp * 8 + (uint32_t)(s[k++] - '0'), d++;
                k--;
                hex = -1;
            } else {
                out[o++] = '\\';
                out[o++] = e;
            }
        }
        if (hex > 0) {
            for (int d = 0; d < hex; d++) {
                char h = (k + 1 < j) ? s[k + 1] : 0;
                int v = is_digit(h) ? h - '0' : (h >= 'a' && h <= 'f') ? h - 'a' + 10 : (h >= 'A' && h <= 'F') ? h - 'A' + 10 : -1;
                if (v < 0) pfail(p, line, "truncated \\%c escape in a string literal", e);
                cp = cp * 16 + (uint32_t)v;
                k++;
            }
            if (cp > 0x10FFFF) pfail(p, line, "illegal Unicode character in a string literal");
        }
        if (hex) {
            if (cp >= 0xD800 && cp < 0xE000) cp = 0xFFFD;
            if (cp < 0x80) out[o++] = (char)cp;
            else if (cp < 0x800) { out[o++] = (char)(0xC0 | (cp >> 6)); out[o++] = (char)(0x80 | (cp & 0x3F)); }
            else if (cp < 0x10000) {
                out[o++] = (char)(0xE0 | (cp >> 12)); out[o++] = (char)(0x80 | ((cp >> 6) & 0x3F));
                out[o++] = (char)(0x80 | (cp & 0x3F));
            } else {
                out[o++] = (char)(0xF0 | (cp >> 18)); out[o++] = (char)(0x80 | ((cp >> 12) & 0x3F));
                out[o++] = (char)(0x80 | ((cp >> 6) & 0x3F)); out[o++] = (char)(0x80 | (cp & 0x3F));
            }
        }
    }
    out[o] = 0;
    push_tok(p, K_STRING, line, out, o);
    *pi = j + 1;
}

static const char *const OPS2[] = {"//", "**", "==", "!=", ">=", "<=", NULL};
static const char OPS1[] = "+-/*%~[](){}><=.:|,;";

/* Lexes the inside of a {% %} or {{ }} tag starting at *pi, up to and including its end. */
static void lex_tag(tparser *p, size_t *pi, int *line, int is_var, int *line_starting) {
    const char *s = p->src;
    size_t i = *pi, n = p->len;
    char stack[256];
    int depth = 0;
    for (;;) {
        if (i >= n) pfail(p, *line, "unexpected end of template inside a tag");
        if (depth == 0) {
            size_t e = 0;
            if (is_var) {
                if (starts(s, i, n, "-}}")) e = skip_space(s, i + 3, n) - i;
                else if (starts(s, i, n, "}}")) e = 2;
            } else {
                e = match_tag_end(s, i, n, '%');
            }
            if (e) {
                push_tok(p, is_var ? K_VAR_END : K_BLOCK_END, *line, NULL, 0);
                *line += count_lines(s, i, i + e);
                *line_starting = s[i + e - 1] == '\n';
                *pi = i + e;
                return;
            }
        }
        size_t k = skip_space(s, i, n);
        if (k > i) {
            *line += count_lines(s, i, k);
            i = k;
            continue;
        }
        char ch = s[i];
        size_t m;
        if ((m = match_float(s, i, n))) {
            char t[96];
            size_t o = 0;
            for (size_t q = i; q < i + m && o < sizeof t - 1; q++)
                if (s[q] != '_') t[o++] = s[q];
            t[o] = 0;
            push_tok(p, K_FLOAT, *line, s + i, m);
            p->toks[p->ntok - 1].f = strtod(t, NULL);
            i += m;
            continue;
        }
        if (is_digit(ch)) {
            int base = 10;
            size_t q = i;
            if (ch == '0' && i + 1 < n && strchr("bBoOxX", s[i + 1]) && s[i + 1]) {
                base = (s[i + 1] | 32) == 'b' ? 2 : (s[i + 1] | 32) == 'o' ? 8 : 16;
                q = i + 2;
            } else if (ch == '0') {
                q = i + 1;
                while (q + 1 < n && s[q] == '_' && s[q + 1] == '0') q += 2;
                while (q < n && s[q] == '0') q++;
                push_tok(p, K_INT, *line, s + i, q - i);
                i = q;
                continue;
            }
            uint64_t v = 0;
            size_t st = q;
            for (;;) {
                if (q + 1 < n && s[q] == '_' && (q > st)) q++;
                char d = q < n ? s[q] : 0;
                int dv = is_digit(d) ? d - '0' : ((d | 32) >= 'a' && (d | 32) <= 'f') ? (d | 32) - 'a' + 10 : 99;
                if (dv >= base) break;
                if (v > (UINT64_MAX - (uint64_t)dv) / (uint64_t)base || v * (uint64_t)base + (uint64_t)dv > (uint64_t)INT64_MAX)
                    pfail(p, *line, "integer literal too large");
                v = v * (uint64_t)base + (uint64_t)dv;
                q++;
            }
            if (q == st) pfail(p, *line, "invalid integer literal");
            push_tok(p, K_INT, *line, s + i, q - i);
            p->toks[p->ntok - 1].i = (int64_t)v;
            i = q;
            continue;
        }
        if (is_name_start(ch)) {
            size_t q = i + 1;
            while (q < n && (is_name_start(s[q]) || is_digit(s[q]))) q++;
            push_tok(p, K_NAME, *line, s + i, q - i);
            i = q;
            continue;
        }
        if (ch == '\'' || ch == '"') {
            lex_string(p, &i, *line);
            continue;
        }
        const char *op = NULL;
        size_t opn = 0;
        for (int o = 0; OPS2[o]; o++)
            if (starts(s, i, n, OPS2[o])) { op = OPS2[o]; opn = 2; break; }
        if (!op && strchr(OPS1, ch) && ch) { op = s + i; opn = 1; }
        if (!op) pfail(p, *line, "unexpected char '%c' at %zu", ch, i);
        if (opn == 1 && (ch == '{' || ch == '(' || ch == '[')) {
            if (depth == (int)sizeof stack) pfail(p, *line, "brackets nested too deeply");
            stack[depth++] = ch == '{' ? '}' : ch == '(' ? ')' : ']';
        } else if (opn == 1 && (ch == '}' || ch == ')' || ch == ']')) {
            if (!depth) pfail(p, *line, "unexpected '%c'", ch);
            if (stack[--depth] != ch) pfail(p, *line, "unexpected '%c', expected '%c'", ch, stack[depth]);
        }
        push_tok(p, K_OP, *line, op, opn);
        i += opn;
    }
}

/* Matches "{%[-+]?\s*raw\s*(-%}\s*|%})" at i; returns its length or 0. */
static size_t match_raw_begin(const char *s, size_t i, size_t n) {
    size_t j = i + 2;
    if (j < n && (s[j] == '-' || s[j] == '+')) j++;
    j = skip_space(s, j, n);
    if (!starts(s, j, n, "raw")) return 0;
    j = skip_space(s, j + 3, n);
    if (starts(s, j, n, "-%}")) return skip_space(s, j + 3, n) - i;
    if (starts(s, j, n, "%}")) return j + 2 - i;
    return 0;
}

/* Finds "{%[-+]?\s*endraw\s*(+%}|-%}\s*|%}\n?)" from i: *at = its start, returns its length, 0 if none. */
static size_t find_raw_end(const char *s, size_t i, size_t n, size_t *at, char *sign) {
    for (size_t q = i; q + 1 < n; q++) {
        if (s[q] != '{' || s[q + 1] != '%') continue;
        size_t j = q + 2;
        *sign = 0;
        if (j < n && (s[j] == '-' || s[j] == '+')) *sign = s[j++];
        j = skip_space(s, j, n);
        if (!starts(s, j, n, "endraw")) continue;
        j = skip_space(s, j + 6, n);
        size_t e = match_tag_end(s, j, n, '%');
        if (!e) continue;
        *at = q;
        return j + e - q;
    }
    return 0;
}

static void lex(tparser *p) {
    const char *s = p->src;
    size_t n = p->len, i = 0;
    int line = 1, line_starting = 1;
    while (i < n) {
        size_t t = i;
        while (t + 1 < n && !(s[t] == '{' && (s[t + 1] == '{' || s[t + 1] == '%' || s[t + 1] == '#'))) t++;
        if (t + 1 >= n) {
            push_tok(p, K_DATA, line, s + i, n - i);
            break;
        }
        size_t raw = s[t + 1] == '%' ? match_raw_begin(s, t, n) : 0;
        char kind = s[t + 1];
        char sign = (t + 2 < n && (s[t + 2] == '-' || s[t + 2] == '+')) ? s[t + 2] : 0;
        size_t keep = strip_before(s + i, t - i, sign, kind == '{' && !raw, line_starting);
        if (keep) push_tok(p, K_DATA, line, s + i, keep);
        line += count_lines(s, i, t);
        if (raw) {
            line_starting = s[t + raw - 1] == '\n';
            size_t body = t + raw, at;
            char esign;
            size_t e = find_raw_end(s, body, n, &at, &esign);
            if (!e) pfail(p, line, "missing end of raw directive");
            size_t k = strip_before(s + body, at - body, esign, 0, line_starting);
            if (k) push_tok(p, K_DATA, line + count_lines(s, t, body), s + body, k);
            line += count_lines(s, t, at + e);
            line_starting = s[at + e - 1] == '\n';
            i = at + e;
        } else if (kind == '#') {
            size_t q = t + 2 + (sign ? 1 : 0), e = 0;
            for (; q < n; q++)
                if ((e = match_tag_end(s, q, n, '#'))) break;
            if (!e) pfail(p, line, "missing end of comment tag");
            line += count_lines(s, t, q + e);
            line_starting = s[q + e - 1] == '\n';
            i = q + e;
        } else {
            push_tok(p, kind == '{' ? K_VAR_BEGIN : K_BLOCK_BEGIN, line, NULL, 0);
            i = t + 2 + (sign ? 1 : 0);
            lex_tag(p, &i, &line, kind == '{', &line_starting);
        }
    }
    push_tok(p, K_EOF, line, NULL, 0);
}

/* ---- parser ---- */

static ttok *cur(tparser *p) { return &p->toks[p->pos]; }
static ttok *peek(tparser *p, int k) {
    size_t i = p->pos + (size_t)k;
    return &p->toks[i < p->ntok ? i : p->ntok - 1];
}
static void advance(tparser *p) { if (p->pos + 1 < p->ntok) p->pos++; }

static int tok_is(const ttok *t, tkind k, const char *s) {
    return t->k == k && (!s || (t->n == strlen(s) && memcmp(t->s, s, t->n) == 0));
}
static int is_op(tparser *p, const char *s) { return tok_is(cur(p), K_OP, s); }
static int is_name(tparser *p, const char *s) { return tok_is(cur(p), K_NAME, s); }

static const char *describe(const ttok *t, char *buf, size_t cap) {
    switch (t->k) {
    case K_DATA: return "template data";
    case K_VAR_BEGIN: return "'{{'";
    case K_VAR_END: return "end of print statement";
    case K_BLOCK_BEGIN: return "'{%'";
    case K_BLOCK_END: return "end of statement block";
    case K_EOF: return "end of template";
    case K_STRING: return "string";
    case K_INT: case K_FLOAT: return "number";
    default: snprintf(buf, cap, "'%.*s'", (int)(t->n > 40 ? 40 : t->n), t->s); return buf;
    }
}

_Noreturn static void unexpected(tparser *p, const char *wanted) {
    char b[64];
    pfail(p, cur(p)->line, "unexpected %s, expected %s", describe(cur(p), b, sizeof b), wanted);
}

static void expect_op(tparser *p, const char *op) {
    if (!is_op(p, op)) {
        char w[16];
        snprintf(w, sizeof w, "'%s'", op);
        unexpected(p, w);
    }
    advance(p);
}

static void expect_kind(tparser *p, tkind k, const char *what) {
    if (cur(p)->k != k) unexpected(p, what);
    advance(p);
}

static tnode *mk(tparser *p, tnode_kind k, int line) {
    tnode *n = palloc(p, sizeof *n);
    n->kind = k;
    n->line = line;
    return n;
}

typedef struct { tnode **v; const char **names; int n, cap; } nvec;

static void nv_push(tparser *p, nvec *v, tnode *x, const char *name) {
    if (v->n == v->cap) {
        int cap = v->cap ? v->cap * 2 : 4;
        tnode **nv = palloc(p, (size_t)cap * sizeof(tnode *));
        const char **nn = palloc(p, (size_t)cap * sizeof(char *));
        if (v->n) {
            memcpy(nv, v->v, (size_t)v->n * sizeof(tnode *));
            memcpy(nn, v->names, (size_t)v->n * sizeof(char *));
        }
        v->v = nv;
        v->names = nn;
        v->cap = cap;
    }
    v->v[v->n] = x;
    v->names[v->n] = name;
    v->n++;
}

static tnode *parse_expression(tparser *p, int with_condexpr);
static tnode *parse_tuple(tparser *p, int simplified, int with_condexpr, const char *extra_end, int explicit_parens);
static tnode *parse_unary(tparser *p, int with_filter);
static tnode *parse_primary(tparser *p);
static tnode *parse_postfix(tparser *p, tnode *node);

static void enter(tparser *p) {
    if (++p->depth > 200) pfail(p, cur(p)->line, "expression nested too deeply");
}

static const char *name_dup(tparser *p, const ttok *t) { return pstrdup(p, t->s, t->n); }

static void parse_call_args(tparser *p, tnode *call) {
    int line = cur(p)->line;
    expect_op(p, "(");
    nvec args = {0};
    int require_comma = 0, have_kw = 0;
    while (!is_op(p, ")")) {
        if (require_comma) {
            expect_op(p, ",");
            if (is_op(p, ")")) break;
        }
        if (is_op(p, "*") || is_op(p, "**"))
            pfail(p, line, "*args and **kwargs in calls are not supported");
        if (cur(p)->k == K_NAME && tok_is(peek(p, 1), K_OP, "=")) {
            const char *key = name_dup(p, cur(p));
            advance(p);
            advance(p);
            nv_push(p, &args, parse_expression(p, 1), key);
            have_kw = 1;
        } else {
            if (have_kw) pfail(p, line, "invalid syntax for function call expression");
            nv_push(p, &args, parse_expression(p, 1), NULL);
        }
        require_comma = 1;
    }
    expect_op(p, ")");
    call->items = args.v;
    call->names = args.names;
    call->n = args.n;
}

/* name ('.' name)* for filters and tests */
static const char *dotted_name(tparser *p) {
    if (cur(p)->k != K_NAME) unexpected(p, "a name");
    const char *s = cur(p)->s;
    size_t n = cur(p)->n;
    advance(p);
    while (is_op(p, ".") && peek(p, 1)->k == K_NAME) {
        n = (size_t)(peek(p, 1)->s + peek(p, 1)->n - s);
        advance(p);
        advance(p);
    }
    return pstrdup(p, s, n);
}

static tnode *parse_filter(tparser *p, tnode *node, int start_inline) {
    while (is_op(p, "|") || start_inline) {
        if (!start_inline) advance(p);
        start_inline = 0;
        int line = cur(p)->line;
        const char *name = dotted_name(p);
        int id = tb_filter_id(name);
        if (id < 0) pfail(p, line, "no filter named '%s'", name);
        if (!tb_filter_supported(id)) pfail(p, line, "filter '%s' is not supported", name);
        tnode *f = mk(p, N_FILTER, line);
        f->a = node;
        f->s = name;
        f->op = id;
        if (is_op(p, "(")) parse_call_args(p, f);
        node = f;
    }
    return node;
}

static tnode *parse_test(tparser *p, tnode *node) {
    int line = cur(p)->line;
    advance(p); /* is */
    int negated = 0;
    if (is_name(p, "not")) {
        negated = 1;
        advance(p);
    }
    const char *name = dotted_name(p);
    int id = tb_test_id(name);
    if (id < 0) pfail(p, line, "no test named '%s'", name);
    tnode *t = mk(p, N_TEST, line);
    t->a = node;
    t->s = name;
    t->op = id;
    ttok *c = cur(p);
    if (is_op(p, "(")) {
        parse_call_args(p, t);
    } else if ((c->k == K_NAME || c->k == K_STRING || c->k == K_INT || c->k == K_FLOAT || is_op(p, "(") ||
                is_op(p, "[") || is_op(p, "{")) &&
               !is_name(p, "else") && !is_name(p, "or") && !is_name(p, "and")) {
        if (is_name(p, "is")) pfail(p, line, "you cannot chain multiple tests with is");
        tnode *arg = parse_postfix(p, parse_primary(p));
        t->items = palloc(p, sizeof(tnode *));
        t->names = palloc(p, sizeof(char *));
        t->items[0] = arg;
        t->n = 1;
    }
    if (negated) {
        tnode *n = mk(p, N_NOT, line);
        n->a = t;
        return n;
    }
    return t;
}

static tnode *parse_subscribed(tparser *p) {
    int line = cur(p)->line;
    tnode *parts[3] = {NULL, NULL, NULL};
    if (is_op(p, ":")) {
        advance(p);
    } else {
        tnode *x = parse_expression(p, 1);
        if (!is_op(p, ":")) return x;
        advance(p);
        parts[0] = x;
    }
    if (!is_op(p, "]") && !is_op(p, ",") && !is_op(p, ":")) parts[1] = parse_expression(p, 1);
    if (is_op(p, ":")) {
        advance(p);
        if (!is_op(p, "]") && !is_op(p, ",")) parts[2] = parse_expression(p, 1);
    }
    tnode *s = mk(p, N_SLICE, line);
    s->items = palloc(p, 3 * sizeof(tnode *));
    memcpy(s->items, parts, sizeof parts);
    s->n = 3;
    return s;
}

static tnode *parse_postfix(tparser *p, tnode *node) {
    for (;;) {
        int line = cur(p)->line;
        if (is_op(p, ".")) {
            advance(p);
            if (cur(p)->k == K_NAME) {
                tnode *g = mk(p, N_GETATTR, line);
                g->a = node;
                g->s = name_dup(p, cur(p));
                g->slen = cur(p)->n;
                advance(p);
                node = g;
            } else if (cur(p)->k == K_INT) {
                tnode *g = mk(p, N_GETITEM, line);
                g->a = node;
                g->b = mk(p, N_INT, line);
                g->b->i = cur(p)->i;
                advance(p);
                node = g;
            } else {
                unexpected(p, "a name or number after '.'");
            }
        } else if (is_op(p, "[")) {
            advance(p);
            nvec args = {0};
            while (!is_op(p, "]")) {
                if (args.n) expect_op(p, ",");
                if (is_op(p, "]")) break;
                nv_push(p, &args, parse_subscribed(p), NULL);
            }
            expect_op(p, "]");
            tnode *g = mk(p, N_GETITEM, line);
            g->a = node;
            if (args.n == 1) {
                g->b = args.v[0];
            } else {
                tnode *t = mk(p, N_TUPLE, line);
                t->items = args.v;
                t->n = args.n;
                g->b = t;
            }
            node = g;
        } else if (is_op(p, "(")) {
            tnode *call = mk(p, N_CALL, line);
            call->a = node;
            parse_call_args(p, call);
            node = call;
        } else {
            return node;
        }
    }
}

static tnode *parse_filter_expr(tparser *p, tnode *node) {
    for (;;) {
        if (is_op(p, "|")) node = parse_filter(p, node, 0);
        else if (is_name(p, "is")) node = parse_test(p, node);
        else if (is_op(p, "(")) {
            tnode *call = mk(p, N_CALL, cur(p)->line);
            call->a = node;
            parse_call_args(p, call);
            node = call;
        } else return node;
    }
}

static tnode *parse_primary(tparser *p) {
    ttok *t = cur(p);
    int line = t->line;
    tnode *n;
    switch (t->k) {
    case K_NAME:
        if (tok_is(t, K_NAME, "true") || tok_is(t, K_NAME, "True")) { n = mk(p, N_CONST, line); n->op = CONST_TRUE; }
        else if (tok_is(t, K_NAME, "false") || tok_is(t, K_NAME, "False")) { n = mk(p, N_CONST, line); n->op = CONST_FALSE; }
        else if (tok_is(t, K_NAME, "none") || tok_is(t, K_NAME, "None")) { n = mk(p, N_CONST, line); n->op = CONST_NONE; }
        else { n = mk(p, N_NAME, line); n->s = name_dup(p, t); n->slen = t->n; }
        advance(p);
        return n;
    case K_STRING: {
        size_t total = 0, k = p->pos;
        while (p->toks[k].k == K_STRING) total += p->toks[k++].n;
        char *s = palloc(p, total + 1);
        size_t o = 0;
        while (cur(p)->k == K_STRING) {
            memcpy(s + o, cur(p)->s, cur(p)->n);
            o += cur(p)->n;
            advance(p);
        }
        n = mk(p, N_STR, line);
        n->s = s;
        n->slen = total;
        return n;
    }
    case K_INT: n = mk(p, N_INT, line); n->i = t->i; advance(p); return n;
    case K_FLOAT: n = mk(p, N_FLOAT, line); n->f = t->f; advance(p); return n;
    default: break;
    }
    if (is_op(p, "(")) {
        advance(p);
        n = parse_tuple(p, 0, 1, NULL, 1);
        expect_op(p, ")");
        return n;
    }
    if (is_op(p, "[") || is_op(p, "{")) {
        int dict = is_op(p, "{");
        const char *close = dict ? "}" : "]";
        advance(p);
        nvec items = {0};
        while (!is_op(p, close)) {
            if (items.n) expect_op(p, ",");
            if (is_op(p, close)) break;
            nv_push(p, &items, parse_expression(p, 1), NULL);
            if (dict) {
                expect_op(p, ":");
                nv_push(p, &items, parse_expression(p, 1), NULL);
            }
        }
        expect_op(p, close);
        n = mk(p, dict ? N_DICT : N_LIST, line);
        n->items = items.v;
        n->n = items.n;
        return n;
    }
    unexpected(p, "an expression");
}

static tnode *parse_unary(tparser *p, int with_filter) {
    enter(p);
    int line = cur(p)->line;
    tnode *node;
    if (is_op(p, "-") || is_op(p, "+")) {
        node = mk(p, is_op(p, "-") ? N_NEG : N_POS, line);
        advance(p);
        node->a = parse_unary(p, 0);
    } else {
        node = parse_primary(p);
    }
    node = parse_postfix(p, node);
    if (with_filter) node = parse_filter_expr(p, node);
    p->depth--;
    return node;
}

static tnode *binop(tparser *p, int op, tnode *a, tnode *b, int line) {
    tnode *n = mk(p, N_BINOP, line);
    n->op = op;
    n->a = a;
    n->b = b;
    return n;
}

static tnode *parse_pow(tparser *p) {
    tnode *left = parse_unary(p, 1);
    while (is_op(p, "**")) {
        int line = cur(p)->line;
        advance(p);
        left = binop(p, OP_POW, left, parse_unary(p, 1), line);
    }
    return left;
}

static tnode *parse_math2(tparser *p) {
    tnode *left = parse_pow(p);
    for (;;) {
        int line = cur(p)->line, op;
        if (is_op(p, "*")) op = OP_MUL;
        else if (is_op(p, "/")) op = OP_DIV;
        else if (is_op(p, "//")) op = OP_FLOORDIV;
        else if (is_op(p, "%")) op = OP_MOD;
        else return left;
        advance(p);
        left = binop(p, op, left, parse_pow(p), line);
    }
}

static tnode *parse_concat(tparser *p) {
    int line = cur(p)->line;
    tnode *first = parse_math2(p);
    if (!is_op(p, "~")) return first;
    nvec v = {0};
    nv_push(p, &v, first, NULL);
    while (is_op(p, "~")) {
        advance(p);
        nv_push(p, &v, parse_math2(p), NULL);
    }
    tnode *n = mk(p, N_CONCAT, line);
    n->items = v.v;
    n->n = v.n;
    return n;
}

static tnode *parse_math1(tparser *p) {
    tnode *left = parse_concat(p);
    for (;;) {
        int line = cur(p)->line, op;
        if (is_op(p, "+")) op = OP_ADD;
        else if (is_op(p, "-")) op = OP_SUB;
        else return left;
        advance(p);
        left = binop(p, op, left, parse_concat(p), line);
    }
}

static tnode *parse_compare(tparser *p) {
    int line = cur(p)->line;
    tnode *expr = parse_math1(p);
    nvec ops = {0};
    int opcodes[64];
    for (;;) {
        int op;
        if (is_op(p, "==")) op = OP_EQ;
        else if (is_op(p, "!=")) op = OP_NE;
        else if (is_op(p, "<")) op = OP_LT;
        else if (is_op(p, "<=")) op = OP_LE;
        else if (is_op(p, ">")) op = OP_GT;
        else if (is_op(p, ">=")) op = OP_GE;
        else if (is_name(p, "in")) op = OP_IN;
        else if (is_name(p, "not") && tok_is(peek(p, 1), K_NAME, "in")) { op = OP_NOTIN; advance(p); }
        else break;
        advance(p);
        if (ops.n == 64) pfail(p, line, "comparison chain too long");
        opcodes[ops.n] = op;
        nv_push(p, &ops, parse_math1(p), NULL);
    }
    if (!ops.n) return expr;
    tnode *n = mk(p, N_COMPARE, line);
    n->a = expr;
    n->items = ops.v;
    n->n = ops.n;
    n->ops = palloc(p, (size_t)ops.n * sizeof(int));
    memcpy(n->ops, opcodes, (size_t)ops.n * sizeof(int));
    return n;
}

static tnode *parse_not(tparser *p) {
    if (is_name(p, "not")) {
        int line = cur(p)->line;
        advance(p);
        enter(p);
        tnode *n = mk(p, N_NOT, line);
        n->a = parse_not(p);
        p->depth--;
        return n;
    }
    return parse_compare(p);
}

static tnode *parse_and(tparser *p) {
    tnode *left = parse_not(p);
    while (is_name(p, "and")) {
        int line = cur(p)->line;
        advance(p);
        tnode *n = mk(p, N_AND, line);
        n->a = left;
        n->b = parse_not(p);
        left = n;
    }
    return left;
}

static tnode *parse_or(tparser *p) {
    tnode *left = parse_and(p);
    while (is_name(p, "or")) {
        int line = cur(p)->line;
        advance(p);
        tnode *n = mk(p, N_OR, line);
        n->a = left;
        n->b = parse_and(p);
        left = n;
    }
    return left;
}

static tnode *parse_condexpr(tparser *p) {
    enter(p);
    tnode *e1 = parse_or(p);
    while (is_name(p, "if")) {
        int line = cur(p)->line;
        advance(p);
        tnode *n = mk(p, N_CONDEXPR, line);
        n->a = parse_or(p);
        n->b = e1;
        if (is_name(p, "else")) {
            advance(p);
            n->c = parse_condexpr(p);
        }
        e1 = n;
    }
    p->depth--;
    return e1;
}

static tnode *parse_expression(tparser *p, int with_condexpr) {
    return with_condexpr ? parse_condexpr(p) : parse_or(p);
}

static int is_tuple_end(tparser *p, const char *extra_end) {
    ttok *t = cur(p);
    if (t->k == K_VAR_END || t->k == K_BLOCK_END || is_op(p, ")")) return 1;
    return extra_end && tok_is(t, K_NAME, extra_end);
}

static tnode *parse_tuple(tparser *p, int simplified, int with_condexpr, const char *extra_end, int explicit_parens) {
    int line = cur(p)->line, is_tuple = 0;
    nvec args = {0};
    for (;;) {
        if (args.n) expect_op(p, ",");
        if (is_tuple_end(p, extra_end)) break;
        tnode *x = simplified ? parse_primary(p) : parse_expression(p, with_condexpr);
        nv_push(p, &args, x, NULL);
        if (is_op(p, ",")) is_tuple = 1;
        else break;
    }
    if (!is_tuple) {
        if (args.n) return args.v[0];
        if (!explicit_parens) unexpected(p, "an expression");
    }
    tnode *t = mk(p, N_TUPLE, line);
    t->items = args.v;
    t->n = args.n;
    return t;
}

/* ---- statements ---- */

static tnode *subparse(tparser *p, const char *const *end_names);

static int at_end_name(tparser *p, const char *const *end_names) {
    for (int i = 0; end_names && end_names[i]; i++)
        if (is_name(p, end_names[i])) return 1;
    return 0;
}

/* Expects the end of the current tag, parses the body up to one of end_names (left as current). */
static tnode *parse_statements(tparser *p, const char *const *end_names, int drop_needle) {
    expect_kind(p, K_BLOCK_END, "end of statement block");
    tnode *body = subparse(p, end_names);
    if (cur(p)->k == K_EOF) pfail(p, cur(p)->line, "unexpected end of template, expected '%s'", end_names[0]);
    if (drop_needle) advance(p);
    return body;
}

/* Assignment target: names[] of a name, a tuple of names (op 1) or ns.attr (op 2). */
static void parse_target(tparser *p, tnode *n, int with_namespace, const char *extra_end) {
    if (with_namespace && cur(p)->k == K_NAME && tok_is(peek(p, 1), K_OP, ".")) {
        n->names = palloc(p, 2 * sizeof(char *));
        n->names[0] = name_dup(p, cur(p));
        advance(p);
        advance(p);
        if (cur(p)->k != K_NAME) unexpected(p, "an attribute name");
        n->names[1] = name_dup(p, cur(p));
        advance(p);
        n->nn = 2;
        n->op = 2;
        return;
    }
    tnode *t = parse_tuple(p, 1, 1, extra_end, 0);
    if (t->kind == N_NAME) {
        n->names = palloc(p, sizeof(char *));
        n->names[0] = t->s;
        n->nn = 1;
        return;
    }
    if (t->kind != N_TUPLE) pfail(p, t->line, "can't assign to this expression");
    n->names = palloc(p, (size_t)(t->n ? t->n : 1) * sizeof(char *));
    for (int i = 0; i < t->n; i++) {
        if (t->items[i]->kind != N_NAME) pfail(p, t->line, "can't assign to this expression");
        n->names[i] = t->items[i]->s;
    }
    n->nn = t->n;
    n->op = 1;
}

static int mentions(tparser *p, const tnode *n, const char *name, int depth) {
    if (!n) return 0;
    if (depth > TE_MAX_NEST) pfail(p, n->line, "expression nested too deeply (more than %d levels)", TE_MAX_NEST);
    if (n->kind == N_NAME && strcmp(n->s, name) == 0) return 1;
    if (mentions(p, n->a, name, depth + 1) || mentions(p, n->b, name, depth + 1) || mentions(p, n->c, name, depth + 1))
        return 1;
    for (int i = 0; i < n->n; i++)
        if (mentions(p, n->items[i], name, depth + 1)) return 1;
    return 0;
}

static tnode *parse_statement(tparser *p) {
    ttok *t = cur(p);
    int line = t->line;
    if (t->k != K_NAME) unexpected(p, "a tag name");
    tnode *n;
    if (is_name(p, "for")) {
        advance(p);
        n = mk(p, N_FOR, line);
        parse_target(p, n, 0, "in");
        if (!is_name(p, "in")) unexpected(p, "'in'");
        advance(p);
        n->a = parse_tuple(p, 0, 0, "recursive", 0);
        if (is_name(p, "if")) {
            advance(p);
            n->b = parse_expression(p, 1);
        }
        if (is_name(p, "recursive")) pfail(p, line, "recursive for loops are not supported");
        static const char *const ends[] = {"endfor", "else", NULL};
        static const char *const endfor[] = {"endfor", NULL};
        p->loop_depth++;
        tnode *body = parse_statements(p, ends, 0);
        p->loop_depth--;
        n->items = palloc(p, sizeof(tnode *));
        n->items[0] = body;
        n->n = 1;
        int is_else = is_name(p, "else");
        advance(p);
        if (is_else) n->c = parse_statements(p, endfor, 1);
        return n;
    }
    if (is_name(p, "if")) {
        advance(p);
        static const char *const ends[] = {"elif", "else", "endif", NULL};
        static const char *const endif[] = {"endif", NULL};
        n = mk(p, N_IF, line);
        tnode *node = n;
        for (;;) {
            node->a = parse_tuple(p, 0, 0, NULL, 0);
            node->b = parse_statements(p, ends, 0);
            if (is_name(p, "elif")) {
                int l = cur(p)->line;
                advance(p);
                tnode *e = mk(p, N_IF, l);
                node->c = e;
                node = e;
                continue;
            }
            int is_else = is_name(p, "else");
            advance(p);
            if (is_else) node->c = parse_statements(p, endif, 1);
            return n;
        }
    }
    if (is_name(p, "set")) {
        advance(p);
        n = mk(p, N_SET, line);
        parse_target(p, n, 1, NULL);
        if (is_op(p, "=")) {
            advance(p);
            n->a = parse_tuple(p, 0, 1, NULL, 0);
            return n;
        }
        static const char *const ends[] = {"endset", NULL};
        n->kind = N_SET_BLOCK;
        if (n->op == 1) pfail(p, line, "a block set needs a single target");
        n->b = parse_filter(p, NULL, 0);
        n->a = parse_statements(p, ends, 1);
        return n;
    }
    if (is_name(p, "macro")) {
        advance(p);
        n = mk(p, N_MACRO, line);
        if (cur(p)->k != K_NAME) unexpected(p, "a macro name");
        n->s = name_dup(p, cur(p));
        advance(p);
        expect_op(p, "(");
        nvec params = {0};
        int have_default = 0;
        while (!is_op(p, ")")) {
            if (params.n) expect_op(p, ",");
            if (cur(p)->k != K_NAME) unexpected(p, "a parameter name");
            const char *pname = name_dup(p, cur(p));
            advance(p);
            tnode *def = NULL;
            if (is_op(p, "=")) {
                advance(p);
                def = parse_expression(p, 1);
                have_default = 1;
            } else if (have_default) {
                pfail(p, line, "non-default argument follows default argument");
            }
            nv_push(p, &params, def, pname);
        }
        expect_op(p, ")");
        static const char *const ends[] = {"endmacro", NULL};
        int saved_loop = p->loop_depth;
        p->loop_depth = 0;
        p->macro_depth++;
        n->a = parse_statements(p, ends, 1);
        p->macro_depth--;
        p->loop_depth = saved_loop;
        n->items = params.v;
        n->names = params.names;
        n->n = params.n;
        n->op = (mentions(p, n->a, "varargs", 0) ? 1 : 0) | (mentions(p, n->a, "kwargs", 0) ? 2 : 0);
        return n;
    }
    if (is_name(p, "break") || is_name(p, "continue")) {
        n = mk(p, is_name(p, "break") ? N_BREAK : N_CONTINUE, line);
        if (!p->loop_depth) pfail(p, line, "'%s' outside of a for loop", is_name(p, "break") ? "break" : "continue");
        advance(p);
        return n;
    }
    if (is_name(p, "filter")) {
        advance(p);
        static const char *const ends[] = {"endfilter", NULL};
        n = mk(p, N_FILTER_BLOCK, line);
        n->b = parse_filter(p, NULL, 1);
        n->a = parse_statements(p, ends, 1);
        return n;
    }
    if (is_name(p, "with")) {
        advance(p);
        static const char *const ends[] = {"endwith", NULL};
        n = mk(p, N_WITH, line);
        nvec vals = {0};
        while (cur(p)->k != K_BLOCK_END) {
            if (vals.n) expect_op(p, ",");
            if (cur(p)->k != K_NAME) unexpected(p, "a name");
            const char *name = name_dup(p, cur(p));
            advance(p);
            expect_op(p, "=");
            nv_push(p, &vals, parse_expression(p, 1), name);
        }
        n->items = vals.v;
        n->names = vals.names;
        n->n = vals.n;
        n->a = parse_statements(p, ends, 1);
        return n;
    }
    if (is_name(p, "generation")) {
        advance(p);
        static const char *const ends[] = {"endgeneration", NULL};
        return parse_statements(p, ends, 1);
    }
    if (is_name(p, "print")) {
        advance(p);
        n = mk(p, N_OUTPUT, line);
        n->a = parse_tuple(p, 0, 1, NULL, 0);
        return n;
    }
    static const char *const known[] = {"block", "extends", "include", "import", "from", "call", "autoescape",
                                        "trans", "pluralize", NULL};
    for (int i = 0; known[i]; i++)
        if (is_name(p, known[i])) pfail(p, line, "the '%s' tag is not supported", known[i]);
    pfail(p, line, "unknown tag '%.*s'", (int)(t->n > 40 ? 40 : t->n), t->s);
}

static tnode *subparse(tparser *p, const char *const *end_names) {
    nvec body = {0};
    int line = cur(p)->line;
    for (;;) {
        ttok *t = cur(p);
        if (t->k == K_EOF) break;
        if (t->k == K_DATA) {
            tnode *d = mk(p, N_DATA, t->line);
            d->s = t->s;
            d->slen = t->n;
            nv_push(p, &body, d, NULL);
            advance(p);
        } else if (t->k == K_VAR_BEGIN) {
            advance(p);
            tnode *o = mk(p, N_OUTPUT, t->line);
            o->a = parse_tuple(p, 0, 1, NULL, 0);
            expect_kind(p, K_VAR_END, "end of print statement");
            nv_push(p, &body, o, NULL);
        } else if (t->k == K_BLOCK_BEGIN) {
            advance(p);
            if (at_end_name(p, end_names)) break;
            if (++p->depth > 100) pfail(p, cur(p)->line, "statements nested too deeply");
            nv_push(p, &body, parse_statement(p), NULL);
            p->depth--;
            expect_kind(p, K_BLOCK_END, "end of statement block");
        } else {
            char b[64];
            pfail(p, t->line, "unexpected %s", describe(t, b, sizeof b));
        }
    }
    tnode *n = mk(p, N_BODY, line);
    n->items = body.v;
    n->n = body.n;
    return n;
}

cinfer_status tp_parse(const char *src, size_t len, tarena **arena, tnode **root, cinfer_error *err) {
    tparser p;
    memset(&p, 0, sizeof p);
    p.err = err;
    p.arena = calloc(1, sizeof(tarena));
    if (!p.arena) return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory compiling a template");
    if (setjmp(p.jmp)) {
        free(p.toks);
        tp_arena_free(p.arena);
        return CINFER_E_TEMPLATE;
    }
    /* newlines normalised to \n, one trailing newline dropped (keep_trailing_newline=False) */
    char *s = palloc(&p, len + 1);
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            s[n++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n') i++;
        } else {
            s[n++] = src[i];
        }
    }
    if (n && s[n - 1] == '\n') n--;
    s[n] = 0;
    p.src = s;
    p.len = n;
    lex(&p);
    tnode *body = subparse(&p, NULL);
    if (cur(&p)->k != K_EOF) {
        char b[64];
        pfail(&p, cur(&p)->line, "unexpected %s", describe(cur(&p), b, sizeof b));
    }
    free(p.toks);
    *arena = p.arena;
    *root = body;
    return CINFER_OK;
}
