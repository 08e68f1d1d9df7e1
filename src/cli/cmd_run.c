/* cmd_run.c: `cinfer run`, one generation through the engine, streamed to stdout as text or ids; and
 * the generation flags it shares with `cinfer chat` (gen.h). */
#include "cli/gen.h"
#include "cli/chat_out.h"
#include "base/status.h"

#include <float.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void cf_gen_opts_init(cf_gen_opts *o) {
    memset(o, 0, sizeof *o);
    o->common = (cf_common_opts){.model = cf_default_model_dir(), .device = CF_DEVICE_CPU};
    o->req = cinfer_request_default();
    o->req.temperature = 0;
    o->req.fit_context = 1;
}

void cf_gen_opts_free(cf_gen_opts *o) {
    free(o->stop);
    o->stop = NULL;
    cinfer_model_free(o->draft);
    o->draft = NULL;
}

const char *const cf_gen_flags_help =
    "  --model DIR              Hugging Face model folder (default: the embedded model)\n"
    "  --max-tokens N           tokens to generate at most (default 512, lowered to what the context leaves)\n"
    "  --temperature T          0 = greedy (default 0)\n"
    "  --top-k K                keep the K most likely tokens (0 = off)\n"
    "  --top-p P                keep the smallest set with probability >= P (1 = off)\n"
    "  --min-p P                keep tokens with probability >= P * the largest (0 = off)\n"
    "  --repeat-penalty R       divide the logits of recent tokens by R (1 = off)\n"
    "  --repeat-last-n N        tokens the repeat penalty looks back at (default 20, 0 = all)\n"
    "  --presence-penalty X     subtract X from the logits of tokens seen (-2..2)\n"
    "  --frequency-penalty X    subtract X * count from the logits of tokens seen (-2..2)\n"
    "  --seed N                 sampling seed (default: a fresh one, printed by --stats)\n"
    "  --stop TEXT              end before this text (repeatable); it is not printed\n"
    "  --ignore-eos             do not end at end-of-sequence tokens\n"
    "  --chat-template-kwargs JSON\n"
    "                           extra chat template variables, e.g. '{\"enable_thinking\": false}'\n"
    "  --logprobs N             print each token's log-probability and its N most likely alternatives (0..20)\n"
    "                           to stderr\n"
    "  --stats                  print token counts, time to first token and tokens/s to stderr\n"
    "  --spec ngram|draft|none  speculative decoding (the same output, sooner): drafts from n-gram lookup in the\n"
    "                           context, or from a draft model (default none; --draft-model implies draft)\n"
    "  --draft-model DIR        the draft model of --spec draft (default with the embedded model: its draft,\n"
    "                           models/cinfer-tiny-draft); its tokenizer must agree with the model's\n"
    "  --draft-max N            drafted tokens per step at most, 1..16 (default: adaptive up to 16)\n"
    "  --device cpu|cuda        compute device (default cpu)\n"
    "  --threads N              CPU threads (default: one per physical core)\n";

/* --flag with an integer value in [lo, hi]. */
static int int_flag(const char *verb, int argc, char **argv, int *i, const char *flag, long lo, long hi, long *out) {
    const char *v;
    int r = cf_flag_value(verb, argc, argv, i, flag, &v);
    if (r <= 0) return r;
    if (cf_parse_long(v, lo, hi, out)) {
        cf_usage_error(verb, "%s must be an integer in [%ld, %ld], got '%s'", flag, lo, hi, v);
        return -1;
    }
    return 1;
}

/* --flag with a number value; its range is checked with the request. */
static int float_flag(const char *verb, int argc, char **argv, int *i, const char *flag, float *out) {
    const char *v;
    int r = cf_flag_value(verb, argc, argv, i, flag, &v);
    if (r <= 0) return r;
    if (cf_parse_float(v, -FLT_MAX, FLT_MAX, out)) {
        cf_usage_error(verb, "%s must be a finite decimal number, got '%s'", flag, v);
        return -1;
    }
    return 1;
}

