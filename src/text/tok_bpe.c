/* tok_bpe.c: the BPE model of tokenizer.json: vocabulary and merge tables, and HF's merge order (the
 * lowest-ranked adjacent pair first, leftmost among equals) run with a binary heap over a linked list
 * of symbols, so a word of n characters costs O(n log n). Supports byte_fallback, unk_token with
 * fuse_unk, ignore_merges, continuing_subword_prefix and end_of_word_suffix. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "text/tok_impl.h"

#define MEMO_MAX_ENTRIES 200000 /* then the memo stops growing, as HF's cache does */
#define MEMO_MAX_WORD 256
#define SPLIT_MIN_WORD 64 /* longer words are cut where no merge can cross */
#define L1_SLOTS 4096     /* per-call memo of short words, in front of the shared one */
#define L1_AFTER 256      /* ... made once a call has encoded that many words */
#define L1_WORD 22
#define L1_IDS 4

struct tk_bpe {
    tk_strmap vocab;
    tk_buf strs;          /* all token strings */
    size_t *tok_off;      /* per id, SIZE_MAX when absent */
    uint32_t *tok_len;
    int32_t max_id;
    size_t vocab_len;
    tk_u64map merges;     /* (a << 32 | b) -> (rank << 32 | merged id) */
    int32_t *char_id;     /* 0x10000 entries: id of the one-character token, -1; NULL with prefix/suffix */
    tk_u64map bigrams;    /* (cp1 << 21 | cp2) for each pair of adjacent characters inside a token */
    int32_t byte_id[256]; /* "<0xXX>" tokens, -1 when absent */
    int byte_fallback, fuse_unk, ignore_merges;
    int32_t unk_id;       /* -1: no unk_token */
    char *prefix, *suffix; /* NULL when absent or empty */
    size_t prefix_len, suffix_len;
    /* memo of merged words, shared by all threads: word -> (offset in memo_ids << 8 | count) */
    pthread_mutex_t lock;
    tk_strmap memo;
    tk_ids memo_ids;
};

typedef struct sym {
    int32_t c, prev, next;
    uint32_t len; /* 0: merged away */
} sym;

typedef struct hitem {
    uint32_t rank, pos;
    int32_t id;
} hitem;

typedef struct l1slot {
    uint64_t h;
    uint8_t len, cnt; /* len 0: empty */
    char word[L1_WORD];
    int32_t ids[L1_IDS];
} l1slot;

struct tk_bpe_work {
    l1slot *l1;
    size_t words;
    sym *syms;
    size_t syms_cap;
    hitem *heap;
    size_t heap_n, heap_cap;
    tk_buf key;
};

void tk_bpe_free(tk_bpe *b) {
    if (!b) return;
    tk_strmap_free(&b->vocab);
    tk_buf_free(&b->strs);
    free(b->tok_off);
    free(b->tok_len);
    tk_u64map_free(&b->merges);
    free(b->char_id);
    tk_u64map_free(&b->bigrams);
    free(b->prefix);
    free(b->suffix);
    pthread_mutex_destroy(&b->lock);
    tk_strmap_free(&b->memo);
    tk_ids_free(&b->memo_ids);
    free(b);
}

size_t tk_bpe_vocab_len(const tk_bpe *b) { return b->vocab_len; }
int32_t tk_bpe_max_id(const tk_bpe *b) { return b->max_id; }

int32_t tk_bpe_id(const tk_bpe *b, const char *s, size_t n) { return (int32_t)tk_strmap_get(&b->vocab, s, n); }

const char *tk_bpe_token(const tk_bpe *b, int32_t id, size_t *len) {
    if (id < 0 || id > b->max_id || b->tok_off[id] == SIZE_MAX) return NULL;
    *len = b->tok_len[id];
    return b->strs.p + b->tok_off[id];
}

static char *opt_str(const cJSON *model, const char *key, size_t *len) {
    const char *s = tk_json_str(model, key);
    *len = 0;
    if (!s || !*s) return NULL;
    *len = strlen(s);
    char *d = malloc(*len + 1);
    if (d) memcpy(d, s, *len + 1);
    return d;
}

static cinfer_status bad_json(const char *what, cinfer_error *err) {
    return cf_fail(err, CINFER_E_FORMAT, "model \"%s\" is malformed JSON", what);
}

