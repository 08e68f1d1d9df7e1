/* test_chat_messages.c: chat requests with tools, tool calls, tool results and template kwargs. Rendered
 * through the request path (src/engine/chat_messages.c) with the fixture templates, each prompt equals
 * Python jinja2's rendering of the same request as vLLM hands it to transformers (chat_goldens.json,
 * from tools/templates/make_chat_goldens.py). Malformed fields are refused naming the message and field.
 * Through the public API on a tiny model: sessions with tools open and run, bad JSON fails at open, and
 * a parser made from a request whose prompt opens <think> starts in reasoning; a model whose tool markup is
 * a special token keeps it in the text of requests that offer tools, and only those.
 * Usage: test_chat_messages FIXTURES_DIR WORK_DIR */
#include "engine/chat.h"
#include "text/template.h"
#include "../check.h"
#include "base/file.h"
#include "../engine/tiny_model.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static void write_file(const char *dir, const char *name, const char *text) {
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    CHECK(f != NULL, "cannot write %s", p);
    if (!f) return;
    fputs(text, f);
    fclose(f);
}

/* The cinfer_messages of an OpenAI-form message array; strings point into j or into *owned. */
typedef struct built {
    cinfer_message msgs[16];
    char *owned[16];
    size_t n;
} built;

static void build_messages(const cJSON *arr, built *b) {
    memset(b, 0, sizeof *b);
    const cJSON *m;
    cJSON_ArrayForEach(m, arr) {
        if (b->n == 16) break;
        cinfer_message *c = &b->msgs[b->n];
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
        const cJSON *calls = cJSON_GetObjectItemCaseSensitive(m, "tool_calls");
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(m, "tool_call_id");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(m, "name");
        c->role = cJSON_GetObjectItemCaseSensitive(m, "role")->valuestring;
        c->content = cJSON_IsString(content) ? content->valuestring : NULL;
        if (calls) c->tool_calls_json = b->owned[b->n] = cJSON_PrintUnformatted(calls);
        c->tool_call_id = cJSON_IsString(id) ? id->valuestring : NULL;
        c->name = cJSON_IsString(name) ? name->valuestring : NULL;
        b->n++;
    }
}

static void free_built(built *b) {
    for (size_t i = 0; i < b->n; i++) cJSON_free(b->owned[i]);
}

