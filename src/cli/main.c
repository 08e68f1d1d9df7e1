/* main.c: the cinfer program: dispatches to a verb. */
#include "cli/cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct verb {
    const char *name;
    int (*fn)(int, char **);
    const char *what;
} verb;

static const verb verbs[] = {
    {"run", cf_cmd_run, "generate after a prompt, streaming the text (or ids) to stdout"},
    {"chat", cf_cmd_chat, "chat with the model interactively, using its chat template"},
    {"logits", cf_cmd_logits, "write the logits of every prompt position to a file"},
    {"info", cf_cmd_info, "describe a model folder"},
    {"bench", cf_cmd_bench, "measure prefill and decode speed against the bandwidth roofline"},
    {"tokenize", cf_cmd_tokenize, "print the token ids of a text"},
    {"detokenize", cf_cmd_detokenize, "print the text of token ids"},
    {"serve", cf_cmd_serve, "serve the model over HTTP (OpenAI, Anthropic and llama-server APIs, a chat page)"},
    {"chat-template", cf_cmd_chat_template, "render a model's chat template for a conversation"},
    {"quantize", cf_cmd_quantize, "write a model folder MLX affine-quantized (4-bit, group 64 by default)"},
};

static void usage(FILE *fp) {
    fprintf(fp, "usage: cinfer VERB [options]   (cinfer VERB --help for a verb's options)\n\nverbs:\n");
    for (size_t i = 0; i < sizeof verbs / sizeof verbs[0]; i++) fprintf(fp, "  %-14s %s\n", verbs[i].name, verbs[i].what);
}

/* OpenMP threads that spin while waiting at barriers starve each other as soon as the machine has
 * other work (on 2 cores: 7x slower decode, measured, when the CPU backend ran on OpenMP; it now has its own
 * pool, cpu_workers.c, and OpenMP runs the loading, quantizing and bandwidth loops). libgomp reads OMP_WAIT_POLICY when it is loaded,
 * before main, so the program sets it and starts itself again once, unless the user chose a wait policy
 * (OMP_WAIT_POLICY) or a spin count (GOMP_SPINCOUNT) already. */
static void prefer_passive_openmp(char **argv) {
    if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT")) return;
    setenv("OMP_WAIT_POLICY", "passive", 1);
    execv("/proc/self/exe", argv);
}

int main(int argc, char **argv) {
    prefer_passive_openmp(argv);
    if (argc < 2) { fprintf(stderr, "cinfer: no verb given (see cinfer --help)\n"); return 2; }
    if (cf_is_help(argv[1])) { usage(stdout); return 0; }
    for (size_t i = 0; i < sizeof verbs / sizeof verbs[0]; i++)
        if (!strcmp(argv[1], verbs[i].name)) return verbs[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "cinfer: unknown verb '%s' (see cinfer --help)\n", argv[1]);
    return 2;
}
