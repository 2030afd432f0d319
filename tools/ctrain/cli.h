/*
 * cli.h - what the files of the ctrain command-line tool share: the exit codes of docs/cli.md,
 * the session (the context's log, log.txt and the progress display), the parsed arguments and
 * each file's entry points. The files: main.c (dispatch), args.c (usage texts and option
 * parsing), signals.c (the stop signals), session.c (messages, log.txt, errors, loading a
 * configuration), progress.c (the progress display and the trainer's callbacks), fit.c, eval.c
 * (eval, predict, config), report.c, inspect.c and diff.c (one command each), completion.c
 * (completion scripts, man page), verify.c (verify-resume: its runs and table), verify_compare.c
 * (its comparisons), verify_cut.c (the cut points of its runs), verify_launch.c (its MPI
 * launcher) and preempt.c (fit's preemption signal and Slurm requeue).
 * follow.c carries eval --follow, the continuous evaluator; omp_wait.c sets how long OpenMP's
 * idle threads spin.
 *
 * A session belongs to the command that opened it; its log file, communicator and context are
 * closed by that command. The only process-wide state is signals.c's signal flag.
 */
#ifndef CT_CLI_H
#define CT_CLI_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "ctrain/config.h"
#include "ctrain/dist.h"
#include "ctrain/experiment.h"
#include "ctrain/status.h"

enum {
    EXIT_RUN_FAILED = 1,
    EXIT_USAGE = 2,
    EXIT_SIGHUP = 129,
    EXIT_SIGINT = 130,
    EXIT_SIGTERM = 143
};

/* ---- the stop signals (signals.c) ---- */

/* The stop signal that came (SIGINT, SIGTERM, SIGHUP), or 0. */
int cli_signal(void);
/* A report stops once a signal has come (ct_report_params.cancelled); user is unused. */
bool cli_signalled(void *user);
/* Installs the handler of the stop signals: the first one is noted, a second one (not SIGHUP)
 * ends the process. SIGHUP is left ignored when it was (`nohup`). */
void cli_catch_stop_signals(void);
/* The exit code of a stop by the signal that came (0: none), and its name. */
int cli_stop_code(void);
const char *cli_stop_name(void);
/* Leaves the stop signals to a thread of their own; call before any other thread starts. */
void cli_route_signals(void);
/* Makes writes to a pipe or socket on stdout and stderr non-blocking (an MPI launcher's). */
void cli_never_block_on_the_launcher(void);
/* Installs the stop handler for the preemption signal sig too (SIGUSR1, SIGUSR2; others: no
 * change). A second preemption signal is not a second stop. */
void cli_catch_preempt_signal(int sig);
/* Ignores every stop signal from now on (the stop is done; what is left is to exit). */
void cli_ignore_stop_signals(void);

/* ---- the session (session.c, progress.c) ---- */

typedef enum progress_mode { PROGRESS_BAR, PROGRESS_PLAIN, PROGRESS_NONE } progress_mode;

/* Where verify-resume interrupts a fit it runs (CTRAIN_VERIFY_CUT=HOW@STEP, verify_cut.c). */
typedef enum cut_how { CUT_NONE, CUT_WINDOW, CUT_TERM, CUT_EVAL, CUT_SAVE, CUT_HOW_COUNT } cut_how;
typedef struct cli_cut {
    cut_how how;
    int64_t step;                   /* the step during which it strikes */
    int64_t rank;                   /* the rank that strikes (HOW@STEP:RANK); -1: every rank */
    int64_t window_step, in_window; /* the step the micro-batches begun belong to, and how many */
    ct_trainer_callbacks next;      /* the session's own handlers, called first */
} cli_cut;

typedef struct session {
    ct_ctx *ctx;
    FILE *log_file;
    int log_errno;       /* a write of log.txt failed with it: the run ends at the next event */
    char log_path[1100]; /* opened at fit start: a refused run directory gets nothing */
    char pending[4096];  /* lines said before that, written when it opens */
    size_t n_pending;
    bool quiet;  /* info messages only into log.txt */
    bool silent; /* a rank other than 0 of a distributed run: errors only, no log.txt */
    int64_t rank, world;
    ct_comm *comm;       /* NULL: one process */
    char rank_map[1024]; /* "0 pid 123 on node1, 1 pid 124 on node1": rank 0 prints it */
    int64_t hosts;       /* MPI's shared-memory domains (cli_gather_rank_map) */
    progress_mode progress;
    double interval, interval_seconds;
    /* the current bar */
    char split[32];
    double t_last, frac_last;
    bool bar_open;
    /* training's rate: batches done since train_done0 (-1: the next batch sets it) over the
       seconds since train_t0 less those spent from an evaluation's or a checkpoint's start to
       the next training batch (paused; pause_from > 0 while that lasts); an evaluation's own
       rate counts from eval_t0 */
    double train_t0, paused, pause_from, eval_t0;
    int64_t train_done0;
    double train_frac_last; /* the last plain line of training, apart from evaluations' */
    double loss_sum;
    int64_t loss_n;
    double lr;
    bool have_lr; /* lr is known from the first training record on */
    int64_t batch_size, eval_batch_size;
    int64_t max_epochs, max_steps, accum_steps;
    ct_experiment *exp;
    cli_cut cut;
    int preempt_signal; /* trainer.preempt_signal: SIGUSR1, SIGUSR2, SIGTERM, or 0 (none) */
    int requeue;        /* trainer.requeue: REQUEUE_FALSE, _TRUE, _AUTO */
} session;

