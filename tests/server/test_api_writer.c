/* test_api_writer.c: the bytes api.h's writers produce for small synthetic replies (events and results the
 * test constructs), for each API, streaming and not, with logprobs, reasoning, tool calls, stop sequences
 * and failed choices. The tiny model's template is replaced by one that names <think> and <tool_call>, so
 * the chat parser splits reasoning and Hermes tool calls out.
 *   test_api_writer TMP_DIR   writes the tiny model into TMP_DIR */
#include "check.h"
#include "server/api.h"
#include "tiny_model.h"

#include <stdlib.h>
#include <string.h>

static cinfer_model *model;
static const cf_api_limits LIM = {.max_tokens_cap = 64, .max_choices = 8, .max_tools = 4};
static const cf_api_meta META = {.id = "resp-1", .created = 1700000000, .model = "tiny", .fingerprint = "fp_test"};

static const char TEMPLATE[] =
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
    "{% if false %}<think></think><tool_call></tool_call>{% endif %}"
    "{% if messages[0]['content'] == 'boom' %}{{ raise_exception('no boom here') }}{% endif %}";

static int write_template(const char *dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fprintf(f, "{\"add_bos_token\":false,\"bos_token\":null,\"eos_token\":\"<|im_end|>\",\"pad_token\":\"<|endoftext|>\","
               "\"chat_template\":\"");
    for (const char *p = TEMPLATE; *p; p++) {
        if (*p == '"' || *p == '\\') fputc('\\', f);
        fputc(*p, f);
    }
    fprintf(f, "\"}");
    return fclose(f);
}

static int32_t id_of(unsigned char byte) {
    return TINY_BYTE + byte;
}

/* A reply: the text of each event (one token each), logprobs when asked for, and the result. */
typedef struct reply {
    const char *pieces[16];
    int logprobs;                /* attach logprobs, with this many alternatives + 1 */
    cinfer_finish finish;
    cinfer_outcome outcome;
    const char *spelled;         /* what the tokens spell when it differs from the text (a stop string) */
    int prompt_tokens, cached_tokens;
    int draft_tokens, accepted_tokens;   /* speculative decoding */
} reply;

typedef struct built {
    char text[512];
    int32_t tokens[512];
    cinfer_logprobs lp[512];
    size_t n;
    cinfer_result res;
} built;

/* Token k of every reply: logprob -(k + 1) / 4, alternatives the token itself and 'x' at -4. */
static void build(const reply *rp, built *b) {
    memset(b, 0, sizeof *b);
    for (int i = 0; rp->pieces[i]; i++) strcat(b->text, rp->pieces[i]);
    const char *spelled = rp->spelled ? rp->spelled : b->text;
    for (const char *p = spelled; *p; p++, b->n++) {
        b->tokens[b->n] = id_of((unsigned char)*p);
        cinfer_logprobs *l = &b->lp[b->n];
        l->token = b->tokens[b->n];
        l->logprob = -(float)(b->n + 1) / 4;
        l->n_top = rp->logprobs - 1;
        if (l->n_top > 0) l->top[0] = (cinfer_token_logprob){l->token, l->logprob};
        if (l->n_top > 1) l->top[1] = (cinfer_token_logprob){id_of('x'), -4};
    }
    b->res = (cinfer_result){.outcome = rp->outcome ? rp->outcome : CINFER_OUTCOME_COMPLETED,
                             .finish = rp->finish ? rp->finish : CINFER_FINISH_STOP,
                             .text = b->text,
                             .text_len = strlen(b->text),
                             .tokens = b->tokens,
                             .n_tokens = b->n,
                             .logprobs = rp->logprobs ? b->lp : NULL,
                             .usage = {.prompt_tokens = rp->prompt_tokens, .cached_tokens = rp->cached_tokens,
                                       .completion_tokens = (int32_t)b->n, .draft_tokens = rp->draft_tokens,
                                       .accepted_tokens = rp->accepted_tokens}};
    if (b->res.outcome == CINFER_OUTCOME_FAILED) snprintf(b->res.error.message, sizeof b->res.error.message, "the device fell over");
}

