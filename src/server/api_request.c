/* api_request.c: cf_api_parse's entry (UTF-8, nesting depth and JSON checks), the sampling fields the
 * endpoints share, and the expansion of one parsed request into its choices' cinfer_requests. */
#include "server/api_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The deepest nesting of arrays and objects, counted outside strings (stops counting past limit), and
 * whether a string holds the escape \u0000, which cJSON would silently cut the string at. */
static int json_depth(const char *s, size_t n, int limit, int *nul) {
    int depth = 0, deepest = 0, in_string = 0;
    *nul = 0;
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        if (in_string) {
            if (ch == '\\') {
                *nul |= i + 5 < n && !memcmp(s + i + 1, "u0000", 5);
                i++;
            } else if (ch == '"') {
                in_string = 0;
            }
        } else if (ch == '"') {
            in_string = 1;
        } else if (ch == '[' || ch == '{') {
            if (++depth > deepest && (deepest = depth) > limit) return deepest;
        } else if (ch == ']' || ch == '}') {
            depth--;
        }
    }
    return deepest;
}

static int32_t cap_of(const cf_api_ctx *c) {
    if (c->lim && c->lim->max_tokens_cap > 0) return c->lim->max_tokens_cap;
    return c->context > 0 ? c->context : INT32_MAX;
}

int cf_api_parse_max_tokens(cf_api_ctx *c, const cJSON *root, const char *key, int required, cinfer_request *base) {
    int64_t v;
    int32_t cap = cap_of(c);
    int got = cf_api_get_int(root, key, NULL, 1, INT64_MAX, &v, c->err);
    if (got < 0) return -1;
    if (!got) {
        if (required) return cf_api_fail(c->err, 400, key, "%s is required: the most tokens to generate", key);
        base->max_tokens = cap;
        base->fit_context = 1;
        return 0;
    }
    if (v > cap) return cf_api_fail(c->err, 400, key, "%s is %lld; this server generates at most %d tokens per reply", key,
                                    (long long)v, (int)cap);
    base->max_tokens = (int32_t)v;
    return 0;
}

int cf_api_parse_stop(cf_api_ctx *c, const cJSON *root, const char *key, int string_allowed, cinfer_request *base) {
    const cJSON *it = cf_api_get(root, key);
    if (!it || cJSON_IsNull(it)) return 0;
    if (!(cJSON_IsArray(it) || (string_allowed && cJSON_IsString(it))))
        return cf_api_fail(c->err, 400, key, "%s must be %s, not %s", key,
                           string_allowed ? "a string or an array of strings" : "an array of strings", cf_api_type_name(it));
    int n = cJSON_IsString(it) ? 1 : cJSON_GetArraySize(it);
    if (n > CF_API_MAX_STOP)
        return cf_api_fail(c->err, 400, key, "%s has %d strings; cinfer takes at most %d (OpenAI takes 4)", key, n, CF_API_MAX_STOP);
    char **stop = cf_arena_alloc(c->arena, (size_t)(n ? n : 1) * sizeof *stop);
    if (!stop) return cf_api_oom(c->err);
    for (int i = 0; i < n; i++) {
        const cJSON *s = cJSON_IsString(it) ? it : cJSON_GetArrayItem(it, i);
        char param[64];
        snprintf(param, sizeof param, cJSON_IsString(it) ? "%s" : "%s[%d]", key, i);
        if (!cJSON_IsString(s)) return cf_api_fail(c->err, 400, param, "%s must be a string, not %s", param, cf_api_type_name(s));
        if (!s->valuestring[0]) return cf_api_fail(c->err, 400, param, "%s is empty; a stop string needs at least one character", param);
        if (!(stop[i] = cf_arena_strdup(c->arena, s->valuestring))) return cf_api_oom(c->err);
    }
    c->st->stop = stop;
    c->st->n_stop = (size_t)n;
    base->stop = (const char *const *)stop;
    base->n_stop = (size_t)n;
    return 0;
}

/* OpenAI seeds are any int64; cinfer reads a negative seed as "draw one", so a negative seed is mapped
 * onto [0, 2^63) by flipping its sign bit: still one fixed seed per value. */
int cf_api_parse_seed(cf_api_ctx *c, const cJSON *root, cinfer_request *base) {
    int64_t v;
    int got = cf_api_get_int(root, "seed", NULL, INT64_MIN, INT64_MAX, &v, c->err);
    if (got < 0) return -1;
    if (got) base->seed = (int64_t)((uint64_t)v & (uint64_t)INT64_MAX);
    return 0;
}

