/* test_api.c: request parsing of api.h on the tiny model (vocab 259, context 128): every field's happy path
 * for chat completions, completions and Anthropic messages, each bad type or range refused with 400 and the
 * field named, deep JSON, invalid UTF-8, and the error bodies of both APIs.
 *   test_api TMP_DIR   writes the tiny model into TMP_DIR */
#include "check.h"
#include "server/api.h"
#include "tiny_model.h"

#include <stdlib.h>
#include <string.h>

static cinfer_model *model;
static const cf_api_limits LIM = {.max_tokens_cap = 64, .max_choices = 8, .max_tools = 4};

static cf_api_request *parse(cf_api_kind kind, const char *body) {
    cf_api_request *r = NULL;
    cf_api_error e;
    if (cf_api_parse(kind, body, strlen(body), &LIM, model, &r, &e)) {
        fprintf(stderr, "  parse failed (%d, %s): %s\n    body: %.200s\n", e.status, e.param, e.message, body);
        return NULL;
    }
    return r;
}

/* The body is refused with status and param (param "" = none named); the message mentions want. */
static void refused(cf_api_kind kind, const char *body, int status, const char *param, const char *want) {
    cf_api_request *r = NULL;
    cf_api_error e;
    int rc = cf_api_parse(kind, body, strlen(body), &LIM, model, &r, &e);
    CHECK(rc == -1 && !r, "accepted: %.200s", body);
    if (rc != -1) {
        cf_api_request_free(r);
        return;
    }
    CHECK(e.status == status, "status %d, not %d, for %.200s (%s)", e.status, status, body, e.message);
    CHECK(!strcmp(e.param, param), "param \"%s\", not \"%s\", for %.200s (%s)", e.param, param, body, e.message);
    CHECK(!want || strstr(e.message, want), "message \"%s\" lacks \"%s\"", e.message, want);
}

static void chat_happy(void) {
    cf_api_request *r = parse(CF_API_CHAT,
                              "{\"model\":\"m1\",\"messages\":[{\"role\":\"developer\",\"content\":\"be brief\"},"
                              "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"text\",\"text\":\"b\"}]}],"
                              "\"temperature\":0.5,\"top_p\":0.9,\"top_k\":-1,\"min_p\":0.1,\"presence_penalty\":1.5,"
                              "\"frequency_penalty\":-2,\"repetition_penalty\":1.1,\"logit_bias\":{\"7\":2,\"5\":150,\"7\":-3.5},"
                              "\"seed\":42,\"n\":3,\"stop\":\"\\n\\n\",\"logprobs\":true,\"top_logprobs\":2,\"stream\":true,"
                              "\"stream_options\":{\"include_usage\":true},\"max_tokens\":10,\"unknown_field\":{\"x\":[1]},"
                              "\"chat_template_kwargs\":{\"enable_thinking\":false},\"response_format\":{\"type\":\"text\"},"
                              "\"user\":\"u\"}");
    CHECK(r, "the full chat request parses");
    if (!r) return;
    CHECK(r->kind == CF_API_CHAT && r->n_reqs == 3 && r->stream && r->include_usage && !r->echo && !r->tools_offered,
          "request flags");
    CHECK(r->model && !strcmp(r->model, "m1"), "model echoed");
    for (int i = 0; i < 3; i++) {
        const cinfer_request *q = &r->reqs[i];
        CHECK(q->seed == 42 + i, "choice %d seed %lld", i, (long long)q->seed);
        CHECK(q->n_messages == 2 && !strcmp(q->messages[0].role, "system") && !strcmp(q->messages[0].content, "be brief"),
              "developer becomes system");
        CHECK(!strcmp(q->messages[1].content, "a\nb"), "text parts joined: \"%s\"", q->messages[1].content);
        CHECK(q->temperature == 0.5f && q->top_p == 0.9f && q->top_k == 0 && q->min_p == 0.1f, "sampling");
        CHECK(q->presence_penalty == 1.5f && q->frequency_penalty == -2.f && q->repetition_penalty == 1.1f, "penalties");
        CHECK(q->n_logit_bias == 2 && q->logit_bias[0].token == 5 && q->logit_bias[0].bias == 100.f &&
                  q->logit_bias[1].token == 7 && q->logit_bias[1].bias == -3.5f,
              "logit_bias clamped to 100; a repeated token keeps its last bias");
        CHECK(q->n_stop == 1 && !strcmp(q->stop[0], "\n\n"), "stop string");
        CHECK(q->logprobs && q->top_logprobs == 2, "logprobs");
        CHECK(q->max_tokens == 10 && !q->fit_context, "max_tokens");
        CHECK(q->template_kwargs_json && !strcmp(q->template_kwargs_json, "{\"enable_thinking\":false}"), "kwargs");
        CHECK(!q->tools_json && q->prompt_text == NULL && q->prompt_ids == NULL, "no tools, messages only");
    }
    cf_api_request_free(r);

    r = parse(CF_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}");
    CHECK(r && r->n_reqs == 1 && !r->stream && !r->model, "a minimal chat request");
    if (r) {
        CHECK(r->reqs[0].max_tokens == 64 && r->reqs[0].fit_context, "default max_tokens: the cap, fitted to the context");
        CHECK(r->reqs[0].seed < 0 && r->reqs[0].n_stop == 0 && !r->reqs[0].logprobs, "defaults");
        CHECK(r->reqs[0].temperature == cinfer_request_default().temperature, "default temperature");
    }
    cf_api_request_free(r);

    r = parse(CF_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"logprobs\":false,\"top_logprobs\":0}");
    CHECK(r && !r->reqs[0].logprobs && !r->reqs[0].top_logprobs, "top_logprobs 0 without logprobs");
    cf_api_request_free(r);

    r = parse(CF_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_completion_tokens\":7,\"max_tokens\":9,"
                           "\"stop\":[\"a\",\"bc\"],\"seed\":-1,\"top_p\":0,\"n\":2}");
    CHECK(r && r->reqs[0].max_tokens == 7, "max_completion_tokens wins over max_tokens");
    if (r) {
        CHECK(r->reqs[0].n_stop == 2 && !strcmp(r->reqs[0].stop[1], "bc"), "stop list");
        CHECK(r->reqs[0].seed == INT64_MAX && r->reqs[1].seed == 0, "a negative seed maps to a fixed seed; +1 wraps: %lld %lld",
              (long long)r->reqs[0].seed, (long long)r->reqs[1].seed);
        CHECK(r->reqs[0].temperature == 0, "top_p 0 is greedy");
    }
    cf_api_request_free(r);
}

