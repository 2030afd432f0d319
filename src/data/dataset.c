/*
 * dataset.c - opening datasets by type name, random access, validation splits, and the typed
 * option readers every dataset type uses.
 *
 * A split is itself a dataset whose samples are an index map into its parent; it borrows the
 * parent, which must outlive it.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/data_internal.h"
#include "kernels/vmath.h"

/* ---- the non-finite policy of the float readers ---- */

ct_status ct_data_nonfinite_option(ct_ctx *ctx, const ct_options *opts, bool *allow) {
    const char *v;
    CT_TRY(ct_options_string(ctx, opts, "nonfinite", "error", &v));
    if (strcmp(v, "error") != 0 && strcmp(v, "allow") != 0)
        return CT_FAIL(ctx, CT_ERR_CONFIG, "%s: key 'nonfinite': expected error or allow, got '%s'",
                       ct_options_where(opts, "data"), v);
    *allow = strcmp(v, "allow") == 0;
    return CT_OK;
}

int64_t ct_data_find_nonfinite(const float *x, int64_t n) {
    /* chunks keep the position cheap to find when there is one: only its chunk is searched */
    enum { CHUNK = 1 << 16 };
    for (int64_t at = 0; at < n; at += CHUNK) {
        int64_t len = n - at < CHUNK ? n - at : CHUNK;
        if (!ct_vnonfinite(x + at, len)) continue;
        for (int64_t i = at; i < at + len; i++)
            if (!isfinite(x[i])) return i;
    }
    return -1;
}

/* ---- datasets ---- */

size_t ct_data_sample_bytes(ct_dtype dtype, int32_t ndim, const int64_t *shape) {
    size_t n = ct_dtype_size(dtype);
    for (int32_t d = 0; d < ndim; d++)
        n *= (size_t)shape[d];
    return n;
}

static ct_status check_vtable(ct_ctx *ctx, const ct_dataset_vtable *vt) {
    if (!vt || !vt->name || !vt->open || !vt->get || !vt->close)
        return CT_FAIL(ctx, CT_ERR_INVALID_ARG,
                       "dataset type: name, open, get and close are all required");
    return CT_OK;
}

ct_status ct_dataset_open_with(ct_ctx *ctx,
                               const ct_dataset_vtable *vt,
                               const ct_options *opts,
                               ct_dataset **out) {
    *out = NULL;
    CT_TRY(check_vtable(ctx, vt));
    ct_dataset *ds = ct_alloc(ctx, sizeof *ds);
    if (!ds) return CT_FAIL(ctx, CT_ERR_OOM, "allocating a dataset");
    memset(ds, 0, sizeof *ds);
    ds->ctx = ctx;
    ds->vt = vt;
    ct_status s = vt->open(ctx, opts, &ds->info, &ds->self);
    if (s != CT_OK) {
        ct_free(ctx, ds, sizeof *ds);
        /* name the config location once, first: option errors already start with it */
        if (opts && opts->where && strstr(ct_last_error(ctx), opts->where)) return s;
        return ct_err_wrap(ctx, "%s: opening a '%s' dataset", ct_options_where(opts, "data"),
                           vt->name);
    }
    const ct_dataset_info *in = &ds->info;
    if (ct_shape_check(ctx, in->x_dtype, in->x_ndim, in->x_shape, NULL) != CT_OK ||
        ct_shape_check(ctx, in->y_dtype, in->y_ndim, in->y_shape, NULL) != CT_OK || in->n < 0) {
        if (in->n < 0) CT_FAIL(ctx, CT_ERR_INTERNAL, "%lld samples", (long long)in->n);
        vt->close(ctx, ds->self);
        ct_free(ctx, ds, sizeof *ds);
        return ct_err_wrap(ctx, "%s: dataset type '%s' reported an invalid sample shape",
                           ct_options_where(opts, "data"), vt->name);
    }
    ds->x_bytes = ct_data_sample_bytes(in->x_dtype, in->x_ndim, in->x_shape);
    ds->y_bytes = ct_data_sample_bytes(in->y_dtype, in->y_ndim, in->y_shape);
    *out = ds;
    return CT_OK;
}

