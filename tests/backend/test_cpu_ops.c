/* test_cpu_ops.c: the CPU backend's optional ops against their definitions in backend.h: kv_store_pos
 * and attention_pos against kv_store and attention at the same positions (bit for bit: the CPU reads the
 * positions from its own memory), argmax's tie and NaN rules, sample against the host sampler given the
 * same uniforms (cf_sampler_sample_u), and sample's failures reported once by the next sync or read; and
 * upload_weight's placement: an aligned matrix used in place, a misaligned one copied to a 64-byte boundary
 * with the same products. */
#include "backend/backend.h"
#include "base/status.h"
#include "sample/sampler.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../check.h"

static cf_backend *be;
static const cf_backend_ops *op;

static uint64_t rs = 0x9E3779B97F4A7C15ull;
static float frand(void) {  /* [-1, 1) */
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return (float)(rs >> 40) / (float)(1 << 23) - 1.0f;
}

static cf_tensor alloc(cf_dtype dt, int64_t rows, int64_t cols) {
    cf_tensor t = {0};
    cinfer_error err = {0};
    if (op->alloc(be, dt, rows, cols, &t, &err) != CINFER_OK) {
        fprintf(stderr, "alloc: %s\n", err.message);
        exit(1);
    }
    return t;
}

static void fill_random(cf_tensor t) {
    for (int64_t r = 0; r < t.rows; r++)
        for (int64_t c = 0; c < t.cols; c++) ((float *)t.data)[r * t.stride + c] = frand();
}

static void write_pos(cf_tensor pos, const int32_t *p, int n) { op->write(be, cf_rows(pos, 0, n), p); }

static void test_present(void) {
    CHECK(op->kv_store_pos && op->attention_pos && op->argmax && op->sample, "the CPU lacks an optional op it implements");
    CHECK(!op->graph_begin && !op->graph_end && !op->graph_launch && !op->graph_free, "the CPU has graph ops");
    CHECK(be->prefill_chunk == 256, "prefill_chunk %d, want 256", be->prefill_chunk);
}

/* kv_store_pos puts row i in slot pos[i] % cap and touches nothing else; consecutive positions agree with
 * kv_store. */
static void test_kv_store_pos(void) {
    enum { CAP = 7, D = 5 };
    cf_tensor a = alloc(CF_F32, CAP, D), b = alloc(CF_F32, CAP, D), src = alloc(CF_F32, 4, D), pos = alloc(CF_I32, 4, 1);
    fill_random(src);
    const int32_t starts[] = {0, 3, 5, 12, 700};
    for (size_t k = 0; k < sizeof starts / sizeof starts[0]; k++) {
        op->fill(be, a, -7.0f);
        op->fill(be, b, -7.0f);
        int32_t p[4];
        for (int i = 0; i < 4; i++) p[i] = starts[k] + i;
        write_pos(pos, p, 4);
        op->kv_store(be, a, src, starts[k], CAP);
        op->kv_store_pos(be, b, src, pos, CAP);
        CHECK(!memcmp(a.data, b.data, sizeof(float) * CAP * D), "kv_store_pos at %d..%d differs from kv_store", p[0], p[3]);
    }
    /* scattered positions */
    const int32_t p[4] = {9, 3, 20, 7};  /* slots 2, 3, 6, 0 */
    write_pos(pos, p, 4);
    op->fill(be, b, -7.0f);
    op->kv_store_pos(be, b, src, pos, CAP);
    int touched[CAP] = {0};
    for (int i = 0; i < 4; i++) {
        touched[p[i] % CAP] = 1;
        CHECK(!memcmp((float *)b.data + (p[i] % CAP) * D, (float *)src.data + i * D, sizeof(float) * D), "row %d not in slot %d", i,
              p[i] % CAP);
    }
    for (int sl = 0; sl < CAP; sl++)
        if (!touched[sl]) CHECK(((float *)b.data)[sl * D] == -7.0f, "slot %d written", sl);
    op->free_tensor(be, &a);
    op->free_tensor(be, &b);
    op->free_tensor(be, &src);
    op->free_tensor(be, &pos);
}

