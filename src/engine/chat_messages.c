/* chat_messages.c: a chat request as its template sees it. The messages (with tool calls, tool results
 * and their ids) become the JSON array `messages`, tools_json becomes `tools` and template_kwargs_json's
 * members become variables, as transformers' apply_chat_template passes them. A NULL content (an
 * assistant message of tool calls) is "", as vLLM hands it to string templates. Each tool call's
 * function.arguments, sent by OpenAI clients as JSON text, is handed over as the value it holds (as vLLM
 * does), so a template that writes it with tojson does not encode it twice. */
#include "engine/chat.h"
#include "engine/engine.h"
#include "base/status.h"
#include "text/template.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

/* Parses text as one JSON value with nothing but whitespace after it. */
static cJSON *parse_whole(const char *text) {
    const char *end = NULL;
    cJSON *v = cJSON_ParseWithOpts(text, &end, 0);
    if (!v) return NULL;
    end += strspn(end, " \t\r\n");
    if (*end) {
        cJSON_Delete(v);
        return NULL;
    }
    return v;
}

/* Replaces each call's function.arguments text by the object it holds ("" counts as no arguments). */
static cinfer_status convert_calls(cJSON *calls, size_t mi, cinfer_error *err) {
    if (!cJSON_IsArray(calls))
        return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "messages[%zu].tool_calls_json is not a JSON array", mi);
    int ci = 0;
    cJSON *c;
    cJSON_ArrayForEach(c, calls) {
        cJSON *fn = cJSON_GetObjectItemCaseSensitive(c, "function");
        if (!cJSON_IsObject(c) || !cJSON_IsObject(fn))
            return cf_fail(err, CINFER_E_INVALID_ARGUMENT,
                           "messages[%zu].tool_calls_json[%d] is not a tool call {\"type\": \"function\", \"function\": "
                           "{\"name\": ..., \"arguments\": ...}}", mi, ci);
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
        if (!cJSON_IsString(name) || !name->valuestring[0])
            return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "messages[%zu].tool_calls_json[%d].function.name is not a "
                           "non-empty string", mi, ci);
        cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
        if (cJSON_IsString(args)) {
            const char *t = args->valuestring;
            cJSON *v = t[strspn(t, " \t\r\n")] ? parse_whole(t) : cJSON_CreateObject();
            if (!v)
                return cf_fail(err, CINFER_E_INVALID_ARGUMENT,
                               "messages[%zu].tool_calls_json[%d].function.arguments is not valid JSON", mi, ci);
            if (!cJSON_IsObject(v)) {
                cJSON_Delete(v);
                return cf_fail(err, CINFER_E_INVALID_ARGUMENT,
                               "messages[%zu].tool_calls_json[%d].function.arguments is not a JSON object", mi, ci);
            }
            if (!cJSON_ReplaceItemInObjectCaseSensitive(fn, "arguments", v)) {
                cJSON_Delete(v);
                return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory for the tool calls of messages[%zu]", mi);
            }
        } else if (args && !cJSON_IsObject(args)) {
            return cf_fail(err, CINFER_E_INVALID_ARGUMENT,
                           "messages[%zu].tool_calls_json[%d].function.arguments is neither JSON text nor an object", mi, ci);
        }
        ci++;
    }
    return CINFER_OK;
}

static cinfer_status check_message(const cinfer_message *m, size_t i, cinfer_error *err) {
    if (!m->role || !m->role[0])
        return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "messages[%zu] needs a role", i);
    if (!m->content && !m->tool_calls_json)
        return cf_fail(err, CINFER_E_INVALID_ARGUMENT,
                       "messages[%zu] needs a content (content may be \"\"; it may be NULL only with tool_calls_json)", i);
    return CINFER_OK;
}

static cinfer_status add_string(cJSON *o, const char *key, const char *v, cinfer_error *err) {
    if (!v) return CINFER_OK;
    if (!cJSON_AddStringToObject(o, key, v)) return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory for the chat messages");
    return CINFER_OK;
}

static cinfer_status message_object(const cinfer_message *m, size_t i, cJSON *o, cinfer_error *err) {
    CF_TRY(check_message(m, i, err));
    CF_TRY(add_string(o, "role", m->role, err));
    CF_TRY(add_string(o, "content", m->content ? m->content : "", err));
    if (m->tool_calls_json) {
        cJSON *calls = parse_whole(m->tool_calls_json);
        if (!calls) return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "messages[%zu].tool_calls_json is not valid JSON", i);
        if (!cJSON_AddItemToObject(o, "tool_calls", calls)) {
            cJSON_Delete(calls);
            return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory for the chat messages");
        }
        CF_TRY(convert_calls(calls, i, err));
    }
    CF_TRY(add_string(o, "tool_call_id", m->tool_call_id, err));
    return add_string(o, "name", m->name, err);
}

