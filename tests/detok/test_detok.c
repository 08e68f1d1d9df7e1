/* test_detok.c: streaming detokenizer and stop matching. The detokenizer runs over a fixture decoder
 * that behaves like HF's SentencePiece decoders (▁ as space, <0xNN> byte fallback, invalid bytes as
 * U+FFFD per maximal subpart, the first leading space stripped, special tokens skippable); every stream
 * must concatenate to the full decode in valid UTF-8 chunks. Stop matching runs over hand-made cases. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "text/detok.h"
#include "text/stop.h"

static int failures, checks;
#define CHECK(cond, ...) do { checks++; if (!(cond)) { failures++; fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } } while (0)

static const char *const VOCAB[] = {
    "<s>", "</s>", "\xe2\x96\x81Hello", ",", "\xe2\x96\x81world", "<0xE2>", "<0x82>", "<0xAC>", "\xe2\x96\x81",
    "<0xF0>", "<0x9F>", "<0x98>", "<0x80>", "\xc3\xa9", "\xe4\xbd\xa0\xe5\xa5\xbd", "e", "\xcc\x81", "<0xFF>", "!",
    "\xe2\x96\x81\xe2\x96\x81", "\xe2\x96\x81\xf0\x9f\x91\xa9\xe2\x80\x8d\xf0\x9f\x92\xbb", "<0xC3>", "<0xA9>", "<0xED>",
    "<0xA0>", "\xe2\x96\x81\xd7\xa9\xd7\x9c\xd7\x95\xd7\x9d"};
enum { NV = sizeof VOCAB / sizeof VOCAB[0] };

/* Appends the UTF-8 of raw bytes with each maximal invalid subpart replaced by U+FFFD (Python's
 * errors="replace"). */
static size_t sanitize(const unsigned char *in, size_t n, char *out) {
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        unsigned char b = in[i];
        size_t need = b < 0x80 ? 1 : (b >= 0xC2 && b <= 0xDF) ? 2 : (b >= 0xE0 && b <= 0xEF) ? 3 : (b >= 0xF0 && b <= 0xF4) ? 4 : 0;
        size_t k = 1;
        if (need > 1) {
            for (; k < need && i + k < n; k++) {
                unsigned char c = in[i + k];
                unsigned char lo = 0x80, hi = 0xBF;
                if (k == 1) {
                    if (b == 0xE0) lo = 0xA0;
                    else if (b == 0xED) hi = 0x9F;
                    else if (b == 0xF0) lo = 0x90;
                    else if (b == 0xF4) hi = 0x8F;
                }
                if (c < lo || c > hi) break;
            }
        }
        if (need && k == need) {
            memcpy(out + o, in + i, need);
            o += need;
            i += need;
        } else {
            memcpy(out + o, "\xef\xbf\xbd", 3);
            o += 3;
            i += need ? k : 1;
        }
    }
    return o;
}

static cinfer_status fixture_decode(const void *ctx, const int32_t *ids, size_t n, int skip_special, char **text,
                                    size_t *len, cinfer_error *err) {
    (void)ctx;
    (void)err;
    unsigned char *raw = malloc(n * 32 + 1);
    size_t r = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= NV) return CINFER_E_INVALID_ARGUMENT;
        const char *p = VOCAB[ids[i]];
        if (ids[i] <= 1 && skip_special) continue;
        unsigned v;
        if (sscanf(p, "<0x%2X>", &v) == 1 && strlen(p) == 6) { raw[r++] = (unsigned char)v; continue; }
        for (; *p; p++) {
            if (!strncmp(p, "\xe2\x96\x81", 3)) { raw[r++] = ' '; p += 2; }
            else raw[r++] = (unsigned char)*p;
        }
    }
    char *out = malloc(r * 3 + 1);
    size_t o = sanitize(raw, r, out);
    free(raw);
    size_t skip = (o > 0 && out[0] == ' ') ? 1 : 0;
    memmove(out, out + skip, o - skip);
    out[o - skip] = 0;
    *text = out;
    *len = o - skip;
    return CINFER_OK;
}

static int valid_utf8(const char *s, size_t n) {
    char *tmp = malloc(n * 3 + 1);
    size_t o = sanitize((const unsigned char *)s, n, tmp);
    int ok = o == n && memcmp(tmp, s, n) == 0;
    free(tmp);
    return ok;
}

