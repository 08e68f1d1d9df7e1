/* template_eval.c: compiling and rendering Jinja templates: the tree-walking evaluator (scopes as
 * jinja2 has them — a fresh scope per loop iteration, macro call and with block; namespaces for
 * state that crosses them), macros, loops with loop.*, and the bounds on output, steps and depth. */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "text/template_impl.h"

enum { EX_NORMAL, EX_BREAK, EX_CONTINUE };

static tv eval(tctx *c, tframe *f, const tnode *n);
static int exec(tctx *c, tframe *f, const tnode *n);

/* Every recursive step of the evaluator goes through enter/leave. A render error unwinds with longjmp,
 * so leave runs only on normal returns. */
static void enter(tctx *c) {
    if (++c->nest > TE_MAX_NEST)
        tv_throw(c, "expression or statement nested too deeply (more than %d levels)", TE_MAX_NEST);
}

static void leave(tctx *c) { c->nest--; }

void te_step(tctx *c) {
    if (++c->steps > c->opt->max_steps)
        tv_throw(c, "template took more than %llu steps", (unsigned long long)c->opt->max_steps);
}

void te_write(tctx *c, const char *s, size_t n) {
    if (c->out->n + n > c->opt->max_output)
        tv_throw(c, "template output exceeds %zu bytes", c->opt->max_output);
    tb_put(c, c->out, s, n);
}

static tframe *new_frame(tctx *c, tframe *parent) {
    tframe *f = hp_alloc(c, sizeof *f);
    f->parent = parent;
    f->vars = tv_new_dict(c).u.d;
    return f;
}

static void frame_set(tctx *c, tframe *f, const char *name, tv v) {
    td_set(c, f->vars, tv_cstr(c, name), v);
}

static tv lookup(tctx *c, tframe *f, const char *name, size_t len) {
    tv v;
    for (; f; f = f->parent)
        if (td_get_str(c, f->vars, name, len, &v)) return v;
    if (td_get_str(c, c->globals, name, len, &v)) return v;
    int found = 0;
    v = tb_global(c, name, len, &found);
    return found ? v : tv_undef(name);
}

static void unpack(tctx *c, tframe *f, const tnode *target, tv v) {
    if (target->op != 1) {
        frame_set(c, f, target->names[0], v);
        return;
    }
    tv_list *l = tv_iterate(c, v);
    if ((int)l->n != target->nn)
        tv_throw(c, "%s values to unpack (expected %d, got %zu)", (int)l->n > target->nn ? "too many" : "not enough",
                 target->nn, l->n);
    for (int i = 0; i < target->nn; i++) frame_set(c, f, target->names[i], l->v[i]);
}

static void eval_args(tctx *c, tframe *f, const tnode *n, tv **argv) {
    *argv = n->n ? hp_alloc(c, (size_t)n->n * sizeof(tv)) : NULL;
    for (int i = 0; i < n->n; i++) (*argv)[i] = eval(c, f, n->items[i]);
}

/* A chain of filter nodes whose innermost operand is NULL applied to base ({% set x | f %}, {% filter %}). */
static tv apply_chain(tctx *c, tframe *f, const tnode *n, tv base) {
    if (!n) return base;
    enter(c);
    tv v = apply_chain(c, f, n->a, base);
    tv *argv;
    c->line = n->line;
    eval_args(c, f, n, &argv);
    v = tb_apply_filter(c, n->op, v, n->n, argv, n->names);
    leave(c);
    return v;
}

/* Runs body with output captured; returns the captured text. */
static tv capture(tctx *c, tframe *f, const tnode *body) {
    tbuf buf = {0};
    tbuf *saved = c->out;
    c->out = &buf;
    exec(c, f, body);
    c->out = saved;
    return tv_strn(c, buf.p ? buf.p : "", buf.n);
}

