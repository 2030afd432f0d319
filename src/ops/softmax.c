/*
 * softmax.c - softmax and log-softmax along one axis, numerically stable (max subtracted).
 *
 * The tensor is viewed as [outer, dim, inner]; each (outer, inner) line is independent and
 * processed by one thread, so results do not depend on the thread count. Backward uses the
 * saved output: softmax dx = y * (dy - sum(dy * y)); log-softmax dx = dy - exp(y) * sum(dy).
 */
#include <math.h>

#include "ops/ops_internal.h"

CT_HOT static void
softmax_line(const float *x, float *y, int64_t dim, int64_t stride, bool log_form) {
    float mx = -INFINITY;
    for (int64_t d = 0; d < dim; d++)
        if (x[d * stride] > mx) mx = x[d * stride];
    double sum = 0.0;
    for (int64_t d = 0; d < dim; d++)
        sum += (double)expf(x[d * stride] - mx);
    if (log_form) {
        float lse = mx + (float)log(sum);
        for (int64_t d = 0; d < dim; d++)
            y[d * stride] = x[d * stride] - lse;
    } else {
        float inv = (float)(1.0 / sum);
        for (int64_t d = 0; d < dim; d++)
            y[d * stride] = expf(x[d * stride] - mx) * inv;
    }
}

CT_HOT static void softmax_backward(ct_graph *g, ct_node *n) {
    float *dx = ct_graph_grad(g, n->in[0]);
    if (!dx) return;
    bool log_form = n->iarg[0] != 0;
    int64_t outer = n->iarg[1], dim = n->iarg[2], inner = n->iarg[3];
    const float *y = n->out->data, *dy = n->out->grad;
    int nt = ct_ops_threads(g, outer * inner, dim * 4);
    CT_OMP_FOR(nt)
    for (int64_t line = 0; line < outer * inner; line++) {
        int64_t o = line / inner, i = line % inner;
        int64_t base = o * dim * inner + i;
        double s = 0.0;
        if (log_form) {
            for (int64_t d = 0; d < dim; d++)
                s += (double)dy[base + d * inner];
            for (int64_t d = 0; d < dim; d++) {
                int64_t k = base + d * inner;
                dx[k] += dy[k] - expf(y[k]) * (float)s;
            }
        } else {
            for (int64_t d = 0; d < dim; d++) {
                int64_t k = base + d * inner;
                s += (double)dy[k] * (double)y[k];
            }
            for (int64_t d = 0; d < dim; d++) {
                int64_t k = base + d * inner;
                dx[k] += y[k] * (dy[k] - (float)s);
            }
        }
    }
}

static const ct_op_def softmax_def = {"softmax", softmax_backward};
static const ct_op_def log_softmax_def = {"log_softmax", softmax_backward};

CT_HOT static ct_tensor *softmax_impl(ct_graph *g, ct_tensor *x, int32_t axis, bool log_form) {
    const char *name = log_form ? "log_softmax" : "softmax";
    if (!ct_ops_begin(g, name, 1, &x) || !ct_ops_f32(g, name, "x", x)) return NULL;
    if (!ct_ops_axis(g, name, x->ndim, &axis)) return NULL;
    int64_t outer, dim, inner;
    ct_ops_split_axis(x, axis, &outer, &dim, &inner);
    ct_tensor *y = ct_graph_new(g, CT_F32, x->ndim, x->shape);
    if (!y) return NULL;
    const float *xv = x->data;
    float *yv = y->data;
    int nt = ct_ops_threads(g, outer * inner, dim * 8);
    CT_OMP_FOR(nt)
    for (int64_t line = 0; line < outer * inner; line++) {
        int64_t base = (line / inner) * dim * inner + line % inner;
        softmax_line(xv + base, yv + base, dim, inner, log_form);
    }
    if (ct_graph_needs_grad(g, 1, &x)) {
        ct_node *n = ct_graph_record(g, log_form ? &log_softmax_def : &softmax_def, y, 1, &x);
        if (!n) return NULL;
        n->iarg[0] = log_form;
        n->iarg[1] = outer;
        n->iarg[2] = dim;
        n->iarg[3] = inner;
    }
    return y;
}

ct_tensor *ct_op_softmax(ct_graph *g, ct_tensor *x, int32_t axis) {
    return softmax_impl(g, x, axis, false);
}

ct_tensor *ct_op_log_softmax(ct_graph *g, ct_tensor *x, int32_t axis) {
    return softmax_impl(g, x, axis, true);
}
