/*
 * test_ops_cnn.c - conv2d, max/avg/global pooling and batch norm: the im2col + BLAS conv2d
 * against its naive reference twin (outputs and every gradient), bitwise equality for 1 and 2
 * threads, hand-computed values (pool windows, padding, ties, batch norm statistics and running
 * buffer updates), and the error cases with their messages.
 */
#include <string.h>

#include "ctrain/ctrain.h"
#include "harness.h"
#include "test_alloc.h"

static ct_ctx *make_ctx(int64_t threads, int reference) {
    ct_ctx_params p = ct_ctx_default_params();
    p.n_threads = threads;
    p.kernels = (ct_kernels)reference;
    ct_ctx *ctx = NULL;
    if (ct_ctx_create(&p, &ctx) != CT_OK) abort();
    return ctx;
}

static ct_graph *make_graph(ct_ctx *ctx) {
    ct_graph *g = NULL;
    if (ct_graph_create(ctx, NULL, &g) != CT_OK) abort();
    return g;
}

static float *rand_array(int64_t n, uint64_t seed, float lo, float hi) {
    float *x = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    ct_rng r = ct_rng_init(seed, 3);
    ct_rng_uniform(&r, x, n);
    for (int64_t i = 0; i < n; i++)
        x[i] = lo + (hi - lo) * x[i];
    return x;
}

static float *copy_array(const float *src, int64_t n) {
    float *x = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    if (src)
        memcpy(x, src, (size_t)n * sizeof(float));
    else
        memset(x, 0, (size_t)(n > 0 ? n : 1) * sizeof(float));
    return x;
}

static ct_tensor *leaf(ct_graph *g, float *data, int32_t ndim, const int64_t *shape) {
    ct_tensor *t = ct_graph_wrap(g, data, CT_F32, ndim, shape);
    if (t) t->flags |= CT_TENSOR_REQUIRES_GRAD;
    return t;
}

/* ---- conv2d: fast path against the reference twin ---- */

typedef struct conv_case {
    const char *name;
    int64_t n, c, h, w, o, kh, kw;
    int64_t stride[2], padding[2], dilation[2], groups;
    bool bias;
} conv_case;

typedef struct conv_run {
    float *y, *dx, *dw, *db; /* malloc'd copies */
    int64_t ny, nx, nw, nb;
} conv_run;

static void conv_run_free(conv_run *r) {
    free(r->y);
    free(r->dx);
    free(r->dw);
    free(r->db);
}

/* Forward and backward (seeded with a fixed random dy) of one case, with x[nan_at] a NaN
 * (none when -1); 1 on success. */
static int run_conv_nan(ct_ctx *ctx, const conv_case *cc, int64_t nan_at, conv_run *r) {
    memset(r, 0, sizeof *r);
    int64_t xs[4] = {cc->n, cc->c, cc->h, cc->w};
    int64_t ws[4] = {cc->o, cc->c / cc->groups, cc->kh, cc->kw};
    r->nx = cc->n * cc->c * cc->h * cc->w;
    r->nw = ws[0] * ws[1] * ws[2] * ws[3];
    r->nb = cc->o;
    float *x = rand_array(r->nx, 1, -1.0f, 1.0f);
    float *w = rand_array(r->nw, 2, -0.5f, 0.5f);
    float *b = rand_array(r->nb, 3, -0.5f, 0.5f);
    if (nan_at >= 0 && nan_at < r->nx) x[nan_at] = NAN;
    ct_graph *g = make_graph(ctx);
    ct_conv2d_params p = ct_conv2d_default_params();
    for (int i = 0; i < 2; i++) {
        p.stride[i] = cc->stride[i];
        p.padding[i] = cc->padding[i];
        p.dilation[i] = cc->dilation[i];
    }
    p.groups = cc->groups;
    ct_tensor *tx = leaf(g, x, 4, xs), *tw = leaf(g, w, 4, ws);
    ct_tensor *tb = cc->bias ? leaf(g, b, 1, &cc->o) : NULL;
    ct_tensor *y = ct_op_conv2d(g, tx, tw, tb, &p);
    int ok = 0;
    if (y) {
        r->ny = ct_tensor_numel(y);
        float *seed = rand_array(r->ny, 4, -1.0f, 1.0f);
        if (ct_graph_backward_seed(g, y, seed) == CT_OK) {
            r->y = copy_array(y->data, r->ny);
            r->dx = copy_array(tx->grad, r->nx);
            r->dw = copy_array(tw->grad, r->nw);
            r->db = cc->bias ? copy_array(tb->grad, r->nb) : NULL;
            ok = 1;
        }
        free(seed);
    }
    if (!ok) fprintf(stderr, "%s: %s\n", cc->name, ct_last_error(ctx));
    ct_graph_destroy(g);
    free(x);
    free(w);
    free(b);
    return ok;
}

static int run_conv(ct_ctx *ctx, const conv_case *cc, conv_run *r) {
    return run_conv_nan(ctx, cc, -1, r);
}

static const conv_case conv_cases[] = {
    {"3x3 pad 1", 2, 3, 8, 7, 4, 3, 3, {1, 1}, {1, 1}, {1, 1}, 1, true},
    {"stride 2, pad (1,2), 3x2", 3, 2, 9, 8, 5, 3, 2, {2, 2}, {1, 2}, {1, 1}, 1, true},
    {"stride (2,1), dilation 2", 2, 3, 11, 10, 4, 3, 3, {2, 1}, {2, 1}, {2, 2}, 1, true},
    {"groups 2, no bias", 2, 4, 7, 6, 6, 3, 3, {1, 2}, {1, 0}, {1, 1}, 2, false},
    {"depthwise", 2, 4, 6, 6, 4, 3, 3, {1, 1}, {1, 1}, {1, 1}, 4, true},
    {"1x1", 3, 5, 4, 5, 3, 1, 1, {1, 1}, {0, 0}, {1, 1}, 1, true},
    {"kernel = padded input", 2, 2, 3, 3, 3, 5, 5, {1, 1}, {1, 1}, {1, 1}, 1, true},
    {"several chunks", 16, 16, 32, 32, 8, 3, 3, {1, 1}, {1, 1}, {1, 1}, 1, true},
    {"several chunks, groups 4", 30, 16, 24, 24, 8, 3, 3, {1, 1}, {1, 1}, {1, 1}, 4, true},
    {"no input channels", 2, 0, 5, 5, 3, 3, 3, {1, 1}, {0, 0}, {1, 1}, 1, true},
    {"empty batch", 0, 3, 5, 5, 2, 3, 3, {1, 1}, {1, 1}, {1, 1}, 1, true},
};

