/* tokenizer.c: cf_tokenizer (text/tokenizer.h): loads tokenizer.json and the BOS/EOS settings of
 * tokenizer_config.json, special_tokens_map.json and generation_config.json, and runs the pipeline
 * of HF tokenizers 0.23: added tokens on the raw text -> normalizer -> added tokens on the
 * normalized text -> pre-tokenizer -> BPE -> post-processor; decoding maps ids to token strings and
 * runs the decoder. Input that is not valid UTF-8 is first repaired as described in tokenizer.h. */
#include "text/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/file.h"
#include "base/status.h"
#include "text/tok_impl.h"

struct cf_tokenizer {
    tk_bpe *model;
    tk_normalizer *norm;
    tk_pretok *pretok;
    tk_post *post;
    tk_decoder *dec;
    tk_added *added_vocab;
    int32_t n_ids;    /* 1 + the largest id */
    int32_t n_model;  /* ids decode() accepts: [0, max(n_ids, n_model)); those without text decode to nothing */
    uint8_t *special; /* per id: skipped by decode(skip_special) */
    int32_t *added;   /* per id: index of its added token, -1 */
    int32_t bos_id;
    char *bos_text, *eos_text;
    int32_t *eos;
    int n_eos;
};

void cf_tokenizer_free(cf_tokenizer *tok) {
    if (!tok) return;
    tk_bpe_free(tok->model);
    tk_normalizer_free(tok->norm);
    tk_pretok_free(tok->pretok);
    tk_post_free(tok->post);
    tk_decoder_free(tok->dec);
    tk_added_free(tok->added_vocab);
    free(tok->special);
    free(tok->added);
    free(tok->bos_text);
    free(tok->eos_text);
    free(tok->eos);
    free(tok);
}

static cinfer_status parse_text(const char *data, size_t len, cJSON **out, cinfer_error *err) {
    const char *end = NULL;
    *out = cJSON_ParseWithLengthOpts(data, len, &end, 0);
    if (*out) return CINFER_OK;
    size_t at = end && end >= data && end <= data + len ? (size_t)(end - data) : 0, line = 1;
    for (size_t i = 0; i < at; i++) line += data[i] == '\n';
    return cf_fail(err, CINFER_E_FORMAT, "malformed JSON near line %zu (byte %zu)", line, at);
}

static cinfer_status parse_json(const char *path, int optional, cJSON **out, cinfer_error *err) {
    char *data;
    size_t len;
    *out = NULL;
    CF_TRY(cf_file_read(path, CF_FILE_MAX_CONFIG, optional, &data, &len, err));
    if (!data) return CINFER_OK;
    cinfer_status st = parse_text(data, len, out, err);
    free(data);
    return st ? cf_wrap(err, st, "%s", path) : st;
}

static char *xstrdup(const char *s) {
    size_t n = strlen(s);
    char *d = malloc(n + 1);
    if (d) memcpy(d, s, n + 1);
    return d;
}

int32_t cf_tokenizer_token_id(const cf_tokenizer *tok, const char *token) {
    size_t n = strlen(token);
    const tk_added_token *a = tk_added_by_content(tok->added_vocab, token, n);
    return a ? a->id : tk_bpe_id(tok->model, token, n);
}

const char *cf_tokenizer_token_text(const cf_tokenizer *tok, int32_t id) {
    const tk_added_token *a = tk_added_by_id(tok->added_vocab, id);
    size_t len;
    return a ? a->content : tk_bpe_token(tok->model, id, &len);
}

/* The string decode() uses for an id: an added token's (normalized) content, else the model's. */
static const char *decode_text(const cf_tokenizer *tok, int32_t id, size_t *len) {
    const tk_added_token *a = tok->added[id] >= 0 ? tk_added_get(tok->added_vocab, (size_t)tok->added[id]) : NULL;
    if (a) {
        *len = a->norm ? a->norm_len : a->len;
        return a->norm ? a->norm : a->content;
    }
    return tk_bpe_token(tok->model, id, len);
}

/* bos_token / eos_token of tokenizer_config.json or special_tokens_map.json: a string, an
 * AddedToken object with "content", or null. Returns 1 when the key is present (text NULL for null). */
static int config_token(const cJSON *cfg, const char *key, const char **text) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
    *text = NULL;
    if (!v) return 0;
    if (cJSON_IsString(v)) *text = v->valuestring;
    else if (cJSON_IsObject(v)) *text = tk_json_str(v, "content");
    return 1;
}