static void chat_tools(void) {
    const char *tools = "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"d\","
                        "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}}}}},"
                        "{\"type\":\"function\",\"function\":{\"name\":\"noop\"}}]";
    char body[2048];
    snprintf(body, sizeof body,
             "{\"messages\":[{\"role\":\"user\",\"content\":\"weather?\"},"
             "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"call_1\",\"type\":\"function\","
             "\"function\":{\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\":\\\"Paris\\\"}\"}}]},"
             "{\"role\":\"tool\",\"tool_call_id\":\"call_1\",\"content\":\"sunny\"}],%s,\"tool_choice\":\"auto\"}",
             tools);
    cf_api_request *r = parse(CF_API_CHAT, body);
    CHECK(r && r->tools_offered, "tools offered");
    if (r) {
        const cinfer_request *q = &r->reqs[0];
        CHECK(q->tools_json && strstr(q->tools_json, "\"name\":\"get_weather\"") && strstr(q->tools_json, "\"noop\""), "tools_json");
        CHECK(q->n_messages == 3 && q->messages[1].content == NULL, "assistant content null with tool calls");
        CHECK(q->messages[1].tool_calls_json &&
                  !strcmp(q->messages[1].tool_calls_json, "[{\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":"
                                                          "\"get_weather\",\"arguments\":\"{\\\"city\\\":\\\"Paris\\\"}\"}}]"),
              "tool_calls_json: %s", q->messages[1].tool_calls_json ? q->messages[1].tool_calls_json : "(null)");
        CHECK(!strcmp(q->messages[2].role, "tool") && !strcmp(q->messages[2].tool_call_id, "call_1") &&
                  !strcmp(q->messages[2].content, "sunny"),
              "tool result");
    }
    cf_api_request_free(r);

    snprintf(body, sizeof body, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],%s,\"tool_choice\":\"none\"}", tools);
    r = parse(CF_API_CHAT, body);
    CHECK(r && !r->tools_offered && !r->reqs[0].tools_json, "tool_choice none hides the tools");
    cf_api_request_free(r);
    snprintf(body, sizeof body, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],%s,\"tool_choice\":\"required\"}", tools);
    r = parse(CF_API_CHAT, body);
    CHECK(r && r->tools_offered && r->reqs[0].tools_json, "tool_choice required offers the tools");
    cf_api_request_free(r);
    snprintf(body, sizeof body,
             "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],%s,\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"noop\"}}}",
             tools);
    r = parse(CF_API_CHAT, body);
    CHECK(r && r->tools_offered, "a named tool_choice offers the tools");
    cf_api_request_free(r);
    snprintf(body, sizeof body,
             "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],%s,\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"nope\"}}}",
             tools);
    refused(CF_API_CHAT, body, 400, "tool_choice.function.name", "not among the tools");
    refused(CF_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tool_choice\":\"required\"}", 400, "tool_choice", "no tools");
    refused(CF_API_CHAT,
            "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a\"}},"
            "{\"type\":\"function\",\"function\":{\"name\":\"b\"}},{\"type\":\"function\",\"function\":{\"name\":\"c\"}},"
            "{\"type\":\"function\",\"function\":{\"name\":\"d\"}},{\"type\":\"function\",\"function\":{\"name\":\"e\"}}]}",
            400, "tools", "at most 4");
}

