/*
 * test_autocast.c - bf16 mixed precision (ct_graph_set_autocast). Each op that autocasts
 * (linear, matmul, batched matmul, conv2d, causal attention) must give, forward and backward,
 * exactly the bits of the same op in f32 on operands and an incoming gradient rounded to bf16
 * beforehand: that is the contract, and it pins the rounding to the operands (bias, outputs
 * and gradients stay f32). Checked for every kernel set, for 1 and 2 threads, and with the
 * setting switched off between forward and backward (nodes remember how they ran). Then
 * oneDNN's bf16 matmul (forced on with CT_BF16_KERNELS_ONEDNN, which oneDNN emulates on a
 * CPU without AVX512_BF16) on shapes big enough to take it: the same products, so the same
 * results to f32 rounding, the same bits for 1 and 2 threads, and it did run.
 */
#include <string.h>

#include "ctrain/ctrain.h"
#include "harness.h"
#include "kernels/kernels.h"

#ifdef _OPENMP
#include <dnnl.h>
#endif

typedef enum op_kind {
    OP_LINEAR,
    OP_MATMUL,
    OP_BMATMUL,
    OP_CONV,
    OP_ATTENTION,
    OP_LINEAR_BIG, /* the big ones: every GEMM of 1 MFLOP or more, so oneDNN takes it */
    OP_MATMUL_BIG,
    OP_BMATMUL_BIG,
    OP_KIND_COUNT
} op_kind;

static const char *const op_names[OP_KIND_COUNT] = {
    "linear",    "matmul",     "batched matmul", "conv2d",
    "attention", "big linear", "big matmul",     "big batched matmul"};

typedef struct op_case {
    int32_t n_in;
    int32_t ndim[3];
    int64_t shape[3][4];
    bool rounded[3]; /* inputs the op rounds (not the bias) */
} op_case;

static const op_case cases[OP_KIND_COUNT] = {
    [OP_LINEAR] = {3, {2, 2, 1}, {{6, 37}, {19, 37}, {19}}, {true, true, false}},
    [OP_MATMUL] = {2, {3, 2}, {{5, 7, 33}, {33, 12}}, {true, true}},
    [OP_BMATMUL] = {2, {3, 3}, {{3, 5, 33}, {3, 33, 12}}, {true, true}},
    [OP_CONV] = {3, {4, 4, 1}, {{2, 3, 9, 9}, {8, 3, 3, 3}, {8}}, {true, true, false}},
    [OP_ATTENTION] = {1, {3}, {{2, 16, 96}}, {true}},
    [OP_LINEAR_BIG] = {3, {2, 2, 1}, {{64, 256}, {384, 256}, {384}}, {true, true, false}},
    [OP_MATMUL_BIG] = {2, {3, 2}, {{4, 16, 256}, {256, 128}}, {true, true}},
    [OP_BMATMUL_BIG] = {2, {3, 3}, {{2, 64, 128}, {2, 128, 96}}, {true, true}},
};

typedef struct result {
    float *v[4]; /* output, then each input's gradient */
    int64_t n[4];
    int64_t bf16_gemms; /* GEMMs oneDNN's bf16 matmul took */
} result;

static ct_bf16_kernels g_bf16_kernels = CT_BF16_KERNELS_F32; /* of the next run */

static float round_bf16(float x) {
    return ct_f32_from_bf16(ct_bf16_from_f32(x));
}

static ct_tensor *apply(ct_graph *g, op_kind k, ct_tensor **in) {
    ct_conv2d_params cp = ct_conv2d_default_params();
    cp.padding[0] = cp.padding[1] = 1;
    switch (k) {
    case OP_LINEAR:
    case OP_LINEAR_BIG:
        return ct_op_linear(g, in[0], in[1], in[2]);
    case OP_MATMUL:
    case OP_BMATMUL:
    case OP_MATMUL_BIG:
    case OP_BMATMUL_BIG:
        return ct_op_matmul(g, in[0], in[1]);
    case OP_CONV:
        return ct_op_conv2d(g, in[0], in[1], in[2], &cp);
    case OP_ATTENTION:
        return ct_op_causal_attention(g, in[0], 4);
    case OP_KIND_COUNT:
        break;
    }
    return NULL;
}

typedef enum mode { AUTOCAST, AUTOCAST_OFF_FOR_BACKWARD, EMULATED, PLAIN_F32 } mode;

/* One forward and backward of op k: AUTOCAST under bf16 autocast; EMULATED in f32 on inputs
 * and a seed rounded beforehand; PLAIN_F32 on the raw values. */
