/* sampler.h: turning one row of float32 logits into a token. Sampling parameters and their
 * validation, logits processors (bias, penalties), temperature, truncation (top-k, top-p, min-p),
 * a seeded draw, and log-probabilities. Owned by src/sample/.
 *
 * Order of operations in cf_sampler_sample (fixed, documented, tested):
 *   1. processors, in place on the logits row:
 *        logit_bias          l[id] += bias
 *        repetition penalty  for each distinct token in the last repetition_window history tokens:
 *                            l > 0 ? l / penalty : l * penalty   (HF / llama.cpp / mlx-lm rule)
 *        presence penalty    for each distinct token in the last penalty_window tokens: l -= presence
 *        frequency penalty   for the same tokens: l -= count * frequency
 *   2. log-probabilities (when asked): log-softmax of the processed row over the whole vocabulary,
 *      before temperature and truncation: the model's distribution as the processors left it, not
 *      the sampler's truncated one. This matches mlx-lm (generate_step hands its sampler, and
 *      returns, logits - logsumexp(logits) taken after the logits processors) and vLLM's default;
 *      OpenAI does not document which distribution it reports. The chosen token's logprob and the
 *      top_logprobs most likely tokens come from the same row.
 *   3. temperature 0 (or one so small that 1/T overflows): argmax, ties to the lowest id.
 *      Otherwise p ~ exp(l / T), then truncated in this order, each step renormalizing:
 *        top-k   keep the k most likely (ties to the lowest id); 0 or >= vocab = off
 *        top-p   keep the smallest most-likely-first prefix whose mass is >= top_p; 1 = off
 *        min-p   keep tokens with p >= min_p * p_max; 0 = off
 *      then one draw from what is left. "Most likely first" is the total order (p desc, id asc);
 *      at least one token always survives.
 *
 * Cost per token for vocabulary V and penalty window W (tests/sample/bench_sampler.c measures it at
 * V = 151936): processors O(W + number of biases); then a vectorized max/NaN scan
 * of V. Greedy stops there. Top-k: a size-k heap over V that only looks closer at values above its
 * root (O(V) compares typical, O(V log k) worst), exp on the k survivors. Top-p without top-k: one
 * vectorized exp pass over V; only tokens heavier than (1 - top_p) * sum / V are gathered (the
 * lighter ones together cannot reach 1 - top_p of the mass, so the nucleus is among the heavier),
 * and the nucleus is found among them by a bucketed mass quickselect, O(candidates) expected;
 * nothing is sorted. Min-p alone: a compare scan, exp on the survivors.
 * Plain temperature: the exp pass and a draw that skips whole blocks. Log-probabilities: one more
 * exp pass and a top-N heap.
 *
 * Randomness: the draw at each step takes one uniform u in [0, 1) from xoshiro256** seeded (through
 * splitmix64) by (seed, history length); u has 24 bits, so it is exactly a float (cf_sampler_uniform),
 * and a device-side sampler handed it (backend op sample) draws from the same point. The token is the
 * first, in the order the truncation leaves (id order without truncation), at which the running mass
 * passes u times the mass kept. A draw is a function of the seed, the number of history tokens and the
 * logits: unaffected by other samplers, repeated if the same step is sampled twice, and restored by
 * cf_sampler_truncate (after a speculative rollback the step resamples exactly what plain decoding
 * would). The exp and the sums are this module's own, in a fixed order (bit-identical with and
 * without AVX2), so equal logits give equal draws across machines built with the project's flags
 * (ISO C mode: no contracted multiply-adds). */
#ifndef CF_SAMPLE_SAMPLER_H
#define CF_SAMPLE_SAMPLER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "cinfer.h"

#define CF_MAX_TOP_LOGPROBS 20

typedef struct cf_logit_bias {
    int32_t token;
    float bias;
} cf_logit_bias;

