/* tok_normalize.c: tokenizer.json normalizers: NFC, NFD, NFKC, NFKD (utf8proc), Lowercase, Strip,
 * StripAccents, Replace, Prepend, ByteLevel and Sequence, each as HF tokenizers 0.23 applies it to
 * one piece of text. */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "base/status.h"
#include "text/tok_impl.h"

enum { N_NFC, N_NFD, N_NFKC, N_NFKD, N_LOWER, N_STRIP, N_STRIP_ACCENTS, N_REPLACE, N_PREPEND, N_BYTELEVEL, N_SEQ };
static const char *const names[] = {"NFC", "NFD", "NFKC", "NFKD", "Lowercase", "Strip", "StripAccents",
                                    "Replace", "Prepend", "ByteLevel", "Sequence"};

/* A normalized text may be at most GROWTH x its input + SLACK bytes. The largest real growth is
 * NFKD (U+FDFA: 3 bytes to 33) followed by ByteLevel (x2); anything past the bound is a chain of
 * Replace or Prepend normalizers multiplying the text. */
enum { GROWTH = 64, SLACK = 1 << 16 };

struct tk_normalizer {
    int kind;
    int left, right;   /* Strip */
    tk_regex *re;      /* Replace */
    char *str;         /* Replace content, Prepend prefix */
    size_t str_len;
    tk_normalizer **kids; /* Sequence */
    size_t nkids;
    int pos; /* 1-based place in the flattened chain, for messages */
};

void tk_normalizer_free(tk_normalizer *n) {
    if (!n) return;
    for (size_t i = 0; i < n->nkids; i++) tk_normalizer_free(n->kids[i]);
    free(n->kids);
    tk_regex_free(n->re);
    free(n->str);
    free(n);
}

static cinfer_status dup_str(const char *s, char **out, size_t *len, cinfer_error *err) {
    *len = strlen(s);
    *out = malloc(*len + 1);
    if (!*out) return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory loading the tokenizer");
    memcpy(*out, s, *len + 1);
    return CINFER_OK;
}

cinfer_status tk_pattern_parse(const cJSON *pat, const char *what, tk_regex **out, cinfer_error *err) {
    const char *s = tk_json_str(pat, "String");
    if (s) return tk_regex_new(s, strlen(s), 1, out, err);
    s = tk_json_str(pat, "Regex");
    if (s) return tk_regex_new(s, strlen(s), 0, out, err);
    return cf_fail(err, CINFER_E_FORMAT, "%s: \"pattern\" must be {\"String\": ...} or {\"Regex\": ...}", what);
}

static cinfer_status parse(const cJSON *j, int *pos, tk_normalizer **out, cinfer_error *err) {
    *out = NULL;
    const char *type = tk_json_type(j);
    if (!type) return cf_fail(err, CINFER_E_FORMAT, "normalizer without a \"type\"");
    int kind = -1;
    for (int i = 0; i < (int)(sizeof names / sizeof *names); i++)
        if (strcmp(type, names[i]) == 0) kind = i;
    if (kind < 0) return cf_fail(err, CINFER_E_UNSUPPORTED, "normalizer type %s is not supported", type);
    tk_normalizer *n = calloc(1, sizeof *n);
    if (!n) return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory loading the tokenizer");
    n->kind = kind;
    if (kind != N_SEQ) n->pos = ++*pos;
    cinfer_status st = CINFER_OK;
    if (kind == N_STRIP) {
        n->left = tk_json_bool(j, "strip_left", 1);
        n->right = tk_json_bool(j, "strip_right", 1);
    } else if (kind == N_REPLACE) {
        const char *content = tk_json_str(j, "content");
        if (!content) st = cf_fail(err, CINFER_E_FORMAT, "Replace normalizer without a \"content\" string");
        if (!st) st = tk_pattern_parse(cJSON_GetObjectItemCaseSensitive(j, "pattern"), "Replace normalizer", &n->re, err);
        if (!st) st = dup_str(content, &n->str, &n->str_len, err);
    } else if (kind == N_PREPEND) {
        const char *p = tk_json_str(j, "prepend");
        if (!p) st = cf_fail(err, CINFER_E_FORMAT, "Prepend normalizer without a \"prepend\" string");
        else st = dup_str(p, &n->str, &n->str_len, err);
    } else if (kind == N_SEQ) {
        const cJSON *arr = cJSON_GetObjectItemCaseSensitive(j, "normalizers");
        if (!cJSON_IsArray(arr)) st = cf_fail(err, CINFER_E_FORMAT, "Sequence normalizer without \"normalizers\"");
        size_t k = st ? 0 : (size_t)cJSON_GetArraySize(arr);
        if (k && !(n->kids = calloc(k, sizeof *n->kids)))
            st = cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory loading the tokenizer");
        const cJSON *it;
        if (!st) cJSON_ArrayForEach(it, arr) {
            if ((st = parse(it, pos, &n->kids[n->nkids], err))) break;
            n->nkids++;
        }
    }
    if (st) {
        tk_normalizer_free(n);
        return st;
    }
    *out = n;
    return CINFER_OK;
}

