/* simple.c: the smallest program that embeds cinfer: load a model folder, start an engine, generate
 * after a text prompt and stream the text to stdout.   usage: simple MODEL_DIR [PROMPT] */
#include <cinfer.h>
#include <stdio.h>

static int print_text(const cinfer_event *ev, void *user) {
    fwrite(ev->text, 1, ev->text_len, stdout);
    fflush(stdout);
    return 0;  /* non-zero would stop the generation */
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: %s MODEL_DIR [PROMPT]\n", argv[0]); return 2; }
    cinfer_error err;
    cinfer_model *model = NULL;
    cinfer_engine *engine = NULL;
    cinfer_session *session = NULL;
    const cinfer_result *result = NULL;

    cinfer_request req = cinfer_request_default();
    req.prompt_text = argc > 2 ? argv[2] : "In the beginning";
    req.max_tokens = 64;
    req.temperature = 0.7f;
    req.seed = 1;
    cinfer_session_params out = cinfer_session_default_params();
    out.output = CINFER_OUTPUT_CALLBACK;
    out.on_event = print_text;

    if (cinfer_model_load(argv[1], NULL, &model, &err) != CINFER_OK ||
        cinfer_engine_create(model, NULL, &engine, &err) != CINFER_OK ||
        cinfer_session_open(engine, &req, &out, &session, &err) != CINFER_OK ||
        cinfer_session_wait(session, -1, &result, &err) != CINFER_OK) {
        fprintf(stderr, "error (%s): %s\n", cinfer_status_name(err.code), err.message);
        cinfer_model_free(model);  /* also frees the engine */
        return 1;
    }
    int ok = result->outcome == CINFER_OUTCOME_COMPLETED;
    printf("\n[%s, %d tokens, %.1f tokens/s]\n", ok ? cinfer_finish_name(result->finish) : result->error.message,
           result->usage.completion_tokens, result->usage.decode_tps);
    cinfer_session_free(session);
    cinfer_engine_free(engine);
    cinfer_model_free(model);
    return ok ? 0 : 1;
}
