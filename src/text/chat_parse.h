/* chat_parse.h: the conventions a chat model writes its reply in (reasoning markers, tool-call syntax),
 * found from its chat template and vocabulary (src/text/chat_format.c), and the streaming parser behind
 * cinfer_chat_parser that splits a reply into content, reasoning and tool calls (src/text/chat_parse.c,
 * decoding calls with src/text/chat_calls.c). The public constructor, which reads a cinfer_model, is in
 * src/engine/chat_parser.c. */
#ifndef CF_TEXT_CHAT_PARSE_H
#define CF_TEXT_CHAT_PARSE_H

#include <stddef.h>
#include "cinfer.h"
#include "text/tokenizer.h"

typedef enum cf_reasoning_syntax {
    CF_REASONING_NONE,
    CF_REASONING_THINK,          /* <think> ... </think> (Qwen3, DeepSeek-R1, SmolLM3) */
    CF_REASONING_CHANNEL,        /* <|channel>thought ... <channel|> (Gemma 4) */
} cf_reasoning_syntax;

typedef enum cf_tool_syntax {
    CF_TOOLS_NONE,
    CF_TOOLS_HERMES,             /* <tool_call>{"name": ..., "arguments": {...}}</tool_call> (Qwen, Hermes) */
    CF_TOOLS_LLAMA3,             /* a reply that is {"name": ..., "parameters": {...}} (after <|python_tag|>) */
    CF_TOOLS_MISTRAL,            /* [TOOL_CALLS][{...}, ...] (v0.3) or [TOOL_CALLS]name[ARGS]{...} */
    CF_TOOLS_GEMMA4,             /* <|tool_call>call:name{key:<|"|>text<|"|>,...}<tool_call|> */
    CF_TOOLS_FUNCTIONGEMMA,      /* <start_function_call>call:name{key:<escape>text<escape>}<end_function_call> */
} cf_tool_syntax;

typedef struct cf_chat_format {
    cf_reasoning_syntax reasoning;
    cf_tool_syntax tools;
    /* The markers are special tokens, which decoding with skip_special drops: a request that wants them
     * parsed must keep special tokens in its text. */
    int reasoning_special;
    int tools_special;
} cf_chat_format;

/* Reads the format from a chat template's source and the tokenizer's vocabulary (either may be NULL). */
cf_chat_format cf_chat_format_detect(const char *template_src, const cf_tokenizer *tok);
const char *cf_reasoning_syntax_name(cf_reasoning_syntax r);
/* The markers of a syntax, NULL where it has none: reasoning's opening and closing markers; a tool call's
 * opening and closing markers and (Gemma) the delimiter of its strings. */
const char *cf_reasoning_open(cf_reasoning_syntax r);
const char *cf_reasoning_close(cf_reasoning_syntax r);
const char *cf_tool_open(cf_tool_syntax t);
const char *cf_tool_close(cf_tool_syntax t);
const char *cf_tool_quote(cf_tool_syntax t);
const char *cf_tool_syntax_name(cf_tool_syntax t);

/* Whether a rendered prompt leaves the reply inside an open reasoning block (it ends with the opening
 * marker, give or take whitespace). */
int cf_chat_prompt_opens_reasoning(const cf_chat_format *f, const char *prompt, size_t len);

/* A parser for one reply. parse_tools: the request offered tools; parse_reasoning: split reasoning out;
 * in_reasoning: the prompt opened a reasoning block. Fed and finished with cinfer_chat_parser_feed /
 * _finish, freed with cinfer_chat_parser_free. */
cinfer_status cf_chat_parser_new(const cf_chat_format *f, int parse_tools, int parse_reasoning, int in_reasoning,
                                 cinfer_chat_parser **out, cinfer_error *err);

#endif
