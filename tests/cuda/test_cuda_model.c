/* test_cuda_model.c: a fixture model on the CUDA backend against the CPU backend on the same weights:
 * both load a copy of the fixture with every weight rounded to bf16 (written to TMP), the GPU's own
 * storage type, so the comparison sees only how the GPU computes. Logits of every prompt position and of
 * every greedy step, with bf16 activations (the default) and with f32 activations (tuning.cuda_f32_act);
 * then the GPU's decode_run against its single steps, and its rollback against a fresh GPU sequence.
 *
 * Bounds, as max |gpu - cpu| over all logits (the CPU computes in f32 from the bf16 weights, rounding each
 * matmul's activations to bf16 as src/backend/cpu/cpu_bf16.c defines; the GPU reads the same weights, so only
 * activations and summation order differ). Both GPU modes feed every GEMM's
 * activations to cuBLAS in bf16 (a relative 2^-9 rounding of each input), so "f32 activations" only keeps
 * the rest of the step (norms, attention, residual stream) in f32. How far such roundings move the logits
 * depends on the model, so the bound is the larger of a share of max |cpu logit| (BF16_ACT_BOUND,
 * F32_ACT_BOUND) and twice the model's measured sensitivity: the change on the CPU from rounding every
 * weight to bf16 (a perturbation of the same relative size as the GPU's activation roundings). Measured
 * on the H200 (2026-12-03), the GPU's error tracks that sensitivity: llama 1.5% of max |logit| (its
 * sensitivity 1.6%), qwen3 1.3% (1.2%), gemma4 3.9% (6.1%), gemma4-moe 50% (57%: its routers' near-tied
 * experts flip under any rounding, so for this fixture the logits bound is loose and the greedy check
 * carries the weight). Greedy steps are checked against the same bound.
 * Greedy: both backends are fed the CPU's pick at every step (teacher forcing), so one near-tie does not
 * end the comparison; each step's picks must agree, or differ only at a real near-tie (the CPU's top-1/
 * top-2 margin within twice that step's measured logit error), and at least MIN_COMPARED of the N_GEN
 * picks must be identical (MIN_COMPARED_MOE for a mixture of experts).
 *
 * usage: test_cuda_model FIXTURE_DIR TMP        the GPU against the CPU (exit 77, SKIP, without a GPU)
 *        test_cuda_model --cpu FIXTURE_DIR TMP  where there is no GPU: every weight of the copy is the bf16
 *                                               rounding of the fixture's, and the comparison run with a
 *                                               second CPU model of the copy in the GPU's place finds no
 *                                               difference at all (bound 0, all N_GEN ids). */
#include "model/model.h"
#include "model/seq.h"
#include "format/safetensors.h"
#include "base/file.h"
#include "base/status.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define N_PROMPT 16
#define N_GEN 32
#define MIN_COMPARED 24    /* greedy picks that must be identical, of N_GEN */
#define MIN_COMPARED_MOE 20   /* the same for a mixture of experts: the MoE fixture's routers flip near-tied experts under
                               * any rounding, 23 identical on an H100 and 24-25 on the H200 (every other pick a near-tie) */
#define BF16_ACT_BOUND 5e-2
#define F32_ACT_BOUND 3e-2

/* ---- the bf16 copy ---- */

static int copy_file(const char *from, const char *to) {
    size_t len = 0;
    char *text = cf_read_file(from, &len);
    if (!text) return 0;
    FILE *fp = fopen(to, "wb");
    int ok = fp && fwrite(text, 1, len, fp) == len;
    if (fp && fclose(fp) != 0) ok = 0;
    free(text);
    return ok;
}

