/* ngram.c: the n-gram draft source (prompt lookup). Each source keeps its committed context and an open-addressed
 * hash table from every n-gram (min_n <= n <= max_n) that has a following token to the position of that token,
 * the most recent occurrence winning. The table is updated as tokens are committed (each new token adds one entry
 * per n), so a draft is max_n - min_n + 1 lookups, never a rescan of the context. Entries are verified against the
 * context, so a hash collision never proposes a wrong continuation (it only costs a probe). */
#include "spec/ngram.h"
#include "base/status.h"

#include <stdlib.h>
#include <string.h>

typedef struct ngram_provider {
    cf_draft_provider base;
    int min_n, max_n;
} ngram_provider;

typedef struct ngram_source {
    cf_draft_source base;
    int min_n, max_n;
    int32_t *ids;       /* the committed context */
    int n, cap;
    int32_t *slot;      /* [mask + 1]: 0 = empty, else 1 + (position of the token that followed) */
    uint8_t *slot_n;    /* the n of the n-gram in that slot */
    uint32_t mask;
    int used;
} ngram_source;

static uint32_t gram_hash(const int32_t *g, int n) {
    uint64_t h = 0x9e3779b97f4a7c15ull ^ (uint64_t)n;
    for (int i = 0; i < n; i++) {
        h ^= (uint32_t)g[i];
        h *= 0xbf58476d1ce4e5b9ull;
        h ^= h >> 29;
    }
    return (uint32_t)(h ^ (h >> 32));
}

/* The slot of the n-gram g: where it is, or the empty slot where it would go. */
static uint32_t find_slot(const ngram_source *s, const int32_t *g, int n) {
    uint32_t i = gram_hash(g, n) & s->mask;
    for (;;) {
        int32_t v = s->slot[i];
        if (!v) return i;
        int follow = v - 1;
        if (s->slot_n[i] == n && !memcmp(s->ids + follow - n, g, (size_t)n * sizeof *g)) return i;
        i = (i + 1) & s->mask;
    }
}

/* Records the n-grams that end just before position p (the token at p follows them). */
static void index_position(ngram_source *s, int p) {
    for (int n = s->min_n; n <= s->max_n && n <= p; n++) {
        uint32_t i = find_slot(s, s->ids + p - n, n);
        if (!s->slot[i]) s->used++;
        s->slot[i] = p + 1;
        s->slot_n[i] = (uint8_t)n;
    }
}

/* Room for the table to hold want entries at a load of at most 1/2. */
static cinfer_status table_reserve(ngram_source *s, int64_t want, cinfer_error *err) {
    uint64_t cap = (uint64_t)s->mask + 1;
    if (s->slot && (uint64_t)want * 2 <= cap) return CINFER_OK;
    if (!s->slot) cap = 256;
    while ((uint64_t)want * 2 > cap) cap *= 2;
    if (cap > (1ull << 30)) return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "n-gram table of %llu slots is too large", (unsigned long long)cap);
    int32_t *slot = calloc(cap, sizeof *slot);
    uint8_t *slot_n = calloc(cap, 1);
    if (!slot || !slot_n) {
        free(slot);
        free(slot_n);
        return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory for an n-gram table of %llu slots", (unsigned long long)cap);
    }
    free(s->slot);
    free(s->slot_n);
    s->slot = slot;
    s->slot_n = slot_n;
    s->mask = (uint32_t)(cap - 1);
    s->used = 0;
    for (int p = 1; p < s->n; p++) index_position(s, p);
    return CINFER_OK;
}