typedef struct bias_entry {
    cinfer_logit_bias b;
    int order;
} bias_entry;

static int by_token_then_order(const void *x, const void *y) {
    const bias_entry *a = x, *b = y;
    if (a->b.token != b->b.token) return a->b.token < b->b.token ? -1 : 1;
    return a->order - b->order;
}

/* {"token id": bias}: biases clamped to [-100, 100] as OpenAI does; a token named twice keeps its last bias. */
static int parse_logit_bias(cf_api_ctx *c, const cJSON *root, cinfer_request *base) {
    const cJSON *lb = cf_api_get(root, "logit_bias");
    if (!lb || cJSON_IsNull(lb)) return 0;
    if (!cJSON_IsObject(lb))
        return cf_api_fail(c->err, 400, "logit_bias", "logit_bias must be an object mapping token ids (as strings) to biases, not %s",
                           cf_api_type_name(lb));
    int n = cJSON_GetArraySize(lb);
    bias_entry *e = cf_arena_alloc(c->arena, (size_t)(n ? n : 1) * sizeof *e);
    cinfer_logit_bias *b = cf_arena_alloc(c->arena, (size_t)(n ? n : 1) * sizeof *b);
    if (!e || !b) return cf_api_oom(c->err);
    int i = 0;
    for (const cJSON *it = lb->child; it; it = it->next, i++) {
        char param[96];
        snprintf(param, sizeof param, "logit_bias.%.60s", it->string);
        size_t len = strlen(it->string);
        long long tok = len && len <= 10 && strspn(it->string, "0123456789") == len ? strtoll(it->string, NULL, 10) : -1;
        if (tok < 0 || (c->vocab > 0 && tok >= c->vocab) || tok > INT32_MAX)
            return cf_api_fail(c->err, 400, param, "logit_bias keys must be token ids in [0, %d); \"%.60s\" is not one",
                               c->vocab > 0 ? c->vocab : INT32_MAX, it->string);
        if (!cJSON_IsNumber(it) || !isfinite(it->valuedouble))
            return cf_api_fail(c->err, 400, param, "%s must be a number from -100 to 100, not %s", param, cf_api_type_name(it));
        double v = it->valuedouble;
        e[i] = (bias_entry){{(int32_t)tok, (float)(v < -100 ? -100 : v > 100 ? 100 : v)}, i};
    }
    qsort(e, (size_t)n, sizeof *e, by_token_then_order);
    size_t kept = 0;
    for (int k = 0; k < n; k++)
        if (k + 1 == n || e[k + 1].b.token != e[k].b.token) b[kept++] = e[k].b;
    base->logit_bias = b;
    base->n_logit_bias = kept;
    return 0;
}

/* n_max as cinfer takes it: 0 = adaptive, above 16 capped at 16 (llama-server's default n_max is 16). */
static int spec_n_max(cf_api_ctx *c, const cJSON *obj, const char *key, const char *param, cinfer_request *base) {
    int64_t v = 0;
    int got = cf_api_get_int(obj, key, param, 0, INT32_MAX, &v, c->err);
    if (got > 0) base->draft_max = (int32_t)(v > 16 ? 16 : v);
    return got < 0 ? -1 : 0;
}

int cf_api_parse_speculative(cf_api_ctx *c, const cJSON *root, cinfer_request *base) {
    int64_t v;
    /* n_min: accepted for llama-server's clients; cinfer adapts the draft length itself */
    if (spec_n_max(c, root, "speculative.n_max", NULL, base) || cf_api_get_int(root, "speculative.n_min", NULL, 0, INT32_MAX, &v, c->err) < 0)
        return -1;
    const cJSON *sp = cf_api_get(root, "speculative");
    if (!sp || cJSON_IsNull(sp)) return 0;
    if (!cJSON_IsObject(sp))
        return cf_api_fail(c->err, 400, "speculative", "speculative must be an object such as {\"source\": \"ngram\"}, not %s",
                           cf_api_type_name(sp));
    const char *src = NULL;
    if (cf_api_get_string(sp, "source", "speculative.source", &src, c->err) < 0) return -1;
    if (src) {
        static const char *const names[] = {"ngram", "draft", "none"};
        base->draft = NULL;
        for (int i = 0; i < 3; i++)
            if (!strcmp(src, names[i])) base->draft = names[i];
        if (!base->draft)
            return cf_api_fail(c->err, 400, "speculative.source",
                               "speculative.source must be \"ngram\", \"draft\" or \"none\", not \"%.40s\"", src);
    }
    if (spec_n_max(c, sp, "n_max", "speculative.n_max", base) || cf_api_get_int(sp, "n_min", "speculative.n_min", 0, INT32_MAX, &v, c->err) < 0)
        return -1;
    return 0;
}

