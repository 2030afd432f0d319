/*
 * shape.c - reshape, flatten, transpose, permute, concat, narrow and split.
 *
 * Reshape and flatten share the input's data (tensors are contiguous and never written in
 * place, so aliasing is safe); their gradient is a separate buffer added back element-wise.
 * Permute, concat and narrow copy. Each output element has exactly one source, so every
 * backward is a parallel scatter without collisions.
 */
#include <string.h>

#include "autograd/autograd_internal.h"
#include "ops/ops_internal.h"

CT_HOT static void identity_backward(ct_graph *g, ct_node *n) {
    bool fresh; /* a new buffer is written whole, not zeroed first: 0 + dy, the same bits */
    float *dx = ct_graph_grad_fresh(g, n->in[0], &fresh);
    if (!dx) return;
    const float *dy = n->out->grad;
    int64_t total = ct_tensor_numel(n->out);
    int nt = ct_ops_threads(g, total, 1);
    if (fresh) {
        CT_OMP_FOR(nt)
        for (int64_t i = 0; i < total; i++)
            dx[i] = 0.0f + dy[i];
        return;
    }
    CT_OMP_FOR(nt)
    for (int64_t i = 0; i < total; i++)
        dx[i] += dy[i];
}

static const ct_op_def reshape_def = {"reshape", identity_backward};

ct_tensor *ct_op_reshape(ct_graph *g, ct_tensor *x, int32_t ndim, const int64_t *shape) {
    if (!ct_ops_begin(g, "reshape", 1, &x) || !ct_ops_f32(g, "reshape", "x", x)) return NULL;
    if (ndim < 0 || ndim > CT_MAX_DIMS) {
        CT_GRAPH_FAIL(g, CT_ERR_SHAPE, "reshape: %d dimensions, expected 0..%d", (int)ndim,
                      CT_MAX_DIMS);
        return NULL;
    }
    int64_t s[CT_MAX_DIMS], known = 1, total = ct_tensor_numel(x);
    int32_t infer = -1;
    for (int32_t d = 0; d < ndim; d++) {
        s[d] = shape[d];
        if (s[d] == -1 && infer < 0) {
            infer = d;
        } else if (s[d] < 0) {
            CT_GRAPH_FAIL(g, CT_ERR_SHAPE, "reshape: dimension %d is %lld (only one -1 allowed)",
                          (int)d, (long long)s[d]);
            return NULL;
        } else if (!ct_ops_mul_ok(known, s[d], &known)) {
            known = -1; /* overflow: cannot equal the element count */
            break;
        }
    }
    if (infer >= 0 && known >= 0) s[infer] = known > 0 ? total / known : 0;
    int64_t n = known >= 0 ? 1 : -1;
    for (int32_t d = 0; d < ndim && n >= 0; d++)
        if (!ct_ops_mul_ok(n, s[d], &n)) n = -1;
    if (n != total) {
        char a[200];
        CT_GRAPH_FAIL(g, CT_ERR_SHAPE, "reshape: cannot view %s (%lld elements) with %lld elements",
                      ct_shape_str(x, a, sizeof a), (long long)total, (long long)n);
        return NULL;
    }
    ct_tensor *y = ct_graph_wrap(g, x->data, CT_F32, ndim, s);
    if (!y) return NULL;
    if (ct_graph_needs_grad(g, 1, &x) && !ct_graph_record(g, &reshape_def, y, 1, &x)) return NULL;
    return y;
}

ct_tensor *ct_op_flatten(ct_graph *g, ct_tensor *x, int32_t start_dim) {
    if (!ct_ops_begin(g, "flatten", 1, &x)) return NULL;
    if (x->ndim == 0) return ct_op_reshape(g, x, 1, (int64_t[]){1});
    if (!ct_ops_axis(g, "flatten", x->ndim, &start_dim)) return NULL;
    int64_t shape[CT_MAX_DIMS];
    for (int32_t d = 0; d < start_dim; d++)
        shape[d] = x->shape[d];
    int64_t rest = 1;
    for (int32_t d = start_dim; d < x->ndim; d++)
        rest *= x->shape[d];
    shape[start_dim] = rest;
    return ct_op_reshape(g, x, start_dim + 1, shape);
}

