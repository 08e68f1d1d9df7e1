/* tiny_model.c: the tiny Llama of tiny_model.h, weights from a fixed-seed generator. */
#include "tiny_model.h"
#include "format/safetensors.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

enum { D = 32, L = 2, H = 4, KV = 2, HD = 8, F = 64 };

static int write_text(const char *dir, const char *name, const char *text) {
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *fp = fopen(p, "wb");
    if (!fp) return -1;
    fputs(text, fp);
    return fclose(fp);
}

/* GPT-2's byte-to-unicode map, as UTF-8: printable Latin-1 bytes stand for themselves, the others
 * for U+0100 onwards in byte order. */
static void byte_char(int b, char out[3]) {
    int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    int cp = b;
    if (!printable) {
        int n = 0;
        for (int i = 0; i < b; i++) n += !((i >= '!' && i <= '~') || (i >= 0xA1 && i <= 0xAC) || (i >= 0xAE && i <= 0xFF));
        cp = 256 + n;
    }
    if (cp < 0x80) {
        out[0] = (char)cp;
        out[1] = 0;
    } else {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        out[2] = 0;
    }
}

static const char *const SPECIALS[TINY_BYTE] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};

static int write_json(const char *dir, const char *name, cJSON *o) {
    char *text = cJSON_Print(o);
    cJSON_Delete(o);
    int rc = text ? write_text(dir, name, text) : -1;
    cJSON_free(text);
    return rc;
}

static int write_tokenizer(const char *dir, int flags) {
    cJSON *t = cJSON_CreateObject(), *added = cJSON_AddArrayToObject(t, "added_tokens");
    cJSON_AddStringToObject(t, "version", "1.0");
    for (int i = 0; i < TINY_BYTE; i++) {
        cJSON *a = cJSON_CreateObject();
        cJSON_AddNumberToObject(a, "id", i);
        cJSON_AddStringToObject(a, "content", SPECIALS[i]);
        cJSON_AddBoolToObject(a, "single_word", 0);
        cJSON_AddBoolToObject(a, "lstrip", 0);
        cJSON_AddBoolToObject(a, "rstrip", 0);
        cJSON_AddBoolToObject(a, "normalized", 0);
        cJSON_AddBoolToObject(a, "special", 1);
        cJSON_AddItemToArray(added, a);
    }
    cJSON_AddNullToObject(t, "normalizer");
    cJSON *pre = cJSON_AddObjectToObject(t, "pre_tokenizer");
    cJSON_AddStringToObject(pre, "type", "ByteLevel");
    cJSON_AddBoolToObject(pre, "add_prefix_space", 0);
    cJSON_AddBoolToObject(pre, "trim_offsets", 1);
    cJSON_AddBoolToObject(pre, "use_regex", 1);
    cJSON_AddNullToObject(t, "post_processor");
    cJSON *dec = cJSON_AddObjectToObject(t, "decoder");
    cJSON_AddStringToObject(dec, "type", "ByteLevel");
    cJSON_AddBoolToObject(dec, "add_prefix_space", 1);
    cJSON_AddBoolToObject(dec, "trim_offsets", 1);
    cJSON_AddBoolToObject(dec, "use_regex", 1);
    cJSON *model = cJSON_AddObjectToObject(t, "model");
    cJSON_AddStringToObject(model, "type", "BPE");
    cJSON_AddNullToObject(model, "dropout");
    cJSON_AddNullToObject(model, "unk_token");
    cJSON_AddBoolToObject(model, "fuse_unk", 0);
    cJSON_AddBoolToObject(model, "byte_fallback", 0);
    cJSON_AddBoolToObject(model, "ignore_merges", 0);
    cJSON *vocab = cJSON_AddObjectToObject(model, "vocab");
    for (int i = 0; i < TINY_BYTE; i++) cJSON_AddNumberToObject(vocab, SPECIALS[i], i);
    for (int b = 0; b < 256; b++) {
        char c[3];
        byte_char(b, c);
        cJSON_AddNumberToObject(vocab, c, TINY_BYTE + b);
    }
    cJSON_AddArrayToObject(model, "merges");
    if (write_json(dir, "tokenizer.json", t)) return -1;

    cJSON *c = cJSON_CreateObject();
    cJSON_AddBoolToObject(c, "add_bos_token", 0);
    cJSON_AddNullToObject(c, "bos_token");
    cJSON_AddStringToObject(c, "eos_token", SPECIALS[2]);
    cJSON_AddStringToObject(c, "pad_token", SPECIALS[0]);
    if (!(flags & TINY_NO_TEMPLATE))
        cJSON_AddStringToObject(c, "chat_template",
                                "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
                                "'<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
                                "{% endif %}");
    return write_json(dir, "tokenizer_config.json", c);
}

