/*
 * tune.c - the thread tuner's policy (tune.h) and its reading of the kernel's run-queue times.
 * The trainer owns one ct_tune per fit (fit.c feeds it each step's time); nothing here
 * allocates.
 */
#include "train/tune.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "train/train_internal.h"

#define WARM_STEPS       3
#define WARM_SECONDS     0.05
#define BLOCK_SECONDS    0.015 /* a trial's block lasts at least this long... */
#define BLOCK_MIN_STEPS  2     /* ...and at least this many steps... */
#define BLOCK_MAX_STEPS  32    /* ...and no more than this many */
#define GAIN             0.95  /* a candidate is kept at this fraction of the time or less... */
#define GAIN_UNCONTENDED 0.90  /* ...or this, for fewer threads nobody else waited for... */
#define GAIN_CONTENDED   1.00  /* ...or this, for fewer threads whose cores others wanted */
#define CONTENDED        0.10  /* the share of wall time waited for a core that calls for a trial */
#define DRIFT_UP         1.25 /* a steady step this much slower (or DRIFT_DOWN faster) than it was */
#define DRIFT_DOWN       0.80 /* when the count was chosen calls for a check, after MIN_GAP s */
#define MIN_GAP          1.0
#define EWMA_WEIGHT      0.1

static int64_t fewer(int64_t n) {
    int64_t d = n / 4 > 1 ? n / 4 : 1;
    return n - d > 1 ? n - d : 1;
}

static int64_t more(const ct_tune *tu, int64_t n) {
    int64_t d = n / 3 > 1 ? n / 3 : 1;
    return n + d < tu->max ? n + d : tu->max;
}

static double read_wait(const ct_tune *tu) {
    return tu->read_wait ? tu->read_wait(tu->wait_user) : -1.0;
}

/* An observation (the share of a core waited for) starts now. */
static void observe_from(ct_tune *tu, double now) {
    tu->since = now;
    tu->wait_since = read_wait(tu);
}

/* The share of wall time this process's threads waited for a core since observe_from; -1 when
 * unknown. */
static double waited_share(const ct_tune *tu, double now) {
    double w = read_wait(tu);
    double wall = now - tu->since;
    if (w < 0.0 || tu->wait_since < 0.0 || !(wall > 0.0)) return -1.0;
    double d = w - tu->wait_since;
    return d < 0.0 ? -1.0 : d / wall; /* a thread that ended took its times with it */
}

static int64_t block_steps(double step_seconds) {
    if (!(step_seconds > 0.0)) return BLOCK_MIN_STEPS;
    double n = BLOCK_SECONDS / step_seconds;
    if (n < BLOCK_MIN_STEPS) return BLOCK_MIN_STEPS;
    if (n > BLOCK_MAX_STEPS) return BLOCK_MAX_STEPS;
    return (int64_t)n + 1;
}

static void go_steady(ct_tune *tu, double now) {
    tu->phase = CT_TUNE_STEADY;
    tu->ewma = tu->base_time;
    tu->next_check = now + CT_TUNE_PERIOD;
    observe_from(tu, now);
}

/* Whether fewer threads are worth a trial now: this process waited for a core, or, where that
 * cannot be known, the steps got slower or the blind period has passed. */
static bool try_fewer(ct_tune *tu, double now, bool slower) {
    if (tu->cur <= 1) return false;
    if (tu->waiting >= 0.0) return tu->waiting >= CONTENDED;
    if (!slower && now - tu->last_blind < CT_TUNE_BLIND_PERIOD) return false;
    tu->last_blind = now;
    return true;
}

/* The count to try below cur. A thread that shares its core with another process waits about
 * half the time, so the cores waited for, doubled, estimate the threads without a core of their
 * own: cur less those, when that is below the next candidate (fewer). */
static int64_t fewer_than(const ct_tune *tu) {
    int64_t c = fewer(tu->cur);
    if (tu->waiting > 0.0) {
        double est = floor((double)tu->cur - 2.0 * tu->waiting + 0.5);
        if (est < (double)c) c = est < 1.0 ? 1 : (int64_t)est;
    }
    return c;
}

/* A trial of the next count in direction dir: blocks A B B A of block_steps each, after
 * `settle` steps (1 when the count just changed). */
