/* bench_cpu_attention.c: not a test: microseconds per layer of the CPU attention (cf_cpu_attention) for one
 * decode row of the Llama-3.2-1B shape (32 query heads, 8 kv heads, head dim 64) at 128, 1,024 and 4,096
 * keys, each instruction set this CPU runs, 1 and 2 threads, f32 and bf16 caches; the best of 200 calls (the machine is
 * shared).
 * Then the same from a cold cache, as in decoding: 16 layers' caches in turn, 64 MiB written between tokens
 * (the weights' traffic), the fastest kernels, the mean over 17 tokens after 3, for an f32 and a bf16 cache. */
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
    uint16_t *kb = malloc(sizeof(uint16_t) * (size_t)CAP * KVH * HD), *vb = malloc(sizeof(uint16_t) * (size_t)CAP * KVH * HD);
    if (!kb || !vb) return 1;
    cf_from_f32(kb, k, CF_BF16, (size_t)CAP * KVH * HD);
    cf_from_f32(vb, v, CF_BF16, (size_t)CAP * KVH * HD);
    printf("| keys | isa | threads | us per layer, f32 cache | bf16 cache |\n|---:|---|---:|---:|---:|\n");
    for (int ci = 0; ci < 3; ci++)
        for (int isa = CF_ISA_C; isa <= CF_ISA_AVX512; isa++) {
            if (!cf_cpu_isa_available((cf_cpu_isa_level)isa)) continue;
            for (int th = 1; th <= 2; th++) {
                printf("| %d | %s | %d |", ctxs[ci], names[isa], th);
                for (int t = 0; t < 2; t++) {
                    const cf_attn_call c = {.q = q, .qs = H * HD, .out = o, .os = H * HD, .k = t ? (const void *)kb : k,
                                            .v = t ? (const void *)vb : v, .kv_dtype = t ? CF_BF16 : CF_F32, .ks = KVH * HD,
                                            .vs = KVH * HD, .n_rows = 1, .n_heads = H, .n_kv_heads = KVH, .head_dim = HD,
                                            .v_head_dim = HD, .scale = 0.125f, .pos0 = ctxs[ci] - 1, .cap = CAP};
                    double best = 1e9;
                    for (int r = 0; r < 200; r++) {
                        const double t0 = now();
                        if (cf_cpu_attention(&c, th == 1 ? NULL : pool2, (cf_cpu_isa_level)isa, &s, &e) != CINFER_OK) return 1;
                        const double dt = now() - t0;
                        if (dt < best) best = dt;
                    }
                    printf(" %.1f |", best * 1e6);
                }
                printf("\n");
            }
        }
    free(kb), free(vb);
    enum { LAYERS = 16, JUNK = 16 << 20 };
    static const cf_dtype kvts[2] = {CF_F32, CF_BF16};
    void *ck[2][LAYERS] = {{0}}, *cv[2][LAYERS] = {{0}};
    float *junk = malloc(sizeof(float) * JUNK);
    int ok = junk != NULL;
    for (int t = 0; t < 2; t++)
        for (int l = 0; l < LAYERS; l++) {
            const size_t n = (size_t)CAP * KVH * HD;
            ck[t][l] = ok ? malloc(cf_dtype_size(kvts[t]) * n) : NULL;
            cv[t][l] = ok ? malloc(cf_dtype_size(kvts[t]) * n) : NULL;
            ok = ok && ck[t][l] && cv[t][l];
            for (size_t i = 0; ok && i < n; i++) k[i % ((size_t)KVH * HD)] = (float)((i + (size_t)l) % 13) * 0.01f;
            for (size_t r = 0; ok && r < CAP; r++) {   /* every row the same values, each layer its own */
                cf_from_f32((char *)ck[t][l] + r * KVH * HD * cf_dtype_size(kvts[t]), k, kvts[t], (size_t)KVH * HD);
                cf_from_f32((char *)cv[t][l] + r * KVH * HD * cf_dtype_size(kvts[t]), v, kvts[t], (size_t)KVH * HD);
            }
        }
    if (ok) printf("\ncold cache (%d layers in turn, 64 MiB written between tokens), %s, us per layer:\n\n| keys | threads | f32 cache | bf16 cache |\n|---:|---:|---:|---:|\n",
                   LAYERS, names[cf_cpu_best_isa()]);
    for (int ci = 0; ok && ci < 3; ci++)
        for (int th = 1; th <= 2; th++) {
            printf("| %d | %d |", ctxs[ci], th);
            for (int t = 0; t < 2; t++) {
                double total = 0;
                int n = 0;
                for (int tok = 0; tok < 20; tok++) {
                    for (int i = 0; i < JUNK; i += 16) junk[i] = (float)tok;
                    for (int l = 0; l < LAYERS; l++) {
                        const cf_attn_call c = {.q = q, .qs = H * HD, .out = o, .os = H * HD, .k = ck[t][l], .v = cv[t][l],
                                                .kv_dtype = kvts[t], .ks = KVH * HD, .vs = KVH * HD, .n_rows = 1, .n_heads = H,
                                                .n_kv_heads = KVH, .head_dim = HD, .v_head_dim = HD, .scale = 0.125f,
                                                .pos0 = ctxs[ci] - 1, .cap = CAP};
                        const double t0 = now();
                        if (cf_cpu_attention(&c, th == 1 ? NULL : pool2, cf_cpu_best_isa(), &s, &e) != CINFER_OK) return 1;
                        if (tok >= 3) total += now() - t0, n++;
                    }
                }
                printf(" %.1f |", 1e6 * total / n);
            }
            printf("\n");
        }
    for (int t = 0; t < 2; t++)
        for (int l = 0; l < LAYERS; l++) free(ck[t][l]), free(cv[t][l]);
    free(junk);
    free(s.buf), free(q), free(o), free(k), free(v);
    cf_workers_free(pool2);
    return 0;
}
