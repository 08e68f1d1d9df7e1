/* cpu_bandwidth.c: the read-bandwidth measurement of cpu_bandwidth.h; owns its buffer for one call. The sum
 * is kept (returned through a volatile sink) so the loads cannot be dropped. */
#include "backend/cpu/cpu_bandwidth.h"
#include "backend/cpu/cpu_kernels.h"
#include "base/clock.h"
#include "base/status.h"

#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CF_X86 1
#endif

static volatile float sink;

/* the sum of n floats (n a multiple of 64) in 8 independent chains */
static float sum_c(const float *p, size_t n) {
    float a[8] = {0};
    for (size_t i = 0; i < n; i += 8)
        for (int l = 0; l < 8; l++) a[l] += p[i + l];
    return a[0] + a[1] + a[2] + a[3] + a[4] + a[5] + a[6] + a[7];
}

#ifdef CF_X86
__attribute__((target("avx2"))) static float sum_avx2(const float *p, size_t n) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i < n; i += 32) {
        a0 = _mm256_add_ps(a0, _mm256_load_ps(p + i));
        a1 = _mm256_add_ps(a1, _mm256_load_ps(p + i + 8));
        a2 = _mm256_add_ps(a2, _mm256_load_ps(p + i + 16));
        a3 = _mm256_add_ps(a3, _mm256_load_ps(p + i + 24));
    }
    float t[8];
    _mm256_storeu_ps(t, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    return t[0] + t[1] + t[2] + t[3] + t[4] + t[5] + t[6] + t[7];
}

__attribute__((target("avx512f"))) static float sum_avx512(const float *p, size_t n) {
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i < n; i += 64) {
        a0 = _mm512_add_ps(a0, _mm512_load_ps(p + i));
        a1 = _mm512_add_ps(a1, _mm512_load_ps(p + i + 16));
        a2 = _mm512_add_ps(a2, _mm512_load_ps(p + i + 32));
        a3 = _mm512_add_ps(a3, _mm512_load_ps(p + i + 48));
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}
#endif

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

cinfer_status cf_cpu_read_bandwidth(size_t bytes, int n_threads, int reps, double *gbs, cinfer_error *err) {
    if (n_threads < 1) n_threads = 1;
    if (reps < 1 || reps > 64) return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "read bandwidth: reps %d is not in 1..64", reps);
    const size_t chunk = 64 * sizeof(float) * (size_t)n_threads;   /* every thread's share a multiple of 64 floats */
    bytes -= bytes % chunk;
    if (bytes == 0) return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "read bandwidth: a buffer of at least %zu bytes", chunk);
    float *buf = aligned_alloc(64, bytes);
    double *t = malloc((size_t)reps * sizeof *t);
    if (!buf || !t) {
        free(buf);
        free(t);
        return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "read bandwidth: cannot allocate %zu bytes", bytes);
    }
    const size_t n = bytes / sizeof(float), share = n / (size_t)n_threads;
    #pragma omp parallel for num_threads(n_threads) schedule(static)
    for (int th = 0; th < n_threads; th++)   /* each thread first touches its own share (its pages on its node) */
        for (size_t i = 0; i < share; i++) buf[(size_t)th * share + i] = (float)(i & 7);
    float (*sum)(const float *, size_t) = sum_c;
#ifdef CF_X86
    if (cf_cpu_isa_available(CF_ISA_AVX512)) sum = sum_avx512;
    else if (cf_cpu_isa_available(CF_ISA_AVX2)) sum = sum_avx2;
#endif
    for (int r = -1; r < reps; r++) {
        float total = 0;
        const double t0 = cf_monotonic_seconds();
        #pragma omp parallel for num_threads(n_threads) schedule(static) reduction(+ : total)
        for (int th = 0; th < n_threads; th++) total += sum(buf + (size_t)th * share, share);
        if (r >= 0) t[r] = cf_monotonic_seconds() - t0;
        sink = total;
    }
    qsort(t, (size_t)reps, sizeof *t, cmp_double);
    const double med = reps % 2 ? t[reps / 2] : 0.5 * (t[reps / 2 - 1] + t[reps / 2]);
    *gbs = (double)bytes / med / 1e9;
    free(buf);
    free(t);
    return CINFER_OK;
}
