/* arch.h: architecture descriptors. config.json is read once into cf_hparams: model-wide numbers plus
 * one cf_layer_hp per layer, so the single decoder graph in forward.c needs no per-architecture code
 * paths beyond the flags here. */
#ifndef CF_MODEL_ARCH_H
#define CF_MODEL_ARCH_H

#include "cinfer.h"
#include "backend/backend.h"

typedef enum cf_arch {
    CF_ARCH_LLAMA,
    CF_ARCH_MISTRAL,
    CF_ARCH_QWEN2,
    CF_ARCH_QWEN3,
    CF_ARCH_GEMMA2,
    CF_ARCH_GEMMA3,
    CF_ARCH_GEMMA4,
} cf_arch;

#define CF_MAX_ROPE_SETS 2
#define CF_MAX_EXPERTS_USED 64  /* experts routed per token at most */

/* Bounds on config.json sizes: far above any released model, low enough that every size computed from
 * them fits int64 and ids stay exact as float32 (picked ids are read back as floats). */
#define CF_MAX_LAYERS 4096
#define CF_MAX_WIDTH (1 << 20)      /* hidden, intermediate and per-layer input sizes */
#define CF_MAX_HEADS 4096
#define CF_MAX_HEAD_DIM 1024        /* rotary tables hold 512 frequencies */
#define CF_MAX_VOCAB (1 << 24)
#define CF_MAX_CTX (1 << 24)
#define CF_MAX_EXPERTS 4096
#define CF_MAX_PARAMS 1e15           /* parameters in all (exact as a double) */

/* One rotary table: inv_freq[rot_dim/2], computed from theta and the scaling rule. */
typedef struct cf_rope_set {
    int rot_dim;
    float inv_freq[512];
    char type[16];            /* "default", "llama3", "linear", ... */
} cf_rope_set;

typedef struct cf_layer_hp {
    int n_heads, n_kv_heads, head_dim, v_head_dim;
    int window;               /* keys visible to a query: the last `window` positions; 0 = all */
    int rope_set;             /* index into cf_hparams.rope */
    int ffn_dim;
    float attn_scale;         /* multiplies q.k */
    int kv_source;            /* layer whose KV cache this layer reads (itself unless shared) */
    int k_eq_v;               /* no value projection: values are the key projection (before k norm and RoPE) */
} cf_layer_hp;

typedef struct cf_hparams {
    cf_arch arch;
    char arch_name[64];       /* the config's "architectures"[0] */
    int n_layers, dim, vocab, max_ctx;
    int n_heads, n_kv_heads, head_dim, ffn_dim;
    float norm_eps;
    float norm_w_offset;      /* RMSNorm multiplies by (w + offset): 0, or 1 for Gemma */
    float embed_scale;        /* embeddings are multiplied by this (sqrt(dim) for Gemma) */
    cf_act act;
    int tied;                 /* output projection is the embedding matrix */
    int qkv_bias;             /* q/k/v projections have biases (Qwen2) */
    int qk_norm;              /* per-head RMSNorm of q and k before RoPE (Qwen3, Gemma 3/4) */
    int sandwich_norm;        /* Gemma: post-attention and pre/post-feed-forward norms */
    int v_norm;               /* per-head RMSNorm of v without a weight (Gemma 4) */
    int layer_scalar;         /* each layer's output is multiplied by its layer_scalar (Gemma 4) */
    int ple_dim, ple_vocab;   /* per-layer input embeddings of ple_dim per layer (Gemma 4); 0 = none */
    int n_experts, n_experts_used, expert_ffn_dim;  /* mixture of experts beside the MLP (Gemma 4); 0 = none */
    float attn_softcap, final_softcap;  /* 0 = none */
    int n_rope;
    cf_rope_set rope[CF_MAX_ROPE_SETS];
    int bos_id;               /* -1 when the config names none */
    int n_eos;                /* end-of-sequence ids of config.json and generation_config.json */
    int eos_ids[8];
    cf_layer_hp *layers;      /* n_layers entries, owned */
} cf_hparams;

/* Reads dir/config.json. */
cinfer_status cf_hparams_load(const char *dir, cf_hparams *hp, cinfer_error *err);
/* Reads a config.json file (or any path). */
cinfer_status cf_hparams_load_file(const char *path, cf_hparams *hp, cinfer_error *err);
/* Reads config.json text; path only names it in messages. On failure *hp holds nothing to free. */
cinfer_status cf_hparams_parse(const char *text, const char *path, cf_hparams *hp, cinfer_error *err);
void cf_hparams_free(cf_hparams *hp);

/* Total parameters (every expert, the per-layer embedding tables included). */
int64_t cf_hparams_n_params(const cf_hparams *hp);
/* Parameters multiplied per token: all but the embedding tables' gathers (a tied output matrix counts
 * once), with only the routed experts. Prefill flops ~ 2 * this per token. */
int64_t cf_hparams_active_params(const cf_hparams *hp);
/* KV cache bytes per token of context at the given element size (window layers counted fully). */
int64_t cf_hparams_kv_bytes_per_token(const cf_hparams *hp, size_t elem_size);
/* KV cache bytes one decode step reads at a context of ctx tokens: window layers read at most their
 * window, KV-shared layers read their source's cache again. */
int64_t cf_hparams_kv_read_bytes(const cf_hparams *hp, int64_t ctx, size_t elem_size);

#endif