int cf_api_parse_openai_sampling(cf_api_ctx *c, const cJSON *root, cinfer_request *base) {
    cf_api_error *e = c->err;
    double v;
    int64_t k;
    int got;
    if ((got = cf_api_get_number(root, "temperature", NULL, 0, 2, &v, e)) < 0) return -1;
    if (got) base->temperature = (float)v;
    if ((got = cf_api_get_number(root, "top_p", NULL, 0, 1, &v, e)) < 0) return -1;
    if (got && v == 0) base->temperature = 0; /* the smallest nucleus is the most likely token */
    else if (got) base->top_p = (float)v;
    if ((got = cf_api_get_int(root, "top_k", NULL, -1, INT32_MAX, &k, e)) < 0) return -1;
    if (got) base->top_k = k < 0 ? 0 : (int32_t)k; /* -1 is vLLM's "off" */
    if ((got = cf_api_get_number(root, "min_p", NULL, 0, 1, &v, e)) < 0) return -1;
    if (got) base->min_p = (float)v;
    if ((got = cf_api_get_number(root, "presence_penalty", NULL, -2, 2, &v, e)) < 0) return -1;
    if (got) base->presence_penalty = (float)v;
    if ((got = cf_api_get_number(root, "frequency_penalty", NULL, -2, 2, &v, e)) < 0) return -1;
    if (got) base->frequency_penalty = (float)v;
    if ((got = cf_api_get_number(root, "repetition_penalty", NULL, 0, 100, &v, e)) < 0) return -1;
    if (got && v == 0)
        return cf_api_fail(e, 400, "repetition_penalty", "repetition_penalty must be above 0 (1 is off); it is 0");
    if (got) base->repetition_penalty = (float)v;
    int b;
    if ((got = cf_api_get_bool(root, "ignore_eos", NULL, &b, e)) < 0) return -1; /* vLLM's and llama-server's */
    if (got) base->ignore_eos = b;
    if (parse_logit_bias(c, root, base) || cf_api_parse_seed(c, root, base) || cf_api_parse_speculative(c, root, base)) return -1;
    return cf_api_parse_stop(c, root, "stop", 1, base);
}

/* reqs[p * n + i]: prompt p's choice i, with seed + i when a seed was given. */
static int expand(cf_api_ctx *c, cf_api_request *r, const cinfer_request *base, int n, int n_prompts,
                  const char **texts, int32_t **ids, const size_t *n_ids) {
    r->n_reqs = n * n_prompts;
    r->reqs = cf_arena_alloc(c->arena, (size_t)r->n_reqs * sizeof *r->reqs);
    if (!r->reqs) return cf_api_oom(c->err);
    for (int p = 0; p < n_prompts; p++)
        for (int i = 0; i < n; i++) {
            cinfer_request *q = &r->reqs[p * n + i];
            *q = *base;
            if (base->seed >= 0) q->seed = (int64_t)(((uint64_t)base->seed + (uint64_t)i) & (uint64_t)INT64_MAX);
            if (texts && texts[p]) q->prompt_text = texts[p];
            else if (ids) q->prompt_ids = ids[p], q->n_prompt_ids = n_ids[p];
        }
    c->st->n_per_prompt = n;
    return 0;
}

static int parse_n(cf_api_ctx *c, const cJSON *root, int n_prompts, int *n) {
    int64_t v = 1;
    int max = c->lim && c->lim->max_choices > 0 ? c->lim->max_choices : 128;
    if (cf_api_get_int(root, "n", NULL, 1, INT32_MAX, &v, c->err) < 0) return -1;
    if (v * n_prompts > max) {
        if (n_prompts > 1)
            return cf_api_fail(c->err, 400, "n", "n (%lld) times the %d prompts is %lld choices; this server makes at most %d per request",
                               (long long)v, n_prompts, (long long)v * n_prompts, max);
        return cf_api_fail(c->err, 400, "n", "n is %lld; this server makes at most %d choices per request", (long long)v, max);
    }
    *n = (int)v;
    return 0;
}

