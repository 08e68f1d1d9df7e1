/* test_draft_model.c: the draft-model provider (spec/draft_model.h) on the embedded pair, target cinfer-tiny and
 * draft cinfer-tiny-draft, on the CPU:
 *   - drafts equal the draft model's own greedy continuation, computed apart (cf_seq + cf_model_eval, host argmax),
 *     for short prompts and for ones longer than a runner step (catch-up in chunks);
 *   - commit with partial, full and no acceptance, then draft again: the same as the reference on the committed
 *     context and as a fresh source prefilled with it (rollback exactness), over many seeded rounds;
 *   - draft_many over several sources (different wants, long and short contexts, more sources than max_seqs)
 *     equals each source drafted alone;
 *   - a draft whose tokenizer disagrees (another vocabulary; two ids swapped; other EOS ids) is refused;
 *   - contexts the draft model cannot read, or past its context, give no drafts and no error; bad arguments fail;
 *   - the greedy acceptance rate of the draft against the target at k = 4, measured as the model card does
 *     (drafts compared with the target's own greedy continuation), printed; the target as its own draft accepts all.
 *
 * With a fifth argument "cuda" the models run on the GPU: a draft on the CPU is refused there, and the drafts are
 * compared with the references as a whole (at most 10% of the comparisons may differ: near-ties).
 *
 * usage: test_draft_model TARGET_DIR DRAFT_DIR OTHER_TOKENIZER_MODEL_DIR TMP_DIR [cuda] */
#include "spec/draft_model.h"
#include "engine/engine.h"
#include "model/model.h"
#include "text/tokenizer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../check.h"

static cinfer_model *target, *draft;
static int on_gpu;   /* the models run on CUDA */

static double t0, t_greedy;
static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}
static void phase(const char *name) {
    double t = now();
    if (t0 > 0) printf("  (%.1f s, %.1f s of it in references)\n", t - t0, t_greedy);
    t_greedy = 0;
    t0 = t;
    if (name) printf("%s\n", name);
    fflush(stdout);
}
static int n_threads = 1;   /* CINFER_TEST_THREADS: one by default, as OpenMP threads on a busy 2-core machine only wait */

static cinfer_model *load_on(const char *dir, int gpu) {
    cinfer_model_params mp = cinfer_model_default_params();
    if (gpu) mp.device = CINFER_DEVICE_CUDA;
    mp.n_threads = n_threads;
    cinfer_model *m = NULL;
    cinfer_error err = {0};
    cinfer_status st = cinfer_model_load(dir, &mp, &m, &err);
    if (st == CINFER_E_NO_DEVICE) {
        printf("SKIP: no GPU: %s\n", err.message);
        exit(77);
    }
    if (st != CINFER_OK) {
        fprintf(stderr, "loading %s: %s\n", dir, err.message);
        exit(1);
    }
    return m;
}

static cinfer_model *load(const char *dir) { return load_on(dir, on_gpu); }

