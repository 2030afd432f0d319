/*
 * pool.c - 2-D max and average pooling and global average pooling (NCHW), forward and backward,
 * with PyTorch's semantics: F.max_pool2d, F.avg_pool2d (floor mode, count_include_pad=True, no
 * dilation) and F.adaptive_avg_pool2d(x, 1).flatten(1).
 *
 * One implementation each (no BLAS). Every loop is parallel over the (n, c) planes, which are
 * independent in both directions: a thread owns its planes of y and of dx, and sums over a
 * window in a fixed order, so results are bitwise the same for any thread count.
 *
 * Max pooling's backward routes each output's gradient to the element that won the forward
 * (PyTorch's rule: the first maximum in row-major window order, or the last NaN); the winners
 * are saved in the node (arena memory): for the common 2x2 window with stride 2 and no
 * padding one byte each (the place in the window), else their plane offsets.
 *
 * Node: in = {x}; iarg = kernel h,w, stride h,w, padding h,w, 2x2 codes (0/1); saved = max
 * winners [N,C,OH,OW] (uint8 codes or int64 offsets).
 */
#include <math.h>
#include <string.h>

#include "ops/ops_internal.h"

/* Kernel and stride above this are rejected (they would overflow the size arithmetic). */
#define PARAM_MAX ((int64_t)INT32_MAX)

typedef struct pool_geom {
    int64_t n, c, h, w; /* x [N, C, H, W] */
    int64_t oh, ow;     /* y [N, C, OH, OW] */
    int64_t k[2];       /* kernel (h, w) */
    int64_t s[2];       /* stride (h, w), resolved (never 0) */
    int64_t p[2];       /* padding (h, w) */
} pool_geom;

static void geom_init(pool_geom *s, const ct_tensor *x, const int64_t *args) {
    s->n = x->shape[0];
    s->c = x->shape[1];
    s->h = x->shape[2];
    s->w = x->shape[3];
    for (int i = 0; i < 2; i++) {
        s->k[i] = args[i];
        s->s[i] = args[2 + i];
        s->p[i] = args[4 + i];
    }
    s->oh = (s->h + 2 * s->p[0] - s->k[0]) / s->s[0] + 1;
    s->ow = (s->w + 2 * s->p[1] - s->k[1]) / s->s[1] + 1;
}

/* Checks x and the parameters; fills args (kernel, resolved stride, padding) and the geometry. */
static bool pool_check(ct_graph *g,
                       const char *op,
                       const ct_tensor *x,
                       const ct_pool2d_params *p,
                       int64_t *args,
                       pool_geom *s) {
    char sx[200];
    if (!ct_ops_f32(g, op, "x", x)) return false;
    if (!p) {
        CT_GRAPH_FAIL(g, CT_ERR_INVALID_ARG, "%s: the parameters are NULL (a kernel is needed)",
                      op);
        return false;
    }
    if (x->ndim != 4) {
        CT_GRAPH_FAIL(g, CT_ERR_SHAPE, "%s: x must be [N,C,H,W], got %s", op,
                      ct_shape_str(x, sx, sizeof sx));
        return false;
    }
    ct_shape_str(x, sx, sizeof sx);
    for (int i = 0; i < 2; i++) {
        if (p->kernel[i] < 1 || p->kernel[i] > PARAM_MAX || p->stride[i] < 0 ||
            p->stride[i] > PARAM_MAX || p->padding[i] < 0) {
            CT_GRAPH_FAIL(g, CT_ERR_INVALID_ARG,
                          "%s: kernel (%lld,%lld), stride (%lld,%lld), padding (%lld,%lld): "
                          "expected kernel in [1, %lld], stride in [0, %lld] (0 = kernel), "
                          "padding >= 0",
                          op, (long long)p->kernel[0], (long long)p->kernel[1],
                          (long long)p->stride[0], (long long)p->stride[1],
                          (long long)p->padding[0], (long long)p->padding[1], (long long)PARAM_MAX,
                          (long long)PARAM_MAX);
            return false;
        }
    }
    for (int i = 0; i < 2; i++) {
        if (p->padding[i] > p->kernel[i] / 2) {
            CT_GRAPH_FAIL(g, CT_ERR_INVALID_ARG,
                          "%s: padding (%lld,%lld) must be at most half the kernel (%lld,%lld), "
                          "as in PyTorch (pad should be at most half of effective kernel size)",
                          op, (long long)p->padding[0], (long long)p->padding[1],
                          (long long)p->kernel[0], (long long)p->kernel[1]);
            return false;
        }
    }
    for (int i = 0; i < 2; i++) {
        int64_t dim = x->shape[2 + i];
        /* padding <= kernel/2 <= INT32_MAX, so only a dim near INT64_MAX (possible next to a
         * zero dim) can overflow */
        if (dim > INT64_MAX - 2 * p->padding[i]) {
            CT_GRAPH_FAIL(g, CT_ERR_SHAPE, "%s: x %s is too large to pad", op, sx);
            return false;
        }
        if (dim + 2 * p->padding[i] < p->kernel[i]) {
            CT_GRAPH_FAIL(g, CT_ERR_SHAPE,
                          "%s: x %s padded by (%lld,%lld) is smaller than the kernel (%lld,%lld): "
                          "the output would be empty",
                          op, sx, (long long)p->padding[0], (long long)p->padding[1],
                          (long long)p->kernel[0], (long long)p->kernel[1]);
            return false;
        }
    }
    for (int i = 0; i < 2; i++) {
        args[i] = p->kernel[i];
        args[2 + i] = p->stride[i] ? p->stride[i] : p->kernel[i];
        args[4 + i] = p->padding[i];
    }
    geom_init(s, x, args);
    return true;
}

