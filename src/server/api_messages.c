/* api_messages.c: the fields of POST /v1/messages (Anthropic) into chat messages: system, text / tool_use /
 * tool_result blocks, tools as OpenAI tool definitions for the template, tool_choice, thinking, max_tokens
 * (required, as Anthropic requires), temperature, top_p, top_k, stop_sequences. */
#include "server/api_internal.h"

#include <stdio.h>
#include <string.h>

/* Text blocks ([{"type": "text", "text": ...}]) or a string, joined without separators. */
static int block_text(cf_api_ctx *c, const cJSON *content, const char *param, const char **out) {
    if (cJSON_IsString(content)) {
        *out = cf_arena_strdup(c->arena, content->valuestring);
        return *out ? 0 : cf_api_oom(c->err);
    }
    if (!cJSON_IsArray(content))
        return cf_api_fail(c->err, 400, param, "%s must be a string or an array of text blocks, not %s", param,
                           cf_api_type_name(content));
    size_t total = 0;
    int j = 0;
    for (const cJSON *b = content->child; b; b = b->next, j++) {
        char p[160], q[176];
        snprintf(p, sizeof p, "%s[%d]", param, j);
        const char *type = NULL, *text = NULL;
        snprintf(q, sizeof q, "%s.type", p);
        if (!cJSON_IsObject(b)) return cf_api_fail(c->err, 400, p, "%s must be an object, not %s", p, cf_api_type_name(b));
        if (cf_api_get_string(b, "type", q, &type, c->err) < 0) return -1;
        if (!type || strcmp(type, "text"))
            return cf_api_fail(c->err, 400, q, "%s must be \"text\": cinfer serves text-only models", q);
        snprintf(q, sizeof q, "%s.text", p);
        if (cf_api_get_string(b, "text", q, &text, c->err) < 0) return -1;
        if (!text) return cf_api_fail(c->err, 400, q, "%s is required", q);
        total += strlen(text);
    }
    char *joined = cf_arena_alloc(c->arena, total + 1), *w = joined;
    if (!joined) return cf_api_oom(c->err);
    for (const cJSON *b = content->child; b; b = b->next) {
        const char *t = cf_api_get(b, "text")->valuestring;
        size_t n = strlen(t);
        memcpy(w, t, n);
        w += n;
    }
    *out = joined;
    return 0;
}

/* The name of the tool that tool_use block id called, from the assistant turns before message i. */
static const char *tool_name_of(const cJSON *msgs, int i, const char *id) {
    int k = 0;
    for (const cJSON *m = msgs->child; m && k < i; m = m->next, k++) {
        const cJSON *content = cf_api_get(m, "content");
        for (const cJSON *b = cJSON_IsArray(content) ? content->child : NULL; b; b = b->next) {
            const cJSON *bid = cf_api_get(b, "id"), *name = cf_api_get(b, "name");
            if (cJSON_IsString(bid) && cJSON_IsString(name) && !strcmp(bid->valuestring, id)) return name->valuestring;
        }
    }
    return NULL;
}

typedef struct msg_out {
    cinfer_message *m;
    size_t n;
} msg_out;

/* The next message (o has room for every message a request can make). */
static cinfer_message *push(msg_out *o, const char *role, const char *content) {
    cinfer_message *m = &o->m[o->n++];
    m->role = role;
    m->content = content;
    return m;
}

static int tool_result(cf_api_ctx *c, const cJSON *msgs, int i, const cJSON *b, const char *p, msg_out *o) {
    char q[176];
    const char *id = NULL, *text = "";
    snprintf(q, sizeof q, "%s.tool_use_id", p);
    if (cf_api_get_string(b, "tool_use_id", q, &id, c->err) < 0) return -1;
    if (!id) return cf_api_fail(c->err, 400, q, "%s is required", q);
    const cJSON *content = cf_api_get(b, "content");
    snprintf(q, sizeof q, "%s.content", p);
    if (content && !cJSON_IsNull(content) && block_text(c, content, q, &text)) return -1;
    cinfer_message *m = push(o, "tool", text);
    const char *name = tool_name_of(msgs, i, id);
    if (!(m->tool_call_id = cf_arena_strdup(c->arena, id)) || (name && !(m->name = cf_arena_strdup(c->arena, name))))
        return cf_api_oom(c->err);
    return 0;
}

