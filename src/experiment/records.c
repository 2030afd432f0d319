/*
 * records.c - what a fit writes while it trains, and the trainer's events that write it:
 * metrics.jsonl (and metrics.csv), TensorBoard events (scalars, confusion images, histograms,
 * the configuration), report.html, and a resume's cut of the records back to its checkpoint.
 * ct_exp_wire_callbacks hands the trainer the experiment's handlers, each of which passes its
 * event on to the caller's (ct_experiment_params.callbacks).
 *
 * metrics.jsonl is the record of a run: a failed write ends the run. TensorBoard files and the
 * report are views of it: a failure to write one is a warning and the run goes on.
 *
 * Ownership: the record files, the record buffer and the TensorBoard writer are the
 * experiment's fields, opened by ct_exp_open_records and released by ct_exp_release_records.
 */
#include <errno.h>
#include <fnmatch.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include "core/core_internal.h"
#include "ctrain/report.h"
#include "experiment_internal.h"

/* ---- one record: metrics.jsonl, metrics.csv and TensorBoard ---- */

static double now_seconds(void) {
    struct timeval tv;
    (void)gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + (double)tv.tv_usec * 1e-6;
}

/* TensorBoard files are a convenience: a failure to write one is reported once and the run
 * goes on with metrics.jsonl, which stays complete. */
static void tb_failed(ct_experiment *e) {
    ct_log(e->ctx, CT_LOG_WARN, "tensorboard: %s; no more events are written",
           ct_last_error(e->ctx));
    ct_tb_close(e->tb);
    e->tb = NULL;
}

static bool hist_excluded(const ct_experiment *e, const char *name) {
    const char *pat = ct_exp_str_at(e, "logging.histogram_exclude");
    while (pat && *pat) {
        const char *comma = strchr(pat, ',');
        size_t len = comma ? (size_t)(comma - pat) : strlen(pat);
        while (len && *pat == ' ') {
            pat++;
            len--;
        }
        char one[256];
        if (len && len < sizeof one) {
            memcpy(one, pat, len);
            one[len] = '\0';
            while (len && one[len - 1] == ' ')
                one[--len] = '\0';
            if (fnmatch(one, name, 0) == 0) return true;
        }
        pat = comma ? comma + 1 : NULL;
    }
    return false;
}

/* Histograms of the trainable tensors' values (weights/) or gradients (grads/); the gradients
 * are those of the update about to be made, so they carry its step number. */
static void histograms(ct_experiment *e, ct_trainer *t, bool grads) {
    const float *values = ct_params_values(e->params);
    const float *base = grads ? ct_params_grads(e->params) : values;
    /* by the layer that owns the tensor: a sequential model's names ("1.weight") do not say */
    bool skip_norm = ct_exp_bool_at(e, "logging.histogram_exclude_norm");
    for (int64_t i = 0; e->tb && i < ct_params_count(e->params); i++) {
        if (ct_params_kind_at(e->params, i) != CT_PARAM_TRAINABLE) continue;
        const ct_tensor *p = ct_params_at(e->params, i);
        if (hist_excluded(e, p->name) || (skip_norm && ct_model_param_is_norm(e->model, p)))
            continue;
        const float *v = base + ((const float *)p->data - values);
        char tag[300];
        (void)snprintf(tag, sizeof tag, "%s/%s", grads ? "grads" : "weights", p->name);
        if (ct_tb_histogram(e->tb, tag, ct_trainer_step(t) + (grads ? 1 : 0), 0, v,
                            ct_tensor_numel(p)) != CT_OK)
            tb_failed(e);
    }
    if (e->tb && ct_tb_flush(e->tb) != CT_OK) tb_failed(e);
}

/* Appends to the record being formatted, growing its buffer. */
static ct_status rec_add(ct_experiment *e, const char *fmt, ...) CT_PRINTF(2, 3);

static ct_status rec_add(ct_experiment *e, const char *fmt, ...) {
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(e->rec + e->rec_len, e->rec_cap - e->rec_len, fmt, ap);
        va_end(ap);
        if (n < 0) return CT_FAIL(e->ctx, CT_ERR_INTERNAL, "formatting a record failed");
        if ((size_t)n < e->rec_cap - e->rec_len) {
            e->rec_len += (size_t)n;
            return CT_OK;
        }
        size_t cap = 2 * (e->rec_cap + (size_t)n);
        char *p = ct_alloc(e->ctx, cap);
        if (!p) return CT_FAIL(e->ctx, CT_ERR_OOM, "out of memory formatting a record");
        memcpy(p, e->rec, e->rec_len);
        ct_free(e->ctx, e->rec, e->rec_cap);
        e->rec = p;
        e->rec_cap = cap;
    }
}