static void conv2d_should_match_reference_twin(void) {
    ct_ctx *fast = make_ctx(2, 0), *ref = make_ctx(1, 1);
    for (size_t i = 0; i < sizeof conv_cases / sizeof conv_cases[0]; i++) {
        const conv_case *cc = &conv_cases[i];
        conv_run a, b;
        int ok_a = run_conv(fast, cc, &a), ok_b = run_conv(ref, cc, &b);
        CT_CHECK_MSG(ok_a && ok_b, "%s", cc->name);
        if (ok_a && ok_b) {
            CT_CHECK_INT(a.ny, b.ny);
            CT_CHECK_ARRAYS(cc->name, a.y, b.y, a.ny, 1e-4, 1e-4);
            CT_CHECK_ARRAYS(cc->name, a.dx, b.dx, a.nx, 1e-4, 1e-4);
            CT_CHECK_ARRAYS(cc->name, a.dw, b.dw, a.nw, 1e-4, 1e-4);
            if (cc->bias) CT_CHECK_ARRAYS(cc->name, a.db, b.db, a.nb, 1e-4, 1e-4);
        }
        conv_run_free(&a);
        conv_run_free(&b);
    }
    ct_ctx_destroy(fast);
    ct_ctx_destroy(ref);
}

/* got and ref hold NaN at the same places and agree elsewhere; the first difference is named. */
static void check_same_nans(const char *what, const float *got, const float *ref, int64_t n) {
    int64_t bad = -1, nans = 0;
    for (int64_t i = 0; i < n && bad < 0; i++) {
        nans += isnan(ref[i]) ? 1 : 0;
        if (!isnan(got[i]) != !isnan(ref[i]) ||
            (!isnan(ref[i]) &&
             !(fabs((double)got[i] - (double)ref[i]) <= 1e-4 + 1e-4 * fabs((double)ref[i]))))
            bad = i;
    }
    CT_CHECK_MSG(bad < 0, "%s: index %lld: got %g, reference %g", what, (long long)bad,
                 bad < 0 ? 0.0 : (double)got[bad], bad < 0 ? 0.0 : (double)ref[bad]);
    CT_CHECK_MSG(nans > 0, "%s: the NaN did not reach the output", what);
}

/* A NaN in x reaches the same outputs and gradients through the im2col + BLAS path as through
 * the reference twin (padding contributes zeros, never a NaN). */
static void conv2d_should_match_reference_twin_on_nan(void) {
    ct_ctx *fast = make_ctx(2, 0), *ref = make_ctx(1, 1);
    for (size_t i = 0; i < 5; i++) {
        const conv_case *cc = &conv_cases[i];
        conv_run a, b;
        int64_t at = ((1 * cc->c + 1) * cc->h + 2) * cc->w + 2; /* in some window of each */
        int ok_a = run_conv_nan(fast, cc, at, &a), ok_b = run_conv_nan(ref, cc, at, &b);
        CT_CHECK_MSG(ok_a && ok_b, "%s", cc->name);
        if (ok_a && ok_b) {
            check_same_nans(cc->name, a.y, b.y, a.ny);
            check_same_nans(cc->name, a.dw, b.dw, a.nw);
            if (cc->bias) CT_CHECK_ARRAYS(cc->name, a.db, b.db, a.nb, 1e-4, 1e-4);
            CT_CHECK_ARRAYS(cc->name, a.dx, b.dx, a.nx, 1e-4, 1e-4); /* W and dy only */
        }
        conv_run_free(&a);
        conv_run_free(&b);
    }
    ct_ctx_destroy(fast);
    ct_ctx_destroy(ref);
}

static void conv2d_should_compute_known_values(void) {
    /* x = 1..9 in a 3x3 plane, a 2x2 kernel of ones, bias 0.5: sums of 2x2 windows */
    ct_ctx *fast = make_ctx(1, 0), *ref = make_ctx(1, 1);
    ct_ctx *ctxs[2] = {fast, ref};
    for (int k = 0; k < 2; k++) {
        ct_graph *g = make_graph(ctxs[k]);
        float xv[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9}, wv[4] = {1, 1, 1, 1}, bv[1] = {0.5f};
        ct_tensor *x = ct_graph_wrap(g, xv, CT_F32, 4, (int64_t[]){1, 1, 3, 3});
        ct_tensor *w = ct_graph_wrap(g, wv, CT_F32, 4, (int64_t[]){1, 1, 2, 2});
        ct_tensor *b = ct_graph_wrap(g, bv, CT_F32, 1, (int64_t[]){1});
        ct_tensor *y = ct_op_conv2d(g, x, w, b, NULL);
        CT_CHECK(y != NULL);
        if (y) {
            const float *yv = y->data;
            CT_CHECK_INT(y->shape[2], 2);
            CT_CHECK_INT(y->shape[3], 2);
            CT_CHECK(yv[0] == 12.5f && yv[1] == 16.5f && yv[2] == 24.5f && yv[3] == 28.5f);
        }
        /* stride 2 and padding 1 on the same plane: windows at (-1,-1), (-1,1), (1,-1), (1,1) */
        ct_conv2d_params p = ct_conv2d_default_params();
        p.stride[0] = p.stride[1] = 2;
        p.padding[0] = p.padding[1] = 1;
        y = ct_op_conv2d(g, x, w, NULL, &p);
        CT_CHECK(y != NULL);
        if (y) {
            const float *yv = y->data;
            CT_CHECK(yv[0] == 1.0f && yv[1] == 5.0f && yv[2] == 11.0f && yv[3] == 28.0f);
        }
        ct_graph_destroy(g);
    }
    ct_ctx_destroy(fast);
    ct_ctx_destroy(ref);
}

/* ---- the same bits for 1 and 2 threads ---- */

typedef struct cnn_outputs {
    float *v[12];
    int64_t n[12];
    int count;
} cnn_outputs;

static void keep(cnn_outputs *o, const float *src, int64_t n) {
    o->v[o->count] = copy_array(src, n);
    o->n[o->count] = n;
    o->count++;
}

