/*
 * train_internal.h - what the trainer module's files share: the trainer's struct, the steps of
 * the loop that live in one file and are called from another, the option readers of the
 * policies and the sharded update. Not installed; not part of the API.
 *
 * The trainer's files: trainer.c (create, destroy, queries), fit.c (the loop), task.c (a batch's
 * forward pass and loss), eval.c (evaluation engines), update.c (the optimizer step at a window's
 * end), buckets.c (gradient buckets), state.c (checkpoints and resume), and the policies'
 * monitor.c, ema.c, nonfinite.c, spike.c, accum.c, policy_common.c, shard.c, profile.c (the
 * step profile), ps.c (the parameter-server strategy) and local_sgd.c (trainer.strategy
 * local_sgd).
 */
#ifndef CT_TRAIN_INTERNAL_H
#define CT_TRAIN_INTERNAL_H

#include "core/core_internal.h"
#include "ctrain/dist.h"
#include "ctrain/options.h"
#include "ctrain/trainer.h"
#include "train/tune.h"

/* Copies the string option key (fallback when absent) into out[cap]; a longer value or an
 * empty one is a CT_ERR_CONFIG. */
CT_INTERNAL ct_status ct_train_name(ct_ctx *ctx,
                                    const ct_options *opts,
                                    const char *key,
                                    const char *fallback,
                                    char *out,
                                    size_t cap);

/* buf[i] /= divisor for i < n (the mean of summed gradients, a division as
 * ct_comm_allreduce_mean_f32's), and, when ok is not NULL, *ok = no inf or NaN in the result:
 * ct_nonfinite_check's answer in the same pass over the buffer (nonfinite.c). */
CT_INTERNAL void ct_train_divide_check(ct_ctx *ctx, float *buf, int64_t n, float divisor, bool *ok);

/* The sharded optimizer update over shared memory (shard.c): a rank's part [lo, hi) of the
 * flat buffers of n floats. Creating and destroying (collective) are collective calls, and so
 * are reduce and gather, made by every rank once per step. */
typedef struct ct_train_shard ct_train_shard;
CT_INTERNAL ct_status ct_train_shard_create(ct_ctx *ctx,
                                            ct_comm *comm,
                                            int64_t n,
                                            ct_train_shard **out);
CT_INTERNAL void ct_train_shard_destroy(ct_train_shard *sh, bool collective);
CT_INTERNAL void
ct_train_shard_bounds(const ct_train_shard *sh, int64_t rank, int64_t *lo, int64_t *hi);
/* This rank's gradient segment (n floats), to bind as the store's gradients
 * (ct_params_bind_grads): the others read it. */
CT_INTERNAL float *ct_train_shard_grads(const ct_train_shard *sh);
/* Waits for every rank's gradients, then sets the segment's [lo, hi) to the mean over ranks
 * (summed in rank order); *ok (if not NULL): no inf or NaN in this rank's part; *sumsq (if not
 * NULL): the sum of that part's squares, in double, the same bits for any thread count. */
CT_INTERNAL ct_status ct_train_shard_reduce(ct_train_shard *sh, bool *ok, double *sumsq);
/* The segment's [lo, hi) *= scale. */
CT_INTERNAL void ct_train_shard_scale(const ct_train_shard *sh, float scale);
/* The segment's [lo, hi) clamped to [-clip, clip] (ct_optim_clip_grad_value on the part). */
CT_INTERNAL void ct_train_shard_clamp(const ct_train_shard *sh, float clip);
/* After the update: publishes weights[lo, hi), copies every other rank's part into weights
 * and zeroes the segment outside [lo, hi). */
CT_INTERNAL ct_status ct_train_shard_gather(ct_train_shard *sh, float *weights);
/* Instead of gather when the update is skipped: waits until no rank reads this one's
 * gradients, which may then be cleared. */
