/* tok_test.h: helpers shared by the tokenizer tests: reading (gzip'd) fixture files, a JSON string
 * reader that keeps NUL characters (cJSON cuts strings at U+0000), id lists, and pass/fail counting
 * that ends with ctest's "N passed, N failed" line. */
#ifndef TOK_TEST_H
#define TOK_TEST_H

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SKIP_CODE 77

static int tt_passed, tt_failed, tt_shown;

static inline void tt_check(int ok, const char *fmt, ...) {
    if (ok) {
        tt_passed++;
        return;
    }
    tt_failed++;
    if (tt_shown++ < 12) {
        va_list ap;
        va_start(ap, fmt);
        fputs("FAIL: ", stdout);
        vprintf(fmt, ap);
        fputc('\n', stdout);
        va_end(ap);
    }
}

static inline int tt_finish(void) {
    printf("%d passed, %d failed\n", tt_passed, tt_failed);
    return tt_failed ? 1 : 0;
}

/* Whole file, through "gzip -dc" when the name ends in .gz. NULL when it cannot be read. */
static inline char *tt_read(const char *path, size_t *len) {
    size_t n = strlen(path);
    FILE *f;
    int pipe = n > 3 && strcmp(path + n - 3, ".gz") == 0;
    if (pipe) {
        char cmd[4200];
        snprintf(cmd, sizeof cmd, "gzip -dc '%s'", path);
        f = popen(cmd, "r");
    } else {
        f = fopen(path, "rb");
    }
    if (!f) return NULL;
    size_t cap = 1 << 16, used = 0;
    char *buf = malloc(cap + 1);
    size_t k;
    while (buf && (k = fread(buf + used, 1, cap - used, f)) > 0) {
        used += k;
        if (used == cap) {
            char *b = realloc(buf, 2 * cap + 1);
            if (!b) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = b;
            cap *= 2;
        }
    }
    int bad = pipe ? pclose(f) != 0 : (fclose(f), 0);
    if (!buf || bad) {
        free(buf);
        return NULL;
    }
    buf[used] = 0;
    *len = used;
    return buf;
}

static void tt_put_utf8(char **o, uint32_t cp) {
    unsigned char *u = (unsigned char *)*o;
    if (cp < 0x80) *u++ = (unsigned char)cp;
    else if (cp < 0x800) { *u++ = (unsigned char)(0xC0 | (cp >> 6)); *u++ = (unsigned char)(0x80 | (cp & 0x3F)); }
    else if (cp < 0x10000) {
        *u++ = (unsigned char)(0xE0 | (cp >> 12));
        *u++ = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        *u++ = (unsigned char)(0x80 | (cp & 0x3F));
    } else {
        *u++ = (unsigned char)(0xF0 | (cp >> 18));
        *u++ = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
        *u++ = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        *u++ = (unsigned char)(0x80 | (cp & 0x3F));
    }
    *o = (char *)u;
}

static unsigned tt_hex4(const char *p) {
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        v = v * 16 + (unsigned)(c >= 'a' ? c - 'a' + 10 : c >= 'A' ? c - 'A' + 10 : c - '0');
    }
    return v;
}

/* Reads the JSON string starting at *p (at its opening quote) into a malloc'd buffer; advances *p
 * past the closing quote. NULL on malformed input. */
