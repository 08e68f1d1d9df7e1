/* replay.h: the replay ("oracle") draft provider, for tests and benchmarks only (not reachable from the public
 * API): it proposes recorded token sequences, typically the target's own greedy continuation recorded by a
 * first plain run, so every draft is accepted and a benchmark measures the machinery, not a drafter. */
#ifndef CF_SPEC_REPLAY_H
#define CF_SPEC_REPLAY_H

#include "spec/draft.h"

/* A provider over n_seqs recorded sequences (each copied: prompt followed by its continuation). A source follows
 * the recording whose beginning is its committed context (the longest such) and proposes what comes next in it;
 * once the context leaves every recording it proposes nothing. */
cinfer_status cf_replay_provider_create(const int32_t *const *seqs, const int *lens, int n_seqs, cf_draft_provider **out,
                                        cinfer_error *err);
/* Recording i (of a provider made by cf_replay_provider_create) becomes a copy of seq[0, len); sources opened
 * afterwards follow it. Not while a source of the provider is open. On failure recording i is left as it was. */
cinfer_status cf_replay_provider_replace(cf_draft_provider *p, int i, const int32_t *seq, int len, cinfer_error *err);

#endif
