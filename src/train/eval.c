/*
 * eval.c - the evaluation engines: a pass over an engine's loader with gradients off, in
 * evaluation mode and with the EMA weights swapped in for its duration only (restored on every
 * exit path); the metrics reduced over ranks; then the monitor, a metric-driven schedule and
 * early stopping fed from them.
 */
#include <math.h>
#include <string.h>

#include "train/train_internal.h"

/* ---- evaluation ---- */

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

static ct_status run_engine(ct_trainer *t, ct_train_engine *en, bool policies) {
    ct_ctx *ctx = t->ctx;
    ct_graph *g = t->g;
    ct_status s = CT_OK;
    ct_comm_set_step(t->comm, t->step, "evaluation");
    CT_TRY(ct_train_sync_replicas(t, false));
    if (t->p.callbacks.on_eval_start)
        CT_TRY(ct_train_event(t, t->p.callbacks.on_eval_start(t->p.callbacks.user, t, en->e.key)));
    if (t->ema) CT_TRY(ct_ema_begin_eval(t->ema));
    ct_graph_set_grad_enabled(g, false);
    ct_graph_set_training(g, false);
    ct_metrics_reset(en->m);
    int64_t limit = t->p.dev_run ? 1 : t->p.limit_eval_batches;
    int64_t nb = 0;
    ct_batch b;
    while ((s = ct_loader_next(en->e.loader, &b)) == CT_OK && b.size > 0) {
        if (limit && nb >= limit) break;
        ct_graph_reset(g);
        ct_tensor *out = NULL, *y = NULL;
        int64_t items = 0;
        ct_tensor *loss = ct_train_forward_loss(t, &b, en->e.key, &out, &y, &items);
        if (!loss) {
            s = ct_train_failure(t, en->e.key);
            break;
        }
        s = ct_metrics_update(en->m, out, y);
        if (s == CT_OK)
            s = ct_metrics_update_loss(en->m, NULL, (double)((const float *)loss->data)[0], items);
        for (int64_t k = 0; s == CT_OK && k < t->n_parts; k++)
            if (t->parts[k])
                s = ct_metrics_update_loss(en->m, t->part_name[k],
                                           (double)((const float *)t->parts[k]->data)[0], items);
        if (s != CT_OK) break;
        nb++;
        if (t->p.callbacks.on_batch) {
            int64_t total = ct_loader_batches_per_epoch(en->e.loader);
            if (limit && limit < total) total = limit;
            s = t->p.callbacks.on_batch(t->p.callbacks.user, t, en->e.key, nb, total, (double)NAN);
            if (s == CT_STOP) t->interrupt = true; /* this evaluation still finishes */
            if (s == CT_STOP) s = CT_OK;
            if (s != CT_OK) break;
        }
    }
    if (s == CT_OK && b.size > 0) {
        /* stopped early (limit): the next pass starts at the next epoch's beginning */
        ct_loader_state st = ct_loader_get_state(en->e.loader);
        st.epoch++;
        st.next_batch = 0;
        s = ct_loader_set_state(en->e.loader, &st);
    }
    ct_graph_reset(g);
    ct_graph_set_grad_enabled(g, true);
    ct_graph_set_training(g, true);
    if (t->ema) ct_ema_end_eval(t->ema); /* the raw weights are back on every path */
    if (s != CT_OK) {
        ct_err_wrap(ctx, "evaluating '%s'", en->e.key);
        return s;
    }
    double *acc;
    int64_t n_acc;
    ct_metrics_accumulators(en->m, &acc, &n_acc);
    CT_TRY(ct_comm_allreduce_sum_f64(t->comm, acc, n_acc));
    ct_metrics_compute(en->m);
    en->ran = true;
    int64_t n;
    const ct_metric_value *v = ct_metrics_values(en->m, &n);
    if (t->p.callbacks.on_eval_end)
        CT_TRY(
            ct_train_event(t, t->p.callbacks.on_eval_end(t->p.callbacks.user, t, en->e.key, v, n)));
    if (!policies) return CT_OK;
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

ct_status ct_trainer_evaluate(ct_trainer *t, const char *key) {
    ct_train_engine *en = find_engine(t, key);
    if (!en) return CT_FAIL(t->ctx, CT_ERR_CONFIG, "evaluate: no engine '%s'", key);
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
                                : en->e.every_steps > 0 && t->step % en->e.every_steps == 0;
        if (!due || en->last_step == t->step) continue;
        en->last_step = t->step;
        CT_TRY(run_engine(t, en, true));
        ran = true;
    }
    /* a stop asked for during an evaluation (on_batch) stops every rank at the same point */
    return ran ? ct_train_agree_interrupt(t) : CT_OK;
}
