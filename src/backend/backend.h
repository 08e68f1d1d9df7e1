/* backend.h: the compute interface the model graph is written against. A backend owns memory and
 * runs the operations below on it; cpu/ and cuda/ implement it. The model never names a backend and a
 * backend never names an architecture.
 *
 * Conventions
 * - A cf_tensor is a row-major 2-D view [rows, cols] of backend memory (device memory for CUDA) with a
 *   row stride in elements (stride == cols when contiguous). Views are plain values; only tensors
 *   returned by alloc are freed (with free_tensor).
 * - Weights: upload_weight keeps or converts a host weight into the backend's weight storage
 *   (CPU: the mmapped bf16/f16/f32 data as is, so the mapping must outlive the backend, or a
 *   64-byte aligned copy of a matrix that is not aligned; CUDA: bf16/f16 in device memory). Weight
 *   tensors belong to the backend and are released when it is destroyed; callers free_tensor only what
 *   alloc returned.
 * - Quantized weights (MLX affine, base/qweight.h) go through upload_qweight. The CPU keeps the packed
 *   values, scales and biases in place (mmapped, like its other weights) and returns a tensor of dtype CF_Q
 *   whose data points to a backend-owned cf_qweight (rows, cols as the logical matrix; stride = cols). Only
 *   matmul (as w, also inside the fused qkv, matmul_glu, matmul_gated) and embed (as table: the looked-up
 *   rows are dequantized) take a CF_Q tensor; no other op, and no view (cf_rows, cf_cols) of one, is valid.
 *   CUDA keeps 4- and 8-bit weights packed in device memory and returns a CF_Q tensor too (its cf_qweight
 *   points to device memory: backend/cuda/cuda_internal.h); it dequantizes 2-, 3-, 5- and 6-bit weights to bf16
 *   at upload and returns a plain BF16 tensor for those.
 * - Activations: the model allocates them with act_dtype (CPU: F32; CUDA: its choice). Integer inputs
 *   (token ids, positions) are CF_I32 tensors filled with write(). KV caches (the cache arguments of the
 *   kv_store and attention ops) are act_dtype, or on a backend with kv_any_dtype F32, BF16 or F16: the
 *   store rounds to the cache's type.
 * - Operations are enqueued in order on the backend's single stream and return nothing: the first
 *   failure is remembered (sticky) and reported by sync() or read(), which return the status.
 * - Shapes are the caller's responsibility (the model checks them once at load); backends may assume them.
 */
#ifndef CF_BACKEND_BACKEND_H
#define CF_BACKEND_BACKEND_H

#include <stddef.h>
#include <stdint.h>
#include "cinfer.h"
#include "base/dtype.h"
#include "base/qweight.h"

typedef struct cf_tensor {
    void *data;
    cf_dtype dtype;
    int64_t rows, cols, stride;
} cf_tensor;

/* Row range [r0, r0 + n) of t; columns [c0, c0 + nc) of t. */
static inline cf_tensor cf_rows(cf_tensor t, int64_t r0, int64_t n) {
    cf_tensor v = t;
    v.data = (char *)t.data + (size_t)(r0 * t.stride) * cf_dtype_size(t.dtype);
    v.rows = n;
    return v;
}
static inline cf_tensor cf_cols(cf_tensor t, int64_t c0, int64_t nc) {
    cf_tensor v = t;
    v.data = (char *)t.data + (size_t)c0 * cf_dtype_size(t.dtype);
    v.cols = nc;
    return v;
}
/* A contiguous tensor seen as [rows, cols] with rows*cols unchanged (e.g. [n, heads*hd] as [n*heads, hd]). */
static inline cf_tensor cf_reshape(cf_tensor t, int64_t rows, int64_t cols) {
    cf_tensor v = t;
    v.rows = rows;
    v.cols = cols;
    v.stride = cols;
    return v;
}

typedef enum cf_act { CF_ACT_SILU, CF_ACT_GELU_TANH } cf_act;