static int32_t argmax(const float *x, int n) {
    int32_t b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

/* The greedy continuation of ids[0, n) by model m, k tokens, computed with a plain sequence. */

static void greedy(cinfer_model *m, const int32_t *ids, int n, int k, int32_t *out) {
    double ts = now();
    const int V = m->m->hp.vocab;
    float *lg = malloc((size_t)V * sizeof *lg);
    cf_seq *s = NULL;
    cinfer_error err = {0};
    if (!lg || cf_seq_create(m->m, 0, &s, &err) != CINFER_OK || cf_model_eval(m->m, s, ids, n, lg, 0, &err) != CINFER_OK) {
        fprintf(stderr, "reference: %s\n", err.message);
        exit(1);
    }
    for (int i = 0; i < k; i++) {
        out[i] = argmax(lg, V);
        if (i + 1 < k && cf_model_eval(m->m, s, &out[i], 1, lg, 0, &err) != CINFER_OK) {
            fprintf(stderr, "reference: %s\n", err.message);
            exit(1);
        }
    }
    cf_seq_free(s);
    free(lg);
    t_greedy += now() - ts;
}

static int32_t *encode(const char *text, int *n) {
    int32_t *ids = NULL;
    size_t len = 0;
    cinfer_error err = {0};
    if (cf_tokenizer_encode(target->tok, text, strlen(text), CF_TOK_PARSE_SPECIAL, &ids, &len, &err) != CINFER_OK) {
        fprintf(stderr, "encode: %s\n", err.message);
        exit(1);
    }
    *n = (int)len;
    return ids;
}

static const char *texts[] = {
    "In the beginning God created the heaven and the earth. And the earth was without form, and void;",
    "And it came to pass, when the king heard the words of the book of the law, that he rent his clothes.",
    "The jury further said in term-end presentments that the City Executive Committee, which had over-all charge",
    "A man who has a clear conscience probably has a poor memory.",
    "<|im_start|>user\nTell me a fortune.<|im_end|>\n<|im_start|>assistant\n",
    "The committee met on Tuesday to discuss the new plans for the school district, and several members",
    "Blessed are the poor in spirit: for theirs is the kingdom of heaven. Blessed are they that mourn:",
    "You will be successful in your work, but only if you remember that",
    "<|im_start|>user\nContinue: The old house stood at the end of the road.<|im_end|>\n<|im_start|>assistant\n",
    "It was a cold morning in early December when the train pulled into the station and",
    "Computers are like air conditioners: they stop working properly if you open windows.",
    "And the LORD spake unto Moses, saying, Speak unto the children of Israel, and say unto them,",
    "He said that the economy of the state would depend on the success of the new industries",
    "Never put off till tomorrow what you can do the day after tomorrow.",
    "Then Jesus went thence, and departed into the coasts of Tyre and Sidon. And, behold, a woman of Canaan",
    "The president told reporters that the administration would not ask Congress for",
};
#define N_TEXTS ((int)(sizeof texts / sizeof texts[0]))

/* On the GPU a batch may sum in another order than the reference's single sequence, so a near-tie can pick
 * another token: there the token comparisons are counted (at most 10% may differ) instead of checked one by one. */
static int compared, differed;
static int same_ids(const int32_t *a, const int32_t *b, int n) {
    const int same = n == 0 || !memcmp(a, b, (size_t)n * sizeof *a);
    if (!on_gpu) return same;
    compared++;
    differed += !same;
    return 1;
}

static cf_draft_source *open_src(cf_draft_provider *p) {
    cf_draft_source *s = NULL;
    cinfer_error err = {0};
    cinfer_status st = cf_draft_open(p, &s, &err);
    CHECK(st == CINFER_OK && s, "open: %s", err.message);
    if (!s) exit(1);
    return s;
}

static int do_draft(cf_draft_source *s, int n, int32_t *out) {
    int got = -1;
    cinfer_error err = {0};
    cinfer_status st = s->ops->draft(s, n, out, &got, &err);
    CHECK(st == CINFER_OK, "draft: %s", err.message);
    return got;
}

static void prefill(cf_draft_source *s, const int32_t *ids, int n) {
    cinfer_error err = {0};
    cinfer_status st = s->ops->prefill(s, ids, n, &err);
    CHECK(st == CINFER_OK, "prefill: %s", err.message);
}

static void commit(cf_draft_source *s, int acc, const int32_t *ids, int n) {
    cinfer_error err = {0};
    cinfer_status st = s->ops->commit(s, acc, ids, n, &err);
    CHECK(st == CINFER_OK, "commit: %s", err.message);
}

/* A long context: the texts one after another, n tokens. */
static int32_t *long_context(int n) {
    int32_t *c = malloc((size_t)n * sizeof *c);
    int have = 0;
    for (int t = 0; have < n; t = (t + 1) % N_TEXTS) {
        int k;
        int32_t *ids = encode(texts[t], &k);
        for (int i = 0; i < k && have < n; i++) c[have++] = ids[i];
        free(ids);
    }
    return c;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static int rnd(int n) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (int)((rng >> 33) % (uint64_t)n);
}

/* drafts of a fresh source of p prefilled with ctx */
static int fresh_draft(cf_draft_provider *p, const int32_t *ctx, int n, int k, int32_t *out) {
    cf_draft_source *s = open_src(p);
    prefill(s, ctx, n);
    int got = do_draft(s, k, out);
    cf_draft_close(s);
    return got;
}

static void test_drafts_and_rollback(cf_draft_provider *p) {
    int32_t d[CF_DRAFT_MAX], ref[CF_DRAFT_MAX], fr[CF_DRAFT_MAX];
    /* short prompts and long ones (past a runner step of 256 rows: catch-up in chunks) */
    for (int t = 0; t < N_TEXTS + 2; t++) {
        int n;
        int32_t *ids = t < N_TEXTS ? encode(texts[t], &n) : long_context(n = t == N_TEXTS ? 300 : 700);
        cf_draft_source *s = open_src(p);
        prefill(s, ids, n);
        const int k = 8;
        int got = do_draft(s, k, d);
        greedy(draft, ids, n, k, ref);
        CHECK(got == k && same_ids(d, ref, k), "text %d: the drafts are not the draft model's greedy continuation (got %d)", t, got);
        /* rounds of commit then draft, against the reference and a fresh source */
        int cap = n + 64 * (CF_DRAFT_MAX + 1);
        int32_t *ctx = malloc((size_t)cap * sizeof *ctx);
        memcpy(ctx, ids, (size_t)n * sizeof *ids);
        int nc = n, kk = got;
        const int rounds = t < N_TEXTS ? (t < 6 ? 12 : 4) : 3;
        for (int round = 0; round < rounds; round++) {
            /* accept a prefix of the drafts: none, all, or some; then the "target's" token */
            int acc = round % 4 == 0 ? 0 : round % 4 == 1 ? kk : rnd(kk + 1);
            memcpy(ctx + nc, d, (size_t)acc * sizeof *d);
            nc += acc;
            int32_t tok = acc < kk ? (d[acc] + 1 + rnd(100)) % 8000 : 3 + rnd(8000);   /* a rejection really differs */
            ctx[nc++] = tok;
            commit(s, acc, ctx, nc);
            kk = 1 + rnd(CF_DRAFT_MAX);
            got = do_draft(s, kk, d);
            greedy(draft, ctx, nc, kk, ref);
            int fgot = fresh_draft(p, ctx, nc, kk, fr);
            CHECK(got == kk && same_ids(d, ref, kk), "text %d round %d (accepted %d): drafts after commit differ from the reference", t, round,
                  acc);
            CHECK(fgot == kk && same_ids(d, fr, kk), "text %d round %d: drafts after commit differ from a fresh source's", t, round);
            kk = got;
        }
        /* a commit that rewrites the context (a shorter one: readmission after preemption, say) */
        nc = nc / 2;
        commit(s, 0, ctx, nc);
        got = do_draft(s, 5, d);
        greedy(draft, ctx, nc, 5, ref);
        CHECK(got == 5 && same_ids(d, ref, 5), "text %d: drafts after a shorter context differ", t);
        /* prefill again with a context whose tokens all differ early */
        ctx[0] = ctx[0] == 5 ? 6 : 5;
        prefill(s, ctx, nc);
        got = do_draft(s, 5, d);
        greedy(draft, ctx, nc, 5, ref);
        CHECK(got == 5 && same_ids(d, ref, 5), "text %d: drafts after a new prefill differ", t);
        cf_draft_close(s);
        free(ctx);
        free(ids);
    }
}

/* draft_many over several sources equals each drafted alone, over rounds of commits */
static void test_many(cf_draft_provider *p, const char *what) {
    enum { NS = 7 };
    cf_draft_source *s[NS], *solo[NS];
    int32_t *ctx[NS], buf[NS][CF_DRAFT_MAX], one[CF_DRAFT_MAX];
    int nc[NS];
    for (int i = 0; i < NS; i++) {
        int n;
        ctx[i] = malloc((size_t)(800 + 40 * (CF_DRAFT_MAX + 1)) * sizeof *ctx[i]);
        int32_t *ids = i == 2 || i == 5 ? long_context(n = 200 + 100 * i) : encode(texts[(3 * i) % N_TEXTS], &n);
        memcpy(ctx[i], ids, (size_t)n * sizeof *ids);
        free(ids);
        nc[i] = n;
        s[i] = open_src(p);
        solo[i] = open_src(p);
        prefill(s[i], ctx[i], n);
        prefill(solo[i], ctx[i], n);
    }
    for (int round = 0; round < 6; round++) {
        int want[NS], got[NS];
        int32_t *out[NS];
        for (int i = 0; i < NS; i++) {
            want[i] = (i + round) % 5 == 4 ? 0 : 1 + rnd(CF_DRAFT_MAX);
            out[i] = buf[i];
            got[i] = -1;
        }
        cinfer_error err = {0};
        cinfer_status st = p->ops->draft_many(p, s, NS, want, out, got, &err);
        CHECK(st == CINFER_OK, "%s round %d: draft_many: %s", what, round, err.message);
        for (int i = 0; i < NS; i++) {
            int g1 = want[i] ? do_draft(solo[i], want[i], one) : 0;
            CHECK(got[i] == want[i] && g1 == got[i] && same_ids(buf[i], one, got[i]),
                  "%s round %d source %d: draft_many gave %d drafts, alone %d (wanted %d), or other tokens", what, round, i, got[i], g1,
                  want[i]);
            /* accept some, add a token, commit both */
            int acc = got[i] > 0 ? rnd(got[i] + 1) : 0;
            memcpy(ctx[i] + nc[i], buf[i], (size_t)acc * sizeof *buf[i]);
            nc[i] += acc;
            ctx[i][nc[i]++] = acc < got[i] ? (buf[i][acc] + 7) % 8000 : 100 + rnd(7000);
            commit(s[i], acc, ctx[i], nc[i]);
            commit(solo[i], acc, ctx[i], nc[i]);
        }
    }
    /* bad calls fail and leave every got at 0 */
    {
        cf_draft_source *two[2] = {s[0], s[0]};
        int want[2] = {3, 3}, got[2] = {5, 5};
        int32_t *out[2] = {buf[0], buf[1]};
        cinfer_error err = {0};
        cinfer_status st = p->ops->draft_many(p, two, 2, want, out, got, &err);
        CHECK(st == CINFER_E_INVALID_ARGUMENT && got[0] == 0 && got[1] == 0, "%s: one source twice: status %d, got %d %d", what, (int)st,
              got[0], got[1]);
        /* and the source still works */
        int g = do_draft(s[0], 3, buf[0]);
        int32_t ref[3];
        greedy(draft, ctx[0], nc[0], 3, ref);
        CHECK(g == 3 && same_ids(buf[0], ref, 3), "%s: a source after a refused draft_many", what);
    }
    for (int i = 0; i < NS; i++) {
        cf_draft_close(s[i]);
        cf_draft_close(solo[i]);
        free(ctx[i]);
    }
}

static void test_edges(cf_draft_provider *p) {
    int32_t d[CF_DRAFT_MAX], ref[CF_DRAFT_MAX];
    int n;
    int32_t *ids = encode(texts[0], &n);
    cf_draft_source *s = open_src(p);
    cinfer_error err = {0};
    int got = 7;
    CHECK(s->ops->draft(s, 4, d, &got, &err) == CINFER_OK && got == 0, "a draft before any prefill: got %d", got);
    CHECK(s->ops->prefill(s, ids, 0, &err) == CINFER_E_INVALID_ARGUMENT, "prefill of 0 tokens accepted");
    prefill(s, ids, n);
    got = 7;
    CHECK(s->ops->draft(s, 0, d, &got, &err) == CINFER_E_INVALID_ARGUMENT && got == 0, "a draft of 0 tokens accepted");
    CHECK(s->ops->draft(s, CF_DRAFT_MAX + 1, d, &got, &err) == CINFER_E_INVALID_ARGUMENT, "a draft of %d tokens accepted", CF_DRAFT_MAX + 1);
    CHECK(s->ops->commit(s, -1, ids, n, &err) == CINFER_E_INVALID_ARGUMENT, "a commit of -1 accepted");
    CHECK(s->ops->commit(s, 0, ids, 0, &err) == CINFER_E_INVALID_ARGUMENT, "a commit of an empty context accepted");
    /* an id the draft model cannot read: no drafts; committed away: drafts again */
    int32_t *c = malloc((size_t)(n + 2) * sizeof *c);
    memcpy(c, ids, (size_t)n * sizeof *c);
    c[n] = draft->m->hp.vocab;
    commit(s, 0, c, n + 1);
    got = do_draft(s, 4, d);
    CHECK(got == 0, "a context with id %d (past the draft's vocabulary) gave %d drafts", c[n], got);
    c[n] = 42;
    commit(s, 0, c, n + 1);
    got = do_draft(s, 4, d);
    greedy(draft, c, n + 1, 4, ref);
    CHECK(got == 4 && same_ids(d, ref, 4), "drafts after the unreadable id was replaced");
    free(c);
    /* at the end of the draft's context: drafts stop there; past it: none */
    const int ctxn = draft->m->hp.max_ctx < target->m->hp.max_ctx ? draft->m->hp.max_ctx : target->m->hp.max_ctx;
    int32_t *lc = long_context(ctxn + 1);
    commit(s, 0, lc, ctxn - 2);
    got = do_draft(s, 8, d);
    greedy(draft, lc, ctxn - 2, 3, ref);
    CHECK(got == 3 && same_ids(d, ref, 3), "3 positions before the end of the context: %d drafts (want 3)", got);
    commit(s, 0, lc, ctxn + 1);
    got = do_draft(s, 8, d);
    CHECK(got == 0, "past the context: %d drafts", got);
    free(lc);
    cf_draft_close(s);
    /* a source left open is closed with its provider (ASan: nothing leaks) */
    free(ids);
}

/* Out of draft KV blocks: no drafts and no error; the source goes on once blocks are free again. max_seqs 1 sizes
 * the pool for one context, which two long contexts do not fit. */
static void test_out_of_blocks(void) {
    cf_draft_provider *p = NULL;
    cinfer_error err = {0};
    CHECK(cf_draft_model_provider_create(target, draft, 1, &p, &err) == CINFER_OK, "create (1): %s", err.message);
    if (!p) return;
    const int n = 700;
    int32_t *ctx = long_context(n), *ctx2 = long_context(n + 1), d[8], ref[8];
    ctx2[0] = ctx2[0] == 5 ? 6 : 5;   /* no prefix shared with ctx */
    cf_draft_source *a = open_src(p), *b = open_src(p);
    prefill(a, ctx, n);
    prefill(b, ctx2, n);
    int got = do_draft(a, 8, d);
    greedy(draft, ctx, n, 8, ref);
    CHECK(got == 8 && same_ids(d, ref, 8), "the first long context: %d drafts, or other tokens", got);
    got = do_draft(b, 8, d);
    CHECK(got == 0, "a second long context with the pool full: %d drafts (want 0, no error)", got);
    cf_draft_close(a);
    got = do_draft(b, 8, d);
    greedy(draft, ctx2, n, 8, ref);
    CHECK(got == 8 && same_ids(d, ref, 8), "the second context once the first is closed: %d drafts, or other tokens", got);
    cf_draft_close(b);
    cf_draft_provider_free(p);
    free(ctx);
    free(ctx2);
}

/* ---- tokenizer mismatches ---- */

static char *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    if (b) b[n] = 0, *len = (size_t)n;
    return b;
}