/* Streams the reply's events (a token per piece, then END with no text) of choice i. */
static void stream(cf_api_writer *w, int i, const reply *rp, const built *b, cf_buf *out) {
    size_t k = 0;
    for (int p = 0; rp->pieces[p]; p++, k++) {
        cinfer_event ev = {.kind = CINFER_EVENT_TOKEN, .index = (int32_t)k, .token = b->tokens[k], .text = rp->pieces[p],
                           .text_len = strlen(rp->pieces[p]), .logprobs = rp->logprobs ? &b->lp[k] : NULL};
        CHECK(cf_api_writer_event(w, i, &ev, out) == CINFER_OK, "event %zu", k);
    }
    cinfer_event end = {.kind = CINFER_EVENT_END, .text = "", .text_len = 0};
    CHECK(cf_api_writer_event(w, i, &end, out) == CINFER_OK, "END");
}

/* Writes the whole response of replies (one per choice) to out; returns the HTTP status. */
static int respond(cf_api_kind kind, const char *body, const reply *replies, cf_buf *out) {
    cf_api_request *r = NULL;
    cf_api_error e;
    if (cf_api_parse(kind, body, strlen(body), &LIM, model, &r, &e)) {
        CHECK(0, "parse: %s", e.message);
        return -1;
    }
    cf_api_writer *w = NULL;
    cinfer_error err;
    if (cf_api_writer_create(r, &(cf_api_meta){META.id, META.created, META.model, META.fingerprint, model}, &w, &err) != CINFER_OK) {
        CHECK(0, "writer: %s", err.message);
        cf_api_request_free(r);
        return -1;
    }
    static built b[8];
    for (int i = 0; i < r->n_reqs; i++) build(&replies[i], &b[i]);
    for (int i = 0; i < r->n_reqs; i++) cf_api_writer_set_prompt_tokens(w, i, b[i].res.usage.prompt_tokens);
    CHECK(cf_api_writer_begin(w, out) == CINFER_OK, "begin");
    for (int i = 0; i < r->n_reqs; i++) {
        stream(w, i, &replies[i], &b[i], out);
        CHECK(cf_api_writer_end_choice(w, i, &b[i].res, out) == CINFER_OK, "end_choice %d", i);
    }
    CHECK(cf_api_writer_finish(w, out) == CINFER_OK, "finish");
    int status = cf_api_writer_http_status(w);
    cf_api_writer_free(w);
    cf_api_request_free(r);
    return status;
}

/* Replaces every tool call id (call_ or toolu_ and 24 letters and digits) in s with ID<n>, checking
 * each id's shape and that distinct calls get distinct ids. */
static void mask_ids(char *s) {
    char seen[8][40];
    int n = 0;
    for (char *p = s; (p = strstr(p, "\"call_")) || (p = strstr(s, "\"toolu_"));) {
        char *q = p + 1, *tail = q + (q[0] == 'c' ? 5 : 6);
        int ok = 1;
        for (int k = 0; k < 24; k++) ok &= (tail[k] >= '0' && tail[k] <= '9') || (tail[k] >= 'A' && tail[k] <= 'Z') || (tail[k] >= 'a' && tail[k] <= 'z');
        CHECK(ok && tail[24] == '"', "tool id shape: %.40s", q);
        size_t len = (size_t)(tail + 24 - q);
        int which = -1;
        for (int k = 0; k < n; k++)
            if (!strncmp(seen[k], q, len)) which = k;
        if (which < 0 && n < 8) {
            snprintf(seen[n], sizeof seen[n], "%.*s", (int)len, q);
            which = n++;
        }
        char repl[8];
        snprintf(repl, sizeof repl, "ID%d", which);
        memmove(q + strlen(repl), q + len, strlen(q + len) + 1);
        memcpy(q, repl, strlen(repl));
    }
}

static void expect(const char *what, cf_buf *out, const char *want) {
    const char *got = out->len ? out->data : "";
    CHECK(!strcmp(got, want), "%s:\n--- got\n%s\n--- want\n%s", what, got, want);
    cf_buf_free(out);
}

#define HEAD "{\"id\":\"resp-1\",\"object\":\"chat.completion.chunk\",\"created\":1700000000,\"model\":\"tiny\",\"system_fingerprint\":\"fp_test\","
#define CHUNK(choice) "data: " HEAD "\"choices\":[" choice "]}\n\n"
#define CHUNKU(choice) "data: " HEAD "\"choices\":[" choice "],\"usage\":null}\n\n"

