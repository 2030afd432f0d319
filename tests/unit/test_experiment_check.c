/*
 * test_experiment_check.c - what ct_experiment_create refuses in its checks (check.c), each
 * message whole as the command line shows it: a component's unknown type or key, a transform,
 * a layer, a parameter group, a schedule, a metric or an EMA that is not right, all before any
 * data is read; and, once the model is built, an output that does not fit what the loss takes
 * of the data's targets.
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
static char root[] = "/tmp/ct_experiment_check_XXXXXX";

/* The context's message as the command line shows it: without the "check.c:120: " in front,
 * which names ctrain's source, not the user's file. */
static const char *message(char *buf, size_t size) {
    const char *msg = ct_last_error(ctx);
    int skip = 0;
    (void)sscanf(msg, "%*[a-z_0-9].c:%*d:%n", &skip);
    (void)snprintf(buf, size, "%s", msg + (skip > 0 && msg[skip] == ' ' ? skip + 1 : 0));
    return buf;
}

/* ct_experiment_create on "seed: 1\n" + body as exp.yaml, its output_dir and then `override`
 * (may be NULL) set as on the command line; everything made is destroyed. */
static ct_status create(const char *body, const char *override) {
    char text[2048], dir[128];
    (void)snprintf(text, sizeof text, "seed: 1\n%s", body);
    (void)snprintf(dir, sizeof dir, "++output_dir=%s/run", root);
    ct_config *cfg = NULL;
    ct_experiment *e = NULL;
    ct_status s = ct_config_load_string(ctx, "exp.yaml", text, strlen(text), &cfg);
    if (s == CT_OK) s = ct_experiment_override(cfg, dir);
    if (s == CT_OK && override) s = ct_experiment_override(cfg, override);
    if (s == CT_OK) s = ct_experiment_resolve(ctx, cfg);
    if (s == CT_OK) s = ct_experiment_create(ctx, cfg, NULL, &e);
    ct_experiment_destroy(e);
    ct_config_destroy(cfg);
    return s;
}

/* A configuration that creating refuses: exp.yaml's body, a command-line override (or NULL),
 * and the whole message. */
typedef struct refusal {
    const char *body, *override, *want;
} refusal;

/* Each of cases[0..n) fails with CT_ERR_CONFIG and exactly its message. */
static void check_refused(const refusal *cases, size_t n) {
    for (size_t i = 0; i < n; i++) {
        char got[2048];
        ct_status s = create(cases[i].body, cases[i].override);
        CT_CHECK_MSG(s == CT_ERR_CONFIG, "status %s: %s", ct_status_str(s),
                     message(got, sizeof got));
        CT_CHECK_MSG(strcmp(message(got, sizeof got), cases[i].want) == 0, "\n got: %s\nwant: %s",
                     got, cases[i].want);
    }
}

#define CHECK_REFUSED(cases) check_refused(cases, sizeof cases / sizeof cases[0])

static void check_accepted(const char *body) {
    char got[2048];
    CT_CHECK_MSG(create(body, NULL) == CT_OK, "%s", message(got, sizeof got));
}

#define DATA                                                                                       \
    "data:\n"                                                                                      \
    "  train: {type: synthetic, kind: blobs, n: 200, features: 4, classes: 3}\n"                   \
    "  batch_size: 20\n"
#define MLP   "model: {type: mlp, hidden: [8]}\n"
#define SPLIT "  valid: {split: 0.2}\n"
#define REGRESSION                                                                                 \
    "data:\n"                                                                                      \
    "  train: {type: synthetic, kind: linear, n: 40, features: 4, outputs: 2}\n"
#define TEXT                                                                                       \
    "data:\n"                                                                                      \
    "  train: {type: text, files: " CT_SOURCE_DIR "/README.md, context: 16}\n"                     \
    "  batch_size: 16\n"

