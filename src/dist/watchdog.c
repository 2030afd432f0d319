/*
 * watchdog.c - the MPI communicator's collective timeout: a thread per rank that notices when
 * the rank's own thread has waited in one collective longer than the timeout, learns from the
 * other ranks' watchdogs which ranks never arrived, and ends the job naming them.
 *
 * Why a thread, and not non-blocking collectives polled against a clock: the collectives stay
 * MPI's blocking ones. Open MPI's non-blocking all-reduce (libnbc) sums 3 or 5 ranks in
 * another order than MPI_Allreduce, so the weights would change, and in a quick check it moved
 * a 2 MB gradient buffer between 2 ranks of one machine 2.6 times slower (MPICH's, 1.4 times).
 * The rank's thread only marks each blocking call (ct_watchdog_enter/_leave: a counter and
 * three relaxed stores, then one release store and a store of 0); the watchdog samples the mark
 * every tick (a twentieth of the timeout, from 10 ms to 0.5 s) and sleeps in between, so
 * training pays nothing measurable.
 *
 * On a timeout (a wait first seen at least the timeout ago), the rank sends a report - its
 * collective's number, how long it waited, its step - to every other rank on `talk`, a
 * communicator only the watchdogs use, then listens for the others' reports for GRACE_S. A
 * watchdog that receives a report while its own rank waits in any collective answers with its
 * own at once, so a rank that arrived after the first one does not count as missing. The ranks
 * that sent nothing are those that did not arrive: a stopped process (SIGSTOP stops its
 * watchdog too), one stuck computing, a lost host. The lowest reporting rank logs the message
 * and ends the job with exit code 1; the others leave it HANDOFF_S to do so before they do it
 * themselves (two ranks aborting at once made MPICH's launcher report the wrong code).
 *
 * The timeout is a hard limit: a late rank that arrives during the grace period does not undo
 * it (the job ends anyway), so every rank sees the same outcome. A watchdog that finds its
 * process was not running for a while (a look due long ago: SIGSTOP, then the SIGCONT that
 * Open MPI's launcher sends before it kills) restarts its clock, and if reports arrive in the
 * seconds after, they are about its own rank: it stays silent rather than report a wait that
 * was not the others' fault.
 *
 * Ownership: mpi.c creates one watchdog per communicator and destroys it before MPI is
 * finalised; the watchdog borrows host, ctx, talk and end_job's self.
 */
#include "dist/dist_internal.h"

#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define GRACE_S     2.0  /* how long a timed-out rank listens for the other ranks' reports */
#define HANDOFF_S   10.0 /* how long the other reporters leave the lowest one to end the job */
#define TICK_MIN_S  0.01
#define TICK_MAX_S  0.5
#define FROZEN_S    1.0  /* a look this much later than due: the process was stopped */
#define MAX_TIMEOUT 1e12 /* seconds: beyond this, "never" (and the milliseconds fit int64) */
enum { TAG = 17, SHOWN = 16 /* ranks listed in the message */, NOTE = 3 };

struct ct_watchdog {
    const ct_mpi_host *host;
    ct_ctx *ctx;
    MPI_Comm talk;
    int rank, size;
    void (*end_job)(void *self, int code);
    void *self;
    uint64_t seq; /* collectives entered so far: the rank's thread's own counter */
    /* written by the rank's thread, read by the watchdog */
    _Atomic uint64_t waiting; /* the seq of the collective it waits in; 0: none */
    _Atomic int at_kind, at_root;
    _Atomic int64_t at_count, at_step;
    _Atomic(const char *) at_what;
    _Atomic int64_t timeout_ms; /* 0: off */
    pthread_mutex_t lock;
    pthread_cond_t wake; /* the timeout changed, or stop */
    bool stop;           /* under lock */
    pthread_t thread;
    int64_t note[NOTE]; /* this rank's report, sent without waiting: it must outlive the send */
    /* the wait that timed out, as it was when it did */
    double limit; /* the timeout, in seconds */
    int kind, root;
    int64_t count;
    const char *what;
};

void ct_watchdog_enter(ct_watchdog *w, ct_watch_kind kind, int64_t count, int root) {
    if (!w) return;
    atomic_store_explicit(&w->at_kind, (int)kind, memory_order_relaxed);
    atomic_store_explicit(&w->at_count, count, memory_order_relaxed);
    atomic_store_explicit(&w->at_root, root, memory_order_relaxed);
    atomic_store_explicit(&w->waiting, ++w->seq, memory_order_release);
}

void ct_watchdog_leave(ct_watchdog *w) {
    if (w) atomic_store_explicit(&w->waiting, 0, memory_order_relaxed);
}

