/*
 * test_kernels.c - the three kernel sets agree: CT_KERNELS_FAST (oneDNN + OpenBLAS),
 * CT_KERNELS_BLAS (OpenBLAS + im2col) and CT_KERNELS_REFERENCE (naive twins), forward and
 * backward, on shapes big enough to take the oneDNN paths; and the fast set gives the same bits
 * for 1 and 2 threads.
 */
#include <math.h>
#include <string.h>

#include "ctrain/ctrain.h"
#include "harness.h"
#include "kernels/vmath.h"

typedef struct run_out {
    float *v[4];
    int64_t n[4];
    int count;
} run_out;

static ct_ctx *new_ctx(ct_kernels k, int64_t threads) {
    ct_ctx_params p = ct_ctx_default_params();
    p.kernels = k;
    p.n_threads = threads;
    ct_ctx *ctx = NULL;
    if (ct_ctx_create(&p, &ctx) != CT_OK) abort();
    return ctx;
}

static ct_tensor *randn(ct_graph *g, int32_t ndim, const int64_t *shape, uint64_t seed) {
    ct_tensor *t = ct_graph_new(g, CT_F32, ndim, shape);
    ct_rng r = ct_rng_init(seed, 0);
    ct_rng_normal(&r, t->data, ct_tensor_numel(t), 0.0f, 1.0f);
    t->flags |= CT_TENSOR_REQUIRES_GRAD;
    return t;
}

static void keep(run_out *o, const float *v, int64_t n) {
    o->v[o->count] = malloc((size_t)n * sizeof(float));
    memcpy(o->v[o->count], v, (size_t)n * sizeof(float));
    o->n[o->count++] = n;
}

static void release(run_out *o) {
    for (int i = 0; i < o->count; i++)
        free(o->v[i]);
    o->count = 0;
}

/* linear (x W^T + b, and its three backward GEMMs: plain, transposed A, beta = 1) */
static void run_linear(ct_kernels k, int64_t threads, run_out *o) {
    ct_ctx *ctx = new_ctx(k, threads);
    ct_graph *g;
    ct_graph_create(ctx, NULL, &g);
    ct_tensor *x = randn(g, 2, (int64_t[]){96, 200}, 1), *w = randn(g, 2, (int64_t[]){150, 200}, 2);
    ct_tensor *b = randn(g, 1, (int64_t[]){150}, 3);
    ct_tensor *y = ct_op_linear(g, x, w, b);
    ct_tensor *l = ct_op_sum_all(g, ct_op_mul(g, y, y));
    CT_CHECK_INT(ct_graph_backward(g, l), CT_OK);
    keep(o, y->data, 96 * 150);
    keep(o, x->grad, 96 * 200);
    keep(o, w->grad, 150 * 200);
    keep(o, b->grad, 150);
    ct_graph_destroy(g);
    ct_ctx_destroy(ctx);
}

/* conv2d with padding, stride, dilation and groups, through forward and backward */
static void run_conv(ct_kernels k, int64_t threads, int cfg, run_out *o) {
    ct_ctx *ctx = new_ctx(k, threads);
    ct_graph *g;
    ct_graph_create(ctx, NULL, &g);
    ct_conv2d_params p = ct_conv2d_default_params();
    int64_t n = cfg == 1 ? 11 : 10, c = 8, o_ch = 16, hw = 13, kk = 3,
            grp = 1; /* 11: a tail chunk */
    if (cfg == 1) {
        p.stride[0] = p.stride[1] = 2;
        p.padding[0] = p.padding[1] = 1;
    } else if (cfg == 2) {
        p.dilation[0] = p.dilation[1] = 2;
        p.padding[0] = 2;
        grp = 2;
    } else {
        p.padding[0] = p.padding[1] = 1;
    }
    p.groups = grp;
    ct_tensor *x = randn(g, 4, (int64_t[]){n, c, hw, hw}, 4);
    ct_tensor *w = randn(g, 4, (int64_t[]){o_ch, c / grp, kk, kk}, 5);
    ct_tensor *b = randn(g, 1, (int64_t[]){o_ch}, 6);
    ct_tensor *y = ct_op_conv2d(g, x, w, b, &p);
    CT_CHECK(y != NULL);
    if (!y) {
        ct_graph_destroy(g);
        ct_ctx_destroy(ctx);
        return;
    }
    ct_tensor *l = ct_op_sum_all(g, ct_op_mul(g, y, y));
    CT_CHECK_INT(ct_graph_backward(g, l), CT_OK);
    keep(o, y->data, ct_tensor_numel(y));
    keep(o, x->grad, ct_tensor_numel(x));
    keep(o, w->grad, ct_tensor_numel(w));
    keep(o, b->grad, o_ch);
    ct_graph_destroy(g);
    ct_ctx_destroy(ctx);
}

