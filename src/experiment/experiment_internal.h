/*
 * experiment_internal.h - what the experiment module's files share: the experiment itself
 * (struct ct_experiment: checked by check.c, built by build.c, run by experiment.c, recorded by
 * records.c, used by predict.c), the config readers of access.c, the schema's table lookup and
 * the scalar readers that schema.c and the builders both use, so that a value is parsed the
 * same way when it is checked and when it is used, rundir.c's run directory (its lock) and
 * record files, and the kinds' names (kinds.c). Each section names the file that defines what
 * it declares. Not installed; not part of the API.
 */
#ifndef CT_EXPERIMENT_INTERNAL_H
#define CT_EXPERIMENT_INTERNAL_H

#include <limits.h>
#include <sys/types.h>

#include "config/config_internal.h"
#include "core/core_internal.h"
#include "ctrain/checkpoint.h"
#include "ctrain/experiment.h"
#include "ctrain/tboard.h"

/* ---- schema.c: the table of keys, its messages, and the scalar readers ---- */

/* The table's entry for a key path, or NULL. */
CT_INTERNAL const ct_key_def *ct_exp_schema_find(const char *path);
/* A name another framework gives to a setting ctrain has (schema.c's table): the name, the
 * ctrain key (a schema key, or a component's option such as scheduler.warmup) and the
 * frameworks that use the name (bits of schema.c's list). find gives NULL for a name that is
 * none; hint writes " (did you mean 'KEY'? 'NAME' is Lightning's name for it)" into buf, or
 * " (did you mean 'KEY'?)" where the name is ctrain's too, in another section, and returns it. */
typedef struct ct_exp_alias {
    const char *name, *key;
    unsigned frameworks;
} ct_exp_alias;
CT_INTERNAL const ct_exp_alias *ct_exp_alias_find(const char *name);
CT_INTERNAL const char *ct_exp_alias_hint(const ct_exp_alias *a, char *buf, size_t size);
/* "FILE:L:C" of a node (or "command line" for an override's), into buf. */
CT_INTERNAL void ct_exp_where(const ct_cfg_node *n, char *buf, size_t size);
/* CT_ERR_CONFIG "FILE:L:C: key 'PATH': WHAT" at node n. */
CT_INTERNAL ct_status ct_exp_key_error(ct_ctx *ctx,
                                       const ct_cfg_node *n,
                                       const char *path,
                                       const char *what);
CT_INTERNAL int ct_exp_parse_bool(const char *v); /* 1, 0, or -1 when not a bool */
CT_INTERNAL bool ct_exp_parse_int(const char *v, int64_t *out);
CT_INTERNAL bool ct_exp_parse_float(const char *v, double *out);

/* The first line of the config.yaml a fit writes: what tells a run directory from a folder of
 * other files. */
#define CT_RUN_CONFIG_MARK "# the resolved configuration of this run"

/* ---- paths.c ---- */

/* Every path the configuration names (output_dir, model.init_from, plugins, the built-in
 * datasets' path keys) made absolute: from its file's folder, or from the current directory
 * for one set on the command line. */
CT_INTERNAL ct_status ct_exp_resolve_paths(ct_ctx *ctx, ct_config *cfg);

/* ---- rundir.c: the run directory and the record files ---- */

/* A fit's run directory, held by a lock on the folder itself. */
typedef struct ct_rundir {
    int fd;           /* the directory, locked; -1 when not held */
    int lock_file_fd; /* `.lock`, locked instead where the file system cannot lock a folder */
    dev_t dev;        /* the directory's identity, for ct_exp_rundir_check */
    ino_t ino;
    char path[PATH_MAX];
} ct_rundir;

/*
 * Creates dir when missing and takes its lock. Refused
 * (CT_ERR_CONFIG): a dir that another fit holds (naming its pid and host), that holds files
 * that are not a ctrain run, or that is a file. With restart, an existing run at dir is first
 * locked and renamed to dir.old-DATE-TIME (never the current directory, a folder above it, or
 * the folder of config_file, which may be NULL).
 */
CT_INTERNAL ct_status ct_exp_rundir_open(
    ct_ctx *ctx, const char *dir, const char *config_file, bool restart, ct_rundir *out);
/* Records this process (pid, host, start time) in .lock, which a refused fit quotes: done once
 * the run is accepted, so a refused one writes nothing. */