static int add_eos(cf_tokenizer *tok, int32_t id) {
    if (id < 0) return 0;
    for (int i = 0; i < tok->n_eos; i++)
        if (tok->eos[i] == id) return 0;
    int32_t *v = realloc(tok->eos, (size_t)(tok->n_eos + 1) * sizeof *v);
    if (!v) return -1;
    tok->eos = v;
    tok->eos[tok->n_eos++] = id;
    return 0;
}

static cinfer_status load_special_config(cf_tokenizer *tok, const char *dir, cinfer_error *err) {
    char path[4096];
    cJSON *cfg = NULL, *map = NULL, *gen = NULL;
    cinfer_status st;
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    st = parse_json(path, 1, &cfg, err);
    snprintf(path, sizeof path, "%s/special_tokens_map.json", dir);
    if (!st) st = parse_json(path, 1, &map, err);
    snprintf(path, sizeof path, "%s/generation_config.json", dir);
    if (!st) st = parse_json(path, 1, &gen, err);
    const char *bos = NULL, *eos = NULL;
    int has_bos = 0;
    if (!st) {
        has_bos = config_token(cfg, "bos_token", &bos) || config_token(map, "bos_token", &bos);
        if (!config_token(cfg, "eos_token", &eos)) config_token(map, "eos_token", &eos);
        tok->bos_id = bos ? cf_tokenizer_token_id(tok, bos) : -1;
        const cJSON *gb = cJSON_GetObjectItemCaseSensitive(gen, "bos_token_id");
        if (!has_bos && cJSON_IsNumber(gb) && gb->valuedouble >= 0 && gb->valuedouble < tok->n_ids)
            tok->bos_id = (int32_t)gb->valuedouble;
        if (tok->bos_id >= 0) {
            const char *t = bos ? bos : cf_tokenizer_token_text(tok, tok->bos_id);
            if (t && !(tok->bos_text = xstrdup(t))) st = CINFER_E_OUT_OF_MEMORY;
        }
        if (!st && eos && add_eos(tok, cf_tokenizer_token_id(tok, eos))) st = CINFER_E_OUT_OF_MEMORY;
        const cJSON *ge = cJSON_GetObjectItemCaseSensitive(gen, "eos_token_id"), *it;
        if (!st && cJSON_IsNumber(ge) && ge->valuedouble >= 0 && ge->valuedouble < tok->n_ids &&
            add_eos(tok, (int32_t)ge->valuedouble))
            st = CINFER_E_OUT_OF_MEMORY;
        if (!st && cJSON_IsArray(ge)) cJSON_ArrayForEach(it, ge) {
            if (cJSON_IsNumber(it) && it->valuedouble >= 0 && it->valuedouble < tok->n_ids &&
                add_eos(tok, (int32_t)it->valuedouble)) {
                st = CINFER_E_OUT_OF_MEMORY;
                break;
            }
        }
        if (!st && (eos || tok->n_eos)) {
            const char *t = eos ? eos : cf_tokenizer_token_text(tok, tok->eos[0]);
            if (t && !(tok->eos_text = xstrdup(t))) st = CINFER_E_OUT_OF_MEMORY;
        }
        if (st) st = cf_fail(err, st, "out of memory loading the tokenizer configuration");
    }
    cJSON_Delete(cfg);
    cJSON_Delete(map);
    cJSON_Delete(gen);
    return st;
}

/* The raw JSON of the model's vocab and merges, which tk_bpe_load reads in place. */
typedef struct bulk {
    const char *vocab, *vocab_end, *merges, *merges_end;
} bulk;

