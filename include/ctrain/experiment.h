/*
 * experiment.h - an experiment file made into a run: the schema every key is checked against
 * (types, defaults, ranges, valid values, documentation; docs/config.md is generated from it),
 * the configuration's fingerprint, and the builder that turns a resolved configuration into
 * datasets, loaders, a model, an optimizer, a schedule and a trainer, with a run directory that
 * holds config.yaml, metrics.jsonl (and metrics.csv) and checkpoints/.
 *
 * Components are found by name in the library's tables (dataset, model, metric, schedule
 * types); a user's own come from a shared library named in the file:
 *     task:  {plugin: ./libmytask.so, symbol: my_task}        (a `const ct_task`)
 *     data.train: {plugin: ./libmydata.so, symbol: my_data, ...options}   (a ct_dataset_vtable)
 *     metrics.valid: [{plugin: ./libm.so, symbol: my_metric}]            (a ct_metric_vtable)
 * A relative plugin path, as every relative path of the file, is taken from the experiment file's
 * folder (ct_experiment_resolve); a bare file name is searched as dlopen(3) searches
 * (LD_LIBRARY_PATH, the system's folders).
 *
 * Ownership: ct_experiment_create borrows the resolved config (and fills in what needs the
 * data), which must outlive the experiment; the experiment owns everything it builds (and the
 * plugins it opened).
 */
#ifndef CTRAIN_EXPERIMENT_H
#define CTRAIN_EXPERIMENT_H

#include <stdio.h>

#include "ctrain/config.h"
#include "ctrain/trainer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ct_key_type {
    CT_KEY_SECTION = 0, /* a mapping of the keys listed under it */
    CT_KEY_INT,
    CT_KEY_FLOAT,
    CT_KEY_BOOL,    /* true | false */
    CT_KEY_STRING,  /* any text */
    CT_KEY_ENUM,    /* one of `choices` */
    CT_KEY_OPTIONS, /* a mapping handed to a component, which checks its own keys */
    CT_KEY_LIST,    /* a sequence of names or option mappings */
    CT_KEY_PLUGGABLE /* one of `choices`, or {plugin: PATH, symbol: NAME} */,
    CT_KEY_TYPE_COUNT
} ct_key_type;

#define CT_KEY_REQUIRED 1u /* must be given */
#define CT_KEY_OPTIONAL                                                                            \
    2u                      /* a section whose presence turns a feature on: no defaults are        \
                               filled in unless it is there */
#define CT_KEY_RESUMABLE 4u /* may differ when a run resumes: not part of the fingerprint */

typedef struct ct_key_def {
    const char *path; /* "optimizer.lr" */
    ct_key_type type;
    const char *def;     /* the default as YAML text; NULL: none (absent means off, or the
                            component's own default) */
    double lo, hi;       /* INT, FLOAT: the accepted range */
    const char *choices; /* ENUM, PLUGGABLE: "a|b|c"; INT, FLOAT: words also accepted ("auto") */
    unsigned flags;
    const char *doc; /* one or two sentences for docs/config.md */
} ct_key_def;

/* The schema: every key an experiment file may hold. */
CT_API const ct_key_def *ct_experiment_schema(int64_t *count);

/*
 * Checks a loaded config (after overrides) against the schema and fills in every default, so
 * that the config is the resolved one. Errors (CT_ERR_CONFIG, each "file:line:col: key
 * 'path': ..."): an unknown key, with the closest known one and the section's keys; a value of
 * the wrong type; a number out of range; a name that is not one of the valid values (listed); a
 * missing required key. A null value (`key:` with nothing) counts as absent.
 * `name` defaults to the file's stem and `output_dir` to runs/<name> in the current directory.
 * Every relative path (a built-in dataset type's path keys, model.init_from, each `plugin` with
 * a '/', output_dir) is made absolute: from the folder of the file a node came from (its
 * realpath), or from the current directory for a value set by an override; so the resolved
 * config names the same files wherever it is read from (docs/config.md, Paths). Resolving a
 * resolved config changes nothing.
 */