static result run(op_kind k, ct_kernels kernels, int64_t threads, mode m) {
    ct_ctx_params p = ct_ctx_default_params();
    p.kernels = kernels;
    p.n_threads = threads;
    p.bf16_kernels = g_bf16_kernels;
    ct_ctx *ctx = NULL;
    if (ct_ctx_create(&p, &ctx) != CT_OK) abort();
    ct_graph *g = NULL;
    CT_CHECK(ct_graph_create(ctx, NULL, &g) == CT_OK);
    if (m == AUTOCAST || m == AUTOCAST_OFF_FOR_BACKWARD)
        CT_CHECK(ct_graph_set_autocast(g, CT_BF16) == CT_OK && ct_graph_autocast(g) == CT_BF16);
    const op_case *c = &cases[k];
    ct_tensor *in[3] = {NULL, NULL, NULL};
    for (int32_t i = 0; i < c->n_in; i++) {
        in[i] = ct_graph_new(g, CT_F32, c->ndim[i], c->shape[i]);
        ct_rng r = ct_rng_init(100 + (uint64_t)i, (uint64_t)k);
        float *v = in[i]->data;
        int64_t n = ct_tensor_numel(in[i]);
        ct_rng_normal(&r, v, n, 0.0f, 1.0f);
        if (m == EMULATED && c->rounded[i])
            for (int64_t j = 0; j < n; j++)
                v[j] = round_bf16(v[j]);
        in[i]->flags |= CT_TENSOR_REQUIRES_GRAD;
    }
    ct_tensor *y = apply(g, k, in);
    CT_CHECK(y != NULL);
    result out;
    memset(&out, 0, sizeof out);
    if (!y) return out;
    int64_t ny = ct_tensor_numel(y);
    float *seed = malloc((size_t)ny * sizeof(float));
    ct_rng r = ct_rng_init(7, (uint64_t)k);
    ct_rng_normal(&r, seed, ny, 0.0f, 1.0f);
    if (m == EMULATED)
        for (int64_t j = 0; j < ny; j++)
            seed[j] = round_bf16(seed[j]);
    out.n[0] = ny;
    out.v[0] = malloc((size_t)ny * sizeof(float));
    memcpy(out.v[0], y->data, (size_t)ny * sizeof(float));
    if (m == AUTOCAST_OFF_FOR_BACKWARD) ct_graph_set_autocast(g, CT_F32);
    CT_CHECK(ct_graph_backward_seed(g, y, seed) == CT_OK);
    for (int32_t i = 0; i < c->n_in; i++) {
        out.n[i + 1] = ct_tensor_numel(in[i]);
        out.v[i + 1] = malloc((size_t)out.n[i + 1] * sizeof(float));
        memcpy(out.v[i + 1], in[i]->grad, (size_t)out.n[i + 1] * sizeof(float));
    }
    free(seed);
    out.bf16_gemms = ct_k_onednn_bf16_gemms(ctx);
    ct_graph_destroy(g);
    ct_ctx_destroy(ctx);
    return out;
}

static void release(result *r) {
    for (int i = 0; i < 4; i++)
        free(r->v[i]);
}

static bool same_bits(const result *a, const result *b, int i) {
    return a->n[i] == b->n[i] && a->v[i] && b->v[i] &&
           memcmp(a->v[i], b->v[i], (size_t)a->n[i] * sizeof(float)) == 0;
}

static void autocast_should_equal_f32_on_rounded_operands(void) {
    static const ct_kernels sets[] = {CT_KERNELS_FAST, CT_KERNELS_BLAS, CT_KERNELS_REFERENCE};
    for (int k = 0; k < OP_LINEAR_BIG; k++) {
        for (size_t s = 0; s < sizeof sets / sizeof sets[0]; s++) {
            result a = run((op_kind)k, sets[s], 2, AUTOCAST);
            result e = run((op_kind)k, sets[s], 2, EMULATED);
            for (int i = 0; i <= cases[k].n_in; i++)
                CT_CHECK_MSG(same_bits(&a, &e, i), "%s, kernel set %d: %s differs", op_names[k],
                             (int)sets[s], i == 0 ? "output" : "an input's gradient");
            release(&a);
            release(&e);
        }
    }
}

/* The rounding happens: autocast and plain f32 differ (so the test above can fail). */
static void autocast_should_change_the_arithmetic(void) {
    for (int k = 0; k < OP_LINEAR_BIG; k++) {
        result a = run((op_kind)k, CT_KERNELS_FAST, 1, AUTOCAST);
        result f = run((op_kind)k, CT_KERNELS_FAST, 1, PLAIN_F32);
        CT_CHECK_MSG(!same_bits(&a, &f, 0) && !same_bits(&a, &f, 1), "%s: bf16 equals f32",
                     op_names[k]);
        /* within bf16's 2^-8 relative rounding of each product term */
        CT_CHECK_ARRAYS(op_names[k], a.v[0], f.v[0], a.n[0], 0.1, 0.02);
        release(&a);
        release(&f);
    }
}

