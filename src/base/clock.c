/* clock.c: clock.h. */
#include "base/clock.h"

#include <time.h>

double cf_monotonic_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}
