/*
 * test_grad_losses.c - every loss of loss.h, in every reduction, against central differences
 * (gradcheck.h). Sample points of L1, smooth L1 and Huber keep |pred - target| at least 0.1
 * away from their kinks (0, beta, delta) so that the +-2h probes never cross one.
 */
#include "ctrain/ctrain.h"
#include "gradcheck.h"

enum { N = 5, C = 7 };

static const ct_reduction reductions[] = {CT_REDUCTION_MEAN, CT_REDUCTION_SUM, CT_REDUCTION_NONE};
static const char *const reduction_names[] = {"mean", "sum", "none"};

typedef struct loss_case {
    int which; /* 0 CE, 1 NLL, 2 BCE, 3 MSE, 4 L1, 5 smooth L1, 6 Huber */
    ct_reduction reduction;
    float label_smoothing;
    int64_t ignore_index;
    float a; /* beta or delta */
} loss_case;

static ct_tensor *forward(ct_graph *g, ct_tensor **in, void *user) {
    const loss_case *c = user;
    switch (c->which) {
    case 0: {
        ct_cross_entropy_params p = ct_cross_entropy_default_params();
        p.label_smoothing = c->label_smoothing;
        p.ignore_index = c->ignore_index;
        p.reduction = c->reduction;
        return ct_loss_cross_entropy(g, in[0], in[1], &p);
    }
    case 1:
        return ct_loss_nll(g, in[0], in[1], c->ignore_index, c->reduction);
    case 2:
        return ct_loss_bce_with_logits(g, in[0], in[1], c->reduction);
    case 3:
        return ct_loss_mse(g, in[0], in[1], c->reduction);
    case 4:
        return ct_loss_l1(g, in[0], in[1], c->reduction);
    case 5:
        return ct_loss_smooth_l1(g, in[0], in[1], c->a, c->reduction);
    default:
        return ct_loss_huber(g, in[0], in[1], c->a, c->reduction);
    }
}

static ct_ctx *make_ctx(void) {
    ct_ctx_params p = ct_ctx_default_params();
    p.n_threads = 2;
    ct_ctx *ctx = NULL;
    if (ct_ctx_create(&p, &ctx) != CT_OK) abort();
    return ctx;
}

static void class_losses_should_match_numeric_gradients(void) {
    ct_ctx *ctx = make_ctx();
    float x[N * C];
    int64_t t[N] = {3, -100, 0, 6, 2};
    int32_t t32[N] = {3, 5, 0, 6, 5}; /* 5 is ignored below */
    const float smoothing[] = {0.0f, 0.15f};
    for (int r = 0; r < 3; r++) {
        for (int s = 0; s < 2; s++) {
            gc_fill(x, N * C, 11u + (uint64_t)(r * 2 + s), -3.0f, 3.0f);
            gc_input in[2] = {{CT_F32, 2, {N, C}, x, true}, {CT_I64, 1, {N}, t, false}};
            loss_case c = {0, reductions[r], smoothing[s], -100, 0.0f};
            char what[64];
            snprintf(what, sizeof what, "cross_entropy %s ls %.2f", reduction_names[r],
                     (double)smoothing[s]);
            gc_check(what, ctx, 2, in, forward, &c, NULL);
            /* i32 targets and another ignore_index */
            gc_input in32[2] = {{CT_F32, 2, {N, C}, x, true}, {CT_I32, 1, {N}, t32, false}};
            c.ignore_index = 5;
            snprintf(what, sizeof what, "cross_entropy i32 %s ls %.2f", reduction_names[r],
                     (double)smoothing[s]);
            gc_check(what, ctx, 2, in32, forward, &c, NULL);
        }
        gc_fill(x, N * C, 31u + (uint64_t)r, -3.0f, 0.0f);
        gc_input in[2] = {{CT_F32, 2, {N, C}, x, true}, {CT_I64, 1, {N}, t, false}};
        loss_case c = {1, reductions[r], 0.0f, -100, 0.0f};
        char what[64];
        snprintf(what, sizeof what, "nll %s", reduction_names[r]);
        gc_check(what, ctx, 2, in, forward, &c, NULL);
    }
    ct_ctx_destroy(ctx);
}

/* pred uniform in [-2, 2]; target = pred - d with |d| drawn from `gaps` and a random sign. */
static void
fill_away_from_kinks(float *p, float *t, int64_t n, uint64_t seed, const float *gaps, int n_gaps) {
    float u[64];
    gc_fill(p, n, seed, -2.0f, 2.0f);
    gc_fill(u, n, seed + 100, 0.0f, 1.0f);
    for (int64_t i = 0; i < n; i++) {
        float d = gaps[i % n_gaps];
        t[i] = p[i] - (u[i] < 0.5f ? -d : d);
    }
}

static void elementwise_losses_should_match_numeric_gradients(void) {
    ct_ctx *ctx = make_ctx();
    enum { R = 4, K = 6 };
    float p[R * K], t[R * K];
    const float beta = 0.5f, delta = 0.8f;
    /* gaps away from 0, beta and delta by at least 0.1 */
    const float gaps[] = {0.15f, 0.3f, 0.62f, 0.95f, 1.3f, 2.1f, 0.2f};
    for (int r = 0; r < 3; r++) {
        for (int which = 2; which <= 6; which++) {
            if (which == 2) {
                gc_fill(p, R * K, 40u + (uint64_t)r, -4.0f, 4.0f);
                gc_fill(t, R * K, 50u + (uint64_t)r, 0.0f, 1.0f);
            } else {
                fill_away_from_kinks(p, t, R * K, 60u + (uint64_t)(which * 3 + r), gaps, 7);
            }
            gc_input in[2] = {{CT_F32, 2, {R, K}, p, true}, {CT_F32, 2, {R, K}, t, true}};
            loss_case c = {which, reductions[r], 0.0f, -100, which == 5 ? beta : delta};
            static const char *const names[] = {"",          "",     "bce_with_logits", "mse", "l1",
                                                "smooth_l1", "huber"};
            char what[64];
            snprintf(what, sizeof what, "%s %s", names[which], reduction_names[r]);
            gc_check(what, ctx, 2, in, forward, &c, NULL);
        }
    }
    ct_ctx_destroy(ctx);
}

int main(void) {
    CT_RUN(class_losses_should_match_numeric_gradients);
    CT_RUN(elementwise_losses_should_match_numeric_gradients);
    return ct_test_finish();
}
