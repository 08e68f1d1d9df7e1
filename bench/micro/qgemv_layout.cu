/* qgemv_layout.cu: does the 4-bit decode GEMV's speed depend on how the packed rows lie in memory? The tensor-core
 * GEMV of k_quant.cu (16 weight rows a block, stages of 512 values through cp.async) on a 28,672 x 4,096 4-bit
 * matrix (Llama-3-8B's gate and up), group 64, bf16 (scale, bias) words, one activation row, with the packed words
 * and the (scale, bias) words either row-major (as uploaded today) or tiled (a block's stage contiguous: 16 rows x
 * 256 bytes, then the next stage), beside a plain read of the same bytes. Standalone: nvcc -O3 -arch=sm_90a
 * (-DSTAGES_N=, -DMINB= for the variants of bench/results/quant-gpu.md).
 * Prints GB/s of each (median of 20 runs). Checks the two layouts give the same sums. */
#include <cuda_bf16.h>
#include <cstdio>
#include <cstdint>
#include <vector>
#include <algorithm>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e_)); return 1; } } while (0)

#ifndef STAGES_N
#define STAGES_N 3
#endif
#ifndef SBLD_N
#define SBLD_N 20
#endif
constexpr int KS = 512, STAGES = STAGES_N, WW = KS / 8, WLD = WW + 4, G = 64, SBW = KS / G, SBLD = SBLD_N;

__device__ __forceinline__ uint32_t saddr(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void commit() { asm volatile("cp.async.commit_group;"); }
template <int N> __device__ __forceinline__ void waitg() { asm volatile("cp.async.wait_group %0;" ::"n"(N)); }
__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3]) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void xpairs(uint4 x, uint32_t (&p)[4]) {
    p[0] = __byte_perm(x.x, x.z, 0x5410); p[1] = __byte_perm(x.x, x.z, 0x7632);
    p[2] = __byte_perm(x.y, x.w, 0x5410); p[3] = __byte_perm(x.y, x.w, 0x7632);
}

__device__ __forceinline__ uint32_t lop_or(uint32_t a, uint32_t m, uint32_t c) {   /* (a & m) | c */
    uint32_t d;
    asm("lop3.b32 %0, %1, %2, %3, 0xea;" : "=r"(d) : "r"(a), "r"(m), "r"(c));
    return d;
}
/* The kernel of k_quant.cu's qgemv_tc_kernel, reduced to one product and one activation row: one lop3 a nibble pair
 * (the mask and the 128 in registers), the copies' addresses advanced a stage at a time. TILED: q word w of row r at
 * ((r / 16 * nst + w / WW) * 16 + r % 16) * WW + w % WW; the (scale, bias) words likewise with SBW. */
