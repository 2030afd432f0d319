/*
 * test_core.c - context, errors, allocator, arena (through the graph), RNG, tensors, bf16,
 * parameter store and optimizers on closed-form problems.
 */
#include <float.h>
#include <math.h>
#include <string.h>

#include "core/core_internal.h"
#include "ctrain/ctrain.h"
#include "harness.h"
#include "test_alloc.h"

static ct_ctx *make_ctx(test_alloc *ta) {
    ct_ctx_params p = ct_ctx_default_params();
    if (ta) p.allocator = test_allocator(ta);
    p.n_threads = 1;
    ct_ctx *ctx = NULL;
    if (ct_ctx_create(&p, &ctx) != CT_OK) abort();
    return ctx;
}

static void core_should_name_every_status(void) {
    CT_CHECK(strcmp(ct_status_str(CT_OK), "CT_OK") == 0);
    CT_CHECK(strcmp(ct_status_str(CT_ERR_DIST), "CT_ERR_DIST") == 0);
    CT_CHECK(strcmp(ct_status_str(CT_STATUS_COUNT), "unknown status") == 0);
}

/* The build as --version shows it: a commit (or "unknown"), the compiler, the build type, and
 * the CPU's AVX-512 and AVX512_BF16 as the compiler's own run-time check finds them. */
static void core_should_describe_the_build_and_the_cpu(void) {
    ct_build b;
    ct_build_get(&b);
    CT_CHECK(b.commit && b.commit[0] && !strchr(b.commit, '\n'));
    CT_CHECK(b.compiler &&
             (strncmp(b.compiler, "gcc ", 4) == 0 || strncmp(b.compiler, "clang ", 6) == 0));
    CT_CHECK(b.compiler && b.compiler[strlen(b.compiler) - 1] != ' ');
    CT_CHECK(b.build_type && b.build_type[0] && strcmp(b.build_type, "unknown") != 0);
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    CT_CHECK_INT(b.avx512, __builtin_cpu_supports("avx512f") != 0);
    CT_CHECK_INT(b.avx512_bf16, __builtin_cpu_supports("avx512bf16") != 0);
#endif
    CT_CHECK(!b.amx || b.avx512_bf16); /* every CPU with AMX has AVX512_BF16 */
}

static void core_should_record_error_with_location_and_context(void) {
    ct_ctx *ctx = make_ctx(NULL);
    CT_CHECK_INT(ct_last_status(ctx), CT_OK);
    ct_status s = CT_FAIL(ctx, CT_ERR_CONFIG, "key '%s': expected a number, got '%s'", "lr", "abc");
    CT_CHECK_INT(s, CT_ERR_CONFIG);
    CT_CHECK(strstr(ct_last_error(ctx), "test_core.c:") == ct_last_error(ctx));
    CT_CHECK(strstr(ct_last_error(ctx), "key 'lr': expected a number, got 'abc'") != NULL);
    CT_CHECK_INT(ct_err_wrap(ctx, "loading '%s'", "exp.yaml"), CT_ERR_CONFIG);
    CT_CHECK(strncmp(ct_last_error(ctx), "loading 'exp.yaml': test_core.c:", 32) == 0);
    ct_clear_error(ctx);
    CT_CHECK_INT(ct_last_status(ctx), CT_OK);
    CT_CHECK(ct_last_error(ctx)[0] == '\0');
    ct_ctx_destroy(ctx);
}

static void core_should_reject_bad_params(void) {
    ct_ctx_params p = ct_ctx_default_params();
    ct_ctx *ctx = (ct_ctx *)1;
    p.n_threads = -1;
    CT_CHECK_INT(ct_ctx_create(&p, &ctx), CT_ERR_INVALID_ARG);
    CT_CHECK(ctx == NULL);
    ct_ctx_destroy(NULL);
}

/* "did you mean": a near name is suggested, an unrelated one is not, in options and alone */
static void core_should_suggest_near_names(void) {
    static const char *const names[] = {"hidden", "activation", "dropout", "out", NULL};
    ct_suggest sg;
    char hint[96];
    ct_suggest_init(&sg, "actvation");
    for (int i = 0; names[i]; i++)
        ct_suggest_add(&sg, names[i]);
    CT_CHECK(strcmp(ct_suggest_hint(&sg, hint, sizeof hint), " (did you mean 'activation'?)") == 0);
    ct_suggest_init(&sg, "mpl"); /* a swap of two letters is one edit */
    ct_suggest_add(&sg, "cnn");
    ct_suggest_add(&sg, "mlp");
    CT_CHECK(ct_suggest_best(&sg) && strcmp(ct_suggest_best(&sg), "mlp") == 0);
    ct_suggest_init(&sg, "learning_rate");
    ct_suggest_add(&sg, "lr");
    CT_CHECK(ct_suggest_best(&sg) == NULL);
    CT_CHECK(ct_suggest_hint(&sg, hint, sizeof hint)[0] == '\0');
    ct_suggest_init(&sg, NULL); /* a missing name suggests nothing */
    ct_suggest_add(&sg, "out");
    CT_CHECK(ct_suggest_best(&sg) == NULL);

    ct_ctx *ctx = NULL;
    CT_CHECK_INT(ct_ctx_create(NULL, &ctx), CT_OK);
    ct_options o = {(const ct_option[]){{"actvation", "relu"}}, 1, "exp.yaml:7:1: model"};
    CT_CHECK_INT(ct_options_check(ctx, &o, names), CT_ERR_CONFIG);
    CT_CHECK(strstr(ct_last_error(ctx), "exp.yaml:7:1: model: unknown key 'actvation' (did you "
                                        "mean 'activation'?) (known: hidden, activation") != NULL);
    ct_options far = {(const ct_option[]){{"colour", "red"}}, 1, "m"};
    CT_CHECK_INT(ct_options_check(ctx, &far, names), CT_ERR_CONFIG);
    CT_CHECK(strstr(ct_last_error(ctx), "did you mean") == NULL);
    ct_ctx_destroy(ctx);
}

