/*
 * trainer.h - the training loop: one training engine and any number of evaluation engines,
 * gradient accumulation, clipping, a learning-rate schedule, EMA weights for evaluation,
 * best-metric monitoring, early stopping, the non-finite policy and event callbacks.
 *
 * A step is one optimizer update (with accumulation, accum_steps micro-batches); max_steps and
 * the step numbers given to callbacks count these. Every cross-process reduction (gradients,
 * metric sums) goes through the communicator, so data parallelism is the communicator's
 * business; with NULL the trainer uses the single-process one.
 *
 * Ownership: the trainer borrows everything ct_trainer_params points to (model, store,
 * optimizer, schedule, loaders, communicator, metric specs and options) for its lifetime; it
 * owns its graph, its metric sets and its EMA. Values handed to callbacks are valid during the
 * call only.
 */
#ifndef CTRAIN_TRAINER_H
#define CTRAIN_TRAINER_H

#include "ctrain/data.h"
#include "ctrain/dist.h"
#include "ctrain/metrics.h"
#include "ctrain/model.h"
#include "ctrain/optim.h"
#include "ctrain/policy.h"
#include "ctrain/rng.h"
#include "ctrain/schedule.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ct_task_kind {
    CT_TASK_CLASSIFICATION = 0, /* logits [B, C], y [B] classes; cross-entropy */
    CT_TASK_REGRESSION,         /* predictions and y of the same element count; MSE */
    CT_TASK_LANGUAGE_MODEL,     /* logits [B, T, V], y [B, T] tokens; cross-entropy per token */
    CT_TASK_KIND_COUNT
} ct_task_kind;

typedef struct ct_trainer ct_trainer;
struct json_t; /* jansson's JSON value */

/*
 * What a user writes; the defaults suit supervised tasks, so a classifier sets only `kind`.
 *   prep_batch: the model input and targets for a batch (split is "train" or an engine key);
 *               default: x and y of the batch as step tensors.
 *   loss:       a scalar loss from the model output and targets; default by kind (or
 *               loss_parts, below, for a loss reported in named parts).
 * Both return NULL on failure (with the graph's sticky status or CT_FAIL in the context).
 */
typedef struct ct_task {
    ct_plugin_tag tag; /* CT_PLUGIN_TASK in a plugin, 0 in the library (status.h) */
    ct_task_kind kind;
    ct_status (*prep_batch)(void *user,
                            ct_graph *g,
                            const ct_batch *batch,
                            const char *split,
                            ct_tensor **input,
                            ct_tensor **target);
    ct_tensor *(*loss)(void *user, ct_graph *g, ct_tensor *output, ct_tensor *target);
    void *user;
    /* The task's own state in checkpoints (a running normaliser, a prototype bank), as JSON
       (jansson): save_state adds its keys to `state` (state.json's "extra" object) at every
       checkpoint; load_state reads them back at ct_trainer_resume (a checkpoint without
       "extra" fails before it is called). Not rolled back by on_nonfinite rollback. Both NULL:
       none. */
    ct_status (*save_state)(void *user, struct json_t *state);
    ct_status (*load_state)(void *user, const struct json_t *state);
    /* A loss in named parts, instead of `loss`: loss_parts returns the total (the value that is
       backpropagated) and sets parts[k] to part k, a scalar f32 tensor (or leaves it NULL for a
       batch without that part), for the names listed in loss_components ("ce,aux", at most
       CT_LOSS_MAX_PARTS, each without '/' or ','). Training records train/loss/<name> (the
       mean over the log window), evaluation engines <key>/loss/<name>. Both NULL: none. */
    const char *loss_components;
    ct_tensor *(*loss_parts)(
        void *user, ct_graph *g, ct_tensor *output, ct_tensor *target, ct_tensor **parts);
    /* The whole forward computation of a batch, for what prep_batch + model + loss cannot say
       (two passes, a teacher model, a custom model call): returns the scalar loss (the trainer
       runs the backward pass, accumulation, clipping and the update) and sets *output and
       *target for the engines' metrics (the model's output for the batch and its targets).
       train_step serves training batches, eval_step evaluation batches (in no-grad mode);
       either NULL: the default path (prep_batch, the model, loss or loss_parts). */
    ct_tensor *(*train_step)(void *user,
                             ct_graph *g,
                             ct_model *model,
                             const ct_batch *batch,
                             ct_tensor **output,
                             ct_tensor **target);
    ct_tensor *(*eval_step)(void *user,
                            ct_graph *g,
                            ct_model *model,
                            const ct_batch *batch,
                            ct_tensor **output,
                            ct_tensor **target);
} ct_task;