cinfer_status tk_normalizer_parse(const cJSON *j, tk_normalizer **out, cinfer_error *err) {
    int pos = 0;
    return parse(j, &pos, out, err);
}

static int nf_map(int kind, const char *s, size_t len, tk_buf *out) {
    int opt = UTF8PROC_STABLE;
    opt |= (kind == N_NFC || kind == N_NFKC) ? UTF8PROC_COMPOSE : UTF8PROC_DECOMPOSE;
    if (kind == N_NFKC || kind == N_NFKD) opt |= UTF8PROC_COMPAT;
    utf8proc_uint8_t *dst = NULL;
    utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)len, &dst, (utf8proc_option_t)opt);
    if (r < 0) {
        free(dst);
        return -1;
    }
    tk_buf_put(out, dst, (size_t)r);
    free(dst);
    return 0;
}

/* utf8proc's NFx, except for the code points HF's older tables leave alone, which are copied and
 * cut the text into independently normalized runs. */
static int unicode_nf(int kind, const char *s, size_t len, tk_buf *out) {
    /* Code points below U+0300 are stable under NFC; ASCII is stable under all four forms. */
    int32_t limit = kind == N_NFC ? 0x300 : 0x80;
    const tk_range *keep = kind == N_NFC ? tk_keep_nfc : kind == N_NFD ? tk_keep_nfd : kind == N_NFKC ? tk_keep_nfkc
                                                                                                     : tk_keep_nfkd;
    size_t nkeep = kind == N_NFC ? tk_keep_nfc_n : kind == N_NFD ? tk_keep_nfd_n : kind == N_NFKC ? tk_keep_nfkc_n
                                                                                                   : tk_keep_nfkd_n;
    size_t i = 0, run = 0;
    int plain = 1;
    while (i < len) {
        int32_t cp;
        size_t k = tk_utf8_next(s + i, len - i, &cp);
        if (cp >= limit) plain = 0;
        if (cp >= limit && nkeep && tk_in_ranges(keep, nkeep, cp)) {
            if (run < i && nf_map(kind, s + run, i - run, out)) return -1;
            tk_buf_put(out, s + i, k);
            run = i + k;
        }
        i += k;
    }
    if (plain) tk_buf_put(out, s, len);
    else if (run < len && nf_map(kind, s + run, len - run, out)) return -1;
    return out->oom ? -1 : 0;
}

static void lowercase(const char *s, size_t len, tk_buf *out) {
    tk_buf_reserve(out, len);
    for (size_t i = 0; i < len;) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x80) {
            tk_buf_putc(out, (char)(c >= 'A' && c <= 'Z' ? c + 32 : c));
            i++;
            continue;
        }
        int32_t cp;
        size_t k = tk_utf8_next(s + i, len - i, &cp);
        size_t lo = 0, hi = tk_lowercase_n;
        const tk_lower *m = NULL;
        while (lo < hi && !m) {
            size_t mid = (lo + hi) / 2;
            if ((uint32_t)cp < tk_lowercase[mid].cp) hi = mid;
            else if ((uint32_t)cp > tk_lowercase[mid].cp) lo = mid + 1;
            else m = &tk_lowercase[mid];
        }
        if (!m) tk_buf_put(out, s + i, k);
        else {
            tk_buf_put_cp(out, (int32_t)m->a);
            if (m->b) tk_buf_put_cp(out, (int32_t)m->b);
        }
        i += k;
    }
}