/* tmp/: dir's config.json and one model.safetensors holding every weight of dir rounded to bf16 */
static int write_bf16_copy(const char *dir, const char *tmp) {
    cinfer_error e = {0};
    char from[4096], to[4096];
    mkdir(tmp, 0755);
    snprintf(from, sizeof from, "%s/config.json", dir);
    snprintf(to, sizeof to, "%s/config.json", tmp);
    if (!copy_file(from, to)) { fprintf(stderr, "cannot copy %s to %s\n", from, to); return 0; }
    cf_st_set *st = NULL;
    if (cf_st_open_dir(dir, &st, &e) != CINFER_OK) { fprintf(stderr, "%s\n", e.message); return 0; }
    const size_t n = cf_st_count(st);
    cf_st_write_entry *ent = calloc(n, sizeof *ent);
    uint16_t **bufs = calloc(n, sizeof *bufs);
    int ok = ent && bufs;
    for (size_t i = 0; ok && i < n; i++) {
        const cf_st_tensor *t = cf_st_at(st, i);
        if (t->dtype != CF_F32 && t->dtype != CF_F16 && t->dtype != CF_BF16) {
            fprintf(stderr, "%s: tensor %s has dtype %s\n", dir, t->name, t->dtype_name);
            ok = 0;
            break;
        }
        size_t count = 1;
        for (int d = 0; d < t->n_dims; d++) count *= (size_t)t->shape[d];
        float *f = malloc((count ? count : 1) * sizeof *f);
        bufs[i] = malloc((count ? count : 1) * sizeof *bufs[i]);
        ok = f && bufs[i];
        if (ok) {
            cf_to_f32(f, t->data, (cf_dtype)t->dtype, count);
            for (size_t j = 0; j < count; j++) bufs[i][j] = cf_f32_to_bf16(f[j]);
            ent[i] = (cf_st_write_entry){.name = t->name, .dtype = CF_BF16, .n_dims = t->n_dims, .data = bufs[i]};
            memcpy(ent[i].shape, t->shape, sizeof ent[i].shape);
        }
        free(f);
    }
    snprintf(to, sizeof to, "%s/model.safetensors", tmp);
    if (ok && cf_st_write(to, ent, n, &e) != CINFER_OK) { fprintf(stderr, "%s\n", e.message); ok = 0; }
    for (size_t i = 0; bufs && i < n; i++) free(bufs[i]);
    free(bufs);
    free(ent);
    cf_st_close(st);
    if (!ok) fprintf(stderr, "cannot write the bf16 copy of %s in %s\n", dir, tmp);
    return ok;
}

/* every tensor of tmp is the bf16 rounding of dir's tensor of the same name, and there are as many */
static int check_bf16_copy(const char *dir, const char *tmp) {
    cinfer_error e = {0};
    cf_st_set *a = NULL, *b = NULL;
    int ok = cf_st_open_dir(dir, &a, &e) == CINFER_OK && cf_st_open_dir(tmp, &b, &e) == CINFER_OK;
    if (!ok) fprintf(stderr, "%s\n", e.message);
    size_t bad = 0, values = 0;
    ok = ok && cf_st_count(a) == cf_st_count(b);
    for (size_t i = 0; ok && i < cf_st_count(a); i++) {
        const cf_st_tensor *t = cf_st_at(a, i), *c = cf_st_find(b, t->name);
        ok = c && c->dtype == CF_BF16 && c->n_dims == t->n_dims && !memcmp(c->shape, t->shape, sizeof c->shape);
        if (!ok) { fprintf(stderr, "%s: tensor %s is missing or has another type or shape\n", tmp, t->name); break; }
        size_t count = c->nbytes / 2;
        float *f = malloc((count ? count : 1) * sizeof *f);
        if (!f) { ok = 0; break; }
        cf_to_f32(f, t->data, (cf_dtype)t->dtype, count);
        const uint16_t *h = c->data;
        for (size_t j = 0; j < count; j++) bad += h[j] != cf_f32_to_bf16(f[j]);
        values += count;
        free(f);
    }
    cf_st_close(a);
    cf_st_close(b);
    printf("%-4s %s: %zu weights, %zu not the bf16 rounding of %s's\n", ok && !bad ? "ok" : "FAIL", tmp, values, bad, dir);
    return !ok || bad;
}

/* ---- the comparison ---- */

static int top(const float *v, int n, float *margin) {
    int a = 0, b = -1;
    for (int i = 1; i < n; i++) {
        if (v[i] > v[a]) { b = a; a = i; }
        else if (b < 0 || v[i] > v[b]) b = i;
    }
    *margin = b < 0 ? INFINITY : v[a] - v[b];
    return a;
}

/* max |a - b| over n values; nonfinite values in a give infinity */
static double err_of(const float *a, const float *b, size_t n, double *scale) {
    double e = 0;
    for (size_t i = 0; i < n; i++) {
        e = isfinite(a[i]) ? fmax(e, fabs((double)a[i] - b[i])) : INFINITY;
        *scale = fmax(*scale, fabs((double)b[i]));
    }
    return e;
}