static int write_all(const char *path, const char *s, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    int ok = fwrite(s, 1, n, f) == n;
    return fclose(f) || !ok ? -1 : 0;
}

/* dir: a copy of the draft folder (links) with tokenizer.json or generation_config.json replaced */
static void make_variant(const char *draft_dir, const char *dir, const char *replace_name, const char *text, size_t len) {
    mkdir(dir, 0755);
    char cwd[2048], abs[6144];
    if (!getcwd(cwd, sizeof cwd)) cwd[0] = 0;
    const char *names[] = {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "generation_config.json"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char src[4096], dst[4096];
        snprintf(src, sizeof src, "%s/%s", draft_dir, names[i]);
        snprintf(dst, sizeof dst, "%s/%s", dir, names[i]);
        unlink(dst);
        if (!strcmp(names[i], replace_name)) {
            if (write_all(dst, text, len)) {
                fprintf(stderr, "cannot write %s\n", dst);
                exit(1);
            }
        } else if (symlink(src[0] == '/' ? src : (snprintf(abs, sizeof abs, "%s/%s", cwd, src), abs), dst)) {
            fprintf(stderr, "cannot link %s: %s\n", dst, strerror(errno));
            exit(1);
        }
    }
}

static void expect_refused(cinfer_model *t, cinfer_model *d, const char *what, const char *needle) {
    cf_draft_provider *p = (cf_draft_provider *)1;
    cinfer_error err = {0};
    cinfer_status st = cf_draft_model_provider_create(t, d, 4, &p, &err);
    CHECK(st == CINFER_E_INVALID_ARGUMENT && p == NULL && strstr(err.message, needle), "%s: status %d, message '%s' (want '%s')", what, (int)st,
          err.message, needle);
    printf("  refused (%s): %s\n", what, err.message);
}

