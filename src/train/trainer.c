/*
 * trainer.c - the trainer's lifecycle: its parameters' defaults and checks, creation (graph,
 * evaluation engines with their metric sets, policies, the plan for exchanging gradients between
 * ranks), destruction and the queries. The loop itself is fit.c's (train_internal.h lists the
 * module's files).
 *
 * One step is one optimizer update. Micro-batches accumulate into the parameters' gradient
 * buffer with their loss divided by the window's real length (ct_accum_window: windows never
 * straddle an epoch); at the window's end the gradients are averaged over ranks, checked for
 * non-finite values, clipped, and applied. Evaluation runs with gradients off, in evaluation
 * mode, with the EMA weights swapped in for its duration only (restored on every exit path).
 *
 * Ownership: the trainer owns its graph, metric sets, EMA, rollback snapshot and, when it was
 * given none, its communicator; everything else is borrowed.
 */
#include <stdio.h>
#include <string.h>

#include "train/train_internal.h"

ct_trainer_params ct_trainer_default_params(void) {
    ct_trainer_params p;
    memset(&p, 0, sizeof p);
    p.max_epochs = 1;
    p.accum_steps = 1;
    p.precision = CT_F32;
    p.steps_per_loop = 10;
    p.check_grads = true;
    p.save_every_epochs = 1;
    p.bucket_bytes = CT_BUCKET_BYTES_AUTO;
    p.strategy = CT_STRATEGY_SYNC;
    p.straggler_rank = -1;
    p.ps_servers = 1;
    p.ps_max_staleness = -1;
    p.ps_pull_every = 1;
    p.local_sgd.steps = 16;
    p.local_sgd.outer_lr = 1.0f;
    return p;
}

/* The task's loss_components into part_name and part_log. */
static ct_status parse_parts(ct_trainer *t) {
    ct_ctx *ctx = t->ctx;
    const char *list = t->task.loss_components;
    if (!t->task.loss_parts != !list)
        return CT_FAIL(ctx, CT_ERR_CONFIG,
                       "trainer: a task sets loss_parts and loss_components together (got %s "
                       "without %s)",
                       list ? "loss_components" : "loss_parts",
                       list ? "loss_parts" : "loss_components");
    if (!list) return CT_OK;
    t->part_text_size = strlen(list) + 1;
    t->part_text = ct_alloc(ctx, t->part_text_size);
    if (!t->part_text) return CT_FAIL(ctx, CT_ERR_OOM, "trainer: loss components");
    memcpy(t->part_text, list, t->part_text_size);
    /* part_text stays whole for the metrics' "components" option; the names are read from
       the "train/loss/<name>" strings */
    const char *p = list;
    for (bool more = true; more;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        more = e != NULL;
        if (t->n_parts == CT_LOSS_MAX_PARTS || len == 0 || memchr(p, '/', len) ||
            len + 12 >= CT_METRIC_NAME_MAX)
            return CT_FAIL(ctx, CT_ERR_CONFIG,
                           "trainer: loss_components '%s': expected at most %d comma-separated "
                           "names, each non-empty, without '/' and shorter than %d bytes",
                           list, CT_LOSS_MAX_PARTS, CT_METRIC_NAME_MAX - 12);
        (void)snprintf(t->part_log[t->n_parts], CT_METRIC_NAME_MAX, "train/loss/%.*s", (int)len, p);
        t->part_name[t->n_parts] = t->part_log[t->n_parts] + 11; /* after "train/loss/" */
        t->n_parts++;
        p = e ? e + 1 : p + len;
    }
    return CT_OK;
}

/* ---- create / destroy / queries ---- */

static const ct_option perplexity_from_loss[] = {{"source", "loss"}};
static const ct_metric_spec default_classification[] = {{"accuracy", NULL, NULL, {NULL, 0, NULL}}};
static const ct_metric_spec default_regression[] = {{"mse", NULL, NULL, {NULL, 0, NULL}},
                                                    {"mae", NULL, NULL, {NULL, 0, NULL}}};
static const ct_metric_spec default_lm[] = {
    {"perplexity", NULL, NULL, {perplexity_from_loss, 1, "trainer: default metrics"}}};

