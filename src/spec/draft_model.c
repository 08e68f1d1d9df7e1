/* draft_model.c: the draft-model provider (spec/draft_model.h). It owns a model runner on the draft model (its
 * scratch, its paged KV memory and its decode graphs) and, per open source, one runner sequence and a copy of
 * the committed context. A draft is the draft model's greedy continuation of that context, picked on the device
 * (only ids come back); drafting for many sources runs one runner step per drafted position over all of them.
 *
 * A source's sequence is kept a prefix of what it has seen (the committed context, then its own proposals):
 * commit truncates it to the longest prefix it shares with the new context (cf_rseq_truncate is exact; to 0 where
 * the draft's sliding-window layers no longer hold what that prefix needs, cf_rseq_floor), and the
 * next draft feeds what it lacks (after adopting the prefix cache when it is empty) together with the context's
 * last token, whose pick is the first proposal. The last proposal is never fed (it needs no KV).
 *
 * KV memory: room for max_seqs contexts of min(draft context, target context) tokens, but at most a quarter of
 * what the backend reports free when the provider is made (so a draft made before or after the engine's runner
 * leaves the target most of the memory). Sources may be opened past max_seqs: drafting then goes in groups of
 * max_seqs per step, and a step the KV pool cannot hold gives those sources no drafts.
 *
 * Errors: drafting never fails a request. A step that fails (out of KV blocks, a device error) ends drafting for
 * the sources of that step with the drafts they already have (0 when it was the first step); the runner leaves
 * their sequences as before the failed step, so the next draft goes on from there. A context the draft model
 * cannot read (an id past its vocabulary, longer than its context) gives no drafts. Only arguments that break the
 * contract (a source of another provider, one source twice, n outside its range) and out of host memory while
 * copying a context are errors; they change nothing.
 *
 * Not thread-safe: one thread (the scheduler) drives the provider and all its sources. */
#include "spec/draft_model.h"
#include "base/status.h"
#include "engine/engine.h"
#include "kv/kv_pool.h"
#include "model/runner.h"
#include "text/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct dm_provider dm_provider;

typedef struct dm_source {
    cf_draft_source base;            /* first: a cf_draft_source * is a dm_source * */
    dm_provider *p;
    struct dm_source *prev, *next;   /* the provider's open sources */
    cf_rseq *seq;                    /* the draft model's KV: a prefix of the context, then proposals */
    int32_t *ctx;                    /* the committed context [n_ctx] */
    int n_ctx, cap;
    int bad_at;                      /* first position of ctx the draft model cannot read, or -1 */
    /* one drafting call */
    int in_call, want, got, stopped;
} dm_source;

struct dm_provider {
    cf_draft_provider base;          /* first */
    cinfer_model *target, *draft;
    cf_runner *runner;
    int max_seqs;                    /* sequences per runner step */
    int budget;                      /* rows per runner step */
    int max_ctx;                     /* the draft runner's context */
    int32_t draft_limit;             /* proposals are below it: the target's vocabulary and the tokenizer's */
    int host_pick;                   /* the backend has no argmax: greedy from logits read back */
    dm_source *open;                 /* list of open sources */
    int n_open;
    cf_batch_item *items;            /* [max_seqs] */
    dm_source **grp;                 /* [max_seqs]: the sources of a step, by item */
    int32_t **grp_out;               /* [max_seqs]: their output arrays */
    dm_source **gsrc;                /* [max_seqs]: the sources of a group */
    int32_t **gout;                  /* [max_seqs] */
};

static const cf_sample_args greedy_args = {.temperature = 0.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f};

/* ---- the context ---- */

/* The length of the longest common prefix of a[0, n) and b[0, n): memcmp a block at a time, then the block that differs. */
static int common_prefix(const int32_t *a, const int32_t *b, int n) {
    int i = 0;
    while (i + 256 <= n && !memcmp(a + i, b + i, 256 * sizeof *a)) i += 256;
    while (i < n && a[i] == b[i]) i++;
    return i;
}

/* Makes ctx ids[0, n) and cuts the sequence to what it shares with it (leaving at least the last token to feed,
 * whose logits the first draft needs). All or nothing. */
