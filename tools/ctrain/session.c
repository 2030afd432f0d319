/*
 * session.c - what every command of the ctrain tool says and how: the context's log messages
 * on stderr and in log.txt (kept until the run directory's log.txt opens), library errors as
 * users see them, the failure of one rank of a distributed run, and loading a configuration.
 *
 * Ownership: the session's log file belongs to the command that opened the session, which
 * closes it; the configuration cli_load_config makes is the caller's (ct_config_destroy).
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

/* Writes a line to log.txt, or keeps it until the file is open. A failed write (a full disk, a
 * file size limit) closes the file and is reported as the run's error at the next event. */
void cli_to_log(session *s, const char *prefix, const char *line) {
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
ct_status cli_log_status(const session *s) {
    if (!s->log_errno) return CT_OK;
    return CT_FAIL(s->ctx, CT_ERR_IO, "%s: write failed: %s", s->log_path, strerror(s->log_errno));
}

void cli_close_bar(session *s) {
    if (s->bar_open) {
        (void)fputc('\n', stderr);
        s->bar_open = false;
    }
}

/*
 * Every rank's pid and host, gathered with one sum all-reduce (each rank fills its own row),
 * into s->rank_map for rank 0 to print at once (and into log.txt later): when a rank dies, MPICH's
 * launcher names the dead process by pid and host only, and this line says which rank that was. The
 * first MAP_RANKS ranks are listed. The same sum counts the hosts as MPI sees them (its
 * shared-memory domains, which is what the automatic choices follow, whatever the host names):
 * each rank adds 1 / the ranks of its domain, so each domain adds 1.
 */
#define MAP_RANKS 16
#define MAP_HOST  31
ct_status cli_gather_rank_map(session *s) {
    enum { ROW = 1 + MAP_HOST };
    double rows[MAP_RANKS * ROW + 1];
    memset(rows, 0, sizeof rows);
    int64_t local = ct_comm_local_size(s->comm);
    rows[MAP_RANKS * ROW] = 1.0 / (double)(local > 0 ? local : 1);
    if (s->rank < MAP_RANKS) {
        double *row = rows + s->rank * ROW;
        char host[MAP_HOST + 1];
        if (gethostname(host, sizeof host) != 0) (void)snprintf(host, sizeof host, "?");
        host[MAP_HOST] = '\0';
        row[0] = (double)getpid();
        for (int i = 0; i < MAP_HOST && host[i]; i++)
            row[1 + i] = (double)(unsigned char)host[i];
    }
    CT_TRY(ct_comm_allreduce_sum_f64(s->comm, rows, MAP_RANKS * ROW + 1));
    s->hosts = llround(rows[MAP_RANKS * ROW]);
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
void cli_say(session *s, const char *fmt, ...) {
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    (void)vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (s->silent) return;
    cli_close_bar(s);
    (void)fprintf(stderr, "%s\n", buf);
    cli_to_log(s, "", buf);
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
const char *cli_error_text(const ct_ctx *ctx, char *buf, size_t size) {
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
    cli_to_log(s, prefix, msg);
    if (level >= CT_LOG_WARN || !s->quiet) {
        cli_close_bar(s);
        (void)fprintf(stderr, "ctrain: %s: %s\n", name, msg);
    }
}

int cli_open_session(session *s, ct_ctx **ctx) {
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

/* Exit code for a failure while setting up (reading the configuration and the data). */
int cli_setup_code(ct_status s) {
    return s == CT_ERR_OOM || s == CT_ERR_INTERNAL || s == CT_ERR_DIST ? EXIT_RUN_FAILED
                                                                       : EXIT_USAGE;
}

int cli_fail(ct_ctx *ctx, int code) {
    char text[2048];
    (void)fprintf(stderr, "ctrain: error: %s\n", cli_error_text(ctx, text, sizeof text));
    return code;
}

/* A failure of one rank of a distributed run: its message, naming the rank, and the end of
 * the whole job (the other ranks may be waiting for this one in a collective); for one
 * process, cli_fail(). */
/*
 * An input error (exit code 2: the configuration, a data file) is, almost always, every rank's
 * at once (each read the same files, or they agreed on the same refusal): rank 0 reports it
 * and ends the job, and the other ranks wait for that rather than report it too. Several ranks
 * calling MPI_Abort together made MPICH's launcher kill one of them first and exit 9 instead of 2
 * about one time in three. A rank whose error rank 0 does not share ends the job itself after
 * RANK0_GRACE_S.
 */
#define RANK0_GRACE_S 15
int cli_rank_fail(const session *s, ct_ctx *ctx, int code) {
    if (s->world < 2) return cli_fail(ctx, code);
    if (code == EXIT_USAGE && s->rank != 0)
        for (int i = 0; i < RANK0_GRACE_S * 10; i++) {
            struct timespec tick = {0, 100000000};
            (void)nanosleep(&tick, NULL);
        }
    char text[2048];
    (void)fprintf(stderr, "ctrain: error: rank %lld of %lld: %s\n", (long long)s->rank,
                  (long long)s->world, cli_error_text(ctx, text, sizeof text));
    (void)fflush(stderr);
    ct_comm_abort(s->comm, code);
    return code;
}

/* Loads CONFIG (an experiment file, or a run directory: its config.yaml, with output_dir that
 * directory, wherever the run was made), applies the overrides and resolves it. */
ct_status cli_load_config(ct_ctx *ctx, const char *path, char **overrides, int n, ct_config **out) {
    return ct_experiment_load_config(ctx, path, (const char *const *)overrides, n, out);
}
