/*
 * dist_internal.h - what the MPI communicator's files share: the collective watchdog
 * (watchdog.c) that mpi.c starts and tells about each blocking collective call. Not installed;
 * not part of the API.
 */
#ifndef CT_DIST_INTERNAL_H
#define CT_DIST_INTERNAL_H

#ifdef CT_HAVE_MPI

#include <mpi.h>

#include "core/core_internal.h"

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
 * the job. ctx takes the message (ct_log) and must outlive the watchdog. */
CT_INTERNAL ct_status ct_watchdog_create(ct_ctx *ctx,
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

#endif /* CT_HAVE_MPI */

#endif /* CT_DIST_INTERNAL_H */
