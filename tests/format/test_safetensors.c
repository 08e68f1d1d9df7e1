/* test_safetensors.c: hostile safetensors files (offsets near 2^64, fractional or negative numbers,
 * overlapping or misaligned ranges, byte counts that differ from the shape, shapes whose element count
 * overflows, bad header lengths, malformed __metadata__, trailing bytes, duplicate names) each fail with
 * CINFER_E_FORMAT and a message; well-formed edge cases still load. Usage: test_safetensors TMPDIR */
#include "format/safetensors.h"
#include "check.h"

#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[2048];

/* Writes the little-endian length hlen, header_bytes of header and data_len bytes of data. */
static void write_raw(const char *path, uint64_t hlen, const char *header, size_t header_bytes, const void *data,
                      size_t data_len) {
    FILE *fp = fopen(path, "wb");
    unsigned char lenb[8];
    for (int i = 0; i < 8; i++) lenb[i] = (unsigned char)(hlen >> (8 * i));
    fwrite(lenb, 1, 8, fp);
    fwrite(header, 1, header_bytes, fp);
    if (data_len) fwrite(data, 1, data_len, fp);
    fclose(fp);
}

/* A file of header, padded with spaces to a multiple of 8 bytes, and data_len zero bytes. */
static const char *write_st(const char *name, const char *header, size_t data_len) {
    static char path[4096];
    static char padded[1 << 16];
    snprintf(path, sizeof path, "%s/%s.safetensors", dir, name);
    size_t n = strlen(header);
    memcpy(padded, header, n);
    while (n % 8) padded[n++] = ' ';
    void *data = calloc(1, data_len ? data_len : 1);
    write_raw(path, n, padded, n, data, data_len);
    free(data);
    return path;
}

/* The file must fail to open with code, and the message must contain want. */
static void expect_fail(const char *name, const char *header, size_t data_len, cinfer_status code, const char *want) {
    const char *path = write_st(name, header, data_len);
    cf_st_set *set = NULL;
    cinfer_error err = {0};
    cinfer_status st = cf_st_open_file(path, &set, &err);
    CHECK(st == code && !set, "%s: status %s (want %s), message '%s'", name, cinfer_status_name(st),
          cinfer_status_name(code), err.message);
    CHECK(!want || strstr(err.message, want), "%s: message '%s' lacks '%s'", name, err.message, want);
    cf_st_close(set);
}

static cf_st_set *expect_ok(const char *name, const char *header, size_t data_len) {
    const char *path = write_st(name, header, data_len);
    cf_st_set *set = NULL;
    cinfer_error err = {0};
    cinfer_status st = cf_st_open_file(path, &set, &err);
    CHECK(st == CINFER_OK && set, "%s: %s", name, err.message);
    return set;
}

static void check_offsets(void) {
    /* [2^64 - 4096, 2^64]: both are doubles; 2^64 used to convert to 0 and pass the bounds check */
    expect_fail("offset_2p64",
                "{\"w\":{\"dtype\":\"F32\",\"shape\":[1024],\"data_offsets\":[18446744073709547520,18446744073709551616]}}",
                4096, CINFER_E_FORMAT, "data_offsets");
    expect_fail("offset_2p53", "{\"w\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[9007199254740993,9007199254740993]}}",
                8, CINFER_E_FORMAT, "data_offsets");
    expect_fail("offset_inf", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,1e999]}}", 8, CINFER_E_FORMAT,
                "data_offsets");
    expect_fail("offset_fraction", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0.5,4.5]}}", 8,
                CINFER_E_FORMAT, "data_offsets");
    expect_fail("offset_negative", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}}", 8, CINFER_E_FORMAT,
                "data_offsets");
    expect_fail("offset_string", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[\"0\",4]}}", 8, CINFER_E_FORMAT,
                "data_offsets");
    expect_fail("offset_three", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", 8, CINFER_E_FORMAT,
                "data_offsets");
    expect_fail("offset_reversed", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,4]}}", 8, CINFER_E_FORMAT,
                "end before they begin");
    expect_fail("offset_past_end", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4, CINFER_E_FORMAT,
                "truncated");
    expect_fail("overlap",
                "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
                16, CINFER_E_FORMAT, "overlapping");
    expect_fail("overlap_same",
                "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                "\"b\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
                8, CINFER_E_FORMAT, "overlapping");
    expect_fail("misaligned", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[2,6]}}", 8, CINFER_E_FORMAT,
                "aligned");
}

