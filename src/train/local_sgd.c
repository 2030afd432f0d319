/*
 * local_sgd.c - trainer.strategy local_sgd: each rank steps its own optimizer on its own shard,
 * with no gradient exchange, and at each average point the ranks average their weights (one
 * all-reduce of the flat buffer), then apply the outer optimizer (DiLoCo's Nesterov step on the
 * averaged change) to the anchor, the weights of the last average, from which every rank
 * continues.
 *
 * The average points are the same on every rank and in every run of one configuration: every
 * `steps` optimizer steps (of the run's count), each epoch's last step and max_steps' step.
 * A record, an evaluation or a checkpoint due by steps between two of them is made at the next
 * (ct_train_due), so what is recorded, evaluated and saved are the averaged weights. The
 * optimizer's moments and the EMA are averaged with the weights, so at an average point every
 * rank holds the same whole state: a checkpoint written by rank 0 is every rank's, and a resume
 * is exact. Stops asked for between two average points (a signal, a callback's CT_STOP) are
 * agreed at the next one, where the ranks leave together.
 *
 * Ownership: the state and its buffers are the trainer's (ct_train_lsgd_destroy).
 */
#include <jansson.h>
#include <math.h>
#include <string.h>

#include "train/train_internal.h"

struct ct_train_lsgd {
    int64_t steps;
    float outer_lr, outer_momentum;
    bool outer;             /* an outer step other than plain averaging: the anchor is kept */
    int64_t n;              /* floats in the flat weight buffer */
    float *anchor;          /* outer: the weights of the last average (every rank's the same) */
    float *momentum;        /* outer_momentum > 0: the outer optimizer's momentum */
    bool interrupt;         /* an on_batch stop on this rank since the last average */
    bool at_average;        /* the step just made ended with an average */
    int64_t last, previous; /* the steps of the last two averages (or of the fit's start) */
    int64_t averages;       /* in the log window */
    double seconds;         /* spent averaging, in the log window */
};

/* The parameters that local SGD cannot honour: CT_ERR_CONFIG naming them. */
static ct_status check(ct_trainer *t) {
    ct_ctx *ctx = t->ctx;
    const ct_trainer_params *p = &t->p;
    const ct_local_sgd_params *l = &p->local_sgd;
    if (l->steps < 1)
        return CT_FAIL(ctx, CT_ERR_CONFIG, "trainer: local_sgd.steps is %lld, expected >= 1",
                       (long long)l->steps);
    if (!(l->outer_lr > 0.0f) || !isfinite(l->outer_lr))
        return CT_FAIL(ctx, CT_ERR_CONFIG, "trainer: local_sgd.outer_lr is %g, expected > 0",
                       (double)l->outer_lr);
    if (!(l->outer_momentum >= 0.0f) || !(l->outer_momentum < 1.0f))
        return CT_FAIL(ctx, CT_ERR_CONFIG,
                       "trainer: local_sgd.outer_momentum is %g, expected a value in [0, 1)",
                       (double)l->outer_momentum);
    if (p->shard_optimizer == CT_UPDATE_SHARDING_ALWAYS)
        return CT_FAIL(ctx, CT_ERR_CONFIG,
                       "trainer: shard_optimizer is 'always', but strategy local_sgd exchanges "
                       "no gradients: each rank updates all of its own weights (set "
                       "trainer.shard_optimizer to auto or never)");
    if (p->bucket_bytes > 0)
        return CT_FAIL(ctx, CT_ERR_CONFIG,
                       "trainer: bucket_bytes is %lld, but strategy local_sgd exchanges no "
                       "gradients (set trainer.bucket_mb to auto)",
                       (long long)p->bucket_bytes);
    if (t->nf.mode != CT_NONFINITE_MODE_STOP)
        return CT_FAIL(ctx, CT_ERR_CONFIG,
                       "trainer: on_nonfinite skip and rollback are not available with strategy "
                       "local_sgd (a rank's skipped or rolled-back steps would be its own): use "
                       "stop");
    if (t->spike.mode != CT_SPIKE_MODE_NONE)
        return CT_FAIL(ctx, CT_ERR_CONFIG,
                       "trainer: on_spike is not available with strategy local_sgd (its "
                       "detector follows every rank's loss at every step)");
    return CT_OK;
}