/* The metrics an engine gets when it names none. */
static const ct_metric_spec *task_default_metrics(ct_task_kind kind, int64_t *n) {
    switch (kind) {
    case CT_TASK_REGRESSION:
        *n = 2;
        return default_regression;
    case CT_TASK_LANGUAGE_MODEL:
        *n = 1;
        return default_lm;
    case CT_TASK_CLASSIFICATION:
    case CT_TASK_KIND_COUNT:
        break;
    }
    *n = 1;
    return default_classification;
}

/* The limits, cadences and thresholds, and the task's kind. */
static ct_status check_params(ct_ctx *ctx, const ct_trainer_params *p) {
    if (p->max_epochs < 0 || p->max_steps < 0 || (p->max_epochs == 0 && p->max_steps == 0))
        return CT_FAIL(ctx, CT_ERR_CONFIG,
                       "trainer: max_epochs (%lld) or max_steps (%lld) must limit the run",
                       (long long)p->max_epochs, (long long)p->max_steps);
    if (p->accum_steps < 1 || p->steps_per_loop < 1 || p->limit_train_batches < 0 ||
        p->limit_eval_batches < 0)
        return CT_FAIL(ctx, CT_ERR_CONFIG,
                       "trainer: accum_steps and steps_per_loop must be >= 1, limits >= 0");
    if (p->save_every_epochs < 0 || p->save_every_steps < 0 || p->keep < 0)
        return CT_FAIL(ctx, CT_ERR_CONFIG,
                       "trainer: save_every_epochs, save_every_steps and keep must be >= 0");
    if (!(p->grad_clip_norm >= 0.0f) || !(p->grad_clip_value >= 0.0f))
        return CT_FAIL(ctx, CT_ERR_CONFIG, "trainer: clipping thresholds must be >= 0");
    if (p->precision != CT_F32 && p->precision != CT_BF16)
        return CT_FAIL(ctx, CT_ERR_CONFIG, "trainer: precision must be f32 or bf16, got %s",
                       ct_dtype_name(p->precision));
    if ((int)p->task.kind < 0 || p->task.kind >= CT_TASK_KIND_COUNT)
        return CT_FAIL(ctx, CT_ERR_CONFIG, "trainer: task kind %d is unknown", (int)p->task.kind);
    if ((int)p->strategy < 0 || p->strategy >= CT_STRATEGY_COUNT)
        return CT_FAIL(ctx, CT_ERR_CONFIG, "trainer: strategy %d is not a ct_trainer_strategy",
                       (int)p->strategy);
    if ((int)p->profile < 0 || p->profile >= CT_PROFILE_MODE_COUNT)
        return CT_FAIL(ctx, CT_ERR_CONFIG, "trainer: profile %d is not a ct_profile_mode",
                       (int)p->profile);
    return CT_OK;
}

/* Each engine's key (unique, not "train", no '/'), loader, metric specs and cadence. */
static ct_status
check_engines(ct_ctx *ctx, const ct_eval_engine *engines, int64_t n_engines, bool own_pass) {
    if (n_engines < 0 || (n_engines > 0 && !engines))
        return CT_FAIL(ctx, CT_ERR_CONFIG, "trainer: %lld engines at %p", (long long)n_engines,
                       (const void *)engines);
    for (int64_t i = 0; i < n_engines; i++) {
        const ct_eval_engine *e = &engines[i];
        if (e->n_metrics < 0 || (e->n_metrics > 0 && !e->metrics))
            return CT_FAIL(ctx, CT_ERR_CONFIG, "trainer: engine '%s': %lld metric specs at %p",
                           e->key ? e->key : "", (long long)e->n_metrics, (const void *)e->metrics);
        if (!e->key || !e->key[0] || strchr(e->key, '/') || !strcmp(e->key, "train") ||
            (!e->loader && !own_pass))
            return CT_FAIL(ctx, CT_ERR_CONFIG,
                           "trainer: engine %lld ('%s') needs a key (not 'train', no '/') and a "
                           "loader",
                           (long long)i, e->key ? e->key : "");
        if (e->every_epochs < 0 || e->every_steps < 0)
            return CT_FAIL(ctx, CT_ERR_CONFIG, "trainer: engine '%s': negative cadence", e->key);
        for (int64_t j = 0; j < i; j++)
            if (strcmp(engines[j].key, e->key) == 0)
                return CT_FAIL(ctx, CT_ERR_CONFIG, "trainer: two evaluation engines named '%s'",
                               e->key);
    }
    return CT_OK;
}

