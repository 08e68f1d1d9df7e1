/* safetensors.h: the tensors of a Hugging Face model folder, memory-mapped: model.safetensors, or the
 * shards named by model.safetensors.index.json. Headers are validated before any tensor is used. */
#ifndef CF_FORMAT_SAFETENSORS_H
#define CF_FORMAT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>
#include "cinfer.h"
#include "base/dtype.h"

#define CF_MAX_DIMS 4

typedef struct cf_st_tensor {
    char *name;
    char dtype_name[8];       /* as written in the header: "F32", "BF16", "U32", ... */
    int dtype;                /* a cf_dtype, or -1 for a type we do not compute with */
    int n_dims;
    int64_t shape[CF_MAX_DIMS];
    const void *data;         /* inside the mapping */
    size_t nbytes;
    const char *file;         /* the shard it lives in (owned by the set) */
} cf_st_tensor;

typedef struct cf_st_set cf_st_set;

/* Opens every safetensors file of the model folder dir. */
cinfer_status cf_st_open_dir(const char *dir, cf_st_set **out, cinfer_error *err);
/* Opens one .safetensors file. */
cinfer_status cf_st_open_file(const char *path, cf_st_set **out, cinfer_error *err);
/* Parses size bytes laid out as a .safetensors file, named name in messages; the set borrows bytes, which
 * must outlive it (the fuzzer's entry point). */
cinfer_status cf_st_open_memory(const void *bytes, size_t size, const char *name, cf_st_set **out, cinfer_error *err);
void cf_st_close(cf_st_set *set);

const cf_st_tensor *cf_st_find(const cf_st_set *set, const char *name);
size_t cf_st_count(const cf_st_set *set);
const cf_st_tensor *cf_st_at(const cf_st_set *set, size_t i);

/* Writes tensors (F32/F16/BF16/I32/U32 data given) to a new .safetensors file; used by tools and tests. */
typedef struct cf_st_write_entry {
    const char *name;
    cf_dtype dtype;
    int n_dims;
    int64_t shape[CF_MAX_DIMS];
    const void *data;
} cf_st_write_entry;
cinfer_status cf_st_write(const char *path, const cf_st_write_entry *entries, size_t n, cinfer_error *err);

#endif
