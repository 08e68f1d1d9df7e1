/* test_loader.c: a tiny Llama written by the test itself loads and runs; each kind of broken model folder
 * (missing file, malformed or truncated safetensors, wrong shape or dtype, unknown architecture, broken
 * shard index) fails with its status and a message naming the file or tensor. Also: rollback is exact, and
 * the same weights stored as bf16 give the f32 model's logits within bf16 rounding. */
#include "model/model.h"
#include "format/safetensors.h"
#include "base/status.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../check.h"

enum { D = 32, L = 2, H = 4, KV = 2, HD = 8, F = 48, V = 64 };
static char root[2048];

static void write_text(const char *dir, const char *name, const char *text) {
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *fp = fopen(p, "wb");
    if (!fp) { perror(p); exit(1); }
    fputs(text, fp);
    fclose(fp);
}

static const char *config =
    "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":32,\"intermediate_size\":48,\"num_attention_heads\":4,"
    "\"num_key_value_heads\":2,\"num_hidden_layers\":2,\"vocab_size\":64,\"max_position_embeddings\":64,"
    "\"rms_norm_eps\":1e-5,\"rope_theta\":10000.0,\"tie_word_embeddings\":false,\"eos_token_id\":1}";

/* All tensors of the tiny model; `skip` names one to leave out, `bad_shape` one to write transposed. */
static void write_model(const char *dir, const char *skip, const char *bad_shape, int f16) {
    mkdir(dir, 0755);
    write_text(dir, "config.json", config);
    cf_st_write_entry e[64];
    int n = 0;
    static float buf[64][V * D * 2];
    uint64_t s = 42;
    char names[64][96];
#define ADD(nm, r, c) do { \
        snprintf(names[n], sizeof names[n], "%s", nm); \
        if (skip && !strcmp(skip, nm)) break; \
        int64_t rr = r, cc = c; \
        if (bad_shape && !strcmp(bad_shape, nm)) { int64_t t = rr; rr = cc ? cc : rr + 1; cc = cc ? t : 0; } \
        for (int64_t i = 0; i < (rr) * ((cc) ? (cc) : 1); i++) { s = s * 6364136223846793005ull + 1442695040888963407ull; buf[n][i] = ((float)(s >> 40) / (1 << 24) - 0.5f) * 0.5f; } \
        e[n] = (cf_st_write_entry){.name = names[n], .dtype = CF_F32, .n_dims = (cc) ? 2 : 1, .shape = {rr, cc}, .data = buf[n]}; \
        n++; } while (0)
    ADD("model.embed_tokens.weight", V, D);
    ADD("model.norm.weight", D, 0);
    ADD("lm_head.weight", V, D);
    for (int l = 0; l < L; l++) {
        char nm[96];
#define LAYER(suffix, r, c) do { snprintf(nm, sizeof nm, "model.layers.%d.%s", l, suffix); ADD(nm, r, c); } while (0)
        LAYER("input_layernorm.weight", D, 0);
        LAYER("post_attention_layernorm.weight", D, 0);
        LAYER("self_attn.q_proj.weight", H * HD, D);
        LAYER("self_attn.k_proj.weight", KV * HD, D);
        LAYER("self_attn.v_proj.weight", KV * HD, D);
        LAYER("self_attn.o_proj.weight", D, H * HD);
        LAYER("mlp.gate_proj.weight", F, D);
        LAYER("mlp.up_proj.weight", F, D);
        LAYER("mlp.down_proj.weight", D, F);
    }
    static uint16_t half[64][V * D * 2];
    if (f16) {
        for (int i = 0; i < n; i++) {
            size_t cnt = (size_t)e[i].shape[0] * (e[i].n_dims == 2 ? (size_t)e[i].shape[1] : 1);
            for (size_t j = 0; j < cnt; j++) half[i][j] = cf_f32_to_bf16(((float *)e[i].data)[j]);
            e[i].data = half[i];
            e[i].dtype = CF_BF16;
        }
    }
    char p[4096];
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    cinfer_error err;
    if (cf_st_write(p, e, (size_t)n, &err) != CINFER_OK) { fprintf(stderr, "%s\n", err.message); exit(1); }
}

