/*
 * policy.h - the trainer's policies as standalone components: the best-value monitor, early
 * stopping, an exponential moving average (EMA) of the weights with an evaluation-time swap,
 * non-finite detection with a stop/skip/rollback policy, and gradient-accumulation windows.
 *
 * Each component is configured from key=value options (an unknown key is a CT_ERR_CONFIG
 * listing the known ones) and keeps its resumable state in a plain-data struct, read and
 * restored with _get_state/_set_state, so that a resumed run makes exactly the decisions of an
 * uninterrupted one. docs/policies.md describes the semantics and the choices against peers.
 *
 * Ownership: ct_monitor, ct_early_stop, ct_nonfinite_policy and ct_spike_detector are
 * caller-owned structs filled by their _init and holding no resources (no _fini needed; they
 * copy the metric name). A
 * ct_ema is a handle (ct_ema_create/ct_ema_destroy) that owns its shadow buffers and borrows
 * the parameter store, which must outlive it. Options are not kept after _init/_create.
 */
#ifndef CTRAIN_POLICY_H
#define CTRAIN_POLICY_H

#include <stdbool.h>
#include <stdint.h>

#include "ctrain/nn.h"
#include "ctrain/options.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Longest metric name a monitor keeps, terminating NUL included. */
#define CT_POLICY_NAME_MAX 128

typedef enum ct_monitor_mode {
    CT_MONITOR_MODE_MIN = 0, /* lower is better (losses) */
    CT_MONITOR_MODE_MAX,     /* higher is better (accuracy) */
    CT_MONITOR_MODE_COUNT
} ct_monitor_mode;

/* ---- best-value monitor ---- */

/* Resumable state: the best value so far and the step it was seen at. has_best is false until
 * the first finite value; best is then 0 and best_step -1. */
typedef struct ct_monitor_state {
    double best;
    int64_t best_step;
    bool has_best;
} ct_monitor_state;

typedef struct ct_monitor {
    char metric[CT_POLICY_NAME_MAX]; /* the metric's name, e.g. "valid/loss" */
    ct_monitor_mode mode;
    double min_delta; /* >= 0: how much better than the best a value must be */
    ct_monitor_state state;
} ct_monitor;

/*
 * Options: metric (default "valid/loss"), mode (min | max; default min), min_delta (>= 0,
 * default 0). A value improves on the best when it is finite and, with no best yet, always;
 * otherwise when value < best - min_delta (min) or value > best + min_delta (max). So a tie is
 * not an improvement, and NaN or +-inf never is.
 * Errors: CT_ERR_CONFIG for an unknown key, a bad value or a name of CT_POLICY_NAME_MAX bytes
 * or more; *m is then unspecified. opts may be NULL (all defaults).
 */
CT_API ct_status ct_monitor_init(ct_ctx *ctx, ct_monitor *m, const ct_options *opts);
/* Whether value would improve on the best, without recording it (to save a best checkpoint
 * first and commit with ct_monitor_update only once the save succeeded). */
CT_API bool ct_monitor_is_better(const ct_monitor *m, double value);
/* Records value seen at step; *improved (may be NULL) tells whether it became the best. */
CT_API void ct_monitor_update(ct_monitor *m, double value, int64_t step, bool *improved);
CT_API void ct_monitor_get_state(const ct_monitor *m, ct_monitor_state *out);
/* Fails with CT_ERR_INVALID_ARG, keeping the current state, when has_best comes with a
 * non-finite best or a best_step < 0. */
CT_API ct_status ct_monitor_set_state(ct_ctx *ctx, ct_monitor *m, const ct_monitor_state *st);

/* ---- early stopping ---- */

/* Resumable state: the monitor's, the evaluations seen, the consecutive bad ones after the
 * warm-up, and whether stopping was decided (sticky). */
typedef struct ct_early_stop_state {
    ct_monitor_state monitor;
    int64_t evals;
    int64_t bad_evals;
    bool stopped;
} ct_early_stop_state;

typedef struct ct_early_stop {
    ct_monitor monitor; /* its metric, mode and min_delta; state in `state.monitor` */
    int64_t patience;
    int64_t warmup;
    ct_early_stop_state state;
} ct_early_stop;

/*
 * Options: monitor (metric name, default "valid/loss"), mode (min | max; default min),
 * min_delta (>= 0, default 0), patience (>= 1, default 5), warmup (>= 0, default 0).
 * Rule: the first `warmup` evaluations are ignored entirely (neither best nor bad, whatever
 * their value). After that, an evaluation that improves on the best (the monitor's rule)
 * resets the bad count; any other, NaN and +-inf included, adds one; stop becomes true when
 * the count reaches patience, and stays true.
 * Errors: as ct_monitor_init.
 */
