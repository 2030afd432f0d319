/*
 * matmul.c - matmul (plain and batched) and linear, on ct_k_gemm (OpenBLAS, or the reference
 * twin when the context asks for it).
 *
 * Leading dims of a plain matmul fold into M, so [B, T, K] @ [K, N] is one GEMM. Backward
 * accumulates straight into the gradient buffers with beta = 1: dA += dC B^T, dB += A^T dC.
 * Linear's bias gradient sums rows in a fixed order per output column.
 *
 * Under bf16 autocast (ct_graph_set_autocast) the operands are rounded to bf16 into scratch
 * copies; the backward pass rounds them again (and the incoming gradient) into scratch and
 * computes every gradient of the op from those (the bias gradient too, summed in f64 as in
 * f32 mode). Where the context has a native bf16 GEMM (ct_ops_bf16_native) the copies are bf16
 * for ct_k_gemm_bf16, each operand rounded once per product and each weight once per update
 * (ct_ops_bf16_tensor); elsewhere they are f32 values for ct_k_gemm. Linear keeps its input's
 * bf16 copy for dW instead of rounding x again (2 bytes per element of x until the step's
 * graph is reset, as PyTorch's autocast does), the same values.
 *
 * gelu_linear is linear(gelu(x)) keeping only x: the activation is computed into scratch in
 * the forward pass and again in the backward pass (by ct_op_gelu's own loops), so a GPT's MLP
 * holds its [R, 4C] pre-activation but not a second [R, 4C] tensor; its results are the
 * unfused pair's, bit for bit. For the native bf16 GEMM the activation is computed and rounded
 * to bf16 in one pass (ct_ops_gelu_fwd_bf16). In backward, dy W goes into a scratch buffer
 * that the GEMM overwrites (beta 0), and then one pass over x computes the activation again
 * (for dW) and takes that buffer through gelu's derivative into dx, sharing erf and exp
 * (ct_ops_gelu_bwd_act). gelu_linear_over instead computes the activation and gelu'(x) in one
 * forward pass, writes gelu'(x) over x (which nothing else reads) and keeps the activation (as
 * the product multiplied it) in the node's saved block: its backward pass reads both and
 * computes no erf or exp, holding what gelu then linear would.
 *
 * Linear's bias is added by the GEMM's tiles (ct_k_gemm_bias): oneDNN's matmul adds it to its
 * finished sums, other kernels copy it into the tile's rows just before the product.
 */
#include <string.h>

#include "autograd/autograd_internal.h"
#include "kernels/kernels.h"
#include "ops/ops_internal.h"

/* An operand of a product: f32 values (rounded when autocast ran), or bf16 ones (h) for the
 * native bf16 GEMM. NULL in both: the arena failed. */
typedef struct operand {
    const float *f;
    const uint16_t *h;
} operand;

static bool missing(operand o) {
    return !o.f && !o.h;
}

/* A tensor as a product under the graph's autocast setting (forward pass) multiplies it. */
static operand forward_operand(ct_graph *g, const ct_tensor *t) {
    operand o = {NULL, NULL};
    if (ct_graph_autocast(g) == CT_BF16 && ct_ops_bf16_native(g))
        o.h = ct_ops_bf16_tensor(g, t);
    else
        o.f = ct_ops_autocast(g, t->data, ct_tensor_numel(t));
    return o;
}

/* Input i of node n as its forward pass multiplied it (backward pass). */
static operand backward_operand(ct_graph *g, const ct_node *n, int i) {
    operand o = {NULL, NULL};
    if (ct_ops_ran_autocast(n) && ct_ops_bf16_native(g))
        o.h = ct_ops_bf16_tensor(g, n->in[i]);
    else
        o.f = ct_ops_operand(g, n, i);
    return o;
}

/* n's incoming gradient dy[0..count), rounded as its forward pass rounded. */
static operand backward_dy(ct_graph *g, const ct_node *n, const float *dy, int64_t count) {
    operand o = {NULL, NULL};
    if (ct_ops_ran_autocast(n) && ct_ops_bf16_native(g))
        o.h = ct_ops_bf16(g, dy, count);
    else
        o.f = ct_ops_round_dy(g, n, dy, count);
    return o;
}

/* gelu(x[0..count)) into scratch as a product's operand: rounded to bf16 under autocast,
 * bf16 values for the native GEMM (one pass), else f32 ones. */
