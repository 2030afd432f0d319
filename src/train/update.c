/*
 * update.c - the optimizer step at the end of an accumulation window: the gradients averaged
 * over ranks (all-reduced, or summed by parts in the sharded update), checked for non-finite
 * values, clipped and applied, or the non-finite policy's skip, rollback or stop; the rollback
 * snapshot; the sharded update's window for each fit.
 *
 * The trainer owns the snapshot; the shared window lives from the start of a fit to its end.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "train/train_internal.h"

/* ---- rollback snapshot ---- */

size_t ct_train_snapshot_bytes(const ct_params *params, const ct_optim *opt) {
    size_t n = 0;
    for (int64_t i = 0; i < ct_params_count(params); i++)
        n += ct_tensor_nbytes(ct_params_at(params, i));
    return n + (size_t)ct_optim_buffer_count(opt) * (size_t)ct_params_numel(params) * sizeof(float);
}

/* Copies every tensor of the store and every optimizer buffer into (or out of) snap. */
void ct_train_snapshot(ct_trainer *t, bool save) {
    unsigned char *at = t->snap;
    for (int64_t i = 0; i < ct_params_count(t->params); i++) {
        ct_tensor *x = ct_params_at(t->params, i);
        size_t n = ct_tensor_nbytes(x);
        if (save)
            memcpy(at, x->data, n);
        else
            memcpy(x->data, at, n);
        at += n;
    }
    size_t nb = (size_t)ct_params_numel(t->params) * sizeof(float);
    for (int32_t k = 0; k < ct_optim_buffer_count(t->opt); k++) {
        const char *name;
        float *buf;
        if (ct_optim_buffer(t->opt, k, &name, &buf) != CT_OK) continue;
        if (save)
            memcpy(at, buf, nb);
        else
            memcpy(buf, at, nb);
        at += nb;
    }
    if (save) {
        t->snap_step = t->step;
        t->snap_opt_steps = ct_optim_steps(t->opt);
        if (t->sched) ct_schedule_get_state(t->sched, &t->snap_sched);
    } else {
        (void)ct_optim_set_steps(t->opt, t->snap_opt_steps);
        if (t->sched) {
            (void)ct_schedule_set_state(t->sched, &t->snap_sched);
            (void)ct_optim_set_lr(t->opt, ct_schedule_lr(t->sched));
        }
    }
}

/* ---- one optimizer step at the end of a window ---- */

/* Adds the time since `since` to what this rank has spent exchanging gradients. */
static void add_comm_time(ct_trainer *t, const struct timespec *since) {
    struct timespec now;
    (void)clock_gettime(CLOCK_MONOTONIC, &now);
    t->comm_seconds +=
        (double)(now.tv_sec - since->tv_sec) + (double)(now.tv_nsec - since->tv_nsec) * 1e-9;
}

/* Whether the spike detector follows the gradient norm. */
static bool spike_on_norm(const ct_trainer *t) {
    return t->spike.mode != CT_SPIKE_MODE_NONE && t->spike.signal == CT_SPIKE_SIGNAL_GRAD_NORM;
}

/* The sharded update's reduction (shard.c): this rank's part of the mean gradient, and the
 * decisions every rank must share in one all-reduce: a non-finite loss or gradient on any rank,
 * an interrupt, a callback's stop and, with norm clipping, the global norm (which then scales
 * this rank's part, as clip_grad_norm would scale the whole). */
static ct_status reduce_sharded(ct_trainer *t, bool *loss_ok, bool *grads_ok) {
    bool clip_norm = t->p.grad_clip_norm > 0.0f, ok = true;
    bool norm = clip_norm || spike_on_norm(t);
    double sumsq = 0.0;
    struct timespec start;
    (void)clock_gettime(CLOCK_MONOTONIC, &start);
    CT_TRY(ct_train_shard_reduce(t->shard, t->p.check_grads || clip_norm ? &ok : NULL,
                                 norm ? &sumsq : NULL));
    double flags[5] = {*loss_ok ? 0.0 : 1.0, t->interrupt ? 1.0 : 0.0, t->stop_asked ? 1.0 : 0.0,
                       ok ? 0.0 : 1.0, sumsq};
    CT_TRY(ct_comm_allreduce_sum_f64(t->comm, flags, 5));
    add_comm_time(t, &start);
    *loss_ok = flags[0] == 0.0;
    t->interrupt = flags[1] != 0.0;
    if (flags[2] != 0.0) t->stop = true;
    t->stop_asked = false;
    *grads_ok = flags[3] == 0.0;
    if (norm) t->grad_norm = (float)sqrt(flags[4]);
    if (clip_norm) {
        const double total = sqrt(flags[4]);
        const double coef = (double)t->p.grad_clip_norm / (total + 1e-6);
        if (*grads_ok && isfinite(t->grad_norm) && coef < 1.0)
            ct_train_shard_scale(t->shard, (float)coef);
    }
    return CT_OK;
}

