/* model.c: loading a model folder (or random weights), binding every weight to the backend with its
 * shape checked, and the per-sequence state. */
#include "model/model.h"
#include "model/seq.h"
#include "format/safetensors.h"
#include "base/status.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


cf_model_params cf_model_default_params(void) {
    cf_model_params p = {.backend = cf_backend_default_params()};
    return p;
}

/* Where a weight comes from: the mapped files, or seeded random numbers. */
typedef struct binder {
    cf_model *m;
    const char *dir;      /* the model folder, for messages */
    const char *prefix;   /* "model." or e.g. "model.language_model." */
    uint64_t rng;         /* random mode when st == NULL */
    int n_dtypes_seen;
    int dtypes_seen[CF_DTYPE_COUNT];
} binder;

static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static cinfer_status bind_random(binder *b, const char *name, int64_t rows, int64_t cols, int is_norm, cf_tensor *out, cinfer_error *err) {
    cf_model *m = b->m;
    size_t n = (size_t)(rows * cols);
    uint16_t *buf = malloc(n * sizeof *buf);
    void **nb = realloc(m->host_bufs, (size_t)(m->n_host_bufs + 1) * sizeof *nb);
    if (!buf || !nb) { free(buf); if (nb) m->host_bufs = nb; return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory for random weight %s", name); }
    m->host_bufs = nb;
    m->host_bufs[m->n_host_bufs++] = buf;
    uint64_t seed = splitmix(&b->rng);
    float sc = is_norm ? 0.0f : 0.02f * sqrtf(3.0f);
    #pragma omp parallel for schedule(static)
    for (size_t blk = 0; blk < (n + 4095) / 4096; blk++) {
        uint64_t s = seed ^ (blk * 0x9e3779b97f4a7c15ull);
        size_t end = (blk + 1) * 4096 < n ? (blk + 1) * 4096 : n;
        for (size_t i = blk * 4096; i < end; i++) {
            float u = (float)(splitmix(&s) >> 40) / (float)(1 << 24) * 2.0f - 1.0f;
            buf[i] = cf_f32_to_bf16(is_norm ? 1.0f : u * sc);
        }
    }
    return m->be->ops->upload_weight(m->be, buf, CF_BF16, rows, cols, out, err);
}

/* Binds prefix+name with shape [rows, cols] (cols 0: a vector of rows elements). Missing optional
 * weights leave out zeroed. */
static cinfer_status bind(binder *b, const char *name, int64_t rows, int64_t cols, int optional, cf_tensor *out, cinfer_error *err) {
    cf_model *m = b->m;
    char full[256];
    snprintf(full, sizeof full, "%s%s", b->prefix, name);
    int is_vec = cols == 0;
    int64_t r = is_vec ? 1 : rows, c = is_vec ? rows : cols;
    memset(out, 0, sizeof *out);
    if (!m->st) {
        if (optional) return CINFER_OK;
        return bind_random(b, full, r, c, is_vec, out, err);
    }
    const cf_st_tensor *t = cf_st_find(m->st, full);
    if (!t) {
        if (optional) return CINFER_OK;
        return cf_fail(err, CINFER_E_FORMAT, "%s: weight '%s' is missing from the model's safetensors files", b->dir, full);
    }
    int ok = is_vec ? t->n_dims == 1 && t->shape[0] == rows : t->n_dims == 2 && t->shape[0] == rows && t->shape[1] == cols;
    if (!ok) {
        char got[96] = "";
        for (int i = 0; i < t->n_dims; i++)
            snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", i ? ", " : "", (long long)t->shape[i]);
        if (is_vec)
            return cf_fail(err, CINFER_E_FORMAT, "%s: weight '%s' has shape [%s], expected [%lld]", t->file, full, got, (long long)rows);
        return cf_fail(err, CINFER_E_FORMAT, "%s: weight '%s' has shape [%s], expected [%lld, %lld]", t->file, full, got,
                       (long long)rows, (long long)cols);
    }
    if (t->dtype != CF_F32 && t->dtype != CF_F16 && t->dtype != CF_BF16)
        return cf_fail(err, CINFER_E_UNSUPPORTED, "%s: weight '%s' has dtype %s (supported: F32, F16, BF16)", t->file, full, t->dtype_name);
    if (!b->dtypes_seen[t->dtype]) { b->dtypes_seen[t->dtype] = 1; b->n_dtypes_seen++; }
    cinfer_status st = m->be->ops->upload_weight(m->be, t->data, (cf_dtype)t->dtype, r, c, out, err);
    if (st != CINFER_OK) return cf_wrap(err, st, "uploading '%s'", full);
    return CINFER_OK;
}

static int64_t tbytes(cf_tensor t) { return t.data ? t.rows * t.cols * (int64_t)cf_dtype_size(t.dtype) : 0; }

/* The Gemma 4 extras are bound in model_gemma.c. */
cinfer_status cf_gemma_bind_extra(cf_model *m, void *binder_ctx, cinfer_error *err);

static cinfer_status bind_all(cf_model *m, binder *b, cinfer_error *err) {
    const cf_hparams *hp = &m->hp;
    const int64_t D = hp->dim;
    CF_TRY(bind(b, "embed_tokens.weight", hp->vocab, D, 0, &m->tok_embd, err));
    CF_TRY(bind(b, "norm.weight", D, 0, 0, &m->out_norm, err));
    if (hp->tied) {
        m->output = m->tok_embd;
    } else {
        /* lm_head sits beside the decoder: strip the decoder prefix's last component ("model.") */
        char saved[128];
        snprintf(saved, sizeof saved, "%s", b->prefix);
        char *cut = strstr(saved, "model.");
        const char *outer = "";
        char tmp[128];
        if (cut) { snprintf(tmp, sizeof tmp, "%.*s", (int)(cut - saved), saved); outer = tmp; }
        const char *old = b->prefix;
        b->prefix = outer;
        cinfer_status st = bind(b, "lm_head.weight", hp->vocab, D, m->st != NULL, &m->output, err);
        b->prefix = old;
        CF_TRY(st);
        if (!m->output.data) m->output = m->tok_embd; /* checkpoint ties them without saying so */
    }
    m->lw = calloc((size_t)hp->n_layers, sizeof *m->lw);
    if (!m->lw) return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory");
    for (int l = 0; l < hp->n_layers; l++) {
        const cf_layer_hp *L = &hp->layers[l];
        cf_layer_w *w = &m->lw[l];
        const int64_t q = (int64_t)L->n_heads * L->head_dim, kd = (int64_t)L->n_kv_heads * L->head_dim,
                      vd = (int64_t)L->n_kv_heads * L->v_head_dim, od = (int64_t)L->n_heads * L->v_head_dim;
        char n[160];
#define B(field, suffix, rows, cols, opt) \
        do { snprintf(n, sizeof n, "layers.%d.%s", l, suffix); CF_TRY(bind(b, n, rows, cols, opt, &w->field, err)); } while (0)
        B(attn_norm, "input_layernorm.weight", D, 0, 0);
        B(wq, "self_attn.q_proj.weight", q, D, 0);
        B(wk, "self_attn.k_proj.weight", kd, D, 0);
        B(wv, "self_attn.v_proj.weight", vd, D, 0);
        B(wo, "self_attn.o_proj.weight", D, od, 0);
        if (hp->qkv_bias) {
            B(bq, "self_attn.q_proj.bias", q, 0, 0);
            B(bk, "self_attn.k_proj.bias", kd, 0, 0);
            B(bv, "self_attn.v_proj.bias", vd, 0, 0);
        }
        if (hp->qk_norm) {
            B(q_norm, "self_attn.q_norm.weight", L->head_dim, 0, 0);
            B(k_norm, "self_attn.k_norm.weight", L->head_dim, 0, 0);
        }
        if (hp->sandwich_norm) {
            B(post_attn_norm, "post_attention_layernorm.weight", D, 0, 0);
            B(ffn_norm, "pre_feedforward_layernorm.weight", D, 0, 0);
            B(post_ffn_norm, "post_feedforward_layernorm.weight", D, 0, 0);
        } else {
            B(ffn_norm, "post_attention_layernorm.weight", D, 0, 0);
        }
        B(w_gate, "mlp.gate_proj.weight", L->ffn_dim, D, 0);
        B(w_up, "mlp.up_proj.weight", L->ffn_dim, D, 0);
        B(w_down, "mlp.down_proj.weight", D, L->ffn_dim, 0);
#undef B
    }
    /* bytes: everything stored, and what one decode step streams */
    m->weight_bytes = tbytes(m->tok_embd) + tbytes(m->out_norm) + (hp->tied ? 0 : tbytes(m->output));
    m->decode_bytes = tbytes(m->out_norm) + tbytes(m->output);
    for (int l = 0; l < hp->n_layers; l++) {
        const cf_tensor *t = (const cf_tensor *)&m->lw[l];
        int64_t s = 0;
        for (size_t i = 0; i < sizeof(cf_layer_w) / sizeof(cf_tensor); i++) s += tbytes(t[i]);
        m->weight_bytes += s;
        m->decode_bytes += s;
    }
    return CINFER_OK;
}

static cinfer_status finish_load(cf_model *m, binder *b, cinfer_error *err) {
    cf_hparams *hp = &m->hp;
    for (int r = 0; r < hp->n_rope; r++) {
        CF_TRY(m->be->ops->alloc(m->be, CF_F32, 1, hp->rope[r].rot_dim / 2, &m->rope_freq[r], err));
        m->be->ops->write(m->be, m->rope_freq[r], hp->rope[r].inv_freq);
    }
    CF_TRY(bind_all(m, b, err));
    m->dtype_summary[0] = 0;
    for (int t = 0; t < CF_DTYPE_COUNT; t++)
        if (b->dtypes_seen[t])
            snprintf(m->dtype_summary + strlen(m->dtype_summary), sizeof m->dtype_summary - strlen(m->dtype_summary), "%s%s",
                     m->dtype_summary[0] ? "+" : "", cf_dtype_name((cf_dtype)t));
    if (!m->st) snprintf(m->dtype_summary, sizeof m->dtype_summary, "BF16 (random)");
    return m->be->ops->sync(m->be, err);
}

/* The decoder's tensor prefix: whatever precedes "embed_tokens.weight" ("model.", "model.language_model."...). */
static cinfer_status find_prefix(const cf_st_set *st, char *prefix, size_t cap, const char *dir, cinfer_error *err) {
    const char *suffix = "embed_tokens.weight";
    size_t sl = strlen(suffix);
    for (size_t i = 0; i < cf_st_count(st); i++) {
        const char *nm = cf_st_at(st, i)->name;
        size_t nl = strlen(nm);
        if (nl >= sl && !strcmp(nm + nl - sl, suffix) && !strstr(nm, "per_layer") && nl - sl < cap) {
            snprintf(prefix, cap, "%.*s", (int)(nl - sl), nm);
            return CINFER_OK;
        }
    }
    return cf_fail(err, CINFER_E_FORMAT, "%s: no '*embed_tokens.weight' tensor: not a decoder-only language model checkpoint", dir);
}

static cinfer_status model_new(const cf_model_params *p, cf_model **out, cinfer_error *err) {
    cf_model *m = calloc(1, sizeof *m);
    if (!m) return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory");
    cf_model_params dp = cf_model_default_params();
    cinfer_status st = cf_backend_create(p ? &p->backend : &dp.backend, &m->be, err);
    if (st != CINFER_OK) { free(m); return st; }
    *out = m;
    return CINFER_OK;
}

cinfer_status cf_model_load(const char *dir, const cf_model_params *p, cf_model **out, cinfer_error *err) {
    *out = NULL;
    cf_hparams hp;
    CF_TRY(cf_hparams_load(dir, &hp, err));
    cf_model *m = NULL;
    cinfer_status st = model_new(p, &m, err);
    if (st != CINFER_OK) { cf_hparams_free(&hp); return st; }
    m->hp = hp;
    char prefix[128];
    st = cf_st_open_dir(dir, &m->st, err);
    if (st == CINFER_OK) st = find_prefix(m->st, prefix, sizeof prefix, dir, err);
    if (st == CINFER_OK) {
        binder b = {.m = m, .dir = dir, .prefix = prefix};
        st = finish_load(m, &b, err);
    }
    if (st != CINFER_OK) { cf_model_free(m); return st; }
    *out = m;
    return CINFER_OK;
}

cinfer_status cf_model_random(const char *config_path, uint64_t seed, const cf_model_params *p, cf_model **out, cinfer_error *err) {
    *out = NULL;
    cf_hparams hp;
    CF_TRY(cf_hparams_load_file(config_path, &hp, err));
    cf_model *m = NULL;
    cinfer_status st = model_new(p, &m, err);
    if (st != CINFER_OK) { cf_hparams_free(&hp); return st; }
    m->hp = hp;
    binder b = {.m = m, .dir = config_path, .prefix = "model.", .rng = seed};
    st = finish_load(m, &b, err);
    if (st != CINFER_OK) { cf_model_free(m); return st; }
    *out = m;
    return CINFER_OK;
}

void cf_model_free(cf_model *m) {
    if (!m) return;
    for (int r = 0; r < m->hp.n_rope; r++)
        if (m->rope_freq[r].data) m->be->ops->free_tensor(m->be, &m->rope_freq[r]);
    cf_backend_destroy(m->be);
    for (int i = 0; i < m->n_host_bufs; i++) free(m->host_bufs[i]);
    free(m->host_bufs);
    cf_st_close(m->st);
    free(m->lw);
    cf_hparams_free(&m->hp);
    free(m);
}

/* ---- sequences ---- */

static cinfer_status seq_scratch(cf_seq *s, cinfer_error *err) {
    cf_model *m = s->m;
    cf_backend *be = m->be;
    const cf_hparams *hp = &m->hp;
    int64_t qd = 0, kd = 0, vd = 0, od = 0, fd = 0;
    for (int l = 0; l < hp->n_layers; l++) {
        const cf_layer_hp *L = &hp->layers[l];
        if ((int64_t)L->n_heads * L->head_dim > qd) qd = (int64_t)L->n_heads * L->head_dim;
        if ((int64_t)L->n_kv_heads * L->head_dim > kd) kd = (int64_t)L->n_kv_heads * L->head_dim;
        if ((int64_t)L->n_kv_heads * L->v_head_dim > vd) vd = (int64_t)L->n_kv_heads * L->v_head_dim;
        if ((int64_t)L->n_heads * L->v_head_dim > od) od = (int64_t)L->n_heads * L->v_head_dim;
        if (L->ffn_dim > fd) fd = L->ffn_dim;
    }
    const int64_t C = CF_CHUNK;
    const cf_dtype a = be->act_dtype;
    CF_TRY(be->ops->alloc(be, CF_F32, C, hp->dim, &s->x, err));
    CF_TRY(be->ops->alloc(be, a, C, hp->dim, &s->h, err));
    CF_TRY(be->ops->alloc(be, a, C, qd, &s->q, err));
    CF_TRY(be->ops->alloc(be, a, C, kd, &s->k, err));
    CF_TRY(be->ops->alloc(be, a, C, vd, &s->v, err));
    CF_TRY(be->ops->alloc(be, a, C, od, &s->att, err));
    CF_TRY(be->ops->alloc(be, CF_F32, C, hp->dim, &s->o, err));
    CF_TRY(be->ops->alloc(be, a, C, fd, &s->gate, err));
    CF_TRY(be->ops->alloc(be, a, C, fd, &s->up, err));
    CF_TRY(be->ops->alloc(be, CF_I32, C, 1, &s->ids, err));
    CF_TRY(be->ops->alloc(be, CF_I32, C, 1, &s->pos, err));
    CF_TRY(be->ops->alloc(be, CF_F32, C, hp->vocab, &s->logits, err));
    return CINFER_OK;
}

cinfer_status cf_seq_create(cf_model *m, int max_ctx, cf_seq **out, cinfer_error *err) {
    *out = NULL;
    const cf_hparams *hp = &m->hp;
    if (max_ctx <= 0 || max_ctx > hp->max_ctx) max_ctx = hp->max_ctx;
    cf_seq *s = calloc(1, sizeof *s);
    cf_kv_spec *specs = calloc((size_t)hp->n_layers, sizeof *specs);
    if (!s || !specs) { free(s); free(specs); return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory"); }
    s->m = m;
    s->max_ctx = max_ctx;
    for (int l = 0; l < hp->n_layers; l++) {
        const cf_layer_hp *L = &hp->layers[l];
        specs[l] = (cf_kv_spec){.n_kv_heads = L->n_kv_heads, .head_dim = L->head_dim, .v_head_dim = L->v_head_dim,
                                .window = L->window, .shared = L->kv_source != l};
    }
    cinfer_status st = cf_kv_create(m->be, specs, hp->n_layers, max_ctx, CF_CHUNK, &s->kv, err);
    free(specs);
    if (st == CINFER_OK) st = seq_scratch(s, err);
    if (st != CINFER_OK) { cf_seq_free(s); return st; }
    *out = s;
    return CINFER_OK;
}

void cf_seq_free(cf_seq *s) {
    if (!s) return;
    cf_backend *be = s->m->be;
    cf_tensor *bufs[] = {&s->x, &s->h, &s->q, &s->k, &s->v, &s->att, &s->o, &s->gate, &s->up, &s->ids, &s->pos, &s->logits};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]->data) be->ops->free_tensor(be, bufs[i]);
    cf_kv_free(s->kv);
    free(s);
}