#define CT_LOSS_MAX_PARTS 8

/* The model's output and the targets as the losses and metrics take them, for a task of `kind`:
 * a language model's [B, T, V] output becomes [B*T, V] and its [B, T] targets [B*T]; a
 * regression output with as many elements as the targets but another shape takes theirs;
 * anything else is left as it is. The new tensors are step tensors of g. Returns CT_OK, or the
 * graph's status when a reshape failed (what it would have set is then NULL); with *output or
 * *target NULL, nothing is done and the graph's status is returned. */
CT_API ct_status ct_task_flatten(ct_graph *g,
                                 ct_task_kind kind,
                                 ct_tensor **output,
                                 ct_tensor **target);

/* An evaluation engine, declared as data. Metric values are named "<key>/<metric>". */
typedef struct ct_eval_engine {
    const char *key;               /* "valid", "test"; unique, no '/' */
    ct_loader *loader;             /* CT_SHARD_EVAL sharding for exact sharded metrics; NULL:
                                      the engine's pass is ct_trainer_params.evaluate */
    int64_t every_epochs;          /* run after every N epochs; 0 = not by epochs */
    int64_t every_steps;           /* run after every N steps; 0 = not by steps */
    const ct_metric_spec *metrics; /* besides the loss, which is always "<key>/loss"; none
                                     (n_metrics 0): the task's defaults: accuracy for
                                     classification, mse and mae for regression, perplexity
                                     for language models */
    int64_t n_metrics;
} ct_eval_engine;

/* What on_incident reports: a step that a policy stopped, skipped or rolled back, or a loss
 * spike. Strings are static. */
typedef enum ct_incident_kind {
    CT_INCIDENT_NONFINITE = 0, /* a NaN or inf in the loss or the gradients (on_nonfinite) */
    CT_INCIDENT_SPIKE,         /* a loss spike (on_spike) */
    CT_INCIDENT_KIND_COUNT
} ct_incident_kind;

typedef struct ct_incident {
    ct_incident_kind kind;
    const char *action;  /* "stop", "skip", "rollback" or, for a spike, "warn" */
    int64_t step;        /* the step being made, from 1 (as the warnings number it) */
    int64_t epoch;       /* from 1 */
    int64_t batch_first; /* the window's micro-batches: indices in the epoch, from 0 */
    int64_t batch_last;  /* inclusive */
    double loss;         /* the window's mean finite loss; NaN when none was finite */
    double grad_norm;    /* before clipping, when measured (clipping, spikes on grad_norm);
                            else NaN */
    double value;        /* spikes: the value judged (loss or grad_norm); else NaN */
    double median;       /* spikes: the window's median, deviation and threshold; else NaN */
    double deviation;
    double threshold;
    bool loss_finite; /* nonfinite: which of the two held the NaN or inf */
    bool grads_finite;
    ct_rng rng; /* the dropout stream's state (ct_graph_rng) at the incident */
    /* The step as the graph recorded the window's last micro-batch, read off its tape (valid
       during on_incident only): activations[i] is model layer i's output (the newest node
       ct_model_layer_name(i) recorded), NULL for a layer that recorded none or whose output
       is not f32; n_activations is the model's layer count (0 when out of memory). */
    const ct_tensor *const *activations;
    int64_t n_activations;
    /* Where the first inf or NaN appeared: nonfinite_pass "forward" for the oldest node whose
       output holds one; else "backward" for the first node whose backward leaves one in a
       gradient, the window's last backward pass run again over the step's graph (one process,
       no update made yet), or failing that the first parameter, in the backward pass's order
       (from the loss down), whose gradient holds one; NULL when neither. nonfinite_layer: that
       node's model layer, -1 for one outside the model's layers (the loss); nonfinite_op: its
       op's name; nonfinite_param: the parameter whose gradient it was (backward; NULL for an
       activation's gradient and in the forward pass). */
    const char *nonfinite_pass;
    int64_t nonfinite_layer;
    const char *nonfinite_op;
    const char *nonfinite_param;
} ct_incident;

