/* tok_util.c: byte buffers, UTF-8 helpers, Unicode character classes and the hash maps used by the
 * tokenizer (see tok_util.h). */
#include "text/tok_util.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

void tk_buf_free(tk_buf *b) {
    free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
    b->oom = 0;
}

int tk_buf_reserve(tk_buf *b, size_t extra) {
    if (b->oom) return -1;
    if (extra > SIZE_MAX / 2 - b->n) {  /* the doubling below would wrap */
        b->oom = 1;
        return -1;
    }
    if (b->n + extra + 1 <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < b->n + extra + 1) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) {
        b->oom = 1;
        return -1;
    }
    b->p = p;
    b->cap = cap;
    b->p[b->n] = 0;
    return 0;
}

void tk_buf_put(tk_buf *b, const void *s, size_t n) {
    if (tk_buf_reserve(b, n)) return;
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

void tk_buf_putc(tk_buf *b, char c) {
    if (tk_buf_reserve(b, 1)) return;
    b->p[b->n++] = c;
    b->p[b->n] = 0;
}

void tk_buf_put_cp(tk_buf *b, int32_t cp) {
    char u[4];
    tk_buf_put(b, u, (size_t)tk_utf8_encode(cp, u));
}

char *tk_buf_take(tk_buf *b) {
    if (tk_buf_reserve(b, 0)) return NULL;
    char *p = b->p;
    b->p = NULL;
    b->n = b->cap = 0;
    return p;
}

size_t tk_utf8_last(const char *s, size_t n) {
    size_t i = n - 1;
    while (i > 0 && ((unsigned char)s[i] & 0xC0) == 0x80) i--;
    return i;
}

int tk_utf8_encode(int32_t cp, char out[4]) {
    if (cp < 0x80) { out[0] = (char)cp; return 1; }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Number of bytes of s[0..n) (n > 0) that form the maximal valid prefix of one UTF-8 character:
 * equal to the character's length when it is complete and well formed, smaller otherwise (0 only for
 * a byte that can never start a character). *full says whether the character is complete. */
static size_t utf8_subpart(const unsigned char *s, size_t n, int *full) {
    unsigned char c = s[0];
    size_t len;
    unsigned char lo = 0x80, hi = 0xBF;
    *full = 0;
    if (c < 0x80) { *full = 1; return 1; }
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c == 0xE0) { len = 3; lo = 0xA0; }
    else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) len = 3;
    else if (c == 0xED) { len = 3; hi = 0x9F; }
    else if (c == 0xF0) { len = 4; lo = 0x90; }
    else if (c >= 0xF1 && c <= 0xF3) len = 4;
    else if (c == 0xF4) { len = 4; hi = 0x8F; }
    else return 0;
    size_t i = 1;
    if (i >= n || s[i] < lo || s[i] > hi) return 1;
    for (i = 2; i < len; i++)
        if (i >= n || (s[i] & 0xC0) != 0x80) return i;
    *full = 1;
    return len;
}

size_t tk_utf8_valid_prefix(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        if (u[i] < 0x80) { i++; continue; }
        int full;
        size_t k = utf8_subpart(u + i, n - i, &full);
        if (!full) break;
        i += k;
    }
    return i;
}

void tk_utf8_repair(const char *s, size_t n, tk_buf *out) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, run = 0;
    while (i < n) {
        int full;
        size_t k = utf8_subpart(u + i, n - i, &full);
        if (full) { i += k; continue; }
        tk_buf_put(out, s + run, i - run);
        tk_buf_put(out, "\xEF\xBF\xBD", 3);
        i += k ? k : 1;
        run = i;
    }
    tk_buf_put(out, s + run, n - run);
}

int tk_is_whitespace(int32_t cp) {
    if (cp < 0x80) return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20;
    return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 ||
           cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

int tk_in_ranges(const tk_range *r, size_t n, int32_t cp) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if ((uint32_t)cp < r[mid].lo) hi = mid;
        else if ((uint32_t)cp > r[mid].hi) lo = mid + 1;
        else return 1;
    }
    return 0;
}

