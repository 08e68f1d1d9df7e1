/* test_target.c: the speculative target port (spec/target.h) on one fixture model on the CPU:
 *   - taps against transformers: a forward over hidden.json's prompt tapping every layer, and again a scrambled
 *     subset, compared with hidden.f32 (the decoder layers' outputs, tools/fixtures/make_hidden.py): the max abs
 *     error and the max error relative to the row's max abs value, the latter within TOL (default 1e-4);
 *     the subset's columns equal the full run's bit for bit, the last layer's tap equals the final hidden state;
 *   - project_logits of the final hidden rows equals the runner's own logits for the prompt, bit for bit;
 *   - rollback transactions: after commit(keep) and after abort, feeding the rest gives a fresh run's logits
 *     bit for bit; a bad keep aborts;
 *   - descriptors: the same target passes its check; a changed backend, graph or state ABI is refused naming the
 *     field; a runner with other KV blocks has another state ABI;
 *   - error paths: a bad tap layer (out of range, duplicate), a batch past the runner's token budget, a token id
 *     outside the vocabulary fail and leave the caches, the free blocks and the runner's previous tap state as
 *     they were; a successful call restores that state too.
 * usage: test_target FIXTURE_DIR [TOL [LOGIT_TOL]] */
#include "spec/target.h"
#include "engine/engine.h"
#include "base/file.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../check.h"

static const char *dir;
static cf_target *t;
static int L, D, V;

static cf_rseq *cache(void) {
    cf_rseq *s = NULL;
    cinfer_error err = {0};
    CHECK(cf_target_make_cache(t, &s, &err) == CINFER_OK, "make_cache: %s", err.message);
    return s;
}

/* Forward of ids into one cache; 0 on failure (reported). */
static int fwd1(cf_rseq *s, const int32_t *ids, int n, const int *taps, int n_taps, cf_target_out *out) {
    cinfer_error err = {0};
    cinfer_status st = cf_target_forward(t, &s, &ids, &n, 1, taps, n_taps, out, &err);
    CHECK(st == CINFER_OK, "forward of %d tokens: %s", n, err.message);
    return st == CINFER_OK;
}

/* The logits of every row of ids fed to a fresh runner sequence at once, copied. */
static float *runner_logits(const int32_t *ids, int n) {
    cf_rseq *s = cache();
    cinfer_error err = {0};
    cf_batch_item it = {.seq = s, .ids = ids, .n = n, .logits = CF_LOGITS_ALL};
    float *lg = malloc((size_t)n * V * sizeof *lg);
    int ok = cf_runner_step(cf_target_runner(t), &it, 1, &err) == CINFER_OK;
    CHECK(ok, "runner step: %s", err.message);
    if (ok) memcpy(lg, it.out, (size_t)n * V * sizeof *lg);
    cf_rseq_free(s);
    return ok ? lg : (free(lg), NULL);
}

/* Projected logits of the rows of out, copied. */
static float *projected(const cf_target_out *out) {
    const float *lg = NULL;
    cinfer_error err = {0};
    int ok = cf_target_project_logits(t, out->hidden, out->rows, &lg, &err) == CINFER_OK;
    CHECK(ok, "project_logits: %s", err.message);
    if (!ok) return NULL;
    float *c = malloc((size_t)out->rows * V * sizeof *c);
    memcpy(c, lg, (size_t)out->rows * V * sizeof *c);
    return c;
}

static double logit_tol;

