/* chat_out.h: how `cinfer run --chat` and `cinfer chat` print a reply as it streams: through the chat
 * parser, reasoning set apart (dimmed on a terminal, each line prefixed "thinking> " otherwise), content
 * as it comes, tool calls on a line each; the content is kept for the conversation's history.
 * Implemented in chat_out.c. */
#ifndef CF_CLI_CHAT_OUT_H
#define CF_CLI_CHAT_OUT_H

#include <stdio.h>
#include "cinfer.h"

typedef struct cf_chat_out {
    cinfer_chat_parser *parser;
    FILE *f;
    int dim;            /* f is a terminal */
    int kind;           /* the kind of delta printed last, -1 before the first */
    int at_line_start;
    char *content;      /* the reply's content, NUL-terminated */
    size_t len, cap;
    int oom;
} cf_chat_out;

/* q is the request as it was opened (the parser reads its rendered prompt and whether it offers tools). */
cinfer_status cf_chat_out_open(cf_chat_out *o, const cinfer_model *m, const cinfer_request *q, FILE *f,
                               cinfer_error *err);
cinfer_status cf_chat_out_feed(cf_chat_out *o, const char *text, size_t len, cinfer_error *err);
/* The reply ended: prints what the parser held back and leaves the terminal's style as it was. */
cinfer_status cf_chat_out_finish(cf_chat_out *o, cinfer_error *err);
void cf_chat_out_close(cf_chat_out *o);

#endif
