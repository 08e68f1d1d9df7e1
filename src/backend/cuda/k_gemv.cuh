/* k_gemv.cuh: out[n, d] = x[n, k] . w[d, k]^T (+ bias) for few activation rows (decode), where the
 * product is bound by streaming the weights. Each warp takes a unit of two weight rows, reads both once
 * with 16-byte loads that skip L1 (chunk c of both rows side by side, U chunks a row per batch, two batches
 * in flight per lane, the first two issued before waiting for the previous kernel), and uses each chunk
 * for all n activation rows, loading each x chunk (through L1) once for the two rows. One warp, or wpr
 * warps splitting k when the units are too few to fill the GPU or long, per unit; f32 accumulation.
 *
 * One launch serves a cfk_gemv_job: up to 3 products sharing x (q, k, v) as consecutive block ranges,
 * two products paired row by row (gate, up) finished by the GLU, or one product times act() of a gate
 * (Gemma's per-layer inputs). Unaligned shapes and f32 weights take a plain scalar
 * kernel, one product per launch.
 *
 * A unit's rows: gate and up row j for the GLU; for products that are rotated (RoPE over whole heads)
 * and stored in a KV cache, rows i and i + half of a head, which the warp turns together at the end (q, k,
 * v: the layer's RoPE and both KV stores need no launch of their own); else two neighbours.
 *
 * The weight prefetch before griddepcontrol.wait assumes weights are not written by the kernel that runs
 * right before (true of weights: uploaded once; the backend synchronizes after a kernel writes one). */
#ifndef CF_BACKEND_CUDA_K_GEMV_CUH
#define CF_BACKEND_CUDA_K_GEMV_CUH

#include "backend/cuda/k_common.cuh"

struct Seg {
    const void *w;
    int64_t wstride, d, block0;
    TV out, bias;
    int rope;   /* rotate this product's heads (RoPE) */
    TV cache;   /* .p NULL: none; else also store the (rotated) rows in this KV cache */
};

struct GemvArgs {
    const void *x;
    int64_t xstride, k;
    int n, wpr, block_warps, nseg, act;   /* block_warps: a multiple of wpr, at most 8 */
    Seg s0, s1, s2;
    TV glu, mul;   /* .p NULL: none */
    /* RoPE: in each head of size 2 * half, (x[i], x[i + half]) of row r turns by pos[r] * inv_freq[i].
     * KV stores: row r goes to slot store_pos[r] % cap, or (store_pos.p NULL) (pos0 + r) % cap */
    TV pos, store_pos;
    const float *inv_freq;
    int half, pos0, cap;
};

/* the KV-cache slot of activation row r: store_pos[r] % cap, or (store_pos.p NULL) (pos0 + r) % cap; cap 0: no ring */
__device__ __forceinline__ int64_t kv_slot(TV store_pos, int pos0, int cap, int r) {
    const int64_t p = store_pos.p ? (int64_t)((const int32_t *)store_pos.p)[r * store_pos.stride] : (int64_t)pos0 + r;
    return cap ? p % cap : p;
}
__device__ __forceinline__ int64_t store_slot(const GemvArgs &g, int r) { return kv_slot(g.store_pos, g.pos0, g.cap, r); }

/* RoPE of one pair: (a, b) of position pos turned by pos * f */
__device__ __forceinline__ void rope_turn(float &a, float &b, const TV &pos, int r, float f) {
    float sn, cs;
    sincosf((float)((const int32_t *)pos.p)[r * pos.stride] * f, &sn, &cs);
    const float u = a;
    a = u * cs - b * sn;
    b = b * cs + u * sn;
}

__device__ __forceinline__ uint4 ld_stream(const uint4 *p) {
    uint4 v;
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}

__device__ __forceinline__ void unpack(uint4 v, float f[8], __nv_bfloat16) {
    const uint32_t u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        f[2 * i] = __uint_as_float(u[i] << 16);
        f[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
    }
}

__device__ __forceinline__ void unpack(uint4 v, float f[8], __half) {
    const uint32_t u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        __half2 h = *reinterpret_cast<const __half2 *>(&u[i]);
        float2 t = __half22float2(h);
        f[2 * i] = t.x;
        f[2 * i + 1] = t.y;
    }
}

__device__ __forceinline__ void load8(const float *p, float f[8]) {
    float4 a = *reinterpret_cast<const float4 *>(p), b = *reinterpret_cast<const float4 *>(p + 4);
    f[0] = a.x; f[1] = a.y; f[2] = a.z; f[3] = a.w;
    f[4] = b.x; f[5] = b.y; f[6] = b.z; f[7] = b.w;
}

__device__ __forceinline__ void load8(const __nv_bfloat16 *p, float f[8]) {
    unpack(*reinterpret_cast<const uint4 *>(p), f, __nv_bfloat16());
}

__device__ __forceinline__ float act_fn(int act, float g) {
    if (act == CF_ACT_SILU) return g / (1.0f + expf(-g));
    const float k0 = 0.7978845608028654f;
    return 0.5f * g * (1.0f + tanhf(k0 * (g + 0.044715f * g * g * g)));
}

