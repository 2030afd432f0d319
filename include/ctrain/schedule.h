/*
 * schedule.h - learning-rate schedules, created by type name from key=value options and
 * golden-tested against PyTorch 1.13's torch.optim.lr_scheduler.
 *
 * A schedule maps a step count t (0 at creation, +1 per ct_schedule_step) to a learning rate.
 * Whether a step is an iteration or an epoch is the caller's choice: the schedule only counts.
 * Every type but "plateau" computes the rate from t in closed form (in double, returned as
 * float), so a schedule restored from its state gives exactly the rates of an uninterrupted run.
 * "plateau" keeps its rate and counters in the state, which restores it exactly as well.
 *
 * The schedule does not touch an optimizer: the caller passes each rate on, e.g.
 *     ct_optim_set_lr(opt, ct_schedule_step(sched));
 *
 * Types and options (defaults in parentheses; base = the base_lr given to ct_schedule_create):
 *   constant       factor (1), total (0): base * factor for t < total, then base (ConstantLR).
 *   step           step_size (required), gamma (0.1): base * gamma^floor(t / step_size) (StepLR).
 *   multistep      milestones (required: "30,80", strictly increasing, >= 0), gamma (0.1):
 *                  base * gamma^(number of milestones <= t) (MultiStepLR).
 *   exponential    gamma (required): base * gamma^t (ExponentialLR).
 *   cosine         t_max (required), eta_min (0), warmup (0): for t < warmup, base * t / warmup;
 *                  then eta_min + (base - eta_min) (1 + cos(pi (t - warmup) / t_max)) / 2.
 *                  Like CosineAnnealingLR this is periodic: past t_max it rises again. This is
 *                  the closed form; PyTorch steps a recursive form that agrees to ~1e-15.
 *   warmup_linear  warmup (0), total (required, > warmup), min_lr (0): base * t / warmup, then
 *                  linear from base at t = warmup to min_lr at t = total, then min_lr.
 *   warmup_cosine  warmup (0), total (required, > warmup), min_lr (0): base * t / warmup, then
 *                  min_lr + (base - min_lr) (1 + cos(pi p)) / 2, p = min(1, (t - warmup) /
 *                  (total - warmup)): reaches min_lr at t = total and stays there.
 *   onecycle       max_lr (base), total (required), pct_start (0.3), anneal ("cos" | "linear"),
 *                  div_factor (25), final_div_factor (1e4), three_phase (false): OneCycleLR
 *                  from max_lr / div_factor up to max_lr and down to max_lr / div_factor /
 *                  final_div_factor at t = total - 1; base_lr only supplies max_lr's default.
 *                  Past total - 1 the rate stays at the final value (PyTorch raises instead).
 *                  Momentum is not cycled.
 *   polynomial     total (required), power (1), min_lr (0):
 *                  min_lr + (base - min_lr) (1 - min(t, total) / total)^power (PolynomialLR,
 *                  which is the min_lr = 0 case).
 *   plateau        mode ("min" | "max"), factor (0.1), patience (10), threshold (1e-4),
 *                  threshold_mode ("rel" | "abs"), cooldown (0), min_lr (0), eps (1e-8):
 *                  ReduceLROnPlateau driven by ct_schedule_step_metric. A metric improves when
 *                  it beats the best by the threshold (rel: best * (1 -/+ threshold); abs: best
 *                  -/+ threshold); after more than `patience` steps without improvement the rate
 *                  becomes max(lr * factor, min_lr) (skipped when that changes it by <= eps),
 *                  then `cooldown` steps ignore bad results. A non-finite metric (NaN, +-inf) is
 *                  never an improvement; it counts as a bad step.
 * An unknown type or key, a missing required key, or a value out of range fails with
 * CT_ERR_CONFIG naming the key and the accepted values.
 *
 * Ownership: ct_schedule_create returns a schedule the caller frees with ct_schedule_destroy;
 * it keeps the context (which must outlive it) but copies everything from the options.
 */
#ifndef CTRAIN_SCHEDULE_H
#define CTRAIN_SCHEDULE_H

