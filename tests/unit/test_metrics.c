/*
 * test_metrics.c - metric sets: closed-form values for every built-in type on hand-made
 * inputs, scikit-learn's zero_division=0 behaviour, batch-boundary independence, sharded
 * (summed accumulator) equality, value names, plugins, errors and allocation failures.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "ctrain/ctrain.h"
#include "harness.h"
#include "test_alloc.h"

static ct_ctx *make_ctx(test_alloc *ta) {
    ct_ctx_params p = ct_ctx_default_params();
    if (ta) p.allocator = test_allocator(ta);
    p.n_threads = 1;
    ct_ctx *ctx = NULL;
    if (ct_ctx_create(&p, &ctx) != CT_OK) abort();
    return ctx;
}

static ct_metric_spec spec(const char *type) {
    ct_metric_spec s;
    memset(&s, 0, sizeof s);
    s.type = type;
    return s;
}

/* Options as a compound literal: it lives until the end of the enclosing block. */
#define OPTS(...)                                                                                  \
    ((ct_options){(const ct_option[]){__VA_ARGS__},                                                \
                  (int64_t)(sizeof((const ct_option[]){__VA_ARGS__}) / sizeof(ct_option)),         \
                  "test"})

static ct_metric_spec spec_o(const char *type, ct_options opts) {
    ct_metric_spec s = spec(type);
    s.opts = opts;
    return s;
}

static double value_of(ct_metrics *m, const char *name) {
    double v = NAN;
    CT_CHECK_MSG(ct_metrics_get(m, name, &v) == CT_OK, "no value '%s'", name);
    return v;
}

static ct_tensor view1(void *data, ct_dtype dt, int64_t n) {
    return ct_tensor_view(data, dt, 1, (int64_t[]){n});
}

static ct_tensor view2(void *data, ct_dtype dt, int64_t n, int64_t c) {
    return ct_tensor_view(data, dt, 2, (int64_t[]){n, c});
}

/* ---- closed forms ---- */

static void metrics_should_compute_accuracy_and_topk(void) {
    ct_ctx *ctx = make_ctx(NULL);
    /* 5 samples, 4 classes; sample 4 is ignored */
    float logits[5 * 4] = {
        0.1f, 0.9f, 0.3f, 0.2f, /* argmax 1, order 1 2 3 0; target 1: top1 */
        0.5f, 0.1f, 0.4f, 0.0f, /* argmax 0, order 0 2 1 3; target 2: top2 */
        0.2f, 0.2f, 0.1f, 0.0f, /* tie 0/1: argmax 0 (lowest); target 1: rank 1 (top2) */
        0.0f, 0.1f, 0.2f, 0.3f, /* argmax 3, order 3 2 1 0; target 0: rank 3 (top4) */
        9.0f, 0.0f, 0.0f, 0.0f, /* ignored */
    };
    int64_t target[5] = {1, 2, 1, 0, -100};
    ct_metric_spec specs[] = {
        spec("accuracy"),
        spec_o("topk", OPTS({"k", "2"})),
        spec_o("topk", OPTS({"k", "3"})),
        spec_o("topk", OPTS({"k", "4"})),
    };
    ct_metrics *m = NULL;
    CT_CHECK_INT(ct_metrics_create(ctx, "valid", 4, specs, 4, &m), CT_OK);
    ct_tensor p = view2(logits, CT_F32, 5, 4), t = view1(target, CT_I64, 5);
    CT_CHECK_INT(ct_metrics_update(m, &p, &t), CT_OK);
    ct_metrics_compute(m);
    CT_CHECK(value_of(m, "valid/acc") == 0.25);
    CT_CHECK(value_of(m, "valid/top2") == 0.75);
    CT_CHECK(value_of(m, "valid/top3") == 0.75);
    CT_CHECK(value_of(m, "valid/top4") == 1.0);

    /* the same through class ids (i32) and through bf16 logits */
    ct_metrics_reset(m);
    ct_metrics_compute(m);
    CT_CHECK(isnan(value_of(m, "valid/acc"))); /* no samples: NaN */
    ct_metrics_destroy(m);
    ct_metric_spec acc = spec("accuracy");
    CT_CHECK_INT(ct_metrics_create(ctx, "valid", 4, &acc, 1, &m), CT_OK);
    int32_t ids[5] = {1, 0, 0, 3, 3};
    int32_t target32[5] = {1, 2, 1, 0, -100};
    ct_tensor pi = view1(ids, CT_I32, 5), t32 = view1(target32, CT_I32, 5);
    CT_CHECK_INT(ct_metrics_update(m, &pi, &t32), CT_OK);
    ct_bf16 lb[20];
    ct_bf16_from_f32_n(lb, logits, 20);
    ct_tensor pb = view2(lb, CT_BF16, 5, 4);
    CT_CHECK_INT(ct_metrics_update(m, &pb, &t), CT_OK);
    ct_metrics_compute(m);
    CT_CHECK(value_of(m, "valid/acc") == 0.25);
    ct_metrics_destroy(m);
    ct_ctx_destroy(ctx);
}

