/* api_chat.c: the fields of POST /v1/chat/completions: messages (text content, assistant tool calls, tool
 * results), tools and tool_choice, logprobs, max_tokens, chat_template_kwargs, response_format. */
#include "server/api_internal.h"

#include <stdio.h>
#include <string.h>

int cf_api_text_content(cf_api_ctx *c, const cJSON *content, const char *param, int allow_refusal, const char **out) {
    if (cJSON_IsString(content)) {
        if (!(*out = cf_arena_strdup(c->arena, content->valuestring))) return cf_api_oom(c->err);
        return 0;
    }
    if (!cJSON_IsArray(content))
        return cf_api_fail(c->err, 400, param, "%s must be a string or an array of content parts, not %s", param,
                           cf_api_type_name(content));
    size_t total = 0;
    int j = 0;
    for (const cJSON *part = content->child; part; part = part->next, j++) {
        char pp[160];
        snprintf(pp, sizeof pp, "%s[%d]", param, j);
        if (!cJSON_IsObject(part))
            return cf_api_fail(c->err, 400, pp, "%s must be a content part object, not %s", pp, cf_api_type_name(part));
        const char *type = NULL, *text = NULL;
        char tp[176];
        snprintf(tp, sizeof tp, "%s.type", pp);
        if (cf_api_get_string(part, "type", tp, &type, c->err) < 0) return -1;
        if (!type) return cf_api_fail(c->err, 400, tp, "%s is required (\"text\")", tp);
        const char *key = !strcmp(type, "text") ? "text" : allow_refusal && !strcmp(type, "refusal") ? "refusal" : NULL;
        if (!key)
            return cf_api_fail(c->err, 400, tp,
                               "%s is \"%.40s\": cinfer serves text-only models and takes only \"text\" content parts", tp, type);
        char kp[176];
        snprintf(kp, sizeof kp, "%s.%s", pp, key);
        if (cf_api_get_string(part, key, kp, &text, c->err) < 0) return -1;
        if (!text) return cf_api_fail(c->err, 400, kp, "%s is required", kp);
        total += strlen(text) + 1;
    }
    char *joined = cf_arena_alloc(c->arena, total + 1), *w = joined;
    if (!joined) return cf_api_oom(c->err);
    /* parts are joined with newlines, as vLLM does */
    for (const cJSON *part = content->child; part; part = part->next) {
        const cJSON *t = cf_api_get(part, "text");
        if (!t) t = cf_api_get(part, "refusal");
        if (w != joined) *w++ = '\n';
        size_t n = strlen(t->valuestring);
        memcpy(w, t->valuestring, n);
        w += n;
    }
    *w = 0;
    *out = joined;
    return 0;
}

/* One entry of an assistant message's tool_calls, appended to arr in canonical form. */
static int parse_tool_call(cf_api_ctx *c, const cJSON *tc, const char *p, cJSON *arr) {
    char q[224];
    const char *id = NULL, *type = NULL, *name = NULL;
    if (!cJSON_IsObject(tc)) return cf_api_fail(c->err, 400, p, "%s must be an object, not %s", p, cf_api_type_name(tc));
    snprintf(q, sizeof q, "%s.id", p);
    if (cf_api_get_string(tc, "id", q, &id, c->err) < 0) return -1;
    if (!id) return cf_api_fail(c->err, 400, q, "%s is required", q);
    snprintf(q, sizeof q, "%s.type", p);
    if (cf_api_get_string(tc, "type", q, &type, c->err) < 0) return -1;
    if (type && strcmp(type, "function"))
        return cf_api_fail(c->err, 400, q, "%s is \"%.40s\"; only \"function\" tool calls exist", q, type);
    const cJSON *fn = cf_api_get(tc, "function");
    snprintf(q, sizeof q, "%s.function", p);
    if (!cJSON_IsObject(fn))
        return cf_api_fail(c->err, 400, q, "%s must be an object with name and arguments, not %s", q,
                           fn ? cf_api_type_name(fn) : "missing");
    snprintf(q, sizeof q, "%s.function.name", p);
    if (cf_api_get_string(fn, "name", q, &name, c->err) < 0) return -1;
    if (!name) return cf_api_fail(c->err, 400, q, "%s is required", q);
    const cJSON *args = cf_api_get(fn, "arguments");
    snprintf(q, sizeof q, "%s.function.arguments", p);
    if (args && !cJSON_IsNull(args) && !cJSON_IsString(args) && !cJSON_IsObject(args))
        return cf_api_fail(c->err, 400, q, "%s must be a string of JSON, not %s", q, cf_api_type_name(args));
    char *printed = cJSON_IsObject(args) ? cJSON_PrintUnformatted(args) : NULL;
    const char *args_text = printed ? printed : cJSON_IsString(args) ? args->valuestring : "{}";
    cJSON *o = cJSON_CreateObject(), *f;
    int ok = o && cJSON_AddItemToArray(arr, o);
    if (!ok) cJSON_Delete(o);
    ok = ok && (!cJSON_IsObject(args) || printed) && cJSON_AddStringToObject(o, "id", id) &&
         cJSON_AddStringToObject(o, "type", "function") && (f = cJSON_AddObjectToObject(o, "function")) &&
         cJSON_AddStringToObject(f, "name", name) && cJSON_AddStringToObject(f, "arguments", args_text);
    if (printed) cJSON_free(printed);
    return ok ? 0 : cf_api_oom(c->err);
}

