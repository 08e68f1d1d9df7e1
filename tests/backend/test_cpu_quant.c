/* test_cpu_quant.c: cf_cpu_qgemm (MLX affine-quantized weights) on every instruction set this CPU runs:
 *  - hand-computed packings of values that straddle words (3, 5, 6 bits) and of 2/4/8-bit rows;
 *  - accuracy of every bits x group x scale/bias dtype (bf16, f16, f32) against references in double
 *    precision written here (their own bit packer and unpacker): 2, 3, 5, 6 bits, a dequantize-then-dot
 *    within the f32 rounding bound (k / 16 + 6) * 2^-24 * sum_c |x_c * w_c| (dequantization: one rounding;
 *    each of the 16 lanes: k / 16 fma roundings; the tree: 4 additions; one spare); 4 and 8 bits, the int8
 *    definition of cpu_quant.h (x quantized here) within the rounding of its f32 chain, and that value
 *    within the activation quantization error (d / 2 per column, times |w|) of the plain dot product;
 *  - every instruction set against the portable C path, bit for bit, for odd n (1: the decode kernel; 2 to
 *    63 for 4 bits, 2 to 15 for 8: the small-batch kernel, 5 as 4 + 1; above: the tiled kernel, register
 *    tiles of 6 rows of x with every remainder 0..5 (4 bits: 64, 67, 68, 69, 101; 8 bits: 17, 33, 37, 50,
 *    64), more than one panel of x), row ranges r0..r1 that leave partial blocks, strided x and out (nothing written outside);
 *  - batch invariance: each row of a batch bit-identical to the same row computed alone (n = 1, the decode
 *    path) and to the rows computed in pieces of r0..r1, on every instruction set;
 *  - the rows split between 3 OpenMP threads as the backend splits them: the same bits. */
#include "backend/cpu/cpu_quant.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../check.h"

static const char *isa_names[] = {"C", "AVX2", "AVX-512"};
static const int all_bits[] = {2, 3, 4, 5, 6, 8};
static const int all_groups[] = {32, 64, 128};
static const cf_dtype sb_types[] = {CF_BF16, CF_F16, CF_F32};

static uint64_t rs = 12345;
static uint32_t urand(void) {
    rs = rs * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rs >> 33);
}
static float frand(void) { return (float)(urand() % 2001) / 1000.0f - 1.0f; } /* [-1, 1] */

/* the test's own packer: value v at bit c * bits of the row, little-endian from the lowest bits */
static void put_bits(uint32_t *row, int bits, int64_t c, uint32_t v) {
    for (int b = 0; b < bits; b++) {
        const int64_t bit = c * bits + b;
        if (v >> b & 1) row[bit / 32] |= 1u << (bit % 32);
    }
}
static uint32_t get_bits(const uint32_t *row, int bits, int64_t c) {
    uint32_t v = 0;
    for (int b = 0; b < bits; b++) {
        const int64_t bit = c * bits + b;
        v |= (row[bit / 32] >> (bit % 32) & 1u) << b;
    }
    return v;
}

/* a random quantized matrix with its values as the kernels see them; owned by the caller (qm_free) */
typedef struct qm {
    cf_qmat m;
    uint32_t *q;
    void *s, *b;
    double *sd, *bd; /* scales and biases as the dtype holds them */
} qm;

static void sb_store(void *p, cf_dtype t, int64_t i, float v, double *back) {
    if (t == CF_F32) ((float *)p)[i] = v, back[i] = v;
    else if (t == CF_BF16) ((uint16_t *)p)[i] = cf_f32_to_bf16(v), back[i] = cf_bf16_to_f32(((uint16_t *)p)[i]);
    else ((uint16_t *)p)[i] = cf_f32_to_f16(v), back[i] = cf_f16_to_f32(((uint16_t *)p)[i]);
}