void ct_watchdog_set_step(ct_watchdog *w, int64_t step, const char *what) {
    if (!w) return;
    atomic_store_explicit(&w->at_step, step, memory_order_relaxed);
    atomic_store_explicit(&w->at_what, what, memory_order_relaxed);
}

void ct_watchdog_set_timeout(ct_watchdog *w, double seconds) {
    if (!w) return;
    int64_t ms = (int64_t)((seconds < MAX_TIMEOUT ? seconds : MAX_TIMEOUT) * 1e3);
    if (seconds > 0.0 && ms < 1) ms = 1;
    (void)pthread_mutex_lock(&w->lock);
    atomic_store(&w->timeout_ms, ms);
    (void)pthread_cond_signal(&w->wake);
    (void)pthread_mutex_unlock(&w->lock);
}

static double now_s(void) {
    struct timespec t;
    (void)clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void pause_s(double s) {
    struct timespec t = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&t, &t) != 0) {
    }
}

/* ---- the message ---- */

static const struct {
    const char *name, *unit;
} k_kinds[] = {
    {"an all-reduce", "values"},
    {"a broadcast", "bytes"},
    {"a barrier", NULL},
    {"the wait for a non-blocking all-reduce", NULL},
    {"a shared-memory synchronisation", NULL},
    {"the creation of a shared-memory window", "bytes per rank"},
    {"the release of a shared-memory window", NULL},
};
_Static_assert(sizeof k_kinds / sizeof k_kinds[0] == CT_WATCH_KIND_COUNT, "a name for each kind");

/* snprintf that appends at *at, never past cap. */
static void put(char *buf, size_t cap, size_t *at, const char *fmt, ...) CT_PRINTF(4, 5);
static void put(char *buf, size_t cap, size_t *at, const char *fmt, ...) {
    if (*at >= cap) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf + *at, cap - *at, fmt, ap);
    va_end(ap);
    if (n > 0) *at += (size_t)n < cap - *at ? (size_t)n : cap - *at - 1;
}

/* "rank 3" or "ranks 1, 4, 7" (the first SHOWN, then how many more): the ranks that sent a
 * report (sent) or the ranks that did not (!sent). */
static void
put_ranks(char *buf, size_t cap, size_t *at, const int64_t *notes, int size, bool sent) {
    int n = 0;
    for (int r = 0; r < size; r++)
        n += (notes[(size_t)r * NOTE] != 0) == sent;
    put(buf, cap, at, "%s", n == 1 ? "rank" : "ranks");
    int shown = 0;
    for (int r = 0; r < size && shown < SHOWN; r++)
        if ((notes[(size_t)r * NOTE] != 0) == sent)
            put(buf, cap, at, "%s %d", shown++ ? "," : "", r);
    if (n > shown) put(buf, cap, at, " and %d more", n - shown);
}

/* Logs what this rank knows: notes[r * NOTE ...] is rank r's report (all zero: none came),
 * or NULL when the ranks could not compare notes (why says why). */
static void say(ct_watchdog *w, const int64_t *notes, const char *why) {
    char msg[1024];
    size_t at = 0;
    const int64_t *mine = w->note;
    int kind = w->kind;
    int64_t count = w->count;
    int root = w->root;
    const char *what = w->what;
    char where[256];
    size_t wat = 0;
    put(where, sizeof where, &wat, "collective #%lld (%s", (long long)mine[0],
        kind >= 0 && kind < CT_WATCH_KIND_COUNT ? k_kinds[kind].name : "?");
    if (kind >= 0 && kind < CT_WATCH_KIND_COUNT && k_kinds[kind].unit)
        put(where, sizeof where, &wat, " of %lld %s", (long long)count, k_kinds[kind].unit);
    if (kind == CT_WATCH_BROADCAST) put(where, sizeof where, &wat, " from rank %d", root);
    put(where, sizeof where, &wat, ")");
    if (what) put(where, sizeof where, &wat, " at step %lld (%s)", (long long)mine[2], what);
    double waited = (double)mine[1] * 1e-3;
    put(msg, sizeof msg, &at, "collective timeout: ");
    if (!notes) {
        put(msg, sizeof msg, &at,
            "rank %d waited %.1f s in %s; which ranks did not arrive is unknown (%s)", w->rank,
            waited, where, why);
    } else {
        int missing = 0;
        for (int r = 0; r < w->size; r++)
            missing += notes[(size_t)r * NOTE] == 0;
        if (missing) {
            put_ranks(msg, sizeof msg, &at, notes, w->size, false);
            put(msg, sizeof msg, &at, " did not arrive in %g s at %s, where ", w->limit, where);
            put_ranks(msg, sizeof msg, &at, notes, w->size, true);
            put(msg, sizeof msg, &at, " waited");
        } else { /* every rank waits: the late ones arrived during the grace period */
            put(msg, sizeof msg, &at, "rank %d waited %.1f s at %s; the others arrived", w->rank,
                waited, where);
            for (int r = 0, late = 0; r < w->size; r++) {
                const int64_t *n = notes + (size_t)r * NOTE;
                if (n[0] != mine[0])
                    put(msg, sizeof msg, &at, "%s rank %d at collective #%lld", late++ ? "," : ":",
                        r, (long long)n[0]);
            }
            put(msg, sizeof msg, &at, " only after the timeout");
        }
    }
    put(msg, sizeof msg, &at,
        ". A rank stopped, hung or on a lost host; or one that worked longer than the timeout "
        "between two collectives (an evaluation, a checkpoint): then raise "
        "trainer.collective_timeout_s (docs/distributed.md)");
    w->host->log(w->ctx, CT_LOG_ERROR, "%s", msg);
}