CT_API ct_status ct_early_stop_init(ct_ctx *ctx, ct_early_stop *es, const ct_options *opts);
/* Records one evaluation; *stop (required) tells whether training should stop now. */
CT_API void ct_early_stop_update(ct_early_stop *es, double value, bool *stop);
CT_API void ct_early_stop_get_state(const ct_early_stop *es, ct_early_stop_state *out);
/* Restores st, except that `stopped` is taken from the counts under es's patience: a state
 * that stopped under a smaller patience goes on (the state is the same under any patience up
 * to the stop), so raising the patience continues an early-stopped run. Fails with
 * CT_ERR_INVALID_ARG, keeping the current state, for a bad monitor state or negative
 * counters. */
CT_API ct_status ct_early_stop_set_state(ct_ctx *ctx,
                                         ct_early_stop *es,
                                         const ct_early_stop_state *st);

/* ---- EMA of the weights ---- */

/*
 * The shadow weights are one contiguous buffer of ct_params_numel floats in the layout of
 * ct_params_values (so a checkpoint writes it in one go). At each update, with t the number of
 * updates made before this one (0 for the first):
 *     d_t = warmup ? min(decay, (1 + t) / (10 + t)) : decay       (in double, then to float)
 *     shadow[i] = d * shadow[i] + (1 - d) * value[i]             (float; d and 1 - d rounded
 *                                                                 once from the double d_t)
 * which is tf.train.ExponentialMovingAverage's num_updates warm-up. Buffers (BatchNorm running
 * statistics, counters) are copied at each update, not averaged: they are already running
 * averages. The shadow starts as a copy of the weights and buffers at ct_ema_create.
 */
typedef struct ct_ema ct_ema;

/* Resumable state: updates made and the decay d_t the last one used (0 before any). The
 * shadow buffers (ct_ema_shadow, ct_ema_shadow_buffers) are saved alongside. */
typedef struct ct_ema_state {
    int64_t updates;
    double decay;
} ct_ema_state;

/*
 * Options: decay (in [0, 1], default 0.999), warmup (bool, default false), every (>= 1,
 * default 1: update at optimizer steps that are multiples of it).
 * The store must be allocated. Errors: CT_ERR_CONFIG (options), CT_ERR_INVALID_ARG (store not
 * allocated), CT_ERR_OOM. *out is NULL on failure.
 */
CT_API ct_status ct_ema_create(ct_ctx *ctx,
                               ct_params *params,
                               const ct_options *opts,
                               ct_ema **out);
CT_API void ct_ema_destroy(ct_ema *ema);

/*
 * Call after each optimizer step with step = optimizer steps completed (1, 2, ...): updates
 * the shadow when step is a multiple of `every`. *updated (may be NULL) tells whether it did.
 * One flat loop over the weights, the same bits for any thread count; no allocation.
 * Errors: CT_ERR_INVALID_ARG while the EMA weights are swapped in, or for step < 1.
 */
CT_API ct_status ct_ema_update(ct_ema *ema, int64_t step, bool *updated);

/*
 * Exchange the store's weights and buffers with the shadow's in O(n) without allocating:
 * after swap_in the model holds the EMA weights and the shadow buffer the raw ones; swap_out
 * undoes it. Swapping twice in the same direction fails with CT_ERR_INVALID_ARG.
 *
 * The scope API for evaluation: ct_ema_begin_eval swaps in (fails as swap_in);
 * ct_ema_end_eval restores the raw weights if they are swapped out and is a no-op otherwise,
 * so it is safe on every exit path, failed evaluations included:
 *     CT_TRY(ct_ema_begin_eval(ema));
 *     ct_status s = evaluate(...);
 *     ct_ema_end_eval(ema);
 *     CT_TRY(s);
 * Save checkpoints only outside the scope (the shadow then holds the EMA weights).
 */
CT_API ct_status ct_ema_swap_in(ct_ema *ema);
CT_API ct_status ct_ema_swap_out(ct_ema *ema);
CT_API ct_status ct_ema_begin_eval(ct_ema *ema);
CT_API void ct_ema_end_eval(ct_ema *ema);
/* Whether the EMA weights are in the model now. */
CT_API bool ct_ema_swapped(const ct_ema *ema);

/* The shadow weights (ct_ema_numel floats) and the shadow copy of the buffers
 * (*bytes bytes: each buffer in declaration order, padded to 8 bytes). Owned by the EMA; they
 * hold the EMA values only while not swapped in. Write into them to restore a checkpoint. */
