/* clock.h: the monotonic clock every timing in the project reads (engine timestamps, server deadlines,
 * benchmarks). */
#ifndef CF_BASE_CLOCK_H
#define CF_BASE_CLOCK_H

/* Seconds on CLOCK_MONOTONIC. */
double cf_monotonic_seconds(void);

#endif
