/* runner.c: the batched model runner: its scratch, KV pool and per-bucket decode graphs, the sequences'
 * block tables and tokens, and the step that lays a batch out on the device, runs it and reads back what
 * each item asked for. */
#include "model/runner.h"
#include "model/forward.h"
#include "kv/kv_split.h"
#include "kv/lease.h"
#include "base/clock.h"
#include "base/status.h"
#include "sample/sampler.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MIN_LOGIT_ROWS 256
#define N_BUCKETS 12          /* decode graphs for 1, 2, 4, ... 2048 sequences */
#define DEFAULT_ROLLBACK 32   /* positions a truncate can always go back where window layers free blocks */

struct cf_runner {
    cf_model *m;
    cf_runner_params p;
    cf_kv_pool *kv;
    cf_scratch sc;
    int table_cols;
    int tstride;                 /* a host/device table row: the full pool's table_cols, then the window pool's if any */
    int window, rollback;        /* the window pool (kv->wblocks): positions its readers look back, a truncate can go back */
    int n_seqs_alive;
    double wait_s;               /* seconds the steps spent waiting for the device (cf_runner_wait_seconds) */
    /* the batch on the device and its host copies */
    cf_batch_view bv, bv_win;    /* bv_win: the window pool's slots and tables (window pool only) */
    cf_tensor u, picks;          /* F32 [max_seqs, 1] uniforms; I32 [max_seqs, 1] picked tokens */
    cf_tensor meta;              /* I32: the views in bv and bv_win (laid out in cf_runner_create) */
    int32_t *h_meta, *h_pos, *h_row_seq, *h_seq_start, *h_slot, *h_wslot, *h_table, *h_ids;
    float *h_u, *h_picks;         /* [max_seqs]; [logit_rows]: picks by logits row */
    int32_t *h_tokens;            /* [logit_rows]: the every-row picks handed out (cf_batch_item.tokens) */
    float *h_logits;             /* [logit_rows, vocab] */
    cf_block_copy *copies, *wcopies;   /* [max_seqs] each: copy-on-write in the full and window pools */
    cf_lease_request *lease_rq;  /* [max_seqs]: a step's write leases on its sequences */
    cf_kv_lease *leases;
    int *out_first;              /* [max_seqs]: each item's first logits row */
    /* submitted steps not yet collected, oldest first (cf_runner_submit) */
    struct {
        cf_batch_item *it;
        int n;
        int deferred;            /* its picks are read back by collect; otherwise it ran whole in submit */
        int slot;                /* deferred: the read slot of its picks */
    } pend[2];
    int n_pend, next_slot;
    int *follow_src;             /* [max_seqs]: a follow-up's item i takes its input from picks row follow_src[i] (-1: joining,
                                  * -2: the next piece of a prompt whose piece in flight picks nothing) */
    int *prow;                   /* [2][max_seqs]: by read slot, a deferred step's item i's picks row (-1: it picks nothing) */
    int n_leased;                /* write leases held in leases[]: the pending steps' sequences */
    unsigned keep_mark;          /* keep_leases_of's generation (cf_rseq.keep) */
    cf_graph *graph[N_BUCKETS];  /* decode steps of 2^i sequences */
    /* taps (cf_runner_set_taps): the state, the room made for it (grows only) and the last step's outputs */
    cf_runner_taps taps;
    int tap_room;                /* tapped layers tap_dev and h_tapped have columns for */
    cf_tensor tap_dev;           /* F32 [max_batch_tokens, tap_room * dim] */
    float *h_hidden, *h_tapped;  /* [max_batch_tokens, dim], [max_batch_tokens, tap_room * dim] */
    int hidden_rows;             /* rows of the last step in h_hidden; 0 = none */
};

struct cf_rseq {
    cf_runner *r;
    cf_block_table t;
    cf_block_table w;         /* the window pool's table (its oldest blocks dropped as the sequence moves on) */
    cf_lease_state ls;        /* who borrows t (kv/lease.h) */
    int32_t *tokens;
    int cap;
    int ahead;                /* positions past n_tokens that submitted steps write and have not committed yet */
    int32_t last_pick;        /* the token the last collected deferred step picked (a follow-up's input) */
    unsigned keep;            /* == r->keep_mark: in the step after the one collected (keep_leases_of) */
};

cf_runner_params cf_runner_default_params(void) {
    return (cf_runner_params){.max_seqs = 0, .max_batch_tokens = 0, .max_ctx = 0, .kv_bytes = 0, .block_size = 0, .graphs = 1,
                              .rollback = 0, .single_pool = 0};
}

const cf_runner_params *cf_runner_params_of(const cf_runner *r) { return &r->p; }
cf_model *cf_runner_model(const cf_runner *r) { return r->m; }
double cf_runner_wait_seconds(const cf_runner *r) { return r->wait_s; }
int cf_runner_blocks_total(const cf_runner *r) { return cf_block_pool_size(r->kv->blocks); }
int cf_runner_blocks_available(const cf_runner *r) { return cf_block_pool_available(r->kv->blocks); }
int cf_runner_blocks_cached(const cf_runner *r) { return cf_block_pool_cached(r->kv->blocks); }
int cf_runner_wblocks_total(const cf_runner *r) { return r->kv->wblocks ? cf_block_pool_size(r->kv->wblocks) : 0; }
int cf_runner_wblocks_available(const cf_runner *r) { return r->kv->wblocks ? cf_block_pool_available(r->kv->wblocks) : 0; }
int cf_runner_wblocks_cached(const cf_runner *r) { return r->kv->wblocks ? cf_block_pool_cached(r->kv->wblocks) : 0; }
int cf_runner_window(const cf_runner *r) { return r->kv->wblocks ? r->window : 0; }
int64_t cf_runner_block_bytes(const cf_runner *r) { return r->kv->bytes_per_block; }
int64_t cf_runner_wblock_bytes(const cf_runner *r) { return r->kv->wblocks ? r->kv->wbytes_per_block : 0; }

static int bucket_of(int n) {
    int b = 0;
    while ((1 << b) < n) b++;
    return b;
}

void cf_runner_free(cf_runner *r) {
    if (!r) return;
    cf_backend *be = r->m->be;
    for (int i = 0; i < N_BUCKETS; i++)
        if (r->graph[i]) be->ops->graph_free(be, r->graph[i]);
    cf_tensor *bufs[] = {&r->meta, &r->u, &r->picks, &r->tap_dev};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]->data) be->ops->free_tensor(be, bufs[i]);
    cf_scratch_free(r->m, &r->sc);
    cf_kv_pool_free(r->kv);
    free(r->h_pos);
    free(r->h_meta);
    free(r->h_ids);
    free(r->h_u);
    free(r->h_picks);
    free(r->h_tokens);
    free(r->h_logits);
    free(r->copies);
    free(r->wcopies);
    free(r->lease_rq);
    free(r->leases);
    free(r->out_first);
    free(r->follow_src);
    free(r->prow);
    free(r->h_hidden);
    free(r->h_tapped);
    free(r);
}

/* Marks windowed the caches whose every reader (the layer itself and the KV-shared layers reading it) has a
 * sliding window; returns the largest of their windows (0: none). */