static operand gelu_operand(
    ct_graph *g, ct_gelu_approx approx, const float *x, int64_t count, bool autocast, bool bf16) {
    operand o = {NULL, NULL};
    size_t n = (size_t)(count > 0 ? count : 1);
    if (bf16) {
        uint16_t *h = ct_graph_alloc(g, n * sizeof(uint16_t));
        if (h) ct_ops_gelu_fwd_bf16(g, approx, x, h, count);
        o.h = h;
        return o;
    }
    float *a = ct_graph_alloc(g, n * sizeof(float));
    if (!a) return o;
    ct_ops_gelu_fwd(g, approx, x, a, count);
    if (autocast) ct_ops_round_bf16(g, a, a, count);
    o.f = a;
    return o;
}

/* gelu_linear_over's activation, kept for dW: bf16 for the native bf16 GEMM, else f32 values
 * (rounded to bf16 under autocast). */
static size_t gelu_kept_bytes(int64_t count, bool native) {
    return (size_t)(count > 0 ? count : 1) * (native ? sizeof(uint16_t) : sizeof(float));
}

static operand gelu_kept_operand(void *block, bool native) {
    operand o = {NULL, NULL};
    if (native)
        o.h = block;
    else
        o.f = block;
    return o;
}

/* C = alpha op(A) op(B) + beta C on operands a and b from element offsets ao and bo. */
static void gemm(ct_ctx *ctx,
                 bool ta,
                 bool tb,
                 int64_t m,
                 int64_t n,
                 int64_t k,
                 operand a,
                 int64_t ao,
                 int64_t lda,
                 operand b,
                 int64_t bo,
                 int64_t ldb,
                 float beta,
                 float *c,
                 int64_t ldc) {
    if (a.h)
        ct_k_gemm_bf16(ctx, ta, tb, m, n, k, 1.0f, a.h + ao, lda, b.h + bo, ldb, beta, c, ldc);
    else
        ct_k_gemm(ctx, ta, tb, m, n, k, 1.0f, a.f + ao, lda, b.f + bo, ldb, beta, c, ldc);
}

/* iarg: [0] batch count (1 for plain), [1] M, [2] K, [3] N, [4] batched b */
static void matmul_backward(ct_graph *g, ct_node *n) {
    ct_ctx *ctx = ct_graph_ctx(g);
    ct_tensor *a = n->in[0], *b = n->in[1];
    int64_t batch = n->iarg[0], m = n->iarg[1], k = n->iarg[2], nn = n->iarg[3];
    bool batched_b = n->iarg[4] != 0;
    float *da = ct_graph_grad(g, a), *db = ct_graph_grad(g, b);
    ct_graph_mark mark = ct_graph_scratch_mark(g);
    operand none = {NULL, NULL};
    operand av = db ? backward_operand(g, n, 0) : none; /* only dB reads A */
    operand bv = da ? backward_operand(g, n, 1) : none; /* only dA reads B */
    operand dc = backward_dy(g, n, n->out->grad, batch * m * nn);
    if (missing(dc) || (db && missing(av)) || (da && missing(bv))) return;
    if (!batched_b) {
        /* a is [batch*m, k] */
        if (da) gemm(ctx, false, true, batch * m, k, nn, dc, 0, nn, bv, 0, nn, 1.0f, da, k);
        if (db) gemm(ctx, true, false, k, nn, batch * m, av, 0, k, dc, 0, nn, 1.0f, db, nn);
        ct_graph_scratch_release(g, mark);
        return;
    }
    for (int64_t i = 0; i < batch; i++) {
        if (da)
            gemm(ctx, false, true, m, k, nn, dc, i * m * nn, nn, bv, i * k * nn, nn, 1.0f,
                 da + i * m * k, k);
        if (db)
            gemm(ctx, true, false, k, nn, m, av, i * m * k, k, dc, i * m * nn, nn, 1.0f,
                 db + i * k * nn, nn);
    }
    ct_graph_scratch_release(g, mark);
}

static const ct_op_def matmul_def = {"matmul", matmul_backward};

