/*
 * test_experiment_embed.c - the experiment API for other languages (embed.c): a configuration
 * loaded with overrides from a file or a run directory, a bad override refused naming its key;
 * a fit's progress reported as events with the trainer's values, and ended early by CT_STOP;
 * predictions for samples in memory that equal the .npy predictions of the same samples, and
 * what they refuse.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctrain/config.h"
#include "ctrain/ctrain.h"
#include "ctrain/experiment.h"
#include "harness.h"

static ct_ctx *ctx;
static char root[] = "/tmp/ct_experiment_embed_XXXXXX";

#define CLASSIFIER                                                                                 \
    "seed: 3\n"                                                                                    \
    "data:\n"                                                                                      \
    "  train: {type: synthetic, kind: blobs, n: 90, features: 4, classes: 3}\n"                    \
    "  valid: {split: 0.2}\n"                                                                      \
    "  batch_size: 12\n"                                                                           \
    "  transforms: [{type: scale, a: 0.5, b: 1}]\n"                                                \
    "model: {type: mlp, hidden: [6]}\n"                                                            \
    "trainer: {max_epochs: 2, steps_per_loop: 2}\n"                                                \
    "logging: {progress: none}\n"

/* Writes CLASSIFIER with output_dir <root>/<name> to <root>/<name>.yaml, its path into buf. */
static void write_experiment(const char *name, char *buf, size_t size) {
    (void)snprintf(buf, size, "%s/%s.yaml", root, name);
    FILE *f = fopen(buf, "w");
    CT_CHECK(f != NULL);
    if (!f) return;
    (void)fprintf(f, CLASSIFIER "output_dir: %s/%s\n", root, name);
    CT_CHECK(fclose(f) == 0);
}

static void experiment_load_config_should_apply_overrides_and_name_a_bad_key(void) {
    char path[512];
    write_experiment("overrides", path, sizeof path);
    const char *ov[] = {"trainer.max_epochs=5", "optimizer.lr=0.25"};
    ct_config *cfg = NULL;
    CT_CHECK_MSG(ct_experiment_load_config(ctx, path, ov, 2, &cfg) == CT_OK, "%s",
                 ct_last_error(ctx));
    const ct_cfg_node *root_node = cfg ? ct_config_root(cfg) : NULL;
    const ct_cfg_node *epochs = root_node ? ct_config_find(root_node, "trainer.max_epochs") : NULL;
    const ct_cfg_node *lr = root_node ? ct_config_find(root_node, "optimizer.lr") : NULL;
    CT_CHECK(epochs && strcmp(epochs->value, "5") == 0);
    CT_CHECK(lr && strcmp(lr->value, "0.25") == 0);
    /* resolved: a default the file does not give is there */
    CT_CHECK(root_node && ct_config_find(root_node, "trainer.accum_steps") != NULL);
    ct_config_destroy(cfg);

    const char *bad[] = {"trainer.max_epoch=5"};
    cfg = (ct_config *)1;
    CT_CHECK(ct_experiment_load_config(ctx, path, bad, 1, &cfg) == CT_ERR_CONFIG);
    CT_CHECK(cfg == NULL);
    CT_CHECK_MSG(strstr(ct_last_error(ctx), "max_epoch") != NULL, "%s", ct_last_error(ctx));

    char dir[512];
    (void)snprintf(dir, sizeof dir, "%s", root);
    CT_CHECK(ct_experiment_load_config(ctx, dir, NULL, 0, &cfg) == CT_ERR_IO);
    CT_CHECK_MSG(strstr(ct_last_error(ctx), "without config.yaml") != NULL, "%s",
                 ct_last_error(ctx));
}

/* What the progress callback saw. */
typedef struct seen {
    int logs, evals, epochs, ends, batches;
    int64_t last_step, last_epoch;
    bool loss_in_log, acc_in_eval, end_was_last, bad_batch;
    int stop_at_log;   /* return CT_STOP at this log event (1-based); 0 = never */
    int stop_at_batch; /* likewise at this batch event */
} seen;

