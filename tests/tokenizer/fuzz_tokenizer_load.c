/* fuzz_tokenizer_load.c: libFuzzer harness for tokenizer.json loading: the input is the file's text;
 * a tokenizer that loads encodes and decodes a few strings. Seeds: tests/fixtures/tokenizer/load_seeds. */
#include <stdint.h>
#include <stdlib.h>

#include "text/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    cf_tokenizer *tok = NULL;
    cinfer_error err = {0};
    if (cf_tokenizer_load_json((const char *)data, size, &tok, &err)) return 0;
    static const char *const texts[] = {"Hello world! 123", " a  b\n\nc\t", "<s>caf\xc3\xa9 \xe4\xbd\xa0\xe5\xa5\xbd</s>", "\xff\xfe x"};
    for (size_t i = 0; i < sizeof texts / sizeof *texts; i++) {
        int32_t *ids = NULL;
        size_t n = 0;
        size_t len = 0;
        while (texts[i][len]) len++;
        if (cf_tokenizer_encode(tok, texts[i], len, (int)i & 3, &ids, &n, &err)) continue;
        char *back = NULL;
        size_t bl = 0;
        if (!cf_tokenizer_decode(tok, ids, n, (int)i & 1, &back, &bl, &err)) free(back);
        free(ids);
    }
    int32_t probe[3] = {0, cf_tokenizer_vocab_size(tok) - 1, cf_tokenizer_vocab_size(tok) / 2};
    char *back = NULL;
    size_t bl = 0;
    if (cf_tokenizer_vocab_size(tok) > 0 && !cf_tokenizer_decode(tok, probe, 3, 0, &back, &bl, &err)) free(back);
    cf_tokenizer_free(tok);
    return 0;
}
