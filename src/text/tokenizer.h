/* tokenizer.h: Hugging Face tokenizer.json tokenizers (BPE byte-level and SentencePiece-style):
 * loading, encoding with added/special tokens, decoding. Owned by src/text/tokenizer*.c. */
#ifndef CF_TEXT_TOKENIZER_H
#define CF_TEXT_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>
#include "cinfer.h"

typedef struct cf_tokenizer cf_tokenizer;

enum {
    CF_TOK_ADD_SPECIAL = 1 << 0,   /* post-processor inserts BOS/EOS as HF add_special_tokens=True */
    CF_TOK_PARSE_SPECIAL = 1 << 1, /* special added tokens in the text become their ids; without this
                                      flag "<|im_end|>" in user text is encoded as plain text */
};

/* Loads DIR/tokenizer.json (+ tokenizer_config.json, special_tokens_map.json, generation_config.json).
 * Supported: model BPE (merges "a b" or ["a", "b"], byte_fallback, unk_token, fuse_unk, ignore_merges,
 * continuing_subword_prefix, end_of_word_suffix); normalizers NFC NFD NFKC NFKD Lowercase Strip
 * StripAccents Replace Prepend ByteLevel Sequence; pre-tokenizers ByteLevel Split Metaspace Digits
 * Punctuation Whitespace WhitespaceSplit BertPreTokenizer CharDelimiterSplit Sequence;
 * post-processors TemplateProcessing RobertaProcessing BertProcessing ByteLevel Sequence; decoders
 * ByteLevel ByteFallback Fuse Metaspace Replace Strip BPEDecoder Sequence. Anything else (Unigram,
 * WordPiece, Precompiled, ...) fails with CINFER_E_UNSUPPORTED naming it. "truncation" and "padding"
 * are ignored. BOS: tokenizer_config's bos_token (null means none), else special_tokens_map's, else
 * generation_config's bos_token_id. EOS ids: the eos_token of tokenizer_config (or
 * special_tokens_map) followed by generation_config's eos_token_id (an int or a list). */
cinfer_status cf_tokenizer_load(const char *dir, cf_tokenizer **out, cinfer_error *err);
/* Builds a tokenizer from the text of a tokenizer.json alone (no configuration files, so no BOS or
 * EOS unless the caller looks them up). */
cinfer_status cf_tokenizer_load_json(const char *json, size_t len, cf_tokenizer **out, cinfer_error *err);
void cf_tokenizer_free(cf_tokenizer *tok);

/* Encodes len bytes of text as HF tokenizers' Tokenizer.encode (0.23): flags CF_TOK_ADD_SPECIAL |
 * CF_TOK_PARSE_SPECIAL is transformers' tokenizer(text)["input_ids"]. Without CF_TOK_PARSE_SPECIAL,
 * special added tokens are not recognised in the text (HF encode_special_tokens=True) while
 * non-special added tokens still are, as in HF. Text that is not valid UTF-8 is first repaired the
 * way Python's bytes.decode("utf-8", "replace") does (each maximal ill-formed subsequence becomes
 * U+FFFD), so the ids are HF's for the closest Python string. *ids is malloc'd and owned by the
 * caller. A tokenizer may be used by several threads at once. */
cinfer_status cf_tokenizer_encode(const cf_tokenizer *tok, const char *text, size_t len, int flags,
                                  int32_t **ids, size_t *n_ids, cinfer_error *err);

/* Decodes ids to text (malloc'd, NUL-terminated, *len excludes the NUL) as HF decode() does,
 * skipping special tokens when skip_special is non-zero. Ids without text decode to nothing; an id
 * below 0 or at or above max(vocab size, the model's vocabulary) is an error. */
cinfer_status cf_tokenizer_decode(const cf_tokenizer *tok, const int32_t *ids, size_t n_ids,
                                  int skip_special, char **text, size_t *len, cinfer_error *err);

int32_t cf_tokenizer_vocab_size(const cf_tokenizer *tok);        /* 1 + the largest id, model or added */
/* The model's vocabulary (rows of its embedding), when larger than the tokenizer's: the padding ids in
 * between decode to nothing. Set once after loading, before the tokenizer is shared. */
void cf_tokenizer_set_model_vocab(cf_tokenizer *tok, int32_t n);
int32_t cf_tokenizer_bos_id(const cf_tokenizer *tok);            /* -1 when none */
int cf_tokenizer_eos_ids(const cf_tokenizer *tok, const int32_t **ids); /* count; all EOS/stop ids */
int cf_tokenizer_is_special(const cf_tokenizer *tok, int32_t id); /* what decode(skip_special) skips */
int32_t cf_tokenizer_token_id(const cf_tokenizer *tok, const char *token); /* -1 when absent */
const char *cf_tokenizer_token_text(const cf_tokenizer *tok, int32_t id); /* raw vocab string or NULL */
const char *cf_tokenizer_bos_text(const cf_tokenizer *tok);       /* for chat templates; NULL if none */
const char *cf_tokenizer_eos_text(const cf_tokenizer *tok);

#endif
