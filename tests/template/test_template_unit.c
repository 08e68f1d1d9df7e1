/* test_template_unit.c: the interpreter's errors (named line and construct, never a crash), its bounds
 * (output, steps, depth, memory), bad variables, and loading chat templates from a model folder. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "text/template.h"
#include "../check.h"

/* Renders src with vars (JSON object, may be NULL); returns the status, the output or error in *msg. */
static cinfer_status render(const char *src, const char *vars, const cf_template_options *opt, char *msg, size_t cap) {
    cf_template *t = NULL;
    cinfer_error err = {0};
    cinfer_status s = cf_template_compile(src, strlen(src), &t, &err);
    if (s == CINFER_OK) {
        cf_template_var v[] = {{NULL, vars ? vars : "{}"}};
        char *out = NULL;
        size_t len = 0;
        s = cf_template_render(t, v, 1, opt, &out, &len, &err);
        if (s == CINFER_OK) snprintf(msg, cap, "%s", out);
        free(out);
        cf_template_free(t);
    }
    if (s != CINFER_OK) snprintf(msg, cap, "%s", err.message);
    return s;
}

static void expect_error(const char *src, const char *vars, const cf_template_options *opt, cinfer_status code,
                         const char *needle1, const char *needle2) {
    char msg[600];
    cinfer_status s = render(src, vars, opt, msg, sizeof msg);
    CHECK(s == code, "'%.50s': status %d, want %d (%s)", src, s, code, msg);
    CHECK(strstr(msg, needle1) != NULL, "'%.50s': message '%s' lacks '%s'", src, msg, needle1);
    if (needle2) CHECK(strstr(msg, needle2) != NULL, "'%.50s': message '%s' lacks '%s'", src, msg, needle2);
}

static void test_errors(void) {
    expect_error("line1\n{% if x %}\n  {{ y.z }}\n{% endif %}", "{\"x\": 1}", NULL, CINFER_E_TEMPLATE,
                 "template line 3", "'y' is undefined");
    expect_error("a\nb\n{% for x in %}{% endfor %}", NULL, NULL, CINFER_E_TEMPLATE, "template line 3", "expected an expression");
    expect_error("{% include 'x.html' %}", NULL, NULL, CINFER_E_TEMPLATE, "line 1", "'include' tag is not supported");
    expect_error("\n\n{{ x | nosuch }}", NULL, NULL, CINFER_E_TEMPLATE, "line 3", "no filter named 'nosuch'");
    expect_error("{{ x | groupby('a') }}", NULL, NULL, CINFER_E_TEMPLATE, "line 1", "filter 'groupby' is not supported");
    expect_error("{% if x %}never closed", NULL, NULL, CINFER_E_TEMPLATE, "line 1", "expected 'elif'");
    expect_error("{% frobnicate %}", NULL, NULL, CINFER_E_TEMPLATE, "line 1", "unknown tag 'frobnicate'");
    expect_error("{{ 'unterminated }}", NULL, NULL, CINFER_E_TEMPLATE, "line 1", NULL);
    expect_error("{% break %}", NULL, NULL, CINFER_E_TEMPLATE, "line 1", "outside of a for loop");
    expect_error("{# open comment", NULL, NULL, CINFER_E_TEMPLATE, "line 1", "missing end of comment");
    expect_error("ok\n{{ raise_exception('bad roles') }}", NULL, NULL, CINFER_E_TEMPLATE, "line 2", "bad roles");
    expect_error("{{ 1 // 0 }}", NULL, NULL, CINFER_E_TEMPLATE, "line 1", "by zero");
    expect_error("{{ 'a'.format(1) }}", NULL, NULL, CINFER_E_TEMPLATE, "line 1", "format() is not supported");
    expect_error("{{ x }}", "{\"x\": [1, }", NULL, CINFER_E_INVALID_ARGUMENT, "invalid JSON", NULL);
    expect_error("{{ x }}", "[1, 2]", NULL, CINFER_E_INVALID_ARGUMENT, "expected a JSON object", NULL);
    expect_error("{{ x }}", "{\"x\": \"\xff\"}", NULL, CINFER_E_INVALID_ARGUMENT, "invalid UTF-8", NULL);
}

