/*
 * bench_trainer.c - the trainer's overhead per step: the time of a step through
 * ct_trainer_fit minus the time of the same forward, backward and update written by hand
 * (same loader, model, loss and optimizer), both as the best of several runs.
 *
 *   bench_trainer [--steps N]
 *
 * Cases: issue 7's width-32 MLP (32-32-10) and a 784-128-10 MLP at batch 1 on synthetic data
 * (framework overhead dominates), and a 784-256-10 MLP at batch 128 on Fashion-MNIST (Debian's
 * dataset-fashion-mnist), SGD.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ctrain/ctrain.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

typedef struct setup {
    ct_ctx *ctx;
    ct_dataset *ds;
    ct_loader *loader;
    ct_params *P;
    ct_model *m;
    ct_optim *opt;
} setup;

/* Images [B, 1, 28, 28] enter the MLP as [B, 784]: a view, no copy. */
static ct_status prep_flat(void *user,
                           ct_graph *g,
                           const ct_batch *b,
                           const char *split,
                           ct_tensor **input,
                           ct_tensor **target) {
    (void)user, (void)split;
    int64_t per = ct_tensor_numel(&b->x) / (b->size ? b->size : 1);
    *input = ct_graph_wrap(g, b->x.data, b->x.dtype, 2, (int64_t[]){b->size, per});
    *target = ct_graph_wrap(g, b->y.data, b->y.dtype, b->y.ndim, b->y.shape);
    return ct_graph_status(g);
}

static void die(ct_ctx *ctx) {
    fprintf(stderr, "bench_trainer: %s\n", ct_last_error(ctx));
    exit(1);
}

/* width: the synthetic data's features and the hidden layer's width at batch 1; 0 =
 * Fashion-MNIST at batch 128 through 256 hidden units. */
static void make(setup *s, int width) {
    bool fmnist = width == 0;
    memset(s, 0, sizeof *s);
    if (ct_ctx_create(NULL, &s->ctx) != CT_OK) exit(1);
    ct_ctx *ctx = s->ctx;
    ct_loader_params lp = ct_loader_default_params();
    if (fmnist) {
        ct_option it[] = {
            {"images", "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"},
            {"labels", "/usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz"}};
        ct_options o = {it, 2, "bench"};
        if (ct_dataset_open(ctx, "idx", &o, &s->ds) != CT_OK) die(ctx);
        lp.batch_size = 128;
        lp.n_transforms = 1;
        lp.transforms[0].kind = CT_TRANSFORM_SCALE;
        lp.transforms[0].a = 1.0f / 255.0f;
    } else {
        char feat[16];
        (void)snprintf(feat, sizeof feat, "%d", width);
        ct_option it[] = {{"kind", "blobs"}, {"n", "4096"}, {"features", feat}, {"classes", "10"}};
        ct_options o = {it, 4, "bench"};
        if (ct_dataset_open(ctx, "synthetic", &o, &s->ds) != CT_OK) die(ctx);
        lp.batch_size = 1;
    }
    if (ct_loader_create(ctx, s->ds, &lp, &s->loader) != CT_OK) die(ctx);
    ct_option mo[] = {{"hidden", fmnist ? "256" : width == 32 ? "32" : "128"}, {"out", "10"}};
    ct_options mop = {mo, 2, "model"};
    if (ct_params_create(ctx, &s->P) != CT_OK ||
        ct_model_build_alloc(ctx, "mlp", &mop, s->P, CT_F32, 1, (int64_t[]){fmnist ? 784 : width},
                             1, &s->m) != CT_OK)
        die(ctx);
    ct_optim_params op = ct_optim_default_params(CT_OPTIM_SGD);
    op.lr = 0.01f;
    if (ct_optim_create(ctx, s->P, &op, &s->opt) != CT_OK) die(ctx);
}

static void unmake(setup *s) {
    ct_optim_destroy(s->opt);
    ct_model_destroy(s->m);
    ct_params_destroy(s->P);
    ct_loader_destroy(s->loader);
    ct_dataset_destroy(s->ds);
    ct_ctx_destroy(s->ctx);
}