static void check_goldens(const char *fixtures, const char *work) {
    char path[4096];
    snprintf(path, sizeof path, "%s/templates/chat_goldens.json", fixtures);
    char *text = cf_read_file(path, NULL);
    cJSON *g = text ? cJSON_Parse(text) : NULL;
    free(text);
    CHECK(g != NULL, "cannot read %s", path);
    if (!g) return;
    const cJSON *results = cJSON_GetObjectItemCaseSensitive(g, "results");
    const cJSON *cases = cJSON_GetObjectItemCaseSensitive(g, "cases");
    const cJSON *special = cJSON_GetObjectItemCaseSensitive(g, "special");
    const cJSON *tr;
    int compared = 0;
    cJSON_ArrayForEach(tr, results) {
        /* A folder with the fixture template and the special tokens transformers would pass it. */
        char dir[4096], src[4096];
        snprintf(dir, sizeof dir, "%s/%s", work, tr->string);
        mkdir(work, 0755);
        mkdir(dir, 0755);
        snprintf(src, sizeof src, "%s/templates/%s.jinja", fixtures, tr->string);
        char *jinja = cf_read_file(src, NULL);
        char *cfg = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(special, tr->string));
        CHECK(jinja && cfg, "template %s", tr->string);
        if (jinja) write_file(dir, "chat_template.jinja", jinja);
        if (cfg) write_file(dir, "tokenizer_config.json", cfg);
        free(jinja);
        cJSON_free(cfg);
        cf_chat_template *ct = NULL;
        cinfer_error err = {0};
        CHECK(cf_chat_template_load(dir, NULL, &ct, &err) == CINFER_OK, "%s: %s", tr->string, err.message);
        if (!ct) continue;
        const cJSON *c;
        cJSON_ArrayForEach(c, cases) {
            const char *name = cJSON_GetObjectItemCaseSensitive(c, "name")->valuestring;
            const cJSON *want = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(tr, name), "out");
            const cJSON *tools = cJSON_GetObjectItemCaseSensitive(c, "tools");
            const cJSON *kwargs = cJSON_GetObjectItemCaseSensitive(c, "kwargs");
            built b;
            build_messages(cJSON_GetObjectItemCaseSensitive(c, "messages"), &b);
            char *tools_json = cJSON_IsArray(tools) ? cJSON_PrintUnformatted(tools) : NULL;
            char *kwargs_json = cJSON_IsObject(kwargs) ? cJSON_PrintUnformatted(kwargs) : NULL;
            cinfer_request r = cinfer_request_default();
            r.messages = b.msgs;
            r.n_messages = b.n;
            r.tools_json = tools_json;
            r.template_kwargs_json = kwargs_json;
            r.add_generation_prompt = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "add_generation_prompt"));
            char *out = NULL;
            size_t len = 0;
            cinfer_status st = cf_chat_render_with(ct, &r, &out, &len, &err);
            CHECK(st == CINFER_OK, "%s/%s: %s", tr->string, name, err.message);
            CHECK(cJSON_IsString(want), "%s/%s: a golden", tr->string, name);
            if (st == CINFER_OK && cJSON_IsString(want)) {
                CHECK(strcmp(out, want->valuestring) == 0, "%s/%s differs from jinja2\n--- got\n%s\n--- want\n%s", tr->string,
                      name, out, want->valuestring);
                compared++;
            }
            free(out);
            cJSON_free(tools_json);
            cJSON_free(kwargs_json);
            free_built(&b);
        }
        cf_chat_template_free(ct);
    }
    CHECK(compared == 21, "%d goldens compared", compared);
    cJSON_Delete(g);
}

/* r fails to render with INVALID_ARGUMENT and a message containing what. */
static void expect_refused(const cf_chat_template *ct, const cinfer_request *r, const char *what) {
    char *out = NULL;
    size_t len;
    cinfer_error err = {0};
    cinfer_status st = cf_chat_render_with(ct, r, &out, &len, &err);
    CHECK(st == CINFER_E_INVALID_ARGUMENT && strstr(err.message, what), "refused naming '%s': status %d, '%s'", what,
          (int)st, err.message);
    free(out);
}