int tiny_model_write(const char *dir, int flags) {
    mkdir(dir, 0755);
    char config[1024];
    snprintf(config, sizeof config,
             "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":%d,\"intermediate_size\":%d,"
             "\"num_attention_heads\":%d,\"num_key_value_heads\":%d,\"num_hidden_layers\":%d,\"vocab_size\":%d,"
             "\"max_position_embeddings\":%d,\"rms_norm_eps\":1e-5,\"rope_theta\":10000.0,"
             "\"tie_word_embeddings\":false,\"eos_token_id\":%d}",
             D, F, H, KV, L, TINY_VOCAB, TINY_CTX, TINY_EOS);
    if (write_text(dir, "config.json", config)) return -1;
    if (!(flags & TINY_NO_TOKENIZER) && write_tokenizer(dir, flags)) return -1;

    enum { MAX_T = 3 + 9 * L };
    cf_st_write_entry e[MAX_T];
    char names[MAX_T][96];
    float *bufs[MAX_T];
    int n = 0;
    uint64_t s = 20261202;
#define ADD(nm, r, c, is_norm) do { \
        snprintf(names[n], sizeof names[n], "%s", nm); \
        size_t cnt = (size_t)(r) * ((c) ? (size_t)(c) : 1); \
        float *b = bufs[n] = malloc(cnt * sizeof *b); \
        if (!b) return -1; \
        for (size_t i = 0; i < cnt; i++) { \
            s = s * 6364136223846793005ull + 1442695040888963407ull; \
            float u = ((float)(s >> 40) / (1 << 24) - 0.5f); \
            b[i] = is_norm ? 1.0f + 0.2f * u : u; \
        } \
        e[n] = (cf_st_write_entry){.name = names[n], .dtype = CF_F32, .n_dims = (c) ? 2 : 1, .shape = {r, c}, .data = b}; \
        n++; \
    } while (0)
    ADD("model.embed_tokens.weight", TINY_VOCAB, D, 0);
    ADD("model.norm.weight", D, 0, 1);
    ADD("lm_head.weight", TINY_VOCAB, D, 0);
    for (int l = 0; l < L; l++) {
        char nm[96];
#define LAYER(suffix, r, c, is_norm) do { snprintf(nm, sizeof nm, "model.layers.%d.%s", l, suffix); ADD(nm, r, c, is_norm); } while (0)
        LAYER("input_layernorm.weight", D, 0, 1);
        LAYER("post_attention_layernorm.weight", D, 0, 1);
        LAYER("self_attn.q_proj.weight", H * HD, D, 0);
        LAYER("self_attn.k_proj.weight", KV * HD, D, 0);
        LAYER("self_attn.v_proj.weight", KV * HD, D, 0);
        LAYER("self_attn.o_proj.weight", D, H * HD, 0);
        LAYER("mlp.gate_proj.weight", F, D, 0);
        LAYER("mlp.up_proj.weight", F, D, 0);
        LAYER("mlp.down_proj.weight", D, F, 0);
    }
    char p[4096];
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    cinfer_error err;
    int rc = cf_st_write(p, e, (size_t)n, &err) == CINFER_OK ? 0 : -1;
    if (rc) fprintf(stderr, "tiny model: %s\n", err.message);
    for (int i = 0; i < n; i++) free(bufs[i]);
    return rc;
}
