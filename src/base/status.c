/* status.c: status code names and error message formatting. */
#include "base/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const char *const names[CINFER_STATUS_COUNT] = {
    [CINFER_OK] = "ok",
    [CINFER_E_INVALID_ARGUMENT] = "invalid_argument",
    [CINFER_E_IO] = "io",
    [CINFER_E_FORMAT] = "format",
    [CINFER_E_UNSUPPORTED] = "unsupported",
    [CINFER_E_OUT_OF_MEMORY] = "out_of_memory",
    [CINFER_E_DEVICE] = "device",
    [CINFER_E_NO_DEVICE] = "no_device",
    [CINFER_E_CANCELLED] = "cancelled",
    [CINFER_E_INTERNAL] = "internal",
    [CINFER_E_TOKENIZER] = "tokenizer",
    [CINFER_E_TEMPLATE] = "template",
    [CINFER_E_EMPTY_PROMPT] = "empty_prompt",
    [CINFER_E_TOKEN_OUT_OF_RANGE] = "token_out_of_range",
    [CINFER_E_MAX_TOKENS] = "max_tokens",
    [CINFER_E_CONTEXT_OVERFLOW] = "context_overflow",
    [CINFER_E_TOP_LOGPROBS] = "top_logprobs",
    [CINFER_E_TEMPERATURE] = "temperature",
    [CINFER_E_TOP_K] = "top_k",
    [CINFER_E_TOP_P] = "top_p",
    [CINFER_E_MIN_P] = "min_p",
    [CINFER_E_PENALTY] = "penalty",
    [CINFER_E_NOT_A_NUMBER] = "not_a_number",
    [CINFER_E_BUSY] = "busy",
    [CINFER_E_TIMEOUT] = "timeout",
};

const char *cinfer_status_name(cinfer_status s) {
    if ((int)s < 0 || s >= CINFER_STATUS_COUNT || !names[s]) return "unknown";
    return names[s];
}

cinfer_status cf_fail(cinfer_error *err, cinfer_status code, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->message, sizeof err->message, fmt, ap);
        va_end(ap);
        err->code = code;
    }
    return code;
}

cinfer_status cf_wrap(cinfer_error *err, cinfer_status code, const char *fmt, ...) {
    if (err) {
        char prefix[256], old[sizeof err->message];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(prefix, sizeof prefix, fmt, ap);
        va_end(ap);
        memcpy(old, err->message, sizeof old);
        snprintf(err->message, sizeof err->message, "%s: %s", prefix, old);
        err->code = code;
    }
    return code;
}
