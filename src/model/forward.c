/* forward.c: the decoder, one graph for every architecture, read top to bottom. Per layer:
 *   h = norm(x); q = h Wq; k, v = h Wk, h Wv (+ biases; v = the raw k where values are keys);
 *   per-head norms of q, k [and v]; RoPE(q, k); cache k, v (a KV-shared layer reads an earlier layer's cache)
 *   x += [post-norm](softmax(q k^T * scale [softcap]) v  Wo)
 *   h = norm(x); f = (act(h Wgate) * (h Wup)) Wdown
 *       [MoE: f = post1(f) + post2(routed experts of norm2(x))];  x += [post-norm](f)
 *   [per-layer input: x += norm((act(x Wg) * ple_l) Wp)];  [x *= layer scalar]
 * then logits = norm(x) Wout [softcap]. The per-layer inputs ple of all layers come first, from the
 * scaled embeddings x0: ple = (norm(x0 Wm / sqrt(D)) + table[id] * sqrt(P)) / sqrt(2), per layer.
 * Everything runs through backend ops; only MoE routing reads back to the host. Where the backend offers the
 * fused ops (qkv, matmul_glu, matmul_gated, add_norm) the graph asks for them by name, and each block's last
 * residual update also computes the next block's input norm; else it runs the same math as plain ops. */
#include "model/forward.h"
#include "base/status.h"

#include <math.h>

/* A contiguous [rows, cols] view at the start of a scratch buffer (per-layer widths differ). */
static cf_tensor scratch(cf_tensor buf, int64_t rows, int64_t cols) { return cf_reshape(buf, rows, cols); }

static const cf_tensor none = {0};

/* s->ple = the n tokens' per-layer inputs [n, L*P]; layer l's are columns l*P .. l*P+P-1. */
static void per_layer_inputs(cf_model *m, cf_scratch *s, int n, cf_tensor x0) {
    const cf_hparams *hp = &m->hp;
    cf_backend *be = m->be;
    const cf_backend_ops *op = be->ops;
    cf_tensor tok = cf_rows(s->ple, 0, n), proj = cf_rows(s->ple_proj, 0, n);
    op->embed(be, tok, m->ple_embd, cf_rows(s->ids, 0, n), m->ple_scale);
    op->matmul(be, proj, x0, m->ple_model_proj, none);
    op->scale(be, proj, (float)(1.0 / sqrt((double)hp->dim)));
    cf_tensor per_layer = cf_reshape(proj, (int64_t)n * hp->n_layers, hp->ple_dim);
    op->rmsnorm(be, per_layer, per_layer, m->ple_proj_norm, hp->norm_eps, hp->norm_w_offset);
    op->add(be, tok, tok, proj);
    op->scale(be, tok, (float)(1.0 / sqrt(2.0)));
}

/* The residual update after a block, with the norm the next block starts with where h.data is set (then
 * that block finds h ready): x = (x + [norm_o(o)]) * scale; h = norm_h(x). */
static void residual(cf_model *m, cf_tensor x, cf_tensor o, cf_tensor w_o, float scale, cf_tensor h, cf_tensor w_h) {
    const cf_hparams *hp = &m->hp;
    cf_backend *be = m->be;
    const cf_backend_ops *op = be->ops;
    if (!w_h.data) h = (cf_tensor){0};
    if (op->add_norm) {
        op->add_norm(be, x, o, w_o, scale, h, w_h, hp->norm_eps, hp->norm_w_offset);
        return;
    }
    if (w_o.data) op->rmsnorm(be, o, o, w_o, hp->norm_eps, hp->norm_w_offset);
    op->add(be, x, x, o);
    if (scale != 1.0f) op->scale(be, x, scale);
    if (h.data) op->rmsnorm(be, h, x, w_h, hp->norm_eps, hp->norm_w_offset);
}

