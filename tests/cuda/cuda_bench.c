/* cuda_bench.c: speed of the CUDA backend's kernels on their own and of a Llama-3-8B-shaped decoder built
 * from backend ops with random bf16 weights, against ceilings measured in the same run: device-to-device
 * copy bandwidth (cudaMemcpy, read + written bytes) and the bf16 GEMM rate of the backend's matmul.
 *
 * - GEMV (matmul with 1..8 rows): weight bytes / time, several weight copies in rotation so nothing is
 *   served from the 60 MB L2; each configuration recorded as a graph of many launches.
 * - decode attention: KV bytes / time; prefill attention: causal FLOPs / time.
 * - decode step (32 layers, graph with the *_pos ops, then host reads the argmax id): tokens/s against
 *   copy bandwidth / (weight bytes without the embedding table + KV bytes), as cinfer bench counts.
 * - prefill: 4096 tokens in chunks (256 as the model does, and 4096), FLOPs 2 * params * tokens.
 * - paged attention (attention_paged): decode of 1..128 sequences and prefill, against the contiguous op.
 * - quantized GEMV (--qgemv alone): packed bytes (words, scales and biases) / time of matmul and matmul_glu with
 *   random 4- and 8-bit weights (group 64, bf16 pairs) of Llama-3-8B's shapes, by activation rows, for the
 *   tensor-core kernel with k split over at most 1, 2 or 4 blocks and for the CUDA-core kernel; then the batched
 *   decode products (16 and 64 rows: the quantized GEMM) against bf16 weights of the same shapes.
 * Usage: cuda_bench [--quick | --short | --gemv | --paged | --qgemv | --qgemm | --qprofile [ROWS]]  (quick: a 4-layer
 * model and small sweeps, a smoke run; short: the full model, fewer sweep points; gemv: the one-row GEMV table alone;
 * paged: the paged attention table alone; qgemv: the quantized tables alone; qgemm: their batched decode table alone;
 * qprofile: each product of the quantized table and its bf16 twin at ROWS activation rows (default 1) launched
 * twice, untimed, for ncu) */
#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_internal.h"
#include "base/qweight.h"
#include "base/status.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static cf_backend *be;
static const cf_backend_ops *op;
static double copy_bw;   /* GB/s */
static int short_run;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void ok(cinfer_status st, cinfer_error *e, const char *what) {
    if (st != CINFER_OK) {
        fprintf(stderr, "cuda_bench: %s: %s\n", what, e->message);
        exit(1);
    }
}

static cf_tensor alloc(cf_dtype dt, int64_t r, int64_t c) {
    cinfer_error e = {0};
    cf_tensor t;
    ok(op->alloc(be, dt, r, c, &t, &e), &e, "alloc");
    return t;
}

static cf_tensor rnd(int64_t r, int64_t c, float scale, uint64_t seed) {
    cf_tensor t = alloc(CF_BF16, r, c);
    cf_cuda_fill_random(be, t, seed, scale);
    return t;
}

static void sync_(void) {
    cinfer_error e = {0};
    ok(op->sync(be, &e), &e, "sync");
}

typedef void (*work_fn)(void *ctx, int i);

/* Records n calls of fn into a graph, then times replays: seconds per call (median of 5). Without a
 * graph (recording failed: reported once) the calls are timed as launched. */
static double time_graph(work_fn fn, void *ctx, int n) {
    static int graph_failed;
    cinfer_error e = {0};
    cf_graph *g = NULL;
    for (int i = 0; i < n; i++) fn(ctx, i);   /* warm-up, and scratch sized outside the recording */
    sync_();
    if (!graph_failed && op->graph_begin(be, &e) == CINFER_OK) {
        for (int i = 0; i < n; i++) fn(ctx, i);
        if (op->graph_end(be, &g, &e) != CINFER_OK) {
            printf("(graph recording failed: %s; timing launches instead)\n", e.message);
            graph_failed = 1;
        }
    }
    double t[5];
    for (int r = 0; r < 5; r++) {
        double t0 = now();
        if (g) op->graph_launch(be, g);
        else for (int i = 0; i < n; i++) fn(ctx, i);
        sync_();
        t[r] = (now() - t0) / n;
    }
    if (g) op->graph_free(be, g);
    for (int i = 0; i < 5; i++)
        for (int j = i + 1; j < 5; j++)
            if (t[j] < t[i]) { double x = t[i]; t[i] = t[j]; t[j] = x; }
    return t[2];
}

/* ---- GEMV ---- */

/* copies of a weight of `bytes` to rotate through so that none is served from the 60 MB L2: 768 MB in all, 2 to max */
static int rotation(double bytes, int max) {
    const int n = (int)ceil(768e6 / bytes);
    return n < 2 ? 2 : n > max ? max : n;
}

typedef struct gemv_ctx {
    cf_tensor x, out, w[64];
    int nw;
} gemv_ctx;

static void gemv_work(void *c, int i) {
    gemv_ctx *g = c;
    cf_tensor none = {0};
    op->matmul(be, g->out, g->x, g->w[i % g->nw], none);
}

/* Weight GB/s by activation rows: the vector GEMV kernel (forced up to 8 rows) by 16-byte chunks of each row per batch
 * and lane and the warps per SM a launch aims for before splitting rows over warps; the tensor-core GEMV (from 1 row);
 * cuBLAS (from 2 rows); and the default (gemv_max_rows and gemv_tc_max_rows as the backend set them). */
