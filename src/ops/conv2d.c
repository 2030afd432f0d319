/*
 * conv2d.c - 2-D convolution (PyTorch's F.conv2d: stride, zero padding, dilation, groups,
 * optional bias), forward and backward.
 *
 * Fast path: oneDNN's JIT convolution (src/kernels/onednn/conv2d_onednn.c), when it takes the
 * geometry and the op is not called from inside a parallel region.
 *
 * Fallback path (CT_KERNELS_BLAS, builds without OpenMP, geometries oneDNN declines): im2col +
 * ct_k_gemm. The batch is cut into chunks of B samples, B chosen from the shapes alone (the
 * im2col buffer of a chunk holds at most COL_BUDGET floats), never from the thread count. Per
 * chunk, im2col (and col2im, and the transposes around the GEMM) run in parallel over
 * (sample, channel) planes, each owned by one thread; the GEMMs are tiled by ct_k_gemm, whose
 * results do not depend on the thread count. The weight gradient is one GEMM per chunk over the
 * chunk's whole im2col matrix, accumulated chunk after chunk in sample order, so every result is
 * bitwise the same for any thread count. Scratch comes from the graph's arena and is released
 * when the op is done.
 *
 * Reference path (ctx kernels CT_KERNELS_REFERENCE): the direct loops of
 * src/kernels/ref/conv2d_ref.c.
 *
 * Under bf16 autocast (ct_graph_set_autocast) x and the weight are rounded to bf16 into
 * scratch copies that every path convolves; the backward pass rounds them again (the same
 * bits) and dy the same way, and takes all three gradients from those. Where the CPU has bf16
 * dot products (ct_k_onednn_bf16_native) and each group has at least 16 input channels
 * (native_bf16), oneDNN's bf16 primitives run instead, with f32 accumulation and f32 results:
 * they round x, the weight and dy to bf16 themselves while converting them to their layouts
 * (the same rounding, so no rounded copies are made).
 *
 * Node: in = {x, weight[, bias]}; iarg = stride h,w, padding h,w, dilation h,w, groups;
 * iarg[7] = 1 when the forward pass ran under autocast; saved = NULL.
 */
#include <string.h>

#include "autograd/autograd_internal.h"
#include "kernels/cnn_kernels.h"
#include "kernels/kernels.h"
#include "ops/ops_internal.h"

/* Floats in the im2col buffer of one chunk of samples (8 MiB); one sample may exceed it. */
#define COL_BUDGET ((int64_t)1 << 21)
/* Stride, padding and dilation above this are rejected (they would overflow size arithmetic
 * long before they could be meaningful). */
#define PARAM_MAX  ((int64_t)INT32_MAX)

ct_conv2d_params ct_conv2d_default_params(void) {
    ct_conv2d_params p;
    p.stride[0] = p.stride[1] = 1;
    p.padding[0] = p.padding[1] = 0;
    p.dilation[0] = p.dilation[1] = 1;
    p.groups = 1;
    return p;
}

static bool mul_ok(int64_t a, int64_t b, int64_t *r) {
    if (a != 0 && b > INT64_MAX / a) return false;
    *r = a * b;
    return true;
}

static bool add_ok(int64_t a, int64_t b, int64_t *r) {
    if (b > INT64_MAX - a) return false;
    *r = a + b;
    return true;
}

/* ---- the fast path ---- */

/* col [C*KH*KW, nb*L] (row (c*KH + kh)*KW + kw, column b*L + oh*OW + ow) from samples
 * [n0, n0+nb) of x [N, C, H, W]; zero where the tap falls into the padding. */
CT_HOT static void
im2col(const ct_k_conv2d_geom *s, const float *x, int64_t n0, int64_t nb, float *col, int nt) {
    int64_t l = s->oh * s->ow, bl = nb * l;
    CT_OMP_FOR(nt)
    for (int64_t t = 0; t < nb * s->c; t++) {
        int64_t b = t / s->c, c = t % s->c;
        const float *xp = x + ((n0 + b) * s->c + c) * s->h * s->w;
        for (int64_t kh = 0; kh < s->kh; kh++) {
            for (int64_t kw = 0; kw < s->kw; kw++) {
                float *row = col + ((c * s->kh + kh) * s->kw + kw) * bl + b * l;
                for (int64_t oh = 0; oh < s->oh; oh++) {
                    float *r = row + oh * s->ow;
                    int64_t ih = oh * s->stride[0] - s->padding[0] + kh * s->dilation[0];
                    if (ih < 0 || ih >= s->h) {
                        memset(r, 0, (size_t)s->ow * sizeof(float));
                        continue;
                    }
                    const float *xr = xp + ih * s->w;
                    for (int64_t ow = 0; ow < s->ow; ow++) {
                        int64_t iw = ow * s->stride[1] - s->padding[1] + kw * s->dilation[1];
                        r[ow] = (iw >= 0 && iw < s->w) ? xr[iw] : 0.0f;
                    }
                }
            }
        }
    }
}