#ifndef MINB
#define MINB 8
#endif
template <bool TILED>
__global__ void __launch_bounds__(128, MINB) tc(const uint32_t *q, const uint32_t *sb, const __nv_bfloat16 *x, float *out, int k) {
    __shared__ __align__(16) uint32_t sw[STAGES][16][WLD];
    __shared__ __align__(16) uint32_t ssb[STAGES][16][SBLD];
    __shared__ float red[4][4][32];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, gi = lane >> 2, t = lane & 3;
    const int nst = k / KS, wpr = k / 8, gpr = k / G;
    const int64_t unit = blockIdx.x;
    const int cr = tid >> 4, cc = tid & 15;
    const uint32_t *qa = TILED ? q + (unit * nst * 16 + cr) * WW + cc * 4 : q + (unit * 16 + cr) * wpr + cc * 4;
    const uint32_t *qb = qa + (TILED ? 8 * WW : 8 * (int64_t)wpr);
    const int64_t qstep = TILED ? 16 * WW : WW, sstep = TILED ? 16 * SBW : SBW;
    const bool son = tid < 32;
    const uint32_t *sp = TILED ? sb + (unit * nst * 16 + (tid >> 1)) * SBW + (tid & 1) * 4 : sb + (unit * 16 + (tid >> 1)) * gpr + (tid & 1) * 4;
    uint32_t wdst = saddr(&sw[0][cr][cc * 4]), sdst = saddr(&ssb[0][(tid >> 1) & 15][(tid & 1) * 4]);
    constexpr uint32_t WSTEP = 16 * WLD * 4, SSTEP = 16 * SBLD * 4;
    int ib = 0;   /* buffer the next issue writes */
    auto issue = [&]() {
        const uint32_t wo = wdst + ib * WSTEP, so = sdst + ib * SSTEP;
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(wo), "l"(qa));
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(wo + 8 * WLD * 4), "l"(qb));
        if (son) asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(so), "l"(sp));
        qa += qstep; qb += qstep; sp += sstep;
        ib = ib == STAGES - 1 ? 0 : ib + 1;
    };
    const uint32_t ones[4] = {0x3F803F80u, 0x3F803F80u, 0x3F803F80u, 0x3F803F80u};
    const uint32_t M = 0x000F000Fu, C = 0x43004300u;
    float acc[4] = {0, 0, 0, 0};
    for (int s = 0; s < STAGES - 1; s++) { if (s < nst) issue(); commit(); }
    const __nv_bfloat16 *xr = x + warp * 128 + 8 * t;
    const bool xon = gi == 0;
    int ub = 0;
    for (int s = 0; s < nst; s++) {
        waitg<STAGES - 2>();
        __syncthreads();
        if (s + STAGES - 1 < nst) issue();
        commit();
        uint4 xv[4];
#pragma unroll
        for (int j = 0; j < 4; j++) xv[j] = xon ? *reinterpret_cast<const uint4 *>(xr + j * 32) : make_uint4(0, 0, 0, 0);
        xr += KS;
        const uint32_t *wr = &sw[ub][gi][warp * 16 + t];
        const uint32_t *sr = &ssb[ub][gi][warp * 2];
        float c[4] = {0, 0, 0, 0}, xs[4] = {0, 0, 0, 0};
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const uint32_t wa = wr[j * 4], wb = wr[8 * WLD + j * 4];
            uint32_t pa[4], pb[4], xp[4];
            pa[0] = lop_or(wa, M, C); pa[1] = lop_or(wa >> 4, M, C); pa[2] = lop_or(wa >> 8, M, C); pa[3] = lop_or(wa >> 12, M, C);
            pb[0] = lop_or(wb, M, C); pb[1] = lop_or(wb >> 4, M, C); pb[2] = lop_or(wb >> 8, M, C); pb[3] = lop_or(wb >> 12, M, C);
            xpairs(xv[j], xp);
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const uint32_t a[4] = {pa[2 * h], pb[2 * h], pa[2 * h + 1], pb[2 * h + 1]};
                mma(c, a, xp[2 * h], xp[2 * h + 1]);
                mma(xs, ones, xp[2 * h], xp[2 * h + 1]);
            }
            if (j & 1) {
                const uint32_t ua = sr[j >> 1], ub2 = sr[8 * SBLD + (j >> 1)];
                const float sa = __uint_as_float(ua << 16), ba = __uint_as_float(ua & 0xffff0000u);
                const float sbb = __uint_as_float(ub2 << 16), bb = __uint_as_float(ub2 & 0xffff0000u);
                acc[0] += sa * c[0] + (ba - 128.f * sa) * xs[0]; acc[1] += sa * c[1] + (ba - 128.f * sa) * xs[1];
                acc[2] += sbb * c[2] + (bb - 128.f * sbb) * xs[2]; acc[3] += sbb * c[3] + (bb - 128.f * sbb) * xs[3];
                for (int e = 0; e < 4; e++) c[e] = xs[e] = 0.f;
            }
        }
        ub = ub == STAGES - 1 ? 0 : ub + 1;
    }
    waitg<0>();
    for (int e = 0; e < 4; e++) red[warp][e][lane] = acc[e];
    __syncthreads();
    if (warp || t) return;
    float v0 = 0, v2 = 0;
    for (int w = 0; w < 4; w++) { v0 += red[w][0][lane]; v2 += red[w][2][lane]; }
    out[unit * 16 + gi] = v0;
    out[unit * 16 + gi + 8] = v2;
}

