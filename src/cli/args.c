/* args.c: argument parsing helpers shared by the verbs. */
#include "cli/cli.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int cf_usage_error(const char *verb, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "cinfer %s: ", verb);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " (see cinfer %s --help)\n", verb);
    return CF_EXIT_USAGE;
}

int cf_report(const char *verb, const cinfer_error *err) {
    fprintf(stderr, "cinfer %s: %s\n", verb, err->message);
    int bad_input = err->code == CINFER_E_INVALID_ARGUMENT || (err->code >= CINFER_E_EMPTY_PROMPT && err->code <= CINFER_E_NOT_A_NUMBER);
    return bad_input ? CF_EXIT_USAGE : 1;
}

int cf_is_help(const char *arg) { return !strcmp(arg, "--help") || !strcmp(arg, "-h"); }

int cf_flag_value(const char *verb, int argc, char **argv, int *i, const char *flag, const char **val) {
    const char *a = argv[*i];
    size_t fl = strlen(flag);
    if (strncmp(a, flag, fl)) return 0;
    if (a[fl] == '=') { *val = a + fl + 1; return 1; }
    if (a[fl] != 0) return 0;
    if (*i + 1 >= argc) { cf_usage_error(verb, "%s needs a value", flag); return -1; }
    *val = argv[++*i];
    return 1;
}

int cf_parse_long(const char *s, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

int cf_parse_float(const char *s, float lo, float hi, float *out) {
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if (errno || end == s || *end || isnan(v) || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

int cf_parse_ids(const char *s, int32_t **ids, int *n) {
    size_t cap = 16;
    int cnt = 0;
    int32_t *v = malloc(cap * sizeof *v);
    if (!v) return -1;
    const char *p = s;
    while (*p) {
        while (*p == ' ' || *p == ',') p++;
        if (!*p) break;
        char *end;
        errno = 0;
        long x = strtol(p, &end, 10);
        if (end == p || errno || x < 0 || x > INT32_MAX || (*end && *end != ',' && *end != ' ')) { free(v); return -1; }
        if ((size_t)cnt == cap) {
            int32_t *nv = realloc(v, (cap *= 2) * sizeof *nv);
            if (!nv) { free(v); return -1; }
            v = nv;
        }
        v[cnt++] = (int32_t)x;
        p = end;
    }
    if (cnt == 0) { free(v); return -1; }
    *ids = v;
    *n = cnt;
    return 0;
}

const char *cf_default_model_dir(void) {
    static char path[4096];
    struct stat sb;
    const char *env = getenv("CINFER_MODEL");
    if (env && *env) return env;
#ifdef CINFER_SOURCE_DIR
    snprintf(path, sizeof path, "%s/models/cinfer-tiny", CINFER_SOURCE_DIR);
    if (stat(path, &sb) == 0) return path;
#endif
    return NULL;
}

int cf_common_flag(const char *verb, int argc, char **argv, int *i, cf_common_opts *o) {
    const char *v;
    int r;
    if ((r = cf_flag_value(verb, argc, argv, i, "--model", &v)) != 0) {
        if (r > 0) o->model = v;
        return r;
    }
    if ((r = cf_flag_value(verb, argc, argv, i, "--device", &v)) != 0) {
        if (r < 0) return r;
        cinfer_error e;
        if (cf_device_parse(v, &o->device, &e) != CINFER_OK) { cf_usage_error(verb, "%s", e.message); return -1; }
        return 1;
    }
    if ((r = cf_flag_value(verb, argc, argv, i, "--threads", &v)) != 0) {
        if (r < 0) return r;
        long t;
        if (cf_parse_long(v, 1, 1024, &t)) { cf_usage_error(verb, "--threads must be an integer in [1, 1024], got '%s'", v); return -1; }
        o->threads = (int)t;
        return 1;
    }
    return 0;
}
