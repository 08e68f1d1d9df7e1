/* test_chat_parse.c: the chat reply parser on every format (Qwen/Hermes, Llama 3, Mistral both forms,
 * Gemma 4, FunctionGemma, <think> and Gemma's thought channel): the deltas of each reply as one feed,
 * the same deltas when the reply is split at every byte boundary and fed a byte at a time, what is held
 * back while streaming, unclosed and malformed markup, several calls, tools not offered; and the format
 * detection from the fixture templates. With the fetched tokenizers and templates (.cache/tokenizers,
 * .cache/templates) it checks the detection on real models instead, exiting 77 when they are absent.
 * Usage: test_chat_parse FIXTURES_DIR | test_chat_parse --real TOKENIZERS_DIR TEMPLATES_DIR */
#include "text/chat_parse.h"
#include "text/template.h"
#include "base/file.h"
#include "../check.h"

#include <stdlib.h>
#include <string.h>

/* A transcript of deltas: "|C:" content, "|R:" reasoning (adjacent deltas of a kind merged), and
 * "{T<index> <name> <arguments>}" for each call. */
typedef struct transcript {
    char s[8192];
    size_t n;
    int last;
    int empty_deltas;
    int stop_after;     /* > 0: on_delta asks to stop at this delta */
    int deltas;
} transcript;

static void put(transcript *t, const char *s, size_t n) {
    if (t->n + n >= sizeof t->s) n = sizeof t->s - 1 - t->n;
    memcpy(t->s + t->n, s, n);
    t->n += n;
    t->s[t->n] = 0;
}

static int on_delta(const cinfer_chat_delta *d, void *user) {
    transcript *t = user;
    t->deltas++;
    if (d->kind == CINFER_DELTA_TOOL_CALL) {
        char head[64];
        snprintf(head, sizeof head, "{T%d ", (int)d->tool_index);
        put(t, head, strlen(head));
        put(t, d->tool_name, strlen(d->tool_name));
        put(t, " ", 1);
        put(t, d->tool_arguments, strlen(d->tool_arguments));
        put(t, "}", 1);
        t->last = -1;
    } else {
        if (!d->text_len) t->empty_deltas++;
        if (t->last != (int)d->kind) put(t, d->kind == CINFER_DELTA_CONTENT ? "|C:" : "|R:", 3);
        put(t, d->text, d->text_len);
        t->last = (int)d->kind;
    }
    return t->stop_after > 0 && t->deltas >= t->stop_after;
}

typedef struct setup {
    cf_chat_format f;
    int tools, reasoning, in_reasoning;
} setup;

static cinfer_chat_parser *make(const setup *su) {
    cinfer_chat_parser *p = NULL;
    cinfer_error err = {0};
    cinfer_status st = cf_chat_parser_new(&su->f, su->tools, su->reasoning, su->in_reasoning, &p, &err);
    CHECK(st == CINFER_OK && p, "parser: %s", err.message);
    return p;
}

/* Feeds text in pieces that end at the given cut points (ascending), then finishes. */
static void run_cuts(const setup *su, const char *text, const size_t *cuts, int n_cuts, transcript *t) {
    memset(t, 0, sizeof *t);
    t->last = -2;
    cinfer_chat_parser *p = make(su);
    if (!p) return;
    cinfer_error err = {0};
    size_t at = 0, len = strlen(text);
    for (int i = 0; i <= n_cuts; i++) {
        size_t to = i < n_cuts ? cuts[i] : len;
        cinfer_status st = cinfer_chat_parser_feed(p, text + at, to - at, on_delta, t, &err);
        CHECK(st == CINFER_OK, "feed: %s", err.message);
        at = to;
    }
    cinfer_status st = cinfer_chat_parser_finish(p, on_delta, t, &err);
    CHECK(st == CINFER_OK, "finish: %s", err.message);
    cinfer_chat_parser_free(p);
}