int cf_gen_flag(const char *verb, int argc, char **argv, int *i, cf_gen_opts *o) {
    cinfer_request *q = &o->req;
    const char *v;
    long n;
    int r;
    if ((r = cf_common_flag(verb, argc, argv, i, &o->common)) != 0) return r;
    if ((r = int_flag(verb, argc, argv, i, "--max-tokens", 1, 1 << 24, &n)) != 0) {
        if (r > 0) q->max_tokens = (int32_t)n;
        return r;
    }
    if ((r = float_flag(verb, argc, argv, i, "--temperature", &q->temperature)) != 0) return r;
    if ((r = int_flag(verb, argc, argv, i, "--top-k", 0, INT32_MAX, &n)) != 0) {
        if (r > 0) q->top_k = (int32_t)n;
        return r;
    }
    if ((r = float_flag(verb, argc, argv, i, "--top-p", &q->top_p)) != 0) return r;
    if ((r = float_flag(verb, argc, argv, i, "--min-p", &q->min_p)) != 0) return r;
    if ((r = float_flag(verb, argc, argv, i, "--repeat-penalty", &q->repetition_penalty)) != 0) return r;
    if ((r = int_flag(verb, argc, argv, i, "--repeat-last-n", 0, INT32_MAX, &n)) != 0) {
        if (r > 0) q->repetition_window = (int32_t)n;
        return r;
    }
    if ((r = float_flag(verb, argc, argv, i, "--presence-penalty", &q->presence_penalty)) != 0) return r;
    if ((r = float_flag(verb, argc, argv, i, "--frequency-penalty", &q->frequency_penalty)) != 0) return r;
    if ((r = int_flag(verb, argc, argv, i, "--seed", 0, LONG_MAX, &n)) != 0) {
        if (r > 0) q->seed = n;
        return r;
    }
    if ((r = int_flag(verb, argc, argv, i, "--logprobs", 0, CINFER_MAX_TOP_LOGPROBS, &n)) != 0) {
        if (r > 0) {
            q->logprobs = 1;
            q->top_logprobs = (int32_t)n;
        }
        return r;
    }
    if ((r = cf_flag_value(verb, argc, argv, i, "--stop", &v)) != 0) {
        if (r < 0) return r;
        if (!v[0]) {
            cf_usage_error(verb, "--stop needs a non-empty text");
            return -1;
        }
        const char **ns = realloc(o->stop, (q->n_stop + 1) * sizeof *ns);
        if (!ns) {
            cf_usage_error(verb, "out of memory");
            return -1;
        }
        o->stop = ns;
        o->stop[q->n_stop++] = v;
        q->stop = o->stop;
        return 1;
    }
    if ((r = cf_flag_value(verb, argc, argv, i, "--chat-template-kwargs", &q->template_kwargs_json)) != 0) return r;
    if (!strcmp(argv[*i], "--ignore-eos")) {
        q->ignore_eos = 1;
        return 1;
    }
    if (!strcmp(argv[*i], "--stats")) {
        o->stats = 1;
        return 1;
    }
    if ((r = cf_spec_flag(verb, argc, argv, i, &o->spec)) != 0) return r;
    if ((r = cf_flag_value(verb, argc, argv, i, "--draft-model", &o->draft_dir)) != 0) return r;
    if ((r = int_flag(verb, argc, argv, i, "--draft-max", 1, 16, &n)) != 0) {
        if (r > 0) q->draft_max = (int32_t)n;
        return r;
    }
    return 0;
}

const char *cf_gen_draft_dir(const char *model_dir, const char *draft_dir) {
    static char path[4200];
    if (draft_dir) return draft_dir;
    const char *embedded = cf_default_model_dir();
    if (!model_dir || !embedded || strcmp(model_dir, embedded)) return NULL;
    snprintf(path, sizeof path, "%s-draft", embedded);
    FILE *f = NULL;
    char cfg[4300];
    snprintf(cfg, sizeof cfg, "%s/config.json", path);
    if (!(f = fopen(cfg, "rb"))) return NULL;
    fclose(f);
    return path;
}

cinfer_status cf_gen_load(cf_gen_opts *o, cinfer_model **m, cinfer_engine **e, cinfer_error *err) {
    cinfer_model_params p = cinfer_model_default_params();
    p.device = o->common.device == CF_DEVICE_CUDA ? CINFER_DEVICE_CUDA : CINFER_DEVICE_CPU;
    p.n_threads = o->common.threads;
    *e = NULL;
    const char *spec = o->spec ? o->spec : o->draft_dir ? "draft" : NULL;
    const char *draft_dir = spec && !strcmp(spec, "draft") ? cf_gen_draft_dir(o->common.model, o->draft_dir) : NULL;
    if (spec && !strcmp(spec, "draft") && !draft_dir)
        return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "--spec draft needs --draft-model DIR (only the embedded model has a "
                                                           "default draft)");
    cinfer_status st = cinfer_model_load(o->common.model, &p, m, err);
    if (st == CINFER_OK && draft_dir) {
        st = cinfer_model_load(draft_dir, &p, &o->draft, err);
        if (st != CINFER_OK) {
            cinfer_error inner = *err;
            snprintf(err->message, sizeof err->message, "the draft model %s: %s", draft_dir, inner.message);
        }
    }
    cinfer_engine_params ep = cinfer_engine_default_params();
    ep.draft_model = o->draft;
    ep.default_draft = spec;
    if (st == CINFER_OK) st = cinfer_engine_create(*m, &ep, e, err);
    return st;
}

