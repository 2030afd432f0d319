/*
 * dist.h - the communicator: rank, world size, sum all-reduce of a flat buffer, broadcast and
 * barrier, and the collective timeout that keeps a stopped rank from hanging the job. The trainer
 * makes every cross-process reduction and every "rank 0 only" decision through it, so that
 * data-parallel training over MPI is one more implementation of this interface and nothing else.
 *
 * Implementations: "single" (one process: all-reduce and broadcast leave the buffer as it is)
 * and "mpi" (when the build found MPI: docs/distributed.md), which lives in a library of its
 * own, libctrain_mpi, loaded with dlopen by ct_comm_create_mpi and ct_comm_mpi_library only, so
 * that a program that calls neither needs no MPI library. A program or plugin can provide its
 * own through ct_comm_create_with.
 *
 * Ownership: ct_comm_create_* returns a communicator the caller frees with ct_comm_destroy;
 * buffers passed to its calls are borrowed for the call only. Calls are collective: every rank
 * makes the same calls in the same order.
 */
#ifndef CTRAIN_DIST_H
#define CTRAIN_DIST_H

#include "ctrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ct_comm ct_comm;

/* A non-blocking all-reduce in flight, in storage the caller owns (so starting one allocates
 * nothing): impl holds the implementation's handle (an MPI_Request). */
typedef struct ct_comm_request {
    bool active;
    unsigned char impl[32];
} ct_comm_request;

/* The functions behind a communicator. Every status other than CT_OK must come with a message
 * recorded in ctx (for MPI, MPI_Error_string's text); self is the implementation's state. */
typedef struct ct_comm_vtable {
    const char *name;
    int64_t (*rank)(const void *self);
    int64_t (*world_size)(const void *self);
    /* buf[i] = sum over ranks of buf[i]. Implementations must sum in rank order (or another
     * order fixed by the world size) so that results do not depend on timing. */
    ct_status (*allreduce_sum_f32)(void *self, ct_ctx *ctx, float *buf, int64_t n);
    ct_status (*allreduce_sum_f64)(void *self, ct_ctx *ctx, double *buf, int64_t n);
    /* Every rank receives root's bytes. */
    ct_status (*broadcast)(void *self, ct_ctx *ctx, void *buf, size_t bytes, int64_t root);
    ct_status (*barrier)(void *self, ct_ctx *ctx);
    void (*destroy)(void *self);
    /* Ends every rank's process (MPI_Abort), for a rank that failed while the others may wait
     * in a collective; NULL for one process. */
    void (*abort)(void *self, int code);
    /* Optional (NULL: ct_comm_iallreduce_sum_f32 reduces at once). Starts buf's sum over ranks
     * with its handle in impl (32 bytes); wait completes it; test advances it without blocking
     * and says whether it is complete. */
    ct_status (*iallreduce_sum_f32)(void *self, ct_ctx *ctx, float *buf, int64_t n, void *impl);
    ct_status (*wait)(void *self, ct_ctx *ctx, void *impl);
    ct_status (*test)(void *self, ct_ctx *ctx, void *impl, bool *done);
    /* Optional (NULL: 1). How many ranks share this rank's machine (its shared memory), this
     * one included: world_size on every rank when the whole job runs on one machine. Equal to
     * world_size on every rank or on none: the trainer's automatic bucketing takes the same
     * path on every rank from it (MPI_COMM_TYPE_SHARED gives that). */
    int64_t (*local_size)(const void *self);
    /* Optional (NULL: the communicator cannot share memory). Memory that every rank can read
     * and write: shared_create gives each rank a segment of `bytes` (collective), puts an
     * opaque handle in *handle and each rank's segment address in segments[0..world_size);
     * shared_sync is a barrier after which each rank sees what the others wrote before it;
     * shared_destroy releases it (collective). Implementations may refuse (CT_ERR_DIST with a
     * message) when the ranks do not share a machine. */
    ct_status (*shared_create)(
        void *self, ct_ctx *ctx, size_t bytes, void **handle, void **segments);
    ct_status (*shared_sync)(void *self, ct_ctx *ctx, void *handle);
    void (*shared_destroy)(void *self, void *handle);
    /* Optional (NULL: no collective timeout). seconds >= 0 (0: off), already checked. */
    ct_status (*set_timeout)(void *self, ct_ctx *ctx, double seconds);
    /* Optional (NULL: ignored). What ct_comm_set_step says, for the timeout's message. */
    void (*set_step)(void *self, int64_t step, const char *what);
    /* Optional, all four or none (NULL: no point-to-point messages, which the
       parameter-server strategy needs). Messages of bytes between two ranks, matched by
       source and tag (>= 0); between one pair of ranks with one tag they arrive in the order
       sent. isend starts a send with its handle in impl (32 bytes), buf borrowed until
       wait_send completes it; probe waits for a message from source (-1: any) with tag (-1:
       any) and gives its source, tag and size without receiving it; recv receives the one of
       exactly `bytes` from source with tag. None counts for the collective timeout: a server
       waits for work as long as it takes. */
    ct_status (*isend)(void *self,
                       ct_ctx *ctx,
                       const void *buf,
                       size_t bytes,
                       int64_t dest,
                       int32_t tag,
                       void *impl);
    ct_status (*wait_send)(void *self, ct_ctx *ctx, void *impl);
    ct_status (*probe)(void *self,
                       ct_ctx *ctx,
                       int64_t source,
                       int32_t tag,
                       int64_t *from,
                       int32_t *tag_out,
                       size_t *bytes);
    ct_status (*recv)(
        void *self, ct_ctx *ctx, void *buf, size_t bytes, int64_t source, int32_t tag);
} ct_comm_vtable;

