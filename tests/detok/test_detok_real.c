/* test_detok_real.c: the streaming detokenizer on a real tokenizer over the golden inputs (Brown, KJV,
 * hard cases, invalid UTF-8): the text is encoded, fed back one token at a time, and the chunks must be
 * valid UTF-8 each and concatenate to the full decode, with and without skipping special tokens.
 * usage: test_detok_real TOKENIZER_DIR INPUTS.jsonl.gz   (exit 77 when the tokenizer is absent) */
#include "text/detok.h"
#include "text/tokenizer.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* 1 if s[0..n) is well-formed UTF-8 (no overlongs, surrogates or values past U+10FFFF). */
static int utf8_valid(const unsigned char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (!len || i + len > n) return 0;
        unsigned cp = len == 1 ? c : c & (0x7f >> len);
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xc0) != 0x80) return 0;
            cp = cp << 6 | (s[i + k] & 0x3f);
        }
        static const unsigned min[5] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < min[len] || cp > 0x10ffff || (cp >= 0xd800 && cp < 0xe000)) return 0;
        i += len;
    }
    return 1;
}

int main(int argc, char **argv) {
    if (argc < 3) { fprintf(stderr, "usage: test_detok_real TOKENIZER_DIR INPUTS.jsonl.gz\n"); return 2; }
    char path[4096];
    struct stat sb;
    snprintf(path, sizeof path, "%s/tokenizer.json", argv[1]);
    if (stat(path, &sb) != 0) { printf("SKIP: %s not fetched\n", path); return 77; }
    cinfer_error err = {0};
    cf_tokenizer *tok = NULL;
    if (cf_tokenizer_load(argv[1], &tok, &err) != CINFER_OK) { fprintf(stderr, "%s\n", err.message); return 1; }
    snprintf(path, sizeof path, "gzip -dc '%s'", argv[2]);
    FILE *in = popen(path, "r");
    if (!in) { fprintf(stderr, "cannot read %s\n", argv[2]); return 1; }
    char *line = NULL;
    size_t cap = 0, lines = 0, tokens = 0;
    int failures = 0;
    ssize_t got;
    while ((got = getline(&line, &cap, in)) > 0 && failures < 10) {
        cJSON *j = cJSON_ParseWithLength(line, (size_t)got);
        if (!cJSON_IsString(j)) { cJSON_Delete(j); continue; }
        const char *text = j->valuestring;
        int32_t *ids = NULL;
        size_t n = 0;
        if (cf_tokenizer_encode(tok, text, strlen(text), CF_TOK_ADD_SPECIAL | CF_TOK_PARSE_SPECIAL, &ids, &n, &err) != CINFER_OK) {
            fprintf(stderr, "line %zu: encode: %s\n", lines + 1, err.message);
            failures++;
        }
        for (int skip = 0; skip < 2 && ids; skip++) {
            char *full = NULL, *streamed = malloc(1);
            size_t full_len = 0, slen = 0;
            cf_detok *d = NULL;
            int ok = cf_tokenizer_decode(tok, ids, n, skip, &full, &full_len, &err) == CINFER_OK &&
                     cf_detok_create(cf_detok_tokenizer_decode, tok, skip, &d, &err) == CINFER_OK;
            for (size_t i = 0; ok && i <= n; i++) {
                const char *chunk;
                size_t clen;
                ok = (i < n ? cf_detok_push(d, ids[i], &chunk, &clen, &err) : cf_detok_flush(d, &chunk, &clen, &err)) == CINFER_OK;
                if (ok && !utf8_valid((const unsigned char *)chunk, clen)) {
                    fprintf(stderr, "line %zu (skip_special=%d): token %zu streamed invalid UTF-8\n", lines + 1, skip, i);
                    ok = 0;
                }
                if (ok) {
                    streamed = realloc(streamed, slen + clen + 1);
                    memcpy(streamed + slen, chunk, clen);
                    slen += clen;
                }
            }
            if (!ok && err.message[0]) fprintf(stderr, "line %zu: %s\n", lines + 1, err.message);
            if (ok && (slen != full_len || memcmp(streamed, full, slen))) {
                fprintf(stderr, "line %zu (skip_special=%d): streamed %zu bytes != full decode %zu bytes\n", lines + 1, skip, slen, full_len);
                ok = 0;
            }
            failures += !ok;
            free(full);
            free(streamed);
            cf_detok_free(d);
        }
        tokens += n;
        free(ids);
        cJSON_Delete(j);
        lines++;
    }
    free(line);
    pclose(in);
    cf_tokenizer_free(tok);
    printf("%s: %zu inputs, %zu tokens streamed twice: %s\n", argv[1], lines, tokens, failures ? "FAIL" : "ok");
    return failures || lines == 0 ? 1 : 0;
}
