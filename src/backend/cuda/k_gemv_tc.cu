/* k_gemv_tc.cu: the GEMV of k_gemv.cuh for 2 to 16 activation rows with bf16 weights and bf16 activations, on the
 * tensor cores, so that a product over a few rows (batched decode, a speculative verify step) still costs one read
 * of the weights: the CUDA-core kernel spends 16 FMAs and a load of x per 16 bytes of weight and each activation row,
 * which makes its cost grow with the rows from two on.
 *
 * A warp computes a tile of 8 units (16 weight rows: tile row i < 8 is unit i's first row j, row i + 8 its second
 * row j2, with units and rows as in k_gemv.cuh) against up to 16 activation rows (1 or 2 n-tiles of 8) with
 * m16n8k16 bf16 MMAs and f32 accumulators. Lane (g = lane / 4, q = lane % 4) loads 16 bytes of weight row g and of
 * row g + 8 at columns c = 32 i + 8 q .. c + 7 (16-byte streaming loads; a tile row's four lanes read 64 contiguous
 * bytes) and 16 bytes of activation row g (and g + 8) at the same columns, and uses them as the A and B fragments of
 * two k-steps: the MMA's k positions 2q, 2q + 1, 2q + 8, 2q + 9 map to columns c, c + 1, c + 2, c + 3 in the first
 * step and c + 4 .. c + 7 in the second. The dot product does not depend on the order of k as long as A and B use
 * the same order, so no shuffle or shared memory is needed. The accumulator layout hands lane (g, q) both rows of
 * unit g for activation rows 2q, 2q + 1 (+ 8): the same pairs k_gemv.cuh's epilogue (finish_row) takes.
 *
 * wpr warps of a block split a tile's columns (interleaved 32-column steps) and add their accumulators in shared
 * memory; a block holds block_warps / wpr tiles. Two batches of U steps are in flight per lane, the first two issued
 * before the PDL wait (weights only). Needs k a multiple of 32 and 16-byte aligned rows. */
#include "backend/cuda/k_gemv.cuh"

namespace {

template <int NT, int U>
__global__ void __launch_bounds__(256) gemv_tc_kernel(GemvArgs g) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, tpb = g.block_warps / g.wpr;
    const int gi = lane >> 2, q = lane & 3;
    const bool glu = g.glu.p;
    const int si = glu ? 0 : (g.nseg > 2 && (int64_t)blockIdx.x >= g.s2.block0) ? 2 : (g.nseg > 1 && (int64_t)blockIdx.x >= g.s1.block0) ? 1 : 0;
    const Seg S = si == 0 ? g.s0 : si == 1 ? g.s1 : g.s2;
    const int t = warp / g.wpr, sub = warp % g.wpr;
    const int64_t unit = (((int64_t)blockIdx.x - S.block0) * tpb + t) * 8 + gi;
    const int64_t j = glu ? unit : S.rope ? unit / g.half * 2 * g.half + unit % g.half : 2 * unit;
    const int64_t j2 = glu ? j : S.rope ? j + g.half : j + 1;
    const bool row_ok = j < S.d, row2_ok = row_ok && j2 < (glu ? g.s1.d : S.d);
    const uint4 *w0 = reinterpret_cast<const uint4 *>((const __nv_bfloat16 *)S.w + (row_ok ? j : 0) * S.wstride) + q;
    const uint4 *w1 = reinterpret_cast<const uint4 *>(glu ? (const __nv_bfloat16 *)g.s1.w + (row_ok ? j : 0) * g.s1.wstride
                                                          : (const __nv_bfloat16 *)S.w + (row2_ok ? j2 : 0) * S.wstride) + q;
    const __nv_bfloat16 *x = (const __nv_bfloat16 *)g.x;
    const bool xr0 = gi < g.n, xr1 = gi + 8 < g.n;
    const uint4 *x0 = reinterpret_cast<const uint4 *>(x + (xr0 ? gi : 0) * g.xstride) + q;
    const uint4 *x1 = reinterpret_cast<const uint4 *>(x + (xr1 ? gi + 8 : 0) * g.xstride) + q;
    /* 32-column steps in batches of U; this warp takes a contiguous range of batches, so that a batch reads U * 64
     * contiguous bytes of each of its 16 rows */
    const int64_t steps = g.k / 32, batches = (steps + U - 1) / U;
    const int64_t b_end = batches * (sub + 1) / g.wpr;

