/*
 * main.c - the ctrain command-line tool: fit, eval, predict, config and inspect over experiment
 * files (include/ctrain/experiment.h), with progress on stderr, a log.txt in the run directory, and
 * the exit codes of docs/cli.md:
 *     0 success; 1 the run failed (a non-finite stop included); 2 a usage, configuration or
 *     input error; 129 stopped by SIGHUP; 130 interrupted by SIGINT; 143 stopped by SIGTERM.
 *
 * The only process-wide state is the signal flag, which a signal handler must set.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "ctrain/checkpoint.h"
#include "ctrain/ctrain.h"
#include "ctrain/experiment.h"
#include "ctrain/report.h"

#ifndef CT_EXAMPLES_DIR
#define CT_EXAMPLES_DIR "examples"
#endif

enum {
    EXIT_RUN_FAILED = 1,
    EXIT_USAGE = 2,
    EXIT_SIGHUP = 129,
    EXIT_SIGINT = 130,
    EXIT_SIGTERM = 143
};

static volatile sig_atomic_t g_signal = 0;

static void on_signal(int sig) {
    /* a second one stops at once; not a second SIGHUP: a hang-up often comes twice (the shell
       passes it on to its jobs, and the kernel sends it when the session's leader exits) */
    if (g_signal && sig != SIGHUP) {
        signal(sig, SIG_DFL);
        raise(sig);
    }
    g_signal = sig;
}

/* A report stops once a signal has come (ct_report_params.cancelled). */
static bool signalled(void *user) {
    (void)user;
    return g_signal != 0;
}

/* The signals that stop a fit at the end of its step, with a checkpoint: SIGINT (Ctrl-C),
 * SIGTERM (kill, a scheduler's preemption) and SIGHUP (the terminal or the ssh session that
 * started it went away), each ending with its own exit code. */
static void stop_signals(sigset_t *set) {
    (void)sigemptyset(set);
    (void)sigaddset(set, SIGINT);
    (void)sigaddset(set, SIGTERM);
    (void)sigaddset(set, SIGHUP);
}

/* on_signal for each stop signal, except SIGHUP where it was ignored (`nohup ctrain fit ...`):
 * that run is meant to outlive its terminal. */
static void catch_stop_signals(void) {
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    (void)sigemptyset(&sa.sa_mask);
    (void)sigaction(SIGINT, &sa, NULL);
    (void)sigaction(SIGTERM, &sa, NULL);
    if (sigaction(SIGHUP, NULL, &old) == 0 && old.sa_handler != SIG_IGN)
        (void)sigaction(SIGHUP, &sa, NULL);
}

/* The exit code of a stop by the signal that came (0: none), and its name. */
static int stop_code(void) {
    return g_signal == SIGINT    ? EXIT_SIGINT
           : g_signal == SIGTERM ? EXIT_SIGTERM
           : g_signal == SIGHUP  ? EXIT_SIGHUP
                                 : 0;
}
static const char *stop_name(void) {
    return g_signal == SIGINT ? "SIGINT" : g_signal == SIGTERM ? "SIGTERM" : "SIGHUP";
}

/* The one thread that takes the stop signals during fit; it does nothing else. */
static void *signal_thread(void *arg) {
    (void)arg;
    sigset_t set;
    stop_signals(&set);
    (void)pthread_sigmask(SIG_UNBLOCK, &set, NULL);
    for (;;)
        (void)pause();
    return NULL;
}

/* oneDNN 2.6's JIT GEMM kernels point rsp into the heap while they run (oneDNN issue 4845,
 * fixed upstream in 2026): a signal handled on a thread inside one writes its frame there and
 * corrupts the heap (seen: about one SIGTERM in four right after an evaluation aborted in
 * free). So before fit starts any thread, the stop signals are blocked in this one (every
 * thread started later, OpenMP's, the loader's and MPI's, inherits the mask) and left to a
 * thread of their own. Until the handler is installed their default action still ends the
 * process. If that thread cannot start, signals are left as they were. OpenBLAS starts its
 * idle worker pool when it loads, before main (none with OPENBLAS_NUM_THREADS=1): those
 * workers can take the signals too, which is harmless, as they never run oneDNN code. */
static void route_signals(void) {
    sigset_t set, old;
    stop_signals(&set);
    if (pthread_sigmask(SIG_BLOCK, &set, &old) != 0) return;
    pthread_t th;
    if (pthread_create(&th, NULL, signal_thread, NULL) != 0) {
        (void)pthread_sigmask(SIG_SETMASK, &old, NULL);
        return;
    }
    (void)pthread_detach(th);
}

/* Under an MPI launcher the terminal output goes through a pipe (or socket) that the launcher
 * reads, and stops reading once it is told to end the job: Open MPI's mpirun, given SIGTERM,
 * waits a second, sends SIGTERM to the ranks and a second later SIGKILL. A rank blocked writing
 * progress into the full pipe would never get to its checkpoint. So those writes never block:
 * what the launcher does not take in time is dropped (log.txt has every line). */
static void never_block_on_the_launcher(void) {
    for (int fd = 1; fd <= 2; fd++) {
        struct stat st;
        int fl = fcntl(fd, F_GETFL);
        if (fstat(fd, &st) == 0 && (S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode)) && fl >= 0)
            (void)fcntl(fd, F_SETFL, fl | O_NONBLOCK);
    }
}

/* ---- the session: the context's log, log.txt and the progress display ---- */

typedef enum progress_mode { PROGRESS_BAR, PROGRESS_PLAIN, PROGRESS_NONE } progress_mode;

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
    progress_mode progress;
    double interval, interval_seconds;
    /* the current bar */
    char split[32];
    double t0, t_last, frac_last;
    bool bar_open;
    double loss_sum;
    int64_t loss_n;
    double lr;
    bool have_lr; /* lr is known from the first training record on */
    int64_t batch_size, eval_batch_size;
    int64_t max_epochs;
    ct_experiment *exp;
} session;

static double now_s(void) {
    struct timeval tv;
    (void)gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + (double)tv.tv_usec * 1e-6;
}

/* Writes a line to log.txt, or keeps it until the file is open. A failed write (a full disk, a
 * file size limit) closes the file and is reported as the run's error at the next event. */
static void to_log(session *s, const char *prefix, const char *line) {
    if (s->log_errno) return;
    if (s->log_file) {
        errno = 0;
        if (fprintf(s->log_file, "%s%s\n", prefix, line) < 0 || fflush(s->log_file) != 0) {
            s->log_errno = errno ? errno : EIO;
            (void)fclose(s->log_file);
            s->log_file = NULL;
        }
    } else if (s->log_path[0]) {
        int w = snprintf(s->pending + s->n_pending, sizeof s->pending - s->n_pending, "%s%s\n",
                         prefix, line);
        if (w > 0 && (size_t)w < sizeof s->pending - s->n_pending) s->n_pending += (size_t)w;
    }
}

/* The run's status as far as log.txt is concerned. */
static ct_status log_status(const session *s) {
    if (!s->log_errno) return CT_OK;
    return CT_FAIL(s->ctx, CT_ERR_IO, "%s: write failed: %s", s->log_path, strerror(s->log_errno));
}

static void close_bar(session *s) {
    if (s->bar_open) {
        (void)fputc('\n', stderr);
        s->bar_open = false;
    }
}

/*
 * Every rank's pid and host, gathered with one sum all-reduce (each rank fills its own row),
 * into s->rank_map for rank 0 to print at once (and into log.txt later): when a rank dies, MPICH's
 * launcher names the dead process by pid and host only, and this line says which rank that was. The
 * first MAP_RANKS ranks are listed.
 */
