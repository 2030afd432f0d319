/*
 * ps.c - the parameter-server strategy (trainer.strategy: parameter_server, docs/distributed.md).
 *
 * The last ps_servers ranks are servers: server j holds [bounds[j], bounds[j+1]) of the flat
 * parameter buffer (tiled on 16-float boundaries, as the sharded update's parts) with the
 * optimizer state of that range, and applies each gradient a worker pushes to it as it arrives
 * (ct_optim_step_range), stepping the schedule after each: the global step is the number of
 * updates a server has applied. The other ranks are workers, each on its own shard of the
 * training data (the experiment shards the loader over the workers only): a worker pushes the
 * gradient of a batch to every server and takes the weights back in the replies (rank 0 every
 * step, the others every ps_pull_every steps). Rank 0 is also the chief: it runs the trainer's
 * own loop (fit.c) on a one-process communicator, so it alone evaluates, logs and writes
 * checkpoints, and the end of its loop ends the run.
 *
 * Transport: MPI point-to-point through the communicator (ct_comm_isend, probe, recv). A server
 * trains nothing, so its thread is its progress engine: it waits for any message and answers
 * it. A worker posts its push to every server before it waits for any reply and waits for its
 * sends only after the replies, so no cycle of blocking sends can form between servers and
 * workers. Nothing here assumes the ranks share memory.
 *
 * Consistency: a server handles one message at a time, so its range always holds whole
 * updates. A checkpoint holds every server (HOLD: each says how many pushes it has taken from
 * each worker), lets each take exactly the most any server has taken from every worker
 * (CATCHUP: the pushes in flight, which are on their way since a worker posts a push to every
 * server at once and one pair's messages keep their order), reads each range then, at one
 * global step on every server, and lets them go on (RESUME).
 *
 * Bounded staleness (ps_max_staleness S >= 0) is a clock bound: a server answers a worker's
 * push only once that worker is at most S pushes ahead of the slowest worker still running, so
 * no worker starts a step on weights that miss more than S rounds of another's updates; S = 0
 * gives synchronous rounds.
 *
 * Ownership: the trainer owns its ct_train_ps (ct_train_ps_destroy); the one-process
 * communicator rank 0's loop runs on is the strategy's.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "train/train_internal.h"

/* The tags of requests (a worker's push or pull), their replies, rank 0's control messages to
 * the servers and their answers. */
enum { TAG_REQ = 71, TAG_REPLY = 72, TAG_CTRL = 73, TAG_CTRL_REPLY = 74, TAG_DONE = 75 };
enum { PS_PUSH = 1, PS_PULL, PS_BYE, PS_HOLD, PS_CATCHUP, PS_RESUME, PS_STOP, PS_FINISH };
enum { PART_ALIGN = 16 };

/* A request's or control message's header. A push's gradient of the server's range follows
 * it; a CATCHUP's targets (world int64). */
typedef struct ps_head {
    int64_t kind;
    int64_t version; /* a push: the server's step when it sent the weights the push is from */
    int64_t pull;    /* 1: reply with the range's weights */
    uint64_t pos[4]; /* a push: the worker's loader epoch and next batch, dropout stream and
                        counter, after the batch */
    double push_ms;  /* a push: the worker's waits in its previous exchange */
    double pull_ms;
} ps_head;

/* A reply's header. To rank 0, server 0 adds its statistics since its last reply to rank 0 and
 * then each rank's pushes taken (world doubles); the range's weights follow when `weights`. */
typedef struct ps_reply {
    int64_t step;
    int64_t stop; /* the run is over: no more requests */
    int64_t weights;
    double lr;
    double stale_sum, stale_max, stale_n;
    double push_ms, pull_ms, waits_n;
} ps_reply;

/* A server's state at a checkpoint; then each rank's position (world x 4 uint64), the range's
 * weights and each optimizer buffer's range. */
typedef struct ps_state {
    int64_t step;
    int64_t opt_steps;
    ct_schedule_state sched;
    double lr;
} ps_state;

typedef struct ps_server {
    int64_t index;  /* among the servers */
    int64_t *taken; /* per rank: pushes taken (applied, or dropped once stopping) */
    uint64_t *pos;  /* per rank: the position its last push carried (4 each) */
    bool *owed;     /* per rank: a reply held back by the staleness bound (with weights?) */
    bool *owed_pull;
    bool *left;    /* per rank: has said it leaves (PS_BYE) */
    bool stopping; /* rank 0 has ended its loop, or max_steps is reached */
    bool finish;   /* rank 0 is done with the servers */
    double stale_sum, stale_max, stale_n, push_ms, pull_ms, waits_n;
} ps_server;

struct ct_train_ps {
    ct_comm *world, *solo;
    int64_t rank, size, servers, workers, first; /* first: the first server's rank */
    int64_t n;                                   /* floats in the flat buffer */
    int64_t *bounds;                             /* servers + 1 */
    int64_t *version;                            /* per server: the step of its range held */
    int64_t since_pull;                          /* steps since this worker's last pull */
    double push_ms, pull_ms;                     /* this worker's last exchange's waits */
    unsigned char *in, *out;                     /* messages; sizes in_cap, out_cap */
    size_t in_cap, out_cap;
    ct_comm_request *reqs; /* one per server */
    int64_t *targets;      /* rank 0's checkpoint: per rank, its pushes every server takes */
    ps_server *srv;        /* a server's; NULL on workers */
    /* rank 0's log window: server 0's statistics summed, and each rank's pushes taken now and
       at the window's start */
    double stale_sum, stale_max, stale_n, push_ms_sum, pull_ms_sum, waits_n;
    double *shares, *shares_start;
    int64_t gathered_from; /* rank 0: the step before a checkpoint's catch-up moved it; -1 */
    char share_names[CT_PS_MAX_SHARES][CT_METRIC_NAME_MAX];
};