static int qm_make(qm *a, int64_t rows, int64_t cols, int bits, int group, cf_dtype sbt) {
    memset(a, 0, sizeof *a);
    const int64_t wpr = cols * bits / 32, ng = cols / group;
    a->q = calloc((size_t)(rows * wpr), 4); /* exact sizes: ASan sees any read past the end */
    a->s = malloc((size_t)(rows * ng) * cf_dtype_size(sbt));
    a->b = malloc((size_t)(rows * ng) * cf_dtype_size(sbt));
    a->sd = malloc(sizeof(double) * (size_t)(rows * ng));
    a->bd = malloc(sizeof(double) * (size_t)(rows * ng));
    if (!a->q || !a->s || !a->b || !a->sd || !a->bd) return 0;
    const uint32_t qmax = (1u << bits) - 1;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) put_bits(a->q + r * wpr, bits, c, urand() % (qmax + 1));
    for (int64_t i = 0; i < rows * ng; i++) {
        /* as MLX's affine quantization makes them: a scale of (max - min) / qmax, a bias near min */
        const float scale = (0.02f + 0.2f * (float)(urand() % 1000) / 1000.0f) / (float)qmax * (urand() % 4 ? 1.0f : -1.0f);
        sb_store(a->s, sbt, i, scale, a->sd);
        sb_store(a->b, sbt, i, -scale * (float)qmax * 0.5f + 0.01f * frand(), a->bd);
    }
    a->m = (cf_qmat){.q = a->q, .scales = a->s, .biases = a->b, .sb_dtype = sbt, .bits = bits, .group = group,
                     .rows = rows, .cols = cols};
    return 1;
}

static void qm_free(qm *a) {
    free(a->q);
    free(a->s);
    free(a->b);
    free(a->sd);
    free(a->bd);
}

/* dequantize-then-dot in double; *mag = sum |x * w| */
static double ref_dot(const qm *a, int64_t r, const float *x, double *mag) {
    const cf_qmat *m = &a->m;
    const int64_t wpr = m->cols * m->bits / 32, ng = m->cols / m->group;
    double s = 0, am = 0;
    for (int64_t c = 0; c < m->cols; c++) {
        const int64_t g = r * ng + c / m->group;
        const double w = a->sd[g] * (double)get_bits(m->q + r * wpr, m->bits, c) + a->bd[g];
        s += (double)x[c] * w;
        am += fabs((double)x[c] * w);
    }
    *mag = am;
    return s;
}

/* 4 and 8 bits: the definition of cpu_quant.h in double, given the same int8 rows of x (quantized here as it
 * says). Returns its value; *mag = the sum of the magnitudes of its terms, *bound = the f32 rounding of the
 * kernels' chain (one rounding per block product s * d and per fma: (2 * blocks + groups + 1) * 2^-24 * mag).
 * Checks, as it goes, that this value is within the activation quantization error of the plain dot product
 * (ref_dot): |x - d * q| <= d * (0.5 + 2^-12) per column, times |w|. */
static double ref_int8(const qm *a, int64_t r, const float *x, double *mag, double *bound) {
    const cf_qmat *m = &a->m;
    const int64_t nb = m->cols / 32, ng = m->cols / m->group, wpr = m->cols * m->bits / 32;
    double v = 0, am = 0, act = 0;
    float xsg = 0;
    for (int64_t b = 0; b < nb; b++) {
        const float *xb = x + b * 32;
        float amax = 0;
        for (int j = 0; j < 32; j++) amax = fabsf(xb[j]) > amax ? fabsf(xb[j]) : amax;
        const float id = amax > 0 ? 127.0f / amax : 0.0f, d = amax / 127.0f;
        const int64_t g = b * 32 / m->group;
        const float s = (float)a->sd[r * ng + g], bias = (float)a->bd[r * ng + g];
        int64_t p = 0, sum = 0;
        for (int j = 0; j < 32; j++) {
            const int q = (int)rintf(xb[j] * id);
            const int64_t c = b * 32 + j;
            p += (int64_t)get_bits(m->q + r * wpr, m->bits, c) * q, sum += q;
            act += fabs(a->sd[r * ng + g] * (double)get_bits(m->q + r * wpr, m->bits, c) + a->bd[r * ng + g]) * d * (0.5 + 1.0 / 4096);
        }
        const float c = s * d;
        v += (double)p * c, am += fabs((double)p * c);
        xsg = fmaf(d, (float)sum, xsg); /* the group's sum of x, as the kernels chain it */
        if ((b + 1) * 32 % m->group == 0) v += (double)bias * xsg, am += fabs((double)bias * xsg), xsg = 0;
    }
    *mag = am;
    *bound = (double)(2 * nb + ng + 1) * ldexp(1.0, -24) * am;
    double plain_mag;
    const double plain = ref_dot(a, r, x, &plain_mag);
    const double slack = act + (double)(2 * nb + 2 * ng + 8) * ldexp(1.0, -24) * (am + plain_mag);
    CHECK(fabs(v - plain) <= slack, "%d bits group %d row %lld: int8 definition %.9g, plain dot %.9g: beyond the activation bound %.3g",
          m->bits, m->group, (long long)r, v, plain, slack);
    return v;
}

