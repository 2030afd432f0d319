/*
 * test_losses.c - the losses of loss.h against closed-form values and gradients, their error
 * messages, and bitwise determinism across thread counts.
 */
#include <math.h>
#include <string.h>

#include "ctrain/ctrain.h"
#include "harness.h"

static ct_ctx *make_ctx(int64_t threads) {
    ct_ctx_params p = ct_ctx_default_params();
    p.n_threads = threads;
    ct_ctx *ctx = NULL;
    if (ct_ctx_create(&p, &ctx) != CT_OK) abort();
    return ctx;
}

static ct_graph *make_graph(ct_ctx *ctx) {
    ct_graph *g = NULL;
    if (ct_graph_create(ctx, NULL, &g) != CT_OK) abort();
    return g;
}

static ct_tensor *leaf(ct_graph *g, float *data, int32_t ndim, const int64_t *shape) {
    ct_tensor *t = ct_graph_wrap(g, data, CT_F32, ndim, shape);
    if (t) t->flags |= CT_TENSOR_REQUIRES_GRAD;
    return t;
}

static float scalar(const ct_tensor *t) {
    return t ? ((const float *)t->data)[0] : NAN;
}

/* ---- cross-entropy and NLL ---- */

static void cross_entropy_should_match_closed_form(void) {
    ct_ctx *ctx = make_ctx(1);
    ct_graph *g = make_graph(ctx);
    /* row 0: softmax of [0, ln 3] is [1/4, 3/4]; row 1: uniform over 2 classes */
    float x[4] = {0.0f, logf(3.0f), 5.0f, 5.0f};
    int64_t t[2] = {1, 0};
    ct_tensor *lx = leaf(g, x, 2, (int64_t[]){2, 2});
    ct_tensor *lt = ct_graph_wrap(g, t, CT_I64, 1, (int64_t[]){2});
    ct_cross_entropy_params p = ct_cross_entropy_default_params();
    ct_tensor *loss = ct_loss_cross_entropy(g, lx, lt, &p);
    CT_CHECK(loss && loss->ndim == 0);
    double l0 = -log(0.75), l1 = log(2.0);
    CT_CHECK_CLOSE(scalar(loss), (l0 + l1) / 2, 1e-6, 1e-6);
    CT_CHECK_INT(ct_graph_backward(g, loss), CT_OK);
    /* d/dx = (softmax - onehot) / N */
    CT_CHECK_CLOSE(lx->grad[0], 0.25 / 2, 1e-6, 1e-5);
    CT_CHECK_CLOSE(lx->grad[1], -0.25 / 2, 1e-6, 1e-5);
    CT_CHECK_CLOSE(lx->grad[2], -0.5 / 2, 1e-6, 1e-5);
    CT_CHECK_CLOSE(lx->grad[3], 0.5 / 2, 1e-6, 1e-5);

    /* label smoothing s: (1 - s)(lse - x_t) + s (lse - mean(x)) */
    ct_graph_reset(g);
    lx = leaf(g, x, 2, (int64_t[]){2, 2});
    lt = ct_graph_wrap(g, t, CT_I64, 1, (int64_t[]){2});
    p.label_smoothing = 0.3f;
    p.reduction = CT_REDUCTION_SUM;
    loss = ct_loss_cross_entropy(g, lx, lt, &p);
    double lse0 = log(4.0), s = 0.3;
    double r0 = (1 - s) * (lse0 - log(3.0)) + s * (lse0 - log(3.0) / 2);
    double r1 = log(2.0);
    CT_CHECK_CLOSE(scalar(loss), r0 + r1, 1e-6, 1e-6);
    CT_CHECK_INT(ct_graph_backward(g, loss), CT_OK);
    /* d/dx = softmax - (1 - s) onehot - s / C */
    CT_CHECK_CLOSE(lx->grad[0], 0.25 - 0.15, 1e-6, 1e-5);
    CT_CHECK_CLOSE(lx->grad[1], 0.75 - 0.7 - 0.15, 1e-6, 1e-5);
    ct_graph_destroy(g);
    ct_ctx_destroy(ctx);
}