static void start_trial(ct_tune *tu, int dir, double step_seconds, int64_t settle) {
    tu->phase = CT_TUNE_TRIAL;
    tu->dir = dir;
    tu->cand = dir > 0 ? more(tu, tu->cur) : fewer_than(tu);
    tu->block = block_steps(step_seconds);
    tu->steps = 0;
    tu->settle = settle;
    tu->sum_a = 0.0;
    tu->sum_b = 0.0;
    tu->share_b = -1.0;
}

/* A check: a trial of more threads (below the most, unless the steps got slower) or of fewer
 * (when cores are contended, unless the steps got faster; and at the first check), else
 * another steady period. */
static void check(ct_tune *tu, double step_seconds, double now, int drift) {
    tu->waiting = waited_share(tu, now);
    /* the first check tries fewer threads whatever the load: a model too small for its
       threads runs faster on fewer, on a quiet machine too */
    bool first = tu->phase == CT_TUNE_WARM;
    bool up = tu->cur < tu->max && drift >= 0;
    bool down = !up && drift <= 0 && (first || try_fewer(tu, now, drift < 0));
    if (!up && !down) {
        tu->base_time = tu->phase == CT_TUNE_STEADY ? tu->ewma : step_seconds;
        go_steady(tu, now);
        return;
    }
    start_trial(tu, up ? 1 : -1, step_seconds, 0);
}

/* A trial measured: its candidate kept (and the next one in its direction tried while it
 * gains and, going down, the cores stay contended) or undone; after more threads did not pay,
 * fewer may, if the cores were contended. */
static void judge(ct_tune *tu, double now) {
    double ta = tu->sum_a / (double)(2 * tu->block), tb = tu->sum_b / (double)(2 * tu->block);
    /* fewer threads where other processes wait for the cores: kept when no slower, since the
       core they leave goes to those processes at no cost to the run */
    double gain = tu->dir > 0 ? GAIN : tu->waiting >= CONTENDED ? GAIN_CONTENDED : GAIN_UNCONTENDED;
    if (tb <= gain * ta) {
        if (tu->from == 0) { /* the change to announce starts here */
            tu->from = tu->cur;
            tu->from_time = ta;
        }
        tu->cur = tu->cand;
        tu->base_time = tb;
        tu->waiting = tu->share_b;
        bool again = tu->dir > 0 ? tu->cur < tu->max
                                 : tu->cur > 1 && (tu->share_b < 0.0 || tu->share_b >= CONTENDED);
        if (again) {
            start_trial(tu, tu->dir, tb, 1);
            return;
        }
        /* the last block ran at the old count: the first steady step settles */
    } else {
        tu->base_time = ta;
        if (tu->dir > 0 && tu->cur > 1 && tu->waiting >= CONTENDED) {
            start_trial(tu, -1, ta, 0);
            return;
        }
    }
    go_steady(tu, now);
}

void ct_tune_init(
    ct_tune *tu, int64_t max, double now, ct_tune_wait_fn read_wait_fn, void *wait_user) {
    tu->max = max > 1 ? max : 1;
    tu->cur = tu->max;
    tu->cand = tu->max;
    tu->dir = 0;
    tu->phase = CT_TUNE_WARM;
    tu->steps = 0;
    tu->block = 0;
    tu->settle = 0;
    tu->sum_a = 0.0;
    tu->sum_b = 0.0;
    tu->share_b = -1.0;
    tu->base_time = 0.0;
    tu->ewma = 0.0;
    tu->next_check = 0.0;
    tu->last_blind = now;
    tu->waiting = -1.0;
    tu->from = 0;
    tu->from_time = 0.0;
    tu->read_wait = read_wait_fn;
    tu->wait_user = wait_user;
    observe_from(tu, now);
}

int64_t ct_tune_threads(const ct_tune *tu) {
    if (tu->phase != CT_TUNE_TRIAL || tu->settle > 0) return tu->cur;
    /* the next step's place in A B B A: B's settling step and its 2 blocks run the candidate */
    return tu->steps >= tu->block && tu->steps <= 3 * tu->block ? tu->cand : tu->cur;
}