/* Clears s and creates the context *ctx, logging through s: 0, or the exit code once said. */
int cli_open_session(session *s, ct_ctx **ctx);
/* Writes a line to log.txt, or keeps it until the file is open. */
void cli_to_log(session *s, const char *prefix, const char *line);
/* The run's status as far as log.txt is concerned. */
ct_status cli_log_status(const session *s);
/* Ends the progress bar's line, if one is open. */
void cli_close_bar(session *s);
/* Fills s->rank_map with every rank's pid and host (a collective: every rank calls it). */
ct_status cli_gather_rank_map(session *s);
/* A line for the terminal (stderr) and log.txt. */
void cli_say(session *s, const char *fmt, ...) CT_PRINTF(2, 3);
/* The context's last error as users see it: without ctrain's source locations, unless
 * CTRAIN_DEBUG is set. */
const char *cli_error_text(const ct_ctx *ctx, char *buf, size_t size);
/* Says the context's last error on stderr and returns code. */
int cli_fail(ct_ctx *ctx, int code);
/* cli_fail for one rank of a distributed run, which then ends the whole job. */
int cli_rank_fail(const session *s, ct_ctx *ctx, int code);
/* Exit code for a failure while setting up (reading the configuration and the data). */
int cli_setup_code(ct_status s);
/* Loads CONFIG (an experiment file or a run directory), applies the overrides, resolves it. */
ct_status cli_load_config(ct_ctx *ctx, const char *path, char **overrides, int n, ct_config **out);

/* Reads the progress settings and batch sizes of a resolved configuration into s. */
void cli_apply_logging(session *s, const ct_config *cfg);
/* Points the trainer's callbacks at s: the progress display, log.txt, the stop signals. */
void cli_session_callbacks(session *s, ct_trainer_callbacks *cb);
/* Adds the cut point CTRAIN_VERIFY_CUT names, if set, to the callbacks (verify_cut.c): 0, or
 * the exit code once the error is said. */
int cli_cut_callbacks(session *s, ct_trainer_callbacks *cb);
/* A cut's name in CTRAIN_VERIFY_CUT ("window", "term", ...). */
const char *cli_cut_name(cut_how how);

/* verify-resume's comparison (verify_compare.c): the straight run's files against the
 * interrupted run's, each difference charged to the segment (from, to] of steps that the
 * interrupted run made between two resumes; result says the segment's first differing
 * checkpoint file and its first differing record. */
typedef struct verify_segment {
    int64_t from, to;
    bool differs;
    char file[400], record[400]; /* the first differences found, "" for none */
    char result[820];
} verify_segment;
/* Fills the segments' results: the number of segments that differ. */
int cli_verify_compare(const char *straight, const char *resumed, verify_segment *seg, int n);

/* verify-resume --ranks R (verify_launch.c): the launcher's words that start each fit as an MPI
 * job of R ranks, this ctrain's path and the fit's arguments following them. */
typedef struct cli_launcher {
    char **argv; /* argc words, NULL-ended */
    int argc;
    char *text; /* the words' storage */
} cli_launcher;
/* From the --launcher template (NULL: mpirun on PATH, with Open MPI's flags when it is Open
 * MPI): 0, or the exit code once said. */
int cli_launcher_init(cli_launcher *l, const char *tmpl, long long ranks);
void cli_launcher_fini(cli_launcher *l);

/* ---- preemption and requeue (preempt.c) ---- */

enum { REQUEUE_FALSE, REQUEUE_TRUE, REQUEUE_AUTO };
/* fit's exit code after a preemption whose job was requeued: EX_TEMPFAIL, "try again later" */
enum { EXIT_REQUEUED = 75 };
/* Reads trainer.preempt_signal and trainer.requeue of a resolved configuration into s. */
void cli_read_preemption(session *s, const ct_config *cfg);
/* After a fit that ended cleanly with exit code rc: whether a rank stopped for the preemption
 * signal (a collective in a job of several ranks: every rank calls it), and then on rank 0 the
 * requeue, said on stderr and in log.txt. The exit code: EXIT_REQUEUED once requeued, else rc. */
int cli_after_preemption(session *s, int rc);
/* The path of the executable name found on $PATH into buf: true when found (verify_launch.c). */
bool cli_find_on_path(const char *name, char *buf, size_t size);