static int parse_body(cf_api_kind kind, cf_api_ctx *c, const cJSON *root, cf_api_request *r) {
    cinfer_request base = cinfer_request_default();
    const char *model = NULL;
    if (cf_api_get_string(root, "model", NULL, &model, c->err) < 0) return -1;
    if (model && !(r->model = cf_arena_strdup(c->arena, model))) return cf_api_oom(c->err);
    if (cf_api_get_bool(root, "stream", NULL, &r->stream, c->err) < 0) return -1;

    if (kind == CF_API_MESSAGES) {
        if (cf_api_parse_messages(c, root, r, &base)) return -1;
        return expand(c, r, &base, 1, 1, NULL, NULL, NULL);
    }
    const cJSON *so = cf_api_get(root, "stream_options");
    if (so && !cJSON_IsNull(so)) {
        if (!cJSON_IsObject(so))
            return cf_api_fail(c->err, 400, "stream_options", "stream_options must be an object, not %s", cf_api_type_name(so));
        if (cf_api_get_bool(so, "include_usage", "stream_options.include_usage", &r->include_usage, c->err) < 0) return -1;
    }
    if (cf_api_parse_openai_sampling(c, root, &base)) return -1;
    int n = 1;
    if (kind == CF_API_CHAT) {
        if (cf_api_parse_chat(c, root, r, &base) || parse_n(c, root, 1, &n)) return -1;
        return expand(c, r, &base, n, 1, NULL, NULL, NULL);
    }
    const char **texts;
    int32_t **ids;
    size_t *n_ids;
    int n_prompts;
    if (cf_api_parse_completions(c, root, r, &base, &texts, &ids, &n_ids, &n_prompts) || parse_n(c, root, n_prompts, &n))
        return -1;
    return expand(c, r, &base, n, n_prompts, texts, ids, n_ids);
}

int cf_api_parse(cf_api_kind kind, const char *body, size_t len, const cf_api_limits *lim, const cinfer_model *m,
                 cf_api_request **out, cf_api_error *err) {
    memset(err, 0, sizeof *err);
    *out = NULL;
    if (!body || !len) return cf_api_fail(err, 400, NULL, "the request body is empty; send a JSON object");
    if (!cf_api_valid_utf8(body, len)) return cf_api_fail(err, 400, NULL, "the request body is not valid UTF-8");
    if (memchr(body, 0, len)) return cf_api_fail(err, 400, NULL, "the request body holds a NUL byte; JSON text has none");
    int nul;
    int depth = json_depth(body, len, CF_API_MAX_DEPTH, &nul);
    if (depth > CF_API_MAX_DEPTH)
        return cf_api_fail(err, 400, NULL, "the request body nests arrays and objects more than %d levels deep", CF_API_MAX_DEPTH);
    if (nul) return cf_api_fail(err, 400, NULL, "a string in the request body holds \\u0000 (NUL), which cinfer does not take");
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(body, len, &end, 0);
    if (!root) {
        size_t at = end && end >= body && end <= body + len ? (size_t)(end - body) : 0;
        return cf_api_fail(err, 400, NULL, "the request body is not valid JSON (at byte %zu)", at);
    }
    while (end && end < body + len && (*end == ' ' || *end == '\t' || *end == '\n' || *end == '\r')) end++;
    if (end != body + len) {
        cJSON_Delete(root);
        return cf_api_fail(err, 400, NULL, "the request body is not valid JSON: text follows the value at byte %zu",
                           (size_t)(end - body));
    }
    if (!cJSON_IsObject(root)) {
        cf_api_fail(err, 400, NULL, "the request body must be a JSON object, not %s", cf_api_type_name(root));
        cJSON_Delete(root);
        return -1;
    }
    cf_api_request *r = calloc(1, sizeof *r);
    cf_api_storage *st = calloc(1, sizeof *st);
    if (!r || !st) {
        free(r);
        free(st);
        cJSON_Delete(root);
        return cf_api_oom(err);
    }
    r->kind = kind;
    r->storage = st;
    cf_api_ctx c = {.err = err, .lim = lim, .m = m, .arena = &st->arena, .st = st};
    if (m) {
        cinfer_model_info info = cinfer_model_get_info(m);
        c.vocab = info.vocab;
        c.context = info.context;
    }
    int rc = parse_body(kind, &c, root, r);
    cJSON_Delete(root);
    if (rc) {
        cf_api_request_free(r);
        return -1;
    }
    *out = r;
    return 0;
}

void cf_api_request_free(cf_api_request *r) {
    if (!r) return;
    cf_api_storage *st = r->storage;
    if (st) cf_arena_free(&st->arena);
    free(st);
    free(r);
}
