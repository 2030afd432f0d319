/*
 * test_schedule.c - learning-rate schedules (schedule.h): option errors name the key and the
 * accepted values, closed forms at their edges, state save/restore mid-run, and
 * ReduceLROnPlateau's modes, cooldown, floor and non-finite metrics. PyTorch agreement is
 * tests/golden/test_golden_schedule.c's job.
 */
#include "ctrain/ctrain.h"
#include "harness.h"
#include "test_alloc.h"

static ct_ctx *ctx;

#define OPTS(...)                                                                                  \
    (ct_options) {                                                                                 \
        (const ct_option[]){__VA_ARGS__},                                                          \
            (int64_t)(sizeof((const ct_option[]){__VA_ARGS__}) / sizeof(ct_option)), "sched"       \
    }

static ct_schedule *make(const char *type, const ct_options *o, float base) {
    ct_schedule *s = NULL;
    ct_status st = ct_schedule_create(ctx, type, o, base, &s);
    CT_CHECK_MSG(st == CT_OK, "%s: %s", type, ct_last_error(ctx));
    return s;
}

/* Creation must fail with `code` and a message containing `needle`. */
static void expect_fail(const char *type, const ct_options *o, ct_status code, const char *needle) {
    ct_schedule *s = (ct_schedule *)&s; /* must come back NULL */
    ct_status st = ct_schedule_create(ctx, type, o, 0.1f, &s);
    CT_CHECK_MSG(st == code, "%s: got %s, expected %s (%s)", type, ct_status_str(st),
                 ct_status_str(code), ct_last_error(ctx));
    CT_CHECK(s == NULL);
    CT_CHECK_MSG(strstr(ct_last_error(ctx), needle) != NULL, "'%s' not in '%s'", needle,
                 ct_last_error(ctx));
    if (st == CT_OK) ct_schedule_destroy(s);
}

static void schedule_should_reject_unknown_types_and_keys(void) {
    ct_options none = {NULL, 0, "sched"};
    expect_fail("cosin", &none, CT_ERR_CONFIG,
                "unknown schedule type 'cosin' (did you mean 'cosine'?)");
    expect_fail("cosin", &none, CT_ERR_CONFIG, "warmup_cosine, onecycle, polynomial, plateau");
    expect_fail(NULL, &none, CT_ERR_CONFIG, "known: constant");
    /* the table, for checking a configuration before building */
    int64_t n = 0;
    const ct_schedule_type *const *types = ct_schedule_types(&n);
    CT_CHECK(n == 10 && types[10] == NULL && !strcmp(types[4]->name, "cosine"));
    CT_CHECK(ct_schedule_type_find("cosine") == types[4] && !strcmp(types[4]->keys[0], "t_max"));
    CT_CHECK(ct_schedule_type_find("cosin") == NULL && ct_schedule_type_find(NULL) == NULL);
    ct_options o = OPTS({"stepsize", "3"});
    expect_fail("step", &o, CT_ERR_CONFIG,
                "unknown key 'stepsize' (did you mean 'step_size'?) (known: step_size, gamma)");
    o = OPTS({"gamma", "0.5"});
    expect_fail("step", &o, CT_ERR_CONFIG, "needs key 'step_size'");
    expect_fail("exponential", NULL, CT_ERR_CONFIG, "needs key 'gamma'");
    expect_fail("cosine", &none, CT_ERR_CONFIG, "needs key 't_max'");
    expect_fail("onecycle", &none, CT_ERR_CONFIG, "needs key 'total'");
    /* the error names the schedule being created */
    expect_fail("polynomial", &none, CT_ERR_CONFIG, "creating a 'polynomial' schedule");
}

