/* test_config.c: hostile config.json values (every size negative, zero, fractional, huge or inconsistent;
 * eps, rope theta and factors <= 0 or infinite; unsupported activations, head sizes and rope types named in
 * the error), KV cache allocation failures, and greedy decoding of a model whose logits are NaN.
 * usage: test_config TMP_DIR FIXTURE_MODELS_DIR */
#include "model/model.h"
#include "model/seq.h"
#include "kv/kv_cache.h"
#include "base/status.h"
#include "../check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* the KV test asks for more memory than there is: let the allocator fail instead of ASan stopping */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "allocator_may_return_null=1"; }

static char tmp[2048], fixtures[2048];
static int n_hostile, n_clean;

/* The base configs; the case's fields come first, and cJSON reads the first of duplicate keys. */
static const char *llama =
    "\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":64,\"num_hidden_layers\":2,\"num_attention_heads\":4,"
    "\"num_key_value_heads\":2,\"head_dim\":16,\"intermediate_size\":128,\"vocab_size\":512,\"max_position_embeddings\":256,"
    "\"rms_norm_eps\":1e-5,\"rope_theta\":10000,\"hidden_act\":\"silu\"";
static const char *mistral =
    "\"architectures\":[\"MistralForCausalLM\"],\"hidden_size\":64,\"num_hidden_layers\":2,\"num_attention_heads\":4,"
    "\"num_key_value_heads\":2,\"intermediate_size\":128,\"vocab_size\":512,\"max_position_embeddings\":256,\"sliding_window\":16";
static const char *qwen2 =
    "\"architectures\":[\"Qwen2ForCausalLM\"],\"hidden_size\":64,\"num_hidden_layers\":2,\"num_attention_heads\":4,"
    "\"num_key_value_heads\":2,\"intermediate_size\":128,\"vocab_size\":512,\"max_position_embeddings\":256,"
    "\"use_sliding_window\":true,\"sliding_window\":16";
static const char *gemma2 =
    "\"architectures\":[\"Gemma2ForCausalLM\"],\"hidden_size\":64,\"num_hidden_layers\":2,\"num_attention_heads\":4,"
    "\"num_key_value_heads\":2,\"head_dim\":16,\"intermediate_size\":128,\"vocab_size\":512,\"max_position_embeddings\":256,"
    "\"sliding_window\":8,\"query_pre_attn_scalar\":24";
static const char *gemma3 =
    "\"architectures\":[\"Gemma3ForCausalLM\"],\"hidden_size\":64,\"num_hidden_layers\":2,\"num_attention_heads\":4,"
    "\"num_key_value_heads\":2,\"head_dim\":16,\"intermediate_size\":128,\"vocab_size\":512,\"max_position_embeddings\":256,"
    "\"sliding_window\":8";
static const char *gemma4 =
    "\"architectures\":[\"Gemma4ForCausalLM\"],\"hidden_size\":64,\"num_hidden_layers\":4,\"num_attention_heads\":4,"
    "\"num_key_value_heads\":2,\"head_dim\":16,\"global_head_dim\":32,\"intermediate_size\":128,\"vocab_size\":512,"
    "\"max_position_embeddings\":256,\"sliding_window\":8,\"num_kv_shared_layers\":2,\"hidden_size_per_layer_input\":8,"
    "\"vocab_size_per_layer_input\":512,\"layer_types\":[\"sliding_attention\",\"full_attention\",\"sliding_attention\",\"full_attention\"]";

static cinfer_status load(const char *base, const char *fields, cf_hparams *hp, cinfer_error *err) {
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", tmp);
    FILE *f = fopen(path, "w");
    if (!f) { fprintf(stderr, "cannot write %s\n", path); exit(1); }
    fprintf(f, "{%s%s%s}", fields, *fields ? "," : "", base);
    fclose(f);
    return cf_hparams_load_file(path, hp, err);
}

/* A hostile config: it must fail with code and a message containing want (and, for an unsupported
 * setting, not blame the architecture), leaving no layers behind. */
static void bad(const char *base, const char *fields, cinfer_status code, const char *want) {
    cf_hparams hp;
    cinfer_error err = {0};
    cinfer_status st = load(base, fields, &hp, &err);
    int clean = st == code && strstr(err.message, want) && !strstr(err.message, "architecture '") && !hp.layers;
    n_hostile++;
    n_clean += clean;
    CHECK(clean, "{%s}: status %s, message '%s'; want %s and '%s'", fields, cinfer_status_name(st), err.message,
          cinfer_status_name(code), want);
    if (st == CINFER_OK) cf_hparams_free(&hp);
}