/* ---- max pooling ---- */

/* The common window: 2x2, stride 2, no padding (every window inside the plane). */
static bool is_2x2(const pool_geom *s) {
    return s->k[0] == 2 && s->k[1] == 2 && s->s[0] == 2 && s->s[1] == 2 && s->p[0] == 0 &&
           s->p[1] == 0 && s->oh * 2 <= s->h && s->ow * 2 <= s->w;
}

/* Outputs per chunk of the 2x2 path: the outputs of a plane are made in chunks of this many
 * along each row, through small local arrays of a fixed size, so that the loop over a chunk
 * has a constant trip count and vectorises whole (a small CNN's rows, 14 or 7 outputs, are
 * shorter than a vector loop's minimum). A chunk reads and writes whole: past the end of its
 * row it reads the next row and writes outputs of the next row that are made again after it,
 * by the same thread; only the end of the plane is copied element by element. */
#define PW 16

/* The 2x2 windows of the row pair at a[0..2 PW), b[0..2 PW) into yo, each winner as a code
 * in ko: its row-major place in the window, 0..3. The same candidates in the same order and
 * the same rule as the general loop (a tie to the first, a NaN winning and the last NaN kept,
 * as PyTorch's CPU kernel), as selects rather than branches: random data would mispredict half
 * of them. */
static inline void max_chunk_2x2(const float *a, const float *b, float *yo, int32_t *ko) {
    for (int j = 0; j < PW; j++) {
        float v = a[2 * j], v1 = a[2 * j + 1], v2 = b[2 * j], v3 = b[2 * j + 1];
        int32_t k = 0;
        bool t = (v1 > v) | isnan(v1);
        v = t ? v1 : v;
        k = t ? 1 : k;
        t = (v2 > v) | isnan(v2);
        v = t ? v2 : v;
        k = t ? 2 : k;
        t = (v3 > v) | isnan(v3);
        yo[j] = t ? v3 : v;
        ko[j] = t ? 3 : k;
    }
}

