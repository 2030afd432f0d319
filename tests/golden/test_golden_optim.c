/*
 * test_golden_optim.c - every optimizer against PyTorch (fixtures/optim.bin, written by
 * gen_optim.py): two parameters start from the same values, take the same 10 gradients, and
 * after every step must match torch.optim's to |got - ref| <= 1e-7 + 1e-6 |ref|. Each case
 * runs with 1 and 4 threads and the two runs must give the same bits. clip_grad_norm is
 * checked against torch.nn.utils.clip_grad_norm_ (the norm and the clipped gradients).
 */
#include "ctrain/ctrain.h"
#include "fixture.h"
#include "harness.h"

enum { STEPS = 10, N_PARAMS = 2, HP_COUNT = 14 };

#define ATOL 1e-7
#define RTOL 1e-6

static const char *const names[N_PARAMS] = {"a.weight", "a.bias"};
static const int64_t shapes[N_PARAMS][2] = {{5, 3}, {3, 0}};
static const int32_t ndims[N_PARAMS] = {2, 1};

static const char *const cases[] = {"sgd",     "sgd_momentum",     "sgd_nesterov",
                                    "adam",    "adam_wd",          "adamw",
                                    "rmsprop", "rmsprop_centered", "adagrad"};

static ct_ctx *make_ctx(int64_t threads) {
    ct_ctx_params p = ct_ctx_default_params();
    p.n_threads = threads;
    ct_ctx *ctx = NULL;
    if (ct_ctx_create(&p, &ctx) != CT_OK) abort();
    return ctx;
}

/* A store with a.weight and a.bias holding the fixture's prefix/<name> arrays (if given). */
static ct_params *make_store(ct_ctx *ctx, const gf_file *f, const char *prefix, ct_tensor **t) {
    ct_params *P = NULL;
    CT_CHECK_INT(ct_params_create(ctx, &P), CT_OK);
    for (int k = 0; k < N_PARAMS; k++)
        CT_CHECK_INT(
            ct_params_add(P, names[k], CT_F32, ndims[k], shapes[k], CT_PARAM_TRAINABLE, &t[k]),
            CT_OK);
    CT_CHECK_INT(ct_params_alloc(P), CT_OK);
    for (int k = 0; k < N_PARAMS && prefix; k++) {
        char key[128];
        snprintf(key, sizeof key, "%s/%s", prefix, names[k]);
        const gf_array *a = gf_get(f, key);
        if (a && a->numel == ct_tensor_numel(t[k]))
            memcpy(t[k]->data, a->data, (size_t)a->numel * sizeof(float));
        else
            CT_CHECK_MSG(0, "fixture array %s is missing or has the wrong size", key);
    }
    return P;
}

/* Worst |got - ref| / |ref| over n values, with |ref| floored at ATOL / RTOL (near 0 the
 * absolute tolerance governs). */
static double worst_rel(const float *got, const float *ref, int64_t n) {
    double worst = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double r = fabs((double)ref[i]), floor = ATOL / RTOL;
        double e = fabs((double)got[i] - (double)ref[i]) / (r > floor ? r : floor);
        if (e > worst || isnan(e)) worst = e;
    }
    return worst;
}

/* Runs one case; fills out[] with the final parameters (15 + 3 floats) and returns the worst
 * relative error over every step. */