CT_INTERNAL ct_status ct_train_shard_settle(ct_train_shard *sh);
/* Every rank's part of buf (n floats) to every rank: an optimizer moment made whole. */
CT_INTERNAL ct_status ct_train_shard_share_buffer(ct_train_shard *sh, float *buf);

/* ---- the trainer ---- */

/* CT_STRATEGY_LOCAL_SGD's state (local_sgd.c). */
typedef struct ct_train_lsgd ct_train_lsgd;

/* An evaluation engine as the trainer runs it: the engine given, its metric set and state. */
typedef struct ct_train_engine {
    ct_eval_engine e;
    ct_metrics *m;
    bool ran;
    bool feeds_monitor, feeds_early_stop; /* the monitored metrics are among its values */
    bool feeds_schedule;                  /* and the metric a plateau schedule follows */
    int64_t last_step;                    /* the step of its last cadence run; -1 none */
    ct_loader_state resume_state;         /* parsed by a resume (state.c) before any is applied */
} ct_train_engine;

/* The training values on_log reports: train/loss, train/lr, train/grad_norm, train/skipped,
 * train/spikes, local SGD's train/averages and train/average_ms, one per loss part, and the
 * parameter-server strategy's. */
#define CT_TRAIN_VALUES    (7 + CT_LOSS_MAX_PARTS + CT_TRAIN_PS_VALUES)
/* The parameter-server strategy's: staleness mean and max, pull and push waits, and the share
 * of updates of each of the first CT_PS_MAX_SHARES workers. */
#define CT_PS_MAX_SHARES   32
#define CT_TRAIN_PS_VALUES (4 + CT_PS_MAX_SHARES)

/* The parameter-server strategy's state (ps.c). */
typedef struct ct_train_ps ct_train_ps;

/* A gradient bucket (buckets.c). */
typedef struct ct_train_bucket {
    int64_t start, n; /* a range of the flat gradient buffer */
    int64_t n_params; /* tensors in it */
    int64_t pending;  /* of those, the ones whose gradient is not final yet in this pass */
    bool started;     /* its reduction is in flight */
    ct_comm_request req;
} ct_train_bucket;

/* The step profile (profile.c): this step's phase times so far, the totals, and the last
 * CT_PROFILE_MEDIAN_STEPS steps' phase times and wall time in a ring for the medians. Allocated
 * at create when profiling is on; the loop then only reads the clock and adds. */
typedef struct ct_train_profile {
    double fit_start, step_start, mark; /* CLOCK_MONOTONIC seconds; mark: the last reading */
    double wall;                        /* the last fit's wall time, once it ended */
    double cur[CT_PROFILE_PHASE_COUNT];
    double total[CT_PROFILE_PHASE_COUNT];
    int64_t steps;
    double ring[CT_PROFILE_MEDIAN_STEPS][CT_PROFILE_PHASE_COUNT + 1]; /* phases, then wall */
    bool ran;                                                         /* a fit has started */
    /* CT_PROFILE_MODE_LAYERS: the model's layers (ct_model_layer_name) and the seconds the
       graph adds up for each (ct_graph_set_layer_times) during a fit */
    ct_profile_layer *layers;
    double *layer_fwd, *layer_bwd;
    int64_t n_layers;
} ct_train_profile;

/* The trainer. model, params, opt, sched, train and task are ct_trainer_params' parts as given,
 * and p holds the rest (bucket_bytes resolved at create); comm is p.comm or, without one, the
 * trainer's own single-process communicator. */
