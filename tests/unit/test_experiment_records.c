/*
 * test_experiment_records.c - what a fit records and how it hears the trainer (records.c): the
 * caller's handlers get every event through the experiment's, with the caller's user pointer;
 * per-batch events are wired only when someone listens; every on_log and every evaluation is
 * one record of metrics.jsonl, the same values as metrics.csv's rows; and a resume's cut of the
 * records keeps the steps up to its checkpoint, metrics.csv's header and no partial line; and
 * the mark of a finished run reads back (finished.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ctrain/config.h"
#include "ctrain/ctrain.h"
#include "ctrain/experiment.h"
#include "experiment/experiment_internal.h"
#include "harness.h"

static ct_ctx *ctx;
static char root[] = "/tmp/ct_experiment_records_XXXXXX";

/* The events the caller's handlers saw. */
typedef struct heard {
    int fit_start, fit_end, epoch_start, epoch_end, iteration_start, iteration_end;
    int eval_start[2], eval_end[2]; /* valid, test */
    int log, best, save, batch, grads, exception;
} heard;

static heard *me(void *user) {
    return user;
}
static int engine(const char *key) {
    return strcmp(key, "test") == 0 ? 1 : 0;
}
static ct_status fit_start(void *user, ct_trainer *t) {
    (void)t;
    me(user)->fit_start++;
    return CT_OK;
}
static ct_status fit_end(void *user, ct_trainer *t) {
    (void)t;
    me(user)->fit_end++;
    return CT_OK;
}
static ct_status epoch_start(void *user, ct_trainer *t, int64_t epoch) {
    (void)t, (void)epoch;
    me(user)->epoch_start++;
    return CT_OK;
}
static ct_status epoch_end(void *user, ct_trainer *t, int64_t epoch) {
    (void)t, (void)epoch;
    me(user)->epoch_end++;
    return CT_OK;
}
static ct_status iteration_start(void *user, ct_trainer *t, int64_t batch) {
    (void)t, (void)batch;
    me(user)->iteration_start++;
    return CT_OK;
}
static ct_status iteration_end(void *user, ct_trainer *t, int64_t batch, double loss) {
    (void)t, (void)batch, (void)loss;
    me(user)->iteration_end++;
    return CT_OK;
}
static ct_status eval_start(void *user, ct_trainer *t, const char *key) {
    (void)t;
    me(user)->eval_start[engine(key)]++;
    return CT_OK;
}
static ct_status
eval_end(void *user, ct_trainer *t, const char *key, const ct_metric_value *v, int64_t n) {
    (void)t, (void)v, (void)n;
    me(user)->eval_end[engine(key)]++;
    return CT_OK;
}
static ct_status on_log(void *user, ct_trainer *t, const ct_metric_value *v, int64_t n) {
    (void)t, (void)v, (void)n;
    me(user)->log++;
    return CT_OK;
}
static ct_status best(void *user, ct_trainer *t, const char *metric, double value) {
    (void)t, (void)metric, (void)value;
    me(user)->best++;
    return CT_OK;
}
static ct_status save(void *user, ct_trainer *t, bool is_best) {
    (void)t, (void)is_best;
    me(user)->save++;
    return CT_OK;
}
static ct_status
batch(void *user, ct_trainer *t, const char *split, int64_t done, int64_t total, double loss) {
    (void)t, (void)split, (void)done, (void)total, (void)loss;
    me(user)->batch++;
    return CT_OK;
}
static ct_status grads(void *user, ct_trainer *t) {
    (void)t;
    me(user)->grads++;
    return CT_OK;
}
static void exception(void *user, ct_trainer *t, ct_status s) {
    (void)t, (void)s;
    me(user)->exception++;
}

static ct_trainer_callbacks all_handlers(heard *h) {
    ct_trainer_callbacks cb = {0};
    cb.user = h;
    cb.on_fit_start = fit_start;
    cb.on_fit_end = fit_end;
    cb.on_epoch_start = epoch_start;
    cb.on_epoch_end = epoch_end;
    cb.on_iteration_start = iteration_start;
    cb.on_iteration_end = iteration_end;
    cb.on_eval_start = eval_start;
    cb.on_eval_end = eval_end;
    cb.on_log = on_log;
    cb.on_best = best;
    cb.on_save = save;
    cb.on_batch = batch;
    cb.on_grads = grads;
    cb.on_exception = exception;
    return cb;
}