/* The projected logits of hidden.json's prompt against transformers' eager goldens of the same case (golden.json). */
static void test_golden_logits(const float *lg, int n, int case_no) {
    char path[4096];
    snprintf(path, sizeof path, "%s/golden.json", dir);
    char *js = cf_read_file(path, NULL);
    cJSON *g = js ? cJSON_Parse(js) : NULL;
    free(js);
    cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItem(g, "cases"), case_no);
    cJSON *f = cJSON_GetObjectItem(c, "logits");
    CHECK(cJSON_IsString(f) && cJSON_GetArraySize(cJSON_GetObjectItem(c, "prompt")) == n, "golden.json has no case %d of %d tokens", case_no, n);
    if (cJSON_IsString(f)) {
        snprintf(path, sizeof path, "%s/%s", dir, f->valuestring);
        size_t len = 0;
        float *gold = (float *)cf_read_file(path, &len);
        CHECK(gold && len == (size_t)n * V * sizeof *gold, "%s: %zu bytes", path, len);
        if (gold && len == (size_t)n * V * sizeof *gold) {
            double d = 0;
            for (size_t i = 0; i < (size_t)n * V; i++) d = fmax(d, fabs((double)lg[i] - gold[i]));
            printf("%s: project_logits of the final hidden rows vs transformers' golden logits: max diff %.3g\n", dir, d);
            CHECK(d <= logit_tol, "projected logits differ from the goldens by %.3g (tolerance %.1g)", d, logit_tol);
        }
        free(gold);
    }
    cJSON_Delete(g);
}

/* Taps against the oracle: column block j of each row against layer layers[j]'s output. */
static void compare_taps(const cf_target_out *out, const int *layers, int n_taps, const float *gold, int n_tok, double tol,
                         const char *what) {
    double max_abs = 0, max_rel = 0;
    for (int j = 0; j < n_taps; j++)
        for (int r = 0; r < n_tok; r++) {
            const float *g = gold + ((size_t)layers[j] * n_tok + r) * D, *h = out->taps + (size_t)r * n_taps * D + (size_t)j * D;
            double row_max = 0, d = 0;
            for (int k = 0; k < D; k++) {
                row_max = fmax(row_max, fabs(g[k]));
                d = fmax(d, fabs((double)h[k] - g[k]));
            }
            if (!(d <= max_abs)) max_abs = d;   /* NaN stays */
            double rel = d / (row_max > 0 ? row_max : 1);
            if (!(rel <= max_rel)) max_rel = rel;
            CHECK(rel <= tol, "%s: layer %d row %d: |tap - transformers| = %.3g, %.3g of the row's max %.3g (tolerance %.1g)", what,
                  layers[j], r, d, rel, row_max, tol);
        }
    printf("%s %s: %d taps x %d rows: max |tap - transformers| = %.3g, max relative to the row = %.3g\n", dir, what, n_taps, n_tok, max_abs,
           max_rel);
}

/* hidden.json without "attn_implementation": "eager" came from transformers' default (SDPA) attention, which drops
 * the attention logit softcap (Gemma 2): then the taps are compared with a run without it, and the real run is tied
 * to transformers' eager goldens through its logits (test_golden_logits). */
static int oracle_sdpa, case_no;

