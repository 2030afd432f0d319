/*
 * synthetic.c - the "synthetic" dataset type: seeded generators for tests, examples and
 * benchmarks, with no files.
 *
 *   blobs:  class centres ~ N(0, spread^2) per feature; each sample's class is uniform; its
 *           features are its centre plus N(0, 1) noise. y is an i64 class index.
 *   linear: a teacher W [outputs, features] ~ N(0, 1/features); x ~ N(0, 1);
 *           y = W x + N(0, noise^2). y is f32 [outputs] (a scalar when outputs == 1).
 *
 * corrupt_every = N > 0 plants bad samples for tests of spike handling: the inputs of samples
 * N-1, 2N-1, ... are multiplied by corrupt_scale (default 1000) after they are drawn.
 *
 * Everything is drawn at open, on one thread, from Philox streams of `seed` (one stream per
 * purpose), so the data is a pure function of the options. Ownership: the dataset owns one
 * buffer holding every target [n, ...] followed by every feature row [n, features].
 */
#include <math.h>
#include <string.h>

#include "data/data_internal.h"

#define SYNTH_MAX_ELEMS ((int64_t)1 << 28) /* floats generated, per table */

enum {
    STREAM_CENTRES = 1,
    STREAM_LABELS,
    STREAM_BLOB_NOISE,
    STREAM_TEACHER,
    STREAM_X,
    STREAM_TARGET_NOISE
};

typedef struct synthetic {
    unsigned char *buf; /* y [n, y_bytes], then x [n, features] f32 */
    size_t bytes;
    const float *x;
    int64_t features;
    size_t y_bytes; /* one sample's target */
} synthetic;

/* Fails when one of `keys` is set: it belongs to the other kind. */
static ct_status
reject_keys(ct_ctx *ctx, const ct_options *opts, const char *kind, const char *const *keys) {
    for (; *keys; keys++)
        if (ct_options_get(opts, *keys))
            return CT_FAIL(ctx, CT_ERR_CONFIG, "%s: key '%s' does not apply to kind=%s",
                           ct_options_where(opts, "data"), *keys, kind);
    return CT_OK;
}

static ct_status too_large(ct_ctx *ctx, const ct_options *opts, const char *what, int64_t elems) {
    return CT_FAIL(ctx, CT_ERR_CONFIG, "%s: %s = %lld values, more than the limit %lld",
                   ct_options_where(opts, "data"), what, (long long)elems,
                   (long long)SYNTH_MAX_ELEMS);
}

static ct_status scratch(ct_ctx *ctx, size_t bytes, float **out) {
    *out = ct_alloc(ctx, bytes);
    if (!*out) return CT_FAIL(ctx, CT_ERR_OOM, "synthetic: allocating %zu bytes", bytes);
    return CT_OK;
}

/* x [n, F] = centre[label] + N(0, 1); labels [n]. */
static ct_status make_blobs(ct_ctx *ctx,
                            uint64_t seed,
                            int64_t n,
                            int64_t F,
                            int64_t classes,
                            double spread,
                            int64_t *labels,
                            float *x) {
    float *centres;
    size_t bytes = (size_t)(classes * F) * sizeof(float);
    CT_TRY(scratch(ctx, bytes, &centres));
    ct_rng rc = ct_rng_init(seed, STREAM_CENTRES), rl = ct_rng_init(seed, STREAM_LABELS);
    ct_rng rx = ct_rng_init(seed, STREAM_BLOB_NOISE);
    ct_rng_normal(&rc, centres, classes * F, 0.0f, (float)spread);
    ct_rng_normal(&rx, x, n * F, 0.0f, 1.0f);
    for (int64_t i = 0; i < n; i++) {
        labels[i] = (int64_t)ct_rng_below(&rl, (uint64_t)classes);
        const float *c = centres + labels[i] * F;
        for (int64_t j = 0; j < F; j++)
            x[i * F + j] += c[j];
    }
    ct_free(ctx, centres, bytes);
    return CT_OK;
}

/* x [n, F] ~ N(0, 1); y [n, O] = W x + N(0, noise^2) with W [O, F] ~ N(0, 1/F). */
static ct_status make_linear(
    ct_ctx *ctx, uint64_t seed, int64_t n, int64_t F, int64_t O, double noise, float *y, float *x) {
    float *w;
    size_t bytes = (size_t)(O * F) * sizeof(float);
    CT_TRY(scratch(ctx, bytes, &w));
    ct_rng rw = ct_rng_init(seed, STREAM_TEACHER), rx = ct_rng_init(seed, STREAM_X);
    ct_rng re = ct_rng_init(seed, STREAM_TARGET_NOISE);
    ct_rng_normal(&rw, w, O * F, 0.0f, (float)(1.0 / sqrt((double)F)));
    ct_rng_normal(&rx, x, n * F, 0.0f, 1.0f);
    ct_rng_normal(&re, y, n * O, 0.0f, (float)noise);
    for (int64_t i = 0; i < n; i++)
        for (int64_t o = 0; o < O; o++) {
            double acc = (double)y[i * O + o];
            for (int64_t j = 0; j < F; j++)
                acc += (double)w[o * F + j] * (double)x[i * F + j];
            y[i * O + o] = (float)acc;
        }
    ct_free(ctx, w, bytes);
    return CT_OK;
}

static void synthetic_close(ct_ctx *ctx, void *self) {
    synthetic *s = self;
    if (!s) return;
    ct_free(ctx, s->buf, s->bytes);
    ct_free(ctx, s, sizeof *s);
}

/* The option keys, and those that name files (ct_dataset_vtable keys, path_keys). */
static const char *const synthetic_keys[] = {
    "kind",    "n",    "features",      "classes",       "spread", "noise",
    "outputs", "seed", "corrupt_every", "corrupt_scale", NULL};
