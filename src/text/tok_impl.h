/* tok_impl.h: the parts of a tokenizer.json pipeline and how they talk: pieces of text flowing
 * through added-token extraction, normalizers, pre-tokenizers and the BPE model; id lists through
 * post-processors; token strings through decoders. Each part mirrors the Hugging Face `tokenizers`
 * (0.23) component of the same name, without offsets. Implemented in tok_pieces.c (lists, split
 * behaviors), tok_regex.c, tok_normalize.c, tok_pretok.c, tok_bpe.c, tok_added.c, tok_decode.c,
 * tok_post.c, tok_json.c (in-place JSON reading) and tok_unicode_tables.c (generated Unicode data). */
#ifndef CF_TEXT_TOK_IMPL_H
#define CF_TEXT_TOK_IMPL_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "cinfer.h"
#include "base/status.h"
#include "text/tok_util.h"

/* ---- growable arrays ---- */

typedef struct tk_ids {
    int32_t *v;
    size_t n, cap;
    int oom;
} tk_ids;

int tk_ids_grow(tk_ids *a, size_t extra); /* room for extra more; 0, or -1 (and oom set) */
void tk_ids_free(tk_ids *a);

static inline void tk_ids_push(tk_ids *a, int32_t id) {
    if (a->n == a->cap && tk_ids_grow(a, 1)) return;
    a->v[a->n++] = id;
}

static inline void tk_ids_append(tk_ids *a, const int32_t *ids, size_t n) {
    if (a->n + n > a->cap && tk_ids_grow(a, n)) return;
    for (size_t i = 0; i < n; i++) a->v[a->n + i] = ids[i];
    a->n += n;
}

/* A piece of text on its way to the model: a span of text that outlives the list (the input, or a
 * normalized copy of part of it). id >= 0: an added token already recognised (its text is not
 * processed further). at_start: the piece begins at offset 0 of the original input (what
 * Metaspace's prepend_scheme "first" asks). */
typedef struct tk_piece {
    const char *p;
    size_t len;
    int32_t id;
    uint8_t at_start;
} tk_piece;

typedef struct tk_pieces {
    tk_piece *v;
    size_t n, cap;
    int oom;
} tk_pieces;

/* Appends s[0..n) (not copied); empty raw pieces are dropped, as HF drops empty splits. */
void tk_pieces_add(tk_pieces *p, const char *s, size_t n, int32_t id, int at_start);
void tk_pieces_free(tk_pieces *p);

/* A list of strings (decoder input and output). */
typedef struct tk_strs {
    tk_buf text;
    size_t *off, *len;
    size_t n, cap;
    int oom;
} tk_strs;

void tk_strs_add(tk_strs *s, const char *p, size_t n);
void tk_strs_reserve(tk_strs *s, size_t count, size_t bytes); /* room for that many more */
void tk_strs_reset(tk_strs *s);
void tk_strs_free(tk_strs *s);

/* ---- regular expressions (PCRE2, Oniguruma iteration semantics) ---- */

typedef struct tk_span {
    size_t s, e;
} tk_span;

/* Per-call working memory: PCRE2 match data and JIT stack. Not shared between threads; every
 * encode/decode call makes its own. */
typedef struct tk_scratch tk_scratch;
tk_scratch *tk_scratch_new(void);
void tk_scratch_free(tk_scratch *sc);
tk_strs *tk_scratch_strs(tk_scratch *sc); /* a list kept for reuse between decoder steps */
/* Why a step of this call failed, when not for memory: the message of the CINFER_E_TOKENIZER status
 * the call returns. The first failure is kept. */
void tk_scratch_fail(tk_scratch *sc, const char *fmt, ...) CF_PRINTF(2, 3);
const char *tk_scratch_why(const tk_scratch *sc); /* NULL when none */

typedef struct tk_regex tk_regex;
/* literal: pattern is a plain string (HF's {"String": ...}), otherwise a regex in Oniguruma syntax. */
cinfer_status tk_regex_new(const char *pattern, size_t len, int literal, tk_regex **out, cinfer_error *err);
void tk_regex_free(tk_regex *re);
const char *tk_regex_source(const tk_regex *re); /* the pattern as tokenizer.json gives it */