static void good(const char *base, const char *fields) {
    cf_hparams hp;
    cinfer_error err = {0};
    cinfer_status st = load(base, fields, &hp, &err);
    CHECK(st == CINFER_OK, "{%s} should load: %s", fields, err.message);
    if (st == CINFER_OK) cf_hparams_free(&hp);
}

static void test_sizes(void) {
    const cinfer_status F = CINFER_E_FORMAT, U = CINFER_E_UNSUPPORTED;
    const char *bases[] = {llama, mistral, qwen2, gemma2, gemma3, gemma4};
    for (size_t b = 0; b < sizeof bases / sizeof bases[0]; b++) {
        good(bases[b], "");
        const char *base = bases[b];
        bad(base, "\"max_position_embeddings\":-1", F, "max_position_embeddings");
        bad(base, "\"max_position_embeddings\":1e20", F, "max_position_embeddings");
        bad(base, "\"max_position_embeddings\":2147483647", F, "max_position_embeddings");
        bad(base, "\"max_position_embeddings\":0", F, "max_position_embeddings");
        bad(base, "\"max_position_embeddings\":256.5", F, "max_position_embeddings");
        bad(base, "\"max_position_embeddings\":\"256\"", F, "max_position_embeddings");
        bad(base, "\"hidden_size\":0", F, "hidden_size");
        bad(base, "\"hidden_size\":-64", F, "hidden_size");
        bad(base, "\"hidden_size\":64.25", F, "hidden_size");
        bad(base, "\"hidden_size\":1e400", F, "hidden_size");
        bad(base, "\"hidden_size\":4294967360", F, "hidden_size");
        bad(base, "\"num_hidden_layers\":0", F, "num_hidden_layers");
        bad(base, "\"num_hidden_layers\":1e9", F, "num_hidden_layers");
        bad(base, "\"num_hidden_layers\":-2147483648", F, "num_hidden_layers");
        bad(base, "\"num_attention_heads\":-4", F, "num_attention_heads");
        bad(base, "\"num_attention_heads\":3,\"head_dim\":16", F, "cannot be grouped");
        bad(base, "\"num_key_value_heads\":3", F, "cannot be grouped");
        bad(base, "\"num_key_value_heads\":8", F, "cannot be grouped");
        bad(base, "\"num_key_value_heads\":0", F, "num_key_value_heads");
        bad(base, "\"num_key_value_heads\":1.5", F, "num_key_value_heads");
        bad(base, "\"intermediate_size\":-1", F, "intermediate_size");
        bad(base, "\"intermediate_size\":0.5", F, "intermediate_size");
        bad(base, "\"intermediate_size\":2147483647", F, "intermediate_size");
        bad(base, "\"vocab_size\":0", F, "vocab_size");
        bad(base, "\"vocab_size\":1e9", F, "vocab_size");
        bad(base, "\"vocab_size\":-512", F, "vocab_size");
        bad(base, "\"rms_norm_eps\":0", F, "rms_norm_eps");
        bad(base, "\"rms_norm_eps\":-1e-5", F, "rms_norm_eps");
        bad(base, "\"rms_norm_eps\":1e400", F, "rms_norm_eps");
        bad(base, "\"rms_norm_eps\":1e-60", F, "rms_norm_eps");   /* 0 as a float32 */
        bad(base, "\"rms_norm_eps\":\"1e-5\"", F, "rms_norm_eps");
        bad(base, "\"head_dim\":15", U, "head_dim 15");
        bad(base, "\"head_dim\":2048", U, "head_dim 2048");
        bad(base, "\"head_dim\":0", F, "head_dim");
        bad(base, "\"head_dim\":1e10", F, "head_dim");
    }
    const char *llamas[] = {llama, mistral, qwen2};
    for (size_t b = 0; b < sizeof llamas / sizeof llamas[0]; b++) {
        const char *base = llamas[b];
        bad(base, "\"rope_theta\":0", F, "rope_theta");
        bad(base, "\"rope_theta\":-10000", F, "rope_theta");
        bad(base, "\"rope_theta\":1e400", F, "rope_theta");
        bad(base, "\"rope_parameters\":{\"rope_type\":\"default\",\"rope_theta\":0}", F, "rope_theta");
        bad(base, "\"rope_scaling\":{\"rope_type\":\"linear\",\"factor\":0}", F, "factor");
        bad(base, "\"rope_scaling\":{\"type\":\"linear\",\"factor\":-2}", F, "factor");
        bad(base, "\"rope_scaling\":{\"rope_type\":\"linear\",\"factor\":1e300}", F, "factor");
        bad(base, "\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":0}", F, "factor");
        bad(base, "\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8,\"low_freq_factor\":0}", F, "low_freq_factor");
        bad(base, "\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8,\"low_freq_factor\":4,\"high_freq_factor\":1}", F,
            "high_freq_factor");
        bad(base, "\"rope_scaling\":{\"rope_type\":\"llama3\",\"original_max_position_embeddings\":-8192}", F,
            "original_max_position_embeddings");
        bad(base, "\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":4}", U, "rope type 'yarn'");
        bad(base, "\"rope_scaling\":{\"type\":\"dynamic\",\"factor\":2}", U, "rope type 'dynamic'");
        bad(base, "\"hidden_act\":\"gelu\"", U, "hidden_act 'gelu'");
        bad(base, "\"hidden_act\":7", F, "hidden_act");
        good(base, "\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8,\"low_freq_factor\":1,\"high_freq_factor\":4}");
    }
    bad(llama, "\"head_dim\":null,\"num_attention_heads\":5,\"num_key_value_heads\":5", F, "not a multiple");
    bad(llama, "\"hidden_size\":1048576,\"num_hidden_layers\":4096,\"intermediate_size\":1048576", F, "parameters");
    bad(mistral, "\"sliding_window\":2147483647", F, "sliding_window");
    bad(mistral, "\"sliding_window\":-1", F, "sliding_window");
    bad(mistral, "\"sliding_window\":1.5", F, "sliding_window");
    good(mistral, "\"sliding_window\":null");
    good(mistral, "\"sliding_window\":256");
    cf_hparams hp;   /* a window longer than the context is the whole context */
    cinfer_error err = {0};
    CHECK(load(mistral, "\"sliding_window\":4096", &hp, &err) == CINFER_OK && hp.layers[0].window == 256, "window 4096 in 256: %s",
          err.message);
    cf_hparams_free(&hp);
    bad(qwen2, "\"sliding_window\":1e20", F, "sliding_window");

    const char *gemmas[] = {gemma2, gemma3, gemma4};
    for (size_t b = 0; b < sizeof gemmas / sizeof gemmas[0]; b++) {
        const char *base = gemmas[b];
        bad(base, "\"sliding_window\":2147483647", F, "sliding_window");
        bad(base, "\"sliding_window\":0", F, "sliding_window");
        good(base, "\"sliding_window\":1000");
        bad(base, "\"query_pre_attn_scalar\":0", F, "query_pre_attn_scalar");
        bad(base, "\"final_logit_softcapping\":1e400", F, "final_logit_softcapping");
        bad(base, "\"final_logit_softcapping\":\"30\"", F, "final_logit_softcapping");
        bad(base, "\"hidden_activation\":\"relu\"", U, "hidden_activation 'relu'");
        bad(base, "\"hidden_activation\":null,\"hidden_act\":\"silu\"", U, "hidden_act 'silu'");
        bad(base, "\"layer_types\":\"sliding_attention\"", F, "layer_types");
        bad(base, "\"layer_types\":[\"sliding_attention\"]", F, "layer_types");
        bad(base, "\"layer_types\":null,\"sliding_window_pattern\":0", F, "sliding_window_pattern");
        bad(base, "\"layer_types\":null,\"sliding_window_pattern\":-2147483648", F, "sliding_window_pattern");
    }
    bad(gemma2, "\"attn_logit_softcapping\":1e400", F, "attn_logit_softcapping");
    bad(gemma2, "\"rope_theta\":0", F, "rope_theta");
    bad(gemma3, "\"rope_local_base_freq\":-1", F, "rope_local_base_freq");
    bad(gemma3, "\"rope_theta\":1e400", F, "rope_theta");
    bad(gemma3, "\"rope_scaling\":{\"rope_type\":\"linear\",\"factor\":0}", F, "factor");
    bad(gemma3, "\"rope_parameters\":{\"sliding_attention\":{\"rope_type\":\"default\",\"rope_theta\":0}}", F, "rope_theta");
    bad(gemma4, "\"num_kv_shared_layers\":1e10", F, "num_kv_shared_layers");
    bad(gemma4, "\"num_kv_shared_layers\":2147483647", F, "num_kv_shared_layers");
    bad(gemma4, "\"num_kv_shared_layers\":-2147483648", F, "num_kv_shared_layers");
    bad(gemma4, "\"num_kv_shared_layers\":-1", F, "num_kv_shared_layers");
    bad(gemma4, "\"num_kv_shared_layers\":4", F, "num_kv_shared_layers");
    bad(gemma4, "\"num_kv_shared_layers\":0.5", F, "num_kv_shared_layers");
    bad(gemma4, "\"hidden_size_per_layer_input\":-5", F, "hidden_size_per_layer_input");
    bad(gemma4, "\"hidden_size_per_layer_input\":1e30", F, "hidden_size_per_layer_input");
    bad(gemma4, "\"global_head_dim\":1023", U, "global_head_dim 1023");
    bad(gemma4, "\"global_head_dim\":4096", U, "global_head_dim 4096");
    bad(gemma4, "\"vocab_size_per_layer_input\":1e12", F, "vocab_size_per_layer_input");
    bad(gemma4, "\"enable_moe_block\":true,\"num_experts\":1e9,\"top_k_experts\":2,\"moe_intermediate_size\":16", F, "num_experts");
    bad(gemma4, "\"enable_moe_block\":true,\"num_experts\":4,\"top_k_experts\":-2,\"moe_intermediate_size\":16", F, "top_k_experts");
    bad(gemma4, "\"per_layer_config\":{\"0\":{\"head_dim\":7}}", U, "head_dim 7");
    bad(gemma4, "\"per_layer_config\":{\"0\":{\"num_key_value_heads\":1e20}}", F, "num_key_value_heads");
    bad(gemma4, "\"rope_parameters\":{\"sliding_attention\":{\"rope_type\":\"default\",\"rope_theta\":-1},"
                "\"full_attention\":{\"rope_type\":\"proportional\",\"partial_rotary_factor\":0.25}}", F, "rope_theta");
    bad(gemma4, "\"rope_parameters\":{\"sliding_attention\":{\"rope_type\":\"default\"},"
                "\"full_attention\":{\"rope_type\":\"proportional\",\"partial_rotary_factor\":2}}", F, "partial_rotary_factor");
    bad(gemma4, "\"rope_parameters\":{\"sliding_attention\":{\"rope_type\":\"default\"},"
                "\"full_attention\":{\"rope_type\":\"proportional\",\"factor\":0}}", F, "factor");
    good(gemma4, "\"hidden_size_per_layer_input\":null");
    good(gemma4, "\"num_kv_shared_layers\":0");
}