/* {"token": id, ...} */
static cinfer_status load_vocab(tk_bpe *b, const char *p, const char *end, cinfer_error *err) {
    if (!p) return cf_fail(err, CINFER_E_FORMAT, "BPE model without a \"vocab\" object");
    p = tk_json_ws(p, end);
    if (p >= end || *p != '{') return cf_fail(err, CINFER_E_FORMAT, "BPE model \"vocab\" is not an object");
    /* first pass: count entries and find the largest id */
    tk_buf key = {0};
    size_t count = 0;
    b->max_id = -1;
    for (int pass = 0; pass < 2; pass++) {
        const char *q = tk_json_ws(p + 1, end);
        if (pass == 1) {
            /* the tables are indexed by id: a few ids far past the entries would make them huge */
            if ((size_t)b->max_id > 2 * count + 65536) {
                tk_buf_free(&key);
                return cf_fail(err, CINFER_E_FORMAT, "BPE vocab ids are too sparse: id %d among %zu entries", (int)b->max_id, count);
            }
            size_t ids = (size_t)b->max_id + 1;
            b->tok_off = malloc((ids ? ids : 1) * sizeof *b->tok_off);
            b->tok_len = malloc((ids ? ids : 1) * sizeof *b->tok_len);
            if (!b->tok_off || !b->tok_len || tk_strmap_init(&b->vocab, count)) {
                tk_buf_free(&key);
                return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory loading the vocabulary");
            }
            for (size_t i = 0; i < ids; i++) b->tok_off[i] = SIZE_MAX;
        }
        if (q < end && *q == '}') break;
        for (;;) {
            q = tk_json_string(tk_json_ws(q, end), end, pass ? &key : NULL);
            if (q) q = tk_json_ws(q, end);
            if (!q || q >= end || *q++ != ':') {
                tk_buf_free(&key);
                return key.oom ? cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory loading the vocabulary")
                               : bad_json("vocab", err);
            }
            q = tk_json_ws(q, end);
            int64_t id = 0;
            const char *d = q;
            while (q < end && *q >= '0' && *q <= '9' && id <= INT32_MAX) id = id * 10 + (*q++ - '0');
            if (q == d || id > INT32_MAX - 1 || (q < end && strchr(".eE", *q))) {
                tk_buf_free(&key);
                return cf_fail(err, CINFER_E_FORMAT, "vocab entry %zu has no valid id", count + 1);
            }
            if (pass == 0) {
                count++;
                if (id > b->max_id) b->max_id = (int32_t)id;
            } else {
                b->tok_off[id] = b->strs.n;
                b->tok_len[id] = (uint32_t)key.n;
                tk_buf_put(&b->strs, key.p ? key.p : "", key.n);
                if (b->strs.oom || tk_strmap_put(&b->vocab, key.p ? key.p : "", key.n, id)) {
                    tk_buf_free(&key);
                    return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory loading the vocabulary");
                }
            }
            q = tk_json_ws(q, end);
            if (q < end && *q == '}') break;
            if (q >= end || *q++ != ',') {
                tk_buf_free(&key);
                return bad_json("vocab", err);
            }
        }
    }
    tk_buf_free(&key);
    if (!b->vocab.slots && tk_strmap_init(&b->vocab, 1))
        return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory loading the vocabulary");
    b->vocab_len = b->vocab.count;
    return CINFER_OK;
}

static cinfer_status add_merge(tk_bpe *b, const char *l, size_t ll, const char *r, size_t rl, uint32_t rank,
                               tk_buf *tmp, cinfer_error *err) {
    int32_t a = tk_bpe_id(b, l, ll), c = tk_bpe_id(b, r, rl);
    if (a < 0 || c < 0)
        return cf_fail(err, CINFER_E_FORMAT, "merge %u: token \"%.*s\" is not in the vocabulary", rank + 1,
                       (int)(a < 0 ? ll : rl), a < 0 ? l : r);
    size_t skip = b->prefix_len <= rl ? b->prefix_len : rl; /* HF drops the prefix length from the right part */
    tmp->n = 0;
    tk_buf_put(tmp, l, ll);
    tk_buf_put(tmp, r + skip, rl - skip);
    if (tmp->oom) return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory loading merges");
    int32_t m = tk_bpe_id(b, tmp->p, tmp->n);
    if (m < 0)
        return cf_fail(err, CINFER_E_FORMAT, "merge %u: merged token \"%.*s\" is not in the vocabulary", rank + 1,
                       (int)tmp->n, tmp->p);
    if (tk_u64map_put(&b->merges, (uint64_t)a << 32 | (uint32_t)c, (uint64_t)rank << 32 | (uint32_t)m))
        return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory loading merges");
    return CINFER_OK;
}

