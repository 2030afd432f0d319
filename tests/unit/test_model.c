/*
 * test_model.c - model.h: the layer table and its errors, nn.Sequential naming, residual blocks,
 * output shapes, PyTorch's default initialisation, training vs evaluation mode, the builders'
 * option errors, gpt's tied weights, out-of-memory cleanup and a gradient check of a small
 * sequential model with respect to its input.
 */
#include "ctrain/ctrain.h"
#include "gradcheck.h"
#include "harness.h"
#include "test_alloc.h"

#define N_OF(a) ((int64_t)(sizeof(a) / sizeof((a)[0])))
#define OPTS(...)                                                                                  \
    { (const ct_option[]){__VA_ARGS__}, N_OF(((const ct_option[]){__VA_ARGS__})), NULL }
#define NOOPTS                                                                                     \
    { NULL, 0, NULL }

typedef struct fixture {
    ct_ctx *ctx;
    ct_params *params;
    ct_model *m;
    ct_graph *g;
} fixture;

static void fx_open(fixture *f) {
    memset(f, 0, sizeof *f);
    CT_CHECK_INT(ct_ctx_create(NULL, &f->ctx), CT_OK);
    CT_CHECK_INT(ct_params_create(f->ctx, &f->params), CT_OK);
    CT_CHECK_INT(ct_graph_create(f->ctx, NULL, &f->g), CT_OK);
}

static void fx_close(fixture *f) {
    ct_graph_destroy(f->g);
    ct_model_destroy(f->m);
    ct_params_destroy(f->params);
    ct_ctx_destroy(f->ctx);
}

static ct_status
create(fixture *f, int32_t ndim, const int64_t *shape, const ct_layer_spec *specs, int64_t n) {
    ct_status s = ct_model_create(f->ctx, f->params, CT_F32, ndim, shape, specs, n, &f->m);
    if (s == CT_OK) {
        s = ct_params_alloc(f->params);
        if (s == CT_OK) s = ct_model_init_weights(f->m, 7);
    }
    return s;
}

static int has(const char *msg, const char *part) {
    int ok = strstr(msg, part) != NULL;
    if (!ok) fprintf(stderr, "  message \"%s\" lacks \"%s\"\n", msg, part);
    return ok;
}

static void model_should_list_layer_and_model_types(void) {
    int found_linear = 0, found_residual = 0;
    int64_t n = 0;
    const ct_layer_type *const *layers = ct_layer_types(&n);
    for (int64_t i = 0; i < n; i++) {
        found_linear |= !strcmp(layers[i]->name, "linear");
        found_residual |= !strcmp(layers[i]->name, "residual");
        CT_CHECK(ct_layer_type_find(layers[i]->name) == layers[i]);
    }
    CT_CHECK(found_linear && found_residual);
    CT_CHECK(n >= 17 && layers[n] == NULL);
    CT_CHECK(ct_layer_type_find("lnear") == NULL && ct_layer_type_find(NULL) == NULL);
    const ct_model_type *const *models = ct_model_types(&n);
    CT_CHECK(n == 3 && models[3] == NULL);
    CT_CHECK(!strcmp(models[0]->name, "mlp"));
    CT_CHECK(!strcmp(models[2]->name, "gpt"));
    CT_CHECK(ct_model_type_find("gpt") == models[2] && ct_model_type_find(NULL) == NULL);
}

/* The option keys of a layer or model type, or NULL for a name that is not one. */
static const char *const *layer_keys(const char *type) {
    const ct_layer_type *t = ct_layer_type_find(type);
    return t ? t->keys : NULL;
}

static const char *const *model_keys(const char *type) {
    const ct_model_type *t = ct_model_type_find(type);
    return t ? t->keys : NULL;
}

static bool lists(const char *const *keys, const char *key) {
    for (; keys && *keys; keys++)
        if (!strcmp(*keys, key)) return true;
    return false;
}

/* a configuration is checked before the data give the input shape */
static void model_should_check_options_without_an_input(void) {
    CT_CHECK(lists(model_keys("mlp"), "hidden"));
    CT_CHECK(lists(model_keys("gpt"), "n_head"));
    CT_CHECK(model_keys("sequential") == NULL); /* not a builder */
    CT_CHECK(lists(layer_keys("linear"), "out"));
    CT_CHECK(layer_keys("residual") && !layer_keys("residual")[0]);
    CT_CHECK(layer_keys("lnear") == NULL);
    ct_ctx *ctx = NULL;
    CT_CHECK_INT(ct_ctx_create(NULL, &ctx), CT_OK);
    ct_options ok = OPTS({"hidden", "16,8"}, {"activation", "gelu"}); /* out: from the data */
    CT_CHECK_INT(ct_model_check(ctx, "mlp", &ok), CT_OK);
    CT_CHECK_INT(ct_model_check(ctx, "gpt", NULL), CT_OK);
    ct_options act = {(const ct_option[]){{"activation", "rleu"}}, 1, "exp.yaml: model"};
    CT_CHECK_INT(ct_model_check(ctx, "mlp", &act), CT_ERR_CONFIG);
    CT_CHECK(strstr(ct_last_error(ctx), "exp.yaml: model: key 'activation': unknown 'rleu' (did "
                                        "you mean 'relu'?)") != NULL);
    ct_options heads = OPTS({"d_model", "10"}, {"n_head", "3"});
    CT_CHECK_INT(ct_model_check(ctx, "gpt", &heads), CT_ERR_CONFIG);
    CT_CHECK(strstr(ct_last_error(ctx), "not a multiple of n_head") != NULL);
    ct_options chans = OPTS({"channels", "8,x"});
    CT_CHECK_INT(ct_model_check(ctx, "cnn", &chans), CT_ERR_CONFIG);
    CT_CHECK_INT(ct_model_check(ctx, "mpl", NULL), CT_ERR_CONFIG);
    CT_CHECK(strstr(ct_last_error(ctx), "(did you mean 'mlp'?)") != NULL);
    /* layers' option values, without an input (ct_layer_check) */
    ct_options conv = OPTS({"out", "8"}, {"kernel", "3"}, {"padding", "1"});
    CT_CHECK_INT(ct_layer_check(ctx, "conv2d", &conv), CT_OK);
    ct_options conv0 = {(const ct_option[]){{"out", "8"}, {"kernel", "0"}}, 2, "exp.yaml:4:5"};
    CT_CHECK_INT(ct_layer_check(ctx, "conv2d", &conv0), CT_ERR_CONFIG);
    CT_CHECK(strstr(ct_last_error(ctx), "exp.yaml:4:5: key 'kernel'") != NULL);
    CT_CHECK_INT(ct_layer_check(ctx, "linear", NULL), CT_ERR_CONFIG); /* out is required */
    ct_options approx = OPTS({"approx", "fast"});
    CT_CHECK_INT(ct_layer_check(ctx, "gelu", &approx), CT_ERR_CONFIG);
    ct_options emb = OPTS({"vocab", "10"}, {"dim", "4"});
    CT_CHECK_INT(ct_layer_check(ctx, "embedding", &emb), CT_OK);
    CT_CHECK_INT(ct_layer_check(ctx, "relu", NULL), CT_OK);
    CT_CHECK_INT(ct_layer_check(ctx, "residual", NULL), CT_OK);
    CT_CHECK_INT(ct_layer_check(ctx, "lnear", NULL), CT_ERR_CONFIG);
    ct_ctx_destroy(ctx);
}

