/* forward.c: the decoder, one graph for every architecture, read top to bottom. Per layer:
 *   h = norm(x); q,k,v = h Wq, h Wk, h Wv (+ bias); per-head norm of q,k; RoPE(q,k); cache k,v;
 *   x += [post-norm](softmax(q k^T * scale [softcap]) v  Wo)
 *   h = norm(x); x += [post-norm](act(h Wgate) * (h Wup)  Wdown)
 * then logits = norm(x) Wout [softcap]. Everything runs through backend ops. */
#include "model/seq.h"

#include <math.h>

/* A contiguous [rows, cols] view at the start of a scratch buffer (per-layer widths differ). */
static cf_tensor scratch(cf_tensor buf, int64_t rows, int64_t cols) { return cf_reshape(buf, rows, cols); }

void cf_forward_chunk(cf_model *m, cf_seq *s, int n, int out_rows) {
    const cf_hparams *hp = &m->hp;
    cf_backend *be = m->be;
    const cf_backend_ops *op = be->ops;
    const int pos0 = s->kv->n;
    const float eps = hp->norm_eps, wo = hp->norm_w_offset;
    cf_tensor none = {0};

    cf_tensor x = cf_rows(s->x, 0, n), h = cf_rows(s->h, 0, n), o = cf_rows(s->o, 0, n);
    cf_tensor pos = cf_rows(s->pos, 0, n);

    /* x = embedding rows (Gemma scales them by sqrt(dim)) */
    op->embed(be, x, m->tok_embd, cf_rows(s->ids, 0, n), hp->embed_scale);

    for (int l = 0; l < hp->n_layers; l++) {
        const cf_layer_hp *L = &hp->layers[l];
        const cf_layer_w *w = &m->lw[l];
        const int qd = L->n_heads * L->head_dim, kd = L->n_kv_heads * L->head_dim, vd = L->n_kv_heads * L->v_head_dim;
        cf_tensor q = scratch(s->q, n, qd), k = scratch(s->k, n, kd), v = scratch(s->v, n, vd);
        cf_tensor att = scratch(s->att, n, L->n_heads * L->v_head_dim);

        /* attention block */
        op->rmsnorm(be, h, x, w->attn_norm, eps, wo);
        op->matmul(be, q, h, w->wq, w->bq);
        op->matmul(be, k, h, w->wk, w->bk);
        op->matmul(be, v, h, w->wv, w->bv);
        if (hp->qk_norm) {
            cf_tensor qh = cf_reshape(q, (int64_t)n * L->n_heads, L->head_dim);
            cf_tensor kh = cf_reshape(k, (int64_t)n * L->n_kv_heads, L->head_dim);
            op->rmsnorm(be, qh, qh, w->q_norm, eps, wo);
            op->rmsnorm(be, kh, kh, w->k_norm, eps, wo);
        }
        const cf_rope_set *rs = &hp->rope[L->rope_set];
        op->rope(be, q, pos, L->n_heads, L->head_dim, rs->rot_dim, m->rope_freq[L->rope_set]);
        op->rope(be, k, pos, L->n_kv_heads, L->head_dim, rs->rot_dim, m->rope_freq[L->rope_set]);

        const cf_kv_layer *cache = &s->kv->layers[L->kv_source];
        if (L->kv_source == l) {
            op->kv_store(be, cache->k, k, pos0, cache->cap);
            op->kv_store(be, cache->v, v, pos0, cache->cap);
        }
        cf_attn_args a = {.n_q = n, .pos0 = pos0, .n_heads = L->n_heads, .n_kv_heads = L->n_kv_heads,
                          .head_dim = L->head_dim, .v_head_dim = L->v_head_dim, .cap = cache->cap,
                          .window = L->window, .scale = L->attn_scale, .softcap = hp->attn_softcap};
        op->attention(be, att, q, cache->k, cache->v, &a);
        op->matmul(be, o, att, w->wo, none);
        if (hp->sandwich_norm) op->rmsnorm(be, o, o, w->post_attn_norm, eps, wo);
        op->add(be, x, x, o);

        /* feed-forward block */
        cf_tensor gate = scratch(s->gate, n, L->ffn_dim), up = scratch(s->up, n, L->ffn_dim);
        op->rmsnorm(be, h, x, w->ffn_norm, eps, wo);
        op->matmul(be, gate, h, w->w_gate, none);
        op->matmul(be, up, h, w->w_up, none);
        op->glu(be, gate, gate, up, hp->act);
        op->matmul(be, o, gate, w->w_down, none);
        if (hp->sandwich_norm) op->rmsnorm(be, o, o, w->post_ffn_norm, eps, wo);
        op->add(be, x, x, o);
    }

    if (out_rows > 0) {
        cf_tensor xl = cf_rows(x, n - out_rows, out_rows), hl = cf_rows(h, 0, out_rows);
        cf_tensor logits = cf_rows(s->logits, 0, out_rows);
        op->rmsnorm(be, hl, xl, m->out_norm, eps, wo);
        op->matmul(be, logits, hl, m->output, none);
        if (hp->final_softcap > 0) op->softcap(be, logits, hp->final_softcap);
    }
}
