/* qppl.c: not a test: the perplexity of a model folder on cinfer-tiny's held-out split, computed as
 * tools/train/train.py computes its validation loss (documents tokenized without specials, each followed by
 * <|endoftext|> (id 0) after a leading one, cut into windows of SEQ tokens each predicting the next; mean
 * cross-entropy over every position, perplexity = exp of it). Reads the split as plain text (zcat
 * .cache/train/valid.txt.gz, from tools/train/fetch_data.sh).
 * usage: qppl MODEL_DIR VALID.txt [SEQ (default 1024)] */
#include "model/model.h"
#include "text/tokenizer.h"
#include "base/file.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: qppl MODEL_DIR VALID.txt [SEQ]\n");
        return 2;
    }
    const int seq = argc > 3 ? atoi(argv[3]) : 1024;
    cinfer_error e = {0};
    char *text = NULL;
    size_t len = 0;
    if (cf_file_read(argv[2], (size_t)1 << 30, 0, &text, &len, &e) != CINFER_OK) { fprintf(stderr, "%s\n", e.message); return 1; }
    cf_tokenizer *tok = NULL;
    if (cf_tokenizer_load(argv[1], &tok, &e) != CINFER_OK) { fprintf(stderr, "%s\n", e.message); return 1; }
    size_t cap = 1 << 20, n = 0;
    int32_t *ids = malloc(cap * sizeof *ids);
    ids[n++] = 0;
    const char *sep = "\n<|endoftext|>\n";
    for (char *p = text; p && *p;) {
        char *q = strstr(p, sep);
        const size_t dl = q ? (size_t)(q - p) : strlen(p);
        int blank = 1;
        for (size_t i = 0; i < dl && blank; i++) blank = p[i] == ' ' || p[i] == '\n' || p[i] == '\t' || p[i] == '\r';
        if (!blank) {
            int32_t *d = NULL;
            size_t nd = 0;
            if (cf_tokenizer_encode(tok, p, dl, 0, &d, &nd, &e) != CINFER_OK) { fprintf(stderr, "%s\n", e.message); return 1; }
            while (n + nd + 1 > cap) ids = realloc(ids, (cap *= 2) * sizeof *ids);
            memcpy(ids + n, d, nd * sizeof *d);
            n += nd;
            ids[n++] = 0;
            free(d);
        }
        p = q ? q + strlen(sep) : NULL;
    }
    cf_model_params mp = cf_model_default_params();
    mp.backend.n_threads = 2;
    cf_model *m = NULL;
    if (cf_model_load(argv[1], &mp, &m, &e) != CINFER_OK) { fprintf(stderr, "%s\n", e.message); return 1; }
    const int V = m->hp.vocab;
    float *lg = malloc((size_t)seq * V * sizeof *lg);
    const size_t windows = (n - 1) / (size_t)seq;
    double nll = 0;
    for (size_t w = 0; w < windows; w++) {
        cf_seq *s = NULL;
        if (cf_seq_create(m, seq, &s, &e) != CINFER_OK || cf_model_eval(m, s, ids + w * seq, seq, lg, 1, &e) != CINFER_OK) {
            fprintf(stderr, "%s\n", e.message);
            return 1;
        }
        cf_seq_free(s);
        for (int i = 0; i < seq; i++) {
            const float *l = lg + (size_t)i * V;
            double mx = l[0], z = 0;
            for (int v = 1; v < V; v++) mx = l[v] > mx ? l[v] : mx;
            for (int v = 0; v < V; v++) z += exp((double)l[v] - mx);
            nll += mx + log(z) - l[ids[w * seq + i + 1]];
        }
    }
    const double loss = nll / ((double)windows * seq);
    printf("%s (%s): %zu tokens, %zu windows of %d: loss %.4f, perplexity %.3f\n", argv[1], m->dtype_summary, n, windows, seq, loss, exp(loss));
    free(lg);
    free(ids);
    free(text);
    cf_model_free(m);
    cf_tokenizer_free(tok);
    return 0;
}
