/*
 * mytask.c - an example plugin for `ctrain fit`: a dataset type, a task, a model type and a
 * metric type, built into libmytask.so by the Makefile here and named in experiment.yaml:
 *     data.train: {plugin: ./libmytask.so, symbol: my_data, n: 1000, seed: 1}
 *     task:       {plugin: ./libmytask.so, symbol: my_task}
 *     model:      {plugin: ./libmytask.so, symbol: my_model, hidden: 16}
 *     metrics:    {valid: [accuracy, {plugin: ./libmytask.so, symbol: my_metric}]}
 *
 * my_data is the XOR problem: n points (x0, x1) uniform in [-1, 1)^2, class 1 where the signs
 * of x0 and x1 differ, else 0; a linear model cannot separate it, an MLP can. Sample i is a
 * hash of (seed, i), so the dataset stores nothing and reads in any order give the same data.
 * Options: n (samples, default 1000), seed (default 0); its check reads them without making
 * the dataset, so that ctrain reports a bad value before it opens any split's data.
 *
 * my_task is a classification task whose loss is cross-entropy with label smoothing 0.05
 * (the targets become 0.975 and 0.025 rather than 1 and 0).
 *
 * my_model is a two-layer tanh network, in.weight/in.bias and out.weight/out.bias, written with
 * the library's ops: its own tensors (declared in the store, so the optimizer, checkpoints and
 * EMA handle them), initialisation and forward. Options: hidden (default 16), out (default 2).
 *
 * my_metric is the error rate, the share of samples whose largest logit is not their class
 * (so valid/error = 1 - valid/acc): two accumulator slots, wrong and seen, which are sums, so
 * summing them across MPI ranks gives the metric of the whole set. No options.
 *
 * The plugin is compiled against ctrain's headers only and not linked with libctrain: its calls
 * into the library (ct_options_*, ct_fail_at through CT_FAIL, ct_graph_*, ct_loss_*) resolve
 * against the ctrain executable that loads it.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "ctrain/ctrain.h"
#include "ctrain/loss.h"
#include "ctrain/model.h"
#include "ctrain/ops.h"
#include "ctrain/trainer.h"

#define LABEL_SMOOTHING 0.05f

/* ---- the dataset ---- */

typedef struct xor_data {
    int64_t n;
    uint64_t seed;
} xor_data;

/* Reads the options; open and check share it, so the two agree on what is valid. */
static ct_status xor_options(ct_ctx *ctx, const ct_options *opts, int64_t *n, int64_t *seed) {
    static const char *const known[] = {"n", "seed", NULL};
    CT_TRY(ct_options_check(ctx, opts, known));
    CT_TRY(ct_options_int(ctx, opts, "n", 1000, 1, INT64_C(1) << 40, n));
    return ct_options_int(ctx, opts, "seed", 0, 0, INT64_MAX, seed);
}

/* The options alone: ctrain calls it for every split before it opens any dataset. */
static ct_status xor_check(ct_ctx *ctx, const ct_options *opts) {
    int64_t n, seed;
    return xor_options(ctx, opts, &n, &seed);
}

static ct_status xor_open(ct_ctx *ctx, const ct_options *opts, ct_dataset_info *info, void **self) {
    *self = NULL;
    int64_t n, seed;
    CT_TRY(xor_options(ctx, opts, &n, &seed));
    xor_data *d = malloc(sizeof *d);
    if (!d) return CT_FAIL(ctx, CT_ERR_OOM, "%s: out of memory", opts->where);
    d->n = n;
    d->seed = (uint64_t)seed;
    info->n = n;
    info->x_dtype = CT_F32;
    info->x_ndim = 1;
    info->x_shape[0] = 2;
    info->y_dtype = CT_I64; /* one class index per sample */
    info->y_ndim = 0;
    info->n_classes = 2;
    *self = d;
    return CT_OK;
}