static cinfer_status try_load(const char *dir, cinfer_error *err) {
    cf_model *m = NULL;
    cinfer_status st = cf_model_load(dir, NULL, &m, err);
    cf_model_free(m);
    return st;
}

static void expect_error(const char *what, const char *dir, cinfer_status want, const char *needle) {
    cinfer_error err = {0};
    cinfer_status st = try_load(dir, &err);
    CHECK(st == want, "%s: status %s, want %s (%s)", what, cinfer_status_name(st), cinfer_status_name(want), err.message);
    CHECK(strstr(err.message, needle) != NULL, "%s: message '%s' does not mention '%s'", what, err.message, needle);
    printf("%-28s -> %s: %s\n", what, cinfer_status_name(st), err.message);
}

static void sub(char *out, const char *name) { snprintf(out, 4096, "%s/%s", root, name); }

static void patch_file(const char *path, long off, const void *bytes, size_t n, long truncate_to) {
    FILE *fp = fopen(path, "r+b");
    if (!fp) { perror(path); exit(1); }
    if (bytes && (fseek(fp, off, SEEK_SET) != 0 || fwrite(bytes, 1, n, fp) != n)) { perror(path); exit(1); }
    fclose(fp);
    if (truncate_to >= 0 && truncate(path, truncate_to) != 0) { perror("truncate"); exit(1); }
}

/* the logits of all 8 ids in a fresh sequence of the model in dir; 0 when it does not load or run */
static int logits_of(const char *dir, const int32_t *ids, float *out) {
    cinfer_error err = {0};
    cf_model *m = NULL;
    cf_seq *s = NULL;
    int ok = cf_model_load(dir, NULL, &m, &err) == CINFER_OK && cf_seq_create(m, 0, &s, &err) == CINFER_OK &&
             cf_model_eval(m, s, ids, 8, out, 1, &err) == CINFER_OK;
    if (!ok) fprintf(stderr, "%s: %s\n", dir, err.message);
    cf_seq_free(s);
    cf_model_free(m);
    return ok;
}

