/*
 * follow.c - `ctrain eval RUN --follow`, the continuous evaluator: it waits for the checkpoints
 * that a fit in another process saves into RUN/checkpoints (inotify, or polling where inotify
 * is unavailable or CTRAIN_FOLLOW_POLL asks for it), loads each into an experiment of its own,
 * scores it on the run's evaluation engines and appends one record per checkpoint to
 * RUN/eval/metrics.jsonl (and TensorBoard scalars to RUN/eval/). It ends when the run has
 * finished (RUN/finished.json) and every kept checkpoint is scored, after --timeout seconds
 * without a new checkpoint, or at a stop signal.
 *
 * Invariant: nothing the trainer owns is written, locked or renamed: the evaluator reads the
 * checkpoints (whose files are never rewritten in place) and writes only under RUN/eval/, held
 * by RUN/eval/.lock against a second evaluator. A checkpoint that retention deletes before or
 * while it is read fails its load (a missing file, a checksum that no longer matches) and is
 * skipped with a note; one that is there but damaged is skipped with a warning, and makes the
 * exit code 1. A step already in RUN/eval/metrics.jsonl is not scored again.
 *
 * Ownership: a follower borrows the context, configuration and experiment of eval's command and
 * owns its files, its inotify descriptor, its TensorBoard writer and its list of steps, all
 * released by follow_close.
 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "ctrain/checkpoint.h"
#include "ctrain/tboard.h"

#define MAX_SPLITS     16
#define DEFAULT_POLL_S 0.5 /* where inotify is unavailable */

typedef struct follow {
    ct_ctx *ctx;
    ct_experiment *e;
    const cmd_args *a;
    const char *run;
    char eval_dir[4200], records[4300];
    const char *splits[MAX_SPLITS];
    int n_splits;
    bool tensorboard;
    ct_tb_writer *tb;
    int lock_fd, rec_fd;
    int ino_fd, run_wd, ck_wd; /* -1: not watched */
    double poll_s;             /* > 0: poll every poll_s seconds instead of inotify */
    const char *pause;         /* CTRAIN_FOLLOW_PAUSE: the test hook's file, or NULL */
    int64_t *done;             /* steps scored (here or by an earlier evaluator) or given up */
    int64_t n_done, cap_done;
    int64_t n_scored, n_skipped, n_damaged;
} follow;

