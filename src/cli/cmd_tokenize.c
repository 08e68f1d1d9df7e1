/* cmd_tokenize.c: `cinfer tokenize` prints the token ids of a text as Hugging Face's
 * tokenizer(text)["input_ids"] does; `cinfer detokenize` prints the text of a list of ids. */
#include "cli/cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "text/tokenizer.h"

static const char *const TOK_USAGE =
    "usage: cinfer tokenize [--model DIR] (--text TEXT | --file FILE | --jsonl FILE) [--no-special]\n"
    "Prints the token ids of the text on one line, separated by spaces, with the special tokens the\n"
    "tokenizer's post-processor adds (as transformers' tokenizer(text)[\"input_ids\"]).\n\n"
    "  --model DIR     model folder, or a folder holding only tokenizer.json (+ tokenizer_config.json)\n"
    "  --text TEXT     the text\n"
    "  --file FILE     the exact bytes of FILE (a trailing newline is part of the text)\n"
    "  --jsonl FILE    one JSON string per line; prints one line of ids per string\n"
    "  --no-special    add no special tokens (BOS/EOS); specials written in the text still count\n";

static const char *const DETOK_USAGE =
    "usage: cinfer detokenize [--model DIR] --ids 1,2,3 [--skip-special]\n"
    "Prints the text of the ids (as transformers' tokenizer.decode(ids)) followed by a newline.\n\n"
    "  --model DIR       model folder, or a folder holding only tokenizer files\n"
    "  --ids LIST        token ids separated by commas (5,17,300)\n"
    "  --skip-special    leave out special tokens\n";

static unsigned hex4(const char *p, int *ok) {
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) *ok = 0;
        v = v * 16 + (unsigned)(d < 0 ? 0 : d);
    }
    return v;
}

static char *put_cp(char *o, unsigned cp) {
    if (cp < 0x80) *o++ = (char)cp;
    else if (cp < 0x800) { *o++ = (char)(0xC0 | (cp >> 6)); *o++ = (char)(0x80 | (cp & 0x3F)); }
    else if (cp < 0x10000) {
        *o++ = (char)(0xE0 | (cp >> 12));
        *o++ = (char)(0x80 | ((cp >> 6) & 0x3F));
        *o++ = (char)(0x80 | (cp & 0x3F));
    } else {
        *o++ = (char)(0xF0 | (cp >> 18));
        *o++ = (char)(0x80 | ((cp >> 12) & 0x3F));
        *o++ = (char)(0x80 | ((cp >> 6) & 0x3F));
        *o++ = (char)(0x80 | (cp & 0x3F));
    }
    return o;
}

/* Decodes a line holding one JSON string into out (at least as long as the line). Keeps U+0000.
 * Returns the decoded length, or -1 if the line is not exactly one JSON string. */
