/* mlx_quantize.c: writing an MLX affine-quantized model folder from a float one (cf_mlxq_quantize_dir,
 * behind cinfer quantize). Owns the output buffers of the quantized tensors until they are written. */
#include "format/mlx_quant.h"
#include "base/file.h"
#include "base/status.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* module (a tensor name less ".weight") is named by keep: equal, or ending in "." + keep */
static int kept(const char *module, const char *const *keep, int n_keep) {
    const size_t ml = strlen(module);
    for (int i = 0; i < n_keep; i++) {
        const size_t kl = strlen(keep[i]);
        if (!strcmp(module, keep[i])) return 1;
        if (ml > kl && module[ml - kl - 1] == '.' && !strcmp(module + ml - kl, keep[i])) return 1;
    }
    return 0;
}

static cinfer_status write_config(const char *in_dir, const char *out_dir, int bits, int group, cinfer_error *err) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/config.json", in_dir);
    char *text = NULL;
    CF_TRY(cf_file_read(path, CF_FILE_MAX_CONFIG, 0, &text, NULL, err));
    cJSON *root = cJSON_Parse(text);
    free(text);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return cf_fail(err, CINFER_E_FORMAT, "%s: not a JSON object", path);
    }
    if (cJSON_GetObjectItemCaseSensitive(root, "quantization") || cJSON_GetObjectItemCaseSensitive(root, "quantization_config")) {
        cJSON_Delete(root);
        return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "%s: the model is quantized already", path);
    }
    cJSON *q = cJSON_CreateObject();
    cJSON_AddNumberToObject(q, "group_size", group);
    cJSON_AddNumberToObject(q, "bits", bits);
    cJSON_AddStringToObject(q, "mode", "affine");
    cJSON_AddItemToObject(root, "quantization", q);
    cJSON_AddItemToObject(root, "quantization_config", cJSON_Duplicate(q, 1));
    char *out = cJSON_Print(root);
    cJSON_Delete(root);
    if (!out) return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory");
    snprintf(path, sizeof path, "%s/config.json", out_dir);
    FILE *fp = fopen(path, "wb");
    if (!fp) {
        free(out);
        return cf_fail(err, CINFER_E_IO, "%s: cannot create: %s", path, strerror(errno));
    }
    int ok = fputs(out, fp) >= 0 && fputc('\n', fp) != EOF;
    free(out);
    if (fclose(fp) != 0 || !ok) return cf_fail(err, CINFER_E_IO, "%s: write failed", path);
    return CINFER_OK;
}

static int tied(const char *in_dir) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/config.json", in_dir);
    char *text = cf_read_file(path, NULL);
    cJSON *root = text ? cJSON_Parse(text) : NULL;
    free(text);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, "tie_word_embeddings");
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "text_config"), "tie_word_embeddings");
    int r = cJSON_IsTrue(t) || (!t && cJSON_IsTrue(tc));
    cJSON_Delete(root);
    return r;
}

