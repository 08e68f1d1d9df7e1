/* test_file.c: cf_file_read reads regular files (also through symlinks) whole and refuses, at once and
 * with the reason, what is missing, not a regular file (directory, FIFO, device) or over its cap;
 * cf_read_file gives NULL for all of those. Usage: test_file TMPDIR */
#include "base/file.h"
#include "check.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[2048];

static const char *path_of(const char *name) {
    static char p[4096];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return p;
}

static void expect_fail(const char *path, size_t max, cinfer_status code, const char *want) {
    char *data = (char *)"untouched";
    size_t len = 7;
    cinfer_error err = {0};
    cinfer_status st = cf_file_read(path, max, 1, &data, &len, &err);
    CHECK(st == code && data == NULL && len == 0, "%s: status %s (want %s): %s", path, cinfer_status_name(st),
          cinfer_status_name(code), err.message);
    CHECK(strstr(err.message, want) && strstr(err.message, path), "%s: message '%s' lacks '%s' or the path", path,
          err.message, want);
    if (st == CINFER_OK) free(data);
    if (code == CINFER_E_IO) CHECK(cf_read_file(path, NULL) == NULL, "cf_read_file(%s) is NULL", path);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: test_file TMPDIR\n");
        return 2;
    }
    snprintf(dir, sizeof dir, "%s", argv[1]);
    mkdir(dir, 0755);
    alarm(60);

    FILE *fp = fopen(path_of("ten"), "wb");
    fputs("0123456789", fp);
    fclose(fp);
    fclose(fopen(path_of("empty"), "wb"));
    char target[4096];
    snprintf(target, sizeof target, "%s", path_of("ten"));
    unlink(path_of("link"));
    CHECK(symlink(target, path_of("link")) == 0, "symlink");

    char *data = NULL;
    size_t len = 0;
    cinfer_error err = {0};
    CHECK(cf_file_read(path_of("ten"), 10, 0, &data, &len, &err) == CINFER_OK && len == 10 && !strcmp(data, "0123456789"),
          "ten bytes with a cap of ten: %s", err.message);
    free(data);
    CHECK(cf_file_read(path_of("link"), 100, 0, &data, NULL, &err) == CINFER_OK && !strcmp(data, "0123456789"),
          "through a symlink: %s", err.message);
    free(data);
    CHECK(cf_file_read(path_of("empty"), 0, 0, &data, &len, &err) == CINFER_OK && len == 0 && data && !data[0],
          "empty file: %s", err.message);
    free(data);
    CHECK(cf_file_read(path_of("missing"), 10, 1, &data, &len, &err) == CINFER_OK && !data, "missing optional file");
    CHECK(cf_file_read(path_of("missing"), 10, 0, &data, &len, &err) == CINFER_E_IO && !data &&
              strstr(err.message, "No such file"),
          "missing file: %s", err.message);
    data = cf_read_file(path_of("ten"), &len);
    CHECK(data && len == 10, "cf_read_file");
    free(data);

    expect_fail(path_of("ten"), 9, CINFER_E_FORMAT, "more than the 9 bytes");
    mkdir(path_of("dir"), 0755);
    expect_fail(path_of("dir"), 1 << 20, CINFER_E_IO, "is a directory, not a regular file");
    unlink(path_of("fifo"));
    CHECK(mkfifo(path_of("fifo"), 0644) == 0, "mkfifo");
    expect_fail(path_of("fifo"), 1 << 20, CINFER_E_IO, "is a FIFO, not a regular file");
    expect_fail("/dev/zero", 1 << 20, CINFER_E_IO, "is a character device, not a regular file");
    snprintf(target, sizeof target, "%s", path_of("nowhere"));
    unlink(path_of("dangling"));
    CHECK(symlink(target, path_of("dangling")) == 0, "symlink");
    CHECK(cf_file_read(path_of("dangling"), 10, 1, &data, &len, &err) == CINFER_OK && !data, "dangling optional symlink");

    printf("test_file: %d checks, %d failures\n", checks, failures);
    return failures != 0;
}