static void bench_gemv(int quick) {
    struct { const char *name; int d, k; } shapes[] = {
        {"q/o   4096x4096", 4096, 4096}, {"k/v   1024x4096", 1024, 4096}, {"gate 14336x4096", 14336, 4096},
        {"down 4096x14336", 4096, 14336}, {"lm_head 128256x4096", 128256, 4096},
    };
    const int dflt_u = cfk_cfg.gemv_unroll, dflt_w = cfk_cfg.gemv_warps, dflt_r = cfk_cfg.gemv_max_rows, dflt_tc = cfk_cfg.gemv_tc_max_rows;
    int rows[] = {1, 2, 4, 8, 9, 16}, unrolls[] = {2, 1, 2, 0, 0, dflt_u}, warps[] = {8, 8, 32, 8, 8, dflt_w},
        max_rows[] = {8, 8, 8, 0, 1, dflt_r}, tc_rows[] = {0, 0, 0, 16, 0, dflt_tc};
    printf("\n## GEMV (matmul, bf16 weights, bf16 x): weight GB/s and %% of copy bandwidth by activation rows: the vector GEMV\n"
           "## (chunks a batch, warps an SM; up to 8 rows), the tensor-core GEMV, cuBLAS (from 2 rows), the default\n");
    printf("| shape | rows | GEMV 2, 8 | GEMV 1, 8 | GEMV 2, 32 | tensor-core GEMV | cuBLAS | default |\n|---|---:|---:|---:|---:|---:|---:|---:|\n");
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        gemv_ctx g;
        const double bytes = 2.0 * shapes[s].d * shapes[s].k;
        g.nw = rotation(bytes, 64);
        if (quick && g.nw > 4) g.nw = 4;
        for (int i = 0; i < g.nw; i++) g.w[i] = rnd(shapes[s].d, shapes[s].k, 0.02f, 100 + i);
        for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
            if (quick && r) break;
            g.x = rnd(rows[r], shapes[s].k, 1.0f, 7);
            g.out = alloc(CF_BF16, rows[r], shapes[s].d);
            printf("| %s | %d |", shapes[s].name, rows[r]);
            for (size_t u = 0; u < sizeof unrolls / sizeof unrolls[0]; u++) {
                cfk_cfg.gemv_unroll = unrolls[u];
                cfk_cfg.gemv_warps = warps[u];
                cfk_cfg.gemv_max_rows = max_rows[u];
                cfk_cfg.gemv_tc_max_rows = tc_rows[u];
                if ((u < 3 && rows[r] > 8) || (u == 4 && rows[r] == 1)) {   /* not that kernel */
                    printf(" - |");
                    continue;
                }
                double t = time_graph(gemv_work, &g, quick ? 8 : 4 * g.nw);
                double gbs = bytes / t / 1e9;
                printf(" %.0f (%.0f%%) |", gbs, 100 * gbs / copy_bw);
            }
            printf("\n");
            op->free_tensor(be, &g.x);
            op->free_tensor(be, &g.out);
        }
        for (int i = 0; i < g.nw; i++) op->free_tensor(be, &g.w[i]);
    }
    cfk_cfg.gemv_unroll = dflt_u;
    cfk_cfg.gemv_warps = dflt_w;
    cfk_cfg.gemv_max_rows = dflt_r;
    cfk_cfg.gemv_tc_max_rows = dflt_tc;
}

/* ---- quantized GEMV ---- */

typedef struct qgemv_ctx {
    cf_tensor x, out, gate, up, w[48], u[48];
    int nw, glu;
} qgemv_ctx;

static void qgemv_work(void *c, int i) {
    qgemv_ctx *g = c;
    cf_tensor none = {0};
    if (g->glu) op->matmul_glu(be, g->out, g->x, g->w[i % g->nw], g->u[i % g->nw], CF_ACT_SILU, g->gate, g->up);
    else op->matmul(be, g->out, g->x, g->w[i % g->nw], none);
}

/* random weights quantized once on the host (bits, group 64, bf16 pairs) and uploaded n times; rows of 64 at a time
 * over the host's threads, each from its own stream (the output layer has half a billion values) */
static void qupload(int64_t d, int64_t k, int bits, int n, cf_tensor *out) {
    const int64_t wpr = cf_qweight_words_per_row(bits, k), G = k / 64;
    float *f = malloc((size_t)(d * k) * sizeof *f);
    uint32_t *q = malloc((size_t)(d * wpr) * 4);
    uint16_t *sc = malloc((size_t)(d * G) * 2), *bi = malloc((size_t)(d * G) * 2);
    if (!f || !q || !sc || !bi) {
        fprintf(stderr, "cuda_bench: out of host memory\n");
        exit(1);
    }
    #pragma omp parallel for schedule(static)
    for (int64_t r0 = 0; r0 < d; r0 += 64) {
        const int64_t nr = d - r0 < 64 ? d - r0 : 64;
        uint64_t r = 12345 + (uint64_t)r0 * 0x9e3779b97f4a7c15ull;
        for (int64_t i = r0 * k; i < (r0 + nr) * k; i++) {
            r = r * 6364136223846793005ull + 1442695040888963407ull;
            f[i] = ((float)(r >> 40) / (float)(1 << 24) - 0.5f) * 0.04f;
        }
        cf_qweight_quantize(f + r0 * k, nr, k, bits, 64, CF_BF16, q + r0 * wpr, sc + r0 * G, bi + r0 * G);
    }
    const cf_qweight w = {.q = q, .scales = sc, .biases = bi, .sb_dtype = CF_BF16, .bits = bits, .group = 64, .rows = d, .cols = k};
    cinfer_error e = {0};
    for (int i = 0; i < n; i++) ok(op->upload_qweight(be, &w, &out[i], &e), &e, "upload_qweight");
    free(f);
    free(q);
    free(sc);
    free(bi);
}

/* Llama-3-8B's products, for the quantized tables */
static const struct { const char *name; int d, k, glu; } qshapes[] = {
    {"q/o   4096x4096", 4096, 4096, 0}, {"k/v   1024x4096", 1024, 4096, 0}, {"gate+up 2x14336x4096 (GLU)", 14336, 4096, 1},
    {"down 4096x14336", 4096, 14336, 0}, {"lm_head 128256x4096", 128256, 4096, 0},
};