/* One record of metrics.jsonl (and its rows of metrics.csv) and TensorBoard scalars. A failed
 * write of a record file ends the run (the file names itself in the message), as does a run
 * directory that is no longer there. */
static ct_status record(ct_experiment *e,
                        ct_trainer *t,
                        const ct_metric_value *v,
                        int64_t n,
                        const char *const *extra_names,
                        const double *extra,
                        int64_t n_extra) {
    if (e->jsonl.fd < 0) return CT_OK;
    CT_TRY(ct_exp_rundir_check(e->ctx, &e->run));
    double now = now_seconds();
    long long step = (long long)ct_trainer_step(t), epoch = (long long)ct_trainer_current_epoch(t);
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1 && e->csv.fd < 0) break;
        e->rec_len = 0;
        if (pass == 0)
            CT_TRY(rec_add(e, "{\"step\":%lld,\"epoch\":%lld,\"time\":%.3f", step, epoch, now));
        for (int64_t i = 0; i < n + n_extra; i++) {
            const char *name = i < n ? v[i].name : extra_names[i - n];
            double x = i < n ? v[i].value : extra[i - n];
            if (strcmp(name, "train/lr") == 0) name = "lr";
            if (strcmp(name, "train/grad_norm") == 0) name = "grad_norm";
            if (pass == 1)
                CT_TRY(rec_add(e, "%lld,%lld,%.3f,%s,%.17g\n", step, epoch, now, name, x));
            else if (isfinite(x))
                CT_TRY(rec_add(e, ",\"%s\":%.17g", name, x));
            else
                CT_TRY(rec_add(e, ",\"%s\":null", name));
            /* confusion counts go to TensorBoard as one image per evaluation instead */
            if (pass == 0 && e->tb && !strstr(name, "/confusion/") &&
                ct_tb_scalar(e->tb, name, ct_trainer_step(t), now, (float)x) != CT_OK)
                tb_failed(e);
        }
        if (pass == 0) {
            CT_TRY(rec_add(e, "}\n"));
            CT_TRY(ct_exp_record_put(e->ctx, &e->jsonl, e->rec, e->rec_len));
            e->n_lines++;
        } else {
            CT_TRY(ct_exp_record_put(e->ctx, &e->csv, e->rec, e->rec_len));
            e->n_rows += n + n_extra;
        }
    }
    if (e->tb && ct_tb_flush(e->tb) != CT_OK) tb_failed(e);
    return CT_OK;
}

/* samples_per_sec counts training time only: the clock stops at an evaluation or a checkpoint
 * write and runs again at the next training batch, as the progress display's does. */
static void pause_clock(ct_experiment *e) {
    if (e->pause_from == 0) e->pause_from = now_seconds();
}

static void run_clock(ct_experiment *e) {
    if (e->pause_from == 0) return;
    e->paused += now_seconds() - e->pause_from;
    e->pause_from = 0;
}

/* Starts the clock of samples_per_sec afresh at `now`. */
static void reset_clock(ct_experiment *e, double now) {
    e->t_last_log = now;
    e->paused = 0;
    if (e->pause_from > 0) e->pause_from = now;
}

static ct_status on_log(void *user, ct_trainer *t, const ct_metric_value *v, int64_t n) {
    ct_experiment *e = user;
    double now = now_seconds();
    int64_t steps = ct_trainer_step(t) - e->step_last_log;
    double dt = now - e->t_last_log - e->paused - (e->pause_from > 0 ? now - e->pause_from : 0);
    int64_t world = e->p.comm ? ct_comm_world_size(e->p.comm) : 1;
    /* parameter servers: a step is one worker's batch, and no gradient is all-reduced */
    bool ps = ct_trainer_ps_servers(t) > 0;
    int64_t per_step = e->batch_size * e->accum * (ps ? 1 : world);
    double extra[2] = {dt > 0 ? (double)(steps * per_step) / dt : 0.0};
    reset_clock(e, now);
    e->step_last_log = ct_trainer_step(t);
    /* distributed: rank 0's time in the gradient all-reduce per step since the last record */
    double comm = ct_trainer_comm_seconds(t);
    extra[1] = steps > 0 ? (comm - e->comm_last_log) * 1e3 / (double)steps : 0.0;
    e->comm_last_log = comm;
    static const char *const names[] = {"samples_per_sec", "comm_ms_per_step"};
    CT_TRY(record(e, t, v, n, names, extra, world > 1 && !ps ? 2 : 1));
    const ct_trainer_callbacks *cb = &e->p.callbacks;
    return cb->on_log ? cb->on_log(cb->user, t, v, n) : CT_OK;
}

/* The report is a view of metrics.jsonl: a failure to write it is a warning, never the end
 * of a run. The best checkpoint it marks is the monitor's best (-1: the `best` pointer's).
 * `cancellable`: the caller's report_cancelled may stop it. */