/* ---- set-up ---- */

static ct_status refuse(ct_trainer *t, const char *what) {
    return CT_FAIL(t->ctx, CT_ERR_CONFIG,
                   "trainer: strategy parameter_server: %s (docs/distributed.md, Parameter "
                   "servers)",
                   what);
}

/* What the strategy cannot honour, refused at create. */
static ct_status check_settings(ct_trainer *t) {
    const ct_trainer_params *p = &t->p;
    int64_t world = t->p.comm ? ct_comm_world_size(t->p.comm) : 1;
    char msg[256];
    if (world < 2 || !ct_comm_has_p2p(t->comm)) {
        (void)snprintf(msg, sizeof msg,
                       "needs 2 processes or more under an MPI launcher (a server and a "
                       "worker), got %lld on communicator '%s'",
                       (long long)world, ct_comm_name(t->comm));
        return refuse(t, msg);
    }
    if (p->ps_servers < 1 || p->ps_servers >= world) {
        (void)snprintf(msg, sizeof msg,
                       "trainer.ps.servers is %lld; expected from 1 to %lld (the world size %lld "
                       "less one worker)",
                       (long long)p->ps_servers, (long long)world - 1, (long long)world);
        return refuse(t, msg);
    }
    if (p->ps_max_staleness < -1 || p->ps_pull_every < 1)
        return refuse(t, "ps.max_staleness must be >= 0 (or unset) and ps.pull_every >= 1");
    if (p->shard_optimizer == CT_UPDATE_SHARDING_ALWAYS)
        return refuse(t, "trainer.shard_optimizer 'always' shards the update of the sync "
                         "strategy; the servers shard it here (leave it auto or never)");
    if (p->accum_steps > 1)
        return refuse(t, "trainer.accum_steps above 1 is not supported (each push is one "
                         "batch's gradient)");
    if (t->nf.mode == CT_NONFINITE_MODE_ROLLBACK)
        return refuse(t, "on_nonfinite rollback needs a last good state of every shard (use "
                         "stop or skip)");
    if (t->spike.mode != CT_SPIKE_MODE_NONE)
        return refuse(t, "on_spike is not supported (the servers apply each push as it comes)");
    if (p->ema) return refuse(t, "ema is not supported (no rank holds every update's weights)");
    if (p->callbacks.on_grads)
        return refuse(t, "gradient histograms (an on_grads handler) are not supported");
    if (t->sched && (p->schedule_per_epoch || ct_schedule_needs_metric(t->sched)))
        return refuse(t, "the schedule must follow the global step (not `interval: epoch`, not "
                         "plateau)");
    return CT_OK;
}

static void *zalloc(ct_ctx *ctx, size_t bytes) {
    void *p = ct_alloc(ctx, bytes ? bytes : 1);
    if (p) memset(p, 0, bytes ? bytes : 1);
    return p;
}