/* ---- the KV cache ---- */

static const cf_backend_ops *real_ops;
static int allocs_left;

static cinfer_status failing_alloc(cf_backend *be, cf_dtype dt, int64_t rows, int64_t cols, cf_tensor *out, cinfer_error *err) {
    if (allocs_left-- <= 0) return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "cannot allocate (test)");
    return real_ops->alloc(be, dt, rows, cols, out, err);
}

static void test_kv(void) {
    cf_backend *be = NULL;
    cf_backend_params bp = cf_backend_default_params();
    bp.n_threads = 1;
    cinfer_error err = {0};
    if (cf_backend_create(&bp, &be, &err) != CINFER_OK) { CHECK(0, "cpu backend: %s", err.message); return; }
    const cf_kv_spec specs[2] = {{2, 16, 16, 0, 0, CF_F32}, {2, 16, 16, 2147483647, 0, CF_F32}};
    cf_kv_cache *kv = NULL;

    /* a window near INT_MAX: window + chunk must not overflow; the layer holds the whole context */
    cinfer_status st = cf_kv_create(be, specs, 2, 64, 16, &kv, &err);
    CHECK(st == CINFER_OK && kv && kv->layers[1].cap == 64, "window 2^31-1: %s, cap %d", err.message, kv ? kv->layers[1].cap : -1);
    cf_kv_free(kv);

    /* an allocation failing on the second layer: a clean error that names the layer and its slots */
    cf_backend_ops ops = *be->ops;
    real_ops = be->ops;
    ops.alloc = failing_alloc;
    be->ops = &ops;
    allocs_left = 2;
    kv = (cf_kv_cache *)1;
    memset(&err, 0, sizeof err);
    st = cf_kv_create(be, specs, 2, 64, 16, &kv, &err);
    CHECK(st == CINFER_E_OUT_OF_MEMORY && !kv && strstr(err.message, "layer 1 of 2, 64 slots"), "failing alloc: %s, '%s'",
          cinfer_status_name(st), err.message);
    be->ops = real_ops;

    /* more than memory holds: an error, not a crash */
    const cf_kv_spec huge = {4096, 1024, 1024, 0, 0, CF_F32};
    memset(&err, 0, sizeof err);
    st = cf_kv_create(be, &huge, 1, 1 << 24, 16, &kv, &err);
    CHECK(st == CINFER_E_OUT_OF_MEMORY && !kv, "a cache of 2^24 x 4M values: %s '%s'", cinfer_status_name(st), err.message);
    if (st == CINFER_OK) cf_kv_free(kv);
    memset(&err, 0, sizeof err);
    st = cf_kv_create(be, specs, 2, -1, 16, &kv, &err);
    CHECK(st == CINFER_E_INVALID_ARGUMENT && !kv, "a context of -1: %s '%s'", cinfer_status_name(st), err.message);

    /* the argmax's -1, copied into a queued step's input, embeds as zeros instead of reading before the table */
    cf_tensor table, ids, out;
    const int32_t bad_ids[2] = {-1, 4};
    float got[16];
    if (be->ops->alloc(be, CF_F32, 4, 8, &table, &err) == CINFER_OK && be->ops->alloc(be, CF_I32, 2, 1, &ids, &err) == CINFER_OK &&
        be->ops->alloc(be, CF_F32, 2, 8, &out, &err) == CINFER_OK) {
        be->ops->fill(be, table, 1.0f);
        be->ops->fill(be, out, 7.0f);
        be->ops->write(be, ids, bad_ids);
        be->ops->embed(be, out, table, ids, 1.0f);
        CHECK(be->ops->read(be, got, out, &err) == CINFER_OK, "read: %s", err.message);
        int zeros = 0;
        for (int i = 0; i < 16; i++) zeros += got[i] == 0.0f;
        CHECK(zeros == 16, "embedding ids -1 and 4 of a 4-row table: %d of 16 values are 0", zeros);
        be->ops->free_tensor(be, &table);
        be->ops->free_tensor(be, &ids);
        be->ops->free_tensor(be, &out);
    }
    cf_backend_destroy(be);
}