static cinfer_status set_context(dm_source *s, const int32_t *ids, int n, const char *what, cinfer_error *err) {
    if (n < 1 || !ids) return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "draft %s: a context of %d tokens (at least 1)", what, n);
    if (n > s->cap) {
        int cap = s->cap ? s->cap : 256;
        while (cap < n) cap = cap > INT32_MAX / 2 ? n : cap * 2;
        int32_t *c = realloc(s->ctx, (size_t)cap * sizeof *c);
        if (!c) return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "draft %s: out of memory for a context of %d tokens", what, n);
        s->ctx = c;
        s->cap = cap;
    }
    /* the sequence keeps its longest prefix shared with ids, at most n - 1 tokens */
    const int len = cf_rseq_len(s->seq);
    const int32_t *toks = cf_rseq_tokens(s->seq);
    int keep = common_prefix(toks, ids, len < n - 1 ? len : n - 1);
    if (keep > 0 && keep < cf_rseq_floor(s->seq)) keep = 0;   /* sliding-window layers freed what it needs: start over */
    if (keep < len) CF_TRY(cf_rseq_truncate(s->seq, keep, err));
    /* the context: only its changed tail is copied */
    const int same = common_prefix(s->ctx, ids, s->n_ctx < n ? s->n_ctx : n);
    if (n > same) memcpy(s->ctx + same, ids + same, (size_t)(n - same) * sizeof *ids);
    s->n_ctx = n;
    /* the first unreadable id: one kept from the unchanged part still holds, else look in the new tail */
    if (s->bad_at < 0 || s->bad_at >= same) {
        const int32_t V = s->p->draft->m->hp.vocab;
        s->bad_at = -1;
        for (int i = same; i < n && s->bad_at < 0; i++)
            if (ids[i] < 0 || ids[i] >= V) s->bad_at = i;
    }
    return CINFER_OK;
}

static cinfer_status dm_prefill(cf_draft_source *src, const int32_t *ids, int n, cinfer_error *err) {
    return set_context((dm_source *)src, ids, n, "prefill", err);
}

static cinfer_status dm_commit(cf_draft_source *src, int accepted, const int32_t *ids, int n, cinfer_error *err) {
    if (accepted < 0 || accepted > CF_DRAFT_MAX)
        return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "draft commit: %d accepted drafts (0 to %d)", accepted, CF_DRAFT_MAX);
    return set_context((dm_source *)src, ids, n, "commit", err);
}

/* ---- drafting ---- */

/* How many tokens source s can draft now (at most want), its sequence made ready: a prefix of the context
 * shorter than it, the prefix cache adopted when empty. */
static int prepare(dm_source *s, int want) {
    const dm_provider *p = s->p;
    if (want <= 0 || s->n_ctx < 1 || s->bad_at >= 0) return 0;
    /* draft j (0-based) is picked after the sequence holds n_ctx + j tokens */
    const int room = p->max_ctx - s->n_ctx + 1;
    if (room < want) want = room;
    if (want <= 0) return 0;
    if (cf_rseq_len(s->seq) == 0) {
        int reused = 0;
        cinfer_error e = {0};
        if (cf_rseq_adopt_prefix(s->seq, s->ctx, s->n_ctx, &reused, &e) != CINFER_OK) return 0;
    }
    if (cf_rseq_len(s->seq) >= s->n_ctx) return 0;   /* set_context and adopt_prefix keep one token to feed */
    return want;
}

static int missing(const dm_source *s) { return s->n_ctx - cf_rseq_len(s->seq); }

/* Host greedy pick (backends without argmax): the largest logit, ties to the lowest id; -1 if not finite. */
static int32_t host_argmax(const float *x, int64_t n) {
    int32_t best = 0;
    for (int64_t i = 0; i < n; i++) {
        if (x[i] != x[i] || x[i] > 3.0e38f) return -1;
        if (x[i] > x[best]) best = (int32_t)i;
    }
    return best;
}

/* Drafts for g sources of one group (g <= max_seqs): catch-up steps while what they lack does not fit one step,
 * then one step per drafted position. A failed step ends the group's drafting with what it has. */