/* attention_pos takes pos0 from pos[0] and ignores a->pos0. */
static void test_attention_pos(void) {
    const struct { int n_q, pos0, cap, window; float softcap; int heads, kv_heads, hd, vhd; } cases[] = {
        {1, 0, 16, 0, 0.0f, 4, 2, 8, 8},   {1, 15, 16, 0, 0.0f, 4, 2, 8, 8},  {1, 40, 12, 8, 0.0f, 2, 1, 16, 8},
        {3, 9, 12, 8, 30.0f, 4, 4, 8, 16}, {5, 3, 64, 0, 50.0f, 6, 2, 4, 4},  {1, 1000, 9, 4, 0.0f, 2, 2, 8, 8},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int nq = cases[c].n_q, H = cases[c].heads, KH = cases[c].kv_heads, hd = cases[c].hd, vhd = cases[c].vhd;
        cf_tensor q = alloc(CF_F32, nq, H * hd), kc = alloc(CF_F32, cases[c].cap, KH * hd), vc = alloc(CF_F32, cases[c].cap, KH * vhd);
        cf_tensor o1 = alloc(CF_F32, nq, H * vhd), o2 = alloc(CF_F32, nq, H * vhd), pos = alloc(CF_I32, nq, 1);
        fill_random(q);
        fill_random(kc);
        fill_random(vc);
        int32_t p[8];
        for (int i = 0; i < nq; i++) p[i] = cases[c].pos0 + i;
        write_pos(pos, p, nq);
        cf_attn_args a = {.n_q = nq, .pos0 = cases[c].pos0, .n_heads = H, .n_kv_heads = KH, .head_dim = hd, .v_head_dim = vhd,
                          .cap = cases[c].cap, .window = cases[c].window, .scale = 1.0f / sqrtf((float)hd), .softcap = cases[c].softcap};
        op->attention(be, o1, q, kc, vc, &a);
        a.pos0 = -12345;  /* ignored */
        op->attention_pos(be, o2, q, kc, vc, &a, pos);
        CHECK(!memcmp(o1.data, o2.data, sizeof(float) * nq * H * vhd), "case %zu: attention_pos differs from attention", c);
        cf_tensor *ts[] = {&q, &kc, &vc, &o1, &o2, &pos};
        for (size_t i = 0; i < 6; i++) op->free_tensor(be, ts[i]);
    }
}

static int32_t id_at(cf_tensor ids, int r) { return ((const int32_t *)ids.data)[r * ids.stride]; }

static void test_argmax(void) {
    enum { R = 7, V = 9 };
    const float nan = NAN, inf = INFINITY;
    const float rows[R][V] = {
        {0, 1, 2, 3, 4, 5, 6, 7, 8},
        {3, 9, 1, 9, 0, 9, 2, 2, 2},                      /* ties: lowest index */
        {0, 1, 0, 5, 5, nan, 0, 0, 0},                    /* a NaN: -1 (non-finite logits) */
        {-inf, -inf, -inf, -inf, -inf, -inf, -inf, -inf, -inf},
        {nan, nan, nan, nan, nan, nan, nan, nan, nan},
        {1, inf, 3, inf, 0, 0, 0, 0, 0},                  /* +inf: -1 */
        {-5, -4, -3, -2, -1, -2, -3, -1, -6},
    };
    const int32_t want[R] = {8, 1, -1, 0, -1, -1, 4};
    cf_tensor lg = alloc(CF_F32, R, V), ids = alloc(CF_I32, R, 1);
    op->write(be, lg, rows);
    op->argmax(be, ids, lg);
    for (int r = 0; r < R; r++) CHECK(id_at(ids, r) == want[r], "argmax row %d: %d, want %d", r, id_at(ids, r), want[r]);
    /* a view of one row with a row stride, into an ids view */
    op->argmax(be, cf_rows(ids, 2, 1), cf_rows(lg, 6, 1));
    CHECK(id_at(ids, 2) == 4, "argmax of a row view: %d", id_at(ids, 2));
    cinfer_error err = {0};
    CHECK(op->sync(be, &err) == CINFER_OK, "argmax failed: %s", err.message);
    op->free_tensor(be, &lg);
    op->free_tensor(be, &ids);
}

