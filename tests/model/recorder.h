/* recorder.h: a test backend: the CPU's ops, with graph ops that behave as CUDA graphs do (between
 * graph_begin and graph_end the ops are recorded with their host arguments frozen; graph_launch replays them
 * on the tensors' contents at launch), counting reads and flagging transfers made while recording. Included
 * by one test file each (static state). */
#ifndef CF_TESTS_RECORDER_H
#define CF_TESTS_RECORDER_H

#include "backend/backend.h"
#include "base/status.h"
#include "model/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum kind {
    K_EMBED, K_RMSNORM, K_MATMUL, K_ADD, K_SCALE, K_GLU, K_SOFTCAP, K_ROPE, K_KV_STORE, K_ATTENTION, K_COPY,
    K_FILL, K_KV_STORE_POS, K_ATTENTION_POS, K_ARGMAX, K_SAMPLE, K_KV_STORE_SLOTS, K_ATTENTION_PAGED,
    K_QKV, K_MATMUL_GLU, K_MATMUL_GATED, K_ADD_NORM,
} kind;

typedef struct rec {
    kind k;
    cf_tensor t[6];
    float f[3];
    int i[4];
    cf_attn_args a;
    cf_sample_args s;
    cf_paged_attn_args pa;
    cf_batch_view bv;
    cf_qkv_args qa;
} rec;

struct cf_graph {
    rec *r;
    int n;
};

static const cf_backend_ops *base;
static cf_backend_ops wrapped;
static int recording, misuse;
static rec *cur;
static int n_cur, cap_cur;
static int n_recorded, n_launched, n_freed, n_live;
/* reads: how many, how many values in the last one, the widest row read */
static int n_reads;
static int64_t last_read_values, widest_read;

static rec *push(kind k) {
    if (n_cur == cap_cur) {
        cap_cur = cap_cur ? 2 * cap_cur : 256;
        cur = realloc(cur, (size_t)cap_cur * sizeof *cur);
        if (!cur) { fprintf(stderr, "out of memory\n"); exit(1); }
    }
    rec *r = &cur[n_cur++];
    memset(r, 0, sizeof *r);
    r->k = k;
    return r;
}

static void replay(cf_backend *be, const rec *r) {
    const cf_tensor *t = r->t;
    switch (r->k) {
    case K_EMBED: base->embed(be, t[0], t[1], t[2], r->f[0]); break;
    case K_RMSNORM: base->rmsnorm(be, t[0], t[1], t[2], r->f[0], r->f[1]); break;
    case K_MATMUL: base->matmul(be, t[0], t[1], t[2], t[3]); break;
    case K_ADD: base->add(be, t[0], t[1], t[2]); break;
    case K_SCALE: base->scale(be, t[0], r->f[0]); break;
    case K_GLU: base->glu(be, t[0], t[1], t[2], (cf_act)r->i[0]); break;
    case K_SOFTCAP: base->softcap(be, t[0], r->f[0]); break;
    case K_ROPE: base->rope(be, t[0], t[1], r->i[0], r->i[1], r->i[2], t[2]); break;
    case K_KV_STORE: base->kv_store(be, t[0], t[1], r->i[0], r->i[1]); break;
    case K_ATTENTION: base->attention(be, t[0], t[1], t[2], t[3], &r->a); break;
    case K_COPY: base->copy(be, t[0], t[1]); break;
    case K_FILL: base->fill(be, t[0], r->f[0]); break;
    case K_KV_STORE_POS: base->kv_store_pos(be, t[0], t[1], t[2], r->i[0]); break;
    case K_ATTENTION_POS: base->attention_pos(be, t[0], t[1], t[2], t[3], &r->a, t[4]); break;
    case K_ARGMAX: base->argmax(be, t[0], t[1]); break;
    case K_SAMPLE: base->sample(be, t[0], t[1], t[2], &r->s); break;
    case K_KV_STORE_SLOTS: base->kv_store_slots(be, t[0], t[1], t[2]); break;
    case K_ATTENTION_PAGED: base->attention_paged(be, t[0], t[1], t[2], t[3], &r->pa, &r->bv); break;
    case K_QKV: base->qkv(be, t[0], &r->qa); break;
    case K_MATMUL_GLU: base->matmul_glu(be, t[0], t[1], t[2], t[3], (cf_act)r->i[0], t[4], t[5]); break;
    case K_MATMUL_GATED: base->matmul_gated(be, t[0], t[1], t[2], (cf_act)r->i[0], t[3]); break;
    case K_ADD_NORM: base->add_norm(be, t[0], t[1], t[2], r->f[0], t[3], t[4], r->f[1], r->f[2]); break;
    }
}

#define RUN_OR_RECORD(K, ...)              \
    rec r_ = {.k = K, __VA_ARGS__};        \
    if (recording) *push(K) = r_;          \
    else replay(be, &r_)

