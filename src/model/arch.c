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

int cf_cfg_has(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return v && !cJSON_IsNull(v);
}

int cf_cfg_flag(const cJSON *o, const char *key, int dflt) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsBool(v) ? cJSON_IsTrue(v) : dflt;
}

cinfer_status cf_cfg_int(const cJSON *o, const char *key, int dflt, int lo, int hi, int *out, const char *path,
                         cinfer_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v)) {
        if (dflt == CF_CFG_REQUIRED) return cf_fail(err, CINFER_E_FORMAT, "%s: \"%s\" is missing", path, key);
        *out = dflt;
        return CINFER_OK;
    }
    if (!cJSON_IsNumber(v)) return cf_fail(err, CINFER_E_FORMAT, "%s: \"%s\" must be a number", path, key);
    const double d = v->valuedouble;
    if (!(d >= lo && d <= hi) || d != floor(d))
        return cf_fail(err, CINFER_E_FORMAT, "%s: \"%s\" is %g; it must be an integer from %d to %d", path, key, d, lo, hi);
    *out = (int)d;
    return CINFER_OK;
}

cinfer_status cf_cfg_positive(const cJSON *o, const char *key, double dflt, float *out, const char *path, cinfer_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (v && !cJSON_IsNull(v) && !cJSON_IsNumber(v)) return cf_fail(err, CINFER_E_FORMAT, "%s: \"%s\" must be a number", path, key);
    const double d = v && !cJSON_IsNull(v) ? v->valuedouble : dflt;
    const float f = (float)d;
    if (!(f > 0) || !isfinite(f))
        return cf_fail(err, CINFER_E_FORMAT, "%s: \"%s\" is %g; it must be a finite number greater than 0", path, key, d);
    *out = f;
    return CINFER_OK;
}