/* The built-in type named `type`, or CT_ERR_CONFIG listing the known ones. */
static ct_status
find_type(ct_ctx *ctx, const char *type, const ct_options *opts, const ct_dataset_vtable **out) {
    const ct_dataset_vtable *vt = ct_dataset_type_find(type);
    *out = vt;
    if (!vt) {
        int64_t n;
        const ct_dataset_vtable *const *t = ct_dataset_types(&n);
        ct_unknown u;
        ct_unknown_init(&u, type);
        for (int64_t i = 0; i < n; i++)
            ct_unknown_add(&u, t[i]->name);
        return CT_FAIL_UNKNOWN(ctx, &u, ct_options_where(opts, "data"), "dataset type");
    }
    return CT_OK;
}

ct_status ct_dataset_open(ct_ctx *ctx, const char *type, const ct_options *opts, ct_dataset **out) {
    *out = NULL;
    const ct_dataset_vtable *vt;
    CT_TRY(find_type(ctx, type, opts, &vt));
    return ct_dataset_open_with(ctx, vt, opts, out);
}

ct_status ct_dataset_check_with(ct_ctx *ctx, const ct_dataset_vtable *vt, const ct_options *opts) {
    CT_TRY(check_vtable(ctx, vt)); /* what opening would find wrong with it, now */
    if (!vt->check) return CT_OK;  /* its open checks the options */
    ct_status s = vt->check(ctx, opts);
    if (s == CT_OK || (opts && opts->where && strstr(ct_last_error(ctx), opts->where))) return s;
    return ct_err_wrap(ctx, "%s: checking the options of a '%s' dataset",
                       ct_options_where(opts, "data"), vt->name);
}

ct_status ct_dataset_check(ct_ctx *ctx, const char *type, const ct_options *opts) {
    const ct_dataset_vtable *vt;
    CT_TRY(find_type(ctx, type, opts, &vt));
    return ct_dataset_check_with(ctx, vt, opts);
}

void ct_dataset_close(ct_dataset *ds) {
    if (!ds) return;
    ct_ctx *ctx = ds->ctx;
    ds->vt->close(ctx, ds->self);
    ct_free(ctx, ds, sizeof *ds);
}

const ct_dataset_info *ct_dataset_info_of(const ct_dataset *ds) {
    return &ds->info;
}

ct_status ct_dataset_get(const ct_dataset *ds, int64_t i, void *x, void *y) {
    if (i < 0 || i >= ds->info.n)
        return CT_FAIL(ds->ctx, CT_ERR_INVALID_ARG, "dataset '%s': sample %lld out of [0, %lld)",
                       ds->vt->name, (long long)i, (long long)ds->info.n);
    return ds->vt->get(ds->self, i, x, y);
}

int64_t ct_dataset_n_examples(const ct_dataset *ds) {
    const ct_dataset_examples *ex = ct_dataset_examples_of(ds->vt);
    return ex ? ex->count(ds->self) : -1;
}

ct_status ct_dataset_example(const ct_dataset *ds, int64_t i, ct_text_example *out) {
    int64_t n = ct_dataset_n_examples(ds);
    if (n < 0)
        return CT_FAIL(ds->ctx, CT_ERR_INVALID_ARG, "dataset '%s' gives no text examples",
                       ds->vt->name);
    if (i < 0 || i >= n)
        return CT_FAIL(ds->ctx, CT_ERR_INVALID_ARG, "dataset '%s': example %lld out of [0, %lld)",
                       ds->vt->name, (long long)i, (long long)n);
    return ct_dataset_examples_of(ds->vt)->get(ds->self, i, out);
}

/* ---- splits: an index map over a parent ---- */

typedef struct subset {
    const ct_dataset *parent;
    int64_t *index;
    int64_t n;
} subset;