/* The classes the metrics count: the model output's last dimension; 0 for regression. */
static int64_t class_count(const ct_model *model, ct_task_kind kind) {
    int64_t oshape[CT_MAX_DIMS];
    int32_t ond = ct_model_output_shape(model, oshape);
    return kind != CT_TASK_REGRESSION && ond > 0 ? oshape[ond - 1] : 0;
}

/* The communicator (a single-process one of its own when given none) and the graph, with
 * its autocast and this rank's dropout stream. */
static ct_status make_graph(ct_trainer *t) {
    if (t->p.comm) {
        t->comm = t->p.comm;
    } else {
        CT_TRY(ct_comm_create_single(t->ctx, &t->comm));
        t->own_comm = true;
    }
    ct_graph_params gp = ct_graph_default_params();
    gp.seed = t->p.seed;
    CT_TRY(ct_graph_create(t->ctx, &gp, &t->g));
    CT_TRY(ct_graph_set_autocast(t->g, t->p.precision));
    *ct_graph_rng(t->g) = ct_train_rank_stream(*ct_graph_rng(t->g), ct_comm_rank(t->comm));
    return CT_OK;
}

/* The monitor, early stopping, the EMA (and the store its checkpoints are written from), the
 * non-finite policy and the spike detector, with the snapshot a rollback restores. */
static ct_status make_policies(ct_trainer *t) {
    ct_ctx *ctx = t->ctx;
    const ct_trainer_params *p = &t->p;
    if (p->monitor) {
        CT_TRY(ct_monitor_init(ctx, &t->monitor, p->monitor));
        t->has_monitor = true;
    }
    if (p->early_stopping) {
        CT_TRY(ct_early_stop_init(ctx, &t->es, p->early_stopping));
        t->has_es = true;
    }
    if (p->ema) CT_TRY(ct_ema_create(ctx, t->params, p->ema, &t->ema));
    if (p->ema && p->checkpoint_dir) CT_TRY(ct_train_mirror_store(ctx, t->params, &t->ema_store));
    CT_TRY(ct_nonfinite_init(ctx, &t->nf, p->nonfinite));
    CT_TRY(ct_spike_init(ctx, &t->spike, p->spike));
    if (t->nf.mode == CT_NONFINITE_MODE_ROLLBACK || t->spike.mode == CT_SPIKE_MODE_ROLLBACK) {
        t->snap_bytes = ct_train_snapshot_bytes(t->params, t->opt);
        t->snap = ct_alloc(ctx, t->snap_bytes ? t->snap_bytes : 1);
        if (!t->snap) return CT_FAIL(ctx, CT_ERR_OOM, "trainer: allocating the rollback snapshot");
    }
    return CT_OK;
}

/* An engine's metric set: its metrics (the task's defaults when it names none) and its loss,
 * reported in the task's parts when it has them. */
static ct_status make_metrics(ct_trainer *t, ct_train_engine *en) {
    ct_ctx *ctx = t->ctx;
    int64_t nm = en->e.n_metrics;
    const ct_metric_spec *given = en->e.metrics;
    if (nm == 0 && en->e.loader) given = task_default_metrics(t->task.kind, &nm);
    if (!en->e.loader) /* its own pass reports no loss */
        return ct_metrics_create(ctx, en->e.key, t->n_classes, given, nm, &en->m) == CT_OK
                   ? CT_OK
                   : ct_err_wrap(ctx, "trainer: engine '%s'", en->e.key);
    ct_metric_spec *specs = ct_alloc(ctx, (size_t)(nm + 1) * sizeof *specs);
    if (!specs) return CT_FAIL(ctx, CT_ERR_OOM, "trainer: engine '%s': metric specs", en->e.key);
    if (nm) memcpy(specs, given, (size_t)nm * sizeof *specs);
    memset(&specs[nm], 0, sizeof *specs);
    specs[nm].type = "loss";
    ct_option parts_option = {"components", t->part_text};
    if (t->n_parts) {
        specs[nm].opts.items = &parts_option;
        specs[nm].opts.count = 1;
        specs[nm].opts.where = "trainer: the task's loss_components";
    }
    ct_status s = ct_metrics_create(ctx, en->e.key, t->n_classes, specs, nm + 1, &en->m);
    ct_free(ctx, specs, (size_t)(nm + 1) * sizeof *specs);
    if (s != CT_OK) return ct_err_wrap(ctx, "trainer: engine '%s'", en->e.key);
    return CT_OK;
}

