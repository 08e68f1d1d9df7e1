/* inflight.cu: how many bytes a GPU needs in flight per SM to read HBM at full speed (Little's law), the question
 * behind the 4-bit decode GEMV's gap (bench/results/README.md, stop 43). A persistent grid of W warps an SM streams
 * a 2 GiB buffer, each lane keeping R 16-byte loads in flight (a ring of registers, refilled R steps ahead as the
 * GEMV kernels do), so W x 32 x 16 x R bytes are in flight per SM; prints GB/s (median of 7) for each (W, R), and a
 * device-to-device copy for scale. Standalone: nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a inflight.cu */
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e_)); return 1; } } while (0)

__device__ __forceinline__ uint4 ld_stream(const uint4 *p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}

template <int R>
__global__ void __launch_bounds__(128) stream(const uint4 *buf, int64_t n16, unsigned *sink) {
    const int64_t nwarp = (int64_t)gridDim.x * 4, w = (int64_t)blockIdx.x * 4 + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    const int64_t per = n16 / nwarp / (32 * R) * (32 * R);   /* each warp's slice, whole steps of 32 R chunks */
    const uint4 *p = buf + w * per + lane;
    const int64_t steps = per / 32;
    uint4 ring[R];
#pragma unroll
    for (int i = 0; i < R; i++) ring[i] = ld_stream(p + 32 * i);
    unsigned acc = 0;
    for (int64_t s = 0; s < steps; s += R) {
#pragma unroll
        for (int i = 0; i < R; i++) {
            acc ^= ring[i].x ^ ring[i].y ^ ring[i].z ^ ring[i].w;
            if (s + R + i < steps) ring[i] = ld_stream(p + 32 * (s + R + i));
        }
    }
    if (acc == 0x12345678u) *sink = acc;
}

/* milliseconds of launch(), the median of `reps` timings after one warm-up */
template <typename F>
static float median_ms(F launch, int reps) {
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    std::vector<float> t;
    for (int r = 0; r <= reps; r++) {
        cudaEventRecord(a);
        launch();
        cudaEventRecord(b);
        cudaEventSynchronize(b);
        float ms;
        cudaEventElapsedTime(&ms, a, b);
        if (r) t.push_back(ms);
    }
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

template <int R>
static float run(const uint4 *buf, int64_t n16, unsigned *sink, int blocks) {
    const float ms = median_ms([&] { stream<R><<<blocks, 128>>>(buf, n16, sink); }, 7);
    const int64_t nwarp = (int64_t)blocks * 4, per = n16 / nwarp / (32 * R) * (32 * R);
    return (float)(per * nwarp * 16) / (ms * 1e-3f) / 1e9f;
}

int main() {
    int sms;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    cudaDeviceProp pr;
    CK(cudaGetDeviceProperties(&pr, 0));
    const size_t bytes = (size_t)2 << 30;
    uint4 *buf, *dst;
    unsigned *sink;
    CK(cudaMalloc(&buf, bytes));
    CK(cudaMalloc(&dst, bytes));
    CK(cudaMalloc(&sink, 4));
    CK(cudaMemset(buf, 1, bytes));
    const float copy_ms = median_ms([&] { cudaMemcpy(dst, buf, bytes, cudaMemcpyDeviceToDevice); }, 5);
    printf("%s, %d SMs; copy (read + write) %.0f GB/s\n", pr.name, sms, 2.0 * bytes / (copy_ms * 1e-3) / 1e9);
    const int64_t n16 = bytes / 16;
    printf("read GB/s by warps an SM (rows) and 16-byte loads in flight a lane (columns); KB in flight an SM in brackets\n");
    printf("| W | R=1 | R=2 | R=4 | R=8 | R=16 |\n|---:|---:|---:|---:|---:|---:|\n");
    for (int W : {4, 8, 12, 16, 24, 32}) {
        const int blocks = sms * W / 4;
        printf("| %d | %.0f (%d) | %.0f (%d) | %.0f (%d) | %.0f (%d) | %.0f (%d) |\n", W, run<1>(buf, n16, sink, blocks), W / 2,
               run<2>(buf, n16, sink, blocks), W, run<4>(buf, n16, sink, blocks), W * 2, run<8>(buf, n16, sink, blocks), W * 4,
               run<16>(buf, n16, sink, blocks), W * 8);
    }
    CK(cudaGetLastError());
    return 0;
}