/* The reply as one feed gives want; split at every byte boundary, and a byte at a time, the same. */
static void expect(const setup *su, const char *text, const char *want) {
    transcript whole, t;
    run_cuts(su, text, NULL, 0, &whole);
    CHECK(strcmp(whole.s, want) == 0, "reply %s\n  got  %s\n  want %s", text, whole.s, want);
    CHECK(whole.empty_deltas == 0, "reply %s: %d empty deltas", text, whole.empty_deltas);
    size_t len = strlen(text);
    int bad = 0;
    for (size_t c = 1; c < len && !bad; c++) {
        run_cuts(su, text, &c, 1, &t);
        if (strcmp(t.s, whole.s) != 0 || t.empty_deltas) {
            bad = 1;
            CHECK(0, "reply %s split at %zu\n  got  %s\n  want %s", text, c, t.s, whole.s);
        }
    }
    size_t *cuts = malloc(len * sizeof *cuts);
    for (size_t c = 1; c < len; c++) cuts[c - 1] = c;
    run_cuts(su, text, cuts, len ? (int)len - 1 : 0, &t);
    CHECK(strcmp(t.s, whole.s) == 0 && !t.empty_deltas, "reply %s byte by byte\n  got  %s\n  want %s", text, t.s, whole.s);
    free(cuts);
}

/* Fed text without finishing, the parser has handed out want (text held back only while it may be markup). */
static void expect_streamed(const setup *su, const char *text, const char *want) {
    transcript t = {.last = -2};
    cinfer_chat_parser *p = make(su);
    if (!p) return;
    cinfer_error err = {0};
    CHECK(cinfer_chat_parser_feed(p, text, strlen(text), on_delta, &t, &err) == CINFER_OK, "feed: %s", err.message);
    CHECK(strcmp(t.s, want) == 0, "streamed %s\n  got  %s\n  want %s", text, t.s, want);
    cinfer_chat_parser_free(p);
}

static const setup QWEN = {{CF_REASONING_THINK, CF_TOOLS_HERMES, 0, 0}, 1, 1, 0};

static void check_hermes_think(void) {
    expect(&QWEN,
           "<think>\nThe user wants the weather.\n</think>\n\nI'll look it up.\n<tool_call>\n{\"name\": \"get_weather\", "
           "\"arguments\": {\"city\": \"Zürich\", \"days\": 2}}\n</tool_call>\n<tool_call>\n{\"name\": \"search\", "
           "\"arguments\": {\"q\": \"föhn\"}}\n</tool_call>",
           "|R:The user wants the weather.\n|C:I'll look it up.\n{T0 get_weather {\"city\":\"Zürich\",\"days\":2}}"
           "{T1 search {\"q\":\"föhn\"}}");
    expect(&QWEN, "Plain answer, no markup at all: a < b > c [x] {y}.",
           "|C:Plain answer, no markup at all: a < b > c [x] {y}.");
    expect(&QWEN, "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": [1, 2.5]}\"}</tool_call>",
           "{T0 f {\"a\":[1,2.5]}}");
    expect(&QWEN, "<tool_call>{\"name\": \"now\"}</tool_call> and then", "{T0 now {}}|C:and then");
    expect(&QWEN, "Sure <tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\"",
           "|C:Sure <tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\"");
    expect(&QWEN, "A <tool_call>not json</tool_call> B", "|C:A <tool_call>not json</tool_call> B");
    expect(&QWEN, "<tool_call>{\"name\": \"f\", \"arguments\": [1]}</tool_call>",
           "|C:<tool_call>{\"name\": \"f\", \"arguments\": [1]}</tool_call>");
    expect(&QWEN, "<tool_call>{\"arguments\": {}}</tool_call>", "|C:<tool_call>{\"arguments\": {}}</tool_call>");
    expect(&QWEN, "<think>unclosed reasoning <tool_call>{\"name\": \"f\"}</tool_call>",
           "|R:unclosed reasoning <tool_call>{\"name\": \"f\"}</tool_call>");
    expect(&QWEN, "ends with a partial marker <tool_ca", "|C:ends with a partial marker <tool_ca");
    expect(&QWEN, "ends with <thin", "|C:ends with <thin");
    expect(&QWEN, "<think></think>", "");
    expect(&QWEN, "<think>a</think>b<think>c</think>d", "|R:a|C:b|R:c|C:d");

    setup no_tools = QWEN;
    no_tools.tools = 0;
    expect(&no_tools, "<think>x</think>y <tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>",
           "|R:x|C:y <tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>");
    setup no_reasoning = QWEN;
    no_reasoning.reasoning = 0;
    expect(&no_reasoning, "<think>x</think>y", "|C:<think>x</think>y");
    setup opened = QWEN;
    opened.in_reasoning = 1;
    expect(&opened, "\nstill thinking\n</think>\n\nAnswer.", "|R:still thinking\n|C:Answer.");
    expect(&opened, "never closed", "|R:never closed");

    expect_streamed(&QWEN, "Hello <tool", "|C:Hello ");
    expect_streamed(&QWEN, "Hello <b>world</b>", "|C:Hello <b>world</b>");
    expect_streamed(&QWEN, "Hi <think>abc</th", "|C:Hi |R:abc");
    expect_streamed(&QWEN, "Hi <tool_call>{\"name\": \"f\"", "|C:Hi ");
}

