/*
 * schema.c - the table of every key an experiment file may hold, and what is done with it:
 * strict checking with file:line:col errors and "did you mean" suggestions, filling in
 * defaults (so the config becomes the resolved one, its paths made absolute by paths.c), the
 * fingerprint, the diff of two configs, and the Markdown reference that docs/config.md holds
 * (a test keeps the two equal).
 *
 * Adding a key is one table line here and reading it where it is used (build.c, experiment.c,
 * records.c).
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/core_internal.h"
#include "ctrain/data.h"
#include "ctrain/experiment.h"
#include "experiment_internal.h"

#define BIG 1e18
#define S   CT_KEY_SECTION
#define I   CT_KEY_INT
#define F   CT_KEY_FLOAT
#define B   CT_KEY_BOOL
#define STR CT_KEY_STRING
#define E   CT_KEY_ENUM
#define O   CT_KEY_OPTIONS
#define L   CT_KEY_LIST
#define P   CT_KEY_PLUGGABLE
#define REQ CT_KEY_REQUIRED
#define OPT CT_KEY_OPTIONAL
#define RES CT_KEY_RESUMABLE

static const ct_key_def k_schema[] = {
    {"name", STR, NULL, 0, 0, NULL, RES,
     "The experiment's name. Default: the file's name without its extension."},
    {"seed", I, "0", 0, 9.2e18, NULL, 0,
     "Seeds the model's initialisation, shuffling, augmentation and dropout."},
    {"output_dir", STR, NULL, 0, 0, NULL, RES,
     "The run directory (config.yaml, metrics.jsonl, checkpoints/), a path (see Paths above). "
     "Default: `runs/NAME` in the current directory."},
    {"threads", I, "0", 0, 1024, NULL, RES,
     "Threads for the kernels; 0 = every core the process may run on (its CPU affinity: "
     "taskset, a cpuset, a Slurm binding), fewer during training while other processes keep "
     "some of those cores busy (docs/performance.md, \"Sharing the cores\"). Results do not "
     "depend on it."},

    {"data", S, NULL, 0, 0, NULL, REQ, "The datasets and how they are batched."},
    {"data.train", O, NULL, 0, 0, NULL, REQ,
     "The training dataset: `type` (idx, cifar10, csv, npy, text, tokens, synthetic, "
     "arithmetic) and that "
     "type's keys (docs/data.md), or `plugin` and `symbol` naming a ct_dataset_vtable."},
    {"data.valid", O, NULL, 0, 0, NULL, 0,
     "The validation dataset, as data.train; or `{split: FRACTION}` to hold out that share of "
     "the training data (`seed` picks which, default 0). Absent: no validation."},
    {"data.test", O, NULL, 0, 0, NULL, 0, "The test dataset, as data.train. Absent: no test."},
    {"data.classes", L, NULL, 0, 0, NULL, RES,
     "The classes' names, in class order: a list (`[cat, dog]`) or the path of a text file with "
     "one name per line (see Paths above). As many names as data.train has classes, none empty, "
     "none twice. They label the report's confusion matrices and predict's `class_name` column. "
     "Absent: classes are known by their index."},
    {"data.batch_size", I, "32", 1, 1048576, NULL, 0,
     "Samples per training batch of each process (the global batch is batch_size x the number "
     "of processes)."},
    {"data.global_batch_size", I, "0", 0, 1073741824, NULL, 0,
     "Samples per training batch over all processes together; each of N processes takes "
     "global_batch_size / N (N must divide it), and data.batch_size must not be set as well. "
     "The configuration then stays the same when the number of processes changes, so a "
     "checkpoint resumes exactly on another number (trainer.allow_world_size_change). 0 = use "
     "data.batch_size."},
    {"data.eval_batch_size", I, "0", 0, 1048576, NULL, RES,
     "Samples per evaluation batch; 0 = batch_size."},
    {"data.shuffle", B, "true", 0, 0, NULL, 0,
     "Shuffle the training data each epoch (a permutation from the seed and the epoch)."},
    {"data.drop_last", B, "false", 0, 0, NULL, 0, "Drop a last partial training batch."},
    {"data.nonfinite", E, "error", 0, 0, "error|allow", RES,
     "An inf or NaN in float data (csv cells, npy float arrays, predict's input): `error` "
     "refuses the file, naming it and the value's row and column; `allow` loads such values as "
     "they are. A dataset's own `nonfinite` key overrides it."},
    {"data.prefetch", I, "2", 0, 64, NULL, RES, "Batches assembled ahead on a background thread."},
    {"data.transforms", L, "[]", 0, 0, NULL, 0,
     "Applied to every split, in order: `{type: scale, a: A, b: B}` (x*a+b) and "
     "`{type: normalize, mean: [..], std: [..]}` ((x-mean)/std per channel, dim 0 of a sample: "
     "one value for every channel or one per channel, at most 16; std > 0)."},
    {"data.augment", L, "[]", 0, 0, NULL, 0,
     "Applied to training batches only, after the transforms: `{type: random_crop, pad: N}` "
     "and `{type: hflip, p: P}`."},

    {"model", O, NULL, 0, 0, NULL, REQ,
     "The model: `type` mlp, cnn or gpt with that builder's keys (docs/models.md); `out` (and "
     "gpt's `vocab`) default to the data's classes or target size. Or `type: sequential` with "
     "`layers:` a list of `{type: LAYER, ...options}` (residual blocks take `children:`). Or "
     "`plugin` and `symbol` naming a ct_model_vtable, with its own options. `init_from: "
     "FILE.safetensors` (or `{path, strict: true, prefix: \"\"}`) loads initial weights, e.g. "
     "PyTorch's, by state_dict name (`strict: false` loads what matches and warns with the "
     "missing and unexpected keys; docs/interop.md); a resumed run loads its checkpoint "
     "instead. One sample of "
     "data.train goes through the model before anything else: an output that does not fit the "
     "loss is a configuration error naming the layer and both shapes."},
    /* the values of task, loss.type and optimizer.type are the names in their kinds' tables
       (kinds.c; ct_optim_kind_name), in order: test_experiment_kinds keeps them equal */
    {"task", P, "auto", 0, 0, "auto|classification|regression|language_model", 0,
     "What is learned; auto: language_model for token data, regression for numeric targets, "
     "else classification. Or `{plugin: PATH, symbol: NAME}` naming a `const ct_task`."},
    {"loss", S, NULL, 0, 0, NULL, 0, "The loss; by default the task's."},
    {"loss.type", E, "auto", 0, 0, "auto|cross_entropy|mse|l1|smooth_l1|huber", 0,
     "auto: cross-entropy for classification and language models, MSE for regression."},
    {"loss.label_smoothing", F, "0", 0, 1, NULL, 0, "cross_entropy: label smoothing in [0, 1]."},
    {"loss.beta", F, "1", 0, BIG, NULL, 0, "smooth_l1: the threshold."},
    {"loss.delta", F, "1", 1e-12, BIG, NULL, 0, "huber: the threshold."},

    {"optimizer", S, NULL, 0, 0, NULL, 0, "The optimizer (torch.optim's formulas, bit for bit)."},
    {"optimizer.type", E, "adam", 0, 0, "sgd|adam|adamw|rmsprop|adagrad", 0, "Which optimizer."},
    {"optimizer.lr", F, NULL, 0, BIG, NULL, 0,
     "The base learning rate. Default: PyTorch's (1e-3; rmsprop and adagrad 1e-2)."},
    {"optimizer.weight_decay", F, NULL, 0, BIG, NULL, 0,
     "L2 decay (adamw: decoupled). Default 0 (adamw 1e-2)."},
    {"optimizer.momentum", F, "0", 0, BIG, NULL, 0, "sgd, rmsprop: momentum."},
    {"optimizer.dampening", F, "0", 0, BIG, NULL, 0, "sgd: dampening."},
    {"optimizer.nesterov", B, "false", 0, 0, NULL, 0, "sgd: Nesterov momentum."},
    {"optimizer.beta1", F, "0.9", 0, 0.999999, NULL, 0, "adam, adamw: beta1."},
    {"optimizer.beta2", F, "0.999", 0, 0.99999999, NULL, 0, "adam, adamw: beta2."},
    {"optimizer.eps", F, NULL, 0, BIG, NULL, 0, "Denominator term. Default 1e-8 (adagrad 1e-10)."},
    {"optimizer.alpha", F, "0.99", 0, 1, NULL, 0, "rmsprop: smoothing constant."},
    {"optimizer.centered", B, "false", 0, 0, NULL, 0, "rmsprop: centered."},
    {"optimizer.lr_decay", F, "0", 0, BIG, NULL, 0, "adagrad: learning-rate decay."},
    {"optimizer.initial_accumulator_value", F, "0", 0, BIG, NULL, 0,
     "adagrad: start of the squared-gradient sum."},
    {"optimizer.groups", L, "[]", 0, 0, NULL, 0,
     "Parameter groups: `{params: \"*.bias,*norm*\", lr_scale: 1, weight_decay: 0}`; a "
     "parameter takes the last group whose glob list matches its name."},

    {"scheduler", O, NULL, 0, 0, NULL, 0,
     "A learning-rate schedule: `type` (constant, step, multistep, exponential, cosine, "
     "warmup_linear, warmup_cosine, onecycle, polynomial) and "
     "its keys (include/ctrain/schedule.h), stepped once per optimizer step, or per epoch with "
     "`interval: epoch`; `t_max` or `total: auto` is the run's total steps (epochs). Or "
     "`type: plateau` (ReduceLROnPlateau's keys), stepped after each evaluation of `monitor` "
     "(default: checkpoint.monitor, else valid/loss; its `mode` follows the metric). Absent: "
     "a constant rate."},

    {"trainer", S, NULL, 0, 0, NULL, 0, "The loop."},
    {"trainer.max_epochs", I, "10", 0, 1e15, NULL, RES,
     "Epochs to train; 0 = no limit (then max_steps must be set)."},
    {"trainer.max_steps", I, "0", 0, 1e15, NULL, RES,
     "Optimizer steps to train; 0 = no limit. The first limit reached ends the run."},
    {"trainer.accum_steps", I, "1", 1, 1e6, NULL, 0,
     "Micro-batches per optimizer step (windows never straddle an epoch)."},
    {"trainer.grad_clip_norm", F, "0", 0, BIG, NULL, 0,
     "Clip the global gradient L2 norm; 0 = off."},
    {"trainer.grad_clip_value", F, "0", 0, BIG, NULL, 0,
     "Clamp each gradient to [-v, v]; 0 = off."},
    {"trainer.precision", E, "fp32", 0, 0, "fp32|bf16", 0,
     "Arithmetic precision. bf16: mixed precision, as PyTorch's bf16 autocast: matmuls, linear "
     "layers and convolutions multiply operands rounded to bf16 with f32 accumulation, forward "
     "and backward, in training, evaluation and prediction; weights, gradients, optimizer "
     "state, losses and norms stay f32 (docs/trainer.md, Mixed precision)."},
    {"trainer.strategy", E, "sync", 0, 0, "sync|parameter_server|local_sgd", RES,
     "MPI runs: how the ranks combine their work. sync = every step all-reduces every rank's "
     "gradients; parameter_server = server ranks hold shards of the weights and apply each "
     "worker's gradient as it arrives (trainer.ps); local_sgd = each rank takes local steps and "
     "the weights are averaged every trainer.local_sgd.steps steps (docs/distributed.md)."},
    {"trainer.ps", S, NULL, 0, 0, NULL, 0,
     "trainer.strategy parameter_server: its servers and staleness (docs/distributed.md, "
     "Parameter servers)."},
    {"trainer.ps.servers", I, "1", 1, 1e6, NULL, 0,
     "Server ranks: the last this many ranks hold contiguous shards of the weights and "
     "optimizer state; the others are workers. Fewer than the number of processes."},
    {"trainer.ps.max_staleness", I, NULL, 0, 1e12, NULL, RES,
     "A worker more than this many pushes ahead of the slowest worker waits for it; 0 = "
     "synchronous rounds; unset = no bound."},
    {"trainer.ps.pull_every", I, "1", 1, 1e12, NULL, RES,
     "Workers other than rank 0 pull the weights every this many steps (rank 0 pulls every "
     "step)."},
    {"trainer.local_sgd", S, NULL, 0, 0, NULL, 0,
     "trainer.strategy local_sgd: the averaging cadence and the outer optimizer "
     "(docs/distributed.md, Local SGD)."},
    {"trainer.local_sgd.steps", I, "16", 1, 1e12, NULL, 0,
     "Optimizer steps each rank takes alone between two averages of the weights (also "
     "averaged: at each epoch's end and the run's). Records, evaluations and checkpoints due "
     "by steps between two averages are made at the next one."},
    {"trainer.local_sgd.outer_lr", F, "1", 0, BIG, NULL, 0,
     "The outer optimizer's rate (> 0) on the averaged change of the weights since the last "
     "average "
     "(DiLoCo); 1 with outer_momentum 0 = plain averaging."},
    {"trainer.local_sgd.outer_momentum", F, "0", 0, 1, NULL, 0,
     "The outer optimizer's Nesterov momentum, in [0, 1); saved in checkpoints."},
    {"trainer.bucket_mb", F, "auto", 0, 1e6, "auto", RES,
     "MPI runs: gradients are all-reduced in buckets of about this many MiB, each started "
     "during the backward pass as soon as its gradients are final; 0 = one all-reduce after "
     "the backward pass; auto = 0 when every rank runs on one machine (nothing is gained by "
     "overlapping there), else 1 (docs/distributed.md)."},
    {"trainer.shard_optimizer", E, "auto", 0, 0, "auto|always|never", RES,
     "MPI runs on one machine: the ranks split the optimizer update, each summing every rank's "
     "gradients over its own part of the weights through shared memory, updating that part and "
     "copying the others', instead of all-reducing the gradients and updating every weight on "
     "every rank. auto = when every rank is on one machine, bucket_mb is auto and no gradient "
     "histograms are logged; always = the same, or a configuration error where it cannot "
     "(docs/distributed.md)."},
    {"trainer.collective_timeout_s", F, "600", 0, BIG, NULL, RES,
     "MPI runs: a rank that waits longer than this in one collective (an all-reduce, a "
     "broadcast, the sharded update's synchronisation) ends the job with exit 1, naming the "
     "ranks that did not arrive and the step; 0 = off. Must exceed the longest time one rank "
     "can spend between collectives while the others wait (an evaluation, a checkpoint) "
     "(docs/distributed.md)."},
    {"trainer.allow_world_size_change", B, "false", 0, 0, NULL, RES,
     "Resume a checkpoint written by another number of MPI processes: the weights and optimizer "
     "state are kept and the epoch continues at the next sample no process has read, when that "
     "is a batch boundary of the new processes (keep the global batch: "
     "data.global_batch_size); otherwise the resume is refused (docs/distributed.md)."},
    {"trainer.preempt_signal", E, "USR1", 0, 0, "USR1|USR2|TERM|none", RES,
     "The signal that announces a preemption or the end of the time limit (Slurm: `#SBATCH "
     "--signal=B:USR1@120`): `ctrain fit` stops as for SIGTERM, every rank at the end of the "
     "same step, with one checkpoint, then requeues the job (trainer.requeue); none = not "
     "caught (the signal's default action ends the process) (docs/distributed.md, Slurm)."},
    {"trainer.requeue", E, "auto", 0, 0, "auto|true|false", RES,
     "After a stop by trainer.preempt_signal, rank 0 runs `scontrol requeue` on the Slurm job "
     "(`$SLURM_JOB_ID`; an array task's `${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}`) and "
     "fit exits 75; without "
     "it, or when scontrol is missing or fails, fit exits 143 as for SIGTERM. auto = when "
     "SLURM_JOB_ID is set (docs/distributed.md, Slurm)."},
    {"trainer.steps_per_loop", I, "10", 1, 1e12, NULL, RES,
     "Steps between training-metric records (train/loss, lr, grad_norm) in metrics.jsonl."},
    {"trainer.on_nonfinite", E, "stop", 0, 0, "stop|skip|rollback", 0,
     "A NaN or infinite loss or gradient: stop the run (exit 1), skip the update, or roll back "
     "to the last good state (docs/policies.md)."},
    {"trainer.max_skips", I, "100", 1, 1e12, NULL, 0,
     "skip: consecutive skipped steps before stopping."},
    {"trainer.max_rollbacks", I, "3", 0, 1e6, NULL, 0, "rollback: rollbacks before stopping."},
    {"trainer.on_spike", O, NULL, 0, 0, NULL, 0,
     "Loss-spike detection: a step whose loss is more than `threshold` robust deviations above "
     "the median of the last `window` steps: `{action: none|warn|skip|rollback, signal: "
     "loss|grad_norm, window: 100, threshold: 6, warmup: window, lr_factor: 1, cooldown: 0, "
     "skip_batches: 1}`; rollback also skips the spike's data windows (docs/policies.md). "
     "Absent: off."},
    {"trainer.max_incidents", I, "20", 0, 1e6, NULL, 0,
     "Incident bundles (RUN/incidents/step-N/) written per run directory for steps that "
     "on_nonfinite or on_spike stopped, skipped, rolled back or warned about; 0 = none "
     "(docs/policies.md)."},
    {"trainer.check_grads", B, "true", 0, 0, NULL, 0,
     "Scan the gradients for NaN/inf each step (the loss is always checked)."},
    {"trainer.limit_train_batches", I, "0", 0, 1e15, NULL, 0, "Batches per epoch; 0 = all."},
    {"trainer.limit_eval_batches", I, "0", 0, 1e15, NULL, 0, "Batches per evaluation; 0 = all."},
    {"trainer.dev_run", B, "false", 0, 0, NULL, RES,
     "One batch of training and of each evaluation, then stop (a smoke test that writes "
     "nothing into the run directory: no checkpoints, records or report)."},
    {"trainer.profile", E, "false", 0, 0, "false|true|layers", RES,
     "Measure where each step's time goes (data, forward, backward, comm, optimizer, eval, "
     "checkpoint, logging, overhead): a table at the end of fit and RUN/profile.json; layers "
     "adds each layer's forward and backward time (docs/trainer.md). `ctrain fit --profile` "
     "sets it."},
    {"trainer.valid_every_epochs", I, "1", 0, 1e12, NULL, 0,
     "Evaluate on data.valid after every N epochs; 0 = not by epochs."},
    {"trainer.valid_every_steps", I, "0", 0, 1e15, NULL, 0,
     "Evaluate on data.valid after every N steps; 0 = not by steps."},
    {"trainer.test_every_epochs", I, "0", 0, 1e12, NULL, 0,
     "Evaluate on data.test after every N epochs; 0 = once, when training ends."},
    {"trainer.ema", O, NULL, 0, 0, NULL, 0,
     "Keep an exponential moving average of the weights, used for evaluation and saved with "
     "checkpoints: `{decay: 0.999, warmup: false, every: 1}`. Absent: off."},

    {"metrics", S, NULL, 0, 0, NULL, 0,
     "Metrics per evaluation engine, besides its loss. Absent: the task's defaults (accuracy; "
     "mse and mae; perplexity)."},
    {"metrics.valid", L, NULL, 0, 0, NULL, 0,
     "For data.valid: names (accuracy, topk, precision, recall, f1, confusion, mse, mae, rmse, "
     "r2, perplexity; exact_match, char_accuracy, edit_distance for decode.metrics) or `{type: "
     "NAME, name: SHOWN_AS, ...options}` or `{plugin, symbol}`."},
    {"metrics.test", L, NULL, 0, 0, NULL, 0, "For data.test, as metrics.valid."},

    {"decode", S, NULL, 0, 0, NULL, OPT,
     "The decode engine (text models: byte-level language models; docs/trainer.md): text "
     "generated from prompts during training, written to output_dir/decode/step-N.jsonl and "
     "scored against references as decode/exact_match, decode/char_accuracy and "
     "decode/edit_distance. Absent: off."},
    {"decode.every_steps", I, "0", 0, 1e15, NULL, 0, "Decode every N steps; 0 = not by steps."},
    {"decode.every_epochs", I, "0", 0, 1e12, NULL, 0,
     "Decode after every N epochs; 0 = not by epochs."},
    {"decode.at_end", B, "true", 0, 0, NULL, 0,
     "Decode when training ends, unless the last step decoded already."},
    {"decode.prompts", L, NULL, 0, 0, NULL, 0,
     "The prompts, a list of texts (without references the metrics are NaN)."},
    {"decode.prompts_file", STR, NULL, 0, 0, NULL, 0,
     "A file of prompts (see Paths above): a text file, one prompt per line, or a .jsonl file "
     "of `{\"prompt\": ..., \"reference\": ...}` objects (reference optional)."},
    {"decode.data", E, "valid", 0, 0, "train|valid|test", 0,
     "Without prompts or prompts_file: the examples of this dataset (a type that gives "
     "prompts and references: arithmetic, text; docs/data.md)."},
    {"decode.max_examples", I, "64", 1, 1e9, NULL, 0,
     "Decode the first N prompts or examples at most."},
    {"decode.max_tokens", I, "64", 1, 1e6, NULL, 0, "Bytes generated after each prompt, at most."},
    {"decode.temperature", F, "0", 0, BIG, NULL, 0, "Sampling temperature; 0 = greedy decoding."},
    {"decode.top_k", I, "0", 0, 1e9, NULL, 0, "Sample among the k likeliest bytes; 0 = all."},
    {"decode.top_p", F, "1", 1e-9, 1, NULL, 0,
     "Sample among the likeliest bytes whose probability reaches p (nucleus); 1 = all."},
    {"decode.seed", I, "0", 0, 9.2e18, NULL, 0,
     "Prompt i samples from the stream (seed, i): the same outputs for a checkpoint, whatever "
     "the thread count and the training's random state."},
    {"decode.stop", L, NULL, 0, 0, NULL, 0,
     "Stop strings (`[\"\\n\"]`): a prompt's output ends after the first one appears in it; "
     "metrics compare the output without it."},
    {"decode.metrics", L, NULL, 0, 0, NULL, 0,
     "As metrics.valid, over outputs and references (each a u8 [len] tensor of bytes). Absent: "
     "exact_match, char_accuracy, edit_distance."},
    {"decode.log_examples", I, "3", 0, 1e6, NULL, 0, "Outputs shown in the log after each decode."},

    {"checkpoint", S, NULL, 0, 0, NULL, 0, "Checkpoints under output_dir/checkpoints."},
    {"checkpoint.enabled", B, "true", 0, 0, NULL, RES, "Write checkpoints at all."},
    {"checkpoint.monitor", STR, "", 0, 0, NULL, 0,
     "The metric that picks `best` (valid/loss, valid/acc, ...: Metric names, below); empty: "
     "valid/loss when there is validation data, else none."},
    {"checkpoint.mode", E, "auto", 0, 0, "auto|min|max", 0,
     "Whether a lower or higher monitored value is better; auto: max for acc, top*, f1, "
     "precision, recall, r2, exact_match and char_accuracy, else min."},
    {"checkpoint.min_delta", F, "0", 0, BIG, NULL, 0, "How much better a value must be to count."},
    {"checkpoint.keep", I, "3", 0, 1e9, NULL, RES,
     "Keep the newest N checkpoints besides latest and best; 0 = all."},
    {"checkpoint.save_every_epochs", I, "1", 0, 1e12, NULL, RES,
     "Save after every N epochs; 0 = not by epochs. A run also saves when it ends."},
    {"checkpoint.save_every_steps", I, "0", 0, 1e15, NULL, RES,
     "Save every N steps; 0 = not by steps."},

    {"early_stopping", S, NULL, 0, 0, NULL, OPT,
     "Stop when a metric stops improving. Absent: off."},
    {"early_stopping.monitor", STR, "valid/loss", 0, 0, NULL, 0, "The metric watched."},
    {"early_stopping.mode", E, "auto", 0, 0, "auto|min|max", 0, "As checkpoint.mode."},
    {"early_stopping.patience", I, "5", 1, 1e9, NULL, RES,
     "Evaluations without improvement before stopping; raised on a run it stopped, the run "
     "goes on."},
    {"early_stopping.min_delta", F, "0", 0, BIG, NULL, 0, "How much better counts as better."},
    {"early_stopping.warmup", I, "0", 0, 1e9, NULL, 0, "First evaluations ignored."},

    {"logging", S, NULL, 0, 0, NULL, RES, "What a run shows and records."},
    {"logging.csv", B, "false", 0, 0, NULL, RES, "Also write metrics.csv."},
    {"logging.report", E, "end", 0, 0, "end|live|none", RES,
     "report.html in the run directory (docs/logging.md): written when fit ends, also after "
     "every evaluation (live), or not at all. `ctrain report RUN_DIR` writes one at any time."},
    {"logging.tensorboard", B, "false", 0, 0, NULL, RES,
     "Also write TensorBoard event files (events.out.tfevents.*) into the run directory: every "
     "metrics.jsonl value as a scalar, the resolved configuration as text and as the run's "
     "HParams (docs/logging.md)."},
    {"logging.histogram_every", I, "0", 0, 1e12, NULL, RES,
     "With tensorboard: histograms of every parameter (weights/NAME) and of its gradient at the "
     "epoch's last step (grads/NAME) every N epochs; 0 = none."},
    {"logging.histogram_exclude", STR, "", 0, 0, NULL, RES,
     "Comma-separated globs of parameter names (state_dict names: a sequential model's layers "
     "by position, \"1.weight\") left out of the histograms, e.g. \"*.bias,0.*\"."},
    {"logging.histogram_exclude_norm", B, "false", 0, 0, NULL, RES,
     "Also leave out the parameters of normalisation layers (batchnorm, layernorm, gpt's ln_1, "
     "ln_2, ln_f), found by layer type, not by name."},
    {"logging.progress", E, "auto", 0, 0, "auto|bar|plain|none", RES,
     "auto: a redrawn bar on a terminal, plain lines otherwise."},
    {"logging.interval", F, "0.1", 0.001, 1, NULL, RES,
     "plain: a training line every this fraction of an epoch..."},
    {"logging.interval_seconds", F, "30", 0, BIG, NULL, RES,
     "...or every this many seconds, whichever comes first. Evaluations, usually short, print "
     "a line by time only (every this many seconds), and a summary at their end."},
};