#define U "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"

static void chat_refused(void) {
    static const struct {
        const char *body, *param, *want;
    } cases[] = {
        {U "\"temperature\":\"hot\"}", "temperature", "must be a number"},
        {U "\"temperature\":2.5}", "temperature", "[0, 2]"},
        {U "\"temperature\":-0.1}", "temperature", NULL},
        {U "\"top_p\":1.5}", "top_p", NULL},
        {U "\"top_p\":true}", "top_p", NULL},
        {U "\"top_k\":2.5}", "top_k", "integer"},
        {U "\"top_k\":-2}", "top_k", NULL},
        {U "\"min_p\":2}", "min_p", NULL},
        {U "\"presence_penalty\":3}", "presence_penalty", NULL},
        {U "\"frequency_penalty\":-2.5}", "frequency_penalty", NULL},
        {U "\"frequency_penalty\":\"1\"}", "frequency_penalty", NULL},
        {U "\"repetition_penalty\":0}", "repetition_penalty", NULL},
        {U "\"repetition_penalty\":-1}", "repetition_penalty", NULL},
        {U "\"logit_bias\":[1]}", "logit_bias", "object"},
        {U "\"logit_bias\":{\"abc\":1}}", "logit_bias.abc", "token ids"},
        {U "\"logit_bias\":{\"259\":1}}", "logit_bias.259", "[0, 259)"},
        {U "\"logit_bias\":{\"-1\":1}}", "logit_bias.-1", NULL},
        {U "\"logit_bias\":{\"+5\":1}}", "logit_bias.+5", NULL},
        {U "\"logit_bias\":{\" 5\":1}}", "logit_bias. 5", NULL},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":2,\"max_tokens\":1e300}", "max_tokens", NULL},
        {U "\"logit_bias\":{\"5\":\"x\"}}", "logit_bias.5", "number"},
        {U "\"seed\":1.5}", "seed", "integer"},
        {U "\"seed\":1e30}", "seed", NULL},
        {U "\"seed\":\"1\"}", "seed", NULL},
        {U "\"n\":0}", "n", NULL},
        {U "\"n\":9}", "n", "at most 8"},
        {U "\"n\":1e300}", "n", NULL},
        {U "\"stop\":5}", "stop", "string or an array"},
        {U "\"stop\":[\"a\",5]}", "stop[1]", "string"},
        {U "\"stop\":[\"\"]}", "stop[0]", "empty"},
        {U "\"stop\":[\"1\",\"2\",\"3\",\"4\",\"5\",\"6\",\"7\",\"8\",\"9\",\"10\",\"11\",\"12\",\"13\",\"14\",\"15\",\"16\",\"17\"]}",
         "stop", "at most 16"},
        {U "\"logprobs\":1}", "logprobs", "boolean"},
        {U "\"top_logprobs\":3}", "top_logprobs", "logprobs set to true"},
        {U "\"logprobs\":true,\"top_logprobs\":21}", "top_logprobs", NULL},
        {U "\"stream\":\"yes\"}", "stream", "boolean"},
        {U "\"stream_options\":true}", "stream_options", NULL},
        {U "\"stream_options\":{\"include_usage\":1}}", "stream_options.include_usage", NULL},
        {U "\"max_tokens\":0}", "max_tokens", NULL},
        {U "\"max_tokens\":65}", "max_tokens", "at most 64"},
        {U "\"max_tokens\":1.5}", "max_tokens", NULL},
        {U "\"max_completion_tokens\":\"5\"}", "max_completion_tokens", NULL},
        {U "\"model\":5}", "model", NULL},
        {U "\"response_format\":{\"type\":\"json_object\"}}", "response_format", "constrained decoding"},
        {U "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{}}}", "response_format", "not supported"},
        {U "\"response_format\":\"json\"}", "response_format", NULL},
        {U "\"chat_template_kwargs\":[1]}", "chat_template_kwargs", "object"},
        {U "\"tools\":{}}", "tools", "array"},
        {U "\"tools\":[{\"type\":\"retrieval\"}]}", "tools[0].type", NULL},
        {U "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"bad name\"}}]}", "tools[0].function.name", NULL},
        {U "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":[]}}]}", "tools[0].function.parameters", NULL},
        {U "\"tools\":[{\"type\":\"function\"}]}", "tools[0].function", NULL},
        {U "\"tool_choice\":\"sometimes\"}", "tool_choice", NULL},
        {U "\"tool_choice\":5}", "tool_choice", NULL},
        {"{\"messages\":\"hi\"}", "messages", "array"},
        {"{\"messages\":[]}", "messages", "empty"},
        {"{\"model\":\"x\"}", "messages", "required"},
        {"{\"messages\":[5]}", "messages[0]", "object"},
        {"{\"messages\":[{\"content\":\"x\"}]}", "messages[0].role", "required"},
        {"{\"messages\":[{\"role\":\"robot\",\"content\":\"x\"}]}", "messages[0].role", NULL},
        {"{\"messages\":[{\"role\":\"function\",\"content\":\"x\"}]}", "messages[0].role", "tool"},
        {"{\"messages\":[{\"role\":\"user\"}]}", "messages[0].content", "required"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":5}]}", "messages[0].content", NULL},
        {"{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":{\"url\":\"x\"}}]}]}",
         "messages[0].content[0].type", "text-only"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\"}]}]}", "messages[0].content[0].text", NULL},
        {"{\"messages\":[{\"role\":\"user\",\"content\":[\"x\"]}]}", "messages[0].content[0]", NULL},
        {"{\"messages\":[{\"role\":\"tool\",\"content\":\"x\"}]}", "messages[0].tool_call_id", "required"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\",\"tool_calls\":[]}]}", "messages[0].tool_calls", "assistant"},
        {"{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":{}}]}", "messages[0].tool_calls", "array"},
        {"{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]}]}",
         "messages[0].tool_calls[0].id", NULL},
        {"{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"id\":\"a\",\"function\":{\"name\":\"f\",\"arguments\":5}}]}]}",
         "messages[0].tool_calls[0].function.arguments", NULL},
        {"{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"id\":\"a\",\"function\":{}}]}]}",
         "messages[0].tool_calls[0].function.name", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) refused(CF_API_CHAT, cases[i].body, 400, cases[i].param, cases[i].want);
}

