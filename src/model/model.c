/* model.c: loading a model folder (or random weights), binding every weight to the backend with its
 * shape checked, and the per-sequence state. */
#include "model/model.h"
#include "model/seq.h"
#include "format/safetensors.h"
#include "format/mlx_quant.h"
#include "base/status.h"
#include "sample/sampler.h"

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
    int random_qbits;     /* random mode: quantize matrices to this many bits, group 64 (0: none) */
    cf_mlxq_config qc;    /* config.json's quantization block (owned) */
    int n_dtypes_seen;
    int dtypes_seen[CF_DTYPE_COUNT];
    int qseen[9][129];    /* quantized weights seen by [bits][group] */
} binder;

#define CF_RANDOM_QGROUP 64

static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* n random weights: uniform in +-0.02 sqrt(3), rounded to bf16 (norm vectors: ones), from a seed per tensor and a
 * stream per 4096 values, so the values do not depend on the thread count; into bf when set, else as floats into f */
static void random_values(uint64_t seed, size_t n, int is_norm, uint16_t *bf, float *f) {
    const float sc = is_norm ? 0.0f : 0.02f * sqrtf(3.0f);
    #pragma omp parallel for schedule(static)
    for (size_t blk = 0; blk < (n + 4095) / 4096; blk++) {
        uint64_t s = seed ^ (blk * 0x9e3779b97f4a7c15ull);
        size_t end = (blk + 1) * 4096 < n ? (blk + 1) * 4096 : n;
        for (size_t i = blk * 4096; i < end; i++) {
            float u = (float)(splitmix(&s) >> 40) / (float)(1 << 24) * 2.0f - 1.0f;
            const uint16_t h = cf_f32_to_bf16(is_norm ? 1.0f : u * sc);
            if (bf) bf[i] = h;
            else f[i] = cf_bf16_to_f32(h);
        }
    }
}

/* A random weight; with random_qbits, a matrix is quantized as cinfer quantize would (group 64, bf16 scales and biases)
 * from the same bf16-rounded values, made straight into f32 */