/* Appends ids[0, k) to the context and indexes them. */
static cinfer_status append(ngram_source *s, const int32_t *ids, int k, cinfer_error *err) {
    if (k <= 0) return CINFER_OK;
    if (s->n + k > s->cap) {
        int cap = s->cap ? s->cap : 256;
        while (cap < s->n + k) cap *= 2;
        int32_t *p = realloc(s->ids, (size_t)cap * sizeof *p);
        if (!p) return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory for an n-gram context of %d tokens", cap);
        s->ids = p;
        s->cap = cap;
    }
    const int per = s->max_n - s->min_n + 1;
    CF_TRY(table_reserve(s, (int64_t)s->used + (int64_t)k * per, err));
    memcpy(s->ids + s->n, ids, (size_t)k * sizeof *ids);
    const int from = s->n;
    s->n += k;
    for (int p = from > 0 ? from : 1; p < s->n; p++) index_position(s, p);
    return CINFER_OK;
}

static cinfer_status ng_prefill(cf_draft_source *base, const int32_t *ids, int n, cinfer_error *err) {
    ngram_source *s = (ngram_source *)base;
    s->n = 0;
    if (s->slot) {
        memset(s->slot, 0, ((size_t)s->mask + 1) * sizeof *s->slot);
        s->used = 0;
    }
    return append(s, ids, n, err);
}

static cinfer_status ng_draft(cf_draft_source *base, int want, int32_t *out, int *got, cinfer_error *err) {
    ngram_source *s = (ngram_source *)base;
    *got = 0;
    if (!s->slot) return CINFER_OK;
    for (int n = s->max_n < s->n ? s->max_n : s->n - 1; n >= s->min_n; n--) {
        uint32_t i = find_slot(s, s->ids + s->n - n, n);
        if (!s->slot[i]) continue;
        const int follow = s->slot[i] - 1, period = s->n - follow;
        /* What followed the earlier occurrence; past the end of the context the text is taken to go on
         * repeating with the period the match implies. */
        for (int k = 0; k < want; k++) out[k] = follow + k < s->n ? s->ids[follow + k] : out[k - period];
        *got = want;
        return CINFER_OK;
    }
    return CINFER_OK;
}

static cinfer_status ng_commit(cf_draft_source *base, int accepted, const int32_t *ids, int n, cinfer_error *err) {
    ngram_source *s = (ngram_source *)base;
    if (n < s->n) return ng_prefill(base, ids, n, err);
    return append(s, ids + s->n, n - s->n, err);
}

static void ng_close(cf_draft_source *base) {
    ngram_source *s = (ngram_source *)base;
    if (!s) return;
    free(s->ids);
    free(s->slot);
    free(s->slot_n);
    free(s);
}

static const cf_draft_source_ops ngram_source_ops = {ng_prefill, ng_draft, ng_commit, ng_close};

static cinfer_status ng_open(cf_draft_provider *base, cf_draft_source **out, cinfer_error *err) {
    ngram_provider *p = (ngram_provider *)base;
    ngram_source *s = calloc(1, sizeof *s);
    if (!s) return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory for an n-gram source");
    s->base.ops = &ngram_source_ops;
    s->base.provider = base;
    s->min_n = p->min_n;
    s->max_n = p->max_n;
    *out = &s->base;
    return CINFER_OK;
}

static void ng_free(cf_draft_provider *p) {
    free(p);
}

static const cf_draft_provider_ops ngram_provider_ops = {.name = "ngram", .open = ng_open, .draft_many = NULL, .free = ng_free};

cinfer_status cf_ngram_provider_create(int min_n, int max_n, cf_draft_provider **out, cinfer_error *err) {
    *out = NULL;
    if (!min_n && !max_n) {
        min_n = CF_NGRAM_MIN_N;
        max_n = CF_NGRAM_MAX_N;
    }
    if (min_n < 1 || max_n < min_n || max_n > 16)
        return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "n-gram sizes %d..%d: they must satisfy 1 <= min <= max <= 16", min_n, max_n);
    ngram_provider *p = calloc(1, sizeof *p);
    if (!p) return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory for the n-gram provider");
    p->base.ops = &ngram_provider_ops;
    p->min_n = min_n;
    p->max_n = max_n;
    *out = &p->base;
    return CINFER_OK;
}