struct ct_trainer {
    ct_ctx *ctx;
    ct_model *model;
    ct_params *params;
    ct_optim *opt;
    ct_schedule *sched;
    const char *sched_metric; /* what a metric-driven schedule follows; NULL otherwise */
    ct_comm *comm;
    bool own_comm;
    ct_task task;
    ct_loader *train;
    ct_train_engine *engines;
    int64_t n_engines, engines_cap; /* engines made so far, engines allocated */
    ct_trainer_params p;
    ct_graph *g;
    int64_t n_classes;
    bool has_monitor, has_es;
    ct_monitor monitor;
    ct_early_stop es;
    ct_ema *ema;
    int64_t resumed_step; /* the checkpoint resumed from, which retention spares; -1 none */
    ct_params *ema_store; /* with EMA and checkpoints: the EMA weights laid out as the model's
                             store, for ema.safetensors */
    ct_nonfinite_policy nf;
    ct_spike_detector spike;
    double spike_sum;    /* the current accumulation window's finite losses and their count: */
    int64_t spike_count; /* the step's loss for the spike detector */
    int64_t window_start, window_end; /* the window being ended: its batches in the epoch */
    int64_t step, epoch, skipped;
    int64_t last_saved_step;  /* -1: none saved by this trainer yet */
    int64_t record_marks[2];  /* the caller's record counts, kept with each checkpoint; -1: none */
    bool save_due, save_best; /* a checkpoint (a best one) is owed for the current step */
    int64_t replace_upto;     /* saves of steps up to this one replace an existing checkpoint: the
                                 abandoned continuation after a resume (INT64_MAX) or a rollback
                                 (the last step saved before it); -1: none */
    bool stop;                /* early stopping or a callback's CT_STOP */
    bool stop_asked;          /* several ranks: a callback's CT_STOP on this rank, which becomes
                                 stop where the ranks agree (ct_train_agree_interrupt) */
    bool interrupt;           /* on_batch's CT_STOP: end after this step and its evaluations */
    double comm_seconds;      /* spent in the gradient all-reduce (several ranks only) */
    double straggle_since;    /* p.straggler_rank: when this rank's step began */
    bool tuning;              /* p.adapt_threads in this fit (tune.c) */
    ct_tune tune;
    double tune_since, tune_comm; /* the step's start: the clock and comm_seconds */
    bool want_shard;              /* shard_optimizer decided for sharding (at create) */
    ct_train_shard *shard;        /* the sharded update's window during a fit, or NULL */
    ct_train_lsgd *lsgd;          /* CT_STRATEGY_LOCAL_SGD's state (local_sgd.c), or NULL */
    bool moments_whole;           /* the sharded moments were shared since the last update */
    /* gradient buckets (several ranks, bucket_bytes > 0): ranges of the flat gradient buffer,
       the last parameters first, as the backward pass finishes them */
    ct_train_bucket *buckets;
    int64_t n_buckets;
    int64_t *param_start;  /* offset in the flat buffer of each trainable tensor, ascending */
    int64_t *param_bucket; /* its bucket */
    int64_t next_bucket;   /* the next bucket to start: they start in index order */
    int64_t n_trainable;
    /* several ranks: each rank's loader epoch and next batch and its dropout stream and
       counter ([n_rank_pos][4]), gathered at every checkpoint and saved per rank */
    uint64_t *rank_pos;
    int64_t n_rank_pos;
    ct_status bucket_status; /* the first failure to start a bucket's reduction */
    /* the training log window */
    double window_loss;
    int64_t window_count;
    /* the window's sums over every rank as a checkpoint saves them: loss, count, then each
       loss part's sum and count (the resumed run starts its window from them) */
    double saved_window[2 + 2 * CT_LOSS_MAX_PARTS];
    /* the task's loss parts: names (in part_text), "train/loss/<name>", this batch's tensors
       and the log window's sums and counts */
    char *part_text;
    size_t part_text_size;
    const char *part_name[CT_LOSS_MAX_PARTS];
    char part_log[CT_LOSS_MAX_PARTS][CT_METRIC_NAME_MAX];
    int64_t n_parts;
    ct_tensor *parts[CT_LOSS_MAX_PARTS];
    double part_sum[CT_LOSS_MAX_PARTS];
    int64_t part_count[CT_LOSS_MAX_PARTS];
    float grad_norm;
    ct_metric_value train_values[CT_TRAIN_VALUES];
    int64_t n_train_values;
    /* rollback: the last good state */
    unsigned char *snap;
    size_t snap_bytes;
    int64_t snap_step, snap_opt_steps;
    ct_schedule_state snap_sched;
    ct_train_profile *prof; /* NULL: profiling off */
    ct_tensor *root;        /* the loss the last training backward pass started from (a step
                               tensor: valid until the graph's next reset) */
    ct_train_ps *ps;        /* strategy parameter_server: its state; NULL otherwise */
    int64_t step_before;    /* under it, the global step before rank 0's last exchange */
};