CT_API ct_status ct_experiment_resolve(ct_ctx *ctx, ct_config *cfg);

/* ct_config_override, except that `key=value` for a key of the schema that the file lacks
 * sets it, as Hydra does for keys with defaults (only `+` would be accepted otherwise), unless
 * the key lies in an optional section the file does not have (early_stopping.patience: that
 * needs `+`, since adding it turns the feature on). */
CT_API ct_status ct_experiment_override(ct_config *cfg, const char *arg);

/* A 16-hex-digit fingerprint of a resolved config: every key but the RESUMABLE ones, in a way
 * that does not depend on the order of keys in the file. */
CT_API void ct_experiment_fingerprint(const ct_config *cfg, char out[17]);
/* The keys (not RESUMABLE) whose values differ between two resolved configs, as
 * "optimizer.lr: 0.1 -> 0.2; ..." into buf (truncated to fit). Returns how many differ. */
CT_API int64_t ct_experiment_diff(const ct_config *a, const ct_config *b, char *buf, size_t size);

/* Writes the schema as the Markdown reference of docs/config.md. */
CT_API void ct_experiment_write_reference(FILE *f);
/* Writes what `ctrain --version` prints: "ctrain VERSION", then one "name: value" line each for
 * the commit it was built from ("unknown" when not built from a git checkout), the compiler, the
 * build type, whether the CPU it runs on has AVX-512, AVX512_BF16 and AMX (found at run time),
 * and the versions of oneDNN (with the ISA it uses here), OpenBLAS, MPI and OpenMP. */
CT_API void ct_experiment_write_build_info(FILE *f);
/* The kernels ctx runs on, for a run's first lines: "oneDNN avx512_core_bf16 (bf16 native)"
 * (the instruction set oneDNN uses on this CPU), "OpenBLAS (...)" or "reference (...)", then
 * whether bf16 products have native kernels or run on the f32 ones. Always NUL-terminated. */
CT_API void ct_experiment_kernels_text(ct_ctx *ctx, char *buf, size_t size);

typedef struct ct_experiment ct_experiment;

typedef struct ct_experiment_params {
    /* Called after the experiment's own handlers (which write metrics.jsonl); user, e.g. the
     * command line's progress display. The trainer argument is the experiment's. */
    ct_trainer_callbacks callbacks;
    /* true: write nothing into the run directory (evaluation, prediction): no config.yaml, no
     * metrics logs, no checkpoints. */
    bool read_only;
    /* The communicator (borrowed; NULL = one process). With several ranks each reads its shard
       of every split, the trainer averages gradients and reduces metrics over them, and only
       rank 0 writes into the run directory (docs/distributed.md). */
    ct_comm *comm;
    /* fit starts over: an existing run in output_dir is moved to OUTPUT_DIR.old-DATE-TIME
       (after taking its lock: never a run in progress) instead of being resumed. */
    bool restart;
    /* Asked with callbacks.user while fit writes a report (ct_report_params.cancelled): true
       stops that report, which is then not written (the command line: a signal arrived). The
       report that ends a run a callback interrupted is not asked: it is the picture of what
       ran. NULL = never. */
    bool (*report_cancelled)(void *user);
} ct_experiment_params;

CT_API ct_experiment_params ct_experiment_default_params(void);

/*
 * Builds the run from a resolved config: opens the datasets and plugins, builds the model,
 * optimizer, schedule and trainer. Values that need the data are filled into the config
 * (scheduler `total: auto` becomes the step count), so config.yaml and the fingerprint hold
 * them. fit (unless read_only) creates output_dir and writes the config there as
 * config.yaml. Before any dataset is opened, every component's type name, option keys and the
 * values that do not depend on the data are checked, so such an error is never hidden behind a
 * data file's. Once the model is built, one zero sample of the training data's shape goes through
 * it (evaluation mode, a graph of its own: nothing random is drawn, no statistic updated), and
 * an output that does not fit what the loss takes of the targets is CT_ERR_CONFIG naming the
 * layer and both shapes. Errors: CT_ERR_CONFIG for a component's bad type, key or value (naming
 * the file, line and key, with a suggestion for a near name), CT_ERR_IO / CT_ERR_FORMAT for data
 * files, CT_ERR_OOM naming the configuration key behind the model's largest tensor, and the
 * builders' own. *out is NULL on failure. The config is borrowed: keep it until the
 * experiment is destroyed. fit takes the run directory's lock, which destroy releases.
 */
