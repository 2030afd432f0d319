/*
 * fit.c - the training loop: epochs of micro-batches in accumulation windows, the log window,
 * the evaluations and checkpoints due after each step and epoch, and the stop rules (max_epochs,
 * max_steps, early stopping, a callback's CT_STOP, an interrupt) agreed between ranks.
 */
#include <math.h>
#include <string.h>

#include "ctrain/ops.h"
#include "train/train_internal.h"

/* ---- the log window ---- */

void ct_train_reset_window(ct_trainer *t) {
    t->window_loss = 0.0;
    t->window_count = 0;
    for (int64_t k = 0; k < t->n_parts; k++) {
        t->part_sum[k] = 0.0;
        t->part_count[k] = 0;
    }
}

ct_status ct_train_window_sums(ct_trainer *t, double *sums) {
    sums[0] = t->window_loss;
    sums[1] = (double)t->window_count;
    for (int64_t k = 0; k < t->n_parts; k++) {
        sums[2 + 2 * k] = t->part_sum[k];
        sums[3 + 2 * k] = (double)t->part_count[k];
    }
    if (ct_comm_world_size(t->comm) > 1)
        CT_TRY(ct_comm_allreduce_sum_f64(t->comm, sums, 2 + 2 * t->n_parts));
    return CT_OK;
}

/* The log window from sums laid out as ct_train_window_sums's. */
void ct_train_set_window(ct_trainer *t, const double *sums) {
    t->window_loss = sums[0];
    t->window_count = (int64_t)sums[1];
    for (int64_t k = 0; k < t->n_parts; k++) {
        t->part_sum[k] = sums[2 + 2 * k];
        t->part_count[k] = (int64_t)sums[3 + 2 * k];
    }
}

/* The window's record for on_log (train/loss: the mean of every rank's finite losses; the rate;
 * the norm; under on_nonfinite skip the steps skipped so far; with spike detection the spikes
 * so far; the parts), then a new window. */
static ct_status log_window(ct_trainer *t) {
    if (ct_comm_world_size(t->comm) > 1) { /* the mean over every rank's finite losses */
        double sums[2 + 2 * CT_LOSS_MAX_PARTS];
        CT_TRY(ct_train_window_sums(t, sums));
        ct_train_set_window(t, sums);
    }
    if (t->window_count == 0) { /* nothing finite to report; parts too start again */
        ct_train_reset_window(t);
        return CT_OK;
    }
    int64_t k = 0;
    t->train_values[k].name = "train/loss";
    t->train_values[k++].value = t->window_loss / (double)t->window_count;
    t->train_values[k].name = "train/lr";
    t->train_values[k++].value = (double)ct_optim_lr(t->opt);
    if (t->p.grad_clip_norm > 0.0f) {
        t->train_values[k].name = "train/grad_norm";
        t->train_values[k++].value = (double)t->grad_norm;
    }
    if (t->nf.mode == CT_NONFINITE_MODE_SKIP) { /* the run's count, so resumes continue it */
        t->train_values[k].name = "train/skipped";
        t->train_values[k++].value = (double)t->skipped;
    }
    if (t->spike.mode != CT_SPIKE_MODE_NONE) {
        t->train_values[k].name = "train/spikes";
        t->train_values[k++].value = (double)t->spike.state.spikes;
    }
    if (t->lsgd) k = ct_train_lsgd_values(t, t->train_values, k);
    for (int64_t p = 0; p < t->n_parts; p++)
        if (t->part_count[p] > 0) {
            t->train_values[k].name = t->part_log[p];
            t->train_values[k++].value = t->part_sum[p] / (double)t->part_count[p];
        }
    if (t->ps) k = ct_train_ps_values(t, k);
    t->n_train_values = k;
    ct_train_reset_window(t);
    if (t->p.callbacks.on_log)
        return ct_train_event(t, t->p.callbacks.on_log(t->p.callbacks.user, t, t->train_values, k));
    return CT_OK;
}