CT_INTERNAL void ct_exp_rundir_claim(ct_ctx *ctx, const ct_rundir *d);
/* Releases the lock (a NULL or never-opened directory is fine). */
CT_INTERNAL void ct_exp_rundir_close(ct_rundir *d);
/* CT_ERR_IO when the run directory's path no longer names the locked folder. */
CT_INTERNAL ct_status ct_exp_rundir_check(ct_ctx *ctx, const ct_rundir *d);

/* A record file (metrics.jsonl, metrics.csv): one write per record, each checked. */
typedef struct ct_record_file {
    int fd; /* -1 when not open */
    char path[PATH_MAX];
} ct_record_file;

CT_INTERNAL ct_status ct_exp_record_open(ct_ctx *ctx,
                                         ct_record_file *f,
                                         const char *path,
                                         bool append);
/* Appends n bytes; on failure the file is cut back to where it was and CT_ERR_IO names it. */
CT_INTERNAL ct_status ct_exp_record_put(ct_ctx *ctx, ct_record_file *f, const char *text, size_t n);
CT_INTERNAL ct_status ct_exp_record_close(ct_ctx *ctx, ct_record_file *f);

/* ---- the experiment ---- */

#define CT_EXP_MAX_PLUGINS 16
#define CT_EXP_MAX_ENGINES 2 /* valid, test */

/* A block of the experiment's string pool (access.c). */
typedef struct ct_exp_pool_block {
    struct ct_exp_pool_block *next;
    size_t size;
} ct_exp_pool_block;

typedef enum ct_exp_loss_kind {
    CT_EXP_LOSS_AUTO = 0,
    CT_EXP_LOSS_CE,
    CT_EXP_LOSS_MSE,
    CT_EXP_LOSS_L1,
    CT_EXP_LOSS_SMOOTH_L1,
    CT_EXP_LOSS_HUBER,
    CT_EXP_LOSS_COUNT
} ct_exp_loss_kind;

/* The decode engine (decode.c): its prompts, references and generation parameters. */
typedef struct ct_exp_decode {
    bool on;
    char **prompts; /* n prompts, in the pool */
    char **refs;    /* their references; NULL entries for none */
    int64_t n;
    bool has_refs;
    const char **stops; /* decode.stop, borrowed from the config */
    int64_t n_stop;
    ct_generate_params gp;
    int64_t log_examples;
    bool at_end;
    int64_t last_step; /* the step of the last pass; -1 none */
} ct_exp_decode;

/*
 * Ownership: the experiment owns everything it builds. Option lists handed to components point
 * into the borrowed config or into strings the experiment owns (joined lists, computed
 * defaults), all kept in `pool` until ct_experiment_destroy, because the trainer and the
 * metric sets borrow their options for their lifetime.
 */
struct ct_experiment {
    ct_ctx *ctx;
    ct_config *cfg;
    ct_experiment_params p;
    ct_exp_pool_block *pool;
    const char *out_dir;
    void *plugins[CT_EXP_MAX_PLUGINS];
    int n_plugins;

    ct_dataset *train_all, *train, *valid_all, *valid, *test;
    ct_loader *train_loader, *eval_loaders[CT_EXP_MAX_ENGINES];
    ct_loader_params train_lp, eval_lp;
    ct_dataset_info info;
    ct_config_classes classes; /* data.classes; n 0: not given */

    ct_params *params;
    ct_model *model;
    ct_optim *opt;
    ct_schedule *sched;
    bool sched_per_epoch;
    const char *sched_metric;
    const char *sched_auto; /* "scheduler.t_max=150": what `auto` gave, or NULL */
    int64_t steps_per_epoch;
    int64_t ps_workers; /* trainer.strategy parameter_server: the workers; 0 otherwise */
    ct_task task;
    ct_exp_loss_kind loss;
    float label_smoothing, beta, delta;

    ct_eval_engine engines[CT_EXP_MAX_ENGINES + 1]; /* and the decode engine's */
    const char *engine_keys[CT_EXP_MAX_ENGINES + 1];
    int64_t n_engines;
    int64_t test_every;
    ct_options monitor_o, es_o, ema_o, nf_o, spike_o;
    ct_trainer_params tp;
    ct_trainer *trainer;
    char fingerprint[17];

