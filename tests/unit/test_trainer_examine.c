/*
 * test_trainer_examine.c - an incident's examination (ct_incident's activations and
 * nonfinite_*): a NaN planted in one layer's weights is found in that layer's output, the layers
 * before it are finite, and a spike (nothing non-finite) names no layer but lists every layer's
 * output in forward order.
 *
 * Each test trains an MLP (layers 0 linear, 1 relu, 2 linear) on synthetic blobs and reads the
 * first incident in on_incident, where the tensors are valid; the context is shared.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctrain/ctrain.h"
#include "ctrain/trainer.h"
#include "harness.h"

enum { BATCH = 16, N_LAYERS = 3 };

static ct_ctx *ctx;

/* What the first incident said. */
typedef struct seen {
    int64_t incidents, step, n_activations, layer;
    char pass[16], op[32], param[32], names[N_LAYERS][8];
    bool recorded[N_LAYERS], finite[N_LAYERS];
} seen;

typedef struct run {
    ct_dataset *data;
    ct_loader *loader;
    ct_params *params;
    ct_model *model;
    ct_optim *opt;
    ct_trainer *t;
    seen s;
} run;

static bool finite_tensor(const ct_tensor *t) {
    const float *x = t->data;
    for (int64_t i = 0; i < ct_tensor_numel(t); i++)
        if (!isfinite(x[i])) return false;
    return true;
}

static void on_incident(void *user, ct_trainer *t, const ct_incident *in) {
    (void)t;
    run *r = user;
    if (r->s.incidents++ > 0) return;
    r->s.step = in->step;
    r->s.n_activations = in->n_activations;
    r->s.layer = in->nonfinite_layer;
    (void)snprintf(r->s.pass, sizeof r->s.pass, "%s", in->nonfinite_pass ? in->nonfinite_pass : "");
    (void)snprintf(r->s.op, sizeof r->s.op, "%s", in->nonfinite_op ? in->nonfinite_op : "");
    (void)snprintf(r->s.param, sizeof r->s.param, "%s",
                   in->nonfinite_param ? in->nonfinite_param : "");
    for (int64_t i = 0; i < in->n_activations && i < N_LAYERS; i++) {
        const ct_tensor *a = in->activations[i];
        r->s.recorded[i] = a != NULL;
        r->s.finite[i] = a && finite_tensor(a);
        (void)snprintf(r->s.names[i], sizeof r->s.names[i], "%s", ct_model_layer_name(r->model, i));
    }
}

/* A run with on_nonfinite `nonfinite` (NULL: stop) and on_spike `spike` (NULL: none) over blobs
 * whose every `corrupt`-th sample is scaled by -1000 ("0": none). */
static int
run_open(run *r, const char *corrupt, const ct_options *nonfinite, const ct_options *spike) {
    memset(r, 0, sizeof *r);
    ct_option d[] = {
        {"kind", "blobs"}, {"n", "320"},  {"features", "8"},          {"classes", "3"},
        {"spread", "4"},   {"seed", "5"}, {"corrupt_every", corrupt}, {"corrupt_scale", "-1000"}};
    ct_options dopts = {d, 8, "test: data"};
    ct_option m[] = {{"hidden", "16"}, {"out", "3"}};
    ct_options mopts = {m, 2, "test: model"};
    ct_loader_params lp = ct_loader_default_params();
    lp.batch_size = BATCH;
    lp.shuffle = false;
    ct_optim_params op = ct_optim_default_params(CT_OPTIM_ADAM);
    op.lr = 0.01f;
    if (ct_dataset_open(ctx, "synthetic", &dopts, &r->data) != CT_OK ||
        ct_loader_create(ctx, r->data, &lp, &r->loader) != CT_OK ||
        ct_params_create(ctx, &r->params) != CT_OK ||
        ct_model_build_alloc(ctx, "mlp", &mopts, r->params, CT_F32, 1, (const int64_t[]){8}, 11,
                             &r->model) != CT_OK ||
        ct_optim_create(ctx, r->params, &op, &r->opt) != CT_OK)
        goto fail;
    ct_trainer_params p = ct_trainer_default_params();
    p.model = r->model;
    p.store = r->params;
    p.optim = r->opt;
    p.train = r->loader;
    p.max_epochs = 2;
    p.nonfinite = nonfinite;
    p.spike = spike;
    p.callbacks.user = r;
    p.callbacks.on_incident = on_incident;
    if (ct_trainer_create(ctx, &p, &r->t) != CT_OK) goto fail;
    return 1;
fail:
    fprintf(stderr, "setup: %s\n", ct_last_error(ctx));
    CT_CHECK(0);
    return 0;
}

