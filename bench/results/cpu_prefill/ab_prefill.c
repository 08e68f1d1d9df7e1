/* ab_prefill.c: the A/B behind cpu_prefill.md: the tiled (prefill) matmul kernels of an older commit (compiled
 * with their public names prefixed old_) against the current ones, out = x . w^T for n activation rows at the
 * Llama-3.2-1B shapes, weights split between threads by whole CF_GEMM_ROW_BLOCK blocks as cpu_dense_matmul
 * does. Timed by each thread's own CPU time (CLOCK_THREAD_CPUTIME_ID, the slowest thread's), so a thread
 * descheduled by other work on this shared machine does not count; old and new alternate, the order flipped
 * every round; medians, and the bits of the two compared (they must agree). Each call reads the next copy of
 * its weights in a 512 MiB buffer (beyond the last-level cache, as in a forward pass, where every weight
 * comes from memory). Quantized weights (DTYPE 3, 4):
 * cf_cpu_qgemm_isa, MLX affine 4 or 8 bits, group 64, bf16 scales and biases. Build (repository root, after
 * a Release build; BASE: the commit to compare against):
 *   git show BASE:src/backend/cpu/cpu_kernels.c > /tmp/old_kernels.c
 *   git show BASE:src/backend/cpu/cpu_quant.c > /tmp/old_quant.c
 *   gcc -O3 -Isrc -Iinclude -Dcf_cpu_gemm_kernel_isa=old_cf_cpu_gemm_kernel_isa -Dcf_cpu_isa_available=old_cf_cpu_isa_available \
 *       -Dcf_cpu_gemm_kernel=old_cf_cpu_gemm_kernel -Dcf_cpu_best_isa=old_cf_cpu_best_isa -Dcf_cpu_isa=old_cf_cpu_isa \
 *       -c /tmp/old_kernels.c -o /tmp/old_kernels.o
 *   gcc -O3 -Isrc -Iinclude -Dcf_cpu_qgemm_isa=old_cf_cpu_qgemm_isa -Dcf_cpu_qgemm=old_cf_cpu_qgemm -c /tmp/old_quant.c -o /tmp/old_quant.o
 *   gcc -O3 -fopenmp -Isrc -Iinclude bench/results/cpu_prefill/ab_prefill.c /tmp/old_kernels.o /tmp/old_quant.o build/libcinfer.a -lm -o /tmp/ab_prefill
 *   /tmp/ab_prefill THREADS ROUNDS [N rows of x, default 128] [DTYPE 0|1|2|3|4 = f32|bf16|f16|q4|q8, default bf16] [ISA 0|1|2, default 2] */
#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/cpu_quant.h"
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
cf_gemm_fn old_cf_cpu_gemm_kernel_isa(cf_dtype wdt, cf_cpu_isa_level isa);
int old_cf_cpu_qgemm_isa(cf_cpu_isa_level isa, const float *x, int64_t xs, int64_t n, const cf_qmat *w, int64_t r0, int64_t r1,
                         float *out, int64_t os);