static void experiment_check_should_name_unknown_types_and_keys_where_they_were_written(void) {
    static const refusal cases[] = {
        {"data:\n  train: {type: synthtic, kind: blobs}\n" MLP, NULL,
         "exp.yaml:3:11: key 'data.train.type': unknown dataset type 'synthtic' (did you mean "
         "'synthetic'?); known: csv, text, tokens, synthetic, idx, cifar10, npy, arithmetic"},
        {"data:\n  train: {kind: blobs}\n" MLP, NULL,
         "exp.yaml:3:3: key 'data.train.type': missing (one of: csv, text, tokens, synthetic, "
         "idx, cifar10, npy, arithmetic; or plugin: and symbol:)"},
        {"data:\n  train: {type: synthetic, kind: blobs, n: 20, featurs: 4}\n" MLP, NULL,
         "exp.yaml:3:48: unknown key 'data.train.featurs' (did you mean "
         "'data.train.features'?); the keys of dataset type 'synthetic' are: type, kind, n, "
         "features, classes, spread, noise, outputs, seed, corrupt_every, corrupt_scale"},
        {DATA "  valid: {split: 0.2, sed: 1}\n" MLP, NULL,
         "exp.yaml:5:23: unknown key 'data.valid.sed' (did you mean 'data.valid.seed'?); the "
         "keys of a held-out split are: split, seed"},
        {DATA "model: {type: mpl}\n", NULL,
         "exp.yaml:5:9: key 'model.type': unknown model type 'mpl' (did you mean 'mlp'?); "
         "known: sequential, mlp, cnn, gpt"},
        {DATA "model: {type: mlp, hiden: [8]}\n", NULL,
         "exp.yaml:5:20: unknown key 'model.hiden' (did you mean 'model.hidden'?); the keys of "
         "model type 'mlp' are: type, init_from, hidden, activation, dropout, out"},
        {DATA "model: {type: sequential, layers: [{type: linear, ot: 3}]}\n", NULL,
         "exp.yaml:5:51: unknown key 'model.layers.0.ot' (did you mean 'model.layers.0.out'?); "
         "the keys of layer type 'linear' are: type, name, children, out, bias"},
        {DATA MLP "scheduler: {type: cosine, tmax: 3}\n", NULL,
         "exp.yaml:6:27: unknown key 'scheduler.tmax' (did you mean 'scheduler.t_max'?); the "
         "keys of schedule type 'cosine' are: type, interval, monitor, t_max, eta_min, warmup"},
        {DATA MLP "optimizer: {groups: [{params: '*.bias', lr: 2}]}\n", NULL,
         "exp.yaml:6:41: unknown key 'optimizer.groups.0.lr'; the keys of a parameter group "
         "are: params, lr_scale, weight_decay"},
        {DATA SPLIT MLP "metrics: {valid: [acuracy]}\n", NULL,
         "exp.yaml:7:19: key 'metrics.valid.0': unknown metric type 'acuracy' (did you mean "
         "'accuracy'?); known: accuracy, topk, precision, recall, f1, confusion, loss, "
         "perplexity, mse, mae, rmse, r2, exact_match, char_accuracy, edit_distance"},
    };
    CHECK_REFUSED(cases);
}

/* Another framework's name for a component's own option points at it, where the component has
 * that option; one for a key elsewhere does not (a plateau schedule has patience too). */
static void experiment_check_should_point_other_frameworks_names_at_options(void) {
    static const refusal cases[] = {
        {DATA MLP "scheduler: {type: warmup_cosine, total: 9, warmup_steps: 3}\n", NULL,
         "exp.yaml:6:44: unknown key 'scheduler.warmup_steps' (did you mean 'scheduler.warmup'? "
         "'warmup_steps' is the Hugging Face Trainer's name for it); the keys of schedule type "
         "'warmup_cosine' are: type, interval, monitor, warmup, total, min_lr"},
        {DATA MLP "scheduler: {type: step, step_size: 3, warmup_steps: 3}\n", NULL,
         "exp.yaml:6:39: unknown key 'scheduler.warmup_steps'; the keys of schedule type 'step' "
         "are: type, interval, monitor, step_size, gamma"},
        {DATA MLP "scheduler: {type: step, step_size: 3, patience: 3}\n", NULL,
         "exp.yaml:6:39: unknown key 'scheduler.patience'; the keys of schedule type 'step' "
         "are: type, interval, monitor, step_size, gamma"},
    };
    CHECK_REFUSED(cases);
}

