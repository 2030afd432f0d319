/*
 * comm.c - the communicator front end (argument checks, the mean all-reduce) and the
 * single-process implementation, which has no collective timeout: it never waits.
 *
 * The front end validates what every implementation would otherwise have to (negative sizes,
 * a root out of range), so an implementation only moves bytes.
 */
#include <string.h>

#include "core/core_internal.h"
#include "ctrain/dist.h"

struct ct_comm {
    ct_ctx *ctx;
    const ct_comm_vtable *vt;
    void *self;
};

/* ---- the single-process implementation ---- */

static int64_t single_rank(const void *self) {
    (void)self;
    return 0;
}

static int64_t single_world(const void *self) {
    (void)self;
    return 1;
}

static ct_status single_reduce_f32(void *self, ct_ctx *ctx, float *buf, int64_t n) {
    (void)self, (void)ctx, (void)buf, (void)n;
    return CT_OK; /* the sum over one rank is the buffer itself */
}

static ct_status single_reduce_f64(void *self, ct_ctx *ctx, double *buf, int64_t n) {
    (void)self, (void)ctx, (void)buf, (void)n;
    return CT_OK;
}

static ct_status single_broadcast(void *self, ct_ctx *ctx, void *buf, size_t bytes, int64_t root) {
    (void)self, (void)ctx, (void)buf, (void)bytes, (void)root;
    return CT_OK;
}

static ct_status single_barrier(void *self, ct_ctx *ctx) {
    (void)self, (void)ctx;
    return CT_OK;
}

static void single_destroy(void *self) {
    (void)self;
}

static const ct_comm_vtable single_vt = {
    "single",
    single_rank,
    single_world,
    single_reduce_f32,
    single_reduce_f64,
    single_broadcast,
    single_barrier,
    single_destroy,
    NULL,
    NULL,
    NULL,
    NULL,
    NULL,
    NULL,
    NULL,
    NULL,
    NULL,
    NULL,
    NULL,
    NULL,
    NULL,
    NULL,
};

/* ---- front end ---- */

ct_status ct_comm_create_with(ct_ctx *ctx, const ct_comm_vtable *vt, void *self, ct_comm **out) {
    *out = NULL;
    if (!vt || !vt->rank || !vt->world_size || !vt->allreduce_sum_f32 || !vt->allreduce_sum_f64 ||
        !vt->broadcast || !vt->barrier || !vt->destroy) {
        if (vt && vt->destroy) vt->destroy(self);
        return CT_FAIL(ctx, CT_ERR_INVALID_ARG, "communicator: every vtable entry is required");
    }
    int64_t w = vt->world_size(self), r = vt->rank(self);
    if (w < 1 || r < 0 || r >= w) {
        vt->destroy(self);
        return CT_FAIL(ctx, CT_ERR_DIST, "communicator '%s': rank %lld of world size %lld",
                       vt->name ? vt->name : "?", (long long)r, (long long)w);
    }
    ct_comm *c = ct_alloc(ctx, sizeof *c);
    if (!c) {
        vt->destroy(self);
        return CT_FAIL(ctx, CT_ERR_OOM, "allocating a communicator");
    }
    c->ctx = ctx;
    c->vt = vt;
    c->self = self;
    *out = c;
    return CT_OK;
}

ct_status ct_comm_create_single(ct_ctx *ctx, ct_comm **out) {
    return ct_comm_create_with(ctx, &single_vt, NULL, out);
}

void ct_comm_destroy(ct_comm *c) {
    if (!c) return;
    c->vt->destroy(c->self);
    ct_free(c->ctx, c, sizeof *c);
}

const char *ct_comm_name(const ct_comm *c) {
    return c->vt->name ? c->vt->name : "";
}

int64_t ct_comm_rank(const ct_comm *c) {
    return c->vt->rank(c->self);
}

int64_t ct_comm_world_size(const ct_comm *c) {
    return c->vt->world_size(c->self);
}

bool ct_comm_is_root(const ct_comm *c) {
    return ct_comm_rank(c) == 0;
}

int64_t ct_comm_local_size(const ct_comm *c) {
    int64_t n = c->vt->local_size ? c->vt->local_size(c->self) : 1;
    int64_t w = ct_comm_world_size(c);
    return n < 1 ? 1 : n > w ? w : n;
}

static ct_status check_count(ct_comm *c, const char *what, const void *buf, int64_t n) {
    if (n < 0 || (n > 0 && !buf))
        return CT_FAIL(c->ctx, CT_ERR_INVALID_ARG, "%s: %lld elements at %p", what, (long long)n,
                       buf);
    return CT_OK;
}

