/* request.c: the engine's copy of a request. Every field is checked before anything is allocated, each
 * kind of mistake with its own status code; then the prompt is resolved to token ids (text tokenized,
 * chat messages rendered with the model's template) and every buffer is copied. */
#include "engine/engine.h"
#include "engine/chat.h"
#include "base/status.h"
#include "text/template.h"
#include "text/tokenizer.h"

#include <cjson/cJSON.h>
#include <utf8proc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

cinfer_request cinfer_request_default(void) {
    cf_sampling_params sp = cf_sampling_default_params();
    return (cinfer_request){
        .struct_size = sizeof(cinfer_request),
        .add_generation_prompt = 1,
        .max_tokens = 512,
        .temperature = sp.temperature,
        .top_k = sp.top_k,
        .top_p = sp.top_p,
        .min_p = sp.min_p,
        .repetition_penalty = sp.repetition_penalty,
        .repetition_window = sp.repetition_window,
        .presence_penalty = sp.presence_penalty,
        .frequency_penalty = sp.frequency_penalty,
        .seed = -1,
    };
}

static cinfer_status check_prompt_shape(const cinfer_request *r, cinfer_error *err) {
    int kinds = (r->prompt_ids || r->n_prompt_ids) + (r->prompt_text != NULL) + (r->messages || r->n_messages);
    if (kinds > 1)
        return cf_fail(err, CINFER_E_INVALID_ARGUMENT,
                       "the request sets %d kinds of prompt; set exactly one of prompt_ids, prompt_text, messages", kinds);
    if (kinds == 0)
        return cf_fail(err, CINFER_E_EMPTY_PROMPT, "the request has no prompt: set prompt_ids, prompt_text or messages");
    if (r->n_prompt_ids && !r->prompt_ids)
        return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "n_prompt_ids is %zu but prompt_ids is NULL", r->n_prompt_ids);
    if (r->prompt_ids && !r->n_prompt_ids) return cf_fail(err, CINFER_E_EMPTY_PROMPT, "the prompt has no token ids");
    if (r->prompt_text && !r->prompt_text[0]) return cf_fail(err, CINFER_E_EMPTY_PROMPT, "the prompt text is empty");
    if (r->n_messages && !r->messages)
        return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "n_messages is %zu but messages is NULL", r->n_messages);
    if (r->messages && !r->n_messages) return cf_fail(err, CINFER_E_EMPTY_PROMPT, "the request has no chat messages");
    return CINFER_OK;
}

static int valid_utf8(const char *s) {
    const utf8proc_uint8_t *p = (const utf8proc_uint8_t *)s;
    utf8proc_ssize_t n = (utf8proc_ssize_t)strlen(s);
    while (n > 0) {
        utf8proc_int32_t c;
        utf8proc_ssize_t k = utf8proc_iterate(p, n, &c);
        if (k <= 0) return 0;
        p += k;
        n -= k;
    }
    return 1;
}

static cf_sampling_params sampling_of(const cinfer_request *r) {
    cf_sampling_params sp = cf_sampling_default_params();
    sp.temperature = r->temperature;
    sp.top_k = r->top_k;
    sp.top_p = r->top_p;
    sp.min_p = r->min_p;
    sp.repetition_penalty = r->repetition_penalty;
    sp.repetition_window = r->repetition_window;
    sp.presence_penalty = r->presence_penalty;
    sp.frequency_penalty = r->frequency_penalty;
    sp.logprobs = r->logprobs || r->top_logprobs > 0;
    sp.top_logprobs = r->top_logprobs;
    return sp;
}

