/*
 * test_trainer_spike.c - the trainer's loss-spike handling (trainer_params.spike) on blobs with
 * planted bad samples (synthetic corrupt_every): spikes are counted at the planted batches
 * and nowhere else, warn applies their updates, skip leaves the weights as they were, and
 * rollback restores the last good state, but not the same one twice.
 *
 * Each test builds its own data, model, optimizer and trainer, and frees them; the context is
 * shared.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctrain/ctrain.h"
#include "ctrain/trainer.h"
#include "harness.h"

/* 640 samples in batches of 32: 20 batches an epoch; samples 319 and 639 have their inputs
 * multiplied by -1000, in batches 9 and 19, which the trained model then gets badly wrong. */
enum { N = 640, BATCH = 32, PLANTED_EVERY = 10, EPOCHS = 3 };

static ct_ctx *ctx;

typedef struct run {
    ct_dataset *data;
    ct_loader *loader;
    ct_params *params;
    ct_model *model;
    ct_optim *opt;
    ct_trainer *t;
    float *before;   /* the weights before the current batch */
    int64_t changed; /* bit per batch of the epoch: its step changed the weights */
    int64_t spiked;  /* bit per batch: a spike was counted at it (all epochs) */
    int64_t last_spikes;
    int64_t rollbacks;
    int64_t bad; /* checks failed inside the callback */
} run;

static ct_status on_start(void *user, ct_trainer *t, int64_t batch) {
    (void)t;
    (void)batch;
    run *r = user;
    memcpy(r->before, ct_params_values(r->params),
           (size_t)ct_params_numel(r->params) * sizeof(float));
    return CT_OK;
}

static ct_status on_end(void *user, ct_trainer *t, int64_t batch, double loss) {
    (void)loss;
    run *r = user;
    size_t bytes = (size_t)ct_params_numel(r->params) * sizeof(float);
    if (memcmp(r->before, ct_params_values(r->params), bytes) != 0)
        r->changed |= (int64_t)1 << batch;
    if (ct_trainer_spikes(t) != r->last_spikes) {
        r->spiked |= (int64_t)1 << batch;
        r->last_spikes = ct_trainer_spikes(t);
    }
    return CT_OK;
}

static ct_status on_rollback(void *user, ct_trainer *t, int64_t step) {
    (void)t;
    (void)step;
    ((run *)user)->rollbacks++;
    return CT_OK;
}

static const char *window = "8"; /* the detector's window; warmup 8 */

static int run_open(run *r, const char *action, const char *signal) {
    memset(r, 0, sizeof *r);
    ct_option d[] = {
        {"kind", "blobs"}, {"n", "640"},  {"features", "8"},        {"classes", "3"},
        {"spread", "4"},   {"seed", "5"}, {"corrupt_every", "320"}, {"corrupt_scale", "-1000"}};
    ct_options dopts = {d, 8, "test: data"};
    ct_option m[] = {{"hidden", "16"}, {"out", "3"}};
    ct_options mopts = {m, 2, "test: model"};
    ct_option sp[] = {{"action", action}, {"window", window}, {"signal", signal}, {"warmup", "8"}};
    static ct_options spopts;
    spopts = (ct_options){sp, 4, "test: on_spike"};
    ct_loader_params lp = ct_loader_default_params();
    lp.batch_size = BATCH;
    lp.shuffle = false;
    ct_optim_params op = ct_optim_default_params(CT_OPTIM_ADAM);
    op.lr = 0.01f;
    if (ct_dataset_open(ctx, "synthetic", &dopts, &r->data) != CT_OK ||
        ct_loader_create(ctx, r->data, &lp, &r->loader) != CT_OK ||
        ct_params_create(ctx, &r->params) != CT_OK ||
        ct_model_build_alloc(ctx, "mlp", &mopts, r->params, CT_F32, 1, (const int64_t[]){8}, 11,
                             &r->model) != CT_OK ||
        ct_optim_create(ctx, r->params, &op, &r->opt) != CT_OK)
        goto fail;
    r->before = malloc((size_t)ct_params_numel(r->params) * sizeof(float));
    ct_trainer_params p = ct_trainer_default_params();
    p.model = r->model;
    p.store = r->params;
    p.optim = r->opt;
    p.train = r->loader;
    p.max_epochs = EPOCHS;
    p.spike = &spopts;
    p.callbacks.user = r;
    p.callbacks.on_iteration_start = on_start;
    p.callbacks.on_iteration_end = on_end;
    p.callbacks.on_rollback = on_rollback;
    if (!r->before || ct_trainer_create(ctx, &p, &r->t) != CT_OK) goto fail;
    return 1;
fail:
    fprintf(stderr, "setup: %s\n", ct_last_error(ctx));
    CT_CHECK(0);
    return 0;
}

static void run_close(run *r) {
    ct_trainer_destroy(r->t);
    free(r->before);
    ct_optim_destroy(r->opt);
    ct_model_destroy(r->model);
    ct_params_destroy(r->params);
    ct_loader_destroy(r->loader);
    ct_dataset_close(r->data);
}

