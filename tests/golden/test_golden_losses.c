/*
 * test_golden_losses.c - every loss in every reduction (with label smoothing and ignore_index
 * for cross-entropy) against PyTorch's values and gradients from fixtures/losses.bin.
 */
#include "golden.h"

static gold G;

static const char *const reductions[] = {"mean", "sum", "none"};

static ct_reduction reduction_of(const char *s) {
    return strcmp(s, "mean") == 0 ? CT_REDUCTION_MEAN
                                  : (strcmp(s, "sum") == 0 ? CT_REDUCTION_SUM : CT_REDUCTION_NONE);
}

typedef struct loss_args {
    int which; /* 0 CE, 1 NLL, 2 BCE, 3 MSE, 4 L1, 5 smooth L1, 6 Huber */
    ct_reduction reduction;
    float label_smoothing;
    int64_t ignore_index;
    float a;
} loss_args;

static ct_tensor *run_loss(ct_graph *g, ct_tensor **in, const void *user) {
    const loss_args *c = user;
    switch (c->which) {
    case 0: {
        ct_cross_entropy_params p = ct_cross_entropy_default_params();
        p.reduction = c->reduction;
        p.label_smoothing = c->label_smoothing;
        p.ignore_index = c->ignore_index;
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

static const char *const xt[] = {"x", "t"};
static const char *const py[] = {"p", "y"};

static void golden_cross_entropy_should_match_pytorch(void) {
    char name[64];
    for (int r = 0; r < 3; r++) {
        ct_reduction red = reduction_of(reductions[r]);
        for (int ls = 0; ls <= 1; ls++) {
            loss_args a = {0, red, 0.1f * (float)ls, -100, 0.0f};
            snprintf(name, sizeof name, "ce_%s_ls%d", reductions[r], ls);
            gold_case(&G, name, 2, xt, run_loss, &a, NULL);
        }
        loss_args a = {0, red, 0.2f, 2, 0.0f};
        snprintf(name, sizeof name, "ce_%s_ign2", reductions[r]);
        gold_case(&G, name, 2, xt, run_loss, &a, NULL);
    }
}

static void golden_nll_should_match_pytorch(void) {
    char name[64];
    for (int r = 0; r < 3; r++) {
        loss_args a = {1, reduction_of(reductions[r]), 0.0f, -100, 0.0f};
        snprintf(name, sizeof name, "nll_%s", reductions[r]);
        gold_case(&G, name, 2, xt, run_loss, &a, NULL);
    }
}

static void golden_elementwise_losses_should_match_pytorch(void) {
    char name[64];
    for (int r = 0; r < 3; r++) {
        ct_reduction red = reduction_of(reductions[r]);
        static const char *const simple[] = {"bce", "mse", "l1"};
        for (int k = 0; k < 3; k++) {
            loss_args a = {2 + k, red, 0.0f, -100, 0.0f};
            snprintf(name, sizeof name, "%s_%s", simple[k], reductions[r]);
            gold_case(&G, name, 2, py, run_loss, &a, NULL);
        }
        static const float betas[] = {1.0f, 0.5f}, deltas[] = {1.0f, 0.7f};
        for (int k = 0; k < 2; k++) {
            loss_args a = {5, red, 0.0f, -100, betas[k]};
            snprintf(name, sizeof name, "smooth_l1_%s_b%g", reductions[r], (double)betas[k]);
            gold_case(&G, name, 2, py, run_loss, &a, NULL);
            loss_args b = {6, red, 0.0f, -100, deltas[k]};
            snprintf(name, sizeof name, "huber_%s_d%g", reductions[r], (double)deltas[k]);
            gold_case(&G, name, 2, py, run_loss, &b, NULL);
        }
    }
}

int main(void) {
    static const int64_t threads[] = {1, 4};
    for (int i = 0; i < 2; i++) {
        if (!gold_open(&G, "losses.bin", threads[i])) break;
        CT_RUN(golden_cross_entropy_should_match_pytorch);
        CT_RUN(golden_nll_should_match_pytorch);
        CT_RUN(golden_elementwise_losses_should_match_pytorch);
        gold_close(&G);
    }
    gold_close(&G);
    return ct_test_finish();
}