static void write_report(ct_experiment *e, int64_t best_step, bool cancellable) {
    ct_report_params rp = ct_report_default_params();
    rp.best_step = best_step;
    rp.cancelled = cancellable ? e->p.report_cancelled : NULL;
    rp.user = e->p.callbacks.user;
    ct_status s = ct_report_write(e->ctx, e->out_dir, &rp, NULL);
    if (s != CT_OK)
        ct_log(e->ctx, s == CT_STOP ? CT_LOG_INFO : CT_LOG_WARN, "report: %s",
               ct_last_error(e->ctx));
}

/* The step of the best checkpoint as the trainer's monitor knows it, -1 for none (or no
 * checkpoints). v[0..n) are an evaluation that has just ended: the trainer weighs it against
 * the monitor, and saves the best checkpoint, only after on_eval_end, so a value that will
 * improve on the best makes this step the best already (or a live report lags one evaluation
 * behind the `best` pointer). */
static int64_t
best_step(const ct_experiment *e, ct_trainer *t, const ct_metric_value *v, int64_t n) {
    const ct_monitor *m = e->tp.checkpoint_dir ? ct_trainer_monitor(t) : NULL;
    if (!m) return -1;
    int64_t best = m->state.has_best ? m->state.best_step : -1;
    for (int64_t i = 0; i < n && !e->final_testing; i++)
        if (strcmp(v[i].name, m->metric) == 0 && ct_monitor_is_better(m, v[i].value))
            best = ct_trainer_step(t);
    return best;
}

/* The report at the end of a fit, finished or interrupted. */
void ct_exp_final_report(ct_experiment *e) {
    if (e->jsonl.fd >= 0 && strcmp(ct_exp_str_at(e, "logging.report"), "none") != 0)
        write_report(e, best_step(e, e->trainer, NULL, 0), !ct_trainer_interrupted(e->trainer));
}

/* The image has no font: data.classes' names go beside it as text ("<key>/confusion/classes"),
 * once per evaluation key and process, when they name as many classes as the matrix has. */
static void confusion_classes(ct_experiment *e, ct_trainer *t, const char *key, int64_t c) {
    int64_t i = 0;
    while (i < e->n_engines && i < 32 && strcmp(e->engine_keys[i], key) != 0)
        i++;
    if (i >= e->n_engines || i >= 32 || (e->tb_classes >> i & 1u) || e->classes.n != c) return;
    e->tb_classes |= 1u << i;
    /* indented four spaces, the text plugin's Markdown shows it as code: names as they are */
    static const char head[] = "Rows (true class, top to bottom) and columns (predicted, left "
                               "to right) of the confusion image:\n\n";
    size_t cap = sizeof head + 32;
    for (int64_t k = 0; k < c; k++)
        cap += strlen(e->classes.names[k]) + 32;
    char *md = ct_alloc(e->ctx, cap);
    if (!md) return;
    size_t at = (size_t)snprintf(md, cap, "%s", head);
    for (int64_t k = 0; k < c && at < cap; k++) {
        int w = snprintf(md + at, cap - at, "    %3lld  %s\n", (long long)k, e->classes.names[k]);
        at += w > 0 ? (size_t)w : 0;
    }
    char tag[128];
    (void)snprintf(tag, sizeof tag, "%s/confusion/classes", key);
    if (ct_tb_text(e->tb, tag, ct_trainer_step(t), 0, md) != CT_OK || ct_tb_flush(e->tb) != CT_OK)
        tb_failed(e);
    ct_free(e->ctx, md, cap);
}

/* An evaluation's confusion matrix (values "<key>/confusion/<true>/<pred>") as a TensorBoard
 * image: rows are true classes, columns predictions, white to blue by the share of the row. */
