/* template_chat.c: a model folder's chat template (chat_template.jinja or tokenizer_config.json's
 * chat_template, by name when there are several), the special tokens transformers hands it, and the
 * render call of apply_chat_template: messages, tools, documents, add_generation_prompt, extra kwargs. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "base/file.h"
#include "text/template_impl.h"

enum { SPECIAL_COUNT = 8 };
static const char *const SPECIAL_NAMES[SPECIAL_COUNT] = {
    "bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token",
    "additional_special_tokens"};

struct cf_chat_template {
    cf_template *tmpl;
    char *source;                      /* the template's text, NUL-terminated */
    char *special_json[SPECIAL_COUNT]; /* JSON text of each special token value, or NULL when absent */
};

/* A token as written in tokenizer_config.json: a string or {"content": ...}. NULL when absent/null. */
static char *token_json(const cJSON *v) {
    if (cJSON_IsObject(v)) v = cJSON_GetObjectItemCaseSensitive(v, "content");
    if (!cJSON_IsString(v)) return NULL;
    cJSON *s = cJSON_CreateString(v->valuestring);
    char *r = s ? cJSON_PrintUnformatted(s) : NULL;
    cJSON_Delete(s);
    return r;
}

static char *token_list_json(const cJSON *arr) {
    if (!cJSON_IsArray(arr)) return NULL;
    cJSON *out = cJSON_CreateArray();
    const cJSON *it;
    cJSON_ArrayForEach(it, arr) {
        const cJSON *v = cJSON_IsObject(it) ? cJSON_GetObjectItemCaseSensitive(it, "content") : it;
        if (cJSON_IsString(v)) cJSON_AddItemToArray(out, cJSON_CreateString(v->valuestring));
    }
    char *r = cJSON_PrintUnformatted(out);
    cJSON_Delete(out);
    return r;
}

static cinfer_status make(const char *src, size_t len, cf_chat_template **out, cinfer_error *err) {
    cf_chat_template *ct = calloc(1, sizeof *ct);
    if (!ct) return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory loading a chat template");
    cinfer_status s = cf_template_compile(src, len, &ct->tmpl, err);
    if (s != CINFER_OK) {
        free(ct);
        return s;
    }
    ct->source = malloc(len + 1);
    if (!ct->source) {
        cf_chat_template_free(ct);
        return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory loading a chat template");
    }
    memcpy(ct->source, src, len);
    ct->source[len] = 0;
    *out = ct;
    return CINFER_OK;
}

void cf_chat_template_free(cf_chat_template *ct) {
    if (!ct) return;
    cf_template_free(ct->tmpl);
    free(ct->source);
    for (int i = 0; i < SPECIAL_COUNT; i++) cJSON_free(ct->special_json[i]);
    free(ct);
}

const char *cf_chat_template_source(const cf_chat_template *ct) { return ct->source; }

static cinfer_status set_token(cf_chat_template *ct, int which, const char *text, cinfer_error *err) {
    if (!text) return CINFER_OK;
    cJSON *s = cJSON_CreateString(text);
    char *j = s ? cJSON_PrintUnformatted(s) : NULL;
    cJSON_Delete(s);
    if (!j) return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory setting a special token");
    cJSON_free(ct->special_json[which]);
    ct->special_json[which] = j;
    return CINFER_OK;
}

cinfer_status cf_chat_template_set_tokens(cf_chat_template *ct, const char *bos_token, const char *eos_token,
                                          cinfer_error *err) {
    CF_TRY(set_token(ct, 0, bos_token, err));
    return set_token(ct, 1, eos_token, err);
}