ct_status ct_comm_allreduce_sum_f32(ct_comm *c, float *buf, int64_t n) {
    CT_TRY(check_count(c, "all-reduce", buf, n));
    return n ? c->vt->allreduce_sum_f32(c->self, c->ctx, buf, n) : CT_OK;
}

ct_status ct_comm_allreduce_sum_f64(ct_comm *c, double *buf, int64_t n) {
    CT_TRY(check_count(c, "all-reduce", buf, n));
    return n ? c->vt->allreduce_sum_f64(c->self, c->ctx, buf, n) : CT_OK;
}

ct_status ct_comm_allreduce_mean_f32(ct_comm *c, float *buf, int64_t n) {
    CT_TRY(ct_comm_allreduce_sum_f32(c, buf, n));
    int64_t w = ct_comm_world_size(c);
    if (w > 1) {
        float fw = (float)w; /* a division, as PyTorch's DDP: not a multiply by 1/w */
        int nt = ct_threads_for(c->ctx, n, 1);
        CT_OMP_FOR(nt)
        for (int64_t i = 0; i < n; i++)
            buf[i] /= fw;
    }
    return CT_OK;
}

ct_status ct_comm_broadcast(ct_comm *c, void *buf, size_t bytes, int64_t root) {
    if (root < 0 || root >= ct_comm_world_size(c))
        return CT_FAIL(c->ctx, CT_ERR_INVALID_ARG, "broadcast: root %lld of world size %lld",
                       (long long)root, (long long)ct_comm_world_size(c));
    if (bytes && !buf) return CT_FAIL(c->ctx, CT_ERR_INVALID_ARG, "broadcast: NULL buffer");
    return bytes ? c->vt->broadcast(c->self, c->ctx, buf, bytes, root) : CT_OK;
}

ct_status ct_comm_barrier(ct_comm *c) {
    return c->vt->barrier(c->self, c->ctx);
}

void ct_comm_abort(ct_comm *c, int code) {
    if (c && c->vt->abort && ct_comm_world_size(c) > 1) c->vt->abort(c->self, code);
}

ct_status ct_comm_set_timeout(ct_comm *c, double seconds) {
    if (!(seconds >= 0.0)) /* NaN too */
        return CT_FAIL(c->ctx, CT_ERR_INVALID_ARG,
                       "collective timeout: %g s, expected 0 (off) or a positive number of "
                       "seconds",
                       seconds);
    return c->vt->set_timeout ? c->vt->set_timeout(c->self, c->ctx, seconds) : CT_OK;
}

void ct_comm_set_step(ct_comm *c, int64_t step, const char *what) {
    if (c->vt->set_step) c->vt->set_step(c->self, step, what);
}

ct_status ct_comm_iallreduce_sum_f32(ct_comm *c, float *buf, int64_t n, ct_comm_request *req) {
    req->active = false;
    CT_TRY(check_count(c, "all-reduce", buf, n));
    if (n == 0) return CT_OK;
    if (!c->vt->iallreduce_sum_f32 || !c->vt->wait || n > ((int64_t)1 << 28))
        return c->vt->allreduce_sum_f32(c->self, c->ctx, buf, n);
    CT_TRY(c->vt->iallreduce_sum_f32(c->self, c->ctx, buf, n, req->impl));
    req->active = true;
    return CT_OK;
}

ct_status ct_comm_wait(ct_comm *c, ct_comm_request *req) {
    if (!req->active) return CT_OK;
    req->active = false;
    return c->vt->wait(c->self, c->ctx, req->impl);
}

ct_status ct_comm_test(ct_comm *c, ct_comm_request *req) {
    if (!req->active || !c->vt->test) return CT_OK;
    bool done = false;
    return c->vt->test(c->self, c->ctx, req->impl, &done);
}

/* ---- shared memory ---- */

struct ct_comm_shared {
    ct_comm *comm;
    void *handle;
    int64_t world;
    void **segments; /* world entries */
};

bool ct_comm_can_share(const ct_comm *c) {
    return c->vt->shared_create && c->vt->shared_sync && c->vt->shared_destroy &&
           ct_comm_local_size(c) == ct_comm_world_size(c);
}

