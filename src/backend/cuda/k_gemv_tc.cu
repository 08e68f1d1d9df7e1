/* k_gemv_tc.cu: the tensor-core GEMV: out[n, d] = x[n, k] . w[d, k]^T for 2 to 16 activation rows (a batch of
 * decodes, a speculative verification), bf16 weights and x, where the product is still bound by streaming the
 * weights but the vector kernel's FMAs grow with the rows. Same job and fusions as k_gemv.cuh (q, k, v; gate and
 * up with the GLU; the gate; RoPE and KV stores), so a step of few rows needs none of cuBLAS's split-k reductions
 * or the separate RoPE, store and GLU launches.
 *
 * A block of W warps takes a unit of 16 weight rows as the A operand of mma.m16n8k16 (MMA rows 0-7 and 8-15: rows
 * 16u + i and 16u + 8 + i; the GLU's gate row 8u + i and up row 8u + i; RoPE's rows i and i + half of a head), x's
 * rows as B (n-tiles of 8 rows), f32 sums. k goes in steps of 64 values dealt to the warps in turn. In a step,
 * thread (g, t) of a warp loads 16-byte chunks 2t and 2t + 1 of the step from both of its rows (MMA rows g and
 * g + 8; a quad reads a row's 128 bytes) and the same chunks of x row g, RING steps ahead; as the sum over k does
 * not care which k-slot of the MMA a value takes, a chunk's value pairs (0, 1), (2, 3) are the slots (2t, 2t + 1),
 * (2t + 8, 2t + 9) of one MMA and (4, 5), (6, 7) those of the next, for A and B alike: the weights go to the MMA as
 * loaded, with no conversion or shuffle. The warps' sums meet in shared memory in warp order, and warp 0's threads
 * finish their (row pair, activation row) sums. */
#include "backend/cuda/k_gemv.cuh"

/* NT n-tiles of x rows; RING k-steps in flight a warp (2 KB of weights each, with their x); W warps a block */
template <int NT, int RING, int W>
__global__ void __launch_bounds__(W * 32) gemv_tc_kernel(GemvArgs g) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gi = lane >> 2, t = lane & 3;
    const bool glu = g.glu.p != nullptr;
    const int si = block_seg(g, glu);
    const Seg S = si == 0 ? g.s0 : si == 1 ? g.s1 : g.s2;
    const Seg &B = glu ? g.s1 : S;   /* the product of MMA rows 8-15 */
    const int64_t unit = (int64_t)blockIdx.x - S.block0;
    int64_t jA, jB;
    bool okA, okB;
    if (glu) {
        jA = jB = unit * 8 + gi;
        okA = jA < S.d;
        okB = okA && jB < B.d;
    } else if (S.rope) {
        const int64_t p = unit * 8 + gi;   /* the pair (i, i + half) of a head */
        jA = p / g.half * 2 * g.half + p % g.half;
        jB = jA + g.half;
        okA = okB = p < S.d / 2;
    } else {
        jA = unit * 16 + gi;
        jB = jA + 8;
        okA = jA < S.d;
        okB = jB < S.d;
    }
    const uint4 *wa = reinterpret_cast<const uint4 *>((const __nv_bfloat16 *)S.w + (okA ? jA : 0) * S.wstride) + 2 * t;
    const uint4 *wb = reinterpret_cast<const uint4 *>((const __nv_bfloat16 *)B.w + (okB ? jB : 0) * B.wstride) + 2 * t;
    const int64_t steps = g.k / GEMV_TC_KSTEP;
    const int mine = steps > warp ? (int)((steps - warp + W - 1) / W) : 0;   /* this warp's steps */

    /* a step's weights (chunks 2t and 2t + 1 of both rows) and x (the same chunks of x row g of each n-tile) */
    uint4 ra[RING][2], rb[RING][2], rx[RING][NT][2];
    const uint4 zero = make_uint4(0, 0, 0, 0);
    auto fetch_w = [&](int r, int64_t s) {
        ra[r][0] = okA ? ld_stream(wa + s * 8) : zero;
        ra[r][1] = okA ? ld_stream(wa + s * 8 + 1) : zero;
        rb[r][0] = okB ? ld_stream(wb + s * 8) : zero;
        rb[r][1] = okB ? ld_stream(wb + s * 8 + 1) : zero;
    };
    const uint4 *xr[NT];
    bool xon[NT];
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
        xon[nt] = nt * 8 + gi < g.n;
        xr[nt] = reinterpret_cast<const uint4 *>((const __nv_bfloat16 *)g.x + (xon[nt] ? nt * 8 + gi : 0) * g.xstride) + 2 * t;
    }
    auto fetch_x = [&](int r, int64_t s) {
#pragma unroll
        for (int nt = 0; nt < NT; nt++) {
            rx[r][nt][0] = xon[nt] ? __ldg(xr[nt] + s * 8) : zero;
            rx[r][nt][1] = xon[nt] ? __ldg(xr[nt] + s * 8 + 1) : zero;
        }
    };
    float c[NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; nt++) c[nt][0] = c[nt][1] = c[nt][2] = c[nt][3] = 0.0f;
    auto use = [&](int r) {
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const uint4 A = ra[r][h], Bw = rb[r][h];
            const uint32_t a0[4] = {A.x, Bw.x, A.y, Bw.y}, a1[4] = {A.z, Bw.z, A.w, Bw.w};
#pragma unroll
            for (int nt = 0; nt < NT; nt++) {
                mma_bf16(c[nt], a0, rx[r][nt][h].x, rx[r][nt][h].y);
                mma_bf16(c[nt], a1, rx[r][nt][h].z, rx[r][nt][h].w);
            }
        }
    };

    /* the first steps' weights before waiting for the kernel ahead (weights are never written by it); x after */
