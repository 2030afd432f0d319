/*
 * test_ops_basic.c - forward values, errors and fast-vs-reference agreement of the basic ops;
 * no-grad mode; bitwise determinism across thread counts; and a training step that makes no
 * heap allocation after the first.
 */
#include <string.h>

#include "ctrain/ctrain.h"
#include "harness.h"
#include "test_alloc.h"

static ct_ctx *new_ctx(int64_t threads, int reference, test_alloc *ta) {
    ct_ctx_params p = ct_ctx_default_params();
    p.n_threads = threads;
    p.kernels = (ct_kernels)reference;
    if (ta) p.allocator = test_allocator(ta);
    ct_ctx *ctx = NULL;
    if (ct_ctx_create(&p, &ctx) != CT_OK) abort();
    return ctx;
}

static ct_tensor *filled(ct_graph *g, int32_t ndim, const int64_t *shape, uint64_t seed) {
    ct_tensor *t = ct_graph_new(g, CT_F32, ndim, shape);
    ct_rng r = ct_rng_init(seed, 0);
    ct_rng_normal(&r, t->data, ct_tensor_numel(t), 0.0f, 1.0f);
    return t;
}

static void ops_should_compute_known_values(void) {
    ct_ctx *ctx = new_ctx(1, 0, NULL);
    ct_graph *g;
    ct_graph_create(ctx, NULL, &g);
    float av[] = {1, 2, 3, 4, 5, 6}, bv[] = {10, 20, 30};
    ct_tensor *a = ct_graph_wrap(g, av, CT_F32, 2, (int64_t[]){2, 3});
    ct_tensor *b = ct_graph_wrap(g, bv, CT_F32, 1, (int64_t[]){3});
    ct_tensor *s = ct_op_add(g, a, b);
    float es[] = {11, 22, 33, 14, 25, 36};
    CT_CHECK_ARRAYS("add", s->data, es, 6, 0, 0);
    ct_tensor *d = ct_op_div(g, b, a);
    CT_CHECK_CLOSE(((float *)d->data)[5], 5.0, 1e-6, 0);
    ct_tensor *sm = ct_op_sum(g, a, 0, false);
    float esm[] = {5, 7, 9};
    CT_CHECK_ARRAYS("sum axis 0", sm->data, esm, 3, 0, 0);
    ct_tensor *mn = ct_op_mean_all(g, a);
    CT_CHECK_CLOSE(((float *)mn->data)[0], 3.5, 1e-6, 0);
    CT_CHECK_INT(mn->ndim, 0);
    ct_tensor *sx = ct_op_softmax(g, a, 1);
    float *sxv = sx->data;
    CT_CHECK_CLOSE(sxv[0] + sxv[1] + sxv[2], 1.0, 1e-6, 0);
    CT_CHECK_CLOSE(sxv[2], 0.66524096, 1e-6, 0);
    ct_tensor *t = ct_op_transpose(g, a, 0, 1);
    float et[] = {1, 4, 2, 5, 3, 6};
    CT_CHECK_ARRAYS("transpose", t->data, et, 6, 0, 0);
    ct_tensor *mm = ct_op_matmul(g, a, ct_op_reshape(g, b, 2, (int64_t[]){3, 1}));
    float emm[] = {140, 320};
    CT_CHECK_ARRAYS("matmul", mm->data, emm, 2, 0, 0);
    ct_tensor *cat = ct_op_concat(g, 2, (ct_tensor *[]){a, a}, 0);
    CT_CHECK_INT(cat->shape[0], 4);
    CT_CHECK(((float *)cat->data)[7] == 2.0f);
    float gv[] = {-1.0f, 0.0f, 1.0f};
    ct_tensor *gx = ct_graph_wrap(g, gv, CT_F32, 1, (int64_t[]){3});
    ct_tensor *ge = ct_op_gelu(g, gx, CT_GELU_ERF), *gt = ct_op_gelu(g, gx, CT_GELU_TANH);
    CT_CHECK_CLOSE(((float *)ge->data)[0], -0.15865525, 1e-6, 1e-5);
    CT_CHECK_CLOSE(((float *)gt->data)[2], 0.84119199, 1e-6, 1e-5);
    CT_CHECK_INT(ct_graph_status(g), CT_OK);
    ct_graph_destroy(g);
    ct_ctx_destroy(ctx);
}