static void bench_qgemv(void) {
    const int rows[] = {1, 2, 8}, bits[] = {4, 8};
    const int dflt_s = cfk_cfg.qgemv_tc_splits, dflt_tc = cfk_cfg.qgemv_tc;
    printf("\n## quantized GEMV (group 64, bf16 pairs, bf16 x): packed GB/s (words + scales + biases) and %% of copy bandwidth;\n"
           "## tensor-core kernel with k split over at most 1, 2, 4 blocks, and the CUDA-core kernel\n");
    printf("| shape | bits | rows | tc 1 | tc 2 | tc 4 | CUDA cores |\n|---|---:|---:|---:|---:|---:|---:|\n");
    for (size_t b = 0; b < 2; b++)
        for (size_t s = 0; s < sizeof qshapes / sizeof qshapes[0]; s++) {
            qgemv_ctx g = {.glu = qshapes[s].glu};
            const int64_t d = qshapes[s].d, k = qshapes[s].k;
            const double bytes = (qshapes[s].glu ? 2.0 : 1.0) * d * (k * bits[b] / 8.0 + k / 64 * 4.0);
            g.nw = rotation(bytes, 48);
            qupload(d, k, bits[b], g.nw, g.w);
            if (g.glu) qupload(d, k, bits[b], g.nw, g.u);
            for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
                g.x = rnd(rows[r], k, 1.0f, 7);
                g.out = alloc(CF_F32, rows[r], d);
                g.gate = alloc(CF_F32, rows[r], d);
                g.up = alloc(CF_F32, rows[r], d);
                printf("| %s | %d | %d |", qshapes[s].name, bits[b], rows[r]);
                for (int v = 0; v < 4; v++) {
                    cfk_cfg.qgemv_tc = v < 3;
                    cfk_cfg.qgemv_tc_splits = v < 3 ? 1 << v : dflt_s;
                    const double t = time_graph(qgemv_work, &g, 4 * g.nw), gbs = bytes / t / 1e9;
                    printf(" %.0f (%.0f%%) |", gbs, 100 * gbs / copy_bw);
                }
                printf("\n");
                op->free_tensor(be, &g.x);
                op->free_tensor(be, &g.out);
                op->free_tensor(be, &g.gate);
                op->free_tensor(be, &g.up);
            }
            for (int i = 0; i < g.nw; i++) {
                op->free_tensor(be, &g.w[i]);
                if (g.glu) op->free_tensor(be, &g.u[i]);
            }
        }
    cfk_cfg.qgemv_tc_splits = dflt_s;
    cfk_cfg.qgemv_tc = dflt_tc;
}

/* For a profiler (bench/quant_gpu_profile.sh): each of Llama-3-8B's products at `rows` activation rows, twice (the
 * first a warm-up), with 4-bit, 8-bit and bf16 weights, one launch each, no timing and no graphs */
static void qprofile(int rows) {
    const int bits[] = {4, 8, 16};
    for (size_t b = 0; b < 3; b++)
        for (size_t s = 0; s < sizeof qshapes / sizeof qshapes[0]; s++) {
            const int64_t d = qshapes[s].d, k = qshapes[s].k;
            qgemv_ctx g = {.glu = qshapes[s].glu, .nw = 1};
            if (bits[b] == 16) {
                g.w[0] = rnd(d, k, 0.02f, 11);
                if (g.glu) g.u[0] = rnd(d, k, 0.02f, 12);
            } else {
                qupload(d, k, bits[b], 1, g.w);
                if (g.glu) qupload(d, k, bits[b], 1, g.u);
            }
            g.x = rnd(rows, k, 1.0f, 7);
            g.out = alloc(CF_BF16, rows, d);
            g.gate = alloc(CF_BF16, rows, d);
            g.up = alloc(CF_BF16, rows, d);
            qgemv_work(&g, 0);
            qgemv_work(&g, 0);
            sync_();
            printf("%s, %d bits: 2 launches\n", qshapes[s].name, bits[b]);
            cf_tensor f[6] = {g.x, g.out, g.gate, g.up, g.w[0], g.u[0]};
            for (int i = 0; i < 6; i++)
                if (f[i].data) op->free_tensor(be, &f[i]);
        }
}

/* batched decode: the quantized GEMM against the bf16 matmul (cuBLAS) of the same shape, microseconds a product */
static void bench_qgemm(void) {
    printf("\n## batched decode: microseconds a product (TFLOP/s) for 4-bit, 8-bit and bf16 weights of the same shape\n");
    printf("| shape | rows | q4 | q8 | bf16 |\n|---|---:|---:|---:|---:|\n");
    const int brows[] = {16, 64};
    for (size_t s = 0; s < sizeof qshapes / sizeof qshapes[0]; s++) {
        const int64_t d = qshapes[s].d, k = qshapes[s].k, mats = qshapes[s].glu ? 2 : 1;
        const int nw = rotation(2.0 * mats * d * k, 48);
        qgemv_ctx q4 = {.glu = qshapes[s].glu, .nw = nw}, q8 = q4, bf = q4;
        qupload(d, k, 4, nw, q4.w);
        qupload(d, k, 8, nw, q8.w);
        for (int i = 0; i < nw; i++) bf.w[i] = rnd(d, k, 0.02f, 100 + i);
        if (qshapes[s].glu) {
            qupload(d, k, 4, nw, q4.u);
            qupload(d, k, 8, nw, q8.u);
            for (int i = 0; i < nw; i++) bf.u[i] = rnd(d, k, 0.02f, 200 + i);
        }
        for (size_t r = 0; r < sizeof brows / sizeof brows[0]; r++) {
            const cf_tensor x = rnd(brows[r], k, 1.0f, 7), out = alloc(CF_BF16, brows[r], d);
            const cf_tensor gate = alloc(CF_BF16, brows[r], d), up = alloc(CF_BF16, brows[r], d);
            printf("| %s | %d |", qshapes[s].name, brows[r]);
            qgemv_ctx *c[3] = {&q4, &q8, &bf};
            for (int v = 0; v < 3; v++) {
                c[v]->x = x;
                c[v]->out = out;
                c[v]->gate = gate;
                c[v]->up = up;
                const double t = time_graph(qgemv_work, c[v], 4 * nw);
                printf(" %.1f (%.0f) |", t * 1e6, 2.0 * mats * d * k * brows[r] / t / 1e12);
            }
            printf("\n");
            cf_tensor f[4] = {x, out, gate, up};
            for (int i = 0; i < 4; i++) op->free_tensor(be, &f[i]);
        }
        for (int i = 0; i < nw; i++) {
            op->free_tensor(be, &q4.w[i]);
            op->free_tensor(be, &q8.w[i]);
            op->free_tensor(be, &bf.w[i]);
            if (qshapes[s].glu) {
                op->free_tensor(be, &q4.u[i]);
                op->free_tensor(be, &q8.u[i]);
                op->free_tensor(be, &bf.u[i]);
            }
        }
    }
}