static int plan_window_pool(const cf_hparams *hp, uint8_t *in_window) {
    int window = 0;
    for (int l = 0; l < hp->n_layers; l++) {
        if (hp->layers[l].kv_source != l) continue;
        int w = 0, all = 1;
        for (int j = 0; j < hp->n_layers; j++) {
            if (hp->layers[j].kv_source != l) continue;
            all &= hp->layers[j].window > 0;
            if (hp->layers[j].window > w) w = hp->layers[j].window;
        }
        in_window[l] = (uint8_t)all;
        if (all && w > window) window = w;
    }
    return window;
}

/* Window-pool blocks a sequence holds at most right after appending n positions: what its queries can still see
 * (window - 1 positions before the first new one), the rollback, the n new positions, and the partial blocks at
 * both ends; never more than a whole table. */
static int window_blocks(int window, int rollback, int n, int block_size, int table_cols) {
    const int64_t b = ((int64_t)window - 1 + rollback + n + block_size - 1) / block_size + 1;
    return b < table_cols ? (int)b : table_cols;
}

cinfer_status cf_runner_create(cf_model *m, const cf_runner_params *pp, cf_runner **out, cinfer_error *err) {
    *out = NULL;
    const cf_hparams *hp = &m->hp;
    cf_backend *be = m->be;
    cf_runner_params p = pp ? *pp : cf_runner_default_params();
    if (p.max_seqs < 0 || p.max_batch_tokens < 0 || p.max_ctx < 0 || p.kv_bytes < 0 || p.block_size < 0 || p.rollback < 0)
        return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "runner parameters must not be negative");
    if (!p.max_seqs) p.max_seqs = 128;
    if (!p.max_batch_tokens) p.max_batch_tokens = cf_model_prefill_chunk(m);
    if (p.max_batch_tokens < p.max_seqs) p.max_batch_tokens = p.max_seqs;
    if (!p.max_ctx || p.max_ctx > hp->max_ctx) p.max_ctx = hp->max_ctx;
    if (!p.block_size) p.block_size = 16;
    if (p.max_seqs > (1 << (N_BUCKETS - 1)) || p.max_batch_tokens > 65536 || p.block_size > 1024)
        return cf_fail(err, CINFER_E_INVALID_ARGUMENT,
                       "a runner of %d sequences, %d tokens a step and KV blocks of %d tokens is out of range (at most %d, 65536, 1024)",
                       p.max_seqs, p.max_batch_tokens, p.block_size, 1 << (N_BUCKETS - 1));
    if (!p.rollback) p.rollback = DEFAULT_ROLLBACK;
    if (p.rollback > p.max_ctx) p.rollback = p.max_ctx;
    cf_kv_spec *specs = cf_model_kv_specs(m);
    uint8_t *in_window = calloc((size_t)hp->n_layers, sizeof *in_window);
    if (!specs || !in_window) {
        free(specs);
        free(in_window);
        return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory");
    }
    const int table_cols = (p.max_ctx + p.block_size - 1) / p.block_size;
    const int window = p.single_pool ? 0 : plan_window_pool(hp, in_window);
    const int wcap_decode = window ? window_blocks(window, p.rollback, 1, p.block_size, table_cols) : 0;
    const int wcap_step = window ? window_blocks(window, p.rollback, p.max_batch_tokens, p.block_size, table_cols) : 0;
    const int windowed = window && wcap_decode < table_cols;   /* else a window as long as the context: nothing to free */
    cf_runner *r = calloc(1, sizeof *r);
    if (!r) {
        free(specs);
        free(in_window);
        return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory");
    }
    r->m = m;
    r->table_cols = table_cols;
    r->tstride = windowed ? 2 * table_cols : table_cols;
    r->window = windowed ? window : 0;
    r->rollback = p.rollback;
    const uint8_t *pools = windowed ? in_window : NULL;
    const int logit_rows = p.max_seqs > MIN_LOGIT_ROWS ? p.max_seqs : MIN_LOGIT_ROWS;
    cinfer_status st = cf_scratch_alloc(m, p.max_batch_tokens, logit_rows, &r->sc, err);
    /* the KV pools: what was asked for, else room for max_seqs full contexts within 90% of what is left */
    const int64_t avail = be->ops->mem_available ? be->ops->mem_available(be) : 0;
    cf_kv_split_in si = {.kv_bytes = p.kv_bytes, .mem_cap = avail > 0 ? avail / 10 * 9 : 0,
                         .full_bytes = cf_kv_pool_block_bytes(specs, pools, hp->n_layers, p.block_size, 0),
                         .win_bytes = windowed ? cf_kv_pool_block_bytes(specs, pools, hp->n_layers, p.block_size, 1) : 0,
                         .max_seqs = p.max_seqs, .block_size = p.block_size, .ctx_blocks = table_cols,
                         .win_blocks_decode = windowed ? wcap_decode : 0, .win_blocks_step = windowed ? wcap_step : 0};
    cf_kv_split_out so = {0};
    if (st == CINFER_OK) st = cf_kv_split(&si, &so, err);
    if (st == CINFER_OK)
        st = cf_kv_pool_create(be, specs, pools, hp->n_layers, (int)so.n_full, (int)so.n_win, r->window, p.block_size, &r->kv, err);
    p.kv_bytes = so.bytes;
    r->p = p;
    free(specs);
    free(in_window);
    const int R = p.max_batch_tokens, S = p.max_seqs;
    /* row_seq [R] | seq_start [S + 1] | slot [R] | window slot [R] | tables [S, tstride]: row s is sequence s's full
     * table, then its window table (no window slots or tables without a window pool) */
    const int64_t wslots = windowed ? R : 0, table_at = 2 * (int64_t)R + S + 1 + wslots;
    const int64_t meta_n = table_at + (int64_t)S * r->tstride;
    if (st == CINFER_OK) st = be->ops->alloc(be, CF_I32, meta_n, 1, &r->meta, err);
    if (st == CINFER_OK) {
        int32_t *tables = (int32_t *)r->meta.data + table_at;
        r->bv.pos = r->sc.pos;
        r->bv.row_seq = cf_rows(r->meta, 0, R);
        r->bv.seq_start = cf_rows(r->meta, R, S + 1);
        r->bv.slot = cf_rows(r->meta, R + S + 1, R);
        r->bv.block_table = (cf_tensor){.data = tables, .dtype = CF_I32, .rows = S, .cols = table_cols, .stride = r->tstride};
        if (windowed) {
            r->bv_win = r->bv;
            r->bv_win.slot = cf_rows(r->meta, 2 * (int64_t)R + S + 1, R);
            r->bv_win.block_table.data = tables + table_cols;
        }
    }
    if (st == CINFER_OK) st = be->ops->alloc(be, CF_F32, S, 1, &r->u, err);
    if (st == CINFER_OK) st = be->ops->alloc(be, CF_I32, logit_rows, 1, &r->picks, err);
    if (st == CINFER_OK) {
        r->h_pos = malloc((size_t)R * sizeof *r->h_pos);
        r->h_meta = malloc((size_t)meta_n * sizeof *r->h_meta);
        if (r->h_meta) {
            r->h_row_seq = r->h_meta;
            r->h_seq_start = r->h_row_seq + R;
            r->h_slot = r->h_seq_start + S + 1;
            r->h_wslot = windowed ? r->h_slot + R : NULL;
            r->h_table = r->h_meta + table_at;
        }
        r->h_ids = malloc((size_t)R * sizeof *r->h_ids);
        r->h_u = malloc((size_t)S * sizeof *r->h_u);
        r->h_picks = malloc((size_t)logit_rows * sizeof *r->h_picks);
        r->h_tokens = malloc((size_t)logit_rows * sizeof *r->h_tokens);
        r->h_logits = malloc((size_t)logit_rows * (size_t)hp->vocab * sizeof *r->h_logits);
        r->copies = malloc((size_t)S * sizeof *r->copies);
        r->wcopies = malloc((size_t)S * sizeof *r->wcopies);
        r->lease_rq = malloc((size_t)S * sizeof *r->lease_rq);
        r->leases = malloc((size_t)2 * S * sizeof *r->leases);   /* a step's, and those of sequences joining behind it */
        r->out_first = malloc((size_t)S * sizeof *r->out_first);
        r->follow_src = malloc((size_t)S * sizeof *r->follow_src);
        r->prow = malloc((size_t)2 * S * sizeof *r->prow);
        if (!r->follow_src || !r->prow || !r->h_pos || !r->h_meta || !r->h_ids || !r->h_u || !r->h_picks || !r->h_tokens ||
            !r->h_logits || !r->copies || !r->wcopies || !r->lease_rq || !r->leases || !r->out_first)
            st = cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory for the runner's host buffers");
    }
    if (st != CINFER_OK) {
        cf_runner_free(r);
        return cf_wrap(err, st, "creating a runner of %d sequences and %d tokens a step", S, R);
    }
    /* pad rows name the scratch block everywhere; the device table starts so too */
    for (int64_t i = 0; i < meta_n; i++) r->h_meta[i] = 0;
    for (int i = 0; i < S; i++)
        for (int c = 0; c < r->tstride; c++)
            r->h_table[(int64_t)i * r->tstride + c] = c < table_cols ? r->kv->scratch_block : r->kv->wscratch_block;
    be->ops->write(be, r->meta, r->h_meta);
    *out = r;
    return CINFER_OK;
}

