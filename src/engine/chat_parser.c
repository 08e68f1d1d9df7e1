/* chat_parser.c: cinfer_chat_parser_create, the public constructor of the reply parser: it reads the
 * model's reply format and, from the request as it was rendered, whether the reply begins inside an open
 * reasoning block. The parser itself is src/text/chat_parse.c. */
#include "engine/chat.h"
#include "engine/engine.h"
#include "base/status.h"

#include <stdlib.h>
#include <string.h>

cinfer_chat_parser_params cinfer_chat_parser_default_params(void) {
    return (cinfer_chat_parser_params){.struct_size = sizeof(cinfer_chat_parser_params), .parse_reasoning = 1};
}

/* The prompt leaves the reply inside reasoning (a template that opens <think> in the prompt). */
static cinfer_status starts_in_reasoning(const cinfer_model *m, const cf_chat_format *f, const cinfer_request *r,
                                         int *in, cinfer_error *err) {
    *in = 0;
    if (!r || !f->reasoning) return CINFER_OK;
    if (r->prompt_text) *in = cf_chat_prompt_opens_reasoning(f, r->prompt_text, strlen(r->prompt_text));
    if (!r->messages || !r->add_generation_prompt) return CINFER_OK;
    char *text;
    size_t len;
    CF_TRY(cf_chat_render(m, r, &text, &len, err));
    *in = cf_chat_prompt_opens_reasoning(f, text, len);
    free(text);
    return CINFER_OK;
}

cinfer_status cinfer_chat_parser_create(const cinfer_model *m, const cinfer_chat_parser_params *p,
                                        cinfer_chat_parser **out, cinfer_error *err) {
    if (!m || !out) return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "cinfer_chat_parser_create: a NULL argument");
    *out = NULL;
    cinfer_chat_parser_params q = p ? *p : cinfer_chat_parser_default_params();
    if (q.struct_size != sizeof q)
        return cf_fail(err, CINFER_E_INVALID_ARGUMENT,
                       "cinfer_chat_parser_params.struct_size is %zu, expected %zu: start from "
                       "cinfer_chat_parser_default_params()", q.struct_size, sizeof q);
    cf_chat_format f = cf_model_chat_format(m);
    int in_reasoning = 0;
    if (q.parse_reasoning) CF_TRY(starts_in_reasoning(m, &f, q.request, &in_reasoning, err));
    return cf_chat_parser_new(&f, q.parse_tool_calls, q.parse_reasoning, in_reasoning, out, err);
}