/* Whether the step just made crossed a multiple of every (> 0): the step grows by one, or under
 * the parameter-server strategy by every update the servers applied since rank 0's last one. */
static inline bool ct_train_crossed(const ct_trainer *t, int64_t every) {
    int64_t before = t->ps ? t->step_before : t->step - 1;
    return every > 0 && t->step / every != before / every;
}

/* ps.c: the strategy's checks and state at create (none for another strategy), and its end. */
CT_INTERNAL ct_status ct_train_ps_create(ct_trainer *t);
CT_INTERNAL void ct_train_ps_destroy(ct_trainer *t);
/* ps.c: fit under the strategy: rank 0 runs fit.c's loop (ct_train_fit_loop) alone, the other
 * workers their own, the servers their service loop; then every rank gets rank 0's result. */
CT_INTERNAL ct_status ct_train_ps_fit(ct_trainer *t);
/* ps.c: rank 0's window end: its gradient checked, clipped and pushed, the weights pulled. */
CT_INTERNAL ct_status ct_train_ps_step(ct_trainer *t, bool loss_ok);
/* ps.c: rank 0, before a checkpoint: every shard's weights, optimizer state and the workers'
 * positions, consistent at one global step (t->step becomes it). */
CT_INTERNAL ct_status ct_train_ps_gather(ct_trainer *t);
/* ps.c: rank 0, at the end of its loop: the servers take no more updates. */
CT_INTERNAL ct_status ct_train_ps_stop(ct_trainer *t);
/* ps.c: rank 0's log window: the strategy's values appended to train_values from k on; the new
 * count. */
CT_INTERNAL int64_t ct_train_ps_values(ct_trainer *t, int64_t k);
/* ps.c: the run's communicator (the world size checkpoints record), and the one-process one
 * that rank 0's loop and evaluations run on. */
CT_INTERNAL ct_comm *ct_train_ps_world(const ct_trainer *t);
CT_INTERNAL ct_comm *ct_train_ps_solo(const ct_trainer *t);
/* fit.c: the loop itself (fit without the sharded update's window). */
CT_INTERNAL ct_status ct_train_fit_loop(ct_trainer *t);

/* profile.c: the profile's buffers when profiling is on (at create: none in the loop), and
 * their release. */
CT_INTERNAL ct_status ct_train_profile_create(ct_trainer *t);
CT_INTERNAL void ct_train_profile_destroy(ct_trainer *t);
/* profile.c: CLOCK_MONOTONIC in seconds. */
CT_INTERNAL double ct_train_clock(void);
/* profile.c: a fit starts (the profile starts over) and ends (the time since the last step
 * goes into the totals). */
CT_INTERNAL void ct_train_profile_begin(ct_trainer *t);
CT_INTERNAL void ct_train_profile_end(ct_trainer *t);
/* profile.c: a step (window) has ended at the profile's mark (the last reading): its times into
 * the totals and the ring. */
CT_INTERNAL void ct_train_profile_step(ct_trainer *t);

/* straggle.c: around each training step (window) of p.straggler_rank, which then sleeps as
 * long as the step took; nothing on the other ranks. */
CT_INTERNAL void ct_train_straggle_start(ct_trainer *t);
CT_INTERNAL void ct_train_straggle_end(ct_trainer *t);

