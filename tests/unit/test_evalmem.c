/*
 * test_evalmem.c - evaluation memory: a no-grad forward of a deep stack frees each layer's
 * activations once the next layer has read them (autograd.h's layer scopes, measured through
 * the arena's high-water mark), gives the same bits as a forward with gradients on, keeps what
 * it returns until the graph is reset, and falls back safely when scopes nest deeper than the
 * graph has arenas for.
 */
#include <string.h>

#include "ctrain/ctrain.h"
#include "harness.h"

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

static void
fx_open(fixture *f, int32_t ndim, const int64_t *shape, const ct_layer_spec *specs, int64_t n) {
    memset(f, 0, sizeof *f);
    CT_CHECK_INT(ct_ctx_create(NULL, &f->ctx), CT_OK);
    CT_CHECK_INT(ct_params_create(f->ctx, &f->params), CT_OK);
    CT_CHECK_INT(ct_graph_create(f->ctx, NULL, &f->g), CT_OK);
    ct_status s = ct_model_create(f->ctx, f->params, CT_F32, ndim, shape, specs, n, &f->m);
    CT_CHECK_MSG(s == CT_OK, "%s", ct_last_error(f->ctx));
    CT_CHECK_INT(ct_params_alloc(f->params), CT_OK);
    CT_CHECK_INT(ct_model_init_weights(f->m, 3), CT_OK);
    ct_graph_set_training(f->g, false);
}

static void fx_close(fixture *f) {
    ct_graph_destroy(f->g);
    ct_model_destroy(f->m);
    ct_params_destroy(f->params);
    ct_ctx_destroy(f->ctx);
}

static void fill(float *x, int64_t n, uint32_t seed) {
    uint32_t s = seed;
    for (int64_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = (float)(s >> 8) / (float)(1u << 24) * 2.0f - 1.0f;
    }
}

/* The model's output on x with gradients on or off (after a reset), copied into out. */
static bool forward_into(fixture *f,
                         bool grad,
                         float *x,
                         int32_t ndim,
                         const int64_t *shape,
                         float *out,
                         int64_t n_out) {
    ct_graph_reset(f->g);
    ct_graph_set_grad_enabled(f->g, grad);
    ct_tensor *y = ct_model_forward(f->m, f->g, ct_graph_wrap(f->g, x, CT_F32, ndim, shape));
    bool ok = y && ct_tensor_numel(y) == n_out;
    if (ok) memcpy(out, y->data, (size_t)n_out * sizeof(float));
    ct_graph_set_grad_enabled(f->g, true);
    return ok;
}

/* A stack of 12 x (linear 256 -> 256, relu) on a batch of 256: each activation is 256 KiB. With
 * gradients off the arena holds about two of them at a time; with gradients on, all 24. */
static void graph_should_hold_about_two_layers_in_a_nograd_deep_chain(void) {
    enum { LAYERS = 12, WIDTH = 256, BATCH = 256 };
    const ct_options out256 = OPTS({"out", "256"}), none = NOOPTS;
    ct_layer_spec specs[2 * LAYERS];
    for (int i = 0; i < LAYERS; i++) {
        specs[2 * i] = (ct_layer_spec){"linear", NULL, out256, NULL, 0};
        specs[2 * i + 1] = (ct_layer_spec){"relu", NULL, none, NULL, 0};
    }
    fixture f;
    fx_open(&f, 1, (const int64_t[]){WIDTH}, specs, 2 * LAYERS);
    static float x[BATCH * WIDTH];
    fill(x, BATCH * WIDTH, 1);
    const int64_t shape[] = {BATCH, WIDTH};
    const size_t act = (size_t)BATCH * WIDTH * sizeof(float);

    size_t peak[2];
    for (int grad = 0; grad < 2; grad++) {
        ct_graph_reset(f.g);
        ct_graph_set_grad_enabled(f.g, grad != 0);
        ct_graph_reset_high_water(f.g);
        ct_tensor *y = ct_model_forward(f.m, f.g, ct_graph_wrap(f.g, x, CT_F32, 2, shape));
        CT_CHECK(y != NULL);
        peak[grad] = ct_graph_arena_high_water(f.g);
    }
    ct_graph_set_grad_enabled(f.g, true);
    /* two activations, the scratch of one linear and the tensor structs */
    CT_CHECK_MSG(peak[0] <= 2 * act + act / 4, "no-grad peak %zu bytes, %.2f activations", peak[0],
                 (double)peak[0] / (double)act);
    CT_CHECK_MSG(peak[1] >= 2 * LAYERS * act, "grad peak %zu bytes, %.2f activations", peak[1],
                 (double)peak[1] / (double)act);
    /* the next batch reuses the evaluation arenas: nothing more is allocated */
    ct_graph_set_grad_enabled(f.g, false);
    ct_graph_reset(f.g);
    (void)ct_model_forward(f.m, f.g, ct_graph_wrap(f.g, x, CT_F32, 2, shape));
    int64_t allocs = ct_graph_arena_allocations(f.g);
    ct_graph_reset(f.g);
    (void)ct_model_forward(f.m, f.g, ct_graph_wrap(f.g, x, CT_F32, 2, shape));
    CT_CHECK_INT(ct_graph_arena_allocations(f.g), allocs);
    /* trim gives the chunks back; the graph works on */
    ct_graph_trim(f.g);
    CT_CHECK_INT(ct_graph_arena_capacity(f.g), 0);
    CT_CHECK(ct_model_forward(f.m, f.g, ct_graph_wrap(f.g, x, CT_F32, 2, shape)) != NULL);
    fx_close(&f);
}

