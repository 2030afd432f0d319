/*
 * test_grad_basic.c - finite-difference checks of every backward in elementwise.c,
 * activation.c, softmax.c, reduce.c, shape.c and matmul.c.
 */
#include "gradcheck.h"

static ct_ctx *ctx;

#define FWD(name, expr)                                                                            \
    static ct_tensor *name(ct_graph *g, ct_tensor **in, void *user) {                              \
        (void)user;                                                                                \
        return (expr);                                                                             \
    }

FWD(f_add, ct_op_add(g, in[0], in[1]))
FWD(f_sub, ct_op_sub(g, in[0], in[1]))
FWD(f_mul, ct_op_mul(g, in[0], in[1]))
FWD(f_div, ct_op_div(g, in[0], in[1]))
FWD(f_scale, ct_op_scale(g, ct_op_add_scalar(g, in[0], 0.5f), -1.5f))
FWD(f_relu, ct_op_relu(g, in[0]))
FWD(f_leaky, ct_op_leaky_relu(g, in[0], 0.1f))
FWD(f_gelu, ct_op_gelu(g, in[0], CT_GELU_ERF))
FWD(f_gelu_tanh, ct_op_gelu(g, in[0], CT_GELU_TANH))
FWD(f_silu, ct_op_silu(g, in[0]))
FWD(f_tanh, ct_op_tanh(g, in[0]))
FWD(f_sigmoid, ct_op_sigmoid(g, in[0]))
FWD(f_softmax0, ct_op_softmax(g, in[0], 0))
FWD(f_softmax1, ct_op_softmax(g, in[0], -1))
FWD(f_log_softmax1, ct_op_log_softmax(g, in[0], 1))
FWD(f_log_softmax2, ct_op_log_softmax(g, in[0], 2))
FWD(f_sum1, ct_op_sum(g, in[0], 1, false))
FWD(f_mean2, ct_op_mean(g, in[0], -1, true))
FWD(f_sum_all, ct_op_sum_all(g, in[0]))
FWD(f_mean_all, ct_op_mean_all(g, in[0]))
FWD(f_reshape,
    ct_op_mul(g,
              ct_op_reshape(g, in[0], 2, (int64_t[]){4, -1}),
              ct_op_reshape(g, in[0], 2, (int64_t[]){4, 6})))
FWD(f_flatten, ct_op_flatten(g, in[0], 1))
FWD(f_transpose, ct_op_transpose(g, in[0], 0, 2))
FWD(f_permute, ct_op_permute(g, in[0], (int32_t[]){1, 2, 0}))
FWD(f_narrow, ct_op_narrow(g, in[0], 1, 1, 2))
FWD(f_matmul, ct_op_matmul(g, in[0], in[1]))
FWD(f_linear, ct_op_linear(g, in[0], in[1], in[2]))
FWD(f_linear_nobias, ct_op_linear(g, in[0], in[1], NULL))
FWD(f_gelu_linear, ct_op_gelu_linear(g, in[0], CT_GELU_ERF, in[1], in[2]))
FWD(f_gelu_tanh_linear, ct_op_gelu_linear(g, in[0], CT_GELU_TANH, in[1], NULL))
/* the _over form needs an op's output to write over */
FWD(f_gelu_linear_over,
    ct_op_gelu_linear_over(g, ct_op_add_scalar(g, in[0], 0.25f), CT_GELU_ERF, in[1], in[2]))
FWD(f_gelu_tanh_linear_over,
    ct_op_gelu_linear_over(g, ct_op_add_scalar(g, in[0], 0.25f), CT_GELU_TANH, in[1], NULL))

static ct_tensor *f_concat(ct_graph *g, ct_tensor **in, void *user) {
    (void)user;
    ct_tensor *xs[3] = {in[0], in[1], in[0]};
    return ct_op_concat(g, 3, xs, 1);
}

static ct_tensor *f_split(ct_graph *g, ct_tensor **in, void *user) {
    (void)user;
    ct_tensor *parts[2];
    ct_op_split(g, in[0], 2, 2, (int64_t[]){1, 3}, parts);
    /* use both parts so each backward path is exercised */
    return ct_op_add(g, ct_op_sum(g, parts[0], 2, true), ct_op_scale(g, parts[1], 2.0f));
}

static gc_input input(int32_t ndim, const int64_t *shape, uint64_t seed, float lo, float hi) {
    gc_input in;
    memset(&in, 0, sizeof in);
    in.dtype = CT_F32;
    in.ndim = ndim;
    int64_t n = 1;
    for (int32_t d = 0; d < ndim; d++)
        n *= (in.shape[d] = shape[d]);
    in.data = malloc((size_t)n * sizeof(float));
    gc_fill(in.data, n, seed, lo, hi);
    in.grad = true;
    return in;
}

static void
check1(const char *what, gc_forward_fn f, int32_t ndim, const int64_t *shape, float lo, float hi) {
    gc_input in = input(ndim, shape, 7, lo, hi);
    gc_check(what, ctx, 1, &in, f, NULL, NULL);
    free(in.data);
}