static void tensor_should_check_shapes_before_allocating(void) {
    test_alloc ta = {0};
    ct_ctx *ctx = make_ctx(&ta);
    long long before = ta.n_alloc;
    ct_tensor *t = (ct_tensor *)1;
    int64_t huge[] = {INT64_MAX / 2, 4};
    CT_CHECK_INT(ct_tensor_create(ctx, CT_F32, 2, huge, &t), CT_ERR_SHAPE);
    CT_CHECK(t == NULL);
    CT_CHECK(strstr(ct_last_error(ctx), "too large") != NULL);
    int64_t neg[] = {3, -1};
    CT_CHECK_INT(ct_tensor_create(ctx, CT_F32, 2, neg, &t), CT_ERR_SHAPE);
    CT_CHECK(strstr(ct_last_error(ctx), "[3,-1]") != NULL);
    CT_CHECK_INT(ct_tensor_create(ctx, CT_F32, 9, neg, &t), CT_ERR_SHAPE);
    CT_CHECK_INT(ta.n_alloc, before);
    ct_ctx_destroy(ctx);
    CT_CHECK_INT(ta.live, 0);
}

static void tensor_should_view_reshape_and_slice_without_copy(void) {
    ct_ctx *ctx = make_ctx(NULL);
    ct_tensor *t = NULL;
    CT_CHECK_INT(ct_tensor_create(ctx, CT_F32, 2, (int64_t[]){4, 6}, &t), CT_OK);
    for (int64_t i = 0; i < 24; i++)
        ct_tensor_set_f32(t, i, (float)i);
    ct_tensor r, s;
    CT_CHECK_INT(ct_tensor_reshape(ctx, t, 3, (int64_t[]){2, 3, 4}, &r), CT_OK);
    CT_CHECK(r.data == t->data);
    CT_CHECK_INT(ct_tensor_numel(&r), 24);
    CT_CHECK_INT(ct_tensor_reshape(ctx, t, 2, (int64_t[]){5, 5}, &r), CT_ERR_SHAPE);
    CT_CHECK_INT(ct_tensor_slice(ctx, t, 1, 2, &s), CT_OK);
    CT_CHECK_INT(s.shape[0], 2);
    CT_CHECK(ct_tensor_get_f32(&s, 0) == 6.0f);
    CT_CHECK_INT(ct_tensor_slice(ctx, t, 3, 2, &s), CT_ERR_SHAPE);
    char buf[64];
    CT_CHECK(strcmp(ct_shape_str(t, buf, sizeof buf), "[4,6]") == 0);
    ct_tensor_destroy(ctx, t);
    ct_ctx_destroy(ctx);
}

static void tensor_should_fail_cleanly_when_allocation_fails(void) {
    test_alloc ta = {0};
    ct_ctx *ctx = make_ctx(&ta);
    ta.fail_at = ta.n_alloc + 2; /* header succeeds, data fails */
    ct_tensor *t = (ct_tensor *)1;
    CT_CHECK_INT(ct_tensor_create(ctx, CT_F32, 1, (int64_t[]){1000}, &t), CT_ERR_OOM);
    CT_CHECK(t == NULL);
    CT_CHECK(strstr(ct_last_error(ctx), "4000 bytes") != NULL);
    ta.fail_at = 0;
    ct_ctx_destroy(ctx);
    CT_CHECK_INT(ta.live, 0);
    CT_CHECK_INT(ta.size_mismatch, 0);
}

