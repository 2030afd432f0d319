/*
 * experiment.c - a resolved experiment config made into a run, and the run's life: create
 * checks the configuration (check.c), builds the parts (build.c) and the trainer over them;
 * fit prepares the run directory (its lock, what an earlier run left, config.yaml), resumes
 * its latest checkpoint, trains with the records open (records.c) and tests at the end; load
 * puts a checkpoint's weights in the model for eval and predict (predict.c); destroy releases
 * everything.
 *
 * Ownership: the experiment owns everything it builds and borrows its config, which must
 * outlive it (experiment_internal.h says what lives where). The run directory's lock is held
 * from fit until destroy.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/core_internal.h"
#include "experiment_internal.h"

/* ---- the trainer ---- */

/* A policy's options: the NULL-terminated `keys` of a section that are set (mode: auto left
 * out), with room for the mode the metric decides. */
static ct_status
policy_options(ct_experiment *e, ct_options *o, const char *section, const char *const *keys) {
    ct_option *items = ct_exp_pool_alloc(e, sizeof(ct_option) * 8);
    const ct_cfg_node *sec = ct_exp_node(e, section);
    if (!items || !sec) return ct_exp_oom(e);
    o->items = items;
    o->count = 0;
    o->where = ct_exp_where_of(e, sec);
    for (int i = 0; keys[i]; i++) {
        char path[128];
        (void)snprintf(path, sizeof path, "%s.%s", section, keys[i]);
        const char *v = ct_exp_str_at(e, path);
        if (!v) continue;
        if (strcmp(keys[i], "mode") == 0 && strcmp(v, "auto") == 0) continue; /* set after */
        ct_exp_add_option(o, keys[i], v);
    }
    return CT_OK;
}

/* The loop: its limits, precision, clipping, records and the schedule's stepping. */
static void loop_params(ct_experiment *e, ct_trainer_params *tp) {
    tp->max_epochs = ct_exp_int_at(e, "trainer.max_epochs");
    tp->max_steps = ct_exp_int_at(e, "trainer.max_steps");
    tp->accum_steps = ct_exp_int_at(e, "trainer.accum_steps");
    e->accum = tp->accum_steps;
    tp->grad_clip_norm = (float)ct_exp_float_at(e, "trainer.grad_clip_norm", 0);
    tp->grad_clip_value = (float)ct_exp_float_at(e, "trainer.grad_clip_value", 0);
    tp->precision = ct_exp_precision_at(e);
    tp->check_grads = ct_exp_bool_at(e, "trainer.check_grads");
    tp->steps_per_loop = ct_exp_int_at(e, "trainer.steps_per_loop");
    tp->limit_train_batches = ct_exp_int_at(e, "trainer.limit_train_batches");
    tp->limit_eval_batches = ct_exp_int_at(e, "trainer.limit_eval_batches");
    tp->dev_run = ct_exp_bool_at(e, "trainer.dev_run");
    const char *prof = ct_exp_str_at(e, "trainer.profile");
    tp->profile = strcmp(prof, "layers") == 0 ? CT_PROFILE_MODE_LAYERS
                  : strcmp(prof, "true") == 0 ? CT_PROFILE_MODE_STEPS
                                              : CT_PROFILE_MODE_OFF;
    tp->seed = (uint64_t)ct_exp_int_at(e, "seed");
    e->test_every = ct_exp_int_at(e, "trainer.test_every_epochs");
    tp->schedule_per_epoch = e->sched_per_epoch;
    tp->schedule_metric = e->sched_metric;
}

/* An evaluation engine for each evaluation dataset (valid, test), with its metrics. */
static ct_status add_engines(ct_experiment *e) {
    for (int i = 0; i < CT_EXP_MAX_ENGINES; i++) {
        if (!e->eval_loaders[i]) continue;
        ct_eval_engine *en = &e->engines[e->n_engines];
        en->key = i == 0 ? "valid" : "test";
        en->loader = e->eval_loaders[i];
        en->every_epochs = i == 0 ? ct_exp_int_at(e, "trainer.valid_every_epochs") : e->test_every;
        en->every_steps = i == 0 ? ct_exp_int_at(e, "trainer.valid_every_steps") : 0;
        CT_TRY(ct_exp_metric_specs(e, i == 0 ? "metrics.valid" : "metrics.test", en));
        e->engine_keys[e->n_engines++] = en->key;
    }
    return CT_OK;
}

