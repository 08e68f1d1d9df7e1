/* stop.h: stop conditions on generated text. Stop strings are matched on the decoded text across token
 * boundaries: text that could still be the start of a stop string is held back, the stop string and
 * everything after it is never handed out. Stop token ids (EOS and the like) end generation too.
 * Matching is independent of how the text is chunked: the stop that completes first in the stream
 * wins (on a tie, the one that started first). Owned by src/text/stop.c. */
#ifndef CF_TEXT_STOP_H
#define CF_TEXT_STOP_H

#include <stddef.h>
#include <stdint.h>
#include "cinfer.h"

typedef struct cf_stop cf_stop;

typedef struct cf_stop_result {
    const char *text; /* safe to hand out; valid until the next call on the cf_stop */
    size_t len;
    int stopped;      /* generation must end */
    int which;        /* index of the stop string that matched, or -1 (a stop token, or no stop) */
    int32_t token;    /* the stop token id when a stop token ended generation, else -1 */
} cf_stop_result;

/* Copies the non-empty stop strings (valid UTF-8) and the stop token ids. */
cinfer_status cf_stop_create(const char *const *stops, int n_stops, const int32_t *stop_ids, int n_ids,
                             cf_stop **out, cinfer_error *err);
void cf_stop_free(cf_stop *s);

/* Feeds the text decoded for one committed token (id < 0: text only). A stop token hands out what was
 * held back and stops; its own text is not handed out. Once stopped, every call hands out nothing. */
cinfer_status cf_stop_feed(cf_stop *s, int32_t id, const char *text, size_t len, cf_stop_result *r,
                           cinfer_error *err);

/* End of generation without a stop: hands out what was held back. */
cinfer_status cf_stop_flush(cf_stop *s, cf_stop_result *r, cinfer_error *err);

#endif
