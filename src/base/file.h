/* file.h: reading a whole file (configs, indexes, tokenizers, templates) into memory. Only regular files
 * are read, so a directory or FIFO in a model folder fails at once instead of blocking or looping. */
#ifndef CF_BASE_FILE_H
#define CF_BASE_FILE_H

#include <stddef.h>
#include "cinfer.h"

/* The size cap for a model folder's JSON and template files. */
#define CF_FILE_MAX_CONFIG ((size_t)1 << 30)

/* Reads the regular file at path (symlinks followed) into *data: malloc'd and NUL-terminated, *len (if
 * given) excludes the NUL. Fails with CINFER_E_IO when the file cannot be opened or read or is not a
 * regular file, and CINFER_E_FORMAT when it holds more than max bytes. With optional set, a missing
 * file gives CINFER_OK with *data NULL. */
cinfer_status cf_file_read(const char *path, size_t max, int optional, char **data, size_t *len,
                           cinfer_error *err);

/* Copies the regular file at from (read as cf_file_read does, up to CF_FILE_MAX_CONFIG bytes) to to, created or
 * truncated. With optional set, a missing from copies nothing and gives CINFER_OK. */
cinfer_status cf_file_copy(const char *from, const char *to, int optional, cinfer_error *err);

/* "a directory", "a FIFO", "a character device", ... for a st_mode. */
const char *cf_file_kind(unsigned mode);

/* cf_file_read with the CF_FILE_MAX_CONFIG cap, for callers that need no reason: NULL on any failure. */
char *cf_read_file(const char *path, size_t *len);

#endif