/* dx [N, C, H, W] += col2im(dcol [C*KH*KW, nb*L]) for samples [n0, n0+nb). Each (sample,
 * channel) plane is owned by one thread and summed over the taps in a fixed order. */
CT_HOT static void col2im_add(
    const ct_k_conv2d_geom *s, const float *dcol, int64_t n0, int64_t nb, float *dx, int nt) {
    int64_t l = s->oh * s->ow, bl = nb * l;
    CT_OMP_FOR(nt)
    for (int64_t t = 0; t < nb * s->c; t++) {
        int64_t b = t / s->c, c = t % s->c;
        float *dxp = dx + ((n0 + b) * s->c + c) * s->h * s->w;
        for (int64_t kh = 0; kh < s->kh; kh++) {
            for (int64_t kw = 0; kw < s->kw; kw++) {
                const float *row = dcol + ((c * s->kh + kh) * s->kw + kw) * bl + b * l;
                for (int64_t oh = 0; oh < s->oh; oh++) {
                    int64_t ih = oh * s->stride[0] - s->padding[0] + kh * s->dilation[0];
                    if (ih < 0 || ih >= s->h) continue;
                    const float *r = row + oh * s->ow;
                    float *dr = dxp + ih * s->w;
                    for (int64_t ow = 0; ow < s->ow; ow++) {
                        int64_t iw = ow * s->stride[1] - s->padding[1] + kw * s->dilation[1];
                        if (iw >= 0 && iw < s->w) dr[iw] += r[ow];
                    }
                }
            }
        }
    }
}

/* Samples per chunk: as many as fit COL_BUDGET, at least 1. Depends on the shapes only. */
static int64_t chunk_samples(const ct_k_conv2d_geom *s) {
    int64_t per_sample = s->c * s->kh * s->kw * s->oh * s->ow; /* checked by the op */
    int64_t b = per_sample > 0 ? COL_BUDGET / per_sample : s->n;
    if (b < 1) b = 1;
    return b < s->n ? b : s->n;
}

CT_HOT static bool fast_forward(ct_graph *g,
                                const ct_k_conv2d_geom *s,
                                const float *x,
                                const float *w,
                                const float *bias,
                                float *y) {
    ct_ctx *ctx = ct_graph_ctx(g);
    int64_t grp = s->groups, og = s->o / grp, kg = (s->c / grp) * s->kh * s->kw;
    int64_t rows = s->c * s->kh * s->kw, l = s->oh * s->ow;
    int64_t bsz = chunk_samples(s);
    float *col = NULL, *tmp = NULL;
    if (kg > 0) {
        col = ct_graph_alloc(g, (size_t)(rows * bsz * l) * sizeof(float));
        tmp = ct_graph_alloc(g, (size_t)(s->o * bsz * l) * sizeof(float));
        if (!col || !tmp) return false;
    }
    for (int64_t n0 = 0; n0 < s->n; n0 += bsz) {
        int64_t nb = s->n - n0 < bsz ? s->n - n0 : bsz, bl = nb * l;
        if (kg > 0) {
            im2col(s, x, n0, nb, col, ct_ops_threads(g, nb * s->c, s->kh * s->kw * l));
            /* per group: tmp [Og, nb*L] = W_g [Og, Kg] @ col_g [Kg, nb*L] */
            for (int64_t gi = 0; gi < grp; gi++)
                ct_k_gemm(ctx, false, false, og, bl, kg, 1.0f, w + gi * og * kg, kg,
                          col + gi * kg * bl, bl, 0.0f, tmp + gi * og * bl, bl);
        }
        int nt = ct_ops_threads(g, nb * s->o, l);
        CT_OMP_FOR(nt)
        for (int64_t t = 0; t < nb * s->o; t++) {
            int64_t b = t / s->o, o = t % s->o;
            float *yp = y + ((n0 + b) * s->o + o) * l;
            float bo = bias ? bias[o] : 0.0f;
            if (kg == 0) {
                for (int64_t i = 0; i < l; i++)
                    yp[i] = bo;
                continue;
            }
            const float *tp = tmp + o * bl + b * l;
            for (int64_t i = 0; i < l; i++)
                yp[i] = tp[i] + bo;
        }
    }
    return true;
}