static void model_should_reject_unknown_types_keys_and_shapes(void) {
    fixture f;
    fx_open(&f);
    int64_t in[] = {16};
    ct_layer_spec bad_type[] = {{"linear", NULL, OPTS({"out", "4"}), NULL, 0},
                                {"lineer", NULL, NOOPTS, NULL, 0}};
    CT_CHECK_INT(ct_model_create(f.ctx, f.params, CT_F32, 1, in, bad_type, 2, &f.m), CT_ERR_CONFIG);
    CT_CHECK(f.m == NULL);
    CT_CHECK(has(ct_last_error(f.ctx), "layer 1 ('1', lineer): unknown layer type 'lineer'"));
    CT_CHECK(has(ct_last_error(f.ctx), "known: linear, conv2d"));

    ct_layer_spec bad_key[] = {{"linear", NULL, OPTS({"outs", "4"}), NULL, 0}};
    CT_CHECK_INT(ct_model_create(f.ctx, f.params, CT_F32, 1, in, bad_key, 1, &f.m), CT_ERR_CONFIG);
    CT_CHECK(has(ct_last_error(f.ctx), "layer 0 ('0', linear): unknown key 'outs'"));

    ct_layer_spec bad_val[] = {{"dropout", NULL, OPTS({"p", "1.5"}), NULL, 0}};
    CT_CHECK_INT(ct_model_create(f.ctx, f.params, CT_F32, 1, in, bad_val, 1, &f.m), CT_ERR_CONFIG);
    CT_CHECK(has(ct_last_error(f.ctx), "key 'p'"));

    ct_layer_spec no_out[] = {{"linear", "fc", NOOPTS, NULL, 0}};
    CT_CHECK_INT(ct_model_create(f.ctx, f.params, CT_F32, 1, in, no_out, 1, &f.m), CT_ERR_CONFIG);
    CT_CHECK(has(ct_last_error(f.ctx), "('fc', linear): key 'out' is required"));

    ct_layer_spec conv[] = {{"conv2d", NULL, OPTS({"out", "4"}), NULL, 0}};
    CT_CHECK_INT(ct_model_create(f.ctx, f.params, CT_F32, 1, in, conv, 1, &f.m), CT_ERR_SHAPE);
    CT_CHECK(has(ct_last_error(f.ctx), "layer 0 ('0', conv2d): input sample [16]"));
    CT_CHECK(has(ct_last_error(f.ctx), "expected f32 [C, H, W]"));

    /* a residual body must keep the shape */
    ct_layer_spec body[] = {{"linear", NULL, OPTS({"out", "8"}), NULL, 0}};
    ct_layer_spec res[] = {{"residual", NULL, NOOPTS, body, 1}};
    CT_CHECK_INT(ct_model_create(f.ctx, f.params, CT_F32, 1, in, res, 1, &f.m), CT_ERR_SHAPE);
    CT_CHECK(has(ct_last_error(f.ctx), "maps sample [16] to [8]"));

    /* builders */
    CT_CHECK_INT(ct_model_build(f.ctx, "rnn", NULL, f.params, CT_F32, 1, in, &f.m), CT_ERR_CONFIG);
    CT_CHECK(has(ct_last_error(f.ctx),
                 "unknown model type 'rnn' (did you mean 'cnn'?) (known: mlp, cnn, gpt)"));
    ct_options o1 = {(const ct_option[]){{"hidden", "16,x"}, {"out", "2"}}, 2, "exp.yaml: model"};
    CT_CHECK_INT(ct_model_build(f.ctx, "mlp", &o1, f.params, CT_F32, 1, in, &f.m), CT_ERR_CONFIG);
    CT_CHECK(has(ct_last_error(f.ctx), "exp.yaml: model: key 'hidden'"));
    ct_options o2 = {(const ct_option[]){{"activation", "swish"}, {"out", "2"}}, 2, "m"};
    CT_CHECK_INT(ct_model_build(f.ctx, "mlp", &o2, f.params, CT_F32, 1, in, &f.m), CT_ERR_CONFIG);
    CT_CHECK(has(ct_last_error(f.ctx), "unknown 'swish'"));
    ct_options o3 = {(const ct_option[]){{"vocab", "10"}, {"heads", "2"}}, 2, "m"};
    int64_t t8[] = {8};
    CT_CHECK_INT(ct_model_build(f.ctx, "gpt", &o3, f.params, CT_I64, 1, t8, &f.m), CT_ERR_CONFIG);
    CT_CHECK(has(ct_last_error(f.ctx), "unknown key 'heads'"));
    ct_options o4 = {(const ct_option[]){{"vocab", "10"}, {"context", "4"}}, 2, "m"};
    CT_CHECK_INT(ct_model_build(f.ctx, "gpt", &o4, f.params, CT_I64, 1, t8, &f.m), CT_ERR_SHAPE);
    CT_CHECK(has(ct_last_error(f.ctx), "T <= context 4"));
    CT_CHECK(f.m == NULL);
    fx_close(&f);
}