cinfer_status cf_check_head_dim(int head_dim, const char *key, const char *path, cinfer_error *err) {
    if (head_dim < 2 || head_dim % 2 || head_dim > CF_MAX_HEAD_DIM)
        return cf_fail(err, CINFER_E_UNSUPPORTED, "%s: %s %d is not supported (rotary embeddings need an even %s of at most %d)",
                       path, key, head_dim, key, CF_MAX_HEAD_DIM);
    return CINFER_OK;
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

/* inv_freq[i] = 1 / theta^(2i/rot_dim), in float32 as transformers computes it, then the scaling rule. Every
 * parameter must be finite and > 0 (partial_rotary_factor in (0, 1]): a zero factor or theta gives NaN logits. */
cinfer_status cf_rope_init(cf_rope_set *r, const cJSON *params, float theta, int rot_dim, const char *where, cinfer_error *err) {
    CF_TRY(cf_check_head_dim(rot_dim, "rotary dimension (head_dim)", where, err));
    if (!(theta > 0) || !isfinite(theta))
        return cf_fail(err, CINFER_E_FORMAT, "%s: rope_theta is %g; it must be a finite number greater than 0", where, (double)theta);
    r->rot_dim = rot_dim;
    const int half = rot_dim / 2;
    for (int i = 0; i < half; i++) r->inv_freq[i] = 1.0f / powf(theta, (float)(2 * i) / (float)rot_dim);
    const cJSON *t = params ? cJSON_GetObjectItemCaseSensitive(params, "rope_type") : NULL;
    if (!cJSON_IsString(t) && params) t = cJSON_GetObjectItemCaseSensitive(params, "type");
    snprintf(r->type, sizeof r->type, "%s", cJSON_IsString(t) ? t->valuestring : "default");
    if (cJSON_IsString(t) && strlen(t->valuestring) >= sizeof r->type)
        return cf_fail(err, CINFER_E_UNSUPPORTED, "%s: rope type '%.40s...' is not supported (default, linear, llama3, proportional)", where,
                       t->valuestring);
    if (!strcmp(r->type, "default")) return CINFER_OK;
    float factor = 1;
    if (!strcmp(r->type, "proportional")) {
        /* Gemma 4: the first partial_rotary_factor of each head's pairs rotate with the frequencies of the
         * whole head; the rest get frequency 0 (identity) */
        float part = 1;
        CF_TRY(cf_cfg_positive(params, "factor", 1.0, &factor, where, err));
        CF_TRY(cf_cfg_positive(params, "partial_rotary_factor", 1.0, &part, where, err));
        if (part > 1) return cf_fail(err, CINFER_E_FORMAT, "%s: \"partial_rotary_factor\" is %g; it must be at most 1", where, (double)part);
        int angles = (int)floor((double)part * rot_dim / 2);
        for (int i = 0; i < half; i++) r->inv_freq[i] = i < angles ? r->inv_freq[i] / factor : 0.0f;
        return CINFER_OK;
    }
    if (!strcmp(r->type, "linear")) {
        CF_TRY(cf_cfg_positive(params, "factor", 1.0, &factor, where, err));
        for (int i = 0; i < half; i++) r->inv_freq[i] /= factor;
        return CINFER_OK;
    }
    if (!strcmp(r->type, "llama3")) {
        float lo, hi, old_ctx;
        CF_TRY(cf_cfg_positive(params, "factor", 8.0, &factor, where, err));
        CF_TRY(cf_cfg_positive(params, "low_freq_factor", 1.0, &lo, where, err));
        CF_TRY(cf_cfg_positive(params, "high_freq_factor", 4.0, &hi, where, err));
        CF_TRY(cf_cfg_positive(params, "original_max_position_embeddings", 8192, &old_ctx, where, err));
        if (!(hi > lo))
            return cf_fail(err, CINFER_E_FORMAT, "%s: llama3 rope: high_freq_factor %g must be greater than low_freq_factor %g", where,
                           (double)hi, (double)lo);
        float lo_wavelen = old_ctx / lo, hi_wavelen = old_ctx / hi;
        for (int i = 0; i < half; i++) {
            float f = r->inv_freq[i], wavelen = 2.0f * 3.14159265358979323846f / f;
            float scaled = wavelen > lo_wavelen ? f / factor : f;
            if (!(wavelen < hi_wavelen) && !(wavelen > lo_wavelen)) {
                float smooth = (old_ctx / wavelen - lo) / (hi - lo);
                scaled = (1 - smooth) * scaled / factor + smooth * scaled;
            }
            if (!isfinite(scaled))
                return cf_fail(err, CINFER_E_FORMAT, "%s: the llama3 rope parameters give a non-finite frequency", where);
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
    float theta = 0;
    CF_TRY(cf_cfg_positive(cfg, "rope_theta", 10000.0, &theta, path, err));
    if (rp) CF_TRY(cf_cfg_positive(rp, "rope_theta", theta, &theta, path, err));
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

/* Llama, Mistral, Qwen2, Qwen3: pre-norm decoder, SiLU-gated MLP, one rope table. */
static cinfer_status load_llama_family(const cJSON *cfg, cf_hparams *hp, const char *path, cinfer_error *err) {
    const int req = CF_CFG_REQUIRED;
    CF_TRY(cf_cfg_int(cfg, "hidden_size", req, 1, CF_MAX_WIDTH, &hp->dim, path, err));
    CF_TRY(cf_cfg_int(cfg, "num_hidden_layers", req, 1, CF_MAX_LAYERS, &hp->n_layers, path, err));
    CF_TRY(cf_cfg_int(cfg, "num_attention_heads", req, 1, CF_MAX_HEADS, &hp->n_heads, path, err));
    CF_TRY(cf_cfg_int(cfg, "intermediate_size", req, 1, CF_MAX_WIDTH, &hp->ffn_dim, path, err));
    CF_TRY(cf_cfg_int(cfg, "vocab_size", req, 1, CF_MAX_VOCAB, &hp->vocab, path, err));
    CF_TRY(cf_cfg_int(cfg, "num_key_value_heads", hp->n_heads, 1, CF_MAX_HEADS, &hp->n_kv_heads, path, err));
    if (!cf_cfg_has(cfg, "head_dim") && hp->dim % hp->n_heads)
        return cf_fail(err, CINFER_E_FORMAT, "%s: hidden_size %d is not a multiple of num_attention_heads %d and no head_dim is given", path,
                       hp->dim, hp->n_heads);
    CF_TRY(cf_cfg_int(cfg, "head_dim", hp->dim / hp->n_heads, 1, CF_MAX_WIDTH, &hp->head_dim, path, err));
    CF_TRY(cf_check_head_dim(hp->head_dim, "head_dim", path, err));
    if (hp->n_kv_heads > hp->n_heads || hp->n_heads % hp->n_kv_heads)
        return cf_fail(err, CINFER_E_FORMAT, "%s: %d attention heads cannot be grouped over %d key/value heads", path, hp->n_heads,
                       hp->n_kv_heads);
    CF_TRY(cf_cfg_int(cfg, "max_position_embeddings", 2048, 1, CF_MAX_CTX, &hp->max_ctx, path, err));
    CF_TRY(cf_cfg_positive(cfg, "rms_norm_eps", 1e-6, &hp->norm_eps, path, err));
    hp->act = CF_ACT_SILU;
    const cJSON *act = cJSON_GetObjectItemCaseSensitive(cfg, "hidden_act");
    if (act && !cJSON_IsNull(act) && !cJSON_IsString(act)) return cf_fail(err, CINFER_E_FORMAT, "%s: \"hidden_act\" must be a string", path);
    if (cJSON_IsString(act) && strcmp(act->valuestring, "silu"))
        return cf_fail(err, CINFER_E_UNSUPPORTED, "%s: hidden_act '%s' is not supported for %s (silu)", path, act->valuestring, hp->arch_name);
    hp->tied = cf_cfg_flag(cfg, "tie_word_embeddings", 0);
    hp->qkv_bias = hp->arch == CF_ARCH_QWEN2 || cf_cfg_flag(cfg, "attention_bias", 0);
    hp->qk_norm = hp->arch == CF_ARCH_QWEN3;
    int window = 0;   /* null or 0: none */
    if (hp->arch == CF_ARCH_MISTRAL || (hp->arch == CF_ARCH_QWEN2 && cf_cfg_flag(cfg, "use_sliding_window", 0)))
        CF_TRY(cf_cfg_int(cfg, "sliding_window", 0, 0, CF_MAX_CTX, &window, path, err));
    if (window > hp->max_ctx) window = hp->max_ctx;   /* a window over the whole context: the same attention */
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

static double count_params(const cf_hparams *hp, int experts, int with_tables);

/* What every architecture's hyper-parameters must satisfy, however they were read: the per-layer shapes
 * the decoder and the KV cache are sized from. */
static cinfer_status check_layers(const cf_hparams *hp, const char *path, cinfer_error *err) {
    for (int l = 0; l < hp->n_layers; l++) {
        const cf_layer_hp *L = &hp->layers[l];
        if (L->n_kv_heads < 1 || L->n_kv_heads > L->n_heads || L->n_heads % L->n_kv_heads)
            return cf_fail(err, CINFER_E_FORMAT, "%s: layer %d: %d heads cannot be grouped over %d key/value heads", path, l, L->n_heads,
                           L->n_kv_heads);
        if ((int64_t)L->n_heads * L->head_dim > CF_MAX_WIDTH || (int64_t)L->n_heads * L->v_head_dim > CF_MAX_WIDTH)
            return cf_fail(err, CINFER_E_FORMAT, "%s: layer %d: %d heads of %d dimensions are more than %d", path, l, L->n_heads,
                           L->head_dim, CF_MAX_WIDTH);
        if (L->window < 0 || L->window > hp->max_ctx)
            return cf_fail(err, CINFER_E_FORMAT, "%s: sliding_window %d (layer %d) is larger than max_position_embeddings %d", path,
                           L->window, l, hp->max_ctx);
        if (L->ffn_dim < 1 || L->kv_source < 0 || L->kv_source > l)
            return cf_fail(err, CINFER_E_FORMAT, "%s: layer %d has an invalid feed-forward size or cache source", path, l);
    }
    const double n = count_params(hp, hp->n_experts, 1);
    if (n > CF_MAX_PARAMS)
        return cf_fail(err, CINFER_E_FORMAT, "%s: the config describes %.3g parameters, more than %.3g", path, n, CF_MAX_PARAMS);
    return CINFER_OK;
}

cinfer_status cf_hparams_load_file(const char *path, cf_hparams *hp, cinfer_error *err) {
    memset(hp, 0, sizeof *hp);
    char *text;
    CF_TRY(cf_file_read(path, CF_FILE_MAX_CONFIG, 0, &text, NULL, err));
    cinfer_status st = cf_hparams_parse(text, path, hp, err);
    free(text);
    return st;
}

cinfer_status cf_hparams_parse(const char *text, const char *path, cf_hparams *hp, cinfer_error *err) {
    memset(hp, 0, sizeof *hp);
    cJSON *cfg = cJSON_Parse(text);
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
        int known = 0;
        for (size_t i = 0; i < sizeof arches / sizeof arches[0] && !known; i++) {
            if (!strcmp(name, arches[i].name)) {
                known = 1;
                hp->arch = arches[i].arch;
                st = load_llama_family(cfg, hp, path, err);
            }
        }
        if (!known && cf_gemma_known(name))
            st = cf_gemma_hparams(cfg, name, hp, path, err);
        else if (!known)
            st = cf_fail(err, CINFER_E_UNSUPPORTED,
                         "%s: architecture '%s' is not supported (supported: LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, "
                         "Qwen3ForCausalLM, Gemma2ForCausalLM, Gemma3ForCausalLM, Gemma3ForConditionalGeneration (text), "
                         "Gemma4ForCausalLM, Gemma4ForConditionalGeneration (text))",
                         path, name);
        if (st == CINFER_OK) st = check_layers(hp, path, err);
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

/* Parameters of the decoder with experts counted `experts` at a time (all of them, or the routed ones); in
 * double, exact for every config cf_hparams_load_file accepts (at most CF_MAX_PARAMS). */
static double count_params(const cf_hparams *hp, int experts, int with_tables) {
    const double D = hp->dim, LP = (double)hp->n_layers * hp->ple_dim;
    double n = (with_tables ? (double)hp->vocab * D : 0) + (hp->tied && with_tables ? 0 : (double)hp->vocab * D) + D;
    if (hp->ple_dim) n += (with_tables ? (double)hp->ple_vocab * LP : 0) + D * LP + hp->ple_dim;
    for (int l = 0; l < hp->n_layers; l++) {
        const cf_layer_hp *L = &hp->layers[l];
        double q = (double)L->n_heads * L->head_dim, kv = (double)L->n_kv_heads * L->head_dim;
        double v = L->k_eq_v ? 0 : (double)L->n_kv_heads * L->v_head_dim, o = (double)L->n_heads * L->v_head_dim;
        int own_kv = L->kv_source == l;
        n += D * q + o * D + 3 * D * L->ffn_dim + 2 * D;
        if (own_kv) n += D * (kv + v);
        if (hp->qkv_bias) n += q + (own_kv ? kv + v : 0);
        if (hp->qk_norm) n += L->head_dim + (own_kv ? L->head_dim : 0);
        if (hp->sandwich_norm) n += 2 * D;
        if (hp->layer_scalar) n += 1;
        if (hp->ple_dim) n += 2 * D * hp->ple_dim + D;
        if (hp->n_experts)
            n += (double)hp->n_experts * D + D + hp->n_experts + 3 * D +
                 (double)experts * 3 * D * hp->expert_ffn_dim;
    }
    return n;
}

int64_t cf_hparams_n_params(const cf_hparams *hp) { return (int64_t)count_params(hp, hp->n_experts, 1); }

int64_t cf_hparams_active_params(const cf_hparams *hp) { return (int64_t)count_params(hp, hp->n_experts_used, 0); }

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
