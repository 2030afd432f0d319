/*
 * test_trainer_profile.c - the trainer's step profile (ct_trainer_profile): the phases add up to
 * the fit's wall time, none is negative, the step count is the trainer's, profiling off reports
 * nothing, a slow dataset shows up as waiting for data and a model's layers are listed in
 * forward order.
 *
 * Each test builds its own data (a small table whose samples are made on demand, sleeping when
 * asked), model, optimizer and trainer, and frees them; the context is shared.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ctrain/ctrain.h"
#include "ctrain/trainer.h"
#include "harness.h"
#include "test_alloc.h"

enum { N_FEAT = 4, N_CLASS = 2, N_SAMPLES = 64, BATCH = 8 };

static ct_ctx *ctx;

/* ---- a dataset whose samples take `sleep_us` each to read ---- */

typedef struct slow_data {
    long sleep_us;
} slow_data;

static ct_status slow_open(ct_ctx *c, const ct_options *opts, ct_dataset_info *info, void **self) {
    slow_data *d = ct_alloc(c, sizeof *d);
    if (!d) return CT_FAIL(c, CT_ERR_OOM, "slow data");
    d->sleep_us = 0;
    for (int64_t i = 0; opts && i < opts->count; i++)
        if (strcmp(opts->items[i].key, "sleep_us") == 0) d->sleep_us = atol(opts->items[i].value);
    memset(info, 0, sizeof *info);
    info->n = N_SAMPLES;
    info->x_dtype = CT_F32;
    info->x_ndim = 1;
    info->x_shape[0] = N_FEAT;
    info->y_dtype = CT_I64;
    info->n_classes = N_CLASS;
    *self = d;
    return CT_OK;
}

static ct_status slow_get(const void *self, int64_t i, void *x, void *y) {
    const slow_data *d = self;
    if (d->sleep_us > 0) {
        struct timespec ts = {0, d->sleep_us * 1000L};
        (void)nanosleep(&ts, NULL);
    }
    float *xf = x;
    for (int k = 0; k < N_FEAT; k++)
        xf[k] = (float)((i * 7 + k * 3) % 11) / 11.0f - (i % 2 ? 0.5f : 0.0f);
    *(int64_t *)y = i % 2;
    return CT_OK;
}

static void slow_close(ct_ctx *c, void *self) {
    ct_free(c, self, sizeof(slow_data));
}

static const ct_dataset_vtable slow_vt = {0,          "slow", slow_open, slow_get,
                                          slow_close, NULL,   NULL,      NULL};

/* ---- fixture ---- */

typedef struct fixture {
    ct_dataset *ds;
    ct_loader *train, *valid;
    ct_params *params;
    ct_model *model;
    ct_optim *opt;
    ct_trainer *t;
} fixture;

static const ct_metric_spec acc_spec = {"accuracy", NULL, NULL, {NULL, 0, NULL}};

static void fx_close(fixture *f);

/* The data (sleep_us per sample read), an MLP, SGD and a trainer of `epochs` epochs with a
 * validation engine (reading the same data) and the given profile mode. */