/* Events. Each returns CT_OK to go on or another status to end the run with it; CT_STOP
 * (see status.h) ends it cleanly. values/n: the metrics just computed. */
typedef struct ct_trainer_callbacks {
    ct_status (*on_fit_start)(void *user, ct_trainer *t);
    /* every steps_per_loop steps, and for the partial window at each epoch's end (or when
       max_steps ends the run): "train/loss" (mean over the window), "train/lr", with
       clipping "train/grad_norm", under on_nonfinite skip "train/skipped" (the steps
       skipped so far, as ct_trainer_skipped_steps) and with spike detection "train/spikes"
       (the spikes so far, as ct_trainer_spikes) */
    ct_status (*on_log)(void *user, ct_trainer *t, const ct_metric_value *values, int64_t n);
    ct_status (*on_eval_end)(
        void *user, ct_trainer *t, const char *key, const ct_metric_value *values, int64_t n);
    /* the monitored metric improved: the moment to write a best checkpoint */
    ct_status (*on_best)(void *user, ct_trainer *t, const char *metric, double value);
    ct_status (*on_epoch_end)(void *user, ct_trainer *t, int64_t epoch);
    ct_status (*on_fit_end)(void *user, ct_trainer *t);
    void *user;
    /* fit is ending with a failure (status s, message in ct_last_error); called once, before
       fit returns s. Its own result is ignored. May be NULL. After CT_ERR_NONFINITE the model's
       weights may hold the non-finite update (see ct_trainer_fit): do not save them. */
    void (*on_exception)(void *user, ct_trainer *t, ct_status s);
    /* after each training micro-batch (its loss, NaN when not finite) and each evaluation
       batch (loss NaN), for progress displays and interruption: split is "train" or an engine
       key; done and total count the batches of this epoch or evaluation. CT_STOP interrupts:
       the run ends after the current step and the evaluations due at it (an evaluation under
       way finishes; an epoch cut short leaves its end-of-epoch evaluations to the resumed run),
       with its checkpoint; see ct_trainer_interrupted. May be NULL. */
    ct_status (*on_batch)(
        void *user, ct_trainer *t, const char *split, int64_t done, int64_t total, double loss);
    /* before each optimizer update, with the gradients it will apply (averaged over ranks,
       checked and clipped) in ct_params_grads: for gradient statistics. May be NULL. */
    ct_status (*on_grads)(void *user, ct_trainer *t);
    /* an epoch begins (epoch counts from 1, as on_epoch_end's); not called for an epoch a
       resumed run enters in the middle. May be NULL. */
    ct_status (*on_epoch_start)(void *user, ct_trainer *t, int64_t epoch);
    /* a training micro-batch (an iteration; a step is accum_steps of them): start, before its
       forward pass (batch: its index in the epoch, from 0); end, after its backward pass and,
       when it ends a step, after the update and the evaluations due at that step (loss NaN
       when not finite). May be NULL. */
    ct_status (*on_iteration_start)(void *user, ct_trainer *t, int64_t batch);
    ct_status (*on_iteration_end)(void *user, ct_trainer *t, int64_t batch, double loss);
    /* an evaluation engine begins (on_eval_end follows with its metrics). May be NULL. */
    ct_status (*on_eval_start)(void *user, ct_trainer *t, const char *key);
    /* the process that writes checkpoints (rank 0) is about to save the one of
       ct_trainer_step (best: as the best one too); an error cancels the save and ends fit
       with it, leaving the earlier checkpoints as they were (CT_STOP saves, then stops).
       May be NULL. */
    ct_status (*on_save)(void *user, ct_trainer *t, bool best);
    /* the non-finite policy's rollback has put back the last good state, that of `step` (now
       ct_trainer_step): what was recorded after that step belongs to a continuation that is
       abandoned, and the steps after it are made again. May be NULL. */
    ct_status (*on_rollback)(void *user, ct_trainer *t, int64_t step);
    /* a verification hook: a file of the checkpoint on_save announced is written under its
       temporary name, the checkpoint not yet published (ct_checkpoint_save_params.on_file);
       `ctrain verify-resume` ends the process here to test a save cut short. An error cancels
       the save and ends fit with it. May be NULL. */
    ct_status (*on_save_file)(void *user, ct_trainer *t, const char *file);
    /* a step is stopped, skipped or rolled back by on_nonfinite, or a loss spike is detected
       (whatever on_spike's action), before the policy acts: the gradients and weights are
       those the step found (after the all-reduce and before clipping; under on_nonfinite stop
       or rollback an update that checks as it goes may have written non-finite weights).
       Called on every rank; it cannot fail the run. May be NULL. */
    void (*on_incident)(void *user, ct_trainer *t, const ct_incident *info);
} ct_trainer_callbacks;

