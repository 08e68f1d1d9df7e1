/* cmd_bench.c: `cinfer bench`: prefill and decode speed of one sequence, the memory bandwidth and GEMM
 * rate of the same backend measured in the same run, and decode as a fraction of the bandwidth roofline
 * (tokens/s <= bandwidth / bytes read per token; on the CPU the read bandwidth of a multi-threaded vector sum,
 * measured before and after each rep, each rep's decode set against the mean of its two and the median of those
 * fractions reported, the copy figure printed beside it; on CUDA a device copy). Decoding is greedy, with the
 * token picked on the device (cf_model_decode_run: replayed as a graph, one step ahead of the host, where the
 * backend records steps) when the backend can, else from logits read back to the host; the output names the
 * path. The first decode step (which records the graph) is not timed. */
#include "base/clock.h"
#include "cli/cli.h"
#include "cli/bench_engine.h"
#include "cli/bench_spec.h"
#include "cli/gen.h"
#include "backend/cpu/cpu_bandwidth.h"
#include "model/model.h"
#include "base/status.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int keep_going(void *ctx, int32_t token) { return 0; }

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cf_bench_cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Copy bandwidth of the backend (bytes read + written per second), median of reps copies of bytes. */
static cinfer_status measure_bandwidth(cf_backend *be, size_t bytes, double *gbs, cinfer_error *err) {
    int64_t cols = 1 << 16, rows = (int64_t)(bytes / 4 / (size_t)cols);
    cf_tensor a, b;
    CF_TRY(be->ops->alloc(be, CF_F32, rows, cols, &a, err));
    cinfer_status st = be->ops->alloc(be, CF_F32, rows, cols, &b, err);
    if (st != CINFER_OK) { be->ops->free_tensor(be, &a); return st; }
    be->ops->fill(be, a, 1.0f);
    be->ops->copy(be, b, a);
    st = be->ops->sync(be, err);
    double t[7];
    for (int r = 0; r < 7 && st == CINFER_OK; r++) {
        double t0 = cf_monotonic_seconds();
        be->ops->copy(be, b, a);
        st = be->ops->sync(be, err);
        t[r] = cf_monotonic_seconds() - t0;
    }
    if (st == CINFER_OK) *gbs = 2.0 * (double)(rows * cols * 4) / median(t, 7) / 1e9;
    be->ops->free_tensor(be, &a);
    be->ops->free_tensor(be, &b);
    return st;
}

/* The bandwidth of the roofline: on the CPU a read-only pass with the backend's thread count (decode reads
 * weights; a copy also writes and understates the fraction), else the copy figure. */
static cinfer_status roofline_bandwidth(cf_backend *be, int cpu, double copy_gbs, double *gbs, cinfer_error *err) {
    if (!cpu) {
        *gbs = copy_gbs;
        return CINFER_OK;
    }
    return cf_cpu_read_bandwidth((size_t)1 << 30, be->n_threads, 7, gbs, err);
}

/* GEMM rate of the backend's matmul on an [n, k] x [d, k]^T product with the model's weight dtype. */
static cinfer_status measure_gemm(cf_model *m, int n, double *gflops, cinfer_error *err) {
    cf_backend *be = m->be;
    cf_tensor w = m->lw[0].w_up;          /* a real weight: [ffn, dim] */
    cf_tensor x, y, none = {0};
    CF_TRY(be->ops->alloc(be, be->act_dtype, n, w.cols, &x, err));
    cinfer_status st = be->ops->alloc(be, be->act_dtype, n, w.rows, &y, err);
    if (st != CINFER_OK) { be->ops->free_tensor(be, &x); return st; }
    be->ops->fill(be, x, 0.01f);
    be->ops->matmul(be, y, x, w, none);
    st = be->ops->sync(be, err);
    double t[5];
    for (int r = 0; r < 5 && st == CINFER_OK; r++) {
        double t0 = cf_monotonic_seconds();
        be->ops->matmul(be, y, x, w, none);
        st = be->ops->sync(be, err);
        t[r] = cf_monotonic_seconds() - t0;
    }
    if (st == CINFER_OK) *gflops = 2.0 * n * (double)w.rows * (double)w.cols / median(t, 5) / 1e9;
    be->ops->free_tensor(be, &x);
    be->ops->free_tensor(be, &y);
    return st;
}

