/* gate.h: a session that holds the engine's thread inside its first event until gate_open(): what is opened
 * meanwhile waits (and joins the batch in one turn). One gate at a time per process. */
#ifndef CF_TESTS_ENGINE_GATE_H
#define CF_TESTS_ENGINE_GATE_H

#include "cinfer.h"

/* Opens r on e with the gate's callback and returns once the engine's thread is inside it. */
cinfer_status gate_close(cinfer_engine *e, const cinfer_request *r, cinfer_session **s, cinfer_error *err);
/* Lets the gated session (and the engine) go on. */
void gate_open(void);

#endif