static void draft_group(dm_provider *p, dm_source **src, int32_t *const *out, int g) {
    cinfer_error e = {0};
    /* catch-up: feed context (not the last token of each) until every source's missing tokens fit in one step */
    for (;;) {
        int64_t total = 0;
        for (int i = 0; i < g; i++) total += missing(src[i]);
        if (total <= p->budget) break;
        int n = 0, left = p->budget;
        for (int i = 0; i < g && left > 0; i++) {
            const int m = missing(src[i]) - 1;
            if (m <= 0) continue;
            const int k = m < left ? m : left;
            const int len = cf_rseq_len(src[i]->seq);
            p->items[n++] = (cf_batch_item){.seq = src[i]->seq, .ids = src[i]->ctx + len, .n = k, .logits = CF_LOGITS_NONE};
            left -= k;
        }
        if (n == 0 || cf_runner_step(p->runner, p->items, n, &e) != CINFER_OK) return;
    }
    for (;;) {
        int n = 0;
        for (int i = 0; i < g; i++) {
            dm_source *s = src[i];
            if (s->stopped || s->got >= s->want) continue;
            const int len = cf_rseq_len(s->seq);
            cf_batch_item it = {.seq = s->seq, .logits = p->host_pick ? CF_LOGITS_LAST : CF_LOGITS_NONE,
                                .pick = p->host_pick ? NULL : &greedy_args, .token = -1};
            if (s->got == 0) {   /* the first step: what the sequence lacks, the context's last token included */
                it.ids = s->ctx + len;
                it.n = s->n_ctx - len;
            } else {             /* then the previous proposal */
                it.ids = &out[i][s->got - 1];
                it.n = 1;
            }
            p->items[n] = it;
            p->grp[n] = s;
            p->grp_out[n] = out[i];
            n++;
        }
        if (n == 0) return;
        if (cf_runner_step(p->runner, p->items, n, &e) != CINFER_OK) return;
        for (int k = 0; k < n; k++) {
            dm_source *s = p->grp[k];
            const int32_t t = p->host_pick ? host_argmax(p->items[k].out, p->draft->m->hp.vocab) : p->items[k].token;
            if (t < 0 || t >= p->draft_limit) {
                s->stopped = 1;
                continue;
            }
            p->grp_out[k][s->got++] = t;
        }
    }
}

static cinfer_status dm_draft_many(cf_draft_provider *pp, cf_draft_source **srcs, int n_src, const int *want, int32_t *const *out,
                                   int *got, cinfer_error *err) {
    dm_provider *p = (dm_provider *)pp;
    if (n_src < 0 || (n_src > 0 && (!srcs || !want || !out || !got)))
        return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "draft: %d sources with missing arrays", n_src);
    for (int i = 0; i < n_src; i++) got[i] = 0;
    cinfer_status st = CINFER_OK;
    int marked = 0;
    for (; marked < n_src; marked++) {
        dm_source *s = (dm_source *)srcs[marked];
        const int i = marked;
        if (!s || s->base.provider != pp)
            st = cf_fail(err, CINFER_E_INVALID_ARGUMENT, "draft: source %d is not one of this draft model's", i);
        else if (s->in_call)
            st = cf_fail(err, CINFER_E_INVALID_ARGUMENT, "draft: source %d is given twice", i);
        else if (want[i] < 0 || want[i] > CF_DRAFT_MAX)
            st = cf_fail(err, CINFER_E_INVALID_ARGUMENT, "draft: source %d wants %d tokens (0 to %d)", i, want[i], CF_DRAFT_MAX);
        else if (want[i] > 0 && !out[i])
            st = cf_fail(err, CINFER_E_INVALID_ARGUMENT, "draft: source %d has no output array", i);
        if (st != CINFER_OK) break;
        s->in_call = 1;
    }
    if (st != CINFER_OK) {
        for (int j = 0; j < marked; j++) ((dm_source *)srcs[j])->in_call = 0;
        return st;
    }
    /* the sources that draft, in groups of max_seqs */
    int g = 0;
    for (int k = 0; k <= n_src; k++) {
        if (k < n_src) {
            dm_source *s = (dm_source *)srcs[k];
            s->in_call = 0;
            s->got = 0;
            s->stopped = 0;
            s->want = prepare(s, want[k]);
            if (s->want > 0) {
                p->gsrc[g] = s;
                p->gout[g] = out[k];
                g++;
            }
        }
        if (g > 0 && (g == p->max_seqs || k == n_src)) {
            draft_group(p, p->gsrc, p->gout, g);
            g = 0;
        }
    }
    for (int k = 0; k < n_src; k++) got[k] = ((dm_source *)srcs[k])->got;
    return CINFER_OK;
}