static inline char *tt_json_string(const char **p, size_t *len) {
    const char *s = *p;
    if (*s != '"') return NULL;
    s++;
    char *out = malloc(strlen(s) + 1), *o = out;
    if (!out) return NULL;
    while (*s && *s != '"') {
        if (*s != '\\') { *o++ = *s++; continue; }
        s++;
        switch (*s) {
        case 'n': *o++ = '\n'; break;
        case 't': *o++ = '\t'; break;
        case 'r': *o++ = '\r'; break;
        case 'b': *o++ = '\b'; break;
        case 'f': *o++ = '\f'; break;
        case 'u': {
            unsigned cp = tt_hex4(s + 1);
            s += 4;
            if (cp >= 0xD800 && cp < 0xDC00 && s[1] == '\\' && s[2] == 'u') {
                cp = 0x10000 + ((cp - 0xD800) << 10) + (tt_hex4(s + 3) - 0xDC00);
                s += 6;
            }
            tt_put_utf8(&o, cp);
            break;
        }
        default: *o++ = *s; break;
        }
        s++;
    }
    if (*s != '"') {
        free(out);
        return NULL;
    }
    *p = s + 1;
    *len = (size_t)(o - out);
    *o = 0;
    return out;
}

/* One input value: a JSON string, or {"hex": "..."} for raw bytes. */
static inline char *tt_json_input(const char **p, size_t *len) {
    while (**p == ' ' || **p == '\n' || **p == ',' || **p == '[' || **p == '\r') (*p)++;
    if (**p == '"') return tt_json_string(p, len);
    if (**p != '{') return NULL;
    const char *s = strstr(*p, "\"hex\"");
    if (!s) return NULL;
    s = strchr(s + 5, '"');
    size_t hl;
    char *hex = s ? tt_json_string(&s, &hl) : NULL;
    if (!hex) return NULL;
    char *out = malloc(hl / 2 + 1);
    for (size_t i = 0; out && i < hl / 2; i++) {
        unsigned v;
        sscanf(hex + 2 * i, "%2x", &v);
        out[i] = (char)v;
    }
    free(hex);
    *len = hl / 2;
    *p = strchr(s, '}') ? strchr(s, '}') + 1 : s;
    return out;
}

/* Every input of a fixture file (one JSON value a line, or a JSON array). */
static inline char **tt_inputs(const char *path, size_t **lens, size_t *n) {
    size_t len;
    char *data = tt_read(path, &len);
    if (!data) return NULL;
    size_t cap = 1024;
    char **v = malloc(cap * sizeof *v);
    *lens = malloc(cap * sizeof **lens);
    *n = 0;
    const char *p = data;
    for (;;) {
        while (*p == ' ' || *p == '\n' || *p == ',' || *p == '[' || *p == '\r') p++;
        if (!*p || *p == ']') break;
        size_t l;
        char *s = tt_json_input(&p, &l);
        if (!s) break;
        if (*n == cap) {
            cap *= 2;
            v = realloc(v, cap * sizeof *v);
            *lens = realloc(*lens, cap * sizeof **lens);
        }
        v[*n] = s;
        (*lens)[(*n)++] = l;
    }
    free(data);
    return v;
}

/* "1 2 3" -> ids; returns the count. */
/* FNV-1a 64 of a file as 16 hex digits (tools/text/make_token_goldens.py writes the same); 0 if unreadable. */
static inline int tt_fnv1a64_file(const char *path, char hex[17]) {
    size_t n;
    char *p = tt_read(path, &n);
    if (!p) return 0;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)p[i]) * 0x100000001b3ull;
    free(p);
    snprintf(hex, 17, "%016llx", (unsigned long long)h);
    return 1;
}

static inline size_t tt_parse_ids(const char *s, int32_t **ids) {
    size_t cap = 16, n = 0;
    *ids = malloc(cap * sizeof **ids);
    while (*s) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s) break;
        if (n == cap) *ids = realloc(*ids, (cap *= 2) * sizeof **ids);
        (*ids)[n++] = (int32_t)v;
        s = end;
    }
    return n;
}

static inline void tt_print_ids(char *buf, size_t cap, const int32_t *ids, size_t n) {
    size_t o = 0;
    buf[0] = 0;
    for (size_t i = 0; i < n && o + 16 < cap; i++) o += (size_t)snprintf(buf + o, cap - o, "%s%d", i ? " " : "", ids[i]);
    if (o + 16 >= cap) snprintf(buf + o, cap - o, " ...");
}

#endif