    ct_rundir run;             /* fit's run directory, locked while fit runs */
    ct_record_file jsonl, csv; /* fd -1: not written */
    char *rec;                 /* the record being formatted (rec_cap bytes) */
    size_t rec_len, rec_cap;
    ct_tb_writer *tb;
    int64_t hist_every;   /* epochs between histograms; 0 = none */
    unsigned tb_classes;  /* bit i: engine_keys[i]'s confusion class names went to TensorBoard */
    bool final_testing;   /* fit's last test evaluation runs: it never makes a best */
    bool hist_grads_due;  /* the epoch's last window is running: its gradients go out */
    double t_last_log;    /* for samples_per_sec between records */
    double paused;        /* seconds of evaluations and checkpoint writes since then */
    double pause_from;    /* when the current one began; 0: training runs */
    double comm_last_log; /* ct_trainer_comm_seconds at the last record */
    int64_t step_last_log;
    int64_t n_lines, n_rows; /* records written: metrics.jsonl's lines, metrics.csv's rows */
    int64_t batch_size, accum;
    bool incidents_capped; /* trainer.max_incidents was reached: warned once */
    ct_exp_decode decode;
};

/* ---- decode.c: the decode engine ---- */

/* With a decode section: reads its prompts (and references) and adds the engine "decode"
 * after the others, its pass in tp->evaluate. Errors: CT_ERR_CONFIG naming the key or the
 * prompts file's line, CT_ERR_IO for a file that cannot be read. */
CT_INTERNAL ct_status ct_exp_add_decode(ct_experiment *e, ct_trainer_params *tp);
/* decode.at_end: a pass after training unless the last step had one. */
CT_INTERNAL ct_status ct_exp_decode_at_end(ct_experiment *e);

/* ---- incident.c: incident bundles ---- */

/* Statistics of x[0..n) in double; min, max and l2 over the finite values only (min and max
 * 0 when finite is 0). */
typedef struct ct_exp_stats {
    int64_t nonfinite, finite;
    double min, max, l2;
} ct_exp_stats;
CT_INTERNAL ct_exp_stats ct_exp_stats_of(const float *x, int64_t n);
/* RUN/incidents/step-N/ for the incident (docs/policies.md): rank 0 only, up to
 * trainer.max_incidents per run directory; a failure is a warning. */
CT_INTERNAL void ct_exp_write_incident(ct_experiment *e, const ct_incident *in);

/* ---- access.c: the string pool, the config's resolved values, options, plugins ---- */

/* Zeroed memory that lives until the experiment is destroyed; NULL when out of memory. */
CT_INTERNAL void *ct_exp_pool_alloc(ct_experiment *e, size_t size);
CT_INTERNAL char *ct_exp_pool_printf(ct_experiment *e, const char *fmt, ...) CT_PRINTF(2, 3);
CT_INTERNAL void ct_exp_pool_free(ct_experiment *e);
/* CT_ERR_OOM naming the config file. */
CT_INTERNAL ct_status ct_exp_oom(ct_experiment *e);

/* The node at a dotted path of the config, or NULL. Resolved keys are present and checked: the
 * readers below only convert (0, fallback, false or NULL where a key is absent). */
CT_INTERNAL const ct_cfg_node *ct_exp_node(const ct_experiment *e, const char *path);
CT_INTERNAL const char *ct_exp_str_at(const ct_experiment *e, const char *path);
CT_INTERNAL int64_t ct_exp_int_at(const ct_experiment *e, const char *path);
CT_INTERNAL double ct_exp_float_at(const ct_experiment *e, const char *path, double fallback);
CT_INTERNAL bool ct_exp_bool_at(const ct_experiment *e, const char *path);
/* trainer.precision: training, evaluation and prediction all compute in it. */
CT_INTERNAL ct_dtype ct_exp_precision_at(const ct_experiment *e);
/* "FILE:L:C: key 'PATH'" of a node, into buf: where a message about a key's value starts. */
CT_INTERNAL void ct_exp_key_where(const ct_cfg_node *n, char *buf, size_t size);
/* "FILE:L:C: PATH" of a node, in the pool (NULL when out of memory). */
CT_INTERNAL char *ct_exp_where_of(ct_experiment *e, const ct_cfg_node *n);

/* A mapping as key=value options (sequences joined with commas), minus the NULL-terminated
 * `skip` keys, with room for `extra` more (ct_exp_add_option); items and strings in the pool. */
CT_INTERNAL ct_status ct_exp_to_options(ct_experiment *e,
                                        const ct_cfg_node *map,
                                        const char *const *skip,
                                        int64_t extra,
                                        ct_options *out);
