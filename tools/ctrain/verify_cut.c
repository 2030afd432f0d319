/*
 * verify_cut.c - the cut points of the fits `ctrain verify-resume` runs: a fit whose
 * environment has CTRAIN_VERIFY_CUT=HOW@STEP interrupts itself once, during step STEP, at an
 * exact point, so that the interrupted run can be compared with a straight one:
 *     window  SIGKILL at the middle micro-batch of the step's accumulation window
 *     term    SIGTERM at the step's first micro-batch: the graceful stop after that step
 *     eval    SIGKILL as the first evaluation after that step ends, before its checkpoint
 *     save    SIGKILL inside that step's checkpoint write, its first file written
 * In a fit of several MPI ranks every rank makes the cut, or with HOW@STEP:RANK that rank
 * alone (rank 0 alone writes checkpoints, so only it can be cut by `save`).
 * It is a verification hook of the tool, read by fit alone; the library knows nothing of it
 * (it sees only the callbacks, on_save_file among them).
 *
 * The cut lives in the fit's session; its handlers call the session's own first.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

static const char *const how_names[] = {"", "window", "term", "eval", "save"};
_Static_assert(sizeof how_names / sizeof how_names[0] == CUT_HOW_COUNT, "one name per cut_how");

/* Ends the process at once, as a crash or the OOM killer would. */
static void die_now(void) {
    (void)fflush(NULL);
    (void)raise(SIGKILL);
}

/* Sends the process a SIGTERM, as a scheduler would, and waits until the signal thread has
 * taken it (signals.c), so that the stop falls at the end of this very step. */
static void terminate_gracefully(void) {
    (void)kill(getpid(), SIGTERM);
    for (int i = 0; i < 10000 && !cli_signal(); i++) {
        struct timespec ms = {0, 1000000};
        (void)nanosleep(&ms, NULL);
    }
}

static ct_status cut_iteration_start(void *user, ct_trainer *t, int64_t batch) {
    session *s = user;
    cli_cut *c = &s->cut;
    if (c->next.on_iteration_start) CT_TRY(c->next.on_iteration_start(c->next.user, t, batch));
    int64_t step = ct_trainer_step(t) + 1; /* the step this micro-batch is part of */
    c->in_window = step == c->window_step ? c->in_window + 1 : 0;
    c->window_step = step;
    if (step != c->step) return CT_OK;
    int64_t middle = s->accum_steps / 2;
    if (c->how == CUT_WINDOW && c->in_window == (middle > 0 ? middle : 1)) die_now();
    if (c->how == CUT_TERM && c->in_window == 0) terminate_gracefully();
    return CT_OK;
}

static ct_status
cut_eval_end(void *user, ct_trainer *t, const char *key, const ct_metric_value *v, int64_t n) {
    session *s = user;
    cli_cut *c = &s->cut;
    if (c->next.on_eval_end) CT_TRY(c->next.on_eval_end(c->next.user, t, key, v, n));
    if (c->how == CUT_EVAL && ct_trainer_step(t) == c->step) die_now();
    return CT_OK;
}

static ct_status cut_save_file(void *user, ct_trainer *t, const char *file) {
    session *s = user;
    cli_cut *c = &s->cut;
    if (c->next.on_save_file) CT_TRY(c->next.on_save_file(c->next.user, t, file));
    if (c->how == CUT_SAVE && ct_trainer_step(t) == c->step) die_now();
    return CT_OK;
}

/* Reads HOW@STEP[:RANK]: true when it is one. */
static bool parse_cut(const char *text, cli_cut *c) {
    const char *at = strchr(text, '@');
    if (!at) return false;
    for (int h = CUT_NONE + 1; h < CUT_HOW_COUNT; h++)
        if (strlen(how_names[h]) == (size_t)(at - text) &&
            strncmp(text, how_names[h], (size_t)(at - text)) == 0)
            c->how = (cut_how)h;
    char *end = NULL;
    long long step = strtoll(at + 1, &end, 10);
    if (c->how == CUT_NONE || end == at + 1 || step < 1) return false;
    c->step = step;
    c->rank = -1;
    if (*end == ':') {
        const char *r = end + 1;
        long long rank = strtoll(r, &end, 10);
        if (end == r || rank < 0) return false;
        c->rank = rank;
    }
    return *end == '\0';
}

int cli_cut_callbacks(session *s, ct_trainer_callbacks *cb) {
    const char *text = getenv("CTRAIN_VERIFY_CUT");
    cli_cut *c = &s->cut;
    memset(c, 0, sizeof *c);
    if (!text || !text[0]) return 0;
    if (!parse_cut(text, c)) {
        (void)fprintf(stderr,
                      "ctrain: error: CTRAIN_VERIFY_CUT='%s': expected HOW@STEP[:RANK], HOW "
                      "one of window, term, eval, save, STEP >= 1 (a hook of ctrain "
                      "verify-resume)\n",
                      text);
        return EXIT_USAGE;
    }
    if (c->rank >= 0 && c->rank != s->rank) { /* another rank's cut */
        c->how = CUT_NONE;
        return 0;
    }
    c->window_step = -1;
    c->next = *cb;
    cb->on_iteration_start = cut_iteration_start;
    cb->on_eval_end = cut_eval_end;
    cb->on_save_file = cut_save_file;
    return 0;
}

const char *cli_cut_name(cut_how how) {
    return (unsigned)how < CUT_HOW_COUNT ? how_names[how] : "";
}