/* The all-reduce (by buckets, or of the whole buffer) and the division by the world size: the
 * mean gradient on every rank, checked on the way when the check is not the clipping norm's.
 * Every rank takes the same decisions: a non-finite loss on any rank is everyone's, and so is
 * an interrupt (a signal reaches the ranks at different batches) or a callback's CT_STOP. */
static ct_status allreduce_grads(ct_trainer *t, bool *loss_ok, bool *grads_ok) {
    float *grads = ct_params_grads(t->params);
    int64_t n = ct_params_numel(t->params);
    struct timespec start;
    (void)clock_gettime(CLOCK_MONOTONIC, &start);
    if (t->n_buckets)
        CT_TRY(ct_train_reduce_buckets(t));
    else
        CT_TRY(ct_comm_allreduce_sum_f32(t->comm, grads, n));
    add_comm_time(t, &start);
    bool scan = t->p.check_grads && !(t->p.grad_clip_norm > 0.0f);
    ct_train_divide_check(t->ctx, grads, n, (float)ct_comm_world_size(t->comm),
                          scan ? grads_ok : NULL);
    float flags[3] = {*loss_ok ? 0.0f : 1.0f, t->interrupt ? 1.0f : 0.0f,
                      t->stop_asked ? 1.0f : 0.0f};
    CT_TRY(ct_comm_allreduce_sum_f32(t->comm, flags, 3));
    *loss_ok = flags[0] == 0.0f;
    t->interrupt = flags[1] != 0.0f;
    if (flags[2] != 0.0f) t->stop = true; /* a callback's CT_STOP on any rank */
    t->stop_asked = false;
    return CT_OK;
}

/* Whether the update itself checks the gradients: one process, nothing to do between the check
 * and the update (no clipping, no on_grads handler) and a finite loss. The policy then decides
 * after the update. Under skip the update must leave no trace of a non-finite gradient, so
 * every gradient is tested before anything is written (ct_optim_step_if_finite); under stop
 * and rollback a non-finite update is never kept (the run ends, or the last good state is put
 * back), so the update tests each gradient as it reads it (ct_optim_step_checked), a test that
 * costs next to nothing where a scan before it costs a pass over every gradient
 * (bench/bench_trainer.c). */
static bool update_checks(const ct_trainer *t, bool loss_ok) {
    /* a spike's update is decided on before it is made, and the norm read before the update */
    bool spike_first = t->spike.mode == CT_SPIKE_MODE_SKIP ||
                       t->spike.mode == CT_SPIKE_MODE_ROLLBACK || spike_on_norm(t);
    return ct_train_solo(t) && t->p.check_grads && !(t->p.grad_clip_norm > 0.0f) &&
           !(t->p.grad_clip_value > 0.0f) && !t->p.callbacks.on_grads && loss_ok && !spike_first;
}

/* Whether the gradients hold an inf or a NaN (*grads_ok false), before anything is applied,
 * the cheapest way: the clipping norm shows it for free (clip_grad_norm leaves them untouched
 * then), or the update checks them (*applied: the update is made), or a scan. With several
 * ranks the reduction has checked them already. */
static ct_status check_gradients(ct_trainer *t, bool loss_ok, bool *grads_ok, bool *applied) {
    bool clip_norm = t->p.grad_clip_norm > 0.0f;
    bool update_checked = update_checks(t, loss_ok);
    if (clip_norm && t->shard) {
        *grads_ok = *grads_ok && isfinite(t->grad_norm); /* the norm, from reduce_sharded */
    } else if (clip_norm) {
        float norm;
        CT_TRY(ct_optim_clip_grad_norm(t->ctx, t->params, t->p.grad_clip_norm, &norm));
        t->grad_norm = norm;
        *grads_ok = isfinite(norm);
    } else if (update_checked && t->nf.mode == CT_NONFINITE_MODE_SKIP) {
        *applied = ct_optim_step_if_finite(t->opt);
        *grads_ok = *applied;
    } else if (update_checked) {
        *grads_ok = ct_optim_step_checked(t->opt); /* undone by the policy when false */
        *applied = true;
    } else if (t->p.check_grads && ct_train_solo(t)) {
        CT_TRY(ct_nonfinite_check(t->ctx, ct_params_grads(t->params), ct_params_numel(t->params),
                                  grads_ok));
    }
    return CT_OK;
}