#define MAP_RANKS 16
#define MAP_HOST  31
static ct_status gather_rank_map(session *s) {
    enum { ROW = 1 + MAP_HOST };
    double rows[MAP_RANKS * ROW];
    memset(rows, 0, sizeof rows);
    if (s->rank < MAP_RANKS) {
        double *row = rows + s->rank * ROW;
        char host[MAP_HOST + 1];
        if (gethostname(host, sizeof host) != 0) (void)snprintf(host, sizeof host, "?");
        host[MAP_HOST] = '\0';
        row[0] = (double)getpid();
        for (int i = 0; i < MAP_HOST && host[i]; i++)
            row[1 + i] = (double)(unsigned char)host[i];
    }
    CT_TRY(ct_comm_allreduce_sum_f64(s->comm, rows, MAP_RANKS * ROW));
    size_t off = 0;
    int64_t shown = s->world < MAP_RANKS ? s->world : MAP_RANKS;
    for (int64_t r = 0; r < shown && off < sizeof s->rank_map; r++) {
        const double *row = rows + r * ROW;
        char host[MAP_HOST + 1];
        int n = 0;
        while (n < MAP_HOST && row[1 + n] > 0)
            host[n] = (char)row[1 + n], n++;
        host[n] = '\0';
        off +=
            (size_t)snprintf(s->rank_map + off, sizeof s->rank_map - off, "%s%lld pid %lld on %s",
                             r ? ", " : "", (long long)r, (long long)row[0], host);
    }
    if (s->world > shown && off < sizeof s->rank_map)
        (void)snprintf(s->rank_map + off, sizeof s->rank_map - off, ", ... (%lld ranks)",
                       (long long)s->world);
    return CT_OK;
}

/* A line for the terminal (stderr) and log.txt. */
static void say(session *s, const char *fmt, ...) CT_PRINTF(2, 3);
static void say(session *s, const char *fmt, ...) {
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    (void)vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (s->silent) return;
    close_bar(s);
    (void)fprintf(stderr, "%s\n", buf);
    to_log(s, "", buf);
}

/* Length of a library source location "name.c:123: " at p, or 0. */
static size_t source_prefix(const char *p) {
    size_t n = 0;
    while ((p[n] >= 'a' && p[n] <= 'z') || (p[n] >= 'A' && p[n] <= 'Z') ||
           (p[n] >= '0' && p[n] <= '9') || p[n] == '_' || p[n] == '-')
        n++;
    if (n == 0 || p[n] != '.' || (p[n + 1] != 'c' && p[n + 1] != 'h') || p[n + 2] != ':') return 0;
    size_t d = n + 3;
    while (p[d] >= '0' && p[d] <= '9')
        d++;
    return d > n + 3 && p[d] == ':' && p[d + 1] == ' ' ? d + 2 : 0;
}

/* A library message as users see it: without the "schema.c:289: " locations that CT_FAIL puts
 * at the front of each message (and ct_err_wrap then inside), which name ctrain's sources, not
 * the user's file. CTRAIN_DEBUG=1 keeps them, for a bug report. */
static const char *user_text(const char *msg, char *buf, size_t size) {
    const char *debug = getenv("CTRAIN_DEBUG");
    if ((debug && debug[0] && strcmp(debug, "0") != 0) || size == 0) return msg;
    size_t at = 0;
    for (const char *p = msg; *p && at + 1 < size;) {
        size_t skip = (p == msg || p[-1] == ' ') ? source_prefix(p) : 0;
        if (skip) {
            p += skip;
            continue;
        }
        buf[at++] = *p++;
    }
    buf[at] = '\0';
    return buf;
}

/* The context's last error as users see it (user_text). */
static const char *error_text(const ct_ctx *ctx, char *buf, size_t size) {
    return user_text(ct_last_error(ctx), buf, size);
}

static void log_fn(void *user, ct_log_level level, const char *msg) {
    session *s = user;
    char text[2048];
    msg = user_text(msg, text, sizeof text);
    static const char *const names[] = {"debug", "info", "warning", "error"};
    const char *name = (unsigned)level < CT_LOG_LEVEL_COUNT ? names[level] : "log";
    char prefix[16];
    (void)snprintf(prefix, sizeof prefix, "%s: ", name);
    if (s->silent) { /* rank 0 says what every rank would */
        if (level >= CT_LOG_ERROR)
            (void)fprintf(stderr, "ctrain: rank %lld of %lld: %s: %s\n", (long long)s->rank,
                          (long long)s->world, name, msg);
        return;
    }
    to_log(s, prefix, msg);
    if (level >= CT_LOG_WARN || !s->quiet) {
        close_bar(s);
        (void)fprintf(stderr, "ctrain: %s: %s\n", name, msg);
    }
}

static void fmt_duration(double sec, char *buf, size_t n) {
    if (!isfinite(sec) || sec < 0) sec = 0;
    long long t = (long long)(sec + 0.5);
    if (t >= 3600)
        (void)snprintf(buf, n, "%lld:%02lld:%02lld", t / 3600, t / 60 % 60, t % 60);
    else
        (void)snprintf(buf, n, "%lld:%02lld", t / 60, t % 60);
}

static ct_status
on_batch(void *user, ct_trainer *t, const char *split, int64_t done, int64_t total, double loss) {
    session *s = user;
    double now = now_s();
    if (strcmp(s->split, split) != 0 || done == 1) {
        close_bar(s);
        (void)snprintf(s->split, sizeof s->split, "%s", split);
        s->t0 = now;
        s->t_last = 0;
        s->frac_last = 0;
        s->loss_sum = 0;
        s->loss_n = 0;
    }
    if (isfinite(loss)) {
        s->loss_sum += loss;
        s->loss_n++;
    }
    CT_TRY(log_status(s));
    if (s->progress == PROGRESS_NONE) return g_signal ? CT_STOP : CT_OK;
    double frac = total > 0 ? (double)done / (double)total : 0;
    bool is_train = strcmp(split, "train") == 0;
    bool last = done >= total;
    /* plain lines: training every `interval` of an epoch or interval_seconds; evaluation,
       usually short, by time only */
    if (s->t_last == 0 && s->progress == PROGRESS_PLAIN) s->t_last = now;
    bool due = s->progress == PROGRESS_BAR
                   ? (now - s->t_last >= 0.1 || last)
                   : (now - s->t_last >= s->interval_seconds ||
                      (is_train && (frac - s->frac_last >= s->interval - 1e-12 || last)));
    if (!due) return g_signal ? CT_STOP : CT_OK;
    double el = now - s->t0;
    double rate =
        el > 0 ? (double)done * (double)(is_train ? s->batch_size : s->eval_batch_size) / el : 0;
    char eta[32];
    fmt_duration(done > 0 ? el * (double)(total - done) / (double)done : 0, eta, sizeof eta);
    char head[64];
    if (is_train && s->max_epochs)
        (void)snprintf(head, sizeof head, "train epoch %lld/%lld",
                       (long long)ct_trainer_epoch(t) + 1, (long long)s->max_epochs);
    else if (is_train)
        (void)snprintf(head, sizeof head, "train epoch %lld", (long long)ct_trainer_epoch(t) + 1);
    else
        (void)snprintf(head, sizeof head, "%s", split);
    char tail[96] = "";
    if (is_train && s->loss_n > 0 && s->have_lr)
        (void)snprintf(tail, sizeof tail, " loss %.4f lr %.3g", s->loss_sum / (double)s->loss_n,
                       s->lr);
    else if (is_train && s->loss_n > 0)
        (void)snprintf(tail, sizeof tail, " loss %.4f", s->loss_sum / (double)s->loss_n);
    if (s->progress == PROGRESS_BAR) {
        char bar[26];
        int filled = (int)(frac * 24);
        for (int i = 0; i < 24; i++)
            bar[i] = i < filled ? '=' : i == filled ? '>' : ' ';
        bar[24] = '\0';
        (void)fprintf(stderr, "\r\033[K%s [%s] %lld/%lld %.0f samples/s ETA %s%s", head, bar,
                      (long long)done, (long long)total, rate, eta, tail);
        (void)fflush(stderr);
        s->bar_open = true;
        if (last) close_bar(s);
    } else {
        (void)fprintf(stderr, "%s %lld/%lld (%.0f%%) %.0f samples/s ETA %s%s\n", head,
                      (long long)done, (long long)total, frac * 100, rate, eta, tail);
        s->frac_last = frac;
    }
    s->t_last = now;
    return g_signal ? CT_STOP : CT_OK; /* the trainer ends after this step's evaluations */
}