static void ops_should_reject_bad_input_with_context(void) {
    ct_ctx *ctx = new_ctx(1, 0, NULL);
    ct_graph *g;
    ct_graph_create(ctx, NULL, &g);
    ct_tensor *a = filled(g, 2, (int64_t[]){2, 3}, 1), *b = filled(g, 2, (int64_t[]){4, 3}, 2);
    CT_CHECK(ct_op_add(g, a, b) == NULL);
    CT_CHECK_INT(ct_graph_status(g), CT_ERR_SHAPE);
    CT_CHECK(strstr(ct_last_error(ctx), "add: shapes [2,3] and [4,3] do not broadcast") != NULL);
    /* sticky: later ops return NULL and keep the first message */
    CT_CHECK(ct_op_relu(g, a) == NULL);
    CT_CHECK(strstr(ct_last_error(ctx), "broadcast") != NULL);
    ct_graph_reset(g);
    a = filled(g, 2, (int64_t[]){2, 3}, 1);
    ct_tensor *w = filled(g, 2, (int64_t[]){5, 4}, 3);
    CT_CHECK(ct_op_linear(g, a, w, NULL) == NULL);
    CT_CHECK(strstr(ct_last_error(ctx), "linear: x [2,3] does not fit weight [5,4]") != NULL);
    ct_graph_reset(g);
    CT_CHECK(ct_op_relu(g, NULL) == NULL);
    CT_CHECK_INT(ct_graph_status(g), CT_ERR_INVALID_ARG);
    ct_graph_reset(g);
    ct_tensor *idx = ct_graph_zeros(g, CT_I64, 1, (int64_t[]){3});
    CT_CHECK(ct_op_relu(g, idx) == NULL);
    CT_CHECK(strstr(ct_last_error(ctx), "relu: x must be f32, got i64") != NULL);
    ct_graph_reset(g);
    a = filled(g, 2, (int64_t[]){2, 3}, 1);
    CT_CHECK(ct_op_softmax(g, a, 2) == NULL);
    CT_CHECK(strstr(ct_last_error(ctx), "axis 2 out of range") != NULL);
    ct_graph_reset(g);
    a = filled(g, 2, (int64_t[]){2, 3}, 1);
    CT_CHECK(ct_op_reshape(g, a, 2, (int64_t[]){4, 2}) == NULL);
    ct_graph_reset(g);
    a = filled(g, 2, (int64_t[]){2, 3}, 1);
    CT_CHECK(ct_op_permute(g, a, (int32_t[]){0, 0}) == NULL);
    ct_graph_reset(g);
    a = filled(g, 2, (int64_t[]){2, 3}, 1);
    CT_CHECK(ct_op_narrow(g, a, 1, 2, 2) == NULL);
    ct_graph_destroy(g);
    ct_ctx_destroy(ctx);
}