static void elementwise_should_have_correct_gradients(void) {
    struct {
        const char *what;
        gc_forward_fn f;
    } cases[] = {{"add", f_add}, {"sub", f_sub}, {"mul", f_mul}, {"div", f_div}};
    /* same shapes, bias-like suffix, middle broadcast, scalar, a broadcast on both sides */
    int64_t sa[][3] = {{3, 4, 5}, {3, 4, 5}, {3, 4, 5}, {3, 4, 5}, {3, 1, 5}};
    int64_t sb[][3] = {{3, 4, 5}, {5, 0, 0}, {3, 1, 5}, {1, 0, 0}, {4, 1, 0}};
    int32_t nb[] = {3, 1, 3, 1, 2};
    for (int c = 0; c < 4; c++) {
        for (int s = 0; s < 5; s++) {
            gc_input in[2] = {input(3, sa[s], 1, -1.0f, 1.0f), input(nb[s], sb[s], 2, 0.5f, 1.5f)};
            char what[64];
            snprintf(what, sizeof what, "%s case %d", cases[c].what, s);
            gc_check(what, ctx, 2, in, cases[c].f, NULL, NULL);
            free(in[0].data);
            free(in[1].data);
        }
    }
    check1("scale/add_scalar", f_scale, 2, (int64_t[]){3, 4}, -1, 1);
}

/* Inputs avoid the kinks of relu and leaky_relu at 0: values in [0.05, 1] with random sign. */
static void activations_should_have_correct_gradients(void) {
    gc_input in = input(2, (int64_t[]){6, 7}, 3, 0.05f, 1.0f);
    float *x = in.data;
    for (int i = 0; i < 42; i++)
        if (i % 3 == 1) x[i] = -x[i];
    gc_check("relu", ctx, 1, &in, f_relu, NULL, NULL);
    gc_check("leaky_relu", ctx, 1, &in, f_leaky, NULL, NULL);
    free(in.data);
    int64_t s[] = {5, 9};
    check1("gelu", f_gelu, 2, s, -3, 3);
    check1("gelu_tanh", f_gelu_tanh, 2, s, -3, 3);
    check1("silu", f_silu, 2, s, -4, 4);
    check1("tanh", f_tanh, 2, s, -2, 2);
    check1("sigmoid", f_sigmoid, 2, s, -4, 4);
}

static void softmax_should_have_correct_gradients(void) {
    int64_t s[] = {3, 4, 5};
    check1("softmax axis 0", f_softmax0, 3, s, -2, 2);
    check1("softmax axis -1", f_softmax1, 3, s, -2, 2);
    check1("log_softmax axis 1", f_log_softmax1, 3, s, -2, 2);
    check1("log_softmax axis 2", f_log_softmax2, 3, s, -2, 2);
}

static void reductions_should_have_correct_gradients(void) {
    int64_t s[] = {3, 4, 5};
    check1("sum axis 1", f_sum1, 3, s, -1, 1);
    check1("mean axis -1 keepdim", f_mean2, 3, s, -1, 1);
    check1("sum_all", f_sum_all, 3, s, -1, 1);
    check1("mean_all", f_mean_all, 3, s, -1, 1);
}

static void shape_ops_should_have_correct_gradients(void) {
    int64_t s[] = {2, 3, 4};
    check1("reshape", f_reshape, 3, s, -1, 1);
    check1("flatten", f_flatten, 3, s, -1, 1);
    check1("transpose", f_transpose, 3, s, -1, 1);
    check1("permute", f_permute, 3, s, -1, 1);
    check1("narrow", f_narrow, 3, s, -1, 1);
    check1("split", f_split, 3, s, -1, 1);
    gc_input in[2] = {input(3, (int64_t[]){2, 3, 4}, 1, -1, 1),
                      input(3, (int64_t[]){2, 2, 4}, 2, -1, 1)};
    gc_check("concat", ctx, 2, in, f_concat, NULL, NULL);
    free(in[0].data);
    free(in[1].data);
}

static void matmul_should_have_correct_gradients(void) {
    gc_input a = input(3, (int64_t[]){2, 3, 4}, 1, -1, 1);
    gc_input b = input(2, (int64_t[]){4, 5}, 2, -1, 1);
    gc_input in[2] = {a, b};
    gc_check("matmul plain", ctx, 2, in, f_matmul, NULL, NULL);
    gc_input bb = input(3, (int64_t[]){2, 4, 5}, 3, -1, 1);
    gc_input inb[2] = {a, bb};
    gc_check("matmul batched", ctx, 2, inb, f_matmul, NULL, NULL);
    gc_input x = input(3, (int64_t[]){2, 3, 4}, 4, -1, 1);
    gc_input w = input(2, (int64_t[]){6, 4}, 5, -1, 1);
    gc_input bias = input(1, (int64_t[]){6}, 6, -1, 1);
    gc_input inl[3] = {x, w, bias};
    gc_check("linear", ctx, 3, inl, f_linear, NULL, NULL);
    gc_check("linear without bias", ctx, 2, inl, f_linear_nobias, NULL, NULL);
    gc_check("gelu_linear", ctx, 3, inl, f_gelu_linear, NULL, NULL);
    gc_check("gelu_linear (tanh) without bias", ctx, 2, inl, f_gelu_tanh_linear, NULL, NULL);
    gc_check("gelu_linear_over", ctx, 3, inl, f_gelu_linear_over, NULL, NULL);
    gc_check("gelu_linear_over (tanh) without bias", ctx, 2, inl, f_gelu_tanh_linear_over, NULL,
             NULL);
    free(a.data);
    free(b.data);
    free(bb.data);
    free(x.data);
    free(w.data);
    free(bias.data);
}

int main(void) {
    ct_ctx_params p = ct_ctx_default_params();
    p.n_threads = 2;
    if (ct_ctx_create(&p, &ctx) != CT_OK) return 1;
    CT_RUN(elementwise_should_have_correct_gradients);
    CT_RUN(activations_should_have_correct_gradients);
    CT_RUN(softmax_should_have_correct_gradients);
    CT_RUN(reductions_should_have_correct_gradients);
    CT_RUN(shape_ops_should_have_correct_gradients);
    CT_RUN(matmul_should_have_correct_gradients);
    ct_ctx_destroy(ctx);
    return ct_test_finish();
}