CT_HOT static void fast_backward(ct_graph *g,
                                 const ct_k_conv2d_geom *s,
                                 const float *x,
                                 const float *w,
                                 const float *dy,
                                 float *dx,
                                 float *dw) {
    ct_ctx *ctx = ct_graph_ctx(g);
    int64_t grp = s->groups, og = s->o / grp, kg = (s->c / grp) * s->kh * s->kw;
    int64_t rows = s->c * s->kh * s->kw, l = s->oh * s->ow;
    if (kg == 0 || (!dx && !dw)) return;
    int64_t bsz = chunk_samples(s);
    size_t col_bytes = (size_t)(rows * bsz * l) * sizeof(float);
    float *dyc = ct_graph_alloc(g, (size_t)(s->o * bsz * l) * sizeof(float));
    float *col = dw ? ct_graph_alloc(g, col_bytes) : NULL;
    float *dcol = dx ? ct_graph_alloc(g, col_bytes) : NULL;
    if (!dyc || (dw && !col) || (dx && !dcol)) return; /* OOM: the graph has failed */
    for (int64_t n0 = 0; n0 < s->n; n0 += bsz) {
        int64_t nb = s->n - n0 < bsz ? s->n - n0 : bsz, bl = nb * l;
        /* dyc [O, nb*L] from dy [N, O, L] */
        int nt = ct_ops_threads(g, nb * s->o, l);
        CT_OMP_FOR(nt)
        for (int64_t t = 0; t < nb * s->o; t++) {
            int64_t b = t / s->o, o = t % s->o;
            memcpy(dyc + o * bl + b * l, dy + ((n0 + b) * s->o + o) * l, (size_t)l * sizeof(float));
        }
        if (dw) {
            im2col(s, x, n0, nb, col, ct_ops_threads(g, nb * s->c, s->kh * s->kw * l));
            /* dW_g [Og, Kg] += dyc_g [Og, nb*L] @ col_g [Kg, nb*L]^T */
            for (int64_t gi = 0; gi < grp; gi++)
                ct_k_gemm(ctx, false, true, og, kg, bl, 1.0f, dyc + gi * og * bl, bl,
                          col + gi * kg * bl, bl, 1.0f, dw + gi * og * kg, kg);
        }
        if (dx) {
            /* dcol_g [Kg, nb*L] = W_g [Og, Kg]^T @ dyc_g [Og, nb*L] */
            for (int64_t gi = 0; gi < grp; gi++)
                ct_k_gemm(ctx, true, false, kg, bl, og, 1.0f, w + gi * og * kg, kg,
                          dyc + gi * og * bl, bl, 0.0f, dcol + gi * kg * bl, bl);
            col2im_add(s, dcol, n0, nb, dx, ct_ops_threads(g, nb * s->c, s->kh * s->kw * l));
        }
    }
}

/* The oneDNN path: 1 done, 0 not available (use im2col), -1 failed (the graph has failed). */
static int onednn_threads(ct_graph *g, const ct_k_conv2d_geom *s) {
    /* at most 8 chunks (see conv2d_onednn.c); the work of one is a sample's convolution */
    int64_t per_sample = s->o * s->oh * s->ow * (s->c / s->groups) * s->kh * s->kw;
    return ct_ops_threads(g, s->n < 8 ? s->n : 8, per_sample);
}

static int onednn_forward(ct_graph *g,
                          const ct_k_conv2d_geom *s,
                          bool bf16,
                          bool relu,
                          const float *x,
                          const float *w,
                          const float *bias,
                          float *y) {
    ct_ctx *ctx = ct_graph_ctx(g);
    int nt = onednn_threads(g, s);
    size_t bytes;
    /* the oneDNN caches are built outside parallel regions only */
    if (ctx->kernels == CT_KERNELS_BLAS || ct_omp_level() != 0 ||
        !ct_k_conv2d_onednn_scratch(ctx, s, bias != NULL, bf16, false, nt, &bytes))
        return 0;
    void *scratch = bytes ? ct_graph_alloc(g, bytes) : NULL;
    if (bytes && !scratch) return -1;
    int r = ct_k_conv2d_onednn_fwd(ctx, s, bf16, relu, x, w, bias, y, scratch, nt);
    if (r < 0) CT_GRAPH_FAIL(g, CT_ERR_INTERNAL, "conv2d: a oneDNN forward call failed");
    return r;
}

static int onednn_backward(ct_graph *g,
                           const ct_k_conv2d_geom *s,
                           bool has_bias,
                           bool bf16,
                           const float *x,
                           const float *w,
                           const float *dy,
                           float *dx,
                           float *dw,
                           float *db) {
    ct_ctx *ctx = ct_graph_ctx(g);
    int nt = onednn_threads(g, s);
    size_t bytes;
    if (ctx->kernels == CT_KERNELS_BLAS || ct_omp_level() != 0 ||
        !ct_k_conv2d_onednn_scratch(ctx, s, has_bias, bf16, true, nt, &bytes))
        return 0;
    void *scratch = bytes ? ct_graph_alloc(g, bytes) : NULL;
    if (bytes && !scratch) return -1;
    int r = ct_k_conv2d_onednn_bwd(ctx, s, has_bias, bf16, x, w, dy, dx, dw, db, scratch, nt);
    if (r < 0) CT_GRAPH_FAIL(g, CT_ERR_INTERNAL, "conv2d: a oneDNN backward call failed");
    return r;
}

