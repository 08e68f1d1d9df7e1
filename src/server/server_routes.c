/* server_routes.c: the routes answered at once: /health, /v1/models, /metrics, /tokenize and /detokenize
 * (llama-server's shapes) and the chat page. */
#include "server/server_impl.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern const unsigned char cf_chat_page[];
extern const size_t cf_chat_page_len;

static enum MHD_Result respond_json(cf_req *r, int status, cJSON *json) {
    char *text = json ? cJSON_PrintUnformatted(json) : NULL;
    cJSON_Delete(json);
    if (!text) return cf_respond_error(r, 500, NULL, "out of memory writing the response");
    enum MHD_Result ok = cf_respond(r, status, "application/json", text, (size_t)-1);
    free(text);
    return ok;
}

enum MHD_Result cf_route_health(cf_req *r) {
    if (!atomic_load(&r->srv->model))
        return cf_respond(r, 503, "application/json", "{\"status\":\"loading model\"}", (size_t)-1);
    return cf_respond(r, 200, "application/json", "{\"status\":\"ok\"}", (size_t)-1);
}

enum MHD_Result cf_route_page(cf_req *r) {
    return cf_respond(r, 200, "text/html; charset=utf-8", (const char *)cf_chat_page, cf_chat_page_len);
}

static cJSON *model_object(const cf_server *s) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", s->model_name);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", (double)s->created);
    cJSON_AddStringToObject(m, "owned_by", "cinfer");
    return m;
}

enum MHD_Result cf_route_models(cf_req *r, const char *model_id) {
    const cf_server *s = r->srv;
    if (model_id) {
        if (strcmp(model_id, s->model_name))
            return cf_respond_error(r, 404, "model", "the model '%s' does not exist; this server has '%s'", model_id, s->model_name);
        return respond_json(r, 200, model_object(s));
    }
    cJSON *list = cJSON_CreateObject(), *data = cJSON_CreateArray();
    cJSON_AddStringToObject(list, "object", "list");
    cJSON_AddItemToArray(data, model_object(s));
    cJSON_AddItemToObject(list, "data", data);
    return respond_json(r, 200, list);
}

enum MHD_Result cf_route_metrics(cf_req *r) {
    cf_server *s = r->srv;
    cf_buf out = {0};
    cinfer_engine *e = atomic_load(&s->engine);
    if (cf_metrics_render(&s->metrics, e, atomic_load(&s->model) != NULL, &out) || !out.len) {
        cf_buf_free(&out);
        return cf_respond_error(r, 500, NULL, "out of memory writing the metrics");
    }
    enum MHD_Result ok = cf_respond(r, 200, "text/plain; version=0.0.4; charset=utf-8", out.data, out.len);
    cf_buf_free(&out);
    return ok;
}

/* Well-formed UTF-8 (no overlongs, surrogates or values past U+10FFFF). */
static int utf8_valid(const unsigned char *s, size_t n) {
    static const unsigned min[] = {0, 0x80, 0x800, 0x10000};
    for (size_t i = 0; i < n;) {
        const unsigned c = s[i];
        const size_t k = c < 0x80 ? 0 : (c & 0xe0) == 0xc0 ? 1 : (c & 0xf0) == 0xe0 ? 2 : (c & 0xf8) == 0xf0 ? 3 : 4;
        if (k == 4 || n - i <= k) return 0;
        unsigned v = c & (0x7fu >> (k ? k + 1 : 0));
        for (size_t j = 1; j <= k; j++) {
            if ((s[i + j] & 0xc0) != 0x80) return 0;
            v = v << 6 | (s[i + j] & 0x3f);
        }
        if (v < min[k] || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff)) return 0;
        i += k + 1;
    }
    return 1;
}

/* The body as a JSON object, or NULL after answering 400. */
static cJSON *body_object(cf_req *r, enum MHD_Result *ok) {
    cJSON *j = r->body.len ? cJSON_ParseWithLength(r->body.data, r->body.len) : NULL;
    if (!j || !cJSON_IsObject(j)) {
        cJSON_Delete(j);
        *ok = cf_respond_error(r, 400, NULL, "the body must be a JSON object");
        return NULL;
    }
    return j;
}

enum MHD_Result cf_route_tokenize(cf_req *r) {
    enum MHD_Result ok;
    cJSON *j = body_object(r, &ok);
    if (!j) return ok;
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(j, "content");
    const cJSON *special = cJSON_GetObjectItemCaseSensitive(j, "add_special");
    if (!cJSON_IsString(content)) ok = cf_respond_error(r, 400, "content", "content must be a string");
    else if (special && !cJSON_IsBool(special)) ok = cf_respond_error(r, 400, "add_special", "add_special must be true or false");
    else if (!utf8_valid((const unsigned char *)content->valuestring, strlen(content->valuestring)))
        ok = cf_respond_error(r, 400, "content", "content is not valid UTF-8");
    else {
        int32_t *ids = NULL;
        size_t n = 0;
        cinfer_error err = {0};
        if (cinfer_tokenize(atomic_load(&r->srv->model), content->valuestring, strlen(content->valuestring),
                            cJSON_IsTrue(special), &ids, &n, &err) != CINFER_OK) {
            ok = cf_respond_error(r, err.code == CINFER_E_OUT_OF_MEMORY ? 500 : 400, "content", "%s", err.message);
        } else {
            cJSON *res = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(res, "tokens");
            for (size_t i = 0; i < n; i++) cJSON_AddItemToArray(arr, cJSON_CreateNumber(ids[i]));
            cinfer_free(ids);
            r->prompt_tokens = (int32_t)n;
            ok = respond_json(r, 200, res);
        }
    }
    cJSON_Delete(j);
    return ok;
}

enum MHD_Result cf_route_detokenize(cf_req *r) {
    enum MHD_Result ok;
    cJSON *j = body_object(r, &ok);
    if (!j) return ok;
    const cinfer_model *m = atomic_load(&r->srv->model);
    const int vocab = cinfer_model_get_info(m).vocab;
    const cJSON *tokens = cJSON_GetObjectItemCaseSensitive(j, "tokens");
    int32_t *ids = NULL;
    int n = 0;
    char param[64] = "tokens";
    const char *why = NULL;
    if (!cJSON_IsArray(tokens)) why = "tokens must be an array of token ids";
    else if (!(ids = malloc(((size_t)cJSON_GetArraySize(tokens) + 1) * sizeof *ids))) why = "out of memory";
    else {
        const cJSON *t;
        cJSON_ArrayForEach(t, tokens) {
            if (!cJSON_IsNumber(t) || t->valuedouble != (double)(int32_t)t->valuedouble || t->valuedouble < 0 ||
                t->valuedouble >= vocab) {
                snprintf(param, sizeof param, "tokens[%d]", n);
                why = "is not a token id of this model";
                break;
            }
            ids[n++] = (int32_t)t->valuedouble;
        }
    }
    if (why) {
        ok = cf_respond_error(r, 400, param, "%s %s (ids are integers in [0, %d))", param, why, vocab);
    } else {
        char *text = NULL;
        size_t len = 0;
        cinfer_error err = {0};
        if (cinfer_detokenize(m, ids, (size_t)n, &text, &len, &err) != CINFER_OK) {
            ok = cf_respond_error(r, 400, "tokens", "%s", err.message);
        } else {
            cJSON *res = cJSON_CreateObject();
            cJSON_AddStringToObject(res, "content", text);
            cinfer_free(text);
            ok = respond_json(r, 200, res);
        }
    }
    free(ids);
    cJSON_Delete(j);
    return ok;
}
