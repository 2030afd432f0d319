/*
 * test_optim.c - parameter groups (glob matching, later groups win, errors), validation of
 * the optimizer settings, gradient clipping by value and by norm (report only, non-finite
 * gradients) and thread-count independence of the clip norm and of every optimizer's step.
 * The update formulas themselves are checked against PyTorch in tests/golden/test_golden_optim.c.
 */
#include <float.h>
#include <math.h>
#include <string.h>

#include "ctrain/ctrain.h"
#include "harness.h"
#include "test_alloc.h"

static ct_ctx *make_ctx(test_alloc *ta, int64_t threads) {
    ct_ctx_params p = ct_ctx_default_params();
    if (ta) p.allocator = test_allocator(ta);
    p.n_threads = threads;
    ct_ctx *ctx = NULL;
    if (ct_ctx_create(&p, &ctx) != CT_OK) abort();
    return ctx;
}

typedef struct decl {
    const char *name;
    int64_t numel;
    ct_param_kind kind;
} decl;

/* A store of 1-d tensors; every trainable value starts at `value`, every gradient at 0. */
static ct_params *make_store(ct_ctx *ctx, const decl *d, int count, float value) {
    ct_params *P = NULL;
    ct_tensor *t;
    CT_CHECK_INT(ct_params_create(ctx, &P), CT_OK);
    for (int i = 0; i < count; i++)
        CT_CHECK_INT(ct_params_add(P, d[i].name, CT_F32, 1, &d[i].numel, d[i].kind, &t), CT_OK);
    CT_CHECK_INT(ct_params_alloc(P), CT_OK);
    float *w = ct_params_values(P);
    for (int64_t i = 0; i < ct_params_numel(P); i++)
        w[i] = value;
    return P;
}

static const decl net[] = {
    {"fc1.weight", 4, CT_PARAM_TRAINABLE},    {"fc1.bias", 2, CT_PARAM_TRAINABLE},
    {"bn1.weight", 2, CT_PARAM_TRAINABLE},    {"bn1.bias", 2, CT_PARAM_TRAINABLE},
    {"bn1.running_mean", 2, CT_PARAM_BUFFER}, {"fc2.weight", 3, CT_PARAM_TRAINABLE},
    {"ln_f.weight", 2, CT_PARAM_TRAINABLE},
};
enum { NET_COUNT = sizeof net / sizeof net[0] };

static float first_value(ct_params *P, const char *name) {
    return ((const float *)ct_params_find(P, name)->data)[0];
}

static void optim_should_apply_groups_by_name(void) {
    ct_ctx *ctx = make_ctx(NULL, 1);
    ct_params *P = make_store(ctx, net, NET_COUNT, 1.0f);
    ct_optim_params op = ct_optim_default_params(CT_OPTIM_SGD);
    op.lr = 0.1f;
    op.weight_decay = 0.5f;
    ct_optim *o = NULL;
    CT_CHECK_INT(ct_optim_create(ctx, P, &op, &o), CT_OK);
    /* zero gradients: each step is w -= lr * lr_scale * wd * w */
    CT_CHECK_INT(ct_optim_add_group(o, "*.bias, *bn*.weight,*norm*.weight", 1.0f, 0.0f), CT_OK);
    CT_CHECK_INT(ct_optim_add_group(o, "fc1.bias", 2.0f, 0.25f), CT_OK); /* later wins */
    ct_optim_step(o);
    const float decayed = 1.0f - 0.1f * (0.5f * 1.0f);
    const float fc1_bias = 1.0f - (float)(0.1 * 2.0) * (0.25f * 1.0f);
    CT_CHECK(first_value(P, "fc1.weight") == decayed);
    CT_CHECK(first_value(P, "fc2.weight") == decayed);
    CT_CHECK(first_value(P, "ln_f.weight") == decayed); /* "*norm*" does not match "ln_f" */
    CT_CHECK(first_value(P, "bn1.weight") == 1.0f);
    CT_CHECK(first_value(P, "bn1.bias") == 1.0f);
    CT_CHECK(first_value(P, "fc1.bias") == fc1_bias);
    CT_CHECK(((const float *)ct_params_find(P, "fc1.bias")->data)[1] == fc1_bias);

    /* errors leave the groups as they were */
    CT_CHECK_INT(ct_optim_add_group(o, "conv*.weight,*.gamma", 1.0f, 0.0f), CT_ERR_CONFIG);
    CT_CHECK(strstr(ct_last_error(ctx), "'conv*.weight,*.gamma'") != NULL);
    CT_CHECK(strstr(ct_last_error(ctx), "matches no trainable parameter") != NULL);
    CT_CHECK_INT(ct_optim_add_group(o, "*running_mean", 1.0f, 0.0f), CT_ERR_CONFIG); /* buffer */
    CT_CHECK_INT(ct_optim_add_group(o, " , ", 1.0f, 0.0f), CT_ERR_INVALID_ARG);
    CT_CHECK_INT(ct_optim_add_group(o, "", 1.0f, 0.0f), CT_ERR_INVALID_ARG);
    CT_CHECK_INT(ct_optim_add_group(o, NULL, 1.0f, 0.0f), CT_ERR_INVALID_ARG);
    CT_CHECK_INT(ct_optim_add_group(o, "*", -1.0f, 0.0f), CT_ERR_INVALID_ARG);
    CT_CHECK(strstr(ct_last_error(ctx), "lr_scale") != NULL);
    CT_CHECK_INT(ct_optim_add_group(o, "*", 1.0f, NAN), CT_ERR_INVALID_ARG);
    CT_CHECK(strstr(ct_last_error(ctx), "weight_decay") != NULL);
    CT_CHECK_INT(ct_optim_add_group(o, "*", INFINITY, 0.0f), CT_ERR_INVALID_ARG);
    ct_optim_step(o);
    CT_CHECK(first_value(P, "bn1.weight") == 1.0f);
    CT_CHECK(first_value(P, "fc2.weight") == decayed - 0.1f * (0.5f * decayed));
    /* a group with lr_scale 0 freezes its tensors */
    CT_CHECK_INT(ct_optim_add_group(o, "fc2.*", 0.0f, 0.5f), CT_OK);
    float before = first_value(P, "fc2.weight");
    ct_optim_step(o);
    CT_CHECK(first_value(P, "fc2.weight") == before);
    ct_optim_destroy(o);
    ct_params_destroy(P);
    ct_ctx_destroy(ctx);
}