CT_API ct_status ct_experiment_create(ct_ctx *ctx,
                                      ct_config *resolved,
                                      const ct_experiment_params *p,
                                      ct_experiment **out);
CT_API void ct_experiment_destroy(ct_experiment *e);

CT_API ct_trainer *ct_experiment_trainer(const ct_experiment *e);
CT_API ct_model *ct_experiment_model(const ct_experiment *e);
CT_API ct_params *ct_experiment_params_store(const ct_experiment *e);
/* The optimizer (its state: ct_optim_buffer); NULL for an experiment built only to evaluate. */
CT_API ct_optim *ct_experiment_optimizer(const ct_experiment *e);
CT_API const char *ct_experiment_output_dir(const ct_experiment *e);
/* The engine keys ("valid", "test", then "decode" with a decode section) in order; n receives
 * the count. */
CT_API const char *const *ct_experiment_engines(const ct_experiment *e, int64_t *n);
/* Samples in one training epoch on this process, and the training batch size. */
CT_API int64_t ct_experiment_train_samples(const ct_experiment *e);
/* The dataset info of the training data (after the experiment's transforms: f32 features when
 * the model takes numbers). */
CT_API const ct_dataset_info *ct_experiment_train_info(const ct_experiment *e);
/* The loader transforms applied to evaluation data, to apply to prediction inputs too. */
CT_API const ct_loader_params *ct_experiment_eval_loader_params(const ct_experiment *e);
CT_API ct_task_kind ct_experiment_task_kind(const ct_experiment *e);
/* The dataset indices of the training batches batch_first..batch_last (inclusive, numbered from
 * 0 in the epoch) of the training loader's current epoch, on this process, in the order they are
 * read: the samples an accumulation window trains on, as incident bundles record them. Up to cap
 * of them into out; *n receives the count. Errors: CT_ERR_OOM, the loader's. */
CT_API ct_status ct_experiment_window_samples(const ct_experiment *e,
                                              int64_t batch_first,
                                              int64_t batch_last,
                                              int64_t *out,
                                              int64_t cap,
                                              int64_t *n);

/*
 * Trains (ct_trainer_fit), resuming from the run directory's latest checkpoint when it has
 * one whose configuration fingerprint matches (a different one fails with CT_ERR_CONFIG
 * naming the keys that changed: use another output_dir, or delete the old run).
 * Then evaluates the "test" engine once when it has no cadence of its own. Metrics go to
 * metrics.jsonl; on a resume, records of steps after the checkpoint are dropped first.
 */
CT_API ct_status ct_experiment_fit(ct_experiment *e);

/*
 * Whether the run in run_dir has finished: fit writes RUN/finished.json ({"step": N, "epoch":
 * E, "early_stopped": B}) once training has ended by itself (its step or epoch limit, early
 * stopping), after its last checkpoint, and removes it when a fit takes the directory again;
 * a run stopped by a signal or an error has none. *finished receives the answer and *step (may
 * be NULL) the run's last step (-1 when not finished); a missing mark is not an error.
 * Errors: CT_ERR_FORMAT for a mark that is not that JSON, naming the file.
 */
CT_API ct_status ct_experiment_run_finished(ct_ctx *ctx,
                                            const char *run_dir,
                                            bool *finished,
                                            int64_t *step);

/* Loads a checkpoint ("latest", "best" or a path) into the model for evaluation: the EMA
 * weights when the run keeps an EMA, as its evaluations did. *step receives its step.
 * ct_experiment_load_with(e, which, true, step, NULL). */
CT_API ct_status ct_experiment_load(ct_experiment *e, const char *which, int64_t *step);