/* BLAS path vs the naive reference twin, forward and backward, at a training-like shape. */
static void linear_should_match_reference_kernels(void) {
    ct_ctx *fast = new_ctx(2, 0, NULL), *ref = new_ctx(1, 1, NULL);
    float *res[2][4];
    ct_ctx *ctxs[2] = {fast, ref};
    int64_t R = 37, IN = 70, OUT = 29;
    for (int c = 0; c < 2; c++) {
        ct_graph *g;
        ct_graph_create(ctxs[c], NULL, &g);
        ct_tensor *x = filled(g, 2, (int64_t[]){R, IN}, 1);
        ct_tensor *w = filled(g, 2, (int64_t[]){OUT, IN}, 2);
        ct_tensor *b = filled(g, 1, (int64_t[]){OUT}, 3);
        ct_tensor *m = filled(g, 3, (int64_t[]){2, IN, 5}, 4);
        x->flags |= CT_TENSOR_REQUIRES_GRAD;
        w->flags |= CT_TENSOR_REQUIRES_GRAD;
        b->flags |= CT_TENSOR_REQUIRES_GRAD;
        ct_tensor *y = ct_op_linear(g, x, w, b);
        ct_tensor *xr = ct_op_reshape(g, x, 3, (int64_t[]){1, R, IN});
        ct_tensor *z = ct_op_matmul(g, ct_op_concat(g, 2, (ct_tensor *[]){xr, xr}, 0), m);
        ct_tensor *loss = ct_op_add(g, ct_op_sum_all(g, ct_op_tanh(g, y)),
                                    ct_op_mean_all(g, ct_op_sigmoid(g, z)));
        CT_CHECK_INT(ct_graph_backward(g, loss), CT_OK);
        float *outs[4] = {y->data, x->grad, w->grad, b->grad};
        int64_t ns[4] = {R * OUT, R * IN, OUT * IN, OUT};
        for (int k = 0; k < 4; k++) {
            res[c][k] = malloc((size_t)ns[k] * sizeof(float));
            memcpy(res[c][k], outs[k], (size_t)ns[k] * sizeof(float));
        }
        ct_graph_destroy(g);
    }
    const char *names[4] = {"y", "dx", "dw", "db"};
    int64_t ns[4] = {R * OUT, R * IN, OUT * IN, OUT};
    for (int k = 0; k < 4; k++) {
        CT_CHECK_ARRAYS(names[k], res[0][k], res[1][k], ns[k], 1e-5, 1e-4);
        free(res[0][k]);
        free(res[1][k]);
    }
    ct_ctx_destroy(fast);
    ct_ctx_destroy(ref);
}

/* A linear layer's bias gradient is each column of dy summed in double in blocks of 256 rows
 * (ct_ops_sum_f64's order), bit for bit, whatever the blocks of columns it is computed in. The
 * columns hold 1e20 in row 0 and -1e20 in row 256 between small values, which the order
 * decides: each block's small values vanish into its big one (a sum without blocks keeps
 * those after row 256). */
static void linear_bias_gradient_should_sum_columns_in_blocks_of_256_rows(void) {
    ct_ctx *ctx = new_ctx(2, 0, NULL);
    int64_t R = 600, IN = 3, OUT = 70;
    ct_graph *g;
    ct_graph_create(ctx, NULL, &g);
    ct_tensor *x = filled(g, 2, (int64_t[]){R, IN}, 5);
    ct_tensor *w = filled(g, 2, (int64_t[]){OUT, IN}, 6);
    ct_tensor *b = filled(g, 1, (int64_t[]){OUT}, 7);
    ct_tensor *r = filled(g, 2, (int64_t[]){R, OUT}, 8); /* dy, exactly */
    for (int64_t j = 0; j < OUT; j++) {
        ((float *)r->data)[j] = 1e20f;
        ((float *)r->data)[256 * OUT + j] = -1e20f;
    }
    b->flags |= CT_TENSOR_REQUIRES_GRAD;
    ct_tensor *loss = ct_op_sum_all(g, ct_op_mul(g, ct_op_linear(g, x, w, b), r));
    CT_CHECK_INT(ct_graph_backward(g, loss), CT_OK);
    const float *dy = r->data, *db = b->grad;
    int64_t differ = 0;
    for (int64_t j = 0; j < OUT; j++) {
        double total = 0.0;
        for (int64_t i0 = 0; i0 < R; i0 += 256) {
            double part = 0.0;
            for (int64_t i = i0; i < R && i < i0 + 256; i++)
                part += (double)dy[i * OUT + j];
            total += part;
        }
        differ += db[j] != (float)total;
    }
    CT_CHECK_INT(differ, 0);
    ct_graph_destroy(g);
    ct_ctx_destroy(ctx);
}

typedef struct mlp {
    ct_params *P;
    ct_tensor *w1, *b1, *w2, *b2;
    ct_optim *opt;
} mlp;

