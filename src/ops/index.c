/*
 * index.c - index_select, embedding and gather: reads by i32/i64 indices, and their backward
 * scatters (+=).
 *
 * Every index is checked before anything is written; the first one out of range fails the op
 * with its flat position and value, so user input never reaches memory unchecked. Backward
 * must add duplicates together without atomics and in a fixed order: index_select/embedding
 * split the work over blocks of the feature dim D (each thread owns a block of columns of every
 * row and walks the indices in order); gather splits over rows of the index, which map to
 * distinct rows of x. The results do not depend on the thread count.
 */
#include <string.h>

#include "ops/ops_internal.h"

#define COL_BLOCK 64

/* True when every index lies in [0, n); otherwise records the first offender. */
static bool check_range(ct_graph *g,
                        const char *op,
                        const ct_tensor *idx,
                        int64_t n,
                        const char *what,
                        const ct_tensor *x) {
    int64_t count = ct_tensor_numel(idx);
    for (int64_t p = 0; p < count; p++) {
        int64_t v = ct_ops_index_at(idx, p);
        if (v >= 0 && v < n) continue;
        char buf[160];
        CT_GRAPH_FAIL(g, CT_ERR_INVALID_ARG,
                      "%s: index %lld at position %lld is out of range [0, %lld) for %s %s", op,
                      (long long)v, (long long)p, (long long)n, what,
                      ct_shape_str(x, buf, sizeof buf));
        return false;
    }
    return true;
}

/* ---- index_select and embedding: out [idx..., D] = x[idx, :] with x viewed as [R, D] ---- */

CT_HOT static void rows_backward(ct_graph *g, ct_node *n) {
    float *dx = ct_graph_grad(g, n->in[0]);
    if (!dx) return;
    const ct_tensor *idx = n->in[1];
    int64_t count = n->iarg[0], D = n->iarg[1];
    const float *dy = n->out->grad;
    int64_t n_blocks = (D + COL_BLOCK - 1) / COL_BLOCK;
    int nt = ct_ops_threads(g, n_blocks, count * COL_BLOCK);
    CT_OMP_FOR(nt)
    for (int64_t blk = 0; blk < n_blocks; blk++) {
        int64_t j0 = blk * COL_BLOCK;
        int64_t len = D - j0 < COL_BLOCK ? D - j0 : COL_BLOCK;
        for (int64_t p = 0; p < count; p++) {
            float *dxr = dx + ct_ops_index_at(idx, p) * D + j0;
            const float *dyr = dy + p * D + j0;
            for (int64_t j = 0; j < len; j++)
                dxr[j] += dyr[j];
        }
    }
}

static const ct_op_def index_select_def = {"index_select", rows_backward};
static const ct_op_def embedding_def = {"embedding", rows_backward};

CT_HOT static ct_tensor *rows_impl(ct_graph *g,
                                   const char *op,
                                   const ct_op_def *def,
                                   const char *xname,
                                   ct_tensor *x,
                                   ct_tensor *idx) {
    ct_tensor *in[2] = {x, idx};
    if (!ct_ops_begin(g, op, 2, in) || !ct_ops_f32(g, op, xname, x) ||
        !ct_ops_index(g, op, "idx", idx))
        return NULL;
    char xb[160], ib[160];
    if (x->ndim < 1 || (def == &embedding_def && x->ndim != 2)) {
        CT_GRAPH_FAIL(g, CT_ERR_SHAPE, "%s: %s must be %s, got %s", op, xname,
                      def == &embedding_def ? "[V, D]" : "[R, ...] (at least one dim)",
                      ct_shape_str(x, xb, sizeof xb));
        return NULL;
    }
    int32_t ndim = idx->ndim + x->ndim - 1;
    if (ndim > CT_MAX_DIMS) {
        CT_GRAPH_FAIL(g, CT_ERR_SHAPE, "%s: the result of idx %s and %s %s has %d dims, max %d", op,
                      ct_shape_str(idx, ib, sizeof ib), xname, ct_shape_str(x, xb, sizeof xb),
                      (int)ndim, CT_MAX_DIMS);
        return NULL;
    }
    int64_t D = 1;
    for (int32_t d = 1; d < x->ndim; d++)
        D *= x->shape[d];
    if (!check_range(g, op, idx, x->shape[0], xname, x)) return NULL;

    int64_t shape[CT_MAX_DIMS];
    for (int32_t d = 0; d < idx->ndim; d++)
        shape[d] = idx->shape[d];
    for (int32_t d = 1; d < x->ndim; d++)
        shape[idx->ndim + d - 1] = x->shape[d];
    ct_tensor *y = ct_graph_new(g, CT_F32, ndim, shape);
    if (!y) return NULL;
    int64_t count = ct_tensor_numel(idx);
    const float *xv = x->data;
    float *yv = y->data;
    int nt = ct_ops_threads(g, count, D);
    CT_OMP_FOR(nt)
    for (int64_t p = 0; p < count; p++)
        memcpy(yv + p * D, xv + ct_ops_index_at(idx, p) * D, (size_t)D * sizeof(float));

    if (ct_graph_needs_grad(g, 1, &x)) {
        ct_node *n = ct_graph_record(g, def, y, 2, in);
        if (!n) return NULL;
        n->iarg[0] = count;
        n->iarg[1] = D;
    }
    return y;
}