/* ---- the arguments (args.c) ---- */

/* The shared options of fit/eval/predict/config: CONFIG and overrides after the flags. */
typedef struct cmd_args {
    const char *config;
    char **overrides;
    int n_overrides;
    const char *checkpoint;
    const char *input, *output;
    const char *prompt; /* predict on a language model: sample after this text */
    long long tokens, top_k, seed;
    double temperature;
    bool json, reference, help, restart;
    char profile[32]; /* fit --profile[=layers]: the trainer.profile override it adds */
    bool logits;      /* predict: a classifier's raw scores instead of probabilities */
    bool no_ema;      /* eval, predict: a checkpoint's trained weights, not its EMA weights */
    /* predict on a language model (gen.c) */
    const char *prompts_file; /* one prompt per line, continued side by side */
    double top_p;             /* nucleus mass in (0, 1] */
    const char *stop[16];     /* --stop, repeatable */
    int n_stop;
    bool no_cache; /* recompute each window instead of the key/value cache */

    bool follow;       /* eval --follow: score each checkpoint as a fit saves it (follow.c) */
    double timeout;    /* eval --follow --timeout: seconds without a new checkpoint; -1 none */
    const char *split; /* eval --split: the evaluation splits to score, comma-separated */
} cmd_args;

/* Parses a command's arguments into a; ov (argc + 1 slots) receives the overrides. 0, or the
 * exit code once the error is said. */
int cli_parse_args(const char *cmd, int argc, char **argv, cmd_args *a, char **ov);
/* The tool's help, a command's help, and the bundled examples. */
void cli_usage(FILE *f);
void cli_cmd_usage(FILE *f, const char *cmd);
void cli_list_examples(FILE *f);

/* predict --prompt / --prompts-file (gen.c): prints each prompt and its continuation, a line
 * each; the exit code. `weights` says which weights were loaded, for the closing message. */
int cli_generate(ct_ctx *ctx, ct_experiment *e, const cmd_args *a, const char *weights);

/* ---- the commands (fit.c, eval.c, report.c, inspect.c): each returns its exit code ---- */

int cli_cmd_fit(int argc, char **argv);
int cli_cmd_eval(int argc, char **argv);
int cli_cmd_predict(int argc, char **argv);
int cli_cmd_config(int argc, char **argv);
int cli_cmd_report(int argc, char **argv);
int cli_cmd_inspect(int argc, char **argv);
/* diff.c: two checkpoints compared tensor by tensor and key by key */
int cli_cmd_diff(int argc, char **argv);
/* completion.c: the shell completion scripts and the man page, from the same tables as --help */
int cli_cmd_completion(int argc, char **argv);
int cli_cmd_man(int argc, char **argv);
/* verify.c: train twice, straight and interrupted, and compare */
int cli_cmd_verify_resume(int argc, char **argv);
/* export.c: the model as an ONNX file (or its weights as safetensors) */
int cli_cmd_export(int argc, char **argv);
void cli_export_usage(FILE *f);
/* Loads the weights `*which` names (best, latest, a checkpoint's path, FILE.safetensors) as
 * eval and predict do (eval.c): 0, or the exit code once the reason is said. */
int cli_load_weights(ct_ctx *ctx,
                     ct_experiment *e,
                     const char **which,
                     bool ema,
                     int64_t *step,
                     ct_weights_kind *kind);
/* replay.c: an incident bundle's step made again and compared with the bundle */
int cli_cmd_replay(int argc, char **argv);

/* follow.c: eval --follow, the continuous evaluator of the run e was opened on (read-only):
 * returns the exit code. */
int cli_follow(ct_ctx *ctx, const ct_config *cfg, ct_experiment *e, const cmd_args *a);
/* The evaluation splits to score: every engine of e, or those `want` names (comma-separated;
 * NULL: all), at most cap of them into out[0..*n). 0, or EXIT_USAGE once an unknown name is
 * said with the valid ones. */
int cli_choose_splits(ct_experiment *e, const char *want, const char **out, int cap, int *n);

/* Whether the run's pointer file checkpoints/NAME is there, readable or not (eval.c). */
bool cli_pointer_exists(const char *run, const char *name);

/* ---- OpenMP's waiting threads (omp_wait.c) ---- */

/* For the commands that train or evaluate (and --version), executes the tool again with
 * GOMP_SPINCOUNT set, once, unless the environment sets OMP_WAIT_POLICY, GOMP_SPINCOUNT or
 * CTRAIN_OMP_REEXEC; returns when it does not (nor could). argc, argv: main's. Call it first
 * in main, before any thread starts. */
void cli_omp_wait_setup(int argc, char **argv);
/* The `OpenMP wait:` line of --version: the setting the run's threads have, and from where. */
void cli_omp_wait_print(FILE *f);

#endif /* CT_CLI_H */
