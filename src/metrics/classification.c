/*
 * classification.c - accuracy and top-k accuracy. Both count correct samples and counted
 * samples (targets equal to ignore_index are not counted), so they are exact under any
 * batching and sharding.
 */
#include <stdio.h>

#include "metrics/metrics_internal.h"

typedef struct topk {
    ct_cls_config cfg;
    int64_t k; /* 1 for accuracy */
} topk;

enum { SLOT_CORRECT, SLOT_COUNT, N_SLOTS };

static ct_status open_common(ct_ctx *ctx,
                             const ct_options *opts,
                             int64_t n_classes,
                             bool is_topk,
                             void **self,
                             ct_metric_layout *layout) {
    static const char *const known_acc[] = {"ignore_index", NULL};
    static const char *const known_topk[] = {"k", "ignore_index", NULL};
    const char *metric = is_topk ? "topk" : "accuracy";
    *self = NULL;
    topk cfg = {{metric, n_classes, -100, is_topk}, 1};
    CT_TRY(ct_options_check(ctx, opts, is_topk ? known_topk : known_acc));
    CT_TRY(ct_cls_read_options(ctx, opts, &cfg.cfg));
    if (is_topk) {
        CT_TRY(ct_options_int(ctx, opts, "k", 5, 1, n_classes > 0 ? n_classes : INT32_MAX, &cfg.k));
        if (n_classes > 0 && cfg.k > n_classes) /* the default 5 with fewer classes */
            return CT_FAIL(ctx, CT_ERR_CONFIG,
                           "topk: k = %lld is more than the %lld classes (hint: set k)",
                           (long long)cfg.k, (long long)n_classes);
    }
    topk *t = ct_alloc(ctx, sizeof *t);
    if (!t) return CT_FAIL(ctx, CT_ERR_OOM, "allocating metric %s", metric);
    *t = cfg;
    *self = t;
    layout->n_accum = N_SLOTS;
    layout->n_values = 1;
    if (is_topk)
        snprintf(layout->name, sizeof layout->name, "top%lld", (long long)cfg.k);
    else
        snprintf(layout->name, sizeof layout->name, "acc");
    return CT_OK;
}

static ct_status
acc_open(ct_ctx *ctx, const ct_options *opts, int64_t n_classes, void **self, ct_metric_layout *l) {
    return open_common(ctx, opts, n_classes, false, self, l);
}

static ct_status topk_open(
    ct_ctx *ctx, const ct_options *opts, int64_t n_classes, void **self, ct_metric_layout *l) {
    return open_common(ctx, opts, n_classes, true, self, l);
}

static void single_name(const void *self, int64_t i, char *buf, size_t size) {
    (void)self, (void)i;
    if (size) buf[0] = '\0';
}

static ct_status
check(ct_ctx *ctx, const void *self, const ct_tensor *pred, const ct_tensor *target) {
    const topk *t = self;
    ct_cls_batch b;
    CT_TRY(ct_cls_check(ctx, &t->cfg, pred, target, &b));
    if (t->cfg.need_logits && t->k > b.c)
        return CT_FAIL(ctx, CT_ERR_SHAPE, "topk: k = %lld is more than the %lld classes of pred",
                       (long long)t->k, (long long)b.c);
    return CT_OK;
}

/* Whether the target is among the k best of row i: its rank when sorting by score, highest
 * first, ties broken by lower index first (so k = 1 agrees with the argmax). */
static bool
in_topk(const ct_tensor *pred, const ct_cls_batch *b, int64_t i, int64_t tgt, int64_t k) {
    const int64_t c = b->c;
    const double v = ct_metric_real_at(pred, i * c + tgt);
    int64_t rank = 0;
    for (int64_t j = 0; j < c && rank < k; j++) {
        double x = ct_metric_real_at(pred, i * c + j);
        if (x > v || (x == v && j < tgt)) rank++;
    }
    return rank < k;
}

static void
update(const void *self, double *accum, const ct_tensor *pred, const ct_tensor *target) {
    const topk *t = self;
    ct_cls_batch b;
    ct_cls_shape(&t->cfg, pred, target, &b);
    int64_t correct = 0, count = 0;
    for (int64_t i = 0; i < b.n; i++) {
        int64_t tgt = ct_metric_index_at(target, i);
        if (tgt == t->cfg.ignore_index) continue;
        count++;
        if (t->cfg.need_logits)
            correct += in_topk(pred, &b, i, tgt, t->k);
        else
            correct += ct_cls_predicted(pred, &b, i) == tgt;
    }
    /* integer counts: adding them per batch is exact, whatever the batching */
    accum[SLOT_CORRECT] += (double)correct;
    accum[SLOT_COUNT] += (double)count;
}

static void compute(const void *self, const double *accum, double *values) {
    (void)self;
    values[0] = ct_metric_ratio(accum[SLOT_CORRECT], accum[SLOT_COUNT]);
}

static void close_metric(ct_ctx *ctx, void *self) {
    ct_free(ctx, self, sizeof(topk));
}

const ct_metric_vtable ct_metric_accuracy = {
    0, "accuracy", acc_open, single_name, check, update, NULL, compute, close_metric,
};

const ct_metric_vtable ct_metric_topk = {
    0, "topk", topk_open, single_name, check, update, NULL, compute, close_metric,
};