static ct_status
subset_open(ct_ctx *ctx, const ct_options *opts, ct_dataset_info *info, void **self) {
    (void)opts, (void)info, (void)self;
    return CT_FAIL(ctx, CT_ERR_CONFIG, "a split is made with ct_dataset_split, not opened");
}

static ct_status subset_get(const void *self, int64_t i, void *x, void *y) {
    const subset *s = self;
    return ct_dataset_get(s->parent, s->index[i], x, y);
}

static void subset_close(ct_ctx *ctx, void *self) {
    subset *s = self;
    if (!s) return;
    ct_free(ctx, s->index, (size_t)(s->n ? s->n : 1) * sizeof(int64_t));
    ct_free(ctx, s, sizeof *s);
}

static const ct_dataset_vtable subset_vt = {0,    "split", subset_open, subset_get, subset_close,
                                            NULL, NULL,    NULL};

static ct_status
make_subset(ct_dataset *parent, const int64_t *index, int64_t n, ct_dataset **out) {
    ct_ctx *ctx = parent->ctx;
    ct_dataset *ds = ct_alloc(ctx, sizeof *ds);
    subset *s = ct_alloc(ctx, sizeof *s);
    int64_t *idx = ct_alloc(ctx, (size_t)(n ? n : 1) * sizeof(int64_t));
    if (!ds || !s || !idx) {
        ct_free(ctx, ds, sizeof *ds);
        ct_free(ctx, s, sizeof *s);
        ct_free(ctx, idx, (size_t)(n ? n : 1) * sizeof(int64_t));
        return CT_FAIL(ctx, CT_ERR_OOM, "allocating a split of %lld samples", (long long)n);
    }
    memcpy(idx, index, (size_t)n * sizeof(int64_t));
    s->parent = parent;
    s->index = idx;
    s->n = n;
    *ds = *parent;
    ds->vt = &subset_vt;
    ds->self = s;
    ds->info.n = n;
    *out = ds;
    return CT_OK;
}

ct_status ct_dataset_split(
    ct_dataset *parent, double fraction, uint64_t seed, ct_dataset **train, ct_dataset **valid) {
    ct_ctx *ctx = parent->ctx;
    *train = *valid = NULL;
    if (!(fraction > 0.0 && fraction < 1.0))
        return CT_FAIL(ctx, CT_ERR_CONFIG, "split: fraction must be in (0, 1), got %g", fraction);
    int64_t n = parent->info.n;
    int64_t n_valid = (int64_t)llround(fraction * (double)n);
    size_t bytes = (size_t)(n ? n : 1) * sizeof(int64_t);
    int64_t *perm = ct_alloc(ctx, bytes);
    if (!perm) return CT_FAIL(ctx, CT_ERR_OOM, "split: allocating %lld indices", (long long)n);
    /* Fisher-Yates on a stream of its own: the split depends on (n, fraction, seed) only */
    for (int64_t i = 0; i < n; i++)
        perm[i] = i;
    ct_rng r = ct_rng_init(seed, 0x73706C6974ull /* "split" */);
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)ct_rng_below(&r, (uint64_t)i + 1);
        int64_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    /* The first n_valid of the permutation go to validation. Each part then lists its samples
     * in dataset order (reading a part streams through the parent): mark, then collect. */
    unsigned char *is_valid = ct_alloc(ctx, (size_t)(n ? n : 1));
    int64_t *sorted = ct_alloc(ctx, bytes);
    if (!is_valid || !sorted) {
        ct_free(ctx, perm, bytes);
        ct_free(ctx, is_valid, (size_t)(n ? n : 1));
        ct_free(ctx, sorted, bytes);
        return CT_FAIL(ctx, CT_ERR_OOM, "split: allocating %lld indices", (long long)n);
    }
    memset(is_valid, 0, (size_t)n);
    for (int64_t i = 0; i < n_valid; i++)
        is_valid[perm[i]] = 1;
    int64_t nt = 0, nv = 0;
    for (int64_t i = 0; i < n; i++) {
        if (is_valid[i])
            perm[nv++] = i; /* validation indices, ascending */
        else
            sorted[nt++] = i; /* training indices, ascending */
    }
    ct_free(ctx, is_valid, (size_t)(n ? n : 1));
    ct_status s = make_subset(parent, sorted, n - n_valid, train);
    if (s == CT_OK) s = make_subset(parent, perm, n_valid, valid);
    if (s != CT_OK) {
        ct_dataset_close(*train);
        *train = NULL;
    }
    ct_free(ctx, perm, bytes);
    ct_free(ctx, sorted, bytes);
    return s;
}

