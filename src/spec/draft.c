/* draft.c: cf_draft_many, batched drafting over the sources of one provider (contract 5): the provider's own
 * draft_many when it has one (a draft model runs one step per drafted position for all its sources), else
 * each source's draft in turn. On failure every got[i] is 0. */
#include "spec/draft.h"
#include "base/status.h"

#include <string.h>

cinfer_status cf_draft_many(cf_draft_provider *p, cf_draft_source **srcs, int n_src, const int *want, int32_t *const *out,
                            int *got, cinfer_error *err) {
    if (n_src <= 0) return CINFER_OK;
    memset(got, 0, (size_t)n_src * sizeof *got);
    for (int i = 0; i < n_src; i++)
        if (want[i] < 0 || want[i] > CF_DRAFT_MAX)
            return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "cf_draft_many: source %d asks for %d drafts; at most %d", i, want[i],
                           CF_DRAFT_MAX);
    cinfer_status st = CINFER_OK;
    if (p->ops->draft_many) {
        st = p->ops->draft_many(p, srcs, n_src, want, out, got, err);
    } else {
        for (int i = 0; i < n_src && st == CINFER_OK; i++) {
            if (!want[i]) continue;
            st = srcs[i]->ops->draft(srcs[i], want[i], out[i], &got[i], err);
            if (st == CINFER_OK && (got[i] < 0 || got[i] > want[i]))
                st = cf_fail(err, CINFER_E_INTERNAL, "draft source '%s' returned %d drafts for %d asked", p->ops->name, got[i],
                             want[i]);
        }
    }
    if (st != CINFER_OK) memset(got, 0, (size_t)n_src * sizeof *got);
    return st;
}
