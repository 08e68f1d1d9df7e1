/* planner.c: contract 2. plan(request) decides how a validated request runs, from the request alone and
 * without touching device state; the engine records the choice once and never changes it. Every text
 * request runs in the engine's continuous batch ("text:continuous"); speculative decoding with a named
 * draft source adds its mechanism here. */
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
    out->mechanism = CF_MECH_CONTINUOUS;
    snprintf(out->id, sizeof out->id, "text:continuous");
    out->output_limit = q->max_tokens;
    return CINFER_OK;
}