static void completions(void) {
    cf_api_request *r = parse(CF_API_COMPLETIONS, "{\"model\":\"c\",\"prompt\":\"Hello\",\"echo\":true,\"max_tokens\":5,\"n\":2,"
                                                  "\"seed\":7,\"logit_bias\":{\"3\":-100},\"stop\":[\"x\"],\"suffix\":null}");
    CHECK(r && r->n_reqs == 2 && r->echo, "a string prompt with n 2");
    if (r) {
        CHECK(!strcmp(r->reqs[0].prompt_text, "Hello") && !strcmp(r->reqs[1].prompt_text, "Hello"), "prompt text");
        CHECK(r->reqs[0].seed == 7 && r->reqs[1].seed == 8, "seeds");
        CHECK(r->reqs[0].max_tokens == 5 && r->reqs[0].n_stop == 1 && r->reqs[0].n_logit_bias == 1, "fields");
        CHECK(!r->reqs[0].logprobs, "no logprobs");
    }
    cf_api_request_free(r);

    r = parse(CF_API_COMPLETIONS, "{\"prompt\":[\"a\",\"b\"],\"n\":2,\"logprobs\":3}");
    CHECK(r && r->n_reqs == 4, "two prompts times n 2");
    if (r) {
        CHECK(!strcmp(r->reqs[0].prompt_text, "a") && !strcmp(r->reqs[1].prompt_text, "a") &&
                  !strcmp(r->reqs[2].prompt_text, "b") && !strcmp(r->reqs[3].prompt_text, "b"),
              "index = prompt * n + i");
        CHECK(r->reqs[0].logprobs && r->reqs[0].top_logprobs == 3, "logprobs 3");
        CHECK(r->reqs[0].max_tokens == 64 && r->reqs[0].fit_context, "default max_tokens");
    }
    cf_api_request_free(r);

    r = parse(CF_API_COMPLETIONS, "{\"prompt\":[75,76,77]}");
    CHECK(r && r->n_reqs == 1 && r->reqs[0].n_prompt_ids == 3 && r->reqs[0].prompt_ids[2] == 77 && !r->reqs[0].prompt_text,
          "token ids");
    cf_api_request_free(r);
    r = parse(CF_API_COMPLETIONS, "{\"prompt\":[[75],[76,258]],\"logprobs\":0}");
    CHECK(r && r->n_reqs == 2 && r->reqs[1].n_prompt_ids == 2 && r->reqs[1].prompt_ids[1] == 258, "lists of token ids");
    CHECK(r && r->reqs[0].logprobs && r->reqs[0].top_logprobs == 0, "logprobs 0: the chosen tokens only");
    cf_api_request_free(r);

    static const struct {
        const char *body, *param, *want;
    } cases[] = {
        {"{}", "prompt", "required"},
        {"{\"prompt\":5}", "prompt", NULL},
        {"{\"prompt\":\"\"}", "prompt", "empty"},
        {"{\"prompt\":[]}", "prompt", "empty"},
        {"{\"prompt\":[\"a\",5]}", "prompt[1]", NULL},
        {"{\"prompt\":[\"a\",[5]]}", "prompt[1]", NULL},
        {"{\"prompt\":[[5],\"a\"]}", "prompt[1]", NULL},
        {"{\"prompt\":[[]]}", "prompt[0]", "empty"},
        {"{\"prompt\":[1,259]}", "prompt[1]", "[0, 258]"},
        {"{\"prompt\":[1,-1]}", "prompt[1]", NULL},
        {"{\"prompt\":[1,2.5]}", "prompt[1]", "integer"},
        {"{\"prompt\":[[1],[2,\"x\"]]}", "prompt[1][1]", NULL},
        {"{\"prompt\":\"a\",\"suffix\":\"b\"}", "suffix", "not supported"},
        {"{\"prompt\":\"a\",\"suffix\":5}", "suffix", NULL},
        {"{\"prompt\":\"a\",\"best_of\":3}", "best_of", "not supported"},
        {"{\"prompt\":\"a\",\"echo\":1}", "echo", NULL},
        {"{\"prompt\":\"a\",\"logprobs\":true}", "logprobs", "integer"},
        {"{\"prompt\":\"a\",\"logprobs\":21}", "logprobs", NULL},
        {"{\"prompt\":\"a\",\"logprobs\":2,\"echo\":true}", "logprobs", "echo"},
        {"{\"prompt\":[\"a\",\"b\",\"c\"],\"n\":3}", "n", "times the 3 prompts"},
        {"{\"prompt\":\"a\",\"max_tokens\":-5}", "max_tokens", NULL},
        {"{\"prompt\":\"a\",\"temperature\":null,\"top_p\":7}", "top_p", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        refused(CF_API_COMPLETIONS, cases[i].body, 400, cases[i].param, cases[i].want);
}

static void messages(void) {
    cf_api_request *r = parse(
        CF_API_MESSAGES,
        "{\"model\":\"claude\",\"max_tokens\":20,\"system\":[{\"type\":\"text\",\"text\":\"sys\"}],\"temperature\":0.3,\"top_p\":0.8,"
        "\"top_k\":5,\"stop_sequences\":[\"END\"],\"stream\":true,\"metadata\":{\"user_id\":\"u\"},"
        "\"tools\":[{\"name\":\"get_weather\",\"description\":\"d\",\"input_schema\":{\"type\":\"object\"}}],"
        "\"tool_choice\":{\"type\":\"any\"},\"thinking\":{\"type\":\"disabled\"},"
        "\"messages\":[{\"role\":\"user\",\"content\":\"weather?\"},"
        "{\"role\":\"assistant\",\"content\":[{\"type\":\"thinking\",\"thinking\":\"t\",\"signature\":\"s\"},"
        "{\"type\":\"text\",\"text\":\"Let me check.\"},"
        "{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"get_weather\",\"input\":{\"city\":\"Paris\"}}]},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"toolu_1\",\"content\":[{\"type\":\"text\","
        "\"text\":\"sunny\"}]},{\"type\":\"text\",\"text\":\"thanks\"}]}]}");
    CHECK(r && r->kind == CF_API_MESSAGES && r->n_reqs == 1 && r->stream && r->tools_offered, "an Anthropic request");
    if (r) {
        const cinfer_request *q = &r->reqs[0];
        CHECK(!strcmp(r->model, "claude") && q->max_tokens == 20 && !q->fit_context, "model, max_tokens");
        CHECK(q->temperature == 0.3f && q->top_p == 0.8f && q->top_k == 5 && q->n_stop == 1 && !strcmp(q->stop[0], "END"), "sampling");
        CHECK(q->n_messages == 5, "system, user, assistant, tool, user: %zu messages", q->n_messages);
        if (q->n_messages == 5) {
            CHECK(!strcmp(q->messages[0].role, "system") && !strcmp(q->messages[0].content, "sys"), "system");
            CHECK(!strcmp(q->messages[2].role, "assistant") && !strcmp(q->messages[2].content, "Let me check.") &&
                      q->messages[2].tool_calls_json &&
                      !strcmp(q->messages[2].tool_calls_json,
                              "[{\"id\":\"toolu_1\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
                              "\"arguments\":\"{\\\"city\\\":\\\"Paris\\\"}\"}}]"),
                  "assistant tool_use: %s", q->messages[2].tool_calls_json ? q->messages[2].tool_calls_json : "(null)");
            CHECK(!strcmp(q->messages[3].role, "tool") && !strcmp(q->messages[3].content, "sunny") &&
                      !strcmp(q->messages[3].tool_call_id, "toolu_1") && q->messages[3].name &&
                      !strcmp(q->messages[3].name, "get_weather"),
                  "tool_result");
            CHECK(!strcmp(q->messages[4].role, "user") && !strcmp(q->messages[4].content, "thanks"), "text after the result");
        }
        CHECK(q->tools_json && !strcmp(q->tools_json, "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
                                                      "\"description\":\"d\",\"parameters\":{\"type\":\"object\"}}}]"),
              "tools as OpenAI definitions: %s", q->tools_json ? q->tools_json : "(null)");
        CHECK(q->template_kwargs_json && strstr(q->template_kwargs_json, "false"), "thinking disabled");
    }
    cf_api_request_free(r);

    r = parse(CF_API_MESSAGES, "{\"max_tokens\":5,\"system\":\"s\",\"tools\":[{\"name\":\"f\",\"input_schema\":{}}],"
                               "\"tool_choice\":{\"type\":\"none\"},\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
                               "\"tool_result\",\"tool_use_id\":\"x\",\"content\":\"r\"}]}]}");
    CHECK(r && !r->tools_offered && !r->reqs[0].tools_json, "tool_choice none hides the tools");
    CHECK(r && r->reqs[0].n_messages == 2 && !strcmp(r->reqs[0].messages[1].role, "tool"), "only a tool result: no empty user turn");
    cf_api_request_free(r);

#define M "{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
    static const struct {
        const char *body, *param, *want;
    } cases[] = {
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", "max_tokens", "required"},
        {M "\"max_tokens\":100}", "max_tokens", "at most 64"}, /* a key given twice: its last value */
        {"{\"max_tokens\":0,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", "max_tokens", NULL},
        {M "\"temperature\":1.5}", "temperature", "[0, 1]"},
        {M "\"top_k\":-1}", "top_k", NULL},
        {M "\"stop_sequences\":\"x\"}", "stop_sequences", "array"},
        {M "\"system\":5}", "system", NULL},
        {M "\"system\":[{\"type\":\"image\"}]}", "system[0].type", NULL},
        {M "\"thinking\":{\"type\":\"maybe\"}}", "thinking.type", NULL},
        {M "\"tools\":[{\"name\":\"f\"}]}", "tools[0].input_schema", NULL},
        {M "\"tools\":[{\"type\":\"web_search_20250305\",\"name\":\"web_search\"}]}", "tools[0].type", "server tool"},
        {M "\"tools\":[{\"input_schema\":{}}]}", "tools[0].name", NULL},
        {M "\"tool_choice\":\"auto\"}", "tool_choice", NULL},
        {M "\"tool_choice\":{\"type\":\"tool\",\"name\":\"g\"}}", "tool_choice.name", NULL},
        {M "\"stream\":1}", "stream", NULL},
        {"{\"max_tokens\":5,\"messages\":[]}", "messages", NULL},
        {"{\"max_tokens\":5,\"messages\":[{\"role\":\"system\",\"content\":\"x\"}]}", "messages[0].role", NULL},
        {"{\"max_tokens\":5,\"messages\":[{\"role\":\"user\"}]}", "messages[0].content", NULL},
        {"{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\",\"source\":{}}]}]}",
         "messages[0].content[0].type", "not supported"},
        {"{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"tool_use\",\"id\":\"a\",\"name\":\"f\","
         "\"input\":{}}]}]}",
         "messages[0].content[0].type", NULL},
        {"{\"max_tokens\":5,\"messages\":[{\"role\":\"assistant\",\"content\":[{\"type\":\"tool_use\",\"id\":\"a\",\"name\":\"f\","
         "\"input\":[]}]}]}",
         "messages[0].content[0].input", NULL},
        {"{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\"}]}]}",
         "messages[0].content[0].tool_use_id", NULL},
        {"{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":5}]}]}",
         "messages[0].content[0].text", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        refused(CF_API_MESSAGES, cases[i].body, 400, cases[i].param, cases[i].want);
}