static void model_should_name_layers_like_sequential(void) {
    fixture f;
    fx_open(&f);
    ct_layer_spec body[] = {{"linear", NULL, OPTS({"out", "8"}), NULL, 0},
                            {"tanh", NULL, NOOPTS, NULL, 0},
                            {"layernorm", "norm", NOOPTS, NULL, 0}};
    ct_layer_spec specs[] = {{"linear", NULL, OPTS({"out", "8"}), NULL, 0},
                             {"relu", NULL, NOOPTS, NULL, 0},
                             {"residual", NULL, NOOPTS, body, 3},
                             {"linear", "head", OPTS({"out", "3"}, {"bias", "false"}), NULL, 0}};
    CT_CHECK_INT(create(&f, 1, (const int64_t[]){5}, specs, 4), CT_OK);
    static const char *const names[] = {"0.weight",      "0.bias",      "2.0.weight", "2.0.bias",
                                        "2.norm.weight", "2.norm.bias", "head.weight"};
    CT_CHECK_INT(ct_params_count(f.params), N_OF(names));
    for (int64_t i = 0; i < N_OF(names) && i < ct_params_count(f.params); i++)
        CT_CHECK_MSG(!strcmp(ct_params_at(f.params, i)->name, names[i]), "%s vs %s",
                     ct_params_at(f.params, i)->name, names[i]);
    CT_CHECK(ct_model_param(f.m, "0.weight")->shape[1] == 5);
    CT_CHECK(ct_model_param(f.m, "head.bias") == NULL);
    int64_t out[CT_MAX_DIMS];
    CT_CHECK_INT(ct_model_output_shape(f.m, out), 1);
    CT_CHECK_INT(out[0], 3);
    fx_close(&f);
}

static void model_should_add_the_residual_input(void) {
    fixture f;
    fx_open(&f);
    ct_layer_spec body[] = {{"linear", NULL, OPTS({"out", "4"}), NULL, 0}};
    ct_layer_spec specs[] = {{"residual", NULL, NOOPTS, body, 1}};
    CT_CHECK_INT(create(&f, 1, (const int64_t[]){4}, specs, 1), CT_OK);
    ct_tensor *w = ct_model_param(f.m, "0.0.weight"), *b = ct_model_param(f.m, "0.0.bias");
    if (!w || !b) {
        CT_CHECK(w && b);
        fx_close(&f);
        return;
    }
    ct_tensor_fill(w, 0.0f);
    for (int64_t i = 0; i < 4; i++)
        ct_tensor_set_f32(w, i * 4 + i, 2.0f); /* 2 I */
    ct_tensor_fill(b, 1.0f);
    float x[8] = {1, 2, 3, 4, -1, -2, -3, -4};
    ct_tensor *xt = ct_graph_wrap(f.g, x, CT_F32, 2, (const int64_t[]){2, 4});
    ct_tensor *y = ct_model_forward(f.m, f.g, xt);
    CT_CHECK(y && y->shape[0] == 2 && y->shape[1] == 4);
    for (int i = 0; y && i < 8; i++)
        CT_CHECK_CLOSE(((float *)y->data)[i], 3.0f * x[i] + 1.0f, 1e-6, 0);
    fx_close(&f);
}

static void check_shape(ct_model *m, int32_t ndim, const int64_t *want) {
    int64_t out[CT_MAX_DIMS];
    int32_t n = ct_model_output_shape(m, out);
    CT_CHECK_INT(n, ndim);
    for (int32_t d = 0; d < n && d < ndim; d++)
        CT_CHECK_INT(out[d], want[d]);
}

static void model_should_infer_output_shapes(void) {
    fixture f;
    fx_open(&f);
    ct_layer_spec specs[] = {
        {"conv2d", NULL, OPTS({"out", "6"}, {"stride", "2"}, {"padding", "1"}), NULL, 0},
        {"batchnorm", NULL, NOOPTS, NULL, 0},
        {"avgpool2d", NULL, OPTS({"kernel", "3"}, {"stride", "1"}, {"padding", "1"}), NULL, 0},
        {"conv2d", NULL, OPTS({"out", "4"}, {"kernel", "2"}, {"dilation", "2"}, {"groups", "2"}),
         NULL, 0},
        {"maxpool2d", NULL, NOOPTS, NULL, 0},
        {"flatten", NULL, NOOPTS, NULL, 0},
        {"linear", NULL, OPTS({"out", "7"}), NULL, 0},
    };
    /* [3,9,9] -> conv s2 p1 [6,5,5] -> pool k3 s1 p1 [6,5,5] -> conv k2 d2 [4,3,3] -> max 2
     * [4,1,1] -> [4] -> [7] */
    CT_CHECK_INT(create(&f, 3, (const int64_t[]){3, 9, 9}, specs, N_OF(specs)), CT_OK);
    check_shape(f.m, 1, (const int64_t[]){7});
    CT_CHECK(ct_model_param(f.m, "3.weight")->shape[1] == 3); /* 6 / groups */
    CT_CHECK(ct_model_param(f.m, "1.num_batches_tracked")->dtype == CT_I64);
    /* the batchnorm's tensors are a norm's by their layer, whatever their names */
    CT_CHECK(ct_model_param_is_norm(f.m, ct_model_param(f.m, "1.weight")));
    CT_CHECK(ct_model_param_is_norm(f.m, ct_model_param(f.m, "1.running_var")));
    CT_CHECK(!ct_model_param_is_norm(f.m, ct_model_param(f.m, "0.weight")));
    CT_CHECK(!ct_model_param_is_norm(f.m, ct_model_param(f.m, "6.bias")));
    CT_CHECK(!ct_model_param_is_norm(f.m, NULL));
    float x[2 * 3 * 9 * 9];
    gc_fill(x, N_OF(x), 3, -1, 1);
    ct_tensor *y =
        ct_model_forward(f.m, f.g, ct_graph_wrap(f.g, x, CT_F32, 4, (const int64_t[]){2, 3, 9, 9}));
    CT_CHECK(y && y->ndim == 2 && y->shape[0] == 2 && y->shape[1] == 7);
    fx_close(&f);

    fx_open(&f);
    ct_layer_spec emb[] = {{"embedding", "tok", OPTS({"vocab", "10"}, {"dim", "4"}), NULL, 0},
                           {"layernorm", NULL, NOOPTS, NULL, 0}};
    CT_CHECK_INT(ct_model_create(f.ctx, f.params, CT_I64, 1, (const int64_t[]){5}, emb, 2, &f.m),
                 CT_OK);
    check_shape(f.m, 2, (const int64_t[]){5, 4});
    CT_CHECK(ct_model_param_is_norm(f.m, ct_model_param(f.m, "1.bias")));
    CT_CHECK(!ct_model_param_is_norm(f.m, ct_model_param(f.m, "tok.weight")));
    ct_model_destroy(f.m);
    f.m = NULL;
    ct_params_destroy(f.params);
    CT_CHECK_INT(ct_params_create(f.ctx, &f.params), CT_OK);
    ct_options o = {(const ct_option[]){{"channels", "4,8,16"}, {"out", "10"}}, 2, "m"};
    CT_CHECK_INT(
        ct_model_build(f.ctx, "cnn", &o, f.params, CT_F32, 3, (const int64_t[]){3, 16, 16}, &f.m),
        CT_OK);
    check_shape(f.m, 1, (const int64_t[]){10});
    CT_CHECK(ct_model_param(f.m, "13.weight") != NULL); /* 3 stages of 4, pool, linear */
    fx_close(&f);
}

