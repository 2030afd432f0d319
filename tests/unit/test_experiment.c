/*
 * test_experiment.c - experiments driven from C (the command line's path without the tool):
 * one process fits a run directory, destroys the experiment and fits it again (a resume),
 * which needs the first experiment's lock on the directory released at destroy and only then;
 * and what ct_experiment_create refuses before any training, naming where it was written: a
 * normalize transform that does not fit the data, a model whose output does not fit the loss,
 * a model too big for memory.
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

/* ct_experiment_create on `text` (exp.yaml, resolved) with context c: its status; the message
 * is in c. Everything it made is destroyed. */
static ct_status create_with(ct_ctx *c, const char *text) {
    ct_config *cfg = NULL;
    ct_experiment *e = NULL;
    ct_status s = ct_config_load_string(c, "exp.yaml", text, strlen(text), &cfg);
    if (s == CT_OK) s = ct_experiment_resolve(c, cfg);
    if (s == CT_OK) s = ct_experiment_create(c, cfg, NULL, &e);
    ct_experiment_destroy(e);
    ct_config_destroy(cfg);
    return s;
}

/* Checks that creating fails with `want` and a message holding every one of `parts`. */
static void check_refused(ct_ctx *c, const char *text, ct_status want, const char *const *parts) {
    ct_status s = create_with(c, text);
    CT_CHECK_MSG(s == want, "status %s, expected %s: %s", ct_status_str(s), ct_status_str(want),
                 ct_last_error(c));
    for (; *parts; parts++)
        CT_CHECK_MSG(strstr(ct_last_error(c), *parts) != NULL, "message lacks '%s': %s", *parts,
                     ct_last_error(c));
}

#define BLOBS                                                                                      \
    "output_dir: /tmp/ct_experiment_unused\n"                                                      \
    "data:\n"                                                                                      \
    "  train: {type: synthetic, kind: blobs, n: 40, features: 4, classes: 3}\n"

/* Normalize takes one value for every channel or one per channel (dim 0 of a sample), and
 * std > 0: anything else is a configuration error at the value, not a silent fill-in (missing
 * channels were left unnormalised) nor a loader message without a place. */
static void experiment_should_refuse_normalize_values_that_do_not_fit(void) {
    const char *const count[] = {"exp.yaml:5:25: key 'data.transforms.0.mean'", "2 values",
                                 "[4] have 4 channels", NULL};
    check_refused(ctx,
                  BLOBS "  transforms:\n"
                        "    - {type: normalize, mean: [0.1, 0.2], std: [1, 2]}\n"
                        "model: {type: mlp, hidden: [8]}\n",
                  CT_ERR_CONFIG, count);
    const char *const zero[] = {"exp.yaml:5:57: key 'data.transforms.0.std.2'", "must be > 0",
                                NULL};
    check_refused(ctx,
                  BLOBS "  transforms:\n"
                        "    - {type: normalize, mean: [0, 0, 0, 0], std: [1, 1, 0, 1]}\n"
                        "model: {type: mlp, hidden: [8]}\n",
                  CT_ERR_CONFIG, zero);
    const char *const one[] = {"exp.yaml:5:34: key 'data.transforms.0.std'", "-1", NULL};
    check_refused(ctx,
                  BLOBS "  transforms:\n"
                        "    - {type: normalize, mean: 0, std: -1}\n"
                        "model: {type: mlp, hidden: [8]}\n",
                  CT_ERR_CONFIG, one);
    /* one value, or one per channel: accepted */
    CT_CHECK_MSG(create_with(ctx, BLOBS "  transforms: [{type: normalize, mean: 0, std: 2}]\n"
                                        "model: {type: mlp, hidden: [8]}\n") == CT_OK,
                 "%s", ct_last_error(ctx));
    CT_CHECK_MSG(create_with(ctx, BLOBS "  transforms: [{type: normalize, mean: [0, 0, 1, 1], "
                                        "std: [1, 2, 3, 4]}]\n"
                                        "model: {type: mlp, hidden: [8]}\n") == CT_OK,
                 "%s", ct_last_error(ctx));
}