/* 160 training samples in batches of 20 (8 steps an epoch), a validation split and a test set;
 * `extra` adds keys at the top level. */
static ct_status open_run(const char *dir,
                          const char *extra,
                          const ct_trainer_callbacks *cb,
                          ct_config **cfg,
                          ct_experiment **e) {
    char text[1536];
    (void)snprintf(text, sizeof text,
                   "model: {type: mlp, hidden: [8]}\n"
                   "data:\n"
                   "  batch_size: 20\n"
                   "  train: {type: synthetic, kind: blobs, n: 200, features: 4, classes: 3}\n"
                   "  valid: {split: 0.2}\n"
                   "  test: {type: synthetic, kind: blobs, n: 60, features: 4, classes: 3}\n"
                   "output_dir: %s\n"
                   "%s",
                   dir, extra);
    ct_experiment_params p = ct_experiment_default_params();
    if (cb) p.callbacks = *cb;
    *cfg = NULL;
    *e = NULL;
    ct_status s = ct_config_load_string(ctx, "exp.yaml", text, strlen(text), cfg);
    if (s == CT_OK) s = ct_experiment_resolve(ctx, *cfg);
    if (s == CT_OK) s = ct_experiment_create(ctx, *cfg, &p, e);
    CT_CHECK_MSG(s == CT_OK, "%s", ct_last_error(ctx));
    return s;
}

/* The lines of a file (0 when it cannot be read), those holding `part` (all when NULL). */
static int count_lines(const char *path, const char *part) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[8192];
    int n = 0;
    while (fgets(line, sizeof line, f))
        n += !part || strstr(line, part) != NULL;
    (void)fclose(f);
    return n;
}

static void experiment_records_should_pass_every_event_on_to_the_callers_handlers(void) {
    char dir[128];
    (void)snprintf(dir, sizeof dir, "%s/events", root);
    heard h;
    memset(&h, 0, sizeof h);
    ct_trainer_callbacks cb = all_handlers(&h);
    ct_config *cfg;
    ct_experiment *e;
    if (open_run(dir,
                 "trainer: {max_epochs: 2, steps_per_loop: 5}\n"
                 "logging: {progress: none, csv: true}\n",
                 &cb, &cfg, &e) == CT_OK)
        CT_CHECK_MSG(ct_experiment_fit(e) == CT_OK, "%s", ct_last_error(ctx));
    CT_CHECK_INT(h.fit_start, 1);
    CT_CHECK_INT(h.fit_end, 1);
    CT_CHECK_INT(h.epoch_start, 2);
    CT_CHECK_INT(h.epoch_end, 2);
    CT_CHECK_INT(h.iteration_start, 16);
    CT_CHECK_INT(h.iteration_end, 16);
    CT_CHECK_INT(h.grads, 16);
    CT_CHECK_INT(h.eval_start[0], 2); /* valid after each epoch */
    CT_CHECK_INT(h.eval_end[0], 2);
    CT_CHECK_INT(h.eval_start[1], 1); /* test once, when training ends */
    CT_CHECK_INT(h.eval_end[1], 1);
    CT_CHECK(h.best >= 1 && h.best <= 2);
    CT_CHECK(h.save >= 2);
    CT_CHECK(h.log >= 3); /* steps 5, 10, 15 at least */
    CT_CHECK(h.batch >= 16 + 2 * 2 + 3);
    CT_CHECK_INT(h.exception, 0);
    /* each on_log and each evaluation is one record; metrics.csv has a row per value */
    char path[256];
    (void)snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    CT_CHECK_INT(count_lines(path, NULL), h.log + h.eval_end[0] + h.eval_end[1]);
    CT_CHECK_INT(count_lines(path, "\"train/loss\":"), h.log);
    CT_CHECK_INT(count_lines(path, "\"valid/loss\":"), 2);
    CT_CHECK_INT(count_lines(path, "\"test/loss\":"), 1);
    int values = count_lines(path, NULL) == 0 ? -1 : 0;
    FILE *f = fopen(path, "r");
    char line[8192];
    while (f && fgets(line, sizeof line, f))
        for (const char *c = line; (c = strstr(c, "\":")); c += 2)
            values++;
    if (f) (void)fclose(f);
    (void)snprintf(path, sizeof path, "%s/metrics.csv", dir);
    /* every value but step, epoch and time, and the header */
    CT_CHECK_INT(count_lines(path, NULL), values - 3 * (h.log + 3) + 1);
    CT_CHECK_INT(count_lines(path, "step,epoch,time,metric,value"), 1);
    ct_experiment_destroy(e);
    ct_config_destroy(cfg);
}