/* dev against ref: logits of the prompt's positions, then greedy from there, each step's logits within
 * rel_bound x max |ref logit|. Returns nonzero on a failure. */
static int compare(const char *label, cf_model *ref, cf_model *dev, double rel_bound, double sens) {
    cinfer_error e = {0};
    const int V = ref->hp.vocab;
    int32_t ids[N_PROMPT];
    for (int i = 0; i < N_PROMPT; i++) ids[i] = (int32_t)((1 + 7919ll * i) % V);
    float *lr = malloc((size_t)N_PROMPT * V * sizeof *lr), *ld = malloc((size_t)N_PROMPT * V * sizeof *ld);
    cf_seq *sr = NULL, *sd = NULL;
    int fail = 0;
    if (!lr || !ld || cf_seq_create(ref, 0, &sr, &e) || cf_seq_create(dev, 0, &sd, &e) ||
        cf_model_eval(ref, sr, ids, N_PROMPT, lr, 1, &e) || cf_model_eval(dev, sd, ids, N_PROMPT, ld, 1, &e)) {
        fprintf(stderr, "%s: %s\n", label, e.message);
        fail = 1;
        goto out;
    }
    double scale = 0, me = err_of(ld, lr, (size_t)N_PROMPT * V, &scale);
    const double bound = fmax(rel_bound * scale, 2 * sens);
    fail = !(me <= bound);
    printf("%-4s %s: prompt logits: max |error| %.4g, max |logit| %.4g, bound %.4g (%g of it, or twice the sensitivity %.4g)%s\n",
           fail ? "FAIL" : "ok", label, me, scale, bound, rel_bound, sens, ref->hp.n_experts ? ", mixture of experts" : "");

    if (fail) {  /* where the error lies: one figure per prompt position */
        printf("     per position:");
        for (int p = 0; p < N_PROMPT; p++) {
            double sp = 0;
            printf(" %.3g", err_of(ld + (size_t)p * V, lr + (size_t)p * V, (size_t)V, &sp));
        }
        printf("\n");
    }

    /* greedy, both sequences fed the CPU's pick (so one near-tie does not end the comparison) */
    float *r = lr + (size_t)(N_PROMPT - 1) * V, *d = ld + (size_t)(N_PROMPT - 1) * V;
    int same = 0, ties = 0;
    double step_err = me, gen_err = 0;
    for (int t = 0; t < N_GEN; t++) {
        float mr, md;
        int32_t a = top(r, V, &mr), b = top(d, V, &md);
        if (a == b) same++;
        else if (mr <= 2 * step_err) {
            ties++;
            printf("     greedy: a near-tie at step %d: CPU %d, GPU %d, CPU margin %.3g within twice the step's error %.3g\n", t, a, b,
                   mr, step_err);
        } else {
            printf("FAIL %s: greedy step %d: GPU %d, CPU %d (CPU margin %.3g, the step's error %.3g)\n", label, t, b, a, mr, step_err);
            fail = 1;
        }
        if (t + 1 == N_GEN) break;
        if (cf_model_eval(ref, sr, &a, 1, r, 0, &e) || cf_model_eval(dev, sd, &a, 1, d, 0, &e)) {
            fprintf(stderr, "%s: %s\n", label, e.message);
            fail = 1;
            break;
        }
        double sc = 0;
        step_err = err_of(d, r, (size_t)V, &sc);
        gen_err = fmax(gen_err, step_err);
        if (!(step_err <= bound)) {
            printf("FAIL %s: greedy step %d: logits differ by %.4g, bound %.4g\n", label, t + 1, step_err, bound);
            fail = 1;
        }
    }
    const int min_same = ref->hp.n_experts ? MIN_COMPARED_MOE : MIN_COMPARED;
    if (same < min_same) fail = 1;
    printf("%-4s %s: greedy: %d of %d picks identical (at least %d), %d near-ties, logits within %.4g\n",
           same < min_same ? "FAIL" : "    ", label, same, N_GEN, min_same, ties, gen_err);
out:
    cf_seq_free(sr);
    cf_seq_free(sd);
    free(lr);
    free(ld);
    return fail;
}

