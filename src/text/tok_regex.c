/* tok_regex.c: the patterns of tokenizer.json (Split, Replace) on PCRE2 with JIT, UTF and UCP.
 * HF compiles them with Oniguruma; the few Oniguruma-only escapes (\h, \H: hex digits) are rewritten,
 * and matches are enumerated with the onig crate's find_iter rule, which differs from Perl's for
 * empty matches: after an empty match the search resumes one character later, and an empty match
 * that follows a non-empty one is dropped. Also owns the per-call scratch (match data, JIT stack). */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "text/tok_impl.h"

struct tk_regex {
    pcre2_code *code; /* NULL for a non-empty literal */
    char *src;        /* the pattern, for messages */
    char *lit;
    size_t lit_len;
};

struct tk_scratch {
    pcre2_match_data *md;
    pcre2_match_context *mctx; /* the limits below; a large JIT stack once the default one is too small */
    pcre2_jit_stack *jit;
    tk_strs spare; /* decoders' second list */
    char why[320];
};

/* Backtracking bounds of one pcre2_match call. Real tokenizers' patterns take a few steps per byte;
 * catastrophic ones (nested quantifiers) take exponentially many and hit the limit within a few
 * hundred bytes. The match limit grows with the subject so that megabyte-long runs still match. */
enum { MATCH_LIMIT_BASE = 10000000, MATCH_LIMIT_PER_BYTE = 64, DEPTH_LIMIT = 100000 };

void tk_scratch_fail(tk_scratch *sc, const char *fmt, ...) {
    if (sc->why[0]) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(sc->why, sizeof sc->why, fmt, ap);
    va_end(ap);
}

const char *tk_scratch_why(const tk_scratch *sc) { return sc && sc->why[0] ? sc->why : NULL; }

tk_scratch *tk_scratch_new(void) {
    tk_scratch *sc = calloc(1, sizeof *sc);
    if (!sc) return NULL;
    sc->md = pcre2_match_data_create(16, NULL);
    sc->mctx = pcre2_match_context_create(NULL);
    if (!sc->md || !sc->mctx) {
        tk_scratch_free(sc);
        return NULL;
    }
    pcre2_set_depth_limit(sc->mctx, DEPTH_LIMIT);
    return sc;
}

void tk_scratch_free(tk_scratch *sc) {
    if (!sc) return;
    pcre2_match_data_free(sc->md);
    pcre2_match_context_free(sc->mctx);
    pcre2_jit_stack_free(sc->jit);
    tk_strs_free(&sc->spare);
    free(sc);
}

tk_strs *tk_scratch_strs(tk_scratch *sc) { return &sc->spare; }

/* Oniguruma's \s (White_Space; PCRE2's \s adds U+180E). */
static const char WS[] = "\\x{9}-\\x{D}\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";

/* \p{prop} or its negation with Oniguruma's members (see tk_onig_extra). Inside a class a negated
 * property cannot take the additions and is left to PCRE2. */
static void put_prop(tk_buf *b, const char *prop, size_t len, int negate, int in_class) {
    const char *extra = tk_onig_extra(prop, len);
    int wrap = !in_class && *extra;
    if (in_class && negate) extra = "";
    if (wrap) tk_buf_put(b, negate ? "[^" : "[", negate ? 2 : 1);
    tk_buf_put(b, negate && !wrap ? "\\P{" : "\\p{", 3);
    tk_buf_put(b, prop, len);
    tk_buf_putc(b, '}');
    tk_buf_put(b, extra, strlen(extra));
    if (wrap) tk_buf_putc(b, ']');
}

/* Oniguruma's \w: Alphabetic, M, Nd, Pc and the Latin-1 superscripts and fractions. */
static void put_word(tk_buf *b) {
    put_prop(b, "Alphabetic", 10, 0, 1);
    put_prop(b, "M", 1, 0, 1);
    put_prop(b, "Nd", 2, 0, 1);
    put_prop(b, "Pc", 2, 0, 1);
    static const char latin1[] = "\\x{B2}\\x{B3}\\x{B9}\\x{BC}-\\x{BE}";
    tk_buf_put(b, latin1, sizeof latin1 - 1);
}

