/*
 * verify.c - the verify-resume command: trains an experiment N steps straight, then the same
 * N steps interrupted K times at adversarial points (SIGKILL mid accumulation window, SIGTERM
 * at the last step of an epoch, SIGKILL right after an evaluation, SIGKILL inside a checkpoint
 * write, SIGTERM mid-epoch) and resumed each time, and compares the two runs' checkpoints and
 * records (verify_compare.c). Both runs are fits of this same binary in a scratch directory,
 * their output captured; the interruptions are made by the fits themselves at exact points
 * (CTRAIN_VERIFY_CUT, verify_cut.c).
 *
 * With --ranks R each fit is an MPI job of R ranks started through a launcher (verify_launch.c),
 * and each cut is made by one rank, the ranks taking turns, or by every rank; the launcher ends
 * the job when a rank is killed. Run itself under an MPI launcher it refuses: it is the one
 * that launches. Ownership: the command frees what it allocates and removes the scratch
 * directory it made, unless --keep.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"

extern char **environ;

#define VR_PATH  4096
#define VR_OWN   9 /* the overrides verify-resume adds to the user's */
#define MAX_CUTS 64

enum { AT_EPOCH_END = 1, AT_EVAL = 2, AT_SAVE = 4 };

/* The kinds of cut, in the order a plan takes them. */
typedef enum cut_kind { K_WINDOW, K_EPOCH, K_EVAL, K_SAVE, K_TERM, K_COUNT } cut_kind;
static const cut_how kind_how[] = {CUT_WINDOW, CUT_TERM, CUT_EVAL, CUT_SAVE, CUT_TERM};
static const char *const kind_text[] = {
    "SIGKILL mid accumulation window", "SIGTERM at the last step of an epoch",
    "SIGKILL right after an evaluation", "SIGKILL during a checkpoint write",
    "SIGTERM (graceful stop)"};
_Static_assert(sizeof kind_how / sizeof kind_how[0] == K_COUNT, "one how per kind");
_Static_assert(sizeof kind_text / sizeof kind_text[0] == K_COUNT, "one text per kind");

typedef struct verify_args {
    const char *config;
    char **overrides;
    int n_overrides;
    long long steps, cuts, ranks;
    const char *dir, *launcher;
    bool keep, help;
} verify_args;

typedef struct verify_run {
    verify_args a;
    char dir[VR_PATH], straight[VR_PATH + 16], resumed[VR_PATH + 16];
    bool made_dir;
    int64_t accum, n;  /* accumulation window, and the steps the straight run made */
    unsigned char *at; /* per step 1..n: AT_EPOCH_END, AT_EVAL */
    int64_t *epoch;    /* per step 1..n: the epoch it was made in, from 1 */
    cut_kind kind[MAX_CUTS];
    int64_t step[MAX_CUTS];
    int64_t rank[MAX_CUTS]; /* the rank that makes cut i; -1: every rank */
    cli_launcher launcher;  /* --ranks: what starts each fit (argc 0: the fit is this process) */
    char exe[VR_PATH];      /* this ctrain, for the launcher to start */
    int n_cuts;
    verify_segment seg[MAX_CUTS + 1]; /* seg[0] the first run, seg[i] the one after cut i */
    ct_ctx *ctx;
} verify_run;

/* A count option (--steps, --cuts) in [lo, hi]: 0, or the exit code once said. */
static int read_count(const char *opt, const char *text, long long lo, long long hi, long long *v) {
    char *end = NULL;
    errno = 0;
    *v = strtoll(text, &end, 10);
    if (end == text || *end || errno || *v < lo || *v > hi) {
        (void)fprintf(stderr,
                      "ctrain verify-resume: --%s: expected a whole number in [%lld, %lld], got "
                      "'%s'\n",
                      opt, lo, hi, text);
        return EXIT_USAGE;
    }
    return 0;
}

/* Parses the arguments into a (ov: argc + 1 slots for the overrides): -1 to go on, or the exit
 * code (0 after --help). */