static int tool_use(cf_api_ctx *c, const cJSON *b, const char *p, cJSON *calls) {
    char q[176];
    const char *id = NULL, *name = NULL;
    snprintf(q, sizeof q, "%s.id", p);
    if (cf_api_get_string(b, "id", q, &id, c->err) < 0) return -1;
    if (!id) return cf_api_fail(c->err, 400, q, "%s is required", q);
    snprintf(q, sizeof q, "%s.name", p);
    if (cf_api_get_string(b, "name", q, &name, c->err) < 0) return -1;
    if (!name) return cf_api_fail(c->err, 400, q, "%s is required", q);
    const cJSON *input = cf_api_get(b, "input");
    snprintf(q, sizeof q, "%s.input", p);
    if (!cJSON_IsObject(input))
        return cf_api_fail(c->err, 400, q, "%s must be an object, not %s", q, input ? cf_api_type_name(input) : "missing");
    char *args = cJSON_PrintUnformatted(input);
    cJSON *o = cJSON_CreateObject(), *f;
    int ok = args && o && cJSON_AddItemToArray(calls, o);
    if (!ok) cJSON_Delete(o);
    ok = ok && cJSON_AddStringToObject(o, "id", id) && cJSON_AddStringToObject(o, "type", "function") &&
         (f = cJSON_AddObjectToObject(o, "function")) && cJSON_AddStringToObject(f, "name", name) &&
         cJSON_AddStringToObject(f, "arguments", args);
    cJSON_free(args);
    return ok ? 0 : cf_api_oom(c->err);
}

static int text_block(cf_api_ctx *c, const cJSON *b, const char *p, cf_buf *text) {
    char q[176];
    const char *t = NULL;
    snprintf(q, sizeof q, "%s.text", p);
    if (cf_api_get_string(b, "text", q, &t, c->err) < 0) return -1;
    if (!t) return cf_api_fail(c->err, 400, q, "%s is required", q);
    return cf_buf_puts(text, t) ? cf_api_oom(c->err) : 0;
}

/* Flushes the text gathered so far as one message of role. */
static int flush_text(cf_api_ctx *c, msg_out *o, const char *role, cf_buf *text, const char *tool_calls, int always) {
    if (!text->len && !tool_calls && !always) return 0;
    const char *content = tool_calls && !text->len ? NULL : cf_arena_strndup(c->arena, text->len ? text->data : "", text->len);
    if (!tool_calls && !content) return cf_api_oom(c->err);
    push(o, role, content)->tool_calls_json = tool_calls;
    cf_buf_consume(text, text->len);
    return 0;
}

static int convert_blocks(cf_api_ctx *c, const cJSON *msgs, int i, const cJSON *content, const char *role, const char *p,
                          msg_out *o, cf_buf *text, cJSON *calls) {
    int assistant = !strcmp(role, "assistant"), j = 0;
    for (const cJSON *b = content->child; b; b = b->next, j++) {
        char bp[96], q[112];
        snprintf(bp, sizeof bp, "%s[%d]", p, j);
        if (!cJSON_IsObject(b)) return cf_api_fail(c->err, 400, bp, "%s must be a content block object, not %s", bp, cf_api_type_name(b));
        const char *type = NULL;
        snprintf(q, sizeof q, "%s.type", bp);
        if (cf_api_get_string(b, "type", q, &type, c->err) < 0) return -1;
        if (!type) return cf_api_fail(c->err, 400, q, "%s is required", q);
        if (!strcmp(type, "text")) {
            if (text_block(c, b, bp, text)) return -1;
        } else if (!strcmp(type, "tool_result") && !assistant) {
            if (flush_text(c, o, role, text, NULL, 0) || tool_result(c, msgs, i, b, bp, o)) return -1;
        } else if (!strcmp(type, "tool_use") && assistant) {
            if (tool_use(c, b, bp, calls)) return -1;
        } else if (!(assistant && (!strcmp(type, "thinking") || !strcmp(type, "redacted_thinking")))) {
            return cf_api_fail(c->err, 400, q, "%s \"%.40s\" is not supported in a%s %s message: cinfer takes text, %s", q, type,
                               assistant ? "n" : "", role, assistant ? "tool_use and thinking blocks" : "tool_result blocks");
        }
    }
    return 0;
}

