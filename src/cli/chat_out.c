/* chat_out.c: a streamed chat reply on the terminal or in a pipe, split by the chat parser (chat_out.h). */
#include "cli/chat_out.h"
#include "base/status.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DIM "\033[2m"
#define PLAIN "\033[0m"
#define THINKING "thinking> "

static void keep_content(cf_chat_out *o, const char *s, size_t n) {
    if (o->len + n + 1 > o->cap) {
        size_t cap = o->cap ? o->cap : 256;
        while (o->len + n + 1 > cap) cap *= 2;
        char *p = realloc(o->content, cap);
        if (!p) {
            o->oom = 1;
            return;
        }
        o->content = p;
        o->cap = cap;
    }
    memcpy(o->content + o->len, s, n);
    o->len += n;
    o->content[o->len] = 0;
}

/* Ends a reasoning block: the style back to plain, and the next text on a line of its own. */
static void leave_reasoning(cf_chat_out *o) {
    if (o->kind != CINFER_DELTA_REASONING) return;
    if (o->dim) fputs(PLAIN, o->f);
    if (!o->at_line_start) fputc('\n', o->f);
    o->at_line_start = 1;
}

static void write_reasoning(cf_chat_out *o, const char *s, size_t n) {
    if (o->kind != CINFER_DELTA_REASONING) {
        if (!o->at_line_start) fputc('\n', o->f);
        o->at_line_start = 1;
        if (o->dim) fputs(DIM, o->f);
    }
    while (n) {
        if (o->at_line_start && !o->dim) fputs(THINKING, o->f);
        const char *nl = memchr(s, '\n', n);
        size_t k = nl ? (size_t)(nl - s) + 1 : n;
        fwrite(s, 1, k, o->f);
        o->at_line_start = nl != NULL;
        s += k;
        n -= k;
    }
}

static int on_delta(const cinfer_chat_delta *d, void *user) {
    cf_chat_out *o = user;
    switch (d->kind) {
    case CINFER_DELTA_REASONING:
        write_reasoning(o, d->text, d->text_len);
        break;
    case CINFER_DELTA_CONTENT:
        leave_reasoning(o);
        fwrite(d->text, 1, d->text_len, o->f);
        o->at_line_start = d->text[d->text_len - 1] == '\n';
        keep_content(o, d->text, d->text_len);
        break;
    case CINFER_DELTA_TOOL_CALL:
        leave_reasoning(o);
        fprintf(o->f, "%s[tool call] %s %s\n", o->at_line_start ? "" : "\n", d->tool_name, d->tool_arguments);
        o->at_line_start = 1;
        break;
    }
    o->kind = (int)d->kind;
    fflush(o->f);
    return 0;
}

cinfer_status cf_chat_out_open(cf_chat_out *o, const cinfer_model *m, const cinfer_request *q, FILE *f,
                               cinfer_error *err) {
    memset(o, 0, sizeof *o);
    o->f = f;
    o->dim = isatty(fileno(f));
    o->kind = -1;
    o->at_line_start = 1;
    cinfer_chat_parser_params pp = cinfer_chat_parser_default_params();
    pp.request = q;
    pp.parse_tool_calls = q->tools_json != NULL;
    return cinfer_chat_parser_create(m, &pp, &o->parser, err);
}

cinfer_status cf_chat_out_feed(cf_chat_out *o, const char *text, size_t len, cinfer_error *err) {
    CF_TRY(cinfer_chat_parser_feed(o->parser, text, len, on_delta, o, err));
    if (o->oom) return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory for the reply");
    return CINFER_OK;
}

cinfer_status cf_chat_out_finish(cf_chat_out *o, cinfer_error *err) {
    cinfer_status st = cinfer_chat_parser_finish(o->parser, on_delta, o, err);
    if (o->kind == CINFER_DELTA_REASONING && o->dim) fputs(PLAIN, o->f);
    fflush(o->f);
    if (st == CINFER_OK && o->oom) st = cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory for the reply");
    return st;
}

void cf_chat_out_close(cf_chat_out *o) {
    cinfer_chat_parser_free(o->parser);
    free(o->content);
    memset(o, 0, sizeof *o);
}