static void check_llama3(void) {
    const setup L = {{CF_REASONING_NONE, CF_TOOLS_LLAMA3, 0, 0}, 1, 1, 0};
    expect(&L, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Bern\", \"unit\": \"celsius\"}}",
           "{T0 get_weather {\"city\":\"Bern\",\"unit\":\"celsius\"}}");
    expect(&L, "<|python_tag|>{\"name\": \"f\", \"parameters\": {}}", "{T0 f {}}");
    expect(&L, "\n {\"name\": \"a\", \"parameters\": {\"s\": \"}{\\\"\"}}; {\"name\": \"b\", \"arguments\": {}}",
           "{T0 a {\"s\":\"}{\\\"\"}}{T1 b {}}");
    expect(&L, "{\"name\": \"a\", \"parameters\": {}}\n\nDone.", "{T0 a {}}|C:Done.");
    expect(&L, "Hello {\"name\": \"a\", \"parameters\": {}}", "|C:Hello {\"name\": \"a\", \"parameters\": {}}");
    expect(&L, "{\"answer\": 42} is the JSON", "|C:{\"answer\": 42} is the JSON");
    expect(&L, "{\"name\": \"a\", \"parameters\": {", "|C:{\"name\": \"a\", \"parameters\": {");
    expect(&L, "<|python_tag|>print(1)", "|C:<|python_tag|>print(1)");
    expect(&L, "  \n", "|C:  \n");
    const setup no_tools = {{CF_REASONING_NONE, CF_TOOLS_LLAMA3, 0, 0}, 0, 1, 0};
    expect(&no_tools, "{\"name\": \"a\", \"parameters\": {}}", "|C:{\"name\": \"a\", \"parameters\": {}}");
    expect_streamed(&L, "  ", "");
    expect_streamed(&L, "Hi there", "|C:Hi there");
    expect_streamed(&L, "{\"name\": \"a\"", "");
}

