/* tok_added.c: added tokens (tokenizer.json "added_tokens"): id assignment as HF's
 * AddedVocabulary::add_tokens does it, and their recognition in text: a byte trie searched
 * leftmost-longest without overlaps (HF uses an Aho-Corasick automaton with the same match kind),
 * then the single_word / lstrip / rstrip / encode_special_tokens rules of find_matches, applied to
 * each match in turn exactly as HF does (a match that is dropped still consumes its text). */
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "text/tok_impl.h"

typedef struct trie {
    tk_u64map edges; /* (node << 8 | byte) -> child */
    int32_t *term;   /* node -> token index, -1 */
    size_t nodes, cap;
    uint8_t first[256];
    size_t patterns;
} trie;

struct tk_added {
    tk_added_token *toks;
    uint8_t *skip_if_special; /* content is one of the special tokens' contents */
    size_t n;
    tk_strmap by_content; /* content -> index */
    tk_u64map by_id;      /* id -> index */
    trie raw, norm;
};

static void trie_free(trie *t) {
    tk_u64map_free(&t->edges);
    free(t->term);
}

static int trie_node(trie *t) {
    if (t->nodes == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 256;
        int32_t *v = realloc(t->term, cap * sizeof *v);
        if (!v) return -1;
        t->term = v;
        t->cap = cap;
    }
    t->term[t->nodes] = -1;
    return (int)t->nodes++;
}

static int trie_init(trie *t) {
    memset(t, 0, sizeof *t);
    if (tk_u64map_init(&t->edges, 256)) return -1;
    return trie_node(t) < 0 ? -1 : 0;
}

/* Adds a pattern; a duplicate keeps its first token. */
static int trie_add(trie *t, const char *s, size_t n, int32_t tok) {
    if (n == 0) return 0;
    uint64_t node = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t key = node << 8 | (unsigned char)s[i], child;
        if (!tk_u64map_get(&t->edges, key, &child)) {
            int c = trie_node(t);
            if (c < 0 || tk_u64map_put(&t->edges, key, (uint64_t)c)) return -1;
            child = (uint64_t)c;
        }
        node = child;
    }
    if (t->term[node] < 0) {
        t->term[node] = tok;
        t->patterns++;
    }
    t->first[(unsigned char)s[0]] = 1;
    return 0;
}

/* Longest pattern starting at s[0]; returns its token index and sets *len, or -1. */
static int32_t trie_longest(const trie *t, const char *s, size_t n, size_t *len) {
    uint64_t node = 0, child;
    int32_t best = -1;
    for (size_t i = 0; i < n; i++) {
        if (!tk_u64map_get(&t->edges, node << 8 | (unsigned char)s[i], &child)) break;
        node = child;
        if (t->term[node] >= 0) {
            best = t->term[node];
            *len = i + 1;
        }
    }
    return best;
}

void tk_added_free(tk_added *a) {
    if (!a) return;
    for (size_t i = 0; i < a->n; i++) {
        free(a->toks[i].content);
        free(a->toks[i].norm);
    }
    free(a->toks);
    free(a->skip_if_special);
    tk_strmap_free(&a->by_content);
    tk_u64map_free(&a->by_id);
    trie_free(&a->raw);
    trie_free(&a->norm);
    free(a);
}

size_t tk_added_count(const tk_added *a) { return a->n; }
const tk_added_token *tk_added_get(const tk_added *a, size_t i) { return &a->toks[i]; }
int tk_added_has_normalized(const tk_added *a) { return a->norm.patterns > 0; }

const tk_added_token *tk_added_by_id(const tk_added *a, int32_t id) {
    uint64_t i;
    if (id < 0 || !tk_u64map_get(&a->by_id, (uint64_t)id, &i)) return NULL;
    return &a->toks[i];
}

const tk_added_token *tk_added_by_content(const tk_added *a, const char *s, size_t n) {
    int64_t i = tk_strmap_get(&a->by_content, s, n);
    return i < 0 ? NULL : &a->toks[i];
}

static int same_flags(const tk_added_token *t, const tk_added_token *u) {
    return t->special == u->special && t->lstrip == u->lstrip && t->rstrip == u->rstrip &&
           t->single_word == u->single_word && t->normalized == u->normalized;
}

