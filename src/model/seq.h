/* seq.h: the inside of a cf_seq, shared by model.c (which owns it) and forward.c (which runs it). */
#ifndef CF_MODEL_SEQ_H
#define CF_MODEL_SEQ_H

#include "model/model.h"

#define CF_CHUNK 256  /* positions evaluated per forward pass at most */

struct cf_seq {
    cf_model *m;
    cf_kv_cache *kv;
    int max_ctx;
    /* scratch for up to CF_CHUNK rows */
    cf_tensor x, h, q, k, v, att, o, gate, up, ids, pos, logits;
};

/* Runs the decoder over the n tokens in s->ids at positions s->pos (s->kv->n onwards), writing their
 * keys and values into the cache and the logits of the last out_rows tokens into s->logits. */
void cf_forward_chunk(cf_model *m, cf_seq *s, int n, int out_rows);

#endif
