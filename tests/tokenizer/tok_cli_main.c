/* tok_cli_main.c: a stand-in for the cinfer program holding only its tokenize and detokenize verbs
 * (src/cli/cmd_tokenize.c), so those verbs are tested on their own. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

int main(int argc, char **argv) {
    if (argc >= 2 && strcmp(argv[1], "tokenize") == 0) return cf_cmd_tokenize(argc - 1, argv + 1);
    if (argc >= 2 && strcmp(argv[1], "detokenize") == 0) return cf_cmd_detokenize(argc - 1, argv + 1);
    fprintf(stderr, "usage: %s tokenize|detokenize [options]\n", argv[0]);
    return 2;
}