static void compare(const char *what, run_out *got, run_out *ref, double atol, double rtol) {
    static const char *names[4] = {"output", "dx", "dw", "db"};
    CT_CHECK_INT(got->count, ref->count);
    for (int i = 0; i < got->count && i < ref->count; i++) {
        char buf[96];
        snprintf(buf, sizeof buf, "%s %s", what, names[i]);
        CT_CHECK_ARRAYS(buf, got->v[i], ref->v[i], got->n[i], atol, rtol);
    }
}

static void bitwise(const char *what, run_out *a, run_out *b) {
    for (int i = 0; i < a->count && i < b->count; i++)
        CT_CHECK_MSG(memcmp(a->v[i], b->v[i], (size_t)a->n[i] * sizeof(float)) == 0,
                     "%s: result %d differs between 1 and 2 threads", what, i);
}

static void kernel_sets_should_agree_on_linear(void) {
    run_out fast = {0}, blas = {0}, ref = {0}, fast1 = {0};
    run_linear(CT_KERNELS_FAST, 2, &fast);
    run_linear(CT_KERNELS_FAST, 1, &fast1);
    run_linear(CT_KERNELS_BLAS, 2, &blas);
    run_linear(CT_KERNELS_REFERENCE, 1, &ref);
    compare("linear fast vs reference", &fast, &ref, 1e-3, 1e-4);
    compare("linear blas vs reference", &blas, &ref, 1e-3, 1e-4);
    bitwise("linear fast", &fast, &fast1);
    release(&fast);
    release(&fast1);
    release(&blas);
    release(&ref);
}

static void kernel_sets_should_agree_on_conv2d(void) {
    for (int cfg = 0; cfg < 3; cfg++) {
        run_out fast = {0}, blas = {0}, ref = {0}, fast1 = {0};
        run_conv(CT_KERNELS_FAST, 2, cfg, &fast);
        run_conv(CT_KERNELS_FAST, 1, cfg, &fast1);
        run_conv(CT_KERNELS_BLAS, 2, cfg, &blas);
        run_conv(CT_KERNELS_REFERENCE, 1, cfg, &ref);
        char what[64];
        snprintf(what, sizeof what, "conv config %d fast vs reference", cfg);
        compare(what, &fast, &ref, 1e-3, 1e-4);
        snprintf(what, sizeof what, "conv config %d blas vs reference", cfg);
        compare(what, &blas, &ref, 1e-3, 1e-4);
        snprintf(what, sizeof what, "conv config %d fast", cfg);
        bitwise(what, &fast, &fast1);
        release(&fast);
        release(&fast1);
        release(&blas);
        release(&ref);
    }
}

static void context_should_reject_unknown_kernel_set(void) {
    ct_ctx_params p = ct_ctx_default_params();
    p.kernels = CT_KERNELS_COUNT;
    ct_ctx *ctx = NULL;
    CT_CHECK_INT(ct_ctx_create(&p, &ctx), CT_ERR_INVALID_ARG);
    CT_CHECK(ctx == NULL);
}

/* vmath.h's exp and erf against libm's (their reference twins) over every input that
 * matters: exp on [-87.3, 88.7] to 2e-7 relative, exact 0 and inf beyond, NaN kept; erf on
 * [-9, 9] to 4e-7 absolute, odd, and +-1 at the ends. */
static void vmath_should_match_libm(void) {
    double worst_exp = 0, worst_erf = 0;
    float at_exp = 0, at_erf = 0;
    for (float x = -87.3f; x < 88.7f; x += 1e-3f + fabsf(x) * 1e-5f) {
        double want = exp((double)x), rel = fabs((double)ct_vexpf(x) - want) / want;
        if (rel > worst_exp) worst_exp = rel, at_exp = x;
    }
    CT_CHECK_MSG(worst_exp < 2e-7, "exp: relative error %.3g at %.9g", worst_exp, (double)at_exp);
    CT_CHECK(ct_vexpf(0.0f) == 1.0f);
    CT_CHECK(ct_vexpf(-100.0f) == 0.0f && ct_vexpf(-INFINITY) == 0.0f);
    CT_CHECK(isinf(ct_vexpf(89.0f)) && isinf(ct_vexpf(INFINITY)));
    CT_CHECK(isnan(ct_vexpf(NAN)));
    for (float x = -9.0f; x < 9.0f; x += 1e-4f) {
        double err = fabs((double)ct_verff(x) - erf((double)x));
        if (err > worst_erf) worst_erf = err, at_erf = x;
        if (ct_verff(-x) != -ct_verff(x)) {
            CT_CHECK_MSG(false, "erf is not odd at %.9g", (double)x);
            break;
        }
    }
    CT_CHECK_MSG(worst_erf < 4e-7, "erf: absolute error %.3g at %.9g", worst_erf, (double)at_erf);
    CT_CHECK(ct_verff(0.0f) == 0.0f && ct_verff(INFINITY) == 1.0f && ct_verff(-INFINITY) == -1.0f);
}