static void bf16_should_round_to_nearest_even(void) {
    /* 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even gives 1. */
    CT_CHECK(ct_f32_from_bf16(ct_bf16_from_f32(1.0f + 0x1p-8f)) == 1.0f);
    /* 1 + 3*2^-8 is halfway between 1+2^-7 and 1+2^-6: ties to even gives 1 + 2^-6. */
    CT_CHECK(ct_f32_from_bf16(ct_bf16_from_f32(1.0f + 3 * 0x1p-8f)) == 1.0f + 0x1p-6f);
    CT_CHECK(ct_f32_from_bf16(ct_bf16_from_f32(1.0f + 0x1p-8f + 0x1p-20f)) == 1.0f + 0x1p-7f);
    CT_CHECK(ct_f32_from_bf16(ct_bf16_from_f32(-2.5f)) == -2.5f);
    CT_CHECK(isinf(ct_f32_from_bf16(ct_bf16_from_f32(INFINITY))));
    CT_CHECK(isnan(ct_f32_from_bf16(ct_bf16_from_f32(NAN))));
    CT_CHECK(isinf(ct_f32_from_bf16(ct_bf16_from_f32(3.4e38f)))); /* overflows bf16's max */
    float src[3] = {0.1f, -7.0f, 1e-3f}, back[3];
    ct_bf16 mid[3];
    ct_bf16_from_f32_n(mid, src, 3);
    ct_f32_from_bf16_n(back, mid, 3);
    for (int i = 0; i < 3; i++)
        CT_CHECK_CLOSE(back[i], src[i], 0.0, 1.0 / 256);
}

static void rng_should_be_counter_based_and_splittable(void) {
    /* Known-answer test for Philox-4x32-10 (Random123's kat_vectors: key and counter all 0). */
    ct_rng z = ct_rng_init(0, 0);
    uint32_t b[4];
    ct_rng_block(&z, 0, b);
    CT_CHECK(b[0] == 0x6627e8d5u && b[1] == 0xe169c58du && b[2] == 0xbc57ac4cu &&
             b[3] == 0x9b00dbd8u);
    ct_rng r = ct_rng_init(42, 7);
    float a[10], c[10];
    ct_rng_uniform(&r, a, 10);
    CT_CHECK_INT(r.counter, 3);
    for (int i = 0; i < 10; i++) {
        CT_CHECK(a[i] >= 0.0f && a[i] < 1.0f);
        CT_CHECK(ct_rng_uniform_at(&(ct_rng){42, 7, 0}, 0, i) == a[i]);
    }
    ct_rng saved = r;
    ct_rng_uniform(&r, a, 10);
    ct_rng_uniform(&saved, c, 10);
    CT_CHECK(memcmp(a, c, sizeof a) == 0);
    ct_rng s1 = ct_rng_split(&r, 1), s2 = ct_rng_split(&r, 2);
    CT_CHECK(s1.stream != s2.stream && s1.stream != r.stream);
    /* moments of a large normal sample */
    enum { N = 100000 };
    static float x[N];
    ct_rng q = ct_rng_init(1, 0);
    ct_rng_normal(&q, x, N, 2.0f, 3.0f);
    double m = 0, v = 0;
    for (int i = 0; i < N; i++)
        m += x[i];
    m /= N;
    for (int i = 0; i < N; i++)
        v += (x[i] - m) * (x[i] - m);
    v /= N;
    CT_CHECK_CLOSE(m, 2.0, 0.05, 0.0);
    CT_CHECK_CLOSE(v, 9.0, 0.0, 0.03);
    int counts[5] = {0};
    for (int i = 0; i < 5000; i++)
        counts[ct_rng_below(&q, 5)]++;
    for (int i = 0; i < 5; i++)
        CT_CHECK(counts[i] > 850 && counts[i] < 1150);
}

static void graph_should_stop_allocating_after_first_step(void) {
    test_alloc ta = {0};
    ct_ctx *ctx = make_ctx(&ta);
    ct_graph_params gp = ct_graph_default_params();
    gp.arena_chunk = 4096;
    ct_graph *g = NULL;
    CT_CHECK_INT(ct_graph_create(ctx, &gp, &g), CT_OK);
    long long after_first = 0;
    for (int step = 0; step < 5; step++) {
        ct_graph_reset(g);
        for (int i = 0; i < 50; i++) {
            /* a mix of small and larger-than-chunk requests */
            ct_tensor *t = ct_graph_new(g, CT_F32, 1, (int64_t[]){i % 7 == 0 ? 3000 : 10});
            CT_CHECK(t != NULL && ((uintptr_t)t->data % 64) == 0);
        }
        if (step == 0) after_first = ta.n_alloc;
    }
    CT_CHECK_INT(ta.n_alloc, after_first);
    CT_CHECK(ct_graph_arena_allocations(g) > 1);
    ct_graph_destroy(g);
    ct_ctx_destroy(ctx);
    CT_CHECK_INT(ta.live, 0);
    CT_CHECK_INT(ta.size_mismatch, 0);
}