/* Names that PyTorch Lightning's Trainer, Keras (Model.fit, its optimizers and callbacks) and
 * the Hugging Face Trainer (TrainingArguments) give to settings ctrain has: an unknown key
 * named like one of these, in any section, is pointed at the ctrain key that does the same
 * instead of at the nearest spelling (gradient_clip_val is near grad_clip_value, but Lightning
 * clips by norm). The reference lists them (docs/config.md). */
enum { LIGHTNING = 1, KERAS = 2, HF = 4 };
static const char *const k_frameworks[][2] = {
    /* by bit: as a message says whose a name is, and as the reference lists it */
    {"Lightning's", "Lightning"},
    {"Keras'", "Keras"},
    {"the Hugging Face Trainer's", "Hugging Face"},
};
static const ct_exp_alias k_aliases[] = {
    {"max_epochs", "trainer.max_epochs", LIGHTNING},
    {"num_train_epochs", "trainer.max_epochs", HF},
    {"epochs", "trainer.max_epochs", KERAS},
    {"max_steps", "trainer.max_steps", LIGHTNING | HF},
    {"gradient_clip_val", "trainer.grad_clip_norm", LIGHTNING},
    {"max_grad_norm", "trainer.grad_clip_norm", HF},
    {"global_clipnorm", "trainer.grad_clip_norm", KERAS},
    {"clipvalue", "trainer.grad_clip_value", KERAS},
    {"accumulate_grad_batches", "trainer.accum_steps", LIGHTNING},
    {"gradient_accumulation_steps", "trainer.accum_steps", HF},
    {"precision", "trainer.precision", LIGHTNING},
    {"bf16", "trainer.precision", HF},
    {"log_every_n_steps", "trainer.steps_per_loop", LIGHTNING},
    {"logging_steps", "trainer.steps_per_loop", HF},
    {"check_val_every_n_epoch", "trainer.valid_every_epochs", LIGHTNING},
    {"validation_freq", "trainer.valid_every_epochs", KERAS},
    {"val_check_interval", "trainer.valid_every_steps", LIGHTNING},
    {"eval_steps", "trainer.valid_every_steps", HF},
    {"limit_train_batches", "trainer.limit_train_batches", LIGHTNING},
    {"steps_per_epoch", "trainer.limit_train_batches", KERAS},
    {"limit_val_batches", "trainer.limit_eval_batches", LIGHTNING},
    {"limit_test_batches", "trainer.limit_eval_batches", LIGHTNING},
    {"fast_dev_run", "trainer.dev_run", LIGHTNING},
    {"default_root_dir", "output_dir", LIGHTNING},
    {"batch_size", "data.batch_size", KERAS},
    {"per_device_train_batch_size", "data.batch_size", HF},
    {"per_device_eval_batch_size", "data.eval_batch_size", HF},
    {"learning_rate", "optimizer.lr", KERAS | HF},
    {"weight_decay", "optimizer.weight_decay", HF},
    {"adam_beta1", "optimizer.beta1", HF},
    {"adam_beta2", "optimizer.beta2", HF},
    {"adam_epsilon", "optimizer.eps", HF},
    {"lr_scheduler_type", "scheduler.type", HF},
    {"warmup_steps", "scheduler.warmup", HF},
    {"label_smoothing_factor", "loss.label_smoothing", HF},
    {"save_total_limit", "checkpoint.keep", HF},
    {"save_steps", "checkpoint.save_every_steps", HF},
    {"metric_for_best_model", "checkpoint.monitor", HF},
    {"greater_is_better", "checkpoint.mode", HF},
    {"patience", "early_stopping.patience", KERAS},
};
const ct_exp_alias *ct_exp_alias_find(const char *name) {
    for (size_t i = 0; name && i < sizeof k_aliases / sizeof k_aliases[0]; i++)
        if (strcmp(k_aliases[i].name, name) == 0) return &k_aliases[i];
    return NULL;
}

