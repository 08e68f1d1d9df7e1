/* tiny_model.c: the tiny Llama of tiny_model.h, weights from a fixed-seed generator. */
#include "tiny_model.h"
#include "format/safetensors.h"

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

int tiny_model_write(const char *dir) {
    mkdir(dir, 0755);
    char config[1024];
    snprintf(config, sizeof config,
             "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":%d,\"intermediate_size\":%d,"
             "\"num_attention_heads\":%d,\"num_key_value_heads\":%d,\"num_hidden_layers\":%d,\"vocab_size\":%d,"
             "\"max_position_embeddings\":%d,\"rms_norm_eps\":1e-5,\"rope_theta\":10000.0,"
             "\"tie_word_embeddings\":false,\"eos_token_id\":%d}",
             D, F, H, KV, L, TINY_VOCAB, TINY_CTX, TINY_EOS);
    if (write_text(dir, "config.json", config)) return -1;

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