/* The monitor for `best`: checkpoint.monitor, else valid/loss when there is validation data. */
static ct_status monitor_params(ct_experiment *e, ct_trainer_params *tp) {
    const char *mon = ct_exp_str_at(e, "checkpoint.monitor");
    if ((!mon || !mon[0]) && e->eval_loaders[0]) mon = "valid/loss";
    if (!mon || !mon[0]) return CT_OK;
    ct_option *items = ct_exp_pool_alloc(e, sizeof(ct_option) * 3);
    if (!items) return ct_exp_oom(e);
    e->monitor_o.items = items;
    e->monitor_o.where = ct_exp_where_of(e, ct_exp_node(e, "checkpoint"));
    const char *mode = ct_exp_str_at(e, "checkpoint.mode");
    ct_exp_add_option(&e->monitor_o, "metric", mon);
    ct_exp_add_option(&e->monitor_o, "mode",
                      strcmp(mode, "auto") == 0 ? ct_exp_auto_mode(mon) : mode);
    ct_exp_add_option(&e->monitor_o, "min_delta", ct_exp_str_at(e, "checkpoint.min_delta"));
    tp->monitor = &e->monitor_o;
    return CT_OK;
}

/* Early stopping, the EMA of the weights and what a non-finite loss or gradient does. */
static ct_status policy_params(ct_experiment *e, ct_trainer_params *tp) {
    if (ct_exp_node(e, "early_stopping")) {
        static const char *const keys[] = {"monitor",   "mode",   "patience",
                                           "min_delta", "warmup", NULL};
        CT_TRY(policy_options(e, &e->es_o, "early_stopping", keys));
        const char *mode = ct_exp_str_at(e, "early_stopping.mode");
        if (strcmp(mode, "auto") == 0)
            ct_exp_add_option(&e->es_o, "mode",
                              ct_exp_auto_mode(ct_exp_str_at(e, "early_stopping.monitor")));
        tp->early_stopping = &e->es_o;
    }
    const ct_cfg_node *ema = ct_exp_node(e, "trainer.ema");
    if (ema) {
        CT_TRY(ct_exp_to_options(e, ema, NULL, 0, &e->ema_o));
        if (!e->p.read_only) {
            tp->ema = &e->ema_o;
        } else { /* evaluation loads the EMA weights itself; the options are still checked */
            ct_ema *probe = NULL;
            CT_TRY(ct_ema_create(e->ctx, e->params, &e->ema_o, &probe));
            ct_ema_destroy(probe);
        }
    }
    static const char *const keys[] = {"on_nonfinite", "max_skips", "max_rollbacks", NULL};
    CT_TRY(policy_options(e, &e->nf_o, "trainer", keys));
    tp->nonfinite = &e->nf_o;
    const ct_cfg_node *spike = ct_exp_node(e, "trainer.on_spike");
    if (spike) {
        CT_TRY(ct_exp_to_options(e, spike, NULL, 0, &e->spike_o));
        tp->spike = &e->spike_o;
    }
    return CT_OK;
}

static void checkpoint_params(ct_experiment *e, ct_trainer_params *tp) {
    /* a dev run is a smoke test: it writes nothing into the run directory (Lightning's
       fast_dev_run turns off loggers and checkpoints alike) */
    if (!e->p.read_only && !tp->dev_run && ct_exp_bool_at(e, "checkpoint.enabled")) {
        tp->checkpoint_dir = e->out_dir;
        tp->save_every_epochs = ct_exp_int_at(e, "checkpoint.save_every_epochs");
        tp->save_every_steps = ct_exp_int_at(e, "checkpoint.save_every_steps");
        tp->keep = ct_exp_int_at(e, "checkpoint.keep");
    } else {
        tp->save_every_epochs = 0;
    }
}

