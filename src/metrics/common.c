/*
 * common.c - what the metric types share: element readers for any dtype, and the checks of
 * classification and regression batches. Checks run before any accumulator changes, so a
 * rejected batch counts nowhere.
 */
#include <math.h>
#include <string.h>

#include "metrics/metrics_internal.h"

double ct_metric_real_at(const ct_tensor *t, int64_t i) {
    switch (t->dtype) {
    case CT_F32:
        return (double)((const float *)t->data)[i];
    case CT_BF16:
        return (double)ct_f32_from_bf16(((const ct_bf16 *)t->data)[i]);
    case CT_I32:
        return (double)((const int32_t *)t->data)[i];
    case CT_I64:
        return (double)((const int64_t *)t->data)[i];
    case CT_U8:
        return (double)((const uint8_t *)t->data)[i];
    case CT_DTYPE_COUNT:
        break;
    }
    return (double)NAN;
}

int64_t ct_metric_index_at(const ct_tensor *t, int64_t i) {
    switch (t->dtype) {
    case CT_I32:
        return ((const int32_t *)t->data)[i];
    case CT_I64:
        return ((const int64_t *)t->data)[i];
    case CT_U8:
        return ((const uint8_t *)t->data)[i];
    case CT_F32:
    case CT_BF16:
    case CT_DTYPE_COUNT:
        break;
    }
    return -1;
}

double ct_metric_ratio(double a, double b) {
    return b != 0.0 ? a / b : (double)NAN;
}

static bool is_index(ct_dtype dt) {
    return dt == CT_I32 || dt == CT_I64 || dt == CT_U8;
}

static bool is_float(ct_dtype dt) {
    return dt == CT_F32 || dt == CT_BF16;
}

static bool is_numeric(ct_dtype dt) {
    return is_index(dt) || is_float(dt);
}

ct_status ct_cls_read_options(ct_ctx *ctx, const ct_options *opts, ct_cls_config *cfg) {
    return ct_options_int(ctx, opts, "ignore_index", -100, INT64_MIN, INT64_MAX,
                          &cfg->ignore_index);
}

ct_status ct_cls_check(ct_ctx *ctx,
                       const ct_cls_config *cfg,
                       const ct_tensor *pred,
                       const ct_tensor *target,
                       ct_cls_batch *b) {
    char ps[96], ts[96];
    const char *m = cfg->metric;
    ct_shape_str(pred, ps, sizeof ps);
    ct_shape_str(target, ts, sizeof ts);
    if (!is_index(target->dtype))
        return CT_FAIL(ctx, CT_ERR_SHAPE,
                       "%s: target must be class indices (i32, i64 or u8), got %s %s", m,
                       ct_dtype_name(target->dtype), ts);
    b->n = ct_tensor_numel(target);
    b->logits = is_float(pred->dtype);
    if (b->logits) {
        bool lead = pred->ndim == target->ndim + 1;
        for (int32_t d = 0; lead && d < target->ndim; d++)
            lead = pred->shape[d] == target->shape[d];
        if (!lead || pred->shape[pred->ndim - 1] < 1)
            return CT_FAIL(ctx, CT_ERR_SHAPE,
                           "%s: pred logits %s do not fit target %s: expected target's shape "
                           "plus a class dim [.., C], C >= 1",
                           m, ps, ts);
        b->c = pred->shape[pred->ndim - 1];
        if (cfg->n_classes > 0 && b->c != cfg->n_classes)
            return CT_FAIL(ctx, CT_ERR_SHAPE, "%s: pred logits %s have %lld classes, expected %lld",
                           m, ps, (long long)b->c, (long long)cfg->n_classes);
    } else if (is_index(pred->dtype)) {
        if (cfg->need_logits)
            return CT_FAIL(ctx, CT_ERR_SHAPE,
                           "%s: needs logits [.., C] (f32 or bf16), got class ids %s %s", m,
                           ct_dtype_name(pred->dtype), ps);
        if (!ct_tensor_same_shape(pred, target))
            return CT_FAIL(ctx, CT_ERR_SHAPE,
                           "%s: pred class ids %s do not match target %s: expected the same "
                           "shape (or logits %s + [C])",
                           m, ps, ts, ts);
        b->c = cfg->n_classes; /* 0: no upper bound to check */
    } else {
        return CT_FAIL(ctx, CT_ERR_SHAPE, "%s: pred must be logits (f32, bf16) or ids, got %s %s",
                       m, ct_dtype_name(pred->dtype), ps);
    }
    for (int64_t i = 0; i < b->n; i++) {
        int64_t t = ct_metric_index_at(target, i);
        if (t == cfg->ignore_index) continue;
        if (t < 0 || (b->c > 0 && t >= b->c))
            return CT_FAIL(ctx, CT_ERR_INVALID_ARG,
                           "%s: target %lld at sample %lld is out of range [0, %lld) and is not "
                           "ignore_index (%lld)",
                           m, (long long)t, (long long)i, (long long)b->c,
                           (long long)cfg->ignore_index);
        if (b->logits) continue;
        int64_t p = ct_metric_index_at(pred, i);
        if (p < 0 || (b->c > 0 && p >= b->c))
            return CT_FAIL(ctx, CT_ERR_INVALID_ARG,
                           "%s: predicted class %lld at sample %lld is out of range [0, %lld)", m,
                           (long long)p, (long long)i, (long long)b->c);
    }
    return CT_OK;
}