/* ---- standardised views ---- */

typedef struct standard {
    const ct_dataset *parent;
    int64_t numel;
    float *mean, *std; /* [numel] each; std already has 0 replaced by 1 */
} standard;

static ct_status
standard_open(ct_ctx *ctx, const ct_options *opts, ct_dataset_info *info, void **self) {
    (void)opts, (void)info, (void)self;
    return CT_FAIL(ctx, CT_ERR_CONFIG, "a standardised view is made with ct_dataset_standardize");
}

static ct_status standard_get(const void *self, int64_t i, void *x, void *y) {
    const standard *s = self;
    CT_TRY(s->parent->vt->get(s->parent->self, i, x, y));
    float *f = x;
    for (int64_t k = 0; k < s->numel; k++)
        f[k] = (f[k] - s->mean[k]) / s->std[k];
    return CT_OK;
}

static void standard_close(ct_ctx *ctx, void *self) {
    standard *s = self;
    if (!s) return;
    ct_free(ctx, s->mean, (size_t)(s->numel ? s->numel : 1) * 2 * sizeof(float));
    ct_free(ctx, s, sizeof *s);
}

static const ct_dataset_vtable standard_vt = {
    0, "standardize", standard_open, standard_get, standard_close, NULL, NULL, NULL};

/* The data's features can be standardised, with statistics from stats_from or given. */
static ct_status check_standardize(const ct_dataset *ds,
                                   const ct_dataset *stats_from,
                                   const float *mean,
                                   const float *std) {
    ct_ctx *ctx = ds->ctx;
    if (ds->info.x_dtype != CT_F32)
        return CT_FAIL(ctx, CT_ERR_CONFIG,
                       "standardize: features must be f32, the '%s' data has %s", ds->vt->name,
                       ct_dtype_name(ds->info.x_dtype));
    if (stats_from && (stats_from->info.x_dtype != CT_F32 || stats_from->x_bytes != ds->x_bytes))
        return CT_FAIL(ctx, CT_ERR_CONFIG,
                       "standardize: the statistics' source has other features than the data");
    if (!stats_from && (!mean || !std))
        return CT_FAIL(ctx, CT_ERR_INVALID_ARG, "standardize: give stats_from or mean and std");
    if (stats_from && stats_from->info.n < 1)
        return CT_FAIL(ctx, CT_ERR_CONFIG, "standardize: the statistics' source is empty");
    return CT_OK;
}

/* st's mean and std [numel] from the samples of `from`, in two passes in sample order: the
 * mean, then the population variance around it (a std of 0 becomes 1). acc [2 numel], xs and
 * ys (one sample) are scratch. */
static ct_status stats_of(const ct_dataset *from, double *acc, float *xs, void *ys, standard *st) {
    int64_t n = from->info.n, numel = st->numel;
    ct_status s = CT_OK;
    memset(acc, 0, (size_t)numel * 2 * sizeof(double));
    for (int pass = 0; pass < 2 && s == CT_OK; pass++) {
        for (int64_t i = 0; i < n && s == CT_OK; i++) {
            s = ct_dataset_get(from, i, xs, ys);
            for (int64_t k = 0; s == CT_OK && k < numel; k++) {
                double v = (double)xs[k];
                if (pass == 0)
                    acc[k] += v;
                else
                    acc[numel + k] += (v - acc[k]) * (v - acc[k]);
            }
        }
        if (pass == 0)
            for (int64_t k = 0; k < numel; k++)
                acc[k] /= (double)n;
    }
    for (int64_t k = 0; s == CT_OK && k < numel; k++) {
        double sd = sqrt(acc[numel + k] / (double)n);
        st->mean[k] = (float)acc[k];
        st->std[k] = sd > 0.0 ? (float)sd : 1.0f;
    }
    return s;
}