/* The profile's mark set to now, so that the next ct_train_lap measures from here. */
static inline void ct_train_mark(ct_trainer *t) {
    if (t->prof) t->prof->mark = ct_train_clock();
}
/* The time since the mark added to phase ph; the mark moves to now. */
static inline void ct_train_lap(ct_trainer *t, ct_profile_phase ph) {
    if (!t->prof) return;
    double now = ct_train_clock();
    t->prof->cur[ph] += now - t->prof->mark;
    t->prof->mark = now;
}

/* fit.c: runs a callback's result through the stop rule: CT_STOP ends the run cleanly (with
 * several ranks, where they agree); any other status is returned. */
CT_INTERNAL ct_status ct_train_event(ct_trainer *t, ct_status s);
/* fit.c: whether any rank was interrupted or asked to stop (every rank then ends at the same
 * point). */
CT_INTERNAL ct_status ct_train_agree_interrupt(ct_trainer *t);
/* fit.c: moves a loader to the start of its next epoch; the rest of this one is not read. */
CT_INTERNAL ct_status ct_train_skip_epoch(ct_loader *l);
/* fit.c: a new log window: nothing summed yet. */
CT_INTERNAL void ct_train_reset_window(ct_trainer *t);
/* fit.c: the log window's sums over every rank (loss, count, then each part's sum and count)
 * into sums[2 + 2 * CT_LOSS_MAX_PARTS], on every rank; the window itself is left as it is. */
CT_INTERNAL ct_status ct_train_window_sums(ct_trainer *t, double *sums);
/* fit.c: the log window from sums laid out as ct_train_window_sums's. */
CT_INTERNAL void ct_train_set_window(ct_trainer *t, const double *sums);

/* task.c: forward and loss of one batch; *items is the number of loss terms (samples or
 * tokens). NULL on failure (ct_train_failure gives the status). */
CT_INTERNAL ct_tensor *ct_train_forward_loss(ct_trainer *t,
                                             const ct_batch *b,
                                             const char *split,
                                             ct_tensor **out,
                                             ct_tensor **target,
                                             int64_t *items);
/* task.c: the status of a failed forward or loss, with `where` added to its message. */
CT_INTERNAL ct_status ct_train_failure(ct_trainer *t, const char *where);

/* eval.c: rank 0's buffers (and with values, its trainable weights) to every rank. */
CT_INTERNAL ct_status ct_train_sync_replicas(ct_trainer *t, bool values);
/* eval.c: runs the engines due at an epoch's end (epoch: the number just finished, from 1) or
 * after a step. */
CT_INTERNAL ct_status ct_train_evaluate_due(ct_trainer *t, bool epoch_end, int64_t epoch);

/* examine.c: an incident's examination, read off the graph's tape of the window's last
 * micro-batch: in's activations (acts[0..n), n the model's layer count, or 0) and where the
 * first inf or NaN appeared (nonfinite_*); intact: the weights are still those the step's
 * forward pass read (no update was made), so its backward pass can be run again. */
CT_INTERNAL void
ct_train_examine(ct_trainer *t, ct_incident *in, const ct_tensor **acts, int64_t n, bool intact);

/* update.c: the rollback snapshot's size for the trainer's store and optimizer. */
CT_INTERNAL size_t ct_train_snapshot_bytes(const ct_params *params, const ct_optim *opt);
/* update.c: copies the store, the optimizer's buffers, step count and the schedule into the
 * rollback snapshot (save) or back out of it. */
CT_INTERNAL void ct_train_snapshot(ct_trainer *t, bool save);
/* update.c: the end of an accumulation window: reduce, check, clip and apply the gradients,
 * or act on a non-finite loss (loss_ok false) or gradient as the policy says. */