__global__ void readall(const uint4 *p, int64_t n, uint32_t *sink) {
    uint32_t a = 0;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        uint4 v = __ldcs(p + i);
        a ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (a == 0x12345678u) *sink = a;
}

int main() {
    const int R = 28672, k = 4096, nst = k / KS, wpr = k / 8, gpr = k / G;
    const size_t qw = (size_t)R * wpr, sw = (size_t)R * gpr;
    std::vector<uint32_t> q(qw), s(sw), qt(qw), st(sw);
    uint32_t h = 1;
    for (auto &v : q) { h = h * 1664525u + 1013904223u; v = h; }
    for (size_t i = 0; i < sw; i++) { h = h * 1664525u + 1013904223u; s[i] = 0x3c003c00u ^ (h & 0x007f007fu); }   /* small bf16 pairs */
    for (int r = 0; r < R; r++)
        for (int w = 0; w < wpr; w++) qt[(((size_t)(r / 16) * nst + w / WW) * 16 + r % 16) * WW + w % WW] = q[(size_t)r * wpr + w];
    for (int r = 0; r < R; r++)
        for (int g = 0; g < gpr; g++) st[(((size_t)(r / 16) * nst + g / SBW) * 16 + r % 16) * SBW + g % SBW] = s[(size_t)r * gpr + g];
    std::vector<__nv_bfloat16> x(k);
    for (int i = 0; i < k; i++) x[i] = __float2bfloat16((float)((i * 37) % 17) / 17.0f - 0.5f);
    uint32_t *dq, *ds, *dqt, *dst, *sink;
    __nv_bfloat16 *dx;
    float *o1, *o2;
    CK(cudaMalloc(&dq, qw * 4)); CK(cudaMalloc(&ds, sw * 4)); CK(cudaMalloc(&dqt, qw * 4)); CK(cudaMalloc(&dst, sw * 4));
    CK(cudaMalloc(&dx, k * 2)); CK(cudaMalloc(&o1, R * 4)); CK(cudaMalloc(&o2, R * 4)); CK(cudaMalloc(&sink, 4));
    CK(cudaMemcpy(dq, q.data(), qw * 4, cudaMemcpyHostToDevice)); CK(cudaMemcpy(ds, s.data(), sw * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dqt, qt.data(), qw * 4, cudaMemcpyHostToDevice)); CK(cudaMemcpy(dst, st.data(), sw * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dx, x.data(), k * 2, cudaMemcpyHostToDevice));
    /* a flush buffer larger than L2 between runs */
    uint32_t *flush; CK(cudaMalloc(&flush, 256 << 20));
    cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
    const double bytes = (double)(qw + sw) * 4;
    auto timeit = [&](const char *name, auto fn) {
        std::vector<float> ms;
        for (int i = 0; i < 21; i++) {
            cudaMemsetAsync(flush, i, 256 << 20);
            cudaEventRecord(e0); fn(); cudaEventRecord(e1); cudaEventSynchronize(e1);
            float m; cudaEventElapsedTime(&m, e0, e1); if (i) ms.push_back(m);
        }
        std::sort(ms.begin(), ms.end());
        printf("%-28s %8.1f us  %7.1f GB/s\n", name, ms[ms.size() / 2] * 1e3, bytes / (ms[ms.size() / 2] * 1e-3) / 1e9);
    };
    timeit("read only (same bytes)", [&] { readall<<<132 * 16, 256>>>((const uint4 *)dq, (int64_t)(qw + sw) / 4, sink); });
    timeit("tc row-major", [&] { tc<false><<<R / 16, 128>>>(dq, ds, dx, o1, k); });
    timeit("tc tiled", [&] { tc<true><<<R / 16, 128>>>(dqt, dst, dx, o2, k); });
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    std::vector<float> a(R), b(R);
    CK(cudaMemcpy(a.data(), o1, R * 4, cudaMemcpyDeviceToHost)); CK(cudaMemcpy(b.data(), o2, R * 4, cudaMemcpyDeviceToHost));
    int diff = 0;
    for (int i = 0; i < R; i++) diff += a[i] != b[i];
    printf("layouts agree: %s (%d of %d differ), out[0] %g\n", diff ? "NO" : "yes", diff, R, a[0]);
    return 0;
}
