/* params.c: default sampling parameters and their validation (one status code per kind of mistake). */
#include "sample/sampler.h"

#include <math.h>
#include "base/status.h"

cf_sampling_params cf_sampling_default_params(void) {
    return (cf_sampling_params){
        .temperature = 1.0f,
        .top_k = 0,
        .top_p = 1.0f,
        .min_p = 0.0f,
        .repetition_penalty = 1.0f,
        .repetition_window = 20,
        .presence_penalty = 0.0f,
        .frequency_penalty = 0.0f,
        .penalty_window = 0,
    };
}

cf_sampling_params cf_sampling_truncation(float temperature, int32_t top_k, float top_p, float min_p) {
    cf_sampling_params p = cf_sampling_default_params();
    p.temperature = temperature;
    p.top_k = top_k;
    p.top_p = top_p;
    p.min_p = min_p;
    return p;
}

bool cf_sampling_is_greedy(float temperature) { return temperature == 0.0f || !isfinite(1.0f / temperature); }

cinfer_status cf_sampling_check_uniform(float u, cinfer_error *err) {
    if (u >= 0.0f && u < 1.0f) return CINFER_OK;
    return cf_fail(err, isnan(u) ? CINFER_E_NOT_A_NUMBER : CINFER_E_INVALID_ARGUMENT, "the draw's uniform is %g, not in [0, 1)", (double)u);
}

static cinfer_status check_finite(float v, const char *field, cinfer_error *err) {
    if (isfinite(v)) return CINFER_OK;
    return cf_fail(err, CINFER_E_NOT_A_NUMBER, "%s is %s; it must be a finite number", field,
                   isnan(v) ? "NaN" : "infinite");
}

cinfer_status cf_sampling_validate(const cf_sampling_params *p, int32_t vocab, cinfer_error *err) {
    if (vocab <= 0)
        return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "vocabulary size %d: it must be positive", (int)vocab);
    CF_TRY(check_finite(p->temperature, "temperature", err));
    CF_TRY(check_finite(p->top_p, "top_p", err));
    CF_TRY(check_finite(p->min_p, "min_p", err));
    CF_TRY(check_finite(p->repetition_penalty, "repetition_penalty", err));
    CF_TRY(check_finite(p->presence_penalty, "presence_penalty", err));
    CF_TRY(check_finite(p->frequency_penalty, "frequency_penalty", err));

    if (p->temperature < 0)
        return cf_fail(err, CINFER_E_TEMPERATURE, "temperature is %g; it must be >= 0 (0 = greedy)",
                       (double)p->temperature);
    if (p->top_k < 0)
        return cf_fail(err, CINFER_E_TOP_K, "top_k is %d; it must be >= 0 (0 = off)", (int)p->top_k);
    if (!(p->top_p > 0 && p->top_p <= 1))
        return cf_fail(err, CINFER_E_TOP_P, "top_p is %g; it must be in (0, 1] (1 = off)", (double)p->top_p);
    if (!(p->min_p >= 0 && p->min_p <= 1))
        return cf_fail(err, CINFER_E_MIN_P, "min_p is %g; it must be in [0, 1] (0 = off)", (double)p->min_p);
    if (!(p->repetition_penalty > 0))
        return cf_fail(err, CINFER_E_PENALTY, "repetition_penalty is %g; it must be > 0 (1 = off)",
                       (double)p->repetition_penalty);
    if (p->repetition_window < 0)
        return cf_fail(err, CINFER_E_PENALTY,
                       "repetition_window is %d; it must be >= 0 (last N tokens, 0 = whole history)",
                       (int)p->repetition_window);
    if (!(p->presence_penalty >= -2 && p->presence_penalty <= 2))
        return cf_fail(err, CINFER_E_PENALTY, "presence_penalty is %g; it must be in [-2, 2] (0 = off)",
                       (double)p->presence_penalty);
    if (!(p->frequency_penalty >= -2 && p->frequency_penalty <= 2))
        return cf_fail(err, CINFER_E_PENALTY, "frequency_penalty is %g; it must be in [-2, 2] (0 = off)",
                       (double)p->frequency_penalty);
    if (p->penalty_window < 0)
        return cf_fail(err, CINFER_E_PENALTY,
                       "penalty_window is %d; it must be >= 0 (last N tokens, 0 = whole history)",
                       (int)p->penalty_window);

    if (p->n_logit_bias < 0 || (p->n_logit_bias > 0 && !p->logit_bias))
        return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "logit_bias: %d entries given without a list",
                       (int)p->n_logit_bias);
    for (int32_t i = 0; i < p->n_logit_bias; i++) {
        const cf_logit_bias *b = &p->logit_bias[i];
        if (b->token < 0 || b->token >= vocab)
            return cf_fail(err, CINFER_E_TOKEN_OUT_OF_RANGE,
                           "logit_bias names token %d; token ids must be in [0, %d)", (int)b->token, (int)vocab);
        if (!isfinite(b->bias))
            return cf_fail(err, CINFER_E_NOT_A_NUMBER, "logit_bias for token %d is %s; it must be a finite number",
                           (int)b->token, isnan(b->bias) ? "NaN" : "infinite");
    }

    if (p->top_logprobs < 0 || p->top_logprobs > CF_MAX_TOP_LOGPROBS)
        return cf_fail(err, CINFER_E_TOP_LOGPROBS, "top_logprobs is %d; it must be in [0, %d]",
                       (int)p->top_logprobs, CF_MAX_TOP_LOGPROBS);
    return CINFER_OK;
}
