/* tok_pretok.c: tokenizer.json pre-tokenizers: ByteLevel, Split, Metaspace, Digits, Punctuation,
 * Whitespace, WhitespaceSplit, BertPreTokenizer, CharDelimiterSplit and Sequence, splitting pieces
 * exactly as HF tokenizers 0.23 does (same split behaviors, same treatment of empty pieces). */
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "text/tok_impl.h"

enum { P_BYTELEVEL, P_SPLIT, P_METASPACE, P_DIGITS, P_PUNCT, P_WHITESPACE, P_WS_SPLIT, P_BERT, P_CHAR_DELIM, P_SEQ };
enum { PREPEND_ALWAYS, PREPEND_FIRST, PREPEND_NEVER };

/* GPT-2's pre-tokenization regex, used by ByteLevel with use_regex. */
static const char GPT2_RE[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

struct tk_pretok {
    int kind;
    int add_prefix_space, use_regex;  /* ByteLevel */
    tk_regex *re;                     /* ByteLevel (use_regex), Split */
    int behavior, invert;             /* Split, Punctuation */
    int32_t ch;                       /* Metaspace replacement, CharDelimiterSplit delimiter */
    char ch_utf8[4];
    size_t ch_len;
    int prepend, split;               /* Metaspace */
    int individual;                   /* Digits */
    tk_pretok **kids;                 /* Sequence */
    size_t nkids;
};

void tk_pretok_free(tk_pretok *p) {
    if (!p) return;
    for (size_t i = 0; i < p->nkids; i++) tk_pretok_free(p->kids[i]);
    free(p->kids);
    tk_regex_free(p->re);
    free(p);
}

/* A JSON string holding exactly one character. */
static int one_char(const char *s, int32_t *cp) {
    if (!s || !*s) return 0;
    size_t n = strlen(s);
    if (tk_utf8_valid_prefix(s, n) != n) return 0;
    return tk_utf8_next(s, n, cp) == n;
}

cinfer_status tk_pretok_parse(const cJSON *j, tk_pretok **out, cinfer_error *err) {
    *out = NULL;
    const char *type = tk_json_type(j);
    if (!type) return cf_fail(err, CINFER_E_FORMAT, "pre_tokenizer without a \"type\"");
    static const char *const names[] = {"ByteLevel", "Split", "Metaspace", "Digits", "Punctuation", "Whitespace",
                                        "WhitespaceSplit", "BertPreTokenizer", "CharDelimiterSplit", "Sequence"};
    int kind = -1;
    for (int i = 0; i < (int)(sizeof names / sizeof *names); i++)
        if (strcmp(type, names[i]) == 0) kind = i;
    if (kind < 0) return cf_fail(err, CINFER_E_UNSUPPORTED, "pre_tokenizer type %s is not supported", type);
    tk_pretok *p = calloc(1, sizeof *p);
    if (!p) return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory loading the tokenizer");
    p->kind = kind;
    cinfer_status st = CINFER_OK;
    switch (kind) {
    case P_BYTELEVEL:
        p->add_prefix_space = tk_json_bool(j, "add_prefix_space", 1);
        p->use_regex = tk_json_bool(j, "use_regex", 1);
        if (p->use_regex) st = tk_regex_new(GPT2_RE, sizeof GPT2_RE - 1, 0, &p->re, err);
        break;
    case P_SPLIT:
        p->behavior = tk_behavior_parse(tk_json_str(j, "behavior"));
        p->invert = tk_json_bool(j, "invert", 0);
        if (p->behavior < 0) st = cf_fail(err, CINFER_E_FORMAT, "Split pre_tokenizer: unknown \"behavior\"");
        else st = tk_pattern_parse(cJSON_GetObjectItemCaseSensitive(j, "pattern"), "Split pre_tokenizer", &p->re, err);
        break;
    case P_METASPACE: {
        const char *scheme = tk_json_str(j, "prepend_scheme");
        if (!one_char(tk_json_str(j, "replacement"), &p->ch)) {
            st = cf_fail(err, CINFER_E_FORMAT, "Metaspace: \"replacement\" must be one character");
            break;
        }
        p->prepend = !scheme || strcmp(scheme, "always") == 0 ? PREPEND_ALWAYS
                     : strcmp(scheme, "first") == 0          ? PREPEND_FIRST
                     : strcmp(scheme, "never") == 0          ? PREPEND_NEVER
                                                             : -1;
        if (p->prepend < 0) {
            st = cf_fail(err, CINFER_E_FORMAT, "Metaspace: unknown prepend_scheme \"%s\"", scheme);
            break;
        }
        if (!tk_json_bool(j, "add_prefix_space", 1)) { /* legacy field, as HF reads it */
            if (p->prepend != PREPEND_NEVER && scheme) {
                st = cf_fail(err, CINFER_E_FORMAT, "Metaspace: add_prefix_space does not match declared prepend_scheme");
                break;
            }
            p->prepend = PREPEND_NEVER;
        }
        p->split = tk_json_bool(j, "split", 1);
        p->ch_len = (size_t)tk_utf8_encode(p->ch, p->ch_utf8);
        break;
    }
    case P_DIGITS:
        p->individual = tk_json_bool(j, "individual_digits", 0);
        break;
    case P_PUNCT: {
        const char *b = tk_json_str(j, "behavior");
        p->behavior = b ? tk_behavior_parse(b) : TK_ISOLATED;
        if (p->behavior < 0) st = cf_fail(err, CINFER_E_FORMAT, "Punctuation pre_tokenizer: unknown \"behavior\"");
        break;
    }
    case P_CHAR_DELIM:
        if (!one_char(tk_json_str(j, "delimiter"), &p->ch))
            st = cf_fail(err, CINFER_E_FORMAT, "CharDelimiterSplit: \"delimiter\" must be one character");
        break;
    case P_SEQ: {
        const cJSON *arr = cJSON_GetObjectItemCaseSensitive(j, "pretokenizers");
        if (!cJSON_IsArray(arr)) {
            st = cf_fail(err, CINFER_E_FORMAT, "Sequence pre_tokenizer without \"pretokenizers\"");
            break;
        }
        size_t k = (size_t)cJSON_GetArraySize(arr);
        if (k && !(p->kids = calloc(k, sizeof *p->kids))) {
            st = cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory loading the tokenizer");
            break;
        }
        const cJSON *it;
        cJSON_ArrayForEach(it, arr) {
            if ((st = tk_pretok_parse(it, &p->kids[p->nkids], err))) break;
            p->nkids++;
        }
        break;
    }
    }
    if (st) {
        tk_pretok_free(p);
        return st;
    }
    *out = p;
    return CINFER_OK;
}

/* (span, is_match) list covering one piece: what HF's Pattern::find_matches returns. */
typedef struct mlist {
    tk_span *v;
    uint8_t *f;
    size_t n, cap;
    int oom;
} mlist;

static void ml_add(mlist *m, size_t s, size_t e, int f) {
    if (m->oom) return;
    if (m->n == m->cap) {
        size_t c = m->cap ? m->cap * 2 : 64;
        tk_span *v = realloc(m->v, c * sizeof *v);
        if (v) m->v = v;
        uint8_t *fl = v ? realloc(m->f, c) : NULL;
        if (fl) m->f = fl;
        if (!v || !fl) {
            m->oom = 1;
            return;
        }
        m->cap = c;
    }
    m->v[m->n] = (tk_span){s, e};
    m->f[m->n++] = (uint8_t)f;
}

static void ml_from_regex(mlist *m, const tk_spans *sp, size_t n, int invert) {
    m->n = 0;
    if (n == 0) {
        ml_add(m, 0, 0, invert);
        return;
    }
    size_t prev = 0;
    for (size_t i = 0; i < sp->n; i++) {
        if (prev != sp->v[i].s) ml_add(m, prev, sp->v[i].s, invert);
        ml_add(m, sp->v[i].s, sp->v[i].e, !invert);
        prev = sp->v[i].e;
    }
    if (prev != n) ml_add(m, prev, n, invert);
}

typedef int (*char_pred)(const tk_pretok *p, int32_t cp);

static void ml_from_chars(mlist *m, const tk_pretok *p, char_pred pred, const char *s, size_t n) {
    m->n = 0;
    if (n == 0) {
        ml_add(m, 0, 0, 0);
        return;
    }
    size_t last = 0;
    for (size_t i = 0; i < n;) {
        int32_t cp;
        size_t k = tk_utf8_next(s + i, n - i, &cp);
        if (pred(p, cp)) {
            if (last < i) ml_add(m, last, i, 0);
            ml_add(m, i, i + k, 1);
            last = i + k;
        }
        i += k;
    }
    if (n > last) ml_add(m, last, n, 0);
}

static int pred_numeric(const tk_pretok *p, int32_t cp) { return tk_is_numeric(cp); }
static int pred_punct(const tk_pretok *p, int32_t cp) { return tk_is_punct(cp); }
static int pred_space(const tk_pretok *p, int32_t cp) { return tk_is_whitespace(cp); }
static int pred_char(const tk_pretok *p, int32_t cp) { return cp == p->ch; }

/* Whitespace: the matches of \w+|[^\w\s]+ are kept, everything else dropped. */
static void whitespace_split(const char *s, size_t n, int at_start, tk_pieces *out) {
    size_t i = 0;
    while (i < n) {
        int32_t cp;
        size_t k = tk_utf8_next(s + i, n - i, &cp);
        if (tk_is_whitespace(cp) && !tk_is_word(cp)) {
            i += k;
            continue;
        }
        int word = tk_is_word(cp);
        size_t j = i + k;
        while (j < n) {
            size_t k2 = tk_utf8_next(s + j, n - j, &cp);
            int w = tk_is_word(cp);
            if (w != word || (!w && tk_is_whitespace(cp))) break;
            j += k2;
        }
        tk_pieces_add(out, s + i, j - i, -1, at_start && i == 0);
        i = j;
    }
}

static void bytelevel_map(const char *s, size_t n, int at_start, tk_pieces *out) {
    tk_buf *t = &out->text;
    if (tk_buf_reserve(t, 2 * n)) {
        out->oom = 1;
        return;
    }
    size_t start = t->n;
    for (size_t i = 0; i < n; i++) {
        int32_t cp = tk_byte_cp((unsigned char)s[i]);
        if (cp < 0x80) t->p[t->n++] = (char)cp;
        else {
            t->p[t->n++] = (char)(0xC0 | (cp >> 6));
            t->p[t->n++] = (char)(0x80 | (cp & 0x3F));
        }
    }
    t->p[t->n] = 0;
    tk_pieces_commit(out, start, at_start);
}

static int apply_one(const tk_pretok *p, tk_scratch *sc, mlist *m, tk_buf *tmp, const char *s, size_t n,
                     int at_start, tk_pieces *out) {
    switch (p->kind) {
    case P_BYTELEVEL: {
        const char *src = s;
        size_t len = n;
        if (p->add_prefix_space && n > 0 && s[0] != ' ') {
            tmp->n = 0;
            tk_buf_putc(tmp, ' ');
            tk_buf_put(tmp, s, n);
            if (tmp->oom) return -1;
            src = tmp->p;
            len = tmp->n;
        }
        if (!p->use_regex) {
            bytelevel_map(src, len, at_start, out);
            break;
        }
        tk_spans *sp = tk_scratch_spans(sc);
        if (tk_regex_find(p->re, sc, src, len, sp)) return -1;
        ml_from_regex(m, sp, len, 0);
        for (size_t i = 0; i < m->n; i++)
            bytelevel_map(src + m->v[i].s, m->v[i].e - m->v[i].s, at_start && m->v[i].s == 0, out);
        break;
    }
    case P_SPLIT: {
        tk_spans *sp = tk_scratch_spans(sc);
        if (tk_regex_find(p->re, sc, s, n, sp)) return -1;
        ml_from_regex(m, sp, n, p->invert);
        tk_split_apply(s, n, m->v, m->f, m->n, p->behavior, at_start, out);
        break;
    }
    case P_METASPACE: {
        tmp->n = 0;
        size_t i = 0;
        for (size_t j = 0; j < n; j++)
            if (s[j] == ' ') {
                tk_buf_put(tmp, s + i, j - i);
                tk_buf_put(tmp, p->ch_utf8, p->ch_len);
                i = j + 1;
            }
        tk_buf_put(tmp, s + i, n - i);
        if (tmp->oom) return -1;
        int starts = tmp->n >= p->ch_len && memcmp(tmp->p, p->ch_utf8, p->ch_len) == 0;
        if (!starts && tmp->n > 0 && (p->prepend == PREPEND_ALWAYS || (p->prepend == PREPEND_FIRST && at_start))) {
            tk_buf_put(tmp, p->ch_utf8, p->ch_len); /* grow, then shift right */
            if (tmp->oom) return -1;
            memmove(tmp->p + p->ch_len, tmp->p, tmp->n - p->ch_len);
            memcpy(tmp->p, p->ch_utf8, p->ch_len);
        }
        if (!p->split) {
            tk_pieces_add(out, tmp->p, tmp->n, -1, at_start);
            break;
        }
        ml_from_chars(m, p, pred_char, tmp->p, tmp->n);
        tk_split_apply(tmp->p, tmp->n, m->v, m->f, m->n, TK_MERGED_NEXT, at_start, out);
        break;
    }
    case P_DIGITS:
        ml_from_chars(m, p, pred_numeric, s, n);
        tk_split_apply(s, n, m->v, m->f, m->n, p->individual ? TK_ISOLATED : TK_CONTIGUOUS, at_start, out);
        break;
    case P_PUNCT:
        ml_from_chars(m, p, pred_punct, s, n);
        tk_split_apply(s, n, m->v, m->f, m->n, p->behavior, at_start, out);
        break;
    case P_WHITESPACE:
        whitespace_split(s, n, at_start, out);
        break;
    case P_WS_SPLIT:
        ml_from_chars(m, p, pred_space, s, n);
        tk_split_apply(s, n, m->v, m->f, m->n, TK_REMOVED, at_start, out);
        break;
    case P_BERT: {
        tk_pieces words = {0};
        ml_from_chars(m, p, pred_space, s, n);
        tk_split_apply(s, n, m->v, m->f, m->n, TK_REMOVED, at_start, &words);
        for (size_t i = 0; i < words.n && !words.oom; i++) {
            const char *w = tk_piece_str(&words, i);
            ml_from_chars(m, p, pred_punct, w, words.v[i].len);
            tk_split_apply(w, words.v[i].len, m->v, m->f, m->n, TK_ISOLATED, words.v[i].at_start, out);
        }
        int oom = words.oom;
        tk_pieces_free(&words);
        if (oom) return -1;
        break;
    }
    case P_CHAR_DELIM:
        ml_from_chars(m, p, pred_char, s, n);
        tk_split_apply(s, n, m->v, m->f, m->n, TK_REMOVED, at_start, out);
        break;
    }
    return (m->oom || out->oom) ? -1 : 0;
}

int tk_pretokenize(const tk_pretok *p, tk_scratch *sc, tk_pieces *io) {
    if (p->kind == P_SEQ) {
        for (size_t i = 0; i < p->nkids; i++)
            if (tk_pretokenize(p->kids[i], sc, io)) return -1;
        return 0;
    }
    tk_pieces out = {0};
    mlist m = {0};
    tk_buf tmp = {0};
    int rc = 0;
    for (size_t i = 0; i < io->n && !rc; i++) {
        const tk_piece *pc = &io->v[i];
        if (pc->id >= 0) tk_pieces_add(&out, "", 0, pc->id, pc->at_start);
        else rc = apply_one(p, sc, &m, &tmp, tk_piece_str(io, i), pc->len, pc->at_start, &out);
    }
    free(m.v);
    free(m.f);
    tk_buf_free(&tmp);
    if (!rc && out.oom) rc = -1;
    if (rc) {
        tk_pieces_free(&out);
        return -1;
    }
    tk_pieces_free(io);
    *io = out;
    return 0;
}