static void graph_should_keep_first_failure_sticky(void) {
    ct_ctx *ctx = make_ctx(NULL);
    ct_graph *g = NULL;
    CT_CHECK_INT(ct_graph_create(ctx, NULL, &g), CT_OK);
    CT_CHECK(ct_graph_new(g, CT_F32, 1, (int64_t[]){-5}) == NULL);
    CT_CHECK_INT(ct_graph_status(g), CT_ERR_SHAPE);
    CT_CHECK(ct_graph_new(g, CT_F32, 1, (int64_t[]){5}) == NULL);
    CT_CHECK(strstr(ct_last_error(ctx), "negative") != NULL);
    ct_graph_reset(g);
    CT_CHECK_INT(ct_graph_status(g), CT_OK);
    CT_CHECK(ct_graph_new(g, CT_F32, 1, (int64_t[]){5}) != NULL);
    ct_graph_destroy(g);
    ct_ctx_destroy(ctx);
}

static void graph_should_reuse_released_scratch(void) {
    ct_ctx *ctx = make_ctx(NULL);
    ct_graph_params gp = ct_graph_default_params();
    gp.arena_chunk = 4096;
    ct_graph *g = NULL;
    CT_CHECK_INT(ct_graph_create(ctx, &gp, &g), CT_OK);
    ct_tensor *a = ct_graph_new(g, CT_F32, 1, (int64_t[]){100});
    ct_tensor_fill(a, 7.0f);
    size_t cap = 0;
    float *last = NULL;
    for (int i = 0; i < 10; i++) {
        ct_graph_mark m = ct_graph_scratch_mark(g);
        float *scratch = ct_graph_alloc(g, 3000 * sizeof(float)); /* larger than a chunk */
        if (i > 0) CT_CHECK(scratch == last);
        last = scratch;
        CT_CHECK(scratch != NULL);
        for (int k = 0; k < 3000; k++)
            scratch[k] = -1.0f;
        ct_graph_scratch_release(g, m);
        if (i == 0) cap = ct_graph_arena_capacity(g);
    }
    /* ten cycles cost the arena one scratch, and what was allocated before is untouched */
    CT_CHECK_INT(ct_graph_arena_capacity(g), cap);
    CT_CHECK(ct_tensor_get_f32(a, 99) == 7.0f);
    /* a mark taken before anything was allocated rewinds to the start; scratch comes from an
       arena of its own, so the step's next tensor is not placed on it, and marks nest */
    ct_graph_reset(g);
    ct_graph_mark m0 = ct_graph_scratch_mark(g);
    void *p0 = ct_graph_alloc(g, 64);
    ct_graph_mark m1 = ct_graph_scratch_mark(g);
    void *p1 = ct_graph_alloc(g, 64);
    CT_CHECK(p1 != p0);
    ct_graph_scratch_release(g, m1);
    CT_CHECK(ct_graph_alloc(g, 64) == p1); /* still inside m0 */
    ct_graph_scratch_release(g, m0);
    void *kept = ct_graph_alloc(g, 64);
    CT_CHECK(kept != p0 && kept != p1);
    ct_graph_mark m2 = ct_graph_scratch_mark(g);
    CT_CHECK(ct_graph_alloc(g, 64) == p0);
    ct_graph_scratch_release(g, m2);
    ct_graph_destroy(g);
    ct_ctx_destroy(ctx);
}

/* A chain of 40 tanh over 64k floats: backward reuses the gradient buffers of nodes it has
 * finished (their outputs' gradients are dead), so the arena grows by a few gradients rather
 * than 40, and the leaf's gradient is still right: d/dx of tanh^40 at 0 is 1. A second
 * backward in the same step gives the same gradient again (nothing left over). */
static void graph_should_recycle_dead_gradients_in_backward(void) {
    ct_ctx *ctx = make_ctx(NULL);
    ct_graph *g = NULL;
    CT_CHECK_INT(ct_graph_create(ctx, NULL, &g), CT_OK);
    enum { N = 1 << 16, DEPTH = 40 };
    size_t bytes = (size_t)N * sizeof(float);
    ct_tensor *x = ct_graph_zeros(g, CT_F32, 1, (int64_t[]){N});
    x->flags |= CT_TENSOR_REQUIRES_GRAD;
    ct_tensor *h = x, *mid = NULL;
    float *own = calloc(N, sizeof(float)); /* dL/dh of a middle layer, in the caller's buffer */
    for (int i = 0; i < DEPTH; i++) {
        h = ct_op_tanh(g, h);
        if (i == DEPTH / 2) {
            mid = h;
            mid->grad = own;
        }
    }
    ct_tensor *loss = ct_op_sum_all(g, h);
    size_t forward = ct_graph_arena_capacity(g);
    CT_CHECK_INT(ct_graph_backward(g, loss), CT_OK);
    size_t grown = ct_graph_arena_capacity(g) - forward;
    CT_CHECK_MSG(grown <= 4 * bytes, "backward grew the arena by %zu bytes (%zu per gradient)",
                 grown, bytes);
    CT_CHECK(ct_tensor_get_f32(x, 0) == 0.0f && x->grad && x->grad[0] == 1.0f &&
             x->grad[N - 1] == 1.0f);
    CT_CHECK(h->grad == NULL); /* an intermediate's gradient is not kept, as in PyTorch */
    CT_CHECK(mid->grad == own && own[0] == 1.0f && own[N - 1] == 1.0f); /* the caller's stays */
    memset(x->grad, 0, bytes);
    CT_CHECK_INT(ct_graph_backward(g, loss), CT_OK);
    CT_CHECK(x->grad[0] == 1.0f && x->grad[N / 2] == 1.0f);
    CT_CHECK_INT(ct_graph_arena_capacity(g) - forward, grown);
    ct_graph_destroy(g);
    free(own);
    ct_ctx_destroy(ctx);
}