/* ct_trainer_params.strategy: how the ranks of an MPI run combine their work
 * (docs/distributed.md). */
typedef enum ct_trainer_strategy {
    /* every step: every rank's gradients combined, every rank's weights the same (default) */
    CT_STRATEGY_SYNC = 0,
    /* server ranks hold shards of the weights and optimizer state and apply each worker's
       gradient as it arrives; workers pull weights and push gradients asynchronously */
    CT_STRATEGY_PARAMETER_SERVER,
    /* every rank takes local steps with its own optimizer; the weights are averaged every few
       steps */
    CT_STRATEGY_LOCAL_SGD,
    CT_STRATEGY_COUNT
} ct_trainer_strategy;

/* ct_trainer_params.local_sgd: CT_STRATEGY_LOCAL_SGD's cadence and outer optimizer
 * (docs/distributed.md, Local SGD). Each rank steps its own optimizer on its own shard; every
 * `steps` steps (and at each epoch's and the run's end) the ranks average their weights, their
 * optimizer's moments and their EMA. The outer optimizer then moves the weights of the last
 * average (the anchor) along the averaged change: g = anchor - mean(weights); m = momentum * m
 * + g; anchor -= lr * (g + momentum * m) (Nesterov, as DiLoCo); every rank continues from the
 * anchor. lr 1 and momentum 0 (the defaults) are plain averaging. */
typedef struct ct_local_sgd_params {
    int64_t steps;        /* optimizer steps between averages, >= 1; default 16 */
    float outer_lr;       /* > 0; default 1 */
    float outer_momentum; /* in [0, 1); default 0 */
} ct_local_sgd_params;

/* ct_trainer_params.bucket_bytes: chosen from the communicator's layout. */
#define CT_BUCKET_BYTES_AUTO (-1)

/* ct_trainer_params.shard_optimizer: whether the ranks of a distributed run split the
 * optimizer update between them over shared memory (docs/distributed.md). */
typedef enum ct_update_sharding {
    /* when it can: every rank on one machine, bucket_bytes left AUTO and no on_grads handler
       (which sees the whole gradient) */
    CT_UPDATE_SHARDING_AUTO = 0,
    /* all-reduce the gradients; every rank updates every weight */
    CT_UPDATE_SHARDING_NEVER,
    /* shard, or refuse to create the trainer (CT_ERR_CONFIG) where it cannot: ranks on several
       machines, an on_grads handler */
    CT_UPDATE_SHARDING_ALWAYS,
    CT_UPDATE_SHARDING_COUNT
} ct_update_sharding;

/* ct_trainer_params.profile: whether fit measures where a step's time goes (ct_trainer_profile;
 * docs/trainer.md). */
typedef enum ct_profile_mode {
    CT_PROFILE_MODE_OFF = 0, /* nothing is measured: one branch per phase */
    CT_PROFILE_MODE_STEPS,   /* the phases of every step: a few clock readings per step */
    CT_PROFILE_MODE_LAYERS,  /* and each layer's forward and backward time (more readings) */
    CT_PROFILE_MODE_COUNT
} ct_profile_mode;

/* The phases of a step, as ct_trainer_profile_info reports them. */
typedef enum ct_profile_phase {
    CT_PROFILE_DATA = 0,   /* waiting for the training loader's next batch */
    CT_PROFILE_FORWARD,    /* the batch's forward pass and loss (task hooks included) */
    CT_PROFILE_BACKWARD,   /* the backward pass (bucketed all-reduces start inside it) */
    CT_PROFILE_COMM,       /* exchanging gradients: ct_trainer_comm_seconds's time */
    CT_PROFILE_OPTIMIZER,  /* the update: checks, clipping, on_grads, the step, schedule, EMA */
    CT_PROFILE_EVAL,       /* evaluation passes (their on_eval_end records included) */
    CT_PROFILE_CHECKPOINT, /* writing checkpoints */
    CT_PROFILE_LOGGING,    /* on_log (records) and on_batch (progress) */
    CT_PROFILE_OVERHEAD,   /* the rest of the step's wall time: the trainer's own */
    CT_PROFILE_PHASE_COUNT
} ct_profile_phase;

