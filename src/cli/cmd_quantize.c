/* cmd_quantize.c: cinfer quantize: a model folder written MLX affine-quantized (format/mlx_quant.h). */
#include "cli/cli.h"
#include "format/mlx_quant.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *quantize_help =
    "usage: cinfer quantize --model IN --out OUT [--bits B] [--group-size G] [--keep NAME,...]\n"
    "Writes the model folder IN to OUT in MLX's affine quantization, as mlx_lm.convert -q writes it:\n"
    "config.json with \"quantization\" (and \"quantization_config\") {group_size, bits, mode \"affine\"},\n"
    "model.safetensors with <module>.weight (U32, packed), .scales and .biases (the weight's dtype) for every\n"
    "Linear and Embedding weight whose input dimension is a multiple of G (norms and vectors never; MoE expert\n"
    "stacks are left as they are), and the tokenizer and generation files copied.\n"
    "  --bits B          2, 3, 4, 5, 6 or 8 (default 4)\n"
    "  --group-size G    32, 64 or 128 (default 64)\n"
    "  --keep NAME,...   modules left unquantized: a module path or its last components (lm_head,\n"
    "                    embed_tokens, mlp.down_proj); with tied embeddings lm_head keeps embed_tokens\n"
    "Values match MLX's CPU affine_quantize bit for bit (per group: scale from max - min over 2^B - 1,\n"
    "the edge of larger magnitude placed exactly on a level, round half to even, scales and biases rounded to\n"
    "the weight's dtype). MLX's Metal kernel differs in two corner cases, so a model quantized on a Mac GPU may\n"
    "differ in a few values: it starts the group maximum at 0 (a group of only negative values gets max 0)\n"
    "and rounds halves away from zero.\n";

int cf_cmd_quantize(int argc, char **argv) {
    const char *verb = "quantize";
    const char *in = NULL, *out = NULL, *keep_opt = NULL, *v;
    long bits = 4, group = 64;
    for (int i = 1; i < argc; i++) {
        int r;
        if (cf_is_help(argv[i])) { fputs(quantize_help, stdout); return 0; }
        if ((r = cf_flag_value(verb, argc, argv, &i, "--model", &in)) != 0) { if (r < 0) return CF_EXIT_USAGE; continue; }
        if ((r = cf_flag_value(verb, argc, argv, &i, "--out", &out)) != 0) { if (r < 0) return CF_EXIT_USAGE; continue; }
        if ((r = cf_flag_value(verb, argc, argv, &i, "--keep", &keep_opt)) != 0) { if (r < 0) return CF_EXIT_USAGE; continue; }
        if ((r = cf_flag_value(verb, argc, argv, &i, "--bits", &v)) != 0) {
            if (r < 0) return CF_EXIT_USAGE;
            if (cf_parse_long(v, 2, 8, &bits) || bits == 7) return cf_usage_error(verb, "--bits must be 2, 3, 4, 5, 6 or 8, got '%s'", v);
            continue;
        }
        if ((r = cf_flag_value(verb, argc, argv, &i, "--group-size", &v)) != 0) {
            if (r < 0) return CF_EXIT_USAGE;
            if (cf_parse_long(v, 32, 128, &group) || (group != 32 && group != 64 && group != 128))
                return cf_usage_error(verb, "--group-size must be 32, 64 or 128, got '%s'", v);
            continue;
        }
        return cf_usage_error(verb, "unknown argument '%s'", argv[i]);
    }
    if (!in) return cf_usage_error(verb, "--model IN is required");
    if (!out) return cf_usage_error(verb, "--out OUT is required");
    char *keep_buf = keep_opt ? strdup(keep_opt) : NULL;
    const char *keep[64];
    int n_keep = 0;
    if (keep_opt && !keep_buf) { fprintf(stderr, "cinfer quantize: out of memory\n"); return 1; }
    for (char *save = NULL, *tok = keep_buf ? strtok_r(keep_buf, ",", &save) : NULL; tok; tok = strtok_r(NULL, ",", &save)) {
        if (n_keep == 64) { free(keep_buf); return cf_usage_error(verb, "--keep names at most 64 modules"); }
        keep[n_keep++] = tok;
    }
    cinfer_error err = {0};
    int nq = 0, nk = 0;
    cinfer_status st = cf_mlxq_quantize_dir(in, out, (int)bits, (int)group, keep, n_keep, &nq, &nk, &err);
    free(keep_buf);
    if (st != CINFER_OK) return cf_report(verb, &err);
    printf("%s: %d matrices quantized to %ld bits (group %ld), %d left as they were\n", out, nq, bits, group, nk);
    return 0;
}
