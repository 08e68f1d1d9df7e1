/* arch_gemma.c: Gemma 2, 3 and 4 (text) config.json -> cf_hparams, as transformers' Gemma2Config,
 * Gemma3TextConfig and Gemma4TextConfig read it: a field the file leaves out takes the class default, and a
 * multimodal checkpoint (Gemma3/4ForConditionalGeneration) is read through its text_config.
 *
 * What the flags encode, per version (transformers 5.x modeling):
 *   all     embeddings * sqrt(hidden) (in the weight dtype), GELU-tanh MLP, four norms per layer (sandwich),
 *           layer_types: sliding_attention (keys within the last sliding_window positions) or full
 *   2       RMSNorm * (1 + w), scores * query_pre_attn_scalar^-0.5, attention and final logit soft-capping
 *   3       as 2 plus per-head q/k norms, no attention soft-capping (even when configured), one RoPE table per
 *           layer type
 *   4       RMSNorm * w, q/k norms with weights and a v norm without, scores unscaled, full-attention layers
 *           with their own head_dim (global_head_dim) and proportional RoPE, optionally values = keys,
 *           per-layer input embeddings, the last num_kv_shared_layers layers reading the cache of the last
 *           earlier layer of their type, double-wide MLPs on those, a layer scalar, MoE beside the MLP. */
#include "model/arch.h"
#include "model/arch_util.h"
#include "base/status.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct gemma_defaults {
    int version;
    int vocab, dim, ffn, layers, heads, kv_heads, head_dim, max_ctx, window, pattern;
    double theta, local_theta, attn_softcap, final_softcap;
} gemma_defaults;

/* The constructor defaults of the transformers config classes. */
static const gemma_defaults gemma2 = {2, 256000, 2304, 9216, 26, 8, 4, 256, 8192, 4096, 2, 10000.0, 10000.0, 50.0, 30.0};
static const gemma_defaults gemma3 = {3, 262208, 2304, 9216, 26, 8, 4, 256, 131072, 4096, 6, 1e6, 1e4, 0.0, 0.0};
static const gemma_defaults gemma4 = {4, 262144, 2304, 9216, 30, 8, 4, 256, 131072, 512, 6, 1e6, 1e4, 0.0, 0.0};

static const struct {
    const char *name;
    const gemma_defaults *d;
} gemma_names[] = {
    {"Gemma2ForCausalLM", &gemma2}, {"gemma2", &gemma2},
    {"Gemma3ForCausalLM", &gemma3}, {"Gemma3ForConditionalGeneration", &gemma3}, {"gemma3_text", &gemma3}, {"gemma3", &gemma3},
    {"Gemma4ForCausalLM", &gemma4}, {"Gemma4ForConditionalGeneration", &gemma4}, {"gemma4_text", &gemma4}, {"gemma4", &gemma4},
};

static const gemma_defaults *find_defaults(const char *name) {
    for (size_t i = 0; i < sizeof gemma_names / sizeof gemma_names[0]; i++)
        if (!strcmp(name, gemma_names[i].name)) return gemma_names[i].d;
    return NULL;
}

int cf_gemma_known(const char *name) { return find_defaults(name) != NULL; }

static const cJSON *get(const cJSON *o, const char *key) { return cJSON_GetObjectItemCaseSensitive(o, key); }

/* A size field: the file's value (an integer in [1, hi]) or the class default when absent or null. */
static cinfer_status size_field(const cJSON *o, const char *key, int dflt, int hi, int *out, const char *path, cinfer_error *err) {
    return cf_cfg_int(o, key, dflt, 1, hi, out, path, err);
}