static void expect_invalid(ct_ctx *ctx, ct_params *P, const ct_optim_params *op, const char *w) {
    ct_optim *o = (ct_optim *)1;
    CT_CHECK_INT(ct_optim_create(ctx, P, op, &o), CT_ERR_INVALID_ARG);
    CT_CHECK(o == NULL);
    CT_CHECK_MSG(strstr(ct_last_error(ctx), w) != NULL, "'%s' not in '%s'", w, ct_last_error(ctx));
}

static void optim_should_reject_bad_settings(void) {
    ct_ctx *ctx = make_ctx(NULL, 1);
    ct_params *P = make_store(ctx, net, NET_COUNT, 1.0f);
    ct_optim_params op = ct_optim_default_params(CT_OPTIM_RMSPROP);
    CT_CHECK(op.alpha == 0.99f && op.eps == 1e-8f && op.lr == 1e-2f && !op.centered);
    op.alpha = 1.5f;
    expect_invalid(ctx, P, &op, "alpha");
    op = ct_optim_default_params(CT_OPTIM_RMSPROP);
    op.eps = -1.0f;
    expect_invalid(ctx, P, &op, "eps");
    op = ct_optim_default_params(CT_OPTIM_RMSPROP);
    op.momentum = NAN;
    expect_invalid(ctx, P, &op, "momentum");
    op = ct_optim_default_params(CT_OPTIM_ADAGRAD);
    CT_CHECK(op.eps == 1e-10f && op.lr_decay == 0.0f && op.initial_accumulator_value == 0.0f);
    op.lr_decay = -0.1f;
    expect_invalid(ctx, P, &op, "lr_decay");
    op = ct_optim_default_params(CT_OPTIM_ADAGRAD);
    op.initial_accumulator_value = -1.0f;
    expect_invalid(ctx, P, &op, "initial_accumulator_value");
    op = ct_optim_default_params(CT_OPTIM_ADAGRAD);
    op.eps = INFINITY;
    expect_invalid(ctx, P, &op, "eps");
    op = ct_optim_default_params(CT_OPTIM_ADAGRAD);
    op.weight_decay = -1.0f;
    expect_invalid(ctx, P, &op, "weight_decay");
    op = ct_optim_default_params(CT_OPTIM_ADAM);
    op.eps = NAN;
    expect_invalid(ctx, P, &op, "eps");
    op.kind = CT_OPTIM_KIND_COUNT;
    expect_invalid(ctx, P, &op, "kind");
    ct_params_destroy(P);
    ct_ctx_destroy(ctx);
}

