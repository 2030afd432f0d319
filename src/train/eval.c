/*
 * eval.c - the evaluation engines: a pass over an engine's loader with gradients off, in
 * evaluation mode and with the EMA weights swapped in for its duration only (restored on every
 * exit path); the metrics reduced over ranks; then the monitor, a metric-driven schedule and
 * early stopping fed from them.
 */
#include <math.h>
#include <string.h>

#include "train/train_internal.h"

static ct_train_engine *find_engine(ct_trainer *t, const char *key) {
    for (int64_t i = 0; i < t->n_engines; i++)
        if (strcmp(t->engines[i].e.key, key) == 0) return &t->engines[i];
    return NULL;
}

/* Rank 0's buffers (batch-norm running statistics, which each rank updates from its own
 * shard) to every rank, as DDP's broadcast_buffers: evaluations and checkpoints then see one
 * model. With values, the trainable weights too (at fit start: every rank begins from rank
 * 0's weights, fresh or resumed). */
ct_status ct_train_sync_replicas(ct_trainer *t, bool values) {
    if (ct_comm_world_size(t->comm) < 2) return CT_OK;
    if (values)
        CT_TRY(ct_comm_broadcast(t->comm, ct_params_values(t->params),
                                 sizeof(float) * (size_t)ct_params_numel(t->params), 0));
    for (int64_t i = 0; i < ct_params_count(t->params); i++) {
        if (ct_params_kind_at(t->params, i) != CT_PARAM_BUFFER) continue;
        ct_tensor *b = ct_params_at(t->params, i);
        CT_TRY(ct_comm_broadcast(t->comm, b->data, ct_tensor_nbytes(b), 0));
    }
    return CT_OK;
}

/* One batch: its loss (and the task's loss parts) and the metrics' update. */
static ct_status eval_batch(ct_trainer *t, ct_train_engine *en, const ct_batch *b) {
    ct_graph_reset(t->g);
    ct_tensor *out = NULL, *y = NULL;
    int64_t items = 0;
    ct_tensor *loss = ct_train_forward_loss(t, b, en->e.key, &out, &y, &items);
    if (!loss) return ct_train_failure(t, en->e.key);
    CT_TRY(ct_metrics_update(en->m, out, y));
    CT_TRY(ct_metrics_update_loss(en->m, NULL, (double)((const float *)loss->data)[0], items));
    for (int64_t k = 0; k < t->n_parts; k++)
        if (t->parts[k])
            CT_TRY(ct_metrics_update_loss(en->m, t->part_name[k],
                                          (double)((const float *)t->parts[k]->data)[0], items));
    return CT_OK;
}

/* The engine's batches, up to limit_eval_batches, into its metrics. A pass stopped by the
 * limit leaves the loader at the next epoch's beginning, where the next pass starts. */
static ct_status eval_batches(ct_trainer *t, ct_train_engine *en) {
    const ct_trainer_callbacks *cb = &t->p.callbacks;
    int64_t limit = t->p.dev_run ? 1 : t->p.limit_eval_batches;
    int64_t nb = 0;
    ct_batch b;
    ct_status s;
    while ((s = ct_loader_next(en->e.loader, &b)) == CT_OK && b.size > 0) {
        if (limit && nb >= limit) return ct_train_skip_epoch(en->e.loader);
        CT_TRY(eval_batch(t, en, &b));
        nb++;
        if (cb->on_batch) {
            int64_t total = ct_loader_batches_per_epoch(en->e.loader);
            if (limit && limit < total) total = limit;
            s = cb->on_batch(cb->user, t, en->e.key, nb, total, (double)NAN);
            if (s == CT_STOP) t->interrupt = true; /* this evaluation still finishes */
            if (s != CT_OK && s != CT_STOP) return s;
        }
    }
    return s;
}

/* The metrics' sums over every rank, then their values. */
static ct_status reduce_metrics(ct_trainer *t, ct_train_engine *en) {
    double *acc;
    int64_t n_acc;
    ct_metrics_accumulators(en->m, &acc, &n_acc);
    CT_TRY(ct_comm_allreduce_sum_f64(t->comm, acc, n_acc));
    ct_metrics_compute(en->m);
    en->ran = true;
    return CT_OK;
}

