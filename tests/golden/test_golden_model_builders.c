/*
 * test_golden_model_builders.c - the built-in model builders against PyTorch (C8.3, C8.4).
 * tests/golden/gen_models.py builds the same mlp, cnn and gpt in torch and writes their
 * state_dicts, a batch, the logits and the first 5 SGD losses (fixtures/models.bin). Here each
 * model is made by ct_model_build; every state_dict entry must be found by name with the same
 * shape (which checks the naming, tied alias included), and the logits and losses must match.
 */
#include "golden.h"

enum { STEPS = 5 };

#define RTOL 1e-4
#define ATOL 1e-5

static int same_shape(const ct_tensor *t, const gf_array *a) {
    if (t->ndim != a->ndim || t->dtype != a->dtype) return 0;
    for (int32_t d = 0; d < a->ndim; d++)
        if (t->shape[d] != a->shape[d]) return 0;
    return 1;
}

static int is_data(const char *name) {
    return !strcmp(name, "x") || !strcmp(name, "y") || !strcmp(name, "logits") ||
           !strcmp(name, "losses");
}

static void run(const char *model,
                const ct_option *items,
                int64_t n_items,
                ct_dtype in_dtype,
                int32_t in_ndim,
                const int64_t *in_shape) {
    gold gd;
    if (!gold_open(&gd, "models.bin", 1)) {
        gold_close(&gd);
        return;
    }
    ct_params *params = NULL;
    ct_model *m = NULL;
    ct_optim *opt = NULL;
    ct_options opts = {items, n_items, model};
    CT_CHECK_INT(ct_params_create(gd.ctx, &params), CT_OK);
    ct_status s = ct_model_build(gd.ctx, model, &opts, params, in_dtype, in_ndim, in_shape, &m);
    CT_CHECK_MSG(s == CT_OK, "%s: %s", model, ct_last_error(gd.ctx));
    if (s != CT_OK) goto done;
    CT_CHECK_INT(ct_params_alloc(params), CT_OK);
    CT_CHECK_INT(ct_model_init_weights(m, 1), CT_OK);

    /* every state_dict entry is declared alike; together they cover the whole store */
    size_t plen = strlen(model);
    int64_t direct = 0;
    for (uint32_t i = 0; i < gd.f.count; i++) {
        const gf_array *a = &gd.f.arrays[i];
        if (strncmp(a->name, model, plen) != 0 || a->name[plen] != '/') continue;
        const char *name = a->name + plen + 1;
        if (is_data(name)) continue;
        ct_tensor *t = ct_model_param(m, name);
        CT_CHECK_MSG(t && same_shape(t, a), "%s: state_dict entry '%s' is not declared alike",
                     model, name);
        if (!t || !same_shape(t, a)) continue;
        memcpy(t->data, a->data, ct_tensor_nbytes(t));
        direct += strcmp(t->name, name) == 0; /* not a tied tensor's alias */
    }
    CT_CHECK_MSG(direct == ct_params_count(params),
                 "%s: %lld state_dict entries, %lld in the store", model, (long long)direct,
                 (long long)ct_params_count(params));

    ct_optim_params op = ct_optim_default_params(CT_OPTIM_SGD);
    op.lr = 0.05f;
    CT_CHECK_INT(ct_optim_create(gd.ctx, params, &op, &opt), CT_OK);
    char key[128];
    snprintf(key, sizeof key, "%s/losses", model);
    const gf_array *ref = gf_get(&gd.f, key);
    CT_CHECK(ref && ref->numel == STEPS);
    if (!opt || !ref || ref->numel != STEPS) goto done;
    float losses[STEPS];
    for (int step = 0; step < STEPS; step++) {
        ct_graph_reset(gd.g);
        ct_params_zero_grad(params);
        snprintf(key, sizeof key, "%s/x", model);
        ct_tensor *x = gold_tensor(&gd, key);
        snprintf(key, sizeof key, "%s/y", model);
        ct_tensor *y = gold_tensor(&gd, key);
        ct_tensor *logits = ct_model_forward(m, gd.g, x);
        CT_CHECK_MSG(logits != NULL, "%s step %d: %s", model, step, ct_last_error(gd.ctx));
        if (!logits || !y) goto done;
        if (step == 0) {
            snprintf(key, sizeof key, "%s/logits", model);
            gold_compare(&gd, key, logits, logits->data, ATOL, RTOL);
        }
        int64_t v = logits->shape[logits->ndim - 1], ny = ct_tensor_numel(y);
        ct_tensor *flat = ct_op_reshape(gd.g, logits, 2, (const int64_t[]){-1, v});
        ct_tensor *yf = ct_graph_wrap(gd.g, y->data, y->dtype, 1, &ny);
        ct_tensor *loss = ct_loss_cross_entropy(gd.g, flat, yf, NULL);
        CT_CHECK_MSG(loss != NULL, "%s step %d: %s", model, step, ct_last_error(gd.ctx));
        if (!loss) goto done;
        losses[step] = *(const float *)loss->data;
        CT_CHECK_INT(ct_graph_backward(gd.g, loss), CT_OK);
        ct_optim_step(opt);
    }
    char what[64];
    snprintf(what, sizeof what, "%s losses", model);
    if (!CT_CHECK_ARRAYS(what, losses, (const float *)ref->data, STEPS, ATOL, RTOL))
        for (int i = 0; i < STEPS; i++)
            fprintf(stderr, "  step %d: got %.7f, pytorch %.7f\n", i, (double)losses[i],
                    (double)((const float *)ref->data)[i]);
done:
    ct_optim_destroy(opt);
    ct_model_destroy(m);
    ct_params_destroy(params);
    gold_close(&gd);
}

static void golden_mlp_builder_should_match_pytorch(void) {
    const ct_option o[] = {{"hidden", "16,8"}, {"out", "5"}};
    run("mlp", o, 2, CT_F32, 1, (const int64_t[]){12});
}

static void golden_cnn_builder_should_match_pytorch(void) {
    const ct_option o[] = {{"channels", "4,8"}, {"out", "10"}};
    run("cnn", o, 2, CT_F32, 3, (const int64_t[]){1, 8, 8});
}

static void golden_gpt_builder_should_match_pytorch(void) {
    const ct_option o[] = {{"n_layer", "2"}, {"n_head", "2"},  {"d_model", "16"}, {"context", "8"},
                           {"vocab", "17"},  {"dropout", "0"}, {"tied", "true"}};
    run("gpt", o, 7, CT_I64, 1, (const int64_t[]){8});
}

int main(void) {
    CT_RUN(golden_mlp_builder_should_match_pytorch);
    CT_RUN(golden_cnn_builder_should_match_pytorch);
    CT_RUN(golden_gpt_builder_should_match_pytorch);
    return ct_test_finish();
}