/* The same work by hand: next batch, forward, loss, backward, step, zero. */
static double by_hand(setup *s, int64_t steps) {
    ct_graph *g;
    ct_graph_create(s->ctx, NULL, &g);
    ct_cross_entropy_params ce = ct_cross_entropy_default_params();
    double t0 = now_s();
    int64_t done = 0;
    while (done < steps) {
        ct_batch b;
        if (ct_loader_next(s->loader, &b) != CT_OK) die(s->ctx);
        if (b.size == 0) continue;
        ct_graph_reset(g);
        ct_tensor *x, *y;
        prep_flat(NULL, g, &b, "train", &x, &y);
        ct_tensor *loss = ct_loss_cross_entropy(g, ct_model_forward(s->m, g, x), y, &ce);
        if (ct_graph_backward(g, loss) != CT_OK) die(s->ctx);
        ct_optim_step(s->opt);
        ct_params_zero_grad(s->P);
        done++;
    }
    double t = now_s() - t0;
    ct_graph_destroy(g);
    return t / (double)steps;
}

static double with_trainer(setup *s, int64_t steps, int64_t steps_per_loop, bool check_grads) {
    ct_trainer_params tp = ct_trainer_default_params();
    tp.max_epochs = 0;
    tp.max_steps = steps;
    tp.steps_per_loop = steps_per_loop;
    tp.check_grads = check_grads;
    ct_task task = {.kind = CT_TASK_CLASSIFICATION, .prep_batch = prep_flat};
    ct_trainer *t;
    if (ct_trainer_create(s->ctx, s->m, s->P, s->opt, NULL, NULL, &task, s->loader, NULL, 0, &tp,
                          &t) != CT_OK)
        die(s->ctx);
    double t0 = now_s();
    if (ct_trainer_fit(t) != CT_OK) die(s->ctx);
    double dt = now_s() - t0;
    ct_trainer_destroy(t);
    return dt / (double)steps;
}

/* The best of `reps` alternating runs of each variant: the machine's drift reaches all three
 * alike, and the best run is the one least disturbed. */
static void run(const char *name, int width, int64_t steps, int reps) {
    setup s;
    make(&s, width);
    by_hand(&s, steps / 4); /* warm up: caches, oneDNN plans, arena */
    double hand = 1e9, tr = 1e9, tr_loss = 1e9;
    for (int r = 0; r < reps; r++) {
        double a = by_hand(&s, steps), b = with_trainer(&s, steps, 10, true);
        double c = with_trainer(&s, steps, 10, false);
        if (a < hand) hand = a;
        if (b < tr) tr = b;
        if (c < tr_loss) tr_loss = c;
    }
    printf("%-22s %d x %lld steps: by hand %8.2f us | trainer %8.2f us, overhead %6.2f us "
           "(%5.2f%%) | loss-only check: overhead %6.2f us (%5.2f%%)\n",
           name, reps, (long long)steps, hand * 1e6, tr * 1e6, (tr - hand) * 1e6,
           100.0 * (tr - hand) / hand, (tr_loss - hand) * 1e6, 100.0 * (tr_loss - hand) / hand);
    unmake(&s);
}

int main(int argc, char **argv) {
    int64_t steps = 2000;
    for (int i = 1; i + 1 < argc; i += 2)
        if (strcmp(argv[i], "--steps") == 0) steps = strtol(argv[i + 1], NULL, 10);
    if (steps < 10) steps = 10;
    printf("trainer overhead, steps_per_loop 10, the best of alternating runs\n");
    run("mlp 32-32-10 batch 1", 32, steps, 5);
    run("mlp 784-128-10 batch 1", 784, steps, 5);
    /* about 1 ms a step: longer runs, and more of them, to see 1% through this machine's noise */
    run("fmnist mlp batch 128", 0, steps / 5, 9);
    return 0;
}
