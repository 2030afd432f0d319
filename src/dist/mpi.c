/*
 * mpi.c - the MPI communicator (data-parallel training under mpirun or srun): the body of
 * libctrain_mpi, the library libctrain loads when a program asks for it (mpi_loader.c,
 * dist_internal.h). It reaches libctrain only through the ct_mpi_host it is given.
 *
 * The communicator owns a duplicate of MPI_COMM_WORLD (so ctrain's collectives never match a
 * host program's) with MPI_ERRORS_RETURN set, so a failed call becomes a status with
 * MPI_Error_string's text instead of an exit. It initialises MPI when nobody has (and then
 * finalises it on destroy); a host program that initialised MPI itself keeps that job.
 *
 * Sums use MPI_Allreduce with MPI_SUM: Open MPI and MPICH pick the algorithm from the world
 * size and the message size only, and every algorithm they have gives each rank the same bits,
 * so the result is reproducible from run to run and identical across ranks (the tests check
 * this). Counts above MPI's int are sent in chunks.
 *
 * Every blocking collective call is marked for the collective watchdog (watchdog.c), which ends
 * the job when a rank waits in one longer than the timeout, naming the ranks that did not
 * arrive. Its thread talks to the other ranks' watchdogs over a second duplicate of
 * MPI_COMM_WORLD while this one's thread is blocked, hence MPI_THREAD_MULTIPLE.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dist/dist_internal.h"

static void mpi_library(char *buf, size_t size) {
    char text[MPI_MAX_LIBRARY_VERSION_STRING + 1] = "";
    int len = 0;
    if (MPI_Get_library_version(text, &len) != MPI_SUCCESS) len = 0;
    text[len > 0 && len < MPI_MAX_LIBRARY_VERSION_STRING ? len : 0] = '\0';
    text[strcspn(text, "\n")] = '\0';
    if (size) (void)snprintf(buf, size, "%s", text[0] ? text : "unknown");
}

typedef struct mpi_comm {
    const ct_mpi_host *host;
    MPI_Comm comm;
    MPI_Comm talk; /* the watchdog's own (MPI_COMM_NULL below MPI_THREAD_MULTIPLE) */
    int rank, size;
    int local_size;  /* ranks in this one's shared-memory domain (MPI_COMM_TYPE_SHARED) */
    bool finalize;   /* this communicator initialised MPI */
    ct_watchdog *wd; /* NULL for one rank, which never waits */
} mpi_comm;

static ct_status mpi_fail(ct_ctx *ctx, const mpi_comm *m, int code, const char *what) {
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) len = 0;
    text[len] = '\0';
    return HOST_FAIL(m->host, ctx, CT_ERR_DIST, "MPI rank %d of %d: %s failed: %s", m->rank,
                     m->size, what, len ? text : "(no description)");
}

static int64_t mpi_rank(const void *self) {
    return ((const mpi_comm *)self)->rank;
}

static int64_t mpi_world(const void *self) {
    return ((const mpi_comm *)self)->size;
}

static int64_t mpi_local_size(const void *self) {
    return ((const mpi_comm *)self)->local_size;
}

/* MPI counts are int: larger buffers go in chunks (each one its own collective, in the same
 * order on every rank). */
enum { CHUNK = INT_MAX / 8 };

static ct_status
mpi_sum(mpi_comm *m, ct_ctx *ctx, void *buf, int64_t n, MPI_Datatype type, size_t elem) {
    char *p = buf;
    for (int64_t at = 0; at < n; at += CHUNK) {
        int count = (int)(n - at < CHUNK ? n - at : CHUNK);
        ct_watchdog_enter(m->wd, CT_WATCH_ALLREDUCE, count, 0);
        int rc = MPI_Allreduce(MPI_IN_PLACE, p + (size_t)at * elem, count, type, MPI_SUM, m->comm);
        ct_watchdog_leave(m->wd);
        if (rc != MPI_SUCCESS) return mpi_fail(ctx, m, rc, "MPI_Allreduce");
    }
    return CT_OK;
}