/* Skips warned about one by one; after them, one warning in SKIP_WARN_EVERY, so that a run
 * that skips often still says so without burying its other output. */
enum { SKIP_WARN_FIRST = 10, SKIP_WARN_EVERY = 100 };

/* The policy's skip: the window's gradients are dropped, with a warning. */
static ct_status skip_update(ct_trainer *t, bool loss_ok) {
    if (t->shard) CT_TRY(ct_train_shard_settle(t->shard)); /* before clearing what others read */
    ct_params_zero_grad(t->params);
    t->skipped++;
    if (t->skipped > SKIP_WARN_FIRST && t->skipped % SKIP_WARN_EVERY != 0) return CT_OK;
    char more[64] = "";
    if (t->skipped == SKIP_WARN_FIRST)
        (void)snprintf(more, sizeof more, "; from here on one skip in %d is warned",
                       SKIP_WARN_EVERY);
    ct_log(t->ctx, CT_LOG_WARN,
           "non-finite %s at step %lld, epoch %lld: update skipped (%lld skipped in all, %lld "
           "in a row, max_skips %lld)%s",
           loss_ok ? "gradients" : "loss", (long long)t->step + 1, (long long)t->epoch + 1,
           (long long)t->skipped, (long long)t->nf.state.consecutive_skipped,
           (long long)t->nf.max_skips, more);
    return CT_OK;
}

/* The last good state (ct_train_snapshot) comes back; the policies' counts stay. */
static ct_status restore_good_state(ct_trainer *t) {
    if (t->shard) CT_TRY(ct_train_shard_settle(t->shard));
    ct_train_snapshot(t, false);
    t->step = t->snap_step;
    if (t->last_saved_step > t->replace_upto) /* re-made steps replace their first saves */
        t->replace_upto = t->last_saved_step;
    ct_train_reset_window(t); /* the log window restarts with the restored state */
    ct_params_zero_grad(t->params);
    return CT_OK;
}

static ct_status rollback_event(ct_trainer *t) {
    const ct_trainer_callbacks *cb = &t->p.callbacks;
    return cb->on_rollback ? ct_train_event(t, cb->on_rollback(cb->user, t, t->step)) : CT_OK;
}

/* The policy's rollback. */
static ct_status roll_back(ct_trainer *t) {
    CT_TRY(restore_good_state(t));
    ct_log(t->ctx, CT_LOG_WARN, "non-finite values: rolled back to step %lld (rollback %lld)",
           (long long)t->step, (long long)t->nf.state.rollbacks);
    return rollback_event(t);
}

/* ---- incidents ---- */

/* The incident's record without the spike's figures; loss is the window's mean finite loss. */
static ct_incident incident_of(const ct_trainer *t, ct_incident_kind kind, double loss) {
    bool norm = t->p.grad_clip_norm > 0.0f || spike_on_norm(t);
    ct_incident in = {.kind = kind,
                      .step = t->step + 1,
                      .epoch = t->epoch + 1,
                      .batch_first = t->window_start,
                      .batch_last = t->window_end,
                      .loss = loss,
                      .grad_norm = norm ? (double)t->grad_norm : (double)NAN,
                      .value = (double)NAN,
                      .median = (double)NAN,
                      .deviation = (double)NAN,
                      .threshold = (double)NAN,
                      .loss_finite = true,
                      .grads_finite = true,
                      .rng = *ct_graph_rng(t->g),
                      .nonfinite_layer = -1};
    return in;
}

/* The incident to the caller, with the step's examination (examine.c), made only here: a
 * step that goes well pays nothing for it. intact: no update was made since the step's
 * forward pass. */