/* ["a b", ...] or [["a", "b"], ...] */
static cinfer_status load_merges(tk_bpe *b, const char *p, const char *end, cinfer_error *err) {
    if (!p) return cf_fail(err, CINFER_E_FORMAT, "BPE model without a \"merges\" array");
    p = tk_json_ws(p, end);
    if (p >= end || *p != '[') return cf_fail(err, CINFER_E_FORMAT, "BPE model \"merges\" is not an array");
    size_t approx = 0;
    for (const char *q = p; q < end; q++) approx += *q == '"';
    if (tk_u64map_init(&b->merges, approx / 2 + 1))
        return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory loading merges");
    tk_buf l = {0}, r = {0}, tmp = {0};
    cinfer_status st = CINFER_OK;
    uint32_t rank = 0;
    const char *q = tk_json_ws(p + 1, end);
    const int empty = q < end && *q == ']';
    while (!empty && q && !st) {
        q = tk_json_ws(q, end);
        if (q < end && *q == '"') {
            q = tk_json_string(q, end, &l);
            if (!q) break;
            int version = l.n >= 8 && memcmp(l.p, "#version", 8) == 0; /* a merges.txt header line */
            const char *sp = l.n ? memchr(l.p, ' ', l.n) : NULL;
            if (!version && (!sp || memchr(sp + 1, ' ', l.n - (size_t)(sp + 1 - l.p)))) {
                st = cf_fail(err, CINFER_E_FORMAT, "merge %u (\"%.60s\") is not two tokens separated by one space",
                             rank + 1, l.p ? l.p : "");
                break;
            }
            if (!version)
                st = add_merge(b, l.p, (size_t)(sp - l.p), sp + 1, l.n - (size_t)(sp + 1 - l.p), rank++, &tmp, err);
        } else if (q < end && *q == '[') {
            q = tk_json_string(tk_json_ws(q + 1, end), end, &l);
            if (q) q = tk_json_ws(q, end);
            if (!q || q >= end || *q++ != ',') {
                st = cf_fail(err, CINFER_E_FORMAT, "merge %u is neither \"a b\" nor [\"a\", \"b\"]", rank + 1);
                break;
            }
            q = tk_json_string(tk_json_ws(q, end), end, &r);
            if (q) q = tk_json_ws(q, end);
            if (!q || q >= end || *q++ != ']') {
                st = cf_fail(err, CINFER_E_FORMAT, "merge %u is neither \"a b\" nor [\"a\", \"b\"]", rank + 1);
                break;
            }
            st = add_merge(b, l.p ? l.p : "", l.n, r.p ? r.p : "", r.n, rank++, &tmp, err);
        } else {
            st = cf_fail(err, CINFER_E_FORMAT, "merge %u is neither \"a b\" nor [\"a\", \"b\"]", rank + 1);
            break;
        }
        q = tk_json_ws(q, end);
        if (q < end && *q == ']') break;
        if (q >= end || *q++ != ',') q = NULL;
    }
    if (!st && !empty && !q) st = l.oom || r.oom ? cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory loading merges")
                                       : bad_json("merges", err);
    tk_buf_free(&l);
    tk_buf_free(&r);
    tk_buf_free(&tmp);
    return st;
}