static ct_status mpi_sum_f32(void *self, ct_ctx *ctx, float *buf, int64_t n) {
    return mpi_sum(self, ctx, buf, n, MPI_FLOAT, sizeof(float));
}

static ct_status mpi_sum_f64(void *self, ct_ctx *ctx, double *buf, int64_t n) {
    return mpi_sum(self, ctx, buf, n, MPI_DOUBLE, sizeof(double));
}

static ct_status mpi_broadcast(void *self, ct_ctx *ctx, void *buf, size_t bytes, int64_t root) {
    mpi_comm *m = self;
    char *p = buf;
    for (size_t at = 0; at < bytes; at += CHUNK) {
        int count = (int)(bytes - at < CHUNK ? bytes - at : CHUNK);
        ct_watchdog_enter(m->wd, CT_WATCH_BROADCAST, count, (int)root);
        int rc = MPI_Bcast(p + at, count, MPI_BYTE, (int)root, m->comm);
        ct_watchdog_leave(m->wd);
        if (rc != MPI_SUCCESS) return mpi_fail(ctx, m, rc, "MPI_Bcast");
    }
    return CT_OK;
}

static ct_status mpi_barrier(void *self, ct_ctx *ctx) {
    mpi_comm *m = self;
    ct_watchdog_enter(m->wd, CT_WATCH_BARRIER, 0, 0);
    int rc = MPI_Barrier(m->comm);
    ct_watchdog_leave(m->wd);
    return rc == MPI_SUCCESS ? CT_OK : mpi_fail(ctx, m, rc, "MPI_Barrier");
}

_Static_assert(sizeof(MPI_Request) <= sizeof(((ct_comm_request *)0)->impl),
               "an MPI_Request fits a ct_comm_request");

static ct_status mpi_isum_f32(void *self, ct_ctx *ctx, float *buf, int64_t n, void *impl) {
    mpi_comm *m = self;
    MPI_Request r;
    int rc = MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, m->comm, &r);
    if (rc != MPI_SUCCESS) return mpi_fail(ctx, m, rc, "MPI_Iallreduce");
    memcpy(impl, &r, sizeof r);
    return CT_OK;
}

static ct_status mpi_wait(void *self, ct_ctx *ctx, void *impl) {
    mpi_comm *m = self;
    MPI_Request r;
    memcpy(&r, impl, sizeof r);
    ct_watchdog_enter(m->wd, CT_WATCH_REQUEST, 0, 0);
    int rc = MPI_Wait(&r, MPI_STATUS_IGNORE);
    ct_watchdog_leave(m->wd);
    return rc == MPI_SUCCESS ? CT_OK : mpi_fail(ctx, self, rc, "MPI_Wait");
}

static ct_status mpi_test(void *self, ct_ctx *ctx, void *impl, bool *done) {
    MPI_Request r;
    memcpy(&r, impl, sizeof r);
    int flag = 0, rc = MPI_Test(&r, &flag, MPI_STATUS_IGNORE);
    /* a completed request becomes MPI_REQUEST_NULL, which the later wait returns at once */
    memcpy(impl, &r, sizeof r);
    *done = flag != 0;
    return rc == MPI_SUCCESS ? CT_OK : mpi_fail(ctx, self, rc, "MPI_Test");
}

/* On MPI_COMM_WORLD, not our duplicate: MPICH ends only the aborting process when given
 * another communicator, leaving the rest of the job to wait for it.
 *
 * The launcher forwards a rank's output through a pipe that it reads when it gets to it, and
 * the abort arrives on another channel: MPICH's launcher, when it takes the abort first, can
 * kill the job with the rank's last lines (the message saying why) still unread. Half a
 * second, on a path that ends the job anyway, lets it read them. */
