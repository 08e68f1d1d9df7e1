/* arch.c: config.json -> cf_hparams for every supported architecture. Field names follow Hugging Face
 * transformers (both the 4.x `rope_theta`/`rope_scaling` and the 5.x `rope_parameters` spellings). */
#include "model/arch.h"
#include "model/arch_util.h"
#include "base/status.h"
#include "base/file.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

double cf_cfg_num(const cJSON *o, const char *key, double dflt) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : dflt;
}

int cf_cfg_has(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return v && !cJSON_IsNull(v);
}

int cf_cfg_flag(const cJSON *o, const char *key, int dflt) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsBool(v) ? cJSON_IsTrue(v) : dflt;
}

/* First id of a number-or-array field (eos_token_id may be a list). */
static int first_id(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (cJSON_IsNumber(v)) return v->valueint;
    if (cJSON_IsArray(v) && cJSON_IsNumber(cJSON_GetArrayItem(v, 0))) return cJSON_GetArrayItem(v, 0)->valueint;
    return -1;
}

/* Adds the ids of o's eos_token_id (a number or a list) that are not there yet. */
static void add_eos_ids(cf_hparams *hp, const cJSON *o) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "eos_token_id");
    const cJSON *one = cJSON_IsNumber(v) ? v : NULL;
    const cJSON *e = one ? one : cJSON_IsArray(v) ? v->child : NULL;
    for (; e; e = one ? NULL : e->next) {
        if (!cJSON_IsNumber(e)) continue;
        int id = e->valueint, seen = 0;
        for (int i = 0; i < hp->n_eos; i++) seen |= hp->eos_ids[i] == id;
        if (!seen && hp->n_eos < 8) hp->eos_ids[hp->n_eos++] = id;
    }
}

/* inv_freq[i] = 1 / theta^(2i/rot_dim), in float32 as transformers computes it, then the scaling rule. */
cinfer_status cf_rope_init(cf_rope_set *r, const cJSON *params, float theta, int rot_dim, const char *where, cinfer_error *err) {
    if (rot_dim <= 0 || rot_dim % 2 || rot_dim / 2 > 512)
        return cf_fail(err, CINFER_E_UNSUPPORTED, "%s: rotary dimension %d is not supported (even, at most 1024)", where, rot_dim);
    r->rot_dim = rot_dim;
    const int half = rot_dim / 2;
    for (int i = 0; i < half; i++) r->inv_freq[i] = 1.0f / powf(theta, (float)(2 * i) / (float)rot_dim);
    const cJSON *t = params ? cJSON_GetObjectItemCaseSensitive(params, "rope_type") : NULL;
    if (!cJSON_IsString(t) && params) t = cJSON_GetObjectItemCaseSensitive(params, "type");
    snprintf(r->type, sizeof r->type, "%s", cJSON_IsString(t) ? t->valuestring : "default");
    if (!strcmp(r->type, "default")) return CINFER_OK;
    if (!strcmp(r->type, "proportional")) {
        /* Gemma 4: the first partial_rotary_factor of each head's pairs rotate with the frequencies of the
         * whole head; the rest get frequency 0 (identity) */
        int angles = (int)floor(cf_cfg_num(params, "partial_rotary_factor", 1.0) * rot_dim / 2);
        float factor = (float)cf_cfg_num(params, "factor", 1.0);
        for (int i = 0; i < half; i++) r->inv_freq[i] = i < angles ? r->inv_freq[i] / factor : 0.0f;
        return CINFER_OK;
    }
    if (!strcmp(r->type, "linear")) {
        float factor = (float)cf_cfg_num(params, "factor", 1.0);
        for (int i = 0; i < half; i++) r->inv_freq[i] /= factor;
        return CINFER_OK;
    }
    if (!strcmp(r->type, "llama3")) {
        float factor = (float)cf_cfg_num(params, "factor", 8.0), lo = (float)cf_cfg_num(params, "low_freq_factor", 1.0),
              hi = (float)cf_cfg_num(params, "high_freq_factor", 4.0), old_ctx = (float)cf_cfg_num(params, "original_max_position_embeddings", 8192);
        float lo_wavelen = old_ctx / lo, hi_wavelen = old_ctx / hi;
        for (int i = 0; i < half; i++) {
            float f = r->inv_freq[i], wavelen = 2.0f * 3.14159265358979323846f / f;
            float scaled = wavelen > lo_wavelen ? f / factor : f;
            if (!(wavelen < hi_wavelen) && !(wavelen > lo_wavelen)) {
                float smooth = (old_ctx / wavelen - lo) / (hi - lo);
                scaled = (1 - smooth) * scaled / factor + smooth * scaled;
            }
            r->inv_freq[i] = scaled;
        }
        return CINFER_OK;
    }
    return cf_fail(err, CINFER_E_UNSUPPORTED, "%s: rope type '%s' is not supported (default, linear, llama3, proportional)", where, r->type);
}