/*
 * y_true = 0 0 0 1 1 2 2 3 (and one ignored), y_pred = 0 0 1 1 2 2 0 2, C = 5.
 * class  tp  predicted  support  precision  recall  f1 = 2tp/(pred+support)
 *   0     2      3         3        2/3       2/3     2/3
 *   1     1      2         2        1/2       1/2     1/2
 *   2     1      3         2        1/3       1/2     2/5
 *   3     0      0         1        0 (0/0)   0       0      <- never predicted
 *   4     0      0         0        0         0       0      <- absent: not in macro
 * macro over classes 0..3: precision 3/8, recall 5/12, f1 47/120; micro = accuracy = 1/2.
 * These are scikit-learn's values with zero_division=0 (labels inferred from the data).
 */
static int64_t prf_true[9] = {0, 0, 0, 1, 1, 2, 2, 3, -100};
static int64_t prf_pred[9] = {0, 0, 1, 1, 2, 2, 0, 2, 4};

static void metrics_should_match_sklearn_precision_recall_f1(void) {
    ct_ctx *ctx = make_ctx(NULL);
    ct_metric_spec specs[] = {
        spec("precision"),
        spec("recall"),
        spec("f1"),
        spec_o("precision", OPTS({"average", "micro"})),
        spec_o("recall", OPTS({"average", "micro"})),
        spec_o("f1", OPTS({"average", "micro"})),
        spec_o("precision", OPTS({"average", "none"})),
        spec_o("recall", OPTS({"average", "none"})),
        spec_o("f1", OPTS({"average", "none"})),
        spec("confusion"),
    };
    ct_metrics *m = NULL;
    CT_CHECK_INT(ct_metrics_create(ctx, "valid", 5, specs, 10, &m), CT_OK);
    ct_tensor p = view1(prf_pred, CT_I64, 9), t = view1(prf_true, CT_I64, 9);
    CT_CHECK_INT(ct_metrics_update(m, &p, &t), CT_OK);
    ct_metrics_compute(m);
    CT_CHECK_CLOSE(value_of(m, "valid/precision_macro"), 3.0 / 8.0, 1e-15, 0);
    CT_CHECK_CLOSE(value_of(m, "valid/recall_macro"), 5.0 / 12.0, 1e-15, 0);
    CT_CHECK_CLOSE(value_of(m, "valid/f1_macro"), 47.0 / 120.0, 1e-15, 0);
    CT_CHECK(value_of(m, "valid/precision_micro") == 0.5);
    CT_CHECK(value_of(m, "valid/recall_micro") == 0.5);
    CT_CHECK(value_of(m, "valid/f1_micro") == 0.5);
    const double pr[5] = {2.0 / 3, 1.0 / 2, 1.0 / 3, 0, 0};
    const double rc[5] = {2.0 / 3, 1.0 / 2, 1.0 / 2, 0, 0};
    const double f1[5] = {2.0 / 3, 1.0 / 2, 2.0 / 5, 0, 0};
    char name[64];
    for (int c = 0; c < 5; c++) {
        snprintf(name, sizeof name, "valid/precision/%d", c);
        CT_CHECK(value_of(m, name) == pr[c]);
        snprintf(name, sizeof name, "valid/recall/%d", c);
        CT_CHECK(value_of(m, name) == rc[c]);
        snprintf(name, sizeof name, "valid/f1/%d", c);
        CT_CHECK(value_of(m, name) == f1[c]);
    }
    const double conf[5][5] = {
        {2, 1, 0, 0, 0}, {0, 1, 1, 0, 0}, {1, 0, 1, 0, 0}, {0, 0, 1, 0, 0}, {0, 0, 0, 0, 0},
    };
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < 5; j++) {
            snprintf(name, sizeof name, "valid/confusion/%d/%d", i, j);
            CT_CHECK_MSG(value_of(m, name) == conf[i][j], "%s", name);
        }
    /* no data: macro and micro are NaN, per class 0 */
    ct_metrics_reset(m);
    ct_metrics_compute(m);
    CT_CHECK(isnan(value_of(m, "valid/f1_macro")));
    CT_CHECK(isnan(value_of(m, "valid/f1_micro")));
    CT_CHECK(value_of(m, "valid/f1/0") == 0.0);
    ct_metrics_destroy(m);
    ct_ctx_destroy(ctx);
}

