/*
 * batch_norm.c - batch normalisation over x [N, C] or [N, C, H, W] per channel, forward and
 * backward, as PyTorch's F.batch_norm (and nn.BatchNorm's num_batches_tracked).
 *
 * Batch statistics are used in training mode, and always when there are no running statistics;
 * the biased variance normalises, the unbiased one (M / (M-1), M = N*H*W) goes into running_var.
 * Otherwise running_mean and running_var normalise. The running buffers are updated in place in
 * training mode only.
 *
 * Determinism: channel statistics are sums in double, first per (n, c) plane (in parallel, each
 * plane summed by one thread in a fixed order), then per channel over n in order; the
 * elementwise passes are parallel over (n, c) planes. Results are bitwise the same for any
 * thread count.
 *
 * Node: in = {x[, weight][, bias]}; iarg = [0] batch statistics used, [1] has weight,
 * [2] has bias; saved = double mean[C], then invstd[C] (the statistics that normalised).
 */
#include <math.h>
#include <string.h>

#include "ops/ops_internal.h"

/* part [N*C] = per-plane sums of x (centre == NULL) or of (x - centre[c])^2, each plane
 * x [hw] summed in double in order. */
CT_HOT static void plane_sums(const ct_graph *g,
                              const float *x,
                              int64_t planes,
                              int64_t c,
                              int64_t hw,
                              const double *centre,
                              double *part) {
    int nt = ct_ops_threads(g, planes, hw);
    CT_OMP_FOR(nt)
    for (int64_t pl = 0; pl < planes; pl++) {
        const float *xp = x + pl * hw;
        if (!centre) {
            part[pl] = ct_ops_sum_f64(xp, hw, 1);
            continue;
        }
        double m = centre[pl % c], acc = 0.0;
        for (int64_t i = 0; i < hw; i++) {
            double d = (double)xp[i] - m;
            acc += d * d;
        }
        part[pl] = acc;
    }
}

/* out[c] = sum over n in order of part[n*C + c]. */
static void channel_sums(const double *part, int64_t n, int64_t c, double *out) {
    for (int64_t j = 0; j < c; j++) {
        double acc = 0.0;
        for (int64_t i = 0; i < n; i++)
            acc += part[i * c + j];
        out[j] = acc;
    }
}

CT_HOT static void batch_norm_backward(ct_graph *g, ct_node *node) {
    ct_tensor *x = node->in[0];
    bool batch = node->iarg[0] != 0, has_w = node->iarg[1] != 0, has_b = node->iarg[2] != 0;
    ct_tensor *weight = has_w ? node->in[1] : NULL;
    ct_tensor *bias = has_b ? node->in[1 + has_w] : NULL;
    float *dx = ct_graph_grad(g, x), *dw = ct_graph_grad(g, weight), *db = ct_graph_grad(g, bias);
    if (ct_graph_status(g) != CT_OK) return;
    int64_t n = x->shape[0], c = x->shape[1], planes = n * c;
    if (planes == 0) return;
    /* bounded by numel(x) once planes > 0 */
    int64_t hw = x->ndim == 4 ? x->shape[2] * x->shape[3] : 1, m = n * hw;
    if (hw == 0) return;
    const double *mean = node->saved, *invstd = mean + c;
    const float *xv = x->data, *dy = node->out->grad;
    const float *wv = weight ? weight->data : NULL;

    /* per-channel sum(dy) and sum(dy * xhat), needed by dweight, dbias and batch-mode dx */
    double *part = ct_graph_alloc(g, (size_t)planes * 2 * sizeof(double));
    double *sums = ct_graph_alloc(g, (size_t)c * 2 * sizeof(double));
    if (!part || !sums) return;
    double *sum_dy = sums, *sum_dyx = sums + c;
    int nt = ct_ops_threads(g, planes, hw);
    CT_OMP_FOR(nt)
    for (int64_t pl = 0; pl < planes; pl++) {
        const float *xp = xv + pl * hw, *dyp = dy + pl * hw;
        double mu = mean[pl % c], is = invstd[pl % c], a = 0.0, b = 0.0;
        for (int64_t i = 0; i < hw; i++) {
            a += (double)dyp[i];
            b += (double)dyp[i] * ((double)xp[i] - mu) * is;
        }
        part[2 * pl] = a;
        part[2 * pl + 1] = b;
    }
    for (int64_t j = 0; j < c; j++) {
        double a = 0.0, b = 0.0;
        for (int64_t i = 0; i < n; i++) {
            a += part[2 * (i * c + j)];
            b += part[2 * (i * c + j) + 1];
        }
        sum_dy[j] = a;
        sum_dyx[j] = b;
        if (db) db[j] += (float)a;
        if (dw) dw[j] += (float)b;
    }
    if (!dx) return;
    /* batch statistics: dx = w*invstd * (dy - mean(dy) - xhat * mean(dy * xhat));
     * running statistics: dx = w*invstd * dy */
    CT_OMP_FOR(nt)
    for (int64_t pl = 0; pl < planes; pl++) {
        int64_t j = pl % c;
        const float *xp = xv + pl * hw, *dyp = dy + pl * hw;
        float *dxp = dx + pl * hw;
        double k = (wv ? (double)wv[j] : 1.0) * invstd[j];
        if (!batch) {
            float kf = (float)k;
            for (int64_t i = 0; i < hw; i++)
                dxp[i] += dyp[i] * kf;
            continue;
        }
        double mu = mean[j], is = invstd[j];
        double mdy = sum_dy[j] / (double)m, mdyx = sum_dyx[j] / (double)m;
        for (int64_t i = 0; i < hw; i++) {
            double xhat = ((double)xp[i] - mu) * is;
            dxp[i] += (float)(k * ((double)dyp[i] - mdy - xhat * mdyx));
        }
    }
}

