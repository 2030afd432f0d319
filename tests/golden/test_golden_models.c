/*
 * test_golden_models.c - end-to-end golden runs (C8.4): three tiny models start from PyTorch's
 * initial weights (fixtures/{mlp,cnn,gpt}.bin, state_dict names), train 20 steps of plain SGD
 * (lr 0.1, no momentum) on one fixed batch, and must reproduce PyTorch's 20 losses to 1e-4
 * relative and its final weights and buffers loosely. Each model runs with 1 and 4 threads, and
 * the two runs must give the same bits.
 */
#include "golden.h"

enum { STEPS = 20 };

#define LOSS_ATOL   1e-5
#define LOSS_RTOL   1e-4
#define WEIGHT_ATOL 1e-4
#define WEIGHT_RTOL 1e-3

typedef struct param_decl {
    const char *name;
    ct_dtype dtype;
    int32_t ndim;
    int64_t shape[4];
    ct_param_kind kind;
} param_decl;

#define W(name, ...)                                                                               \
    {                                                                                              \
        name, CT_F32, (int32_t)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)),               \
            {__VA_ARGS__}, CT_PARAM_TRAINABLE                                                      \
    }
#define BUF(name, dtype, ndim, ...)                                                                \
    { name, dtype, ndim, {__VA_ARGS__}, CT_PARAM_BUFFER }

/* A model: its parameters, its batch and a forward that returns the mean loss. */
typedef struct model {
    ct_params *params;
    ct_tensor *x, *y; /* step tensors of the batch, rebuilt each step */
} model;

typedef ct_tensor *(*forward_fn)(ct_graph *g, const model *m);

static ct_tensor *P(const model *m, const char *name) {
    ct_tensor *t = ct_params_find(m->params, name);
    if (!t) fprintf(stderr, "model has no parameter '%s'\n", name);
    return t;
}

/* ---- (a) MLP 16 -> 32 -> relu -> 10 ---- */

static const param_decl mlp_params[] = {
    W("fc1.weight", 32, 16),
    W("fc1.bias", 32),
    W("fc2.weight", 10, 32),
    W("fc2.bias", 10),
};

static ct_tensor *mlp_forward(ct_graph *g, const model *m) {
    ct_tensor *h = ct_op_linear(g, m->x, P(m, "fc1.weight"), P(m, "fc1.bias"));
    h = ct_op_relu(g, h);
    h = ct_op_linear(g, h, P(m, "fc2.weight"), P(m, "fc2.bias"));
    return ct_loss_cross_entropy(g, h, m->y, NULL);
}

/* ---- (b) CNN: conv 3x3 -> batch norm -> relu -> max pool 2 -> flatten -> linear ---- */

static const param_decl cnn_params[] = {
    W("conv1.weight", 4, 3, 3, 3),
    W("conv1.bias", 4),
    W("bn1.weight", 4),
    W("bn1.bias", 4),
    BUF("bn1.running_mean", CT_F32, 1, 4),
    BUF("bn1.running_var", CT_F32, 1, 4),
    BUF("bn1.num_batches_tracked", CT_I64, 0, 0),
    W("fc.weight", 10, 64),
    W("fc.bias", 10),
};

static ct_tensor *cnn_forward(ct_graph *g, const model *m) {
    ct_conv2d_params cp = ct_conv2d_default_params();
    cp.padding[0] = cp.padding[1] = 1;
    ct_tensor *h = ct_op_conv2d(g, m->x, P(m, "conv1.weight"), P(m, "conv1.bias"), &cp);
    h = ct_op_batch_norm(g, h, P(m, "bn1.weight"), P(m, "bn1.bias"), P(m, "bn1.running_mean"),
                         P(m, "bn1.running_var"), P(m, "bn1.num_batches_tracked"), 0.1f, 1e-5f);
    h = ct_op_relu(g, h);
    ct_pool2d_params pp = {{2, 2}, {0, 0}, {0, 0}};
    h = ct_op_max_pool2d(g, h, &pp);
    h = ct_op_flatten(g, h, 1);
    h = ct_op_linear(g, h, P(m, "fc.weight"), P(m, "fc.bias"));
    return ct_loss_cross_entropy(g, h, m->y, NULL);
}

/* ---- (c) a one-block causal transformer: vocab 16, T 8, C 16, 2 heads ---- */

enum { GPT_V = 16, GPT_T = 8, GPT_C = 16, GPT_HEADS = 2 };

