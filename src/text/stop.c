/* stop.c: stop strings and stop tokens over streamed text. The pending buffer holds text not yet handed
 * out: the longest suffix that is a proper prefix of some stop string, plus an unfinished UTF-8 tail. */
#include "text/stop.h"

#include <stdlib.h>
#include <string.h>
#include "base/status.h"
#include "text/detok.h"

struct cf_stop {
    char **stops;
    size_t *lens;
    int n_stops;
    int32_t *ids;
    int n_ids;
    char *pending;
    size_t n, cap;
    char *out;
    int stopped;
};

void cf_stop_free(cf_stop *s) {
    if (!s) return;
    for (int i = 0; i < s->n_stops; i++) free(s->stops[i]);
    free(s->stops);
    free(s->lens);
    free(s->ids);
    free(s->pending);
    free(s->out);
    free(s);
}

cinfer_status cf_stop_create(const char *const *stops, int n_stops, const int32_t *stop_ids, int n_ids,
                             cf_stop **out, cinfer_error *err) {
    *out = NULL;
    if (n_stops < 0 || n_ids < 0 || (n_stops && !stops) || (n_ids && !stop_ids))
        return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "stop: bad stop list");
    cf_stop *s = calloc(1, sizeof *s);
    if (!s) return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory creating stop conditions");
    s->stops = calloc((size_t)n_stops + 1, sizeof(char *));
    s->lens = calloc((size_t)n_stops + 1, sizeof(size_t));
    s->ids = malloc(((size_t)n_ids + 1) * sizeof(int32_t));
    if (!s->stops || !s->lens || !s->ids) {
        cf_stop_free(s);
        return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory creating stop conditions");
    }
    for (int i = 0; i < n_stops; i++) {
        if (!stops[i] || !stops[i][0]) continue;
        size_t l = strlen(stops[i]);
        if (cf_utf8_complete_prefix(stops[i], l) != l) {
            cf_stop_free(s);
            return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "stop string %d is not valid UTF-8", i);
        }
        s->stops[s->n_stops] = strdup(stops[i]);
        if (!s->stops[s->n_stops]) {
            cf_stop_free(s);
            return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory creating stop conditions");
        }
        s->lens[s->n_stops++] = l;
    }
    if (n_ids) memcpy(s->ids, stop_ids, (size_t)n_ids * sizeof(int32_t));
    s->n_ids = n_ids;
    *out = s;
    return CINFER_OK;
}

static cinfer_status emit(cf_stop *s, size_t n, cf_stop_result *r, cinfer_error *err) {
    free(s->out);
    s->out = malloc(n + 1);
    if (!s->out) return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory in stop matching");
    memcpy(s->out, s->pending, n);
    s->out[n] = 0;
    memmove(s->pending, s->pending + n, s->n - n);
    s->n -= n;
    r->text = s->out;
    r->len = n;
    return CINFER_OK;
}

static const char *find(const char *h, size_t hn, const char *nd, size_t nn) {
    for (size_t i = 0; i + nn <= hn; i++)
        if (h[i] == nd[0] && memcmp(h + i, nd, nn) == 0) return h + i;
    return NULL;
}

cinfer_status cf_stop_feed(cf_stop *s, int32_t id, const char *text, size_t len, cf_stop_result *r,
                           cinfer_error *err) {
    *r = (cf_stop_result){"", 0, s->stopped, -1, -1};
    if (s->stopped) return CINFER_OK;
    for (int i = 0; i < s->n_ids && id >= 0; i++) {
        if (s->ids[i] != id) continue;
        CF_TRY(emit(s, s->n, r, err));
        s->n = 0;
        s->stopped = r->stopped = 1;
        r->token = id;
        return CINFER_OK;
    }
    if (s->n + len + 1 > s->cap) {
        size_t cap = s->cap ? s->cap : 64;
        while (cap < s->n + len + 1) cap *= 2;
        char *p = realloc(s->pending, cap);
        if (!p) return cf_fail(err, CINFER_E_OUT_OF_MEMORY, "out of memory in stop matching");
        s->pending = p;
        s->cap = cap;
    }
    if (len) memcpy(s->pending + s->n, text, len);
    s->n += len;
    /* the stop that completes first; on a tie the longer one (it started first) */
    size_t best_end = (size_t)-1, best_start = 0;
    int best = -1;
    for (int i = 0; i < s->n_stops; i++) {
        const char *f = find(s->pending, s->n, s->stops[i], s->lens[i]);
        if (!f) continue;
        size_t st = (size_t)(f - s->pending), en = st + s->lens[i];
        if (en < best_end || (en == best_end && st < best_start)) {
            best_end = en;
            best_start = st;
            best = i;
        }
    }
    if (best >= 0) {
        CF_TRY(emit(s, best_start, r, err));
        s->n = 0;
        s->stopped = r->stopped = 1;
        r->which = best;
        return CINFER_OK;
    }
    /* hold back the longest suffix that a stop string starts with, and an unfinished UTF-8 tail */
    size_t keep = s->n - cf_utf8_complete_prefix(s->pending, s->n);
    for (int i = 0; i < s->n_stops; i++) {
        size_t max = s->lens[i] - 1 < s->n ? s->lens[i] - 1 : s->n;
        for (size_t k = max; k > keep; k--)
            if (memcmp(s->pending + s->n - k, s->stops[i], k) == 0) {
                keep = k;
                break;
            }
    }
    return emit(s, s->n - keep, r, err);
}

cinfer_status cf_stop_flush(cf_stop *s, cf_stop_result *r, cinfer_error *err) {
    *r = (cf_stop_result){"", 0, s->stopped, -1, -1};
    if (s->stopped) return CINFER_OK;
    return emit(s, s->n, r, err);
}