static void check_mistral(void) {
    const setup M = {{CF_REASONING_NONE, CF_TOOLS_MISTRAL, 0, 1}, 1, 1, 0};
    expect(&M, "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, {\"name\": \"search\", "
               "\"arguments\": {\"q\": \"a [b] c\"}, \"id\": \"abcdefghi\"}]",
           "{T0 get_weather {\"city\":\"Paris\"}}{T1 search {\"q\":\"a [b] c\"}}");
    expect(&M, "Let me see. [TOOL_CALLS] [{\"name\": \"f\", \"arguments\": {}}]", "|C:Let me see. {T0 f {}}");
    expect(&M, "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]search[ARGS]{\"q\": \"x\"}",
           "{T0 get_weather {\"city\":\"Paris\"}}{T1 search {\"q\":\"x\"}}");
    expect(&M, "[TOOL_CALLS]f[CALL_ID]a1b2c3d4e[ARGS] {}", "{T0 f {}}");
    expect(&M, "[TOOL_CALLS] oops, no call", "|C:[TOOL_CALLS] oops, no call");
    expect(&M, "[TOOL_CALLS][{\"name\": 5}]", "|C:[TOOL_CALLS][{\"name\": 5}]");
    expect(&M, "[TOOL_CALLS][{\"name\": \"f\"", "|C:[TOOL_CALLS][{\"name\": \"f\"");
    expect(&M, "[TOOL_CALLS]f[ARGS]{\"a\": 1", "|C:[TOOL_CALLS]f[ARGS]{\"a\": 1");
    expect(&M, "[TOOL_CALLS]f[ARG]{}", "|C:[TOOL_CALLS]f[ARG]{}");
    expect(&M, "[TOOL_CALLS]f[ARGS]\"text\" after", "|C:[TOOL_CALLS]f[ARGS]\"text\" after");
    expect(&M, "an array [1, 2] and [TOOL", "|C:an array [1, 2] and [TOOL");
    const setup M_no_tools = {{CF_REASONING_NONE, CF_TOOLS_MISTRAL, 0, 1}, 0, 1, 0};
    expect(&M_no_tools, "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {}}]",
           "|C:[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {}}]");
    expect_streamed(&M, "x [TOOL_CA", "|C:x ");
    expect_streamed(&M, "x [TOOL_CALLS]get_", "|C:x ");
}

static void check_gemma(void) {
    const setup G = {{CF_REASONING_CHANNEL, CF_TOOLS_GEMMA4, 1, 1}, 1, 1, 0};
    expect(&G, "<|channel>thought\nCheck the weather.<channel|>Let me check.<|tool_call>call:get_weather{city:<|\"|>Zürich, "
               "{CH}<|\"|>,days:2,ok:true,none:null,tags:[<|\"|>a<|\"|>,<|\"|>b<|\"|>],opt:{x:1.5,y:-3}}<tool_call|>"
               "<|tool_call>call:ping{}<tool_call|>",
           "|R:Check the weather.|C:Let me check.{T0 get_weather {\"city\":\"Zürich, {CH}\",\"days\":2,\"ok\":true,"
           "\"none\":null,\"tags\":[\"a\",\"b\"],\"opt\":{\"x\":1.5,\"y\":-3}}}{T1 ping {}}");
    expect(&G, "<|tool_call>call:tools.shell-exec{cmd:<|\"|>ls -l<|\"|>,n:\"quoted\",w:bare word}<tool_call|>",
           "{T0 tools.shell-exec {\"cmd\":\"ls -l\",\"n\":\"quoted\",\"w\":\"bare word\"}}");
    expect(&G, "<|tool_call>call:bad name{}<tool_call|>", "|C:<|tool_call>call:bad name{}<tool_call|>");
    expect(&G, "<|tool_call>get_weather{}<tool_call|>", "|C:<|tool_call>get_weather{}<tool_call|>");
    expect(&G, "<|tool_call>call:f{a:<|\"|>open}<tool_call|>", "|C:<|tool_call>call:f{a:<|\"|>open}<tool_call|>");
    expect(&G, "<|tool_call>call:f{a:1", "|C:<|tool_call>call:f{a:1");
    expect(&G, "<|channel>thought\n<channel|>Hi", "|C:Hi");

    const setup G_no_tools = {{CF_REASONING_CHANNEL, CF_TOOLS_GEMMA4, 1, 1}, 0, 1, 0};
    expect(&G_no_tools, "<|channel>thought\nx<channel|><|tool_call>call:ping{}<tool_call|>",
           "|R:x|C:<|tool_call>call:ping{}<tool_call|>");

    const setup FG = {{CF_REASONING_NONE, CF_TOOLS_FUNCTIONGEMMA, 0, 1}, 1, 1, 0};
    expect(&FG, "<start_function_call>call:read_file{max_chars:500,path:<escape>notes, v2.txt<escape>}<end_function_call>",
           "{T0 read_file {\"max_chars\":500,\"path\":\"notes, v2.txt\"}}");
    expect(&FG, "<start_function_call>call:pwd{}<end_function_call>", "{T0 pwd {}}");
    const setup FG_no_tools = {{CF_REASONING_NONE, CF_TOOLS_FUNCTIONGEMMA, 0, 1}, 0, 1, 0};
    expect(&FG_no_tools, "<start_function_call>call:pwd{}<end_function_call>",
           "|C:<start_function_call>call:pwd{}<end_function_call>");
}

