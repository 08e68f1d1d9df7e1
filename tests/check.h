/* check.h: the counting CHECK of the newer unit tests: a failed condition prints its place and message
 * and counts; main reports checks and failures and exits non-zero on any. */
#ifndef CF_TESTS_CHECK_H
#define CF_TESTS_CHECK_H

#include <stdio.h>

static int failures, checks;
#define CHECK(cond, ...)                                                                                              \
    do {                                                                                                              \
        checks++;                                                                                                     \
        if (!(cond)) {                                                                                                \
            failures++;                                                                                               \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                                      \
            fprintf(stderr, __VA_ARGS__);                                                                             \
            fprintf(stderr, "\n");                                                                                    \
        }                                                                                                             \
    } while (0)

#endif
