/*
 * bench_trainer.c - the trainer's overhead per step: the time of a step through
 * ct_trainer_fit minus the time of the same forward, backward and update written by hand
 * (same loader, model, loss and optimizer).
 *
 *   bench_trainer [--steps N] [--profile steps|layers]
 *
 * Each overhead is the median of back-to-back pairs of runs; at batch 128 also decomposed into
 * its fixed part and the gradient check (decompose). With --profile, instead: the cost of the
 * step profile (ct_trainer_params.profile), as the median of back-to-back pairs of trainer
 * runs with profiling off and on.
 *
 * Cases: a width-32 MLP (32-32-10) and a 784-128-10 MLP at batch 1 on synthetic data
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
    ct_dataset_close(s->ds);
    ct_ctx_destroy(s->ctx);
}

/* The next batch's forward, loss and backward pass by hand; false at an epoch's end (an empty
 * batch), when nothing was done. */
static bool forward_backward(setup *s, ct_graph *g) {
    ct_cross_entropy_params ce = ct_cross_entropy_default_params();
    ct_batch b;
    if (ct_loader_next(s->loader, &b) != CT_OK) die(s->ctx);
    if (b.size == 0) return false;
    ct_graph_reset(g);
    ct_tensor *x, *y;
    prep_flat(NULL, g, &b, "train", &x, &y);
    ct_tensor *loss = ct_loss_cross_entropy(g, ct_model_forward(s->m, g, x), y, &ce);
    if (ct_graph_backward(g, loss) != CT_OK) die(s->ctx);
    return true;
}

/* The same work by hand: next batch, forward, loss, backward, step, zero. */
static double by_hand(setup *s, int64_t steps) {
    ct_graph *g;
    ct_graph_create(s->ctx, NULL, &g);
    double t0 = now_s();
    int64_t done = 0;
    while (done < steps) {
        if (!forward_backward(s, g)) continue;
        ct_optim_step(s->opt);
        ct_params_zero_grad(s->P);
        done++;
    }
    double t = now_s() - t0;
    ct_graph_destroy(g);
    return t / (double)steps;
}

static double with_trainer_profiled(
    setup *s, int64_t steps, int64_t steps_per_loop, bool check_grads, ct_profile_mode profile) {
    ct_trainer_params tp = ct_trainer_default_params();
    tp.model = s->m;
    tp.store = s->P;
    tp.optim = s->opt;
    tp.task.prep_batch = prep_flat;
    tp.train = s->loader;
    tp.max_epochs = 0;
    tp.max_steps = steps;
    tp.steps_per_loop = steps_per_loop;
    tp.check_grads = check_grads;
    tp.profile = profile;
    ct_trainer *t;
    if (ct_trainer_create(s->ctx, &tp, &t) != CT_OK) die(s->ctx);
    double t0 = now_s();
    if (ct_trainer_fit(t) != CT_OK) die(s->ctx);
    double dt = now_s() - t0;
    ct_trainer_destroy(t);
    return dt / (double)steps;
}

