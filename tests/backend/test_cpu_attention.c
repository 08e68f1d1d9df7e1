/* test_cpu_attention.c: the CPU attention (cpu_attention.c) with each instruction set this CPU runs forced in
 * turn, against a two-pass double-precision softmax written out here: head dims 64/80/128/256 and 36 (a
 * vector tail), GQA ratios 1/4/8 (and 3: a partial group of 4), windows, softcap, 1 and many query rows,
 * contexts 1..2,000, ring caches that wrap, paged caches with shuffled block tables, caches of f32, bf16 and f16,
 * 1 and 3 threads (with key blocks split and merged where the rows leave threads idle); the scratch is reused
 * between calls. */
#include "backend/cpu/cpu_attention.h"
#include "backend/cpu/cpu_kernels.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../check.h"

static const char *isa_names[] = {"C", "AVX2", "AVX-512"};

static uint64_t rs = 11;
static float frand(void) {  /* [-1, 1] */
    rs = rs * 6364136223846793005ull + 1;
    return (float)((rs >> 40) % 2001) / 1000.0f - 1.0f;
}

/* out[i] of the call (k, v: f32), computed with doubles in two passes (max, then exp and sum) */
static void reference(const cf_attn_call *c, double *out) {
    const int G = c->n_heads / c->n_kv_heads;
    double *sc = malloc(sizeof(double) * 4096);
    for (int i = 0; i < c->n_rows && sc; i++) {
        const int p = c->pos ? c->pos[i] : c->pos0 + i;
        const int lo = c->window > 0 && p - c->window + 1 > 0 ? p - c->window + 1 : 0;
        for (int h = 0; h < c->n_heads; h++) {
            const float *q = c->q + (int64_t)i * c->qs + (int64_t)h * c->head_dim;
            double mx = -INFINITY, sum = 0;
            for (int j = lo; j <= p; j++) {
                int64_t r = j % c->cap;
                if (c->table) {
                    const int32_t *t = c->table + (int64_t)c->row_seq[i] * c->table_stride;
                    r = (int64_t)t[j / c->block] * c->block + j % c->block;
                }
                const float *k = (const float *)c->k + r * c->ks + (int64_t)(h / G) * c->head_dim;
                double s = 0;
                for (int d = 0; d < c->head_dim; d++) s += (double)q[d] * k[d];
                s *= c->scale;
                if (c->softcap > 0) s = c->softcap * tanh(s / c->softcap);
                sc[j - lo] = s;
                if (s > mx) mx = s;
            }
            for (int j = lo; j <= p; j++) sum += sc[j - lo] = exp(sc[j - lo] - mx);
            double *o = out + (int64_t)i * c->n_heads * c->v_head_dim + (int64_t)h * c->v_head_dim;
            for (int d = 0; d < c->v_head_dim; d++) o[d] = 0;
            for (int j = lo; j <= p; j++) {
                int64_t r = j % c->cap;
                if (c->table) {
                    const int32_t *t = c->table + (int64_t)c->row_seq[i] * c->table_stride;
                    r = (int64_t)t[j / c->block] * c->block + j % c->block;
                }
                const float *v = (const float *)c->v + r * c->vs + (int64_t)(h / G) * c->v_head_dim;
                for (int d = 0; d < c->v_head_dim; d++) o[d] += sc[j - lo] / sum * v[d];
            }
        }
    }
    free(sc);
}

typedef struct shape {
    int hd, G, kvh, n_rows, ctx, window, paged;
    int own;        /* paged: each row a sequence of its own (a batch of decoding sequences), at its own position */
    float softcap;
    cf_dtype kvt;   /* of the cache */
} shape;

static const char *kvt_name(cf_dtype t) { return t == CF_BF16 ? "bf16" : t == CF_F16 ? "f16" : "f32"; }

static cf_attn_scratch scratch;
static cf_workers *pool3;   /* 3 threads */