static int contains(tctx *c, tv container, tv item) {
    if (container.k == TV_STR) {
        if (item.k != TV_STR) tv_throw(c, "'in <string>' requires string as left operand, not %s", tv_type_name(item));
        if (item.u.s->len == 0) return 1;
        const char *h = container.u.s->s;
        size_t hn = container.u.s->len, nn = item.u.s->len;
        for (size_t i = 0; i + nn <= hn; i++)
            if (memcmp(h + i, item.u.s->s, nn) == 0) return 1;
        return 0;
    }
    if (container.k == TV_DICT) {
        tv dummy;
        return td_get(c, container.u.d, item, &dummy);
    }
    if (container.k == TV_LIST || container.k == TV_UNDEF) {
        tv_list *l = tv_iterate(c, container);
        for (size_t i = 0; i < l->n; i++)
            if (tv_equal(c, l->v[i], item)) return 1;
        return 0;
    }
    tv_throw(c, "argument of type '%s' is not iterable", tv_type_name(container));
}

static int compare(tctx *c, int op, tv a, tv b) {
    switch (op) {
    case OP_EQ: return tv_equal(c, a, b);
    case OP_NE: return !tv_equal(c, a, b);
    case OP_LT: return tv_compare(c, a, b) < 0;
    case OP_LE: return tv_equal(c, a, b) || tv_compare(c, a, b) < 0;
    case OP_GT: return tv_compare(c, a, b) > 0;
    case OP_GE: return tv_equal(c, a, b) || tv_compare(c, a, b) > 0;
    case OP_IN: return contains(c, b, a);
    default: return !contains(c, b, a);
    }
}

static tv call_value(tctx *c, tv callee, int argc, const tv *argv, const char **kwn) {
    if (callee.k == TV_FUNC) {
        if (callee.u.fn->kind == TF_MACRO) return te_call_macro(c, callee.u.fn, argc, argv, kwn);
        return tb_call_builtin(c, callee.u.fn, argc, argv, kwn);
    }
    if (callee.k == TV_UNDEF) tv_throw(c, "'%s' is undefined", callee.u.undef_name ? callee.u.undef_name : "value");
    tv_throw(c, "'%s' object is not callable", tv_type_name(callee));
}

static tv eval_node(tctx *c, tframe *f, const tnode *n);

static tv eval(tctx *c, tframe *f, const tnode *n) {
    enter(c);
    tv v = eval_node(c, f, n);
    leave(c);
    return v;
}