static int read_args(int argc, char **argv, verify_args *a, char **ov) {
    static const struct option opts[] = {
        {"steps", required_argument, NULL, 'n'},    {"cuts", required_argument, NULL, 'k'},
        {"dir", required_argument, NULL, 'd'},      {"keep", no_argument, NULL, 'K'},
        {"help", no_argument, NULL, 'h'},           {"ranks", required_argument, NULL, 'r'},
        {"launcher", required_argument, NULL, 'l'}, {NULL, 0, NULL, 0}};
    memset(a, 0, sizeof *a);
    a->overrides = ov;
    a->steps = 40;
    a->cuts = 5;
    a->ranks = 1;
    optind = 1;
    opterr = 0;
    int c, rc = 0;
    while (rc == 0 && (c = getopt_long(argc, argv, "-h", opts, NULL)) != -1) {
        if (c == 1 && !a->config)
            a->config = optarg;
        else if (c == 1)
            a->overrides[a->n_overrides++] = optarg;
        else if (c == 'n')
            rc = read_count("steps", optarg, 2, 1000000, &a->steps);
        else if (c == 'k')
            rc = read_count("cuts", optarg, 1, MAX_CUTS, &a->cuts);
        else if (c == 'r')
            rc = read_count("ranks", optarg, 1, 4096, &a->ranks);
        else if (c == 'l')
            a->launcher = optarg;
        else if (c == 'd')
            a->dir = optarg;
        else if (c == 'K')
            a->keep = true;
        else if (c == 'h')
            a->help = true;
        else {
            (void)fprintf(stderr, "ctrain verify-resume: unknown option '%s'\n", argv[optind - 1]);
            rc = EXIT_USAGE;
        }
    }
    if (rc) return rc;
    if (a->help) {
        cli_cmd_usage(stdout, "verify-resume");
        return 0;
    }
    if (!a->config || a->cuts >= a->steps || (a->launcher && a->ranks < 2)) {
        (void)fprintf(stderr, "ctrain verify-resume: %s\n",
                      !a->config            ? "missing CONFIG"
                      : a->cuts >= a->steps ? "--cuts must be less than --steps"
                                            : "--launcher needs --ranks R, R of at least 2");
        cli_cmd_usage(stderr, "verify-resume");
        return EXIT_USAGE;
    }
    return -1;
}

/* Checks the configuration as fit would (same messages, exit 2) and reads the accumulation
 * window: 0, or the exit code once said. */
static int check_config(verify_run *r) {
    if (ct_comm_launched()) {
        (void)fprintf(stderr,
                      "ctrain verify-resume: started by an MPI launcher, as one of several "
                      "processes; run it as one process and give the ranks with --ranks R: it "
                      "starts each fit as an MPI job of R ranks itself (docs/cli.md)\n");
        return EXIT_USAGE;
    }
    ct_config *cfg = NULL;
    ct_status st = cli_load_config(r->ctx, r->a.config, r->a.overrides, r->a.n_overrides, &cfg);
    if (st != CT_OK) return cli_fail(r->ctx, cli_setup_code(st));
    r->accum = atoll(ct_config_find(ct_config_root(cfg), "trainer.accum_steps")->value);
    ct_config_destroy(cfg);
    return 0;
}

/* With --ranks R: the launcher of the fits, and this ctrain's path for it (the fits' own
 * /proc/self/exe is the launcher's). 0, or the exit code once said. */
static int find_launcher(verify_run *r) {
    if (r->a.ranks == 1) return 0;
    ssize_t len = readlink("/proc/self/exe", r->exe, sizeof r->exe - 1);
    if (len <= 0) {
        (void)fprintf(stderr, "ctrain verify-resume: /proc/self/exe: cannot be read: %s\n",
                      strerror(errno));
        return EXIT_RUN_FAILED;
    }
    r->exe[len] = '\0';
    return cli_launcher_init(&r->launcher, r->a.launcher, r->a.ranks);
}

/* Makes the scratch directory: --dir (new, or empty), else a new one in $TMPDIR or /tmp. 0, or
 * the exit code once said. */