static void schedule_should_reject_bad_values(void) {
    ct_options o = OPTS({"step_size", "0"});
    expect_fail("step", &o, CT_ERR_CONFIG, "'step_size': 0 is out of range");
    o = OPTS({"step_size", "3"}, {"gamma", "0"});
    expect_fail("step", &o, CT_ERR_CONFIG, "expected a number > 0");
    o = OPTS({"gamma", "fast"});
    expect_fail("exponential", &o, CT_ERR_CONFIG, "expected a number, got 'fast'");
    o = OPTS({"t_max", "10"}, {"eta_min", "-1"});
    expect_fail("cosine", &o, CT_ERR_CONFIG, "'eta_min'");
    o = OPTS({"warmup", "10"}, {"total", "10"});
    expect_fail("warmup_linear", &o, CT_ERR_CONFIG,
                "'total': 10 steps, expected more than warmup (10)");
    expect_fail("warmup_cosine", &o, CT_ERR_CONFIG, "'total'");
    o = OPTS({"total", "100"}, {"anneal", "cosine"});
    expect_fail("onecycle", &o, CT_ERR_CONFIG,
                "unknown value 'cosine' (expected one of: cos, linear)");
    o = OPTS({"total", "100"}, {"pct_start", "1.5"});
    expect_fail("onecycle", &o, CT_ERR_CONFIG, "'pct_start'");
    o = OPTS({"total", "2"});
    expect_fail("onecycle", &o, CT_ERR_CONFIG, "phase 1 would have no steps");
    o = OPTS({"total", "10"}, {"pct_start", "0.6"}, {"three_phase", "true"});
    expect_fail("onecycle", &o, CT_ERR_CONFIG, "phase 3 would have no steps");
    o = OPTS({"total", "10"}, {"three_phase", "maybe"});
    expect_fail("onecycle", &o, CT_ERR_CONFIG, "expected true or false");
    o = OPTS({"mode", "median"});
    expect_fail("plateau", &o, CT_ERR_CONFIG, "expected one of: min, max");
    o = OPTS({"threshold_mode", "relative"});
    expect_fail("plateau", &o, CT_ERR_CONFIG, "expected one of: rel, abs");
    o = OPTS({"factor", "1"});
    expect_fail("plateau", &o, CT_ERR_CONFIG, "expected a number < 1");
    o = OPTS({"patience", "-1"});
    expect_fail("plateau", &o, CT_ERR_CONFIG, "'patience'");
    o = OPTS({"factor", "2"}, {"total", "0"});
    expect_fail("constant", &o, CT_ERR_CONFIG, "'factor'");

    ct_schedule *s = (ct_schedule *)&s;
    CT_CHECK(ct_schedule_create(ctx, "constant", NULL, NAN, &s) == CT_ERR_INVALID_ARG && !s);
    CT_CHECK(strstr(ct_last_error(ctx), "base learning rate") != NULL);
    s = (ct_schedule *)&s;
    CT_CHECK(ct_schedule_create(ctx, "constant", NULL, -1.0f, &s) == CT_ERR_INVALID_ARG && !s);
}

static void schedule_should_require_increasing_milestones(void) {
    static const char *const bad[] = {"30,20", "10,10", "a,b",  "",      "10,",
                                      ",10",   "5;6",   "-1,4", "1,2,x", "99999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        ct_options o = OPTS({"milestones", bad[i]});
        expect_fail("multistep", &o, CT_ERR_CONFIG, "'milestones'");
    }
    ct_options o = OPTS({"milestones", " 2, 4 ,7"}, {"gamma", "0.5"});
    ct_schedule *s = make("multistep", &o, 1.0f);
    if (!s) return;
    const float want[] = {1, 1, 0.5f, 0.5f, 0.25f, 0.25f, 0.25f, 0.125f, 0.125f};
    CT_CHECK(ct_schedule_lr(s) == want[0]);
    for (int i = 1; i < 9; i++)
        CT_CHECK(ct_schedule_step(s) == want[i]);
    ct_schedule_destroy(s);
}

/* lr(t) for t = 0..n-1 by stepping. */
static void rates(ct_schedule *s, int n, float *lr) {
    lr[0] = ct_schedule_lr(s);
    for (int t = 1; t < n; t++)
        lr[t] = ct_schedule_step(s);
}