/* The weights ct_experiment_load_with put into the model. */
typedef enum ct_weights_kind {
    CT_WEIGHTS_TRAINED, /* a checkpoint's model.safetensors */
    CT_WEIGHTS_EMA,     /* a checkpoint's ema.safetensors */
    CT_WEIGHTS_FILE,    /* a safetensors file of the model's tensors (from PyTorch, say) */
} ct_weights_kind;

/*
 * ct_experiment_load, with a choice: `which` ending in ".safetensors" names a weights file
 * holding every tensor of the model by name and of its shape, nothing else (*step -1); any
 * other `which` is a checkpoint, whose EMA weights are loaded when the run keeps an EMA, the
 * checkpoint has them and `ema` is true, else its trained weights. *kind (may be NULL)
 * receives which. Errors: as ct_experiment_load's, and those of ct_safetensors_load naming
 * the file and the tensor for a file that does not fit the model.
 */
CT_API ct_status ct_experiment_load_with(
    ct_experiment *e, const char *which, bool ema, int64_t *step, ct_weights_kind *kind);

/*
 * Runs the model over the features in `input` (a .npy array (N, sample...) of the training
 * data's sample shape; u8 or numbers) after the evaluation transforms and writes `output`:
 * .csv rows "index,class,p_0,...,p_{C-1}" (classification: the argmax and the softmax
 * probabilities) or "index,y_0,..." (regression), or a .npy float32 array [N, C] of those
 * probabilities or values. A language model gives its logits: with params->logits and a .npy
 * output, for input token ids [N, T] (whole numbers below vocab; T the model's context) a
 * float32 array [N, T, vocab]; otherwise CT_ERR_CONFIG. Errors:
 * CT_ERR_FORMAT / CT_ERR_IO for the input, CT_ERR_SHAPE for a sample shape that differs from
 * the model's, CT_ERR_IO for the output (written to a temporary name, then renamed).
 */
CT_API ct_status ct_experiment_predict(ct_experiment *e, const char *input, const char *output);

/* How ct_experiment_predict_with writes its rows. */
typedef struct ct_predict_params {
    bool logits;  /* a classifier's raw scores (CSV columns logit_j) instead of probabilities */
    FILE *stream; /* when set, the CSV rows go to this stream and `output` is not used */
} ct_predict_params;

CT_API ct_predict_params ct_predict_default_params(void);

/* ct_experiment_predict with params (NULL: the defaults). Logits of a model that is not a
 * classifier are refused (CT_ERR_CONFIG): its values are already its outputs. */
CT_API ct_status ct_experiment_predict_with(ct_experiment *e,
                                            const char *input,
                                            const char *output,
                                            const ct_predict_params *params);

/*
 * Text from a byte-level language model (vocab 256, the `text` dataset's): each prompt's bytes
 * are token ids; a prompt longer than the context keeps its last `context` bytes. At each
 * position the logits after the last token are divided by temperature, cut to the top_k
 * largest (ties at the cut kept), then to the nucleus: the smallest set of the likeliest tokens
 * whose probabilities sum to at least top_p (ties at the cut kept); a token is drawn from what
 * is left with a counter-based stream. Temperature 0 is greedy decoding: the token of the
 * largest logit (the lowest byte on a tie), whatever top_k, top_p and seed.
 */
typedef struct ct_generate_params {
    int64_t max_tokens;      /* tokens to generate after each prompt [64] */
    double temperature;      /* 0 = greedy (lowest id on a tie) [0] */
    int64_t top_k;           /* 0 = all [0] */
    double top_p;            /* nucleus mass in (0, 1]; 1 = all [1] */
    uint64_t seed;           /* prompt i samples from ct_rng_init(seed, i) [0] */
    const char *const *stop; /* stop strings: generation of a prompt ends after the
                                first one appears in its continuation (kept in it) */
    int64_t n_stop;
    bool use_cache; /* key/value cache [true]; false = full recompute */
} ct_generate_params;

CT_API ct_generate_params ct_generate_default_params(void);

