/* cpu_workers.c: the CPU backend's worker threads (see cpu_workers.h). A job is published by bumping `gen`;
 * workers wait for a new generation by spinning (while spinning pays) and then on a futex; each runs its share
 * (or none, past the job's thread count) and answers; the last to answer stores the generation in `done` and
 * wakes the caller if it sleeps. The caller writes the next job only after every worker answered. */
#define _GNU_SOURCE
#include "backend/cpu/cpu_workers.h"

#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* How long a waiting thread spins before it sleeps. Decoding leaves the workers idle for tens of
 * microseconds between the products of a layer and for the sampling between tokens; a futex wake-up costs
 * about as much again, every time. */
#define SPIN_NS 1000000
/* How often the caller looks at the machine's load to decide whether spinning is allowed. */
#define LOAD_CHECK_NS 20000000

typedef struct worker {
    cf_workers *pool;
    int t;
    pthread_t th;
} worker;

struct cf_workers {
    int n;                      /* threads, the caller included */
    worker *w;                  /* n - 1 workers */
    int started;                /* workers whose thread runs */
    pthread_mutex_t busy;       /* held by the thread running a job */
    cf_workers_fn fn;              /* the job: written before gen is bumped */
    void *ctx;
    _Atomic int nt;
    _Atomic uint32_t gen;       /* futex: the job generation */
    _Atomic uint32_t done;      /* futex: the generation whose shares are all done */
    _Atomic int pending;        /* workers yet to answer the current job */
    _Atomic int sleepers;       /* workers asleep on gen */
    _Atomic int caller_sleeps;  /* the caller is asleep on done */
    _Atomic bool spin;          /* spinning allowed (no more runnable threads than cores) */
    _Atomic bool stop;
    int cpus;                   /* cores this process may run on */
    int64_t next_check;         /* when the caller next reads the load */
};

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static void futex_wait(_Atomic uint32_t *addr, uint32_t val) {
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
}

static void futex_wake(_Atomic uint32_t *addr) {
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAKE_PRIVATE, 0x7fffffff, NULL, NULL, 0);
}

/* The pool that ran the last job: the workers of other pools (other CPU backends in this process) stop
 * spinning at once, so that two pools never spin against each other. */
static _Atomic(cf_workers *) last_used;

/* spins while allowed and for at most SPIN_NS until *addr != val; returns whether it changed */
static bool spin_until_changed(cf_workers *p, _Atomic uint32_t *addr, uint32_t val) {
    int64_t deadline = 0;
    for (unsigned i = 0; atomic_load_explicit(&p->spin, memory_order_relaxed) && atomic_load_explicit(&last_used, memory_order_relaxed) == p; i++) {
        if (atomic_load_explicit(addr, memory_order_acquire) != val) return true;
        cpu_relax();
        if ((i & 255) == 0) {
            const int64_t t = now_ns();
            if (!deadline) deadline = t + SPIN_NS;
            else if (t > deadline) break;
        }
    }
    return atomic_load_explicit(addr, memory_order_acquire) != val;
}

static void *worker_main(void *arg) {
    worker *me = arg;
    cf_workers *p = me->pool;
    uint32_t seen = 0;
    for (;;) {
        if (!spin_until_changed(p, &p->gen, seen)) {
            atomic_fetch_add(&p->sleepers, 1);
            while (atomic_load(&p->gen) == seen) futex_wait(&p->gen, seen);
            atomic_fetch_sub(&p->sleepers, 1);
        }
        seen = atomic_load_explicit(&p->gen, memory_order_acquire);
        if (atomic_load(&p->stop)) return NULL;
        const int nt = atomic_load_explicit(&p->nt, memory_order_relaxed);
        if (me->t < nt) p->fn(p->ctx, me->t, nt);
        if (atomic_fetch_sub_explicit(&p->pending, 1, memory_order_acq_rel) == 1) {
            atomic_store(&p->done, seen);
            if (atomic_load(&p->caller_sleeps)) futex_wake(&p->done);
        }
    }
}

/* procs_running of /proc/loadavg (the fourth field's numerator), or -1 */
static int runnable_tasks(void) {
    FILE *f = fopen("/proc/loadavg", "r");
    if (!f) return -1;
    double l1, l5, l15;
    int running = -1, total;
    if (fscanf(f, "%lf %lf %lf %d/%d", &l1, &l5, &l15, &running, &total) != 5) running = -1;
    fclose(f);
    return running;
}

/* Spinning pays only while each of the pool's threads has a core: the tasks runnable besides ours (the
 * caller and the workers awake) plus all of ours must fit in the cores we may use. */