/* ---- NaN weights under greedy decoding ---- */

static void copy_file(const char *from_dir, const char *to_dir, const char *name) {
    char a[4096], b[4096];
    snprintf(a, sizeof a, "%s/%s", from_dir, name);
    snprintf(b, sizeof b, "%s/%s", to_dir, name);
    FILE *in = fopen(a, "rb"), *out = fopen(b, "wb");
    if (!in || !out) { fprintf(stderr, "cannot copy %s to %s\n", a, b); exit(1); }
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0) fwrite(buf, 1, n, out);
    fclose(in);
    fclose(out);
}

/* The f32 fixture llama with every weight NaN: the header is kept, the data section is overwritten. */
static void write_nan_model(const char *dir) {
    char src[4096], path[4096];
    snprintf(src, sizeof src, "%s/llama", fixtures);
    mkdir(dir, 0755);
    copy_file(src, dir, "config.json");
    copy_file(src, dir, "model.safetensors");
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    FILE *f = fopen(path, "r+b");
    unsigned char len8[8];
    if (!f || fread(len8, 1, 8, f) != 8) { fprintf(stderr, "cannot read %s\n", path); exit(1); }
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | len8[i];
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, (long)(8 + hlen), SEEK_SET);
    const float nan = NAN;
    for (long off = (long)(8 + hlen); off + 4 <= size; off += 4) fwrite(&nan, 4, 1, f);
    fclose(f);
}