/* Everything that can be checked without the prompt's ids. */
static cinfer_status check_fields(const cinfer_model *m, const cinfer_request *r, cinfer_error *err) {
    const int V = m->m->hp.vocab;
    if (r->struct_size != sizeof *r)
        return cf_fail(err, CINFER_E_INVALID_ARGUMENT,
                       "cinfer_request.struct_size is %zu, expected %zu: start from cinfer_request_default()",
                       r->struct_size, sizeof *r);
    CF_TRY(check_prompt_shape(r, err));
    CF_TRY(cf_chat_check(r, err));
    if (r->max_tokens <= 0)
        return cf_fail(err, CINFER_E_MAX_TOKENS, "max_tokens is %d; it must be a positive number of tokens", (int)r->max_tokens);
    cf_sampling_params sp = sampling_of(r);
    CF_TRY(cf_sampling_validate(&sp, V, err));
    if (r->n_logit_bias && !r->logit_bias)
        return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "n_logit_bias is %zu but logit_bias is NULL", r->n_logit_bias);
    for (size_t i = 0; i < r->n_logit_bias; i++) {
        if (r->logit_bias[i].token < 0 || r->logit_bias[i].token >= V)
            return cf_fail(err, CINFER_E_TOKEN_OUT_OF_RANGE, "logit_bias[%zu] names token %d; token ids must be in [0, %d)",
                           i, (int)r->logit_bias[i].token, V);
        if (!isfinite(r->logit_bias[i].bias))
            return cf_fail(err, CINFER_E_NOT_A_NUMBER, "logit_bias[%zu] for token %d is %s; it must be a finite number", i,
                           (int)r->logit_bias[i].token, isnan(r->logit_bias[i].bias) ? "NaN" : "infinite");
    }
    if (r->n_stop && !r->stop) return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "n_stop is %zu but stop is NULL", r->n_stop);
    for (size_t i = 0; i < r->n_stop; i++) {
        if (!r->stop[i] || !r->stop[i][0])
            return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "stop[%zu] is empty; stop strings must have at least one byte", i);
        if (!valid_utf8(r->stop[i])) return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "stop[%zu] is not valid UTF-8", i);
    }
    if (r->n_stop && r->ids_only)
        return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "stop strings match text; an ids_only request has none");
    if (r->n_stop && !m->tok)
        return cf_fail(err, CINFER_E_TOKENIZER, "stop strings need the model's tokenizer.json, which this model folder lacks");
    if (r->n_stop_ids && !r->stop_ids)
        return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "n_stop_ids is %zu but stop_ids is NULL", r->n_stop_ids);
    for (size_t i = 0; i < r->n_stop_ids; i++)
        if (r->stop_ids[i] < 0 || r->stop_ids[i] >= V)
            return cf_fail(err, CINFER_E_TOKEN_OUT_OF_RANGE, "stop_ids[%zu] is %d; token ids must be in [0, %d)", i,
                           (int)r->stop_ids[i], V);
    if (r->draft && strlen(r->draft) >= sizeof ((cf_request *)0)->draft)
        return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "draft names a source of %zu bytes; no source name is that long",
                       strlen(r->draft));
    if (r->draft_max < 0 || r->draft_max > CF_DRAFT_MAX)
        return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "draft_max is %d; it must be in [0, %d] (0 = adaptive)", (int)r->draft_max,
                       CF_DRAFT_MAX);
    if ((r->prompt_text || r->messages) && !m->tok)
        return cf_fail(err, CINFER_E_TOKENIZER,
                       "this model folder has no tokenizer.json, so the prompt must be given as token ids");
    if (r->messages && m->tmpl_err.code != CINFER_OK)
        return cf_fail(err, m->tmpl_err.code, "the model's chat template cannot be used: %s", m->tmpl_err.message);
    if (r->messages && !m->tmpl)
        return cf_fail(err, CINFER_E_TEMPLATE,
                       "this model folder has no chat template (chat_template.jinja or tokenizer_config.json's "
                       "chat_template), so the prompt must be given as text or token ids");
    return CINFER_OK;
}

/* Resolves the prompt to *ids (owned by the caller). */
static cinfer_status prompt_ids(const cinfer_model *m, const cinfer_request *r, int32_t **ids, size_t *n, cinfer_error *err) {
    if (r->prompt_ids) {
        *ids = malloc(r->n_prompt_ids * sizeof **ids);
        if (!*ids) return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory for %zu prompt tokens", r->n_prompt_ids);
        memcpy(*ids, r->prompt_ids, r->n_prompt_ids * sizeof **ids);
        *n = r->n_prompt_ids;
        return CINFER_OK;
    }
    if (r->prompt_text)
        return cf_tokenizer_encode(m->tok, r->prompt_text, strlen(r->prompt_text), CF_TOK_ADD_SPECIAL | CF_TOK_PARSE_SPECIAL,
                                   ids, n, err);
    char *text;
    size_t len;
    CF_TRY(cf_chat_render(m, r, &text, &len, err));
    /* The template writes the special tokens (BOS included) itself, as transformers'
     * apply_chat_template(tokenize=True) relies on. */
    cinfer_status st = cf_tokenizer_encode(m->tok, text, len, CF_TOK_PARSE_SPECIAL, ids, n, err);
    free(text);
    return st;
}