/* one shape: every instruction set and thread count against the reference */
static void run_shape(const shape *sh) {
    const int n_heads = sh->G * sh->kvh, hd = sh->hd, vhd = sh->hd, block = 16;
    const int last = sh->ctx - 1, first = last - sh->n_rows + 1;   /* rows at positions first..last */
    const int cap = sh->window > 0 ? sh->window + sh->n_rows + 3 : sh->ctx + 5;  /* a ring that wraps where windowed */
    const int n_blocks = (sh->ctx + block - 1) / block + 2;
    const int slots = sh->paged ? n_blocks * block : cap;
    const int64_t ks = (int64_t)sh->kvh * hd + 3, vs = (int64_t)sh->kvh * vhd + 5, qs = (int64_t)n_heads * hd + 1;
    const int64_t os = (int64_t)n_heads * vhd + 2;
    float *q = malloc(sizeof(float) * (size_t)(qs * sh->n_rows)), *k = malloc(sizeof(float) * (size_t)(ks * slots));
    float *v = malloc(sizeof(float) * (size_t)(vs * slots)), *out = malloc(sizeof(float) * (size_t)(os * sh->n_rows));
    float *first_out = malloc(sizeof(float) * (size_t)(os * sh->n_rows)), *alone = malloc(sizeof(float) * (size_t)os);
    double *ref = malloc(sizeof(double) * (size_t)(sh->n_rows * n_heads * vhd));
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)sh->n_rows), *rseq = calloc((size_t)sh->n_rows, sizeof(int32_t));
    const int n_seqs = sh->own ? sh->n_rows : 1;
    int32_t *table = malloc(sizeof(int32_t) * (size_t)(n_blocks * n_seqs + 1));
    if (!q || !k || !v || !out || !ref || !pos || !rseq || !table || !first_out || !alone) { CHECK(0, "out of memory"); goto done; }
    for (int64_t i = 0; i < qs * sh->n_rows; i++) q[i] = 2.0f * frand();
    for (int64_t i = 0; i < ks * slots; i++) k[i] = frand();
    for (int64_t i = 0; i < vs * slots; i++) v[i] = frand();
    /* a 16-bit cache holds the values rounded to its type; the reference takes them as f32 */
    const size_t es = cf_dtype_size(sh->kvt);
    void *kc = malloc(es * (size_t)(ks * slots)), *vc = malloc(es * (size_t)(vs * slots));
    if (!kc || !vc) { CHECK(0, "out of memory"); free(kc), free(vc); goto done; }
    cf_from_f32(kc, k, sh->kvt, (size_t)(ks * slots));
    cf_from_f32(vc, v, sh->kvt, (size_t)(vs * slots));
    cf_to_f32(k, kc, sh->kvt, (size_t)(ks * slots));
    cf_to_f32(v, vc, sh->kvt, (size_t)(vs * slots));
    for (int i = 0; i < sh->n_rows; i++) pos[i] = sh->own ? last - (i * 53) % (sh->ctx / 2 + 1) : first + i;
    for (int sq = 0; sq < n_seqs; sq++)   /* a permutation (7 coprime to n_blocks) each, rotated by sequence */
        for (int b = 0; b < n_blocks; b++)
            table[sq * n_blocks + b] = n_blocks % 7 ? ((b + sq) * 7 + 3) % n_blocks : (2 * n_blocks - 1 - b - sq) % n_blocks;
    for (int i = 0; sh->own && i < sh->n_rows; i++) rseq[i] = i;
    cf_attn_call c = {.q = q, .qs = qs, .out = out, .os = os, .k = k, .v = v, .ks = ks, .vs = vs, .n_rows = sh->n_rows,
                      .n_heads = n_heads, .n_kv_heads = sh->kvh, .head_dim = hd, .v_head_dim = vhd, .window = sh->window,
                      .scale = 1.0f / sqrtf((float)hd), .softcap = sh->softcap, .pos0 = first, .cap = cap};
    if (sh->paged) {
        c.pos = pos;
        c.table = table;
        c.row_seq = rseq;
        c.table_stride = n_blocks;
        c.block = block;
    }
    reference(&c, ref);
    c.k = kc, c.v = vc, c.kv_dtype = sh->kvt;
    for (int isa = CF_ISA_C; isa <= CF_ISA_AVX512; isa++) {
        if (!cf_cpu_isa_available((cf_cpu_isa_level)isa)) continue;
        for (int threads = 1; threads <= 3; threads += 2) {
            for (int64_t i = 0; i < os * sh->n_rows; i++) out[i] = -777.0f;
            cinfer_error e = {0};
            CHECK(cf_cpu_attention(&c, threads == 1 ? NULL : pool3, (cf_cpu_isa_level)isa, &scratch, &e) == CINFER_OK, "%s", e.message);
            double worst = 0;
            int pad_ok = 1;
            for (int i = 0; i < sh->n_rows; i++) {
                for (int j = 0; j < n_heads * vhd; j++) {
                    const double d = fabs(out[i * os + j] - ref[(int64_t)i * n_heads * vhd + j]);
                    if (!(d <= worst)) worst = d;   /* NaN counts as worst */
                }
                for (int j = n_heads * vhd; j < os; j++) pad_ok &= out[i * os + j] == -777.0f;
            }
            CHECK(worst < 2e-5, "%s, %d threads: hd %d, G %d, kvh %d, rows %d, ctx %d, window %d, softcap %g, %s %s: max error %g",
                  isa_names[isa], threads, hd, sh->G, sh->kvh, sh->n_rows, sh->ctx, sh->window, sh->softcap,
                  sh->paged ? "paged" : "ring", kvt_name(sh->kvt), worst);
            CHECK(pad_ok, "%s: wrote past the rows' values (hd %d, G %d)", isa_names[isa], hd, sh->G);
            /* the same bits on every thread count, and for each row computed alone (no batch) */
            if (threads == 1) {
                memcpy(first_out, out, sizeof(float) * (size_t)(os * sh->n_rows));
                for (int i = 0; i < sh->n_rows; i++) {
                    cf_attn_call one = c;
                    one.n_rows = 1;
                    one.q = q + i * qs;
                    one.out = alone;
                    one.pos0 = pos[i];
                    if (sh->paged) one.pos = pos + i, one.row_seq = rseq + i;
                    CHECK(cf_cpu_attention(&one, pool3, (cf_cpu_isa_level)isa, &scratch, &e) == CINFER_OK, "%s", e.message);
                    CHECK(!memcmp(alone, out + i * os, sizeof(float) * (size_t)(n_heads * vhd)),
                          "%s: row %d of %d alone differs from the row in the batch (hd %d, G %d, ctx %d)", isa_names[isa], i,
                          sh->n_rows, hd, sh->G, sh->ctx);
                }
            } else {
                CHECK(!memcmp(first_out, out, sizeof(float) * (size_t)(os * sh->n_rows)),
                      "%s: 3 threads differ from 1 (hd %d, G %d, rows %d, ctx %d)", isa_names[isa], hd, sh->G, sh->n_rows, sh->ctx);
            }
        }
    }
    free(kc), free(vc);