static int make_scratch(verify_run *r) {
    if (r->a.dir) {
        (void)snprintf(r->dir, sizeof r->dir, "%s", r->a.dir);
        r->made_dir = mkdir(r->dir, 0777) == 0;
        DIR *d = r->made_dir ? NULL : opendir(r->dir);
        struct dirent *de;
        int entries = 0;
        while (d && (de = readdir(d)) != NULL)
            entries += strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0;
        if (d) (void)closedir(d);
        if (!r->made_dir && (!d || entries > 0)) {
            (void)fprintf(stderr, "ctrain verify-resume: --dir %s: %s\n", r->dir,
                          d ? "not empty: verify-resume writes two runs there"
                            : "cannot be created or opened");
            return EXIT_USAGE;
        }
    } else {
        const char *tmp = getenv("TMPDIR");
        (void)snprintf(r->dir, sizeof r->dir, "%s/ctrain-verify-XXXXXX",
                       tmp && tmp[0] ? tmp : "/tmp");
        r->made_dir = mkdtemp(r->dir) != NULL;
        if (!r->made_dir) {
            (void)fprintf(stderr, "ctrain verify-resume: %s: cannot be created: %s\n", r->dir,
                          strerror(errno));
            return EXIT_RUN_FAILED;
        }
    }
    (void)snprintf(r->straight, sizeof r->straight, "%s/straight", r->dir);
    (void)snprintf(r->resumed, sizeof r->resumed, "%s/resumed", r->dir);
    return 0;
}

/* Removes path and what it holds (the scratch runs: plain files and directories). */
static void remove_tree(const char *path) {
    struct stat st;
    if (lstat(path, &st) != 0) return;
    DIR *d = S_ISDIR(st.st_mode) ? opendir(path) : NULL;
    struct dirent *de;
    while (d && (de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) continue;
        char sub[VR_PATH + 300];
        (void)snprintf(sub, sizeof sub, "%s/%s", path, de->d_name);
        remove_tree(sub);
    }
    if (d) (void)closedir(d);
    (void)remove(path);
}

/* The environment of a fit: this one without CTRAIN_VERIFY_CUT, plus cut when given. NULL
 * when out of memory; free() it (the strings are borrowed). */
static char **child_env(char *cut) {
    size_t n = 0;
    while (environ[n])
        n++;
    char **env = calloc(n + 2, sizeof *env);
    if (!env) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "CTRAIN_VERIFY_CUT=", 18) != 0) env[k++] = environ[i];
    if (cut) env[k++] = cut;
    return env;
}

/* Runs `ctrain fit` on the experiment into out (this binary, the user's overrides and ours),
 * its output appended to out.log, with the cut point how@step made by rank (-1: every rank;
 * CUT_NONE: no cut); with --ranks, as a job of the launcher. The wait status (the launcher's),
 * or -1 when it could not start. */
static int run_fit(const verify_run *r, const char *out, cut_how how, int64_t step, int64_t rank) {
    char own[VR_OWN][VR_PATH + 64], log[VR_PATH + 32], cut[96], prog[] = "ctrain", fit[] = "fit";
    (void)snprintf(own[0], sizeof own[0], "++output_dir=%s", out);
    (void)snprintf(own[1], sizeof own[1], "++trainer.max_steps=%lld", (long long)r->a.steps);
    (void)snprintf(own[2], sizeof own[2], "++trainer.steps_per_loop=1");
    (void)snprintf(own[3], sizeof own[3], "++trainer.dev_run=false");
    (void)snprintf(own[4], sizeof own[4], "++checkpoint.enabled=true");
    (void)snprintf(own[5], sizeof own[5], "++checkpoint.save_every_steps=1");
    (void)snprintf(own[6], sizeof own[6], "++checkpoint.keep=0");
    (void)snprintf(own[7], sizeof own[7], "++logging.progress=none");
    (void)snprintf(own[8], sizeof own[8], "++logging.report=none");
    (void)snprintf(log, sizeof log, "%s.log", out);
    int at =
        snprintf(cut, sizeof cut, "CTRAIN_VERIFY_CUT=%s@%lld", cli_cut_name(how), (long long)step);
    if (rank >= 0 && at > 0 && (size_t)at < sizeof cut)
        (void)snprintf(cut + at, sizeof cut - (size_t)at, ":%lld", (long long)rank);
    const cli_launcher *l = &r->launcher;
    char **argv = calloc((size_t)r->a.n_overrides + (size_t)l->argc + VR_OWN + 5, sizeof *argv);
    char **env = child_env(how == CUT_NONE ? NULL : cut);
    int status = -1, k = 0;
    pid_t pid;
    posix_spawn_file_actions_t fa;
    if (argv && env && posix_spawn_file_actions_init(&fa) == 0) {
        for (int i = 0; i < l->argc; i++)
            argv[k++] = l->argv[i];
        argv[k++] = l->argc ? (char *)(uintptr_t)r->exe : prog;
        argv[k++] = fit;
        argv[k++] = (char *)(uintptr_t)r->a.config;
        for (int i = 0; i < r->a.n_overrides; i++)
            argv[k++] = r->a.overrides[i];
        for (int i = 0; i < VR_OWN; i++)
            argv[k++] = own[i];
        (void)posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
        (void)posix_spawn_file_actions_addopen(&fa, 1, log, O_WRONLY | O_CREAT | O_APPEND, 0666);
        (void)posix_spawn_file_actions_adddup2(&fa, 1, 2);
        int e = l->argc ? posix_spawnp(&pid, l->argv[0], &fa, NULL, argv, env)
                        : posix_spawn(&pid, "/proc/self/exe", &fa, NULL, argv, env);
        if (e == 0 && waitpid(pid, &status, 0) != pid) status = -1;
        (void)posix_spawn_file_actions_destroy(&fa);
    }
    free(argv);
    free(env);
    return status;
}