static double with_trainer(setup *s, int64_t steps, int64_t steps_per_loop, bool check_grads) {
    return with_trainer_profiled(s, steps, steps_per_loop, check_grads, CT_PROFILE_MODE_OFF);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Overheads measured as the median of `pairs` back-to-back pairs (a hand-written run, then a
 * trainer run of the same steps), so that this shared VM's drift between pairs cancels and
 * outliers do not count: rel and abs hold the quartiles and median of (trainer - hand) / hand
 * and of trainer - hand in seconds; hand is the median hand-written step. */
typedef struct paired {
    double rel[3], abs[3], hand;
} paired;

static paired measure(setup *s, int64_t steps, int pairs, bool check_grads) {
    double *rel = malloc((size_t)pairs * sizeof *rel), *diff = malloc((size_t)pairs * sizeof *rel),
           *hand = malloc((size_t)pairs * sizeof *rel);
    if (!rel || !diff || !hand) exit(1);
    for (int k = 0; k < pairs; k++) {
        double a = by_hand(s, steps), b = with_trainer(s, steps, 10, check_grads);
        rel[k] = (b - a) / a;
        diff[k] = b - a;
        hand[k] = a;
    }
    qsort(rel, (size_t)pairs, sizeof *rel, cmp_double);
    qsort(diff, (size_t)pairs, sizeof *diff, cmp_double);
    qsort(hand, (size_t)pairs, sizeof *hand, cmp_double);
    paired r = {{rel[pairs / 4], rel[pairs / 2], rel[3 * pairs / 4]},
                {diff[pairs / 4], diff[pairs / 2], diff[3 * pairs / 4]},
                hand[pairs / 2]};
    free(rel);
    free(diff);
    free(hand);
    return r;
}

/* One case: with the gradient scan (check_grads, the default) and with the loss-only check.
 * Returns the median overhead with the scan, in seconds. */
static double run(const char *name, setup *s, int64_t steps, int pairs) {
    by_hand(s, steps); /* warm up: caches, oneDNN plans, arena */
    paired full = measure(s, steps, pairs, true), loss = measure(s, steps, pairs, false);
    printf("%-22s %d pairs x %lld steps: by hand %8.2f us | overhead %7.2f us (%5.2f%%, "
           "quartiles %5.2f%% to %5.2f%%) | loss-only check %7.2f us (%5.2f%%)\n",
           name, pairs, (long long)steps, full.hand * 1e6, full.abs[1] * 1e6, 100 * full.rel[1],
           100 * full.rel[0], 100 * full.rel[2], loss.abs[1] * 1e6, 100 * loss.rel[1]);
    return full.abs[1];
}

static double median_of(double *x, int n) {
    qsort(x, (size_t)n, sizeof *x, cmp_double);
    return x[n / 2];
}

/* At batch 128 a step is about 1 ms, so 1% is 10 us, below what even paired runs resolve on
 * this machine (their quartiles lie several percent apart). The overhead is therefore also
 * decomposed: the trainer's work beyond the hand-written loop is a fixed part (events,
 * counters, the loss read: the width-32 MLP's median overhead at batch 1, where it is the
 * whole difference) plus one part that grows with the model, the check of every gradient for
 * inf/NaN. That part is timed where the trainer pays it, right after a backward pass: steps
 * rotate between ct_optim_step, ct_optim_step_checked (the update that tests each gradient as
 * it reads it: the trainer's under on_nonfinite stop, the default, and rollback) and
 * ct_optim_step_if_finite (every gradient scanned before anything is written: under skip), and
 * the difference of the medians is each check's cost (ct_optim_step runs the same loops without
 * the test: src/optim/optim.c). */
static void decompose(setup *s, double fixed, int64_t steps) {
    enum { PLAIN, CHECKED, GUARDED, ARMS };
    ct_graph *g;
    ct_graph_create(s->ctx, NULL, &g);
    double *t[ARMS], *whole = malloc((size_t)steps * sizeof *whole);
    int64_t n[ARMS] = {0}, done = 0;
    for (int k = 0; k < ARMS; k++) {
        t[k] = malloc((size_t)steps * sizeof *t[k]);
        if (!t[k]) exit(1);
    }
    if (!whole) exit(1);
    while (done < ARMS * steps) {
        int arm = (int)(done % ARMS);
        double t0 = now_s();
        if (!forward_backward(s, g)) continue;
        double t1 = now_s();
        bool ok = true;
        if (arm == PLAIN)
            ct_optim_step(s->opt);
        else if (arm == CHECKED)
            ok = ct_optim_step_checked(s->opt);
        else
            ok = ct_optim_step_if_finite(s->opt);
        double t2 = now_s();
        if (!ok) die(s->ctx);
        ct_params_zero_grad(s->P);
        t[arm][n[arm]++] = t2 - t1;
        if (arm == PLAIN) whole[n[arm] - 1] = now_s() - t0;
        done++;
    }
    ct_graph_destroy(g);
    double m[ARMS];
    for (int k = 0; k < ARMS; k++)
        m[k] = median_of(t[k], (int)n[k]);
    double hand = median_of(whole, (int)n[PLAIN]);
    if (fixed < 0) fixed = 0;
    double checked = m[CHECKED] - m[PLAIN], guarded = m[GUARDED] - m[PLAIN];
    printf("fmnist mlp batch 128   decomposed (%lld floats, update %.2f us of a %.0f us step): "
           "fixed %.2f us + check in the update %.2f us = %.2f%% (stop, rollback) | "
           "+ check before the update %.2f us = %.2f%% (skip) | loss-only %.2f%%\n",
           (long long)ct_params_numel(s->P), m[PLAIN] * 1e6, hand * 1e6, fixed * 1e6, checked * 1e6,
           100 * (fixed + checked) / hand, guarded * 1e6, 100 * (fixed + guarded) / hand,
           100 * fixed / hand);
    for (int k = 0; k < ARMS; k++)
        free(t[k]);
    free(whole);
}

/* The profile's cost: the median over `pairs` back-to-back pairs of trainer runs, profiling off
 * then on, of (on - off) / off per step. */
static void
profile_cost(const char *name, setup *s, int64_t steps, int pairs, ct_profile_mode mode) {
    double *rel = malloc((size_t)pairs * sizeof *rel), *diff = malloc((size_t)pairs * sizeof *rel);
    if (!rel || !diff) exit(1);
    with_trainer(s, steps, 10, true); /* warm up */
    double off_sum = 0.0;
    for (int k = 0; k < pairs; k++) {
        double a = with_trainer(s, steps, 10, true);
        double b = with_trainer_profiled(s, steps, 10, true, mode);
        rel[k] = (b - a) / a;
        diff[k] = b - a;
        off_sum += a;
    }
    qsort(rel, (size_t)pairs, sizeof *rel, cmp_double);
    qsort(diff, (size_t)pairs, sizeof *diff, cmp_double);
    printf("%-22s %d pairs x %lld steps: step %8.2f us | profile %s costs %6.3f us (%5.2f%%, "
           "quartiles %5.2f%% to %5.2f%%)\n",
           name, pairs, (long long)steps, off_sum / pairs * 1e6,
           mode == CT_PROFILE_MODE_LAYERS ? "layers" : "steps", diff[pairs / 2] * 1e6,
           100 * rel[pairs / 2], 100 * rel[pairs / 4], 100 * rel[3 * pairs / 4]);
    free(rel);
    free(diff);
}

/* The profile's cost in each case (--profile), and what it is made of: a plain step (no
 * record, checkpoint or callback) reads the clock five times (src/train/fit.c), whose cost is
 * measured here on its own, free of the run-to-run noise of the pairs. */
static void profile_costs(int64_t steps, ct_profile_mode mode) {
    enum { READS = 1000000 };
    double t0 = now_s(), sink = 0.0;
    for (int i = 0; i < READS; i++)
        sink += now_s();
    double read = (now_s() - t0) / READS;
    printf("step profile cost: a clock reading %.1f ns, 5 a plain step = %.3f us%s\n", read * 1e9,
           5 * read * 1e6, sink > 0.0 ? "" : " ");
    printf("medians of back-to-back pairs of trainer runs (off, on)\n");
    setup s;
    make(&s, 32);
    profile_cost("mlp 32-32-10 batch 1", &s, steps, 21, mode);
    unmake(&s);
    make(&s, 784);
    profile_cost("mlp 784-128-10 batch 1", &s, steps, 21, mode);
    unmake(&s);
    make(&s, 0);
    profile_cost("fmnist mlp batch 128", &s, steps / 40, 21, mode);
    unmake(&s);
}

int main(int argc, char **argv) {
    int64_t steps = 2000;
    ct_profile_mode profile = CT_PROFILE_MODE_OFF;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--steps") == 0) steps = strtol(argv[i + 1], NULL, 10);
        if (strcmp(argv[i], "--profile") == 0)
            profile =
                strcmp(argv[i + 1], "layers") == 0 ? CT_PROFILE_MODE_LAYERS : CT_PROFILE_MODE_STEPS;
    }
    if (steps < 10) steps = 10;
    if (profile != CT_PROFILE_MODE_OFF) {
        profile_costs(steps, profile);
        return 0;
    }
    printf("trainer overhead, steps_per_loop 10, medians of back-to-back pairs of runs\n");
    setup s;
    make(&s, 32);
    double fixed = run("mlp 32-32-10 batch 1", &s, steps, 21);
    unmake(&s);
    make(&s, 784);
    run("mlp 784-128-10 batch 1", &s, steps, 21);
    unmake(&s);
    make(&s, 0);
    run("fmnist mlp batch 128", &s, steps / 40, 41);
    decompose(&s, fixed, steps);
    unmake(&s);
    return 0;
}
