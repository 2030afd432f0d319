/*
 * mlp_demo.c - trains a two-layer MLP through the library on a synthetic data set and prints
 * the falling loss and the accuracy: what `make demo` runs until the trainer exists.
 *
 * It shows the whole life of a model in the API: a context; a dataset opened by type name and
 * split into training and validation parts; a loader that shuffles each epoch and prefetches;
 * a parameter store with PyTorch names; an optimizer; and a graph reused every step (reset,
 * forward, loss, backward, step), with evaluation in no-grad mode.
 */
#include <stdio.h>
#include <stdlib.h>

#include "ctrain/ctrain.h"

enum { N_FEAT = 16, N_HIDDEN = 64, N_CLASS = 8, EPOCHS = 10 };

static int fail(ct_ctx *ctx) {
    (void)fprintf(stderr, "mlp_demo: %s\n", ct_last_error(ctx));
    return 1;
}

/* Mean loss and accuracy of one pass over a loader; trains when opt is not NULL. */
static int run_epoch(ct_graph *g,
                     ct_loader *l,
                     ct_params *P,
                     ct_tensor *const *w,
                     ct_optim *opt,
                     double *loss_out,
                     double *acc_out) {
    ct_cross_entropy_params ce = ct_cross_entropy_default_params();
    ct_graph_set_grad_enabled(g, opt != NULL);
    ct_graph_set_training(g, opt != NULL);
    double total = 0.0;
    int64_t correct = 0, seen = 0, batches = 0;
    ct_batch b;
    while (ct_loader_next(l, &b) == CT_OK && b.size > 0) {
        ct_graph_reset(g);
        ct_tensor *x = ct_graph_wrap(g, b.x.data, CT_F32, b.x.ndim, b.x.shape);
        ct_tensor *y = ct_graph_wrap(g, b.y.data, CT_I64, b.y.ndim, b.y.shape);
        ct_tensor *h = ct_op_relu(g, ct_op_linear(g, x, w[0], w[1]));
        ct_tensor *logits = ct_op_linear(g, h, w[2], w[3]);
        ct_tensor *loss = ct_loss_cross_entropy(g, logits, y, &ce);
        if (ct_graph_status(g) != CT_OK) return 1;
        if (opt) {
            ct_params_zero_grad(P);
            if (ct_graph_backward(g, loss) != CT_OK) return 1;
            ct_optim_step(opt);
        }
        total += (double)((float *)loss->data)[0];
        batches++;
        const float *lv = logits->data;
        const int64_t *yv = b.y.data;
        for (int64_t r = 0; r < b.size; r++) {
            int64_t best = 0;
            for (int64_t c = 1; c < N_CLASS; c++)
                if (lv[r * N_CLASS + c] > lv[r * N_CLASS + best]) best = c;
            correct += best == yv[r];
        }
        seen += b.size;
    }
    *loss_out = total / (double)(batches ? batches : 1);
    *acc_out = (double)correct / (double)(seen ? seen : 1);
    return 0;
}

int main(void) {
    ct_ctx *ctx = NULL;
    if (ct_ctx_create(NULL, &ctx) != CT_OK) return 1;

    /* 8 overlapping Gaussian blobs in 16 dimensions; 20% held out for validation */
    ct_option items[] = {{"kind", "blobs"}, {"n", "6000"},      {"features", "16"},
                         {"classes", "8"},  {"spread", "0.45"}, {"seed", "2024"}};
    ct_options opts = {items, 6, "mlp_demo: data"};
    ct_dataset *all = NULL, *train = NULL, *valid = NULL;
    if (ct_dataset_open(ctx, "synthetic", &opts, &all) != CT_OK ||
        ct_dataset_split(all, 0.2, 7, &train, &valid) != CT_OK)
        return fail(ctx);
    ct_loader_params lp = ct_loader_default_params();
    lp.batch_size = 64;
    lp.seed = 1;
    ct_loader *train_loader = NULL, *valid_loader = NULL;
    if (ct_loader_create(ctx, train, &lp, &train_loader) != CT_OK) return fail(ctx);
    lp.shuffle = false;
    lp.shard = CT_SHARD_EVAL;
    if (ct_loader_create(ctx, valid, &lp, &valid_loader) != CT_OK) return fail(ctx);

    ct_params *P = NULL;
    ct_tensor *w[4];
    if (ct_params_create(ctx, &P) != CT_OK ||
        ct_params_add(P, "fc1.weight", CT_F32, 2, (int64_t[]){N_HIDDEN, N_FEAT}, CT_PARAM_TRAINABLE,
                      &w[0]) != CT_OK ||
        ct_params_add(P, "fc1.bias", CT_F32, 1, (int64_t[]){N_HIDDEN}, CT_PARAM_TRAINABLE, &w[1]) !=
            CT_OK ||
        ct_params_add(P, "fc2.weight", CT_F32, 2, (int64_t[]){N_CLASS, N_HIDDEN},
                      CT_PARAM_TRAINABLE, &w[2]) != CT_OK ||
        ct_params_add(P, "fc2.bias", CT_F32, 1, (int64_t[]){N_CLASS}, CT_PARAM_TRAINABLE, &w[3]) !=
            CT_OK ||
        ct_params_alloc(P) != CT_OK)
        return fail(ctx);
    ct_rng init = ct_rng_init(1, 0);
    ct_nn_init_linear(w[0], w[1], &init);
    ct_nn_init_linear(w[2], w[3], &init);

    ct_optim_params op = ct_optim_default_params(CT_OPTIM_SGD);
    op.lr = 0.01f;
    op.momentum = 0.9f;
    ct_optim *opt = NULL;
    ct_graph *g = NULL;
    if (ct_optim_create(ctx, P, &op, &opt) != CT_OK || ct_graph_create(ctx, NULL, &g) != CT_OK)
        return fail(ctx);

    printf("ctrain %s: MLP %d-%d-%d on %lld synthetic samples (%lld for validation), batch %lld, "
           "SGD lr %.2g momentum %.2g\n",
           ct_version(), N_FEAT, N_HIDDEN, N_CLASS, (long long)ct_dataset_info_of(all)->n,
           (long long)ct_dataset_info_of(valid)->n, (long long)lp.batch_size, (double)op.lr,
           (double)op.momentum);
    for (int epoch = 1; epoch <= EPOCHS; epoch++) {
        double tl, ta, vl, va;
        if (run_epoch(g, train_loader, P, w, opt, &tl, &ta) ||
            run_epoch(g, valid_loader, P, w, NULL, &vl, &va))
            return fail(ctx);
        printf("epoch %2d  train loss %.4f  accuracy %.3f  |  valid loss %.4f  accuracy %.3f\n",
               epoch, tl, ta, vl, va);
    }
    ct_graph_destroy(g);
    ct_optim_destroy(opt);
    ct_params_destroy(P);
    ct_loader_destroy(valid_loader);
    ct_loader_destroy(train_loader);
    ct_dataset_close(train);
    ct_dataset_close(valid);
    ct_dataset_close(all);
    ct_ctx_destroy(ctx);
    return 0;
}