ct_tensor *ct_op_matmul(ct_graph *g, ct_tensor *a, ct_tensor *b) {
    ct_tensor *in[2] = {a, b};
    if (!ct_ops_begin(g, "matmul", 2, in)) return NULL;
    if (!ct_ops_f32(g, "matmul", "a", a) || !ct_ops_f32(g, "matmul", "b", b)) return NULL;
    char s1[200], s2[200];
    bool batched_b = b->ndim > 2;
    bool ok = a->ndim >= 2 && b->ndim >= 2 && a->shape[a->ndim - 1] == b->shape[b->ndim - 2];
    if (ok && batched_b) {
        ok = a->ndim == b->ndim;
        for (int32_t d = 0; ok && d < a->ndim - 2; d++)
            ok = a->shape[d] == b->shape[d];
    }
    if (!ok) {
        CT_GRAPH_FAIL(g, CT_ERR_SHAPE,
                      "matmul: a %s and b %s do not multiply (expected a [..., M, K] with b [K, N] "
                      "or b [..., K, N] with the same leading dims)",
                      ct_shape_str(a, s1, sizeof s1), ct_shape_str(b, s2, sizeof s2));
        return NULL;
    }
    int64_t m = a->shape[a->ndim - 2], k = a->shape[a->ndim - 1], n = b->shape[b->ndim - 1];
    int64_t batch = 1;
    for (int32_t d = 0; d < a->ndim - 2; d++)
        batch *= a->shape[d];
    int64_t shape[CT_MAX_DIMS];
    memcpy(shape, a->shape, sizeof shape);
    shape[a->ndim - 1] = n;
    ct_tensor *c = ct_graph_new(g, CT_F32, a->ndim, shape);
    if (!c) return NULL;
    ct_graph_mark mark = ct_graph_scratch_mark(g); /* the rounded operands die with the product */
    operand av = forward_operand(g, a), bv = forward_operand(g, b);
    if (missing(av) || missing(bv)) return NULL;
    ct_ctx *ctx = ct_graph_ctx(g);
    if (!batched_b) {
        gemm(ctx, false, false, batch * m, n, k, av, 0, k, bv, 0, n, 0.0f, c->data, n);
    } else {
        for (int64_t i = 0; i < batch; i++)
            gemm(ctx, false, false, m, n, k, av, i * m * k, k, bv, i * k * n, n, 0.0f,
                 (float *)c->data + i * m * n, n);
    }
    ct_graph_scratch_release(g, mark);
    if (ct_graph_needs_grad(g, 2, in)) {
        ct_node *node = ct_graph_record(g, &matmul_def, c, 2, in);
        if (!node) return NULL;
        ct_ops_note_autocast(g, node);
        node->iarg[0] = batch;
        node->iarg[1] = m;
        node->iarg[2] = k;
        node->iarg[3] = n;
        node->iarg[4] = batched_b;
    }
    return c;
}

/* iarg: [0] rows R, [1] in, [2] out, [3] 0, or 1 + ct_gelu_approx for gelu_linear, [4] 1 for
 * gelu_linear_over (x's data holds gelu'(x), saved the activation). saved: gelu_linear_over's
 * activation; for linear x's bf16 copy where the native bf16 GEMM made one for a weight with
 * a gradient (x not a parameter), else NULL */