ct_status ct_train_lsgd_create(ct_trainer *t) {
    CT_TRY(check(t));
    /* nothing is exchanged at a step: no sharded update, no buckets armed */
    t->p.shard_optimizer = CT_UPDATE_SHARDING_NEVER;
    t->p.bucket_bytes = 0;
    ct_train_lsgd *l = ct_alloc(t->ctx, sizeof *l);
    if (!l) return CT_FAIL(t->ctx, CT_ERR_OOM, "trainer: local SGD state");
    memset(l, 0, sizeof *l);
    t->lsgd = l;
    l->steps = t->p.local_sgd.steps;
    l->outer_lr = t->p.local_sgd.outer_lr;
    l->outer_momentum = t->p.local_sgd.outer_momentum;
    l->outer = l->outer_lr != 1.0f || l->outer_momentum > 0.0f;
    l->n = ct_params_numel(t->params);
    size_t bytes = (size_t)l->n * sizeof(float);
    if (l->outer) {
        l->anchor = ct_alloc(t->ctx, bytes ? bytes : 1);
        if (!l->anchor) return CT_FAIL(t->ctx, CT_ERR_OOM, "trainer: local SGD anchor");
    }
    if (l->outer_momentum > 0.0f) {
        l->momentum = ct_alloc(t->ctx, bytes ? bytes : 1);
        if (!l->momentum) return CT_FAIL(t->ctx, CT_ERR_OOM, "trainer: local SGD momentum");
        memset(l->momentum, 0, bytes);
    }
    return CT_OK;
}

void ct_train_lsgd_destroy(ct_trainer *t) {
    ct_train_lsgd *l = t->lsgd;
    if (!l) return;
    size_t bytes = (size_t)l->n * sizeof(float);
    ct_free(t->ctx, l->anchor, bytes ? bytes : 1);
    ct_free(t->ctx, l->momentum, bytes ? bytes : 1);
    ct_free(t->ctx, l, sizeof *l);
    t->lsgd = NULL;
}

void ct_train_lsgd_begin(ct_trainer *t) {
    ct_train_lsgd *l = t->lsgd;
    l->interrupt = false;
    l->at_average = true;
    l->last = l->previous = t->step;
    if (l->anchor) memcpy(l->anchor, ct_params_values(t->params), (size_t)l->n * sizeof(float));
}

/* Whether the step just made is an average point: the same answer on every rank. */
static bool average_due(const ct_trainer *t, bool epoch_last) {
    return t->step % t->lsgd->steps == 0 || epoch_last ||
           (t->p.max_steps && t->step >= t->p.max_steps) || t->p.dev_run;
}

/* The outer step on the mean weights w: the anchor moves along the averaged change, and the
 * weights become the anchor. Elementwise: the same bits for any thread count. */
static void outer_step(ct_train_lsgd *l, float *w) {
    const float lr = l->outer_lr, mu = l->outer_momentum;
    for (int64_t i = 0; i < l->n; i++) {
        float g = l->anchor[i] - w[i], d = g;
        if (l->momentum) {
            l->momentum[i] = mu * l->momentum[i] + g;
            d = g + mu * l->momentum[i];
        }
        l->anchor[i] -= lr * d;
        w[i] = l->anchor[i];
    }
}

/* The average: weights, the optimizer's moments and the EMA over every rank, the outer step,
 * and the stops agreed. */
static ct_status average(ct_trainer *t) {
    ct_train_lsgd *l = t->lsgd;
    double start = ct_train_clock();
    float *w = ct_params_values(t->params);
    CT_TRY(ct_comm_allreduce_mean_f32(t->comm, w, l->n));
    for (int32_t k = 0; k < ct_optim_buffer_count(t->opt); k++) {
        const char *name;
        float *buf;
        CT_TRY(ct_optim_buffer(t->opt, k, &name, &buf));
        CT_TRY(ct_comm_allreduce_mean_f32(t->comm, buf, l->n));
    }
    if (t->ema) { /* the shadow's weights by way of the exact swap */
        CT_TRY(ct_ema_swap_in(t->ema));
        ct_status s = ct_comm_allreduce_mean_f32(t->comm, w, l->n);
        CT_TRY(ct_ema_swap_out(t->ema));
        CT_TRY(s);
    }
    float flags[2] = {t->interrupt || l->interrupt ? 1.0f : 0.0f, t->stop_asked ? 1.0f : 0.0f};
    CT_TRY(ct_comm_allreduce_sum_f32(t->comm, flags, 2));
    t->interrupt = flags[0] != 0.0f;
    if (flags[1] != 0.0f) t->stop = true;
    t->stop_asked = false;
    l->interrupt = false;
    if (l->outer) outer_step(l, w);
    double took = ct_train_clock() - start;
    l->seconds += took;
    l->averages++;
    t->comm_seconds += took;
    ct_train_lap(t, CT_PROFILE_COMM);
    return CT_OK;
}

