/*
 * state.c - the trainer's checkpoints: the state.json part that a resume needs (step, loader
 * positions, dropout streams, schedule, policies, log window), the save owed at a step's end,
 * and ct_trainer_resume.
 *
 * Only rank 0 writes; every rank reads. A resume parses the whole state before applying any of
 * it. The EMA store (ema_store) is the trainer's; everything else here is borrowed from it.
 */
#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctrain/checkpoint.h"
#include "train/train_internal.h"

/* A new allocated store with the same tensors (names, shapes, kinds) as src. */
ct_status ct_train_mirror_store(ct_ctx *ctx, const ct_params *src, ct_params **out) {
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
ct_status ct_train_share_moments(ct_trainer *t) {
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
        CT_TRY(ct_train_event(t, t->p.callbacks.on_save(t->p.callbacks.user, t, best)));
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

/* Called only when every evaluation of the step has run (the epoch's end ones included), so the
 * saved monitor and early-stopping states are those an uninterrupted run has at that point, and
 * a step that is both due and best is one checkpoint that `best` points at. Only rank 0 writes:
 * every rank holds the same weights and optimizer state. */
ct_status ct_train_flush_checkpoint(ct_trainer *t) {
    bool best = t->save_best, due = t->save_due;
    t->save_best = t->save_due = false;
    if (!t->p.checkpoint_dir || (!best && !due) || t->last_saved_step == t->step) return CT_OK;
    ct_comm_set_step(t->comm, t->step, "checkpoint"); /* the others wait while rank 0 writes */
    ct_status s = CT_OK;
    CT_TRY(ct_train_window_sums(t, t->saved_window));
    if (t->rank_pos) CT_TRY(gather_positions(t));
    CT_TRY(ct_train_share_moments(t));
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
ct_rng ct_train_rank_stream(ct_rng base, int64_t rank) {
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
    ct_rng own_rng = bad ? rng : ct_train_rank_stream(rng, ct_comm_rank(t->comm));
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
    ct_train_reset_window(t);
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