/* ---- sequences ---- */

static cinfer_status tokens_reserve(cf_rseq *s, int n, cinfer_error *err) {
    if (n <= s->cap) return CINFER_OK;
    int cap = s->cap ? s->cap : 64;
    while (cap < n) cap = cap > INT32_MAX / 2 ? n : cap * 2;
    int32_t *t = realloc(s->tokens, (size_t)cap * sizeof *t);
    if (!t) return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory for the tokens of a sequence of %d", n);
    s->tokens = t;
    s->cap = cap;
    return CINFER_OK;
}

cinfer_status cf_rseq_create(cf_runner *r, cf_rseq **out, cinfer_error *err) {
    *out = calloc(1, sizeof **out);
    if (!*out) return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory for a sequence");
    (*out)->r = r;
    (*out)->last_pick = -1;
    r->n_seqs_alive++;
    return CINFER_OK;
}

void cf_rseq_free(cf_rseq *s) {
    if (!s) return;
    cf_block_table_release(s->r->kv->blocks, &s->t);
    if (s->r->kv->wblocks) cf_block_table_release(s->r->kv->wblocks, &s->w);
    s->r->n_seqs_alive--;
    free(s->tokens);
    free(s);
}

int cf_rseq_len(const cf_rseq *s) { return s->t.n_tokens; }
const int32_t *cf_rseq_tokens(const cf_rseq *s) { return s->tokens; }
int cf_rseq_blocks_held(const cf_rseq *s) { return s->t.n_blocks; }
int cf_rseq_wblocks_held(const cf_rseq *s) { return s->w.n_blocks - s->w.first; }

/* Blocks appending n positions to t takes from p now: the new ones, and a copy of a shared partial last block. */
static int table_needs(const cf_block_pool *p, const cf_block_table *t, int n) {
    const int bs = cf_block_pool_block_size(p);
    const int need = (t->n_tokens + n + bs - 1) / bs - t->n_blocks;
    const int last = t->n_tokens % bs ? t->n_tokens / bs : -1;
    const int cow = last >= 0 && t->blocks[last] >= 0 && cf_block_refs(p, t->blocks[last]) > 1;
    return (need > 0 ? need : 0) + cow;
}

int cf_rseq_blocks_needed(const cf_rseq *s, int n) { return table_needs(s->r->kv->blocks, &s->t, n); }

/* Where a step drops s's window table below before reserving: what only the last step's rollback kept. */
static int drop_point(const cf_rseq *s) { return s->w.n_tokens - (s->r->window - 1) - s->r->rollback; }

int cf_rseq_wblocks_needed(const cf_rseq *s, int n) {
    const cf_block_pool *p = s->r->kv->wblocks;
    if (!p) return 0;
    /* the blocks the step's drop gives back first (those no one else holds) count against what it takes */
    const int bs = s->r->p.block_size, end = drop_point(s) > 0 ? drop_point(s) / bs : 0;
    int back = 0;
    for (int i = s->w.first; i < end && i < s->w.n_blocks; i++) back += s->w.blocks[i] >= 0 && cf_block_refs(p, s->w.blocks[i]) == 1;
    const int need = table_needs(p, &s->w, n) - back;
    return need > 0 ? need : 0;
}

int cf_rseq_wblocks_wanted(const cf_rseq *s, int n) {
    const cf_runner *r = s->r;
    if (!r->kv->wblocks || n <= 0) return 0;
    const int step = n < r->p.max_batch_tokens ? n : r->p.max_batch_tokens;
    const int peak = window_blocks(r->window, r->rollback, step, r->p.block_size, r->table_cols) - cf_rseq_wblocks_held(s);
    const int exact = table_needs(r->kv->wblocks, &s->w, n);
    return exact < peak ? exact : peak > 0 ? peak : 0;
}

int cf_runner_wblocks_for(const cf_runner *r, int n) {
    if (!r->kv->wblocks || n <= 0) return 0;
    const int step = n < r->p.max_batch_tokens ? n : r->p.max_batch_tokens;
    const int peak = window_blocks(r->window, r->rollback, step, r->p.block_size, r->table_cols);
    const int all = (int)(((int64_t)n + r->p.block_size - 1) / r->p.block_size);
    return all < peak ? all : peak;
}

int cf_rseq_floor(const cf_rseq *s) {
    if (!s->r->kv->wblocks || s->w.first == 0) return 0;
    return s->w.first * s->r->p.block_size + s->r->window - 1;
}

cinfer_status cf_rseq_truncate(cf_rseq *s, int n, cinfer_error *err) {
    if (s->ls.readers || s->ls.writer)
        return cf_fail(err, CINFER_E_BUSY, "the sequence's KV state is borrowed (%d read lease(s)%s); release it before truncating",
                       s->ls.readers, s->ls.writer ? ", a write lease" : "");
    if (n < 0 || n > s->t.n_tokens)
        return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "cannot truncate a sequence of %d tokens to %d", s->t.n_tokens, n);
    const int floor = cf_rseq_floor(s);
    if (n > 0 && n < floor)
        return cf_fail(err, CINFER_E_INVALID_ARGUMENT,
                       "cannot roll a sequence of %d tokens back to %d: its sliding-window layers (window %d) freed the positions "
                       "below %d, so it can return to %d tokens at the least (or to 0); the runner keeps %d positions to roll back",
                       s->t.n_tokens, n, s->r->window, s->w.first * s->r->p.block_size, floor, s->r->rollback);
    cf_block_table_truncate(s->r->kv->blocks, &s->t, n);
    if (s->r->kv->wblocks) cf_block_table_truncate(s->r->kv->wblocks, &s->w, n);
    return CINFER_OK;
}

