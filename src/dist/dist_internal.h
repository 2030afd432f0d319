/*
 * dist_internal.h - what the dist files share: the interface between libctrain and the MPI
 * communicator's own library, and the collective watchdog inside that library.
 *
 * The MPI communicator (mpi.c, watchdog.c) is built as libctrain_mpi, a shared library of its
 * own that is the only one to link MPI; libctrain loads it with dlopen when a program asks for
 * the MPI communicator (mpi_loader.c), so that a program that never does needs no MPI library
 * to run. The two meet only through ct_mpi_module, the one symbol libctrain_mpi exports, and
 * ct_mpi_host, libctrain's functions handed to it: libctrain_mpi links nothing of libctrain,
 * so it works the same under libctrain.so, libctrain.a and the ctrain tool. Not installed; not
 * part of the API.
 */
#ifndef CT_DIST_INTERNAL_H
#define CT_DIST_INTERNAL_H

#include "core/core_internal.h"
#include "ctrain/dist.h"

/* Raised whenever ct_mpi_host, ct_mpi_module or the vtable they carry change shape. */
#define CT_MPI_ABI   2
/* The name of the const ct_mpi_module that libctrain_mpi exports. */
#define CT_MPI_ENTRY "ct_mpi_exports"

/* libctrain's functions, for the messages of libctrain_mpi (ct_fail_at and ct_log). */
typedef struct ct_mpi_host {
    ct_status (*fail_at)(
        ct_ctx *ctx, ct_status code, const char *file, int line, const char *fmt, ...)
        CT_PRINTF(5, 6);
    void (*log)(const ct_ctx *ctx, ct_log_level level, const char *fmt, ...) CT_PRINTF(3, 4);
} ct_mpi_host;

/* What libctrain_mpi offers. abi comes first, so a library of another shape is still told
 * apart. */
typedef struct ct_mpi_module {
    int abi;             /* CT_MPI_ABI of its build */
    const char *version; /* ctrain's version of its build */
    /* MPI_Get_library_version's first line (no MPI_Init needed), truncated to fit size. */
    void (*library)(char *buf, size_t size);
    /* Starts MPI and makes the state the vtable works on (*self); the rules are
     * ct_comm_create_mpi's. host must outlive the state; failures go to ctx through it. */
    ct_status (*create)(const ct_mpi_host *host, ct_ctx *ctx, void **self);
    const ct_comm_vtable *vt;
} ct_mpi_module;

#ifdef CT_MPI_MODULE /* libctrain_mpi's own files */

#include <mpi.h>

CT_API extern const ct_mpi_module ct_mpi_exports;

/* CT_FAIL for libctrain_mpi: through the host, whose ct_fail_at records the message */
#define HOST_FAIL(host, ctx, code, ...)                                                            \
    (host)->fail_at((ctx), (code), __FILE__, __LINE__, __VA_ARGS__)

/* What a rank waits in, for the timeout's message (watchdog.c's table). Append-only. */
typedef enum ct_watch_kind {
    CT_WATCH_ALLREDUCE = 0, /* count: values */
    CT_WATCH_BROADCAST,     /* count: bytes, from root */
    CT_WATCH_BARRIER,
    CT_WATCH_REQUEST,       /* the completion of a non-blocking all-reduce (ct_comm_wait) */
    CT_WATCH_SHARED_SYNC,   /* ct_comm_shared_sync */
    CT_WATCH_SHARED_CREATE, /* count: bytes per rank */
    CT_WATCH_SHARED_FREE,
    CT_WATCH_KIND_COUNT
} ct_watch_kind;

typedef struct ct_watchdog ct_watchdog;

/* Starts the watchdog thread of rank `rank` of `size`, with a timeout of timeout_s (0: off).
 * talk: a communicator that only the watchdog uses, for its reports to the other ranks'
 * watchdogs; MPI_COMM_NULL when MPI runs below MPI_THREAD_MULTIPLE (the thread then makes no
 * MPI call but end_job's, and cannot name the ranks that did not arrive). end_job(self, 1) ends
 * the job. ctx takes the message (host->log); ctx and host must outlive the watchdog. */
CT_INTERNAL ct_status ct_watchdog_create(const ct_mpi_host *host,
                                         ct_ctx *ctx,
                                         MPI_Comm talk,
                                         int rank,
                                         int size,
                                         double timeout_s,
                                         void (*end_job)(void *self, int code),
                                         void *self,
                                         ct_watchdog **out);
/* Stops and joins the thread; NULL is ignored. */
CT_INTERNAL void ct_watchdog_destroy(ct_watchdog *w);
/* seconds >= 0 (0: off). */
CT_INTERNAL void ct_watchdog_set_timeout(ct_watchdog *w, double seconds);
CT_INTERNAL void ct_watchdog_set_step(ct_watchdog *w, int64_t step, const char *what);
/* Around each blocking collective call, on the thread that makes it; w may be NULL. */
CT_INTERNAL void ct_watchdog_enter(ct_watchdog *w, ct_watch_kind kind, int64_t count, int root);
CT_INTERNAL void ct_watchdog_leave(ct_watchdog *w);

#endif /* CT_MPI_MODULE */

#endif /* CT_DIST_INTERNAL_H */