CT_API float *ct_ema_shadow(const ct_ema *ema);
CT_API int64_t ct_ema_numel(const ct_ema *ema);
CT_API void *ct_ema_shadow_buffers(const ct_ema *ema, size_t *bytes);
CT_API void ct_ema_get_state(const ct_ema *ema, ct_ema_state *out);
/* Fails with CT_ERR_INVALID_ARG, keeping the current state, for updates < 0, a decay outside
 * [0, 1], or while swapped in. */
CT_API ct_status ct_ema_set_state(ct_ema *ema, const ct_ema_state *st);

/* ---- non-finite detection and policy ---- */

/* Sets *ok to whether all n floats of buf are finite (no NaN, no +-inf). A vectorised scan
 * over the bit patterns, split over the context's threads; the answer does not depend on the
 * thread count. Errors: CT_ERR_INVALID_ARG for n < 0 or buf NULL with n > 0 (*ok false). */
CT_API ct_status ct_nonfinite_check(ct_ctx *ctx, const float *buf, int64_t n, bool *ok);

typedef enum ct_nonfinite_mode {
    CT_NONFINITE_MODE_STOP = 0, /* end the run (the default) */
    CT_NONFINITE_MODE_SKIP,     /* drop the step's update and go on */
    CT_NONFINITE_MODE_ROLLBACK, /* reload the last good checkpoint, at most max_rollbacks times */
    CT_NONFINITE_MODE_COUNT
} ct_nonfinite_mode;

typedef enum ct_nonfinite_action {
    CT_NONFINITE_ACTION_CONTINUE = 0, /* all finite: apply the update */
    CT_NONFINITE_ACTION_SKIP_UPDATE,  /* zero the gradients, no optimizer/EMA step */
    CT_NONFINITE_ACTION_ROLLBACK,     /* restore the last good checkpoint, then put this
                                         policy's state back (so the count survives) */
    CT_NONFINITE_ACTION_STOP,         /* end the run; write no checkpoint of this state */
    CT_NONFINITE_ACTION_COUNT
} ct_nonfinite_action;

/* Resumable state: steps skipped in all, skipped in a row now, rollbacks made. */
typedef struct ct_nonfinite_state {
    int64_t skipped;
    int64_t consecutive_skipped;
    int64_t rollbacks;
} ct_nonfinite_state;

typedef struct ct_nonfinite_policy {
    ct_nonfinite_mode mode;
    int64_t max_rollbacks;
    int64_t max_skips; /* consecutive skipped steps before stopping */
    ct_nonfinite_state state;
} ct_nonfinite_policy;

/*
 * Options: on_nonfinite (stop | skip | rollback; default stop), max_rollbacks (>= 0, default
 * 3), max_skips (>= 1, default 100: consecutive skipped steps after which skip stops).
 * Errors: CT_ERR_CONFIG for an unknown key or bad value.
 */
CT_API ct_status ct_nonfinite_init(ct_ctx *ctx, ct_nonfinite_policy *pol, const ct_options *opts);
/*
 * The decision for one step whose loss and gradients were checked. Finite: CONTINUE (and the
 * consecutive-skip count resets). Otherwise by mode: stop -> STOP; skip -> SKIP_UPDATE, or STOP
 * once more than max_skips steps in a row were skipped; rollback -> ROLLBACK, or STOP when
 * max_rollbacks rollbacks were already made. On STOP the reason is recorded in ctx as a
 * CT_ERR_NONFINITE failure (ct_last_error: what was non-finite, the policy, the counts and a hint)
 * while the function itself returns CT_OK, so the trainer returns ct_last_status(ctx).
 */
CT_API ct_status ct_nonfinite_decide(ct_ctx *ctx,
                                     ct_nonfinite_policy *pol,
                                     bool loss_ok,
                                     bool grads_ok,
                                     ct_nonfinite_action *action);
CT_API void ct_nonfinite_get_state(const ct_nonfinite_policy *pol, ct_nonfinite_state *out);
/* Fails with CT_ERR_INVALID_ARG, keeping the current state, for negative counts or
 * consecutive_skipped > skipped. */
CT_API ct_status ct_nonfinite_set_state(ct_ctx *ctx,
                                        ct_nonfinite_policy *pol,
                                        const ct_nonfinite_state *st);

/* ---- loss-spike detection (docs/policies.md, "Loss spikes") ---- */

#define CT_SPIKE_WINDOW_MAX 1024 /* the largest `window` */

