/* gate.c: the engine tests' gate (gate.h). */
#include "gate.h"

#include <pthread.h>

static pthread_mutex_t gate_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cv = PTHREAD_COND_INITIALIZER;
static int gate_entered, gate_released;

static int gate_cb(const cinfer_event *ev, void *user) {
    (void)ev;
    (void)user;
    pthread_mutex_lock(&gate_mu);
    gate_entered = 1;
    pthread_cond_broadcast(&gate_cv);
    while (!gate_released) pthread_cond_wait(&gate_cv, &gate_mu);
    pthread_mutex_unlock(&gate_mu);
    return 0;
}

cinfer_status gate_close(cinfer_engine *e, const cinfer_request *r, cinfer_session **s, cinfer_error *err) {
    pthread_mutex_lock(&gate_mu);
    gate_entered = gate_released = 0;
    pthread_mutex_unlock(&gate_mu);
    cinfer_session_params c = cinfer_session_default_params();
    c.output = CINFER_OUTPUT_CALLBACK;
    c.on_event = gate_cb;
    *s = NULL;
    cinfer_status st = cinfer_session_open(e, r, &c, s, err);
    if (st != CINFER_OK) return st;
    pthread_mutex_lock(&gate_mu);
    while (!gate_entered) pthread_cond_wait(&gate_cv, &gate_mu);
    pthread_mutex_unlock(&gate_mu);
    return CINFER_OK;
}

void gate_open(void) {
    pthread_mutex_lock(&gate_mu);
    gate_released = 1;
    pthread_cond_broadcast(&gate_cv);
    pthread_mutex_unlock(&gate_mu);
}