int tk_is_numeric(int32_t cp) {
    if (cp < 0x80) return cp >= '0' && cp <= '9';
    return tk_in_ranges(tk_numeric, tk_numeric_n, cp);
}

int tk_is_punct(int32_t cp) {
    if (cp < 0x80)
        return (cp >= 0x21 && cp <= 0x2F) || (cp >= 0x3A && cp <= 0x40) || (cp >= 0x5B && cp <= 0x60) ||
               (cp >= 0x7B && cp <= 0x7E);
    return tk_in_ranges(tk_punct, tk_punct_n, cp);
}

int tk_is_mark(int32_t cp) { return cp >= 0x300 && tk_in_ranges(tk_mark, tk_mark_n, cp); }

int tk_is_word(int32_t cp) {
    if (cp < 0x80)
        return (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || cp == '_';
    return tk_in_ranges(tk_word, tk_word_n, cp);
}

/* Printable bytes stand for themselves; the others (0x00-0x20, 0x7F-0xA0, 0xAD) move, in byte order,
 * to U+0100..U+0143. */
int32_t tk_byte_cp(unsigned char b) {
    if (b <= 0x20) return 256 + b;
    if (b >= 0x7F && b <= 0xA0) return b + 162;
    if (b == 0xAD) return 323;
    return b;
}

int tk_char_byte(int32_t cp) {
    if (cp >= 256 && cp <= 288) return cp - 256;
    if (cp >= 289 && cp <= 322) return cp - 162;
    if (cp == 323) return 0xAD;
    if ((cp >= '!' && cp <= '~') || (cp >= 0xA1 && cp <= 0xAC) || (cp >= 0xAE && cp <= 0xFF)) return cp;
    return -1;
}

uint64_t tk_hash(const void *p, size_t n) {
    const unsigned char *s = p;
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xC2B2AE3D27D4EB4Full);
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, s, 8);
        h = (h ^ v) * 0xFF51AFD7ED558CCDull;
        h ^= h >> 32;
        s += 8;
        n -= 8;
    }
    uint64_t v = 0;
    memcpy(&v, s, n);
    h = (h ^ v) * 0xC4CEB9FE1A85EC53ull;
    h ^= h >> 29;
    h *= 0xFF51AFD7ED558CCDull;
    return h ^ (h >> 32);
}

struct tk_strslot {
    uint64_t h;
    uint32_t off, len; /* len == UINT32_MAX: empty */
    int64_t val;
};

static size_t pow2_for(size_t expected) {
    size_t cap = 16;
    while (cap < expected * 2) cap *= 2;
    return cap;
}

static struct tk_strslot *strslots_new(size_t cap) {
    struct tk_strslot *s = malloc(cap * sizeof *s);
    if (!s) return NULL;
    for (size_t i = 0; i < cap; i++) s[i].len = UINT32_MAX;
    return s;
}

int tk_strmap_init(tk_strmap *m, size_t expected) {
    memset(m, 0, sizeof *m);
    m->cap = pow2_for(expected);
    m->slots = strslots_new(m->cap);
    return m->slots ? 0 : -1;
}

static int strmap_grow(tk_strmap *m) {
    size_t cap = m->cap * 2;
    struct tk_strslot *s = strslots_new(cap);
    if (!s) return -1;
    for (size_t i = 0; i < m->cap; i++) {
        if (m->slots[i].len == UINT32_MAX) continue;
        size_t j = m->slots[i].h & (cap - 1);
        while (s[j].len != UINT32_MAX) j = (j + 1) & (cap - 1);
        s[j] = m->slots[i];
    }
    free(m->slots);
    m->slots = s;
    m->cap = cap;
    return 0;
}