/* The rope parameters of the model: 5.x `rope_parameters` or 4.x `rope_scaling` + `rope_theta`. */
static cinfer_status rope_from_config(cf_rope_set *r, const cJSON *cfg, int rot_dim, const char *path, cinfer_error *err) {
    const cJSON *rp = cJSON_GetObjectItemCaseSensitive(cfg, "rope_parameters");
    if (!cJSON_IsObject(rp)) rp = NULL;
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(cfg, "rope_scaling");
    if (!cJSON_IsObject(rs)) rs = NULL;
    float theta = (float)cf_cfg_num(rp ? rp : cfg, "rope_theta", cf_cfg_num(cfg, "rope_theta", 10000.0));
    return cf_rope_init(r, rp ? rp : rs, theta, rot_dim, path, err);
}

typedef struct arch_entry {
    const char *name;
    cf_arch arch;
} arch_entry;

static const arch_entry arches[] = {
    {"LlamaForCausalLM", CF_ARCH_LLAMA},
    {"MistralForCausalLM", CF_ARCH_MISTRAL},
    {"Qwen2ForCausalLM", CF_ARCH_QWEN2},
    {"Qwen3ForCausalLM", CF_ARCH_QWEN3},
};

static cinfer_status need_int(const cJSON *cfg, const char *key, int *out, const char *path, cinfer_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
    if (!cJSON_IsNumber(v) || v->valuedouble < 1 || v->valuedouble > 1e9)
        return cf_fail(err, CINFER_E_FORMAT, "%s: \"%s\" is missing or not a positive integer", path, key);
    *out = v->valueint;
    return CINFER_OK;
}

/* Llama, Mistral, Qwen2, Qwen3: pre-norm decoder, SiLU-gated MLP, one rope table. */
static cinfer_status load_llama_family(const cJSON *cfg, cf_hparams *hp, const char *path, cinfer_error *err) {
    CF_TRY(need_int(cfg, "hidden_size", &hp->dim, path, err));
    CF_TRY(need_int(cfg, "num_hidden_layers", &hp->n_layers, path, err));
    CF_TRY(need_int(cfg, "num_attention_heads", &hp->n_heads, path, err));
    CF_TRY(need_int(cfg, "intermediate_size", &hp->ffn_dim, path, err));
    CF_TRY(need_int(cfg, "vocab_size", &hp->vocab, path, err));
    hp->n_kv_heads = (int)cf_cfg_num(cfg, "num_key_value_heads", hp->n_heads);
    hp->head_dim = cf_cfg_has(cfg, "head_dim") ? (int)cf_cfg_num(cfg, "head_dim", 0) : hp->dim / hp->n_heads;
    if (hp->n_kv_heads < 1 || hp->n_heads % hp->n_kv_heads || hp->head_dim < 1)
        return cf_fail(err, CINFER_E_FORMAT, "%s: %d attention heads cannot be grouped over %d key/value heads (head_dim %d)",
                       path, hp->n_heads, hp->n_kv_heads, hp->head_dim);
    hp->max_ctx = (int)cf_cfg_num(cfg, "max_position_embeddings", 2048);
    hp->norm_eps = (float)cf_cfg_num(cfg, "rms_norm_eps", 1e-6);
    hp->act = CF_ACT_SILU;
    const cJSON *act = cJSON_GetObjectItemCaseSensitive(cfg, "hidden_act");
    if (cJSON_IsString(act) && strcmp(act->valuestring, "silu"))
        return cf_fail(err, CINFER_E_UNSUPPORTED, "%s: hidden_act '%s' is not supported for %s (silu)", path, act->valuestring, hp->arch_name);
    hp->tied = cf_cfg_flag(cfg, "tie_word_embeddings", 0);
    hp->qkv_bias = hp->arch == CF_ARCH_QWEN2 || cf_cfg_flag(cfg, "attention_bias", 0);
    hp->qk_norm = hp->arch == CF_ARCH_QWEN3;
    int window = 0;
    if (hp->arch == CF_ARCH_MISTRAL || (hp->arch == CF_ARCH_QWEN2 && cf_cfg_flag(cfg, "use_sliding_window", 0)))
        window = (int)cf_cfg_num(cfg, "sliding_window", 0);
    hp->n_rope = 1;
    CF_TRY(rope_from_config(&hp->rope[0], cfg, hp->head_dim, path, err));
    hp->layers = calloc((size_t)hp->n_layers, sizeof *hp->layers);
    if (!hp->layers) return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory");
    for (int l = 0; l < hp->n_layers; l++) {
        cf_layer_hp *L = &hp->layers[l];
        L->n_heads = hp->n_heads;
        L->n_kv_heads = hp->n_kv_heads;
        L->head_dim = L->v_head_dim = hp->head_dim;
        L->window = window;
        L->ffn_dim = hp->ffn_dim;
        L->attn_scale = 1.0f / sqrtf((float)hp->head_dim);
        L->kv_source = l;
    }
    return CINFER_OK;
}

