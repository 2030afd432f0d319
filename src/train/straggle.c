/*
 * straggle.c - a rank made slow on purpose, for benchmarks of machines of uneven speed
 * (bench/async.py, CTRAIN_STRAGGLER): after each of its training steps the rank sleeps as long
 * as the step took, so it runs at half its speed whatever else the machine is doing, and a
 * strategy's loss of throughput to it is measured rather than left to the machine's noise.
 */
#include <errno.h>
#include <time.h>

#include "train/train_internal.h"

static bool straggles(const ct_trainer *t) {
    return t->p.straggler_rank >= 0 && ct_comm_rank(t->comm) == t->p.straggler_rank;
}

void ct_train_straggle_start(ct_trainer *t) {
    if (straggles(t)) t->straggle_since = ct_train_clock();
}

void ct_train_straggle_end(ct_trainer *t) {
    if (!straggles(t)) return;
    double took = ct_train_clock() - t->straggle_since;
    if (!(took > 0.0)) return;
    struct timespec left = {(time_t)took, (long)((took - (double)(time_t)took) * 1e9)};
    while (nanosleep(&left, &left) != 0 && errno == EINTR) {
    }
}