/* Whether a convolution whose operands bf16 autocast rounded (rounded) runs on oneDNN's bf16
 * primitives: where the CPU multiplies bf16 natively and each group has at least
 * BF16_MIN_CHANNELS input channels. They compute the same products as the f32 ones on the
 * rounded values (exact in f32) and accumulate in f32, in their own order. With fewer channels
 * (an image's 1 or 3) the bf16 kernels pad the channels they sum over to a block of pairs and
 * ran slower than the f32 ones: a 1-channel 28x28 input's 3x3 convolution took 2 (forward) and
 * 3 (weight gradient) times as long on AMX, so such layers run the f32 primitives on rounded
 * copies, as on a CPU without bf16 products. */
#define BF16_MIN_CHANNELS 16
static bool native_bf16(ct_graph *g, bool rounded, const ct_k_conv2d_geom *s) {
    ct_ctx *ctx = ct_graph_ctx(g);
    return rounded && ctx->kernels == CT_KERNELS_FAST && s->c / s->groups >= BF16_MIN_CHANNELS &&
           ct_k_onednn_bf16_native(ctx);
}

/* db [O] += sum over n and the plane of dy [N, O, L], in double, in a fixed order. */
CT_HOT static void
bias_backward(ct_graph *g, const ct_k_conv2d_geom *s, const float *dy, float *db) {
    int64_t l = s->oh * s->ow;
    int nt = ct_ops_threads(g, s->o, s->n * l);
    CT_OMP_FOR(nt)
    for (int64_t o = 0; o < s->o; o++) {
        double acc = 0.0;
        for (int64_t n = 0; n < s->n; n++)
            acc += ct_ops_sum_f64(dy + (n * s->o + o) * l, l, 1);
        db[o] += (float)acc;
    }
}

/* ---- the op ---- */

static void geom_init(ct_k_conv2d_geom *s,
                      const ct_tensor *x,
                      const ct_tensor *w,
                      const int64_t *args /* stride[2], padding[2], dilation[2], groups */) {
    s->n = x->shape[0];
    s->c = x->shape[1];
    s->h = x->shape[2];
    s->w = x->shape[3];
    s->o = w->shape[0];
    s->kh = w->shape[2];
    s->kw = w->shape[3];
    for (int i = 0; i < 2; i++) {
        s->stride[i] = args[i];
        s->padding[i] = args[2 + i];
        s->dilation[i] = args[4 + i];
    }
    s->groups = args[6];
    int64_t ext_h = (s->kh - 1) * s->dilation[0] + 1, ext_w = (s->kw - 1) * s->dilation[1] + 1;
    s->oh = (s->h + 2 * s->padding[0] - ext_h) / s->stride[0] + 1;
    s->ow = (s->w + 2 * s->padding[1] - ext_w) / s->stride[1] + 1;
}

static const ct_op_def conv2d_relu_def;

/* y [N, O, L] = relu(y) over (sample, channel) planes (the paths that do not fuse it). */
CT_HOT static void relu_planes(ct_graph *g, const ct_k_conv2d_geom *s, float *y) {
    int64_t l = s->oh * s->ow;
    int nt = ct_ops_threads(g, s->n * s->o, l);
    CT_OMP_FOR(nt)
    for (int64_t t = 0; t < s->n * s->o; t++)
        ct_k_relu_inplace(y + t * l, l);
}

/* The incoming gradient of conv2d_relu's convolution: dy where y > 0 (or NaN), else 0, as
 * ct_op_relu's backward gives it into a zeroed gradient (hence 0.0f + : -0 becomes +0), so
 * the fused op's gradients are those of relu(conv2d(...)) bit for bit. NULL on arena
 * failure. */
CT_HOT static const float *masked_dy(ct_graph *g, const ct_k_conv2d_geom *s, const ct_tensor *y) {
    int64_t l = s->oh * s->ow, count = s->n * s->o * l;
    float *m = ct_graph_alloc(g, (size_t)count * sizeof(float));
    if (!m) return NULL;
    const float *yv = y->data, *dy = y->grad;
    int nt = ct_ops_threads(g, s->n * s->o, l);
    CT_OMP_FOR(nt)
    for (int64_t t = 0; t < s->n * s->o; t++) {
        for (int64_t i = t * l; i < (t + 1) * l; i++) {
            float d = dy[i]; /* read unconditionally: a select, which vectorises, not a branch */
            m[i] = 0.0f + (yv[i] <= 0.0f ? 0.0f : d);
        }
    }
    return m;
}