static void malformed(void) {
    for (int k = 0; k < 3; k++) {
        refused((cf_api_kind)k, "[1,2]", 400, "", "JSON object");
        refused((cf_api_kind)k, "\"x\"", 400, "", "JSON object");
        refused((cf_api_kind)k, "{\"messages\":", 400, "", "not valid JSON");
        refused((cf_api_kind)k, "{} x", 400, "", "not valid JSON");
        refused((cf_api_kind)k, "{} {}", 400, "", "not valid JSON");
        refused((cf_api_kind)k, "{\"a\":\"\\ud800\"}", 400, "", "not valid JSON");
        refused((cf_api_kind)k, "{\"prompt\":\"a\\u0000b\"}", 400, "", "NUL");
        refused((cf_api_kind)k, "{\"prompt\":\"caf\xc3\"}", 400, "", "UTF-8");
        refused((cf_api_kind)k, "{\"prompt\":\"\xed\xa0\x80\"}", 400, "", "UTF-8");   /* a surrogate */
        refused((cf_api_kind)k, "{\"prompt\":\"\xc0\xaf\"}", 400, "", "UTF-8");       /* overlong */
        refused((cf_api_kind)k, "{\"prompt\":\"\xf4\x90\x80\x80\"}", 400, "", "UTF-8"); /* past U+10FFFF */
    }
    cf_api_request *r = NULL;
    cf_api_error e;
    CHECK(cf_api_parse(CF_API_CHAT, "", 0, &LIM, model, &r, &e) == -1 && e.status == 400, "an empty body");
    static const char with_nul[] = "{\"prompt\":\"a\0b\"}";
    CHECK(cf_api_parse(CF_API_COMPLETIONS, with_nul, sizeof with_nul - 1, &LIM, model, &r, &e) == -1 && e.status == 400 &&
              strstr(e.message, "NUL"),
          "a raw NUL byte: %s", e.message);
    /* 100k nested arrays, and 100k nested objects inside a string-free body */
    size_t n = 100000;
    char *deep = malloc(5 * n + 64);
    memset(deep, '[', n);
    memset(deep + n, ']', n);
    deep[2 * n] = 0;
    refused(CF_API_CHAT, deep, 400, "", "levels deep");
    strcpy(deep, "{\"messages\":");
    size_t at = strlen(deep);
    for (size_t i = 0; i < n; i++) memcpy(deep + at + 5 * i, "{\"a\":", 5);
    deep[at + 5 * n] = 0;
    refused(CF_API_CHAT, deep, 400, "", "levels deep");
    free(deep);
    /* brackets inside strings do not count as nesting */
    char *br = malloc(3 * n);
    strcpy(br, "{\"messages\":[{\"role\":\"user\",\"content\":\"");
    at = strlen(br);
    memset(br + at, '[', n);
    strcpy(br + at + n, "\\\"\"}]}");
    r = parse(CF_API_CHAT, br);
    CHECK(r && strlen(r->reqs[0].messages[0].content) == n + 1, "brackets in strings are text");
    cf_api_request_free(r);
    r = parse(CF_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\\\\u0000\"}]}");
    CHECK(r && !strcmp(r->reqs[0].messages[0].content, "a\\u0000"), "an escaped backslash before u0000 is text");
    cf_api_request_free(r);
    free(br);
}