static void metrics_should_average_losses_by_item_count(void) {
    ct_ctx *ctx = make_ctx(NULL);
    ct_metric_spec specs[] = {
        spec_o("loss", OPTS({"components", "ce, aux"})),
        spec_o("perplexity", OPTS({"source", "loss"}, {"component", "ce"})),
    };
    ct_metrics *m = NULL;
    CT_CHECK_INT(ct_metrics_create(ctx, "train", 0, specs, 2, &m), CT_OK);
    ct_metrics_compute(m);
    CT_CHECK(isnan(value_of(m, "train/loss")));
    CT_CHECK_INT(ct_metrics_update_loss(m, NULL, 2.0, 10), CT_OK);
    CT_CHECK_INT(ct_metrics_update_loss(m, NULL, 1.0, 30), CT_OK);
    CT_CHECK_INT(ct_metrics_update_loss(m, "ce", log(3.0), 10), CT_OK);
    CT_CHECK_INT(ct_metrics_update_loss(m, "ce", log(3.0), 30), CT_OK);
    CT_CHECK_INT(ct_metrics_update_loss(m, "aux", 0.25, 40), CT_OK);
    CT_CHECK_INT(ct_metrics_update_loss(m, "reg", 99.0, 40), CT_OK); /* unlisted: ignored */
    ct_metrics_compute(m);
    CT_CHECK(value_of(m, "train/loss") == 1.25);
    CT_CHECK_CLOSE(value_of(m, "train/loss/ce"), log(3.0), 1e-15, 0);
    CT_CHECK(value_of(m, "train/loss/aux") == 0.25);
    CT_CHECK_CLOSE(value_of(m, "train/perplexity"), 3.0, 0, 1e-14);
    double v;
    CT_CHECK_INT(ct_metrics_get(m, "train/loss/reg", &v), CT_ERR_INVALID_ARG);
    CT_CHECK(strstr(ct_last_error(ctx), "train/loss/reg") != NULL);
    ct_metrics_destroy(m);
    ct_ctx_destroy(ctx);
}

static void metrics_should_compute_perplexity_from_logits(void) {
    ct_ctx *ctx = make_ctx(NULL);
    /* p(target) = 1/2, then 1/4, then ignored: mean NLL 1.5 ln 2, perplexity 2^1.5 */
    float logits[3 * 2] = {0.0f, 0.0f, (float)log(3.0), 0.0f, 5.0f, 0.0f};
    int64_t target[3] = {0, 1, -1};
    ct_metric_spec s = spec_o("perplexity", OPTS({"ignore_index", "-1"}));
    ct_metrics *m = NULL;
    CT_CHECK_INT(ct_metrics_create(ctx, "valid", 0, &s, 1, &m), CT_OK);
    ct_tensor p = view2(logits, CT_F32, 3, 2), t = view1(target, CT_I64, 3);
    CT_CHECK_INT(ct_metrics_update(m, &p, &t), CT_OK);
    ct_metrics_compute(m);
    CT_CHECK_CLOSE(value_of(m, "valid/perplexity"), 2.0 * sqrt(2.0), 0, 1e-7); /* f32 ln 3 */
    /* tokens [B, T] with logits [B, T, V] */
    ct_metrics_reset(m);
    ct_tensor p3 = ct_tensor_view(logits, CT_F32, 3, (int64_t[]){1, 3, 2});
    ct_tensor t2 = ct_tensor_view(target, CT_I64, 2, (int64_t[]){1, 3});
    CT_CHECK_INT(ct_metrics_update(m, &p3, &t2), CT_OK);
    ct_metrics_compute(m);
    CT_CHECK_CLOSE(value_of(m, "valid/perplexity"), 2.0 * sqrt(2.0), 0, 1e-7);
    ct_metrics_destroy(m);
    ct_ctx_destroy(ctx);
}

