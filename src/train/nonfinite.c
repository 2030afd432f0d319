/*
 * nonfinite.c - the non-finite scan over a float buffer and the stop/skip/rollback policy.
 *
 * The scan tests exponent bits (all ones: inf or NaN) with integer operations, which
 * vectorise without -ffast-math and give the same answer for any split of the buffer, so the
 * result is independent of the thread count by construction. The policy is a pure function of
 * its plain-data counters and the step's two flags.
 */
#include <string.h>

#include "ctrain/policy.h"
#include "kernels/vmath.h"
#include "train/train_internal.h"

#define EXP_MASK 0x7f800000u

/* 1 when buf[lo, hi) holds an inf or a NaN. */
CT_HOT static unsigned scan(const float *buf, int64_t lo, int64_t hi) {
    return hi > lo ? ct_vnonfinite(buf + lo, hi - lo) : 0; /* buf may be NULL when empty */
}

/* Below this many floats one thread scans (about 5 us at 100k here) faster than two do once
 * the second must be woken: after a step of small, single-threaded ops the pool sleeps, and
 * waking it cost the 784-128-10 MLP's batch-1 step (100k gradients) about 6 us more than the
 * scan itself. Above it (the batch-128 MLP's 203k: 10 us alone, 7 us on two threads) the
 * pool is usually awake from the step's parallel kernels. */
enum { SCAN_PARALLEL_MIN = 1 << 17 };

ct_status ct_nonfinite_check(ct_ctx *ctx, const float *buf, int64_t n, bool *ok) {
    *ok = false;
    if (n < 0 || (n > 0 && !buf))
        return CT_FAIL(ctx, CT_ERR_INVALID_ARG,
                       "non-finite check of %lld floats at %p; expected n >= 0 and a buffer",
                       (long long)n, (const void *)buf);
    unsigned bad = 0;
    int nt = n < SCAN_PARALLEL_MIN ? 1 : ct_threads_for(ctx, n, 1);
    if (nt <= 1) {
        bad = scan(buf, 0, n);
    } else {
        /* nt fixed blocks; OR is exact and order-free, so any split gives the same answer */
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) schedule(static) reduction(| : bad)
#endif
        for (int64_t b = 0; b < nt; b++)
            bad |= scan(buf, n * b / nt, n * (b + 1) / nt);
    }
    *ok = bad == 0;
    return CT_OK;
}

/* Divides buf[lo, hi) by d and says whether a result is an inf or a NaN; as scan. */
static unsigned divide_scan(float *buf, int64_t lo, int64_t hi, float d) {
    unsigned bad = 0;
    for (int64_t i = lo; i < hi; i++) {
        float x = buf[i] / d;
        buf[i] = x;
        uint32_t u;
        memcpy(&u, &x, sizeof u);
        bad |= (unsigned)((u & EXP_MASK) == EXP_MASK);
    }
    return bad;
}

void ct_train_divide_check(ct_ctx *ctx, float *buf, int64_t n, float divisor, bool *ok) {
    unsigned bad = 0;
    int nt = ct_threads_for(ctx, n, 1);
    if (nt <= 1) {
        bad = divide_scan(buf, 0, n, divisor);
    } else {
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) schedule(static) reduction(| : bad)
#endif
        for (int64_t b = 0; b < nt; b++)
            bad |= divide_scan(buf, n * b / nt, n * (b + 1) / nt, divisor);
    }
    if (ok) *ok = bad == 0;
}

/* ---- policy ---- */

