/*
 * confusion.c - the confusion matrix: C*C integer counts, row = true class, column =
 * predicted class, output as values named "<split>/confusion/<true>/<pred>". Exact under any
 * batching and sharding. Limited to 4096 classes (16M values); use precision/recall with
 * average=none for more.
 */
#include <stdio.h>

#include "metrics/metrics_internal.h"

#define MAX_CLASSES 4096

static ct_status open_metric(
    ct_ctx *ctx, const ct_options *opts, int64_t n_classes, void **self, ct_metric_layout *l) {
    static const char *const known[] = {"ignore_index", NULL};
    *self = NULL;
    ct_cls_config cfg = {"confusion", n_classes, -100, false};
    CT_TRY(ct_options_check(ctx, opts, known));
    CT_TRY(ct_cls_read_options(ctx, opts, &cfg));
    if (n_classes < 1 || n_classes > MAX_CLASSES)
        return CT_FAIL(ctx, CT_ERR_CONFIG,
                       "confusion: n_classes %lld is out of [1, %d] (hint: for many classes use "
                       "precision/recall/f1 with average=none)",
                       (long long)n_classes, MAX_CLASSES);
    ct_cls_config *s = ct_alloc(ctx, sizeof *s);
    if (!s) return CT_FAIL(ctx, CT_ERR_OOM, "allocating metric confusion");
    *s = cfg;
    *self = s;
    l->n_accum = n_classes * n_classes;
    l->n_values = n_classes * n_classes;
    snprintf(l->name, sizeof l->name, "confusion");
    return CT_OK;
}

static void value_name(const void *self, int64_t i, char *buf, size_t size) {
    const ct_cls_config *cfg = self;
    snprintf(buf, size, "/%lld/%lld", (long long)(i / cfg->n_classes),
             (long long)(i % cfg->n_classes));
}

static ct_status
check(ct_ctx *ctx, const void *self, const ct_tensor *pred, const ct_tensor *target) {
    ct_cls_batch b;
    return ct_cls_check(ctx, self, pred, target, &b);
}

static void
update(const void *self, double *accum, const ct_tensor *pred, const ct_tensor *target) {
    const ct_cls_config *cfg = self;
    ct_cls_batch b;
    ct_cls_shape(cfg, pred, target, &b);
    for (int64_t i = 0; i < b.n; i++) {
        int64_t t = ct_metric_index_at(target, i);
        if (t == cfg->ignore_index) continue;
        accum[t * cfg->n_classes + ct_cls_predicted(pred, &b, i)] += 1.0;
    }
}

static void compute(const void *self, const double *accum, double *values) {
    const ct_cls_config *cfg = self;
    for (int64_t i = 0; i < cfg->n_classes * cfg->n_classes; i++)
        values[i] = accum[i];
}

static void close_metric(ct_ctx *ctx, void *self) {
    ct_free(ctx, self, sizeof(ct_cls_config));
}

const ct_metric_vtable ct_metric_confusion = {
    0, "confusion", open_metric, value_name, check, update, NULL, compute, close_metric,
};
