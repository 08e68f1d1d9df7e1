/* cpu_kernels.h: the inner loops of the CPU backend: out = x . w^T for f32 activations against f32/bf16/f16
 * weight rows, with runtime selection between AVX-512, AVX2+FMA and portable C (no -march flags at build
 * time). Every kernel is batch invariant and the instruction sets agree: out[i][j] is the same bits for any
 * n, any position of row i in x, any split of the weight rows and any kernel. f32 and f16 weights
 * (cpu_kernels.c) take x as it is; bf16 weights (cpu_bf16.c) take x rounded to bf16 (the AVX512-BF16 dot
 * product and its emulation). */
#ifndef CF_BACKEND_CPU_KERNELS_H
#define CF_BACKEND_CPU_KERNELS_H

#include <stdint.h>
#include "base/dtype.h"

/* out[i * os + j] = dot(x + i * xs, w + j * ws) over k elements, for i < n, j < d; x f32, w of the kernel's
 * weight type (ws counts elements). Reads each weight row once per panel of rows of x that fits in L2. */
typedef void (*cf_gemm_fn)(const float *x, int64_t xs, int64_t n, const void *w, int64_t ws, int64_t d, int64_t k,
                           float *out, int64_t os);

typedef enum cf_cpu_isa_level { CF_ISA_C, CF_ISA_AVX2, CF_ISA_AVX512 } cf_cpu_isa_level;

/* Weight rows per tile: a split of the weight rows between threads at multiples of this keeps every tile
 * full (any split gives the same values; this one wastes no work). */
#define CF_GEMM_ROW_BLOCK 16

/* The bf16 kernel of one instruction set this CPU runs (cpu_bf16.c; AVX-512 without BF16 runs AVX2's). */
cf_gemm_fn cf_cpu_bf16_kernel(cf_cpu_isa_level isa);
/* The fastest kernel this CPU runs. */
cf_gemm_fn cf_cpu_gemm_kernel(cf_dtype wdt);
/* The kernel of one instruction set, or NULL when this CPU (or build) lacks it: for tests. */
cf_gemm_fn cf_cpu_gemm_kernel_isa(cf_dtype wdt, cf_cpu_isa_level isa);
const char *cf_cpu_isa(void);
/* The instruction set of the fastest kernels this CPU runs. */
cf_cpu_isa_level cf_cpu_best_isa(void);
/* Whether this CPU (and build) runs the kernels of one instruction set (CF_ISA_C always). */
int cf_cpu_isa_available(cf_cpu_isa_level isa);
/* The AVX-512 extensions some kernels use where present (0 without AVX-512): the bf16 dot product (cpu_bf16.c)
 * and the int8 dot product (cpu_quant.c). */
int cf_cpu_has_avx512_bf16(void);
int cf_cpu_has_avx512_vnni(void);

#endif