static void check_validation(const char *work) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/echo", work);
    mkdir(dir, 0755);
    /* Writes each message as the template sees it. */
    write_file(dir, "chat_template.jinja",
               "{% for m in messages %}[{{ m.role }}|{{ m.content }}|{{ m.tool_calls|tojson if m.tool_calls is defined else '-' }}|"
               "{{ m.tool_call_id }}|{{ m.name }}]"
               "{% endfor %}{{ tools|tojson }}{{ flag }}");
    write_file(dir, "tokenizer_config.json", "{}");
    cf_chat_template *ct = NULL;
    cinfer_error err = {0};
    CHECK(cf_chat_template_load(dir, NULL, &ct, &err) == CINFER_OK, "echo template: %s", err.message);
    if (!ct) return;

    cinfer_message msgs[3] = {
        {.role = "user", .content = "hi"},
        {.role = "assistant", .tool_calls_json = "[{\"id\": \"c1\", \"type\": \"function\", \"function\": {\"name\": \"f\", "
                                                 "\"arguments\": \"{\\\"a\\\": [1, \\\"x\\\"]}\"}}, {\"type\": \"function\", "
                                                 "\"function\": {\"name\": \"g\", \"arguments\": {\"b\": null}}}, "
                                                 "{\"type\": \"function\", \"function\": {\"name\": \"h\", \"arguments\": \" \"}}]"},
        {.role = "tool", .content = "42", .tool_call_id = "c1", .name = "f"},
    };
    cinfer_request r = cinfer_request_default();
    r.messages = msgs;
    r.n_messages = 3;
    r.tools_json = "[{\"type\": \"function\", \"function\": {\"name\": \"f\"}}]";
    r.template_kwargs_json = "{\"flag\": \"FLAG\"}";
    char *out = NULL;
    size_t len;
    CHECK(cf_chat_render_with(ct, &r, &out, &len, &err) == CINFER_OK, "the echo renders: %s", err.message);
    const char *want =
        "[user|hi|-||]"
        "[assistant||[{\"id\": \"c1\", \"type\": \"function\", \"function\": {\"name\": \"f\", \"arguments\": {\"a\": [1, \"x\"]}}}, "
        "{\"type\": \"function\", \"function\": {\"name\": \"g\", \"arguments\": {\"b\": null}}}, "
        "{\"type\": \"function\", \"function\": {\"name\": \"h\", \"arguments\": {}}}]||]"
        "[tool|42|-|c1|f]"
        "[{\"type\": \"function\", \"function\": {\"name\": \"f\"}}]FLAG";
    CHECK(out && strcmp(out, want) == 0, "what the template sees\n--- got\n%s\n--- want\n%s", out ? out : "", want);
    free(out);

    cinfer_request bad = r;
    cinfer_message m2[3];
    memcpy(m2, msgs, sizeof m2);
    bad.messages = m2;
    m2[1].tool_calls_json = "[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"arguments\": \"{oops\"}}]";
    expect_refused(ct, &bad, "messages[1].tool_calls_json[0].function.arguments is not valid JSON");
    m2[1].tool_calls_json = "[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"arguments\": \"[1]\"}}]";
    expect_refused(ct, &bad, "messages[1].tool_calls_json[0].function.arguments is not a JSON object");
    m2[1].tool_calls_json = "[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"arguments\": 7}}]";
    expect_refused(ct, &bad, "messages[1].tool_calls_json[0].function.arguments");
    m2[1].tool_calls_json = "[{\"type\": \"function\", \"function\": {\"arguments\": \"{}\"}}]";
    expect_refused(ct, &bad, "messages[1].tool_calls_json[0].function.name");
    m2[1].tool_calls_json = "[1]";
    expect_refused(ct, &bad, "messages[1].tool_calls_json[0]");
    m2[1].tool_calls_json = "{\"not\": \"a list\"}";
    expect_refused(ct, &bad, "messages[1].tool_calls_json is not a JSON array");
    m2[1].tool_calls_json = "[{\"function\": {}}] trailing";
    expect_refused(ct, &bad, "messages[1].tool_calls_json is not valid JSON");
    memcpy(m2, msgs, sizeof m2);
    m2[2].content = NULL;
    expect_refused(ct, &bad, "messages[2] needs a content");
    m2[2].content = "42";
    m2[0].role = "";
    expect_refused(ct, &bad, "messages[0] needs a role");
    m2[0].role = "user";
    bad.tools_json = "{\"type\": \"function\"}";
    expect_refused(ct, &bad, "tools_json is not a JSON array");
    bad.tools_json = "[\"f\"]";
    expect_refused(ct, &bad, "tools_json[0] is not a tool definition");
    bad.tools_json = "[";
    expect_refused(ct, &bad, "tools_json is not valid JSON");
    bad.tools_json = NULL;
    bad.template_kwargs_json = "[true]";
    expect_refused(ct, &bad, "template_kwargs_json is not a JSON object");
    bad.template_kwargs_json = "{\"enable_thinking\": fals}";
    expect_refused(ct, &bad, "template_kwargs_json is not valid JSON");

    cinfer_request text = cinfer_request_default();
    text.prompt_text = "hi";
    text.tools_json = "[]";
    cinfer_error e2 = {0};
    CHECK(cf_chat_check(&text, &e2) == CINFER_E_INVALID_ARGUMENT && strstr(e2.message, "tools_json applies to chat messages"),
          "tools with a text prompt: %s", e2.message);
    text.tools_json = NULL;
    text.template_kwargs_json = "{}";
    CHECK(cf_chat_check(&text, &e2) == CINFER_E_INVALID_ARGUMENT, "kwargs with a text prompt: %s", e2.message);
    cf_chat_template_free(ct);
}

