/* replay.c: the replay ("oracle") draft provider of spec/replay.h: recorded sequences proposed as drafts. */
#include "spec/replay.h"
#include "base/status.h"

#include <stdlib.h>
#include <string.h>

typedef struct replay_provider {
    cf_draft_provider base;
    int32_t **seqs;
    int *lens;
    int n_seqs;
} replay_provider;

typedef struct replay_source {
    cf_draft_source base;
    int which;          /* the recording followed; -1 = none */
    int n;              /* committed tokens */
} replay_source;

/* The longest recording that begins with ids[0, n), or -1. */
static int match(const replay_provider *p, const int32_t *ids, int n) {
    int best = -1;
    for (int i = 0; i < p->n_seqs; i++)
        if (p->lens[i] >= n && !memcmp(p->seqs[i], ids, (size_t)n * sizeof *ids) && (best < 0 || p->lens[i] > p->lens[best]))
            best = i;
    return best;
}

static cinfer_status rp_prefill(cf_draft_source *base, const int32_t *ids, int n, cinfer_error *err) {
    replay_source *s = (replay_source *)base;
    s->which = match((const replay_provider *)base->provider, ids, n);
    s->n = n;
    return CINFER_OK;
}

static cinfer_status rp_draft(cf_draft_source *base, int want, int32_t *out, int *got, cinfer_error *err) {
    replay_source *s = (replay_source *)base;
    const replay_provider *p = (const replay_provider *)base->provider;
    *got = 0;
    if (s->which < 0) return CINFER_OK;
    int k = p->lens[s->which] - s->n;
    if (k > want) k = want;
    if (k <= 0) return CINFER_OK;
    memcpy(out, p->seqs[s->which] + s->n, (size_t)k * sizeof *out);
    *got = k;
    return CINFER_OK;
}

static cinfer_status rp_commit(cf_draft_source *base, int accepted, const int32_t *ids, int n, cinfer_error *err) {
    replay_source *s = (replay_source *)base;
    const replay_provider *p = (const replay_provider *)base->provider;
    if (n < s->n || s->which < 0 || p->lens[s->which] < n ||
        memcmp(p->seqs[s->which] + s->n, ids + s->n, (size_t)(n - s->n) * sizeof *ids))
        s->which = match(p, ids, n);
    s->n = n;
    return CINFER_OK;
}

static void rp_close(cf_draft_source *s) {
    free(s);
}

static const cf_draft_source_ops replay_source_ops = {rp_prefill, rp_draft, rp_commit, rp_close};

static cinfer_status rp_open(cf_draft_provider *base, cf_draft_source **out, cinfer_error *err) {
    replay_source *s = calloc(1, sizeof *s);
    if (!s) return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory for a replay source");
    s->base.ops = &replay_source_ops;
    s->base.provider = base;
    s->which = -1;
    *out = &s->base;
    return CINFER_OK;
}

static void rp_free(cf_draft_provider *base) {
    replay_provider *p = (replay_provider *)base;
    for (int i = 0; i < p->n_seqs; i++) free(p->seqs[i]);
    free(p->seqs);
    free(p->lens);
    free(p);
}

/* A copy of seq[0, len) (one spare slot, so that len 0 allocates), or NULL. */
static int32_t *copy_seq(const int32_t *seq, int len) {
    int32_t *s = malloc(((size_t)len + 1) * sizeof *s);
    if (s && len) memcpy(s, seq, (size_t)len * sizeof *s);
    return s;
}

static const cf_draft_provider_ops replay_provider_ops = {.name = "oracle", .open = rp_open, .draft_many = NULL, .free = rp_free};

cinfer_status cf_replay_provider_create(const int32_t *const *seqs, const int *lens, int n_seqs, cf_draft_provider **out,
                                        cinfer_error *err) {
    *out = NULL;
    if (n_seqs < 0) return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "replay provider: %d sequences", n_seqs);
    replay_provider *p = calloc(1, sizeof *p);
    if (p) {
        p->seqs = calloc((size_t)n_seqs + 1, sizeof *p->seqs);
        p->lens = calloc((size_t)n_seqs + 1, sizeof *p->lens);
    }
    if (!p || !p->seqs || !p->lens) goto oom;
    p->base.ops = &replay_provider_ops;
    for (int i = 0; i < n_seqs; i++) {
        if (lens[i] < 0) {
            rp_free(&p->base);
            return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "replay provider: sequence %d has length %d", i, lens[i]);
        }
        if (!(p->seqs[i] = copy_seq(seqs[i], lens[i]))) goto oom;
        p->lens[i] = lens[i];
        p->n_seqs = i + 1;
    }
    *out = &p->base;
    return CINFER_OK;
oom:
    if (p && p->seqs && p->lens) rp_free(&p->base);
    else if (p) {
        free(p->seqs);
        free(p->lens);
        free(p);
    }
    return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory for the replay provider");
}

cinfer_status cf_replay_provider_replace(cf_draft_provider *base, int i, const int32_t *seq, int len, cinfer_error *err) {
    replay_provider *p = (replay_provider *)base;
    if (!p || base->ops != &replay_provider_ops || i < 0 || i >= p->n_seqs || len < 0)
        return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "replay provider: no recording %d to replace (or length %d)", i, len);
    int32_t *s = copy_seq(seq, len);
    if (!s) return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory for the replay provider");
    free(p->seqs[i]);
    p->seqs[i] = s;
    p->lens[i] = len;
    return CINFER_OK;
}