/* the product this block works on: the segment whose block range holds it (the GLU: 0, the gate) */
__device__ __forceinline__ int block_seg(const GemvArgs &g, bool glu) {
    return glu ? 0 : (g.nseg > 2 && (int64_t)blockIdx.x >= g.s2.block0) ? 2 : (g.nseg > 1 && (int64_t)blockIdx.x >= g.s1.block0) ? 1 : 0;
}

/* The end of a two-row unit for activation row r (rows j, j2 of segment S, sums v0, v1 with their bias; f: the
 * unit's RoPE frequency): the GLU, the gate, or RoPE and the KV cache stores. */
__device__ __forceinline__ void finish_row(const GemvArgs &g, const Seg &S, bool glu, int64_t j, int64_t j2, bool row2_ok, int r,
                                           float v0, float v1, float f) {
    if (glu) {
        if (S.out.p) st(S.out, r, j, v0);
        if (g.s1.out.p) st(g.s1.out, r, j, v1);
        st(g.glu, r, j, act_fn(g.act, v0) * v1);
        return;
    }
    if (g.mul.p) {
        st(S.out, r, j, act_fn(g.act, v0) * ld(g.mul, r, j));
        if (row2_ok) st(S.out, r, j2, act_fn(g.act, v1) * ld(g.mul, r, j2));
        return;
    }
    if (S.rope) rope_turn(v0, v1, g.pos, r, f);   /* (x_j, x_j2) turned by pos * inv_freq */
    st(S.out, r, j, v0);
    if (row2_ok) st(S.out, r, j2, v1);
    if (S.cache.p) {   /* the rounded values, as a store reading out would see them */
        const int64_t slot = store_slot(g, r);
        st(S.cache, slot, j, ld(S.out, r, j));
        if (row2_ok) st(S.cache, slot, j2, ld(S.out, r, j2));
    }
}

/* The end of a two-row unit (rows j, j2 of segment S, sums a0, a1 of activation rows 0..n without bias) */
template <int NX>
__device__ __forceinline__ void finish_pair(const GemvArgs &g, const Seg &S, bool glu, int64_t j, int64_t j2, bool row2_ok,
                                            const float (&a0)[NX], const float (&a1)[NX]) {
    const float b0 = S.bias.p ? ld(S.bias, 0, j) : 0.0f;
    const TV bias1 = glu ? g.s1.bias : S.bias;
    const float b1 = bias1.p && row2_ok ? ld(bias1, 0, j2) : 0.0f;
    const float f = S.rope ? g.inv_freq[j % (2 * g.half)] : 0.0f;
#pragma unroll
    for (int r = 0; r < NX; r++) {
        if (r >= g.n) break;
        finish_row(g, S, glu, j, j2, row2_ok, r, a0[r] + b0, a1[r] + b1, f);
    }
}

template <int NX, int U, typename WT, typename XT>
__global__ void __launch_bounds__(256) gemv_kernel(GemvArgs g) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, rpb = g.block_warps / g.wpr;
    const bool glu = g.glu.p;
    const int si = block_seg(g, glu);
    const Seg S = si == 0 ? g.s0 : si == 1 ? g.s1 : g.s2;
    const int t = warp / g.wpr, sub = warp % g.wpr;
    /* the warp's unit and its rows j, j2 (see the top of the file) */
    const int64_t unit = ((int64_t)blockIdx.x - S.block0) * rpb + t;
    const int64_t j = glu ? unit : S.rope ? unit / g.half * 2 * g.half + unit % g.half : 2 * unit;
    const int64_t j2 = glu ? j : S.rope ? j + g.half : j + 1;
    const bool row_ok = j < S.d, row2_ok = row_ok && j2 < (glu ? g.s1.d : S.d);
    const int64_t total = row_ok ? g.k / 8 : 0, step = (int64_t)g.wpr * 32;
    const uint4 *w0 = reinterpret_cast<const uint4 *>((const WT *)S.w + (row_ok ? j : 0) * S.wstride);
    const uint4 *w1 = glu ? reinterpret_cast<const uint4 *>((const WT *)g.s1.w + (row_ok ? j : 0) * g.s1.wstride)
                          : reinterpret_cast<const uint4 *>((const WT *)S.w + (row2_ok ? j2 : 0) * S.wstride);
    const XT *x = (const XT *)g.x;
    float a0[NX], a1[NX];