/* ---- the public API on a tiny model ---- */

typedef struct seen {
    char reasoning[256], content[256];
} seen;

static int collect(const cinfer_chat_delta *d, void *user) {
    seen *s = user;
    char *to = d->kind == CINFER_DELTA_REASONING ? s->reasoning : d->kind == CINFER_DELTA_CONTENT ? s->content : NULL;
    if (to) strncat(to, d->text, d->text_len < 255 - strlen(to) ? d->text_len : 255 - strlen(to));
    return 0;
}

static void parse_reply(const cinfer_model *m, const cinfer_request *r, const char *reply, seen *s) {
    memset(s, 0, sizeof *s);
    cinfer_chat_parser_params pp = cinfer_chat_parser_default_params();
    pp.request = r;
    pp.parse_tool_calls = r->tools_json != NULL;
    cinfer_chat_parser *p = NULL;
    cinfer_error err = {0};
    CHECK(cinfer_chat_parser_create(m, &pp, &p, &err) == CINFER_OK, "parser: %s", err.message);
    if (!p) return;
    CHECK(cinfer_chat_parser_feed(p, reply, strlen(reply), collect, s, &err) == CINFER_OK, "feed: %s", err.message);
    CHECK(cinfer_chat_parser_finish(p, collect, s, &err) == CINFER_OK, "finish: %s", err.message);
    cinfer_chat_parser_free(p);
}