ct_status ct_train_ps_create(ct_trainer *t) {
    if (t->p.strategy != CT_STRATEGY_PARAMETER_SERVER) return CT_OK;
    ct_ctx *ctx = t->ctx;
    CT_TRY(check_settings(t));
    int64_t rank = ct_comm_rank(t->comm), servers = t->p.ps_servers;
    if (rank < ct_comm_world_size(t->comm) - servers && t->train) {
        int64_t total = ct_loader_batches_per_epoch(t->train);
        if (t->p.limit_train_batches > 0 && t->p.limit_train_batches < total)
            total = t->p.limit_train_batches;
        if (total < 1) /* the worker would never push, nor hear that the run is over */
            return CT_FAIL(ctx, CT_ERR_CONFIG,
                           "trainer: strategy parameter_server: worker rank %lld has no batch "
                           "in its shard of the training data: fewer workers, a smaller "
                           "data.batch_size or data.drop_last false (docs/distributed.md, "
                           "Parameter servers)",
                           (long long)rank);
    }
    ct_train_ps *ps = zalloc(ctx, sizeof *ps);
    if (!ps) return CT_FAIL(ctx, CT_ERR_OOM, "parameter servers: their state");
    t->ps = ps;
    ps->world = t->comm;
    ps->rank = ct_comm_rank(t->comm);
    ps->size = ct_comm_world_size(t->comm);
    ps->servers = t->p.ps_servers;
    ps->workers = ps->size - ps->servers;
    ps->first = ps->workers;
    ps->n = ct_params_numel(t->params);
    ps->gathered_from = -1;
    CT_TRY(ct_comm_create_single(ctx, &ps->solo));
    size_t w = (size_t)ps->size;
    ps->bounds = zalloc(ctx, (size_t)(ps->servers + 1) * sizeof *ps->bounds);
    ps->version = zalloc(ctx, (size_t)ps->servers * sizeof *ps->version);
    ps->reqs = zalloc(ctx, (size_t)ps->servers * sizeof *ps->reqs);
    ps->targets = zalloc(ctx, w * sizeof *ps->targets);
    ps->shares = zalloc(ctx, w * sizeof *ps->shares);
    ps->shares_start = zalloc(ctx, w * sizeof *ps->shares_start);
    if (!ps->bounds || !ps->version || !ps->reqs || !ps->targets || !ps->shares ||
        !ps->shares_start)
        return CT_FAIL(ctx, CT_ERR_OOM, "parameter servers: their tables");
    int64_t longest = 0;
    for (int64_t k = 0; k <= ps->servers; k++) {
        int64_t b = ps->n * k / ps->servers;
        ps->bounds[k] = k == ps->servers ? ps->n : b - b % PART_ALIGN;
    }
    for (int64_t k = 0; k < ps->servers; k++)
        if (ps->bounds[k + 1] - ps->bounds[k] > longest)
            longest = ps->bounds[k + 1] - ps->bounds[k];
    /* the longest message: a server's state (its range's weights and optimizer buffers) or a
       reply to rank 0 with the shares and the weights */
    size_t range = (size_t)longest * sizeof(float);
    size_t nbuf = (size_t)ct_optim_buffer_count(t->opt);
    ps->in_cap = sizeof(ps_state) + sizeof(ps_reply) + sizeof(ps_head) + w * 6 * sizeof(uint64_t) +
                 range * (2 + nbuf);
    ps->out_cap = ps->rank >= ps->first ? ps->in_cap
                                        : (size_t)ps->servers * sizeof(ps_head) +
                                              (size_t)ps->n * sizeof(float) + w * sizeof(int64_t);
    ps->in = ct_alloc(ctx, ps->in_cap);
    ps->out = ct_alloc(ctx, ps->out_cap);
    if (!ps->in || !ps->out) return CT_FAIL(ctx, CT_ERR_OOM, "parameter servers: message buffers");
    for (int64_t k = 0; k < CT_PS_MAX_SHARES && k < ps->workers; k++)
        (void)snprintf(ps->share_names[k], CT_METRIC_NAME_MAX, "train/worker_share/%lld",
                       (long long)k);
    if (ps->rank >= ps->first) {
        ps_server *sv = zalloc(ctx, sizeof *sv);
        ps->srv = sv;
        if (!sv) return CT_FAIL(ctx, CT_ERR_OOM, "parameter server: its state");
        sv->index = ps->rank - ps->first;
        sv->taken = zalloc(ctx, w * sizeof *sv->taken);
        sv->pos = zalloc(ctx, w * 4 * sizeof *sv->pos);
        sv->owed = zalloc(ctx, w * sizeof *sv->owed);
        sv->owed_pull = zalloc(ctx, w * sizeof *sv->owed_pull);
        sv->left = zalloc(ctx, w * sizeof *sv->left);
        if (!sv->taken || !sv->pos || !sv->owed || !sv->owed_pull || !sv->left)
            return CT_FAIL(ctx, CT_ERR_OOM, "parameter server: its tables");
    }
    /* no all-reduce, no sharded update: the servers do what they would */
    t->p.bucket_bytes = 0;
    t->p.shard_optimizer = CT_UPDATE_SHARDING_NEVER;
    return CT_OK;
}

void ct_train_ps_destroy(ct_trainer *t) {
    ct_train_ps *ps = t->ps;
    if (!ps) return;
    ct_ctx *ctx = t->ctx;
    size_t w = (size_t)ps->size;
    ps_server *sv = ps->srv;
    if (sv) {
        ct_free(ctx, sv->taken, w * sizeof *sv->taken);
        ct_free(ctx, sv->pos, w * 4 * sizeof *sv->pos);
        ct_free(ctx, sv->owed, w * sizeof *sv->owed);
        ct_free(ctx, sv->owed_pull, w * sizeof *sv->owed_pull);
        ct_free(ctx, sv->left, w * sizeof *sv->left);
        ct_free(ctx, sv, sizeof *sv);
    }
    ct_free(ctx, ps->in, ps->in_cap);
    ct_free(ctx, ps->out, ps->out_cap);
    ct_free(ctx, ps->bounds, (size_t)(ps->servers + 1) * sizeof *ps->bounds);
    ct_free(ctx, ps->version, (size_t)ps->servers * sizeof *ps->version);
    ct_free(ctx, ps->reqs, (size_t)ps->servers * sizeof *ps->reqs);
    ct_free(ctx, ps->targets, w * sizeof *ps->targets);
    ct_free(ctx, ps->shares, w * sizeof *ps->shares);
    ct_free(ctx, ps->shares_start, w * sizeof *ps->shares_start);
    ct_comm_destroy(ps->solo);
    ct_free(ctx, ps, sizeof *ps);
    t->ps = NULL;
}

int64_t ct_trainer_ps_servers(const ct_trainer *t) {
    return t->ps ? t->ps->servers : 0;
}

ct_comm *ct_train_ps_world(const ct_trainer *t) {
    return t->ps->world;
}

ct_comm *ct_train_ps_solo(const ct_trainer *t) {
    return t->ps->solo;
}

/* ---- messages ---- */

/* The next message from source (or any) with tag (or any) into ps->in; its size, source and
 * tag. */
static ct_status
receive(ct_trainer *t, int64_t source, int32_t tag, size_t *bytes, int64_t *from, int32_t *got) {
    ct_train_ps *ps = t->ps;
    CT_TRY(ct_comm_probe(ps->world, source, tag, from, got, bytes));
    if (*bytes > ps->in_cap || *bytes < sizeof(int64_t))
        return CT_FAIL(t->ctx, CT_ERR_DIST,
                       "parameter servers: rank %lld got a message of %zu bytes from rank %lld "
                       "(tag %d), expected at most %zu",
                       (long long)ps->rank, *bytes, (long long)*from, (int)*got, ps->in_cap);
    return ct_comm_recv(ps->world, ps->in, *bytes, *from, *got);
}