static cinfer_status build(cf_tokenizer *tok, const cJSON *root, const bulk *bk, cinfer_error *err) {
    const char *version = tk_json_str(root, "version");
    if (version && strcmp(version, "1.0") != 0)
        return cf_fail(err, CINFER_E_UNSUPPORTED, "tokenizer.json version %s is not supported (expected 1.0)", version);
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (!cJSON_IsObject(model)) return cf_fail(err, CINFER_E_FORMAT, "tokenizer.json has no \"model\" object");
    const char *type = tk_json_type(model);
    if (type && strcmp(type, "BPE") != 0)
        return cf_fail(err, CINFER_E_UNSUPPORTED, "tokenizer model type %s is not supported (only BPE is)", type);
    if (!type && !cJSON_GetObjectItemCaseSensitive(model, "merges"))
        return cf_fail(err, CINFER_E_UNSUPPORTED, "tokenizer model without a type and without merges: only BPE is supported");
    CF_TRY(tk_bpe_load(model, bk->vocab, bk->vocab_end, bk->merges, bk->merges_end, &tok->model, err));
    const cJSON *c;
    if ((c = cJSON_GetObjectItemCaseSensitive(root, "normalizer")) && !cJSON_IsNull(c))
        CF_TRY(tk_normalizer_parse(c, &tok->norm, err));
    if ((c = cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer")) && !cJSON_IsNull(c))
        CF_TRY(tk_pretok_parse(c, &tok->pretok, err));
    if ((c = cJSON_GetObjectItemCaseSensitive(root, "post_processor")) && !cJSON_IsNull(c))
        CF_TRY(tk_post_parse(c, &tok->post, err));
    if ((c = cJSON_GetObjectItemCaseSensitive(root, "decoder")) && !cJSON_IsNull(c))
        CF_TRY(tk_decoder_parse(c, &tok->dec, err));
    CF_TRY(tk_added_build(cJSON_GetObjectItemCaseSensitive(root, "added_tokens"), tok->model, tok->norm, &tok->added_vocab,
                          err));
    int32_t max = tk_bpe_max_id(tok->model);
    for (size_t i = 0; i < tk_added_count(tok->added_vocab); i++)
        if (tk_added_get(tok->added_vocab, i)->id > max) max = tk_added_get(tok->added_vocab, i)->id;
    tok->n_ids = max + 1;
    tok->special = calloc((size_t)tok->n_ids + 1, 1);
    tok->added = malloc(((size_t)tok->n_ids + 1) * sizeof *tok->added);
    if (!tok->added) return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory loading the tokenizer");
    for (int32_t id = 0; id < tok->n_ids; id++) tok->added[id] = -1;
    for (size_t i = 0; i < tk_added_count(tok->added_vocab); i++) {
        const tk_added_token *a = tk_added_get(tok->added_vocab, i);
        if (tk_added_by_id(tok->added_vocab, a->id) == a) tok->added[a->id] = (int32_t)i;
    }
    tk_strmap specials = {0};
    if (!tok->special || tk_strmap_init(&specials, 16)) {
        tk_strmap_free(&specials);
        return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory loading the tokenizer");
    }
    int oom = 0;
    for (size_t i = 0; i < tk_added_count(tok->added_vocab); i++) {
        const tk_added_token *a = tk_added_get(tok->added_vocab, i);
        if (a->special && tk_strmap_put(&specials, a->content, a->len, 1)) oom = 1;
    }
    for (int32_t id = 0; id < tok->n_ids && !oom && specials.count; id++) {
        size_t len;
        const char *s = decode_text(tok, id, &len);
        tok->special[id] = s && tk_strmap_get(&specials, s, len) >= 0;
    }
    tk_strmap_free(&specials);
    return oom ? cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory loading the tokenizer") : CINFER_OK;
}

/* Parses tokenizer.json text: the model's "vocab" and "merges" are located and read in place, and
 * the rest, with those two replaced by empty values, goes through cJSON. */
static cinfer_status from_text(const char *text, size_t len, cf_tokenizer **out, cinfer_error *err) {
    *out = NULL;
    const char *end = text + len, *model = NULL, *model_end = NULL;
    bulk bk = {NULL, NULL, NULL, NULL};
    if (tk_utf8_valid_prefix(text, len) != len)
        return cf_fail(err, CINFER_E_FORMAT, "not UTF-8 (byte %zu)", tk_utf8_valid_prefix(text, len));
    if (tk_json_member(text, end, "model", &model, &model_end) == 1) {
        tk_json_member(model, model_end, "vocab", &bk.vocab, &bk.vocab_end);
        tk_json_member(model, model_end, "merges", &bk.merges, &bk.merges_end);
    }
    /* the text with the two spans (in file order) replaced by {} and [] */
    const char *cut[2][2] = {{bk.vocab, bk.vocab_end}, {bk.merges, bk.merges_end}};
    const char *fill[2] = {"{}", "[]"};
    int first = bk.vocab && bk.merges && bk.merges < bk.vocab;
    tk_buf small = {0};
    const char *at = text;
    for (int k = 0; k < 2; k++) {
        int i = k ^ first;
        if (!cut[i][0]) continue;
        tk_buf_put(&small, at, (size_t)(cut[i][0] - at));
        tk_buf_put(&small, fill[i], 2);
        at = cut[i][1];
    }
    tk_buf_put(&small, at, (size_t)(end - at));
    if (small.oom) {
        tk_buf_free(&small);
        return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory loading a tokenizer");
    }
    cJSON *root;
    cinfer_status st = parse_text(small.p, small.n, &root, err);
    tk_buf_free(&small);
    if (st) return st;
    cf_tokenizer *tok = calloc(1, sizeof *tok);
    if (!tok) st = cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory loading a tokenizer");
    else {
        tok->bos_id = -1;
        st = build(tok, root, &bk, err);
    }
    cJSON_Delete(root);
    if (st) {
        cf_tokenizer_free(tok);
        return st;
    }
    *out = tok;
    return CINFER_OK;
}

cinfer_status cf_tokenizer_load_json(const char *json, size_t len, cf_tokenizer **out, cinfer_error *err) {
    return from_text(json, len, out, err);
}

cinfer_status cf_tokenizer_load(const char *dir, cf_tokenizer **out, cinfer_error *err) {
    *out = NULL;
    char path[4096];
    if (snprintf(path, sizeof path, "%s/tokenizer.json", dir) >= (int)sizeof path)
        return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "tokenizer directory path is too long");
    char *text;
    size_t len;
    CF_TRY(cf_file_read(path, CF_FILE_MAX_CONFIG, 0, &text, &len, err));
    cf_tokenizer *tok = NULL;
    cinfer_status st = from_text(text, len, &tok, err);
    free(text);
    if (st) return cf_wrap(err, st, "%s", path);
    st = load_special_config(tok, dir, err);
    if (st) {
        cf_tokenizer_free(tok);
        return st;
    }
    *out = tok;
    return CINFER_OK;
}

typedef struct bpe_ctx {
    const tk_bpe *model;
    tk_bpe_work *cache;
    tk_ids *ids;
} bpe_ctx;

static int bpe_piece(void *ctx, const char *s, size_t n) {
    bpe_ctx *c = ctx;
    return tk_bpe_encode(c->model, c->cache, s, n, c->ids);
}

/* Everything after the added tokens of the raw text: one piece of it. */
static int encode_piece(const cf_tokenizer *tok, tk_scratch *sc, tk_bpe_work *cache, int skip_special,
                        const char *s, size_t n, int at_start, tk_buf *nb, tk_pieces *b, tk_ids *ids) {
    if (tok->norm) {
        if (tk_normalize(tok->norm, sc, s, n, nb)) return -1;
        s = nb->p ? nb->p : "";
        n = nb->n;
    }
    b->n = 0;
    if (tk_added_has_normalized(tok->added_vocab)) tk_added_split(tok->added_vocab, 1, skip_special, s, n, at_start, b);
    else tk_pieces_add(b, s, n, -1, at_start);
    if (b->oom) return -1;
    bpe_ctx ctx = {tok->model, cache, ids};
    for (size_t i = 0; i < b->n; i++) {
        const char *p = b->v[i].p;
        size_t len = b->v[i].len;
        if (b->v[i].id >= 0) tk_ids_push(ids, b->v[i].id);
        else if (tok->pretok ? tk_pretokenize(tok->pretok, sc, p, len, b->v[i].at_start, bpe_piece, &ctx)
                             : bpe_piece(&ctx, p, len))
            return -1;
    }
    return ids->oom ? -1 : 0;
}

cinfer_status cf_tokenizer_encode(const cf_tokenizer *tok, const char *text, size_t len, int flags, int32_t **ids,
                                  size_t *n_ids, cinfer_error *err) {
    *ids = NULL;
    *n_ids = 0;
    if (!text && len) return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "encode: text is NULL");
    if (!text) text = "";
    tk_buf fixed = {0}, nb = {0};
    if (tk_utf8_valid_prefix(text, len) != len) {
        tk_utf8_repair(text, len, &fixed);
        if (fixed.oom) {
            tk_buf_free(&fixed);
            return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory encoding %zu bytes", len);
        }
        text = fixed.p;
        len = fixed.n;
    }
    int skip_special = !(flags & CF_TOK_PARSE_SPECIAL);
    tk_scratch *sc = tk_scratch_new();
    tk_bpe_work *cache = tk_bpe_work_new();
    tk_pieces a = {0}, b = {0};
    tk_ids raw = {0}, done = {0};
    int rc = (!sc || !cache) ? -1 : 0;
    if (!rc) {
        tk_added_split(tok->added_vocab, 0, skip_special, text, len, 1, &a);
        rc = a.oom ? -1 : 0;
    }
    for (size_t i = 0; i < a.n && !rc; i++) {
        if (a.v[i].id >= 0) tk_ids_push(&raw, a.v[i].id);
        else rc = encode_piece(tok, sc, cache, skip_special, a.v[i].p, a.v[i].len, a.v[i].at_start, &nb,
                               &b, &raw);
    }
    int add = (flags & CF_TOK_ADD_SPECIAL) != 0;
    if (!rc && tok->post && !tk_post_is_identity(tok->post, add)) {
        tk_post_apply(tok->post, add, raw.v, raw.n, &done);
        rc = (raw.oom || done.oom) ? -1 : 0;
    } else if (!rc) {
        rc = raw.oom ? -1 : 0;
        done = raw;
        raw = (tk_ids){0};
    }
    cinfer_status st = CINFER_OK;
    if (rc && tk_scratch_why(sc)) st = cf_fail(err, CINFER_E_TOKENIZER, "%s", tk_scratch_why(sc));
    else if (rc) st = cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory encoding %zu bytes", len);
    tk_scratch_free(sc);
    tk_bpe_work_free(cache);
    tk_pieces_free(&a);
    tk_pieces_free(&b);
    tk_ids_free(&raw);
    tk_buf_free(&nb);
    tk_buf_free(&fixed);
    if (st) {
        tk_ids_free(&done);
        return st;
    }
    if (!done.v && !(done.v = malloc(sizeof *done.v)))
        return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory encoding %zu bytes", len);
    *ids = done.v;
    *n_ids = done.n;
    return CINFER_OK;
}