/* Bodies with bytes flipped, dropped or duplicated: each is parsed or refused with a status and a message. */
static void mutations(void) {
    static const struct {
        cf_api_kind kind;
        const char *body;
    } seeds[] = {
        {CF_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"}]},{\"role\":\"assistant\","
                      "\"tool_calls\":[{\"id\":\"c\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]},"
                      "{\"role\":\"tool\",\"tool_call_id\":\"c\",\"content\":\"r\"}],\"tools\":[{\"type\":\"function\",\"function\":"
                      "{\"name\":\"f\",\"parameters\":{}}}],\"stop\":[\"x\"],\"logit_bias\":{\"4\":1},\"n\":2,\"seed\":3}"},
        {CF_API_COMPLETIONS, "{\"prompt\":[[1,2],[3]],\"echo\":true,\"n\":2,\"max_tokens\":3,\"stop\":\"z\"}"},
        {CF_API_MESSAGES, "{\"max_tokens\":5,\"system\":[{\"type\":\"text\",\"text\":\"s\"}],\"messages\":[{\"role\":\"assistant\","
                          "\"content\":[{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"f\",\"input\":{\"a\":[1]}}]},{\"role\":\"user\","
                          "\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"t\",\"content\":\"r\"}]}],\"tools\":[{\"name\":\"f\","
                          "\"input_schema\":{}}],\"tool_choice\":{\"type\":\"tool\",\"name\":\"f\"}}"},
    };
    static const char alphabet[] = "{}[]\",:0-9.eE tfn\\u\x00\xc3\xff";
    uint64_t s = 12345;
    int parsed = 0, refusals = 0;
    for (size_t k = 0; k < sizeof seeds / sizeof *seeds; k++)
        for (int round = 0; round < 3000; round++) {
            char buf[1024];
            size_t n = strlen(seeds[k].body);
            memcpy(buf, seeds[k].body, n);
            for (int edits = 1 + round % 3; edits > 0; edits--) {
                s = s * 6364136223846793005ull + 1442695040888963407ull;
                size_t at = (s >> 33) % n;
                int op = (int)((s >> 20) % 3);
                if (op == 0) buf[at] = alphabet[(s >> 40) % (sizeof alphabet - 1)];
                else if (op == 1 && n > 1) memmove(buf + at, buf + at + 1, n-- - at - 1);
                else if (n + 1 < sizeof buf) memmove(buf + at + 1, buf + at, n++ - at);
            }
            cf_api_request *r = NULL;
            cf_api_error e;
            if (cf_api_parse(seeds[k].kind, buf, n, &LIM, model, &r, &e) == 0) {
                parsed++;
                CHECK(r && r->n_reqs > 0, "a parsed request has choices");
                cf_api_request_free(r);
            } else {
                refusals++;
                CHECK(!r && e.status >= 400 && e.message[0], "a refusal has a status and a message");
            }
        }
    CHECK(parsed > 0 && refusals > 0, "mutations: %d parsed, %d refused", parsed, refusals);
}