/* The frameworks of a bit set, as "A's and B's" (which = 0) or "A, B" (which = 1). */
static void frameworks(unsigned set, int which, char *buf, size_t size) {
    size_t at = 0;
    buf[0] = '\0';
    for (unsigned b = 0; b < sizeof k_frameworks / sizeof k_frameworks[0]; b++) {
        if (!(set & (1u << b)) || at >= size) continue;
        int w = snprintf(buf + at, size - at, "%s%s", at ? (which ? ", " : " and ") : "",
                         k_frameworks[b][which]);
        if (w > 0) at += (size_t)w;
    }
}

const char *ct_exp_alias_hint(const ct_exp_alias *a, char *buf, size_t size) {
    const char *dot = strrchr(a->key, '.');
    char whose[128];
    frameworks(a->frameworks, 0, whose, sizeof whose);
    if (strcmp(dot ? dot + 1 : a->key, a->name) == 0) /* the same name, in another section */
        (void)snprintf(buf, size, " (did you mean '%s'?)", a->key);
    else
        (void)snprintf(buf, size, " (did you mean '%s'? '%s' is %s name for it)", a->key, a->name,
                       whose);
    return buf;
}

const ct_key_def *ct_experiment_schema(int64_t *count) {
    *count = (int64_t)(sizeof k_schema / sizeof k_schema[0]);
    return k_schema;
}

