/* test_components.c: each normalizer, pre-tokenizer and decoder configuration in
 * components.jsonl.gz (made by tools/text/make_token_goldens.py from HF tokenizers 0.23) run on its
 * inputs and compared with HF's normalize_str / pre_tokenize_str / decode output. Cases where HF
 * panicked ({"error": ...}) must still run here without crashing.
 * usage: test_components COMPONENTS_FILE [MIN_CONFIGS] */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

#include "text/tok_impl.h"
#include "tok_test.h"

static const char *cfg_text(const cJSON *cfg) {
    static char buf[240];
    char *s = cJSON_PrintUnformatted(cfg);
    snprintf(buf, sizeof buf, "%s", s ? s : "?");
    free(s);
    return buf;
}

static void run_normalizer(const cJSON *cfg, const cJSON *cases, tk_scratch *sc) {
    tk_normalizer *n;
    cinfer_error err = {0};
    if (tk_normalizer_parse(cfg, &n, &err)) {
        tt_check(0, "normalizer %s does not load: %s", cfg_text(cfg), err.message);
        return;
    }
    const cJSON *c;
    cJSON_ArrayForEach(c, cases) {
        const char *in = cJSON_GetArrayItem(c, 0)->valuestring;
        const cJSON *want = cJSON_GetArrayItem(c, 1);
        tk_buf out = {0};
        int rc = tk_normalize(n, sc, in, strlen(in), &out);
        const char *got = out.p ? out.p : "";
        if (cJSON_IsString(want))
            tt_check(rc == 0 && strcmp(got, want->valuestring) == 0, "normalizer %s on \"%s\": got \"%s\" want \"%s\"",
                     cfg_text(cfg), in, got, want->valuestring);
        tk_buf_free(&out);
    }
    tk_normalizer_free(n);
}

static int collect(void *ctx, const char *s, size_t n) {
    tk_strs_add(ctx, s, n);
    return 0;
}

static void run_pretok(const cJSON *cfg, const cJSON *cases, tk_scratch *sc) {
    tk_pretok *p;
    cinfer_error err = {0};
    if (tk_pretok_parse(cfg, &p, &err)) {
        tt_check(0, "pre_tokenizer %s does not load: %s", cfg_text(cfg), err.message);
        return;
    }
    const cJSON *c;
    cJSON_ArrayForEach(c, cases) {
        const char *in = cJSON_GetArrayItem(c, 0)->valuestring;
        const cJSON *want = cJSON_GetArrayItem(c, 1);
        tk_strs io = {0};
        int rc = tk_pretokenize(p, sc, in, strlen(in), 1, collect, &io);
        int ok = rc == 0 && cJSON_IsArray(want) && (size_t)cJSON_GetArraySize(want) == io.n;
        char got[600] = "";
        size_t o = 0;
        for (size_t i = 0; rc == 0 && i < io.n; i++) {
            const cJSON *w = cJSON_GetArrayItem(want, (int)i);
            const char *piece = io.text.p + io.off[i];
            if (!w || strlen(w->valuestring) != io.len[i] || memcmp(w->valuestring, piece, io.len[i])) ok = 0;
            if (o + io.len[i] + 8 < sizeof got)
                o += (size_t)snprintf(got + o, sizeof got - o, "[%.*s]", (int)io.len[i], piece);
        }
        if (cJSON_IsArray(want)) {
            char *w = cJSON_PrintUnformatted(want);
            tt_check(ok, "pre_tokenizer %s on \"%s\": got %s want %s", cfg_text(cfg), in, got, w);
            free(w);
        }
        tk_strs_free(&io);
    }
    tk_pretok_free(p);
}

static void run_decoder(const cJSON *cfg, const cJSON *cases, tk_scratch *sc) {
    tk_decoder *d;
    cinfer_error err = {0};
    if (tk_decoder_parse(cfg, &d, &err)) {
        tt_check(0, "decoder %s does not load: %s", cfg_text(cfg), err.message);
        return;
    }
    const cJSON *c, *t;
    cJSON_ArrayForEach(c, cases) {
        const cJSON *in = cJSON_GetArrayItem(c, 0), *want = cJSON_GetArrayItem(c, 1);
        tk_strs io = {0};
        cJSON_ArrayForEach(t, in) tk_strs_add(&io, t->valuestring, strlen(t->valuestring));
        int rc = tk_decode_chain(d, sc, &io);
        if (cJSON_IsString(want)) {
            char *ins = cJSON_PrintUnformatted(in);
            tt_check(rc == 0 && io.text.n == strlen(want->valuestring) &&
                         memcmp(io.text.p ? io.text.p : "", want->valuestring, io.text.n) == 0,
                     "decoder %s on %s: got \"%.*s\" want \"%s\"", cfg_text(cfg), ins, (int)io.text.n,
                     io.text.p ? io.text.p : "", want->valuestring);
            free(ins);
        } else {
            tt_check(rc == 0, "decoder %s failed where HF panicked", cfg_text(cfg));
        }
        tk_strs_free(&io);
    }
    tk_decoder_free(d);
}

int main(int argc, char **argv) {
    if (argc != 2 && argc != 3) {
        fprintf(stderr, "usage: %s COMPONENTS_FILE [MIN_CONFIGS]\n", argv[0]);
        return 2;
    }
    int min_configs = argc == 3 ? atoi(argv[2]) : 1;
    size_t len;
    char *data = tt_read(argv[1], &len);
    if (!data) {
        printf("FAIL: cannot read %s\n", argv[1]);
        return 1;
    }
    tk_scratch *sc = tk_scratch_new();
    int configs = 0;
    for (char *line = data, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = 0;
        cJSON *j = cJSON_Parse(line);
        if (!j) {
            tt_check(0, "malformed line in %s", argv[1]);
            continue;
        }
        const char *kind = tk_json_str(j, "kind");
        const cJSON *cfg = cJSON_GetObjectItem(j, "config"), *cases = cJSON_GetObjectItem(j, "cases");
        configs++;
        if (!cases) tt_check(0, "%s: HF could not load %s; add a case for it", kind, cfg_text(cfg));
        else if (strcmp(kind, "normalizer") == 0) run_normalizer(cfg, cases, sc);
        else if (strcmp(kind, "pre_tokenizer") == 0) run_pretok(cfg, cases, sc);
        else if (strcmp(kind, "decoder") == 0) run_decoder(cfg, cases, sc);
        cJSON_Delete(j);
    }
    tt_check(configs >= min_configs, "only %d component configurations in %s", configs, argv[1]);
    tk_scratch_free(sc);
    free(data);
    return tt_finish();
}