static int convert_message(cf_api_ctx *c, const cJSON *msgs, int i, const cJSON *msg, msg_out *o) {
    char p[48], q[80];
    snprintf(p, sizeof p, "messages[%d]", i);
    if (!cJSON_IsObject(msg)) return cf_api_fail(c->err, 400, p, "%s must be an object, not %s", p, cf_api_type_name(msg));
    const char *role = NULL;
    snprintf(q, sizeof q, "%s.role", p);
    if (cf_api_get_string(msg, "role", q, &role, c->err) < 0) return -1;
    if (!role || (strcmp(role, "user") && strcmp(role, "assistant")))
        return cf_api_fail(c->err, 400, q, "%s must be \"user\" or \"assistant\"", q);
    role = strcmp(role, "user") ? "assistant" : "user";
    const cJSON *content = cf_api_get(msg, "content");
    snprintf(q, sizeof q, "%s.content", p);
    if (cJSON_IsString(content)) {
        const char *t = cf_arena_strdup(c->arena, content->valuestring);
        if (!t) return cf_api_oom(c->err);
        push(o, role, t);
        return 0;
    }
    if (!cJSON_IsArray(content))
        return cf_api_fail(c->err, 400, q, "%s must be a string or an array of content blocks, not %s", q,
                           content ? cf_api_type_name(content) : "missing");
    cf_buf text = {0};
    cJSON *calls = cJSON_CreateArray();
    int rc = calls ? convert_blocks(c, msgs, i, content, role, q, o, &text, calls) : cf_api_oom(c->err);
    const char *calls_json = NULL;
    if (!rc && cJSON_GetArraySize(calls) && !(calls_json = cf_arena_json(c->arena, calls))) rc = cf_api_oom(c->err);
    /* a user turn of only tool results needs no user message after them */
    int only_results = content->child && o->n && !text.len && !strcmp(role, "user") && o->m[o->n - 1].tool_call_id;
    if (!rc) rc = flush_text(c, o, role, &text, calls_json, !only_results);
    cJSON_Delete(calls);
    cf_buf_free(&text);
    return rc;
}

static int convert_tools(cf_api_ctx *c, const cJSON *tools, cJSON *out) {
    int max = c->lim && c->lim->max_tools > 0 ? c->lim->max_tools : 128;
    if (!cJSON_IsArray(tools)) return cf_api_fail(c->err, 400, "tools", "tools must be an array, not %s", cf_api_type_name(tools));
    if (cJSON_GetArraySize(tools) > max)
        return cf_api_fail(c->err, 400, "tools", "tools has %d entries; this server takes at most %d", cJSON_GetArraySize(tools), max);
    int j = 0;
    for (const cJSON *t = tools->child; t; t = t->next, j++) {
        char p[32], q[64];
        snprintf(p, sizeof p, "tools[%d]", j);
        if (!cJSON_IsObject(t)) return cf_api_fail(c->err, 400, p, "%s must be an object, not %s", p, cf_api_type_name(t));
        const char *type = NULL, *name = NULL, *desc = NULL;
        snprintf(q, sizeof q, "%s.type", p);
        if (cf_api_get_string(t, "type", q, &type, c->err) < 0) return -1;
        if (type && strcmp(type, "custom"))
            return cf_api_fail(c->err, 400, q, "%s \"%.40s\" is a server tool, which cinfer does not run; define a custom tool", q, type);
        snprintf(q, sizeof q, "%s.name", p);
        if (cf_api_get_string(t, "name", q, &name, c->err) < 0) return -1;
        if (!name || !name[0]) return cf_api_fail(c->err, 400, q, "%s is required", q);
        snprintf(q, sizeof q, "%s.description", p);
        if (cf_api_get_string(t, "description", q, &desc, c->err) < 0) return -1;
        const cJSON *schema = cf_api_get(t, "input_schema");
        snprintf(q, sizeof q, "%s.input_schema", p);
        if (!cJSON_IsObject(schema))
            return cf_api_fail(c->err, 400, q, "%s must be a JSON Schema object, not %s", q, schema ? cf_api_type_name(schema) : "missing");
        cJSON *def = cJSON_CreateObject(), *fn, *params = NULL;
        if (!def || !cJSON_AddItemToArray(out, def)) {
            cJSON_Delete(def);
            return cf_api_oom(c->err);
        }
        int ok = cJSON_AddStringToObject(def, "type", "function") && (fn = cJSON_AddObjectToObject(def, "function")) &&
                 cJSON_AddStringToObject(fn, "name", name) && (!desc || cJSON_AddStringToObject(fn, "description", desc)) &&
                 (params = cJSON_Duplicate(schema, 1)) && cJSON_AddItemToObject(fn, "parameters", params);
        if (!ok) {
            cJSON_Delete(params);
            return cf_api_oom(c->err);
        }
    }
    return 0;
}

/* {"type": "auto" | "any" | "tool" | "none", "name"}: none hides the tools; the others offer them all. */
static int parse_tool_choice(cf_api_ctx *c, const cJSON *root, const cJSON *tools, int *none) {
    const cJSON *tc = cf_api_get(root, "tool_choice");
    *none = 0;
    if (!tc || cJSON_IsNull(tc)) return 0;
    const char *type = NULL, *name = NULL;
    if (!cJSON_IsObject(tc))
        return cf_api_fail(c->err, 400, "tool_choice", "tool_choice must be an object, not %s", cf_api_type_name(tc));
    if (cf_api_get_string(tc, "type", "tool_choice.type", &type, c->err) < 0) return -1;
    if (!type || (strcmp(type, "auto") && strcmp(type, "any") && strcmp(type, "tool") && strcmp(type, "none")))
        return cf_api_fail(c->err, 400, "tool_choice.type", "tool_choice.type must be auto, any, tool or none");
    *none = !strcmp(type, "none");
    if (strcmp(type, "tool")) return 0;
    if (cf_api_get_string(tc, "name", "tool_choice.name", &name, c->err) < 0) return -1;
    for (const cJSON *t = tools ? tools->child : NULL; name && t; t = t->next) {
        const cJSON *n = cf_api_get(t, "name");
        if (cJSON_IsString(n) && !strcmp(n->valuestring, name)) return 0;
    }
    return cf_api_fail(c->err, 400, "tool_choice.name", "tool_choice.name must name one of the tools");
}