static double run_case(const gf_file *f, const char *name, int64_t threads, float *out) {
    ct_ctx *ctx = make_ctx(threads);
    ct_tensor *t[N_PARAMS];
    ct_params *P = make_store(ctx, f, "init", t);
    char key[128];
    snprintf(key, sizeof key, "%s/kind", name);
    const gf_array *kind = gf_get(f, key);
    snprintf(key, sizeof key, "%s/hp", name);
    const gf_array *hpa = gf_get(f, key);
    double worst = INFINITY;
    if (!kind || !hpa || hpa->numel != HP_COUNT || kind->dtype != CT_I64) {
        CT_CHECK_MSG(0, "case %s: no kind or hp in the fixture; %s", name, GF_REGEN);
        goto done;
    }
    const float *hp = hpa->data;
    ct_optim_params op = ct_optim_default_params((ct_optim_kind) * (const int64_t *)kind->data);
    op.lr = hp[0];
    op.weight_decay = hp[1];
    op.momentum = hp[2];
    op.dampening = hp[3];
    op.nesterov = hp[4] != 0.0f;
    op.beta1 = hp[5];
    op.beta2 = hp[6];
    op.eps = hp[7];
    op.alpha = hp[8];
    op.centered = hp[9] != 0.0f;
    op.lr_decay = hp[10];
    op.initial_accumulator_value = hp[11];
    ct_optim *o = NULL;
    CT_CHECK_INT(ct_optim_create(ctx, P, &op, &o), CT_OK);
    if (!o) goto done;
    if (hp[12] >= 0.0f) CT_CHECK_INT(ct_optim_add_group(o, "*.bias", hp[12], hp[13]), CT_OK);
    const gf_array *grads[N_PARAMS], *ref[N_PARAMS];
    for (int k = 0; k < N_PARAMS; k++) {
        snprintf(key, sizeof key, "grads/%s", names[k]);
        grads[k] = gf_get(f, key);
        snprintf(key, sizeof key, "%s/%s", name, names[k]);
        ref[k] = gf_get(f, key);
        int64_t want = STEPS * ct_tensor_numel(t[k]);
        if (!grads[k] || !ref[k] || grads[k]->numel != want || ref[k]->numel != want) {
            CT_CHECK_MSG(0, "case %s: gradients or trajectory of %s missing; %s", name, names[k],
                         GF_REGEN);
            ct_optim_destroy(o);
            goto done;
        }
    }
    worst = 0.0;
    for (int s = 0; s < STEPS; s++) {
        for (int k = 0; k < N_PARAMS; k++) {
            int64_t n = ct_tensor_numel(t[k]);
            memcpy(t[k]->grad, (const float *)grads[k]->data + s * n, (size_t)n * sizeof(float));
        }
        ct_optim_step(o);
        for (int k = 0; k < N_PARAMS; k++) {
            int64_t n = ct_tensor_numel(t[k]);
            const float *r = (const float *)ref[k]->data + s * n;
            char what[160];
            snprintf(what, sizeof what, "%s step %d %s (%lld threads)", name, s + 1, names[k],
                     (long long)threads);
            CT_CHECK_ARRAYS(what, (const float *)t[k]->data, r, n, ATOL, RTOL);
            double e = worst_rel(t[k]->data, r, n);
            if (e > worst || isnan(e)) worst = e;
        }
    }
    memcpy(out, t[0]->data, 15 * sizeof(float));
    memcpy(out + 15, t[1]->data, 3 * sizeof(float));
    ct_optim_destroy(o);
done:
    ct_params_destroy(P);
    ct_ctx_destroy(ctx);
    return worst;
}

static gf_file fixture;

static void optim_should_match_torch_for_ten_steps(void) {
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        float one[18] = {0}, four[18] = {0};
        double e1 = run_case(&fixture, cases[c], 1, one);
        double e4 = run_case(&fixture, cases[c], 4, four);
        CT_CHECK_MSG(memcmp(one, four, sizeof one) == 0, "case %s: 1 and 4 threads differ",
                     cases[c]);
        printf("  %-18s worst relative error %.3g\n", cases[c], e1 > e4 ? e1 : e4);
    }
}

static void clip_grad_norm_should_match_torch(void) {
    ct_ctx *ctx = make_ctx(2);
    ct_tensor *t[N_PARAMS];
    ct_params *P = make_store(ctx, &fixture, NULL, t);
    const gf_array *max_norm = gf_get(&fixture, "clip/max_norm");
    const gf_array *norm = gf_get(&fixture, "clip/norm");
    if (max_norm && norm) {
        for (int pass = 0; pass < 2; pass++) {
            for (int k = 0; k < N_PARAMS; k++) {
                char key[64];
                snprintf(key, sizeof key, "clip/grad/%s", names[k]);
                const gf_array *g = gf_get(&fixture, key);
                if (g && g->numel == ct_tensor_numel(t[k]))
                    memcpy(t[k]->grad, g->data, (size_t)g->numel * sizeof(float));
            }
            float total = 0.0f;
            /* the first pass clips, the second only measures */
            float limit = pass == 0 ? *(const float *)max_norm->data : 0.0f;
            CT_CHECK_INT(ct_optim_clip_grad_norm(ctx, P, limit, &total), CT_OK);
            CT_CHECK_CLOSE(total, *(const float *)norm->data, 0, RTOL);
            printf("  clip norm %.9g, torch %.9g\n", (double)total,
                   (double)*(const float *)norm->data);
            for (int k = 0; k < N_PARAMS; k++) {
                char key[64];
                snprintf(key, sizeof key, pass == 0 ? "clip/out/%s" : "clip/grad/%s", names[k]);
                const gf_array *want = gf_get(&fixture, key);
                if (want && want->numel == ct_tensor_numel(t[k]))
                    CT_CHECK_ARRAYS(key, t[k]->grad, want->data, want->numel, ATOL, RTOL);
            }
        }
    }
    ct_params_destroy(P);
    ct_ctx_destroy(ctx);
}

int main(void) {
    if (!gf_load(&fixture, "optim.bin")) {
        fprintf(stderr, "cannot load optim.bin; regenerate with /usr/bin/python3 "
                        "tests/golden/gen_optim.py\n");
        return 1;
    }
    CT_RUN(optim_should_match_torch_for_ten_steps);
    CT_RUN(clip_grad_norm_should_match_torch);
    gf_free(&fixture);
    return ct_test_finish();
}
