/* draft_model.h: the draft-model provider: a second, smaller model whose greedy continuation is the draft. It owns
 * a model runner (and its KV memory) on the draft model and one sequence per open source; drafting for a batch of
 * sources runs one draft step per drafted position for all of them. */
#ifndef CF_SPEC_DRAFT_MODEL_H
#define CF_SPEC_DRAFT_MODEL_H

#include "cinfer.h"
#include "spec/draft.h"

/* A provider drafting for target with draft (both caller-owned, outliving the provider). Refuses a draft whose
 * tokenizer disagrees with the target's or that runs on another backend. max_seqs: sources open at once.
 *
 * Refused with CINFER_E_INVALID_ARGUMENT: tokenizers with other vocabulary sizes, another string (or special flag)
 * for any id, other BOS or EOS ids, or decoders that read the same ids differently; with CINFER_E_UNSUPPORTED: a
 * draft on another backend than the target's (the GPU index is not compared: cf_backend does not expose it), or a
 * model without tokenizer.json. target == draft is allowed (every draft is then accepted: a machinery check).
 *
 * max_seqs: sequences in one draft step (the runner's batch), and the KV memory is sized for that many contexts of
 * min(draft, target) context tokens (at most a quarter of the backend's free memory at creation). More sources may
 * be open: drafting then runs in groups of max_seqs, and sources the KV pool cannot hold get no drafts.
 *
 * Use (one thread, the scheduler's, drives the provider and all its sources):
 *   create once per engine; per request: cf_draft_open, then prefill(prompt or prompt + output so far, n) (lazy:
 *   nothing runs until the next draft); per step: cf_draft_many (or draft) for the requests that speculate, then
 *   after verification commit(accepted, ids, n) with the whole committed context, the target's own token last;
 *   cf_draft_close at the end of the request (or when it is preempted, to give back draft KV; prefill after
 *   readmission either way). cf_draft_provider_free after the engine's last step; it closes sources left open.
 * Drafts are below min(target vocabulary, tokenizer size); a step that fails (out of draft KV blocks, a device
 * error) gives no drafts (or fewer) rather than an error. */
cinfer_status cf_draft_model_provider_create(cinfer_model *target, cinfer_model *draft, int max_seqs, cf_draft_provider **out,
                                             cinfer_error *err);

#endif