/* MPI runs: a resume on another number of processes, gradient buckets, the sharded update. */
static ct_status distributed_params(ct_experiment *e, ct_trainer_params *tp) {
    tp->allow_world_size_change = ct_exp_bool_at(e, "trainer.allow_world_size_change");
    const char *bucket_mb = ct_exp_str_at(e, "trainer.bucket_mb");
    tp->bucket_bytes = bucket_mb && strcmp(bucket_mb, "auto") == 0
                           ? CT_BUCKET_BYTES_AUTO
                           : (int64_t)(ct_exp_float_at(e, "trainer.bucket_mb", 1.0) * 1048576.0);
    const char *shard = ct_exp_str_at(e, "trainer.shard_optimizer");
    tp->shard_optimizer = shard && strcmp(shard, "always") == 0  ? CT_UPDATE_SHARDING_ALWAYS
                          : shard && strcmp(shard, "never") == 0 ? CT_UPDATE_SHARDING_NEVER
                                                                 : CT_UPDATE_SHARDING_AUTO;
    const char *strategy = ct_exp_str_at(e, "trainer.strategy");
    /* evaluation and export read a run's checkpoints in one process: the strategy is fit's */
    tp->strategy = e->p.read_only ? CT_STRATEGY_SYNC
                   : strategy && strcmp(strategy, "parameter_server") == 0
                       ? CT_STRATEGY_PARAMETER_SERVER
                   : strategy && strcmp(strategy, "local_sgd") == 0 ? CT_STRATEGY_LOCAL_SGD
                                                                    : CT_STRATEGY_SYNC;
    tp->local_sgd.steps = ct_exp_int_at(e, "trainer.local_sgd.steps");
    tp->local_sgd.outer_lr = (float)ct_exp_float_at(e, "trainer.local_sgd.outer_lr", 1.0);
    tp->local_sgd.outer_momentum =
        (float)ct_exp_float_at(e, "trainer.local_sgd.outer_momentum", 0.0);
    /* `threads: 0` (every core) follows the cores the run actually gets */
    tp->adapt_threads = ct_exp_int_at(e, "threads") == 0; /* as written: 0, 00, +0 */
    /* benchmarks of uneven machines (bench/async.py): CTRAIN_STRAGGLER=RANK */
    const char *straggler = getenv("CTRAIN_STRAGGLER");
    if (straggler && *straggler) {
        int64_t world = e->p.comm ? ct_comm_world_size(e->p.comm) : 1;
        char *end = NULL;
        errno = 0;
        long long r = strtoll(straggler, &end, 10);
        if (errno != 0 || *end != '\0' || r < 0 || r >= world)
            return CT_FAIL(e->ctx, CT_ERR_CONFIG,
                           "environment variable CTRAIN_STRAGGLER='%s': expected a rank from 0 "
                           "to %lld",
                           straggler, (long long)world - 1);
        tp->straggler_rank = r;
    }
    if (ct_exp_str_at(e, "trainer.ps.servers"))
        tp->ps_servers = ct_exp_int_at(e, "trainer.ps.servers");
    if (ct_exp_str_at(e, "trainer.ps.max_staleness"))
        tp->ps_max_staleness = ct_exp_int_at(e, "trainer.ps.max_staleness");
    if (ct_exp_str_at(e, "trainer.ps.pull_every"))
        tp->ps_pull_every = ct_exp_int_at(e, "trainer.ps.pull_every");
    return CT_OK;
}

static ct_status build_trainer(ct_experiment *e) {
    ct_trainer_params tp = ct_trainer_default_params();
    loop_params(e, &tp);
    CT_TRY(add_engines(e));
    CT_TRY(ct_exp_add_decode(e, &tp));
    CT_TRY(monitor_params(e, &tp));
    CT_TRY(policy_params(e, &tp));
    checkpoint_params(e, &tp);
    ct_experiment_fingerprint(e->cfg, e->fingerprint);
    tp.fingerprint = e->fingerprint;
    ct_exp_wire_callbacks(e, &tp.callbacks);
    CT_TRY(distributed_params(e, &tp));
    e->tp = tp;
    if (e->p.comm) /* the communicator's watchdog: from now on, the configured limit */
        CT_TRY(ct_comm_set_timeout(e->p.comm, ct_exp_float_at(e, "trainer.collective_timeout_s",
                                                              CT_COMM_DEFAULT_TIMEOUT_S)));
    e->tp.model = e->model;
    e->tp.store = e->params;
    e->tp.optim = e->opt;
    e->tp.schedule = e->sched;
    e->tp.comm = e->p.comm;
    e->tp.task = e->task;
    e->tp.train = e->train_loader;
    e->tp.engines = e->engines;
    e->tp.n_engines = e->n_engines;
    return ct_trainer_create(e->ctx, &e->tp, &e->trainer);
}

