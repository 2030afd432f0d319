/*
 * ema.c - an exponential moving average of a parameter store's trainable weights, with a copy
 * of its buffers, and the in-place exchange used for evaluation.
 *
 * Invariant: shadow has the layout of ct_params_values (one contiguous float buffer) and
 * `bufs` holds every CT_PARAM_BUFFER tensor in declaration order, each padded to 8 bytes.
 * While `swapped` the model holds the EMA values and these buffers the raw ones; updates and
 * state restores are refused then. Every loop is element-wise, so results are the same bits
 * for any thread count, and nothing allocates after ct_ema_create.
 *
 * Ownership: the EMA owns shadow and bufs and borrows the store.
 */
#include <math.h>
#include <string.h>

#include "ctrain/policy.h"
#include "train/train_internal.h"

struct ct_ema {
    ct_ctx *ctx;
    ct_params *params;
    double decay;
    bool warmup;
    int64_t every;
    float *shadow; /* n floats */
    int64_t n;
    size_t shadow_bytes; /* allocated size of shadow */
    unsigned char *bufs;
    size_t buf_bytes;       /* bytes used in bufs */
    size_t buf_alloc_bytes; /* allocated size of bufs */
    bool swapped;
    ct_ema_state state;
};

static size_t padded(size_t bytes) {
    return (bytes + 7) & ~(size_t)7;
}

/* Copies the store's buffers into bufs (to_shadow) or back, or exchanges them (swap). */
static void buffers_move(ct_ema *e, bool to_shadow, bool swap) {
    size_t off = 0;
    int64_t count = ct_params_count(e->params);
    for (int64_t i = 0; i < count; i++) {
        if (ct_params_kind_at(e->params, i) != CT_PARAM_BUFFER) continue;
        ct_tensor *t = ct_params_at(e->params, i);
        size_t nb = ct_tensor_nbytes(t);
        unsigned char *a = t->data, *b = e->bufs + off;
        if (swap) {
            for (size_t k = 0; k < nb; k++) {
                unsigned char x = a[k];
                a[k] = b[k];
                b[k] = x;
            }
        } else if (nb) {
            memcpy(to_shadow ? b : a, to_shadow ? a : b, nb);
        }
        off += padded(nb);
    }
}

ct_status ct_ema_create(ct_ctx *ctx, ct_params *params, const ct_options *opts, ct_ema **out) {
    static const char *const keys[] = {"decay", "warmup", "every", NULL};
    *out = NULL;
    double decay;
    bool warmup;
    int64_t every;
    CT_TRY(ct_options_check(ctx, opts, keys));
    CT_TRY(ct_options_double(ctx, opts, "decay", 0.999, 0.0, 1.0, &decay));
    CT_TRY(ct_options_bool(ctx, opts, "warmup", false, &warmup));
    CT_TRY(ct_options_int(ctx, opts, "every", 1, 1, INT64_MAX, &every));
    int64_t n = ct_params_numel(params);
    const float *values = ct_params_values(params);
    if (!values)
        return CT_FAIL(ctx, CT_ERR_INVALID_ARG,
                       "EMA: the parameter store is not allocated (call ct_params_alloc first)");
    size_t buf_bytes = 0;
    for (int64_t i = 0; i < ct_params_count(params); i++)
        if (ct_params_kind_at(params, i) == CT_PARAM_BUFFER)
            buf_bytes += padded(ct_tensor_nbytes(ct_params_at(params, i)));
    ct_ema *e = ct_alloc(ctx, sizeof *e);
    if (!e) return CT_FAIL(ctx, CT_ERR_OOM, "allocating an EMA");
    memset(e, 0, sizeof *e);
    e->ctx = ctx;
    e->params = params;
    e->decay = decay;
    e->warmup = warmup;
    e->every = every;
    e->n = n;
    e->shadow_bytes = n ? (size_t)n * sizeof(float) : 1;
    e->buf_bytes = buf_bytes;
    e->buf_alloc_bytes = buf_bytes ? buf_bytes : 1;
    e->shadow = ct_alloc(ctx, e->shadow_bytes);
    e->bufs = ct_alloc(ctx, e->buf_alloc_bytes);
    if (!e->shadow || !e->bufs) {
        ct_ema_destroy(e);
        return CT_FAIL(ctx, CT_ERR_OOM, "EMA: allocating %lld shadow weights and %zu buffer bytes",
                       (long long)n, buf_bytes);
    }
    if (n) memcpy(e->shadow, values, (size_t)n * sizeof(float));
    memset(e->bufs, 0, e->buf_alloc_bytes); /* the padding */
    buffers_move(e, true, false);
    *out = e;
    return CT_OK;
}