static ct_status make_engines(ct_trainer *t, const ct_eval_engine *engines, int64_t n_engines) {
    if (n_engines == 0) return CT_OK;
    t->engines = ct_alloc(t->ctx, (size_t)n_engines * sizeof *t->engines);
    if (!t->engines) return CT_FAIL(t->ctx, CT_ERR_OOM, "trainer: allocating engines");
    memset(t->engines, 0, (size_t)n_engines * sizeof *t->engines);
    t->engines_cap = n_engines;
    for (int64_t i = 0; i < n_engines; i++) {
        ct_train_engine *en = &t->engines[i];
        en->e = engines[i];
        en->last_step = -1;
        t->n_engines = i + 1;
        CT_TRY(make_metrics(t, en));
    }
    return CT_OK;
}

/* A watched metric that no engine computes: the message names the nearest one and those
 * computed. */
static ct_status unwatched(ct_trainer *t, const char *who, const char *metric) {
    ct_unknown u;
    ct_unknown_init(&u, metric);
    for (int64_t i = 0; i < t->n_engines; i++) {
        int64_t n = 0;
        const ct_metric_value *v = ct_metrics_values(t->engines[i].m, &n);
        for (int64_t k = 0; k < n; k++)
            ct_unknown_add(&u, v[k].name);
    }
    char hint[160];
    return CT_FAIL(t->ctx, CT_ERR_CONFIG,
                   "trainer: %s watches '%s', which no evaluation engine computes%s (computed: "
                   "%s)",
                   who, metric, ct_suggest_hint(&u.suggest, hint, sizeof hint),
                   u.count ? u.known : "none");
}

/* The metrics the monitor, early stopping and a metric-driven schedule follow must be values
 * of an engine, or the policies would never act: marks the engines that compute them. */
static ct_status watch_metrics(ct_trainer *t) {
    ct_ctx *ctx = t->ctx;
    if (t->sched && ct_schedule_needs_metric(t->sched))
        t->sched_metric = t->p.schedule_metric ? t->p.schedule_metric
                          : t->has_monitor     ? t->monitor.metric
                                               : "valid/loss";
    const char *watched[3] = {t->has_monitor ? t->monitor.metric : NULL,
                              t->has_es ? t->es.monitor.metric : NULL, t->sched_metric};
    for (int w = 0; w < 3; w++) {
        if (!watched[w]) continue;
        bool found = false;
        for (int64_t i = 0; i < t->n_engines; i++) {
            double v;
            if (ct_metrics_get(t->engines[i].m, watched[w], &v) != CT_OK) continue;
            found = true;
            if (w == 0)
                t->engines[i].feeds_monitor = true;
            else if (w == 1)
                t->engines[i].feeds_early_stop = true;
            else
                t->engines[i].feeds_schedule = true;
        }
        ct_clear_error(ctx); /* the lookups above are probes */
        if (!found)
            return unwatched(t,
                             w == 0   ? "the monitor"
                             : w == 1 ? "early stopping"
                                      : "the metric-driven schedule",
                             watched[w]);
    }
    return CT_OK;
}