/* hand-computed packings: a value straddling words 0 and 1 at bit 30, read through a one-hot x */
static void test_hand_packings(void) {
    static const struct {
        int bits, c;
        uint32_t w0, w1, want;
    } cases[] = {
        {3, 10, 1u << 30, 1, 5},        /* 0b101: bits 30, 31 = 01, bit 32 = 1 */
        {5, 6, 2u << 30, 5, 22},        /* 0b10110: bits 30, 31 = 10, bits 32-34 = 101 */
        {6, 5, 3u << 30, 14, 59},       /* 0b111011: bits 30, 31 = 11, bits 32-35 = 1110 */
        {2, 15, 3u << 30, 0, 3},        /* the top 2 bits of word 0 */
        {4, 9, 0, 0xAu << 4, 10},       /* value 9: word 1, bits 4-7 */
        {8, 6, 0, 0xC8u << 16, 200},    /* value 6: word 1, bits 16-23 */
    };
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
        const int bits = cases[t].bits, G = 32;
        uint32_t q[8] = {0};  /* one row of 32 values: bits words */
        q[0] = cases[t].w0, q[1] = cases[t].w1;
        const float s = 1.0f, b = 0.0f;
        const cf_qmat m = {.q = q, .scales = &s, .biases = &b, .sb_dtype = CF_F32, .bits = bits, .group = G,
                           .rows = 1, .cols = 32};
        for (int isa = 0; isa < 3; isa++) {
            for (int c = 0; c < 32; c++) {
                float x[32] = {0}, out = -1;
                x[c] = 1.0f;
                if (!cf_cpu_qgemm_isa((cf_cpu_isa_level)isa, x, 32, 1, &m, 0, 1, &out, 1)) break;
                const float want = c == cases[t].c ? (float)cases[t].want : 0.0f;
                CHECK(out == want, "%s %d bits: value %d is %g, want %g", isa_names[isa], bits, c, out, want);
            }
        }
    }
}