static void test_mismatch(const char *draft_dir, const char *other_dir, const char *tmp) {
    mkdir(tmp, 0755);
    cinfer_model *other = load(other_dir);
    expect_refused(target, other, "another tokenizer", "token ids in the target's");
    cinfer_model_free(other);

    /* two ids swapped in the vocabulary */
    char path[4096], dir[4096];
    size_t len = 0;
    snprintf(path, sizeof path, "%s/tokenizer.json", draft_dir);
    char *tj = read_all(path, &len);
    char *a = tj ? strstr(tj, "\"\xc4\xa0the\": 262,") : NULL, *b = tj ? strstr(tj, "\"\xc4\xa0" "and\": 279,") : NULL;
    CHECK(a && b, "the draft's tokenizer.json has no \"Ġthe\": 262 / \"Ġand\": 279");
    if (a && b) {
        memcpy(a + strlen("\"\xc4\xa0the\": "), "279", 3);
        memcpy(b + strlen("\"\xc4\xa0" "and\": "), "262", 3);
        snprintf(dir, sizeof dir, "%s/swapped", tmp);
        make_variant(draft_dir, dir, "tokenizer.json", tj, len);
        cinfer_model *sw = load(dir);
        expect_refused(target, sw, "two ids swapped", "token id 262");
        cinfer_model_free(sw);
    }
    free(tj);

    /* other EOS ids */
    const char *gen = "{\"eos_token_id\": [2]}\n";
    snprintf(dir, sizeof dir, "%s/eos", tmp);
    make_variant(draft_dir, dir, "generation_config.json", gen, strlen(gen));
    cinfer_model *eo = load(dir);
    expect_refused(target, eo, "other EOS ids", "ends generation");
    cinfer_model_free(eo);

    /* bad arguments */
    cf_draft_provider *p = NULL;
    cinfer_error err = {0};
    CHECK(cf_draft_model_provider_create(target, draft, 0, &p, &err) == CINFER_E_INVALID_ARGUMENT && !p, "max_seqs 0 accepted");
    CHECK(cf_draft_model_provider_create(NULL, draft, 4, &p, &err) == CINFER_E_INVALID_ARGUMENT && !p, "no target accepted");
}