/* h_ready: h already holds attn_norm(x) (the previous layer's last residual update made it). */
static void attention_block(cf_model *m, const cf_pass *p, int l, cf_tensor x, int h_ready) {
    cf_scratch *s = p->s;
    const int n = p->n;
    const cf_hparams *hp = &m->hp;
    const cf_layer_hp *L = &hp->layers[l];
    const cf_layer_w *w = &m->lw[l];
    cf_backend *be = m->be;
    const cf_backend_ops *op = be->ops;
    const float eps = hp->norm_eps, wo = hp->norm_w_offset;
    const int qd = L->n_heads * L->head_dim, kd = L->n_kv_heads * L->head_dim, vd = L->n_kv_heads * L->v_head_dim;
    cf_tensor h = cf_rows(s->h, 0, n), o = cf_rows(s->o, 0, n), pos = cf_rows(s->pos, 0, n);
    cf_tensor q = scratch(s->q, n, qd), k = scratch(s->k, n, kd), v = scratch(s->v, n, vd);
    cf_tensor att = scratch(s->att, n, L->n_heads * L->v_head_dim);
    const cf_rope_set *rs = &hp->rope[L->rope_set];

    const int own_kv = L->kv_source == l;
    const cf_batch_view *bv = p->pool && p->pool->windowed[L->kv_source] ? p->bv_win : p->bv;
    const cf_tensor q_norm = hp->qk_norm ? w->q_norm : none, k_norm = hp->qk_norm ? w->k_norm : none;
    const cf_tensor v_norm = hp->v_norm ? cf_cols(m->ones, 0, L->v_head_dim) : none;
    if (!h_ready) op->rmsnorm(be, h, x, w->attn_norm, eps, wo);
    if (op->qkv) {
        cf_qkv_args qa = {.q = q, .k = k, .v = v, .wq = w->wq, .wk = w->wk, .wv = L->k_eq_v ? none : w->wv, .bq = w->bq,
                          .bk = w->bk, .bv = w->bv, .q_norm = q_norm, .k_norm = k_norm, .v_norm = v_norm, .eps = eps,
                          .w_offset = wo, .own_kv = own_kv, .n_heads = L->n_heads, .n_kv_heads = L->n_kv_heads,
                          .head_dim = L->head_dim, .v_head_dim = L->v_head_dim, .rot_dim = rs->rot_dim, .pos = pos,
                          .inv_freq = m->rope_freq[L->rope_set]};
        if (own_kv && p->pool) {
            qa.dest = (cf_kv_dest){.k_cache = p->pool->k[l], .v_cache = p->pool->v[l], .idx = bv->slot};
        } else if (own_kv) {
            const cf_kv_layer *c = &p->kv->layers[l];
            qa.dest = (cf_kv_dest){.k_cache = c->k, .v_cache = c->v, .idx = p->pos_ops ? pos : none, .pos0 = p->kv->n, .cap = c->cap};
        }
        op->qkv(be, h, &qa);
    } else {
        op->matmul(be, q, h, w->wq, w->bq);
        if (own_kv) {
            op->matmul(be, k, h, w->wk, w->bk);
            if (L->k_eq_v) op->copy(be, v, k);
            else op->matmul(be, v, h, w->wv, w->bv);
        }
        if (q_norm.data) {
            cf_tensor qh = cf_reshape(q, (int64_t)n * L->n_heads, L->head_dim);
            op->rmsnorm(be, qh, qh, q_norm, eps, wo);
        }
        if (own_kv && k_norm.data) {
            cf_tensor kh = cf_reshape(k, (int64_t)n * L->n_kv_heads, L->head_dim);
            op->rmsnorm(be, kh, kh, k_norm, eps, wo);
        }
        if (own_kv && v_norm.data) {
            cf_tensor vh = cf_reshape(v, (int64_t)n * L->n_kv_heads, L->v_head_dim);
            op->rmsnorm(be, vh, vh, v_norm, eps, 0.0f);
        }
        op->rope(be, q, pos, L->n_heads, L->head_dim, rs->rot_dim, m->rope_freq[L->rope_set]);
        if (own_kv) op->rope(be, k, pos, L->n_kv_heads, L->head_dim, rs->rot_dim, m->rope_freq[L->rope_set]);
        if (own_kv && p->pool) {
            op->kv_store_slots(be, p->pool->k[l], k, bv->slot);
            op->kv_store_slots(be, p->pool->v[l], v, bv->slot);
        } else if (own_kv && p->pos_ops) {
            const cf_kv_layer *c = &p->kv->layers[l];
            op->kv_store_pos(be, c->k, k, pos, c->cap);
            op->kv_store_pos(be, c->v, v, pos, c->cap);
        } else if (own_kv) {
            const cf_kv_layer *c = &p->kv->layers[l];
            op->kv_store(be, c->k, k, p->kv->n, c->cap);
            op->kv_store(be, c->v, v, p->kv->n, c->cap);
        }
    }
    if (p->pool) {
        const cf_tensor kp = p->pool->k[L->kv_source], vp = p->pool->v[L->kv_source];
        cf_paged_attn_args a = {.n_heads = L->n_heads, .n_kv_heads = L->n_kv_heads, .head_dim = L->head_dim,
                                .v_head_dim = L->v_head_dim, .block_size = p->pool->block_size,
                                .table_cols = (int)bv->block_table.cols, .max_keys = p->max_keys, .window = L->window,
                                .scale = L->attn_scale, .softcap = hp->attn_softcap};
        op->attention_paged(be, att, q, kp, vp, &a, bv);
    } else {
        const cf_kv_layer *cache = &p->kv->layers[L->kv_source];
        const int pos0 = p->kv->n;
        cf_attn_args a = {.n_q = n, .pos0 = pos0, .n_heads = L->n_heads, .n_kv_heads = L->n_kv_heads,
                          .head_dim = L->head_dim, .v_head_dim = L->v_head_dim, .cap = cache->cap,
                          .window = L->window, .scale = L->attn_scale, .softcap = hp->attn_softcap};
        if (p->pos_ops) op->attention_pos(be, att, q, cache->k, cache->v, &a, pos);
        else op->attention(be, att, q, cache->k, cache->v, &a);
    }
    op->matmul(be, o, att, w->wo, none);
    residual(m, x, o, hp->sandwich_norm ? w->post_attn_norm : none, 1.0f, h, w->ffn_norm);
}

