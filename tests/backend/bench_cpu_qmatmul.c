/* bench_cpu_qmatmul.c: a benchmark, not a test (no ctest entry): the quantized CPU matmul (cf_cpu_qgemm) for
 * the weight shapes of a model (default Llama-3.2-1B: q/o 2048x2048, k/v 512x2048, gate/up 8192x2048, down
 * 2048x8192, lm_head 128256x2048), 4 and 8 bits, group 64 (bf16 scales and biases), split between threads
 * by rows at multiples of 16 as the backend does. n = 1 (decode) is reported as GB/s of packed weights,
 * scales and biases streamed, next to the machine's read bandwidth measured here (a read-only pass over
 * 512 MiB with the same threads); n > 1 as GFLOP/s (2 * n * d * k per call). Each timed call reads the
 * next of several weight copies that together exceed the last-level cache; each figure is the best of
 * batches of calls of at least 10 ms over --secs seconds. The last line weighs the shapes as one forward
 * pass does: the decode step's matmul-only tokens/s.
 *   bench_cpu_qmatmul [--threads 1,2] [--bits 4,8] [--group 64] [--n 1,16,64] [--secs S] [--shape DxK ...]
 *                     [--isa c|avx2|avx512] [--unpacked] [--model-shapes DIM,FFN,KVDIM,VOCAB,LAYERS]
 * --unpacked: the weights as the file has them, not also regrouped by cf_cpu_qpack (as the backend does
 * where the AVX-512 VNNI kernels run). */
#include "backend/cpu/cpu_quant.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

enum { MAX_LIST = 16 };

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t rs = 0x2545F4914F6CDD1Dull;
static uint32_t urand(void) {
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return (uint32_t)(rs >> 32);
}

static int parse_list(const char *s, int64_t *out, int cap) {
    int n = 0;
    while (*s && n < cap) {
        char *end;
        long long v = strtoll(s, &end, 10);
        if (end == s || v <= 0) return -1;
        out[n++] = v;
        if (*end && *end != ',') return -1;
        s = *end == ',' ? end + 1 : end;
    }
    return n;
}

/* read-only pass: bytes/s over buf with T threads (each its own contiguous part) */
#if defined(__x86_64__)
__attribute__((target("avx2"))) static uint64_t read_part(const char *p, size_t bytes) {
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i + 128 <= bytes; i += 128) {
        a0 = _mm256_xor_si256(a0, _mm256_load_si256((const __m256i *)(p + i)));
        a1 = _mm256_xor_si256(a1, _mm256_load_si256((const __m256i *)(p + i + 32)));
        a2 = _mm256_xor_si256(a2, _mm256_load_si256((const __m256i *)(p + i + 64)));
        a3 = _mm256_xor_si256(a3, _mm256_load_si256((const __m256i *)(p + i + 96)));
    }
    a0 = _mm256_xor_si256(_mm256_xor_si256(a0, a1), _mm256_xor_si256(a2, a3));
    return (uint64_t)_mm256_extract_epi64(a0, 0) ^ (uint64_t)_mm256_extract_epi64(a0, 3);
}
#else
static uint64_t read_part(const char *p, size_t bytes) {
    uint64_t a = 0;
    for (size_t i = 0; i + 8 <= bytes; i += 8) a ^= *(const uint64_t *)(p + i);
    return a;
}
#endif

static volatile uint64_t sink;

static double read_bandwidth(int threads, double secs) {
    const size_t bytes = (size_t)512 << 20;
    char *buf = aligned_alloc(64, bytes);
    if (!buf) return 0;
    memset(buf, 1, bytes);
    double best = 1e9;
    const double t_end = now() + secs;
    do {
        const double t0 = now();
        #pragma omp parallel num_threads(threads)
        {
            const size_t t = (size_t)omp_get_thread_num(), T = (size_t)omp_get_num_threads();
            const size_t a = bytes / T * t & ~(size_t)127, e = t + 1 == T ? bytes : bytes / T * (t + 1) & ~(size_t)127;
            sink ^= read_part(buf + a, e - a);
        }
        const double dt = now() - t0;
        if (dt < best) best = dt;
    } while (now() < t_end);
    free(buf);
    return (double)bytes / best;
}

typedef struct qcopy {
    uint32_t *q;
    uint16_t *s, *b;
    uint8_t *tiles; /* cf_cpu_qpack's copy, as the backend makes it (NULL: --unpacked, or not useful here) */
} qcopy;

static int isa_forced = -1, unpacked = 0;

static void run(const float *x, int64_t n, const cf_qmat *w, float *out, int threads) {
    const int64_t blocks = (w->rows + 15) / 16;
    #pragma omp parallel num_threads(threads)
    {
        const int64_t t = omp_get_thread_num(), T = omp_get_num_threads();
        const int64_t j0 = blocks * t / T * 16, j1e = blocks * (t + 1) / T * 16, j1 = j1e < w->rows ? j1e : w->rows;
        if (j1 > j0) {
            if (isa_forced >= 0) cf_cpu_qgemm_isa((cf_cpu_isa_level)isa_forced, x, w->cols, n, w, j0, j1, out + j0, w->rows);
            else cf_cpu_qgemm(x, w->cols, n, w, j0, j1, out + j0, w->rows);
        }
    }
}

