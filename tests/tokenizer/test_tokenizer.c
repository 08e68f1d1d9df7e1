/* test_tokenizer.c: cf_tokenizer behaviour the goldens do not cover: errors for missing files,
 * malformed JSON and unsupported components; the invalid UTF-8 rule of tokenizer.h; BOS/EOS from the
 * configuration files; id lookups; decode of unknown ids; the BPE merge order on long words.
 * usage: test_tokenizer FIXTURES_TOKENIZER_DIR SCRATCH_DIR */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "text/tokenizer.h"
#include "tok_test.h"

static const char *fix, *tmp;

/* Writes DIR/NAME with the given text. */
static void write_file(const char *dir, const char *name, const char *text) {
    char path[4096];
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        exit(1);
    }
    fputs(text, f);
    fclose(f);
}

static char *dir_with(const char *name, const char *tokenizer_json) {
    static char dir[4096];
    snprintf(dir, sizeof dir, "%s/%s", tmp, name);
    write_file(dir, "tokenizer.json", tokenizer_json);
    return dir;
}

static void expect_load_error(const char *name, const char *json, cinfer_status code, const char *needle) {
    cf_tokenizer *tok = NULL;
    cinfer_error err = {0};
    cinfer_status s = cf_tokenizer_load(dir_with(name, json), &tok, &err);
    tt_check(s == code && strstr(err.message, needle) != NULL, "%s: status %s message \"%s\", want %s with \"%s\"",
             name, cinfer_status_name(s), err.message, cinfer_status_name(code), needle);
    tt_check(tok == NULL, "%s: a failed load must leave *out NULL", name);
    cf_tokenizer_free(tok);
}

static const char *MINI_BPE =
    "{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"ab\":2},\"merges\":[\"a b\"]}";

static void errors(void) {
    cf_tokenizer *tok = NULL;
    cinfer_error err = {0};
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/does-not-exist", tmp);
    cinfer_status s = cf_tokenizer_load(dir, &tok, &err);
    tt_check(s == CINFER_E_IO && strstr(err.message, "tokenizer.json"), "missing file: %s", err.message);

    expect_load_error("malformed", "{\"model\": {\"type\": \"BPE\",\n \"vocab\": {\"a\": 0,,}}}", CINFER_E_FORMAT, "line 2");
    expect_load_error("unigram", "{\"model\":{\"type\":\"Unigram\",\"vocab\":[]}}", CINFER_E_UNSUPPORTED, "Unigram");
    expect_load_error("wordpiece", "{\"model\":{\"type\":\"WordPiece\",\"vocab\":{}}}", CINFER_E_UNSUPPORTED, "WordPiece");
    expect_load_error("no_model", "{\"version\":\"1.0\"}", CINFER_E_FORMAT, "model");
    char buf[1024];
    snprintf(buf, sizeof buf, "{\"normalizer\":{\"type\":\"Precompiled\"},\"model\":%s}", MINI_BPE);
    expect_load_error("precompiled", buf, CINFER_E_UNSUPPORTED, "Precompiled");
    snprintf(buf, sizeof buf, "{\"pre_tokenizer\":{\"type\":\"UnicodeScripts\"},\"model\":%s}", MINI_BPE);
    expect_load_error("scripts", buf, CINFER_E_UNSUPPORTED, "UnicodeScripts");
    snprintf(buf, sizeof buf, "{\"decoder\":{\"type\":\"WordPiece\"},\"model\":%s}", MINI_BPE);
    expect_load_error("wp_decoder", buf, CINFER_E_UNSUPPORTED, "WordPiece");
    snprintf(buf, sizeof buf, "{\"pre_tokenizer\":{\"type\":\"Split\",\"pattern\":{\"Regex\":\"(\"},"
                              "\"behavior\":\"Isolated\",\"invert\":false},\"model\":%s}", MINI_BPE);
    expect_load_error("bad_regex", buf, CINFER_E_UNSUPPORTED, "does not compile");
    expect_load_error("bad_merge", "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[\"a c\"]}}",
                      CINFER_E_FORMAT, "merge");
    expect_load_error("merge_not_pair", "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[\"a a a\"]}}",
                      CINFER_E_FORMAT, "merge 1");
    expect_load_error("dropout", "{\"model\":{\"type\":\"BPE\",\"dropout\":0.1,\"vocab\":{},\"merges\":[]}}",
                      CINFER_E_UNSUPPORTED, "dropout");
    expect_load_error("fraction_id", "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":1.5},\"merges\":[]}}",
                      CINFER_E_FORMAT, "no valid id");
    expect_load_error("short_pair", "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[[\"a\"]]}}",
                      CINFER_E_FORMAT, "merge 1");
    expect_load_error("not_utf8", "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"\xff\":0},\"merges\":[]}}",
                      CINFER_E_FORMAT, "not UTF-8");
    expect_load_error("bad_escape", "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"\\ud800\":0},\"merges\":[]}}",
                      CINFER_E_FORMAT, "malformed JSON");
    snprintf(dir, sizeof dir, "%s/badcfg", tmp);
    snprintf(buf, sizeof buf, "{\"model\":%s}", MINI_BPE);
    write_file(dir, "tokenizer.json", buf);
    write_file(dir, "tokenizer_config.json", "{\"bos_token\": ");
    s = cf_tokenizer_load(dir, &tok, &err);
    tt_check(s == CINFER_E_FORMAT && strstr(err.message, "tokenizer_config.json"), "bad tokenizer_config: %s",
             err.message);
}