static void report_incident(ct_trainer *t, ct_incident *in, bool intact) {
    const ct_trainer_callbacks *cb = &t->p.callbacks;
    if (!cb->on_incident) return;
    int64_t n = ct_model_layer_count(t->model);
    const ct_tensor **acts = n > 0 ? ct_alloc(t->ctx, (size_t)n * sizeof *acts) : NULL;
    ct_train_examine(t, in, acts, acts ? n : 0, intact);
    cb->on_incident(cb->user, t, in);
    if (acts) ct_free(t->ctx, acts, (size_t)n * sizeof *acts);
}

static const char *nonfinite_action_name(ct_nonfinite_action a) {
    switch (a) {
    case CT_NONFINITE_ACTION_SKIP_UPDATE:
        return "skip";
    case CT_NONFINITE_ACTION_ROLLBACK:
        return "rollback";
    case CT_NONFINITE_ACTION_CONTINUE:
    case CT_NONFINITE_ACTION_STOP:
    case CT_NONFINITE_ACTION_COUNT:
        break;
    }
    return "stop";
}

/* ---- loss spikes ---- */

/* The step's value for the spike detector, the same on every rank: the mean of every rank's
 * finite losses of the window (sum, count), or the gradient norm before clipping. */
static ct_status spike_value(ct_trainer *t, double sum, int64_t count, double *value) {
    if (t->spike.signal == CT_SPIKE_SIGNAL_GRAD_NORM) {
        if (t->p.grad_clip_norm > 0.0f || t->shard) { /* measured by the clipping or reduction */
            *value = (double)t->grad_norm;
            return CT_OK;
        }
        const float *g = ct_params_grads(t->params); /* the mean gradient on every rank */
        double sumsq = 0.0;
        for (int64_t i = 0, n = ct_params_numel(t->params); i < n; i++)
            sumsq += (double)g[i] * (double)g[i];
        *value = sqrt(sumsq);
        return CT_OK;
    }
    double sums[2] = {sum, (double)count};
    if (ct_comm_world_size(t->comm) > 1) CT_TRY(ct_comm_allreduce_sum_f64(t->comm, sums, 2));
    *value = sums[1] > 0.0 ? sums[0] / sums[1] : (double)NAN;
    return CT_OK;
}

/* A spike's warning (the first SKIP_WARN_FIRST, then one in SKIP_WARN_EVERY). */
static void warn_spike(ct_trainer *t, double value, const ct_spike_verdict *v, const char *act) {
    int64_t n = t->spike.state.spikes;
    if (n > SKIP_WARN_FIRST && n % SKIP_WARN_EVERY != 0) return;
    char more[64] = "";
    if (n == SKIP_WARN_FIRST)
        (void)snprintf(more, sizeof more, "; from here on one spike in %d is warned",
                       SKIP_WARN_EVERY);
    ct_log(t->ctx, CT_LOG_WARN,
           "loss spike at step %lld, epoch %lld: %s %.6g > median %.6g + %g x deviation %.4g "
           "(spike %lld): %s%s",
           (long long)t->step + 1, (long long)t->epoch + 1,
           t->spike.signal == CT_SPIKE_SIGNAL_LOSS ? "loss" : "grad_norm", value, v->median,
           t->spike.threshold, v->deviation, (long long)n, act, more);
}

/* The detector's verdict on the step, and what its action does to a spike: *done when the
 * step ends here (skipped or rolled back). */