cinfer_status cf_hparams_load_file(const char *path, cf_hparams *hp, cinfer_error *err) {
    memset(hp, 0, sizeof *hp);
    char *text;
    CF_TRY(cf_file_read(path, CF_FILE_MAX_CONFIG, 0, &text, NULL, err));
    cJSON *cfg = cJSON_Parse(text);
    free(text);
    if (!cJSON_IsObject(cfg)) {
        cJSON_Delete(cfg);
        return cf_fail(err, CINFER_E_FORMAT, "%s: not a valid JSON object", path);
    }
    const cJSON *archs = cJSON_GetObjectItemCaseSensitive(cfg, "architectures");
    const cJSON *a0 = cJSON_IsArray(archs) ? cJSON_GetArrayItem(archs, 0) : NULL;
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(cfg, "model_type");
    const char *name = cJSON_IsString(a0) ? a0->valuestring : cJSON_IsString(mt) ? mt->valuestring : NULL;
    cinfer_status st;
    if (!name) {
        st = cf_fail(err, CINFER_E_FORMAT, "%s: neither \"architectures\" nor \"model_type\" is given", path);
    } else {
        snprintf(hp->arch_name, sizeof hp->arch_name, "%s", name);
        hp->bos_id = first_id(cfg, "bos_token_id");
        add_eos_ids(hp, cfg);
        const cJSON *tc = cJSON_GetObjectItemCaseSensitive(cfg, "text_config");
        if (cJSON_IsObject(tc)) {
            add_eos_ids(hp, tc);
            if (hp->bos_id < 0) hp->bos_id = first_id(tc, "bos_token_id");
        }
        hp->embed_scale = 1.0f;
        st = CINFER_E_UNSUPPORTED;
        for (size_t i = 0; i < sizeof arches / sizeof arches[0]; i++) {
            if (!strcmp(name, arches[i].name)) {
                hp->arch = arches[i].arch;
                st = load_llama_family(cfg, hp, path, err);
                break;
            }
        }
        if (st == CINFER_E_UNSUPPORTED && cf_gemma_known(name))
            st = cf_gemma_hparams(cfg, name, hp, path, err);
        else if (st == CINFER_E_UNSUPPORTED)
            st = cf_fail(err, CINFER_E_UNSUPPORTED,
                         "%s: architecture '%s' is not supported (supported: LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, "
                         "Qwen3ForCausalLM, Gemma2ForCausalLM, Gemma3ForCausalLM, Gemma3ForConditionalGeneration (text), "
                         "Gemma4ForCausalLM, Gemma4ForConditionalGeneration (text))",
                         path, name);
    }
    cJSON_Delete(cfg);
    if (st != CINFER_OK) cf_hparams_free(hp);
    return st;
}

