/*
 * test_golden_ops.c - the ops of ops.h against PyTorch's outputs and input gradients from
 * fixtures/ops.bin (gen_golden.py): elementwise with broadcasting, activations, reductions,
 * shape ops, matmul and linear, convolution and pooling, batch and layer norm, indexing and
 * causal attention. Dropout is not here (its masks come from a different RNG).
 */
#include "golden.h"

static gold G;

/* ---- forward builders: in[] holds the case's inputs in the order listed at the call ---- */

static ct_tensor *f_add(ct_graph *g, ct_tensor **in, const void *u) {
    (void)u;
    return ct_op_add(g, in[0], in[1]);
}
static ct_tensor *f_sub(ct_graph *g, ct_tensor **in, const void *u) {
    (void)u;
    return ct_op_sub(g, in[0], in[1]);
}
static ct_tensor *f_mul(ct_graph *g, ct_tensor **in, const void *u) {
    (void)u;
    return ct_op_mul(g, in[0], in[1]);
}
static ct_tensor *f_div(ct_graph *g, ct_tensor **in, const void *u) {
    (void)u;
    return ct_op_div(g, in[0], in[1]);
}
static ct_tensor *f_scale(ct_graph *g, ct_tensor **in, const void *u) {
    (void)u;
    return ct_op_scale(g, in[0], -1.7f);
}
static ct_tensor *f_add_scalar(ct_graph *g, ct_tensor **in, const void *u) {
    (void)u;
    return ct_op_add_scalar(g, in[0], 0.3f);
}

typedef struct axis_args {
    int32_t axis;
    bool keepdim;
} axis_args;

static ct_tensor *f_sum(ct_graph *g, ct_tensor **in, const void *u) {
    const axis_args *a = u;
    return ct_op_sum(g, in[0], a->axis, a->keepdim);
}
static ct_tensor *f_mean(ct_graph *g, ct_tensor **in, const void *u) {
    const axis_args *a = u;
    return ct_op_mean(g, in[0], a->axis, a->keepdim);
}
static ct_tensor *f_sum_all(ct_graph *g, ct_tensor **in, const void *u) {
    (void)u;
    return ct_op_sum_all(g, in[0]);
}
static ct_tensor *f_mean_all(ct_graph *g, ct_tensor **in, const void *u) {
    (void)u;
    return ct_op_mean_all(g, in[0]);
}
static ct_tensor *f_softmax(ct_graph *g, ct_tensor **in, const void *u) {
    return ct_op_softmax(g, in[0], *(const int32_t *)u);
}
static ct_tensor *f_log_softmax(ct_graph *g, ct_tensor **in, const void *u) {
    return ct_op_log_softmax(g, in[0], *(const int32_t *)u);
}

static ct_tensor *f_relu(ct_graph *g, ct_tensor **in, const void *u) {
    (void)u;
    return ct_op_relu(g, in[0]);
}
static ct_tensor *f_leaky_relu(ct_graph *g, ct_tensor **in, const void *u) {
    (void)u;
    return ct_op_leaky_relu(g, in[0], 0.1f);
}
static ct_tensor *f_gelu(ct_graph *g, ct_tensor **in, const void *u) {
    return ct_op_gelu(g, in[0], *(const ct_gelu_approx *)u);
}
static ct_tensor *f_silu(ct_graph *g, ct_tensor **in, const void *u) {
    (void)u;
    return ct_op_silu(g, in[0]);
}
static ct_tensor *f_tanh(ct_graph *g, ct_tensor **in, const void *u) {
    (void)u;
    return ct_op_tanh(g, in[0]);
}
static ct_tensor *f_sigmoid(ct_graph *g, ct_tensor **in, const void *u) {
    (void)u;
    return ct_op_sigmoid(g, in[0]);
}

static ct_tensor *f_matmul(ct_graph *g, ct_tensor **in, const void *u) {
    (void)u;
    return ct_op_matmul(g, in[0], in[1]);
}
static ct_tensor *f_linear(ct_graph *g, ct_tensor **in, const void *u) {
    (void)u;
    return ct_op_linear(g, in[0], in[1], in[2]);
}
static ct_tensor *f_linear_nobias(ct_graph *g, ct_tensor **in, const void *u) {
    (void)u;
    return ct_op_linear(g, in[0], in[1], NULL);
}

