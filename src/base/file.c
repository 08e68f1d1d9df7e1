/* file.c: whole-file reads. */
#include "base/file.h"

#include <stdio.h>
#include <stdlib.h>

char *cf_read_file(const char *path, size_t *len) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    char *buf = NULL;
    long n = fseek(fp, 0, SEEK_END) == 0 ? ftell(fp) : -1;
    if (n >= 0 && fseek(fp, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n + 1)) != NULL) {
        if (fread(buf, 1, (size_t)n, fp) == (size_t)n) {
            buf[n] = 0;
            if (len) *len = (size_t)n;
        } else {
            free(buf);
            buf = NULL;
        }
    }
    fclose(fp);
    return buf;
}