static void params_should_live_in_one_buffer(void) {
    test_alloc ta = {0};
    ct_ctx *ctx = make_ctx(&ta);
    ct_params *P = NULL;
    CT_CHECK_INT(ct_params_create(ctx, &P), CT_OK);
    ct_tensor *w, *b, *rm, *nb, *dup;
    CT_CHECK_INT(
        ct_params_add(P, "fc.weight", CT_F32, 2, (int64_t[]){3, 4}, CT_PARAM_TRAINABLE, &w), CT_OK);
    CT_CHECK_INT(ct_params_add(P, "fc.bias", CT_F32, 1, (int64_t[]){3}, CT_PARAM_TRAINABLE, &b),
                 CT_OK);
    CT_CHECK_INT(
        ct_params_add(P, "bn.running_mean", CT_F32, 1, (int64_t[]){3}, CT_PARAM_BUFFER, &rm),
        CT_OK);
    CT_CHECK_INT(ct_params_add(P, "bn.num_batches_tracked", CT_I64, 0, NULL, CT_PARAM_BUFFER, &nb),
                 CT_OK);
    CT_CHECK_INT(ct_params_add(P, "fc.bias", CT_F32, 1, (int64_t[]){3}, CT_PARAM_TRAINABLE, &dup),
                 CT_ERR_INVALID_ARG);
    CT_CHECK(strstr(ct_last_error(ctx), "'fc.bias' is declared twice") != NULL);
    CT_CHECK_INT(ct_params_add(P, "x", CT_I64, 1, (int64_t[]){3}, CT_PARAM_TRAINABLE, &dup),
                 CT_ERR_INVALID_ARG);
    CT_CHECK_INT(ct_params_alloc(P), CT_OK);
    CT_CHECK_INT(ct_params_numel(P), 15);
    CT_CHECK((float *)b->data == (float *)w->data + 12);
    CT_CHECK(b->grad == w->grad + 12);
    CT_CHECK(ct_params_values(P) == w->data);
    CT_CHECK(ct_params_find(P, "bn.running_mean") == rm);
    CT_CHECK(ct_params_find(P, "nope") == NULL);
    CT_CHECK(((uintptr_t)nb->data % 8) == 0);
    CT_CHECK(!(rm->flags & CT_TENSOR_REQUIRES_GRAD) && (w->flags & CT_TENSOR_REQUIRES_GRAD));
    CT_CHECK_INT(ct_params_add(P, "late", CT_F32, 1, (int64_t[]){1}, CT_PARAM_TRAINABLE, &dup),
                 CT_ERR_INVALID_ARG);
    ct_rng r = ct_rng_init(3, 0);
    ct_nn_init_linear(w, b, &r);
    for (int i = 0; i < 12; i++)
        CT_CHECK(fabsf(((float *)w->data)[i]) <= 0.5f);
    ct_params_destroy(P);
    ct_ctx_destroy(ctx);
    CT_CHECK_INT(ta.live, 0);
    CT_CHECK_INT(ta.size_mismatch, 0);
}

/* Minimises 0.5 * ||w - t||^2 (gradient w - t) and checks the exact first updates. */
static void params_should_reject_totals_that_overflow(void) {
    ct_ctx *ctx = make_ctx(NULL);
    ct_params *P = NULL;
    CT_CHECK_INT(ct_params_create(ctx, &P), CT_OK);
    for (int i = 0; i < 5; i++) {
        char name[16];
        snprintf(name, sizeof name, "w%d", i);
        ct_tensor *t;
        /* each shape alone is addressable; together they are not */
        CT_CHECK_INT(ct_params_add(P, name, CT_F32, 1, (int64_t[]){(int64_t)1 << 60},
                                   CT_PARAM_TRAINABLE, &t),
                     CT_OK);
    }
    CT_CHECK_INT(ct_params_alloc(P), CT_ERR_SHAPE);
    CT_CHECK(strstr(ct_last_error(ctx), "add up to more than can be addressed") != NULL);
    CT_CHECK(ct_params_values(P) == NULL);
    ct_params_destroy(P);
    ct_ctx_destroy(ctx);
}

