/* k_paged_ref.cu: attention over the paged KV pool, the plain version: one warp per (row, query head),
 * keys walked in order with an online softmax, lane l holding elements l, l + 32, ... of q and of the output.
 * Correct for every layout backend.h allows; rows past their key range cost nothing. */
#include "backend/cuda/k_common.cuh"

#define PAGED_WARPS 4
#define PAGED_MAX_PER_LANE 16   /* head_dim / 32 up to 512 */

struct PagedP {
    TV out, q, k, v;
    const int32_t *pos, *row_seq, *table;
    int64_t table_stride;
    int n_rows, n_heads, group, hd, vd, bs, window;
    float scale, softcap;
};

__global__ void __launch_bounds__(32 * PAGED_WARPS) paged_attn_ref_kernel(PagedP P) {
    pdl_wait();
    const int lane = threadIdx.x & 31;
    const int gw = blockIdx.x * PAGED_WARPS + (threadIdx.x >> 5);
    if (gw >= P.n_rows * P.n_heads) return;
    const int row = gw / P.n_heads, h = gw % P.n_heads, kvh = h / P.group;
    const int p = P.pos[row];
    const int lo = P.window > 0 && p - P.window + 1 > 0 ? p - P.window + 1 : 0;
    const int32_t *tab = P.table + (int64_t)P.row_seq[row] * P.table_stride;
    const int nq = (P.hd + 31) / 32, nv = (P.vd + 31) / 32;
    float q[PAGED_MAX_PER_LANE], acc[PAGED_MAX_PER_LANE];
    for (int i = 0; i < nq; i++) q[i] = i * 32 + lane < P.hd ? ld(P.q, row, (int64_t)h * P.hd + i * 32 + lane) : 0.0f;
    for (int i = 0; i < nv; i++) acc[i] = 0.0f;
    float mx = -INFINITY, sum = 0.0f;
    for (int k = lo; k <= p; k++) {
        const int64_t slot = (int64_t)tab[k / P.bs] * P.bs + k % P.bs;
        float s = 0.0f;
        for (int i = 0; i < nq; i++)
            if (i * 32 + lane < P.hd) s += q[i] * ld(P.k, slot, (int64_t)kvh * P.hd + i * 32 + lane);
        s = warp_sum(s) * P.scale;
        if (P.softcap > 0) s = P.softcap * tanhf(s / P.softcap);
        const float nm = fmaxf(mx, s), c = __expf(mx - nm), e = __expf(s - nm);
        sum = sum * c + e;
        for (int i = 0; i < nv; i++)
            if (i * 32 + lane < P.vd) acc[i] = acc[i] * c + e * ld(P.v, slot, (int64_t)kvh * P.vd + i * 32 + lane);
        mx = nm;
    }
    pdl_launch_next();
    for (int i = 0; i < nv; i++)
        if (i * 32 + lane < P.vd) st(P.out, row, (int64_t)h * P.vd + i * 32 + lane, acc[i] / sum);
}

extern "C" cudaError_t cfk_attention_paged_ref(cudaStream_t st, cf_tensor out, cf_tensor q, cf_tensor k, cf_tensor v,
                                               const cf_paged_attn_args *a, const cf_batch_view *b) {
    if (a->head_dim < 1 || a->v_head_dim < 1 || a->head_dim > 32 * PAGED_MAX_PER_LANE || a->v_head_dim > 32 * PAGED_MAX_PER_LANE)
        return cudaErrorInvalidValue;
    PagedP P = {tv(out), tv(q), tv(k), tv(v), (const int32_t *)b->pos.data, (const int32_t *)b->row_seq.data,
                (const int32_t *)b->block_table.data, b->block_table.stride, b->n_rows, a->n_heads, a->n_heads / a->n_kv_heads,
                a->head_dim, a->v_head_dim, a->block_size, a->window, a->scale, a->softcap};
    const int64_t warps = (int64_t)b->n_rows * a->n_heads;
    return launch(paged_attn_ref_kernel, dim3((unsigned)ceil_div(warps, PAGED_WARPS)), dim3(32 * PAGED_WARPS), 0, st, P);
}
