/*
 * regression.c - MSE, MAE, RMSE and R² over all elements of pred and target (pooled as one
 * variable).
 *
 * Each type keeps the same five sums: count, Σe², Σ|e|, Σy, Σy² with e = pred - target, each
 * term computed in double and all five kept exactly by the set (n_exact), so batches and
 * ranks do not change them (metrics.h). R² uses SS_tot = Σy² - (Σy)²/n; when SS_tot is within the
 * rounding of that difference (<= 4 n 2^-53 Σy²) the targets count as constant and R² is 1 if
 * SS_res is 0, else 0, as scikit-learn's force_finite.
 */
#include <float.h>
#include <math.h>
#include <stdio.h>

#include "metrics/metrics_internal.h"

typedef enum kind { MSE, MAE, RMSE, R2 } kind;
enum { SLOT_COUNT, SLOT_SSE, SLOT_SAE, SLOT_SY, SLOT_SY2, N_SLOTS };

typedef struct reg {
    kind kind;
} reg;

static const char *const kind_names[] = {"mse", "mae", "rmse", "r2"};

static ct_status
open_kind(ct_ctx *ctx, const ct_options *opts, kind k, void **self, ct_metric_layout *layout) {
    static const char *const known[] = {NULL};
    *self = NULL;
    CT_TRY(ct_options_check(ctx, opts, known));
    reg *r = ct_alloc(ctx, sizeof *r);
    if (!r) return CT_FAIL(ctx, CT_ERR_OOM, "allocating metric %s", kind_names[k]);
    r->kind = k;
    *self = r;
    layout->n_accum = N_SLOTS;
    layout->n_exact = N_SLOTS;
    layout->n_values = 1;
    snprintf(layout->name, sizeof layout->name, "%s", kind_names[k]);
    return CT_OK;
}

static ct_status
mse_open(ct_ctx *ctx, const ct_options *opts, int64_t n_classes, void **self, ct_metric_layout *l) {
    (void)n_classes;
    return open_kind(ctx, opts, MSE, self, l);
}

static ct_status
mae_open(ct_ctx *ctx, const ct_options *opts, int64_t n_classes, void **self, ct_metric_layout *l) {
    (void)n_classes;
    return open_kind(ctx, opts, MAE, self, l);
}

static ct_status rmse_open(
    ct_ctx *ctx, const ct_options *opts, int64_t n_classes, void **self, ct_metric_layout *l) {
    (void)n_classes;
    return open_kind(ctx, opts, RMSE, self, l);
}

static ct_status
r2_open(ct_ctx *ctx, const ct_options *opts, int64_t n_classes, void **self, ct_metric_layout *l) {
    (void)n_classes;
    return open_kind(ctx, opts, R2, self, l);
}

static void value_name(const void *self, int64_t i, char *buf, size_t size) {
    (void)self, (void)i;
    if (size) buf[0] = '\0';
}

static ct_status
check(ct_ctx *ctx, const void *self, const ct_tensor *pred, const ct_tensor *target) {
    const reg *r = self;
    return ct_reg_check(ctx, kind_names[r->kind], pred, target);
}

static void
update(const void *self, double *accum, const ct_tensor *pred, const ct_tensor *target) {
    (void)self;
    const int64_t n = ct_tensor_numel(target);
    for (int64_t i = 0; i < n; i++) {
        double y = ct_metric_real_at(target, i);
        double e = ct_metric_real_at(pred, i) - y;
        accum[SLOT_COUNT] += 1.0;
        accum[SLOT_SSE] += e * e;
        accum[SLOT_SAE] += fabs(e);
        accum[SLOT_SY] += y;
        accum[SLOT_SY2] += y * y;
    }
}

static double r2(const double *a) {
    const double n = a[SLOT_COUNT];
    if (n == 0.0) return (double)NAN;
    double ss_tot = a[SLOT_SY2] - a[SLOT_SY] * a[SLOT_SY] / n;
    if (ss_tot <= 4.0 * n * (DBL_EPSILON / 2) * a[SLOT_SY2]) return a[SLOT_SSE] == 0.0 ? 1.0 : 0.0;
    return 1.0 - a[SLOT_SSE] / ss_tot;
}

static void compute(const void *self, const double *accum, double *values) {
    const reg *r = self;
    switch (r->kind) {
    case MSE:
        values[0] = ct_metric_ratio(accum[SLOT_SSE], accum[SLOT_COUNT]);
        break;
    case MAE:
        values[0] = ct_metric_ratio(accum[SLOT_SAE], accum[SLOT_COUNT]);
        break;
    case RMSE:
        values[0] = sqrt(ct_metric_ratio(accum[SLOT_SSE], accum[SLOT_COUNT]));
        break;
    case R2:
        values[0] = r2(accum);
        break;
    }
}

static void close_metric(ct_ctx *ctx, void *self) {
    ct_free(ctx, self, sizeof(reg));
}

const ct_metric_vtable ct_metric_mse = {
    0, "mse", mse_open, value_name, check, update, NULL, compute, close_metric,
};

const ct_metric_vtable ct_metric_mae = {
    0, "mae", mae_open, value_name, check, update, NULL, compute, close_metric,
};

const ct_metric_vtable ct_metric_rmse = {
    0, "rmse", rmse_open, value_name, check, update, NULL, compute, close_metric,
};

const ct_metric_vtable ct_metric_r2 = {
    0, "r2", r2_open, value_name, check, update, NULL, compute, close_metric,
};