/* An assistant message's tool_calls, as the canonical JSON array cinfer_message.tool_calls_json takes. */
static int parse_tool_calls(cf_api_ctx *c, const cJSON *calls, const char *param, const char **out) {
    if (!cJSON_IsArray(calls))
        return cf_api_fail(c->err, 400, param, "%s must be an array, not %s", param, cf_api_type_name(calls));
    cJSON *arr = cJSON_CreateArray();
    if (!arr) return cf_api_oom(c->err);
    int j = 0, rc = 0;
    for (const cJSON *tc = calls->child; tc && !rc; tc = tc->next, j++) {
        char p[192];
        snprintf(p, sizeof p, "%s[%d]", param, j);
        rc = parse_tool_call(c, tc, p, arr);
    }
    if (!rc && !(*out = cf_arena_json(c->arena, arr))) rc = cf_api_oom(c->err);
    cJSON_Delete(arr);
    return rc;
}

static int parse_message(cf_api_ctx *c, const cJSON *msg, int i, cinfer_message *out) {
    char p[64], q[96];
    snprintf(p, sizeof p, "messages[%d]", i);
    if (!cJSON_IsObject(msg)) return cf_api_fail(c->err, 400, p, "%s must be an object, not %s", p, cf_api_type_name(msg));
    const char *role = NULL;
    snprintf(q, sizeof q, "%s.role", p);
    if (cf_api_get_string(msg, "role", q, &role, c->err) < 0) return -1;
    if (!role) return cf_api_fail(c->err, 400, q, "%s is required", q);
    if (!strcmp(role, "developer")) role = "system";
    if (!strcmp(role, "function"))
        return cf_api_fail(c->err, 400, q, "%s \"function\" is OpenAI's deprecated form; send tool results with role \"tool\"", q);
    if (strcmp(role, "system") && strcmp(role, "user") && strcmp(role, "assistant") && strcmp(role, "tool"))
        return cf_api_fail(c->err, 400, q, "%s is \"%.40s\"; it must be system, developer, user, assistant or tool", q, role);
    if (!(out->role = cf_arena_strdup(c->arena, role))) return cf_api_oom(c->err);
    int assistant = !strcmp(role, "assistant");

    const cJSON *calls = cf_api_get(msg, "tool_calls");
    if (calls && !cJSON_IsNull(calls)) {
        snprintf(q, sizeof q, "%s.tool_calls", p);
        if (!assistant) return cf_api_fail(c->err, 400, q, "%s: only assistant messages carry tool_calls", q);
        if (parse_tool_calls(c, calls, q, &out->tool_calls_json)) return -1;
    }
    const cJSON *content = cf_api_get(msg, "content");
    snprintf(q, sizeof q, "%s.content", p);
    if (!content || cJSON_IsNull(content)) {
        if (!assistant) return cf_api_fail(c->err, 400, q, "%s is required", q);
        out->content = out->tool_calls_json ? NULL : "";
    } else if (cf_api_text_content(c, content, q, assistant, &out->content)) {
        return -1;
    }
    if (!strcmp(role, "tool")) {
        const char *id = NULL, *name = NULL;
        snprintf(q, sizeof q, "%s.tool_call_id", p);
        if (cf_api_get_string(msg, "tool_call_id", q, &id, c->err) < 0) return -1;
        if (!id) return cf_api_fail(c->err, 400, q, "%s is required: the id of the tool call this message answers", q);
        snprintf(q, sizeof q, "%s.name", p);
        if (cf_api_get_string(msg, "name", q, &name, c->err) < 0) return -1;
        if (!(out->tool_call_id = cf_arena_strdup(c->arena, id)) || (name && !(out->name = cf_arena_strdup(c->arena, name))))
            return cf_api_oom(c->err);
    }
    return 0;
}