/* ---- acceptance ---- */

/* The greedy acceptance rate of p's drafts at k per step against the target's greedy continuation of n_new
 * tokens after each prompt, as the model card measures it. */
static int32_t *cont[N_TEXTS];   /* the target's greedy continuations, computed once */

static double acceptance(cf_draft_provider *p, int k, int n_new, double *per_step, int *hist) {
    long drafted = 0, accepted = 0, steps = 0;
    for (int i = 0; i <= k; i++) hist[i] = 0;
    for (int t = 0; t < N_TEXTS; t++) {
        int n;
        int32_t *ids = encode(texts[t], &n);
        int32_t *ctx = malloc((size_t)(n + n_new) * sizeof *ctx);
        memcpy(ctx, ids, (size_t)n * sizeof *ids);
        if (!cont[t]) {   /* the target's continuation: the committed tokens */
            cont[t] = malloc((size_t)n_new * sizeof *cont[t]);
            greedy(target, ids, n, n_new, cont[t]);
        }
        memcpy(ctx + n, cont[t], (size_t)n_new * sizeof *ctx);
        cf_draft_source *s = open_src(p);
        prefill(s, ctx, n);
        int pos = 0;
        while (pos < n_new) {
            int32_t d[CF_DRAFT_MAX];
            int got = do_draft(s, n_new - pos < k ? n_new - pos : k, d);
            int acc = 0;
            while (acc < got && pos + acc < n_new && d[acc] == ctx[n + pos + acc]) acc++;
            drafted += got;
            accepted += acc;
            hist[acc]++;
            steps++;
            pos += acc + 1;
            if (pos > n_new) pos = n_new;
            commit(s, acc, ctx, n + pos);
        }
        cf_draft_close(s);
        free(ctx);
        free(ids);
    }
    *per_step = (double)(N_TEXTS * n_new) / (double)steps;
    return drafted ? (double)accepted / (double)drafted : 0;
}

