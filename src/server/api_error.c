/* api_error.c: error bodies in each API's shape, and the mapping of engine statuses onto HTTP errors. */
#include "server/api_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *openai_type(int status) {
    switch (status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 429: return "rate_limit_error";
    default: return status >= 500 ? "server_error" : "invalid_request_error";
    }
}

static const char *anthropic_type(int status) {
    switch (status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503: case 529: return "overloaded_error";
    default: return status >= 500 ? "api_error" : "invalid_request_error";
    }
}

char *cf_api_error_json(cf_api_kind kind, const cf_api_error *e) {
    cJSON *root = cJSON_CreateObject(), *err;
    int ok;
    if (kind == CF_API_MESSAGES) {
        ok = root && cJSON_AddStringToObject(root, "type", "error") && (err = cJSON_AddObjectToObject(root, "error")) &&
             cJSON_AddStringToObject(err, "type", anthropic_type(e->status)) && cJSON_AddStringToObject(err, "message", e->message);
    } else {
        const char *code = e->status == 401 ? "invalid_api_key" : e->status == 429 ? "rate_limit_exceeded" : NULL;
        ok = root && (err = cJSON_AddObjectToObject(root, "error")) && cJSON_AddStringToObject(err, "message", e->message) &&
             cJSON_AddStringToObject(err, "type", openai_type(e->status)) &&
             (e->param[0] ? cJSON_AddStringToObject(err, "param", e->param) : cJSON_AddNullToObject(err, "param")) &&
             (code ? cJSON_AddStringToObject(err, "code", code) : cJSON_AddNullToObject(err, "code"));
    }
    char *text = ok ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    if (!text) return NULL;
    char *out = strdup(text); /* released with free, whatever allocator cJSON uses */
    cJSON_free(text);
    return out;
}

void cf_api_error_from_status(cf_api_kind kind, cinfer_status st, const char *message, cf_api_error *out) {
    const char *prompt = kind == CF_API_COMPLETIONS ? "prompt" : "messages", *param = "";
    int status = 400;
    switch (st) {
    case CINFER_E_EMPTY_PROMPT:
    case CINFER_E_TOKEN_OUT_OF_RANGE:
    case CINFER_E_CONTEXT_OVERFLOW:
    case CINFER_E_TEMPLATE:
    case CINFER_E_TOKENIZER: param = prompt; break;
    case CINFER_E_MAX_TOKENS:
    case CINFER_E_OUT_OF_MEMORY: param = "max_tokens"; break; /* at open: the request can never fit the KV memory */
    case CINFER_E_TOP_LOGPROBS: param = kind == CF_API_COMPLETIONS ? "logprobs" : "top_logprobs"; break;
    case CINFER_E_TEMPERATURE: param = "temperature"; break;
    case CINFER_E_TOP_K: param = "top_k"; break;
    case CINFER_E_TOP_P: param = "top_p"; break;
    case CINFER_E_MIN_P: param = "min_p"; break;
    case CINFER_E_PENALTY:
    case CINFER_E_NOT_A_NUMBER:
    case CINFER_E_INVALID_ARGUMENT:
    case CINFER_E_UNSUPPORTED: break;
    case CINFER_E_BUSY: status = 429; break;
    case CINFER_E_CANCELLED: status = 503; break;
    default: status = 500; break;
    }
    out->status = status;
    snprintf(out->param, sizeof out->param, "%s", param);
    snprintf(out->message, sizeof out->message, "%s", message && message[0] ? message : cinfer_status_name(st));
}