/* Runs every op forward and backward on one graph and keeps outputs and gradients. */
static void run_all_ops(ct_ctx *ctx, cnn_outputs *out) {
    memset(out, 0, sizeof *out);
    int64_t xs[4] = {20, 16, 24, 24}, ws[4] = {12, 8, 3, 3};
    int64_t nx = 20 * 16 * 24 * 24, nw = 12 * 8 * 9;
    float *x = rand_array(nx, 11, -1.0f, 1.0f), *w = rand_array(nw, 12, -0.3f, 0.3f);
    float *b = rand_array(12, 13, -0.1f, 0.1f), *gamma = rand_array(12, 14, 0.5f, 1.5f);
    float *beta = rand_array(12, 15, -0.5f, 0.5f);
    float rm[12] = {0}, rv[12];
    for (int i = 0; i < 12; i++)
        rv[i] = 1.0f;
    ct_graph *g = make_graph(ctx);
    ct_tensor *tx = leaf(g, x, 4, xs), *tw = leaf(g, w, 4, ws), *tb = leaf(g, b, 1, &ws[0]);
    ct_tensor *tg = leaf(g, gamma, 1, &ws[0]), *tbeta = leaf(g, beta, 1, &ws[0]);
    ct_tensor *trm = ct_graph_wrap(g, rm, CT_F32, 1, &ws[0]);
    ct_tensor *trv = ct_graph_wrap(g, rv, CT_F32, 1, &ws[0]);
    ct_conv2d_params p = ct_conv2d_default_params();
    p.padding[0] = p.padding[1] = 1;
    p.groups = 2;
    ct_tensor *h = ct_op_conv2d(g, tx, tw, tb, &p);
    h = ct_op_batch_norm(g, h, tg, tbeta, trm, trv, NULL, 0.1f, 1e-5f);
    ct_pool2d_params pp = {{3, 3}, {2, 2}, {1, 1}};
    ct_tensor *m = ct_op_max_pool2d(g, h, &pp);
    ct_tensor *a = ct_op_avg_pool2d(g, h, &pp);
    ct_tensor *s = ct_op_add(g, m, ct_op_scale(g, a, 0.5f));
    ct_tensor *gp = ct_op_global_avg_pool(g, s);
    ct_tensor *loss = ct_op_sum_all(g, ct_op_mul(g, gp, gp));
    CT_CHECK(loss != NULL && ct_graph_backward(g, loss) == CT_OK);
    if (loss) {
        keep(out, h->data, ct_tensor_numel(h));
        keep(out, m->data, ct_tensor_numel(m));
        keep(out, a->data, ct_tensor_numel(a));
        keep(out, gp->data, ct_tensor_numel(gp));
        keep(out, tx->grad, nx);
        keep(out, tw->grad, nw);
        keep(out, tb->grad, 12);
        keep(out, tg->grad, 12);
        keep(out, tbeta->grad, 12);
        keep(out, rm, 12);
        keep(out, rv, 12);
    }
    ct_graph_destroy(g);
    free(x);
    free(w);
    free(b);
    free(gamma);
    free(beta);
}

static void cnn_ops_should_give_same_bits_for_any_thread_count(void) {
    ct_ctx *ctx = make_ctx(1, 0);
    cnn_outputs one, two;
    run_all_ops(ctx, &one);
    ct_ctx_set_threads(ctx, 2);
    run_all_ops(ctx, &two);
    CT_CHECK_INT(one.count, 11);
    CT_CHECK_INT(two.count, one.count);
    for (int i = 0; i < one.count && i < two.count; i++) {
        CT_CHECK_INT(one.n[i], two.n[i]);
        CT_CHECK_MSG(memcmp(one.v[i], two.v[i], (size_t)one.n[i] * sizeof(float)) == 0,
                     "result %d differs between 1 and 2 threads", i);
    }
    for (int i = 0; i < one.count; i++)
        free(one.v[i]);
    for (int i = 0; i < two.count; i++)
        free(two.v[i]);
    ct_ctx_destroy(ctx);
}

/* ---- pooling ---- */