static void confusion_image(
    ct_experiment *e, ct_trainer *t, const char *key, const ct_metric_value *v, int64_t n) {
    char prefix[96];
    int plen = snprintf(prefix, sizeof prefix, "%s/confusion/", key);
    if (plen <= 0 || (size_t)plen >= sizeof prefix) return;
    int64_t classes = 0;
    for (int64_t i = 0; i < n; i++)
        if (!strncmp(v[i].name, prefix, (size_t)plen)) classes++;
    int64_t c = (int64_t)floor(sqrt((double)classes) + 0.5);
    if (c < 1 || c * c != classes || c > 256) return;
    int64_t cell = c <= 16 ? 16 : c <= 64 ? 8 : 2, side = c * cell;
    size_t bytes = (size_t)(side * side * 3);
    double *m = ct_alloc(e->ctx, sizeof(double) * (size_t)(c * c));
    unsigned char *img = ct_alloc(e->ctx, bytes);
    if (m && img) {
        memset(m, 0, sizeof(double) * (size_t)(c * c));
        for (int64_t i = 0; i < n; i++) {
            long long a, b;
            if (strncmp(v[i].name, prefix, (size_t)plen) ||
                sscanf(v[i].name + plen, "%lld/%lld", &a, &b) != 2 || a < 0 || b < 0 || a >= c ||
                b >= c)
                continue;
            m[a * c + b] = v[i].value;
        }
        for (int64_t r = 0; r < c; r++) {
            double row = 0;
            for (int64_t k = 0; k < c; k++)
                row += m[r * c + k];
            for (int64_t k = 0; k < c; k++) {
                double f = row > 0 ? m[r * c + k] / row : 0;
                unsigned char shade = (unsigned char)(255 - (int)(f * 200));
                for (int64_t y = r * cell; y < (r + 1) * cell; y++)
                    for (int64_t x = k * cell; x < (k + 1) * cell; x++) {
                        unsigned char *px = img + ((size_t)(y * side + x)) * 3;
                        px[0] = px[1] = shade;
                        px[2] = 255;
                    }
            }
        }
        char tag[128];
        (void)snprintf(tag, sizeof tag, "%s/confusion", key);
        if (ct_tb_image(e->tb, tag, ct_trainer_step(t), 0, img, side, side) != CT_OK ||
            ct_tb_flush(e->tb) != CT_OK)
            tb_failed(e);
        if (e->tb) confusion_classes(e, t, key, c);
    }
    ct_free(e->ctx, img, bytes);
    ct_free(e->ctx, m, sizeof(double) * (size_t)(c * c));
}

static ct_status
on_eval_end(void *user, ct_trainer *t, const char *key, const ct_metric_value *v, int64_t n) {
    ct_experiment *e = user;
    CT_TRY(record(e, t, v, n, NULL, NULL, 0));
    if (e->tb) confusion_image(e, t, key, v, n);
    if (e->jsonl.fd >= 0 && strcmp(ct_exp_str_at(e, "logging.report"), "live") == 0)
        write_report(e, best_step(e, t, v, n), true);
    const ct_trainer_callbacks *cb = &e->p.callbacks;
    return cb->on_eval_end ? cb->on_eval_end(cb->user, t, key, v, n) : CT_OK;
}

/* ---- the events the experiment handles, passed on ---- */

static ct_status fwd_fit_start(void *user, ct_trainer *t) {
    ct_experiment *e = user;
    e->pause_from = 0;
    reset_clock(e, now_seconds());
    e->step_last_log = ct_trainer_step(t);
    e->comm_last_log = ct_trainer_comm_seconds(t);
    const ct_trainer_callbacks *cb = &e->p.callbacks;
    return cb->on_fit_start ? cb->on_fit_start(cb->user, t) : CT_OK;
}

static ct_status fwd_best(void *user, ct_trainer *t, const char *metric, double value) {
    const ct_trainer_callbacks *cb = &((ct_experiment *)user)->p.callbacks;
    return cb->on_best ? cb->on_best(cb->user, t, metric, value) : CT_OK;
}

static ct_status fwd_epoch_end(void *user, ct_trainer *t, int64_t epoch) {
    ct_experiment *e = user;
    if (e->tb && e->hist_every && epoch % e->hist_every == 0) histograms(e, t, false);
    const ct_trainer_callbacks *cb = &e->p.callbacks;
    return cb->on_epoch_end ? cb->on_epoch_end(cb->user, t, epoch) : CT_OK;
}

/* The events the experiment has no use for itself reach the caller's handlers unchanged. */
static ct_status fwd_epoch_start(void *user, ct_trainer *t, int64_t epoch) {
    const ct_trainer_callbacks *cb = &((ct_experiment *)user)->p.callbacks;
    return cb->on_epoch_start ? cb->on_epoch_start(cb->user, t, epoch) : CT_OK;
}

static ct_status fwd_iteration_start(void *user, ct_trainer *t, int64_t batch) {
    run_clock(user);
    const ct_trainer_callbacks *cb = &((ct_experiment *)user)->p.callbacks;
    return cb->on_iteration_start ? cb->on_iteration_start(cb->user, t, batch) : CT_OK;
}

static ct_status fwd_iteration_end(void *user, ct_trainer *t, int64_t batch, double loss) {
    const ct_trainer_callbacks *cb = &((ct_experiment *)user)->p.callbacks;
    return cb->on_iteration_end ? cb->on_iteration_end(cb->user, t, batch, loss) : CT_OK;
}

static ct_status fwd_eval_start(void *user, ct_trainer *t, const char *key) {
    pause_clock(user);
    const ct_trainer_callbacks *cb = &((ct_experiment *)user)->p.callbacks;
    return cb->on_eval_start ? cb->on_eval_start(cb->user, t, key) : CT_OK;
}

