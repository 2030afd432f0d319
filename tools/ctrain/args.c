/*
 * args.c - the ctrain tool's usage texts (the tool's and each command's), the bundled examples
 * it lists, and the options that fit, eval, predict and config share.
 *
 * Ownership: parsed arguments point into argv; nothing here allocates.
 */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

#ifndef CT_EXAMPLES_DIR
#define CT_EXAMPLES_DIR "examples"
#endif

void cli_usage(FILE *f) {
    (void)fprintf(
        f, "usage: ctrain COMMAND [options]\n"
           "\n"
           "commands:\n"
           "  fit CONFIG [--restart] [--profile[=layers]] [key=value ...]\n"
           "                                  train (resumes the run directory's latest "
           "checkpoint)\n"
           "  eval CONFIG [--checkpoint best|latest|PATH|FILE.safetensors] [--no-ema] [--json]\n"
           "       [key=value ...]\n"
           "                                  evaluate a checkpoint on every evaluation "
           "dataset\n"
           "  eval RUN --follow [--timeout S] [--split valid,test] [--no-ema] [--json]\n"
           "                                  evaluate each checkpoint as a running fit saves "
           "it\n"
           "  predict CONFIG --input X.npy --output OUT.csv|.npy|- [--logits] [--checkpoint ...]\n"
           "                                  write the model's predictions for X\n"
           "  config CONFIG [key=value ...]   check a configuration and print it resolved\n"
           "  config --reference              print every key (docs/config.md)\n"
           "  inspect PATH                    describe and verify a run directory or "
           "checkpoint\n"
           "  diff A B [--tolerance T] [--all] [--json]\n"
           "                                  compare two checkpoints, runs or safetensors "
           "files\n"
           "  report RUN_DIR... [--output F.html] [--svg DIR] [--log]\n"
           "                                  a self-contained HTML report with plots;\n"
           "                                  several runs: one page comparing them\n"
           "  verify-resume CONFIG [--steps N] [--cuts K] [--dir D] [--keep] [--ranks R]\n"
           "                [--launcher CMD] [key=value ...]\n"
           "                                  check that resuming reproduces a straight run\n"
           "  export RUN|CHECKPOINT -o OUT [--format safetensors|onnx] [--dtype f32|bf16]\n"
           "       [--opset N] [--with-preprocessing] [--checkpoint ...]\n"
           "                                  write the model for other runtimes "
           "(docs/interop.md, docs/onnx.md)\n"
           "  replay RUN/incidents/step-N [--json]\n"
           "                                  make an incident's step again and check it "
           "reproduces\n"
           "  completion bash|zsh             print the shell completion script\n"
           "  man                             print the ctrain(1) man page (roff)\n"
           "\n"
           "overrides: key.path=value replaces, +key.path=value adds, ++key.path=value "
           "sets,\n"
           "           ~key.path deletes, ~key.path=value deletes that value only "
           "(Hydra's grammar);\n"
           "           values are YAML (lr=3e-4, hidden=[256,128])\n"
           "\n"
           "options: -V, --version   print the version;  -h, --help   this help "
           "(ctrain COMMAND --help for a command's)\n"
           "\n"
           "exit codes: 0 success, 1 the run failed (diff, verify-resume: a difference), 2 "
           "usage,\n"
           "            configuration or input error,\n"
           "            129, 130, 143 stopped by SIGHUP, SIGINT, SIGTERM (a checkpoint saved),\n"
           "            75 fit preempted (trainer.preempt_signal) and its Slurm job requeued\n"
           "\n"
           "environment: CTRAIN_DEBUG=1 adds ctrain's source locations to error "
           "messages\n");
}

/* The bundled example experiments: installed beside the binary (PREFIX/share/ctrain/examples),
 * else in the source tree it was built from. */
