/* model_ref.h: the cold references the batched tests compare against, one sequence at a time through
 * cf_model_eval: the logits of every position of a text, and a greedy continuation. Header-only. */
#ifndef CF_TESTS_MODEL_REF_H
#define CF_TESTS_MODEL_REF_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "model/model.h"
#include "model/seq.h"

/* Logits [n, vocab] of every position of ids[0, n) evaluated alone; exits after a message on failure. */
static inline float *ref_logits(cf_model *m, int vocab, const int32_t *ids, int n) {
    cf_seq *s = NULL;
    cinfer_error err = {0};
    float *out = malloc((size_t)n * (size_t)vocab * sizeof *out);
    if (!out || cf_seq_create(m, 0, &s, &err) != CINFER_OK || cf_model_eval(m, s, ids, n, out, 1, &err) != CINFER_OK) {
        fprintf(stderr, "reference: %s\n", err.message);
        exit(1);
    }
    cf_seq_free(s);
    return out;
}

/* The greedy continuation of n tokens after prompt[0, np) by argmax of the logits: 0, or 1 after a message. */
static inline int ref_greedy(cf_model *m, int vocab, const int32_t *prompt, int np, int n, int32_t *out) {
    cinfer_error err = {0};
    cf_seq *s = NULL;
    float *lg = malloc((size_t)vocab * sizeof *lg);
    int rc = !lg || cf_seq_create(m, 0, &s, &err) != CINFER_OK || cf_model_eval(m, s, prompt, np, lg, 0, &err) != CINFER_OK;
    for (int i = 0; !rc && i < n; i++) {
        int b = 0;
        for (int k = 1; k < vocab; k++)
            if (lg[k] > lg[b]) b = k;
        out[i] = b;
        if (i + 1 < n) rc = cf_model_eval(m, s, &out[i], 1, lg, 0, &err) != CINFER_OK;
    }
    if (rc) fprintf(stderr, "reference: %s\n", err.message);
    free(lg);
    cf_seq_free(s);
    return rc;
}

#endif