/* ---- attention ---- */

typedef struct attn_ctx {
    cf_tensor q, out, k[16], v[16], pos;
    int nc;
    cf_attn_args a;
} attn_ctx;

static void attn_work(void *c, int i) {
    attn_ctx *t = c;
    op->attention(be, t->out, t->q, t->k[i % t->nc], t->v[i % t->nc], &t->a);
}

static void bench_attention(int quick) {
    const int H = 32, KVH = 8, D = 128;
    printf("\n## attention (32 heads, 8 KV heads, head 128, bf16 cache)\n");
    printf("| case | time us | rate |\n|---|---:|---:|\n");
    int lens[] = {512, 4096, 32768};
    for (int li = 0; li < 3; li++) {
        if ((quick || short_run) && li == 2) break;
        attn_ctx t;
        const int L = lens[li];
        const double bytes = 2.0 * L * KVH * D * 2;
        t.nc = (int)ceil(512e6 / bytes);
        if (t.nc > 16) t.nc = 16;
        if (t.nc < 2) t.nc = 2;
        for (int i = 0; i < t.nc; i++) { t.k[i] = rnd(L, KVH * D, 1, 200 + i); t.v[i] = rnd(L, KVH * D, 1, 300 + i); }
        t.q = rnd(1, H * D, 1, 5);
        t.out = alloc(CF_BF16, 1, H * D);
        t.a = (cf_attn_args){.n_q = 1, .pos0 = L - 1, .n_heads = H, .n_kv_heads = KVH, .head_dim = D, .v_head_dim = D, .cap = L,
                             .scale = 0.088f};
        double s = time_graph(attn_work, &t, 4 * t.nc);
        printf("| decode, %d keys | %.1f | %.0f GB/s (%.0f%% of copy) |\n", L, s * 1e6, bytes / s / 1e9, 100 * bytes / s / 1e9 / copy_bw);
        for (int i = 0; i < t.nc; i++) { op->free_tensor(be, &t.k[i]); op->free_tensor(be, &t.v[i]); }
        op->free_tensor(be, &t.q);
        op->free_tensor(be, &t.out);
    }
    /* prefill: 4096 queries at once, and the last 256-query chunk of a 4096 prompt */
    const int L = 4096;
    attn_ctx t;
    t.nc = 1;
    t.k[0] = rnd(L, KVH * D, 1, 11);
    t.v[0] = rnd(L, KVH * D, 1, 12);
    t.q = rnd(L, H * D, 1, 13);
    t.out = alloc(CF_BF16, L, H * D);
    struct { int n_q, pos0; } pc[] = {{4096, 0}, {256, 3840}};
    const int bc0 = cfk_cfg.attn_bc, bcs[] = {64, 32};
    for (int c = 0; c < 2; c++)
        for (int b = 0; b < 2; b++) {
            cfk_cfg.attn_bc = bcs[b];
            t.a = (cf_attn_args){.n_q = pc[c].n_q, .pos0 = pc[c].pos0, .n_heads = H, .n_kv_heads = KVH, .head_dim = D, .v_head_dim = D,
                                 .cap = L, .scale = 0.088f};
            double s = time_graph(attn_work, &t, quick ? 2 : 10);
            /* QK^T and PV over the visible keys: 4 * D FLOPs per (query, key, head) */
            double pairs = 0;
            for (int i = 0; i < pc[c].n_q; i++) pairs += pc[c].pos0 + i + 1;
            double flops = 4.0 * D * H * pairs;
            printf("| prefill %d queries at %d, causal, %d-key tiles | %.1f | %.0f TFLOP/s |\n", pc[c].n_q, pc[c].pos0, bcs[b], s * 1e6,
                   flops / s / 1e12);
        }
    cfk_cfg.attn_bc = bc0;
    op->free_tensor(be, &t.k[0]);
    op->free_tensor(be, &t.v[0]);
    op->free_tensor(be, &t.q);
    op->free_tensor(be, &t.out);
}

/* ---- paged attention ---- */

typedef struct paged_ctx {
    cf_tensor q, out, kp, vp, pos, row_seq, seq_start, slot, table[16];
    cf_paged_attn_args a;
    cf_batch_view b[16];
    int nc;
} paged_ctx;

static void paged_work(void *c, int i) {
    paged_ctx *t = c;
    op->attention_paged(be, t->out, t->q, t->kp, t->vp, &t->a, &t->b[i % t->nc]);
}

/* the decode settings a paged table compares: cfk_cfg.paged_mma_group, paged_sm_blocks (the default: the first) */
static const int paged_cfgs[][2] = {{0, 4}, {4, 4}, {4, 8}};
#define N_PAGED_CFGS 3

