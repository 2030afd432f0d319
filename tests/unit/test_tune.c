/*
 * test_tune.c - the thread tuner's policy (src/train/tune.h) on a simulated machine: a step's
 * time and the share of wall time its threads wait for a core are functions of the thread
 * count and of whether another process keeps cores busy, and the clock advances by the step
 * times. Checks: a quiet machine is tried once at fewer threads, which stay when they pay; a
 * busy core brings the count down within a second of steps and the free core brings it back;
 * fewer threads that do not pay are undone, and kept at no cost on a contended core; without
 * run-queue times trials come no oftener
 * than the blind period; many cores drop as many threads as wait for a core; one thread is
 * left alone.
 */
#include <math.h>
#include <string.h>

#include "harness.h"
#include "train/tune.h"

/* The simulated machine. */
typedef struct machine {
    int64_t cores;
    int64_t busy;      /* cores another process keeps busy */
    double one_thread; /* a step's seconds on one free core */
    double waited;     /* run-queue seconds so far */
    bool no_schedstat; /* the wait cannot be read */
    bool threads_pay;  /* false: work that does not speed up with threads (always 1-thread time) */
    int64_t steps_at[33]; /* steps run at each count */
} machine;

static double machine_wait(void *user) {
    const machine *m = user;
    return m->no_schedstat ? -1.0 : m->waited;
}

/* A step at n threads: the work splits evenly over the threads; threads beyond the free cores
 * share a core with a busy process, run at half speed and miss the scheduler's time slices,
 * and the step waits for the slowest: three times as long. */
static double machine_step(machine *m, int64_t n) {
    double t = m->threads_pay ? m->one_thread / (double)n : m->one_thread;
    int64_t free_cores = m->cores - m->busy;
    bool shared = n > free_cores; /* some thread shares a core */
    if (shared) t *= 3.0;
    /* each thread on a shared core waits half the step */
    if (shared) m->waited += 0.5 * t * (double)(n - free_cores);
    m->steps_at[n]++;
    return t;
}

/* Runs `seconds` of steps from *now; returns the count in use at the end. */
static int64_t run_for(ct_tune *tu, machine *m, double *now, double seconds) {
    double end = *now + seconds;
    int64_t n = ct_tune_threads(tu);
    while (*now < end) {
        double t = machine_step(m, n);
        *now += t;
        n = ct_tune_step(tu, t, *now);
    }
    return n;
}

static machine make_machine(int64_t cores) {
    machine m;
    memset(&m, 0, sizeof m);
    m.cores = cores;
    m.one_thread = 0.004;
    m.threads_pay = true;
    return m;
}

static void tune_should_try_fewer_threads_once_on_a_quiet_machine(void) {
    machine m = make_machine(2);
    ct_tune tu;
    double now = 0.0;
    ct_tune_init(&tu, 2, now, machine_wait, &m);
    CT_CHECK(run_for(&tu, &m, &now, 60.0) == 2);
    /* the first check's trial: 30 ms of 2 ms steps (16) and one to settle, then never again */
    CT_CHECK(m.steps_at[1] > 0);
    CT_CHECK(m.steps_at[1] <= 17);
}

static void tune_should_drop_threads_that_do_not_pay_on_a_quiet_machine(void) {
    machine m = make_machine(2);
    m.threads_pay = false; /* a model too small to share: 2 threads only add their overhead */
    ct_tune tu;
    double now = 0.0;
    ct_tune_init(&tu, 2, now, machine_wait, &m);
    int64_t n = ct_tune_threads(&tu);
    for (int i = 0; i < 200; i++) {
        double t = n == 2 ? 0.0012 : 0.001; /* fewer threads must gain 10% on a quiet machine */
        m.steps_at[n]++;
        now += t;
        n = ct_tune_step(&tu, t, now);
    }
    CT_CHECK(n == 1);
}

/* A warm-up that makes the first steps slow and fades over the first trial (caches, pages,
 * plans) weighs on both sides of the trial alike (blocks A B B A): a quiet machine whose
 * 2-thread steps are 1.2 times faster keeps its 2 threads (measuring the 2 threads first and
 * then the 1 would credit the fading warm-up to the 1 thread and drop it). */
static void tune_should_not_mistake_a_warm_up_for_a_gain(void) {
    machine m = make_machine(2);
    ct_tune tu;
    double now = 0.0;
    ct_tune_init(&tu, 2, now, machine_wait, &m);
    int64_t n = ct_tune_threads(&tu);
    for (int i = 0; i < 400; i++) {
        double warm = now < 0.15 ? 1.0 + 2.0 * (0.15 - now) / 0.15 : 1.0; /* 3x fading to 1x */
        double t = (n == 2 ? 0.002 : 0.0024) * warm;
        m.steps_at[n]++;
        now += t;
        n = ct_tune_step(&tu, t, now);
    }
    CT_CHECK(n == 2);
    CT_CHECK(m.steps_at[1] > 0); /* the first trial ran */
}

static void tune_should_drop_a_busy_core_and_take_it_back_when_free(void) {
    machine m = make_machine(2);
    m.busy = 1;
    ct_tune tu;
    double now = 0.0;
    ct_tune_init(&tu, 2, now, machine_wait, &m);
    CT_CHECK(run_for(&tu, &m, &now, 1.0) == 1);
    /* and it stays there: only short trials of 2 threads, one per period */
    int64_t at2 = m.steps_at[2];
    CT_CHECK(run_for(&tu, &m, &now, 60.0) == 1);
    double tried = (double)(m.steps_at[2] - at2) * 0.004 * 2.0; /* seconds spent trying 2 */
    CT_CHECK(tried < 0.02 * 60.0);
    m.busy = 0; /* the other process ended */
    CT_CHECK(run_for(&tu, &m, &now, CT_TUNE_PERIOD + 1.0) == 2);
}

