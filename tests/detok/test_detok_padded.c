/* test_detok_padded.c: padded vocabularies. When the model's embedding has more rows than the tokenizer
 * has ids (Qwen2.5/3 and Gemma ship so), the ids in between decode to nothing, in a full decode, in the
 * streaming detokenizer and in a generation through the public API; ids outside the model's vocabulary
 * stay errors. Arguments: a folder with a tokenizer.json, and a scratch folder for a tiny model. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>
#include "cinfer.h"
#include "text/detok.h"
#include "text/tokenizer.h"
#include "../check.h"
#include "../engine/tiny_model.h"

static char *decode(const cf_tokenizer *tok, const int32_t *ids, size_t n, cinfer_error *err) {
    char *text = NULL;
    size_t len = 0;
    return cf_tokenizer_decode(tok, ids, n, 1, &text, &len, err) == CINFER_OK ? text : NULL;
}

static void check_tokenizer(const char *dir) {
    cf_tokenizer *tok = NULL;
    cinfer_error err = {0};
    if (cf_tokenizer_load(dir, &tok, &err) != CINFER_OK) { CHECK(0, "load %s: %s", dir, err.message); return; }
    int32_t n = cf_tokenizer_vocab_size(tok);
    int32_t plain[] = {300, 301, 302}, padded[] = {n, 300, n + 7, 301, n + 1, 302, n + 7};
    char *t = decode(tok, padded, 7, &err);
    CHECK(!t && err.code == CINFER_E_TOKEN_OUT_OF_RANGE, "a tokenizer alone refuses id %d", n);
    free(t);

    cf_tokenizer_set_model_vocab(tok, n + 8);
    char *want = decode(tok, plain, 3, &err), *got = decode(tok, padded, 7, &err);
    CHECK(want && got && !strcmp(want, got), "padding ids decode to nothing: '%s' vs '%s' (%s)", want ? want : "",
          got ? got : "", err.message);
    int32_t outside[] = {300, n + 8}, negative[] = {-1};
    t = decode(tok, outside, 2, &err);
    CHECK(!t && err.code == CINFER_E_TOKEN_OUT_OF_RANGE && strstr(err.message, "position 1"), "id %d: %s", n + 8, err.message);
    free(t);
    t = decode(tok, negative, 1, &err);
    CHECK(!t && err.code == CINFER_E_TOKEN_OUT_OF_RANGE, "id -1: %s", err.message);
    free(t);

    cf_detok *d = NULL;
    CHECK(cf_detok_create(cf_detok_tokenizer_decode, tok, 1, &d, &err) == CINFER_OK, "detok: %s", err.message);
    char stream[256] = "";
    const char *chunk;
    size_t len;
    for (int i = 0; d && i < 7; i++) {
        cinfer_status s = cf_detok_push(d, padded[i], &chunk, &len, &err);
        CHECK(s == CINFER_OK, "push %d: %s", padded[i], err.message);
        if (s == CINFER_OK) strncat(stream, chunk, len);
    }
    if (d && cf_detok_flush(d, &chunk, &len, &err) == CINFER_OK) strncat(stream, chunk, len);
    CHECK(want && !strcmp(stream, want), "streamed '%s', want '%s'", stream, want ? want : "");
    cf_detok_free(d);
    free(want);
    free(got);
    cf_tokenizer_free(tok);
}

/* The tiny model with the last 8 byte tokens (bytes F8-FF, never in UTF-8) left out of tokenizer.json. */
static int trim_tokenizer(const char *dir) {
    char p[4096];
    snprintf(p, sizeof p, "%s/tokenizer.json", dir);
    FILE *f = fopen(p, "rb");
    if (!f) return -1;
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    cJSON *t = cJSON_Parse(buf);
    cJSON *vocab = cJSON_GetObjectItem(cJSON_GetObjectItem(t, "model"), "vocab");
    if (!vocab) { cJSON_Delete(t); return -1; }
    for (cJSON *v = vocab->child, *next; v; v = next) {
        next = v->next;
        if (v->valueint >= TINY_VOCAB - 8) cJSON_DeleteItemFromObject(vocab, v->string);
    }
    char *out = cJSON_Print(t);
    cJSON_Delete(t);
    f = fopen(p, "wb");
    int rc = f && out && fputs(out, f) >= 0 ? 0 : -1;
    if (f) fclose(f);
    free(out);
    return rc;
}

static void check_generation(const char *dir) {
    if (tiny_model_write(dir, 0) || trim_tokenizer(dir)) { CHECK(0, "cannot write the tiny model to %s", dir); return; }
    cinfer_model *m = NULL;
    cinfer_engine *e = NULL;
    cinfer_error err = {0};
    cinfer_model_params mp = cinfer_model_default_params();
    mp.n_threads = 1;
    if (cinfer_model_load(dir, &mp, &m, &err) != CINFER_OK || cinfer_engine_create(m, NULL, &e, &err) != CINFER_OK) {
        CHECK(0, "%s: %s", dir, err.message);
        cinfer_model_free(m);
        return;
    }
    int32_t ids[] = {TINY_BYTE + 'h', TINY_BYTE + 'i'};
    cinfer_logit_bias bias[] = {{TINY_VOCAB - 1, 1000.0f}}; /* the model picks a padding id every step */
    cinfer_request r = cinfer_request_default();
    r.prompt_ids = ids;
    r.n_prompt_ids = 2;
    r.max_tokens = 3;
    r.temperature = 0;
    r.ignore_eos = 1;
    r.logit_bias = bias;
    r.n_logit_bias = 1;
    cinfer_session *s = NULL;
    const cinfer_result *res = NULL;
    cinfer_status st = cinfer_session_open(e, &r, NULL, &s, &err);
    if (st == CINFER_OK) st = cinfer_session_wait(s, -1, &res, &err);
    CHECK(st == CINFER_OK && res && res->n_tokens == 3 && res->tokens[0] == TINY_VOCAB - 1 && res->text_len == 0,
          "a run that picks padding ids: %s (%s)", cinfer_status_name(st), err.message);
    cinfer_session_free(s);
    int32_t pad[] = {TINY_BYTE + 'o', TINY_VOCAB - 1, TINY_BYTE + 'k'}, out_of_model[] = {TINY_VOCAB};
    char *text = NULL;
    size_t len = 0;
    CHECK(cinfer_detokenize(m, pad, 3, &text, &len, &err) == CINFER_OK && text && !strcmp(text, "ok"),
          "cinfer_detokenize over a padding id: %s", err.message);
    cinfer_free(text);
    text = NULL;
    CHECK(cinfer_detokenize(m, out_of_model, 1, &text, &len, &err) == CINFER_E_TOKEN_OUT_OF_RANGE,
          "an id outside the model's vocabulary: %s", err.message);
    cinfer_free(text);
    cinfer_model_free(m);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: test_detok_padded TOKENIZER_DIR TMP_DIR\n");
        return 2;
    }
    check_tokenizer(argv[1]);
    check_generation(argv[2]);
    printf("%d passed, %d failed\n", checks - failures, failures);
    return failures ? 1 : 0;
}