/* The one-process communicator: rank 0 of 1. */
CT_API ct_status ct_comm_create_single(ct_ctx *ctx, ct_comm **out);
/* The MPI communicator over a duplicate of MPI_COMM_WORLD, initialising MPI unless the program
 * did, and finalising it on destroy if it did. Loads libctrain_mpi first (CTRAIN_MPI_LIBRARY,
 * else beside libctrain or the program, else by soname: docs/distributed.md), which stays
 * loaded. Fails with CT_ERR_DIST when the build has no MPI, when libctrain_mpi or the MPI
 * library cannot be loaded (the message names the file and the dynamic loader's reason) or
 * when MPI cannot start. Only the calling thread makes collectives; the communicator's own
 * watchdog thread (ct_comm_set_timeout) makes point-to-point calls of its own while that thread
 * waits in one, so MPI is initialised at MPI_THREAD_MULTIPLE. A program that initialised MPI
 * below that level keeps the timeout, but its message cannot name the ranks that did not
 * arrive. The collective timeout starts at CT_COMM_DEFAULT_TIMEOUT_S. */
CT_API ct_status ct_comm_create_mpi(ct_ctx *ctx, ct_comm **out);
/* Whether this build has the MPI communicator (whether its library loads is known only when
 * ct_comm_create_mpi or ct_comm_mpi_library loads it). */
CT_API bool ct_comm_mpi_available(void);
/* The first line of the MPI library's own description of itself (MPI_Get_library_version,
 * which needs no MPI_Init) and the file libctrain_mpi was loaded from ("Open MPI v4.1.4,
 * package: ... (loaded on demand from /usr/lib/libctrain_mpi.so.0)"), loading it as
 * ct_comm_create_mpi does; "not available (why)" when it cannot be loaded, or "none (built
 * without MPI)"; into buf (truncated to fit). */
CT_API void ct_comm_mpi_library(char *buf, size_t size);
/* Whether a launcher (mpirun, mpiexec, srun) started this process as one of several ranks:
 * OMPI_COMM_WORLD_SIZE, PMI_SIZE or SLURM_STEP_NUM_TASKS above 1, or CTRAIN_MPI=1. */