static void conv2d_backward(ct_graph *g, ct_node *n) {
    ct_tensor *x = n->in[0], *w = n->in[1], *bias = n->n_in > 2 ? n->in[2] : NULL;
    ct_k_conv2d_geom s;
    geom_init(&s, x, w, n->iarg);
    float *dx = ct_graph_grad(g, x);
    float *dw = ct_graph_grad(g, w);
    float *db = ct_graph_grad(g, bias);
    if (ct_graph_status(g) != CT_OK || ct_tensor_numel(n->out) == 0) return;
    /* all scratch below is released at the end: the gradients were allocated above */
    ct_graph_mark mark = ct_graph_scratch_mark(g);
    const float *dy_in = n->op == &conv2d_relu_def ? masked_dy(g, &s, n->out) : n->out->grad;
    if (!dy_in) return;
    bool any = (dx || dw || db) && s.c > 0;
    int r = 0;
    /* oneDNN's bf16 primitives round x, w and dy themselves (as forward) */
    if (any && native_bf16(g, ct_ops_ran_autocast(n), &s))
        r = onednn_backward(g, &s, bias != NULL, true, x->data, w->data, dy_in, dx, dw, db);
    if (r != 0) {
        ct_graph_scratch_release(g, mark);
        return;
    }
    const float *dy = ct_ops_round_dy(g, n, dy_in, ct_tensor_numel(n->out));
    const float *xv = ct_ops_operand(g, n, 0), *wv = ct_ops_operand(g, n, 1);
    if (!dy || !xv || !wv) return;
    if (ct_ops_reference(g)) {
        ct_k_conv2d_ref_bwd(&s, xv, wv, dy, dx, dw, db);
        ct_graph_scratch_release(g, mark);
        return;
    }
    if (any) r = onednn_backward(g, &s, bias != NULL, false, xv, wv, dy, dx, dw, db);
    if (r == 0) { /* not taken by oneDNN (done, or failed and recorded, otherwise) */
        if (db) bias_backward(g, &s, dy, db);
        fast_backward(g, &s, xv, wv, dy, dx, dw);
    }
    ct_graph_scratch_release(g, mark);
}

static const ct_op_def conv2d_def = {"conv2d", conv2d_backward};
static const ct_op_def conv2d_relu_def = {"conv2d_relu", conv2d_backward};

/* Stride, padding and dilation in range. */
static bool check_params(ct_graph *g, const ct_conv2d_params *p) {
    for (int i = 0; i < 2; i++) {
        if (p->stride[i] < 1 || p->stride[i] > PARAM_MAX || p->padding[i] < 0 ||
            p->padding[i] > PARAM_MAX || p->dilation[i] < 1 || p->dilation[i] > PARAM_MAX) {
            CT_GRAPH_FAIL(g, CT_ERR_INVALID_ARG,
                          "conv2d: stride (%lld,%lld), padding (%lld,%lld), dilation (%lld,%lld): "
                          "expected stride and dilation in [1, %lld], padding in [0, %lld]",
                          (long long)p->stride[0], (long long)p->stride[1],
                          (long long)p->padding[0], (long long)p->padding[1],
                          (long long)p->dilation[0], (long long)p->dilation[1],
                          (long long)PARAM_MAX, (long long)PARAM_MAX);
            return false;
        }
    }
    return true;
}

/* The channels of x [N,C,H,W], weight [O,C/groups,KH,KW] and bias [O] agree with the groups;
 * sx and sw are x's and the weight's shapes, for messages. */
static bool check_channels(ct_graph *g,
                           const ct_tensor *x,
                           const ct_tensor *w,
                           const ct_tensor *bias,
                           int64_t grp,
                           const char *sx,
                           const char *sw) {
    int64_t c = x->shape[1], o = w->shape[0];
    if (grp < 1) {
        CT_GRAPH_FAIL(g, CT_ERR_INVALID_ARG, "conv2d: groups must be positive, got %lld",
                      (long long)grp);
        return false;
    }
    if (c % grp != 0 || o % grp != 0) {
        CT_GRAPH_FAIL(g, CT_ERR_SHAPE,
                      "conv2d: groups %lld must divide both the input channels of x %s and the "
                      "output channels of weight %s",
                      (long long)grp, sx, sw);
        return false;
    }
    if (w->shape[1] != c / grp) {
        CT_GRAPH_FAIL(g, CT_ERR_SHAPE,
                      "conv2d: weight %s expects %lld*groups = %lld input channels (groups "
                      "%lld), x is %s",
                      sw, (long long)w->shape[1], (long long)(w->shape[1] * grp), (long long)grp,
                      sx);
        return false;
    }
    if (w->shape[2] < 1 || w->shape[3] < 1) {
        CT_GRAPH_FAIL(g, CT_ERR_SHAPE, "conv2d: weight %s has an empty kernel", sw);
        return false;
    }
    if (bias && (bias->ndim != 1 || bias->shape[0] != o)) {
        char sb[200];
        CT_GRAPH_FAIL(g, CT_ERR_SHAPE, "conv2d: bias must be [%lld] for weight %s, got %s",
                      (long long)o, sw, ct_shape_str(bias, sb, sizeof sb));
        return false;
    }
    return true;
}

/* The padded input is at least as large as the dilated kernel, with overflow-checked
 * arithmetic. */
