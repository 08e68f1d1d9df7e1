/* template.h: chat templates. A Jinja subset interpreter that renders Hugging Face chat templates
 * byte-identically to Python jinja2 with transformers' settings (ImmutableSandboxedEnvironment,
 * trim_blocks, lstrip_blocks, loopcontrols, raise_exception, strftime_now, HF's tojson), and the
 * loading of a model folder's chat template. Owned by src/text/template*.c. */
#ifndef CF_TEXT_TEMPLATE_H
#define CF_TEXT_TEMPLATE_H

#include <stddef.h>
#include <stdint.h>
#include "cinfer.h"

/* ---- generic Jinja templates ---- */

typedef struct cf_template cf_template;

/* Bounds on one render; a zero field takes its default. Exceeding one is a CINFER_E_TEMPLATE error. */
typedef struct cf_template_options {
    size_t max_output;  /* bytes of rendered text (default 16 MiB) */
    size_t max_memory;  /* bytes held by the interpreter during the render (default 256 MiB) */
    uint64_t max_steps; /* statements, expressions and loop iterations evaluated (default 20 million) */
    int max_depth;      /* nesting of macro calls and expressions (default 64) */
    int64_t now;        /* seconds since the epoch seen by strftime_now (default: the current time) */
} cf_template_options;

/* One render variable: name = JSON value. A NULL name merges the members of a JSON object. */
typedef struct cf_template_var {
    const char *name;
    const char *json;
} cf_template_var;

/* Parses a template. A syntax error or an unsupported construct is CINFER_E_TEMPLATE naming the line. */
cinfer_status cf_template_compile(const char *src, size_t len, cf_template **out, cinfer_error *err);
void cf_template_free(cf_template *t);

/* Renders t with the given variables. *out is malloc'd, NUL-terminated; *out_len excludes the NUL.
 * A compiled template may be rendered by several threads at once. */
cinfer_status cf_template_render(const cf_template *t, const cf_template_var *vars, int n_vars,
                                 const cf_template_options *opt, char **out, size_t *out_len,
                                 cinfer_error *err);

/* ---- chat templates of a model folder ---- */

typedef struct cf_chat_template cf_chat_template;

/* Loads DIR/chat_template.jinja, else tokenizer_config.json's "chat_template" (a string, or a list of
 * {name, template} from which `name` is picked; NULL picks "default"). The special tokens the template
 * sees (bos_token, eos_token, unk_token, pad_token, sep_token, cls_token, mask_token,
 * additional_special_tokens) come from tokenizer_config.json, as transformers passes them. */
cinfer_status cf_chat_template_load(const char *dir, const char *name, cf_chat_template **out,
                                    cinfer_error *err);
void cf_chat_template_free(cf_chat_template *ct);
/* The template's source text (what the chat reply parser reads the model's conventions from). */
const char *cf_chat_template_source(const cf_chat_template *ct);
/* Replaces the BOS/EOS text (e.g. with cf_tokenizer_bos_text/eos_text); a NULL argument keeps the
 * current value. */
cinfer_status cf_chat_template_set_tokens(cf_chat_template *ct, const char *bos_token, const char *eos_token,
                                          cinfer_error *err);

typedef struct cf_chat_request {
    const char *messages_json; /* JSON array of messages; content is a string or a list of parts */
    const char *tools_json;    /* JSON array of tools, or NULL (the template sees tools = none) */
    int add_generation_prompt;
    const char *kwargs_json;   /* JSON object of extra variables (enable_thinking, date_string...), or NULL */
} cf_chat_request;

/* Renders the prompt as transformers' apply_chat_template(tokenize=False) does. */
cinfer_status cf_chat_template_render(const cf_chat_template *ct, const cf_chat_request *req,
                                      const cf_template_options *opt, char **out, size_t *out_len,
                                      cinfer_error *err);

#endif