CT_API bool ct_comm_launched(void);
/* A communicator over a caller's implementation; self is owned by the communicator from now on
 * (vt->destroy frees it), also on failure. */
CT_API ct_status ct_comm_create_with(ct_ctx *ctx,
                                     const ct_comm_vtable *vt,
                                     void *self,
                                     ct_comm **out);
CT_API void ct_comm_destroy(ct_comm *c);

CT_API const char *ct_comm_name(const ct_comm *c);
CT_API int64_t ct_comm_rank(const ct_comm *c);
CT_API int64_t ct_comm_world_size(const ct_comm *c);
/* True on rank 0: the rank that logs and writes files. */
CT_API bool ct_comm_is_root(const ct_comm *c);
/* The ranks on this rank's machine (1 for one process): equal to the world size when every
 * rank shares one machine, where MPI moves data through shared memory on the ranks' own
 * threads and overlapping communication with computation gains nothing. */
CT_API int64_t ct_comm_local_size(const ct_comm *c);

CT_API ct_status ct_comm_allreduce_sum_f32(ct_comm *c, float *buf, int64_t n);
CT_API ct_status ct_comm_allreduce_sum_f64(ct_comm *c, double *buf, int64_t n);
/* buf[i] = mean over ranks (the sum divided by the world size), for gradients. */
CT_API ct_status ct_comm_allreduce_mean_f32(ct_comm *c, float *buf, int64_t n);
CT_API ct_status ct_comm_broadcast(ct_comm *c, void *buf, size_t bytes, int64_t root);
CT_API ct_status ct_comm_barrier(ct_comm *c);
/* Starts buf[i] = sum over ranks of buf[i] without waiting for it: buf is not to be read or
 * written until ct_comm_wait(req). Every rank starts the same reductions in the same order.
 * An implementation without non-blocking reductions (or a buffer above 2^28 elements) reduces
 * at once, and the wait does nothing. */
CT_API ct_status ct_comm_iallreduce_sum_f32(ct_comm *c,
                                            float *buf,
                                            int64_t n,
                                            ct_comm_request *req);
/* Completes req (nothing to do when it is not active). */
CT_API ct_status ct_comm_wait(ct_comm *c, ct_comm_request *req);
/* Lets req progress (MPI libraries move data mostly inside MPI calls) without blocking. */
CT_API ct_status ct_comm_test(ct_comm *c, ct_comm_request *req);

/*
 * Shared memory between the ranks of a job that runs on one machine (MPI-3 shared windows):
 * what the trainer's sharded optimizer update moves gradients and weights through without an
 * all-reduce (docs/distributed.md). Create, sync and destroy are collective.
 *
 * ct_comm_can_share: whether the communicator offers it and every rank shares this machine
 * (local).
 * ct_comm_shared_create: a segment of `bytes` per rank, each readable and writable by every
 * rank; CT_ERR_DIST (with the reason) when the communicator cannot share memory.
 * ct_comm_shared_segment: rank's segment (rank in [0, world size)), or NULL (local).
 * ct_comm_shared_sync: a barrier after which every rank sees all writes made before it.
 * ct_comm_shared_destroy: frees it; collective, so every rank must call it (NULL is ignored).
 */
typedef struct ct_comm_shared ct_comm_shared;
CT_API bool ct_comm_can_share(const ct_comm *c);
CT_API ct_status ct_comm_shared_create(ct_comm *c, size_t bytes, ct_comm_shared **out);
CT_API void *ct_comm_shared_segment(const ct_comm_shared *s, int64_t rank);
CT_API ct_status ct_comm_shared_sync(ct_comm_shared *s);
CT_API void ct_comm_shared_destroy(ct_comm_shared *s);

/* Ends the whole job with exit code `code` when the communicator can (MPI); otherwise returns.
 * For a rank that failed: the others would wait for it in their next collective. */
CT_API void ct_comm_abort(ct_comm *c, int code);