cinfer_status cf_rseq_fork(cf_rseq *src, cf_rseq **out, cinfer_error *err) {
    cf_kv_pool *kv = src->r->kv;
    cf_lease_request rq = {kv->blocks, &src->t, &src->ls, CF_LEASE_READ, "the sequence forked"};
    cf_kv_lease view;
    CF_TRY(cf_kv_lease_acquire(&rq, &view, err));
    cinfer_status st = cf_rseq_create(src->r, out, err);
    if (st == CINFER_OK) st = tokens_reserve(*out, view.n_tokens, err);
    if (st == CINFER_OK) st = cf_block_table_fork(kv->blocks, &src->t, &(*out)->t, err);
    if (st == CINFER_OK && kv->wblocks) st = cf_block_table_fork(kv->wblocks, &src->w, &(*out)->w, err);
    if (st == CINFER_OK && view.n_tokens) memcpy((*out)->tokens, src->tokens, (size_t)view.n_tokens * sizeof *src->tokens);
    cf_kv_lease_release(&view);
    if (st != CINFER_OK) {
        cf_rseq_free(*out);
        *out = NULL;
    }
    return st;
}

cinfer_status cf_rseq_adopt_prefix(cf_rseq *s, const int32_t *ids, int n, int *reused, cinfer_error *err) {
    *reused = 0;
    if (s->t.n_tokens) return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "a prefix is adopted by an empty sequence only");
    if (n > s->r->p.max_ctx) n = s->r->p.max_ctx;
    cf_kv_pool *kv = s->r->kv;
    CF_TRY(tokens_reserve(s, n, err));
    int k = 0;
    CF_TRY(cf_block_table_adopt_prefix(kv->blocks, &s->t, ids, n, 0, &k, err));
    if (k && kv->wblocks) {
        /* the window layers' blocks the next query needs must be cached too; else reuse less */
        const int bs = s->r->p.block_size;
        int kw = 0;
        cinfer_status st = cf_block_table_adopt_keyed(kv->wblocks, &s->w, ids, k / bs, s->r->window, 0, kv->blocks, &s->t, &kw, err);
        if (st != CINFER_OK) {
            cf_block_table_truncate(kv->blocks, &s->t, 0);
            return st;
        }
        if (kw * bs < k) cf_block_table_truncate(kv->blocks, &s->t, kw * bs);
        k = kw * bs;
    }
    *reused = k;
    if (k) memcpy(s->tokens, ids, (size_t)k * sizeof *ids);
    return CINFER_OK;
}

/* ---- steps ---- */

static int is_greedy(const cf_sample_args *sa) { return cf_sampling_is_greedy(sa->temperature); }

static cinfer_status check_items(cf_runner *r, const cf_batch_item *it, int n_items, cinfer_error *err) {
    const cf_model *m = r->m;
    if (n_items < 1 || n_items > r->p.max_seqs)
        return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "a step of %d sequences (1 to %d)", n_items, r->p.max_seqs);
    int64_t rows = 0, out_rows = 0;
    for (int i = 0; i < n_items; i++) {
        const cf_batch_item *b = &it[i];
        if (!b->seq || b->seq->r != r) return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "item %d: a sequence of another runner", i);
        for (int j = 0; j < i; j++)
            if (it[j].seq == b->seq) return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "items %d and %d are the same sequence", j, i);
        if (b->n < 1 || !b->ids) return cf_fail(err, CINFER_E_EMPTY_PROMPT, "item %d: no tokens to evaluate", i);
        for (int k = 0; k < b->n; k++)
            if (b->ids[k] < 0 || b->ids[k] >= m->hp.vocab)
                return cf_fail(err, CINFER_E_TOKEN_OUT_OF_RANGE, "token id %d at index %d is outside the vocabulary [0, %d)", b->ids[k], k,
                               m->hp.vocab);
        if ((int64_t)b->seq->t.n_tokens + b->n > r->p.max_ctx)
            return cf_fail(err, CINFER_E_CONTEXT_OVERFLOW, "%d tokens after %d would exceed the context of %d", b->n, b->seq->t.n_tokens,
                           r->p.max_ctx);
        if (b->logits != CF_LOGITS_NONE && b->logits != CF_LOGITS_LAST && b->logits != CF_LOGITS_ALL)
            return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "item %d: logits mode %d", i, (int)b->logits);
        if (b->pick) CF_TRY(cf_model_check_pick(m, b->pick, b->u, err));
        if (b->pick && b->logits == CF_LOGITS_ALL && !is_greedy(b->pick))
            return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "item %d: every row picked on the device is greedy only (temperature 0)", i);
        rows += b->n;
        out_rows += b->logits == CF_LOGITS_ALL ? b->n : b->logits == CF_LOGITS_LAST || b->pick ? 1 : 0;
    }
    if (rows > r->p.max_batch_tokens)
        return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "a step of %lld tokens; the runner takes at most %d", (long long)rows,
                       r->p.max_batch_tokens);
    if (out_rows > r->sc.logit_rows)
        return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "a step asking for %lld rows of logits; at most %d", (long long)out_rows,
                       r->sc.logit_rows);
    return CINFER_OK;
}

/* Lays the batch out on the host: rows, positions (after those in flight), slots, tables, the first logits row of each item.
 * n_seqs >= n_items: the rest are padding sequences of one row (graph buckets). Returns the rows. */
static int layout(cf_runner *r, const cf_batch_item *it, int n_items, int n_seqs, int *out_rows) {
    const int B = r->kv->block_size, C = r->table_cols;
    const int win = r->kv->wblocks != NULL, scratch = r->kv->scratch_block, wscratch = r->kv->wscratch_block;
    int row = 0, orow = 0;
    for (int i = 0; i < n_seqs; i++) {
        r->h_seq_start[i] = row;
        int32_t *tab = r->h_table + (size_t)i * r->tstride, *wtab = tab + C;
        if (i >= n_items) {
            r->h_ids[row] = 0;
            r->h_pos[row] = 0;
            r->h_row_seq[row] = i;
            r->h_slot[row] = scratch * B;
            for (int c = 0; c < C; c++) tab[c] = scratch;
            if (win) {
                r->h_wslot[row] = wscratch * B;
                for (int c = 0; c < C; c++) wtab[c] = wscratch;
            }
            row++;
            continue;
        }
        const cf_rseq *s = it[i].seq;
        for (int c = 0; c < C; c++) tab[c] = c < s->t.n_blocks ? s->t.blocks[c] : scratch;
        if (win)   /* dropped blocks are never read (attention starts at the window): they name the scratch block */
            for (int c = 0; c < C; c++) wtab[c] = c < s->w.n_blocks && s->w.blocks[c] >= 0 ? s->w.blocks[c] : wscratch;
        for (int k = 0; k < it[i].n; k++, row++) {
            const int p = s->t.n_tokens + s->ahead + k;
            r->h_ids[row] = it[i].ids ? it[i].ids[k] : 0;   /* a follow-up's input is copied on the device */
            r->h_pos[row] = p;
            r->h_row_seq[row] = i;
            r->h_slot[row] = s->t.blocks[p / B] * B + p % B;
            if (win) r->h_wslot[row] = s->w.blocks[p / B] * B + p % B;
        }
        r->out_first[i] = orow;
        orow += it[i].logits == CF_LOGITS_ALL ? it[i].n : it[i].logits == CF_LOGITS_LAST || it[i].pick ? 1 : 0;
    }
    r->h_seq_start[n_seqs] = row;
    *out_rows = orow;
    return row;
}

