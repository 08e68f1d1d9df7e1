/* copy_as_dtype.c: copies a fixture model folder with its f32 tensors converted to f16 or bf16 (rounded to
 * nearest even), every other file as it is, so that the parity test can run the model in that precision
 * (its weights, and on the CPU its KV cache, which follows the weights). Usage: copy_as_dtype IN OUT f16|bf16 */
#include "base/dtype.h"
#include "base/file.h"
#include "format/safetensors.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int main(int argc, char **argv) {
    if (argc != 4 || (strcmp(argv[3], "f16") && strcmp(argv[3], "bf16"))) {
        fprintf(stderr, "usage: copy_as_dtype IN_DIR OUT_DIR f16|bf16\n");
        return 2;
    }
    const cf_dtype to = strcmp(argv[3], "f16") ? CF_BF16 : CF_F16;
    char from[4096], dest[4096];
    mkdir(argv[2], 0755);
    DIR *d = opendir(argv[1]);
    if (!d) { fprintf(stderr, "cannot open %s\n", argv[1]); return 1; }
    int ok = 1;
    cinfer_error err = {0};
    for (struct dirent *e; ok && (e = readdir(d));) {
        if (e->d_name[0] == '.' || !strcmp(e->d_name, "model.safetensors")) continue;
        snprintf(from, sizeof from, "%s/%s", argv[1], e->d_name);
        snprintf(dest, sizeof dest, "%s/%s", argv[2], e->d_name);
        ok = cf_file_copy(from, dest, 0, &err) == CINFER_OK;
        if (!ok) fprintf(stderr, "%s\n", err.message);
    }
    closedir(d);
    snprintf(from, sizeof from, "%s/model.safetensors", argv[1]);
    snprintf(dest, sizeof dest, "%s/model.safetensors", argv[2]);
    cf_st_set *set = NULL;
    if (!ok || cf_st_open_file(from, &set, &err) != CINFER_OK) {
        if (ok) fprintf(stderr, "%s\n", err.message);
        return 1;
    }
    const size_t n = cf_st_count(set);
    cf_st_write_entry *w = calloc(n ? n : 1, sizeof *w);
    void **bufs = calloc(n ? n : 1, sizeof *bufs);
    for (size_t i = 0; ok && i < n; i++) {
        const cf_st_tensor *t = cf_st_at(set, i);
        w[i] = (cf_st_write_entry){.name = t->name, .dtype = (cf_dtype)t->dtype, .n_dims = t->n_dims, .data = t->data};
        memcpy(w[i].shape, t->shape, sizeof w[i].shape);
        if (t->dtype != CF_F32) continue;
        const size_t count = t->nbytes / sizeof(float);
        float *f = malloc(t->nbytes ? t->nbytes : 1);
        bufs[i] = malloc(count * 2 + 1);
        ok = f && bufs[i];
        if (ok) {
            memcpy(f, t->data, t->nbytes);   /* the mapping need not be 4-byte aligned */
            cf_from_f32(bufs[i], f, to, count);
            w[i].dtype = to;
            w[i].data = bufs[i];
        }
        free(f);
    }
    if (ok && cf_st_write(dest, w, n, &err) != CINFER_OK) {
        fprintf(stderr, "%s\n", err.message);
        ok = 0;
    }
    for (size_t i = 0; i < n; i++) free(bufs[i]);
    free(bufs);
    free(w);
    cf_st_close(set);
    return ok ? 0 : 1;
}