static ct_status on_log(void *user, ct_trainer *t, const ct_metric_value *v, int64_t n) {
    session *s = user;
    (void)t;
    for (int64_t i = 0; i < n; i++)
        if (strcmp(v[i].name, "train/lr") == 0) {
            s->lr = v[i].value;
            s->have_lr = true;
        }
    return log_status(s);
}

static ct_status
on_eval_end(void *user, ct_trainer *t, const char *key, const ct_metric_value *v, int64_t n) {
    session *s = user;
    char line[1024];
    size_t at = 0;
    at += (size_t)snprintf(line, sizeof line, "%s epoch %lld step %lld:", key,
                           (long long)ct_trainer_epoch(t), (long long)ct_trainer_step(t));
    for (int64_t i = 0; i < n && at < sizeof line; i++) {
        if (strstr(v[i].name, "/confusion/")) continue; /* counts: metrics.jsonl and report */
        const char *name = strchr(v[i].name, '/');
        at += (size_t)snprintf(line + at, sizeof line - at, " %s %.4f", name ? name + 1 : v[i].name,
                               v[i].value);
    }
    /* the monitor has not seen these values yet */
    const ct_monitor *m = ct_trainer_monitor(t);
    size_t kl = strlen(key);
    for (int64_t i = 0; m && i < n && at < sizeof line; i++) {
        if (strcmp(v[i].name, m->metric) != 0 || strncmp(m->metric, key, kl) != 0) continue;
        if (ct_monitor_is_better(m, v[i].value))
            (void)snprintf(line + at, sizeof line - at, " (new best %s)", m->metric);
        else
            (void)snprintf(line + at, sizeof line - at, " (best %s %.4f at step %lld)", m->metric,
                           m->state.best, (long long)m->state.best_step);
    }
    say(s, "%s", line);
    return log_status(s);
}

static ct_status on_fit_start(void *user, ct_trainer *t) {
    session *s = user;
    (void)t;
    if (s->log_path[0] && !s->log_file) {
        s->log_file = fopen(s->log_path, "a");
        if (!s->log_file)
            return CT_FAIL(s->ctx, CT_ERR_IO, "%s: cannot open: %s", s->log_path, strerror(errno));
        if (fwrite(s->pending, 1, s->n_pending, s->log_file) != s->n_pending ||
            fflush(s->log_file) != 0) {
            s->log_errno = errno ? errno : EIO;
            (void)fclose(s->log_file);
            s->log_file = NULL;
        }
        s->n_pending = 0;
    }
    return log_status(s);
}

static ct_status on_epoch_end(void *user, ct_trainer *t, int64_t epoch) {
    session *s = user;
    int64_t n;
    const ct_metric_value *v = ct_trainer_metrics(t, "train", &n);
    double loss = (double)NAN;
    for (int64_t i = 0; i < n; i++)
        if (strcmp(v[i].name, "train/loss") == 0) loss = v[i].value;
    if (s->log_file) {
        char line[128];
        (void)snprintf(line, sizeof line, "epoch %lld done: step %lld train/loss %.4f",
                       (long long)epoch, (long long)ct_trainer_step(t), loss);
        to_log(s, "", line);
    }
    return log_status(s);
}

/* ---- commands ---- */

static void usage(FILE *f) {
    (void)fprintf(
        f, "usage: ctrain COMMAND [options]\n"
           "\n"
           "commands:\n"
           "  fit CONFIG [--restart] [key=value ...]\n"
           "                                  train (resumes the run directory's latest "
           "checkpoint)\n"
           "  eval CONFIG [--checkpoint best|latest|PATH] [--json] [key=value ...]\n"
           "                                  evaluate a checkpoint on every evaluation "
           "dataset\n"
           "  predict CONFIG --input X.npy --output OUT.csv|.npy [--checkpoint ...]\n"
           "                                  write the model's predictions for X\n"
           "  config CONFIG [key=value ...]   check a configuration and print it resolved\n"
           "  config --reference              print every key (docs/config.md)\n"
           "  inspect PATH                    describe and verify a run directory or "
           "checkpoint\n"
           "  report RUN_DIR [--output F.html] [--svg DIR] [--log]\n"
           "                                  a self-contained HTML report with plots\n"
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
           "exit codes: 0 success, 1 the run failed, 2 usage, configuration or input "
           "error,\n"
           "            129, 130, 143 stopped by SIGHUP, SIGINT, SIGTERM (a checkpoint saved)\n"
           "\n"
           "environment: CTRAIN_DEBUG=1 adds ctrain's source locations to error "
           "messages\n");
}

/* The bundled example experiments: installed beside the binary (PREFIX/share/ctrain/examples),
 * else in the source tree it was built from. */
static void list_examples(FILE *f) {
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

/* Exit code for a failure while setting up (reading the configuration and the data). */
static int setup_code(ct_status s) {
    return s == CT_ERR_OOM || s == CT_ERR_INTERNAL || s == CT_ERR_DIST ? EXIT_RUN_FAILED
                                                                       : EXIT_USAGE;
}

static int fail(ct_ctx *ctx, int code) {
    char text[2048];
    (void)fprintf(stderr, "ctrain: error: %s\n", error_text(ctx, text, sizeof text));
    return code;
}

/* A failure of one rank of a distributed run: its message, naming the rank, and the end of
 * the whole job (the other ranks may be waiting for this one in a collective); for one
 * process, fail(). */
/*
 * An input error (exit code 2: the configuration, a data file) is, almost always, every rank's
 * at once (each read the same files, or they agreed on the same refusal): rank 0 reports it
 * and ends the job, and the other ranks wait for that rather than report it too. Several ranks
 * calling MPI_Abort together made MPICH's launcher kill one of them first and exit 9 instead of 2
 * about one time in three. A rank whose error rank 0 does not share ends the job itself after
 * RANK0_GRACE_S.
 */
#define RANK0_GRACE_S 15
static int rank_fail(const session *s, ct_ctx *ctx, int code) {
    if (s->world < 2) return fail(ctx, code);
    if (code == EXIT_USAGE && s->rank != 0)
        for (int i = 0; i < RANK0_GRACE_S * 10; i++) {
            struct timespec tick = {0, 100000000};
            (void)nanosleep(&tick, NULL);
        }
    char text[2048];
    (void)fprintf(stderr, "ctrain: error: rank %lld of %lld: %s\n", (long long)s->rank,
                  (long long)s->world, error_text(ctx, text, sizeof text));
    (void)fflush(stderr);
    ct_comm_abort(s->comm, code);
    return code;
}

/* Loads CONFIG (an experiment file, or a run directory: its config.yaml, with output_dir that
 * directory, wherever the run was made), applies the overrides and resolves it. */
static ct_status
load_config(ct_ctx *ctx, const char *path, char **overrides, int n, ct_config **out) {
    char run_config[4200], own_dir[4200] = "", cwd[4096];
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        if (path[0] == '/' || !getcwd(cwd, sizeof cwd))
            (void)snprintf(own_dir, sizeof own_dir, "%s", path);
        else
            (void)snprintf(own_dir, sizeof own_dir, "%s/%s", cwd, path);
        (void)snprintf(run_config, sizeof run_config, "%s/config.yaml", path);
        if (access(run_config, F_OK) != 0)
            return CT_FAIL(ctx, CT_ERR_IO,
                           "%s: a directory without config.yaml; expected an experiment file or "
                           "a run directory",
                           path);
        path = run_config;
    }
    ct_config *cfg = NULL;
    CT_TRY(ct_config_load_file(ctx, path, &cfg));
    /* set as text, not parsed as YAML, so any folder name is its own; absolute, as it was
       given from the current directory */
    ct_status s = own_dir[0] ? ct_config_set(cfg, "output_dir", own_dir, true) : CT_OK;
    for (int i = 0; s == CT_OK && i < n; i++)
        s = ct_experiment_override(cfg, overrides[i]);
    if (s == CT_OK) s = ct_experiment_resolve(ctx, cfg);
    if (s != CT_OK) {
        ct_config_destroy(cfg);
        return s;
    }
    *out = cfg;
    return CT_OK;
}