/* sample: per row, the host sampler's token for the same arguments and u. */
static void test_sample(void) {
    enum { R = 6, V = 1000, REPS = 40 };
    const cf_sample_args args[] = {
        {1.0f, 0, 1.0f, 0.0f},  {0.0f, 0, 1.0f, 0.0f},  {0.6f, 40, 1.0f, 0.0f},   {1.4f, 0, 0.9f, 0.0f},
        {1.0f, 0, 1.0f, 0.1f},  {0.8f, 100, 0.7f, 0.05f}, {1.0f, V, 1.0f, 0.0f},  {1e-30f, 0, 1.0f, 0.0f},
    };
    cf_tensor lg = alloc(CF_F32, R, V), ids = alloc(CF_I32, R, 1), u = alloc(CF_F32, R, 1);
    float *host = malloc(sizeof(float) * R * V);
    int n_same = 0, n = 0;
    for (int rep = 0; rep < REPS; rep++) {
        const cf_sample_args *sa = &args[rep % (sizeof args / sizeof args[0])];  /* the arguments change every call */
        float uh[R];
        for (int r = 0; r < R; r++) {
            for (int i = 0; i < V; i++) host[r * V + i] = 3.0f * frand() + (i % 17 == 0 ? 2.0f : 0.0f);
            uh[r] = r == 0 ? 0.0f : r == 1 ? nextafterf(1.0f, 0.0f) : 0.5f * (frand() + 1.0f);
        }
        op->write(be, lg, host);
        op->write(be, u, uh);
        op->sample(be, ids, lg, u, sa);
        cinfer_error err = {0};
        CHECK(op->sync(be, &err) == CINFER_OK, "sample: %s", err.message);
        cf_sampling_params p = cf_sampling_truncation(sa->temperature, sa->top_k, sa->top_p, sa->min_p);
        cf_sampler *s = NULL;
        if (cf_sampler_create(&p, V, &s, &err) != CINFER_OK) { CHECK(0, "sampler: %s", err.message); continue; }
        for (int r = 0; r < R; r++) {
            cf_sample_result res;
            CHECK(cf_sampler_sample_u(s, host + r * V, uh[r], &res, &err) == CINFER_OK, "host: %s", err.message);
            n_same += res.token == id_at(ids, r);
            n++;
            CHECK(res.token == id_at(ids, r), "rep %d row %d (T %g k %d p %g min_p %g, u %.9g): %d, host sampler %d", rep, r,
                  (double)sa->temperature, sa->top_k, (double)sa->top_p, (double)sa->min_p, (double)uh[r], id_at(ids, r), res.token);
        }
        cf_sampler_free(s);
    }
    printf("sample: %d of %d rows equal to the host sampler's\n", n_same, n);

    /* failures: reported once by the next sync or read, then forgotten */
    cinfer_error err = {0};
    const cf_sample_args plain = {1.0f, 0, 1.0f, 0.0f};
    for (int i = 0; i < V; i++) host[i] = frand();
    host[17] = NAN;
    op->write(be, cf_rows(lg, 0, 1), host);
    op->sample(be, cf_rows(ids, 0, 1), cf_rows(lg, 0, 1), cf_rows(u, 0, 1), &plain);
    CHECK(op->sync(be, &err) == CINFER_E_NOT_A_NUMBER, "a NaN logit: %s", cinfer_status_name(err.code));
    CHECK(op->sync(be, &err) == CINFER_OK, "the failure was reported twice");
    host[17] = -INFINITY;
    for (int i = 0; i < V; i++) host[i] = -INFINITY;
    op->write(be, cf_rows(lg, 0, 1), host);
    op->sample(be, cf_rows(ids, 0, 1), cf_rows(lg, 0, 1), cf_rows(u, 0, 1), &plain);
    float back = 0;
    CHECK(op->read(be, &back, cf_rows(ids, 0, 1), &err) == CINFER_E_INVALID_ARGUMENT, "every logit -inf: %s",
          cinfer_status_name(err.code));
    const cf_sample_args bad = {1.0f, 0, 0.0f, 0.0f};
    op->sample(be, cf_rows(ids, 0, 1), cf_rows(lg, 0, 1), cf_rows(u, 0, 1), &bad);
    CHECK(op->sync(be, &err) == CINFER_E_TOP_P, "top_p 0: %s", cinfer_status_name(err.code));
    const float one = 1.0f;
    op->write(be, cf_rows(u, 0, 1), &one);
    for (int i = 0; i < V; i++) host[i] = frand();
    op->write(be, cf_rows(lg, 0, 1), host);
    op->sample(be, cf_rows(ids, 0, 1), cf_rows(lg, 0, 1), cf_rows(u, 0, 1), &plain);
    CHECK(op->sync(be, &err) == CINFER_E_INVALID_ARGUMENT, "u = 1: %s", cinfer_status_name(err.code));
    CHECK(op->sync(be, &err) == CINFER_OK, "the backend stays failed");
    free(host);
    op->free_tensor(be, &lg);
    op->free_tensor(be, &ids);
    op->free_tensor(be, &u);
}

