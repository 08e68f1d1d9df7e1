/* target.c: the speculative target port (target.h): a runner (owned or borrowed) seen through its descriptor,
 * EOS ids, caches, rollback transactions, tapped forward steps and logit projection. The port owns its
 * descriptor, its copy of the EOS ids, its batch items and, when made over a model, its runner. */
#include "spec/target.h"
#include "engine/engine.h"
#include "model/forward.h"
#include "base/dtype.h"
#include "base/status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct cf_target {
    cf_runner *r;
    int owns_runner;
    cf_model *m;
    int32_t *eos;
    int n_eos;
    cf_batch_item *items;   /* [max_seqs] */
    cf_target_descriptor d;
};

struct cf_target_txn {   /* one allocation: a transaction is bound for every verify step */
    cf_target *t;
    int n;
    struct {
        cf_rseq *cache;
        int len;            /* its length at the bind */
    } c[];
};

/* The KV layout per layer, consecutive equal layers as one run: "2:4x16/16" (2 layers of 4 KV heads of 16, values
 * 16), "s" where a layer reads another layer's cache; "window=W rollback=R" first where sliding-window layers keep
 * only their window in a pool of their own (model/runner.h). */
static void state_abi(const cf_model *m, const cf_runner *r, char *out, size_t cap) {
    const cf_hparams *hp = &m->hp;
    size_t k = (size_t)snprintf(out, cap, "paged-kv block=%d dtype=%s ", cf_runner_params_of(r)->block_size,
                                cf_dtype_name(m->kv_dtype));
    if (k < cap && cf_runner_window(r))
        k += (size_t)snprintf(out + k, cap - k, "window=%d rollback=%d ", cf_runner_window(r), cf_runner_params_of(r)->rollback);
    if (k < cap) k += (size_t)snprintf(out + k, cap - k, "layers=");
    for (int l = 0; l < hp->n_layers && k < cap;) {
        const cf_layer_hp *L = &hp->layers[l];
        const int shared = L->kv_source != l;
        int run = 1;
        while (l + run < hp->n_layers) {
            const cf_layer_hp *N = &hp->layers[l + run];
            if (N->n_kv_heads != L->n_kv_heads || N->head_dim != L->head_dim || N->v_head_dim != L->v_head_dim ||
                (N->kv_source != l + run) != shared)
                break;
            run++;
        }
        k += (size_t)snprintf(out + k, cap - k, "%s%d:%dx%d/%d%s", l ? "," : "", run, L->n_kv_heads, L->head_dim, L->v_head_dim,
                              shared ? "s" : "");
        l += run;
    }
}

static cinfer_status make(cf_runner *r, int owns, const int32_t *eos, int n_eos, cf_target **out, cinfer_error *err) {
    *out = NULL;
    cf_target *t = calloc(1, sizeof *t);
    if (!t) return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory for a speculative target");
    t->r = r;
    t->owns_runner = owns;
    t->m = cf_runner_model(r);
    t->eos = malloc((size_t)(n_eos ? n_eos : 1) * sizeof *t->eos);
    t->items = calloc((size_t)cf_runner_params_of(r)->max_seqs, sizeof *t->items);
    if (!t->eos || !t->items) {
        t->owns_runner = 0;   /* the caller still owns it on failure */
        cf_target_free(t);
        return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory for a speculative target");
    }
    if (n_eos) memcpy(t->eos, eos, (size_t)n_eos * sizeof *eos);
    t->n_eos = n_eos;
    const cf_hparams *hp = &t->m->hp;
    snprintf(t->d.backend, sizeof t->d.backend, "%s", t->m->be->ops->name);
    snprintf(t->d.graph_abi, sizeof t->d.graph_abi, "%s hidden=%d layers=%d vocab=%d weights=%s act=%s", hp->arch_name, hp->dim,
             hp->n_layers, hp->vocab, t->m->dtype_summary, cf_dtype_name(t->m->be->act_dtype));
    state_abi(t->m, r, t->d.state_abi, sizeof t->d.state_abi);
    *out = t;
    return CINFER_OK;
}