static void w_embed(cf_backend *be, cf_tensor out, cf_tensor table, cf_tensor ids, float scale) {
    RUN_OR_RECORD(K_EMBED, .t = {out, table, ids}, .f = {scale});
}
static void w_rmsnorm(cf_backend *be, cf_tensor out, cf_tensor x, cf_tensor w, float eps, float off) {
    RUN_OR_RECORD(K_RMSNORM, .t = {out, x, w}, .f = {eps, off});
}
static void w_matmul(cf_backend *be, cf_tensor out, cf_tensor x, cf_tensor w, cf_tensor bias) {
    RUN_OR_RECORD(K_MATMUL, .t = {out, x, w, bias});
}
static void w_add(cf_backend *be, cf_tensor out, cf_tensor a, cf_tensor b) { RUN_OR_RECORD(K_ADD, .t = {out, a, b}); }
static void w_scale(cf_backend *be, cf_tensor x, float s) { RUN_OR_RECORD(K_SCALE, .t = {x}, .f = {s}); }
static void w_glu(cf_backend *be, cf_tensor out, cf_tensor g, cf_tensor u, cf_act act) {
    RUN_OR_RECORD(K_GLU, .t = {out, g, u}, .i = {(int)act});
}
static void w_softcap(cf_backend *be, cf_tensor x, float cap) { RUN_OR_RECORD(K_SOFTCAP, .t = {x}, .f = {cap}); }
static void w_rope(cf_backend *be, cf_tensor x, cf_tensor pos, int nh, int hd, int rot, cf_tensor inv) {
    RUN_OR_RECORD(K_ROPE, .t = {x, pos, inv}, .i = {nh, hd, rot});
}
static void w_kv_store(cf_backend *be, cf_tensor cache, cf_tensor src, int pos0, int cap) {
    RUN_OR_RECORD(K_KV_STORE, .t = {cache, src}, .i = {pos0, cap});
}
static void w_attention(cf_backend *be, cf_tensor out, cf_tensor q, cf_tensor k, cf_tensor v, const cf_attn_args *a) {
    RUN_OR_RECORD(K_ATTENTION, .t = {out, q, k, v}, .a = *a);
}
static void w_copy(cf_backend *be, cf_tensor dst, cf_tensor src) { RUN_OR_RECORD(K_COPY, .t = {dst, src}); }
static void w_fill(cf_backend *be, cf_tensor dst, float v) { RUN_OR_RECORD(K_FILL, .t = {dst}, .f = {v}); }
static void w_kv_store_pos(cf_backend *be, cf_tensor cache, cf_tensor src, cf_tensor pos, int cap) {
    RUN_OR_RECORD(K_KV_STORE_POS, .t = {cache, src, pos}, .i = {cap});
}
static void w_attention_pos(cf_backend *be, cf_tensor out, cf_tensor q, cf_tensor k, cf_tensor v, const cf_attn_args *a,
                            cf_tensor pos) {
    RUN_OR_RECORD(K_ATTENTION_POS, .t = {out, q, k, v, pos}, .a = *a);
}
static void w_argmax(cf_backend *be, cf_tensor ids, cf_tensor logits) { RUN_OR_RECORD(K_ARGMAX, .t = {ids, logits}); }
static void w_sample(cf_backend *be, cf_tensor ids, cf_tensor logits, cf_tensor u, const cf_sample_args *s) {
    RUN_OR_RECORD(K_SAMPLE, .t = {ids, logits, u}, .s = *s);
}

static void w_kv_store_slots(cf_backend *be, cf_tensor cache, cf_tensor src, cf_tensor slot) {
    RUN_OR_RECORD(K_KV_STORE_SLOTS, .t = {cache, src, slot});
}
static void w_attention_paged(cf_backend *be, cf_tensor out, cf_tensor q, cf_tensor k, cf_tensor v, const cf_paged_attn_args *a,
                              const cf_batch_view *b) {
    RUN_OR_RECORD(K_ATTENTION_PAGED, .t = {out, q, k, v}, .pa = *a, .bv = *b);
}

static void w_qkv(cf_backend *be, cf_tensor x, const cf_qkv_args *a) { RUN_OR_RECORD(K_QKV, .t = {x}, .qa = *a); }
static void w_matmul_glu(cf_backend *be, cf_tensor out, cf_tensor x, cf_tensor wg, cf_tensor wu, cf_act act, cf_tensor g, cf_tensor u) {
    RUN_OR_RECORD(K_MATMUL_GLU, .t = {out, x, wg, wu, g, u}, .i = {(int)act});
}
static void w_matmul_gated(cf_backend *be, cf_tensor out, cf_tensor x, cf_tensor w, cf_act act, cf_tensor m) {
    RUN_OR_RECORD(K_MATMUL_GATED, .t = {out, x, w, m}, .i = {(int)act});
}
static void w_add_norm(cf_backend *be, cf_tensor x, cf_tensor o, cf_tensor w_o, float scale, cf_tensor h, cf_tensor w_h, float eps,
                       float off) {
    RUN_OR_RECORD(K_ADD_NORM, .t = {x, o, w_o, h, w_h}, .f = {scale, eps, off});
}