/*
 * Continues each of n NUL-terminated prompts; out[i] receives the continuation only
 * (NUL-terminated, ct_alloc'd on the experiment's context), freed by
 * ct_experiment_free_texts(e, out, n). Same results batched or one prompt at a time.
 *
 * The prompts are decoded side by side (in groups of up to 64) through the model's decoder
 * (ct_model_decoder: gpt's key/value cache unless use_cache is false or trainer.precision is
 * bf16; then each window is recomputed through the model, in trainer.precision). A prompt's
 * continuation ends after max_tokens bytes, after a stop string (kept), or at a generated byte
 * 0 (not kept: the text is a C string). On failure every out[i] is NULL. Errors: CT_ERR_CONFIG
 * for a model that is not a byte-level language model, an empty prompt or stop string, or a
 * parameter out of range (naming it); CT_ERR_OOM.
 */
CT_API ct_status ct_experiment_generate_batch(ct_experiment *e,
                                              const char *const *prompts,
                                              int64_t n,
                                              const ct_generate_params *p,
                                              char **out);
/* Frees texts[0..n) of ct_experiment_generate_batch and sets them NULL; NULL entries are
 * skipped. */
CT_API void ct_experiment_free_texts(ct_experiment *e, char **texts, int64_t n);

/*
 * Samples n_tokens bytes from a byte-level language model (vocab 256, the `text` dataset's)
 * after `prompt`, writing the prompt and the continuation to out: at each position the logits
 * of the last token of the window (the last `context` tokens) are divided by temperature
 * (> 0), cut to the top_k largest (0 = all), and a token is drawn from their softmax with a
 * counter-based stream of `seed` (ct_rng_init(seed, 0x73616d706c65), not the batch API's
 * stream 0), so the same arguments give the same text. It runs ct_experiment_generate_batch's
 * decoding (the key/value cache where the model allows it) on one prompt; a generated byte 0
 * is written and does not end the text. Temperature 0 is
 * greedy decoding: the token of the largest logit (the lowest such byte on a tie), whatever
 * top_k and seed. Errors:
 * CT_ERR_CONFIG for a model that is not a byte-level language model or a bad argument.
 */
CT_API ct_status ct_experiment_generate(ct_experiment *e,
                                        const char *prompt,
                                        int64_t n_tokens,
                                        double temperature,
                                        int64_t top_k,
                                        uint64_t seed,
                                        FILE *out);

/* ---- for other languages (src/experiment/embed.c) ----
 * What a program reaching the library through a foreign-function interface (the Python
 * package in python/, docs/python.md) calls without mirroring the structs above: handles,
 * flags, scalars, plain callbacks and float arrays. The final metrics of a fit are
 * ct_trainer_metrics of ct_experiment_trainer for each key of ct_experiment_engines (and
 * "train"); a run's weights are its checkpoints' model.safetensors (docs/checkpoints.md).
 */

/*
 * Loads `path`, an experiment file or a run directory (its config.yaml, with output_dir that
 * directory, wherever the run was made), applies n_overrides overrides in order
 * (ct_experiment_override: "optimizer.lr=3e-4"; overrides may be NULL when n_overrides is 0)
 * and resolves it (ct_experiment_resolve), as the command line does. *out is NULL on failure;
 * the caller destroys the config (ct_config_destroy) after every experiment made from it.
 * Errors: CT_ERR_IO for a directory without config.yaml, those of ct_config_load_file, and
 * CT_ERR_CONFIG naming the key for a bad override or value.
 */
CT_API ct_status ct_experiment_load_config(ct_ctx *ctx,
                                           const char *path,
                                           const char *const *overrides,
                                           int64_t n_overrides,
                                           ct_config **out);

