/*
 * metrics.h - evaluation metrics built from sums and counts: accuracy, top-k accuracy,
 * precision/recall/F1 (macro, micro, per class), confusion matrix, loss averages, MSE, MAE,
 * RMSE, R² and perplexity, found by type name in a table that plugins extend.
 *
 * A metric set (ct_metrics) belongs to one split ("train", "valid") and holds the sums and
 * counts of all its metrics in one f64 buffer. Updates add to them; compute turns them into
 * named values. Nothing else is kept, so distributed evaluation is:
 *
 *     each rank: ct_metrics_update(...) over its shard
 *     ct_metrics_accumulators(m, &buf, &n); all-reduce buf (sum, f64) in place
 *     ct_metrics_compute(m);                every rank gets the same values
 *
 * Exactness. Every built-in value depends on the set of samples seen (and of loss reports),
 * not on their order, their batches or the ranks that saw them, so sharded evaluation gives
 * the bits of one process: counts are integers, and sums of real values (a layout's n_exact
 * slots) are exact sums rounded to double once, at compute. The buffer holds both as
 * integer-valued doubles below 2^33, so an f64 sum of up to 2^20 buffers, in any order, stays
 * exact. A reported loss is the caller's (the trainer reports each batch's f32 mean), the same
 * for the same batches. docs/training.md, "Metrics", has the details.
 *
 * Names are "<split>/<name>[/<part>]", where name is the spec's name or the type's default:
 *     accuracy                  valid/acc
 *     topk (k=5)                valid/top5
 *     precision|recall|f1       valid/f1_macro, valid/f1_micro (average=macro|micro)
 *                               valid/f1/0 .. valid/f1/<C-1>            (average=none)
 *     confusion                 valid/confusion/<true>/<pred>, C*C counts, row = true class
 *     loss                      valid/loss (total), valid/loss/<component> per component
 *     mse, mae, rmse, r2        valid/mse, valid/mae, valid/rmse, valid/r2
 *     perplexity                valid/perplexity
 * With spec.name = "acc1" the accuracy is "valid/acc1" (spec names may not contain '/').
 *
 * Inputs. Classification metrics take target class indices (i32, i64 or u8) of any shape S
 * and pred either as logits (f32 or bf16) of shape S + [C] or as class ids (i32, i64, u8) of
 * shape S. The predicted class of a logits row is its argmax, the lowest index among equal
 * maxima. Targets equal to ignore_index (option, default -100, as the losses) are skipped;
 * any other target outside [0, C) fails with CT_ERR_INVALID_ARG naming the sample. Regression
 * metrics take pred and target of any numeric dtype with the same shape up to size-1 dims
 * ([N,1] vs [N]); all elements are pooled as one variable.
 *
 * Empty data: a ratio with a zero count is NaN (accuracy of no samples, the loss of no
 * reports), except the per-class precision, recall and F1 of a class with a zero denominator,
 * which are 0 as scikit-learn's zero_division=0.
 *
 * Ownership: ct_metrics_create returns a set the caller frees with ct_metrics_destroy
 * (NULL is a no-op). Spec strings and options are read during create only. The buffer from
 * ct_metrics_accumulators and the names and values from ct_metrics_values are owned by the
 * set; values change at each compute, and everything goes stale at destroy. Updates never
 * allocate. A set is used by one thread at a time.
 */
#ifndef CTRAIN_METRICS_H
#define CTRAIN_METRICS_H

#include "ctrain/options.h"
#include "ctrain/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Longest full value name ("valid/precision/123"), including the NUL. */
#define CT_METRIC_NAME_MAX 128