static ct_tensor *f_transpose(ct_graph *g, ct_tensor **in, const void *u) {
    (void)u;
    return ct_op_transpose(g, in[0], 0, 2);
}
static ct_tensor *f_permute(ct_graph *g, ct_tensor **in, const void *u) {
    (void)u;
    return ct_op_permute(g, in[0], (const int32_t[]){2, 0, 3, 1});
}
static ct_tensor *f_concat(ct_graph *g, ct_tensor **in, const void *u) {
    (void)u;
    return ct_op_concat(g, 3, in, 1);
}
static ct_tensor *f_narrow(ct_graph *g, ct_tensor **in, const void *u) {
    (void)u;
    return ct_op_narrow(g, in[0], 1, 2, 3);
}

static ct_tensor *f_conv(ct_graph *g, ct_tensor **in, const void *u) {
    const ct_conv2d_params *p = u;
    return ct_op_conv2d(g, in[0], in[1], in[2], p); /* in[2] is NULL without bias */
}
static ct_tensor *f_max_pool(ct_graph *g, ct_tensor **in, const void *u) {
    return ct_op_max_pool2d(g, in[0], u);
}
static ct_tensor *f_avg_pool(ct_graph *g, ct_tensor **in, const void *u) {
    return ct_op_avg_pool2d(g, in[0], u);
}
static ct_tensor *f_global_avg_pool(ct_graph *g, ct_tensor **in, const void *u) {
    (void)u;
    return ct_op_global_avg_pool(g, in[0]);
}

static ct_tensor *f_batch_norm(ct_graph *g, ct_tensor **in, const void *u) {
    (void)u;
    return ct_op_batch_norm(g, in[0], in[1], in[2], in[3], in[4], in[5], 0.1f, 1e-5f);
}
static ct_tensor *f_layer_norm(ct_graph *g, ct_tensor **in, const void *u) {
    (void)u;
    return ct_op_layer_norm(g, in[0], in[1], in[2], 1e-5f);
}
static ct_tensor *f_layer_norm_noaffine(ct_graph *g, ct_tensor **in, const void *u) {
    (void)u;
    return ct_op_layer_norm(g, in[0], NULL, NULL, 1e-5f);
}
static ct_tensor *f_embedding(ct_graph *g, ct_tensor **in, const void *u) {
    (void)u;
    return ct_op_embedding(g, in[0], in[1]);
}
static ct_tensor *f_index_select(ct_graph *g, ct_tensor **in, const void *u) {
    (void)u;
    return ct_op_index_select(g, in[0], in[1]);
}
static ct_tensor *f_gather(ct_graph *g, ct_tensor **in, const void *u) {
    (void)u;
    return ct_op_gather(g, in[0], in[1]);
}
static ct_tensor *f_attention(ct_graph *g, ct_tensor **in, const void *u) {
    return ct_op_causal_attention(g, in[0], *(const int64_t *)u);
}

static const char *const X[] = {"x"};
static const char *const AB[] = {"a", "b"};

/* ---- tests ---- */

static void golden_elementwise_should_match_pytorch(void) {
    gold_case(&G, "add", 2, AB, f_add, NULL, NULL);
    gold_case(&G, "sub", 2, AB, f_sub, NULL, NULL);
    gold_case(&G, "mul", 2, AB, f_mul, NULL, NULL);
    gold_case(&G, "div", 2, AB, f_div, NULL, NULL);
    gold_case(&G, "div_same", 2, AB, f_div, NULL, NULL);
    gold_case(&G, "scale", 1, X, f_scale, NULL, NULL);
    gold_case(&G, "add_scalar", 1, X, f_add_scalar, NULL, NULL);
}

static void golden_reductions_should_match_pytorch(void) {
    gold_case(&G, "sum_axis1", 1, X, f_sum, &(axis_args){1, false}, NULL);
    gold_case(&G, "sum_axis0_keep", 1, X, f_sum, &(axis_args){0, true}, NULL);
    gold_case(&G, "mean_axis_last_keep", 1, X, f_mean, &(axis_args){-1, true}, NULL);
    gold_case(&G, "mean_axis1", 1, X, f_mean, &(axis_args){1, false}, NULL);
    gold_case(&G, "sum_all", 1, X, f_sum_all, NULL, NULL);
    gold_case(&G, "mean_all", 1, X, f_mean_all, NULL, NULL);
}

