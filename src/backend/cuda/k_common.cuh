/* k_common.cuh: device helpers shared by the kernel files: element loads and stores by run-time dtype,
 * warp reductions, programmatic dependent launch, and the launch wrapper. */
#ifndef CF_BACKEND_CUDA_K_COMMON_CUH
#define CF_BACKEND_CUDA_K_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include "backend/cuda/cuda_internal.h"

/* A row-major view as kernels see it. */
struct TV {
    char *p;
    int dt;
    int64_t stride;
};

__host__ __device__ static inline TV tv(cf_tensor t) { return TV{(char *)t.data, (int)t.dtype, t.stride}; }

__device__ __forceinline__ float ld_elem(const void *p, int dt, int64_t i) {
    switch (dt) {
    case CF_BF16: return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    case CF_F16: return __half2float(((const __half *)p)[i]);
    case CF_I32: return (float)((const int32_t *)p)[i];
    default: return ((const float *)p)[i];
    }
}

__device__ __forceinline__ void st_elem(void *p, int dt, int64_t i, float v) {
    switch (dt) {
    case CF_BF16: ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(v); break;
    case CF_F16: ((__half *)p)[i] = __float2half_rn(v); break;
    case CF_I32: ((int32_t *)p)[i] = (int32_t)v; break;
    default: ((float *)p)[i] = v;
    }
}

__device__ __forceinline__ float ld(TV t, int64_t r, int64_t c) { return ld_elem(t.p, t.dt, r * t.stride + c); }
__device__ __forceinline__ void st(TV t, int64_t r, int64_t c, float v) { st_elem(t.p, t.dt, r * t.stride + c, v); }

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result. */
__device__ __forceinline__ float block_sum(float v) {
    __shared__ float part[32];
    __shared__ float total;
    v = warp_sum(v);
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
    __syncthreads();
    if (lane == 0) part[w] = v;
    __syncthreads();
    if (w == 0) {
        float s = lane < nw ? part[lane] : 0.0f;
        s = warp_sum(s);
        if (lane == 0) total = s;
    }
    __syncthreads();
    return total;
}

/* Programmatic dependent launch (sm_90): a kernel may start while the previous one finishes; it must
 * wait before touching what the previous kernel wrote, and lets the next one launch once it has waited
 * (so at most one kernel runs ahead). Both are no-ops when the launch did not ask for overlap. */
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_launch_next() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

template <typename... KArgs, typename... Args>
static cudaError_t launch(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t st, Args... args) {
    if (grid.x == 0 || grid.y == 0 || grid.z == 0) return cudaSuccess;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = st;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = cfk_cfg.pdl ? 1 : 0;
    return cudaLaunchKernelEx(&cfg, kernel, ((KArgs)args)...);
}

static inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

#endif