static void core_should_bound_threads_and_learning_rates(void) {
    ct_ctx *ctx = make_ctx(NULL);
    CT_CHECK_INT(ct_ctx_set_threads(ctx, CT_MAX_THREADS + 1), CT_ERR_INVALID_ARG);
    CT_CHECK_INT(ct_ctx_threads(ctx), 1);
    CT_CHECK_INT(ct_ctx_set_threads(ctx, -3), CT_ERR_INVALID_ARG);
    CT_CHECK_INT(ct_ctx_set_threads(ctx, 2), CT_OK);
    CT_CHECK_INT(ct_ctx_threads(ctx), 2);
    ct_ctx_params cp = ct_ctx_default_params();
    cp.n_threads = 100000;
    ct_ctx *bad = (ct_ctx *)1;
    CT_CHECK_INT(ct_ctx_create(&cp, &bad), CT_ERR_INVALID_ARG);
    ct_rng r = ct_rng_init(1, 1);
    CT_CHECK_INT(ct_rng_below(&r, 0), 0);
    ct_params *P = NULL;
    ct_tensor *w;
    ct_params_create(ctx, &P);
    ct_params_add(P, "w", CT_F32, 1, (int64_t[]){2}, CT_PARAM_TRAINABLE, &w);
    ct_params_alloc(P);
    ct_optim_params op = ct_optim_default_params(CT_OPTIM_SGD);
    ct_optim *o = NULL;
    CT_CHECK_INT(ct_optim_create(ctx, P, &op, &o), CT_OK);
    CT_CHECK_INT(ct_optim_set_lr(o, NAN), CT_ERR_INVALID_ARG);
    CT_CHECK_INT(ct_optim_set_lr(o, -1.0f), CT_ERR_INVALID_ARG);
    CT_CHECK_CLOSE(ct_optim_lr(o), op.lr, 0, 0);
    CT_CHECK_INT(ct_optim_set_lr(o, 0.5f), CT_OK);
    CT_CHECK_CLOSE(ct_optim_lr(o), 0.5, 0, 0);
    ct_optim_destroy(o);
    op.dampening = 2.0f;
    CT_CHECK_INT(ct_optim_create(ctx, P, &op, &o), CT_ERR_INVALID_ARG);
    ct_params_destroy(P);
    ct_ctx_destroy(ctx);
}

static void optim_should_follow_torch_formulas(void) {
    ct_ctx *ctx = make_ctx(NULL);
    for (int kind = 0; kind < CT_OPTIM_KIND_COUNT; kind++) {
        ct_params *P = NULL;
        ct_tensor *w;
        CT_CHECK_INT(ct_params_create(ctx, &P), CT_OK);
        CT_CHECK_INT(ct_params_add(P, "w", CT_F32, 1, (int64_t[]){2}, CT_PARAM_TRAINABLE, &w),
                     CT_OK);
        CT_CHECK_INT(ct_params_alloc(P), CT_OK);
        float *x = w->data;
        x[0] = 1.0f;
        x[1] = -2.0f;
        ct_optim_params op = ct_optim_default_params((ct_optim_kind)kind);
        op.lr = kind == CT_OPTIM_ADAGRAD ? 1.0f : 0.1f; /* Adagrad's steps shrink as 1/sqrt(t) */
        op.momentum = kind == CT_OPTIM_SGD ? 0.9f : 0.0f;
        ct_optim *o = NULL;
        CT_CHECK_INT(ct_optim_create(ctx, P, &op, &o), CT_OK);
        for (int s = 0; s < 200; s++) {
            ct_params_zero_grad(P);
            w->grad[0] = x[0] - 3.0f;
            w->grad[1] = x[1] - 3.0f;
            ct_optim_step(o);
            if (s == 0 && kind == CT_OPTIM_SGD) CT_CHECK_CLOSE(x[0], 1.2, 1e-6, 0);
            if (s == 0 && kind == CT_OPTIM_ADAM) CT_CHECK_CLOSE(x[0], 1.1, 1e-6, 0);
        }
        CT_CHECK_INT(ct_optim_steps(o), 200);
        if (kind != CT_OPTIM_ADAMW) {
            CT_CHECK_CLOSE(x[0], 3.0, 1e-2, 0);
            CT_CHECK_CLOSE(x[1], 3.0, 1e-2, 0);
        } else {
            /* decoupled decay pulls the minimum to t / (1 + wd/...) slightly below 3 */
            CT_CHECK(x[0] > 2.8f && x[0] < 3.0f);
        }
        ct_optim_destroy(o);
        ct_params_destroy(P);
    }
    ct_params *P = NULL;
    ct_tensor *w;
    CT_CHECK_INT(ct_params_create(ctx, &P), CT_OK);
    CT_CHECK_INT(ct_params_add(P, "w", CT_F32, 1, (int64_t[]){2}, CT_PARAM_TRAINABLE, &w), CT_OK);
    CT_CHECK_INT(ct_params_alloc(P), CT_OK);
    ct_optim_params bad = ct_optim_default_params(CT_OPTIM_ADAM);
    bad.beta1 = 1.5f;
    ct_optim *o = (ct_optim *)1;
    CT_CHECK_INT(ct_optim_create(ctx, P, &bad, &o), CT_ERR_INVALID_ARG);
    CT_CHECK(o == NULL);
    CT_CHECK(strstr(ct_last_error(ctx), "betas") != NULL);
    ct_params_destroy(P);
    ct_ctx_destroy(ctx);
}

