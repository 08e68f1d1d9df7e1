/* tok_post.c: tokenizer.json post-processors for a single sequence: TemplateProcessing,
 * RobertaProcessing, BertProcessing, ByteLevel (which changes only offsets, so no ids) and Sequence.
 * With add_special off they leave the ids as they are, as HF does. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "text/tok_impl.h"

enum { PP_TEMPLATE, PP_ROBERTA, PP_BERT, PP_BYTELEVEL, PP_SEQ };

/* One template item: the sequence (ids == NULL) or a special token's ids. */
typedef struct titem {
    int32_t *ids;
    size_t n;
    int is_seq;
} titem;

struct tk_post {
    int kind;
    titem *items;
    size_t nitems;
    tk_post **kids;
    size_t nkids;
};

void tk_post_free(tk_post *p) {
    if (!p) return;
    for (size_t i = 0; i < p->nitems; i++) free(p->items[i].ids);
    free(p->items);
    for (size_t i = 0; i < p->nkids; i++) tk_post_free(p->kids[i]);
    free(p->kids);
    free(p);
}

static cinfer_status add_ids(tk_post *p, const int32_t *ids, size_t n, int is_seq, cinfer_error *err) {
    titem *v = realloc(p->items, (p->nitems + 1) * sizeof *v);
    if (!v) return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory loading the post-processor");
    p->items = v;
    titem *t = &p->items[p->nitems++];
    memset(t, 0, sizeof *t);
    t->is_seq = is_seq;
    if (n) {
        t->ids = malloc(n * sizeof *t->ids);
        if (!t->ids) return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory loading the post-processor");
        memcpy(t->ids, ids, n * sizeof *ids);
        t->n = n;
    }
    return CINFER_OK;
}

/* A special token of TemplateProcessing, looked up in "special_tokens". */
static cinfer_status template_special(tk_post *p, const cJSON *specials, const char *name, cinfer_error *err) {
    const cJSON *sp = cJSON_GetObjectItemCaseSensitive(specials, name);
    const cJSON *ids = cJSON_GetObjectItemCaseSensitive(sp, "ids");
    if (!cJSON_IsArray(ids))
        return cf_fail(err, CINFER_E_FORMAT, "TemplateProcessing: special token \"%.60s\" is missing from special_tokens", name);
    size_t n = (size_t)cJSON_GetArraySize(ids), k = 0;
    int32_t *v = malloc((n ? n : 1) * sizeof *v);
    if (!v) return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory loading the post-processor");
    const cJSON *it;
    cJSON_ArrayForEach(it, ids) {
        if (!cJSON_IsNumber(it) || it->valuedouble < 0 || it->valuedouble > INT32_MAX) {
            free(v);
            return cf_fail(err, CINFER_E_FORMAT, "TemplateProcessing: bad id for special token \"%.60s\"", name);
        }
        v[k++] = (int32_t)it->valuedouble;
    }
    cinfer_status st = add_ids(p, v, k, 0, err);
    free(v);
    return st;
}

static cinfer_status parse_template(tk_post *p, const cJSON *j, cinfer_error *err) {
    const cJSON *single = cJSON_GetObjectItemCaseSensitive(j, "single");
    const cJSON *specials = cJSON_GetObjectItemCaseSensitive(j, "special_tokens");
    if (!cJSON_IsArray(single)) return cf_fail(err, CINFER_E_FORMAT, "TemplateProcessing without a \"single\" template");
    const cJSON *it;
    cinfer_status st = CINFER_OK;
    cJSON_ArrayForEach(it, single) {
        const cJSON *seq = cJSON_GetObjectItemCaseSensitive(it, "Sequence");
        const cJSON *sp = cJSON_GetObjectItemCaseSensitive(it, "SpecialToken");
        if (seq) {
            const char *id = tk_json_str(seq, "id");
            st = add_ids(p, NULL, 0, !id || strcmp(id, "A") == 0, err);
        } else if (sp && tk_json_str(sp, "id")) {
            st = template_special(p, specials, tk_json_str(sp, "id"), err);
        } else if (cJSON_IsString(it)) { /* the string form: "$A", "$B", "[CLS]", with an optional ":type_id" */
            char name[256];
            snprintf(name, sizeof name, "%s", it->valuestring);
            char *colon = strrchr(name, ':');
            if (colon && colon != name) *colon = 0;
            if (name[0] == '$') st = add_ids(p, NULL, 0, strcmp(name, "$B") != 0 && strcmp(name, "$1") != 0, err);
            else st = template_special(p, specials, name, err);
        } else {
            st = cf_fail(err, CINFER_E_FORMAT, "TemplateProcessing: unrecognised template item");
        }
        if (st) break;
    }
    return st;
}