static bool check_extent(ct_graph *g,
                         const ct_tensor *x,
                         const ct_tensor *w,
                         const ct_conv2d_params *p,
                         const char *sx,
                         const char *sw) {
    int64_t padded[2], ext[2];
    for (int i = 0; i < 2; i++) {
        bool ok = mul_ok(w->shape[2 + i] - 1, p->dilation[i], &ext[i]) &&
                  add_ok(ext[i], 1, &ext[i]) &&
                  add_ok(x->shape[2 + i], 2 * p->padding[i], &padded[i]);
        if (!ok) {
            CT_GRAPH_FAIL(g, CT_ERR_SHAPE,
                          "conv2d: x %s with weight %s, padding %lld and dilation %lld overflow "
                          "the size arithmetic",
                          sx, sw, (long long)p->padding[i], (long long)p->dilation[i]);
            return false;
        }
    }
    if (padded[0] < ext[0] || padded[1] < ext[1]) {
        CT_GRAPH_FAIL(g, CT_ERR_SHAPE,
                      "conv2d: x %s padded by (%lld,%lld) is (%lld,%lld), smaller than the kernel "
                      "(%lld,%lld) of weight %s with dilation (%lld,%lld)",
                      sx, (long long)p->padding[0], (long long)p->padding[1], (long long)padded[0],
                      (long long)padded[1], (long long)ext[0], (long long)ext[1], sw,
                      (long long)p->dilation[0], (long long)p->dilation[1]);
        return false;
    }
    return true;
}

/* Checks every argument; fills the geometry. Messages name the shapes involved. */
static bool conv2d_check(ct_graph *g,
                         const ct_tensor *x,
                         const ct_tensor *w,
                         const ct_tensor *bias,
                         const ct_conv2d_params *p,
                         int64_t *args,
                         ct_k_conv2d_geom *s) {
    char sx[200], sw[200];
    if (!ct_ops_f32(g, "conv2d", "x", x) || !ct_ops_f32(g, "conv2d", "weight", w) ||
        (bias && !ct_ops_f32(g, "conv2d", "bias", bias)))
        return false;
    if (x->ndim != 4) {
        CT_GRAPH_FAIL(g, CT_ERR_SHAPE, "conv2d: x must be [N,C,H,W], got %s",
                      ct_shape_str(x, sx, sizeof sx));
        return false;
    }
    if (w->ndim != 4) {
        CT_GRAPH_FAIL(g, CT_ERR_SHAPE, "conv2d: weight must be [O,C/groups,KH,KW], got %s",
                      ct_shape_str(w, sw, sizeof sw));
        return false;
    }
    ct_shape_str(x, sx, sizeof sx);
    ct_shape_str(w, sw, sizeof sw);
    if (!check_params(g, p) || !check_channels(g, x, w, bias, p->groups, sx, sw) ||
        !check_extent(g, x, w, p, sx, sw))
        return false;
    for (int i = 0; i < 2; i++) {
        args[i] = p->stride[i];
        args[2 + i] = p->padding[i];
        args[4 + i] = p->dilation[i];
    }
    args[6] = p->groups;
    geom_init(s, x, w, args);
    return true;
}

static ct_tensor *conv2d_apply(ct_graph *g,
                               ct_tensor *x,
                               ct_tensor *weight,
                               ct_tensor *bias,
                               const ct_conv2d_params *p,
                               bool relu) {
    ct_tensor *in[3] = {x, weight, bias};
    if (!ct_ops_begin(g, "conv2d", 2, in)) return NULL;
    ct_conv2d_params defaults = ct_conv2d_default_params();
    if (!p) p = &defaults;
    int64_t args[7];
    ct_k_conv2d_geom s;
    if (!conv2d_check(g, x, weight, bias, p, args, &s)) return NULL;
    ct_tensor *y = ct_graph_new(g, CT_F32, 4, (int64_t[]){s.n, s.o, s.oh, s.ow});
    if (!y) return NULL;
    /* scratch only from here (the rounded operands too): y is out */
    ct_graph_mark mark = ct_graph_scratch_mark(g);
    if (ct_tensor_numel(y) > 0) {
        /* y is non-empty, so N, O, OH, OW >= 1; x and weight bound the remaining factors unless
         * C == 0, where im2col is skipped. One sample's im2col must fit a BLAS int. */
        int64_t per_sample;
        char sx[200], sw[200];
        if (s.o > (int64_t)INT32_MAX ||
            (s.c > 0 && !(mul_ok(s.c * s.kh * s.kw, s.oh * s.ow, &per_sample) &&
                          per_sample <= (int64_t)INT32_MAX))) {
            CT_GRAPH_FAIL(g, CT_ERR_SHAPE,
                          "conv2d: x %s with weight %s: the im2col matrix of one sample or the "
                          "output channels exceed 2^31 elements (the GEMM's int limit)",
                          ct_shape_str(x, sx, sizeof sx), ct_shape_str(weight, sw, sizeof sw));
            return NULL;
        }
        const float *bv = bias ? bias->data : NULL;
        int r = 0;
        /* oneDNN's bf16 primitives round x and the weight on their way in (to nearest even,
         * as ct_ops_autocast), so they take the values as they are: no rounded copies */
        if (s.c > 0 && native_bf16(g, ct_graph_autocast(g) == CT_BF16, &s))
            r = onednn_forward(g, &s, true, relu, x->data, weight->data, bv, y->data);
        if (r < 0) return NULL;
        if (r == 0) {
            const float *xv = ct_ops_autocast(g, x->data, ct_tensor_numel(x));
            const float *wv = ct_ops_autocast(g, weight->data, ct_tensor_numel(weight));
            if (!xv || !wv) return NULL;
            bool ok = true;
            if (ct_ops_reference(g)) {
                ct_k_conv2d_ref_fwd(&s, xv, wv, bv, y->data);
            } else {
                if (s.c > 0) r = onednn_forward(g, &s, false, relu, xv, wv, bv, y->data);
                ok = r != 0 ? r > 0 : fast_forward(g, &s, xv, wv, bv, y->data);
            }
            if (!ok) return NULL;
            if (relu && r == 0) relu_planes(g, &s, y->data); /* oneDNN's chunks did their own */
        }
    }
    ct_graph_scratch_release(g, mark);
    int32_t n_in = bias ? 3 : 2;
    if (ct_graph_needs_grad(g, n_in, in)) {
        ct_node *node = ct_graph_record(g, relu ? &conv2d_relu_def : &conv2d_def, y, n_in, in);
        if (!node) return NULL;
        ct_ops_note_autocast(g, node);
        memcpy(node->iarg, args, sizeof args);
    }
    return y;
}