/* A phase's name: "data", "forward", "backward", "comm", "optimizer", "eval", "checkpoint",
 * "logging", "overhead"; NULL out of range. */
CT_API const char *ct_profile_phase_name(ct_profile_phase p);

/* One layer's times (CT_PROFILE_MODE_LAYERS): totals over the fit's training batches. */
typedef struct ct_profile_layer {
    const char *name; /* the layer's name (its parameters' prefix), valid while the model lives */
    const char *type; /* its type ("linear"), likewise */
    double forward_seconds, backward_seconds;
} ct_profile_layer;

/* What ct_trainer_profile reports about the last fit. A step is an accumulation window: the
 * time from the end of the previous one (or the start of fit) to the end of this one, with the
 * evaluations, checkpoint and records it triggers; skipped and rolled-back windows count.
 * What follows the last step (the epoch's end, the final checkpoint) is in the totals only. */
typedef struct ct_trainer_profile_info {
    ct_profile_mode mode;
    int64_t steps;                         /* windows ended */
    int64_t median_steps;                  /* the last steps the medians are over (at most
                                              CT_PROFILE_MEDIAN_STEPS) */
    double wall_seconds;                   /* the fit's wall time: the totals add up to it */
    double total[CT_PROFILE_PHASE_COUNT];  /* seconds per phase */
    double median[CT_PROFILE_PHASE_COUNT]; /* per step, over the last median_steps steps */
    double median_wall;                    /* the step's wall time, likewise */
    const ct_profile_layer *layers;        /* in forward order; borrowed from the trainer until
                                              its next fit or destroy; NULL unless LAYERS */
    int64_t n_layers;
} ct_trainer_profile_info;

/* The steps whose times the medians are taken over: the last ones, in a ring. */
#define CT_PROFILE_MEDIAN_STEPS 4096

