/* test_gemma.c: Gemma 2/3/4 beyond the parity fixtures. TOL: logit tolerance (default 1e-4).
 *   window FIXTURE_DIR [TOL]        the fixture's longest prompt plus its greedy continuation (far past the
 *                                   sliding window) evaluated in one batch, token by token, and in chunks of
 *                                   3 and 7 (rings of window + chunk cache slots that wrap many times) agree;
 *                                   the batch matches the goldens; rollback is exact down to the documented
 *                                   limit and refused below it; the cache holds only the windows.
 *   wrapper FIXTURE_DIR TMP [TOL]   the same weights as a multimodal checkpoint (text_config, tensors under
 *                                   model.language_model. after other towers') give the goldens.
 *   config GEMMA_DIR TMP            gemma4-e4b.json parses to the published E4B layout; malformed Gemma
 *                                   configs fail with their status; a random-weight Gemma 4 with every feature
 *                                   (MoE, per-layer inputs, values = keys, KV sharing, double-wide MLP) binds,
 *                                   and 600 tokens agree across chunkings, token by token and after rollback. */
#include "model/model.h"
#include "model/seq.h"
#include "format/safetensors.h"
#include "base/file.h"
#include "base/status.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../check.h"

static void write_text(const char *path, const char *text) {
    FILE *fp = fopen(path, "wb");
    if (!fp) { perror(path); exit(1); }
    fputs(text, fp);
    fclose(fp);
}

static double max_diff(const float *a, const float *b, size_t n) {
    double d = 0;
    for (size_t i = 0; i < n; i++) d = fmax(d, fabs((double)a[i] - b[i]));
    return d;
}

static int argmax(const float *v, int n) {
    int best = 0;
    for (int j = 1; j < n; j++) if (v[j] > v[best]) best = j;
    return best;
}

/* The longest golden case: its prompt, greedy tokens, margins and prompt logits. */
typedef struct golden_case {
    int n_prompt, n_greedy;
    int32_t ids[512];          /* prompt then greedy */
    double margins[256];
    float *logits;             /* [n_prompt, vocab] */
} golden_case;

static int load_longest_case(const char *dir, int vocab, golden_case *gc) {
    char path[4096];
    snprintf(path, sizeof path, "%s/golden.json", dir);
    char *text = cf_read_file(path, NULL);
    cJSON *g = text ? cJSON_Parse(text) : NULL;
    free(text);
    cJSON *c, *best = NULL;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(g, "cases"))
        if (!best || cJSON_GetArraySize(cJSON_GetObjectItem(c, "prompt")) > cJSON_GetArraySize(cJSON_GetObjectItem(best, "prompt"))) best = c;
    if (!best) { fprintf(stderr, "%s: no cases\n", path); cJSON_Delete(g); return 0; }
    cJSON *prompt = cJSON_GetObjectItem(best, "prompt"), *greedy = cJSON_GetObjectItem(best, "greedy"), *margins = cJSON_GetObjectItem(best, "margins");
    gc->n_prompt = cJSON_GetArraySize(prompt);
    gc->n_greedy = cJSON_GetArraySize(greedy);
    if (gc->n_prompt + gc->n_greedy > 512 || gc->n_greedy > 256) { cJSON_Delete(g); return 0; }
    for (int i = 0; i < gc->n_prompt; i++) gc->ids[i] = cJSON_GetArrayItem(prompt, i)->valueint;
    for (int i = 0; i < gc->n_greedy; i++) {
        gc->ids[gc->n_prompt + i] = cJSON_GetArrayItem(greedy, i)->valueint;
        gc->margins[i] = cJSON_GetArrayItem(margins, i)->valuedouble;
    }
    snprintf(path, sizeof path, "%s/%s", dir, cJSON_GetObjectItem(best, "logits")->valuestring);
    size_t len = 0;
    gc->logits = (float *)cf_read_file(path, &len);
    cJSON_Delete(g);
    if (!gc->logits || len != (size_t)gc->n_prompt * vocab * sizeof(float)) { fprintf(stderr, "%s: bad logits file\n", path); return 0; }
    return 1;
}