static bool all_finite_weights(const ct_params *p) {
    const float *v = ct_params_values(p);
    for (int64_t i = 0; i < ct_params_numel(p); i++)
        if (!(v[i] == v[i]) || v[i] > 3e38f || v[i] < -3e38f) return false;
    return true;
}

/* The batches of an epoch that hold a planted sample, one bit each. */
static int64_t planted(void) {
    int64_t bits = 0;
    for (int64_t b = PLANTED_EVERY - 1; b < N / BATCH; b += PLANTED_EVERY)
        bits |= (int64_t)1 << b;
    return bits;
}

static void trainer_should_count_spikes_at_the_planted_batches_only(void) {
    run r;
    if (!run_open(&r, "warn", "loss")) return;
    CT_CHECK_INT(ct_trainer_fit(r.t), CT_OK);
    /* the first epoch's planted batches spike; trained on, later ones may no longer */
    CT_CHECK_INT(r.spiked & ~planted(), 0);
    CT_CHECK(r.spiked != 0);
    CT_CHECK(ct_trainer_spikes(r.t) >= 2);
    CT_CHECK_INT(r.changed, ((int64_t)1 << (N / BATCH)) - 1); /* warn applies every update */
    CT_CHECK_INT(ct_trainer_step(r.t), EPOCHS * N / BATCH);
    run_close(&r);
}

static void skip_at_the_planted_batches(const char *signal) {
    run r;
    if (!run_open(&r, "skip", signal)) return;
    CT_CHECK_INT(ct_trainer_fit(r.t), CT_OK);
    CT_CHECK_INT(r.spiked, planted());
    CT_CHECK_INT(ct_trainer_spikes(r.t), 2 * EPOCHS);
    CT_CHECK_INT(r.changed, (((int64_t)1 << (N / BATCH)) - 1) & ~planted());
    CT_CHECK_INT(ct_trainer_step(r.t), EPOCHS * (N / BATCH - 2));
    run_close(&r);
}

static void trainer_should_leave_the_weights_untouched_on_a_skipped_spike(void) {
    skip_at_the_planted_batches("loss");
}

/* the planted inputs make the gradient as large as the loss */
static void trainer_should_find_spikes_in_the_gradient_norm(void) {
    skip_at_the_planted_batches("grad_norm");
}

static void trainer_should_roll_back_a_spike_to_the_last_good_state(void) {
    run r;
    if (!run_open(&r, "rollback", "loss")) return;
    CT_CHECK_INT(ct_trainer_fit(r.t), CT_OK);
    CT_CHECK_INT(r.spiked, planted());
    CT_CHECK_INT(ct_trainer_spikes(r.t), 2 * EPOCHS);
    /* every spike goes back to the last multiple of window (8) steps or the epoch's start:
       batch 9 of the first epoch (step 10) to step 8, so more than the spike's step is lost */
    CT_CHECK(ct_trainer_step(r.t) < EPOCHS * (N / BATCH - 2));
    CT_CHECK_INT(r.changed & ~planted(), (((int64_t)1 << (N / BATCH)) - 1) & ~planted());
    CT_CHECK(all_finite_weights(r.params));
    run_close(&r);
}

static void quiet(void *user, ct_log_level level, const char *msg) {
    (void)user;
    (void)level;
    (void)msg;
}

/* with a window of 30 the good state is taken at the epochs' ends (every 18 to 20 steps) and
 * at step 30, 60: the second spike of an epoch comes before a new one, and is skipped */
static void trainer_should_skip_a_spike_that_would_roll_back_to_the_same_state(void) {
    run r;
    window = "30";
    int ok = run_open(&r, "rollback", "loss");
    window = "8";
    if (!ok) return;
    CT_CHECK_INT(ct_trainer_fit(r.t), CT_OK);
    CT_CHECK_INT(r.spiked, planted());
    CT_CHECK_INT(ct_trainer_spikes(r.t), 2 * EPOCHS);
    CT_CHECK_INT(r.rollbacks, EPOCHS);
    /* each epoch: batch 9 rolls back to the epoch's start, batches 10-18 make 9 steps, batch
       19 is skipped (rolling back again, no epoch would make any) */
    CT_CHECK_INT(ct_trainer_step(r.t), EPOCHS * 9);
    run_close(&r);
}

int main(void) {
    ct_ctx_params cp = ct_ctx_default_params();
    cp.n_threads = 1;
    cp.log = quiet; /* the spike warnings are expected here */
    if (ct_ctx_create(&cp, &ctx) != CT_OK) return 1;
    CT_RUN(trainer_should_count_spikes_at_the_planted_batches_only);
    CT_RUN(trainer_should_leave_the_weights_untouched_on_a_skipped_spike);
    CT_RUN(trainer_should_find_spikes_in_the_gradient_norm);
    CT_RUN(trainer_should_roll_back_a_spike_to_the_last_good_state);
    CT_RUN(trainer_should_skip_a_spike_that_would_roll_back_to_the_same_state);
    ct_ctx_destroy(ctx);
    return ct_test_finish();
}