/* The 2x2 window over one plane xp [H, W] into y [OH, OW] and the winners' codes (or none). */
CT_HOT static void max_plane_2x2(const pool_geom *s, const float *xp, float *yp, uint8_t *code) {
    const int64_t w = s->w, ow_n = s->ow, lo = s->oh * ow_n;
    const float *x_end = xp + s->h * w;
    float a[2 * PW], b[2 * PW], yo[PW];
    int32_t ko[PW]; /* as wide as the floats: the chunk's loop vectorises at their width */
    for (int64_t oh = 0; oh < s->oh; oh++) {
        const float *r0 = xp + 2 * oh * w, *r1 = r0 + w;
        for (int64_t o0 = 0; o0 < ow_n; o0 += PW) {
            const float *p0 = r0 + 2 * o0, *p1 = r1 + 2 * o0;
            int64_t o = oh * ow_n + o0;
            if (p1 + 2 * PW <= x_end) {
                memcpy(a, p0, sizeof a);
                memcpy(b, p1, sizeof b);
            } else {
                for (int64_t i = 0; i < 2 * PW; i++) {
                    a[i] = p0 + i < x_end ? p0[i] : 0.0f;
                    b[i] = p1 + i < x_end ? p1[i] : 0.0f;
                }
            }
            max_chunk_2x2(a, b, yo, ko);
            int64_t m = ow_n - o0 < PW ? ow_n - o0 : PW;
            if (o + PW <= lo) { /* past the row: outputs made again by the next row */
                memcpy(yp + o, yo, sizeof yo);
                if (code)
                    for (int j = 0; j < PW; j++)
                        code[o + j] = (uint8_t)ko[j];
            } else {
                for (int64_t j = 0; j < m; j++) {
                    yp[o + j] = yo[j];
                    if (code) code[o + j] = (uint8_t)ko[j];
                }
            }
        }
    }
}

/* y [OH, OW] and the winners' offsets idx [OH, OW] (or NULL) from one plane xp [H, W], any
 * window. With padding <= kernel/2 every window holds at least one element of the plane. */
CT_HOT static void max_plane(const pool_geom *s, const float *xp, float *yp, int64_t *idx) {
    for (int64_t oh = 0; oh < s->oh; oh++) {
        int64_t h0 = oh * s->s[0] - s->p[0], h1 = h0 + s->k[0];
        if (h0 < 0) h0 = 0;
        if (h1 > s->h) h1 = s->h;
        for (int64_t ow = 0; ow < s->ow; ow++) {
            int64_t w0 = ow * s->s[1] - s->p[1], w1 = w0 + s->k[1];
            if (w0 < 0) w0 = 0;
            if (w1 > s->w) w1 = s->w;
            float m = -INFINITY;
            int64_t mi = h0 * s->w + w0;
            for (int64_t ih = h0; ih < h1; ih++) {
                for (int64_t iw = w0; iw < w1; iw++) {
                    float v = xp[ih * s->w + iw];
                    if (v > m || isnan(v)) {
                        m = v;
                        mi = ih * s->w + iw;
                    }
                }
            }
            yp[oh * s->ow + ow] = m;
            if (idx) idx[oh * s->ow + ow] = mi;
        }
    }
}

/* dx [H, W] += dy [OH, OW] at the 2x2 winners the codes name. */
static void
max_plane_2x2_backward(const pool_geom *s, const float *dyp, const uint8_t *code, float *dxp) {
    const int64_t w = s->w;
    for (int64_t oh = 0; oh < s->oh; oh++)
        for (int64_t ow = 0; ow < s->ow; ow++) {
            int64_t i = oh * s->ow + ow, k = code[i];
            dxp[2 * oh * w + 2 * ow + (k & 1) + (k >> 1) * w] += dyp[i];
        }
}

CT_HOT static void max_pool2d_backward(ct_graph *g, ct_node *n) {
    ct_tensor *x = n->in[0];
    float *dx = ct_graph_grad(g, x);
    if (!dx) return;
    pool_geom s;
    geom_init(&s, x, n->iarg);
    const float *dy = n->out->grad;
    int64_t planes = s.n * s.c, lo = s.oh * s.ow, li = s.h * s.w;
    int nt = ct_ops_threads(g, planes, lo);
    if (n->iarg[6]) { /* the 2x2 window's codes */
        const uint8_t *code = n->saved;
        CT_OMP_FOR(nt)
        for (int64_t pl = 0; pl < planes; pl++)
            max_plane_2x2_backward(&s, dy + pl * lo, code + pl * lo, dx + pl * li);
        return;
    }
    const int64_t *idx = n->saved;
    CT_OMP_FOR(nt)
    for (int64_t pl = 0; pl < planes; pl++) {
        float *dxp = dx + pl * li;
        for (int64_t i = 0; i < lo; i++)
            dxp[idx[pl * lo + i]] += dy[pl * lo + i];
    }
}

static const ct_op_def max_pool2d_def = {"max_pool2d", max_pool2d_backward};

