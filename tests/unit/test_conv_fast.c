/*
 * test_conv_fast.c - the fast convolution paths against the reference twin
 * (src/kernels/ref/conv2d_ref.c): oneDNN's bf16 primitives under bf16 autocast, on several
 * geometries (stride, padding, dilation, groups, odd sizes, a tail batch chunk, no bias).
 *
 * The contract of bf16 autocast is the products of operands rounded to bf16, accumulated in
 * f32, with f32 results: so the reference runs on x, w and dy rounded beforehand (in double),
 * and the fast path must agree to f32 accumulation-order error. A result rounded to bf16, or
 * products of unrounded operands, would miss by 2^-9 relative or more, far outside the
 * tolerances. 1 and 2 threads must give the same bits. Then a small CNN trains in bf16 with
 * the default kernel choice, which takes the bf16 primitives where the CPU has bf16 dot
 * products.
 */
#include <math.h>
#include <string.h>

#include "ctrain/ctrain.h"
#include "harness.h"
#include "kernels/cnn_kernels.h"
#include "kernels/kernels.h"

#ifdef _OPENMP
#include <dnnl.h>
#endif

typedef struct geom_case {
    const char *name;
    int64_t n, c, h, w, o, kh, kw;
    int64_t stride[2], padding[2], dilation[2], groups;
    bool bias;
} geom_case;

static const geom_case geoms[] = {
    {"3x3 pad 1", 8, 3, 9, 9, 8, 3, 3, {1, 1}, {1, 1}, {1, 1}, 1, true},
    {"one input channel, tail chunk", 11, 1, 28, 28, 32, 3, 3, {1, 1}, {1, 1}, {1, 1}, 1, true},
    {"32 to 64 channels", 3, 32, 14, 14, 64, 3, 3, {1, 1}, {1, 1}, {1, 1}, 1, true},
    {"stride 2, odd sizes", 5, 16, 13, 11, 24, 3, 3, {2, 2}, {1, 1}, {1, 1}, 1, true},
    {"5x3 kernel, uneven padding, no bias",
     4,
     6,
     10,
     7,
     12,
     5,
     3,
     {1, 2},
     {2, 0},
     {1, 1},
     1,
     false},
    {"dilation 2, groups 2", 3, 8, 12, 12, 16, 3, 3, {1, 1}, {2, 2}, {2, 2}, 2, true},
};

static float round_bf16(float x) {
    return ct_f32_from_bf16(ct_bf16_from_f32(x));
}

static void fill(float *v, int64_t n, uint64_t seed, bool rounded) {
    ct_rng r = ct_rng_init(seed, 1);
    ct_rng_normal(&r, v, n, 0.0f, 1.0f);
    if (rounded)
        for (int64_t i = 0; i < n; i++)
            v[i] = round_bf16(v[i]);
}

typedef struct outputs {
    float *y, *dx, *dw, *db;
    int64_t bf16_convs;
} outputs;

static void outputs_free(outputs *o) {
    free(o->y);
    free(o->dx);
    free(o->dw);
    free(o->db);
}

static float *copy_out(const float *src, int64_t n) {
    float *d = malloc((size_t)n * sizeof(float));
    if (d && src) memcpy(d, src, (size_t)n * sizeof(float));
    return d;
}

/* How run_op computes: conv2d, fused with relu or followed by ct_op_relu or alone; in f32 or
 * under bf16 autocast (with oneDNN's bf16 primitives asked for). */
typedef struct op_mode {
    bool bf16;
    bool relu;  /* relu(conv2d) */
    bool fused; /* with relu: ct_op_conv2d_relu, else ct_op_relu(ct_op_conv2d) */
    ct_kernels kernels;
    int64_t threads;
} op_mode;

