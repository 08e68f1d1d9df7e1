/* ngram.h: the n-gram (prompt lookup) draft provider. Its sources propose what followed, the most recent time,
 * the longest suffix of the committed context (prompt + output) that occurred earlier in it: for text that
 * repeats its input (edits, summaries with quotes, code) the target's continuation often is that copy. */
#ifndef CF_SPEC_NGRAM_H
#define CF_SPEC_NGRAM_H

#include "spec/draft.h"

#define CF_NGRAM_MIN_N 1  /* shortest suffix looked up (vLLM's prompt_lookup_min and llama.cpp's lookup start at 1) */
#define CF_NGRAM_MAX_N 4  /* longest */

/* min_n, max_n: the suffix lengths tried, longest first, 1 <= min_n <= max_n <= 16 (0, 0 = the defaults). */
cinfer_status cf_ngram_provider_create(int min_n, int max_n, cf_draft_provider **out, cinfer_error *err);

#endif
