/* mlx_quant.c: config.json's quantization block and the lookup of quantized modules (format/mlx_quant.h). */
#include "format/mlx_quant.h"
#include "base/file.h"
#include "base/status.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void cf_mlxq_config_free(cf_mlxq_config *c) {
    for (int i = 0; c->ov && i < c->n_ov; i++) free(c->ov[i].path);
    free(c->ov);
    memset(c, 0, sizeof *c);
}

/* {group_size, bits, mode} of the block named what (the top level or one module's override) */
static cinfer_status read_params(const cJSON *o, const char *name, const char *what, int dflt_bits, int dflt_group, int *bits,
                                 int *group, cinfer_error *err) {
    const cJSON *gs = cJSON_GetObjectItemCaseSensitive(o, "group_size"), *b = cJSON_GetObjectItemCaseSensitive(o, "bits"),
                *mode = cJSON_GetObjectItemCaseSensitive(o, "mode");
    if (mode && !cJSON_IsNull(mode)) {
        if (!cJSON_IsString(mode))
            return cf_fail(err, CINFER_E_FORMAT, "%s: quantization %s: \"mode\" is not a string", name, what);
        if (strcmp(mode->valuestring, "affine"))
            return cf_fail(err, CINFER_E_UNSUPPORTED,
                           "%s: quantization %s: mode \"%s\" is not supported (cinfer loads MLX's \"affine\" mode only)", name,
                           what, mode->valuestring);
    }
    *bits = dflt_bits;
    *group = dflt_group;
    if (b) {
        if (!cJSON_IsNumber(b) || b->valuedouble != (double)(int)b->valuedouble)
            return cf_fail(err, CINFER_E_FORMAT, "%s: quantization %s: \"bits\" is not an integer", name, what);
        *bits = (int)b->valuedouble;
    }
    if (gs) {
        if (!cJSON_IsNumber(gs) || gs->valuedouble != (double)(int)gs->valuedouble)
            return cf_fail(err, CINFER_E_FORMAT, "%s: quantization %s: \"group_size\" is not an integer", name, what);
        *group = (int)gs->valuedouble;
    }
    if (!*bits || !*group)
        return cf_fail(err, CINFER_E_FORMAT, "%s: quantization %s lacks \"bits\" or \"group_size\"", name, what);
    if (!cf_qweight_bits_ok(*bits))
        return cf_fail(err, CINFER_E_UNSUPPORTED, "%s: quantization %s: %d bits (supported: 2, 3, 4, 5, 6, 8)", name, what, *bits);
    if (!cf_qweight_group_ok(*group))
        return cf_fail(err, CINFER_E_UNSUPPORTED, "%s: quantization %s: group size %d (supported: 32, 64, 128)", name, what, *group);
    return CINFER_OK;
}

static cinfer_status parse_block(const cJSON *q, const char *name, cf_mlxq_config *c, cinfer_error *err) {
    if (!cJSON_IsObject(q)) return cf_fail(err, CINFER_E_FORMAT, "%s: \"quantization\" is not an object", name);
    CF_TRY(read_params(q, name, "block", 0, 0, &c->bits, &c->group, err));
    int n = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, q) if (cJSON_IsObject(it) || cJSON_IsBool(it)) n++;
    c->ov = calloc((size_t)(n ? n : 1), sizeof *c->ov);
    if (!c->ov) return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory");
    cJSON_ArrayForEach(it, q) {
        if (!cJSON_IsObject(it) && !cJSON_IsBool(it)) continue;
        cf_mlxq_override *o = &c->ov[c->n_ov];
        o->path = strdup(it->string);
        if (!o->path) return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory");
        c->n_ov++;
        if (cJSON_IsBool(it)) {
            o->quantized = cJSON_IsTrue(it);
            o->bits = c->bits;
            o->group = c->group;
            continue;
        }
        char what[300];
        snprintf(what, sizeof what, "of module '%s'", it->string);
        o->quantized = 1;
        CF_TRY(read_params(it, name, what, c->bits, c->group, &o->bits, &o->group, err));
    }
    c->present = 1;
    return CINFER_OK;
}

cinfer_status cf_mlxq_config_parse(const char *json, const char *name, cf_mlxq_config *out, cinfer_error *err) {
    memset(out, 0, sizeof *out);
    cJSON *root = cJSON_Parse(json);
    if (!root) return cf_fail(err, CINFER_E_FORMAT, "%s: not valid JSON", name);
    const cJSON *q = cJSON_GetObjectItemCaseSensitive(root, "quantization");
    if (!q) q = cJSON_GetObjectItemCaseSensitive(root, "quantization_config");
    cinfer_status st = CINFER_OK;
    if (q && !cJSON_IsNull(q)) {
        /* a Hugging Face quantization_config of another method (gptq, awq, bitsandbytes...) has quant_method */
        const cJSON *qm = cJSON_GetObjectItemCaseSensitive(q, "quant_method");
        if (cJSON_IsString(qm))
            st = cf_fail(err, CINFER_E_UNSUPPORTED, "%s: quant_method \"%s\" is not supported (cinfer loads MLX affine quantization)",
                         name, qm->valuestring);
        else
            st = parse_block(q, name, out, err);
    }
    cJSON_Delete(root);
    if (st != CINFER_OK) cf_mlxq_config_free(out);
    return st;
}