ct_status ct_nonfinite_init(ct_ctx *ctx, ct_nonfinite_policy *pol, const ct_options *opts) {
    static const char *const keys[] = {"on_nonfinite", "max_rollbacks", "max_skips", NULL};
    static const char *const modes[] = {"stop", "skip", "rollback", NULL};
    _Static_assert(CT_NONFINITE_MODE_COUNT == 3, "one name per ct_nonfinite_mode");
    int64_t mode;
    memset(pol, 0, sizeof *pol);
    CT_TRY(ct_options_check(ctx, opts, keys));
    CT_TRY(ct_options_choice(ctx, opts, "on_nonfinite", modes, &mode));
    pol->mode = (ct_nonfinite_mode)mode;
    CT_TRY(ct_options_int(ctx, opts, "max_rollbacks", 3, 0, INT64_MAX, &pol->max_rollbacks));
    CT_TRY(ct_options_int(ctx, opts, "max_skips", 100, 1, INT64_MAX, &pol->max_skips));
    return CT_OK;
}

static const char *what(bool loss_ok, bool grads_ok) {
    if (!loss_ok && !grads_ok) return "loss and gradients";
    return loss_ok ? "gradients" : "loss";
}

ct_status ct_nonfinite_decide(ct_ctx *ctx,
                              ct_nonfinite_policy *pol,
                              bool loss_ok,
                              bool grads_ok,
                              ct_nonfinite_action *action) {
    ct_nonfinite_state *s = &pol->state;
    if (loss_ok && grads_ok) {
        s->consecutive_skipped = 0;
        *action = CT_NONFINITE_ACTION_CONTINUE;
        return CT_OK;
    }
    const char *w = what(loss_ok, grads_ok);
    *action = CT_NONFINITE_ACTION_STOP;
    switch (pol->mode) {
    case CT_NONFINITE_MODE_SKIP:
        if (s->consecutive_skipped >= pol->max_skips) {
            CT_FAIL(ctx, CT_ERR_NONFINITE,
                    "non-finite %s again after %lld skipped steps in a row (max_skips = %lld, "
                    "%lld skipped in all); stopping. HINT: lower the learning rate, clip "
                    "gradients, or check the data",
                    w, (long long)s->consecutive_skipped, (long long)pol->max_skips,
                    (long long)s->skipped);
            return CT_OK;
        }
        s->skipped++;
        s->consecutive_skipped++;
        *action = CT_NONFINITE_ACTION_SKIP_UPDATE;
        return CT_OK;
    case CT_NONFINITE_MODE_ROLLBACK:
        if (s->rollbacks >= pol->max_rollbacks) {
            CT_FAIL(ctx, CT_ERR_NONFINITE,
                    "non-finite %s after %lld rollbacks (max_rollbacks = %lld); stopping. "
                    "HINT: lower the learning rate, clip gradients, or check the data",
                    w, (long long)s->rollbacks, (long long)pol->max_rollbacks);
            return CT_OK;
        }
        s->rollbacks++;
        *action = CT_NONFINITE_ACTION_ROLLBACK;
        return CT_OK;
    case CT_NONFINITE_MODE_STOP:
    case CT_NONFINITE_MODE_COUNT:
        break;
    }
    CT_FAIL(ctx, CT_ERR_NONFINITE,
            "non-finite %s (on_nonfinite = stop); stopping. HINT: lower the learning rate, clip "
            "gradients, or set on_nonfinite to skip or rollback",
            w);
    return CT_OK;
}

void ct_nonfinite_get_state(const ct_nonfinite_policy *pol, ct_nonfinite_state *out) {
    *out = pol->state;
}

ct_status
ct_nonfinite_set_state(ct_ctx *ctx, ct_nonfinite_policy *pol, const ct_nonfinite_state *st) {
    if (st->skipped < 0 || st->rollbacks < 0 || st->consecutive_skipped < 0 ||
        st->consecutive_skipped > st->skipped)
        return CT_FAIL(ctx, CT_ERR_INVALID_ARG,
                       "non-finite policy state: %lld skipped, %lld in a row, %lld rollbacks; "
                       "expected counts >= 0 and in a row <= skipped",
                       (long long)st->skipped, (long long)st->consecutive_skipped,
                       (long long)st->rollbacks);
    pol->state = *st;
    return CT_OK;
}