/* Random replies built from markup fragments, on every format: any split gives the deltas of one feed. */
static void check_random_splits(void) {
    static const char *const pieces[] = {
        "<think>", "</think>", "<tool_call>", "</tool_call>", "<|python_tag|>", "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]",
        "<|tool_call>", "<tool_call|>", "<|\"|>", "<start_function_call>", "<end_function_call>", "<escape>",
        "<|channel>thought", "<channel|>", "call:f", "{\"name\": \"f\", \"arguments\": {\"a\": 1}}",
        "[{\"name\": \"g\", \"arguments\": {}}]", "{", "}", "[", "]", "\"", "\\", ":", ",", ";", " ", "\n", "abc",
        "é", "<", "<tool", "[TOOL", "f", "x:1",
    };
    const int n_pieces = (int)(sizeof pieces / sizeof pieces[0]);
    const setup formats[] = {
        QWEN,
        {{CF_REASONING_NONE, CF_TOOLS_LLAMA3, 0, 0}, 1, 1, 0},
        {{CF_REASONING_NONE, CF_TOOLS_MISTRAL, 0, 1}, 1, 1, 0},
        {{CF_REASONING_CHANNEL, CF_TOOLS_GEMMA4, 1, 1}, 1, 1, 0},
        {{CF_REASONING_NONE, CF_TOOLS_FUNCTIONGEMMA, 0, 1}, 1, 1, 1},
    };
    unsigned seed = 12345;
    int bad = 0;
    for (int round = 0; round < 400 && !bad; round++) {
        char reply[1024] = "";
        size_t len = 0;
        for (int k = (int)((seed = seed * 1103515245u + 12345u) >> 16) % 24; k >= 0; k--) {
            const char *pc = pieces[((seed = seed * 1103515245u + 12345u) >> 16) % n_pieces];
            if (len + strlen(pc) >= sizeof reply) break;
            memcpy(reply + len, pc, strlen(pc) + 1);
            len += strlen(pc);
        }
        const setup *su = &formats[round % 5];
        transcript whole, t;
        run_cuts(su, reply, NULL, 0, &whole);
        size_t cuts[8];
        int n_cuts = 0;
        for (size_t c = 1; c < len && n_cuts < 8; c += 1 + ((seed = seed * 1103515245u + 12345u) >> 16) % 7) cuts[n_cuts++] = c;
        run_cuts(su, reply, cuts, n_cuts, &t);
        if (strcmp(t.s, whole.s) != 0 || t.empty_deltas || whole.empty_deltas) {
            bad = 1;
            CHECK(0, "random reply %s (format %d)\n  split %s\n  whole %s", reply, round % 5, t.s, whole.s);
        }
    }
    CHECK(!bad, "random splits");
}