static const ct_op_def batch_norm_def = {"batch_norm", batch_norm_backward};

/* A per-channel vector: NULL, or f32 [C]. */
static bool check_vec(ct_graph *g, const char *what, const ct_tensor *t, const ct_tensor *x) {
    if (!t) return true;
    if (!ct_ops_f32(g, "batch_norm", what, t)) return false;
    if (t->ndim != 1 || t->shape[0] != x->shape[1]) {
        char st[200], sx[200];
        CT_GRAPH_FAIL(g, CT_ERR_SHAPE, "batch_norm: %s must be [%lld] for x %s, got %s", what,
                      (long long)x->shape[1], ct_shape_str(x, sx, sizeof sx),
                      ct_shape_str(t, st, sizeof st));
        return false;
    }
    return true;
}

static bool batch_norm_check(ct_graph *g,
                             const ct_tensor *x,
                             const ct_tensor *weight,
                             const ct_tensor *bias,
                             const ct_tensor *running_mean,
                             const ct_tensor *running_var,
                             const ct_tensor *num_batches_tracked) {
    char sx[200], st[200];
    if (!ct_ops_f32(g, "batch_norm", "x", x)) return false;
    if (x->ndim != 2 && x->ndim != 4) {
        CT_GRAPH_FAIL(g, CT_ERR_SHAPE, "batch_norm: x must be [N,C] or [N,C,H,W], got %s",
                      ct_shape_str(x, sx, sizeof sx));
        return false;
    }
    if (!check_vec(g, "weight", weight, x) || !check_vec(g, "bias", bias, x) ||
        !check_vec(g, "running_mean", running_mean, x) ||
        !check_vec(g, "running_var", running_var, x))
        return false;
    if (!running_mean != !running_var) {
        CT_GRAPH_FAIL(g, CT_ERR_INVALID_ARG,
                      "batch_norm: running_mean and running_var must be given together or both "
                      "be NULL (got %s running_mean and %s running_var)",
                      running_mean ? "a" : "no", running_var ? "a" : "no");
        return false;
    }
    const ct_tensor *t = num_batches_tracked;
    if (t && (t->dtype != CT_I64 || ct_tensor_numel(t) != 1)) {
        CT_GRAPH_FAIL(g, CT_ERR_SHAPE,
                      "batch_norm: num_batches_tracked must be an i64 scalar, got %s %s",
                      ct_dtype_name(t->dtype), ct_shape_str(t, st, sizeof st));
        return false;
    }
    return true;
}

/* mean and invstd [C] of x [planes = N*C, hw] from the batch; returns the biased variance [C]
 * (graph scratch), NULL when out of memory. */
static const double *batch_stats(ct_graph *g,
                                 const float *xv,
                                 int64_t n,
                                 int64_t c,
                                 int64_t hw,
                                 float eps,
                                 double *mean,
                                 double *invstd) {
    int64_t planes = n * c, m = n * hw;
    double *part = ct_graph_alloc(g, (size_t)planes * sizeof(double));
    double *var = ct_graph_alloc(g, (size_t)c * sizeof(double));
    if (!part || !var) return NULL;
    plane_sums(g, xv, planes, c, hw, NULL, part);
    channel_sums(part, n, c, mean);
    for (int64_t j = 0; j < c; j++)
        mean[j] /= (double)m;
    plane_sums(g, xv, planes, c, hw, mean, part);
    channel_sums(part, n, c, var);
    for (int64_t j = 0; j < c; j++) {
        var[j] /= (double)m; /* biased: normalises */
        invstd[j] = 1.0 / sqrt(var[j] + (double)eps);
    }
    return var;
}

/* Moves the running statistics [C] towards the batch's mean and unbiased variance (m values
 * per channel). */