static void optim_should_free_everything_when_allocation_fails(void) {
    for (long long fail = 1; fail < 8; fail++) {
        test_alloc ta = {0};
        ct_ctx *ctx = make_ctx(&ta, 1);
        ct_params *P = make_store(ctx, net, NET_COUNT, 1.0f);
        long long live = ta.live;
        ta.fail_at = ta.n_alloc + fail;
        ct_optim_params op = ct_optim_default_params(CT_OPTIM_RMSPROP);
        op.centered = true;
        op.momentum = 0.5f;
        ct_optim *o = NULL;
        ct_status s = ct_optim_create(ctx, P, &op, &o);
        CT_CHECK(s == CT_OK || s == CT_ERR_OOM);
        CT_CHECK(s == CT_OK || o == NULL);
        ta.fail_at = 0;
        ct_optim_destroy(o);
        CT_CHECK_INT(ta.live, live);
        ct_params_destroy(P);
        ct_ctx_destroy(ctx);
        CT_CHECK_INT(ta.live, 0);
        CT_CHECK_INT(ta.size_mismatch, 0);
    }
}

static void set_grads(ct_params *P, const float *g, int64_t n) {
    memcpy(ct_params_grads(P), g, (size_t)n * sizeof(float));
}

static void clip_should_clamp_by_value(void) {
    ct_ctx *ctx = make_ctx(NULL, 1);
    const decl d[] = {{"a", 4, CT_PARAM_TRAINABLE}, {"b", 2, CT_PARAM_TRAINABLE}};
    ct_params *P = make_store(ctx, d, 2, 0.0f);
    set_grads(P, (const float[]){-3.0f, -0.5f, 0.0f, 0.5f, 3.0f, NAN}, 6);
    CT_CHECK_INT(ct_optim_clip_grad_value(ctx, P, 1.0f), CT_OK);
    const float *g = ct_params_grads(P);
    CT_CHECK(g[0] == -1.0f && g[1] == -0.5f && g[2] == 0.0f && g[3] == 0.5f && g[4] == 1.0f);
    CT_CHECK(isnan(g[5]));
    CT_CHECK_INT(ct_optim_clip_grad_value(ctx, P, -1.0f), CT_ERR_INVALID_ARG);
    CT_CHECK(strstr(ct_last_error(ctx), "clip") != NULL);
    CT_CHECK_INT(ct_optim_clip_grad_value(ctx, P, NAN), CT_ERR_INVALID_ARG);
    CT_CHECK_INT(ct_optim_clip_grad_value(ctx, P, INFINITY), CT_ERR_INVALID_ARG);
    ct_params_destroy(P);
    ct_ctx_destroy(ctx);
}

static void clip_should_scale_by_global_norm(void) {
    ct_ctx *ctx = make_ctx(NULL, 1);
    const decl d[] = {{"a", 1, CT_PARAM_TRAINABLE}, {"b", 1, CT_PARAM_TRAINABLE}};
    ct_params *P = make_store(ctx, d, 2, 0.0f);
    const float *g = ct_params_grads(P);
    float norm = -1.0f;
    /* max_norm <= 0, or above the norm: measure only */
    const float limits[] = {0.0f, -1.0f, 10.0f, INFINITY};
    for (int k = 0; k < 4; k++) {
        set_grads(P, (const float[]){3.0f, -4.0f}, 2);
        CT_CHECK_INT(ct_optim_clip_grad_norm(ctx, P, limits[k], &norm), CT_OK);
        CT_CHECK(norm == 5.0f);
        CT_CHECK(g[0] == 3.0f && g[1] == -4.0f);
    }
    CT_CHECK_INT(ct_optim_clip_grad_norm(ctx, P, 1.0f, NULL), CT_OK);
    const float scale = (float)(1.0 / (5.0 + 1e-6));
    CT_CHECK(g[0] == 3.0f * scale && g[1] == -4.0f * scale);
    CT_CHECK_INT(ct_optim_clip_grad_norm(ctx, P, 1.0f, &norm), CT_OK);
    CT_CHECK_CLOSE(norm, 1.0, 1e-6, 0);
    CT_CHECK_INT(ct_optim_clip_grad_norm(ctx, P, NAN, &norm), CT_ERR_INVALID_ARG);
    CT_CHECK(strstr(ct_last_error(ctx), "max_norm") != NULL);
    CT_CHECK(norm == 0.0f);
    /* non-finite gradients: the norm says so and nothing is scaled */
    set_grads(P, (const float[]){INFINITY, 1.0f}, 2);
    CT_CHECK_INT(ct_optim_clip_grad_norm(ctx, P, 1.0f, &norm), CT_OK);
    CT_CHECK(isinf(norm));
    CT_CHECK(isinf(g[0]) && g[1] == 1.0f);
    set_grads(P, (const float[]){NAN, 2.0f}, 2);
    CT_CHECK_INT(ct_optim_clip_grad_norm(ctx, P, 1.0f, &norm), CT_OK);
    CT_CHECK(isnan(norm));
    CT_CHECK(isnan(g[0]) && g[1] == 2.0f);
    /* squares that overflow a float are summed in double */
    set_grads(P, (const float[]){3e30f, 4e30f}, 2);
    CT_CHECK_INT(ct_optim_clip_grad_norm(ctx, P, 1.0f, &norm), CT_OK);
    CT_CHECK_CLOSE(norm, 5e30, 0, 1e-6);
    CT_CHECK_CLOSE(g[1], 0.8, 0, 1e-6);
    ct_params_destroy(P);
    ct_ctx_destroy(ctx);
}