static void tune_should_undo_fewer_threads_that_do_not_pay(void) {
    machine m = make_machine(2);
    m.busy = 1;
    m.one_thread = 0.010;
    ct_tune tu;
    double now = 0.0;
    ct_tune_init(&tu, 2, now, machine_wait, &m);
    /* make 2 threads on the shared core pay anyway: a step at 1 thread costs as much as the
       shared 2-thread step (0.010 / 2 * 2) plus 20% */
    m.one_thread = 0.012;
    m.threads_pay = true;
    int64_t n = ct_tune_threads(&tu);
    for (int i = 0; i < 2000; i++) {
        double t = n == 1 ? 0.012 : 0.010;
        m.waited += n == 2 ? 0.5 * t : 0.0;
        m.steps_at[n]++;
        now += t;
        n = ct_tune_step(&tu, t, now);
    }
    CT_CHECK(n == 2);
    CT_CHECK(m.steps_at[1] > 0);                      /* it was tried (the core was contended) */
    CT_CHECK(m.steps_at[1] < m.steps_at[2] / 10 + 1); /* and not kept */
}

/* On a contended core fewer threads that cost nothing are kept: the other process gets the
 * core. The same step time on 1 thread as on 2, whose threads wait half the time. */
static void tune_should_leave_a_contended_core_when_fewer_threads_cost_nothing(void) {
    machine m = make_machine(2);
    m.busy = 1;
    ct_tune tu;
    double now = 0.0;
    ct_tune_init(&tu, 2, now, machine_wait, &m);
    int64_t n = ct_tune_threads(&tu);
    for (int i = 0; i < 2000; i++) {
        double t = 0.010;
        m.waited += n == 2 ? 0.5 * t : 0.0;
        m.steps_at[n]++;
        now += t;
        n = ct_tune_step(&tu, t, now);
    }
    CT_CHECK(n == 1);
    CT_CHECK(m.steps_at[2] < m.steps_at[1] / 10); /* dropped early, and 2 only tried since */
}

static void tune_should_try_blind_no_oftener_than_its_period(void) {
    machine m = make_machine(2);
    m.no_schedstat = true;
    ct_tune tu;
    double now = 0.0;
    ct_tune_init(&tu, 2, now, machine_wait, &m);
    CT_CHECK(run_for(&tu, &m, &now, 100.0) == 2);
    /* at most 100 / 20 + 1 trials of 30 ms of steps at 2 ms (16) and one to settle */
    CT_CHECK(m.steps_at[1] > 0);
    CT_CHECK(m.steps_at[1] <= 6 * 17);
    /* and a busy core, which slows the steps, is found within the period of a check */
    m.busy = 1;
    CT_CHECK(run_for(&tu, &m, &now, CT_TUNE_PERIOD + 1.0) == 1);
}

static void tune_should_drop_as_many_threads_as_wait_for_a_core(void) {
    machine m = make_machine(16);
    m.busy = 7; /* 9 free cores: the waiting threads tell how many to drop */
    m.one_thread = 0.050;
    ct_tune tu;
    double now = 0.0;
    ct_tune_init(&tu, 16, now, machine_wait, &m);
    CT_CHECK(run_for(&tu, &m, &now, 3.0) == 9);
    m.busy = 0;
    CT_CHECK(run_for(&tu, &m, &now, 2.0 * CT_TUNE_PERIOD + 2.0) == 16);
}

static void tune_should_leave_one_thread_alone(void) {
    machine m = make_machine(1);
    ct_tune tu;
    double now = 0.0;
    ct_tune_init(&tu, 1, now, machine_wait, &m);
    CT_CHECK(run_for(&tu, &m, &now, 10.0) == 1);
    CT_CHECK(ct_tune_step(&tu, -1.0, now) == 1);
}

static void tune_should_read_this_process_run_queue_time(void) {
    double w = ct_tune_read_schedstat(NULL);
#ifdef __linux__
    CT_CHECK(w >= 0.0); /* /proc/self/task/TID/schedstat: every Linux since 2.6 */
#else
    CT_CHECK(w < 0.0);
#endif
}

int main(void) {
    CT_RUN(tune_should_try_fewer_threads_once_on_a_quiet_machine);
    CT_RUN(tune_should_drop_threads_that_do_not_pay_on_a_quiet_machine);
    CT_RUN(tune_should_not_mistake_a_warm_up_for_a_gain);
    CT_RUN(tune_should_drop_a_busy_core_and_take_it_back_when_free);
    CT_RUN(tune_should_undo_fewer_threads_that_do_not_pay);
    CT_RUN(tune_should_leave_a_contended_core_when_fewer_threads_cost_nothing);
    CT_RUN(tune_should_try_blind_no_oftener_than_its_period);
    CT_RUN(tune_should_drop_as_many_threads_as_wait_for_a_core);
    CT_RUN(tune_should_leave_one_thread_alone);
    CT_RUN(tune_should_read_this_process_run_queue_time);
    return ct_test_finish();
}
