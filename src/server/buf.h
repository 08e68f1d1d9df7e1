/* buf.h: a growable byte buffer, the unit the server's writers append HTTP bodies and SSE events to. */
#ifndef CF_SERVER_BUF_H
#define CF_SERVER_BUF_H

#include <stdarg.h>
#include <stddef.h>

typedef struct cf_buf {
    char *data;                  /* NUL-terminated when len > 0 */
    size_t len, cap;
} cf_buf;

/* Each returns 0, or -1 when memory runs out (the buffer is then unchanged). */
int cf_buf_append(cf_buf *b, const char *s, size_t n);
int cf_buf_puts(cf_buf *b, const char *s);
int cf_buf_printf(cf_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Drops the first n bytes (those sent). */
void cf_buf_consume(cf_buf *b, size_t n);
void cf_buf_free(cf_buf *b);

#endif