static double mono_now(void) {
    struct timespec ts;
    (void)clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double wall_now(void) {
    struct timeval tv;
    (void)gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + (double)tv.tv_usec * 1e-6;
}

static void nap(double seconds) {
    struct timespec ts = {(time_t)seconds, (long)((seconds - floor(seconds)) * 1e9)};
    (void)nanosleep(&ts, NULL); /* a signal cuts it short: the loop looks at the flag */
}

static bool is_done(const follow *f, int64_t step) {
    for (int64_t i = 0; i < f->n_done; i++)
        if (f->done[i] == step) return true;
    return false;
}

static int add_done(follow *f, int64_t step) {
    if (f->n_done == f->cap_done) {
        int64_t cap = f->cap_done ? 2 * f->cap_done : 64;
        int64_t *p = realloc(f->done, (size_t)cap * sizeof *p);
        if (!p) {
            (void)fprintf(stderr, "ctrain eval: error: out of memory\n");
            return EXIT_RUN_FAILED;
        }
        f->done = p;
        f->cap_done = cap;
    }
    f->done[f->n_done++] = step;
    return 0;
}

/* ---- the evaluator's own files: RUN/eval/.lock, metrics.jsonl, TensorBoard ---- */

/* Reads the steps already recorded. A last line cut short (an evaluator killed mid write) is
 * cut off, so the next record starts on a line of its own. */
static int read_records(follow *f) {
    FILE *in = fopen(f->records, "rb");
    if (!in) {
        if (errno == ENOENT) return 0;
        (void)fprintf(stderr, "ctrain eval: error: %s: cannot read: %s\n", f->records,
                      strerror(errno));
        return EXIT_RUN_FAILED;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    long whole = 0; /* bytes up to the end of the last whole line */
    int64_t lineno = 0;
    int rc = 0;
    while (rc == 0 && (n = getline(&line, &cap, in)) > 0) {
        lineno++;
        if (line[n - 1] != '\n') break;
        whole += (long)n;
        json_t *rec = json_loads(line, 0, NULL);
        json_t *step = rec ? json_object_get(rec, "step") : NULL;
        if (json_is_integer(step))
            rc = add_done(f, (int64_t)json_integer_value(step));
        else
            (void)fprintf(stderr,
                          "ctrain eval: warning: %s:%lld: expected a JSON record with a "
                          "\"step\"; line ignored\n",
                          f->records, (long long)lineno);
        json_decref(rec);
    }
    free(line);
    (void)fclose(in);
    struct stat st;
    if (rc == 0 && stat(f->records, &st) == 0 && st.st_size > whole) {
        (void)fprintf(stderr, "ctrain eval: %s: its last line is incomplete: cut off\n",
                      f->records);
        if (truncate(f->records, whole) != 0) {
            (void)fprintf(stderr, "ctrain eval: error: %s: cannot truncate: %s\n", f->records,
                          strerror(errno));
            rc = EXIT_RUN_FAILED;
        }
    }
    return rc;
}

/* RUN/eval/ and its lock (one evaluator per run), then the records so far. */
static int open_own_files(follow *f) {
    (void)snprintf(f->eval_dir, sizeof f->eval_dir, "%s/eval", f->run);
    (void)snprintf(f->records, sizeof f->records, "%s/metrics.jsonl", f->eval_dir);
    if (mkdir(f->eval_dir, 0777) != 0 && errno != EEXIST) {
        (void)fprintf(stderr, "ctrain eval: error: %s: cannot create: %s\n", f->eval_dir,
                      strerror(errno));
        return EXIT_RUN_FAILED;
    }
    char lock[4300];
    (void)snprintf(lock, sizeof lock, "%s/.lock", f->eval_dir);
    f->lock_fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (f->lock_fd < 0) {
        (void)fprintf(stderr, "ctrain eval: error: %s: cannot open: %s\n", lock, strerror(errno));
        return EXIT_RUN_FAILED;
    }
    if (flock(f->lock_fd, LOCK_EX | LOCK_NB) != 0) {
        (void)fprintf(stderr,
                      "ctrain eval: another `ctrain eval --follow` is evaluating %s (it holds "
                      "%s)\n",
                      f->run, lock);
        return EXIT_USAGE;
    }
    int rc = read_records(f);
    if (rc) return rc;
    f->rec_fd = open(f->records, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0666);
    if (f->rec_fd < 0) {
        (void)fprintf(stderr, "ctrain eval: error: %s: cannot open: %s\n", f->records,
                      strerror(errno));
        return EXIT_RUN_FAILED;
    }
    return 0;
}

/* Appends one record in one write, flushed to disk: a crash leaves whole records and at most
 * one cut line, which the next start cuts off. */
static int put_record(follow *f, const char *text) {
    size_t n = strlen(text);
    struct stat st;
    off_t before = fstat(f->rec_fd, &st) == 0 ? st.st_size : -1;
    ssize_t w = write(f->rec_fd, text, n);
    if (w == (ssize_t)n && fsync(f->rec_fd) == 0) return 0;
    int err = w < 0 || w == (ssize_t)n ? errno : ENOSPC;
    if (before >= 0) (void)ftruncate(f->rec_fd, before);
    (void)fprintf(stderr, "ctrain eval: error: %s: write failed: %s\n", f->records, strerror(err));
    return EXIT_RUN_FAILED;
}

/* TensorBoard scalars of a record (a view of metrics.jsonl: a failure is a warning). */
static void put_scalars(follow *f, int64_t step, double when, json_t *rec) {
    if (!f->tensorboard) return;
    if (!f->tb && ct_tb_open(f->ctx, f->eval_dir, NULL, 0, &f->tb) != CT_OK) {
        char text[2048];
        (void)fprintf(stderr, "ctrain eval: warning: tensorboard: %s; no events are written\n",
                      cli_error_text(f->ctx, text, sizeof text));
        f->tensorboard = false;
        return;
    }
    const char *key;
    json_t *v;
    ct_status s = CT_OK;
    json_object_foreach(rec, key, v) {
        if (s == CT_OK && json_is_real(v) && strchr(key, '/') && !strstr(key, "/confusion/"))
            s = ct_tb_scalar(f->tb, key, step, when, (float)json_real_value(v));
    }
    if (s == CT_OK) s = ct_tb_flush(f->tb);
    if (s != CT_OK) {
        char text[2048];
        (void)fprintf(stderr, "ctrain eval: warning: tensorboard: %s; no more events are written\n",
                      cli_error_text(f->ctx, text, sizeof text));
        ct_tb_close(f->tb);
        f->tb = NULL;
        f->tensorboard = false;
    }
}

/* ---- one checkpoint ---- */

/*
 * Scores the weights now in the experiment on every followed engine, adding the values to rec
 * ("valid/loss": ...). This is the one place a checkpoint is evaluated: another kind of
 * evaluation of the run (decoding) joins here.
 */
static ct_status evaluate_loaded(follow *f, json_t *rec) {
    ct_trainer *t = ct_experiment_trainer(f->e);
    for (int k = 0; k < f->n_splits; k++) {
        CT_TRY(ct_trainer_evaluate(t, f->splits[k]));
        int64_t n;
        const ct_metric_value *v = ct_trainer_metrics(t, f->splits[k], &n);
        for (int64_t i = 0; i < n; i++)
            (void)json_object_set_new(rec, v[i].name,
                                      isfinite(v[i].value) ? json_real(v[i].value) : json_null());
    }
    return CT_OK;
}

/* The record's values on stdout: eval's lines, or the record itself with --json. */
static void show(const follow *f, int64_t step, json_t *rec, const char *json) {
    if (f->a->json) {
        (void)printf("%s", json);
    } else {
        for (int k = 0; k < f->n_splits; k++) {
            (void)printf("%s (step %lld):", f->splits[k], (long long)step);
            size_t len = strlen(f->splits[k]);
            const char *key;
            json_t *v;
            json_object_foreach(rec, key, v) {
                if (strncmp(key, f->splits[k], len) != 0 || key[len] != '/') continue;
                if (json_is_real(v))
                    (void)printf(" %s %.6g", key, json_real_value(v));
                else
                    (void)printf(" %s nan", key);
            }
            (void)printf("\n");
        }
    }
    (void)fflush(stdout);
}

/* The test hook CTRAIN_FOLLOW_PAUSE=FILE: between listing a checkpoint and loading it, the
 * evaluator writes the checkpoint's name into FILE and waits until FILE is removed, so a test
 * can delete the checkpoint at exactly that moment. */
static void pause_for_test(const follow *f, const char *name) {
    if (!f->pause) return;
    /* written whole under another name, then renamed: the test never reads it half-written */
    char tmp[4200];
    (void)snprintf(tmp, sizeof tmp, "%s.tmp", f->pause);
    FILE *p = fopen(tmp, "w");
    if (!p) return;
    (void)fprintf(p, "%s\n", name);
    if (fclose(p) != 0 || rename(tmp, f->pause) != 0) return;
    double until = mono_now() + 60;
    while (access(f->pause, F_OK) == 0 && !cli_signal() && mono_now() < until)
        nap(0.01);
}

/* Loads, scores and records one checkpoint; one that cannot be loaded is skipped. 0 or the
 * exit code of an error that ends the evaluator. */
static int score(follow *f, int64_t step) {
    char name[32], dir[4300];
    (void)snprintf(name, sizeof name, "step-%08lld", (long long)step);
    (void)snprintf(dir, sizeof dir, "%s/checkpoints/%s", f->run, name);
    pause_for_test(f, name);
    if (cli_signal()) return 0; /* stopped: the checkpoint is left for the next evaluator */
    int64_t got = step;
    ct_weights_kind kind = CT_WEIGHTS_TRAINED;
    ct_status st = ct_experiment_load_with(f->e, dir, !f->a->no_ema, &got, &kind);
    if (st == CT_ERR_OOM) return cli_fail(f->ctx, EXIT_RUN_FAILED);
    if (st != CT_OK) {
        struct stat sb;
        if (stat(dir, &sb) != 0 && errno == ENOENT) {
            (void)fprintf(stderr,
                          "ctrain eval: skipped %s: deleted (checkpoint.keep) before it could "
                          "be evaluated\n",
                          name);
        } else {
            char text[2048];
            (void)fprintf(stderr, "ctrain eval: warning: skipped %s: %s\n", name,
                          cli_error_text(f->ctx, text, sizeof text));
            f->n_damaged++;
        }
        ct_clear_error(f->ctx);
        f->n_skipped++;
        return add_done(f, step);
    }
    double when = wall_now();
    json_t *rec = json_object();
    (void)json_object_set_new(rec, "checkpoint", json_string(name));
    (void)json_object_set_new(rec, "weights",
                              json_string(kind == CT_WEIGHTS_EMA ? "ema" : "trained"));
    if (evaluate_loaded(f, rec) != CT_OK) {
        json_decref(rec);
        return cli_fail(f->ctx, EXIT_RUN_FAILED);
    }
    /* step and time first, time to the millisecond, as in the fit's metrics.jsonl */
    char *text = json_dumps(rec, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
    size_t size = text ? strlen(text) + 64 : 0;
    char *line = text ? malloc(size) : NULL;
    int rc = line ? 0 : EXIT_RUN_FAILED;
    if (line) {
        (void)snprintf(line, size, "{\"step\":%lld,\"time\":%.3f,%s\n", (long long)got, when,
                       text + 1);
        rc = put_record(f, line);
    } else {
        (void)fprintf(stderr, "ctrain eval: error: out of memory\n");
    }
    if (rc == 0) {
        put_scalars(f, got, when, rec);
        show(f, got, rec, line);
        f->n_scored++;
        rc = add_done(f, step);
    }
    free(line);
    free(text);
    json_decref(rec);
    return rc;
}

/* Scores every listed checkpoint not done yet, oldest first. *news: how many there were. */
static int score_new(follow *f, int64_t *news) {
    *news = 0;
    int64_t count = 0;
    if (ct_checkpoint_list(f->ctx, f->run, NULL, 0, &count) != CT_OK)
        return cli_fail(f->ctx, EXIT_RUN_FAILED);
    if (count == 0) return 0;
    int64_t *steps = malloc((size_t)count * sizeof *steps);
    if (!steps) return EXIT_RUN_FAILED;
    int64_t got = 0;
    int rc = 0;
    if (ct_checkpoint_list(f->ctx, f->run, steps, count, &got) != CT_OK)
        rc = cli_fail(f->ctx, EXIT_RUN_FAILED);
    if (got > count) got = count; /* one saved since the count */
    for (int64_t i = got - 1; rc == 0 && i >= 0 && !cli_signal(); i--) { /* oldest first */
        if (is_done(f, steps[i])) continue;
        (*news)++;
        rc = score(f, steps[i]);
    }
    free(steps);
    return rc;
}

/* ---- waiting ---- */

/* Watches RUN (checkpoints/ and finished.json appear there) and, once it exists,
 * RUN/checkpoints (each checkpoint is renamed in). false: inotify cannot be used here. */
static bool watch(follow *f) {
    if (f->ino_fd < 0) {
        f->ino_fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
        if (f->ino_fd < 0) return false;
        f->run_wd = inotify_add_watch(f->ino_fd, f->run, IN_CREATE | IN_MOVED_TO | IN_CLOSE_WRITE);
        if (f->run_wd < 0) return false;
    }
    if (f->ck_wd < 0) {
        char ck[4300];
        (void)snprintf(ck, sizeof ck, "%s/checkpoints", f->run);
        f->ck_wd = inotify_add_watch(f->ino_fd, ck, IN_CREATE | IN_MOVED_TO);
        if (f->ck_wd < 0 && errno != ENOENT) return false;
    }
    return true;
}

/* Waits until something may have changed in the run, at most `limit` seconds (< 0: no limit). */
static void wait_change(follow *f, double limit) {
    if (f->poll_s > 0) {
        nap(limit >= 0 && limit < f->poll_s ? limit : f->poll_s);
        return;
    }
    int ms = limit < 0 ? -1 : (int)ceil(limit * 1e3);
    struct pollfd p = {f->ino_fd, POLLIN, 0};
    if (poll(&p, 1, ms) > 0) {
        char buf[8192];
        while (read(f->ino_fd, buf, sizeof buf) > 0) {
        }
    }
}

/* CTRAIN_FOLLOW_POLL=SECONDS: poll instead of inotify (a network file system, where inotify
 * does not see another host's writes; the tests). 0 or the exit code. */
static int read_poll_setting(follow *f) {
    const char *env = getenv("CTRAIN_FOLLOW_POLL");
    if (!env || !env[0]) return 0;
    char *end = NULL;
    errno = 0;
    double s = strtod(env, &end);
    if (end == env || *end || errno || !(s > 0) || s > 3600) {
        (void)fprintf(stderr,
                      "ctrain eval: CTRAIN_FOLLOW_POLL='%s': expected seconds between looks, "
                      "> 0 and <= 3600\n",
                      env);
        return EXIT_USAGE;
    }
    f->poll_s = s;
    return 0;
}

/* ---- the command ---- */

int cli_choose_splits(ct_experiment *e, const char *want, const char **out, int cap, int *n_out) {
    int64_t n;
    const char *const *keys = ct_experiment_engines(e, &n);
    *n_out = 0;
    for (int64_t i = 0; i < n && *n_out < cap; i++) {
        bool take = !want;
        for (const char *p = want; p && *p && !take;) {
            size_t len = strcspn(p, ",");
            take = len == strlen(keys[i]) && strncmp(p, keys[i], len) == 0;
            p += len + (p[len] == ',');
        }
        if (take) out[(*n_out)++] = keys[i];
    }
    /* an empty --split is an empty name, refused as ',' is: it would score nothing */
    for (const char *p = want; p && (*p || p == want);) {
        size_t len = strcspn(p, ",");
        bool known = false;
        for (int64_t i = 0; i < n; i++)
            known = known || (len == strlen(keys[i]) && strncmp(p, keys[i], len) == 0);
        if (!known) {
            char list[256] = "";
            for (int64_t i = 0; i < n; i++)
                (void)snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s",
                               i ? ", " : "", keys[i]);
            (void)fprintf(stderr,
                          "ctrain eval: --split: '%.*s' is not an evaluation split of this "
                          "experiment; expected one of: %s\n",
                          (int)len, p, list);
            return EXIT_USAGE;
        }
        p += len + (p[len] == ',');
    }
    return 0;
}

static int follow_close(follow *f, int rc) {
    ct_tb_close(f->tb);
    if (f->ino_fd >= 0) (void)close(f->ino_fd);
    if (f->rec_fd >= 0) (void)close(f->rec_fd);
    if (f->lock_fd >= 0) (void)close(f->lock_fd);
    free(f->done);
    return rc;
}

int cli_follow(ct_ctx *ctx, const ct_config *cfg, ct_experiment *e, const cmd_args *a) {
    follow f;
    memset(&f, 0, sizeof f);
    f.ctx = ctx;
    f.e = e;
    f.a = a;
    f.run = ct_experiment_output_dir(e);
    f.lock_fd = f.rec_fd = f.ino_fd = f.run_wd = f.ck_wd = -1;
    f.pause = getenv("CTRAIN_FOLLOW_PAUSE");
    if (f.pause && !f.pause[0]) f.pause = NULL;
    const ct_cfg_node *tb = ct_config_find(ct_config_root(cfg), "logging.tensorboard");
    f.tensorboard = tb && tb->value && strcmp(tb->value, "true") == 0;
    char config[4300];
    (void)snprintf(config, sizeof config, "%s/config.yaml", f.run);
    int rc = cli_choose_splits(e, a->split, f.splits, MAX_SPLITS, &f.n_splits);
    if (!rc) rc = read_poll_setting(&f);
    if (rc) return rc;
    cli_catch_stop_signals();
    /* started before the fit: nothing is made in RUN before the fit has made it a run (a
       folder of other files would be refused by the fit) */
    double start = mono_now();
    if (access(config, F_OK) != 0)
        (void)fprintf(stderr, "ctrain eval: waiting for %s (a fit to start)\n", config);
    while (access(config, F_OK) != 0) {
        if (cli_signal()) return cli_stop_code();
        if (a->timeout >= 0 && mono_now() - start >= a->timeout) {
            (void)fprintf(stderr, "ctrain eval: no run in %s after %g s\n", f.run, a->timeout);
            return 0;
        }
        nap(0.05);
    }
    rc = open_own_files(&f);
    if (rc) return follow_close(&f, rc);
    if (f.poll_s <= 0 && !watch(&f)) {
        (void)fprintf(stderr, "ctrain eval: inotify is unavailable (%s): polling every %g s\n",
                      strerror(errno), DEFAULT_POLL_S);
        f.poll_s = DEFAULT_POLL_S;
    }
    if (f.poll_s > 0)
        (void)fprintf(stderr, "ctrain eval: following %s (polling every %g s)", f.run, f.poll_s);
    else
        (void)fprintf(stderr, "ctrain eval: following %s (inotify)", f.run);
    if (f.n_done)
        (void)fprintf(stderr, "; %lld checkpoint%s already in %s", (long long)f.n_done,
                      f.n_done == 1 ? "" : "s", f.records);
    (void)fprintf(stderr, "\n");
    double last_new = mono_now();
    bool bad_mark = false;
    for (;;) {
        /* the mark first: a run finished before the listing has all its checkpoints in it */
        bool finished = false;
        int64_t last = -1;
        if (ct_experiment_run_finished(ctx, f.run, &finished, &last) != CT_OK) {
            /* fit renames it in whole: this one is being copied, or damaged */
            if (!bad_mark) {
                char text[2048];
                (void)fprintf(stderr, "ctrain eval: warning: %s; the run is taken as unfinished\n",
                              cli_error_text(ctx, text, sizeof text));
            }
            bad_mark = true;
            ct_clear_error(ctx);
        }
        int64_t news = 0;
        if (f.poll_s <= 0) (void)watch(&f); /* checkpoints/ may have appeared */
        if ((rc = score_new(&f, &news)) != 0) return follow_close(&f, rc);
        if (cli_signal()) break;
        if (news) last_new = mono_now();
        const char *why = NULL;
        char because[128];
        if (finished) {
            (void)snprintf(because, sizeof because, "the run finished at step %lld",
                           (long long)last);
            why = because;
        } else if (a->timeout >= 0 && mono_now() - last_new >= a->timeout) {
            (void)snprintf(because, sizeof because, "no new checkpoint for %g s", a->timeout);
            why = because;
        }
        if (why) {
            (void)fprintf(stderr,
                          "ctrain eval: %s: %lld checkpoint%s evaluated, %lld skipped; records in "
                          "%s\n",
                          why, (long long)f.n_scored, f.n_scored == 1 ? "" : "s",
                          (long long)f.n_skipped, f.records);
            return follow_close(&f, f.n_damaged ? EXIT_RUN_FAILED : 0);
        }
        double left = a->timeout >= 0 ? fmax(0, a->timeout - (mono_now() - last_new)) : -1;
        wait_change(&f, left);
        if (cli_signal()) break;
    }
    (void)fprintf(stderr, "ctrain eval: stopped by %s: %lld checkpoint%s evaluated\n",
                  cli_stop_name(), (long long)f.n_scored, f.n_scored == 1 ? "" : "s");
    return follow_close(&f, cli_stop_code());
}