static cinfer_status dm_draft(cf_draft_source *s, int n, int32_t *out, int *got, cinfer_error *err) {
    if (!got) return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "draft: got is NULL");
    *got = 0;
    if (n < 1 || n > CF_DRAFT_MAX) return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "draft: %d tokens asked (1 to %d)", n, CF_DRAFT_MAX);
    return dm_draft_many(s->provider, &s, 1, &n, &out, got, err);
}

/* ---- sources ---- */

static void source_free(dm_source *s) {
    dm_provider *p = s->p;
    if (s->prev) s->prev->next = s->next;
    else p->open = s->next;
    if (s->next) s->next->prev = s->prev;
    p->n_open--;
    cf_rseq_free(s->seq);
    free(s->ctx);
    free(s);
}

static void dm_close(cf_draft_source *src) {
    if (src) source_free((dm_source *)src);
}

static const cf_draft_source_ops source_ops = {
    .prefill = dm_prefill,
    .draft = dm_draft,
    .commit = dm_commit,
    .close = dm_close,
};

static cinfer_status dm_open(cf_draft_provider *pp, cf_draft_source **out, cinfer_error *err) {
    dm_provider *p = (dm_provider *)pp;
    if (!out) return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "draft open: out is NULL");
    *out = NULL;
    dm_source *s = calloc(1, sizeof *s);
    if (!s) return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory for a draft source");
    cinfer_status st = cf_rseq_create(p->runner, &s->seq, err);
    if (st != CINFER_OK) {
        free(s);
        return st;
    }
    s->base = (cf_draft_source){.ops = &source_ops, .provider = pp};
    s->p = p;
    s->bad_at = -1;
    s->next = p->open;
    if (p->open) p->open->prev = s;
    p->open = s;
    p->n_open++;
    *out = &s->base;
    return CINFER_OK;
}

/* Sources still open are closed with the provider (their handles must not be used afterwards); then the runner
 * goes, whose sequences must all be freed first. */
static void dm_free(cf_draft_provider *pp) {
    dm_provider *p = (dm_provider *)pp;
    while (p->open) source_free(p->open);
    cf_runner_free(p->runner);
    free(p->items);
    free(p->grp);
    free(p->grp_out);
    free(p->gsrc);
    free(p->gout);
    free(p);
}

static const cf_draft_provider_ops provider_ops = {
    .name = "draft",
    .open = dm_open,
    .draft_many = dm_draft_many,
    .free = dm_free,
};

/* ---- creation: the tokenizers must agree ---- */

/* A token's text for a message: printable ASCII kept, other bytes as \xNN, cut to fit. */
static const char *shown(int has, const char *t, char *buf, size_t cap) {
    if (has <= 0) return has ? "(a string it cannot tell)" : "(no token)";
    size_t o = 0;
    buf[o++] = '"';
    for (const unsigned char *c = (const unsigned char *)t; *c && o + 8 < cap; c++) {
        if (*c >= 0x20 && *c < 0x7f && *c != '"' && *c != '\\') buf[o++] = (char)*c;
        else o += (size_t)snprintf(buf + o, cap - o, "\\x%02x", *c);
    }
    buf[o++] = '"';
    buf[o] = 0;
    return buf;
}

static int has_id(const int32_t *ids, int n, int32_t id) {
    for (int i = 0; i < n; i++)
        if (ids[i] == id) return 1;
    return 0;
}

/* The vocabulary string of id in tok, NUL-terminated into buf (cap bytes); 0 when id has none, -1 when it cannot
 * be told. cf_tokenizer_token_text gives the start of a model token's string but not where it ends (model tokens lie
 * back to back in one buffer, which ends with a NUL): the string is the prefix of it that tok maps back to id. */
static int token_string(const cf_tokenizer *tok, int32_t id, char *buf, size_t cap) {
    const char *p = cf_tokenizer_token_text(tok, id);
    if (!p) return 0;
    for (size_t n = 0; n + 1 < cap && p[n]; n++) {
        buf[n] = p[n];
        buf[n + 1] = 0;
        if (cf_tokenizer_token_id(tok, buf) == id) return 1;
    }
    return -1;
}