void ct_ema_destroy(ct_ema *ema) {
    if (!ema) return;
    ct_ctx *ctx = ema->ctx;
    ct_free(ctx, ema->shadow, ema->shadow_bytes);
    ct_free(ctx, ema->bufs, ema->buf_alloc_bytes);
    ct_free(ctx, ema, sizeof *ema);
}

/* d_t for an update preceded by t others (tf.train.ExponentialMovingAverage's num_updates). */
static double decay_at(const ct_ema *e, int64_t t) {
    if (!e->warmup) return e->decay;
    double w = (1.0 + (double)t) / (10.0 + (double)t);
    return w < e->decay ? w : e->decay;
}

CT_HOT ct_status ct_ema_update(ct_ema *ema, int64_t step, bool *updated) {
    if (updated) *updated = false;
    if (ema->swapped)
        return CT_FAIL(ema->ctx, CT_ERR_INVALID_ARG,
                       "EMA update while the EMA weights are swapped in (call ct_ema_end_eval "
                       "first)");
    if (step < 1)
        return CT_FAIL(ema->ctx, CT_ERR_INVALID_ARG,
                       "EMA update at step %lld; expected optimizer steps completed, >= 1",
                       (long long)step);
    if (step % ema->every != 0) return CT_OK;
    double dt = decay_at(ema, ema->state.updates);
    const float d = (float)dt, d1 = (float)(1.0 - dt);
    float *s = ema->shadow;
    const float *w = ct_params_values(ema->params);
    int nt = ct_threads_for(ema->ctx, ema->n, 3);
    CT_OMP_FOR(nt)
    for (int64_t i = 0; i < ema->n; i++)
        s[i] = d * s[i] + d1 * w[i];
    buffers_move(ema, true, false);
    ema->state.updates++;
    ema->state.decay = dt;
    if (updated) *updated = true;
    return CT_OK;
}

/* Exchanges model and shadow, weights and buffers. */
CT_HOT static void exchange(ct_ema *e) {
    float *a = ct_params_values(e->params), *b = e->shadow;
    int nt = ct_threads_for(e->ctx, e->n, 2);
    CT_OMP_FOR(nt)
    for (int64_t i = 0; i < e->n; i++) {
        float x = a[i];
        a[i] = b[i];
        b[i] = x;
    }
    buffers_move(e, false, true);
    e->swapped = !e->swapped;
    ct_ctx_weights_changed(e->ctx);
}

ct_status ct_ema_swap_in(ct_ema *ema) {
    if (ema->swapped)
        return CT_FAIL(ema->ctx, CT_ERR_INVALID_ARG, "EMA weights are already swapped in");
    exchange(ema);
    return CT_OK;
}

ct_status ct_ema_swap_out(ct_ema *ema) {
    if (!ema->swapped)
        return CT_FAIL(ema->ctx, CT_ERR_INVALID_ARG,
                       "EMA swap out while the raw weights are in the model");
    exchange(ema);
    return CT_OK;
}

ct_status ct_ema_begin_eval(ct_ema *ema) {
    return ct_ema_swap_in(ema);
}

void ct_ema_end_eval(ct_ema *ema) {
    if (ema && ema->swapped) exchange(ema);
}

bool ct_ema_swapped(const ct_ema *ema) {
    return ema->swapped;
}

float *ct_ema_shadow(const ct_ema *ema) {
    return ema->shadow;
}

int64_t ct_ema_numel(const ct_ema *ema) {
    return ema->n;
}

void *ct_ema_shadow_buffers(const ct_ema *ema, size_t *bytes) {
    if (bytes) *bytes = ema->buf_bytes;
    return ema->bufs;
}

void ct_ema_get_state(const ct_ema *ema, ct_ema_state *out) {
    *out = ema->state;
}

ct_status ct_ema_set_state(ct_ema *ema, const ct_ema_state *st) {
    if (ema->swapped)
        return CT_FAIL(ema->ctx, CT_ERR_INVALID_ARG,
                       "EMA state restored while the EMA weights are swapped in");
    if (st->updates < 0 || !(st->decay >= 0.0 && st->decay <= 1.0))
        return CT_FAIL(ema->ctx, CT_ERR_INVALID_ARG,
                       "EMA state: %lld updates, decay %g; expected updates >= 0 and a decay in "
                       "[0, 1]",
                       (long long)st->updates, st->decay);
    ema->state = *st;
    return CT_OK;
}