ct_tensor *ct_op_conv2d(
    ct_graph *g, ct_tensor *x, ct_tensor *weight, ct_tensor *bias, const ct_conv2d_params *p) {
    return conv2d_apply(g, x, weight, bias, p, false);
}

ct_tensor *ct_op_conv2d_relu(
    ct_graph *g, ct_tensor *x, ct_tensor *weight, ct_tensor *bias, const ct_conv2d_params *p) {
    return conv2d_apply(g, x, weight, bias, p, true);
}

/* ---- conv2d -> ReLU -> 2x2 max pool ---- */

/* The pooling the fused path takes: a 2x2 window, stride 2 (0: the kernel), no padding. */
static bool pool_2x2(const ct_pool2d_params *p) {
    return p && p->kernel[0] == 2 && p->kernel[1] == 2 &&
           (p->stride[0] == 2 || p->stride[0] == 0) && (p->stride[1] == 2 || p->stride[1] == 0) &&
           p->padding[0] == 0 && p->padding[1] == 0;
}

/* The fused op's saved block: the codes (one byte per output), one byte saying whether a copy
 * of x follows, then that copy at the next cache line (keep_offset bytes from the start). */
static size_t keep_offset(const ct_tensor *y) {
    return ((size_t)ct_tensor_numel(y) + 1 + 63) & ~(size_t)63;
}

static void conv2d_relu_maxpool_backward(ct_graph *g, ct_node *n) {
    ct_tensor *x = n->in[0], *w = n->in[1], *bias = n->n_in > 2 ? n->in[2] : NULL;
    ct_k_conv2d_geom s;
    geom_init(&s, x, w, n->iarg);
    bool fresh; /* a new dx is zeroed chunk by chunk by the kernels, not here on one thread */
    float *dx = ct_graph_grad_fresh(g, x, &fresh);
    float *dw = ct_graph_grad(g, w);
    float *db = ct_graph_grad(g, bias);
    if (ct_graph_status(g) != CT_OK || !(dx || dw || db)) return;
    ct_ctx *ctx = ct_graph_ctx(g);
    bool rounded = ct_ops_ran_autocast(n), bf16 = native_bf16(g, rounded, &s);
    int nt = onednn_threads(g, &s);
    size_t bytes;
    ct_graph_mark mark = ct_graph_scratch_mark(g);
    /* the forward's converted x, after the codes (and the byte saying whether it kept one) */
    const uint8_t *code = n->saved;
    const void *keep = code[ct_tensor_numel(n->out)] ? code + keep_offset(n->out) : NULL;
    /* f32 primitives under autocast take rounded copies, as the forward pass did (its kept x
     * is one already) */
    const float *xv = x->data, *wv = w->data, *dy = n->out->grad;
    if (rounded && !bf16) {
        xv = keep ? x->data : ct_ops_operand(g, n, 0);
        wv = ct_ops_operand(g, n, 1);
        dy = ct_ops_round_dy(g, n, n->out->grad, ct_tensor_numel(n->out));
        if (!xv || !wv || !dy) return;
    }
    /* the forward pass took this path only where the backward plans were ready */
    int r = 0;
    if (ct_k_conv2d_pool_onednn_scratch(ctx, &s, bias != NULL, bf16, true, nt, &bytes)) {
        void *scratch = bytes ? ct_graph_alloc(g, bytes) : NULL;
        if (bytes && !scratch) return;
        r = ct_k_conv2d_relu_pool_onednn_bwd(ctx, &s, bias != NULL, bf16, xv, wv, n->out->data,
                                             code, keep, dy, dx, fresh, dw, db, scratch, nt);
    }
    if (r <= 0)
        CT_GRAPH_FAIL(g, CT_ERR_INTERNAL, "conv2d_relu_maxpool: a oneDNN backward call failed");
    ct_graph_scratch_release(g, mark);
}