/*
 * A progress report from a fit. `event` is one of:
 *   "batch"  a training micro-batch ended; values "loss" (NaN when not finite), "batch" and
 *            "batches" (the epoch's micro-batches done and in all);
 *   "log"    the training record: train/loss, train/lr, ... as on_log has them;
 *   "eval"   an evaluation engine's values: valid/loss, valid/acc, ...;
 *   "epoch"  an epoch ended (no values);
 *   "end"    training ended (no values); the final "test" evaluation of ct_experiment_fit,
 *            when it has one, follows as an "eval" event.
 * step is ct_trainer_step at the event (at a "batch" event that + 1: the step the batch is
 * part of), epoch ct_trainer_current_epoch. Strings and values are valid during the call only.
 * Returns CT_OK to go on, CT_STOP to end the run cleanly (at a "batch" event: after the current
 * step and the evaluations due at it, with its checkpoint, as on_batch's CT_STOP), or another
 * status to end the fit with it (the callback records its message with CT_FAIL).
 */
typedef ct_status (*ct_experiment_progress_fn)(void *user,
                                               const char *event,
                                               int64_t step,
                                               int64_t epoch,
                                               const ct_metric_value *values,
                                               int64_t n);

typedef struct ct_experiment_progress {
    ct_experiment_progress_fn fn;
    void *user;
} ct_experiment_progress;

#define CT_EXPERIMENT_READ_ONLY 1u /* ct_experiment_params.read_only */
#define CT_EXPERIMENT_RESTART   2u /* ct_experiment_params.restart */

/*
 * ct_experiment_create with the default params but for `flags` (CT_EXPERIMENT_*) and, when
 * progress is not NULL, callbacks that report to it: borrowed, keep it until the experiment is
 * destroyed. Sets the context's thread count from the config's `threads` first, as the command
 * line does. Errors: ct_experiment_create's, CT_ERR_INVALID_ARG for an unknown flag or a
 * progress without fn. *out is NULL on failure.
 */
CT_API ct_status ct_experiment_open(ct_ctx *ctx,
                                    ct_config *resolved,
                                    unsigned flags,
                                    ct_experiment_progress *progress,
                                    ct_experiment **out);

/* The values the model gives per sample: a classifier's classes, a regression's outputs. */
CT_API int64_t ct_experiment_output_size(const ct_experiment *e);

/*
 * ct_experiment_predict for n samples in memory: x holds n samples of float32 features, each of
 * the training data's sample shape (sample_shape[0..ndim): [784] or [1, 28, 28]), row-major, as
 * the data files hold them (the evaluation transforms are applied here). Writes n rows of
 * ct_experiment_output_size floats to out (out_count of them: n * that size): a classifier's
 * softmax probabilities, or its logits with `logits`, or a regression's values; the same
 * numbers ct_experiment_predict writes to a .npy file for the same samples. Language models
 * are refused (CT_ERR_CONFIG), as logits of a model that is not a classifier; CT_ERR_SHAPE
 * for another sample shape or out_count; CT_ERR_FORMAT for an inf or NaN feature unless
 * data.nonfinite is allow. x and out are the caller's.
 */
CT_API ct_status ct_experiment_predict_array(ct_experiment *e,
                                             const float *x,
                                             int64_t n,
                                             const int64_t *sample_shape,
                                             int32_t ndim,
                                             bool logits,
                                             float *out,
                                             int64_t out_count);
/*
 * Writes the model's weights (whatever is in the model now: load a checkpoint first with
 * ct_experiment_load) as a safetensors file at path, for PyTorch and other frameworks: every
 * tensor of the store under its state_dict name, and a tied weight under each of its names
 * (nanoGPT's transformer.wte.weight and lm_head.weight), so load_state_dict(strict=True) of
 * the equivalent module accepts it. dtype CT_F32, or CT_BF16 for f32 tensors rounded to bf16
 * (half the size); buffers keep their dtype. Metadata: "format": "pt", "exported_by": "ctrain",
 * "dtype". Errors: CT_ERR_INVALID_ARG for another dtype, CT_ERR_IO naming the file (written
 * to path.tmp, then renamed: a failure leaves no partial file at path).
 */
CT_API ct_status ct_experiment_export_weights(ct_experiment *e, const char *path, ct_dtype dtype);

#ifdef __cplusplus
}
#endif

#endif /* CTRAIN_EXPERIMENT_H */