/* st's mean and std [numel] as given, checked (a std of 0 becomes 1). */
static ct_status stats_given(ct_ctx *ctx, const float *mean, const float *std, standard *st) {
    for (int64_t k = 0; k < st->numel; k++) {
        if (!isfinite(mean[k]) || !isfinite(std[k]) || std[k] < 0.0f)
            return CT_FAIL(ctx, CT_ERR_CONFIG,
                           "standardize: feature %lld: mean %g and std %g must be finite, std "
                           ">= 0",
                           (long long)k, (double)mean[k], (double)std[k]);
        st->mean[k] = mean[k];
        st->std[k] = std[k] > 0.0f ? std[k] : 1.0f;
    }
    return CT_OK;
}

ct_status ct_dataset_standardize(ct_dataset *ds,
                                 const ct_dataset *stats_from,
                                 const float *mean,
                                 const float *std,
                                 ct_dataset **out) {
    ct_ctx *ctx = ds->ctx;
    *out = NULL;
    CT_TRY(check_standardize(ds, stats_from, mean, std));
    int64_t numel = (int64_t)(ds->x_bytes / sizeof(float));
    standard *st = ct_alloc(ctx, sizeof *st);
    size_t sbytes = (size_t)(numel ? numel : 1) * 2 * sizeof(float);
    float *buf = ct_alloc(ctx, sbytes);
    double *acc =
        stats_from ? ct_alloc(ctx, (size_t)(numel ? numel : 1) * 2 * sizeof(double)) : NULL;
    float *xs = stats_from ? ct_alloc(ctx, ds->x_bytes ? ds->x_bytes : 1) : NULL;
    size_t ys_bytes = stats_from && stats_from->y_bytes ? stats_from->y_bytes : 1;
    unsigned char *ys = stats_from ? ct_alloc(ctx, ys_bytes) : NULL; /* stats_from's targets */
    ct_status s = CT_OK;
    if (!st || !buf || (stats_from && (!acc || !xs || !ys))) {
        s = CT_FAIL(ctx, CT_ERR_OOM, "standardize: allocating statistics of %lld features",
                    (long long)numel);
        goto done;
    }
    st->parent = ds;
    st->numel = numel;
    st->mean = buf;
    st->std = buf + numel;
    s = stats_from ? stats_of(stats_from, acc, xs, ys, st) : stats_given(ctx, mean, std, st);
    if (s == CT_OK) {
        ct_dataset *v = ct_alloc(ctx, sizeof *v);
        if (!v) {
            s = CT_FAIL(ctx, CT_ERR_OOM, "allocating a dataset view");
        } else {
            *v = *ds;
            v->vt = &standard_vt;
            v->self = st;
            *out = v;
        }
    }
done:
    ct_free(ctx, acc, (size_t)(numel ? numel : 1) * 2 * sizeof(double));
    ct_free(ctx, xs, ds->x_bytes ? ds->x_bytes : 1);
    ct_free(ctx, ys, ys_bytes);
    if (s != CT_OK) {
        ct_free(ctx, buf, sbytes);
        ct_free(ctx, st, sizeof *st);
    }
    return s;
}

ct_status ct_dataset_standardize_stats(const ct_dataset *view,
                                       const float **mean,
                                       const float **std,
                                       int64_t *n) {
    *mean = *std = NULL;
    *n = 0;
    if (view->vt != &standard_vt)
        return CT_FAIL(view->ctx, CT_ERR_INVALID_ARG,
                       "standardize_stats: dataset '%s' is not a standardised view",
                       view->vt->name);
    const standard *s = view->self;
    *mean = s->mean;
    *std = s->std;
    *n = s->numel;
    return CT_OK;
}
