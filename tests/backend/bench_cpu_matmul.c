/* bench_cpu_matmul.c: a benchmark, not a test (no ctest entry): GFLOP/s of the CPU backend's matmul,
 * out[n, d] = x[n, k] . w[d, k]^T, through the backend interface, for the weight shapes of a model config
 * (default: llama-170m's q/o, k/v, gate/up, down and lm_head) and n = 1, 4, 16, 64, 256 activation rows.
 * Each timed call reads the next of several weight copies that together exceed the last-level cache, as
 * a forward pass does, so the n = 1 figures are the memory-bound GEMV of decoding. The last table weighs
 * the shapes as one forward pass of the model does and prints the matmul-only step rate, tokens/s.
 * Each figure is the best of batches of calls of at least 10 ms over --secs seconds.
 *   bench_cpu_matmul [--threads N] [--dtype bf16|f16|f32] [--n 1,4,16] [--shape DxK ...] [--secs S]
 *                    [--model-shapes DIM,FFN,KVDIM,VOCAB,LAYERS] */
#include "backend/backend.h"
#include "base/status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { MAX_SHAPES = 16, MAX_NS = 16 };

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t rs = 0x2545F4914F6CDD1Dull;
static float frand(void) {  /* [-1, 1) */
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return (float)(rs >> 40) / (float)(1 << 23) - 1.0f;
}

static int parse_list(const char *s, int64_t *out, int cap) {
    int n = 0;
    while (*s && n < cap) {
        char *end;
        long long v = strtoll(s, &end, 10);
        if (end == s || v <= 0) return -1;
        out[n++] = v;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return -1;
    }
    return n;
}

/* Seconds per call of out = x . w^T, cycling through the weight copies: the fastest of the timed batches
 * (on a machine shared with other work the fastest batch is the one that ran alone). */
static double time_matmul(cf_backend *be, cf_tensor out, cf_tensor x, cf_tensor *w, int n_w, double secs) {
    be->ops->matmul(be, out, x, w[0], (cf_tensor){0});  /* warm-up: threads, page faults */
    double t_sample[64];
    int n_sample = 0, cur = 1 % n_w;
    const double t_end = now() + secs;
    int per = 1;
    do {
        double t0 = now();
        for (int i = 0; i < per; i++) {
            be->ops->matmul(be, out, x, w[cur], (cf_tensor){0});
            cur = (cur + 1) % n_w;
        }
        double dt = (now() - t0) / per;
        if (dt * per < 0.01 && per < (1 << 20)) per *= 2;  /* batches of at least 10 ms */
        else t_sample[n_sample++] = dt;
    } while (n_sample < 64 && (now() < t_end || n_sample < 3));
    for (int i = 1; i < n_sample; i++)
        for (int j = i; j > 0 && t_sample[j] < t_sample[j - 1]; j--) {
            double t = t_sample[j];
            t_sample[j] = t_sample[j - 1];
            t_sample[j - 1] = t;
        }
    return t_sample[0];
}

