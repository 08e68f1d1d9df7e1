/* cpu_bandwidth.h: host memory read bandwidth (what decode does: stream weights), for `cinfer bench`. */
#ifndef CF_BACKEND_CPU_BANDWIDTH_H
#define CF_BACKEND_CPU_BANDWIDTH_H

#include <stddef.h>
#include "cinfer.h"

/* GB/s (1e9 bytes) of n_threads threads summing a buffer of `bytes` (allocated and freed here) with vector
 * loads, each its own contiguous share: the median of reps passes after one untimed pass. */
cinfer_status cf_cpu_read_bandwidth(size_t bytes, int n_threads, int reps, double *gbs, cinfer_error *err);

#endif