static void test_taps(cinfer_model *model, const int32_t *prompt, int n, const float *gold, double tol) {
    int all[CF_RUNNER_MAX_TAPS], some[3], n_some = 0;
    for (int l = 0; l < L; l++) all[l] = l;
    /* a scrambled subset: the last, the first, a middle one */
    some[n_some++] = L - 1;
    if (L > 1) some[n_some++] = 0;
    if (L > 2) some[n_some++] = L / 2;

    const float softcap = model->m->hp.attn_softcap;
    if (oracle_sdpa && softcap > 0) {
        printf("%s: hidden.f32 was made with SDPA attention, without the attention softcap of %g: the taps are compared with a run "
               "without it\n", dir, softcap);
        /* on a target of its own: its KV blocks (published to its prefix cache) must not reach the real runs */
        cf_target *real = t, *off = NULL;
        cinfer_error err = {0};
        CHECK(cf_target_create(model, cf_runner_params_of(cf_target_runner(t)), &off, &err) == CINFER_OK, "target: %s", err.message);
        if (off) {
            t = off;
            cf_rseq *s = cache();
            cf_target_out o;
            model->m->hp.attn_softcap = 0;
            if (fwd1(s, prompt, n, all, L, &o)) compare_taps(&o, all, L, gold, n, tol, "all layers, attention softcap off");
            model->m->hp.attn_softcap = softcap;
            cf_rseq_free(s);
            cf_target_free(off);
            t = real;
        }
        tol = INFINITY;   /* the real run's taps differ from this oracle; its logits are checked against the eager goldens */
    }
    const char *vs = tol < INFINITY ? "" : " (softcap on: printed, not checked, against the SDPA oracle)";
    char what_all[128], what_some[128];
    snprintf(what_all, sizeof what_all, "all layers%s", vs);
    snprintf(what_some, sizeof what_some, "scrambled subset%s", vs);
    cf_rseq *a = cache(), *b = cache();
    cf_target_out oa, ob;
    if (fwd1(a, prompt, n, all, L, &oa)) {
        CHECK(oa.rows == n && oa.n_taps == L && oa.taps && oa.hidden, "forward rows %d taps %d", oa.rows, oa.n_taps);
        compare_taps(&oa, all, L, gold, n, tol, what_all);
        int same = 1;
        for (int r = 0; r < n; r++) same &= !memcmp(oa.hidden + (size_t)r * D, oa.taps + ((size_t)r * L + L - 1) * D, (size_t)D * sizeof(float));
        CHECK(same, "the last layer's tap differs from the final hidden state");
        float *ta = malloc((size_t)n * L * D * sizeof *ta), *ha = malloc((size_t)n * D * sizeof *ha);
        memcpy(ta, oa.taps, (size_t)n * L * D * sizeof *ta);
        memcpy(ha, oa.hidden, (size_t)n * D * sizeof *ha);
        if (fwd1(b, prompt, n, some, n_some, &ob)) {
            compare_taps(&ob, some, n_some, gold, n, tol, what_some);
            int eq = !memcmp(ob.hidden, ha, (size_t)n * D * sizeof *ha);
            for (int j = 0; j < n_some; j++)
                for (int r = 0; r < n; r++)
                    eq &= !memcmp(ob.taps + ((size_t)r * n_some + j) * D, ta + ((size_t)r * L + some[j]) * D, (size_t)D * sizeof(float));
            CHECK(eq, "the subset's taps or hidden states differ from the full run's");
            /* no taps: hidden states still, the same */
            cf_rseq *c = cache();
            cf_target_out oc;
            if (fwd1(c, prompt, n, NULL, 0, &oc)) {
                CHECK(oc.taps == NULL && oc.n_taps == 0, "no taps asked, taps returned");
                CHECK(!memcmp(oc.hidden, ha, (size_t)n * D * sizeof *ha), "hidden states without taps differ");
            }
            cf_rseq_free(c);
        }
        /* a decode-shaped call (one row per cache, where the runner would replay a recorded graph) taps as well:
         * the last prompt token after the rest equals the full run's last row */
        cf_rseq *dc = cache();
        cf_target_out od;
        if (n > 1 && fwd1(dc, prompt, n - 1, NULL, 0, &od) && fwd1(dc, prompt + n - 1, 1, all, L, &od)) {
            double dd = 0;
            for (int k = 0; k < L * D; k++) dd = fmax(dd, fabs((double)od.taps[k] - ta[(size_t)(n - 1) * L * D + k]));
            CHECK(od.rows == 1 && !memcmp(od.taps, ta + (size_t)(n - 1) * L * D, (size_t)L * D * sizeof *ta) &&
                      !memcmp(od.hidden, ha + (size_t)(n - 1) * D, (size_t)D * sizeof *ha),
                  "a one-row call's taps differ from the full run's last row by up to %.3g", dd);
        }
        cf_rseq_free(dc);
        /* project_logits of the final hidden rows = the runner's logits */
        cf_target_out ho = {.rows = n, .hidden = ha};
        float *pl = projected(&ho), *rl = runner_logits(prompt, n);
        if (pl && rl) {
            double d = 0;
            for (size_t i = 0; i < (size_t)n * V; i++) d = fmax(d, fabs((double)pl[i] - rl[i]));
            CHECK(!memcmp(pl, rl, (size_t)n * V * sizeof *pl), "project_logits differs from the runner's logits by up to %.3g", d);
            printf("%s: project_logits vs the runner's logits over %d rows: max diff %.3g\n", dir, n, d);
            test_golden_logits(pl, n, case_no);
        }
        free(pl);
        free(rl);
        free(ta);
        free(ha);
    }
    cf_rseq_free(a);
    cf_rseq_free(b);
}

/* Feeds prompt[0, cut), then inside a transaction prompt[cut, n) plus junk, keeps k (or aborts), then feeds the
 * rest of the prompt: its last rows' logits must be a fresh run's. */