static int parse_messages(cf_api_ctx *c, const cJSON *root, cinfer_request *base) {
    const cJSON *msgs = cf_api_get(root, "messages");
    if (!msgs || cJSON_IsNull(msgs)) return cf_api_fail(c->err, 400, "messages", "messages is required");
    if (!cJSON_IsArray(msgs)) return cf_api_fail(c->err, 400, "messages", "messages must be an array, not %s", cf_api_type_name(msgs));
    int n = cJSON_GetArraySize(msgs);
    if (!n) return cf_api_fail(c->err, 400, "messages", "messages is empty; send at least one message");
    cinfer_message *m = cf_arena_alloc(c->arena, (size_t)n * sizeof *m);
    if (!m) return cf_api_oom(c->err);
    int i = 0;
    for (const cJSON *msg = msgs->child; msg; msg = msg->next, i++)
        if (parse_message(c, msg, i, &m[i])) return -1;
    base->messages = m;
    base->n_messages = (size_t)n;
    return 0;
}

static int valid_tool_name(const char *s) {
    size_t n = strlen(s);
    if (!n || n > 64) return 0;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '_' || *s == '-'))
            return 0;
    return 1;
}

/* The tools array, checked; returns its count. */
static int parse_tools(cf_api_ctx *c, const cJSON *tools) {
    int max = c->lim && c->lim->max_tools > 0 ? c->lim->max_tools : 128;
    if (!cJSON_IsArray(tools)) return cf_api_fail(c->err, 400, "tools", "tools must be an array, not %s", cf_api_type_name(tools));
    int n = cJSON_GetArraySize(tools);
    if (n > max) return cf_api_fail(c->err, 400, "tools", "tools has %d entries; this server takes at most %d", n, max);
    int j = 0;
    for (const cJSON *t = tools->child; t; t = t->next, j++) {
        char p[48], q[80];
        snprintf(p, sizeof p, "tools[%d]", j);
        if (!cJSON_IsObject(t)) return cf_api_fail(c->err, 400, p, "%s must be an object, not %s", p, cf_api_type_name(t));
        const char *type = NULL, *name = NULL, *desc = NULL;
        snprintf(q, sizeof q, "%s.type", p);
        if (cf_api_get_string(t, "type", q, &type, c->err) < 0) return -1;
        if (!type || strcmp(type, "function"))
            return cf_api_fail(c->err, 400, q, "%s must be \"function\"%s", q, type ? "; no other tool type exists here" : "");
        const cJSON *fn = cf_api_get(t, "function");
        snprintf(q, sizeof q, "%s.function", p);
        if (!cJSON_IsObject(fn))
            return cf_api_fail(c->err, 400, q, "%s must be an object, not %s", q, fn ? cf_api_type_name(fn) : "missing");
        snprintf(q, sizeof q, "%s.function.name", p);
        if (cf_api_get_string(fn, "name", q, &name, c->err) < 0) return -1;
        if (!name || !valid_tool_name(name))
            return cf_api_fail(c->err, 400, q, "%s must be 1 to 64 letters, digits, underscores or dashes", q);
        snprintf(q, sizeof q, "%s.function.description", p);
        if (cf_api_get_string(fn, "description", q, &desc, c->err) < 0) return -1;
        const cJSON *params = cf_api_get(fn, "parameters");
        snprintf(q, sizeof q, "%s.function.parameters", p);
        if (params && !cJSON_IsNull(params) && !cJSON_IsObject(params))
            return cf_api_fail(c->err, 400, q, "%s must be a JSON Schema object, not %s", q, cf_api_type_name(params));
    }
    return n;
}

static int tool_named(const cJSON *tools, const char *name) {
    for (const cJSON *t = tools ? tools->child : NULL; t; t = t->next) {
        const cJSON *n = cf_api_get(cf_api_get(t, "function"), "name");
        if (cJSON_IsString(n) && !strcmp(n->valuestring, name)) return 1;
    }
    return 0;
}

/* "none" hides the tools from the template; "auto", "required" and a named function offer them all
 * (nothing forces a call until constrained decoding exists). */
