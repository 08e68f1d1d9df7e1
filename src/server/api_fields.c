/* api_fields.c: the arena behind a parsed request, UTF-8 validation, and the typed JSON field readers that
 * refuse a wrong type or range with a message naming the field. */
#include "server/api_internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct cf_arena_block {
    cf_arena_block *next;
    max_align_t data[];
};

void *cf_arena_alloc(cf_arena *a, size_t n) {
    cf_arena_block *b = calloc(1, sizeof *b + (n ? n : 1));
    if (!b) return NULL;
    b->next = a->head;
    a->head = b;
    return b->data;
}

char *cf_arena_strndup(cf_arena *a, const char *s, size_t n) {
    char *d = cf_arena_alloc(a, n + 1);
    if (d) memcpy(d, s, n);
    return d;
}

char *cf_arena_strdup(cf_arena *a, const char *s) {
    return cf_arena_strndup(a, s, strlen(s));
}

char *cf_arena_json(cf_arena *a, const cJSON *item) {
    char *j = cJSON_PrintUnformatted(item);
    if (!j) return NULL;
    char *d = cf_arena_strdup(a, j);
    cJSON_free(j);
    return d;
}

void cf_arena_free(cf_arena *a) {
    while (a->head) {
        cf_arena_block *n = a->head->next;
        free(a->head);
        a->head = n;
    }
}

int cf_api_fail(cf_api_error *err, int status, const char *param, const char *fmt, ...) {
    err->status = status;
    snprintf(err->param, sizeof err->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    return -1;
}

int cf_api_oom(cf_api_error *err) {
    return cf_api_fail(err, 500, NULL, "the server ran out of memory reading the request");
}

/* Well-formed UTF-8: no overlong forms, no surrogates, nothing past U+10FFFF. */
int cf_api_valid_utf8(const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s, *end = p + n;
    while (p < end) {
        unsigned c = *p;
        if (c < 0x80) {
            p++;
            continue;
        }
        size_t k;
        unsigned min, cp;
        if ((c & 0xE0) == 0xC0) k = 1, min = 0x80, cp = c & 0x1F;
        else if ((c & 0xF0) == 0xE0) k = 2, min = 0x800, cp = c & 0x0F;
        else if ((c & 0xF8) == 0xF0) k = 3, min = 0x10000, cp = c & 0x07;
        else return 0;
        if ((size_t)(end - p) <= k) return 0;
        for (size_t i = 1; i <= k; i++) {
            if ((p[i] & 0xC0) != 0x80) return 0;
            cp = cp << 6 | (p[i] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
        p += k + 1;
    }
    return 1;
}

const char *cf_api_type_name(const cJSON *it) {
    if (cJSON_IsNull(it)) return "null";
    if (cJSON_IsBool(it)) return "a boolean";
    if (cJSON_IsNumber(it)) return "a number";
    if (cJSON_IsString(it)) return "a string";
    if (cJSON_IsArray(it)) return "an array";
    if (cJSON_IsObject(it)) return "an object";
    return "invalid";
}

const cJSON *cf_api_get(const cJSON *obj, const char *key) {
    const cJSON *last = NULL;
    for (const cJSON *it = cJSON_IsObject(obj) ? obj->child : NULL; it; it = it->next)
        if (it->string && !strcmp(it->string, key)) last = it;
    return last;
}

static const cJSON *field(const cJSON *obj, const char *key) {
    const cJSON *it = cf_api_get(obj, key);
    return it && !cJSON_IsNull(it) ? it : NULL;
}

int cf_api_get_bool(const cJSON *obj, const char *key, const char *param, int *out, cf_api_error *err) {
    const cJSON *it = field(obj, key);
    if (!it) return 0;
    if (!cJSON_IsBool(it))
        return cf_api_fail(err, 400, param ? param : key, "%s must be a boolean (true or false), not %s", param ? param : key,
                           cf_api_type_name(it));
    *out = cJSON_IsTrue(it);
    return 1;
}

int cf_api_item_int(const cJSON *it, const char *param, int64_t lo, int64_t hi, int64_t *out, cf_api_error *err) {
    if (!cJSON_IsNumber(it)) return cf_api_fail(err, 400, param, "%s must be an integer, not %s", param, cf_api_type_name(it));
    double v = it->valuedouble;
    if (!isfinite(v) || v != floor(v))
        return cf_api_fail(err, 400, param, "%s must be an integer, not %g", param, v);
    if (v < (double)lo || v > (double)hi)
        return cf_api_fail(err, 400, param, "%s is %.17g; it must be in [%lld, %lld]", param, v, (long long)lo, (long long)hi);
    /* 2^63 rounds to a double equal to (double)INT64_MAX: keep the conversion defined */
    *out = v >= 9223372036854775807.0 ? INT64_MAX : (int64_t)v;
    return 1;
}

int cf_api_get_int(const cJSON *obj, const char *key, const char *param, int64_t lo, int64_t hi, int64_t *out,
                   cf_api_error *err) {
    const cJSON *it = field(obj, key);
    if (!it) return 0;
    return cf_api_item_int(it, param ? param : key, lo, hi, out, err) < 0 ? -1 : 1;
}

int cf_api_get_number(const cJSON *obj, const char *key, const char *param, double lo, double hi, double *out,
                      cf_api_error *err) {
    const cJSON *it = field(obj, key);
    if (!it) return 0;
    const char *p = param ? param : key;
    if (!cJSON_IsNumber(it)) return cf_api_fail(err, 400, p, "%s must be a number, not %s", p, cf_api_type_name(it));
    double v = it->valuedouble;
    if (!isfinite(v) || v < lo || v > hi) return cf_api_fail(err, 400, p, "%s is %g; it must be in [%g, %g]", p, v, lo, hi);
    *out = v;
    return 1;
}

int cf_api_get_string(const cJSON *obj, const char *key, const char *param, const char **out, cf_api_error *err) {
    const cJSON *it = field(obj, key);
    if (!it) return 0;
    const char *p = param ? param : key;
    if (!cJSON_IsString(it)) return cf_api_fail(err, 400, p, "%s must be a string, not %s", p, cf_api_type_name(it));
    *out = it->valuestring;
    return 1;
}