cinfer_status cf_chat_messages_json(const cinfer_request *r, char **json, cinfer_error *err) {
    *json = NULL;
    cJSON *arr = cJSON_CreateArray();
    if (!arr) return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory for the chat messages");
    cinfer_status st = CINFER_OK;
    for (size_t i = 0; st == CINFER_OK && i < r->n_messages; i++) {
        cJSON *o = cJSON_CreateObject();
        if (!o || !cJSON_AddItemToArray(arr, o)) {
            cJSON_Delete(o);
            st = cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory for the chat messages");
            break;
        }
        st = message_object(&r->messages[i], i, o, err);
    }
    if (st == CINFER_OK) {
        *json = cJSON_PrintUnformatted(arr);
        if (!*json) st = cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory for the chat messages");
    }
    cJSON_Delete(arr);
    return st;
}

static cinfer_status check_json_field(const char *text, const char *field, int want_array, cinfer_error *err) {
    cJSON *v = parse_whole(text);
    int ok = want_array ? cJSON_IsArray(v) : cJSON_IsObject(v);
    int valid = v != NULL;
    if (ok && want_array) {
        const cJSON *t;
        int i = 0;
        cJSON_ArrayForEach(t, v) {
            if (!cJSON_IsObject(t)) {
                cJSON_Delete(v);
                return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "%s[%d] is not a tool definition (a JSON object)", field, i);
            }
            i++;
        }
    }
    cJSON_Delete(v);
    if (!valid) return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "%s is not valid JSON", field);
    if (!ok) return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "%s is not a JSON %s", field, want_array ? "array" : "object");
    return CINFER_OK;
}

/* tools_json and template_kwargs_json: with messages only, each of its JSON type. */
static cinfer_status check_extras(const cinfer_request *r, cinfer_error *err) {
    if (!r->messages) {
        if (r->tools_json) return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "tools_json applies to chat messages only");
        if (r->template_kwargs_json)
            return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "template_kwargs_json applies to chat messages only");
        return CINFER_OK;
    }
    if (r->tools_json) CF_TRY(check_json_field(r->tools_json, "tools_json", 1, err));
    if (r->template_kwargs_json) CF_TRY(check_json_field(r->template_kwargs_json, "template_kwargs_json", 0, err));
    return CINFER_OK;
}

cinfer_status cf_chat_check(const cinfer_request *r, cinfer_error *err) {
    CF_TRY(check_extras(r, err));
    if (!r->messages) return CINFER_OK;
    char *json;
    CF_TRY(cf_chat_messages_json(r, &json, err));
    cJSON_free(json);
    return CINFER_OK;
}

cinfer_status cf_chat_render(const cinfer_model *m, const cinfer_request *r, char **text, size_t *len,
                             cinfer_error *err) {
    if (!m->tmpl) return cf_fail(err, CINFER_E_TEMPLATE, "this model folder has no usable chat template");
    return cf_chat_render_with(m->tmpl, r, text, len, err);
}

cinfer_status cf_chat_render_with(const cf_chat_template *ct, const cinfer_request *r, char **text, size_t *len,
                                  cinfer_error *err) {
    CF_TRY(check_extras(r, err));
    char *json;
    CF_TRY(cf_chat_messages_json(r, &json, err));
    cf_chat_request cr = {.messages_json = json, .tools_json = r->tools_json,
                          .add_generation_prompt = r->add_generation_prompt, .kwargs_json = r->template_kwargs_json};
    cinfer_status st = cf_chat_template_render(ct, &cr, NULL, text, len, err);
    cJSON_free(json);
    return st;
}

cf_chat_format cf_model_chat_format(const cinfer_model *m) {
    return cf_chat_format_detect(m->tmpl ? cf_chat_template_source(m->tmpl) : NULL, m->tok);
}

/* tools_json names at least one tool. */
static int offers_tools(const cinfer_request *r) {
    if (!r->tools_json) return 0;
    cJSON *v = cJSON_Parse(r->tools_json);
    int n = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : 0;
    cJSON_Delete(v);
    return n > 0;
}

int cf_chat_keeps_special(const cinfer_model *m, const cinfer_request *r) {
    if (!r->messages || !m->tok) return 0;
    cf_chat_format f = cf_model_chat_format(m);
    return f.reasoning_special || (f.tools_special && offers_tools(r));
}
