/* k_gemv.cu: out[n, d] = x[n, k] . w[d, k]^T (+ bias) for few activation rows (decode), where the
 * product is bound by streaming the weights. Each weight row is read once with 16-byte loads that skip
 * L1 (U of them in flight per lane, the first batch issued before waiting for the previous kernel), and
 * used for all n activation rows (read through L1). One warp, or wpr warps splitting k when the rows
 * are too few to fill the GPU, per weight row; f32 accumulation. Unaligned shapes and f32 weights take a
 * plain scalar kernel. */
#include "backend/cuda/k_common.cuh"

struct GemvArgs {
    const void *x;
    int64_t xstride;
    const void *w;
    int64_t wstride;
    TV out, bias;
    int n, wpr;
    int64_t k, d;
};

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

template <int NX, int U, typename WT, typename XT>
__global__ void __launch_bounds__(256) gemv_kernel(GemvArgs g) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t j = (int64_t)blockIdx.x * (8 / g.wpr) + warp / g.wpr;
    const int sub = warp % g.wpr;
    const int64_t nch = j < g.d ? g.k / 8 : 0, step = (int64_t)g.wpr * 32;
    const uint4 *wr = reinterpret_cast<const uint4 *>((const WT *)g.w + (j < g.d ? j : 0) * g.wstride);
    const XT *x = (const XT *)g.x;
    float acc[NX];
#pragma unroll
    for (int r = 0; r < NX; r++) acc[r] = 0.0f;

    int64_t base = sub * 32 + lane;
    uint4 wv[U];
#pragma unroll
    for (int u = 0; u < U; u++) wv[u] = base + u * step < nch ? ld_stream(wr + base + u * step) : make_uint4(0, 0, 0, 0);
    pdl_wait();
    pdl_launch_next();
    for (; base < nch; base += U * step) {
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int64_t c = base + u * step;
            if (c < nch) {
                float wf[8];
                unpack(wv[u], wf, WT());
#pragma unroll
                for (int r = 0; r < NX; r++) {
                    if (r < g.n) {
                        float xf[8];
                        load8(x + r * g.xstride + c * 8, xf);
#pragma unroll
                        for (int e = 0; e < 8; e++) acc[r] = fmaf(xf[e], wf[e], acc[r]);
                    }
                }
            }
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int64_t c = base + (U + u) * step;
            if (c < nch) wv[u] = ld_stream(wr + c);
        }
    }
#pragma unroll
    for (int r = 0; r < NX; r++) acc[r] = warp_sum(acc[r]);
    if (g.wpr > 1) {
        __shared__ float red[8][NX];
        if (lane == 0)
#pragma unroll
            for (int r = 0; r < NX; r++) red[warp][r] = acc[r];
        __syncthreads();
        if (sub == 0 && lane == 0)
#pragma unroll
            for (int r = 0; r < NX; r++) {
                float s = 0.0f;
                for (int i = 0; i < g.wpr; i++) s += red[warp + i][r];
                acc[r] = s;
            }
    }
    if (sub == 0 && lane == 0 && j < g.d) {
        const float b = g.bias.p ? ld(g.bias, 0, j) : 0.0f;
#pragma unroll
        for (int r = 0; r < NX; r++)
            if (r < g.n) st(g.out, r, j, acc[r] + b);
    }
}

/* Any dtypes and alignment: one warp per weight row, scalar loads. */
__global__ void __launch_bounds__(256) gemv_generic_kernel(TV x, TV w, TV out, TV bias, int n, int64_t k, int64_t d) {
    pdl_wait();
    pdl_launch_next();
    const int64_t j = (int64_t)blockIdx.x * 8 + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (j >= d) return;
    for (int r = 0; r < n; r++) {
        float s = 0.0f;
        for (int64_t c = lane; c < k; c += 32) s = fmaf(ld(x, r, c), ld(w, j, c), s);
        s = warp_sum(s);
        if (lane == 0) st(out, r, j, s + (bias.p ? ld(bias, 0, j) : 0.0f));
    }
}

template <int NX, int U, typename WT, typename XT>
static cudaError_t go(cudaStream_t st, const GemvArgs &g) {
    return launch(gemv_kernel<NX, U, WT, XT>, dim3((unsigned)ceil_div(g.d, 8 / g.wpr)), dim3(256), 0, st, g);
}

template <int NX, typename WT, typename XT>
static cudaError_t pick_unroll(cudaStream_t st, const GemvArgs &g) {
    switch (cfk_cfg.gemv_unroll) {
    case 2: return go<NX, 2, WT, XT>(st, g);
    case 8: return go<NX, 8, WT, XT>(st, g);
    default: return go<NX, 4, WT, XT>(st, g);
    }
}

template <typename WT, typename XT>
static cudaError_t pick_rows(cudaStream_t st, const GemvArgs &g) {
    if (g.n == 1) return pick_unroll<1, WT, XT>(st, g);
    if (g.n == 2) return pick_unroll<2, WT, XT>(st, g);
    if (g.n <= 4) return pick_unroll<4, WT, XT>(st, g);
    return pick_unroll<8, WT, XT>(st, g);
}

static bool aligned16(const void *p, int64_t stride_bytes) { return ((uintptr_t)p % 16) == 0 && stride_bytes % 16 == 0; }

extern "C" cudaError_t cfk_gemv(cudaStream_t st, cf_tensor out, cf_tensor x, cf_tensor w, cf_tensor bias) {
    const int64_t k = x.cols, d = w.rows;
    const bool vec = (w.dtype == CF_BF16 || w.dtype == CF_F16) && (x.dtype == CF_F32 || x.dtype == CF_BF16) && k % 8 == 0 &&
                     aligned16(w.data, w.stride * 2) && aligned16(x.data, x.stride * (int64_t)(x.dtype == CF_F32 ? 4 : 2));
    int wpr = 1;
    while (wpr < 8 && d * wpr * 2 <= (int64_t)cfk_cfg.n_sm * 32 && k / 8 >= (int64_t)wpr * 64) wpr *= 2;
    for (int64_t r0 = 0; r0 < x.rows; r0 += 8) {
        const int n = (int)(x.rows - r0 < 8 ? x.rows - r0 : 8);
        cf_tensor xs = cf_rows(x, r0, n), os = cf_rows(out, r0, n);
        cudaError_t e;
        if (!vec) {
            e = launch(gemv_generic_kernel, dim3((unsigned)ceil_div(d, 8)), dim3(256), 0, st, tv(xs), tv(w), tv(os), tv(bias), n, k, d);
        } else {
            GemvArgs g = {xs.data, xs.stride, w.data, w.stride, tv(os), tv(bias), n, wpr, k, d};
            if (w.dtype == CF_BF16)
                e = x.dtype == CF_F32 ? pick_rows<__nv_bfloat16, float>(st, g) : pick_rows<__nv_bfloat16, __nv_bfloat16>(st, g);
            else
                e = x.dtype == CF_F32 ? pick_rows<__half, float>(st, g) : pick_rows<__half, __nv_bfloat16>(st, g);
        }
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}