/* What a metric type's open reports. */
typedef struct ct_metric_layout {
    int64_t n_accum;               /* f64 accumulator slots the metric owns (>= 0) */
    int64_t n_values;              /* values compute writes (>= 1) */
    char name[CT_METRIC_NAME_MAX]; /* default name ("acc", "top5", "f1_macro") */
    /* The first n_exact slots (0 <= n_exact <= min(n_accum, 4096); 0 when open leaves it) are
     * sums of real values: the set feeds the metric one sample (row of pred and target) at a
     * time and keeps these slots as exact sums (see Exactness above). Other slots that sum
     * non-integers get plain f64 sums, which depend on order, batches and ranks. */
    int64_t n_exact;
} ct_metric_layout;

/*
 * The functions behind a metric type; built-in types and plugins provide one each. A metric
 * keeps nothing per update outside its slots of the accumulator buffer, and every slot is a
 * sum (so summing buffers across ranks sums the metric's statistics). Slots start at 0.
 */
typedef struct ct_metric_vtable {
    ct_plugin_tag tag; /* CT_PLUGIN_METRIC in a plugin, 0 in the library (status.h) */
    const char *name;  /* the type name in configs */
    /*
     * Reads options (failing with CT_ERR_CONFIG on an unknown key or bad value), makes private
     * state in *self (may stay NULL) and fills *layout. n_classes is the set's class count
     * (0 when unknown). On failure *self is NULL.
     */
    ct_status (*open)(ct_ctx *ctx,
                      const ct_options *opts,
                      int64_t n_classes,
                      void **self,
                      ct_metric_layout *layout);
    /* Writes value i's part name into buf: "" for a single value, "/3", "/2/1". */
    void (*value_name)(const void *self, int64_t i, char *buf, size_t size);
    /*
     * Validates a batch (dtypes, shapes, class ranges) without side effects; the message
     * names shapes and samples. NULL: no check, so update must take any input.
     */
    ct_status (*check)(ct_ctx *ctx,
                       const void *self,
                       const ct_tensor *pred,
                       const ct_tensor *target);
    /* Adds a checked batch to accum (this metric's n_accum slots); must not allocate. NULL:
     * ignores batches. */
    void (*update)(const void *self, double *accum, const ct_tensor *pred, const ct_tensor *target);
    /* Adds a reported loss: value is a mean over count items, component NULL is the total.
     * NULL: ignores loss reports. */
    void (*update_loss)(
        const void *self, double *accum, const char *component, double value, int64_t count);
    /* Writes n_values values from accum (this metric's slots, possibly summed over ranks). */
    void (*compute)(const void *self, const double *accum, double *values);
    /* Frees the state open made. NULL: nothing to free. */
    void (*close)(ct_ctx *ctx, void *self);
} ct_metric_vtable;

/* The built-in metric types: a NULL-terminated table of *count; and the one of a name (NULL for
 * a name that is not one, or NULL). */
CT_API const ct_metric_vtable *const *ct_metric_types(int64_t *count);
CT_API const ct_metric_vtable *ct_metric_type_find(const char *name);

/* One metric of a set. */
typedef struct ct_metric_spec {
    const char *type;           /* a built-in type name; ignored when vt is set */
    const ct_metric_vtable *vt; /* a plugin's vtable, or NULL to look type up */
    const char *name;           /* the value name, or NULL for the type's default; no '/' */
    ct_options opts;            /* type options (all: see each type below) */
} ct_metric_spec;