/* A deterministic fill in [-scale, scale). */
static void fill(float *x, int64_t n, uint64_t seed, float scale) {
    uint64_t s = seed * 6364136223846793005ull + 1442695040888963407ull;
    for (int64_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = scale * ((float)(s >> 40) / (float)(1u << 24) * 2.0f - 1.0f);
    }
}

static const decl big[] = {
    {"enc.weight", 30001, CT_PARAM_TRAINABLE}, {"enc.bias", 17, CT_PARAM_TRAINABLE},
    {"enc.running_var", 5, CT_PARAM_BUFFER},   {"dec.weight", 12000, CT_PARAM_TRAINABLE},
    {"dec.bias", 1, CT_PARAM_TRAINABLE},
};

static void clip_norm_should_not_depend_on_threads(void) {
    float norms[2], *grads[2] = {NULL, NULL};
    int64_t n = 0;
    for (int k = 0; k < 2; k++) {
        ct_ctx *ctx = make_ctx(NULL, k == 0 ? 1 : 2);
        ct_params *P = make_store(ctx, big, 5, 0.0f);
        n = ct_params_numel(P);
        fill(ct_params_grads(P), n, 7, 3.0f);
        CT_CHECK_INT(ct_optim_clip_grad_norm(ctx, P, 1.0f, &norms[k]), CT_OK);
        grads[k] = malloc((size_t)n * sizeof(float));
        if (grads[k]) memcpy(grads[k], ct_params_grads(P), (size_t)n * sizeof(float));
        ct_params_destroy(P);
        ct_ctx_destroy(ctx);
    }
    CT_CHECK(memcmp(&norms[0], &norms[1], sizeof(float)) == 0);
    CT_CHECK(grads[0] && grads[1] && memcmp(grads[0], grads[1], (size_t)n * sizeof(float)) == 0);
    /* sum of squares of uniform(-3, 3): n * 3 on average */
    CT_CHECK_CLOSE(norms[0], sqrt(3.0 * (double)n), 0, 2e-2);
    free(grads[0]);
    free(grads[1]);
}

/* Five steps from fixed gradients; with tiles > 1 each step is that many ct_optim_step_range
 * calls over [k n / tiles, (k + 1) n / tiles), each seeing the same step count, as the ranks
 * of a sharded update do (the bounds cut tensors and groups in the middle). */
static void
run_steps(ct_optim_params op, int64_t threads, bool group, int tiles, float *out, int64_t *n) {
    ct_ctx *ctx = make_ctx(NULL, threads);
    ct_params *P = make_store(ctx, big, 5, 0.0f);
    *n = ct_params_numel(P);
    fill(ct_params_values(P), *n, 1, 1.0f);
    ct_optim *o = NULL;
    CT_CHECK_INT(ct_optim_create(ctx, P, &op, &o), CT_OK);
    if (o && group) CT_CHECK_INT(ct_optim_add_group(o, "*.bias", 0.5f, 0.0f), CT_OK);
    for (uint64_t s = 0; o && s < 5; s++) {
        fill(ct_params_grads(P), *n, 100 + s, 1.0f);
        if (tiles < 2) {
            ct_optim_step(o);
            continue;
        }
        for (int k = 0; k < tiles; k++) {
            CT_CHECK_INT(ct_optim_set_steps(o, (int64_t)s), CT_OK);
            ct_optim_step_range(o, *n * k / tiles, *n * (k + 1) / tiles);
        }
        CT_CHECK_INT(ct_optim_steps(o), (int64_t)s + 1);
    }
    if (out) memcpy(out, ct_params_values(P), (size_t)*n * sizeof(float));
    ct_optim_destroy(o);
    ct_params_destroy(P);
    ct_ctx_destroy(ctx);
}

