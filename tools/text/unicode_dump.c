/* unicode_dump.c: what this system's PCRE2 and utf8proc do with each code point, for
 * make_unicode_tables.js to compare with Hugging Face tokenizers.
 *   unicode_dump pcre PATTERN   the code points a one-character PATTERN matches (UTF and UCP, as
 *                               src/text/tok_regex.c compiles), one per line
 *   unicode_dump nf FORM        for each code point whose FORM (NFC, NFD, NFKC, NFKD) by utf8proc
 *                               differs from itself: "cp cp1 cp2 ..."
 *   unicode_dump ccc -          the code points with a non-zero canonical combining class */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

static int utf8(unsigned cp, unsigned char *u) {
    if (cp < 0x80) { u[0] = (unsigned char)cp; return 1; }
    if (cp < 0x800) { u[0] = (unsigned char)(0xC0 | (cp >> 6)); u[1] = (unsigned char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        u[0] = (unsigned char)(0xE0 | (cp >> 12));
        u[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        u[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    u[0] = (unsigned char)(0xF0 | (cp >> 18));
    u[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    u[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    u[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

int main(int argc, char **argv) {
    if (argc != 3) return 2;
    if (!strcmp(argv[1], "pcre")) {
        int ec;
        PCRE2_SIZE eo;
        pcre2_code *re = pcre2_compile((PCRE2_SPTR)argv[2], PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &ec, &eo, NULL);
        if (!re) return 1;
        pcre2_match_data *md = pcre2_match_data_create(1, NULL);
        for (unsigned cp = 0; cp < 0x110000; cp++) {
            unsigned char u[4];
            if (cp >= 0xD800 && cp < 0xE000) continue;
            if (pcre2_match(re, u, (PCRE2_SIZE)utf8(cp, u), 0, PCRE2_ANCHORED, md, NULL) >= 0) printf("%u\n", cp);
        }
        return 0;
    }
    if (!strcmp(argv[1], "ccc")) {
        for (unsigned cp = 1; cp < 0x110000; cp++)
            if ((cp < 0xD800 || cp >= 0xE000) && utf8proc_get_property((utf8proc_int32_t)cp)->combining_class)
                printf("%u\n", cp);
        return 0;
    }
    int opt = UTF8PROC_STABLE;
    const char *f = argv[2];
    opt |= (!strcmp(f, "NFC") || !strcmp(f, "NFKC")) ? UTF8PROC_COMPOSE : UTF8PROC_DECOMPOSE;
    if (f[2] == 'K') opt |= UTF8PROC_COMPAT;
    for (unsigned cp = 1; cp < 0x110000; cp++) {
        unsigned char u[4];
        utf8proc_uint8_t *out = NULL;
        if (cp >= 0xD800 && cp < 0xE000) continue;
        int n = utf8(cp, u);
        utf8proc_ssize_t r = utf8proc_map(u, n, &out, (utf8proc_option_t)opt);
        if (r >= 0 && (r != n || memcmp(out, u, (size_t)n))) {
            printf("%u", cp);
            for (utf8proc_ssize_t i = 0; i < r;) {
                utf8proc_int32_t c;
                i += utf8proc_iterate(out + i, r - i, &c);
                printf(" %d", c);
            }
            printf("\n");
        }
        free(out);
    }
    return 0;
}