static void cross_entropy_should_divide_mean_by_targets_not_ignored(void) {
    ct_ctx *ctx = make_ctx(1);
    ct_graph *g = make_graph(ctx);
    float x[9] = {1, 2, 3, 0, 0, 0, -1, 4, 2};
    int64_t t[3] = {2, 7, 1};
    ct_cross_entropy_params p = ct_cross_entropy_default_params();
    p.ignore_index = 7;
    p.label_smoothing = 0.1f;
    p.reduction = CT_REDUCTION_NONE;
    ct_tensor *lx = leaf(g, x, 2, (int64_t[]){3, 3});
    ct_tensor *lt = ct_graph_wrap(g, t, CT_I64, 1, (int64_t[]){3});
    ct_tensor *rows = ct_loss_cross_entropy(g, lx, lt, &p);
    CT_CHECK(rows && rows->ndim == 1 && rows->shape[0] == 3);
    if (!rows) goto done;
    const float *r = rows->data;
    CT_CHECK(r[1] == 0.0f); /* ignored */
    p.reduction = CT_REDUCTION_MEAN;
    ct_tensor *mean = ct_loss_cross_entropy(g, lx, lt, &p);
    CT_CHECK_CLOSE(scalar(mean), ((double)r[0] + (double)r[2]) / 2, 1e-6, 1e-6);
    p.reduction = CT_REDUCTION_SUM;
    ct_tensor *sum = ct_loss_cross_entropy(g, lx, lt, &p);
    CT_CHECK_CLOSE(scalar(sum), (double)r[0] + (double)r[2], 1e-6, 1e-6);
    /* the ignored row gets no gradient, the others 1/2 each */
    CT_CHECK_INT(ct_graph_backward(g, mean), CT_OK);
    for (int j = 3; j < 6; j++)
        CT_CHECK(lx->grad[j] == 0.0f);
    double gsum = 0;
    for (int j = 0; j < 3; j++)
        gsum += lx->grad[j];
    CT_CHECK_CLOSE(gsum, 0.0, 1e-6, 0); /* softmax rows minus a distribution sum to 0 */
    CT_CHECK_CLOSE(lx->grad[2], 0.5 * (exp(3.0) / (exp(1.0) + exp(2.0) + exp(3.0)) - 0.9 - 0.1 / 3),
                   1e-6, 1e-5);

    /* every target ignored: the mean is 0/0 = NaN (as PyTorch) and gradients are zero */
    ct_graph_reset(g);
    int64_t all[3] = {7, 7, 7};
    lx = leaf(g, x, 2, (int64_t[]){3, 3});
    lt = ct_graph_wrap(g, all, CT_I64, 1, (int64_t[]){3});
    p.reduction = CT_REDUCTION_MEAN;
    mean = ct_loss_cross_entropy(g, lx, lt, &p);
    CT_CHECK(mean && isnan(scalar(mean)));
    CT_CHECK_INT(ct_graph_backward(g, mean), CT_OK);
    for (int j = 0; j < 9; j++)
        CT_CHECK(lx->grad[j] == 0.0f);
done:
    ct_graph_destroy(g);
    ct_ctx_destroy(ctx);
}

static void cross_entropy_should_be_stable_for_large_logits(void) {
    ct_ctx *ctx = make_ctx(1);
    ct_graph *g = make_graph(ctx);
    float x[3] = {1e4f, -1e4f, 1e4f - 2.0f};
    int32_t t[1] = {2};
    ct_tensor *lx = leaf(g, x, 2, (int64_t[]){1, 3});
    ct_tensor *lt = ct_graph_wrap(g, t, CT_I32, 1, (int64_t[]){1});
    ct_tensor *loss = ct_loss_cross_entropy(g, lx, lt, NULL);
    /* lse = 1e4 + log(1 + e^-2) */
    CT_CHECK_CLOSE(scalar(loss), 2.0 + log1p(exp(-2.0)), 1e-4, 1e-5);
    CT_CHECK_INT(ct_graph_backward(g, loss), CT_OK);
    CT_CHECK(isfinite(lx->grad[0]) && isfinite(lx->grad[1]) && isfinite(lx->grad[2]));
    CT_CHECK(lx->grad[1] == 0.0f);
    ct_graph_destroy(g);
    ct_ctx_destroy(ctx);
}