static void strip(const char *s, size_t len, int left, int right, tk_buf *out) {
    size_t a = 0, b = len;
    int32_t cp;
    while (left && a < b) {
        size_t k = tk_utf8_next(s + a, b - a, &cp);
        if (!tk_is_whitespace(cp)) break;
        a += k;
    }
    while (right && b > a) {
        size_t st = tk_utf8_last(s, b);
        tk_utf8_next(s + st, b - st, &cp);
        if (!tk_is_whitespace(cp)) break;
        b = st;
    }
    tk_buf_put(out, s + a, b - a);
}

/* The bound of a chain, and the length of the text it started from. */
typedef struct bound {
    size_t max, input;
} bound;

static int too_long(const tk_normalizer *n, tk_scratch *sc, const bound *bd, const tk_buf *out) {
    if (out->n <= bd->max) return 0;
    tk_scratch_fail(sc, "normalizer %s #%d grows the text past %zu bytes (input of %zu bytes)", names[n->kind],
                    n->pos, bd->max, bd->input);
    return 1;
}

static int replace(const tk_normalizer *n, tk_scratch *sc, const bound *bd, const char *s, size_t len, tk_buf *out) {
    tk_regex_iter it;
    size_t prev = 0, a, b;
    int rc;
    tk_regex_iter_init(&it, s, len);
    while ((rc = tk_regex_next(n->re, sc, &it, &a, &b)) == 1) {
        tk_buf_put(out, s + prev, a - prev);
        tk_buf_put(out, n->str, n->str_len);
        prev = b;
        if (too_long(n, sc, bd, out)) return -1;
    }
    if (rc == TK_MATCH_LIMIT)
        tk_scratch_fail(sc, "normalizer Replace #%d regex '%.200s' exceeded its match limit on input of %zu bytes",
                        n->pos, tk_regex_source(n->re), len);
    if (rc < 0) return -1;
    tk_buf_put(out, s + prev, len - prev);
    return 0;
}

static int normalize(const tk_normalizer *n, tk_scratch *sc, const bound *bd, const char *s, size_t len,
                     tk_buf *out) {
    out->n = 0;
    out->oom = 0;
    switch (n->kind) {
    case N_NFC:
    case N_NFD:
    case N_NFKC:
    case N_NFKD:
        if (unicode_nf(n->kind, s, len, out)) return -1;
        break;
    case N_LOWER:
        lowercase(s, len, out);
        break;
    case N_STRIP:
        strip(s, len, n->left, n->right, out);
        break;
    case N_STRIP_ACCENTS:
        for (size_t i = 0; i < len;) {
            int32_t cp;
            size_t k = tk_utf8_next(s + i, len - i, &cp);
            if (!tk_is_mark(cp)) tk_buf_put(out, s + i, k);
            i += k;
        }
        break;
    case N_REPLACE:
        if (replace(n, sc, bd, s, len, out)) return -1;
        break;
    case N_PREPEND:
        if (len) tk_buf_put(out, n->str, n->str_len);
        tk_buf_put(out, s, len);
        break;
    case N_BYTELEVEL:
        for (size_t i = 0; i < len; i++) tk_buf_put_cp(out, tk_byte_cp((unsigned char)s[i]));
        break;
    case N_SEQ: {
        tk_buf tmp[2] = {{0}, {0}};
        const char *cur = s;
        size_t cur_len = len;
        int rc = 0;
        for (size_t i = 0; i < n->nkids && !rc; i++) {
            tk_buf *dst = (i + 1 == n->nkids) ? out : &tmp[i & 1];
            rc = normalize(n->kids[i], sc, bd, cur, cur_len, dst);
            cur = dst->p ? dst->p : "";
            cur_len = dst->n;
        }
        if (!rc && n->nkids == 0) tk_buf_put(out, s, len);
        tk_buf_free(&tmp[0]);
        tk_buf_free(&tmp[1]);
        return rc || out->oom ? -1 : 0;
    }
    }
    if (out->oom || too_long(n, sc, bd, out)) return -1;
    return 0;
}

int tk_normalize(const tk_normalizer *n, tk_scratch *sc, const char *s, size_t len, tk_buf *out) {
    bound bd = {len > (SIZE_MAX - SLACK) / GROWTH ? SIZE_MAX : len * GROWTH + SLACK, len};
    return normalize(n, sc, &bd, s, len, out);
}