int cf_seq_len(const cf_seq *s) { return s->kv->n; }
int cf_seq_max_ctx(const cf_seq *s) { return s->max_ctx; }
cinfer_status cf_seq_truncate(cf_seq *s, int n, cinfer_error *err) { return cf_kv_truncate(s->kv, n, err); }

cinfer_status cf_model_eval(cf_model *m, cf_seq *s, const int32_t *ids, int n, float *logits, int all_rows, cinfer_error *err) {
    const cf_hparams *hp = &m->hp;
    if (n <= 0) return cf_fail(err, CINFER_E_EMPTY_PROMPT, "no tokens to evaluate");
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= hp->vocab)
            return cf_fail(err, CINFER_E_TOKEN_OUT_OF_RANGE, "token id %d at index %d is outside the vocabulary [0, %d)", ids[i], i, hp->vocab);
    if (s->kv->n + n > s->max_ctx)
        return cf_fail(err, CINFER_E_CONTEXT_OVERFLOW, "%d tokens after %d would exceed the context of %d", n, s->kv->n, s->max_ctx);
    cf_backend *be = m->be;
    int32_t pos[CF_CHUNK];
    for (int done = 0; done < n;) {
        int c = n - done < CF_CHUNK ? n - done : CF_CHUNK;
        int pos0 = s->kv->n;
        for (int i = 0; i < c; i++) pos[i] = pos0 + i;
        be->ops->write(be, cf_rows(s->ids, 0, c), ids + done);
        be->ops->write(be, cf_rows(s->pos, 0, c), pos);
        int last_chunk = done + c == n;
        int out_rows = all_rows ? c : last_chunk ? 1 : 0;
        cf_forward_chunk(m, s, c, out_rows);
        cf_kv_advance(s->kv, c);
        if (logits && out_rows) {
            cinfer_status st = be->ops->read(be, all_rows ? logits + (size_t)done * hp->vocab : logits,
                                             cf_rows(s->logits, 0, out_rows), err);
            if (st != CINFER_OK) return st;
        }
        done += c;
    }
    return be->ops->sync(be, err);
}
