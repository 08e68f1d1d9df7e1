/* test_tok_limits.c: work bounds of encoding hostile tokenizers (issue 17): a chain of Replace
 * normalizers that grows the text, and a catastrophic pre-tokenizer regex, fail with a
 * CINFER_E_TOKENIZER status naming the cause; real tokenizers' patterns still encode long runs. Loading:
 * a BPE vocab with an id far past its entries is refused, not allocated for. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "text/tokenizer.h"
#include "../check.h"

#define VOCAB "\"model\": {\"type\": \"BPE\", \"unk_token\": null, \"vocab\": {\"a\": 0, \"b\": 1, \" \": 2, \"1\": 3}, \"merges\": []}"

/* each Replace doubles every "a"; 40 of them would make 88 bytes into ~10^14 */
static char *doubling_chain(int n) {
    static const char rep[] = "{\"type\": \"Replace\", \"pattern\": {\"String\": \"a\"}, \"content\": \"aa\"},";
    size_t cap = 256 + (size_t)n * sizeof rep + sizeof VOCAB;
    char *s = malloc(cap);
    size_t o = (size_t)snprintf(s, cap, "{\"normalizer\": {\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"Lowercase\"},");
    for (int i = 0; i < n; i++) o += (size_t)snprintf(s + o, cap - o, "%s", rep);
    s[o - 1] = ']';
    snprintf(s + o, cap - o, "}, \"pre_tokenizer\": null, " VOCAB "}");
    return s;
}

static cf_tokenizer *load(const char *json) {
    cf_tokenizer *tok = NULL;
    cinfer_error err = {0};
    CHECK(cf_tokenizer_load_json(json, strlen(json), &tok, &err) == CINFER_OK, "load: %s", err.message);
    return tok;
}

static void replace_growth(void) {
    char *json = doubling_chain(40);
    cf_tokenizer *tok = load(json);
    free(json);
    if (!tok) return;
    char text[89];
    memset(text, 'a', 88);
    text[88] = 0;
    int32_t *ids = NULL;
    size_t n = 0;
    cinfer_error err = {0};
    cinfer_status s = cf_tokenizer_encode(tok, text, 88, 0, &ids, &n, &err);
    CHECK(s == CINFER_E_TOKENIZER && strstr(err.message, "normalizer Replace #") &&
              strstr(err.message, "grows the text past") && strstr(err.message, "(input of 88 bytes)"),
          "growing Replace chain: status %d, \"%s\"", (int)s, err.message);
    CHECK(ids == NULL && n == 0, "a failed encode leaves no ids");
    /* a few doublings stay far inside the bound */
    s = cf_tokenizer_encode(tok, "b", 1, 0, &ids, &n, &err);
    CHECK(s == CINFER_OK && n == 1 && ids[0] == 1, "\"b\" after the failure: %s", err.message);
    free(ids);
    cf_tokenizer_free(tok);
    json = doubling_chain(4);
    tok = load(json);
    free(json);
    if (!tok) return;
    s = cf_tokenizer_encode(tok, text, 88, 0, &ids, &n, &err);
    CHECK(s == CINFER_OK && n == 88 * 16, "4 doublings of 88 bytes: %d, %zu ids, %s", (int)s, n, err.message);
    free(ids);
    cf_tokenizer_free(tok);
}

static void catastrophic_regex(void) {
    static const char json[] =
        "{\"normalizer\": null, \"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"(a+)+$\"},"
        " \"behavior\": \"Isolated\", \"invert\": false}, " VOCAB "}";
    cf_tokenizer *tok = load(json);
    if (!tok) return;
    char text[89];
    memset(text, 'a', 87);
    text[87] = 'b';
    text[88] = 0;
    int32_t *ids = NULL;
    size_t n = 0;
    cinfer_error err = {0};
    cinfer_status s = cf_tokenizer_encode(tok, text, 88, 0, &ids, &n, &err);
    CHECK(s == CINFER_E_TOKENIZER &&
              strstr(err.message, "pre-tokenizer Split regex '(a+)+$' exceeded its match limit on input of 88 bytes"),
          "catastrophic regex: status %d, \"%s\"", (int)s, err.message);
    CHECK(ids == NULL && n == 0, "a failed encode leaves no ids");
    cf_tokenizer_free(tok);
}

/* Llama 3's and Qwen's Split pattern on 1 MB runs of one character */
static void long_runs(void) {
    static const char json[] =
        "{\"normalizer\": null, \"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": "
        "\"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}{1,3}| ?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+\"},"
        " \"behavior\": \"Isolated\", \"invert\": false}, " VOCAB "}";
    cf_tokenizer *tok = load(json);
    if (!tok) return;
    size_t len = 1 << 20;
    char *text = malloc(len + 1);
    const char fill[] = {' ', '1', 'a', '\n'};
    for (int k = 0; k < 5; k++) {
        if (k < 4) memset(text, fill[k], len);
        else for (size_t i = 0; i < len; i++) text[i] = "a 1\n"[i % 4];
        text[len - 1] = k == 0 ? 'b' : ' '; /* spaces then a letter: the slowest case for \s* */
        int32_t *ids = NULL;
        size_t n = 0;
        cinfer_error err = {0};
        cinfer_status s = cf_tokenizer_encode(tok, text, len, 0, &ids, &n, &err);
        CHECK(s == CINFER_OK, "1 MB run %d: %s", k, err.message);
        free(ids);
    }
    free(text);
    cf_tokenizer_free(tok);
}

/* the fuzzer's find: one id of about a billion among 4 entries asked 8 GB of id tables */
static void sparse_ids(void) {
    static const char *json = "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \" \": 2, \"1\": 1000000000}, \"merges\": []}}";
    cf_tokenizer *tok = NULL;
    cinfer_error err = {0};
    cinfer_status st = cf_tokenizer_load_json(json, strlen(json), &tok, &err);
    CHECK(st == CINFER_E_FORMAT && strstr(err.message, "too sparse") && !tok, "sparse ids: %d %s", (int)st, err.message);
    cf_tokenizer_free(tok);
    static const char *dense = "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \" \": 2, \"1\": 60000}, \"merges\": []}}";
    tok = load(dense);
    cf_tokenizer_free(tok);
}

int main(void) {
    sparse_ids();
    replace_growth();
    catastrophic_regex();
    long_runs();
    printf("%d passed, %d failed\n", checks - failures, failures);
    return failures ? 1 : 0;
}