CT_HOT static void linear_backward(ct_graph *g, ct_node *n) {
    ct_ctx *ctx = ct_graph_ctx(g);
    ct_tensor *x = n->in[0], *w = n->in[1], *bias = n->in[2];
    int64_t rows = n->iarg[0], in = n->iarg[1], out = n->iarg[2];
    bool gelu = n->iarg[3] != 0, over = n->iarg[4] != 0;
    ct_gelu_approx approx = gelu ? (ct_gelu_approx)(n->iarg[3] - 1) : CT_GELU_ERF;
    const float *dy = n->out->grad;
    bool fresh; /* dx is written whole (the GEMM with beta 0, or gelu's pass) when made here */
    float *dx = ct_graph_grad_fresh(g, x, &fresh), *dw = ct_graph_grad(g, w);
    float *db = ct_graph_grad(g, bias);
    ct_graph_mark mark = ct_graph_scratch_mark(g);
    bool native = ct_ops_ran_autocast(n) && ct_ops_bf16_native(g);
    operand xv = {NULL, NULL}, wv = {NULL, NULL};
    float *da = dx; /* where dy W goes: dx itself, or (gelu) the activation's gradient */
    float *act = NULL;
    uint16_t *act_h = NULL;
    if (gelu) {
        size_t count = (size_t)(rows * in > 0 ? rows * in : 1);
        if (over) {
            xv = gelu_kept_operand(n->saved, native); /* what the forward pass multiplied */
        } else if (dw) { /* the activation again (computed below, with gelu's derivative) */
            if (native)
                xv.h = act_h = ct_graph_alloc(g, count * sizeof(uint16_t));
            else
                xv.f = act = ct_graph_alloc(g, count * sizeof(float));
            if (missing(xv)) return;
        }
        da = dx ? ct_graph_alloc(g, count * sizeof(float)) : NULL; /* the GEMM writes it whole */
        if (dx && !da) return;
    } else if (dw && native && n->saved) {
        xv.h = n->saved; /* x's bf16 copy, kept by the forward pass */
    } else if (dw) {
        xv = backward_operand(g, n, 0); /* only dW reads x */
    }
    if (dx) wv = backward_operand(g, n, 1); /* only dx reads W */
    operand dyr = backward_dy(g, n, dy, rows * out);
    if (missing(dyr) || (dw && missing(xv)) || (dx && missing(wv))) return;
    /* dx [R, in] += dy [R, out] @ W [out, in] (for gelu_linear into da, then through gelu') */
    if (dx)
        gemm(ctx, false, false, rows, in, out, dyr, 0, out, wv, 0, in, gelu || fresh ? 0.0f : 1.0f,
             da, in);
    /* gelu_linear_over: dx += da gelu'(x), gelu'(x) where x was; gelu_linear: the activation,
     * rounded as the forward pass rounded it, and dx += da gelu'(x), in one pass */
    if (gelu && over && dx)
        ct_ops_gelu_bwd_kept(g, x->data, da, dx, fresh, rows * in);
    else if (gelu && !over)
        ct_ops_gelu_bwd_act(g, approx, x->data, da, dx, fresh, act,
                            ct_ops_ran_autocast(n) && !native, act_h, rows * in);
    /* dW [out, in] += dy^T [out, R] @ x [R, in] */
    if (dw) gemm(ctx, true, false, out, in, rows, dyr, 0, out, xv, 0, in, 1.0f, dw, in);
    if (db) {
        if (dyr.h) {
            ct_ops_colsum_bf16(g, dyr.h, rows, out, db);
        } else {
            ct_ops_colsum(g, dyr.f, rows, out, db);
        }
    }
    ct_graph_scratch_release(g, mark);
}

static const ct_op_def linear_def = {"linear", linear_backward};
static const ct_op_def gelu_linear_def = {"gelu_linear", linear_backward};
static const ct_op_def gelu_linear_over_def = {"gelu_linear_over", linear_backward};