static int fx_open(fixture *f, const char *sleep_us, int64_t epochs, ct_profile_mode mode) {
    memset(f, 0, sizeof *f);
    ct_option items[] = {{"sleep_us", sleep_us}};
    ct_options o = {items, 1, "test: data"};
    ct_option mitems[] = {{"hidden", "8"}, {"out", "2"}};
    ct_options mo = {mitems, 2, "test: model"};
    ct_loader_params lp = ct_loader_default_params();
    lp.batch_size = BATCH;
    lp.prefetch = 0; /* the trainer itself waits for every batch */
    ct_optim_params op = ct_optim_default_params(CT_OPTIM_SGD);
    if (ct_dataset_open_with(ctx, &slow_vt, &o, &f->ds) != CT_OK ||
        ct_loader_create(ctx, f->ds, &lp, &f->train) != CT_OK ||
        ct_loader_create(ctx, f->ds, &lp, &f->valid) != CT_OK ||
        ct_params_create(ctx, &f->params) ||
        ct_model_build_alloc(ctx, "mlp", &mo, f->params, CT_F32, 1, (const int64_t[]){N_FEAT}, 3,
                             &f->model) != CT_OK ||
        ct_optim_create(ctx, f->params, &op, &f->opt) != CT_OK)
        goto fail;
    ct_eval_engine en = {"valid", f->valid, 1, 0, &acc_spec, 1};
    ct_trainer_params tp = ct_trainer_default_params();
    tp.model = f->model;
    tp.store = f->params;
    tp.optim = f->opt;
    tp.train = f->train;
    tp.engines = &en;
    tp.n_engines = 1;
    tp.max_epochs = epochs;
    tp.profile = mode;
    if (ct_trainer_create(ctx, &tp, &f->t) != CT_OK) goto fail;
    return 1;
fail:
    fprintf(stderr, "fixture: %s\n", ct_last_error(ctx));
    CT_CHECK(0);
    fx_close(f);
    return 0;
}

static void fx_close(fixture *f) {
    ct_trainer_destroy(f->t);
    ct_optim_destroy(f->opt);
    ct_model_destroy(f->model);
    ct_params_destroy(f->params);
    ct_loader_destroy(f->valid);
    ct_loader_destroy(f->train);
    ct_dataset_close(f->ds);
}

static double phase_sum(const ct_trainer_profile_info *p) {
    double s = 0.0;
    for (int k = 0; k < CT_PROFILE_PHASE_COUNT; k++)
        s += p->total[k];
    return s;
}

/* ---- tests ---- */

static void trainer_profile_should_add_up_to_the_wall_time(void) {
    fixture f;
    if (!fx_open(&f, "0", 3, CT_PROFILE_MODE_STEPS)) return;
    CT_CHECK_INT(ct_trainer_fit(f.t), CT_OK);
    ct_trainer_profile_info p;
    CT_CHECK_INT(ct_trainer_profile(f.t, &p), CT_OK);
    CT_CHECK_INT(p.mode, CT_PROFILE_MODE_STEPS);
    CT_CHECK_INT(p.steps, ct_trainer_step(f.t));
    CT_CHECK_INT(p.steps, 3 * N_SAMPLES / BATCH);
    CT_CHECK_INT(p.median_steps, p.steps);
    CT_CHECK(p.wall_seconds > 0.0);
    CT_CHECK_CLOSE(phase_sum(&p), p.wall_seconds, 1e-9, 1e-9);
    for (int k = 0; k < CT_PROFILE_PHASE_COUNT; k++) {
        CT_CHECK_MSG(p.total[k] >= 0.0 && p.median[k] >= 0.0, "phase %s: total %g, median %g",
                     ct_profile_phase_name((ct_profile_phase)k), p.total[k], p.median[k]);
    }
    CT_CHECK(p.total[CT_PROFILE_FORWARD] > 0.0 && p.total[CT_PROFILE_BACKWARD] > 0.0);
    CT_CHECK(p.total[CT_PROFILE_OPTIMIZER] > 0.0 && p.total[CT_PROFILE_EVAL] > 0.0);
    CT_CHECK(p.total[CT_PROFILE_COMM] == 0.0); /* one process exchanges nothing */
    CT_CHECK(p.median_wall > 0.0 && p.median_wall <= p.wall_seconds);
    CT_CHECK(p.layers == NULL && p.n_layers == 0); /* steps only */
    CT_CHECK(ct_profile_phase_name(CT_PROFILE_PHASE_COUNT) == NULL);
    CT_CHECK(strcmp(ct_profile_phase_name(CT_PROFILE_DATA), "data") == 0);
    fx_close(&f);
}