/* accuracy, ISA agreement with C, batch invariance and strides for one matrix */
static void test_matrix(int bits, int group, cf_dtype sbt, int64_t rows, int64_t cols) {
    enum { NMAX = 101 };
    static const int ns[] = {1, 2, 3, 5, 8, 17, 33, 37, 50, 64, 67, 68, 69, NMAX};
    qm a;
    const int64_t xs = cols + 7, os = rows + 3;
    float *x = malloc(sizeof(float) * (size_t)(NMAX * xs));
    float *ref = malloc(sizeof(float) * (size_t)(NMAX * os)), *out = malloc(sizeof(float) * (size_t)(NMAX * os));
    float *one = malloc(sizeof(float) * (size_t)os);
    if (!x || !ref || !out || !one || !qm_make(&a, rows, cols, bits, group, sbt)) {
        CHECK(0, "out of memory");
        goto done;
    }
    for (int64_t i = 0; i < NMAX * xs; i++) x[i] = frand();
    /* the C path for all NMAX rows and all weight rows: the reference for every other computation */
    cf_cpu_qgemm_isa(CF_ISA_C, x, xs, NMAX, &a.m, 0, rows, ref, os);
    double worst = 0;
    for (int64_t i = 0; i < NMAX; i++)
        for (int64_t r = 0; r < rows; r++) {
            double mag, bound;
            const double want = bits == 4 || bits == 8 ? ref_int8(&a, r, x + i * xs, &mag, &bound)
                                                       : ref_dot(&a, r, x + i * xs, &mag);
            if (bits != 4 && bits != 8) bound = ((double)cols / 16 + 6) * ldexp(1.0, -24) * mag;
            const double err = fabs((double)ref[i * os + r] - want);
            if (mag > 0 && err / mag > worst) worst = err / mag;
            if (!(err <= bound)) {
                CHECK(0, "%d bits group %d %s %lldx%lld: row %lld col %lld: %.9g, reference %.9g (error %.3g > bound %.3g)",
                      bits, group, cf_dtype_name(sbt), (long long)rows, (long long)cols, (long long)i, (long long)r,
                      ref[i * os + r], want, err, bound);
                goto done;
            }
        }
    checks++;
    /* the instruction sets, then AVX2 and AVX-512 again with the weights packed as the backend packs them */
    uint8_t *tiles = (bits == 4 || bits == 8) && cf_cpu_qpack_useful() ? cf_cpu_qpack(&a.m) : NULL;
    for (int v = 0; v < 5; v++) {
        const int isa = v < 3 ? v : v == 3 ? CF_ISA_AVX2 : CF_ISA_AVX512;
        const char *name = v < 3 ? isa_names[isa] : v == 3 ? "AVX2 packed" : "AVX-512 packed";
        if (v >= 3 && !tiles) break;
        a.m.tiles = v >= 3 ? tiles : NULL;
        /* the whole batch at each n, then every row alone and in pieces of the weight rows */
        for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
            const int n = ns[ni];
            for (int64_t i = 0; i < NMAX * os; i++) out[i] = -1234.5f;
            if (!cf_cpu_qgemm_isa((cf_cpu_isa_level)isa, x, xs, n, &a.m, 0, rows, out, os)) goto next_isa;
            int bad = 0;
            for (int64_t i = 0; i < n && !bad; i++) {
                bad = memcmp(out + i * os, ref + i * os, sizeof(float) * (size_t)rows) != 0;
                for (int64_t r = rows; r < os; r++) bad |= out[i * os + r] != -1234.5f;
            }
            for (int64_t i = n; i < NMAX && !bad; i++) bad = out[i * os] != -1234.5f;
            CHECK(!bad, "%s %d bits group %d %s %lldx%lld n=%d: differs from the C path (or wrote outside)", name,
                  bits, group, cf_dtype_name(sbt), (long long)rows, (long long)cols, n);
        }
        /* row ranges: pieces of 1, 5 and 7 rows from odd offsets, a later row of x alone (n = 1) and in a
         * batch of 3 starting there */
        for (int piece = 1; piece <= 7; piece += piece == 1 ? 4 : 2) {
            for (int64_t r0 = 0; r0 < rows; r0 += piece) {
                const int64_t r1 = r0 + piece < rows ? r0 + piece : rows;
                const int64_t i = (r0 * 7) % (NMAX - 3);
                cf_cpu_qgemm_isa((cf_cpu_isa_level)isa, x + i * xs, xs, 1, &a.m, r0, r1, one, 1);
                CHECK(!memcmp(one, ref + i * os + r0, sizeof(float) * (size_t)(r1 - r0)),
                      "%s %d bits group %d %s: row %lld of x alone, weight rows %lld..%lld differ from the batch",
                      name, bits, group, cf_dtype_name(sbt), (long long)i, (long long)r0, (long long)r1);
                cf_cpu_qgemm_isa((cf_cpu_isa_level)isa, x + i * xs, xs, 3, &a.m, r0, r1, out, os);
                int bad = 0;
                for (int t = 0; t < 3; t++) bad |= memcmp(out + t * os, ref + (i + t) * os + r0, sizeof(float) * (size_t)(r1 - r0));
                CHECK(!bad, "%s %d bits group %d %s: rows %lld..%lld of x, weight rows %lld..%lld differ from the batch",
                      name, bits, group, cf_dtype_name(sbt), (long long)i, (long long)i + 3, (long long)r0,
                      (long long)r1);
            }
        }
    next_isa:;
    }
    a.m.tiles = NULL;
    free(tiles);
    if (worst > 0 && getenv("CF_TEST_VERBOSE"))
        printf("  %d bits group %3d %-4s %lldx%lld: worst error / sum|x*w| %.3g\n", bits, group, cf_dtype_name(sbt),
               (long long)rows, (long long)cols, worst);
done:
    qm_free(&a);
    free(x);
    free(ref);
    free(out);
    free(one);
}

/* the rows split between 3 threads as the backend splits them (whole blocks of 16 rows), through
 * cf_cpu_qgemm (the kernel in use; packed: with cf_cpu_qpack's copy, as the backend has it where AVX2 or
 * AVX-512 runs): the same bits as the C path on one thread */