static void test_bounds(void) {
    cf_template_options steps = {.max_steps = 100000};
    expect_error("{% for i in range(1000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}", NULL, &steps,
                 CINFER_E_TEMPLATE, "line 1", "steps");
    cf_template_options out = {.max_output = 100};
    expect_error("{% for i in range(1000) %}xxxxxxxx{% endfor %}", NULL, &out, CINFER_E_TEMPLATE, "output exceeds", NULL);
    expect_error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}\n{{ f(0) }}", NULL, NULL, CINFER_E_TEMPLATE,
                 "nested deeper", NULL);
    cf_template_options mem = {.max_memory = 1 << 20};
    expect_error("{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
                 NULL, &mem, CINFER_E_TEMPLATE, "memory", NULL);
    expect_error("{{ range(200000)|length }}", NULL, NULL, CINFER_E_TEMPLATE, "range too big", NULL);
    /* pathological nesting is refused at parse time, not by the C stack */
    size_t n = 5000;
    char *deep = malloc(2 * n + 16);
    strcpy(deep, "{{ ");
    for (size_t i = 0; i < n; i++) strcat(deep, "(");
    strcat(deep, "1");
    for (size_t i = 0; i < n; i++) strcat(deep, ")");
    strcat(deep, " }}");
    expect_error(deep, NULL, NULL, CINFER_E_TEMPLATE, "line 1", NULL);
    free(deep);
    char msg[600];
    CHECK(render("{{ 'x' * 500 }}", NULL, NULL, msg, sizeof msg) == CINFER_OK && strlen(msg) == 500, "within bounds renders");
}

/* head + n copies of unit + tail, malloc'd. */
static char *repeat(const char *head, const char *unit, size_t n, const char *tail) {
    size_t hl = strlen(head), ul = strlen(unit), tl = strlen(tail);
    char *s = malloc(hl + n * ul + tl + 1);
    memcpy(s, head, hl);
    for (size_t i = 0; i < n; i++) memcpy(s + hl + i * ul, unit, ul);
    memcpy(s + hl + n * ul, tail, tl + 1);
    return s;
}

/* Hostile nesting that the parser cannot see (postfix and filter chains, elif chains, values built by
 * loops) must give an error, never overflow the C stack. */