/*
 * The collective timeout (docs/distributed.md, Failures): a rank that has waited longer than
 * `seconds` in one collective (an all-reduce, a broadcast, a barrier, a shared-memory
 * synchronisation or window, ct_comm_wait) takes it that another rank is stopped, hung or lost.
 * The waiting ranks tell each other so; the lowest of them logs, at error level through the
 * context's log, which ranks did not arrive, the collective (#k: the k-th blocking collective
 * call since the communicator's creation, the same on every rank; its kind and size), the
 * timeout and what ct_comm_set_step last said; and it ends the whole job with exit code 1
 * (ct_comm_abort). The job ends even if the late rank arrives in the meantime: a collective in
 * flight cannot be abandoned, so there is no status to return. The message comes from the
 * communicator's watchdog thread while this rank's own thread is blocked in the collective.
 *
 * The timeout is per wait, so it must exceed the longest time one rank can spend between two
 * collectives while the others wait: an evaluation (one rank's share may take longer), rank 0
 * writing a checkpoint, loading data at start-up. Checked every twentieth of it (at most every
 * half second), so the job ends between `seconds` and 1.1 x `seconds` (at most 1 s more) after
 * the wait began, plus about 3 s for the ranks to compare notes and abort.
 *
 * ct_comm_set_timeout: 0 turns it off; negative or NaN fails with CT_ERR_INVALID_ARG. A
 * communicator without a timeout (one process, which never waits; one whose vtable has no
 * set_timeout) ignores it.
 * ct_comm_set_step: what this rank is doing, for that message: its step and a phrase (`what`,
 * such as "training" or "evaluation", borrowed until the next call: a literal; NULL for none).
 * Two stores, no communication: cheap enough for every batch.
 */
/*
 * Point-to-point messages (the parameter-server strategy's): bytes sent by one rank to another
 * with a tag, not collective. Between one pair of ranks with one tag, messages are received in
 * the order sent. No wait here counts for the collective timeout. Floats travel as the sender
 * stores them: the ranks must share a byte order.
 *
 * ct_comm_has_p2p: whether the communicator offers them (MPI does; one process does not).
 * ct_comm_isend: starts sending buf (borrowed until ct_comm_wait_send(req)) to dest with tag
 * (>= 0); ct_comm_send: the same, waited for.
 * ct_comm_probe: waits for a message from source (CT_COMM_ANY_SOURCE: any) with tag
 * (CT_COMM_ANY_TAG: any) and gives its source, tag and size in bytes; it stays to be received.
 * ct_comm_recv: receives the message of exactly `bytes` from source with tag.
 * Errors: CT_ERR_DIST (no point-to-point, or the implementation's failure), CT_ERR_INVALID_ARG
 * (a rank out of range, a negative tag, a NULL buffer).
 */
#define CT_COMM_ANY_SOURCE (-1)
#define CT_COMM_ANY_TAG    (-1)
CT_API bool ct_comm_has_p2p(const ct_comm *c);
CT_API ct_status ct_comm_isend(
    ct_comm *c, const void *buf, size_t bytes, int64_t dest, int32_t tag, ct_comm_request *req);
CT_API ct_status ct_comm_wait_send(ct_comm *c, ct_comm_request *req);
CT_API ct_status ct_comm_send(ct_comm *c, const void *buf, size_t bytes, int64_t dest, int32_t tag);
CT_API ct_status ct_comm_probe(
    ct_comm *c, int64_t source, int32_t tag, int64_t *from, int32_t *tag_out, size_t *bytes);
CT_API ct_status ct_comm_recv(ct_comm *c, void *buf, size_t bytes, int64_t source, int32_t tag);

#define CT_COMM_DEFAULT_TIMEOUT_S 600.0
CT_API ct_status ct_comm_set_timeout(ct_comm *c, double seconds);
CT_API void ct_comm_set_step(ct_comm *c, int64_t step, const char *what);

#ifdef __cplusplus
}
#endif

#endif /* CTRAIN_DIST_H */
