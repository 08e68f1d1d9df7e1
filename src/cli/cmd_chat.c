/* cmd_chat.c: `cinfer chat`, an interactive conversation: each line read is a user message, the whole
 * history is rendered with the model's chat template and the reply streams to stdout through the chat
 * parser (reasoning set apart; the history keeps the reply's content). /reset forgets
 * the history, /exit (or end of input) quits. Ctrl-C cancels the reply being written; at the prompt it
 * quits. */
#include "cli/gen.h"
#include "cli/chat_out.h"
#include "base/status.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig) {
    interrupted = 1;
}

static const char *chat_help =
    "usage: cinfer chat [--model DIR] [--system TEXT] [options]\n"
    "Chats with the model using its chat template. Each input line is a user message; /reset starts over,\n"
    "/exit or end of input quits. Ctrl-C stops the reply being written; at the prompt it quits.\n"
    "  --system TEXT            a system message at the start of the conversation\n";

typedef struct history {
    cinfer_message *msgs;
    size_t n, cap;
    size_t n_fixed;          /* the system message, kept by /reset */
} history;

static int history_add(history *h, const char *role, const char *content, size_t len) {
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 16;
        cinfer_message *m = realloc(h->msgs, cap * sizeof *m);
        if (!m) return -1;
        h->msgs = m;
        h->cap = cap;
    }
    char *c = malloc(len + 1);
    if (!c) return -1;
    memcpy(c, content, len);
    c[len] = 0;
    h->msgs[h->n++] = (cinfer_message){.role = role, .content = c};
    return 0;
}

static void history_truncate(history *h, size_t n) {
    while (h->n > n) free((char *)h->msgs[--h->n].content);
}

/* Streams one reply to stdout through *out, which keeps its content. Ctrl-C cancels it (kept as far as it
 * got). */
static cinfer_status reply(const cinfer_model *m, cinfer_engine *e, cinfer_request *q, const history *h, int stats,
                           cf_chat_out *out, cinfer_error *err) {
    q->messages = h->msgs;
    q->n_messages = h->n;
    cinfer_session_params sp = cinfer_session_default_params();
    sp.output = CINFER_OUTPUT_PULL;
    cinfer_session *s = NULL;
    CF_TRY(cinfer_session_open(e, q, &sp, &s, err));
    cinfer_status st = cf_chat_out_open(out, m, q, stdout, err);
    cinfer_event ev;
    while (st == CINFER_OK) {
        if (interrupted) {
            cinfer_session_cancel(s);
            interrupted = 0;
        }
        st = cinfer_session_next(s, &ev, 0.05, err);
        if (st == CINFER_E_TIMEOUT) {
            st = CINFER_OK;
            continue;
        }
        if (st == CINFER_OK) st = cf_chat_out_feed(out, ev.text, ev.text_len, err);
        if (st == CINFER_OK && ev.kind == CINFER_EVENT_END) {
            st = cf_chat_out_finish(out, err);
            break;
        }
    }
    printf("\n");
    fflush(stdout);
    const cinfer_result *res = NULL;
    if (st == CINFER_OK) st = cinfer_session_wait(s, -1, &res, err);
    if (st == CINFER_OK) {
        if (res->outcome == CINFER_OUTCOME_FAILED) {
            *err = res->error;
            st = res->error.code;
        } else if (res->outcome == CINFER_OUTCOME_CANCELLED) {
            fprintf(stderr, "[reply stopped]\n");
        }
        if (stats) cf_gen_print_stats("chat", res);
    }
    cinfer_session_free(s);
    return st;
}

/* Loads the model and starts the engine with SIGINT blocked, so that the helper threads (the engine's,
 * OpenMP's) never take it and Ctrl-C always reaches the thread reading input. */
static cinfer_status load(cf_gen_opts *o, cinfer_model **m, cinfer_engine **e, cinfer_error *err) {
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    pthread_sigmask(SIG_BLOCK, &block, &old);
    cinfer_status st = cf_gen_load(o, m, e, err);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;  /* no SA_RESTART: Ctrl-C interrupts the read at the prompt */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return st;
}

int cf_cmd_chat(int argc, char **argv) {
    const char *verb = "chat", *system = NULL;
    cf_gen_opts o;
    cf_gen_opts_init(&o);
    for (int i = 1; i < argc; i++) {
        int r;
        if (cf_is_help(argv[i])) {
            fputs(chat_help, stdout);
            fputs(cf_gen_flags_help, stdout);
            cf_gen_opts_free(&o);
            return 0;
        }
        if ((r = cf_gen_flag(verb, argc, argv, &i, &o)) == 0 && (r = cf_flag_value(verb, argc, argv, &i, "--system", &system)) == 0)
            r = -1, cf_usage_error(verb, "unknown argument '%s'", argv[i]);
        if (r < 0) {
            cf_gen_opts_free(&o);
            return CF_EXIT_USAGE;
        }
    }
    if (!o.common.model) {
        cf_gen_opts_free(&o);
        return cf_usage_error(verb, "--model DIR is required (no embedded model in this build)");
    }
    cinfer_error err = {0};
    cinfer_model *m = NULL;
    cinfer_engine *e = NULL;
    history h = {0};
    char *line = NULL;
    size_t line_cap = 0;
    int rc = 0;
    if (load(&o, &m, &e, &err) != CINFER_OK) {
        rc = cf_report(verb, &err);
        goto done;
    }
    if (!cinfer_model_get_info(m).has_chat_template) {
        fprintf(stderr, "cinfer chat: %s has no chat template; use cinfer run -p for plain text\n", o.common.model);
        rc = 1;
        goto done;
    }
    if (system && history_add(&h, "system", system, strlen(system))) goto oom;
    h.n_fixed = h.n;
    const int tty = isatty(STDIN_FILENO);
    while (!interrupted) {
        if (tty) {
            printf("> ");
            fflush(stdout);
        }
        ssize_t n = getline(&line, &line_cap, stdin);
        if (n < 0) {
            if (tty) printf("\n");
            break;
        }
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = 0;
        if (!strcmp(line, "/exit")) break;
        if (!strcmp(line, "/reset")) {
            history_truncate(&h, h.n_fixed);
            if (tty) fprintf(stderr, "[history cleared]\n");
            continue;
        }
        if (!n) continue;
        if (history_add(&h, "user", line, (size_t)n)) goto oom;
        cf_chat_out answer = {0};
        cinfer_status st = reply(m, e, &o.req, &h, o.stats, &answer, &err);
        if (st == CINFER_OK) {
            int failed = history_add(&h, "assistant", answer.content ? answer.content : "", answer.len);
            cf_chat_out_close(&answer);
            if (failed) goto oom;
            continue;
        }
        cf_chat_out_close(&answer);
        history_truncate(&h, h.n - 1);
        if (st == CINFER_E_CONTEXT_OVERFLOW) fprintf(stderr, "cinfer chat: %s; /reset starts over\n", err.message);
        else fprintf(stderr, "cinfer chat: %s\n", err.message);
    }
    goto done;
oom:
    fprintf(stderr, "cinfer chat: out of memory\n");
    rc = 1;
done:
    free(line);
    history_truncate(&h, 0);
    free(h.msgs);
    cinfer_engine_free(e);
    cinfer_model_free(m);
    cf_gen_opts_free(&o);
    return rc;
}