static void nll_should_pick_minus_log_probabilities(void) {
    ct_ctx *ctx = make_ctx(1);
    ct_graph *g = make_graph(ctx);
    float lp[6] = {-0.5f, -1.0f, -2.0f, -3.0f, -0.25f, -4.0f};
    int64_t t[3] = {1, -100, 0};
    ct_tensor *lx = leaf(g, lp, 2, (int64_t[]){3, 2});
    ct_tensor *lt = ct_graph_wrap(g, t, CT_I64, 1, (int64_t[]){3});
    ct_tensor *m = ct_loss_nll(g, lx, lt, -100, CT_REDUCTION_MEAN);
    CT_CHECK_CLOSE(scalar(m), (1.0 + 0.25) / 2, 1e-7, 1e-6);
    ct_tensor *s = ct_loss_nll(g, lx, lt, -100, CT_REDUCTION_SUM);
    CT_CHECK_CLOSE(scalar(s), 1.25, 1e-7, 1e-6);
    ct_tensor *none = ct_loss_nll(g, lx, lt, -100, CT_REDUCTION_NONE);
    CT_CHECK(none && none->shape[0] == 3);
    if (none) {
        const float *v = none->data;
        CT_CHECK(v[0] == 1.0f && v[1] == 0.0f && v[2] == 0.25f);
    }
    CT_CHECK_INT(ct_graph_backward(g, m), CT_OK);
    const float want[6] = {0, -0.5f, 0, 0, -0.5f, 0};
    CT_CHECK_ARRAYS("nll grad", lx->grad, want, 6, 0.0, 0.0);
    ct_graph_destroy(g);
    ct_ctx_destroy(ctx);
}

static void cross_entropy_should_reject_bad_targets_and_shapes(void) {
    ct_ctx *ctx = make_ctx(1);
    ct_graph *g = make_graph(ctx);
    float x[40] = {0};
    int64_t t[4] = {0, 9, -100, 12};
    ct_tensor *lx = leaf(g, x, 2, (int64_t[]){4, 10});
    ct_tensor *lt = ct_graph_wrap(g, t, CT_I64, 1, (int64_t[]){4});
    CT_CHECK(ct_loss_cross_entropy(g, lx, lt, NULL) == NULL);
    CT_CHECK_INT(ct_graph_status(g), CT_ERR_INVALID_ARG);
    CT_CHECK_MSG(strstr(ct_last_error(ctx),
                        "cross_entropy: target 12 at sample 3 is out of range [0, 10)") != NULL,
                 "%s", ct_last_error(ctx));

    ct_graph_reset(g);
    t[3] = -1; /* negative and not ignore_index */
    lx = leaf(g, x, 2, (int64_t[]){4, 10});
    lt = ct_graph_wrap(g, t, CT_I64, 1, (int64_t[]){4});
    CT_CHECK(ct_loss_nll(g, lx, lt, -100, CT_REDUCTION_SUM) == NULL);
    CT_CHECK(strstr(ct_last_error(ctx), "nll_loss: target -1 at sample 3") != NULL);

    ct_graph_reset(g);
    lx = leaf(g, x, 2, (int64_t[]){4, 10});
    lt = ct_graph_wrap(g, t, CT_I64, 1, (int64_t[]){3});
    CT_CHECK(ct_loss_cross_entropy(g, lx, lt, NULL) == NULL);
    CT_CHECK_INT(ct_graph_status(g), CT_ERR_SHAPE);
    CT_CHECK_MSG(strstr(ct_last_error(ctx), "target [3] does not match input [4,10]") != NULL, "%s",
                 ct_last_error(ctx));

    ct_graph_reset(g);
    lx = leaf(g, x, 3, (int64_t[]){2, 2, 10});
    CT_CHECK(ct_loss_cross_entropy(g, lx, lt, NULL) == NULL);
    CT_CHECK(strstr(ct_last_error(ctx), "must be [N, C]") != NULL);
    CT_CHECK(strstr(ct_last_error(ctx), "[2,2,10]") != NULL);

    ct_graph_reset(g);
    lx = leaf(g, x, 2, (int64_t[]){4, 10});
    ct_tensor *ft = ct_graph_wrap(g, x, CT_F32, 1, (int64_t[]){4});
    CT_CHECK(ct_loss_cross_entropy(g, lx, ft, NULL) == NULL);
    CT_CHECK(strstr(ct_last_error(ctx), "target must be i32 or i64") != NULL);

    ct_graph_reset(g);
    t[3] = 0;
    lt = ct_graph_wrap(g, t, CT_I64, 1, (int64_t[]){4});
    lx = leaf(g, x, 2, (int64_t[]){4, 10});
    ct_cross_entropy_params p = ct_cross_entropy_default_params();
    p.label_smoothing = 1.5f;
    CT_CHECK(ct_loss_cross_entropy(g, lx, lt, &p) == NULL);
    CT_CHECK(strstr(ct_last_error(ctx), "label_smoothing must be in [0, 1], got 1.5") != NULL);

    ct_graph_reset(g);
    lt = ct_graph_wrap(g, t, CT_I64, 1, (int64_t[]){4});
    lx = leaf(g, x, 2, (int64_t[]){4, 10});
    p = ct_cross_entropy_default_params();
    p.reduction = CT_REDUCTION_COUNT;
    CT_CHECK(ct_loss_cross_entropy(g, lx, lt, &p) == NULL);
    CT_CHECK(strstr(ct_last_error(ctx), "is not a ct_reduction") != NULL);

    /* a failed graph stays failed: later losses return NULL */
    CT_CHECK(ct_loss_mse(g, lx, lx, CT_REDUCTION_MEAN) == NULL);
    ct_graph_reset(g);
    CT_CHECK(ct_loss_cross_entropy(g, NULL, NULL, NULL) == NULL);
    CT_CHECK_INT(ct_graph_status(g), CT_ERR_INVALID_ARG);
    ct_graph_destroy(g);
    ct_ctx_destroy(ctx);
}