/* ---- the GPU's own paths ---- */

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
static int check_run(const char *dir, cf_model *gpu) {
    const cf_sample_args greedy = {0.0f, 0, 1.0f, 0.0f};
    const int V = gpu->hp.vocab;
    cinfer_error e = {0};
    cf_seq *a = NULL, *b = NULL;
    int32_t ids[N_PROMPT], want[N_GEN], got[N_GEN];
    for (int i = 0; i < N_PROMPT; i++) ids[i] = (int32_t)((1 + 7919ll * i) % V);
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

/* On the GPU, 4 positions a pass (sliding-window rings wrap): a decode_run stopped after 24 tokens (a step
 * queued past the stop), back to the floor, the tokens fed again: the logits of a fresh GPU sequence fed the
 * same tokens the same way, within rel_bound (the fresh sequence's passes are the same ops; only the
 * order of the GPU's parallel sums may differ). */
static int check_rollback(const char *dir, cf_model *gpu, double rel_bound) {
    enum { CHUNK = 4, STEPS = 24 };
    const cf_sample_args greedy = {0.0f, 0, 1.0f, 0.0f};
    const int V = gpu->hp.vocab;
    cinfer_error e = {0};
    cf_seq *s = NULL, *f = NULL;
    int32_t all[N_PROMPT + STEPS];
    for (int i = 0; i < N_PROMPT; i++) all[i] = (int32_t)((1 + 7919ll * i) % V);
    float *got = malloc((size_t)V * sizeof *got), *want = malloc((size_t)V * sizeof *want);
    collected c = {.stop_after = STEPS - 1};
    int done = 0;
    int ok = got && want && cf_seq_create_chunked(gpu, 0, CHUNK, &s, &e) == CINFER_OK &&
             cf_seq_create_chunked(gpu, 0, CHUNK, &f, &e) == CINFER_OK &&
             cf_model_eval(gpu, s, all, N_PROMPT, NULL, 0, &e) == CINFER_OK &&
             cf_model_pick_last(gpu, s, &greedy, 0, &all[N_PROMPT], &e) == CINFER_OK &&
             cf_model_decode_run(gpu, s, all[N_PROMPT], &greedy, NULL, STEPS, collect, &c, &done, &e) == CINFER_OK && done == STEPS - 1;
    if (ok) memcpy(all + N_PROMPT + 1, c.tok, (STEPS - 1) * sizeof *all);
    /* the run returned STEPS - 1 tokens after all[N_PROMPT]; the last of them is not in the sequence yet */
    const int n = N_PROMPT + STEPS - 1, fl = s ? s->kv->floor : 0, to = fl > N_PROMPT ? fl : N_PROMPT;
    if (ok && cf_seq_len(s) != n) {
        ok = 0;
        snprintf(e.message, sizeof e.message, "the sequence holds %d positions after the run, %d expected", cf_seq_len(s), n);
    }
    ok = ok && cf_seq_truncate(s, to, &e) == CINFER_OK && cf_model_eval(gpu, f, all, to, NULL, 0, &e) == CINFER_OK;
    double worst = 0, scale = 0;
    for (int p = to; ok && p < n; p++) {
        ok = cf_model_eval(gpu, s, &all[p], 1, got, 0, &e) == CINFER_OK && cf_model_eval(gpu, f, &all[p], 1, want, 0, &e) == CINFER_OK;
        if (ok) worst = fmax(worst, err_of(got, want, (size_t)V, &scale));
    }
    int fail = !ok || !(worst <= rel_bound * scale);
    if (!ok) printf("FAIL %s: rollback (floor %d, length %d): %s\n", dir, fl, s ? cf_seq_len(s) : -1, e.message);
    else printf("%-4s %s: decode_run, back %d positions to %d (floor %d), fed again: max |error| %.4g against a fresh sequence, bound %.4g\n",
                fail ? "FAIL" : "ok", dir, n - to, to, fl, worst, rel_bound * scale);
    cf_seq_free(s);
    cf_seq_free(f);
    free(got);
    free(want);
    return fail;
}

/* The model's own sensitivity to bf16: max |logit change| on the CPU from rounding every weight of dir to
 * bf16 (cpu holds the rounded copy), over the prompt's positions. */
static double sensitivity(const char *dir, cf_model *cpu) {
    cinfer_error e = {0};
    cf_model_params p = cf_model_default_params();
    cf_model *orig = NULL;
    const int V = cpu->hp.vocab;
    int32_t ids[N_PROMPT];
    for (int i = 0; i < N_PROMPT; i++) ids[i] = (int32_t)((1 + 7919ll * i) % V);
    float *a = malloc((size_t)N_PROMPT * V * sizeof *a), *b = malloc((size_t)N_PROMPT * V * sizeof *b);
    cf_seq *sa = NULL, *sb = NULL;
    double scale = 0, err = -1;
    if (a && b && cf_model_load(dir, &p, &orig, &e) == CINFER_OK && cf_seq_create(orig, 0, &sa, &e) == CINFER_OK &&
        cf_seq_create(cpu, 0, &sb, &e) == CINFER_OK && cf_model_eval(orig, sa, ids, N_PROMPT, a, 1, &e) == CINFER_OK &&
        cf_model_eval(cpu, sb, ids, N_PROMPT, b, 1, &e) == CINFER_OK)
        err = err_of(b, a, (size_t)N_PROMPT * V, &scale);
    else
        fprintf(stderr, "sensitivity of %s: %s\n", dir, e.message);
    cf_seq_free(sa);
    cf_seq_free(sb);
    cf_model_free(orig);
    free(a);
    free(b);
    return err;
}

static int run_gpu(const char *bf16_dir, cf_model *cpu, int f32_act, double sens) {
    cinfer_error e = {0};
    cf_model_params p = cf_model_default_params();
    p.backend.device = CF_DEVICE_CUDA;
    p.backend.pool_bytes = (size_t)2 << 30;
    p.backend.tuning.cuda_f32_act = f32_act;
    cf_model *gpu = NULL;
    cinfer_status st = cf_model_load(bf16_dir, &p, &gpu, &e);
    if (st == CINFER_E_NO_DEVICE) {
        printf("SKIP: %s\n", e.message);
        return 77;
    }
    if (st != CINFER_OK) { fprintf(stderr, "load %s on cuda: %s\n", bf16_dir, e.message); return 1; }
    char label[4200];
    snprintf(label, sizeof label, "%s, cuda vs cpu, %s activations", bf16_dir, f32_act ? "f32" : "bf16");
    const double bound = f32_act ? F32_ACT_BOUND : BF16_ACT_BOUND;
    int fail = compare(label, cpu, gpu, bound, sens);
    if (check_run(bf16_dir, gpu)) fail = 1;
    if (check_rollback(bf16_dir, gpu, bound)) fail = 1;
    cf_model_free(gpu);
    return fail;
}

int main(int argc, char **argv) {
    const int cpu_only = argc == 4 && !strcmp(argv[1], "--cpu");
    if (argc != 3 && !cpu_only) {
        fprintf(stderr, "usage: test_cuda_model FIXTURE_DIR TMP | test_cuda_model --cpu FIXTURE_DIR TMP\n");
        return 2;
    }
    const char *dir = argv[argc - 2], *tmp = argv[argc - 1];
    if (!write_bf16_copy(dir, tmp)) return 1;
    cinfer_error e = {0};
    cf_model_params p = cf_model_default_params();
    cf_model *cpu = NULL;
    if (cf_model_load(tmp, &p, &cpu, &e) != CINFER_OK) { fprintf(stderr, "load %s: %s\n", tmp, e.message); return 1; }
    int rc;
    if (cpu_only) {
        cf_model *other = NULL;
        rc = check_bf16_copy(dir, tmp);
        if (cf_model_load(tmp, &p, &other, &e) != CINFER_OK) {
            fprintf(stderr, "load %s: %s\n", tmp, e.message);
            cf_model_free(cpu);
            return 1;
        }
        char label[4200];
        snprintf(label, sizeof label, "%s, cpu vs cpu", tmp);
        if (compare(label, cpu, other, 0.0, 0.0)) rc = 1;
        cf_model_free(other);
    } else {
        const double sens = sensitivity(dir, cpu);
        if (sens < 0) {
            cf_model_free(cpu);
            return 1;
        }
        rc = run_gpu(tmp, cpu, 0, sens);
        if (rc != 77) {
            int rc32 = run_gpu(tmp, cpu, 1, sens);
            if (rc32) rc = rc32;
        }
    }
    cf_model_free(cpu);
    return rc;
}