static void test_txn(const int32_t *prompt, int n, float *fresh) {
    const int cut = n / 2;
    int32_t junk[5] = {1, 2, 3, 4, 5};
    for (int mode = 0; mode < 3; mode++) {   /* 0: commit k, 1: abort, 2: commit a bad keep (aborts) */
        cf_rseq *s = cache();
        cf_target_out o;
        cinfer_error err = {0};
        if (!fwd1(s, prompt, cut, NULL, 0, &o)) { cf_rseq_free(s); continue; }
        cf_target_txn *x = NULL;
        CHECK(cf_target_bind_rollback(t, &s, 1, &x, &err) == CINFER_OK, "bind: %s", err.message);
        if (!x) { cf_rseq_free(s); continue; }
        const int k = mode == 0 ? 2 : 0;   /* the prompt's next 2 tokens, then junk */
        int32_t ids[2 + 5];
        int m = 0;
        for (int i = 0; i < k; i++) ids[m++] = prompt[cut + i];
        for (int i = 0; i < 5; i++) ids[m++] = junk[i] % V;
        fwd1(s, ids, m, NULL, 0, &o);
        int keep = mode == 0 ? k : m + 1;
        cinfer_status st = mode == 1 ? cf_target_txn_abort(x, &err) : cf_target_txn_commit(x, &keep, &err);
        if (mode == 2) CHECK(st == CINFER_E_INVALID_ARGUMENT && strstr(err.message, "aborted"), "a bad keep: %d %s", st, err.message);
        else CHECK(st == CINFER_OK, "commit/abort: %s", err.message);
        CHECK(cf_rseq_len(s) == cut + k, "after the transaction (mode %d) the cache holds %d tokens, not %d", mode, cf_rseq_len(s), cut + k);
        if (fwd1(s, prompt + cut + k, n - cut - k, NULL, 0, &o)) {
            float *lg = projected(&o);
            CHECK(lg && !memcmp(lg, fresh + (size_t)(cut + k) * V, (size_t)(n - cut - k) * V * sizeof *lg),
                  "after the transaction (mode %d) the logits differ from a fresh run's", mode);
            free(lg);
        }
        cf_rseq_free(s);
    }
    /* two caches, different keeps */
    cf_rseq *c[2] = {cache(), cache()};
    cf_target_out o;
    cinfer_error err = {0};
    fwd1(c[0], prompt, cut, NULL, 0, &o);
    fwd1(c[1], prompt, 1, NULL, 0, &o);
    cf_target_txn *x = NULL;
    if (cf_target_bind_rollback(t, c, 2, &x, &err) == CINFER_OK) {
        const int32_t *ids[2] = {prompt + cut, prompt + 1};
        int nn[2] = {3, 4}, keep[2] = {1, 4};
        CHECK(cf_target_forward(t, c, ids, nn, 2, NULL, 0, &o, &err) == CINFER_OK && o.rows == 7, "forward of 2 caches: %s", err.message);
        CHECK(cf_target_txn_commit(x, keep, &err) == CINFER_OK, "commit: %s", err.message);
        CHECK(cf_rseq_len(c[0]) == cut + 1 && cf_rseq_len(c[1]) == 5, "kept lengths %d %d", cf_rseq_len(c[0]), cf_rseq_len(c[1]));
    } else {
        CHECK(0, "bind over 2 caches: %s", err.message);
    }
    cf_rseq *dup[2] = {c[0], c[0]};
    CHECK(cf_target_bind_rollback(t, dup, 2, &x, &err) == CINFER_E_INVALID_ARGUMENT, "a cache bound twice was taken");
    cf_rseq_free(c[0]);
    cf_rseq_free(c[1]);
}

