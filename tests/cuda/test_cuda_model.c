/* test_cuda_model.c: a fixture model on the CUDA backend against the CPU backend's f32 path: logits of
 * every prompt position, and the greedy continuation, with bf16 activations (the default) and with f32
 * activations (CINFER_CUDA_F32_ACT=1).
 *
 * Bounds, as max |gpu - cpu| over all logits against max |cpu logit|: the GPU stores the f32 fixture
 * weights as bf16, each within 2^-8 of its value, which moves every layer's output by a fraction of a
 * percent and the logits by up to a few percent of their scale: 5e-2 with f32 activations. bf16
 * activations add a rounding of the same size at every op's output, about ten per layer, so 1e-1.
 * Mixture-of-experts models route each token to its top-k experts, a discontinuous choice: a rounding
 * that swaps two nearly tied experts changes that token's output by O(1), so their logits have no bf16
 * bound and only the greedy rule applies to them. Greedy ids must agree until the first step where the
 * CPU's top-1/top-2 margin is below the logit bound (either choice is then right within bf16 precision,
 * and the continuations part). Usage: test_cuda_model FIXTURE_DIR   (exit 77 without a GPU) */
#include "model/model.h"
#include "base/status.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define N_PROMPT 16
#define N_GEN 32

static int top(const float *v, int n, float *margin) {
    int a = 0, b = -1;
    for (int i = 1; i < n; i++) {
        if (v[i] > v[a]) { b = a; a = i; }
        else if (b < 0 || v[i] > v[b]) b = i;
    }
    *margin = b < 0 ? INFINITY : v[a] - v[b];
    return a;
}

typedef struct collected {
    int32_t tok[N_GEN];
    int n, stop_after;
} collected;

static int collect(void *ctx, int32_t token) {
    collected *c = ctx;
    if (c->n < N_GEN) c->tok[c->n] = token;
    c->n++;
    return c->n == c->stop_after;
}

/* On the GPU, greedy: cf_model_decode_run (one step ahead) against single cf_model_decode_steps, with a
 * stop after 7 tokens, 3 single steps, and a run to the end. */
static int check_run(const char *dir, cf_model *gpu, const int32_t *ids) {
    const cf_sample_args greedy = {0.0f, 0, 1.0f, 0.0f};
    cinfer_error e = {0};
    cf_seq *a = NULL, *b = NULL;
    int32_t want[N_GEN], got[N_GEN];
    int done = 0, ok = cf_seq_create(gpu, 0, &a, &e) == CINFER_OK && cf_seq_create(gpu, 0, &b, &e) == CINFER_OK &&
                       cf_model_eval(gpu, a, ids, N_PROMPT, NULL, 0, &e) == CINFER_OK &&
                       cf_model_eval(gpu, b, ids, N_PROMPT, NULL, 0, &e) == CINFER_OK &&
                       cf_model_pick_last(gpu, a, &greedy, 0, &want[0], &e) == CINFER_OK;
    for (int i = 1; ok && i < N_GEN; i++) ok = cf_model_decode_step(gpu, a, want[i - 1], &greedy, 0, &want[i], &e) == CINFER_OK;
    got[0] = want[0];
    collected c = {.stop_after = 7};
    ok = ok && cf_model_decode_run(gpu, b, got[0], &greedy, NULL, N_GEN - 1, collect, &c, &done, &e) == CINFER_OK && done == 7;
    if (ok) memcpy(got + 1, c.tok, 7 * sizeof *got);
    for (int i = 8; ok && i < 11; i++) ok = cf_model_decode_step(gpu, b, got[i - 1], &greedy, 0, &got[i], &e) == CINFER_OK;
    c = (collected){.stop_after = 0};
    ok = ok && cf_model_decode_run(gpu, b, got[10], &greedy, NULL, N_GEN - 11, collect, &c, &done, &e) == CINFER_OK &&
         done == N_GEN - 11 && cf_seq_len(b) == cf_seq_len(a);
    if (ok) memcpy(got + 11, c.tok, (size_t)(N_GEN - 11) * sizeof *got);
    int d = -1;
    for (int i = 0; ok && i < N_GEN && d < 0; i++)
        if (got[i] != want[i]) d = i;
    if (!ok) printf("FAIL %s: decode run: %s\n", dir, e.message);
    else if (d >= 0) printf("FAIL %s: decode run: step %d gives %d, single steps %d\n", dir, d, got[d], want[d]);
    else printf("ok   %s: decode run (one step ahead, a stop, steps, a run) = %d single steps\n", dir, N_GEN);
    cf_seq_free(a);
    cf_seq_free(b);
    return !ok || d >= 0;
}