typedef struct ct_trainer_params {
    /* What is trained, borrowed for the trainer's lifetime. Required: model, store (the model's
       parameters), optim and train (the training loader). schedule: NULL = none; comm: NULL =
       one process; task: by default (zeroed) a classification with the default hooks; engines:
       n_engines of them, NULL for none (the array itself is read at create only). */
    ct_model *model;
    ct_params *store;
    ct_optim *optim;
    ct_schedule *schedule;
    ct_comm *comm;
    ct_task task;
    ct_loader *train;
    const ct_eval_engine *engines;
    int64_t n_engines;
    int64_t max_epochs;               /* default 1; 0 = no limit (then max_steps must be set) */
    int64_t max_steps;                /* default 0 = no limit */
    int64_t accum_steps;              /* micro-batches per step, default 1 */
    float grad_clip_norm;             /* clip the global L2 norm to it; 0 = off */
    float grad_clip_value;            /* clamp each gradient to [-v, v]; 0 = off */
    bool check_grads;                 /* check every gradient for NaN/inf at each update
                                         (default true); false: check the loss only. In one
                                         process without clipping or on_grads the update does
                                         it (ct_optim_step_checked; under on_nonfinite skip
                                         ct_optim_step_if_finite); with grad_clip_norm, the
                                         norm */
    int64_t steps_per_loop;           /* on_log cadence in steps, default 10 */
    int64_t limit_train_batches;      /* per epoch; 0 = all */
    int64_t limit_eval_batches;       /* per evaluation; 0 = all */
    bool dev_run;                     /* one batch of training and of every engine, then stop */
    uint64_t seed;                    /* the graph's RNG (dropout), default 0 */
    const ct_options *monitor;        /* metric, mode, min_delta (policy.h); NULL = none */
    const ct_options *early_stopping; /* policy.h; NULL = none */
    const ct_options *ema;            /* policy.h; NULL = none. Evaluation sees the EMA weights */
    const ct_options *nonfinite;      /* policy.h; NULL = on_nonfinite stop. rollback restores the
                                        weights, buffers, optimizer state, schedule and step
                                        count taken at fit start and at each finite epoch's end
                                        (not the EMA, monitor or early-stopping state) */
    const ct_options *spike;          /* policy.h (ct_spike_init); NULL = no spike detection.
                                        rollback restores what on_nonfinite rollback does */
    ct_trainer_callbacks callbacks;
    /* Checkpoints (checkpoint.h) under checkpoint_dir (borrowed; NULL = none): after every
       save_every_epochs epochs (default 1; 0 = not by epochs), every save_every_steps steps
       (0 = not by steps), whenever the monitor improves (then `best` points at it) and when
       fit ends without failure; keep the newest `keep` (0 = all) besides `latest`, `best` and
       the checkpoint resumed from. A step's checkpoint is written after all of its
       evaluations, epoch-end ones included, so it holds their monitor and early-stopping
       states. A failed save ends the run with its error. A fresh trainer never overwrites: a
       step already saved in the directory is an error; after a resume or a rollback, the
       later checkpoints of the abandoned continuation are replaced (with a warning). With EMA
       the shadow goes in ema.safetensors, written from one more copy of the store that the
       trainer keeps. In a distributed run rank 0 writes and broadcasts whether it worked. */
    const char *checkpoint_dir;
    int64_t save_every_epochs;
    int64_t save_every_steps;
    int64_t keep;
    /* The schedule (when given) is stepped after every optimizer step, or with
       schedule_per_epoch after every epoch (the epoch count drives it then, as PyTorch's
       scheduler.step() once per epoch). A metric-driven schedule ("plateau") is stepped with
       schedule_metric (borrowed; NULL = the monitor's metric, else "valid/loss") after every
       evaluation that computes it; no engine computing it is a CT_ERR_CONFIG at create. */
    bool schedule_per_epoch;
    const char *schedule_metric;
    /* Recorded in every checkpoint's state.json (borrowed; NULL or "" = none). A resume from a
       checkpoint that recorded a different one fails with CT_ERR_CONFIG: it was written by a
       run of another configuration. The command line passes its configuration fingerprint. */
    const char *fingerprint;
    /* Distributed runs (comm of world size > 1): checkpoints record the world size, and a
       resume with another one fails with CT_ERR_CONFIG unless this is set; then the weights,
       optimizer, schedule and counters are kept and the training loader restarts the saved
       epoch from its first batch (the shards have changed). */
    bool allow_world_size_change;
    /* Distributed runs: gradients are averaged in buckets of about this many bytes, each
       all-reduce started (non-blocking) during the backward pass of the step's last
       micro-batch as soon as its parameters' gradients are final, and all waited for before
       the update; 0 = one blocking all-reduce of the whole buffer after the backward pass.
       Default CT_BUCKET_BYTES_AUTO: 0 when every rank is on one machine (ct_comm_local_size
       == world size), else 1 MiB (docs/distributed.md). */
    int64_t bucket_bytes;
    /* Mixed precision: CT_F32 (default) or CT_BF16, which runs every forward and backward pass
       (training and evaluation) under bf16 autocast (ct_graph_set_autocast: matmul, linear and
       conv2d multiply bf16-rounded operands with f32 accumulation); parameters, gradients,
       optimizer state, losses and norms stay f32. */
    ct_dtype precision;
    /* Distributed runs on one machine: each rank sums every rank's gradients over its own
       part of the flat buffer through shared memory (ct_comm_shared), updates that part of
       the weights and optimizer state and copies the others' parts, instead of all-reducing
       the gradients and updating every weight on every rank (docs/distributed.md). The
       results are the all-reduce's (bitwise on 2 ranks without grad_clip_norm); the
       optimizer's moments are whole on every rank at each checkpoint and after fit. The
       shared memory lives from the start of each ct_trainer_fit to its end (collectively;
       after a failed fit it is left to MPI_Finalize), so creating and destroying the trainer
       are not collective. Under AUTO a fit whose shared memory cannot be made on some rank
       all-reduces instead, with a warning. Default CT_UPDATE_SHARDING_AUTO. */
    ct_update_sharding shard_optimizer;
    /* How the ranks combine their work. Default CT_STRATEGY_SYNC. */
    ct_trainer_strategy strategy;
    /* CT_STRATEGY_LOCAL_SGD's cadence and outer optimizer (ct_local_sgd_params). */
    ct_local_sgd_params local_sgd;
    /* For benchmarks of uneven machines: the rank that, after each of its training steps,
       sleeps as long as the step took (so it runs at half speed whatever the machine's
       noise); -1 (default): none. */
    int64_t straggler_rank;
    /* strategy CT_STRATEGY_PARAMETER_SERVER (docs/distributed.md): the last ps_servers ranks
       (default 1, fewer than the world size) are servers holding contiguous shards of the
       weights and optimizer state; the others are workers. A worker whose weights are more than
       ps_max_staleness updates behind waits (0: synchronous rounds; default -1: no bound); a
       worker other than rank 0 pulls the weights every ps_pull_every steps (default 1). Rank 0
       runs the loop's evaluations, records and checkpoints alone, and ct_trainer_evaluate runs
       on rank 0 alone (the others return CT_OK at once): its evaluation loaders are to be
       unsharded, its training loader sharded over the workers. */
    int64_t ps_servers;
    int64_t ps_max_staleness;
    int64_t ps_pull_every;
    /* Fit the context's thread count to the cores the run gets (src/train/tune.h,
       docs/performance.md): during each fit, from the count the context has at its start down
       to 1 and back, by measuring training steps at both counts when this process's threads
       wait for a core (another process is using it), and restored at the fit's end. Results
       do not depend on it. Not under CT_STRATEGY_PARAMETER_SERVER. Default false; an
       experiment sets it when its `threads` is 0. */
    bool adapt_threads;
    /* Measure where each step's time goes (ct_trainer_profile). Default CT_PROFILE_MODE_OFF. */
    ct_profile_mode profile;
    /* The pass of each engine without a loader (an experiment's decode engine): adds what it
       evaluates to m, the engine's metric set (reset before the call; it has no loss metric,
       and no task defaults when the engine names no metrics), with ct_metrics_update. The
       trainer then sums the set over the ranks (a rank that evaluates nothing adds nothing),
       reports the values with on_eval_end and feeds the policies from them, as for any
       engine. Called on every rank, in evaluation mode with the EMA weights in place, with
       evaluate_user and the engine's key. NULL: every engine needs a loader. */
    ct_status (*evaluate)(void *user, ct_trainer *t, const char *key, ct_metrics *m);
    void *evaluate_user;
} ct_trainer_params;