/* With zero_grad every kind's step leaves the whole gradient buffer at 0, groups or not (the
 * trainer then skips its own zeroing: ct_optim_zeroes_grads); without it the step leaves the
 * gradients alone. */
static void optim_zero_grad_should_clear_every_gradient(void) {
    for (int kind = 0; kind < CT_OPTIM_KIND_COUNT; kind++)
        for (int zero = 0; zero < 2; zero++) {
            ct_ctx *ctx = make_ctx(NULL, 2);
            ct_params *P = make_store(ctx, big, 5, 0.0f);
            int64_t n = ct_params_numel(P);
            fill(ct_params_values(P), n, 1, 1.0f);
            ct_optim_params op = ct_optim_default_params((ct_optim_kind)kind);
            op.zero_grad = zero != 0;
            ct_optim *o = NULL;
            CT_CHECK_INT(ct_optim_create(ctx, P, &op, &o), CT_OK);
            if (o) {
                CT_CHECK_INT(ct_optim_add_group(o, "*.bias", 0.5f, 0.0f), CT_OK);
                CT_CHECK(ct_optim_zeroes_grads(o) == (zero != 0));
                fill(ct_params_grads(P), n, 7, 1.0f);
                ct_optim_step(o);
                int64_t nonzero = 0;
                for (int64_t i = 0; i < n; i++)
                    nonzero += ct_params_grads(P)[i] != 0.0f;
                CT_CHECK_MSG(zero ? nonzero == 0 : nonzero > n / 2,
                             "kind %d, zero_grad %d: %lld of %lld gradients not 0", kind, zero,
                             (long long)nonzero, (long long)n);
            }
            ct_optim_destroy(o);
            ct_params_destroy(P);
            ct_ctx_destroy(ctx);
        }
}

/* Every kind with weight decay, and the variants of each: SGD with momentum and dampening,
 * Nesterov with zero_grad, centered RMSprop with momentum and zero_grad, Adagrad with its
 * decay and initial sum, AdamW with zero_grad. Fills ops and returns the count. */
enum { VARIANTS_MAX = 12 };
static int optimizer_variants(ct_optim_params *ops) {
    int count = 0;
    for (int kind = 0; kind < CT_OPTIM_KIND_COUNT; kind++) {
        ct_optim_params op = ct_optim_default_params((ct_optim_kind)kind);
        op.weight_decay = 0.01f;
        ops[count++] = op;
        if (kind == CT_OPTIM_SGD) {
            op.momentum = 0.9f;
            op.dampening = 0.1f;
            ops[count++] = op;
            op.dampening = 0.0f;
            op.nesterov = true;
            op.zero_grad = true;
            ops[count++] = op;
        } else if (kind == CT_OPTIM_RMSPROP) {
            op.momentum = 0.9f;
            op.centered = true;
            op.zero_grad = true;
            ops[count++] = op;
        } else if (kind == CT_OPTIM_ADAGRAD) {
            op.lr_decay = 0.1f;
            op.initial_accumulator_value = 0.5f;
            ops[count++] = op;
        } else if (kind == CT_OPTIM_ADAMW) {
            op.zero_grad = true;
            ops[count++] = op;
        }
    }
    return count;
}

/* Every kind's step gives the same bits with 1 and 2 threads, and stepped as ranges one by one
 * (ct_optim_step_range, what the ranks of a sharded update do). */
static void optim_step_should_not_depend_on_threads(void) {
    ct_optim_params ops[VARIANTS_MAX];
    int count = optimizer_variants(ops);
    int64_t n = 0;
    run_steps(ops[0], 1, false, 1, NULL, &n);
    float *one = malloc((size_t)n * sizeof(float)), *two = malloc((size_t)n * sizeof(float));
    float *start = malloc((size_t)n * sizeof(float));
    if (start) fill(start, n, 1, 1.0f);
    for (int c = 0; c < count && one && two && start; c++) {
        for (int group = 0; group < 2; group++) {
            run_steps(ops[c], 1, group, 1, one, &n);
            run_steps(ops[c], 2, group, 1, two, &n);
            CT_CHECK_MSG(memcmp(one, two, (size_t)n * sizeof(float)) == 0,
                         "kind %d (config %d, group %d): 1 and 2 threads differ", (int)ops[c].kind,
                         c, group);
            /* three ranges tiling the buffer: the same bits as one step over all of it */
            run_steps(ops[c], 2, group, 3, two, &n);
            CT_CHECK_MSG(memcmp(one, two, (size_t)n * sizeof(float)) == 0,
                         "kind %d (config %d, group %d): 3 range steps differ from one step",
                         (int)ops[c].kind, c, group);
            bool moved = false, finite = true;
            for (int64_t i = 0; i < n; i++) {
                finite = finite && isfinite(one[i]);
                moved = moved || one[i] != start[i];
            }
            CT_CHECK(finite && moved);
        }
    }
    free(one);
    free(two);
    free(start);
}

