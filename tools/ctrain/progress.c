/*
 * progress.c - what a fit shows while it runs: the progress bar or plain progress lines on
 * stderr, each evaluation's line, and log.txt opened at the start of the fit; these are the
 * trainer's callbacks, which also end the fit at the step where a stop signal came.
 *
 * Ownership: the callbacks write into the session they are given (callbacks.user).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include "cli.h"

static double now_s(void) {
    struct timeval tv;
    (void)gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + (double)tv.tv_usec * 1e-6;
}

static void fmt_duration(double sec, char *buf, size_t n) {
    if (!isfinite(sec) || sec < 0) sec = 0;
    long long t = (long long)(sec + 0.5);
    if (t >= 3600)
        (void)snprintf(buf, n, "%lld:%02lld:%02lld", t / 3600, t / 60 % 60, t % 60);
    else
        (void)snprintf(buf, n, "%lld:%02lld", t / 60, t % 60);
}

/* The training batches the bar counts to: the epoch's, or fewer when max_steps ends the run
 * first. on_batch comes before its window's update, so the step under way is step + 1 and its
 * window ends at the next multiple of accum_steps (or at the epoch's end). */
static int64_t train_total(const session *s, const ct_trainer *t, int64_t done, int64_t total) {
    if (s->max_steps <= 0) return total;
    int64_t acc = s->accum_steps > 0 ? s->accum_steps : 1;
    int64_t window_end = ((done - 1) / acc + 1) * acc;
    int64_t after = s->max_steps - ct_trainer_step(t) - 1; /* steps after the one under way */
    int64_t end = (window_end < total ? window_end : total) + (after > 0 ? after * acc : 0);
    return end < total ? end : total;
}

/* Rate and ETA of the bar of `split`; NaN where not known yet (no batch timed). Training's
 * count from the epoch's start, without the evaluations' time in between. */
static void rate_eta(const session *s,
                     bool is_train,
                     double now,
                     int64_t done,
                     int64_t total,
                     double *rate,
                     double *eta) {
    int64_t n = is_train ? done - s->train_done0 : done;
    double el = is_train ? now - s->train_t0 - s->paused : now - s->eval_t0;
    int64_t bs = is_train ? s->batch_size : s->eval_batch_size;
    bool known = n > 0 && el > 0;
    *rate = known ? (double)n * (double)bs / el : (double)NAN;
    *eta = known ? el / (double)n * (double)(total - done) : (double)NAN;
}

static ct_status
on_batch(void *user, ct_trainer *t, const char *split, int64_t done, int64_t total, double loss) {
    session *s = user;
    double now = now_s();
    bool is_train = strcmp(split, "train") == 0;
    if (strcmp(s->split, split) != 0 || done == 1) {
        cli_close_bar(s);
        (void)snprintf(s->split, sizeof s->split, "%s", split);
        s->t_last = 0;
        /* training picks up where it was before an evaluation; an epoch starts again */
        s->frac_last = is_train && done > 1 ? s->train_frac_last : 0;
    }
    if (is_train && done == 1) {
        s->loss_sum = 0;
        s->loss_n = 0;
    }
    if (is_train && s->train_done0 < 0) s->train_done0 = done - 1; /* resumed mid-epoch */
    if (isfinite(loss)) {
        s->loss_sum += loss;
        s->loss_n++;
    }
    CT_TRY(cli_log_status(s));
    if (s->progress == PROGRESS_NONE) return cli_signal() ? CT_STOP : CT_OK;
    if (is_train) total = train_total(s, t, done, total);
    double frac = total > 0 ? (double)done / (double)total : 0;
    bool last = done >= total;
    /* plain lines: training every `interval` of an epoch or interval_seconds; evaluation,
       usually short, by time only */
    if (s->t_last == 0 && s->progress == PROGRESS_PLAIN) s->t_last = now;
    bool due = s->progress == PROGRESS_BAR
                   ? (now - s->t_last >= 0.1 || last)
                   : (now - s->t_last >= s->interval_seconds ||
                      (is_train && (frac - s->frac_last >= s->interval - 1e-12 || last)));
    if (!due) return cli_signal() ? CT_STOP : CT_OK;
    double rate, eta_s;
    rate_eta(s, is_train, now, done, total, &rate, &eta_s);
    char speed[48] = "- samples/s ETA -:--";
    if (isfinite(rate)) {
        char eta[32];
        fmt_duration(eta_s, eta, sizeof eta);
        (void)snprintf(speed, sizeof speed, "%.0f samples/s ETA %s", rate, eta);
    }
    char head[64];
    if (is_train && s->max_epochs)
        (void)snprintf(head, sizeof head, "train epoch %lld/%lld",
                       (long long)ct_trainer_current_epoch(t), (long long)s->max_epochs);
    else if (is_train)
        (void)snprintf(head, sizeof head, "train epoch %lld",
                       (long long)ct_trainer_current_epoch(t));
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
        (void)fprintf(stderr, "\r\033[K%s [%s] %lld/%lld %s%s", head, bar, (long long)done,
                      (long long)total, speed, tail);
        (void)fflush(stderr);
        s->bar_open = true;
        if (last) cli_close_bar(s);
    } else {
        (void)fprintf(stderr, "%s %lld/%lld (%.0f%%) %s%s\n", head, (long long)done,
                      (long long)total, frac * 100, speed, tail);
        s->frac_last = frac;
        if (is_train) s->train_frac_last = frac;
    }
    s->t_last = now;
    return cli_signal() ? CT_STOP : CT_OK; /* the trainer ends after this step's evaluations */
}