const ct_key_def *ct_exp_schema_find(const char *path) {
    for (size_t i = 0; i < sizeof k_schema / sizeof k_schema[0]; i++)
        if (strcmp(k_schema[i].path, path) == 0) return &k_schema[i];
    return NULL;
}

/* ---- messages ---- */

/* "file:line:col" of a node (or "command line" for an override's). */
void ct_exp_where(const ct_cfg_node *n, char *buf, size_t size) {
    if (n->line > 0)
        (void)snprintf(buf, size, "%s:%d:%d", n->source, n->line, n->col);
    else
        (void)snprintf(buf, size, "%s", n->source);
}

ct_status ct_exp_key_error(ct_ctx *ctx, const ct_cfg_node *n, const char *path, const char *what) {
    char w[600];
    ct_exp_where(n, w, sizeof w);
    return CT_FAIL(ctx, CT_ERR_CONFIG, "%s: key '%s': %s", w, path, what);
}

/* The keys directly under `section` ("" for the top), for "did you mean" and the list. */
static ct_status
unknown_key(ct_ctx *ctx, const ct_cfg_node *n, const char *section, const char *key) {
    size_t sl = strlen(section);
    ct_unknown u;
    ct_unknown_init(&u, key);
    for (size_t i = 0; i < sizeof k_schema / sizeof k_schema[0]; i++) {
        const char *p = k_schema[i].path;
        if (sl && (strncmp(p, section, sl) != 0 || p[sl] != '.')) continue;
        const char *leaf = sl ? p + sl + 1 : p;
        if (!strchr(leaf, '.')) ct_unknown_add(&u, leaf);
    }
    char path[512], hint[300] = "";
    (void)snprintf(path, sizeof path, "%s%s%s", section, sl ? "." : "", key);
    const char *best = ct_suggest_best(&u.suggest);
    const ct_exp_alias *alias = ct_exp_alias_find(key);
    if (alias)
        (void)ct_exp_alias_hint(alias, hint, sizeof hint);
    else if (best)
        (void)snprintf(hint, sizeof hint, " (did you mean '%s%s%s'?)", section, sl ? "." : "",
                       best);
    char w[600];
    ct_exp_where(n, w, sizeof w);
    return CT_FAIL(ctx, CT_ERR_CONFIG, "%s: unknown key '%s'%s; the keys of %s%s%s are: %s", w,
                   path, hint, sl ? "'" : "", sl ? section : "the top level", sl ? "'" : "",
                   u.known);
}

