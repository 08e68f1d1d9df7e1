/* template_impl.h: internals of the Jinja subset interpreter shared by template_*.c — the value type
 * (Python-like: undefined/none/bool/int/float/str/list/dict/namespace/callable), the per-render heap,
 * the AST, and the entry points of the lexer/parser, evaluator and builtins. Not a public header. */
#ifndef CF_TEXT_TEMPLATE_IMPL_H
#define CF_TEXT_TEMPLATE_IMPL_H

#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>
#include "base/status.h"
#include "text/template.h"

/* ---- values ---- */

typedef enum {
    TV_UNDEF, TV_NONE, TV_BOOL, TV_INT, TV_FLOAT, TV_STR, TV_LIST, TV_DICT, TV_NS, TV_FUNC, TV_LOOP
} tv_kind;

typedef struct tv_str tv_str;
typedef struct tv_list tv_list;
typedef struct tv_dict tv_dict;
typedef struct tv_func tv_func;
typedef struct tv_loop tv_loop;

typedef struct tv {
    tv_kind k;
    union {
        int b;
        int64_t i;
        double f;
        tv_str *s;
        tv_list *l;
        tv_dict *d;   /* TV_DICT and TV_NS */
        tv_func *fn;
        tv_loop *loop;
        const char *undef_name; /* TV_UNDEF: the name that was missing, or NULL */
    } u;
} tv;

struct tv_str {
    size_t len;
    int markup; /* markupsafe.Markup: '+' with a plain string escapes the plain one */
    char s[];   /* len bytes, NUL-terminated */
};

enum { TL_TUPLE = 1, TL_GEN = 2 }; /* TL_GEN: a Python generator/iterator (no len, always true, one pass) */

/* Bounds that keep the C stack safe on hostile templates: the nesting of statements and expressions being
 * evaluated (macro calls included), and of lists, tuples and dicts inside one value. */
#define TE_MAX_NEST 1000
#define TV_MAX_NEST 512

struct tv_list {
    size_t n, cap;
    int flags;
    int height;   /* 1 + the largest height among the items (0 for scalars and namespaces) */
    int consumed; /* TL_GEN: already iterated */
    tv *v;
};

struct tv_dict {
    size_t n, cap;
    int height;
    tv *keys, *vals;
    uint32_t *index; /* open addressing over hashes, built once n > 8; 0 = empty, else slot+1 */
    size_t index_cap;
};

typedef struct tnode tnode;
typedef struct tframe tframe;

typedef enum { TF_BUILTIN, TF_METHOD, TF_MACRO } tv_func_kind;

struct tv_func {
    tv_func_kind kind;
    int id;             /* builtin or method id */
    const char *name;
    tv self;            /* TF_METHOD: the bound object */
    const tnode *macro; /* TF_MACRO */
    tframe *closure;
};

struct tv_loop {
    int64_t index0, length;
    const tv *items; /* the (filtered) sequence being iterated */
    int depth;
};

/* ---- per-render heap: every allocation is registered and freed when the render ends ---- */

typedef struct hp_block hp_block;
typedef struct theap {
    hp_block *head;
    size_t bytes, max_bytes;
} theap;

typedef struct tctx tctx;

void *hp_alloc(tctx *c, size_t size);
void *hp_realloc(tctx *c, void *p, size_t size);
void hp_free_all(theap *h);

/* Raises a render error (longjmp to the render entry). line 0 = current statement line. */
_Noreturn void tv_throw(tctx *c, const char *fmt, ...) CF_PRINTF(2, 3);

/* ---- AST ---- */

typedef enum {
    /* expressions */
    N_STR, N_INT, N_FLOAT, N_CONST, N_NAME, N_LIST, N_TUPLE, N_DICT, N_GETATTR, N_GETITEM, N_SLICE,
    N_CALL, N_FILTER, N_TEST, N_BINOP, N_NEG, N_POS, N_NOT, N_AND, N_OR, N_COMPARE, N_CONDEXPR, N_CONCAT,
    /* statements */
    N_BODY, N_DATA, N_OUTPUT, N_IF, N_FOR, N_SET, N_SET_BLOCK, N_MACRO, N_BREAK, N_CONTINUE, N_FILTER_BLOCK,
    N_WITH
} tnode_kind;

enum { OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, OP_POW,
       OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE, OP_IN, OP_NOTIN };
enum { CONST_NONE, CONST_TRUE, CONST_FALSE };

struct tnode {
    tnode_kind kind;
    int line;
    int op;              /* operator, constant kind, builtin filter/test id, negation flag */
    tnode *a, *b, *c;    /* children (meaning per kind) */
    tnode **items;       /* list items, call args, body statements, compare operands, slice parts */
    int n;
    int *ops;            /* N_COMPARE: the operator before each operand */
    const char **names;  /* keyword names parallel to items (NULL = positional), targets, params */
    int nn;
    const char *s;       /* name, string literal or data text */
    size_t slen;
    int64_t i;
    double f;
};

