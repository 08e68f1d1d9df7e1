/* args.c: argument parsing helpers shared by the verbs. */
#include "cli/cli.h"
#include "base/file.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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
    /* request values the CLI parsed are usage errors; non-finite logits (NOT_A_NUMBER) are the model's failure */
    int bad_input = err->code == CINFER_E_INVALID_ARGUMENT || (err->code >= CINFER_E_EMPTY_PROMPT && err->code <= CINFER_E_PENALTY);
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

int cf_spec_flag(const char *verb, int argc, char **argv, int *i, const char **spec) {
    const char *v;
    int r = cf_flag_value(verb, argc, argv, i, "--spec", &v);
    if (r <= 0) return r;
    if (strcmp(v, "ngram") && strcmp(v, "draft") && strcmp(v, "none")) {
        cf_usage_error(verb, "--spec must be ngram, draft or none, got '%s'", v);
        return -1;
    }
    *spec = v;
    return 1;
}

/* strtol and strtof also take leading spaces, a '+', hex, "inf" and "nan": a flag value is plain decimal. */
static int is_digit(char c) { return c >= '0' && c <= '9'; }

int cf_parse_long(const char *s, long lo, long hi, long *out) {
    if (!is_digit(s[s[0] == '-']) || (s[0] == '-' && lo >= 0)) return -1;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

int cf_parse_float(const char *s, float lo, float hi, float *out) {
    const char *p = s + (s[0] == '-');
    size_t digits = strspn(p, "0123456789");
    if (p[digits] == '.') digits += strspn(p + digits + 1, "0123456789");
    if (!digits) return -1;
    for (; *p; p++)
        if (!is_digit(*p) && !strchr(".eE+-", *p)) return -1;
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if ((errno && v != 0) || *end || !isfinite(v) || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

int cf_parse_ids(const char *s, int32_t **ids, int *n, char *why, size_t why_len) {
    size_t cnt = 1;
    for (const char *p = s; *p; p++) cnt += *p == ',';
    int32_t *v = malloc(cnt * sizeof *v);
    if (!v) {
        snprintf(why, why_len, "out of memory for %zu ids", cnt);
        return -1;
    }
    const char *p = s;
    for (size_t k = 0; k < cnt; k++) {
        size_t len = strcspn(p, ",");
        size_t digits = strspn(p, "0123456789");
        int64_t x = 0;
        for (size_t d = 0; d < digits && x <= INT32_MAX; d++) x = x * 10 + (p[d] - '0');
        if (!len) snprintf(why, why_len, "item %zu is empty (write ids as 5,17,300)", k + 1);
        else if (digits != len) snprintf(why, why_len, "item %zu '%.*s' is not a token id (decimal digits only)", k + 1, (int)len, p);
        else if (x > INT32_MAX) snprintf(why, why_len, "item %zu '%.*s' is larger than %d", k + 1, (int)len, p, INT32_MAX);
        if (!len || digits != len || x > INT32_MAX) {
            free(v);
            return -1;
        }
        v[k] = (int32_t)x;
        p += len + 1;
    }
    *ids = v;
    *n = (int)cnt;
    return 0;
}

int cf_read_input(const char *verb, const char *flag, const char *path, char **data, size_t *len) {
    cinfer_error err = {0};
    if (cf_file_read(path, CF_MAX_INPUT_BYTES, 0, data, len, &err) == CINFER_OK) return 0;
    fprintf(stderr, "cinfer %s: %s %s\n", verb, flag, err.message);
    return 1;
}

int cf_check_output(const char *verb, const char *flag, const char *path) {
    struct stat sb;
    if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode)) {
        fprintf(stderr, "cinfer %s: %s %s is %s, not a regular file\n", verb, flag, path, cf_file_kind(sb.st_mode));
        return 1;
    }
    return 0;
}

FILE *cf_open_output(const char *verb, const char *flag, const char *path) {
    if (cf_check_output(verb, flag, path)) return NULL;
    /* O_NONBLOCK and the second check: the path may have become a FIFO since */
    int fd = open(path, O_WRONLY | O_CREAT | O_NONBLOCK | O_CLOEXEC, 0666);
    if (fd < 0) {
        fprintf(stderr, "cinfer %s: %s %s: cannot open: %s\n", verb, flag, path, strerror(errno));
        return NULL;
    }
    struct stat sb;
    FILE *fp = NULL;
    if (fstat(fd, &sb) == 0 && !S_ISREG(sb.st_mode))
        fprintf(stderr, "cinfer %s: %s %s is %s, not a regular file\n", verb, flag, path, cf_file_kind(sb.st_mode));
    else if (ftruncate(fd, 0) || fcntl(fd, F_SETFL, 0) || !(fp = fdopen(fd, "wb")))
        fprintf(stderr, "cinfer %s: %s %s: cannot write: %s\n", verb, flag, path, strerror(errno));
    if (!fp) close(fd);
    return fp;
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