static void schedule_should_hold_closed_forms_at_the_edges(void) {
    float lr[80];
    ct_options o = OPTS({"t_max", "10"}, {"eta_min", "0.01"}, {"warmup", "4"});
    ct_schedule *s = make("cosine", &o, 0.1f);
    if (s) {
        rates(s, 30, lr);
        CT_CHECK(lr[0] == 0.0f);
        CT_CHECK_CLOSE(lr[2], 0.05, 1e-9, 1e-6);
        CT_CHECK_CLOSE(lr[4], 0.1, 1e-9, 1e-6);
        CT_CHECK_CLOSE(lr[14], 0.01, 1e-9, 1e-6); /* t_max after the warmup */
        CT_CHECK_CLOSE(lr[24], 0.1, 1e-9, 1e-6);  /* periodic, as PyTorch */
        CT_CHECK(strcmp(ct_schedule_name(s), "cosine") == 0 && !ct_schedule_needs_metric(s));
    }
    ct_schedule_destroy(s);

    o = OPTS({"warmup", "5"}, {"total", "20"}, {"min_lr", "0.001"});
    s = make("warmup_cosine", &o, 0.1f);
    if (s) {
        rates(s, 40, lr);
        CT_CHECK_CLOSE(lr[5], 0.1, 1e-9, 1e-6);
        for (int t = 20; t < 40; t++)
            CT_CHECK_CLOSE(lr[t], 0.001, 1e-12, 1e-6); /* held at min_lr past total */
    }
    ct_schedule_destroy(s);

    o = OPTS({"total", "20"}, {"min_lr", "0.001"});
    s = make("warmup_linear", &o, 0.1f);
    if (s) {
        rates(s, 30, lr);
        CT_CHECK_CLOSE(lr[0], 0.1, 1e-9, 1e-6); /* no warmup */
        CT_CHECK_CLOSE(lr[10], 0.0505, 1e-9, 1e-6);
        CT_CHECK_CLOSE(lr[29], 0.001, 1e-12, 1e-6);
    }
    ct_schedule_destroy(s);

    o = OPTS({"total", "10"});
    s = make("onecycle", &o, 0.1f);
    if (s) {
        rates(s, 20, lr);
        CT_CHECK_CLOSE(lr[0], 0.004, 1e-12, 1e-6); /* max_lr defaults to the base rate */
        CT_CHECK_CLOSE(lr[2], 0.1, 1e-12, 1e-6);
        for (int t = 9; t < 20; t++)
            CT_CHECK_CLOSE(lr[t], 4e-7, 1e-14, 1e-6);
    }
    ct_schedule_destroy(s);

    o = OPTS({"total", "4"}, {"power", "1"}, {"min_lr", "0.02"});
    s = make("polynomial", &o, 0.1f);
    if (s) {
        rates(s, 8, lr);
        CT_CHECK_CLOSE(lr[2], 0.06, 1e-9, 1e-6);
        for (int t = 4; t < 8; t++)
            CT_CHECK_CLOSE(lr[t], 0.02, 1e-12, 1e-6);
    }
    ct_schedule_destroy(s);

    /* a growing exponential overflows float to +inf, never to UB */
    o = OPTS({"gamma", "1000"});
    s = make("exponential", &o, 1.0f);
    if (s) {
        for (int t = 0; t < 20; t++)
            ct_schedule_step(s);
        CT_CHECK(isinf(ct_schedule_lr(s)));
    }
    ct_schedule_destroy(s);
    ct_schedule_destroy(NULL);
}

/* A run of 50 steps equals one saved at step k and restored into a fresh schedule. */
static void check_resume(const char *type, const ct_options *o, const double *metric) {
    enum { N = 50 };
    for (int k = 0; k <= N; k += 7) {
        ct_schedule *a = make(type, o, 0.1f), *b = make(type, o, 0.1f), *c = make(type, o, 0.1f);
        if (!a || !b || !c) break;
        bool same = true;
        for (int t = 0; t < k; t++)
            metric ? ct_schedule_step_metric(a, metric[t]) : ct_schedule_step(a);
        ct_schedule_state st;
        ct_schedule_get_state(a, &st);
        CT_CHECK(ct_schedule_set_state(b, &st) == CT_OK);
        CT_CHECK_INT(ct_schedule_steps(b), k);
        for (int t = 0; t < N; t++) {
            float want = metric ? ct_schedule_step_metric(c, metric[t]) : ct_schedule_step(c);
            if (t < k) continue;
            float got = metric ? ct_schedule_step_metric(b, metric[t]) : ct_schedule_step(b);
            same = same && got == want;
        }
        CT_CHECK_MSG(same, "%s: resumed at step %d differs", type, k);
        ct_schedule_destroy(a);
        ct_schedule_destroy(b);
        ct_schedule_destroy(c);
    }
}