/* The text decode() gives for id alone, for tokens token_string cannot tell. */
static int decoded_same(const cf_tokenizer *t, const cf_tokenizer *d, int32_t id) {
    char *x = NULL, *y = NULL;
    size_t xl = 0, yl = 0;
    int same = cf_tokenizer_decode(t, &id, 1, 0, &x, &xl, NULL) == CINFER_OK && cf_tokenizer_decode(d, &id, 1, 0, &y, &yl, NULL) == CINFER_OK &&
               xl == yl && !memcmp(x, y, xl);
    free(x);
    free(y);
    return same;
}

#define TOKEN_CAP 1024

static cinfer_status check_tokenizers(const cf_tokenizer *t, const cf_tokenizer *d, cinfer_error *err) {
    const char *why = "the draft model's tokenizer differs from the target's";
    const int32_t nt = cf_tokenizer_vocab_size(t), nd = cf_tokenizer_vocab_size(d);
    if (nt != nd)
        return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "%s: %d token ids in the target's, %d in the draft's", why, nt, nd);
    char *x = malloc(2 * TOKEN_CAP), *y = x ? x + TOKEN_CAP : NULL;
    if (!x) return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory comparing the tokenizers");
    char a[96], b[96];
    cinfer_status st = CINFER_OK;
    for (int32_t id = 0; id < nt && st == CINFER_OK; id++) {
        const int hx = token_string(t, id, x, TOKEN_CAP), hy = token_string(d, id, y, TOKEN_CAP);
        if ((hx == 0) != (hy == 0) || (hx > 0 && hy > 0 && strcmp(x, y)) || ((hx < 0 || hy < 0) && hx && !decoded_same(t, d, id)))
            st = cf_fail(err, CINFER_E_INVALID_ARGUMENT, "%s: token id %d is %s in the target's and %s in the draft's", why, id,
                         shown(hx, x, a, sizeof a), shown(hy, y, b, sizeof b));
        else if (cf_tokenizer_is_special(t, id) != cf_tokenizer_is_special(d, id))
            st = cf_fail(err, CINFER_E_INVALID_ARGUMENT, "%s: token id %d (%s) is special in the %s's only", why, id,
                         shown(hx, x, a, sizeof a), cf_tokenizer_is_special(t, id) ? "target" : "draft");
    }
    free(x);
    CF_TRY(st);
    if (cf_tokenizer_bos_id(t) != cf_tokenizer_bos_id(d))
        return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "%s: BOS is id %d in the target's and %d in the draft's (-1: none)", why,
                       cf_tokenizer_bos_id(t), cf_tokenizer_bos_id(d));
    const int32_t *et, *ed;
    const int net = cf_tokenizer_eos_ids(t, &et), ned = cf_tokenizer_eos_ids(d, &ed);
    for (int i = 0; i < net; i++)
        if (!has_id(ed, ned, et[i]))
            return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "%s: id %d ends generation in the target's, not in the draft's", why, et[i]);
    for (int i = 0; i < ned; i++)
        if (!has_id(et, net, ed[i]))
            return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "%s: id %d ends generation in the draft's, not in the target's", why, ed[i]);
    /* the decoders too: every id decoded at once must read the same */
    int32_t *all = malloc((size_t)(nt > 0 ? nt : 1) * sizeof *all);
    if (!all) return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory comparing the tokenizers");
    for (int32_t id = 0; id < nt; id++) all[id] = id;
    char *xt = NULL, *yt = NULL;
    size_t xl = 0, yl = 0;
    cinfer_error e1 = {0}, e2 = {0};
    cinfer_status s1 = cf_tokenizer_decode(t, all, (size_t)nt, 0, &xt, &xl, &e1);
    cinfer_status s2 = cf_tokenizer_decode(d, all, (size_t)nt, 0, &yt, &yl, &e2);
    free(all);
    int same = s1 == s2 && (s1 != CINFER_OK || (xl == yl && !memcmp(xt, yt, xl)));
    free(xt);
    free(yt);
    if (!same)
        return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "%s: the same tokens decode to different text (another decoder)", why);
    return CINFER_OK;
}

