/*
 * monitor.c - the best-value monitor and early stopping.
 *
 * Invariant: a monitor's best is always finite (has_best false until the first finite value),
 * so a NaN or an infinity can never become "best" nor hide a later real improvement. Early
 * stopping composes a monitor with counters; both are plain data and restore exactly.
 */
#include <math.h>
#include <string.h>

#include "ctrain/policy.h"
#include "train/train_internal.h"

static const char *const modes[] = {"min", "max", NULL};

/* Reads metric (under `name_key`), mode and min_delta into m; the state starts empty. */
static ct_status
monitor_parse(ct_ctx *ctx, ct_monitor *m, const ct_options *opts, const char *name_key) {
    int64_t mode;
    memset(m, 0, sizeof *m);
    CT_TRY(ct_train_name(ctx, opts, name_key, "valid/loss", m->metric, sizeof m->metric));
    CT_TRY(ct_options_choice(ctx, opts, "mode", modes, &mode));
    m->mode = mode == 1 ? CT_MONITOR_MODE_MAX : CT_MONITOR_MODE_MIN;
    CT_TRY(ct_options_double(ctx, opts, "min_delta", 0.0, 0.0, HUGE_VAL, &m->min_delta));
    m->state.best_step = -1;
    return CT_OK;
}

ct_status ct_monitor_init(ct_ctx *ctx, ct_monitor *m, const ct_options *opts) {
    static const char *const keys[] = {"metric", "mode", "min_delta", NULL};
    CT_TRY(ct_options_check(ctx, opts, keys));
    return monitor_parse(ctx, m, opts, "metric");
}

bool ct_monitor_is_better(const ct_monitor *m, double value) {
    if (!isfinite(value)) return false;
    if (!m->state.has_best) return true; /* the first finite value, in min mode too */
    if (m->mode == CT_MONITOR_MODE_MAX) return value > m->state.best + m->min_delta;
    return value < m->state.best - m->min_delta;
}

void ct_monitor_update(ct_monitor *m, double value, int64_t step, bool *improved) {
    bool better = ct_monitor_is_better(m, value);
    if (better) {
        m->state.best = value;
        m->state.best_step = step;
        m->state.has_best = true;
    }
    if (improved) *improved = better;
}

void ct_monitor_get_state(const ct_monitor *m, ct_monitor_state *out) {
    *out = m->state;
}

static ct_status check_monitor_state(ct_ctx *ctx, const ct_monitor_state *st) {
    if (st->has_best && (!isfinite(st->best) || st->best_step < 0))
        return CT_FAIL(ctx, CT_ERR_INVALID_ARG,
                       "monitor state: best %g at step %lld; expected a finite best at a step "
                       ">= 0",
                       st->best, (long long)st->best_step);
    return CT_OK;
}

ct_status ct_monitor_set_state(ct_ctx *ctx, ct_monitor *m, const ct_monitor_state *st) {
    CT_TRY(check_monitor_state(ctx, st));
    m->state = *st;
    if (!st->has_best) {
        m->state.best = 0.0;
        m->state.best_step = -1;
    }
    return CT_OK;
}

/* ---- early stopping ---- */

ct_status ct_early_stop_init(ct_ctx *ctx, ct_early_stop *es, const ct_options *opts) {
    static const char *const keys[] = {"monitor", "mode", "min_delta", "patience", "warmup", NULL};
    memset(es, 0, sizeof *es);
    CT_TRY(ct_options_check(ctx, opts, keys));
    CT_TRY(monitor_parse(ctx, &es->monitor, opts, "monitor"));
    CT_TRY(ct_options_int(ctx, opts, "patience", 5, 1, INT64_MAX, &es->patience));
    CT_TRY(ct_options_int(ctx, opts, "warmup", 0, 0, INT64_MAX, &es->warmup));
    es->state.monitor = es->monitor.state;
    return CT_OK;
}

void ct_early_stop_update(ct_early_stop *es, double value, bool *stop) {
    ct_early_stop_state *s = &es->state;
    if (s->evals < INT64_MAX) s->evals++;
    if (!s->stopped && s->evals > es->warmup) {
        bool improved;
        es->monitor.state = s->monitor;
        ct_monitor_update(&es->monitor, value, s->evals, &improved);
        s->monitor = es->monitor.state;
        s->bad_evals = improved ? 0 : s->bad_evals + 1;
        if (s->bad_evals >= es->patience) s->stopped = true;
    }
    *stop = s->stopped;
}

void ct_early_stop_get_state(const ct_early_stop *es, ct_early_stop_state *out) {
    *out = es->state;
}

ct_status ct_early_stop_set_state(ct_ctx *ctx, ct_early_stop *es, const ct_early_stop_state *st) {
    CT_TRY(check_monitor_state(ctx, &st->monitor));
    if (st->evals < 0 || st->bad_evals < 0 || st->bad_evals > st->evals)
        return CT_FAIL(ctx, CT_ERR_INVALID_ARG,
                       "early-stopping state: %lld evaluations, %lld bad; expected counts >= 0 "
                       "with bad <= evaluations",
                       (long long)st->evals, (long long)st->bad_evals);
    es->state = *st;
    /* stopped is what the counts say under this patience: a state that stopped under a smaller
       one goes on, as a run given this patience from the start would have */
    es->state.stopped = st->bad_evals >= es->patience;
    if (!st->monitor.has_best) {
        es->state.monitor.best = 0.0;
        es->state.monitor.best_step = -1;
    }
    es->monitor.state = es->state.monitor;
    return CT_OK;
}