cinfer_status tk_bpe_load(const cJSON *model, const char *vocab, const char *vocab_end, const char *merges,
                          const char *merges_end, tk_bpe **out, cinfer_error *err) {
    *out = NULL;
    const cJSON *dropout = cJSON_GetObjectItemCaseSensitive(model, "dropout");
    if (cJSON_IsNumber(dropout) && dropout->valuedouble != 0.0)
        return cf_fail(err, CINFER_E_UNSUPPORTED, "BPE dropout %g is not supported (encoding would be random)",
                       dropout->valuedouble);
    tk_bpe *b = calloc(1, sizeof *b);
    if (!b) return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory loading the tokenizer");
    if (pthread_mutex_init(&b->lock, NULL)) {
        free(b);
        return cf_fail(err, CINFER_E_INTERNAL, "cannot create a mutex");
    }
    b->prefix = opt_str(model, "continuing_subword_prefix", &b->prefix_len);
    b->suffix = opt_str(model, "end_of_word_suffix", &b->suffix_len);
    b->byte_fallback = tk_json_bool(model, "byte_fallback", 0);
    b->fuse_unk = tk_json_bool(model, "fuse_unk", 0);
    b->ignore_merges = tk_json_bool(model, "ignore_merges", 0);
    cinfer_status st = load_vocab(b, vocab, vocab_end, err);
    if (!st) st = load_merges(b, merges, merges_end, err);
    b->unk_id = -1;
    const char *unk = tk_json_str(model, "unk_token");
    if (!st && unk) {
        b->unk_id = tk_bpe_id(b, unk, strlen(unk));
        if (b->unk_id < 0) st = cf_fail(err, CINFER_E_FORMAT, "unk_token \"%.60s\" is not in the vocabulary", unk);
    }
    for (int i = 0; !st && i < 256; i++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", i);
        b->byte_id[i] = tk_bpe_id(b, name, 6);
    }
    if (!st && !b->prefix && !b->suffix) {
        b->char_id = malloc(0x10000 * sizeof *b->char_id);
        if (!b->char_id) st = cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory loading the tokenizer");
        for (int32_t i = 0; !st && i < 0x10000; i++) b->char_id[i] = -1;
        if (!st && tk_u64map_init(&b->bigrams, 4096))
            st = cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory loading the tokenizer");
        for (int32_t id = 0; !st && id <= b->max_id; id++) {
            size_t len;
            const char *s = tk_bpe_token(b, id, &len);
            int32_t cp, prev = -1;
            if (!s || !len || tk_utf8_valid_prefix(s, len) != len) continue;
            if (tk_utf8_next(s, len, &cp) == len && cp < 0x10000 && tk_bpe_id(b, s, len) == id) b->char_id[cp] = id;
            for (size_t i = 0; i < len && !st; prev = cp) {
                i += tk_utf8_next(s + i, len - i, &cp);
                if (prev >= 0 && tk_u64map_put(&b->bigrams, (uint64_t)prev << 21 | (uint64_t)cp, 1))
                    st = cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory loading the tokenizer");
            }
        }
    }
    if ((b->prefix_len && !b->prefix) || (b->suffix_len && !b->suffix) || (!st && tk_strmap_init(&b->memo, 4096)))
        st = cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory loading the tokenizer");
    if (st) {
        tk_bpe_free(b);
        return st;
    }
    *out = b;
    return CINFER_OK;
}

tk_bpe_work *tk_bpe_work_new(void) { return calloc(1, sizeof(tk_bpe_work)); }

void tk_bpe_work_free(tk_bpe_work *c) {
    if (!c) return;
    free(c->l1);
    free(c->syms);
    free(c->heap);
    tk_buf_free(&c->key);
    free(c);
}

static inline int hless(const hitem *a, const hitem *b) {
    return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

static int heap_push(tk_bpe_work *c, hitem it) {
    if (c->heap_n == c->heap_cap) {
        size_t cap = c->heap_cap ? c->heap_cap * 2 : 64;
        hitem *h = realloc(c->heap, cap * sizeof *h);
        if (!h) return -1;
        c->heap = h;
        c->heap_cap = cap;
    }
    size_t i = c->heap_n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!hless(&it, &c->heap[p])) break;
        c->heap[i] = c->heap[p];
        i = p;
    }
    c->heap[i] = it;
    return 0;
}

static hitem heap_pop(tk_bpe_work *c) {
    hitem top = c->heap[0], last = c->heap[--c->heap_n];
    size_t i = 0, n = c->heap_n;
    for (;;) {
        size_t l = 2 * i + 1;
        if (l >= n) break;
        size_t m = (l + 1 < n && hless(&c->heap[l + 1], &c->heap[l])) ? l + 1 : l;
        if (!hless(&c->heap[m], &last)) break;
        c->heap[i] = c->heap[m];
        i = m;
    }
    if (n) c->heap[i] = last;
    return top;
}

static int lookup_merge(const tk_bpe *b, int32_t l, int32_t r, uint32_t *rank, int32_t *id) {
    uint64_t v;
    if (!tk_u64map_get(&b->merges, (uint64_t)l << 32 | (uint32_t)r, &v)) return 0;
    *rank = (uint32_t)(v >> 32);
    *id = (int32_t)(uint32_t)v;
    return 1;
}