/* A scratch folder holding the unit tokenizer NAME and optional config files. */
static char *unit_dir(const char *name, const char *cfg, const char *map, const char *gen) {
    static char dir[4096];
    char src[4096];
    size_t len;
    snprintf(src, sizeof src, "%s/unit/%s.json", fix, name);
    char *json = tt_read(src, &len);
    if (!json) {
        printf("FAIL: cannot read %s\n", src);
        exit(1);
    }
    snprintf(dir, sizeof dir, "%s/%s-%d", tmp, name, (int)(tt_passed + tt_failed));
    write_file(dir, "tokenizer.json", json);
    free(json);
    if (cfg) write_file(dir, "tokenizer_config.json", cfg);
    if (map) write_file(dir, "special_tokens_map.json", map);
    if (gen) write_file(dir, "generation_config.json", gen);
    return dir;
}

static cf_tokenizer *load(const char *dir) {
    cf_tokenizer *tok;
    cinfer_error err = {0};
    if (cf_tokenizer_load(dir, &tok, &err)) {
        printf("FAIL: load %s: %s\n", dir, err.message);
        exit(1);
    }
    return tok;
}

static int same_encoding(const cf_tokenizer *tok, const char *a, size_t al, const char *b, size_t bl) {
    int32_t *x, *y;
    size_t nx, ny;
    if (cf_tokenizer_encode(tok, a, al, CF_TOK_PARSE_SPECIAL, &x, &nx, NULL)) return 0;
    if (cf_tokenizer_encode(tok, b, bl, CF_TOK_PARSE_SPECIAL, &y, &ny, NULL)) return free(x), 0;
    int same = nx == ny && memcmp(x, y, nx * sizeof *x) == 0;
    free(x);
    free(y);
    return same;
}