static ct_status short_message(ct_trainer *t, int64_t from, size_t bytes, size_t want) {
    return CT_FAIL(t->ctx, CT_ERR_DIST,
                   "parameter servers: rank %lld got %zu bytes from rank %lld, expected %zu",
                   (long long)t->ps->rank, bytes, (long long)from, want);
}

static double now_ms(void) {
    return ct_train_clock() * 1e3;
}

/* ---- the server ---- */

static int64_t lo_of(const ct_train_ps *ps, int64_t j) {
    return ps->bounds[j];
}

static int64_t len_of(const ct_train_ps *ps, int64_t j) {
    return ps->bounds[j + 1] - ps->bounds[j];
}

/* The reply to worker `to`: the step, whether the run is over, the statistics and shares for
 * rank 0 (server 0), and the range's weights when asked. */
static ct_status reply(ct_trainer *t, int64_t to, bool pull) {
    ct_train_ps *ps = t->ps;
    ps_server *sv = ps->srv;
    int64_t j = sv->index, len = len_of(ps, j);
    ps_reply r;
    memset(&r, 0, sizeof r);
    r.step = t->step;
    r.stop = sv->stopping;
    r.weights = pull;
    r.lr = (double)ct_optim_lr(t->opt);
    unsigned char *at = ps->out + sizeof r;
    if (to == 0 && j == 0) {
        r.stale_sum = sv->stale_sum, r.stale_max = sv->stale_max, r.stale_n = sv->stale_n;
        r.push_ms = sv->push_ms, r.pull_ms = sv->pull_ms, r.waits_n = sv->waits_n;
        sv->stale_sum = sv->stale_max = sv->stale_n = 0.0;
        sv->push_ms = sv->pull_ms = sv->waits_n = 0.0;
        for (int64_t k = 0; k < ps->size; k++) {
            double d = (double)sv->taken[k];
            memcpy(at, &d, sizeof d);
            at += sizeof d;
        }
    }
    memcpy(ps->out, &r, sizeof r);
    if (pull) {
        memcpy(at, ct_params_values(t->params) + lo_of(ps, j), (size_t)len * sizeof(float));
        at += (size_t)len * sizeof(float);
    }
    return ct_comm_send(ps->world, ps->out, (size_t)(at - ps->out), to, TAG_REPLY);
}

/* Whether worker w may go on: at most max_staleness pushes ahead of the slowest one running. */
static bool within_bound(const ct_trainer *t, int64_t w) {
    const ct_train_ps *ps = t->ps;
    const ps_server *sv = ps->srv;
    if (t->p.ps_max_staleness < 0 || sv->stopping) return true;
    int64_t slowest = INT64_MAX;
    for (int64_t k = 0; k < ps->workers; k++)
        if (!sv->left[k] && sv->taken[k] < slowest) slowest = sv->taken[k];
    return slowest == INT64_MAX || sv->taken[w] - slowest <= t->p.ps_max_staleness;
}

/* The replies held back that may go now. */
static ct_status release(ct_trainer *t) {
    ps_server *sv = t->ps->srv;
    for (int64_t k = 0; k < t->ps->workers; k++)
        if (sv->owed[k] && within_bound(t, k)) {
            sv->owed[k] = false;
            CT_TRY(reply(t, k, sv->owed_pull[k]));
        }
    return CT_OK;
}

/* One update of the server's range from a push's gradient, with the schedule after it, as the
 * sync strategy's update (end_step in update.c). */
static ct_status apply(ct_trainer *t, const void *grad) {
    ct_train_ps *ps = t->ps;
    int64_t j = ps->srv->index, lo = lo_of(ps, j), len = len_of(ps, j);
    memcpy(ct_params_grads(t->params) + lo, grad, (size_t)len * sizeof(float));
    ct_optim_step_range(t->opt, lo, lo + len);
    t->step++;
    if (t->sched) CT_TRY(ct_optim_set_lr(t->opt, ct_schedule_step(t->sched)));
    if (t->p.max_steps && t->step >= t->p.max_steps) ps->srv->stopping = true;
    return CT_OK;
}

/* A worker's request (in ps->in, `bytes` long). */
static ct_status serve_request(ct_trainer *t, int64_t from, size_t bytes) {
    ct_train_ps *ps = t->ps;
    ps_server *sv = ps->srv;
    ps_head h;
    if (bytes < sizeof h || from >= ps->workers) return short_message(t, from, bytes, sizeof h);
    memcpy(&h, ps->in, sizeof h);
    if (h.kind == PS_PULL) return reply(t, from, true);
    if (h.kind == PS_BYE) { /* it has left: the slowest of the others bounds the rest */
        sv->left[from] = true;
        return release(t);
    }
    size_t want = sizeof h + (size_t)len_of(ps, sv->index) * sizeof(float);
    if (h.kind != PS_PUSH || bytes != want) return short_message(t, from, bytes, want);
    sv->taken[from]++;
    if (!sv->stopping) {
        double stale = (double)(t->step - h.version);
        sv->stale_sum += stale;
        sv->stale_n += 1.0;
        if (stale > sv->stale_max) sv->stale_max = stale;
        if (h.push_ms > 0.0 || h.pull_ms > 0.0) {
            sv->push_ms += h.push_ms;
            sv->pull_ms += h.pull_ms;
            sv->waits_n += 1.0;
        }
        memcpy(sv->pos + 4 * from, h.pos, sizeof h.pos);
        CT_TRY(apply(t, ps->in + sizeof h));
    }
    if (within_bound(t, from)) {
        CT_TRY(reply(t, from, h.pull != 0));
    } else {
        sv->owed[from] = true;
        sv->owed_pull[from] = h.pull != 0;
    }
    return release(t);
}