/* One forward and backward of case gc. */
static outputs run_op(const geom_case *gc, op_mode m, const ct_k_conv2d_geom *s) {
    outputs out;
    memset(&out, 0, sizeof out);
    ct_ctx_params p = ct_ctx_default_params();
    p.n_threads = m.threads;
    p.kernels = m.kernels;
    p.bf16_kernels = CT_BF16_KERNELS_ONEDNN;
    ct_ctx *ctx = NULL;
    ct_graph *g = NULL;
    if (ct_ctx_create(&p, &ctx) != CT_OK || ct_graph_create(ctx, NULL, &g) != CT_OK) abort();
    if (m.bf16) CT_CHECK(ct_graph_set_autocast(g, CT_BF16) == CT_OK);
    ct_tensor *x = ct_graph_new(g, CT_F32, 4, (int64_t[]){gc->n, gc->c, gc->h, gc->w});
    ct_tensor *w =
        ct_graph_new(g, CT_F32, 4, (int64_t[]){gc->o, gc->c / gc->groups, gc->kh, gc->kw});
    ct_tensor *b = gc->bias ? ct_graph_new(g, CT_F32, 1, (int64_t[]){gc->o}) : NULL;
    fill(x->data, ct_tensor_numel(x), 1, false);
    fill(w->data, ct_tensor_numel(w), 2, false);
    if (b) fill(b->data, gc->o, 3, false);
    x->flags |= CT_TENSOR_REQUIRES_GRAD;
    w->flags |= CT_TENSOR_REQUIRES_GRAD;
    if (b) b->flags |= CT_TENSOR_REQUIRES_GRAD;
    ct_conv2d_params cp = ct_conv2d_default_params();
    for (int i = 0; i < 2; i++) {
        cp.stride[i] = gc->stride[i];
        cp.padding[i] = gc->padding[i];
        cp.dilation[i] = gc->dilation[i];
    }
    cp.groups = gc->groups;
    ct_tensor *y = m.relu && m.fused ? ct_op_conv2d_relu(g, x, w, b, &cp)
                   : m.relu          ? ct_op_relu(g, ct_op_conv2d(g, x, w, b, &cp))
                                     : ct_op_conv2d(g, x, w, b, &cp);
    CT_CHECK_MSG(y != NULL, "%s: %s", gc->name, ct_last_error(ctx));
    if (y) {
        int64_t ny = ct_tensor_numel(y);
        CT_CHECK(y->shape[2] == s->oh && y->shape[3] == s->ow);
        float *seed = malloc((size_t)ny * sizeof(float));
        fill(seed, ny, 4, false);
        out.y = copy_out(y->data, ny);
        CT_CHECK(ct_graph_backward_seed(g, y, seed) == CT_OK);
        out.dx = copy_out(x->grad, ct_tensor_numel(x));
        out.dw = copy_out(w->grad, ct_tensor_numel(w));
        if (b) out.db = copy_out(b->grad, gc->o);
        free(seed);
    }
    out.bf16_convs = ct_k_onednn_bf16_convs(ctx);
    ct_graph_destroy(g);
    ct_ctx_destroy(ctx);
    return out;
}

static bool same_bits(const float *a, const float *b, int64_t n) {
    return a && b && memcmp(a, b, (size_t)n * sizeof(float)) == 0;
}

/* Whether the CPU has bf16 dot products, where oneDNN must have bf16 convolutions (it may
 * emulate them on other AVX-512 CPUs, or not: there the test does not insist). */
static bool onednn_has_bf16(void) {
#ifdef _OPENMP
    unsigned isa = (unsigned)dnnl_get_effective_cpu_isa(), bf16 = dnnl_cpu_isa_avx512_core_bf16;
    return (isa & bf16) == bf16;
#else
    return false;
#endif
}

static ct_k_conv2d_geom geom_of(const geom_case *gc) {
    ct_k_conv2d_geom s;
    s.n = gc->n, s.c = gc->c, s.h = gc->h, s.w = gc->w, s.o = gc->o, s.kh = gc->kh, s.kw = gc->kw;
    for (int i = 0; i < 2; i++) {
        s.stride[i] = gc->stride[i];
        s.padding[i] = gc->padding[i];
        s.dilation[i] = gc->dilation[i];
    }
    s.groups = gc->groups;
    s.oh = (s.h + 2 * s.padding[0] - (s.kh - 1) * s.dilation[0] - 1) / s.stride[0] + 1;
    s.ow = (s.w + 2 * s.padding[1] - (s.kw - 1) * s.dilation[1] - 1) / s.stride[1] + 1;
    return s;
}