/* tokenizer.h: invalid UTF-8 is read as Python's bytes.decode("utf-8", "replace") reads it. */
static void invalid_utf8(void) {
    cf_tokenizer *tok = load(unit_dir("bytelevel", NULL, NULL, NULL));
    static const struct { const char *in, *as; } cases[] = {
        {"a\xff" "b", "a\xEF\xBF\xBD" "b"},                       /* a byte that never starts a character */
        {"x\xe2\x82", "x\xEF\xBF\xBD"},                           /* truncated: one replacement */
        {"\xed\xa0\x80", "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"},  /* a surrogate: three */
        {"\xc0\xaf", "\xEF\xBF\xBD\xEF\xBF\xBD"},                   /* overlong: two */
        {"\xf0\x9f\x98" "!", "\xEF\xBF\xBD!"},                     /* truncated 4-byte sequence */
        {"\xf4\x90\x80\x80", "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"}, /* above U+10FFFF */
        {"\x80\x80", "\xEF\xBF\xBD\xEF\xBF\xBD"},                   /* stray continuation bytes */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        tt_check(same_encoding(tok, cases[i].in, strlen(cases[i].in), cases[i].as, strlen(cases[i].as)),
                 "invalid UTF-8 case %zu is not encoded as its Python repair", i);
    /* a NUL byte is text like any other */
    tt_check(!same_encoding(tok, "a\0b", 3, "a", 1), "a NUL byte must not end the text");
    /* byte-level tokens that do not form UTF-8 decode to U+FFFD */
    int32_t id = cf_tokenizer_token_id(tok, "\xC3\x83"); /* "Ã" stands for the byte 0xC3 */
    char *text;
    size_t len;
    tt_check(id >= 0 && cf_tokenizer_decode(tok, &id, 1, 0, &text, &len, NULL) == CINFER_OK &&
                 len == 3 && memcmp(text, "\xEF\xBF\xBD", 3) == 0,
             "a lone byte 0xC3 must decode to U+FFFD");
    if (id >= 0 && len) free(text);
    cf_tokenizer_free(tok);
}

/* A BPE without merges (and with an empty vocabulary object) loads and encodes character by character. */
static void empty_merges(void) {
    static const char json[] = "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1},\"merges\":[ ]}}";
    static const char none[] = "{\"model\":{\"type\":\"BPE\",\"vocab\":{ },\"merges\":[]}}";
    cf_tokenizer *tok;
    cinfer_error err = {0};
    int32_t *ids;
    size_t n;
    int ok = cf_tokenizer_load_json(json, sizeof json - 1, &tok, &err) == CINFER_OK;
    tt_check(ok, "empty merges: %s", err.message);
    if (!ok) return;
    tt_check(cf_tokenizer_encode(tok, "abba", 4, 0, &ids, &n, NULL) == CINFER_OK && n == 4 && ids[0] == 0 && ids[1] == 1,
             "empty merges: one id per character");
    free(ids);
    cf_tokenizer_free(tok);
    ok = cf_tokenizer_load_json(none, sizeof none - 1, &tok, &err) == CINFER_OK;
    tt_check(ok && cf_tokenizer_vocab_size(tok) == 0, "empty vocabulary: %s", err.message);
    if (ok) cf_tokenizer_free(tok);
}

/* Vocabulary strings keep U+0000 (cJSON would cut them there). */
static void nul_in_vocab(void) {
    static const char json[] = "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"\\u0000\":1,\"b\":2,\"a\\u0000\":3,"
                               "\"a\\u0000b\":4},\"merges\":[[\"a\",\"\\u0000\"],[\"a\\u0000\",\"b\"]]}}";
    cf_tokenizer *tok;
    cinfer_error err = {0};
    if (cf_tokenizer_load_json(json, sizeof json - 1, &tok, &err)) {
        tt_check(0, "NUL vocabulary: %s", err.message);
        return;
    }
    int32_t *ids;
    size_t n;
    tt_check(cf_tokenizer_encode(tok, "a\0b\0", 4, 0, &ids, &n, NULL) == CINFER_OK && n == 2 && ids[0] == 4 && ids[1] == 1,
             "\"a\\0b\\0\" should merge to ids 4 1");
    free(ids);
    cf_tokenizer_free(tok);
}

static void special_config(void) {
    cf_tokenizer *tok = load(unit_dir("spm", "{\"bos_token\": {\"content\": \"<s>\", \"special\": true}, "
                                             "\"eos_token\": \"</s>\"}",
                                      NULL, "{\"bos_token_id\": 7, \"eos_token_id\": [2, 1, 2]}"));
    const int32_t *eos;
    int n = cf_tokenizer_eos_ids(tok, &eos);
    tt_check(cf_tokenizer_bos_id(tok) == 1 && strcmp(cf_tokenizer_bos_text(tok), "<s>") == 0, "bos from tokenizer_config");
    tt_check(n == 2 && eos[0] == 2 && eos[1] == 1 && strcmp(cf_tokenizer_eos_text(tok), "</s>") == 0,
             "eos: tokenizer_config's, then generation_config's list without repeats (got %d ids)", n);
    cf_tokenizer_free(tok);

    tok = load(unit_dir("spm", "{\"bos_token\": null}", "{\"eos_token\": {\"content\": \"<end_of_turn>\"}}",
                        "{\"bos_token_id\": 1, \"eos_token_id\": 2}"));
    n = cf_tokenizer_eos_ids(tok, &eos);
    int32_t eot = cf_tokenizer_token_id(tok, "<end_of_turn>");
    tt_check(cf_tokenizer_bos_id(tok) == -1 && cf_tokenizer_bos_text(tok) == NULL, "bos_token null means no BOS");
    tt_check(n == 2 && eos[0] == eot && eos[1] == 2 && strcmp(cf_tokenizer_eos_text(tok), "<end_of_turn>") == 0,
             "eos from special_tokens_map then generation_config's int");
    cf_tokenizer_free(tok);

    tok = load(unit_dir("spm", NULL, NULL, "{\"bos_token_id\": 1, \"eos_token_id\": 2}"));
    n = cf_tokenizer_eos_ids(tok, &eos);
    tt_check(cf_tokenizer_bos_id(tok) == 1 && strcmp(cf_tokenizer_bos_text(tok), "<s>") == 0 && n == 1 && eos[0] == 2 &&
                 strcmp(cf_tokenizer_eos_text(tok), "</s>") == 0,
             "bos and eos from generation_config alone");
    cf_tokenizer_free(tok);
}

static void lookups(void) {
    cf_tokenizer *tok = load(unit_dir("bytelevel", NULL, NULL, NULL));
    int32_t s = cf_tokenizer_token_id(tok, "<s>"), word = cf_tokenizer_token_id(tok, "word");
    tt_check(s >= 0 && strcmp(cf_tokenizer_token_text(tok, s), "<s>") == 0, "token_id/token_text of <s>");
    tt_check(cf_tokenizer_is_special(tok, s) && word >= 0 && !cf_tokenizer_is_special(tok, word),
             "<s> is special, the added token \"word\" is not");
    tt_check(cf_tokenizer_token_id(tok, "no such token") == -1 && cf_tokenizer_token_text(tok, 1 << 30) == NULL &&
                 cf_tokenizer_token_text(tok, -1) == NULL,
             "absent tokens");
    tt_check(cf_tokenizer_vocab_size(tok) == cf_tokenizer_token_id(tok, "<|special|>x") + 1, "vocab size is 1 + the last id");
    char *text;
    size_t len;
    cinfer_error err = {0};
    int32_t bad[2] = {s, cf_tokenizer_vocab_size(tok)};
    tt_check(cf_tokenizer_decode(tok, bad, 2, 0, &text, &len, &err) == CINFER_E_TOKEN_OUT_OF_RANGE &&
                 strstr(err.message, "position 1"),
             "decode of an unknown id: %s", err.message);
    bad[0] = -5;
    tt_check(cf_tokenizer_decode(tok, bad, 1, 0, &text, &len, &err) == CINFER_E_TOKEN_OUT_OF_RANGE, "negative id");
    int32_t *ids;
    size_t n;
    tt_check(cf_tokenizer_encode(tok, NULL, 0, 0, &ids, &n, &err) == CINFER_OK && n == 0, "empty text, no specials");
    free(ids);
    tt_check(cf_tokenizer_encode(tok, "", 0, CF_TOK_ADD_SPECIAL, &ids, &n, &err) == CINFER_OK && n == 2 && ids[0] == s,
             "empty text with specials is <s> </s>");
    free(ids);
    cf_tokenizer_free(tok);
}

static double seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* A 2 MB word: BPE must stay O(n log n) (a quadratic merge loop would take hours). */
static void long_word(void) {
    cf_tokenizer *tok = load(unit_dir("bytelevel", NULL, NULL, NULL));
    size_t n = 2 << 20;
    char *w = malloc(n);
    uint32_t r = 12345;
    for (size_t i = 0; i < n; i++) {
        r = r * 1103515245u + 12345u;
        w[i] = "etaoinshrdlu"[(r >> 16) % 12];
    }
    int32_t *ids;
    size_t k;
    char *back;
    size_t blen;
    double t0 = seconds();
    int ok = cf_tokenizer_encode(tok, w, n, 0, &ids, &k, NULL) == CINFER_OK;
    double dt = seconds() - t0;
    ok = ok && cf_tokenizer_decode(tok, ids, k, 1, &back, &blen, NULL) == CINFER_OK;
    tt_check(ok && blen == n + 1 && back[0] == ' ' && memcmp(back + 1, w, n) == 0, "a long word round-trips");
    tt_check(dt < 10.0, "encoding a 2 MB word took %.1f s", dt);
    if (ok) {
        free(ids);
        free(back);
    }
    free(w);
    cf_tokenizer_free(tok);
}

typedef struct job {
    const cf_tokenizer *tok;
    const char *text;
    int32_t *ids;
    size_t n;
} job;

static void *encode_job(void *arg) {
    job *j = arg;
    if (cf_tokenizer_encode(j->tok, j->text, strlen(j->text), CF_TOK_ADD_SPECIAL, &j->ids, &j->n, NULL)) j->ids = NULL;
    return NULL;
}

/* One tokenizer, several threads: the shared word memo must not mix their results. */
static void threads(void) {
    cf_tokenizer *tok = load(unit_dir("spm", NULL, NULL, NULL));
    static const char *texts[4] = {"the quick brown fox jumps over the lazy dog", "hello world hello there",
                                   "numbers 12345 and 67890, words like running", "Don't stop believing"};
    job jobs[4][8];
    pthread_t th[4];
    for (int round = 0; round < 8; round++) {
        for (int t = 0; t < 4; t++) {
            jobs[t][round] = (job){tok, texts[(t + round) % 4], NULL, 0};
            pthread_create(&th[t], NULL, encode_job, &jobs[t][round]);
        }
        for (int t = 0; t < 4; t++) pthread_join(th[t], NULL);
    }
    int ok = 1;
    for (int round = 0; round < 8; round++)
        for (int t = 0; t < 4; t++) {
            job *a = &jobs[t][round], *b = &jobs[(t + round) % 4][0];
            ok &= a->ids && b->ids && a->n == b->n && memcmp(a->ids, b->ids, a->n * sizeof *a->ids) == 0;
        }
    tt_check(ok, "concurrent encodes of the same text differ");
    for (int round = 0; round < 8; round++)
        for (int t = 0; t < 4; t++) free(jobs[t][round].ids);
    cf_tokenizer_free(tok);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s FIXTURES_TOKENIZER_DIR SCRATCH_DIR\n", argv[0]);
        return 2;
    }
    fix = argv[1];
    tmp = argv[2];
    errors();
    invalid_utf8();
    nul_in_vocab();
    empty_merges();
    special_config();
    lookups();
    long_word();
    threads();
    return tt_finish();
}
