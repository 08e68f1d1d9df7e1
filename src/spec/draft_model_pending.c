/* draft_model_pending.c: a stand-in for the draft-model provider (spec/draft_model.h) until the branch that
 * implements it is merged; it is deleted at that merge. */
#include "spec/draft_model.h"
#include "base/status.h"

cinfer_status cf_draft_model_provider_create(cinfer_model *target, cinfer_model *draft, int max_seqs, cf_draft_provider **out,
                                             cinfer_error *err) {
    if (out) *out = NULL;
    return cf_fail(err, CINFER_E_UNSUPPORTED, "draft models are not built in yet");
}