static void mlp_init(ct_ctx *ctx, mlp *m, ct_optim_kind kind) {
    ct_params_create(ctx, &m->P);
    ct_params_add(m->P, "fc1.weight", CT_F32, 2, (int64_t[]){64, 20}, CT_PARAM_TRAINABLE, &m->w1);
    ct_params_add(m->P, "fc1.bias", CT_F32, 1, (int64_t[]){64}, CT_PARAM_TRAINABLE, &m->b1);
    ct_params_add(m->P, "fc2.weight", CT_F32, 2, (int64_t[]){5, 64}, CT_PARAM_TRAINABLE, &m->w2);
    ct_params_add(m->P, "fc2.bias", CT_F32, 1, (int64_t[]){5}, CT_PARAM_TRAINABLE, &m->b2);
    ct_params_alloc(m->P);
    ct_rng r = ct_rng_init(11, 0);
    ct_nn_init_linear(m->w1, m->b1, &r);
    ct_nn_init_linear(m->w2, m->b2, &r);
    ct_optim_params op = ct_optim_default_params(kind);
    op.lr = 0.01f;
    ct_optim_create(ctx, m->P, &op, &m->opt);
}

static void mlp_fini(mlp *m) {
    ct_optim_destroy(m->opt);
    ct_params_destroy(m->P);
}

/* One step of a small regression MLP; returns the loss. */
static float mlp_step(ct_graph *g, mlp *m, float *xv, float *yv) {
    ct_graph_reset(g);
    ct_params_zero_grad(m->P);
    ct_tensor *x = ct_graph_wrap(g, xv, CT_F32, 2, (int64_t[]){32, 20});
    ct_tensor *y = ct_graph_wrap(g, yv, CT_F32, 2, (int64_t[]){32, 5});
    ct_tensor *h = ct_op_gelu(g, ct_op_linear(g, x, m->w1, m->b1), CT_GELU_TANH);
    ct_tensor *out = ct_op_linear(g, h, m->w2, m->b2);
    ct_tensor *d = ct_op_sub(g, out, y);
    ct_tensor *loss = ct_op_mean_all(g, ct_op_mul(g, d, d));
    if (ct_graph_backward(g, loss) != CT_OK) return -1.0f;
    ct_optim_step(m->opt);
    return ((float *)loss->data)[0];
}

static void training_should_be_bitwise_identical_for_1_and_2_threads(void) {
    static float xv[32 * 20], yv[32 * 5];
    ct_rng r = ct_rng_init(5, 0);
    ct_rng_normal(&r, xv, 32 * 20, 0, 1);
    ct_rng_normal(&r, yv, 32 * 5, 0, 1);
    float losses[2][10];
    float *weights[2];
    for (int t = 0; t < 2; t++) {
        ct_ctx *ctx = new_ctx(t + 1, 0, NULL);
        mlp m;
        mlp_init(ctx, &m, CT_OPTIM_ADAM);
        ct_graph *g;
        ct_graph_create(ctx, NULL, &g);
        for (int s = 0; s < 10; s++)
            losses[t][s] = mlp_step(g, &m, xv, yv);
        int64_t n = ct_params_numel(m.P);
        weights[t] = malloc((size_t)n * sizeof(float));
        memcpy(weights[t], ct_params_values(m.P), (size_t)n * sizeof(float));
        ct_graph_destroy(g);
        mlp_fini(&m);
        ct_ctx_destroy(ctx);
    }
    CT_CHECK(memcmp(losses[0], losses[1], sizeof losses[0]) == 0);
    CT_CHECK(losses[0][9] < losses[0][0]);
    CT_CHECK(memcmp(weights[0], weights[1], (64 * 20 + 64 + 5 * 64 + 5) * sizeof(float)) == 0);
    free(weights[0]);
    free(weights[1]);
}

static void training_step_should_not_allocate_after_the_first(void) {
    static float xv[32 * 20], yv[32 * 5];
    ct_rng r = ct_rng_init(6, 0);
    ct_rng_normal(&r, xv, 32 * 20, 0, 1);
    ct_rng_normal(&r, yv, 32 * 5, 0, 1);
    test_alloc ta = {0};
    ct_ctx *ctx = new_ctx(2, 0, &ta);
    mlp m;
    mlp_init(ctx, &m, CT_OPTIM_SGD);
    ct_graph *g;
    ct_graph_params gp = ct_graph_default_params();
    gp.arena_chunk = 16384; /* small chunks: the first step grows the arena several times */
    ct_graph_create(ctx, &gp, &g);
    mlp_step(g, &m, xv, yv);
    long long after_first = ta.n_alloc;
    for (int s = 0; s < 5; s++)
        CT_CHECK(mlp_step(g, &m, xv, yv) > 0.0f);
    CT_CHECK_INT(ta.n_alloc, after_first);
    CT_CHECK(ct_graph_arena_allocations(g) > 1);
    ct_graph_destroy(g);
    mlp_fini(&m);
    ct_ctx_destroy(ctx);
    CT_CHECK_INT(ta.live, 0);
    CT_CHECK_INT(ta.size_mismatch, 0);
}