static void check_model(const char *work) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/tiny", work);
    CHECK(tiny_model_write(dir, 0) == 0, "tiny model");
    /* DeepSeek-R1's way: the generation prompt opens <think> unless thinking is off. */
    write_file(dir, "chat_template.jinja",
               "{% for m in messages %}{{ m.role[0] }}:{{ m.content }}{% if m.tool_calls %}"
               "{{ m.tool_calls[0].function.arguments|tojson }}{% endif %}{% endfor %}{% if tools %}T{% endif %}"
               "{% if add_generation_prompt %}a:<think>\n{% if enable_thinking is defined and not enable_thinking %}"
               "</think>{% endif %}{% endif %}");
    cinfer_model *m = NULL;
    cinfer_engine *e = NULL;
    cinfer_error err = {0};
    cinfer_model_params mp = cinfer_model_default_params();
    mp.n_threads = 1;
    CHECK(cinfer_model_load(dir, &mp, &m, &err) == CINFER_OK, "load: %s", err.message);
    if (!m) return;
    CHECK(cinfer_engine_create(m, NULL, &e, &err) == CINFER_OK, "engine: %s", err.message);

    cinfer_message msgs[] = {
        {.role = "user", .content = "w?"},
        {.role = "assistant", .tool_calls_json = "[{\"id\": \"c\", \"type\": \"function\", \"function\": {\"name\": \"w\", "
                                                 "\"arguments\": \"{\\\"c\\\": \\\"Bern\\\"}\"}}]"},
        {.role = "tool", .content = "ok", .tool_call_id = "c"},
    };
    cinfer_request r = cinfer_request_default();
    r.messages = msgs;
    r.n_messages = 3;
    r.tools_json = "[{\"type\": \"function\", \"function\": {\"name\": \"w\"}}]";
    r.max_tokens = 4;
    r.temperature = 0;
    r.ignore_eos = 1;
    char *text = NULL;
    size_t len = 0;
    CHECK(cf_chat_render(m, &r, &text, &len, &err) == CINFER_OK, "render: %s", err.message);
    const char *want = "u:w?a:{\"c\": \"Bern\"}t:okTa:<think>\n";
    CHECK(text && strcmp(text, want) == 0, "the prompt: '%s', want '%s'", text ? text : "", want);
    free(text);

    cinfer_session *s = NULL;
    const cinfer_result *res = NULL;
    CHECK(cinfer_session_open(e, &r, NULL, &s, &err) == CINFER_OK, "a request with tools opens: %s", err.message);
    if (s) {
        CHECK(cinfer_session_wait(s, -1, &res, &err) == CINFER_OK && res->outcome == CINFER_OUTCOME_COMPLETED &&
              res->usage.prompt_tokens == (int)strlen(want), "it runs on the %zu-token prompt", strlen(want));
        cinfer_session_free(s);
        s = NULL;
    }
    cinfer_request bad = r;
    bad.tools_json = "[{\"type\": \"function\"";
    CHECK(cinfer_session_open(e, &bad, NULL, &s, &err) == CINFER_E_INVALID_ARGUMENT && !s &&
          strstr(err.message, "tools_json"), "bad tools_json fails at open: %s", err.message);
    bad = r;
    cinfer_message m2[3];
    memcpy(m2, msgs, sizeof m2);
    m2[1].tool_calls_json = "[{\"type\": \"function\", \"function\": {\"name\": \"w\", \"arguments\": \"{\"}}]";
    bad.messages = m2;
    CHECK(cinfer_session_open(e, &bad, NULL, &s, &err) == CINFER_E_INVALID_ARGUMENT && !s &&
          strstr(err.message, "messages[1].tool_calls_json[0].function.arguments"), "bad arguments fail at open: %s",
          err.message);

    seen sn;
    parse_reply(m, &r, "\nhmm</think>\n\nDone.", &sn);
    CHECK(!strcmp(sn.reasoning, "hmm") && !strcmp(sn.content, "Done."), "the prompt opened <think>: '%s' / '%s'",
          sn.reasoning, sn.content);
    cinfer_request off = r;
    off.template_kwargs_json = "{\"enable_thinking\": false}";
    parse_reply(m, &off, "Done.</think>", &sn);
    CHECK(!sn.reasoning[0] && !strcmp(sn.content, "Done.</think>"), "thinking off: '%s' / '%s'", sn.reasoning, sn.content);
    cinfer_request nogen = r;
    nogen.add_generation_prompt = 0;
    parse_reply(m, &nogen, "<think>a</think>b", &sn);
    CHECK(!strcmp(sn.reasoning, "a") && !strcmp(sn.content, "b"), "no generation prompt: '%s' / '%s'", sn.reasoning,
          sn.content);

    cinfer_chat_parser *p = NULL;
    cinfer_chat_parser_params pp = cinfer_chat_parser_default_params();
    pp.struct_size = 3;
    CHECK(cinfer_chat_parser_create(m, &pp, &p, &err) == CINFER_E_INVALID_ARGUMENT && !p, "struct_size is checked");
    CHECK(cinfer_chat_parser_create(NULL, NULL, &p, &err) == CINFER_E_INVALID_ARGUMENT, "a NULL model is refused");
    CHECK(cinfer_chat_parser_create(m, NULL, &p, &err) == CINFER_OK && p, "default parameters: %s", err.message);
    cinfer_chat_parser_free(p);
    cinfer_engine_free(e);
    cinfer_model_free(m);
}

/* Replaces every "from" in the file by "to". */
static void replace_in_file(const char *dir, const char *name, const char *from, const char *to) {
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    char *text = cf_read_file(p, NULL);
    CHECK(text != NULL, "cannot read %s", p);
    if (!text) return;
    size_t n = strlen(text), fl = strlen(from), tl = strlen(to), k = 0;
    char *out = malloc(n * (tl > fl ? tl / fl + 2 : 1) + 1);
    for (size_t i = 0; i < n;) {
        if (!strncmp(text + i, from, fl)) {
            memcpy(out + k, to, tl);
            k += tl;
            i += fl;
        } else {
            out[k++] = text[i++];
        }
    }
    out[k] = 0;
    write_file(dir, name, out);
    free(out);
    free(text);
}