/* Logits of all n ids evaluated in a fresh sequence of at most `chunk` positions per pass (one call). */
static int eval_all(cf_model *m, int chunk, const int32_t *ids, int n, float *out) {
    cinfer_error err = {0};
    cf_seq *s = NULL;
    int ok = cf_seq_create_chunked(m, 0, chunk, &s, &err) == CINFER_OK && cf_model_eval(m, s, ids, n, out, 1, &err) == CINFER_OK;
    if (!ok) fprintf(stderr, "eval (chunk %d): %s\n", chunk, err.message);
    cf_seq_free(s);
    return ok;
}

/* The same, one token per call. */
static int eval_stepwise(cf_model *m, const int32_t *ids, int n, float *out) {
    cinfer_error err = {0};
    cf_seq *s = NULL;
    int ok = cf_seq_create(m, 0, &s, &err) == CINFER_OK;
    const int V = m->hp.vocab;
    for (int i = 0; ok && i < n; i++) ok = cf_model_eval(m, s, &ids[i], 1, out + (size_t)i * V, 0, &err) == CINFER_OK;
    if (!ok) fprintf(stderr, "stepwise eval: %s\n", err.message);
    cf_seq_free(s);
    return ok;
}

/* Rollback in a sequence of `chunk` positions per pass holding all n ids: back to `to` re-evaluates
 * exactly when `to` >= the floor, and is refused (changing nothing) below it. ref: logits of all n. */
static void check_rollback(cf_model *m, int chunk, const int32_t *ids, int n, const float *ref, double tol) {
    const int V = m->hp.vocab;
    cinfer_error err = {0};
    cf_seq *s = NULL;
    float *out = malloc((size_t)n * V * sizeof *out);
    if (cf_seq_create_chunked(m, 0, chunk, &s, &err) != CINFER_OK || cf_model_eval(m, s, ids, n, NULL, 0, &err) != CINFER_OK) {
        CHECK(0, "rollback setup: %s", err.message);
        cf_seq_free(s);
        free(out);
        return;
    }
    int has_window = 0;
    for (int l = 0; l < m->hp.n_layers; l++) has_window |= s->kv->layers[l].window > 0 && s->kv->layers[l].cap < s->kv->max_ctx;
    int floor_pos = s->kv->floor, lowest = n - chunk - 1 > 0 ? n - chunk - 1 : 0;
    CHECK(floor_pos <= lowest, "chunk %d: rollback floor %d is above the documented %d", chunk, floor_pos, lowest);
    if (has_window) {
        CHECK(floor_pos > 0, "chunk %d: window layers that wrap must limit rollback", chunk);
        CHECK(cf_seq_truncate(s, floor_pos - 1, &err) == CINFER_E_INVALID_ARGUMENT, "chunk %d: truncate below the floor %d accepted", chunk, floor_pos);
        CHECK(cf_seq_len(s) == n, "a refused truncate changed the length to %d", cf_seq_len(s));
    }
    int to = floor_pos > 0 ? floor_pos : lowest;  /* the furthest rollback allowed must still be exact */
    CHECK(cf_seq_truncate(s, to, &err) == CINFER_OK, "chunk %d: truncate to %d: %s", chunk, to, err.message);
    CHECK(cf_model_eval(m, s, ids + to, n - to, out, 1, &err) == CINFER_OK, "re-eval: %s", err.message);
    double d = max_diff(out, ref + (size_t)to * V, (size_t)(n - to) * V);
    printf("  chunk %3d: rollback %d -> %d (floor %d), re-evaluated logits differ by %.3g\n", chunk, n, to, floor_pos, d);
    CHECK(d <= tol, "chunk %d: logits after rolling back to %d differ by %g", chunk, to, d);
    cf_seq_free(s);
    free(out);
}