/* KV bytes: max_seqs contexts of max_ctx tokens, at most a quarter of the backend's free memory, at least a block. */
static int64_t kv_bytes_for(cf_model *m, int max_seqs, int max_ctx, int block_size, cinfer_error *err) {
    const cf_hparams *hp = &m->hp;
    cf_kv_spec *specs = cf_model_kv_specs(m);
    if (!specs) return -1;
    const int64_t per_block = cf_kv_pool_block_bytes(specs, NULL, hp->n_layers, block_size, 0);   /* every layer, as one pool */
    free(specs);
    int64_t bytes = (int64_t)max_seqs * ((max_ctx + block_size - 1) / block_size) * per_block;
    const int64_t avail = m->be->ops->mem_available ? m->be->ops->mem_available(m->be) : 0;
    if (avail > 0 && bytes > avail / 4) bytes = avail / 4;
    if (bytes < per_block) bytes = per_block;
    return bytes;
}

cinfer_status cf_draft_model_provider_create(cinfer_model *target, cinfer_model *draft, int max_seqs, cf_draft_provider **out,
                                             cinfer_error *err) {
    if (!out) return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "draft model: out is NULL");
    *out = NULL;
    if (!target || !draft || !target->m || !draft->m)
        return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "draft model: the %s model is missing", !target || !target->m ? "target" : "draft");
    if (max_seqs < 1 || max_seqs > 2048)
        return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "draft model: max_seqs is %d (1 to 2048)", max_seqs);
    const char *bt = target->m->be->ops->name, *bd = draft->m->be->ops->name;
    if (strcmp(bt, bd))
        return cf_fail(err, CINFER_E_UNSUPPORTED, "the draft model runs on the %s backend and the target on %s: load both on the same device",
                       bd, bt);
    if (!target->tok || !draft->tok)
        return cf_fail(err, CINFER_E_UNSUPPORTED, "the %s model has no tokenizer.json, so the draft's vocabulary cannot be checked against "
                       "the target's", !target->tok ? "target" : "draft");
    CF_TRY(check_tokenizers(target->tok, draft->tok, err));

    dm_provider *p = calloc(1, sizeof *p);
    if (!p) return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory for the draft model");
    p->base.ops = &provider_ops;
    p->target = target;
    p->draft = draft;
    const int32_t ntok = cf_tokenizer_vocab_size(target->tok);
    p->draft_limit = target->m->hp.vocab < ntok ? target->m->hp.vocab : ntok;
    p->host_pick = !cf_model_can_pick_on_device(draft->m, &greedy_args);

    cf_runner_params rp = cf_runner_default_params();
    rp.max_seqs = max_seqs;
    rp.max_ctx = draft->m->hp.max_ctx < target->m->hp.max_ctx ? draft->m->hp.max_ctx : target->m->hp.max_ctx;
    rp.block_size = 16;
    rp.graphs = 1;
    rp.kv_bytes = kv_bytes_for(draft->m, max_seqs, rp.max_ctx, rp.block_size, err);
    cinfer_status st = rp.kv_bytes < 0 ? cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory") : CINFER_OK;
    if (st == CINFER_OK) st = cf_runner_create(draft->m, &rp, &p->runner, err);
    if (st == CINFER_OK) {
        const cf_runner_params *q = cf_runner_params_of(p->runner);
        p->max_seqs = q->max_seqs;
        p->budget = q->max_batch_tokens;
        p->max_ctx = q->max_ctx;
        p->items = calloc((size_t)p->max_seqs, sizeof *p->items);
        p->grp = calloc((size_t)p->max_seqs, sizeof *p->grp);
        p->grp_out = calloc((size_t)p->max_seqs, sizeof *p->grp_out);
        p->gsrc = calloc((size_t)p->max_seqs, sizeof *p->gsrc);
        p->gout = calloc((size_t)p->max_seqs, sizeof *p->gout);
        if (!p->items || !p->grp || !p->grp_out || !p->gsrc || !p->gout) st = cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory for the draft model");
    }
    if (st != CINFER_OK) {
        dm_free(&p->base);
        return cf_wrap(err, st, "creating the draft model's runner");
    }
    *out = &p->base;
    return CINFER_OK;
}