void cf_gen_print_stats(const char *verb, const cinfer_result *r) {
    const cinfer_usage *u = &r->usage;
    fprintf(stderr, "cinfer %s: %d tokens (%s%s%s) after a %d-token prompt; TTFT %.3f s, prefill %.1f tokens/s, decode %.1f "
                    "tokens/s; plan %s, seed %llu\n",
            verb, u->completion_tokens, cinfer_outcome_name(r->outcome),
            r->outcome == CINFER_OUTCOME_COMPLETED || r->outcome == CINFER_OUTCOME_CANCELLED ? ": " : "",
            r->outcome == CINFER_OUTCOME_COMPLETED   ? cinfer_finish_name(r->finish)
            : r->outcome == CINFER_OUTCOME_CANCELLED ? cinfer_cancel_reason_name(r->cancel_reason)
                                                     : "",
            u->prompt_tokens, u->ttft_s, u->prefill_tps, u->decode_tps, r->plan, (unsigned long long)r->seed);
    if (u->draft_tokens)
        fprintf(stderr, "cinfer %s: speculative decoding: %d tokens drafted, %d accepted (%.1f%%)\n", verb, u->draft_tokens,
                u->accepted_tokens, 100.0 * u->accepted_tokens / u->draft_tokens);
}

/* ---- run ---- */

static const char *run_help =
    "usage: cinfer run [--model DIR] (-p TEXT | --prompt-ids 5,17,300) [options]\n"
    "Generates after a prompt and streams the result to stdout.\n"
    "  -p, --prompt TEXT        the prompt as text (tokenized with the model's tokenizer)\n"
    "  --prompt-ids LIST        the prompt as token ids, comma-separated\n"
    "  --chat                   wrap the prompt as one user message in the model's chat template; the reply's\n"
    "                           reasoning is set apart (dimmed, or lines prefixed \"thinking> \" when not a terminal)\n"
    "  --output text|ids        print the generated text (default for -p) or the ids on one line (default for\n"
    "                           --prompt-ids)\n";

typedef struct run_out {
    int ids;
    cf_chat_out *chat;      /* --chat: the reply goes through the chat parser */
    cinfer_error chat_err;  /* the parser's failure, if any */
} run_out;

static int print_event(const cinfer_event *ev, void *user) {
    run_out *o = user;
    if (o->chat) {
        cinfer_status st = cf_chat_out_feed(o->chat, ev->text, ev->text_len, &o->chat_err);
        if (st == CINFER_OK && ev->kind == CINFER_EVENT_END) {
            st = cf_chat_out_finish(o->chat, &o->chat_err);
            printf("\n");
            fflush(stdout);
        }
        return st != CINFER_OK;
    }
    if (o->ids) {
        if (ev->kind == CINFER_EVENT_TOKEN) printf(ev->index ? " %d" : "%d", ev->token);
        else printf("\n");
    } else {
        fwrite(ev->text, 1, ev->text_len, stdout);
        if (ev->kind == CINFER_EVENT_END) printf("\n");
    }
    fflush(stdout);
    return 0;
}

/* The text column is empty with --output ids, which never detokenizes. */
static void print_logprobs(const cinfer_model *m, const cinfer_result *r, int with_text) {
    for (size_t i = 0; i < r->n_tokens; i++) {
        const cinfer_logprobs *lp = &r->logprobs[i];
        char *text = NULL;
        size_t len = 0;
        if (with_text) cinfer_detokenize(m, &lp->token, 1, &text, &len, NULL);
        fprintf(stderr, "%zu\t%d\t%.5f\t%s", i, lp->token, lp->logprob, text ? text : "");
        cinfer_free(text);
        for (int k = 0; k < lp->n_top; k++) fprintf(stderr, "%s%d:%.5f", k ? " " : "\ttop ", lp->top[k].token, lp->top[k].logprob);
        fprintf(stderr, "\n");
    }
}