static void pools_should_compute_known_windows(void) {
    ct_ctx *ctx = make_ctx(1, 0);
    ct_graph *g = make_graph(ctx);
    float v[16], neg[16];
    for (int i = 0; i < 16; i++) {
        v[i] = (float)i;
        neg[i] = -1.0f - (float)i;
    }
    int64_t s4[4] = {1, 1, 4, 4};
    ct_tensor *x = ct_graph_wrap(g, v, CT_F32, 4, s4);
    ct_tensor *xn = ct_graph_wrap(g, neg, CT_F32, 4, s4);

    /* stride 0 means stride = kernel */
    ct_pool2d_params k2 = {{2, 2}, {0, 0}, {0, 0}};
    ct_tensor *y = ct_op_max_pool2d(g, x, &k2);
    CT_CHECK(y && y->shape[2] == 2 && y->shape[3] == 2);
    if (y) {
        const float *yv = y->data;
        CT_CHECK(yv[0] == 5 && yv[1] == 7 && yv[2] == 13 && yv[3] == 15);
    }
    y = ct_op_avg_pool2d(g, x, &k2);
    if (y) {
        const float *yv = y->data;
        CT_CHECK(yv[0] == 2.5f && yv[1] == 4.5f && yv[2] == 10.5f && yv[3] == 12.5f);
    }
    /* max pooling pads with -inf: with all values negative, padding never wins */
    ct_pool2d_params k3 = {{3, 3}, {2, 2}, {1, 1}};
    y = ct_op_max_pool2d(g, xn, &k3);
    CT_CHECK(y && y->shape[2] == 2 && y->shape[3] == 2);
    if (y) {
        const float *yv = y->data;
        CT_CHECK(yv[0] == -1 && yv[1] == -2 && yv[2] == -5 && yv[3] == -6);
    }
    /* avg pooling counts the zero padding (count_include_pad=True) */
    float ones[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    ct_tensor *x1 = ct_graph_wrap(g, ones, CT_F32, 4, (int64_t[]){1, 1, 3, 3});
    ct_pool2d_params k3s1 = {{3, 3}, {1, 1}, {1, 1}};
    y = ct_op_avg_pool2d(g, x1, &k3s1);
    CT_CHECK(y && y->shape[2] == 3 && y->shape[3] == 3);
    if (y) {
        const float *yv = y->data;
        float expect[9] = {4, 6, 4, 6, 9, 6, 4, 6, 4};
        for (int i = 0; i < 9; i++)
            CT_CHECK_CLOSE(yv[i], expect[i] / 9.0f, 1e-7, 1e-6);
    }
    /* floor mode: a 5x5 plane with kernel 2 gives 2x2; the last row and column are dropped */
    float v25[25];
    for (int i = 0; i < 25; i++)
        v25[i] = (float)i;
    ct_tensor *x5 = ct_graph_wrap(g, v25, CT_F32, 4, (int64_t[]){1, 1, 5, 5});
    y = ct_op_max_pool2d(g, x5, &k2);
    CT_CHECK(y && y->shape[2] == 2 && y->shape[3] == 2);
    if (y) CT_CHECK(((float *)y->data)[3] == 18.0f);
    /* rectangular kernel and stride */
    ct_pool2d_params k12 = {{1, 2}, {1, 2}, {0, 1}};
    y = ct_op_avg_pool2d(g, x, &k12);
    CT_CHECK(y && y->shape[2] == 4 && y->shape[3] == 3);
    if (y) {
        const float *yv = y->data; /* row 0 padded: [pad,0], [1,2], [3,pad] */
        CT_CHECK(yv[0] == 0.0f && yv[1] == 1.5f && yv[2] == 1.5f);
    }
    /* global average pooling */
    float gv[8] = {1, 2, 3, 4, -1, -1, 5, 5};
    ct_tensor *xg = ct_graph_wrap(g, gv, CT_F32, 4, (int64_t[]){2, 1, 2, 2});
    y = ct_op_global_avg_pool(g, xg);
    CT_CHECK(y && y->ndim == 2 && y->shape[0] == 2 && y->shape[1] == 1);
    if (y) CT_CHECK(((float *)y->data)[0] == 2.5f && ((float *)y->data)[1] == 2.0f);
    CT_CHECK_INT(ct_graph_status(g), CT_OK);
    ct_graph_destroy(g);
    ct_ctx_destroy(ctx);
}

static void max_pool2d_should_route_ties_to_the_first_maximum(void) {
    ct_ctx *ctx = make_ctx(1, 0);
    ct_graph *g = make_graph(ctx);
    float v[6] = {1, 1, 1, 1, 1, 1};
    ct_tensor *x = leaf(g, v, 4, (int64_t[]){1, 1, 2, 3});
    /* kernel 2 stride 1: windows at columns 0-1 and 1-2 overlap at column 1 */
    ct_pool2d_params p = {{2, 2}, {1, 1}, {0, 0}};
    ct_tensor *y = ct_op_max_pool2d(g, x, &p);
    CT_CHECK(y != NULL);
    float seed[2] = {1.0f, 10.0f};
    CT_CHECK(y && ct_graph_backward_seed(g, y, seed) == CT_OK);
    if (x->grad) {
        float expect[6] = {1, 10, 0, 0, 0, 0};
        CT_CHECK_ARRAYS("ties", x->grad, expect, 6, 0.0, 0.0);
    }
    /* the 2x2 stride-2 fast path keeps the general rule (PyTorch's CPU kernel's): a tie goes
       to the first of the window in row-major order, and a NaN wins, the last NaN taking the
       gradient */
    float w[8] = {3, 3, -INFINITY, NAN, 3, 1, 2, NAN};
    ct_tensor *x2 = leaf(g, w, 4, (int64_t[]){1, 1, 2, 4});
    ct_pool2d_params k2 = {{2, 2}, {2, 2}, {0, 0}};
    ct_tensor *y2 = ct_op_max_pool2d(g, x2, &k2);
    CT_CHECK(y2 && y2->shape[3] == 2);
    float seed2[2] = {1.0f, 10.0f};
    CT_CHECK(y2 && ct_graph_backward_seed(g, y2, seed2) == CT_OK);
    if (y2) CT_CHECK(((float *)y2->data)[0] == 3.0f && isnan(((float *)y2->data)[1]));
    if (x2->grad) {
        float expect[8] = {1, 0, 0, 0, 0, 0, 0, 10};
        CT_CHECK_ARRAYS("2x2 ties and NaN", x2->grad, expect, 8, 0.0, 0.0);
    }
    ct_graph_destroy(g);
    ct_ctx_destroy(ctx);
}

/* The 2x2 stride-2 path against the rule written out here, on planes of odd sizes (the last
 * row and column dropped; rows of 5 outputs, and of 18, more than one chunk of the fast
 * loop) full of ties, signed zeros, infinities and NaNs, on 2 threads: outputs (with and
 * without gradients) and the routed gradients bit for bit. */
static void max_pool2d_2x2_case(int64_t N, int64_t C, int64_t H, int64_t W) {
    ct_ctx *ctx = make_ctx(2, 0);
    ct_graph *g = make_graph(ctx);
    int64_t OH = H / 2, OW = W / 2, nx = N * C * H * W, ny = N * C * OH * OW;
    float *v = malloc((size_t)nx * sizeof(float)), *dx = calloc((size_t)nx, sizeof(float));
    float *seed = malloc((size_t)ny * sizeof(float));
    const float pick[7] = {-1.0f, 0.0f, -0.0f, 1.0f, 2.0f, INFINITY, NAN};
    ct_rng r = ct_rng_init(11, 0);
    for (int64_t i = 0; i < nx; i++)
        v[i] = pick[ct_rng_below(&r, 7)];
    for (int64_t i = 0; i < ny; i++)
        seed[i] = (float)(i % 13) + 0.5f;
    ct_tensor *x = leaf(g, v, 4, (int64_t[]){N, C, H, W});
    ct_pool2d_params k2 = {{2, 2}, {2, 2}, {0, 0}};
    ct_tensor *y = ct_op_max_pool2d(g, x, &k2);
    /* and without gradients (no winners kept): the same outputs */
    ct_tensor *yn =
        ct_op_max_pool2d(g, ct_graph_wrap(g, v, CT_F32, 4, (int64_t[]){N, C, H, W}), &k2);
    CT_CHECK(y && ct_graph_backward_seed(g, y, seed) == CT_OK);
    CT_CHECK(yn && y && memcmp(yn->data, y->data, (size_t)ny * sizeof(float)) == 0);
    int64_t bad_y = 0, bad_dx = 0;
    for (int64_t pl = 0; pl < N * C; pl++)
        for (int64_t oh = 0; oh < OH; oh++)
            for (int64_t ow = 0; ow < OW; ow++) {
                const float *xp = v + pl * H * W;
                float m = -INFINITY;
                int64_t mi = 2 * oh * W + 2 * ow;
                for (int64_t ih = 2 * oh; ih < 2 * oh + 2; ih++)
                    for (int64_t iw = 2 * ow; iw < 2 * ow + 2; iw++)
                        if (xp[ih * W + iw] > m || isnan(xp[ih * W + iw])) {
                            m = xp[ih * W + iw];
                            mi = ih * W + iw;
                        }
                int64_t o = (pl * OH + oh) * OW + ow;
                float got = y ? ((const float *)y->data)[o] : 0.0f;
                bad_y += memcmp(&got, &m, sizeof m) != 0;
                dx[pl * H * W + mi] += seed[o];
            }
    for (int64_t i = 0; x->grad && i < nx; i++)
        bad_dx += memcmp(&((const float *)x->grad)[i], &dx[i], sizeof dx[i]) != 0;
    CT_CHECK_INT(bad_y, 0);
    CT_CHECK(x->grad != NULL);
    CT_CHECK_INT(bad_dx, 0);
    ct_graph_destroy(g);
    ct_ctx_destroy(ctx);
    free(v);
    free(dx);
    free(seed);
}

static void max_pool2d_2x2_should_follow_the_rule_on_every_window(void) {
    max_pool2d_2x2_case(3, 5, 9, 11);
    max_pool2d_2x2_case(2, 3, 7, 37);
}

/* The general window loop (kernel 3, stride 1, padding 1) follows PyTorch's CPU rule too: a
 * window holding a NaN gives NaN, and its gradient goes to the window's last NaN. */
static void max_pool2d_should_propagate_nan_through_padded_windows(void) {
    ct_ctx *ctx = make_ctx(1, 0);
    ct_graph *g = make_graph(ctx);
    float v[9] = {1, NAN, 2, 3, 4, NAN, 5, 6, 7};
    ct_tensor *x = leaf(g, v, 4, (int64_t[]){1, 1, 3, 3});
    ct_pool2d_params p = {{3, 3}, {1, 1}, {1, 1}};
    ct_tensor *y = ct_op_max_pool2d(g, x, &p);
    CT_CHECK(y && y->shape[2] == 3 && y->shape[3] == 3);
    float seed[9] = {1, 2, 4, 8, 16, 32, 64, 128, 256};
    CT_CHECK(y && ct_graph_backward_seed(g, y, seed) == CT_OK);
    for (int64_t i = 0; y && i < 9; i++) {
        float got = ((float *)y->data)[i];
        if (i == 6)
            CT_CHECK_MSG(got == 6.0f, "y[6] = %g, expected 6 (the only window without a NaN)",
                         (double)got);
        else
            CT_CHECK_MSG(isnan(got), "y[%lld] = %g, expected NaN", (long long)i, (double)got);
    }
    if (x->grad) {
        /* windows (0,0) and (1,0) end at the NaN at 1, the other NaN windows at the one at 5 */
        float expect[9] = {0, 1 + 8, 0, 0, 0, 2 + 4 + 16 + 32 + 128 + 256, 0, 64, 0};
        CT_CHECK_ARRAYS("padded windows with NaN", x->grad, expect, 9, 0.0, 0.0);
    }
    ct_graph_destroy(g);
    ct_ctx_destroy(ctx);
}

/* ---- batch norm ---- */

static void batch_norm_should_update_running_stats_in_training(void) {
    ct_ctx *ctx = make_ctx(1, 0);
    ct_graph *g = make_graph(ctx);
    /* channel 0: 1 2 3 4 (mean 2.5, biased var 1.25, unbiased 5/3);
     * channel 1: 2 4 6 8 (mean 5, biased var 5, unbiased 20/3) */
    float xv[8] = {1, 2, 2, 4, 3, 6, 4, 8};
    float wv[2] = {2.0f, 0.5f}, bv[2] = {0.1f, -1.0f};
    float rm[2] = {0.0f, 1.0f}, rv[2] = {1.0f, 2.0f};
    int64_t nbt = 3, c2 = 2;
    ct_tensor *x = ct_graph_wrap(g, xv, CT_F32, 2, (int64_t[]){4, 2});
    ct_tensor *w = ct_graph_wrap(g, wv, CT_F32, 1, &c2), *b = ct_graph_wrap(g, bv, CT_F32, 1, &c2);
    ct_tensor *trm = ct_graph_wrap(g, rm, CT_F32, 1, &c2),
              *trv = ct_graph_wrap(g, rv, CT_F32, 1, &c2);
    ct_tensor *tn = ct_graph_wrap(g, &nbt, CT_I64, 0, NULL);
    ct_tensor *y = ct_op_batch_norm(g, x, w, b, trm, trv, tn, 0.1f, 1e-5f);
    CT_CHECK(y != NULL);
    if (y) {
        const float *yv = y->data;
        double is0 = 1.0 / sqrt(1.25 + 1e-5), is1 = 1.0 / sqrt(5.0 + 1e-5);
        for (int n = 0; n < 4; n++) {
            CT_CHECK_CLOSE(yv[2 * n], (xv[2 * n] - 2.5) * is0 * 2.0 + 0.1, 1e-6, 1e-5);
            CT_CHECK_CLOSE(yv[2 * n + 1], (xv[2 * n + 1] - 5.0) * is1 * 0.5 - 1.0, 1e-6, 1e-5);
        }
    }
    /* r = 0.9 r + 0.1 s, with the unbiased variance */
    CT_CHECK_CLOSE(rm[0], 0.25, 1e-7, 1e-6);
    CT_CHECK_CLOSE(rm[1], 1.4, 1e-7, 1e-6);
    CT_CHECK_CLOSE(rv[0], 0.9 + 0.1 * 5.0 / 3.0, 1e-7, 1e-6);
    CT_CHECK_CLOSE(rv[1], 1.8 + 0.1 * 20.0 / 3.0, 1e-7, 1e-6);
    CT_CHECK_INT(nbt, 4);

    /* evaluation: the running statistics normalise and stay as they are */
    ct_graph_set_training(g, false);
    float rm0 = rm[0], rv1 = rv[1];
    y = ct_op_batch_norm(g, x, w, b, trm, trv, tn, 0.1f, 1e-5f);
    CT_CHECK(y != NULL);
    if (y) {
        const float *yv = y->data;
        for (int n = 0; n < 4; n++) {
            CT_CHECK_CLOSE(yv[2 * n], (xv[2 * n] - 0.25) / sqrt(rv[0] + 1e-5) * 2.0 + 0.1, 1e-6,
                           1e-5);
            CT_CHECK_CLOSE(yv[2 * n + 1], (xv[2 * n + 1] - 1.4) / sqrt(rv[1] + 1e-5) * 0.5 - 1.0,
                           1e-6, 1e-5);
        }
    }
    CT_CHECK(rm[0] == rm0 && rv[1] == rv1);
    CT_CHECK_INT(nbt, 4);

    /* evaluation without running statistics: batch statistics, affine off */
    y = ct_op_batch_norm(g, x, NULL, NULL, NULL, NULL, NULL, 0.1f, 0.0f);
    CT_CHECK(y != NULL);
    if (y) CT_CHECK_CLOSE(((float *)y->data)[0], -1.5 / sqrt(1.25), 1e-6, 1e-5);
    CT_CHECK_INT(ct_graph_status(g), CT_OK);
    ct_graph_destroy(g);
    ct_ctx_destroy(ctx);
}

static void batch_norm_should_use_batch_stats_over_n_h_w(void) {
    ct_ctx *ctx = make_ctx(1, 0);
    ct_graph *g = make_graph(ctx);
    /* x [2,2,1,2]: channel 0 holds 1 3 | 5 7 (mean 4, var 5, unbiased 20/3); channel 1 holds
     * 0 0 | 0 4 (mean 1, var 3, unbiased 4) */
    float xv[8] = {1, 3, 0, 0, 5, 7, 0, 4};
    float rm[2] = {1.0f, 1.0f}, rv[2] = {1.0f, 1.0f};
    int64_t c2 = 2;
    ct_tensor *x = ct_graph_wrap(g, xv, CT_F32, 4, (int64_t[]){2, 2, 1, 2});
    ct_tensor *trm = ct_graph_wrap(g, rm, CT_F32, 1, &c2),
              *trv = ct_graph_wrap(g, rv, CT_F32, 1, &c2);
    ct_tensor *y = ct_op_batch_norm(g, x, NULL, NULL, trm, trv, NULL, 0.5f, 0.0f);
    CT_CHECK(y != NULL);
    if (y) {
        const float *yv = y->data;
        CT_CHECK_CLOSE(yv[0], -3.0 / sqrt(5.0), 1e-6, 1e-5);
        CT_CHECK_CLOSE(yv[5], 3.0 / sqrt(5.0), 1e-6, 1e-5);
        CT_CHECK_CLOSE(yv[7], 3.0 / sqrt(3.0), 1e-6, 1e-5);
    }
    CT_CHECK_CLOSE(rm[0], 2.5, 1e-7, 1e-6);
    CT_CHECK_CLOSE(rm[1], 1.0, 1e-7, 1e-6);
    CT_CHECK_CLOSE(rv[0], 0.5 + 0.5 * 20.0 / 3.0, 1e-7, 1e-6);
    CT_CHECK_CLOSE(rv[1], 2.5, 1e-7, 1e-6);
    ct_graph_destroy(g);
    ct_ctx_destroy(ctx);
}

/* ---- errors ---- */

/* The last failure names the op and contains `part`; the graph is failed; then reset. */
static void expect_failure(ct_graph *g, ct_tensor *y, ct_status code, const char *part) {
    ct_ctx *ctx = ct_graph_ctx(g);
    CT_CHECK(y == NULL);
    CT_CHECK_INT(ct_graph_status(g), code);
    CT_CHECK_MSG(strstr(ct_last_error(ctx), part) != NULL, "message '%s' lacks '%s'",
                 ct_last_error(ctx), part);
    ct_graph_reset(g);
    ct_clear_error(ctx);
}

static void conv2d_should_reject_bad_arguments(void) {
    ct_ctx *ctx = make_ctx(1, 0);
    ct_graph *g = make_graph(ctx);
    ct_conv2d_params p = ct_conv2d_default_params();
#define T(...) ct_graph_zeros(g, CT_F32, 4, (int64_t[]){__VA_ARGS__})
    ct_tensor *xi = ct_graph_zeros(g, CT_I32, 4, (int64_t[]){2, 3, 5, 5});
    expect_failure(g, ct_op_conv2d(g, xi, T(8, 3, 3, 3), NULL, &p), CT_ERR_SHAPE,
                   "conv2d: x must be f32, got i32");
    ct_tensor *x3 = ct_graph_zeros(g, CT_F32, 3, (int64_t[]){3, 5, 5});
    expect_failure(g, ct_op_conv2d(g, x3, T(8, 3, 3, 3), NULL, &p), CT_ERR_SHAPE,
                   "conv2d: x must be [N,C,H,W], got [3,5,5]");
    expect_failure(g, ct_op_conv2d(g, T(2, 4, 5, 5), T(8, 3, 3, 3), NULL, &p), CT_ERR_SHAPE,
                   "conv2d: weight [8,3,3,3] expects 3*groups = 3 input channels (groups 1), x "
                   "is [2,4,5,5]");
    p.groups = 3;
    expect_failure(g, ct_op_conv2d(g, T(2, 4, 5, 5), T(6, 2, 3, 3), NULL, &p), CT_ERR_SHAPE,
                   "conv2d: groups 3 must divide both the input channels of x [2,4,5,5] and the "
                   "output channels of weight [6,2,3,3]");
    p.groups = 2;
    expect_failure(g, ct_op_conv2d(g, T(2, 4, 5, 5), T(5, 2, 3, 3), NULL, &p), CT_ERR_SHAPE,
                   "groups 2 must divide");
    p.groups = 0;
    expect_failure(g, ct_op_conv2d(g, T(2, 4, 5, 5), T(4, 2, 3, 3), NULL, &p), CT_ERR_INVALID_ARG,
                   "conv2d: groups must be positive, got 0");
    p = ct_conv2d_default_params();
    ct_tensor *b = ct_graph_zeros(g, CT_F32, 1, (int64_t[]){7});
    expect_failure(g, ct_op_conv2d(g, T(2, 3, 5, 5), T(8, 3, 3, 3), b, &p), CT_ERR_SHAPE,
                   "conv2d: bias must be [8] for weight [8,3,3,3], got [7]");
    p.stride[1] = 0;
    expect_failure(g, ct_op_conv2d(g, T(2, 3, 5, 5), T(8, 3, 3, 3), NULL, &p), CT_ERR_INVALID_ARG,
                   "conv2d: stride (1,0)");
    p = ct_conv2d_default_params();
    p.padding[0] = -1;
    expect_failure(g, ct_op_conv2d(g, T(2, 3, 5, 5), T(8, 3, 3, 3), NULL, &p), CT_ERR_INVALID_ARG,
                   "padding (-1,0)");
    p = ct_conv2d_default_params();
    p.dilation[0] = 3;
    expect_failure(g, ct_op_conv2d(g, T(2, 3, 5, 5), T(8, 3, 3, 3), NULL, &p), CT_ERR_SHAPE,
                   "conv2d: x [2,3,5,5] padded by (0,0) is (5,5), smaller than the kernel (7,3)");
    p.dilation[0] = INT64_MAX;
    expect_failure(g, ct_op_conv2d(g, T(2, 3, 5, 5), T(8, 3, 3, 3), NULL, &p), CT_ERR_INVALID_ARG,
                   "conv2d: stride");
    p = ct_conv2d_default_params();
    expect_failure(g, ct_op_conv2d(g, T(2, 3, 5, 5), T(8, 3, 0, 3), NULL, &p), CT_ERR_SHAPE,
                   "conv2d: weight [8,3,0,3] has an empty kernel");
    ct_tensor *w3 = ct_graph_zeros(g, CT_F32, 3, (int64_t[]){8, 3, 3});
    expect_failure(g, ct_op_conv2d(g, T(2, 3, 5, 5), w3, NULL, &p), CT_ERR_SHAPE,
                   "conv2d: weight must be [O,C/groups,KH,KW], got [8,3,3]");
    expect_failure(g, ct_op_conv2d(g, NULL, T(8, 3, 3, 3), NULL, &p), CT_ERR_INVALID_ARG,
                   "conv2d: input 0 is NULL");
    /* errors are sticky: a valid call on a failed graph returns NULL */
    ct_tensor *x = T(2, 3, 5, 5), *w = T(8, 3, 3, 3);
    CT_CHECK(ct_op_conv2d(g, x, NULL, NULL, &p) == NULL);
    CT_CHECK(ct_op_conv2d(g, x, w, NULL, &p) == NULL);
    ct_graph_reset(g);
#undef T
    ct_graph_destroy(g);
    ct_ctx_destroy(ctx);
}

static void pools_should_reject_bad_arguments(void) {
    ct_ctx *ctx = make_ctx(1, 0);
    ct_graph *g = make_graph(ctx);
    ct_tensor *x = ct_graph_zeros(g, CT_F32, 4, (int64_t[]){2, 3, 6, 6});
    ct_pool2d_params p = {{3, 3}, {1, 1}, {2, 1}};
    expect_failure(g, ct_op_max_pool2d(g, x, &p), CT_ERR_INVALID_ARG,
                   "max_pool2d: padding (2,1) must be at most half the kernel (3,3)");
    x = ct_graph_zeros(g, CT_F32, 4, (int64_t[]){2, 3, 6, 6});
    expect_failure(g, ct_op_avg_pool2d(g, x, &p), CT_ERR_INVALID_ARG,
                   "avg_pool2d: padding (2,1) must be at most half the kernel (3,3)");
    x = ct_graph_zeros(g, CT_F32, 4, (int64_t[]){2, 3, 6, 6});
    ct_pool2d_params k0 = {{0, 2}, {0, 0}, {0, 0}};
    expect_failure(g, ct_op_max_pool2d(g, x, &k0), CT_ERR_INVALID_ARG, "max_pool2d: kernel (0,2)");
    x = ct_graph_zeros(g, CT_F32, 4, (int64_t[]){2, 3, 6, 6});
    ct_pool2d_params sneg = {{2, 2}, {-1, 0}, {0, 0}};
    expect_failure(g, ct_op_avg_pool2d(g, x, &sneg), CT_ERR_INVALID_ARG, "stride (-1,0)");
    x = ct_graph_zeros(g, CT_F32, 4, (int64_t[]){2, 3, 2, 6});
    ct_pool2d_params big = {{3, 3}, {0, 0}, {0, 0}};
    expect_failure(g, ct_op_max_pool2d(g, x, &big), CT_ERR_SHAPE,
                   "max_pool2d: x [2,3,2,6] padded by (0,0) is smaller than the kernel (3,3)");
    x = ct_graph_zeros(g, CT_F32, 3, (int64_t[]){3, 6, 6});
    expect_failure(g, ct_op_max_pool2d(g, x, &big), CT_ERR_SHAPE,
                   "max_pool2d: x must be [N,C,H,W], got [3,6,6]");
    x = ct_graph_zeros(g, CT_I64, 4, (int64_t[]){2, 3, 6, 6});
    expect_failure(g, ct_op_avg_pool2d(g, x, &big), CT_ERR_SHAPE,
                   "avg_pool2d: x must be f32, got i64");
    x = ct_graph_zeros(g, CT_F32, 4, (int64_t[]){2, 3, 6, 6});
    expect_failure(g, ct_op_max_pool2d(g, x, NULL), CT_ERR_INVALID_ARG, "max_pool2d");
    x = ct_graph_zeros(g, CT_F32, 2, (int64_t[]){2, 3});
    expect_failure(g, ct_op_global_avg_pool(g, x), CT_ERR_SHAPE,
                   "global_avg_pool: x must be [N,C,H,W] with H, W > 0, got [2,3]");
    x = ct_graph_zeros(g, CT_F32, 4, (int64_t[]){2, 3, 0, 4});
    expect_failure(g, ct_op_global_avg_pool(g, x), CT_ERR_SHAPE, "got [2,3,0,4]");
    x = ct_graph_zeros(g, CT_I32, 4, (int64_t[]){2, 3, 2, 4});
    expect_failure(g, ct_op_global_avg_pool(g, x), CT_ERR_SHAPE,
                   "global_avg_pool: x must be f32, got i32");
    ct_graph_destroy(g);
    ct_ctx_destroy(ctx);
}

static void batch_norm_should_reject_bad_arguments(void) {
    ct_ctx *ctx = make_ctx(1, 0);
    ct_graph *g = make_graph(ctx);
#define X(...)                                                                                     \
    ct_graph_zeros(g, CT_F32, (int32_t)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)),       \
                   (int64_t[]){__VA_ARGS__})
    expect_failure(g, ct_op_batch_norm(g, X(2, 3, 4), NULL, NULL, NULL, NULL, NULL, 0.1f, 1e-5f),
                   CT_ERR_SHAPE, "batch_norm: x must be [N,C] or [N,C,H,W], got [2,3,4]");
    ct_tensor *xi = ct_graph_zeros(g, CT_I32, 2, (int64_t[]){2, 3});
    expect_failure(g, ct_op_batch_norm(g, xi, NULL, NULL, NULL, NULL, NULL, 0.1f, 1e-5f),
                   CT_ERR_SHAPE, "batch_norm: x must be f32, got i32");
    expect_failure(g, ct_op_batch_norm(g, X(2, 3, 4, 4), X(4), NULL, NULL, NULL, NULL, 0.1f, 1e-5f),
                   CT_ERR_SHAPE, "batch_norm: weight must be [3] for x [2,3,4,4], got [4]");
    expect_failure(g, ct_op_batch_norm(g, X(2, 3), NULL, X(3, 1), NULL, NULL, NULL, 0.1f, 1e-5f),
                   CT_ERR_SHAPE, "batch_norm: bias must be [3] for x [2,3], got [3,1]");
    expect_failure(g, ct_op_batch_norm(g, X(2, 3), NULL, NULL, X(3), NULL, NULL, 0.1f, 1e-5f),
                   CT_ERR_INVALID_ARG, "batch_norm: running_mean and running_var must be given");
    ct_tensor *nf = X(1);
    expect_failure(g, ct_op_batch_norm(g, X(2, 3), NULL, NULL, X(3), X(3), nf, 0.1f, 1e-5f),
                   CT_ERR_SHAPE, "batch_norm: num_batches_tracked must be an i64 scalar, got f32");
    expect_failure(g, ct_op_batch_norm(g, X(1, 3), NULL, NULL, NULL, NULL, NULL, 0.1f, 1e-5f),
                   CT_ERR_SHAPE, "batch_norm: expected more than 1 value per channel");
    expect_failure(g, ct_op_batch_norm(g, X(1, 3, 1, 1), NULL, NULL, X(3), X(3), NULL, 0.1f, 1e-5f),
                   CT_ERR_SHAPE, "got x [1,3,1,1]");
    /* one value per channel is fine in evaluation mode with running statistics */
    ct_graph_set_training(g, false);
    ct_tensor *rv = X(3);
    ct_tensor_fill(rv, 1.0f);
    CT_CHECK(ct_op_batch_norm(g, X(1, 3), NULL, NULL, X(3), rv, NULL, 0.1f, 1e-5f) != NULL);
    CT_CHECK_INT(ct_graph_status(g), CT_OK);
