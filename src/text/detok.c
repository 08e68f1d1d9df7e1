/* detok.c: incremental detokenization with a prefix offset (start of the re-decoded window) and a read
 * offset (first token whose text is not handed out yet). Each push decodes the window twice — up to the
 * read offset and up to the end — and hands out the difference once it is final: no trailing U+FFFD
 * from a split multi-byte character and no incomplete UTF-8 tail. */
#include "text/detok.h"

#include <stdlib.h>
#include <string.h>
#include "base/status.h"

struct cf_detok {
    cf_decode_fn decode;
    const void *ctx;
    int skip_special;
    int32_t *ids;
    size_t n, cap;
    size_t prefix_offset, read_offset;
    char *out; /* last chunk handed out */
};

cinfer_status cf_detok_create(cf_decode_fn decode, const void *ctx, int skip_special, cf_detok **out,
                              cinfer_error *err) {
    *out = NULL;
    if (!decode) return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "detokenizer needs a decode function");
    cf_detok *d = calloc(1, sizeof *d);
    if (!d) return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory creating a detokenizer");
    d->decode = decode;
    d->ctx = ctx;
    d->skip_special = skip_special;
    *out = d;
    return CINFER_OK;
}

void cf_detok_free(cf_detok *d) {
    if (!d) return;
    free(d->ids);
    free(d->out);
    free(d);
}

size_t cf_utf8_complete_prefix(const char *s, size_t n) {
    /* look at most 3 bytes back for the start of the last sequence */
    size_t i = n, back = 0;
    while (i > 0 && back < 4 && ((unsigned char)s[i - 1] & 0xC0) == 0x80) { i--; back++; }
    if (i == 0) return n;
    unsigned char lead = (unsigned char)s[i - 1];
    size_t need = lead >= 0xF0 && lead <= 0xF4 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC2 && lead < 0xE0 ? 2 : 0;
    if (need == 0) return n;          /* ASCII or an invalid lead: nothing can complete it */
    size_t have = back + 1;
    return have < need ? i - 1 : n;   /* an unfinished sequence waits for more bytes */
}

static int ends_with_replacement(const char *s, size_t n) {
    return n >= 3 && (unsigned char)s[n - 3] == 0xEF && (unsigned char)s[n - 2] == 0xBF && (unsigned char)s[n - 1] == 0xBD;
}

/* Decodes ids[from:to]. */
static cinfer_status window(cf_detok *d, size_t from, size_t to, char **text, size_t *len, cinfer_error *err) {
    if (from == to) {
        *text = calloc(1, 1);
        *len = 0;
        return *text ? CINFER_OK : cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory detokenizing");
    }
    return d->decode(d->ctx, d->ids + from, to - from, d->skip_special, text, len, err);
}

/* Hands out new_text past prefix_len, starting on a character boundary. */
static cinfer_status hand_out(cf_detok *d, const char *new_text, size_t new_len, size_t prefix_len,
                              const char **text, size_t *len, cinfer_error *err) {
    size_t from = prefix_len < new_len ? prefix_len : new_len;
    while (from < new_len && ((unsigned char)new_text[from] & 0xC0) == 0x80) from++;
    free(d->out);
    d->out = malloc(new_len - from + 1);
    if (!d->out) return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory detokenizing");
    memcpy(d->out, new_text + from, new_len - from);
    d->out[new_len - from] = 0;
    *text = d->out;
    *len = new_len - from;
    return CINFER_OK;
}

cinfer_status cf_detok_push(cf_detok *d, int32_t id, const char **text, size_t *len, cinfer_error *err) {
    *text = "";
    *len = 0;
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 64;
        int32_t *ids = realloc(d->ids, cap * sizeof *ids);
        if (!ids) return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory detokenizing");
        d->ids = ids;
        d->cap = cap;
    }
    d->ids[d->n++] = id;
    char *prefix = NULL, *full = NULL;
    size_t plen = 0, flen = 0;
    cinfer_status s = window(d, d->prefix_offset, d->read_offset, &prefix, &plen, err);
    if (s == CINFER_OK) s = window(d, d->prefix_offset, d->n, &full, &flen, err);
    if (s != CINFER_OK) {
        d->n--;
        free(prefix);
        return s;
    }
    if (flen > plen && !ends_with_replacement(full, flen) && cf_utf8_complete_prefix(full, flen) == flen) {
        s = hand_out(d, full, flen, plen, text, len, err);
        if (s == CINFER_OK) {
            d->prefix_offset = d->read_offset;
            d->read_offset = d->n;
        }
    }
    free(prefix);
    free(full);
    return s;
}

cinfer_status cf_detok_flush(cf_detok *d, const char **text, size_t *len, cinfer_error *err) {
    *text = "";
    *len = 0;
    cinfer_status s = CINFER_OK;
    if (d->read_offset < d->n) {
        char *prefix = NULL, *full = NULL;
        size_t plen = 0, flen = 0;
        s = window(d, d->prefix_offset, d->read_offset, &prefix, &plen, err);
        if (s == CINFER_OK) s = window(d, d->prefix_offset, d->n, &full, &flen, err);
        if (s == CINFER_OK && flen > plen) s = hand_out(d, full, flen, plen, text, len, err);
        free(prefix);
        free(full);
    }
    if (s == CINFER_OK) d->n = d->prefix_offset = d->read_offset = 0;
    return s;
}