int cf_cmd_run(int argc, char **argv) {
    const char *verb = "run";
    cf_gen_opts o;
    cf_gen_opts_init(&o);
    const char *text = NULL, *ids_s = NULL, *v;
    int chat = 0, out_ids = -1, rc = 0;
    for (int i = 1; i < argc; i++) {
        int r;
        if (cf_is_help(argv[i])) {
            fputs(run_help, stdout);
            fputs(cf_gen_flags_help, stdout);
            cf_gen_opts_free(&o);
            return 0;
        }
        if ((r = cf_gen_flag(verb, argc, argv, &i, &o)) == 0 && (r = cf_flag_value(verb, argc, argv, &i, "--prompt", &text)) == 0 &&
            (r = cf_flag_value(verb, argc, argv, &i, "-p", &text)) == 0 &&
            (r = cf_flag_value(verb, argc, argv, &i, "--prompt-ids", &ids_s)) == 0) {
            if ((r = cf_flag_value(verb, argc, argv, &i, "--output", &v)) > 0) {
                if (!strcmp(v, "ids")) out_ids = 1;
                else if (!strcmp(v, "text")) out_ids = 0;
                else r = -1, cf_usage_error(verb, "--output must be text or ids, got '%s'", v);
            } else if (r == 0 && !strcmp(argv[i], "--chat")) {
                chat = r = 1;
            }
        }
        if (r == 0) r = -1, cf_usage_error(verb, "unknown argument '%s'", argv[i]);
        if (r < 0) {
            cf_gen_opts_free(&o);
            return CF_EXIT_USAGE;
        }
    }
    int32_t *ids = NULL;
    int n_ids = 0;
    char why[160];
    if (!o.common.model) rc = cf_usage_error(verb, "--model DIR is required (no embedded model in this build)");
    else if (!text == !ids_s) rc = cf_usage_error(verb, "give the prompt as -p TEXT or --prompt-ids LIST (one of them)");
    else if (chat && !text) rc = cf_usage_error(verb, "--chat needs the prompt as text (-p)");
    else if (!chat && o.req.template_kwargs_json) rc = cf_usage_error(verb, "--chat-template-kwargs needs --chat");
    else if (out_ids == 1 && o.req.n_stop) rc = cf_usage_error(verb, "--stop matches text; --output ids prints no text");
    else if (ids_s && cf_parse_ids(ids_s, &ids, &n_ids, why, sizeof why)) rc = cf_usage_error(verb, "--prompt-ids: %s", why);
    if (rc) {
        cf_gen_opts_free(&o);
        return rc;
    }

    cinfer_message msg = {.role = "user", .content = text};
    cinfer_request *q = &o.req;
    if (ids) {
        q->prompt_ids = ids;
        q->n_prompt_ids = (size_t)n_ids;
    } else if (chat) {
        q->messages = &msg;
        q->n_messages = 1;
    } else {
        q->prompt_text = text;
    }
    run_out out = {.ids = out_ids < 0 ? ids != NULL : out_ids};
    q->ids_only = out.ids;
    cinfer_session_params sp = cinfer_session_default_params();
    sp.output = CINFER_OUTPUT_CALLBACK;
    sp.on_event = print_event;
    sp.user = &out;

    cinfer_error err = {0};
    cinfer_model *m = NULL;
    cinfer_engine *e = NULL;
    cinfer_session *s = NULL;
    const cinfer_result *res = NULL;
    cf_chat_out chat_out = {0};
    if (chat && !out.ids) out.chat = &chat_out;
    if (cf_gen_load(&o, &m, &e, &err) != CINFER_OK ||
        (out.chat && cf_chat_out_open(&chat_out, m, q, stdout, &err) != CINFER_OK) ||
        cinfer_session_open(e, q, &sp, &s, &err) != CINFER_OK || cinfer_session_wait(s, -1, &res, &err) != CINFER_OK) {
        rc = cf_report(verb, &err);
    } else {
        if (res->outcome == CINFER_OUTCOME_FAILED) rc = cf_report(verb, &res->error);
        else if (out.chat_err.code != CINFER_OK) rc = cf_report(verb, &out.chat_err);
        if (res->logprobs) print_logprobs(m, res, !out.ids);
        if (o.stats) cf_gen_print_stats(verb, res);
    }
    cinfer_session_free(s);
    cf_chat_out_close(&chat_out);
    cinfer_engine_free(e);
    cinfer_model_free(m);
    free(ids);
    cf_gen_opts_free(&o);
    return rc;
}
