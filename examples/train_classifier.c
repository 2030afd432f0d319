/*
 * train_classifier.c - trains the mlp builder on synthetic blobs through the trainer: a
 * validation engine with an accuracy metric, a cosine learning-rate schedule, an EMA of the
 * weights (which evaluation uses), early stopping on the validation loss, and progress printed
 * from the callbacks. Compare examples/mlp_demo.c, which writes the same loop by hand.
 */
#include <stdio.h>
#include <string.h>

#include "ctrain/ctrain.h"
#include "ctrain/trainer.h"

enum { EPOCHS = 12 };

static ct_status print_log(void *user, ct_trainer *t, const ct_metric_value *v, int64_t n) {
    (void)user;
    printf("step %4lld", (long long)ct_trainer_step(t));
    for (int64_t i = 0; i < n; i++)
        printf("  %s %.4g", v[i].name, v[i].value);
    printf("\n");
    return CT_OK;
}

static ct_status
print_eval(void *user, ct_trainer *t, const char *key, const ct_metric_value *v, int64_t n) {
    (void)user;
    printf("epoch %2lld  %s:", (long long)ct_trainer_current_epoch(t), key);
    for (int64_t i = 0; i < n; i++)
        printf("  %s %.4f", v[i].name, v[i].value);
    printf("\n");
    return CT_OK;
}

int main(void) {
    ct_ctx *ctx = NULL;
    if (ct_ctx_create(NULL, &ctx) != CT_OK) return 1;
    ct_dataset *all = NULL, *train = NULL, *valid = NULL;
    ct_loader *train_loader = NULL, *valid_loader = NULL;
    ct_params *params = NULL;
    ct_model *model = NULL;
    ct_optim *opt = NULL;
    ct_schedule *sched = NULL;
    ct_trainer *trainer = NULL;
    ct_status s;

    /* data: 8 Gaussian blobs in 16 dimensions, 20% held out for validation */
    ct_option data[] = {{"kind", "blobs"}, {"n", "4000"},     {"features", "16"},
                        {"classes", "8"},  {"spread", "1.0"}, {"seed", "2024"}};
    ct_options data_opts = {data, 6, "train_classifier: data"};
    ct_loader_params lp = ct_loader_default_params();
    lp.batch_size = 64;
    lp.seed = 1;
    s = ct_dataset_open(ctx, "synthetic", &data_opts, &all);
    if (s == CT_OK) s = ct_dataset_split(all, 0.2, 7, &train, &valid);
    if (s == CT_OK) s = ct_loader_create(ctx, train, &lp, &train_loader);
    lp.shuffle = false;
    lp.shard = CT_SHARD_EVAL;
    if (s == CT_OK) s = ct_loader_create(ctx, valid, &lp, &valid_loader);

    /* model and optimizer: an MLP 16-64-8, SGD with momentum on a cosine schedule */
    ct_option mlp[] = {{"hidden", "64"}, {"out", "8"}};
    ct_options mlp_opts = {mlp, 2, "train_classifier: model"};
    ct_optim_params op = ct_optim_default_params(CT_OPTIM_SGD);
    op.lr = 0.05f;
    op.momentum = 0.9f;
    char t_max[32];
    if (s == CT_OK) s = ct_params_create(ctx, &params);
    if (s == CT_OK)
        s = ct_model_build_alloc(ctx, "mlp", &mlp_opts, params, CT_F32, 1, (const int64_t[]){16}, 1,
                                 &model);
    if (s == CT_OK) s = ct_optim_create(ctx, params, &op, &opt);
    if (s == CT_OK) {
        (void)snprintf(t_max, sizeof t_max, "%lld",
                       (long long)(EPOCHS * ct_loader_batches_per_epoch(train_loader)));
        ct_option cos[] = {{"t_max", t_max}};
        ct_options cos_opts = {cos, 1, "train_classifier: schedule"};
        s = ct_schedule_create(ctx, "cosine", &cos_opts, op.lr, &sched);
    }

    /* the trainer: evaluate "valid" after every epoch, on the EMA weights; stop when the
     * validation loss has not improved for 3 evaluations */
    ct_metric_spec acc = {"accuracy", NULL, NULL, {NULL, 0, NULL}};
    ct_eval_engine engine = {"valid", valid_loader, 1, 0, &acc, 1};
    ct_option ema[] = {{"decay", "0.99"}, {"warmup", "true"}};
    ct_options ema_opts = {ema, 2, "train_classifier: ema"};
    ct_option es[] = {{"monitor", "valid/loss"}, {"patience", "3"}};
    ct_options es_opts = {es, 2, "train_classifier: early_stopping"};
    ct_trainer_params tp = ct_trainer_default_params();
    tp.model = model;
    tp.store = params;
    tp.optim = opt;
    tp.schedule = sched;
    tp.task.kind = CT_TASK_CLASSIFICATION;
    tp.train = train_loader;
    tp.engines = &engine;
    tp.n_engines = 1;
    tp.max_epochs = EPOCHS;
    tp.steps_per_loop = 25;
    tp.ema = &ema_opts;
    tp.early_stopping = &es_opts;
    tp.callbacks.on_log = print_log;
    tp.callbacks.on_eval_end = print_eval;
    if (s == CT_OK) s = ct_trainer_create(ctx, &tp, &trainer);
    if (s == CT_OK) s = ct_trainer_fit(trainer);

    double accuracy = 0.0;
    if (s == CT_OK) {
        int64_t n;
        const ct_metric_value *v = ct_trainer_metrics(trainer, "valid", &n);
        for (int64_t i = 0; i < n; i++)
            if (strcmp(v[i].name, "valid/acc") == 0) accuracy = v[i].value;
        printf("final valid accuracy %.3f after %lld epochs, %lld steps\n", accuracy,
               (long long)ct_trainer_epoch(trainer), (long long)ct_trainer_step(trainer));
    } else {
        (void)fprintf(stderr, "train_classifier: %s\n", ct_last_error(ctx));
    }
    ct_trainer_destroy(trainer);
    ct_schedule_destroy(sched);
    ct_optim_destroy(opt);
    ct_model_destroy(model);
    ct_params_destroy(params);
    ct_loader_destroy(valid_loader);
    ct_loader_destroy(train_loader);
    ct_dataset_close(valid);
    ct_dataset_close(train);
    ct_dataset_close(all);
    ct_ctx_destroy(ctx);
    return s == CT_OK ? 0 : 1;
}
