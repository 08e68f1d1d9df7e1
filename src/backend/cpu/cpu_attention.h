/* cpu_attention.h: the CPU backend's attention (ring and paged caches of f32, bf16 or f16 rows): one pass over
 * the keys with an online softmax, each K/V row read once for all the query heads of its GQA group, threads split
 * over rows, kv heads and blocks of keys, the blocks of a row merged in a fixed order.
 * Kernels for portable C (the reference), AVX2+FMA and AVX-512, chosen by the caller. The work space is the
 * caller's (cf_attn_scratch, grown and kept between calls). */
#ifndef CF_BACKEND_CPU_ATTENTION_H
#define CF_BACKEND_CPU_ATTENTION_H

#include <stddef.h>
#include <stdint.h>

#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/cpu_workers.h"
#include "cinfer.h"

/* One attention call. Row i (query position p = pos ? pos[i] : pos0 + i) sees the keys at positions
 * max(0, p - window + 1) .. p (window 0: from 0). Key position j lives in cache row j % cap (table NULL) or
 * in row table[row_seq[i] * table_stride + j / block] * block + j % block. q: n_rows rows of n_heads *
 * head_dim; out: n_rows rows of n_heads * v_head_dim; k, v: cache rows of n_kv_heads * head_dim (v_head_dim) of
 * kv_dtype (CF_F32, CF_BF16 or CF_F16). Strides count elements. score = scale * q.k, then
 * softcap * tanh(score / softcap) where softcap > 0. */
typedef struct cf_attn_call {
    const float *q;
    int64_t qs;
    float *out;
    int64_t os;
    const void *k, *v;
    cf_dtype kv_dtype;
    int64_t ks, vs;
    int n_rows, n_heads, n_kv_heads, head_dim, v_head_dim, window;
    float scale, softcap;
    int pos0;
    const int32_t *pos;
    int cap;
    const int32_t *table, *row_seq;
    int64_t table_stride;
    int block;
} cf_attn_call;

/* Work space of the attention: grown by cf_cpu_attention when a call needs more, freed by its owner. */
typedef struct cf_attn_scratch {
    float *buf;
    size_t floats;
} cf_attn_scratch;

/* Runs one call on the threads of pool (NULL: this thread alone) with the kernels of isa (which this CPU must run: see
 * cf_cpu_isa_available). Fails only when the scratch cannot grow (nothing written then). */
cinfer_status cf_cpu_attention(const cf_attn_call *c, cf_workers *pool, cf_cpu_isa_level isa, cf_attn_scratch *s,
                               cinfer_error *err);

#endif