static cinfer_status bind_random(binder *b, const char *name, int64_t rows, int64_t cols, int is_norm, cf_tensor *out, cinfer_error *err) {
    cf_model *m = b->m;
    size_t n = (size_t)(rows * cols);
    void **nb = realloc(m->host_bufs, (size_t)(m->n_host_bufs + 1) * sizeof *nb);
    if (!nb) return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory for random weight %s", name);
    m->host_bufs = nb;
    const uint64_t seed = splitmix(&b->rng);
    if (!b->random_qbits || is_norm || rows < 2 || cols % CF_RANDOM_QGROUP || !m->be->ops->upload_qweight) {
        uint16_t *buf = aligned_alloc(64, (n * sizeof *buf + 63) & ~(size_t)63);   /* used in place on the CPU: cache-line aligned */
        if (!buf) return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory for random weight %s", name);
        m->host_bufs[m->n_host_bufs++] = buf;
        random_values(seed, n, is_norm, buf, NULL);
        return m->be->ops->upload_weight(m->be, buf, CF_BF16, rows, cols, out, err);
    }
    const int bits = b->random_qbits, G = CF_RANDOM_QGROUP;
    const int64_t wpr = cf_qweight_words_per_row(bits, cols), ng = rows * (cols / G);
    float *f = malloc(n * sizeof *f);
    void *qbuf = malloc((size_t)(rows * wpr) * 4 + 2 * (size_t)ng * 2);
    if (!f || !qbuf) { free(f); free(qbuf); return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory quantizing random weight %s", name); }
    random_values(seed, n, 0, NULL, f);
    uint32_t *q = qbuf;
    uint16_t *scales = (uint16_t *)(q + rows * wpr), *biases = scales + ng;
    #pragma omp parallel for schedule(static)
    for (int64_t r0 = 0; r0 < rows; r0 += 64) {
        const int64_t nr = rows - r0 < 64 ? rows - r0 : 64;
        cf_qweight_quantize(f + r0 * cols, nr, cols, bits, G, CF_BF16, q + r0 * wpr, scales + r0 * (cols / G), biases + r0 * (cols / G));
    }
    free(f);
    m->host_bufs[m->n_host_bufs++] = qbuf;
    const cf_qweight qw = {.q = q, .scales = scales, .biases = biases, .sb_dtype = CF_BF16, .bits = bits, .group = G, .rows = rows, .cols = cols};
    b->qseen[bits][G] = 1;
    return m->be->ops->upload_qweight(m->be, &qw, out, err);
}

static void shape_text(const cf_st_tensor *t, char *buf, size_t cap) {
    buf[0] = 0;
    for (int i = 0; i < t->n_dims; i++)
        snprintf(buf + strlen(buf), cap - strlen(buf), "%s%lld", i ? ", " : "", (long long)t->shape[i]);
}

/* Uploads t (already shape-checked) as a [r, c] weight. */
static cinfer_status upload(binder *b, const cf_st_tensor *t, const char *full, int64_t r, int64_t c, cf_tensor *out, cinfer_error *err) {
    if (t->dtype != CF_F32 && t->dtype != CF_F16 && t->dtype != CF_BF16)
        return cf_fail(err, CINFER_E_UNSUPPORTED, "%s: weight '%s' has dtype %s (supported: F32, F16, BF16)", t->file, full, t->dtype_name);
    if (!b->dtypes_seen[t->dtype]) { b->dtypes_seen[t->dtype] = 1; b->n_dtypes_seen++; }
    cinfer_status st = b->m->be->ops->upload_weight(b->m->be, t->data, (cf_dtype)t->dtype, r, c, out, err);
    if (st != CINFER_OK) return cf_wrap(err, st, "uploading '%s'", full);
    return CINFER_OK;
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
    if (!is_vec && strlen(full) > 7 && !strcmp(full + strlen(full) - 7, ".weight")) {
        char module[256];
        snprintf(module, sizeof module, "%.*s", (int)strlen(full) - 7, full);
        cf_qweight qw;
        int quantized = 0;
        CF_TRY(cf_mlxq_find(m->st, &b->qc, module, rows, cols, &qw, &quantized, err));
        if (quantized) {
            if (!m->be->ops->upload_qweight)
                return cf_fail(err, CINFER_E_UNSUPPORTED, "the %s backend cannot load quantized weights ('%s')", m->be->ops->name, full);
            b->qseen[qw.bits][qw.group] = 1;
            cinfer_status st = m->be->ops->upload_qweight(m->be, &qw, out, err);
            if (st != CINFER_OK) return cf_wrap(err, st, "uploading '%s'", full);
            return CINFER_OK;
        }
    }
    const cf_st_tensor *t = cf_st_find(m->st, full);
    if (!t) {
        if (optional) return CINFER_OK;
        return cf_fail(err, CINFER_E_FORMAT, "%s: weight '%s' is missing from the model's safetensors files", b->dir, full);
    }
    int ok = is_vec ? t->n_dims == 1 && t->shape[0] == rows : t->n_dims == 2 && t->shape[0] == rows && t->shape[1] == cols;
    if (!ok) {
        char got[96];
        shape_text(t, got, sizeof got);
        if (is_vec)
            return cf_fail(err, CINFER_E_FORMAT, "%s: weight '%s' has shape [%s], expected [%lld]", t->file, full, got, (long long)rows);
        return cf_fail(err, CINFER_E_FORMAT, "%s: weight '%s' has shape [%s], expected [%lld, %lld]", t->file, full, got,
                       (long long)rows, (long long)cols);
    }
    return upload(b, t, full, r, c, out, err);
}

/* Binds a stack of n matrices [n, rows, cols] (MoE experts) as one [n * rows, cols] weight. */
static cinfer_status bind_stack(binder *b, const char *name, int64_t n, int64_t rows, int64_t cols, cf_tensor *out, cinfer_error *err) {
    char full[256];
    snprintf(full, sizeof full, "%s%s", b->prefix, name);
    memset(out, 0, sizeof *out);
    if (!b->m->st) return bind_random(b, full, n * rows, cols, 0, out, err);
    char scales[272];
    snprintf(scales, sizeof scales, "%s.scales", full);
    if (cf_st_find(b->m->st, scales))
        return cf_fail(err, CINFER_E_UNSUPPORTED, "%s: the MoE expert stack '%s' is quantized; cinfer loads quantized dense weights only",
                       b->dir, full);
    const cf_st_tensor *t = cf_st_find(b->m->st, full);
    if (!t) return cf_fail(err, CINFER_E_FORMAT, "%s: weight '%s' is missing from the model's safetensors files", b->dir, full);
    if (t->n_dims != 3 || t->shape[0] != n || t->shape[1] != rows || t->shape[2] != cols) {
        char got[96];
        shape_text(t, got, sizeof got);
        return cf_fail(err, CINFER_E_FORMAT, "%s: weight '%s' has shape [%s], expected [%lld, %lld, %lld]", t->file, full, got,
                       (long long)n, (long long)rows, (long long)cols);
    }
    return upload(b, t, full, n * rows, cols, out, err);
}

/* Reads the vector prefix+name of n elements into host floats (random weights, or optional and missing: dflt). */
static cinfer_status bind_host(binder *b, const char *name, int64_t n, int optional, float dflt, float *out, cinfer_error *err) {
    char full[256];
    snprintf(full, sizeof full, "%s%s", b->prefix, name);
    const cf_st_tensor *t = b->m->st ? cf_st_find(b->m->st, full) : NULL;
    if (!t) {
        if (b->m->st && !optional)
            return cf_fail(err, CINFER_E_FORMAT, "%s: weight '%s' is missing from the model's safetensors files", b->dir, full);
        for (int64_t i = 0; i < n; i++) out[i] = dflt;
        return CINFER_OK;
    }
    if (t->n_dims != 1 || t->shape[0] != n) {
        char got[96];
        shape_text(t, got, sizeof got);
        return cf_fail(err, CINFER_E_FORMAT, "%s: weight '%s' has shape [%s], expected [%lld]", t->file, full, got, (long long)n);
    }
    if (t->dtype != CF_F32 && t->dtype != CF_F16 && t->dtype != CF_BF16)
        return cf_fail(err, CINFER_E_UNSUPPORTED, "%s: weight '%s' has dtype %s (supported: F32, F16, BF16)", t->file, full, t->dtype_name);
    cf_to_f32(out, t->data, (cf_dtype)t->dtype, (size_t)n);
    return CINFER_OK;
}

static int64_t tbytes(cf_tensor t) {
    if (t.data && t.dtype == CF_Q) return cf_qweight_bytes(t.data);
    return t.data ? t.rows * t.cols * (int64_t)cf_dtype_size(t.dtype) : 0;
}

static cinfer_status bind_layer(cf_model *m, binder *b, int l, cinfer_error *err) {
    const cf_hparams *hp = &m->hp;
    const cf_layer_hp *L = &hp->layers[l];
    cf_layer_w *w = &m->lw[l];
    const int64_t D = hp->dim, q = (int64_t)L->n_heads * L->head_dim, kd = (int64_t)L->n_kv_heads * L->head_dim,
                  vd = (int64_t)L->n_kv_heads * L->v_head_dim, od = (int64_t)L->n_heads * L->v_head_dim;
    const int own_kv = L->kv_source == l, own_v = own_kv && !L->k_eq_v;
    char n[160];
#define B(field, suffix, rows, cols) \
    do { snprintf(n, sizeof n, "layers.%d.%s", l, suffix); CF_TRY(bind(b, n, rows, cols, 0, &w->field, err)); } while (0)
    B(attn_norm, "input_layernorm.weight", D, 0);
    B(wq, "self_attn.q_proj.weight", q, D);
    if (own_kv) B(wk, "self_attn.k_proj.weight", kd, D);
    if (own_v) B(wv, "self_attn.v_proj.weight", vd, D);
    B(wo, "self_attn.o_proj.weight", D, od);
    if (hp->qkv_bias) {
        B(bq, "self_attn.q_proj.bias", q, 0);
        if (own_kv) B(bk, "self_attn.k_proj.bias", kd, 0);
        if (own_v) B(bv, "self_attn.v_proj.bias", vd, 0);
    }
    if (hp->qk_norm) {
        B(q_norm, "self_attn.q_norm.weight", L->head_dim, 0);
        if (own_kv) B(k_norm, "self_attn.k_norm.weight", L->head_dim, 0);
    }
    if (hp->sandwich_norm) {
        B(post_attn_norm, "post_attention_layernorm.weight", D, 0);
        B(ffn_norm, "pre_feedforward_layernorm.weight", D, 0);
        B(post_ffn_norm, "post_feedforward_layernorm.weight", D, 0);
    } else {
        B(ffn_norm, "post_attention_layernorm.weight", D, 0);
    }
    B(w_gate, "mlp.gate_proj.weight", L->ffn_dim, D);
    B(w_up, "mlp.up_proj.weight", L->ffn_dim, D);
    B(w_down, "mlp.down_proj.weight", D, L->ffn_dim);
    if (hp->ple_dim) {
        B(ple_gate, "per_layer_input_gate.weight", hp->ple_dim, D);
        B(ple_proj, "per_layer_projection.weight", D, hp->ple_dim);
        B(ple_norm, "post_per_layer_input_norm.weight", D, 0);
    }
    if (hp->n_experts) {
        const int64_t E = hp->n_experts, I = hp->expert_ffn_dim;
        B(router, "router.proj.weight", E, D);
        B(router_scale, "router.scale", D, 0);
        B(ffn_post_norm_1, "post_feedforward_layernorm_1.weight", D, 0);
        B(ffn_pre_norm_2, "pre_feedforward_layernorm_2.weight", D, 0);
        B(ffn_post_norm_2, "post_feedforward_layernorm_2.weight", D, 0);
        snprintf(n, sizeof n, "layers.%d.experts.gate_up_proj", l);
        CF_TRY(bind_stack(b, n, E, 2 * I, D, &w->exp_gate_up, err));
        snprintf(n, sizeof n, "layers.%d.experts.down_proj", l);
        CF_TRY(bind_stack(b, n, E, D, I, &w->exp_down, err));
        snprintf(n, sizeof n, "layers.%d.router.per_expert_scale", l);
        CF_TRY(bind_host(b, n, E, 0, 1.0f, m->expert_scale + (size_t)l * E, err));
    }
#undef B
    m->layer_scalar[l] = 1.0f;
    if (hp->layer_scalar) {
        snprintf(n, sizeof n, "layers.%d.layer_scalar", l);
        CF_TRY(bind_host(b, n, 1, 1, 1.0f, &m->layer_scalar[l], err));
    }
    return CINFER_OK;
}

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
    if (hp->ple_dim) {
        const int64_t LP = (int64_t)hp->n_layers * hp->ple_dim;
        CF_TRY(bind(b, "embed_tokens_per_layer.weight", hp->ple_vocab, LP, 0, &m->ple_embd, err));
        CF_TRY(bind(b, "per_layer_model_projection.weight", LP, D, 0, &m->ple_model_proj, err));
        CF_TRY(bind(b, "per_layer_projection_norm.weight", hp->ple_dim, 0, 0, &m->ple_proj_norm, err));
    }
    m->lw = calloc((size_t)hp->n_layers, sizeof *m->lw);
    m->layer_scalar = calloc((size_t)hp->n_layers, sizeof *m->layer_scalar);
    m->expert_scale = calloc((size_t)hp->n_layers * (size_t)(hp->n_experts ? hp->n_experts : 1), sizeof *m->expert_scale);
    if (!m->lw || !m->layer_scalar || !m->expert_scale) return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory");
    for (int l = 0; l < hp->n_layers; l++) CF_TRY(bind_layer(m, b, l, err));

    /* bytes: everything stored, and what one decode step streams (embedding rows and unrouted experts excluded) */
    m->weight_bytes = tbytes(m->tok_embd) + tbytes(m->out_norm) + (hp->tied ? 0 : tbytes(m->output)) + tbytes(m->ple_embd) +
                      tbytes(m->ple_model_proj) + tbytes(m->ple_proj_norm);
    m->decode_bytes = tbytes(m->out_norm) + tbytes(m->output) + tbytes(m->ple_model_proj) + tbytes(m->ple_proj_norm);
    for (int l = 0; l < hp->n_layers; l++) {
        const cf_layer_w *w = &m->lw[l];
        const cf_tensor *t = (const cf_tensor *)w;
        int64_t all = 0;
        for (size_t i = 0; i < sizeof(cf_layer_w) / sizeof(cf_tensor); i++) all += tbytes(t[i]);
        int64_t experts = tbytes(w->exp_gate_up) + tbytes(w->exp_down);
        m->weight_bytes += all;
        m->decode_bytes += all - experts + (hp->n_experts ? experts / hp->n_experts * hp->n_experts_used : 0);
    }
    return CINFER_OK;
}

