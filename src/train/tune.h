/*
 * tune.h - the thread count of a training run fitted to the cores it actually gets.
 *
 * A run started on every core of its CPU affinity loses half its speed or more when another
 * process keeps one of those cores busy: the step's parallel loops wait at each barrier for the
 * thread that shares a core (see docs/performance.md, "Sharing the cores"). Fewer threads than
 * cores then run faster. The tuner finds the count by measuring, since nothing else tells
 * reliably how much of a core another process takes:
 *
 *  - after a warm-up (3 steps and 50 ms) it tries fewer threads once, whatever the load (a
 *    model too small for its threads runs faster on fewer);
 *  - then every CT_TUNE_PERIOD seconds it checks: with fewer threads than the most it tries
 *    more; at the most it tries fewer when this process's threads waited for a core (the
 *    kernel's run-queue time, read by the caller) for at least a tenth of the wall time since
 *    the last check, or every CT_TUNE_BLIND_PERIOD seconds where that reading is not
 *    available. A steady step time that drifts by a quarter calls for a check sooner, in its
 *    direction only: slower steps for a trial of fewer threads, faster ones of more;
 *  - a trial runs blocks of steps at the current count (A) and at the candidate (B) in the
 *    order A B B A, each block at least 2 steps and 15 ms, with one step to settle after each
 *    change of count, so that a drift of the step time over the trial (a warm-up, a load that
 *    comes or goes) weighs on both sides alike; more threads are kept if their steps are 5%
 *    faster, fewer if theirs are no slower where the threads waited for a core (the core they
 *    leave goes to the other process at no cost to the run) or 10% faster where they did not,
 *    and the tuner goes on in that direction while it gains; otherwise the old count comes
 *    back.
 *
 * The candidates are n - max(1, n/4) below and n + max(1, n/3) above (capped at the most):
 * 2 <-> 1 on two cores, 16 -> 12 -> 9 ... on sixteen. Results do not depend on the thread
 * count (the kernels' tiling is fixed), so the tuner changes speed only, never a value.
 *
 * The state is a plain struct advanced by ct_tune_step from the step times the caller
 * measures, so the policy is tested with made-up times (tests/unit/test_tune.c). Internal.
 */
#ifndef CT_TRAIN_TUNE_H
#define CT_TRAIN_TUNE_H

#include <stdbool.h>
#include <stdint.h>

#include "core/core_internal.h"
#include "ctrain/trainer.h"

#define CT_TUNE_PERIOD       5.0  /* seconds between checks of a steady run */
#define CT_TUNE_BLIND_PERIOD 20.0 /* between trials of fewer threads without run-queue times */

typedef enum ct_tune_phase {
    CT_TUNE_WARM,   /* the first steps: not measured */
    CT_TUNE_STEADY, /* at the chosen count until the next check */
    CT_TUNE_TRIAL,  /* measuring the current count and the candidate, A B B A */
    CT_TUNE_PHASE_COUNT
} ct_tune_phase;

/* Reads this process's total run-queue wait in seconds (monotone), or a negative value when it
 * cannot be read. */
typedef double (*ct_tune_wait_fn)(void *user);

typedef struct ct_tune {
    int64_t max;  /* the most threads: the count the run started with */
    int64_t cur;  /* the count the steps run at now */
    int64_t cand; /* TRIAL: the count being tried */
    int dir;      /* TRIAL: +1 more threads, -1 fewer */
    ct_tune_phase phase;
    int64_t steps;     /* WARM: steps so far; TRIAL: the index of the next step in the trial */
    int64_t block;     /* TRIAL: steps per block */
    int64_t settle;    /* TRIAL: steps to run before the trial's first (after a change) */
    double sum_a;      /* TRIAL: seconds of the measured steps at cur... */
    double sum_b;      /* ...and at cand */
    double share_b;    /* TRIAL: the share waited for a core over the B blocks; -1 unknown */
    double base_time;  /* seconds per step at cur, from the last trial */
    double ewma;       /* STEADY: running mean step time */
    double since;      /* when the current observation began (warm-up or steady period) */
    double wait_since; /* the run-queue wait then; negative: unknown */
    double next_check; /* STEADY: when the next check is due */
    double last_blind; /* when fewer threads were last tried without run-queue times */
    double waiting;    /* the last check's share of wall time waited for a core; -1 unknown */
    int64_t from;      /* a change not yet announced: the count before it (0: none)... */
    double from_time;  /* ...and its step time */
    ct_tune_wait_fn read_wait;
    void *wait_user;
} ct_tune;

/* A tuner for a run at `max` threads that starts at time `now` (seconds, any monotone clock). */
CT_INTERNAL void
ct_tune_init(ct_tune *tu, int64_t max, double now, ct_tune_wait_fn read_wait, void *wait_user);

/* A training step of `seconds` at tu->cur ended at `now`. Returns the count for the next step
 * (tu->cur, or a candidate being tried). */
CT_INTERNAL int64_t ct_tune_step(ct_tune *tu, double seconds, double now);

/* The threads the next step runs at: the current count, or the candidate during a trial. */
CT_INTERNAL int64_t ct_tune_threads(const ct_tune *tu);

/* This process's run-queue wait in seconds from /proc/self/task/TID/schedstat (Linux), summed
 * over its threads; negative where it cannot be read. A ct_tune_wait_fn (user unused). */
CT_INTERNAL double ct_tune_read_schedstat(void *user);

/* For the trainer (fit.c): a fit's tuner when p.adapt_threads (not under parameter_server),
 * the clock read at a step's start, the step's time given to the tuner at its end (less its
 * exchange with other ranks) with the thread count it returns set on the context and each
 * settled change logged, and the count the fit started with restored at its end. */
CT_INTERNAL void ct_train_tune_begin(ct_trainer *t);
CT_INTERNAL void ct_train_tune_start(ct_trainer *t);
CT_INTERNAL void ct_train_tune_end(ct_trainer *t);
CT_INTERNAL void ct_train_tune_finish(ct_trainer *t);

#endif
