/*
 * prf.c - precision, recall and F1, averaged macro, micro or not at all (one value per class).
 *
 * The accumulators are three integer counts per class: tp[c], predicted[c] (= tp + fp) and
 * support[c] (= tp + fn), so the results are exact under any batching and sharding. Per class,
 * a zero denominator gives 0 (scikit-learn's zero_division=0); macro averages over the classes
 * that occur in targets or predictions, as scikit-learn does without `labels`.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "metrics/metrics_internal.h"

typedef enum kind { PRECISION, RECALL, F1 } kind;
typedef enum average { AVG_MACRO, AVG_MICRO, AVG_NONE } average;

typedef struct prf {
    ct_cls_config cfg;
    kind kind;
    average avg;
} prf;

static const char *const kind_names[] = {"precision", "recall", "f1"};

static ct_status open_kind(ct_ctx *ctx,
                           const ct_options *opts,
                           int64_t n_classes,
                           kind k,
                           void **self,
                           ct_metric_layout *layout) {
    static const char *const known[] = {"average", "ignore_index", NULL};
    static const char *const avg_names[] = {"macro", "micro", "none"};
    const char *metric = kind_names[k];
    *self = NULL;
    prf p = {{metric, n_classes, -100, false}, k, AVG_MACRO};
    CT_TRY(ct_options_check(ctx, opts, known));
    CT_TRY(ct_cls_read_options(ctx, opts, &p.cfg));
    const char *avg;
    CT_TRY(ct_options_string(ctx, opts, "average", "macro", &avg));
    int a = 0;
    while (a < 3 && strcmp(avg, avg_names[a]) != 0)
        a++;
    if (a == 3)
        return CT_FAIL(ctx, CT_ERR_CONFIG,
                       "%s: key 'average': unknown value '%s' (known: macro, "
                       "micro, none)",
                       metric, avg);
    p.avg = (average)a;
    if (n_classes < 1)
        return CT_FAIL(ctx, CT_ERR_CONFIG,
                       "%s: needs the number of classes (n_classes > 0 when creating the metrics)",
                       metric);
    prf *s = ct_alloc(ctx, sizeof *s);
    if (!s) return CT_FAIL(ctx, CT_ERR_OOM, "allocating metric %s", metric);
    *s = p;
    *self = s;
    layout->n_accum = 3 * n_classes;
    layout->n_values = p.avg == AVG_NONE ? n_classes : 1;
    if (p.avg == AVG_NONE)
        snprintf(layout->name, sizeof layout->name, "%s", metric);
    else
        snprintf(layout->name, sizeof layout->name, "%s_%s", metric, avg_names[a]);
    return CT_OK;
}

static ct_status
p_open(ct_ctx *ctx, const ct_options *opts, int64_t n_classes, void **self, ct_metric_layout *l) {
    return open_kind(ctx, opts, n_classes, PRECISION, self, l);
}

static ct_status
r_open(ct_ctx *ctx, const ct_options *opts, int64_t n_classes, void **self, ct_metric_layout *l) {
    return open_kind(ctx, opts, n_classes, RECALL, self, l);
}

static ct_status
f_open(ct_ctx *ctx, const ct_options *opts, int64_t n_classes, void **self, ct_metric_layout *l) {
    return open_kind(ctx, opts, n_classes, F1, self, l);
}

static void value_name(const void *self, int64_t i, char *buf, size_t size) {
    const prf *p = self;
    if (p->avg == AVG_NONE)
        snprintf(buf, size, "/%lld", (long long)i);
    else if (size)
        buf[0] = '\0';
}

static ct_status
check(ct_ctx *ctx, const void *self, const ct_tensor *pred, const ct_tensor *target) {
    const prf *p = self;
    ct_cls_batch b;
    return ct_cls_check(ctx, &p->cfg, pred, target, &b);
}

/* accum: tp [C], predicted [C], support [C] */
static void
update(const void *self, double *accum, const ct_tensor *pred, const ct_tensor *target) {
    const prf *p = self;
    const int64_t c = p->cfg.n_classes;
    double *tp = accum, *predicted = accum + c, *support = accum + 2 * c;
    ct_cls_batch b;
    ct_cls_shape(&p->cfg, pred, target, &b);
    for (int64_t i = 0; i < b.n; i++) {
        int64_t t = ct_metric_index_at(target, i);
        if (t == p->cfg.ignore_index) continue;
        int64_t y = ct_cls_predicted(pred, &b, i);
        tp[t] += y == t ? 1.0 : 0.0;
        predicted[y] += 1.0;
        support[t] += 1.0;
    }
}

/* The score of one class (or of the summed counts) from tp, tp + fp and tp + fn. */
static double score(kind k, double tp, double predicted, double support) {
    double den = k == PRECISION ? predicted : k == RECALL ? support : predicted + support;
    double num = k == F1 ? 2.0 * tp : tp;
    return den > 0.0 ? num / den : 0.0;
}

static void compute(const void *self, const double *accum, double *values) {
    const prf *p = self;
    const int64_t c = p->cfg.n_classes;
    const double *tp = accum, *predicted = accum + c, *support = accum + 2 * c;
    if (p->avg == AVG_NONE) {
        for (int64_t j = 0; j < c; j++)
            values[j] = score(p->kind, tp[j], predicted[j], support[j]);
    } else if (p->avg == AVG_MICRO) {
        double stp = 0.0, sp = 0.0, ss = 0.0;
        for (int64_t j = 0; j < c; j++)
            stp += tp[j], sp += predicted[j], ss += support[j];
        values[0] = sp + ss > 0.0 ? score(p->kind, stp, sp, ss) : (double)NAN;
    } else {
        double sum = 0.0, present = 0.0;
        for (int64_t j = 0; j < c; j++) {
            if (predicted[j] + support[j] == 0.0) continue; /* in neither targets nor preds */
            sum += score(p->kind, tp[j], predicted[j], support[j]);
            present += 1.0;
        }
        values[0] = ct_metric_ratio(sum, present);
    }
}

static void close_metric(ct_ctx *ctx, void *self) {
    ct_free(ctx, self, sizeof(prf));
}

const ct_metric_vtable ct_metric_precision = {
    0, "precision", p_open, value_name, check, update, NULL, compute, close_metric,
};

const ct_metric_vtable ct_metric_recall = {
    0, "recall", r_open, value_name, check, update, NULL, compute, close_metric,
};

const ct_metric_vtable ct_metric_f1 = {
    0, "f1", f_open, value_name, check, update, NULL, compute, close_metric,
};
