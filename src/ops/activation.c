/*
 * activation.c - pointwise activations: relu, leaky_relu, gelu (erf and tanh forms), silu,
 * tanh, sigmoid.
 *
 * All share one forward/backward pair switching on the activation kind; backward recomputes
 * the derivative from the saved input (or output, for tanh and sigmoid) rather than storing
 * a second tensor. gelu_linear_over (matmul.c) is the exception: its forward pass stores
 * gelu'(x) over x (ct_ops_gelu_fwd_keep) and its backward multiplies by it
 * (ct_ops_gelu_bwd_kept), with the bits of the loops here.
 *
 * A NaN propagates as in PyTorch: every forward gives NaN for it. relu is PyTorch's
 * clamp_min(x, 0) (`0 > x ? 0 : x`: NaN and -0 pass through, one max instruction per vector)
 * and its backward is threshold_backward (`x <= 0 ? 0 : dy`), so a NaN input passes dy on;
 * leaky_relu's backward scales dy by the slope there; the others' derivatives are NaN.
 */
#include <math.h>
#include <string.h>

#include "autograd/autograd_internal.h"
#include "kernels/vmath.h"
#include "ops/ops_internal.h"

typedef enum act_kind {
    ACT_RELU,
    ACT_LEAKY_RELU,
    ACT_GELU_ERF,
    ACT_GELU_TANH,
    ACT_SILU,
    ACT_TANH,
    ACT_SIGMOID,
    ACT_KIND_COUNT
} act_kind;

#define SQRT_2_OVER_PI 0.7978845608028654f
#define INV_SQRT_2     0.7071067811865476f
#define INV_SQRT_2PI   0.3989422804014327f
#define GELU_C         0.044715f
#define GELU_SPAN      256  /* elements per pass of a fused loop: its scratch stays in L1 */
#define GELU_BLOCK     4096 /* elements per parallel work item */

static float sigmoidf(float x) {
    return 1.0f / (1.0f + expf(-x));
}

static float act_fwd(act_kind k, float x, float slope) {
    switch (k) {
    case ACT_RELU:
        return 0.0f > x ? 0.0f : x;
    case ACT_LEAKY_RELU:
        return x > 0.0f ? x : x * slope;
    case ACT_GELU_ERF:
        return 0.5f * x * (1.0f + erff(x * INV_SQRT_2));
    case ACT_GELU_TANH:
        return 0.5f * x * (1.0f + tanhf(SQRT_2_OVER_PI * (x + GELU_C * x * x * x)));
    case ACT_SILU:
        return x * sigmoidf(x);
    case ACT_TANH:
        return tanhf(x);
    case ACT_SIGMOID:
        return sigmoidf(x);
    case ACT_KIND_COUNT:
        break;
    }
    return 0.0f;
}

/* dy/dx from the input x and the output y. */
static float act_grad(act_kind k, float x, float y, float slope) {
    switch (k) {
    case ACT_RELU:
        return x <= 0.0f ? 0.0f : 1.0f;
    case ACT_LEAKY_RELU:
        return x > 0.0f ? 1.0f : slope;
    case ACT_GELU_ERF:
        return 0.5f * (1.0f + erff(x * INV_SQRT_2)) + x * INV_SQRT_2PI * expf(-0.5f * x * x);
    case ACT_GELU_TANH: {
        float u = SQRT_2_OVER_PI * (x + GELU_C * x * x * x);
        float t = tanhf(u);
        float du = SQRT_2_OVER_PI * (1.0f + 3.0f * GELU_C * x * x);
        return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du;
    }
    case ACT_SILU: {
        float s = sigmoidf(x);
        return s * (1.0f + x * (1.0f - s));
    }
    case ACT_TANH:
        return 1.0f - y * y;
    case ACT_SIGMOID:
        return y * (1.0f - y);
    case ACT_KIND_COUNT:
        break;
    }
    return 0.0f;
}

/* The exact (erf) GELU and its derivative on vmath.h's exp and erf: loops over these
 * vectorise, where libm's erff and expf are a call per element (the reference path keeps
 * libm's). */
static inline float gelu_fast(float x) {
    return 0.5f * x * (1.0f + ct_verff(x * INV_SQRT_2));
}

/* exp(-z^2) with z = x / sqrt(2) is both erf's exponential and the density's exp(-x^2 / 2):
 * one exp for the two */
static inline float gelu_grad_fast(float x) {
    float z = x * INV_SQRT_2, e = ct_vexpf(-z * z);
    return 0.5f * (1.0f + ct_verff_exp(z, e)) + x * INV_SQRT_2PI * e;
}