static ct_status progress(void *user,
                          const char *event,
                          int64_t step,
                          int64_t epoch,
                          const ct_metric_value *values,
                          int64_t n) {
    seen *s = user;
    s->end_was_last = false;
    s->last_step = step;
    s->last_epoch = epoch;
    if (strcmp(event, "log") == 0) {
        s->logs++;
        for (int64_t i = 0; i < n; i++)
            if (strcmp(values[i].name, "train/loss") == 0 && isfinite(values[i].value))
                s->loss_in_log = true;
        if (s->stop_at_log && s->logs == s->stop_at_log) return CT_STOP;
    } else if (strcmp(event, "eval") == 0) {
        s->evals++;
        for (int64_t i = 0; i < n; i++)
            if (strcmp(values[i].name, "valid/acc") == 0) s->acc_in_eval = true;
    } else if (strcmp(event, "batch") == 0) {
        s->batches++;
        bool ok = n == 3 && strcmp(values[0].name, "loss") == 0 && isfinite(values[0].value) &&
                  strcmp(values[1].name, "batch") == 0 &&
                  values[1].value == (double)((s->batches - 1) % 6 + 1) &&
                  strcmp(values[2].name, "batches") == 0 && values[2].value == 6;
        if (!ok) s->bad_batch = true;
        if (s->stop_at_batch && s->batches == s->stop_at_batch) return CT_STOP;
    } else if (strcmp(event, "epoch") == 0) {
        s->epochs++;
    } else if (strcmp(event, "end") == 0) {
        s->ends++;
        s->end_was_last = true;
    }
    return CT_OK;
}

/* Fits the experiment at path (overrides ov) with progress into *s: the trainer's final step,
 * or -1 on failure. */
static int64_t fit_with_progress(const char *path, const char *const *ov, int64_t n, seen *s) {
    ct_config *cfg = NULL;
    ct_experiment *e = NULL;
    ct_experiment_progress p = {progress, s};
    ct_status st = ct_experiment_load_config(ctx, path, ov, n, &cfg);
    if (st == CT_OK) st = ct_experiment_open(ctx, cfg, CT_EXPERIMENT_RESTART, &p, &e);
    if (st == CT_OK) st = ct_experiment_fit(e);
    CT_CHECK_MSG(st == CT_OK, "%s", ct_last_error(ctx));
    int64_t step = st == CT_OK ? ct_trainer_step(ct_experiment_trainer(e)) : -1;
    ct_experiment_destroy(e);
    ct_config_destroy(cfg);
    return step;
}

static void experiment_open_should_report_progress_and_stop_when_asked(void) {
    char path[512];
    write_experiment("progress", path, sizeof path);
    seen s = {0};
    int64_t steps = fit_with_progress(path, NULL, 0, &s);
    CT_CHECK_INT(steps, 12); /* 72 training samples, batches of 12, 2 epochs */
    CT_CHECK_INT(s.logs, 6);
    CT_CHECK_INT(s.evals, 2);
    CT_CHECK_INT(s.epochs, 2);
    CT_CHECK_INT(s.ends, 1);
    CT_CHECK_INT(s.batches, 12);
    CT_CHECK(!s.bad_batch);
    CT_CHECK(s.loss_in_log && s.acc_in_eval && s.end_was_last);
    CT_CHECK_INT(s.last_step, 12);
    CT_CHECK_INT(s.last_epoch, 2);

    seen stop = {.stop_at_log = 2};
    CT_CHECK_INT(fit_with_progress(path, NULL, 0, &stop), 4);
    CT_CHECK_INT(stop.logs, 2);
    seen interrupt = {.stop_at_batch = 3}; /* the step ends, with its checkpoint */
    CT_CHECK_INT(fit_with_progress(path, NULL, 0, &interrupt), 3);
    CT_CHECK_INT(interrupt.batches, 3);

    ct_config *cfg = NULL;
    ct_experiment *e = NULL;
    ct_experiment_progress none = {NULL, NULL};
    CT_CHECK(ct_experiment_load_config(ctx, path, NULL, 0, &cfg) == CT_OK);
    CT_CHECK(cfg && ct_experiment_open(ctx, cfg, 0, &none, &e) == CT_ERR_INVALID_ARG && !e);
    CT_CHECK(cfg && ct_experiment_open(ctx, cfg, 8u, NULL, &e) == CT_ERR_INVALID_ARG && !e);
    ct_config_destroy(cfg);
}

/* A float32 .npy array [rows, cols] of x. */
static bool write_npy(const char *path, const float *x, int rows, int cols) {
    char dict[128];
    int len = snprintf(dict, sizeof dict,
                       "{'descr': '<f4', 'fortran_order': False, 'shape': (%d, %d), }", rows, cols);
    int pad = (64 - (10 + len + 1) % 64) % 64;
    FILE *f = fopen(path, "wb");
    if (!f) return false;
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(len + pad + 1),
                             0};
    bool ok = fwrite(pre, 1, 10, f) == 10 && fwrite(dict, 1, (size_t)len, f) == (size_t)len &&
              fprintf(f, "%*s\n", pad, "") == pad + 1 &&
              fwrite(x, sizeof(float), (size_t)(rows * cols), f) == (size_t)(rows * cols);
    return fclose(f) == 0 && ok;
}