/* The server's state for rank 0's checkpoint: step, optimizer count, schedule, every rank's
 * position, the range's weights and optimizer buffers. */
static ct_status send_state(ct_trainer *t) {
    ct_train_ps *ps = t->ps;
    ps_server *sv = ps->srv;
    int64_t j = sv->index, lo = lo_of(ps, j), len = len_of(ps, j);
    ps_state st;
    memset(&st, 0, sizeof st);
    st.step = t->step;
    st.opt_steps = ct_optim_steps(t->opt);
    if (t->sched) ct_schedule_get_state(t->sched, &st.sched);
    st.lr = (double)ct_optim_lr(t->opt);
    unsigned char *at = ps->out;
    memcpy(at, &st, sizeof st);
    at += sizeof st;
    memcpy(at, sv->pos, (size_t)ps->size * 4 * sizeof(uint64_t));
    at += (size_t)ps->size * 4 * sizeof(uint64_t);
    memcpy(at, ct_params_values(t->params) + lo, (size_t)len * sizeof(float));
    at += (size_t)len * sizeof(float);
    for (int32_t k = 0; k < ct_optim_buffer_count(t->opt); k++) {
        const char *name;
        float *buf;
        CT_TRY(ct_optim_buffer(t->opt, k, &name, &buf));
        memcpy(at, buf + lo, (size_t)len * sizeof(float));
        at += (size_t)len * sizeof(float);
    }
    return ct_comm_send(ps->world, ps->out, (size_t)(at - ps->out), 0, TAG_CTRL_REPLY);
}

/* Rank 0's checkpoint, on this server: the pushes taken so far to rank 0, then exactly the
 * pushes it names taken from each worker, the state, and the wait for RESUME. */
static ct_status hold(ct_trainer *t) {
    ct_train_ps *ps = t->ps;
    ps_server *sv = ps->srv;
    size_t w = (size_t)ps->size, bytes;
    int64_t from;
    int32_t tag;
    CT_TRY(ct_comm_send(ps->world, sv->taken, w * sizeof(int64_t), 0, TAG_CTRL_REPLY));
    CT_TRY(receive(t, 0, TAG_CTRL, &bytes, &from, &tag));
    ps_head h;
    if (bytes != sizeof h + w * sizeof(int64_t)) return short_message(t, 0, bytes, sizeof h);
    memcpy(&h, ps->in, sizeof h);
    memcpy(ps->targets, ps->in + sizeof h, w * sizeof(int64_t));
    if (h.kind != PS_CATCHUP) return short_message(t, 0, bytes, sizeof h);
    for (int64_t k = 0; k < ps->workers; k++)
        while (sv->taken[k] < ps->targets[k]) {
            CT_TRY(receive(t, k, TAG_REQ, &bytes, &from, &tag));
            CT_TRY(serve_request(t, from, bytes));
        }
    CT_TRY(send_state(t));
    CT_TRY(receive(t, 0, TAG_CTRL, &bytes, &from, &tag));
    memcpy(&h, ps->in, sizeof h);
    if (bytes != sizeof h || h.kind != PS_RESUME) return short_message(t, 0, bytes, sizeof h);
    return CT_OK;
}

/* A control message of rank 0. */
static ct_status serve_control(ct_trainer *t, size_t bytes) {
    ps_server *sv = t->ps->srv;
    ps_head h;
    if (bytes < sizeof h) return short_message(t, 0, bytes, sizeof h);
    memcpy(&h, t->ps->in, sizeof h);
    switch (h.kind) {
    case PS_HOLD:
        return hold(t);
    case PS_STOP:
        sv->stopping = true;
        return release(t);
    case PS_FINISH:
        sv->finish = true;
        return CT_OK;
    default:
        return short_message(t, 0, bytes, sizeof h);
    }
}

/* Whether every worker but rank 0 has left. */
static bool all_left(const ct_train_ps *ps) {
    for (int64_t k = 1; k < ps->workers; k++)
        if (!ps->srv->left[k]) return false;
    return true;
}

/* The server's loop: every message answered as it comes, until rank 0 is done and every other
 * worker knows the run is over. */
static ct_status serve(ct_trainer *t) {
    ct_train_ps *ps = t->ps;
    ct_comm_set_step(ps->world, t->step, "serving");
    while (!(ps->srv->finish && all_left(ps))) {
        size_t bytes;
        int64_t from;
        int32_t tag;
        CT_TRY(receive(t, CT_COMM_ANY_SOURCE, CT_COMM_ANY_TAG, &bytes, &from, &tag));
        if (tag == TAG_CTRL && from == 0)
            CT_TRY(serve_control(t, bytes));
        else if (tag == TAG_REQ)
            CT_TRY(serve_request(t, from, bytes));
        else
            return CT_FAIL(t->ctx, CT_ERR_DIST,
                           "parameter server rank %lld: an unexpected message (tag %d) from rank "
                           "%lld",
                           (long long)ps->rank, (int)tag, (long long)from);
    }
    return CT_OK;
}

/* ---- the workers ---- */

/* One exchange with every server: this worker's gradient (push) or none, the weights back when
 * pull; *step and *lr: server 0's; *stop: the run is over. */