/* Soft-capping: absent = the class default, null or <= 0 = none; else a finite float32. */
static cinfer_status softcap_field(const cJSON *o, const char *key, double dflt, float *out, const char *path, cinfer_error *err) {
    const cJSON *v = get(o, key);
    if (v && !cJSON_IsNull(v) && !cJSON_IsNumber(v)) return cf_fail(err, CINFER_E_FORMAT, "%s: \"%s\" must be a number", path, key);
    const double d = !v ? dflt : cJSON_IsNull(v) ? 0.0 : v->valuedouble;
    if (!isfinite((float)d)) return cf_fail(err, CINFER_E_FORMAT, "%s: \"%s\" is %g; it must be a finite number", path, key, d);
    *out = d > 0 ? (float)d : 0.0f;
    return CINFER_OK;
}

/* Gemma 2: one table from rope_parameters (5.x) or rope_theta + rope_scaling (4.x). */
static cinfer_status rope_single(cf_rope_set *r, const cJSON *tc, const gemma_defaults *d, int rot_dim, const char *path,
                                 cinfer_error *err) {
    const cJSON *rp = get(tc, "rope_parameters"), *rs = get(tc, "rope_scaling");
    if (!cJSON_IsObject(rp)) rp = NULL;
    if (!cJSON_IsObject(rs)) rs = NULL;
    float theta = 0;
    CF_TRY(cf_cfg_positive(tc, "rope_theta", d->theta, &theta, path, err));
    if (rp) CF_TRY(cf_cfg_positive(rp, "rope_theta", theta, &theta, path, err));
    return cf_rope_init(r, rp ? rp : rs, theta, rot_dim, path, err);
}

/* Gemma 3/4: the table of one layer type, from rope_parameters[type] (5.x), or for Gemma 3 from
 * rope_local_base_freq (sliding) and rope_theta + rope_scaling (full) as 4.x configs give them. */
static cinfer_status rope_for_type(cf_rope_set *r, const cJSON *tc, const gemma_defaults *d, int sliding, int rot_dim,
                                   const char *path, cinfer_error *err) {
    const char *type = sliding ? "sliding_attention" : "full_attention";
    const cJSON *rp = get(tc, "rope_parameters");
    const cJSON *p = cJSON_IsObject(rp) ? get(rp, type) : NULL;
    float theta = 0;
    if (cJSON_IsObject(p)) {
        CF_TRY(cf_cfg_positive(p, "rope_theta", sliding ? d->local_theta : d->theta, &theta, path, err));
        return cf_rope_init(r, p, theta, rot_dim, path, err);
    }
    if (d->version == 4) {
        if (cJSON_IsObject(rp))
            return cf_fail(err, CINFER_E_FORMAT, "%s: rope_parameters has no \"%s\" entry", path, type);
        if (sliding) return cf_rope_init(r, NULL, 10000.0f, rot_dim, path, err);
        cJSON *dflt = cJSON_Parse("{\"rope_type\":\"proportional\",\"partial_rotary_factor\":0.25}");
        cinfer_status st = dflt ? cf_rope_init(r, dflt, 1e6f, rot_dim, path, err) : cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory");
        cJSON_Delete(dflt);
        return st;
    }
    if (sliding) {
        CF_TRY(cf_cfg_positive(tc, "rope_local_base_freq", d->local_theta, &theta, path, err));
        return cf_rope_init(r, NULL, theta, rot_dim, path, err);
    }
    const cJSON *rs = cJSON_IsObject(rp) ? rp : get(tc, "rope_scaling");
    CF_TRY(cf_cfg_positive(tc, "rope_theta", d->theta, &theta, path, err));
    if (cJSON_IsObject(rp)) CF_TRY(cf_cfg_positive(rp, "rope_theta", theta, &theta, path, err));
    return cf_rope_init(r, cJSON_IsObject(rs) ? rs : NULL, theta, rot_dim, path, err);
}