/* Runs r greedily and returns its text (malloc'd). */
static char *run_text(cinfer_engine *e, const cinfer_request *r) {
    cinfer_session *s = NULL;
    const cinfer_result *res = NULL;
    cinfer_error err = {0};
    char *t = NULL;
    CHECK(cinfer_session_open(e, r, NULL, &s, &err) == CINFER_OK, "open: %s", err.message);
    if (s && cinfer_session_wait(s, -1, &res, &err) == CINFER_OK && res->outcome == CINFER_OUTCOME_COMPLETED)
        t = strdup(res->text);
    cinfer_session_free(s);
    return t;
}

static void check_special(const char *work) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/special", work);
    CHECK(tiny_model_write(dir, 0) == 0, "tiny model");
    /* Token 0 becomes Mistral's [TOOL_CALLS], a special token. */
    replace_in_file(dir, "tokenizer.json", "<|endoftext|>", "[TOOL_CALLS]");
    replace_in_file(dir, "tokenizer_config.json", "<|endoftext|>", "[TOOL_CALLS]");
    write_file(dir, "chat_template.jinja",
               "{% for m in messages %}{{ m.content }}{% if m.tool_calls %}[TOOL_CALLS]{% endif %}{% endfor %}");
    cinfer_model *m = NULL;
    cinfer_engine *e = NULL;
    cinfer_error err = {0};
    cinfer_model_params mp = cinfer_model_default_params();
    mp.n_threads = 1;
    CHECK(cinfer_model_load(dir, &mp, &m, &err) == CINFER_OK, "load: %s", err.message);
    if (!m) return;
    CHECK(cinfer_engine_create(m, NULL, &e, &err) == CINFER_OK, "engine: %s", err.message);
    cf_chat_format f = cf_model_chat_format(m);
    CHECK(f.tools == CF_TOOLS_MISTRAL && f.tools_special && !f.reasoning, "format: tools %s, special %d",
          cf_tool_syntax_name(f.tools), f.tools_special);

    cinfer_message msgs[] = {{.role = "user", .content = "hi"}};
    cinfer_logit_bias bias = {0, 100.0f};
    cinfer_request r = cinfer_request_default();
    r.messages = msgs;
    r.n_messages = 1;
    r.max_tokens = 3;
    r.temperature = 0;
    r.logit_bias = &bias;
    r.n_logit_bias = 1;
    r.tools_json = "[{\"type\": \"function\", \"function\": {\"name\": \"f\"}}]";
    char *with = run_text(e, &r);
    CHECK(with && !strcmp(with, "[TOOL_CALLS][TOOL_CALLS][TOOL_CALLS]"), "tools offered: the markup is kept: '%s'",
          with ? with : "(failed)");
    free(with);
    r.tools_json = "[]";
    char *empty = run_text(e, &r);
    CHECK(empty && !strcmp(empty, ""), "an empty tools list: special tokens skipped: '%s'", empty ? empty : "(failed)");
    free(empty);
    r.tools_json = NULL;
    char *without = run_text(e, &r);
    CHECK(without && !strcmp(without, ""), "no tools: special tokens skipped: '%s'", without ? without : "(failed)");
    free(without);
    cinfer_engine_free(e);
    cinfer_model_free(m);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s FIXTURES_DIR WORK_DIR\n", argv[0]);
        return 2;
    }
    mkdir(argv[2], 0755);
    check_goldens(argv[1], argv[2]);
    check_validation(argv[2]);
    check_model(argv[2]);
    check_special(argv[2]);
    printf("%d checks, %d failures\n", checks, failures);
    return failures != 0;
}