#pragma unroll
    for (int r = 0; r < RING; r++)
        if (r < mine) fetch_w(r, warp + (int64_t)W * r);
    pdl_wait();
    pdl_launch_next();
#pragma unroll
    for (int r = 0; r < RING; r++)
        if (r < mine) fetch_x(r, warp + (int64_t)W * r);
    for (int base = 0; base < mine; base += RING) {
#pragma unroll
        for (int r = 0; r < RING; r++) {
            const int idx = base + r;
            if (idx >= mine) break;
            use(r);
            if (idx + RING < mine) {
                const int64_t s = warp + (int64_t)W * (idx + RING);
                fetch_w(r, s);
                fetch_x(r, s);
            }
        }
    }

    /* c[nt]: (MMA row g, activation rows nt * 8 + 2t, + 1), then (MMA row g + 8, the same two) */
    __shared__ float red[W][NT * 4][32];
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++) red[warp][nt * 4 + e][lane] = c[nt][e];
    __syncthreads();
    if (warp != 0 || !okA) return;
    const float b0 = S.bias.p ? ld(S.bias, 0, jA) : 0.0f;
    const TV bias1 = glu ? g.s1.bias : S.bias;
    const float b1 = bias1.p && okB ? ld(bias1, 0, jB) : 0.0f;
    const float f = S.rope ? g.inv_freq[jA % (2 * g.half)] : 0.0f;
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const int r = nt * 8 + 2 * t + e;
            if (r >= g.n) continue;
            float v0 = 0.0f, v1 = 0.0f;
            for (int w = 0; w < W; w++) {
                v0 += red[w][nt * 4 + e][lane];
                v1 += red[w][nt * 4 + 2 + e][lane];
            }
            finish_row(g, S, glu, jA, jB, okB, r, v0 + b0, v1 + b1, f);
        }
}

template <int W>
static cudaError_t gt_launch(cudaStream_t st, const GemvArgs &g, int64_t blocks) {
    const dim3 grid((unsigned)blocks), block(W * 32);
    if (g.n <= 8) return launch(gemv_tc_kernel<1, 3, W>, grid, block, 0, st, g);
    return launch(gemv_tc_kernel<2, 2, W>, grid, block, 0, st, g);
}

/* 4 warps a block (about 4 blocks an SM) when the units fill the GPU 4 times over (gate and up, the output layer),
 * else 8 splitting each unit's k. At 9 rows on an H100 (cuda_bench --gemv): 4096x4096 70% of the copy rate with 8
 * against 66% with 4, 1024x4096 41% against 31%, 14336x4096 74% against 84%, the output layer 90% against 93% */
cudaError_t gemv_tc_launch(cudaStream_t st, const GemvArgs &g, int64_t blocks) {
    if (blocks >= (int64_t)cfk_cfg.n_sm * 4) return gt_launch<4>(st, g, blocks);
    return gt_launch<8>(st, g, blocks);
}