static size_t strmap_find(const tk_strmap *m, const char *k, size_t n, uint64_t h) {
    size_t j = h & (m->cap - 1);
    for (;;) {
        const struct tk_strslot *s = &m->slots[j];
        if (s->len == UINT32_MAX) return j;
        if (s->h == h && s->len == n && memcmp(m->keys.p + s->off, k, n) == 0) return j;
        j = (j + 1) & (m->cap - 1);
    }
}

int tk_strmap_put(tk_strmap *m, const char *k, size_t n, int64_t v) { return tk_strmap_put_h(m, k, n, tk_hash(k, n), v); }

int tk_strmap_put_h(tk_strmap *m, const char *k, size_t n, uint64_t h, int64_t v) {
    if (n >= UINT32_MAX || m->keys.n + n >= UINT32_MAX) return -1;
    if ((m->count + 1) * 4 >= m->cap * 3 && strmap_grow(m)) return -1;
    size_t j = strmap_find(m, k, n, h);
    struct tk_strslot *s = &m->slots[j];
    if (s->len == UINT32_MAX) {
        size_t off = m->keys.n;
        tk_buf_put(&m->keys, k, n);
        if (m->keys.oom) return -1;
        s->h = h;
        s->off = (uint32_t)off;
        s->len = (uint32_t)n;
        m->count++;
    }
    s->val = v;
    return 0;
}

int64_t tk_strmap_get(const tk_strmap *m, const char *k, size_t n) { return tk_strmap_get_h(m, k, n, tk_hash(k, n)); }

int64_t tk_strmap_get_h(const tk_strmap *m, const char *k, size_t n, uint64_t h) {
    if (!m->slots) return -1;
    const struct tk_strslot *s = &m->slots[strmap_find(m, k, n, h)];
    return s->len == UINT32_MAX ? -1 : s->val;
}

void tk_strmap_free(tk_strmap *m) {
    free(m->slots);
    tk_buf_free(&m->keys);
    memset(m, 0, sizeof *m);
}

static inline uint64_t mix64(uint64_t k) {
    k ^= k >> 33;
    k *= 0xFF51AFD7ED558CCDull;
    k ^= k >> 33;
    return k;
}

static int u64_alloc(tk_u64map *m, size_t cap) {
    m->slots = malloc(cap * sizeof *m->slots);
    if (!m->slots) return -1;
    for (size_t i = 0; i < cap; i++) m->slots[i].k = UINT64_MAX;
    m->cap = cap;
    return 0;
}

int tk_u64map_init(tk_u64map *m, size_t expected) {
    memset(m, 0, sizeof *m);
    return u64_alloc(m, pow2_for(expected));
}

int tk_u64map_put(tk_u64map *m, uint64_t k, uint64_t v) {
    if ((m->count + 1) * 4 >= m->cap * 3) {
        tk_u64map old = *m;
        if (u64_alloc(m, old.cap * 2)) {
            *m = old;
            return -1;
        }
        m->count = 0;
        for (size_t i = 0; i < old.cap; i++)
            if (old.slots[i].k != UINT64_MAX) tk_u64map_put(m, old.slots[i].k, old.slots[i].v);
        free(old.slots);
    }
    size_t j = mix64(k) & (m->cap - 1);
    while (m->slots[j].k != UINT64_MAX && m->slots[j].k != k) j = (j + 1) & (m->cap - 1);
    if (m->slots[j].k == UINT64_MAX) m->count++;
    m->slots[j] = (tk_u64slot){k, v};
    return 0;
}

int tk_u64map_get(const tk_u64map *m, uint64_t k, uint64_t *v) {
    if (!m->slots) return 0;
    size_t j = mix64(k) & (m->cap - 1);
    while (m->slots[j].k != UINT64_MAX) {
        if (m->slots[j].k == k) {
            *v = m->slots[j].v;
            return 1;
        }
        j = (j + 1) & (m->cap - 1);
    }
    return 0;
}

void tk_u64map_free(tk_u64map *m) {
    free(m->slots);
    memset(m, 0, sizeof *m);
}