/* ---- scalar parsing ---- */

int ct_exp_parse_bool(const char *v) {
    if (!strcmp(v, "true") || !strcmp(v, "True") || !strcmp(v, "TRUE")) return 1;
    if (!strcmp(v, "false") || !strcmp(v, "False") || !strcmp(v, "FALSE")) return 0;
    return -1;
}

bool ct_exp_parse_int(const char *v, int64_t *out) {
    if (isspace((unsigned char)v[0])) return false; /* strtoll would skip it: "\f10" is text */
    char *end = NULL;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (end == v || *end != '\0' || errno == ERANGE) return false;
    *out = (int64_t)x;
    return true;
}

bool ct_exp_parse_float(const char *v, double *out) {
    if (isspace((unsigned char)v[0])) return false;
    char *end = NULL;
    errno = 0;
    double x = strtod(v, &end);
    if (errno == ERANGE && end != v && *end == '\0' && fabs(x) < 1.0) errno = 0; /* underflow */
    if (end == v || *end != '\0' || errno == ERANGE || !isfinite(x)) {
        /* YAML's .inf/.nan are not useful for settings: reject them too */
        return false;
    }
    *out = x;
    return true;
}

static bool in_choices(const char *choices, const char *v) {
    size_t n = strlen(v);
    for (const char *p = choices; *p;) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == n && strncmp(p, v, n) == 0) return true;
        if (!bar) break;
        p = bar + 1;
    }
    return false;
}

static ct_status
check_scalar(ct_ctx *ctx, const ct_key_def *d, const ct_cfg_node *n, const char *path) {
    char what[700];
    if (n->kind != CT_CFG_SCALAR) {
        static const char *const names[] = {"a value", "a mapping", "a sequence"};
        (void)snprintf(what, sizeof what, "expected %s, got %s",
                       d->type == CT_KEY_INT     ? "an integer"
                       : d->type == CT_KEY_FLOAT ? "a number"
                       : d->type == CT_KEY_BOOL  ? "true or false"
                                                 : "a value",
                       names[n->kind]);
        return ct_exp_key_error(ctx, n, path, what);
    }
    const char *v = n->value;
    const char *q = n->quoted ? " (a quoted string; remove the quotes)" : "";
    switch (d->type) {
    case CT_KEY_INT: {
        int64_t x;
        if (d->choices && !n->quoted && in_choices(d->choices, v)) return CT_OK; /* "auto" */
        if (n->quoted || !ct_exp_parse_int(v, &x)) {
            (void)snprintf(what, sizeof what, "expected an integer, got '%s'%s", v, q);
            return ct_exp_key_error(ctx, n, path, what);
        }
        if ((double)x < d->lo || (double)x > d->hi) {
            (void)snprintf(what, sizeof what, "%lld is out of range [%.15g, %.15g]", (long long)x,
                           d->lo, d->hi);
            return ct_exp_key_error(ctx, n, path, what);
        }
        return CT_OK;
    }
    case CT_KEY_FLOAT: {
        double x;
        if (d->choices && !n->quoted && in_choices(d->choices, v)) return CT_OK;
        if (n->quoted || !ct_exp_parse_float(v, &x)) {
            if (d->choices)
                (void)snprintf(what, sizeof what, "expected a number or %s, got '%s'%s", d->choices,
                               v, q);
            else
                (void)snprintf(what, sizeof what, "expected a number, got '%s'%s", v, q);
            return ct_exp_key_error(ctx, n, path, what);
        }
        if (x < d->lo || x > d->hi) {
            (void)snprintf(what, sizeof what, "%g is out of range [%g, %g]", x, d->lo, d->hi);
            return ct_exp_key_error(ctx, n, path, what);
        }
        return CT_OK;
    }
    case CT_KEY_BOOL:
        if (n->quoted || ct_exp_parse_bool(v) < 0) {
            (void)snprintf(what, sizeof what, "expected true or false, got '%s'%s", v, q);
            return ct_exp_key_error(ctx, n, path, what);
        }
        return CT_OK;
    case CT_KEY_ENUM:
    case CT_KEY_PLUGGABLE:
        if (!in_choices(d->choices, v)) {
            char choices[256], hint[96];
            (void)snprintf(choices, sizeof choices, "%s", d->choices);
            ct_suggest sg;
            ct_suggest_init(&sg, v);
            for (char *p = choices; p;) {
                char *bar = strchr(p, '|');
                if (bar) *bar = '\0';
                ct_suggest_add(&sg, p);
                p = bar ? bar + 1 : NULL;
            }
            (void)snprintf(what, sizeof what, "'%s' is not one of: %s%s", v, d->choices,
                           ct_suggest_hint(&sg, hint, sizeof hint));
            for (char *p = what; *p; p++)
                if (*p == '|') *p = ',';
            return ct_exp_key_error(ctx, n, path, what);
        }
        return CT_OK;
    default:
        return CT_OK;
    }
}

/* Values in an options mapping: scalars, or sequences of scalars (joined with commas when
 * handed on); nested mappings only where a component takes them (layers, children). */
static ct_status check_options(ct_ctx *ctx, const ct_cfg_node *map, const char *path) {
    for (const ct_cfg_node *c = map->first; c; c = c->next) {
        if (c->kind == CT_CFG_MAP && strcmp(c->key, "init_from") != 0) {
            char p[600];
            (void)snprintf(p, sizeof p, "%s.%s", path, c->key);
            return ct_exp_key_error(ctx, c, p,
                                    "expected a value or a list of values, got a mapping");
        }
        if (c->kind != CT_CFG_SEQ || strcmp(c->key, "layers") == 0 ||
            strcmp(c->key, "children") == 0)
            continue;
        for (const ct_cfg_node *it = c->first; it; it = it->next)
            if (it->kind != CT_CFG_SCALAR) {
                char p[600];
                (void)snprintf(p, sizeof p, "%s.%s", path, c->key);
                return ct_exp_key_error(ctx, it, p, "expected a list of values");
            }
    }
    return CT_OK;
}

/* Null values count as absent: removed before anything else looks. */
static void drop_nulls(ct_config *cfg, ct_cfg_node *n) {
    ct_cfg_node *c = n->first;
    while (c) {
        ct_cfg_node *next = c->next;
        if (c->kind == CT_CFG_SCALAR && c->null && n->kind == CT_CFG_MAP)
            ct_config_remove(cfg, c);
        else
            drop_nulls(cfg, c);
        c = next;
    }
}

