/* chat_text.h: the byte-string helpers the chat reply code shares: whitespace, finding a marker, and how
 * much of a text's tail may still become one. */
#ifndef CF_TEXT_CHAT_TEXT_H
#define CF_TEXT_CHAT_TEXT_H

#include <stddef.h>
#include <string.h>

static inline int cf_is_ws(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

static inline size_t cf_ws_prefix(const char *s, size_t n) {
    size_t i = 0;
    while (i < n && cf_is_ws(s[i])) i++;
    return i;
}

/* Where m first occurs in s[0, n), or n. */
static inline size_t cf_find(const char *s, size_t n, const char *m) {
    size_t k = strlen(m);
    for (size_t i = 0; i + k <= n; i++)
        if (s[i] == m[0] && memcmp(s + i, m, k) == 0) return i;
    return n;
}

static inline int cf_starts_with(const char *s, size_t n, const char *m) {
    size_t k = strlen(m);
    return n >= k && memcmp(s, m, k) == 0;
}

/* s[0, n) is a proper beginning of m. */
static inline int cf_begins(const char *s, size_t n, const char *m) {
    size_t k = strlen(m);
    return n < k && memcmp(s, m, n) == 0;
}

/* The length of the longest tail of s[0, n) that is a proper beginning of m. */
static inline size_t cf_partial_tail(const char *s, size_t n, const char *m) {
    size_t k = strlen(m);
    for (size_t l = k - 1 < n ? k - 1 : n; l > 0; l--)
        if (memcmp(s + n - l, m, l) == 0) return l;
    return 0;
}

#endif
