/* test_golden.c: compares cf_tokenizer with Hugging Face tokenizers 0.23 on golden files made by
 * tools/text/make_token_goldens.py: for every input, the ids with and without special tokens, with
 * specials in the text parsed or not, and decode() of HF's ids with and without skipping specials.
 * usage: test_golden TOKENIZER_DIR GOLD_FILE INPUTS_FILE
 * The golden's first line, "#fnv1a64=<16 hex digits>", is the checksum of the tokenizer.json it was
 * made with: a golden made for another file fails, as do a missing golden, a line short of columns
 * and fewer lines than inputs, so no comparison is skipped.
 * Exits 77 (skipped) when TOKENIZER_DIR has no tokenizer.json (the real tokenizers are fetched). */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "text/tok_util.h"
#include "text/tokenizer.h"
#include "tok_test.h"

static int same_ids(const int32_t *a, size_t na, const int32_t *b, size_t nb) {
    return na == nb && (na == 0 || memcmp(a, b, na * sizeof *a) == 0);
}

/* Column value: "=" means "same as fallback". Returns a JSON-decoded string or the fallback copy. */
static char *decoded_column(const char *col, const char *fallback, size_t flen, size_t *len) {
    if (strcmp(col, "=") == 0) {
        char *s = malloc(flen + 1);
        memcpy(s, fallback, flen);
        s[flen] = 0;
        *len = flen;
        return s;
    }
    const char *p = col;
    return tt_json_string(&p, len);
}

static const char *show(const char *s, size_t n) {
    static char buf[200];
    size_t o = 0;
    for (size_t i = 0; i < n && o < 120; i++) {
        unsigned char c = (unsigned char)s[i];
        o += (size_t)(c < 0x20 || c == 0x7F ? snprintf(buf + o, sizeof buf - o, "\\x%02x", c)
                                            : snprintf(buf + o, sizeof buf - o, "%c", c));
    }
    if (o >= 120) snprintf(buf + o, sizeof buf - o, "...");
    return buf;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s TOKENIZER_DIR GOLD_FILE INPUTS_FILE\n", argv[0]);
        return 2;
    }
    char path[4096];
    struct stat st;
    snprintf(path, sizeof path, "%s/tokenizer.json", argv[1]);
    if (stat(path, &st) != 0) {
        printf("SKIP: %s is missing (scripts/fetch-tokenizers.sh could not fetch it)\n", path);
        return SKIP_CODE;
    }
    cinfer_error err = {0};
    cf_tokenizer *tok;
    if (cf_tokenizer_load(argv[1], &tok, &err)) {
        printf("FAIL: load %s: %s\n", argv[1], err.message);
        return 1;
    }
    size_t gl, n_in, *in_len;
    char **in = tt_inputs(argv[3], &in_len, &n_in);
    char *gold = tt_read(argv[2], &gl);
    if (!gold || !in || n_in == 0) {
        printf("FAIL: cannot read %s or %s (or no inputs): make the golden with tools/text/make_token_goldens.py\n",
               argv[2], argv[3]);
        return 1;
    }
    char have[17];
    if (!tt_fnv1a64_file(path, have)) {
        printf("FAIL: cannot read %s\n", path);
        return 1;
    }
    if (strncmp(gold, "#fnv1a64=", 9) != 0 || strlen(gold) < 25 || gold[25] != '\n') {
        printf("FAIL: %s has no \"#fnv1a64=\" checksum line: regenerate with tools/text/make_token_goldens.py\n",
               argv[2]);
        return 1;
    }
    if (memcmp(gold + 9, have, 16) != 0) {
        printf("FAIL: %s: golden made for another tokenizer (checksum %.16s, file has %s): regenerate with "
               "tools/text/make_token_goldens.py\n", argv[2], gold + 9, have);
        return 1;
    }
    static const int flags[4] = {CF_TOK_ADD_SPECIAL | CF_TOK_PARSE_SPECIAL, CF_TOK_PARSE_SPECIAL, CF_TOK_ADD_SPECIAL, 0};
    char *line = gold + 26;
    size_t lineno = 0;
    for (; lineno < n_in && *line; lineno++) {
        char *next = strchr(line, '\n');
        if (next) *next++ = 0;
        char *col[6];
        col[0] = line;
        for (int c = 1; c < 6; c++) {
            col[c] = col[c - 1] ? strchr(col[c - 1], '\t') : NULL;
            if (col[c]) *col[c]++ = 0;
        }
        if (!col[5]) {
            printf("FAIL: %s line %zu has fewer than 6 columns\n", argv[2], lineno + 1);
            return 1;
        }
        int32_t *want[4];
        size_t nwant[4];
        nwant[0] = tt_parse_ids(col[0], &want[0]);
        nwant[1] = tt_parse_ids(col[1], &want[1]);
        nwant[2] = tt_parse_ids(strcmp(col[2], "=") ? col[2] : col[0], &want[2]);
        nwant[3] = tt_parse_ids(strcmp(col[3], "=") ? col[3] : col[1], &want[3]);
        const char *x = in[lineno];
        size_t xl = in_len[lineno];
        for (int k = 0; k < 4; k++) {
            int32_t *ids = NULL;
            size_t n = 0;
            cinfer_status s = cf_tokenizer_encode(tok, x, xl, flags[k], &ids, &n, &err);
            char a[300], b[300];
            tt_print_ids(a, sizeof a, ids, n);
            tt_print_ids(b, sizeof b, want[k], nwant[k]);
            tt_check(s == CINFER_OK && same_ids(ids, n, want[k], nwant[k]),
                     "line %zu flags %d \"%s\": got [%s] want [%s] %s", lineno + 1, flags[k], show(x, xl), a, b,
                     s ? err.message : "");
            free(ids);
        }
        /* "=" stands for the input as HF saw it: invalid UTF-8 already repaired (tokenizer.h) */
        tk_buf seen = {0};
        tk_utf8_repair(x, xl, &seen);
        for (int skip = 1; skip >= 0; skip--) {
            size_t wl = 0, got_len = 0;
            char *want_text = decoded_column(col[skip ? 4 : 5], seen.p ? seen.p : "", seen.n, &wl);
            char *got = NULL;
            cinfer_status s = cf_tokenizer_decode(tok, want[0], nwant[0], skip, &got, &got_len, &err);
            tt_check(s == CINFER_OK && want_text && got_len == wl && memcmp(got, want_text, wl) == 0,
                     "line %zu decode(skip_special=%d) \"%s\": got \"%s\"", lineno + 1, skip, show(x, xl),
                     got ? show(got, got_len) : err.message);
            free(got);
            free(want_text);
        }
        tk_buf_free(&seen);
        for (int k = 0; k < 4; k++) free(want[k]);
        line = next ? next : line + strlen(line);
    }
    tt_check(lineno == n_in, "%s has %zu lines for %zu inputs", argv[2], lineno, n_in);
    for (size_t i = 0; i < n_in; i++) free(in[i]);
    free(in);
    free(in_len);
    free(gold);
    cf_tokenizer_free(tok);
    return tt_finish();
}