static void golden_softmax_should_match_pytorch(void) {
    const int32_t last = -1, one = 1;
    gold_case(&G, "softmax_last", 1, X, f_softmax, &last, NULL);
    gold_case(&G, "softmax_axis1", 1, X, f_softmax, &one, NULL);
    gold_case(&G, "log_softmax_last", 1, X, f_log_softmax, &last, NULL);
    gold_case(&G, "log_softmax_axis1", 1, X, f_log_softmax, &one, NULL);
}

static void golden_activations_should_match_pytorch(void) {
    const ct_gelu_approx erf = CT_GELU_ERF, tanh_approx = CT_GELU_TANH;
    gold_case(&G, "relu", 1, X, f_relu, NULL, NULL);
    gold_case(&G, "leaky_relu", 1, X, f_leaky_relu, NULL, NULL);
    gold_case(&G, "gelu_erf", 1, X, f_gelu, &erf, NULL);
    gold_case(&G, "gelu_tanh", 1, X, f_gelu, &tanh_approx, NULL);
    gold_case(&G, "silu", 1, X, f_silu, NULL, NULL);
    gold_case(&G, "tanh", 1, X, f_tanh, NULL, NULL);
    gold_case(&G, "sigmoid", 1, X, f_sigmoid, NULL, NULL);
}

static void golden_matmul_and_linear_should_match_pytorch(void) {
    gold_case(&G, "matmul_2d", 2, AB, f_matmul, NULL, NULL);
    gold_case(&G, "matmul_bcast", 2, AB, f_matmul, NULL, NULL);
    gold_case(&G, "matmul_batched", 2, AB, f_matmul, NULL, NULL);
    gold_case(&G, "linear", 3, (const char *const[]){"x", "w", "b"}, f_linear, NULL, NULL);
    gold_case(&G, "linear_nobias", 2, (const char *const[]){"x", "w"}, f_linear_nobias, NULL, NULL);
}

static void golden_shape_ops_should_match_pytorch(void) {
    gold_case(&G, "transpose", 1, X, f_transpose, NULL, NULL);
    gold_case(&G, "permute", 1, X, f_permute, NULL, NULL);
    gold_case(&G, "concat", 3, (const char *const[]){"a", "b", "c"}, f_concat, NULL, NULL);
    gold_case(&G, "narrow", 1, X, f_narrow, NULL, NULL);
}

static ct_conv2d_params conv_params(
    int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dh, int64_t dw, int64_t groups) {
    ct_conv2d_params p = ct_conv2d_default_params();
    p.stride[0] = sh;
    p.stride[1] = sw;
    p.padding[0] = ph;
    p.padding[1] = pw;
    p.dilation[0] = dh;
    p.dilation[1] = dw;
    p.groups = groups;
    return p;
}

static void golden_conv2d_should_match_pytorch(void) {
    static const char *const xwb[] = {"x", "w", "b"};
    ct_conv2d_params p = conv_params(1, 1, 0, 0, 1, 1, 1);
    gold_case(&G, "conv_basic", 3, xwb, f_conv, &p, NULL);
    p = conv_params(2, 2, 1, 1, 1, 1, 1);
    gold_case(&G, "conv_stride2_pad1", 3, xwb, f_conv, &p, NULL);
    p = conv_params(1, 1, 2, 2, 2, 2, 1);
    gold_case(&G, "conv_dilation2", 3, xwb, f_conv, &p, NULL);
    p = conv_params(1, 1, 1, 1, 1, 1, 2);
    gold_case(&G, "conv_groups2", 3, xwb, f_conv, &p, NULL);
    p = conv_params(2, 1, 1, 0, 1, 2, 1);
    gold_case(&G, "conv_asym_nobias", 2, xwb, f_conv, &p, NULL);
    p = conv_params(1, 1, 1, 1, 1, 1, 3);
    gold_case(&G, "conv_depthwise", 3, xwb, f_conv, &p, NULL);
}

