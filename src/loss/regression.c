/*
 * regression.c - elementwise losses of a prediction against a target of the same shape:
 * binary cross-entropy on logits, MSE, L1, smooth L1 and Huber, as PyTorch's functions.
 *
 * Each loss is one row of a table: its value f(p, t; a) and its derivatives in p and t, with a
 * the loss's float parameter (beta, delta). One forward and one backward serve them all.
 * Elements are independent and run in parallel; MEAN and SUM add the per-element values in a
 * fixed order, so results have the same bits for any thread count. Gradients flow into the
 * target too when it requires them (as in PyTorch).
 */
#include <math.h>

#include "ctrain/loss.h"
#include "ops/ops_internal.h"

typedef enum elem_kind { K_BCE_LOGITS = 0, K_MSE, K_L1, K_SMOOTH_L1, K_HUBER, K_COUNT } elem_kind;

typedef struct elem_loss {
    ct_op_def def;
    float (*value)(float p, float t, float a);
    /* d value / d p and d value / d t */
    float (*dp)(float p, float t, float a);
    float (*dt)(float p, float t, float a);
} elem_loss;

static float sign(float d) {
    return d > 0.0f ? 1.0f : (d < 0.0f ? -1.0f : 0.0f);
}

/* Binary cross-entropy on a logit x: max(x, 0) - x t + log(1 + exp(-|x|)), which never
 * overflows; d/dx = sigmoid(x) - t, d/dt = -x. */
static float bce_value(float x, float t, float a) {
    (void)a;
    return fmaxf(x, 0.0f) - x * t + log1pf(expf(-fabsf(x)));
}
static float bce_dp(float x, float t, float a) {
    (void)a;
    float e = expf(-fabsf(x)); /* sigmoid without overflow on either side */
    float sig = x >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
    return sig - t;
}
static float bce_dt(float x, float t, float a) {
    (void)t;
    (void)a;
    return -x;
}

static float mse_value(float p, float t, float a) {
    (void)a;
    return (p - t) * (p - t);
}
static float mse_dp(float p, float t, float a) {
    (void)a;
    return 2.0f * (p - t);
}

static float l1_value(float p, float t, float a) {
    (void)a;
    return fabsf(p - t);
}
static float l1_dp(float p, float t, float a) {
    (void)a;
    return sign(p - t);
}

/* Smooth L1 (beta): 0.5 d^2 / beta inside |d| < beta, |d| - 0.5 beta outside; beta 0 is L1. */
static float smooth_l1_value(float p, float t, float beta) {
    float z = fabsf(p - t);
    return z < beta ? 0.5f * z * z / beta : z - 0.5f * beta;
}
static float smooth_l1_dp(float p, float t, float beta) {
    float d = p - t;
    return d < -beta ? -1.0f : (d > beta ? 1.0f : (beta > 0.0f ? d / beta : 0.0f));
}

/* Huber (delta): 0.5 d^2 inside |d| < delta, delta (|d| - 0.5 delta) outside. */
static float huber_value(float p, float t, float delta) {
    float z = fabsf(p - t);
    return z < delta ? 0.5f * z * z : delta * (z - 0.5f * delta);
}
static float huber_dp(float p, float t, float delta) {
    float d = p - t;
    return d < -delta ? -delta : (d > delta ? delta : d);
}

CT_HOT static void elem_backward(ct_graph *g, ct_node *n);

/* The target derivative of the difference-based losses is minus the prediction's. */
#define DIFF_LOSS(f)                                                                               \
    static float f##_dt(float p, float t, float a) {                                               \
        return -f##_dp(p, t, a);                                                                   \
    }
DIFF_LOSS(mse)
DIFF_LOSS(l1)
DIFF_LOSS(smooth_l1)
DIFF_LOSS(huber)
#undef DIFF_LOSS

static const elem_loss losses[] = {
    [K_BCE_LOGITS] = {{"bce_with_logits", elem_backward}, bce_value, bce_dp, bce_dt},
    [K_MSE] = {{"mse_loss", elem_backward}, mse_value, mse_dp, mse_dt},
    [K_L1] = {{"l1_loss", elem_backward}, l1_value, l1_dp, l1_dt},
    [K_SMOOTH_L1] = {{"smooth_l1_loss", elem_backward},
                     smooth_l1_value,
                     smooth_l1_dp,
                     smooth_l1_dt},
    [K_HUBER] = {{"huber_loss", elem_backward}, huber_value, huber_dp, huber_dt},
};
_Static_assert(sizeof losses / sizeof losses[0] == K_COUNT, "one table row per elem_kind");

enum { ARG_KIND, ARG_REDUCTION };