static void chat_stream(void) {
    cf_buf out = {0};
    reply rp[2] = {{.pieces = {"H", "\xc3", "\xa9"}, .logprobs = 3, .prompt_tokens = 9, .cached_tokens = 4},
                   {.pieces = {"o"}, .finish = CINFER_FINISH_LENGTH, .logprobs = 1, .prompt_tokens = 9, .cached_tokens = 9}};
    /* the second token's text is held back by the engine until the UTF-8 sequence completes; here the
     * events carry bytes as they come, and the parser passes them on */
    rp[0].pieces[1] = "";
    rp[0].pieces[2] = "\xc3\xa9";
    respond(CF_API_CHAT,
            "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"stream\":true,\"n\":2,\"logprobs\":true,\"top_logprobs\":2,"
            "\"stream_options\":{\"include_usage\":true}}",
            rp, &out);
    /* the tiny tokenizer spells "\xc3\xa9" as the tokens of its two bytes */
    expect("chat stream", &out,
           CHUNKU("{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,\"finish_reason\":null}")
           CHUNKU("{\"index\":1,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,\"finish_reason\":null}")
           CHUNKU("{\"index\":0,\"delta\":{\"content\":\"H\"},\"logprobs\":{\"content\":[{\"token\":\"H\",\"logprob\":-0.25,\"bytes\":[72],"
                  "\"top_logprobs\":[{\"token\":\"H\",\"logprob\":-0.25,\"bytes\":[72]},{\"token\":\"x\",\"logprob\":-4,\"bytes\":[120]}]}]},"
                  "\"finish_reason\":null}")
           CHUNKU("{\"index\":0,\"delta\":{\"content\":\"é\"},\"logprobs\":{\"content\":["
                  "{\"token\":\"\xef\xbf\xbd\",\"logprob\":-0.5,\"bytes\":[239,191,189],\"top_logprobs\":[{\"token\":\"\xef\xbf\xbd\","
                  "\"logprob\":-0.5,\"bytes\":[239,191,189]},{\"token\":\"x\",\"logprob\":-4,\"bytes\":[120]}]},"
                  "{\"token\":\"\xef\xbf\xbd\",\"logprob\":-0.75,\"bytes\":[239,191,189],\"top_logprobs\":[{\"token\":\"\xef\xbf\xbd\","
                  "\"logprob\":-0.75,\"bytes\":[239,191,189]},{\"token\":\"x\",\"logprob\":-4,\"bytes\":[120]}]}]},\"finish_reason\":null}")
           CHUNKU("{\"index\":0,\"delta\":{},\"logprobs\":null,\"finish_reason\":\"stop\"}")
           CHUNKU("{\"index\":1,\"delta\":{\"content\":\"o\"},\"logprobs\":{\"content\":[{\"token\":\"o\",\"logprob\":-0.25,\"bytes\":[111],"
                  "\"top_logprobs\":[]}]},\"finish_reason\":null}")
           CHUNKU("{\"index\":1,\"delta\":{},\"logprobs\":null,\"finish_reason\":\"length\"}")
           "data: " HEAD "\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":4,\"total_tokens\":13,"
           "\"prompt_tokens_details\":{\"cached_tokens\":4}}}\n\n"
           "data: [DONE]\n\n");
}

static const char TOOLS[] = "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\"}}}]";
static const reply THINK_TOOL = {
    .pieces = {"<think>", "plan", "</think>", "Let me ", "check.", "<tool_call>", "{\"name\": \"get_weather\", ",
               "\"arguments\": {\"city\": \"Paris\"}}", "</tool_call>"},
    .prompt_tokens = 20};