static void update_running(ct_tensor *running_mean,
                           ct_tensor *running_var,
                           float momentum,
                           int64_t c,
                           int64_t m,
                           const double *mean,
                           const double *var) {
    float *rm = running_mean->data, *rv = running_var->data;
    double mom = (double)momentum, unbias = (double)m / (double)(m - 1);
    for (int64_t j = 0; j < c; j++) {
        rm[j] = (float)((1.0 - mom) * (double)rm[j] + mom * mean[j]);
        rv[j] = (float)((1.0 - mom) * (double)rv[j] + mom * var[j] * unbias);
    }
}

/* y = x * alpha + beta per channel, with alpha = w * invstd, beta = b - mean * alpha (as
 * PyTorch); x and y [planes = N*C, hw]. */
CT_HOT static void normalise(const ct_graph *g,
                             const float *xv,
                             const float *wv,
                             const float *bv,
                             const double *mean,
                             const double *invstd,
                             int64_t planes,
                             int64_t c,
                             int64_t hw,
                             float *yv) {
    int nt = ct_ops_threads(g, planes, hw);
    CT_OMP_FOR(nt)
    for (int64_t pl = 0; pl < planes; pl++) {
        int64_t j = pl % c;
        double a = (wv ? (double)wv[j] : 1.0) * invstd[j];
        float alpha = (float)a, beta = (float)((bv ? (double)bv[j] : 0.0) - mean[j] * a);
        const float *xp = xv + pl * hw;
        float *yp = yv + pl * hw;
        for (int64_t i = 0; i < hw; i++)
            yp[i] = xp[i] * alpha + beta;
    }
}

/* Records y's node when x, weight or bias needs a gradient, keeping stats [2C] for backward. */
static bool record(ct_graph *g,
                   ct_tensor *x,
                   ct_tensor *weight,
                   ct_tensor *bias,
                   ct_tensor *y,
                   bool batch,
                   double *stats) {
    ct_tensor *in[3] = {x, NULL, NULL};
    int32_t n_in = 1;
    if (weight) in[n_in++] = weight;
    if (bias) in[n_in++] = bias;
    if (!ct_graph_needs_grad(g, n_in, in)) return true;
    ct_node *node = ct_graph_record(g, &batch_norm_def, y, n_in, in);
    if (!node) return false;
    node->iarg[0] = batch;
    node->iarg[1] = weight != NULL;
    node->iarg[2] = bias != NULL;
    node->saved = stats;
    return true;
}

ct_tensor *ct_op_batch_norm(ct_graph *g,
                            ct_tensor *x,
                            ct_tensor *weight,
                            ct_tensor *bias,
                            ct_tensor *running_mean,
                            ct_tensor *running_var,
                            ct_tensor *num_batches_tracked,
                            float momentum,
                            float eps) {
    if (!ct_ops_begin(g, "batch_norm", 1, &x)) return NULL;
    if (!batch_norm_check(g, x, weight, bias, running_mean, running_var, num_batches_tracked))
        return NULL;
    bool training = ct_graph_training(g);
    bool batch = training || !running_mean;
    int64_t n = x->shape[0], c = x->shape[1], planes = n * c;
    bool empty = planes == 0 || (x->ndim == 4 && (x->shape[2] == 0 || x->shape[3] == 0));
    /* H*W is bounded by numel(x) unless x is empty (then it may overflow; nothing is read) */
    int64_t hw = empty ? 0 : x->ndim == 4 ? x->shape[2] * x->shape[3] : 1;
    int64_t m = n * hw;
    if (batch && m == 1) {
        char sx[200];
        CT_GRAPH_FAIL(g, CT_ERR_SHAPE,
                      "batch_norm: expected more than 1 value per channel when using batch "
                      "statistics, got x %s",
                      ct_shape_str(x, sx, sizeof sx));
        return NULL;
    }
    ct_tensor *y = ct_graph_new(g, CT_F32, x->ndim, x->shape);
    double *stats = ct_graph_alloc(g, (size_t)(2 * c) * sizeof(double));
    if (!y || !stats) return NULL;
    double *mean = stats, *invstd = stats + c;
    if (batch && !empty) {
        const double *var = batch_stats(g, x->data, n, c, hw, eps, mean, invstd);
        if (!var) return NULL;
        if (training && running_mean)
            update_running(running_mean, running_var, momentum, c, m, mean, var);
    } else if (!batch) {
        const float *rm = running_mean->data, *rv = running_var->data;
        for (int64_t j = 0; j < c; j++) {
            mean[j] = (double)rm[j];
            invstd[j] = 1.0 / sqrt((double)rv[j] + (double)eps);
        }
    } else {
        for (int64_t j = 0; j < c; j++)
            mean[j] = invstd[j] = 0.0; /* empty: never read */
    }
    if (training && num_batches_tracked) ((int64_t *)num_batches_tracked->data)[0] += 1;
    if (!empty)
        normalise(g, x->data, weight ? weight->data : NULL, bias ? bias->data : NULL, mean, invstd,
                  planes, c, hw, y->data);
    return record(g, x, weight, bias, y, batch, stats) ? y : NULL;
}