/* bf16 weights [37, 70] at every 2-byte offset of a 64-byte line: in place when aligned (and vectors always), else
 * an aligned copy; the products equal those of the aligned upload bit for bit */
static void test_upload_placement(void) {
    enum { D = 37, K = 70, N = 3 };
    uint16_t *buf = aligned_alloc(64, ((D * K + 64) * sizeof(uint16_t) + 63) / 64 * 64);
    float *ref = malloc(N * D * sizeof *ref), *got = malloc(N * D * sizeof *got);
    if (!buf || !ref || !got) exit(1);
    cf_tensor x = alloc(CF_F32, N, K), out = alloc(CF_F32, N, D), none = {0};
    fill_random(x);
    cinfer_error err = {0};
    for (int off = 0; off < 32; off++) {
        uint16_t *w = buf + off;
        rs = 0x9E3779B97F4A7C15ull;
        for (int i = 0; i < D * K; i++) w[i] = cf_f32_to_bf16(frand());
        cf_tensor t = {0}, v = {0};
        CHECK(op->upload_weight(be, w, CF_BF16, D, K, &t, &err) == CINFER_OK, "upload at +%d bytes: %s", 2 * off, err.message);
        CHECK(op->upload_weight(be, w, CF_BF16, 1, K, &v, &err) == CINFER_OK, "vector upload at +%d bytes: %s", 2 * off, err.message);
        CHECK((uintptr_t)t.data % 64 == 0, "matrix at +%d bytes: data %p not 64-byte aligned", 2 * off, t.data);
        CHECK(off % 32 ? t.data != (void *)w : t.data == (void *)w, "matrix at +%d bytes: %s", 2 * off,
              off % 32 ? "used in place" : "copied though aligned");
        CHECK(v.data == (void *)w, "a vector at +%d bytes was copied", 2 * off);
        CHECK(!memcmp(t.data, w, D * K * sizeof *w), "the copy at +%d bytes differs from its source", 2 * off);
        op->matmul(be, out, x, t, none);
        CHECK(op->read(be, off ? got : ref, out, &err) == CINFER_OK, "read: %s", err.message);
        if (off) CHECK(!memcmp(got, ref, N * D * sizeof *got), "products at +%d bytes differ from the aligned upload's", 2 * off);
    }
    op->free_tensor(be, &x);
    op->free_tensor(be, &out);
    free(buf);
    free(ref);
    free(got);
}

int main(void) {
    cf_backend_params p = cf_backend_default_params();
    p.n_threads = 2;
    cinfer_error err = {0};
    if (cf_backend_create(&p, &be, &err) != CINFER_OK) {
        fprintf(stderr, "backend: %s\n", err.message);
        return 1;
    }
    op = be->ops;
    test_present();
    test_kv_store_pos();
    test_attention_pos();
    test_argmax();
    test_sample();
    test_upload_placement();
    cf_backend_destroy(be);
    printf("%d checks, %d failed\n", checks, failures);
    return failures ? 1 : 0;
}