/* The routed experts of layer l into s->e_acc [n, D]. Router: softmax over experts of
 * (unweighted-norm(x) * scale / sqrt(D)) Wr; the top k probabilities renormalised to sum 1, times the
 * experts' per_expert_scale. Each expert runs on the rows routed to it (gathered by row copies) and its
 * weighted output is added back row by row, experts in index order as transformers sums them. */
static cinfer_status routed_experts(cf_model *m, cf_scratch *s, int l, int n, cf_tensor x, cinfer_error *err) {
    const cf_hparams *hp = &m->hp;
    const cf_layer_w *w = &m->lw[l];
    cf_backend *be = m->be;
    const cf_backend_ops *op = be->ops;
    const int E = hp->n_experts, K = hp->n_experts_used;
    const int64_t D = hp->dim, I = hp->expert_ffn_dim;
    cf_tensor hr = cf_rows(s->e_x, 0, n), scores = cf_rows(s->e_logits, 0, n), h2 = cf_rows(s->h, 0, n);
    cf_tensor acc = cf_rows(s->e_acc, 0, n);

    op->rmsnorm(be, hr, x, w->router_scale, hp->norm_eps, 0.0f);
    op->scale(be, hr, (float)(1.0 / sqrt((double)D)));
    op->matmul(be, scores, hr, w->router, none);
    cinfer_status st = op->read(be, s->route, scores, err);
    if (st != CINFER_OK) return st;

    const float *expert_scale = m->expert_scale + (size_t)l * E;
    for (int e = 0; e < E; e++) s->route_n[e] = 0;
    for (int t = 0; t < n; t++) {
        float *p = s->route + (size_t)t * E, mx = -INFINITY, sum = 0;
        for (int e = 0; e < E; e++) mx = p[e] > mx ? p[e] : mx;
        for (int e = 0; e < E; e++) { p[e] = expf(p[e] - mx); sum += p[e]; }
        for (int e = 0; e < E; e++) p[e] /= sum;
        int top[CF_MAX_EXPERTS_USED];
        float top_sum = 0;
        for (int k = 0; k < K; k++) {
            int best = -1;
            for (int e = 0; e < E; e++) {
                int taken = 0;
                for (int j = 0; j < k; j++) taken |= top[j] == e;
                if (!taken && (best < 0 || p[e] > p[best])) best = e;
            }
            top[k] = best;
            top_sum += p[best];
        }
        for (int k = 0; k < K; k++) {
            int e = top[k], slot = e * s->rows + s->route_n[e]++;
            s->route_tok[slot] = t;
            s->route_w[slot] = p[e] / top_sum * expert_scale[e];
        }
    }

    op->rmsnorm(be, h2, x, w->ffn_pre_norm_2, hp->norm_eps, hp->norm_w_offset);
    op->fill(be, acc, 0.0f);
    for (int e = 0; e < E; e++) {
        const int c = s->route_n[e];
        const int *tok = s->route_tok + e * s->rows;
        const float *wt = s->route_w + e * s->rows;
        if (!c) continue;
        for (int j = 0; j < c; j++) op->copy(be, cf_rows(s->e_x, j, 1), cf_rows(h2, tok[j], 1));
        cf_tensor gu = cf_rows(s->e_gu, 0, c), act = cf_rows(s->e_act, 0, c), out = cf_rows(s->e_out, 0, c);
        op->matmul(be, gu, cf_rows(s->e_x, 0, c), cf_rows(w->exp_gate_up, e * 2 * I, 2 * I), none);
        op->glu(be, act, cf_cols(gu, 0, I), cf_cols(gu, I, I), hp->act);
        op->matmul(be, out, act, cf_rows(w->exp_down, e * D, D), none);
        for (int j = 0; j < c; j++) {
            cf_tensor row = cf_rows(out, j, 1), dst = cf_rows(acc, tok[j], 1);
            op->scale(be, row, wt[j]);
            op->add(be, dst, dst, row);
        }
    }
    return CINFER_OK;
}