/* The defaults documented above; model, store, optim and train are NULL and must be set. */
CT_API ct_trainer_params ct_trainer_default_params(void);

/*
 * A trainer over p's model, store, optimizer, schedule, task, loaders and engines (p is read
 * at create; what it points to is borrowed). A missing required part fails with
 * CT_ERR_INVALID_ARG; two engines with the same key, a bad parameter or option, or a monitor
 * or early-stopping metric that no engine computes with CT_ERR_CONFIG naming it. *out is NULL
 * on failure.
 */
CT_API ct_status ct_trainer_create(ct_ctx *ctx, const ct_trainer_params *p, ct_trainer **out);
CT_API void ct_trainer_destroy(ct_trainer *t);

/*
 * Continues from a checkpoint of checkpoint_dir: `which` is "latest" (falling back to the
 * newest one that verifies), "best", or a directory. Restores the weights and buffers, the
 * optimizer (moments and step count), the step and epoch, the training and evaluation
 * loaders' positions, the dropout RNG, the schedule and the monitor, early-stopping and
 * non-finite states, so that ct_trainer_fit continues with exactly the updates an
 * uninterrupted run would have made. The trainer must be made with the same model, data and
 * settings. Errors: those of ct_checkpoint_load; CT_ERR_FORMAT naming state.json and the part
 * missing (a checkpoint of another configuration); a part the setters refuse. After a failure
 * the trainer is partly restored: destroy it.
 */
CT_API ct_status ct_trainer_resume(ct_trainer *t, const char *which);

/*
 * Two counts the caller keeps with each checkpoint for the records it writes beside the run
 * (ctrain's experiment: the lines of metrics.jsonl and the rows of metrics.csv at the moment
 * of the save), so that a resume can cut the records back to exactly what the checkpoint had
 * seen, even records made at the checkpoint's own step after it was saved (an epoch's end
 * after its last window was skipped). Set them in on_save; each checkpoint's state.json keeps
 * them; ct_trainer_resume restores them, and ct_trainer_record_marks gives -1 for both when
 * the checkpoint has none (or none was set); a negative value for either unsets both.
 */
CT_API void ct_trainer_set_record_marks(ct_trainer *t, int64_t first, int64_t second);
CT_API void ct_trainer_record_marks(const ct_trainer *t, int64_t *first, int64_t *second);