/* linear (gelu 0) or gelu_linear (gelu = 1 + ct_gelu_approx; over: gelu_linear_over) */
static ct_tensor *
linear_op(ct_graph *g, ct_tensor *x, ct_tensor *weight, ct_tensor *bias, int gelu, bool over) {
    const char *op = over ? "gelu_linear_over" : gelu ? "gelu_linear" : "linear";
    ct_tensor *in[3] = {x, weight, bias};
    if (!ct_ops_begin(g, op, 2, in)) return NULL;
    if (!ct_ops_f32(g, op, "x", x) || !ct_ops_f32(g, op, "weight", weight) ||
        (bias && !ct_ops_f32(g, op, "bias", bias)))
        return NULL;
    char s1[200], s2[200], s3[200];
    if (x->ndim < 1 || weight->ndim != 2 || x->shape[x->ndim - 1] != weight->shape[1]) {
        CT_GRAPH_FAIL(g, CT_ERR_SHAPE,
                      "%s: x %s does not fit weight %s (expected x [..., in], weight [out, in])",
                      op, ct_shape_str(x, s1, sizeof s1), ct_shape_str(weight, s2, sizeof s2));
        return NULL;
    }
    int64_t fan_in = weight->shape[1], fan_out = weight->shape[0];
    if (bias && (bias->ndim != 1 || bias->shape[0] != fan_out)) {
        CT_GRAPH_FAIL(g, CT_ERR_SHAPE, "%s: bias %s, expected [%lld] for weight %s", op,
                      ct_shape_str(bias, s3, sizeof s3), (long long)fan_out,
                      ct_shape_str(weight, s2, sizeof s2));
        return NULL;
    }
    int64_t rows = ct_tensor_numel(x) / (fan_in ? fan_in : 1);
    if (fan_in == 0) {
        rows = 1;
        for (int32_t d = 0; d < x->ndim - 1; d++)
            rows *= x->shape[d];
    }
    int64_t shape[CT_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[x->ndim - 1] = fan_out;
    ct_tensor *y = ct_graph_new(g, CT_F32, x->ndim, shape);
    if (!y) return NULL;
    float *yv = y->data;
    int32_t n_in = bias ? 3 : 2;
    bool record = ct_graph_needs_grad(g, n_in, in);
    bool autocast = ct_graph_autocast(g) == CT_BF16;
    bool native = autocast && ct_ops_bf16_native(g);
    if (over && (!record || !ct_graph_needs_grad(g, 1, &x))) {
        /* no backward pass to prepare for, or nothing records who made x: x stays as it is */
        over = false;
    } else if (over && ((x->flags & CT_TENSOR_PARAM) || !ct_graph_is_newest(g, x))) {
        CT_GRAPH_FAIL(g, CT_ERR_INVALID_ARG,
                      "gelu_linear_over: x must be the output of the op recorded just before (a "
                      "tensor no op has read yet), not a parameter or a leaf");
        return NULL;
    }
    void *kept = NULL; /* gelu_linear_over: the activation, kept for dW; linear: x in bf16 */
    operand xv = {NULL, NULL};
    if (!gelu && native && record && ct_graph_needs_grad(g, 1, &weight) &&
        !(x->flags & CT_TENSOR_PARAM)) {
        /* the copy the product multiplies, kept for dW rather than made again in backward */
        kept = ct_ops_bf16(g, x->data, rows * fan_in);
        if (!kept) return NULL;
        xv.h = kept;
    } else if (over) { /* the activation and, over x, gelu'(x), in one pass */
        int64_t count = rows * fan_in;
        kept = ct_graph_alloc(g, gelu_kept_bytes(count, native));
        if (!kept) return NULL;
        ct_ops_gelu_fwd_keep(g, (ct_gelu_approx)(gelu - 1), x->data, native ? NULL : kept,
                             autocast && !native, native ? kept : NULL, x->data, count);
        xv = gelu_kept_operand(kept, native);
    }
    ct_graph_mark mark = ct_graph_scratch_mark(g); /* the rounded operands die with the product */
    if (gelu && !over) { /* the activation, in scratch (rounded): backward computes it again */
        xv = gelu_operand(g, (ct_gelu_approx)(gelu - 1), x->data, rows * fan_in, autocast, native);
    } else if (!gelu && !kept) {
        xv = forward_operand(g, x);
    }
    operand wv = forward_operand(g, weight);
    if (missing(xv) || missing(wv)) return NULL;
    if (bias) /* the rows start as the bias, which the product adds to */
        ct_k_gemm_bias(ct_graph_ctx(g), xv.h != NULL, false, true, rows, fan_out, fan_in,
                       xv.h ? (const void *)xv.h : (const void *)xv.f, fan_in,
                       wv.h ? (const void *)wv.h : (const void *)wv.f, fan_in, bias->data, yv,
                       fan_out);
    else
        gemm(ct_graph_ctx(g), false, true, rows, fan_out, fan_in, xv, 0, fan_in, wv, 0, fan_in,
             0.0f, yv, fan_out);
    ct_graph_scratch_release(g, mark);
    if (record) {
        const ct_op_def *def = over ? &gelu_linear_over_def : gelu ? &gelu_linear_def : &linear_def;
        ct_node *node = ct_graph_record(g, def, y, n_in, in);
        if (!node) return NULL;
        node->saved = kept;
        ct_ops_note_autocast(g, node);
        node->iarg[0] = rows;
        node->iarg[1] = fan_in;
        node->iarg[2] = fan_out;
        node->iarg[3] = gelu;
        node->iarg[4] = over;
    }
    return y;
}

ct_tensor *ct_op_linear(ct_graph *g, ct_tensor *x, ct_tensor *weight, ct_tensor *bias) {
    return linear_op(g, x, weight, bias, 0, false);
}

static ct_tensor *gelu_linear(ct_graph *g,
                              ct_tensor *x,
                              ct_gelu_approx approx,
                              ct_tensor *weight,
                              ct_tensor *bias,
                              bool over) {
    if ((int)approx < 0 || approx >= CT_GELU_APPROX_COUNT) {
        CT_GRAPH_FAIL(g, CT_ERR_INVALID_ARG, "%s: approximation %d is not a ct_gelu_approx",
                      over ? "gelu_linear_over" : "gelu_linear", (int)approx);
        return NULL;
    }
    return linear_op(g, x, weight, bias, 1 + (int)approx, over);
}

ct_tensor *ct_op_gelu_linear(
    ct_graph *g, ct_tensor *x, ct_gelu_approx approx, ct_tensor *weight, ct_tensor *bias) {
    return gelu_linear(g, x, approx, weight, bias, false);
}

ct_tensor *ct_op_gelu_linear_over(
    ct_graph *g, ct_tensor *x, ct_gelu_approx approx, ct_tensor *weight, ct_tensor *bias) {
    return gelu_linear(g, x, approx, weight, bias, true);
}