static int add_sym(tk_bpe_work *c, size_t *n, int32_t id, uint32_t len) {
    if (*n == c->syms_cap) {
        size_t cap = c->syms_cap ? c->syms_cap * 2 : 64;
        sym *s = realloc(c->syms, cap * sizeof *s);
        if (!s) return -1;
        c->syms = s;
        c->syms_cap = cap;
    }
    c->syms[*n] = (sym){id, (int32_t)*n - 1, -1, len};
    if (*n > 0) c->syms[*n - 1].next = (int32_t)*n;
    (*n)++;
    return 0;
}

/* Initial symbols of a word (BPE::merge_word before merge_all). Returns the count, -1 when out of memory. */
static long word_symbols(const tk_bpe *b, tk_bpe_work *c, const char *s, size_t n) {
    size_t ns = 0;
    int32_t unk = -1;
    uint32_t unk_len = 0;
    for (size_t i = 0; i < n;) {
        int32_t cp;
        size_t k = tk_utf8_next(s + i, n - i, &cp);
        int32_t id;
        const char *key = s + i;
        size_t key_len = k;
        if (b->char_id && cp < 0x10000) {
            id = b->char_id[cp];
        } else {
            if (b->prefix || b->suffix) {
                c->key.n = 0;
                if (i > 0) tk_buf_put(&c->key, b->prefix, b->prefix_len);
                tk_buf_put(&c->key, s + i, k);
                if (i + k == n) tk_buf_put(&c->key, b->suffix, b->suffix_len);
                if (c->key.oom) return -1;
                key = c->key.p;
                key_len = c->key.n;
            }
            id = tk_bpe_id(b, key, key_len);
        }
        i += k;
        if (id >= 0) {
            if (unk >= 0 && add_sym(c, &ns, unk, unk_len)) return -1;
            unk = -1;
            if (add_sym(c, &ns, id, (uint32_t)k)) return -1;
            continue;
        }
        if (b->byte_fallback) {
            size_t j = 0;
            while (j < key_len && b->byte_id[(unsigned char)key[j]] >= 0) j++;
            if (j == key_len) { /* HF leaves a pending unk pending here */
                for (j = 0; j < key_len; j++)
                    if (add_sym(c, &ns, b->byte_id[(unsigned char)key[j]], 1)) return -1;
                continue;
            }
        }
        if (b->unk_id < 0) continue;
        if (unk >= 0 && b->fuse_unk) {
            unk_len += (uint32_t)k;
            continue;
        }
        if (unk >= 0 && add_sym(c, &ns, unk, unk_len)) return -1;
        unk = b->unk_id;
        unk_len = (uint32_t)k;
    }
    if (unk >= 0 && add_sym(c, &ns, unk, unk_len)) return -1;
    return (long)ns;
}

static int merge_all(const tk_bpe *b, tk_bpe_work *c, size_t ns) {
    sym *sy = c->syms;
    c->heap_n = 0;
    for (size_t i = 0; i + 1 < ns; i++) {
        uint32_t rank;
        int32_t id;
        if (lookup_merge(b, sy[i].c, sy[i + 1].c, &rank, &id) && heap_push(c, (hitem){rank, (uint32_t)i, id}))
            return -1;
    }
    while (c->heap_n) {
        hitem top = heap_pop(c);
        sym *cur = &c->syms[top.pos];
        if (cur->len == 0 || cur->next < 0) continue;
        sym right = c->syms[cur->next];
        uint32_t rank;
        int32_t id;
        if (!lookup_merge(b, cur->c, right.c, &rank, &id) || id != top.id) continue;
        c->syms[cur->next].len = 0;
        cur->c = top.id;
        cur->len += right.len;
        cur->next = right.next;
        if (right.next >= 0) c->syms[right.next].prev = (int32_t)top.pos;
        if (cur->prev >= 0 && lookup_merge(b, c->syms[cur->prev].c, cur->c, &rank, &id) &&
            heap_push(c, (hitem){rank, (uint32_t)cur->prev, id}))
            return -1;
        cur = &c->syms[top.pos];
        if (cur->next >= 0 && lookup_merge(b, cur->c, c->syms[cur->next].c, &rank, &id) &&
            heap_push(c, (hitem){rank, top.pos, id}))
            return -1;
    }
    return 0;
}

/* BPE of one word, memoized. */
static void l1_put(tk_bpe_work *c, l1slot *slot, uint64_t h, const char *s, size_t n, const int32_t *ids, size_t cnt) {
    if (!slot || n > L1_WORD || cnt > L1_IDS) return;
    slot->h = h;
    slot->len = (uint8_t)n;
    slot->cnt = (uint8_t)cnt;
    memcpy(slot->word, s, n);
    if (cnt) memcpy(slot->ids, ids, cnt * sizeof *ids);
}