/* ---- the reports ---- */

/* Whether another rank's report waits to be received (not received here: fire does). */
static bool reported(ct_watchdog *w) {
    int flag = 0;
    return MPI_Iprobe(MPI_ANY_SOURCE, TAG, w->talk, &flag, MPI_STATUS_IGNORE) == MPI_SUCCESS &&
           flag;
}

/* This rank has waited in collective seq for `waited` s (limit: the timeout): tell the others,
 * hear from them, end the job. */
static void fire(ct_watchdog *w, uint64_t seq, double waited, double limit) {
    w->limit = limit;
    w->kind = atomic_load_explicit(&w->at_kind, memory_order_relaxed);
    w->count = atomic_load_explicit(&w->at_count, memory_order_relaxed);
    w->root = atomic_load_explicit(&w->at_root, memory_order_relaxed);
    w->what = atomic_load_explicit(&w->at_what, memory_order_relaxed);
    w->note[0] = (int64_t)seq;
    w->note[1] = (int64_t)(waited * 1e3);
    w->note[2] = atomic_load_explicit(&w->at_step, memory_order_relaxed);
    if (w->talk == MPI_COMM_NULL) {
        /* MPI_Abort from this thread is outside what MPI promises below MPI_THREAD_MULTIPLE;
           the alternative is a job that waits for ever */
        say(w, NULL,
            "MPI was initialised below MPI_THREAD_MULTIPLE, so the ranks' watchdogs "
            "cannot compare notes");
        w->end_job(w->self, 1);
        return;
    }
    for (int r = 0; r < w->size; r++) {
        MPI_Request req;
        if (r != w->rank &&
            MPI_Isend(w->note, NOTE, MPI_INT64_T, r, TAG, w->talk, &req) == MPI_SUCCESS)
            (void)MPI_Request_free(&req); /* a stopped rank never takes it */
    }
    int64_t *notes = calloc((size_t)w->size * NOTE, sizeof *notes);
    if (!notes) {
        say(w, NULL, "out of memory");
        w->end_job(w->self, 1);
        return;
    }
    memcpy(notes + (size_t)w->rank * NOTE, w->note, sizeof w->note);
    int heard = 1;
    for (double end = now_s() + GRACE_S; heard < w->size && now_s() < end;) {
        int flag = 0;
        MPI_Status st;
        if (MPI_Iprobe(MPI_ANY_SOURCE, TAG, w->talk, &flag, &st) != MPI_SUCCESS) break;
        if (!flag) {
            pause_s(0.002);
            continue;
        }
        int64_t n[NOTE];
        if (MPI_Recv(n, NOTE, MPI_INT64_T, st.MPI_SOURCE, TAG, w->talk, MPI_STATUS_IGNORE) !=
            MPI_SUCCESS)
            break;
        int64_t *slot = notes + (size_t)st.MPI_SOURCE * NOTE;
        if (slot[0] == 0 && n[0] != 0) heard++;
        memcpy(slot, n, sizeof n);
    }
    int lowest = 0;
    while (notes[(size_t)lowest * NOTE] == 0)
        lowest++;
    /* the lowest reporter ends the job; the others are still here only if it could not */
    if (lowest != w->rank) pause_s(HANDOFF_S);
    say(w, notes, NULL);
    free(notes);
    w->end_job(w->self, 1);
}