/* ---- permute ---- */

typedef struct perm_info {
    int32_t ndim;
    int64_t out_shape[CT_MAX_DIMS];
    int64_t in_stride[CT_MAX_DIMS]; /* stride in x of output dim d */
} perm_info;

static int64_t perm_src(const perm_info *p, int64_t i) {
    int64_t off = 0;
    for (int32_t d = p->ndim - 1; d >= 0; d--) {
        off += (i % p->out_shape[d]) * p->in_stride[d];
        i /= p->out_shape[d];
    }
    return off;
}

CT_HOT static void permute_backward(ct_graph *g, ct_node *n) {
    float *dx = ct_graph_grad(g, n->in[0]);
    if (!dx) return;
    const perm_info *p = n->saved;
    const float *dy = n->out->grad;
    int64_t total = ct_tensor_numel(n->out);
    int nt = ct_ops_threads(g, total, 4);
    CT_OMP_FOR(nt)
    for (int64_t i = 0; i < total; i++)
        dx[perm_src(p, i)] += dy[i];
}

static const ct_op_def permute_def = {"permute", permute_backward};

CT_HOT ct_tensor *ct_op_permute(ct_graph *g, ct_tensor *x, const int32_t *perm) {
    if (!ct_ops_begin(g, "permute", 1, &x) || !ct_ops_f32(g, "permute", "x", x)) return NULL;
    perm_info *p = ct_graph_alloc(g, sizeof *p);
    if (!p) return NULL;
    int64_t stride[CT_MAX_DIMS];
    int64_t s = 1;
    for (int32_t d = x->ndim - 1; d >= 0; d--) {
        stride[d] = s;
        s *= x->shape[d];
    }
    bool seen[CT_MAX_DIMS] = {false};
    p->ndim = x->ndim;
    for (int32_t d = 0; d < x->ndim; d++) {
        int32_t src = perm[d] < 0 ? perm[d] + x->ndim : perm[d];
        if (src < 0 || src >= x->ndim || seen[src]) {
            CT_GRAPH_FAIL(g, CT_ERR_SHAPE,
                          "permute: entry %d (%d) is out of range or repeated for %d dims", (int)d,
                          (int)perm[d], (int)x->ndim);
            return NULL;
        }
        seen[src] = true;
        p->out_shape[d] = x->shape[src];
        p->in_stride[d] = stride[src];
    }
    ct_tensor *y = ct_graph_new(g, CT_F32, x->ndim, p->out_shape);
    if (!y) return NULL;
    const float *xv = x->data;
    float *yv = y->data;
    int64_t total = ct_tensor_numel(y);
    int nt = ct_ops_threads(g, total, 4);
    CT_OMP_FOR(nt)
    for (int64_t i = 0; i < total; i++)
        yv[i] = xv[perm_src(p, i)];
    if (ct_graph_needs_grad(g, 1, &x)) {
        ct_node *n = ct_graph_record(g, &permute_def, y, 1, &x);
        if (!n) return NULL;
        n->saved = p;
    }
    return y;
}

ct_tensor *ct_op_transpose(ct_graph *g, ct_tensor *x, int32_t dim0, int32_t dim1) {
    if (!ct_ops_begin(g, "transpose", 1, &x)) return NULL;
    if (!ct_ops_axis(g, "transpose", x->ndim, &dim0) ||
        !ct_ops_axis(g, "transpose", x->ndim, &dim1))
        return NULL;
    int32_t perm[CT_MAX_DIMS];
    for (int32_t d = 0; d < x->ndim; d++)
        perm[d] = d;
    perm[dim0] = dim1;
    perm[dim1] = dim0;
    return ct_op_permute(g, x, perm);
}

/* ---- concat and narrow: both copy blocks of [outer, len * inner] ---- */