cinfer_status cf_tokenizer_decode(const cf_tokenizer *tok, const int32_t *ids, size_t n_ids, int skip_special,
                                  char **text, size_t *len, cinfer_error *err) {
    *text = NULL;
    *len = 0;
    if (!ids && n_ids) return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "decode: ids is NULL");
    int32_t limit = tok->n_model > tok->n_ids ? tok->n_model : tok->n_ids;
    for (size_t i = 0; i < n_ids; i++)
        if (ids[i] < 0 || ids[i] >= limit)
            return cf_fail(err, CINFER_E_TOKEN_OUT_OF_RANGE, "decode: id %d (position %zu) is outside the vocabulary [0, %d)",
                           (int)ids[i], i, (int)limit);
    tk_strs toks = {0};
    tk_strs_reserve(&toks, n_ids, n_ids * 4);
    for (size_t i = 0; i < n_ids; i++) {
        size_t tl = 0;
        const char *t = ids[i] < tok->n_ids ? decode_text(tok, ids[i], &tl) : NULL;
        if (!t) continue; /* an id without text (a padded row of the model's embedding): nothing, as in HF */
        if (skip_special && tok->special[ids[i]]) continue;
        tk_strs_add(&toks, t, tl);
    }
    int rc = toks.oom ? -1 : 0;
    tk_buf out = {0};
    if (!rc && tok->dec) {
        tk_scratch *sc = tk_scratch_new();
        rc = !sc || tk_decode_chain(tok->dec, sc, &toks);
        if (rc && tk_scratch_why(sc)) {
            cinfer_status st = cf_fail(err, CINFER_E_TOKENIZER, "%s", tk_scratch_why(sc));
            tk_scratch_free(sc);
            tk_strs_free(&toks);
            return st;
        }
        tk_scratch_free(sc);
        if (!rc) tk_buf_put(&out, toks.text.p ? toks.text.p : "", toks.text.n);
    } else if (!rc) {
        for (size_t i = 0; i < toks.n; i++) {
            if (i) tk_buf_putc(&out, ' ');
            tk_buf_put(&out, toks.text.p + toks.off[i], toks.len[i]);
        }
    }
    tk_strs_free(&toks);
    if (rc || out.oom || tk_buf_reserve(&out, 0)) {
        tk_buf_free(&out);
        return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory decoding %zu ids", n_ids);
    }
    *len = out.n;
    *text = tk_buf_take(&out);
    return CINFER_OK;
}

int32_t cf_tokenizer_vocab_size(const cf_tokenizer *tok) { return tok->n_ids; }

void cf_tokenizer_set_model_vocab(cf_tokenizer *tok, int32_t n) { tok->n_model = n; }
int32_t cf_tokenizer_bos_id(const cf_tokenizer *tok) { return tok->bos_id; }

int cf_tokenizer_eos_ids(const cf_tokenizer *tok, const int32_t **ids) {
    *ids = tok->eos;
    return tok->n_eos;
}

int cf_tokenizer_is_special(const cf_tokenizer *tok, int32_t id) {
    return id >= 0 && id < tok->n_ids && tok->special[id];
}

const char *cf_tokenizer_bos_text(const cf_tokenizer *tok) { return tok->bos_text; }
const char *cf_tokenizer_eos_text(const cf_tokenizer *tok) { return tok->eos_text; }
