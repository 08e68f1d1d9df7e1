/* chat_format.c: the conventions of a chat model's replies: its reasoning and tool-call markers, read from
 * the chat template's source (what the model is prompted with) and then its vocabulary, which of them are
 * special tokens, and whether a rendered prompt leaves the reply inside reasoning. */
#include "text/chat_parse.h"
#include "text/chat_text.h"

#include <string.h>

const char *cf_reasoning_open(cf_reasoning_syntax r) {
    return r == CF_REASONING_THINK ? "<think>" : r == CF_REASONING_CHANNEL ? "<|channel>thought" : NULL;
}

const char *cf_reasoning_close(cf_reasoning_syntax r) {
    return r == CF_REASONING_THINK ? "</think>" : r == CF_REASONING_CHANNEL ? "<channel|>" : NULL;
}

const char *cf_tool_open(cf_tool_syntax t) {
    switch (t) {
    case CF_TOOLS_HERMES: return "<tool_call>";
    case CF_TOOLS_LLAMA3: return "<|python_tag|>";
    case CF_TOOLS_MISTRAL: return "[TOOL_CALLS]";
    case CF_TOOLS_GEMMA4: return "<|tool_call>";
    case CF_TOOLS_FUNCTIONGEMMA: return "<start_function_call>";
    default: return NULL;
    }
}

const char *cf_tool_close(cf_tool_syntax t) {
    switch (t) {
    case CF_TOOLS_HERMES: return "</tool_call>";
    case CF_TOOLS_GEMMA4: return "<tool_call|>";
    case CF_TOOLS_FUNCTIONGEMMA: return "<end_function_call>";
    default: return NULL;
    }
}

const char *cf_tool_quote(cf_tool_syntax t) {
    return t == CF_TOOLS_GEMMA4 ? "<|\"|>" : t == CF_TOOLS_FUNCTIONGEMMA ? "<escape>" : NULL;
}

const char *cf_reasoning_syntax_name(cf_reasoning_syntax r) {
    return r == CF_REASONING_THINK ? "think" : r == CF_REASONING_CHANNEL ? "channel" : "none";
}

const char *cf_tool_syntax_name(cf_tool_syntax t) {
    switch (t) {
    case CF_TOOLS_HERMES: return "hermes";
    case CF_TOOLS_LLAMA3: return "llama3";
    case CF_TOOLS_MISTRAL: return "mistral";
    case CF_TOOLS_GEMMA4: return "gemma4";
    case CF_TOOLS_FUNCTIONGEMMA: return "functiongemma";
    default: return "none";
    }
}

static int in_template(const char *src, const char *s) { return src && strstr(src, s) != NULL; }
static int in_vocab(const cf_tokenizer *tok, const char *s) { return tok && cf_tokenizer_token_id(tok, s) >= 0; }

static int is_special_token(const cf_tokenizer *tok, const char *s) {
    int32_t id = tok ? cf_tokenizer_token_id(tok, s) : -1;
    return id >= 0 && cf_tokenizer_is_special(tok, id);
}

cf_chat_format cf_chat_format_detect(const char *src, const cf_tokenizer *tok) {
    cf_chat_format f = {0};
    if (in_template(src, "<|channel>") || (in_vocab(tok, "<|channel>") && in_vocab(tok, "<channel|>")))
        f.reasoning = CF_REASONING_CHANNEL;
    else if (in_template(src, "<think>") || (in_vocab(tok, "<think>") && in_vocab(tok, "</think>")))
        f.reasoning = CF_REASONING_THINK;

    /* The template is asked first (it is what the model was prompted with), then the vocabulary. */
    static const struct { const char *marker; cf_tool_syntax syntax; } by_marker[] = {
        {"<|tool_call>", CF_TOOLS_GEMMA4},
        {"<start_function_call>", CF_TOOLS_FUNCTIONGEMMA},
        {"[TOOL_CALLS]", CF_TOOLS_MISTRAL},
        {"<tool_call>", CF_TOOLS_HERMES},
        {"<|python_tag|>", CF_TOOLS_LLAMA3},
    };
    const size_t n = sizeof by_marker / sizeof by_marker[0];
    for (size_t i = 0; i < n && !f.tools; i++)
        if (in_template(src, by_marker[i].marker)) f.tools = by_marker[i].syntax;
    if (!f.tools && in_template(src, "\"parameters\": dictionary of argument name")) f.tools = CF_TOOLS_LLAMA3;
    for (size_t i = 0; i < n && !f.tools; i++)
        if (in_vocab(tok, by_marker[i].marker)) f.tools = by_marker[i].syntax;

    if (f.reasoning) f.reasoning_special = is_special_token(tok, cf_reasoning_open(f.reasoning)) ||
                                           is_special_token(tok, "<|channel>") ||
                                           is_special_token(tok, cf_reasoning_close(f.reasoning));
    if (f.tools) {
        const char *extra = f.tools == CF_TOOLS_MISTRAL ? "[ARGS]" : cf_tool_quote(f.tools);
        f.tools_special = is_special_token(tok, cf_tool_open(f.tools)) ||
                          (cf_tool_close(f.tools) && is_special_token(tok, cf_tool_close(f.tools))) ||
                          (extra && is_special_token(tok, extra));
    }
    return f;
}

int cf_chat_prompt_opens_reasoning(const cf_chat_format *f, const char *prompt, size_t len) {
    const char *open = cf_reasoning_open(f->reasoning);
    if (!open || !prompt) return 0;
    size_t k = strlen(open);
    for (size_t i = len >= k ? len - k + 1 : 0; i-- > 0;) {
        if (memcmp(prompt + i, open, k) != 0) continue;
        return cf_ws_prefix(prompt + i + k, len - i - k) == len - i - k;
    }
    return 0;
}