static void upload(cf_runner *r, int rows, int n_seqs) {
    cf_backend *be = r->m->be;
    be->ops->write(be, cf_rows(r->sc.ids, 0, rows), r->h_ids);
    be->ops->write(be, cf_rows(r->sc.pos, 0, rows), r->h_pos);
    /* the metadata in one transfer: everything before the tables, and the tables' first n_seqs rows */
    be->ops->write(be, cf_rows(r->meta, 0, (r->h_table - r->h_meta) + (int64_t)n_seqs * r->tstride), r->h_meta);
}

static cf_batch_view view_of(const cf_batch_view *base, int rows, int n_seqs, int max_rows_per_seq) {
    cf_batch_view v = *base;
    v.pos = cf_rows(v.pos, 0, rows);
    v.row_seq = cf_rows(v.row_seq, 0, rows);
    v.seq_start = cf_rows(v.seq_start, 0, n_seqs + 1);
    v.slot = cf_rows(v.slot, 0, rows);
    v.block_table = cf_rows(v.block_table, 0, n_seqs);
    v.n_rows = rows;
    v.n_seqs = n_seqs;
    v.max_rows_per_seq = max_rows_per_seq;
    return v;
}

/* The layers and the logits of every row of a decode step of n_seqs one-row sequences. */
static cinfer_status decode_ops(cf_runner *r, int n_seqs, cinfer_error *err) {
    const int win = r->kv->wblocks != NULL;
    cf_batch_view v = view_of(&r->bv, n_seqs, n_seqs, 1), vw = win ? view_of(&r->bv_win, n_seqs, n_seqs, 1) : (cf_batch_view){0};
    cf_pass p = {.s = &r->sc, .n = n_seqs, .pool = r->kv, .bv = &v, .bv_win = win ? &vw : NULL, .max_keys = r->p.max_ctx};
    CF_TRY(cf_forward_layers(r->m, &p, err));
    cf_forward_logits(r->m, &r->sc, cf_rows(r->sc.x, 0, n_seqs));
    return CINFER_OK;
}

static cinfer_status run_decode_graph(cf_runner *r, int n_seqs, cinfer_error *err) {
    cf_backend *be = r->m->be;
    const cf_backend_ops *op = be->ops;
    const int b = bucket_of(n_seqs);
    if (!r->graph[b]) {
        CF_TRY(op->graph_begin(be, err));
        cinfer_error ferr = {0};
        cinfer_status st = decode_ops(r, n_seqs, &ferr);
        cf_graph *g = NULL;
        cinfer_status end = op->graph_end(be, &g, err);
        if (st != CINFER_OK) {
            if (g) op->graph_free(be, g);
            if (err) *err = ferr;
            return st;
        }
        CF_TRY(end);
        r->graph[b] = g;
    }
    op->graph_launch(be, r->graph[b]);
    return CINFER_OK;
}

/* Whether item b picks every row (a greedy verification); an item's picks go to the picks rows of its logits rows. */
static int picks_all(const cf_batch_item *b) { return b->pick && b->logits == CF_LOGITS_ALL; }

/* Whether a step of these items can leave its picks to cf_runner_collect: no item asks for logits, and each picks one
 * token on the device or nothing (a piece of a prompt short of its end), at least one picking. */
static int deferrable(const cf_runner *r, const cf_batch_item *it, int n_items) {
    if (r->taps.hidden || !r->m->be->ops->read_begin || !r->m->be->ops->read_end || n_items > CF_READ_SLOT_VALUES) return 0;
    int picks = 0;
    for (int i = 0; i < n_items; i++) {
        if (it[i].logits != CF_LOGITS_NONE) return 0;
        picks += it[i].pick != NULL;
    }
    return picks > 0;
}

/* Gives back the blocks a reserve_all took beyond the items' lengths and what is in flight. */
static void release_reserved(cf_runner *r, cf_batch_item *it, int n) {
    for (int i = 0; i < n; i++) {
        cf_rseq *s = it[i].seq;
        cf_block_table_truncate(r->kv->blocks, &s->t, s->t.n_tokens + s->ahead);
        if (r->kv->wblocks) cf_block_table_truncate(r->kv->wblocks, &s->w, s->w.n_tokens + s->ahead);
    }
}

/* Reserves every item's new positions (after those in flight) in both pools, all or nothing, and enqueues the
 * copy-on-write copies. */
static cinfer_status reserve_all(cf_runner *r, cf_batch_item *it, int n_items, cinfer_error *err) {
    cf_kv_pool *kv = r->kv;
    int n_copies = 0, n_wcopies = 0, i = 0;
    cinfer_status st = CINFER_OK;
    for (; i < n_items && st == CINFER_OK; i++) {
        cf_rseq *s = it[i].seq;
        int nc = 0;
        if (kv->wblocks) cf_block_table_drop(kv->wblocks, &s->w, drop_point(s));   /* the last step is confirmed */
        st = cf_block_table_reserve(kv->blocks, &s->t, s->ahead + it[i].n, r->copies + n_copies, &nc, err);
        n_copies += nc;
        if (st == CINFER_OK && kv->wblocks) {
            st = cf_block_table_reserve(kv->wblocks, &s->w, s->ahead + it[i].n, r->wcopies + n_wcopies, &nc, err);
            n_wcopies += nc;
        }
    }
    /* the copies even on failure: a table that took a copy keeps it after giving back what it reserved */
    for (int c = 0; c < n_copies; c++) cf_kv_pool_copy_block(kv, 0, r->copies[c].src, r->copies[c].dst);
    for (int c = 0; c < n_wcopies; c++) cf_kv_pool_copy_block(kv, 1, r->wcopies[c].src, r->wcopies[c].dst);
    if (st != CINFER_OK) release_reserved(r, it, i);
    return st;
}

/* Records n rows written after s's length: their tokens (input; NULL: the token s's last deferred step picked),
 * the blocks they filled published, the window pool's old blocks let go. */
static void commit_rows(cf_runner *r, cf_rseq *s, const int32_t *input, int n) {
    memcpy(s->tokens + s->t.n_tokens, input ? input : &s->last_pick, (size_t)n * sizeof *s->tokens);
    cf_block_table_commit(r->kv->blocks, &s->t, s->tokens, n, 0);
    if (r->kv->wblocks) {
        /* published under the full blocks just committed; then what no query to come can see is let go,
         * keeping the rollback and, until the next step, the whole of this one (a truncate back to before it
         * stays exact) */
        cf_block_table_commit_keyed(r->kv->wblocks, &s->w, s->tokens, n, 0, r->kv->blocks, &s->t);
        const int back = n > r->rollback ? n : r->rollback;
        cf_block_table_drop(r->kv->wblocks, &s->w, s->w.n_tokens - (r->window - 1) - back);
    }
}