#pragma unroll
    for (int r = 0; r < NX; r++) a0[r] = a1[r] = 0.0f;

    /* software-pipelined: batch A is in flight while batch B is used, and the other way round */
    uint4 wa[U][2], wb[U][2];
    auto fetch = [&](uint4 (&wv)[U][2], int64_t base) {
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int64_t c = base + u * step;
            wv[u][0] = c < total ? ld_stream(w0 + c) : make_uint4(0, 0, 0, 0);
            wv[u][1] = c < total && row2_ok ? ld_stream(w1 + c) : make_uint4(0, 0, 0, 0);
        }
    };
    auto use = [&](const uint4 (&wv)[U][2], int64_t base) {
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int64_t c = base + u * step;
            if (c >= total) continue;
            float wf0[8], wf1[8];
            unpack(wv[u][0], wf0, WT());
            unpack(wv[u][1], wf1, WT());
#pragma unroll
            for (int r = 0; r < NX; r++) {
                if (r >= g.n) break;
                float xf[8];
                load8(x + r * g.xstride + c * 8, xf);
                float s0 = 0.0f, s1 = 0.0f;
#pragma unroll
                for (int e = 0; e < 8; e++) {
                    s0 = fmaf(xf[e], wf0[e], s0);
                    s1 = fmaf(xf[e], wf1[e], s1);
                }
                a0[r] += s0;
                a1[r] += s1;
            }
        }
    };
    int64_t base = sub * 32 + lane;
    const int64_t batch = U * step;
    /* weights only, so before waiting for the kernel ahead of this one: the first two batches, which fill
     * the ahead kernel's tail and this one's ramp with memory traffic */
    fetch(wa, base);
    fetch(wb, base + batch);
    pdl_wait();
    pdl_launch_next();
    while (base < total) {
        use(wa, base);
        base += batch;
        if (base >= total) break;
        fetch(wa, base + batch);
        use(wb, base);
        base += batch;
        if (base >= total) break;
        fetch(wb, base + batch);
    }
#pragma unroll
    for (int r = 0; r < NX; r++) {
        a0[r] = warp_sum(a0[r]);
        a1[r] = warp_sum(a1[r]);
    }
    if (g.wpr > 1) {
        __shared__ float red[8][2 * NX];
        if (lane == 0)
#pragma unroll
            for (int r = 0; r < NX; r++) { red[warp][r] = a0[r]; red[warp][NX + r] = a1[r]; }
        __syncthreads();
        if (sub == 0 && lane == 0)
#pragma unroll
            for (int r = 0; r < NX; r++) {
                float s0 = 0.0f, s1 = 0.0f;
                for (int i = 0; i < g.wpr; i++) { s0 += red[warp + i][r]; s1 += red[warp + i][NX + r]; }
                a0[r] = s0;
                a1[r] = s1;
            }
    }
    if (sub != 0 || lane != 0 || !row_ok) return;   /* the lane that finishes the unit */
    finish_pair<NX>(g, S, glu, j, j2, row2_ok, a0, a1);
}

/* Chunks a row per batch (two batches in flight per lane): cfk_cfg.gemv_unroll 1 or 2, or 0 (the default):
 * 2 for rows of 4096 and more, else 1. H200, side by side: Llama-3-8B decode (k 4096 and 14336) 240.9
 * tokens/s with 2, 236.8 with 1; Gemma-4-E4B (k 2560, 2048, 10240) 215.1 with the rule, 214.5 with 1, 209.1
 * with 2. Four rows a warp (one chunk, 76 registers against 64) ran Llama-3-8B at 221.5. */
template <int NX, typename WT, typename XT>
static cudaError_t pick_unroll(cudaStream_t st, const GemvArgs &g, int64_t blocks) {
    const dim3 grid((unsigned)blocks), block((unsigned)g.block_warps * 32);
    if (cfk_cfg.gemv_unroll == 1 || (cfk_cfg.gemv_unroll == 0 && g.k < 4096)) return launch(gemv_kernel<NX, 1, WT, XT>, grid, block, 0, st, g);
    return launch(gemv_kernel<NX, 2, WT, XT>, grid, block, 0, st, g);
}

template <typename WT, typename XT>
static cudaError_t pick_rows(cudaStream_t st, const GemvArgs &g, int64_t blocks) {
    if (g.n == 1) return pick_unroll<1, WT, XT>(st, g, blocks);
    if (g.n == 2) return pick_unroll<2, WT, XT>(st, g, blocks);
    if (g.n <= 4) return pick_unroll<4, WT, XT>(st, g, blocks);
    return pick_unroll<8, WT, XT>(st, g, blocks);
}

/* Launches the kernel for weights of type WT and activations xdt (f32 or bf16); one instantiation set
 * per weight type, each in its own file so they compile in parallel. */
template <typename WT>
static cudaError_t gemv_launch(cudaStream_t st, const GemvArgs &g, int64_t blocks, cf_dtype xdt) {
    return xdt == CF_F32 ? pick_rows<WT, float>(st, g, blocks) : pick_rows<WT, __nv_bfloat16>(st, g, blocks);
}

cudaError_t gemv_launch_bf16(cudaStream_t st, const GemvArgs &g, int64_t blocks, cf_dtype xdt);
cudaError_t gemv_launch_f16(cudaStream_t st, const GemvArgs &g, int64_t blocks, cf_dtype xdt);
/* the tensor-core GEMV (k_gemv_tc.cu): bf16 weights and x, 1 to 16 rows, k a multiple of 64; `blocks` units */
constexpr int GEMV_TC_KSTEP = 64;
cudaError_t gemv_tc_launch(cudaStream_t st, const GemvArgs &g, int64_t blocks);

#endif