/* An activation after a layer writes over that layer's output, which no one else reads: a
 * linear layer and three activations hold one activation's bytes. */
static void nn_should_apply_activations_in_place_without_gradients(void) {
    enum { WIDTH = 256, BATCH = 256 };
    ct_layer_spec specs[] = {{"linear", NULL, OPTS({"out", "256"}), NULL, 0},
                             {"relu", NULL, NOOPTS, NULL, 0},
                             {"gelu", NULL, NOOPTS, NULL, 0},
                             {"relu", NULL, NOOPTS, NULL, 0}};
    fixture f;
    fx_open(&f, 1, (const int64_t[]){WIDTH}, specs, N_OF(specs));
    static float x[BATCH * WIDTH], with[BATCH * WIDTH], without[BATCH * WIDTH];
    fill(x, BATCH * WIDTH, 6);
    const int64_t shape[] = {BATCH, WIDTH};
    const size_t act = (size_t)BATCH * WIDTH * sizeof(float);
    CT_CHECK(forward_into(&f, true, x, 2, shape, with, BATCH * WIDTH));
    ct_graph_reset(f.g);
    ct_graph_reset_high_water(f.g);
    CT_CHECK(forward_into(&f, false, x, 2, shape, without, BATCH * WIDTH));
    size_t peak = ct_graph_arena_high_water(f.g);
    CT_CHECK_MSG(peak <= act + act / 4, "no-grad peak %zu bytes, %.2f activations", peak,
                 (double)peak / (double)act);
    CT_CHECK(memcmp(with, without, sizeof with) == 0);
    fx_close(&f);
}

/* Views (flatten), activations over their input, a residual block whose first layer is an
 * activation (the block's input is read again by its sum) and an activation on the model's
 * own input: the no-grad output has the bits of the output with gradients on, and the input
 * is left as it was. */
static void nn_should_give_the_same_bits_without_gradients(void) {
    ct_layer_spec body[] = {{"relu", NULL, NOOPTS, NULL, 0},
                            {"linear", NULL, OPTS({"out", "32"}), NULL, 0},
                            {"tanh", NULL, NOOPTS, NULL, 0}};
    ct_layer_spec inner[] = {{"gelu", NULL, NOOPTS, NULL, 0},
                             {"residual", NULL, NOOPTS, body, N_OF(body)}};
    ct_layer_spec specs[] = {{"relu", NULL, NOOPTS, NULL, 0},
                             {"conv2d", NULL, OPTS({"out", "4"}, {"padding", "1"}), NULL, 0},
                             {"relu", NULL, NOOPTS, NULL, 0},
                             {"maxpool2d", NULL, NOOPTS, NULL, 0},
                             {"flatten", NULL, NOOPTS, NULL, 0},
                             {"sigmoid", NULL, NOOPTS, NULL, 0},
                             {"linear", NULL, OPTS({"out", "32"}), NULL, 0},
                             {"residual", NULL, NOOPTS, inner, N_OF(inner)},
                             {"residual", NULL, NOOPTS, body, N_OF(body)},
                             {"silu", NULL, NOOPTS, NULL, 0},
                             {"linear", NULL, OPTS({"out", "5"}), NULL, 0}};
    fixture f;
    fx_open(&f, 3, (const int64_t[]){2, 8, 8}, specs, N_OF(specs));
    enum { B = 6, N_IN = B * 2 * 8 * 8, N_OUT = B * 5 };
    float x[N_IN], x0[N_IN], with[N_OUT], without[N_OUT];
    fill(x, N_IN, 2);
    memcpy(x0, x, sizeof x);
    const int64_t shape[] = {B, 2, 8, 8};
    CT_CHECK(forward_into(&f, true, x, 4, shape, with, N_OUT));
    CT_CHECK(forward_into(&f, false, x, 4, shape, without, N_OUT));
    CT_CHECK(memcmp(with, without, sizeof with) == 0);
    CT_CHECK(memcmp(x, x0, sizeof x) == 0);
    fx_close(&f);
}