/* ---- elementwise losses ---- */

static void regression_losses_should_match_closed_form(void) {
    ct_ctx *ctx = make_ctx(1);
    ct_graph *g = make_graph(ctx);
    float p[4] = {0.0f, 1.0f, -2.0f, 0.25f};
    float t[4] = {0.5f, -1.0f, -2.5f, 0.25f};
    /* d = p - t = -0.5, 2, 0.5, 0 */
    int64_t sh[1] = {4};
    ct_tensor *lp = leaf(g, p, 1, sh), *lt = ct_graph_wrap(g, t, CT_F32, 1, sh);
    CT_CHECK_CLOSE(scalar(ct_loss_mse(g, lp, lt, CT_REDUCTION_MEAN)), (0.25 + 4 + 0.25) / 4, 1e-7,
                   1e-6);
    CT_CHECK_CLOSE(scalar(ct_loss_mse(g, lp, lt, CT_REDUCTION_SUM)), 4.5, 1e-7, 1e-6);
    CT_CHECK_CLOSE(scalar(ct_loss_l1(g, lp, lt, CT_REDUCTION_MEAN)), 3.0 / 4, 1e-7, 1e-6);
    /* beta 1: 0.5 d^2 inside, |d| - 0.5 outside */
    CT_CHECK_CLOSE(scalar(ct_loss_smooth_l1(g, lp, lt, 1.0f, CT_REDUCTION_SUM)),
                   0.125 + 1.5 + 0.125, 1e-7, 1e-6);
    /* beta 0.25: 0.5 d^2 / beta inside, |d| - beta/2 outside */
    CT_CHECK_CLOSE(scalar(ct_loss_smooth_l1(g, lp, lt, 0.25f, CT_REDUCTION_SUM)),
                   0.375 + 1.875 + 0.375, 1e-7, 1e-6);
    /* beta 0 is L1 (PyTorch) */
    CT_CHECK_CLOSE(scalar(ct_loss_smooth_l1(g, lp, lt, 0.0f, CT_REDUCTION_SUM)), 3.0, 1e-7, 1e-6);
    /* Huber delta 1.5: 0.5 d^2 inside, delta (|d| - delta/2) outside */
    CT_CHECK_CLOSE(scalar(ct_loss_huber(g, lp, lt, 1.5f, CT_REDUCTION_SUM)),
                   0.125 + 1.5 * (2 - 0.75) + 0.125, 1e-7, 1e-6);
    ct_tensor *none = ct_loss_huber(g, lp, lt, 0.25f, CT_REDUCTION_NONE);
    CT_CHECK(none && none->ndim == 1 && none->shape[0] == 4);
    if (none) {
        const float want[4] = {0.25f * 0.375f, 0.25f * 1.875f, 0.25f * 0.375f, 0.0f};
        CT_CHECK_ARRAYS("huber none", none->data, want, 4, 1e-7, 1e-6);
    }

    /* gradients: huber delta 1.5 sum -> clamp(d, -delta, delta) */
    ct_tensor *h = ct_loss_huber(g, lp, lt, 1.5f, CT_REDUCTION_SUM);
    CT_CHECK_INT(ct_graph_backward(g, h), CT_OK);
    const float want_h[4] = {-0.5f, 1.5f, 0.5f, 0.0f};
    CT_CHECK_ARRAYS("huber grad", lp->grad, want_h, 4, 1e-7, 1e-6);

    ct_graph_reset(g);
    lp = leaf(g, p, 1, sh);
    lt = leaf(g, t, 1, sh);
    ct_tensor *l1 = ct_loss_l1(g, lp, lt, CT_REDUCTION_MEAN);
    CT_CHECK_INT(ct_graph_backward(g, l1), CT_OK);
    const float want_l1[4] = {-0.25f, 0.25f, 0.25f, 0.0f}; /* sign(0) = 0, as PyTorch */
    CT_CHECK_ARRAYS("l1 grad", lp->grad, want_l1, 4, 0.0, 0.0);
    const float want_l1t[4] = {0.25f, -0.25f, -0.25f, 0.0f};
    CT_CHECK_ARRAYS("l1 target grad", lt->grad, want_l1t, 4, 0.0, 0.0);

    ct_graph_reset(g);
    lp = leaf(g, p, 1, sh);
    lt = ct_graph_wrap(g, t, CT_F32, 1, sh);
    ct_tensor *mse = ct_loss_mse(g, lp, lt, CT_REDUCTION_NONE);
    const float seed[4] = {1, 2, 3, 4};
    CT_CHECK_INT(ct_graph_backward_seed(g, mse, seed), CT_OK);
    const float want_m[4] = {-1.0f, 8.0f, 3.0f, 0.0f}; /* 2 d seed */
    CT_CHECK_ARRAYS("mse grad", lp->grad, want_m, 4, 0.0, 0.0);
    ct_graph_destroy(g);
    ct_ctx_destroy(ctx);
}

