/*
 * test_golden_trainer.c - a whole training run through ct_trainer against the same run in
 * PyTorch (tests/golden/gen_trainer.py): an MLP from the mlp builder, micro-batches with
 * gradient accumulation, AdamW with a no-decay group for biases, clipping by global norm, and a
 * cosine schedule stepped per step. Every step's loss, gradient norm and learning rate, and the
 * final weights, must match.
 */
#include <string.h>

#include "ctrain/ctrain.h"
#include "fixture.h"
#include "harness.h"

static ct_ctx *ctx;

/* The fixture's x [96, 8] and y [96] as a dataset (the plugin path). */
typedef struct arrays {
    const float *x;
    const int64_t *y;
} arrays;

static arrays the_data;

static ct_status arr_open(ct_ctx *c, const ct_options *o, ct_dataset_info *info, void **self) {
    (void)c, (void)o;
    memset(info, 0, sizeof *info);
    info->n = 96;
    info->x_dtype = CT_F32;
    info->x_ndim = 1;
    info->x_shape[0] = 8;
    info->y_dtype = CT_I64;
    info->n_classes = 3;
    *self = &the_data;
    return CT_OK;
}

static ct_status arr_get(const void *self, int64_t i, void *x, void *y) {
    const arrays *a = self;
    memcpy(x, a->x + i * 8, 8 * sizeof(float));
    *(int64_t *)y = a->y[i];
    return CT_OK;
}

static void arr_close(ct_ctx *c, void *self) {
    (void)c, (void)self;
}

static const ct_dataset_vtable arr_vt = {0,         "arrays", arr_open, arr_get,
                                         arr_close, NULL,     NULL,     NULL};

typedef struct seen {
    int64_t n;
    float loss[16], norm[16], lr[16];
} seen;

static ct_status on_log(void *user, ct_trainer *t, const ct_metric_value *v, int64_t n) {
    (void)t;
    seen *s = user;
    for (int64_t i = 0; i < n && s->n < 16; i++) {
        if (!strcmp(v[i].name, "train/loss")) s->loss[s->n] = (float)v[i].value;
        if (!strcmp(v[i].name, "train/grad_norm")) s->norm[s->n] = (float)v[i].value;
        if (!strcmp(v[i].name, "train/lr")) s->lr[s->n] = (float)v[i].value;
    }
    s->n++;
    return CT_OK;
}

static void trainer_should_train_like_pytorch(void) {
    gf_file f;
    if (!gf_load(&f, "trainer.bin")) {
        CT_CHECK(0);
        return;
    }
    const gf_array *x = gf_get(&f, "x"), *y = gf_get(&f, "y");
    the_data.x = x->data;
    the_data.y = y->data;
    ct_dataset *ds;
    ct_loader *loader;
    ct_params *P;
    ct_model *m;
    ct_optim *opt;
    ct_schedule *sched;
    ct_option mi[] = {{"hidden", "16"}, {"out", "3"}};
    ct_options mo = {mi, 2, "test: model"};
    ct_loader_params lp = ct_loader_default_params();
    lp.batch_size = 16;
    lp.shuffle = false;
    CT_CHECK_INT(ct_dataset_open_with(ctx, &arr_vt, NULL, &ds), CT_OK);
    CT_CHECK_INT(ct_loader_create(ctx, ds, &lp, &loader), CT_OK);
    CT_CHECK_INT(ct_params_create(ctx, &P), CT_OK);
    CT_CHECK_INT(ct_model_build_alloc(ctx, "mlp", &mo, P, CT_F32, 1, (int64_t[]){8}, 1, &m), CT_OK);
    const char *names[4] = {"0.weight", "0.bias", "2.weight", "2.bias"};
    for (int i = 0; i < 4; i++) {
        char key[64];
        snprintf(key, sizeof key, "init/%s", names[i]);
        const gf_array *a = gf_get(&f, key);
        ct_tensor *t = ct_model_param(m, names[i]);
        CT_CHECK(a && t && a->numel == ct_tensor_numel(t));
        if (a && t) memcpy(t->data, a->data, (size_t)a->numel * sizeof(float));
    }
    ct_optim_params op = ct_optim_default_params(CT_OPTIM_ADAMW);
    op.lr = 0.01f;
    op.weight_decay = 0.05f;
    CT_CHECK_INT(ct_optim_create(ctx, P, &op, &opt), CT_OK);
    CT_CHECK_INT(ct_optim_add_group(opt, "*.bias", 1.0f, 0.0f), CT_OK);
    ct_option si[] = {{"t_max", "9"}};
    ct_options so = {si, 1, "test: schedule"};
    CT_CHECK_INT(ct_schedule_create(ctx, "cosine", &so, 0.01f, &sched), CT_OK);
    seen s = {0};
    ct_trainer_params tp = ct_trainer_default_params();
    tp.model = m;
    tp.store = P;
    tp.optim = opt;
    tp.schedule = sched;
    tp.train = loader;
    tp.max_epochs = 3;
    tp.accum_steps = 2;
    tp.grad_clip_norm = 0.5f;
    tp.steps_per_loop = 1;
    tp.callbacks.on_log = on_log;
    tp.callbacks.user = &s;
    ct_trainer *t;
    CT_CHECK_INT(ct_trainer_create(ctx, &tp, &t), CT_OK);
    CT_CHECK_INT(ct_trainer_fit(t), CT_OK);
    CT_CHECK_INT(ct_trainer_step(t), 9);
    CT_CHECK_INT(s.n, 9);
    CT_CHECK_ARRAYS("window losses", s.loss, (const float *)gf_get(&f, "window_loss")->data, 9,
                    1e-6, 1e-5);
    CT_CHECK_ARRAYS("gradient norms", s.norm, (const float *)gf_get(&f, "grad_norm")->data, 9, 1e-6,
                    1e-5);
    CT_CHECK_ARRAYS("learning rates", s.lr, (const float *)gf_get(&f, "lr")->data, 9, 1e-9, 1e-6);
    for (int i = 0; i < 4; i++) {
        char key[64];
        snprintf(key, sizeof key, "final/%s", names[i]);
        const gf_array *a = gf_get(&f, key);
        ct_tensor *w = ct_model_param(m, names[i]);
        if (a && w) CT_CHECK_ARRAYS(key, w->data, (const float *)a->data, a->numel, 1e-6, 1e-5);
    }
    ct_trainer_destroy(t);
    ct_schedule_destroy(sched);
    ct_optim_destroy(opt);
    ct_model_destroy(m);
    ct_params_destroy(P);
    ct_loader_destroy(loader);
    ct_dataset_close(ds);
    gf_free(&f);
}

int main(void) {
    if (ct_ctx_create(NULL, &ctx) != CT_OK) return 1;
    CT_RUN(trainer_should_train_like_pytorch);
    ct_ctx_destroy(ctx);
    return ct_test_finish();
}
