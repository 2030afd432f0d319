/*
 * test_policy.c - the trainer's policies on closed-form sequences: best monitor, early
 * stopping, EMA (values by hand, warm-up, buffers, swap scope), non-finite scan and policy,
 * loss-spike detection, accumulation windows; state save/restore mid-way, thread-count
 * independence, no allocation in the per-step calls.
 */
#include <float.h>
#include <math.h>
#include <string.h>

#include "ctrain/ctrain.h"
#include "harness.h"
#include "test_alloc.h"
#include "train/train_internal.h"

static ct_ctx *make_ctx(test_alloc *ta, int64_t threads) {
    ct_ctx_params p = ct_ctx_default_params();
    if (ta) p.allocator = test_allocator(ta);
    p.n_threads = threads;
    ct_ctx *ctx = NULL;
    if (ct_ctx_create(&p, &ctx) != CT_OK) abort();
    return ctx;
}

#define OPTS(arr)                                                                                  \
    { (arr), (int64_t)(sizeof(arr) / sizeof((arr)[0])), "exp.yaml: train" }

/* ---- monitor ---- */

static void monitor_should_track_a_loss_from_the_first_value(void) {
    ct_ctx *ctx = make_ctx(NULL, 1);
    ct_monitor m;
    CT_CHECK_INT(ct_monitor_init(ctx, &m, NULL), CT_OK);
    CT_CHECK(strcmp(m.metric, "valid/loss") == 0);
    CT_CHECK_INT(m.mode, CT_MONITOR_MODE_MIN);
    CT_CHECK(!m.state.has_best);
    bool imp = false;
    ct_monitor_update(&m, NAN, 1, &imp); /* non-finite first: never a best */
    CT_CHECK(!imp && !m.state.has_best);
    ct_monitor_update(&m, INFINITY, 2, &imp);
    CT_CHECK(!imp && !m.state.has_best);
    ct_monitor_update(&m, 2.5, 3, &imp); /* the first finite loss is the best */
    CT_CHECK(imp && m.state.has_best);
    CT_CHECK(m.state.best == 2.5 && m.state.best_step == 3);
    ct_monitor_update(&m, 2.5, 4, &imp); /* a tie is not an improvement */
    CT_CHECK(!imp && m.state.best_step == 3);
    ct_monitor_update(&m, -INFINITY, 5, &imp);
    CT_CHECK(!imp && m.state.best == 2.5);
    ct_monitor_update(&m, 3.0, 6, &imp);
    CT_CHECK(!imp);
    ct_monitor_update(&m, 1.0, 7, &imp);
    CT_CHECK(imp && m.state.best == 1.0 && m.state.best_step == 7);
    ct_monitor_update(&m, 0.5, 8, NULL);
    CT_CHECK(m.state.best == 0.5);
    ct_ctx_destroy(ctx);
}

static void monitor_should_apply_mode_max_and_min_delta(void) {
    ct_ctx *ctx = make_ctx(NULL, 1);
    ct_option o[] = {{"metric", "valid/acc"}, {"mode", "max"}, {"min_delta", "0.125"}};
    ct_options opts = OPTS(o);
    ct_monitor m;
    CT_CHECK_INT(ct_monitor_init(ctx, &m, &opts), CT_OK);
    CT_CHECK(strcmp(m.metric, "valid/acc") == 0);
    CT_CHECK(ct_monitor_is_better(&m, 0.0)); /* first value, even 0 */
    CT_CHECK(!ct_monitor_is_better(&m, NAN));
    bool imp;
    ct_monitor_update(&m, 0.5, 10, &imp);
    CT_CHECK(imp);
    CT_CHECK(!ct_monitor_is_better(&m, 0.625)); /* best + min_delta exactly: not better */
    CT_CHECK(ct_monitor_is_better(&m, 0.6251));
    CT_CHECK(m.state.best == 0.5); /* is_better does not commit */
    ct_monitor_update(&m, 0.6, 20, &imp);
    CT_CHECK(!imp);
    ct_monitor_update(&m, 0.75, 30, &imp);
    CT_CHECK(imp && m.state.best == 0.75 && m.state.best_step == 30);
    ct_monitor_update(&m, 0.1, 40, &imp);
    CT_CHECK(!imp);
    ct_ctx_destroy(ctx);
}