static void stream_check(const int32_t *ids, size_t n, int skip_special, const char *label) {
    cf_detok *d;
    cinfer_error err;
    if (cf_detok_create(fixture_decode, NULL, skip_special, &d, &err) != CINFER_OK) { CHECK(0, "create"); return; }
    char *acc = malloc(n * 64 + 16);
    size_t an = 0;
    int chunks_ok = 1;
    for (size_t i = 0; i < n; i++) {
        const char *t;
        size_t l;
        if (cf_detok_push(d, ids[i], &t, &l, &err) != CINFER_OK) { CHECK(0, "push"); break; }
        if (!valid_utf8(t, l)) chunks_ok = 0;
        memcpy(acc + an, t, l);
        an += l;
    }
    const char *t;
    size_t l;
    CHECK(cf_detok_flush(d, &t, &l, &err) == CINFER_OK, "flush");
    memcpy(acc + an, t, l);
    an += l;
    char *full;
    size_t fl;
    fixture_decode(NULL, ids, n, skip_special, &full, &fl, &err);
    CHECK(chunks_ok, "%s: a chunk was not valid UTF-8", label);
    CHECK(an == fl && memcmp(acc, full, fl) == 0, "%s: stream '%.*s' != full decode '%s'", label, (int)an, acc, full);
    free(full);
    free(acc);
    cf_detok_free(d);
}

static void test_detok(void) {
    /* byte fallback: nothing is handed out until the character completes */
    cf_detok *d;
    cinfer_error err;
    const char *t;
    size_t l;
    cf_detok_create(fixture_decode, NULL, 1, &d, &err);
    cf_detok_push(d, 2, &t, &l, &err);
    CHECK(l == 5 && !memcmp(t, "Hello", 5), "first token without its leading space, got '%.*s'", (int)l, t);
    cf_detok_push(d, 8, &t, &l, &err);
    CHECK(l == 1 && t[0] == ' ', "a lone space token is handed out, got '%.*s'", (int)l, t);
    cf_detok_push(d, 5, &t, &l, &err);
    CHECK(l == 0, "0xE2 alone is held back");
    cf_detok_push(d, 6, &t, &l, &err);
    CHECK(l == 0, "0xE2 0x82 is held back");
    cf_detok_push(d, 7, &t, &l, &err);
    CHECK(l == 3 && !memcmp(t, "\xe2\x82\xac", 3), "the euro sign comes out whole");
    cf_detok_push(d, 4, &t, &l, &err);
    CHECK(l == 6 && !memcmp(t, " world", 6), "a later leading space is kept, got '%.*s'", (int)l, t);
    cf_detok_push(d, 9, &t, &l, &err);
    cf_detok_push(d, 10, &t, &l, &err);
    CHECK(l == 0, "a half emoji is held back");
    cf_detok_flush(d, &t, &l, &err);
    CHECK(l == 3 && !memcmp(t, "\xef\xbf\xbd", 3), "flush turns the unfinished bytes into one U+FFFD, got %zu bytes", l);
    cf_detok_free(d);

    static const int32_t cases[][12] = {
        {0, 2, 3, 4, 18, 1},
        {2, 5, 6, 7, 9, 10, 11, 12, 4},
        {13, 14, 15, 16, 20, 25, 19, 8},
        {17, 2, 5, 6, 4, 21, 22, 23, 24, 18},
        {8, 8, 2, 9, 10, 5, 7, 17, 1, 0, 4},
        {5}, {9, 10, 11}, {0, 8, 4},
    };
    static const size_t lens[] = {6, 9, 8, 10, 11, 1, 3, 3};
    for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++) {
        char label[32];
        snprintf(label, sizeof label, "case %zu", k);
        stream_check(cases[k], lens[k], 1, label);
        stream_check(cases[k], lens[k], 0, label);
    }
    uint32_t seed = 12345;
    for (int k = 0; k < 400; k++) {
        int32_t ids[40];
        size_t n = 1 + (size_t)(k % 40);
        for (size_t i = 0; i < n; i++) {
            seed = seed * 1664525u + 1013904223u;
            ids[i] = (int32_t)((seed >> 8) % NV);
        }
        char label[32];
        snprintf(label, sizeof label, "random %d", k);
        stream_check(ids, n, k & 1, label);
    }
}