static void bce_with_logits_should_be_stable(void) {
    ct_ctx *ctx = make_ctx(1);
    ct_graph *g = make_graph(ctx);
    float x[5] = {0.0f, 100.0f, -100.0f, 2.0f, -3.0f};
    float t[5] = {0.3f, 1.0f, 1.0f, 0.0f, 0.5f};
    int64_t sh[1] = {5};
    ct_tensor *lx = leaf(g, x, 1, sh), *lt = leaf(g, t, 1, sh);
    ct_tensor *v = ct_loss_bce_with_logits(g, lx, lt, CT_REDUCTION_NONE);
    CT_CHECK(v != NULL);
    if (!v) goto done;
    const float *o = v->data;
    CT_CHECK_CLOSE(o[0], log(2.0), 1e-7, 1e-6);
    CT_CHECK_CLOSE(o[1], 0.0, 1e-7, 0);
    CT_CHECK_CLOSE(o[2], 100.0, 1e-5, 1e-6);
    CT_CHECK_CLOSE(o[3], 2.0 + log1p(exp(-2.0)), 1e-6, 1e-6);
    /* -t log(sigmoid(x)) - (1-t) log(1 - sigmoid(x)) */
    double sg = 1.0 / (1.0 + exp(3.0));
    CT_CHECK_CLOSE(o[4], -0.5 * log(sg) - 0.5 * log(1 - sg), 1e-6, 1e-6);
    ct_tensor *m = ct_loss_bce_with_logits(g, lx, lt, CT_REDUCTION_MEAN);
    CT_CHECK_INT(ct_graph_backward(g, m), CT_OK);
    /* d/dx = (sigmoid(x) - t) / n, d/dt = -x / n */
    CT_CHECK_CLOSE(lx->grad[0], (0.5 - 0.3) / 5, 1e-7, 1e-5);
    CT_CHECK_CLOSE(lx->grad[1], 0.0, 1e-7, 0);
    CT_CHECK_CLOSE(lx->grad[2], -1.0 / 5, 1e-7, 1e-5);
    CT_CHECK_CLOSE(lx->grad[4], (sg - 0.5) / 5, 1e-7, 1e-5);
    CT_CHECK_CLOSE(lt->grad[3], -2.0 / 5, 1e-7, 1e-6);
    CT_CHECK_CLOSE(lt->grad[2], 100.0 / 5, 1e-7, 1e-6);
done:
    ct_graph_destroy(g);
    ct_ctx_destroy(ctx);
}