/* The weights and every optimizer buffer of o, concatenated into out ((1 + 3) x n floats). */
static void state_of(ct_optim *o, ct_params *P, float *out) {
    int64_t n = ct_params_numel(P);
    memcpy(out, ct_params_values(P), (size_t)n * sizeof(float));
    for (int32_t k = 0; k < ct_optim_buffer_count(o); k++) {
        const char *name;
        float *buf = NULL;
        CT_CHECK_INT(ct_optim_buffer(o, k, &name, &buf), CT_OK);
        if (buf) memcpy(out + (size_t)(k + 1) * (size_t)n, buf, (size_t)n * sizeof(float));
    }
}

/* Two stores with the same weights and two optimizers of one configuration, each with a
 * "*.bias" group (lr x 0.5, no decay), on a context of `threads`; sa and sb hold a state_of
 * each (bytes). */
typedef struct twins {
    ct_ctx *ctx;
    ct_params *A, *B;
    ct_optim *oa, *ob;
    ct_optim_kind kind;
    int64_t n;
    size_t bytes;
    float *sa, *sb;
} twins;

static twins twins_open(const ct_optim_params *op, int threads) {
    twins t;
    t.ctx = make_ctx(NULL, threads);
    t.A = make_store(t.ctx, big, 5, 0.0f);
    t.B = make_store(t.ctx, big, 5, 0.0f);
    t.n = ct_params_numel(t.A);
    t.bytes = 4 * (size_t)t.n * sizeof(float);
    t.oa = t.ob = NULL;
    t.kind = op->kind;
    CT_CHECK_INT(ct_optim_create(t.ctx, t.A, op, &t.oa), CT_OK);
    CT_CHECK_INT(ct_optim_create(t.ctx, t.B, op, &t.ob), CT_OK);
    t.sa = calloc(4 * (size_t)t.n, sizeof(float));
    t.sb = calloc(4 * (size_t)t.n, sizeof(float));
    if (!t.oa || !t.ob || !t.sa || !t.sb) abort();
    CT_CHECK_INT(ct_optim_add_group(t.oa, "*.bias", 0.5f, 0.0f), CT_OK);
    CT_CHECK_INT(ct_optim_add_group(t.ob, "*.bias", 0.5f, 0.0f), CT_OK);
    fill(ct_params_values(t.A), t.n, 1, 1.0f);
    fill(ct_params_values(t.B), t.n, 1, 1.0f);
    return t;
}

static void twins_close(twins *t) {
    free(t->sa);
    free(t->sb);
    ct_optim_destroy(t->oa);
    ct_optim_destroy(t->ob);
    ct_params_destroy(t->A);
    ct_params_destroy(t->B);
    ct_ctx_destroy(t->ctx);
}

/* After a step of each: the same weights, moments and gradients (zero_grad alike). */
static void twins_expect_equal(twins *t, int config, int threads, int step) {
    state_of(t->oa, t->A, t->sa);
    state_of(t->ob, t->B, t->sb);
    CT_CHECK_MSG(memcmp(t->sa, t->sb, t->bytes) == 0,
                 "config %d (kind %d), %d threads, step %d: the checked step differs from "
                 "ct_optim_step",
                 config, (int)t->kind, threads, step);
    CT_CHECK(memcmp(ct_params_grads(t->A), ct_params_grads(t->B), (size_t)t->n * sizeof(float)) ==
             0);
}

/* Runs body on twins of every optimizer variant, on 1 and 2 threads. */
static void each_variant_on_twins(void (*body)(twins *t, int config, int threads)) {
    ct_optim_params ops[VARIANTS_MAX];
    int count = optimizer_variants(ops);
    for (int c = 0; c < count; c++)
        for (int threads = 1; threads <= 2; threads++) {
            twins t = twins_open(&ops[c], threads);
            body(&t, c, threads);
            twins_close(&t);
        }
}

/* ct_optim_step_if_finite: with finite gradients the bits of ct_optim_step, weights and every
 * moment, for every kind and variant (momentum, dampening, Nesterov, centered RMSprop, Adagrad's
 * decay, zero_grad) with groups, on 1 and 2 threads (2: the scan-and-update team); with an inf
 * or a NaN anywhere (a team member's first element, the middle, the last) nothing changes at
 * all: weights, every moment, gradients and the step count (on the first step too, so SGD's
 * first-step rule waits for the next real one). */