cinfer_status cf_mlxq_config_load(const char *config_path, cf_mlxq_config *out, cinfer_error *err) {
    memset(out, 0, sizeof *out);
    char *text = NULL;
    CF_TRY(cf_file_read(config_path, CF_FILE_MAX_CONFIG, 0, &text, NULL, err));
    cinfer_status st = cf_mlxq_config_parse(text, config_path, out, err);
    free(text);
    return st;
}

static void shape_text(const cf_st_tensor *t, char *buf, size_t cap) {
    buf[0] = 0;
    for (int i = 0; i < t->n_dims; i++)
        snprintf(buf + strlen(buf), cap - strlen(buf), "%s%lld", i ? ", " : "", (long long)t->shape[i]);
}

static int has_shape(const cf_st_tensor *t, int64_t r, int64_t c) { return t->n_dims == 2 && t->shape[0] == r && t->shape[1] == c; }

static cinfer_status bad_shape(const cf_st_tensor *t, int64_t r, int64_t c, const char *why, cinfer_error *err) {
    char got[96];
    shape_text(t, got, sizeof got);
    return cf_fail(err, CINFER_E_FORMAT, "%s: quantized tensor '%s' has shape [%s], expected [%lld, %lld] (%s)", t->file, t->name, got,
                   (long long)r, (long long)c, why);
}

cinfer_status cf_mlxq_find(const cf_st_set *set, const cf_mlxq_config *c, const char *module, int64_t rows, int64_t cols,
                           cf_qweight *out, int *quantized, cinfer_error *err) {
    *quantized = 0;
    memset(out, 0, sizeof *out);
    char nw[320], ns[320], nb[320];
    snprintf(nw, sizeof nw, "%s.weight", module);
    snprintf(ns, sizeof ns, "%s.scales", module);
    snprintf(nb, sizeof nb, "%s.biases", module);
    const cf_st_tensor *w = cf_st_find(set, nw), *s = cf_st_find(set, ns), *b = cf_st_find(set, nb);
    if (!s && (!w || w->dtype != CF_U32)) return CINFER_OK;   /* a plain weight (or missing: the caller says so) */
    const char *file = w ? w->file : s->file;
    if (!c->present)
        return cf_fail(err, CINFER_E_FORMAT, "%s: '%s' is quantized (%s) but config.json has no \"quantization\" block", file,
                       s ? ns : nw, s ? "it has scales" : "U32 packed values");
    const cf_mlxq_override *ov = NULL;
    for (int i = 0; i < c->n_ov; i++)
        if (!strcmp(c->ov[i].path, module)) ov = &c->ov[i];
    if (ov && !ov->quantized)
        return cf_fail(err, CINFER_E_FORMAT, "%s: config.json marks module '%s' as not quantized, but its tensors are", file, module);
    const int bits = ov ? ov->bits : c->bits, group = ov ? ov->group : c->group;
    if (!w) return cf_fail(err, CINFER_E_FORMAT, "%s: quantized module '%s' has scales but no '%s'", file, module, nw);
    if (!s) return cf_fail(err, CINFER_E_FORMAT, "%s: '%s' holds packed U32 values but '%s' is missing", w->file, nw, ns);
    if (!b) return cf_fail(err, CINFER_E_FORMAT, "%s: '%s' is missing (MLX affine quantization stores a bias per group)", s->file, nb);
    if (w->dtype != CF_U32)
        return cf_fail(err, CINFER_E_FORMAT, "%s: quantized weight '%s' has dtype %s, expected U32 packed values", w->file, nw,
                       w->dtype_name);
    if (cols % group != 0)
        return cf_fail(err, CINFER_E_FORMAT, "%s: '%s': %lld input features are not a multiple of the group size %d", w->file, nw,
                       (long long)cols, group);
    char why[96];
    snprintf(why, sizeof why, "%d-bit values of %lld input features", bits, (long long)cols);
    if (!has_shape(w, rows, cf_qweight_words_per_row(bits, cols))) return bad_shape(w, rows, cf_qweight_words_per_row(bits, cols), why, err);
    snprintf(why, sizeof why, "one per group of %d", group);
    if (!has_shape(s, rows, cols / group)) return bad_shape(s, rows, cols / group, why, err);
    if (!has_shape(b, rows, cols / group)) return bad_shape(b, rows, cols / group, why, err);
    if (s->dtype != CF_F32 && s->dtype != CF_F16 && s->dtype != CF_BF16)
        return cf_fail(err, CINFER_E_FORMAT, "%s: '%s' has dtype %s (expected F32, F16 or BF16)", s->file, ns, s->dtype_name);
    if (b->dtype != s->dtype)
        return cf_fail(err, CINFER_E_FORMAT, "%s: '%s' has dtype %s but its scales are %s", b->file, nb, b->dtype_name, s->dtype_name);
    *out = (cf_qweight){.q = w->data, .scales = s->data, .biases = b->data, .sb_dtype = (cf_dtype)s->dtype, .bits = bits,
                        .group = group, .rows = rows, .cols = cols};
    *quantized = 1;
    return CINFER_OK;
}