cinfer_status tk_added_build(const cJSON *arr, const tk_bpe *model, const tk_normalizer *norm, tk_added **out,
                             cinfer_error *err) {
    *out = NULL;
    if (arr && !cJSON_IsNull(arr) && !cJSON_IsArray(arr))
        return cf_fail(err, CINFER_E_FORMAT, "\"added_tokens\" is not an array");
    size_t cnt = cJSON_IsArray(arr) ? (size_t)cJSON_GetArraySize(arr) : 0;
    tk_added *a = calloc(1, sizeof *a);
    if (!a) return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory loading added tokens");
    cinfer_status st = CINFER_OK;
    a->toks = calloc(cnt ? cnt : 1, sizeof *a->toks);
    a->skip_if_special = calloc(cnt ? cnt : 1, 1);
    if (!a->toks || !a->skip_if_special || tk_strmap_init(&a->by_content, cnt) || tk_u64map_init(&a->by_id, cnt) ||
        trie_init(&a->raw) || trie_init(&a->norm)) {
        tk_added_free(a);
        return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory loading added tokens");
    }
    int64_t next_id = (int64_t)tk_bpe_vocab_len(model);
    tk_strmap specials = {0};
    tk_buf nb = {0};
    tk_scratch *sc = tk_scratch_new();
    if (!sc || tk_strmap_init(&specials, 16)) st = cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory loading added tokens");
    const cJSON *it;
    if (!st) cJSON_ArrayForEach(it, arr) {
        const char *content = tk_json_str(it, "content");
        if (!content) {
            st = cf_fail(err, CINFER_E_FORMAT, "added token without a \"content\" string");
            break;
        }
        size_t len = strlen(content);
        if (len == 0) continue;
        tk_added_token t = {0};
        t.special = (uint8_t)tk_json_bool(it, "special", 0);
        t.lstrip = (uint8_t)tk_json_bool(it, "lstrip", 0);
        t.rstrip = (uint8_t)tk_json_bool(it, "rstrip", 0);
        t.single_word = (uint8_t)tk_json_bool(it, "single_word", 0);
        t.normalized = (uint8_t)tk_json_bool(it, "normalized", !t.special);
        const tk_added_token *old = tk_added_by_content(a, content, len);
        if (old && tk_added_by_id(a, old->id) == old && same_flags(old, &t)) continue;
        int32_t id = old ? old->id : tk_bpe_id(model, content, len);
        if (id < 0) {
            if (next_id > INT32_MAX) {
                st = cf_fail(err, CINFER_E_FORMAT, "too many added tokens");
                break;
            }
            id = (int32_t)next_id++;
        }
        t.id = id;
        t.len = len;
        t.content = malloc(len + 1);
        if (!t.content) {
            st = cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory loading added tokens");
            break;
        }
        memcpy(t.content, content, len + 1);
        if (t.normalized && norm) {
            if (tk_normalize(norm, sc, content, len, &nb)) {
                free(t.content);
                const char *why = tk_scratch_why(sc);
                st = why ? cf_fail(err, CINFER_E_TOKENIZER, "added token %.60s: %s", content, why)
                         : cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory normalizing added tokens");
                break;
            }
            if (nb.n != len || memcmp(nb.p, content, len) != 0) {
                t.norm = malloc(nb.n + 1);
                if (!t.norm) {
                    free(t.content);
                    st = cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory loading added tokens");
                    break;
                }
                memcpy(t.norm, nb.p ? nb.p : "", nb.n + 1);
                t.norm_len = nb.n;
            }
        }
        size_t idx = a->n++;
        a->toks[idx] = t;
        if (tk_strmap_put(&a->by_content, content, len, (int64_t)idx) || tk_u64map_put(&a->by_id, (uint64_t)id, idx) ||
            (t.special && tk_strmap_put(&specials, content, len, 1))) {
            st = cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory loading added tokens");
            break;
        }
    }
    for (size_t i = 0; !st && i < a->n; i++) {
        tk_added_token *t = &a->toks[i];
        a->skip_if_special[i] = tk_strmap_get(&specials, t->content, t->len) >= 0;
        if (tk_added_by_id(a, t->id) != t) continue; /* superseded by a later token with the same id */
        int rc = t->normalized ? trie_add(&a->norm, t->norm ? t->norm : t->content, t->norm ? t->norm_len : t->len,
                                          (int32_t)i)
                               : trie_add(&a->raw, t->content, t->len, (int32_t)i);
        if (rc) st = cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory loading added tokens");
    }
    tk_strmap_free(&specials);
    tk_buf_free(&nb);
    tk_scratch_free(sc);
    if (st) {
        tk_added_free(a);
        return st;
    }
    *out = a;
    return CINFER_OK;
}

static int32_t first_cp(const char *s, size_t n) {
    int32_t cp;
    tk_utf8_next(s, n, &cp);
    return cp;
}

static int32_t last_cp(const char *s, size_t n) {
    size_t i = tk_utf8_last(s, n);
    int32_t cp;
    tk_utf8_next(s + i, n - i, &cp);
    return cp;
}

void tk_added_split(const tk_added *a, int normalized, int skip_special, const char *s, size_t n, int at_start,
                    tk_pieces *out) {
    const trie *t = normalized ? &a->norm : &a->raw;
    if (n == 0) return;
    if (t->patterns == 0) {
        tk_pieces_add(out, s, n, -1, at_start);
        return;
    }
    size_t start_offset = 0, pos = 0;
    while (pos < n) {
        if (!t->first[(unsigned char)s[pos]]) {
            pos++;
            continue;
        }
        size_t len = 0;
        int32_t ti = trie_longest(t, s + pos, n - pos, &len);
        if (ti < 0) {
            pos++;
            continue;
        }
        size_t start = pos, stop = pos + len;
        pos = stop;
        const tk_added_token *tok = &a->toks[ti];
        if (skip_special && a->skip_if_special[ti]) continue;
        if (tok->single_word) {
            int start_space = start == 0 || !tk_is_word(last_cp(s, start));
            int stop_space = stop == n || !tk_is_word(first_cp(s + stop, n - stop));
            if (!start_space || !stop_space) continue;
        }
        if (tok->lstrip) {
            size_t ns = start;
            while (ns > 0) {
                size_t k = tk_utf8_last(s, ns);
                if (!tk_is_whitespace(last_cp(s, ns))) break;
                ns = k;
            }
            start = ns > start_offset ? ns : start_offset;
        }
        if (tok->rstrip) {
            while (stop < n) {
                int32_t cp;
                size_t k = tk_utf8_next(s + stop, n - stop, &cp);
                if (!tk_is_whitespace(cp)) break;
                stop += k;
            }
        }
        if (start_offset < start) tk_pieces_add(out, s + start_offset, start - start_offset, -1, at_start && start_offset == 0);
        tk_pieces_add(out, "", 0, tok->id, 0);
        start_offset = stop;
    }
    if (start_offset < n) tk_pieces_add(out, s + start_offset, n - start_offset, -1, at_start && start_offset == 0);
}