cinfer_status cf_target_create(cinfer_model *model, const cf_runner_params *params, cf_target **out, cinfer_error *err) {
    *out = NULL;
    cf_runner *r = NULL;
    CF_TRY(cf_runner_create(model->m, params, &r, err));
    cinfer_status st = make(r, 1, model->eos, model->n_eos, out, err);
    if (st != CINFER_OK) cf_runner_free(r);
    return st;
}

cinfer_status cf_target_create_over_runner(cf_runner *r, cf_target **out, cinfer_error *err) {
    const cf_hparams *hp = &cf_runner_model(r)->hp;
    return make(r, 0, hp->eos_ids, hp->n_eos, out, err);
}

void cf_target_free(cf_target *t) {
    if (!t) return;
    if (t->owns_runner) cf_runner_free(t->r);
    free(t->eos);
    free(t->items);
    free(t);
}

const cf_target_descriptor *cf_target_descriptor_of(const cf_target *t) { return &t->d; }

cinfer_status cf_target_check(const cf_target *t, const cf_target_descriptor *want, cinfer_error *err) {
    const struct { const char *name, *have, *want; } f[] = {
        {"backend", t->d.backend, want->backend},
        {"graph ABI", t->d.graph_abi, want->graph_abi},
        {"state ABI", t->d.state_abi, want->state_abi},
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (strcmp(f[i].have, f[i].want))
            return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "the speculative target's %s is \"%s\", not the expected \"%s\"", f[i].name,
                           f[i].have, f[i].want);
    return CINFER_OK;
}

const int32_t *cf_target_eos(const cf_target *t, int *n) {
    *n = t->n_eos;
    return t->eos;
}

int cf_target_hidden_size(const cf_target *t) { return t->m->hp.dim; }
int cf_target_vocab(const cf_target *t) { return t->m->hp.vocab; }
int cf_target_n_layers(const cf_target *t) { return t->m->hp.n_layers; }
cf_runner *cf_target_runner(const cf_target *t) { return t->r; }

cinfer_status cf_target_make_cache(cf_target *t, cf_rseq **out, cinfer_error *err) { return cf_rseq_create(t->r, out, err); }

/* ---- rollback transactions ---- */

cinfer_status cf_target_bind_rollback(cf_target *t, cf_rseq *const *caches, int n, cf_target_txn **out, cinfer_error *err) {
    *out = NULL;
    if (n < 1 || !caches) return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "a rollback transaction over %d caches", n);
    for (int i = 0; i < n; i++) {
        if (!caches[i]) return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "cache %d of the transaction is NULL", i);
        for (int j = 0; j < i; j++)
            if (caches[j] == caches[i]) return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "caches %d and %d of the transaction are the same", j, i);
    }
    cf_target_txn *x = malloc(sizeof *x + (size_t)n * sizeof x->c[0]);
    if (!x) return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory for a rollback transaction over %d caches", n);
    x->t = t;
    x->n = n;
    for (int i = 0; i < n; i++) {
        x->c[i].cache = caches[i];
        x->c[i].len = cf_rseq_len(caches[i]);
    }
    *out = x;
    return CINFER_OK;
}

/* Truncates cache i to n[i]: every cache is tried; the first failure is reported. */
static cinfer_status truncate_all(cf_target_txn *x, const int *keep, cinfer_error *err) {
    cinfer_status first = CINFER_OK;
    for (int i = 0; i < x->n; i++) {
        cinfer_error e = {0};
        cinfer_status st = cf_rseq_truncate(x->c[i].cache, x->c[i].len + (keep ? keep[i] : 0), &e);
        if (st != CINFER_OK && first == CINFER_OK) {
            first = st;
            if (err) *err = e;
        }
    }
    return first == CINFER_OK ? CINFER_OK : cf_wrap(err, first, "rolling back a speculative step");
}

