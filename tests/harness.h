/*
 * harness.h - the in-repo test harness: checks that print file:line and values, a runner, and
 * main's exit status = the number of failed checks (so ctest sees every failure).
 *
 * Usage: write `static void module_should_behave(void) { CT_CHECK(...); }` functions and call
 * CT_RUN(name) for each from main, then `return ct_test_finish();`.
 */
#ifndef CT_TEST_HARNESS_H
#define CT_TEST_HARNESS_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int ct_test_failures;
static int ct_test_checks;
static const char *ct_test_current = "";

#define CT_CHECK(cond)                                                                             \
    do {                                                                                           \
        ct_test_checks++;                                                                          \
        if (!(cond)) {                                                                             \
            ct_test_failures++;                                                                    \
            fprintf(stderr, "%s:%d: %s: check failed: %s\n", __FILE__, __LINE__, ct_test_current,  \
                    #cond);                                                                        \
        }                                                                                          \
    } while (0)

#define CT_CHECK_MSG(cond, ...)                                                                    \
    do {                                                                                           \
        ct_test_checks++;                                                                          \
        if (!(cond)) {                                                                             \
            ct_test_failures++;                                                                    \
            fprintf(stderr, "%s:%d: %s: check failed: %s: ", __FILE__, __LINE__, ct_test_current,  \
                    #cond);                                                                        \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
        }                                                                                          \
    } while (0)

#define CT_CHECK_INT(a, b)                                                                         \
    do {                                                                                           \
        long long ct_a_ = (long long)(a), ct_b_ = (long long)(b);                                  \
        CT_CHECK_MSG(ct_a_ == ct_b_, "%lld != %lld", ct_a_, ct_b_);                                \
    } while (0)

/* |a - b| <= atol + rtol * |b|, with b the reference. */
#define CT_CHECK_CLOSE(a, b, atol, rtol)                                                           \
    do {                                                                                           \
        double ct_a_ = (double)(a), ct_b_ = (double)(b);                                           \
        CT_CHECK_MSG(fabs(ct_a_ - ct_b_) <= (atol) + (rtol)*fabs(ct_b_),                           \
                     "got %.9g, expected %.9g (atol %g, rtol %g)", ct_a_, ct_b_, (double)(atol),   \
                     (double)(rtol));                                                              \
    } while (0)

/* Element-wise comparison of n floats; reports the worst index and both values. */
static inline int ct_check_arrays_at(const char *file,
                                     int line,
                                     const char *what,
                                     const float *got,
                                     const float *ref,
                                     long long n,
                                     double atol,
                                     double rtol) {
    long long worst = -1;
    double worst_excess = 0.0;
    for (long long i = 0; i < n; i++) {
        double d = fabs((double)got[i] - (double)ref[i]);
        double lim = atol + rtol * fabs((double)ref[i]);
        double excess = d - lim;
        if (!(d <= lim) && (worst < 0 || excess > worst_excess || isnan(d))) {
            worst = i;
            worst_excess = isnan(d) ? (double)INFINITY : excess;
        }
    }
    ct_test_checks++;
    if (worst >= 0) {
        ct_test_failures++;
        fprintf(stderr,
                "%s:%d: %s: %s: arrays differ; worst at index %lld: got %.9g, expected %.9g "
                "(atol %g, rtol %g, n %lld)\n",
                file, line, ct_test_current, what, worst, (double)got[worst], (double)ref[worst],
                atol, rtol, n);
        return 0;
    }
    return 1;
}
#define CT_CHECK_ARRAYS(what, got, ref, n, atol, rtol)                                             \
    ct_check_arrays_at(__FILE__, __LINE__, (what), (got), (ref), (long long)(n), (atol), (rtol))

#define CT_RUN(fn)                                                                                 \
    do {                                                                                           \
        int ct_before_ = ct_test_failures;                                                         \
        ct_test_current = #fn;                                                                     \
        fn();                                                                                      \
        printf("%s %s\n", ct_test_failures == ct_before_ ? "ok  " : "FAIL", #fn);                  \
    } while (0)

static inline int ct_test_finish(void) {
    printf("%d checks, %d failed\n", ct_test_checks, ct_test_failures);
    return ct_test_failures > 255 ? 255 : ct_test_failures;
}

#endif /* CT_TEST_HARNESS_H */