/* h holds ffn_norm(x); the residual update ends with h = norm_next(x) where norm_next.data is set. */
static cinfer_status feed_forward_block(cf_model *m, cf_scratch *s, int l, int n, cf_tensor x, float scale, cf_tensor norm_next,
                                        cinfer_error *err) {
    const cf_hparams *hp = &m->hp;
    const cf_layer_hp *L = &hp->layers[l];
    const cf_layer_w *w = &m->lw[l];
    cf_backend *be = m->be;
    const cf_backend_ops *op = be->ops;
    const float eps = hp->norm_eps, wo = hp->norm_w_offset;
    cf_tensor h = cf_rows(s->h, 0, n), o = cf_rows(s->o, 0, n);
    cf_tensor gate = scratch(s->gate, n, L->ffn_dim), up = scratch(s->up, n, L->ffn_dim);

    if (op->matmul_glu) {
        op->matmul_glu(be, gate, h, w->w_gate, w->w_up, hp->act, gate, up);
    } else {
        op->matmul(be, gate, h, w->w_gate, none);
        op->matmul(be, up, h, w->w_up, none);
        op->glu(be, gate, gate, up, hp->act);
    }
    op->matmul(be, o, gate, w->w_down, none);
    if (hp->n_experts) {
        cf_tensor acc = cf_rows(s->e_acc, 0, n);
        op->rmsnorm(be, o, o, w->ffn_post_norm_1, eps, wo);
        cinfer_status st = routed_experts(m, s, l, n, x, err);
        if (st != CINFER_OK) return st;
        op->rmsnorm(be, acc, acc, w->ffn_post_norm_2, eps, wo);
        op->add(be, o, o, acc);
    }
    residual(m, x, o, hp->sandwich_norm ? w->post_ffn_norm : none, scale, h, norm_next);
    return CINFER_OK;
}