static float round_to_dtype(float v, cf_dtype dt) {
    if (dt == CF_BF16) return cf_bf16_to_f32(cf_f32_to_bf16(v));
    if (dt == CF_F16) return cf_f16_to_f32(cf_f32_to_f16(v));
    return v;
}

/* Every operation the graph will run for this model exists on the backend. */
static cinfer_status check_ops(const cf_model *m, cinfer_error *err) {
    const cf_hparams *hp = &m->hp;
    const cf_backend_ops *op = m->be->ops;
    int k_eq_v = 0;
    for (int l = 0; l < hp->n_layers; l++) k_eq_v |= hp->layers[l].k_eq_v;
    const struct { const char *name; int needed, present; } need[] = {
        {"embed", 1, op->embed != NULL},
        {"rmsnorm", 1, op->rmsnorm != NULL},
        {"matmul", 1, op->matmul != NULL},
        {"add", 1, op->add != NULL},
        {"glu", 1, op->glu != NULL},
        {"rope", 1, op->rope != NULL},
        {"kv_store", 1, op->kv_store != NULL},
        {"attention", 1, op->attention != NULL},
        {"softcap", hp->final_softcap > 0, op->softcap != NULL},
        {"scale", hp->ple_dim || hp->n_experts || hp->layer_scalar, op->scale != NULL},
        {"copy", k_eq_v || hp->n_experts, op->copy != NULL},
        {"fill", hp->v_norm || hp->n_experts, op->fill != NULL},
    };
    for (size_t i = 0; i < sizeof need / sizeof need[0]; i++)
        if (need[i].needed && !need[i].present)
            return cf_fail(err, CINFER_E_UNSUPPORTED, "the %s backend has no '%s' operation, which %s needs", op->name, need[i].name,
                           hp->arch_name);
    return CINFER_OK;
}

