/* test_kernels_isa.c: the AVX2 exp pass gives bit-identical weights and sums to the portable one, so
 * a seeded draw does not depend on the machine. Compiles kernels.c in to reach both versions; skips
 * (77) where AVX2 is absent. */
#include "../../src/sample/kernels.c"

#include <stdio.h>
#include <stdlib.h>

int main(void) {
#ifdef AVX2
    if (!have_avx2()) {
        printf("no AVX2 on this machine: skipped\n");
        return 77;
    }
    enum { N = 151936 + 13 };
    static float v[N], w1[N], w2[N];
    static double b1[N / CF_EXP_BLOCK + 1], b2[N / CF_EXP_BLOCK + 1];
    uint64_t x = 12345;
    for (int i = 0; i < N; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        v[i] = (float)(x >> 40) / (float)(1 << 24) * 120.0f - 100.0f;
    }
    v[7] = -INFINITY;
    int failures = 0;
    const float scales[] = {1.0f, 1.0f / 0.7f, 3.3f, 0.01f};
    for (int k = 0; k < 4; k++) {
        double s1 = row_exp_portable(v, w1, N, 20.0f, scales[k], b1);
        double s2 = row_exp_avx2(v, w2, N, 20.0f, scales[k], b2);
        if (s1 != s2 || memcmp(w1, w2, sizeof w1) || memcmp(b1, b2, sizeof b1)) {
            fprintf(stderr, "scale %g: AVX2 and portable exp passes differ (sums %.17g vs %.17g)\n", scales[k], s1, s2);
            failures++;
        }
    }
    if (failures) return 1;
    printf("AVX2 and portable exp passes are bit-identical\n");
    return 0;
#else
    printf("not an x86-64 GCC/Clang build: skipped\n");
    return 77;
#endif
}