static void check_shapes(void) {
    expect_fail("size_mismatch", "{\"w\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 16, CINFER_E_FORMAT,
                "8 data bytes for 3 elements");
    /* 2^32 * 2^32 * 16 elements wrap to 0 in 64 bits and used to match 0 data bytes */
    expect_fail("count_overflow", "{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,16],\"data_offsets\":[0,0]}}",
                8, CINFER_E_FORMAT, "overflows");
    /* 2^62 elements of 4 bytes: the byte count wraps to 0 */
    expect_fail("bytes_overflow", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2147483648,2147483648],\"data_offsets\":[0,0]}}", 8,
                CINFER_E_FORMAT, "data bytes for");
    expect_fail("shape_fraction", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", 8, CINFER_E_FORMAT,
                "shape[0]");
    expect_fail("shape_negative", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,-1],\"data_offsets\":[0,0]}}", 8, CINFER_E_FORMAT,
                "shape[1]");
    expect_fail("shape_huge", "{\"w\":{\"dtype\":\"U8\",\"shape\":[18446744073709551616],\"data_offsets\":[0,0]}}", 8,
                CINFER_E_FORMAT, "shape[0]");
    expect_fail("shape_not_array", "{\"w\":{\"dtype\":\"F32\",\"shape\":4,\"data_offsets\":[0,4]}}", 8, CINFER_E_FORMAT,
                "lacks");
    expect_fail("shape_5d", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1],\"data_offsets\":[0,4]}}", 8,
                CINFER_E_UNSUPPORTED, "dimensions");
    expect_fail("dtype_unknown", "{\"w\":{\"dtype\":\"F32X\",\"shape\":[1],\"data_offsets\":[0,4]}}", 8, CINFER_E_FORMAT,
                "unknown dtype");
    expect_fail("dtype_number", "{\"w\":{\"dtype\":4,\"shape\":[1],\"data_offsets\":[0,4]}}", 8, CINFER_E_FORMAT, "lacks");
}