void cli_list_examples(FILE *f) {
    char dir[1100] = "";
    char exe[1024];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) *slash = '\0';
        (void)snprintf(dir, sizeof dir, "%s/../share/ctrain/examples", exe);
    }
    DIR *d = dir[0] ? opendir(dir) : NULL;
    if (!d) {
        (void)snprintf(dir, sizeof dir, "%s", CT_EXAMPLES_DIR);
        d = opendir(dir);
    }
    if (!d) return;
    (void)fprintf(f, "\nbundled examples:\n");
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        size_t len = strlen(de->d_name);
        if (len > 5 && strcmp(de->d_name + len - 5, ".yaml") == 0)
            (void)fprintf(f, "  ctrain fit %s/%s\n", dir, de->d_name);
    }
    (void)closedir(d);
}

/* A number option: a whole one >= 0 (--tokens, --top-k, --seed) or any one >= 0 (--temperature).
 * 0, or the exit code once the error is said. */
static int read_number(const char *cmd, int c, const char *text, cmd_args *a) {
    char *end = NULL;
    errno = 0;
    double v = strtod(text, &end);
    if (end == text || *end || errno || !(v >= 0) || (c != 't' && v != floor(v))) {
        (void)fprintf(stderr, "ctrain %s: --%s: expected a %s number >= 0, got '%s'\n", cmd,
                      c == 'n'   ? "tokens"
                      : c == 'k' ? "top-k"
                      : c == 's' ? "seed"
                                 : "temperature",
                      c == 't' ? "decimal" : "whole", text);
        return EXIT_USAGE;
    }
    if (c == 'n') a->tokens = (long long)v;
    if (c == 'k') a->top_k = (long long)v;
    if (c == 's') a->seed = (long long)v;
    if (c == 't') a->temperature = v;
    return 0;
}

/* Takes one result of getopt_long: an operand (1: CONFIG, then overrides) or an option. 0, or
 * the exit code once the error is said. */
static int take_option(const char *cmd, int c, char **argv, cmd_args *a) {
    switch (c) {
    case 1:
        if (!a->config)
            a->config = optarg;
        else
            a->overrides[a->n_overrides++] = optarg;
        return 0;
    case 'c':
        a->checkpoint = optarg;
        return 0;
    case 'j':
        a->json = true;
        return 0;
    case 'i':
        a->input = optarg;
        return 0;
    case 'o':
        a->output = optarg;
        return 0;
    case 'p':
        a->prompt = optarg;
        return 0;
    case 'n':
    case 'k':
    case 's':
    case 't':
        return read_number(cmd, c, optarg, a);
    case 'L':
        a->logits = true;
        return 0;
    case 'F':
        a->prompts_file = optarg;
        return 0;
    case 'N':
        a->no_cache = true;
        return 0;
    case 'S':
        if (a->n_stop == (int)(sizeof a->stop / sizeof a->stop[0]) || !optarg[0]) {
            (void)fprintf(stderr, "ctrain %s: --stop: expected 1 to 16 non-empty strings\n", cmd);
            return EXIT_USAGE;
        }
        a->stop[a->n_stop++] = optarg;
        return 0;
    case 'T': {
        char *end = NULL;
        errno = 0;
        a->top_p = strtod(optarg, &end);
        if (end == optarg || *end || errno || !(a->top_p > 0 && a->top_p <= 1)) {
            (void)fprintf(stderr, "ctrain %s: --top-p: expected a number in (0, 1], got '%s'\n",
                          cmd, optarg);
            return EXIT_USAGE;
        }
        return 0;
    }
    case 'E':
        a->no_ema = true;
        return 0;
    case 'R':
        a->restart = true;
        return 0;
    case 'P': /* trainer.profile, as an override after CONFIG's file */
        if (optarg && strcmp(optarg, "layers") != 0) {
            (void)fprintf(stderr, "ctrain %s: --profile: expected no value or =layers, got '%s'\n",
                          cmd, optarg);
            return EXIT_USAGE;
        }
        (void)snprintf(a->profile, sizeof a->profile, "trainer.profile=%s",
                       optarg ? "layers" : "true");
        a->overrides[a->n_overrides++] = a->profile;
        return 0;
    case 'r':
        a->reference = true;
        return 0;
    case 'h':
        a->help = true;
        return 0;
    case 'W':
        a->follow = true;
        return 0;
    case 'Y':
        a->split = optarg;
        return 0;
    case 'X': {
        char *end = NULL;
        errno = 0;
        a->timeout = strtod(optarg, &end);
        if (end == optarg || *end || errno || !(a->timeout >= 0) || isinf(a->timeout)) {
            (void)fprintf(stderr, "ctrain %s: --timeout: expected seconds >= 0, got '%s'\n", cmd,
                          optarg);
            return EXIT_USAGE;
        }
        return 0;
    }
    default:
        (void)fprintf(stderr, "ctrain %s: unknown option '%s'\n", cmd, argv[optind - 1]);
        return EXIT_USAGE;
    }
}