typedef struct cf_sampling_params {
    float temperature;          /* >= 0; 0 = greedy. Default 1 (OpenAI, mlx-lm) */
    int32_t top_k;              /* >= 0; 0 = off */
    float top_p;                /* (0, 1]; 1 = off */
    float min_p;                /* [0, 1]; 0 = off */
    float repetition_penalty;   /* > 0; 1 = off */
    int32_t repetition_window;  /* >= 0: last N history tokens; 0 = whole history. Default 20 (mlx-lm) */
    float presence_penalty;     /* [-2, 2]; 0 = off */
    float frequency_penalty;    /* [-2, 2]; 0 = off */
    int32_t penalty_window;     /* >= 0: window of presence/frequency; 0 = whole history (default) */
    const cf_logit_bias *logit_bias; /* n_logit_bias pairs, copied by cf_sampler_create */
    int32_t n_logit_bias;
    uint64_t seed;              /* the caller picks a fresh one when the request names none */
    bool logprobs;              /* fill cf_sample_result.logprob */
    int32_t top_logprobs;       /* [0, CF_MAX_TOP_LOGPROBS]; > 0 implies logprobs */
} cf_sampling_params;

typedef struct cf_token_logprob {
    int32_t token;
    float logprob;
} cf_token_logprob;

typedef struct cf_sample_result {
    int32_t token;
    float logprob;              /* of token; 0 unless logprobs were asked for */
    int32_t n_top;              /* min(top_logprobs, vocab) */
    cf_token_logprob top[CF_MAX_TOP_LOGPROBS]; /* most likely first, ties to the lowest id */
} cf_sample_result;

typedef struct cf_sampler cf_sampler;

cf_sampling_params cf_sampling_default_params(void);
/* The defaults with these truncations (the parameters of a draw without processors). */
cf_sampling_params cf_sampling_truncation(float temperature, int32_t top_k, float top_p, float min_p);
/* Whether a temperature picks the argmax: 0, or one whose inverse overflows. */
bool cf_sampling_is_greedy(float temperature);
/* A draw's uniform must be in [0, 1): else CINFER_E_INVALID_ARGUMENT, NaN CINFER_E_NOT_A_NUMBER. */
cinfer_status cf_sampling_check_uniform(float u, cinfer_error *err);

/* Checks every field against vocab (> 0). Each failure has its own code (CINFER_E_NOT_A_NUMBER for
 * any NaN or infinity, CINFER_E_TEMPERATURE, _TOP_K, _TOP_P, _MIN_P, _PENALTY, _TOKEN_OUT_OF_RANGE
 * for a logit_bias id, _TOP_LOGPROBS) and a message naming the field and its allowed range. */
cinfer_status cf_sampling_validate(const cf_sampling_params *p, int32_t vocab, cinfer_error *err);

/* Validates p, copies it (logit_bias included) and allocates O(vocab) scratch. */
cinfer_status cf_sampler_create(const cf_sampling_params *p, int32_t vocab, cf_sampler **out,
                                cinfer_error *err);
void cf_sampler_free(cf_sampler *s);

/* Appends tokens to the history (the prompt, then each committed token). Ids outside [0, vocab)
 * are refused with CINFER_E_TOKEN_OUT_OF_RANGE and nothing is appended. */
cinfer_status cf_sampler_accept(cf_sampler *s, int32_t token, cinfer_error *err);
cinfer_status cf_sampler_accept_many(cf_sampler *s, const int32_t *tokens, size_t n, cinfer_error *err);

/* Drops the last n history tokens (all of them when n exceeds the length). */
void cf_sampler_truncate(cf_sampler *s, size_t n);
size_t cf_sampler_history_len(const cf_sampler *s);

/* Samples one token from logits[0..vocab), which is overwritten (processed in place). The history is
 * not changed: call cf_sampler_accept with the token once it is committed. Fails with
 * CINFER_E_NOT_A_NUMBER when a logit is NaN or +inf, CINFER_E_INVALID_ARGUMENT when every logit is
 * -inf. */
cinfer_status cf_sampler_sample(cf_sampler *s, float *logits, cf_sample_result *out, cinfer_error *err);

/* The uniform in [0, 1) the next cf_sampler_sample draws with: a function of the seed and the history
 * length only (24 bits, exactly representable as a float). */
float cf_sampler_uniform(const cf_sampler *s);
/* The uniform of the draw k tokens later (k = 0: cf_sampler_uniform), for picks queued ahead. */
float cf_sampler_uniform_ahead(const cf_sampler *s, size_t k);

/* cf_sampler_sample drawing with u (in [0, 1), else CINFER_E_INVALID_ARGUMENT, NaN CINFER_E_NOT_A_NUMBER)
 * instead of cf_sampler_uniform(s): the reference for device-side sampling given the same u. */
cinfer_status cf_sampler_sample_u(cf_sampler *s, float *logits, float u, cf_sample_result *out, cinfer_error *err);

#endif
