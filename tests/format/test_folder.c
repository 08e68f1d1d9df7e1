/* test_folder.c: a model folder whose files are symlinks to a fixture model loads; each of its files
 * replaced by a directory, a FIFO, a device or an oversized file, and sharded sets whose index names
 * missing files or paths outside the folder, fail cinfer_model_load at once with a message naming the
 * file. A regression to a blocking open() is caught by the alarm (and the ctest TIMEOUT).
 * Usage: test_folder FIXTURE_MODEL_DIR TMPDIR */
#include "cinfer.h"
#include "format/safetensors.h"
#include "check.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char fixture[4096], tmp[2048];

static void rm_tree(const char *path) {
    struct stat sb;
    if (lstat(path, &sb) != 0) return;
    if (S_ISDIR(sb.st_mode)) {
        DIR *d = opendir(path);
        struct dirent *e;
        while (d && (e = readdir(d)) != NULL) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            char p[4096];
            snprintf(p, sizeof p, "%s/%s", path, e->d_name);
            rm_tree(p);
        }
        if (d) closedir(d);
        rmdir(path);
    } else {
        unlink(path);
    }
}

/* A fresh folder tmp/name of symlinks to every file of the fixture model; returns its path. */
static const char *make_folder(const char *name) {
    static char dir[4096];
    snprintf(dir, sizeof dir, "%s/%s", tmp, name);
    rm_tree(dir);
    mkdir(dir, 0755);
    DIR *d = opendir(fixture);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        char from[4096], to[8192];
        snprintf(from, sizeof from, "%s/%s", fixture, e->d_name);
        snprintf(to, sizeof to, "%s/%s", dir, e->d_name);
        CHECK(symlink(from, to) == 0, "symlink %s: %s", to, strerror(errno));
    }
    if (d) closedir(d);
    return dir;
}

enum kind { AS_DIR, AS_FIFO, AS_CHARDEV, AS_HUGE };
static const char *const kind_names[] = {"a directory", "a FIFO", "/dev/zero", "a file over 1 GiB"};

static void replace(const char *dir, const char *file, enum kind k) {
    char p[8192];
    snprintf(p, sizeof p, "%s/%s", dir, file);
    unlink(p);
    int ok = 1;
    if (k == AS_DIR) ok = mkdir(p, 0755) == 0;
    if (k == AS_FIFO) ok = mkfifo(p, 0644) == 0;
    if (k == AS_CHARDEV) ok = symlink("/dev/zero", p) == 0;
    if (k == AS_HUGE) {
        FILE *fp = fopen(p, "wb");
        ok = fp && fclose(fp) == 0 && truncate(p, ((off_t)1 << 30) + 1) == 0;
    }
    CHECK(ok, "making %s %s: %s", p, kind_names[k], strerror(errno));
}

static void write_text(const char *dir, const char *file, const char *text) {
    char p[8192];
    snprintf(p, sizeof p, "%s/%s", dir, file);
    unlink(p);
    FILE *fp = fopen(p, "wb");
    if (fp) {
        fputs(text, fp);
        fclose(fp);
    }
}

/* Loading dir must fail with code and a message containing both want and want2 (when given). */
static void expect_fail(const char *what, const char *dir, cinfer_status code, const char *want, const char *want2) {
    fprintf(stderr, "loading: %s\n", what); /* the last line printed names a case that hangs */
    cinfer_model *m = NULL;
    cinfer_error err = {0};
    cinfer_status st = cinfer_model_load(dir, NULL, &m, &err);
    CHECK(st == code && m == NULL, "%s: status %s (want %s): %s", what, cinfer_status_name(st), cinfer_status_name(code),
          err.message);
    CHECK(strstr(err.message, want) && (!want2 || strstr(err.message, want2)), "%s: message '%s' lacks '%s'", what,
          err.message, want);
    if (st == CINFER_OK) cinfer_model_free(m);
}

/* A broken chat template only breaks chat: dir loads, and a chat request fails with code naming want and want2. */
static void expect_chat_fail(const char *what, const char *dir, cinfer_status code, const char *want, const char *want2) {
    fprintf(stderr, "loading: %s\n", what);
    cinfer_model *m = NULL;
    cinfer_engine *e = NULL;
    cinfer_session *s = NULL;
    cinfer_error err = {0};
    CHECK(cinfer_model_load(dir, NULL, &m, &err) == CINFER_OK, "%s: the model does not load: %s", what, err.message);
    if (!m) return;
    CHECK(cinfer_model_get_info(m).has_chat_template, "%s: no chat template reported", what);
    CHECK(cinfer_engine_create(m, NULL, &e, &err) == CINFER_OK, "%s: engine: %s", what, err.message);
    const cinfer_message msg = {.role = "user", .content = "hi"};
    cinfer_request r = cinfer_request_default();
    r.messages = &msg;
    r.n_messages = 1;
    r.max_tokens = 1;
    cinfer_status st = e ? cinfer_session_open(e, &r, NULL, &s, &err) : CINFER_E_INTERNAL;
    CHECK(st == code && !s, "%s: chat request status %s (want %s): %s", what, cinfer_status_name(st), cinfer_status_name(code),
          err.message);
    CHECK(strstr(err.message, want) && (!want2 || strstr(err.message, want2)), "%s: message '%s' lacks '%s'", what,
          err.message, want);
    if (s) cinfer_session_free(s);
    cinfer_engine_free(e);
    cinfer_model_free(m);
}