static tv eval_node(tctx *c, tframe *f, const tnode *n) {
    te_step(c);
    c->line = n->line;
    switch (n->kind) {
    case N_STR: return tv_strn(c, n->s, n->slen);
    case N_INT: return tv_int(n->i);
    case N_FLOAT: return tv_float(n->f);
    case N_CONST: return n->op == CONST_NONE ? tv_none() : tv_bool(n->op == CONST_TRUE);
    case N_NAME: return lookup(c, f, n->s, n->slen);
    case N_LIST: case N_TUPLE: {
        tv l = tv_new_list(c, n->kind == N_TUPLE ? TL_TUPLE : 0);
        for (int i = 0; i < n->n; i++) tl_push(c, l.u.l, eval(c, f, n->items[i]));
        return l;
    }
    case N_DICT: {
        tv d = tv_new_dict(c);
        for (int i = 0; i + 1 < n->n; i += 2) {
            tv k = eval(c, f, n->items[i]);
            if (k.k == TV_LIST && !(k.u.l->flags & TL_TUPLE)) tv_throw(c, "unhashable type: 'list'");
            if (k.k == TV_DICT) tv_throw(c, "unhashable type: 'dict'");
            td_set(c, d.u.d, k, eval(c, f, n->items[i + 1]));
        }
        return d;
    }
    case N_GETATTR: {
        tv obj = eval(c, f, n->a);
        c->line = n->line;
        return tb_getattr(c, obj, n->s, n->slen);
    }
    case N_GETITEM: {
        tv obj = eval(c, f, n->a);
        if (n->b->kind == N_SLICE) {
            tv parts[3];
            for (int i = 0; i < 3; i++) parts[i] = n->b->items[i] ? eval(c, f, n->b->items[i]) : tv_none();
            c->line = n->line;
            return tb_slice(c, obj, parts[0], parts[1], parts[2]);
        }
        tv key = eval(c, f, n->b);
        c->line = n->line;
        return tb_getitem(c, obj, key);
    }
    case N_SLICE: tv_throw(c, "a slice outside of a subscript");
    case N_CALL: {
        tv callee = eval(c, f, n->a);
        tv *argv;
        eval_args(c, f, n, &argv);
        c->line = n->line;
        return call_value(c, callee, n->n, argv, n->names);
    }
    case N_FILTER: {
        tv v = eval(c, f, n->a);
        tv *argv;
        eval_args(c, f, n, &argv);
        c->line = n->line;
        return tb_apply_filter(c, n->op, v, n->n, argv, n->names);
    }
    case N_TEST: {
        tv v = eval(c, f, n->a);
        tv *argv;
        eval_args(c, f, n, &argv);
        c->line = n->line;
        return tv_bool(tb_apply_test(c, n->op, v, n->n, argv));
    }
    case N_BINOP: {
        tv a = eval(c, f, n->a), b = eval(c, f, n->b);
        c->line = n->line;
        return tb_binop(c, n->op, a, b);
    }
    case N_NEG: case N_POS: {
        tv a = eval(c, f, n->a);
        c->line = n->line;
        if (a.k == TV_BOOL) a = tv_int(a.u.b);
        if (a.k == TV_INT) {
            if (n->kind == N_NEG && a.u.i == INT64_MIN) tv_throw(c, "integer overflow");
            return n->kind == N_NEG ? tv_int(-a.u.i) : a;
        }
        if (a.k == TV_FLOAT) return n->kind == N_NEG ? tv_float(-a.u.f) : a;
        if (a.k == TV_UNDEF) tv_throw(c, "'%s' is undefined", a.u.undef_name ? a.u.undef_name : "value");
        tv_throw(c, "bad operand type for unary %c: '%s'", n->kind == N_NEG ? '-' : '+', tv_type_name(a));
    }
    case N_NOT: return tv_bool(!tv_truthy(c, eval(c, f, n->a)));
    case N_AND: {
        tv a = eval(c, f, n->a);
        return tv_truthy(c, a) ? eval(c, f, n->b) : a;
    }
    case N_OR: {
        tv a = eval(c, f, n->a);
        return tv_truthy(c, a) ? a : eval(c, f, n->b);
    }
    case N_COMPARE: {
        tv left = eval(c, f, n->a);
        for (int i = 0; i < n->n; i++) {
            tv right = eval(c, f, n->items[i]);
            c->line = n->line;
            if (!compare(c, n->ops[i], left, right)) return tv_bool(0);
            left = right;
        }
        return tv_bool(1);
    }
    case N_CONDEXPR:
        if (tv_truthy(c, eval(c, f, n->a))) return eval(c, f, n->b);
        return n->c ? eval(c, f, n->c) : tv_undef(NULL);
    case N_CONCAT: {
        tbuf b = {0};
        for (int i = 0; i < n->n; i++) tv_write_str(c, &b, eval(c, f, n->items[i]));
        return tv_strn(c, b.p ? b.p : "", b.n);
    }
    default:
        tv_throw(c, "a statement where an expression was expected");
    }
}

static int exec_for(tctx *c, tframe *f, const tnode *n) {
    tv seq = eval(c, f, n->a);
    c->line = n->line;
    tv_list *items = tv_iterate(c, seq);
    if (n->b) { /* {% for x in xs if cond %}: filter first, loop.length counts what passed */
        tv_list *kept = tv_new_list(c, 0).u.l;
        for (size_t i = 0; i < items->n; i++) {
            tframe *tf = new_frame(c, f);
            unpack(c, tf, n, items->v[i]);
            if (tv_truthy(c, eval(c, tf, n->b))) tl_push(c, kept, items->v[i]);
        }
        items = kept;
    }
    tv_loop *loop = hp_alloc(c, sizeof *loop);
    loop->length = (int64_t)items->n;
    loop->items = items->v;
    loop->depth = 1;
    tv lv = {.k = TV_LOOP};
    lv.u.loop = loop;
    for (size_t i = 0; i < items->n; i++) {
        te_step(c);
        tframe *it = new_frame(c, f);
        loop->index0 = (int64_t)i;
        unpack(c, it, n, items->v[i]);
        frame_set(c, it, "loop", lv);
        if (exec(c, it, n->items[0]) == EX_BREAK) break;
    }
    if (items->n == 0 && n->c) return exec(c, f, n->c);
    return EX_NORMAL;
}

static void assign(tctx *c, tframe *f, const tnode *n, tv v) {
    if (n->op == 2) {
        tv ns = lookup(c, f, n->names[0], strlen(n->names[0]));
        if (ns.k != TV_NS) tv_throw(c, "cannot assign attribute on non-namespace object");
        td_set(c, ns.u.d, tv_cstr(c, n->names[1]), v);
        return;
    }
    unpack(c, f, n, v);
}