/* Prints the last lines of a fit's output (stderr), indented. */
static void show_tail(const char *log, int lines) {
    FILE *f = fopen(log, "r");
    if (!f) return;
    char *text = NULL;
    size_t cap = 0;
    ssize_t len = getdelim(&text, &cap, '\0', f);
    (void)fclose(f);
    if (len > 0) {
        const char *p = text + len;
        for (int seen = 0; p > text && seen <= lines; p--)
            seen += p[-1] == '\n';
        (void)fprintf(stderr, "%s%s", p == text ? "" : "...\n", p == text ? p : p + 1);
    }
    free(text);
}

/* What a wait status says, for a message. */
static const char *status_text(int status, char *buf, size_t size) {
    if (status == -1)
        (void)snprintf(buf, size, "could not be started");
    else if (WIFSIGNALED(status))
        (void)snprintf(buf, size, "was killed by signal %d", WTERMSIG(status));
    else
        (void)snprintf(buf, size, "exited %d", WEXITSTATUS(status));
    return buf;
}

/* Trains the N steps straight: 0, or the exit code once said (a configuration or data error
 * as fit says it, exit 2). */
static int run_straight(verify_run *r) {
    (void)fprintf(stderr, "ctrain verify-resume: %lld steps straight, in %s\n",
                  (long long)r->a.steps, r->dir);
    if (r->launcher.argc) {
        (void)fprintf(stderr,
                      "ctrain verify-resume: each fit an MPI job of %lld ranks:", r->a.ranks);
        for (int i = 0; i < r->launcher.argc; i++)
            (void)fprintf(stderr, " %s", r->launcher.argv[i]);
        (void)fprintf(stderr, " %s fit ...\n", r->exe);
    }
    int status = run_fit(r, r->straight, CUT_NONE, 0, -1);
    if (status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0) return 0;
    char log[VR_PATH + 32], how[64];
    (void)snprintf(log, sizeof log, "%s.log", r->straight);
    bool usage = status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == EXIT_USAGE;
    if (!usage)
        (void)fprintf(stderr, "ctrain verify-resume: the straight run %s:\n",
                      status_text(status, how, sizeof how));
    show_tail(log, usage ? 20 : 8);
    return usage ? EXIT_USAGE : EXIT_RUN_FAILED;
}

/* Reads the straight run's records: the steps it made, the last step of each epoch and the
 * steps with an evaluation. 0, or the exit code once said. */
