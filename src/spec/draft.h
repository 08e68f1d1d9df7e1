/* draft.h: contract 5, draft providers and sources for speculative decoding.
 *
 * A provider lives as long as the engine and owns what every request's drafts share (a draft model's
 * weights and its runner with its KV memory; nothing for n-gram lookup). cf_draft_open gives one request its
 * source. The engine drives a source through its request's life:
 *
 *   prefill(ids, n)   the committed context: prompt, or prompt + output when a preempted request is readmitted;
 *                     the source may compute lazily (a draft model feeds it at the next draft)
 *   draft(n)          up to n proposed continuations of the committed context; 0 = do not speculate this step
 *   commit(k, ids, n) k of the last drafts were accepted and the target added its own token; the committed
 *                     context is now ids[0, n) (its tail is the accepted drafts and the target's token).
 *                     The source drops every state past what is committed (for a draft model: a truncate
 *                     of its sequence, the rollback primitive), exactly as if it had never drafted them
 *   close             frees everything the source holds
 *
 * Drafts are deterministic proposals (one token per position, no distribution): the verifier samples each
 * position from the target as plain decoding would, with the same seeded uniform, and accepts while the
 * sample equals the draft. That is lossless speculative sampling with a one-hot draft distribution q
 * (accept with min(1, p(d)/q(d)) = p(d), else sample the residual max(0, p - q) renormalized, which is p
 * without d), and it gives the very tokens plain decoding gives for the same seed.
 *
 * cf_draft_many drafts for several sources of one provider at once, so a draft model runs one batched step
 * per drafted position for the whole batch; per source it is the same as draft(). */
#ifndef CF_SPEC_DRAFT_H
#define CF_SPEC_DRAFT_H

#include <stdint.h>
#include "cinfer.h"

#define CF_DRAFT_MAX 16 /* drafted tokens per step at most */

typedef struct cf_draft_provider cf_draft_provider;
typedef struct cf_draft_source cf_draft_source;

typedef struct cf_draft_source_ops {
    cinfer_status (*prefill)(cf_draft_source *s, const int32_t *ids, int n, cinfer_error *err);
    /* *got in [0, n], n in [1, CF_DRAFT_MAX] */
    cinfer_status (*draft)(cf_draft_source *s, int n, int32_t *out, int *got, cinfer_error *err);
    cinfer_status (*commit)(cf_draft_source *s, int accepted, const int32_t *ids, int n, cinfer_error *err);
    void (*close)(cf_draft_source *s);
} cf_draft_source_ops;

struct cf_draft_source {
    const cf_draft_source_ops *ops;
    cf_draft_provider *provider;
};

typedef struct cf_draft_provider_ops {
    const char *name;   /* the plan's suffix: "ngram" -> "text:spec-ngram" */
    cinfer_status (*open)(cf_draft_provider *p, cf_draft_source **out, cinfer_error *err);
    /* NULL: cf_draft_many calls each source's draft */
    cinfer_status (*draft_many)(cf_draft_provider *p, cf_draft_source **srcs, int n_src, const int *want, int32_t *const *out,
                                int *got, cinfer_error *err);
    void (*free)(cf_draft_provider *p);
} cf_draft_provider_ops;

struct cf_draft_provider {
    const cf_draft_provider_ops *ops;
};

static inline cinfer_status cf_draft_open(cf_draft_provider *p, cf_draft_source **out, cinfer_error *err) {
    return p->ops->open(p, out, err);
}
static inline void cf_draft_provider_free(cf_draft_provider *p) {
    if (p) p->ops->free(p);
}
static inline void cf_draft_close(cf_draft_source *s) {
    if (s) s->ops->close(s);
}

/* Drafts for n_src sources of provider p: source i proposes up to want[i] tokens (0: none asked) into
 * out[i], *got[i] of them. On failure every got[i] is 0 and no source has changed state. */
cinfer_status cf_draft_many(cf_draft_provider *p, cf_draft_source **srcs, int n_src, const int *want, int32_t *const *out,
                            int *got, cinfer_error *err);

#endif