/* The shared options of fit/eval/config: CONFIG and overrides after the flags. */
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
} cmd_args;

static int parse_args(const char *cmd, int argc, char **argv, cmd_args *a, char **ov) {
    memset(a, 0, sizeof *a);
    a->overrides = ov;
    a->tokens = 200;
    a->temperature = 0.8;
    a->top_k = 40;
    a->checkpoint = "best";
    static const struct option opts[] = {
        {"checkpoint", required_argument, NULL, 'c'},
        {"json", no_argument, NULL, 'j'},
        {"reference", no_argument, NULL, 'r'},
        {"restart", no_argument, NULL, 'R'},
        {"help", no_argument, NULL, 'h'},
        {"input", required_argument, NULL, 'i'},
        {"output", required_argument, NULL, 'o'},
        {"prompt", required_argument, NULL, 'p'},
        {"tokens", required_argument, NULL, 'n'},
        {"temperature", required_argument, NULL, 't'},
        {"top-k", required_argument, NULL, 'k'},
        {"seed", required_argument, NULL, 's'},
        {NULL, 0, NULL, 0},
    };
    optind = 1;
    opterr = 0;
    int c;
    /* '+' would stop at the first operand; permuting lets flags follow CONFIG, and a leading
       '-' keeps operands ("~key" deletions) in order */
    while ((c = getopt_long(argc, argv, "-h", opts, NULL)) != -1) {
        switch (c) {
        case 1:
            if (!a->config)
                a->config = optarg;
            else
                a->overrides[a->n_overrides++] = optarg;
            break;
        case 'c':
            a->checkpoint = optarg;
            break;
        case 'j':
            a->json = true;
            break;
        case 'i':
            a->input = optarg;
            break;
        case 'o':
            a->output = optarg;
            break;
        case 'p':
            a->prompt = optarg;
            break;
        case 'n':
        case 'k':
        case 's':
        case 't': {
            char *end = NULL;
            errno = 0;
            double v = strtod(optarg, &end);
            if (end == optarg || *end || errno || !(v >= 0) || (c != 't' && v != floor(v))) {
                (void)fprintf(stderr, "ctrain %s: --%s: expected a %s number, got '%s'\n", cmd,
                              c == 'n'   ? "tokens"
                              : c == 'k' ? "top-k"
                              : c == 's' ? "seed"
                                         : "temperature",
                              c == 't' ? "positive" : "whole", optarg);
                return EXIT_USAGE;
            }
            if (c == 'n') a->tokens = (long long)v;
            if (c == 'k') a->top_k = (long long)v;
            if (c == 's') a->seed = (long long)v;
            if (c == 't') a->temperature = v;
            break;
        }
        case 'R':
            a->restart = true;
            break;
        case 'r':
            a->reference = true;
            break;
        case 'h':
            a->help = true;
            break;
        default:
            (void)fprintf(stderr, "ctrain %s: unknown option '%s'\n", cmd, argv[optind - 1]);
            return EXIT_USAGE;
        }
    }
    bool loads = strcmp(cmd, "eval") == 0 || strcmp(cmd, "predict") == 0;
    if ((!loads && strcmp(a->checkpoint, "best") != 0) || (a->json && strcmp(cmd, "eval") != 0)) {
        (void)fprintf(stderr,
                      "ctrain %s: --checkpoint is an option of eval and predict, --json "
                      "of eval\n",
                      cmd);
        return EXIT_USAGE;
    }
    if (a->restart && strcmp(cmd, "fit") != 0) {
        (void)fprintf(stderr, "ctrain %s: --restart is an option of fit\n", cmd);
        return EXIT_USAGE;
    }
    if ((a->input || a->output || a->prompt) && strcmp(cmd, "predict") != 0) {
        (void)fprintf(stderr, "ctrain %s: --input and --output are options of predict\n", cmd);
        return EXIT_USAGE;
    }
    if (a->reference && strcmp(cmd, "config") != 0) {
        (void)fprintf(stderr, "ctrain %s: --reference is an option of config\n", cmd);
        return EXIT_USAGE;
    }
    return 0;
}

static void cmd_usage(FILE *f, const char *cmd) {
    if (strcmp(cmd, "fit") == 0)
        (void)fprintf(f, "usage: ctrain fit CONFIG [--restart] [key=value ...]\n\n"
                         "Trains the experiment CONFIG describes, in its output_dir (default "
                         "runs/<name>):\nconfig.yaml, metrics.jsonl, log.txt and checkpoints/. A "
                         "run directory that holds\ncheckpoints of the same configuration is "
                         "resumed from its latest one; of another\nconfiguration, refused (exit "
                         "2). SIGINT, SIGTERM or SIGHUP stop at the end of the step,\nsave a "
                         "checkpoint and exit 130, 143 or 129. One fit at a time holds a run\n"
                         "directory; a folder of other files is refused.\n--restart renames an "
                         "existing run directory to NAME.old-DATE-TIME and starts over.\n");
    else if (strcmp(cmd, "eval") == 0)
        (void)fprintf(f, "usage: ctrain eval CONFIG [--checkpoint best|latest|PATH] [--json] "
                         "[key=value ...]\n\nLoads a checkpoint of the run directory (default "
                         "best, else latest) and runs every\nevaluation dataset once; prints the "
                         "metrics (--json: one JSON object). Writes nothing.\n");
    else if (strcmp(cmd, "predict") == 0)
        (void)fprintf(f,
                      "usage: ctrain predict CONFIG --input X.npy --output OUT.csv|OUT.npy "
                      "[--checkpoint best|latest|PATH]\n                      [key=value ...]\n\n"
                      "Runs the model of a checkpoint (default best, else latest) over the "
                      "features in X.npy\n(N samples of the training data's shape) and writes "
                      "the class and class probabilities\n(classification) or the values "
                      "(regression) per sample. Writes nothing into the run.\n\n"
                      "       ctrain predict CONFIG --prompt TEXT [--tokens N (200)] "
                      "[--temperature T (0.8)]\n                      [--top-k K (40)] "
                      "[--seed S (0)] [--checkpoint ...]\n\nWith --prompt (a byte-level "
                      "language model): prints TEXT and N sampled bytes.\n");
    else if (strcmp(cmd, "report") == 0)
        (void)fprintf(f, "usage: ctrain report RUN_DIR [--output FILE.html] [--svg DIR] [--log]\n\n"
                         "Writes one self-contained HTML page (inline SVG, no script) from the "
                         "run's\nmetrics.jsonl: curves per metric and split, learning rate, "
                         "gradient norm,\nthroughput, the best checkpoint marked, confusion "
                         "matrices, the configuration.\nDefault output RUN_DIR/report.html; "
                         "--svg also writes each plot as DIR/NAME.svg;\n--log draws losses on a "
                         "log scale.\n");
    else if (strcmp(cmd, "config") == 0)
        (void)fprintf(f, "usage: ctrain config CONFIG [key=value ...]\n       ctrain config "
                         "--reference\n\nChecks CONFIG with the overrides (the schema, then each "
                         "component's keys,\nopening the data files) and prints the resolved "
                         "configuration as YAML\n(exit 0 when valid, 2 otherwise); --reference "
                         "prints every key as Markdown.\n");
    else
        (void)fprintf(f, "usage: ctrain inspect PATH\n\nDescribes a run directory (its "
                         "checkpoints, which verify, latest and best, the last\nmetrics) or one "
                         "checkpoint directory (step, epoch, files, tensors with shapes and\n"
                         "dtypes), verifying checksums; exit 1 when something is damaged.\n");
}

