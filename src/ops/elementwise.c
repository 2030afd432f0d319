/*
 * elementwise.c - add, sub, mul, div with NumPy broadcasting, and scale / add_scalar.
 *
 * Broadcasting is resolved once per call into per-input strides over the output's index space
 * (0 along stretched dims). Equal shapes, a scalar operand and a trailing-suffix operand
 * (bias-like: [T, C] against [B, T, C]) take fast paths: contiguous spans with the operator
 * chosen outside the loop, which vectorise. The backward into a broadcast input adds many
 * output positions into one element, each element's terms in output order: serially in
 * general, and for a suffix operand in blocks of columns, one thread a block, each column's
 * rows in order; so the sum never depends on threads. Every fast path computes what the
 * general loop computes, in the same order (the same bits); with CT_KERNELS_REFERENCE the
 * general loops run (tests/unit/test_fast_elementwise.c compares the two).
 */
#include <string.h>

#include "autograd/autograd_internal.h"
#include "ops/ops_internal.h"

typedef enum binop { BIN_ADD, BIN_SUB, BIN_MUL, BIN_DIV } binop;

typedef struct bcast {
    int32_t ndim;
    int64_t shape[CT_MAX_DIMS];
    int64_t sa[CT_MAX_DIMS], sb[CT_MAX_DIMS]; /* element strides of a and b per output dim */
    bool a_full, b_full;                      /* the input has the output's shape */
} bcast;

/* Strides of x aligned to the output's trailing dims; 0 where x has 1 or lacks the dim. */
static void align_strides(const ct_tensor *x, int32_t ndim, const int64_t *shape, int64_t *s) {
    int64_t stride = 1;
    for (int32_t d = ndim - 1; d >= 0; d--) {
        int32_t xd = d - (ndim - x->ndim);
        if (xd < 0) {
            s[d] = 0;
            continue;
        }
        s[d] = (x->shape[xd] == 1 && shape[d] != 1) ? 0 : stride;
        stride *= x->shape[xd];
    }
}

static bool
broadcast_shapes(ct_graph *g, const char *op, const ct_tensor *a, const ct_tensor *b, bcast *bc) {
    int32_t nd = a->ndim > b->ndim ? a->ndim : b->ndim;
    bc->ndim = nd;
    for (int32_t d = 0; d < nd; d++) {
        int32_t ad = d - (nd - a->ndim), bd = d - (nd - b->ndim);
        int64_t da = ad >= 0 ? a->shape[ad] : 1, db = bd >= 0 ? b->shape[bd] : 1;
        if (da != db && da != 1 && db != 1) {
            char s1[200], s2[200];
            CT_GRAPH_FAIL(g, CT_ERR_SHAPE, "%s: shapes %s and %s do not broadcast (dim %d)", op,
                          ct_shape_str(a, s1, sizeof s1), ct_shape_str(b, s2, sizeof s2), (int)d);
            return false;
        }
        bc->shape[d] = da == 1 ? db : da;
    }
    align_strides(a, nd, bc->shape, bc->sa);
    align_strides(b, nd, bc->shape, bc->sb);
    int64_t n = 1;
    for (int32_t d = 0; d < nd; d++)
        n *= bc->shape[d];
    bc->a_full = ct_tensor_numel(a) == n;
    bc->b_full = ct_tensor_numel(b) == n;
    return true;
}

/* Offsets of output element i in a and b. */
static void bcast_offsets(const bcast *bc, int64_t i, int64_t *ia, int64_t *ib) {
    int64_t oa = 0, ob = 0;
    for (int32_t d = bc->ndim - 1; d >= 0; d--) {
        int64_t k = i % bc->shape[d];
        i /= bc->shape[d];
        oa += k * bc->sa[d];
        ob += k * bc->sb[d];
    }
    *ia = oa;
    *ib = ob;
}

static float apply(binop op, float x, float y) {
    switch (op) {
    case BIN_ADD:
        return x + y;
    case BIN_SUB:
        return x - y;
    case BIN_MUL:
        return x * y;
    case BIN_DIV:
        return x / y;
    }
    return 0.0f;
}