static void check_cancel(void) {
    cinfer_chat_parser *p = make(&QWEN);
    transcript t = {.last = -2, .stop_after = 1};
    cinfer_error err = {0};
    const char *r = "<think>a</think>b";
    cinfer_status st = cinfer_chat_parser_feed(p, r, strlen(r), on_delta, &t, &err);
    CHECK(st == CINFER_E_CANCELLED && t.deltas == 1, "a consumer that stops: %d after %d deltas", (int)st, t.deltas);
    CHECK(cinfer_chat_parser_feed(p, NULL, 3, on_delta, &t, &err) == CINFER_E_INVALID_ARGUMENT, "NULL text is refused");
    CHECK(cinfer_chat_parser_finish(p, NULL, NULL, &err) == CINFER_E_INVALID_ARGUMENT, "NULL on_delta is refused");
    cinfer_chat_parser_free(p);
}

static char *read_template(const char *dir, const char *name) {
    char path[4096];
    snprintf(path, sizeof path, "%s/templates/%s", dir, name);
    return cf_read_file(path, NULL);
}

static void check_detect(const char *fixtures) {
    static const struct { const char *file; cf_reasoning_syntax r; cf_tool_syntax t; } files[] = {
        {"qwen3.jinja", CF_REASONING_THINK, CF_TOOLS_HERMES},
        {"mistral_v03.jinja", CF_REASONING_NONE, CF_TOOLS_MISTRAL},
        {"chatml.jinja", CF_REASONING_NONE, CF_TOOLS_NONE},
    };
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char *src = read_template(fixtures, files[i].file);
        CHECK(src != NULL, "fixture %s", files[i].file);
        cf_chat_format f = cf_chat_format_detect(src, NULL);
        CHECK(f.reasoning == files[i].r && f.tools == files[i].t, "%s: reasoning %s, tools %s", files[i].file,
              cf_reasoning_syntax_name(f.reasoning), cf_tool_syntax_name(f.tools));
        free(src);
    }
    static const struct { const char *src; cf_reasoning_syntax r; cf_tool_syntax t; } snippets[] = {
        {"{{ '<|turn>model\\n' }}{% if tools %}<|tool_call>call:{% endif %}<|channel>", CF_REASONING_CHANNEL, CF_TOOLS_GEMMA4},
        {"<start_function_call>call:", CF_REASONING_NONE, CF_TOOLS_FUNCTIONGEMMA},
        {"Respond in the format {\"name\": function name, \"parameters\": dictionary of argument name and its value}",
         CF_REASONING_NONE, CF_TOOLS_LLAMA3},
        {"{{- '<|python_tag|>' + tool_call.name }}", CF_REASONING_NONE, CF_TOOLS_LLAMA3},
        {"<｜Assistant｜><think>\\n", CF_REASONING_THINK, CF_TOOLS_NONE},
        {NULL, CF_REASONING_NONE, CF_TOOLS_NONE},
    };
    for (size_t i = 0; i < sizeof snippets / sizeof snippets[0]; i++) {
        cf_chat_format f = cf_chat_format_detect(snippets[i].src, NULL);
        CHECK(f.reasoning == snippets[i].r && f.tools == snippets[i].t, "snippet %zu: reasoning %s, tools %s", i,
              cf_reasoning_syntax_name(f.reasoning), cf_tool_syntax_name(f.tools));
        CHECK(!f.reasoning_special && !f.tools_special, "snippet %zu: no vocabulary, nothing special", i);
    }

    const cf_chat_format think = {CF_REASONING_THINK, CF_TOOLS_HERMES, 0, 0}, plain = {0};
    static const struct { const char *prompt; int opens; } prompts[] = {
        {"<|im_start|>assistant\n<think>\n", 1},
        {"<|im_start|>assistant\n<think>", 1},
        {"<|im_start|>assistant\n<think>\n\n</think>\n\n", 0},
        {"<|im_start|>user\nwhat is <think>?<|im_end|>\n<|im_start|>assistant\n", 0},
        {"<think> prefilled", 0},
        {"", 0},
    };
    for (size_t i = 0; i < sizeof prompts / sizeof prompts[0]; i++) {
        const char *s = prompts[i].prompt;
        CHECK(cf_chat_prompt_opens_reasoning(&think, s, strlen(s)) == prompts[i].opens, "prompt %zu opens reasoning: %d",
              i, prompts[i].opens);
        CHECK(!cf_chat_prompt_opens_reasoning(&plain, s, strlen(s)), "prompt %zu: no reasoning syntax", i);
    }
    const cf_chat_format gemma = {CF_REASONING_CHANNEL, CF_TOOLS_GEMMA4, 1, 1};
    const char *g1 = "<|turn>model\n<|channel>thought\n", *g2 = "<|turn>model\n<|channel>thought\n<channel|>";
    CHECK(cf_chat_prompt_opens_reasoning(&gemma, g1, strlen(g1)) && !cf_chat_prompt_opens_reasoning(&gemma, g2, strlen(g2)),
          "Gemma's thought channel in the prompt");
}