static void metrics_should_compute_regression_closed_form(void) {
    ct_ctx *ctx = make_ctx(NULL);
    /* e = 0 -1 1 -2: mse 6/4, mae 4/4; mean y 3, SS_tot 14, r2 = 1 - 6/14 = 4/7 */
    float pred[4] = {1, 2, 3, 4}, target[4] = {1, 3, 2, 6};
    ct_metric_spec specs[] = {spec("mse"), spec("mae"), spec("rmse"), spec("r2")};
    ct_metrics *m = NULL;
    CT_CHECK_INT(ct_metrics_create(ctx, "valid", 0, specs, 4, &m), CT_OK);
    ct_tensor p = view2(pred, CT_F32, 4, 1), t = view1(target, CT_F32, 4); /* [4,1] vs [4] */
    CT_CHECK_INT(ct_metrics_update(m, &p, &t), CT_OK);
    ct_metrics_compute(m);
    CT_CHECK(value_of(m, "valid/mse") == 1.5);
    CT_CHECK(value_of(m, "valid/mae") == 1.0);
    CT_CHECK(value_of(m, "valid/rmse") == sqrt(1.5));
    CT_CHECK_CLOSE(value_of(m, "valid/r2"), 4.0 / 7.0, 1e-15, 0);
    /* constant targets: r2 is 1 when exact, else 0 (scikit-learn's force_finite) */
    float c[3] = {0.1f, 0.1f, 0.1f}, off[3] = {0.1f, 0.2f, 0.1f};
    ct_tensor tc = view1(c, CT_F32, 3), po = view1(off, CT_F32, 3);
    ct_metrics_reset(m);
    CT_CHECK_INT(ct_metrics_update(m, &tc, &tc), CT_OK);
    ct_metrics_compute(m);
    CT_CHECK(value_of(m, "valid/r2") == 1.0);
    CT_CHECK(value_of(m, "valid/mse") == 0.0);
    ct_metrics_reset(m);
    CT_CHECK_INT(ct_metrics_update(m, &po, &tc), CT_OK);
    ct_metrics_compute(m);
    CT_CHECK(value_of(m, "valid/r2") == 0.0);
    ct_metrics_destroy(m);
    ct_ctx_destroy(ctx);
}

/* ---- batching and sharding ---- */

#define N_DATA 100
#define N_CLS  5

typedef struct dataset {
    float logits[N_DATA * N_CLS];
    int64_t labels[N_DATA];
    float y_pred[N_DATA], y_true[N_DATA];
} dataset;

static void make_data(dataset *d) {
    uint64_t s = 0x9e3779b97f4a7c15u;
    for (int i = 0; i < N_DATA * N_CLS; i++) {
        s = s * 6364136223846793005u + 1442695040888963407u;
        d->logits[i] = (float)((double)(s >> 40) / (double)(1u << 24) * 4.0 - 2.0);
    }
    for (int i = 0; i < N_DATA; i++) {
        s = s * 6364136223846793005u + 1442695040888963407u;
        d->labels[i] = i % 11 == 3 ? -100 : (int64_t)((s >> 33) % N_CLS);
        d->y_true[i] = (float)((double)(s >> 40) / (double)(1u << 24)) * 3.0f + 0.3f;
        d->y_pred[i] = d->y_true[i] + d->logits[i] * 0.25f;
    }
}

/* Classification types (exact counts) then float-sum types. */
static const char *const exact_types[] = {"accuracy", "topk", "precision",
                                          "recall",   "f1",   "confusion"};
static const char *const float_types[] = {"perplexity", "loss"};
static const char *const reg_types[] = {"mse", "mae", "rmse", "r2"};

static ct_metrics *make_cls_set(ct_ctx *ctx) {
    ct_metric_spec specs[10];
    int n = 0;
    for (int i = 0; i < 6; i++)
        specs[n++] = spec(exact_types[i]);
    specs[n] = spec_o("f1", OPTS({"average", "none"}));
    specs[n++].name = "f1_class";
    for (int i = 0; i < 2; i++)
        specs[n++] = spec(float_types[i]);
    ct_metrics *m = NULL;
    if (ct_metrics_create(ctx, "valid", N_CLS, specs, n, &m) != CT_OK) abort();
    return m;
}

static ct_metrics *make_reg_set(ct_ctx *ctx) {
    ct_metric_spec specs[4];
    for (int i = 0; i < 4; i++)
        specs[i] = spec(reg_types[i]);
    ct_metrics *m = NULL;
    if (ct_metrics_create(ctx, "valid", 0, specs, 4, &m) != CT_OK) abort();
    return m;
}

/* Feeds samples [lo, hi) of d to both sets, with a loss report per batch. */
static void feed(ct_metrics *cls, ct_metrics *reg, dataset *d, int64_t lo, int64_t hi) {
    int64_t n = hi - lo;
    ct_tensor p = view2((void *)(d->logits + lo * N_CLS), CT_F32, n, N_CLS);
    ct_tensor t = view1((void *)(d->labels + lo), CT_I64, n);
    CT_CHECK_INT(ct_metrics_update(cls, &p, &t), CT_OK);
    for (int64_t i = lo; i < hi; i++) /* per-sample loss reports: the same in any batching */
        CT_CHECK_INT(ct_metrics_update_loss(cls, NULL, 0.01 * (double)i + 0.1, 1), CT_OK);
    ct_tensor yp = view1((void *)(d->y_pred + lo), CT_F32, n);
    ct_tensor yt = view1((void *)(d->y_true + lo), CT_F32, n);
    CT_CHECK_INT(ct_metrics_update(reg, &yp, &yt), CT_OK);
}