/* Per-batch events cost a call only when the caller listens, or gradient histograms need them;
 * the experiment's own handlers are always there (on_iteration_start and on_eval_start among
 * them: the clock of samples_per_sec). */
static void experiment_records_should_wire_only_the_events_someone_listens_to(void) {
    char dir[128];
    (void)snprintf(dir, sizeof dir, "%s/wiring", root);
    ct_config *cfg;
    ct_experiment *e;
    if (open_run(dir, "", NULL, &cfg, &e) == CT_OK) {
        const ct_trainer_callbacks *cb = &e->tp.callbacks;
        CT_CHECK(cb->user == e);
        CT_CHECK(cb->on_log && cb->on_eval_end && cb->on_fit_start && cb->on_fit_end &&
                 cb->on_save && cb->on_batch && cb->on_best && cb->on_epoch_end &&
                 cb->on_exception && cb->on_rollback && cb->on_iteration_start &&
                 cb->on_eval_start);
        CT_CHECK(!cb->on_grads && !cb->on_epoch_start && !cb->on_iteration_end);
    }
    ct_experiment_destroy(e);
    ct_config_destroy(cfg);
    heard h;
    memset(&h, 0, sizeof h);
    ct_trainer_callbacks mine = {0};
    mine.user = &h;
    mine.on_iteration_end = iteration_end;
    if (open_run(dir, "logging: {tensorboard: true, histogram_every: 2}\n", &mine, &cfg, &e) ==
        CT_OK) {
        const ct_trainer_callbacks *cb = &e->tp.callbacks;
        CT_CHECK(cb->user == e);        /* the caller's user reaches the caller's handlers only */
        CT_CHECK(cb->on_grads != NULL); /* the histograms' */
        CT_CHECK(cb->on_iteration_end != NULL && cb->on_iteration_end != iteration_end);
        CT_CHECK(!cb->on_epoch_start);
    }
    ct_experiment_destroy(e);
    ct_config_destroy(cfg);
}

static bool write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f) return false;
    bool ok = fputs(text, f) >= 0;
    return fclose(f) == 0 && ok;
}

static char *read_file(const char *path, char *buf, size_t size) {
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, size - 1, f) : 0;
    buf[n] = '\0';
    if (f) (void)fclose(f);
    return buf;
}

/* A resume from the checkpoint of step 10 redoes what came after: the records of later steps
 * go, and so does a record cut short by the kill that stopped the run (its step's evaluation
 * is made again). */