void ct_cls_shape(const ct_cls_config *cfg,
                  const ct_tensor *pred,
                  const ct_tensor *target,
                  ct_cls_batch *b) {
    b->n = ct_tensor_numel(target);
    b->logits = is_float(pred->dtype);
    b->c = b->logits ? pred->shape[pred->ndim - 1] : cfg->n_classes;
}

int64_t ct_cls_predicted(const ct_tensor *pred, const ct_cls_batch *b, int64_t i) {
    if (!b->logits) return ct_metric_index_at(pred, i);
    const int64_t c = b->c;
    int64_t best = 0;
    if (pred->dtype == CT_F32) {
        const float *row = (const float *)pred->data + i * c;
        float v = row[0];
        for (int64_t j = 1; j < c; j++)
            if (row[j] > v || (isnan(v) && !isnan(row[j]))) v = row[j], best = j;
        return best;
    }
    double v = ct_metric_real_at(pred, i * c);
    for (int64_t j = 1; j < c; j++) {
        double x = ct_metric_real_at(pred, i * c + j);
        if (x > v || (isnan(v) && !isnan(x))) v = x, best = j;
    }
    return best;
}

/* The shape without its size-1 dims, for comparing [N,1] with [N]. */
static int32_t squeeze(const ct_tensor *t, int64_t *dims) {
    int32_t n = 0;
    for (int32_t d = 0; d < t->ndim; d++)
        if (t->shape[d] != 1) dims[n++] = t->shape[d];
    return n;
}

ct_status
ct_reg_check(ct_ctx *ctx, const char *metric, const ct_tensor *pred, const ct_tensor *target) {
    char ps[96], ts[96];
    ct_shape_str(pred, ps, sizeof ps);
    ct_shape_str(target, ts, sizeof ts);
    if (!is_numeric(pred->dtype) || !is_numeric(target->dtype))
        return CT_FAIL(ctx, CT_ERR_SHAPE, "%s: pred %s %s and target %s %s must be numeric", metric,
                       ct_dtype_name(pred->dtype), ps, ct_dtype_name(target->dtype), ts);
    int64_t pd[CT_MAX_DIMS], td[CT_MAX_DIMS];
    int32_t pn = squeeze(pred, pd), tn = squeeze(target, td);
    if (pn != tn || memcmp(pd, td, (size_t)pn * sizeof *pd) != 0)
        return CT_FAIL(ctx, CT_ERR_SHAPE,
                       "%s: pred %s and target %s differ: expected the same shape (size-1 dims "
                       "aside)",
                       metric, ps, ts);
    return CT_OK;
}