/* n sequences of `rows` rows each, the last at position keys - 1, over shuffled 16-slot blocks; nc copies of
 * the KV (tables into disjoint blocks) rotate, as in bench_attention. secs[v]: seconds per call with
 * paged_cfgs[v] (nv of them; nv 0: the defaults only, in secs[0]); *gbs: KV GB/s of the last. */
static void time_paged(int H, int KVH, int D, int n, int rows, int keys, int max_keys, int nv, double *secs, double *gbs) {
    paged_ctx t;
    const int B = 16, bps = (keys + B - 1) / B, nr = n * rows;
    const double bytes = 2.0 * n * keys * KVH * D * 2;
    t.nc = (int)ceil(512e6 / bytes);
    if (t.nc > 16) t.nc = 16;
    if (t.nc < 2) t.nc = 2;
    const int nb = t.nc * n * bps + 1;
    t.kp = rnd((int64_t)nb * B, KVH * D, 1, 400);
    t.vp = rnd((int64_t)nb * B, KVH * D, 1, 401);
    t.q = rnd(nr, H * D, 1, 402);
    t.out = alloc(CF_BF16, nr, H * D);
    int32_t *perm = malloc((size_t)nb * 4), *pos = malloc((size_t)nr * 4), *rs = malloc((size_t)nr * 4), *ss = malloc((size_t)(n + 1) * 4);
    int32_t *tab = malloc((size_t)n * bps * 4);
    uint64_t x = 88172645463325252ull;
    for (int i = 0; i < nb - 1; i++) perm[i] = i + 1;
    for (int i = nb - 2; i > 0; i--) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        int j = (int)(x % (uint64_t)(i + 1)), tt = perm[i];
        perm[i] = perm[j], perm[j] = tt;
    }
    for (int s = 0; s < n; s++) {
        ss[s] = s * rows;
        for (int k = 0; k < rows; k++) pos[s * rows + k] = keys - rows + k, rs[s * rows + k] = s;
    }
    ss[n] = nr;
    t.pos = alloc(CF_I32, nr, 1);
    t.row_seq = alloc(CF_I32, nr, 1);
    t.seq_start = alloc(CF_I32, n + 1, 1);
    t.slot = alloc(CF_I32, nr, 1);
    op->write(be, t.pos, pos);
    op->write(be, t.row_seq, rs);
    op->write(be, t.seq_start, ss);
    for (int c = 0; c < t.nc; c++) {
        for (int i = 0; i < n * bps; i++) tab[i] = perm[c * n * bps + i];
        t.table[c] = alloc(CF_I32, n, bps);
        op->write(be, t.table[c], tab);
        t.b[c] = (cf_batch_view){.pos = t.pos, .row_seq = t.row_seq, .seq_start = t.seq_start, .slot = t.slot, .block_table = t.table[c],
                                 .n_rows = nr, .n_seqs = n, .max_rows_per_seq = rows};
    }
    t.a = (cf_paged_attn_args){.n_heads = H, .n_kv_heads = KVH, .head_dim = D, .v_head_dim = D, .block_size = B, .table_cols = bps,
                               .max_keys = max_keys, .scale = 1.0f / sqrtf((float)D)};
    const int g0 = cfk_cfg.paged_mma_group, b0 = cfk_cfg.paged_sm_blocks;
    for (int v = 0; v < (nv ? nv : 1); v++) {
        if (nv) cfk_cfg.paged_mma_group = paged_cfgs[v][0], cfk_cfg.paged_sm_blocks = paged_cfgs[v][1];
        secs[v] = time_graph(paged_work, &t, rows > 1 ? 2 * t.nc : 4 * t.nc);
        *gbs = bytes / secs[v] / 1e9;
    }
    cfk_cfg.paged_mma_group = g0, cfk_cfg.paged_sm_blocks = b0;
    for (int c = 0; c < t.nc; c++) op->free_tensor(be, &t.table[c]);
    cf_tensor *all[] = {&t.kp, &t.vp, &t.q, &t.out, &t.pos, &t.row_seq, &t.seq_start, &t.slot};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) op->free_tensor(be, all[i]);
    free(perm);
    free(pos);
    free(rs);
    free(ss);
    free(tab);
}

/* the contiguous attention op on one sequence of the same shape: n_q queries, the last at keys - 1 */
static double time_contig(int H, int KVH, int D, int n_q, int keys) {
    attn_ctx t;
    const double bytes = 2.0 * keys * KVH * D * 2;
    t.nc = (int)ceil(512e6 / bytes);
    if (t.nc > 16) t.nc = 16;
    if (t.nc < 2) t.nc = 2;
    for (int i = 0; i < t.nc; i++) { t.k[i] = rnd(keys, KVH * D, 1, 500 + i); t.v[i] = rnd(keys, KVH * D, 1, 600 + i); }
    t.q = rnd(n_q, H * D, 1, 7);
    t.out = alloc(CF_BF16, n_q, H * D);
    t.a = (cf_attn_args){.n_q = n_q, .pos0 = keys - n_q, .n_heads = H, .n_kv_heads = KVH, .head_dim = D, .v_head_dim = D, .cap = keys,
                         .scale = 1.0f / sqrtf((float)D)};
    double s = time_graph(attn_work, &t, n_q > 1 ? 2 * t.nc : 4 * t.nc);
    for (int i = 0; i < t.nc; i++) { op->free_tensor(be, &t.k[i]); op->free_tensor(be, &t.v[i]); }
    op->free_tensor(be, &t.q);
    op->free_tensor(be, &t.out);
    return s;
}