ct_status ct_comm_shared_create(ct_comm *c, size_t bytes, ct_comm_shared **out) {
    *out = NULL;
    if (!ct_comm_can_share(c))
        return CT_FAIL(c->ctx, CT_ERR_DIST,
                       "communicator '%s': no shared memory between its %lld ranks (%s)",
                       c->vt->name, (long long)ct_comm_world_size(c),
                       c->vt->shared_create ? "they are not all on one machine"
                                            : "the implementation has none");
    int64_t world = ct_comm_world_size(c);
    ct_comm_shared *s = ct_alloc(c->ctx, sizeof *s);
    void **seg = ct_alloc(c->ctx, (size_t)world * sizeof *seg);
    if (!s || !seg) {
        ct_free(c->ctx, s, sizeof *s);
        ct_free(c->ctx, seg, (size_t)world * sizeof *seg);
        return CT_FAIL(c->ctx, CT_ERR_OOM, "allocating a shared-memory handle");
    }
    memset(seg, 0, (size_t)world * sizeof *seg);
    ct_status st = c->vt->shared_create(c->self, c->ctx, bytes, &s->handle, seg);
    if (st != CT_OK) {
        ct_free(c->ctx, s, sizeof *s);
        ct_free(c->ctx, seg, (size_t)world * sizeof *seg);
        return st;
    }
    s->comm = c;
    s->world = world;
    s->segments = seg;
    *out = s;
    return CT_OK;
}

void *ct_comm_shared_segment(const ct_comm_shared *s, int64_t rank) {
    return rank >= 0 && rank < s->world ? s->segments[rank] : NULL;
}

ct_status ct_comm_shared_sync(ct_comm_shared *s) {
    return s->comm->vt->shared_sync(s->comm->self, s->comm->ctx, s->handle);
}

void ct_comm_shared_destroy(ct_comm_shared *s) {
    if (!s) return;
    ct_ctx *ctx = s->comm->ctx;
    s->comm->vt->shared_destroy(s->comm->self, s->handle);
    ct_free(ctx, s->segments, (size_t)s->world * sizeof *s->segments);
    ct_free(ctx, s, sizeof *s);
}

/* ---- point-to-point ---- */

bool ct_comm_has_p2p(const ct_comm *c) {
    return c->vt->isend && c->vt->wait_send && c->vt->probe && c->vt->recv;
}

/* A rank (or, with any, CT_COMM_ANY_SOURCE) and a tag (or CT_COMM_ANY_TAG) that can be used. */
static ct_status check_peer(ct_comm *c, const char *what, int64_t rank, int32_t tag, bool any) {
    if (!ct_comm_has_p2p(c))
        return CT_FAIL(c->ctx, CT_ERR_DIST, "%s: communicator '%s' has no point-to-point messages",
                       what, ct_comm_name(c));
    int64_t w = ct_comm_world_size(c);
    if ((rank < 0 || rank >= w) && !(any && rank == CT_COMM_ANY_SOURCE))
        return CT_FAIL(c->ctx, CT_ERR_INVALID_ARG, "%s: rank %lld of world size %lld", what,
                       (long long)rank, (long long)w);
    if (tag < 0 && !(any && tag == CT_COMM_ANY_TAG))
        return CT_FAIL(c->ctx, CT_ERR_INVALID_ARG, "%s: tag %d, expected >= 0", what, (int)tag);
    return CT_OK;
}

ct_status ct_comm_isend(
    ct_comm *c, const void *buf, size_t bytes, int64_t dest, int32_t tag, ct_comm_request *req) {
    req->active = false;
    CT_TRY(check_peer(c, "send", dest, tag, false));
    if (bytes && !buf) return CT_FAIL(c->ctx, CT_ERR_INVALID_ARG, "send: NULL buffer");
    CT_TRY(c->vt->isend(c->self, c->ctx, buf, bytes, dest, tag, req->impl));
    req->active = true;
    return CT_OK;
}

ct_status ct_comm_wait_send(ct_comm *c, ct_comm_request *req) {
    if (!req->active) return CT_OK;
    req->active = false;
    return c->vt->wait_send(c->self, c->ctx, req->impl);
}

ct_status ct_comm_send(ct_comm *c, const void *buf, size_t bytes, int64_t dest, int32_t tag) {
    ct_comm_request req;
    CT_TRY(ct_comm_isend(c, buf, bytes, dest, tag, &req));
    return ct_comm_wait_send(c, &req);
}

ct_status ct_comm_probe(
    ct_comm *c, int64_t source, int32_t tag, int64_t *from, int32_t *tag_out, size_t *bytes) {
    CT_TRY(check_peer(c, "probe", source, tag, true));
    return c->vt->probe(c->self, c->ctx, source, tag, from, tag_out, bytes);
}

ct_status ct_comm_recv(ct_comm *c, void *buf, size_t bytes, int64_t source, int32_t tag) {
    CT_TRY(check_peer(c, "receive", source, tag, false));
    if (bytes && !buf) return CT_FAIL(c->ctx, CT_ERR_INVALID_ARG, "receive: NULL buffer");
    return c->vt->recv(c->self, c->ctx, buf, bytes, source, tag);
}