static cinfer_status parse_pair(tk_post *p, const cJSON *j, const char *key, cinfer_error *err) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(j, key);
    const cJSON *id = cJSON_GetArrayItem(a, 1);
    if (!cJSON_IsArray(a) || !cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble > INT32_MAX)
        return cf_fail(err, CINFER_E_FORMAT, "post_processor: \"%s\" must be [token, id]", key);
    int32_t v = (int32_t)id->valuedouble;
    return add_ids(p, &v, 1, 0, err);
}

cinfer_status tk_post_parse(const cJSON *j, tk_post **out, cinfer_error *err) {
    *out = NULL;
    const char *type = tk_json_type(j);
    if (!type) return cf_fail(err, CINFER_E_FORMAT, "post_processor without a \"type\"");
    static const char *const names[] = {"TemplateProcessing", "RobertaProcessing", "BertProcessing", "ByteLevel",
                                        "Sequence"};
    int kind = -1;
    for (int i = 0; i < (int)(sizeof names / sizeof *names); i++)
        if (strcmp(type, names[i]) == 0) kind = i;
    if (kind < 0) return cf_fail(err, CINFER_E_UNSUPPORTED, "post_processor type %s is not supported", type);
    tk_post *p = calloc(1, sizeof *p);
    if (!p) return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory loading the tokenizer");
    p->kind = kind;
    cinfer_status st = CINFER_OK;
    if (kind == PP_TEMPLATE) {
        st = parse_template(p, j, err);
    } else if (kind == PP_ROBERTA || kind == PP_BERT) {
        st = parse_pair(p, j, "cls", err);
        if (!st) st = add_ids(p, NULL, 0, 1, err);
        if (!st) st = parse_pair(p, j, "sep", err);
    } else if (kind == PP_SEQ) {
        const cJSON *arr = cJSON_GetObjectItemCaseSensitive(j, "processors");
        size_t k = cJSON_IsArray(arr) ? (size_t)cJSON_GetArraySize(arr) : 0;
        if (!cJSON_IsArray(arr)) st = cf_fail(err, CINFER_E_FORMAT, "Sequence post_processor without \"processors\"");
        else if (k && !(p->kids = calloc(k, sizeof *p->kids)))
            st = cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory loading the tokenizer");
        const cJSON *it;
        if (!st) cJSON_ArrayForEach(it, arr) {
            if ((st = tk_post_parse(it, &p->kids[p->nkids], err))) break;
            p->nkids++;
        }
    }
    if (st) {
        tk_post_free(p);
        return st;
    }
    *out = p;
    return CINFER_OK;
}

int tk_post_is_identity(const tk_post *p, int add_special) {
    if (p->kind == PP_SEQ) {
        for (size_t k = 0; k < p->nkids; k++)
            if (!tk_post_is_identity(p->kids[k], add_special)) return 0;
        return 1;
    }
    return p->kind == PP_BYTELEVEL || !add_special;
}

void tk_post_apply(const tk_post *p, int add_special, const int32_t *ids, size_t n, tk_ids *out) {
    if (p->kind == PP_SEQ) {
        tk_ids cur = {0};
        tk_ids_append(&cur, ids, n);
        for (size_t k = 0; k < p->nkids; k++) {
            tk_ids next = {0};
            tk_post_apply(p->kids[k], add_special, cur.v, cur.n, &next);
            if (next.oom) cur.oom = 1;
            tk_ids_free(&cur);
            cur = next;
        }
        tk_ids_append(out, cur.v, cur.n);
        if (cur.oom) out->oom = 1;
        tk_ids_free(&cur);
        return;
    }
    if (p->kind == PP_BYTELEVEL || !add_special) {
        tk_ids_append(out, ids, n);
        return;
    }
    for (size_t k = 0; k < p->nitems; k++) {
        const titem *t = &p->items[k];
        if (t->is_seq) tk_ids_append(out, ids, n);
        else tk_ids_append(out, t->ids, t->n);
    }
}