static void run_close(run *r) {
    ct_trainer_destroy(r->t);
    ct_optim_destroy(r->opt);
    ct_model_destroy(r->model);
    ct_params_destroy(r->params);
    ct_loader_destroy(r->loader);
    ct_dataset_close(r->data);
}

/* Element 0 of the parameter `name` becomes NaN. */
static void plant_nan(run *r, const char *name) {
    for (int64_t i = 0; i < ct_params_count(r->params); i++) {
        ct_tensor *t = ct_params_at(r->params, i);
        if (t->name && strcmp(t->name, name) == 0) ((float *)t->data)[0] = NAN;
    }
}

/* A NaN in a layer's weights: the first incident (step 1) names that layer's forward output,
 * and the outputs before it are finite, those from it on not. */
static void check_planted(const char *param, int64_t layer) {
    run r;
    if (!run_open(&r, "0", NULL, NULL)) return;
    plant_nan(&r, param);
    CT_CHECK_INT(ct_trainer_fit(r.t), CT_ERR_NONFINITE); /* on_nonfinite stop */
    CT_CHECK_INT(r.s.incidents, 1);
    CT_CHECK_INT(r.s.step, 1);
    CT_CHECK_INT(r.s.n_activations, N_LAYERS);
    CT_CHECK_MSG(strcmp(r.s.pass, "forward") == 0, "pass '%s'", r.s.pass);
    CT_CHECK_INT(r.s.layer, layer);
    CT_CHECK_MSG(strcmp(r.s.op, "linear") == 0 || strcmp(r.s.op, "matmul") == 0, "op '%s'", r.s.op);
    for (int64_t i = 0; i < N_LAYERS; i++) {
        CT_CHECK_MSG(r.s.recorded[i], "layer %lld's output not recorded", (long long)i);
        CT_CHECK_MSG(r.s.finite[i] == (i < layer), "layer %lld's output %s", (long long)i,
                     r.s.finite[i] ? "finite" : "not finite");
    }
    run_close(&r);
}

static void trainer_examine_should_name_the_layer_of_a_planted_nan(void) {
    check_planted("2.weight", 2);
    check_planted("0.bias", 0);
}

/* A regression MLP (1 feature, layers 0 linear, 1 tanh, 2 linear, 1 output) whose output
 * layer's weight is 3e38 and first layer's 1e-30, on batches of one sample: the forward pass
 * stays finite (the output is about 3e8 x), but the backward pass of layer 2 overflows the
 * gradient of its input (2 (out - y) * 3e38), which reaches layer 0's parameters only; layer
 * 2's own gradients (1e-30 x times the loss's) are finite. on_nonfinite `mode`. */
