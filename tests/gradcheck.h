/*
 * gradcheck.h - checks an op's backward against central finite differences.
 *
 * The op under test is wrapped in a function that builds the forward from step copies of the
 * inputs. The scalar probed is L = sum_j out_j * r_j with fixed random weights r; the analytic
 * gradient comes from ct_graph_backward_seed(out, r), the numeric one from the 4-point central
 * difference (-L(x+2h) + 8L(x+h) - 8L(x-h) + L(x-2h)) / 12h, where each L is accumulated in
 * double from an f32 forward. Up to max_points elements per input are probed (spread evenly).
 * Inputs whose `grad` flag is false (indices, targets) are passed through and not probed.
 */
#ifndef CT_TEST_GRADCHECK_H
#define CT_TEST_GRADCHECK_H

#include "ctrain/ctrain.h"
#include "harness.h"

#define GC_MAX_IN 6

/* Builds the op's output from the inputs (step tensors already made from the host data). */
typedef ct_tensor *(*gc_forward_fn)(ct_graph *g, ct_tensor **in, void *user);

typedef struct gc_input {
    ct_dtype dtype;
    int32_t ndim;
    int64_t shape[CT_MAX_DIMS];
    void *data; /* host data of numel elements, owned by the caller */
    bool grad;  /* probe this input (f32 only) */
} gc_input;

typedef struct gc_opts {
    float eps;      /* step h; default 1e-2 */
    double atol;    /* default 1e-3 */
    double rtol;    /* default 1e-2 */
    int max_points; /* per input; default 64 */
    bool training;  /* graph training mode; default true */
} gc_opts;

static inline gc_opts gc_default_opts(void) {
    gc_opts o = {1e-2f, 1e-3, 1e-2, 64, true};
    return o;
}

#define GC_PREFILL 0.5f

static inline int64_t gc_numel(const gc_input *in) {
    int64_t n = 1;
    for (int32_t d = 0; d < in->ndim; d++)
        n *= in->shape[d];
    return n;
}

static inline float *gc_alloc(int64_t n) {
    float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    if (!p) {
        fprintf(stderr, "gradcheck: out of memory\n");
        exit(1);
    }
    return p;
}

static ct_tensor *gc_build(ct_graph *g,
                           int n,
                           gc_input *ins,
                           ct_tensor **t,
                           gc_forward_fn fn,
                           void *user,
                           bool need_grad) {
    for (int i = 0; i < n; i++) {
        t[i] = ct_graph_wrap(g, ins[i].data, ins[i].dtype, ins[i].ndim, ins[i].shape);
        if (t[i] && ins[i].grad && need_grad) t[i]->flags |= CT_TENSOR_REQUIRES_GRAD;
    }
    return fn(g, t, user);
}

static double
gc_probe(ct_graph *g, int n, gc_input *ins, gc_forward_fn fn, void *user, const float *r) {
    ct_tensor *t[GC_MAX_IN];
    ct_graph_reset(g);
    /* the graph's RNG is rewound so dropout masks repeat */
    ct_rng saved = *ct_graph_rng(g);
    ct_tensor *out = gc_build(g, n, ins, t, fn, user, false);
    *ct_graph_rng(g) = saved;
    if (!out) return NAN;
    double L = 0.0;
    const float *o = out->data;
    for (int64_t j = 0; j < ct_tensor_numel(out); j++)
        L += (double)o[j] * (double)r[j];
    return L;
}