static int read_straight(verify_run *r) {
    char path[VR_PATH + 32];
    (void)snprintf(path, sizeof path, "%s/metrics.jsonl", r->straight);
    FILE *f = fopen(path, "r");
    size_t slots = (size_t)r->a.steps + 2;
    r->at = calloc(slots, 1);
    r->epoch = calloc(slots, sizeof *r->epoch);
    char *line = NULL;
    size_t cap = 0;
    while (f && r->at && r->epoch && getline(&line, &cap, f) > 0) {
        json_t *rec = json_loads(line, 0, NULL);
        int64_t step = json_integer_value(json_object_get(rec, "step"));
        const char *key;
        json_t *v;
        if (step >= 1 && step <= r->a.steps) {
            if (step > r->n) r->n = step;
            json_object_foreach(rec, key, v) {
                if (strncmp(key, "train/", 6) == 0)
                    r->epoch[step] = json_integer_value(json_object_get(rec, "epoch"));
                else if (strchr(key, '/'))
                    r->at[step] |= AT_EVAL;
            }
        }
        json_decref(rec);
    }
    free(line);
    if (f) (void)fclose(f);
    /* the next step with a record: under local SGD records wait for the weights' averages */
    for (int64_t s = 1, next; r->epoch && s < r->n; s = next) {
        for (next = s + 1; next < r->n && r->epoch[next] == 0;)
            next++;
        if (r->epoch[s] > 0 && r->epoch[next] > r->epoch[s]) r->at[s] |= AT_EPOCH_END;
    }
    /* the steps with a checkpoint: every step, but under local SGD only the averages */
    for (int64_t s = 1; r->at && s <= r->n; s++) {
        char ck[VR_PATH + 64];
        struct stat sb;
        (void)snprintf(ck, sizeof ck, "%s/checkpoints/step-%08lld", r->straight, (long long)s);
        if (stat(ck, &sb) == 0) r->at[s] |= AT_SAVE;
    }
    if (r->n < 2 || !r->at || !r->epoch) {
        (void)fprintf(stderr, "ctrain verify-resume: %s: %s\n", path,
                      r->n < 2 ? "the straight run made fewer than 2 steps: nothing to cut"
                               : "cannot be read");
        return r->n < 2 ? EXIT_USAGE : EXIT_RUN_FAILED;
    }
    return 0;
}

/* Where a graceful stop asked for during step s takes effect: at the end of the first step
 * from s on with a checkpoint in the straight run (s itself, but under local SGD the next
 * average); r->n when none. */
static int64_t stop_step(const verify_run *r, int64_t s) {
    while (s < r->n && !(r->at[s] & AT_SAVE))
        s++;
    return s;
}

/* Whether step s can take a cut of kind k. */
static bool suits(const verify_run *r, cut_kind k, int64_t s) {
    if (k == K_WINDOW) return !(r->at[s] & AT_EPOCH_END); /* an epoch's last window may be short */
    if (k == K_EPOCH) return r->at[s] & AT_EPOCH_END;
    if (k == K_EVAL) return r->at[s] & AT_EVAL;
    if (k == K_SAVE) return r->at[s] & AT_SAVE;
    if (k == K_TERM) return stop_step(r, s) < r->n; /* a stop before the run's end */
    return true;
}

/* The step in [lo, hi] nearest to target that suits k; -1 when none does. */
static int64_t pick(const verify_run *r, cut_kind k, int64_t target, int64_t lo, int64_t hi) {
    for (int64_t d = 0; d <= hi - lo; d++) {
        if (target - d >= lo && suits(r, k, target - d)) return target - d;
        if (target + d <= hi && suits(r, k, target + d)) return target + d;
    }
    return -1;
}

/* Chooses the cuts: the kinds this run has, in turn, at steps spread over the run, each the
 * nearest step that suits its kind (else a checkpoint-write kill at the nearest step with a
 * checkpoint, else a SIGTERM; fewer cuts when none fits). */
static void plan(verify_run *r) {
    cut_kind avail[K_COUNT];
    int na = 0;
    if (r->accum > 1) avail[na++] = K_WINDOW;
    if (pick(r, K_EPOCH, 1, 1, r->n - 1) > 0) avail[na++] = K_EPOCH;
    if (pick(r, K_EVAL, 1, 1, r->n - 1) > 0) avail[na++] = K_EVAL;
    avail[na++] = K_SAVE;
    avail[na++] = K_TERM;
    r->n_cuts = (int)(r->a.cuts < r->n - 1 ? r->a.cuts : r->n - 1);
    int64_t ranks = r->a.ranks;
    int64_t prev = 0;
    for (int i = 0; i < r->n_cuts; i++) {
        cut_kind k = avail[i % na];
        int64_t lo = prev + 1, hi = r->n - 1 - (r->n_cuts - 1 - i);
        int64_t target = (int64_t)(i + 1) * r->n / (r->n_cuts + 1);
        target = target < lo ? lo : target > hi ? hi : target;
        int64_t s = lo <= hi ? pick(r, k, target, lo, hi) : -1;
        if (s < 0 && lo <= hi) k = K_SAVE, s = pick(r, K_SAVE, target, lo, hi);
        if (s < 0 && lo <= hi) k = K_TERM, s = pick(r, K_TERM, target, lo, hi);
        if (s < 0) { /* no room for more (local SGD's checkpoints are only at averages) */
            r->n_cuts = i;
            break;
        }
        r->kind[i] = k;
        r->step[i] = s;
        prev = kind_how[k] == CUT_TERM ? stop_step(r, s) : s; /* the next cut comes after */
        /* the ranks in turn, the last first (not the one that writes), then every rank at once;
           only rank 0 writes a checkpoint, so only it can be cut inside one */
        int64_t turn = i % (ranks + 1);
        r->rank[i] = ranks == 1 ? -1 : k == K_SAVE ? 0 : turn < ranks ? ranks - 1 - turn : -1;
    }
}

