/*
 * spike.c - loss-spike detection: a step's value against the median and the median absolute
 * deviation of the last `window` values that were not spikes.
 *
 * The detector is a pure function of its plain-data state and the values observed, so a run
 * resumed from a checkpoint that holds the state makes the same decisions. Spikes never enter
 * the window: a burst of them cannot raise the median it is measured against.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ctrain/policy.h"
#include "train/train_internal.h"

/* 1.4826 * MAD estimates the standard deviation of normal data. */
#define MAD_SCALE 1.4826

ct_status ct_spike_init(ct_ctx *ctx, ct_spike_detector *det, const ct_options *opts) {
    static const char *const keys[] = {"action",    "signal",       "window",
                                       "threshold", "warmup",       "lr_factor",
                                       "cooldown",  "skip_batches", NULL};
    static const char *const modes[] = {"none", "warn", "skip", "rollback", NULL};
    static const char *const signals[] = {"loss", "grad_norm", NULL};
    _Static_assert(CT_SPIKE_MODE_COUNT == 4, "one name per ct_spike_mode");
    _Static_assert(CT_SPIKE_SIGNAL_COUNT == 2, "one name per ct_spike_signal");
    int64_t mode = 0, signal = 0;
    memset(det, 0, sizeof *det);
    det->state.rollback_step = -1;
    if (opts) {
        CT_TRY(ct_options_check(ctx, opts, keys));
        if (ct_options_get(opts, "action"))
            CT_TRY(ct_options_choice(ctx, opts, "action", modes, &mode));
        if (ct_options_get(opts, "signal"))
            CT_TRY(ct_options_choice(ctx, opts, "signal", signals, &signal));
    }
    static const ct_options none = {0};
    if (!opts) opts = &none;
    det->mode = (ct_spike_mode)mode;
    det->signal = (ct_spike_signal)signal;
    CT_TRY(ct_options_int(ctx, opts, "window", 100, 2, CT_SPIKE_WINDOW_MAX, &det->window));
    CT_TRY(ct_options_double(ctx, opts, "threshold", 6.0, 1e-9, 1e9, &det->threshold));
    CT_TRY(ct_options_int(ctx, opts, "warmup", det->window, 2, INT64_MAX, &det->warmup));
    CT_TRY(ct_options_double(ctx, opts, "lr_factor", 1.0, 1e-12, 1.0, &det->lr_factor));
    CT_TRY(ct_options_int(ctx, opts, "cooldown", 0, 0, INT64_MAX, &det->cooldown));
    CT_TRY(ct_options_int(ctx, opts, "skip_batches", 1, 1, INT64_MAX, &det->skip_batches));
    return CT_OK;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of v[0..n) (n >= 1), which it sorts. */
static double median_of(double *v, int64_t n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void ct_spike_observe(ct_spike_detector *det, double value, ct_spike_verdict *out) {
    ct_spike_state *s = &det->state;
    memset(out, 0, sizeof *out);
    if (det->mode == CT_SPIKE_MODE_NONE || !isfinite(value)) return;
    if (s->seen >= det->warmup && s->n_values > 0) {
        int64_t n = s->n_values;
        memcpy(det->scratch, s->values, (size_t)n * sizeof(double));
        double med = median_of(det->scratch, n);
        for (int64_t i = 0; i < n; i++)
            det->scratch[i] = fabs(s->values[i] - med);
        double dev = MAD_SCALE * median_of(det->scratch, n);
        /* a window of equal values (MAD 0) would call any larger value a spike */
        dev = fmax(dev, fmax(1e-6 * fabs(med), 1e-12));
        out->median = med;
        out->deviation = dev;
        if (value > med + det->threshold * dev) {
            out->spike = true;
            s->spikes++;
            return;
        }
    }
    s->seen++;
    s->values[s->next] = value;
    s->next = (s->next + 1) % det->window;
    if (s->n_values < det->window) s->n_values++;
}

void ct_spike_get_state(const ct_spike_detector *det, ct_spike_state *out) {
    *out = det->state;
}

ct_status ct_spike_set_state(ct_ctx *ctx, ct_spike_detector *det, const ct_spike_state *st) {
    bool ok = st->n_values >= 0 && st->n_values <= det->window && st->next >= 0 &&
              st->next < det->window && st->seen >= st->n_values && st->spikes >= 0 &&
              st->cooldown_left >= 0 && st->skip_left >= 0 && st->skipped_windows >= 0 &&
              st->rollback_step >= -1;
    for (int64_t i = 0; ok && i < st->n_values; i++)
        ok = isfinite(st->values[i]);
    if (!ok)
        return CT_FAIL(ctx, CT_ERR_INVALID_ARG,
                       "spike detector state: %lld values (window %lld), slot %lld, %lld seen, "
                       "%lld spikes, cooldown %lld, %lld windows to skip, %lld skipped, rollback "
                       "to %lld; expected counts >= 0, at most the window's values, all finite, "
                       "a slot in it, and a rollback step >= -1",
                       (long long)st->n_values, (long long)det->window, (long long)st->next,
                       (long long)st->seen, (long long)st->spikes, (long long)st->cooldown_left,
                       (long long)st->skip_left, (long long)st->skipped_windows,
                       (long long)st->rollback_step);
    det->state = *st;
    return CT_OK;
}