static int cmd_window(const char *dir, double tol) {
    cinfer_error err = {0};
    cf_model *m = NULL;
    if (cf_model_load(dir, NULL, &m, &err) != CINFER_OK) { fprintf(stderr, "load %s: %s\n", dir, err.message); return 1; }
    const cf_hparams *hp = &m->hp;
    const int V = hp->vocab;
    golden_case gc = {0};
    if (!load_longest_case(dir, V, &gc)) { cf_model_free(m); return 1; }
    const int n = gc.n_prompt + gc.n_greedy - 1;  /* the last greedy token is never fed back */
    int window = 0;
    for (int l = 0; l < hp->n_layers; l++) if (hp->layers[l].window && (!window || hp->layers[l].window < window)) window = hp->layers[l].window;
    printf("%s: %d tokens, smallest sliding window %d\n", dir, n, window);
    CHECK(window > 0 && n >= 4 * window, "the case must reach several windows past a sliding window (window %d, %d tokens)", window, n);

    float *batch = malloc((size_t)n * V * sizeof(float)), *other = malloc((size_t)n * V * sizeof(float));
    /* one batch: the prompt rows are the goldens; the rows after it predict the greedy tokens */
    CHECK(eval_all(m, CF_CHUNK, gc.ids, n, batch), "batch eval");
    double d = max_diff(batch, gc.logits, (size_t)gc.n_prompt * V);
    printf("  batch of %d: prompt logits vs golden %.3g\n", n, d);
    CHECK(d <= tol, "batch prompt logits differ from the goldens by %g", d);
    int agree = 0;
    for (int t = 0; t < gc.n_greedy; t++) {
        int got = argmax(batch + (size_t)(gc.n_prompt - 1 + t) * V, V), want = gc.ids[gc.n_prompt + t];
        if (got != want && gc.margins[t] < 1e-4) break;
        CHECK(got == want, "batch row %d predicts %d, greedy golden %d", gc.n_prompt - 1 + t, got, want);
        if (got != want) break;
        agree++;
    }
    printf("  batch of %d: %d/%d greedy tokens predicted\n", n, agree, gc.n_greedy);
    /* token by token and in chunks of 3 and 7 give the same logits */
    CHECK(eval_stepwise(m, gc.ids, n, other), "stepwise eval");
    d = max_diff(batch, other, (size_t)n * V);
    printf("  token by token vs batch: %.3g\n", d);
    CHECK(d <= tol, "token by token differs from the batch by %g", d);
    for (int chunk = 3; chunk <= 7; chunk += 4) {
        CHECK(eval_all(m, chunk, gc.ids, n, other), "chunked eval");
        d = max_diff(batch, other, (size_t)n * V);
        printf("  chunks of %d vs batch: %.3g\n", chunk, d);
        CHECK(d <= tol, "chunks of %d differ from the batch by %g", chunk, d);
    }
    check_rollback(m, 3, gc.ids, n, batch, tol);
    check_rollback(m, CF_CHUNK, gc.ids, n, batch, tol);

    /* cache: window layers hold window + chunk slots, shared layers none */
    cf_seq *s = NULL;
    if (cf_seq_create_chunked(m, 0, 3, &s, &err) == CINFER_OK) {
        int64_t want = 0;
        for (int l = 0; l < hp->n_layers; l++) {
            const cf_layer_hp *L = &hp->layers[l];
            const cf_kv_layer *K = &s->kv->layers[l];
            int cap = L->window ? L->window + 3 : s->kv->max_ctx;
            if (L->kv_source != l) { CHECK(!K->k.data && !K->v.data, "layer %d shares layer %d's cache but has its own", l, L->kv_source); continue; }
            CHECK(K->cap == cap, "layer %d: %d cache slots, want %d", l, K->cap, cap);
            want += (int64_t)cap * L->n_kv_heads * (L->head_dim + L->v_head_dim) * 4;
        }
        CHECK(cf_kv_bytes(s->kv) == want, "cache bytes %lld, want %lld", (long long)cf_kv_bytes(s->kv), (long long)want);
        printf("  cache with chunks of 3: %lld bytes (context %d)\n", (long long)cf_kv_bytes(s->kv), s->kv->max_ctx);
    } else {
        CHECK(0, "seq: %s", err.message);
    }
    cf_seq_free(s);
    free(batch);
    free(other);
    free(gc.logits);
    cf_model_free(m);
    return failures ? 1 : 0;
}