static void experiment_records_should_cut_the_records_back_to_a_step(void) {
    char dir[128], jsonl[256], csv[256], got[1024];
    (void)snprintf(dir, sizeof dir, "%s/cut", root);
    (void)snprintf(jsonl, sizeof jsonl, "%s/metrics.jsonl", dir);
    (void)snprintf(csv, sizeof csv, "%s/metrics.csv", dir);
    ct_config *cfg;
    ct_experiment *e;
    if (open_run(dir, "", NULL, &cfg, &e) != CT_OK) return;
    CT_CHECK(mkdir(dir, 0777) == 0);
    CT_CHECK(write_file(jsonl, "{\"step\":5,\"epoch\":0,\"time\":1.0,\"train/loss\":1}\n"
                               "{\"step\":10,\"epoch\":1,\"time\":2.0,\"test/loss\":0.5}\n"
                               "{\"step\":15,\"epoch\":1,\"time\":3.0,\"train/loss\":0.4}\n"
                               "{\"step\":10,\"epoch\":1,\"time\":2.5,\"valid/lo"));
    CT_CHECK(write_file(csv, "step,epoch,time,metric,value\n"
                             "5,0,1.000,train/loss,1\n"
                             "10,1,2.000,test/loss,0.5\n"
                             "15,1,3.000,train/loss,0.4\n"
                             "10,1,2.500,valid/lo"));
    CT_CHECK(ct_exp_has_record(e, "test/", 10));
    CT_CHECK(!ct_exp_has_record(e, "test/", 5));
    CT_CHECK(!ct_exp_has_record(e, "train/", 10));
    int64_t kept = -1;
    CT_CHECK(ct_exp_truncate_records(e, "metrics.jsonl", 10, -1, false, &kept) == CT_OK);
    CT_CHECK(kept == 2);
    CT_CHECK(ct_exp_truncate_records(e, "metrics.csv", 10, -1, true, &kept) == CT_OK);
    CT_CHECK(kept == 2);
    CT_CHECK_MSG(strcmp(read_file(jsonl, got, sizeof got),
                        "{\"step\":5,\"epoch\":0,\"time\":1.0,\"train/loss\":1}\n"
                        "{\"step\":10,\"epoch\":1,\"time\":2.0,\"test/loss\":0.5}\n") == 0,
                 "%s", got);
    CT_CHECK_MSG(strcmp(read_file(csv, got, sizeof got), "step,epoch,time,metric,value\n"
                                                         "5,0,1.000,train/loss,1\n"
                                                         "10,1,2.000,test/loss,0.5\n") == 0,
                 "%s", got);
    /* by the count a checkpoint kept: the records written after it go, even of its own step */
    CT_CHECK(ct_exp_truncate_records(e, "metrics.jsonl", 10, 1, false, &kept) == CT_OK);
    CT_CHECK(kept == 1);
    CT_CHECK_MSG(strcmp(read_file(jsonl, got, sizeof got),
                        "{\"step\":5,\"epoch\":0,\"time\":1.0,\"train/loss\":1}\n") == 0,
                 "%s", got);
    CT_CHECK(ct_exp_truncate_records(e, "metrics.csv", 10, 1, true, &kept) == CT_OK);
    CT_CHECK(kept == 1);
    CT_CHECK_MSG(strcmp(read_file(csv, got, sizeof got), "step,epoch,time,metric,value\n"
                                                         "5,0,1.000,train/loss,1\n") == 0,
                 "%s", got);
    /* no record file: nothing to cut */
    CT_CHECK(remove(csv) == 0);
    CT_CHECK(ct_exp_truncate_records(e, "metrics.csv", 10, -1, true, &kept) == CT_OK);
    CT_CHECK(kept == 0);
    CT_CHECK(access(csv, F_OK) != 0);
    ct_experiment_destroy(e);
    ct_config_destroy(cfg);
}

/* RUN/finished.json as ct_experiment_run_finished reads it: missing is "not finished", fit's
 * JSON gives the step, anything else is CT_ERR_FORMAT naming the file. */
static void experiment_should_read_the_finished_mark(void) {
    char dir[128], path[160];
    (void)snprintf(dir, sizeof dir, "%s/marked", root);
    (void)snprintf(path, sizeof path, "%s/finished.json", dir);
    CT_CHECK(mkdir(dir, 0777) == 0);
    bool finished = true;
    int64_t step = 0;
    CT_CHECK(ct_experiment_run_finished(ctx, dir, &finished, &step) == CT_OK);
    CT_CHECK(!finished && step == -1);
    FILE *f = fopen(path, "w");
    CT_CHECK(f != NULL);
    if (!f) return;
    (void)fputs("{\"step\":40,\"epoch\":2,\"early_stopped\":false}\n", f);
    (void)fclose(f);
    CT_CHECK(ct_experiment_run_finished(ctx, dir, &finished, &step) == CT_OK);
    CT_CHECK(finished);
    CT_CHECK_INT(step, 40);
    f = fopen(path, "w"); /* cut short: what a copy in progress shows */
    CT_CHECK(f != NULL);
    if (!f) return;
    (void)fputs("{\"step\":4", f);
    (void)fclose(f);
    CT_CHECK(ct_experiment_run_finished(ctx, dir, &finished, &step) == CT_ERR_FORMAT);
    CT_CHECK(!finished && step == -1);
    CT_CHECK(strstr(ct_last_error(ctx), "finished.json") != NULL);
}

int main(void) {
    if (!mkdtemp(root) || ct_ctx_create(NULL, &ctx) != CT_OK) return 1;
    CT_RUN(experiment_records_should_pass_every_event_on_to_the_callers_handlers);
    CT_RUN(experiment_records_should_wire_only_the_events_someone_listens_to);
    CT_RUN(experiment_records_should_cut_the_records_back_to_a_step);
    CT_RUN(experiment_should_read_the_finished_mark);
    ct_ctx_destroy(ctx);
    char cmd[128];
    (void)snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    if (system(cmd) != 0) return 1;
    return ct_test_finish();
}