/* Every value bit-identical. */
static void check_same_values(ct_metrics *a, ct_metrics *b) {
    int64_t na, nb;
    const ct_metric_value *va = ct_metrics_values(a, &na), *vb = ct_metrics_values(b, &nb);
    CT_CHECK_INT(na, nb);
    for (int64_t i = 0; i < na && i < nb; i++) {
        CT_CHECK(strcmp(va[i].name, vb[i].name) == 0);
        CT_CHECK_MSG(memcmp(&va[i].value, &vb[i].value, sizeof(double)) == 0, "%s: %.17g != %.17g",
                     va[i].name, va[i].value, vb[i].value);
    }
}

static void metrics_should_not_depend_on_batch_boundaries(void) {
    test_alloc ta = {0};
    ct_ctx *ctx = make_ctx(&ta);
    dataset d;
    make_data(&d);
    ct_metrics *c1 = make_cls_set(ctx), *r1 = make_reg_set(ctx);
    ct_metrics *c7 = make_cls_set(ctx), *r7 = make_reg_set(ctx);
    long long allocs = ta.n_alloc;
    feed(c1, r1, &d, 0, N_DATA);
    const int64_t cuts[8] = {0, 3, 23, 24, 55, 64, 81, N_DATA}; /* 7 uneven batches */
    for (int b = 0; b < 7; b++)
        feed(c7, r7, &d, cuts[b], cuts[b + 1]);
    CT_CHECK_INT(ta.n_alloc, allocs); /* updates never allocate */
    ct_metrics_compute(c1), ct_metrics_compute(c7);
    ct_metrics_compute(r1), ct_metrics_compute(r7);
    CT_CHECK_INT(ta.n_alloc, allocs);
    check_same_values(c1, c7); /* every value bit-identical */
    check_same_values(r1, r7);
    double acc = value_of(c1, "valid/acc");
    CT_CHECK(acc > 0.0 && acc < 1.0); /* the data is not degenerate */
    CT_CHECK(value_of(r1, "valid/r2") > 0.5);
    ct_metrics_destroy(c1), ct_metrics_destroy(r1);
    ct_metrics_destroy(c7), ct_metrics_destroy(r7);
    ct_ctx_destroy(ctx);
    CT_CHECK_INT(ta.live, 0);
}

/*
 * 3 ranks with contiguous shards; their buffers are summed in rank order (what a sum
 * all-reduce does) into a fresh set's buffer. Every value is bit-identical to one process's:
 * counts are exact, and the float sums (loss, NLL, e², |e|, y, y²) are exact sums rounded
 * once. (Summed in double, perplexity and R² differed in their last bits here.)
 */
static void metrics_should_give_single_process_values_from_summed_shards(void) {
    ct_ctx *ctx = make_ctx(NULL);
    dataset d;
    make_data(&d);
    ct_metrics *c1 = make_cls_set(ctx), *r1 = make_reg_set(ctx);
    feed(c1, r1, &d, 0, N_DATA);
    ct_metrics *cs = make_cls_set(ctx), *rs = make_reg_set(ctx); /* the reduced result */
    const int64_t cuts[4] = {0, 37, 67, N_DATA};
    for (int r = 0; r < 3; r++) {
        ct_metrics *cr = make_cls_set(ctx), *rr = make_reg_set(ctx);
        feed(cr, rr, &d, cuts[r], cuts[r] + (cuts[r + 1] - cuts[r]) / 2);
        feed(cr, rr, &d, cuts[r] + (cuts[r + 1] - cuts[r]) / 2, cuts[r + 1]);
        ct_metrics *pairs[2][2] = {{cr, cs}, {rr, rs}};
        for (int k = 0; k < 2; k++) {
            double *src, *dst;
            int64_t ns, nd;
            ct_metrics_accumulators(pairs[k][0], &src, &ns);
            ct_metrics_accumulators(pairs[k][1], &dst, &nd);
            CT_CHECK_INT(ns, nd);
            for (int64_t i = 0; i < ns; i++)
                dst[i] += src[i];
        }
        ct_metrics_destroy(cr), ct_metrics_destroy(rr);
    }
    ct_metrics_compute(c1), ct_metrics_compute(cs);
    ct_metrics_compute(r1), ct_metrics_compute(rs);
    check_same_values(c1, cs);
    check_same_values(r1, rs);
    ct_metrics_destroy(c1), ct_metrics_destroy(r1);
    ct_metrics_destroy(cs), ct_metrics_destroy(rs);
    ct_ctx_destroy(ctx);
}

/* ---- names, plugins ---- */