static ct_status act_on_spike(ct_trainer *t, double sum, int64_t count, bool *done) {
    *done = false;
    if (t->spike.mode == CT_SPIKE_MODE_NONE) return CT_OK;
    double value;
    CT_TRY(spike_value(t, sum, count, &value));
    ct_spike_verdict v;
    ct_spike_observe(&t->spike, value, &v);
    if (!v.spike) return CT_OK;
    ct_spike_state *st = &t->spike.state;
    /* a second spike before a new good state would go back to the same one: with spikes that
       come faster than the snapshots, the run would never get past it */
    bool again = t->spike.mode == CT_SPIKE_MODE_ROLLBACK && st->rollback_step == t->snap_step;
    ct_incident in =
        incident_of(t, CT_INCIDENT_SPIKE, count > 0 ? sum / (double)count : (double)NAN);
    in.action = t->spike.mode == CT_SPIKE_MODE_SKIP || again ? "skip"
                : t->spike.mode == CT_SPIKE_MODE_ROLLBACK    ? "rollback"
                                                             : "warn";
    in.value = value;
    in.median = v.median;
    in.deviation = v.deviation;
    in.threshold = t->spike.threshold;
    report_incident(t, &in, false); /* nothing is non-finite: no backward pass to examine */
    if (t->spike.mode == CT_SPIKE_MODE_SKIP || again) {
        if (t->shard) CT_TRY(ct_train_shard_settle(t->shard));
        ct_params_zero_grad(t->params);
        warn_spike(t, value, &v,
                   again ? "update skipped (no new good state since the last rollback)"
                         : "update skipped");
        *done = true;
        return CT_OK;
    }
    if (t->spike.mode == CT_SPIKE_MODE_ROLLBACK) {
        char act[96];
        (void)snprintf(act, sizeof act, "rolled back to step %lld, skipping %lld data window%s",
                       (long long)t->snap_step, (long long)t->spike.skip_batches,
                       t->spike.skip_batches == 1 ? "" : "s");
        warn_spike(t, value, &v, act);
        CT_TRY(restore_good_state(t));
        st->rollback_step = t->step;
        st->skipped_windows++; /* the spike's own, read already */
        st->skip_left = t->spike.skip_batches - 1;
        st->cooldown_left = t->spike.cooldown;
        *done = true;
        return rollback_event(t);
    }
    warn_spike(t, value, &v, "update applied");
    return CT_OK;
}

static ct_status clip_values(ct_trainer *t) {
    if (!(t->p.grad_clip_value > 0.0f)) return CT_OK;
    if (t->shard)
        ct_train_shard_clamp(t->shard, t->p.grad_clip_value); /* the others' parts are theirs */
    else
        CT_TRY(ct_optim_clip_grad_value(t->ctx, t->params, t->p.grad_clip_value));
    return CT_OK;
}

/* The optimizer's update: of the whole, or in the sharded update of this rank's part, whose
 * weights then go to every rank. */
static ct_status apply_update_now(ct_trainer *t) {
    if (!t->shard) {
        ct_optim_step(t->opt);
        return CT_OK;
    }
    int64_t lo, hi;
    ct_train_shard_bounds(t->shard, ct_comm_rank(t->comm), &lo, &hi);
    ct_optim_step_range(t->opt, lo, hi);
    t->moments_whole = false;
    struct timespec start;
    (void)clock_gettime(CLOCK_MONOTONIC, &start);
    CT_TRY(ct_train_shard_gather(t->shard, ct_params_values(t->params)));
    add_comm_time(t, &start);
    return CT_OK;
}

/* The update; in a spike rollback's cooldown with the rate scaled for this update only, so
 * that the schedule, the records and the checkpoints keep the unscaled one. */
static ct_status apply_update(ct_trainer *t) {
    if (t->spike.state.cooldown_left == 0) return apply_update_now(t);
    t->spike.state.cooldown_left--;
    float lr = ct_optim_lr(t->opt);
    CT_TRY(ct_optim_set_lr(t->opt, (float)((double)lr * t->spike.lr_factor)));
    ct_status s = apply_update_now(t);
    CT_TRY(ct_optim_set_lr(t->opt, lr));
    return s;
}

/* The step is made: the gradients cleared, the count, the schedule and the EMA advanced, and
 * under spike rollback every `window` steps the new last good state. */
static ct_status end_step(ct_trainer *t) {
    if (!ct_optim_zeroes_grads(t->opt)) ct_params_zero_grad(t->params);
    t->step++;
    if (t->sched && !t->p.schedule_per_epoch && !ct_schedule_needs_metric(t->sched))
        CT_TRY(ct_optim_set_lr(t->opt, ct_schedule_step(t->sched)));
    if (t->ema) CT_TRY(ct_ema_update(t->ema, t->step, NULL));
    /* a spike's rollback goes back at most `window` steps (or to the epoch's start): an
       epoch-old state would undo the epoch's progress at every planted spike */
    if (t->spike.mode == CT_SPIKE_MODE_ROLLBACK && t->step % t->spike.window == 0)
        ct_train_snapshot(t, true);
    return CT_OK;
}

