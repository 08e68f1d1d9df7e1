/* chat_calls.h: tool calls decoded from the text of a model's call markup into a name and the arguments
 * as compact JSON text of an object: JSON call objects ({"name": ..., "arguments" | "parameters": ...},
 * one or a list), a name with a JSON object (Mistral's name[ARGS]{...}), and Gemma's call syntax
 * call:name{key:value,...}. Owned by src/text/chat_calls.c. */
#ifndef CF_TEXT_CHAT_CALLS_H
#define CF_TEXT_CHAT_CALLS_H

#include <stddef.h>

typedef struct cf_tool_call {
    char *name;
    char *arguments;
} cf_tool_call;

typedef struct cf_tool_calls {
    cf_tool_call *v;
    int n, cap;
} cf_tool_calls;

/* Each decoder appends the calls of s[0, n) and returns 1; 0 when the text is not that (nothing is
 * appended, also when only some of its calls are valid); -1 when out of memory. */
int cf_tool_calls_json(cf_tool_calls *c, const char *s, size_t n);
int cf_tool_calls_named(cf_tool_calls *c, const char *name, size_t name_len, const char *s, size_t n);
int cf_tool_calls_gemma(cf_tool_calls *c, const char *s, size_t n, const char *quote);
/* Frees the calls; c is empty and reusable afterwards. */
void cf_tool_calls_clear(cf_tool_calls *c);

/* A function name as models write it: 1 to 256 bytes, no whitespace, quotes, brackets, braces, commas or
 * parentheses. */
int cf_tool_name_valid(const char *s, size_t n);

#endif