/* ---- exact sums ---- */

static uint64_t xs_next(uint64_t *s) {
    *s = *s * 6364136223846793005u + 1442695040888963407u;
    return *s >> 11;
}

static double xs_sum(const double *v, int n) {
    ct_xsum x;
    ct_xsum_reset(&x);
    for (int i = 0; i < n; i++)
        ct_xsum_add(&x, v[i]);
    return ct_xsum_value(&x);
}

static bool same_bits(double a, double b) {
    return memcmp(&a, &b, sizeof a) == 0;
}

/* The reference twin: values that are multiples of 2^-40 below 2^40 in magnitude sum exactly
 * in a 128-bit integer, whose conversion to double rounds to nearest even. */
__extension__ typedef __int128 xs_i128;
static double xs_reference(const double *v, int n) {
    xs_i128 acc = 0;
    for (int i = 0; i < n; i++)
        acc += (xs_i128)ldexp(v[i], 40);
    return ldexp((double)acc, -40);
}

static void xsum_should_round_the_exact_sum_once_in_any_order(void) {
    /* cases where a double sum loses everything */
    const double a[] = {1e16, 1.0, -1e16};
    CT_CHECK(xs_sum(a, 3) == 1.0);
    const double b[] = {DBL_MAX, DBL_MAX, -DBL_MAX};
    CT_CHECK(xs_sum(b, 3) == DBL_MAX);
    const double c[] = {DBL_MAX, DBL_MAX};
    CT_CHECK(isinf(xs_sum(c, 2)) && xs_sum(c, 2) > 0);
    const double d[] = {ldexp(1.0, -1074), ldexp(1.0, -1074), -ldexp(1.0, -1073), 0.5};
    CT_CHECK(xs_sum(d, 4) == 0.5);
    const double e[] = {ldexp(1.0, -1074), ldexp(3.0, -1074)}; /* subnormal result */
    CT_CHECK(xs_sum(e, 2) == ldexp(1.0, -1072));
    const double f[] = {-3.0, 1.0, 0.5};
    CT_CHECK(xs_sum(f, 3) == -1.5);
    const double g[] = {1.0, ldexp(1.0, -53)}; /* a tie: to even (1.0) */
    CT_CHECK(same_bits(xs_sum(g, 2), 1.0));
    const double h[] = {1.0, ldexp(1.0, -53), ldexp(1.0, -1000)}; /* above the tie: up */
    CT_CHECK(xs_sum(h, 3) == 1.0 + ldexp(1.0, -52));
    const double k[] = {1.0 + ldexp(1.0, -52), ldexp(1.0, -53)}; /* a tie from odd: up */
    CT_CHECK(xs_sum(k, 2) == 1.0 + ldexp(1.0, -51));
    CT_CHECK(same_bits(xs_sum(a, 0), 0.0));
    const double nan_in[] = {1.0, (double)NAN}, infs[] = {(double)INFINITY, 1.0};
    const double both[] = {(double)INFINITY, -(double)INFINITY};
    CT_CHECK(isnan(xs_sum(nan_in, 2)));
    CT_CHECK(xs_sum(infs, 2) == (double)INFINITY);
    CT_CHECK(isnan(xs_sum(both, 2)));

    /* random values of every sign and scale: equal to the twin, and to itself reordered */
    enum { N = 200 };
    double v[N], w[N];
    uint64_t s = 7;
    for (int round = 0; round < 300; round++) {
        int n = 1 + (int)(xs_next(&s) % N);
        for (int i = 0; i < n; i++) {
            double m = (double)(xs_next(&s) % (UINT64_C(1) << 53)); /* 53 random bits */
            int scale = (int)(xs_next(&s) % 70) - 40 - 53 + (round % 3 == 0 ? 0 : 20);
            v[i] = ldexp(m, scale < -40 ? -40 : scale) * (xs_next(&s) & 1 ? -1.0 : 1.0);
            if (fabs(v[i]) >= ldexp(1.0, 39)) v[i] = ldexp(v[i], -20);
        }
        double got = xs_sum(v, n), ref = xs_reference(v, n);
        CT_CHECK_MSG(same_bits(got, ref), "round %d: %.17g, reference %.17g", round, got, ref);
        for (int i = 0; i < n; i++) /* a shuffle */
            w[i] = v[i];
        for (int i = n - 1; i > 0; i--) {
            int j = (int)(xs_next(&s) % (uint64_t)(i + 1));
            double t = w[i];
            w[i] = w[j];
            w[j] = t;
        }
        CT_CHECK(same_bits(xs_sum(w, n), got));
    }

    /* split over "ranks": exports summed as doubles, imported, give the one-sum value */
    for (int i = 0; i < N; i++)
        v[i] = ldexp((double)(xs_next(&s) % 1000000), (int)(xs_next(&s) % 600) - 300) *
               (i % 3 ? 1.0 : -1.0);
    ct_xsum part[3], all;
    double words[CT_XSUM_WORDS], total[CT_XSUM_WORDS] = {0};
    for (int r = 0; r < 3; r++) {
        ct_xsum_reset(&part[r]);
        for (int i = r; i < N; i += 3)
            ct_xsum_add(&part[r], v[i]);
        ct_xsum_export(&part[r], words);
        for (int j = 0; j < CT_XSUM_WORDS; j++)
            total[j] += words[j];
    }
    ct_xsum_import(&all, total);
    CT_CHECK(same_bits(ct_xsum_value(&all), xs_sum(v, N)));
    ct_xsum_add(&all, -xs_sum(v, N)); /* what is left is below half an ulp of the sum */
    CT_CHECK(fabs(ct_xsum_value(&all)) <= fabs(xs_sum(v, N)) * 0x1p-53);

    /* a negative total through export and import, and a sum of 2^30 + 3 adds (the digits are
       normalised on the way) */
    ct_xsum neg, back;
    ct_xsum_reset(&neg);
    ct_xsum_add(&neg, -1.5);
    ct_xsum_add(&neg, ldexp(1.0, -60));
    ct_xsum_export(&neg, words);
    ct_xsum_import(&back, words);
    CT_CHECK(ct_xsum_value(&back) == -1.5 + ldexp(1.0, -60));
    ct_xsum big;
    ct_xsum_reset(&big);
    big.adds = (INT64_C(1) << 30) - 2; /* as if that many adds had been made */
    for (int i = 0; i < 5; i++)
        ct_xsum_add(&big, -3.0);
    CT_CHECK_INT(big.adds, 3);
    CT_CHECK(ct_xsum_value(&big) == -15.0);
}