static void chat_stream_tools(void) {
    cf_buf out = {0};
    char body[512];
    snprintf(body, sizeof body, "{\"messages\":[{\"role\":\"user\",\"content\":\"weather?\"}],\"stream\":true,%s}", TOOLS);
    respond(CF_API_CHAT, body, &THINK_TOOL, &out);
    if (out.data) mask_ids(out.data), out.len = strlen(out.data);
    expect("chat stream with reasoning and a tool call", &out,
           CHUNK("{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,\"finish_reason\":null}")
           CHUNK("{\"index\":0,\"delta\":{\"reasoning_content\":\"plan\"},\"logprobs\":null,\"finish_reason\":null}")
           CHUNK("{\"index\":0,\"delta\":{\"content\":\"Let me \"},\"logprobs\":null,\"finish_reason\":null}")
           CHUNK("{\"index\":0,\"delta\":{\"content\":\"check.\"},\"logprobs\":null,\"finish_reason\":null}")
           CHUNK("{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"ID0\",\"type\":\"function\",\"function\":{\"name\":"
                 "\"get_weather\",\"arguments\":\"{\\\"city\\\":\\\"Paris\\\"}\"}}]},\"logprobs\":null,\"finish_reason\":null}")
           CHUNK("{\"index\":0,\"delta\":{},\"logprobs\":null,\"finish_reason\":\"tool_calls\"}")
           "data: [DONE]\n\n");

    /* without tools offered the markup is content */
    respond(CF_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stream\":true}",
            &(reply){.pieces = {"<tool_call>", "{}", "</tool_call>"}}, &out);
    CHECK(out.data && strstr(out.data, "\"content\":\"<tool_call>") && !strstr(out.data, "tool_calls"), "no tools: markup is text: %s",
          out.data ? out.data : "");
    cf_buf_free(&out);
}

#define BODY "{\"id\":\"resp-1\",\"object\":\"chat.completion\",\"created\":1700000000,\"model\":\"tiny\",\"system_fingerprint\":\"fp_test\","

