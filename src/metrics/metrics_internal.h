/*
 * metrics_internal.h - what the metric implementations share: the built-in vtables (one
 * group per file in src/metrics/), element readers, and the checks of classification and
 * regression inputs. Internal.
 */
#ifndef CT_METRICS_INTERNAL_H
#define CT_METRICS_INTERNAL_H

#include "core/core_internal.h"
#include "ctrain/metrics.h"

/* Built-in metric types (registry.c lists them). */
extern const ct_metric_vtable ct_metric_accuracy;      /* classification.c */
extern const ct_metric_vtable ct_metric_topk;          /* classification.c */
extern const ct_metric_vtable ct_metric_precision;     /* prf.c */
extern const ct_metric_vtable ct_metric_recall;        /* prf.c */
extern const ct_metric_vtable ct_metric_f1;            /* prf.c */
extern const ct_metric_vtable ct_metric_confusion;     /* confusion.c */
extern const ct_metric_vtable ct_metric_loss;          /* loss.c */
extern const ct_metric_vtable ct_metric_perplexity;    /* loss.c */
extern const ct_metric_vtable ct_metric_mse;           /* regression.c */
extern const ct_metric_vtable ct_metric_mae;           /* regression.c */
extern const ct_metric_vtable ct_metric_rmse;          /* regression.c */
extern const ct_metric_vtable ct_metric_r2;            /* regression.c */
extern const ct_metric_vtable ct_metric_exact_match;   /* text.c */
extern const ct_metric_vtable ct_metric_char_accuracy; /* text.c */
extern const ct_metric_vtable ct_metric_edit_distance; /* text.c */

/* Element i of any numeric tensor as double / as an index (integer dtypes). */
CT_INTERNAL double ct_metric_real_at(const ct_tensor *t, int64_t i);
CT_INTERNAL int64_t ct_metric_index_at(const ct_tensor *t, int64_t i);

/* a / b, NaN when b is 0 (no data). */
CT_INTERNAL double ct_metric_ratio(double a, double b);

/* The settings every classification metric shares. */
typedef struct ct_cls_config {
    const char *metric;   /* type name, for messages */
    int64_t n_classes;    /* 0: taken from the logits */
    int64_t ignore_index; /* targets equal to it are skipped */
    bool need_logits;     /* topk and perplexity need scores, not ids */
} ct_cls_config;

/* A checked classification batch: n samples, c classes, logits or ids. */
typedef struct ct_cls_batch {
    int64_t n, c;
    bool logits;
} ct_cls_batch;

/* Reads ignore_index (default -100) into cfg. */
CT_INTERNAL ct_status ct_cls_read_options(ct_ctx *ctx, const ct_options *opts, ct_cls_config *cfg);
/*
 * Checks pred (logits S+[C] f32/bf16, or ids S integer) against target S (integer), the class
 * count, and every target and predicted id in [0, C) unless the target is ignored. Fills *b.
 */
CT_INTERNAL ct_status ct_cls_check(ct_ctx *ctx,
                                   const ct_cls_config *cfg,
                                   const ct_tensor *pred,
                                   const ct_tensor *target,
                                   ct_cls_batch *b);
/* Fills *b for a batch that passed ct_cls_check (update has no context to fail with). */
CT_INTERNAL void ct_cls_shape(const ct_cls_config *cfg,
                              const ct_tensor *pred,
                              const ct_tensor *target,
                              ct_cls_batch *b);
/* The predicted class of sample i: the id, or the argmax of the logits row (lowest index on
 * ties; NaN never wins unless the whole row is NaN, then 0). */
CT_INTERNAL int64_t ct_cls_predicted(const ct_tensor *pred, const ct_cls_batch *b, int64_t i);

/* Checks regression pred and target: numeric dtypes, same shape up to size-1 dims. */
CT_INTERNAL ct_status ct_reg_check(ct_ctx *ctx,
                                   const char *metric,
                                   const ct_tensor *pred,
                                   const ct_tensor *target);

#endif /* CT_METRICS_INTERNAL_H */