static void no_grad_mode_should_record_nothing(void) {
    ct_ctx *ctx = new_ctx(1, 0, NULL);
    mlp m;
    mlp_init(ctx, &m, CT_OPTIM_SGD);
    ct_graph *g;
    ct_graph_create(ctx, NULL, &g);
    ct_graph_set_grad_enabled(g, false);
    ct_tensor *x = filled(g, 2, (int64_t[]){4, 20}, 1);
    ct_tensor *y = ct_op_linear(g, x, m.w1, m.b1);
    CT_CHECK(y != NULL && y->node == NULL && !(y->flags & CT_TENSOR_REQUIRES_GRAD));
    ct_tensor *l = ct_op_sum_all(g, y);
    CT_CHECK_INT(ct_graph_backward(g, l), CT_ERR_INVALID_ARG);
    CT_CHECK(strstr(ct_last_error(ctx), "does not depend on anything that requires grad") != NULL);
    ct_graph_reset(g);
    ct_graph_set_grad_enabled(g, true);
    x = filled(g, 2, (int64_t[]){4, 20}, 1);
    y = ct_op_linear(g, x, m.w1, m.b1);
    CT_CHECK(y->node != NULL);
    CT_CHECK_INT(ct_graph_backward(g, y), CT_ERR_SHAPE); /* not a scalar */
    ct_graph_destroy(g);
    mlp_fini(&m);
    ct_ctx_destroy(ctx);
}

static void gradients_should_accumulate_until_zeroed(void) {
    ct_ctx *ctx = new_ctx(1, 0, NULL);
    mlp m;
    mlp_init(ctx, &m, CT_OPTIM_SGD);
    ct_graph *g;
    ct_graph_create(ctx, NULL, &g);
    float first = 0.0f;
    for (int k = 0; k < 2; k++) {
        ct_graph_reset(g);
        ct_tensor *x = filled(g, 2, (int64_t[]){4, 20}, 1);
        ct_tensor *l = ct_op_sum_all(g, ct_op_linear(g, x, m.w1, m.b1));
        CT_CHECK_INT(ct_graph_backward(g, l), CT_OK);
        if (k == 0) first = m.b1->grad[3];
    }
    CT_CHECK_CLOSE(m.b1->grad[3], 2.0 * first, 1e-6, 0);
    CT_CHECK_CLOSE(first, 4.0, 1e-6, 0); /* d sum / d bias = number of rows */
    ct_params_zero_grad(m.P);
    CT_CHECK(m.b1->grad[3] == 0.0f);
    ct_graph_destroy(g);
    mlp_fini(&m);
    ct_ctx_destroy(ctx);
}

/* Shapes where OpenBLAS and oneDNN themselves give different bits for 1 and 2 threads. */
static void gemm_should_be_bitwise_identical_for_1_and_2_threads(void) {
    int64_t shapes[][3] = {{128, 784, 512}, {300, 1000, 300}, {64, 8192, 10}, {2, 20000, 3}};
    for (int s = 0; s < 4; s++) {
        int64_t M = shapes[s][0], K = shapes[s][1], N = shapes[s][2];
        float *res[2][3];
        for (int t = 0; t < 2; t++) {
            ct_ctx *ctx = new_ctx(t + 1, 0, NULL);
            ct_graph *g;
            ct_graph_create(ctx, NULL, &g);
            ct_tensor *a = filled(g, 2, (int64_t[]){M, K}, 1),
                      *b = filled(g, 2, (int64_t[]){K, N}, 2);
            a->flags |= CT_TENSOR_REQUIRES_GRAD;
            b->flags |= CT_TENSOR_REQUIRES_GRAD;
            ct_tensor *c = ct_op_matmul(g, a, b);
            ct_tensor *l = ct_op_sum_all(g, ct_op_mul(g, c, c));
            CT_CHECK_INT(ct_graph_backward(g, l), CT_OK);
            float *outs[3] = {c->data, a->grad, b->grad};
            int64_t ns[3] = {M * N, M * K, K * N};
            for (int k = 0; k < 3; k++) {
                res[t][k] = malloc((size_t)ns[k] * sizeof(float));
                memcpy(res[t][k], outs[k], (size_t)ns[k] * sizeof(float));
            }
            ct_graph_destroy(g);
            ct_ctx_destroy(ctx);
        }
        int64_t ns[3] = {M * N, M * K, K * N};
        for (int k = 0; k < 3; k++) {
            CT_CHECK_MSG(memcmp(res[0][k], res[1][k], (size_t)ns[k] * sizeof(float)) == 0,
                         "shape %lldx%lldx%lld output %d", (long long)M, (long long)K, (long long)N,
                         k);
            free(res[0][k]);
            free(res[1][k]);
        }
    }
}