static ct_status fwd_fit_end(void *user, ct_trainer *t) {
    const ct_trainer_callbacks *cb = &((ct_experiment *)user)->p.callbacks;
    return cb->on_fit_end ? cb->on_fit_end(cb->user, t) : CT_OK;
}

/* Cuts the record files back to the records of steps up to `step`, reopened for appending. */
static ct_status cut_records(ct_experiment *e, int64_t step) {
    bool csv = e->csv.fd >= 0;
    CT_TRY(ct_exp_record_close(e->ctx, &e->jsonl));
    CT_TRY(ct_exp_record_close(e->ctx, &e->csv));
    char path[1100];
    CT_TRY(ct_exp_truncate_records(e, "metrics.jsonl", step, -1, false, &e->n_lines));
    (void)snprintf(path, sizeof path, "%s/metrics.jsonl", e->out_dir);
    CT_TRY(ct_exp_record_open(e->ctx, &e->jsonl, path, true));
    if (!csv) return CT_OK;
    CT_TRY(ct_exp_truncate_records(e, "metrics.csv", step, -1, true, &e->n_rows));
    (void)snprintf(path, sizeof path, "%s/metrics.csv", e->out_dir);
    return ct_exp_record_open(e->ctx, &e->csv, path, true);
}

/* A rollback abandons the steps after `step`, which are made again: their records go, so that
 * the record files read as the one run that goes on. */
static ct_status fwd_rollback(void *user, ct_trainer *t, int64_t step) {
    ct_experiment *e = user;
    if (e->jsonl.fd >= 0) CT_TRY(cut_records(e, step));
    reset_clock(e, now_seconds());
    e->step_last_log = step;
    e->comm_last_log = ct_trainer_comm_seconds(t);
    const ct_trainer_callbacks *cb = &e->p.callbacks;
    return cb->on_rollback ? cb->on_rollback(cb->user, t, step) : CT_OK;
}

/* Before a checkpoint goes into the run directory: it must still be this run's. */
static ct_status fwd_save(void *user, ct_trainer *t, bool best) {
    ct_experiment *e = user;
    pause_clock(e);
    CT_TRY(ct_exp_rundir_check(e->ctx, &e->run));
    /* what the records hold at this checkpoint: a resume from it cuts them back to this */
    if (e->jsonl.fd >= 0) ct_trainer_set_record_marks(t, e->n_lines, e->n_rows);
    const ct_trainer_callbacks *cb = &e->p.callbacks;
    return cb->on_save ? cb->on_save(cb->user, t, best) : CT_OK;
}

static ct_status fwd_save_file(void *user, ct_trainer *t, const char *file) {
    const ct_trainer_callbacks *cb = &((ct_experiment *)user)->p.callbacks;
    return cb->on_save_file(cb->user, t, file);
}

static void fwd_exception(void *user, ct_trainer *t, ct_status s) {
    const ct_trainer_callbacks *cb = &((ct_experiment *)user)->p.callbacks;
    if (cb->on_exception) cb->on_exception(cb->user, t, s);
}

static ct_status fwd_grads(void *user, ct_trainer *t) {
    ct_experiment *e = user;
    if (e->hist_grads_due) {
        e->hist_grads_due = false;
        histograms(e, t, true);
    }
    const ct_trainer_callbacks *cb = &e->p.callbacks;
    return cb->on_grads ? cb->on_grads(cb->user, t) : CT_OK;
}

static ct_status
fwd_batch(void *user, ct_trainer *t, const char *split, int64_t done, int64_t total, double loss) {
    ct_experiment *e = user;
    /* the epoch's last micro-batch: its window's gradients are the epoch's last */
    if (e->tb && e->hist_every && done == total && strcmp(split, "train") == 0 &&
        (ct_trainer_epoch(t) + 1) % e->hist_every == 0)
        e->hist_grads_due = true;
    const ct_trainer_callbacks *cb = &e->p.callbacks;
    return cb->on_batch ? cb->on_batch(cb->user, t, split, done, total, loss) : CT_OK;
}

static void fwd_incident(void *user, ct_trainer *t, const ct_incident *info) {
    ct_experiment *e = user;
    ct_exp_write_incident(e, info);
    const ct_trainer_callbacks *cb = &e->p.callbacks;
    if (cb->on_incident) cb->on_incident(cb->user, t, info);
}

/* The trainer's events as the experiment handles them: records, reports, histograms and the
 * run directory's check, each then passed on to the caller's handler. */