CT_HOT void
ct_ops_gelu_fwd(ct_graph *g, ct_gelu_approx approx, const float *x, float *y, int64_t n) {
    int nt = ct_ops_threads(g, n, 16);
    if (approx == CT_GELU_ERF && !ct_ops_reference(g)) {
        CT_OMP_FOR(nt)
        for (int64_t i = 0; i < n; i++)
            y[i] = gelu_fast(x[i]);
        return;
    }
    act_kind k = approx == CT_GELU_TANH ? ACT_GELU_TANH : ACT_GELU_ERF;
    CT_OMP_FOR(nt)
    for (int64_t i = 0; i < n; i++)
        y[i] = act_fwd(k, x[i], 0.0f);
}

static inline uint16_t bf16_bits(float x) {
    float r = ct_vround_bf16(x);
    uint32_t u;
    memcpy(&u, &r, sizeof u);
    return (uint16_t)(u >> 16);
}

CT_HOT void
ct_ops_gelu_fwd_bf16(ct_graph *g, ct_gelu_approx approx, const float *x, uint16_t *y, int64_t n) {
    int nt = ct_ops_threads(g, n, 16);
    if (approx == CT_GELU_ERF && !ct_ops_reference(g)) {
        CT_OMP_FOR(nt)
        for (int64_t i = 0; i < n; i++)
            y[i] = bf16_bits(gelu_fast(x[i]));
        return;
    }
    act_kind k = approx == CT_GELU_TANH ? ACT_GELU_TANH : ACT_GELU_ERF;
    CT_OMP_FOR(nt)
    for (int64_t i = 0; i < n; i++)
        y[i] = bf16_bits(act_fwd(k, x[i], 0.0f));
}

CT_HOT void ct_ops_gelu_bwd(
    ct_graph *g, ct_gelu_approx approx, const float *x, const float *dy, float *dx, int64_t n) {
    int nt = ct_ops_threads(g, n, 16);
    if (approx == CT_GELU_ERF && !ct_ops_reference(g)) {
        CT_OMP_FOR(nt)
        for (int64_t i = 0; i < n; i++)
            dx[i] += dy[i] * gelu_grad_fast(x[i]);
        return;
    }
    act_kind k = approx == CT_GELU_TANH ? ACT_GELU_TANH : ACT_GELU_ERF;
    CT_OMP_FOR(nt)
    for (int64_t i = 0; i < n; i++)
        dx[i] += dy[i] * act_grad(k, x[i], 0.0f, 0.0f); /* GELU's derivative reads x only */
}

/* dx[i] += term, or with `fresh` dx[i] = 0.0f + term (i the loop index; ct_graph_grad_fresh) */
#define ADD_INTO(fresh, dx, n, term)                                                               \
    do {                                                                                           \
        if (fresh)                                                                                 \
            for (int64_t i = 0; i < (n); i++)                                                      \
                (dx)[i] = 0.0f + (term);                                                           \
        else                                                                                       \
            for (int64_t i = 0; i < (n); i++)                                                      \
                (dx)[i] += (term);                                                                 \
    } while (0)

/* One work item of gelu_linear's fused loops over x[0..n): erf and exp once per element for
 * the activation and the derivative, in gelu_fast's and gelu_grad_fast's expressions (so their
 * bits). The activation goes to h (bf16) or a (f32, rounded to bf16 values when `round`); the
 * derivative to gp where gp is not NULL (gelu_linear_over: gp may be x itself), else times da
 * into dx (dx[i] = 0 + term when `fresh`). */
CT_HOT static void gelu_span(const float *x,
                             float *a,
                             bool round,
                             uint16_t *h,
                             float *gp,
                             const float *da,
                             float *dx,
                             bool fresh,
                             int64_t n) {
    float y[GELU_SPAN], d[GELU_SPAN];
    for (int64_t i0 = 0; i0 < n; i0 += GELU_SPAN) {
        int64_t len = n - i0 < GELU_SPAN ? n - i0 : GELU_SPAN;
        const float *xs = x + i0;
        float *ds = gp ? gp + i0 : d; /* gp[i] written after x[i] is read: gp may be x */
        for (int64_t i = 0; i < len; i++) {
            float z = xs[i] * INV_SQRT_2, e = ct_vexpf(-z * z), erf = ct_verff_exp(z, e);
            y[i] = 0.5f * xs[i] * (1.0f + erf);
            ds[i] = 0.5f * (1.0f + erf) + xs[i] * INV_SQRT_2PI * e;
        }
        if (h)
            for (int64_t i = 0; i < len; i++)
                h[i0 + i] = bf16_bits(y[i]);
        else if (round)
            for (int64_t i = 0; i < len; i++)
                a[i0 + i] = ct_vround_bf16(y[i]);
        else
            memcpy(a + i0, y, (size_t)len * sizeof(float));
        if (!gp) {
            const float *das = da + i0;
            float *dxs = dx + i0;
            ADD_INTO(fresh, dxs, len, das[i] * d[i]);
        }
    }
}

