/* buf.c: the growable byte buffer of buf.h. */
#include "server/buf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int reserve(cf_buf *b, size_t extra) {
    if (b->len + extra + 1 <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra + 1) {
        if (cap > (size_t)-1 / 2) return -1;
        cap *= 2;
    }
    char *d = realloc(b->data, cap);
    if (!d) return -1;
    b->data = d;
    b->cap = cap;
    return 0;
}

int cf_buf_append(cf_buf *b, const char *s, size_t n) {
    if (reserve(b, n)) return -1;
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = 0;
    return 0;
}

int cf_buf_puts(cf_buf *b, const char *s) {
    return cf_buf_append(b, s, strlen(s));
}

int cf_buf_printf(cf_buf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || reserve(b, (size_t)n)) return -1;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return 0;
}

void cf_buf_consume(cf_buf *b, size_t n) {
    if (n >= b->len) {
        b->len = 0;
        if (b->data) b->data[0] = 0;
        return;
    }
    memmove(b->data, b->data + n, b->len - n + 1);
    b->len -= n;
}

void cf_buf_free(cf_buf *b) {
    free(b->data);
    *b = (cf_buf){0};
}
