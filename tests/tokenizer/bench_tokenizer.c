/* bench_tokenizer.c: encode throughput of a tokenizer on a text file, as one call and line by line
 * (a chat-sized workload), and decode throughput, in CPU time (the machine may be shared). Not a
 * test; prints MB/s.
 * usage: bench_tokenizer TOKENIZER_DIR TEXT_FILE [REPEATS] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "text/tokenizer.h"
#include "tok_test.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s TOKENIZER_DIR TEXT_FILE [REPEATS]\n", argv[0]);
        return 2;
    }
    int reps = argc > 3 ? atoi(argv[3]) : 3;
    size_t len;
    char *text = tt_read(argv[2], &len);
    if (!text) {
        fprintf(stderr, "cannot read %s\n", argv[2]);
        return 1;
    }
    cinfer_error err = {0};
    cf_tokenizer *tok;
    double t0 = now();
    if (cf_tokenizer_load(argv[1], &tok, &err)) {
        fprintf(stderr, "%s\n", err.message);
        return 1;
    }
    double load = now() - t0;
    int32_t *ids = NULL;
    size_t n = 0;
    double best = 1e9;
    for (int r = 0; r < reps; r++) {
        free(ids);
        t0 = now();
        if (cf_tokenizer_encode(tok, text, len, CF_TOK_ADD_SPECIAL, &ids, &n, &err)) {
            fprintf(stderr, "%s\n", err.message);
            return 1;
        }
        double dt = now() - t0;
        if (dt < best) best = dt;
    }
    double lines_best = 1e9;
    size_t line_tokens = 0;
    for (int r = 0; r < reps; r++) {
        t0 = now();
        line_tokens = 0;
        for (char *p = text; p < text + len;) {
            char *e = memchr(p, '\n', (size_t)(text + len - p));
            size_t l = e ? (size_t)(e - p + 1) : (size_t)(text + len - p);
            int32_t *li;
            size_t ln;
            if (cf_tokenizer_encode(tok, p, l, CF_TOK_ADD_SPECIAL, &li, &ln, &err)) return 1;
            line_tokens += ln;
            free(li);
            p += l;
        }
        double dt = now() - t0;
        if (dt < lines_best) lines_best = dt;
    }
    char *out;
    size_t out_len;
    t0 = now();
    if (cf_tokenizer_decode(tok, ids, n, 0, &out, &out_len, &err)) return 1;
    double dec = now() - t0;
    double mb = (double)len / 1e6;
    printf("%s: load %.2f s; %.2f MB -> %zu tokens (%.2f bytes/token); encode %.1f MB/s whole, %.1f MB/s by line "
           "(%zu tokens); decode %.1f MB/s%s\n",
           argv[1], load, mb, n, (double)len / (double)n, mb / best, mb / lines_best, line_tokens, (double)out_len / 1e6 / dec,
           out_len == len && memcmp(out, text, len) == 0 ? ", round trip exact" : "");
    free(out);
    free(ids);
    free(text);
    cf_tokenizer_free(tok);
    return 0;
}