int64_t ct_tune_step(ct_tune *tu, double seconds, double now) {
    if (tu->max <= 1 || !(seconds >= 0.0)) return ct_tune_threads(tu);
    switch (tu->phase) {
    case CT_TUNE_WARM:
        if (++tu->steps >= WARM_STEPS && now - tu->since >= WARM_SECONDS)
            check(tu, seconds, now, 0);
        break;
    case CT_TUNE_STEADY: {
        tu->ewma += EWMA_WEIGHT * (seconds - tu->ewma);
        int drift = tu->ewma > DRIFT_UP * tu->base_time     ? -1
                    : tu->ewma < DRIFT_DOWN * tu->base_time ? 1
                                                            : 0;
        if (now >= tu->next_check)
            check(tu, tu->ewma, now, drift);
        else if (drift != 0 && now - tu->since >= MIN_GAP)
            check(tu, tu->ewma, now, drift);
        break;
    }
    case CT_TUNE_TRIAL: {
        if (tu->settle > 0) {
            tu->settle--;
            break;
        }
        int64_t j = tu->steps++, b = tu->block;
        if (j < b || j > 3 * b + 1) { /* the A blocks */
            tu->sum_a += seconds;
        } else if (j == b) { /* B's settling step: its observation starts after it */
            observe_from(tu, now);
        } else if (j <= 3 * b) { /* the B blocks */
            tu->sum_b += seconds;
            if (j == 3 * b) tu->share_b = waited_share(tu, now);
        } /* j == 3b + 1: the last A block's settling step */
        if (tu->steps == 4 * b + 2) judge(tu, now);
        break;
    }
    case CT_TUNE_PHASE_COUNT:
        break;
    }
    return ct_tune_threads(tu);
}

double ct_tune_read_schedstat(void *user) {
    (void)user;
    DIR *d = opendir("/proc/self/task");
    if (!d) return -1.0;
    double total = 0.0;
    bool any = false;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
        char path[sizeof "/proc/self/task//schedstat" + sizeof e->d_name];
        (void)snprintf(path, sizeof path, "/proc/self/task/%s/schedstat", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f) continue; /* the thread ended meanwhile */
        unsigned long long on_cpu = 0, waited = 0;
        if (fscanf(f, "%llu %llu", &on_cpu, &waited) == 2) {
            total += (double)waited * 1e-9;
            any = true;
        }
        (void)fclose(f);
    }
    (void)closedir(d);
    return any ? total : -1.0;
}

/* ---- the trainer's use of it (fit.c) ---- */

void ct_train_tune_begin(ct_trainer *t) {
#ifdef _OPENMP
    t->tuning = t->p.adapt_threads && !t->ps && ct_ctx_threads(t->ctx) > 1;
#else
    t->tuning = false; /* one thread whatever the count */
#endif
    if (t->tuning)
        ct_tune_init(&t->tune, ct_ctx_threads(t->ctx), ct_train_clock(), ct_tune_read_schedstat,
                     NULL);
}

void ct_train_tune_start(ct_trainer *t) {
    if (!t->tuning) return;
    t->tune_since = ct_train_clock();
    t->tune_comm = t->comm_seconds;
}

void ct_train_tune_end(ct_trainer *t) {
    if (!t->tuning) return;
    double now = ct_train_clock();
    /* the exchange with other ranks waits for them, whatever this rank's thread count */
    double took = now - t->tune_since - (t->comm_seconds - t->tune_comm);
    int64_t was = ct_ctx_threads(t->ctx);
    int64_t next = ct_tune_step(&t->tune, took, now);
    if (next != was) (void)ct_ctx_set_threads(t->ctx, next); /* 1..max: always valid */
    ct_tune *tu = &t->tune;
    if (tu->from != 0 && tu->phase == CT_TUNE_STEADY) { /* settled on a new count */
        ct_log(t->ctx, CT_LOG_INFO,
               "threads: %lld -> %lld at step %lld (a step took %.3g ms on %lld, %.3g ms on "
               "%lld: %s)",
               (long long)tu->from, (long long)tu->cur, (long long)t->step, tu->from_time * 1e3,
               (long long)tu->from, tu->base_time * 1e3, (long long)tu->cur,
               tu->cur < tu->from ? "other processes are using the cores" : "more cores are free");
        tu->from = 0;
    }
}

void ct_train_tune_finish(ct_trainer *t) {
    if (!t->tuning) return;
    (void)ct_ctx_set_threads(t->ctx, t->tune.max);
    t->tuning = false;
}