/* Ends, like feed_forward_block, with x *= scale and h = norm_next(x) where norm_next.data is set. */
static void per_layer_input_block(cf_model *m, cf_scratch *s, int l, int n, cf_tensor x, float scale, cf_tensor norm_next) {
    const cf_hparams *hp = &m->hp;
    const cf_layer_w *w = &m->lw[l];
    cf_backend *be = m->be;
    const cf_backend_ops *op = be->ops;
    cf_tensor g = cf_rows(s->ple_gate, 0, n), o = cf_rows(s->o, 0, n);
    cf_tensor ple = cf_cols(cf_rows(s->ple, 0, n), (int64_t)l * hp->ple_dim, hp->ple_dim);
    if (op->matmul_gated) {
        op->matmul_gated(be, g, x, w->ple_gate, hp->act, ple);
    } else {
        op->matmul(be, g, x, w->ple_gate, none);
        op->glu(be, g, g, ple, hp->act);
    }
    op->matmul(be, o, g, w->ple_proj, none);
    residual(m, x, o, w->ple_norm, scale, cf_rows(s->h, 0, n), norm_next);
}

cinfer_status cf_check_taps(const cf_model *m, const int *taps, int n_taps, cinfer_error *err) {
    const int L = m->hp.n_layers;
    if (n_taps < 0 || n_taps > L || (n_taps && !taps))
        return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "%d tap layers asked of a model of %d layers", n_taps, L);
    for (int j = 0; j < n_taps; j++) {
        if (taps[j] < 0 || taps[j] >= L)
            return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "tap %d names layer %d; the model's layers are 0 to %d", j, taps[j], L - 1);
        for (int i = 0; i < j; i++)
            if (taps[i] == taps[j]) return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "taps %d and %d both name layer %d", i, j, taps[j]);
    }
    return CINFER_OK;
}

/* Copies layer l's output x into its tap column slices, if l is tapped. */
static void tap(cf_model *m, const cf_pass *p, int l, cf_tensor x) {
    const int64_t D = m->hp.dim;
    for (int j = 0; j < p->n_taps; j++)
        if (p->taps[j] == l) m->be->ops->copy(m->be, cf_cols(cf_rows(p->tap_out, 0, p->n), j * D, D), x);
}

cinfer_status cf_forward_layers(cf_model *m, const cf_pass *p, cinfer_error *err) {
    const cf_hparams *hp = &m->hp;
    cf_backend *be = m->be;
    const cf_backend_ops *op = be->ops;
    cf_scratch *s = p->s;
    const int n = p->n;
    cf_tensor x = cf_rows(s->x, 0, n);
    if (p->n_taps) {
        CF_TRY(cf_check_taps(m, p->taps, p->n_taps, err));
        if (p->tap_out.dtype != CF_F32 || p->tap_out.rows < n || p->tap_out.cols < (int64_t)p->n_taps * hp->dim)
            return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "the tap output must be F32 [>= %d, >= %lld], not %s [%lld, %lld]", n,
                           (long long)p->n_taps * hp->dim, cf_dtype_name(p->tap_out.dtype), (long long)p->tap_out.rows,
                           (long long)p->tap_out.cols);
    }

    op->embed(be, x, m->tok_embd, cf_rows(s->ids, 0, n), m->embed_scale);
    if (hp->ple_dim) per_layer_inputs(m, s, n, x);

    /* each layer's last residual update also makes the next layer's attn_norm(x) */
    for (int l = 0; l < hp->n_layers; l++) {
        attention_block(m, p, l, x, l > 0);
        const cf_tensor next = l + 1 < hp->n_layers ? m->lw[l + 1].attn_norm : none;
        const float scale = m->layer_scalar[l];
        cinfer_status st = feed_forward_block(m, s, l, n, x, hp->ple_dim ? 1.0f : scale, hp->ple_dim ? none : next, err);
        if (st != CINFER_OK) return st;
        if (hp->ple_dim) per_layer_input_block(m, s, l, n, x, scale, next);
        if (p->n_taps) tap(m, p, l, x);
    }
    return CINFER_OK;
}

void cf_forward_logits(cf_model *m, cf_scratch *s, cf_tensor xl) {
    const cf_hparams *hp = &m->hp;
    cf_backend *be = m->be;
    cf_tensor hl = cf_rows(s->h, 0, xl.rows), logits = cf_rows(s->logits, 0, xl.rows);
    be->ops->rmsnorm(be, hl, xl, m->out_norm, hp->norm_eps, hp->norm_w_offset);
    be->ops->matmul(be, logits, hl, m->output, (cf_tensor){0});
    if (hp->final_softcap > 0) be->ops->softcap(be, logits, hp->final_softcap);
}