static void metrics_should_name_values_split_slash_metric(void) {
    ct_ctx *ctx = make_ctx(NULL);
    ct_metric_spec specs[] = {
        spec("accuracy"),
        spec_o("topk", OPTS({"k", "2"})),
        spec_o("precision", OPTS({"average", "none"})),
        spec("confusion"),
        spec_o("loss", OPTS({"components", "ce"})),
        spec("accuracy"),
    };
    specs[5].name = "acc_again";
    ct_metrics *m = NULL;
    CT_CHECK_INT(ct_metrics_create(ctx, "valid", 2, specs, 6, &m), CT_OK);
    const char *expected[] = {
        "valid/acc",           "valid/top2",          "valid/precision/0",   "valid/precision/1",
        "valid/confusion/0/0", "valid/confusion/0/1", "valid/confusion/1/0", "valid/confusion/1/1",
        "valid/loss",          "valid/loss/ce",       "valid/acc_again",
    };
    int64_t n;
    const ct_metric_value *v = ct_metrics_values(m, &n);
    CT_CHECK_INT(n, 11);
    for (int64_t i = 0; i < n && i < 11; i++) {
        CT_CHECK_MSG(strcmp(v[i].name, expected[i]) == 0, "%s != %s", v[i].name, expected[i]);
        CT_CHECK(isnan(v[i].value)); /* before the first compute */
    }
    ct_metrics_destroy(m);
    ct_ctx_destroy(ctx);
}

/* A user metric: the fraction of samples whose target is even (one count pair). */
static ct_status even_open(
    ct_ctx *ctx, const ct_options *opts, int64_t n_classes, void **self, ct_metric_layout *l) {
    static const char *const known[] = {NULL};
    (void)n_classes;
    *self = NULL;
    CT_TRY(ct_options_check(ctx, opts, known));
    l->n_accum = 2;
    l->n_values = 1;
    snprintf(l->name, sizeof l->name, "even");
    return CT_OK;
}
static void even_name(const void *self, int64_t i, char *buf, size_t size) {
    (void)self, (void)i;
    snprintf(buf, size, "%s", "");
}
static void even_update(const void *self, double *a, const ct_tensor *p, const ct_tensor *t) {
    (void)self, (void)p;
    for (int64_t i = 0; i < ct_tensor_numel(t); i++) {
        a[0] += ((const int64_t *)t->data)[i] % 2 == 0;
        a[1] += 1;
    }
}
static void even_compute(const void *self, const double *a, double *v) {
    (void)self;
    v[0] = a[0] / a[1];
}
static const ct_metric_vtable even_vt = {
    0, "even", even_open, even_name, NULL, even_update, NULL, even_compute, NULL,
};

static void metrics_should_take_user_metrics_through_the_same_table(void) {
    ct_ctx *ctx = make_ctx(NULL);
    int64_t n;
    const ct_metric_vtable *const *types = ct_metric_types(&n);
    CT_CHECK_INT(n, 15);
    for (int64_t i = 0; i < n; i++)
        CT_CHECK(ct_metric_type_find(types[i]->name) == types[i]);
    CT_CHECK(ct_metric_type_find("nope") == NULL);
    ct_metric_spec specs[2] = {spec("accuracy"), spec(NULL)};
    specs[1].vt = &even_vt;
    ct_metrics *m = NULL;
    CT_CHECK_INT(ct_metrics_create(ctx, "test", 0, specs, 2, &m), CT_OK);
    int64_t pred[4] = {0, 1, 1, 3}, target[4] = {0, 1, 2, 4};
    ct_tensor p = view1(pred, CT_I64, 4), t = view1(target, CT_I64, 4);
    CT_CHECK_INT(ct_metrics_update(m, &p, &t), CT_OK);
    ct_metrics_compute(m);
    CT_CHECK(value_of(m, "test/acc") == 0.5);
    CT_CHECK(value_of(m, "test/even") == 0.75);
    ct_metrics_destroy(m);
    ct_ctx_destroy(ctx);
}

/* ---- errors ---- */