/* sliding[l] from layer_types, or from the older sliding_window_pattern (every pattern-th layer full). */
static cinfer_status layer_types(const cJSON *tc, const gemma_defaults *d, int n_layers, int *sliding, const char *path,
                                 cinfer_error *err) {
    const cJSON *lt = get(tc, "layer_types");
    if (cJSON_IsArray(lt)) {
        if (cJSON_GetArraySize(lt) != n_layers)
            return cf_fail(err, CINFER_E_FORMAT, "%s: layer_types has %d entries for %d layers", path, cJSON_GetArraySize(lt), n_layers);
        for (int l = 0; l < n_layers; l++) {
            const cJSON *t = cJSON_GetArrayItem(lt, l);
            const char *s = cJSON_IsString(t) ? t->valuestring : "";
            if (!strcmp(s, "sliding_attention")) sliding[l] = 1;
            else if (!strcmp(s, "full_attention")) sliding[l] = 0;
            else return cf_fail(err, CINFER_E_UNSUPPORTED, "%s: layer type '%s' of layer %d is not supported (sliding_attention, full_attention)", path, s, l);
        }
    } else if (lt && !cJSON_IsNull(lt)) {
        return cf_fail(err, CINFER_E_FORMAT, "%s: layer_types must be a list", path);
    } else {
        int pattern = 0;
        CF_TRY(cf_cfg_int(tc, "sliding_window_pattern", d->pattern, 1, CF_MAX_LAYERS, &pattern, path, err));
        for (int l = 0; l < n_layers; l++) sliding[l] = (l + 1) % pattern != 0;
    }
    if (d->version == 4) sliding[n_layers - 1] = 0; /* Gemma4TextConfig forces the last layer to full attention */
    return CINFER_OK;
}

/* Gemma 4 per_layer_config: {"<layer>": {"head_dim": .., "num_key_value_heads": ..}} overriding those of a layer. */
static cinfer_status per_layer_overrides(const cJSON *tc, cf_hparams *hp, const char *path, cinfer_error *err) {
    const cJSON *plc = get(tc, "per_layer_config");
    if (!plc || cJSON_IsNull(plc)) return CINFER_OK;
    if (!cJSON_IsObject(plc) && !cJSON_IsArray(plc))
        return cf_fail(err, CINFER_E_FORMAT, "%s: per_layer_config must be an object or a list", path);
    int idx = 0;
    for (const cJSON *e = plc->child; e; e = e->next, idx++) {
        int l = idx;
        if (cJSON_IsObject(plc)) {
            char *end = NULL;
            long v = strtol(e->string, &end, 10);
            if (!*e->string || *end || v < 0 || v >= hp->n_layers)
                return cf_fail(err, CINFER_E_FORMAT, "%s: per_layer_config key '%s' is not a layer index", path, e->string);
            l = (int)v;
        }
        if (l >= hp->n_layers) return cf_fail(err, CINFER_E_FORMAT, "%s: per_layer_config has more entries than layers", path);
        if (cJSON_IsNull(e)) continue;
        if (!cJSON_IsObject(e)) return cf_fail(err, CINFER_E_FORMAT, "%s: per_layer_config entry %d is not an object", path, l);
        cf_layer_hp *L = &hp->layers[l];
        for (const cJSON *f = e->child; f; f = f->next) {
            int v = 0;
            if (!strcmp(f->string, "head_dim")) {
                CF_TRY(size_field(e, "head_dim", L->head_dim, CF_MAX_WIDTH, &v, path, err));
                CF_TRY(cf_check_head_dim(v, "per_layer_config head_dim", path, err));
                L->head_dim = L->v_head_dim = v;
            } else if (!strcmp(f->string, "num_key_value_heads")) {
                CF_TRY(size_field(e, "num_key_value_heads", L->n_kv_heads, CF_MAX_HEADS, &v, path, err));
                L->n_kv_heads = v;
            } else {
                return cf_fail(err, CINFER_E_UNSUPPORTED, "%s: per_layer_config field '%s' (layer %d) is not supported", path, f->string, l);
            }
        }
    }
    return CINFER_OK;
}