cinfer_status cf_mlxq_quantize_dir(const char *in_dir, const char *out_dir, int bits, int group, const char *const *keep, int n_keep,
                                   int *n_quantized, int *n_kept, cinfer_error *err) {
    if (n_quantized) *n_quantized = 0;
    if (n_kept) *n_kept = 0;
    if (!cf_qweight_bits_ok(bits)) return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "%d bits: MLX affine quantization has 2, 3, 4, 5, 6 or 8", bits);
    if (!cf_qweight_group_ok(group)) return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "group size %d: MLX affine quantization has 32, 64 or 128", group);
    if (mkdir(out_dir, 0755) != 0 && errno != EEXIST) return cf_fail(err, CINFER_E_IO, "%s: cannot create: %s", out_dir, strerror(errno));
    struct stat so;
    if (stat(out_dir, &so) != 0 || !S_ISDIR(so.st_mode)) return cf_fail(err, CINFER_E_IO, "%s: not a directory", out_dir);
    struct stat si;
    if (stat(in_dir, &si) == 0 && si.st_dev == so.st_dev && si.st_ino == so.st_ino)
        return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "%s: the output folder is the input folder", out_dir);

    const char *keep_tied[64];
    int nk = 0;
    for (int i = 0; i < n_keep && nk < 63; i++) keep_tied[nk++] = keep[i];
    if (kept("lm_head", keep, n_keep) && tied(in_dir) && nk < 64) keep_tied[nk++] = "embed_tokens";

    cf_st_set *set = NULL;
    CF_TRY(cf_st_open_dir(in_dir, &set, err));
    const size_t n = cf_st_count(set);
    cf_st_write_entry *e = calloc(3 * n + 1, sizeof *e);
    void **bufs = calloc(n + 1, sizeof *bufs);
    char **names = calloc(2 * n + 1, sizeof *names);
    cinfer_status st = CINFER_OK;
    if (!e || !bufs || !names) st = cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory");
    size_t ne = 0, nn = 0, n_packed = 0;
    int nq = 0, nkept = 0;
    for (size_t i = 0; st == CINFER_OK && i < n; i++) {
        const cf_st_tensor *t = cf_st_at(set, i);
        const size_t nl = strlen(t->name);
        const int is_float = t->dtype == CF_F32 || t->dtype == CF_F16 || t->dtype == CF_BF16;
        const int matrix = t->n_dims == 2 && nl > 7 && !strcmp(t->name + nl - 7, ".weight") && is_float;
        char module[512];
        snprintf(module, sizeof module, "%.*s", (int)(nl > 7 ? nl - 7 : nl), t->name);
        if (t->dtype < 0 || t->dtype == CF_Q) {
            st = cf_fail(err, CINFER_E_UNSUPPORTED, "%s: tensor '%s' has dtype %s, which cinfer quantize cannot copy", t->file, t->name,
                         t->dtype_name);
            break;
        }
        if (matrix && t->shape[1] % group == 0 && !kept(module, keep_tied, nk)) {
            const int64_t rows = t->shape[0], cols = t->shape[1], wpr = cf_qweight_words_per_row(bits, cols), G = cols / group;
            const size_t es = cf_dtype_size((cf_dtype)t->dtype);
            void *buf = malloc((size_t)(rows * wpr) * 4 + 2 * (size_t)(rows * G) * es);
            float *f = malloc((size_t)(rows * cols) * sizeof *f);
            char *ns = malloc(strlen(module) + 8), *nb = malloc(strlen(module) + 8);
            bufs[i] = buf;
            if (ns) names[nn++] = ns;
            if (nb) names[nn++] = nb;
            if (!buf || !f || !ns || !nb) {
                free(f);
                st = cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory quantizing '%s'", t->name);
                break;
            }
            cf_to_f32(f, t->data, (cf_dtype)t->dtype, (size_t)(rows * cols));
            uint32_t *q = buf;
            char *sc = (char *)(q + rows * wpr), *bi = sc + (size_t)(rows * G) * es;
            #pragma omp parallel for schedule(dynamic, 1)
            for (int64_t r0 = 0; r0 < rows; r0 += 64) {
                const int64_t nr = rows - r0 < 64 ? rows - r0 : 64;
                cf_qweight_quantize(f + r0 * cols, nr, cols, bits, group, (cf_dtype)t->dtype, q + r0 * wpr, sc + (size_t)(r0 * G) * es,
                                    bi + (size_t)(r0 * G) * es);
            }
            free(f);
            sprintf(ns, "%s.scales", module);
            sprintf(nb, "%s.biases", module);
            /* packed values first (4-byte multiples after a header padded to 8: each stays aligned) */
            memmove(e + n_packed + 1, e + n_packed, (ne - n_packed) * sizeof *e);
            e[n_packed++] = (cf_st_write_entry){.name = t->name, .dtype = CF_U32, .n_dims = 2, .shape = {rows, wpr}, .data = q};
            ne++;
            e[ne++] = (cf_st_write_entry){.name = ns, .dtype = (cf_dtype)t->dtype, .n_dims = 2, .shape = {rows, G}, .data = sc};
            e[ne++] = (cf_st_write_entry){.name = nb, .dtype = (cf_dtype)t->dtype, .n_dims = 2, .shape = {rows, G}, .data = bi};
            nq++;
            continue;
        }
        if (matrix) nkept++;
        cf_st_write_entry w = {.name = t->name, .dtype = (cf_dtype)t->dtype, .n_dims = t->n_dims, .data = t->data};
        for (int d = 0; d < t->n_dims; d++) w.shape[d] = t->shape[d];
        e[ne++] = w;
    }
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/model.safetensors", out_dir);
    if (st == CINFER_OK) st = cf_st_write(path, e, ne, err);
    if (st == CINFER_OK) st = write_config(in_dir, out_dir, bits, group, err);
    static const char *const copies[] = {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json",
                                         "tokenizer.model", "chat_template.jinja", "chat_template.json", "added_tokens.json",
                                         "vocab.json", "merges.txt"};
    for (size_t i = 0; st == CINFER_OK && i < sizeof copies / sizeof copies[0]; i++) {
        char from[PATH_MAX], to[PATH_MAX];
        snprintf(from, sizeof from, "%s/%s", in_dir, copies[i]);
        snprintf(to, sizeof to, "%s/%s", out_dir, copies[i]);
        st = cf_file_copy(from, to, 1, err);   /* a file the model does not have is not copied */
    }
    for (size_t i = 0; bufs && i < n; i++) free(bufs[i]);
    for (size_t i = 0; names && i < nn; i++) free(names[i]);
    free(bufs);
    free(names);
    free(e);
    cf_st_close(set);
    if (st == CINFER_OK) {
        if (n_quantized) *n_quantized = nq;
        if (n_kept) *n_kept = nkept;
    }
    return st;
}