static void experiment_check_should_refuse_the_layers_of_a_sequential_model(void) {
    static const refusal cases[] = {
        {DATA "model: {type: sequential}\n", NULL,
         "exp.yaml:5:1: key 'model.layers': a sequential model needs a list of layers"},
        {DATA "model: {type: sequential, layers: [flaten]}\n", NULL,
         "exp.yaml:5:36: key 'model.layers.0': unknown layer type 'flaten' (did you mean "
         "'flatten'?); known: linear, conv2d, embedding, batchnorm, layernorm, relu, gelu, "
         "silu, tanh, sigmoid, leaky_relu, dropout, maxpool2d, avgpool2d, global_avg_pool, "
         "flatten, residual"},
        {DATA "model: {type: sequential, layers: [[1]]}\n", NULL,
         "exp.yaml:5:36: a layer is a name or a mapping"},
        {DATA "model: {type: sequential, layers: [{type: residual, children: 3}]}\n", NULL,
         "exp.yaml:5:53: `children` is a list of layers"},
        {DATA "model: {type: sequential, layers: [{type: linear, out: -3}]}\n", NULL,
         "exp.yaml:5:36: model.layers.0: key 'out': -3 is out of range [1, "
         "9223372036854775807]"},
    };
    CHECK_REFUSED(cases);
}

static void experiment_check_should_refuse_transforms_that_are_not_right(void) {
    static const refusal cases[] = {
        {DATA "  transforms: [{type: hflip}]\n" MLP, NULL,
         "exp.yaml:5:16: key 'data.transforms.0.type': 'hflip' is not one of: scale, normalize "
         "(random_crop and hflip go in data.augment)"},
        {DATA "  augment: [{type: scale}]\n" MLP, NULL,
         "exp.yaml:5:13: key 'data.augment.0.type': 'scale' is not one of: random_crop, hflip "
         "(scale and normalize go in data.transforms)"},
        {DATA "  transforms: [{type: scale, a: 1, c: 2}]\n" MLP, NULL,
         "exp.yaml:5:16: unknown key 'data.transforms.0.c' for scale"},
        {DATA "  transforms: [{type: scale, a: [1, 2]}]\n" MLP, NULL,
         "exp.yaml:5:30: a: expected up to 1 numbers"},
        {DATA "  transforms: [{type: normalize, mean: 0}]\n" MLP, NULL,
         "exp.yaml:5:16: data.transforms.0: normalize needs mean and std"},
        {DATA "  transforms: [{type: normalize, mean: [0, 1], std: [1]}]\n" MLP, NULL,
         "exp.yaml:5:16: data.transforms.0: mean has 2 values, std 1"},
        {DATA "  transforms: [{type: normalize, mean: 0, std: 0}]\n" MLP, NULL,
         "exp.yaml:5:43: key 'data.transforms.0.std': 0; a normalize std must be > 0 (x is "
         "divided by it)"},
        {DATA "  augment: [{type: random_crop, pad: -1}]\n" MLP, NULL,
         "exp.yaml:5:13: data.augment.0.pad: expected an integer >= 0"},
        {DATA "  augment: [{type: hflip, p: 2}]\n" MLP, NULL,
         "exp.yaml:5:13: data.augment.0.p: expected a number in [0, 1]"},
        {DATA "  transforms: [scale, scale, scale, scale, scale, scale, scale, scale, scale]\n" MLP,
         NULL, "exp.yaml:5:72: data.transforms.8: more than 8 transforms"},
    };
    CHECK_REFUSED(cases);
}