/* ---- callbacks ---- */

/* Runs a callback's result through the stop rule: CT_STOP ends the run cleanly. */
ct_status ct_train_event(ct_trainer *t, ct_status s) {
    if (s == CT_STOP) {
        /* with several ranks a stop takes effect where they agree, so that every rank leaves
           at the same point */
        if (ct_comm_world_size(t->comm) > 1 || t->lsgd) /* local SGD: at an average */
            t->stop_asked = true;
        else
            t->stop = true;
        return CT_OK;
    }
    return s;
}

/* ---- the loop ---- */

ct_status ct_train_skip_epoch(ct_loader *l) {
    ct_loader_state st = ct_loader_get_state(l);
    st.epoch++;
    st.next_batch = 0;
    return ct_loader_set_state(l, &st);
}

/* The batches an epoch trains on: all, limit_train_batches, or one in a dev run. */
static int64_t epoch_batches(const ct_trainer *t, int64_t total) {
    int64_t bpe = total;
    if (t->p.limit_train_batches && t->p.limit_train_batches < bpe) bpe = t->p.limit_train_batches;
    if (t->p.dev_run && bpe > 1) bpe = 1;
    return bpe;
}

/* Whether the run ends after this step: early stopping or a callback's stop, an interrupt,
 * max_steps, or a dev run's one step. */
static bool run_ends(const ct_trainer *t) {
    return t->stop || t->interrupt || (t->p.max_steps && t->step >= t->p.max_steps) || t->p.dev_run;
}

/* A micro-batch's finite loss and loss parts into the log window. */
static void add_to_window(ct_trainer *t, float lv) {
    if (isfinite(lv)) {
        t->window_loss += (double)lv;
        t->window_count++;
        t->spike_sum += (double)lv;
        t->spike_count++;
    }
    for (int64_t k = 0; k < t->n_parts; k++) {
        float pv = t->parts[k] ? ((const float *)t->parts[k]->data)[0] : (float)NAN;
        if (isfinite(pv)) {
            t->part_sum[k] += (double)pv;
            t->part_count[k]++;
        }
    }
}

/* One micro-batch (number i of the epoch's bpe) of the window at pos: forward, its loss into
 * the log window, the backward pass of its share of the window's loss, and on_batch. *loss:
 * its loss, NaN when not finite. */
static ct_status
train_batch(ct_trainer *t, const ct_batch *b, const ct_accum_pos *pos, int64_t bpe, double *loss) {
    ct_graph *g = t->g;
    const ct_trainer_callbacks *cb = &t->p.callbacks;
    ct_graph_reset(g); /* timed from the data's reading (or a callback's, below) */
    ct_tensor *out, *y;
    int64_t items;
    ct_tensor *l = ct_train_forward_loss(t, b, "train", &out, &y, &items);
    ct_train_lap(t, CT_PROFILE_FORWARD);
    if (!l) return ct_train_failure(t, "training");
    float lv = ((const float *)l->data)[0];
    *loss = isfinite(lv) ? (double)lv : (double)NAN;
    add_to_window(t, lv);
    /* each micro-batch weighs 1/length of the window: a short last window is not
     * under-weighted, and the reported loss stays the unscaled mean */
    ct_tensor *scaled = pos->length > 1 ? ct_op_scale(g, l, 1.0f / (float)pos->length) : l;
    t->root = scaled; /* where an incident's examination runs the backward pass again */
    if (pos->last && t->n_buckets) ct_train_arm_buckets(t);
    if (ct_graph_backward(g, scaled) != CT_OK) {
        /* no waiting for reductions in flight: the other ranks may never join them; the
           failed run ends the job (the command line aborts it) */
        ct_graph_set_grad_ready(g, NULL, NULL);
        return ct_train_failure(t, "training backward");
    }
    ct_train_lap(t, CT_PROFILE_BACKWARD);
    if (cb->on_batch) {
        ct_status bs = cb->on_batch(cb->user, t, "train", b->number + 1, bpe, *loss);
        ct_train_lap(t, CT_PROFILE_LOGGING);
        if (bs == CT_STOP) {
            t->interrupt = true; /* at the end of this step, after its evaluations */
        } else if (bs != CT_OK) {
            ct_graph_set_grad_ready(g, NULL, NULL); /* as for a failed backward pass */
            return bs;
        }
    }
    return CT_OK;
}

