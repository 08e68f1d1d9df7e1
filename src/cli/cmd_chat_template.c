/* cmd_chat_template.c: `cinfer chat-template` renders a model folder's chat template over a messages
 * file and prints the prompt's exact bytes (no newline added). */
#include "cli/cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "text/template.h"

static const char *const USAGE =
    "usage: cinfer chat-template --model DIR --messages FILE.json [options]\n"
    "Renders DIR's chat template (chat_template.jinja or tokenizer_config.json) as transformers'\n"
    "apply_chat_template(tokenize=False) does, and prints the prompt bytes.\n\n"
    "  --model DIR               model folder\n"
    "  --messages FILE           JSON array of messages ({role, content, ...})\n"
    "  --tools FILE              JSON array of tool definitions\n"
    "  --add-generation-prompt   end with the assistant turn's header\n"
    "  --kwargs JSON             extra template variables, e.g. '{\"enable_thinking\": false}'\n"
    "  --template NAME           a named template of tokenizer_config.json (e.g. tool_use)\n"
    "  --now SECONDS             the time strftime_now sees, in seconds since the epoch\n";

int cf_cmd_chat_template(int argc, char **argv) {
    const char *verb = "chat-template", *model = NULL, *messages = NULL, *tools = NULL, *kwargs = NULL,
               *name = NULL, *now = NULL;
    int agp = 0;
    for (int i = 1; i < argc; i++) {
        const char *v;
        int r;
        if (cf_is_help(argv[i])) {
            fputs(USAGE, stdout);
            return 0;
        }
        if (!strcmp(argv[i], "--add-generation-prompt")) { agp = 1; continue; }
        if ((r = cf_flag_value(verb, argc, argv, &i, "--model", &v)) != 0) { if (r < 0) return CF_EXIT_USAGE; model = v; continue; }
        if ((r = cf_flag_value(verb, argc, argv, &i, "--messages", &v)) != 0) { if (r < 0) return CF_EXIT_USAGE; messages = v; continue; }
        if ((r = cf_flag_value(verb, argc, argv, &i, "--tools", &v)) != 0) { if (r < 0) return CF_EXIT_USAGE; tools = v; continue; }
        if ((r = cf_flag_value(verb, argc, argv, &i, "--kwargs", &v)) != 0) { if (r < 0) return CF_EXIT_USAGE; kwargs = v; continue; }
        if ((r = cf_flag_value(verb, argc, argv, &i, "--template", &v)) != 0) { if (r < 0) return CF_EXIT_USAGE; name = v; continue; }
        if ((r = cf_flag_value(verb, argc, argv, &i, "--now", &v)) != 0) { if (r < 0) return CF_EXIT_USAGE; now = v; continue; }
        return cf_usage_error(verb, "unknown option '%s'", argv[i]);
    }
    if (!model) return cf_usage_error(verb, "--model is required");
    if (!messages) return cf_usage_error(verb, "--messages is required");
    long now_s = 0;
    if (now && cf_parse_long(now, 1, 253402300799L, &now_s))
        return cf_usage_error(verb, "--now must be a positive number of seconds, got '%s'", now);

    char *msg_text = NULL, *tools_text = NULL;
    size_t n_unused;
    if (cf_read_input(verb, "--messages", messages, &msg_text, &n_unused)) return 1;
    if (tools && cf_read_input(verb, "--tools", tools, &tools_text, &n_unused)) {
        free(msg_text);
        return 1;
    }
    cinfer_error err = {0};
    cf_chat_template *ct = NULL;
    char *out = NULL;
    size_t len = 0;
    int rc = 0;
    if (cf_chat_template_load(model, name, &ct, &err) != CINFER_OK) {
        cf_report(verb, &err);
        /* the model folder failed, unless the template --template names is not in it */
        rc = name && err.code == CINFER_E_INVALID_ARGUMENT ? CF_EXIT_USAGE : 1;
    } else {
        cf_chat_request req = {.messages_json = msg_text, .tools_json = tools_text, .add_generation_prompt = agp,
                               .kwargs_json = kwargs};
        cf_template_options opt = {.now = now_s};
        if (cf_chat_template_render(ct, &req, &opt, &out, &len, &err) != CINFER_OK) rc = cf_report(verb, &err);
        else if (fwrite(out, 1, len, stdout) != len || fflush(stdout) != 0) rc = 1;
    }
    free(out);
    cf_chat_template_free(ct);
    free(msg_text);
    free(tools_text);
    return rc;
}
