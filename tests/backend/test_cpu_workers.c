/* test_cpu_workers.c: the CPU backend's worker pool (cpu_workers.h): every share of every job runs exactly
 * once, on the thread count asked for (capped by the pool's), with the job's own arguments; a job started
 * while another thread holds the pool runs alone on its caller; pools of one thread and pools created and
 * freed in turn; cf_workers_share covers 0..n once for any n, alignment and thread count. */
#include "backend/cpu/cpu_workers.h"
#include "../check.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { MAX_T = 8 };

typedef struct job {
    int id;
    _Atomic int runs[MAX_T];   /* times share t ran */
    _Atomic int seen_T;        /* the T every share saw (0 until set, -1 when they disagreed) */
    _Atomic int bad;           /* a share saw another job's arguments */
    int spin_us;               /* each share busy this long, so shares overlap */
} job;

static void busy_us(int us) {
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do clock_gettime(CLOCK_MONOTONIC, &t);
    while ((t.tv_sec - t0.tv_sec) * 1000000 + (t.tv_nsec - t0.tv_nsec) / 1000 < us);
}

static void share(void *ctx, int t, int T) {
    job *j = ctx;
    if (t < 0 || t >= MAX_T || T < 1 || T > MAX_T) { atomic_store(&j->bad, 1); return; }
    atomic_fetch_add(&j->runs[t], 1);
    int expect = 0;
    if (!atomic_compare_exchange_strong(&j->seen_T, &expect, T) && expect != T) atomic_store(&j->seen_T, -1);
    if (j->spin_us) busy_us(j->spin_us);
}

/* runs one job of nt threads on p and checks that shares 0..T-1 ran once each, T = min(nt, pool threads) */
static void run_checked(cf_workers *p, int nt, int spin_us, int id) {
    job *j = calloc(1, sizeof *j);
    if (!j) { CHECK(0, "out of memory"); return; }
    j->id = id;
    j->spin_us = spin_us;
    cf_workers_run(p, nt, share, j);
    int T = cf_workers_threads(p) < nt ? cf_workers_threads(p) : nt;
    if (T < 1) T = 1;
    CHECK(atomic_load(&j->bad) == 0, "job %d: a share saw bad arguments", id);
    CHECK(atomic_load(&j->seen_T) == T, "job %d (nt %d, pool %d): shares saw T = %d, expected %d", id, nt,
          cf_workers_threads(p), atomic_load(&j->seen_T), T);
    for (int t = 0; t < MAX_T; t++)
        CHECK(atomic_load(&j->runs[t]) == (t < T), "job %d: share %d of %d ran %d times", id, t, T, atomic_load(&j->runs[t]));
    free(j);
}

typedef struct contender {
    cf_workers *p;
    int jobs;
    _Atomic int ok;
} contender;

/* another thread running jobs on the same pool: each must still run all its shares (alone when the pool
 * is busy: T = 1) */
static void *contend(void *arg) {
    contender *c = arg;
    int ok = 1;
    for (int i = 0; i < c->jobs; i++) {
        job *j = calloc(1, sizeof *j);
        if (!j) { ok = 0; break; }
        cf_workers_run(c->p, 4, share, j);
        const int T = atomic_load(&j->seen_T);
        if (T != 1 && T != 4) ok = 0;
        for (int t = 0; t < MAX_T && T > 0; t++) ok &= atomic_load(&j->runs[t]) == (t < T);
        free(j);
    }
    atomic_store(&c->ok, ok);
    return NULL;
}

static void test_share(void) {
    for (int64_t n = 0; n <= 70; n += (n < 20 ? 1 : 7))
        for (int64_t align = 1; align <= 16; align *= 4)
            for (int T = 1; T <= 5; T++) {
                int64_t covered = 0, prev_hi = 0;
                int ok = 1;
                for (int t = 0; t < T; t++) {
                    int64_t lo, hi;
                    cf_workers_share(n, align, t, T, &lo, &hi);
                    ok &= lo == prev_hi && hi >= lo && hi <= n && (lo % align == 0 || lo == n);
                    covered += hi - lo;
                    prev_hi = hi;
                }
                CHECK(ok && covered == n && prev_hi == n, "share of n %lld, align %lld, T %d", (long long)n, (long long)align, T);
            }
}

int main(void) {
    cinfer_error e = {0};
    test_share();

    cf_workers *one;
    CHECK(cf_workers_create(1, &one, &e) == CINFER_OK, "%s", e.message);
    CHECK(cf_workers_threads(one) == 1, "a pool of 1 has %d threads", cf_workers_threads(one));
    run_checked(one, 4, 0, 1);
    cf_workers_free(one);
    run_checked(NULL, 3, 0, 2);   /* no pool: the caller alone */

    cf_workers *p;
    CHECK(cf_workers_create(4, &p, &e) == CINFER_OK, "%s", e.message);
    for (int i = 0; i < 2000; i++) run_checked(p, 1 + i % 6, i % 50 == 0 ? 200 : 0, 100 + i);
    /* idle long enough for the workers to fall asleep, then jobs again */
    busy_us(5000);
    struct timespec ts = {0, 30 * 1000 * 1000};
    nanosleep(&ts, NULL);
    for (int i = 0; i < 50; i++) run_checked(p, 4, 0, 3000 + i);

    contender c = {.p = p, .jobs = 300};
    pthread_t th;
    CHECK(pthread_create(&th, NULL, contend, &c) == 0, "cannot start a thread");
    for (int i = 0; i < 300; i++) {
        job *j = calloc(1, sizeof *j);
        if (!j) break;
        j->spin_us = i % 10 == 0 ? 100 : 0;
        cf_workers_run(p, 4, share, j);
        const int T = atomic_load(&j->seen_T);
        int ok = T == 1 || T == 4;
        for (int t = 0; t < MAX_T && T > 0; t++) ok &= atomic_load(&j->runs[t]) == (t < T);
        CHECK(ok, "contended job %d: T %d", i, T);
        free(j);
    }
    pthread_join(th, NULL);
    CHECK(atomic_load(&c.ok), "the other thread's contended jobs ran wrong");
    cf_workers_free(p);

    for (int i = 0; i < 20; i++) {   /* created and freed in turn, with and without a job */
        cf_workers *q;
        CHECK(cf_workers_create(1 + i % 4, &q, &e) == CINFER_OK, "%s", e.message);
        if (i % 2) run_checked(q, 4, 0, 5000 + i);
        cf_workers_free(q);
    }
    printf("test_cpu_workers: %d checks, %d failures\n", checks, failures);
    return failures != 0;
}
