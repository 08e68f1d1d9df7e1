/* test_tok_edges.c: tokenizer edge cases found by the fuzzers, each a regression test. A word that
 * encodes to no ids (characters without a token, no unk_token) met twice: the second time comes from
 * the memo, whose id array is still empty (UBSan: applying zero offset to a null pointer, tok_bpe.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "text/tokenizer.h"
#include "../check.h"

static const char EMPTY_WORDS[] =
    "{\"version\": \"1.0\", \"added_tokens\": [], \"normalizer\": null,"
    " \"pre_tokenizer\": {\"type\": \"Whitespace\"}, \"post_processor\": null, \"decoder\": null,"
    " \"model\": {\"type\": \"BPE\", \"unk_token\": null, \"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": []}}";

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: test_tok_edges TMP_DIR\n");
        return 2;
    }
    mkdir(argv[1], 0755);
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer.json", argv[1]);
    FILE *f = fopen(path, "wb");
    if (!f || fputs(EMPTY_WORDS, f) < 0) { fprintf(stderr, "cannot write %s\n", path); return 1; }
    fclose(f);
    cf_tokenizer *tok = NULL;
    cinfer_error err = {0};
    CHECK(cf_tokenizer_load(argv[1], &tok, &err) == CINFER_OK, "load: %s", err.message);
    for (int round = 0; tok && round < 3; round++) {
        int32_t *ids = NULL;
        size_t n = 0;
        cinfer_status s = cf_tokenizer_encode(tok, "x a x b x", 9, 0, &ids, &n, &err);
        CHECK(s == CINFER_OK && n == 2 && ids[0] == 0 && ids[1] == 1, "round %d: %s, %zu ids", round, err.message, n);
        free(ids);
    }
    cf_tokenizer_free(tok);
    printf("%d passed, %d failed\n", checks - failures, failures);
    return failures ? 1 : 0;
}
