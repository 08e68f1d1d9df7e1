/* file.c: whole-file reads of regular files, bounded in size, and whole-file copies. */
#include "base/file.h"
#include "base/status.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char *cf_file_kind(unsigned m) {
    if (S_ISREG(m)) return "a regular file";
    if (S_ISDIR(m)) return "a directory";
    if (S_ISFIFO(m)) return "a FIFO";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    if (S_ISSOCK(m)) return "a socket";
    return "not a regular file";
}

cinfer_status cf_file_read(const char *path, size_t max, int optional, char **data, size_t *len,
                           cinfer_error *err) {
    *data = NULL;
    if (len) *len = 0;
    /* O_NONBLOCK: opening a FIFO must not wait for a writer; it has no effect on a regular file. */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        if (optional && errno == ENOENT) return CINFER_OK;
        return cf_fail(err, CINFER_E_IO, "%s: cannot open: %s", path, strerror(errno));
    }
    struct stat sb;
    cinfer_status st = CINFER_OK;
    if (fstat(fd, &sb) != 0)
        st = cf_fail(err, CINFER_E_IO, "%s: cannot stat: %s", path, strerror(errno));
    else if (!S_ISREG(sb.st_mode))
        st = cf_fail(err, CINFER_E_IO, "%s: is %s, not a regular file", path, cf_file_kind(sb.st_mode));
    else if (sb.st_size < 0 || (unsigned long long)sb.st_size > max)
        st = cf_fail(err, CINFER_E_FORMAT, "%s: %lld bytes is more than the %zu bytes allowed for this file", path,
                     (long long)sb.st_size, max);
    size_t n = st == CINFER_OK ? (size_t)sb.st_size : 0, got = 0;
    char *buf = st == CINFER_OK ? malloc(n + 1) : NULL;
    if (st == CINFER_OK && !buf) st = cf_fail(err, CINFER_E_OUT_OF_MEMORY, "%s: out of memory reading %zu bytes", path, n);
    while (st == CINFER_OK && got < n) {
        ssize_t k = read(fd, buf + got, n - got);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) st = cf_fail(err, CINFER_E_IO, "%s: read error: %s", path, strerror(errno));
        if (k <= 0) break; /* a file that shrank while read ends early */
        got += (size_t)k;
    }
    close(fd);
    if (st != CINFER_OK) {
        free(buf);
        return st;
    }
    buf[got] = 0;
    *data = buf;
    if (len) *len = got;
    return CINFER_OK;
}

char *cf_read_file(const char *path, size_t *len) {
    char *data;
    return cf_file_read(path, CF_FILE_MAX_CONFIG, 0, &data, len, NULL) == CINFER_OK ? data : NULL;
}

cinfer_status cf_file_copy(const char *from, const char *to, int optional, cinfer_error *err) {
    char *data = NULL;
    size_t len = 0;
    CF_TRY(cf_file_read(from, CF_FILE_MAX_CONFIG, optional, &data, &len, err));
    if (!data) return CINFER_OK;   /* optional and not there: nothing to copy */
    FILE *fp = fopen(to, "wb");
    if (!fp) {
        free(data);
        return cf_fail(err, CINFER_E_IO, "%s: cannot create: %s", to, strerror(errno));
    }
    int ok = fwrite(data, 1, len, fp) == len;
    free(data);
    if (fclose(fp) != 0 || !ok) return cf_fail(err, CINFER_E_IO, "%s: write failed", to);
    return CINFER_OK;
}