/* Rewrites the escapes whose meaning differs between Oniguruma (HF) and PCRE2: \s \S \d \D \w \W
 * (Unicode-wide in both, but not the same sets), \h \H (hex digits in Oniguruma), and \p{X} \P{X}
 * \p{^X} \pX, which gain the code points of newer Unicode versions (tools/text/make_onig_classes.js
 * checks these definitions against HF). A negated escape inside a class ([^\S] and the like) is left
 * as PCRE2 reads it. */
static char *onig_to_pcre(const char *p, size_t n, size_t *out_len) {
    tk_buf b = {0};
    int in_class = 0;
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        if (c == '\\' && i + 1 < n) {
            char d = p[++i];
            switch (d) {
            case 's':
                if (!in_class) tk_buf_putc(&b, '[');
                tk_buf_put(&b, WS, sizeof WS - 1);
                if (!in_class) tk_buf_putc(&b, ']');
                break;
            case 'S':
                if (in_class) tk_buf_put(&b, "\\S", 2);
                else {
                    tk_buf_put(&b, "[^", 2);
                    tk_buf_put(&b, WS, sizeof WS - 1);
                    tk_buf_putc(&b, ']');
                }
                break;
            case 'd':
            case 'D':
                put_prop(&b, "Nd", 2, d == 'D', in_class);
                break;
            case 'w':
            case 'W':
                if (in_class && d == 'W') tk_buf_put(&b, "\\W", 2);
                else {
                    if (!in_class) tk_buf_put(&b, d == 'W' ? "[^" : "[", d == 'W' ? 2 : 1);
                    put_word(&b);
                    if (!in_class) tk_buf_putc(&b, ']');
                }
                break;
            case 'h':
                tk_buf_put(&b, in_class ? "0-9a-fA-F" : "[0-9a-fA-F]", in_class ? 9 : 11);
                break;
            case 'H':
                tk_buf_put(&b, in_class ? "\\H" : "[^0-9a-fA-F]", in_class ? 2 : 12);
                break;
            case 'p':
            case 'P': {
                int negate = d == 'P';
                const char *name = p + i + 1;
                size_t len = 0;
                if (i + 1 < n && p[i + 1] == '{') {
                    const char *close = memchr(p + i + 2, '}', n - i - 2);
                    if (!close) {
                        tk_buf_put(&b, p + i - 1, 2); /* malformed: PCRE2 will say so */
                        break;
                    }
                    name = p + i + 2;
                    len = (size_t)(close - name);
                    i = (size_t)(close - p);
                    if (len && *name == '^') {
                        negate = !negate;
                        name++;
                        len--;
                    }
                } else if (i + 1 < n) {
                    len = 1;
                    i++;
                }
                put_prop(&b, name, len, negate, in_class);
                break;
            }
            default:
                tk_buf_put(&b, p + i - 1, 2);
            }
            continue;
        }
        if (c == '[' && !in_class) {
            in_class = 1;
            tk_buf_putc(&b, c);
            /* a ']' right after '[' or '[^' is a literal member */
            if (i + 1 < n && p[i + 1] == '^') tk_buf_putc(&b, p[++i]);
            if (i + 1 < n && p[i + 1] == ']') tk_buf_putc(&b, p[++i]);
            continue;
        }
        if (c == ']' && in_class) in_class = 0;
        tk_buf_putc(&b, c);
    }
    *out_len = b.n;
    if (!b.p) tk_buf_reserve(&b, 0);
    return tk_buf_take(&b);
}