ct_status ct_train_lsgd_after_step(ct_trainer *t, bool epoch_last) {
    ct_train_lsgd *l = t->lsgd;
    l->at_average = average_due(t, epoch_last);
    if (!l->at_average) {
        /* this rank's stop waits for the next average, where every rank leaves together */
        l->interrupt = l->interrupt || t->interrupt;
        t->interrupt = false;
        return CT_OK;
    }
    l->previous = l->last;
    l->last = t->step;
    return average(t);
}

bool ct_train_lsgd_due(const ct_trainer *t, int64_t every) {
    const ct_train_lsgd *l = t->lsgd;
    return l->at_average && t->step / every > l->previous / every;
}

int64_t ct_train_lsgd_values(ct_trainer *t, ct_metric_value *v, int64_t k) {
    ct_train_lsgd *l = t->lsgd;
    v[k].name = "train/averages";
    v[k++].value = (double)l->averages;
    v[k].name = "train/average_ms";
    v[k++].value = l->seconds * 1e3;
    l->averages = 0;
    l->seconds = 0.0;
    return k;
}

/* The outer momentum as hex digits, eight per float (its bits, as f64_json writes doubles),
 * so that a resume restores it exactly. */
json_t *ct_train_lsgd_state(const ct_trainer *t) {
    const ct_train_lsgd *l = t->lsgd;
    json_t *o = json_object();
    if (!o || !l->momentum) return o;
    size_t len = (size_t)l->n * 8;
    char *hex = ct_alloc(t->ctx, len + 1);
    if (!hex) {
        json_decref(o);
        return NULL;
    }
    static const char digits[] = "0123456789abcdef";
    for (int64_t i = 0; i < l->n; i++) {
        uint32_t bits;
        memcpy(&bits, &l->momentum[i], sizeof bits);
        for (int d = 0; d < 8; d++)
            hex[8 * i + d] = digits[(bits >> (28 - 4 * d)) & 0xfu];
    }
    hex[len] = '\0';
    int bad = json_object_set_new(o, "momentum", json_stringn(hex, len));
    ct_free(t->ctx, hex, len + 1);
    if (bad) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

ct_status ct_train_lsgd_restore(ct_trainer *t, const json_t *o, const char *path) {
    ct_train_lsgd *l = t->lsgd;
    if (!l->momentum) return CT_OK;
    const json_t *m = json_object_get(o, "momentum");
    const char *hex = json_string_value(m);
    if (!hex || json_string_length(m) != (size_t)l->n * 8)
        return CT_FAIL(t->ctx, CT_ERR_FORMAT,
                       "%s/state.json: the trainer state's 'local_sgd' part has no outer "
                       "momentum of %lld floats (a checkpoint made without "
                       "trainer.local_sgd.outer_momentum?)",
                       path, (long long)l->n);
    for (int64_t i = 0; i < l->n; i++) {
        uint32_t bits = 0;
        for (int d = 0; d < 8; d++) {
            int v = hex_digit(hex[8 * i + d]);
            if (v < 0)
                return CT_FAIL(t->ctx, CT_ERR_FORMAT,
                               "%s/state.json: local_sgd.momentum: '%c' at offset %lld is not a "
                               "lower-case hex digit",
                               path, hex[8 * i + d], (long long)(8 * i + d));
            bits = bits << 4 | (uint32_t)v;
        }
        memcpy(&l->momentum[i], &bits, sizeof bits);
    }
    return CT_OK;
}

int64_t ct_trainer_local_sgd_steps(const ct_trainer *t) {
    return t->lsgd ? t->lsgd->steps : 0;
}