/* Copies the fixture's tensors under `prefix` (for "model.X": prefix + "X") after the extra tensors. */
static int write_wrapped(const char *src_dir, const char *dst_dir, const char *prefix, const cf_st_write_entry *extra, int n_extra) {
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors", src_dir);
    cinfer_error err = {0};
    cf_st_set *set = NULL;
    if (cf_st_open_file(path, &set, &err) != CINFER_OK) { fprintf(stderr, "%s\n", err.message); return 0; }
    size_t n = cf_st_count(set);
    cf_st_write_entry *e = calloc(n + (size_t)n_extra, sizeof *e);
    char (*names)[256] = calloc(n, sizeof *names);
    for (int i = 0; i < n_extra; i++) e[i] = extra[i];
    for (size_t i = 0; i < n; i++) {
        const cf_st_tensor *t = cf_st_at(set, i);
        const char *rest = !strncmp(t->name, "model.", 6) ? t->name + 6 : t->name;
        snprintf(names[i], sizeof names[i], "%s%s", !strncmp(t->name, "model.", 6) ? prefix : "", rest);
        e[n_extra + i] = (cf_st_write_entry){.name = names[i], .dtype = (cf_dtype)t->dtype, .n_dims = t->n_dims, .data = t->data};
        memcpy(e[n_extra + i].shape, t->shape, sizeof t->shape);
    }
    snprintf(path, sizeof path, "%s/model.safetensors", dst_dir);
    int ok = cf_st_write(path, e, n + (size_t)n_extra, &err) == CINFER_OK;
    if (!ok) fprintf(stderr, "%s\n", err.message);
    free(e);
    free(names);
    cf_st_close(set);
    return ok;
}