cinfer_status cf_hparams_load(const char *dir, cf_hparams *hp, cinfer_error *err) {
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    CF_TRY(cf_hparams_load_file(path, hp, err));
    snprintf(path, sizeof path, "%s/generation_config.json", dir);
    char *text;
    cinfer_status st = cf_file_read(path, CF_FILE_MAX_CONFIG, 1, &text, NULL, err);
    if (st != CINFER_OK) {
        cf_hparams_free(hp);
        return st;
    }
    cJSON *gen = text ? cJSON_Parse(text) : NULL;
    free(text);
    if (cJSON_IsObject(gen)) {
        add_eos_ids(hp, gen);
        if (hp->bos_id < 0) hp->bos_id = first_id(gen, "bos_token_id");
    }
    cJSON_Delete(gen);
    return CINFER_OK;
}

void cf_hparams_free(cf_hparams *hp) {
    free(hp->layers);
    hp->layers = NULL;
}

/* Parameters of the decoder with experts counted `experts` at a time (all of them, or the routed ones). */
static int64_t count_params(const cf_hparams *hp, int experts, int with_tables) {
    const int64_t D = hp->dim, LP = (int64_t)hp->n_layers * hp->ple_dim;
    int64_t n = (with_tables ? (int64_t)hp->vocab * D : 0) + (hp->tied && with_tables ? 0 : (int64_t)hp->vocab * D) + D;
    if (hp->ple_dim) n += (with_tables ? (int64_t)hp->ple_vocab * LP : 0) + D * LP + hp->ple_dim;
    for (int l = 0; l < hp->n_layers; l++) {
        const cf_layer_hp *L = &hp->layers[l];
        int64_t q = (int64_t)L->n_heads * L->head_dim, kv = (int64_t)L->n_kv_heads * L->head_dim;
        int64_t v = L->k_eq_v ? 0 : (int64_t)L->n_kv_heads * L->v_head_dim, o = (int64_t)L->n_heads * L->v_head_dim;
        int own_kv = L->kv_source == l;
        n += D * q + o * D + 3 * D * L->ffn_dim + 2 * D;
        if (own_kv) n += D * (kv + v);
        if (hp->qkv_bias) n += q + (own_kv ? kv + v : 0);
        if (hp->qk_norm) n += L->head_dim + (own_kv ? L->head_dim : 0);
        if (hp->sandwich_norm) n += 2 * D;
        if (hp->layer_scalar) n += 1;
        if (hp->ple_dim) n += 2 * D * hp->ple_dim + D;
        if (hp->n_experts)
            n += (int64_t)hp->n_experts * D + D + hp->n_experts + 3 * D +
                 (int64_t)experts * 3 * D * hp->expert_ffn_dim;
    }
    return n;
}

int64_t cf_hparams_n_params(const cf_hparams *hp) { return count_params(hp, hp->n_experts, 1); }

int64_t cf_hparams_active_params(const cf_hparams *hp) { return count_params(hp, hp->n_experts_used, 0); }

int64_t cf_hparams_kv_bytes_per_token(const cf_hparams *hp, size_t elem_size) {
    int64_t b = 0;
    for (int l = 0; l < hp->n_layers; l++) {
        const cf_layer_hp *L = &hp->layers[l];
        if (L->kv_source != l) continue;
        b += (int64_t)L->n_kv_heads * (L->head_dim + L->v_head_dim) * (int64_t)elem_size;
    }
    return b;
}

int64_t cf_hparams_kv_read_bytes(const cf_hparams *hp, int64_t ctx, size_t elem_size) {
    int64_t b = 0;
    for (int l = 0; l < hp->n_layers; l++) {
        const cf_layer_hp *L = &hp->layers[l];
        int64_t keys = L->window > 0 && L->window < ctx ? L->window : ctx;
        b += keys * L->n_kv_heads * (L->head_dim + L->v_head_dim) * (int64_t)elem_size;
    }
    return b;
}
