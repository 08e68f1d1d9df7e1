/* fma_peak.c: the f32 FMA peak of this CPU behind cpu_prefill.md: 16 independent chains of 512-bit
 * vfmadd231ps (inline assembly, so nothing spills) per thread, timed by the thread's own CPU time.
 * Build and run: gcc -O2 -mavx512f -fopenmp bench/results/cpu_prefill/fma_peak.c -o /tmp/fma_peak && /tmp/fma_peak 2 */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double cpu_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

#define F(r) "vfmadd231ps %%zmm30, %%zmm31, %%zmm" #r "\n\t"
static void chains(long it) {
    __asm__ volatile("vxorps %%zmm30, %%zmm30, %%zmm30\n\tvxorps %%zmm31, %%zmm31, %%zmm31\n\t"
                     "1:\n\t" F(0) F(1) F(2) F(3) F(4) F(5) F(6) F(7) F(8) F(9) F(10) F(11) F(12) F(13) F(14) F(15)
                     "dec %0\n\tjnz 1b\n\t"
                     : "+r"(it)
                     :
                     : "cc", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10",
                       "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "xmm30", "xmm31");
}

int main(int argc, char **argv) {
    const int nt = argc > 1 ? atoi(argv[1]) : 1;
    const long it = 100000000L;
    for (int rep = 0; rep < 3; rep++) {
        double total = 0;
        #pragma omp parallel num_threads(nt) reduction(+ : total)
        {
            const double c0 = cpu_now();
            chains(it);
            total += it * 16.0 * 32 / (cpu_now() - c0) / 1e9; /* 16 fmas of 16 lanes, 2 flops each */
        }
        printf("%d threads: %.1f GFLOP/s (%.1f per thread, %.2f fma instructions per ns per thread)\n", nt, total,
               total / nt, total / nt / 32);
    }
    return 0;
}