static int run(const char *dir, cf_model *cpu, int f32_act) {
    cinfer_error e = {0};
    cf_model_params p = cf_model_default_params();
    p.backend.device = CF_DEVICE_CUDA;
    p.backend.pool_bytes = (size_t)2 << 30;
    setenv("CINFER_CUDA_F32_ACT", f32_act ? "1" : "0", 1);
    cf_model *gpu = NULL;
    cinfer_status st = cf_model_load(dir, &p, &gpu, &e);
    if (st == CINFER_E_NO_DEVICE) {
        printf("SKIP: %s\n", e.message);
        return 77;
    }
    if (st != CINFER_OK) { fprintf(stderr, "load %s on cuda: %s\n", dir, e.message); return 1; }
    const int V = cpu->hp.vocab;
    int32_t ids[N_PROMPT];
    for (int i = 0; i < N_PROMPT; i++) ids[i] = (int32_t)((1 + 7919ll * i) % V);
    float *lc = malloc((size_t)N_PROMPT * V * sizeof *lc), *lg = malloc((size_t)N_PROMPT * V * sizeof *lg);
    cf_seq *sc = NULL, *sg = NULL;
    int fail = 0;
    if (cf_seq_create(cpu, 0, &sc, &e) || cf_seq_create(gpu, 0, &sg, &e) || cf_model_eval(cpu, sc, ids, N_PROMPT, lc, 1, &e) ||
        cf_model_eval(gpu, sg, ids, N_PROMPT, lg, 1, &e)) {
        fprintf(stderr, "%s: %s\n", dir, e.message);
        fail = 1;
    } else {
        double me = 0, mr = 0;
        int bad = 0;
        for (size_t i = 0; i < (size_t)N_PROMPT * V; i++) {
            if (!isfinite(lg[i])) bad = 1;
            me = fmax(me, fabs((double)lg[i] - lc[i]));
            mr = fmax(mr, fabs((double)lc[i]));
        }
        const int moe = cpu->hp.n_experts > 0;
        const double bound = (f32_act ? 5e-2 : 1e-1) * mr;
        fail = bad || (!moe && !(me <= bound));
        printf("%-4s %s (%s activations): max |logit cuda - cpu| %.4g, max |logit| %.4g, bound %.4g%s\n", fail ? "FAIL" : "ok", dir,
               f32_act ? "f32" : "bf16", me, mr, bound, moe ? " (mixture of experts: not applied)" : "");
        /* greedy from the last prompt position */
        float *c = lc + (size_t)(N_PROMPT - 1) * V, *g = lg + (size_t)(N_PROMPT - 1) * V;
        int agree = 0;
        for (int t = 0; t < N_GEN; t++) {
            float mc, mg;
            int32_t a = top(c, V, &mc), b = top(g, V, &mg);
            if (a != b) {
                if (mc < bound) { printf("     greedy: stop at step %d, CPU margin %.3g below the bound\n", t, mc); break; }
                printf("FAIL %s: greedy step %d: cuda %d, cpu %d (CPU margin %.3g)\n", dir, t, b, a, mc);
                fail = 1;
                break;
            }
            agree++;
            if (cf_model_eval(cpu, sc, &a, 1, c, 0, &e) || cf_model_eval(gpu, sg, &b, 1, g, 0, &e)) {
                fprintf(stderr, "%s: %s\n", dir, e.message);
                fail = 1;
                break;
            }
        }
        printf("     greedy: %d/%d ids identical\n", agree, N_GEN);
        if (check_run(dir, gpu, ids)) fail = 1;
    }
    cf_seq_free(sc);
    cf_seq_free(sg);
    cf_model_free(gpu);
    free(lc);
    free(lg);
    return fail;
}

int main(int argc, char **argv) {
    if (argc != 2) { fprintf(stderr, "usage: test_cuda_model FIXTURE_DIR\n"); return 2; }
    cinfer_error e = {0};
    cf_model_params p = cf_model_default_params();
    cf_model *cpu = NULL;
    if (cf_model_load(argv[1], &p, &cpu, &e) != CINFER_OK) { fprintf(stderr, "load %s: %s\n", argv[1], e.message); return 1; }
    int rc = run(argv[1], cpu, 0);
    if (rc != 77) {
        int rc32 = run(argv[1], cpu, 1);
        if (rc32) rc = rc32;
    }
    cf_model_free(cpu);
    return rc;
}