/* transfers, syncs and allocations are not allowed while recording (backend.h) */
static void w_write(cf_backend *be, cf_tensor dst, const void *host) {
    misuse += recording;
    base->write(be, dst, host);
}
static cinfer_status w_read(cf_backend *be, float *host, cf_tensor src, cinfer_error *err) {
    misuse += recording;
    n_reads++;
    last_read_values = src.rows * src.cols;
    if (src.cols > widest_read) widest_read = src.cols;
    return base->read(be, host, src, err);
}
static void w_read_begin(cf_backend *be, cf_tensor src, int slot) {
    misuse += recording;
    n_reads++;
    last_read_values = src.rows * src.cols;
    if (src.cols > widest_read) widest_read = src.cols;
    base->read_begin(be, src, slot);
}
static cinfer_status w_sync(cf_backend *be, cinfer_error *err) {
    misuse += recording;
    return base->sync(be, err);
}
static cinfer_status w_alloc(cf_backend *be, cf_dtype dt, int64_t rows, int64_t cols, cf_tensor *out, cinfer_error *err) {
    misuse += recording;
    return base->alloc(be, dt, rows, cols, out, err);
}
static void w_free_tensor(cf_backend *be, cf_tensor *t) {
    misuse += recording;
    base->free_tensor(be, t);
}

static cinfer_status g_begin(cf_backend *be, cinfer_error *err) {
    if (recording) return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "graph_begin while recording");
    recording = 1;
    cur = NULL;
    n_cur = cap_cur = 0;
    return CINFER_OK;
}
static cinfer_status g_end(cf_backend *be, cf_graph **out, cinfer_error *err) {
    if (!recording) return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "graph_end without graph_begin");
    recording = 0;
    cf_graph *g = malloc(sizeof *g);
    g->r = cur;
    g->n = n_cur;
    cur = NULL;
    *out = g;
    n_recorded++;
    n_live++;
    return CINFER_OK;
}
static void g_launch(cf_backend *be, cf_graph *g) {
    misuse += recording;
    for (int i = 0; i < g->n; i++) replay(be, &g->r[i]);
    n_launched++;
}
static void g_free(cf_backend *be, cf_graph *g) {
    free(g->r);
    free(g);
    n_freed++;
    n_live--;
}

/* Gives m's backend the recorder's ops: counting reads, and with graph ops when with_graphs (used where
 * the model can record). */
static void wrap(cf_model *m, int with_graphs) {
    if (!base) base = m->be->ops;
    wrapped = *base;
    wrapped.embed = w_embed;
    wrapped.rmsnorm = w_rmsnorm;
    wrapped.matmul = w_matmul;
    wrapped.add = w_add;
    wrapped.scale = w_scale;
    wrapped.glu = w_glu;
    wrapped.softcap = w_softcap;
    wrapped.rope = w_rope;
    wrapped.kv_store = w_kv_store;
    wrapped.attention = w_attention;
    wrapped.copy = w_copy;
    wrapped.fill = w_fill;
    wrapped.kv_store_pos = w_kv_store_pos;
    wrapped.attention_pos = w_attention_pos;
    wrapped.kv_store_slots = w_kv_store_slots;
    wrapped.attention_paged = w_attention_paged;
    wrapped.qkv = base->qkv ? w_qkv : NULL;
    wrapped.matmul_glu = base->matmul_glu ? w_matmul_glu : NULL;
    wrapped.matmul_gated = base->matmul_gated ? w_matmul_gated : NULL;
    wrapped.add_norm = base->add_norm ? w_add_norm : NULL;
    wrapped.argmax = w_argmax;
    wrapped.sample = w_sample;
    wrapped.write = w_write;
    wrapped.read = w_read;
    wrapped.read_begin = w_read_begin;
    wrapped.sync = w_sync;
    wrapped.alloc = w_alloc;
    wrapped.free_tensor = w_free_tensor;
    wrapped.graph_begin = with_graphs ? g_begin : NULL;
    wrapped.graph_end = with_graphs ? g_end : NULL;
    wrapped.graph_launch = with_graphs ? g_launch : NULL;
    wrapped.graph_free = with_graphs ? g_free : NULL;
    m->be->ops = &wrapped;
    m->decode_graphs = with_graphs && !m->hp.n_experts;  /* the rule cf_model_load applies */
}

#endif