static ct_status check_map(ct_ctx *ctx, const ct_cfg_node *map, const char *section) {
    for (const ct_cfg_node *c = map->first; c; c = c->next) {
        char path[512];
        (void)snprintf(path, sizeof path, "%s%s%s", section, section[0] ? "." : "", c->key);
        const ct_key_def *d = ct_exp_schema_find(path);
        if (!d) return unknown_key(ctx, c, section, c->key);
        switch (d->type) {
        case CT_KEY_SECTION:
            if (c->kind != CT_CFG_MAP)
                return ct_exp_key_error(ctx, c, path, "expected a mapping of keys");
            CT_TRY(check_map(ctx, c, path));
            break;
        case CT_KEY_OPTIONS:
            if (c->kind != CT_CFG_MAP)
                return ct_exp_key_error(ctx, c, path,
                                        "expected a mapping ({type: ..., key: value})");
            CT_TRY(check_options(ctx, c, path));
            break;
        case CT_KEY_LIST:
            if (strcmp(path, "data.classes") == 0) {
                /* names, or the path of a file of them, read when the experiment is created */
                for (const ct_cfg_node *it = c->first; it; it = it->next)
                    if (it->kind != CT_CFG_SCALAR)
                        return ct_exp_key_error(ctx, it, path, "expected class names in the list");
                if (c->kind == CT_CFG_MAP)
                    return ct_exp_key_error(ctx, c, path,
                                            "expected a list of class names or a file's path");
                break;
            }
            if (c->kind != CT_CFG_SEQ)
                return ct_exp_key_error(ctx, c, path, "expected a list ([...])");
            for (const ct_cfg_node *it = c->first; it; it = it->next) {
                if (it->kind == CT_CFG_SEQ)
                    return ct_exp_key_error(ctx, it, path,
                                            "expected names or mappings in the list");
                if (it->kind == CT_CFG_MAP) {
                    char ip[600];
                    ct_config_path(it, ip, sizeof ip);
                    CT_TRY(check_options(ctx, it, ip));
                }
            }
            break;
        case CT_KEY_PLUGGABLE:
            if (c->kind == CT_CFG_MAP) {
                for (const ct_cfg_node *k = c->first; k; k = k->next)
                    if (strcmp(k->key, "plugin") && strcmp(k->key, "symbol")) {
                        char p[600];
                        (void)snprintf(p, sizeof p, "%s.%s", path, k->key);
                        return ct_exp_key_error(ctx, k, p,
                                                "unknown key (a plugin takes plugin and symbol)");
                    }
                if (!ct_config_find(c, "plugin") || !ct_config_find(c, "symbol"))
                    return ct_exp_key_error(ctx, c, path,
                                            "a plugin needs both plugin: and symbol:");
                break;
            }
            CT_TRY(check_scalar(ctx, d, c, path));
            break;
        default:
            CT_TRY(check_scalar(ctx, d, c, path));
        }
    }
    return CT_OK;
}

/* The section a path lies in ("optimizer" for "optimizer.lr"; "" at the top). */
static void parent_of(const char *path, char *buf, size_t size) {
    const char *dot = strrchr(path, '.');
    size_t n = dot ? (size_t)(dot - path) : 0;
    if (n >= size) n = size - 1;
    memcpy(buf, path, n);
    buf[n] = '\0';
}

/* Whether data.global_batch_size is given, and not 0 (its default, "not used"). */
static bool global_batch_set(const ct_cfg_node *root) {
    const ct_cfg_node *n = ct_config_find(root, "data.global_batch_size");
    int64_t v = 0;
    return n && n->kind == CT_CFG_SCALAR && ct_exp_parse_int(n->value, &v) && v != 0;
}

static ct_status fill_defaults(ct_ctx *ctx, ct_config *cfg) {
    ct_cfg_node *root = ct_config_root(cfg);
    for (size_t i = 0; i < sizeof k_schema / sizeof k_schema[0]; i++) {
        const ct_key_def *d = &k_schema[i];
        char parent[512];
        parent_of(d->path, parent, sizeof parent);
        if (parent[0]) {
            const ct_key_def *pd = ct_exp_schema_find(parent);
            if (pd && (pd->flags & CT_KEY_OPTIONAL) && !ct_config_find(root, parent)) continue;
        }
        if (ct_config_find(root, d->path)) continue;
        if (strcmp(d->path, "data.batch_size") == 0 && global_batch_set(root))
            continue; /* the per-process batch follows from the global one and the processes */
        if (d->flags & CT_KEY_REQUIRED) {
            char w[600];
            const ct_cfg_node *p = parent[0] ? ct_config_find(root, parent) : root;
            ct_exp_where(p ? p : root, w, sizeof w);
            return CT_FAIL(ctx, CT_ERR_CONFIG, "%s: missing required key '%s': %s", w, d->path,
                           d->doc);
        }
        if (d->type == CT_KEY_SECTION && !(d->flags & CT_KEY_OPTIONAL)) {
            char arg[600];
            (void)snprintf(arg, sizeof arg, "++%s={}", d->path);
            CT_TRY(ct_config_override(cfg, arg));
            continue;
        }
        if (!d->def) continue;
        if (!d->def[0]) { /* an empty string, not a null (which would count as absent) */
            CT_TRY(ct_config_set(cfg, d->path, "", true));
            continue;
        }
        char arg[700];
        (void)snprintf(arg, sizeof arg, "++%s=%s", d->path, d->def);
        CT_TRY(ct_config_override(cfg, arg));
    }
    return CT_OK;
}

/* Metrics whose value is recorded under another name than their type: accuracy's is `acc`
 * (valid/acc). Either spelling is taken in both places, a metrics list (for the type) and a
 * monitor (for the value), and the resolved configuration holds the one each place takes, so
 * both spellings make one fingerprint. The reference lists them (docs/config.md). */
static const char *const k_metric_spellings[][2] = {
    /* type, value */
    {"accuracy", "acc"},
};
static const char *const k_monitors[] = {"checkpoint.monitor", "early_stopping.monitor",
                                         "scheduler.monitor"};

/* The other spelling of `name` when it is one of a pair's `from` (0: type, 1: value), or NULL. */
static const char *respell(const char *name, int from) {
    for (size_t i = 0; i < sizeof k_metric_spellings / sizeof k_metric_spellings[0]; i++)
        if (strcmp(k_metric_spellings[i][from], name) == 0) return k_metric_spellings[i][!from];
    return NULL;
}

static ct_status set_spelling(ct_config *cfg, const ct_cfg_node *n, const char *value) {
    char path[512];
    ct_config_path(n, path, sizeof path);
    return ct_config_set(cfg, path, value, n->quoted);
}

static const char *const k_metric_lists[] = {"metrics.valid", "metrics.test"};

/* Whether a metric of the lists may record a value called `name` itself: one shown as that
 * (`name: accuracy`), or a plugin's, whose names are its own. */
static bool may_record(const ct_cfg_node *root, const char *name) {
    for (size_t l = 0; l < sizeof k_metric_lists / sizeof k_metric_lists[0]; l++) {
        const ct_cfg_node *list = ct_config_find(root, k_metric_lists[l]);
        for (const ct_cfg_node *it = list ? list->first : NULL; it; it = it->next) {
            const ct_cfg_node *nm = it->kind == CT_CFG_MAP ? ct_config_find(it, "name") : NULL;
            if ((nm && nm->kind == CT_CFG_SCALAR && strcmp(nm->value, name) == 0) ||
                (it->kind == CT_CFG_MAP && ct_config_find(it, "plugin")))
                return true;
        }
    }
    return false;
}

/* Each metric spelled as its list and its monitors take it: `acc` in metrics.valid is the type
 * accuracy, `valid/accuracy` in a monitor is the value valid/acc (unless a metric may record
 * a value of that name itself). */