/* Picks the template source out of tokenizer_config.json's chat_template. */
static cinfer_status pick_template(const cJSON *tmpl, const char *name, const char *path, const char **src,
                                   cinfer_error *err) {
    if (cJSON_IsString(tmpl)) {
        if (name && strcmp(name, "default") != 0)
            return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "%s has a single chat template, not one named '%s'", path, name);
        *src = tmpl->valuestring;
        return CINFER_OK;
    }
    if (!cJSON_IsArray(tmpl)) return cf_fail(err, CINFER_E_FORMAT, "%s: chat_template is neither a string nor a list", path);
    const char *want = name ? name : "default";
    char names[256] = "";
    const cJSON *it;
    cJSON_ArrayForEach(it, tmpl) {
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(it, "name"), *t = cJSON_GetObjectItemCaseSensitive(it, "template");
        if (!cJSON_IsString(n) || !cJSON_IsString(t)) continue;
        if (strcmp(n->valuestring, want) == 0) {
            *src = t->valuestring;
            return CINFER_OK;
        }
        size_t l = strlen(names);
        snprintf(names + l, sizeof names - l, "%s%s", l ? ", " : "", n->valuestring);
    }
    return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "%s has no chat template named '%s' (it has: %s)", path, want, names);
}

cinfer_status cf_chat_template_load(const char *dir, const char *name, cf_chat_template **out, cinfer_error *err) {
    *out = NULL;
    char path[4096], jpath[4096];
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    snprintf(jpath, sizeof jpath, "%s/chat_template.jinja", dir);
    char *cfg_text = NULL, *jinja = NULL;
    size_t jlen = 0;
    cinfer_status s = cf_file_read(path, CF_FILE_MAX_CONFIG, 1, &cfg_text, NULL, err);  /* both files are optional */
    if (s != CINFER_OK) return s;
    cJSON *cfg = NULL;
    if (cfg_text) {
        cfg = cJSON_Parse(cfg_text);
        free(cfg_text);
        if (!cfg) return cf_fail(err, CINFER_E_FORMAT, "%s is not valid JSON", path);
    }
    s = cf_file_read(jpath, CF_FILE_MAX_CONFIG, 1, &jinja, &jlen, err);
    if (s != CINFER_OK) {
        cJSON_Delete(cfg);
        return s;
    }
    cf_chat_template *ct = NULL;
    if (jinja && (!name || strcmp(name, "default") == 0)) {
        s = make(jinja, jlen, &ct, err);
        if (s != CINFER_OK) cf_wrap(err, s, "%s", jpath);
    } else {
        const cJSON *t = cfg ? cJSON_GetObjectItemCaseSensitive(cfg, "chat_template") : NULL;
        const char *src = NULL;
        if (!t || cJSON_IsNull(t)) {
            s = cf_fail(err, CINFER_E_INVALID_ARGUMENT, "%s has no chat template (neither chat_template.jinja nor "
                        "tokenizer_config.json's chat_template)", dir);
        } else {
            s = pick_template(t, name, path, &src, err);
            if (s == CINFER_OK) {
                s = make(src, strlen(src), &ct, err);
                if (s != CINFER_OK) cf_wrap(err, s, "%s", path);
            }
        }
    }
    free(jinja);
    if (s == CINFER_OK && cfg) {
        for (int i = 0; i < SPECIAL_COUNT; i++) {
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, SPECIAL_NAMES[i]);
            ct->special_json[i] = i == SPECIAL_COUNT - 1 ? token_list_json(v) : token_json(v);
        }
    }
    cJSON_Delete(cfg);
    if (s != CINFER_OK) {
        cf_chat_template_free(ct);
        return s;
    }
    *out = ct;
    return CINFER_OK;
}

cinfer_status cf_chat_template_render(const cf_chat_template *ct, const cf_chat_request *req,
                                      const cf_template_options *opt, char **out, size_t *out_len,
                                      cinfer_error *err) {
    if (!req || !req->messages_json)
        return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "a chat template render needs messages");
    cf_template_var vars[SPECIAL_COUNT + 5];
    int n = 0;
    for (int i = 0; i < SPECIAL_COUNT; i++)
        if (ct->special_json[i]) vars[n++] = (cf_template_var){SPECIAL_NAMES[i], ct->special_json[i]};
    if (req->kwargs_json) vars[n++] = (cf_template_var){NULL, req->kwargs_json};
    vars[n++] = (cf_template_var){"messages", req->messages_json};
    vars[n++] = (cf_template_var){"tools", req->tools_json ? req->tools_json : "null"};
    vars[n++] = (cf_template_var){"documents", "null"};
    vars[n++] = (cf_template_var){"add_generation_prompt", req->add_generation_prompt ? "true" : "false"};
    return cf_template_render(ct->tmpl, vars, n, opt, out, out_len, err);
}