/* The number of trailing output elements that x spans, when x is a trailing suffix of the
 * output (its element at output index i is x[i % inner]); 0 otherwise. */
static int64_t suffix_inner(const bcast *bc, const int64_t *s) {
    int64_t inner = 1;
    int32_t d = bc->ndim - 1;
    for (; d >= 0 && (bc->shape[d] == 1 || s[d] == inner); d--)
        inner *= bc->shape[d];
    for (; d >= 0; d--)
        if (bc->shape[d] != 1 && s[d] != 0) return 0;
    return inner;
}

#define SPAN      4096 /* elements per parallel work item of the contiguous paths */
#define COL_BLOCK 64   /* columns per work item of a suffix operand's gradient */

/* y[i] = a[i] op b[i] */
CT_HOT static void fwd_span(binop op, const float *a, const float *b, float *y, int64_t n) {
    switch (op) {
    case BIN_ADD:
        for (int64_t i = 0; i < n; i++)
            y[i] = a[i] + b[i];
        break;
    case BIN_SUB:
        for (int64_t i = 0; i < n; i++)
            y[i] = a[i] - b[i];
        break;
    case BIN_MUL:
        for (int64_t i = 0; i < n; i++)
            y[i] = a[i] * b[i];
        break;
    case BIN_DIV:
        for (int64_t i = 0; i < n; i++)
            y[i] = a[i] / b[i];
        break;
    }
}

/* y[i] = a[i] op s */
CT_HOT static void fwd_span_scalar(binop op, const float *a, float s, float *y, int64_t n) {
    switch (op) {
    case BIN_ADD:
        for (int64_t i = 0; i < n; i++)
            y[i] = a[i] + s;
        break;
    case BIN_SUB:
        for (int64_t i = 0; i < n; i++)
            y[i] = a[i] - s;
        break;
    case BIN_MUL:
        for (int64_t i = 0; i < n; i++)
            y[i] = a[i] * s;
        break;
    case BIN_DIV:
        for (int64_t i = 0; i < n; i++)
            y[i] = a[i] / s;
        break;
    }
}

/* dst[i] += expr (i the loop index), or with `fresh` dst[i] = 0.0f + expr: the bits of adding
 * to a zeroed buffer without reading it (ct_graph_grad_fresh) */
#define ADD_INTO(fresh, dst, n, expr)                                                              \
    do {                                                                                           \
        if (fresh)                                                                                 \
            for (int64_t i = 0; i < (n); i++)                                                      \
                (dst)[i] = 0.0f + (expr);                                                          \
        else                                                                                       \
            for (int64_t i = 0; i < (n); i++)                                                      \
                (dst)[i] += (expr);                                                                \
    } while (0)

/* da[i] += d(a op b)/da dy[i], with b[i] the b of that output element */
CT_HOT static void
bwd_a_span(binop op, const float *dy, const float *b, float *da, int64_t n, bool fresh) {
    switch (op) {
    case BIN_ADD:
    case BIN_SUB:
        ADD_INTO(fresh, da, n, dy[i]);
        break;
    case BIN_MUL:
        ADD_INTO(fresh, da, n, dy[i] * b[i]);
        break;
    case BIN_DIV:
        ADD_INTO(fresh, da, n, dy[i] / b[i]);
        break;
    }
}

/* db[i] += d(a op b)/db dy[i], with a[i] and b[i] the operands of that output element */
CT_HOT static void bwd_b_span(
    binop op, const float *dy, const float *a, const float *b, float *db, int64_t n, bool fresh) {
    switch (op) {
    case BIN_ADD:
        ADD_INTO(fresh, db, n, dy[i]);
        break;
    case BIN_SUB:
        ADD_INTO(fresh, db, n, -dy[i]);
        break;
    case BIN_MUL:
        ADD_INTO(fresh, db, n, dy[i] * a[i]);
        break;
    case BIN_DIV:
        ADD_INTO(fresh, db, n, -dy[i] * a[i] / (b[i] * b[i]));
        break;
    }
}

