/* cmd_model.c: the verbs that drive a model directly: logits (dump prompt logits) and info (describe a
 * model folder). */
#include "cli/cli.h"
#include "model/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static cinfer_status open_model(const cf_common_opts *o, cf_model **m, cinfer_error *err) {
    cf_model_params p = cf_model_default_params();
    p.backend.device = o->device;
    p.backend.n_threads = o->threads;
    return cf_model_load(o->model, &p, m, err);
}

static const char *logits_help =
    "usage: cinfer logits [--model DIR] --prompt-ids 5,17,300 --out FILE\n"
    "Writes the logits of every prompt position as float32 little-endian, row-major [n_prompt, vocab].\n"
    "  --device cpu|cuda, --threads N as for run\n";

int cf_cmd_logits(int argc, char **argv) {
    const char *verb = "logits";
    cf_common_opts o = {.model = cf_default_model_dir(), .device = CF_DEVICE_CPU};
    const char *ids_s = NULL, *out = NULL;
    for (int i = 1; i < argc; i++) {
        int r;
        if (cf_is_help(argv[i])) { fputs(logits_help, stdout); return 0; }
        if ((r = cf_common_flag(verb, argc, argv, &i, &o)) != 0) { if (r < 0) return CF_EXIT_USAGE; continue; }
        if ((r = cf_flag_value(verb, argc, argv, &i, "--prompt-ids", &ids_s)) != 0) { if (r < 0) return CF_EXIT_USAGE; continue; }
        if ((r = cf_flag_value(verb, argc, argv, &i, "--out", &out)) != 0) { if (r < 0) return CF_EXIT_USAGE; continue; }
        return cf_usage_error(verb, "unknown argument '%s'", argv[i]);
    }
    if (!o.model) return cf_usage_error(verb, "--model DIR is required (no embedded model in this build)");
    if (!ids_s) return cf_usage_error(verb, "--prompt-ids is required");
    if (!out) return cf_usage_error(verb, "--out FILE is required");
    int32_t *ids;
    int n;
    char why[160];
    if (cf_parse_ids(ids_s, &ids, &n, why, sizeof why)) return cf_usage_error(verb, "--prompt-ids: %s", why);
    if (cf_check_output(verb, "--out", out)) {
        free(ids);
        return 1;
    }
    cinfer_error err = {0};
    cf_model *m = NULL;
    cf_seq *s = NULL;
    float *logits = NULL;
    int rc = 0;
    if (open_model(&o, &m, &err) != CINFER_OK || cf_seq_create(m, 0, &s, &err) != CINFER_OK) { rc = cf_report(verb, &err); goto done; }
    logits = malloc((size_t)n * m->hp.vocab * sizeof *logits);
    if (!logits) { fprintf(stderr, "cinfer logits: out of memory\n"); rc = 1; goto done; }
    if (cf_model_eval(m, s, ids, n, logits, 1, &err) != CINFER_OK) { rc = cf_report(verb, &err); goto done; }
    FILE *fp = cf_open_output(verb, "--out", out);
    size_t cnt = (size_t)n * m->hp.vocab;
    if (!fp) {
        rc = 1;
    } else {
        int short_write = fwrite(logits, sizeof *logits, cnt, fp) != cnt;
        if (fclose(fp) != 0 || short_write) {
            fprintf(stderr, "cinfer logits: cannot write %s\n", out);
            rc = 1;
        }
    }
done:
    free(logits);
    free(ids);
    cf_seq_free(s);
    cf_model_free(m);
    return rc;
}

static const char *info_help =
    "usage: cinfer info [--model DIR] [--context N]\n"
    "Prints architecture, parameter count, dtypes, layer pattern and memory needed.\n";

int cf_cmd_info(int argc, char **argv) {
    const char *verb = "info";
    cf_common_opts o = {.model = cf_default_model_dir(), .device = CF_DEVICE_CPU};
    const char *v;
    long ctx = 0;
    for (int i = 1; i < argc; i++) {
        int r;
        if (cf_is_help(argv[i])) { fputs(info_help, stdout); return 0; }
        if ((r = cf_common_flag(verb, argc, argv, &i, &o)) != 0) { if (r < 0) return CF_EXIT_USAGE; continue; }
        if ((r = cf_flag_value(verb, argc, argv, &i, "--context", &v)) != 0) {
            if (r < 0) return CF_EXIT_USAGE;
            if (cf_parse_long(v, 1, 1 << 30, &ctx)) return cf_usage_error(verb, "--context must be a positive integer, got '%s'", v);
            continue;
        }
        return cf_usage_error(verb, "unknown argument '%s'", argv[i]);
    }
    if (!o.model) return cf_usage_error(verb, "--model DIR is required (no embedded model in this build)");
    cinfer_error err = {0};
    cf_model *m = NULL;
    if (open_model(&o, &m, &err) != CINFER_OK) return cf_report(verb, &err);
    const cf_hparams *hp = &m->hp;
    if (ctx == 0) ctx = hp->max_ctx;
    printf("model:        %s\n", o.model);
    printf("architecture: %s\n", hp->arch_name);
    printf("parameters:   %lld (%.2f M)\n", (long long)cf_hparams_n_params(hp), cf_hparams_n_params(hp) / 1e6);
    printf("dtypes:       %s\n", m->dtype_summary);
    printf("layers:       %d, hidden %d, heads %d (kv %d), head_dim %d, ffn %d, vocab %d, context %d\n", hp->n_layers, hp->dim,
           hp->n_heads, hp->n_kv_heads, hp->head_dim, hp->ffn_dim, hp->vocab, hp->max_ctx);
    printf("layer types:  ");
    for (int l = 0; l < hp->n_layers; l++) {
        const cf_layer_hp *L = &hp->layers[l];
        if (L->window) printf("%sS%d", l ? " " : "", L->window);
        else printf("%sF", l ? " " : "");
        if (L->kv_source != l) printf("<%d", L->kv_source);
    }
    printf("   (F full attention, S<n> sliding window of n, <k reads layer k's cache)\n");
    printf("rope:         ");
    for (int r = 0; r < hp->n_rope; r++) printf("%s%s rot_dim %d", r ? "; " : "", hp->rope[r].type, hp->rope[r].rot_dim);
    printf("\n");
    printf("eos ids:      ");
    for (int e = 0; e < hp->n_eos; e++) printf("%s%d", e ? "," : "", hp->eos_ids[e]);
    printf("%s\n", hp->n_eos ? "" : "none");
    int64_t kv_tok = cf_hparams_kv_bytes_per_token(hp, 4), kv_total = 0;
    const int chunk = cf_model_prefill_chunk(m);
    for (int l = 0; l < hp->n_layers; l++) {
        const cf_layer_hp *L = &hp->layers[l];
        if (L->kv_source != l) continue;
        int64_t slots = L->window && L->window + chunk < ctx ? L->window + chunk : ctx;
        kv_total += slots * (int64_t)L->n_kv_heads * (L->head_dim + L->v_head_dim) * 4;
    }
    printf("weights:      %.1f MB as stored (%lld bytes read per decoded token)\n", m->weight_bytes / 1e6, (long long)m->decode_bytes);
    printf("kv cache:     %lld bytes/token (f32, full layers); %.1f MB for a context of %ld tokens (window layers keep window+%d)\n",
           (long long)kv_tok, kv_total / 1e6, ctx, chunk);
    printf("memory:       %.1f MB for a context of %ld tokens (weights + f32 cache)\n", (m->weight_bytes + kv_total) / 1e6, ctx);
    cf_model_free(m);
    return 0;
}
