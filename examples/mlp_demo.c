/*
 * mlp_demo.c - trains a two-layer MLP through the library on synthetic Gaussian blobs and
 * prints the falling loss and the accuracy: what `make demo` runs until the trainer exists.
 *
 * It shows the whole life of a model in the API: a context, a parameter store with PyTorch
 * names, an optimizer, and a graph reused every step (reset, forward, loss, backward, step).
 */
#include <stdio.h>
#include <stdlib.h>

#include "ctrain/ctrain.h"

enum { N_TRAIN = 4096, N_FEAT = 16, N_HIDDEN = 64, N_CLASS = 8, BATCH = 64, EPOCHS = 10 };

static int check(ct_ctx *ctx, ct_status s) {
    if (s != CT_OK) (void)fprintf(stderr, "mlp_demo: %s\n", ct_last_error(ctx));
    return s != CT_OK;
}

/* Class c's points are N(center_c, 1) in N_FEAT dims; centers are N(0, 0.45^2), close enough to
 * overlap. */
static void make_blobs(float *x, int64_t *y, int64_t n, uint64_t seed) {
    float centers[N_CLASS][N_FEAT];
    ct_rng r = ct_rng_init(seed, 0);
    ct_rng_normal(&r, &centers[0][0], N_CLASS * N_FEAT, 0.0f, 0.45f);
    for (int64_t i = 0; i < n; i++) {
        int64_t c = (int64_t)ct_rng_below(&r, N_CLASS);
        y[i] = c;
        ct_rng_normal(&r, x + i * N_FEAT, N_FEAT, 0.0f, 1.0f);
        for (int j = 0; j < N_FEAT; j++)
            x[i * N_FEAT + j] += centers[c][j];
    }
}

int main(void) {
    ct_ctx *ctx = NULL;
    if (ct_ctx_create(NULL, &ctx) != CT_OK) return 1;
    static float x[N_TRAIN * N_FEAT];
    static int64_t y[N_TRAIN];
    make_blobs(x, y, N_TRAIN, 2024);

    ct_params *P = NULL;
    ct_tensor *w1, *b1, *w2, *b2;
    if (check(ctx, ct_params_create(ctx, &P)) ||
        check(ctx, ct_params_add(P, "fc1.weight", CT_F32, 2, (int64_t[]){N_HIDDEN, N_FEAT},
                                 CT_PARAM_TRAINABLE, &w1)) ||
        check(ctx, ct_params_add(P, "fc1.bias", CT_F32, 1, (int64_t[]){N_HIDDEN},
                                 CT_PARAM_TRAINABLE, &b1)) ||
        check(ctx, ct_params_add(P, "fc2.weight", CT_F32, 2, (int64_t[]){N_CLASS, N_HIDDEN},
                                 CT_PARAM_TRAINABLE, &w2)) ||
        check(ctx, ct_params_add(P, "fc2.bias", CT_F32, 1, (int64_t[]){N_CLASS}, CT_PARAM_TRAINABLE,
                                 &b2)) ||
        check(ctx, ct_params_alloc(P)))
        return 1;
    ct_rng init = ct_rng_init(1, 0);
    ct_nn_init_linear(w1, b1, &init);
    ct_nn_init_linear(w2, b2, &init);

    ct_optim_params op = ct_optim_default_params(CT_OPTIM_SGD);
    op.lr = 0.01f;
    op.momentum = 0.9f;
    ct_optim *opt = NULL;
    ct_graph *g = NULL;
    if (check(ctx, ct_optim_create(ctx, P, &op, &opt)) ||
        check(ctx, ct_graph_create(ctx, NULL, &g)))
        return 1;
    ct_cross_entropy_params ce = ct_cross_entropy_default_params();

    printf("ctrain %s: MLP %d-%d-%d on %d synthetic points, batch %d, SGD lr %.2g momentum %.2g\n",
           ct_version(), N_FEAT, N_HIDDEN, N_CLASS, N_TRAIN, BATCH, (double)op.lr,
           (double)op.momentum);
    for (int epoch = 1; epoch <= EPOCHS; epoch++) {
        double total = 0.0;
        int64_t correct = 0;
        for (int64_t i0 = 0; i0 < N_TRAIN; i0 += BATCH) {
            ct_graph_reset(g);
            ct_params_zero_grad(P);
            ct_tensor *xb =
                ct_graph_wrap(g, x + i0 * N_FEAT, CT_F32, 2, (int64_t[]){BATCH, N_FEAT});
            ct_tensor *yb = ct_graph_wrap(g, y + i0, CT_I64, 1, (int64_t[]){BATCH});
            ct_tensor *h = ct_op_relu(g, ct_op_linear(g, xb, w1, b1));
            ct_tensor *logits = ct_op_linear(g, h, w2, b2);
            ct_tensor *loss = ct_loss_cross_entropy(g, logits, yb, &ce);
            if (check(ctx, ct_graph_backward(g, loss))) return 1;
            ct_optim_step(opt);
            total += (double)((float *)loss->data)[0];
            const float *lv = logits->data;
            for (int64_t r = 0; r < BATCH; r++) {
                int64_t best = 0;
                for (int64_t c = 1; c < N_CLASS; c++)
                    if (lv[r * N_CLASS + c] > lv[r * N_CLASS + best]) best = c;
                correct += best == y[i0 + r];
            }
        }
        printf("epoch %d  loss %.4f  train accuracy %.3f\n", epoch,
               total / (double)(N_TRAIN / BATCH), (double)correct / (double)N_TRAIN);
    }
    ct_graph_destroy(g);
    ct_optim_destroy(opt);
    ct_params_destroy(P);
    ct_ctx_destroy(ctx);
    return 0;
}