static int exec_node(tctx *c, tframe *f, const tnode *n);

static int exec(tctx *c, tframe *f, const tnode *n) {
    enter(c);
    int r = exec_node(c, f, n);
    leave(c);
    return r;
}

static int exec_node(tctx *c, tframe *f, const tnode *n) {
    te_step(c);
    c->line = n->line;
    switch (n->kind) {
    case N_BODY:
        for (int i = 0; i < n->n; i++) {
            int r = exec(c, f, n->items[i]);
            if (r != EX_NORMAL) return r;
        }
        return EX_NORMAL;
    case N_DATA: te_write(c, n->s, n->slen); return EX_NORMAL;
    case N_OUTPUT: {
        tv v = eval(c, f, n->a);
        if (v.k == TV_STR) te_write(c, v.u.s->s, v.u.s->len);
        else {
            tbuf b = {0};
            tv_write_str(c, &b, v);
            te_write(c, b.p ? b.p : "", b.n);
        }
        return EX_NORMAL;
    }
    case N_IF: /* an elif chain is a chain of N_IF in ->c: walked here, not recursed into */
        for (;;) {
            if (tv_truthy(c, eval(c, f, n->a))) return exec(c, f, n->b);
            if (!n->c) return EX_NORMAL;
            if (n->c->kind != N_IF) return exec(c, f, n->c);
            n = n->c;
            te_step(c);
            c->line = n->line;
        }
    case N_FOR: return exec_for(c, f, n);
    case N_SET: {
        tv v = eval(c, f, n->a);
        c->line = n->line;
        assign(c, f, n, v);
        return EX_NORMAL;
    }
    case N_SET_BLOCK: {
        tv v = apply_chain(c, f, n->b, capture(c, f, n->a));
        c->line = n->line;
        assign(c, f, n, v);
        return EX_NORMAL;
    }
    case N_MACRO: {
        tv_func *fn = hp_alloc(c, sizeof *fn);
        memset(fn, 0, sizeof *fn);
        fn->kind = TF_MACRO;
        fn->name = n->s;
        fn->macro = n;
        fn->closure = f;
        tv v = {.k = TV_FUNC};
        v.u.fn = fn;
        frame_set(c, f, n->s, v);
        return EX_NORMAL;
    }
    case N_FILTER_BLOCK: {
        tv v = apply_chain(c, f, n->b, capture(c, f, n->a));
        tv s = tv_to_str(c, v);
        te_write(c, s.u.s->s, s.u.s->len);
        return EX_NORMAL;
    }
    case N_WITH: {
        tframe *w = new_frame(c, f);
        tv *vals;
        eval_args(c, f, n, &vals);
        for (int i = 0; i < n->n; i++) frame_set(c, w, n->names[i], vals[i]);
        return exec(c, w, n->a);
    }
    case N_BREAK: return EX_BREAK;
    case N_CONTINUE: return EX_CONTINUE;
    default: {
        tv v = eval(c, f, n); /* an expression statement cannot come out of the parser */
        (void)v;
        return EX_NORMAL;
    }
    }
}

tv te_call_macro(tctx *c, const tv_func *fn, int argc, const tv *argv, const char **kwn) {
    const tnode *m = fn->macro;
    if (++c->depth > c->opt->max_depth) tv_throw(c, "macro calls nested deeper than %d", c->opt->max_depth);
    tframe *f = new_frame(c, fn->closure);
    tv varargs = tv_new_list(c, TL_TUPLE), kwargs = tv_new_dict(c);
    int *bound = hp_alloc(c, (size_t)(m->n + 1) * sizeof(int));
    memset(bound, 0, (size_t)(m->n + 1) * sizeof(int));
    int pos = 0;
    for (int i = 0; i < argc; i++) {
        if (kwn && kwn[i]) {
            int k;
            for (k = 0; k < m->n; k++)
                if (strcmp(m->names[k], kwn[i]) == 0) break;
            if (k < m->n) {
                if (bound[k]) tv_throw(c, "macro '%s' got multiple values for argument '%s'", m->s, kwn[i]);
                frame_set(c, f, m->names[k], argv[i]);
                bound[k] = 1;
            } else if (m->op & 2) {
                td_set(c, kwargs.u.d, tv_cstr(c, kwn[i]), argv[i]);
            } else {
                tv_throw(c, "macro '%s' takes no keyword argument '%s'", m->s, kwn[i]);
            }
        } else if (pos < m->n) {
            frame_set(c, f, m->names[pos], argv[i]);
            bound[pos++] = 1;
        } else if (m->op & 1) {
            tl_push(c, varargs.u.l, argv[i]);
        } else {
            tv_throw(c, "macro '%s' takes not more than %d argument(s)", m->s, m->n);
        }
    }
    for (int k = 0; k < m->n; k++) {
        if (bound[k]) continue;
        frame_set(c, f, m->names[k], m->items[k] ? eval(c, f, m->items[k]) : tv_undef(m->names[k]));
    }
    frame_set(c, f, "varargs", varargs);
    frame_set(c, f, "kwargs", kwargs);
    tv r = capture(c, f, m->a);
    c->depth--;
    return r;
}

