/* test_cpu_kernels.c: every dot kernel this CPU runs (portable C, AVX2, AVX-512) against a double
 * precision reference, for f32/bf16/f16 weights, 1 to 4 activation rows, lengths with and without a
 * vector tail, and strided rows and outputs. */
#include "backend/cpu/cpu_kernels.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

int main(void) {
    static const char *isa_names[] = {"C", "AVX2", "AVX-512"};
    static const cf_dtype types[] = {CF_F32, CF_BF16, CF_F16};
    static const int lengths[] = {1, 7, 8, 15, 16, 17, 31, 64, 100, 4096 + 13};
    enum { XS = 4200, OS = 3 };
    float *x = malloc(4 * XS * sizeof *x), *wf = malloc(XS * sizeof *wf);
    uint16_t *wh = malloc(XS * sizeof *wh);
    uint64_t s = 7;
    for (int i = 0; i < 4 * XS; i++) { s = s * 6364136223846793005ull + 1; x[i] = (float)((s >> 40) % 2001) / 1000.0f - 1.0f; }
    int failures = 0, ran = 0;
    for (int isa = CF_ISA_C; isa <= CF_ISA_AVX512; isa++) {
        for (int t = 0; t < 3; t++) {
            cf_dot_fn dot = cf_cpu_dot_kernel_isa(types[t], (cf_cpu_isa_level)isa);
            if (!dot) { printf("skip %s (not on this CPU)\n", isa_names[isa]); break; }
            for (size_t li = 0; li < sizeof lengths / sizeof lengths[0]; li++) {
                int k = lengths[li];
                for (int i = 0; i < k; i++) {
                    s = s * 6364136223846793005ull + 1;
                    float v = (float)((s >> 40) % 2001) / 1000.0f - 1.0f;
                    wh[i] = types[t] == CF_BF16 ? cf_f32_to_bf16(v) : cf_f32_to_f16(v);
                    wf[i] = types[t] == CF_BF16 ? cf_bf16_to_f32(wh[i]) : types[t] == CF_F16 ? cf_f16_to_f32(wh[i]) : v;
                }
                const void *w = types[t] == CF_F32 ? (const void *)wf : (const void *)wh;
                for (int nx = 1; nx <= 4; nx++) {
                    float out[4 * OS];
                    dot(x, XS, nx, w, k, out, OS);
                    for (int r = 0; r < nx; r++) {
                        double ref = 0, mag = 0;
                        for (int i = 0; i < k; i++) { ref += (double)x[r * XS + i] * wf[i]; mag += fabs((double)x[r * XS + i] * wf[i]); }
                        double e = fabs(out[r * OS] - ref);
                        ran++;
                        if (!(e <= 1e-6 * mag + 1e-6)) {
                            failures++;
                            printf("FAIL %s %s k=%d nx=%d row %d: %.9g vs %.9g\n", isa_names[isa], cf_dtype_name(types[t]), k, nx, r, out[r * OS], ref);
                        }
                    }
                }
            }
        }
    }
    printf("%d dot products checked, %d failed (kernel in use: %s)\n", ran, failures, cf_cpu_isa());
    free(x);
    free(wf);
    free(wh);
    return failures || ran == 0;
}