/* Checks run_op's outputs in mode m against the reference twin on the same inputs (rounded
 * under bf16; with relu, the gradient masked by the op's own output, so that an output near 0
 * cannot flip the mask), and 1 against 2 threads. */
static void check_against_reference(op_mode m) {
    for (size_t k = 0; k < sizeof geoms / sizeof geoms[0]; k++) {
        const geom_case *gc = &geoms[k];
        ct_k_conv2d_geom s = geom_of(gc);
        int64_t nx = s.n * s.c * s.h * s.w, nw = s.o * (s.c / s.groups) * s.kh * s.kw;
        int64_t ny = s.n * s.o * s.oh * s.ow;
        op_mode m2 = m;
        m.threads = 1;
        m2.threads = 2;
        outputs one = run_op(gc, m, &s), two = run_op(gc, m2, &s);
        float *x = malloc((size_t)nx * 4), *w = malloc((size_t)nw * 4);
        float *b = malloc((size_t)s.o * 4), *dy = malloc((size_t)ny * 4);
        float *y = malloc((size_t)ny * 4), *dx = calloc((size_t)nx, 4);
        float *dw = calloc((size_t)nw, 4), *db = calloc((size_t)s.o, 4);
        fill(x, nx, 1, m.bf16);
        fill(w, nw, 2, m.bf16);
        fill(b, s.o, 3, false);
        fill(dy, ny, 4, false);
        ct_k_conv2d_ref_fwd(&s, x, w, gc->bias ? b : NULL, y);
        for (int64_t i = 0; m.relu && i < ny; i++) {
            y[i] = y[i] < 0.0f ? 0.0f : y[i];
            dy[i] = one.y && one.y[i] <= 0.0f ? 0.0f : dy[i];
        }
        for (int64_t i = 0; m.bf16 && i < ny; i++)
            dy[i] = round_bf16(dy[i]);
        ct_k_conv2d_ref_bwd(&s, x, w, dy, dx, dw, gc->bias ? db : NULL);
        /* f32 accumulation of k terms of size ~1 (sums ~sqrt(k)): a few ulps of the largest
         * partial sums; 2^-9 relative (one bf16 rounding) is 20 times more */
        int64_t k_fwd = (s.c / s.groups) * s.kh * s.kw, k_dw = s.n * s.oh * s.ow;
        double tol_fwd = 1.6e-5 * sqrt((double)k_fwd), tol_dw = 1.6e-5 * sqrt((double)k_dw);
        char what[160];
        snprintf(what, sizeof what, "%s (%s%s, kernels %d)", gc->name, m.bf16 ? "bf16" : "f32",
                 m.relu ? (m.fused ? ", fused relu" : ", relu") : "", (int)m.kernels);
        if (one.y && one.dx && one.dw) {
            CT_CHECK_ARRAYS(what, one.y, y, ny, tol_fwd, 1e-5);
            CT_CHECK_ARRAYS(what, one.dx, dx, nx, tol_fwd * 2, 1e-5);
            CT_CHECK_ARRAYS(what, one.dw, dw, nw, tol_dw, 1e-5);
            if (gc->bias) CT_CHECK_ARRAYS(what, one.db, db, s.o, tol_dw, 1e-5);
        }
        CT_CHECK_MSG(same_bits(one.y, two.y, ny) && same_bits(one.dx, two.dx, nx) &&
                         same_bits(one.dw, two.dw, nw) &&
                         (!gc->bias || same_bits(one.db, two.db, s.o)),
                     "%s: 1 and 2 threads differ", what);
        /* the bf16 primitives from 16 input channels a group, the f32 ones below */
        bool wide = s.c / s.groups >= 16;
        if (m.bf16 && m.kernels == CT_KERNELS_FAST && onednn_has_bf16())
            CT_CHECK_MSG(wide ? one.bf16_convs >= 2 && two.bf16_convs >= 2
                              : one.bf16_convs == 0 && two.bf16_convs == 0,
                         "%s: %lld and %lld chunks on oneDNN's bf16 convolution", what,
                         (long long)one.bf16_convs, (long long)two.bf16_convs);
        else if (m.bf16 && m.kernels == CT_KERNELS_FAST && k == 0)
            printf("  (%lld chunks on oneDNN's bf16 convolution)\n", (long long)two.bf16_convs);
        free(x), free(w), free(b), free(dy), free(y), free(dx), free(dw), free(db);
        outputs_free(&one);
        outputs_free(&two);
    }
}