/* ---- public entry points ---- */

cinfer_status cf_template_compile(const char *src, size_t len, cf_template **out, cinfer_error *err) {
    *out = NULL;
    if (!src) return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "template source is NULL");
    cf_template *t = calloc(1, sizeof *t);
    if (!t) return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory compiling a template");
    cinfer_status s = tp_parse(src, len, &t->arena, &t->root, err);
    if (s != CINFER_OK) {
        free(t);
        return s;
    }
    *out = t;
    return CINFER_OK;
}

void cf_template_free(cf_template *t) {
    if (!t) return;
    tp_arena_free(t->arena);
    free(t);
}

cinfer_status cf_template_render(const cf_template *t, const cf_template_var *vars, int n_vars,
                                 const cf_template_options *opt, char **out, size_t *out_len,
                                 cinfer_error *err) {
    *out = NULL;
    if (out_len) *out_len = 0;
    cf_template_options o = {0};
    if (opt) o = *opt;
    if (!o.max_output) o.max_output = (size_t)16 << 20;
    if (!o.max_memory) o.max_memory = (size_t)256 << 20;
    if (!o.max_steps) o.max_steps = 20000000;
    if (!o.max_depth) o.max_depth = 64;
    if (!o.now) o.now = (int64_t)time(NULL);
    tctx *c = calloc(1, sizeof *c);
    if (!c) return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory rendering a template");
    c->err = err;
    c->opt = &o;
    c->heap.max_bytes = o.max_memory;
    c->now = o.now;
    tbuf result = {0};
    c->out = &result;
    if (setjmp(c->jmp)) {
        hp_free_all(&c->heap);
        free(c);
        return CINFER_E_TEMPLATE;
    }
    c->globals = tv_new_dict(c).u.d;
    for (int i = 0; i < n_vars; i++) {
        char why[400];
        tv v;
        const char *js = vars[i].json ? vars[i].json : "null";
        if (!tj_parse(c, js, strlen(js), vars[i].name ? vars[i].name : "(variables)", &v, why, sizeof why)) {
            cf_fail(err, CINFER_E_INVALID_ARGUMENT, "template variable %s", why);
            hp_free_all(&c->heap);
            free(c);
            return CINFER_E_INVALID_ARGUMENT;
        }
        if (vars[i].name) {
            td_set(c, c->globals, tv_cstr(c, vars[i].name), v);
        } else if (v.k == TV_DICT) {
            for (size_t k = 0; k < v.u.d->n; k++) td_set(c, c->globals, v.u.d->keys[k], v.u.d->vals[k]);
        } else {
            cf_fail(err, CINFER_E_INVALID_ARGUMENT, "template variables: expected a JSON object");
            hp_free_all(&c->heap);
            free(c);
            return CINFER_E_INVALID_ARGUMENT;
        }
    }
    exec(c, new_frame(c, NULL), t->root);
    char *r = malloc(result.n + 1);
    if (!r) {
        hp_free_all(&c->heap);
        free(c);
        return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory rendering a template");
    }
    if (result.n) memcpy(r, result.p, result.n);
    r[result.n] = 0;
    *out = r;
    if (out_len) *out_len = result.n;
    hp_free_all(&c->heap);
    free(c);
    return CINFER_OK;
}