/* Attention of n_q query rows (one sequence, consecutive positions pos0 .. pos0+n_q-1) over a KV cache
 * layer. Cache rows are slots: position p lives in slot p % cap. A query at position p sees the keys at
 * positions k with max(0, p - window + 1) <= k <= p (window 0 = unlimited); the caller guarantees those
 * slots hold them (cap >= window + n_q - 1 for windowed layers, cap > last position otherwise).
 * q: [n_q, n_heads*head_dim]; k_cache: [cap, n_kv_heads*head_dim]; v_cache: [cap, n_kv_heads*v_head_dim];
 * out: [n_q, n_heads*v_head_dim]. Query head h uses kv head h / (n_heads / n_kv_heads).
 * score = scale * q.k; if softcap > 0: score = softcap * tanh(score / softcap); softmax in f32. */
typedef struct cf_attn_args {
    int n_q, pos0;
    int n_heads, n_kv_heads, head_dim, v_head_dim;
    int cap, window;
    float scale, softcap;
} cf_attn_args;

/* Device-side sampling (optional op sample): the truncations of sample/sampler.h, without processors. */
typedef struct cf_sample_args {
    float temperature;   /* 0 = argmax */
    int top_k;           /* 0 or >= vocab = off */
    float top_p;         /* 1 = off */
    float min_p;         /* 0 = off */
} cf_sample_args;

static inline int cf_sample_args_equal(const cf_sample_args *a, const cf_sample_args *b) {
    return a->temperature == b->temperature && a->top_k == b->top_k && a->top_p == b->top_p && a->min_p == b->min_p;
}

/* A batch on the device: rows of several sequences in one forward pass (paged KV ops).
 * Rows of one sequence are consecutive and at consecutive positions; sequence s owns rows
 * [seq_start[s], seq_start[s + 1]) and its cache blocks are block_table row s: position j of s lives in
 * cache slot block_table[s][j / block_size] * block_size + j % block_size. A padding row (graph buckets)
 * is a sequence of its own whose table names a scratch block. */
typedef struct cf_batch_view {
    cf_tensor pos;          /* I32 [n_rows, 1]: each row's position in its sequence */
    cf_tensor row_seq;      /* I32 [n_rows, 1]: each row's sequence */
    cf_tensor seq_start;    /* I32 [n_seqs + 1, 1]: first row of each sequence; seq_start[n_seqs] = n_rows */
    cf_tensor slot;         /* I32 [n_rows, 1]: the cache slot each row's keys and values are written to */
    cf_tensor block_table;  /* I32 [n_seqs, table_cols] */
    int n_rows, n_seqs;
    int max_rows_per_seq;   /* the most rows any sequence has in this batch (1 for a decode step) */
} cf_batch_view;

/* Attention of every row of a batch over its own sequence's paged cache. The row at position p sees the
 * keys at positions k with max(0, p - window + 1) <= k <= p (window 0 = unlimited), which the caller has
 * stored (kv_store_slots) before. q: [n_rows, n_heads*head_dim]; k_pool: [n_slots, n_kv_heads*head_dim];
 * v_pool: [n_slots, n_kv_heads*v_head_dim]; out: [n_rows, n_heads*v_head_dim]. Query head h uses kv head
 * h / (n_heads / n_kv_heads). score = scale * q.k; if softcap > 0: score = softcap * tanh(score / softcap);
 * softmax in f32. max_keys bounds the positions + 1 of every row (a launch may size its grid by it; a
 * recorded graph keeps it, so it is the runner's context limit there, not this step's). */
typedef struct cf_paged_attn_args {
    int n_heads, n_kv_heads, head_dim, v_head_dim;
    int block_size, table_cols;
    int max_keys;
    int window;
    float scale, softcap;
} cf_paged_attn_args;

/* Where a layer's new keys and values go (op qkv): row i of k and v to cache row (idx.data ? idx[i] : pos0 + i)
 * % cap, or to row idx[i] itself when cap is 0 (paged slots, as kv_store_slots). k_cache.data NULL: no store. */
typedef struct cf_kv_dest {
    cf_tensor k_cache, v_cache;
    cf_tensor idx;   /* I32 [n, 1] */
    int pos0, cap;
} cf_kv_dest;

/* A layer's attention inputs from its normed activations x [n, dim] (op qkv), in this order:
 * q = x Wq (+ bq); unless own_kv is 0 (a layer reading an earlier layer's cache): k = x Wk (+ bk) and
 * v = x Wv (+ bv), or v = k as projected where wv.data is NULL; each head of q, k, v RMS-normed where
 * q_norm, k_norm, v_norm ([1, head_dim] weights) are set, as rmsnorm with eps and w_offset (v_norm with
 * offset 0); RoPE of q and k as op rope (rot_dim < 2: none); then k and v stored by dest. */