CT_HOT ct_tensor *ct_op_max_pool2d(ct_graph *g, ct_tensor *x, const ct_pool2d_params *p) {
    if (!ct_ops_begin(g, "max_pool2d", 1, &x)) return NULL;
    int64_t args[6];
    pool_geom s;
    if (!pool_check(g, "max_pool2d", x, p, args, &s)) return NULL;
    ct_tensor *y = ct_graph_new(g, CT_F32, 4, (int64_t[]){s.n, s.c, s.oh, s.ow});
    if (!y) return NULL;
    bool record = ct_graph_needs_grad(g, 1, &x), fast = is_2x2(&s);
    int64_t planes = s.n * s.c, lo = s.oh * s.ow, li = s.h * s.w;
    void *saved = NULL; /* the winners: codes (2x2) or plane offsets */
    if (record) {
        saved = ct_graph_alloc(g, (size_t)ct_tensor_numel(y) * (fast ? 1 : sizeof(int64_t)));
        if (!saved) return NULL;
    }
    const float *xv = x->data;
    float *yv = y->data;
    int nt = ct_ops_threads(g, planes, lo * s.k[0] * s.k[1]);
    if (fast) {
        uint8_t *code = saved;
        CT_OMP_FOR(nt)
        for (int64_t pl = 0; pl < planes; pl++)
            max_plane_2x2(&s, xv + pl * li, yv + pl * lo, code ? code + pl * lo : NULL);
    } else {
        int64_t *idx = saved;
        CT_OMP_FOR(nt)
        for (int64_t pl = 0; pl < planes; pl++)
            max_plane(&s, xv + pl * li, yv + pl * lo, idx ? idx + pl * lo : NULL);
    }
    if (record) {
        ct_node *node = ct_graph_record(g, &max_pool2d_def, y, 1, &x);
        if (!node) return NULL;
        memcpy(node->iarg, args, sizeof args);
        node->iarg[6] = fast;
        node->saved = saved;
    }
    return y;
}

/* ---- average pooling ---- */

/* Window [h0, h1) x [w0, w1) of output (oh, ow), clipped to the plane, and its divisor: the
 * window's size within the padded plane (count_include_pad=True). */
static int64_t avg_window(const pool_geom *s,
                          int64_t oh,
                          int64_t ow,
                          int64_t *h0,
                          int64_t *h1,
                          int64_t *w0,
                          int64_t *w1) {
    int64_t hs = oh * s->s[0] - s->p[0], ws = ow * s->s[1] - s->p[1];
    int64_t he = hs + s->k[0], we = ws + s->k[1];
    if (he > s->h + s->p[0]) he = s->h + s->p[0];
    if (we > s->w + s->p[1]) we = s->w + s->p[1];
    int64_t divisor = (he - hs) * (we - ws);
    *h0 = hs < 0 ? 0 : hs;
    *w0 = ws < 0 ? 0 : ws;
    *h1 = he > s->h ? s->h : he;
    *w1 = we > s->w ? s->w : we;
    return divisor;
}

CT_HOT static void avg_pool2d_backward(ct_graph *g, ct_node *n) {
    ct_tensor *x = n->in[0];
    float *dx = ct_graph_grad(g, x);
    if (!dx) return;
    pool_geom s;
    geom_init(&s, x, n->iarg);
    const float *dy = n->out->grad;
    int64_t planes = s.n * s.c, lo = s.oh * s.ow, li = s.h * s.w;
    int nt = ct_ops_threads(g, planes, lo * s.k[0] * s.k[1]);
    CT_OMP_FOR(nt)
    for (int64_t pl = 0; pl < planes; pl++) {
        float *dxp = dx + pl * li;
        const float *dyp = dy + pl * lo;
        for (int64_t oh = 0; oh < s.oh; oh++) {
            for (int64_t ow = 0; ow < s.ow; ow++) {
                int64_t h0, h1, w0, w1;
                int64_t divisor = avg_window(&s, oh, ow, &h0, &h1, &w0, &w1);
                float d = dyp[oh * s.ow + ow] / (float)divisor;
                for (int64_t ih = h0; ih < h1; ih++)
                    for (int64_t iw = w0; iw < w1; iw++)
                        dxp[ih * s.w + iw] += d;
            }
        }
    }
}

static const ct_op_def avg_pool2d_def = {"avg_pool2d", avg_pool2d_backward};