static ct_status respell_metrics(ct_config *cfg) {
    const ct_cfg_node *root = ct_config_root(cfg);
    for (size_t l = 0; l < sizeof k_metric_lists / sizeof k_metric_lists[0]; l++) {
        const ct_cfg_node *list = ct_config_find(root, k_metric_lists[l]);
        for (const ct_cfg_node *it = list ? list->first : NULL; it; it = it->next) {
            const ct_cfg_node *t = it->kind == CT_CFG_MAP ? ct_config_find(it, "type") : it;
            const char *type = t && t->kind == CT_CFG_SCALAR ? respell(t->value, 1) : NULL;
            if (type) CT_TRY(set_spelling(cfg, t, type));
        }
    }
    for (size_t m = 0; m < sizeof k_monitors / sizeof k_monitors[0]; m++) {
        const ct_cfg_node *n = ct_config_find(root, k_monitors[m]);
        const char *slash = n && n->kind == CT_CFG_SCALAR ? strrchr(n->value, '/') : NULL;
        const char *value = slash ? respell(slash + 1, 0) : NULL;
        if (!value || slash - n->value > 256 || may_record(root, slash + 1)) continue;
        char name[300];
        (void)snprintf(name, sizeof name, "%.*s/%s", (int)(slash - n->value), n->value, value);
        CT_TRY(set_spelling(cfg, n, name));
    }
    return CT_OK;
}

ct_status ct_experiment_resolve(ct_ctx *ctx, ct_config *cfg) {
    ct_cfg_node *root = ct_config_root(cfg);
    drop_nulls(cfg, root);
    CT_TRY(check_map(ctx, root, ""));
    const ct_cfg_node *pb = ct_config_find(root, "data.batch_size");
    if (pb && global_batch_set(root)) {
        char w[600];
        ct_exp_where(pb, w, sizeof w);
        return CT_FAIL(ctx, CT_ERR_CONFIG,
                       "%s: key 'data.batch_size': set either data.batch_size (per process) or "
                       "data.global_batch_size (all processes together), not both",
                       w);
    }
    CT_TRY(respell_metrics(cfg));
    CT_TRY(fill_defaults(ctx, cfg));
    if (!ct_config_find(root, "name")) {
        const char *file = ct_config_name(cfg);
        const char *base = strrchr(file, '/');
        base = base ? base + 1 : file;
        char stem[256];
        (void)snprintf(stem, sizeof stem, "%s", base);
        char *ext = strrchr(stem, '.');
        if (ext && ext != stem) *ext = '\0';
        for (char *p = stem; *p; p++)
            if (isspace((unsigned char)*p) || *p == '/') *p = '_';
        CT_TRY(ct_config_set(cfg, "name", stem[0] ? stem : "experiment", true));
    }
    const ct_cfg_node *name = ct_config_find(root, "name");
    if (!name->value[0] || strchr(name->value, '/'))
        return ct_exp_key_error(
            ctx, name, "name",
            "expected a non-empty name without '/' (it names the run directory)");
    if (!ct_config_find(root, "output_dir")) {
        if (strlen(name->value) > 200)
            return ct_exp_key_error(ctx, name, "name", "longer than 200 bytes");
        char dir[512];
        (void)snprintf(dir, sizeof dir, "runs/%s", ct_config_find(root, "name")->value);
        CT_TRY(ct_config_set(cfg, "output_dir", dir, true));
    }
    CT_TRY(ct_exp_resolve_paths(ctx, cfg));
    const ct_cfg_node *od = ct_config_find(root, "output_dir");
    if (!od->value[0] || strlen(od->value) > 800)
        return ct_exp_key_error(ctx, od, "output_dir",
                                "expected a directory path of 1 to 800 bytes");
    const ct_cfg_node *me = ct_config_find(root, "trainer.max_epochs"),
                      *ms = ct_config_find(root, "trainer.max_steps");
    int64_t epochs = 0, steps = 0;
    (void)ct_exp_parse_int(me->value, &epochs);
    (void)ct_exp_parse_int(ms->value, &steps);
    if (epochs == 0 && steps == 0)
        return ct_exp_key_error(
            ctx, me, "trainer.max_epochs",
            "0 (no limit) needs trainer.max_steps > 0, or the run would never end");
    return CT_OK;
}

ct_status ct_experiment_override(ct_config *cfg, const char *arg) {
    const char *eq = strchr(arg, '=');
    if (!eq || arg[0] == '+' || arg[0] == '~' || (size_t)(eq - arg) >= 512)
        return ct_config_override(cfg, arg);
    char path[512];
    memcpy(path, arg, (size_t)(eq - arg));
    path[eq - arg] = '\0';
    const ct_key_def *d = ct_exp_schema_find(path);
    char parent[512];
    parent_of(path, parent, sizeof parent);
    const ct_key_def *sec = parent[0] ? ct_exp_schema_find(parent) : NULL;
    if (!d && (!parent[0] || (sec && sec->type == CT_KEY_SECTION)) &&
        !ct_config_find(ct_config_root(cfg), path)) {
        /* a key the schema does not have, in a section it describes: say so, not "use +" */
        const char *leaf = parent[0] ? path + strlen(parent) + 1 : path;
        ct_cfg_node where;
        memset(&where, 0, sizeof where);
        where.source = "command line";
        return unknown_key(ct_config_ctx(cfg), &where, parent, leaf);
    }
    if (!d || ct_config_find(ct_config_root(cfg), path)) return ct_config_override(cfg, arg);
    const ct_key_def *pd = parent[0] ? ct_exp_schema_find(parent) : NULL;
    if (pd && (pd->flags & CT_KEY_OPTIONAL) && !ct_config_find(ct_config_root(cfg), parent))
        return ct_config_override(cfg, arg);
    char forced[1200];
    if (snprintf(forced, sizeof forced, "++%s", arg) >= (int)sizeof forced)
        return ct_config_override(cfg, arg);
    return ct_config_override(cfg, forced);
}

/* ---- fingerprint and diff ---- */

static uint64_t fnv1a(uint64_t h, const char *s) {
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        h ^= *p;
        h *= 1099511628211ULL;
    }
    return h;
}

static bool resumable(const char *path) {
    /* the RESUMABLE flag of the key itself or of any section above it */
    char buf[512];
    (void)snprintf(buf, sizeof buf, "%s", path);
    for (;;) {
        const ct_key_def *d = ct_exp_schema_find(buf);
        if (d && (d->flags & CT_KEY_RESUMABLE)) return true;
        char *dot = strrchr(buf, '.');
        if (!dot) return false;
        *dot = '\0';
    }
}

typedef void (*leaf_fn)(void *user, const char *path, const ct_cfg_node *n);

static void walk_leaves(const ct_cfg_node *n, leaf_fn fn, void *user) {
    for (const ct_cfg_node *c = n->first; c; c = c->next) {
        char path[512];
        ct_config_path(c, path, sizeof path);
        if (resumable(path)) continue;
        if (c->kind == CT_CFG_SCALAR || c->n_children == 0)
            fn(user, path, c);
        else
            walk_leaves(c, fn, user);
    }
}

/* A leaf as the fingerprint and the diff compare it: plain numbers and bools in one canonical
 * spelling, so 0.001 and 1e-3, True and true, are the same setting. buf holds 32 bytes. */
static const char *canonical(const ct_cfg_node *n, char *buf) {
    if (n->kind == CT_CFG_MAP) return "{}";
    if (n->kind == CT_CFG_SEQ) return "[]";
    if (n->null) return "null";
    if (n->quoted) return n->value;
    int b = ct_exp_parse_bool(n->value);
    if (b >= 0) return b ? "true" : "false";
    double x;
    if (ct_exp_parse_float(n->value, &x)) {
        (void)snprintf(buf, 32, "%.17g", x);
        return buf;
    }
    return n->value;
}

/* A leaf as the diff shows it: as written. */
static const char *shown(const ct_cfg_node *n) {
    if (n->kind == CT_CFG_MAP) return "{}";
    if (n->kind == CT_CFG_SEQ) return "[]";
    return n->null ? "null" : n->value;
}

static void hash_leaf(void *user, const char *path, const ct_cfg_node *n) {
    uint64_t h = fnv1a(14695981039346656037ULL, path);
    h = fnv1a(h, "=");
    char buf[32];
    h = fnv1a(h, canonical(n, buf));
    *(uint64_t *)user += h * 0x9E3779B97F4A7C15ULL;
}

void ct_experiment_fingerprint(const ct_config *cfg, char out[17]) {
    uint64_t sum = 0;
    walk_leaves(ct_config_root(cfg), hash_leaf, &sum);
    (void)snprintf(out, 17, "%016llx", (unsigned long long)sum);
}