static void check_backward(const char *mode, int64_t layer, const char *param) {
    ct_option d[] = {{"kind", "linear"}, {"n", "16"}, {"features", "1"}, {"seed", "2"}};
    ct_options dopts = {d, 4, "test: data"};
    ct_option m[] = {{"hidden", "1"}, {"out", "1"}, {"activation", "tanh"}};
    ct_options mopts = {m, 3, "test: model"};
    ct_option nf[] = {{"on_nonfinite", mode}};
    ct_options nfopts = {nf, 1, "test: on_nonfinite"};
    ct_loader_params lp = ct_loader_default_params();
    lp.batch_size = 1;
    lp.shuffle = false;
    ct_optim_params op = ct_optim_default_params(CT_OPTIM_SGD);
    run r;
    memset(&r, 0, sizeof r);
    if (ct_dataset_open(ctx, "synthetic", &dopts, &r.data) != CT_OK ||
        ct_loader_create(ctx, r.data, &lp, &r.loader) != CT_OK ||
        ct_params_create(ctx, &r.params) != CT_OK ||
        ct_model_build_alloc(ctx, "mlp", &mopts, r.params, CT_F32, 1, (const int64_t[]){1}, 11,
                             &r.model) != CT_OK ||
        ct_optim_create(ctx, r.params, &op, &r.opt) != CT_OK) {
        fprintf(stderr, "setup: %s\n", ct_last_error(ctx));
        CT_CHECK(0);
        return;
    }
    const float values[] = {1e-30f, 0.0f, 3e38f, 0.0f}; /* 0.weight, 0.bias, 2.weight, 2.bias */
    CT_CHECK_INT(ct_params_count(r.params), 4);
    for (int64_t i = 0; i < ct_params_count(r.params) && i < 4; i++)
        ((float *)ct_params_at(r.params, i)->data)[0] = values[i];
    ct_trainer_params p = ct_trainer_default_params();
    p.model = r.model;
    p.store = r.params;
    p.optim = r.opt;
    p.train = r.loader;
    p.max_steps = 3;
    p.task.kind = CT_TASK_REGRESSION;
    p.nonfinite = &nfopts;
    p.callbacks.user = &r;
    p.callbacks.on_incident = on_incident;
    if (ct_trainer_create(ctx, &p, &r.t) != CT_OK) {
        fprintf(stderr, "setup: %s\n", ct_last_error(ctx));
        CT_CHECK(0);
        run_close(&r);
        return;
    }
    (void)ct_trainer_fit(r.t);
    CT_CHECK(r.s.incidents >= 1);
    CT_CHECK_INT(r.s.step, 1);
    CT_CHECK_MSG(strcmp(r.s.pass, "backward") == 0, "on_nonfinite %s: pass '%s'", mode, r.s.pass);
    CT_CHECK_INT(r.s.layer, layer);
    CT_CHECK_MSG(strcmp(r.s.param, param) == 0, "on_nonfinite %s: param '%s'", mode, r.s.param);
    for (int64_t i = 0; i < N_LAYERS; i++)
        CT_CHECK(r.s.recorded[i] && r.s.finite[i]);
    run_close(&r);
}

/* Under skip the update waits for the decision: the backward pass is run again over the step's
 * graph and names layer 2, whose backward made the first inf (in its input's gradient, no
 * parameter's). Under stop the update was made before the decision (it checks the gradients as
 * it applies them): the pass is judged by the parameters' gradients, the first bad one in
 * backward order being layer 0's weight. */
static void trainer_examine_should_find_where_the_backward_pass_overflowed(void) {
    check_backward("skip", 2, "");
    check_backward("stop", 0, "0.weight");
}

/* A spike has nothing non-finite: no layer named, every layer's output listed, in order. */
static void trainer_examine_should_list_every_layer_of_a_spike(void) {
    ct_option sp[] = {{"action", "warn"}, {"window", "8"}, {"warmup", "8"}};
    ct_options spopts = {sp, 3, "test: on_spike"};
    run r;
    if (!run_open(&r, "160", NULL, &spopts)) return;
    CT_CHECK_INT(ct_trainer_fit(r.t), CT_OK);
    CT_CHECK(r.s.incidents >= 1);
    CT_CHECK_MSG(r.s.pass[0] == '\0', "pass '%s'", r.s.pass);
    CT_CHECK_INT(r.s.layer, -1);
    CT_CHECK_INT(r.s.n_activations, N_LAYERS);
    for (int64_t i = 0; i < N_LAYERS; i++) {
        CT_CHECK(r.s.recorded[i] && r.s.finite[i]);
        char want[8];
        (void)snprintf(want, sizeof want, "%lld", (long long)i);
        CT_CHECK_MSG(strcmp(r.s.names[i], want) == 0, "layer %lld is '%s'", (long long)i,
                     r.s.names[i]);
    }
    run_close(&r);
}

static void quiet(void *user, ct_log_level level, const char *msg) {
    (void)user;
    (void)level;
    (void)msg;
}

int main(void) {
    ct_ctx_params cp = ct_ctx_default_params();
    cp.n_threads = 1;
    cp.log = quiet; /* the incidents' warnings are expected here */
    if (ct_ctx_create(&cp, &ctx) != CT_OK) return 1;
    CT_RUN(trainer_examine_should_name_the_layer_of_a_planted_nan);
    CT_RUN(trainer_examine_should_find_where_the_backward_pass_overflowed);
    CT_RUN(trainer_examine_should_list_every_layer_of_a_spike);
    ct_ctx_destroy(ctx);
    return ct_test_finish();
}
