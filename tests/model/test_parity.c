/* test_parity.c: every fixture model under tests/fixtures/models/ against its transformers goldens:
 * max |logit - golden| over all prompt positions <= tolerance (1e-4), and the greedy continuation
 * identical, each step's top1-top2 margin within 2 * tolerance of the golden one, up to the first step
 * whose golden margin is below the stop margin (1e-4; a copy of a fixture in lower precision passes 2 * tolerance,
 * the margin below which its tolerance allows the greedy pick to differ). A case without its logits file fails.
 * Usage: test_parity FIXTURE_DIR [device] [tolerance] [stop margin] */
#include "model/model.h"
#include "base/file.h"
#include "base/status.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: test_parity FIXTURE_DIR [cpu|cuda] [tolerance] [stop margin]\n"); return 2; }
    const char *dir = argv[1];
    const float tol = argc > 3 ? strtof(argv[3], NULL) : 1e-4f, stop = argc > 4 ? strtof(argv[4], NULL) : 1e-4f;
    cf_model_params p = cf_model_default_params();
    cinfer_error err = {0};
    if (argc > 2 && cf_device_parse(argv[2], &p.backend.device, &err) != CINFER_OK) { fprintf(stderr, "%s\n", err.message); return 2; }
    char path[4096];
    snprintf(path, sizeof path, "%s/golden.json", dir);
    char *gtext = cf_read_file(path, NULL);
    if (!gtext) { fprintf(stderr, "cannot read %s\n", path); return 1; }
    cJSON *g = cJSON_Parse(gtext);
    free(gtext);
    cf_model *m = NULL;
    if (cf_model_load(dir, &p, &m, &err) != CINFER_OK) {
        fprintf(stderr, "load %s: %s\n", dir, err.message);
        cJSON_Delete(g);
        return err.code == CINFER_E_NO_DEVICE ? 77 : 1;
    }
    printf("%s: weights %s, KV cache %s\n", dir, m->dtype_summary, cf_dtype_name(m->kv_dtype));
    const int V = m->hp.vocab;
    int failures = 0, k = 0;
    cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(g, "cases")) {
        cJSON *prompt = cJSON_GetObjectItem(c, "prompt"), *greedy = cJSON_GetObjectItem(c, "greedy"), *margins = cJSON_GetObjectItem(c, "margins");
        int n = cJSON_GetArraySize(prompt);
        int32_t *ids = malloc((size_t)n * sizeof *ids);
        for (int i = 0; i < n; i++) ids[i] = cJSON_GetArrayItem(prompt, i)->valueint;
        cf_seq *s = NULL;
        float *lg = malloc((size_t)n * V * sizeof *lg);
        if (cf_seq_create(m, 0, &s, &err) != CINFER_OK || cf_model_eval(m, s, ids, n, lg, 1, &err) != CINFER_OK) {
            fprintf(stderr, "case %d: %s\n", k, err.message);
            failures++;
        } else {
            cJSON *lf = cJSON_GetObjectItem(c, "logits");
            size_t glen = 0;
            float *gold = NULL;
            if (cJSON_IsString(lf)) {
                snprintf(path, sizeof path, "%s/%s", dir, lf->valuestring);
                gold = (float *)cf_read_file(path, &glen);
            }
            if (!gold) {
                fprintf(stderr, "case %d: no golden logits: %s\n", k,
                        cJSON_IsString(lf) ? "cannot read the file named by \"logits\"" : "golden.json names no \"logits\" file");
                if (cJSON_IsString(lf)) fprintf(stderr, "  (%s)\n", path);
                failures++;
            } else if (glen != (size_t)n * V * sizeof(float)) {
                fprintf(stderr, "case %d: %s has %zu bytes, expected %zu\n", k, path, glen, (size_t)n * V * sizeof(float));
                failures++;
            } else {
                double maxd = 0;
                for (size_t i = 0; i < (size_t)n * V; i++) maxd = fmax(maxd, fabs((double)lg[i] - gold[i]));
                printf("%s case %d (%d tokens): max |logit - golden| = %.3g\n", dir, k, n, maxd);
                if (!(maxd <= tol)) failures++;
            }
            free(gold);
            /* greedy continuation from the last prompt logits */
            float *last = lg + (size_t)(n - 1) * V;
            int ng = cJSON_GetArraySize(greedy), agree = 0;
            double max_margin_diff = 0;
            for (int t = 0; t < ng; t++) {
                int best = 0;
                for (int j = 1; j < V; j++) if (last[j] > last[best]) best = j;
                int second = best ? 0 : 1;
                for (int j = 0; j < V; j++) if (j != best && last[j] > last[second]) second = j;
                int want = cJSON_GetArrayItem(greedy, t)->valueint;
                double margin = cJSON_GetArrayItem(margins, t)->valuedouble;
                if (best == want) max_margin_diff = fmax(max_margin_diff, fabs((double)last[best] - last[second] - margin));
                if (best != want) {
                    if (margin < stop) { printf("  greedy: stop comparing at step %d (golden margin %.2g)\n", t, margin); break; }
                    fprintf(stderr, "%s case %d: greedy step %d: got %d, want %d (margin %.3g)\n", dir, k, t, best, want, margin);
                    failures++;
                    break;
                }
                agree++;
                if (t + 1 < ng && cf_model_eval(m, s, &best, 1, last, 0, &err) != CINFER_OK) {
                    fprintf(stderr, "case %d: %s\n", k, err.message);
                    failures++;
                    break;
                }
            }
            printf("  greedy: %d/%d tokens identical; top1-top2 margins within %.3g of the goldens\n", agree, ng, max_margin_diff);
            /* each step's margin is a difference of two logits, each within tol */
            if (!(max_margin_diff <= 2 * tol)) {
                fprintf(stderr, "%s case %d: a greedy step's top1-top2 margin differs from the golden by %g\n", dir, k, max_margin_diff);
                failures++;
            }
        }
        cf_seq_free(s);
        free(lg);
        free(ids);
        k++;
    }
    cf_model_free(m);
    cJSON_Delete(g);
    if (k == 0) { fprintf(stderr, "%s: no cases\n", dir); return 1; }
    printf("%s: %s\n", dir, failures ? "FAIL" : "ok");
    return failures ? 1 : 0;
}