/* The gradient of the full operand (full: a or b, the other one `other`, a full tensor or, with
 * inner > 0, a suffix of `inner` elements) over `total` output elements, in spans or rows;
 * `fresh`: grad is unzeroed (ct_graph_grad_fresh). */
static void grad_full(ct_graph *g,
                      binop op,
                      bool into_a,
                      const float *dy,
                      const float *full,
                      const float *other,
                      int64_t inner,
                      float *grad,
                      int64_t total,
                      bool fresh) {
    bool rows = inner > 0;
    int64_t len = rows ? inner : SPAN;
    int64_t items = (total + len - 1) / len;
    int nt = ct_ops_threads(g, items, len * 2);
    CT_PAR_FOR(nt, it, items, {
        int64_t lo = it * len, n = total - lo < len ? total - lo : len;
        const float *o = rows ? other : other + lo;
        if (into_a)
            bwd_a_span(op, dy + lo, o, grad + lo, n, fresh);
        else
            bwd_b_span(op, dy + lo, o, full + lo, grad + lo, n, fresh);
    });
}

/* The gradient of a suffix operand of `inner` elements (into_a: a, else b) over `total`
 * output elements: column blocks in parallel, each column's rows added in output order. */
static void grad_suffix(ct_graph *g,
                        binop op,
                        bool into_a,
                        const float *dy,
                        const float *av,
                        const float *bv,
                        int64_t inner,
                        float *grad,
                        int64_t total) {
    int64_t outer = inner > 0 ? total / inner : 0;
    int64_t blocks = (inner + COL_BLOCK - 1) / COL_BLOCK;
    int nt = ct_ops_threads(g, blocks, outer * COL_BLOCK * 2);
    CT_PAR_FOR(nt, blk, blocks, {
        int64_t j0 = blk * COL_BLOCK, w = inner - j0 < COL_BLOCK ? inner - j0 : COL_BLOCK;
        for (int64_t r = 0; r < outer; r++) {
            int64_t at = r * inner + j0;
            if (into_a) /* b is full */
                bwd_a_span(op, dy + at, bv + at, grad + j0, w, false);
            else /* a is full */
                bwd_b_span(op, dy + at, av + at, bv + j0, grad + j0, w, false);
        }
    });
}