static void copy_block(float *dst,
                       int64_t dst_row,
                       const float *src,
                       int64_t src_row,
                       int64_t outer,
                       int64_t row,
                       bool add) {
    for (int64_t o = 0; o < outer; o++) {
        float *d = dst + o * dst_row;
        const float *s = src + o * src_row;
        if (add)
            for (int64_t k = 0; k < row; k++)
                d[k] += s[k];
        else
            memcpy(d, s, (size_t)row * sizeof(float));
    }
}

static void concat_backward(ct_graph *g, ct_node *n) {
    const int64_t *info = n->saved; /* outer, inner, total dim, then n sizes */
    int64_t outer = info[0], inner = info[1], total_dim = info[2];
    const float *dy = n->out->grad;
    int64_t off = 0;
    ct_tensor **xs = (ct_tensor **)(void *)((int64_t *)n->saved + 3 + n->iarg[0]);
    for (int64_t k = 0; k < n->iarg[0]; k++) {
        int64_t len = info[3 + k];
        float *dx = ct_graph_grad(g, xs[k]);
        if (dx)
            copy_block(dx, len * inner, dy + off * inner, total_dim * inner, outer, len * inner,
                       true);
        off += len;
    }
}

static const ct_op_def concat_def = {"concat", concat_backward};

ct_tensor *ct_op_concat(ct_graph *g, int32_t n, ct_tensor *const *xs, int32_t axis) {
    if (n < 1) {
        CT_GRAPH_FAIL(g, CT_ERR_INVALID_ARG, "concat: needs at least one tensor, got %d", (int)n);
        return NULL;
    }
    if (!ct_ops_begin(g, "concat", n, xs)) return NULL;
    for (int32_t k = 0; k < n; k++)
        if (!ct_ops_f32(g, "concat", "input", xs[k])) return NULL;
    if (!ct_ops_axis(g, "concat", xs[0]->ndim, &axis)) return NULL;
    int64_t total_dim = 0;
    for (int32_t k = 0; k < n; k++) {
        bool ok = xs[k]->ndim == xs[0]->ndim;
        for (int32_t d = 0; ok && d < xs[0]->ndim; d++)
            ok = d == axis || xs[k]->shape[d] == xs[0]->shape[d];
        if (!ok) {
            char a[200], b[200];
            CT_GRAPH_FAIL(g, CT_ERR_SHAPE,
                          "concat: input %d %s does not match input 0 %s except along axis %d",
                          (int)k, ct_shape_str(xs[k], a, sizeof a),
                          ct_shape_str(xs[0], b, sizeof b), (int)axis);
            return NULL;
        }
        if (!ct_ops_add_ok(total_dim, xs[k]->shape[axis], &total_dim)) {
            CT_GRAPH_FAIL(g, CT_ERR_SHAPE, "concat: the sizes along axis %d overflow", (int)axis);
            return NULL;
        }
    }
    int64_t shape[CT_MAX_DIMS];
    memcpy(shape, xs[0]->shape, sizeof shape);
    shape[axis] = total_dim;
    ct_tensor *y = ct_graph_new(g, CT_F32, xs[0]->ndim, shape);
    if (!y) return NULL;
    int64_t outer, dim0, inner;
    ct_ops_split_axis(xs[0], axis, &outer, &dim0, &inner);
    int64_t off = 0;
    for (int32_t k = 0; k < n; k++) {
        int64_t len = xs[k]->shape[axis];
        copy_block((float *)y->data + off * inner, total_dim * inner, xs[k]->data, len * inner,
                   outer, len * inner, false);
        off += len;
    }
    if (ct_graph_needs_grad(g, n, xs)) {
        /* nodes hold at most CT_NODE_MAX_IN inputs; concat keeps its list in saved memory */
        int64_t *info =
            ct_graph_alloc(g, (size_t)(3 + n) * sizeof(int64_t) + (size_t)n * sizeof(ct_tensor *));
        ct_node *node = ct_graph_record(g, &concat_def, y, 0, NULL);
        if (!info || !node) return NULL;
        info[0] = outer;
        info[1] = inner;
        info[2] = total_dim;
        for (int32_t k = 0; k < n; k++)
            info[3 + k] = xs[k]->shape[axis];
        ct_tensor **list = (ct_tensor **)(void *)(info + 3 + n);
        for (int32_t k = 0; k < n; k++)
            list[k] = xs[k];
        node->saved = info;
        node->iarg[0] = n;
    }
    return y;
}