/* After a window's last micro-batch: the update, then what the step triggers: its log
 * record, the evaluations due at it, and its checkpoint, which the epoch's last step (or the
 * run's) owes until fit has run the evaluations that follow it. */
static ct_status end_window(ct_trainer *t, bool window_ok, bool epoch_last) {
    int64_t before = t->step;
    double comm = t->comm_seconds;
    CT_TRY(ct_train_finish_window(t, window_ok)); /* timed from train_batch's last reading */
    if (t->prof) { /* the exchange's time (update.c measures it) is not the update's */
        ct_train_lap(t, CT_PROFILE_OPTIMIZER);
        t->prof->cur[CT_PROFILE_OPTIMIZER] -= t->comm_seconds - comm;
        t->prof->cur[CT_PROFILE_COMM] += t->comm_seconds - comm;
    }
    if (t->step <= before) return CT_OK; /* a skipped or rolled-back step triggers nothing */
    ct_train_tune_end(t);                /* the step's time: its passes and its update */
    /* the clock is read after what ran only: a step without a record or a checkpoint pays
       two readings fewer */
    if (t->lsgd) CT_TRY(ct_train_lsgd_after_step(t, epoch_last));
    if (ct_train_due(t, t->p.steps_per_loop)) {
        CT_TRY(log_window(t));
        ct_train_lap(t, CT_PROFILE_LOGGING);
    }
    CT_TRY(ct_train_evaluate_due(t, false, 0));
    ct_train_lap(t, CT_PROFILE_EVAL);
    if (ct_train_due(t, t->p.save_every_steps)) t->save_due = true;
    if (!epoch_last && !run_ends(t) && (t->save_due || t->save_best)) {
        CT_TRY(ct_train_flush_checkpoint(t));
        ct_train_lap(t, CT_PROFILE_CHECKPOINT);
    }
    return CT_OK;
}

/* A batch of a data window that a spike's rollback skips: the count at the window's end.
 * Whether the epoch's limit is reached with it (at_limit: the window ends the limited epoch). */
static bool skip_window_batch(ct_trainer *t, const ct_accum_pos *pos, bool at_limit) {
    if (!pos->last) return false;
    t->spike.state.skip_left--;
    t->spike.state.skipped_windows++;
    return at_limit;
}

/*
 * The rest of the current epoch of training data. Batches are placed in accumulation windows
 * by their number within the epoch (ct_batch.number), so a loader restored mid-epoch resumes
 * the same windows. *completed: the epoch (or its limit) was reached; a run stopped earlier
 * (max_steps, dev_run, a callback) leaves the loader where it stopped.
 */