static const char *bench_help =
    "usage: cinfer bench (--model DIR | --random-weights CONFIG.json) [options]\n"
    "Measures prefill and decode tokens/s of one sequence and decode as a fraction of the memory-bandwidth\n"
    "roofline, with the bandwidth (CPU: a multi-threaded read-only pass before and after each rep, the median of\n"
    "the reps' fractions reported, the copy figure beside it; CUDA: a copy)\n"
    "and the GEMM rate measured in the same run. Prefill GFLOP/s count the output projection for the one row\n"
    "whose logits are computed, not for every prompt row.\n"
    "  --prompt N        prompt tokens (default 128)\n"
    "  --gen N           decoded tokens (default 128)\n"
    "  --reps N          repetitions; medians are reported (default 3)\n"
    "  --decode auto|device|host\n"
    "                    pick tokens on the device (argmax there, only ids read back) or read the logits\n"
    "                    back and take the argmax on the host; auto: the device when the backend can\n"
    "  --chunk N         positions per prefill forward pass (default: the backend's, CPU 256, at most 4096)\n"
    "  --quant q4|q8     with --random-weights: matrices quantized in memory (MLX affine, group 64, bf16\n"
    "                    scales and biases, as cinfer quantize writes them; norms stay bf16)\n"
    "  --device cpu|cuda, --threads N\n"
    "  --concurrency N,N,...\n"
    "                    instead: the engine through the public session API, N greedy sessions at once per\n"
    "                    run (--prompt tokens each, --gen tokens generated): aggregate decode tokens/s, time\n"
    "                    to first token and inter-token latency (p50, p99), aggregate against its roofline\n"
    "  --requests N      with --concurrency: a stream of N requests a run, each client opening its next one as\n"
    "                    its last ends (sessions join and leave the batch all along); N >= every concurrency\n"
    "  --max-batch N     with --concurrency: sessions in one step at most (default: 128 CUDA, 16 CPU)\n"
    "  --kv-memory MIB   with --concurrency: KV cache memory in MiB (default: room for max-batch full contexts\n"
    "                    within 90% of the free memory)\n"
    "  --lookahead auto|on|off\n"
    "                    with --concurrency: queue each decode step behind the one in flight (auto: where the\n"
    "                    device runs apart from the host, CUDA)\n"
    "  --json            print one JSON object instead of a table\n"
    "  --spec ngram|draft|oracle\n"
    "                    instead: speculative decoding against plain decoding through the engine, side by\n"
    "                    side (one session; outputs compared: identical on the CPU). ngram, draft: a copy-heavy\n"
    "                    and an open-ended prompt, greedy, and the open-ended one sampled at temperature 1:\n"
    "                    tokens/s, speedup and acceptance (draft: a model folder's, and --draft-model DIR, by\n"
    "                    default the embedded model's draft). oracle (greedy): drafts replaying the\n"
    "                    model's own output (all accepted): for k = 1, 2, 4, 8, 16 drafts a step, tokens/s,\n"
    "                    the cost of a verify step against a plain step, and the speedup\n"
    "  --draft-max K     with --spec: drafts per step at most, 1..16 (oracle: only that k)\n"
    "                    --spec ngram with --concurrency: the engine benchmark with n-gram drafts (the plan\n"
    "                    column says text:spec-ngram)\n";

