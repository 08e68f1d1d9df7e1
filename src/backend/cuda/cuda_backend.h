/* cuda_backend.h: CUDA-only helpers for tests and benchmarks, beside the op table: filling device
 * tensors with random values without a host copy, and the device-to-device copy bandwidth. */
#ifndef CF_BACKEND_CUDA_BACKEND_H
#define CF_BACKEND_CUDA_BACKEND_H

#include "backend/backend.h"

/* t = uniform values in [-scale, scale), a function of (seed, element index) */
void cf_cuda_fill_random(cf_backend *be, cf_tensor t, uint64_t seed, float scale);
/* cudaMemcpy device to device of `bytes`, reps times: (read + written bytes) / time */
cinfer_status cf_cuda_memcpy_bandwidth(cf_backend *be, size_t bytes, int reps, double *gb_s, cinfer_error *err);

#endif