static ct_status train_epoch(ct_trainer *t, bool *completed) {
    const ct_trainer_callbacks *cb = &t->p.callbacks;
    int64_t total = ct_loader_batches_per_epoch(t->train), bpe = epoch_batches(t, total);
    bool window_ok = true;
    *completed = false;
    ct_batch b;
    ct_status s;
    ct_train_mark(t);
    while ((s = ct_loader_next(t->train, &b)) == CT_OK) {
        ct_train_lap(t, CT_PROFILE_DATA);
        if (b.size == 0) { /* the epoch's end marker */
            *completed = true;
            break;
        }
        int64_t i = b.number;
        /* for the collective timeout's message: the step being made, as failures name it */
        ct_comm_set_step(t->comm, t->step + 1, "training");
        if (i >= bpe) { /* past the limit: the rest of this epoch is not read */
            CT_TRY(ct_train_skip_epoch(t->train));
            *completed = true;
            break;
        }
        ct_accum_pos pos;
        CT_TRY(ct_accum_window(t->ctx, bpe, t->p.accum_steps, i, &pos));
        if (t->spike.state.skip_left > 0) { /* after a spike's rollback: read, not trained on */
            if (skip_window_batch(t, &pos, i + 1 >= bpe && bpe < total)) {
                CT_TRY(ct_train_skip_epoch(t->train));
                *completed = true;
                break;
            }
            continue;
        }
        if (i == 0 && cb->on_epoch_start) {
            CT_TRY(ct_train_event(t, cb->on_epoch_start(cb->user, t, t->epoch + 1)));
            ct_train_mark(t);
        }
        if (cb->on_iteration_start) {
            CT_TRY(ct_train_event(t, cb->on_iteration_start(cb->user, t, i)));
            ct_train_mark(t); /* the callback's time is overhead, not the forward pass's */
        }
        if (i == pos.start) {
            ct_train_straggle_start(t);
            ct_train_tune_start(t);
        }
        double loss = 0.0;
        CT_TRY(train_batch(t, &b, &pos, bpe, &loss));
        window_ok = window_ok && isfinite(loss);
        if (pos.last) {
            t->window_start = pos.start; /* for on_incident */
            t->window_end = i;
            CT_TRY(end_window(t, window_ok, i + 1 >= bpe));
            window_ok = true;
        }
        if (pos.last) ct_train_straggle_end(t);
        if (pos.last) ct_train_profile_step(t); /* ends at the last reading: no new one */
        if (cb->on_iteration_end) {
            CT_TRY(ct_train_event(t, cb->on_iteration_end(cb->user, t, i, loss)));
            ct_train_mark(t); /* overhead of the next step */
        }
        if (!pos.last) continue;           /* a stop waits for the window's end */
        if (i + 1 >= bpe && bpe < total) { /* the limit is reached: skip to the next epoch */
            CT_TRY(ct_train_skip_epoch(t->train));
            *completed = true;
            break;
        }
        if (run_ends(t)) {
            *completed = i + 1 >= bpe;
            if (*completed) { /* the marker comes next: take it now so the epoch is closed */
                CT_TRY(ct_loader_next(t->train, &b));
            }
            break;
        }
    }
    if (s != CT_OK) return ct_err_wrap(t->ctx, "reading training data");
    ct_params_zero_grad(t->params); /* a window cut by max_steps leaves nothing behind */
    t->spike_sum = 0.0;
    t->spike_count = 0;
    return CT_OK;
}

/* Whether any rank was interrupted (every rank then ends at the same point). */
ct_status ct_train_agree_interrupt(ct_trainer *t) {
    if (ct_comm_world_size(t->comm) < 2 && !t->lsgd) return CT_OK;
    float flags[2] = {t->interrupt ? 1.0f : 0.0f, t->stop_asked ? 1.0f : 0.0f};
    CT_TRY(ct_comm_allreduce_sum_f32(t->comm, flags, 2));
    t->interrupt = flags[0] != 0.0f;
    if (flags[1] != 0.0f) t->stop = true;
    t->stop_asked = false;
    return CT_OK;
}

/* A completed epoch: the count, an epoch-driven schedule, the log record, the evaluations due,
 * on_epoch_end, the stops agreed, the new last good state and the epoch's checkpoint. */