/* The KV cache keeps the model's precision, as transformers keeps its cache in the model's dtype: the type of the
 * query projection (of a quantized one, its scales'), where the backend stores any type; else the activations'.
 * On the CPU a bf16 model's cache takes half the memory and attention reads half the bytes of f32. */
static cf_dtype kv_dtype_of(const cf_model *m) {
    const cf_tensor w = m->lw[0].wq;
    if (!m->be->kv_any_dtype || !w.data) return m->be->act_dtype;
    const cf_dtype t = w.dtype == CF_Q ? ((const cf_qweight *)w.data)->sb_dtype : w.dtype;
    return t == CF_BF16 || t == CF_F16 ? t : CF_F32;
}

cf_kv_spec *cf_model_kv_specs(const cf_model *m) {
    const cf_hparams *hp = &m->hp;
    cf_kv_spec *specs = calloc((size_t)hp->n_layers, sizeof *specs);
    if (!specs) return NULL;
    for (int l = 0; l < hp->n_layers; l++) {
        const cf_layer_hp *L = &hp->layers[l];
        specs[l] = (cf_kv_spec){.n_kv_heads = L->n_kv_heads, .head_dim = L->head_dim, .v_head_dim = L->v_head_dim,
                                .window = L->window, .shared = L->kv_source != l, .dtype = m->kv_dtype};
    }
    return specs;
}

static cinfer_status finish_load(cf_model *m, binder *b, cinfer_error *err) {
    cf_hparams *hp = &m->hp;
    CF_TRY(check_ops(m, err));
    for (int r = 0; r < hp->n_rope; r++) {
        CF_TRY(m->be->ops->alloc(m->be, CF_F32, 1, hp->rope[r].rot_dim / 2, &m->rope_freq[r], err));
        m->be->ops->write(m->be, m->rope_freq[r], hp->rope[r].inv_freq);
    }
    CF_TRY(bind_all(m, b, err));
    /* a quantized table's rows come out in its scales' dtype, as MLX dequantizes them */
    const cf_dtype ed = m->tok_embd.dtype == CF_Q ? ((const cf_qweight *)m->tok_embd.data)->sb_dtype : m->tok_embd.dtype;
    const cf_dtype pd = m->ple_embd.data && m->ple_embd.dtype == CF_Q ? ((const cf_qweight *)m->ple_embd.data)->sb_dtype : m->ple_embd.dtype;
    m->embed_scale = round_to_dtype(hp->embed_scale, ed);
    m->ple_scale = round_to_dtype((float)sqrt((double)hp->ple_dim), pd);
    if (hp->v_norm) {
        int hd = 0;
        for (int l = 0; l < hp->n_layers; l++) hd = hp->layers[l].v_head_dim > hd ? hp->layers[l].v_head_dim : hd;
        CF_TRY(m->be->ops->alloc(m->be, CF_F32, 1, hd, &m->ones, err));
        m->be->ops->fill(m->be, m->ones, 1.0f);
    }
    m->dtype_summary[0] = 0;
    for (int t = 0; t < CF_DTYPE_COUNT; t++)
        if (b->dtypes_seen[t])
            snprintf(m->dtype_summary + strlen(m->dtype_summary), sizeof m->dtype_summary - strlen(m->dtype_summary), "%s%s",
                     m->dtype_summary[0] ? "+" : "", cf_dtype_name((cf_dtype)t));
    if (!m->st) snprintf(m->dtype_summary, sizeof m->dtype_summary, "BF16");
    for (int bits = 2; bits <= 8; bits++)
        for (int g = 32; g <= 128; g *= 2)
            if (b->qseen[bits][g])
                snprintf(m->dtype_summary + strlen(m->dtype_summary), sizeof m->dtype_summary - strlen(m->dtype_summary), "%sQ%d/g%d",
                         m->dtype_summary[0] ? "+" : "", bits, g);
    if (!m->st) snprintf(m->dtype_summary + strlen(m->dtype_summary), sizeof m->dtype_summary - strlen(m->dtype_summary), " (random)");
    m->kv_dtype = kv_dtype_of(m);
    const cf_backend_ops *op = m->be->ops;
    m->decode_graphs = m->decode_graphs && op->graph_begin && op->graph_end && op->graph_launch && op->graph_free && op->kv_store_pos &&
                       op->attention_pos && !hp->n_experts;
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
    const cf_backend_params *bp = p ? &p->backend : &dp.backend;
    cinfer_status st = cf_backend_create(bp, &m->be, err);
    if (st != CINFER_OK) { free(m); return st; }
    m->device_sampling = bp->tuning.device_sampling;
    m->decode_graphs = bp->tuning.decode_graphs;   /* wanted; finish_load keeps it where the backend and model allow */
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
        char cfg[4096];
        snprintf(cfg, sizeof cfg, "%s/config.json", dir);
        st = cf_mlxq_config_load(cfg, &b.qc, err);
        if (st == CINFER_OK) st = finish_load(m, &b, err);
        cf_mlxq_config_free(&b.qc);
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
    const int qbits = p ? p->random_qbits : 0;
    if (qbits != 0 && qbits != 4 && qbits != 8) {
        cf_model_free(m);
        return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "random weights quantize to 4 or 8 bits, not %d", qbits);
    }
    binder b = {.m = m, .dir = config_path, .prefix = "model.", .rng = seed, .random_qbits = qbits};
    st = finish_load(m, &b, err);
    if (st != CINFER_OK) { cf_model_free(m); return st; }
    *out = m;
    return CINFER_OK;
}

