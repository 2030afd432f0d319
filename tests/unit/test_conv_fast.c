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
 * the bf16 primitives taken.
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

/* One forward and backward of case gc under bf16 autocast, with the fast kernels and oneDNN's
 * bf16 primitives asked for. */
static outputs run_op(const geom_case *gc, int64_t threads, const ct_k_conv2d_geom *s) {
    outputs out;
    memset(&out, 0, sizeof out);
    ct_ctx_params p = ct_ctx_default_params();
    p.n_threads = threads;
    p.bf16_kernels = CT_BF16_KERNELS_ONEDNN;
    ct_ctx *ctx = NULL;
    ct_graph *g = NULL;
    if (ct_ctx_create(&p, &ctx) != CT_OK || ct_graph_create(ctx, NULL, &g) != CT_OK) abort();
    CT_CHECK(ct_graph_set_autocast(g, CT_BF16) == CT_OK);
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
    ct_tensor *y = ct_op_conv2d(g, x, w, b, &cp);
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

/* Whether oneDNN has bf16 convolutions here (native, or emulated on AVX-512). */
static bool onednn_has_bf16(void) {
#ifdef _OPENMP
    unsigned isa = (unsigned)dnnl_get_effective_cpu_isa(), avx512 = dnnl_cpu_isa_avx512_core;
    return (isa & avx512) == avx512;
#else
    return false;
#endif
}

static void conv_should_match_the_reference_on_bf16_primitives(void) {
    if (!onednn_has_bf16())
        printf("  (no oneDNN bf16 convolution here: the f32 kernels on rounded values ran)\n");
    for (size_t k = 0; k < sizeof geoms / sizeof geoms[0]; k++) {
        const geom_case *gc = &geoms[k];
        ct_k_conv2d_geom s = {gc->n,
                              gc->c,
                              gc->h,
                              gc->w,
                              gc->o,
                              gc->kh,
                              gc->kw,
                              0,
                              0,
                              {gc->stride[0], gc->stride[1]},
                              {gc->padding[0], gc->padding[1]},
                              {gc->dilation[0], gc->dilation[1]},
                              gc->groups};
        s.oh = (s.h + 2 * s.padding[0] - (s.kh - 1) * s.dilation[0] - 1) / s.stride[0] + 1;
        s.ow = (s.w + 2 * s.padding[1] - (s.kw - 1) * s.dilation[1] - 1) / s.stride[1] + 1;
        int64_t nx = s.n * s.c * s.h * s.w, nw = s.o * (s.c / s.groups) * s.kh * s.kw;
        int64_t ny = s.n * s.o * s.oh * s.ow;
        outputs one = run_op(gc, 1, &s), two = run_op(gc, 2, &s);
        /* the reference on the same inputs, operands and dy rounded */
        float *x = malloc((size_t)nx * 4), *w = malloc((size_t)nw * 4),
              *b = malloc((size_t)s.o * 4);
        float *dy = malloc((size_t)ny * 4), *y = malloc((size_t)ny * 4);
        float *dx = calloc((size_t)nx, 4), *dw = calloc((size_t)nw, 4),
              *db = calloc((size_t)s.o, 4);
        fill(x, nx, 1, true);
        fill(w, nw, 2, true);
        fill(b, s.o, 3, false);
        fill(dy, ny, 4, true);
        ct_k_conv2d_ref_fwd(&s, x, w, gc->bias ? b : NULL, y);
        ct_k_conv2d_ref_bwd(&s, x, w, dy, dx, dw, gc->bias ? db : NULL);
        /* f32 accumulation of k terms of size ~1 (sums ~sqrt(k)): a few ulps of the largest
         * partial sums; 2^-9 relative (one bf16 rounding) is 20 times more */
        int64_t k_fwd = (s.c / s.groups) * s.kh * s.kw, k_dw = s.n * s.oh * s.ow;
        double tol_fwd = 4e-6 * sqrt((double)k_fwd) * 4, tol_dw = 4e-6 * sqrt((double)k_dw) * 4;
        if (one.y && one.dx && one.dw) {
            CT_CHECK_ARRAYS(gc->name, one.y, y, ny, tol_fwd, 1e-5);
            CT_CHECK_ARRAYS(gc->name, one.dx, dx, nx, tol_fwd * 2, 1e-5);
            CT_CHECK_ARRAYS(gc->name, one.dw, dw, nw, tol_dw, 1e-5);
            if (gc->bias) CT_CHECK_ARRAYS(gc->name, one.db, db, s.o, tol_dw, 1e-5);
        }
        CT_CHECK_MSG(same_bits(one.y, two.y, ny) && same_bits(one.dx, two.dx, nx) &&
                         same_bits(one.dw, two.dw, nw) &&
                         (!gc->bias || same_bits(one.db, two.db, s.o)),
                     "%s: 1 and 2 threads differ", gc->name);
        if (onednn_has_bf16())
            CT_CHECK_MSG(one.bf16_convs >= 2 && two.bf16_convs >= 2,
                         "%s: %lld and %lld chunks on oneDNN's bf16 convolution", gc->name,
                         (long long)one.bf16_convs, (long long)two.bf16_convs);
        else
            CT_CHECK_INT(two.bf16_convs, 0);
        free(x), free(w), free(b), free(dy), free(y), free(dx), free(dw), free(db);
        outputs_free(&one);
        outputs_free(&two);
    }
}

int main(void) {
    CT_RUN(conv_should_match_the_reference_on_bf16_primitives);
    return ct_test_finish();
}