static void test_deep(void) {
    static const struct { const char *head, *unit, *tail; const char *needle; } chains[] = {
        {"{{ x", ".a", " }}", "nested too deeply"},
        {"{{ x", "[0]", " }}", "nested too deeply"},
        {"{{ 'a'", "|upper", " }}", "nested too deeply"},
        {"{{ 1", " + 1", " }}", "nested too deeply"},
        {"{% macro m() %}{{ x", ".a", " }}{% endmacro %}", "nested too deeply"},
        {"{{ f", "()", " }}", "nested too deeply"},
        {"{% set x | upper", "|upper", " %}a{% endset %}{{ x }}", "nested too deeply"},
        {"{% filter upper", "|upper", " %}a{% endfilter %}", "nested too deeply"},
    };
    for (size_t i = 0; i < sizeof chains / sizeof chains[0]; i++) {
        char *src = repeat(chains[i].head, chains[i].unit, 100000, chains[i].tail);
        expect_error(src, "{\"x\": {}}", NULL, CINFER_E_TEMPLATE, "line 1", chains[i].needle);
        free(src);
    }
    char msg[600];
    char *elifs = repeat("{% if x == 0 %}0", "{% elif x == 1 %}1", 100000, "{% else %}e{% endif %}");
    CHECK(render(elifs, "{\"x\": 2}", NULL, msg, sizeof msg) == CINFER_OK && !strcmp(msg, "e"),
          "a long elif chain renders: %s", msg);
    free(elifs);
    static const char *const ops[] = {
        "{{ ns.x == ns.y }}", "{{ ns.x != ns.y }}", "{{ ns.x in [ns.y] }}", "{{ [ns.x, ns.y]|sort|length }}",
        "{{ ns.x < ns.y }}", "{{ ns.x|tojson }}", "{{ ns.x|string }}", "{{ ns.x }}", "{{ {ns.t: 1}[ns.t] }}",
        "{{ [ns.x]|unique|list|length }}", "{{ ns.x|max }}",
    };
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        char src[600];
        snprintf(src, sizeof src,
                 "{%% set ns = namespace(x=[], y=[], t=()) %%}{%% for i in range(100000) %%}"
                 "{%% set ns.x = [ns.x] %%}{%% set ns.y = [ns.y] %%}{%% set ns.t = (ns.t,) %%}{%% endfor %%}%s", ops[i]);
        expect_error(src, NULL, NULL, CINFER_E_TEMPLATE, "line 1", "nested too deeply");
    }
    /* shared sub-values: small in memory, exponential to walk */
    static const char *const wide[] = {"{{ ns.x == ns.y }}", "{{ ns.x|tojson|length }}", "{{ ns.x|string|length }}",
                                       "{{ [ns.x, ns.y]|sort|length }}"};
    for (size_t i = 0; i < sizeof wide / sizeof wide[0]; i++) {
        char src[600];
        snprintf(src, sizeof src,
                 "{%% set ns = namespace(x=0, y=0) %%}{%% for i in range(60) %%}"
                 "{%% set ns.x = [ns.x, ns.x] %%}{%% set ns.y = [ns.y, ns.y] %%}{%% endfor %%}%s", wide[i]);
        cf_template_options few = {.max_steps = 1000000};
        cinfer_status s = render(src, NULL, &few, msg, sizeof msg);
        CHECK(s == CINFER_E_TEMPLATE && (strstr(msg, "steps") || strstr(msg, "memory")), "'%s': %d %s", wide[i], s, msg);
    }
    /* JSON input as deep as the JSON reader allows still renders */
    char *json = repeat("{\"x\": ", "[", 250, "");
    char *tmp = repeat(json, "]", 250, "}");
    CHECK(render("{{ x|tojson|length }} {{ x == x }}", tmp, NULL, msg, sizeof msg) == CINFER_OK && !strcmp(msg, "500 True"),
          "250 levels of JSON: %s", msg);
    free(json);
    free(tmp);
}

/* Bad message JSON names the message, the field and the byte. */
static void test_bad_variables(void) {
    cf_template *t = NULL;
    cinfer_error err = {0};
    CHECK(cf_template_compile("{{ messages }}", 14, &t, &err) == CINFER_OK, "compile: %s", err.message);
    if (!t) return;
    static const struct { const char *json, *want; } cases[] = {
        {"[{\"role\": \"user\", \"content\": \"a\"}, {}, {\"role\": \"user\", \"content\": \"0123456789abcdefg\xff\"}]",
         "template variable messages[2].content: invalid UTF-8 at byte 17"},
        {"[{\"content\": [{\"type\": \"text\", \"text\": \"\\n\xc3\"}]}]",
         "template variable messages[0].content[0].text: invalid UTF-8 at byte 1"},
        {"[{\"a b\": \"\xed\xa0\x80\"}]", "template variable messages[0][\"a b\"]: invalid UTF-8 at byte 0"},
        {"[{\"role\": \"user\"}, {\"role\" \"x\"}]", "template variable messages[1]: invalid JSON: expected ':' at byte 27"},
        {"[1, 2", "template variable messages: invalid JSON: expected ',' or ']' at byte 5"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cf_template_var v = {"messages", cases[i].json};
        char *out = NULL;
        cinfer_status s = cf_template_render(t, &v, 1, NULL, &out, NULL, &err);
        CHECK(s == CINFER_E_INVALID_ARGUMENT && !strcmp(err.message, cases[i].want), "case %zu: %d '%s', want '%s'", i, s,
              err.message, cases[i].want);
        free(out);
    }
    cf_template_free(t);
}

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (!f) return;
    fputs(text, f);
    fclose(f);
}

