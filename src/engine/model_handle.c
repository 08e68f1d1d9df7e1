/* model_handle.c: cinfer_model, the public handle of a loaded model folder: the weights on their device,
 * the tokenizer and chat template when the folder has them, and the ids that end generation. */
#include "engine/engine.h"
#include "base/file.h"
#include "base/status.h"
#include "text/template.h"
#include "text/tokenizer.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

cinfer_model_params cinfer_model_default_params(void) {
    return (cinfer_model_params){.struct_size = sizeof(cinfer_model_params), .device = CINFER_DEVICE_CPU};
}

/* Reports progress, then polls the cancel callback. */
static cinfer_status stage(const cinfer_model_params *p, float fraction, const char *dir, cinfer_error *err) {
    if (p->progress) p->progress(fraction, p->user);
    if (p->cancel && p->cancel(p->user))
        return cf_fail(err, CINFER_E_CANCELLED, "loading %s was cancelled", dir);
    return CINFER_OK;
}

static cinfer_status add_eos(cinfer_model *m, const int32_t *ids, int n, cinfer_error *err) {
    int32_t *e = realloc(m->eos, (size_t)(m->n_eos + n) * sizeof *e);
    if (!e && m->n_eos + n) return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory");
    m->eos = e;
    for (int i = 0; i < n; i++) {
        int seen = ids[i] < 0;
        for (int j = 0; j < m->n_eos; j++) seen |= m->eos[j] == ids[i];
        if (!seen) m->eos[m->n_eos++] = ids[i];
    }
    return CINFER_OK;
}

/* The EOS ids of config.json and generation_config.json. */
static cinfer_status add_config_eos(cinfer_model *m, cinfer_error *err) {
    int32_t ids[8];
    for (int i = 0; i < m->m->hp.n_eos; i++) ids[i] = m->m->hp.eos_ids[i];
    return add_eos(m, ids, m->m->hp.n_eos, err);
}

static int file_exists(const char *dir, const char *name) {
    char p[4096];
    struct stat sb;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return stat(p, &sb) == 0;
}

/* chat_template.jinja, or a non-null "chat_template" in tokenizer_config.json. */
static int has_chat_template(const char *dir) {
    if (file_exists(dir, "chat_template.jinja")) return 1;
    char p[4096];
    snprintf(p, sizeof p, "%s/tokenizer_config.json", dir);
    char *text = cf_read_file(p, NULL);
    cJSON *cfg = text ? cJSON_Parse(text) : NULL;
    free(text);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(cfg, "chat_template");
    int has = t && !cJSON_IsNull(t);
    cJSON_Delete(cfg);
    return has;
}

static cinfer_status load(const char *dir, const cinfer_model_params *p, cinfer_model *m, cinfer_error *err) {
    cf_model_params mp = cf_model_default_params();
    mp.backend.device = p->device == CINFER_DEVICE_CUDA ? CF_DEVICE_CUDA : CF_DEVICE_CPU;
    mp.backend.n_threads = p->n_threads;
    mp.backend.gpu_index = p->gpu_index;
    CF_TRY(stage(p, 0.0f, dir, err));
    CF_TRY(cf_model_load(dir, &mp, &m->m, err));
    CF_TRY(stage(p, 0.8f, dir, err));
    CF_TRY(add_config_eos(m, err));
    if (file_exists(dir, "tokenizer.json")) {
        CF_TRY(cf_tokenizer_load(dir, &m->tok, err));
        cf_tokenizer_set_model_vocab(m->tok, m->m->hp.vocab);
        const int32_t *tok_eos;
        int n = cf_tokenizer_eos_ids(m->tok, &tok_eos);
        CF_TRY(add_eos(m, tok_eos, n, err));
    }
    CF_TRY(stage(p, 0.9f, dir, err));
    /* A broken template only breaks chat: its error is kept for the chat requests, and prompts given
     * as text or token ids still work. */
    if (m->tok && has_chat_template(dir) && cf_chat_template_load(dir, NULL, &m->tmpl, &m->tmpl_err) == CINFER_OK)
        m->tmpl_err.code = CINFER_OK;
    return stage(p, 1.0f, dir, err);
}

