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

/* HF's limit on the JSON header (safetensors MAX_HEADER_SIZE). */
#define ST_MAX_HEADER 100000000u
/* The largest integer a double holds exactly together with its neighbours: shape dims and offsets above it
 * cannot have been read exactly. */
#define ST_MAX_EXACT 9007199254740991.0

typedef struct st_file {
    char *path;
    void *map;
    size_t size;
    int borrowed; /* map is the caller's memory (cf_st_open_memory), not an mmap */
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
    if (!strcmp(s, "U32")) return CF_U32;
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

static int cmp_tensor_data(const void *a, const void *b) {
    const char *x = ((const cf_st_tensor *)a)->data, *y = ((const cf_st_tensor *)b)->data;
    return x < y ? -1 : x > y;
}

void cf_st_close(cf_st_set *set) {
    if (!set) return;
    for (size_t i = 0; i < set->n_files; i++) {
        if (set->files[i].map && !set->files[i].borrowed) munmap(set->files[i].map, set->files[i].size);
        free(set->files[i].path);
    }
    for (size_t i = 0; i < set->n_tensors; i++) free(set->tensors[i].name);
    free(set->files);
    free(set->tensors);
    free(set);
}

static cinfer_status map_file(const char *path, st_file *f, cinfer_error *err) {
    /* O_NONBLOCK: a FIFO must fail below instead of waiting here for a writer. */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return cf_fail(err, CINFER_E_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        close(fd);
        return cf_fail(err, CINFER_E_IO, "%s: cannot stat: %s", path, strerror(errno));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return cf_fail(err, CINFER_E_IO, "%s: is %s, not a regular file", path, cf_file_kind(sb.st_mode));
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

/* v as an exact integer in [0, max], checked before any conversion (a double at or above 2^64 converts
 * to nonsense). */
static int exact_uint(const cJSON *v, uint64_t max, uint64_t *out) {
    if (!cJSON_IsNumber(v)) return 0;
    double d = v->valuedouble;
    if (!(d >= 0 && d <= ST_MAX_EXACT) || (double)(uint64_t)d != d || (uint64_t)d > max) return 0;
    *out = (uint64_t)d;
    return 1;
}

/* __metadata__: null or an object of strings, as HF's Option<HashMap<String, String>>. */
static int valid_metadata(const cJSON *m) {
    if (cJSON_IsNull(m)) return 1;
    if (!cJSON_IsObject(m)) return 0;
    for (const cJSON *e = m->child; e; e = e->next)
        if (!cJSON_IsString(e)) return 0;
    return 1;
}

/* One header entry: dtype, shape and data_offsets, all checked against the data section. */
static cinfer_status parse_entry(const cJSON *e, const st_file *f, const unsigned char *data, size_t data_size,
                                 cf_st_tensor *t, cinfer_error *err) {
    const char *name = e->string;
    if (!cJSON_IsObject(e))
        return cf_fail(err, CINFER_E_FORMAT, "%s: header entry '%s' is not an object", f->path, name);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *offs = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsString(dt) || !cJSON_IsArray(shape) || !cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2)
        return cf_fail(err, CINFER_E_FORMAT, "%s: tensor '%s': header entry lacks dtype, shape or data_offsets (a pair)", f->path, name);
    size_t esz = raw_dtype_size(dt->valuestring);
    if (!esz)
        return cf_fail(err, CINFER_E_FORMAT, "%s: tensor '%s': unknown dtype '%s'", f->path, name, dt->valuestring);
    int n_dims = cJSON_GetArraySize(shape);
    if (n_dims > CF_MAX_DIMS)
        return cf_fail(err, CINFER_E_UNSUPPORTED, "%s: tensor '%s' has %d dimensions (at most %d supported)", f->path, name, n_dims, CF_MAX_DIMS);
    uint64_t count = 1;
    for (int i = 0; i < n_dims; i++) {
        uint64_t d;
        if (!exact_uint(cJSON_GetArrayItem(shape, i), (uint64_t)ST_MAX_EXACT, &d))
            return cf_fail(err, CINFER_E_FORMAT, "%s: tensor '%s': shape[%d] is not a non-negative integer below 2^53", f->path, name, i);
        if (d && count > UINT64_MAX / d)
            return cf_fail(err, CINFER_E_FORMAT, "%s: tensor '%s': the element count of its shape overflows 64 bits", f->path, name);
        t->shape[i] = (int64_t)d;
        count *= d;
    }
    uint64_t begin, end;
    if (!exact_uint(cJSON_GetArrayItem(offs, 0), UINT64_MAX, &begin) || !exact_uint(cJSON_GetArrayItem(offs, 1), UINT64_MAX, &end))
        return cf_fail(err, CINFER_E_FORMAT, "%s: tensor '%s': data_offsets are not non-negative integers below 2^53", f->path, name);
    if (begin > end)
        return cf_fail(err, CINFER_E_FORMAT, "%s: tensor '%s': data_offsets [%llu, %llu] end before they begin", f->path, name,
                       (unsigned long long)begin, (unsigned long long)end);
    if (end > data_size)
        return cf_fail(err, CINFER_E_FORMAT, "%s: tensor '%s': data ends at byte %llu but the file holds %zu data bytes (truncated file?)",
                       f->path, name, (unsigned long long)end, data_size);
    if (count > UINT64_MAX / esz || end - begin != count * esz)
        return cf_fail(err, CINFER_E_FORMAT, "%s: tensor '%s': %llu data bytes for %llu elements of %s", f->path, name,
                       (unsigned long long)(end - begin), (unsigned long long)count, dt->valuestring);
    if ((uintptr_t)(data + begin) % esz)
        return cf_fail(err, CINFER_E_FORMAT, "%s: tensor '%s': data at byte %llu of the file is not aligned to its %zu-byte elements",
                       f->path, name, (unsigned long long)((size_t)(data - (const unsigned char *)f->map) + begin), esz);
    snprintf(t->dtype_name, sizeof t->dtype_name, "%s", dt->valuestring);
    t->dtype = dtype_from_name(dt->valuestring);
    t->n_dims = n_dims;
    t->data = data + begin;
    t->nbytes = (size_t)(end - begin);
    t->file = f->path;
    t->name = strdup(name);
    return t->name ? CINFER_OK : cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory");
}

/* The tensors of one file, from first on in set, must not share a byte. */
static cinfer_status check_overlap(cf_st_set *set, size_t first, const st_file *f, cinfer_error *err) {
    size_t n = set->n_tensors - first;
    if (n < 2) return CINFER_OK;
    cf_st_tensor *t = set->tensors + first;
    qsort(t, n, sizeof *t, cmp_tensor_data);
    const cf_st_tensor *prev = NULL;
    for (size_t i = 0; i < n; i++) {
        if (!t[i].nbytes) continue;
        if (prev && (const char *)t[i].data < (const char *)prev->data + prev->nbytes)
            return cf_fail(err, CINFER_E_FORMAT, "%s: tensors '%s' and '%s' share data bytes (overlapping data_offsets)", f->path,
                           prev->name, t[i].name);
        prev = &t[i];
    }
    return CINFER_OK;
}

/* Parses the header of the mapped file f and appends its tensors to set. */
static cinfer_status parse_file(cf_st_set *set, st_file *f, cinfer_error *err) {
    const unsigned char *p = f->map;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | p[i];
    if (hlen < 2 || hlen > f->size - 8)
        return cf_fail(err, CINFER_E_FORMAT, "%s: header length %llu does not fit the file (%zu bytes): truncated or not a safetensors file",
                       f->path, (unsigned long long)hlen, f->size);
    if (hlen > ST_MAX_HEADER)
        return cf_fail(err, CINFER_E_FORMAT, "%s: header length %llu is above the safetensors limit of %u bytes", f->path,
                       (unsigned long long)hlen, ST_MAX_HEADER);
    const char *text = (const char *)p + 8, *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, (size_t)hlen, &end, 0);
    size_t used = root && end ? (size_t)(end - text) : 0;
    while (root && used < hlen && text[used] && strchr(" \t\r\n", text[used])) used++;
    if (!cJSON_IsObject(root) || used != hlen) {
        cJSON_Delete(root);
        return cf_fail(err, CINFER_E_FORMAT, "%s: the safetensors header is not one valid JSON object", f->path);
    }
    const unsigned char *data = p + 8 + hlen;
    size_t data_size = f->size - 8 - (size_t)hlen, first = set->n_tensors;
    int n_meta = 0;
    cinfer_status st = CINFER_OK;
    for (cJSON *e = root->child; e && st == CINFER_OK; e = e->next) {
        if (!strcmp(e->string, "__metadata__")) {
            if (n_meta++ || !valid_metadata(e))
                st = cf_fail(err, CINFER_E_FORMAT, "%s: __metadata__ must appear once, as an object of strings", f->path);
            continue;
        }
        cf_st_tensor t = {0};
        st = parse_entry(e, f, data, data_size, &t, err);
        if (st == CINFER_OK) st = push_tensor(set, &t, err);
        if (st != CINFER_OK) free(t.name);
    }
    cJSON_Delete(root);
    return st == CINFER_OK ? check_overlap(set, first, f, err) : st;
}

static st_file *new_file(cf_st_set *set, cinfer_error *err) {
    st_file *nf = realloc(set->files, (set->n_files + 1) * sizeof *nf);
    if (!nf) {
        cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory");
        return NULL;
    }
    set->files = nf;
    memset(&nf[set->n_files], 0, sizeof *nf);
    return &nf[set->n_files];
}

static cinfer_status add_file(cf_st_set *set, const char *path, cinfer_error *err) {
    st_file *f = new_file(set, err);
    if (!f) return CINFER_E_OUT_OF_MEMORY;
    cinfer_status st = map_file(path, f, err);
    if (st != CINFER_OK) {
        if (f->map) munmap(f->map, f->size);
        return st;
    }
    set->n_files++;
    return parse_file(set, f, err);
}

static cinfer_status finish(cf_st_set *set, cinfer_error *err) {
    if (set->n_tensors > 1) qsort(set->tensors, set->n_tensors, sizeof *set->tensors, cmp_tensor);
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

cinfer_status cf_st_open_memory(const void *bytes, size_t size, const char *name, cf_st_set **out, cinfer_error *err) {
    *out = NULL;
    if (size < 8)
        return cf_fail(err, CINFER_E_FORMAT, "%s: truncated safetensors file (%zu bytes, header length missing)", name, size);
    cf_st_set *set = calloc(1, sizeof *set);
    if (!set) return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory");
    st_file *f = new_file(set, err);
    cinfer_status st = f ? CINFER_OK : CINFER_E_OUT_OF_MEMORY;
    if (f) {
        *f = (st_file){.path = strdup(name), .map = (void *)bytes, .size = size, .borrowed = 1};
        set->n_files++;
        st = f->path ? parse_file(set, f, err) : cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory");
    }
    if (st == CINFER_OK) st = finish(set, err);
    if (st != CINFER_OK) { cf_st_close(set); return st; }
    *out = set;
    return CINFER_OK;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Reads model.safetensors.index.json: the distinct shard names of its weight_map, sorted. */
static cinfer_status open_sharded(cf_st_set *set, const char *dir, const char *index_path, cinfer_error *err) {
    char *text;
    CF_TRY(cf_file_read(index_path, CF_FILE_MAX_CONFIG, 0, &text, NULL, err));
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
        const char *v = cJSON_IsString(e) ? e->valuestring : NULL;
        if (!v || !*v || strchr(v, '/') || !strcmp(v, ".") || !strcmp(v, "..")) {
            st = cf_fail(err, CINFER_E_FORMAT, "%s: weight_map entry '%s' does not name a shard file in the folder", index_path, e->string);
            break;
        }
        names[n_names++] = e->valuestring;
    }
    if (st == CINFER_OK) {
        if (n_names > 1) qsort(names, (size_t)n_names, sizeof *names, cmp_str);
        for (int i = 0; i < n_names && st == CINFER_OK; i++) {
            if (i > 0 && !strcmp(names[i], names[i - 1])) continue;
            char path[4096];
            if (snprintf(path, sizeof path, "%s/%s", dir, names[i]) >= (int)sizeof path)
                st = cf_fail(err, CINFER_E_INVALID_ARGUMENT, "%s: the path of shard %s is too long", index_path, names[i]);
            else if ((st = add_file(set, path, err)) != CINFER_OK)
                cf_wrap(err, st, "%s names shard %s", index_path, names[i]);
        }
    }
    if (st == CINFER_OK) {
        if (set->n_tensors > 1) qsort(set->tensors, set->n_tensors, sizeof *set->tensors, cmp_tensor);
        for (cJSON *e = map->child; e && st == CINFER_OK; e = e->next) {
            cf_st_tensor key = {.name = e->string};
            if (!set->n_tensors || !bsearch(&key, set->tensors, set->n_tensors, sizeof key, cmp_tensor))
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
    if (snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir) >= (int)sizeof path) {
        free(set);
        return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "model folder path is too long");
    }
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
    if (!set->n_tensors) return NULL;
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