static int cmd_wrapper(const char *dir, const char *tmp, double tol) {
    char path[4096], dst[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    char *text = cf_read_file(path, NULL);
    cJSON *text_cfg = text ? cJSON_Parse(text) : NULL;
    free(text);
    if (!text_cfg) { fprintf(stderr, "cannot read %s\n", path); return 1; }
    const char *arch = cJSON_GetArrayItem(cJSON_GetObjectItem(text_cfg, "architectures"), 0)->valuestring;
    int v4 = strstr(arch, "Gemma4") != NULL;
    cJSON_DeleteItemFromObject(text_cfg, "architectures");
    cJSON *cfg = cJSON_CreateObject();
    cJSON *archs = cJSON_AddArrayToObject(cfg, "architectures");
    cJSON_AddItemToArray(archs, cJSON_CreateString(v4 ? "Gemma4ForConditionalGeneration" : "Gemma3ForConditionalGeneration"));
    cJSON_AddStringToObject(cfg, "model_type", v4 ? "gemma4" : "gemma3");
    cJSON_AddItemToObject(cfg, "text_config", text_cfg);
    cJSON *vision = cJSON_AddObjectToObject(cfg, "vision_config");
    cJSON_AddNumberToObject(vision, "hidden_size", 8);
    mkdir(tmp, 0755);
    snprintf(dst, sizeof dst, "%s/%s", tmp, v4 ? "gemma4-wrapped" : "gemma3-wrapped");
    mkdir(dst, 0755);
    snprintf(path, sizeof path, "%s/config.json", dst);
    char *out = cJSON_Print(cfg);
    write_text(path, out);
    free(out);
    cJSON_Delete(cfg);

    /* other towers' tensors, one of them ending like the per-layer table, listed before the text tower */
    static float decoy[4 * 8];
    for (int i = 0; i < 32; i++) decoy[i] = (float)i;
    cf_st_write_entry extra[] = {
        {.name = "model.vision_tower.encoder.layers.0.mlp.up_proj.weight", .dtype = CF_F32, .n_dims = 2, .shape = {4, 8}, .data = decoy},
        {.name = "model.embed_vision.embedding_projection.weight", .dtype = CF_F32, .n_dims = 2, .shape = {4, 8}, .data = decoy},
        {.name = "model.vision_tower.embed_tokens_per_layer.weight", .dtype = CF_F32, .n_dims = 2, .shape = {4, 8}, .data = decoy},
    };
    if (!write_wrapped(dir, dst, "model.language_model.", extra, 3)) return 1;

    cinfer_error err = {0};
    cf_model *m = NULL;
    if (cf_model_load(dst, NULL, &m, &err) != CINFER_OK) { fprintf(stderr, "load %s: %s\n", dst, err.message); return 1; }
    golden_case gc = {0};
    if (!load_longest_case(dir, m->hp.vocab, &gc)) { cf_model_free(m); return 1; }
    float *lg = malloc((size_t)gc.n_prompt * m->hp.vocab * sizeof *lg);
    CHECK(eval_all(m, CF_CHUNK, gc.ids, gc.n_prompt, lg), "eval");
    double d = max_diff(lg, gc.logits, (size_t)gc.n_prompt * m->hp.vocab);
    printf("%s as %s: max |logit - golden| = %.3g\n", dir, m->hp.arch_name, d);
    CHECK(d <= tol, "the wrapped checkpoint's logits differ from the goldens by %g", d);
    free(lg);
    free(gc.logits);
    cf_model_free(m);
    return failures ? 1 : 0;
}

/* A Gemma 4 with every text feature at toy size; sliding_window as given. */
static void write_toy_config(const char *path, int window) {
    char text[2048];
    snprintf(text, sizeof text,
             "{\"architectures\":[\"Gemma4ForCausalLM\"],\"vocab_size\":96,\"hidden_size\":64,\"intermediate_size\":48,"
             "\"num_hidden_layers\":6,\"num_attention_heads\":4,\"num_key_value_heads\":2,\"head_dim\":16,\"global_head_dim\":32,"
             "\"attention_k_eq_v\":true,\"num_global_key_value_heads\":1,\"sliding_window\":%d,\"max_position_embeddings\":1024,"
             "\"layer_types\":[\"sliding_attention\",\"sliding_attention\",\"full_attention\",\"sliding_attention\",\"sliding_attention\",\"full_attention\"],"
             "\"rope_parameters\":{\"sliding_attention\":{\"rope_type\":\"default\",\"rope_theta\":10000.0},"
             "\"full_attention\":{\"rope_type\":\"proportional\",\"partial_rotary_factor\":0.25,\"rope_theta\":1000000.0}},"
             "\"final_logit_softcapping\":6.0,\"hidden_size_per_layer_input\":8,\"vocab_size_per_layer_input\":96,"
             "\"num_kv_shared_layers\":2,\"use_double_wide_mlp\":true,\"enable_moe_block\":true,\"num_experts\":4,\"top_k_experts\":2,"
             "\"moe_intermediate_size\":32,\"eos_token_id\":1}",
             window);
    write_text(path, text);
}

static void expect_config_error(const char *tmp, const char *what, const char *json, cinfer_status want, const char *needle) {
    char path[4096];
    snprintf(path, sizeof path, "%s/bad.json", tmp);
    write_text(path, json);
    cf_hparams hp;
    cinfer_error err = {0};
    cinfer_status st = cf_hparams_load_file(path, &hp, &err);
    if (st == CINFER_OK) cf_hparams_free(&hp);
    CHECK(st == want, "%s: status %s, want %s (%s)", what, cinfer_status_name(st), cinfer_status_name(want), err.message);
    CHECK(strstr(err.message, needle) != NULL, "%s: message '%s' does not mention '%s'", what, err.message, needle);
    printf("  %-34s -> %s: %s\n", what, cinfer_status_name(st), err.message);
}

static int cmd_config(const char *gemma_dir, const char *tmp) {
    char path[4096];
    cinfer_error err = {0};
    mkdir(tmp, 0755);

    /* the published E4B layout */
    cf_hparams hp;
    snprintf(path, sizeof path, "%s/gemma4-e4b.json", gemma_dir);
    if (cf_hparams_load_file(path, &hp, &err) != CINFER_OK) { fprintf(stderr, "%s\n", err.message); return 1; }
    int n_full = 0, n_shared = 0, layout_ok = hp.n_layers == 42;
    for (int l = 0; layout_ok && l < hp.n_layers; l++) {
        const cf_layer_hp *L = &hp.layers[l];
        int full = (l + 1) % 6 == 0, want_src = l < 24 ? l : full ? 23 : 22;
        n_full += full;
        n_shared += L->kv_source != l;
        layout_ok &= L->window == (full ? 0 : 512) && L->head_dim == (full ? 512 : 256) && L->n_kv_heads == 2 &&
                     L->kv_source == want_src && L->ffn_dim == 10240 && L->attn_scale == 1.0f && !L->k_eq_v;
    }
    CHECK(layout_ok && n_full == 7 && n_shared == 18, "E4B layout: %d layers, %d full, %d KV-shared", hp.n_layers, n_full, n_shared);
    CHECK(hp.ple_dim == 256 && hp.ple_vocab == 262144 && hp.norm_w_offset == 0.0f && hp.v_norm && hp.final_softcap == 30.0f &&
              hp.attn_softcap == 0.0f && hp.tied,
          "E4B flags");
    const cf_rope_set *full_rope = &hp.rope[1];
    CHECK(full_rope->rot_dim == 512 && full_rope->inv_freq[63] > 0 && full_rope->inv_freq[64] == 0 && full_rope->inv_freq[255] == 0 &&
              fabsf(full_rope->inv_freq[1] - 1.0f / powf(1e6f, 2.0f / 512)) < 1e-9f,
          "E4B full-attention rope: proportional over 512 dims with 64 rotated pairs");
    CHECK(cf_hparams_kv_bytes_per_token(&hp, 2) == (20 * 2 * 512 + 4 * 2 * 1024) * 2, "E4B KV bytes per token %lld",
          (long long)cf_hparams_kv_bytes_per_token(&hp, 2));
    CHECK(cf_hparams_kv_read_bytes(&hp, 1000, 2) == (35LL * 512 * 1024 + 7LL * 1000 * 2048) * 2, "E4B KV bytes read at 1000 tokens %lld",
          (long long)cf_hparams_kv_read_bytes(&hp, 1000, 2));
    CHECK(cf_hparams_n_params(&hp) - cf_hparams_active_params(&hp) == 262144LL * 42 * 256,
          "E4B: the parameters not multiplied per token are the per-layer table (%lld - %lld)", (long long)cf_hparams_n_params(&hp),
          (long long)cf_hparams_active_params(&hp));
    printf("gemma4-e4b.json: %d layers (%d full, %d KV-shared), %lld params, KV %lld bytes/token in bf16 (window layers counted fully)\n",
           hp.n_layers, n_full, n_shared, (long long)cf_hparams_n_params(&hp), (long long)cf_hparams_kv_bytes_per_token(&hp, 2));
    cf_hparams_free(&hp);

    /* malformed configs */
    expect_config_error(tmp, "layer_types of the wrong length",
                        "{\"architectures\":[\"Gemma3ForCausalLM\"],\"num_hidden_layers\":3,\"layer_types\":[\"full_attention\"]}",
                        CINFER_E_FORMAT, "layer_types");
    expect_config_error(tmp, "unknown layer type",
                        "{\"architectures\":[\"Gemma2ForCausalLM\"],\"num_hidden_layers\":1,\"layer_types\":[\"chunked_attention\"]}",
                        CINFER_E_UNSUPPORTED, "chunked_attention");
    expect_config_error(tmp, "KV sharing without a source",
                        "{\"architectures\":[\"Gemma4ForCausalLM\"],\"num_hidden_layers\":3,\"num_kv_shared_layers\":2,"
                        "\"layer_types\":[\"sliding_attention\",\"full_attention\",\"full_attention\"]}",
                        CINFER_E_FORMAT, "layer 1 shares");
    expect_config_error(tmp, "unsupported activation", "{\"architectures\":[\"Gemma2ForCausalLM\"],\"hidden_activation\":\"relu\"}",
                        CINFER_E_UNSUPPORTED, "relu");
    expect_config_error(tmp, "Gemma 3n", "{\"architectures\":[\"Gemma3nForCausalLM\"]}", CINFER_E_UNSUPPORTED, "Gemma3nForCausalLM");
    expect_config_error(tmp, "bidirectional attention",
                        "{\"architectures\":[\"Gemma4ForCausalLM\"],\"use_bidirectional_attention\":\"all\"}", CINFER_E_UNSUPPORTED,
                        "bidirectional");
    expect_config_error(tmp, "non-integer size", "{\"architectures\":[\"Gemma3ForCausalLM\"],\"head_dim\":16.5}", CINFER_E_FORMAT,
                        "head_dim");

    /* a toy Gemma 4 with random weights: 600 tokens, the ring of every window layer wrapping */
    char toy[4096], toy_full[4096];
    snprintf(toy, sizeof toy, "%s/toy.json", tmp);
    snprintf(toy_full, sizeof toy_full, "%s/toy-full.json", tmp);
    write_toy_config(toy, 8);
    write_toy_config(toy_full, 4096);
    cf_model *m = NULL, *mf = NULL;
    if (cf_model_random(toy, 7, NULL, &m, &err) != CINFER_OK || cf_model_random(toy_full, 7, NULL, &mf, &err) != CINFER_OK) {
        fprintf(stderr, "random toy: %s\n", err.message);
        cf_model_free(m);
        return 1;
    }
    CHECK(m->lw[2].wk.data && !m->lw[2].wv.data && !m->lw[4].wk.data && m->lw[4].ffn_norm.data && m->lw[0].exp_gate_up.data &&
              m->lw[5].ple_gate.data && m->ple_embd.data && m->hp.layers[4].kv_source == 3 && m->hp.layers[5].kv_source == 2 &&
              m->hp.layers[5].ffn_dim == 96,
          "toy model: the bound weights do not match its features");
    enum { N = 600 };
    const int V = m->hp.vocab;
    int32_t ids[N];
    uint64_t x = 12345;
    for (int i = 0; i < N; i++) { x = x * 6364136223846793005ull + 1442695040888963407ull; ids[i] = (int32_t)((x >> 33) % (uint64_t)V); }
    float *a = malloc((size_t)N * V * sizeof *a), *b = malloc((size_t)N * V * sizeof *b);
    double scale = 0;
    if (eval_all(m, CF_CHUNK, ids, N, a)) {
        for (size_t i = 0; i < (size_t)N * V; i++) scale = fmax(scale, fabs(a[i]));
        const double tol = 2e-5 * scale;
        CHECK(eval_all(m, 5, ids, N, b), "chunk 5");
        double d = max_diff(a, b, (size_t)N * V);
        printf("toy gemma4, %d tokens (max |logit| %.3g): chunks of 5 vs 256: %.3g\n", N, scale, d);
        CHECK(d <= tol, "chunks of 5 differ from chunks of 256 by %g", d);
        CHECK(eval_stepwise(m, ids, N, b), "stepwise");
        d = max_diff(a, b, (size_t)N * V);
        printf("  token by token vs chunks of 256: %.3g\n", d);
        CHECK(d <= tol, "token by token differs from chunks of 256 by %g", d);
        CHECK(eval_all(mf, CF_CHUNK, ids, N, b), "full-attention twin");
        d = max_diff(a + (size_t)(N - 1) * V, b + (size_t)(N - 1) * V, (size_t)V);
        printf("  the same weights without a window: last logits differ by %.3g (the window matters)\n", d);
        CHECK(d > 100 * tol, "the sliding window changes nothing (%g): the test would not see a window bug", d);
        check_rollback(m, 5, ids, N, a, tol);
        check_rollback(m, CF_CHUNK, ids, N, a, tol);
    } else {
        CHECK(0, "toy eval");
    }
    free(a);
    free(b);
    cf_model_free(m);
    cf_model_free(mf);
    return failures ? 1 : 0;
}

int main(int argc, char **argv) {
    if (argc >= 3 && !strcmp(argv[1], "window")) return cmd_window(argv[2], argc > 3 ? strtod(argv[3], NULL) : 1e-4);
    if (argc >= 4 && !strcmp(argv[1], "wrapper")) return cmd_wrapper(argv[2], argv[3], argc > 4 ? strtod(argv[4], NULL) : 1e-4);
    if (argc >= 4 && !strcmp(argv[1], "config")) return cmd_config(argv[2], argv[3]);
    fprintf(stderr, "usage: test_gemma window FIXTURE_DIR [TOL] | wrapper FIXTURE_DIR TMP [TOL] | config GEMMA_DIR TMP\n");
    return 2;
}