static void trainer_profile_should_report_nothing_when_off(void) {
    fixture f;
    if (!fx_open(&f, "0", 1, CT_PROFILE_MODE_OFF)) return;
    CT_CHECK_INT(ct_trainer_fit(f.t), CT_OK);
    ct_trainer_profile_info p;
    memset(&p, 0xff, sizeof p);
    CT_CHECK_INT(ct_trainer_profile(f.t, &p), CT_OK);
    CT_CHECK_INT(p.mode, CT_PROFILE_MODE_OFF);
    CT_CHECK_INT(p.steps, 0);
    CT_CHECK(p.wall_seconds == 0.0 && phase_sum(&p) == 0.0);
    fx_close(&f);
}

/* 300 us a sample, 8 a batch: at least 2.4 ms of every step is spent waiting for data, far
 * more than the tiny model's forward and backward passes. */
static void trainer_profile_should_show_a_slow_dataset_as_data_wait(void) {
    fixture f;
    if (!fx_open(&f, "300", 1, CT_PROFILE_MODE_STEPS)) return;
    CT_CHECK_INT(ct_trainer_fit(f.t), CT_OK);
    ct_trainer_profile_info p;
    CT_CHECK_INT(ct_trainer_profile(f.t, &p), CT_OK);
    CT_CHECK_INT(p.steps, N_SAMPLES / BATCH);
    CT_CHECK_MSG(p.median[CT_PROFILE_DATA] >= 0.9 * BATCH * 300e-6,
                 "median data wait %g s per step", p.median[CT_PROFILE_DATA]);
    CT_CHECK_MSG(
        p.total[CT_PROFILE_DATA] > p.total[CT_PROFILE_FORWARD] + p.total[CT_PROFILE_BACKWARD] +
                                       p.total[CT_PROFILE_OPTIMIZER],
        "data %g s, forward %g, backward %g, optimizer %g", p.total[CT_PROFILE_DATA],
        p.total[CT_PROFILE_FORWARD], p.total[CT_PROFILE_BACKWARD], p.total[CT_PROFILE_OPTIMIZER]);
    /* the validation pass reads the same slow data: evaluation, not data wait */
    CT_CHECK_MSG(p.total[CT_PROFILE_EVAL] >= 0.9 * N_SAMPLES * 300e-6, "eval %g s",
                 p.total[CT_PROFILE_EVAL]);
    CT_CHECK_CLOSE(phase_sum(&p), p.wall_seconds, 1e-9, 1e-9);
    fx_close(&f);
}

/* The MLP's layers (linear, relu, linear) by name and type in forward order, each timed in
 * both passes, within the forward and backward phases that contain them. */
static void trainer_profile_should_time_each_layer(void) {
    fixture f;
    if (!fx_open(&f, "0", 2, CT_PROFILE_MODE_LAYERS)) return;
    CT_CHECK_INT(ct_model_layer_count(f.model), 3);
    CT_CHECK(ct_model_layer_name(f.model, 3) == NULL && ct_model_layer_type(f.model, -1) == NULL);
    CT_CHECK_INT(ct_trainer_fit(f.t), CT_OK);
    ct_trainer_profile_info p;
    CT_CHECK_INT(ct_trainer_profile(f.t, &p), CT_OK);
    CT_CHECK_INT(p.mode, CT_PROFILE_MODE_LAYERS);
    CT_CHECK_INT(p.n_layers, 3);
    static const char *const names[] = {"0", "1", "2"}, *const types[] = {"linear", "relu",
                                                                          "linear"};
    double fwd = 0.0, bwd = 0.0;
    for (int64_t i = 0; i < p.n_layers && i < 3; i++) {
        const ct_profile_layer *l = &p.layers[i];
        CT_CHECK_MSG(strcmp(l->name, names[i]) == 0 && strcmp(l->type, types[i]) == 0,
                     "layer %lld: %s (%s)", (long long)i, l->name, l->type);
        CT_CHECK_MSG(l->forward_seconds > 0.0 && l->backward_seconds > 0.0,
                     "layer %s: forward %g s, backward %g s", l->name, l->forward_seconds,
                     l->backward_seconds);
        fwd += l->forward_seconds;
        bwd += l->backward_seconds;
    }
    CT_CHECK_MSG(fwd <= p.total[CT_PROFILE_FORWARD] && bwd <= p.total[CT_PROFILE_BACKWARD],
                 "layers: forward %g s of %g, backward %g s of %g", fwd,
                 p.total[CT_PROFILE_FORWARD], bwd, p.total[CT_PROFILE_BACKWARD]);
    CT_CHECK_CLOSE(phase_sum(&p), p.wall_seconds, 1e-9, 1e-9);
    fx_close(&f);
}

