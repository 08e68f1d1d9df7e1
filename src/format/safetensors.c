/* safetensors.c: parsing and mapping safetensors files (single or sharded) and writing small ones.
 * Layout: u64 little-endian header length N, N bytes of JSON {name: {dtype, shape, data_offsets}},
 * then the data; offsets are relative to the end of the header. */
#include "format/safetensors.h"
#include "base/status.h"
#include "base/file.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct st_file {
    char *path;
    void *map;
    size_t size;
} st_file;

struct cf_st_set {
    st_file *files;
    size_t n_files;
    cf_st_tensor *tensors;
    size_t n_tensors, cap_tensors;
};

static int dtype_from_name(const char *s) {
    if (!strcmp(s, "F32")) return CF_F32;
    if (!strcmp(s, "F16")) return CF_F16;
    if (!strcmp(s, "BF16")) return CF_BF16;
    if (!strcmp(s, "I32")) return CF_I32;
    return -1;
}

static size_t raw_dtype_size(const char *s) {
    static const struct { const char *n; size_t sz; } t[] = {
        {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8}, {"I32", 4}, {"I16", 2}, {"I8", 1},
        {"U64", 8}, {"U32", 4}, {"U16", 2}, {"U8", 1}, {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (!strcmp(s, t[i].n)) return t[i].sz;
    return 0;
}

static int cmp_tensor(const void *a, const void *b) {
    return strcmp(((const cf_st_tensor *)a)->name, ((const cf_st_tensor *)b)->name);
}

void cf_st_close(cf_st_set *set) {
    if (!set) return;
    for (size_t i = 0; i < set->n_files; i++) {
        if (set->files[i].map) munmap(set->files[i].map, set->files[i].size);
        free(set->files[i].path);
    }
    for (size_t i = 0; i < set->n_tensors; i++) free(set->tensors[i].name);
    free(set->files);
    free(set->tensors);
    free(set);
}

static cinfer_status map_file(const char *path, st_file *f, cinfer_error *err) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return cf_fail(err, CINFER_E_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        close(fd);
        return cf_fail(err, CINFER_E_IO, "%s: cannot stat: %s", path, strerror(errno));
    }
    f->size = (size_t)sb.st_size;
    if (f->size < 8) {
        close(fd);
        return cf_fail(err, CINFER_E_FORMAT, "%s: truncated safetensors file (%zu bytes, header length missing)", path, f->size);
    }
    f->map = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (f->map == MAP_FAILED) {
        f->map = NULL;
        return cf_fail(err, CINFER_E_IO, "%s: cannot mmap: %s", path, strerror(errno));
    }
    f->path = strdup(path);
    return f->path ? CINFER_OK : cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory");
}

static cinfer_status push_tensor(cf_st_set *set, cf_st_tensor *t, cinfer_error *err) {
    if (set->n_tensors == set->cap_tensors) {
        size_t cap = set->cap_tensors ? set->cap_tensors * 2 : 64;
        cf_st_tensor *nt = realloc(set->tensors, cap * sizeof *nt);
        if (!nt) return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory");
        set->tensors = nt;
        set->cap_tensors = cap;
    }
    set->tensors[set->n_tensors++] = *t;
    return CINFER_OK;
}

/* Parses the header of the mapped file f and appends its tensors to set. */
static cinfer_status parse_file(cf_st_set *set, st_file *f, cinfer_error *err) {
    const unsigned char *p = f->map;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | p[i];
    if (hlen == 0 || hlen > f->size - 8)
        return cf_fail(err, CINFER_E_FORMAT, "%s: header length %llu does not fit the file (%zu bytes): truncated or not a safetensors file",
                       f->path, (unsigned long long)hlen, f->size);
    cJSON *root = cJSON_ParseWithLength((const char *)p + 8, (size_t)hlen);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return cf_fail(err, CINFER_E_FORMAT, "%s: the safetensors header is not a valid JSON object", f->path);
    }
    const unsigned char *data = p + 8 + hlen;
    size_t data_size = f->size - 8 - (size_t)hlen;
    cinfer_status st = CINFER_OK;
    for (cJSON *e = root->child; e && st == CINFER_OK; e = e->next) {
        if (!strcmp(e->string, "__metadata__")) continue;
        cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
        cJSON *shape = cJSON_GetObjectItemCaseSensitive(e, "shape");
        cJSON *offs = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
        if (!cJSON_IsString(dt) || !cJSON_IsArray(shape) || !cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2) {
            st = cf_fail(err, CINFER_E_FORMAT, "%s: tensor '%s': header entry lacks dtype, shape or data_offsets", f->path, e->string);
            break;
        }
        cf_st_tensor t = {0};
        size_t esz = raw_dtype_size(dt->valuestring);
        if (!esz || strlen(dt->valuestring) >= sizeof t.dtype_name) {
            st = cf_fail(err, CINFER_E_FORMAT, "%s: tensor '%s': unknown dtype '%s'", f->path, e->string, dt->valuestring);
            break;
        }
        t.n_dims = cJSON_GetArraySize(shape);
        if (t.n_dims > CF_MAX_DIMS) {
            st = cf_fail(err, CINFER_E_UNSUPPORTED, "%s: tensor '%s' has %d dimensions (at most %d supported)", f->path, e->string, t.n_dims, CF_MAX_DIMS);
            break;
        }
        uint64_t count = 1;
        int bad = 0;
        for (int i = 0; i < t.n_dims; i++) {
            cJSON *d = cJSON_GetArrayItem(shape, i);
            if (!cJSON_IsNumber(d) || d->valuedouble < 0 || d->valuedouble > 1e12) { bad = 1; break; }
            t.shape[i] = (int64_t)d->valuedouble;
            count *= (uint64_t)t.shape[i];
        }
        double o0 = cJSON_GetArrayItem(offs, 0)->valuedouble, o1 = cJSON_GetArrayItem(offs, 1)->valuedouble;
        if (bad || !cJSON_IsNumber(cJSON_GetArrayItem(offs, 0)) || !cJSON_IsNumber(cJSON_GetArrayItem(offs, 1)) || o0 < 0 || o1 < o0) {
            st = cf_fail(err, CINFER_E_FORMAT, "%s: tensor '%s': malformed shape or data_offsets", f->path, e->string);
            break;
        }
        if ((uint64_t)o1 > data_size) {
            st = cf_fail(err, CINFER_E_FORMAT, "%s: tensor '%s': data ends at byte %.0f but the file holds %zu data bytes (truncated file?)",
                         f->path, e->string, o1, data_size);
            break;
        }
        if ((uint64_t)(o1 - o0) != count * esz) {
            st = cf_fail(err, CINFER_E_FORMAT, "%s: tensor '%s': %.0f data bytes for %llu elements of %s",
                         f->path, e->string, o1 - o0, (unsigned long long)count, dt->valuestring);
            break;
        }
        strcpy(t.dtype_name, dt->valuestring);
        t.dtype = dtype_from_name(dt->valuestring);
        t.data = data + (size_t)o0;
        t.nbytes = (size_t)(o1 - o0);
        t.file = f->path;
        t.name = strdup(e->string);
        if (!t.name) { st = cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory"); break; }
        st = push_tensor(set, &t, err);
        if (st != CINFER_OK) free(t.name);
    }
    cJSON_Delete(root);
    return st;
}

static cinfer_status add_file(cf_st_set *set, const char *path, cinfer_error *err) {
    st_file *nf = realloc(set->files, (set->n_files + 1) * sizeof *nf);
    if (!nf) return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory");
    set->files = nf;
    st_file *f = &set->files[set->n_files];
    memset(f, 0, sizeof *f);
    cinfer_status st = map_file(path, f, err);
    if (st != CINFER_OK) {
        if (f->map) munmap(f->map, f->size);
        return st;
    }
    set->n_files++;
    return parse_file(set, f, err);
}

static cinfer_status finish(cf_st_set *set, cinfer_error *err) {
    qsort(set->tensors, set->n_tensors, sizeof *set->tensors, cmp_tensor);
    for (size_t i = 1; i < set->n_tensors; i++)
        if (!strcmp(set->tensors[i].name, set->tensors[i - 1].name))
            return cf_fail(err, CINFER_E_FORMAT, "tensor '%s' appears twice (%s and %s)", set->tensors[i].name,
                           set->tensors[i - 1].file, set->tensors[i].file);
    return CINFER_OK;
}

cinfer_status cf_st_open_file(const char *path, cf_st_set **out, cinfer_error *err) {
    *out = NULL;
    cf_st_set *set = calloc(1, sizeof *set);
    if (!set) return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory");
    cinfer_status st = add_file(set, path, err);
    if (st == CINFER_OK) st = finish(set, err);
    if (st != CINFER_OK) { cf_st_close(set); return st; }
    *out = set;
    return CINFER_OK;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Reads model.safetensors.index.json: the distinct shard names of its weight_map, sorted. */
static cinfer_status open_sharded(cf_st_set *set, const char *dir, const char *index_path, cinfer_error *err) {
    char *text = cf_read_file(index_path, NULL);
    if (!text) return cf_fail(err, CINFER_E_IO, "%s: cannot read", index_path);
    cJSON *root = cJSON_Parse(text);
    free(text);
    cJSON *map = root ? cJSON_GetObjectItemCaseSensitive(root, "weight_map") : NULL;
    if (!cJSON_IsObject(map)) {
        cJSON_Delete(root);
        return cf_fail(err, CINFER_E_FORMAT, "%s: not valid JSON with a \"weight_map\" object", index_path);
    }
    int n = cJSON_GetArraySize(map);
    char **names = calloc((size_t)n + 1, sizeof *names);
    int n_names = 0;
    cinfer_status st = names ? CINFER_OK : cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory");
    for (cJSON *e = map->child; e && st == CINFER_OK; e = e->next) {
        if (!cJSON_IsString(e) || strchr(e->valuestring, '/') || !strcmp(e->valuestring, "..")) {
            st = cf_fail(err, CINFER_E_FORMAT, "%s: weight_map entry '%s' does not name a shard file in the folder", index_path, e->string);
            break;
        }
        names[n_names++] = e->valuestring;
    }
    if (st == CINFER_OK) {
        qsort(names, (size_t)n_names, sizeof *names, cmp_str);
        for (int i = 0; i < n_names && st == CINFER_OK; i++) {
            if (i > 0 && !strcmp(names[i], names[i - 1])) continue;
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", dir, names[i]);
            st = add_file(set, path, err);
        }
    }
    if (st == CINFER_OK) {
        qsort(set->tensors, set->n_tensors, sizeof *set->tensors, cmp_tensor);
        for (cJSON *e = map->child; e && st == CINFER_OK; e = e->next) {
            cf_st_tensor key = {.name = e->string};
            if (!bsearch(&key, set->tensors, set->n_tensors, sizeof key, cmp_tensor))
                st = cf_fail(err, CINFER_E_FORMAT, "%s: tensor '%s' is listed in the index but missing from shard %s",
                             index_path, e->string, e->valuestring);
        }
    }
    free(names);
    cJSON_Delete(root);
    return st;
}

cinfer_status cf_st_open_dir(const char *dir, cf_st_set **out, cinfer_error *err) {
    *out = NULL;
    char path[4096];
    struct stat sb;
    cf_st_set *set = calloc(1, sizeof *set);
    if (!set) return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory");
    cinfer_status st;
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (stat(path, &sb) == 0) {
        st = add_file(set, path, err);
    } else {
        snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
        if (stat(path, &sb) == 0)
            st = open_sharded(set, dir, path, err);
        else
            st = cf_fail(err, CINFER_E_IO, "%s: no model.safetensors or model.safetensors.index.json in the folder", dir);
    }
    if (st == CINFER_OK) st = finish(set, err);
    if (st != CINFER_OK) { cf_st_close(set); return st; }
    *out = set;
    return CINFER_OK;
}

const cf_st_tensor *cf_st_find(const cf_st_set *set, const char *name) {
    cf_st_tensor key = {.name = (char *)name};
    return bsearch(&key, set->tensors, set->n_tensors, sizeof key, cmp_tensor);
}

size_t cf_st_count(const cf_st_set *set) { return set->n_tensors; }
const cf_st_tensor *cf_st_at(const cf_st_set *set, size_t i) { return i < set->n_tensors ? &set->tensors[i] : NULL; }

cinfer_status cf_st_write(const char *path, const cf_st_write_entry *entries, size_t n, cinfer_error *err) {
    cJSON *root = cJSON_CreateObject();
    size_t off = 0;
    for (size_t i = 0; i < n; i++) {
        const cf_st_write_entry *e = &entries[i];
        size_t count = 1;
        cJSON *t = cJSON_AddObjectToObject(root, e->name);
        cJSON_AddStringToObject(t, "dtype", cf_dtype_name(e->dtype));
        cJSON *shape = cJSON_AddArrayToObject(t, "shape");
        for (int d = 0; d < e->n_dims; d++) {
            cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)e->shape[d]));
            count *= (size_t)e->shape[d];
        }
        size_t nb = count * cf_dtype_size(e->dtype);
        cJSON *o = cJSON_AddArrayToObject(t, "data_offsets");
        cJSON_AddItemToArray(o, cJSON_CreateNumber((double)off));
        cJSON_AddItemToArray(o, cJSON_CreateNumber((double)(off + nb)));
        off += nb;
    }
    char *hdr = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!hdr) return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory");
    size_t hlen = strlen(hdr), padded = (hlen + 7) & ~(size_t)7;
    FILE *fp = fopen(path, "wb");
    if (!fp) { free(hdr); return cf_fail(err, CINFER_E_IO, "%s: cannot create: %s", path, strerror(errno)); }
    unsigned char lenb[8];
    for (int i = 0; i < 8; i++) lenb[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    int ok = fwrite(lenb, 1, 8, fp) == 8 && fwrite(hdr, 1, hlen, fp) == hlen;
    for (size_t i = hlen; i < padded && ok; i++) ok = fputc(' ', fp) != EOF;
    for (size_t i = 0; i < n && ok; i++) {
        size_t count = 1;
        for (int d = 0; d < entries[i].n_dims; d++) count *= (size_t)entries[i].shape[d];
        size_t nb = count * cf_dtype_size(entries[i].dtype);
        ok = fwrite(entries[i].data, 1, nb, fp) == nb;
    }
    free(hdr);
    if (fclose(fp) != 0 || !ok) return cf_fail(err, CINFER_E_IO, "%s: write failed", path);
    return CINFER_OK;
}