void cf_model_free(cf_model *m) {
    if (!m) return;
    for (int r = 0; r < m->hp.n_rope; r++)
        if (m->rope_freq[r].data) m->be->ops->free_tensor(m->be, &m->rope_freq[r]);
    if (m->ones.data) m->be->ops->free_tensor(m->be, &m->ones);
    cf_backend_destroy(m->be);
    for (int i = 0; i < m->n_host_bufs; i++) free(m->host_bufs[i]);
    free(m->host_bufs);
    cf_st_close(m->st);
    free(m->lw);
    free(m->layer_scalar);
    free(m->expert_scale);
    cf_hparams_free(&m->hp);
    free(m);
}

/* ---- sequences ---- */

cinfer_status cf_scratch_alloc(cf_model *m, int rows, int logit_rows, cf_scratch *s, cinfer_error *err) {
    cf_backend *be = m->be;
    const cf_hparams *hp = &m->hp;
    memset(s, 0, sizeof *s);
    s->rows = rows;
    s->logit_rows = logit_rows;
    int64_t qd = 0, kd = 0, vd = 0, od = 0, fd = 0;
    for (int l = 0; l < hp->n_layers; l++) {
        const cf_layer_hp *L = &hp->layers[l];
        if ((int64_t)L->n_heads * L->head_dim > qd) qd = (int64_t)L->n_heads * L->head_dim;
        if ((int64_t)L->n_kv_heads * L->head_dim > kd) kd = (int64_t)L->n_kv_heads * L->head_dim;
        if ((int64_t)L->n_kv_heads * L->v_head_dim > vd) vd = (int64_t)L->n_kv_heads * L->v_head_dim;
        if ((int64_t)L->n_heads * L->v_head_dim > od) od = (int64_t)L->n_heads * L->v_head_dim;
        if (L->ffn_dim > fd) fd = L->ffn_dim;
    }
    const int64_t C = rows;
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
    CF_TRY(be->ops->alloc(be, CF_F32, logit_rows, hp->vocab, &s->logits, err));
    if (hp->ple_dim) {
        const int64_t LP = (int64_t)hp->n_layers * hp->ple_dim;
        CF_TRY(be->ops->alloc(be, CF_F32, C, LP, &s->ple, err));
        CF_TRY(be->ops->alloc(be, CF_F32, C, LP, &s->ple_proj, err));
        CF_TRY(be->ops->alloc(be, a, C, hp->ple_dim, &s->ple_gate, err));
    }
    if (hp->n_experts) {
        const int64_t I = hp->expert_ffn_dim, E = hp->n_experts;
        CF_TRY(be->ops->alloc(be, a, C, hp->dim, &s->e_x, err));
        CF_TRY(be->ops->alloc(be, a, C, 2 * I, &s->e_gu, err));
        CF_TRY(be->ops->alloc(be, a, C, I, &s->e_act, err));
        CF_TRY(be->ops->alloc(be, CF_F32, C, hp->dim, &s->e_out, err));
        CF_TRY(be->ops->alloc(be, CF_F32, C, hp->dim, &s->e_acc, err));
        CF_TRY(be->ops->alloc(be, CF_F32, C, E, &s->e_logits, err));
        s->route = malloc((size_t)(C * E) * sizeof *s->route);
        s->route_n = malloc((size_t)E * sizeof *s->route_n);
        s->route_tok = malloc((size_t)(C * E) * sizeof *s->route_tok);
        s->route_w = malloc((size_t)(C * E) * sizeof *s->route_w);
        if (!s->route || !s->route_n || !s->route_tok || !s->route_w) return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory");
    }
    return CINFER_OK;
}