#undef X
    ct_graph_destroy(g);
    ct_ctx_destroy(ctx);
}

static void cnn_ops_should_not_record_without_grad(void) {
    ct_ctx *ctx = make_ctx(1, 0);
    ct_graph *g = make_graph(ctx);
    ct_tensor *x = ct_graph_zeros(g, CT_F32, 4, (int64_t[]){2, 3, 6, 6});
    ct_tensor *w = ct_graph_zeros(g, CT_F32, 4, (int64_t[]){4, 3, 3, 3});
    ct_tensor *y = ct_op_conv2d(g, x, w, NULL, NULL);
    CT_CHECK(y && y->node == NULL && !(y->flags & CT_TENSOR_REQUIRES_GRAD));
    ct_pool2d_params p = {{2, 2}, {0, 0}, {0, 0}};
    ct_tensor *m = ct_op_max_pool2d(g, y, &p);
    CT_CHECK(m && m->node == NULL);
    /* weight requires grad, x does not: dx is skipped, dw is computed */
    w->flags |= CT_TENSOR_REQUIRES_GRAD;
    ct_tensor_fill(x, 1.0f);
    y = ct_op_conv2d(g, x, w, NULL, NULL);
    CT_CHECK(y && y->node != NULL);
    CT_CHECK(y && ct_graph_backward(g, ct_op_sum_all(g, y)) == CT_OK);
    CT_CHECK(x->grad == NULL);
    /* every dw element sums x = 1 over 2 samples and a 4x4 output */
    if (w->grad) CT_CHECK(w->grad[0] == 32.0f && w->grad[80] == 32.0f);
    ct_graph_destroy(g);
    ct_ctx_destroy(ctx);
}