#define ABORT_DRAIN_NS 500000000L
static void mpi_abort(void *self, int code) {
    (void)self;
    (void)fflush(stdout);
    (void)fflush(stderr);
    struct timespec drain = {0, ABORT_DRAIN_NS};
    (void)nanosleep(&drain, NULL);
    (void)MPI_Abort(MPI_COMM_WORLD, code);
}

/* One MPI-3 shared window: every rank's segment is mapped into every rank's address space.
 * The window stays in a passive-target epoch (lock_all) for its life, so that MPI_Win_sync
 * orders each rank's plain loads and stores around the barrier (the "unified" memory model's
 * recipe for shared windows). */
static ct_status
mpi_shared_create(void *self, ct_ctx *ctx, size_t bytes, void **handle, void **segments) {
    mpi_comm *m = self;
    MPI_Win *win = calloc(1, sizeof *win);
    if (!win) return HOST_FAIL(m->host, ctx, CT_ERR_OOM, "allocating a shared window handle");
    MPI_Info info = MPI_INFO_NULL;
    int rc = MPI_Info_create(&info);
    /* each segment page-aligned on its own: no false sharing between neighbours' ends */
    if (rc == MPI_SUCCESS) rc = MPI_Info_set(info, "alloc_shared_noncontig", "true");
    void *base = NULL;
    ct_watchdog_enter(m->wd, CT_WATCH_SHARED_CREATE, (int64_t)bytes, 0);
    if (rc == MPI_SUCCESS)
        rc = MPI_Win_allocate_shared((MPI_Aint)bytes, 1, info, m->comm, &base, win);
    ct_watchdog_leave(m->wd);
    if (info != MPI_INFO_NULL) (void)MPI_Info_free(&info);
    if (rc != MPI_SUCCESS) {
        free(win);
        return mpi_fail(ctx, m, rc, "MPI_Win_allocate_shared");
    }
    /* a window's errors are fatal by default: it does not inherit the communicator's handler */
    rc = MPI_Win_set_errhandler(*win, MPI_ERRORS_RETURN);
    /* plain loads and stores see each other's writes after MPI_Win_sync only in the unified
       model, which shared windows have on every implementation we know; refuse another */
    int *model = NULL, found = 0;
    if (rc == MPI_SUCCESS) rc = MPI_Win_get_attr(*win, MPI_WIN_MODEL, &model, &found);
    if (rc == MPI_SUCCESS && found && model && *model != MPI_WIN_UNIFIED) {
        (void)MPI_Win_free(win);
        free(win);
        return HOST_FAIL(m->host, ctx, CT_ERR_DIST,
                         "MPI rank %d of %d: the shared window's memory model is not "
                         "MPI_WIN_UNIFIED",
                         m->rank, m->size);
    }
    for (int r = 0; rc == MPI_SUCCESS && r < m->size; r++) {
        MPI_Aint size = 0;
        int unit = 0;
        rc = MPI_Win_shared_query(*win, r, &size, &unit, &segments[r]);
    }
    if (rc == MPI_SUCCESS) rc = MPI_Win_lock_all(MPI_MODE_NOCHECK, *win);
    if (rc != MPI_SUCCESS) {
        ct_status s = mpi_fail(ctx, m, rc, "mapping the shared window");
        (void)MPI_Win_free(win);
        free(win);
        return s;
    }
    *handle = win;
    return CT_OK;
}

static ct_status mpi_shared_sync(void *self, ct_ctx *ctx, void *handle) {
    mpi_comm *m = self;
    MPI_Win *win = handle;
    int rc = MPI_Win_sync(*win);
    ct_watchdog_enter(m->wd, CT_WATCH_SHARED_SYNC, 0, 0);
    if (rc == MPI_SUCCESS) rc = MPI_Barrier(m->comm);
    ct_watchdog_leave(m->wd);
    if (rc == MPI_SUCCESS) rc = MPI_Win_sync(*win);
    return rc == MPI_SUCCESS ? CT_OK : mpi_fail(ctx, m, rc, "synchronising the shared window");
}