/* w -> *2 -> *5 -> sum: dL/dw = 10 per backward, so two backward calls give 20, not 50. */
static void backward_twice_should_add_each_loss_once(void) {
    ct_ctx *ctx = new_ctx(1, 0, NULL);
    ct_params *P;
    ct_tensor *w;
    ct_params_create(ctx, &P);
    ct_params_add(P, "w", CT_F32, 1, (int64_t[]){3}, CT_PARAM_TRAINABLE, &w);
    ct_params_alloc(P);
    ct_graph *g;
    ct_graph_create(ctx, NULL, &g);
    ct_tensor *l = ct_op_sum_all(g, ct_op_scale(g, ct_op_scale(g, w, 2.0f), 5.0f));
    CT_CHECK_INT(ct_graph_backward(g, l), CT_OK);
    CT_CHECK_CLOSE(w->grad[1], 10.0, 0, 0);
    CT_CHECK_INT(ct_graph_backward(g, l), CT_OK);
    CT_CHECK_CLOSE(w->grad[1], 20.0, 0, 0);
    /* a second loss from a shared intermediate adds its own gradient only */
    ct_params_zero_grad(P);
    ct_graph_reset(g);
    ct_tensor *h = ct_op_scale(g, w, 2.0f);
    ct_tensor *l1 = ct_op_sum_all(g, h), *l2 = ct_op_sum_all(g, ct_op_scale(g, h, 3.0f));
    CT_CHECK_INT(ct_graph_backward(g, l1), CT_OK);
    CT_CHECK_INT(ct_graph_backward(g, l2), CT_OK);
    CT_CHECK_CLOSE(w->grad[0], 2.0 + 6.0, 0, 0);
    ct_graph_destroy(g);
    ct_params_destroy(P);
    ct_ctx_destroy(ctx);
}

/* An owned tensor the caller flags for gradients gets an arena buffer that reset forgets. */
static void outside_leaf_gradient_should_not_outlive_the_step(void) {
    ct_ctx *ctx = new_ctx(1, 0, NULL);
    ct_tensor *t;
    CT_CHECK_INT(ct_tensor_create(ctx, CT_F32, 1, (int64_t[]){4}, &t), CT_OK);
    ct_tensor_fill(t, 1.0f);
    t->flags |= CT_TENSOR_REQUIRES_GRAD;
    ct_graph *g;
    ct_graph_create(ctx, NULL, &g);
    for (int step = 0; step < 2; step++) {
        ct_graph_reset(g);
        CT_CHECK(t->grad == NULL);
        ct_tensor *l = ct_op_sum_all(g, ct_op_scale(g, t, 2.0f));
        CT_CHECK_INT(ct_graph_backward(g, l), CT_OK);
        CT_CHECK(t->grad != NULL && t->grad[3] == 2.0f);
    }
    ct_graph_destroy(g);
    CT_CHECK(t->grad == NULL);
    ct_tensor_destroy(ctx, t);
    ct_ctx_destroy(ctx);
}