/* splitmix64: a well-mixed 64-bit hash of its input */
static uint64_t mix(uint64_t z) {
    z += UINT64_C(0x9e3779b97f4a7c15);
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

/* A float in [-1, 1) from the top 24 bits of a hash. */
static float unit(uint64_t h) {
    return (float)(h >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

static ct_status xor_get(const void *self, int64_t i, void *x, void *y) {
    const xor_data *d = self;
    uint64_t h = mix(d->seed ^ mix((uint64_t)i));
    float *xf = x;
    xf[0] = unit(h);
    xf[1] = unit(mix(h));
    *(int64_t *)y = (xf[0] < 0) != (xf[1] < 0);
    return CT_OK;
}

static void xor_close(ct_ctx *ctx, void *self) {
    (void)ctx;
    free(self);
}

const ct_dataset_vtable my_data = {
    .tag = CT_PLUGIN_DATASET, /* what this struct is, for the plugin ABI these headers describe */
    .name = "xor",
    .open = xor_open,
    .get = xor_get,
    .close = xor_close,
    .check = xor_check, /* optional: without it the options are checked at open */
};

/* ---- the task ---- */

/* output: logits [B, 2]; target: classes [B] */
static ct_tensor *smoothed_ce(void *user, ct_graph *g, ct_tensor *output, ct_tensor *target) {
    (void)user;
    ct_cross_entropy_params p = ct_cross_entropy_default_params();
    p.label_smoothing = LABEL_SMOOTHING;
    return ct_loss_cross_entropy(g, output, target, &p);
}

const ct_task my_task = {
    .tag = CT_PLUGIN_TASK,
    .kind = CT_TASK_CLASSIFICATION,
    .prep_batch = NULL, /* the default: the batch's x and y */
    .loss = smoothed_ce,
    .user = NULL,
};

/* ---- the model ---- */

typedef struct tanh_net {
    ct_tensor *w1, *b1, *w2, *b2; /* in the caller's store; data from ct_params_alloc on */
} tanh_net;

/* The options, read once for create and for check (ctrain calls check before any data). */
static ct_status net_options(ct_ctx *ctx, const ct_options *opts, int64_t *hidden, int64_t *out) {
    static const char *const known[] = {"hidden", "out", NULL};
    CT_TRY(ct_options_check(ctx, opts, known));
    CT_TRY(ct_options_int(ctx, opts, "hidden", 16, 1, 1 << 16, hidden));
    return ct_options_int(ctx, opts, "out", 2, 1, 1 << 16, out);
}

static ct_status net_check(ct_ctx *ctx, const ct_options *opts) {
    int64_t hidden, out;
    return net_options(ctx, opts, &hidden, &out);
}

static ct_status net_create(ct_ctx *ctx,
                            const ct_options *opts,
                            ct_params *params,
                            ct_dtype in_dtype,
                            int32_t in_ndim,
                            const int64_t *in_shape,
                            int32_t *out_ndim,
                            int64_t *out_shape,
                            void **self) {
    int64_t hidden, out;
    CT_TRY(net_options(ctx, opts, &hidden, &out));
    if (in_dtype != CT_F32 || in_ndim != 1)
        return CT_FAIL(ctx, CT_ERR_SHAPE, "%s: my_model takes f32 samples [features]", opts->where);
    tanh_net *n = calloc(1, sizeof *n);
    if (!n) return CT_FAIL(ctx, CT_ERR_OOM, "my_model: out of memory");
    *self = n;
    int64_t in = in_shape[0];
    CT_TRY(ct_params_add(params, "in.weight", CT_F32, 2, (const int64_t[]){hidden, in},
                         CT_PARAM_TRAINABLE, &n->w1));
    CT_TRY(ct_params_add(params, "in.bias", CT_F32, 1, (const int64_t[]){hidden},
                         CT_PARAM_TRAINABLE, &n->b1));
    CT_TRY(ct_params_add(params, "out.weight", CT_F32, 2, (const int64_t[]){out, hidden},
                         CT_PARAM_TRAINABLE, &n->w2));
    CT_TRY(ct_params_add(params, "out.bias", CT_F32, 1, (const int64_t[]){out}, CT_PARAM_TRAINABLE,
                         &n->b2));
    *out_ndim = 1;
    out_shape[0] = out;
    return CT_OK;
}

static void net_init(void *self, ct_rng *rng) {
    tanh_net *n = self;
    ct_nn_init_linear(n->w1, n->b1, rng); /* nn.Linear's default initialisation */
    ct_nn_init_linear(n->w2, n->b2, rng);
}

static ct_tensor *net_forward(void *self, ct_graph *g, ct_tensor *x) {
    tanh_net *n = self;
    ct_tensor *h = ct_op_tanh(g, ct_op_linear(g, x, n->w1, n->b1));
    return ct_op_linear(g, h, n->w2, n->b2);
}

static void net_destroy(ct_ctx *ctx, void *self) {
    (void)ctx;
    free(self);
}

const ct_model_vtable my_model = {
    .tag = CT_PLUGIN_MODEL,
    .name = "my_model",
    .create = net_create,
    .init = net_init,
    .forward = net_forward,
    .destroy = net_destroy,
    .check = net_check,
};

/* ---- the metric ---- */

enum { SLOT_WRONG, SLOT_SEEN, N_SLOTS };

static ct_status err_open(
    ct_ctx *ctx, const ct_options *opts, int64_t n_classes, void **self, ct_metric_layout *layout) {
    static const char *const known[] = {NULL};
    (void)n_classes;
    *self = NULL; /* no state: everything is in the accumulator slots */
    CT_TRY(ct_options_check(ctx, opts, known));
    layout->n_accum = N_SLOTS;
    layout->n_values = 1;
    snprintf(layout->name, sizeof layout->name, "error");
    return CT_OK;
}

static void err_value_name(const void *self, int64_t i, char *buf, size_t size) {
    (void)self;
    (void)i;
    if (size) buf[0] = '\0'; /* one value: "valid/error" */
}

/* pred: f32 logits [B, C]; target: i64 classes [B] */
static ct_status
err_check(ct_ctx *ctx, const void *self, const ct_tensor *pred, const ct_tensor *target) {
    (void)self;
    if (pred->ndim != 2 || pred->dtype != CT_F32 || target->ndim != 1 || target->dtype != CT_I64 ||
        target->shape[0] != pred->shape[0])
        return CT_FAIL(ctx, CT_ERR_SHAPE,
                       "my_metric: expected f32 logits [B, C] and i64 classes [B]");
    return CT_OK;
}

static void
err_update(const void *self, double *accum, const ct_tensor *pred, const ct_tensor *target) {
    (void)self;
    const float *p = pred->data;
    const int64_t *y = target->data;
    int64_t b = pred->shape[0], c = pred->shape[1];
    for (int64_t i = 0; i < b; i++) {
        int64_t arg = 0;
        for (int64_t j = 1; j < c; j++)
            if (p[i * c + j] > p[i * c + arg]) arg = j;
        accum[SLOT_WRONG] += arg != y[i];
        accum[SLOT_SEEN] += 1.0;
    }
}

static void err_compute(const void *self, const double *accum, double *values) {
    (void)self;
    values[0] = accum[SLOT_SEEN] > 0 ? accum[SLOT_WRONG] / accum[SLOT_SEEN] : 0.0;
}

const ct_metric_vtable my_metric = {
    .tag = CT_PLUGIN_METRIC,
    .name = "error_rate",
    .open = err_open,
    .value_name = err_value_name,
    .check = err_check,
    .update = err_update,
    .update_loss = NULL,
    .compute = err_compute,
    .close = NULL,
};