static void test_descriptor(cinfer_model *model) {
    cinfer_error err = {0};
    const cf_target_descriptor *d = cf_target_descriptor_of(t);
    printf("%s: backend %s | graph ABI %s | state ABI %s\n", dir, d->backend, d->graph_abi, d->state_abi);
    CHECK(cf_target_check(t, d, &err) == CINFER_OK, "the target refuses its own descriptor: %s", err.message);
    cf_target_descriptor w = *d;
    snprintf(w.backend, sizeof w.backend, "cuda");
    CHECK(cf_target_check(t, &w, &err) == CINFER_E_INVALID_ARGUMENT && strstr(err.message, "backend"), "another backend: %s", err.message);
    w = *d;
    w.graph_abi[0] ^= 1;
    CHECK(cf_target_check(t, &w, &err) == CINFER_E_INVALID_ARGUMENT && strstr(err.message, "graph ABI"), "another graph: %s", err.message);
    /* another runner over the same model, KV blocks of 32: another state ABI */
    cf_runner_params p = *cf_runner_params_of(cf_target_runner(t));
    p.block_size = 32;
    p.kv_bytes = 0;
    cf_target *t2 = NULL;
    CHECK(cf_target_create(model, &p, &t2, &err) == CINFER_OK, "a second target: %s", err.message);
    if (t2) {
        CHECK(cf_target_check(t2, d, &err) == CINFER_E_INVALID_ARGUMENT && strstr(err.message, "state ABI"), "other KV blocks: %s",
              err.message);
        cf_target_free(t2);
    }
    /* over a borrowed runner: the model's EOS ids from its config, the same descriptor */
    cf_target *t3 = NULL;
    CHECK(cf_target_create_over_runner(cf_target_runner(t), &t3, &err) == CINFER_OK, "a target over a runner: %s", err.message);
    if (t3) {
        CHECK(cf_target_check(t3, d, &err) == CINFER_OK, "a target over the same runner differs: %s", err.message);
        int n3 = 0, n1 = 0;
        cf_target_eos(t3, &n3);
        cf_target_eos(t, &n1);
        CHECK(n3 == model->m->hp.n_eos && n1 == model->n_eos, "EOS ids: %d %d", n3, n1);
        cf_target_free(t3);
    }
}