CT_HOT void ct_ops_gelu_bwd_act(ct_graph *g,
                                ct_gelu_approx approx,
                                const float *x,
                                const float *da,
                                float *dx,
                                bool fresh,
                                float *a,
                                bool round,
                                uint16_t *h,
                                int64_t n) {
    if (approx == CT_GELU_ERF && !ct_ops_reference(g) && dx && (a || h)) {
        int64_t items = (n + GELU_BLOCK - 1) / GELU_BLOCK;
        int nt = ct_ops_threads(g, items, GELU_BLOCK * 24);
        CT_PAR_FOR(nt, it, items, {
            int64_t lo = it * GELU_BLOCK, len = n - lo < GELU_BLOCK ? n - lo : GELU_BLOCK;
            gelu_span(x + lo, a ? a + lo : NULL, round, h ? h + lo : NULL, NULL, da + lo, dx + lo,
                      fresh, len);
        });
        return;
    }
    if (h) ct_ops_gelu_fwd_bf16(g, approx, x, h, n);
    if (a) {
        ct_ops_gelu_fwd(g, approx, x, a, n);
        if (round) ct_ops_round_bf16(g, a, a, n);
    }
    if (dx && fresh) memset(dx, 0, (size_t)n * sizeof(float));
    if (dx) ct_ops_gelu_bwd(g, approx, x, da, dx, n);
}

CT_HOT void ct_ops_gelu_fwd_keep(ct_graph *g,
                                 ct_gelu_approx approx,
                                 const float *x,
                                 float *a,
                                 bool round,
                                 uint16_t *h,
                                 float *gp,
                                 int64_t n) {
    if (approx == CT_GELU_ERF && !ct_ops_reference(g)) {
        int64_t items = (n + GELU_BLOCK - 1) / GELU_BLOCK;
        int nt = ct_ops_threads(g, items, GELU_BLOCK * 16);
        CT_PAR_FOR(nt, it, items, {
            int64_t lo = it * GELU_BLOCK, len = n - lo < GELU_BLOCK ? n - lo : GELU_BLOCK;
            gelu_span(x + lo, a ? a + lo : NULL, round, h ? h + lo : NULL, gp + lo, NULL, NULL,
                      false, len);
        });
        return;
    }
    if (h) ct_ops_gelu_fwd_bf16(g, approx, x, h, n);
    if (a) {
        ct_ops_gelu_fwd(g, approx, x, a, n);
        if (round) ct_ops_round_bf16(g, a, a, n);
    }
    act_kind k = approx == CT_GELU_TANH ? ACT_GELU_TANH : ACT_GELU_ERF;
    int nt = ct_ops_threads(g, n, 16);
    CT_OMP_FOR(nt)
    for (int64_t i = 0; i < n; i++)
        gp[i] = act_grad(k, x[i], 0.0f, 0.0f); /* GELU's derivative reads x only */
}

CT_HOT void ct_ops_gelu_bwd_kept(
    ct_graph *g, const float *gp, const float *da, float *dx, bool fresh, int64_t n) {
    int64_t items = (n + GELU_BLOCK - 1) / GELU_BLOCK;
    int nt = ct_ops_threads(g, items, GELU_BLOCK);
    CT_PAR_FOR(nt, it, items, {
        int64_t lo = it * GELU_BLOCK, len = n - lo < GELU_BLOCK ? n - lo : GELU_BLOCK;
        const float *gs = gp + lo, *das = da + lo;
        float *dxs = dx + lo;
        ADD_INTO(fresh, dxs, len, das[i] * gs[i]);
    });
}

