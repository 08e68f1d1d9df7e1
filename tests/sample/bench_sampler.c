/* bench_sampler.c: sampling time per token at a Qwen2-sized vocabulary (151936) for the usual
 * settings, on a peaked row (eight favourites 6 to -1 logits above a N(0, 2^2) crowd, like most
 * LLM steps) and a flat one (N(0, 1): top-p's
 * worst case, its nucleus holds thousands). No timing assertion; it checks every draw lands inside the truncated set.
 * Usage: bench_sampler [iterations per setting, default 100] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "sample/sampler.h"

enum { V = 151936 };

static uint64_t tstate = 0x2545F4914F6CDD1Dull;
static double trand(void) {
    tstate ^= tstate << 13;
    tstate ^= tstate >> 7;
    tstate ^= tstate << 17;
    return (double)(tstate >> 11) * 0x1.0p-53;
}
static float tgauss(void) {
    return (float)(sqrt(-2 * log(trand() + 1e-300)) * cos(6.283185307179586 * trand()));
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_desc(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return x > y ? -1 : x < y;
}

int main(int argc, char **argv) {
    int iters = argc > 1 ? atoi(argv[1]) : 100;
    if (iters <= 0) iters = 100;
    static float rows[2][V], sorted[V], l[V];
    const char *row_name[2] = {"peaked", "flat"};
    float top = -INFINITY;
    for (int i = 0; i < V; i++) {
        rows[0][i] = 2.0f * tgauss();
        rows[1][i] = tgauss();
        top = rows[0][i] > top ? rows[0][i] : top;
    }
    for (int i = 0; i < 8; i++) rows[0][(int)(trand() * V)] = top + 6.0f - (float)i;

    struct {
        const char *name;
        float t, top_p, min_p;
        int top_k, top_logprobs;
    } cases[] = {
        {"greedy", 0, 1, 0, 0, 0},
        {"greedy + top 20 logprobs", 0, 1, 0, 0, 20},
        {"T 1 (full vocabulary)", 1, 1, 0, 0, 0},
        {"T 0.7 top_k 40", 0.7f, 1, 0, 40, 0},
        {"T 0.7 top_p 0.9", 0.7f, 0.9f, 0, 0, 0},
        {"T 0.7 top_k 40 top_p 0.9", 0.7f, 0.9f, 0, 40, 0},
        {"T 0.7 min_p 0.05", 0.7f, 1, 0.05f, 0, 0},
        {"T 0.7 top_k 40 top_p 0.9 + logprobs", 0.7f, 0.9f, 0, 40, 20},
    };
    int bad = 0;
    double t0 = now();
    for (int i = 0; i < iters; i++) memcpy(l, rows[0], sizeof l);
    const double copy_us = (now() - t0) / iters * 1e6;
    printf("vocab %d, %d iterations per setting; copying the row (%.1f us) is not counted\n", V, iters, copy_us);
    for (int r = 0; r < 2; r++) {
        memcpy(sorted, rows[r], sizeof sorted);
        qsort(sorted, V, sizeof *sorted, cmp_desc);
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            cf_sampling_params p = cf_sampling_default_params();
            p.seed = 1234;
            p.temperature = cases[c].t;
            p.top_k = cases[c].top_k;
            p.top_p = cases[c].top_p;
            p.min_p = cases[c].min_p;
            p.top_logprobs = cases[c].top_logprobs;
            cf_sampler *s = NULL;
            cinfer_error err = {0};
            if (cf_sampler_create(&p, V, &s, &err) != CINFER_OK) {
                fprintf(stderr, "create: %s\n", err.message);
                return 1;
            }
            /* The k-th largest logit bounds every draw under top_k; the greedy pick is the maximum. */
            const float floor = p.temperature == 0 ? sorted[0] : p.top_k ? sorted[p.top_k - 1] : -INFINITY;
            double t = 0;
            for (int i = 0; i < iters; i++) {
                memcpy(l, rows[r], sizeof l);
                cf_sample_result res;
                double a = now();
                cinfer_status st = cf_sampler_sample(s, l, &res, &err);
                t += now() - a;
                if (st != CINFER_OK || res.token < 0 || res.token >= V || rows[r][res.token] < floor ||
                    (p.top_logprobs && (res.n_top != 20 || res.top[0].logprob < res.logprob))) {
                    fprintf(stderr, "%s %s: bad draw %d (%s)\n", row_name[r], cases[c].name, res.token, err.message);
                    bad++;
                }
                cf_sampler_accept(s, res.token, NULL);
            }
            printf("%-7s %-38s %8.1f us/token\n", row_name[r], cases[c].name, t / iters * 1e6);
            cf_sampler_free(s);
        }
    }
    return bad ? 1 : 0;
}