static const param_decl gpt_params[] = {
    W("wte.weight", GPT_V, GPT_C),
    W("wpe.weight", GPT_T, GPT_C),
    W("h.0.ln_1.weight", GPT_C),
    W("h.0.ln_1.bias", GPT_C),
    W("h.0.attn.c_attn.weight", 3 * GPT_C, GPT_C),
    W("h.0.attn.c_attn.bias", 3 * GPT_C),
    W("h.0.attn.c_proj.weight", GPT_C, GPT_C),
    W("h.0.attn.c_proj.bias", GPT_C),
    W("h.0.ln_2.weight", GPT_C),
    W("h.0.ln_2.bias", GPT_C),
    W("h.0.mlp.c_fc.weight", 4 * GPT_C, GPT_C),
    W("h.0.mlp.c_fc.bias", 4 * GPT_C),
    W("h.0.mlp.c_proj.weight", GPT_C, 4 * GPT_C),
    W("h.0.mlp.c_proj.bias", GPT_C),
    W("ln_f.weight", GPT_C),
    W("ln_f.bias", GPT_C),
    W("lm_head.weight", GPT_V, GPT_C),
};

static ct_tensor *gpt_forward(ct_graph *g, const model *m) {
    const float eps = 1e-5f;
    int64_t t = m->x->shape[1];
    ct_tensor *pos = ct_graph_new(g, CT_I64, 1, &t);
    if (!pos) return NULL;
    for (int64_t i = 0; i < t; i++)
        ((int64_t *)pos->data)[i] = i;
    /* [B, T, C] + [T, C] */
    ct_tensor *x = ct_op_add(g, ct_op_embedding(g, P(m, "wte.weight"), m->x),
                             ct_op_embedding(g, P(m, "wpe.weight"), pos));
    ct_tensor *h = ct_op_layer_norm(g, x, P(m, "h.0.ln_1.weight"), P(m, "h.0.ln_1.bias"), eps);
    h = ct_op_linear(g, h, P(m, "h.0.attn.c_attn.weight"), P(m, "h.0.attn.c_attn.bias"));
    h = ct_op_causal_attention(g, h, GPT_HEADS);
    h = ct_op_linear(g, h, P(m, "h.0.attn.c_proj.weight"), P(m, "h.0.attn.c_proj.bias"));
    x = ct_op_add(g, x, h);
    h = ct_op_layer_norm(g, x, P(m, "h.0.ln_2.weight"), P(m, "h.0.ln_2.bias"), eps);
    h = ct_op_linear(g, h, P(m, "h.0.mlp.c_fc.weight"), P(m, "h.0.mlp.c_fc.bias"));
    h = ct_op_gelu(g, h, CT_GELU_ERF);
    h = ct_op_linear(g, h, P(m, "h.0.mlp.c_proj.weight"), P(m, "h.0.mlp.c_proj.bias"));
    x = ct_op_add(g, x, h);
    x = ct_op_layer_norm(g, x, P(m, "ln_f.weight"), P(m, "ln_f.bias"), eps);
    ct_tensor *logits = ct_op_linear(g, x, P(m, "lm_head.weight"), NULL);
    logits = ct_op_reshape(g, logits, 2, (const int64_t[]){-1, GPT_V});
    int64_t n = ct_tensor_numel(m->y);
    ct_tensor *y = ct_graph_wrap(g, m->y->data, CT_I64, 1, &n);
    return ct_loss_cross_entropy(g, logits, y, NULL);
}

/* ---- the run ---- */

static int same_shape(const ct_tensor *t, const gf_array *a) {
    if (t->ndim != a->ndim || t->dtype != a->dtype) return 0;
    for (int32_t d = 0; d < a->ndim; d++)
        if (t->shape[d] != a->shape[d]) return 0;
    return 1;
}