CT_INTERNAL ct_status ct_train_finish_window(ct_trainer *t, bool loss_ok);
/* update.c: the sharded update's window for one fit (collective), and its end. */
CT_INTERNAL ct_status ct_train_open_shard(ct_trainer *t);
CT_INTERNAL void ct_train_close_shard(ct_trainer *t, bool collective);

/* buckets.c: the gradient buckets of bucket_bytes over the trainable tensors (at create); arming
 * them for the backward pass of a window's last micro-batch; and the sum over ranks of every
 * bucket, waited for. */
CT_INTERNAL ct_status ct_train_build_buckets(ct_trainer *t);
CT_INTERNAL void ct_train_arm_buckets(ct_trainer *t);
CT_INTERNAL ct_status ct_train_reduce_buckets(ct_trainer *t);

/* state.c: a new allocated store with the same tensors (names, shapes, kinds) as src. */
CT_INTERNAL ct_status ct_train_mirror_store(ct_ctx *ctx, const ct_params *src, ct_params **out);
/* state.c: the dropout stream of a rank, derived from the run's. */
CT_INTERNAL ct_rng ct_train_rank_stream(ct_rng base, int64_t rank);
/* state.c: writes the checkpoint owed for the current step (save_due or save_best), once. */
CT_INTERNAL ct_status ct_train_flush_checkpoint(ct_trainer *t);
/* state.c: a sharded update's optimizer moments made whole on every rank. */
CT_INTERNAL ct_status ct_train_share_moments(ct_trainer *t);

/* Whether this rank's gradients are its own to check and apply: one process, or local SGD
 * (nothing is exchanged between two averages). */
static inline bool ct_train_solo(const ct_trainer *t) {
    return ct_comm_world_size(t->comm) == 1 || t->lsgd != NULL;
}

/* local_sgd.c: the strategy's checks against the other parameters (CT_ERR_CONFIG) and its
 * buffers, at create before the exchange is planned (which it turns off); their release. */
CT_INTERNAL ct_status ct_train_lsgd_create(ct_trainer *t);
CT_INTERNAL void ct_train_lsgd_destroy(ct_trainer *t);
/* local_sgd.c: at a fit's start, the weights (every rank's the same) are the anchor. */
CT_INTERNAL void ct_train_lsgd_begin(ct_trainer *t);
/* local_sgd.c: after each step; collective at an average point (every `steps` steps, an
 * epoch's last step, max_steps): the average, the outer step and the agreement on stops
 * asked for since the last one. */
CT_INTERNAL ct_status ct_train_lsgd_after_step(ct_trainer *t, bool epoch_last);
/* local_sgd.c: whether a multiple of `every` lies between the last average but one
 * (excluded) and the step just made, which ended with an average. */
CT_INTERNAL bool ct_train_lsgd_due(const ct_trainer *t, int64_t every);
/* local_sgd.c: the log window's train/averages and train/average_ms from v[k]; returns the
 * new count; the window's sums start again. */
CT_INTERNAL int64_t ct_train_lsgd_values(ct_trainer *t, ct_metric_value *v, int64_t k);
/* Whether a cadence of `every` steps (records, evaluations, checkpoints) falls due at the step
 * just made: at its multiples; under local SGD at the first average at or after one, so that
 * what is recorded, evaluated and saved are the averaged weights. */
static inline bool ct_train_due(const ct_trainer *t, int64_t every) {
    if (every <= 0) return false;
    return t->lsgd ? ct_train_lsgd_due(t, every) : ct_train_crossed(t, every);
}
struct json_t; /* jansson's JSON value */
/* local_sgd.c: the outer optimizer's state for state.json ({} without outer momentum), NULL
 * when out of memory; and its restore from a checkpoint's (o may be NULL: missing). */
CT_INTERNAL struct json_t *ct_train_lsgd_state(const ct_trainer *t);
CT_INTERNAL ct_status ct_train_lsgd_restore(ct_trainer *t,
                                            const struct json_t *o,
                                            const char *path);

#endif /* CT_TRAIN_INTERNAL_H */