static void check_files(void) {
    static const char *const files[] = {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                                        "special_tokens_map.json", "chat_template.jinja", "model.safetensors"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        for (int k = AS_DIR; k <= AS_HUGE; k++) {
            if (k == AS_HUGE && !strcmp(files[i], "model.safetensors")) continue; /* weights have no size cap */
            char what[256];
            snprintf(what, sizeof what, "%s as %s", files[i], kind_names[k]);
            const char *dir = make_folder("case");
            replace(dir, files[i], (enum kind)k);
            (strcmp(files[i], "chat_template.jinja") ? expect_fail : expect_chat_fail)(
                what, dir, k == AS_HUGE ? CINFER_E_FORMAT : CINFER_E_IO, files[i], k == AS_HUGE ? "more than" : "not a regular file");
        }
    }
}

static void write_index(const char *dir, const char *shard) {
    cf_st_set *set = NULL;
    char p[8192];
    snprintf(p, sizeof p, "%s/model.safetensors", fixture);
    cinfer_error err = {0};
    CHECK(cf_st_open_file(p, &set, &err) == CINFER_OK, "%s", err.message);
    size_t n = set ? cf_st_count(set) : 0, len = 0, cap = 64 + n * 512;
    char *text = malloc(cap);
    len += (size_t)snprintf(text, cap, "{\"metadata\":{},\"weight_map\":{");
    for (size_t i = 0; i < n; i++)
        len += (size_t)snprintf(text + len, cap - len, "%s\"%s\":%s", i ? "," : "", cf_st_at(set, i)->name, shard);
    snprintf(text + len, cap - len, "}}");
    write_text(dir, "model.safetensors.index.json", text);
    free(text);
    cf_st_close(set);
}

/* A sharded folder: model.safetensors moved to shard-1.safetensors, named by an index. */
static const char *make_sharded(const char *shard_json) {
    const char *dir = make_folder("sharded");
    char from[8192], to[8192];
    snprintf(from, sizeof from, "%s/model.safetensors", dir);
    snprintf(to, sizeof to, "%s/shard-1.safetensors", dir);
    CHECK(rename(from, to) == 0, "rename: %s", strerror(errno));
    write_index(dir, shard_json);
    return dir;
}

static void check_sharded(void) {
    cinfer_model *m = NULL;
    cinfer_error err = {0};
    CHECK(cinfer_model_load(make_sharded("\"shard-1.safetensors\""), NULL, &m, &err) == CINFER_OK, "sharded: %s", err.message);
    cinfer_model_free(m);

    const char *escape[] = {"\"../llama/model.safetensors\"", "\"/etc/passwd\"", "\"..\"", "\".\"", "\"\"", "\"a/b\"", "7",
                            "null"};
    for (size_t i = 0; i < sizeof escape / sizeof escape[0]; i++) {
        char what[128];
        snprintf(what, sizeof what, "index naming %s", escape[i]);
        expect_fail(what, make_sharded(escape[i]), CINFER_E_FORMAT, "does not name a shard file in the folder", NULL);
    }
    expect_fail("index naming a missing shard", make_sharded("\"shard-2.safetensors\""), CINFER_E_IO, "names shard shard-2",
                "No such file");
    const char *dir = make_sharded("\"shard-1.safetensors\"");
    replace(dir, "shard-1.safetensors", AS_FIFO);
    expect_fail("shard as a FIFO", dir, CINFER_E_IO, "shard-1.safetensors", "not a regular file");
    for (int k = AS_DIR; k <= AS_HUGE; k++) {
        char what[128];
        snprintf(what, sizeof what, "index as %s", kind_names[k]);
        dir = make_sharded("\"shard-1.safetensors\"");
        replace(dir, "model.safetensors.index.json", (enum kind)k);
        expect_fail(what, dir, k == AS_HUGE ? CINFER_E_FORMAT : CINFER_E_IO, "model.safetensors.index.json", NULL);
    }
    dir = make_sharded("\"shard-1.safetensors\"");
    write_text(dir, "model.safetensors.index.json", "{\"weight_map\":[]}");
    expect_fail("index without a weight_map object", dir, CINFER_E_FORMAT, "weight_map", NULL);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: test_folder FIXTURE_MODEL_DIR TMPDIR\n");
        return 2;
    }
    char cwd[2048] = "";
    if (argv[1][0] != '/' && !getcwd(cwd, sizeof cwd)) return 2; /* the symlinks need an absolute target */
    snprintf(fixture, sizeof fixture, "%s%s%s", cwd, cwd[0] ? "/" : "", argv[1]);
    snprintf(tmp, sizeof tmp, "%s", argv[2]);
    mkdir(tmp, 0755);
    alarm(120);

    cinfer_model *m = NULL;
    cinfer_error err = {0};
    CHECK(cinfer_model_load(make_folder("symlinks"), NULL, &m, &err) == CINFER_OK, "a folder of symlinks: %s", err.message);
    CHECK(m && cinfer_model_get_info(m).has_tokenizer && cinfer_model_get_info(m).has_chat_template, "tokenizer and template");
    cinfer_model_free(m);

    check_files();
    check_sharded();
    rm_tree(tmp);
    printf("test_folder: %d checks, %d failures\n", checks, failures);
    return failures != 0;
}
