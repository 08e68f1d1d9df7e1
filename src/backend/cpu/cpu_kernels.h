/* cpu_kernels.h: the inner loops of the CPU backend (dot products over f32/bf16/f16 weights) with
 * runtime selection between AVX-512, AVX2+FMA and portable C (no -march flags at build time). */
#ifndef CF_BACKEND_CPU_KERNELS_H
#define CF_BACKEND_CPU_KERNELS_H

#include <stdint.h>
#include "base/dtype.h"

/* out[r * ostride] = dot(x + r * xstride, w[0..k)) for r < nx (nx <= 4), w of type wdt. */
typedef void (*cf_dot_fn)(const float *x, int64_t xstride, int nx, const void *w, int k, float *out, int64_t ostride);

typedef enum cf_cpu_isa_level { CF_ISA_C, CF_ISA_AVX2, CF_ISA_AVX512 } cf_cpu_isa_level;

/* The fastest kernel this CPU runs. */
cf_dot_fn cf_cpu_dot_kernel(cf_dtype wdt);
/* The kernel of one instruction set, or NULL when this CPU (or build) lacks it: for tests. */
cf_dot_fn cf_cpu_dot_kernel_isa(cf_dtype wdt, cf_cpu_isa_level isa);
const char *cf_cpu_isa(void);

#endif