static cinfer_status check_prompt(const cinfer_model *m, const cinfer_request *r, const int32_t *ids, size_t n,
                                  int *max_tokens, cinfer_error *err) {
    const int V = m->m->hp.vocab, ctx = m->m->hp.max_ctx;
    if (n == 0) return cf_fail(err, CINFER_E_EMPTY_PROMPT, "the prompt encodes to no tokens");
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= V)
            return cf_fail(err, CINFER_E_TOKEN_OUT_OF_RANGE, "prompt token %d at position %zu is outside the vocabulary [0, %d)",
                           (int)ids[i], i, V);
    if (n >= (size_t)ctx)
        return cf_fail(err, CINFER_E_CONTEXT_OVERFLOW,
                       "the prompt has %zu tokens and leaves no room in the model's context of %d tokens", n, ctx);
    *max_tokens = r->max_tokens;
    if (n + (size_t)r->max_tokens > (size_t)ctx) {
        if (!r->fit_context)
            return cf_fail(err, CINFER_E_CONTEXT_OVERFLOW,
                           "the prompt (%zu tokens) plus max_tokens (%d) is %zu tokens, beyond the model's context of %d; "
                           "lower max_tokens to at most %zu",
                           n, (int)r->max_tokens, n + (size_t)r->max_tokens, ctx, (size_t)ctx - n);
        *max_tokens = ctx - (int)n;
    }
    return CINFER_OK;
}

cinfer_status cf_request_build(const cinfer_model *m, const cinfer_request *r, cf_request *out, cinfer_error *err) {
    memset(out, 0, sizeof *out);
    if (!r) return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "the request is NULL");
    CF_TRY(check_fields(m, r, err));

    int32_t *ids = NULL;
    size_t n = 0;
    int max_tokens = 0;
    CF_TRY(prompt_ids(m, r, &ids, &n, err));
    cinfer_status st = check_prompt(m, r, ids, n, &max_tokens, err);
    if (st != CINFER_OK) {
        free(ids);
        return st;
    }
    out->prompt = ids;
    out->n_prompt = (int)n;
    out->max_tokens = max_tokens;
    out->sp = sampling_of(r);
    out->ignore_eos = r->ignore_eos != 0;
    out->ids_only = r->ids_only != 0;
    out->fit_context = r->fit_context != 0;
    out->keep_special = cf_chat_keeps_special(m, r);
    snprintf(out->draft, sizeof out->draft, "%s", r->draft ? r->draft : "");
    out->draft_max = r->draft_max;

    int oom = 0;
    if (r->n_logit_bias) {
        out->bias = malloc(r->n_logit_bias * sizeof *out->bias);
        oom |= !out->bias;
        for (size_t i = 0; out->bias && i < r->n_logit_bias; i++)
            out->bias[i] = (cf_logit_bias){r->logit_bias[i].token, r->logit_bias[i].bias};
    }
    out->sp.logit_bias = out->bias;
    out->sp.n_logit_bias = (int32_t)r->n_logit_bias;
    if (r->n_stop_ids) {
        out->stop_ids = malloc(r->n_stop_ids * sizeof *out->stop_ids);
        oom |= !out->stop_ids;
        if (out->stop_ids) memcpy(out->stop_ids, r->stop_ids, r->n_stop_ids * sizeof *out->stop_ids);
    }
    out->n_stop_ids = (int)r->n_stop_ids;
    if (r->n_stop) {
        out->stop = calloc(r->n_stop, sizeof *out->stop);
        oom |= !out->stop;
        for (size_t i = 0; out->stop && i < r->n_stop; i++) oom |= !(out->stop[i] = strdup(r->stop[i]));
    }
    out->n_stop = out->stop ? (int)r->n_stop : 0;
    if (oom) {
        cf_request_free(out);
        return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory copying the request");
    }
    return CINFER_OK;
}

void cf_request_free(cf_request *q) {
    free(q->prompt);
    free(q->bias);
    free(q->stop_ids);
    for (int i = 0; i < q->n_stop; i++) free(q->stop[i]);
    free(q->stop);
    memset(q, 0, sizeof *q);
}