void ct_exp_wire_callbacks(ct_experiment *e, ct_trainer_callbacks *cb) {
    cb->user = e;
    cb->on_fit_start = fwd_fit_start;
    cb->on_log = on_log;
    cb->on_eval_end = on_eval_end;
    cb->on_best = fwd_best;
    cb->on_epoch_end = fwd_epoch_end;
    cb->on_fit_end = fwd_fit_end;
    cb->on_exception = fwd_exception;
    cb->on_save = fwd_save;
    cb->on_batch = fwd_batch;
    cb->on_rollback = fwd_rollback;
    cb->on_incident = fwd_incident;
    /* the clock of samples_per_sec stops at these and runs again at the next batch */
    cb->on_iteration_start = fwd_iteration_start;
    cb->on_eval_start = fwd_eval_start;
    /* the others only when the caller set them: an unset event costs nothing per batch */
    const ct_trainer_callbacks *ucb = &e->p.callbacks;
    /* gradient histograms read the whole averaged gradient, which a sharded update never
       assembles (ct_update_sharding): decided from the configuration, the same on every rank */
    bool grad_histograms =
        ct_exp_bool_at(e, "logging.tensorboard") && ct_exp_int_at(e, "logging.histogram_every") > 0;
    cb->on_grads = ucb->on_grads || grad_histograms ? fwd_grads : NULL;
    cb->on_epoch_start = ucb->on_epoch_start ? fwd_epoch_start : NULL;
    cb->on_iteration_end = ucb->on_iteration_end ? fwd_iteration_end : NULL;
    cb->on_save_file = ucb->on_save_file ? fwd_save_file : NULL;
}

/* ---- the run directory's records ---- */

/* Whether metrics.jsonl has a record of `step` with a value whose name starts with prefix. */
bool ct_exp_has_record(const ct_experiment *e, const char *prefix, int64_t step) {
    char path[1100], key[80];
    (void)snprintf(path, sizeof path, "%s/metrics.jsonl", e->out_dir);
    (void)snprintf(key, sizeof key, ",\"%s", prefix);
    FILE *f = fopen(path, "r");
    if (!f) return false;
    char *line = NULL;
    size_t cap = 0;
    bool found = false;
    while (!found && getline(&line, &cap, f) > 0) {
        long long s = -1;
        found = sscanf(line, "{\"step\":%lld", &s) == 1 && s == step && strstr(line, key);
    }
    free(line);
    (void)fclose(f);
    return found;
}

/* The first `keep` records, or without a count those of steps up to `step`; a line cut short
 * (no newline) goes in either case. */
