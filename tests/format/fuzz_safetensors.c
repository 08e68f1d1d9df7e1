/* fuzz_safetensors.c: libFuzzer harness for the safetensors header parser. The input is a whole
 * .safetensors file, parsed in place (cf_st_open_memory, the same parser as a mapped file); every
 * tensor it accepts must be found by its name, lie inside the data section, hold shape x dtype bytes,
 * and is read whole, so ASan reports any byte outside the input.
 * Built with -DCINFER_FUZZ=ON under clang; run: fuzz_safetensors -max_total_time=20 CORPUS_DIR SEEDS. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/safetensors.h"

static size_t raw_size(const char *dtype) {
    static const char *const names[] = {"F64", "F32", "F16", "BF16", "I64", "I32", "I16", "I8",
                                        "U64", "U32", "U16", "U8", "BOOL", "F8_E4M3", "F8_E5M2"};
    static const size_t sizes[] = {8, 4, 2, 2, 8, 4, 2, 1, 8, 4, 2, 1, 1, 1, 1};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        if (!strcmp(dtype, names[i])) return sizes[i];
    return 0;
}

static volatile uint8_t sink; /* keeps the reads of tensor bytes */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    cf_st_set *set = NULL;
    cinfer_error err;
    if (cf_st_open_memory(data, size, "fuzz", &set, &err) != CINFER_OK) {
        if (set) abort();
        return 0;
    }
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | data[i];
    const uint8_t *lo = data + 8 + hlen, *hi = data + size;
    for (size_t i = 0; i < cf_st_count(set); i++) {
        const cf_st_tensor *t = cf_st_at(set, i);
        const uint8_t *p = t->data;
        if (cf_st_find(set, t->name) != t || p < lo || p > hi || t->nbytes > (size_t)(hi - p)) abort();
        size_t count = 1;
        for (int d = 0; d < t->n_dims; d++) count *= (size_t)t->shape[d];
        if (t->n_dims < 0 || t->n_dims > CF_MAX_DIMS || count * raw_size(t->dtype_name) != t->nbytes) abort();
        for (size_t b = 0; b < t->nbytes; b++) sink ^= p[b];
    }
    cf_st_close(set);
    return 0;
}