done:
    free(q), free(k), free(v), free(out), free(ref), free(pos), free(rseq), free(table), free(first_out), free(alone);
}

int main(void) {
    cinfer_error pe = {0};
    if (cf_workers_create(3, &pool3, &pe) != CINFER_OK) {
        fprintf(stderr, "test_cpu_attention: %s\n", pe.message);
        return 1;
    }
    static const int hds[] = {64, 80, 128, 256, 36};
    static const int groups[] = {1, 4, 8, 3};
    static const cf_dtype kvts[] = {CF_F32, CF_BF16, CF_F16};
    for (size_t hi = 0; hi < sizeof hds / sizeof hds[0]; hi++)
        for (size_t gi = 0; gi < sizeof groups / sizeof groups[0]; gi++)
            for (int paged = 0; paged <= 1; paged++) {
                const int hd = hds[hi], G = groups[gi];
                const cf_dtype kvt = kvts[(hi + gi + (size_t)paged) % 3];   /* each type meets every head size and group */
                /* decode at several contexts, one kv head (splits over key blocks) and two */
                static const int ctxs[] = {1, 2, 63, 65, 700, 2000};
                for (size_t ci = 0; ci < sizeof ctxs / sizeof ctxs[0]; ci++) {
                    const shape a = {.hd = hd, .G = G, .kvh = ci % 2 ? 2 : 1, .n_rows = 1, .ctx = ctxs[ci], .paged = paged, .kvt = kvt};
                    run_shape(&a);
                }
                /* prefill rows: causal, windowed (ring wraps), softcapped */
                const shape b = {.hd = hd, .G = G, .kvh = 2, .n_rows = 17, .ctx = 90, .paged = paged, .kvt = kvt};
                const shape w = {.hd = hd, .G = G, .kvh = 2, .n_rows = 9, .ctx = 150, .window = 37, .paged = paged, .kvt = kvt};
                const shape s = {.hd = hd, .G = G, .kvh = 1, .n_rows = 1, .ctx = 1500, .window = 600, .softcap = 30.0f, .paged = paged, .kvt = kvt};
                const shape s2 = {.hd = hd, .G = G, .kvh = 2, .n_rows = 5, .ctx = 40, .softcap = 5.0f, .paged = paged, .kvt = kvt};
                /* a verification's few rows and a batch's many, long enough for several key blocks each */
                const shape f = {.hd = hd, .G = G, .kvh = 2, .n_rows = 3, .ctx = 700, .paged = paged, .kvt = kvt};
                const shape f2 = {.hd = hd, .G = G, .kvh = 2, .n_rows = 6, .ctx = 600, .window = 530, .paged = paged, .kvt = kvt};
                run_shape(&f);
                run_shape(&f2);
                if (paged) {   /* a batch of sequences decoding, each at its own position: several key blocks, a window */
                    const shape o = {.hd = hd, .G = G, .kvh = 2, .n_rows = 9, .ctx = 700, .paged = 1, .own = 1, .kvt = kvt};
                    const shape o2 = {.hd = hd, .G = G, .kvh = 3, .n_rows = 6, .ctx = 400, .window = 300, .paged = 1, .own = 1, .kvt = kvt};
                    run_shape(&o);
                    run_shape(&o2);
                }
                run_shape(&b);
                run_shape(&w);
                run_shape(&s);
                run_shape(&s2);
            }
    free(scratch.buf);
    cf_workers_free(pool3);
    printf("test_cpu_attention: %d checks, %d failures (instruction sets: C%s%s)\n", checks, failures,
           cf_cpu_isa_available(CF_ISA_AVX2) ? ", AVX2" : "", cf_cpu_isa_available(CF_ISA_AVX512) ? ", AVX-512" : "");
    return failures != 0;
}