cinfer_status cinfer_model_load(const char *dir, const cinfer_model_params *p, cinfer_model **out, cinfer_error *err) {
    if (!out) return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "cinfer_model_load: out is NULL");
    *out = NULL;
    if (!dir || !dir[0]) return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "cinfer_model_load: no model folder given");
    cinfer_model_params dp = cinfer_model_default_params();
    if (!p) p = &dp;
    if (p->struct_size != sizeof *p)
        return cf_fail(err, CINFER_E_INVALID_ARGUMENT,
                       "cinfer_model_params.struct_size is %zu, expected %zu: start from cinfer_model_default_params()",
                       p->struct_size, sizeof *p);
    if (p->device != CINFER_DEVICE_CPU && p->device != CINFER_DEVICE_CUDA)
        return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "device %d is not CINFER_DEVICE_CPU or CINFER_DEVICE_CUDA", (int)p->device);
    if (p->n_threads < 0)
        return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "n_threads is %d; it must be >= 0 (0 = all cores)", p->n_threads);
    if (p->gpu_index < 0) return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "gpu_index is %d; it must be >= 0", p->gpu_index);
    cinfer_model *m = calloc(1, sizeof *m);
    if (!m) return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory");
    cinfer_status st = load(dir, p, m, err);
    if (st != CINFER_OK) {
        cinfer_model_free(m);
        return st;
    }
    *out = m;
    return CINFER_OK;
}

cinfer_status cf_model_handle_wrap(cf_model *model, cinfer_model **out, cinfer_error *err) {
    *out = NULL;
    cinfer_model *m = calloc(1, sizeof *m);
    if (!m) {
        cf_model_free(model);
        return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory");
    }
    m->m = model;
    cinfer_status st = add_config_eos(m, err);
    if (st != CINFER_OK) {
        cinfer_model_free(m);
        return st;
    }
    *out = m;
    return CINFER_OK;
}

void cinfer_model_free(cinfer_model *m) {
    if (!m) return;
    cinfer_engine_free(m->engine);
    cf_chat_template_free(m->tmpl);
    cf_tokenizer_free(m->tok);
    cf_model_free(m->m);
    free(m->eos);
    free(m);
}

cinfer_model_info cinfer_model_get_info(const cinfer_model *m) {
    cinfer_model_info info = {.architecture = ""};
    if (!m) return info;
    info.architecture = m->m->hp.arch_name;
    info.vocab = m->m->hp.vocab;
    info.context = m->m->hp.max_ctx;
    info.has_tokenizer = m->tok != NULL;
    info.has_chat_template = m->tmpl != NULL || m->tmpl_err.code != CINFER_OK;
    info.n_eos = m->n_eos;
    info.eos_ids = m->eos;
    return info;
}

cinfer_status cinfer_tokenize(const cinfer_model *m, const char *text, size_t len, int add_special, int32_t **ids,
                              size_t *n_ids, cinfer_error *err) {
    if (!m || !text || !ids || !n_ids) return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "cinfer_tokenize: a NULL argument");
    *ids = NULL;
    *n_ids = 0;
    if (!m->tok) return cf_fail(err, CINFER_E_TOKENIZER, "this model folder has no tokenizer.json");
    return cf_tokenizer_encode(m->tok, text, len, CF_TOK_PARSE_SPECIAL | (add_special ? CF_TOK_ADD_SPECIAL : 0), ids, n_ids, err);
}

cinfer_status cinfer_detokenize(const cinfer_model *m, const int32_t *ids, size_t n_ids, char **text, size_t *len,
                                cinfer_error *err) {
    if (!m || (!ids && n_ids) || !text || !len) return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "cinfer_detokenize: a NULL argument");
    *text = NULL;
    *len = 0;
    if (!m->tok) return cf_fail(err, CINFER_E_TOKENIZER, "this model folder has no tokenizer.json");
    return cf_tokenizer_decode(m->tok, ids, n_ids, 1, text, len, err);
}

void cinfer_free(void *p) {
    free(p);
}