/* ---- the run directory ---- */

static ct_status write_config(ct_experiment *e) {
    char tmp[1100], path[1100];
    (void)snprintf(path, sizeof path, "%s/config.yaml", e->out_dir);
    (void)snprintf(tmp, sizeof tmp, "%s/config.yaml.tmp", e->out_dir);
    FILE *f = fopen(tmp, "w");
    if (!f) return CT_FAIL(e->ctx, CT_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
    (void)fprintf(f, CT_RUN_CONFIG_MARK " (fingerprint %s)\n", e->fingerprint);
    ct_status s = ct_config_write(e->cfg, f);
    if (fflush(f) != 0 || fsync(fileno(f)) != 0)
        s = CT_FAIL(e->ctx, CT_ERR_IO, "%s: write failed: %s", tmp, strerror(errno));
    (void)fclose(f);
    if (s == CT_OK && rename(tmp, path) != 0)
        s = CT_FAIL(e->ctx, CT_ERR_IO, "%s: cannot rename to %s: %s", tmp, path, strerror(errno));
    if (s != CT_OK) (void)remove(tmp);
    return s;
}

/* A run directory holding checkpoints or records of another configuration is not touched. */
static ct_status check_previous(ct_experiment *e, bool *resumable) {
    *resumable = false;
    int64_t count = 0;
    CT_TRY(ct_checkpoint_list(e->ctx, e->out_dir, NULL, 0, &count));
    char records[1100];
    (void)snprintf(records, sizeof records, "%s/metrics.jsonl", e->out_dir);
    bool has_records = access(records, F_OK) == 0;
    if (count == 0 && !has_records) return CT_OK;
    char path[1100];
    (void)snprintf(path, sizeof path, "%s/config.yaml", e->out_dir);
    ct_config *old = NULL;
    ct_status s = ct_config_load_file(e->ctx, path, &old);
    if (s == CT_OK) s = ct_experiment_resolve(e->ctx, old);
    if (s != CT_OK) {
        ct_config_destroy(old);
        return ct_err_wrap(e->ctx,
                           "%s holds a run (%lld checkpoint(s)%s) but its config.yaml cannot be "
                           "read; refusing to touch it",
                           e->out_dir, (long long)count, has_records ? ", metrics.jsonl" : "");
    }
    char fp[17];
    ct_experiment_fingerprint(old, fp);
    if (strcmp(fp, e->fingerprint) != 0) {
        char diff[1024];
        int64_t nd = ct_experiment_diff(old, e->cfg, diff, sizeof diff);
        ct_config_destroy(old);
        return CT_FAIL(e->ctx, CT_ERR_CONFIG,
                       "%s holds a run of another configuration (%lld key(s) differ: %s); "
                       "set another output_dir, or start over with --restart (which keeps the "
                       "old run under another name)",
                       e->out_dir, (long long)nd, diff);
    }
    ct_config_destroy(old);
    *resumable = count > 0; /* records without checkpoints: the same run started over */
    return CT_OK;
}

/* ---- public ---- */

ct_experiment_params ct_experiment_default_params(void) {
    ct_experiment_params p;
    memset(&p, 0, sizeof p);
    return p;
}

ct_status ct_experiment_create(ct_ctx *ctx,
                               ct_config *resolved,
                               const ct_experiment_params *p,
                               ct_experiment **out) {
    *out = NULL;
    ct_experiment *e = ct_alloc(ctx, sizeof *e);
    if (!e) return CT_FAIL(ctx, CT_ERR_OOM, "experiment: out of memory");
    memset(e, 0, sizeof *e);
    e->ctx = ctx;
    e->cfg = resolved;
    e->run.fd = e->run.lock_file_fd = -1;
    e->jsonl.fd = e->csv.fd = -1;
    e->p = p ? *p : ct_experiment_default_params();
    const char *file = ct_config_name(resolved);
    e->out_dir = ct_exp_str_at(e, "output_dir");
    ct_status s =
        e->out_dir ? CT_OK : CT_FAIL(ctx, CT_ERR_CONFIG, "%s: not resolved (no output_dir)", file);
    if (s == CT_OK) s = ct_exp_check_components(e);
    if (s == CT_OK) s = ct_exp_build_data(e);
    if (s == CT_OK) s = ct_exp_build_task(e);
    if (s == CT_OK) s = ct_exp_build_model(e);
    if (s == CT_OK) s = ct_exp_check_output(e);
    if (s == CT_OK) s = ct_exp_build_optimizer(e);
    if (s == CT_OK) s = ct_exp_build_schedule(e);
    if (s == CT_OK) s = build_trainer(e);
    if (s != CT_OK) {
        ct_experiment_destroy(e);
        return s;
    }
    *out = e;
    return CT_OK;
}

void ct_experiment_destroy(ct_experiment *e) {
    if (!e) return;
    ct_exp_release_records(e);
    ct_config_classes_fini(e->ctx, &e->classes);
    ct_exp_rundir_close(&e->run); /* the run directory is free again */
    ct_trainer_destroy(e->trainer);
    ct_schedule_destroy(e->sched);
    ct_optim_destroy(e->opt);
    ct_model_destroy(e->model);
    ct_params_destroy(e->params);
    for (int i = 0; i < CT_EXP_MAX_ENGINES; i++)
        ct_loader_destroy(e->eval_loaders[i]);
    ct_loader_destroy(e->train_loader);
    if (e->valid != e->valid_all) ct_dataset_close(e->valid);
    if (e->train != e->train_all) ct_dataset_close(e->train);
    ct_dataset_close(e->valid_all);
    ct_dataset_close(e->test);
    ct_dataset_close(e->train_all);
    ct_exp_plugins_close(e); /* last: their vtables were in use until now */
    ct_exp_pool_free(e);
    ct_free(e->ctx, e, sizeof *e);
}

ct_trainer *ct_experiment_trainer(const ct_experiment *e) {
    return e->trainer;
}
ct_model *ct_experiment_model(const ct_experiment *e) {
    return e->model;
}
ct_params *ct_experiment_params_store(const ct_experiment *e) {
    return e->params;
}
ct_optim *ct_experiment_optimizer(const ct_experiment *e) {
    return e->opt;
}
const char *ct_experiment_output_dir(const ct_experiment *e) {
    return e->out_dir;
}
const char *const *ct_experiment_engines(const ct_experiment *e, int64_t *n) {
    *n = e->n_engines;
    return e->engine_keys;
}
int64_t ct_experiment_train_samples(const ct_experiment *e) {
    return e->train_loader ? ct_loader_samples_per_epoch(e->train_loader) : 0;
}
const ct_dataset_info *ct_experiment_train_info(const ct_experiment *e) {
    return &e->info;
}
const ct_loader_params *ct_experiment_eval_loader_params(const ct_experiment *e) {
    return &e->eval_lp;
}
ct_task_kind ct_experiment_task_kind(const ct_experiment *e) {
    return e->task.kind;
}

/* After a resume that fell back past a missing or damaged `latest` (or past the damaged
 * checkpoint it named), `latest` is pointed at what was loaded: a finished run trains no step
 * that would rewrite it. */
static ct_status repair_latest(ct_experiment *e, int64_t loaded) {
    int64_t step;
    if (ct_checkpoint_pointer(e->ctx, e->out_dir, "latest", &step) == CT_OK && step == loaded)
        return CT_OK;
    ct_clear_error(e->ctx);
    CT_TRY(ct_checkpoint_set_pointer(e->ctx, e->out_dir, "latest", loaded));
    ct_log(e->ctx, CT_LOG_WARN,
           "%s/checkpoints/latest now names step-%08lld, the checkpoint loaded", e->out_dir,
           (long long)loaded);
    return CT_OK;
}

/* Rank 0's preparation of the run directory for fit: the lock, the clean-up, the check of
 * what an earlier run left (*resume: continue from its latest checkpoint) and config.yaml. */
static ct_status prepare_run_dir(ct_experiment *e, bool *resume) {
    ct_ctx *ctx = e->ctx;
    CT_TRY(ct_exp_rundir_open(ctx, e->out_dir, ct_config_name(e->cfg), e->p.restart, &e->run));
    /* what a killed process left half-made or half-deleted goes first, whether or not this
       fit writes a checkpoint (a finished run asked again does not) */
    CT_TRY(ct_checkpoint_cleanup(ctx, e->out_dir));
    CT_TRY(check_previous(e, resume));
    if (*resume && !e->tp.checkpoint_dir)
        return CT_FAIL(ctx, CT_ERR_CONFIG,
                       "%s holds checkpoints, which a run with checkpoint.enabled false "
                       "would neither resume nor keep up to date; set another output_dir "
                       "or start over with --restart",
                       e->out_dir);
    ct_exp_rundir_claim(ctx, &e->run);
    CT_TRY(ct_exp_unmark_finished(e)); /* a resumed run is not finished until it ends again */
    return write_config(e);
}

/* What a resumed run that trained nothing says: why it ended, and how to go on. With a
 * schedule length from `auto`, a longer run would stretch the schedule (a changed
 * configuration), so going on gives the length the run has. */
static void say_nothing_to_train(ct_experiment *e, int64_t step) {
    int64_t epoch = ct_trainer_epoch(e->trainer);
    bool at_limit = (e->tp.max_epochs && epoch >= e->tp.max_epochs) ||
                    (e->tp.max_steps && step >= e->tp.max_steps);
    char limits[256] = "";
    if (at_limit)
        (void)snprintf(limits, sizeof limits, "trainer.max_epochs or max_steps%s%s",
                       e->sched_auto ? ", giving the schedule the length it has: " : "",
                       e->sched_auto ? e->sched_auto : "");
    const ct_early_stop *es = ct_trainer_early_stop(e->trainer);
    if (es && es->state.stopped)
        ct_log(e->ctx, CT_LOG_INFO,
               "%s early-stopped at step %lld: %s did not improve for %lld evaluation%s "
               "(early_stopping.patience: %lld); to train on, raise early_stopping.patience%s%s, "
               "or start over (ctrain fit --restart)",
               e->out_dir, (long long)step, es->monitor.metric, (long long)es->state.bad_evals,
               es->state.bad_evals == 1 ? "" : "s", (long long)es->patience,
               at_limit ? " and " : "", limits);
    else
        ct_log(e->ctx, CT_LOG_INFO, "%s is complete at step %lld (to go on, raise %s)", e->out_dir,
               (long long)step, limits[0] ? limits : "trainer.max_epochs or max_steps");
}

static ct_status fit(ct_experiment *e) {
    ct_ctx *ctx = e->ctx;
    if (!e->trainer) return CT_FAIL(ctx, CT_ERR_INVALID_ARG, "fit: the experiment has no trainer");
    bool resume = false;
    /* only rank 0 writes; the others learn from it whether to resume */
    bool root = !e->p.comm || ct_comm_is_root(e->p.comm);
    bool writes = !e->p.read_only && !e->tp.dev_run && root;
    ct_status s = writes ? prepare_run_dir(e, &resume) : CT_OK;
    if (e->p.comm && ct_comm_world_size(e->p.comm) > 1) {
        int32_t said[2] = {(int32_t)s, resume};
        CT_TRY(ct_comm_broadcast(e->p.comm, said, sizeof said, 0));
        if (s == CT_OK && said[0] != CT_OK)
            return CT_FAIL(ctx, (ct_status)said[0],
                           "rank 0 could not prepare the run directory %s (its message says why)",
                           e->out_dir);
        resume = said[1] != 0;
    }
    CT_TRY(s);
    if (resume) {
        /* every rank reads the checkpoint (output_dir is on a file system they share), and
           fit starts by giving every rank rank 0's weights */
        CT_TRY(ct_trainer_resume(e->trainer, "latest"));
        int64_t step = ct_trainer_step(e->trainer);
        if (writes) {
            CT_TRY(repair_latest(e, step));
            int64_t lines, rows;
            ct_trainer_record_marks(e->trainer, &lines, &rows);
            CT_TRY(ct_exp_truncate_records(e, "metrics.jsonl", step, lines, false, &e->n_lines));
            CT_TRY(ct_exp_truncate_records(e, "metrics.csv", step, rows, true, &e->n_rows));
        }
    }
    if (writes) CT_TRY(ct_exp_open_records(e, resume));
    int64_t before = ct_trainer_step(e->trainer);
    CT_TRY(ct_trainer_fit(e->trainer));
    CT_TRY(ct_exp_show_profile(e, writes));
    /* an interrupted run is tested when it is finished, not now: a record at this step would
       stay in the middle of the resumed run's log; its report is written all the same, the
       picture of what ran (a resume rewrites it) */
    if (ct_trainer_interrupted(e->trainer)) {
        ct_exp_final_report(e);
        return ct_exp_close_records(e);
    }
    bool final_test = e->eval_loaders[1] && e->test_every == 0 && !e->tp.dev_run;
    if (resume && ct_trainer_step(e->trainer) == before) {
        /* a finished run asked again: nothing to train; its final test is made only if the
           earlier fit did not get to record it (interrupted or failed in it) */
        say_nothing_to_train(e, before);
        int32_t recorded = final_test && root && ct_exp_has_record(e, "test/", before);
        if (e->p.comm && ct_comm_world_size(e->p.comm) > 1) /* rank 0's records decide */
            CT_TRY(ct_comm_broadcast(e->p.comm, &recorded, sizeof recorded, 0));
        if (recorded) return CT_OK;
    }
    if (ct_trainer_step(e->trainer) != before) CT_TRY(ct_exp_decode_at_end(e));
    if (final_test) {
        e->final_testing = true;
        s = ct_trainer_evaluate(e->trainer, "test");
        e->final_testing = false;
        CT_TRY(s);
    }
    ct_exp_final_report(e);
    return ct_exp_close_records(e);
}

ct_status ct_experiment_fit(ct_experiment *e) {
    ct_status s = fit(e);
    bool root = !e->p.comm || ct_comm_is_root(e->p.comm);
    /* the mark comes after the last checkpoint and the final test */
    if (s == CT_OK && root && !e->p.read_only && !e->tp.dev_run &&
        !ct_trainer_interrupted(e->trainer))
        s = ct_exp_mark_finished(e);
    ct_exp_end_tensorboard(e, s); /* the run's status in TensorBoard's HParams view */
    return s;
}

ct_status ct_experiment_load(ct_experiment *e, const char *which, int64_t *step) {
    return ct_experiment_load_with(e, which, true, step, NULL);
}

/* A bare weights file: every tensor of the model by name, nothing else (strict). */
static ct_status load_weights_file(ct_experiment *e, const char *path) {
    ct_safetensors_load_params lp = ct_safetensors_load_default_params();
    int64_t loaded = 0;
    ct_status s = ct_safetensors_load(e->ctx, e->params, path, &lp, &loaded);
    if (s == CT_ERR_IO) return s; /* its message names the file and why it cannot be read */
    if (s != CT_OK)
        return ct_err_wrap(e->ctx,
                           "%s: expected the model's tensors by name, each of its shape "
                           "(`ctrain inspect` on a checkpoint lists them)",
                           path);
    ct_log(e->ctx, CT_LOG_INFO, "weights: %lld tensors from %s", (long long)loaded, path);
    return CT_OK;
}

ct_status ct_experiment_load_with(
    ct_experiment *e, const char *which, bool ema, int64_t *step, ct_weights_kind *kind) {
    size_t n = strlen(which), k = strlen(".safetensors");
    if (n > k && strcmp(which + n - k, ".safetensors") == 0) {
        CT_TRY(load_weights_file(e, which));
        if (step) *step = -1;
        if (kind) *kind = CT_WEIGHTS_FILE;
        return CT_OK;
    }
    char loaded[1100];
    int64_t st = 0, ep = 0;
    CT_TRY(ct_checkpoint_load(e->ctx, e->out_dir, which, e->params, NULL, NULL, NULL, &st, &ep,
                              loaded, sizeof loaded));
    ct_weights_kind got = CT_WEIGHTS_TRAINED;
    /* evaluation during training used the EMA weights: so does this one, unless asked not to */
    if (ema && ct_exp_node(e, "trainer.ema")) {
        char path[1200];
        (void)snprintf(path, sizeof path, "%s/ema.safetensors", loaded);
        if (access(path, F_OK) == 0) {
            ct_safetensors_load_params lp = ct_safetensors_load_default_params();
            CT_TRY(ct_safetensors_load(e->ctx, e->params, path, &lp, NULL));
            got = CT_WEIGHTS_EMA;
        }
    }
    if (step) *step = st;
    if (kind) *kind = got;
    return CT_OK;
}