static int encode_word(const tk_bpe *b, tk_bpe_work *c, const char *s, size_t n, tk_ids *out) {
    tk_bpe *shared = (tk_bpe *)b; /* only the memo, under its lock */
    int memo = n < MEMO_MAX_WORD;
    uint64_t h = 0;
    l1slot *slot = NULL;
    if (memo) {
        h = tk_hash(s, n);
        if (!c->l1 && ++c->words > L1_AFTER) c->l1 = calloc(L1_SLOTS, sizeof *c->l1);
        if (c->l1) {
            slot = &c->l1[h & (L1_SLOTS - 1)];
            if (slot->h == h && slot->len == n && memcmp(slot->word, s, n) == 0) {
                tk_ids_append(out, slot->ids, slot->cnt);
                return out->oom ? -1 : 0;
            }
        }
        pthread_mutex_lock(&shared->lock);
        int64_t v = tk_strmap_get_h(&b->memo, s, n, h);
        size_t first = out->n;
        /* a word may encode to no ids (characters without a token and no unk): no pointer arithmetic
         * on the arrays then, which may still be NULL */
        if (v >= 0 && (v & 0xFF)) tk_ids_append(out, b->memo_ids.v + (v >> 8), (size_t)(v & 0xFF));
        pthread_mutex_unlock(&shared->lock);
        if (v >= 0 && !out->oom) l1_put(c, slot, h, s, n, out->n > first ? out->v + first : NULL, out->n - first);
        if (v >= 0) return out->oom ? -1 : 0;
    }
    if (n > INT32_MAX) return -1;
    long ns = word_symbols(b, c, s, n);
    if (ns < 0 || merge_all(b, c, (size_t)ns)) return -1;
    size_t first = out->n;
    for (long i = 0; i < ns; i++)
        if (c->syms[i].len) tk_ids_push(out, c->syms[i].c);
    if (out->oom) return -1;
    size_t cnt = out->n - first;
    if (memo && cnt < 256) {
        const int32_t *got = cnt ? out->v + first : NULL;
        l1_put(c, slot, h, s, n, got, cnt);
        pthread_mutex_lock(&shared->lock);
        if (b->memo.count < MEMO_MAX_ENTRIES && tk_strmap_get_h(&b->memo, s, n, h) < 0) {
            size_t off = b->memo_ids.n;
            if (cnt) tk_ids_append(&shared->memo_ids, got, cnt);
            if (shared->memo_ids.oom) shared->memo_ids.oom = 0, shared->memo_ids.n = off;
            else if (tk_strmap_put_h(&shared->memo, s, n, h, (int64_t)(off << 8 | cnt))) shared->memo_ids.n = off;
        }
        pthread_mutex_unlock(&shared->lock);
    }
    return 0;
}

/* Whether a character is a token of its own (so its symbol's text is exactly the character). */
static int plain_char(const tk_bpe *b, int32_t cp, const char *s, size_t k) {
    return cp < 0x10000 ? b->char_id[cp] >= 0 : tk_bpe_id(b, s, k) >= 0;
}

int tk_bpe_encode(const tk_bpe *b, tk_bpe_work *c, const char *s, size_t n, tk_ids *out) {
    if (n == 0) return 0;
    if (b->ignore_merges) {
        int32_t id = tk_bpe_id(b, s, n);
        if (id >= 0) {
            tk_ids_push(out, id);
            return out->oom ? -1 : 0;
        }
    }
    if (n < SPLIT_MIN_WORD || !b->char_id) return encode_word(b, c, s, n, out);
    /* A merge across two adjacent characters would make a token holding that pair; where no token
     * does, the two sides merge independently and the word can be cut there. */
    size_t start = 0, i = 0;
    int32_t prev = -1;
    int prev_plain = 0;
    while (i < n) {
        int32_t cp;
        size_t k = tk_utf8_next(s + i, n - i, &cp);
        int plain = plain_char(b, cp, s + i, k);
        uint64_t v;
        if (plain && prev_plain && !tk_u64map_get(&b->bigrams, (uint64_t)prev << 21 | (uint64_t)cp, &v)) {
            if (encode_word(b, c, s + start, i - start, out)) return -1;
            start = i;
        }
        prev = cp;
        prev_plain = plain;
        i += k;
    }
    return encode_word(b, c, s + start, n - start, out);
}