/* Trains the model described by decl/fwd from `file` with nt threads; writes its losses. */
static void run_model(const char *file,
                      const param_decl *decl,
                      int n_decl,
                      forward_fn fwd,
                      int64_t nt,
                      float *losses) {
    gold gd;
    for (int s = 0; s < STEPS; s++)
        losses[s] = NAN;
    if (!gold_open(&gd, file, nt)) {
        gold_close(&gd);
        return;
    }
    model m = {0};
    ct_optim *opt = NULL;
    CT_CHECK_INT(ct_params_create(gd.ctx, &m.params), CT_OK);
    for (int i = 0; i < n_decl; i++) {
        ct_tensor *t = NULL;
        CT_CHECK_MSG(ct_params_add(m.params, decl[i].name, decl[i].dtype, decl[i].ndim,
                                   decl[i].shape, decl[i].kind, &t) == CT_OK,
                     "%s", ct_last_error(gd.ctx));
    }
    CT_CHECK_INT(ct_params_alloc(m.params), CT_OK);
    /* every state_dict entry of the fixture is declared, with the same shape */
    int n_state = 0;
    for (uint32_t i = 0; i < gd.f.count; i++) {
        const gf_array *a = &gd.f.arrays[i];
        if (strncmp(a->name, "final/", 6) == 0 || !strcmp(a->name, "x") || !strcmp(a->name, "y") ||
            !strcmp(a->name, "losses"))
            continue;
        n_state++;
        ct_tensor *t = ct_params_find(m.params, a->name);
        CT_CHECK_MSG(t && same_shape(t, a), "%s: state_dict entry '%s' is not declared alike", file,
                     a->name);
        if (t && same_shape(t, a)) memcpy(t->data, a->data, ct_tensor_nbytes(t));
    }
    CT_CHECK_INT(n_state, n_decl);
    ct_optim_params op = ct_optim_default_params(CT_OPTIM_SGD);
    op.lr = 0.1f;
    CT_CHECK_INT(ct_optim_create(gd.ctx, m.params, &op, &opt), CT_OK);
    const gf_array *x = gf_get(&gd.f, "x"), *y = gf_get(&gd.f, "y");
    const gf_array *ref = gf_get(&gd.f, "losses");
    if (!opt || !x || !y || !ref || ref->numel != STEPS) goto done;

    for (int s = 0; s < STEPS; s++) {
        ct_graph_reset(gd.g);
        ct_params_zero_grad(m.params);
        m.x = gold_tensor(&gd, "x");
        m.y = gold_tensor(&gd, "y");
        ct_tensor *loss = fwd(gd.g, &m);
        CT_CHECK_MSG(loss != NULL, "%s step %d: forward failed: %s", file, s,
                     ct_last_error(gd.ctx));
        if (!loss) goto done;
        losses[s] = *(const float *)loss->data;
        ct_status st = ct_graph_backward(gd.g, loss);
        CT_CHECK_MSG(st == CT_OK, "%s step %d: backward failed: %s", file, s,
                     ct_last_error(gd.ctx));
        if (st != CT_OK) goto done;
        ct_optim_step(opt);
    }
    char what[96];
    snprintf(what, sizeof what, "%s losses (%d threads)", file, (int)nt);
    if (!CT_CHECK_ARRAYS(what, losses, (const float *)ref->data, STEPS, LOSS_ATOL, LOSS_RTOL)) {
        for (int s = 0; s < STEPS; s++)
            fprintf(stderr, "  step %2d: got %.7f, pytorch %.7f\n", s, (double)losses[s],
                    (double)((const float *)ref->data)[s]);
    }
    for (int64_t i = 0; i < ct_params_count(m.params); i++) {
        const ct_tensor *t = ct_params_at(m.params, i);
        char key[128];
        snprintf(key, sizeof key, "final/%s", t->name);
        gold_compare(&gd, key, t, t->data, WEIGHT_ATOL, WEIGHT_RTOL);
    }
done:
    ct_optim_destroy(opt);
    ct_params_destroy(m.params);
    gold_close(&gd);
}

static void check_model(const char *file, const param_decl *decl, int n, forward_fn fwd) {
    float l1[STEPS], l4[STEPS];
    run_model(file, decl, n, fwd, 1, l1);
    run_model(file, decl, n, fwd, 4, l4);
    CT_CHECK_MSG(memcmp(l1, l4, sizeof l1) == 0, "%s: losses differ between 1 and 4 threads", file);
}

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

static void golden_mlp_should_train_like_pytorch(void) {
    check_model("mlp.bin", mlp_params, COUNT(mlp_params), mlp_forward);
}

static void golden_cnn_should_train_like_pytorch(void) {
    check_model("cnn.bin", cnn_params, COUNT(cnn_params), cnn_forward);
}

static void golden_transformer_should_train_like_pytorch(void) {
    check_model("gpt.bin", gpt_params, COUNT(gpt_params), gpt_forward);
}

int main(void) {
    CT_RUN(golden_mlp_should_train_like_pytorch);
    CT_RUN(golden_cnn_should_train_like_pytorch);
    CT_RUN(golden_transformer_should_train_like_pytorch);
    return ct_test_finish();
}
