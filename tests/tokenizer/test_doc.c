/* test_doc.c: a whole document (the KJV Bible, the Brown corpus) encoded in one call must give HF's
 * ids: same count and same CRC-32 of the ids written as "1 2 3" (docs.json, made by
 * tools/text/make_token_goldens.py --doc), and decode must give the document back where HF's does.
 * usage: test_doc TOKENIZER_DIR DOC_FILE DOCS_JSON TOKENIZER_NAME DOC_NAME
 * Exits 77 (skipped) when the tokenizer or the document is missing (both are fetched or made). */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "text/tok_util.h"
#include "text/tokenizer.h"
#include "tok_test.h"

static uint32_t crc32_update(uint32_t crc, const char *p, size_t n) {
    static uint32_t table[256];
    if (!table[1])
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
            table[i] = c;
        }
    crc = ~crc;
    for (size_t i = 0; i < n; i++) crc = table[(crc ^ (unsigned char)p[i]) & 0xFF] ^ (crc >> 8);
    return ~crc;
}

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: %s TOKENIZER_DIR DOC_FILE DOCS_JSON TOKENIZER_NAME DOC_NAME\n", argv[0]);
        return 2;
    }
    char path[4096];
    struct stat st;
    snprintf(path, sizeof path, "%s/tokenizer.json", argv[1]);
    if (stat(path, &st) != 0 || stat(argv[2], &st) != 0) {
        printf("SKIP: %s or %s is missing\n", path, argv[2]);
        return SKIP_CODE;
    }
    size_t jl, dl;
    char *json = tt_read(argv[3], &jl), *doc = tt_read(argv[2], &dl);
    cJSON *root = json ? cJSON_Parse(json) : NULL;
    cJSON *entry = cJSON_GetObjectItem(root, argv[4]);
    cJSON *want = cJSON_GetObjectItem(entry, argv[5]);
    const cJSON *want_n = cJSON_GetObjectItem(want, "tokens"), *want_crc = cJSON_GetObjectItem(want, "crc32");
    const char *sum = cJSON_GetStringValue(cJSON_GetObjectItem(entry, "tokenizer_fnv1a64"));
    if (!doc || !cJSON_IsNumber(want_n) || !cJSON_IsNumber(want_crc) || !sum) {
        printf("FAIL: no entry %s/%s with tokens, crc32 and %s.tokenizer_fnv1a64 in %s, or %s unreadable\n", argv[4],
               argv[5], argv[4], argv[3], argv[2]);
        return 1;
    }
    char have[17];
    if (!tt_fnv1a64_file(path, have) || strcmp(sum, have) != 0) {
        printf("FAIL: %s: golden made for another tokenizer (checksum %s, file has %s): regenerate with "
               "tools/text/make_token_goldens.py --doc\n", argv[3], sum, have);
        return 1;
    }
    cinfer_error err = {0};
    cf_tokenizer *tok;
    if (cf_tokenizer_load(argv[1], &tok, &err)) {
        printf("FAIL: %s\n", err.message);
        return 1;
    }
    int32_t *ids;
    size_t n;
    if (cf_tokenizer_encode(tok, doc, dl, CF_TOK_ADD_SPECIAL | CF_TOK_PARSE_SPECIAL, &ids, &n, &err)) {
        printf("FAIL: encode: %s\n", err.message);
        return 1;
    }
    uint32_t crc = 0;
    char num[16];
    for (size_t i = 0; i < n; i++) {
        int k = snprintf(num, sizeof num, i ? " %d" : "%d", (int)ids[i]);
        crc = crc32_update(crc, num, (size_t)k);
    }
    tt_check((double)n == want_n->valuedouble, "%s: %zu ids, HF has %.0f", argv[5], n, want_n->valuedouble);
    tt_check((double)crc == want_crc->valuedouble, "%s: CRC-32 of the ids %u, HF's %.0f", argv[5], crc,
             want_crc->valuedouble);
    if (cJSON_IsTrue(cJSON_GetObjectItem(want, "roundtrip"))) {
        char *back;
        size_t bl;
        tk_buf seen = {0};
        tk_utf8_repair(doc, dl, &seen);
        int ok = cf_tokenizer_decode(tok, ids, n, 1, &back, &bl, &err) == CINFER_OK;
        tt_check(ok && bl == seen.n && memcmp(back, seen.p, bl) == 0, "%s: decode does not give the document back",
                 argv[5]);
        if (ok) free(back);
        tk_buf_free(&seen);
    }
    free(ids);
    cf_tokenizer_free(tok);
    cJSON_Delete(root);
    free(json);
    free(doc);
    return tt_finish();
}