static void check_header(void) {
    expect_fail("entry_number", "{\"w\":5}", 8, CINFER_E_FORMAT, "not an object");
    expect_fail("entry_array", "{\"w\":[]}", 8, CINFER_E_FORMAT, "not an object");
    expect_fail("duplicate",
                "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                8, CINFER_E_FORMAT, "appears twice");
    expect_fail("metadata_number", "{\"__metadata__\":5}", 0, CINFER_E_FORMAT, "__metadata__");
    expect_fail("metadata_values", "{\"__metadata__\":{\"format\":\"pt\",\"n\":1}}", 0, CINFER_E_FORMAT, "__metadata__");
    expect_fail("metadata_twice", "{\"__metadata__\":{},\"__metadata__\":{}}", 0, CINFER_E_FORMAT, "__metadata__");
    expect_fail("not_object", "[1,2,3]", 0, CINFER_E_FORMAT, "JSON object");
    expect_fail("trailing", "{}{\"w\":1}", 0, CINFER_E_FORMAT, "JSON object");
    expect_fail("broken_json", "{\"w\":{\"dtype\":", 0, CINFER_E_FORMAT, "JSON object");

    /* lengths that cannot be right: zero, past the end, near 2^64, above HF's 100 MB limit */
    char path[4096];
    const uint64_t lens[] = {0, 1, 64, UINT64_C(1) << 63, UINT64_MAX, UINT64_MAX - 7};
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        snprintf(path, sizeof path, "%s/hlen%zu.safetensors", dir, i);
        write_raw(path, lens[i], "{}      ", 8, NULL, 0);
        cf_st_set *set = NULL;
        cinfer_error err = {0};
        cinfer_status st = cf_st_open_file(path, &set, &err);
        CHECK(st == CINFER_E_FORMAT && strstr(err.message, "header length"), "header length %llu: %s",
              (unsigned long long)lens[i], err.message);
        cf_st_close(set);
    }
    snprintf(path, sizeof path, "%s/hlen_big.safetensors", dir);
    write_raw(path, 200000000, "{", 1, NULL, 0);
    CHECK(truncate(path, 200000000 + 8) == 0, "truncate");
    cf_st_set *set = NULL;
    cinfer_error err = {0};
    CHECK(cf_st_open_file(path, &set, &err) == CINFER_E_FORMAT && strstr(err.message, "limit"), "200 MB header: %s",
          err.message);
    unlink(path);
    for (size_t n = 0; n < 8; n++) {
        snprintf(path, sizeof path, "%s/short%zu.safetensors", dir, n);
        write_raw(path, 0, "", 0, NULL, 0);
        CHECK(truncate(path, (off_t)n) == 0, "truncate");
        CHECK(cf_st_open_file(path, &set, &err) == CINFER_E_FORMAT && strstr(err.message, "truncated"), "%zu-byte file: %s",
              n, err.message);
    }
    CHECK(cf_st_open_memory("\2\0\0\0\0\0\0\0{}", 10, "mem", &set, &err) == CINFER_OK, "{} from memory: %s", err.message);
    cf_st_close(set);
    CHECK(cf_st_open_memory("\2\0\0\0\0\0", 6, "mem", &set, &err) == CINFER_E_FORMAT && !set, "6 bytes from memory");
}

static void check_valid(void) {
    cf_st_set *set = expect_ok("valid",
                               "{\"__metadata__\":{\"format\":\"pt\"},"
                               "\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]},"
                               "\"b\":{\"dtype\":\"BF16\",\"shape\":[0],\"data_offsets\":[16,16]},"
                               "\"c\":{\"dtype\":\"U8\",\"shape\":[0,3],\"data_offsets\":[16,16]},"
                               "\"d\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[16,20]},"
                               "\"e\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[24,32]}}",
                               32);
    if (set) {
        CHECK(cf_st_count(set) == 5, "5 tensors, got %zu", cf_st_count(set));
        const cf_st_tensor *a = cf_st_find(set, "a"), *d = cf_st_find(set, "d"), *e = cf_st_find(set, "e");
        CHECK(a && a->n_dims == 2 && a->shape[0] == 2 && a->nbytes == 16 && a->dtype == CF_F32, "tensor a");
        CHECK(d && d->n_dims == 0 && d->nbytes == 4 && (const char *)d->data == (const char *)a->data + 16, "scalar d");
        CHECK(e && e->dtype == -1 && !strcmp(e->dtype_name, "I64") && (const char *)e->data == (const char *)a->data + 24,
              "tensor e (a gap before it is allowed)");
        CHECK(cf_st_find(set, "z") == NULL, "no tensor z");
    }
    cf_st_close(set);
    cf_st_close(expect_ok("metadata_null", "{\"__metadata__\":null}", 0));
    set = expect_ok("empty", "{}", 0);
    CHECK(set && cf_st_count(set) == 0 && !cf_st_find(set, "a"), "an empty header has no tensors");
    cf_st_close(set);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: test_safetensors TMPDIR\n");
        return 2;
    }
    snprintf(dir, sizeof dir, "%s", argv[1]);
    mkdir(dir, 0755);
    check_offsets();
    check_shapes();
    check_header();
    check_valid();
    printf("test_safetensors: %d checks, %d failures\n", checks, failures);
    return failures != 0;
}