/* A follow-up's inputs: item i's row (h_seq_start[i], after layout) takes picks row follow_src[i] of the step in
 * flight, one copy a run of neighbours; joining items (follow_src -1) have theirs uploaded. */
static void inputs_from_picks(cf_runner *r, int n_items) {
    cf_backend *be = r->m->be;
    for (int i = 0, j; i < n_items; i = j) {
        j = i + 1;
        if (r->follow_src[i] < 0) continue;
        while (j < n_items && r->follow_src[j] == r->follow_src[i] + (j - i) && r->h_seq_start[j] == r->h_seq_start[i] + (j - i)) j++;
        be->ops->copy(be, cf_rows(r->sc.ids, r->h_seq_start[i], j - i), cf_rows(r->picks, r->follow_src[i], j - i));
    }
}

/* The step of checked items whose sequences it holds. follow: the items' inputs are the picks of the step in flight
 * (inputs_from_picks). deferred: the picks are enqueued for cf_runner_collect and nothing is committed;
 * otherwise the step waits for the device and commits. */
static cinfer_status step(cf_runner *r, cf_batch_item *it, int n_items, int follow, int deferred, cinfer_error *err) {
    cf_model *m = r->m;
    cf_backend *be = m->be;
    const cf_backend_ops *op = be->ops;
    const int64_t V = m->hp.vocab;
    r->hidden_rows = 0;
    for (int i = 0; i < n_items; i++) CF_TRY(tokens_reserve(it[i].seq, it[i].seq->t.n_tokens + it[i].seq->ahead + it[i].n, err));

    /* blocks for every item in both pools, all or nothing */
    cinfer_status st = reserve_all(r, it, n_items, err);
    if (st != CINFER_OK) return st;

    int decode = 1, max_rows = 0;
    for (int i = 0; i < n_items; i++) {
        decode &= it[i].n == 1 && it[i].logits != CF_LOGITS_ALL;
        if (it[i].n > max_rows) max_rows = it[i].n;
    }
    const int graphs = !r->taps.hidden && decode && r->p.graphs && m->decode_graphs && op->graph_begin;
    const int n_seqs = graphs ? 1 << bucket_of(n_items) : n_items;
    int out_rows = 0;
    const int rows = layout(r, it, n_items, graphs && n_seqs <= r->p.max_seqs ? n_seqs : n_items, &out_rows);
    if (graphs && n_seqs <= r->p.max_seqs) {
        for (int i = 0; i < n_items; i++) r->out_first[i] = i;   /* the graph computes every row's logits */
        upload(r, rows, n_seqs);
        if (follow) inputs_from_picks(r, n_items);
        st = run_decode_graph(r, n_seqs, err);
    } else {
        upload(r, rows, n_items);
        if (follow) inputs_from_picks(r, n_items);
        const int win = r->kv->wblocks != NULL;
        cf_batch_view v = view_of(&r->bv, rows, n_items, max_rows);
        cf_batch_view vw = win ? view_of(&r->bv_win, rows, n_items, max_rows) : (cf_batch_view){0};
        int max_keys = 0;
        for (int i = 0; i < n_items; i++) {
            const cf_rseq *s = it[i].seq;
            if (s->t.n_tokens + s->ahead + it[i].n > max_keys) max_keys = s->t.n_tokens + s->ahead + it[i].n;
        }
        cf_pass p = {.s = &r->sc, .n = rows, .pool = r->kv, .bv = &v, .bv_win = win ? &vw : NULL, .max_keys = max_keys};
        if (r->taps.hidden) p.taps = r->taps.layers, p.n_taps = r->taps.n, p.tap_out = r->tap_dev;
        st = cf_forward_layers(m, &p, err);
        if (st == CINFER_OK && out_rows) {
            /* gather the rows that need logits into o (f32, as x), unless they are x's rows as they are */
            int direct = out_rows == rows;
            if (!direct) {
                for (int i = 0, src = 0; i < n_items; src += it[i].n, i++) {
                    int k = it[i].logits == CF_LOGITS_ALL ? it[i].n : it[i].logits == CF_LOGITS_LAST || it[i].pick ? 1 : 0;
                    if (k) op->copy(be, cf_rows(r->sc.o, r->out_first[i], k), cf_rows(r->sc.x, src + it[i].n - k, k));
                }
            }
            cf_forward_logits(m, &r->sc, direct ? cf_rows(r->sc.x, 0, rows) : cf_rows(r->sc.o, 0, out_rows));
        }
    }

    /* picks on the device into the picks row of their logits row: one launch for each run of neighbours that pick
     * one row alike, one for each item that picks every row (greedy: a verification); then everything back to the
     * host, a read for each run of neighbouring logits rows that are not picked whole */
    const double t_wait = cf_monotonic_seconds();
    int any_pick = 0, pick_end = 0;
    for (int i = 0; i < n_items && st == CINFER_OK; i++) {
        if (!it[i].pick) continue;
        any_pick = 1;
        r->h_u[i] = is_greedy(it[i].pick) ? 0.0f : it[i].u;
        const int end = r->out_first[i] + (picks_all(&it[i]) ? it[i].n : 1);
        if (end > pick_end) pick_end = end;
    }
    if (st == CINFER_OK && any_pick) {
        op->write(be, cf_rows(r->u, 0, n_items), r->h_u);
        for (int i = 0, j; i < n_items; i = j) {
            j = i + 1;
            if (!it[i].pick) continue;
            const int row = r->out_first[i];
            if (picks_all(&it[i])) {
                op->argmax(be, cf_rows(r->picks, row, it[i].n), cf_rows(r->sc.logits, row, it[i].n));
                continue;
            }
            const int greedy = is_greedy(it[i].pick);
            while (j < n_items && it[j].pick && !picks_all(&it[j]) && r->out_first[j] == row + (j - i) &&
                   (greedy ? is_greedy(it[j].pick) : cf_sample_args_equal(it[j].pick, it[i].pick)))
                j++;
            cf_tensor lg = cf_rows(r->sc.logits, row, j - i), id = cf_rows(r->picks, row, j - i);
            if (greedy) op->argmax(be, id, lg);
            else op->sample(be, id, lg, cf_rows(r->u, i, j - i), it[i].pick);
        }
        if (deferred) {
            int *prow = r->prow + (size_t)r->next_slot * r->p.max_seqs;
            for (int i = 0; i < n_items; i++) prow[i] = it[i].pick ? r->out_first[i] : -1;
            op->read_begin(be, cf_rows(r->picks, 0, pick_end), r->next_slot);
            for (int i = 0; i < n_items; i++) it[i].seq->ahead += it[i].n;
            return CINFER_OK;
        }
        st = op->read(be, r->h_picks, cf_rows(r->picks, 0, pick_end), err);
    }
    for (int i = 0, j; i < n_items && st == CINFER_OK; i = j) {
        j = i + 1;
        if (it[i].logits == CF_LOGITS_NONE || picks_all(&it[i])) continue;
        int end = r->out_first[i] + (it[i].logits == CF_LOGITS_ALL ? it[i].n : 1);
        while (j < n_items && it[j].logits != CF_LOGITS_NONE && !picks_all(&it[j]) && r->out_first[j] == end)
            end += it[j].logits == CF_LOGITS_ALL ? it[j].n : 1, j++;
        st = op->read(be, r->h_logits + (size_t)r->out_first[i] * V, cf_rows(r->sc.logits, r->out_first[i], end - r->out_first[i]), err);
        for (int k = i; k < j; k++) it[k].out = r->h_logits + (size_t)r->out_first[k] * V;
    }
    if (st == CINFER_OK && r->taps.hidden) {
        const int64_t D = m->hp.dim;
        st = op->read(be, r->h_hidden, cf_rows(r->sc.x, 0, rows), err);
        if (st == CINFER_OK && r->taps.n) st = op->read(be, r->h_tapped, cf_cols(cf_rows(r->tap_dev, 0, rows), 0, r->taps.n * D), err);
    }
    if (st == CINFER_OK) st = op->sync(be, err);
    r->wait_s += cf_monotonic_seconds() - t_wait;
    if (st != CINFER_OK) {
        release_reserved(r, it, n_items);
        return st;
    }
    for (int i = 0; i < n_items; i++) {
        cf_rseq *s = it[i].seq;
        it[i].tokens = NULL;
        if (it[i].pick) {
            const int n_picked = picks_all(&it[i]) ? it[i].n : 1;
            int32_t *tok = r->h_tokens + r->out_first[i];
            for (int k = 0; k < n_picked; k++) {
                const float id = r->h_picks[r->out_first[i] + k];
                tok[k] = id >= 0 && id < (float)V ? (int32_t)id : -1;
            }
            it[i].token = tok[n_picked - 1];
            it[i].tokens = picks_all(&it[i]) ? tok : NULL;
            if (picks_all(&it[i])) it[i].out = NULL;
        }
        commit_rows(r, s, it[i].ids, it[i].n);
    }
    if (r->taps.hidden) r->hidden_rows = rows;
    return CINFER_OK;
}