/* Refuses an option of another command: 0, or the exit code once said. */
static int check_command_options(const char *cmd, const cmd_args *a) {
    bool loads = strcmp(cmd, "eval") == 0 || strcmp(cmd, "predict") == 0;
    if ((!loads && (strcmp(a->checkpoint, "best") != 0 || a->no_ema)) ||
        (a->json && strcmp(cmd, "eval") != 0)) {
        (void)fprintf(stderr,
                      "ctrain %s: --checkpoint and --no-ema are options of eval and predict, "
                      "--json of eval\n",
                      cmd);
        return EXIT_USAGE;
    }
    if ((a->restart || a->profile[0]) && strcmp(cmd, "fit") != 0) {
        (void)fprintf(stderr, "ctrain %s: --restart and --profile are options of fit\n", cmd);
        return EXIT_USAGE;
    }
    if ((a->input || a->output || a->prompt || a->logits) && strcmp(cmd, "predict") != 0) {
        (void)fprintf(stderr, "ctrain %s: --input, --output and --logits are options of predict\n",
                      cmd);
        return EXIT_USAGE;
    }
    if ((a->prompts_file || a->n_stop || a->no_cache || a->top_p != 1.0) &&
        strcmp(cmd, "predict") != 0) {
        (void)fprintf(stderr,
                      "ctrain %s: --prompts-file, --top-p, --stop and --no-cache are options of "
                      "predict\n",
                      cmd);
        return EXIT_USAGE;
    }
    if (a->prompt && a->prompts_file) {
        (void)fprintf(stderr, "ctrain %s: --prompt or --prompts-file, not both\n", cmd);
        return EXIT_USAGE;
    }
    if (a->logits && a->prompts_file) {
        (void)fprintf(
            stderr, "ctrain %s: --logits is for predictions of --input, not --prompts-file\n", cmd);
        return EXIT_USAGE;
    }
    if (a->logits && a->prompt) {
        (void)fprintf(stderr, "ctrain %s: --logits is for predictions of --input, not --prompt\n",
                      cmd);
        return EXIT_USAGE;
    }
    if ((a->follow || a->timeout >= 0 || a->split) && strcmp(cmd, "eval") != 0) {
        (void)fprintf(stderr, "ctrain %s: --follow, --timeout and --split are options of eval\n",
                      cmd);
        return EXIT_USAGE;
    }
    if ((a->timeout >= 0 && !a->follow) || (a->follow && strcmp(a->checkpoint, "best") != 0)) {
        (void)fprintf(stderr,
                      "ctrain %s: --timeout goes with --follow, which scores every "
                      "checkpoint and takes no --checkpoint\n",
                      cmd);
        return EXIT_USAGE;
    }
    if (a->reference && strcmp(cmd, "config") != 0) {
        (void)fprintf(stderr, "ctrain %s: --reference is an option of config\n", cmd);
        return EXIT_USAGE;
    }
    return 0;
}