static int parse_tool_choice(cf_api_ctx *c, const cJSON *root, const cJSON *tools, int *none) {
    const cJSON *tc = cf_api_get(root, "tool_choice");
    *none = 0;
    if (!tc || cJSON_IsNull(tc)) return 0;
    if (cJSON_IsString(tc)) {
        const char *s = tc->valuestring;
        if (!strcmp(s, "none")) *none = 1;
        else if (strcmp(s, "auto") && strcmp(s, "required"))
            return cf_api_fail(c->err, 400, "tool_choice", "tool_choice is \"%.40s\"; it must be none, auto, required or a named function", s);
        if (!strcmp(s, "required") && !tools)
            return cf_api_fail(c->err, 400, "tool_choice", "tool_choice is \"required\" but the request offers no tools");
        return 0;
    }
    if (!cJSON_IsObject(tc))
        return cf_api_fail(c->err, 400, "tool_choice", "tool_choice must be a string or an object, not %s", cf_api_type_name(tc));
    const char *name = NULL;
    const cJSON *fn = cf_api_get(tc, "function");
    if (!cJSON_IsObject(fn) || cf_api_get_string(fn, "name", "tool_choice.function.name", &name, c->err) < 0 || !name) {
        if (c->err->status) return -1;
        return cf_api_fail(c->err, 400, "tool_choice.function.name", "tool_choice.function.name is required to name a function");
    }
    if (!tool_named(tools, name))
        return cf_api_fail(c->err, 400, "tool_choice.function.name", "tool_choice names \"%.60s\", which is not among the tools", name);
    return 0;
}

static int parse_tools_and_choice(cf_api_ctx *c, const cJSON *root, cf_api_request *r, cinfer_request *base) {
    const cJSON *tools = cf_api_get(root, "tools");
    if (tools && cJSON_IsNull(tools)) tools = NULL;
    int n_tools = tools ? parse_tools(c, tools) : 0, none;
    if (n_tools < 0 || parse_tool_choice(c, root, n_tools ? tools : NULL, &none)) return -1;
    c->st->tool_choice_none = none;
    if (!n_tools || none) return 0;
    if (!(base->tools_json = cf_arena_json(c->arena, tools))) return cf_api_oom(c->err);
    r->tools_offered = 1;
    return 0;
}

int cf_api_parse_chat(cf_api_ctx *c, const cJSON *root, cf_api_request *r, cinfer_request *base) {
    if (parse_messages(c, root, base)) return -1;
    const cJSON *rf = cf_api_get(root, "response_format");
    if (rf && !cJSON_IsNull(rf)) {
        const cJSON *type = cJSON_IsObject(rf) ? cf_api_get(rf, "type") : NULL;
        if (!cJSON_IsString(type))
            return cf_api_fail(c->err, 400, "response_format", "response_format must be an object with a type, not %s", cf_api_type_name(rf));
        if (strcmp(type->valuestring, "text"))
            return cf_api_fail(c->err, 400, "response_format",
                               "response_format \"%.40s\" is not supported: cinfer has no constrained decoding yet, so it cannot "
                               "guarantee JSON output; leave response_format out (or use {\"type\": \"text\"}) and ask for JSON "
                               "in the prompt",
                               type->valuestring);
    }
    if (parse_tools_and_choice(c, root, r, base)) return -1;

    const cJSON *kw = cf_api_get(root, "chat_template_kwargs");
    if (kw && !cJSON_IsNull(kw)) {
        if (!cJSON_IsObject(kw))
            return cf_api_fail(c->err, 400, "chat_template_kwargs", "chat_template_kwargs must be an object, not %s", cf_api_type_name(kw));
        if (!(base->template_kwargs_json = cf_arena_json(c->arena, kw))) return cf_api_oom(c->err);
    }

    int lp = 0;
    int64_t top = 0;
    int got_top;
    if (cf_api_get_bool(root, "logprobs", NULL, &lp, c->err) < 0) return -1;
    if ((got_top = cf_api_get_int(root, "top_logprobs", NULL, 0, CINFER_MAX_TOP_LOGPROBS, &top, c->err)) < 0) return -1;
    if (got_top && top > 0 && !lp)
        return cf_api_fail(c->err, 400, "top_logprobs", "top_logprobs needs logprobs set to true");
    base->logprobs = lp;
    base->top_logprobs = (int32_t)top;

    const char *key = cf_api_get(root, "max_completion_tokens") &&
                              !cJSON_IsNull(cf_api_get(root, "max_completion_tokens"))
                          ? "max_completion_tokens"
                          : "max_tokens";
    return cf_api_parse_max_tokens(c, root, key, 0, base);
}