/* Appends to options made with room for it. */
CT_INTERNAL void ct_exp_add_option(ct_options *o, const char *key, const char *value);
/* Opens the plugin of a mapping's `plugin: PATH, symbol: NAME` (kept open until the experiment
 * is destroyed) and finds its symbol, a struct whose first member must be the tag `want`
 * (CT_PLUGIN_DATASET, ...): another is a CT_ERR_CONFIG saying what the symbol is. */
CT_INTERNAL ct_status ct_exp_plugin_symbol(ct_experiment *e,
                                           const ct_cfg_node *map,
                                           ct_plugin_tag want,
                                           const void **out);
/* Closes the plugins, last opened first. */
CT_INTERNAL void ct_exp_plugins_close(ct_experiment *e);

/* ---- check.c: the checks before any data is read, and the model against the data ---- */

/* Every component's types, keys and the option values that do not depend on the data. */
CT_INTERNAL ct_status ct_exp_check_components(ct_experiment *e);
/* data.classes against the training data: as many names as it has classes. */
CT_INTERNAL ct_status ct_exp_check_classes(ct_experiment *e);
/* One sample of the training data through the built model, its output against what the loss
 * takes: a configuration error naming the layer (or the size key) and both shapes. */
CT_INTERNAL ct_status ct_exp_check_output(ct_experiment *e);
/* Opens and closes a metric with n_classes classes; an error names where it was written. */
CT_INTERNAL ct_status ct_exp_open_metric(ct_experiment *e,
                                         const ct_metric_vtable *vt,
                                         const ct_options *o,
                                         int64_t n_classes);
/* A metric's mapping as options, less the keys the experiment reads (type, name, plugin,
 * symbol), and its name checked: it goes verbatim into metrics.jsonl, metrics.csv and
 * TensorBoard tags. */
CT_INTERNAL ct_status ct_exp_metric_options(ct_experiment *e, const ct_cfg_node *it, ct_options *o);

/* ---- build.c: the parts of the run, from the checked configuration ---- */

/* A parameter group of optimizer.groups, as written. */
typedef struct ct_exp_group {
    const char *params; /* the glob list */
    double lr_scale, weight_decay;
    const char *where; /* the group's, for messages */
} ct_exp_group;

/* In ct_experiment_create's order: the datasets and loaders (e->info is then the training
 * data's), the task and loss, the model, the optimizer, the schedule. */
CT_INTERNAL ct_status ct_exp_build_data(ct_experiment *e);
CT_INTERNAL ct_status ct_exp_build_task(ct_experiment *e);
CT_INTERNAL ct_status ct_exp_build_model(ct_experiment *e);
CT_INTERNAL ct_status ct_exp_build_optimizer(ct_experiment *e);
CT_INTERNAL ct_status ct_exp_build_schedule(ct_experiment *e);
/* The metric specs of the list at `path` (metrics.valid, metrics.test) into en, each opened
 * once with the model's class count so that its options are checked against it. */
CT_INTERNAL ct_status ct_exp_metric_specs(ct_experiment *e, const char *path, ct_eval_engine *en);
/* Reads a group's mapping g (its keys were checked); weight_decay: the decay when it sets
 * none. A group that is not a mapping is a configuration error. */
CT_INTERNAL ct_status ct_exp_read_group(ct_experiment *e,
                                        const ct_cfg_node *g,
                                        double weight_decay,
                                        ct_exp_group *out);
/* Whether a schedule's option is a length the run decides (`total: auto`, `t_max: auto`). */
CT_INTERNAL bool ct_exp_auto_length(const ct_option *o);
/* "max" for a metric where higher is better (acc, f1, r2, top*, ...), else "min". */
CT_INTERNAL const char *ct_exp_auto_mode(const char *metric);

/* Opens a dataset's mapping, or (out NULL) only checks its options, before any data are read. */
CT_INTERNAL ct_status ct_exp_open_dataset(ct_experiment *e,
                                          const ct_cfg_node *map,
                                          ct_dataset **out);
/* The transforms at `path` into lp (augment: data.augment's kinds); channels: whether the data
 * are open (e->info), so that normalize's values are checked against the samples' channels. */
CT_INTERNAL ct_status ct_exp_add_transforms(
    ct_experiment *e, const char *path, ct_loader_params *lp, bool augment, bool channels);
/* Reads model.init_from (n) into *path and *lp. */
CT_INTERNAL ct_status ct_exp_read_init_from(ct_experiment *e,
                                            const ct_cfg_node *n,
                                            const char **path,
                                            ct_safetensors_load_params *lp);