CT_HOT static void binary_backward(ct_graph *g, ct_node *n) {
    binop op = (binop)n->iarg[0];
    ct_tensor *a = n->in[0], *b = n->in[1];
    const bcast *bc = n->saved;
    const float *dy = n->out->grad, *av = a->data, *bv = b->data;
    int64_t total = ct_tensor_numel(n->out);
    int nt = ct_ops_threads(g, total, 4);
    bool fast = !ct_ops_reference(g);
    int64_t a_inner = fast && !bc->a_full ? suffix_inner(bc, bc->sa) : 0;
    int64_t b_inner = fast && !bc->b_full ? suffix_inner(bc, bc->sb) : 0;
    /* the contiguous paths write every element of a full operand's gradient: no zeroing first
     * (a and b the same tensor: the second request finds the first's buffer, not fresh) */
    bool a_span = bc->a_full && fast && (bc->b_full || b_inner > 0);
    bool b_span = bc->b_full && fast && (bc->a_full || a_inner > 0);
    bool a_fresh = false, b_fresh = false;
    float *da = a_span ? ct_graph_grad_fresh(g, a, &a_fresh) : ct_graph_grad(g, a);
    float *db = b_span ? ct_graph_grad_fresh(g, b, &b_fresh) : ct_graph_grad(g, b);
    /* d/da and d/db of x op y, times dy */
    if (da && a_span) {
        grad_full(g, op, true, dy, av, bv, bc->b_full ? 0 : b_inner, da, total, a_fresh);
    } else if (da && bc->a_full) {
        bool b_same = bc->b_full;
        CT_OMP_FOR(nt)
        for (int64_t i = 0; i < total; i++) {
            int64_t ib = i, ia;
            if (!b_same) bcast_offsets(bc, i, &ia, &ib);
            float y = bv[ib];
            float d = op == BIN_MUL ? dy[i] * y : op == BIN_DIV ? dy[i] / y : dy[i];
            da[i] += d;
        }
    } else if (da && bc->b_full && a_inner > 0) {
        grad_suffix(g, op, true, dy, av, bv, a_inner, da, total);
    } else if (da) {
        for (int64_t i = 0; i < total; i++) {
            int64_t ia, ib;
            bcast_offsets(bc, i, &ia, &ib);
            float y = bv[ib];
            da[ia] += op == BIN_MUL ? dy[i] * y : op == BIN_DIV ? dy[i] / y : dy[i];
        }
    }
    if (db && b_span) {
        grad_full(g, op, false, dy, bv, av, bc->a_full ? 0 : a_inner, db, total, b_fresh);
    } else if (db && bc->b_full) {
        bool a_same = bc->a_full;
        CT_OMP_FOR(nt)
        for (int64_t i = 0; i < total; i++) {
            int64_t ia = i, ib;
            if (!a_same) bcast_offsets(bc, i, &ia, &ib);
            float x = av[ia], y = bv[i];
            float d = op == BIN_ADD   ? dy[i]
                      : op == BIN_SUB ? -dy[i]
                      : op == BIN_MUL ? dy[i] * x
                                      : -dy[i] * x / (y * y);
            db[i] += d;
        }
    } else if (db && bc->a_full && b_inner > 0) {
        grad_suffix(g, op, false, dy, av, bv, b_inner, db, total);
    } else if (db) {
        for (int64_t i = 0; i < total; i++) {
            int64_t ia, ib;
            bcast_offsets(bc, i, &ia, &ib);
            float x = av[ia], y = bv[ib];
            db[ib] += op == BIN_ADD   ? dy[i]
                      : op == BIN_SUB ? -dy[i]
                      : op == BIN_MUL ? dy[i] * x
                                      : -dy[i] * x / (y * y);
        }
    }
}

static const ct_op_def binary_defs[] = {
    {"add", binary_backward},
    {"sub", binary_backward},
    {"mul", binary_backward},
    {"div", binary_backward},
};

CT_HOT static ct_tensor *binary(ct_graph *g, binop op, ct_tensor *a, ct_tensor *b) {
    const char *name = binary_defs[op].name;
    ct_tensor *in[2] = {a, b};
    if (!ct_ops_begin(g, name, 2, in)) return NULL;
    if (!ct_ops_f32(g, name, "a", a) || !ct_ops_f32(g, name, "b", b)) return NULL;
    bcast bc;
    if (!broadcast_shapes(g, name, a, b, &bc)) return NULL;
    ct_tensor *y = ct_graph_new(g, CT_F32, bc.ndim, bc.shape);
    if (!y) return NULL;
    int64_t total = ct_tensor_numel(y);
    const float *av = a->data, *bv = b->data;
    float *yv = y->data;
    int nt = ct_ops_threads(g, total, 2);
    bool fast = !ct_ops_reference(g);
    int64_t a_inner = fast && !bc.a_full ? suffix_inner(&bc, bc.sa) : 0;
    int64_t b_inner = fast && !bc.b_full ? suffix_inner(&bc, bc.sb) : 0;
    if (fast && bc.a_full && bc.b_full) {
        int64_t spans = (total + SPAN - 1) / SPAN;
        int ns = ct_ops_threads(g, spans, SPAN * 2);
        CT_PAR_FOR(ns, it, spans, {
            int64_t lo = it * SPAN, n = total - lo < SPAN ? total - lo : SPAN;
            fwd_span(op, av + lo, bv + lo, yv + lo, n);
        });
    } else if (fast && bc.a_full && ct_tensor_numel(b) == 1) {
        int64_t spans = (total + SPAN - 1) / SPAN;
        int ns = ct_ops_threads(g, spans, SPAN * 2);
        float s = bv[0];
        CT_PAR_FOR(ns, it, spans, {
            int64_t lo = it * SPAN, n = total - lo < SPAN ? total - lo : SPAN;
            fwd_span_scalar(op, av + lo, s, yv + lo, n);
        });
    } else if ((bc.a_full && b_inner > 0) || (bc.b_full && a_inner > 0)) {
        int64_t inner = bc.a_full ? b_inner : a_inner, rows = total / inner;
        int nr = ct_ops_threads(g, rows, inner * 2);
        bool a_rows = bc.a_full;
        CT_PAR_FOR(nr, r, rows, {
            int64_t at = r * inner;
            fwd_span(op, a_rows ? av + at : av, a_rows ? bv : bv + at, yv + at, inner);
        });
    } else if (bc.a_full && bc.b_full) {
        CT_OMP_FOR(nt)
        for (int64_t i = 0; i < total; i++)
            yv[i] = apply(op, av[i], bv[i]);
    } else if (bc.a_full && ct_tensor_numel(b) == 1) {
        float s = bv[0];
        CT_OMP_FOR(nt)
        for (int64_t i = 0; i < total; i++)
            yv[i] = apply(op, av[i], s);
    } else {
        CT_OMP_FOR(nt)
        for (int64_t i = 0; i < total; i++) {
            int64_t ia, ib;
            bcast_offsets(&bc, i, &ia, &ib);
            yv[i] = apply(op, av[ia], bv[ib]);
        }
    }
    if (ct_graph_needs_grad(g, 2, in)) {
        ct_node *n = ct_graph_record(g, &binary_defs[op], y, 2, in);
        bcast *saved = ct_graph_alloc(g, sizeof *saved);
        if (!n || !saved) return NULL;
        *saved = bc;
        n->saved = saved;
        n->iarg[0] = op;
    }
    return y;
}