typedef struct cf_qkv_args {
    cf_tensor q, k, v;   /* [n, n_heads*head_dim], [n, n_kv_heads*head_dim], [n, n_kv_heads*v_head_dim] */
    cf_tensor wq, wk, wv, bq, bk, bv;
    cf_tensor q_norm, k_norm, v_norm;
    float eps, w_offset;
    int own_kv;
    int n_heads, n_kv_heads, head_dim, v_head_dim;
    int rot_dim;
    cf_tensor pos, inv_freq;   /* I32 [n, 1]; F32 [1, rot_dim/2] */
    cf_kv_dest dest;
} cf_qkv_args;

typedef struct cf_backend cf_backend;
#define CF_READ_SLOT_VALUES 4096   /* values a read_begin slot holds */
typedef struct cf_graph cf_graph;

typedef struct cf_backend_ops {
    const char *name;
    void (*destroy)(cf_backend *be);

    /* memory */
    cinfer_status (*alloc)(cf_backend *be, cf_dtype dt, int64_t rows, int64_t cols, cf_tensor *out, cinfer_error *err);
    cinfer_status (*upload_weight)(cf_backend *be, const void *host, cf_dtype dt, int64_t rows, int64_t cols,
                                   cf_tensor *out, cinfer_error *err);
    /* an MLX affine-quantized weight (see Conventions); w->q 4-byte aligned; on the CPU what w points to must
     * outlive the backend */
    cinfer_status (*upload_qweight)(cf_backend *be, const cf_qweight *w, cf_tensor *out, cinfer_error *err);
    void (*free_tensor)(cf_backend *be, cf_tensor *t);
    void (*write)(cf_backend *be, cf_tensor dst, const void *host);  /* host data of dst's dtype, contiguous */
    void (*fill)(cf_backend *be, cf_tensor dst, float value);
    /* copies src to host as float32, rows*cols values contiguous; waits for queued work */
    cinfer_status (*read)(cf_backend *be, float *host, cf_tensor src, cinfer_error *err);
    cinfer_status (*sync)(cf_backend *be, cinfer_error *err);

    /* operations */
    /* out[i] = table[ids[i]] * scale; ids: I32 [n, 1] */
    void (*embed)(cf_backend *be, cf_tensor out, cf_tensor table, cf_tensor ids, float scale);
    /* out = x / sqrt(mean(x^2) + eps) * (w + w_offset), per row; w: [1, cols]; out may alias x */
    void (*rmsnorm)(cf_backend *be, cf_tensor out, cf_tensor x, cf_tensor w, float eps, float w_offset);
    /* out[n, d] = x[n, k] . w[d, k]^T (+ bias[1, d] if bias.data) */
    void (*matmul)(cf_backend *be, cf_tensor out, cf_tensor x, cf_tensor w, cf_tensor bias);
    /* out = a + b (elementwise, same shape); out may alias a or b */
    void (*add)(cf_backend *be, cf_tensor out, cf_tensor a, cf_tensor b);
    void (*scale)(cf_backend *be, cf_tensor x, float s);
    /* out = act(gate) * up */
    void (*glu)(cf_backend *be, cf_tensor out, cf_tensor gate, cf_tensor up, cf_act act);
    /* x = cap * tanh(x / cap) */
    void (*softcap)(cf_backend *be, cf_tensor x, float cap);
    /* Rotary embedding in place on x [n, n_heads*head_dim] for positions pos[n] (I32 [n,1]):
     * in each head, dims i and i + rot_dim/2 (i < rot_dim/2) rotate by angle pos * inv_freq[i]
     * (inv_freq: F32 [1, rot_dim/2]); dims >= rot_dim are left as they are. */
    void (*rope)(cf_backend *be, cf_tensor x, cf_tensor pos, int n_heads, int head_dim, int rot_dim, cf_tensor inv_freq);
    /* copies rows of src into cache slots (pos0 + i) % cap for i < src.rows */
    void (*kv_store)(cf_backend *be, cf_tensor cache, cf_tensor src, int pos0, int cap);
    /* attention, attention_pos and attention_paged may read the cache rows of positions below the pass's first (a
     * sequence's first row in the batch) before the op queued right before them has finished (CUDA: programmatic
     * dependent launch): that op may write q and this pass's rows, but not older rows, pos or the batch tables. */
    void (*attention)(cf_backend *be, cf_tensor out, cf_tensor q, cf_tensor k_cache, cf_tensor v_cache, const cf_attn_args *a);
    /* copies src to dst (same shape; dtype conversion allowed) */
    void (*copy)(cf_backend *be, cf_tensor dst, cf_tensor src);
    /* bytes a KV pool may still take from the backend's memory (CPU: a quarter of the available host memory;
     * CUDA: the largest free extent of its pool); NULL where unknown */
    int64_t (*mem_available)(cf_backend *be);
    /* paged KV: copies row i of src to cache row slot[i] (slot: I32 [src.rows, 1], device data) */
    void (*kv_store_slots)(cf_backend *be, cf_tensor cache, cf_tensor src, cf_tensor slot);
    void (*attention_paged)(cf_backend *be, cf_tensor out, cf_tensor q, cf_tensor k_pool, cf_tensor v_pool,
                            const cf_paged_attn_args *a, const cf_batch_view *b);

    /* Optional operations: NULL where a backend lacks them; the model uses them when present (the CPU
     * has all but the graph ops). */
    /* Fused operations the model asks for by name (the model falls back to the plain ops above where they
     * are NULL; the CPU defines each as that sequence of plain ops, and tuning.fused_ops 0 hides them). */
    /* the attention inputs of a layer: cf_qkv_args */
    void (*qkv)(cf_backend *be, cf_tensor x, const cf_qkv_args *a);
    /* out = act(x Wgate) * (x Wup); gate, up: [n, ffn] work space the backend may write (out may be gate) */
    void (*matmul_glu)(cf_backend *be, cf_tensor out, cf_tensor x, cf_tensor w_gate, cf_tensor w_up, cf_act act,
                       cf_tensor gate, cf_tensor up);
    /* out = act(x W) * m (m: [n, d], any row stride) */
    void (*matmul_gated)(cf_backend *be, cf_tensor out, cf_tensor x, cf_tensor w, cf_act act, cf_tensor m);
    /* The residual update: x = (x + [rmsnorm(o) * (w_o + w_offset)]) * scale (w_o.data NULL: o as it is),
     * then, where h.data is set, h = rmsnorm(x) * (w_h + w_offset). o's contents are undefined afterwards. */
    void (*add_norm)(cf_backend *be, cf_tensor x, cf_tensor o, cf_tensor w_o, float scale, cf_tensor h, cf_tensor w_h,
                     float eps, float w_offset);
    /* kv_store and attention with positions read from an I32 device tensor pos [n, 1] instead of host
     * ints: row i of src goes to slot pos[i] % cap; attention_pos uses pos0 = pos[0] (a->pos0 is ignored)
     * and sizes its launch for the longest possible key range (a->window, else a->cap). With these a
     * decode step depends only on device data, so one recorded graph replays at every position. */
    void (*kv_store_pos)(cf_backend *be, cf_tensor cache, cf_tensor src, cf_tensor pos, int cap);
    void (*attention_pos)(cf_backend *be, cf_tensor out, cf_tensor q, cf_tensor k_cache, cf_tensor v_cache,
                          const cf_attn_args *a, cf_tensor pos);
    /* ids[i] = index of the largest value of logits row i, ties to the lowest index; -1 when the row holds a
     * NaN or +inf (the caller reports non-finite logits); ids: I32 [n, 1] */
    void (*argmax)(cf_backend *be, cf_tensor ids, cf_tensor logits);
    /* ids[i] = a draw from softmax(logits row i / temperature) truncated by top-k, top-p, min-p in the
     * order and with the tie rules of sample/sampler.h (no processors, no log-probabilities); u: F32 [n, 1]
     * of uniforms in [0, 1) written by the caller, one per row, select the token. Temperature 0 (or one
     * whose inverse overflows) is the argmax. The CPU runs the sampler itself (cf_sampler_sample_u: the
     * same token as the host sampler given the same u; a NaN or +inf logit is a CINFER_E_NOT_A_NUMBER
     * failure); CUDA walks the kept tokens in id order, so with truncation it picks from the same
     * distribution but not always the same token for a given u, and it gives NaN logits probability 0. */
    void (*sample)(cf_backend *be, cf_tensor ids, cf_tensor logits, cf_tensor u, const cf_sample_args *s);
    /* Reading without waiting for everything queued: read_begin enqueues a copy of src (contiguous, at most
     * CF_READ_SLOT_VALUES values) into slot (0 or 1) behind the ops queued so far; read_end waits for that copy only (ops
     * queued after it keep running) and writes the values as f32, like read. A decoder can so queue step
     * t + 1 before it reads step t's token. */
    void (*read_begin)(cf_backend *be, cf_tensor src, int slot);
    cinfer_status (*read_end)(cf_backend *be, int slot, float *host, cinfer_error *err);
    /* Recording a step (CUDA graphs): ops enqueued between graph_begin and graph_end are recorded, not
     * run; graph_launch runs the recording on the tensors' contents at launch time. Between begin and end
     * call no write, read, sync, alloc or free_tensor; host arguments (shapes, pos0) are frozen into the
     * recording, so use the *_pos ops for what changes per step. */
    cinfer_status (*graph_begin)(cf_backend *be, cinfer_error *err);
    cinfer_status (*graph_end)(cf_backend *be, cf_graph **out, cinfer_error *err);
    void (*graph_launch)(cf_backend *be, cf_graph *g);
    void (*graph_free)(cf_backend *be, cf_graph *g);
} cf_backend_ops;