static void errors(void) {
    cf_api_error e = {.status = 400};
    snprintf(e.param, sizeof e.param, "messages[0].role");
    snprintf(e.message, sizeof e.message, "a \"quoted\" message");
    char *j = cf_api_error_json(CF_API_CHAT, &e);
    CHECK(j && !strcmp(j, "{\"error\":{\"message\":\"a \\\"quoted\\\" message\",\"type\":\"invalid_request_error\","
                          "\"param\":\"messages[0].role\",\"code\":null}}"),
          "OpenAI error: %s", j);
    free(j);
    j = cf_api_error_json(CF_API_MESSAGES, &e);
    CHECK(j && !strcmp(j, "{\"type\":\"error\",\"error\":{\"type\":\"invalid_request_error\",\"message\":\"a \\\"quoted\\\" message\"}}"),
          "Anthropic error: %s", j);
    free(j);
    e = (cf_api_error){.status = 401};
    snprintf(e.message, sizeof e.message, "bad key");
    j = cf_api_error_json(CF_API_COMPLETIONS, &e);
    CHECK(j && !strcmp(j, "{\"error\":{\"message\":\"bad key\",\"type\":\"authentication_error\",\"param\":null,\"code\":\"invalid_api_key\"}}"),
          "OpenAI 401: %s", j);
    free(j);
    e.status = 503;
    j = cf_api_error_json(CF_API_MESSAGES, &e);
    CHECK(j && strstr(j, "\"overloaded_error\""), "Anthropic 503: %s", j);
    free(j);

    cf_api_error_from_status(CF_API_CHAT, CINFER_E_CONTEXT_OVERFLOW, "too long", &e);
    CHECK(e.status == 400 && !strcmp(e.param, "messages") && !strcmp(e.message, "too long"), "context overflow");
    cf_api_error_from_status(CF_API_COMPLETIONS, CINFER_E_EMPTY_PROMPT, "", &e);
    CHECK(e.status == 400 && !strcmp(e.param, "prompt") && e.message[0], "empty prompt");
    cf_api_error_from_status(CF_API_CHAT, CINFER_E_TEMPERATURE, "t", &e);
    CHECK(e.status == 400 && !strcmp(e.param, "temperature"), "temperature");
    cf_api_error_from_status(CF_API_CHAT, CINFER_E_BUSY, "busy", &e);
    CHECK(e.status == 429 && !e.param[0], "busy");
    cf_api_error_from_status(CF_API_CHAT, CINFER_E_DEVICE, "gpu", &e);
    CHECK(e.status == 500, "device failure");
}

