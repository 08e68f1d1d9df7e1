/* server_conn.c: the server's connections (from libmicrohttpd's connection notification) and the reaper
 * thread that watches them: it shuts down connections whose request headers or body miss their deadline,
 * and cancels the generations of clients that hung up (libmicrohttpd does not watch suspended connections). */
#define _GNU_SOURCE
#include "server/server_impl.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>

void cf_server_on_connection(void *cls, struct MHD_Connection *mc, void **socket_context, enum MHD_ConnectionNotificationCode toe) {
    cf_server *s = cls;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        cf_conn *c = calloc(1, sizeof *c);
        if (!c) return;  /* the connection works; only its deadlines are not enforced */
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD);
        c->fd = ci ? ci->connect_fd : -1;
        c->phase = CF_CONN_WAITING;
        c->t_mark = c->t_phase = cf_monotonic_seconds();
        pthread_mutex_lock(&s->mu);
        c->next = s->conns;
        if (s->conns) s->conns->prev = c;
        s->conns = c;
        s->n_conns++;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
        *socket_context = c;
    } else if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
        cf_conn *c = *socket_context;
        if (!c) return;
        pthread_mutex_lock(&s->mu);
        if (c->prev) c->prev->next = c->next;
        else s->conns = c->next;
        if (c->next) c->next->prev = c->prev;
        s->n_conns--;
        pthread_mutex_unlock(&s->mu);
        free(c);
        *socket_context = NULL;
    }
}

/* ---- the reaper ---- */

/* Cancels the generations of the connections in pf whose client hung up. */
static void cancel_hung_up(struct pollfd *pf, cf_conn **pc, int n) {
    if (n && poll(pf, (nfds_t)n, 0) > 0)
        for (int i = 0; i < n; i++)
            if (pf[i].revents & (POLLRDHUP | POLLHUP | POLLERR)) {
                cf_gen_cancel(pc[i]->gen, 1);
                pc[i]->gen = NULL;
            }
}

/* Under s->mu, so no connection closes its socket (and frees the number for reuse) meanwhile. */
static void reap(cf_server *s) {
    const double now = cf_monotonic_seconds();
    enum { BATCH = 64 };
    struct pollfd pf[BATCH];
    cf_conn *pc[BATCH];
    int n = 0;
    for (cf_conn *c = s->conns; c; c = c->next) {
        if (c->fd < 0 || c->shut) continue;
        double deadline = -1;
        if (c->phase == CF_CONN_WAITING)
            deadline = c->t_mark + s->p.header_timeout_s + (c->kept_alive ? s->p.idle_timeout_s : 0);
        else if (c->phase == CF_CONN_BODY)
            deadline = c->t_phase + s->p.body_timeout_s;
        if (deadline >= 0 && now > deadline) {
            shutdown(c->fd, SHUT_RDWR);
            c->shut = 1;
            if (s->p.log_requests)
                fprintf(stderr, "cinfer serve: closed a connection whose request %s did not arrive in time\n",
                        c->phase == CF_CONN_WAITING ? "headers" : "body");
            continue;
        }
        if (!c->gen) continue;
        pf[n] = (struct pollfd){.fd = c->fd, .events = POLLRDHUP};
        pc[n++] = c;
        if (n == BATCH) {
            cancel_hung_up(pf, pc, n);
            n = 0;
        }
    }
    cancel_hung_up(pf, pc, n);
}

void *cf_server_reaper_main(void *arg) {
    cf_server *s = arg;
    pthread_mutex_lock(&s->mu);
    while (!s->reaper_quit) {
        if (!s->n_conns) {
            pthread_cond_wait(&s->cv, &s->mu);
            continue;
        }
        reap(s);
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 10 * 1000 * 1000;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&s->cv, &s->mu, &ts);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