static void ops_should_reject_unallocated_parameters_and_overflowing_sizes(void) {
    ct_ctx *ctx = new_ctx(1, 0, NULL);
    ct_params *P;
    ct_tensor *w;
    ct_params_create(ctx, &P);
    ct_params_add(P, "fc.weight", CT_F32, 2, (int64_t[]){3, 4}, CT_PARAM_TRAINABLE, &w);
    ct_graph *g;
    ct_graph_create(ctx, NULL, &g);
    CT_CHECK(ct_op_relu(g, w) == NULL);
    CT_CHECK(strstr(ct_last_error(ctx), "relu: input 0 ('fc.weight') has no data") != NULL);
    ct_graph_reset(g);
    ct_tensor *x = filled(g, 1, (int64_t[]){4}, 1);
    ct_tensor *outs[2] = {x, x};
    CT_CHECK_INT(ct_op_split(g, x, 0, 2, (int64_t[]){INT64_MAX, 1}, outs), CT_ERR_SHAPE);
    CT_CHECK(outs[0] == NULL && outs[1] == NULL);
    ct_graph_reset(g);
    x = filled(g, 1, (int64_t[]){4}, 1);
    CT_CHECK(ct_op_reshape(g, x, 3, (int64_t[]){INT64_MAX, 4, 0}) == NULL);
    CT_CHECK_INT(ct_graph_status(g), CT_ERR_SHAPE);
    ct_graph_destroy(g);
    ct_params_destroy(P);
    ct_ctx_destroy(ctx);
}

/* A NaN goes through every activation as through PyTorch's: relu, leaky_relu, gelu, silu, tanh
 * and sigmoid give NaN for it, never a number. Backward follows PyTorch's rules at a NaN input:
 * relu's threshold_backward (x <= 0 ? 0 : dy) passes dy, leaky_relu's (x > 0 ? dy : dy * slope)
 * scales it, and the others' derivatives are NaN. 64 elements with NaNs inside the vectorised
 * body, on the fast and the reference kernels and on two threads. */
static void activations_should_propagate_nan_as_pytorch_does(void) {
    enum { N = 64, KINDS = 7 };
    const int64_t nan_at[] = {5, 33, 63};
    for (int run = 0; run < 3; run++) {
        ct_ctx *ctx = new_ctx(run == 1 ? 2 : 1, run == 2, NULL);
        for (int k = 0; k < KINDS; k++) {
            ct_graph *g;
            ct_graph_create(ctx, NULL, &g);
            float xv[N], seed[N];
            for (int64_t i = 0; i < N; i++) {
                xv[i] = (float)(i - N / 2) / 8.0f;
                seed[i] = 3.0f;
            }
            for (size_t j = 0; j < sizeof nan_at / sizeof nan_at[0]; j++)
                xv[nan_at[j]] = NAN;
            ct_tensor *x = ct_graph_wrap(g, xv, CT_F32, 1, (int64_t[]){N});
            x->flags |= CT_TENSOR_REQUIRES_GRAD;
            const float slope = 0.25f;
            ct_tensor *y = k == 0   ? ct_op_relu(g, x)
                           : k == 1 ? ct_op_leaky_relu(g, x, slope)
                           : k == 2 ? ct_op_gelu(g, x, CT_GELU_ERF)
                           : k == 3 ? ct_op_gelu(g, x, CT_GELU_TANH)
                           : k == 4 ? ct_op_silu(g, x)
                           : k == 5 ? ct_op_tanh(g, x)
                                    : ct_op_sigmoid(g, x);
            CT_CHECK(y != NULL);
            if (!y) {
                ct_graph_destroy(g);
                continue;
            }
            CT_CHECK_INT(ct_graph_backward_seed(g, y, seed), CT_OK);
            const float *yv = y->data, *dx = x->grad;
            int64_t nans = 0;
            for (int64_t i = 0; i < N; i++)
                nans += isnan(yv[i]) ? 1 : 0;
            CT_CHECK_MSG(nans == 3, "run %d, activation %d: %lld NaN outputs, expected 3", run, k,
                         (long long)nans);
            for (size_t j = 0; j < sizeof nan_at / sizeof nan_at[0] && dx; j++) {
                int64_t i = nan_at[j];
                CT_CHECK_MSG(isnan(yv[i]), "run %d, activation %d: y[%lld] = %g for NaN", run, k,
                             (long long)i, (double)yv[i]);
                if (k == 0)
                    CT_CHECK_MSG(dx[i] == 3.0f, "run %d: relu dx[%lld] = %g, expected dy 3", run,
                                 (long long)i, (double)dx[i]);
                else if (k == 1)
                    CT_CHECK_MSG(dx[i] == 3.0f * slope, "run %d: leaky_relu dx[%lld] = %g", run,
                                 (long long)i, (double)dx[i]);
                else
                    CT_CHECK_MSG(isnan(dx[i]), "run %d, activation %d: dx[%lld] = %g, expected NaN",
                                 run, k, (long long)i, (double)dx[i]);
            }
            /* the numbers around them are unchanged: relu(-0.5) = 0, relu(0) = 0 with dx 0 */
            if (k == 0) {
                CT_CHECK(yv[N / 2 - 4] == 0.0f && !signbit(yv[N / 2 - 4]) && yv[N / 2] == 0.0f);
                CT_CHECK(yv[N / 2 + 4] == 0.5f && dx && dx[N / 2] == 0.0f && dx[N / 2 + 4] == 3.0f);
            }
            ct_graph_destroy(g);
        }
        ct_ctx_destroy(ctx);
    }
}

