/* file.h: reading a whole small file (configs, indexes) into memory. */
#ifndef CF_BASE_FILE_H
#define CF_BASE_FILE_H

#include <stddef.h>

/* The file's bytes, malloc'd and NUL-terminated (*len, if given, excludes the NUL); NULL if it cannot
 * be read. */
char *cf_read_file(const char *path, size_t *len);

#endif