/* ct_vround_bf16 against its reference twin (ct_bf16_from_f32 and back) on every bit pattern
 * whose low 16 bits are one of the rounding boundaries (0, 0x7FFF, 0x8000 ties, 0x8001, 0xFFFF)
 * and on a stride through the rest: the same bits, NaN payloads made quiet alike. */
static void round_bf16_should_match_reference(void) {
    static const uint32_t lows[] = {0x0000u, 0x0001u, 0x7FFFu, 0x8000u, 0x8001u, 0xFFFFu, 0x1234u};
    int64_t mismatches = 0;
    uint32_t at = 0;
    for (uint32_t hi = 0; hi <= 0xFFFFu; hi++) {
        for (size_t l = 0; l < sizeof lows / sizeof lows[0]; l++) {
            uint32_t u = hi << 16 | lows[l];
            float x, got, want;
            memcpy(&x, &u, sizeof x);
            got = ct_vround_bf16(x);
            want = ct_f32_from_bf16(ct_bf16_from_f32(x));
            if (memcmp(&got, &want, sizeof got) != 0 && mismatches++ == 0) at = u;
        }
    }
    CT_CHECK_MSG(mismatches == 0, "%lld bit patterns round differently, first 0x%08x",
                 (long long)mismatches, (unsigned)at);
    CT_CHECK(ct_vround_bf16(1.0f + 0x1p-8f) == 1.0f);           /* a tie goes to even */
    CT_CHECK(ct_vround_bf16(1.0f + 0x1p-8f + 0x1p-20f) > 1.0f); /* above the tie, up */
    CT_CHECK(isinf(ct_vround_bf16(3.4e38f)) && isnan(ct_vround_bf16(NAN)));
}

/* The exact GELU on the fast path (vmath.h) and on the reference path (libm) agree. */
static void gelu_should_agree_between_kernel_sets(void) {
    float out[2][4096], grad[2][4096], xs[4096];
    for (int i = 0; i < 4096; i++)
        xs[i] = -8.0f + 16.0f * (float)i / 4095.0f;
    for (int k = 0; k < 2; k++) {
        ct_ctx_params cp = ct_ctx_default_params();
        cp.kernels = k ? CT_KERNELS_REFERENCE : CT_KERNELS_FAST;
        ct_ctx *ctx = NULL;
        ct_graph *g = NULL;
        CT_CHECK_INT(ct_ctx_create(&cp, &ctx), CT_OK);
        CT_CHECK_INT(ct_graph_create(ctx, NULL, &g), CT_OK);
        ct_tensor *x = ct_graph_wrap(g, xs, CT_F32, 1, (const int64_t[]){4096});
        x->flags |= CT_TENSOR_REQUIRES_GRAD;
        ct_tensor *y = ct_op_gelu(g, x, CT_GELU_ERF);
        CT_CHECK_INT(ct_graph_backward(g, ct_op_sum_all(g, y)), CT_OK);
        if (y && x->grad) {
            memcpy(out[k], y->data, sizeof out[k]);
            memcpy(grad[k], x->grad, sizeof grad[k]);
        }
        ct_graph_destroy(g);
        ct_ctx_destroy(ctx);
    }
    CT_CHECK_ARRAYS("gelu", out[0], out[1], 4096, 1e-6, 1e-6);
    CT_CHECK_ARRAYS("gelu'", grad[0], grad[1], 4096, 1e-6, 1e-6);
}

int main(void) {
    CT_RUN(kernel_sets_should_agree_on_linear);
    CT_RUN(kernel_sets_should_agree_on_conv2d);
    CT_RUN(context_should_reject_unknown_kernel_set);
    CT_RUN(vmath_should_match_libm);
    CT_RUN(gelu_should_agree_between_kernel_sets);
    CT_RUN(round_bf16_should_match_reference);
    return ct_test_finish();
}