int main(int argc, char **argv) {
    if (argc != 5 && !(argc == 6 && !strcmp(argv[5], "cuda"))) {
        fprintf(stderr, "usage: %s TARGET_DIR DRAFT_DIR OTHER_TOKENIZER_MODEL_DIR TMP_DIR [cuda]\n", argv[0]);
        return 2;
    }
    on_gpu = argc == 6;
    const char *nt = getenv("CINFER_TEST_THREADS");
    if (nt && atoi(nt) > 0) n_threads = atoi(nt);
    target = load(argv[1]);
    draft = load(argv[2]);

    cf_draft_provider *p = NULL;
    cinfer_error err = {0};
    cinfer_status st;
    if (on_gpu) {   /* a draft on another device */
        cinfer_model *cpu = load_on(argv[2], 0);
        st = cf_draft_model_provider_create(target, cpu, 4, &p, &err);
        CHECK(st == CINFER_E_UNSUPPORTED && !p && strstr(err.message, "backend"), "a draft on the CPU for a GPU target: status %d, %s", (int)st,
              err.message);
        printf("  refused (another device): %s\n", err.message);
        cinfer_model_free(cpu);
    }
    st = cf_draft_model_provider_create(target, draft, 8, &p, &err);
    CHECK(st == CINFER_OK && p, "create: %s", err.message);
    if (!p) return 1;
    CHECK(!strcmp(p->ops->name, "draft"), "provider name %s", p->ops->name);

    phase("drafts and rollback");
    test_drafts_and_rollback(p);
    phase("draft_many");
    test_many(p, "max_seqs 8");
    phase("edges");
    test_edges(p);
    /* more sources than a step holds: drafting goes in groups */
    cf_draft_provider *small = NULL;
    st = cf_draft_model_provider_create(target, draft, 3, &small, &err);
    CHECK(st == CINFER_OK, "create (3): %s", err.message);
    if (small) {
        test_many(small, "max_seqs 3");
        cf_draft_source *left_open = open_src(small);
        int n;
        int32_t *ids = encode(texts[1], &n);
        prefill(left_open, ids, n);
        int32_t d[4];
        do_draft(left_open, 4, d);
        free(ids);
        cf_draft_provider_free(small);   /* closes left_open */
    }
    phase("out of KV blocks");
    test_out_of_blocks();
    phase("tokenizer mismatches");
    test_mismatch(argv[2], argv[3], argv[4]);

    phase("acceptance");
    int hist[CF_DRAFT_MAX + 1];
    double per_step;
    const int k = 4, n_new = 64;
    double rate = acceptance(p, k, n_new, &per_step, hist);
    printf("  cinfer-tiny-draft against cinfer-tiny, greedy, k = %d, %d prompts, %d new tokens each: acceptance %.1f%%, %.3f tokens per "
           "target step, accepted-per-step histogram [%d, %d, %d, %d, %d] (model card: 40.8%%, 2.579)\n",
           k, N_TEXTS, n_new, 100 * rate, per_step, hist[0], hist[1], hist[2], hist[3], hist[4]);
    CHECK(rate > 0.10, "acceptance %.3f is not above 10%%", rate);
    cf_draft_provider_free(p);

    /* the target as its own draft proposes exactly the target's continuation */
    cf_draft_provider *self = NULL;
    st = cf_draft_model_provider_create(target, target, 4, &self, &err);
    CHECK(st == CINFER_OK, "create (self): %s", err.message);
    if (self) {
        rate = acceptance(self, k, n_new, &per_step, hist);
        printf("  cinfer-tiny as its own draft: acceptance %.1f%%, %.3f tokens per target step\n", 100 * rate, per_step);
        CHECK(on_gpu ? rate >= 0.9 : rate == 1.0, "the target as its own draft: acceptance %.3f, not 100%%", rate);
        cf_draft_provider_free(self);
    }

    phase(NULL);
    if (on_gpu) {
        printf("GPU: %d of %d draft comparisons with the references differ\n", differed, compared);
        CHECK(differed * 10 <= compared, "%d of %d draft comparisons differ (more than 10%%)", differed, compared);
    }
    for (int t = 0; t < N_TEXTS; t++) free(cont[t]);
    cinfer_model_free(draft);
    cinfer_model_free(target);
    printf("%d checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