static void regression_losses_should_reject_bad_arguments(void) {
    ct_ctx *ctx = make_ctx(1);
    ct_graph *g = make_graph(ctx);
    float a[6] = {0}, b[6] = {0};
    ct_tensor *la = leaf(g, a, 2, (int64_t[]){2, 3});
    ct_tensor *lb = ct_graph_wrap(g, b, CT_F32, 2, (int64_t[]){3, 2});
    CT_CHECK(ct_loss_mse(g, la, lb, CT_REDUCTION_MEAN) == NULL);
    CT_CHECK_INT(ct_graph_status(g), CT_ERR_SHAPE);
    CT_CHECK_MSG(strstr(ct_last_error(ctx),
                        "mse_loss: input [2,3] and target [3,2] must have the same shape") != NULL,
                 "%s", ct_last_error(ctx));

    ct_graph_reset(g);
    la = leaf(g, a, 2, (int64_t[]){2, 3});
    CT_CHECK(ct_loss_huber(g, la, la, 0.0f, CT_REDUCTION_MEAN) == NULL);
    CT_CHECK_INT(ct_graph_status(g), CT_ERR_INVALID_ARG);
    CT_CHECK(strstr(ct_last_error(ctx), "huber_loss: delta must be > 0, got 0") != NULL);

    ct_graph_reset(g);
    la = leaf(g, a, 2, (int64_t[]){2, 3});
    CT_CHECK(ct_loss_smooth_l1(g, la, la, -1.0f, CT_REDUCTION_MEAN) == NULL);
    CT_CHECK(strstr(ct_last_error(ctx), "beta must be >= 0, got -1") != NULL);

    ct_graph_reset(g);
    la = leaf(g, a, 2, (int64_t[]){2, 3});
    ct_tensor *li = ct_graph_wrap(g, a, CT_I32, 2, (int64_t[]){2, 3});
    CT_CHECK(ct_loss_bce_with_logits(g, la, li, CT_REDUCTION_MEAN) == NULL);
    CT_CHECK(strstr(ct_last_error(ctx), "bce_with_logits: target must be f32, got i32") != NULL);

    ct_graph_reset(g);
    la = leaf(g, a, 2, (int64_t[]){2, 3});
    CT_CHECK(ct_loss_l1(g, la, la, (ct_reduction)7) == NULL);
    CT_CHECK(strstr(ct_last_error(ctx), "l1_loss: reduction 7 is not a ct_reduction") != NULL);
    ct_graph_destroy(g);
    ct_ctx_destroy(ctx);
}

static void losses_should_record_nothing_without_grad(void) {
    ct_ctx *ctx = make_ctx(1);
    ct_graph *g = make_graph(ctx);
    float x[4] = {1, 2, 3, 4};
    int64_t t[2] = {0, 1};
    ct_tensor *lx = leaf(g, x, 2, (int64_t[]){2, 2});
    ct_tensor *lt = ct_graph_wrap(g, t, CT_I64, 1, (int64_t[]){2});
    ct_graph_set_grad_enabled(g, false);
    ct_tensor *loss = ct_loss_cross_entropy(g, lx, lt, NULL);
    CT_CHECK(loss && loss->node == NULL && !(loss->flags & CT_TENSOR_REQUIRES_GRAD));
    ct_tensor *m = ct_loss_mse(g, lx, lx, CT_REDUCTION_SUM);
    CT_CHECK(m && m->node == NULL);
    CT_CHECK(scalar(m) == 0.0f);
    ct_graph_destroy(g);
    ct_ctx_destroy(ctx);
}