typedef enum ct_spike_mode {
    CT_SPIKE_MODE_NONE = 0, /* no detection (the default) */
    CT_SPIKE_MODE_WARN,     /* warn and count, apply the update */
    CT_SPIKE_MODE_SKIP,     /* drop the step's update */
    CT_SPIKE_MODE_ROLLBACK, /* restore the last good state and skip the spike's data */
    CT_SPIKE_MODE_COUNT
} ct_spike_mode;

typedef enum ct_spike_signal {
    CT_SPIKE_SIGNAL_LOSS = 0,  /* the step's training loss (its window's mean) */
    CT_SPIKE_SIGNAL_GRAD_NORM, /* the global gradient norm before clipping */
    CT_SPIKE_SIGNAL_COUNT
} ct_spike_signal;

/* Resumable state: the last n_values non-spike values in a ring (values[next] is the oldest
 * once full), the finite values observed, the spikes, the steps of lr_factor left, the data
 * windows still to skip and those skipped, and the step the last rollback went back to (-1:
 * none), which the trainer uses to skip instead of rolling back to the same state again. */
typedef struct ct_spike_state {
    double values[CT_SPIKE_WINDOW_MAX];
    int64_t n_values, next;
    int64_t seen;
    int64_t spikes;
    int64_t cooldown_left;
    int64_t skip_left;
    int64_t skipped_windows;
    int64_t rollback_step;
} ct_spike_state;

typedef struct ct_spike_detector {
    ct_spike_mode mode;
    ct_spike_signal signal;
    int64_t window, warmup, cooldown, skip_batches;
    double threshold, lr_factor;
    ct_spike_state state;
    double scratch[CT_SPIKE_WINDOW_MAX]; /* for the medians; no state */
} ct_spike_detector;

/* One observation's verdict: whether it is a spike, the median and robust deviation it was
 * compared with (0 before warmup). */
typedef struct ct_spike_verdict {
    bool spike;
    double median, deviation;
} ct_spike_verdict;

/*
 * Options: action (none | warn | skip | rollback; default none), signal (loss | grad_norm;
 * default loss), window (2..CT_SPIKE_WINDOW_MAX, default 100), threshold (> 0, default 6),
 * warmup (>= 2, default window), lr_factor (in (0, 1], default 1), cooldown (>= 0, default 0),
 * skip_batches (>= 1, default 1). Errors: CT_ERR_CONFIG for an unknown key or bad value.
 */
CT_API ct_status ct_spike_init(ct_ctx *ctx, ct_spike_detector *det, const ct_options *opts);
/*
 * The verdict on a step's value. Once warmup finite values were seen, a value above
 * median + threshold * deviation of the window is a spike (deviation: 1.4826 * the median
 * absolute deviation, at least 1e-6 * |median| and 1e-12) and is counted; any other finite
 * value enters the window (the oldest leaves when it is full). A non-finite value is neither
 * (it is the non-finite policy's). With mode none nothing is observed.
 */
CT_API void ct_spike_observe(ct_spike_detector *det, double value, ct_spike_verdict *out);
CT_API void ct_spike_get_state(const ct_spike_detector *det, ct_spike_state *out);
/* Fails with CT_ERR_INVALID_ARG, keeping the current state, for negative counts, more values
 * than the window, a slot outside it, a non-finite value or rollback_step < -1. */
CT_API ct_status ct_spike_set_state(ct_ctx *ctx, ct_spike_detector *det, const ct_spike_state *st);

/* ---- gradient-accumulation windows ---- */

/* Where micro-batch i of an epoch sits in its accumulation window. */
typedef struct ct_accum_pos {
    int64_t start;  /* the window's first batch index in the epoch */
    int64_t length; /* its real length: accum_steps, or fewer for the epoch's last window;
                       divide each micro-batch loss by it */
    int64_t index;  /* i - start */
    bool last;      /* i is the window's last batch: step the optimizer after it */
} ct_accum_pos;

/*
 * Windows of accum_steps consecutive batches from the start of each epoch; the last one is cut
 * at the epoch's end (never straddles epochs) and keeps its real length. Pure arithmetic.
 * Errors: CT_ERR_INVALID_ARG unless batches_per_epoch >= 1, accum_steps >= 1 and
 * 0 <= i < batches_per_epoch (*out zeroed).
 */
CT_API ct_status ct_accum_window(
    ct_ctx *ctx, int64_t batches_per_epoch, int64_t accum_steps, int64_t i, ct_accum_pos *out);

#ifdef __cplusplus
}
#endif

#endif /* CTRAIN_POLICY_H */
