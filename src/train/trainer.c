/*
 * trainer.c - the training loop over the library's parts: loader, model, task, optimizer,
 * schedule, metrics, policies (monitor, early stopping, EMA, non-finite) and communicator.
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
#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/core_internal.h"
#include "ctrain/checkpoint.h"
#include "ctrain/loss.h"
#include "ctrain/ops.h"
#include "ctrain/trainer.h"
#include "train/train_internal.h"

typedef struct engine_rt {
    ct_eval_engine e;
    ct_metrics *m;
    bool ran;
    bool feeds_monitor, feeds_early_stop; /* the monitored metrics are among its values */
    bool feeds_schedule;                  /* and the metric a plateau schedule follows */
    int64_t last_step;                    /* the step of its last cadence run; -1 none */
    ct_loader_state resume_state;         /* parsed by restore_state before any is applied */
} engine_rt;

enum {
    TRAIN_LOSS,
    TRAIN_LR,
    TRAIN_GRAD_NORM,
    TRAIN_VALUES = TRAIN_GRAD_NORM + 1 + CT_LOSS_MAX_PARTS
};

typedef struct grad_bucket {
    int64_t start, n; /* a range of the flat gradient buffer */
    int64_t n_params; /* tensors in it */
    int64_t pending;  /* of those, the ones whose gradient is not final yet in this pass */
    bool started;     /* its reduction is in flight */
    ct_comm_request req;
} grad_bucket;

struct ct_trainer {
    ct_ctx *ctx;
    ct_model *model;
    ct_params *params;
    ct_optim *opt;
    ct_schedule *sched;
    const char *sched_metric; /* what a metric-driven schedule follows; NULL otherwise */
    ct_comm *comm;
    bool own_comm;
    ct_task task;
    ct_loader *train;
    engine_rt *engines;
    int64_t n_engines, engines_cap; /* engines made so far, engines allocated */
    ct_trainer_params p;
    ct_graph *g;
    int64_t n_classes;
    bool has_monitor, has_es;
    ct_monitor monitor;
    ct_early_stop es;
    ct_ema *ema;
    int64_t resumed_step; /* the checkpoint resumed from, which retention spares; -1 none */
    ct_params *ema_store; /* with EMA and checkpoints: the EMA weights laid out as the model's
                             store, for ema.safetensors */
    ct_nonfinite_policy nf;
    int64_t step, epoch, skipped;
    int64_t last_saved_step;  /* -1: none saved by this trainer yet */
    bool save_due, save_best; /* a checkpoint (a best one) is owed for the current step */
    int64_t replace_upto;     /* saves of steps up to this one replace an existing checkpoint: the
                                 abandoned continuation after a resume (INT64_MAX) or a rollback
                                 (the last step saved before it); -1: none */
    bool stop;                /* early stopping or a callback's CT_STOP */
    bool stop_asked;          /* several ranks: a callback's CT_STOP on this rank, which becomes
                                 stop where the ranks agree (agree_interrupt, a step's end) */
    bool interrupt;           /* on_batch's CT_STOP: end after this step and its evaluations */
    double comm_seconds;      /* spent in the gradient all-reduce (several ranks only) */
    bool want_shard;          /* shard_optimizer decided for sharding (at create) */
    ct_train_shard *shard;    /* the sharded update's window during a fit, or NULL */
    bool moments_whole;       /* the sharded moments were shared since the last update */
    /* gradient buckets (several ranks, bucket_bytes > 0): ranges of the flat gradient buffer,
       the last parameters first, as the backward pass finishes them */
    grad_bucket *buckets;
    int64_t n_buckets;
    int64_t *param_start;  /* offset in the flat buffer of each trainable tensor, ascending */
    int64_t *param_bucket; /* its bucket */
    int64_t next_bucket;   /* the next bucket to start: they start in index order */
    int64_t n_trainable;
    /* several ranks: each rank's loader epoch and next batch and its dropout stream and
       counter ([n_rank_pos][4]), gathered at every checkpoint and saved per rank */
    uint64_t *rank_pos;
    int64_t n_rank_pos;
    ct_status bucket_status; /* the first failure to start a bucket's reduction */
    /* the training log window */
    double window_loss;
    int64_t window_count;
    /* the window's sums over every rank as a checkpoint saves them: loss, count, then each
       loss part's sum and count (the resumed run starts its window from them) */
    double saved_window[2 + 2 * CT_LOSS_MAX_PARTS];
    /* the task's loss parts: names (in part_text), "train/loss/<name>", this batch's tensors
       and the log window's sums and counts */
    char *part_text;
    size_t part_text_size;
    const char *part_name[CT_LOSS_MAX_PARTS];
    char part_log[CT_LOSS_MAX_PARTS][CT_METRIC_NAME_MAX];
    int64_t n_parts;
    ct_tensor *parts[CT_LOSS_MAX_PARTS];
    double part_sum[CT_LOSS_MAX_PARTS];
    int64_t part_count[CT_LOSS_MAX_PARTS];
    float grad_norm;
    ct_metric_value train_values[TRAIN_VALUES];
    int64_t n_train_values;
    /* rollback: the last good state */
    unsigned char *snap;
    size_t snap_bytes;
    int64_t snap_step, snap_opt_steps;
    ct_schedule_state snap_sched;
};

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
    return p;
}

/* A new allocated store with the same tensors (names, shapes, kinds) as src. */
static ct_status mirror_store(ct_ctx *ctx, const ct_params *src, ct_params **out) {
    ct_params *p;
    CT_TRY(ct_params_create(ctx, &p));
    ct_status s = CT_OK;
    for (int64_t i = 0; s == CT_OK && i < ct_params_count(src); i++) {
        const ct_tensor *a = ct_params_at(src, i);
        ct_tensor *b;
        s = ct_params_add(p, a->name, a->dtype, a->ndim, a->shape, ct_params_kind_at(src, i), &b);
    }
    if (s == CT_OK) s = ct_params_alloc(p);
    if (s != CT_OK) {
        ct_params_destroy(p);
        return s;
    }
    *out = p;
    return CT_OK;
}

/* ---- checkpoint state ----
 * The trainer's part of state.json. 64-bit integers that may exceed 2^53 and every double go in
 * as strings (doubles as their bit patterns in hex), so that a resume restores them exactly and
 * an infinity (a plateau schedule's first best) survives JSON. */

static json_t *u64_json(uint64_t v) {
    char buf[24];
    snprintf(buf, sizeof buf, "%llu", (unsigned long long)v);
    return json_string(buf);
}

static json_t *f64_json(double v) {
    uint64_t bits;
    memcpy(&bits, &v, sizeof bits);
    char buf[24];
    snprintf(buf, sizeof buf, "%016llx", (unsigned long long)bits);
    return json_string(buf);
}

static json_t *monitor_json(const ct_monitor_state *m) {
    return json_pack("{s:o, s:I, s:b}", "best", f64_json(m->best), "best_step",
                     (json_int_t)m->best_step, "has_best", (int)m->has_best);
}

static json_t *trainer_state(const ct_trainer *t) {
    ct_loader_state ls = ct_loader_get_state(t->train);
    const ct_rng *r = ct_graph_rng(t->g);
    json_t *st = json_pack("{s:{s:I, s:I, s:I}, s:{s:I, s:I, s:o}, s:{s:o, s:o, s:o}}", "trainer",
                           "step", (json_int_t)t->step, "epoch", (json_int_t)t->epoch, "skipped",
                           (json_int_t)t->skipped, "loader", "epoch", (json_int_t)ls.epoch,
                           "next_batch", (json_int_t)ls.next_batch, "seed", u64_json(ls.seed),
                           "dropout_rng", "seed", u64_json(r->seed), "stream", u64_json(r->stream),
                           "counter", u64_json(r->counter));
    if (!st) return NULL;
    int bad = 0;
    if (t->p.fingerprint && t->p.fingerprint[0])
        bad |= json_object_set_new(json_object_get(st, "trainer"), "fingerprint",
                                   json_string(t->p.fingerprint));
    bad |= json_object_set_new(json_object_get(st, "trainer"), "world_size",
                               json_integer((json_int_t)ct_comm_world_size(t->comm)));
    if (t->rank_pos) { /* every rank's own position, as rank 0 gathered them */
        json_t *ranks = json_array();
        bad |= !ranks;
        for (int64_t k = 0; ranks && k < t->n_rank_pos; k++) {
            const uint64_t *q = t->rank_pos + 4 * k;
            bad |= json_array_append_new(
                ranks, json_pack("{s:{s:I, s:I}, s:{s:o, s:o}}", "loader", "epoch",
                                 (json_int_t)q[0], "next_batch", (json_int_t)q[1], "dropout_rng",
                                 "stream", u64_json(q[2]), "counter", u64_json(q[3])));
        }
        if (ranks) bad |= json_object_set_new(st, "ranks", ranks);
    }
    if (t->sched) {
        ct_schedule_state ss;
        ct_schedule_get_state(t->sched, &ss);
        bad |= json_object_set_new(
            st, "schedule",
            json_pack("{s:I, s:o, s:I, s:I, s:o}", "steps", (json_int_t)ss.steps, "best",
                      f64_json(ss.best), "bad_epochs", (json_int_t)ss.bad_epochs, "cooldown_left",
                      (json_int_t)ss.cooldown_left, "lr", f64_json(ss.lr)));
    }
    if (t->has_monitor) bad |= json_object_set_new(st, "monitor", monitor_json(&t->monitor.state));
    /* evaluation loaders advance an epoch per evaluation: their shuffles and transforms
     * depend on it */
    json_t *eng = json_object();
    bad |= json_object_set_new(st, "engines", eng);
    for (int64_t i = 0; eng && i < t->n_engines; i++) {
        ct_loader_state es = ct_loader_get_state(t->engines[i].e.loader);
        bad |= json_object_set_new(eng, t->engines[i].e.key,
                                   json_pack("{s:I, s:I, s:o}", "epoch", (json_int_t)es.epoch,
                                             "next_batch", (json_int_t)es.next_batch, "seed",
                                             u64_json(es.seed)));
    }
    if (t->has_es)
        bad |= json_object_set_new(
            st, "early_stopping",
            json_pack("{s:o, s:I, s:I, s:b}", "monitor", monitor_json(&t->es.state.monitor),
                      "evals", (json_int_t)t->es.state.evals, "bad_evals",
                      (json_int_t)t->es.state.bad_evals, "stopped", (int)t->es.state.stopped));
    if (t->ema) {
        ct_ema_state em;
        ct_ema_get_state(t->ema, &em);
        bad |= json_object_set_new(st, "ema",
                                   json_pack("{s:I, s:o}", "updates", (json_int_t)em.updates,
                                             "decay", f64_json(em.decay)));
    }
    /* a checkpoint between two records: the resumed run's first record averages the same
       steps as the uninterrupted run's */
    json_t *parts = json_array();
    bad |= !parts;
    for (int64_t k = 0; parts && k < t->n_parts; k++)
        bad |= json_array_append_new(parts, json_pack("{s:o, s:I}", "sum",
                                                      f64_json(t->saved_window[2 + 2 * k]), "count",
                                                      (json_int_t)t->saved_window[3 + 2 * k]));
    if (parts)
        bad |=
            json_object_set_new(st, "log_window",
                                json_pack("{s:o, s:I, s:o}", "loss", f64_json(t->saved_window[0]),
                                          "count", (json_int_t)t->saved_window[1], "parts", parts));
    bad |= json_object_set_new(st, "nonfinite",
                               json_pack("{s:I, s:I, s:I}", "skipped",
                                         (json_int_t)t->nf.state.skipped, "consecutive_skipped",
                                         (json_int_t)t->nf.state.consecutive_skipped, "rollbacks",
                                         (json_int_t)t->nf.state.rollbacks));
    if (bad) {
        json_decref(st);
        return NULL;
    }
    return st;
}

