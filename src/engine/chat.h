/* chat.h: the chat layer between a request's messages and the model's template and reply format: the
 * messages (tool calls and tool results included) as the JSON a chat template reads, the rendered prompt,
 * and the reply format of a model. Owned by src/engine/chat_messages.c and src/engine/chat_parser.c. */
#ifndef CF_ENGINE_CHAT_H
#define CF_ENGINE_CHAT_H

#include <stddef.h>
#include "cinfer.h"
#include "text/chat_parse.h"

/* Checks the chat fields of r (messages, tools_json, template_kwargs_json) without keeping anything: a
 * mistake is CINFER_E_INVALID_ARGUMENT naming the message and field. */
cinfer_status cf_chat_check(const cinfer_request *r, cinfer_error *err);

/* r's messages as a JSON array for the template (cJSON_free'd by the caller): each tool call's
 * function.arguments as the JSON value its text holds, as vLLM hands them to templates. */
cinfer_status cf_chat_messages_json(const cinfer_request *r, char **json, cinfer_error *err);

/* r's messages rendered with the model's chat template (malloc'd, NUL-terminated); r is checked. */
cinfer_status cf_chat_render(const cinfer_model *m, const cinfer_request *r, char **text, size_t *len,
                             cinfer_error *err);

/* The same with a given template (the tests render fixture templates without a model). */
typedef struct cf_chat_template cf_chat_template;
cinfer_status cf_chat_render_with(const cf_chat_template *ct, const cinfer_request *r, char **text, size_t *len,
                                  cinfer_error *err);

/* The model's reply format, from its chat template and vocabulary. */
cf_chat_format cf_model_chat_format(const cinfer_model *m);

/* Whether a request's text must keep the special tokens its reply markup is made of. */
int cf_chat_keeps_special(const cinfer_model *m, const cinfer_request *r);

#endif
