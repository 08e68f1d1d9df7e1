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

/* Shared-memory address, asynchronous 16-byte copies global -> shared (cp.async, completing in commit-group order),
 * ldmatrix (plain and transposed) and the m16n8k16 bf16 MMA with f32 accumulation, for the kernels that stage tiles
 * in shared memory. */
__device__ __forceinline__ uint32_t smem_addr(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void cp_async16(void *dst, const void *src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem_addr(dst)), "l"(src));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N)); }

__device__ __forceinline__ void ldsm_x4(uint32_t r[4], const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(p)));
}

__device__ __forceinline__ void ldsm_x4_t(uint32_t r[4], const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(p)));
}

__device__ __forceinline__ void mma_bf16(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* a launch in clusters of `cluster` blocks along x (1: no clusters; grid.x a multiple of it) */
template <typename... KArgs, typename... Args>
static cudaError_t launch_cluster(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t st, unsigned cluster,
                                  Args... args) {
    if (grid.x == 0 || grid.y == 0 || grid.z == 0) return cudaSuccess;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = st;
    cudaLaunchAttribute attr[2];
    unsigned n = 0;
    if (cfk_cfg.pdl) {
        attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr[n++].val.programmaticStreamSerializationAllowed = 1;
    }
    if (cluster > 1) {
        attr[n].id = cudaLaunchAttributeClusterDimension;
        attr[n].val.clusterDim.x = cluster;
        attr[n].val.clusterDim.y = 1;
        attr[n++].val.clusterDim.z = 1;
    }
    cfg.attrs = attr;
    cfg.numAttrs = n;
    return cudaLaunchKernelEx(&cfg, kernel, ((KArgs)args)...);
}

template <typename... KArgs, typename... Args>
static cudaError_t launch(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t st, Args... args) {
    return launch_cluster(kernel, grid, block, smem, st, 1u, args...);
}

static inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

#endif