/* max |v| of t, and whether every |v| <= bound */
static double max_abs(const ct_tensor *t) {
    double m = 0;
    for (int64_t i = 0; i < ct_tensor_numel(t); i++)
        m = fmax(m, fabs((double)ct_tensor_get_f32(t, i)));
    return m;
}

static double rms(const ct_tensor *t) {
    double s = 0;
    for (int64_t i = 0; i < ct_tensor_numel(t); i++)
        s += (double)ct_tensor_get_f32(t, i) * (double)ct_tensor_get_f32(t, i);
    return sqrt(s / (double)ct_tensor_numel(t));
}

static void model_should_init_like_pytorch(void) {
    fixture f;
    fx_open(&f);
    ct_layer_spec specs[] = {{"conv2d", NULL, OPTS({"out", "16"}), NULL, 0},
                             {"batchnorm", NULL, NOOPTS, NULL, 0},
                             {"flatten", NULL, NOOPTS, NULL, 0},
                             {"linear", NULL, OPTS({"out", "40"}), NULL, 0}};
    CT_CHECK_INT(
        ct_model_create(f.ctx, f.params, CT_F32, 3, (const int64_t[]){3, 5, 5}, specs, 4, &f.m),
        CT_OK);
    CT_CHECK_INT(ct_model_init_weights(f.m, 1), CT_ERR_INVALID_ARG); /* before ct_params_alloc */
    CT_CHECK(has(ct_last_error(f.ctx), "ct_params_alloc"));
    CT_CHECK_INT(ct_params_alloc(f.params), CT_OK);
    CT_CHECK_INT(ct_model_init_weights(f.m, 1), CT_OK);
    double conv_bound = 1.0 / sqrt(27.0), lin_bound = 1.0 / sqrt(16.0 * 9.0);
    const char *names[] = {"0.weight", "0.bias", "3.weight", "3.bias"};
    double bounds[] = {conv_bound, conv_bound, lin_bound, lin_bound};
    for (int i = 0; i < 4; i++) {
        double m = max_abs(ct_model_param(f.m, names[i]));
        CT_CHECK_MSG(m <= bounds[i] && m > 0.8 * bounds[i], "%s: max |w| %g, bound %g", names[i], m,
                     bounds[i]);
    }
    CT_CHECK(rms(ct_model_param(f.m, "3.weight")) > 0.5 * lin_bound); /* uniform: bound/sqrt 3 */
    CT_CHECK(ct_tensor_get_f32(ct_model_param(f.m, "1.weight"), 3) == 1.0f);
    CT_CHECK(ct_tensor_get_f32(ct_model_param(f.m, "1.bias"), 3) == 0.0f);
    CT_CHECK(ct_tensor_get_f32(ct_model_param(f.m, "1.running_var"), 0) == 1.0f);
    /* same seed, same weights; another seed, others */
    float w0 = ct_tensor_get_f32(ct_model_param(f.m, "3.weight"), 5);
    CT_CHECK_INT(ct_model_init_weights(f.m, 1), CT_OK);
    CT_CHECK(w0 == ct_tensor_get_f32(ct_model_param(f.m, "3.weight"), 5));
    CT_CHECK_INT(ct_model_init_weights(f.m, 2), CT_OK);
    CT_CHECK(w0 != ct_tensor_get_f32(ct_model_param(f.m, "3.weight"), 5));
    fx_close(&f);

    /* gpt: nanoGPT's init, and lm_head tied to wte */
    fx_open(&f);
    ct_options o = {(const ct_option[]){{"n_layer", "4"}, {"d_model", "32"}, {"vocab", "50"}}, 3,
                    "m"};
    CT_CHECK_INT(
        ct_model_build_alloc(f.ctx, "gpt", &o, f.params, CT_I32, 1, (const int64_t[]){16}, 3, &f.m),
        CT_OK);
    if (f.m) {
        CT_CHECK_CLOSE(rms(ct_model_param(f.m, "transformer.wte.weight")), 0.02, 0, 0.1);
        CT_CHECK_CLOSE(rms(ct_model_param(f.m, "transformer.h.1.attn.c_attn.weight")), 0.02, 0,
                       0.1);
        CT_CHECK_CLOSE(rms(ct_model_param(f.m, "transformer.h.3.mlp.c_proj.weight")),
                       0.02 / sqrt(8.0), 0, 0.1);
        CT_CHECK(max_abs(ct_model_param(f.m, "transformer.h.0.mlp.c_fc.bias")) == 0.0);
        CT_CHECK(ct_model_param(f.m, "lm_head.weight") ==
                 ct_params_find(f.params, "transformer.wte.weight"));
        /* one tensor in the store, known under both names */
        CT_CHECK(ct_params_find(f.params, "lm_head.weight") ==
                 ct_params_find(f.params, "transformer.wte.weight"));
        CT_CHECK_INT(ct_params_alias_count(f.params), 1);
        CT_CHECK_INT(ct_params_count(f.params), 2 + 4 * 12 + 2);
        /* ln_1, ln_2 and ln_f are norms; nothing else is */
        int64_t norms = 0;
        for (int64_t i = 0; i < ct_params_count(f.params); i++)
            norms += ct_model_param_is_norm(f.m, ct_params_at(f.params, i));
        CT_CHECK_INT(norms, 4 * 4 + 2);
        CT_CHECK(ct_model_param_is_norm(f.m, ct_model_param(f.m, "transformer.h.2.ln_2.bias")));
        CT_CHECK(ct_model_param_is_norm(f.m, ct_model_param(f.m, "transformer.ln_f.weight")));
        CT_CHECK(!ct_model_param_is_norm(f.m, ct_model_param(f.m, "lm_head.weight")));
        check_shape(f.m, 2, (const int64_t[]){16, 50});
        /* shorter sequences are fine, longer ones fail */
        int32_t ids[2 * 17] = {0};
        ct_tensor *y =
            ct_model_forward(f.m, f.g, ct_graph_wrap(f.g, ids, CT_I32, 2, (const int64_t[]){2, 5}));
        CT_CHECK(y && y->ndim == 3 && y->shape[1] == 5 && y->shape[2] == 50);
        y = ct_model_forward(f.m, f.g,
                             ct_graph_wrap(f.g, ids, CT_I32, 2, (const int64_t[]){2, 17}));
        CT_CHECK(y == NULL && ct_graph_status(f.g) == CT_ERR_SHAPE);
    }
    fx_close(&f);

    fx_open(&f);
    ct_options ou = {(const ct_option[]){{"n_layer", "1"}, {"vocab", "11"}, {"tied", "false"}}, 3,
                     "m"};
    CT_CHECK_INT(ct_model_build(f.ctx, "gpt", &ou, f.params, CT_I64, 1, (const int64_t[]){4}, &f.m),
                 CT_OK);
    CT_CHECK(f.m && ct_params_find(f.params, "lm_head.weight") != NULL);
    CT_CHECK_INT(ct_params_alias_count(f.params), 0);
    fx_close(&f);

    /* bias: false declares nanoGPT's bias=False names only, and runs */
    fx_open(&f);
    ct_options ob = {(const ct_option[]){{"n_layer", "2"}, {"vocab", "7"}, {"bias", "false"}}, 3,
                     "m"};
    CT_CHECK_INT(
        ct_model_build_alloc(f.ctx, "gpt", &ob, f.params, CT_I64, 1, (const int64_t[]){4}, 1, &f.m),
        CT_OK);
    if (f.m) {
        CT_CHECK_INT(ct_params_count(f.params), 2 + 2 * 6 + 1);
        for (int64_t i = 0; i < ct_params_count(f.params); i++)
            CT_CHECK(strstr(ct_params_at(f.params, i)->name, "bias") == NULL);
        CT_CHECK(ct_params_find(f.params, "transformer.h.1.ln_2.weight") != NULL);
        CT_CHECK(ct_params_find(f.params, "transformer.ln_f.weight") != NULL);
        int64_t ids[4] = {1, 2, 3, 6};
        ct_tensor *y =
            ct_model_forward(f.m, f.g, ct_graph_wrap(f.g, ids, CT_I64, 2, (const int64_t[]){1, 4}));
        CT_CHECK(y && y->shape[2] == 7);
    }
    fx_close(&f);
}