int cf_runner_can_follow(const cf_runner *r) { return r->n_pend == 1 && r->pend[0].deferred && !r->kv->wblocks; }

/* A follow-up of the step in flight (cf_runner_submit): some of its sequences in its order, one row each whose input
 * is the token picked before it (ids NULL; follow_src), sequences joining (not in flight: ids given, as any step's),
 * and sequences whose item in flight is a piece of their prompt that picks nothing, with the next piece (ids given);
 * no item asks for logits, and each picks on the device or is a prompt piece that picks nothing. *n_joining = the
 * joining items. */
static cinfer_status check_follow_up(cf_runner *r, const cf_batch_item *it, int n_items, int *n_joining, cinfer_error *err) {
    const cf_batch_item *prev = r->pend[0].it;
    const int n_prev = r->pend[0].n, *prev_prow = r->prow + (size_t)r->pend[0].slot * r->p.max_seqs;
    if (r->kv->wblocks)
        return cf_fail(err, CINFER_E_UNSUPPORTED, "a step cannot follow one in flight on a model with sliding-window KV blocks");
    if (!cf_runner_can_follow(r))
        return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "a step follows one in flight only when that one only picks tokens on the device");
    if (n_items < 1 || n_items > r->p.max_seqs)
        return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "a step of %d sequences (1 to %d)", n_items, r->p.max_seqs);
    int64_t rows = 0;
    *n_joining = 0;
    for (int i = 0, j = 0; i < n_items; i++) {
        const cf_batch_item *b = &it[i];
        if (b->logits != CF_LOGITS_NONE || (!b->pick && !b->ids))
            return cf_fail(err, CINFER_E_INVALID_ARGUMENT,
                           "item %d: a following step's items ask for no logits, and pick on the device or are pieces of a prompt", i);
        if (b->ids) {   /* joining, or the next piece of a prompt in flight: checked as in any step */
            int in_flight = -1;
            for (int k = 0; k < n_prev; k++)
                if (prev[k].seq == b->seq) in_flight = k;
            if (in_flight >= 0 && prev[in_flight].pick)
                return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "item %d: a sequence whose token is in flight takes its input from the device (ids NULL)", i);
            for (int k = 0; k < i; k++)
                if (it[k].seq == b->seq) return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "items %d and %d are the same sequence", k, i);
            cinfer_status st = check_items(r, b, 1, err);
            if (st != CINFER_OK) return cf_wrap(err, st, "item %d", i);
            if ((int64_t)b->seq->t.n_tokens + b->seq->ahead + b->n > r->p.max_ctx)
                return cf_fail(err, CINFER_E_CONTEXT_OVERFLOW, "item %d: %d tokens after %d would exceed the context of %d", i, b->n,
                               b->seq->t.n_tokens + b->seq->ahead, r->p.max_ctx);
            r->follow_src[i] = in_flight >= 0 ? -2 : -1;
            rows += b->n;
            *n_joining += in_flight < 0;
            continue;
        }
        while (j < n_prev && prev[j].seq != b->seq) j++;
        if (j == n_prev)
            return cf_fail(err, CINFER_E_INVALID_ARGUMENT,
                           "item %d: a following step takes sequences of the step in flight, in its order, each once", i);
        if (!prev[j].pick)
            return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "item %d: its sequence's item in flight picks no token to take as input", i);
        r->follow_src[i] = prev_prow[j++];
        if (b->n != 1)
            return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "item %d: a following step's item of a sequence in flight is one row", i);
        CF_TRY(cf_model_check_pick(r->m, b->pick, b->u, err));
        if ((int64_t)b->seq->t.n_tokens + b->seq->ahead + 1 > r->p.max_ctx)
            return cf_fail(err, CINFER_E_CONTEXT_OVERFLOW, "1 token after %d would exceed the context of %d", b->seq->t.n_tokens + b->seq->ahead,
                           r->p.max_ctx);
        rows++;
    }
    if (rows > r->p.max_batch_tokens)
        return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "a step of %lld tokens; the runner takes at most %d", (long long)rows,
                       r->p.max_batch_tokens);
    return CINFER_OK;
}

static void release_leases(cf_runner *r) {
    for (int i = 0; i < r->n_leased; i++) cf_kv_lease_release(&r->leases[i]);
    r->n_leased = 0;
}

/* Keeps the leases of the items' sequences (the step now in flight) and releases the rest, whose sequences the caller
 * may free now. */
static void keep_leases_of(cf_runner *r, const cf_batch_item *it, int n) {
    const unsigned mark = ++r->keep_mark;
    for (int i = 0; i < n; i++) it[i].seq->keep = mark;
    int kept = 0;
    for (int k = 0; k < r->n_leased; k++) {
        const cf_rseq *s = (const cf_rseq *)((const char *)r->leases[k].table - offsetof(cf_rseq, t));
        if (s->keep == mark) r->leases[kept++] = r->leases[k];
        else cf_kv_lease_release(&r->leases[k]);
    }
    r->n_leased = kept;
}