static int keep_going(void *ctx, int32_t token) { return 0; }

static void test_nan_logits(void) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/nan-llama", tmp);
    write_nan_model(dir);
    cf_model_params p = cf_model_default_params();
    p.backend.n_threads = 1;
    cf_model *m = NULL;
    cinfer_error err = {0};
    if (cf_model_load(dir, &p, &m, &err) != CINFER_OK) { CHECK(0, "loading %s: %s", dir, err.message); return; }
    const cf_sample_args greedy = {.temperature = 0.0f, .top_p = 1.0f};
    const int32_t prompt[3] = {1, 2, 3};
    cf_seq *s = NULL;
    CHECK(cf_seq_create(m, 64, &s, &err) == CINFER_OK, "seq: %s", err.message);
    CHECK(cf_model_eval(m, s, prompt, 3, NULL, 0, &err) == CINFER_OK, "eval: %s", err.message);
    int32_t next = 12345;
    memset(&err, 0, sizeof err);
    cinfer_status st = cf_model_pick_last(m, s, &greedy, 0, &next, &err);
    CHECK(st == CINFER_E_NOT_A_NUMBER && strstr(err.message, "non-finite logits") && strstr(err.message, "position 2"),
          "pick_last on NaN logits: %s '%s', token %d", cinfer_status_name(st), err.message, next);
    memset(&err, 0, sizeof err);
    st = cf_model_decode_step(m, s, 4, &greedy, 0, &next, &err);
    CHECK(st == CINFER_E_NOT_A_NUMBER && strstr(err.message, "position 3"), "decode_step on NaN logits: %s '%s'",
          cinfer_status_name(st), err.message);
    CHECK(cf_seq_len(s) == 3, "a failed step leaves the sequence at %d tokens, want 3", cf_seq_len(s));
    int done = -1;
    memset(&err, 0, sizeof err);
    st = cf_model_decode_run(m, s, 4, &greedy, NULL, 4, keep_going, NULL, &done, &err);
    CHECK(st == CINFER_E_NOT_A_NUMBER && done == 0 && strstr(err.message, "non-finite logits"), "decode_run on NaN logits: %s '%s', %d done",
          cinfer_status_name(st), err.message, done);
    cf_seq_free(s);
    cf_model_free(m);

    /* the public API, greedy */
    cinfer_model_params mp = cinfer_model_default_params();
    mp.n_threads = 1;
    cinfer_model *cm = NULL;
    cinfer_engine *e = NULL;
    cinfer_session *cs = NULL;
    memset(&err, 0, sizeof err);
    if (cinfer_model_load(dir, &mp, &cm, &err) != CINFER_OK) { CHECK(0, "cinfer_model_load: %s", err.message); return; }
    CHECK(cinfer_engine_create(cm, NULL, &e, &err) == CINFER_OK, "engine: %s", err.message);
    cinfer_request req = cinfer_request_default();
    req.prompt_ids = prompt;
    req.n_prompt_ids = 3;
    req.max_tokens = 4;
    req.temperature = 0.0f;
    const cinfer_result *res = NULL;
    if (e && cinfer_session_open(e, &req, NULL, &cs, &err) == CINFER_OK && cinfer_session_wait(cs, -1, &res, &err) == CINFER_OK) {
        CHECK(res->outcome == CINFER_OUTCOME_FAILED && res->error.code == CINFER_E_NOT_A_NUMBER && res->n_tokens == 0,
              "a greedy session on NaN logits: %s, %s '%s', %zu tokens", cinfer_outcome_name(res->outcome),
              cinfer_status_name(res->error.code), res->error.message, res->n_tokens);
    } else {
        CHECK(0, "session: %s", err.message);
    }
    cinfer_session_free(cs);
    cinfer_engine_free(e);
    cinfer_model_free(cm);
}

int main(int argc, char **argv) {
    if (argc != 3) { fprintf(stderr, "usage: test_config TMP_DIR FIXTURE_MODELS_DIR\n"); return 2; }
    snprintf(tmp, sizeof tmp, "%s", argv[1]);
    snprintf(fixtures, sizeof fixtures, "%s", argv[2]);
    mkdir(tmp, 0755);
    test_sizes();
    test_kv();
    test_nan_logits();
    printf("hostile configs: %d, clean errors: %d\n", n_hostile, n_clean);
    printf("%d checks, %d failures\n", checks, failures);
    return failures != 0;
}
