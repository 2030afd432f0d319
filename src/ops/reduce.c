/*
 * reduce.c - sum and mean over one axis or over everything.
 *
 * Sums are accumulated in double in a fixed order: along an axis each output element is owned
 * by one thread; over everything, fixed 4096-element blocks are summed in parallel and the
 * block sums are then added left to right. Results are therefore identical for any thread
 * count.
 */
#include "ops/ops_internal.h"

#define SUM_BLOCK 4096

CT_HOT static void reduce_axis_backward(ct_graph *g, ct_node *n) {
    float *dx = ct_graph_grad(g, n->in[0]);
    if (!dx) return;
    int64_t outer = n->iarg[0], dim = n->iarg[1], inner = n->iarg[2];
    float scale = n->farg[0];
    const float *dy = n->out->grad;
    int nt = ct_ops_threads(g, outer, dim * inner);
    CT_OMP_FOR(nt)
    for (int64_t o = 0; o < outer; o++)
        for (int64_t d = 0; d < dim; d++)
            for (int64_t i = 0; i < inner; i++)
                dx[(o * dim + d) * inner + i] += dy[o * inner + i] * scale;
}

static const ct_op_def sum_def = {"sum", reduce_axis_backward};
static const ct_op_def mean_def = {"mean", reduce_axis_backward};

CT_HOT static ct_tensor *
reduce_axis(ct_graph *g, ct_tensor *x, int32_t axis, bool keepdim, bool mean) {
    const char *name = mean ? "mean" : "sum";
    if (!ct_ops_begin(g, name, 1, &x) || !ct_ops_f32(g, name, "x", x)) return NULL;
    if (!ct_ops_axis(g, name, x->ndim, &axis)) return NULL;
    int64_t outer, dim, inner;
    ct_ops_split_axis(x, axis, &outer, &dim, &inner);
    int64_t shape[CT_MAX_DIMS];
    int32_t nd = 0;
    for (int32_t d = 0; d < x->ndim; d++) {
        if (d != axis)
            shape[nd++] = x->shape[d];
        else if (keepdim)
            shape[nd++] = 1;
    }
    ct_tensor *y = ct_graph_new(g, CT_F32, nd, shape);
    if (!y) return NULL;
    const float *xv = x->data;
    float *yv = y->data;
    float scale = mean ? (dim > 0 ? 1.0f / (float)dim : 0.0f) : 1.0f;
    int nt = ct_ops_threads(g, outer * inner, dim);
    CT_OMP_FOR(nt)
    for (int64_t line = 0; line < outer * inner; line++) {
        int64_t o = line / inner, i = line % inner;
        double s = ct_ops_sum_f64(xv + o * dim * inner + i, dim, inner);
        yv[line] = mean ? (dim > 0 ? (float)(s / (double)dim) : 0.0f) : (float)s;
    }
    if (ct_graph_needs_grad(g, 1, &x)) {
        ct_node *n = ct_graph_record(g, mean ? &mean_def : &sum_def, y, 1, &x);
        if (!n) return NULL;
        n->iarg[0] = outer;
        n->iarg[1] = dim;
        n->iarg[2] = inner;
        n->farg[0] = scale;
    }
    return y;
}

ct_tensor *ct_op_sum(ct_graph *g, ct_tensor *x, int32_t axis, bool keepdim) {
    return reduce_axis(g, x, axis, keepdim, false);
}

ct_tensor *ct_op_mean(ct_graph *g, ct_tensor *x, int32_t axis, bool keepdim) {
    return reduce_axis(g, x, axis, keepdim, true);
}

CT_HOT static void reduce_all_backward(ct_graph *g, ct_node *n) {
    float *dx = ct_graph_grad(g, n->in[0]);
    if (!dx) return;
    float d = n->out->grad[0] * n->farg[0];
    int64_t total = ct_tensor_numel(n->in[0]);
    int nt = ct_ops_threads(g, total, 1);
    CT_OMP_FOR(nt)
    for (int64_t i = 0; i < total; i++)
        dx[i] += d;
}

static const ct_op_def sum_all_def = {"sum_all", reduce_all_backward};
static const ct_op_def mean_all_def = {"mean_all", reduce_all_backward};

CT_HOT static ct_tensor *reduce_all(ct_graph *g, ct_tensor *x, bool mean) {
    const char *name = mean ? "mean_all" : "sum_all";
    if (!ct_ops_begin(g, name, 1, &x) || !ct_ops_f32(g, name, "x", x)) return NULL;
    ct_tensor *y = ct_graph_new(g, CT_F32, 0, NULL);
    if (!y) return NULL;
    int64_t total = ct_tensor_numel(x);
    int64_t nblocks = (total + SUM_BLOCK - 1) / SUM_BLOCK;
    double *parts = ct_graph_alloc(g, (size_t)(nblocks ? nblocks : 1) * sizeof(double));
    if (!parts) return NULL;
    const float *xv = x->data;
    int nt = ct_ops_threads(g, nblocks, SUM_BLOCK);
    CT_OMP_FOR(nt)
    for (int64_t b = 0; b < nblocks; b++) {
        int64_t lo = b * SUM_BLOCK, hi = lo + SUM_BLOCK < total ? lo + SUM_BLOCK : total;
        parts[b] = ct_ops_sum_f64(xv + lo, hi - lo, 1);
    }
    double s = 0.0;
    for (int64_t b = 0; b < nblocks; b++)
        s += parts[b];
    float scale = mean ? (total > 0 ? 1.0f / (float)total : 0.0f) : 1.0f;
    ((float *)y->data)[0] = mean ? (total > 0 ? (float)(s / (double)total) : 0.0f) : (float)s;
    if (ct_graph_needs_grad(g, 1, &x)) {
        ct_node *n = ct_graph_record(g, mean ? &mean_all_def : &sum_all_def, y, 1, &x);
        if (!n) return NULL;
        n->farg[0] = scale;
    }
    return y;
}

ct_tensor *ct_op_sum_all(ct_graph *g, ct_tensor *x) {
    return reduce_all(g, x, false);
}

ct_tensor *ct_op_mean_all(ct_graph *g, ct_tensor *x) {
    return reduce_all(g, x, true);
}
