/* k_gemv_f16.cu: the GEMV kernels' instantiations for f16 weights (compiled beside the bf16 ones). */
#include "backend/cuda/k_gemv.cuh"

cudaError_t gemv_launch_f16(cudaStream_t st, const GemvArgs &g, int64_t blocks, cf_dtype xdt) {
    return gemv_launch<__half>(st, g, blocks, xdt);
}