static void monitor_should_reject_bad_options_naming_the_known_ones(void) {
    ct_ctx *ctx = make_ctx(NULL, 1);
    ct_monitor m;
    ct_option o1[] = {{"metrc", "valid/acc"}};
    ct_options opts = OPTS(o1);
    CT_CHECK_INT(ct_monitor_init(ctx, &m, &opts), CT_ERR_CONFIG);
    CT_CHECK(strstr(ct_last_error(ctx), "exp.yaml: train: unknown key 'metrc'") != NULL);
    CT_CHECK(strstr(ct_last_error(ctx), "known: metric, mode, min_delta") != NULL);
    ct_option o2[] = {{"mode", "up"}};
    ct_options opts2 = OPTS(o2);
    CT_CHECK_INT(ct_monitor_init(ctx, &m, &opts2), CT_ERR_CONFIG);
    CT_CHECK(strstr(ct_last_error(ctx), "expected one of: min, max") != NULL);
    ct_option o3[] = {{"min_delta", "-1"}};
    ct_options opts3 = OPTS(o3);
    CT_CHECK_INT(ct_monitor_init(ctx, &m, &opts3), CT_ERR_CONFIG);
    char longname[300];
    memset(longname, 'a', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    ct_option o4[] = {{"metric", longname}};
    ct_options opts4 = OPTS(o4);
    CT_CHECK_INT(ct_monitor_init(ctx, &m, &opts4), CT_ERR_CONFIG);
    ct_option o5[] = {{"metric", ""}};
    ct_options opts5 = OPTS(o5);
    CT_CHECK_INT(ct_monitor_init(ctx, &m, &opts5), CT_ERR_CONFIG);
    ct_ctx_destroy(ctx);
}

static const double seq[] = {3.0, NAN, 2.0, 2.0, 2.5, 1.5,  INFINITY, 1.5,  1.75, 1.0,
                             1.2, 1.3, 1.1, 1.4, NAN, 1.05, 0.9,      0.95, 1.0,  1.0};
#define SEQ_N ((int64_t)(sizeof seq / sizeof seq[0]))

static void monitor_should_resume_from_state_with_identical_decisions(void) {
    ct_ctx *ctx = make_ctx(NULL, 1);
    ct_monitor a, b;
    CT_CHECK_INT(ct_monitor_init(ctx, &a, NULL), CT_OK);
    bool ref[SEQ_N];
    for (int64_t i = 0; i < SEQ_N; i++)
        ct_monitor_update(&a, seq[i], i, &ref[i]);
    for (int64_t k = 0; k < SEQ_N; k++) {
        CT_CHECK_INT(ct_monitor_init(ctx, &a, NULL), CT_OK);
        for (int64_t i = 0; i < k; i++)
            ct_monitor_update(&a, seq[i], i, NULL);
        ct_monitor_state st;
        ct_monitor_get_state(&a, &st);
        CT_CHECK_INT(ct_monitor_init(ctx, &b, NULL), CT_OK);
        CT_CHECK_INT(ct_monitor_set_state(ctx, &b, &st), CT_OK);
        for (int64_t i = k; i < SEQ_N; i++) {
            bool imp;
            ct_monitor_update(&b, seq[i], i, &imp);
            CT_CHECK(imp == ref[i]);
        }
        CT_CHECK(b.state.best == 0.9 && b.state.best_step == 16);
    }
    ct_monitor_state bad = {NAN, 3, true};
    ct_monitor_state keep = b.state;
    CT_CHECK_INT(ct_monitor_set_state(ctx, &b, &bad), CT_ERR_INVALID_ARG);
    CT_CHECK(b.state.best == keep.best && b.state.best_step == keep.best_step);
    ct_ctx_destroy(ctx);
}

/* ---- early stopping ---- */

static void early_stop_should_count_patience_after_warmup(void) {
    ct_ctx *ctx = make_ctx(NULL, 1);
    ct_option o[] = {{"patience", "2"}, {"warmup", "1"}};
    ct_options opts = OPTS(o);
    ct_early_stop es;
    CT_CHECK_INT(ct_early_stop_init(ctx, &es, &opts), CT_OK);
    bool stop;
    ct_early_stop_update(&es, 100.0, &stop); /* warm-up: ignored, not a best */
    CT_CHECK(!stop && !es.state.monitor.has_best && es.state.bad_evals == 0);
    ct_early_stop_update(&es, 5.0, &stop); /* first monitored: best */
    CT_CHECK(!stop && es.state.monitor.best == 5.0 && es.state.monitor.best_step == 2);
    ct_early_stop_update(&es, 6.0, &stop);
    CT_CHECK(!stop && es.state.bad_evals == 1);
    ct_early_stop_update(&es, NAN, &stop); /* non-finite: a bad evaluation */
    CT_CHECK(stop && es.state.bad_evals == 2 && es.state.stopped);
    ct_early_stop_update(&es, 0.0, &stop); /* sticky */
    CT_CHECK(stop);
    CT_CHECK_INT(es.state.evals, 5);

    /* defaults: patience 5, warmup 0; ties are bad, an improvement resets */
    CT_CHECK_INT(ct_early_stop_init(ctx, &es, NULL), CT_OK);
    CT_CHECK_INT(es.patience, 5);
    CT_CHECK_INT(es.warmup, 0);
    const double v[] = {3, 2, 2, 2.5, 1, 1, 1, 1, 1, 1};
    const bool want[] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
    for (int i = 0; i < 10; i++) {
        ct_early_stop_update(&es, v[i], &stop);
        CT_CHECK_MSG(stop == want[i], "evaluation %d", i);
    }
    /* mode max with min_delta */
    ct_option o2[] = {
        {"monitor", "valid/acc"}, {"mode", "max"}, {"min_delta", "0.01"}, {"patience", "1"}};
    ct_options opts2 = OPTS(o2);
    CT_CHECK_INT(ct_early_stop_init(ctx, &es, &opts2), CT_OK);
    CT_CHECK(strcmp(es.monitor.metric, "valid/acc") == 0);
    ct_early_stop_update(&es, 0.5, &stop);
    CT_CHECK(!stop);
    ct_early_stop_update(&es, 0.505, &stop);
    CT_CHECK(stop);
    ct_ctx_destroy(ctx);
}

static void early_stop_should_reject_bad_options(void) {
    ct_ctx *ctx = make_ctx(NULL, 1);
    ct_early_stop es;
    ct_option o1[] = {{"metric", "valid/loss"}};
    ct_options opts1 = OPTS(o1);
    CT_CHECK_INT(ct_early_stop_init(ctx, &es, &opts1), CT_ERR_CONFIG);
    CT_CHECK(strstr(ct_last_error(ctx), "known: monitor, mode, min_delta, patience, warmup") !=
             NULL);
    ct_option o2[] = {{"patience", "0"}};
    ct_options opts2 = OPTS(o2);
    CT_CHECK_INT(ct_early_stop_init(ctx, &es, &opts2), CT_ERR_CONFIG);
    ct_option o3[] = {{"warmup", "x"}};
    ct_options opts3 = OPTS(o3);
    CT_CHECK_INT(ct_early_stop_init(ctx, &es, &opts3), CT_ERR_CONFIG);
    ct_ctx_destroy(ctx);
}

static void early_stop_should_resume_from_state_with_identical_decisions(void) {
    ct_ctx *ctx = make_ctx(NULL, 1);
    ct_option o[] = {{"patience", "4"}, {"warmup", "2"}, {"min_delta", "0.01"}};
    ct_options opts = OPTS(o);
    ct_early_stop a, b;
    CT_CHECK_INT(ct_early_stop_init(ctx, &a, &opts), CT_OK);
    bool ref[SEQ_N];
    int64_t first_stop = -1;
    for (int64_t i = 0; i < SEQ_N; i++) {
        ct_early_stop_update(&a, seq[i], &ref[i]);
        if (ref[i] && first_stop < 0) first_stop = i;
    }
    CT_CHECK_INT(first_stop, 13); /* best 1.0 at index 9; 10..13 are four bad evaluations */
    for (int64_t k = 0; k < SEQ_N; k++) {
        CT_CHECK_INT(ct_early_stop_init(ctx, &a, &opts), CT_OK);
        bool stop;
        for (int64_t i = 0; i < k; i++)
            ct_early_stop_update(&a, seq[i], &stop);
        ct_early_stop_state st;
        ct_early_stop_get_state(&a, &st);
        CT_CHECK_INT(ct_early_stop_init(ctx, &b, &opts), CT_OK);
        CT_CHECK_INT(ct_early_stop_set_state(ctx, &b, &st), CT_OK);
        for (int64_t i = k; i < SEQ_N; i++) {
            ct_early_stop_update(&b, seq[i], &stop);
            CT_CHECK(stop == ref[i]);
        }
    }
    ct_early_stop_state bad = {{0.0, -1, false}, 2, 3, false};
    CT_CHECK_INT(ct_early_stop_set_state(ctx, &b, &bad), CT_ERR_INVALID_ARG);
    ct_ctx_destroy(ctx);
}

/* A state that stopped under patience 4 restored under patience 6 goes on, with the decisions
 * of a run that had patience 6 from the start; under patience 4 it stays stopped. */
static void early_stop_should_go_on_under_a_raised_patience(void) {
    ct_ctx *ctx = make_ctx(NULL, 1);
    ct_option o4[] = {{"patience", "4"}, {"warmup", "2"}, {"min_delta", "0.01"}};
    ct_option o6[] = {{"patience", "6"}, {"warmup", "2"}, {"min_delta", "0.01"}};
    ct_options opts4 = OPTS(o4), opts6 = OPTS(o6);
    ct_early_stop a, b, ref;
    bool stop = false, want[SEQ_N];
    CT_CHECK_INT(ct_early_stop_init(ctx, &ref, &opts6), CT_OK);
    for (int64_t i = 0; i < SEQ_N; i++)
        ct_early_stop_update(&ref, seq[i], &want[i]);
    CT_CHECK(!want[13] && want[15]);
    CT_CHECK_INT(ct_early_stop_init(ctx, &a, &opts4), CT_OK);
    for (int64_t i = 0; i <= 13; i++)
        ct_early_stop_update(&a, seq[i], &stop);
    CT_CHECK(stop);
    ct_early_stop_state st;
    ct_early_stop_get_state(&a, &st);
    CT_CHECK_INT(ct_early_stop_init(ctx, &b, &opts4), CT_OK);
    CT_CHECK_INT(ct_early_stop_set_state(ctx, &b, &st), CT_OK);
    CT_CHECK(b.state.stopped);
    CT_CHECK_INT(ct_early_stop_init(ctx, &b, &opts6), CT_OK);
    CT_CHECK_INT(ct_early_stop_set_state(ctx, &b, &st), CT_OK);
    CT_CHECK(!b.state.stopped);
    for (int64_t i = 14; i < SEQ_N; i++) {
        ct_early_stop_update(&b, seq[i], &stop);
        CT_CHECK(stop == want[i]);
    }
    ct_ctx_destroy(ctx);
}

/* ---- EMA ---- */

/* A store with a 5-float weight, a 2-float running mean and an i64 counter. */
static ct_params *make_store(ct_ctx *ctx, int64_t n) {
    ct_params *p = NULL;
    ct_tensor *t;
    if (ct_params_create(ctx, &p) != CT_OK) abort();
    if (ct_params_add(p, "fc.weight", CT_F32, 1, (int64_t[]){n}, CT_PARAM_TRAINABLE, &t) != CT_OK)
        abort();
    if (ct_params_add(p, "bn.running_mean", CT_F32, 1, (int64_t[]){2}, CT_PARAM_BUFFER, &t) !=
        CT_OK)
        abort();
    if (ct_params_add(p, "bn.num_batches_tracked", CT_I64, 0, NULL, CT_PARAM_BUFFER, &t) != CT_OK)
        abort();
    if (ct_params_add(p, "fc.bias", CT_F32, 1, (int64_t[]){3}, CT_PARAM_TRAINABLE, &t) != CT_OK)
        abort();
    if (ct_params_alloc(p) != CT_OK) abort();
    return p;
}

static void set_all(ct_params *p, float v) {
    float *w = ct_params_values(p);
    for (int64_t i = 0; i < ct_params_numel(p); i++)
        w[i] = v;
}

static void ema_should_average_weights_by_hand(void) {
    ct_ctx *ctx = make_ctx(NULL, 1);
    ct_params *p = make_store(ctx, 5);
    CT_CHECK_INT(ct_params_numel(p), 8);
    set_all(p, 1.0f);
    ct_option o[] = {{"decay", "0.5"}};
    ct_options opts = OPTS(o);
    ct_ema *e = NULL;
    CT_CHECK_INT(ct_ema_create(ctx, p, &opts, &e), CT_OK);
    CT_CHECK_INT(ct_ema_numel(e), 8);
    const float *s = ct_ema_shadow(e);
    CT_CHECK(s[0] == 1.0f && s[7] == 1.0f); /* starts as a copy */
    bool up;
    set_all(p, 3.0f);
    CT_CHECK_INT(ct_ema_update(e, 1, &up), CT_OK);
    CT_CHECK(up);
    for (int i = 0; i < 8; i++)
        CT_CHECK(s[i] == 2.0f); /* 0.5 * 1 + 0.5 * 3 */
    set_all(p, 4.0f);
    CT_CHECK_INT(ct_ema_update(e, 2, NULL), CT_OK);
    for (int i = 0; i < 8; i++)
        CT_CHECK(s[i] == 3.0f);
    ct_ema_state st;
    ct_ema_get_state(e, &st);
    CT_CHECK_INT(st.updates, 2);
    CT_CHECK(st.decay == 0.5);
    CT_CHECK_INT(ct_ema_update(e, 0, NULL), CT_ERR_INVALID_ARG);
    ct_ema_destroy(e);

    /* warm-up: d_t = min(0.999, (1 + t) / (10 + t)) = 0.1, 2/11, 0.25 */
    ct_option o2[] = {{"warmup", "true"}};
    ct_options opts2 = OPTS(o2);
    set_all(p, 0.0f);
    CT_CHECK_INT(ct_ema_create(ctx, p, &opts2, &e), CT_OK);
    s = ct_ema_shadow(e);
    const float w[3] = {10.0f, 20.0f, -5.0f};
    const double dts[3] = {0.1, 2.0 / 11.0, 0.25};
    float ref = 0.0f;
    double refd = 0.0;
    for (int t = 0; t < 3; t++) {
        set_all(p, w[t]);
        CT_CHECK_INT(ct_ema_update(e, t + 1, NULL), CT_OK);
        ref = (float)dts[t] * ref + (float)(1.0 - dts[t]) * w[t];
        refd = dts[t] * refd + (1.0 - dts[t]) * w[t];
        ct_ema_get_state(e, &st);
        CT_CHECK(st.decay == dts[t]);
        CT_CHECK(s[0] == ref && s[7] == ref);
        CT_CHECK_CLOSE(s[3], refd, 1e-5, 1e-6);
    }
    /* 9.0, then 2/11*9 + 9/11*20 = 18.0, then 0.25*18 - 0.75*5 = 0.75 */
    CT_CHECK_CLOSE(s[0], 0.75, 1e-5, 0);
    /* far along, the decay is the configured one */
    ct_ema_state late = {1000000, 0.0};
    CT_CHECK_INT(ct_ema_set_state(e, &late), CT_OK);
    CT_CHECK_INT(ct_ema_update(e, 4, NULL), CT_OK);
    ct_ema_get_state(e, &st);
    CT_CHECK(st.decay == 0.999 && st.updates == 1000001);
    ct_ema_destroy(e);

    /* every = 3: only steps 3, 6, ... update */
    ct_option o3[] = {{"every", "3"}, {"decay", "0.5"}};
    ct_options opts3 = OPTS(o3);
    set_all(p, 0.0f);
    CT_CHECK_INT(ct_ema_create(ctx, p, &opts3, &e), CT_OK);
    s = ct_ema_shadow(e);
    set_all(p, 8.0f);
    for (int64_t step = 1; step <= 6; step++) {
        CT_CHECK_INT(ct_ema_update(e, step, &up), CT_OK);
        CT_CHECK(up == (step % 3 == 0));
    }
    CT_CHECK(s[0] == 6.0f); /* 4, then 6 */
    ct_ema_get_state(e, &st);
    CT_CHECK_INT(st.updates, 2);
    ct_ema_destroy(e);
    ct_params_destroy(p);
    ct_ctx_destroy(ctx);
}

static void ema_should_copy_buffers_not_average_them(void) {
    ct_ctx *ctx = make_ctx(NULL, 1);
    ct_params *p = make_store(ctx, 5);
    ct_tensor *rm = ct_params_find(p, "bn.running_mean");
    ct_tensor *nb = ct_params_find(p, "bn.num_batches_tracked");
    float *rmv = rm->data;
    int64_t *nbv = nb->data;
    rmv[0] = 1.0f;
    rmv[1] = 2.0f;
    *nbv = 7;
    ct_option o[] = {{"decay", "0.5"}};
    ct_options opts = OPTS(o);
    ct_ema *e = NULL;
    CT_CHECK_INT(ct_ema_create(ctx, p, &opts, &e), CT_OK);
    size_t bytes = 0;
    unsigned char *b = ct_ema_shadow_buffers(e, &bytes);
    CT_CHECK_INT(bytes, 16); /* 8 bytes of floats, 8 of i64 */
    float f[2];
    int64_t k;
    memcpy(f, b, sizeof f);
    memcpy(&k, b + 8, sizeof k);
    CT_CHECK(f[0] == 1.0f && f[1] == 2.0f && k == 7);
    rmv[0] = 5.0f;
    rmv[1] = -3.0f;
    *nbv = 9;
    CT_CHECK_INT(ct_ema_update(e, 1, NULL), CT_OK);
    memcpy(f, b, sizeof f);
    memcpy(&k, b + 8, sizeof k);
    CT_CHECK(f[0] == 5.0f && f[1] == -3.0f && k == 9); /* copied, not 3.0 / -0.5 / 8 */
    /* swapped in for evaluation: the model sees the EMA's buffers, then its own again */
    rmv[0] = 11.0f;
    *nbv = 10;
    CT_CHECK_INT(ct_ema_begin_eval(e), CT_OK);
    CT_CHECK(rmv[0] == 5.0f && *nbv == 9);
    ct_ema_end_eval(e);
    CT_CHECK(rmv[0] == 11.0f && *nbv == 10);
    ct_ema_destroy(e);
    ct_params_destroy(p);
    ct_ctx_destroy(ctx);
}

static uint32_t lcg(uint32_t *s) {
    *s = *s * 1664525u + 1013904223u;
    return *s;
}

static void fill_random(float *x, int64_t n, uint32_t seed) {
    for (int64_t i = 0; i < n; i++)
        x[i] = (float)((int32_t)lcg(&seed)) / 1e9f;
    if (n > 3) {
        x[0] = -0.0f;
        x[1] = FLT_MIN / 4.0f; /* subnormal */
        x[2] = FLT_MAX;
    }
}

/* Stand-in for an evaluation that fails half-way. */
static ct_status failing_eval(ct_ctx *ctx, const ct_params *p) {
    if (ct_params_numel(p) > 0)
        return CT_FAIL(ctx, CT_ERR_SHAPE, "evaluation: batch shape mismatch");
    return CT_OK;
}

static ct_status eval_with_ema(ct_ctx *ctx, ct_ema *e, ct_params *p) {
    CT_TRY(ct_ema_begin_eval(e));
    ct_status s = failing_eval(ctx, p);
    ct_ema_end_eval(e);
    return s;
}

static void ema_should_swap_bitwise_and_restore_raw_weights_after_a_failed_eval(void) {
    test_alloc ta = {0};
    ct_ctx *ctx = make_ctx(&ta, 1);
    ct_params *p = make_store(ctx, 1000);
    int64_t n = ct_params_numel(p);
    float *w = ct_params_values(p);
    fill_random(w, n, 1);
    ct_ema *e = NULL;
    CT_CHECK_INT(ct_ema_create(ctx, p, NULL, &e), CT_OK);
    fill_random(w, n, 2);
    CT_CHECK_INT(ct_ema_update(e, 1, NULL), CT_OK);
    fill_random(w, n, 3);
    float *raw = malloc((size_t)n * sizeof *raw), *ema = malloc((size_t)n * sizeof *ema);
    memcpy(raw, w, (size_t)n * sizeof *raw);
    memcpy(ema, ct_ema_shadow(e), (size_t)n * sizeof *ema);
    long long allocs = ta.n_alloc;

    CT_CHECK(!ct_ema_swapped(e));
    CT_CHECK_INT(ct_ema_swap_in(e), CT_OK);
    CT_CHECK(ct_ema_swapped(e));
    CT_CHECK(memcmp(w, ema, (size_t)n * sizeof *w) == 0);
    CT_CHECK(memcmp(ct_ema_shadow(e), raw, (size_t)n * sizeof *w) == 0);
    CT_CHECK_INT(ct_ema_swap_in(e), CT_ERR_INVALID_ARG);
    CT_CHECK_INT(ct_ema_update(e, 2, NULL), CT_ERR_INVALID_ARG);
    ct_ema_state st = {0, 0.0};
    CT_CHECK_INT(ct_ema_set_state(e, &st), CT_ERR_INVALID_ARG);
    CT_CHECK_INT(ct_ema_swap_out(e), CT_OK);
    CT_CHECK(memcmp(w, raw, (size_t)n * sizeof *w) == 0);
    CT_CHECK(memcmp(ct_ema_shadow(e), ema, (size_t)n * sizeof *w) == 0);
    CT_CHECK_INT(ct_ema_swap_out(e), CT_ERR_INVALID_ARG);

    /* end without begin is a no-op, twice */
    ct_ema_end_eval(e);
    ct_ema_end_eval(e);
    ct_ema_end_eval(NULL);
    CT_CHECK(memcmp(w, raw, (size_t)n * sizeof *w) == 0);

    /* an evaluation that fails: the error propagates and the raw weights are back */
    CT_CHECK_INT(eval_with_ema(ctx, e, p), CT_ERR_SHAPE);
    CT_CHECK(strstr(ct_last_error(ctx), "batch shape mismatch") != NULL);
    CT_CHECK(!ct_ema_swapped(e));
    CT_CHECK(memcmp(w, raw, (size_t)n * sizeof *w) == 0);
    CT_CHECK(memcmp(ct_ema_shadow(e), ema, (size_t)n * sizeof *w) == 0);
    /* nested begin fails and leaves the weights swapped once */
    CT_CHECK_INT(ct_ema_begin_eval(e), CT_OK);
    CT_CHECK_INT(ct_ema_begin_eval(e), CT_ERR_INVALID_ARG);
    ct_ema_end_eval(e);
    CT_CHECK(memcmp(w, raw, (size_t)n * sizeof *w) == 0);
    CT_CHECK_INT(ct_ema_update(e, 2, NULL), CT_OK);
    CT_CHECK_INT(ta.n_alloc, allocs); /* nothing allocated by update, swaps or the scope */

    free(raw);
    free(ema);
    ct_ema_destroy(e);
    ct_ema_destroy(NULL);
    ct_params_destroy(p);
    ct_ctx_destroy(ctx);
    CT_CHECK_INT(ta.live, 0);
    CT_CHECK_INT(ta.size_mismatch, 0);
}

static void ema_should_reject_bad_options_and_unallocated_stores(void) {
    ct_ctx *ctx = make_ctx(NULL, 1);
    ct_params *p = NULL;
    CT_CHECK_INT(ct_params_create(ctx, &p), CT_OK);
    ct_ema *e = (ct_ema *)1;
    CT_CHECK_INT(ct_ema_create(ctx, p, NULL, &e), CT_ERR_INVALID_ARG);
    CT_CHECK(e == NULL);
    ct_params_destroy(p);
    p = make_store(ctx, 4);
    ct_option o1[] = {{"decay", "1.5"}};
    ct_options opts1 = OPTS(o1);
    CT_CHECK_INT(ct_ema_create(ctx, p, &opts1, &e), CT_ERR_CONFIG);
    ct_option o2[] = {{"beta", "0.9"}};
    ct_options opts2 = OPTS(o2);
    CT_CHECK_INT(ct_ema_create(ctx, p, &opts2, &e), CT_ERR_CONFIG);
    CT_CHECK(strstr(ct_last_error(ctx), "known: decay, warmup, every") != NULL);
    ct_option o3[] = {{"every", "0"}};
    ct_options opts3 = OPTS(o3);
    CT_CHECK_INT(ct_ema_create(ctx, p, &opts3, &e), CT_ERR_CONFIG);
    ct_option o4[] = {{"warmup", "maybe"}};
    ct_options opts4 = OPTS(o4);
    CT_CHECK_INT(ct_ema_create(ctx, p, &opts4, &e), CT_ERR_CONFIG);
    ct_params_destroy(p);
    ct_ctx_destroy(ctx);
}

static void ema_should_fail_cleanly_when_allocation_fails(void) {
    for (long long k = 1; k <= 3; k++) {
        test_alloc ta = {0};
        ct_ctx *ctx = make_ctx(&ta, 1);
        ct_params *p = make_store(ctx, 8);
        ta.fail_at = ta.n_alloc + k;
        ct_ema *e = (ct_ema *)1;
        CT_CHECK_INT(ct_ema_create(ctx, p, NULL, &e), CT_ERR_OOM);
        CT_CHECK(e == NULL);
        ta.fail_at = 0;
        ct_params_destroy(p);
        ct_ctx_destroy(ctx);
        CT_CHECK_INT(ta.live, 0);
    }
}

static void ema_should_not_depend_on_the_thread_count(void) {
    const int64_t n = 300000;
    float *out[2] = {NULL, NULL};
    const int64_t threads[2] = {1, 2};
    for (int r = 0; r < 2; r++) {
        ct_ctx *ctx = make_ctx(NULL, threads[r]);
        ct_params *p = make_store(ctx, n);
        int64_t m = ct_params_numel(p);
        float *w = ct_params_values(p);
        fill_random(w, m, 7);
        ct_option o[] = {{"warmup", "true"}, {"decay", "0.99"}};
        ct_options opts = OPTS(o);
        ct_ema *e = NULL;
        CT_CHECK_INT(ct_ema_create(ctx, p, &opts, &e), CT_OK);
        for (int64_t step = 1; step <= 4; step++) {
            fill_random(w, m, (uint32_t)(100 + step));
            CT_CHECK_INT(ct_ema_update(e, step, NULL), CT_OK);
        }
        CT_CHECK_INT(ct_ema_swap_in(e), CT_OK);
        out[r] = malloc((size_t)m * sizeof(float));
        memcpy(out[r], w, (size_t)m * sizeof(float));
        ct_ema_destroy(e);
        ct_params_destroy(p);
        ct_ctx_destroy(ctx);
    }
    CT_CHECK(memcmp(out[0], out[1], (size_t)(n + 3) * sizeof(float)) == 0);
    for (int r = 0; r < 2; r++)
        free(out[r]);
}

/* ---- non-finite scan ---- */

static void nonfinite_should_find_nan_and_inf_anywhere_for_any_thread_count(void) {
    test_alloc ta = {0};
    ct_ctx *ctx = make_ctx(&ta, 1);
    const int64_t n = 200003;
    float *x = malloc((size_t)n * sizeof *x);
    fill_random(x, n, 11);
    const float bad[4] = {NAN, INFINITY, -INFINITY, -NAN};
    /* the ends, both sides of the scan's first 64-float block, the middle and the tail */
    const int64_t where[7] = {0, 1, 63, 64, n / 2, n - 2, n - 1};
    const int64_t threads[2] = {1, 2};
    long long allocs = ta.n_alloc;
    for (int t = 0; t < 2; t++) {
        CT_CHECK_INT(ct_ctx_set_threads(ctx, threads[t]), CT_OK);
        bool ok = false;
        CT_CHECK_INT(ct_nonfinite_check(ctx, x, n, &ok), CT_OK);
        CT_CHECK(ok); /* -0, subnormal, FLT_MAX are finite */
        for (int b = 0; b < 4; b++)
            for (int w = 0; w < 7; w++) {
                float keep = x[where[w]];
                x[where[w]] = bad[b];
                CT_CHECK_INT(ct_nonfinite_check(ctx, x, n, &ok), CT_OK);
                CT_CHECK_MSG(!ok, "threads %lld, value %g at %lld", (long long)threads[t],
                             (double)bad[b], (long long)where[w]);
                CT_CHECK_INT(ct_nonfinite_check(ctx, x, where[w], &ok), CT_OK);
                CT_CHECK(ok); /* the prefix before it is clean */
                x[where[w]] = keep;
            }
    }
    CT_CHECK_INT(ta.n_alloc, allocs);
    bool ok = true;
    CT_CHECK_INT(ct_nonfinite_check(ctx, NULL, 0, &ok), CT_OK);
    CT_CHECK(ok);
    CT_CHECK_INT(ct_nonfinite_check(ctx, NULL, 3, &ok), CT_ERR_INVALID_ARG);
    CT_CHECK(!ok);
    CT_CHECK_INT(ct_nonfinite_check(ctx, x, -1, &ok), CT_ERR_INVALID_ARG);
    free(x);
    ct_ctx_destroy(ctx);
}

/* ---- non-finite policy ---- */

static ct_nonfinite_action decide(ct_ctx *ctx, ct_nonfinite_policy *pol, bool lok, bool gok) {
    ct_nonfinite_action a = CT_NONFINITE_ACTION_COUNT;
    CT_CHECK_INT(ct_nonfinite_decide(ctx, pol, lok, gok, &a), CT_OK);
    return a;
}

/* The pass the trainer makes over summed gradients with several ranks: each divided by the
 * world size (a division, as ct_comm_allreduce_mean_f32), and the non-finite answer of
 * ct_nonfinite_check on the result, for 1 and 2 threads; FLT_MAX / 0.5 overflows to inf. */
static void divide_check_should_divide_and_find_what_the_scan_finds(void) {
    ct_ctx *ctx = make_ctx(NULL, 1);
    const int64_t n = 100003;
    float *x = malloc((size_t)n * sizeof *x), *y = malloc((size_t)n * sizeof *y);
    fill_random(x, n, 5);
    for (int t = 1; t <= 2; t++) {
        CT_CHECK_INT(ct_ctx_set_threads(ctx, t), CT_OK);
        memcpy(y, x, (size_t)n * sizeof *y);
        bool ok = false, want = false;
        ct_train_divide_check(ctx, y, n, 3.0f, &ok);
        long bad = 0;
        for (int64_t i = 0; i < n; i++)
            bad += y[i] != x[i] / 3.0f;
        CT_CHECK_INT(bad, 0);
        CT_CHECK_INT(ct_nonfinite_check(ctx, y, n, &want), CT_OK);
        CT_CHECK(ok && want);
        const float poison[3] = {NAN, -INFINITY, FLT_MAX};
        for (int p = 0; p < 3; p++) {
            memcpy(y, x, (size_t)n * sizeof *y);
            y[n / 3] = poison[p];
            ok = true;
            ct_train_divide_check(ctx, y, n, p == 2 ? 0.5f : 3.0f, &ok);
            CT_CHECK_MSG(!ok, "threads %d, poison %d", t, p);
        }
        memcpy(y, x, (size_t)n * sizeof *y);
        ct_train_divide_check(ctx, y, n, 2.0f, NULL); /* no answer asked: only the division */
        CT_CHECK(y[7] == x[7] / 2.0f);
    }
    free(x);
    free(y);
    ct_ctx_destroy(ctx);
}

static void nonfinite_policy_should_stop_by_default(void) {
    ct_ctx *ctx = make_ctx(NULL, 1);
    ct_nonfinite_policy pol;
    CT_CHECK_INT(ct_nonfinite_init(ctx, &pol, NULL), CT_OK);
    CT_CHECK_INT(pol.mode, CT_NONFINITE_MODE_STOP);
    CT_CHECK_INT(pol.max_rollbacks, 3);
    CT_CHECK_INT(decide(ctx, &pol, true, true), CT_NONFINITE_ACTION_CONTINUE);
    CT_CHECK_INT(ct_last_status(ctx), CT_OK);
    CT_CHECK_INT(decide(ctx, &pol, false, true), CT_NONFINITE_ACTION_STOP);
    CT_CHECK_INT(ct_last_status(ctx), CT_ERR_NONFINITE);
    CT_CHECK(strstr(ct_last_error(ctx), "non-finite loss (on_nonfinite = stop)") != NULL);
    CT_CHECK(strstr(ct_last_error(ctx), "HINT") != NULL);
    CT_CHECK_INT(decide(ctx, &pol, true, false), CT_NONFINITE_ACTION_STOP);
    CT_CHECK(strstr(ct_last_error(ctx), "non-finite gradients") != NULL);
    CT_CHECK_INT(decide(ctx, &pol, false, false), CT_NONFINITE_ACTION_STOP);
    CT_CHECK(strstr(ct_last_error(ctx), "non-finite loss and gradients") != NULL);

    ct_option o[] = {{"on_nonfinite", "ignore"}};
    ct_options opts = OPTS(o);
    CT_CHECK_INT(ct_nonfinite_init(ctx, &pol, &opts), CT_ERR_CONFIG);
    CT_CHECK(strstr(ct_last_error(ctx), "stop, skip, rollback") != NULL);
    ct_option o2[] = {{"max_rollback", "2"}};
    ct_options opts2 = OPTS(o2);
    CT_CHECK_INT(ct_nonfinite_init(ctx, &pol, &opts2), CT_ERR_CONFIG);
    CT_CHECK(strstr(ct_last_error(ctx), "known: on_nonfinite, max_rollbacks, max_skips") != NULL);
    ct_ctx_destroy(ctx);
}

static void nonfinite_policy_should_skip_and_count_then_stop_after_max_skips(void) {
    ct_ctx *ctx = make_ctx(NULL, 1);
    ct_option o[] = {{"on_nonfinite", "skip"}, {"max_skips", "2"}};
    ct_options opts = OPTS(o);
    ct_nonfinite_policy pol;
    CT_CHECK_INT(ct_nonfinite_init(ctx, &pol, &opts), CT_OK);
    CT_CHECK_INT(decide(ctx, &pol, false, true), CT_NONFINITE_ACTION_SKIP_UPDATE);
    CT_CHECK_INT(decide(ctx, &pol, true, false), CT_NONFINITE_ACTION_SKIP_UPDATE);
    CT_CHECK_INT(decide(ctx, &pol, true, true), CT_NONFINITE_ACTION_CONTINUE);
    CT_CHECK_INT(pol.state.skipped, 2);
    CT_CHECK_INT(pol.state.consecutive_skipped, 0);
    CT_CHECK_INT(decide(ctx, &pol, false, false), CT_NONFINITE_ACTION_SKIP_UPDATE);
    CT_CHECK_INT(decide(ctx, &pol, false, true), CT_NONFINITE_ACTION_SKIP_UPDATE);
    CT_CHECK_INT(ct_last_status(ctx), CT_OK);
    CT_CHECK_INT(decide(ctx, &pol, false, true), CT_NONFINITE_ACTION_STOP);
    CT_CHECK(strstr(ct_last_error(ctx), "after 2 skipped steps in a row (max_skips = 2, 4 "
                                        "skipped in all)") != NULL);
    CT_CHECK_INT(pol.state.skipped, 4);
    ct_ctx_destroy(ctx);
}

static void nonfinite_policy_should_roll_back_at_most_max_rollbacks_times(void) {
    ct_ctx *ctx = make_ctx(NULL, 1);
    ct_option o[] = {{"on_nonfinite", "rollback"}, {"max_rollbacks", "2"}};
    ct_options opts = OPTS(o);
    ct_nonfinite_policy pol;
    CT_CHECK_INT(ct_nonfinite_init(ctx, &pol, &opts), CT_OK);
    CT_CHECK_INT(decide(ctx, &pol, false, true), CT_NONFINITE_ACTION_ROLLBACK);
    CT_CHECK_INT(decide(ctx, &pol, true, true), CT_NONFINITE_ACTION_CONTINUE);
    CT_CHECK_INT(decide(ctx, &pol, true, false), CT_NONFINITE_ACTION_ROLLBACK);
    CT_CHECK_INT(pol.state.rollbacks, 2);
    CT_CHECK_INT(ct_last_status(ctx), CT_OK);
    CT_CHECK_INT(decide(ctx, &pol, false, true), CT_NONFINITE_ACTION_STOP);
    CT_CHECK(strstr(ct_last_error(ctx), "non-finite loss after 2 rollbacks (max_rollbacks = 2)") !=
             NULL);
    CT_CHECK_INT(pol.state.skipped, 0);

    ct_option o0[] = {{"on_nonfinite", "rollback"}, {"max_rollbacks", "0"}};
    ct_options opts0 = OPTS(o0);
    CT_CHECK_INT(ct_nonfinite_init(ctx, &pol, &opts0), CT_OK);
    CT_CHECK_INT(decide(ctx, &pol, false, true), CT_NONFINITE_ACTION_STOP);
    ct_ctx_destroy(ctx);
}

static void nonfinite_policy_should_resume_from_state_with_identical_decisions(void) {
    test_alloc ta = {0};
    ct_ctx *ctx = make_ctx(&ta, 1);
    /* flags per step: bit 0 loss ok, bit 1 grads ok */
    const int steps[] = {3, 0, 3, 1, 2, 0, 3, 3, 0, 0, 0, 0, 1, 1, 3};
    const int ns = (int)(sizeof steps / sizeof steps[0]);
    const char *modes[3] = {"stop", "skip", "rollback"};
    for (int m = 0; m < 3; m++) {
        ct_option o[] = {{"on_nonfinite", modes[m]}, {"max_rollbacks", "4"}, {"max_skips", "3"}};
        ct_options opts = OPTS(o);
        ct_nonfinite_policy a, b;
        ct_nonfinite_action ref[15];
        CT_CHECK_INT(ct_nonfinite_init(ctx, &a, &opts), CT_OK);
        long long allocs = ta.n_alloc;
        for (int i = 0; i < ns; i++)
            ref[i] = decide(ctx, &a, steps[i] & 1, steps[i] & 2);
        CT_CHECK_INT(ta.n_alloc, allocs);
        for (int k = 0; k < ns; k++) {
            CT_CHECK_INT(ct_nonfinite_init(ctx, &a, &opts), CT_OK);
            for (int i = 0; i < k; i++)
                (void)decide(ctx, &a, steps[i] & 1, steps[i] & 2);
            ct_nonfinite_state st;
            ct_nonfinite_get_state(&a, &st);
            CT_CHECK_INT(ct_nonfinite_init(ctx, &b, &opts), CT_OK);
            CT_CHECK_INT(ct_nonfinite_set_state(ctx, &b, &st), CT_OK);
            for (int i = k; i < ns; i++)
                CT_CHECK_INT(decide(ctx, &b, steps[i] & 1, steps[i] & 2), ref[i]);
        }
        if (m == 1) {
            /* max_skips 3: steps 8, 9, 10 are skipped in a row, so 11 stops (and 12 too) */
            CT_CHECK_INT(ref[1], CT_NONFINITE_ACTION_SKIP_UPDATE);
            CT_CHECK_INT(ref[5], CT_NONFINITE_ACTION_SKIP_UPDATE);
            CT_CHECK_INT(ref[10], CT_NONFINITE_ACTION_SKIP_UPDATE);
            CT_CHECK_INT(ref[11], CT_NONFINITE_ACTION_STOP);
            CT_CHECK_INT(ref[12], CT_NONFINITE_ACTION_STOP);
        }
        if (m == 2) {
            CT_CHECK_INT(ref[1], CT_NONFINITE_ACTION_ROLLBACK);
            CT_CHECK_INT(ref[5], CT_NONFINITE_ACTION_ROLLBACK); /* 4th */
            CT_CHECK_INT(ref[8], CT_NONFINITE_ACTION_STOP);
        }
        if (m == 0) CT_CHECK_INT(ref[1], CT_NONFINITE_ACTION_STOP);
    }
    ct_nonfinite_policy pol;
    CT_CHECK_INT(ct_nonfinite_init(ctx, &pol, NULL), CT_OK);
    ct_nonfinite_state bad = {1, 2, 0};
    CT_CHECK_INT(ct_nonfinite_set_state(ctx, &pol, &bad), CT_ERR_INVALID_ARG);
    CT_CHECK_INT(pol.state.skipped, 0);
    ct_ctx_destroy(ctx);
}

/* ---- accumulation windows ---- */

static ct_accum_pos pos(ct_ctx *ctx, int64_t bpe, int64_t acc, int64_t i) {
    ct_accum_pos p;
    CT_CHECK_INT(ct_accum_window(ctx, bpe, acc, i, &p), CT_OK);
    return p;
}

static void accum_should_cut_windows_at_the_epoch_end_with_their_real_length(void) {
    ct_ctx *ctx = make_ctx(NULL, 1);
    /* 10 batches, accum 4: [0..3] [4..7] [8, 9] */
    ct_accum_pos p = pos(ctx, 10, 4, 0);
    CT_CHECK(p.start == 0 && p.length == 4 && p.index == 0 && !p.last);
    p = pos(ctx, 10, 4, 3);
    CT_CHECK(p.start == 0 && p.length == 4 && p.index == 3 && p.last);
    p = pos(ctx, 10, 4, 5);
    CT_CHECK(p.start == 4 && p.length == 4 && p.index == 1 && !p.last);
    p = pos(ctx, 10, 4, 8);
    CT_CHECK(p.start == 8 && p.length == 2 && p.index == 0 && !p.last);
    p = pos(ctx, 10, 4, 9);
    CT_CHECK(p.start == 8 && p.length == 2 && p.index == 1 && p.last);
    /* accum 1: every batch its own window */
    for (int64_t i = 0; i < 5; i++) {
        p = pos(ctx, 5, 1, i);
        CT_CHECK(p.start == i && p.length == 1 && p.index == 0 && p.last);
    }
    /* accum > batches: one window of the whole epoch */
    for (int64_t i = 0; i < 7; i++) {
        p = pos(ctx, 7, 20, i);
        CT_CHECK(p.start == 0 && p.length == 7 && p.index == i && p.last == (i == 6));
    }
    /* a multiple: no short window */
    p = pos(ctx, 8, 4, 7);
    CT_CHECK(p.start == 4 && p.length == 4 && p.last);
    /* one batch per epoch */
    p = pos(ctx, 1, 3, 0);
    CT_CHECK(p.start == 0 && p.length == 1 && p.last);

    /* every combination: windows tile the epoch; the 1/length weights of a window sum to 1 */
    for (int64_t bpe = 1; bpe <= 13; bpe++)
        for (int64_t acc = 1; acc <= 15; acc++) {
            int64_t steps = 0, expect_start = 0;
            double weight = 0.0;
            bool good = true;
            for (int64_t i = 0; i < bpe; i++) {
                p = pos(ctx, bpe, acc, i);
                good = good && p.start == expect_start && p.index == i - p.start && p.length >= 1 &&
                       p.length <= acc && p.start + p.length <= bpe;
                weight += 1.0 / (double)p.length;
                if (p.last) {
                    steps++;
                    good = good && fabs(weight - 1.0) < 1e-12 && p.index == p.length - 1;
                    weight = 0.0;
                    expect_start = i + 1;
                }
            }
            CT_CHECK_MSG(good && steps == (bpe + acc - 1) / acc && expect_start == bpe,
                         "batches %lld, accum %lld", (long long)bpe, (long long)acc);
        }
    CT_CHECK_INT(ct_accum_window(ctx, 10, 4, 10, &p), CT_ERR_INVALID_ARG);
    CT_CHECK(p.length == 0 && !p.last);
    CT_CHECK_INT(ct_accum_window(ctx, 10, 0, 1, &p), CT_ERR_INVALID_ARG);
    CT_CHECK_INT(ct_accum_window(ctx, 0, 4, 0, &p), CT_ERR_INVALID_ARG);
    CT_CHECK_INT(ct_accum_window(ctx, 10, 4, -1, &p), CT_ERR_INVALID_ARG);
    ct_ctx_destroy(ctx);
}

/* ---- loss spikes ---- */

static void spike_should_flag_values_far_above_the_median_after_warmup(void) {
    ct_ctx *ctx = make_ctx(NULL, 1);
    ct_option o[] = {{"action", "warn"}, {"window", "5"}, {"threshold", "3"}, {"warmup", "4"}};
    ct_options opts = OPTS(o);
    ct_spike_detector d;
    CT_CHECK_INT(ct_spike_init(ctx, &d, &opts), CT_OK);
    ct_spike_verdict v;
    /* warmup: even a huge value is not judged, and enters the window */
    const double first[4] = {1.0, 1.2, 100.0, 0.8};
    for (int i = 0; i < 4; i++) {
        ct_spike_observe(&d, first[i], &v);
        CT_CHECK(!v.spike && v.median == 0.0);
    }
    /* window {1, 1.2, 100, 0.8}: median 1.1, MAD median{0.1, 0.1, 98.9, 0.3} = 0.2 */
    ct_spike_observe(&d, 1.1 + 3 * 1.4826 * 0.2 - 1e-9, &v);
    CT_CHECK(!v.spike);
    CT_CHECK_CLOSE(v.median, 1.1, 1e-12, 0);
    CT_CHECK_CLOSE(v.deviation, 1.4826 * 0.2, 1e-12, 0);
    /* window now full of 5; a spike is counted and kept out of it */
    ct_spike_state before;
    ct_spike_get_state(&d, &before);
    ct_spike_observe(&d, 50.0, &v);
    CT_CHECK(v.spike);
    CT_CHECK_INT(d.state.spikes, 1);
    CT_CHECK_INT(d.state.n_values, before.n_values);
    CT_CHECK(memcmp(d.state.values, before.values, sizeof before.values) == 0);
    /* non-finite values are the non-finite policy's: neither spikes nor in the window */
    ct_spike_observe(&d, NAN, &v);
    CT_CHECK(!v.spike && d.state.seen == before.seen);
    /* a value far below the median is no spike */
    ct_spike_observe(&d, -1e6, &v);
    CT_CHECK(!v.spike);
    /* a constant window: a value a little above is no spike */
    CT_CHECK_INT(ct_spike_init(ctx, &d, &opts), CT_OK);
    for (int i = 0; i < 5; i++)
        ct_spike_observe(&d, 2.0, &v);
    ct_spike_observe(&d, 2.0 + 1e-7, &v);
    CT_CHECK(!v.spike);
    ct_spike_observe(&d, 2.1, &v);
    CT_CHECK(v.spike);
    /* off: nothing is observed */
    CT_CHECK_INT(ct_spike_init(ctx, &d, NULL), CT_OK);
    CT_CHECK_INT(d.mode, CT_SPIKE_MODE_NONE);
    CT_CHECK_INT(d.window, 100);
    CT_CHECK_INT(d.warmup, 100);
    CT_CHECK(d.threshold == 6.0 && d.lr_factor == 1.0 && d.skip_batches == 1 && d.cooldown == 0);
    ct_spike_observe(&d, 1.0, &v);
    CT_CHECK_INT(d.state.seen, 0);
    ct_ctx_destroy(ctx);
}

static void spike_should_reject_bad_options_and_states(void) {
    ct_ctx *ctx = make_ctx(NULL, 1);
    ct_spike_detector d;
    const char *bad[][2] = {{"action", "stop"}, {"window", "1"},       {"window", "1025"},
                            {"threshold", "0"}, {"lr_factor", "1.5"},  {"cooldown", "-1"},
                            {"warmup", "1"},    {"skip_batches", "0"}, {"signal", "acc"},
                            {"windows", "3"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ct_option o[] = {{bad[i][0], bad[i][1]}};
        ct_options opts = OPTS(o);
        CT_CHECK_INT(ct_spike_init(ctx, &d, &opts), CT_ERR_CONFIG);
        CT_CHECK(strstr(ct_last_error(ctx), bad[i][0]) != NULL);
    }
    ct_option o[] = {{"action", "rollback"}, {"window", "4"}};
    ct_options opts = OPTS(o);
    CT_CHECK_INT(ct_spike_init(ctx, &d, &opts), CT_OK);
    ct_spike_state st;
    memset(&st, 0, sizeof st);
    st.n_values = 5; /* more than the window */
    st.seen = 5;
    CT_CHECK_INT(ct_spike_set_state(ctx, &d, &st), CT_ERR_INVALID_ARG);
    st.n_values = 1;
    st.values[0] = NAN;
    CT_CHECK_INT(ct_spike_set_state(ctx, &d, &st), CT_ERR_INVALID_ARG);
    st.values[0] = 1.0;
    st.skip_left = -1;
    CT_CHECK_INT(ct_spike_set_state(ctx, &d, &st), CT_ERR_INVALID_ARG);
    st.skip_left = 0;
    CT_CHECK_INT(ct_spike_set_state(ctx, &d, &st), CT_OK);
    ct_ctx_destroy(ctx);
}

static void spike_should_resume_from_state_with_identical_decisions(void) {
    test_alloc ta = {0};
    ct_ctx *ctx = make_ctx(&ta, 1);
    ct_option o[] = {{"action", "skip"}, {"window", "6"}, {"threshold", "4"}};
    ct_options opts = OPTS(o);
    enum { NS = 60 };
    double vals[NS];
    ct_rng r = ct_rng_init(7, 1);
    for (int i = 0; i < NS; i++) {
        float u;
        ct_rng_uniform(&r, &u, 1);
        vals[i] = 1.0 / (1.0 + 0.1 * i) + 0.05 * (double)u + (i % 13 == 12 ? 10.0 : 0.0);
    }
    ct_spike_detector a, b;
    bool ref[NS];
    int n_spikes = 0;
    CT_CHECK_INT(ct_spike_init(ctx, &a, &opts), CT_OK);
    long long allocs = ta.n_alloc;
    ct_spike_verdict v;
    for (int i = 0; i < NS; i++) {
        ct_spike_observe(&a, vals[i], &v);
        ref[i] = v.spike;
        n_spikes += v.spike;
        CT_CHECK(v.spike == (i % 13 == 12)); /* the planted ones, none else */
    }
    CT_CHECK_INT(ta.n_alloc, allocs);
    CT_CHECK_INT(n_spikes, 4);
    for (int k = 0; k < NS; k++) {
        CT_CHECK_INT(ct_spike_init(ctx, &a, &opts), CT_OK);
        for (int i = 0; i < k; i++)
            ct_spike_observe(&a, vals[i], &v);
        ct_spike_state st;
        ct_spike_get_state(&a, &st);
        CT_CHECK_INT(ct_spike_init(ctx, &b, &opts), CT_OK);
        CT_CHECK_INT(ct_spike_set_state(ctx, &b, &st), CT_OK);
        for (int i = k; i < NS; i++) {
            ct_spike_observe(&b, vals[i], &v);
            CT_CHECK(v.spike == ref[i]);
        }
    }
    ct_ctx_destroy(ctx);
}

int main(void) {
    CT_RUN(monitor_should_track_a_loss_from_the_first_value);
    CT_RUN(monitor_should_apply_mode_max_and_min_delta);
    CT_RUN(monitor_should_reject_bad_options_naming_the_known_ones);
    CT_RUN(monitor_should_resume_from_state_with_identical_decisions);
    CT_RUN(early_stop_should_count_patience_after_warmup);
    CT_RUN(early_stop_should_reject_bad_options);
    CT_RUN(early_stop_should_resume_from_state_with_identical_decisions);
    CT_RUN(early_stop_should_go_on_under_a_raised_patience);
    CT_RUN(ema_should_average_weights_by_hand);
    CT_RUN(ema_should_copy_buffers_not_average_them);
    CT_RUN(ema_should_swap_bitwise_and_restore_raw_weights_after_a_failed_eval);
    CT_RUN(ema_should_reject_bad_options_and_unallocated_stores);
    CT_RUN(ema_should_fail_cleanly_when_allocation_fails);
    CT_RUN(ema_should_not_depend_on_the_thread_count);
    CT_RUN(nonfinite_should_find_nan_and_inf_anywhere_for_any_thread_count);
    CT_RUN(divide_check_should_divide_and_find_what_the_scan_finds);
    CT_RUN(nonfinite_policy_should_stop_by_default);
    CT_RUN(nonfinite_policy_should_skip_and_count_then_stop_after_max_skips);
    CT_RUN(nonfinite_policy_should_roll_back_at_most_max_rollbacks_times);
    CT_RUN(nonfinite_policy_should_resume_from_state_with_identical_decisions);
    CT_RUN(spike_should_flag_values_far_above_the_median_after_warmup);
    CT_RUN(spike_should_reject_bad_options_and_states);
    CT_RUN(spike_should_resume_from_state_with_identical_decisions);
    CT_RUN(accum_should_cut_windows_at_the_epoch_end_with_their_real_length);
    return ct_test_finish();
}
