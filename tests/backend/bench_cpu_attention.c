/* bench_cpu_attention.c: not a test: microseconds per layer of the CPU attention (cf_cpu_attention) for one
 * decode row of the Llama-3.2-1B shape (32 query heads, 8 kv heads, head dim 64) at 128, 1,024 and 4,096
 * keys, each instruction set this CPU runs, 1 and 2 threads; the best of 200 calls (the machine is shared).
 * Then the same from a cold cache, as in decoding: 16 layers' caches in turn, 64 MiB written between tokens
 * (the weights' traffic), the fastest kernels, the mean over 17 tokens after 3. */
#include "backend/cpu/cpu_attention.h"
#include "backend/cpu/cpu_kernels.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(void) {
    enum { H = 32, KVH = 8, HD = 64, CAP = 4096 };
    static const char *names[] = {"C", "AVX2", "AVX-512"};
    static const int ctxs[] = {128, 1024, 4096};
    float *q = malloc(sizeof(float) * H * HD), *o = malloc(sizeof(float) * H * HD);
    float *k = malloc(sizeof(float) * (size_t)CAP * KVH * HD), *v = malloc(sizeof(float) * (size_t)CAP * KVH * HD);
    if (!q || !o || !k || !v) return 1;
    for (size_t i = 0; i < (size_t)CAP * KVH * HD; i++) k[i] = (float)(i % 13) * 0.01f, v[i] = (float)(i % 7) * 0.1f;
    for (int i = 0; i < H * HD; i++) q[i] = (float)(i % 5) * 0.1f;
    cf_attn_scratch s = {0};
    cinfer_error e = {0};
    cf_workers *pool2;
    if (cf_workers_create(2, &pool2, &e) != CINFER_OK) return 1;
    printf("| keys | isa | threads | us per layer | ms per token (16 layers) |\n|---:|---|---:|---:|---:|\n");
    for (int ci = 0; ci < 3; ci++)
        for (int isa = CF_ISA_C; isa <= CF_ISA_AVX512; isa++) {
            if (!cf_cpu_isa_available((cf_cpu_isa_level)isa)) continue;
            for (int th = 1; th <= 2; th++) {
                const cf_attn_call c = {.q = q, .qs = H * HD, .out = o, .os = H * HD, .k = k, .v = v, .ks = KVH * HD, .vs = KVH * HD,
                                        .n_rows = 1, .n_heads = H, .n_kv_heads = KVH, .head_dim = HD, .v_head_dim = HD,
                                        .scale = 0.125f, .pos0 = ctxs[ci] - 1, .cap = CAP};
                double best = 1e9;
                for (int r = 0; r < 200; r++) {
                    const double t0 = now();
                    if (cf_cpu_attention(&c, th == 1 ? NULL : pool2, (cf_cpu_isa_level)isa, &s, &e) != CINFER_OK) return 1;
                    const double t = now() - t0;
                    if (t < best) best = t;
                }
                printf("| %d | %s | %d | %.1f | %.2f |\n", ctxs[ci], names[isa], th, best * 1e6, best * 16e3);
            }
        }
    enum { LAYERS = 16, JUNK = 16 << 20 };
    float *ck[LAYERS], *cv[LAYERS], *junk = malloc(sizeof(float) * JUNK);
    int ok = junk != NULL;
    for (int l = 0; l < LAYERS; l++) {
        ck[l] = ok ? malloc(sizeof(float) * (size_t)CAP * KVH * HD) : NULL;
        cv[l] = ok ? malloc(sizeof(float) * (size_t)CAP * KVH * HD) : NULL;
        ok = ok && ck[l] && cv[l];
        for (size_t i = 0; ok && i < (size_t)CAP * KVH * HD; i++) ck[l][i] = (float)((i + (size_t)l) % 13) * 0.01f, cv[l][i] = (float)(i % 7) * 0.1f;
    }
    if (ok) printf("\ncold cache (%d layers in turn, 64 MiB written between tokens), %s:\n\n| keys | threads | us per layer |\n|---:|---:|---:|\n",
                   LAYERS, names[cf_cpu_best_isa()]);
    for (int ci = 0; ok && ci < 3; ci++)
        for (int th = 1; th <= 2; th++) {
            double total = 0;
            int n = 0;
            for (int tok = 0; tok < 20; tok++) {
                for (int i = 0; i < JUNK; i += 16) junk[i] = (float)tok;
                for (int l = 0; l < LAYERS; l++) {
                    const cf_attn_call c = {.q = q, .qs = H * HD, .out = o, .os = H * HD, .k = ck[l], .v = cv[l], .ks = KVH * HD,
                                            .vs = KVH * HD, .n_rows = 1, .n_heads = H, .n_kv_heads = KVH, .head_dim = HD,
                                            .v_head_dim = HD, .scale = 0.125f, .pos0 = ctxs[ci] - 1, .cap = CAP};
                    const double t0 = now();
                    if (cf_cpu_attention(&c, th == 1 ? NULL : pool2, cf_cpu_best_isa(), &s, &e) != CINFER_OK) return 1;
                    if (tok >= 3) total += now() - t0, n++;
                }
            }
            printf("| %d | %d | %.1f |\n", ctxs[ci], th, 1e6 * total / n);
        }
    for (int l = 0; l < LAYERS; l++) free(ck[l]), free(cv[l]);
    free(junk);
    free(s.buf), free(q), free(o), free(k), free(v);
    cf_workers_free(pool2);
    return 0;
}