cinfer_status cf_target_txn_abort(cf_target_txn *x, cinfer_error *err) {
    if (!x) return CINFER_OK;
    cinfer_status st = truncate_all(x, NULL, err);
    free(x);
    return st;
}

cinfer_status cf_target_txn_commit(cf_target_txn *x, const int *keep, cinfer_error *err) {
    for (int i = 0; i < x->n; i++) {
        const int gained = cf_rseq_len(x->c[i].cache) - x->c[i].len;
        if (!keep || keep[i] < 0 || keep[i] > gained) {
            cinfer_error ignored = {0};
            cf_target_txn_abort(x, &ignored);
            if (!keep) return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "a commit without kept lengths; the transaction was aborted");
            return cf_fail(err, CINFER_E_INVALID_ARGUMENT,
                           "cache %d gained %d tokens since the bind and cannot keep %d; the transaction was aborted", i, gained, keep[i]);
        }
    }
    cinfer_status st = truncate_all(x, keep, err);
    free(x);
    return st;
}

/* ---- forward and projection ---- */

/* Where the checks of the runner's step cannot look: the arrays themselves. */
static cinfer_status check_forward(const cf_target *t, cf_rseq *const *caches, const int32_t *const *ids, const int *n_ids, int n,
                                   const int *taps, int n_taps, cinfer_error *err) {
    const int max_seqs = cf_runner_params_of(t->r)->max_seqs;
    if (n < 1 || n > max_seqs || !caches || !ids || !n_ids)
        return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "a target forward over %d caches (1 to %d, with their ids)", n, max_seqs);
    if (n_taps < 0 || n_taps > CF_RUNNER_MAX_TAPS || (n_taps && !taps))
        return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "%d tap layers (0 to %d, listed)", n_taps, CF_RUNNER_MAX_TAPS);
    return cf_check_taps(t->m, taps, n_taps, err);
}

cinfer_status cf_target_forward(cf_target *t, cf_rseq *const *caches, const int32_t *const *ids, const int *n_ids, int n,
                                const int *tap_layers, int n_taps, cf_target_out *out, cinfer_error *err) {
    memset(out, 0, sizeof *out);
    CF_TRY(check_forward(t, caches, ids, n_ids, n, tap_layers, n_taps, err));
    const cf_runner_taps prev = cf_runner_get_taps(t->r);
    cf_runner_taps mine = {.hidden = 1, .n = n_taps};
    if (n_taps) memcpy(mine.layers, tap_layers, (size_t)n_taps * sizeof *tap_layers);
    CF_TRY(cf_runner_set_taps(t->r, &mine, err));
    for (int i = 0; i < n; i++)
        t->items[i] = (cf_batch_item){.seq = caches[i], .ids = ids[i], .n = n_ids[i], .logits = CF_LOGITS_NONE};
    cinfer_status st = cf_runner_step(t->r, t->items, n, err);
    if (st == CINFER_OK) {
        out->hidden = cf_runner_hidden(t->r, &out->rows);
        out->taps = cf_runner_tapped(t->r);
        out->n_taps = n_taps;
    }
    cinfer_error rerr = {0};
    cinfer_status restored = cf_runner_set_taps(t->r, &prev, &rerr);
    if (restored != CINFER_OK && st == CINFER_OK) {
        for (int i = 0; i < n; i++) cf_rseq_truncate(caches[i], cf_rseq_len(caches[i]) - n_ids[i], NULL);
        memset(out, 0, sizeof *out);
        if (err) *err = rerr;
        return cf_wrap(err, restored, "restoring the runner's tap state after a target forward");
    }
    return st;
}

cinfer_status cf_target_project_logits(cf_target *t, const float *hidden, int n, const float **logits, cinfer_error *err) {
    return cf_runner_project_logits(t->r, hidden, n, logits, err);
}