static long json_string_line(const char *s, size_t n, char *out) {
    size_t i = 0;
    while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r')) i++;
    if (i == n || s[i++] != '"') return -1;
    char *o = out;
    while (i < n && s[i] != '"') {
        if ((unsigned char)s[i] < 0x20) return -1;
        if (s[i] != '\\') { *o++ = s[i++]; continue; }
        if (++i >= n) return -1;
        char e = s[i++];
        int ok = 1;
        unsigned cp;
        switch (e) {
        case '"': case '\\': case '/': *o++ = e; break;
        case 'b': *o++ = '\b'; break;
        case 'f': *o++ = '\f'; break;
        case 'n': *o++ = '\n'; break;
        case 'r': *o++ = '\r'; break;
        case 't': *o++ = '\t'; break;
        case 'u':
            if (i + 4 > n) return -1;
            cp = hex4(s + i, &ok);
            i += 4;
            if (cp >= 0xD800 && cp < 0xDC00 && i + 6 <= n && s[i] == '\\' && s[i + 1] == 'u') {
                unsigned lo = hex4(s + i + 2, &ok);
                if (lo >= 0xDC00 && lo < 0xE000) {
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    i += 6;
                }
            }
            if (!ok) return -1;
            if (cp >= 0xD800 && cp < 0xE000) cp = 0xFFFD; /* a lone surrogate has no UTF-8 form */
            o = put_cp(o, cp);
            break;
        default:
            return -1;
        }
    }
    if (i >= n) return -1;
    for (i++; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r') return -1;
    return (long)(o - out);
}

static int print_ids(const cf_tokenizer *tok, const char *text, size_t len, int flags) {
    int32_t *ids;
    size_t n;
    cinfer_error err = {0};
    if (cf_tokenizer_encode(tok, text, len, flags, &ids, &n, &err)) return cf_report("tokenize", &err);
    for (size_t i = 0; i < n; i++) printf(i ? " %d" : "%d", (int)ids[i]);
    putchar('\n');
    free(ids);
    return 0;
}

static int tokenize_jsonl(const cf_tokenizer *tok, const char *path, const char *data, size_t len, int flags) {
    char *buf = malloc(len + 1);
    if (!buf) {
        fprintf(stderr, "cinfer tokenize: out of memory for %s\n", path);
        return 1;
    }
    int rc = 0;
    size_t line = 0;
    for (size_t i = 0; i < len && !rc;) {
        const char *nl = memchr(data + i, '\n', len - i);
        size_t e = nl ? (size_t)(nl - data) : len;
        line++;
        long n = json_string_line(data + i, e - i, buf);
        if (n < 0) rc = cf_usage_error("tokenize", "%s line %zu is not one JSON string", path, line);
        else rc = print_ids(tok, buf, (size_t)n, flags);
        i = e + 1;
    }
    free(buf);
    return rc;
}

static int load(const char *verb, const char *model, cf_tokenizer **tok) {
    cinfer_error err = {0};
    if (!model) model = cf_default_model_dir();
    if (!model) return cf_usage_error(verb, "--model is required");
    if (cf_tokenizer_load(model, tok, &err)) return cf_report(verb, &err);
    return 0;
}

int cf_cmd_tokenize(int argc, char **argv) {
    const char *verb = "tokenize", *model = NULL, *text = NULL, *file = NULL, *jsonl = NULL;
    int flags = CF_TOK_ADD_SPECIAL | CF_TOK_PARSE_SPECIAL;
    for (int i = 1; i < argc; i++) {
        const char *v;
        int r;
        if (cf_is_help(argv[i])) {
            fputs(TOK_USAGE, stdout);
            return 0;
        }
        if (!strcmp(argv[i], "--no-special")) { flags &= ~CF_TOK_ADD_SPECIAL; continue; }
        if ((r = cf_flag_value(verb, argc, argv, &i, "--model", &v)) != 0) { if (r < 0) return CF_EXIT_USAGE; model = v; continue; }
        if ((r = cf_flag_value(verb, argc, argv, &i, "--text", &v)) != 0) { if (r < 0) return CF_EXIT_USAGE; text = v; continue; }
        if ((r = cf_flag_value(verb, argc, argv, &i, "--file", &v)) != 0) { if (r < 0) return CF_EXIT_USAGE; file = v; continue; }
        if ((r = cf_flag_value(verb, argc, argv, &i, "--jsonl", &v)) != 0) { if (r < 0) return CF_EXIT_USAGE; jsonl = v; continue; }
        return cf_usage_error(verb, "unknown option '%s'", argv[i]);
    }
    if ((text != NULL) + (file != NULL) + (jsonl != NULL) != 1)
        return cf_usage_error(verb, "give exactly one of --text, --file and --jsonl");
    char *data = NULL;
    size_t len = 0;
    if (file && cf_read_input(verb, "--file", file, &data, &len)) return 1;
    if (jsonl && cf_read_input(verb, "--jsonl", jsonl, &data, &len)) return 1;
    cf_tokenizer *tok = NULL;
    int rc = load(verb, model, &tok);
    if (!rc) {
        if (jsonl) rc = tokenize_jsonl(tok, jsonl, data, len, flags);
        else rc = print_ids(tok, file ? data : text, file ? len : strlen(text), flags);
    }
    cf_tokenizer_free(tok);
    free(data);
    return rc;
}

int cf_cmd_detokenize(int argc, char **argv) {
    const char *verb = "detokenize", *model = NULL, *list = NULL;
    int skip = 0;
    for (int i = 1; i < argc; i++) {
        const char *v;
        int r;
        if (cf_is_help(argv[i])) {
            fputs(DETOK_USAGE, stdout);
            return 0;
        }
        if (!strcmp(argv[i], "--skip-special")) { skip = 1; continue; }
        if ((r = cf_flag_value(verb, argc, argv, &i, "--model", &v)) != 0) { if (r < 0) return CF_EXIT_USAGE; model = v; continue; }
        if ((r = cf_flag_value(verb, argc, argv, &i, "--ids", &v)) != 0) { if (r < 0) return CF_EXIT_USAGE; list = v; continue; }
        return cf_usage_error(verb, "unknown option '%s'", argv[i]);
    }
    if (!list) return cf_usage_error(verb, "--ids is required");
    int32_t *ids = NULL;
    int n = 0;
    char why[160];
    if (cf_parse_ids(list, &ids, &n, why, sizeof why)) return cf_usage_error(verb, "--ids: %s", why);
    cf_tokenizer *tok = NULL;
    int rc = load(verb, model, &tok);
    if (!rc) {
        char *text;
        size_t len;
        cinfer_error err = {0};
        if (cf_tokenizer_decode(tok, ids, (size_t)n, skip, &text, &len, &err)) {
            rc = cf_report(verb, &err);
        } else {
            fwrite(text, 1, len, stdout);
            putchar('\n');
            free(text);
        }
    }
    cf_tokenizer_free(tok);
    free(ids);
    return rc;
}
