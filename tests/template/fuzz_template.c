/* fuzz_template.c: libFuzzer harness for the chat template interpreter. The input is a template; it is
 * compiled and, if that succeeds, rendered over a small conversation with tight bounds. Any crash,
 * sanitizer report or leak is a bug; errors are expected. */
#include <stdint.h>
#include <stdlib.h>
#include "text/template.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    cf_template *t = NULL;
    if (cf_template_compile((const char *)data, size, &t, NULL) != CINFER_OK) return 0;
    static const cf_template_var vars[] = {
        {"messages", "[{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": \"h\\u00e9 {{x}}\"},"
                     " {\"role\": \"assistant\", \"content\": \"a\", \"tool_calls\": [{\"function\": {\"name\": \"f\","
                     " \"arguments\": {\"k\": [1, 2.5, null, true]}}}]}]"},
        {"tools", "[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {}}}]"},
        {"add_generation_prompt", "true"},
        {"bos_token", "\"<s>\""},
    };
    cf_template_options opt = {.max_output = 1 << 20, .max_memory = 64 << 20, .max_steps = 200000, .max_depth = 32,
                               .now = 1721995200};
    char *out = NULL;
    size_t len = 0;
    cf_template_render(t, vars, 4, &opt, &out, &len, NULL);
    free(out);
    cf_template_free(t);
    return 0;
}