static void metrics_should_report_config_errors(void) {
    ct_ctx *ctx = make_ctx(NULL);
    ct_metrics *m = (ct_metrics *)1;
    ct_metric_spec s = spec("accuracyy");
    CT_CHECK_INT(ct_metrics_create(ctx, "valid", 3, &s, 1, &m), CT_ERR_CONFIG);
    CT_CHECK(m == NULL);
    CT_CHECK(strstr(ct_last_error(ctx), "unknown metric type 'accuracyy'") != NULL);
    CT_CHECK(strstr(ct_last_error(ctx), "known: accuracy, topk, precision") != NULL);
    CT_CHECK(strstr(ct_last_error(ctx), "r2") != NULL);
    s = spec_o("f1", OPTS({"average", "weighted"}));
    CT_CHECK_INT(ct_metrics_create(ctx, "valid", 3, &s, 1, &m), CT_ERR_CONFIG);
    CT_CHECK(strstr(ct_last_error(ctx), "'weighted' (known: macro, micro, none)") != NULL);
    s = spec_o("accuracy", OPTS({"k", "3"}));
    CT_CHECK_INT(ct_metrics_create(ctx, "valid", 3, &s, 1, &m), CT_ERR_CONFIG);
    CT_CHECK(strstr(ct_last_error(ctx), "unknown key 'k'") != NULL);
    s = spec_o("topk", OPTS({"k", "4"}));
    CT_CHECK_INT(ct_metrics_create(ctx, "valid", 3, &s, 1, &m), CT_ERR_CONFIG);
    CT_CHECK(strstr(ct_last_error(ctx), "out of range [1, 3]") != NULL);
    s = spec("topk"); /* default k = 5 */
    CT_CHECK_INT(ct_metrics_create(ctx, "valid", 3, &s, 1, &m), CT_ERR_CONFIG);
    CT_CHECK(strstr(ct_last_error(ctx), "k = 5 is more than the 3 classes") != NULL);
    s = spec("precision");
    CT_CHECK_INT(ct_metrics_create(ctx, "valid", 0, &s, 1, &m), CT_ERR_CONFIG);
    CT_CHECK(strstr(ct_last_error(ctx), "needs the number of classes") != NULL);
    s = spec_o("loss", OPTS({"components", "ce,,aux"}));
    CT_CHECK_INT(ct_metrics_create(ctx, "valid", 0, &s, 1, &m), CT_ERR_CONFIG);
    s = spec_o("perplexity", OPTS({"component", "ce"}));
    CT_CHECK_INT(ct_metrics_create(ctx, "valid", 0, &s, 1, &m), CT_ERR_CONFIG);
    CT_CHECK(strstr(ct_last_error(ctx), "needs source=loss") != NULL);
    ct_metric_spec two[2] = {spec("accuracy"), spec("accuracy")};
    CT_CHECK_INT(ct_metrics_create(ctx, "valid", 3, two, 2, &m), CT_ERR_CONFIG);
    CT_CHECK(strstr(ct_last_error(ctx), "both named 'valid/acc'") != NULL);
    two[1].name = "a/b";
    CT_CHECK_INT(ct_metrics_create(ctx, "valid", 3, two, 2, &m), CT_ERR_CONFIG);
    CT_CHECK_INT(ct_metrics_create(ctx, "", 3, two, 1, &m), CT_ERR_INVALID_ARG);
    CT_CHECK_INT(ct_metrics_create(ctx, "valid", -1, two, 1, &m), CT_ERR_INVALID_ARG);
    CT_CHECK(m == NULL);
    ct_metrics_destroy(NULL);
    ct_ctx_destroy(ctx);
}