/* "[1,28,28]" for a sample shape, into buf. */
CT_INTERNAL const char *
ct_exp_sample_str(int32_t ndim, const int64_t *shape, char *buf, size_t size);
/* The task's loss when loss.type is set (the task's `loss` with the experiment as user). */
CT_INTERNAL ct_tensor *ct_exp_loss(void *user, ct_graph *g, ct_tensor *out, ct_tensor *y);

/* ---- records.c: metrics.jsonl, metrics.csv, TensorBoard and the report ---- */

/* The trainer's callbacks: the experiment's handlers, which pass each event on to the
 * caller's (e->p.callbacks); only the caller's per-batch events cost a call. */
CT_INTERNAL void ct_exp_wire_callbacks(ct_experiment *e, ct_trainer_callbacks *cb);
/* Opens metrics.jsonl (and metrics.csv, TensorBoard as configured) in the run directory,
 * appended to (append) or anew. */
CT_INTERNAL ct_status ct_exp_open_records(ct_experiment *e, bool append);
/* Closes the record files, reporting the first failure. */
CT_INTERNAL ct_status ct_exp_close_records(ct_experiment *e);
/* Closes what ct_exp_open_records opened and frees the record buffer. */
CT_INTERNAL void ct_exp_release_records(ct_experiment *e);
/* The end of the run's HParams session in TensorBoard: success, failure (s not CT_OK) or, for
 * a run stopped by a signal, unknown. Nothing without TensorBoard. */
CT_INTERNAL void ct_exp_end_tensorboard(ct_experiment *e, ct_status s);
/* The report at the end of a fit, finished or interrupted. */
CT_INTERNAL void ct_exp_final_report(ct_experiment *e);
/* finished.c: RUN/finished.json, the mark of a run that ended by itself (written crash-safely
 * after its last checkpoint), and its removal when a fit takes the run directory. */
CT_INTERNAL ct_status ct_exp_mark_finished(ct_experiment *e);
CT_INTERNAL ct_status ct_exp_unmark_finished(ct_experiment *e);
/* profile.c: the last fit's step profile (trainer.profile), when on: its table in the log and,
 * with writes, RUN/profile.json (a failure to write it is a warning). Fails only when the
 * profile cannot be read (CT_ERR_OOM). */
CT_INTERNAL ct_status ct_exp_show_profile(ct_experiment *e, bool writes);
/* Whether metrics.jsonl has a record of `step` with a value whose name starts with prefix. */
CT_INTERNAL bool ct_exp_has_record(const ct_experiment *e, const char *prefix, int64_t step);
/* Cuts the record file `name` back: to its first `keep` records when keep >= 0 (the count a
 * checkpoint kept: ct_trainer_record_marks), else to the records of steps up to `step` (a
 * resumed run redoes the later ones); csv: metrics.csv's rows, its header kept. *kept: the
 * records left. */
CT_INTERNAL ct_status ct_exp_truncate_records(
    ct_experiment *e, const char *name, int64_t step, int64_t keep, bool csv, int64_t *kept);

/* ---- kinds.c: the names of loss and task kinds ---- */

/* A kind's name as configurations write it; NULL for a value that is no kind. */
CT_INTERNAL const char *ct_exp_loss_name(ct_exp_loss_kind kind);
CT_INTERNAL const char *ct_exp_task_name(ct_task_kind kind);
/* The kind called `name` into *out; false (and *out unchanged) when no kind is. */
CT_INTERNAL bool ct_exp_loss_from_name(const char *name, ct_exp_loss_kind *out);
CT_INTERNAL bool ct_exp_task_from_name(const char *name, ct_task_kind *out);

/* ---- predict.c: what predictions from a file (predict.c) and from memory (embed.c) share ---- */

/* A graph for the model in evaluation: no gradients, no dropout, in trainer.precision. */
CT_INTERNAL ct_status ct_exp_eval_graph(ct_experiment *e, ct_graph **g);
/* One sample's c outputs r as a row: the class probabilities (a softmax in double, as the
 * metrics do) or the logits as they are, and *arg the likeliest class; or the values. */
CT_INTERNAL void
ct_exp_predict_row(const float *r, int64_t c, bool classify, bool logits, float *row, int64_t *arg);

#endif /* CT_EXPERIMENT_INTERNAL_H */