/* Two no-grad forwards without a reset between them: the first result is still there. */
static void nn_should_keep_a_nograd_result_until_reset(void) {
    ct_layer_spec specs[] = {{"linear", NULL, OPTS({"out", "64"}), NULL, 0},
                             {"relu", NULL, NOOPTS, NULL, 0},
                             {"linear", NULL, OPTS({"out", "64"}), NULL, 0},
                             {"relu", NULL, NOOPTS, NULL, 0},
                             {"linear", NULL, OPTS({"out", "64"}), NULL, 0}};
    fixture f;
    fx_open(&f, 1, (const int64_t[]){64}, specs, N_OF(specs));
    enum { N = 8 * 64 };
    float x1[N], x2[N], y1[N];
    fill(x1, N, 3);
    fill(x2, N, 4);
    const int64_t shape[] = {8, 64};
    CT_CHECK(forward_into(&f, false, x1, 2, shape, y1, N));
    ct_graph_reset(f.g);
    ct_graph_set_grad_enabled(f.g, false);
    ct_tensor *a = ct_model_forward(f.m, f.g, ct_graph_wrap(f.g, x1, CT_F32, 2, shape));
    for (int k = 0; k < 12; k++) /* more forwards than the graph has evaluation arenas */
        CT_CHECK(ct_model_forward(f.m, f.g, ct_graph_wrap(f.g, x2, CT_F32, 2, shape)) != NULL);
    CT_CHECK(a != NULL && memcmp(a->data, y1, sizeof y1) == 0);
    ct_graph_set_grad_enabled(f.g, true);
    fx_close(&f);
}

/* Residual blocks nested deeper than the graph has evaluation arenas for: still the bits of
 * the forward with gradients on. */
static void nn_should_nest_scopes_deeper_than_its_arenas(void) {
    enum { DEPTH = 12 };
    const ct_options out16 = OPTS({"out", "16"}), none = NOOPTS;
    ct_layer_spec levels[DEPTH][3];
    for (int d = 0; d < DEPTH; d++) {
        levels[d][0] = (ct_layer_spec){"relu", NULL, none, NULL, 0};
        levels[d][1] = (ct_layer_spec){"linear", NULL, out16, NULL, 0};
        levels[d][2] = d + 1 < DEPTH ? (ct_layer_spec){"residual", NULL, none, levels[d + 1], 3}
                                     : (ct_layer_spec){"tanh", NULL, none, NULL, 0};
    }
    ct_layer_spec specs[] = {{"linear", NULL, OPTS({"out", "16"}), NULL, 0},
                             {"residual", NULL, NOOPTS, levels[0], 3}};
    fixture f;
    fx_open(&f, 1, (const int64_t[]){16}, specs, N_OF(specs));
    enum { N = 4 * 16 };
    float x[N], with[N], without[N];
    fill(x, N, 5);
    const int64_t shape[] = {4, 16};
    CT_CHECK(forward_into(&f, true, x, 2, shape, with, N));
    CT_CHECK(forward_into(&f, false, x, 2, shape, without, N));
    CT_CHECK(memcmp(with, without, sizeof with) == 0);
    fx_close(&f);
}

int main(void) {
    CT_RUN(graph_should_hold_about_two_layers_in_a_nograd_deep_chain);
    CT_RUN(nn_should_apply_activations_in_place_without_gradients);
    CT_RUN(nn_should_give_the_same_bits_without_gradients);
    CT_RUN(nn_should_keep_a_nograd_result_until_reset);
    CT_RUN(nn_should_nest_scopes_deeper_than_its_arenas);
    return ct_test_finish();
}