static void mpi_shared_destroy(void *self, void *handle) {
    mpi_comm *m = self;
    MPI_Win *win = handle;
    int finalized = 0;
    (void)MPI_Finalized(&finalized);
    if (!finalized) {
        (void)MPI_Win_unlock_all(*win);
        ct_watchdog_enter(m->wd, CT_WATCH_SHARED_FREE, 0, 0);
        (void)MPI_Win_free(win);
        ct_watchdog_leave(m->wd);
    }
    free(win);
}

static ct_status mpi_set_timeout(void *self, ct_ctx *ctx, double seconds) {
    (void)ctx;
    ct_watchdog_set_timeout(((mpi_comm *)self)->wd, seconds);
    return CT_OK;
}

static void mpi_set_step(void *self, int64_t step, const char *what) {
    ct_watchdog_set_step(((mpi_comm *)self)->wd, step, what);
}

/* Point-to-point (the parameter-server strategy): on the same duplicate as the collectives,
 * which MPI matches apart from them; not marked for the watchdog, since a server waits for work
 * as long as the workers take. */
static ct_status mpi_isend(
    void *self, ct_ctx *ctx, const void *buf, size_t bytes, int64_t dest, int32_t tag, void *impl) {
    mpi_comm *m = self;
    if (bytes > INT_MAX)
        return HOST_FAIL(m->host, ctx, CT_ERR_DIST,
                         "MPI rank %d of %d: a message of %zu bytes to rank %lld exceeds MPI's "
                         "count of %d",
                         m->rank, m->size, bytes, (long long)dest, INT_MAX);
    MPI_Request r;
    int rc = MPI_Isend(buf, (int)bytes, MPI_BYTE, (int)dest, tag, m->comm, &r);
    if (rc != MPI_SUCCESS) return mpi_fail(ctx, m, rc, "MPI_Isend");
    memcpy(impl, &r, sizeof r);
    return CT_OK;
}

static ct_status mpi_wait_send(void *self, ct_ctx *ctx, void *impl) {
    MPI_Request r;
    memcpy(&r, impl, sizeof r);
    int rc = MPI_Wait(&r, MPI_STATUS_IGNORE);
    return rc == MPI_SUCCESS ? CT_OK : mpi_fail(ctx, self, rc, "MPI_Wait (a send)");
}

static ct_status mpi_probe(void *self,
                           ct_ctx *ctx,
                           int64_t source,
                           int32_t tag,
                           int64_t *from,
                           int32_t *tag_out,
                           size_t *bytes) {
    mpi_comm *m = self;
    MPI_Status st;
    int count = 0;
    int rc = MPI_Probe(source < 0 ? MPI_ANY_SOURCE : (int)source, tag < 0 ? MPI_ANY_TAG : tag,
                       m->comm, &st);
    if (rc == MPI_SUCCESS) rc = MPI_Get_count(&st, MPI_BYTE, &count);
    if (rc != MPI_SUCCESS) return mpi_fail(ctx, m, rc, "MPI_Probe");
    *from = st.MPI_SOURCE;
    *tag_out = st.MPI_TAG;
    *bytes = (size_t)count;
    return CT_OK;
}

static ct_status
mpi_recv(void *self, ct_ctx *ctx, void *buf, size_t bytes, int64_t source, int32_t tag) {
    mpi_comm *m = self;
    if (bytes > INT_MAX)
        return HOST_FAIL(m->host, ctx, CT_ERR_DIST,
                         "MPI rank %d of %d: a message of %zu bytes exceeds MPI's count of %d",
                         m->rank, m->size, bytes, INT_MAX);
    MPI_Status st;
    int rc = MPI_Recv(buf, (int)bytes, MPI_BYTE, (int)source, tag, m->comm, &st);
    return rc == MPI_SUCCESS ? CT_OK : mpi_fail(ctx, m, rc, "MPI_Recv");
}