static void model_should_follow_the_graph_mode(void) {
    fixture f;
    fx_open(&f);
    ct_layer_spec specs[] = {{"batchnorm", NULL, NOOPTS, NULL, 0},
                             {"dropout", NULL, OPTS({"p", "0.5"}), NULL, 0}};
    CT_CHECK_INT(create(&f, 1, (const int64_t[]){3}, specs, 2), CT_OK);
    float x[4 * 3];
    for (int i = 0; i < 12; i++)
        x[i] = (float)(i % 5) + 1.0f;
    const int64_t shape[] = {4, 3};
    /* evaluation: running statistics (0, 1) and no dropout: y = x / sqrt(1 + eps) */
    ct_graph_set_training(f.g, false);
    ct_tensor *y = ct_model_forward(f.m, f.g, ct_graph_wrap(f.g, x, CT_F32, 2, shape));
    CT_CHECK(y != NULL);
    for (int i = 0; y && i < 12; i++)
        CT_CHECK_CLOSE(((float *)y->data)[i], x[i] / sqrt(1.0 + 1e-5), 1e-6, 1e-6);
    CT_CHECK(ct_tensor_get_f32(ct_model_param(f.m, "0.num_batches_tracked"), 0) == 0.0f);
    /* training: batch statistics (per-channel mean 0), dropout zeroes about half */
    ct_graph_reset(f.g);
    ct_graph_set_training(f.g, true);
    y = ct_model_forward(f.m, f.g, ct_graph_wrap(f.g, x, CT_F32, 2, shape));
    CT_CHECK(y != NULL);
    int zeros = 0;
    for (int i = 0; y && i < 12; i++)
        zeros += ((float *)y->data)[i] == 0.0f;
    CT_CHECK(zeros > 0 && zeros < 12);
    CT_CHECK(ct_tensor_get_f32(ct_model_param(f.m, "0.num_batches_tracked"), 0) == 1.0f);
    CT_CHECK(ct_tensor_get_f32(ct_model_param(f.m, "0.running_mean"), 0) != 0.0f);
    /* a wrong input shape fails at forward, naming both shapes */
    ct_graph_reset(f.g);
    y = ct_model_forward(f.m, f.g, ct_graph_wrap(f.g, x, CT_F32, 2, (const int64_t[]){3, 4}));
    CT_CHECK(y == NULL && ct_graph_status(f.g) == CT_ERR_SHAPE);
    CT_CHECK(has(ct_last_error(f.ctx), "model input [3,4] f32, expected [B] + sample [3]"));
    fx_close(&f);
}