/* The monitor, a metric-driven schedule and early stopping, from the engine's new values. */
static ct_status feed_policies(ct_trainer *t, ct_train_engine *en) {
    double value;
    bool best = false;
    if (en->feeds_monitor && ct_metrics_get(en->m, t->monitor.metric, &value) == CT_OK) {
        /* on_best sees the improvement before it is recorded: a failed best save keeps the
         * old best */
        bool better = ct_monitor_is_better(&t->monitor, value);
        if (better && t->p.callbacks.on_best)
            CT_TRY(ct_train_event(
                t, t->p.callbacks.on_best(t->p.callbacks.user, t, t->monitor.metric, value)));
        ct_monitor_update(&t->monitor, value, t->step, NULL);
        best = better;
    }
    if (en->feeds_schedule && ct_metrics_get(en->m, t->sched_metric, &value) == CT_OK)
        CT_TRY(ct_optim_set_lr(t->opt, ct_schedule_step_metric(t->sched, value)));
    if (en->feeds_early_stop && ct_metrics_get(en->m, t->es.monitor.metric, &value) == CT_OK) {
        bool stop = false;
        ct_early_stop_update(&t->es, value, &stop);
        if (stop) t->stop = true;
    }
    if (best) t->save_best = true; /* saved once the step's evaluations are all done */
    return CT_OK;
}

/* One evaluation pass of an engine, with gradients off, in evaluation mode and on the EMA
 * weights; with policies, its values then feed the monitor, schedule and early stopping. */
static ct_status run_engine(ct_trainer *t, ct_train_engine *en, bool policies) {
    ct_graph *g = t->g;
    const ct_trainer_callbacks *cb = &t->p.callbacks;
    ct_comm_set_step(t->comm, t->step, "evaluation");
    CT_TRY(ct_train_sync_replicas(t, false));
    if (cb->on_eval_start) CT_TRY(ct_train_event(t, cb->on_eval_start(cb->user, t, en->e.key)));
    if (t->ema) CT_TRY(ct_ema_begin_eval(t->ema));
    /* the training step's arena is given back for the pass, and the pass's after it: an
     * evaluation's batches (often larger, no gradients) would otherwise keep both resident */
    ct_graph_trim(g);
    ct_graph_set_grad_enabled(g, false);
    ct_graph_set_training(g, false);
    ct_metrics_reset(en->m);
    ct_status s =
        en->e.loader ? eval_batches(t, en) : t->p.evaluate(t->p.evaluate_user, t, en->e.key, en->m);
    ct_graph_trim(g);
    ct_graph_set_grad_enabled(g, true);
    ct_graph_set_training(g, true);
    if (t->ema) ct_ema_end_eval(t->ema); /* the raw weights are back on every path */
    if (s != CT_OK) {
        ct_err_wrap(t->ctx, "evaluating '%s'", en->e.key);
        return s;
    }
    CT_TRY(reduce_metrics(t, en));
    int64_t n;
    const ct_metric_value *v = ct_metrics_values(en->m, &n);
    if (cb->on_eval_end) CT_TRY(ct_train_event(t, cb->on_eval_end(cb->user, t, en->e.key, v, n)));
    return policies ? feed_policies(t, en) : CT_OK;
}

ct_status ct_trainer_evaluate(ct_trainer *t, const char *key) {
    ct_train_engine *en = find_engine(t, key);
    if (!en) return CT_FAIL(t->ctx, CT_ERR_CONFIG, "evaluate: no engine '%s'", key);
    if (t->ps) { /* outside fit: rank 0 alone, on the whole set (its loaders are not sharded) */
        if (ct_comm_rank(t->comm) != 0) return CT_OK;
        ct_comm *world = t->comm;
        t->comm = ct_train_ps_solo(t);
        ct_status s = run_engine(t, en, false);
        t->comm = world;
        return s;
    }
    return run_engine(t, en, false);
}

/* An engine never runs twice for the same step (a step cadence landing on an epoch's last
 * step), so early stopping counts it once. */
ct_status ct_train_evaluate_due(ct_trainer *t, bool epoch_end, int64_t epoch) {
    bool ran = false;
    for (int64_t i = 0; i < t->n_engines && !t->stop; i++) {
        ct_train_engine *en = &t->engines[i];
        bool due = t->p.dev_run ? epoch_end
                   : epoch_end  ? en->e.every_epochs > 0 && epoch % en->e.every_epochs == 0
                                : ct_train_due(t, en->e.every_steps);
        if (!due || en->last_step == t->step) continue;
        en->last_step = t->step;
        CT_TRY(run_engine(t, en, true));
        ran = true;
    }
    /* a stop asked for during an evaluation (on_batch) stops every rank at the same point */
    return ran ? ct_train_agree_interrupt(t) : CT_OK;
}