int main(int argc, char **argv) {
    snprintf(root, sizeof root, "%s", argc > 1 ? argv[1] : "loader-tmp");
    mkdir(root, 0755);
    char d[4096], p[4096];

    /* a good model loads, runs, and rolls back exactly */
    sub(d, "good");
    write_model(d, NULL, NULL, 0);
    cinfer_error err = {0};
    cf_model *m = NULL;
    CHECK(cf_model_load(d, NULL, &m, &err) == CINFER_OK, "good model: %s", err.message);
    if (m) {
        cf_seq *s = NULL;
        CHECK(cf_seq_create(m, 0, &s, &err) == CINFER_OK, "seq: %s", err.message);
        int32_t ids[8] = {3, 9, 27, 17, 51, 2, 60, 33};
        float a[V], b[V], all[8 * V];
        CHECK(cf_model_eval(m, s, ids, 8, all, 1, &err) == CINFER_OK, "eval: %s", err.message);
        /* token by token gives the same logits as the batch */
        cf_seq *s2 = NULL;
        CHECK(cf_seq_create(m, 0, &s2, &err) == CINFER_OK, "seq: %s", err.message);
        double maxd = 0;
        for (int i = 0; s2 && i < 8; i++) {
            CHECK(cf_model_eval(m, s2, &ids[i], 1, a, 0, &err) == CINFER_OK, "eval of token %d: %s", i, err.message);
            for (int j = 0; j < V; j++) maxd = fmax(maxd, fabs(a[j] - all[i * V + j]));
        }
        CHECK(s2 && maxd < 1e-5, "incremental vs batch logits differ by %g", maxd);
        /* rollback: truncate to 5 and re-feed gives the same logits as before */
        CHECK(s2 && cf_seq_truncate(s2, 5, &err) == CINFER_OK, "truncate: %s", err.message);
        CHECK(s2 && cf_model_eval(m, s2, &ids[5], 3, b, 0, &err) == CINFER_OK, "re-feed: %s", err.message);
        maxd = 0;
        for (int j = 0; j < V; j++) maxd = fmax(maxd, fabs(b[j] - all[7 * V + j]));
        CHECK(maxd < 1e-5, "logits after rollback differ by %g", maxd);
        if (!s2) { cf_seq_free(s); cf_model_free(m); return 1; }
        CHECK(cf_seq_truncate(s2, 9, &err) == CINFER_E_INVALID_ARGUMENT, "truncate past the end must fail");
        /* bad token ids and overflow change nothing */
        int32_t bad[2] = {1, V};
        int before = cf_seq_len(s2);
        CHECK(cf_model_eval(m, s2, bad, 2, a, 0, &err) == CINFER_E_TOKEN_OUT_OF_RANGE, "out-of-range id accepted");
        CHECK(cf_seq_len(s2) == before, "a failed eval changed the sequence");
        int32_t many[64] = {0};
        CHECK(cf_model_eval(m, s2, many, 64, NULL, 0, &err) == CINFER_E_CONTEXT_OVERFLOW, "context overflow accepted");
        CHECK(cf_model_eval(m, s2, many, 0, NULL, 0, &err) == CINFER_E_EMPTY_PROMPT, "empty eval accepted");
        cf_seq_free(s);
        cf_seq_free(s2);
        cf_model_free(m);
    }
    /* the same weights in bf16: each weight moves by at most 2^-9 of itself, so every logit by a small
     * fraction of the logits' scale (in this 2-layer model about 3e-3 of max |logit|): within 2e-2 of it.
     * Bytes read as the wrong type or a tensor bound to another's data miss that by far. */
    sub(d, "bf16");
    write_model(d, NULL, NULL, 1);
    {
        const int32_t ids[8] = {3, 9, 27, 17, 51, 2, 60, 33};
        float f32[8 * V], bf16[8 * V];
        sub(p, "good");
        if (logits_of(p, ids, f32) && logits_of(d, ids, bf16)) {
            double maxd = 0, scale = 0;
            for (int i = 0; i < 8 * V; i++) {
                maxd = fmax(maxd, fabs((double)bf16[i] - f32[i]));
                scale = fmax(scale, fabs((double)f32[i]));
            }
            printf("bf16 weights: max |logit - f32 logit| %.3g, max |logit| %.3g\n", maxd, scale);
            CHECK(scale > 0 && maxd <= 2e-2 * scale, "bf16 logits differ from f32 by %g (max |logit| %g)", maxd, scale);
        } else {
            CHECK(0, "the bf16 model does not load or run");
        }
    }

    sub(d, "no-such-folder");
    expect_error("missing folder", d, CINFER_E_IO, "config.json");

    sub(d, "no-weights");
    mkdir(d, 0755);
    write_text(d, "config.json", config);
    expect_error("missing safetensors", d, CINFER_E_IO, "model.safetensors");

    sub(d, "bad-config");
    write_model(d, NULL, NULL, 0);
    write_text(d, "config.json", "{\"architectures\": [\"LlamaForCausalLM\"], ");
    expect_error("malformed config.json", d, CINFER_E_FORMAT, "config.json");

    sub(d, "unknown-arch");
    write_model(d, NULL, NULL, 0);
    write_text(d, "config.json", "{\"architectures\":[\"FancyNetForCausalLM\"],\"hidden_size\":32}");
    expect_error("unknown architecture", d, CINFER_E_UNSUPPORTED, "FancyNetForCausalLM");

    sub(d, "missing-field");
    write_model(d, NULL, NULL, 0);
    write_text(d, "config.json", "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":32}");
    expect_error("config without layers", d, CINFER_E_FORMAT, "num_hidden_layers");

    sub(d, "missing-tensor");
    write_model(d, "model.layers.1.mlp.up_proj.weight", NULL, 0);
    expect_error("missing tensor", d, CINFER_E_FORMAT, "model.layers.1.mlp.up_proj.weight");

    sub(d, "wrong-shape");
    write_model(d, NULL, "model.layers.0.self_attn.k_proj.weight", 0);
    expect_error("wrong shape", d, CINFER_E_FORMAT, "model.layers.0.self_attn.k_proj.weight");

    sub(d, "truncated");
    write_model(d, NULL, NULL, 0);
    snprintf(p, sizeof p, "%s/model.safetensors", d);
    patch_file(p, 0, NULL, 0, 4000);
    expect_error("truncated file", d, CINFER_E_FORMAT, "model.safetensors");

    sub(d, "tiny-file");
    write_model(d, NULL, NULL, 0);
    snprintf(p, sizeof p, "%s/model.safetensors", d);
    patch_file(p, 0, NULL, 0, 5);
    expect_error("5-byte file", d, CINFER_E_FORMAT, "truncated");

    sub(d, "huge-header");
    write_model(d, NULL, NULL, 0);
    snprintf(p, sizeof p, "%s/model.safetensors", d);
    unsigned char big[8] = {0xff, 0xff, 0xff, 0xff, 0xff, 0, 0, 0};
    patch_file(p, 0, big, 8, -1);
    expect_error("header length too large", d, CINFER_E_FORMAT, "header length");

    sub(d, "garbage-header");
    write_model(d, NULL, NULL, 0);
    snprintf(p, sizeof p, "%s/model.safetensors", d);
    patch_file(p, 8, "#!garbage", 9, -1);
    expect_error("malformed header JSON", d, CINFER_E_FORMAT, "JSON");

    sub(d, "bad-dtype");
    write_model(d, NULL, NULL, 0);
    snprintf(p, sizeof p, "%s/model.safetensors", d);
    {
        /* model.norm.weight's "F32" becomes "I32", a dtype of the same width the loader does not take */
        FILE *fp = fopen(p, "r+b");
        if (!fp) { perror(p); return 1; }
        char hdr[8192] = {0};
        size_t got = fseek(fp, 8, SEEK_SET) == 0 ? fread(hdr, 1, sizeof hdr - 1, fp) : 0;
        char *q = strstr(hdr, "\"model.norm.weight\"");
        char *dt = q ? strstr(q, "\"F32\"") : NULL;
        CHECK(dt && got, "no F32 dtype of model.norm.weight in the header");
        fclose(fp);
        if (dt && got) patch_file(p, 8 + (long)(dt - hdr), "\"I32\"", 5, -1);
    }
    expect_error("unsupported dtype", d, CINFER_E_UNSUPPORTED, "model.norm.weight");

    sub(d, "sharded-missing");
    write_model(d, NULL, NULL, 0);
    snprintf(p, sizeof p, "%s/model.safetensors", d);
    char p2[4096];
    snprintf(p2, sizeof p2, "%s/model-00001-of-00001.safetensors", d);
    rename(p, p2);
    write_text(d, "model.safetensors.index.json",
               "{\"weight_map\":{\"model.norm.weight\":\"model-00001-of-00001.safetensors\","
               "\"model.extra.weight\":\"model-00002-of-00002.safetensors\"}}");
    expect_error("index names a missing shard", d, CINFER_E_IO, "model-00002-of-00002.safetensors");

    sub(d, "sharded-ok");
    write_model(d, NULL, NULL, 0);
    snprintf(p, sizeof p, "%s/model.safetensors", d);
    snprintf(p2, sizeof p2, "%s/model-00001-of-00001.safetensors", d);
    rename(p, p2);
    write_text(d, "model.safetensors.index.json", "{\"weight_map\":{\"model.norm.weight\":\"model-00001-of-00001.safetensors\"}}");
    CHECK(try_load(d, &err) == CINFER_OK, "sharded model: %s", err.message);

    printf("%d checks, %d failed\n", checks, failures);
    return failures ? 1 : 0;
}