static void conv_should_match_the_reference_on_bf16_primitives(void) {
    if (!onednn_has_bf16())
        printf("  (no bf16 dot products here: the bf16 convolutions may not have run)\n");
    check_against_reference((op_mode){true, false, false, CT_KERNELS_FAST, 1});
}

static void conv_relu_should_match_the_reference(void) {
    static const ct_kernels sets[] = {CT_KERNELS_FAST, CT_KERNELS_BLAS, CT_KERNELS_REFERENCE};
    for (size_t i = 0; i < sizeof sets / sizeof sets[0]; i++) {
        check_against_reference((op_mode){false, true, true, sets[i], 1});
        check_against_reference((op_mode){true, true, true, sets[i], 1});
    }
}

/* The fused op gives relu(conv2d)'s bits, forward and backward, on every path. */
static void conv_relu_should_equal_relu_of_conv_bit_for_bit(void) {
    static const ct_kernels sets[] = {CT_KERNELS_FAST, CT_KERNELS_BLAS, CT_KERNELS_REFERENCE};
    for (size_t k = 0; k < sizeof geoms / sizeof geoms[0]; k++) {
        const geom_case *gc = &geoms[k];
        ct_k_conv2d_geom s = geom_of(gc);
        int64_t nx = s.n * s.c * s.h * s.w, nw = s.o * (s.c / s.groups) * s.kh * s.kw;
        int64_t ny = s.n * s.o * s.oh * s.ow;
        for (size_t i = 0; i < 2 * sizeof sets / sizeof sets[0]; i++) {
            op_mode m = {i % 2 == 1, true, true, sets[i / 2], 2};
            outputs f = run_op(gc, m, &s);
            m.fused = false;
            outputs u = run_op(gc, m, &s);
            CT_CHECK_MSG(same_bits(f.y, u.y, ny) && same_bits(f.dx, u.dx, nx) &&
                             same_bits(f.dw, u.dw, nw) && (!gc->bias || same_bits(f.db, u.db, s.o)),
                         "%s (%s, kernels %d): fused and unfused differ", gc->name,
                         m.bf16 ? "bf16" : "f32", (int)m.kernels);
            outputs_free(&f);
            outputs_free(&u);
        }
    }
}

/* Images of 12x12: class 0 has a bright 4x4 square in the top-left quadrant, class 1 in the
 * bottom-right, both on noise; labels alternate. */
static void make_batch(ct_rng *r, float *x, int32_t *label, int64_t n) {
    ct_rng_normal(r, x, n * 144, 0.0f, 0.5f);
    for (int64_t i = 0; i < n; i++) {
        label[i] = (int32_t)(i % 2);
        int64_t at = label[i] ? 7 : 1;
        for (int64_t h = at; h < at + 4; h++)
            for (int64_t w = at; w < at + 4; w++)
                x[i * 144 + h * 12 + w] += 2.0f;
    }
}

/* A small CNN (conv-relu-pool twice, the first fused, then linear) trains by SGD under bf16
 * autocast with the default kernel choice, and on a CPU with bf16 dot products its second
 * convolution (16 input channels) ran on oneDNN's bf16 primitives, its first (1 channel) on
 * the f32 ones. */