/* Speculative decoding: the "speculative" object and llama-server's flat keys. */
static void speculative(void) {
    cf_api_request *r = parse(CF_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],"
                                           "\"speculative\":{\"source\":\"ngram\",\"n_max\":8,\"n_min\":2}}");
    CHECK(r && r->reqs[0].draft && !strcmp(r->reqs[0].draft, "ngram") && r->reqs[0].draft_max == 8, "speculative object");
    cf_api_request_free(r);
    r = parse(CF_API_COMPLETIONS, "{\"prompt\":\"a\",\"n\":2,\"speculative.n_max\":32,\"speculative.n_min\":0}");
    CHECK(r && !r->reqs[0].draft && r->reqs[0].draft_max == 16 && r->reqs[1].draft_max == 16, "flat n_max 32 capped at 16");
    cf_api_request_free(r);
    r = parse(CF_API_MESSAGES, "{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],"
                               "\"speculative\":{\"source\":\"none\"}}");
    CHECK(r && r->reqs[0].draft && !strcmp(r->reqs[0].draft, "none") && r->reqs[0].draft_max == 0, "messages: source none");
    cf_api_request_free(r);
    r = parse(CF_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"speculative\":null}");
    CHECK(r && !r->reqs[0].draft, "speculative null");
    cf_api_request_free(r);
    refused(CF_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"speculative\":{\"source\":\"medusa\"}}", 400,
            "speculative.source", "ngram");
    refused(CF_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"speculative\":\"ngram\"}", 400, "speculative",
            "object");
    refused(CF_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"speculative\":{\"n_max\":-1}}", 400,
            "speculative.n_max", NULL);
    refused(CF_API_COMPLETIONS, "{\"prompt\":\"a\",\"speculative.n_max\":1.5}", 400, "speculative.n_max", NULL);
    refused(CF_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"speculative\":{\"source\":3}}", 400,
            "speculative.source", "string");
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: test_api TMP_DIR\n");
        return 2;
    }
    cinfer_error err;
    cinfer_model_params mp = cinfer_model_default_params();
    mp.n_threads = 1;
    if (tiny_model_write(argv[1], 0) || cinfer_model_load(argv[1], &mp, &model, &err) != CINFER_OK) {
        fprintf(stderr, "cannot make the tiny model in %s: %s\n", argv[1], err.message);
        return 1;
    }
    chat_happy();
    chat_tools();
    chat_refused();
    completions();
    messages();
    malformed();
    mutations();
    errors();
    speculative();
    cinfer_model_free(model);
    printf("%d checks, %d failures\n", checks, failures);
    return failures != 0;
}