CT_HOT ct_tensor *ct_op_avg_pool2d(ct_graph *g, ct_tensor *x, const ct_pool2d_params *p) {
    if (!ct_ops_begin(g, "avg_pool2d", 1, &x)) return NULL;
    int64_t args[6];
    pool_geom s;
    if (!pool_check(g, "avg_pool2d", x, p, args, &s)) return NULL;
    ct_tensor *y = ct_graph_new(g, CT_F32, 4, (int64_t[]){s.n, s.c, s.oh, s.ow});
    if (!y) return NULL;
    int64_t planes = s.n * s.c, lo = s.oh * s.ow, li = s.h * s.w;
    const float *xv = x->data;
    float *yv = y->data;
    int nt = ct_ops_threads(g, planes, lo * s.k[0] * s.k[1]);
    CT_OMP_FOR(nt)
    for (int64_t pl = 0; pl < planes; pl++) {
        const float *xp = xv + pl * li;
        float *yp = yv + pl * lo;
        for (int64_t oh = 0; oh < s.oh; oh++) {
            for (int64_t ow = 0; ow < s.ow; ow++) {
                int64_t h0, h1, w0, w1;
                int64_t divisor = avg_window(&s, oh, ow, &h0, &h1, &w0, &w1);
                double acc = 0.0;
                for (int64_t ih = h0; ih < h1; ih++)
                    for (int64_t iw = w0; iw < w1; iw++)
                        acc += (double)xp[ih * s.w + iw];
                yp[oh * s.ow + ow] = (float)(acc / (double)divisor);
            }
        }
    }
    if (ct_graph_needs_grad(g, 1, &x)) {
        ct_node *node = ct_graph_record(g, &avg_pool2d_def, y, 1, &x);
        if (!node) return NULL;
        memcpy(node->iarg, args, sizeof args);
    }
    return y;
}

/* ---- global average pooling ---- */

CT_HOT static void global_avg_pool_backward(ct_graph *g, ct_node *n) {
    ct_tensor *x = n->in[0];
    float *dx = ct_graph_grad(g, x);
    if (!dx) return;
    int64_t planes = x->shape[0] * x->shape[1];
    if (planes == 0) return;
    int64_t hw = x->shape[2] * x->shape[3]; /* bounded by numel(x) once planes > 0 */
    const float *dy = n->out->grad;
    int nt = ct_ops_threads(g, planes, hw);
    CT_OMP_FOR(nt)
    for (int64_t pl = 0; pl < planes; pl++) {
        float d = dy[pl] / (float)hw;
        float *dxp = dx + pl * hw;
        for (int64_t i = 0; i < hw; i++)
            dxp[i] += d;
    }
}

static const ct_op_def global_avg_pool_def = {"global_avg_pool", global_avg_pool_backward};

CT_HOT ct_tensor *ct_op_global_avg_pool(ct_graph *g, ct_tensor *x) {
    if (!ct_ops_begin(g, "global_avg_pool", 1, &x)) return NULL;
    if (!ct_ops_f32(g, "global_avg_pool", "x", x)) return NULL;
    char sx[200];
    if (x->ndim != 4 || x->shape[2] == 0 || x->shape[3] == 0) {
        CT_GRAPH_FAIL(g, CT_ERR_SHAPE, "global_avg_pool: x must be [N,C,H,W] with H, W > 0, got %s",
                      ct_shape_str(x, sx, sizeof sx));
        return NULL;
    }
    ct_tensor *y = ct_graph_new(g, CT_F32, 2, x->shape);
    if (!y) return NULL;
    int64_t planes = x->shape[0] * x->shape[1];
    if (planes > 0) {
        int64_t hw = x->shape[2] * x->shape[3];
        const float *xv = x->data;
        float *yv = y->data;
        int nt = ct_ops_threads(g, planes, hw);
        CT_OMP_FOR(nt)
        for (int64_t pl = 0; pl < planes; pl++)
            yv[pl] = (float)(ct_ops_sum_f64(xv + pl * hw, hw, 1) / (double)hw);
    }
    if (ct_graph_needs_grad(g, 1, &x)) {
        ct_node *node = ct_graph_record(g, &global_avg_pool_def, y, 1, &x);
        if (!node) return NULL;
    }
    return y;
}