static void schedule_should_resume_exactly_from_its_state(void) {
    double metric[50];
    for (int t = 0; t < 50; t++)
        metric[t] = t % 9 == 8 ? NAN : 1.0 / (1.0 + (double)(t / 6));
    ct_options o = OPTS({"step_size", "4"}, {"gamma", "0.7"});
    check_resume("step", &o, NULL);
    o = OPTS({"t_max", "13"}, {"warmup", "3"});
    check_resume("cosine", &o, NULL);
    o = OPTS({"total", "45"}, {"three_phase", "true"});
    check_resume("onecycle", &o, NULL);
    o = OPTS({"patience", "2"}, {"cooldown", "1"}, {"factor", "0.5"});
    check_resume("plateau", &o, metric);

    /* a bad state is refused and the schedule keeps its own */
    ct_schedule *s = make("plateau", &o, 0.1f);
    if (!s) return;
    ct_schedule_state st;
    ct_schedule_get_state(s, &st);
    CT_CHECK(st.steps == 0 && isinf(st.best) && st.best > 0 && st.lr == (double)0.1f);
    ct_schedule_state bad = st;
    bad.cooldown_left = 2;
    CT_CHECK(ct_schedule_set_state(s, &bad) == CT_ERR_INVALID_ARG);
    CT_CHECK(strstr(ct_last_error(ctx), "cooldown_left in [0, 1]") != NULL);
    bad = st;
    bad.lr = -1.0;
    CT_CHECK(ct_schedule_set_state(s, &bad) == CT_ERR_INVALID_ARG);
    bad = st;
    bad.best = NAN;
    CT_CHECK(ct_schedule_set_state(s, &bad) == CT_ERR_INVALID_ARG);
    bad = st;
    bad.steps = -3;
    CT_CHECK(ct_schedule_set_state(s, &bad) == CT_ERR_INVALID_ARG);
    CT_CHECK(ct_schedule_lr(s) == 0.1f && ct_schedule_steps(s) == 0);
    ct_schedule_destroy(s);
}

static void plateau_should_follow_mode_max(void) {
    ct_options o = OPTS({"mode", "max"}, {"patience", "1"}, {"factor", "0.5"},
                        {"threshold_mode", "abs"}, {"threshold", "0.01"});
    ct_schedule *s = make("plateau", &o, 1.0f);
    if (!s) return;
    CT_CHECK(ct_schedule_needs_metric(s));
    CT_CHECK(ct_schedule_step_metric(s, 0.5) == 1.0f);   /* best 0.5 */
    CT_CHECK(ct_schedule_step_metric(s, 0.6) == 1.0f);   /* better */
    CT_CHECK(ct_schedule_step_metric(s, 0.605) == 1.0f); /* within threshold: bad 1 */
    CT_CHECK(ct_schedule_step_metric(s, 0.2) == 0.5f);   /* bad 2 > patience: reduce */
    CT_CHECK(ct_schedule_step_metric(s, 0.7) == 0.5f);
    ct_schedule_state st;
    ct_schedule_get_state(s, &st);
    CT_CHECK(st.best == 0.7 && st.bad_epochs == 0 && st.steps == 5);
    ct_schedule_destroy(s);
}

static void plateau_should_wait_out_its_cooldown_and_stop_at_min_lr(void) {
    ct_options o = OPTS({"patience", "0"}, {"cooldown", "2"}, {"factor", "0.5"}, {"min_lr", "0.3"});
    ct_schedule *s = make("plateau", &o, 1.0f);
    if (!s) return;
    const float want[] = {0.5f, 0.5f, 0.5f, 0.3f, 0.3f, 0.3f, 0.3f, 0.3f};
    CT_CHECK(ct_schedule_step_metric(s, 1.0) == 1.0f);
    for (int i = 0; i < 8; i++) /* never better; cooldown swallows two bad steps each time */
        CT_CHECK_MSG(ct_schedule_step_metric(s, 2.0) == want[i], "step %d: %g", i + 2,
                     (double)ct_schedule_lr(s));
    /* ct_schedule_step counts a step but needs a metric to change the rate */
    CT_CHECK(ct_schedule_step(s) == 0.3f && ct_schedule_steps(s) == 10);
    ct_schedule_destroy(s);
}