int cli_parse_args(const char *cmd, int argc, char **argv, cmd_args *a, char **ov) {
    memset(a, 0, sizeof *a);
    a->overrides = ov;
    a->tokens = 200;
    a->temperature = 0.8;
    a->top_k = 40;
    a->top_p = 1.0;
    a->checkpoint = "best";
    a->timeout = -1;
    static const struct option opts[] = {
        {"checkpoint", required_argument, NULL, 'c'},
        {"json", no_argument, NULL, 'j'},
        {"logits", no_argument, NULL, 'L'},
        {"no-ema", no_argument, NULL, 'E'},
        {"reference", no_argument, NULL, 'r'},
        {"restart", no_argument, NULL, 'R'},
        {"profile", optional_argument, NULL, 'P'},
        {"help", no_argument, NULL, 'h'},
        {"input", required_argument, NULL, 'i'},
        {"output", required_argument, NULL, 'o'},
        {"prompt", required_argument, NULL, 'p'},
        {"tokens", required_argument, NULL, 'n'},
        {"temperature", required_argument, NULL, 't'},
        {"top-k", required_argument, NULL, 'k'},
        {"seed", required_argument, NULL, 's'},
        {"prompts-file", required_argument, NULL, 'F'},
        {"top-p", required_argument, NULL, 'T'},
        {"stop", required_argument, NULL, 'S'},
        {"no-cache", no_argument, NULL, 'N'},
        {"follow", no_argument, NULL, 'W'},
        {"timeout", required_argument, NULL, 'X'},
        {"split", required_argument, NULL, 'Y'},
        {NULL, 0, NULL, 0},
    };
    optind = 1;
    opterr = 0;
    int c;
    /* '+' would stop at the first operand; permuting lets flags follow CONFIG, and a leading
       '-' keeps operands ("~key" deletions) in order */
    while ((c = getopt_long(argc, argv, "-h", opts, NULL)) != -1) {
        int rc = take_option(cmd, c, argv, a);
        if (rc) return rc;
    }
    return check_command_options(cmd, a);
}