static const ct_op_def conv2d_relu_maxpool_def = {"conv2d_relu_maxpool",
                                                  conv2d_relu_maxpool_backward};

/* Whether the fused path takes this call, and in which precision: oneDNN's convolution on a
 * layout the pool can read, on bf16 primitives under bf16 autocast where native_bf16 says so,
 * else on f32 ones (under autocast on rounded copies of x, the weight and dy). */
static bool
fused_pool_ok(ct_graph *g, const ct_k_conv2d_geom *s, bool has_bias, bool record, bool *bf16) {
    ct_ctx *ctx = ct_graph_ctx(g);
    *bf16 = native_bf16(g, ct_graph_autocast(g) == CT_BF16, s);
    if (ctx->kernels != CT_KERNELS_FAST || ct_omp_level() != 0 || s->n < 1 || s->c < 1 || s->o < 1)
        return false;
    int nt = onednn_threads(g, s);
    size_t bytes;
    return ct_k_conv2d_pool_onednn_scratch(ctx, s, has_bias, *bf16, false, nt, &bytes) &&
           (!record || ct_k_conv2d_pool_onednn_scratch(ctx, s, has_bias, *bf16, true, nt, &bytes));
}

ct_tensor *ct_op_conv2d_relu_maxpool(ct_graph *g,
                                     ct_tensor *x,
                                     ct_tensor *weight,
                                     ct_tensor *bias,
                                     const ct_conv2d_params *cp,
                                     const ct_pool2d_params *pp) {
    ct_tensor *in[3] = {x, weight, bias};
    if (!pool_2x2(pp)) return ct_op_max_pool2d(g, ct_op_conv2d_relu(g, x, weight, bias, cp), pp);
    if (!ct_ops_begin(g, "conv2d", 2, in)) return NULL;
    ct_conv2d_params defaults = ct_conv2d_default_params();
    if (!cp) cp = &defaults;
    int64_t args[7];
    ct_k_conv2d_geom s;
    if (!conv2d_check(g, x, weight, bias, cp, args, &s)) return NULL;
    int32_t n_in = bias ? 3 : 2;
    bool record = ct_graph_needs_grad(g, n_in, in), bf16;
    if (!fused_pool_ok(g, &s, bias != NULL, record, &bf16))
        return ct_op_max_pool2d(g, ct_op_conv2d_relu(g, x, weight, bias, cp), pp);
    ct_tensor *y = ct_graph_new(g, CT_F32, 4, (int64_t[]){s.n, s.o, s.oh / 2, s.ow / 2});
    if (!y) return NULL;
    ct_ctx *ctx = ct_graph_ctx(g);
    int nt = onednn_threads(g, &s);
    /* kept for the backward pass: the winners, and x as the primitives read it where they
     * convert it (the backward pass then need not convert it again) */
    size_t keep_bytes =
        record ? ct_k_conv2d_pool_onednn_keep_bytes(ctx, &s, bias != NULL, bf16, nt) : 0;
    uint8_t *code = NULL;
    if (record && !(code = ct_graph_alloc(g, keep_offset(y) + keep_bytes))) return NULL;
    void *keep = keep_bytes ? code + keep_offset(y) : NULL;
    if (code) code[ct_tensor_numel(y)] = keep != NULL;
    size_t bytes;
    ct_graph_mark mark = ct_graph_scratch_mark(g);
    /* rounded copies under autocast on f32 primitives (the bf16 ones round as they convert) */
    const float *xv = x->data, *wv = weight->data;
    if (!bf16) {
        xv = ct_ops_autocast(g, x->data, ct_tensor_numel(x));
        wv = ct_ops_autocast(g, weight->data, ct_tensor_numel(weight));
        if (!xv || !wv) return NULL;
    }
    int r = 0;
    if (ct_k_conv2d_pool_onednn_scratch(ctx, &s, bias != NULL, bf16, false, nt, &bytes)) {
        void *scratch = bytes ? ct_graph_alloc(g, bytes) : NULL;
        if (bytes && !scratch) return NULL;
        r = ct_k_conv2d_relu_pool_onednn_fwd(ctx, &s, bf16, xv, wv, bias ? bias->data : NULL,
                                             y->data, code, keep, scratch, nt);
    }
    ct_graph_scratch_release(g, mark);
    if (r < 0) {
        CT_GRAPH_FAIL(g, CT_ERR_INTERNAL, "conv2d_relu_maxpool: a oneDNN forward call failed");
        return NULL;
    }
    if (r == 0) return ct_op_max_pool2d(g, ct_op_conv2d_relu(g, x, weight, bias, cp), pp);
    if (record) {
        ct_node *node = ct_graph_record(g, &conv2d_relu_maxpool_def, y, n_in, in);
        if (!node) return NULL;
        ct_ops_note_autocast(g, node);
        memcpy(node->iarg, args, sizeof args);
        node->saved = code;
    }
    return y;
}