/* The step of the checkpoint `latest` names in run (0: none yet): where the next fit resumes
 * (a damaged one would make it fall back, which the comparison then shows). */
static int64_t latest_step(const char *run) {
    char path[VR_PATH + 32];
    int w = snprintf(path, sizeof path, "%s/checkpoints/latest", run);
    FILE *f = w > 0 && (size_t)w < sizeof path ? fopen(path, "r") : NULL;
    long long step = 0;
    if (f && fscanf(f, "step-%lld", &step) != 1) step = 0;
    if (f) (void)fclose(f);
    return step;
}

/* Whether fit i of the interrupted run ended as its cut makes it end: killed, stopped by
 * SIGTERM (exit 143), or for the last one, done. A job of several ranks with one killed is
 * ended by its launcher, with a code of the launcher's: there the fit must have failed with
 * the last checkpoint the straight run's last one before the cut's step (the step before it,
 * but under local SGD the last average), or that step's own (the ranks not killed may finish
 * it before the launcher ends them). */
static bool ended_as_planned(const verify_run *r, int i, int status) {
    if (status == -1) return false;
    if (i == r->n_cuts) return WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (kind_how[r->kind[i]] == CUT_TERM)
        return WIFEXITED(status) && WEXITSTATUS(status) == EXIT_SIGTERM;
    if (!r->launcher.argc) return WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
    int64_t latest = latest_step(r->resumed), before = r->step[i] - 1;
    while (before > 0 && !(r->at[before] & AT_SAVE))
        before--;
    return !(WIFEXITED(status) && WEXITSTATUS(status) == 0) && latest >= before &&
           latest <= r->step[i];
}

/* Which rank makes cut i, for the messages and the table: "" for one process. */
static const char *rank_text(const verify_run *r, int i, char *buf, size_t size) {
    if (r->a.ranks == 1)
        buf[0] = '\0';
    else if (r->rank[i] < 0)
        (void)snprintf(buf, size, " on every rank");
    else
        (void)snprintf(buf, size, " on rank %lld", (long long)r->rank[i]);
    return buf;
}

/* The same steps, cut at each planned point and resumed: false when a fit did not end as
 * planned (said in its segment's result). */
static bool run_interrupted(verify_run *r) {
    char log[VR_PATH + 32], how[64], on[32];
    (void)snprintf(log, sizeof log, "%s.log", r->resumed);
    for (int i = 0; i <= r->n_cuts; i++) {
        r->seg[i].from = latest_step(r->resumed);
        if (i > 0) r->seg[i - 1].to = r->seg[i].from;
        if (i < r->n_cuts)
            (void)fprintf(stderr, "ctrain verify-resume: cut %d of %d at step %lld: %s%s\n", i + 1,
                          r->n_cuts, (long long)r->step[i], kind_text[r->kind[i]],
                          rank_text(r, i, on, sizeof on));
        cut_how h = i < r->n_cuts ? kind_how[r->kind[i]] : CUT_NONE;
        int status = run_fit(r, r->resumed, h, i < r->n_cuts ? r->step[i] : 0,
                             i < r->n_cuts ? r->rank[i] : -1);
        if (!ended_as_planned(r, i, status)) {
            r->seg[i].differs = true;
            (void)snprintf(r->seg[i].result, sizeof r->seg[i].result,
                           "failed: the fit %s%s (%.300s)", status_text(status, how, sizeof how),
                           i < r->n_cuts ? " before its cut" : "", log);
            for (int j = i + 1; j <= r->n_cuts; j++)
                (void)snprintf(r->seg[j].result, sizeof r->seg[j].result, "not run");
            show_tail(log, 8);
            return false;
        }
    }
    r->seg[r->n_cuts].to = r->n;
    return true;
}