void cf_scratch_free(cf_model *m, cf_scratch *s) {
    cf_backend *be = m->be;
    cf_tensor *bufs[] = {&s->x, &s->h, &s->q, &s->k, &s->v, &s->att, &s->o, &s->gate, &s->up, &s->ids, &s->pos, &s->logits,
                         &s->ple, &s->ple_proj, &s->ple_gate, &s->e_x, &s->e_gu, &s->e_act, &s->e_out, &s->e_acc, &s->e_logits};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]->data) be->ops->free_tensor(be, bufs[i]);
    free(s->route);
    free(s->route_n);
    free(s->route_tok);
    free(s->route_w);
    memset(s, 0, sizeof *s);
}

static cinfer_status seq_scratch(cf_seq *s, cinfer_error *err) {
    cf_backend *be = s->m->be;
    CF_TRY(cf_scratch_alloc(s->m, s->chunk, s->chunk < CF_LOGIT_ROWS ? s->chunk : CF_LOGIT_ROWS, &s->sc, err));
    CF_TRY(be->ops->alloc(be, CF_F32, 1, 1, &s->u, err));
    CF_TRY(be->ops->alloc(be, CF_I32, 1, 1, &s->next, err));
    s->pos_host = malloc((size_t)s->chunk * sizeof *s->pos_host);
    if (!s->pos_host) return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory");
    return CINFER_OK;
}

/* The forward pass of n tokens (ids, positions in s->sc) and the logits of the last out_rows. */
static cinfer_status forward_chunk(cf_model *m, cf_seq *s, int n, int out_rows, int pos_ops, cinfer_error *err) {
    cf_pass p = {.s = &s->sc, .n = n, .kv = s->kv, .pos_ops = pos_ops};
    CF_TRY(cf_forward_layers(m, &p, err));
    if (out_rows > 0) cf_forward_logits(m, &s->sc, cf_rows(s->sc.x, n - out_rows, out_rows));
    return CINFER_OK;
}

int cf_model_prefill_chunk(const cf_model *m) {
    int chunk = m->be->prefill_chunk > 0 ? m->be->prefill_chunk : CF_CHUNK;
    return chunk < CF_MAX_CHUNK ? chunk : CF_MAX_CHUNK;
}

cinfer_status cf_seq_create(cf_model *m, int max_ctx, cf_seq **out, cinfer_error *err) {
    return cf_seq_create_chunked(m, max_ctx, cf_model_prefill_chunk(m), out, err);
}

cinfer_status cf_seq_create_chunked(cf_model *m, int max_ctx, int chunk, cf_seq **out, cinfer_error *err) {
    *out = NULL;
    const cf_hparams *hp = &m->hp;
    if (chunk < 1 || chunk > CF_MAX_CHUNK)
        return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "a forward pass takes 1 to %d positions, not %d", CF_MAX_CHUNK, chunk);
    if (max_ctx <= 0 || max_ctx > hp->max_ctx) max_ctx = hp->max_ctx;
    /* no pass is longer than the context; window layers hold min(window + chunk, max_ctx) slots either way */
    if (chunk > max_ctx) chunk = max_ctx;
    cf_seq *s = calloc(1, sizeof *s);
    cf_kv_spec *specs = cf_model_kv_specs(m);
    if (!s || !specs) { free(s); free(specs); return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory"); }
    s->m = m;
    s->max_ctx = max_ctx;
    s->chunk = chunk;
    s->last_row = -1;
    cinfer_status st = cf_kv_create(m->be, specs, hp->n_layers, max_ctx, chunk, &s->kv, err);
    free(specs);
    if (st == CINFER_OK) st = seq_scratch(s, err);
    if (st != CINFER_OK) { cf_seq_free(s); return st; }
    *out = s;
    return CINFER_OK;
}

void cf_seq_free(cf_seq *s) {
    if (!s) return;
    cf_backend *be = s->m->be;
    if (s->graph) be->ops->graph_free(be, s->graph);
    cf_scratch_free(s->m, &s->sc);
    if (s->u.data) be->ops->free_tensor(be, &s->u);
    if (s->next.data) be->ops->free_tensor(be, &s->next);
    free(s->pos_host);
    cf_kv_free(s->kv);
    free(s);
}

int cf_seq_len(const cf_seq *s) { return s->kv->n; }
int cf_seq_max_ctx(const cf_seq *s) { return s->max_ctx; }
int cf_seq_chunk(const cf_seq *s) { return s->chunk; }

cinfer_status cf_seq_truncate(cf_seq *s, int n, cinfer_error *err) {
    int was = s->kv->n;
    CF_TRY(cf_kv_truncate(s->kv, n, err));
    if (n != was) s->last_row = -1;
    return CINFER_OK;
}

cinfer_status cf_model_eval(cf_model *m, cf_seq *s, const int32_t *ids, int n, float *logits, int all_rows, cinfer_error *err) {
    const cf_hparams *hp = &m->hp;
    if (n <= 0) return cf_fail(err, CINFER_E_EMPTY_PROMPT, "no tokens to evaluate");
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= hp->vocab)
            return cf_fail(err, CINFER_E_TOKEN_OUT_OF_RANGE, "token id %d at index %d is outside the vocabulary [0, %d)", ids[i], i, hp->vocab);
    if (s->kv->n + n > s->max_ctx)
        return cf_fail(err, CINFER_E_CONTEXT_OVERFLOW, "%d tokens after %d would exceed the context of %d", n, s->kv->n, s->max_ctx);
    cf_backend *be = m->be;
    /* every row's logits: passes no longer than the logits scratch */
    const int pass = all_rows && s->chunk > s->sc.logit_rows ? s->sc.logit_rows : s->chunk;
    s->last_row = -1;
    for (int done = 0; done < n;) {
        int c = n - done < pass ? n - done : pass;
        int pos0 = s->kv->n;
        for (int i = 0; i < c; i++) s->pos_host[i] = pos0 + i;
        be->ops->write(be, cf_rows(s->sc.ids, 0, c), ids + done);
        be->ops->write(be, cf_rows(s->sc.pos, 0, c), s->pos_host);
        s->id_staged = 0;
        int last_chunk = done + c == n;
        int out_rows = all_rows ? c : last_chunk ? 1 : 0;
        cf_kv_written(s->kv, pos0 + c);
        cinfer_status st = forward_chunk(m, s, c, out_rows, 0, err);
        if (st != CINFER_OK) return st;
        cf_kv_advance(s->kv, c);
        if (logits && out_rows) {
            st = be->ops->read(be, all_rows ? logits + (size_t)done * hp->vocab : logits, cf_rows(s->sc.logits, 0, out_rows), err);
            if (st != CINFER_OK) return st;
        }
        done += c;
        if (last_chunk) s->last_row = out_rows - 1;
    }
    return be->ops->sync(be, err);
}