/* seconds per call, cycling through the copies: the fastest of the timed batches */
static double time_q(const float *x, int64_t n, cf_qmat *w, const qcopy *cp, int n_cp, float *out, int threads,
                     double secs) {
    w->q = cp[0].q, w->scales = cp[0].s, w->biases = cp[0].b, w->tiles = cp[0].tiles;
    run(x, n, w, out, threads); /* warm-up: threads, page faults */
    double best = 1e9;
    int per = 1, cur = 0, samples = 0;
    const double t_end = now() + secs;
    do {
        const double t0 = now();
        for (int i = 0; i < per; i++) {
            w->q = cp[cur].q, w->scales = cp[cur].s, w->biases = cp[cur].b, w->tiles = cp[cur].tiles;
            run(x, n, w, out, threads);
            cur = (cur + 1) % n_cp;
        }
        const double dt = (now() - t0) / per;
        if (dt * per < 0.01 && per < (1 << 20)) per *= 2;
        else {
            samples++;
            if (dt < best) best = dt;
        }
    } while (now() < t_end || samples < 3);
    return best;
}

int main(int argc, char **argv) {
    int64_t threads[MAX_LIST] = {1, 2}, bits[MAX_LIST] = {4, 8}, ns[MAX_LIST] = {1, 16, 64};
    int n_threads = 2, n_bits = 2, n_ns = 3, group = 64;
    double secs = 0.5;
    int64_t shapes[MAX_LIST][2];
    int n_shapes = 0;
    int64_t model[5] = {2048, 8192, 512, 128256, 16}; /* Llama-3.2-1B: dim, ffn, kv dim, vocab, layers */
    for (int a = 1, used; a < argc; a += used) {
        const char *v = a + 1 < argc ? argv[a + 1] : NULL;
        int ok = v != NULL;
        used = 2; /* the flag and its value */
        if (!strcmp(argv[a], "--threads") && v) ok = (n_threads = parse_list(v, threads, MAX_LIST)) > 0;
        else if (!strcmp(argv[a], "--bits") && v) ok = (n_bits = parse_list(v, bits, MAX_LIST)) > 0;
        else if (!strcmp(argv[a], "--n") && v) ok = (n_ns = parse_list(v, ns, MAX_LIST)) > 0;
        else if (!strcmp(argv[a], "--group") && v) group = atoi(v), ok = group == 32 || group == 64 || group == 128;
        else if (!strcmp(argv[a], "--secs") && v) secs = atof(v);
        else if (!strcmp(argv[a], "--isa") && v)
            isa_forced = !strcmp(v, "c") ? CF_ISA_C : !strcmp(v, "avx2") ? CF_ISA_AVX2 : CF_ISA_AVX512;
        else if (!strcmp(argv[a], "--unpacked")) unpacked = 1, ok = 1, used = 1;
        else if (!strcmp(argv[a], "--model-shapes") && v) ok = parse_list(v, model, 5) == 5;
        else if (!strcmp(argv[a], "--shape") && v && n_shapes < MAX_LIST) {
            long long d, k;
            ok = sscanf(v, "%lldx%lld", &d, &k) == 2 && d > 0 && k > 0;
            shapes[n_shapes][0] = d, shapes[n_shapes][1] = k, n_shapes++;
        } else ok = 0;
        if (!ok) {
            fprintf(stderr, "usage: %s [--threads 1,2] [--bits 4,8] [--group 64] [--n 1,16,64] [--secs S] [--shape DxK ...] "
                            "[--isa c|avx2|avx512] [--unpacked] [--model-shapes DIM,FFN,KVDIM,VOCAB,LAYERS]\n", argv[0]);
            return 2;
        }
    }
    if (isa_forced >= 0 && !cf_cpu_isa_available((cf_cpu_isa_level)isa_forced)) {
        fprintf(stderr, "this CPU lacks the requested instruction set\n");
        return 1;
    }
    const int64_t dim = model[0], ffn = model[1], kvd = model[2], vocab = model[3], layers = model[4];
    const int64_t mshape[5][3] = {{dim, dim, 2 * layers}, {kvd, dim, 2 * layers}, {ffn, dim, 2 * layers},
                                  {dim, ffn, layers}, {vocab, dim, 1}};
    const int model_run = n_shapes == 0;
    if (model_run)
        for (int s = 0; s < 5; s++) shapes[n_shapes][0] = mshape[s][0], shapes[n_shapes][1] = mshape[s][1], n_shapes++;
    int64_t nmax = 1, kmax = 1, dmax = 1;
    for (int i = 0; i < n_ns; i++) nmax = ns[i] > nmax ? ns[i] : nmax;
    for (int s = 0; s < n_shapes; s++) {
        dmax = shapes[s][0] > dmax ? shapes[s][0] : dmax;
        kmax = shapes[s][1] > kmax ? shapes[s][1] : kmax;
    }
    for (int s = 0; s < n_shapes; s++)
        if (shapes[s][1] % group) {
            fprintf(stderr, "k = %lld is not a multiple of the group %d\n", (long long)shapes[s][1], group);
            return 2;
        }
    float *x = malloc(sizeof(float) * (size_t)(nmax * kmax)), *out = malloc(sizeof(float) * (size_t)(nmax * dmax));
    if (!x || !out) return 1;
    for (int64_t i = 0; i < nmax * kmax; i++) x[i] = (float)(urand() % 2001) / 1000.0f - 1.0f;
    const char *isa = isa_forced < 0 ? cf_cpu_isa() : isa_forced == 0 ? "portable C" : isa_forced == 1 ? "avx2+fma" : "avx512";
    printf("cpu quantized matmul (%s), group %d, bf16 scales/biases; n=1: GB/s of packed weights+scales+biases "
           "(and %% of read bandwidth), n>1: GFLOP/s\n", isa, group);
    for (int ti = 0; ti < n_threads; ti++) {
        const int T = (int)threads[ti];
        const double bw = read_bandwidth(T, 1.0);
        printf("\n%d thread%s: read bandwidth %.1f GB/s (read-only pass over 512 MiB)\n", T, T > 1 ? "s" : "", bw * 1e-9);
        for (int bi = 0; bi < n_bits; bi++) {
            const int B = (int)bits[bi];
            printf("q%d %-14s", B, "d x k");
            for (int i = 0; i < n_ns; i++) printf(" %11s%-5lld", "n=", (long long)ns[i]);
            printf("\n");
            double step_t[MAX_LIST] = {0}, step_fl[MAX_LIST] = {0};
            for (int s = 0; s < n_shapes; s++) {
                const int64_t d = shapes[s][0], k = shapes[s][1];
                const size_t qbytes = (size_t)(d * k * B / 8), sbytes = (size_t)(d * (k / group)) * 2;
                const size_t total = qbytes + 2 * sbytes;
                int n_cp = (int)(((size_t)384 << 20) / total) + 1;
                if (n_cp > 64) n_cp = 64;
                qcopy cp[64];
                int made = 0;
                for (; made < n_cp; made++) {
                    cp[made].q = malloc(qbytes);
                    cp[made].s = malloc(sbytes);
                    cp[made].b = malloc(sbytes);
                    if (!cp[made].q || !cp[made].s || !cp[made].b) {
                        free(cp[made].q), free(cp[made].s), free(cp[made].b);
                        break;
                    }
                    for (size_t i = 0; i < qbytes / 4; i++) cp[made].q[i] = urand();
                    for (size_t i = 0; i < sbytes / 2; i++) {
                        const float sc = 0.001f + 0.002f * (float)(urand() % 1000) / 1000.0f;
                        cp[made].s[i] = cf_f32_to_bf16(sc);
                        cp[made].b[i] = cf_f32_to_bf16(-sc * (float)((1 << B) - 1) / 2);
                    }
                }
                if (made == 0) {
                    fprintf(stderr, "out of memory\n");
                    return 1;
                }
                cf_qmat w = {.sb_dtype = CF_BF16, .bits = B, .group = group, .rows = d, .cols = k};
                for (int i = 0; i < made; i++) {
                    const cf_qmat wi = {.q = cp[i].q, .scales = cp[i].s, .biases = cp[i].b, .sb_dtype = CF_BF16, .bits = (int)B,
                                        .group = group, .rows = d, .cols = k};
                    cp[i].tiles = !unpacked && cf_cpu_qpack_useful() ? cf_cpu_qpack(&wi) : NULL;
                }
                char name[40];
                snprintf(name, sizeof name, "%lldx%lld", (long long)d, (long long)k);
                printf("   %-14s", name);
                for (int i = 0; i < n_ns; i++) {
                    const double t = time_q(x, ns[i], &w, cp, made, out, T, secs);
                    if (ns[i] == 1) printf(" %6.1f (%3.0f%%)  ", (double)total / t * 1e-9, 100.0 * (double)total / t / bw);
                    else printf(" %16.1f", 2.0 * (double)(ns[i] * d * k) / t * 1e-9);
                    fflush(stdout);
                    if (model_run) {
                        step_t[i] += (double)mshape[s][2] * t;
                        step_fl[i] += (double)mshape[s][2] * 2.0 * (double)(ns[i] * d * k);
                    }
                }
                printf("\n");
                for (int i = 0; i < made; i++) free(cp[i].q), free(cp[i].s), free(cp[i].b), free(cp[i].tiles);
            }
            if (model_run) {
                printf("   %-14s", "model step");
                for (int i = 0; i < n_ns; i++) printf(" %10.1f tok/s", (double)ns[i] / step_t[i]);
                printf("   (matmuls only)\n");
            }
        }
    }
    free(x);
    free(out);
    return 0;
}