static void narrow_backward(ct_graph *g, ct_node *n) {
    float *dx = ct_graph_grad(g, n->in[0]);
    if (!dx) return;
    int64_t outer = n->iarg[0], dim = n->iarg[1], inner = n->iarg[2];
    int64_t start = n->iarg[3], len = n->iarg[4];
    copy_block(dx + start * inner, dim * inner, n->out->grad, len * inner, outer, len * inner,
               true);
}

static const ct_op_def narrow_def = {"narrow", narrow_backward};

ct_tensor *ct_op_narrow(ct_graph *g, ct_tensor *x, int32_t axis, int64_t start, int64_t len) {
    if (!ct_ops_begin(g, "narrow", 1, &x) || !ct_ops_f32(g, "narrow", "x", x)) return NULL;
    if (!ct_ops_axis(g, "narrow", x->ndim, &axis)) return NULL;
    int64_t outer, dim, inner;
    ct_ops_split_axis(x, axis, &outer, &dim, &inner);
    if (start < 0 || len < 0 || start > dim || len > dim - start) {
        char a[200];
        CT_GRAPH_FAIL(g, CT_ERR_SHAPE, "narrow: range [%lld, %lld) out of bounds for axis %d of %s",
                      (long long)start, (long long)(start + len), (int)axis,
                      ct_shape_str(x, a, sizeof a));
        return NULL;
    }
    int64_t shape[CT_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[axis] = len;
    ct_tensor *y = ct_graph_new(g, CT_F32, x->ndim, shape);
    if (!y) return NULL;
    copy_block(y->data, len * inner, (const float *)x->data + start * inner, dim * inner, outer,
               len * inner, false);
    if (ct_graph_needs_grad(g, 1, &x)) {
        ct_node *n = ct_graph_record(g, &narrow_def, y, 1, &x);
        if (!n) return NULL;
        n->iarg[0] = outer;
        n->iarg[1] = dim;
        n->iarg[2] = inner;
        n->iarg[3] = start;
        n->iarg[4] = len;
    }
    return y;
}

ct_status ct_op_split(
    ct_graph *g, ct_tensor *x, int32_t axis, int32_t n, const int64_t *sizes, ct_tensor **outs) {
    for (int32_t k = 0; k < n; k++)
        outs[k] = NULL;
    if (!ct_ops_begin(g, "split", 1, &x)) return ct_graph_status(g);
    if (!ct_ops_axis(g, "split", x->ndim, &axis)) return ct_graph_status(g);
    int64_t sum = 0;
    for (int32_t k = 0; k < n && sum >= 0; k++)
        if (!ct_ops_add_ok(sum, sizes[k], &sum)) sum = -1; /* negative or overflowing */
    if (n < 1 || sum != x->shape[axis]) {
        char a[200];
        return CT_GRAPH_FAIL(g, CT_ERR_SHAPE,
                             "split: %d sizes (sum %lld, -1 if a size is negative or they "
                             "overflow) do not cover axis %d of %s",
                             (int)n, (long long)sum, (int)axis, ct_shape_str(x, a, sizeof a));
    }
    int64_t start = 0;
    for (int32_t k = 0; k < n; k++) {
        outs[k] = ct_op_narrow(g, x, axis, start, sizes[k]);
        start += sizes[k];
    }
    if (ct_graph_status(g) != CT_OK)
        for (int32_t k = 0; k < n; k++)
            outs[k] = NULL; /* all or nothing */
    return ct_graph_status(g);
}