/* Real vocabularies and templates: which markers exist and which are special tokens. */
static int check_real(const char *toks, const char *tmpls) {
    static const struct {
        const char *tok, *tmpl; /* folders under toks and tmpls */
        cf_reasoning_syntax r;
        cf_tool_syntax t;
    } models[] = {
        {"qwen3", NULL, CF_REASONING_THINK, CF_TOOLS_HERMES},  /* its template is in the tokenizer folder */
        {"llama3", "llama3", CF_REASONING_NONE, CF_TOOLS_NONE}, /* Llama 3.0: no tool calls */
        {"llama3", "llama3_2", CF_REASONING_NONE, CF_TOOLS_LLAMA3},
        {"gemma3", "gemma3", CF_REASONING_NONE, CF_TOOLS_NONE},
    };
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
        char td[4096], cd[4096];
        snprintf(td, sizeof td, "%s/%s", toks, models[i].tok);
        snprintf(cd, sizeof cd, "%s/%s", models[i].tmpl ? tmpls : toks, models[i].tmpl ? models[i].tmpl : models[i].tok);
        cf_tokenizer *tok = NULL;
        cf_chat_template *ct = NULL;
        cinfer_error err = {0};
        if (cf_tokenizer_load(td, &tok, &err) != CINFER_OK || cf_chat_template_load(cd, NULL, &ct, &err) != CINFER_OK) {
            fprintf(stderr, "%s / %s not available (%s): skipped\n", td, cd, err.message);
            cf_tokenizer_free(tok);
            return 77;
        }
        cf_chat_format f = cf_chat_format_detect(cf_chat_template_source(ct), tok);
        CHECK(f.reasoning == models[i].r && f.tools == models[i].t && !f.reasoning_special && !f.tools_special,
              "%s: reasoning %s (special %d), tools %s (special %d)", cd, cf_reasoning_syntax_name(f.reasoning),
              f.reasoning_special, cf_tool_syntax_name(f.tools), f.tools_special);
        cf_chat_format by_vocab = cf_chat_format_detect(NULL, tok);
        CHECK(by_vocab.reasoning == (i == 0 ? CF_REASONING_THINK : CF_REASONING_NONE) &&
              by_vocab.tools == (i == 0 ? CF_TOOLS_HERMES : CF_TOOLS_NONE), "%s: from the vocabulary alone", td);
        cf_chat_template_free(ct);
        cf_tokenizer_free(tok);
    }
    printf("%d checks, %d failures\n", checks, failures);
    return failures != 0;
}

int main(int argc, char **argv) {
    if (argc == 4 && !strcmp(argv[1], "--real")) return check_real(argv[2], argv[3]);
    if (argc < 2) {
        fprintf(stderr, "usage: %s FIXTURES_DIR\n", argv[0]);
        return 2;
    }
    check_hermes_think();
    check_llama3();
    check_mistral();
    check_gemma();
    check_random_splits();
    check_cancel();
    check_detect(argv[1]);
    printf("%d checks, %d failures\n", checks, failures);
    return failures != 0;
}