static void check_load(cf_workers *p) {
    const int64_t t = now_ns();
    if (t < p->next_check) return;
    p->next_check = t + LOAD_CHECK_NS;
    const int running = runnable_tasks();
    const int ours = 1 + (p->n - 1 - atomic_load(&p->sleepers));
    atomic_store(&p->spin, running >= 0 && running - ours + p->n <= p->cpus);
}

/* the CPUs this process may run on (its affinity mask), at least 1 */
static int cpus_allowed(void) {
    cpu_set_t set;
    return sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0 ? CPU_COUNT(&set) : 1;
}

/* whether a sibling of cpu (same core: sysfs thread_siblings_list, e.g. "3,67" or "2-3") below it is in set */
static bool lower_sibling_in(int cpu, const cpu_set_t *set) {
    char path[96], list[256];
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/thread_siblings_list", cpu);
    FILE *f = fopen(path, "r");
    if (!f) return false;
    const bool got = fgets(list, sizeof list, f) != NULL;
    fclose(f);
    if (!got) return false;
    for (char *s = list; *s && *s != '\n';) {
        char *end;
        const long a = strtol(s, &end, 10);
        long b = a;
        if (end == s) break;
        if (*end == '-') b = strtol(end + 1, &end, 10);
        for (long c = a; c <= b && c < cpu; c++)
            if (c >= 0 && c < CPU_SETSIZE && CPU_ISSET((int)c, set)) return true;
        s = *end == ',' ? end + 1 : end;
        if (*end != ',') break;
    }
    return false;
}

int cf_workers_default_threads(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0) return 1;
    int cores = 0;
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &set) && !lower_sibling_in(c, &set)) cores++;
    return cores > 0 ? cores : 1;
}

int cf_workers_threads(const cf_workers *p) { return p ? p->n : 1; }

cinfer_status cf_workers_create(int n_threads, cf_workers **out, cinfer_error *err) {
    *out = NULL;
    if (n_threads < 1) n_threads = 1;
    cf_workers *p = calloc(1, sizeof *p);
    worker *w = n_threads > 1 ? calloc((size_t)n_threads - 1, sizeof *w) : NULL;
    if (!p || (n_threads > 1 && !w)) {
        free(p);
        free(w);
        return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory for a pool of %d threads", n_threads);
    }
    p->n = n_threads;
    p->w = w;
    pthread_mutex_init(&p->busy, NULL);
    p->cpus = cpus_allowed();
    for (int i = 0; i < n_threads - 1; i++) {
        w[i] = (worker){.pool = p, .t = i + 1};
        const int rc = pthread_create(&w[i].th, NULL, worker_main, &w[i]);
        if (rc) {
            cf_workers_free(p);
            return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "cannot start CPU worker thread %d of %d: %s", i + 1, n_threads - 1, strerror(rc));
        }
        p->started++;
    }
    *out = p;
    return CINFER_OK;
}

void cf_workers_free(cf_workers *p) {
    if (!p) return;
    cf_workers *self = p;
    atomic_compare_exchange_strong(&last_used, &self, NULL);
    atomic_store(&p->stop, true);
    atomic_fetch_add(&p->gen, 1);
    futex_wake(&p->gen);
    for (int i = 0; i < p->started; i++) pthread_join(p->w[i].th, NULL);
    pthread_mutex_destroy(&p->busy);
    free(p->w);
    free(p);
}

void cf_workers_run(cf_workers *p, int nt, cf_workers_fn fn, void *ctx) {
    if (!p || nt > p->n) nt = p ? p->n : 1;
    if (nt <= 1 || pthread_mutex_trylock(&p->busy) != 0) {
        fn(ctx, 0, 1);
        return;
    }
    check_load(p);
    atomic_store_explicit(&last_used, p, memory_order_relaxed);
    p->fn = fn;
    p->ctx = ctx;
    atomic_store_explicit(&p->nt, nt, memory_order_relaxed);
    atomic_store(&p->pending, p->n - 1);   /* every worker answers, so none reads the next job's fields for this one */
    const uint32_t g = atomic_fetch_add(&p->gen, 1) + 1;
    if (atomic_load(&p->sleepers)) futex_wake(&p->gen);
    fn(ctx, 0, nt);
    if (!spin_until_changed(p, &p->done, g - 1) || atomic_load(&p->done) != g) {
        atomic_store(&p->caller_sleeps, 1);
        uint32_t d;
        while ((d = atomic_load(&p->done)) != g) futex_wait(&p->done, d);
        atomic_store(&p->caller_sleeps, 0);
    }
    pthread_mutex_unlock(&p->busy);
}

void cf_workers_share(int64_t n, int64_t align, int t, int T, int64_t *lo, int64_t *hi) {
    const int64_t units = (n + align - 1) / align;
    *lo = units * t / T * align;
    *hi = t == T - 1 ? n : units * (t + 1) / T * align;
    if (*hi > n) *hi = n;
    if (*lo > n) *lo = n;
}