static ct_status on_log(void *user, ct_trainer *t, const ct_metric_value *v, int64_t n) {
    session *s = user;
    (void)t;
    for (int64_t i = 0; i < n; i++)
        if (strcmp(v[i].name, "train/lr") == 0) {
            s->lr = v[i].value;
            s->have_lr = true;
        }
    return cli_log_status(s);
}

/* Training's clock stops at an evaluation or a checkpoint and runs again at the next
 * training batch. */
static void pause_training(session *s, double now) {
    if (s->pause_from == 0) s->pause_from = now;
}

static ct_status on_iteration_start(void *user, ct_trainer *t, int64_t batch) {
    session *s = user;
    (void)t, (void)batch;
    if (s->pause_from > 0) {
        s->paused += now_s() - s->pause_from;
        s->pause_from = 0;
    }
    return CT_OK;
}

static ct_status on_eval_start(void *user, ct_trainer *t, const char *key) {
    session *s = user;
    (void)t, (void)key;
    s->eval_t0 = now_s();
    pause_training(s, s->eval_t0);
    return CT_OK;
}

static ct_status on_save(void *user, ct_trainer *t, bool best) {
    session *s = user;
    (void)t, (void)best;
    pause_training(s, now_s());
    return CT_OK;
}

static ct_status
on_eval_end(void *user, ct_trainer *t, const char *key, const ct_metric_value *v, int64_t n) {
    session *s = user;
    char line[1024];
    size_t at = 0;
    at += (size_t)snprintf(line, sizeof line, "%s epoch %lld step %lld:", key,
                           (long long)ct_trainer_current_epoch(t), (long long)ct_trainer_step(t));
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
        else if (m->state.has_best) /* a first value that is not finite sets no best */
            (void)snprintf(line + at, sizeof line - at, " (best %s %.4f at step %lld)", m->metric,
                           m->state.best, (long long)m->state.best_step);
    }
    cli_say(s, "%s", line);
    return cli_log_status(s);
}

/* Training's rate counts from here: the epoch's first batch is about to be read. */
static ct_status on_epoch_start(void *user, ct_trainer *t, int64_t epoch) {
    session *s = user;
    (void)t, (void)epoch;
    s->train_t0 = now_s();
    s->train_done0 = 0;
    s->paused = 0;
    s->pause_from = 0;
    s->train_frac_last = 0;
    return CT_OK;
}

static ct_status on_fit_start(void *user, ct_trainer *t) {
    session *s = user;
    (void)t;
    /* a resumed run may start mid-epoch, with no on_epoch_start: its first batch is timed
       from here */
    s->train_t0 = now_s();
    s->train_done0 = -1;
    s->paused = 0;
    s->pause_from = 0;
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
    return cli_log_status(s);
}

static ct_status on_epoch_end(void *user, ct_trainer *t, int64_t epoch) {
    session *s = user;
    int64_t n;
    const ct_metric_value *v = ct_trainer_metrics(t, "train", &n);
    double loss = (double)NAN;
    for (int64_t i = 0; i < n; i++)
        if (strcmp(v[i].name, "train/loss") == 0) loss = v[i].value;
    if (s->log_file) {
        char line[160];
        int at = snprintf(line, sizeof line, "epoch %lld done: step %lld train/loss %.4f",
                          (long long)epoch, (long long)ct_trainer_step(t), loss);
        if (ct_trainer_skipped_steps(t) > 0)
            at += snprintf(line + at, sizeof line - (size_t)at, " train/skipped %lld",
                           (long long)ct_trainer_skipped_steps(t));
        if (ct_trainer_spikes(t) > 0)
            (void)snprintf(line + at, sizeof line - (size_t)at, " train/spikes %lld",
                           (long long)ct_trainer_spikes(t));
        cli_to_log(s, "", line);
    }
    return cli_log_status(s);
}

void cli_apply_logging(session *s, const ct_config *cfg) {
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
    const ct_cfg_node *global = ct_config_find(root, "data.global_batch_size");
    if (global && atoll(global->value) > 0) /* per process, as data.batch_size */
        s->batch_size = atoll(global->value) / (s->world > 1 ? s->world : 1);
    else
        s->batch_size = atoll(ct_config_find(root, "data.batch_size")->value);
    long long ebs = atoll(ct_config_find(root, "data.eval_batch_size")->value);
    s->eval_batch_size = ebs > 0 ? ebs : s->batch_size;
    s->max_epochs = atoll(ct_config_find(root, "trainer.max_epochs")->value);
    s->max_steps = atoll(ct_config_find(root, "trainer.max_steps")->value);
    s->accum_steps = atoll(ct_config_find(root, "trainer.accum_steps")->value);
}

void cli_session_callbacks(session *s, ct_trainer_callbacks *cb) {
    cb->user = s;
    cb->on_batch = on_batch;
    cb->on_log = on_log;
    cb->on_eval_start = on_eval_start;
    cb->on_iteration_start = on_iteration_start;
    cb->on_save = on_save;
    cb->on_eval_end = on_eval_end;
    cb->on_epoch_start = on_epoch_start;
    cb->on_epoch_end = on_epoch_end;
    cb->on_fit_start = on_fit_start;
}