ct_tensor *ct_op_index_select(ct_graph *g, ct_tensor *x, ct_tensor *idx) {
    return rows_impl(g, "index_select", &index_select_def, "x", x, idx);
}

ct_tensor *ct_op_embedding(ct_graph *g, ct_tensor *weight, ct_tensor *idx) {
    return rows_impl(g, "embedding", &embedding_def, "weight", weight, idx);
}

/* ---- gather along the last dim: out[..., k] = x[..., idx[..., k]] ---- */

/* The row of x (viewed as [rows, C]) that row r of idx (viewed as [rows, K]) reads. As in
 * PyTorch, idx's leading dims may be smaller than x's; position (i0, .., i_{n-2}) of idx reads
 * the same position of x. */
static int64_t gather_xrow(const ct_tensor *x, const ct_tensor *idx, int64_t r) {
    int64_t xr = 0, mul = 1;
    for (int32_t d = idx->ndim - 2; d >= 0; d--) {
        xr += (r % idx->shape[d]) * mul;
        r /= idx->shape[d];
        mul *= x->shape[d];
    }
    return xr;
}

CT_HOT static void gather_backward(ct_graph *g, ct_node *n) {
    ct_tensor *x = n->in[0], *idx = n->in[1];
    float *dx = ct_graph_grad(g, x);
    if (!dx) return;
    int64_t rows = n->iarg[0], K = n->iarg[1], C = n->iarg[2];
    const float *dy = n->out->grad;
    int nt = ct_ops_threads(g, rows, K * 2);
    CT_OMP_FOR(nt)
    for (int64_t r = 0; r < rows; r++) {
        float *dxr = dx + gather_xrow(x, idx, r) * C;
        for (int64_t k = 0; k < K; k++)
            dxr[ct_ops_index_at(idx, r * K + k)] += dy[r * K + k];
    }
}

static const ct_op_def gather_def = {"gather", gather_backward};

CT_HOT ct_tensor *ct_op_gather(ct_graph *g, ct_tensor *x, ct_tensor *idx) {
    ct_tensor *in[2] = {x, idx};
    if (!ct_ops_begin(g, "gather", 2, in) || !ct_ops_f32(g, "gather", "x", x) ||
        !ct_ops_index(g, "gather", "idx", idx))
        return NULL;
    char xb[160], ib[160];
    bool fits = idx->ndim == x->ndim;
    for (int32_t d = 0; fits && d + 1 < x->ndim; d++)
        fits = idx->shape[d] <= x->shape[d];
    if (!fits) {
        CT_GRAPH_FAIL(g, CT_ERR_SHAPE,
                      "gather: idx %s must have the dims of x %s, each leading one no larger "
                      "(the last may differ)",
                      ct_shape_str(idx, ib, sizeof ib), ct_shape_str(x, xb, sizeof xb));
        return NULL;
    }
    int64_t C = x->ndim > 0 ? x->shape[x->ndim - 1] : 1;
    int64_t K = idx->ndim > 0 ? idx->shape[idx->ndim - 1] : 1;
    int64_t rows = 1;
    for (int32_t d = 0; d + 1 < idx->ndim; d++)
        rows *= idx->shape[d];
    if (!check_range(g, "gather", idx, C, "the last dim of x", x)) return NULL;

    ct_tensor *y = ct_graph_new(g, CT_F32, idx->ndim, idx->shape);
    if (!y) return NULL;
    const float *xv = x->data;
    float *yv = y->data;
    int nt = ct_ops_threads(g, rows, K * 2);
    CT_OMP_FOR(nt)
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = xv + gather_xrow(x, idx, r) * C;
        for (int64_t k = 0; k < K; k++)
            yv[r * K + k] = xr[ct_ops_index_at(idx, r * K + k)];
    }

    if (ct_graph_needs_grad(g, 1, &x)) {
        ct_node *n = ct_graph_record(g, &gather_def, y, 2, in);
        if (!n) return NULL;
        n->iarg[0] = rows;
        n->iarg[1] = K;
        n->iarg[2] = C;
    }
    return y;
}