static void bench_paged(int quick) {
    printf("\n## attention_paged (bf16 caches in shuffled 16-slot blocks; each graph replay rotates over copies of the KV)\n"
           "## decode: n sequences of one row, all at the same context; contiguous: the attention op on one sequence\n");
    printf("## paged us with (decode on tensor cores from GQA group, blocks per SM): CUDA cores (0, 4); tensor cores (4, 4) and (4, 8)\n");
    printf("| shape | rows x keys | max_keys | CUDA cores | tensor 4/SM | tensor 8/SM | KV GB/s (%% of copy), last | contiguous us (1 sequence) |\n"
           "|---|---|---:|---:|---:|---:|---:|---:|\n");
    struct { const char *name; int H, KVH, D; } shapes[] = {{"Llama-3-8B 32/8 hd 128", 32, 8, 128}, {"Gemma-4 global 8/2 hd 512", 8, 2, 512}};
    struct { int n, keys, max_keys; } cs[] = {{1, 256, 8192}, {8, 256, 8192}, {64, 256, 8192}, {128, 256, 8192},
                                              {1, 200, 131072}, {1, 4096, 8192}, {32, 4096, 8192}};
    for (size_t si = 0; si < 2; si++)
        for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++) {
            if (quick && cs[c].keys > 256) continue;
            double gbs, s[N_PAGED_CFGS];
            time_paged(shapes[si].H, shapes[si].KVH, shapes[si].D, cs[c].n, 1, cs[c].keys, cs[c].max_keys, N_PAGED_CFGS, s, &gbs);
            printf("| %s | %d x %d | %d | %.1f | %.1f | %.1f | %.0f (%.0f%%) |", shapes[si].name, cs[c].n, cs[c].keys, cs[c].max_keys,
                   s[0] * 1e6, s[1] * 1e6, s[2] * 1e6, gbs, 100 * gbs / copy_bw);
            if (cs[c].n == 1) printf(" %.1f |\n", time_contig(shapes[si].H, shapes[si].KVH, shapes[si].D, 1, cs[c].keys) * 1e6);
            else printf(" |\n");
        }
    printf("\n| prefill | rows | paged us | TFLOP/s | contiguous us |\n|---|---:|---:|---:|---:|\n");
    struct { const char *name; int H, KVH, D, rows, keys; } ps[] = {
        {"Llama-3-8B hd 128, causal from 0", 32, 8, 128, 4096, 4096}, {"Llama-3-8B hd 128, chunk at 3840", 32, 8, 128, 256, 4096},
        {"Gemma-4 global hd 512, causal from 0", 8, 2, 512, 1024, 1024}};
    for (size_t c = 0; c < sizeof ps / sizeof ps[0]; c++) {
        if (quick && ps[c].rows > 1024) continue;
        double gbs, s;
        time_paged(ps[c].H, ps[c].KVH, ps[c].D, 1, ps[c].rows, ps[c].keys, 8192, 0, &s, &gbs);
        double pairs = 0;
        for (int i = 0; i < ps[c].rows; i++) pairs += ps[c].keys - ps[c].rows + i + 1;
        const double flops = 4.0 * ps[c].D * ps[c].H * pairs;
        printf("| %s | %d | %.1f | %.0f | %.1f |\n", ps[c].name, ps[c].rows, s * 1e6, flops / s / 1e12,
               time_contig(ps[c].H, ps[c].KVH, ps[c].D, ps[c].rows, ps[c].keys) * 1e6);
    }
}

/* ---- GEMM ---- */

static double bench_gemm(int n, int k, int d, int reps) {
    cf_tensor x = rnd(n, k, 1, 21), w = rnd(d, k, 0.02f, 22), y = alloc(CF_BF16, n, d), none = {0};
    op->matmul(be, y, x, w, none);
    sync_();
    double t0 = now();
    for (int r = 0; r < reps; r++) op->matmul(be, y, x, w, none);
    sync_();
    double s = (now() - t0) / reps;
    op->free_tensor(be, &x);
    op->free_tensor(be, &w);
    op->free_tensor(be, &y);
    return 2.0 * n * k * (double)d / s / 1e12;
}

/* ---- a Llama-shaped decoder from backend ops ---- */

typedef struct layer {
    cf_tensor attn_norm, wq, wk, wv, wo, ffn_norm, wg, wu, wd, kc, vc;
} layer;

typedef struct model {
    int L, dim, heads, kv_heads, hd, ffn, vocab, cap;
    cf_tensor embd, out_norm, lm_head, inv_freq;
    layer *ly;
    /* activations for up to `rows` rows */
    int rows;
    cf_tensor x, h, q, k, v, att, o, gate, up, ids, pos, logits, next;
    double weight_bytes;   /* streamed per decoded token (no embedding table) */
} model;

static cf_tensor ones(int64_t n) {
    cf_tensor t = alloc(CF_F32, 1, n);
    op->fill(be, t, 1.0f);
    return t;
}