/* Iterates the matches in s[0..n) in the order Oniguruma's find_iter yields them (the onig crate's
 * rule for empty matches included); like HF's Pattern::find_matches, an empty string has none. */
typedef struct tk_regex_iter {
    const char *s;
    size_t n, last_end;
    int skip_next_empty;
} tk_regex_iter;

void tk_regex_iter_init(tk_regex_iter *it, const char *s, size_t n);
/* 1 with the next match in *ms..*me, 0 when there is none, -1 when matching failed, TK_MATCH_LIMIT
 * when the pattern exceeded its match, depth or stack limit (catastrophic backtracking). */
enum { TK_MATCH_LIMIT = -2 };
int tk_regex_next(const tk_regex *re, tk_scratch *sc, tk_regex_iter *it, size_t *ms, size_t *me);

/* The code points Oniguruma (HF's regex engine) puts in Unicode property prop (a short name: L, Lu,
 * N, Nd, Alphabetic, ...) that PCRE2's older tables leave unassigned, as class ranges; "" if none.
 * Generated into tok_onig_classes.c by tools/text/make_onig_classes.js. */
const char *tk_onig_extra(const char *prop, size_t len);

/* HF's pattern object, {"String": literal} or {"Regex": pattern}; what names the owner in errors. */
cinfer_status tk_pattern_parse(const cJSON *pat, const char *what, tk_regex **out, cinfer_error *err);

/* ---- components ---- */

enum tk_split_behavior { TK_REMOVED, TK_ISOLATED, TK_MERGED_PREV, TK_MERGED_NEXT, TK_CONTIGUOUS };

/* Parses HF's SplitDelimiterBehavior name. -1 when unknown. */
int tk_behavior_parse(const char *name);

/* HF's NormalizedString::split as a stream: the (span, is_match) parts covering a string are fed in
 * order, and every part the behavior keeps (merged as it says) is passed to emit, which returns
 * non-zero to stop. */
typedef int (*tk_emit_fn)(void *ctx, size_t start, size_t end);
typedef struct tk_splitter {
    int behavior;
    tk_emit_fn emit;
    void *ctx;
    int has_pending, pending_match, prev;
    tk_span pending;
} tk_splitter;

void tk_splitter_init(tk_splitter *sp, int behavior, tk_emit_fn emit, void *ctx);
int tk_splitter_feed(tk_splitter *sp, size_t start, size_t end, int is_match);
int tk_splitter_finish(tk_splitter *sp);

typedef struct tk_normalizer tk_normalizer;
cinfer_status tk_normalizer_parse(const cJSON *j, tk_normalizer **out, cinfer_error *err);
void tk_normalizer_free(tk_normalizer *n);
/* out (reset first) receives the normalized s[0..len). 0, or -1 when out of memory. */
int tk_normalize(const tk_normalizer *n, tk_scratch *sc, const char *s, size_t len, tk_buf *out);

typedef struct tk_pretok tk_pretok;
cinfer_status tk_pretok_parse(const cJSON *j, tk_pretok **out, cinfer_error *err);
void tk_pretok_free(tk_pretok *p);
/* Pre-tokenizes one piece depth-first: every final split is passed to fn (non-zero return stops).
 * The piece pointer given to fn is valid only during the call. 0, or -1 when out of memory, matching
 * failed or fn returned non-zero. */
typedef int (*tk_piece_fn)(void *ctx, const char *s, size_t n);
int tk_pretokenize(const tk_pretok *p, tk_scratch *sc, const char *s, size_t n, int at_start, tk_piece_fn fn,
                   void *ctx);

typedef struct tk_decoder tk_decoder;
cinfer_status tk_decoder_parse(const cJSON *j, tk_decoder **out, cinfer_error *err);
void tk_decoder_free(tk_decoder *d);
/* Runs decode_chain over the token strings in io. 0, or -1 when out of memory. */
int tk_decode_chain(const tk_decoder *d, tk_scratch *sc, tk_strs *io);

typedef struct tk_post tk_post;
cinfer_status tk_post_parse(const cJSON *j, tk_post **out, cinfer_error *err);
void tk_post_free(tk_post *p);
/* out receives ids wrapped as the post-processor does for a single sequence. */
void tk_post_apply(const tk_post *p, int add_special, const int32_t *ids, size_t n, tk_ids *out);
/* Whether tk_post_apply would give the ids back unchanged. */
int tk_post_is_identity(const tk_post *p, int add_special);