/* The table: one row per segment of the interrupted run, the cut that began it and what the
 * comparison found there. */
static void print_table(const verify_run *r) {
    int width = r->a.ranks > 1 ? 55 : 40;
    (void)printf("%4s %7s  %-*s %-15s %s\n", "cut", "step", width, "how", "steps compared",
                 "result");
    for (int i = 0; i <= r->n_cuts; i++) {
        char cut[16] = "-", step[24] = "-", how[96], steps[48], on[32];
        const verify_segment *g = &r->seg[i];
        if (i == 0) (void)snprintf(how, sizeof how, "none: the first fit");
        if (i > 0) {
            cut_kind k = r->kind[i - 1];
            (void)snprintf(cut, sizeof cut, "%d", i);
            (void)snprintf(step, sizeof step, "%lld", (long long)r->step[i - 1]);
            if (k == K_EPOCH)
                (void)snprintf(how, sizeof how, "SIGTERM at the last step of epoch %lld%s",
                               (long long)r->epoch[r->step[i - 1]],
                               rank_text(r, i - 1, on, sizeof on));
            else
                (void)snprintf(how, sizeof how, "%s%s", kind_text[k],
                               rank_text(r, i - 1, on, sizeof on));
        }
        if (g->to > g->from)
            (void)snprintf(steps, sizeof steps, "%lld-%lld", (long long)g->from + 1,
                           (long long)g->to);
        else
            (void)snprintf(steps, sizeof steps, "-");
        (void)printf("%4s %7s  %-*s %-15s %s\n", cut, step, width, how, steps, g->result);
    }
}

/* Runs both trainings and compares them: the exit code. */
static int verify(verify_run *r) {
    int rc = check_config(r);
    if (rc == 0) rc = find_launcher(r);
    if (rc == 0) rc = make_scratch(r);
    if (rc) return rc;
    rc = run_straight(r);
    if (rc == 0) rc = read_straight(r);
    if (rc == 0) {
        plan(r);
        bool ran = run_interrupted(r);
        int differ = ran ? cli_verify_compare(r->straight, r->resumed, r->seg, r->n_cuts + 1) : 1;
        print_table(r);
        (void)printf("%s: %lld steps, %d cut%s: %s\n", r->a.config, (long long)r->n, r->n_cuts,
                     r->n_cuts == 1 ? "" : "s",
                     differ ? "resuming does NOT reproduce the straight run"
                            : "every checkpoint file and metrics record equals the straight "
                              "run's");
        rc = differ ? EXIT_RUN_FAILED : 0;
    }
    if (r->a.keep)
        (void)fprintf(stderr, "ctrain verify-resume: the runs are kept in %s\n", r->dir);
    else if (r->made_dir)
        remove_tree(r->dir);
    else {
        char log[VR_PATH + 32];
        const char *runs[] = {r->straight, r->resumed};
        for (int i = 0; i < 2; i++) {
            remove_tree(runs[i]);
            (void)snprintf(log, sizeof log, "%s.log", runs[i]);
            remove_tree(log);
        }
    }
    return rc;
}

int cli_cmd_verify_resume(int argc, char **argv) {
    char **ov = calloc((size_t)argc + 1, sizeof(char *));
    verify_run *r = calloc(1, sizeof *r);
    if (!ov || !r) {
        free(ov);
        free(r);
        return EXIT_RUN_FAILED;
    }
    int rc = read_args(argc, argv, &r->a, ov);
    session s;
    if (rc < 0) rc = cli_open_session(&s, &r->ctx);
    if (rc == 0 && r->ctx) {
        rc = verify(r);
        ct_ctx_destroy(r->ctx);
    }
    cli_launcher_fini(&r->launcher);
    free(r->at);
    free(r->epoch);
    free(r);
    free(ov);
    return rc;
}