struct cf_backend {
    const cf_backend_ops *ops;
    cf_dtype act_dtype;
    int kv_any_dtype;    /* 1: KV caches may be F32, BF16 or F16 (cf_model.kv_dtype); 0: they are act_dtype */
    int n_threads;
    int async;           /* 1: ops return before the device has run them (CUDA), so the host can prepare the next
                            step meanwhile; 0: they have run when they return (CPU) */
    int prefill_chunk;   /* positions per forward pass a sequence takes by default (cf_seq_create);
                            0 = the model's default (256). CPU 256; CUDA wants 4096 (GEMM efficiency) */
};

typedef enum cf_device { CF_DEVICE_CPU, CF_DEVICE_CUDA } cf_device;

/* Tuning knobs, every one in this struct. cf_tuning_from_env() is the one place that reads the environment
 * (cf_backend_default_params calls it); each field's default is the tuned value, the variable overrides it:
 *   fused_ops         CINFER_FUSED_OPS          1: backends offer their fused ops (qkv, matmul_glu, ...); 0: the model
 *                                               runs the plain op sequence (A/B and tests)
 *   decode_graphs     CINFER_DECODE_GRAPHS      1: decode steps are recorded and replayed as graphs where the backend can
 *   device_sampling   CINFER_DEVICE_SAMPLING    1: the engine picks tokens on the device where a request allows; 0: always
 *                                               on the host (the logits come back)
 *   cuda_direct_alloc CINFER_CUDA_DIRECT_ALLOC  0: one device pool; 1: one cudaMalloc a tensor (compute-sanitizer)
 *   cuda_f32_act      CINFER_CUDA_F32_ACT       0: bf16 activations; 1: f32
 *   pdl               CINFER_CUDA_PDL           1: programmatic dependent launch
 *   gemv_unroll       CINFER_GEMV_UNROLL        0: by row length; 1 or 2 chunks a row a batch (k_gemv.cuh)
 *   gemv_max_rows     CINFER_GEMV_MAX_ROWS      1: bf16/f16 matmuls with at most this many rows (up to 8; f32 activations: 8) use the GEMV kernel,
 *                                               more cuBLAS (H200: cuBLAS streams 87-102% of the copy rate from 2 rows on,
 *                                               where the GEMV's cost grows with the rows: bench/results/README.md)
 *   gemv_tc_max_rows  CINFER_GEMV_TC_MAX_ROWS   16: bf16 matmuls with bf16 activations, more rows than gemv_max_rows and at most
 *                                               this many (up to 16) run the tensor-core GEMV (k a multiple of 64, fused as
 *                                               the GEMV; measured: cuda_backend.c); 0: cuBLAS from gemv_max_rows + 1
 *   gemv_warps        CINFER_GEMV_WARPS         8: warps per SM a GEMV aims to keep busy
 *   gemv_block_warps  CINFER_GEMV_BLOCK_WARPS   4: warps per GEMV block (2, 4 or 8)
 *   attn_bc           CINFER_ATTN_BC            32: keys per tile of the prefill attention kernel (head size 128)
 *   attn_hpb          CINFER_ATTN_HPB           2: query heads per prefill attention block
 *   attn_group        CINFER_ATTN_GROUP         1: decode attention with one block per KV head
 *   attn_group_splits CINFER_ATTN_GROUP_SPLITS  64: its key splits at most (1 to 64)
 *   attn_cluster      CINFER_ATTN_CLUSTER       1: the other decode attention kernel's 2-8 key splits merge through a thread
 *                                               block cluster's shared memory; 0: through global memory behind a counter
 *   paged_mma_group   CINFER_PAGED_MMA_GROUP    0: paged decode attention on CUDA cores; n: tensor cores (n blocks per SM)
 *   paged_sm_blocks   CINFER_PAGED_SM_BLOCKS    3: blocks per SM the paged decode kernel sizes its key splits for
 *   attn_paged_d512   CINFER_ATTN_PAGED_D512    1: decode attention_pos at head size 512 runs the paged decode kernel; 0: the
 *                                               generic split kernel
 *   qmma_max_rows     CINFER_QMMA_MAX_ROWS      128: CUDA matmuls with 4/8-bit weights and more rows than qgemv_max_rows (at most
 *                                               8) up to this many run the tensor-core kernel on the packed weights; more
 *                                               rows dequantize the weight to bf16 scratch and use cuBLAS
 *   qgemv_max_rows    CINFER_QGEMV_MAX_ROWS     8: CUDA matmuls with 4/8-bit weights and at most this many rows (up to 8) run the
 *                                               quantized GEMV
 *   qgemv_warps       CINFER_QGEMV_WARPS        24: warps per SM the quantized GEMV aims for when it splits a unit of 4 weight
 *                                               rows over 2 or 4 warps (few rows or long ones)
 *   qgemv_tc          CINFER_QGEMV_TC           1: CUDA decode with 4/8-bit weights and bf16 activations runs on the tensor
 *                                               cores (k a multiple of 128, at least 512); 0: the CUDA-core GEMV
 *   qgemv_tc_splits   CINFER_QGEMV_TC_SPLITS    8: at most this many blocks (a cluster, 1, 2, 4 or 8) split the k of one unit of
 *                                               the tensor-core GEMV while the doubled grid still runs in one wave; 1: none
 * The measurements behind the CUDA defaults are noted where cuda_backend.c applies them. */