ct_status ct_exp_truncate_records(
    ct_experiment *e, const char *name, int64_t step, int64_t keep, bool csv, int64_t *kept) {
    char path[1100], tmp[1100];
    (void)snprintf(path, sizeof path, "%s/%s", e->out_dir, name);
    (void)snprintf(tmp, sizeof tmp, "%s/%s.tmp", e->out_dir, name);
    *kept = 0;
    FILE *in = fopen(path, "r");
    if (!in) return CT_OK;
    FILE *out = fopen(tmp, "w");
    if (!out) {
        (void)fclose(in);
        return CT_FAIL(e->ctx, CT_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    bool first = true;
    while ((len = getline(&line, &cap, in)) > 0) {
        long long s = -1;
        bool header = csv && first, whole = line[len - 1] == '\n';
        bool ok = keep >= 0 ? *kept < keep
                  : csv     ? sscanf(line, "%lld,", &s) == 1 && s <= step
                            : sscanf(line, "{\"step\":%lld", &s) == 1 && s <= step;
        first = false;
        if ((header || ok) && whole) (void)fwrite(line, 1, (size_t)len, out);
        if (ok && whole && !header) ++*kept;
    }
    free(line);
    (void)fclose(in);
    ct_status s = CT_OK;
    if (fflush(out) != 0 || fsync(fileno(out)) != 0)
        s = CT_FAIL(e->ctx, CT_ERR_IO, "%s: write failed: %s", tmp, strerror(errno));
    (void)fclose(out);
    if (s == CT_OK && rename(tmp, path) != 0)
        s = CT_FAIL(e->ctx, CT_ERR_IO, "%s: rename failed: %s", tmp, strerror(errno));
    return s;
}

/* ---- the configuration as TensorBoard's HParams ---- */

/* A sequence's or a map's text in YAML's flow style ("[256, 128]", "{type: hflip, p: 0.5}"),
 * appended at *at, cut with "..." where buf ends. */
static void flow_text(const ct_cfg_node *n, char *buf, size_t size, size_t *at) {
    if (*at + 1 >= size) return;
    int w;
    if (n->kind == CT_CFG_SCALAR)
        w = snprintf(buf + *at, size - *at, n->quoted ? "\"%s\"" : "%s",
                     n->null ? "null" : n->value);
    else
        w = snprintf(buf + *at, size - *at, "%s", n->kind == CT_CFG_SEQ ? "[" : "{");
    *at = w < 0 ? *at : *at + (size_t)w < size ? *at + (size_t)w : size - 1;
    if (n->kind == CT_CFG_SCALAR) goto cut;
    for (const ct_cfg_node *c = n->first; c; c = c->next) {
        if (c != n->first || n->kind == CT_CFG_MAP) {
            w = snprintf(buf + *at, size - *at, "%s%s%s", c != n->first ? ", " : "",
                         n->kind == CT_CFG_MAP ? c->key : "", n->kind == CT_CFG_MAP ? ": " : "");
            *at = w < 0 ? *at : *at + (size_t)w < size ? *at + (size_t)w : size - 1;
        }
        flow_text(c, buf, size, at);
    }
    w = snprintf(buf + *at, size - *at, "%s", n->kind == CT_CFG_SEQ ? "]" : "}");
    *at = w < 0 ? *at : *at + (size_t)w < size ? *at + (size_t)w : size - 1;
cut:
    if (*at + 1 >= size && size > 4) memcpy(buf + size - 4, "...", 4);
}

typedef struct hparam_text {
    char name[256];
    char flow[512];
} hparam_text;

/* The hparams of a config's leaves under n: a dotted key each (a sequence is one value, its
 * flow text; null leaves are left out). A schema key is typed by the schema (a string key
 * that reads as a number stays a string); a component's option by its text: quoted is a
 * string, then a bool, a number, or a string. With hp NULL, only counts. */
static int64_t
collect_hparams(const ct_cfg_node *n, ct_tb_hparam *hp, hparam_text *txt, int64_t k) {
    for (const ct_cfg_node *c = n->first; c; c = c->next) {
        if (c->kind == CT_CFG_MAP && c->n_children > 0) {
            k = collect_hparams(c, hp, txt, k);
            continue;
        }
        if (c->kind == CT_CFG_SCALAR && c->null) continue;
        if (!hp) {
            k++;
            continue;
        }
        ct_tb_hparam *h = &hp[k];
        ct_config_path(c, txt[k].name, sizeof txt[k].name);
        h->name = txt[k].name;
        h->type = CT_TB_HPARAM_STRING;
        h->string = c->value;
        if (c->kind != CT_CFG_SCALAR) {
            size_t at = 0;
            txt[k].flow[0] = '\0';
            flow_text(c, txt[k].flow, sizeof txt[k].flow, &at);
            h->string = txt[k].flow;
            k++;
            continue;
        }
        const ct_key_def *d = ct_exp_schema_find(h->name);
        bool text = c->quoted || (d && (d->type == CT_KEY_STRING || d->type == CT_KEY_ENUM ||
                                        d->type == CT_KEY_PLUGGABLE));
        int b = text ? -1 : ct_exp_parse_bool(c->value);
        if (b >= 0 && (!d || d->type == CT_KEY_BOOL)) {
            h->type = CT_TB_HPARAM_BOOL;
            h->flag = b == 1;
        } else if (!text && (!d || d->type != CT_KEY_BOOL) &&
                   ct_exp_parse_float(c->value, &h->number)) {
            h->type = CT_TB_HPARAM_NUMBER;
        }
        k++;
    }
    return k;
}

/* The session start of this run: every leaf of the resolved configuration (config.yaml). */
static ct_status write_session_start(ct_experiment *e) {
    const ct_cfg_node *root = ct_config_root(e->cfg);
    int64_t n = collect_hparams(root, NULL, NULL, 0);
    size_t bytes = (size_t)(n ? n : 1) * (sizeof(ct_tb_hparam) + sizeof(hparam_text));
    ct_tb_hparam *hp = ct_alloc(e->ctx, bytes);
    if (!hp) return CT_FAIL(e->ctx, CT_ERR_OOM, "tensorboard: out of memory for the hparams");
    memset(hp, 0, bytes);
    hparam_text *txt = (hparam_text *)(void *)(hp + (n ? n : 1));
    n = collect_hparams(root, hp, txt, 0);
    ct_status s = ct_tb_session_start(e->tb, hp, n, 0);
    ct_free(e->ctx, hp, bytes);
    return s;
}

void ct_exp_end_tensorboard(ct_experiment *e, ct_status s) {
    if (!e->tb) return;
    /* api.proto's Status has no "stopped": a run stopped by a signal, which a later fit
       resumes, ends as unknown */
    ct_tb_session_status st = s != CT_OK && s != CT_STOP ? CT_TB_SESSION_FAILURE
                              : e->trainer && ct_trainer_interrupted(e->trainer)
                                  ? CT_TB_SESSION_UNKNOWN
                                  : CT_TB_SESSION_SUCCESS;
    /* the caller reports the run's own failure: a failed write here only warns, and leaves
       the context's message as the run left it */
    char msg[CT_ERRMSG_SIZE];
    memcpy(msg, e->ctx->errmsg, sizeof msg);
    ct_status last = e->ctx->last_status;
    if (ct_tb_session_end(e->tb, st, 0) != CT_OK || ct_tb_flush(e->tb) != CT_OK) tb_failed(e);
    memcpy(e->ctx->errmsg, msg, sizeof msg);
    e->ctx->last_status = last;
}

/* A new events file per process (TensorBoard reads every one in the directory), starting with
 * the resolved configuration as text and as the session start of the HParams view. A resumed
 * run (append) first takes the hparams records out of the earlier files: TensorBoard keeps a
 * run's first session start and end, and the resumed run's are the ones that hold. */
static ct_status open_tensorboard(ct_experiment *e, bool append) {
    if (append && ct_tb_remove_hparams(e->ctx, e->out_dir) != CT_OK)
        ct_log(e->ctx, CT_LOG_WARN,
               "tensorboard: %s; the HParams view may show the run's earlier start or end",
               ct_last_error(e->ctx));
    CT_TRY(ct_tb_open(e->ctx, e->out_dir, NULL, 0, &e->tb));
    e->hist_every = ct_exp_int_at(e, "logging.histogram_every");
    char *yaml = NULL;
    size_t len = 0;
    CT_TRY(ct_config_to_string(e->cfg, &yaml, &len));
    /* the text plugin renders Markdown: indented four spaces, the YAML shows as code */
    size_t lines = 1;
    for (size_t i = 0; i < len; i++)
        lines += yaml[i] == '\n';
    size_t cap = len + 4 * lines + 1;
    char *md = ct_alloc(e->ctx, cap);
    ct_status s = md ? CT_OK : CT_FAIL(e->ctx, CT_ERR_OOM, "tensorboard: out of memory");
    if (md) {
        size_t at = 0;
        bool bol = true;
        for (size_t i = 0; i < len; i++) {
            if (bol) {
                memcpy(md + at, "    ", 4);
                at += 4;
            }
            md[at++] = yaml[i];
            bol = yaml[i] == '\n';
        }
        md[at] = '\0';
        s = ct_tb_text(e->tb, "config", ct_trainer_step(e->trainer), 0, md);
        if (s == CT_OK) s = write_session_start(e);
        if (s == CT_OK) s = ct_tb_flush(e->tb);
        ct_free(e->ctx, md, cap);
    }
    ct_free(e->ctx, yaml, len + 1);
    return s;
}

ct_status ct_exp_open_records(ct_experiment *e, bool append) {
    char path[1100];
    e->rec_cap = 4096; /* grown by rec_add when a record needs more */
    if (!(e->rec = ct_alloc(e->ctx, e->rec_cap))) {
        e->rec_cap = 0;
        return CT_FAIL(e->ctx, CT_ERR_OOM, "out of memory for the records' buffer");
    }
    (void)snprintf(path, sizeof path, "%s/metrics.jsonl", e->out_dir);
    CT_TRY(ct_exp_record_open(e->ctx, &e->jsonl, path, append));
    if (ct_exp_bool_at(e, "logging.csv")) {
        (void)snprintf(path, sizeof path, "%s/metrics.csv", e->out_dir);
        bool fresh = !append || access(path, F_OK) != 0;
        CT_TRY(ct_exp_record_open(e->ctx, &e->csv, path, append));
        static const char header[] = "step,epoch,time,metric,value\n";
        if (fresh) CT_TRY(ct_exp_record_put(e->ctx, &e->csv, header, sizeof header - 1));
    }
    /* TensorBoard is a view: a failure to start it is a warning, as a failure to write it */
    if (ct_exp_bool_at(e, "logging.tensorboard") && open_tensorboard(e, append) != CT_OK) {
        if (e->tb)
            tb_failed(e);
        else
            ct_log(e->ctx, CT_LOG_WARN, "tensorboard: %s; no events are written",
                   ct_last_error(e->ctx));
    }
    return CT_OK;
}

/* Closes the record files, reporting the first failure. */
ct_status ct_exp_close_records(ct_experiment *e) {
    ct_status a = ct_exp_record_close(e->ctx, &e->jsonl);
    ct_status b = ct_exp_record_close(e->ctx, &e->csv);
    return a != CT_OK ? a : b;
}

/* The records' resources: the files (a failure to close them is not reported), the buffer and
 * the TensorBoard writer. */
void ct_exp_release_records(ct_experiment *e) {
    (void)ct_exp_close_records(e);
    ct_free(e->ctx, e->rec, e->rec_cap);
    e->rec = NULL;
    e->rec_cap = 0;
    ct_tb_close(e->tb);
    e->tb = NULL;
}