static void test_errors(const int32_t *prompt, int n) {
    cf_runner *r = cf_target_runner(t);
    cinfer_error err = {0};
    /* a previous tap state that must survive every call */
    cf_runner_taps before = {.hidden = 1, .n = 1, .layers = {L - 1}};
    CHECK(cf_runner_set_taps(r, &before, &err) == CINFER_OK, "set taps: %s", err.message);
    cf_rseq *s = cache();
    cf_target_out o;
    fwd1(s, prompt, 3, NULL, 0, &o);
    const int len = cf_rseq_len(s), avail = cf_runner_blocks_available(r);
    const int budget = cf_runner_params_of(r)->max_batch_tokens;
    int32_t *longer = calloc((size_t)budget + 1, sizeof *longer);
    int32_t bad_id[2] = {prompt[0], V};
    int bad_layer[2] = {0, L}, dup_layer[2] = {0, 0}, neg_layer[1] = {-1};
    struct {
        const char *what;
        const int32_t *ids;
        int n;
        const int *taps;
        int n_taps;
        cinfer_status want;
    } cases[] = {
        {"a tap layer past the last", prompt, 2, bad_layer, 2, CINFER_E_INVALID_ARGUMENT},
        {"a layer tapped twice", prompt, 2, dup_layer, 2, CINFER_E_INVALID_ARGUMENT},
        {"a negative tap layer", prompt, 2, neg_layer, 1, CINFER_E_INVALID_ARGUMENT},
        {"more taps than layers", prompt, 2, bad_layer, L + 1, CINFER_E_INVALID_ARGUMENT},
        {"a batch past the token budget", longer, budget + 1, bad_layer, 1, CINFER_E_INVALID_ARGUMENT},
        {"a token id outside the vocabulary", bad_id, 2, bad_layer, 1, CINFER_E_TOKEN_OUT_OF_RANGE},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        err = (cinfer_error){0};
        cinfer_status st = cf_target_forward(t, &s, &cases[i].ids, &cases[i].n, 1, cases[i].taps, cases[i].n_taps, &o, &err);
        CHECK(st == cases[i].want, "%s: status %d, expected %d (%s)", cases[i].what, st, cases[i].want, err.message);
        CHECK(err.message[0], "%s: no message", cases[i].what);
        printf("  %s: %s\n", cases[i].what, err.message);
        cf_runner_taps now = cf_runner_get_taps(r);
        CHECK(!memcmp(&now, &before, sizeof now), "%s: the runner's tap state changed", cases[i].what);
        CHECK(cf_rseq_len(s) == len && cf_runner_blocks_available(r) == avail, "%s: the cache changed (%d tokens, %d blocks free)",
              cases[i].what, cf_rseq_len(s), cf_runner_blocks_available(r));
        CHECK(o.hidden == NULL && o.rows == 0, "%s: output given", cases[i].what);
    }
    int two[2] = {1 % L, 0};
    CHECK(fwd1(s, prompt + 3, 2, two, L > 1 ? 2 : 1, &o), "a good call after the errors");
    cf_runner_taps now = cf_runner_get_taps(r);
    CHECK(!memcmp(&now, &before, sizeof now), "a successful call left the runner's tap state changed");
    cf_runner_taps off = {0};
    CHECK(cf_runner_set_taps(r, &off, &err) == CINFER_OK, "taps off: %s", err.message);
    free(longer);
    cf_rseq_free(s);
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: test_target FIXTURE_DIR [TOL [LOGIT_TOL]]\n"); return 2; }
    dir = argv[1];
    const double tol = argc > 2 ? strtod(argv[2], NULL) : 1e-4;
    logit_tol = argc > 3 ? strtod(argv[3], NULL) : 1e-4;
    char path[4096];
    snprintf(path, sizeof path, "%s/hidden.json", dir);
    char *js = cf_read_file(path, NULL);
    if (!js) { fprintf(stderr, "cannot read %s\n", path); return 1; }
    cJSON *h = cJSON_Parse(js);
    free(js);
    cJSON *pj = cJSON_GetObjectItem(h, "prompt");
    const int n = cJSON_GetArraySize(pj);
    int32_t *prompt = malloc((size_t)n * sizeof *prompt);
    for (int i = 0; i < n; i++) prompt[i] = cJSON_GetArrayItem(pj, i)->valueint;
    L = cJSON_GetObjectItem(h, "n_layers")->valueint;
    case_no = cJSON_GetObjectItem(h, "case")->valueint;
    cJSON *impl = cJSON_GetObjectItem(h, "attn_implementation");
    oracle_sdpa = !cJSON_IsString(impl) || strcmp(impl->valuestring, "eager");
    D = cJSON_GetObjectItem(h, "hidden_size")->valueint;
    snprintf(path, sizeof path, "%s/%s", dir, cJSON_GetObjectItem(h, "file")->valuestring);
    cJSON_Delete(h);
    size_t glen = 0;
    float *gold = (float *)cf_read_file(path, &glen);
    if (!gold || glen != (size_t)L * n * D * sizeof(float)) {
        fprintf(stderr, "%s: %zu bytes, expected %zu\n", path, glen, (size_t)L * n * D * sizeof(float));
        return 1;
    }

    cinfer_model_params mp = cinfer_model_default_params();
    mp.n_threads = 1;
    cinfer_model *model = NULL;
    cinfer_error err = {0};
    if (cinfer_model_load(dir, &mp, &model, &err) != CINFER_OK) { fprintf(stderr, "load %s: %s\n", dir, err.message); return 1; }
    cf_runner_params rp = cf_runner_default_params();
    rp.max_seqs = 4;
    rp.max_batch_tokens = 64;
    rp.max_ctx = 256;
    if (cf_target_create(model, &rp, &t, &err) != CINFER_OK) { fprintf(stderr, "target: %s\n", err.message); return 1; }
    CHECK(cf_target_n_layers(t) == L && cf_target_hidden_size(t) == D, "the model has %d layers of %d, hidden.json %d of %d",
          cf_target_n_layers(t), cf_target_hidden_size(t), L, D);
    V = cf_target_vocab(t);

    if (!failures) {
        test_taps(model, prompt, n, gold, tol);
        float *fresh = runner_logits(prompt, n);
        if (fresh) test_txn(prompt, n, fresh);
        free(fresh);
        test_descriptor(model);
        test_errors(prompt, n);
    }
    cf_target_free(t);
    cinfer_model_free(model);
    free(gold);
    free(prompt);
    printf("%s: %d checks, %d failures\n", dir, checks, failures);
    return failures ? 1 : 0;
}