static void model_should_free_everything_when_allocation_fails(void) {
    /* fail each allocation in turn: creation fails cleanly (or succeeds) and nothing leaks */
    int reached = 0;
    for (long long k = 1; k < 400 && !reached; k++) {
        test_alloc ta = {0};
        ct_ctx_params p = ct_ctx_default_params();
        p.allocator = test_allocator(&ta);
        ct_ctx *ctx = NULL;
        if (ct_ctx_create(&p, &ctx) != CT_OK) continue;
        ta.fail_at = ta.n_alloc + k;
        ct_params *params = NULL;
        ct_model *m = NULL;
        ct_options o = {(const ct_option[]){{"n_layer", "2"}, {"vocab", "9"}, {"d_model", "8"}}, 3,
                        "m"};
        ct_status s = ct_params_create(ctx, &params);
        if (s == CT_OK)
            s = ct_model_build_alloc(ctx, "gpt", &o, params, CT_I64, 1, (const int64_t[]){4}, 1,
                                     &m);
        CT_CHECK(s == CT_OK ? m != NULL : m == NULL);
        ct_model_destroy(m);
        ct_params_destroy(params);
        ct_ctx_destroy(ctx);
        CT_CHECK_MSG(ta.live == 0 && ta.size_mismatch == 0, "fail at %lld: %lld bytes live", k,
                     ta.live);
        reached = s == CT_OK;
    }
    CT_CHECK(reached);
}

static ct_tensor *model_fwd(ct_graph *g, ct_tensor **in, void *user) {
    return ct_model_forward(user, g, in[0]);
}

static void model_should_pass_gradcheck_wrt_input(void) {
    fixture f;
    fx_open(&f);
    ct_layer_spec body[] = {{"linear", NULL, OPTS({"out", "6"}), NULL, 0},
                            {"silu", NULL, NOOPTS, NULL, 0}};
    ct_layer_spec specs[] = {{"linear", NULL, OPTS({"out", "6"}), NULL, 0},
                             {"tanh", NULL, NOOPTS, NULL, 0},
                             {"residual", NULL, NOOPTS, body, 2},
                             {"layernorm", NULL, NOOPTS, NULL, 0},
                             {"gelu", NULL, OPTS({"approx", "tanh"}), NULL, 0},
                             {"linear", NULL, OPTS({"out", "3"}), NULL, 0}};
    CT_CHECK_INT(create(&f, 1, (const int64_t[]){5}, specs, N_OF(specs)), CT_OK);
    float x[3 * 5];
    gc_fill(x, 15, 11, -1.5f, 1.5f);
    gc_input in = {CT_F32, 2, {3, 5}, x, true};
    CT_CHECK(gc_check("sequential", f.ctx, 1, &in, model_fwd, f.m, NULL));

    /* a small cnn as well */
    ct_model_destroy(f.m);
    f.m = NULL;
    ct_params_destroy(f.params);
    CT_CHECK_INT(ct_params_create(f.ctx, &f.params), CT_OK);
    ct_layer_spec cnn[] = {{"conv2d", NULL, OPTS({"out", "3"}, {"padding", "1"}), NULL, 0},
                           {"batchnorm", NULL, NOOPTS, NULL, 0},
                           {"sigmoid", NULL, NOOPTS, NULL, 0},
                           {"avgpool2d", NULL, NOOPTS, NULL, 0},
                           {"global_avg_pool", NULL, NOOPTS, NULL, 0},
                           {"linear", NULL, OPTS({"out", "2"}), NULL, 0}};
    CT_CHECK_INT(create(&f, 3, (const int64_t[]){2, 4, 4}, cnn, N_OF(cnn)), CT_OK);
    float xc[2 * 2 * 4 * 4];
    gc_fill(xc, N_OF(xc), 12, -1, 1);
    gc_input inc = {CT_F32, 4, {2, 2, 4, 4}, xc, true};
    gc_opts go = gc_default_opts();
    go.training = false; /* running statistics: the samples stay independent of the probe */
    CT_CHECK(gc_check("cnn", f.ctx, 1, &inc, model_fwd, f.m, &go));
    fx_close(&f);
}

/* ---- a user's model type through ct_model_vtable ---- */

typedef struct user_model {
    ct_tensor *w;
    int *destroyed;
} user_model;

static ct_status um_create(ct_ctx *ctx,
                           const ct_options *opts,
                           ct_params *params,
                           ct_dtype in_dtype,
                           int32_t in_ndim,
                           const int64_t *in_shape,
                           int32_t *out_ndim,
                           int64_t *out_shape,
                           void **self) {
    static const char *const known[] = {"out", NULL};
    int64_t out;
    CT_TRY(ct_options_check(ctx, opts, known));
    CT_TRY(ct_options_int(ctx, opts, "out", 2, 1, 64, &out));
    user_model *u = calloc(1, sizeof *u);
    if (!u) return CT_FAIL(ctx, CT_ERR_OOM, "user model");
    *self = u;
    if (in_dtype != CT_F32 || in_ndim != 1)
        return CT_FAIL(ctx, CT_ERR_SHAPE, "user model: expected f32 [features]");
    CT_TRY(ct_params_add(params, "proj.weight", CT_F32, 2, (const int64_t[]){out, in_shape[0]},
                         CT_PARAM_TRAINABLE, &u->w));
    *out_ndim = 1;
    out_shape[0] = out;
    return CT_OK;
}

static void um_init(void *self, ct_rng *rng) {
    user_model *u = self;
    ct_nn_init_uniform(u->w, rng, -0.5f, 0.5f);
}

static ct_tensor *um_forward(void *self, ct_graph *g, ct_tensor *x) {
    user_model *u = self;
    return ct_op_linear(g, x, u->w, NULL);
}

static int um_destroyed;

static void um_destroy(ct_ctx *ctx, void *self) {
    (void)ctx;
    um_destroyed++;
    free(self);
}

static const ct_model_vtable k_user_model = {0,          "user",     um_create, um_init,
                                             um_forward, um_destroy, NULL};