/* gelu_linear propagates a NaN in x to every output of its row, and to its gradient, through
 * BLAS and through the reference gemm alike. */
static void gelu_linear_should_propagate_nan(void) {
    for (int reference = 0; reference < 2; reference++) {
        ct_ctx *ctx = new_ctx(reference ? 1 : 2, reference, NULL);
        ct_graph *g;
        ct_graph_create(ctx, NULL, &g);
        ct_tensor *x = filled(g, 2, (int64_t[]){3, 8}, 1), *w = filled(g, 2, (int64_t[]){4, 8}, 2);
        ((float *)x->data)[8 + 2] = NAN; /* row 1 */
        x->flags |= CT_TENSOR_REQUIRES_GRAD;
        w->flags |= CT_TENSOR_REQUIRES_GRAD;
        ct_tensor *y = ct_op_gelu_linear(g, x, CT_GELU_ERF, w, NULL);
        CT_CHECK(y != NULL);
        float seed[12];
        for (int i = 0; i < 12; i++)
            seed[i] = 1.0f;
        CT_CHECK(y && ct_graph_backward_seed(g, y, seed) == CT_OK);
        for (int64_t i = 0; y && i < 12; i++)
            CT_CHECK_MSG(!isnan(((float *)y->data)[i]) == (i / 4 != 1), "kernels %d: y[%lld] = %g",
                         reference, (long long)i, (double)((float *)y->data)[i]);
        if (x->grad) CT_CHECK(isnan(((float *)x->grad)[8 + 2]) && !isnan(((float *)x->grad)[0]));
        /* dW [out, in] reads column 2 of gelu(x) only at column 2 */
        for (int64_t i = 0; w->grad && i < 32; i++)
            CT_CHECK_MSG(!isnan(((float *)w->grad)[i]) == (i % 8 != 2), "kernels %d: dw[%lld] = %g",
                         reference, (long long)i, (double)((float *)w->grad)[i]);
        ct_graph_destroy(g);
        ct_ctx_destroy(ctx);
    }
}

int main(void) {
    CT_RUN(backward_twice_should_add_each_loss_once);
    CT_RUN(outside_leaf_gradient_should_not_outlive_the_step);
    CT_RUN(ops_should_reject_unallocated_parameters_and_overflowing_sizes);
    CT_RUN(gemm_should_be_bitwise_identical_for_1_and_2_threads);
    CT_RUN(ops_should_compute_known_values);
    CT_RUN(ops_should_reject_bad_input_with_context);
    CT_RUN(linear_should_match_reference_kernels);
    CT_RUN(linear_bias_gradient_should_sum_columns_in_blocks_of_256_rows);
    CT_RUN(training_should_be_bitwise_identical_for_1_and_2_threads);
    CT_RUN(training_step_should_not_allocate_after_the_first);
    CT_RUN(no_grad_mode_should_record_nothing);
    CT_RUN(gradients_should_accumulate_until_zeroed);
    CT_RUN(activations_should_propagate_nan_as_pytorch_does);
    CT_RUN(gelu_linear_should_propagate_nan);
    return ct_test_finish();
}