static int open_session(session *s, ct_ctx **ctx) {
    memset(s, 0, sizeof *s);
    ct_ctx_params cp = ct_ctx_default_params();
    cp.log = log_fn;
    cp.log_user = s;
    if (ct_ctx_create(&cp, ctx) != CT_OK) {
        (void)fprintf(stderr, "ctrain: error: cannot create a context\n");
        return EXIT_RUN_FAILED;
    }
    s->ctx = *ctx;
    return 0;
}

static void apply_logging(session *s, const ct_config *cfg) {
    const ct_cfg_node *root = ct_config_root(cfg);
    const char *mode = ct_config_find(root, "logging.progress")->value;
    bool tty = isatty(STDERR_FILENO);
    s->progress = strcmp(mode, "none") == 0    ? PROGRESS_NONE
                  : strcmp(mode, "bar") == 0   ? PROGRESS_BAR
                  : strcmp(mode, "plain") == 0 ? PROGRESS_PLAIN
                  : tty                        ? PROGRESS_BAR
                                               : PROGRESS_PLAIN;
    s->interval = atof(ct_config_find(root, "logging.interval")->value);
    s->interval_seconds = atof(ct_config_find(root, "logging.interval_seconds")->value);
    s->batch_size = atoll(ct_config_find(root, "data.batch_size")->value);
    long long ebs = atoll(ct_config_find(root, "data.eval_batch_size")->value);
    s->eval_batch_size = ebs > 0 ? ebs : s->batch_size;
    s->max_epochs = atoll(ct_config_find(root, "trainer.max_epochs")->value);
}

static int cmd_fit(int argc, char **argv) {
    cmd_args a;
    char **ov = calloc((size_t)argc + 1, sizeof(char *));
    if (!ov) return EXIT_RUN_FAILED;
    int rc = parse_args("fit", argc, argv, &a, ov);
    if (rc) goto out_free;
    if (a.help) {
        cmd_usage(stdout, "fit");
        goto out_free;
    }
    if (!a.config) {
        (void)fprintf(stderr, "ctrain fit: missing CONFIG\n");
        cmd_usage(stderr, "fit");
        list_examples(stderr);
        rc = EXIT_USAGE;
        goto out_free;
    }
    /* a closed stdout or stderr (`ctrain fit ... | head`) must not end the run: what cannot be
       shown is dropped, log.txt keeps everything */
    (void)signal(SIGPIPE, SIG_IGN);
    route_signals(); /* before the first thread starts */
    session s;
    ct_ctx *ctx;
    if ((rc = open_session(&s, &ctx)) != 0) goto out_free;
    ct_config *cfg = NULL;
    ct_experiment *e = NULL;
    ct_status st = CT_OK;
    if (ct_comm_launched()) { /* one rank of several: mpirun, srun (docs/distributed.md) */
        st = ct_comm_create_mpi(ctx, &s.comm);
        if (st != CT_OK) {
            rc = fail(ctx, EXIT_RUN_FAILED);
            goto out;
        }
        s.rank = ct_comm_rank(s.comm);
        s.world = ct_comm_world_size(s.comm);
        s.silent = s.rank != 0;
        if (gather_rank_map(&s) != CT_OK) {
            rc = fail(ctx, EXIT_RUN_FAILED);
            goto out;
        }
        /* at once, before any data is read: a rank killed while loading is named too */
        if (s.rank == 0) (void)fprintf(stderr, "ranks: %s\n", s.rank_map);
        never_block_on_the_launcher();
    }
    st = load_config(ctx, a.config, a.overrides, a.n_overrides, &cfg);
    if (st != CT_OK) {
        rc = rank_fail(&s, ctx, setup_code(st));
        goto out;
    }
    apply_logging(&s, cfg);
    if (s.silent) s.progress = PROGRESS_NONE;
    if (s.world > 1) { /* progress counts the samples of every rank */
        s.batch_size *= s.world;
        s.eval_batch_size *= s.world;
    }
    const ct_cfg_node *root = ct_config_root(cfg);
    (void)ct_ctx_set_threads(ctx, atoll(ct_config_find(root, "threads")->value));
    const char *out_dir = ct_config_find(root, "output_dir")->value;
    /* a dev run is a smoke test that writes nothing, log.txt included */
    const char *dev = ct_config_find(root, "trainer.dev_run")->value; /* true, True or TRUE */
    bool dev_run = dev[0] == 't' || dev[0] == 'T';
    if (!s.silent && !dev_run) (void)snprintf(s.log_path, sizeof s.log_path, "%s/log.txt", out_dir);
    ct_experiment_params ep = ct_experiment_default_params();
    ep.comm = s.comm;
    ep.restart = a.restart;
    ep.callbacks.user = &s;
    ep.callbacks.on_batch = on_batch;
    ep.callbacks.on_log = on_log;
    ep.callbacks.on_eval_end = on_eval_end;
    ep.callbacks.on_epoch_end = on_epoch_end;
    ep.callbacks.on_fit_start = on_fit_start;
    ep.report_cancelled = signalled;
    st = ct_experiment_create(ctx, cfg, &ep, &e);
    if (st != CT_OK) {
        rc = rank_fail(&s, ctx, setup_code(st));
        goto out;
    }
    s.exp = e;
    if (s.world > 1) {
        say(&s,
            "ctrain %s: fit %s -> %s on %lld processes (%lld training samples each, global "
            "batch %lld, %lld parameters%s)",
            ct_version(), a.config, out_dir, (long long)s.world,
            (long long)ct_experiment_train_samples(e), (long long)s.batch_size,
            (long long)ct_params_numel(ct_experiment_params_store(e)),
            ct_trainer_sharded(ct_experiment_trainer(e)) ? ", optimizer update sharded" : "");
        to_log(&s, "ranks: ", s.rank_map); /* printed when the job started */
    } else {
        say(&s, "ctrain %s: fit %s -> %s (%lld training samples, %lld parameters)", ct_version(),
            a.config, out_dir, (long long)ct_experiment_train_samples(e),
            (long long)ct_params_numel(ct_experiment_params_store(e)));
    }
    catch_stop_signals();
    st = ct_experiment_fit(e);
    ct_trainer *t = ct_experiment_trainer(e);
    if (st != CT_OK) {
        close_bar(&s);
        if (s.silent) {
            rc = rank_fail(&s, ctx, st == CT_ERR_CONFIG ? EXIT_USAGE : EXIT_RUN_FAILED);
            goto out;
        }
        char text[2048];
        say(&s, "ctrain: error: %s%s", s.world > 1 ? "rank 0: " : "",
            error_text(ctx, text, sizeof text));
        rc = st == CT_ERR_CONFIG ? EXIT_USAGE : EXIT_RUN_FAILED;
        if (s.log_file) (void)fflush(s.log_file);
        ct_comm_abort(s.comm, rc);
        goto out;
    }
    char summary[1024];
    size_t at = (size_t)snprintf(summary, sizeof summary, "done: %lld steps, %lld epochs",
                                 (long long)ct_trainer_step(t), (long long)ct_trainer_epoch(t));
    const ct_monitor *m = ct_trainer_monitor(t);
    if (m && m->state.has_best)
        at += (size_t)snprintf(summary + at, sizeof summary - at, "; best %s %.4f at step %lld",
                               m->metric, m->state.best, (long long)m->state.best_step);
    int64_t n;
    const ct_metric_value *v = ct_trainer_metrics(t, "test", &n);
    for (int64_t i = 0, shown = 0; i < n && at < sizeof summary; i++) {
        if (strstr(v[i].name, "/confusion/")) continue; /* counts: metrics.jsonl and report */
        at += (size_t)snprintf(summary + at, sizeof summary - at, "%s %s %.4f", shown++ ? "," : ";",
                               v[i].name, v[i].value);
    }
    say(&s, "%s", summary);
    rc = stop_code();
    if (rc)
        say(&s, "stopped by %s at step %lld; a checkpoint was saved: run the same command to go on",
            stop_name(), (long long)ct_trainer_step(t));
    else if (s.world > 1 && ct_trainer_interrupted(t)) { /* a signal reached another rank */
        rc = EXIT_SIGTERM;
        say(&s,
            "stopped by a signal to another rank at step %lld; a checkpoint was saved: run the "
            "same command to go on",
            (long long)ct_trainer_step(t));
    }
    /* a run stopped cleanly: rank 0's code is the job's. Another rank that left first with a
       non-zero code would make the launcher end the job at once (Open MPI's mpirun kills the
       other ranks), maybe before rank 0 has said where it stopped */
    if (s.silent) rc = 0;
    if (s.log_file && fclose(s.log_file) != 0 && !s.log_errno) s.log_errno = errno ? errno : EIO;
    s.log_file = NULL;
    if (log_status(&s) != CT_OK) { /* the run's own files are incomplete: not a success */
        (void)fail(ctx, EXIT_RUN_FAILED);
        if (rc == 0) rc = EXIT_RUN_FAILED;
    }
out:
    ct_experiment_destroy(e);
    ct_config_destroy(cfg);
    if (s.log_file) (void)fclose(s.log_file);
    ct_comm_destroy(s.comm);
    ct_ctx_destroy(ctx);
out_free:
    free(ov);
    return rc;
}