CT_HOT static void act_backward(ct_graph *g, ct_node *n) {
    bool fresh; /* a new dx is written whole (0 + the term), not zeroed first */
    float *dx = ct_graph_grad_fresh(g, n->in[0], &fresh);
    if (!dx) return;
    act_kind k = (act_kind)n->iarg[0];
    float slope = n->farg[0];
    const float *x = n->in[0]->data, *y = n->out->data, *dy = n->out->grad;
    int64_t total = ct_tensor_numel(n->out);
    int nt = ct_ops_threads(g, total, 16);
    if (k == ACT_GELU_ERF || k == ACT_GELU_TANH) { /* the loops ct_op_gelu_linear shares */
        if (fresh) memset(dx, 0, (size_t)total * sizeof(float));
        ct_ops_gelu_bwd(g, k == ACT_GELU_TANH ? CT_GELU_TANH : CT_GELU_ERF, x, dy, dx, total);
        return;
    }
    if (k == ACT_RELU) { /* a loop of its own, which vectorises (the switch below does not) */
        if (fresh)
            CT_PAR_FOR(nt, i, total, dx[i] = 0.0f + (x[i] <= 0.0f ? 0.0f : dy[i]););
        else
            CT_PAR_FOR(nt, i, total, dx[i] += x[i] <= 0.0f ? 0.0f : dy[i];);
        return;
    }
    CT_OMP_FOR(nt)
    for (int64_t i = 0; i < total; i++) {
        float d = dy[i] * act_grad(k, x[i], y[i], slope);
        dx[i] = fresh ? 0.0f + d : dx[i] + d;
    }
}

static const ct_op_def act_defs[] = {
    {"relu", act_backward},      {"leaky_relu", act_backward}, {"gelu", act_backward},
    {"gelu_tanh", act_backward}, {"silu", act_backward},       {"tanh", act_backward},
    {"sigmoid", act_backward},
};
_Static_assert(sizeof(act_defs) / sizeof(act_defs[0]) == ACT_KIND_COUNT,
               "act_defs must cover every activation");

CT_HOT static ct_tensor *activation(ct_graph *g, act_kind k, ct_tensor *x, float slope) {
    const char *name = act_defs[k].name;
    if (!ct_ops_begin(g, name, 1, &x) || !ct_ops_f32(g, name, "x", x)) return NULL;
    /* an evaluation's activation no one else reads is overwritten: each element is read
     * before it is written, so the values are those of a fresh output */
    ct_tensor *y = ct_graph_donated(g, x) ? x : ct_graph_new(g, CT_F32, x->ndim, x->shape);
    if (!y) return NULL;
    const float *xv = x->data;
    float *yv = y->data;
    int64_t total = ct_tensor_numel(y);
    int nt = ct_ops_threads(g, total, 16);
    if (k == ACT_GELU_ERF || k == ACT_GELU_TANH) {
        ct_ops_gelu_fwd(g, k == ACT_GELU_TANH ? CT_GELU_TANH : CT_GELU_ERF, xv, yv, total);
    } else if (k == ACT_RELU) {
        CT_PAR_FOR(nt, i, total, yv[i] = 0.0f > xv[i] ? 0.0f : xv[i];);
    } else {
        CT_OMP_FOR(nt)
        for (int64_t i = 0; i < total; i++)
            yv[i] = act_fwd(k, xv[i], slope);
    }
    if (ct_graph_needs_grad(g, 1, &x)) {
        ct_node *n = ct_graph_record(g, &act_defs[k], y, 1, &x);
        if (!n) return NULL;
        n->iarg[0] = k;
        n->farg[0] = slope;
    }
    return y;
}

ct_tensor *ct_op_relu(ct_graph *g, ct_tensor *x) {
    return activation(g, ACT_RELU, x, 0.0f);
}

ct_tensor *ct_op_leaky_relu(ct_graph *g, ct_tensor *x, float negative_slope) {
    return activation(g, ACT_LEAKY_RELU, x, negative_slope);
}

ct_tensor *ct_op_gelu(ct_graph *g, ct_tensor *x, ct_gelu_approx approx) {
    if ((int)approx < 0 || approx >= CT_GELU_APPROX_COUNT) {
        CT_GRAPH_FAIL(g, CT_ERR_INVALID_ARG, "gelu: approximation %d is not a ct_gelu_approx",
                      (int)approx);
        return NULL;
    }
    return activation(g, approx == CT_GELU_TANH ? ACT_GELU_TANH : ACT_GELU_ERF, x, 0.0f);
}

ct_tensor *ct_op_silu(ct_graph *g, ct_tensor *x) {
    return activation(g, ACT_SILU, x, 0.0f);
}

ct_tensor *ct_op_tanh(ct_graph *g, ct_tensor *x) {
    return activation(g, ACT_TANH, x, 0.0f);
}

ct_tensor *ct_op_sigmoid(ct_graph *g, ct_tensor *x) {
    return activation(g, ACT_SIGMOID, x, 0.0f);
}
