/* tok_pieces.c: the growable lists the tokenizer pipeline passes along (ids, pieces, strings), HF's
 * split-by-behavior rule shared by pre-tokenizers, and small cJSON accessors. */
#include <stdlib.h>
#include <string.h>

#include "text/tok_impl.h"

static int grow(void **v, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : 16;
    while (c < need) c *= 2;
    void *p = realloc(*v, c * elem);
    if (!p) return -1;
    *v = p;
    *cap = c;
    return 0;
}

void tk_ids_push(tk_ids *a, int32_t id) {
    if (a->oom) return;
    if (grow((void **)&a->v, &a->cap, a->n + 1, sizeof *a->v)) {
        a->oom = 1;
        return;
    }
    a->v[a->n++] = id;
}

void tk_ids_free(tk_ids *a) {
    free(a->v);
    memset(a, 0, sizeof *a);
}

void tk_pieces_add(tk_pieces *p, const char *s, size_t n, int32_t id, int at_start) {
    if (n == 0 && id < 0) return;
    if (p->oom) return;
    if (grow((void **)&p->v, &p->cap, p->n + 1, sizeof *p->v)) {
        p->oom = 1;
        return;
    }
    size_t off = p->text.n;
    tk_buf_put(&p->text, s, n);
    if (p->text.oom) {
        p->oom = 1;
        return;
    }
    p->v[p->n++] = (tk_piece){off, n, id, (uint8_t)(at_start != 0)};
}

void tk_pieces_commit(tk_pieces *p, size_t off, int at_start) {
    size_t n = p->text.n - off;
    if (n == 0 || p->oom) return;
    if (grow((void **)&p->v, &p->cap, p->n + 1, sizeof *p->v)) {
        p->oom = 1;
        return;
    }
    p->v[p->n++] = (tk_piece){off, n, -1, (uint8_t)(at_start != 0)};
}

void tk_pieces_reset(tk_pieces *p) {
    p->n = 0;
    p->text.n = 0;
}

void tk_pieces_free(tk_pieces *p) {
    free(p->v);
    tk_buf_free(&p->text);
    memset(p, 0, sizeof *p);
}

void tk_strs_add(tk_strs *s, const char *p, size_t n) {
    if (s->oom) return;
    if (s->n + 1 > s->cap) {
        size_t c = s->cap ? s->cap * 2 : 16;
        size_t *o = realloc(s->off, c * sizeof *o);
        if (o) s->off = o;
        size_t *l = o ? realloc(s->len, c * sizeof *l) : NULL;
        if (l) s->len = l;
        if (!o || !l) {
            s->oom = 1;
            return;
        }
        s->cap = c;
    }
    s->off[s->n] = s->text.n;
    tk_buf_put(&s->text, p, n);
    if (s->text.oom) {
        s->oom = 1;
        return;
    }
    s->len[s->n++] = n;
}

void tk_strs_reset(tk_strs *s) {
    s->n = 0;
    s->text.n = 0;
}

void tk_strs_free(tk_strs *s) {
    tk_buf_free(&s->text);
    free(s->off);
    free(s->len);
    memset(s, 0, sizeof *s);
}

int tk_behavior_parse(const char *name) {
    static const char *const names[] = {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext",
                                        "Contiguous"};
    for (int i = 0; name && i < 5; i++)
        if (strcmp(name, names[i]) == 0) return i;
    return -1;
}

void tk_split_apply(const char *s, size_t n, const tk_span *m, const uint8_t *is_match, size_t nm, int behavior,
                    int at_start, tk_pieces *out) {
    (void)n;
    /* Kept spans are built in place over a small stack buffer, falling back to the heap. */
    tk_span stackbuf[64], *keep = stackbuf;
    uint8_t removebuf[64], *remove = removebuf;
    if (nm > 64) {
        keep = malloc(nm * sizeof *keep);
        remove = malloc(nm);
        if (!keep || !remove) {
            free(keep);
            free(remove);
            out->oom = 1;
            return;
        }
    }
    size_t k = 0;
    int prev = 0;
    switch (behavior) {
    case TK_ISOLATED:
    case TK_REMOVED:
        for (size_t i = 0; i < nm; i++) {
            keep[k] = m[i];
            remove[k++] = behavior == TK_REMOVED && is_match[i];
        }
        break;
    case TK_CONTIGUOUS:
        for (size_t i = 0; i < nm; i++) {
            if (is_match[i] == prev && k > 0) keep[k - 1].e = m[i].e;
            else { keep[k] = m[i]; remove[k++] = 0; }
            prev = is_match[i];
        }
        break;
    case TK_MERGED_PREV:
        for (size_t i = 0; i < nm; i++) {
            if (is_match[i] && !prev && k > 0) keep[k - 1].e = m[i].e;
            else { keep[k] = m[i]; remove[k++] = 0; }
            prev = is_match[i];
        }
        break;
    case TK_MERGED_NEXT:
        for (size_t i = nm; i-- > 0;) {
            if (is_match[i] && !prev && k > 0) keep[k - 1].s = m[i].s;
            else { keep[k] = m[i]; remove[k++] = 0; }
            prev = is_match[i];
        }
        for (size_t i = 0; i < k / 2; i++) {
            tk_span t = keep[i];
            keep[i] = keep[k - 1 - i];
            keep[k - 1 - i] = t;
        }
        break;
    }
    for (size_t i = 0; i < k; i++)
        if (!remove[i]) tk_pieces_add(out, s + keep[i].s, keep[i].e - keep[i].s, -1, at_start && keep[i].s == 0);
    if (keep != stackbuf) {
        free(keep);
        free(remove);
    }
}

const char *tk_json_str(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

int tk_json_bool(const cJSON *o, const char *key, int dflt) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (cJSON_IsBool(v)) return cJSON_IsTrue(v);
    return dflt;
}

const char *tk_json_type(const cJSON *o) { return tk_json_str(o, "type"); }