static ct_status end_epoch(ct_trainer *t) {
    const ct_trainer_callbacks *cb = &t->p.callbacks;
    t->epoch++;
    if (t->sched && t->p.schedule_per_epoch && !ct_schedule_needs_metric(t->sched))
        CT_TRY(ct_optim_set_lr(t->opt, ct_schedule_step(t->sched)));
    ct_train_mark(t);
    CT_TRY(log_window(t));
    ct_train_lap(t, CT_PROFILE_LOGGING);
    CT_TRY(ct_train_evaluate_due(t, true, t->epoch));
    ct_train_lap(t, CT_PROFILE_EVAL);
    if (cb->on_epoch_end) CT_TRY(ct_train_event(t, cb->on_epoch_end(cb->user, t, t->epoch)));
    CT_TRY(ct_train_agree_interrupt(t));     /* the epoch's stops, before its checkpoint */
    if (t->snap) ct_train_snapshot(t, true); /* the epoch ended finite: the new last good state */
    if (t->p.save_every_epochs && t->epoch % t->p.save_every_epochs == 0) t->save_due = true;
    ct_train_mark(t);
    CT_TRY(ct_train_flush_checkpoint(t));
    ct_train_lap(t, CT_PROFILE_CHECKPOINT);
    return CT_OK;
}

ct_status ct_train_fit_loop(ct_trainer *t) {
    const ct_trainer_callbacks *cb = &t->p.callbacks;
    t->stop = t->has_es && t->es.state.stopped; /* a resumed early-stopped run stays stopped */
    t->interrupt = false;
    ct_comm_set_step(t->comm, t->step, "start of fit");
    CT_TRY(ct_train_sync_replicas(t, true));
    if (t->lsgd) ct_train_lsgd_begin(t);
    if (cb->on_fit_start) CT_TRY(ct_train_event(t, cb->on_fit_start(cb->user, t)));
    CT_TRY(ct_train_agree_interrupt(t));
    if (t->snap) ct_train_snapshot(t, true);
    ct_params_zero_grad(t->params);
    while (!t->stop) {
        if (t->p.max_epochs && t->epoch >= t->p.max_epochs) break;
        if (t->p.max_steps && t->step >= t->p.max_steps) break;
        bool completed = false;
        CT_TRY(train_epoch(t, &completed));
        if (!completed) {
            /* cut mid-epoch (max_steps, early stopping, a callback): log what it did; after
             * max_steps, evaluate as at the end of this (uncounted) epoch. An interrupted run
             * leaves its window to the checkpoint, so the resumed run's next record is the
             * uninterrupted run's */
            ct_train_mark(t);
            if (!t->interrupt) CT_TRY(log_window(t));
            ct_train_lap(t, CT_PROFILE_LOGGING);
            /* an interrupt leaves the epoch's evaluations to the resumed run, at its real end */
            if (!t->stop && !t->interrupt) CT_TRY(ct_train_evaluate_due(t, true, t->epoch + 1));
            ct_train_lap(t, CT_PROFILE_EVAL);
            break;
        }
        CT_TRY(end_epoch(t));
        if (t->p.dev_run || t->interrupt) break;
    }
    /* the final state, so `latest` is where this run ended (a failed run saves nothing) */
    ct_comm_set_step(t->comm, t->step, "end of fit");
    if (t->ps) CT_TRY(ct_train_ps_stop(t));
    t->save_due = true;
    ct_train_mark(t);
    CT_TRY(ct_train_flush_checkpoint(t));
    ct_train_lap(t, CT_PROFILE_CHECKPOINT);
    CT_TRY(ct_train_share_moments(t)); /* the optimizer's state whole after fit, saved or not */
    if (cb->on_fit_end) CT_TRY(ct_train_event(t, cb->on_fit_end(cb->user, t)));
    return CT_OK;
}

ct_status ct_trainer_fit(ct_trainer *t) {
    ct_train_profile_begin(t);
    ct_train_tune_begin(t);
    ct_status s = t->ps ? CT_OK : ct_train_open_shard(t);
    if (s == CT_OK) s = t->ps ? ct_train_ps_fit(t) : ct_train_fit_loop(t);
    ct_train_close_shard(t, s == CT_OK);
    ct_train_tune_finish(t);
    ct_train_profile_end(t);
    if (s != CT_OK && t->p.callbacks.on_exception)
        t->p.callbacks.on_exception(t->p.callbacks.user, t, s);
    return s;
}