/* Whether the run's pointer file is there (whatever it holds, readable or not). */
static bool pointer_exists(const char *run, const char *name) {
    char path[4200];
    struct stat st;
    (void)snprintf(path, sizeof path, "%s/checkpoints/%s", run, name);
    return lstat(path, &st) == 0 || errno != ENOENT;
}

/* Loads `*which` into the experiment: 0, or the exit code once the reason is said. 1 is damage
 * (a checkpoint that fails its checks, a damaged `best` or one naming no checkpoint, a `latest`
 * with no intact checkpoint to fall back to), 2 a wrong request (no checkpoint there, or one
 * that does not fit the model). The default "best" means "latest" in a run that never saved a
 * best (no monitor), said on stderr; a damaged `best` is never a reason to score other weights. */
static int load_checkpoint(ct_ctx *ctx, ct_experiment *e, const char **which, int64_t *step) {
    const char *root = ct_experiment_output_dir(e);
    bool best = strcmp(*which, "best") == 0;
    if (best && !pointer_exists(root, "best")) {
        (void)fprintf(stderr, "ctrain: %s has no best checkpoint: using latest\n", root);
        *which = "latest";
        best = false;
    }
    char dir[4200];
    ct_status st = ct_checkpoint_resolve(ctx, root, *which, dir, sizeof dir, NULL);
    if (st != CT_OK && best) {
        (void)ct_err_wrap(ctx, "the best checkpoint cannot be used (hint: --checkpoint latest or "
                               "step-N names another)");
        return fail(ctx, EXIT_RUN_FAILED);
    }
    if (st != CT_OK) return fail(ctx, st == CT_ERR_IO ? EXIT_USAGE : EXIT_RUN_FAILED);
    st = ct_experiment_load(e, dir, step);
    if (st != CT_OK) return fail(ctx, st == CT_ERR_OOM ? EXIT_RUN_FAILED : EXIT_USAGE);
    return 0;
}

/* What eval, predict and config share: the arguments, the context and the configuration and
 * experiment opened read-only (nothing is trained or written into the run directory). */
typedef struct ro_cmd {
    cmd_args a;
    char **ov;
    session s;
    ct_ctx *ctx;
    ct_config *cfg;
    ct_experiment *e;
} ro_cmd;

/* Parses the arguments and, unless help was asked, opens everything. Returns -1 to go on, or
 * the exit code (0 after help) once ro_end has cleaned up. */
static int ro_begin(ro_cmd *c, const char *name, int argc, char **argv) {
    memset(c, 0, sizeof *c);
    if (!(c->ov = calloc((size_t)argc + 1, sizeof(char *)))) return EXIT_RUN_FAILED;
    int rc = parse_args(name, argc, argv, &c->a, c->ov);
    if (!rc && c->a.help) cmd_usage(stdout, name);
    if (!rc && !c->a.help && !c->a.config) {
        (void)fprintf(stderr, "ctrain %s: missing CONFIG\n", name);
        rc = EXIT_USAGE;
    }
    if (!rc && !c->a.help && strcmp(name, "predict") == 0 && !c->a.prompt &&
        (!c->a.input || !c->a.output)) {
        (void)fprintf(stderr, "ctrain predict: needs --input FILE and --output FILE, or "
                              "--prompt TEXT for a language model\n");
        rc = EXIT_USAGE;
    }
    if (rc || c->a.help) {
        free(c->ov);
        return rc;
    }
    if ((rc = open_session(&c->s, &c->ctx)) != 0) {
        free(c->ov);
        return rc;
    }
    c->s.quiet = true;
    c->s.progress = PROGRESS_NONE;
    ct_status st = load_config(c->ctx, c->a.config, c->a.overrides, c->a.n_overrides, &c->cfg);
    if (st == CT_OK) {
        const ct_cfg_node *threads = ct_config_find(ct_config_root(c->cfg), "threads");
        (void)ct_ctx_set_threads(c->ctx, atoll(threads->value));
        ct_experiment_params ep = ct_experiment_default_params();
        ep.read_only = true;
        st = ct_experiment_create(c->ctx, c->cfg, &ep, &c->e);
    }
    return st == CT_OK ? -1 : fail(c->ctx, setup_code(st));
}

static int ro_end(ro_cmd *c, int rc) {
    ct_experiment_destroy(c->e);
    ct_config_destroy(c->cfg);
    ct_ctx_destroy(c->ctx);
    free(c->ov);
    return rc;
}

static int cmd_predict(int argc, char **argv) {
    ro_cmd c;
    int rc = ro_begin(&c, "predict", argc, argv);
    if (rc >= 0) return c.ctx ? ro_end(&c, rc) : rc;
    const char *which = c.a.checkpoint;
    int64_t step = 0;
    int failed = load_checkpoint(c.ctx, c.e, &which, &step);
    if (failed) return ro_end(&c, failed);
    ct_status st;
    if (c.a.prompt) {
        st = ct_experiment_generate(c.e, c.a.prompt, c.a.tokens, c.a.temperature, c.a.top_k,
                                    (uint64_t)c.a.seed, stdout);
        (void)putchar('\n');
        if (st != CT_OK)
            return ro_end(&c, fail(c.ctx, st == CT_ERR_CONFIG ? EXIT_USAGE : EXIT_RUN_FAILED));
        (void)fprintf(stderr, "ctrain predict: %lld bytes sampled (checkpoint %s, step %lld)\n",
                      c.a.tokens, which, (long long)step);
        return ro_end(&c, 0);
    }
    st = ct_experiment_predict(c.e, c.a.input, c.a.output);
    if (st != CT_OK)
        return ro_end(&c, fail(c.ctx, st == CT_ERR_OOM || st == CT_ERR_INTERNAL ? EXIT_RUN_FAILED
                                                                                : EXIT_USAGE));
    (void)fprintf(stderr, "ctrain predict: %s -> %s (checkpoint %s, step %lld)\n", c.a.input,
                  c.a.output, which, (long long)step);
    return ro_end(&c, 0);
}