static ct_status
exchange(ct_trainer *t, bool push, bool pull, int64_t *step, float *lr, bool *stop) {
    ct_train_ps *ps = t->ps;
    const float *g = ct_params_grads(t->params);
    float *w = ct_params_values(t->params);
    ct_loader_state ls = ct_loader_get_state(t->train);
    const ct_rng *rng = ct_graph_rng(t->g);
    ps_head h;
    memset(&h, 0, sizeof h);
    h.kind = push ? PS_PUSH : PS_PULL;
    h.pull = pull;
    h.pos[0] = (uint64_t)ls.epoch;
    h.pos[1] = (uint64_t)ls.next_batch;
    h.pos[2] = rng->stream;
    h.pos[3] = rng->counter;
    h.push_ms = ps->push_ms;
    h.pull_ms = ps->pull_ms;
    double start = now_ms();
    unsigned char *at = ps->out;
    for (int64_t j = 0; j < ps->servers; j++) {
        size_t len = (size_t)len_of(ps, j) * sizeof(float);
        h.version = ps->version[j];
        memcpy(at, &h, sizeof h);
        if (push) memcpy(at + sizeof h, g + lo_of(ps, j), len);
        size_t bytes = sizeof h + (push ? len : 0);
        CT_TRY(ct_comm_isend(ps->world, at, bytes, ps->first + j, TAG_REQ, &ps->reqs[j]));
        at += bytes;
    }
    /* pushing: until each server has taken the push and answered (a staleness hold included);
       pulling: receiving the answers with the weights */
    double pushing = now_ms() - start, pulling = 0.0;
    *stop = false;
    for (int64_t j = 0; j < ps->servers; j++) {
        size_t bytes;
        int64_t from;
        int32_t tag;
        double asked = now_ms();
        CT_TRY(ct_comm_probe(ps->world, ps->first + j, TAG_REPLY, &from, &tag, &bytes));
        double arrived = now_ms();
        pushing += arrived - asked;
        if (bytes > ps->in_cap) return short_message(t, from, bytes, ps->in_cap);
        CT_TRY(ct_comm_recv(ps->world, ps->in, bytes, from, TAG_REPLY));
        pulling += now_ms() - arrived;
        ps_reply r;
        if (bytes < sizeof r) return short_message(t, from, bytes, sizeof r);
        memcpy(&r, ps->in, sizeof r);
        const unsigned char *p = ps->in + sizeof r;
        size_t want = sizeof r + (r.weights ? (size_t)len_of(ps, j) * sizeof(float) : 0);
        if (ps->rank == 0 && j == 0) {
            want += (size_t)ps->size * sizeof(double);
            if (bytes != want) return short_message(t, from, bytes, want);
            memcpy(ps->shares, p, (size_t)ps->size * sizeof(double));
            p += (size_t)ps->size * sizeof(double);
            ps->stale_sum += r.stale_sum;
            ps->stale_n += r.stale_n;
            if (r.stale_max > ps->stale_max) ps->stale_max = r.stale_max;
            ps->push_ms_sum += r.push_ms;
            ps->pull_ms_sum += r.pull_ms;
            ps->waits_n += r.waits_n;
        } else if (bytes != want) {
            return short_message(t, from, bytes, want);
        }
        if (r.weights) {
            memcpy(w + lo_of(ps, j), p, (size_t)len_of(ps, j) * sizeof(float));
            ps->version[j] = r.step;
        }
        if (j == 0) {
            *step = r.step;
            *lr = (float)r.lr;
        }
        *stop = *stop || r.stop;
    }
    for (int64_t j = 0; j < ps->servers; j++)
        CT_TRY(ct_comm_wait_send(ps->world, &ps->reqs[j]));
    ps->push_ms = pushing;
    ps->pull_ms = pulling;
    if (pull) ps->since_pull = 0;
    return CT_OK;
}

/* The window's gradient before it is pushed: checked (the non-finite policy: stop or skip) and
 * clipped, as the sync strategy does in one process. *push: false when the policy skips it. */
static ct_status prepare_push(ct_trainer *t, bool loss_ok, bool *push) {
    bool grads_ok = true;
    float *g = ct_params_grads(t->params);
    int64_t n = ct_params_numel(t->params);
    *push = true;
    if (t->p.grad_clip_norm > 0.0f) {
        float norm;
        CT_TRY(ct_optim_clip_grad_norm(t->ctx, t->params, t->p.grad_clip_norm, &norm));
        t->grad_norm = norm;
        grads_ok = isfinite(norm);
    } else if (t->p.check_grads) {
        CT_TRY(ct_nonfinite_check(t->ctx, g, n, &grads_ok));
    }
    ct_nonfinite_action action;
    CT_TRY(ct_nonfinite_decide(t->ctx, &t->nf, loss_ok, grads_ok, &action));
    if (action == CT_NONFINITE_ACTION_SKIP_UPDATE) {
        ct_params_zero_grad(t->params);
        t->skipped++;
        ct_log(t->ctx, CT_LOG_WARN,
               "rank %lld: non-finite %s at global step %lld: its push skipped (%lld skipped "
               "on this rank)",
               (long long)t->ps->rank, loss_ok ? "gradients" : "loss", (long long)t->step + 1,
               (long long)t->skipped);
        *push = false;
        return CT_OK;
    }
    if (action != CT_NONFINITE_ACTION_CONTINUE)
        return ct_err_wrap(t->ctx, "rank %lld, global step %lld", (long long)t->ps->rank,
                           (long long)t->step + 1);
    if (t->p.grad_clip_value > 0.0f)
        CT_TRY(ct_optim_clip_grad_value(t->ctx, t->params, t->p.grad_clip_value));
    return CT_OK;
}

