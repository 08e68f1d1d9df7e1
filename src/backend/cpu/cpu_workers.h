/* cpu_workers.h: the CPU backend's worker threads. A job is a function run as shares t = 0..T-1 of one piece of
 * work, share 0 on the calling thread; cf_workers_run returns when every share is done. Between jobs a worker
 * spins for a short while, then sleeps: it spins only while the machine has a core for each of the pool's
 * threads (other runnable tasks, from /proc/loadavg, are counted every few milliseconds), so a busy machine
 * sees sleeping workers, as with OpenMP's passive wait policy. */
#ifndef CINFER_CPU_WORKERS_H
#define CINFER_CPU_WORKERS_H

#include "base/status.h"

typedef struct cf_workers cf_workers;
typedef void (*cf_workers_fn)(void *ctx, int t, int T);

/* the physical cores this process may run on: the CPUs of its affinity mask, counting SMT siblings once */
int cf_workers_default_threads(void);

/* n_threads counts the caller: n_threads - 1 workers are started (none for 1) */
cinfer_status cf_workers_create(int n_threads, cf_workers **out, cinfer_error *err);
void cf_workers_free(cf_workers *p);

/* runs fn(ctx, t, T) for t = 0..T-1 with T = min(nt, the pool's threads), t = 0 here. A job started while
 * another thread runs one on the same pool runs here alone (T = 1). */
void cf_workers_run(cf_workers *p, int nt, cf_workers_fn fn, void *ctx);
/* the pool's threads, the caller included (1 for NULL) */
int cf_workers_threads(const cf_workers *p);

/* the share [lo, hi) of t among T of n items, in units of `align` (the last share takes the rest) */
void cf_workers_share(int64_t n, int64_t align, int t, int T, int64_t *lo, int64_t *hi);

#endif