/* ---- decoding on the device ---- */

static int is_greedy(const cf_sample_args *sa) { return cf_sampling_is_greedy(sa->temperature); }

int cf_model_can_pick_on_device(const cf_model *m, const cf_sample_args *sa) {
    return is_greedy(sa) ? m->be->ops->argmax != NULL : m->be->ops->sample != NULL;
}

cinfer_status cf_model_check_pick(const cf_model *m, const cf_sample_args *sa, float u, cinfer_error *err) {
    cf_sampling_params p = cf_sampling_truncation(sa->temperature, sa->top_k, sa->top_p, sa->min_p);
    CF_TRY(cf_sampling_validate(&p, m->hp.vocab, err));
    if (!is_greedy(sa)) CF_TRY(cf_sampling_check_uniform(u, err));
    if (!cf_model_can_pick_on_device(m, sa))
        return cf_fail(err, CINFER_E_UNSUPPORTED, "the %s backend has no '%s' operation", m->be->ops->name,
                       is_greedy(sa) ? "argmax" : "sample");
    return CINFER_OK;
}

/* Enqueues the pick from logits row `row` into s->next (u already written). */
static void pick(cf_model *m, cf_seq *s, int row, const cf_sample_args *sa) {
    cf_backend *be = m->be;
    cf_tensor lg = cf_rows(s->sc.logits, row, 1);
    if (is_greedy(sa)) be->ops->argmax(be, s->next, lg);
    else be->ops->sample(be, s->next, lg, s->u, sa);
}

/* *next = the picked id read back as id (read or read_end), which must be a token of the vocabulary; -1 is
 * the argmax's report of a NaN or +inf among the logits of position pos */
static cinfer_status picked(const cf_model *m, float id, int pos, int32_t *next, cinfer_error *err) {
    if (id == -1) return cf_fail(err, CINFER_E_NOT_A_NUMBER, "the model produced non-finite logits (NaN/inf) at position %d", pos);
    if (!(id >= 0 && id < (float)m->hp.vocab))
        return cf_fail(err, CINFER_E_INTERNAL, "the %s backend picked token %g, outside the vocabulary [0, %d)", m->be->ops->name,
                       (double)id, m->hp.vocab);
    *next = (int32_t)id;
    return CINFER_OK;
}

static cinfer_status read_pick(cf_model *m, cf_seq *s, int pos, int32_t *next, cinfer_error *err) {
    float id = -1;
    CF_TRY(m->be->ops->read(m->be, &id, s->next, err));
    return picked(m, id, pos, next, err);
}

/* whether the recorded step picks as sa asks: argmax both, or the same draw */
static int same_pick(const cf_seq *s, const cf_sample_args *sa) {
    return is_greedy(sa) ? is_greedy(&s->graph_args) : cf_sample_args_equal(&s->graph_args, sa);
}

/* The ops of a decode step: the forward pass of ids row 0 at position pos row 0 (from device memory where
 * the backend has the *_pos ops), the pick into s->next, and a copy of the pick into ids row 0, so the
 * step after it finds its input there. */
static cinfer_status step_ops(cf_model *m, cf_seq *s, const cf_sample_args *sa, cinfer_error *err) {
    const cf_backend_ops *op = m->be->ops;
    CF_TRY(forward_chunk(m, s, 1, 1, op->kv_store_pos && op->attention_pos, err));
    pick(m, s, 0, sa);
    op->copy(m->be, cf_rows(s->sc.ids, 0, 1), s->next);
    return CINFER_OK;
}

/* Records step_ops into s->graph. */
static cinfer_status record_step(cf_model *m, cf_seq *s, const cf_sample_args *sa, cinfer_error *err) {
    const cf_backend_ops *op = m->be->ops;
    if (s->graph) op->graph_free(m->be, s->graph);
    s->graph = NULL;
    CF_TRY(op->graph_begin(m->be, err));
    cinfer_error ferr = {0};
    cinfer_status st = step_ops(m, s, sa, &ferr);   /* no MoE here: nothing can fail mid-pass */
    cf_graph *g = NULL;
    cinfer_status end = op->graph_end(m->be, &g, err);
    if (st != CINFER_OK) {
        if (g) op->graph_free(m->be, g);
        if (err) *err = ferr;
        return st;
    }
    CF_TRY(end);
    s->graph = g;
    s->graph_args = *sa;
    return CINFER_OK;
}

/* Enqueues one decode step of token id (none: -1, ids row 0 holds it) at position pos: step_ops, replayed
 * from the recording where the model records steps. */