static void step_if_finite_twins(twins *t, int c, int threads) {
    int64_t n = t->n;
    float *g0 = malloc((size_t)n * sizeof(float));
    if (!g0) abort();
    const int64_t where[4] = {0, n / 2, n / 2 + 1, n - 1};
    const float bad[2] = {INFINITY, NAN};
    for (uint64_t step = 0; step < 4; step++) {
        /* a refused update first (at step 0: before any), then the real one */
        for (int k = 0; k < 2; k++) {
            fill(ct_params_grads(t->B), n, 90 + step, 1.0f);
            ct_params_grads(t->B)[where[(step + (uint64_t)k) % 4]] = bad[k];
            state_of(t->ob, t->B, t->sb);
            memcpy(g0, ct_params_grads(t->B), (size_t)n * sizeof(float));
            CT_CHECK_MSG(!ct_optim_step_if_finite(t->ob), "config %d: %g was applied", c,
                         (double)bad[k]);
            state_of(t->ob, t->B, t->sa);
            CT_CHECK_MSG(memcmp(t->sa, t->sb, t->bytes) == 0,
                         "config %d: a refused step changed the state", c);
            CT_CHECK(memcmp(g0, ct_params_grads(t->B), (size_t)n * sizeof(float)) == 0);
            CT_CHECK_INT(ct_optim_steps(t->ob), (int64_t)step);
        }
        fill(ct_params_grads(t->A), n, 50 + step, 1.0f);
        fill(ct_params_grads(t->B), n, 50 + step, 1.0f);
        ct_optim_step(t->oa);
        CT_CHECK(ct_optim_step_if_finite(t->ob));
        twins_expect_equal(t, c, threads, (int)step);
    }
    CT_CHECK_INT(ct_optim_steps(t->ob), 4);
    free(g0);
}

static void optim_step_if_finite_should_step_or_leave_everything(void) {
    each_variant_on_twins(step_if_finite_twins);
}

/* ct_optim_step_checked: for every kind and variant with groups, on 1 and 2 threads, the bits
 * of ct_optim_step (weights, every moment, the gradients zero_grad leaves) and true, with the
 * largest finite gradient too; false for an inf, a -inf or a NaN anywhere (each tensor's first
 * and last element, so every group's span, and the middle), the update counted all the same. */
static void step_checked_twins(twins *t, int c, int threads) {
    int64_t n = t->n;
    const int64_t where[4] = {0, n / 2, n / 2 + 1, n - 1};
    for (uint64_t step = 0; step < 4; step++) {
        fill(ct_params_grads(t->A), n, 50 + step, 1.0f);
        fill(ct_params_grads(t->B), n, 50 + step, 1.0f);
        if (step == 3) { /* finite however large */
            ct_params_grads(t->A)[where[1]] = FLT_MAX;
            ct_params_grads(t->B)[where[1]] = FLT_MAX;
        }
        ct_optim_step(t->oa);
        CT_CHECK_MSG(ct_optim_step_checked(t->ob),
                     "config %d, step %d: finite gradients reported non-finite", c, (int)step);
        twins_expect_equal(t, c, threads, (int)step);
    }
    int64_t at[16] = {n / 2, n / 2 + 1}, n_at = 2;
    int64_t trainable = 0;
    for (int64_t i = 0; i < ct_params_count(t->B) && n_at + 2 <= 16; i++) {
        if (ct_params_kind_at(t->B, i) != CT_PARAM_TRAINABLE) continue; /* not updated */
        trainable++;
        const ct_tensor *x = ct_params_at(t->B, i);
        int64_t off = (const float *)x->data - ct_params_values(t->B);
        at[n_at++] = off;
        at[n_at++] = off + ct_tensor_numel(x) - 1;
    }
    CT_CHECK_INT(n_at, 2 + 2 * trainable);
    const float bad[3] = {INFINITY, -INFINITY, NAN};
    for (int64_t w = 0; w < n_at; w++)
        for (int k = 0; k < 3; k++) {
            int64_t before = ct_optim_steps(t->ob);
            fill(ct_params_grads(t->B), n, 70 + (uint64_t)w, 1.0f);
            ct_params_grads(t->B)[at[w]] = bad[k];
            CT_CHECK_MSG(!ct_optim_step_checked(t->ob),
                         "config %d, %d threads: %g at %lld not seen", c, threads, (double)bad[k],
                         (long long)at[w]);
            CT_CHECK_INT(ct_optim_steps(t->ob), before + 1);
        }
}