ct_status ct_train_ps_step(ct_trainer *t, bool loss_ok) {
    bool push;
    /* the cadences count from the step they last saw: one a checkpoint's catch-up moved on
       (ct_train_ps_gather) still fires at the multiples it passed */
    t->step_before = t->ps->gathered_from >= 0 ? t->ps->gathered_from : t->step;
    t->ps->gathered_from = -1;
    CT_TRY(prepare_push(t, loss_ok, &push));
    if (!push) return CT_OK;
    int64_t step = t->step;
    float lr = ct_optim_lr(t->opt);
    bool stop;
    /* rank 0 pulls every step: what it evaluates and logs is the global step's weights */
    CT_TRY(exchange(t, true, true, &step, &lr, &stop));
    ct_params_zero_grad(t->params);
    if (step > t->step) t->step = step;
    return ct_optim_set_lr(t->opt, lr);
}

/* A worker other than rank 0: batches of its shard, epoch after epoch, each one's gradient
 * pushed, until a server says the run is over. */
static ct_status work(ct_trainer *t) {
    ct_train_ps *ps = t->ps;
    int64_t total = ct_loader_batches_per_epoch(t->train), step = t->step;
    int64_t limit = t->p.limit_train_batches && t->p.limit_train_batches < total
                        ? t->p.limit_train_batches
                        : total;
    float lr;
    bool stop = false;
    CT_TRY(exchange(t, false, true, &step, &lr, &stop));
    while (!stop) {
        ct_batch b;
        CT_TRY(ct_loader_next(t->train, &b));
        if (b.size == 0) continue; /* an epoch's end: the next one begins */
        if (b.number >= limit) {
            CT_TRY(ct_train_skip_epoch(t->train));
            continue;
        }
        ct_comm_set_step(ps->world, step + 1, "training");
        ct_train_straggle_start(t);
        ct_graph_reset(t->g);
        ct_tensor *out, *y;
        int64_t items;
        ct_tensor *l = ct_train_forward_loss(t, &b, "train", &out, &y, &items);
        if (!l) return ct_train_failure(t, "training");
        bool loss_ok = isfinite(((const float *)l->data)[0]);
        if (ct_graph_backward(t->g, l) != CT_OK) return ct_train_failure(t, "training backward");
        t->step = step;
        bool push;
        CT_TRY(prepare_push(t, loss_ok, &push));
        if (push) {
            bool pull = ++ps->since_pull >= t->p.ps_pull_every;
            CT_TRY(exchange(t, true, pull, &step, &lr, &stop));
            ct_params_zero_grad(t->params);
        } else { /* a skipped push: the weights again, and whether the run is over */
            CT_TRY(exchange(t, false, true, &step, &lr, &stop));
        }
        ct_train_straggle_end(t);
    }
    t->step = step;
    /* to every server, also those that did not say stop yet (several servers) */
    ps_head h;
    memset(&h, 0, sizeof h);
    h.kind = PS_BYE;
    for (int64_t j = 0; j < ps->servers; j++)
        CT_TRY(ct_comm_send(ps->world, &h, sizeof h, ps->first + j, TAG_REQ));
    return CT_OK;
}

/* ---- rank 0: the log window and checkpoints ---- */

int64_t ct_train_ps_values(ct_trainer *t, int64_t k) {
    ct_train_ps *ps = t->ps;
    ct_metric_value *v = t->train_values;
    v[k].name = "train/staleness_mean";
    v[k++].value = ps->stale_n > 0.0 ? ps->stale_sum / ps->stale_n : 0.0;
    v[k].name = "train/staleness_max";
    v[k++].value = ps->stale_max;
    v[k].name = "train/pull_wait_ms";
    v[k++].value = ps->waits_n > 0.0 ? ps->pull_ms_sum / ps->waits_n : 0.0;
    v[k].name = "train/push_wait_ms";
    v[k++].value = ps->waits_n > 0.0 ? ps->push_ms_sum / ps->waits_n : 0.0;
    double all = 0.0;
    for (int64_t r = 0; r < ps->workers; r++)
        all += ps->shares[r] - ps->shares_start[r];
    for (int64_t r = 0; r < ps->workers && r < CT_PS_MAX_SHARES; r++) {
        v[k].name = ps->share_names[r];
        v[k++].value = all > 0.0 ? (ps->shares[r] - ps->shares_start[r]) / all : 0.0;
    }
    memcpy(ps->shares_start, ps->shares, (size_t)ps->size * sizeof(double));
    ps->stale_sum = ps->stale_max = ps->stale_n = 0.0;
    ps->push_ms_sum = ps->pull_ms_sum = ps->waits_n = 0.0;
    return k;
}

/* A control message from rank 0 to every server (CATCHUP with the targets). */
static ct_status control(ct_trainer *t, int64_t kind) {
    ct_train_ps *ps = t->ps;
    ps_head h;
    memset(&h, 0, sizeof h);
    h.kind = kind;
    size_t bytes = sizeof h;
    memcpy(ps->out, &h, sizeof h);
    if (kind == PS_CATCHUP) {
        memcpy(ps->out + sizeof h, ps->targets, (size_t)ps->size * sizeof(int64_t));
        bytes += (size_t)ps->size * sizeof(int64_t);
    }
    for (int64_t j = 0; j < ps->servers; j++)
        CT_TRY(ct_comm_send(ps->world, ps->out, bytes, ps->first + j, TAG_CTRL));
    return CT_OK;
}

/* One server's state into rank 0's store, optimizer and schedule (server 0's counters and the
 * workers' positions). */