static void chat_body(void) {
    cf_buf out = {0};
    char body[512];
    snprintf(body, sizeof body, "{\"messages\":[{\"role\":\"user\",\"content\":\"weather?\"}],%s}", TOOLS);
    CHECK(respond(CF_API_CHAT, body, &THINK_TOOL, &out) == 200, "status 200");
    if (out.data) mask_ids(out.data), out.len = strlen(out.data);
    expect("chat body with reasoning and a tool call", &out,
           BODY "\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"Let me check.\",\"reasoning_content\":"
                "\"plan\",\"tool_calls\":[{\"id\":\"ID0\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":"
                "\"{\\\"city\\\":\\\"Paris\\\"}\"}}]},\"logprobs\":null,\"finish_reason\":\"tool_calls\"}],"
                "\"usage\":{\"prompt_tokens\":20,\"completion_tokens\":110,\"total_tokens\":130,\"prompt_tokens_details\":{\"cached_tokens\":0}}}");

    respond(CF_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":true}",
            &(reply){.pieces = {"a", "b"}, .logprobs = 1, .finish = CINFER_FINISH_LENGTH, .prompt_tokens = 3, .cached_tokens = 1}, &out);
    expect("chat body with logprobs", &out,
           BODY "\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"ab\"},\"logprobs\":{\"content\":["
                "{\"token\":\"a\",\"logprob\":-0.25,\"bytes\":[97],\"top_logprobs\":[]},{\"token\":\"b\",\"logprob\":-0.5,\"bytes\":[98],"
                "\"top_logprobs\":[]}]},\"finish_reason\":\"length\"}],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2,"
                "\"total_tokens\":5,\"prompt_tokens_details\":{\"cached_tokens\":1}}}");

    /* speculative decoding: drafts in OpenAI's Predicted Outputs fields */
    respond(CF_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
            &(reply){.pieces = {"a", "b"}, .prompt_tokens = 3, .draft_tokens = 7, .accepted_tokens = 5}, &out);
    expect("chat body with speculative decoding", &out,
           BODY "\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"ab\"},\"logprobs\":null,"
                "\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2,\"total_tokens\":5,"
                "\"prompt_tokens_details\":{\"cached_tokens\":0},\"completion_tokens_details\":{\"accepted_prediction_tokens\":5,"
                "\"rejected_prediction_tokens\":2}}}");

    /* a tool call and no text: content is null */
    snprintf(body, sizeof body, "{\"messages\":[{\"role\":\"user\",\"content\":\"w\"}],%s}", TOOLS);
    respond(CF_API_CHAT, body, &(reply){.pieces = {"<tool_call>{\"name\": \"get_weather\", \"arguments\": {}}</tool_call>"}}, &out);
    CHECK(out.data && strstr(out.data, "\"message\":{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"call_") &&
              strstr(out.data, "\"arguments\":\"{}\"}}]}"),
          "content null beside tool calls: %s", out.data ? out.data : "");
    cf_buf_free(&out);
}

#define CHEAD "{\"id\":\"resp-1\",\"object\":\"text_completion\",\"created\":1700000000,\"model\":\"tiny\",\"system_fingerprint\":\"fp_test\","
#define CCHUNK(choice) "data: " CHEAD "\"choices\":[" choice "]}\n\n"

static void completions(void) {
    cf_buf out = {0};
    reply rp[2] = {{.pieces = {"A", "B"}, .logprobs = 3, .prompt_tokens = 2}, {.pieces = {"C"}, .logprobs = 3, .prompt_tokens = 3}};
    respond(CF_API_COMPLETIONS, "{\"prompt\":[\"p\",\"qq\"],\"stream\":true,\"logprobs\":2}", rp, &out);
    expect("completions stream", &out,
           CCHUNK("{\"text\":\"A\",\"index\":0,\"logprobs\":{\"tokens\":[\"A\"],\"token_logprobs\":[-0.25],\"top_logprobs\":"
                  "[{\"A\":-0.25,\"x\":-4}],\"text_offset\":[0]},\"finish_reason\":null}")
           CCHUNK("{\"text\":\"B\",\"index\":0,\"logprobs\":{\"tokens\":[\"B\"],\"token_logprobs\":[-0.5],\"top_logprobs\":"
                  "[{\"B\":-0.5,\"x\":-4}],\"text_offset\":[1]},\"finish_reason\":null}")
           CCHUNK("{\"text\":\"\",\"index\":0,\"logprobs\":null,\"finish_reason\":\"stop\"}")
           CCHUNK("{\"text\":\"C\",\"index\":1,\"logprobs\":{\"tokens\":[\"C\"],\"token_logprobs\":[-0.25],\"top_logprobs\":"
                  "[{\"C\":-0.25,\"x\":-4}],\"text_offset\":[0]},\"finish_reason\":null}")
           CCHUNK("{\"text\":\"\",\"index\":1,\"logprobs\":null,\"finish_reason\":\"stop\"}")
           "data: [DONE]\n\n");

    respond(CF_API_COMPLETIONS, "{\"prompt\":[\"p\",\"qq\"],\"logprobs\":1}", rp, &out);
    expect("completions body", &out,
           CHEAD "\"choices\":[{\"text\":\"AB\",\"index\":0,\"logprobs\":{\"tokens\":[\"A\",\"B\"],\"token_logprobs\":[-0.25,-0.5],"
                 "\"top_logprobs\":[{\"A\":-0.25,\"x\":-4},{\"B\":-0.5,\"x\":-4}],\"text_offset\":[0,1]},\"finish_reason\":\"stop\"},"
                 "{\"text\":\"C\",\"index\":1,\"logprobs\":{\"tokens\":[\"C\"],\"token_logprobs\":[-0.25],\"top_logprobs\":"
                 "[{\"C\":-0.25,\"x\":-4}],\"text_offset\":[0]},\"finish_reason\":\"stop\"}],"
                 "\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":3,\"total_tokens\":8,\"prompt_tokens_details\":{\"cached_tokens\":0}}}");

    /* echo, n 2 on a token prompt ("Hi"), streamed with usage: the prompt counts once */
    reply e[2] = {{.pieces = {"!"}, .prompt_tokens = 2}, {.pieces = {"?"}, .finish = CINFER_FINISH_LENGTH, .prompt_tokens = 2}};
    respond(CF_API_COMPLETIONS, "{\"prompt\":[75,108],\"echo\":true,\"n\":2,\"stream\":true,\"stream_options\":{\"include_usage\":true}}",
            e, &out);
#define CCHUNKU(choice) "data: " CHEAD "\"choices\":[" choice "],\"usage\":null}\n\n"
    expect("completions stream with echo", &out,
           CCHUNKU("{\"text\":\"Hi\",\"index\":0,\"logprobs\":null,\"finish_reason\":null}")
           CCHUNKU("{\"text\":\"Hi\",\"index\":1,\"logprobs\":null,\"finish_reason\":null}")
           CCHUNKU("{\"text\":\"!\",\"index\":0,\"logprobs\":null,\"finish_reason\":null}")
           CCHUNKU("{\"text\":\"\",\"index\":0,\"logprobs\":null,\"finish_reason\":\"stop\"}")
           CCHUNKU("{\"text\":\"?\",\"index\":1,\"logprobs\":null,\"finish_reason\":null}")
           CCHUNKU("{\"text\":\"\",\"index\":1,\"logprobs\":null,\"finish_reason\":\"length\"}")
           "data: " CHEAD "\"choices\":[],\"usage\":{\"prompt_tokens\":2,\"completion_tokens\":2,\"total_tokens\":4,"
           "\"prompt_tokens_details\":{\"cached_tokens\":0}}}\n\n"
           "data: [DONE]\n\n");
    respond(CF_API_COMPLETIONS, "{\"prompt\":[75,108],\"echo\":true}", e, &out);
    CHECK(out.data && strstr(out.data, "\"choices\":[{\"text\":\"Hi!\",\"index\":0,"), "echo in the body: %s", out.data ? out.data : "");
    cf_buf_free(&out);
}

#define EV(name, json) "event: " name "\ndata: " json "\n\n"
/* input_tokens: the session's prompt length (the reply's usage.prompt_tokens here) */
#define MSG_START(input)                                                                                                           \
    EV("message_start", "{\"type\":\"message_start\",\"message\":{\"id\":\"resp-1\",\"type\":\"message\",\"role\":\"assistant\","   \
                        "\"model\":\"tiny\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":" input \
                        ",\"output_tokens\":0}}}")

static void anthropic(void) {
    cf_buf out = {0};
    const char *body = "{\"max_tokens\":50,\"stream\":true,\"tools\":[{\"name\":\"get_weather\",\"input_schema\":{\"type\":\"object\"}}],"
                       "\"messages\":[{\"role\":\"user\",\"content\":\"weather?\"}]}";
    respond(CF_API_MESSAGES, body, &THINK_TOOL, &out);
    if (out.data) mask_ids(out.data), out.len = strlen(out.data);
    expect("messages stream", &out,
           MSG_START("20")
           EV("content_block_start", "{\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"thinking\","
                                     "\"thinking\":\"\",\"signature\":\"\"}}")
           EV("content_block_delta", "{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delta\","
                                     "\"thinking\":\"plan\"}}")
           EV("content_block_stop", "{\"type\":\"content_block_stop\",\"index\":0}")
           EV("content_block_start", "{\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}")
           EV("content_block_delta", "{\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"text_delta\",\"text\":\"Let me \"}}")
           EV("content_block_delta", "{\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"text_delta\",\"text\":\"check.\"}}")
           EV("content_block_stop", "{\"type\":\"content_block_stop\",\"index\":1}")
           EV("content_block_start", "{\"type\":\"content_block_start\",\"index\":2,\"content_block\":{\"type\":\"tool_use\",\"id\":\"ID0\","
                                     "\"name\":\"get_weather\",\"input\":{}}}")
           EV("content_block_delta", "{\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":\"input_json_delta\","
                                     "\"partial_json\":\"{\\\"city\\\":\\\"Paris\\\"}\"}}")
           EV("content_block_stop", "{\"type\":\"content_block_stop\",\"index\":2}")
           EV("message_delta", "{\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\",\"stop_sequence\":null},"
                               "\"usage\":{\"input_tokens\":20,\"cache_read_input_tokens\":0,\"output_tokens\":110}}")
           EV("message_stop", "{\"type\":\"message_stop\"}"));

    body = "{\"max_tokens\":50,\"tools\":[{\"name\":\"get_weather\",\"input_schema\":{\"type\":\"object\"}}],"
           "\"messages\":[{\"role\":\"user\",\"content\":\"weather?\"}]}";
    respond(CF_API_MESSAGES, body, &THINK_TOOL, &out);
    if (out.data) mask_ids(out.data), out.len = strlen(out.data);
    expect("messages body", &out,
           "{\"id\":\"resp-1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"tiny\",\"content\":["
           "{\"type\":\"thinking\",\"thinking\":\"plan\",\"signature\":\"\"},{\"type\":\"text\",\"text\":\"Let me check.\"},"
           "{\"type\":\"tool_use\",\"id\":\"ID0\",\"name\":\"get_weather\",\"input\":{\"city\":\"Paris\"}}],"
           "\"stop_reason\":\"tool_use\",\"stop_sequence\":null,\"usage\":{\"input_tokens\":20,\"cache_read_input_tokens\":0,"
           "\"output_tokens\":110}}");

    /* a stop sequence: the tokens spell it, the text stops before it */
    respond(CF_API_MESSAGES,
            "{\"max_tokens\":5,\"stop_sequences\":[\"ENDX\",\"END\"],\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
            &(reply){.pieces = {"Hi "}, .spelled = "Hi END", .prompt_tokens = 4, .cached_tokens = 3}, &out);
    expect("messages body ended by a stop sequence", &out,
           "{\"id\":\"resp-1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"tiny\",\"content\":[{\"type\":\"text\",\"text\":"
           "\"Hi \"}],\"stop_reason\":\"stop_sequence\",\"stop_sequence\":\"END\",\"usage\":{\"input_tokens\":1,"
           "\"cache_read_input_tokens\":3,\"output_tokens\":6}}");
    respond(CF_API_MESSAGES, "{\"max_tokens\":5,\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
            &(reply){.pieces = {"Hi"}, .finish = CINFER_FINISH_LENGTH, .prompt_tokens = 4}, &out);
    expect("messages stream ended by max_tokens", &out,
           MSG_START("4")
           EV("content_block_start", "{\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}")
           EV("content_block_delta", "{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}")
           EV("content_block_stop", "{\"type\":\"content_block_stop\",\"index\":0}")
           EV("message_delta", "{\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"max_tokens\",\"stop_sequence\":null},"
                               "\"usage\":{\"input_tokens\":4,\"cache_read_input_tokens\":0,\"output_tokens\":2}}")
           EV("message_stop", "{\"type\":\"message_stop\"}"));
}

static void failures_mid_stream(void) {
    cf_buf out = {0};
    reply rp[2] = {{.pieces = {"ok"}}, {.pieces = {"par"}, .outcome = CINFER_OUTCOME_FAILED, .prompt_tokens = 20}};
    respond(CF_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stream\":true,\"n\":2}", rp, &out);
    expect("chat stream with a failed choice", &out,
           CHUNK("{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,\"finish_reason\":null}")
           CHUNK("{\"index\":1,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,\"finish_reason\":null}")
           CHUNK("{\"index\":0,\"delta\":{\"content\":\"ok\"},\"logprobs\":null,\"finish_reason\":null}")
           CHUNK("{\"index\":0,\"delta\":{},\"logprobs\":null,\"finish_reason\":\"stop\"}")
           CHUNK("{\"index\":1,\"delta\":{\"content\":\"par\"},\"logprobs\":null,\"finish_reason\":null}")
           "data: {\"error\":{\"message\":\"generation failed: the device fell over\",\"type\":\"server_error\",\"param\":null,"
           "\"code\":null}}\n\n"
           "data: [DONE]\n\n");

    CHECK(respond(CF_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"n\":2}", rp, &out) == 500,
          "a failed choice fails a whole body with 500");
    expect("chat body with a failed choice", &out,
           "{\"error\":{\"message\":\"generation failed: the device fell over\",\"type\":\"server_error\",\"param\":null,\"code\":null}}");

    respond(CF_API_MESSAGES, "{\"max_tokens\":5,\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", &rp[1], &out);
    expect("messages stream that failed", &out,
           MSG_START("20")
           EV("content_block_start", "{\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}")
           EV("content_block_delta", "{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"par\"}}")
           EV("error", "{\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"generation failed: the device fell over\"}}"));

    reply cancelled = {.pieces = {"a"}, .outcome = CINFER_OUTCOME_CANCELLED};
    CHECK(respond(CF_API_MESSAGES, "{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", &cancelled, &out) == 503,
          "a cancelled body is 503");
    CHECK(out.data && strstr(out.data, "\"overloaded_error\"") && strstr(out.data, "cancelled"), "cancelled: %s", out.data ? out.data : "");
    cf_buf_free(&out);
}

/* A result whose text the events never carried (END not passed on) still reaches the stream. */
static void tail_from_result(void) {
    cf_api_request *r = NULL;
    cf_api_error e;
    const char *body = "{\"prompt\":\"p\",\"stream\":true}";
    CHECK(!cf_api_parse(CF_API_COMPLETIONS, body, strlen(body), &LIM, model, &r, &e), "parse");
    cf_api_writer *w = NULL;
    cf_api_meta meta = META;
    meta.m = model;
    CHECK(r && cf_api_writer_create(r, &meta, &w, NULL) == CINFER_OK, "writer");
    if (!w) return;
    cf_buf out = {0};
    cinfer_event ev = {.kind = CINFER_EVENT_TOKEN, .token = id_of('a'), .text = "a", .text_len = 1};
    int32_t toks[2] = {id_of('a'), id_of('b')};
    cinfer_result res = {.outcome = CINFER_OUTCOME_COMPLETED, .finish = CINFER_FINISH_LENGTH, .text = "ab", .text_len = 2,
                         .tokens = toks, .n_tokens = 2};
    cf_api_writer_begin(w, &out);
    cf_api_writer_event(w, 0, &ev, &out);
    cf_api_writer_end_choice(w, 0, &res, &out);
    cf_api_writer_finish(w, &out);
    expect("the tail from the result", &out,
           CCHUNK("{\"text\":\"a\",\"index\":0,\"logprobs\":null,\"finish_reason\":null}")
           CCHUNK("{\"text\":\"b\",\"index\":0,\"logprobs\":null,\"finish_reason\":null}")
           CCHUNK("{\"text\":\"\",\"index\":0,\"logprobs\":null,\"finish_reason\":\"length\"}")
           "data: [DONE]\n\n");
    cf_api_writer_free(w);
    cf_api_request_free(r);
}

/* A prompt the template refuses still gets a writer: the session's open reports the template's error. */
static void unrenderable(void) {
    const char *body = "{\"messages\":[{\"role\":\"user\",\"content\":\"boom\"}],\"stream\":true}";
    cf_api_request *r = NULL;
    cf_api_error e;
    CHECK(!cf_api_parse(CF_API_CHAT, body, strlen(body), &LIM, model, &r, &e), "parse");
    cf_api_writer *w = NULL;
    cf_api_meta meta = META;
    meta.m = model;
    cinfer_error err = {0};
    CHECK(r && cf_api_writer_create(r, &meta, &w, &err) == CINFER_OK, "a writer for an unrenderable prompt: %s", err.message);
    cinfer_engine *eng = NULL;
    cinfer_session *s = NULL;
    cinfer_session_params sp = cinfer_session_default_params();
    if (r && cinfer_engine_create(model, NULL, &eng, &err) == CINFER_OK) {
        cinfer_status st = cinfer_session_open(eng, &r->reqs[0], &sp, &s, &err);
        CHECK(st == CINFER_E_TEMPLATE && strstr(err.message, "no boom here"), "open reports the template: %s", err.message);
        cf_api_error ae;
        cf_api_error_from_status(CF_API_CHAT, st, err.message, &ae);
        CHECK(ae.status == 400 && !strcmp(ae.param, "messages"), "a 400 naming messages");
        if (st == CINFER_OK) cinfer_session_free(s);
        cinfer_engine_free(eng);
    }
    cf_api_writer_free(w);
    cf_api_request_free(r);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: test_api_writer TMP_DIR\n");
        return 2;
    }
    cinfer_error err;
    cinfer_model_params mp = cinfer_model_default_params();
    mp.n_threads = 1;
    if (tiny_model_write(argv[1], 0) || write_template(argv[1]) || cinfer_model_load(argv[1], &mp, &model, &err) != CINFER_OK) {
        fprintf(stderr, "cannot make the tiny model in %s: %s\n", argv[1], err.message);
        return 1;
    }
    chat_stream();
    chat_stream_tools();
    chat_body();
    completions();
    anthropic();
    failures_mid_stream();
    tail_from_result();
    unrenderable();
    cinfer_model_free(model);
    printf("%d checks, %d failures\n", checks, failures);
    return failures != 0;
}