static void autocast_should_not_depend_on_threads_or_later_setting(void) {
    for (int k = 0; k < OP_LINEAR_BIG; k++) {
        result one = run((op_kind)k, CT_KERNELS_FAST, 1, AUTOCAST);
        result two = run((op_kind)k, CT_KERNELS_FAST, 2, AUTOCAST);
        result off = run((op_kind)k, CT_KERNELS_FAST, 2, AUTOCAST_OFF_FOR_BACKWARD);
        for (int i = 0; i <= cases[k].n_in; i++) {
            CT_CHECK_MSG(same_bits(&one, &two, i), "%s: 1 and 2 threads differ (%d)", op_names[k],
                         i);
            CT_CHECK_MSG(same_bits(&two, &off, i), "%s: backward followed the later setting (%d)",
                         op_names[k], i);
        }
        release(&one);
        release(&two);
        release(&off);
    }
}

static void onednn_bf16_gemm_should_agree_with_the_f32_kernels(void) {
    for (int k = OP_LINEAR_BIG; k < OP_KIND_COUNT; k++) {
        g_bf16_kernels = CT_BF16_KERNELS_F32;
        result f = run((op_kind)k, CT_KERNELS_FAST, 2, AUTOCAST);
        g_bf16_kernels = CT_BF16_KERNELS_ONEDNN;
        result one = run((op_kind)k, CT_KERNELS_FAST, 1, AUTOCAST);
        result two = run((op_kind)k, CT_KERNELS_FAST, 2, AUTOCAST);
        CT_CHECK_INT(f.bf16_gemms, 0);
#ifdef _OPENMP
        /* forward and both backward GEMMs (matmul: per batch), where oneDNN has a bf16
           matmul: AVX-512 and up (emulated without AVX512_BF16) */
        unsigned isa = (unsigned)dnnl_get_effective_cpu_isa(), avx512 = dnnl_cpu_isa_avx512_core;
        if ((isa & avx512) == avx512)
            CT_CHECK_MSG(two.bf16_gemms >= 3, "%s: %lld GEMM tiles on oneDNN's bf16 matmul",
                         op_names[k], (long long)two.bf16_gemms);
        else if (k == OP_LINEAR_BIG)
            printf("  (this CPU has no AVX-512: oneDNN has no bf16 matmul here, so the f32 "
                   "kernels ran)\n");
#else
        CT_CHECK_INT(two.bf16_gemms, 0); /* no oneDNN without OpenMP: the f32 kernels */
#endif
        for (int i = 0; i <= cases[k].n_in; i++) {
            if (!one.v[i] || !two.v[i] || !f.v[i]) continue;
            CT_CHECK_MSG(same_bits(&one, &two, i), "%s: 1 and 2 threads differ (%d)", op_names[k],
                         i);
            CT_CHECK_ARRAYS(op_names[k], two.v[i], f.v[i], two.n[i], 1e-4, 1e-5);
        }
        release(&f);
        release(&one);
        release(&two);
    }
    g_bf16_kernels = CT_BF16_KERNELS_F32;
}

static void autocast_should_reject_other_dtypes(void) {
    ct_ctx *ctx = NULL;
    ct_graph *g = NULL;
    CT_CHECK(ct_ctx_create(NULL, &ctx) == CT_OK && ct_graph_create(ctx, NULL, &g) == CT_OK);
    CT_CHECK_INT(ct_graph_set_autocast(g, CT_I32), CT_ERR_INVALID_ARG);
    CT_CHECK(ct_graph_autocast(g) == CT_F32);
    CT_CHECK(strstr(ct_last_error(ctx), "autocast") != NULL);
    ct_graph_reset(g);
    CT_CHECK(ct_graph_set_autocast(g, CT_BF16) == CT_OK);
    ct_graph_reset(g); /* the setting survives a reset, as training mode does */
    CT_CHECK(ct_graph_autocast(g) == CT_BF16);
    ct_graph_destroy(g);
    ct_ctx_destroy(ctx);
}

int main(void) {
    CT_RUN(autocast_should_equal_f32_on_rounded_operands);
    CT_RUN(autocast_should_change_the_arithmetic);
    CT_RUN(autocast_should_not_depend_on_threads_or_later_setting);
    CT_RUN(onednn_bf16_gemm_should_agree_with_the_f32_kernels);
    CT_RUN(autocast_should_reject_other_dtypes);
    return ct_test_finish();
}