/* The float data of a .npy file written by predict (n of them at most); how many it holds. */
static int read_npy(const char *path, float *out, int n) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    unsigned char pre[10];
    int got = -1;
    if (fread(pre, 1, 10, f) == 10 && fseek(f, pre[8] | pre[9] << 8, SEEK_CUR) == 0)
        got = (int)fread(out, sizeof(float), (size_t)n, f);
    (void)fclose(f);
    return got;
}

static void experiment_predict_array_should_equal_the_npy_predictions(void) {
    char path[512];
    write_experiment("predict", path, sizeof path);
    seen s = {0};
    CT_CHECK_INT(fit_with_progress(path, NULL, 0, &s), 12);
    ct_config *cfg = NULL;
    ct_experiment *e = NULL;
    ct_status st = ct_experiment_load_config(ctx, path, NULL, 0, &cfg);
    if (st == CT_OK) st = ct_experiment_open(ctx, cfg, CT_EXPERIMENT_READ_ONLY, NULL, &e);
    if (st == CT_OK) st = ct_experiment_load(e, "latest", NULL);
    CT_CHECK_MSG(st == CT_OK, "%s", ct_last_error(ctx));
    if (st != CT_OK) {
        ct_experiment_destroy(e);
        ct_config_destroy(cfg);
        return;
    }
    CT_CHECK_INT(ct_experiment_output_size(e), 3);
    enum { N = 25 }; /* more than one evaluation batch (12) */
    float x[N * 4];
    for (int i = 0; i < N * 4; i++)
        x[i] = (float)i * 0.37f - 9.0f;
    char in[600], out[600];
    (void)snprintf(in, sizeof in, "%s/x.npy", root);
    (void)snprintf(out, sizeof out, "%s/p.npy", root);
    CT_CHECK(write_npy(in, x, N, 4));
    CT_CHECK_MSG(ct_experiment_predict(e, in, out) == CT_OK, "%s", ct_last_error(ctx));
    float from_file[N * 3], from_memory[N * 3], logits[N * 3];
    CT_CHECK_INT(read_npy(out, from_file, N * 3), N * 3);
    const int64_t shape[] = {4};
    CT_CHECK_MSG(ct_experiment_predict_array(e, x, N, shape, 1, false, from_memory, N * 3) == CT_OK,
                 "%s", ct_last_error(ctx));
    CT_CHECK(memcmp(from_file, from_memory, sizeof from_file) == 0);
    CT_CHECK(ct_experiment_predict_array(e, x, N, shape, 1, true, logits, N * 3) == CT_OK);
    for (int i = 0; i < N; i++) {
        double sum = 0;
        for (int j = 0; j < 3; j++)
            sum += exp((double)logits[i * 3 + j]);
        CT_CHECK_CLOSE(exp((double)logits[i * 3]) / sum, (double)from_memory[i * 3], 1e-6, 1e-6);
    }

    /* refused: another sample shape, too little room, a NaN */
    const int64_t wrong[] = {2, 2};
    CT_CHECK(ct_experiment_predict_array(e, x, N, wrong, 2, false, from_memory, N * 3) ==
             CT_ERR_SHAPE);
    CT_CHECK_MSG(strstr(ct_last_error(ctx), "[2, 2]") && strstr(ct_last_error(ctx), "[4]"), "%s",
                 ct_last_error(ctx));
    CT_CHECK(ct_experiment_predict_array(e, x, N, shape, 1, false, from_memory, N * 3 - 1) ==
             CT_ERR_SHAPE);
    x[6] = NAN;
    CT_CHECK(ct_experiment_predict_array(e, x, N, shape, 1, false, from_memory, N * 3) ==
             CT_ERR_FORMAT);
    CT_CHECK_MSG(strstr(ct_last_error(ctx), "sample 1, feature 2"), "%s", ct_last_error(ctx));
    ct_experiment_destroy(e);
    ct_config_destroy(cfg);
}

int main(void) {
    if (!mkdtemp(root) || ct_ctx_create(NULL, &ctx) != CT_OK) return 1;
    (void)ct_ctx_set_threads(ctx, 2);
    CT_RUN(experiment_load_config_should_apply_overrides_and_name_a_bad_key);
    CT_RUN(experiment_open_should_report_progress_and_stop_when_asked);
    CT_RUN(experiment_predict_array_should_equal_the_npy_predictions);
    ct_ctx_destroy(ctx);
    char cmd[128];
    (void)snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    if (system(cmd) != 0) return 1;
    return ct_test_finish();
}