typedef struct cf_tuning {
    int fused_ops, decode_graphs, device_sampling;
    int cuda_direct_alloc, cuda_f32_act, pdl;
    int gemv_unroll, gemv_max_rows, gemv_tc_max_rows, gemv_warps, gemv_block_warps;
    int attn_bc, attn_hpb, attn_group, attn_group_splits, attn_cluster;
    int paged_mma_group, paged_sm_blocks, attn_paged_d512;
    int qmma_max_rows, qgemv_max_rows, qgemv_warps, qgemv_tc, qgemv_tc_splits;
} cf_tuning;

cf_tuning cf_tuning_defaults(void);
cf_tuning cf_tuning_from_env(void);

typedef struct cf_backend_params {
    cf_device device;
    int n_threads;       /* CPU threads; 0 = one per physical core */
    int gpu_index;
    size_t pool_bytes;   /* CUDA: 0 = sized from free device memory */
    cf_tuning tuning;
} cf_backend_params;

/* the defaults with tuning from the environment */
cf_backend_params cf_backend_default_params(void);
cinfer_status cf_backend_create(const cf_backend_params *p, cf_backend **out, cinfer_error *err);
void cf_backend_destroy(cf_backend *be);
/* "cpu" / "cuda" -> device; error on anything else */
cinfer_status cf_device_parse(const char *s, cf_device *out, cinfer_error *err);

/* Per backend constructors (cuda's returns CINFER_E_NO_DEVICE without a GPU, CINFER_E_UNSUPPORTED when
 * cinfer was built without CUDA). */
cinfer_status cf_cpu_backend_create(const cf_backend_params *p, cf_backend **out, cinfer_error *err);
cinfer_status cf_cuda_backend_create(const cf_backend_params *p, cf_backend **out, cinfer_error *err);

#endif
