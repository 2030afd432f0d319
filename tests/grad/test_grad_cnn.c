/*
 * test_grad_cnn.c - finite-difference checks of every backward in conv2d.c (fast and reference
 * paths), pool.c and batch_norm.c.
 */
#include "gradcheck.h"

static ct_ctx *fast_ctx, *ref_ctx;

static float *alloc_filled(int64_t n, uint64_t seed, float lo, float hi) {
    float *x = malloc((size_t)n * sizeof(float));
    gc_fill(x, n, seed, lo, hi);
    return x;
}

static gc_input f32_input(float *data, bool grad, int32_t ndim, const int64_t *shape) {
    gc_input in;
    memset(&in, 0, sizeof in);
    in.dtype = CT_F32;
    in.ndim = ndim;
    for (int32_t i = 0; i < ndim; i++)
        in.shape[i] = shape[i];
    in.data = data;
    in.grad = grad;
    return in;
}

/* ---- conv2d ---- */

typedef struct conv_cfg {
    const char *name;
    int64_t n, c, h, w, o, kh, kw;
    ct_conv2d_params p;
    bool bias;
} conv_cfg;

static ct_tensor *f_conv(ct_graph *g, ct_tensor **in, void *user) {
    const conv_cfg *cfg = user;
    return ct_op_conv2d(g, in[0], in[1], cfg->bias ? in[2] : NULL, &cfg->p);
}

static conv_cfg make_cfg(const char *name,
                         int64_t n,
                         int64_t c,
                         int64_t h,
                         int64_t w,
                         int64_t o,
                         int64_t kh,
                         int64_t kw,
                         int64_t stride,
                         int64_t pad,
                         int64_t dil,
                         int64_t groups,
                         bool bias) {
    conv_cfg cfg = {name, n, c, h, w, o, kh, kw, ct_conv2d_default_params(), bias};
    cfg.p.stride[0] = cfg.p.stride[1] = stride;
    cfg.p.padding[0] = cfg.p.padding[1] = pad;
    cfg.p.dilation[0] = cfg.p.dilation[1] = dil;
    cfg.p.groups = groups;
    return cfg;
}

static void check_conv(ct_ctx *ctx, conv_cfg *cfg) {
    int64_t xs[4] = {cfg->n, cfg->c, cfg->h, cfg->w};
    int64_t ws[4] = {cfg->o, cfg->c / cfg->p.groups, cfg->kh, cfg->kw};
    float *x = alloc_filled(xs[0] * xs[1] * xs[2] * xs[3], 21, -1.0f, 1.0f);
    float *w = alloc_filled(ws[0] * ws[1] * ws[2] * ws[3], 22, -0.5f, 0.5f);
    float *b = alloc_filled(cfg->o, 23, -0.5f, 0.5f);
    gc_input ins[3] = {f32_input(x, true, 4, xs), f32_input(w, true, 4, ws),
                       f32_input(b, true, 1, &cfg->o)};
    gc_check(cfg->name, ctx, cfg->bias ? 3 : 2, ins, f_conv, cfg, NULL);
    free(x);
    free(w);
    free(b);
}

static void conv2d_should_have_correct_gradients(void) {
    conv_cfg cfgs[] = {
        make_cfg("conv 3x3", 2, 3, 6, 5, 4, 3, 3, 1, 0, 1, 1, true),
        make_cfg("conv stride 2 pad 1", 2, 3, 7, 6, 4, 3, 3, 2, 1, 1, 1, true),
        make_cfg("conv dilation 2 pad 2", 1, 2, 7, 7, 3, 3, 3, 1, 2, 2, 1, true),
        make_cfg("conv groups 2 no bias", 2, 4, 5, 6, 6, 3, 2, 1, 1, 1, 2, false),
        make_cfg("conv depthwise stride 2", 2, 3, 6, 6, 3, 3, 3, 2, 1, 1, 3, true),
    };
    /* mixed per-axis parameters */
    conv_cfg mixed = make_cfg("conv mixed axes", 2, 2, 8, 7, 2, 2, 3, 1, 0, 1, 1, true);
    mixed.p.stride[0] = 2;
    mixed.p.padding[1] = 1;
    mixed.p.dilation[1] = 2;
    for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++) {
        check_conv(fast_ctx, &cfgs[i]);
        check_conv(ref_ctx, &cfgs[i]);
    }
    check_conv(fast_ctx, &mixed);
    check_conv(ref_ctx, &mixed);
}

/* ---- pooling ---- */

static ct_tensor *f_max_pool(ct_graph *g, ct_tensor **in, void *user) {
    return ct_op_max_pool2d(g, in[0], user);
}

static ct_tensor *f_avg_pool(ct_graph *g, ct_tensor **in, void *user) {
    return ct_op_avg_pool2d(g, in[0], user);
}

static ct_tensor *f_global_avg_pool(ct_graph *g, ct_tensor **in, void *user) {
    (void)user;
    return ct_op_global_avg_pool(g, in[0]);
}

/* Distinct values 0.1 apart in a seeded random order, so that no window has a near tie and a
 * step of 2h = 0.02 never changes a window's winner. */
