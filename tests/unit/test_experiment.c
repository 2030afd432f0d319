/*
 * test_experiment.c - experiments driven from C (the command line's path without the tool):
 * one process fits a run directory, destroys the experiment and fits it again (a resume),
 * which needs the first experiment's lock on the directory released at destroy and only then.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctrain/config.h"
#include "ctrain/ctrain.h"
#include "ctrain/experiment.h"
#include "harness.h"

static ct_ctx *ctx;

/* The experiment borrows its config: *cfg is destroyed after it. */
static ct_experiment *open_experiment(const char *dir, int64_t epochs, ct_config **cfg) {
    char text[1024];
    (void)snprintf(text, sizeof text,
                   "seed: 1\n"
                   "output_dir: %s\n"
                   "data:\n"
                   "  train: {type: synthetic, kind: blobs, n: 200, features: 4, classes: 3}\n"
                   "  batch_size: 20\n"
                   "model: {type: mlp, hidden: [8]}\n"
                   "trainer: {max_epochs: %lld}\n"
                   "logging: {progress: none}\n",
                   dir, (long long)epochs);
    ct_config *c = NULL;
    ct_experiment *e = NULL;
    ct_status s = ct_config_load_string(ctx, "exp.yaml", text, strlen(text), &c);
    if (s == CT_OK) s = ct_experiment_resolve(ctx, c);
    if (s == CT_OK) s = ct_experiment_create(ctx, c, NULL, &e);
    CT_CHECK_MSG(s == CT_OK, "%s", ct_last_error(ctx));
    *cfg = c;
    return e;
}

static void experiment_should_release_its_run_directory_when_destroyed(void) {
    char tmpl[] = "/tmp/ct_experiment_XXXXXX";
    const char *root = mkdtemp(tmpl);
    CT_CHECK(root != NULL);
    if (!root) return;
    char dir[256];
    (void)snprintf(dir, sizeof dir, "%s/run", root);
    ct_config *cfg = NULL;
    ct_experiment *e = open_experiment(dir, 1, &cfg);
    if (e) CT_CHECK_MSG(ct_experiment_fit(e) == CT_OK, "%s", ct_last_error(ctx));
    /* while it lives, the directory is taken */
    ct_experiment *busy = NULL;
    if (e) {
        char text[512];
        (void)snprintf(text, sizeof text,
                       "output_dir: %s\ndata: {train: {type: synthetic, kind: blobs, n: 50, "
                       "features: 4, classes: 3}}\nmodel: {type: mlp}\n",
                       dir);
        ct_config *c = NULL;
        if (ct_config_load_string(ctx, "busy.yaml", text, strlen(text), &c) == CT_OK &&
            ct_experiment_resolve(ctx, c) == CT_OK) {
            ct_status s = ct_experiment_create(ctx, c, NULL, &busy);
            if (s == CT_OK) s = ct_experiment_fit(busy);
            CT_CHECK(s != CT_OK);
            CT_CHECK_MSG(strstr(ct_last_error(ctx), "in use by another") != NULL, "%s",
                         ct_last_error(ctx));
        }
        ct_experiment_destroy(busy);
        ct_config_destroy(c); /* after the experiment that borrowed it */
    }
    ct_experiment_destroy(e);
    ct_config_destroy(cfg);
    /* destroyed: the same process may go on with it (a resume to 2 epochs) */
    e = open_experiment(dir, 2, &cfg);
    if (e) {
        CT_CHECK_MSG(ct_experiment_fit(e) == CT_OK, "%s", ct_last_error(ctx));
        CT_CHECK_INT(ct_trainer_epoch(ct_experiment_trainer(e)), 2);
    }
    ct_experiment_destroy(e);
    ct_config_destroy(cfg);
    char cmd[300];
    (void)snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    CT_CHECK_INT(system(cmd), 0);
}

int main(void) {
    if (ct_ctx_create(NULL, &ctx) != CT_OK) return 1;
    CT_RUN(experiment_should_release_its_run_directory_when_destroyed);
    ct_ctx_destroy(ctx);
    return ct_test_finish();
}