static void experiment_check_should_refuse_groups_schedules_metrics_and_emas(void) {
    static const refusal cases[] = {
        {DATA MLP "optimizer: {groups: [x]}\n", NULL,
         "exp.yaml:6:22: a group is {params: GLOBS, lr_scale: X, weight_decay: Y}"},
        {DATA MLP "optimizer: {groups: [{lr_scale: 2}]}\n", NULL,
         "exp.yaml:6:22: optimizer.groups.0: key 'params' is required"},
        {DATA MLP "scheduler: {type: cosine, interval: week}\n", NULL,
         "exp.yaml:6:1: scheduler: key 'interval': expected step or epoch"},
        {DATA MLP "scheduler: {type: plateau, monitor: ''}\n", NULL,
         "exp.yaml:6:1: scheduler: key 'monitor': expected a metric name"},
        {DATA MLP "metrics: {valid: [accuracy]}\n", NULL,
         "exp.yaml:6:11: key 'metrics.valid': metrics for data.valid, which is not set: "
         "nothing would compute them; set data.valid or remove metrics.valid"},
        {DATA SPLIT MLP "metrics: {valid: [{type: accuracy, name: 'a/b'}]}\n", NULL,
         "exp.yaml:7:19: metrics.valid.0: key 'name': 'a/b' holds a character metric names "
         "cannot have (\", \\, ',', '/' or a control character)"},
        /* options that fit no class count are wrong before the data; the rest once it is
           known */
        {DATA SPLIT MLP "metrics: {valid: [{type: topk, k: 0}]}\n", NULL,
         "exp.yaml:7:19: metrics.valid.0: key 'k': 0 is out of range [1, 4096]"},
        {DATA SPLIT MLP "metrics: {valid: [{type: topk, k: 5}]}\n", NULL,
         "exp.yaml:7:19: metrics.valid.0: key 'k': 5 is out of range [1, 3]"},
        {DATA MLP "trainer: {ema: {decay: 2}}\n", NULL,
         "exp.yaml:6:11: trainer.ema: key 'decay': 2 is out of range [0, 1]"},
    };
    CHECK_REFUSED(cases);
    check_accepted(DATA SPLIT MLP "optimizer: {groups: [{params: '*.bias', lr_scale: 2}]}\n"
                                  "scheduler: {type: plateau, monitor: valid/acc}\n"
                                  "metrics: {valid: [accuracy, {type: topk, k: 2, name: top2}]}\n"
                                  "trainer: {ema: {decay: 0.9}}\n");
}

/* Keys set on the command line in a mapping from the file: its messages say which. */
static void experiment_check_should_say_which_keys_came_from_the_command_line(void) {
    static const refusal cases[] = {
        {DATA "model: {type: mlp}\n", "+model.hidden=[x]",
         "exp.yaml:5:1: model (hidden set on the command line): key 'hidden': expected up to "
         "32 comma-separated positive integers, got 'x'"},
    };
    CHECK_REFUSED(cases);
}

/* The checks come before the data are read: a mistake in the model is not hidden behind data
 * that cannot be read (and, the model right, the data's error is the one reported). */
#define MISSING                                                                                    \
    "data:\n"                                                                                      \
    "  train: {type: idx, images: /nonexistent/x.gz, labels: /nonexistent/y.gz}\n"

static void experiment_check_should_come_before_any_data_is_read(void) {
    static const refusal cases[] = {
        {MISSING "model: {type: mlp, hiden: [8]}\n", NULL,
         "exp.yaml:4:20: unknown key 'model.hiden' (did you mean 'model.hidden'?); the keys of "
         "model type 'mlp' are: type, init_from, hidden, activation, dropout, out"},
    };
    CHECK_REFUSED(cases);
    char got[2048];
    ct_status s = create(MISSING MLP, NULL);
    CT_CHECK(s != CT_OK);
    CT_CHECK_MSG(strstr(message(got, sizeof got), "/nonexistent/x.gz") != NULL, "%s", got);
}

/* Once the model is built: one sample through it, its output against the loss. */
static void experiment_check_should_refuse_an_output_the_loss_does_not_take(void) {
    static const refusal cases[] = {
        {DATA MLP "loss: {type: mse}\n", NULL,
         "exp.yaml:6:8: key 'loss.type': mse takes values as targets, but data.train's are "
         "class indices (i64); use task: classification and loss: cross_entropy"},
        {DATA MLP "task: regression\n", NULL,
         "exp.yaml:6:1: key 'task': mse takes values as targets, but data.train's are class "
         "indices (i64); use task: classification and loss: cross_entropy"},
        {REGRESSION MLP "loss: {type: cross_entropy}\n", NULL,
         "exp.yaml:5:8: key 'loss.type': cross_entropy takes class indices as targets, but "
         "data.train's are values (f32 [2]); use task: regression and a regression loss"},
        {REGRESSION "model: {type: mlp, hidden: [8], out: 3}\n", NULL,
         "exp.yaml:4:33: key 'model.out' (3): a sample [4] of data.train gives an output [3], "
         "but mse takes 2 values (data.train's targets are [2])"},
        {DATA "model: {type: sequential, layers: [{type: linear, out: 2}]}\n", NULL,
         "exp.yaml:5:51: key 'model.layers.0.out' (2): a sample [4] of data.train gives an "
         "output [2], but cross_entropy takes [C] with C >= 3 (a score for each of the 3 "
         "classes of data.train)"},
        {TEXT "model: {type: gpt, n_layer: 1, n_head: 2, d_model: 16, vocab: 100}\n", NULL,
         "exp.yaml:5:56: key 'model.vocab' (100): a sample [16] of data.train gives an output "
         "[16,100], but cross_entropy takes [16, V] with V >= 256 (scores over the "
         "256-token vocabulary at each of the 16 positions)"},
    };
    CHECK_REFUSED(cases);
    check_accepted(REGRESSION "model: {type: mlp, hidden: [8]}\nloss: {type: huber, delta: 0.5}\n");
    check_accepted(TEXT "model: {type: gpt, n_layer: 1, n_head: 2, d_model: 16}\n");
}