    float acc[NT][4];
#pragma unroll
    for (int n = 0; n < NT; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;

    uint4 wa[U][2], wb[U][2];
    const uint4 zero = make_uint4(0, 0, 0, 0);
    auto fetch = [&](uint4 (&wv)[U][2], int64_t bi) {
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int64_t s = bi * U + u;
            const bool in = bi < b_end && s < steps;
            wv[u][0] = in && row_ok ? ld_stream(w0 + s * 4) : zero;
            wv[u][1] = in && row2_ok ? ld_stream(w1 + s * 4) : zero;
        }
    };
    auto use = [&](const uint4 (&wv)[U][2], int64_t bi) {
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int64_t s = bi * U + u;
            if (s >= steps) break;   /* uniform over the warp */
            const uint32_t a0[4] = {wv[u][0].x, wv[u][1].x, wv[u][0].y, wv[u][1].y};
            const uint32_t a1[4] = {wv[u][0].z, wv[u][1].z, wv[u][0].w, wv[u][1].w};
            const uint4 b = xr0 ? x0[s * 4] : zero;
            mma_bf16(acc[0], a0, b.x, b.y);
            mma_bf16(acc[0], a1, b.z, b.w);
            if (NT > 1) {
                const uint4 b1 = xr1 ? x1[s * 4] : zero;
                mma_bf16(acc[NT - 1], a0, b1.x, b1.y);
                mma_bf16(acc[NT - 1], a1, b1.z, b1.w);
            }
        }
    };
    int64_t bi = batches * sub / g.wpr;
    fetch(wa, bi);
    fetch(wb, bi + 1);
    pdl_wait();
    pdl_launch_next();
    while (bi < b_end) {
        use(wa, bi);
        if (++bi >= b_end) break;
        fetch(wa, bi + 1);
        use(wb, bi);
        if (++bi >= b_end) break;
        fetch(wb, bi + 1);
    }
    if (g.wpr > 1) {
        __shared__ float red[8][NT * 4][32];
#pragma unroll
        for (int n = 0; n < NT; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) red[warp][n * 4 + e][lane] = acc[n][e];
        __syncthreads();
        if (sub != 0) return;
#pragma unroll
        for (int n = 0; n < NT; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                float v = 0.0f;
                for (int i = 0; i < g.wpr; i++) v += red[warp + i][n * 4 + e][lane];
                acc[n][e] = v;
            }
    }
    if (sub != 0 || !row_ok) return;
#pragma unroll
    for (int n = 0; n < NT; n++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const int r = n * 8 + 2 * q + e;
            if (r < g.n) finish_row(g, S, glu, j, j2, row2_ok, r, acc[n][e], acc[n][2 + e]);
        }
}

}   // namespace

/* blocks: tiles of 8 units / (block_warps / wpr), as the caller counted them */
cudaError_t gemv_tc_launch(cudaStream_t st, const GemvArgs &g, int64_t blocks) {
    const dim3 grid((unsigned)blocks), block((unsigned)g.block_warps * 32);
    if (cfk_cfg.gemv_tc_unroll == 2) {
        if (g.n <= 8) return launch(gemv_tc_kernel<1, 2>, grid, block, 0, st, g);
        return launch(gemv_tc_kernel<2, 2>, grid, block, 0, st, g);
    }
    if (g.n <= 8) return launch(gemv_tc_kernel<1, 4>, grid, block, 0, st, g);
    return launch(gemv_tc_kernel<2, 4>, grid, block, 0, st, g);
}