static int cmd_eval(int argc, char **argv) {
    ro_cmd c;
    int rc = ro_begin(&c, "eval", argc, argv);
    if (rc >= 0) return c.ctx ? ro_end(&c, rc) : rc;
    int64_t n_eng;
    const char *const *keys = ct_experiment_engines(c.e, &n_eng);
    if (n_eng == 0) {
        (void)fprintf(stderr, "ctrain eval: %s has no data.valid or data.test to evaluate on\n",
                      c.a.config);
        return ro_end(&c, EXIT_USAGE);
    }
    const char *which = c.a.checkpoint;
    int64_t step = 0;
    int failed = load_checkpoint(c.ctx, c.e, &which, &step);
    if (failed) return ro_end(&c, failed);
    json_t *obj = json_object();
    (void)json_object_set_new(obj, "step", json_integer((json_int_t)step));
    (void)json_object_set_new(obj, "checkpoint", json_string(which));
    ct_trainer *t = ct_experiment_trainer(c.e);
    for (int64_t k = 0; k < n_eng && rc < 0; k++) {
        if (ct_trainer_evaluate(t, keys[k]) != CT_OK) {
            rc = fail(c.ctx, EXIT_RUN_FAILED);
            break;
        }
        int64_t n;
        const ct_metric_value *v = ct_trainer_metrics(t, keys[k], &n);
        if (!c.a.json) (void)printf("%s (step %lld):", keys[k], (long long)step);
        for (int64_t i = 0; i < n; i++) {
            if (c.a.json)
                (void)json_object_set_new(
                    obj, v[i].name, isfinite(v[i].value) ? json_real(v[i].value) : json_null());
            else
                (void)printf(" %s %.6g", v[i].name, v[i].value);
        }
        if (!c.a.json) (void)printf("\n");
    }
    if (rc < 0 && c.a.json) {
        char *txt = json_dumps(obj, JSON_COMPACT | JSON_REAL_PRECISION(17));
        if (txt) (void)printf("%s\n", txt);
        free(txt);
    }
    json_decref(obj);
    return ro_end(&c, rc < 0 ? 0 : rc);
}

/* Valid means fit would start: ro_begin has checked the schema, built every component (their
 * keys checked, the data files opened) and filled in the `auto` lengths. */
static int cmd_config(int argc, char **argv) {
    /* --reference needs no CONFIG */
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--reference") == 0) {
            if (argc != 2) {
                (void)fprintf(stderr, "ctrain config: --reference takes no CONFIG\n");
                return EXIT_USAGE;
            }
            ct_experiment_write_reference(stdout);
            return 0;
        }
    ro_cmd c;
    int rc = ro_begin(&c, "config", argc, argv);
    if (rc >= 0) return c.ctx ? ro_end(&c, rc) : rc;
    char fp[17];
    ct_experiment_fingerprint(c.cfg, fp);
    (void)printf("# %s resolved (fingerprint %s)\n", c.a.config, fp);
    return ro_end(&c, ct_config_write(c.cfg, stdout) == CT_OK ? 0 : fail(c.ctx, EXIT_RUN_FAILED));
}

static int cmd_report(int argc, char **argv) {
    static const struct option opts[] = {
        {"output", required_argument, NULL, 'o'},
        {"svg", required_argument, NULL, 's'},
        {"log", no_argument, NULL, 'l'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    ct_report_params rp = ct_report_default_params();
    const char *dir = NULL;
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, "-h", opts, NULL)) != -1) {
        switch (c) {
        case 1:
            if (dir) {
                (void)fprintf(stderr, "ctrain report: expected one RUN_DIR\n");
                return EXIT_USAGE;
            }
            dir = optarg;
            break;
        case 'o':
            rp.html = optarg;
            break;
        case 's':
            rp.svg_dir = optarg;
            break;
        case 'l':
            rp.log_y = true;
            break;
        case 'h':
            cmd_usage(stdout, "report");
            return 0;
        default:
            (void)fprintf(stderr, "ctrain report: unknown option '%s'\n", argv[optind - 1]);
            return EXIT_USAGE;
        }
    }
    if (!dir) {
        (void)fprintf(stderr, "ctrain report: missing RUN_DIR\n");
        return EXIT_USAGE;
    }
    session s;
    ct_ctx *ctx;
    if (open_session(&s, &ctx) != 0) return EXIT_RUN_FAILED;
    /* a stop signal ends the report between plots, leaving no file (a second one ends the
       process at once) */
    catch_stop_signals();
    rp.cancelled = signalled;
    int64_t points = 0;
    ct_status st = ct_report_write(ctx, dir, &rp, &points);
    int rc = 0;
    if (st == CT_STOP) {
        rc = stop_code();
        (void)fprintf(stderr, "ctrain report: stopped by %s; nothing written\n", stop_name());
    } else if (st != CT_OK)
        rc = fail(ctx, st == CT_ERR_OOM ? EXIT_RUN_FAILED : EXIT_USAGE);
    else
        (void)fprintf(stderr, "ctrain report: %s (%lld values)\n",
                      rp.html ? rp.html : "report.html in the run directory", (long long)points);
    ct_ctx_destroy(ctx);
    return rc;
}

/* ---- inspect ---- */

static bool is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Lists a safetensors file's tensors from its header. */
static int list_tensors(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return 1;
    unsigned char len8[8];
    int rc = 1;
    if (fread(len8, 1, 8, f) == 8) {
        uint64_t n = 0;
        for (int i = 7; i >= 0; i--)
            n = n << 8 | len8[i];
        char *hdr = n < (100u << 20) ? malloc(n + 1) : NULL;
        if (hdr && fread(hdr, 1, n, f) == n) {
            hdr[n] = '\0';
            json_t *j = json_loads(hdr, 0, NULL);
            const char *name;
            json_t *v;
            json_object_foreach(j, name, v) {
                if (strcmp(name, "__metadata__") == 0) continue;
                (void)printf("    %-40s %-5s [", name,
                             json_string_value(json_object_get(v, "dtype")));
                size_t i;
                json_t *d;
                json_array_foreach(json_object_get(v, "shape"), i, d)(void)
                    printf("%s%lld", i ? ", " : "", (long long)json_integer_value(d));
                (void)printf("]\n");
            }
            rc = j ? 0 : 1;
            json_decref(j);
        }
        free(hdr);
    }
    (void)fclose(f);
    return rc;
}

/* A double as state.json stores it: the 16 hex digits of its bits, so it reads back exactly. */
static bool hex_double(const json_t *j, double *out) {
    const char *s = json_string_value(j);
    if (!s || strlen(s) != 16) return false;
    uint64_t bits = 0;
    for (int i = 0; i < 16; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0) return false;
        bits = bits << 4 | (uint64_t)d;
    }
    memcpy(out, &bits, sizeof *out);
    return true;
}

/* The metric that picks `best` in the run whose checkpoints/ holds dir: checkpoint.monitor of
 * its config.yaml, or valid/loss when that is empty and there is validation data. */
static void monitor_name(ct_ctx *ctx, const char *dir, char *buf, size_t size) {
    char path[1300];
    (void)snprintf(path, sizeof path, "%s/../../config.yaml", dir);
    (void)snprintf(buf, size, "monitor");
    ct_config *cfg = NULL;
    if (ct_config_load_file(ctx, path, &cfg) != CT_OK) return;
    const ct_cfg_node *root = ct_config_root(cfg), *m = ct_config_find(root, "checkpoint.monitor");
    if (m && m->kind == CT_CFG_SCALAR && m->value && m->value[0])
        (void)snprintf(buf, size, "%s", m->value);
    else if (ct_config_find(root, "data.valid"))
        (void)snprintf(buf, size, "valid/loss");
    ct_config_destroy(cfg);
}

/* The values metrics.jsonl (beside checkpoints/) recorded at step, as "name value" pairs. */
static void recorded_metrics(const char *dir, int64_t step, char *buf, size_t size) {
    char path[1300];
    (void)snprintf(path, sizeof path, "%s/../../metrics.jsonl", dir);
    buf[0] = '\0';
    FILE *f = fopen(path, "r");
    if (!f) return;
    json_t *all = json_object();
    char *line = NULL;
    size_t cap = 0;
    while (all && getline(&line, &cap, f) > 0) {
        json_t *j = json_loads(line, 0, NULL);
        if (j && json_integer_value(json_object_get(j, "step")) == step) {
            json_object_del(j, "step");
            json_object_del(j, "epoch");
            json_object_del(j, "time");
            (void)json_object_update(all, j);
        }
        json_decref(j);
    }
    free(line);
    (void)fclose(f);
    size_t at = 0;
    const char *key;
    json_t *v;
    json_object_foreach(all, key, v) {
        if (strstr(key, "/confusion/")) continue; /* counts, not a summary */
        int k = json_is_number(v) ? snprintf(buf + at, size - at, "%s%s %.6g", at ? ", " : "", key,
                                             json_number_value(v))
                                  : snprintf(buf + at, size - at, "%s%s null", at ? ", " : "", key);
        if (k < 0 || (size_t)k >= size - at) break;
        at += (size_t)k;
    }
    json_decref(all);
}

