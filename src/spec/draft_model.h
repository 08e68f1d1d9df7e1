/* draft_model.h: the draft-model provider: a second, smaller model whose greedy continuation is the draft. It owns
 * a model runner (and its KV memory) on the draft model and one sequence per open source; drafting for a batch of
 * sources runs one draft step per drafted position for all of them. */
#ifndef CF_SPEC_DRAFT_MODEL_H
#define CF_SPEC_DRAFT_MODEL_H

#include "cinfer.h"
#include "spec/draft.h"

/* A provider drafting for target with draft (both caller-owned, outliving the provider). Refuses a draft whose
 * tokenizer disagrees with the target's or that runs on another backend. max_seqs: sources open at once. */
cinfer_status cf_draft_model_provider_create(cinfer_model *target, cinfer_model *draft, int max_seqs, cf_draft_provider **out,
                                             cinfer_error *err);

#endif