cinfer_status cf_runner_submit(cf_runner *r, cf_batch_item *it, int n_items, cinfer_error *err) {
    if (r->n_pend == 2) return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "two steps are in flight; collect one first");
    const int follow = r->n_pend == 1;
    int joining = 0;   /* leases taken for a follow-up's joining sequences, after the step in flight's */
    if (follow) {
        int nj = 0;
        CF_TRY(check_follow_up(r, it, n_items, &nj, err));
        for (int i = 0, k = 0; i < n_items; i++)
            if (r->follow_src[i] == -1) r->lease_rq[k++] = (cf_lease_request){r->kv->blocks, &it[i].seq->t, &it[i].seq->ls, CF_LEASE_WRITE, "a sequence joining"};
        if (nj) CF_TRY(cf_kv_lease_acquire_all(r->lease_rq, nj, r->leases + r->n_leased, err));
        r->n_leased += nj;
        joining = nj;
    } else {
        CF_TRY(check_items(r, it, n_items, err));
        for (int i = 0; i < n_items; i++)
            r->lease_rq[i] = (cf_lease_request){r->kv->blocks, &it[i].seq->t, &it[i].seq->ls, CF_LEASE_WRITE, "a sequence of the step"};
        CF_TRY(cf_kv_lease_acquire_all(r->lease_rq, n_items, r->leases, err));
        r->n_leased = n_items;
    }
    const int deferred = deferrable(r, it, n_items);
    cinfer_status st = follow && !deferred ? cf_fail(err, CINFER_E_INVALID_ARGUMENT,
                                                     "a following step must leave its picks to collect (no taps, at most %d items)",
                                                     CF_READ_SLOT_VALUES)
                                           : step(r, it, n_items, follow, deferred, err);
    if (st != CINFER_OK) {
        if (!follow) release_leases(r);
        for (; joining > 0; joining--) cf_kv_lease_release(&r->leases[--r->n_leased]);
        return st;
    }
    r->pend[r->n_pend].it = it;
    r->pend[r->n_pend].n = n_items;
    r->pend[r->n_pend].deferred = deferred;
    r->pend[r->n_pend].slot = r->next_slot;
    r->n_pend++;
    if (deferred) r->next_slot ^= 1;
    return CINFER_OK;
}

/* The picks of the oldest pending step (deferred) read back and its rows committed. */
static cinfer_status collect_picks(cf_runner *r, cf_batch_item *it, int n_items, int slot, cinfer_error *err) {
    const cf_backend_ops *op = r->m->be->ops;
    const double t = cf_monotonic_seconds();
    cinfer_status st = op->read_end(r->m->be, slot, r->h_picks, err);
    r->wait_s += cf_monotonic_seconds() - t;
    if (st != CINFER_OK) return st;
    const int32_t V = r->m->hp.vocab;
    const int *prow = r->prow + (size_t)slot * r->p.max_seqs;
    for (int i = 0; i < n_items; i++) {
        cf_rseq *s = it[i].seq;
        const float id = prow[i] >= 0 ? r->h_picks[prow[i]] : -1.0f;
        it[i].token = id >= 0 && id < (float)V ? (int32_t)id : -1;
        it[i].tokens = NULL;
        it[i].out = NULL;
        s->ahead -= it[i].n;
        if (!it[i].ids && s->last_pick < 0) {   /* its input was no token: nothing to keep */
            release_reserved(r, &it[i], 1);
            it[i].token = -1;
        } else {
            commit_rows(r, s, it[i].ids, it[i].n);
        }
        s->last_pick = it[i].token;
    }
    return CINFER_OK;
}

cinfer_status cf_runner_collect(cf_runner *r, cinfer_error *err) {
    if (!r->n_pend) return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "no step in flight to collect");
    cinfer_status st = CINFER_OK;
    if (r->pend[0].deferred) st = collect_picks(r, r->pend[0].it, r->pend[0].n, r->pend[0].slot, err);
    if (st != CINFER_OK) {   /* a device failure: every sequence in flight goes back to its committed length */
        for (int k = 0; k < r->n_pend; k++)
            for (int i = 0; i < r->pend[k].n; i++) r->pend[k].it[i].seq->ahead = 0;
        for (int k = 0; k < r->n_pend; k++) release_reserved(r, r->pend[k].it, r->pend[k].n);
        r->n_pend = 0;
        release_leases(r);
        return st;
    }
    r->pend[0] = r->pend[1];
    if (--r->n_pend == 0) release_leases(r);
    else keep_leases_of(r, r->pend[0].it, r->pend[0].n);
    return CINFER_OK;
}

int cf_runner_in_flight(const cf_runner *r) { return r->n_pend; }

cinfer_status cf_runner_step(cf_runner *r, cf_batch_item *it, int n_items, cinfer_error *err) {
    if (r->n_pend) return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "a step is in flight; collect it first");
    CF_TRY(cf_runner_submit(r, it, n_items, err));
    return cf_runner_collect(r, err);
}

/* ---- hidden states and taps ---- */

cf_runner_taps cf_runner_get_taps(const cf_runner *r) { return r->taps; }

cinfer_status cf_runner_set_taps(cf_runner *r, const cf_runner_taps *t, cinfer_error *err) {
    cf_backend *be = r->m->be;
    const int64_t R = r->p.max_batch_tokens, D = r->m->hp.dim;
    if (t->n > CF_RUNNER_MAX_TAPS)
        return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "%d tap layers; a runner taps at most %d", t->n, CF_RUNNER_MAX_TAPS);
    if (t->hidden) CF_TRY(cf_check_taps(r->m, t->layers, t->n, err));
    else if (t->n) return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "tap layers without hidden states");
    if (t->hidden && !r->h_hidden) {
        r->h_hidden = malloc((size_t)(R * D) * sizeof *r->h_hidden);
        if (!r->h_hidden) return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory for %lld hidden-state rows", (long long)R);
    }
    if (t->hidden && t->n > r->tap_room) {
        float *h = malloc((size_t)(R * D * t->n) * sizeof *h);
        cf_tensor dev = {0};
        cinfer_status st = h ? be->ops->alloc(be, CF_F32, R, D * t->n, &dev, err)
                             : cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory for the outputs of %d tapped layers", t->n);
        if (st != CINFER_OK) {
            free(h);
            return cf_wrap(err, st, "making room for %d tapped layers of %lld rows", t->n, (long long)R);
        }
        if (r->tap_dev.data) be->ops->free_tensor(be, &r->tap_dev);
        free(r->h_tapped);
        r->tap_dev = dev;
        r->h_tapped = h;
        r->tap_room = t->n;
    }
    r->taps = *t;
    return CINFER_OK;
}

const float *cf_runner_hidden(const cf_runner *r, int *rows) {
    *rows = r->hidden_rows;
    return r->hidden_rows ? r->h_hidden : NULL;
}

const float *cf_runner_tapped(const cf_runner *r) { return r->hidden_rows && r->taps.n ? r->h_tapped : NULL; }

cinfer_status cf_runner_project_logits(cf_runner *r, const float *hidden, int n, const float **logits, cinfer_error *err) {
    cf_model *m = r->m;
    cf_backend *be = m->be;
    *logits = NULL;
    const int max = r->p.max_batch_tokens < r->sc.logit_rows ? r->p.max_batch_tokens : r->sc.logit_rows;
    if (n < 1 || n > max || !hidden)
        return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "projecting %d hidden rows; the runner projects 1 to %d at once", n, max);
    cf_tensor rows = cf_rows(r->sc.o, 0, n);
    be->ops->write(be, rows, hidden);
    cf_forward_logits(m, &r->sc, rows);
    CF_TRY(be->ops->read(be, r->h_logits, cf_rows(r->sc.logits, 0, n), err));
    CF_TRY(be->ops->sync(be, err));
    *logits = r->h_logits;
    return CINFER_OK;
}