static int inspect_checkpoint(ct_ctx *ctx, const char *dir, bool tensors) {
    int64_t step = -1;
    if (ct_checkpoint_verify(ctx, dir, &step) != CT_OK) {
        char text[2048];
        (void)printf("  %s: DAMAGED: %s\n", dir, error_text(ctx, text, sizeof text));
        return 1;
    }
    char path[1200];
    (void)snprintf(path, sizeof path, "%s/state.json", dir);
    json_t *st = json_load_file(path, 0, NULL);
    const json_t *tr = json_object_get(json_object_get(st, "state"), "trainer");
    (void)printf("  %s: ok, step %lld, epoch %lld", dir, (long long)step,
                 (long long)json_integer_value(json_object_get(st, "epoch")));
    const char *fp = json_string_value(json_object_get(tr, "fingerprint"));
    if (fp) (void)printf(", fingerprint %s", fp);
    /* the monitor's best so far, as this checkpoint saved it */
    const json_t *mon = json_object_get(json_object_get(st, "state"), "monitor");
    double best;
    if (json_is_true(json_object_get(mon, "has_best")) &&
        hex_double(json_object_get(mon, "best"), &best)) {
        char name[256];
        monitor_name(ctx, dir, name, sizeof name);
        (void)printf(", best %s %.6g at step %lld", name, best,
                     (long long)json_integer_value(json_object_get(mon, "best_step")));
    }
    (void)printf("\n");
    if (tensors) {
        char rec[2048];
        recorded_metrics(dir, step, rec, sizeof rec);
        if (rec[0]) (void)printf("  recorded at step %lld: %s\n", (long long)step, rec);
        const char *name;
        json_t *v;
        json_object_foreach(json_object_get(st, "files"), name, v) {
            (void)printf("  %s (%lld bytes, crc32c %s)\n", name,
                         (long long)json_integer_value(json_object_get(v, "bytes")),
                         json_string_value(json_object_get(v, "crc32c"))
                             ? json_string_value(json_object_get(v, "crc32c"))
                             : "?");
            size_t n = strlen(name);
            if (n > 12 && strcmp(name + n - 12, ".safetensors") == 0) {
                (void)snprintf(path, sizeof path, "%s/%s", dir, name);
                (void)list_tensors(path);
            }
        }
    }
    json_decref(st);
    return 0;
}

/* A run's pointer file: where it points, and 1 when it is damaged or names no checkpoint that
 * verifies (a missing `best` is a run without one; a missing `latest` beside checkpoints is
 * damage that fit repairs by falling back). */
static int inspect_pointer(ct_ctx *ctx, const char *run, const char *name, int64_t count) {
    int64_t step;
    char text[2048];
    if (!pointer_exists(run, name) && (strcmp(name, "best") == 0 || count == 0)) return 0;
    ct_status st = ct_checkpoint_pointer(ctx, run, name, &step);
    if (st != CT_OK && !pointer_exists(run, name)) {
        (void)printf("  %s: MISSING (fit falls back to the newest checkpoint that verifies)\n",
                     name);
        return 1;
    }
    if (st != CT_OK) {
        (void)printf("  %s: DAMAGED: %s\n", name, error_text(ctx, text, sizeof text));
        return 1;
    }
    char dir[1300];
    (void)snprintf(dir, sizeof dir, "%s/checkpoints/step-%08lld", run, (long long)step);
    if (ct_checkpoint_verify(ctx, dir, NULL) != CT_OK) {
        (void)printf("  %s -> step-%08lld: DAMAGED: %s\n", name, (long long)step,
                     is_dir(dir) ? error_text(ctx, text, sizeof text) : "no such checkpoint");
        return 1;
    }
    (void)printf("  %s -> step-%08lld\n", name, (long long)step);
    return 0;
}

static int cmd_inspect(int argc, char **argv) {
    if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        cmd_usage(stdout, "inspect");
        return 0;
    }
    if (argc != 2) {
        (void)fprintf(stderr, "ctrain inspect: expected one PATH\n");
        return EXIT_USAGE;
    }
    const char *p = argv[1];
    if (!is_dir(p)) {
        (void)fprintf(stderr, "ctrain inspect: %s: not a directory\n", p);
        return EXIT_USAGE;
    }
    session s;
    ct_ctx *ctx;
    if (open_session(&s, &ctx) != 0) return EXIT_RUN_FAILED;
    s.quiet = true;
    char path[1200];
    (void)snprintf(path, sizeof path, "%s/state.json", p);
    int bad = 0;
    if (access(path, F_OK) == 0) {
        (void)printf("checkpoint %s\n", p);
        bad = inspect_checkpoint(ctx, p, true);
    } else {
        (void)snprintf(path, sizeof path, "%s/checkpoints", p);
        if (!is_dir(path)) {
            (void)fprintf(stderr,
                          "ctrain inspect: %s: neither a run directory (no checkpoints/) "
                          "nor a checkpoint (no state.json)\n",
                          p);
            ct_ctx_destroy(ctx);
            return EXIT_USAGE;
        }
        (void)printf("run %s\n", p);
        int64_t steps[4096], count = 0;
        if (ct_checkpoint_list(ctx, p, steps, 4096, &count) != CT_OK) {
            char text[2048];
            (void)printf("  cannot list: %s\n", error_text(ctx, text, sizeof text));
            bad = 1;
        }
        bad |= inspect_pointer(ctx, p, "latest", count);
        bad |= inspect_pointer(ctx, p, "best", count);
        (void)printf("  %lld checkpoint(s):\n", (long long)count);
        for (int64_t i = 0; i < count && i < 4096; i++) {
            char dir[1300];
            (void)snprintf(dir, sizeof dir, "%s/checkpoints/step-%08lld", p, (long long)steps[i]);
            bad |= inspect_checkpoint(ctx, dir, false);
        }
        (void)snprintf(path, sizeof path, "%s/metrics.jsonl", p);
        FILE *f = fopen(path, "r");
        if (f) {
            char *line = NULL, *last = NULL;
            size_t cap = 0;
            while (getline(&line, &cap, f) > 0) {
                free(last);
                last = strdup(line);
            }
            free(line);
            (void)fclose(f);
            if (last) (void)printf("  last record: %s", last);
            free(last);
        }
    }
    (void)printf("%s\n", bad ? "DAMAGED" : "ok");
    ct_ctx_destroy(ctx);
    return bad ? EXIT_RUN_FAILED : 0;
}

int main(int argc, char **argv) {
    /* a file size limit (ulimit -f) makes a write fail with EFBIG, reported with the file's name
       like a full disk, instead of killing the process with no word */
    (void)signal(SIGXFSZ, SIG_IGN);
    if (argc < 2) {
        usage(stderr);
        return EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "-V") == 0) {
        (void)printf("ctrain %s\n", ct_version());
        return 0;
    }
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
        usage(stdout);
        list_examples(stdout);
        return 0;
    }
    if (strcmp(cmd, "fit") == 0) return cmd_fit(argc - 1, argv + 1);
    if (strcmp(cmd, "eval") == 0) return cmd_eval(argc - 1, argv + 1);
    if (strcmp(cmd, "config") == 0) return cmd_config(argc - 1, argv + 1);
    if (strcmp(cmd, "predict") == 0) return cmd_predict(argc - 1, argv + 1);
    if (strcmp(cmd, "report") == 0) return cmd_report(argc - 1, argv + 1);
    if (strcmp(cmd, "inspect") == 0) return cmd_inspect(argc - 1, argv + 1);
    (void)fprintf(stderr, "ctrain: unknown %s '%s'\n", cmd[0] == '-' ? "option" : "command", cmd);
    usage(stderr);
    return EXIT_USAGE;
}