static void *watch(void *arg) {
    ct_watchdog *w = arg;
    uint64_t seen = 0;     /* the wait being timed */
    double since = 0;      /* when this thread first saw it: the wait is up to a tick older */
    double last = now_s(); /* this thread's previous look */
    double thawed = -1e9;  /* when it last found that the process had been stopped */
    bool muted = false;
    (void)pthread_mutex_lock(&w->lock);
    while (!w->stop) {
        int64_t ms = atomic_load(&w->timeout_ms);
        if (ms <= 0 || muted) {
            seen = 0;
            (void)pthread_cond_wait(&w->wake, &w->lock);
            last = now_s();
            continue;
        }
        double tick = (double)ms * 1e-3 / 20.0;
        tick = tick < TICK_MIN_S ? TICK_MIN_S : tick > TICK_MAX_S ? TICK_MAX_S : tick;
        struct timespec until;
        (void)clock_gettime(CLOCK_MONOTONIC, &until);
        long ns = until.tv_nsec + (long)(tick * 1e9);
        until.tv_sec += ns / 1000000000L;
        until.tv_nsec = ns % 1000000000L;
        (void)pthread_cond_timedwait(&w->wake, &w->lock, &until);
        if (w->stop) break;
        uint64_t cur = atomic_load_explicit(&w->waiting, memory_order_acquire);
        double t = now_s();
        if (t - last > tick + FROZEN_S) {
            /* this process did not run for a while (SIGSTOP, then the SIGCONT of a launcher
               that ends the job): the time does not count against the other ranks */
            thawed = t;
            seen = cur;
            since = last = t;
            continue;
        }
        last = t;
        bool heard = w->talk != MPI_COMM_NULL && cur != 0 && reported(w);
        if (heard && t - thawed < 2.0 * GRACE_S) {
            /* reports sent while this process was stopped (MPI may deliver them a few looks
               late) are about this rank, the one that did not arrive: it stays silent */
            muted = true;
            continue;
        }
        if (cur != seen) {
            seen = cur;
            since = t;
            continue;
        }
        if (cur == 0) continue;
        double waited = t - since;
        if (waited * 1e3 >= (double)ms || heard) {
            (void)pthread_mutex_unlock(&w->lock);
            fire(w, cur, waited, (double)ms * 1e-3); /* ends the job */
            return NULL;
        }
    }
    (void)pthread_mutex_unlock(&w->lock);
    return NULL;
}

ct_status ct_watchdog_create(const ct_mpi_host *host,
                             ct_ctx *ctx,
                             MPI_Comm talk,
                             int rank,
                             int size,
                             double timeout_s,
                             void (*end_job)(void *self, int code),
                             void *self,
                             ct_watchdog **out) {
    *out = NULL;
    /* malloc, not the context's allocator: the communicator's destroy has no context */
    ct_watchdog *w = calloc(1, sizeof *w);
    if (!w) return HOST_FAIL(host, ctx, CT_ERR_OOM, "allocating the collective watchdog");
    w->host = host;
    w->ctx = ctx;
    w->talk = talk;
    w->rank = rank;
    w->size = size;
    w->end_job = end_job;
    w->self = self;
    atomic_init(&w->waiting, 0);
    atomic_init(&w->at_kind, 0);
    atomic_init(&w->at_root, 0);
    atomic_init(&w->at_count, 0);
    atomic_init(&w->at_step, 0);
    atomic_init(&w->at_what, NULL);
    atomic_init(&w->timeout_ms, 0);
    pthread_condattr_t ca;
    bool ok = pthread_condattr_init(&ca) == 0;
    if (ok) {
        ok = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) == 0 &&
             pthread_cond_init(&w->wake, &ca) == 0;
        (void)pthread_condattr_destroy(&ca);
    }
    if (ok && pthread_mutex_init(&w->lock, NULL) != 0) {
        (void)pthread_cond_destroy(&w->wake);
        ok = false;
    }
    if (!ok) {
        free(w);
        return HOST_FAIL(host, ctx, CT_ERR_INTERNAL, "collective watchdog: cannot make its lock");
    }
    ct_watchdog_set_timeout(w, timeout_s);
    /* no signal for this thread: SIGINT and SIGTERM go to the threads that handle them */
    sigset_t all, old;
    (void)sigfillset(&all);
    (void)pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&w->thread, NULL, watch, w);
    (void)pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        (void)pthread_mutex_destroy(&w->lock);
        (void)pthread_cond_destroy(&w->wake);
        free(w);
        return HOST_FAIL(host, ctx, CT_ERR_INTERNAL,
                         "collective watchdog: cannot start its thread: %s", strerror(rc));
    }
    *out = w;
    return CT_OK;
}

void ct_watchdog_destroy(ct_watchdog *w) {
    if (!w) return;
    (void)pthread_mutex_lock(&w->lock);
    w->stop = true;
    (void)pthread_cond_signal(&w->wake);
    (void)pthread_mutex_unlock(&w->lock);
    (void)pthread_join(w->thread, NULL);
    (void)pthread_mutex_destroy(&w->lock);
    (void)pthread_cond_destroy(&w->wake);
    free(w);
}