static void model_init(model *m, int quick) {
    *m = (model){.L = quick ? 4 : 32, .dim = 4096, .heads = 32, .kv_heads = 8, .hd = 128, .ffn = 14336, .vocab = 128256, .cap = 8192,
                 .rows = 4096};
    cf_dtype a = be->act_dtype;
    uint64_t seed = 1000;
    m->embd = rnd(m->vocab, m->dim, 0.02f, seed++);
    m->lm_head = rnd(m->vocab, m->dim, 0.02f, seed++);
    m->out_norm = ones(m->dim);
    float f[64];
    for (int i = 0; i < 64; i++) f[i] = powf(500000.0f, -2.0f * i / 128);
    m->inv_freq = alloc(CF_F32, 1, 64);
    op->write(be, m->inv_freq, f);
    m->ly = calloc((size_t)m->L, sizeof *m->ly);
    const int qd = m->heads * m->hd, kd = m->kv_heads * m->hd;
    for (int l = 0; l < m->L; l++) {
        layer *y = &m->ly[l];
        y->attn_norm = ones(m->dim);
        y->ffn_norm = ones(m->dim);
        y->wq = rnd(qd, m->dim, 0.02f, seed++);
        y->wk = rnd(kd, m->dim, 0.02f, seed++);
        y->wv = rnd(kd, m->dim, 0.02f, seed++);
        y->wo = rnd(m->dim, qd, 0.02f, seed++);
        y->wg = rnd(m->ffn, m->dim, 0.02f, seed++);
        y->wu = rnd(m->ffn, m->dim, 0.02f, seed++);
        y->wd = rnd(m->dim, m->ffn, 0.02f, seed++);
        y->kc = alloc(a, m->cap, kd);
        y->vc = alloc(a, m->cap, kd);
    }
    m->weight_bytes = 2.0 * m->L * ((double)qd * m->dim * 2 + (double)kd * m->dim * 2 + 3.0 * m->ffn * m->dim) +
                      2.0 * m->vocab * m->dim + 4.0 * m->dim * (2 * m->L + 1);
    const int R = m->rows;
    m->x = alloc(CF_F32, R, m->dim);
    m->o = alloc(CF_F32, R, m->dim);
    m->h = alloc(a, R, m->dim);
    m->q = alloc(a, R, qd);
    m->k = alloc(a, R, kd);
    m->v = alloc(a, R, kd);
    m->att = alloc(a, R, qd);
    m->gate = alloc(a, R, m->ffn);
    m->up = alloc(a, R, m->ffn);
    m->ids = alloc(CF_I32, R, 1);
    m->pos = alloc(CF_I32, R, 1);
    m->logits = alloc(CF_F32, 1, m->vocab);
    m->next = alloc(CF_I32, 1, 1);
    sync_();
}

/* The decoder over n rows at positions pos0.. (device: m->pos); use_pos: the *_pos ops. ids: I32 [n, 1]. */
static void forward(model *m, cf_tensor ids, int n, int pos0, int use_pos) {
    cf_tensor none = {0};
    cf_tensor x = cf_rows(m->x, 0, n), h = cf_rows(m->h, 0, n), o = cf_rows(m->o, 0, n), pos = cf_rows(m->pos, 0, n);
    cf_tensor q = cf_rows(m->q, 0, n), k = cf_rows(m->k, 0, n), v = cf_rows(m->v, 0, n), att = cf_rows(m->att, 0, n);
    cf_tensor gate = cf_rows(m->gate, 0, n), up = cf_rows(m->up, 0, n);
    op->embed(be, x, m->embd, ids, 1.0f);
    for (int l = 0; l < m->L; l++) {
        layer *y = &m->ly[l];
        if (l == 0) op->rmsnorm(be, h, x, y->attn_norm, 1e-5f, 0.0f);
        cf_qkv_args qa = {.q = q, .k = k, .v = v, .wq = y->wq, .wk = y->wk, .wv = y->wv, .own_kv = 1, .n_heads = m->heads,
                          .n_kv_heads = m->kv_heads, .head_dim = m->hd, .v_head_dim = m->hd, .rot_dim = m->hd, .pos = pos,
                          .inv_freq = m->inv_freq,
                          .dest = {.k_cache = y->kc, .v_cache = y->vc, .idx = use_pos ? pos : none, .pos0 = pos0, .cap = m->cap}};
        op->qkv(be, h, &qa);
        cf_attn_args a = {.n_q = n, .pos0 = pos0, .n_heads = m->heads, .n_kv_heads = m->kv_heads, .head_dim = m->hd,
                          .v_head_dim = m->hd, .cap = m->cap, .window = 0, .scale = 1.0f / sqrtf((float)m->hd)};
        if (use_pos) op->attention_pos(be, att, q, y->kc, y->vc, &a, pos);
        else op->attention(be, att, q, y->kc, y->vc, &a);
        op->matmul(be, o, att, y->wo, none);
        op->add_norm(be, x, o, none, 1.0f, h, y->ffn_norm, 1e-5f, 0.0f);
        op->matmul_glu(be, gate, h, y->wg, y->wu, CF_ACT_SILU, gate, up);
        op->matmul(be, o, gate, y->wd, none);
        op->add_norm(be, x, o, none, 1.0f, l + 1 < m->L ? h : none, l + 1 < m->L ? m->ly[l + 1].attn_norm : none, 1e-5f, 0.0f);
    }
    cf_tensor xl = cf_rows(x, n - 1, 1), hl = cf_rows(h, 0, 1);
    op->rmsnorm(be, hl, xl, m->out_norm, 1e-5f, 0.0f);
    op->matmul(be, m->logits, hl, m->lm_head, none);
    op->argmax(be, m->next, m->logits);
}

static void set_pos(model *m, int pos0, int n) {
    int32_t *p = malloc((size_t)n * sizeof *p);
    for (int i = 0; i < n; i++) p[i] = pos0 + i;
    op->write(be, cf_rows(m->pos, 0, n), p);
    free(p);
}

/* Decode T tokens after a context of ctx positions; graph: record one step with the *_pos ops. */
static double decode_tps(model *m, int ctx, int T, int graph) {
    cinfer_error e = {0};
    cf_graph *g = NULL;
    int32_t tok = 1;
    op->write(be, m->next, &tok);
    cf_tensor ids = m->next;   /* each step embeds the previous step's argmax, on the device */
    set_pos(m, ctx, 1);
    forward(m, ids, 1, ctx, 1);   /* warm-up; sizes scratch outside the recording */
    sync_();
    if (graph) {
        ok(op->graph_begin(be, &e), &e, "graph_begin");
        forward(m, ids, 1, 0, 1);
        if (op->graph_end(be, &g, &e) != CINFER_OK) {
            printf("(graph recording failed: %s)\n", e.message);
            return 0;
        }
    }
    double t0 = now();
    for (int t = 0; t < T; t++) {
        set_pos(m, ctx + t, 1);
        if (graph) op->graph_launch(be, g);
        else forward(m, ids, 1, ctx + t, 0);
        float id;
        ok(op->read(be, &id, m->next, &e), &e, "read");
    }
    double s = now() - t0;
    if (g) op->graph_free(be, g);
    return T / s;
}

