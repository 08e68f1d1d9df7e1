/* fuzz_tokenizer.c: libFuzzer harness for the tokenizer. The first input byte picks a mode:
 * high bit set: the rest is a tokenizer.json to load (then a fixed text is encoded and decoded);
 * otherwise the rest is text for one of the unit tokenizers of tests/fixtures/tokenizer/unit (byte
 * 0 also picks the flags), encoded and decoded, and read again as a list of ids to decode.
 * Built with -DCINFER_FUZZ=ON under clang; run: fuzz_tokenizer -max_total_time=30 CORPUS_DIR. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/tokenizer.h"

#ifndef TOKFIX
#error "TOKFIX must name tests/fixtures/tokenizer"
#endif

static const char *const NAMES[] = {"bytelevel", "spm", "spm_legacy", "metaspace", "suffix"};
#define NTOK (sizeof NAMES / sizeof *NAMES)
static cf_tokenizer *toks[NTOK];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    for (size_t i = 0; i < NTOK; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/unit/%s.json", TOKFIX, NAMES[i]);
        FILE *f = fopen(path, "rb");
        if (!f) abort();
        static char buf[1 << 20];
        size_t n = fread(buf, 1, sizeof buf, f);
        fclose(f);
        cinfer_error err;
        if (cf_tokenizer_load_json(buf, n, &toks[i], &err)) {
            fprintf(stderr, "%s: %s\n", path, err.message);
            abort();
        }
    }
    return 0;
}

/* strict: the tokenizer is a known-good one, so decode must accept every id encode gave (a fuzzed
 * tokenizer.json may have a post-processor that adds ids outside its vocabulary). */
static void roundtrip(const cf_tokenizer *tok, const char *text, size_t len, int flags, int strict) {
    int32_t *ids;
    size_t n;
    if (cf_tokenizer_encode(tok, text, len, flags, &ids, &n, NULL)) abort(); /* only OOM may fail */
    for (int skip = 0; skip < 2; skip++) {
        char *out;
        size_t olen;
        if (cf_tokenizer_decode(tok, ids, n, skip, &out, &olen, NULL) == CINFER_OK) free(out);
        else if (strict) abort();
    }
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    if (data[0] & 0x80) {
        cf_tokenizer *tok;
        if (cf_tokenizer_load_json(text, len, &tok, NULL) == CINFER_OK) {
            roundtrip(tok, "Hello world, <s> 12345 caf\xc3\xa9 \xf0\x9f\x91\x8d\n\t x", 31,
                      CF_TOK_ADD_SPECIAL | CF_TOK_PARSE_SPECIAL, 0);
            cf_tokenizer_free(tok);
        }
        return 0;
    }
    const cf_tokenizer *tok = toks[data[0] % NTOK];
    roundtrip(tok, text, len, (data[0] >> 3) & 3, 1);
    int32_t ids[64];
    size_t n = 0;
    for (size_t i = 0; i + 1 < len && n < 64; i += 2) ids[n++] = (int32_t)((data[1 + i] << 8 | data[2 + i]) % 400) - 40;
    char *out;
    size_t olen;
    if (cf_tokenizer_decode(tok, ids, n, data[0] & 1, &out, &olen, NULL) == CINFER_OK) free(out);
    return 0;
}