/*
 * Built-in types and their options:
 *   accuracy    ignore_index (-100)
 *   topk        k (5, 1..C; logits only), ignore_index
 *   precision, recall, f1
 *               average (macro | micro | none), ignore_index; needs n_classes > 0.
 *               Per class c: precision = tp/(tp+fp), recall = tp/(tp+fn),
 *               f1 = 2tp/(2tp+fp+fn), 0 when the denominator is 0 (zero_division=0).
 *               macro: the mean over classes that occur in targets or predictions (as
 *               scikit-learn without `labels`); micro: from the summed counts, which for one
 *               label per sample equals accuracy.
 *   confusion   ignore_index; needs 0 < n_classes <= 4096; counts[true][pred]
 *   loss        components (comma-separated names, default none): the sample-weighted mean
 *               of the reported total (component NULL) and of each listed component; reports
 *               of unlisted components are ignored
 *   mse, mae, rmse
 *               (none) mean (p-t)², mean |p-t|, sqrt(mse)
 *   r2          (none) 1 - SS_res/SS_tot with SS_tot = sum y² - (sum y)²/n; when SS_tot is 0
 *               (within rounding: <= 4 n 2^-53 sum y²) it is 1 if SS_res is 0, else 0
 *               (scikit-learn's force_finite)
 *   perplexity  source (logits | loss), component (for source=loss; default the total),
 *               ignore_index: exp(mean token NLL in nats). source=logits computes the NLL of
 *               each target from logits [.., V] with log-softmax in double; source=loss
 *               averages the cross-entropy values reported with ct_metrics_update_loss.
 *   exact_match, char_accuracy, edit_distance
 *               text: pred and target are the bytes of one output and its reference (u8
 *               [len] each, len may be 0), one update per example. exact_match: the share of
 *               equal texts; char_accuracy: positions holding the same byte over the positions
 *               of the longer text, both summed over the examples; edit_distance (option
 *               max_length, 4096: the longest shorter text it takes): the mean Levenshtein
 *               distance in bytes. Integer counts, exact under any sharding.
 */

typedef struct ct_metrics ct_metrics;

typedef struct ct_metric_value {
    const char *name; /* "valid/acc" */
    double value;
} ct_metric_value;

/*
 * Creates a set for `split` (non-empty, no '/') from n_specs specs. n_classes (0 when
 * unknown) is passed to every type's open. An unknown type fails with CT_ERR_CONFIG listing
 * the known ones; two metrics with the same name fail with CT_ERR_CONFIG. *out is NULL on
 * failure.
 */
CT_API ct_status ct_metrics_create(ct_ctx *ctx,
                                   const char *split,
                                   int64_t n_classes,
                                   const ct_metric_spec *specs,
                                   int64_t n_specs,
                                   ct_metrics **out);
CT_API void ct_metrics_destroy(ct_metrics *m);

/*
 * Adds a batch to every metric that takes batches. All metrics check the batch before any
 * counts it, so a failure (CT_ERR_SHAPE for dtypes and shapes, CT_ERR_INVALID_ARG for a class
 * out of range; the message names the metric) leaves the accumulators unchanged.
 */
CT_API ct_status ct_metrics_update(ct_metrics *m, const ct_tensor *pred, const ct_tensor *target);
/*
 * Reports a loss: value is the mean over count items (samples or tokens) of the total loss
 * (component NULL) or of a named component. Metrics add value*count and count, so the result
 * is the item-weighted mean. count < 0 fails with CT_ERR_INVALID_ARG.
 */
CT_API ct_status ct_metrics_update_loss(ct_metrics *m,
                                        const char *component,
                                        double value,
                                        int64_t count);
/* Zeroes the accumulators (start of an evaluation or of a logging window). */
CT_API void ct_metrics_reset(ct_metrics *m);
/* The flat accumulator buffer (owned by the set; all-reduce it with a sum in place). Its
 * length and layout are the same for every set created with the same specs and n_classes. */
CT_API void ct_metrics_accumulators(ct_metrics *m, double **buf, int64_t *n);
/* Computes every value from the accumulators. */
CT_API void ct_metrics_compute(ct_metrics *m);
/* The values of the last compute (NaN before the first), in spec order then part order. */
CT_API const ct_metric_value *ct_metrics_values(const ct_metrics *m, int64_t *n);
/* The value named `name` from the last compute; an unknown name fails with
 * CT_ERR_INVALID_ARG. */
CT_API ct_status ct_metrics_get(const ct_metrics *m, const char *name, double *value);

#ifdef __cplusplus
}
#endif

#endif /* CTRAIN_METRICS_H */