/* Every heap allocation in a conv/bn/pool step failing in turn: each op returns NULL or the
 * graph reports CT_ERR_OOM, nothing crashes and nothing leaks. */
static void cnn_ops_should_fail_cleanly_when_allocation_fails(void) {
    bool completed = false;
    for (long long k = 1; k < 200 && !completed; k++) {
        test_alloc ta = {0};
        ct_ctx_params cp = ct_ctx_default_params();
        cp.allocator = test_allocator(&ta);
        cp.n_threads = 1;
        ct_ctx *ctx = NULL;
        if (ct_ctx_create(&cp, &ctx) != CT_OK) abort();
        ct_graph_params gp = ct_graph_default_params();
        gp.arena_chunk = 256; /* nearly every arena request is its own heap allocation */
        ct_graph *g = NULL;
        if (ct_graph_create(ctx, &gp, &g) != CT_OK) abort();
        ta.fail_at = ta.n_alloc + k;
        ct_tensor *x = ct_graph_zeros(g, CT_F32, 4, (int64_t[]){2, 3, 6, 6});
        ct_tensor *w = ct_graph_zeros(g, CT_F32, 4, (int64_t[]){4, 3, 3, 3});
        if (x) x->flags |= CT_TENSOR_REQUIRES_GRAD;
        if (w) w->flags |= CT_TENSOR_REQUIRES_GRAD;
        if (x) ct_tensor_fill(x, 0.5f);
        ct_pool2d_params pp = {{2, 2}, {0, 0}, {0, 0}};
        ct_tensor *h = ct_op_conv2d(g, x, w, NULL, &(ct_conv2d_params){{1, 1}, {1, 1}, {1, 1}, 1});
        h = ct_op_batch_norm(g, h, NULL, NULL, NULL, NULL, NULL, 0.1f, 1e-5f);
        h = ct_op_add(g, ct_op_max_pool2d(g, h, &pp), ct_op_avg_pool2d(g, h, &pp));
        ct_tensor *loss = ct_op_sum_all(g, ct_op_global_avg_pool(g, h));
        ct_status st = ct_graph_backward(g, loss);
        CT_CHECK(st == CT_OK || st == CT_ERR_OOM);
        CT_CHECK_INT(ct_graph_status(g), st);
        completed = st == CT_OK;
        ta.fail_at = 0;
        ct_graph_destroy(g);
        ct_ctx_destroy(ctx);
        CT_CHECK_INT(ta.live, 0);
    }
    CT_CHECK(completed);
}

int main(void) {
    CT_RUN(conv2d_should_match_reference_twin);
    CT_RUN(conv2d_should_match_reference_twin_on_nan);
    CT_RUN(conv2d_should_compute_known_values);
    CT_RUN(cnn_ops_should_give_same_bits_for_any_thread_count);
    CT_RUN(pools_should_compute_known_windows);
    CT_RUN(max_pool2d_should_route_ties_to_the_first_maximum);
    CT_RUN(max_pool2d_2x2_should_follow_the_rule_on_every_window);
    CT_RUN(max_pool2d_should_propagate_nan_through_padded_windows);
    CT_RUN(batch_norm_should_update_running_stats_in_training);
    CT_RUN(batch_norm_should_use_batch_stats_over_n_h_w);
    CT_RUN(conv2d_should_reject_bad_arguments);
    CT_RUN(pools_should_reject_bad_arguments);
    CT_RUN(batch_norm_should_reject_bad_arguments);
    CT_RUN(cnn_ops_should_not_record_without_grad);
    CT_RUN(cnn_ops_should_fail_cleanly_when_allocation_fails);
    return ct_test_finish();
}