typedef struct diff_state {
    const ct_config *other;
    bool forward;
    char *buf;
    size_t size, at;
    int64_t count;
} diff_state;

static void diff_leaf(void *user, const char *path, const ct_cfg_node *n) {
    diff_state *ds = user;
    const ct_cfg_node *o = ct_config_find(ct_config_root(ds->other), path);
    char bo[32], bn[32];
    bool same = o && (o->kind == CT_CFG_SCALAR || o->n_children == 0) &&
                strcmp(canonical(o, bo), canonical(n, bn)) == 0;
    if (same || (!ds->forward && o)) return;
    ds->count++;
    const char *a = ds->forward ? shown(n) : "(absent)";
    const char *b = ds->forward
                        ? (o ? (o->kind == CT_CFG_SCALAR ? shown(o) : "(a section)") : "(absent)")
                        : shown(n);
    if (ds->at >= ds->size) return;
    int w = snprintf(ds->buf + ds->at, ds->size - ds->at, "%s%s: %s -> %s", ds->at ? "; " : "",
                     path, a, b);
    if (w > 0) ds->at += (size_t)w < ds->size - ds->at ? (size_t)w : ds->size - ds->at;
}

int64_t ct_experiment_diff(const ct_config *a, const ct_config *b, char *buf, size_t size) {
    diff_state ds = {b, true, buf, size, 0, 0};
    if (size) buf[0] = '\0';
    walk_leaves(ct_config_root(a), diff_leaf, &ds);
    ds.other = a;
    ds.forward = false;
    walk_leaves(ct_config_root(b), diff_leaf, &ds);
    return ds.count;
}

/* ---- the reference ---- */

static void write_metric_spellings(FILE *f) {
    (void)fputs("\n## Metric names\n\n"
                "A metric's value is recorded as `SPLIT/NAME` (`valid/loss`, `valid/f1`, "
                "`test/top5`), the name its type gives it, which is what `checkpoint.monitor`, "
                "`early_stopping.monitor` and a plateau schedule's `monitor` name. Where the "
                "name differs from the type, both spellings are taken in both places: in a "
                "metrics list the value's name means the type, and in a monitor the type's name "
                "means the value. The resolved configuration (`ctrain config`, a run's "
                "config.yaml) holds the spelling each place takes, so the two spellings are one "
                "configuration. A monitor is left as written where a metric of the lists may "
                "record a value of that name itself: one shown as it (`name: accuracy`), or a "
                "plugin's.\n\n"
                "| type (in metrics lists) | value (in monitors) |\n|---|---|\n",
                f);
    for (size_t i = 0; i < sizeof k_metric_spellings / sizeof k_metric_spellings[0]; i++)
        (void)fprintf(f, "| `%s` | `SPLIT/%s` |\n", k_metric_spellings[i][0],
                      k_metric_spellings[i][1]);
}

static void write_aliases(FILE *f) {
    (void)fputs("\n## Names from other frameworks\n\n"
                "A key with the name that PyTorch Lightning's Trainer, Keras (`Model.fit`, its "
                "optimizers and callbacks) or the Hugging Face Trainer (`TrainingArguments`) "
                "gives a setting is an unknown key like any other, but its \"did you mean\" "
                "names the ctrain key that does the same (below), wherever it is written, "
                "instead of the nearest spelling: "
                "`trainer: {gradient_clip_val: 1}` is refused with \"unknown key "
                "'trainer.gradient_clip_val' (did you mean 'trainer.grad_clip_norm'? "
                "'gradient_clip_val' is Lightning's name for it)\". `scheduler.warmup` is the "
                "`warmup` of the schedules that have one (cosine, warmup_linear, "
                "warmup_cosine).\n\n"
                "| name | used by | ctrain key |\n|---|---|---|\n",
                f);
    for (size_t i = 0; i < sizeof k_aliases / sizeof k_aliases[0]; i++) {
        char by[128];
        frameworks(k_aliases[i].frameworks, 1, by, sizeof by);
        (void)fprintf(f, "| `%s` | %s | `%s` |\n", k_aliases[i].name, by, k_aliases[i].key);
    }
}

void ct_experiment_write_reference(FILE *f) {
    static const char *const type_names[] = {"section", "integer", "number", "bool",  "string",
                                             "one of",  "mapping", "list",   "one of"};
    (void)fputs("# Experiment files\n\n"
                "<!-- Generated by `ctrain config --reference` from src/experiment/schema.c; a "
                "test keeps this file equal to its output. Edit the table, not this file. -->\n\n"
                "Every key an experiment file may hold. An unknown key, a value of the wrong type "
                "or out of range, a name that is not one of the valid values and a missing "
                "required key are errors (exit code 2) that name the file, line, column and key. "
                "A null value (`key:` with nothing after it) counts as absent. `ctrain config "
                "FILE` prints the resolved file, every default filled in. Keys marked *resumable* "
                "may change when a run resumes; a change to any other key makes `ctrain fit` "
                "refuse to resume the run directory (the configuration fingerprint differs).\n\n"
                "**Paths.** A relative path written in an experiment file is taken from the "
                "folder of that file; one given on the command line (`data.train.images=x.gz`) "
                "from the current directory, as any command-line argument. That holds for every "
                "path: a dataset's files (each type's path keys, docs/data.md), "
                "`model.init_from`, a `plugin`, `output_dir` and a `data.classes` file. The "
                "resolved configuration "
                "holds them absolute (`./` and leading `../` folded into the file's folder as "
                "realpath(3) gives it), so a run's config.yaml means the same from any "
                "directory: `ctrain eval RUN/config.yaml` (or `ctrain eval RUN`) works from "
                "anywhere. A plugin named without a `/` (`libmine.so`) is a library name that "
                "dlopen(3) looks up in the system's folders, and a plugin's own options are "
                "handed to it as written. The absolute paths are part of the fingerprint: the "
                "same file names the same data from any directory, while data that moved count "
                "as another configuration.\n\n"
                "| key | type | default | meaning |\n|---|---|---|---|\n",
                f);
    int64_t n;
    const ct_key_def *defs = ct_experiment_schema(&n);
    for (int64_t i = 0; i < n; i++) {
        const ct_key_def *d = &defs[i];
        char type[256];
        if (d->type == CT_KEY_ENUM || d->type == CT_KEY_PLUGGABLE) {
            size_t at = 0;
            at += (size_t)snprintf(type, sizeof type, "one of");
            for (const char *p = d->choices; *p && at + 4 < sizeof type;) {
                const char *bar = strchr(p, '|');
                int len = bar ? (int)(bar - p) : (int)strlen(p);
                at += (size_t)snprintf(type + at, sizeof type - at, "%s`%.*s`",
                                       p == d->choices ? " " : ", ", len, p);
                if (!bar) break;
                p = bar + 1;
            }
            if (d->type == CT_KEY_PLUGGABLE && at + 12 < sizeof type)
                (void)snprintf(type + at, sizeof type - at, ", or a plugin");
        } else if (d->type == CT_KEY_INT || d->type == CT_KEY_FLOAT) {
            if (d->hi >= 1e12)
                (void)snprintf(type, sizeof type, "%s >= %g", type_names[d->type], d->lo);
            else
                (void)snprintf(type, sizeof type, "%s in [%.15g, %.15g]", type_names[d->type],
                               d->lo, d->hi);
            if (d->choices) {
                size_t at = strlen(type);
                (void)snprintf(type + at, sizeof type - at, " or `%s`", d->choices);
            }
        } else {
            (void)snprintf(type, sizeof type, "%s", type_names[d->type]);
        }
        char def[128];
        if (d->flags & CT_KEY_REQUIRED)
            (void)snprintf(def, sizeof def, "**required**");
        else if (!d->def)
            (void)snprintf(def, sizeof def, "-");
        else
            (void)snprintf(def, sizeof def, "`%s`", d->def[0] ? d->def : "\"\"");
        (void)fprintf(f, "| `%s` | %s | %s | %s%s |\n", d->path, type, def, d->doc,
                      (d->flags & CT_KEY_RESUMABLE) ? " *resumable*" : "");
    }
    write_metric_spellings(f);
    write_aliases(f);
}
