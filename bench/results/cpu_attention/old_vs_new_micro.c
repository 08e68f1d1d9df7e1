/* old_vs_new_micro.c: the one-off timing behind old_vs_new_micro.txt: main's scalar attention (3c2d013, copied
 * for the comparison) against cf_cpu_attention at each instruction set, one decode row of the Llama-3.2-1B
 * shape at 1,025 keys, best of 200. Built by hand against build/libcinfer.a:
 *   gcc -O2 -fopenmp -Iinclude -Isrc bench/results/cpu_attention/old_vs_new_micro.c build/libcinfer.a -lm */
#include "backend/cpu/cpu_attention.h"
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+1e-9*t.tv_nsec;}
/* the old scalar attention (main's cpu_attention), for timing only */
static void old_attn(const cf_attn_call *a, int nth) {
    const int group = a->n_heads / a->n_kv_heads; const int last = a->pos0; const int max_keys = last + 1;
    #pragma omp parallel num_threads(nth)
    {
        float *sc = malloc((size_t)max_keys * sizeof *sc);
        #pragma omp for collapse(2) schedule(static)
        for (int i = 0; i < 1; i++) for (int h = 0; h < a->n_heads; h++) {
            const int p = a->pos0 + i, lo = 0, kvh = h / group;
            const float *qv = a->q + h * a->head_dim; float mx = -INFINITY;
            for (int k = lo; k <= p; k++) { const float *kv = a->k + (k % a->cap) * a->ks + kvh * a->head_dim; float s = 0;
                for (int c = 0; c < a->head_dim; c++) s += qv[c] * kv[c]; s *= a->scale; sc[k] = s; if (s > mx) mx = s; }
            float sum = 0; for (int k = lo; k <= p; k++) { sc[k] = expf(sc[k] - mx); sum += sc[k]; }
            float *o = a->out + h * a->v_head_dim; for (int c = 0; c < a->v_head_dim; c++) o[c] = 0;
            for (int k = lo; k <= p; k++) { const float *vv = a->v + (k % a->cap) * a->vs + kvh * a->v_head_dim; const float w = sc[k] / sum;
                for (int c = 0; c < a->v_head_dim; c++) o[c] += w * vv[c]; }
        }
        free(sc);
    }
}
int main(void) {
    const int H = 32, KVH = 8, HD = 64, CTX = 1025, CAP = 1200;
    float *q = malloc(4 * H * HD), *k = malloc(4 * (size_t)CAP * KVH * HD), *v = malloc(4 * (size_t)CAP * KVH * HD), *o = malloc(4 * H * HD);
    for (size_t i = 0; i < (size_t)CAP * KVH * HD; i++) k[i] = (i % 13) * 0.01f, v[i] = (i % 7) * 0.1f;
    for (int i = 0; i < H * HD; i++) q[i] = (i % 5) * 0.1f;
    cf_attn_call c = {.q = q, .qs = H * HD, .out = o, .os = H * HD, .k = k, .v = v, .ks = KVH * HD, .vs = KVH * HD, .n_rows = 1, .n_heads = H,
                      .n_kv_heads = KVH, .head_dim = HD, .v_head_dim = HD, .scale = 0.125f, .pos0 = CTX - 1, .cap = CAP};
    cf_attn_scratch s = {0}; cinfer_error e = {0};
    for (int th = 1; th <= 2; th++) {
        double best = 1e9;
        for (int r = 0; r < 200; r++) { double t0 = now(); old_attn(&c, th); double t = now() - t0; if (t < best) best = t; }
        printf("old scalar, %d thr: %.1f us per layer, x16 layers = %.2f ms/token\n", th, best * 1e6, best * 16e3);
        for (int isa = 0; isa < 3; isa++) {
            best = 1e9;
            for (int r = 0; r < 200; r++) { double t0 = now(); cf_cpu_attention(&c, th, isa, &s, &e); double t = now() - t0; if (t < best) best = t; }
            printf("new isa %d, %d thr: %.1f us per layer, x16 = %.2f ms/token\n", isa, th, best * 1e6, best * 16e3);
        }
    }
    free(s.buf);
}