static float *permuted_values(int64_t n, uint64_t seed) {
    float *x = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        x[i] = 0.1f * (float)(i - n / 2);
    ct_rng r = ct_rng_init(seed, 9);
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)ct_rng_below(&r, (uint64_t)(i + 1));
        float t = x[i];
        x[i] = x[j];
        x[j] = t;
    }
    return x;
}

static void pools_should_have_correct_gradients(void) {
    int64_t xs[4] = {2, 3, 7, 6};
    int64_t n = 2 * 3 * 7 * 6;
    float *x = permuted_values(n, 31);
    gc_input in = f32_input(x, true, 4, xs);
    ct_pool2d_params p_plain = {{2, 2}, {0, 0}, {0, 0}};
    ct_pool2d_params p_overlap = {{3, 3}, {2, 1}, {1, 1}};
    ct_pool2d_params p_rect = {{3, 2}, {1, 2}, {1, 1}};
    gc_opts o = gc_default_opts();
    o.max_points = 256; /* every element */
    gc_check("max_pool 2x2", fast_ctx, 1, &in, f_max_pool, &p_plain, &o);
    gc_check("max_pool 3x3 s(2,1) p1", fast_ctx, 1, &in, f_max_pool, &p_overlap, &o);
    gc_check("max_pool 3x2 s(1,2) p1", fast_ctx, 1, &in, f_max_pool, &p_rect, &o);
    gc_check("avg_pool 2x2", fast_ctx, 1, &in, f_avg_pool, &p_plain, &o);
    gc_check("avg_pool 3x3 s(2,1) p1", fast_ctx, 1, &in, f_avg_pool, &p_overlap, &o);
    gc_check("avg_pool 3x2 s(1,2) p1", fast_ctx, 1, &in, f_avg_pool, &p_rect, &o);
    gc_check("global_avg_pool", fast_ctx, 1, &in, f_global_avg_pool, NULL, &o);
    free(x);
}

/* ---- batch norm ---- */

typedef struct bn_cfg {
    bool affine, running;
} bn_cfg;

/* in = {x, weight, bias, running_mean, running_var} */
static ct_tensor *f_batch_norm(ct_graph *g, ct_tensor **in, void *user) {
    const bn_cfg *cfg = user;
    return ct_op_batch_norm(g, in[0], cfg->affine ? in[1] : NULL, cfg->affine ? in[2] : NULL,
                            cfg->running ? in[3] : NULL, cfg->running ? in[4] : NULL, NULL, 0.1f,
                            1e-5f);
}

static void
check_batch_norm(const char *name, int32_t ndim, const int64_t *xs, bn_cfg cfg, bool training) {
    int64_t nx = 1, c = xs[1];
    for (int32_t i = 0; i < ndim; i++)
        nx *= xs[i];
    float *x = alloc_filled(nx, 41, -1.0f, 1.0f);
    float *w = alloc_filled(c, 42, 0.5f, 1.5f);
    float *b = alloc_filled(c, 43, -0.5f, 0.5f);
    float *rm = alloc_filled(c, 44, -0.2f, 0.2f);
    float *rv = alloc_filled(c, 45, 0.5f, 1.5f);
    gc_input ins[5] = {f32_input(x, true, ndim, xs), f32_input(w, cfg.affine, 1, &c),
                       f32_input(b, cfg.affine, 1, &c), f32_input(rm, false, 1, &c),
                       f32_input(rv, false, 1, &c)};
    gc_opts o = gc_default_opts();
    o.training = training;
    o.eps = 1e-2f;
    gc_check(name, fast_ctx, 5, ins, f_batch_norm, &cfg, &o);
    free(x);
    free(w);
    free(b);
    free(rm);
    free(rv);
}

static void batch_norm_should_have_correct_gradients(void) {
    int64_t s2[2] = {6, 3}, s4[4] = {3, 2, 3, 2};
    check_batch_norm("bn [N,C] affine", 2, s2, (bn_cfg){true, true}, true);
    check_batch_norm("bn [N,C] plain", 2, s2, (bn_cfg){false, false}, true);
    check_batch_norm("bn [N,C,H,W] affine", 4, s4, (bn_cfg){true, true}, true);
    check_batch_norm("bn [N,C,H,W] plain", 4, s4, (bn_cfg){false, true}, true);
    /* evaluation: running statistics normalise (a per-channel affine map) */
    check_batch_norm("bn [N,C,H,W] eval", 4, s4, (bn_cfg){true, true}, false);
    check_batch_norm("bn [N,C] eval", 2, s2, (bn_cfg){false, true}, false);
    /* evaluation without running statistics: batch statistics */
    check_batch_norm("bn [N,C,H,W] eval no running", 4, s4, (bn_cfg){true, false}, false);
}

int main(void) {
    ct_ctx_params p = ct_ctx_default_params();
    p.n_threads = 2;
    if (ct_ctx_create(&p, &fast_ctx) != CT_OK) return 1;
    p.kernels = CT_KERNELS_REFERENCE;
    if (ct_ctx_create(&p, &ref_ctx) != CT_OK) return 1;
    CT_RUN(conv2d_should_have_correct_gradients);
    CT_RUN(pools_should_have_correct_gradients);
    CT_RUN(batch_norm_should_have_correct_gradients);
    ct_ctx_destroy(fast_ctx);
    ct_ctx_destroy(ref_ctx);
    return ct_test_finish();
}