typedef int (*qgemm_fn)(cf_cpu_isa_level, const float *, int64_t, int64_t, const cf_qmat *, int64_t, int64_t, float *, int64_t);
static int qbits, qisa;  /* quantized weights: 4 or 8 bits (0: none), the instruction set */
static qgemm_fn qfn[2] = {old_cf_cpu_qgemm_isa, cf_cpu_qgemm_isa};
static cf_qmat qm;
#define WBYTES ((size_t)512 << 20)
static size_t cold_off;  /* the next call's weights: this far into the buffer */
static int cmpd(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return x < y ? -1 : x > y; }
static double cpu_now(void) { struct timespec t; clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
static double tcpu[64];
static double call(cf_gemm_fn g, int v, const float *x, int64_t n, const char *w, size_t es, int64_t d, int64_t k, float *o, int nt) {
    const size_t mb = (size_t)d * k * (qbits ? 1 : es);
    if (cold_off + mb > WBYTES) cold_off = 0;
    w += cold_off, cold_off += mb;
    const int64_t blocks = (d + CF_GEMM_ROW_BLOCK - 1) / CF_GEMM_ROW_BLOCK;
    #pragma omp parallel num_threads(nt)
    {
        const int64_t t = omp_get_thread_num(), T = omp_get_num_threads();
        int64_t j0 = blocks * t / T * CF_GEMM_ROW_BLOCK, j1 = blocks * (t + 1) / T * CF_GEMM_ROW_BLOCK;
        if (j1 > d) j1 = d;
        const double c0 = cpu_now();
        if (j1 > j0 && qbits) {
            cf_qmat m = qm;
            m.q = (const uint32_t *)w, m.rows = d, m.cols = k;
            qfn[v]((cf_cpu_isa_level)qisa, x, k, n, &m, j0, j1, o + j0, d);
        } else if (j1 > j0) g(x, k, n, w + (size_t)j0 * k * es, k, j1 - j0, k, o + j0, d);
        tcpu[t] = cpu_now() - c0;
    }
    double m = 0;
    for (int t = 0; t < nt; t++) if (tcpu[t] > m) m = tcpu[t];
    return m;
}
int main(int argc, char **argv) {
    if (argc < 3) { fprintf(stderr, "usage: ab_prefill THREADS ROUNDS [N] [DTYPE 0|1|2] [ISA 0|1|2]\n"); return 2; }
    const int nt = atoi(argv[1]), rounds = atoi(argv[2]) > 256 ? 256 : atoi(argv[2]);
    const int n = argc > 3 ? atoi(argv[3]) : 128, dt = argc > 4 ? atoi(argv[4]) : 1, isa = argc > 5 ? atoi(argv[5]) : 2;
    const cf_dtype wdt = dt == 0 ? CF_F32 : dt == 2 ? CF_F16 : CF_BF16;
    qbits = dt == 3 ? 4 : dt == 4 ? 8 : 0, qisa = isa;
    const size_t es = wdt == CF_F32 ? 4 : 2;
    /* per layer: q and o, k and v, gate and up, down */
    const int64_t shapes[][2] = {{2048, 2048}, {512, 2048}, {8192, 2048}, {2048, 8192}};
    const double cnt[] = {2, 2, 2, 1};
    const int ns = 4;
    char *w = aligned_alloc(4096, WBYTES);
    for (size_t i = 0; i < WBYTES / es; i++) {
        const float v = (float)((int)(i % 13) - 6) / 64.0f;
        if (es == 4) ((float *)w)[i] = v;
        else { uint32_t b; memcpy(&b, &v, 4); ((uint16_t *)w)[i] = wdt == CF_BF16 ? (uint16_t)(b >> 16) : (uint16_t)(b >> 16); }
    }
    if (wdt == CF_F16) for (size_t i = 0; i < WBYTES / 2; i++) ((uint16_t *)w)[i] = (uint16_t)(0x3000 + i % 997);
    if (qbits) { /* packed values from the weight buffer's bytes, scales and biases bf16 around 1/64 and -1/8 */
        uint16_t *sb = malloc(sizeof(uint16_t) * 2 * 8192 * 2048 / 64);
        for (size_t i = 0; i < (size_t)8192 * 2048 / 64; i++) sb[i] = (uint16_t)(0x3c80 + i % 17), sb[8192 * 2048 / 64 + i] = (uint16_t)(0xbe00 + i % 5);
        qm = (cf_qmat){.q = (const uint32_t *)w, .scales = sb, .biases = sb + 8192 * 2048 / 64, .sb_dtype = CF_BF16, .bits = qbits, .group = 64};
    }
    float *x = aligned_alloc(64, (size_t)4 * 8192 * n), *o[2];
    for (size_t i = 0; i < (size_t)8192 * n; i++) x[i] = 1.0f / (float)(i % 1001 + 1) - 0.0005f;
    for (int v = 0; v < 2; v++) o[v] = malloc((size_t)4 * 8192 * n);
    cf_gemm_fn g[2] = {old_cf_cpu_gemm_kernel_isa(wdt, isa), cf_cpu_gemm_kernel_isa(wdt, isa)};
    if (!g[0] || !g[1]) { fprintf(stderr, "no kernel for this ISA\n"); return 1; }
    static double t[4][2][256];
    for (int r = 0; r < rounds; r++)
        for (int s = 0; s < ns; s++)
            for (int vv = 0; vv < 2; vv++) {
                const int v = (r & 1) ? 1 - vv : vv;
                t[s][v][r] = call(g[v], v, x, n, w, es, shapes[s][0], shapes[s][1], o[v], nt);
            }
    int same = 1;
    for (int s = 0; s < ns; s++) {
        cold_off = 0, call(g[0], 0, x, n, w, es, shapes[s][0], shapes[s][1], o[0], nt);
        cold_off = 0, call(g[1], 1, x, n, w, es, shapes[s][0], shapes[s][1], o[1], nt);
        same &= memcmp(o[0], o[1], (size_t)4 * n * shapes[s][0]) == 0;
    }
    double st[2] = {0, 0}, fl = 0;
    for (int s = 0; s < ns; s++) {
        const double f = 2.0 * n * shapes[s][0] * shapes[s][1];
        printf("%5lldx%-5lld", (long long)shapes[s][0], (long long)shapes[s][1]);
        for (int v = 0; v < 2; v++) {
            qsort(t[s][v], rounds, sizeof(double), cmpd);
            const double m = t[s][v][rounds / 2];
            st[v] += cnt[s] * m;
            printf("  %s %6.1f GFLOP/s per thread-set (best %6.1f)", v ? "new" : "old", f / m / 1e9, f / t[s][v][0] / 1e9);
        }
        printf("\n");
        fl += cnt[s] * f;
    }
    printf("layer mix, n=%d, %d threads: old %.1f GFLOP/s, new %.1f GFLOP/s (%.2fx); outputs %s\n", n, nt, fl / st[0] / 1e9,
           fl / st[1] / 1e9, st[0] / st[1], same ? "bit-identical" : "DIFFER");
    return same ? 0 : 1;
}
