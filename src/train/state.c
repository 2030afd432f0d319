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

/* A new allocated store with the same tensors (names, shapes, kinds) and aliases as src. */
ct_status ct_train_mirror_store(ct_ctx *ctx, const ct_params *src, ct_params **out) {
    ct_params *p;
    CT_TRY(ct_params_create(ctx, &p));
    ct_status s = CT_OK;
    for (int64_t i = 0; s == CT_OK && i < ct_params_count(src); i++) {
        const ct_tensor *a = ct_params_at(src, i);
        ct_tensor *b;
        s = ct_params_add(p, a->name, a->dtype, a->ndim, a->shape, ct_params_kind_at(src, i), &b);
    }
    for (int64_t i = 0; s == CT_OK && i < ct_params_alias_count(src); i++) {
        ct_tensor *t;
        const char *alias = ct_params_alias_at(src, i, &t);
        s = ct_params_alias(p, alias, t->name);
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

/* Every rank's own position, as rank 0 gathered them (gather_positions). */
static json_t *ranks_json(const ct_trainer *t) {
    json_t *ranks = json_array();
    int bad = !ranks;
    for (int64_t k = 0; ranks && k < t->n_rank_pos; k++) {
        const uint64_t *q = t->rank_pos + 4 * k;
        bad |= json_array_append_new(ranks, json_pack("{s:{s:I, s:I}, s:{s:o, s:o}}", "loader",
                                                      "epoch", (json_int_t)q[0], "next_batch",
                                                      (json_int_t)q[1], "dropout_rng", "stream",
                                                      u64_json(q[2]), "counter", u64_json(q[3])));
    }
    if (bad) json_decref(ranks);
    return bad ? NULL : ranks;
}

static json_t *schedule_json(const ct_schedule *sched) {
    ct_schedule_state ss;
    ct_schedule_get_state(sched, &ss);
    return json_pack("{s:I, s:o, s:I, s:I, s:o}", "steps", (json_int_t)ss.steps, "best",
                     f64_json(ss.best), "bad_epochs", (json_int_t)ss.bad_epochs, "cooldown_left",
                     (json_int_t)ss.cooldown_left, "lr", f64_json(ss.lr));
}

/* Evaluation loaders advance an epoch per evaluation: their shuffles and transforms depend on
 * it. */
static json_t *engines_json(const ct_trainer *t) {
    json_t *eng = json_object();
    int bad = !eng;
    for (int64_t i = 0; eng && i < t->n_engines; i++) {
        if (!t->engines[i].e.loader) continue; /* an engine of its own pass has no position */
        ct_loader_state es = ct_loader_get_state(t->engines[i].e.loader);
        bad |= json_object_set_new(eng, t->engines[i].e.key,
                                   json_pack("{s:I, s:I, s:o}", "epoch", (json_int_t)es.epoch,
                                             "next_batch", (json_int_t)es.next_batch, "seed",
                                             u64_json(es.seed)));
    }
    if (bad) json_decref(eng);
    return bad ? NULL : eng;
}

static json_t *early_stop_json(const ct_early_stop_state *es) {
    return json_pack("{s:o, s:I, s:I, s:b}", "monitor", monitor_json(&es->monitor), "evals",
                     (json_int_t)es->evals, "bad_evals", (json_int_t)es->bad_evals, "stopped",
                     (int)es->stopped);
}

static json_t *ema_json(const ct_ema *ema) {
    ct_ema_state em;
    ct_ema_get_state(ema, &em);
    return json_pack("{s:I, s:o}", "updates", (json_int_t)em.updates, "decay", f64_json(em.decay));
}

/* The log window's sums over every rank at the checkpoint (saved_window): a checkpoint between
 * two records, so the resumed run's first record averages the same steps as the uninterrupted
 * run's. */
static json_t *log_window_json(const ct_trainer *t) {
    json_t *parts = json_array();
    int bad = !parts;
    for (int64_t k = 0; parts && k < t->n_parts; k++)
        bad |= json_array_append_new(parts, json_pack("{s:o, s:I}", "sum",
                                                      f64_json(t->saved_window[2 + 2 * k]), "count",
                                                      (json_int_t)t->saved_window[3 + 2 * k]));
    if (bad) {
        json_decref(parts);
        return NULL;
    }
    return json_pack("{s:o, s:I, s:o}", "loss", f64_json(t->saved_window[0]), "count",
                     (json_int_t)t->saved_window[1], "parts", parts);
}

static json_t *nonfinite_json(const ct_nonfinite_state *nf) {
    return json_pack("{s:I, s:I, s:I}", "skipped", (json_int_t)nf->skipped, "consecutive_skipped",
                     (json_int_t)nf->consecutive_skipped, "rollbacks", (json_int_t)nf->rollbacks);
}

/* The spike detector's state: its window's values (oldest first) and counts. */
static json_t *spike_json(const ct_spike_detector *d) {
    const ct_spike_state *st = &d->state;
    json_t *values = json_array();
    int bad = !values;
    int64_t first = st->n_values < d->window ? 0 : st->next; /* the oldest slot */
    for (int64_t i = 0; !bad && i < st->n_values; i++)
        bad |= json_array_append_new(values, f64_json(st->values[(first + i) % d->window]));
    if (bad) {
        json_decref(values);
        return NULL;
    }
    return json_pack("{s:o, s:I, s:I, s:I, s:I, s:I, s:I}", "values", values, "seen",
                     (json_int_t)st->seen, "spikes", (json_int_t)st->spikes, "cooldown_left",
                     (json_int_t)st->cooldown_left, "skip_left", (json_int_t)st->skip_left,
                     "skipped_windows", (json_int_t)st->skipped_windows, "rollback_step",
                     (json_int_t)st->rollback_step);
}

/* The whole trainer state, NULL when out of memory. */
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
    json_t *tr = json_object_get(st, "trainer");
    int bad = json_object_set_new(json_object_get(st, "loader"), "sample",
                                  json_integer((json_int_t)ls.sample));
    if (t->p.fingerprint && t->p.fingerprint[0])
        bad |= json_object_set_new(tr, "fingerprint", json_string(t->p.fingerprint));
    bad |= json_object_set_new(
        tr, "world_size",
        json_integer((json_int_t)ct_comm_world_size(t->ps ? ct_train_ps_world(t) : t->comm)));
    if (t->record_marks[0] >= 0)
        bad |= json_object_set_new(
            tr, "records",
            json_pack("[I, I]", (json_int_t)t->record_marks[0], (json_int_t)t->record_marks[1]));
    if (t->rank_pos) bad |= json_object_set_new(st, "ranks", ranks_json(t));
    if (t->sched) bad |= json_object_set_new(st, "schedule", schedule_json(t->sched));
    if (t->has_monitor) bad |= json_object_set_new(st, "monitor", monitor_json(&t->monitor.state));
    bad |= json_object_set_new(st, "engines", engines_json(t));
    if (t->has_es) bad |= json_object_set_new(st, "early_stopping", early_stop_json(&t->es.state));
    if (t->ema) bad |= json_object_set_new(st, "ema", ema_json(t->ema));
    bad |= json_object_set_new(st, "log_window", log_window_json(t));
    bad |= json_object_set_new(st, "nonfinite", nonfinite_json(&t->nf.state));
    if (t->spike.mode != CT_SPIKE_MODE_NONE)
        bad |= json_object_set_new(st, "spike", spike_json(&t->spike));
    if (t->lsgd) bad |= json_object_set_new(st, "local_sgd", ct_train_lsgd_state(t));
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
    /* parameter servers: the servers have given rank 0 the others' (ct_train_ps_gather) */
    for (int64_t k = 0; k < t->n_rank_pos && !t->ps; k++)
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

/* Copies every tensor of src into dst, a store of the same layout (ct_train_mirror_store). */
static void copy_store(ct_params *dst, const ct_params *src) {
    for (int64_t i = 0; i < ct_params_count(src); i++) {
        const ct_tensor *a = ct_params_at(src, i);
        memcpy(ct_params_at(dst, i)->data, a->data, ct_tensor_nbytes(a));
    }
}

/* The checkpoint's file hook, for the trainer's on_save_file. */
static ct_status save_file_written(void *user, const char *file) {
    ct_trainer *t = user;
    return ct_train_event(t, t->p.callbacks.on_save_file(t->p.callbacks.user, t, file));
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
    if (t->p.callbacks.on_save_file) {
        sp.on_file = save_file_written;
        sp.on_file_user = t;
    }
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
    if (!t->p.checkpoint_dir || (!best && !due) || (t->last_saved_step == t->step && !t->ps))
        return CT_OK;
    if (t->ps) { /* the servers' state at one global step, which may be later than this one */
        CT_TRY(ct_train_ps_gather(t));
        if (t->last_saved_step == t->step) return CT_OK;
    }
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

static bool str_u64(const char *s, int base, uint64_t *v) {
    /* digits only: strtoull alone would take "-1", " 7" and "+7" */
    if (!s || !(base == 16 ? isxdigit((unsigned char)*s) : isdigit((unsigned char)*s)))
        return false;
    char *end;
    errno = 0;
    *v = (uint64_t)strtoull(s, &end, base);
    return *end == '\0' && errno != ERANGE;
}

static bool get_u64(const json_t *o, const char *k, int base, uint64_t *v) {
    return str_u64(json_string_value(json_object_get(o, k)), base, v);
}

/* A double written by f64_json. */
static bool f64_of(const json_t *x, double *v) {
    uint64_t bits;
    if (!str_u64(json_string_value(x), 16, &bits)) return false;
    memcpy(v, &bits, sizeof bits);
    return true;
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

/* A checkpoint's trainer state, parsed: what restore_state applies. */
typedef struct saved_state {
    int64_t world; /* the processes that wrote it; 0: a malformed count */
    int64_t step, epoch, skipped;
    int64_t records[2]; /* the caller's record marks; -1: none */
    ct_loader_state loader;
    ct_rng rng;     /* rank 0's dropout stream */
    ct_rng own_rng; /* this rank's */
    ct_nonfinite_state nf;
    ct_spike_state spike;
    ct_schedule_state sched;
    ct_monitor_state monitor;
    ct_early_stop_state es;
    ct_ema_state ema;
    double window[2 + 2 * CT_LOSS_MAX_PARTS]; /* the log window's sums, as ct_train_window_sums */
    const json_t *extra;                      /* the task's state */
} saved_state;

/* Whether the checkpoint was written by a run of this configuration (its fingerprint) and,
 * unless allow_world_size_change, of this number of processes; sv->world: that number. */
static ct_status
check_origin(const ct_trainer *t, const json_t *tr, const char *path, saved_state *sv) {
    const char *fp = json_string_value(json_object_get(tr, "fingerprint"));
    if (t->p.fingerprint && t->p.fingerprint[0] && fp && strcmp(fp, t->p.fingerprint) != 0)
        return CT_FAIL(t->ctx, CT_ERR_CONFIG,
                       "%s: written by a run of another configuration (fingerprint %s, this run's "
                       "%s): resume it with the configuration it was made with",
                       path, fp, t->p.fingerprint);
    int64_t world = ct_comm_world_size(t->comm);
    sv->world = 1; /* absent: one process */
    if (json_object_get(tr, "world_size") && !get_i64(tr, "world_size", &sv->world)) sv->world = 0;
    if (sv->world != world && sv->world > 0 && !t->p.allow_world_size_change)
        return CT_FAIL(t->ctx, CT_ERR_CONFIG,
                       "%s: written by a run of %lld process%s, and this run has %lld: resume it "
                       "with the same number of processes, or set "
                       "trainer.allow_world_size_change to keep the weights and optimizer state "
                       "and restart the epoch's data (docs/distributed.md)",
                       path, (long long)sv->world, sv->world == 1 ? "" : "es", (long long)world);
    return CT_OK;
}

/* The counters, the training loader's position, the dropout stream and the non-finite
 * policy's counts; NULL, or the name of the part that is missing or malformed. */
static const char *parse_progress(const json_t *st, saved_state *sv) {
    const json_t *tr = json_object_get(st, "trainer"), *lo = json_object_get(st, "loader"),
                 *rn = json_object_get(st, "dropout_rng"), *nf = json_object_get(st, "nonfinite");
    if (!get_i64(tr, "step", &sv->step) || !get_i64(tr, "epoch", &sv->epoch) ||
        !get_i64(tr, "skipped", &sv->skipped) || sv->world < 1)
        return "trainer";
    sv->records[0] = sv->records[1] = -1; /* absent: a checkpoint made without marks */
    const json_t *rec = json_object_get(tr, "records");
    if (rec) {
        const json_t *a = json_array_get(rec, 0), *b = json_array_get(rec, 1);
        if (!json_is_array(rec) || json_array_size(rec) != 2 || !json_is_integer(a) ||
            !json_is_integer(b) || json_integer_value(a) < 0 || json_integer_value(b) < 0)
            return "trainer";
        sv->records[0] = (int64_t)json_integer_value(a);
        sv->records[1] = (int64_t)json_integer_value(b);
    }
    if (!get_i64(lo, "epoch", &sv->loader.epoch) ||
        !get_i64(lo, "next_batch", &sv->loader.next_batch) ||
        !get_u64(lo, "seed", 10, &sv->loader.seed))
        return "loader";
    sv->loader.sample = -1; /* absent: a checkpoint made without global positions */
    if (json_object_get(lo, "sample") && !get_i64(lo, "sample", &sv->loader.sample))
        return "loader";
    if (!get_u64(rn, "seed", 10, &sv->rng.seed) || !get_u64(rn, "stream", 10, &sv->rng.stream) ||
        !get_u64(rn, "counter", 10, &sv->rng.counter))
        return "dropout_rng";
    if (!get_i64(nf, "skipped", &sv->nf.skipped) ||
        !get_i64(nf, "consecutive_skipped", &sv->nf.consecutive_skipped) ||
        !get_i64(nf, "rollbacks", &sv->nf.rollbacks))
        return "nonfinite";
    return NULL;
}

/* The spike detector's state, written oldest value first, into its ring from slot 0 (a state
 * of more values than this run's window keeps the newest); NULL or "spike". A checkpoint of a
 * run without detection gives a fresh detector. */
static const char *parse_spike(const ct_trainer *t, const json_t *o, ct_spike_state *sp) {
    memset(sp, 0, sizeof *sp);
    sp->rollback_step = -1;
    if (t->spike.mode == CT_SPIKE_MODE_NONE || !o) return NULL;
    const json_t *values = json_object_get(o, "values");
    if (!json_is_array(values) || !get_i64(o, "seen", &sp->seen) ||
        !get_i64(o, "spikes", &sp->spikes) || !get_i64(o, "cooldown_left", &sp->cooldown_left) ||
        !get_i64(o, "skip_left", &sp->skip_left) ||
        !get_i64(o, "skipped_windows", &sp->skipped_windows) ||
        !get_i64(o, "rollback_step", &sp->rollback_step))
        return "spike";
    int64_t n = (int64_t)json_array_size(values), w = t->spike.window;
    int64_t from = n > w ? n - w : 0;
    for (int64_t i = from; i < n; i++) {
        if (!f64_of(json_array_get(values, (size_t)i), &sp->values[i - from])) return "spike";
    }
    sp->n_values = n - from;
    sp->next = sp->n_values % w;
    return NULL;
}

/* The schedule's, monitor's, early stopping's and EMA's states, those the trainer has, and
 * the spike detector's. */
static const char *parse_policies(const ct_trainer *t, const json_t *st, saved_state *sv) {
    const json_t *sc = json_object_get(st, "schedule"), *es = json_object_get(st, "early_stopping"),
                 *em = json_object_get(st, "ema");
    if (t->sched &&
        (!get_i64(sc, "steps", &sv->sched.steps) || !get_f64(sc, "best", &sv->sched.best) ||
         !get_i64(sc, "bad_epochs", &sv->sched.bad_epochs) ||
         !get_i64(sc, "cooldown_left", &sv->sched.cooldown_left) ||
         !get_f64(sc, "lr", &sv->sched.lr)))
        return "schedule";
    if (t->has_monitor && !get_monitor(st, "monitor", &sv->monitor)) return "monitor";
    if (t->has_es &&
        (!get_monitor(es, "monitor", &sv->es.monitor) || !get_i64(es, "evals", &sv->es.evals) ||
         !get_i64(es, "bad_evals", &sv->es.bad_evals) || !get_bool(es, "stopped", &sv->es.stopped)))
        return "early_stopping";
    if (t->ema &&
        (!get_i64(em, "updates", &sv->ema.updates) || !get_f64(em, "decay", &sv->ema.decay)))
        return "ema";
    return parse_spike(t, json_object_get(st, "spike"), &sv->spike);
}

/* Each evaluation loader's position, into its engine's resume_state; NULL or the key of the
 * engine whose part is missing or malformed. */
static const char *parse_engines(ct_trainer *t, const json_t *st) {
    const json_t *eng = json_object_get(st, "engines");
    for (int64_t i = 0; i < t->n_engines; i++) {
        if (!t->engines[i].e.loader) continue;
        const json_t *e = json_object_get(eng, t->engines[i].e.key);
        ct_loader_state els;
        if (!get_i64(e, "epoch", &els.epoch) || !get_i64(e, "next_batch", &els.next_batch) ||
            !get_u64(e, "seed", 10, &els.seed))
            return t->engines[i].e.key;
        t->engines[i].resume_state = els;
    }
    return NULL;
}

/* The log window's sums; a checkpoint without them resumes with an empty window. */
static const char *parse_window(const ct_trainer *t, const json_t *lw, double *window) {
    if (!lw) return NULL;
    const json_t *lp = json_object_get(lw, "parts");
    int64_t count = 0;
    if (!get_f64(lw, "loss", &window[0]) || !get_i64(lw, "count", &count) || count < 0 ||
        !json_is_array(lp) || json_array_size(lp) != (size_t)t->n_parts)
        return "log_window";
    window[1] = (double)count;
    for (int64_t k = 0; k < t->n_parts; k++) {
        const json_t *pk = json_array_get(lp, (size_t)k);
        if (!get_f64(pk, "sum", &window[2 + 2 * k]) || !get_i64(pk, "count", &count) || count < 0)
            return "log_window";
        window[3 + 2 * k] = (double)count;
    }
    return NULL;
}

static ct_status malformed(const ct_trainer *t, const char *path, const char *part) {
    return CT_FAIL(t->ctx, CT_ERR_FORMAT,
                   "%s/state.json: the trainer state's '%s' part is missing or malformed "
                   "(a checkpoint made by another trainer configuration?)",
                   path, part);
}

/* This rank's dropout stream: its own saved one when the checkpoint has them (several ranks,
 * the same number), else split from rank 0's. Its saved position must be the loader's. */
static ct_status
parse_own_stream(const ct_trainer *t, const json_t *st, const char *path, saved_state *sv) {
    int64_t rank = ct_comm_rank(t->comm), world = ct_comm_world_size(t->comm);
    sv->own_rng = ct_train_rank_stream(sv->rng, rank);
    const json_t *ranks = json_object_get(st, "ranks");
    if (!ranks || sv->world != world) return CT_OK;
    const json_t *mine = json_array_get(ranks, (size_t)rank);
    const json_t *ml = json_object_get(mine, "loader");
    const json_t *mr = json_object_get(mine, "dropout_rng");
    int64_t e0, b0;
    if (!json_is_array(ranks) || json_array_size(ranks) != (size_t)world ||
        !get_i64(ml, "epoch", &e0) || !get_i64(ml, "next_batch", &b0) ||
        !get_u64(mr, "stream", 10, &sv->own_rng.stream) ||
        !get_u64(mr, "counter", 10, &sv->own_rng.counter))
        return malformed(t, path, "ranks");
    if (t->ps) { /* the workers' positions differ: each takes its own */
        sv->loader.epoch = e0;
        sv->loader.next_batch = b0;
        sv->loader.sample = -1;
    }
    if (e0 != sv->loader.epoch || b0 != sv->loader.next_batch)
        return CT_FAIL(t->ctx, CT_ERR_FORMAT,
                       "%s/state.json: rank %lld's saved position (epoch %lld, batch %lld) "
                       "differs from the loader's (epoch %lld, batch %lld)",
                       path, (long long)rank, (long long)e0, (long long)b0,
                       (long long)sv->loader.epoch, (long long)sv->loader.next_batch);
    return CT_OK;
}

/* Every part of the state, or the failure naming the first one missing or malformed. */
static ct_status parse_state(ct_trainer *t, const json_t *st, const char *path, saved_state *sv) {
    CT_TRY(check_origin(t, json_object_get(st, "trainer"), path, sv));
    const char *bad = parse_progress(st, sv);
    if (!bad) bad = parse_policies(t, st, sv);
    if (!bad) bad = parse_engines(t, st);
    if (!bad) bad = parse_window(t, json_object_get(st, "log_window"), sv->window);
    sv->extra = json_object_get(st, "extra");
    if (!bad && t->task.load_state && !json_is_object(sv->extra)) bad = "extra";
    if (bad) return malformed(t, path, bad);
    return parse_own_stream(t, st, path, sv);
}

/* On another number of processes (allowed): the training loader's position moved to the same
 * global sample of the epoch's order in this run's geometry, so no sample is read twice or
 * skipped; the evaluation loaders start their epochs again (an evaluation is redone whole). */
static ct_status move_positions(ct_trainer *t, saved_state *sv, const char *path) {
    ct_ctx *ctx = t->ctx;
    int64_t world = ct_comm_world_size(t->comm);
    for (int64_t i = 0; i < t->n_engines; i++)
        t->engines[i].resume_state.next_batch = 0;
    if (sv->loader.sample < 0) { /* a checkpoint without the global position */
        ct_log(ctx, CT_LOG_WARN,
               "%s: written by %lld processes, resumed by %lld: the weights and optimizer state "
               "are kept; the checkpoint does not record its global data position, so epoch "
               "%lld's data starts again from its first batch",
               path, (long long)sv->world, (long long)world, (long long)sv->loader.epoch + 1);
        sv->loader.next_batch = 0;
        return CT_OK;
    }
    ct_loader_state at;
    if (ct_loader_state_at(t->train, sv->loader.epoch, sv->loader.sample, &at) != CT_OK) {
        char why[512];
        (void)snprintf(why, sizeof why, "%s", ct_last_error(ctx));
        return CT_FAIL(ctx, CT_ERR_CONFIG,
                       "%s: written by %lld processes, resumed by %lld in epoch %lld: %s; keep "
                       "the global batch when the number of processes changes "
                       "(data.global_batch_size, docs/distributed.md)",
                       path, (long long)sv->world, (long long)world,
                       (long long)sv->loader.epoch + 1,
                       strstr(why, "loader: ") ? strstr(why, "loader: ") + 8 : why);
    }
    ct_log(ctx, CT_LOG_INFO,
           "%s: written by %lld processes, resumed by %lld: epoch %lld continues at sample %lld "
           "of its order (batch %lld of each process)",
           path, (long long)sv->world, (long long)world, (long long)sv->loader.epoch + 1,
           (long long)sv->loader.sample, (long long)at.next_batch);
    sv->loader = at;
    return CT_OK;
}

/* The training and evaluation loaders' positions. */
static ct_status restore_positions(ct_trainer *t, saved_state *sv, const char *path) {
    ct_ctx *ctx = t->ctx;
    if (sv->world != ct_comm_world_size(t->comm)) CT_TRY(move_positions(t, sv, path));
#ifdef CT_TEST_BREAK_RESUME
    /* only in the test build ctrain_broken_resume (tests/CMakeLists.txt): a resume made wrong on
       purpose, which `ctrain verify-resume` must report */
    sv->loader.next_batch = 0;
#endif
    if (ct_loader_set_state(t->train, &sv->loader) != CT_OK)
        return ct_err_wrap(ctx, "%s: restoring the training loader", path);
    for (int64_t i = 0; i < t->n_engines; i++)
        if (t->engines[i].e.loader &&
            ct_loader_set_state(t->engines[i].e.loader, &t->engines[i].resume_state) != CT_OK)
            return ct_err_wrap(ctx, "%s: restoring the loader of engine '%s'", path,
                               t->engines[i].e.key);
    return CT_OK;
}

/* The schedule (and the rate it sets), the monitor, early stopping, the non-finite policy and
 * the EMA. */
static ct_status restore_policies(ct_trainer *t, const saved_state *sv, const char *path) {
    ct_ctx *ctx = t->ctx;
    if (t->sched) {
        if (ct_schedule_set_state(t->sched, &sv->sched) != CT_OK)
            return ct_err_wrap(ctx, "%s: restoring the schedule", path);
        CT_TRY(ct_optim_set_lr(t->opt, ct_schedule_lr(t->sched)));
    }
    if ((t->has_monitor && ct_monitor_set_state(ctx, &t->monitor, &sv->monitor) != CT_OK) ||
        (t->has_es && ct_early_stop_set_state(ctx, &t->es, &sv->es) != CT_OK) ||
        ct_nonfinite_set_state(ctx, &t->nf, &sv->nf) != CT_OK ||
        ct_spike_set_state(ctx, &t->spike, &sv->spike) != CT_OK)
        return ct_err_wrap(ctx, "%s: restoring the monitor and policies", path);
    if (t->ema_store) { /* the loaded EMA weights into the shadow, by the same exact swap */
        CT_TRY(ct_ema_swap_in(t->ema));
        copy_store(t->params, t->ema_store);
        CT_TRY(ct_ema_swap_out(t->ema));
    }
    if (t->ema && ct_ema_set_state(t->ema, &sv->ema) != CT_OK)
        return ct_err_wrap(ctx, "%s: restoring the EMA", path);
    return CT_OK;
}

/* Applies a checkpoint's trainer state. Everything is parsed before anything is applied; each
 * setter validates (a failure names the part), and the trainer is then partly restored and is
 * to be destroyed, as trainer.h says. */
static ct_status restore_state(ct_trainer *t, const json_t *st, const char *path) {
    saved_state sv;
    memset(&sv, 0, sizeof sv);
    CT_TRY(parse_state(t, st, path, &sv));
    if (t->lsgd) CT_TRY(ct_train_lsgd_restore(t, json_object_get(st, "local_sgd"), path));
    if (t->task.load_state && t->task.load_state(t->task.user, sv.extra) != CT_OK)
        return ct_err_wrap(t->ctx, "%s: the task's load_state", path);
    CT_TRY(restore_positions(t, &sv, path));
    CT_TRY(restore_policies(t, &sv, path));
    *ct_graph_rng(t->g) = sv.own_rng;
    /* the window's sums are every rank's: one rank carries them on */
    ct_train_reset_window(t);
    if (ct_comm_rank(t->comm) == 0) ct_train_set_window(t, sv.window);
    t->step = sv.step;
    t->epoch = sv.epoch;
    t->skipped = sv.skipped;
    t->record_marks[0] = sv.records[0];
    t->record_marks[1] = sv.records[1];
    t->last_saved_step = sv.step;
    t->save_due = t->save_best = false;
    t->replace_upto = INT64_MAX;
    t->resumed_step = sv.step;
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
