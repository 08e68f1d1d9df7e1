/* test_tokenizer.c: cf_tokenizer behaviour the goldens do not cover: errors for missing files,
 * malformed JSON and unsupported components; the invalid UTF-8 rule of tokenizer.h; BOS/EOS from the
 * configuration files; id lookups; decode of unknown ids; the BPE merge order on long words.
 * usage: test_tokenizer FIXTURES_TOKENIZER_DIR SCRATCH_DIR */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

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
    snprintf(dir, sizeof dir, "%s/badcfg", tmp);
    snprintf(buf, sizeof buf, "{\"model\":%s}", MINI_BPE);
    write_file(dir, "tokenizer.json", buf);
    write_file(dir, "tokenizer_config.json", "{\"bos_token\": ");
    s = cf_tokenizer_load(dir, &tok, &err);
    tt_check(s == CINFER_E_FORMAT && strstr(err.message, "tokenizer_config.json"), "bad tokenizer_config: %s",
             err.message);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s FIXTURES_TOKENIZER_DIR SCRATCH_DIR\n", argv[0]);
        return 2;
    }
    fix = argv[1];
    tmp = argv[2];
    errors();
    return tt_finish();
}
