/*
 * test_ctx_threads.c - the context's default thread count (threads 0) is the number of cores
 * the process may run on, its CPU affinity (taskset, a cgroup's cpuset, a Slurm binding), not
 * every core of the machine: threads beyond the allowed cores would only queue for them.
 */
#define _GNU_SOURCE /* sched_getaffinity, CPU_SET */

#include <sched.h>
#include <stdio.h>

#include "ctrain/ctrain.h"
#include "harness.h"

static int64_t default_threads(void) {
    ct_ctx_params p = ct_ctx_default_params();
    p.n_threads = 0;
    ct_ctx *ctx = NULL;
    if (ct_ctx_create(&p, &ctx) != CT_OK) return -1;
    int64_t n = ct_ctx_threads(ctx);
    ct_ctx_destroy(ctx);
    return n;
}

static void ctx_should_default_to_the_cores_it_may_run_on(void) {
    cpu_set_t all;
    CT_CHECK(sched_getaffinity(0, sizeof all, &all) == 0);
    CT_CHECK_INT(default_threads(), CPU_COUNT(&all));
    int first = -1;
    for (int c = 0; c < CPU_SETSIZE && first < 0; c++)
        if (CPU_ISSET(c, &all)) first = c;
    CT_CHECK(first >= 0);
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(first, &one);
    CT_CHECK(sched_setaffinity(0, sizeof one, &one) == 0);
    CT_CHECK_INT(default_threads(), 1);
    CT_CHECK(sched_setaffinity(0, sizeof all, &all) == 0);
    CT_CHECK_INT(default_threads(), CPU_COUNT(&all));
    if (CPU_COUNT(&all) < 2)
        printf("  (one core allowed: the restricted case equals the default)\n");
}

int main(void) {
    CT_RUN(ctx_should_default_to_the_cores_it_may_run_on);
    return ct_test_finish();
}
