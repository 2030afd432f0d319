/*
 * test_experiment_incident.c - the per-tensor statistics of incident bundles (ct_exp_stats_of):
 * counts of non-finite values, and min, max and L2 norm over the finite values only, in double.
 */
#include <math.h>

#include "ctrain/ctrain.h"
#include "experiment/experiment_internal.h"
#include "harness.h"

static void experiment_incident_should_give_finite_only_statistics(void) {
    const float x[6] = {3.0f, -4.0f, NAN, INFINITY, -INFINITY, 0.5f};
    ct_exp_stats s = ct_exp_stats_of(x, 6);
    CT_CHECK_INT(s.nonfinite, 3);
    CT_CHECK_INT(s.finite, 3);
    CT_CHECK_CLOSE(s.min, -4.0, 0.0, 0.0);
    CT_CHECK_CLOSE(s.max, 3.0, 0.0, 0.0);
    CT_CHECK_CLOSE(s.l2, sqrt(25.25), 1e-15, 1e-15);
}

static void experiment_incident_should_sum_squares_in_double(void) {
    /* 3e20^2 overflows a float; in double the norm is exact to rounding */
    const float x[2] = {3e20f, 4e20f};
    ct_exp_stats s = ct_exp_stats_of(x, 2);
    CT_CHECK_INT(s.nonfinite, 0);
    CT_CHECK(isfinite(s.l2));
    CT_CHECK_CLOSE(s.l2, hypot((double)x[0], (double)x[1]), 0.0, 1e-12);
}

static void experiment_incident_should_report_no_finite_values_as_zeroes(void) {
    const float x[2] = {NAN, NAN};
    ct_exp_stats s = ct_exp_stats_of(x, 2);
    CT_CHECK_INT(s.nonfinite, 2);
    CT_CHECK_INT(s.finite, 0);
    CT_CHECK(s.min == 0.0 && s.max == 0.0 && s.l2 == 0.0);
    s = ct_exp_stats_of(NULL, 0);
    CT_CHECK_INT(s.nonfinite + s.finite, 0);
}

int main(void) {
    CT_RUN(experiment_incident_should_give_finite_only_statistics);
    CT_RUN(experiment_incident_should_sum_squares_in_double);
    CT_RUN(experiment_incident_should_report_no_finite_values_as_zeroes);
    return ct_test_finish();
}
