/* test_template_goldens.c: renders every chat template over every conversation of goldens.json, and
 * every snippet of snippets.json, and requires the exact bytes Python jinja2 produced (or an error
 * where jinja2 raised). Usage: test_template_goldens FIXTURES_DIR CACHE_DIR */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "text/template.h"
#include "base/file.h"

static int failures, checks;

static void show_diff(const char *what, const char *want, const char *got, size_t got_len) {
    size_t i = 0, wl = strlen(want);
    while (i < wl && i < got_len && want[i] == got[i]) i++;
    size_t from = i > 40 ? i - 40 : 0;
    fprintf(stderr, "FAIL %s: differs at byte %zu\n  want: %.*s\n  got:  %.*s\n", what, i,
            (int)(wl - from > 120 ? 120 : wl - from), want + from,
            (int)(got_len - from > 120 ? 120 : got_len - from), got + from);
}

/* One render, checked against golden {"out": ...} or {"error": ...}. */
static void check(const char *what, const cf_template *t, const cf_template_var *vars, int n, int64_t now,
                  const cJSON *golden) {
    cf_template_options opt = {.now = now};
    char *out = NULL;
    size_t len = 0;
    cinfer_error err = {0};
    cinfer_status s = cf_template_render(t, vars, n, &opt, &out, &len, &err);
    const cJSON *want = cJSON_GetObjectItemCaseSensitive(golden, "out");
    checks++;
    if (cJSON_IsString(want)) {
        if (s != CINFER_OK) {
            fprintf(stderr, "FAIL %s: render failed: %s\n", what, err.message);
            failures++;
        } else if (len != strlen(want->valuestring) || memcmp(out, want->valuestring, len) != 0) {
            show_diff(what, want->valuestring, out, len);
            failures++;
        }
    } else if (s == CINFER_OK) {
        fprintf(stderr, "FAIL %s: rendered, but jinja2 raised %s\n", what,
                cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(golden, "message")));
        failures++;
    } else if (s != CINFER_E_TEMPLATE) {
        fprintf(stderr, "FAIL %s: wrong error code %d: %s\n", what, s, err.message);
        failures++;
    }
    free(out);
}

static char *template_source(const char *fixtures, const char *cache, const cJSON *meta) {
    char path[4096];
    const char *file = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(meta, "file"));
    if (file) {
        snprintf(path, sizeof path, "%s/%s", fixtures, file);
        return cf_read_file(path, NULL);
    }
    const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(meta, "cache"));
    snprintf(path, sizeof path, "%s/%s/tokenizer_config.json", cache, name ? name : "?");
    char *text = cf_read_file(path, NULL);
    cJSON *cfg = text ? cJSON_Parse(text) : NULL;
    free(text);
    const char *src = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(cfg, "chat_template"));
    char *r = src ? strdup(src) : NULL;
    cJSON_Delete(cfg);
    return r;
}

static int run_goldens(const char *fixtures, const char *cache) {
    char path[4096];
    snprintf(path, sizeof path, "%s/goldens.json", fixtures);
    char *text = cf_read_file(path, NULL);
    cJSON *g = text ? cJSON_Parse(text) : NULL;
    free(text);
    if (!g) { fprintf(stderr, "cannot read %s\n", path); return 1; }
    int64_t now = (int64_t)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(g, "now"));
    const cJSON *templates = cJSON_GetObjectItemCaseSensitive(g, "templates");
    const cJSON *special = cJSON_GetObjectItemCaseSensitive(g, "special_json");
    const cJSON *inputs = cJSON_GetObjectItemCaseSensitive(g, "inputs");
    const cJSON *results = cJSON_GetObjectItemCaseSensitive(g, "results");
    const cJSON *meta;
    cJSON_ArrayForEach(meta, templates) {
        char *src = template_source(fixtures, cache, meta);
        if (!src) {
            fprintf(stderr, "FAIL %s: template source missing (run tools/templates/fetch_templates.sh)\n", meta->string);
            failures++;
            continue;
        }
        cf_template *t = NULL;
        cinfer_error err = {0};
        if (cf_template_compile(src, strlen(src), &t, &err) != CINFER_OK) {
            fprintf(stderr, "FAIL %s: compile: %s\n", meta->string, err.message);
            failures++;
            free(src);
            continue;
        }
        const cJSON *r;
        cJSON_ArrayForEach(r, cJSON_GetObjectItemCaseSensitive(results, meta->string)) {
            const cJSON *in = cJSON_GetObjectItemCaseSensitive(inputs, r->string);
            const char *tools = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(in, "tools"));
            cf_template_var vars[] = {
                {NULL, cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(special, meta->string))},
                {NULL, cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(in, "kwargs"))},
                {"messages", cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(in, "messages"))},
                {"tools", tools ? tools : "null"},
                {"documents", "null"},
                {"add_generation_prompt",
                 cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(in, "add_generation_prompt")) ? "true" : "false"},
            };
            char what[256];
            snprintf(what, sizeof what, "%s/%s", meta->string, r->string);
            check(what, t, vars, 6, now, r);
        }
        cf_template_free(t);
        free(src);
    }
    cJSON_Delete(g);
    return 0;
}

static int run_snippets(const char *fixtures) {
    char path[4096];
    snprintf(path, sizeof path, "%s/snippets.json", fixtures);
    char *text = cf_read_file(path, NULL);
    cJSON *g = text ? cJSON_Parse(text) : NULL;
    free(text);
    if (!g) { fprintf(stderr, "cannot read %s\n", path); return 1; }
    int64_t now = (int64_t)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(g, "now"));
    const cJSON *sn;
    int i = 0;
    cJSON_ArrayForEach(sn, cJSON_GetObjectItemCaseSensitive(g, "snippets")) {
        const char *src = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(sn, "template"));
        const char *vars_json = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(sn, "vars"));
        char what[128];
        snprintf(what, sizeof what, "snippet %d (%.60s)", i++, src);
        cf_template *t = NULL;
        cinfer_error err = {0};
        if (cf_template_compile(src, strlen(src), &t, &err) != CINFER_OK) {
            checks++;
            if (cJSON_IsString(cJSON_GetObjectItemCaseSensitive(sn, "out"))) {
                fprintf(stderr, "FAIL %s: compile: %s\n", what, err.message);
                failures++;
            }
            continue;
        }
        cf_template_var vars[] = {{NULL, vars_json}};
        check(what, t, vars, 1, now, sn);
        cf_template_free(t);
    }
    cJSON_Delete(g);
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s FIXTURES_DIR CACHE_DIR\n", argv[0]);
        return 2;
    }
    setenv("TZ", "UTC", 1);
    tzset();
    if (run_goldens(argv[1], argv[2]) || run_snippets(argv[1])) return 1;
    printf("%d passed, %d failed\n", checks - failures, failures);
    return failures ? 1 : 0;
}