static const char *const synthetic_path_keys[] = {NULL};

static ct_status
synthetic_open(ct_ctx *ctx, const ct_options *opts, ct_dataset_info *info, void **self) {
    static const char *const blob_only[] = {"classes", "spread", NULL};
    static const char *const linear_only[] = {"noise", "outputs", NULL};
    *self = NULL;
    const char *kind;
    int64_t n, F, classes, outputs, seed, corrupt_every;
    double spread, noise, corrupt_scale;
    CT_TRY(ct_options_check(ctx, opts, synthetic_keys));
    CT_TRY(ct_options_string(ctx, opts, "kind", NULL, &kind));
    bool blobs = strcmp(kind, "blobs") == 0;
    if (!blobs && strcmp(kind, "linear") != 0)
        return CT_FAIL(ctx, CT_ERR_CONFIG, "%s: key 'kind': expected blobs or linear, got '%s'",
                       ct_options_where(opts, "data"), kind);
    CT_TRY(reject_keys(ctx, opts, kind, blobs ? linear_only : blob_only));
    CT_TRY(ct_options_int(ctx, opts, "n", -1, 1, SYNTH_MAX_ELEMS, &n));
    if (n < 0)
        return CT_FAIL(ctx, CT_ERR_CONFIG, "%s: key 'n' is required",
                       ct_options_where(opts, "data"));
    CT_TRY(ct_options_int(ctx, opts, "features", 16, 1, SYNTH_MAX_ELEMS, &F));
    CT_TRY(ct_options_int(ctx, opts, "classes", 4, 1, SYNTH_MAX_ELEMS, &classes));
    CT_TRY(ct_options_int(ctx, opts, "outputs", 1, 1, SYNTH_MAX_ELEMS, &outputs));
    CT_TRY(ct_options_double(ctx, opts, "spread", 1.0, 0.0, 1e6, &spread));
    CT_TRY(ct_options_double(ctx, opts, "noise", 0.1, 0.0, 1e6, &noise));
    CT_TRY(ct_options_int(ctx, opts, "seed", 0, 0, INT64_MAX, &seed));
    CT_TRY(ct_options_int(ctx, opts, "corrupt_every", 0, 0, INT64_MAX, &corrupt_every));
    CT_TRY(ct_options_double(ctx, opts, "corrupt_scale", 1000.0, -1e30, 1e30, &corrupt_scale));
    /* each factor is <= 2^28, so the products fit in int64 */
    if (n * F > SYNTH_MAX_ELEMS) return too_large(ctx, opts, "n * features", n * F);
    if (blobs && classes * F > SYNTH_MAX_ELEMS)
        return too_large(ctx, opts, "classes * features", classes * F);
    if (!blobs && n * outputs > SYNTH_MAX_ELEMS)
        return too_large(ctx, opts, "n * outputs", n * outputs);
    if (!blobs && outputs * F > SYNTH_MAX_ELEMS)
        return too_large(ctx, opts, "outputs * features", outputs * F);
    if (!info) return CT_OK; /* synthetic_check: the options only */

    synthetic *s = ct_alloc(ctx, sizeof *s);
    if (!s) return CT_FAIL(ctx, CT_ERR_OOM, "allocating a synthetic dataset");
    memset(s, 0, sizeof *s);
    s->features = F;
    s->y_bytes = blobs ? sizeof(int64_t) : (size_t)outputs * sizeof(float);
    size_t y_total = (size_t)n * s->y_bytes;
    s->bytes = y_total + (size_t)(n * F) * sizeof(float);
    s->buf = ct_alloc(ctx, s->bytes);
    if (!s->buf) {
        ct_status st = CT_FAIL(ctx, CT_ERR_OOM, "synthetic: allocating %zu bytes", s->bytes);
        s->bytes = 0;
        synthetic_close(ctx, s);
        return st;
    }
    float *x = (float *)(void *)(s->buf + y_total); /* y_total is a multiple of 4 */
    s->x = x;
    ct_status st =
        blobs ? make_blobs(ctx, (uint64_t)seed, n, F, classes, spread, (int64_t *)(void *)s->buf, x)
              : make_linear(ctx, (uint64_t)seed, n, F, outputs, noise, (float *)(void *)s->buf, x);
    if (st != CT_OK) {
        synthetic_close(ctx, s);
        return st;
    }
    for (int64_t i = corrupt_every - 1; corrupt_every > 0 && i < n; i += corrupt_every)
        for (int64_t j = 0; j < F; j++)
            x[i * F + j] = (float)((double)x[i * F + j] * corrupt_scale);
    info->n = n;
    info->x_dtype = CT_F32;
    info->x_ndim = 1;
    info->x_shape[0] = F;
    info->y_dtype = blobs ? CT_I64 : CT_F32;
    info->y_ndim = blobs || outputs == 1 ? 0 : 1;
    if (info->y_ndim) info->y_shape[0] = outputs;
    info->n_classes = blobs ? classes : 0;
    *self = s;
    return CT_OK;
}

static ct_status synthetic_get(const void *self, int64_t i, void *x, void *y) {
    const synthetic *s = self;
    memcpy(x, s->x + i * s->features, (size_t)s->features * sizeof(float));
    memcpy(y, s->buf + (size_t)i * s->y_bytes, s->y_bytes);
    return CT_OK;
}

static ct_status synthetic_check(ct_ctx *ctx, const ct_options *opts) {
    void *none;
    return synthetic_open(ctx, opts, NULL, &none);
}

const ct_dataset_vtable ct_dataset_synthetic = {0,
                                                "synthetic",
                                                synthetic_open,
                                                synthetic_get,
                                                synthetic_close,
                                                synthetic_check,
                                                synthetic_keys,
                                                synthetic_path_keys};