/* shard_optimizer against what the ranks allow: several ranks, not `never`. */
static ct_status decide_sharding(ct_trainer *t) {
    ct_trainer_params *p = &t->p;
    bool can =
        ct_comm_can_share(t->comm) && !p->callbacks.on_grads && ct_params_numel(t->params) > 0;
    if (p->shard_optimizer == CT_UPDATE_SHARDING_ALWAYS && !can)
        return CT_FAIL(t->ctx, CT_ERR_CONFIG,
                       "trainer: shard_optimizer is 'always', but %s (docs/distributed.md)",
                       p->callbacks.on_grads ? "an on_grads handler (gradient histograms: "
                                               "logging.histogram_every with tensorboard) reads "
                                               "the whole gradient, which a sharded update never "
                                               "assembles"
                       : ct_params_numel(t->params) == 0 ? "the model has no trainable parameter"
                       : ct_comm_local_size(t->comm) != ct_comm_world_size(t->comm)
                           ? "the ranks are not all on one machine"
                           : "the communicator has no shared memory");
    if (can && (p->shard_optimizer == CT_UPDATE_SHARDING_ALWAYS ||
                p->bucket_bytes == CT_BUCKET_BYTES_AUTO))
        t->want_shard = true;               /* the window is each fit's (ct_train_open_shard) */
    if (t->want_shard) p->bucket_bytes = 0; /* no buckets to arm */
    return CT_OK;
}

/* How the ranks exchange gradients (the sharded update, buckets of bucket_bytes, or one
 * all-reduce), and the table of every rank's position that checkpoints record. */
static ct_status plan_exchange(ct_trainer *t) {
    ct_ctx *ctx = t->ctx;
    ct_trainer_params *p = &t->p;
    if (p->bucket_bytes < 0 && p->bucket_bytes != CT_BUCKET_BYTES_AUTO)
        return CT_FAIL(ctx, CT_ERR_CONFIG,
                       "trainer: bucket_bytes %lld is negative (and not CT_BUCKET_BYTES_AUTO)",
                       (long long)p->bucket_bytes);
    if ((int)p->shard_optimizer < 0 || p->shard_optimizer >= CT_UPDATE_SHARDING_COUNT)
        return CT_FAIL(ctx, CT_ERR_CONFIG,
                       "trainer: shard_optimizer %d is not a ct_update_sharding",
                       (int)p->shard_optimizer);
    int64_t world = ct_comm_world_size(t->comm);
    if (world > 1 && p->shard_optimizer != CT_UPDATE_SHARDING_NEVER) CT_TRY(decide_sharding(t));
    if (p->bucket_bytes == CT_BUCKET_BYTES_AUTO) {
        bool one_machine = ct_comm_local_size(t->comm) == world;
        p->bucket_bytes = one_machine ? 0 : (int64_t)1 << 20;
    }
    if (p->bucket_bytes > 0 && world > 1) CT_TRY(ct_train_build_buckets(t));
    if (world > 1) {
        t->n_rank_pos = world;
        t->rank_pos = ct_alloc(ctx, (size_t)t->n_rank_pos * 4 * sizeof(uint64_t));
        if (!t->rank_pos) return CT_FAIL(ctx, CT_ERR_OOM, "trainer: rank positions");
    }
    return CT_OK;
}

ct_status ct_trainer_create(ct_ctx *ctx, const ct_trainer_params *p, ct_trainer **out) {
    *out = NULL;
    if (!p || !p->model || !p->store || !p->optim || !p->train)
        return CT_FAIL(ctx, CT_ERR_INVALID_ARG,
                       "trainer: model, params, optimizer and training "
                       "loader are required");
    CT_TRY(check_params(ctx, p));
    CT_TRY(check_engines(ctx, p->engines, p->n_engines, p->evaluate != NULL));
    ct_trainer *t = ct_alloc(ctx, sizeof *t);
    if (!t) return CT_FAIL(ctx, CT_ERR_OOM, "allocating a trainer");
    memset(t, 0, sizeof *t);
    t->ctx = ctx;
    t->last_saved_step = -1;
    t->record_marks[0] = t->record_marks[1] = -1;
    t->replace_upto = -1;
    t->resumed_step = -1;
    t->model = p->model;
    t->params = p->store;
    t->opt = p->optim;
    t->sched = p->schedule;
    t->train = p->train;
    t->p = *p;
    t->task = p->task;
    t->n_classes = class_count(p->model, p->task.kind);
    ct_status s = make_graph(t);
    if (s == CT_OK) s = make_policies(t);
    if (s == CT_OK) s = parse_parts(t);
    if (s == CT_OK) s = make_engines(t, p->engines, p->n_engines);
    if (s == CT_OK) s = watch_metrics(t);
    if (s == CT_OK) s = ct_train_ps_create(t);
    if (s == CT_OK && p->strategy == CT_STRATEGY_LOCAL_SGD) s = ct_train_lsgd_create(t);
    if (s == CT_OK) s = plan_exchange(t);
    if (s == CT_OK) s = ct_train_profile_create(t);
    if (s != CT_OK) {
        ct_trainer_destroy(t);
        return s;
    }
    if (t->sched) (void)ct_optim_set_lr(t->opt, ct_schedule_lr(t->sched));
    *out = t;
    return CT_OK;
}

