/* tok_decode.c: tokenizer.json decoders: ByteLevel, ByteFallback, Fuse, Metaspace, Replace, Strip,
 * BPEDecoder and Sequence, each a decode_chain over a list of token strings as in HF tokenizers 0.23.
 * Where HF would panic (Strip asked to cut more than a token holds) the cut is clamped instead. */
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "text/tok_impl.h"

enum { D_BYTELEVEL, D_BYTEFALLBACK, D_FUSE, D_METASPACE, D_REPLACE, D_STRIP, D_BPE, D_SEQ };

struct tk_decoder {
    int kind;
    int32_t ch;         /* Metaspace replacement, Strip content */
    int prepend_never;  /* Metaspace */
    size_t start, stop; /* Strip */
    tk_regex *re;       /* Replace */
    char *str;          /* Replace content, BPEDecoder suffix */
    size_t str_len;
    tk_decoder **kids;
    size_t nkids;
};

void tk_decoder_free(tk_decoder *d) {
    if (!d) return;
    for (size_t i = 0; i < d->nkids; i++) tk_decoder_free(d->kids[i]);
    free(d->kids);
    tk_regex_free(d->re);
    free(d->str);
    free(d);
}

static int one_char(const char *s, int32_t *cp) {
    if (!s || !*s) return 0;
    size_t n = strlen(s);
    return tk_utf8_valid_prefix(s, n) == n && tk_utf8_next(s, n, cp) == n;
}

static int dup(const char *s, char **out, size_t *len) {
    *len = strlen(s);
    *out = malloc(*len + 1);
    if (!*out) return -1;
    memcpy(*out, s, *len + 1);
    return 0;
}

cinfer_status tk_decoder_parse(const cJSON *j, tk_decoder **out, cinfer_error *err) {
    *out = NULL;
    const char *type = tk_json_type(j);
    if (!type) return cf_fail(err, CINFER_E_FORMAT, "decoder without a \"type\"");
    static const char *const names[] = {"ByteLevel", "ByteFallback", "Fuse", "Metaspace", "Replace", "Strip",
                                        "BPEDecoder", "Sequence"};
    int kind = -1;
    for (int i = 0; i < (int)(sizeof names / sizeof *names); i++)
        if (strcmp(type, names[i]) == 0) kind = i;
    if (kind < 0) return cf_fail(err, CINFER_E_UNSUPPORTED, "decoder type %s is not supported", type);
    tk_decoder *d = calloc(1, sizeof *d);
    if (!d) return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory loading the tokenizer");
    d->kind = kind;
    cinfer_status st = CINFER_OK;
    switch (kind) {
    case D_METASPACE: {
        const char *scheme = tk_json_str(j, "prepend_scheme");
        if (!one_char(tk_json_str(j, "replacement"), &d->ch))
            st = cf_fail(err, CINFER_E_FORMAT, "Metaspace decoder: \"replacement\" must be one character");
        d->prepend_never = (scheme && strcmp(scheme, "never") == 0) || !tk_json_bool(j, "add_prefix_space", 1);
        break;
    }
    case D_REPLACE: {
        const char *content = tk_json_str(j, "content");
        if (!content) st = cf_fail(err, CINFER_E_FORMAT, "Replace decoder without a \"content\" string");
        if (!st) st = tk_pattern_parse(cJSON_GetObjectItemCaseSensitive(j, "pattern"), "Replace decoder", &d->re, err);
        if (!st && dup(content, &d->str, &d->str_len))
            st = cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory loading the tokenizer");
        break;
    }
    case D_STRIP: {
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(j, "start"), *b = cJSON_GetObjectItemCaseSensitive(j, "stop");
        if (!one_char(tk_json_str(j, "content"), &d->ch) || !cJSON_IsNumber(a) || !cJSON_IsNumber(b) ||
            a->valuedouble < 0 || b->valuedouble < 0)
            st = cf_fail(err, CINFER_E_FORMAT, "Strip decoder needs \"content\" (one character), \"start\" and \"stop\"");
        else {
            d->start = (size_t)a->valuedouble;
            d->stop = (size_t)b->valuedouble;
        }
        break;
    }
    case D_BPE: {
        const char *suffix = tk_json_str(j, "suffix");
        if (dup(suffix ? suffix : "</w>", &d->str, &d->str_len))
            st = cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory loading the tokenizer");
        break;
    }
    case D_SEQ: {
        const cJSON *arr = cJSON_GetObjectItemCaseSensitive(j, "decoders");
        if (!cJSON_IsArray(arr)) {
            st = cf_fail(err, CINFER_E_FORMAT, "Sequence decoder without \"decoders\"");
            break;
        }
        size_t k = (size_t)cJSON_GetArraySize(arr);
        if (k && !(d->kids = calloc(k, sizeof *d->kids))) {
            st = cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory loading the tokenizer");
            break;
        }
        const cJSON *it;
        cJSON_ArrayForEach(it, arr) {
            if ((st = tk_decoder_parse(it, &d->kids[d->nkids], err))) break;
            d->nkids++;
        }
        break;
    }
    }
    if (st) {
        tk_decoder_free(d);
        return st;
    }
    *out = d;
    return CINFER_OK;
}