void cli_cmd_usage(FILE *f, const char *cmd) {
    if (strcmp(cmd, "fit") == 0)
        (void)fprintf(
            f, "usage: ctrain fit CONFIG [--restart] [--profile[=layers]] [key=value ...]\n\n"
               "Trains the experiment CONFIG describes, in its output_dir (default "
               "runs/<name>):\nconfig.yaml, metrics.jsonl, log.txt and checkpoints/. A "
               "run directory that holds\ncheckpoints of the same configuration is "
               "resumed from its latest one; of another\nconfiguration, refused (exit "
               "2). SIGINT, SIGTERM or SIGHUP stop at the end of the step,\nsave a "
               "checkpoint and exit 130, 143 or 129. One fit at a time holds a run\n"
               "directory; a folder of other files is refused.\n--restart renames an "
               "existing run directory to NAME.old-DATE-TIME and starts over.\n"
               "--profile measures where each step's time goes (data, forward, "
               "backward, comm,\noptimizer, eval, checkpoint, logging, overhead): a "
               "table at the end and\nRUN/profile.json; =layers adds each layer's "
               "forward and backward time.\n");
    else if (strcmp(cmd, "eval") == 0)
        (void)fprintf(f,
                      "usage: ctrain eval CONFIG [--checkpoint best|latest|PATH|FILE.safetensors] "
                      "[--no-ema]\n                   [--json] [key=value ...]\n\n"
                      "Loads a checkpoint of the run directory (default best, else latest), "
                      "or the model's\ntensors from a safetensors file (PyTorch's, say), and "
                      "runs every evaluation\ndataset once; prints the metrics (--json: one "
                      "JSON object). A run with trainer.ema\nis scored on its EMA weights, as "
                      "training was, unless --no-ema; stderr says which\nweights were scored. "
                      "Writes nothing.\n--split valid,test scores only those splits.\n\n"
                      "       ctrain eval RUN --follow [--timeout S] [--split ...] [--no-ema] "
                      "[--json]\n\n"
                      "The continuous evaluator: scores each checkpoint of RUN as a fit in "
                      "another process\nsaves it (inotify; CTRAIN_FOLLOW_POLL=SECONDS polls "
                      "instead), oldest first, and\nappends a record per checkpoint to "
                      "RUN/eval/metrics.jsonl (TensorBoard events in\nRUN/eval/ with "
                      "logging.tensorboard). Nothing the fit owns is written. Steps already\n"
                      "in RUN/eval/metrics.jsonl are not scored again; checkpoints deleted by "
                      "checkpoint.keep\nbefore they could be read are skipped with a note. "
                      "Ends when the run has finished\n(RUN/finished.json) and its kept "
                      "checkpoints are scored, or after S seconds without\na new checkpoint. "
                      "Exit 0 done, 1 a damaged checkpoint or a failed write, 2 usage.\n");
    else if (strcmp(cmd, "predict") == 0)
        (void)fprintf(f, "usage: ctrain predict CONFIG --input X.npy --output OUT.csv|OUT.npy|- "
                         "[--logits]\n                      [--checkpoint ...] [--no-ema] "
                         "[key=value ...]\n\n"
                         "Runs the model of a checkpoint (default best, else latest) over the "
                         "features in X.npy\n(N samples of the training data's shape) and writes "
                         "the class and class probabilities\n(classification; --logits: the raw "
                         "scores instead) or the values (regression) per\nsample. --output - "
                         "writes the CSV to stdout. Writes nothing into the run.\n\n"
                         "       ctrain predict CONFIG --prompt TEXT [--tokens N (200)] "
                         "[--temperature T (0.8)]\n                      [--top-k K (40)] "
                         "[--seed S (0)] [--checkpoint ...]\n\nWith --prompt (a byte-level "
                         "language model): prints TEXT and N sampled bytes;\n--temperature 0 "
                         "takes the likeliest byte each time (greedy decoding).\n"
                         "--prompts-file FILE continues each line of FILE (side by side), "
                         "printing a line\neach; --top-p P keeps the likeliest bytes "
                         "holding mass P (1); --stop TEXT\n(repeatable) ends a continuation "
                         "after TEXT; --no-cache recomputes the window\nfor each byte "
                         "instead of using the key/value cache.\n");
    else if (strcmp(cmd, "report") == 0)
        (void)fprintf(f, "usage: ctrain report RUN_DIR [RUN_DIR ...] [--output FILE.html] "
                         "[--svg DIR] [--log]\n\n"
                         "Writes one self-contained HTML page (inline SVG, no script) from the "
                         "run's\nmetrics.jsonl: the last value of each metric per split (test "
                         "included), curves\nper metric with a fixed colour per split, learning "
                         "rate, gradient norm,\nthroughput, the best checkpoint marked, confusion "
                         "matrices, the configuration.\nDefault output RUN_DIR/report.html; "
                         "--svg also writes each plot as DIR/NAME.svg;\n--log draws losses on a "
                         "log scale.\n\nWith several RUN_DIRs (up to 12): one page comparing "
                         "them: each metric's curves\noverlaid (a colour per run, a dash per "
                         "split), each run's last values and its\nvalues at its best evaluation "
                         "(by its checkpoint.monitor), and the configuration\nkeys that differ "
                         "between the runs. Default output report.html in the current\n"
                         "directory.\n");
    else if (strcmp(cmd, "config") == 0)
        (void)fprintf(f, "usage: ctrain config CONFIG [key=value ...]\n       ctrain config "
                         "--reference\n\nChecks CONFIG with the overrides (the schema, then each "
                         "component's keys,\nopening the data files) and prints the resolved "
                         "configuration as YAML\n(exit 0 when valid, 2 otherwise); --reference "
                         "prints every key as Markdown.\n");
    else if (strcmp(cmd, "completion") == 0)
        (void)fprintf(f, "usage: ctrain completion bash|zsh\n\nPrints the completion script "
                         "of the shell: commands, options, the configuration's\nkeys as "
                         "key= and their valid values. bash: source <(ctrain completion bash);\n"
                         "an installed ctrain has it in share/bash-completion/completions.\n");
    else if (strcmp(cmd, "verify-resume") == 0)
        (void)fprintf(
            f, "usage: ctrain verify-resume CONFIG [--steps N (40)] [--cuts K (5)] [--dir D] "
               "[--keep]\n                            [--ranks R [--launcher CMD]] [key=value "
               "...]\n\n"
               "Trains N steps of the experiment straight, then the same N steps "
               "interrupted K times\n(SIGKILL mid accumulation window, SIGTERM at "
               "an epoch's last step, SIGKILL right\nafter an evaluation, SIGKILL "
               "during a checkpoint write, SIGTERM) and resumed each\ntime, with a "
               "checkpoint every step; compares every checkpoint file byte for byte\n"
               "and metrics.jsonl record by record (wall-clock values left out) and "
               "prints a table.\nRuns in D (default a new directory in $TMPDIR or "
               "/tmp), removed at the end unless\n--keep. Exit 0 all identical, 1 a "
               "difference or a failed run, 2 a usage or\nconfiguration error. "
               "--ranks R: each fit an MPI job of R ranks, started by --launcher\n(default "
               "\"mpirun -np {R}\", plus Open MPI's options for root and for more ranks\n"
               "than cores), each cut made by one rank or by every rank; verify-resume itself "
               "is not\nrun under a launcher.\n");
    else if (strcmp(cmd, "replay") == 0)
        (void)fprintf(f, "usage: ctrain replay RUN/incidents/step-N [--json]\n\n"
                         "Makes the step of an incident bundle again: resumes the run's "
                         "checkpoint the\nbundle names (the last one saved before the step; "
                         "none: from the seed) in a\nscratch directory with the bundle's "
                         "config.yaml, trains to the step, and checks\nthat it comes out bit "
                         "for bit as recorded: the batch's samples, the loss, the\ndecision and "
                         "the statistics of every weight, gradient and layer output.\nNothing is "
                         "written into the run. --json prints one JSON object. Exit 0\n"
                         "reproduced, 1 a difference (the first one is said), 2 a usage error, "
                         "a path\nthat is not a bundle or a checkpoint that is gone.\n");
    else if (strcmp(cmd, "man") == 0)
        (void)fprintf(f, "usage: ctrain man\n\nPrints the ctrain(1) man page (roff), made "
                         "of these help texts: man <(ctrain man).\n");
    else if (strcmp(cmd, "diff") == 0)
        (void)fprintf(f, "usage: ctrain diff A B [--tolerance T] [--all] [--json]\n\n"
                         "Compares two checkpoints: A and B are each a run directory (its latest "
                         "checkpoint),\na checkpoint directory or a safetensors file (compared "
                         "as model.safetensors).\nLists each tensor that differs (by name: "
                         "dtype, shape, how many elements differ,\nthe largest absolute and "
                         "relative difference, the cosine similarity, the first\ndiffering "
                         "index and both values there), the optimizer's too, and each key of\n"
                         "state.json that differs with both values. Elements must be equal bit "
                         "for bit;\n--tolerance T counts |a - b| <= T as equal. --all lists "
                         "identical tensors too;\n--json prints one JSON document. Exit 0 "
                         "identical, 1 different, 2 a usage error or\na path that is not a run, "
                         "checkpoint or safetensors file.\n");
    else if (strcmp(cmd, "export") == 0)
        cli_export_usage(f);
    else
        (void)fprintf(f, "usage: ctrain inspect PATH\n\nDescribes a run directory (its "
                         "checkpoints, which verify, latest and best, the last\nmetrics) or one "
                         "checkpoint directory (step, epoch, files, tensors with shapes and\n"
                         "dtypes), verifying checksums; exit 1 when something is damaged.\n");
}