/*
 * Trains until max_epochs or max_steps, early stopping, a callback's CT_STOP (all CT_OK), or a
 * failure (its status; a non-finite loss or gradient under on_nonfinite stop is
 * CT_ERR_NONFINITE, with the step in the message). A run that max_steps cuts mid-epoch logs and
 * runs the epoch-cadence evaluations once more, without counting the partial epoch.
 * After CT_ERR_NONFINITE caused by a gradient behind a finite loss (in one process, without
 * clipping or an on_grads callback, under stop or a rollback past max_rollbacks) the update
 * that met it was made, so the weights and optimizer state in memory may be non-finite;
 * nothing of it was written, and the last checkpoint is the last good state.
 */
CT_API ct_status ct_trainer_fit(ct_trainer *t);
/* Runs the engine `key` once now (evaluation-only use); its values are then in
 * ct_trainer_metrics. Never counts as a best or for early stopping. */
CT_API ct_status ct_trainer_evaluate(ct_trainer *t, const char *key);

/* Steps (optimizer updates) and epochs completed; skipped (non-finite) steps. */
CT_API int64_t ct_trainer_step(const ct_trainer *t);
CT_API int64_t ct_trainer_epoch(const ct_trainer *t);
/* The epoch, counted from 1, that the current step belongs to: the one under way, or at an
 * epoch's end (its last step's evaluations and those at the epoch's end) the one just
 * completed; 0 before the first batch of a fresh run. The epoch that on_batch, on_log and
 * on_eval_end are about, as the command line's messages and records name it. */
CT_API int64_t ct_trainer_current_epoch(const ct_trainer *t);
CT_API int64_t ct_trainer_skipped_steps(const ct_trainer *t);
/* The loss spikes detected so far (trainer_params.spike), resumed runs included. */
CT_API int64_t ct_trainer_spikes(const ct_trainer *t);
/* Whether the last fit ended because on_batch returned CT_STOP (an interrupted run, to be
 * resumed), not because it was done. */
CT_API bool ct_trainer_interrupted(const ct_trainer *t);
/* Seconds this rank has spent exchanging gradients: the all-reduce, or the sharded update's
 * sums, copies and waits, or under local SGD the weights' averages (waiting for the slowest
 * rank included); 0 for one process. */
CT_API double ct_trainer_comm_seconds(const ct_trainer *t);
/* The profile of the last fit (trainer params' profile; docs/trainer.md) into *out: zeroed with
 * mode CT_PROFILE_MODE_OFF when profiling is off or before a fit. Each rank measures its own
 * steps. CT_ERR_OOM (the medians sort a copy) leaves *out zeroed. */
CT_API ct_status ct_trainer_profile(const ct_trainer *t, ct_trainer_profile_info *out);
/* The number of gradient buckets (bucket_bytes): 0 in one process or with bucket_bytes 0. */
CT_API int64_t ct_trainer_buckets(const ct_trainer *t);
/* Whether the ranks split the optimizer update (shard_optimizer, decided at create): false in
 * one process, and after a fit that fell back to the all-reduce. */
CT_API bool ct_trainer_sharded(const ct_trainer *t);
/* The server ranks under strategy CT_STRATEGY_PARAMETER_SERVER (ps_servers); 0 otherwise. */
CT_API int64_t ct_trainer_ps_servers(const ct_trainer *t);
/* Under CT_STRATEGY_LOCAL_SGD the optimizer steps between two averages
 * (ct_local_sgd_params.steps); 0 under the other strategies. */
CT_API int64_t ct_trainer_local_sgd_steps(const ct_trainer *t);
/* The latest values of an engine (`key`) or of training ("train"); NULL/0 before any. */
CT_API const ct_metric_value *ct_trainer_metrics(const ct_trainer *t, const char *key, int64_t *n);
/* The monitor (for its best value), the early-stopping state and the EMA (NULL when off), to
 * save and restore with checkpoints. */
CT_API ct_monitor *ct_trainer_monitor(ct_trainer *t);
CT_API ct_early_stop *ct_trainer_early_stop(ct_trainer *t);
CT_API ct_ema *ct_trainer_ema(ct_trainer *t);

#ifdef __cplusplus
}
#endif

#endif /* CTRAIN_TRAINER_H */
