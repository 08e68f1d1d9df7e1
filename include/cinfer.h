/* cinfer.h: the public C API of cinfer. Opaque handles, *_default_params() structs, status codes
 * with a message a person can act on; library code never aborts on caller input. */
#ifndef CINFER_H
#define CINFER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CINFER_API_VERSION 1

/* Every fallible call returns one of these; details go to a cinfer_error when the caller passes one. */
typedef enum cinfer_status {
    CINFER_OK = 0,
    CINFER_E_INVALID_ARGUMENT,   /* a parameter is malformed; the message names it */
    CINFER_E_IO,                 /* a file could not be opened, read or mapped */
    CINFER_E_FORMAT,             /* a file is malformed: truncated, bad header, wrong shape or dtype */
    CINFER_E_UNSUPPORTED,        /* valid input we do not handle (architecture, dtype, template construct) */
    CINFER_E_OUT_OF_MEMORY,
    CINFER_E_DEVICE,             /* the compute device failed or is absent */
    CINFER_E_NO_DEVICE,          /* no usable GPU is present */
    CINFER_E_CANCELLED,
    CINFER_E_INTERNAL,
    CINFER_E_TOKENIZER,          /* tokenizer.json could not be used */
    CINFER_E_TEMPLATE,           /* a chat template failed to parse or render */
    /* request validation (engine contract): each failure has its own code */
    CINFER_E_EMPTY_PROMPT,
    CINFER_E_TOKEN_OUT_OF_RANGE,
    CINFER_E_MAX_TOKENS,
    CINFER_E_CONTEXT_OVERFLOW,
    CINFER_E_TOP_LOGPROBS,
    CINFER_E_TEMPERATURE,
    CINFER_E_TOP_K,
    CINFER_E_TOP_P,
    CINFER_E_MIN_P,
    CINFER_E_PENALTY,
    CINFER_E_NOT_A_NUMBER,
    CINFER_E_BUSY,
    CINFER_STATUS_COUNT
} cinfer_status;

/* Filled by a failing call when the caller passes a non-NULL pointer. */
typedef struct cinfer_error {
    cinfer_status code;
    char message[512];
} cinfer_error;

/* A short stable name for a status code ("invalid_argument", "io", ...). */
const char *cinfer_status_name(cinfer_status s);

#ifdef __cplusplus
}
#endif
#endif