cinfer_status cf_gemma_hparams(const cJSON *cfg, const char *name, cf_hparams *hp, const char *path, cinfer_error *err) {
    const gemma_defaults *d = find_defaults(name);
    if (!d) return cf_fail(err, CINFER_E_UNSUPPORTED, "%s: architecture '%s' is not a Gemma 2/3/4 model", path, name);
    const cJSON *tc = get(cfg, "text_config");
    if (!cJSON_IsObject(tc)) tc = cfg;
    hp->arch = d->version == 2 ? CF_ARCH_GEMMA2 : d->version == 3 ? CF_ARCH_GEMMA3 : CF_ARCH_GEMMA4;

    int ffn = 0, window = 0, qpas = 0;
    CF_TRY(size_field(tc, "vocab_size", d->vocab, CF_MAX_VOCAB, &hp->vocab, path, err));
    CF_TRY(size_field(tc, "hidden_size", d->dim, CF_MAX_WIDTH, &hp->dim, path, err));
    CF_TRY(size_field(tc, "intermediate_size", d->ffn, CF_MAX_WIDTH / 2, &ffn, path, err));   /* doubled on some Gemma 4 layers */
    CF_TRY(size_field(tc, "num_hidden_layers", d->layers, CF_MAX_LAYERS, &hp->n_layers, path, err));
    CF_TRY(size_field(tc, "num_attention_heads", d->heads, CF_MAX_HEADS, &hp->n_heads, path, err));
    CF_TRY(size_field(tc, "num_key_value_heads", d->kv_heads, CF_MAX_HEADS, &hp->n_kv_heads, path, err));
    CF_TRY(size_field(tc, "head_dim", d->head_dim, CF_MAX_WIDTH, &hp->head_dim, path, err));
    CF_TRY(cf_check_head_dim(hp->head_dim, "head_dim", path, err));
    CF_TRY(size_field(tc, "max_position_embeddings", d->max_ctx, CF_MAX_CTX, &hp->max_ctx, path, err));
    CF_TRY(size_field(tc, "sliding_window", d->window, CF_MAX_CTX, &window, path, err));
    if (window > hp->max_ctx) window = hp->max_ctx;   /* a window over the whole context: the same attention */
    CF_TRY(size_field(tc, "query_pre_attn_scalar", 256, CF_MAX_WIDTH, &qpas, path, err));
    hp->ffn_dim = ffn;
    CF_TRY(cf_cfg_positive(tc, "rms_norm_eps", 1e-6, &hp->norm_eps, path, err));

    /* transformers reads hidden_activation (hidden_act in older Gemma configs) */
    const char *act_key = cf_cfg_has(tc, "hidden_activation") ? "hidden_activation" : "hidden_act";
    const cJSON *act = get(tc, act_key);
    if (act && !cJSON_IsNull(act) && !cJSON_IsString(act))
        return cf_fail(err, CINFER_E_FORMAT, "%s: \"%s\" must be a string", path, act_key);
    if (cJSON_IsString(act) && strcmp(act->valuestring, "gelu_pytorch_tanh") && strcmp(act->valuestring, "gelu_new"))
        return cf_fail(err, CINFER_E_UNSUPPORTED, "%s: %s '%s' is not supported for %s (gelu_pytorch_tanh, gelu_new)", path, act_key,
                       act->valuestring, name);
    hp->act = CF_ACT_GELU_TANH;
    if (cf_cfg_flag(tc, "attention_bias", 0))
        return cf_fail(err, CINFER_E_UNSUPPORTED, "%s: attention_bias is not supported for %s", path, name);
    const cJSON *bidi = get(tc, "use_bidirectional_attention");
    if (cJSON_IsTrue(bidi) || (cJSON_IsString(bidi) && !strcmp(bidi->valuestring, "all")))
        return cf_fail(err, CINFER_E_UNSUPPORTED, "%s: use_bidirectional_attention (a non-causal encoder) is not supported", path);

    hp->tied = cf_cfg_flag(tc, "tie_word_embeddings", cf_cfg_flag(cfg, "tie_word_embeddings", 1));
    hp->norm_w_offset = d->version == 4 ? 0.0f : 1.0f;
    hp->embed_scale = (float)sqrt((double)hp->dim);
    hp->sandwich_norm = 1;
    hp->qk_norm = d->version >= 3;
    hp->v_norm = d->version == 4;
    hp->layer_scalar = d->version == 4;
    /* Gemma 3 keeps attn_logit_softcapping in its config but transformers never applies it */
    if (d->version == 2) CF_TRY(softcap_field(tc, "attn_logit_softcapping", d->attn_softcap, &hp->attn_softcap, path, err));
    CF_TRY(softcap_field(tc, "final_logit_softcapping", d->final_softcap, &hp->final_softcap, path, err));
    if (hp->n_kv_heads > hp->n_heads || hp->n_heads % hp->n_kv_heads)
        return cf_fail(err, CINFER_E_FORMAT, "%s: %d attention heads cannot be grouped over %d key/value heads", path, hp->n_heads, hp->n_kv_heads);

    /* Gemma 4 extras */
    int full_hd = hp->head_dim, full_kv = hp->n_kv_heads, k_eq_v = 0, n_shared = 0, double_wide = 0;
    if (d->version == 4) {
        CF_TRY(size_field(tc, "global_head_dim", 512, CF_MAX_WIDTH, &full_hd, path, err));
        CF_TRY(cf_check_head_dim(full_hd, "global_head_dim", path, err));
        k_eq_v = cf_cfg_flag(tc, "attention_k_eq_v", 0);
        if (k_eq_v) CF_TRY(size_field(tc, "num_global_key_value_heads", hp->n_kv_heads, CF_MAX_HEADS, &full_kv, path, err));
        CF_TRY(cf_cfg_int(tc, "num_kv_shared_layers", 0, 0, hp->n_layers, &n_shared, path, err));
        double_wide = cf_cfg_flag(tc, "use_double_wide_mlp", 0);
        /* absent: the class default 256; null or 0: no per-layer inputs */
        if (!get(tc, "hidden_size_per_layer_input")) hp->ple_dim = 256;
        else CF_TRY(cf_cfg_int(tc, "hidden_size_per_layer_input", 0, 0, CF_MAX_WIDTH, &hp->ple_dim, path, err));
        if ((int64_t)hp->ple_dim * hp->n_layers > CF_MAX_WIDTH)
            return cf_fail(err, CINFER_E_FORMAT, "%s: hidden_size_per_layer_input %d times %d layers is more than %d", path, hp->ple_dim,
                           hp->n_layers, CF_MAX_WIDTH);
        if (hp->ple_dim) {
            CF_TRY(size_field(tc, "vocab_size_per_layer_input", 262144, CF_MAX_VOCAB, &hp->ple_vocab, path, err));
            if (hp->ple_vocab < hp->vocab)
                return cf_fail(err, CINFER_E_UNSUPPORTED, "%s: vocab_size_per_layer_input %d is smaller than vocab_size %d", path,
                               hp->ple_vocab, hp->vocab);
        }
        if (cf_cfg_flag(tc, "enable_moe_block", 0)) {
            CF_TRY(size_field(tc, "num_experts", 0, CF_MAX_EXPERTS, &hp->n_experts, path, err));
            CF_TRY(size_field(tc, "top_k_experts", 0, CF_MAX_EXPERTS, &hp->n_experts_used, path, err));
            CF_TRY(size_field(tc, "moe_intermediate_size", 0, CF_MAX_WIDTH, &hp->expert_ffn_dim, path, err));
            if (!hp->n_experts || !hp->n_experts_used || !hp->expert_ffn_dim || hp->n_experts_used > hp->n_experts)
                return cf_fail(err, CINFER_E_FORMAT, "%s: enable_moe_block needs num_experts, top_k_experts <= num_experts and moe_intermediate_size", path);
            if (hp->n_experts_used > CF_MAX_EXPERTS_USED)
                return cf_fail(err, CINFER_E_UNSUPPORTED, "%s: top_k_experts %d is more than %d", path, hp->n_experts_used, CF_MAX_EXPERTS_USED);
        }
    }

    hp->layers = calloc((size_t)hp->n_layers, sizeof *hp->layers);
    int *sliding = calloc((size_t)hp->n_layers, sizeof *sliding);
    if (!hp->layers || !sliding) { free(sliding); return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory"); }
    cinfer_status st = layer_types(tc, d, hp->n_layers, sliding, path, err);
    const int first_shared = hp->n_layers - n_shared;
    if (st == CINFER_OK && first_shared <= 0)
        st = cf_fail(err, CINFER_E_FORMAT, "%s: num_kv_shared_layers %d leaves no layer with its own cache", path, n_shared);
    for (int l = 0; st == CINFER_OK && l < hp->n_layers; l++) {
        cf_layer_hp *L = &hp->layers[l];
        const int full = !sliding[l], shared = n_shared > 0 && l >= first_shared;
        L->n_heads = hp->n_heads;
        L->n_kv_heads = full && k_eq_v ? full_kv : hp->n_kv_heads;
        L->head_dim = L->v_head_dim = full ? full_hd : hp->head_dim;
        L->window = full ? 0 : window;
        L->rope_set = d->version == 2 || !full ? 0 : 1;
        L->ffn_dim = ffn * (double_wide && shared ? 2 : 1);
        L->attn_scale = d->version == 4 ? 1.0f : (float)pow((double)qpas, -0.5);
        L->k_eq_v = full && k_eq_v;
        L->kv_source = l;
        if (shared) {
            L->kv_source = -1;
            for (int j = first_shared - 1; j >= 0 && L->kv_source < 0; j--)
                if (sliding[j] == sliding[l]) L->kv_source = j;
            if (L->kv_source < 0)
                st = cf_fail(err, CINFER_E_FORMAT, "%s: layer %d shares the cache of an earlier %s layer, but there is none", path, l,
                             full ? "full-attention" : "sliding-window");
        }
    }
    if (st == CINFER_OK && d->version == 4) st = per_layer_overrides(tc, hp, path, err);

    /* one rotary table per layer type (Gemma 2: one); every layer of a type must share its head_dim */
    int rot[2] = {0, 0};
    for (int l = 0; st == CINFER_OK && l < hp->n_layers; l++) {
        cf_layer_hp *L = &hp->layers[l];
        if (L->n_heads % L->n_kv_heads)
            st = cf_fail(err, CINFER_E_FORMAT, "%s: layer %d: %d heads cannot be grouped over %d key/value heads", path, l, L->n_heads, L->n_kv_heads);
        else if (rot[L->rope_set] && rot[L->rope_set] != L->head_dim)
            st = cf_fail(err, CINFER_E_UNSUPPORTED, "%s: layers of one type with different head_dim (%d, %d) are not supported", path,
                         rot[L->rope_set], L->head_dim);
        else if (L->kv_source != l && (hp->layers[L->kv_source].head_dim != L->head_dim || hp->layers[L->kv_source].n_kv_heads != L->n_kv_heads))
            st = cf_fail(err, CINFER_E_FORMAT, "%s: layer %d reads the cache of layer %d, whose head shape differs", path, l, L->kv_source);
        rot[L->rope_set] = L->head_dim;
    }
    hp->n_rope = d->version == 2 ? 1 : 2;
    for (int r = 0; st == CINFER_OK && r < hp->n_rope; r++) {
        int dim = rot[r] ? rot[r] : r ? full_hd : hp->head_dim;
        st = d->version == 2 ? rope_single(&hp->rope[r], tc, d, dim, path, err) : rope_for_type(&hp->rope[r], tc, d, r == 0, dim, path, err);
    }
    free(sliding);
    return st;
}
