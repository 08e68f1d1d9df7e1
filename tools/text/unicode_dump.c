/* pcre_class_dump.c: prints, one per line, the code points that a one-character PCRE2 pattern
 * (compiled with UTF and UCP, as src/text/tok_regex.c compiles patterns) matches. A helper of
 * make_onig_classes.js. usage: pcre_class_dump PATTERN */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdio.h>

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
    int ec;
    PCRE2_SIZE eo;
    if (argc != 2) return 2;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)argv[1], PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &ec, &eo, NULL);
    if (!re) return 1;
    pcre2_match_data *md = pcre2_match_data_create(1, NULL);
    for (unsigned cp = 0; cp < 0x110000; cp++) {
        unsigned char u[4];
        if (cp >= 0xD800 && cp < 0xE000) continue;
        if (pcre2_match(re, u, (PCRE2_SIZE)utf8(cp, u), 0, PCRE2_ANCHORED, md, NULL) >= 0) printf("%u\n", cp);
    }
    return 0;
}