static double prefill_tps(model *m, int n, int chunk) {
    double t0 = now();
    for (int p = 0; p < n; p += chunk) {
        int c = n - p < chunk ? n - p : chunk;
        set_pos(m, p, c);
        forward(m, cf_rows(m->ids, 0, c), c, p, 0);
    }
    sync_();
    return n / (now() - t0);
}

static void bench_model(int quick, double gemm_tflops) {
    model m;
    model_init(&m, quick);
    const double kv_tok = 2.0 * m.L * m.kv_heads * m.hd * 2;   /* KV bytes per position */
    printf("\n## Llama-3-8B-shaped decoder from backend ops (%d layers, random bf16 weights, %.2f GB streamed per token)\n", m.L,
           m.weight_bytes / 1e9);
    printf("| decode | context | tokens/s | roofline tokens/s | %% of roofline |\n|---|---:|---:|---:|---:|\n");
    int ctxs[] = {128, 4096};
    for (int c = 0; c < 2; c++) {
        const int T = quick ? 8 : 128, ctx = ctxs[c];
        const double bytes = m.weight_bytes + kv_tok * (ctx + T / 2.0), roof = copy_bw * 1e9 / bytes;
        struct { const char *name; int graph, pdl; } modes[] = {{"eager + PDL", 0, 1}, {"graph, no PDL", 1, 0}, {"graph + PDL", 1, 1}};
        for (int md = 0; md < 3; md++) {
            if (c == 1 && md != 2) continue;
            cfk_cfg.pdl = modes[md].pdl;
            double tps = decode_tps(&m, ctx, T, modes[md].graph);
            printf("| %s | %d | %.1f | %.1f | %.1f%% |\n", modes[md].name, ctx, tps, roof, 100 * tps / roof);
        }
        cfk_cfg.pdl = 1;
    }
    /* prefill: 2 * (weights without the embedding) FLOPs per token, as cinfer bench counts */
    const double flop_tok = m.weight_bytes;   /* bytes / 2 (bf16) * 2 FLOPs */
    printf("\n| prefill | chunk | tokens/s | TFLOP/s (2 * params * tokens) | %% of GEMM %.0f TFLOP/s |\n|---|---:|---:|---:|---:|\n", gemm_tflops);
    int n = quick ? 512 : 4096, chunks[] = {256, 1024, 2048, 4096};
    for (int c = 0; c < 4; c++) {
        prefill_tps(&m, chunks[c] < n ? chunks[c] : n, chunks[c]);   /* warm-up */
        double tps = prefill_tps(&m, n, chunks[c]);
        printf("| %d tokens | %d | %.0f | %.1f | %.1f%% |\n", n, chunks[c], tps, tps * flop_tok / 1e12, 100 * tps * flop_tok / 1e12 / gemm_tflops);
    }
}

int main(int argc, char **argv) {
    int quick = argc > 1 && !strcmp(argv[1], "--quick");
    const int gemv_only = argc > 1 && !strcmp(argv[1], "--gemv"), paged_only = argc > 1 && !strcmp(argv[1], "--paged");
    const int qgemv_only = argc > 1 && !strcmp(argv[1], "--qgemv"), qprofile_only = argc > 1 && !strcmp(argv[1], "--qprofile");
    const int qgemm_only = argc > 1 && !strcmp(argv[1], "--qgemm"), qprofile_rows = qprofile_only && argc > 2 ? atoi(argv[2]) : 1;
    if (qprofile_rows < 1 || qprofile_rows > 4096) {
        fprintf(stderr, "cuda_bench: --qprofile ROWS takes 1 to 4096 rows, not %s\n", argv[2]);
        return 2;
    }
    short_run = gemv_only || (argc > 1 && !strcmp(argv[1], "--short"));
    setvbuf(stdout, NULL, _IOLBF, 0);   /* every line out as it is made, should the run be cut short */
    cinfer_error e = {0};
    cf_backend_params p = cf_backend_default_params();
    p.device = CF_DEVICE_CUDA;
    p.pool_bytes = (size_t)48 << 30;
    cinfer_status st = cf_backend_create(&p, &be, &e);
    if (st == CINFER_E_NO_DEVICE) {
        printf("SKIP: %s\n", e.message);
        return 77;
    }
    ok(st, &e, "cuda backend");
    op = be->ops;
    ok(cf_cuda_memcpy_bandwidth(be, (size_t)4 << 30, 20, &copy_bw, &e), &e, "copy bandwidth");
    printf("# cuda_bench%s\n\ndevice-to-device copy (4 GiB, read + write): %.0f GB/s\n", argc > 1 ? argv[1] : "", copy_bw);
    if (gemv_only || paged_only || qgemv_only || qgemm_only || qprofile_only) {
        if (gemv_only) bench_gemv(0);
        else if (paged_only) bench_paged(0);
        else if (qprofile_only) qprofile(qprofile_rows);
        else if (qgemm_only) bench_qgemm();
        else {
            bench_qgemv();
            bench_qgemm();
        }
        cf_backend_destroy(be);
        return 0;
    }
    double g_big = bench_gemm(4096, 4096, 14336, quick ? 2 : 10), g_chunk = bench_gemm(256, 4096, 14336, quick ? 2 : 20);
    printf("bf16 GEMM (matmul op, cuBLAS): 4096x4096x14336 %.0f TFLOP/s; 256x4096x14336 %.0f TFLOP/s\n", g_big, g_chunk);
    fflush(stdout);
    bench_model(quick, g_big);
    fflush(stdout);
    bench_gemv(quick);
    fflush(stdout);
    bench_attention(quick);
    fflush(stdout);
    bench_paged(quick);
    ok(op->sync(be, &e), &e, "final sync");
    cf_backend_destroy(be);
    return 0;
}