ct_tensor *ct_op_add(ct_graph *g, ct_tensor *a, ct_tensor *b) {
    return binary(g, BIN_ADD, a, b);
}

ct_tensor *ct_op_sub(ct_graph *g, ct_tensor *a, ct_tensor *b) {
    return binary(g, BIN_SUB, a, b);
}

ct_tensor *ct_op_mul(ct_graph *g, ct_tensor *a, ct_tensor *b) {
    return binary(g, BIN_MUL, a, b);
}

ct_tensor *ct_op_div(ct_graph *g, ct_tensor *a, ct_tensor *b) {
    return binary(g, BIN_DIV, a, b);
}

/* y = x * farg[0] + farg[1] */
CT_HOT static void affine_backward(ct_graph *g, ct_node *n) {
    float *dx = ct_graph_grad(g, n->in[0]);
    if (!dx) return;
    const float *dy = n->out->grad;
    float s = n->farg[0];
    int64_t total = ct_tensor_numel(n->out);
    int nt = ct_ops_threads(g, total, 2);
    CT_OMP_FOR(nt)
    for (int64_t i = 0; i < total; i++)
        dx[i] += dy[i] * s;
}

static const ct_op_def affine_def = {"scale", affine_backward};

CT_HOT static ct_tensor *affine(ct_graph *g, const char *name, ct_tensor *x, float s, float t) {
    if (!ct_ops_begin(g, name, 1, &x) || !ct_ops_f32(g, name, "x", x)) return NULL;
    ct_tensor *y = ct_graph_new(g, CT_F32, x->ndim, x->shape);
    if (!y) return NULL;
    int64_t total = ct_tensor_numel(y);
    const float *xv = x->data;
    float *yv = y->data;
    int nt = ct_ops_threads(g, total, 2);
    CT_OMP_FOR(nt)
    for (int64_t i = 0; i < total; i++)
        yv[i] = xv[i] * s + t;
    if (ct_graph_needs_grad(g, 1, &x)) {
        ct_node *n = ct_graph_record(g, &affine_def, y, 1, &x);
        if (!n) return NULL;
        n->farg[0] = s;
    }
    return y;
}

ct_tensor *ct_op_scale(ct_graph *g, ct_tensor *x, float s) {
    return affine(g, "scale", x, s, 0.0f);
}

ct_tensor *ct_op_add_scalar(ct_graph *g, ct_tensor *x, float s) {
    return affine(g, "add_scalar", x, 1.0f, s);
}