static void optim_step_checked_should_step_and_see_every_nonfinite(void) {
    each_variant_on_twins(step_checked_twins);
}

/* Copying every state buffer and the step count into a fresh optimizer resumes bit for bit. */
static void optim_state_should_round_trip(void) {
    ct_ctx *ctx = make_ctx(NULL, 1);
    static const decl d[] = {{"a.weight", 37, CT_PARAM_TRAINABLE},
                             {"a.bias", 5, CT_PARAM_TRAINABLE}};
    struct {
        ct_optim_kind kind;
        float momentum;
        bool centered;
        int32_t buffers;
        const char *first;
    } cases[] = {{CT_OPTIM_SGD, 0.9f, false, 1, "momentum_buffer"},
                 {CT_OPTIM_SGD, 0.0f, false, 0, NULL},
                 {CT_OPTIM_ADAM, 0.0f, false, 2, "exp_avg"},
                 {CT_OPTIM_ADAMW, 0.0f, false, 2, "exp_avg"},
                 {CT_OPTIM_RMSPROP, 0.5f, true, 3, "square_avg"},
                 {CT_OPTIM_ADAGRAD, 0.0f, false, 1, "sum"}};
    for (int c = 0; c < 6; c++) {
        ct_params *A = make_store(ctx, d, 2, 0.3f), *B = make_store(ctx, d, 2, 0.3f);
        ct_optim_params op = ct_optim_default_params(cases[c].kind);
        op.momentum = cases[c].momentum;
        op.centered = cases[c].centered;
        op.lr = 0.05f;
        ct_optim *oa, *ob;
        CT_CHECK_INT(ct_optim_create(ctx, A, &op, &oa), CT_OK);
        CT_CHECK_INT(ct_optim_create(ctx, B, &op, &ob), CT_OK);
        CT_CHECK_INT(ct_optim_buffer_count(oa), cases[c].buffers);
        int64_t n = ct_params_numel(A);
        for (int step = 0; step < 8; step++) {
            if (step == 4) { /* checkpoint A into B: weights, buffers, step count */
                memcpy(ct_params_values(B), ct_params_values(A), (size_t)n * sizeof(float));
                for (int32_t i = 0; i < ct_optim_buffer_count(oa); i++) {
                    const char *na, *nb;
                    float *da, *db;
                    CT_CHECK_INT(ct_optim_buffer(oa, i, &na, &da), CT_OK);
                    CT_CHECK_INT(ct_optim_buffer(ob, i, &nb, &db), CT_OK);
                    CT_CHECK(strcmp(na, nb) == 0);
                    if (i == 0) CT_CHECK(strcmp(na, cases[c].first) == 0);
                    memcpy(db, da, (size_t)n * sizeof(float));
                }
                CT_CHECK_INT(ct_optim_set_steps(ob, ct_optim_steps(oa)), CT_OK);
            }
            for (int64_t i = 0; i < n; i++)
                ct_params_grads(A)[i] = ct_params_grads(B)[i] = sinf((float)(i * 7 + step));
            ct_optim_step(oa);
            if (step >= 4) ct_optim_step(ob);
        }
        CT_CHECK_MSG(memcmp(ct_params_values(A), ct_params_values(B), (size_t)n * sizeof(float)) ==
                         0,
                     "kind %d: the resumed optimizer diverged", (int)cases[c].kind);
        const char *nm;
        float *dd;
        CT_CHECK_INT(ct_optim_buffer(oa, cases[c].buffers, &nm, &dd), CT_ERR_INVALID_ARG);
        CT_CHECK(nm == NULL && dd == NULL);
        ct_optim_destroy(oa);
        ct_optim_destroy(ob);
        ct_params_destroy(A);
        ct_params_destroy(B);
    }
    ct_ctx_destroy(ctx);
}

int main(void) {
    CT_RUN(optim_state_should_round_trip);
    CT_RUN(optim_should_apply_groups_by_name);
    CT_RUN(optim_should_reject_bad_settings);
    CT_RUN(optim_should_free_everything_when_allocation_fails);
    CT_RUN(clip_should_clamp_by_value);
    CT_RUN(clip_should_scale_by_global_norm);
    CT_RUN(clip_norm_should_not_depend_on_threads);
    CT_RUN(optim_zero_grad_should_clear_every_gradient);
    CT_RUN(optim_step_should_not_depend_on_threads);
    CT_RUN(optim_step_if_finite_should_step_or_leave_everything);
    CT_RUN(optim_step_checked_should_step_and_see_every_nonfinite);
    return ct_test_finish();
}