#include "ctrain/options.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ct_schedule ct_schedule;

/*
 * The resumable state of a schedule, for checkpoints. For closed-form types only `steps`
 * matters (the others are written as lr = the current rate, best = 0, counters 0). For
 * "plateau", best is the best metric so far (+inf in mode min, -inf in mode max before any
 * finite metric), bad_epochs the steps since it improved, cooldown_left the cooldown steps still
 * to run, and lr the current rate in double (so restoring it is exact).
 */
typedef struct ct_schedule_state {
    int64_t steps;
    double best;
    int64_t bad_epochs;
    int64_t cooldown_left;
    double lr;
} ct_schedule_state;

/*
 * Creates a schedule of the named type (see the list above) from options; opts may be NULL
 * (all defaults, which fails for types with required keys). base_lr must be finite and >= 0
 * (else CT_ERR_INVALID_ARG). The schedule starts at step 0 with rate lr(0). *out is NULL on
 * failure: CT_ERR_CONFIG for an unknown type (the message lists the known ones), an unknown
 * key (lists the type's keys) or a bad value; CT_ERR_OOM.
 */
CT_API ct_status ct_schedule_create(
    ct_ctx *ctx, const char *type, const ct_options *opts, float base_lr, ct_schedule **out);
/* Frees the schedule. NULL is a no-op. */
CT_API void ct_schedule_destroy(ct_schedule *s);

/* A schedule type as configurations name it, with its option keys (NULL-terminated, static)
 * for checking a configuration before building; the other members are the library's own. */
typedef struct ct_schedule_type {
    const char *name;
    const char *const *keys;
    /* Reads the type's options into s. */
    ct_status (*parse)(ct_ctx *ctx, const ct_options *opts, ct_schedule *s);
    /* The rate at step t in closed form; NULL for a type driven by a metric ("plateau"). */
    double (*lr_at)(const ct_schedule *s, int64_t t);
} ct_schedule_type;

/* The types: a NULL-terminated table of *count; and the one of a name (NULL for a name that
 * is not one, or NULL). */
CT_API const ct_schedule_type *const *ct_schedule_types(int64_t *count);
CT_API const ct_schedule_type *ct_schedule_type_find(const char *name);

/* The schedule's type name ("cosine"). */
CT_API const char *ct_schedule_name(const ct_schedule *s);
/* True for types driven by a metric ("plateau"): step those with ct_schedule_step_metric. */
CT_API bool ct_schedule_needs_metric(const ct_schedule *s);

/* The current learning rate. */
CT_API float ct_schedule_lr(const ct_schedule *s);
/* Steps taken so far. */
CT_API int64_t ct_schedule_steps(const ct_schedule *s);

/*
 * Advances one step and returns the new rate. For "plateau", which needs a metric, this only
 * counts the step and keeps the rate.
 */
CT_API float ct_schedule_step(ct_schedule *s);
/*
 * Advances one step with a monitored metric (e.g. the validation loss, or an accuracy in mode
 * max) and returns the new rate. Only "plateau" uses the metric; the other types ignore it and
 * step as ct_schedule_step, so a trainer may call this uniformly. Any metric is accepted; a
 * non-finite one counts as no improvement.
 */
CT_API float ct_schedule_step_metric(ct_schedule *s, double metric);

/* Writes the state (never fails). */
CT_API void ct_schedule_get_state(const ct_schedule *s, ct_schedule_state *out);
/*
 * Restores a state from ct_schedule_get_state of a schedule with the same type and options;
 * later steps then give exactly the rates the saved run would have. Fails with
 * CT_ERR_INVALID_ARG, keeping the current state, when steps < 0 or, for "plateau", when lr is
 * not finite and >= 0, best is NaN, bad_epochs < 0 or cooldown_left is outside [0, cooldown].
 */
CT_API ct_status ct_schedule_set_state(ct_schedule *s, const ct_schedule_state *st);

#ifdef __cplusplus
}
#endif

#endif /* CTRAIN_SCHEDULE_H */