static cinfer_status enqueue_step(cf_model *m, cf_seq *s, int32_t id, int32_t pos, const cf_sample_args *sa, float u, cinfer_error *err) {
    cf_backend *be = m->be;
    const cf_backend_ops *op = be->ops;
    if (id >= 0) op->write(be, cf_rows(s->sc.ids, 0, 1), &id);
    op->write(be, cf_rows(s->sc.pos, 0, 1), &pos);
    if (!is_greedy(sa)) op->write(be, s->u, &u);
    cf_kv_written(s->kv, pos + 1);   /* a step queued past a stop writes a slot past the sequence's end */
    if (!m->decode_graphs) return step_ops(m, s, sa, err);
    if (!s->graph || !same_pick(s, sa)) CF_TRY(record_step(m, s, sa, err));
    op->graph_launch(be, s->graph);
    return CINFER_OK;
}

/* the token to write into ids row 0 for a step of id: none (-1) when the last step left it there */
static int32_t id_to_write(cf_seq *s, int32_t id) {
    const int32_t w = s->id_staged && s->staged_id == id ? -1 : id;
    s->id_staged = 0;
    return w;
}

/* n decode steps from id fit: id is a token and the context has room for n more */
static cinfer_status check_steps(const cf_model *m, const cf_seq *s, int32_t id, int n, cinfer_error *err) {
    if (id < 0 || id >= m->hp.vocab)
        return cf_fail(err, CINFER_E_TOKEN_OUT_OF_RANGE, "token id %d is outside the vocabulary [0, %d)", id, m->hp.vocab);
    if (s->kv->n + n > s->max_ctx)
        return cf_fail(err, CINFER_E_CONTEXT_OVERFLOW, "%d token%s after %d would exceed the context of %d", n, n == 1 ? "" : "s",
                       s->kv->n, s->max_ctx);
    return CINFER_OK;
}

cinfer_status cf_model_decode_step(cf_model *m, cf_seq *s, int32_t id, const cf_sample_args *sa, float u, int32_t *next,
                                   cinfer_error *err) {
    CF_TRY(check_steps(m, s, id, 1, err));
    CF_TRY(cf_model_check_pick(m, sa, u, err));
    s->last_row = -1;
    CF_TRY(enqueue_step(m, s, id_to_write(s, id), s->kv->n, sa, u, err));
    cinfer_status st = read_pick(m, s, s->kv->n, next, err);
    s->id_staged = st == CINFER_OK;
    s->staged_id = *next;
    CF_TRY(st);
    cf_kv_advance(s->kv, 1);
    s->last_row = 0;
    return CINFER_OK;
}

/* Reads back the pick of a step enqueued with read_begin into slot. */
static cinfer_status end_pick(cf_model *m, int slot, int pos, int32_t *next, cinfer_error *err) {
    float id = -1;
    CF_TRY(m->be->ops->read_end(m->be, slot, &id, err));
    return picked(m, id, pos, next, err);
}

cinfer_status cf_model_decode_run(cf_model *m, cf_seq *s, int32_t id, const cf_sample_args *sa, const float *u, int n,
                                  int (*on_token)(void *ctx, int32_t token), void *ctx, int *n_done, cinfer_error *err) {
    const cf_backend_ops *op = m->be->ops;
    *n_done = 0;
    if (n < 1) return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "decode_run: %d steps; at least 1", n);
    if (!is_greedy(sa) && !u) return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "decode_run: sampling needs a uniform per step");
    CF_TRY(check_steps(m, s, id, n, err));
    for (int t = 0; t < n; t++) CF_TRY(cf_model_check_pick(m, sa, is_greedy(sa) ? 0.0f : u[t], err));
    if (!m->decode_graphs || !op->read_begin || !op->read_end) {   /* one step at a time */
        for (int t = 0; t < n; t++) {
            CF_TRY(cf_model_decode_step(m, s, id, sa, is_greedy(sa) ? 0.0f : u[t], &id, err));
            ++*n_done;
            if (on_token(ctx, id)) break;
        }
        return CINFER_OK;
    }
    /* step t + 1 is queued (its input: step t's pick, copied on the device) before step t's pick is read */
    const int32_t pos0 = s->kv->n;
    s->last_row = -1;
    CF_TRY(enqueue_step(m, s, id_to_write(s, id), pos0, sa, is_greedy(sa) ? 0.0f : u[0], err));
    op->read_begin(m->be, s->next, 0);
    for (int t = 0; t < n; t++) {
        if (t + 1 < n) {
            CF_TRY(enqueue_step(m, s, -1, pos0 + t + 1, sa, is_greedy(sa) ? 0.0f : u[t + 1], err));
            op->read_begin(m->be, s->next, (t + 1) & 1);
        }
        int32_t tok = 0;
        CF_TRY(end_pick(m, t & 1, pos0 + t, &tok, err));
        cf_kv_advance(s->kv, 1);
        ++*n_done;
        if (t + 1 == n) {   /* the last step's pick is in ids row 0, its logits in row 0 */
            s->id_staged = 1;
            s->staged_id = tok;
            s->last_row = 0;
        }
        /* A stop leaves the step after it run as well (on the ids and position it found): its cache row
         * lies past the sequence's end, where the next step writes again, and the logits are its own. */
        if (on_token(ctx, tok)) break;
    }
    return CINFER_OK;
}

cinfer_status cf_model_pick_last(cf_model *m, cf_seq *s, const cf_sample_args *sa, float u, int32_t *next, cinfer_error *err) {
    CF_TRY(cf_model_check_pick(m, sa, u, err));
    if (s->last_row < 0)
        return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "no logits to pick from: evaluate a token first (after a truncation too)");
    if (!is_greedy(sa)) m->be->ops->write(m->be, s->u, &u);
    pick(m, s, s->last_row, sa);
    return read_pick(m, s, s->kv->n - 1, next, err);
}