cinfer_status tk_regex_new(const char *pattern, size_t len, int literal, tk_regex **out, cinfer_error *err) {
    tk_regex *re = calloc(1, sizeof *re);
    if (re && !(re->src = malloc(len + 1))) {
        free(re);
        re = NULL;
    }
    if (!re) return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory compiling a pattern");
    memcpy(re->src, pattern, len);
    re->src[len] = 0;
    if (literal && len > 0) {
        re->lit = malloc(len);
        if (!re->lit) {
            tk_regex_free(re);
            return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory compiling a pattern");
        }
        memcpy(re->lit, pattern, len);
        re->lit_len = len;
        *out = re;
        return CINFER_OK;
    }
    size_t plen = 0;
    char *p = onig_to_pcre(pattern, len, &plen);
    if (!p) {
        tk_regex_free(re);
        return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory compiling a pattern");
    }
    int ec;
    PCRE2_SIZE eo;
    re->code = pcre2_compile((PCRE2_SPTR)p, plen, PCRE2_UTF | PCRE2_UCP, &ec, &eo, NULL);
    free(p);
    if (!re->code) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(ec, msg, sizeof msg);
        tk_regex_free(re);
        return cf_fail(err, CINFER_E_UNSUPPORTED, "pattern /%.*s/ does not compile at offset %zu: %s",
                       (int)(len > 200 ? 200 : len), pattern, (size_t)eo, (const char *)msg);
    }
    pcre2_jit_compile(re->code, PCRE2_JIT_COMPLETE); /* without JIT the interpreter still matches */
    *out = re;
    return CINFER_OK;
}

void tk_regex_free(tk_regex *re) {
    if (!re) return;
    pcre2_code_free(re->code);
    free(re->src);
    free(re->lit);
    free(re);
}

static const char *find_lit(const char *s, size_t n, const char *lit, size_t L) {
    const char *end = s + n;
    while ((size_t)(end - s) >= L) {
        const char *c = memchr(s, lit[0], (size_t)(end - s) - L + 1);
        if (!c) return NULL;
        if (memcmp(c, lit, L) == 0) return c;
        s = c + 1;
    }
    return NULL;
}

const char *tk_regex_source(const tk_regex *re) { return re->src; }

static int big_jit_stack(tk_scratch *sc) {
    sc->jit = pcre2_jit_stack_create(64 * 1024, 64 * 1024 * 1024, NULL);
    if (!sc->jit) return -1;
    pcre2_jit_stack_assign(sc->mctx, NULL, sc->jit);
    return 0;
}

void tk_regex_iter_init(tk_regex_iter *it, const char *s, size_t n) {
    it->s = s;
    it->n = n;
    it->last_end = 0;
    it->skip_next_empty = 0;
}

int tk_regex_next(const tk_regex *re, tk_scratch *sc, tk_regex_iter *it, size_t *ms, size_t *me) {
    const char *s = it->s;
    size_t n = it->n;
    if (n == 0) return 0; /* HF's Pattern::find_matches: nothing matches in an empty string */
    if (!re->code) {
        if (it->last_end + re->lit_len > n) return 0;
        const char *hit = find_lit(s + it->last_end, n - it->last_end, re->lit, re->lit_len);
        if (!hit) {
            it->last_end = n + 1;
            return 0;
        }
        *ms = (size_t)(hit - s);
        *me = it->last_end = *ms + re->lit_len;
        return 1;
    }
    while (it->last_end <= n) {
        size_t rest = n - it->last_end;
        pcre2_set_match_limit(sc->mctx, rest > (UINT32_MAX - MATCH_LIMIT_BASE) / MATCH_LIMIT_PER_BYTE
                                            ? UINT32_MAX
                                            : (uint32_t)(MATCH_LIMIT_BASE + rest * MATCH_LIMIT_PER_BYTE));
        int rc = pcre2_match(re->code, (PCRE2_SPTR)s, n, it->last_end, PCRE2_NO_UTF_CHECK, sc->md, sc->mctx);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT && !sc->jit) {
            if (big_jit_stack(sc)) return -1;
            continue;
        }
        if (rc == PCRE2_ERROR_MATCHLIMIT || rc == PCRE2_ERROR_DEPTHLIMIT || rc == PCRE2_ERROR_HEAPLIMIT ||
            rc == PCRE2_ERROR_JIT_STACKLIMIT)
            return TK_MATCH_LIMIT;
        if (rc == PCRE2_ERROR_NOMATCH) {
            it->last_end = n + 1;
            return 0;
        }
        if (rc < 0) return -1;
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(sc->md);
        size_t a = ov[0], b = ov[1];
        it->last_end = b;
        if (a == b) {
            it->last_end += b < n ? tk_utf8_len((unsigned char)s[b]) : 1;
            if (it->skip_next_empty) {
                it->skip_next_empty = 0;
                continue;
            }
        } else {
            it->skip_next_empty = 1;
        }
        *ms = a;
        *me = b;
        return 1;
    }
    return 0;
}