static const char *str_at(const tk_strs *s, size_t i) { return s->text.p + s->off[i]; }

static void bytelevel(const tk_strs *in, tk_strs *out) {
    tk_buf bytes = {0}, fixed = {0};
    for (size_t i = 0; i < in->n; i++) {
        const char *t = str_at(in, i);
        size_t n = in->len[i], j = 0, mark = bytes.n;
        int all = 1;
        while (j < n && all) {
            int32_t cp;
            j += tk_utf8_next(t + j, n - j, &cp);
            int b = tk_char_byte(cp);
            if (b < 0) all = 0;
            else tk_buf_putc(&bytes, (char)b);
        }
        if (!all) { /* a character outside the byte alphabet: the token's own bytes */
            bytes.n = mark;
            tk_buf_put(&bytes, t, n);
        }
    }
    tk_utf8_repair(bytes.p ? bytes.p : "", bytes.n, &fixed);
    tk_strs_add(out, fixed.p ? fixed.p : "", fixed.n);
    if (bytes.oom || fixed.oom) out->oom = 1;
    tk_buf_free(&bytes);
    tk_buf_free(&fixed);
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* "<0xHH>" as Rust's u8::from_str_radix(&t[3..5], 16) reads it (a leading '+' is accepted). */
static int byte_token(const char *t, size_t n) {
    if (n != 6 || memcmp(t, "<0x", 3) != 0 || t[5] != '>') return -1;
    if (t[3] == '+') return hexval(t[4]);
    int h = hexval(t[3]), l = hexval(t[4]);
    return h < 0 || l < 0 ? -1 : h * 16 + l;
}

static void flush_bytes(tk_buf *pend, tk_strs *out) {
    if (!pend->n) return;
    if (tk_utf8_valid_prefix(pend->p, pend->n) == pend->n) tk_strs_add(out, pend->p, pend->n);
    else
        for (size_t k = 0; k < pend->n; k++) tk_strs_add(out, "\xEF\xBF\xBD", 3);
    pend->n = 0;
}

static void bytefallback(const tk_strs *in, tk_strs *out) {
    tk_buf pend = {0};
    for (size_t i = 0; i < in->n; i++) {
        int b = byte_token(str_at(in, i), in->len[i]);
        if (b >= 0) {
            tk_buf_putc(&pend, (char)b);
            continue;
        }
        flush_bytes(&pend, out);
        tk_strs_add(out, str_at(in, i), in->len[i]);
    }
    flush_bytes(&pend, out);
    if (pend.oom) out->oom = 1;
    tk_buf_free(&pend);
}

static void metaspace(const tk_decoder *d, const tk_strs *in, tk_strs *out) {
    tk_buf t = {0};
    for (size_t i = 0; i < in->n; i++) {
        const char *s = str_at(in, i);
        size_t n = in->len[i];
        t.n = 0;
        for (size_t j = 0; j < n;) {
            int32_t cp;
            size_t k = tk_utf8_next(s + j, n - j, &cp);
            if (cp != d->ch) tk_buf_put(&t, s + j, k);
            else if (i != 0 || d->prepend_never) tk_buf_putc(&t, ' ');
            j += k;
        }
        tk_strs_add(out, t.p ? t.p : "", t.n);
    }
    if (t.oom) out->oom = 1;
    tk_buf_free(&t);
}

static int replace(const tk_decoder *d, tk_scratch *sc, const tk_strs *in, tk_strs *out) {
    tk_buf t = {0};
    int rc = 0;
    for (size_t i = 0; i < in->n && rc >= 0; i++) {
        const char *s = str_at(in, i);
        size_t n = in->len[i], prev = 0, a, b;
        tk_regex_iter it;
        tk_regex_iter_init(&it, s, n);
        t.n = 0;
        while ((rc = tk_regex_next(d->re, sc, &it, &a, &b)) == 1) {
            tk_buf_put(&t, s + prev, a - prev);
            tk_buf_put(&t, d->str, d->str_len);
            prev = b;
        }
        if (rc == TK_MATCH_LIMIT)
            tk_scratch_fail(sc, "decoder Replace pattern '%.200s' exceeded its match limit on a token of %zu bytes",
                            tk_regex_source(d->re), n);
        tk_buf_put(&t, s + prev, n - prev);
        tk_strs_add(out, t.p ? t.p : "", t.n);
    }
    if (t.oom) out->oom = 1;
    tk_buf_free(&t);
    return rc < 0 ? -1 : 0;
}

static void strip(const tk_decoder *d, const tk_strs *in, tk_strs *out) {
    for (size_t i = 0; i < in->n; i++) {
        const char *s = str_at(in, i);
        size_t n = in->len[i], a = 0, b = n;
        int32_t cp;
        for (size_t k = 0; k < d->start && a < n; k++) {
            size_t len = tk_utf8_next(s + a, n - a, &cp);
            if (cp != d->ch) break;
            a += len;
        }
        for (size_t k = 0; k < d->stop && b > 0; k++) {
            size_t st = tk_utf8_last(s, b);
            tk_utf8_next(s + st, b - st, &cp);
            if (cp != d->ch) break;
            b = st;
        }
        tk_strs_add(out, s + a, b > a ? b - a : 0);
    }
}

/* Rust's str::replace(pattern, with) for BPEDecoder. */
static void replace_all(const char *s, size_t n, const char *pat, size_t pl, const char *with, size_t wl, tk_buf *t) {
    if (pl == 0) {
        tk_buf_put(t, with, wl);
        for (size_t j = 0; j < n;) {
            size_t k = tk_utf8_len((unsigned char)s[j]);
            if (k > n - j) k = n - j;
            tk_buf_put(t, s + j, k);
            tk_buf_put(t, with, wl);
            j += k;
        }
        return;
    }
    size_t j = 0, prev = 0;
    while (j + pl <= n) {
        if (memcmp(s + j, pat, pl) == 0) {
            tk_buf_put(t, s + prev, j - prev);
            tk_buf_put(t, with, wl);
            j += pl;
            prev = j;
        } else {
            j++;
        }
    }
    tk_buf_put(t, s + prev, n - prev);
}

int tk_decode_chain(const tk_decoder *d, tk_scratch *sc, tk_strs *io) {
    if (d->kind == D_SEQ) {
        for (size_t i = 0; i < d->nkids; i++)
            if (tk_decode_chain(d->kids[i], sc, io)) return -1;
        return 0;
    }
    tk_strs out = *tk_scratch_strs(sc); /* reused storage: no fresh pages for every step */
    tk_strs_reset(&out);
    out.oom = 0;
    int rc = 0;
    tk_strs_reserve(&out, io->n, io->text.n + 16);
    switch (d->kind) {
    case D_BYTELEVEL:
        bytelevel(io, &out);
        break;
    case D_BYTEFALLBACK:
        bytefallback(io, &out);
        break;
    case D_FUSE:
        tk_strs_add(&out, io->text.p ? io->text.p : "", io->text.n); /* the strings lie back to back */
        break;
    case D_METASPACE:
        metaspace(d, io, &out);
        break;
    case D_REPLACE:
        rc = replace(d, sc, io, &out);
        break;
    case D_STRIP:
        strip(d, io, &out);
        break;
    case D_BPE: {
        tk_buf t = {0};
        for (size_t i = 0; i < io->n; i++) {
            t.n = 0;
            replace_all(str_at(io, i), io->len[i], d->str, d->str_len, i + 1 == io->n ? "" : " ",
                        i + 1 == io->n ? 0 : 1, &t);
            tk_strs_add(&out, t.p ? t.p : "", t.n);
        }
        if (t.oom) out.oom = 1;
        tk_buf_free(&t);
        break;
    }
    }
    *tk_scratch_strs(sc) = *io;
    *io = out;
    return rc || out.oom ? -1 : 0;
}