static void experiment_check_should_refuse_class_names_that_do_not_fit_the_data(void) {
    char file[256], body[1024];
    (void)snprintf(file, sizeof file, "%s/classes.txt", root);
    FILE *f = fopen(file, "w");
    CT_CHECK(f != NULL);
    (void)fputs("cat\ndog\n\nbird\n", f);
    (void)fclose(f);
    (void)snprintf(body, sizeof body, DATA "  classes: %s\n" MLP, file);
    char want_empty[600];
    (void)snprintf(want_empty, sizeof want_empty,
                   "exp.yaml:5:3: key 'data.classes': %s:3: an empty line; expected one class "
                   "name per line",
                   file);
    const refusal cases[] = {
        {DATA "  classes: [a, b]\n" MLP, NULL,
         "exp.yaml:5:3: key 'data.classes': 2 class names, but data.train has 3 classes; "
         "expected a name for each"},
        {DATA "  classes: [a, b, a]\n" MLP, NULL,
         "exp.yaml:5:3: key 'data.classes': classes 0 and 2 are both named 'a'; each class "
         "needs a name of its own"},
        {DATA "  classes: [a, \"\", c]\n" MLP, NULL,
         "exp.yaml:5:3: key 'data.classes': class 1's name is empty; expected text"},
        {DATA "  classes: [a, [b], c]\n" MLP, NULL,
         "exp.yaml:5:16: key 'data.classes': expected class names in the list"},
        {DATA "  classes: {a: 1}\n" MLP, NULL,
         "exp.yaml:5:3: key 'data.classes': expected a list of class names or a file's path"},
        {REGRESSION "  classes: [a, b]\n" MLP, NULL,
         "exp.yaml:4:3: key 'data.classes': 2 class names, but data.train has no classes (its "
         "targets are values); expected no data.classes"},
        {body, NULL, want_empty},
    };
    CHECK_REFUSED(cases);
    check_accepted(DATA "  classes: [a, b, c]\n" MLP);
    f = fopen(file, "w");
    CT_CHECK(f != NULL);
    (void)fputs("cat\r\ndog\nbird", f);
    (void)fclose(f);
    check_accepted(body);
}

int main(void) {
    if (!mkdtemp(root) || ct_ctx_create(NULL, &ctx) != CT_OK) return 1;
    CT_RUN(experiment_check_should_name_unknown_types_and_keys_where_they_were_written);
    CT_RUN(experiment_check_should_point_other_frameworks_names_at_options);
    CT_RUN(experiment_check_should_refuse_the_layers_of_a_sequential_model);
    CT_RUN(experiment_check_should_refuse_transforms_that_are_not_right);
    CT_RUN(experiment_check_should_refuse_groups_schedules_metrics_and_emas);
    CT_RUN(experiment_check_should_say_which_keys_came_from_the_command_line);
    CT_RUN(experiment_check_should_come_before_any_data_is_read);
    CT_RUN(experiment_check_should_refuse_an_output_the_loss_does_not_take);
    CT_RUN(experiment_check_should_refuse_class_names_that_do_not_fit_the_data);
    ct_ctx_destroy(ctx);
    char cmd[128];
    (void)snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    if (system(cmd) != 0) return 1;
    return ct_test_finish();
}