static void test_threads(int bits, int64_t n, int packed) {
    const int64_t rows = 100, cols = 512, blocks = (rows + 15) / 16;
    qm a;
    float *x = malloc(sizeof(float) * (size_t)(n * cols));
    float *ref = malloc(sizeof(float) * (size_t)(n * rows)), *out = malloc(sizeof(float) * (size_t)(n * rows));
    if (!x || !ref || !out || !qm_make(&a, rows, cols, bits, 64, CF_BF16)) {
        CHECK(0, "out of memory");
    } else {
        for (int64_t i = 0; i < n * cols; i++) x[i] = frand();
        cf_cpu_qgemm_isa(CF_ISA_C, x, cols, n, &a.m, 0, rows, ref, rows);
        a.m.tiles = packed ? cf_cpu_qpack(&a.m) : NULL;
        CHECK(!packed || a.m.tiles, "packing failed");
        #pragma omp parallel num_threads(3)
        {
            const int64_t t = omp_get_thread_num(), T = omp_get_num_threads();
            const int64_t j0 = blocks * t / T * 16, j1e = blocks * (t + 1) / T * 16, j1 = j1e < rows ? j1e : rows;
            if (j1 > j0) cf_cpu_qgemm(x, cols, n, &a.m, j0, j1, out + j0, rows);
        }
        CHECK(!memcmp(out, ref, sizeof(float) * (size_t)(n * rows)), "%d bits, n = %lld, 3 threads%s: differs from the C path",
              bits, (long long)n, packed ? ", packed" : "");
        free((void *)a.m.tiles);
    }
    qm_free(&a);
    free(x);
    free(ref);
    free(out);
}

/* a matrix that breaks the preconditions gives NaN, not garbage or a crash */
static void test_bad_matrix(void) {
    uint32_t q[64] = {0};
    const float s = 1, b = 0;
    float x[256] = {0}, out[2] = {0, 0};
    const cf_qmat bad[] = {
        {.q = q, .scales = &s, .biases = &b, .sb_dtype = CF_F32, .bits = 7, .group = 32, .rows = 1, .cols = 32},
        {.q = q, .scales = &s, .biases = &b, .sb_dtype = CF_F32, .bits = 4, .group = 256, .rows = 1, .cols = 256},
        {.q = q, .scales = &s, .biases = &b, .sb_dtype = CF_F32, .bits = 4, .group = 32, .rows = 1, .cols = 48},
        {.q = q, .scales = &s, .biases = &b, .sb_dtype = CF_I32, .bits = 4, .group = 32, .rows = 1, .cols = 32},
    };
    for (size_t t = 0; t < sizeof bad / sizeof bad[0]; t++) {
        cf_cpu_qgemm(x, 256, 1, &bad[t], 0, 1, out, 1);
        CHECK(isnan(out[0]), "bad matrix %zu: %g, want NaN", t, out[0]);
    }
    const cf_qmat ok = {.q = q, .scales = &s, .biases = &b, .sb_dtype = CF_F32, .bits = 4, .group = 32, .rows = 1, .cols = 32};
    cf_cpu_qgemm(x, 256, 1, &ok, 0, 2, out, 1); /* r1 past the rows */
    CHECK(isnan(out[0]) && isnan(out[1]), "rows 0..2 of a 1-row matrix: %g %g, want NaN", out[0], out[1]);
}

int main(void) {
    printf("instruction sets here:");
    for (int isa = 0; isa < 3; isa++)
        if (cf_cpu_isa_available((cf_cpu_isa_level)isa)) printf(" %s", isa_names[isa]);
    printf("\n");
    test_hand_packings();
    test_bad_matrix();
    for (size_t bi = 0; bi < sizeof all_bits / sizeof all_bits[0]; bi++)
        for (size_t gi = 0; gi < sizeof all_groups / sizeof all_groups[0]; gi++)
            for (size_t ti = 0; ti < sizeof sb_types / sizeof sb_types[0]; ti++) {
                const int bits = all_bits[bi], G = all_groups[gi];
                test_matrix(bits, G, sb_types[ti], 21, G);          /* one group; a partial block of rows */
                test_matrix(bits, G, sb_types[ti], 5, 3 * G);       /* fewer rows than a register tile */
                test_matrix(bits, G, sb_types[ti], 37, 256 + 2 * G); /* a partial 256-column step */
            }
    /* larger rows: several 256-column steps and blocks, long accumulation chains */
    for (size_t ti = 0; ti < sizeof sb_types / sizeof sb_types[0]; ti++) {
        test_matrix(4, 64, sb_types[ti], 35, 2048);
        test_matrix(8, 128, sb_types[ti], 19, 2048 + 128);
        test_matrix(3, 64, sb_types[ti], 9, 1024 + 64);
    }
    for (int bits = 4; bits <= 8; bits += 4)
        for (int64_t n = 1; n <= 40; n += 13) {
            test_threads(bits, n, 0);
            if (cf_cpu_qpack_useful()) test_threads(bits, n, 1);
        }
    printf("%d checks, %d failures\n", checks, failures);
    return failures != 0;
}
