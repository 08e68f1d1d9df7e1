/* detok.h: streaming detokenization. Tokens arrive one at a time; the detokenizer re-decodes a short
 * window of recent ids (the prefix/read offset scheme of HF TextStreamer and vLLM) and hands out only
 * text that is final: never a broken UTF-8 sequence, never a byte lost, SentencePiece's leading space
 * kept exactly as the full decode has it. Concatenating every chunk (pushes, then flush) gives the full
 * decode of all ids. Owned by src/text/detok.c. */
#ifndef CF_TEXT_DETOK_H
#define CF_TEXT_DETOK_H

#include <stddef.h>
#include <stdint.h>
#include "cinfer.h"
#include "text/tokenizer.h"

/* A decode function with cf_tokenizer_decode's contract (HF decode(): invalid UTF-8 as U+FFFD). */
typedef cinfer_status (*cf_decode_fn)(const void *ctx, const int32_t *ids, size_t n_ids, int skip_special,
                                      char **text, size_t *len, cinfer_error *err);

/* Adapter for a cf_tokenizer: cf_detok_create(cf_detok_tokenizer_decode, tok, ...). */
static inline cinfer_status cf_detok_tokenizer_decode(const void *tok, const int32_t *ids, size_t n_ids,
                                                      int skip_special, char **text, size_t *len,
                                                      cinfer_error *err) {
    return cf_tokenizer_decode((const cf_tokenizer *)tok, ids, n_ids, skip_special, text, len, err);
}

typedef struct cf_detok cf_detok;

cinfer_status cf_detok_create(cf_decode_fn decode, const void *ctx, int skip_special, cf_detok **out,
                              cinfer_error *err);
void cf_detok_free(cf_detok *d);

/* Adds one token. text and len receive the text that became final (possibly empty); the pointer stays
 * valid until the next call on d. */
cinfer_status cf_detok_push(cf_detok *d, int32_t id, const char **text, size_t *len, cinfer_error *err);

/* Ends the stream: hands out whatever is left (an unfinished UTF-8 sequence as U+FFFD, as the full
 * decode has it). d may be reused afterwards for a new stream. */
cinfer_status cf_detok_flush(cf_detok *d, const char **text, size_t *len, cinfer_error *err);

/* Length of the longest prefix of s that ends on a complete UTF-8 sequence, holding back only a tail
 * that could still become valid when more bytes arrive. */
size_t cf_utf8_complete_prefix(const char *s, size_t n);

#endif