static ct_status take_state(ct_trainer *t, int64_t j, int64_t *step) {
    ct_train_ps *ps = t->ps;
    size_t bytes;
    int64_t from;
    int32_t tag;
    CT_TRY(receive(t, ps->first + j, TAG_CTRL_REPLY, &bytes, &from, &tag));
    int64_t lo = lo_of(ps, j), len = len_of(ps, j);
    int32_t nbuf = ct_optim_buffer_count(t->opt);
    size_t want = sizeof(ps_state) + (size_t)ps->size * 4 * sizeof(uint64_t) +
                  (size_t)len * sizeof(float) * (size_t)(1 + nbuf);
    if (bytes != want) return short_message(t, from, bytes, want);
    ps_state st;
    const unsigned char *at = ps->in;
    memcpy(&st, at, sizeof st);
    at += sizeof st;
    if (j == 0) {
        *step = st.step;
        CT_TRY(ct_optim_set_steps(t->opt, st.opt_steps));
        if (t->sched) CT_TRY(ct_schedule_set_state(t->sched, &st.sched));
        CT_TRY(ct_optim_set_lr(t->opt, (float)st.lr));
        /* the other workers' positions; rank 0's own is its loader's (gather_positions) */
        for (int64_t k = 1; k < ps->size && t->rank_pos; k++)
            memcpy(t->rank_pos + 4 * k, at + (size_t)k * 4 * sizeof(uint64_t),
                   4 * sizeof(uint64_t));
    } else if (st.step != *step) {
        return CT_FAIL(t->ctx, CT_ERR_INTERNAL,
                       "parameter servers: server %lld is at step %lld, server 0 at %lld after "
                       "a checkpoint's catch-up",
                       (long long)j, (long long)st.step, (long long)*step);
    }
    at += (size_t)ps->size * 4 * sizeof(uint64_t);
    memcpy(ct_params_values(t->params) + lo, at, (size_t)len * sizeof(float));
    at += (size_t)len * sizeof(float);
    for (int32_t k = 0; k < nbuf; k++) {
        const char *name;
        float *buf;
        CT_TRY(ct_optim_buffer(t->opt, k, &name, &buf));
        memcpy(buf + lo, at, (size_t)len * sizeof(float));
        at += (size_t)len * sizeof(float);
    }
    return CT_OK;
}

ct_status ct_train_ps_gather(ct_trainer *t) {
    ct_train_ps *ps = t->ps;
    size_t w = (size_t)ps->size;
    CT_TRY(control(t, PS_HOLD));
    memset(ps->targets, 0, w * sizeof(int64_t));
    for (int64_t j = 0; j < ps->servers; j++) {
        size_t bytes;
        int64_t from;
        int32_t tag;
        CT_TRY(receive(t, ps->first + j, TAG_CTRL_REPLY, &bytes, &from, &tag));
        if (bytes != w * sizeof(int64_t)) return short_message(t, from, bytes, w * 8);
        for (size_t k = 0; k < w; k++) {
            int64_t taken;
            memcpy(&taken, ps->in + k * sizeof taken, sizeof taken);
            if (taken > ps->targets[k]) ps->targets[k] = taken;
        }
    }
    CT_TRY(control(t, PS_CATCHUP));
    int64_t step = t->step;
    for (int64_t j = 0; j < ps->servers; j++)
        CT_TRY(take_state(t, j, &step));
    CT_TRY(control(t, PS_RESUME));
    if (step != t->step && ps->gathered_from < 0) ps->gathered_from = t->step;
    t->step = step;
    return CT_OK;
}

ct_status ct_train_ps_stop(ct_trainer *t) {
    return control(t, PS_STOP);
}

/* ---- fit ---- */

/* After every rank's part: rank 0's weights, buffers and counters to every rank, so that what
 * follows fit (the final test, the step every rank reports) is the same everywhere. */
static ct_status share_result(ct_trainer *t) {
    int64_t said[3] = {t->step, t->epoch, t->interrupt};
    CT_TRY(ct_comm_broadcast(t->comm, said, sizeof said, 0));
    t->step = said[0];
    t->epoch = said[1];
    t->interrupt = said[2] != 0;
    return ct_train_sync_replicas(t, true);
}

ct_status ct_train_ps_fit(ct_trainer *t) {
    ct_train_ps *ps = t->ps;
    /* every rank starts from rank 0's weights (fresh or resumed), as the sync strategy */
    CT_TRY(ct_train_sync_replicas(t, true));
    ct_status s;
    if (ps->srv) {
        ps->srv->finish = false;
        ps->srv->stopping = t->p.max_steps && t->step >= t->p.max_steps;
        for (int64_t k = 0; k < ps->size; k++)
            ps->srv->left[k] = ps->srv->owed[k] = false;
        s = serve(t);
    } else if (ps->rank != 0) {
        s = work(t);
        size_t bytes;
        int64_t from;
        int32_t tag;
        if (s == CT_OK) s = receive(t, 0, TAG_DONE, &bytes, &from, &tag);
    } else {
        int64_t step = t->step;
        float lr;
        bool stop;
        t->comm = ps->solo; /* its loop's collectives are its own */
        memset(ps->shares_start, 0, (size_t)ps->size * sizeof(double));
        s = exchange(t, false, true, &step, &lr, &stop);
        if (s == CT_OK) s = ct_train_fit_loop(t);
        t->comm = ps->world;
        if (s == CT_OK) s = control(t, PS_FINISH);
        /* the other workers wait for this before the collective below: rank 0's last
           evaluations and checkpoint may outlast the collective timeout */
        int64_t done = 1;
        for (int64_t k = 1; k < ps->workers && s == CT_OK; k++)
            s = ct_comm_send(ps->world, &done, sizeof done, k, TAG_DONE);
    }
    /* a failed rank ends the job (the command line aborts it): no collective after it */
    if (s != CT_OK) return s;
    return share_result(t);
}