static void metrics_should_reject_bad_batches_and_count_nothing(void) {
    ct_ctx *ctx = make_ctx(NULL);
    ct_metric_spec specs[] = {spec("accuracy"), spec("topk"), spec("precision")};
    specs[1].opts = OPTS({"k", "2"});
    ct_metrics *m = NULL;
    CT_CHECK_INT(ct_metrics_create(ctx, "valid", 3, specs, 3, &m), CT_OK);
    float logits[4 * 3] = {0};
    int64_t target[5] = {0, 1, 2, 0, 1};
    ct_tensor p = view2(logits, CT_F32, 4, 3), t = view1(target, CT_I64, 5);
    CT_CHECK_INT(ct_metrics_update(m, &p, &t), CT_ERR_SHAPE);
    CT_CHECK(strstr(ct_last_error(ctx), "metric 'valid/acc'") != NULL);
    CT_CHECK(strstr(ct_last_error(ctx), "[4,3]") != NULL);
    CT_CHECK(strstr(ct_last_error(ctx), "[5]") != NULL);
    ct_tensor p2 = view2(logits, CT_F32, 3, 4);
    t = view1(target, CT_I64, 3);
    CT_CHECK_INT(ct_metrics_update(m, &p2, &t), CT_ERR_SHAPE); /* 4 classes, expected 3 */
    CT_CHECK(strstr(ct_last_error(ctx), "4 classes, expected 3") != NULL);
    float ftarget[4] = {0};
    ct_tensor tf = view1(ftarget, CT_F32, 4);
    CT_CHECK_INT(ct_metrics_update(m, &p, &tf), CT_ERR_SHAPE);
    CT_CHECK(strstr(ct_last_error(ctx), "class indices") != NULL);
    /* sample 2 out of range; the first metric's check passes nothing through to counting */
    int64_t bad[4] = {0, 1, 3, 0};
    ct_tensor tb = view1(bad, CT_I64, 4);
    specs[0].opts = OPTS({"ignore_index", "3"}); /* accuracy would accept it... */
    ct_metrics *m2 = NULL;
    CT_CHECK_INT(ct_metrics_create(ctx, "valid", 3, specs, 3, &m2), CT_OK);
    CT_CHECK_INT(ct_metrics_update(m2, &p, &tb), CT_ERR_INVALID_ARG);
    CT_CHECK(strstr(ct_last_error(ctx), "metric 'valid/top2'") != NULL);
    CT_CHECK(strstr(ct_last_error(ctx), "target 3 at sample 2 is out of range [0, 3)") != NULL);
    double *buf;
    int64_t n;
    ct_metrics_accumulators(m2, &buf, &n);
    for (int64_t i = 0; i < n; i++)
        CT_CHECK(buf[i] == 0.0); /* ...but counts nothing since a later metric failed */
    /* topk on ids, and predicted ids out of range */
    int64_t ok_ids[4] = {0, 1, 1, 2}, ids[4] = {0, 5, 1, 1};
    ct_tensor pok = view1(ok_ids, CT_I64, 4), pi = view1(ids, CT_I64, 4);
    t = view1(target, CT_I64, 4);
    CT_CHECK_INT(ct_metrics_update(m, &pok, &t), CT_ERR_SHAPE);
    CT_CHECK(strstr(ct_last_error(ctx), "topk: needs logits") != NULL);
    ct_metric_spec acc = spec("accuracy");
    ct_metrics *m3 = NULL;
    CT_CHECK_INT(ct_metrics_create(ctx, "valid", 3, &acc, 1, &m3), CT_OK);
    CT_CHECK_INT(ct_metrics_update(m3, &pi, &t), CT_ERR_INVALID_ARG);
    CT_CHECK(strstr(ct_last_error(ctx), "predicted class 5 at sample 1") != NULL);
    CT_CHECK_INT(ct_metrics_update_loss(m3, "ce", 1.0, -1), CT_ERR_INVALID_ARG);
    /* regression shapes */
    ct_metric_spec mse = spec("mse");
    ct_metrics *m4 = NULL;
    CT_CHECK_INT(ct_metrics_create(ctx, "valid", 0, &mse, 1, &m4), CT_OK);
    ct_tensor a = view2(logits, CT_F32, 2, 3), b = view2(logits, CT_F32, 3, 2);
    CT_CHECK_INT(ct_metrics_update(m4, &a, &b), CT_ERR_SHAPE);
    CT_CHECK(strstr(ct_last_error(ctx), "mse: pred [2,3] and target [3,2] differ") != NULL);
    ct_metrics_destroy(m), ct_metrics_destroy(m2);
    ct_metrics_destroy(m3), ct_metrics_destroy(m4);
    ct_ctx_destroy(ctx);
}

static void metrics_should_fail_cleanly_when_allocation_fails(void) {
    ct_metric_spec specs[] = {
        spec("accuracy"),
        spec_o("f1", OPTS({"average", "none"})),
        spec_o("loss", OPTS({"components", "ce"})),
        spec("r2"),
    };
    int ok_at = 0;
    for (long long fail = 1; fail < 40 && !ok_at; fail++) {
        test_alloc ta = {0};
        ct_ctx *ctx = make_ctx(&ta);
        ta.fail_at = ta.n_alloc + fail;
        ct_metrics *m = (ct_metrics *)1;
        ct_status st = ct_metrics_create(ctx, "valid", 3, specs, 4, &m);
        if (st == CT_OK) {
            ok_at = (int)fail;
            ct_metrics_destroy(m);
        } else {
            CT_CHECK_INT(st, CT_ERR_OOM);
            CT_CHECK(m == NULL);
        }
        ta.fail_at = 0;
        ct_ctx_destroy(ctx);
        CT_CHECK_INT(ta.live, 0);
        CT_CHECK_INT(ta.size_mismatch, 0);
    }
    CT_CHECK(ok_at > 5); /* every allocation before it failed cleanly */
}

int main(void) {
    CT_RUN(metrics_should_compute_accuracy_and_topk);
    CT_RUN(metrics_should_match_sklearn_precision_recall_f1);
    CT_RUN(metrics_should_average_losses_by_item_count);
    CT_RUN(metrics_should_compute_perplexity_from_logits);
    CT_RUN(metrics_should_compute_regression_closed_form);
    CT_RUN(metrics_should_not_depend_on_batch_boundaries);
    CT_RUN(metrics_should_give_single_process_values_from_summed_shards);
    CT_RUN(metrics_should_name_values_split_slash_metric);
    CT_RUN(metrics_should_take_user_metrics_through_the_same_table);
    CT_RUN(metrics_should_report_config_errors);
    CT_RUN(metrics_should_reject_bad_batches_and_count_nothing);
    CT_RUN(metrics_should_fail_cleanly_when_allocation_fails);
    return ct_test_finish();
}
