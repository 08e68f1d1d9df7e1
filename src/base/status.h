/* status.h: filling a cinfer_error. Every fallible internal function returns a cinfer_status and takes
 * a cinfer_error * (which may be NULL) as its last argument. */
#ifndef CF_BASE_STATUS_H
#define CF_BASE_STATUS_H

#include "cinfer.h"

#if defined(__GNUC__)
#define CF_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define CF_PRINTF(a, b)
#endif

/* Records code and a formatted message in err (if non-NULL) and returns code. */
cinfer_status cf_fail(cinfer_error *err, cinfer_status code, const char *fmt, ...) CF_PRINTF(3, 4);

/* Prefixes an existing message with more context ("loading model/x: " + old message). */
cinfer_status cf_wrap(cinfer_error *err, cinfer_status code, const char *fmt, ...) CF_PRINTF(3, 4);

#define CF_TRY(expr) do { cinfer_status cf_try_s_ = (expr); if (cf_try_s_ != CINFER_OK) return cf_try_s_; } while (0)

#endif