static void model_should_run_a_user_model_type(void) {
    fixture f;
    fx_open(&f);
    ct_option o[] = {{"out", "3"}};
    ct_options opts = {o, 1, "test"};
    ct_model *m = NULL;
    um_destroyed = 0;
    CT_CHECK_INT(ct_model_create_with(f.ctx, &k_user_model, &opts, f.params, CT_F32, 1,
                                      (const int64_t[]){4}, &m),
                 CT_OK);
    int64_t shape[CT_MAX_DIMS];
    CT_CHECK_INT(ct_model_output_shape(m, shape), 1);
    CT_CHECK_INT(shape[0], 3);
    CT_CHECK_INT(ct_params_alloc(f.params), CT_OK);
    CT_CHECK_INT(ct_model_init_weights(m, 7), CT_OK);
    ct_tensor *w = ct_model_param(m, "proj.weight");
    CT_CHECK(w != NULL);
    ct_graph *g = NULL;
    CT_CHECK_INT(ct_graph_create(f.ctx, NULL, &g), CT_OK);
    float xd[2 * 4] = {1, 2, 3, 4, -1, 0, 1, 0};
    ct_tensor *x = ct_graph_wrap(g, xd, CT_F32, 2, (const int64_t[]){2, 4});
    ct_tensor *y = ct_model_forward(m, g, x);
    CT_CHECK(y != NULL && y->ndim == 2 && y->shape[0] == 2 && y->shape[1] == 3);
    if (y && w) {
        const float *wd = w->data, *yd = y->data;
        for (int r = 0; r < 2; r++)
            for (int c = 0; c < 3; c++) {
                double ref = 0;
                for (int k = 0; k < 4; k++)
                    ref += (double)wd[c * 4 + k] * (double)xd[r * 4 + k];
                CT_CHECK(fabs((double)yd[r * 3 + c] - ref) < 1e-5);
            }
    }
    /* a wrong input is refused before the user's forward sees it */
    ct_graph_reset(g);
    ct_tensor *bad = ct_graph_wrap(g, xd, CT_F32, 2, (const int64_t[]){1, 8});
    CT_CHECK(ct_model_forward(m, g, bad) == NULL);
    CT_CHECK_INT(ct_graph_status(g), CT_ERR_SHAPE);
    ct_graph_destroy(g);
    ct_model_destroy(m);
    CT_CHECK_INT(um_destroyed, 1);
    /* an unknown option fails in create, and nothing leaks */
    ct_params_destroy(f.params);
    CT_CHECK_INT(ct_params_create(f.ctx, &f.params), CT_OK);
    ct_option bad_o[] = {{"outt", "3"}};
    ct_options bad_opts = {bad_o, 1, "test"};
    CT_CHECK_INT(ct_model_create_with(f.ctx, &k_user_model, &bad_opts, f.params, CT_F32, 1,
                                      (const int64_t[]){4}, &m),
                 CT_ERR_CONFIG);
    CT_CHECK(m == NULL);
    /* a create that fails after making its state has it destroyed */
    CT_CHECK_INT(ct_model_create_with(f.ctx, &k_user_model, &opts, f.params, CT_F32, 2,
                                      (const int64_t[]){4, 4}, &m),
                 CT_ERR_SHAPE);
    CT_CHECK_INT(um_destroyed, 2);
    fx_close(&f);
}

/* What the grad-ready hook saw: each parameter once, with a copy of its gradient then. */
typedef struct ready_log {
    ct_params *params;
    int64_t count[64];
    float *seen; /* flat, like the store's gradients */
    int64_t order[64], n;
} ready_log;

static void on_ready(void *user, ct_tensor *p) {
    ready_log *r = user;
    for (int64_t i = 0; i < ct_params_count(r->params) && i < 64; i++)
        if (ct_params_at(r->params, i) == p) {
            r->count[i]++;
            r->order[r->n++ % 64] = i;
            int64_t off = (const float *)p->data - ct_params_values(r->params);
            memcpy(r->seen + off, p->grad, (size_t)ct_tensor_numel(p) * sizeof(float));
        }
}

/* Data-parallel training starts reducing a parameter's gradient when the backward pass says it
 * is final: every trainable tensor of a GPT (the tied embedding read at both ends included) is
 * reported once, and its gradient at that moment is its gradient at the end. */
static void graph_should_report_each_gradient_once_when_final(void) {
    fixture f;
    fx_open(&f);
    ct_options o = {(const ct_option[]){{"n_layer", "2"}, {"d_model", "16"}, {"vocab", "13"}}, 3,
                    "m"};
    CT_CHECK_INT(
        ct_model_build_alloc(f.ctx, "gpt", &o, f.params, CT_I32, 1, (const int64_t[]){8}, 3, &f.m),
        CT_OK);
    if (f.m) {
        ready_log r;
        memset(&r, 0, sizeof r);
        r.params = f.params;
        int64_t n = ct_params_numel(f.params);
        r.seen = calloc((size_t)n, sizeof(float));
        int32_t ids[2 * 8];
        for (int i = 0; i < 16; i++)
            ids[i] = (i * 5 + 1) % 13;
        ct_graph_set_grad_ready(f.g, on_ready, &r);
        ct_tensor *y =
            ct_model_forward(f.m, f.g, ct_graph_wrap(f.g, ids, CT_I32, 2, (const int64_t[]){2, 8}));
        ct_tensor *sq = y ? ct_op_mul(f.g, y, y) : NULL;
        CT_CHECK_INT(ct_graph_backward(f.g, ct_op_sum_all(f.g, sq)), CT_OK);
        int64_t trainable = 0;
        for (int64_t i = 0; i < ct_params_count(f.params); i++) {
            if (ct_params_kind_at(f.params, i) != CT_PARAM_TRAINABLE) continue;
            trainable++;
            CT_CHECK_MSG(r.count[i] == 1, "%s reported %lld times", ct_params_at(f.params, i)->name,
                         (long long)r.count[i]);
        }
        CT_CHECK_INT(r.n, trainable);
        CT_CHECK(memcmp(r.seen, ct_params_grads(f.params), (size_t)n * sizeof(float)) == 0);
        /* the tied embedding, read by the first nodes and by the last (lm_head), is final
           only after every block's parameters */
        const ct_tensor *wte = ct_params_find(f.params, "transformer.wte.weight");
        int64_t at_wte = -1, last_block = -1;
        for (int64_t k = 0; k < r.n && k < 64; k++) {
            const ct_tensor *p = ct_params_at(f.params, r.order[k]);
            if (p == wte) at_wte = k;
            if (strncmp(p->name, "transformer.h.", 14) == 0) last_block = k;
        }
        CT_CHECK_MSG(at_wte > last_block && last_block >= 0, "wte reported at %lld, blocks by %lld",
                     (long long)at_wte, (long long)last_block);
        /* a tape with a concat (whose inputs the node does not list) reports nothing early:
           the caller reduces everything after the pass */
        ct_graph_reset(f.g);
        r.n = 0;
        y = ct_model_forward(f.m, f.g, ct_graph_wrap(f.g, ids, CT_I32, 2, (const int64_t[]){2, 8}));
        ct_tensor *pair[2] = {y, y};
        ct_tensor *cat = y ? ct_op_concat(f.g, 2, pair, 0) : NULL;
        CT_CHECK_INT(ct_graph_backward(f.g, ct_op_sum_all(f.g, cat)), CT_OK);
        CT_CHECK_INT(r.n, 0);
        /* off again: nothing reported */
        ct_graph_set_grad_ready(f.g, NULL, NULL);
        ct_graph_reset(f.g);
        r.n = 0;
        y = ct_model_forward(f.m, f.g, ct_graph_wrap(f.g, ids, CT_I32, 2, (const int64_t[]){2, 8}));
        CT_CHECK_INT(ct_graph_backward(f.g, ct_op_sum_all(f.g, y)), CT_OK);
        CT_CHECK_INT(r.n, 0);
        free(r.seen);
    }
    fx_close(&f);
}