CT_HOT static void elem_backward(ct_graph *g, ct_node *n) {
    const elem_loss *L = &losses[n->iarg[ARG_KIND]];
    ct_tensor *pred = n->in[0], *target = n->in[1];
    float *gp = ct_graph_grad(g, pred), *gt = ct_graph_grad(g, target);
    if (ct_graph_status(g) != CT_OK) return;
    const float *p = pred->data, *t = target->data, *gout = n->out->grad;
    const float a = n->farg[0];
    const int64_t ne = ct_tensor_numel(pred);
    const bool none = n->iarg[ARG_REDUCTION] == CT_REDUCTION_NONE;
    float w0 = gout[0];
    if (n->iarg[ARG_REDUCTION] == CT_REDUCTION_MEAN) w0 = (float)((double)w0 / (double)ne);
    int nt = ct_ops_threads(g, ne, 16);
    CT_OMP_FOR(nt)
    for (int64_t i = 0; i < ne; i++) {
        float w = none ? gout[i] : w0;
        if (gp) gp[i] += w * L->dp(p[i], t[i], a);
        if (gt) gt[i] += w * L->dt(p[i], t[i], a);
    }
}

CT_HOT static ct_tensor *elem_loss_forward(ct_graph *g,
                                           elem_kind kind,
                                           ct_tensor *pred,
                                           ct_tensor *target,
                                           float a,
                                           ct_reduction reduction) {
    const elem_loss *L = &losses[kind];
    const char *op = L->def.name;
    char ps[96], ts[96];
    if (!ct_ops_begin(g, op, 2, (ct_tensor *[]){pred, target})) return NULL;
    if (!ct_ops_f32(g, op, "input", pred) || !ct_ops_f32(g, op, "target", target)) return NULL;
    if ((int)reduction < 0 || reduction >= CT_REDUCTION_COUNT) {
        CT_GRAPH_FAIL(g, CT_ERR_INVALID_ARG, "%s: reduction %d is not a ct_reduction", op,
                      (int)reduction);
        return NULL;
    }
    if (!ct_tensor_same_shape(pred, target)) {
        CT_GRAPH_FAIL(g, CT_ERR_SHAPE, "%s: input %s and target %s must have the same shape", op,
                      ct_shape_str(pred, ps, sizeof ps), ct_shape_str(target, ts, sizeof ts));
        return NULL;
    }
    const int64_t ne = ct_tensor_numel(pred);
    ct_tensor *vals = ct_graph_new(g, CT_F32, pred->ndim, pred->shape);
    if (!vals) return NULL;
    const float *p = pred->data, *t = target->data;
    float *v = vals->data;
    int nt = ct_ops_threads(g, ne, 16);
    CT_OMP_FOR(nt)
    for (int64_t i = 0; i < ne; i++)
        v[i] = L->value(p[i], t[i], a);
    ct_tensor *out = vals;
    if (reduction != CT_REDUCTION_NONE) {
        out = ct_graph_new(g, CT_F32, 0, NULL);
        if (!out) return NULL;
        double total = ct_ops_sum_f64(v, ne, 1);
        if (reduction == CT_REDUCTION_MEAN) total /= (double)ne; /* 0/0 = NaN, as PyTorch */
        *(float *)out->data = (float)total;
    }
    if (ct_graph_needs_grad(g, 2, (ct_tensor *[]){pred, target})) {
        ct_node *n = ct_graph_record(g, &L->def, out, 2, (ct_tensor *[]){pred, target});
        if (!n) return NULL;
        n->iarg[ARG_KIND] = kind;
        n->iarg[ARG_REDUCTION] = reduction;
        n->farg[0] = a;
    }
    return out;
}

ct_tensor *
ct_loss_bce_with_logits(ct_graph *g, ct_tensor *logits, ct_tensor *target, ct_reduction reduction) {
    return elem_loss_forward(g, K_BCE_LOGITS, logits, target, 0.0f, reduction);
}

ct_tensor *ct_loss_mse(ct_graph *g, ct_tensor *pred, ct_tensor *target, ct_reduction r) {
    return elem_loss_forward(g, K_MSE, pred, target, 0.0f, r);
}

ct_tensor *ct_loss_l1(ct_graph *g, ct_tensor *pred, ct_tensor *target, ct_reduction r) {
    return elem_loss_forward(g, K_L1, pred, target, 0.0f, r);
}

ct_tensor *
ct_loss_smooth_l1(ct_graph *g, ct_tensor *pred, ct_tensor *target, float beta, ct_reduction r) {
    /* PyTorch accepts beta = 0 (plain L1); only a negative or NaN beta is an error. */
    if (ct_graph_status(g) == CT_OK && !(beta >= 0.0f)) {
        CT_GRAPH_FAIL(g, CT_ERR_INVALID_ARG, "smooth_l1_loss: beta must be >= 0, got %g",
                      (double)beta);
        return NULL;
    }
    return elem_loss_forward(g, K_SMOOTH_L1, pred, target, beta, r);
}

ct_tensor *
ct_loss_huber(ct_graph *g, ct_tensor *pred, ct_tensor *target, float delta, ct_reduction r) {
    if (ct_graph_status(g) == CT_OK && !(delta > 0.0f)) {
        CT_GRAPH_FAIL(g, CT_ERR_INVALID_ARG, "huber_loss: delta must be > 0, got %g",
                      (double)delta);
        return NULL;
    }
    return elem_loss_forward(g, K_HUBER, pred, target, delta, r);
}