/* Writes the checkpoint owed for the current step (save_due or save_best), once. Called only
 * when every evaluation of the step has run (the epoch's end ones included), so the saved
 * monitor and early-stopping states are those an uninterrupted run has at that point, and a
 * step that is both due and best is one checkpoint that `best` points at.
 * Only rank 0 writes: every rank holds the same weights and optimizer state. */
static ct_status save_now(ct_trainer *t, bool best);
static ct_status event(ct_trainer *t, ct_status s);

/* A new log window: nothing summed yet. */
static void reset_window(ct_trainer *t) {
    t->window_loss = 0.0;
    t->window_count = 0;
    for (int64_t k = 0; k < t->n_parts; k++) {
        t->part_sum[k] = 0.0;
        t->part_count[k] = 0;
    }
}

/* The log window's sums over every rank (loss, count, then each part's sum and count) into
 * sums, on every rank; the window itself is left as it is. */
static ct_status window_sums(ct_trainer *t, double *sums) {
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

/* Every rank's loader position and dropout stream into rank_pos, on every rank: each rank
 * broadcasts its own four numbers in turn. */
static ct_status gather_positions(ct_trainer *t) {
    ct_loader_state ls = ct_loader_get_state(t->train);
    const ct_rng *r = ct_graph_rng(t->g);
    uint64_t *mine = t->rank_pos + 4 * ct_comm_rank(t->comm);
    mine[0] = (uint64_t)ls.epoch;
    mine[1] = (uint64_t)ls.next_batch;
    mine[2] = r->stream;
    mine[3] = r->counter;
    for (int64_t k = 0; k < t->n_rank_pos; k++)
        CT_TRY(ct_comm_broadcast(t->comm, t->rank_pos + 4 * k, 4 * sizeof(uint64_t), k));
    return CT_OK;
}

/* A sharded update leaves each rank with current moments for its own part only: every
 * rank's part to every rank, so the state saved (and read after fit) is whole. */
static ct_status share_moments(ct_trainer *t) {
    if (!t->shard || t->moments_whole) return CT_OK;
    for (int32_t k = 0; k < ct_optim_buffer_count(t->opt); k++) {
        const char *name;
        float *buf;
        CT_TRY(ct_optim_buffer(t->opt, k, &name, &buf));
        CT_TRY(ct_train_shard_share_buffer(t->shard, buf));
    }
    t->moments_whole = true;
    return CT_OK;
}

static ct_status flush_checkpoint(ct_trainer *t) {
    bool best = t->save_best, due = t->save_due;
    t->save_best = t->save_due = false;
    if (!t->p.checkpoint_dir || (!best && !due) || t->last_saved_step == t->step) return CT_OK;
    ct_comm_set_step(t->comm, t->step, "checkpoint"); /* the others wait while rank 0 writes */
    ct_status s = CT_OK;
    CT_TRY(window_sums(t, t->saved_window));
    if (t->rank_pos) CT_TRY(gather_positions(t));
    CT_TRY(share_moments(t));
    if (!t->comm || ct_comm_rank(t->comm) == 0) s = save_now(t, best);
    if (t->comm && ct_comm_world_size(t->comm) > 1) {
        /* the other ranks would otherwise wait in the next all-reduce for a rank that left */
        int32_t code = (int32_t)s;
        CT_TRY(ct_comm_broadcast(t->comm, &code, sizeof code, 0));
        if (code != CT_OK && s == CT_OK)
            return CT_FAIL(t->ctx, (ct_status)code,
                           "rank 0 failed to save the checkpoint of "
                           "step %lld (its log has the reason)",
                           (long long)t->step);
    }
    if (s == CT_OK) t->last_saved_step = t->step;
    return s;
}

/* Copies every tensor of src into dst, a store of the same layout (mirror_store). */
static void copy_store(ct_params *dst, const ct_params *src) {
    for (int64_t i = 0; i < ct_params_count(src); i++) {
        const ct_tensor *a = ct_params_at(src, i);
        memcpy(ct_params_at(dst, i)->data, a->data, ct_tensor_nbytes(a));
    }
}

/* Rank 0's part of flush_checkpoint. */
static ct_status save_now(ct_trainer *t, bool best) {
    if (t->p.callbacks.on_save)
        CT_TRY(event(t, t->p.callbacks.on_save(t->p.callbacks.user, t, best)));
    if (t->ema_store) { /* the shadow's values and buffers, by way of an exact swap */
        CT_TRY(ct_ema_swap_in(t->ema));
        copy_store(t->ema_store, t->params);
        CT_TRY(ct_ema_swap_out(t->ema));
    }
    json_t *st = trainer_state(t);
    if (!st) return CT_FAIL(t->ctx, CT_ERR_OOM, "checkpoint: building the trainer state");
    if (t->task.save_state) {
        json_t *extra = json_object();
        ct_status us = extra ? t->task.save_state(t->task.user, extra) : CT_ERR_OOM;
        if (us == CT_OK && json_object_set_new(st, "extra", extra) != 0)
            us = CT_ERR_OOM;
        else if (us != CT_OK)
            json_decref(extra);
        if (us != CT_OK) {
            json_decref(st);
            if (ct_last_status(t->ctx) == CT_OK || us == CT_ERR_OOM)
                return CT_FAIL(t->ctx, us, "checkpoint: the task's save_state failed");
            return ct_err_wrap(t->ctx, "checkpoint: the task's save_state");
        }
    }
    ct_checkpoint_save_params sp = ct_checkpoint_save_default_params();
    sp.step = t->step;
    sp.epoch = t->epoch;
    sp.optim = t->opt;
    sp.ema = t->ema_store;
    sp.state = st;
    sp.best = best;
    sp.keep = t->p.keep;
    sp.replace = t->step <= t->replace_upto;
    sp.spare_step = t->resumed_step;
    ct_status s = ct_checkpoint_save(t->ctx, t->p.checkpoint_dir, t->params, &sp, NULL, 0);
    json_decref(st);
    if (s != CT_OK)
        return ct_err_wrap(t->ctx, "saving the checkpoint of step %lld", (long long)t->step);
    return CT_OK;
}

/* Readers for trainer_state's fields: each returns false when the field is missing or of
 * another type, so a hand-edited or foreign state.json fails with the field's name. */
static bool get_i64(const json_t *o, const char *k, int64_t *v) {
    json_t *x = json_object_get(o, k);
    if (!json_is_integer(x)) return false;
    *v = (int64_t)json_integer_value(x);
    return true;
}

static bool get_bool(const json_t *o, const char *k, bool *v) {
    json_t *x = json_object_get(o, k);
    if (!json_is_boolean(x)) return false;
    *v = json_is_true(x);
    return true;
}

static bool get_u64(const json_t *o, const char *k, int base, uint64_t *v) {
    const char *s = json_string_value(json_object_get(o, k));
    /* digits only: strtoull alone would take "-1", " 7" and "+7" */
    if (!s || !(base == 16 ? isxdigit((unsigned char)*s) : isdigit((unsigned char)*s)))
        return false;
    char *end;
    errno = 0;
    *v = (uint64_t)strtoull(s, &end, base);
    return *end == '\0' && errno != ERANGE;
}

static bool get_f64(const json_t *o, const char *k, double *v) {
    uint64_t bits;
    if (!get_u64(o, k, 16, &bits)) return false;
    memcpy(v, &bits, sizeof bits);
    return true;
}

static bool get_monitor(const json_t *o, const char *k, ct_monitor_state *m) {
    const json_t *x = json_object_get(o, k);
    return get_f64(x, "best", &m->best) && get_i64(x, "best_step", &m->best_step) &&
           get_bool(x, "has_best", &m->has_best);
}

/* The dropout stream of a rank: rank 0's is the run's (and a single process's), each other
 * rank's is split from it with the same counter, so ranks draw different masks. Checkpoints
 * save every rank's stream; a resume by another number of ranks derives them again. */
static ct_rng rank_stream(ct_rng base, int64_t rank) {
    if (rank == 0) return base;
    ct_rng r = ct_rng_split(&base, (uint64_t)rank);
    r.counter = base.counter;
    return r;
}

/* Applies a checkpoint's trainer state. Everything is parsed before anything is applied. */
static ct_status restore_state(ct_trainer *t, const json_t *st, const char *path) {
    const json_t *tr = json_object_get(st, "trainer"), *lo = json_object_get(st, "loader"),
                 *rn = json_object_get(st, "dropout_rng"), *sc = json_object_get(st, "schedule"),
                 *es = json_object_get(st, "early_stopping"),
                 *nf = json_object_get(st, "nonfinite");
    int64_t step = 0, epoch = 0, skipped = 0;
    ct_loader_state ls;
    ct_rng rng;
    ct_nonfinite_state nfs;
    const char *bad = NULL;
    const char *fp = json_string_value(json_object_get(tr, "fingerprint"));
    if (t->p.fingerprint && t->p.fingerprint[0] && fp && strcmp(fp, t->p.fingerprint) != 0)
        return CT_FAIL(t->ctx, CT_ERR_CONFIG,
                       "%s: written by a run of another configuration (fingerprint %s, this run's "
                       "%s): resume it with the configuration it was made with",
                       path, fp, t->p.fingerprint);
    int64_t world = ct_comm_world_size(t->comm), saved_world = 1; /* absent: one process */
    if (json_object_get(tr, "world_size") && !get_i64(tr, "world_size", &saved_world))
        saved_world = 0;
    if (saved_world != world && saved_world > 0 && !t->p.allow_world_size_change)
        return CT_FAIL(t->ctx, CT_ERR_CONFIG,
                       "%s: written by a run of %lld process%s, and this run has %lld: resume it "
                       "with the same number of processes, or set "
                       "trainer.allow_world_size_change to keep the weights and optimizer state "
                       "and restart the epoch's data (docs/distributed.md)",
                       path, (long long)saved_world, saved_world == 1 ? "" : "es",
                       (long long)world);
    if (!get_i64(tr, "step", &step) || !get_i64(tr, "epoch", &epoch) ||
        !get_i64(tr, "skipped", &skipped) || saved_world < 1)
        bad = "trainer";
    else if (!get_i64(lo, "epoch", &ls.epoch) || !get_i64(lo, "next_batch", &ls.next_batch) ||
             !get_u64(lo, "seed", 10, &ls.seed))
        bad = "loader";
    else if (!get_u64(rn, "seed", 10, &rng.seed) || !get_u64(rn, "stream", 10, &rng.stream) ||
             !get_u64(rn, "counter", 10, &rng.counter))
        bad = "dropout_rng";
    else if (!get_i64(nf, "skipped", &nfs.skipped) ||
             !get_i64(nf, "consecutive_skipped", &nfs.consecutive_skipped) ||
             !get_i64(nf, "rollbacks", &nfs.rollbacks))
        bad = "nonfinite";
    ct_schedule_state ss;
    if (!bad && t->sched &&
        (!get_i64(sc, "steps", &ss.steps) || !get_f64(sc, "best", &ss.best) ||
         !get_i64(sc, "bad_epochs", &ss.bad_epochs) ||
         !get_i64(sc, "cooldown_left", &ss.cooldown_left) || !get_f64(sc, "lr", &ss.lr)))
        bad = "schedule";
    ct_monitor_state ms;
    if (!bad && t->has_monitor && !get_monitor(st, "monitor", &ms)) bad = "monitor";
    ct_early_stop_state ess;
    if (!bad && t->has_es &&
        (!get_monitor(es, "monitor", &ess.monitor) || !get_i64(es, "evals", &ess.evals) ||
         !get_i64(es, "bad_evals", &ess.bad_evals) || !get_bool(es, "stopped", &ess.stopped)))
        bad = "early_stopping";
    ct_ema_state ems;
    const json_t *emj = json_object_get(st, "ema");
    if (!bad && t->ema &&
        (!get_i64(emj, "updates", &ems.updates) || !get_f64(emj, "decay", &ems.decay)))
        bad = "ema";
    const json_t *eng = json_object_get(st, "engines");
    for (int64_t i = 0; !bad && i < t->n_engines; i++) {
        const json_t *e = json_object_get(eng, t->engines[i].e.key);
        ct_loader_state els;
        if (!get_i64(e, "epoch", &els.epoch) || !get_i64(e, "next_batch", &els.next_batch) ||
            !get_u64(e, "seed", 10, &els.seed))
            bad = t->engines[i].e.key;
        else
            t->engines[i].resume_state = els;
    }
    /* the log window's sums (absent in checkpoints saved at a record, before they were kept) */
    double window[2 + 2 * CT_LOSS_MAX_PARTS] = {0};
    const json_t *lw = json_object_get(st, "log_window");
    if (!bad && lw) {
        const json_t *lp = json_object_get(lw, "parts");
        int64_t count = 0;
        if (!get_f64(lw, "loss", &window[0]) || !get_i64(lw, "count", &count) || count < 0 ||
            !json_is_array(lp) || json_array_size(lp) != (size_t)t->n_parts)
            bad = "log_window";
        window[1] = (double)count;
        for (int64_t k = 0; !bad && k < t->n_parts; k++) {
            const json_t *pk = json_array_get(lp, (size_t)k);
            if (!get_f64(pk, "sum", &window[2 + 2 * k]) || !get_i64(pk, "count", &count) ||
                count < 0)
                bad = "log_window";
            window[3 + 2 * k] = (double)count;
        }
    }
    const json_t *extra = json_object_get(st, "extra");
    if (!bad && t->task.load_state && !json_is_object(extra)) bad = "extra";
    /* this rank's dropout stream: its own saved one when the checkpoint has them (several
       ranks, the same number), else split from rank 0's */
    ct_rng own_rng = bad ? rng : rank_stream(rng, ct_comm_rank(t->comm));
    const json_t *ranks = json_object_get(st, "ranks");
    if (!bad && ranks && saved_world == world) {
        const json_t *mine = json_array_get(ranks, (size_t)ct_comm_rank(t->comm));
        const json_t *ml = json_object_get(mine, "loader");
        const json_t *mr = json_object_get(mine, "dropout_rng");
        int64_t e0, b0;
        if (!json_is_array(ranks) || json_array_size(ranks) != (size_t)world ||
            !get_i64(ml, "epoch", &e0) || !get_i64(ml, "next_batch", &b0) ||
            !get_u64(mr, "stream", 10, &own_rng.stream) ||
            !get_u64(mr, "counter", 10, &own_rng.counter))
            bad = "ranks";
        else if (e0 != ls.epoch || b0 != ls.next_batch)
            return CT_FAIL(t->ctx, CT_ERR_FORMAT,
                           "%s/state.json: rank %lld's saved position (epoch %lld, batch %lld) "
                           "differs from the loader's (epoch %lld, batch %lld)",
                           path, (long long)ct_comm_rank(t->comm), (long long)e0, (long long)b0,
                           (long long)ls.epoch, (long long)ls.next_batch);
    }
    if (bad)
        return CT_FAIL(t->ctx, CT_ERR_FORMAT,
                       "%s/state.json: the trainer state's '%s' part is missing or malformed "
                       "(a checkpoint made by another trainer configuration?)",
                       path, bad);
    if (t->task.load_state && t->task.load_state(t->task.user, extra) != CT_OK)
        return ct_err_wrap(t->ctx, "%s: the task's load_state", path);
    /* each setter validates (a failure names the part); the trainer is then partly restored
     * and is to be destroyed, as trainer.h says */
    ct_ctx *ctx = t->ctx;
    if (saved_world != world) { /* allowed: the shards changed, so the epoch starts over */
        ct_log(ctx, CT_LOG_WARN,
               "%s: written by %lld processes, resumed by %lld: the weights and optimizer state "
               "are kept; epoch %lld's data starts again from its first batch",
               path, (long long)saved_world, (long long)world, (long long)ls.epoch + 1);
        ls.next_batch = 0;
        for (int64_t i = 0; i < t->n_engines; i++)
            t->engines[i].resume_state.next_batch = 0;
    }
    if (ct_loader_set_state(t->train, &ls) != CT_OK)
        return ct_err_wrap(ctx, "%s: restoring the training loader", path);
    for (int64_t i = 0; i < t->n_engines; i++)
        if (ct_loader_set_state(t->engines[i].e.loader, &t->engines[i].resume_state) != CT_OK)
            return ct_err_wrap(ctx, "%s: restoring the loader of engine '%s'", path,
                               t->engines[i].e.key);
    if (t->sched) {
        if (ct_schedule_set_state(t->sched, &ss) != CT_OK)
            return ct_err_wrap(ctx, "%s: restoring the schedule", path);
        CT_TRY(ct_optim_set_lr(t->opt, ct_schedule_lr(t->sched)));
    }
    if ((t->has_monitor && ct_monitor_set_state(ctx, &t->monitor, &ms) != CT_OK) ||
        (t->has_es && ct_early_stop_set_state(ctx, &t->es, &ess) != CT_OK) ||
        ct_nonfinite_set_state(ctx, &t->nf, &nfs) != CT_OK)
        return ct_err_wrap(ctx, "%s: restoring the monitor and policies", path);
    if (t->ema_store) { /* the loaded EMA weights into the shadow, by the same exact swap */
        CT_TRY(ct_ema_swap_in(t->ema));
        copy_store(t->params, t->ema_store);
        CT_TRY(ct_ema_swap_out(t->ema));
    }
    if (t->ema && ct_ema_set_state(t->ema, &ems) != CT_OK)
        return ct_err_wrap(ctx, "%s: restoring the EMA", path);
    *ct_graph_rng(t->g) = own_rng;
    /* the window's sums are every rank's: one rank carries them on */
    reset_window(t);
    if (ct_comm_rank(t->comm) == 0) {
        t->window_loss = window[0];
        t->window_count = (int64_t)window[1];
        for (int64_t k = 0; k < t->n_parts; k++) {
            t->part_sum[k] = window[2 + 2 * k];
            t->part_count[k] = (int64_t)window[3 + 2 * k];
        }
    }
    t->step = step;
    t->epoch = epoch;
    t->skipped = skipped;
    t->last_saved_step = step;
    t->save_due = t->save_best = false;
    t->replace_upto = INT64_MAX;
    t->resumed_step = step;
    return CT_OK;
}

ct_status ct_trainer_resume(ct_trainer *t, const char *which) {
    ct_ctx *ctx = t->ctx;
    if (!t->p.checkpoint_dir)
        return CT_FAIL(ctx, CT_ERR_INVALID_ARG, "resume: the trainer has no checkpoint_dir");
    json_t *st = NULL;
    char path[4096];
    CT_TRY(ct_checkpoint_load(ctx, t->p.checkpoint_dir, which ? which : "latest", t->params,
                              t->ema_store, t->opt, &st, NULL, NULL, path, sizeof path));
    ct_status s = restore_state(t, st, path);
    json_decref(st);
    if (s == CT_OK)
        ct_log(ctx, CT_LOG_INFO, "resumed from %s (step %lld, epoch %lld)", path,
               (long long)t->step, (long long)t->epoch);
    return s;
}

/* ---- task defaults ---- */

static ct_status default_prep(void *user,
                              ct_graph *g,
                              const ct_batch *b,
                              const char *split,
                              ct_tensor **input,
                              ct_tensor **target) {
    (void)user, (void)split;
    *input = ct_graph_wrap(g, b->x.data, b->x.dtype, b->x.ndim, b->x.shape);
    *target = ct_graph_wrap(g, b->y.data, b->y.dtype, b->y.ndim, b->y.shape);
    return ct_graph_status(g);
}

/* The model output and targets as the loss and the metrics take them: classes [N, C] with
 * [N], or values of equal shape. Language models flatten [B, T, V] and [B, T]. */
static void flatten_pair(ct_trainer *t, ct_graph *g, ct_tensor **out, ct_tensor **target) {
    ct_tensor *o = *out, *y = *target;
    if (!o || !y) return;
    if (t->task.kind == CT_TASK_LANGUAGE_MODEL && o->ndim >= 2) {
        int64_t v = o->shape[o->ndim - 1], rows = ct_tensor_numel(o) / (v ? v : 1);
        *out = ct_op_reshape(g, o, 2, (int64_t[]){rows, v});
        *target = ct_graph_wrap(g, y->data, y->dtype, 1, (int64_t[]){ct_tensor_numel(y)});
    } else if (t->task.kind == CT_TASK_REGRESSION && ct_tensor_numel(o) == ct_tensor_numel(y) &&
               !ct_tensor_same_shape(o, y)) {
        *out = ct_op_reshape(g, o, y->ndim, y->shape);
    }
}

static ct_tensor *default_loss(ct_trainer *t, ct_graph *g, ct_tensor *out, ct_tensor *y) {
    if (t->task.kind == CT_TASK_REGRESSION) return ct_loss_mse(g, out, y, CT_REDUCTION_MEAN);
    ct_cross_entropy_params ce = ct_cross_entropy_default_params();
    return ct_loss_cross_entropy(g, out, y, &ce);
}

/* Forward and loss of one batch; *items is the number of loss terms (samples or tokens). */
static ct_tensor *forward_loss(ct_trainer *t,
                               const ct_batch *b,
                               const char *split,
                               ct_tensor **out,
                               ct_tensor **target,
                               int64_t *items) {
    ct_graph *g = t->g;
    memset(t->parts, 0, sizeof t->parts); /* no part from an earlier batch is reported again */
    bool training = strcmp(split, "train") == 0;
    ct_tensor *(*step)(void *, ct_graph *, ct_model *, const ct_batch *, ct_tensor **,
                       ct_tensor **) = training ? t->task.train_step : t->task.eval_step;
    if (step) { /* the task computes the whole forward pass itself */
        ct_tensor *o = NULL, *y = NULL;
        ct_tensor *loss = step(t->task.user, g, t->model, b, &o, &y);
        if (!loss) return NULL;
        if (!o || !y || loss->dtype != CT_F32 || ct_tensor_numel(loss) != 1) {
            CT_GRAPH_FAIL(g, CT_ERR_SHAPE,
                          "%s: the task's %s must return one f32 loss and set the output and "
                          "target",
                          split, training ? "train_step" : "eval_step");
            return NULL;
        }
        flatten_pair(t, g, &o, &y);
        *out = o;
        *target = y;
        *items = t->task.kind == CT_TASK_REGRESSION ? b->size : ct_tensor_numel(y);
        return loss;
    }
    ct_tensor *x = NULL, *y = NULL;
    ct_status s = t->task.prep_batch ? t->task.prep_batch(t->task.user, g, b, split, &x, &y)
                                     : default_prep(NULL, g, b, split, &x, &y);
    if (s != CT_OK || !x || !y) {
        if (ct_graph_status(g) == CT_OK)
            CT_GRAPH_FAIL(g, s != CT_OK ? s : CT_ERR_INVALID_ARG,
                          "%s: prep_batch gave no input or target", split);
        return NULL;
    }
    ct_tensor *o = ct_model_forward(t->model, g, x);
    if (!o) return NULL;
    ct_tensor *loss;
    if (t->task.loss_parts) {
        loss = t->task.loss_parts(t->task.user, g, o, y, t->parts);
        flatten_pair(t, g, &o, &y);
        for (int64_t k = 0; loss && k < t->n_parts; k++)
            if (t->parts[k] &&
                (t->parts[k]->dtype != CT_F32 || ct_tensor_numel(t->parts[k]) != 1)) {
                CT_GRAPH_FAIL(g, CT_ERR_SHAPE, "%s: loss part '%s' must be one f32 value", split,
                              t->part_name[k]);
                return NULL;
            }
    } else if (t->task.loss) {
        loss = t->task.loss(t->task.user, g, o, y);
        flatten_pair(t, g, &o, &y);
    } else {
        flatten_pair(t, g, &o, &y);
        loss = default_loss(t, g, o, y);
    }
    if (!loss) return NULL;
    if (loss->dtype != CT_F32 || ct_tensor_numel(loss) != 1) {
        CT_GRAPH_FAIL(g, CT_ERR_SHAPE, "%s: the task's loss must be one f32 value", split);
        return NULL;
    }
    *out = o;
    *target = y;
    *items = t->task.kind == CT_TASK_REGRESSION ? b->size : ct_tensor_numel(y);
    return loss;
}

/* The status of a failed forward or loss: the graph's, else the context's, else an internal
 * error (a task hook returned NULL without saying why). Never CT_OK. */
static ct_status failure(ct_trainer *t, const char *where) {
    ct_status s = ct_graph_status(t->g);
    if (s == CT_OK) s = ct_last_status(t->ctx);
    if (s == CT_OK || s == CT_STOP)
        return CT_FAIL(t->ctx, CT_ERR_INTERNAL, "%s: a task hook returned NULL without an error",
                       where);
    ct_err_wrap(t->ctx, "%s", where);
    return s;
}

/* ---- callbacks ---- */

/* Runs a callback's result through the stop rule: CT_STOP ends the run cleanly. */
static ct_status event(ct_trainer *t, ct_status s) {
    if (s == CT_STOP) {
        /* with several ranks a stop takes effect where they agree, so that every rank leaves
           at the same point */
        if (ct_comm_world_size(t->comm) > 1)
            t->stop_asked = true;
        else
            t->stop = true;
        return CT_OK;
    }
    return s;
}

/* ---- evaluation ---- */

static engine_rt *find_engine(ct_trainer *t, const char *key) {
    for (int64_t i = 0; i < t->n_engines; i++)
        if (strcmp(t->engines[i].e.key, key) == 0) return &t->engines[i];
    return NULL;
}

/* Rank 0's buffers (batch-norm running statistics, which each rank updates from its own
 * shard) to every rank, as DDP's broadcast_buffers: evaluations and checkpoints then see one
 * model. With values, the trainable weights too (at fit start: every rank begins from rank
 * 0's weights, fresh or resumed). */
static ct_status sync_replicas(ct_trainer *t, bool values) {
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

static ct_status run_engine(ct_trainer *t, engine_rt *en, bool policies) {
    ct_ctx *ctx = t->ctx;
    ct_graph *g = t->g;
    ct_status s = CT_OK;
    ct_comm_set_step(t->comm, t->step, "evaluation");
    CT_TRY(sync_replicas(t, false));
    if (t->p.callbacks.on_eval_start)
        CT_TRY(event(t, t->p.callbacks.on_eval_start(t->p.callbacks.user, t, en->e.key)));
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
        ct_tensor *loss = forward_loss(t, &b, en->e.key, &out, &y, &items);
        if (!loss) {
            s = failure(t, en->e.key);
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
        CT_TRY(event(t, t->p.callbacks.on_eval_end(t->p.callbacks.user, t, en->e.key, v, n)));
    if (!policies) return CT_OK;
    double value;
    bool best = false;
    if (en->feeds_monitor && ct_metrics_get(en->m, t->monitor.metric, &value) == CT_OK) {
        /* on_best sees the improvement before it is recorded: a failed best save keeps the
         * old best */
        bool better = ct_monitor_is_better(&t->monitor, value);
        if (better && t->p.callbacks.on_best)
            CT_TRY(
                event(t, t->p.callbacks.on_best(t->p.callbacks.user, t, t->monitor.metric, value)));
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
    engine_rt *en = find_engine(t, key);
    if (!en) return CT_FAIL(t->ctx, CT_ERR_CONFIG, "evaluate: no engine '%s'", key);
    return run_engine(t, en, false);
}

/* Runs the engines due at this point: at an epoch's end (epoch = the epoch number just
 * finished, counting from 1) or after a step. An engine never runs twice for the same step
 * (a step cadence landing on an epoch's last step), so early stopping counts it once. */
static ct_status agree_interrupt(ct_trainer *t);

static ct_status evaluate_due(ct_trainer *t, bool epoch_end, int64_t epoch) {
    bool ran = false;
    for (int64_t i = 0; i < t->n_engines && !t->stop; i++) {
        engine_rt *en = &t->engines[i];
        bool due = t->p.dev_run ? epoch_end
                   : epoch_end  ? en->e.every_epochs > 0 && epoch % en->e.every_epochs == 0
                                : en->e.every_steps > 0 && t->step % en->e.every_steps == 0;
        if (!due || en->last_step == t->step) continue;
        en->last_step = t->step;
        CT_TRY(run_engine(t, en, true));
        ran = true;
    }
    /* a stop asked for during an evaluation (on_batch) stops every rank at the same point */
    return ran ? agree_interrupt(t) : CT_OK;
}

/* ---- rollback snapshot ---- */

static size_t store_bytes(const ct_params *p) {
    size_t n = 0;
    for (int64_t i = 0; i < ct_params_count(p); i++)
        n += ct_tensor_nbytes(ct_params_at(p, i));
    return n;
}

/* Copies every tensor of the store and every optimizer buffer into (or out of) snap. */
static void snapshot(ct_trainer *t, bool save) {
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

/* ---- gradient buckets (data-parallel) ---- */

/* Buckets of about bucket_bytes over the trainable tensors, from the last declared (whose
 * gradients the backward pass finishes first) to the first. */
static ct_status build_buckets(ct_trainer *t) {
    ct_ctx *ctx = t->ctx;
    const float *base = ct_params_values(t->params);
    int64_t count = ct_params_count(t->params), n = 0;
    for (int64_t i = 0; i < count; i++)
        n += ct_params_kind_at(t->params, i) == CT_PARAM_TRAINABLE;
    if (n == 0) return CT_OK;
    t->n_trainable = n; /* before the allocations: destroy frees with this size */
    t->param_start = ct_alloc(ctx, (size_t)n * sizeof(int64_t));
    t->param_bucket = ct_alloc(ctx, (size_t)n * sizeof(int64_t));
    t->buckets = ct_alloc(ctx, (size_t)n * sizeof(grad_bucket)); /* at most one per tensor */
    if (!t->param_start || !t->param_bucket || !t->buckets)
        return CT_FAIL(ctx, CT_ERR_OOM, "trainer: gradient buckets");
    for (int64_t i = 0, k = 0; i < count; i++)
        if (ct_params_kind_at(t->params, i) == CT_PARAM_TRAINABLE)
            t->param_start[k++] = (const float *)ct_params_at(t->params, i)->data - base;
    for (int64_t k = 1; k < n; k++)
        if (t->param_start[k] <= t->param_start[k - 1])
            return CT_FAIL(ctx, CT_ERR_INTERNAL, "trainer: parameters out of order in the store");
    int64_t total = ct_params_numel(t->params), end = total, nb = 0;
    grad_bucket *b = NULL;
    for (int64_t k = n - 1; k >= 0; k--) {
        if (!b) {
            b = &t->buckets[nb++];
            memset(b, 0, sizeof *b);
        }
        b->start = t->param_start[k];
        b->n = end - b->start;
        b->n_params++;
        t->param_bucket[k] = nb - 1;
        if ((size_t)b->n * sizeof(float) >= (size_t)t->p.bucket_bytes) {
            end = b->start;
            b = NULL;
        }
    }
    /* the first bucket also takes what lies before the first tensor (nothing, normally) */
    t->buckets[nb - 1].n += t->buckets[nb - 1].start;
    t->buckets[nb - 1].start = 0;
    t->n_buckets = nb;
    return CT_OK;
}

/* The backward pass says a parameter's gradient is final: when it completes a bucket, that
 * bucket's all-reduce starts, and the ones in flight get a chance to progress. */
static void on_grad_ready(void *user, ct_tensor *param) {
    ct_trainer *t = user;
    int64_t off = (const float *)param->data - ct_params_values(t->params);
    int64_t lo = 0, hi = t->n_trainable - 1;
    if (off < 0 || off >= ct_params_numel(t->params)) return; /* not one of the store's */
    while (lo < hi) { /* the last tensor starting at or before off */
        int64_t mid = (lo + hi + 1) / 2;
        if (t->param_start[mid] <= off)
            lo = mid;
        else
            hi = mid - 1;
    }
    if (t->param_start[lo] != off) return;
    grad_bucket *b = &t->buckets[t->param_bucket[lo]];
    if (b->pending > 0) b->pending--;
    /* buckets start in index order only, as every rank must issue its reductions in the same
       order: a bucket completed early (or a rank whose graph skipped some parameters) waits
       for the ones before it */
    float *grads = ct_params_grads(t->params);
    while (t->bucket_status == CT_OK && t->next_bucket < t->n_buckets &&
           t->buckets[t->next_bucket].pending == 0) {
        grad_bucket *nb = &t->buckets[t->next_bucket++];
        t->bucket_status = ct_comm_iallreduce_sum_f32(t->comm, grads + nb->start, nb->n, &nb->req);
        nb->started = t->bucket_status == CT_OK;
    }
    for (int64_t i = 0; i < t->next_bucket && t->bucket_status == CT_OK; i++)
        if (t->buckets[i].started) t->bucket_status = ct_comm_test(t->comm, &t->buckets[i].req);
}

/* Arms the buckets for the backward pass of a window's last micro-batch. */
static void arm_buckets(ct_trainer *t) {
    for (int64_t i = 0; i < t->n_buckets; i++) {
        t->buckets[i].pending = t->buckets[i].n_params;
        t->buckets[i].started = false;
    }
    t->next_bucket = 0;
    t->bucket_status = CT_OK;
    ct_graph_set_grad_ready(t->g, on_grad_ready, t);
}

/* The gradient sum over ranks: the buckets the backward pass did not start (parameters it
 * did not reach) are started now, continuing in index order, then all are waited for. */
static ct_status reduce_grads(ct_trainer *t) {
    ct_graph_set_grad_ready(t->g, NULL, NULL);
    float *grads = ct_params_grads(t->params);
    ct_status s = t->bucket_status;
    for (; t->next_bucket < t->n_buckets && s == CT_OK; t->next_bucket++) {
        grad_bucket *b = &t->buckets[t->next_bucket];
        s = ct_comm_iallreduce_sum_f32(t->comm, grads + b->start, b->n, &b->req);
        b->started = s == CT_OK;
    }
    for (int64_t i = 0; i < t->n_buckets; i++) { /* every started one completes, failure or not */
        ct_status w = ct_comm_wait(t->comm, &t->buckets[i].req);
        if (s == CT_OK) s = w;
        t->buckets[i].started = false;
    }
    return s;
}

/* ---- one optimizer step at the end of a window ---- */

/* The sharded update's reduction (shard.c): this rank's part of the mean gradient, and the
 * decisions every rank must share in one all-reduce: a non-finite loss or gradient on any rank,
 * an interrupt, a callback's stop and, with norm clipping, the global norm (which then scales
 * this rank's part, as clip_grad_norm would scale the whole). */
static ct_status reduce_sharded(ct_trainer *t, bool *loss_ok, bool *grads_ok) {
    bool clip_norm = t->p.grad_clip_norm > 0.0f, ok = true;
    double sumsq = 0.0;
    struct timespec a, b;
    (void)clock_gettime(CLOCK_MONOTONIC, &a);
    CT_TRY(ct_train_shard_reduce(t->shard, t->p.check_grads || clip_norm ? &ok : NULL,
                                 clip_norm ? &sumsq : NULL));
    double flags[5] = {*loss_ok ? 0.0 : 1.0, t->interrupt ? 1.0 : 0.0, t->stop_asked ? 1.0 : 0.0,
                       ok ? 0.0 : 1.0, sumsq};
    CT_TRY(ct_comm_allreduce_sum_f64(t->comm, flags, 5));
    (void)clock_gettime(CLOCK_MONOTONIC, &b);
    t->comm_seconds += (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) * 1e-9;
    *loss_ok = flags[0] == 0.0;
    t->interrupt = flags[1] != 0.0;
    if (flags[2] != 0.0) t->stop = true;
    t->stop_asked = false;
    *grads_ok = flags[3] == 0.0;
    if (clip_norm) {
        const double total = sqrt(flags[4]);
        t->grad_norm = (float)total;
        const double coef = (double)t->p.grad_clip_norm / (total + 1e-6);
        if (*grads_ok && isfinite(t->grad_norm) && coef < 1.0)
            ct_train_shard_scale(t->shard, (float)coef);
    }
    return CT_OK;
}

static ct_status finish_window(ct_trainer *t, bool loss_ok) {
    ct_ctx *ctx = t->ctx;
    float *grads = ct_params_grads(t->params);
    int64_t n = ct_params_numel(t->params);
    /* Gradients are checked before anything is applied: the clipping norm shows a non-finite
     * gradient for free (clip_grad_norm leaves them untouched then); otherwise a scan, which
     * with several ranks is the pass that divides the sum by the world size */
    bool grads_ok = true, scanned = false;
    bool clip_norm = t->p.grad_clip_norm > 0.0f;
    /* one process, nothing to do between the check and the update (no clipping, no on_grads
       handler) and a finite loss: the optimizer checks the gradients as part of the update,
       and the policy decides after it. Under skip the update must leave no trace of a
       non-finite gradient, so every gradient is tested before anything is written
       (ct_optim_step_if_finite); under stop and rollback a non-finite update is never kept
       (the run ends, or the last good state is put back), so the update tests each gradient
       as it reads it (ct_optim_step_checked), a test that costs next to nothing where a scan
       before it costs a pass over every gradient (bench/bench_trainer.c) */
    bool fused = ct_comm_world_size(t->comm) == 1 && t->p.check_grads && !clip_norm &&
                 !(t->p.grad_clip_value > 0.0f) && !t->p.callbacks.on_grads && loss_ok;
    bool applied = false;
    if (t->shard) {
        CT_TRY(reduce_sharded(t, &loss_ok, &grads_ok));
        scanned = true;
    } else if (ct_comm_world_size(t->comm) > 1) {
        struct timespec a, b;
        (void)clock_gettime(CLOCK_MONOTONIC, &a);
        if (t->n_buckets)
            CT_TRY(reduce_grads(t));
        else
            CT_TRY(ct_comm_allreduce_sum_f32(t->comm, grads, n));
        (void)clock_gettime(CLOCK_MONOTONIC, &b);
        t->comm_seconds += (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) * 1e-9;
        scanned = t->p.check_grads && !clip_norm;
        ct_train_divide_check(ctx, grads, n, (float)ct_comm_world_size(t->comm),
                              scanned ? &grads_ok : NULL);
        /* every rank takes the same decisions: a non-finite loss on any rank is everyone's,
           and so is an interrupt (a signal reaches the ranks at different batches) */
        float flags[3] = {loss_ok ? 0.0f : 1.0f, t->interrupt ? 1.0f : 0.0f,
                          t->stop_asked ? 1.0f : 0.0f};
        CT_TRY(ct_comm_allreduce_sum_f32(t->comm, flags, 3));
        loss_ok = flags[0] == 0.0f;
        t->interrupt = flags[1] != 0.0f;
        if (flags[2] != 0.0f) t->stop = true; /* a callback's CT_STOP on any rank */
        t->stop_asked = false;
    }
    if (clip_norm && t->shard) {
        grads_ok = grads_ok && isfinite(t->grad_norm); /* the norm, from reduce_sharded */
    } else if (clip_norm) {
        float norm;
        CT_TRY(ct_optim_clip_grad_norm(ctx, t->params, t->p.grad_clip_norm, &norm));
        t->grad_norm = norm;
        grads_ok = isfinite(norm);
    } else if (fused && t->nf.mode == CT_NONFINITE_MODE_SKIP) {
        applied = ct_optim_step_if_finite(t->opt);
        grads_ok = applied;
    } else if (fused) {
        grads_ok = ct_optim_step_checked(t->opt); /* undone by the policy when false */
        applied = true;
    } else if (t->p.check_grads && !scanned) {
        CT_TRY(ct_nonfinite_check(ctx, grads, n, &grads_ok));
    }
    ct_nonfinite_action action;
    CT_TRY(ct_nonfinite_decide(ctx, &t->nf, loss_ok, grads_ok, &action));
    switch (action) {
    case CT_NONFINITE_ACTION_CONTINUE:
        break;
    case CT_NONFINITE_ACTION_SKIP_UPDATE:
        if (t->shard)
            CT_TRY(ct_train_shard_settle(t->shard)); /* before clearing what others read */
        ct_params_zero_grad(t->params);
        t->skipped++;
        return CT_OK;
    case CT_NONFINITE_ACTION_ROLLBACK: {
        if (t->shard) CT_TRY(ct_train_shard_settle(t->shard));
        ct_nonfinite_state keep;
        ct_nonfinite_get_state(&t->nf, &keep); /* the count survives the rollback */
        snapshot(t, false);
        t->step = t->snap_step;
        if (t->last_saved_step > t->replace_upto) /* re-made steps replace their first saves */
            t->replace_upto = t->last_saved_step;
        reset_window(t); /* the log window restarts with the restored state */
        ct_params_zero_grad(t->params);
        (void)ct_nonfinite_set_state(ctx, &t->nf, &keep);
        ct_log(ctx, CT_LOG_WARN, "non-finite values: rolled back to step %lld (rollback %lld)",
               (long long)t->step, (long long)keep.rollbacks);
        return CT_OK;
    }
    case CT_NONFINITE_ACTION_STOP:
    case CT_NONFINITE_ACTION_COUNT:
        return ct_err_wrap(ctx, "step %lld, epoch %lld", (long long)t->step + 1,
                           (long long)t->epoch + 1);
    }
    if (t->p.grad_clip_value > 0.0f && t->shard)
        ct_train_shard_clamp(t->shard, t->p.grad_clip_value); /* the others' parts are theirs */
    else if (t->p.grad_clip_value > 0.0f)
        CT_TRY(ct_optim_clip_grad_value(ctx, t->params, t->p.grad_clip_value));
    if (t->p.callbacks.on_grads) CT_TRY(event(t, t->p.callbacks.on_grads(t->p.callbacks.user, t)));
    if (t->shard) {
        int64_t lo, hi;
        ct_train_shard_bounds(t->shard, ct_comm_rank(t->comm), &lo, &hi);
        ct_optim_step_range(t->opt, lo, hi);
        t->moments_whole = false;
        struct timespec a, b;
        (void)clock_gettime(CLOCK_MONOTONIC, &a);
        CT_TRY(ct_train_shard_gather(t->shard, ct_params_values(t->params)));
        (void)clock_gettime(CLOCK_MONOTONIC, &b);
        t->comm_seconds += (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) * 1e-9;
    } else if (!applied) {
        ct_optim_step(t->opt);
    }
    if (!ct_optim_zeroes_grads(t->opt)) ct_params_zero_grad(t->params);
    t->step++;
    if (t->sched && !t->p.schedule_per_epoch && !ct_schedule_needs_metric(t->sched))
        CT_TRY(ct_optim_set_lr(t->opt, ct_schedule_step(t->sched)));
    if (t->ema) CT_TRY(ct_ema_update(t->ema, t->step, NULL));
    return CT_OK;
}

static ct_status log_window(ct_trainer *t) {
    if (ct_comm_world_size(t->comm) > 1) { /* the mean over every rank's finite losses */
        double sums[2 + 2 * CT_LOSS_MAX_PARTS];
        CT_TRY(window_sums(t, sums));
        t->window_loss = sums[0];
        t->window_count = (int64_t)sums[1];
        for (int64_t k = 0; k < t->n_parts; k++) {
            t->part_sum[k] = sums[2 + 2 * k];
            t->part_count[k] = (int64_t)sums[3 + 2 * k];
        }
    }
    if (t->window_count == 0) { /* nothing finite to report; parts too start again */
        reset_window(t);
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
    for (int64_t p = 0; p < t->n_parts; p++)
        if (t->part_count[p] > 0) {
            t->train_values[k].name = t->part_log[p];
            t->train_values[k++].value = t->part_sum[p] / (double)t->part_count[p];
        }
    t->n_train_values = k;
    reset_window(t);
    if (t->p.callbacks.on_log)
        return event(t, t->p.callbacks.on_log(t->p.callbacks.user, t, t->train_values, k));
    return CT_OK;
}

/* ---- the loop ---- */

/*
 * The rest of the current epoch of training data. Batches are placed in accumulation windows
 * by their number within the epoch (ct_batch.number), so a loader restored mid-epoch resumes
 * the same windows. *completed: the epoch (or its limit) was reached; a run stopped earlier
 * (max_steps, dev_run, a callback) leaves the loader where it stopped.
 */
static ct_status train_epoch(ct_trainer *t, bool *completed) {
    ct_ctx *ctx = t->ctx;
    ct_graph *g = t->g;
    const ct_trainer_callbacks *cb = &t->p.callbacks;
    int64_t total = ct_loader_batches_per_epoch(t->train), bpe = total;
    if (t->p.limit_train_batches && t->p.limit_train_batches < bpe) bpe = t->p.limit_train_batches;
    if (t->p.dev_run && bpe > 1) bpe = 1;
    bool window_ok = true;
    *completed = false;
    ct_batch b;
    ct_status s;
    while ((s = ct_loader_next(t->train, &b)) == CT_OK) {
        if (b.size == 0) { /* the epoch's end marker */
            *completed = true;
            break;
        }
        int64_t i = b.number;
        /* for the collective timeout's message: the step being made, as failures name it */
        ct_comm_set_step(t->comm, t->step + 1, "training");
        if (i >= bpe) { /* past the limit: the rest of this epoch is not read */
            ct_loader_state st = ct_loader_get_state(t->train);
            st.epoch++;
            st.next_batch = 0;
            CT_TRY(ct_loader_set_state(t->train, &st));
            *completed = true;
            break;
        }
        ct_accum_pos pos;
        CT_TRY(ct_accum_window(ctx, bpe, t->p.accum_steps, i, &pos));
        if (i == 0 && cb->on_epoch_start)
            CT_TRY(event(t, cb->on_epoch_start(cb->user, t, t->epoch + 1)));
        if (cb->on_iteration_start) CT_TRY(event(t, cb->on_iteration_start(cb->user, t, i)));
        ct_graph_reset(g);
        ct_tensor *out, *y;
        int64_t items;
        ct_tensor *loss = forward_loss(t, &b, "train", &out, &y, &items);
        if (!loss) return failure(t, "training");
        float lv = ((const float *)loss->data)[0];
        bool finite = isfinite(lv);
        window_ok = window_ok && finite;
        if (finite) {
            t->window_loss += (double)lv;
            t->window_count++;
        }
        for (int64_t k = 0; k < t->n_parts; k++) {
            float pv = t->parts[k] ? ((const float *)t->parts[k]->data)[0] : (float)NAN;
            if (isfinite(pv)) {
                t->part_sum[k] += (double)pv;
                t->part_count[k]++;
            }
        }
        /* each micro-batch weighs 1/length of the window: a short last window is not
         * under-weighted, and the reported loss stays the unscaled mean */
        ct_tensor *scaled = pos.length > 1 ? ct_op_scale(g, loss, 1.0f / (float)pos.length) : loss;
        if (pos.last && t->n_buckets) arm_buckets(t);
        if (ct_graph_backward(g, scaled) != CT_OK) {
            /* no waiting for reductions in flight: the other ranks may never join them; the
               failed run ends the job (the command line aborts it) */
            ct_graph_set_grad_ready(g, NULL, NULL);
            return failure(t, "training backward");
        }
        if (t->p.callbacks.on_batch) {
            ct_status bs = t->p.callbacks.on_batch(t->p.callbacks.user, t, "train", i + 1, bpe,
                                                   finite ? (double)lv : (double)NAN);
            if (bs == CT_STOP) {
                t->interrupt = true; /* at the end of this step, after its evaluations */
            } else if (bs != CT_OK) {
                ct_graph_set_grad_ready(g, NULL, NULL); /* as for a failed backward pass */
                return bs;
            }
        }
        double reported = finite ? (double)lv : (double)NAN;
        if (!pos.last) {
            if (cb->on_iteration_end)
                CT_TRY(event(t, cb->on_iteration_end(cb->user, t, i, reported)));
            continue;
        }
        int64_t before = t->step;
        CT_TRY(finish_window(t, window_ok));
        window_ok = true;
        if (t->step > before) { /* a skipped or rolled-back step triggers nothing */
            if (t->step % t->p.steps_per_loop == 0) CT_TRY(log_window(t));
            CT_TRY(evaluate_due(t, false, 0));
            if (t->p.save_every_steps && t->step % t->p.save_every_steps == 0) t->save_due = true;
            /* the epoch's last step (or the run's) owes its checkpoint until fit has run the
             * evaluations that follow it */
            bool last = i + 1 >= bpe || t->stop || t->interrupt ||
                        (t->p.max_steps && t->step >= t->p.max_steps) || t->p.dev_run;
            if (!last) CT_TRY(flush_checkpoint(t));
        }
        if (cb->on_iteration_end) CT_TRY(event(t, cb->on_iteration_end(cb->user, t, i, reported)));
        if (i + 1 >= bpe && bpe < total) { /* the limit is reached: skip to the next epoch */
            ct_loader_state st = ct_loader_get_state(t->train);
            st.epoch++;
            st.next_batch = 0;
            CT_TRY(ct_loader_set_state(t->train, &st));
            *completed = true;
            break;
        }
        if (t->stop || t->interrupt || (t->p.max_steps && t->step >= t->p.max_steps) ||
            t->p.dev_run) {
            *completed = i + 1 >= bpe;
            if (*completed) { /* the marker comes next: take it now so the epoch is closed */
                CT_TRY(ct_loader_next(t->train, &b));
            }
            break;
        }
    }
    if (s != CT_OK) return ct_err_wrap(ctx, "reading training data");
    ct_params_zero_grad(t->params); /* a window cut by max_steps leaves nothing behind */
    return CT_OK;
}

static ct_status fit(ct_trainer *t);

/* The sharded update's window for one fit (collective). Under `auto` a window that cannot be
 * made on some rank is not an error: the ranks agree on that and all-reduce instead. */
static ct_status open_shard(ct_trainer *t) {
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
static void close_shard(ct_trainer *t, bool collective) {
    if (!t->shard) return;
    if (ct_params_grads(t->params) == ct_train_shard_grads(t->shard))
        (void)ct_params_bind_grads(t->params, NULL);
    ct_train_shard_destroy(t->shard, collective);
    t->shard = NULL;
}

ct_status ct_trainer_fit(ct_trainer *t) {
    ct_status s = open_shard(t);
    if (s == CT_OK) s = fit(t);
    close_shard(t, s == CT_OK);
    if (s != CT_OK && t->p.callbacks.on_exception)
        t->p.callbacks.on_exception(t->p.callbacks.user, t, s);
    return s;
}

/* Whether any rank was interrupted (every rank then ends at the same point). */
static ct_status agree_interrupt(ct_trainer *t) {
    if (ct_comm_world_size(t->comm) < 2) return CT_OK;
    float flags[2] = {t->interrupt ? 1.0f : 0.0f, t->stop_asked ? 1.0f : 0.0f};
    CT_TRY(ct_comm_allreduce_sum_f32(t->comm, flags, 2));
    t->interrupt = flags[0] != 0.0f;
    if (flags[1] != 0.0f) t->stop = true;
    t->stop_asked = false;
    return CT_OK;
}

static ct_status fit(ct_trainer *t) {
    ct_ctx *ctx = t->ctx;
    const ct_trainer_callbacks *cb = &t->p.callbacks;
    t->stop = t->has_es && t->es.state.stopped; /* a resumed early-stopped run stays stopped */
    t->interrupt = false;
    ct_comm_set_step(t->comm, t->step, "start of fit");
    CT_TRY(sync_replicas(t, true));
    if (cb->on_fit_start) CT_TRY(event(t, cb->on_fit_start(cb->user, t)));
    CT_TRY(agree_interrupt(t));
    if (t->snap) snapshot(t, true);
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
            if (!t->interrupt) CT_TRY(log_window(t));
            /* an interrupt leaves the epoch's evaluations to the resumed run, at its real end */
            if (!t->stop && !t->interrupt) CT_TRY(evaluate_due(t, true, t->epoch + 1));
            break;
        }
        t->epoch++;
        if (t->sched && t->p.schedule_per_epoch && !ct_schedule_needs_metric(t->sched))
            CT_TRY(ct_optim_set_lr(t->opt, ct_schedule_step(t->sched)));
        CT_TRY(log_window(t));
        CT_TRY(evaluate_due(t, true, t->epoch));
        if (cb->on_epoch_end) CT_TRY(event(t, cb->on_epoch_end(cb->user, t, t->epoch)));
        CT_TRY(agree_interrupt(t));     /* the epoch's stops, before its checkpoint */
        if (t->snap) snapshot(t, true); /* the epoch ended finite: the new last good state */
        if (t->p.save_every_epochs && t->epoch % t->p.save_every_epochs == 0) t->save_due = true;
        CT_TRY(flush_checkpoint(t));
        if (t->p.dev_run || t->interrupt) break;
    }
    /* the final state, so `latest` is where this run ended (a failed run saves nothing) */
    ct_comm_set_step(t->comm, t->step, "end of fit");
    t->save_due = true;
    CT_TRY(flush_checkpoint(t));
    CT_TRY(share_moments(t)); /* the optimizer's state whole after fit, saved or not */
    if (cb->on_fit_end) CT_TRY(event(t, cb->on_fit_end(cb->user, t)));
    (void)ctx;
    return CT_OK;
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

ct_status ct_trainer_create(ct_ctx *ctx,
                            ct_model *model,
                            ct_params *params,
                            ct_optim *opt,
                            ct_schedule *schedule,
                            ct_comm *comm,
                            const ct_task *task,
                            ct_loader *train,
                            const ct_eval_engine *engines,
                            int64_t n_engines,
                            const ct_trainer_params *params_in,
                            ct_trainer **out) {
    *out = NULL;
    ct_trainer_params p = params_in ? *params_in : ct_trainer_default_params();
    if (!model || !params || !opt || !train)
        return CT_FAIL(ctx, CT_ERR_INVALID_ARG,
                       "trainer: model, params, optimizer and training "
                       "loader are required");
    if (p.max_epochs < 0 || p.max_steps < 0 || (p.max_epochs == 0 && p.max_steps == 0))
        return CT_FAIL(ctx, CT_ERR_CONFIG,
                       "trainer: max_epochs (%lld) or max_steps (%lld) must limit the run",
                       (long long)p.max_epochs, (long long)p.max_steps);
    if (p.accum_steps < 1 || p.steps_per_loop < 1 || p.limit_train_batches < 0 ||
        p.limit_eval_batches < 0)
        return CT_FAIL(ctx, CT_ERR_CONFIG,
                       "trainer: accum_steps and steps_per_loop must be >= 1, limits >= 0");
    if (p.save_every_epochs < 0 || p.save_every_steps < 0 || p.keep < 0)
        return CT_FAIL(ctx, CT_ERR_CONFIG,
                       "trainer: save_every_epochs, save_every_steps and keep must be >= 0");
    if (!(p.grad_clip_norm >= 0.0f) || !(p.grad_clip_value >= 0.0f))
        return CT_FAIL(ctx, CT_ERR_CONFIG, "trainer: clipping thresholds must be >= 0");
    if (p.precision != CT_F32 && p.precision != CT_BF16)
        return CT_FAIL(ctx, CT_ERR_CONFIG, "trainer: precision must be f32 or bf16, got %s",
                       ct_dtype_name(p.precision));
    if (task && ((int)task->kind < 0 || task->kind >= CT_TASK_KIND_COUNT))
        return CT_FAIL(ctx, CT_ERR_CONFIG, "trainer: task kind %d is unknown", (int)task->kind);
    if (n_engines < 0 || (n_engines > 0 && !engines))
        return CT_FAIL(ctx, CT_ERR_CONFIG, "trainer: %lld engines at %p", (long long)n_engines,
                       (const void *)engines);
    for (int64_t i = 0; i < n_engines; i++) {
        const ct_eval_engine *e = &engines[i];
        if (e->n_metrics < 0 || (e->n_metrics > 0 && !e->metrics))
            return CT_FAIL(ctx, CT_ERR_CONFIG, "trainer: engine '%s': %lld metric specs at %p",
                           e->key ? e->key : "", (long long)e->n_metrics, (const void *)e->metrics);
        if (!e->key || !e->key[0] || strchr(e->key, '/') || !strcmp(e->key, "train") || !e->loader)
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
    ct_trainer *t = ct_alloc(ctx, sizeof *t);
    if (!t) return CT_FAIL(ctx, CT_ERR_OOM, "allocating a trainer");
    memset(t, 0, sizeof *t);
    t->ctx = ctx;
    t->last_saved_step = -1;
    t->replace_upto = -1;
    t->resumed_step = -1;
    t->model = model;
    t->params = params;
    t->opt = opt;
    t->sched = schedule;
    t->train = train;
    t->p = p;
    if (task) t->task = *task;
    int64_t oshape[CT_MAX_DIMS];
    int32_t ond = ct_model_output_shape(model, oshape);
    t->n_classes = t->task.kind != CT_TASK_REGRESSION && ond > 0 ? oshape[ond - 1] : 0;
    ct_status s = CT_OK;
    ct_graph_params gp = ct_graph_default_params();
    gp.seed = p.seed;
    if (comm) {
        t->comm = comm;
    } else {
        s = ct_comm_create_single(ctx, &t->comm);
        t->own_comm = s == CT_OK;
    }
    if (s == CT_OK) s = ct_graph_create(ctx, &gp, &t->g);
    if (s == CT_OK) s = ct_graph_set_autocast(t->g, p.precision);
    if (s == CT_OK) *ct_graph_rng(t->g) = rank_stream(*ct_graph_rng(t->g), ct_comm_rank(t->comm));
    if (s == CT_OK && p.monitor) {
        s = ct_monitor_init(ctx, &t->monitor, p.monitor);
        t->has_monitor = s == CT_OK;
    }
    if (s == CT_OK && p.early_stopping) {
        s = ct_early_stop_init(ctx, &t->es, p.early_stopping);
        t->has_es = s == CT_OK;
    }
    if (s == CT_OK && p.ema) s = ct_ema_create(ctx, params, p.ema, &t->ema);
    if (s == CT_OK && p.ema && p.checkpoint_dir) s = mirror_store(ctx, params, &t->ema_store);
    if (s == CT_OK) s = ct_nonfinite_init(ctx, &t->nf, p.nonfinite);
    if (s == CT_OK && t->nf.mode == CT_NONFINITE_MODE_ROLLBACK) {
        t->snap_bytes = store_bytes(params) + (size_t)ct_optim_buffer_count(opt) *
                                                  (size_t)ct_params_numel(params) * sizeof(float);
        t->snap = ct_alloc(ctx, t->snap_bytes ? t->snap_bytes : 1);
        if (!t->snap) s = CT_FAIL(ctx, CT_ERR_OOM, "trainer: allocating the rollback snapshot");
    }
    if (s == CT_OK) s = parse_parts(t);
    ct_option parts_option = {"components", t->part_text};
    if (s == CT_OK && n_engines > 0) {
        t->engines = ct_alloc(ctx, (size_t)n_engines * sizeof *t->engines);
        if (!t->engines)
            s = CT_FAIL(ctx, CT_ERR_OOM, "trainer: allocating engines");
        else
            memset(t->engines, 0, (size_t)n_engines * sizeof *t->engines);
        if (t->engines) t->engines_cap = n_engines;
    }
    for (int64_t i = 0; s == CT_OK && i < n_engines; i++) {
        engine_rt *en = &t->engines[i];
        en->e = engines[i];
        en->last_step = -1;
        t->n_engines = i + 1;
        /* the engine's metrics plus its loss */
        int64_t nm = engines[i].n_metrics;
        const ct_metric_spec *given = engines[i].metrics;
        if (nm == 0) given = task_default_metrics(t->task.kind, &nm);
        ct_metric_spec *specs = ct_alloc(ctx, (size_t)(nm + 1) * sizeof *specs);
        if (!specs) {
            s = CT_FAIL(ctx, CT_ERR_OOM, "trainer: engine '%s': metric specs", engines[i].key);
            break;
        }
        if (nm) memcpy(specs, given, (size_t)nm * sizeof *specs);
        memset(&specs[nm], 0, sizeof *specs);
        specs[nm].type = "loss";
        if (t->n_parts) {
            specs[nm].opts.items = &parts_option;
            specs[nm].opts.count = 1;
            specs[nm].opts.where = "trainer: the task's loss_components";
        }
        s = ct_metrics_create(ctx, engines[i].key, t->n_classes, specs, nm + 1, &en->m);
        ct_free(ctx, specs, (size_t)(nm + 1) * sizeof *specs);
        if (s != CT_OK) s = ct_err_wrap(ctx, "trainer: engine '%s'", engines[i].key);
    }
    /* the monitored metrics must be values of an engine, or the policies would never act */
    if (schedule && ct_schedule_needs_metric(schedule))
        t->sched_metric = p.schedule_metric ? p.schedule_metric
                          : t->has_monitor  ? t->monitor.metric
                                            : "valid/loss";
    const char *watched[3] = {t->has_monitor ? t->monitor.metric : NULL,
                              t->has_es ? t->es.monitor.metric : NULL, t->sched_metric};
    for (int w = 0; s == CT_OK && w < 3; w++) {
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
            s = CT_FAIL(ctx, CT_ERR_CONFIG,
                        "trainer: %s watches '%s', which no evaluation engine computes",
                        w == 0   ? "the monitor"
                        : w == 1 ? "early stopping"
                                 : "the metric-driven schedule",
                        watched[w]);
    }
    if (s == CT_OK && p.bucket_bytes < 0 && p.bucket_bytes != CT_BUCKET_BYTES_AUTO)
        s = CT_FAIL(ctx, CT_ERR_CONFIG,
                    "trainer: bucket_bytes %lld is negative (and not CT_BUCKET_BYTES_AUTO)",
                    (long long)p.bucket_bytes);
    if (s == CT_OK && ((int)p.shard_optimizer < 0 || p.shard_optimizer >= CT_UPDATE_SHARDING_COUNT))
        s = CT_FAIL(ctx, CT_ERR_CONFIG, "trainer: shard_optimizer %d is not a ct_update_sharding",
                    (int)p.shard_optimizer);
    if (s == CT_OK && ct_comm_world_size(t->comm) > 1 &&
        p.shard_optimizer != CT_UPDATE_SHARDING_NEVER) {
        bool can =
            ct_comm_can_share(t->comm) && !p.callbacks.on_grads && ct_params_numel(params) > 0;
        if (p.shard_optimizer == CT_UPDATE_SHARDING_ALWAYS && !can)
            s = CT_FAIL(ctx, CT_ERR_CONFIG,
                        "trainer: shard_optimizer is 'always', but %s (docs/distributed.md)",
                        p.callbacks.on_grads ? "an on_grads handler (gradient histograms: "
                                               "logging.histogram_every with tensorboard) reads "
                                               "the whole gradient, which a sharded update never "
                                               "assembles"
                        : ct_params_numel(params) == 0 ? "the model has no trainable parameter"
                        : ct_comm_local_size(t->comm) != ct_comm_world_size(t->comm)
                            ? "the ranks are not all on one machine"
                            : "the communicator has no shared memory");
        else if (can && (p.shard_optimizer == CT_UPDATE_SHARDING_ALWAYS ||
                         p.bucket_bytes == CT_BUCKET_BYTES_AUTO))
            t->want_shard = true; /* the window is each fit's (open_shard) */
        if (t->want_shard) t->p.bucket_bytes = p.bucket_bytes = 0; /* no buckets to arm */
    }
    if (s == CT_OK && p.bucket_bytes == CT_BUCKET_BYTES_AUTO) {
        bool one_machine = ct_comm_local_size(t->comm) == ct_comm_world_size(t->comm);
        t->p.bucket_bytes = p.bucket_bytes = one_machine ? 0 : (int64_t)1 << 20;
    }
    if (s == CT_OK && p.bucket_bytes > 0 && ct_comm_world_size(t->comm) > 1) s = build_buckets(t);
    if (s == CT_OK && ct_comm_world_size(t->comm) > 1) {
        t->n_rank_pos = ct_comm_world_size(t->comm);
        t->rank_pos = ct_alloc(ctx, (size_t)t->n_rank_pos * 4 * sizeof(uint64_t));
        if (!t->rank_pos) s = CT_FAIL(ctx, CT_ERR_OOM, "trainer: rank positions");
    }
    if (s != CT_OK) {
        ct_trainer_destroy(t);
        return s;
    }
    if (schedule) (void)ct_optim_set_lr(opt, ct_schedule_lr(schedule));
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
    if (t->own_comm) ct_comm_destroy(t->comm);
    ct_free(ctx, t->part_text, t->part_text_size);
    ct_free(ctx, t->rank_pos, (size_t)t->n_rank_pos * 4 * sizeof(uint64_t));
    ct_free(ctx, t->param_start, (size_t)t->n_trainable * sizeof(int64_t));
    ct_free(ctx, t->param_bucket, (size_t)t->n_trainable * sizeof(int64_t));
    ct_free(ctx, t->buckets, (size_t)t->n_trainable * sizeof(grad_bucket));
    ct_free(ctx, t->snap, t->snap_bytes ? t->snap_bytes : 1);
    ct_free(ctx, t, sizeof *t);
}

int64_t ct_trainer_step(const ct_trainer *t) {
    return t->step;
}

int64_t ct_trainer_epoch(const ct_trainer *t) {
    return t->epoch;
}

int64_t ct_trainer_buckets(const ct_trainer *t) {
    return t->n_buckets;
}

bool ct_trainer_sharded(const ct_trainer *t) {
    return t->want_shard;
}

double ct_trainer_comm_seconds(const ct_trainer *t) {
    return t->comm_seconds;
}

bool ct_trainer_interrupted(const ct_trainer *t) {
    return t->interrupt;
}

int64_t ct_trainer_skipped_steps(const ct_trainer *t) {
    return t->skipped;
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
