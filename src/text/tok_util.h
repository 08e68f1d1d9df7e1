/* tok_util.h: small building blocks of the tokenizer: a growable byte buffer with a sticky
 * out-of-memory flag, UTF-8 decoding/encoding and Python-style repair of invalid UTF-8, the Unicode
 * character classes Hugging Face `tokenizers` uses (Rust's char::is_whitespace, is_numeric, \w, ...),
 * and two open-addressing hash maps (byte strings -> int64, uint64 -> uint64). Owned by
 * src/text/tok_util.c. */
#ifndef CF_TEXT_TOK_UTIL_H
#define CF_TEXT_TOK_UTIL_H

#include <stddef.h>
#include <stdint.h>

/* Growable bytes. Appends never fail: an allocation failure sets oom and later appends are ignored,
 * so a caller checks oom once after a series of appends. p is NUL-terminated when non-NULL. */
typedef struct tk_buf {
    char *p;
    size_t n, cap;
    int oom;
} tk_buf;

void tk_buf_free(tk_buf *b);
int tk_buf_reserve(tk_buf *b, size_t extra);
void tk_buf_put(tk_buf *b, const void *s, size_t n);
void tk_buf_putc(tk_buf *b, char c);
void tk_buf_put_cp(tk_buf *b, int32_t cp);
char *tk_buf_take(tk_buf *b); /* hands the bytes to the caller (never NULL unless oom) */

/* Decodes one code point from UTF-8 s[0..n) (n > 0); returns its length in bytes. Meant for valid
 * UTF-8; on anything else it returns a length in [1, n] and some code point, never reading past n. */
static inline size_t tk_utf8_next(const char *s, size_t n, int32_t *cp) {
    const unsigned char *u = (const unsigned char *)s;
    if (u[0] < 0xC0) { *cp = u[0]; return 1; }
    if (u[0] < 0xE0) {
        if (n < 2) { *cp = u[0]; return 1; }
        *cp = ((u[0] & 0x1F) << 6) | (u[1] & 0x3F);
        return 2;
    }
    if (u[0] < 0xF0) {
        if (n < 3) { *cp = u[0]; return 1; }
        *cp = ((u[0] & 0x0F) << 12) | ((u[1] & 0x3F) << 6) | (u[2] & 0x3F);
        return 3;
    }
    if (n < 4) { *cp = u[0]; return 1; }
    *cp = ((u[0] & 0x07) << 18) | ((u[1] & 0x3F) << 12) | ((u[2] & 0x3F) << 6) | (u[3] & 0x3F);
    return 4;
}

/* Length of the UTF-8 character that starts with byte c (1 for a stray continuation byte). */
static inline size_t tk_utf8_len(unsigned char c) {
    return c < 0xC0 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
}

/* Start of the last character of valid UTF-8 s[0..n), n > 0. */
size_t tk_utf8_last(const char *s, size_t n);

int tk_utf8_encode(int32_t cp, char out[4]);

/* Length of the longest valid UTF-8 prefix of s[0..n). */
size_t tk_utf8_valid_prefix(const char *s, size_t n);

/* Appends s[0..n) to out with every ill-formed sequence replaced by U+FFFD, one per maximal
 * subpart, exactly as Python's bytes.decode("utf-8", "replace") and Rust's from_utf8_lossy do. */
void tk_utf8_repair(const char *s, size_t n, tk_buf *out);

/* Character classes, exactly as the functions Hugging Face tokenizers calls answer them. */
int tk_is_whitespace(int32_t cp); /* char::is_whitespace: the White_Space property */
int tk_is_numeric(int32_t cp);    /* char::is_numeric (Digits) */
int tk_is_punct(int32_t cp);      /* ASCII punctuation or unicode_categories' is_punctuation */
int tk_is_word(int32_t cp);       /* the regex crate's \w (Whitespace, single_word) */
int tk_is_mark(int32_t cp);       /* is_combining_mark (StripAccents) */

/* GPT-2's byte-level alphabet: every byte b stands for one printable character. */
int32_t tk_byte_cp(unsigned char b); /* the character byte b stands for */
int tk_char_byte(int32_t cp);        /* the byte a character stands for, or -1 */

/* Sorted, disjoint code point ranges; tables generated from HF in tok_unicode_tables.c. */
typedef struct tk_range {
    uint32_t lo, hi;
} tk_range;
int tk_in_ranges(const tk_range *r, size_t n, int32_t cp);
extern const tk_range tk_numeric[], tk_punct[], tk_word[], tk_mark[];
extern const size_t tk_numeric_n, tk_punct_n, tk_word_n, tk_mark_n;
/* code points utf8proc's NFC/NFD/NFKC/NFKD rewrite and HF's normalizers leave as they are */
extern const tk_range tk_keep_nfc[], tk_keep_nfd[], tk_keep_nfkc[], tk_keep_nfkd[];
extern const size_t tk_keep_nfc_n, tk_keep_nfd_n, tk_keep_nfkc_n, tk_keep_nfkd_n;
/* HF's Lowercase: every code point it changes, to one or two (b != 0) code points; sorted by cp */
typedef struct tk_lower {
    uint32_t cp, a, b;
} tk_lower;
extern const tk_lower tk_lowercase[];
extern const size_t tk_lowercase_n;

uint64_t tk_hash(const void *p, size_t n);

/* Byte string -> non-negative int64. Keys are copied into the map. */
typedef struct tk_strmap {
    struct tk_strslot *slots;
    size_t cap, count; /* cap is a power of two */
    tk_buf keys;
} tk_strmap;

int tk_strmap_init(tk_strmap *m, size_t expected);         /* 0, or -1 when out of memory */
int tk_strmap_put(tk_strmap *m, const char *k, size_t n, int64_t v); /* replaces; 0 or -1 (oom) */
int64_t tk_strmap_get(const tk_strmap *m, const char *k, size_t n); /* -1 when absent */
int64_t tk_strmap_get_h(const tk_strmap *m, const char *k, size_t n, uint64_t h); /* h = tk_hash(k, n) */
int tk_strmap_put_h(tk_strmap *m, const char *k, size_t n, uint64_t h, int64_t v);
void tk_strmap_free(tk_strmap *m);

/* uint64 -> uint64; the key UINT64_MAX is reserved. Key and value share a slot (one cache line). */
typedef struct tk_u64slot {
    uint64_t k, v;
} tk_u64slot;

typedef struct tk_u64map {
    tk_u64slot *slots;
    size_t cap, count;
} tk_u64map;

int tk_u64map_init(tk_u64map *m, size_t expected);
int tk_u64map_put(tk_u64map *m, uint64_t k, uint64_t v);
int tk_u64map_get(const tk_u64map *m, uint64_t k, uint64_t *v); /* 1 found, 0 absent */
void tk_u64map_free(tk_u64map *m);

#endif