static void test_loading(void) {
    char dir[] = "/tmp/cinfer-tmpl-XXXXXX";
    if (!mkdtemp(dir)) { CHECK(0, "mkdtemp"); return; }
    char cfg[512], jinja[512];
    snprintf(cfg, sizeof cfg, "%s/tokenizer_config.json", dir);
    snprintf(jinja, sizeof jinja, "%s/chat_template.jinja", dir);
    write_file(cfg, "{\"bos_token\": {\"content\": \"<s>\", \"lstrip\": false}, \"eos_token\": \"</s>\", \"pad_token\": null,"
                    " \"additional_special_tokens\": [\"<a>\", {\"content\": \"<b>\"}],"
                    " \"chat_template\": [{\"name\": \"default\", \"template\": \"D{{ bos_token }}{{ messages[0].content }}"
                    "{{ eos_token }}{{ pad_token is defined }}{{ additional_special_tokens }}\\n\"},"
                    " {\"name\": \"tool_use\", \"template\": \"T{{ tools|length }}{{ add_generation_prompt }}{{ documents }}\"}]}");
    cf_chat_template *ct = NULL;
    cinfer_error err = {0};
    char *out = NULL;
    size_t len = 0;
    cf_chat_request req = {.messages_json = "[{\"role\": \"user\", \"content\": \"hi\"}]"};
    CHECK(cf_chat_template_load(dir, NULL, &ct, &err) == CINFER_OK, "load default: %s", err.message);
    if (ct && cf_chat_template_render(ct, &req, NULL, &out, &len, &err) == CINFER_OK)
        CHECK(!strcmp(out, "D<s>hi</s>False['<a>', '<b>']"), "default template got '%s'", out);
    else CHECK(0, "render default: %s", err.message);
    free(out);
    out = NULL;
    CHECK(ct && cf_chat_template_set_tokens(ct, "[BOS]", NULL, &err) == CINFER_OK, "set tokens");
    if (ct && cf_chat_template_render(ct, &req, NULL, &out, &len, &err) == CINFER_OK)
        CHECK(!strncmp(out, "D[BOS]hi</s>", 12), "overridden BOS got '%s'", out);
    free(out);
    out = NULL;
    cf_chat_template_free(ct);
    ct = NULL;
    req.tools_json = "[{\"type\": \"function\"}, {\"type\": \"function\"}]";
    req.add_generation_prompt = 1;
    CHECK(cf_chat_template_load(dir, "tool_use", &ct, &err) == CINFER_OK, "load tool_use: %s", err.message);
    if (ct && cf_chat_template_render(ct, &req, NULL, &out, &len, &err) == CINFER_OK)
        CHECK(!strcmp(out, "T2TrueNone"), "tool_use template got '%s'", out);
    free(out);
    out = NULL;
    cf_chat_template_free(ct);
    ct = NULL;
    CHECK(cf_chat_template_load(dir, "nope", &ct, &err) == CINFER_E_INVALID_ARGUMENT && strstr(err.message, "default, tool_use"),
          "unknown name lists the templates: %s", err.message);
    write_file(jinja, "J{{ messages|length }}");
    CHECK(cf_chat_template_load(dir, NULL, &ct, &err) == CINFER_OK, "load jinja file: %s", err.message);
    if (ct && cf_chat_template_render(ct, &req, NULL, &out, &len, &err) == CINFER_OK)
        CHECK(!strcmp(out, "J1"), "chat_template.jinja wins, got '%s'", out);
    free(out);
    cf_chat_template_free(ct);
    ct = NULL;
    unlink(jinja);
    write_file(cfg, "{\"eos_token\": \"</s>\"}");
    CHECK(cf_chat_template_load(dir, NULL, &ct, &err) == CINFER_E_INVALID_ARGUMENT && strstr(err.message, "no chat template"),
          "folder without a template: %s", err.message);
    write_file(cfg, "{\"chat_template\": \"{% if %}\"}");
    CHECK(cf_chat_template_load(dir, NULL, &ct, &err) == CINFER_E_TEMPLATE && strstr(err.message, "tokenizer_config.json"),
          "broken template names the file: %s", err.message);
    unlink(cfg);
    rmdir(dir);
}

int main(void) {
    test_errors();
    test_bounds();
    test_deep();
    test_bad_variables();
    test_loading();
    printf("%d passed, %d failed\n", checks - failures, failures);
    return failures ? 1 : 0;
}
