/* test_template_model.c: a model folder whose chat template is broken, through the public API. It
 * loads; prompts as token ids and as text run; chat requests fail with the template's own error, and a
 * folder whose template is fixed afterwards chats again. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cinfer.h"
#include "../check.h"
#include "../engine/tiny_model.h"

static void write_text(const char *dir, const char *name, const char *text) {
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    CHECK(f != NULL, "cannot write %s", p);
    if (!f) return;
    fputs(text, f);
    fclose(f);
}

/* Opens r on e and waits; returns the status of open or wait, the error in err. */
static cinfer_status run(cinfer_engine *e, const cinfer_request *r, size_t *n_tokens, cinfer_error *err) {
    cinfer_session *s = NULL;
    cinfer_status st = cinfer_session_open(e, r, NULL, &s, err);
    if (st == CINFER_OK) {
        const cinfer_result *res = NULL;
        st = cinfer_session_wait(s, -1, &res, err);
        *n_tokens = res ? res->n_tokens : 0;
    }
    cinfer_session_free(s);
    return st;
}

static void check_folder(const char *dir, int broken) {
    cinfer_model *m = NULL;
    cinfer_engine *e = NULL;
    cinfer_error err = {0};
    cinfer_model_params mp = cinfer_model_default_params();
    mp.n_threads = 1;
    cinfer_status st = cinfer_model_load(dir, &mp, &m, &err);
    CHECK(st == CINFER_OK, "broken=%d: the model loads: %s", broken, err.message);
    if (st != CINFER_OK) return;
    CHECK(cinfer_model_get_info(m).has_chat_template, "broken=%d: the folder has a chat template", broken);
    st = cinfer_engine_create(m, NULL, &e, &err);
    CHECK(st == CINFER_OK, "engine: %s", err.message);
    if (st != CINFER_OK) { cinfer_model_free(m); return; }

    int32_t ids[] = {TINY_BYTE + 'h', TINY_BYTE + 'i'};
    cinfer_request r = cinfer_request_default();
    r.prompt_ids = ids;
    r.n_prompt_ids = 2;
    r.max_tokens = 3;
    r.temperature = 0;
    r.ignore_eos = 1;
    size_t n = 0;
    st = run(e, &r, &n, &err);
    CHECK(st == CINFER_OK && n == 3, "broken=%d: token ids run: %s", broken, err.message);

    r.prompt_ids = NULL;
    r.n_prompt_ids = 0;
    r.prompt_text = "hello";
    st = run(e, &r, &n, &err);
    CHECK(st == CINFER_OK && n == 3, "broken=%d: a text prompt runs: %s", broken, err.message);

    cinfer_message msgs[] = {{.role = "user", .content = "hi"}};
    r.prompt_text = NULL;
    r.messages = msgs;
    r.n_messages = 1;
    memset(&err, 0, sizeof err);
    st = run(e, &r, &n, &err);
    if (broken) {
        CHECK(st == CINFER_E_TEMPLATE, "chat on a broken template: %s (%s)", cinfer_status_name(st), err.message);
        CHECK(strstr(err.message, "chat_template.jinja") && strstr(err.message, "template line 2"),
              "the error names the file and line: %s", err.message);
    } else {
        CHECK(st == CINFER_OK && n == 3, "chat on a fixed template: %s", err.message);
    }
    cinfer_model_free(m);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: test_template_model TMP_DIR\n");
        return 2;
    }
    const char *dir = argv[1];
    if (tiny_model_write(dir, 0)) {
        fprintf(stderr, "cannot write the tiny model to %s\n", dir);
        return 1;
    }
    write_text(dir, "chat_template.jinja", "{% for m in messages %}\n{{ m.content }\n{% endfor %}");
    check_folder(dir, 1);
    write_text(dir, "chat_template.jinja", "{% for m in messages %}{{ m.content }}{% endfor %}");
    check_folder(dir, 0);
    printf("%d passed, %d failed\n", checks - failures, failures);
    return failures ? 1 : 0;
}