static int parse_thinking(cf_api_ctx *c, const cJSON *root, cinfer_request *base) {
    const cJSON *th = cf_api_get(root, "thinking");
    if (!th || cJSON_IsNull(th)) return 0;
    const char *type = NULL;
    if (!cJSON_IsObject(th)) return cf_api_fail(c->err, 400, "thinking", "thinking must be an object, not %s", cf_api_type_name(th));
    if (cf_api_get_string(th, "type", "thinking.type", &type, c->err) < 0) return -1;
    if (!type || (strcmp(type, "enabled") && strcmp(type, "disabled")))
        return cf_api_fail(c->err, 400, "thinking.type", "thinking.type must be \"enabled\" or \"disabled\"");
    base->template_kwargs_json = strcmp(type, "enabled") ? "{\"enable_thinking\":false}" : "{\"enable_thinking\":true}";
    return 0;
}

static int parse_sampling(cf_api_ctx *c, const cJSON *root, cinfer_request *base) {
    double v;
    int64_t k;
    int got;
    if ((got = cf_api_get_number(root, "temperature", NULL, 0, 1, &v, c->err)) < 0) return -1;
    if (got) base->temperature = (float)v;
    if ((got = cf_api_get_number(root, "top_p", NULL, 0, 1, &v, c->err)) < 0) return -1;
    if (got && v == 0) base->temperature = 0;
    else if (got) base->top_p = (float)v;
    if ((got = cf_api_get_int(root, "top_k", NULL, 0, INT32_MAX, &k, c->err)) < 0) return -1;
    if (got) base->top_k = (int32_t)k;
    return cf_api_parse_stop(c, root, "stop_sequences", 0, base);
}

int cf_api_parse_messages(cf_api_ctx *c, const cJSON *root, cf_api_request *r, cinfer_request *base) {
    if (cf_api_parse_max_tokens(c, root, "max_tokens", 1, base) || parse_sampling(c, root, base) || parse_thinking(c, root, base) ||
        cf_api_parse_speculative(c, root, base))
        return -1;
    const cJSON *msgs = cf_api_get(root, "messages");
    if (!msgs || cJSON_IsNull(msgs)) return cf_api_fail(c->err, 400, "messages", "messages is required");
    if (!cJSON_IsArray(msgs)) return cf_api_fail(c->err, 400, "messages", "messages must be an array, not %s", cf_api_type_name(msgs));
    if (!msgs->child) return cf_api_fail(c->err, 400, "messages", "messages is empty; send at least one message");
    size_t cap = 1;
    for (const cJSON *m = msgs->child; m; m = m->next) cap += 1 + (size_t)cJSON_GetArraySize(cf_api_get(m, "content"));
    msg_out o = {.m = cf_arena_alloc(c->arena, cap * sizeof *o.m)};
    if (!o.m) return cf_api_oom(c->err);

    const cJSON *system = cf_api_get(root, "system");
    if (system && !cJSON_IsNull(system)) {
        const char *text;
        if (block_text(c, system, "system", &text)) return -1;
        push(&o, "system", text);
    }
    int i = 0;
    for (const cJSON *m = msgs->child; m; m = m->next, i++)
        if (convert_message(c, msgs, i, m, &o)) return -1;
    base->messages = o.m;
    base->n_messages = o.n;

    const cJSON *tools = cf_api_get(root, "tools");
    if (tools && cJSON_IsNull(tools)) tools = NULL;
    cJSON *defs = cJSON_CreateArray();
    if (!defs) return cf_api_oom(c->err);
    int none, rc = tools ? convert_tools(c, tools, defs) : 0;
    if (!rc) rc = parse_tool_choice(c, root, tools, &none);
    if (!rc && cJSON_GetArraySize(defs) && !none) {
        if (!(base->tools_json = cf_arena_json(c->arena, defs))) rc = cf_api_oom(c->err);
        r->tools_offered = 1;
    }
    if (!rc) c->st->tool_choice_none = none;
    cJSON_Delete(defs);
    return rc;
}
