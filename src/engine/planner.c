/* planner.c: contract 2. plan(request) decides how a validated request runs, from the request alone and
 * without touching device state; the engine records the choice once and never changes it. Serial
 * decoding is the only mechanism so far; continuous batching and speculative decoding with a named
 * draft source add theirs here. */
#include "engine/engine.h"
#include "base/status.h"

#include <stdio.h>
#include <string.h>

cinfer_status cf_plan_request(const cf_request *q, cf_plan *out, cinfer_error *err) {
    if (q->draft[0] && strcmp(q->draft, "none"))
        return cf_fail(err, CINFER_E_UNSUPPORTED,
                       "draft source '%s' is not available: this build has no speculative decoding; use \"none\" or leave "
                       "draft empty",
                       q->draft);
    out->mechanism = CF_MECH_SERIAL;
    snprintf(out->id, sizeof out->id, "text:serial");
    out->output_limit = q->max_tokens;
    return CINFER_OK;
}