ct_status ct_train_finish_window(ct_trainer *t, bool loss_ok) {
    if (t->ps) return ct_train_ps_step(t, loss_ok);
    bool grads_ok = true;
    double spike_sum = t->spike_sum; /* the window's, whatever becomes of it */
    int64_t spike_count = t->spike_count;
    t->spike_sum = 0.0;
    t->spike_count = 0;
    if (t->shard)
        CT_TRY(reduce_sharded(t, &loss_ok, &grads_ok));
    else if (!ct_train_solo(t))
        CT_TRY(allreduce_grads(t, &loss_ok, &grads_ok));
    bool applied = false;
    CT_TRY(check_gradients(t, loss_ok, &grads_ok, &applied));
    ct_nonfinite_action action;
    CT_TRY(ct_nonfinite_decide(t->ctx, &t->nf, loss_ok, grads_ok, &action));
    if (action != CT_NONFINITE_ACTION_CONTINUE) {
        ct_incident in =
            incident_of(t, CT_INCIDENT_NONFINITE,
                        spike_count > 0 ? spike_sum / (double)spike_count : (double)NAN);
        in.action = nonfinite_action_name(action);
        in.loss_finite = loss_ok;
        in.grads_finite = grads_ok;
        report_incident(t, &in, !applied);
    }
    switch (action) {
    case CT_NONFINITE_ACTION_CONTINUE:
        break;
    case CT_NONFINITE_ACTION_SKIP_UPDATE:
        return skip_update(t, loss_ok);
    case CT_NONFINITE_ACTION_ROLLBACK:
        return roll_back(t);
    case CT_NONFINITE_ACTION_STOP:
    case CT_NONFINITE_ACTION_COUNT:
        return ct_err_wrap(t->ctx, "step %lld, epoch %lld", (long long)t->step + 1,
                           (long long)t->epoch + 1);
    }
    bool done;
    CT_TRY(act_on_spike(t, spike_sum, spike_count, &done));
    if (done) return CT_OK;
    CT_TRY(clip_values(t));
    if (t->p.callbacks.on_grads)
        CT_TRY(ct_train_event(t, t->p.callbacks.on_grads(t->p.callbacks.user, t)));
    if (!applied) CT_TRY(apply_update(t));
    return end_step(t);
}

/* The sharded update's window for one fit (collective). Under `auto` a window that cannot be
 * made on some rank is not an error: the ranks agree on that and all-reduce instead. */
ct_status ct_train_open_shard(ct_trainer *t) {
    if (!t->want_shard) return CT_OK;
    ct_status s = ct_train_shard_create(t->ctx, t->comm, ct_params_numel(t->params), &t->shard);
    if (s == CT_OK) s = ct_params_bind_grads(t->params, ct_train_shard_grads(t->shard));
    if (t->p.shard_optimizer == CT_UPDATE_SHARDING_ALWAYS) {
        if (s != CT_OK) return s; /* the command line ends the job; a program decides */
    } else {
        double failed = s == CT_OK ? 0.0 : 1.0;
        char why[512] = "";
        if (s != CT_OK) {
            (void)snprintf(why, sizeof why, "%s", ct_last_error(t->ctx));
            ct_clear_error(t->ctx); /* not an error under auto: the warning below says it */
        }
        CT_TRY(ct_comm_allreduce_sum_f64(t->comm, &failed, 1));
        if (failed != 0.0) {
            if (t->shard) {
                (void)ct_params_bind_grads(t->params, NULL);
                /* others may hold no window to free it with: leave it to MPI_Finalize */
                ct_train_shard_destroy(t->shard, false);
                t->shard = NULL;
            }
            t->want_shard = false;
            ct_log(t->ctx, CT_LOG_WARN,
                   "trainer: no shared memory for the sharded update on %.0f of %lld ranks "
                   "(%s); all-reducing the gradients instead",
                   failed, (long long)ct_comm_world_size(t->comm),
                   why[0] ? why : "another rank's failure");
            return CT_OK;
        }
    }
    t->moments_whole = false; /* bucket_bytes is 0 since create: nothing is all-reduced */
    return CT_OK;
}

/* Ends the fit's window: collectively after a fit that every rank finished; after a failure
 * (other ranks may never get here) only this rank's part, the window left to MPI_Finalize. */
void ct_train_close_shard(ct_trainer *t, bool collective) {
    if (!t->shard) return;
    if (ct_params_grads(t->params) == ct_train_shard_grads(t->shard))
        (void)ct_params_bind_grads(t->params, NULL);
    ct_train_shard_destroy(t->shard, collective);
    t->shard = NULL;
}

bool ct_trainer_sharded(const ct_trainer *t) {
    return t->want_shard;
}

double ct_trainer_comm_seconds(const ct_trainer *t) {
    return t->comm_seconds;
}
