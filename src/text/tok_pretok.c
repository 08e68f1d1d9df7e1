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
    const tk_pretok **stages;         /* the leaves in order: this one, or a Sequence's flattened */
    size_t nstages;
};

void tk_pretok_free(tk_pretok *p) {
    if (!p) return;
    for (size_t i = 0; i < p->nkids; i++) tk_pretok_free(p->kids[i]);
    free(p->kids);
    free(p->stages);
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

static cinfer_status flatten(tk_pretok *p, cinfer_error *err) {
    size_t n = 1;
    if (p->kind == P_SEQ) {
        n = 0;
        for (size_t i = 0; i < p->nkids; i++) n += p->kids[i]->nstages;
    }
    p->stages = malloc((n ? n : 1) * sizeof *p->stages);
    if (!p->stages) return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory loading the tokenizer");
    if (p->kind != P_SEQ) p->stages[0] = p;
    else
        for (size_t i = 0, k = 0; i < p->nkids; i++)
            for (size_t j = 0; j < p->kids[i]->nstages; j++) p->stages[k++] = p->kids[i]->stages[j];
    p->nstages = n;
    return CINFER_OK;
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
    if (!st) st = flatten(p, err);
    if (st) {
        tk_pretok_free(p);
        return st;
    }
    *out = p;
    return CINFER_OK;
}

/* One pre-tokenization call: the flattened stages and, per stage, two reusable text buffers.
 * Stages run depth-first, so a buffer of stage i stays valid while stages after i use it. */
typedef struct run {
    const tk_pretok *const *stages;
    size_t n;
    tk_scratch *sc;
    tk_piece_fn fn;
    void *ctx;
    tk_buf *bufs;
} run;

static int stage(run *r, size_t i, const char *s, size_t n, int at_start);

/* Where a splitter's kept parts go: the next stage, relative to base. */
typedef struct dest {
    run *r;
    size_t next;
    const char *base;
    int at_start;
} dest;

static int to_next(void *ctx, size_t a, size_t b) {
    dest *d = ctx;
    return stage(d->r, d->next, d->base + a, b - a, d->at_start && a == 0);
}

/* Feeds HF's find_matches for a regex (invert flips the flags) and finishes the splitter. */
static int feed_regex(run *r, const tk_regex *re, const char *s, size_t n, int invert, tk_splitter *sp) {
    if (n == 0) return tk_splitter_feed(sp, 0, 0, invert) || tk_splitter_finish(sp) ? -1 : 0;
    tk_regex_iter it;
    size_t prev = 0, a, b;
    int rc;
    tk_regex_iter_init(&it, s, n);
    while ((rc = tk_regex_next(re, r->sc, &it, &a, &b)) == 1) {
        if (prev != a && tk_splitter_feed(sp, prev, a, invert)) return -1;
        if (tk_splitter_feed(sp, a, b, !invert)) return -1;
        prev = b;
    }
    if (rc == TK_MATCH_LIMIT)
        tk_scratch_fail(r->sc, "pre-tokenizer Split regex '%.200s' exceeded its match limit on input of %zu bytes",
                        tk_regex_source(re), n);
    if (rc < 0) return -1;
    if (prev != n && tk_splitter_feed(sp, prev, n, invert)) return -1;
    return tk_splitter_finish(sp) ? -1 : 0;
}

typedef int (*char_pred)(const tk_pretok *p, int32_t cp);

/* Feeds HF's find_matches for a character predicate: every matching character is its own match. */
static int feed_chars(const tk_pretok *p, char_pred pred, const char *s, size_t n, tk_splitter *sp) {
    size_t last = 0;
    if (n == 0) return tk_splitter_feed(sp, 0, 0, 0) || tk_splitter_finish(sp) ? -1 : 0;
    for (size_t i = 0; i < n;) {
        int32_t cp;
        size_t k = tk_utf8_next(s + i, n - i, &cp);
        if (pred(p, cp)) {
            if (last < i && tk_splitter_feed(sp, last, i, 0)) return -1;
            if (tk_splitter_feed(sp, i, i + k, 1)) return -1;
            last = i + k;
        }
        i += k;
    }
    if (n > last && tk_splitter_feed(sp, last, n, 0)) return -1;
    return tk_splitter_finish(sp) ? -1 : 0;
}

static int pred_numeric(const tk_pretok *p, int32_t cp) { return tk_is_numeric(cp); }
static int pred_punct(const tk_pretok *p, int32_t cp) { return tk_is_punct(cp); }
static int pred_space(const tk_pretok *p, int32_t cp) { return tk_is_whitespace(cp); }
static int pred_char(const tk_pretok *p, int32_t cp) { return cp == p->ch; }

static int split_chars(run *r, size_t i, char_pred pred, int behavior, const char *s, size_t n, int at_start) {
    dest d = {r, i + 1, s, at_start};
    tk_splitter sp;
    tk_splitter_init(&sp, behavior, to_next, &d);
    return feed_chars(r->stages[i], pred, s, n, &sp);
}

/* ByteLevel: each part of the GPT-2 split, mapped to the byte alphabet, goes to the next stage. */
static int bytelevel_part(void *ctx, size_t a, size_t b) {
    dest *d = ctx;
    tk_buf *t = &d->r->bufs[2 * (d->next - 1) + 1];
    t->n = 0;
    if (tk_buf_reserve(t, 2 * (b - a))) return -1;
    for (size_t i = a; i < b; i++) {
        int32_t cp = tk_byte_cp((unsigned char)d->base[i]);
        if (cp < 0x80) t->p[t->n++] = (char)cp;
        else {
            t->p[t->n++] = (char)(0xC0 | (cp >> 6));
            t->p[t->n++] = (char)(0x80 | (cp & 0x3F));
        }
    }
    return stage(d->r, d->next, t->p, t->n, d->at_start && a == 0);
}

/* BertPreTokenizer: each whitespace-separated word, split around punctuation. */
static int bert_word(void *ctx, size_t a, size_t b) {
    dest *d = ctx;
    dest inner = {d->r, d->next, d->base + a, d->at_start && a == 0};
    tk_splitter sp;
    tk_splitter_init(&sp, TK_ISOLATED, to_next, &inner);
    return feed_chars(d->r->stages[d->next - 1], pred_punct, d->base + a, b - a, &sp);
}

/* Whitespace: the matches of \w+|[^\w\s]+ are kept, everything else dropped. */
static int whitespace(run *r, size_t i, const char *s, size_t n, int at_start) {
    size_t a = 0;
    while (a < n) {
        int32_t cp;
        size_t k = tk_utf8_next(s + a, n - a, &cp);
        int word = tk_is_word(cp);
        if (!word && tk_is_whitespace(cp)) {
            a += k;
            continue;
        }
        size_t b = a + k;
        while (b < n) {
            size_t k2 = tk_utf8_next(s + b, n - b, &cp);
            int w = tk_is_word(cp);
            if (w != word || (!w && tk_is_whitespace(cp))) break;
            b += k2;
        }
        if (stage(r, i + 1, s + a, b - a, at_start && a == 0)) return -1;
        a = b;
    }
    return 0;
}

static int stage(run *r, size_t i, const char *s, size_t n, int at_start) {
    if (i == r->n) return r->fn(r->ctx, s, n);
    const tk_pretok *p = r->stages[i];
    tk_buf *t = &r->bufs[2 * i];
    dest d = {r, i + 1, s, at_start};
    tk_splitter sp;
    switch (p->kind) {
    case P_BYTELEVEL:
        if (p->add_prefix_space && n > 0 && s[0] != ' ') {
            t->n = 0;
            tk_buf_putc(t, ' ');
            tk_buf_put(t, s, n);
            if (t->oom) return -1;
            d.base = s = t->p;
            n = t->n;
        }
        if (!p->use_regex) return bytelevel_part(&d, 0, n);
        tk_splitter_init(&sp, TK_ISOLATED, bytelevel_part, &d);
        return feed_regex(r, p->re, s, n, 0, &sp);
    case P_SPLIT:
        tk_splitter_init(&sp, p->behavior, to_next, &d);
        return feed_regex(r, p->re, s, n, p->invert, &sp);
    case P_METASPACE: {
        /* spaces become the replacement; room is kept in front for the prepended one */
        t->n = 0;
        tk_buf_put(t, p->ch_utf8, p->ch_len);
        size_t a = 0;
        for (size_t j = 0; j < n; j++)
            if (s[j] == ' ') {
                tk_buf_put(t, s + a, j - a);
                tk_buf_put(t, p->ch_utf8, p->ch_len);
                a = j + 1;
            }
        tk_buf_put(t, s + a, n - a);
        if (t->oom) return -1;
        const char *m = t->p + p->ch_len;
        size_t mn = t->n - p->ch_len;
        int starts = mn >= p->ch_len && memcmp(m, p->ch_utf8, p->ch_len) == 0;
        if (mn > 0 && !starts && (p->prepend == PREPEND_ALWAYS || (p->prepend == PREPEND_FIRST && at_start))) {
            m = t->p;
            mn = t->n;
        }
        if (!p->split) return stage(r, i + 1, m, mn, at_start);
        d.base = m;
        tk_splitter_init(&sp, TK_MERGED_NEXT, to_next, &d);
        return feed_chars(p, pred_char, m, mn, &sp);
    }
    case P_DIGITS:
        return split_chars(r, i, pred_numeric, p->individual ? TK_ISOLATED : TK_CONTIGUOUS, s, n, at_start);
    case P_PUNCT:
        return split_chars(r, i, pred_punct, p->behavior, s, n, at_start);
    case P_WHITESPACE:
        return whitespace(r, i, s, n, at_start);
    case P_WS_SPLIT:
        return split_chars(r, i, pred_space, TK_REMOVED, s, n, at_start);
    case P_BERT:
        tk_splitter_init(&sp, TK_REMOVED, bert_word, &d);
        return feed_chars(p, pred_space, s, n, &sp);
    case P_CHAR_DELIM:
        return split_chars(r, i, pred_char, TK_REMOVED, s, n, at_start);
    }
    return -1;
}

int tk_pretokenize(const tk_pretok *p, tk_scratch *sc, const char *s, size_t n, int at_start, tk_piece_fn fn,
                   void *ctx) {
    if (n == 0) return 0;
    run r = {p->stages, p->nstages, sc, fn, ctx, calloc(2 * p->nstages, sizeof(tk_buf))};
    if (!r.bufs) return -1;
    int rc = stage(&r, 0, s, n, at_start) ? -1 : 0;
    for (size_t i = 0; i < 2 * p->nstages; i++) tk_buf_free(&r.bufs[i]);
    free(r.bufs);
    return rc;
}