static void trainer_profile_should_refuse_an_unknown_mode(void) {
    fixture f;
    if (!fx_open(&f, "0", 1, CT_PROFILE_MODE_OFF)) return;
    ct_trainer_params tp = ct_trainer_default_params();
    tp.model = f.model;
    tp.store = f.params;
    tp.optim = f.opt;
    tp.train = f.train;
    tp.profile = CT_PROFILE_MODE_COUNT;
    ct_trainer *t = NULL;
    CT_CHECK_INT(ct_trainer_create(ctx, &tp, &t), CT_ERR_CONFIG);
    CT_CHECK(t == NULL);
    fx_close(&f);
}

/* Each allocation of a trainer with the layer profile failed in turn: the failed create frees
 * what it allocated, giving the allocator the sizes it asked for. */
static void trainer_profile_should_free_its_tables_when_an_allocation_fails(void) {
    test_alloc ta = {0};
    ct_ctx_params cp = ct_ctx_default_params();
    cp.allocator = test_allocator(&ta);
    ct_ctx *shared = ctx;
    if (ct_ctx_create(&cp, &ctx) != CT_OK) {
        ctx = shared;
        CT_CHECK(0);
        return;
    }
    fixture f;
    if (fx_open(&f, "0", 1, CT_PROFILE_MODE_OFF)) {
        ct_trainer_params tp = ct_trainer_default_params();
        tp.model = f.model;
        tp.store = f.params;
        tp.optim = f.opt;
        tp.train = f.train;
        tp.profile = CT_PROFILE_MODE_LAYERS;
        ct_status s = CT_ERR_OOM;
        for (long long k = 1; s == CT_ERR_OOM && k < 1000; k++) {
            long long live = ta.live, mismatch = ta.size_mismatch;
            ct_trainer *t = NULL;
            ta.fail_at = ta.n_alloc + k;
            s = ct_trainer_create(ctx, &tp, &t);
            ta.fail_at = 0;
            ct_trainer_destroy(t);
            CT_CHECK_MSG(ta.live == live && ta.size_mismatch == mismatch,
                         "allocation %lld failed: %lld bytes left, %lld frees of another size", k,
                         ta.live - live, ta.size_mismatch - mismatch);
        }
        CT_CHECK_INT(s, CT_OK);
        fx_close(&f);
    }
    ct_ctx_destroy(ctx);
    ctx = shared;
}

int main(void) {
    ct_ctx_params cp = ct_ctx_default_params();
    if (ct_ctx_create(&cp, &ctx) != CT_OK) return 1;
    CT_RUN(trainer_profile_should_add_up_to_the_wall_time);
    CT_RUN(trainer_profile_should_report_nothing_when_off);
    CT_RUN(trainer_profile_should_show_a_slow_dataset_as_data_wait);
    CT_RUN(trainer_profile_should_time_each_layer);
    CT_RUN(trainer_profile_should_refuse_an_unknown_mode);
    CT_RUN(trainer_profile_should_free_its_tables_when_an_allocation_fails);
    ct_ctx_destroy(ctx);
    return ct_test_finish();
}