/* Returns 1 when every probed element agrees. `what` names the case in failure messages. */
static int gc_check(const char *what,
                    ct_ctx *ctx,
                    int n,
                    gc_input *ins,
                    gc_forward_fn fn,
                    void *user,
                    const gc_opts *opts) {
    gc_opts o = opts ? *opts : gc_default_opts();
    ct_graph *g = NULL;
    if (ct_graph_create(ctx, NULL, &g) != CT_OK) {
        fprintf(stderr, "%s: cannot create a graph: %s\n", what, ct_last_error(ctx));
        ct_test_failures++;
        return 0;
    }
    ct_graph_set_training(g, o.training);
    *ct_graph_rng(g) = ct_rng_init(1234, 5);
    ct_rng saved = *ct_graph_rng(g);

    /* analytic */
    ct_tensor *t[GC_MAX_IN];
    ct_tensor *out = gc_build(g, n, ins, t, fn, user, true);
    *ct_graph_rng(g) = saved;
    if (!out) {
        fprintf(stderr, "%s: forward failed: %s\n", what, ct_last_error(ctx));
        ct_test_failures++;
        ct_graph_destroy(g);
        return 0;
    }
    int64_t n_out = ct_tensor_numel(out);
    /* Gradients must be added (+=), not stored: each probed input starts from GC_PREFILL, which
     * is subtracted afterwards, so a backward that overwrites fails the comparison. */
    float *prefilled[GC_MAX_IN] = {0};
    for (int i = 0; i < n; i++) {
        if (!ins[i].grad) continue;
        int64_t ne = gc_numel(&ins[i]);
        prefilled[i] = gc_alloc(ne);
        for (int64_t e = 0; e < ne; e++)
            prefilled[i][e] = GC_PREFILL;
        t[i]->grad = prefilled[i];
    }
    float *r = gc_alloc(n_out);
    ct_rng rr = ct_rng_init(99, 1);
    ct_rng_uniform(&rr, r, n_out);
    for (int64_t j = 0; j < n_out; j++)
        r[j] = 2.0f * r[j] - 1.0f;
    if (ct_graph_backward_seed(g, out, r) != CT_OK) {
        fprintf(stderr, "%s: backward failed: %s\n", what, ct_last_error(ctx));
        ct_test_failures++;
        free(r);
        ct_graph_destroy(g);
        return 0;
    }
    float *analytic[GC_MAX_IN] = {0};
    for (int i = 0; i < n; i++) {
        if (!ins[i].grad) continue;
        int64_t ne = gc_numel(&ins[i]);
        analytic[i] = gc_alloc(ne);
        for (int64_t e = 0; e < ne; e++)
            analytic[i][e] = prefilled[i][e] - GC_PREFILL;
        free(prefilled[i]);
    }

    int ok = 1;
    for (int i = 0; i < n && ok; i++) {
        if (!ins[i].grad) continue;
        float *x = ins[i].data;
        int64_t ne = gc_numel(&ins[i]);
        int64_t stride = ne > o.max_points ? ne / o.max_points : 1;
        for (int64_t e = 0; e < ne; e += stride) {
            float x0 = x[e];
            float h = o.eps;
            x[e] = x0 + 2 * h;
            double lp2 = gc_probe(g, n, ins, fn, user, r);
            x[e] = x0 + h;
            double lp1 = gc_probe(g, n, ins, fn, user, r);
            x[e] = x0 - h;
            double lm1 = gc_probe(g, n, ins, fn, user, r);
            x[e] = x0 - 2 * h;
            double lm2 = gc_probe(g, n, ins, fn, user, r);
            x[e] = x0;
            double num = (-lp2 + 8 * lp1 - 8 * lm1 + lm2) / (12.0 * (double)h);
            double ana = analytic[i][e];
            ct_test_checks++;
            if (!(fabs(ana - num) <= o.atol + o.rtol * fabs(num))) {
                fprintf(stderr,
                        "%s:%d: %s: %s: input %d element %lld: analytic %.7g, numeric %.7g\n",
                        __FILE__, __LINE__, ct_test_current, what, i, (long long)e, ana, num);
                ct_test_failures++;
                ok = 0;
                break;
            }
        }
    }
    for (int i = 0; i < n; i++)
        free(analytic[i]);
    free(r);
    ct_graph_destroy(g);
    return ok;
}

/* Fills a host array with uniform values in [lo, hi) from a seeded stream. */
static inline void gc_fill(float *x, int64_t n, uint64_t seed, float lo, float hi) {
    ct_rng r = ct_rng_init(seed, 0);
    ct_rng_uniform(&r, x, n);
    for (int64_t i = 0; i < n; i++)
        x[i] = lo + (hi - lo) * x[i];
}

#endif /* CT_TEST_GRADCHECK_H */