static void golden_pooling_should_match_pytorch(void) {
    ct_pool2d_params k2 = {{2, 2}, {0, 0}, {0, 0}};
    ct_pool2d_params k3 = {{3, 3}, {2, 2}, {1, 1}};
    gold_case(&G, "max_pool_k2", 1, X, f_max_pool, &k2, NULL);
    gold_case(&G, "max_pool_k3_s2_p1", 1, X, f_max_pool, &k3, NULL);
    gold_case(&G, "avg_pool_k2", 1, X, f_avg_pool, &k2, NULL);
    gold_case(&G, "avg_pool_k3_s2_p1", 1, X, f_avg_pool, &k3, NULL);
    gold_case(&G, "global_avg_pool", 1, X, f_global_avg_pool, NULL, NULL);
}

static void golden_batch_norm_should_match_pytorch(void) {
    static const char *const ins[] = {
        "x", "w", "b", "running_mean", "running_var", "num_batches_tracked"};
    static const char *const cases[] = {"batch_norm_4d", "batch_norm_2d"};
    for (int c = 0; c < 2; c++) {
        ct_tensor *in[6] = {0};
        ct_tensor *out = gold_case(&G, cases[c], 6, ins, f_batch_norm, NULL, in);
        if (!out) continue;
        char key[96];
        /* the running statistics are updated in place (unbiased variance, momentum 0.1) */
        snprintf(key, sizeof key, "%s/running_mean_out", cases[c]);
        gold_compare(&G, key, in[3], in[3]->data, GOLD_ATOL, GOLD_RTOL);
        snprintf(key, sizeof key, "%s/running_var_out", cases[c]);
        gold_compare(&G, key, in[4], in[4]->data, GOLD_ATOL, GOLD_RTOL);
        snprintf(key, sizeof key, "%s/num_batches_tracked_out", cases[c]);
        gold_compare(&G, key, in[5], NULL, 0, 0);
    }
}

static void golden_layer_norm_should_match_pytorch(void) {
    gold_case(&G, "layer_norm", 3, (const char *const[]){"x", "w", "b"}, f_layer_norm, NULL, NULL);
    gold_case(&G, "layer_norm_noaffine", 1, X, f_layer_norm_noaffine, NULL, NULL);
}

static void golden_indexing_should_match_pytorch(void) {
    gold_case(&G, "embedding", 2, (const char *const[]){"w", "idx"}, f_embedding, NULL, NULL);
    gold_case(&G, "index_select", 2, (const char *const[]){"x", "idx"}, f_index_select, NULL, NULL);
    gold_case(&G, "gather", 2, (const char *const[]){"x", "idx"}, f_gather, NULL, NULL);
    gold_case(&G, "gather_3d", 2, (const char *const[]){"x", "idx"}, f_gather, NULL, NULL);
}

static void golden_causal_attention_should_match_pytorch(void) {
    static const char *const qkv[] = {"qkv"};
    const int64_t two = 2, four = 4;
    gold_case(&G, "attention", 1, qkv, f_attention, &two, NULL);
    gold_case(&G, "attention_4h", 1, qkv, f_attention, &four, NULL);
}

int main(void) {
    static const int64_t threads[] = {1, 4};
    for (int i = 0; i < 2; i++) {
        if (!gold_open(&G, "ops.bin", threads[i])) break;
        CT_RUN(golden_elementwise_should_match_pytorch);
        CT_RUN(golden_reductions_should_match_pytorch);
        CT_RUN(golden_softmax_should_match_pytorch);
        CT_RUN(golden_activations_should_match_pytorch);
        CT_RUN(golden_matmul_and_linear_should_match_pytorch);
        CT_RUN(golden_shape_ops_should_match_pytorch);
        CT_RUN(golden_conv2d_should_match_pytorch);
        CT_RUN(golden_pooling_should_match_pytorch);
        CT_RUN(golden_batch_norm_should_match_pytorch);
        CT_RUN(golden_layer_norm_should_match_pytorch);
        CT_RUN(golden_indexing_should_match_pytorch);
        CT_RUN(golden_causal_attention_should_match_pytorch);
        gold_close(&G);
    }
    gold_close(&G);
    return ct_test_finish();
}
