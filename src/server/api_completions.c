/* api_completions.c: the fields of POST /v1/completions: the prompt in its four shapes (a string, strings,
 * token ids, lists of token ids), echo, logprobs as a count of alternatives, suffix and best_of refused. */
#include "server/api_internal.h"

#include <stdio.h>
#include <string.h>

static int is_token_list(const cJSON *it) {
    return cJSON_IsArray(it) && it->child && cJSON_IsNumber(it->child);
}

static int token_list(cf_api_ctx *c, const cJSON *arr, const char *param, int32_t **out, size_t *n) {
    int len = cJSON_GetArraySize(arr);
    if (!len) return cf_api_fail(c->err, 400, param, "%s is an empty list of token ids", param);
    int32_t *ids = cf_arena_alloc(c->arena, (size_t)len * sizeof *ids);
    if (!ids) return cf_api_oom(c->err);
    int64_t hi = c->vocab > 0 ? c->vocab - 1 : INT32_MAX, v;
    int j = 0;
    for (const cJSON *t = arr->child; t; t = t->next, j++) {
        char p[96];
        snprintf(p, sizeof p, "%s[%d]", param, j);
        if (cf_api_item_int(t, p, 0, hi, &v, c->err) < 0) return -1;
        ids[j] = (int32_t)v;
    }
    *out = ids;
    *n = (size_t)len;
    return 0;
}

/* The text a token prompt stands for, for echo. */
static const char *ids_text(cf_api_ctx *c, const int32_t *ids, size_t n) {
    char *text = NULL;
    size_t len = 0;
    if (!c->m || cinfer_detokenize(c->m, ids, n, &text, &len, NULL) != CINFER_OK) return "";
    char *copy = cf_arena_strndup(c->arena, text, len);
    cinfer_free(text);
    return copy;
}

static int parse_prompts(cf_api_ctx *c, const cJSON *prompt, const char ***texts, int32_t ***ids, size_t **n_ids,
                         int *n_prompts) {
    if (!prompt || cJSON_IsNull(prompt)) return cf_api_fail(c->err, 400, "prompt", "prompt is required");
    if (!cJSON_IsString(prompt) && !cJSON_IsArray(prompt))
        return cf_api_fail(c->err, 400, "prompt", "prompt must be a string, a list of strings, a list of token ids or a list of "
                                                  "lists of token ids, not %s", cf_api_type_name(prompt));
    int single = cJSON_IsString(prompt) || is_token_list(prompt);
    int n = single ? 1 : cJSON_GetArraySize(prompt);
    if (!n) return cf_api_fail(c->err, 400, "prompt", "prompt is an empty list");
    *texts = cf_arena_alloc(c->arena, (size_t)n * sizeof **texts);
    *ids = cf_arena_alloc(c->arena, (size_t)n * sizeof **ids);
    *n_ids = cf_arena_alloc(c->arena, (size_t)n * sizeof **n_ids);
    c->st->echo = cf_arena_alloc(c->arena, (size_t)n * sizeof *c->st->echo);
    if (!*texts || !*ids || !*n_ids || !c->st->echo) return cf_api_oom(c->err);
    const cJSON *p = single ? prompt : prompt->child;
    for (int i = 0; i < n; i++, p = p->next) {
        char param[48];
        snprintf(param, sizeof param, single ? "prompt" : "prompt[%d]", i);
        if (cJSON_IsString(p)) {
            if (!p->valuestring[0]) return cf_api_fail(c->err, 400, param, "%s is empty", param);
            if (!((*texts)[i] = cf_arena_strdup(c->arena, p->valuestring))) return cf_api_oom(c->err);
            c->st->echo[i] = (*texts)[i];
        } else if (cJSON_IsArray(p) && (single || !p->child || cJSON_IsNumber(p->child))) {
            if (token_list(c, p, param, &(*ids)[i], &(*n_ids)[i])) return -1;
            if (!(c->st->echo[i] = ids_text(c, (*ids)[i], (*n_ids)[i]))) return cf_api_oom(c->err);
        } else {
            return cf_api_fail(c->err, 400, param, "%s must be %s, not %s", param,
                               cJSON_IsString(prompt->child) ? "a string (the prompt is a list of strings)"
                                                             : "a list of token ids (the prompt is a list of such lists)",
                               cf_api_type_name(p));
        }
        if (!single && (cJSON_IsString(p) != cJSON_IsString(prompt->child)))
            return cf_api_fail(c->err, 400, param, "%s: a prompt list holds either strings or lists of token ids, not both", param);
    }
    *n_prompts = n;
    return 0;
}

int cf_api_parse_completions(cf_api_ctx *c, const cJSON *root, cf_api_request *r, cinfer_request *base,
                             const char ***texts, int32_t ***ids, size_t **n_ids, int *n_prompts) {
    if (parse_prompts(c, cf_api_get(root, "prompt"), texts, ids, n_ids, n_prompts)) return -1;
    const char *suffix = NULL;
    if (cf_api_get_string(root, "suffix", NULL, &suffix, c->err) < 0) return -1;
    if (suffix && suffix[0])
        return cf_api_fail(c->err, 400, "suffix", "suffix (fill-in-the-middle) is not supported; put the text in the prompt");
    int64_t best_of;
    int got = cf_api_get_int(root, "best_of", NULL, 1, INT32_MAX, &best_of, c->err);
    if (got < 0) return -1;
    if (got && best_of > 1)
        return cf_api_fail(c->err, 400, "best_of", "best_of is not supported; ask for n choices and pick among them");
    if (cf_api_get_bool(root, "echo", NULL, &r->echo, c->err) < 0) return -1;
    int64_t lp;
    if ((got = cf_api_get_int(root, "logprobs", NULL, 0, CINFER_MAX_TOP_LOGPROBS, &lp, c->err)) < 0) return -1;
    if (got) {
        if (r->echo)
            return cf_api_fail(c->err, 400, "logprobs", "logprobs with echo asks for the prompt's log-probabilities, which cinfer "
                                                        "does not compute; drop echo or logprobs");
        base->logprobs = 1;
        base->top_logprobs = (int32_t)lp;
    }
    return cf_api_parse_max_tokens(c, root, "max_tokens", 0, base);
}
