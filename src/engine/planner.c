/* planner.c: contract 2. plan(request) decides how a validated request runs, from the request alone and
 * without touching device state; the engine records the choice once and never changes it. Every text
 * request runs in the engine's continuous batch: plainly ("text:continuous") or, with a draft source,
 * speculatively inside that batch ("text:spec-<source>": drafts verified by the target in the same step). */
#include "engine/engine.h"
#include "base/status.h"

#include <stdio.h>
#include <string.h>

cinfer_status cf_plan_request(const cf_request *q, const char *const *sources, int n_sources, const char *default_draft,
                              cf_plan *out, cinfer_error *err) {
    const char *want = q->draft[0] ? q->draft : default_draft ? default_draft : "";
    memset(out, 0, sizeof *out);
    out->output_limit = q->max_tokens;
    if (!want[0] || !strcmp(want, "none")) {
        out->mechanism = CF_MECH_CONTINUOUS;
        snprintf(out->id, sizeof out->id, "text:continuous");
        return CINFER_OK;
    }
    for (int i = 0; i < n_sources; i++) {
        if (strcmp(want, sources[i])) continue;
        out->mechanism = CF_MECH_SPECULATIVE;
        snprintf(out->source, sizeof out->source, "%s", want);
        snprintf(out->id, sizeof out->id, "text:spec-%s", want);
        return CINFER_OK;
    }
    if (!strcmp(want, "draft"))
        return cf_fail(err, CINFER_E_UNSUPPORTED,
                       "draft source \"draft\" needs a draft model, and this engine has none (give one with "
                       "cinfer_engine_params.draft_model, --draft-model); use \"ngram\" or \"none\"");
    return cf_fail(err, CINFER_E_UNSUPPORTED, "unknown draft source '%s'; use \"ngram\", \"draft\" (with a draft model) or \"none\"",
                   want);
}