static void conv_should_train_a_cnn_in_bf16(void) {
    ct_ctx_params cp = ct_ctx_default_params();
    cp.n_threads = 2;
    ct_ctx *ctx = NULL;
    ct_params *ps = NULL;
    ct_graph *g = NULL;
    if (ct_ctx_create(&cp, &ctx) != CT_OK) abort();
    ct_tensor *t[6];
    static const char *const names[6] = {"c1.w", "c1.b", "c2.w", "c2.b", "fc.w", "fc.b"};
    static const int32_t ndim[6] = {4, 1, 4, 1, 2, 1};
    static const int64_t shapes[6][4] = {{16, 1, 3, 3}, {16}, {16, 16, 3, 3}, {16}, {2, 144}, {2}};
    CT_CHECK(ct_params_create(ctx, &ps) == CT_OK);
    for (int i = 0; i < 6; i++)
        CT_CHECK(ct_params_add(ps, names[i], CT_F32, ndim[i], shapes[i], CT_PARAM_TRAINABLE,
                               &t[i]) == CT_OK);
    CT_CHECK(ct_params_alloc(ps) == CT_OK && ct_graph_create(ctx, NULL, &g) == CT_OK);
    ct_rng init = ct_rng_init(5, 0), data = ct_rng_init(6, 0);
    for (int i = 0; i < 6; i += 2)
        ct_nn_init_linear(t[i], t[i + 1], &init);
    enum { BATCH = 32, STEPS = 40 };
    float first = 0.0f, last = 0.0f;
    ct_conv2d_params conv = ct_conv2d_default_params();
    conv.padding[0] = conv.padding[1] = 1;
    ct_pool2d_params pool = {{2, 2}, {0, 0}, {0, 0}};
    for (int step = 0; step < STEPS; step++) {
        ct_graph_reset(g);
        CT_CHECK(ct_graph_set_autocast(g, CT_BF16) == CT_OK);
        ct_tensor *x = ct_graph_new(g, CT_F32, 4, (int64_t[]){BATCH, 1, 12, 12});
        ct_tensor *y = ct_graph_new(g, CT_I32, 1, (int64_t[]){BATCH});
        make_batch(&data, x->data, y->data, BATCH);
        ct_tensor *h = ct_op_max_pool2d(g, ct_op_conv2d_relu(g, x, t[0], t[1], &conv), &pool);
        h = ct_op_max_pool2d(g, ct_op_relu(g, ct_op_conv2d(g, h, t[2], t[3], &conv)), &pool);
        ct_tensor *logits = ct_op_linear(g, ct_op_flatten(g, h, 1), t[4], t[5]);
        ct_cross_entropy_params ce = ct_cross_entropy_default_params();
        ct_tensor *loss = ct_loss_cross_entropy(g, logits, y, &ce);
        CT_CHECK_MSG(loss != NULL, "step %d: %s", step, ct_last_error(ctx));
        if (!loss) break;
        ct_params_zero_grad(ps);
        CT_CHECK(ct_graph_backward(g, loss) == CT_OK);
        float *v = ct_params_values(ps), *gr = ct_params_grads(ps);
        for (int64_t i = 0; i < ct_params_numel(ps); i++)
            v[i] -= 0.1f * gr[i];
        float l = *(float *)loss->data;
        if (step == 0) first = l;
        last = l;
    }
    printf("  loss %.4f -> %.4f; %lld chunks on oneDNN's bf16 convolution\n", first, last,
           (long long)ct_k_onednn_bf16_convs(ctx));
    CT_CHECK_MSG(last < 0.25f * first, "loss %.4f -> %.4f", first, last);
    /* the second convolution's 8 chunks of 4 samples, forward and backward, every step */
    if (onednn_has_bf16()) CT_CHECK(ct_k_onednn_bf16_convs(ctx) == 16 * STEPS);
    ct_graph_destroy(g);
    ct_params_destroy(ps);
    ct_ctx_destroy(ctx);
}

int main(void) {
    CT_RUN(conv_should_match_the_reference_on_bf16_primitives);
    CT_RUN(conv_relu_should_match_the_reference);
    CT_RUN(conv_relu_should_equal_relu_of_conv_bit_for_bit);
    CT_RUN(conv_should_train_a_cnn_in_bf16);
    return ct_test_finish();
}