/* Feeds chunks (NULL-terminated) and returns everything handed out; *which gets the stop index. */
static char *run_stop(const char *const *stops, int n_stops, const char *const *chunks, int *stopped, int *which) {
    cf_stop *s;
    cinfer_error err;
    static char acc[1024];
    size_t an = 0;
    *stopped = 0;
    *which = -1;
    if (cf_stop_create(stops, n_stops, NULL, 0, &s, &err) != CINFER_OK) return NULL;
    cf_stop_result r;
    for (int i = 0; chunks[i]; i++) {
        cf_stop_feed(s, -1, chunks[i], strlen(chunks[i]), &r, &err);
        memcpy(acc + an, r.text, r.len);
        an += r.len;
        if (r.stopped && !*stopped) { *stopped = 1; *which = r.which; }
        if (r.len) CHECK(valid_utf8(r.text, r.len) || !chunks[i + 1], "stop handed out broken UTF-8");
    }
    cf_stop_flush(s, &r, &err);
    memcpy(acc + an, r.text, r.len);
    an += r.len;
    acc[an] = 0;
    cf_stop_free(s);
    return acc;
}

#define STOP_CASE(stops, chunks, want, want_stopped, want_which) do {                                  \
        int st_, wh_;                                                                                 \
        const char *got_ = run_stop(stops, (int)(sizeof stops / sizeof stops[0]), chunks, &st_, &wh_); \
        CHECK(got_ && !strcmp(got_, want), "stop: got '%s', want '%s'", got_ ? got_ : "(null)", want); \
        CHECK(st_ == want_stopped && wh_ == want_which, "stop: stopped=%d which=%d, want %d %d", st_, wh_, \
              want_stopped, want_which);                                                              \
    } while (0)

static void test_stop(void) {
    static const char *const end[] = {"</end>"};
    static const char *const c1[] = {"Hello </", "en", "d> tail", NULL};
    STOP_CASE(end, c1, "Hello ", 1, 0);
    static const char *const c2[] = {"abc<", "/x", " done", NULL};
    STOP_CASE(end, c2, "abc</x done", 0, -1);

    static const char *const overlap[] = {"abc", "b"};
    static const char *const c3[] = {"a", "b", "c", NULL};
    static const char *const c3b[] = {"abc", NULL};
    STOP_CASE(overlap, c3, "a", 1, 1);
    STOP_CASE(overlap, c3b, "a", 1, 1);
    static const char *const nested[] = {"b", "ab"};
    static const char *const c4[] = {"xab", NULL};
    STOP_CASE(nested, c4, "x", 1, 1);

    static const char *const hi[] = {"Hi"};
    static const char *const c5[] = {"Hi there", NULL};
    STOP_CASE(hi, c5, "", 1, 0);
    static const char *const c5b[] = {"H", "i", "!", NULL};
    STOP_CASE(hi, c5b, "", 1, 0);

    static const char *const euro[] = {"\xe2\x82\xac!"};
    static const char *const c6[] = {"a\xe2", "\x82", "\xac", "!", "more", NULL};
    STOP_CASE(euro, c6, "a", 1, 0);
    static const char *const c6b[] = {"a\xe2", "\x82\xac", "b", NULL};
    STOP_CASE(euro, c6b, "a\xe2\x82\xac" "b", 0, -1);

    static const char *const aab[] = {"aab"};
    static const char *const c7[] = {"a", "a", "a", "b", "c", NULL};
    STOP_CASE(aab, c7, "a", 1, 0);
    static const char *const c7b[] = {"a", "a", NULL};
    STOP_CASE(aab, c7b, "aa", 0, -1);

    /* held-back text comes out when a stop token ends generation; the token's text does not */
    cf_stop *s;
    cinfer_error err;
    static const char *const lt[] = {"<<"};
    static const int32_t ids[] = {2, 7};
    CHECK(cf_stop_create(lt, 1, ids, 2, &s, &err) == CINFER_OK, "create");
    cf_stop_result r;
    cf_stop_feed(s, 5, "x<", 2, &r, &err);
    CHECK(r.len == 1 && r.text[0] == 'x' && !r.stopped, "holds back a possible stop start");
    cf_stop_feed(s, 7, "</s>", 4, &r, &err);
    CHECK(r.len == 1 && r.text[0] == '<' && r.stopped && r.token == 7 && r.which == -1, "stop token");
    cf_stop_feed(s, 5, "after", 5, &r, &err);
    CHECK(r.len == 0 && r.stopped, "nothing after a stop");
    cf_stop_free(s);

    static const char *const bad[] = {"\xe2\x82"};
    CHECK(cf_stop_create(bad, 1, NULL, 0, &s, &err) == CINFER_E_INVALID_ARGUMENT, "broken UTF-8 stop refused");
}

int main(void) {
    test_detok();
    test_stop();
    printf("%d passed, %d failed\n", checks - failures, failures);
    return failures ? 1 : 0;
}