/* ---- determinism ---- */

enum { DN = 1536, DC = 37 };

/* Loss i of a fixed set on fixed data with nt threads: its value and its input gradient. */
static void run_loss(int i, int64_t nt, float *x, int64_t *t, float *y, float *out, float *grad) {
    ct_ctx *ctx = make_ctx(nt);
    ct_graph *g = make_graph(ctx);
    int64_t sh[2] = {DN, DC};
    ct_tensor *lx = leaf(g, x, 2, sh);
    ct_tensor *lt = ct_graph_wrap(g, t, CT_I64, 1, sh);
    ct_tensor *ly = ct_graph_wrap(g, y, CT_F32, 2, sh);
    ct_cross_entropy_params p = ct_cross_entropy_default_params();
    p.label_smoothing = 0.1f;
    ct_tensor *l = NULL;
    switch (i) {
    case 0:
        l = ct_loss_cross_entropy(g, lx, lt, &p);
        break;
    case 1:
        l = ct_loss_nll(g, lx, lt, -100, CT_REDUCTION_SUM);
        break;
    case 2:
        l = ct_loss_bce_with_logits(g, lx, ly, CT_REDUCTION_MEAN);
        break;
    case 3:
        l = ct_loss_mse(g, lx, ly, CT_REDUCTION_MEAN);
        break;
    case 4:
        l = ct_loss_l1(g, lx, ly, CT_REDUCTION_SUM);
        break;
    case 5:
        l = ct_loss_smooth_l1(g, lx, ly, 0.5f, CT_REDUCTION_MEAN);
        break;
    default:
        l = ct_loss_huber(g, lx, ly, 0.7f, CT_REDUCTION_MEAN);
        break;
    }
    *out = scalar(l);
    CT_CHECK_INT(ct_graph_backward(g, l), CT_OK);
    if (lx->grad) memcpy(grad, lx->grad, sizeof(float) * DN * DC);
    ct_graph_destroy(g);
    ct_ctx_destroy(ctx);
}

static void losses_should_give_same_bits_for_any_thread_count(void) {
    static float x[DN * DC], y[DN * DC], g1[DN * DC], g4[DN * DC];
    static int64_t t[DN];
    ct_rng r = ct_rng_init(7, 0);
    ct_rng_normal(&r, x, DN * DC, 0.0f, 3.0f);
    ct_rng_uniform(&r, y, DN * DC);
    for (int64_t i = 0; i < DN; i++)
        t[i] = i % 11 == 0 ? -100 : (int64_t)ct_rng_below(&r, DC);
    for (int i = 0; i < 7; i++) {
        float o1 = NAN, o4 = NAN;
        memset(g1, 0, sizeof g1);
        memset(g4, 0xff, sizeof g4);
        run_loss(i, 1, x, t, y, &o1, g1);
        run_loss(i, 4, x, t, y, &o4, g4);
        CT_CHECK_MSG(memcmp(&o1, &o4, sizeof o1) == 0, "loss %d: %.9g vs %.9g", i, (double)o1,
                     (double)o4);
        CT_CHECK_MSG(memcmp(g1, g4, sizeof g1) == 0, "loss %d: gradients differ", i);
        CT_CHECK(isfinite(o1));
    }
}

int main(void) {
    CT_RUN(cross_entropy_should_match_closed_form);
    CT_RUN(cross_entropy_should_divide_mean_by_targets_not_ignored);
    CT_RUN(cross_entropy_should_be_stable_for_large_logits);
    CT_RUN(nll_should_pick_minus_log_probabilities);
    CT_RUN(cross_entropy_should_reject_bad_targets_and_shapes);
    CT_RUN(regression_losses_should_match_closed_form);
    CT_RUN(bce_with_logits_should_be_stable);
    CT_RUN(regression_losses_should_reject_bad_arguments);
    CT_RUN(losses_should_record_nothing_without_grad);
    CT_RUN(losses_should_give_same_bits_for_any_thread_count);
    return ct_test_finish();
}