int cf_cmd_bench(int argc, char **argv) {
    const char *verb = "bench";
    cf_common_opts o = {.model = NULL, .device = CF_DEVICE_CPU};
    const char *random_cfg = NULL, *v;
    long n_prompt = 128, n_gen = 128, reps = 3, chunk = 0, max_batch = 0, kv_mib = 0, requests = 0;
    int json = 0;
    const char *decode_opt = "auto", *lookahead_opt = NULL, *conc_opt = NULL, *quant_opt = NULL, *spec_opt = NULL;
    long draft_max = 0;
    const char *draft_dir = NULL;
    for (int i = 1; i < argc; i++) {
        int r;
        if (cf_is_help(argv[i])) { fputs(bench_help, stdout); return 0; }
        if ((r = cf_common_flag(verb, argc, argv, &i, &o)) != 0) { if (r < 0) return CF_EXIT_USAGE; continue; }
        if ((r = cf_flag_value(verb, argc, argv, &i, "--random-weights", &random_cfg)) != 0) { if (r < 0) return CF_EXIT_USAGE; continue; }
        if ((r = cf_flag_value(verb, argc, argv, &i, "--concurrency", &conc_opt)) != 0) { if (r < 0) return CF_EXIT_USAGE; continue; }
        if ((r = cf_flag_value(verb, argc, argv, &i, "--spec", &spec_opt)) != 0) {
            if (r < 0) return CF_EXIT_USAGE;
            if (strcmp(spec_opt, "ngram") && strcmp(spec_opt, "draft") && strcmp(spec_opt, "oracle"))
                return cf_usage_error(verb, "--spec must be ngram, draft or oracle, got '%s'", spec_opt);
            continue;
        }
        if ((r = cf_flag_value(verb, argc, argv, &i, "--draft-model", &draft_dir)) != 0) { if (r < 0) return CF_EXIT_USAGE; continue; }
        if ((r = cf_flag_value(verb, argc, argv, &i, "--draft-max", &v)) != 0) {
            if (r < 0) return CF_EXIT_USAGE;
            if (cf_parse_long(v, 1, 16, &draft_max)) return cf_usage_error(verb, "--draft-max must be an integer in [1, 16], got '%s'", v);
            continue;
        }
        if ((r = cf_flag_value(verb, argc, argv, &i, "--quant", &quant_opt)) != 0) {
            if (r < 0) return CF_EXIT_USAGE;
            if (strcmp(quant_opt, "q4") && strcmp(quant_opt, "q8")) return cf_usage_error(verb, "--quant must be q4 or q8, got '%s'", quant_opt);
            continue;
        }
        if ((r = cf_flag_value(verb, argc, argv, &i, "--lookahead", &lookahead_opt)) != 0) {
            if (r < 0) return CF_EXIT_USAGE;
            if (strcmp(lookahead_opt, "auto") && strcmp(lookahead_opt, "on") && strcmp(lookahead_opt, "off"))
                return cf_usage_error(verb, "--lookahead must be auto, on or off, got '%s'", lookahead_opt);
            continue;
        }
        if ((r = cf_flag_value(verb, argc, argv, &i, "--decode", &decode_opt)) != 0) {
            if (r < 0) return CF_EXIT_USAGE;
            if (strcmp(decode_opt, "auto") && strcmp(decode_opt, "device") && strcmp(decode_opt, "host"))
                return cf_usage_error(verb, "--decode must be auto, device or host, got '%s'", decode_opt);
            continue;
        }
        long *target = NULL;
        const char *names[] = {"--prompt", "--gen", "--reps", "--chunk", "--max-batch", "--kv-memory", "--requests"};
        long *targets[] = {&n_prompt, &n_gen, &reps, &chunk, &max_batch, &kv_mib, &requests};
        for (int k = 0; k < 7 && !target; k++) {
            if ((r = cf_flag_value(verb, argc, argv, &i, names[k], &v)) != 0) {
                if (r < 0) return CF_EXIT_USAGE;
                target = targets[k];
                if (cf_parse_long(v, 1, 1 << 20, target)) return cf_usage_error(verb, "%s must be a positive integer, got '%s'", names[k], v);
            }
        }
        if (target) continue;
        if (!strcmp(argv[i], "--json")) { json = 1; continue; }
        return cf_usage_error(verb, "unknown argument '%s'", argv[i]);
    }
    if (!o.model && !random_cfg) o.model = cf_default_model_dir();
    if (!o.model && !random_cfg) return cf_usage_error(verb, "give --model DIR or --random-weights CONFIG.json");
    if (quant_opt && !random_cfg) return cf_usage_error(verb, "--quant goes with --random-weights (quantize a model folder with cinfer quantize)");
    if (reps > 100) return cf_usage_error(verb, "--reps must be at most 100");
    if (chunk > 4096) return cf_usage_error(verb, "--chunk must be at most 4096");
    if (max_batch > 2048) return cf_usage_error(verb, "--max-batch must be at most 2048");
    if ((max_batch || kv_mib || lookahead_opt || requests) && !conc_opt)
        return cf_usage_error(verb, "--max-batch, --kv-memory, --lookahead and --requests go with --concurrency");
    if (requests > 100000) return cf_usage_error(verb, "--requests must be at most 100000");
    if (draft_max && !spec_opt) return cf_usage_error(verb, "--draft-max goes with --spec");
    if (spec_opt && conc_opt && strcmp(spec_opt, "ngram"))
        return cf_usage_error(verb, "--concurrency takes --spec ngram only (the oracle is a single-session benchmark)");
    if (draft_max && conc_opt) return cf_usage_error(verb, "--draft-max goes with --spec alone, not --concurrency");
    if (draft_dir && !(spec_opt && !strcmp(spec_opt, "draft"))) return cf_usage_error(verb, "--draft-model goes with --spec draft");
    if (spec_opt && !strcmp(spec_opt, "draft")) {
        if (random_cfg) return cf_usage_error(verb, "--spec draft needs a model folder (its tokenizer is checked against the draft's)");
        if (!(draft_dir = cf_gen_draft_dir(o.model, draft_dir)))
            return cf_usage_error(verb, "--spec draft needs --draft-model DIR (only the embedded model has a default draft)");
    }

    int32_t *conc = NULL;
    int n_conc = 0;
    if (conc_opt) {
        char why[160];
        if (cf_parse_ids(conc_opt, &conc, &n_conc, why, sizeof why))
            return cf_usage_error(verb, "--concurrency: %s", why);
        for (int k = 0; k < n_conc; k++) {
            if (conc[k] < 1 || conc[k] > 1024) {
                int bad = conc[k];
                free(conc);
                return cf_usage_error(verb, "--concurrency: %d is not in 1..1024", bad);
            }
            if (requests && conc[k] > requests) {
                int bad = conc[k];
                free(conc);
                return cf_usage_error(verb, "--requests %ld is fewer than the concurrency %d", requests, bad);
            }
        }
    }

    if (spec_opt && !conc_opt && !random_cfg) {   /* the folder's tokenizer gives text prompts */
        free(conc);
        const bench_spec_args sa = {.source = spec_opt, .draft_dir = draft_dir, .draft_max = (int)draft_max, .n_prompt = (int)n_prompt,
                                    .n_gen = (int)n_gen, .reps = (int)reps, .label = o.model, .dir = o.model,
                                    .dev = o.device == CF_DEVICE_CUDA ? CINFER_DEVICE_CUDA : CINFER_DEVICE_CPU, .threads = o.threads};
        return cf_bench_spec(NULL, &sa);
    }
    cinfer_error err = {0};
    cf_model *m = NULL;
    cf_model_params p = cf_model_default_params();
    p.backend.device = o.device;
    p.backend.n_threads = o.threads;
    p.random_qbits = !quant_opt ? 0 : !strcmp(quant_opt, "q4") ? 4 : 8;
    double t0 = cf_monotonic_seconds();
    cinfer_status st = random_cfg ? cf_model_random(random_cfg, 1234, &p, &m, &err) : cf_model_load(o.model, &p, &m, &err);
    if (st != CINFER_OK) {
        free(conc);
        return cf_report(verb, &err);
    }
    double load_s = cf_monotonic_seconds() - t0;
    const cf_hparams *hp = &m->hp;
    if (n_prompt + n_gen + 1 > hp->max_ctx) {
        const int max_ctx = hp->max_ctx;
        cf_model_free(m);
        free(conc);
        return cf_usage_error(verb, "--prompt + --gen + 1 (%ld) exceeds the model's context of %d", n_prompt + n_gen + 1, max_ctx);
    }
    const cf_sample_args greedy = {.temperature = 0.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f};
    const int on_device = strcmp(decode_opt, "host") && cf_model_can_pick_on_device(m, &greedy);
    if (!on_device && !strcmp(decode_opt, "device")) {
        fprintf(stderr, "cinfer bench: the %s backend cannot pick tokens on the device (no argmax operation)\n", m->be->ops->name);
        cf_model_free(m);
        return 1;
    }
    const char *path = !on_device ? "host" : m->decode_graphs ? "device-graph" : "device-eager";
    const char *path_text = !on_device        ? "argmax on the host"
                            : m->decode_graphs ? "argmax on the device, step replayed as a graph, one step ahead"
                                               : "argmax on the device, op by op";
    int used_chunk = 0;
    int rc = 0;
    double bw = 0, copy_bw = 0, gemm = 0;
    const int cpu = !strcmp(m->be->ops->name, "cpu");
    size_t bw_bytes = o.device == CF_DEVICE_CUDA ? (size_t)2 << 30 : (size_t)512 << 20;
    /* the GEMM rate at the row count of the longest prefill pass, which the prefill rate is compared with */
    const long pass = chunk ? chunk : cf_model_prefill_chunk(m);
    const int gemm_rows = (int)(n_prompt < pass ? n_prompt : pass);
    if (spec_opt && !conc_opt) {
        const bench_spec_args sa = {.source = spec_opt, .draft_max = (int)draft_max, .n_prompt = (int)n_prompt, .n_gen = (int)n_gen,
                                    .reps = (int)reps, .label = random_cfg ? random_cfg : o.model, .device = m->be->ops->name};
        return cf_bench_spec(m, &sa);
    }
    if (conc) {
        if (measure_bandwidth(m->be, bw_bytes, &copy_bw, &err) != CINFER_OK || roofline_bandwidth(m->be, cpu, copy_bw, &bw, &err) != CINFER_OK) {
            free(conc);
            cf_model_free(m);
            return cf_report(verb, &err);
        }
        const bench_engine_args a = {.concurrency = conc, .n_concurrency = n_conc, .n_prompt = (int)n_prompt,
                                     .n_gen = (int)n_gen, .requests = (int)requests, .bandwidth_gbs = bw, .json = json, .max_batch = (int)max_batch,
                                     .kv_memory = (int64_t)kv_mib << 20,
                                     .lookahead = !lookahead_opt || !strcmp(lookahead_opt, "auto") ? 0
                                                  : !strcmp(lookahead_opt, "on") ? 1 : -1,
                                     .label = random_cfg ? random_cfg : o.model, .device = m->be->ops->name,
                                     .draft = spec_opt};
        rc = cf_bench_concurrency(m, &a);
        free(conc);
        return rc;
    }
    if (measure_bandwidth(m->be, bw_bytes, &copy_bw, &err) != CINFER_OK || measure_gemm(m, gemm_rows, &gemm, &err) != CINFER_OK) {
        rc = cf_report(verb, &err);
        cf_model_free(m);
        return rc;
    }
    int32_t *ids = malloc((size_t)n_prompt * sizeof *ids);
    float *logits = malloc((size_t)hp->vocab * sizeof *logits);
    double *pre = calloc((size_t)reps, sizeof *pre), *dec = calloc((size_t)reps, sizeof *dec);
    /* the roofline's bandwidth after every rep, the warm-up's included, so that each rep's decode is set against the
     * mean of the passes just before and just after it (on the CPU a shared machine's bandwidth moves by tens of
     * percent within a run; on CUDA every entry is the copy figure) */
    double *bws = calloc((size_t)reps + 1, sizeof *bws), *frac = calloc((size_t)reps, sizeof *frac);
    if (!ids || !logits || !pre || !dec || !bws || !frac) { fprintf(stderr, "cinfer bench: out of memory\n"); rc = 1; goto done; }
    uint64_t x = 88172645463325252ull;
    for (long i = 0; i < n_prompt; i++) { x ^= x << 13; x ^= x >> 7; x ^= x << 17; ids[i] = (int32_t)(x % (uint64_t)hp->vocab); }
    /* rep -1 warms up (first-use costs: library heuristics, scratch growth) and is not counted */
    for (long r = -1; r < reps; r++) {
        cf_seq *s = NULL;
        const int ctx = (int)(n_prompt + n_gen + 1);
        st = chunk ? cf_seq_create_chunked(m, ctx, (int)chunk, &s, &err) : cf_seq_create(m, ctx, &s, &err);
        if (st != CINFER_OK) { rc = cf_report(verb, &err); goto done; }
        used_chunk = cf_seq_chunk(s) < n_prompt ? cf_seq_chunk(s) : (int)n_prompt;  /* positions in the longest pass */
        double a = cf_monotonic_seconds();
        st = cf_model_eval(m, s, ids, (int)n_prompt, on_device ? NULL : logits, 0, &err);
        double b = cf_monotonic_seconds(), d = b;  /* cf_model_eval syncs before it returns */
        /* n_gen + 1 steps, the first untimed; each evaluates the last token and picks the next */
        int32_t next = 0;
        if (on_device) {
            st = cf_model_pick_last(m, s, &greedy, 0, &next, &err);
            if (st == CINFER_OK) st = cf_model_decode_step(m, s, next, &greedy, 0, &next, &err);
            if (st == CINFER_OK) st = m->be->ops->sync(m->be, &err);
            d = cf_monotonic_seconds();
            int done = 0;
            if (st == CINFER_OK && n_gen > 0) st = cf_model_decode_run(m, s, next, &greedy, NULL, (int)n_gen, keep_going, NULL, &done, &err);
        }
        for (long t = 0; !on_device && t <= n_gen && st == CINFER_OK; t++) {
            if (t == 1) {
                st = m->be->ops->sync(m->be, &err);
                d = cf_monotonic_seconds();
            }
            next = 0;
            for (int k = 0; k < hp->vocab && st == CINFER_OK; k++) {
                if (isnan(logits[k]) || logits[k] == INFINITY)
                    st = cf_fail(&err, CINFER_E_NOT_A_NUMBER, "the model produced non-finite logits (NaN/inf) at position %ld",
                                 n_prompt - 1 + t);
                else if (logits[k] > logits[next]) next = k;
            }
            if (st == CINFER_OK) st = cf_model_eval(m, s, &next, 1, logits, 0, &err);
        }
        double c = cf_monotonic_seconds();
        cf_seq_free(s);
        if (st != CINFER_OK || roofline_bandwidth(m->be, cpu, copy_bw, &bws[r + 1], &err) != CINFER_OK) { rc = cf_report(verb, &err); goto done; }
        if (r < 0) continue;
        pre[r] = n_prompt / (b - a);
        dec[r] = n_gen / (c - d);
    }
    {
        double prefill = median(pre, (int)reps);
        /* bytes per decoded token: all weights but the embedding gather, plus the average KV cache read */
        double kv_avg = (double)cf_hparams_kv_read_bytes(hp, n_prompt + 1 + n_gen / 2, cf_dtype_size(m->kv_dtype));
        double bytes = (double)m->decode_bytes + kv_avg;
        for (long r = 0; r < reps; r++) frac[r] = dec[r] * bytes / (0.5 * (bws[r] + bws[r + 1]) * 1e9);
        bw = median(bws, (int)reps + 1);
        /* the fraction: the median of the reps' own; the roofline printed beside it: the median bandwidth's */
        double fraction = median(frac, (int)reps), decode = median(dec, (int)reps);
        double roof = bw * 1e9 / bytes;
        /* 2 flops per weight used per token: everything but the embedding gather, and the output projection
         * only for the one row whose logits the prompt's evaluation computes */
        double used_params = (double)cf_hparams_active_params(hp), head = (double)hp->vocab * hp->dim;
        double prefill_gflops = prefill * 2.0 * (used_params - head + head / (double)n_prompt) / 1e9;
        if (json) {
            printf("{\"model\":\"%s\",\"arch\":\"%s\",\"device\":\"%s\",\"threads\":%d,\"params\":%lld,\"weight_dtype\":\"%s\","
                   "\"weight_bytes\":%lld,\"decode_bytes_per_token\":%.0f,\"prompt_tokens\":%ld,\"gen_tokens\":%ld,\"reps\":%ld,"
                   "\"load_s\":%.3f,\"bandwidth_gb_s\":%.2f,\"gemm_gflop_s\":%.1f,\"gemm_rows\":%d,\"prefill_tokens_per_s\":%.2f,"
                   "\"prefill_gflop_s\":%.1f,\"prefill_fraction_of_gemm\":%.4f,\"prefill_chunk\":%d,\"decode_path\":\"%s\","
                   "\"decode_tokens_per_s\":%.3f,\"roofline_tokens_per_s\":%.3f,\"roofline_fraction\":%.4f,"
                   "\"bandwidth_kind\":\"%s\",\"copy_bandwidth_gb_s\":%.2f}\n",
                   random_cfg ? random_cfg : o.model, hp->arch_name, m->be->ops->name, m->be->n_threads,
                   (long long)cf_hparams_n_params(hp), m->dtype_summary, (long long)m->weight_bytes, bytes, n_prompt, n_gen, reps,
                   load_s, bw, gemm, gemm_rows, prefill, prefill_gflops, prefill_gflops / gemm, used_chunk, path, decode, roof, fraction,
                   cpu ? "read" : "copy", copy_bw);
        } else {
            printf("model        %s (%s, %.1f M params, %s)\n", random_cfg ? random_cfg : o.model, hp->arch_name,
                   cf_hparams_n_params(hp) / 1e6, m->dtype_summary);
            printf("device       %s, %d threads; load %.2f s\n", m->be->ops->name, m->be->n_threads, load_s);
            if (cpu) printf("bandwidth    %.1f GB/s (read; copy %.1f GB/s read+write)   ", bw, copy_bw);
            else printf("bandwidth    %.1f GB/s (copy, read+write)   ", bw);
            printf("GEMM %.1f GFLOP/s (%d x %lld x %lld)\n", gemm, gemm_rows,
                   (long long)m->lw[0].w_up.cols, (long long)m->lw[0].w_up.rows);
            printf("prefill      %ld tokens in passes of %d: %.1f tokens/s (%.1f GFLOP/s, %.0f%% of GEMM)\n", n_prompt, used_chunk,
                   prefill, prefill_gflops, 100 * prefill_gflops / gemm);
            printf("decode       %ld tokens (%s): %.2f tokens/s; roofline %.2f tokens/s (%.1f MB/token): %.1f%%\n", n_gen, path_text,
                   decode, roof, bytes / 1e6, 100 * fraction);
        }
    }
done:
    free(ids);
    free(logits);
    free(pre);
    free(dec);
    free(bws);
    free(frac);
    cf_model_free(m);
    return rc;
}