typedef struct tarena tarena;

struct cf_template {
    tarena *arena;
    tnode *root;
};

/* template_parse.c */
cinfer_status tp_parse(const char *src, size_t len, tarena **arena, tnode **root, cinfer_error *err);
void tp_arena_free(tarena *a);

/* template_builtins.c: name -> id at parse time (-1 when unknown) */
int tb_filter_id(const char *name);
int tb_test_id(const char *name);
int tb_filter_supported(int id);

/* ---- evaluator context ---- */

struct tframe {
    tframe *parent;
    tv_dict *vars;
};

struct tctx {
    theap heap;
    jmp_buf jmp;
    cinfer_error *err;
    int line;
    const cf_template_options *opt;
    tv_dict *globals; /* render variables */
    struct tbuf *out; /* where output goes: the result, or a macro's / block set's capture */
    uint64_t steps;
    int depth; /* macro calls */
    int nest;  /* eval/exec frames, bounded by TE_MAX_NEST */
    int64_t now;
};

/* template_value.c */
tv tv_undef(const char *name);
tv tv_none(void);
tv tv_bool(int b);
tv tv_int(int64_t i);
tv tv_float(double f);
tv tv_strn(tctx *c, const char *s, size_t n);
tv tv_cstr(tctx *c, const char *s);
tv tv_markup(tctx *c, const char *s, size_t n);
tv tv_new_list(tctx *c, int flags);
tv tv_new_dict(tctx *c);
void tl_push(tctx *c, tv_list *l, tv v);
void td_set(tctx *c, tv_dict *d, tv key, tv val);
int td_get(tctx *c, const tv_dict *d, tv key, tv *out);
int td_get_str(tctx *c, const tv_dict *d, const char *key, size_t klen, tv *out);
int tv_truthy(tctx *c, tv v);
int tv_equal(tctx *c, tv a, tv b); /* Python ==; each container visited is a step */
int tv_compare(tctx *c, tv a, tv b); /* <0, 0, >0; throws on unorderable */
const char *tv_type_name(tv v);

typedef struct tbuf { char *p; size_t n, cap; } tbuf;
void te_write(tctx *c, const char *s, size_t n); /* to c->out, bounded by max_output */
void tb_put(tctx *c, tbuf *b, const char *s, size_t n);
void tb_putc(tctx *c, tbuf *b, char ch);
void tv_write_str(tctx *c, tbuf *b, tv v);  /* Python str() */
void tv_write_repr(tctx *c, tbuf *b, tv v); /* Python repr() */
tv tv_to_str(tctx *c, tv v);
void tv_float_repr(double f, char *buf, size_t cap);

/* Python's str.isspace() on one code point. */
int tv_py_space(uint32_t cp);
/* Decodes one UTF-8 code point at s (n bytes left); returns its length (1 for an invalid byte). */
size_t tv_utf8_next(const char *s, size_t n, uint32_t *cp);
size_t tv_utf8_count(const char *s, size_t n);

/* Iteration: materialises an iterable value as a list view (strings into characters, dicts into keys). */
tv_list *tv_iterate(tctx *c, tv v);
int64_t tv_length(tctx *c, tv v);

/* template_json.c */
/* JSON text to a value. On bad input returns 0 with why = "NAME[2].content: invalid UTF-8 at byte 17" or
 * "NAME: invalid JSON: expected ',' at byte 40": the path from NAME to the bad value, and what is wrong. */
int tj_parse(tctx *c, const char *s, size_t n, const char *name, tv *out, char *why, size_t why_cap);
/* json.dumps(v, ensure_ascii, indent=indent (NULL = None), separators=(item_sep, key_sep), sort_keys). */
void tj_dump(tctx *c, tbuf *b, tv v, const char *indent, const char *item_sep, const char *key_sep,
             int sort_keys, int ensure_ascii);

/* template_builtins.c */
tv tb_apply_filter(tctx *c, int id, tv v, int argc, const tv *argv, const char **kwn);
int tb_apply_test(tctx *c, int id, tv v, int argc, const tv *argv);
tv tb_getattr(tctx *c, tv obj, const char *name, size_t len);
tv tb_getitem(tctx *c, tv obj, tv key);
tv tb_call_builtin(tctx *c, const tv_func *fn, int argc, const tv *argv, const char **kwn);
tv tb_global(tctx *c, const char *name, size_t len, int *found);
tv tb_slice(tctx *c, tv obj, tv start, tv stop, tv step);
tv tb_binop(tctx *c, int op, tv a, tv b);

/* template_eval.c */
tv te_call_macro(tctx *c, const tv_func *fn, int argc, const tv *argv, const char **kwn);
void te_step(tctx *c);

#endif