int main(int argc, char **argv) {
    int threads = 2;
    double secs = 0.4;
    cf_dtype wdt = CF_BF16;
    int64_t ns[MAX_NS] = {1, 4, 16, 64, 256};
    int n_ns = 5;
    int64_t shapes[MAX_SHAPES][2];
    int n_shapes = 0;
    int64_t model[5] = {768, 2560, 256, 32000, 14};  /* dim, ffn, kv dim, vocab, layers: llama-170m */
    for (int a = 1; a < argc; a++) {
        const char *v = a + 1 < argc ? argv[a + 1] : NULL;
        if (!strcmp(argv[a], "--threads") && v) threads = atoi(v), a++;
        else if (!strcmp(argv[a], "--secs") && v) secs = atof(v), a++;
        else if (!strcmp(argv[a], "--dtype") && v) {
            wdt = !strcmp(v, "f32") ? CF_F32 : !strcmp(v, "f16") ? CF_F16 : CF_BF16;
            a++;
        } else if (!strcmp(argv[a], "--n") && v) {
            if ((n_ns = parse_list(v, ns, MAX_NS)) <= 0) { fprintf(stderr, "bad --n %s\n", v); return 2; }
            a++;
        } else if (!strcmp(argv[a], "--shape") && v && n_shapes < MAX_SHAPES) {
            long long d, k;
            if (sscanf(v, "%lldx%lld", &d, &k) != 2 || d <= 0 || k <= 0) { fprintf(stderr, "bad --shape %s\n", v); return 2; }
            shapes[n_shapes][0] = d, shapes[n_shapes][1] = k, n_shapes++;
            a++;
        } else if (!strcmp(argv[a], "--model-shapes") && v) {
            if (parse_list(v, model, 5) != 5) { fprintf(stderr, "bad --model-shapes %s\n", v); return 2; }
            a++;
        } else {
            fprintf(stderr, "usage: %s [--threads N] [--dtype bf16|f16|f32] [--n 1,4,16] [--shape DxK ...] [--secs S] "
                            "[--model-shapes DIM,FFN,KVDIM,VOCAB,LAYERS]\n", argv[0]);
            return 2;
        }
    }
    const int64_t dim = model[0], ffn = model[1], kvd = model[2], vocab = model[3], layers = model[4];
    /* the model's distinct shapes, with how many of each one forward pass runs */
    const int64_t mshape[5][3] = {{dim, dim, 2 * layers}, {kvd, dim, 2 * layers}, {ffn, dim, 2 * layers},
                                  {dim, ffn, layers}, {vocab, dim, 1}};
    if (n_shapes == 0)
        for (int s = 0; s < 5; s++) shapes[n_shapes][0] = mshape[s][0], shapes[n_shapes][1] = mshape[s][1], n_shapes++;

    cf_backend_params p = cf_backend_default_params();
    p.device = CF_DEVICE_CPU;
    p.n_threads = threads;
    cf_backend *be = NULL;
    cinfer_error err = {0};
    if (cf_backend_create(&p, &be, &err) != CINFER_OK) {
        fprintf(stderr, "backend: %s\n", err.message);
        return 1;
    }
    int64_t nmax = 0;
    for (int i = 0; i < n_ns; i++) nmax = ns[i] > nmax ? ns[i] : nmax;
    printf("cpu matmul, %s weights, %d threads; GFLOP/s (2*n*d*k per call)\n", cf_dtype_name(wdt), threads);
    printf("%-12s", "d x k");
    for (int i = 0; i < n_ns; i++) printf(" %9s%-4lld", "n=", (long long)ns[i]);
    printf("\n");
    double sec_of[MAX_SHAPES][MAX_NS];
    int status = 0;
    for (int s = 0; s < n_shapes && !status; s++) {
        const int64_t d = shapes[s][0], k = shapes[s][1];
        const size_t wbytes = (size_t)(d * k) * cf_dtype_size(wdt);
        int n_w = (int)((256u << 20) / wbytes) + 1;  /* copies that together exceed any last-level cache */
        if (n_w > 64) n_w = 64;
        cf_tensor w[64], x, out;
        int made = 0;
        float *host = malloc(wbytes > (size_t)(nmax * k) * 4 ? wbytes : (size_t)(nmax * k) * 4);
        if (!host) { status = 1; break; }
        for (; made < n_w; made++) {
            if (be->ops->alloc(be, wdt, d, k, &w[made], &err) != CINFER_OK) break;
            if (made == 0) {
                for (int64_t i = 0; i < d * k; i++) {
                    float f = frand() * 0.05f;
                    if (wdt == CF_F32) host[i] = f;
                    else ((uint16_t *)host)[i] = wdt == CF_BF16 ? cf_f32_to_bf16(f) : cf_f32_to_f16(f);
                }
            }
            be->ops->write(be, w[made], host);
        }
        if (made < n_w || be->ops->alloc(be, CF_F32, nmax, k, &x, &err) != CINFER_OK) {
            fprintf(stderr, "alloc: %s\n", err.message);
            status = 1;
        } else if (be->ops->alloc(be, CF_F32, nmax, d, &out, &err) != CINFER_OK) {
            fprintf(stderr, "alloc: %s\n", err.message);
            be->ops->free_tensor(be, &x);
            status = 1;
        } else {
            for (int64_t i = 0; i < nmax * k; i++) host[i] = frand();
            be->ops->write(be, x, host);
            char name[32];
            snprintf(name, sizeof name, "%lldx%lld", (long long)d, (long long)k);
            printf("%-12s", name);
            for (int i = 0; i < n_ns; i++) {
                sec_of[s][i] = time_matmul(be, cf_rows(out, 0, ns[i]), cf_rows(x, 0, ns[i]), w, n_w, secs);
                printf(" %13.1f", 2.0 * (double)(ns[i] * d * k) / sec_of[s][i] * 1e-9);
                fflush(stdout);
            }
            printf("\n");
            be->ops->free_tensor(be, &x);
            be->ops->free_tensor(be, &out);
        }
        for (int i = 0; i < made; i++) be->ops->free_tensor(be, &w[i]);
        free(host);
    }
    /* one forward pass's matmuls, when the default shapes were run */
    if (!status && n_shapes == 5 && shapes[4][0] == vocab) {
        printf("%-12s", "model step");
        double t1 = 0;
        for (int i = 0; i < n_ns; i++) {
            double t = 0, fl = 0;
            for (int s = 0; s < 5; s++) {
                t += (double)mshape[s][2] * sec_of[s][i];
                fl += (double)mshape[s][2] * 2.0 * (double)(ns[i] * mshape[s][0] * mshape[s][1]);
            }
            if (i == 0) t1 = t;
            printf(" %13.1f", fl / t * 1e-9);
            sec_of[0][i] = t;
        }
        printf("   GFLOP/s\n%-12s", "  tokens/s");
        for (int i = 0; i < n_ns; i++) printf(" %13.1f", (double)ns[i] / sec_of[0][i]);
        printf("   (matmuls only)\n%-12s", "  speedup");
        for (int i = 0; i < n_ns; i++) printf(" %13.2f", t1 * (double)ns[i] / sec_of[0][i] / (double)ns[0]);
        printf("   (tokens/s over the first column's)\n");
    }
    cf_backend_destroy(be);
    return status;
}