/* ---- BPE model ---- */

typedef struct tk_bpe tk_bpe;
/* model: the "model" object with its "vocab" and "merges" left out; their JSON text is given
 * separately (vocab NULL when the file has none, likewise merges). */
cinfer_status tk_bpe_load(const cJSON *model, const char *vocab, const char *vocab_end, const char *merges,
                          const char *merges_end, tk_bpe **out, cinfer_error *err);
void tk_bpe_free(tk_bpe *b);
size_t tk_bpe_vocab_len(const tk_bpe *b); /* entries in the vocab (HF get_vocab_size) */
int32_t tk_bpe_id(const tk_bpe *b, const char *s, size_t n);
const char *tk_bpe_token(const tk_bpe *b, int32_t id, size_t *len); /* NULL when absent */
int32_t tk_bpe_max_id(const tk_bpe *b);                             /* -1 for an empty vocab */

/* Working memory of one encode call (symbols, heap). Words already merged are memoized inside the
 * model, behind a mutex, so a tk_bpe may be shared by threads each with its own tk_bpe_work. */
typedef struct tk_bpe_work tk_bpe_work;
tk_bpe_work *tk_bpe_work_new(void);
void tk_bpe_work_free(tk_bpe_work *w);
/* Appends the ids of one pre-tokenized piece. 0, or -1 when out of memory. */
int tk_bpe_encode(const tk_bpe *b, tk_bpe_work *w, const char *s, size_t n, tk_ids *out);

/* ---- added tokens ---- */

typedef struct tk_added_token {
    char *content;
    size_t len;
    char *norm; /* content after the normalizer, when normalized and different; else NULL */
    size_t norm_len;
    int32_t id;
    uint8_t special, lstrip, rstrip, single_word, normalized;
} tk_added_token;

typedef struct tk_added tk_added;
/* Registers the tokens of tokenizer.json's "added_tokens" in order, assigning ids the way HF's
 * AddedVocabulary::add_tokens does (the model's id when the content is in its vocab, else the next
 * free id). norm may be NULL. */
cinfer_status tk_added_build(const cJSON *arr, const tk_bpe *model, const tk_normalizer *norm, tk_added **out,
                             cinfer_error *err);
void tk_added_free(tk_added *a);
size_t tk_added_count(const tk_added *a);
const tk_added_token *tk_added_get(const tk_added *a, size_t i);
const tk_added_token *tk_added_by_id(const tk_added *a, int32_t id);
const tk_added_token *tk_added_by_content(const tk_added *a, const char *s, size_t n);
int tk_added_has_normalized(const tk_added *a);
/* Splits s[0..n) around the added tokens of one trie (normalized = 0: tokens matched on raw text;
 * 1: tokens matched after normalization), as AddedVocabulary::find_matches does, appending pieces to
 * out. skip_special: special tokens are not recognised (HF encode_special_tokens). */
void tk_added_split(const tk_added *a, int normalized, int skip_special, const char *s, size_t n, int at_start,
                    tk_pieces *out);

/* ---- JSON helpers ---- */

/* In-place scanning of JSON text (tok_json.c). Each returns the position after what it read, or
 * NULL when the text is malformed there. */
const char *tk_json_ws(const char *p, const char *end);
const char *tk_json_skip(const char *p, const char *end); /* one value */
/* Decodes the string at p (its opening quote) into out (reset first; NULL to only skip it). */
const char *tk_json_string(const char *p, const char *end, tk_buf *out);
/* Finds the member key of the object at obj: 1 with the value's text in [*v, *vend), 0 when absent,
 * -1 when malformed. */
int tk_json_member(const char *obj, const char *end, const char *key, const char **v, const char **vend);

/* String member or NULL. */
const char *tk_json_str(const cJSON *o, const char *key);
/* Boolean member, dflt when absent or null. */
int tk_json_bool(const cJSON *o, const char *key, int dflt);
/* The "type" of a component, or NULL. */
const char *tk_json_type(const cJSON *o);

#endif