static void mpi_destroy(void *self) {
    mpi_comm *m = self;
    if (!m) return;
    ct_watchdog_destroy(m->wd); /* its thread makes MPI calls: before anything is freed */
    int finalized = 0;
    (void)MPI_Finalized(&finalized);
    if (!finalized) {
        if (m->talk != MPI_COMM_NULL) (void)MPI_Comm_free(&m->talk);
        if (m->comm != MPI_COMM_NULL) (void)MPI_Comm_free(&m->comm);
        if (m->finalize) (void)MPI_Finalize();
    }
    free(m);
}

static const ct_comm_vtable mpi_vt = {
    "mpi",           mpi_rank,          mpi_world,       mpi_sum_f32,
    mpi_sum_f64,     mpi_broadcast,     mpi_barrier,     mpi_destroy,
    mpi_abort,       mpi_isum_f32,      mpi_wait,        mpi_test,
    mpi_local_size,  mpi_shared_create, mpi_shared_sync, mpi_shared_destroy,
    mpi_set_timeout, mpi_set_step,      mpi_isend,       mpi_wait_send,
    mpi_probe,       mpi_recv,
};

static ct_status mpi_create(const ct_mpi_host *host, ct_ctx *ctx, void **self) {
    *self = NULL;
    /* malloc, not the context's allocator: the vtable's destroy has no context */
    mpi_comm *m = calloc(1, sizeof *m);
    if (!m) return HOST_FAIL(host, ctx, CT_ERR_OOM, "allocating the MPI communicator");
    m->host = host;
    m->comm = m->talk = MPI_COMM_NULL;
    /* MULTIPLE: the collectives are this thread's alone (the loader's and OpenMP's threads never
       call MPI), but the watchdog's thread sends and receives while this one waits in one */
    int inited = 0, provided = MPI_THREAD_SINGLE, rc = MPI_Initialized(&inited);
    if (rc == MPI_SUCCESS && !inited) {
        rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided);
        m->finalize = rc == MPI_SUCCESS;
    } else if (rc == MPI_SUCCESS) {
        rc = MPI_Query_thread(&provided);
    }
    if (rc == MPI_SUCCESS) rc = MPI_Comm_dup(MPI_COMM_WORLD, &m->comm);
    if (rc == MPI_SUCCESS && provided >= MPI_THREAD_MULTIPLE)
        rc = MPI_Comm_dup(MPI_COMM_WORLD, &m->talk);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_set_errhandler(m->comm, MPI_ERRORS_RETURN);
    if (rc == MPI_SUCCESS && m->talk != MPI_COMM_NULL)
        rc = MPI_Comm_set_errhandler(m->talk, MPI_ERRORS_RETURN);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_rank(m->comm, &m->rank);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_size(m->comm, &m->size);
    MPI_Comm node = MPI_COMM_NULL;
    if (rc == MPI_SUCCESS)
        rc = MPI_Comm_split_type(m->comm, MPI_COMM_TYPE_SHARED, m->rank, MPI_INFO_NULL, &node);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_size(node, &m->local_size);
    if (node != MPI_COMM_NULL) (void)MPI_Comm_free(&node);
    if (rc != MPI_SUCCESS) {
        ct_status s = mpi_fail(ctx, m, rc, "starting MPI");
        mpi_destroy(m);
        return s;
    }
    if (m->size > 1) {
        ct_status s = ct_watchdog_create(host, ctx, m->talk, m->rank, m->size,
                                         CT_COMM_DEFAULT_TIMEOUT_S, mpi_abort, m, &m->wd);
        if (s != CT_OK) {
            mpi_destroy(m);
            return s;
        }
    }
    *self = m;
    return CT_OK;
}

CT_API const ct_mpi_module ct_mpi_exports = {
    CT_MPI_ABI, CT_VERSION_STRING, mpi_library, mpi_create, &mpi_vt,
};