/* A backward pass into a bound gradient buffer (ct_params_bind_grads, what the sharded update
 * binds to shared memory) gives the bits the store's own buffer gets, the tied embedding
 * included; unbinding copies the accumulated gradients back; an unallocated store refuses, and
 * so does a store bound already. */
static void params_should_accumulate_into_a_bound_gradient_buffer(void) {
    fixture f;
    fx_open(&f);
    ct_params *bare = NULL;
    CT_CHECK_INT(ct_params_create(f.ctx, &bare), CT_OK);
    float one = 0.0f;
    CT_CHECK_INT(ct_params_bind_grads(bare, &one), CT_ERR_INVALID_ARG);
    ct_params_destroy(bare);
    ct_options o = {(const ct_option[]){{"n_layer", "1"}, {"d_model", "16"}, {"vocab", "13"}}, 3,
                    "m"};
    CT_CHECK_INT(
        ct_model_build_alloc(f.ctx, "gpt", &o, f.params, CT_I32, 1, (const int64_t[]){8}, 3, &f.m),
        CT_OK);
    if (f.m) {
        int64_t n = ct_params_numel(f.params);
        size_t bytes = (size_t)n * sizeof(float);
        float *want = malloc(bytes), *bound = malloc(bytes);
        if (!want || !bound) abort();
        int32_t ids[2 * 8];
        for (int i = 0; i < 16; i++)
            ids[i] = (i * 7 + 2) % 13;
        float *own = ct_params_grads(f.params);
        for (int pass = 0; pass < 2; pass++) {
            ct_graph_reset(f.g);
            ct_tensor *y = ct_model_forward(
                f.m, f.g, ct_graph_wrap(f.g, ids, CT_I32, 2, (const int64_t[]){2, 8}));
            ct_tensor *sq = y ? ct_op_mul(f.g, y, y) : NULL;
            CT_CHECK_INT(ct_graph_backward(f.g, ct_op_sum_all(f.g, sq)), CT_OK);
            if (pass == 0) {
                memcpy(want, own, bytes);
                memset(bound, 0x7f, bytes); /* garbage: binding must copy the current zeros */
                ct_params_zero_grad(f.params);
                CT_CHECK_INT(ct_params_bind_grads(f.params, bound), CT_OK);
                CT_CHECK(ct_params_grads(f.params) == bound);
                /* one owner at a time: a second buffer is refused, the first stays bound */
                CT_CHECK_INT(ct_params_bind_grads(f.params, want), CT_ERR_INVALID_ARG);
                CT_CHECK(ct_params_grads(f.params) == bound);
            }
        }
        CT_CHECK(memcmp(bound, want, bytes) == 0);
        const ct_tensor *wte = ct_params_find(f.params, "transformer.wte.weight");
        CT_CHECK(wte && (const float *)wte->grad >= bound && (const float *)wte->grad < bound + n);
        bool untouched = true; /* the own buffer kept its zeros while bound */
        for (int64_t i = 0; i < n; i++)
            untouched = untouched && own[i] == 0.0f;
        CT_CHECK(untouched);
        CT_CHECK_INT(ct_params_bind_grads(f.params, NULL), CT_OK);
        CT_CHECK(ct_params_grads(f.params) == own);
        CT_CHECK(memcmp(own, want, bytes) == 0);
        CT_CHECK(wte && (const float *)wte->grad >= own && (const float *)wte->grad < own + n);
        free(want);
        free(bound);
    }
    fx_close(&f);
}

int main(void) {
    CT_RUN(model_should_list_layer_and_model_types);
    CT_RUN(model_should_check_options_without_an_input);
    CT_RUN(model_should_reject_unknown_types_keys_and_shapes);
    CT_RUN(model_should_name_layers_like_sequential);
    CT_RUN(model_should_add_the_residual_input);
    CT_RUN(model_should_infer_output_shapes);
    CT_RUN(model_should_init_like_pytorch);
    CT_RUN(model_should_follow_the_graph_mode);
    CT_RUN(model_should_free_everything_when_allocation_fails);
    CT_RUN(model_should_pass_gradcheck_wrt_input);
    CT_RUN(model_should_run_a_user_model_type);
    CT_RUN(graph_should_report_each_gradient_once_when_final);
    CT_RUN(params_should_accumulate_into_a_bound_gradient_buffer);
    return ct_test_finish();
}