/* Writes a .npy file (format 1.0) of `descr` and shape from data. */
static bool
write_npy(const char *path, const char *descr, const char *shape, const void *data, size_t bytes) {
    char header[128];
    int n = snprintf(header, sizeof header,
                     "{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr, shape);
    size_t total = 10 + (size_t)n + 1, pad = (64 - total % 64) % 64;
    FILE *f = fopen(path, "wb");
    if (!f) return false;
    unsigned short hlen = (unsigned short)((size_t)n + pad + 1);
    bool ok = fwrite("\x93NUMPY\x01\x00", 1, 8, f) == 8 && fwrite(&hlen, 2, 1, f) == 1 &&
              fwrite(header, 1, (size_t)n, f) == (size_t)n;
    for (size_t i = 0; ok && i < pad; i++)
        ok = fputc(' ', f) != EOF;
    ok = ok && fputc('\n', f) != EOF && fwrite(data, 1, bytes, f) == bytes;
    return fclose(f) == 0 && ok;
}

/* A model whose output does not fit what the loss takes of the data is refused before any
 * training (fit, eval and predict alike), naming the layer, or the key that sets the size, and
 * both shapes; at the first step it failed as a training error. */
static void experiment_should_refuse_a_model_that_does_not_fit_its_data(void) {
    char tmpl[] = "/tmp/ct_experiment_XXXXXX";
    const char *root = mkdtemp(tmpl);
    CT_CHECK(root != NULL);
    if (!root) return;
    float x[8 * 2 * 3 * 5] = {0};
    int64_t y[8] = {0, 1, 2, 0, 1, 2, 0, 1};
    char xp[256], yp[256], text[1400];
    (void)snprintf(xp, sizeof xp, "%s/x.npy", root);
    (void)snprintf(yp, sizeof yp, "%s/y.npy", root);
    CT_CHECK(write_npy(xp, "<f4", "(8, 2, 3, 5)", x, sizeof x));
    CT_CHECK(write_npy(yp, "<i8", "(8,)", y, sizeof y));
#define NPY_MODEL(model)                                                                           \
    (void)snprintf(text, sizeof text,                                                              \
                   "output_dir: %s/run\n"                                                          \
                   "data:\n"                                                                       \
                   "  train: {type: npy, features: %s, labels: %s}\n"                              \
                   "model:\n" model,                                                               \
                   root, xp, yp)
    /* an mlp over images without a flatten: its linear layers act on the last axis */
    NPY_MODEL("  type: mlp\n  hidden: [8]\n");
    const char *const mlp[] = {
        "exp.yaml:4:1: key 'model' (mlp)",     "a sample [2,3,5]", "output [2,3,3]",
        "cross_entropy takes [C] with C >= 3", "flatten",          NULL};
    check_refused(ctx, text, CT_ERR_CONFIG, mlp);
    /* a sequential model: its last layer, or the `out` that is too small */
    NPY_MODEL("  type: sequential\n  layers:\n    - {type: linear, out: 3}\n");
    const char *const seq[] = {"exp.yaml:7:7: key 'model.layers.0' (linear, the last layer)",
                               "output [2,3,3]", NULL};
    check_refused(ctx, text, CT_ERR_CONFIG, seq);
    NPY_MODEL("  type: sequential\n  layers:\n    - flatten\n    - {type: linear, out: 2}\n");
    const char *const out[] = {"exp.yaml:8:22: key 'model.layers.1.out' (2)", "output [2]",
                               "C >= 3", NULL};
    check_refused(ctx, text, CT_ERR_CONFIG, out);
    NPY_MODEL("  type: sequential\n  layers: [flatten, {type: linear, out: 3}]\n");
    CT_CHECK_MSG(create_with(ctx, text) == CT_OK, "%s", ct_last_error(ctx));
#undef NPY_MODEL
    /* regression: as many outputs as target values */
    const char *const reg[] = {"exp.yaml:4:33: key 'model.out' (3)", "output [3]",
                               "mse takes 2 values", NULL};
    check_refused(ctx,
                  "output_dir: /tmp/ct_experiment_unused\n"
                  "data:\n"
                  "  train: {type: synthetic, kind: linear, n: 40, features: 4, outputs: 2}\n"
                  "model: {type: mlp, hidden: [8], out: 3}\n",
                  CT_ERR_CONFIG, reg);
    char cmd[300];
    (void)snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    CT_CHECK_INT(system(cmd), 0);
}

/* An allocator that refuses the Nth allocation of 16 MiB or more (a model's buffers), without
 * touching the small ones. */
typedef struct big_alloc {
    int n_big, fail_at;
} big_alloc;

static void *big_alloc_fn(void *user, size_t size) {
    big_alloc *b = user;
    if (size >= ((size_t)16 << 20) && ++b->n_big == b->fail_at) return NULL;
    return aligned_alloc(64, (size + 63) & ~(size_t)63);
}

static void big_free_fn(void *user, void *ptr, size_t size) {
    (void)user, (void)size;
    free(ptr);
}

/* Out of memory for the model's parameters or its optimizer's moments: the message says so and
 * names the option that asked for the size, where it was written. */
static void experiment_should_name_the_key_behind_an_out_of_memory_model(void) {
    static const char text[] =
        BLOBS "model:\n"
              "  type: sequential\n"
              "  layers: [{type: linear, out: 1100000}, {type: linear, out: 3}]\n";
    for (int fail_at = 1; fail_at <= 3; fail_at += 2) { /* the values; adam's first moment */
        big_alloc b = {0, fail_at};
        ct_ctx_params cp = ct_ctx_default_params();
        cp.allocator = (ct_allocator){big_alloc_fn, big_free_fn, &b};
        ct_ctx *c = NULL;
        CT_CHECK(ct_ctx_create(&cp, &c) == CT_OK);
        if (!c) return;
        const char *const parts[] = {"exp.yaml:6:27: key 'model.layers.0.out' (1100000)",
                                     "'0.weight' [1100000,4]", "out of memory allocating",
                                     fail_at == 1 ? "parameters" : "optimizer moments", NULL};
        check_refused(c, text, CT_ERR_OOM, parts);
        ct_ctx_destroy(c);
    }
}

int main(void) {
    if (ct_ctx_create(NULL, &ctx) != CT_OK) return 1;
    CT_RUN(experiment_should_release_its_run_directory_when_destroyed);
    CT_RUN(experiment_should_refuse_normalize_values_that_do_not_fit);
    CT_RUN(experiment_should_refuse_a_model_that_does_not_fit_its_data);
    CT_RUN(experiment_should_name_the_key_behind_an_out_of_memory_model);
    ct_ctx_destroy(ctx);
    return ct_test_finish();
}
