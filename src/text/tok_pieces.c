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

int tk_ids_grow(tk_ids *a, size_t extra) {
    if (a->oom) return -1;
    if (grow((void **)&a->v, &a->cap, a->n + extra, sizeof *a->v)) {
        a->oom = 1;
        return -1;
    }
    return 0;
}

void tk_ids_free(tk_ids *a) {
    free(a->v);
    memset(a, 0, sizeof *a);
}

void tk_pieces_add(tk_pieces *p, const char *s, size_t n, int32_t id, int at_start) {
    if ((n == 0 && id < 0) || p->oom) return;
    if (grow((void **)&p->v, &p->cap, p->n + 1, sizeof *p->v)) {
        p->oom = 1;
        return;
    }
    p->v[p->n++] = (tk_piece){s, n, id, (uint8_t)(at_start != 0)};
}

void tk_pieces_free(tk_pieces *p) {
    free(p->v);
    memset(p, 0, sizeof *p);
}

static void strs_grow(tk_strs *s, size_t need) {
    if (need <= s->cap) return;
    size_t c = s->cap ? s->cap * 2 : 16;
    while (c < need) c *= 2;
    size_t *o = realloc(s->off, c * sizeof *o);
    if (o) s->off = o;
    size_t *l = o ? realloc(s->len, c * sizeof *l) : NULL;
    if (l) s->len = l;
    if (!o || !l) s->oom = 1;
    else s->cap = c;
}

void tk_strs_reserve(tk_strs *s, size_t count, size_t bytes) {
    if (s->oom) return;
    strs_grow(s, s->n + count);
    if (tk_buf_reserve(&s->text, bytes)) s->oom = 1;
}

void tk_strs_add(tk_strs *s, const char *p, size_t n) {
    if (s->oom) return;
    if (s->n + 1 > s->cap) {
        strs_grow(s, s->n + 1);
        if (s->oom) return;
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

void tk_splitter_init(tk_splitter *sp, int behavior, tk_emit_fn emit, void *ctx) {
    memset(sp, 0, sizeof *sp);
    sp->behavior = behavior;
    sp->emit = emit;
    sp->ctx = ctx;
}

/* Empty parts are dropped after merging, as HF drops empty splits. */
static int emit_span(tk_splitter *sp, size_t s, size_t e) { return e > s ? sp->emit(sp->ctx, s, e) : 0; }

static int flush(tk_splitter *sp) {
    if (!sp->has_pending) return 0;
    sp->has_pending = 0;
    return emit_span(sp, sp->pending.s, sp->pending.e);
}

static int hold(tk_splitter *sp, size_t s, size_t e, int is_match) {
    int rc = flush(sp);
    sp->pending = (tk_span){s, e};
    sp->pending_match = is_match;
    sp->has_pending = 1;
    return rc;
}

int tk_splitter_feed(tk_splitter *sp, size_t s, size_t e, int is_match) {
    int rc = 0;
    switch (sp->behavior) {
    case TK_ISOLATED:
        return emit_span(sp, s, e);
    case TK_REMOVED:
        return is_match ? 0 : emit_span(sp, s, e);
    case TK_CONTIGUOUS:
        if (is_match == sp->prev && sp->has_pending) sp->pending.e = e;
        else rc = hold(sp, s, e, is_match);
        break;
    case TK_MERGED_PREV:
        if (is_match && !sp->prev && sp->has_pending) sp->pending.e = e;
        else rc = hold(sp, s, e, is_match);
        break;
    case TK_MERGED_NEXT: /* a match joins the part after it when that part is not a match */
        if (sp->has_pending && !is_match) {
            sp->has_pending = 0;
            rc = emit_span(sp, sp->pending.s, e);
        } else if (is_match) {
            rc = hold(sp, s, e, 1);
        } else {
            rc = emit_span(sp, s, e);
        }
        break;
    }
    sp->prev = is_match;
    return rc;
}

int tk_splitter_finish(tk_splitter *sp) { return flush(sp); }

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