static void core_should_compute_crc32c_known_answers(void) {
    CT_CHECK(ct_crc32c(0, "123456789", 9) == 0xE3069283u);
    CT_CHECK(ct_crc32c_sw(0, "123456789", 9) == 0xE3069283u);
    CT_CHECK(ct_crc32c_hw(0, "123456789", 9) == 0xE3069283u);
    CT_CHECK(ct_crc32c(0, "", 0) == 0);
    unsigned char zeros[32] = {0}, buf[1031];
    CT_CHECK(ct_crc32c_sw(0, zeros, 32) == 0x8A9136AAu); /* RFC 3720 B.4: 32 bytes of zeros */
    for (size_t i = 0; i < sizeof buf; i++)
        buf[i] = (unsigned char)(i * 131u + 7u);
    /* the twins agree at every alignment and length, and a split run continues correctly */
    int bad = 0;
    for (size_t off = 0; off < 9; off++)
        for (size_t n = 0; n + off <= sizeof buf; n += 37)
            bad += ct_crc32c_sw(0, buf + off, n) != ct_crc32c_hw(0, buf + off, n);
    CT_CHECK_INT(bad, 0);
    uint32_t split = ct_crc32c(ct_crc32c(0, buf, 500), buf + 500, sizeof buf - 500);
    CT_CHECK(split == ct_crc32c_sw(0, buf, sizeof buf));
    printf("     (SSE4.2 crc32 %s)\n", ct_crc32c_hw_available() ? "used" : "not available");
}

int main(void) {
    CT_RUN(core_should_name_every_status);
    CT_RUN(core_should_describe_the_build_and_the_cpu);
    CT_RUN(core_should_record_error_with_location_and_context);
    CT_RUN(core_should_reject_bad_params);
    CT_RUN(core_should_suggest_near_names);
    CT_RUN(tensor_should_check_shapes_before_allocating);
    CT_RUN(tensor_should_view_reshape_and_slice_without_copy);
    CT_RUN(tensor_should_fail_cleanly_when_allocation_fails);
    CT_RUN(bf16_should_round_to_nearest_even);
    CT_RUN(rng_should_be_counter_based_and_splittable);
    CT_RUN(graph_should_stop_allocating_after_first_step);
    CT_RUN(graph_should_keep_first_failure_sticky);
    CT_RUN(graph_should_reuse_released_scratch);
    CT_RUN(graph_should_recycle_dead_gradients_in_backward);
    CT_RUN(params_should_live_in_one_buffer);
    CT_RUN(params_should_reject_totals_that_overflow);
    CT_RUN(core_should_bound_threads_and_learning_rates);
    CT_RUN(optim_should_follow_torch_formulas);
    CT_RUN(xsum_should_round_the_exact_sum_once_in_any_order);
    CT_RUN(core_should_compute_crc32c_known_answers);
    return ct_test_finish();
}