void ct_trainer_destroy(ct_trainer *t) {
    if (!t) return;
    ct_ctx *ctx = t->ctx;
    for (int64_t i = 0; i < t->n_engines; i++)
        ct_metrics_destroy(t->engines[i].m);
    ct_free(ctx, t->engines, (size_t)t->engines_cap * sizeof *t->engines);
    ct_ema_destroy(t->ema);
    ct_params_destroy(t->ema_store);
    ct_graph_destroy(t->g);
    ct_train_ps_destroy(t);
    if (t->own_comm) ct_comm_destroy(t->comm);
    ct_free(ctx, t->part_text, t->part_text_size);
    ct_free(ctx, t->rank_pos, (size_t)t->n_rank_pos * 4 * sizeof(uint64_t));
    ct_free(ctx, t->param_start, (size_t)t->n_trainable * sizeof(int64_t));
    ct_free(ctx, t->param_bucket, (size_t)t->n_trainable * sizeof(int64_t));
    ct_free(ctx, t->buckets, (size_t)t->n_trainable * sizeof(ct_train_bucket));
    ct_free(ctx, t->snap, t->snap_bytes ? t->snap_bytes : 1);
    ct_train_profile_destroy(t);
    ct_train_lsgd_destroy(t);
    ct_free(ctx, t, sizeof *t);
}

void ct_trainer_set_record_marks(ct_trainer *t, int64_t first, int64_t second) {
    t->record_marks[0] = first >= 0 && second >= 0 ? first : -1;
    t->record_marks[1] = first >= 0 && second >= 0 ? second : -1;
}

void ct_trainer_record_marks(const ct_trainer *t, int64_t *first, int64_t *second) {
    *first = t->record_marks[0];
    *second = t->record_marks[1];
}

int64_t ct_trainer_step(const ct_trainer *t) {
    return t->step;
}

int64_t ct_trainer_epoch(const ct_trainer *t) {
    return t->epoch;
}

int64_t ct_trainer_current_epoch(const ct_trainer *t) {
    /* the training loader past an epoch's first batch: that epoch is under way (its last
       step's evaluations included, until its end marker is read and the epoch counted) */
    return t->epoch + (ct_loader_get_state(t->train).next_batch > 0 ? 1 : 0);
}

bool ct_trainer_interrupted(const ct_trainer *t) {
    return t->interrupt;
}

int64_t ct_trainer_skipped_steps(const ct_trainer *t) {
    return t->skipped;
}

int64_t ct_trainer_spikes(const ct_trainer *t) {
    return t->spike.state.spikes;
}

const ct_metric_value *ct_trainer_metrics(const ct_trainer *t, const char *key, int64_t *n) {
    *n = 0;
    if (strcmp(key, "train") == 0) {
        *n = t->n_train_values;
        return t->n_train_values ? t->train_values : NULL;
    }
    for (int64_t i = 0; i < t->n_engines; i++)
        if (strcmp(t->engines[i].e.key, key) == 0 && t->engines[i].ran)
            return ct_metrics_values(t->engines[i].m, n);
    return NULL;
}

ct_monitor *ct_trainer_monitor(ct_trainer *t) {
    return t->has_monitor ? &t->monitor : NULL;
}

ct_early_stop *ct_trainer_early_stop(ct_trainer *t) {
    return t->has_es ? &t->es : NULL;
}

ct_ema *ct_trainer_ema(ct_trainer *t) {
    return t->ema;
}