static void plateau_should_never_count_non_finite_metrics_as_better(void) {
    ct_options o = OPTS({"patience", "2"}, {"factor", "0.5"});
    ct_schedule *s = make("plateau", &o, 1.0f);
    if (!s) return;
    ct_schedule_state st;
    ct_schedule_step_metric(s, -INFINITY); /* mode min: -inf would otherwise win for good */
    ct_schedule_get_state(s, &st);
    CT_CHECK(isinf(st.best) && st.best > 0 && st.bad_epochs == 1);
    ct_schedule_step_metric(s, NAN);
    ct_schedule_step_metric(s, 3.0); /* first finite metric is the best */
    ct_schedule_get_state(s, &st);
    CT_CHECK(st.best == 3.0 && st.bad_epochs == 0);
    CT_CHECK(ct_schedule_step_metric(s, NAN) == 1.0f);
    CT_CHECK(ct_schedule_step_metric(s, -INFINITY) == 1.0f);
    CT_CHECK(ct_schedule_step_metric(s, NAN) == 0.5f); /* three bad steps > patience 2 */
    ct_schedule_destroy(s);

    o = OPTS({"mode", "max"}, {"patience", "0"});
    s = make("plateau", &o, 1.0f);
    if (!s) return;
    ct_schedule_step_metric(s, 0.5);
    CT_CHECK_CLOSE(ct_schedule_step_metric(s, INFINITY), 0.1, 1e-9, 1e-6);
    ct_schedule_destroy(s);

    /* other types ignore the metric */
    o = OPTS({"gamma", "0.5"});
    s = make("exponential", &o, 1.0f);
    if (!s) return;
    CT_CHECK(ct_schedule_step_metric(s, NAN) == 0.5f && ct_schedule_steps(s) == 1);
    ct_schedule_destroy(s);
}

static void schedule_should_fail_cleanly_when_out_of_memory(void) {
    test_alloc ta = {0};
    ct_ctx_params p = ct_ctx_default_params();
    p.allocator = test_allocator(&ta);
    ct_ctx *c = NULL;
    if (ct_ctx_create(&p, &c) != CT_OK) return;
    long long base = ta.live;
    ct_options o = OPTS({"milestones", "3,6"});
    for (long long fail = 1; fail <= 3; fail++) {
        ta.fail_at = ta.n_alloc + fail;
        ct_schedule *s = NULL;
        ct_status st = ct_schedule_create(c, "multistep", &o, 0.1f, &s);
        CT_CHECK(st == CT_OK || (st == CT_ERR_OOM && s == NULL));
        ct_schedule_destroy(s);
        CT_CHECK(ta.live == base);
    }
    ta.fail_at = 0;
    CT_CHECK(ta.size_mismatch == 0);
    ct_ctx_destroy(c);
}

int main(void) {
    ct_ctx_params p = ct_ctx_default_params();
    if (ct_ctx_create(&p, &ctx) != CT_OK) return 1;
    CT_RUN(schedule_should_reject_unknown_types_and_keys);
    CT_RUN(schedule_should_reject_bad_values);
    CT_RUN(schedule_should_require_increasing_milestones);
    CT_RUN(schedule_should_hold_closed_forms_at_the_edges);
    CT_RUN(schedule_should_resume_exactly_from_its_state);
    CT_RUN(plateau_should_follow_mode_max);
    CT_RUN(plateau_should_wait_out_its_cooldown_and_stop_at_min_lr);
    CT_RUN(plateau_should_never_count_non_finite_metrics_as_better);
    CT_RUN(schedule_should_fail_cleanly_when_out_of_memory);
    ct_ctx_destroy(ctx);
    return ct_test_finish();
}
