/*
 * cross_entropy.c - cross-entropy on logits (fused log-softmax + NLL, with label smoothing) and
 * the negative log-likelihood on log-probabilities, as PyTorch's F.cross_entropy and F.nll_loss.
 *
 * For a row x [C] with target t (not ignored) and smoothing s:
 *     loss = (1 - s) (lse(x) - x_t) + (s / C) sum_j (lse(x) - x_j)
 * Ignored rows add 0 and do not count in the mean, which divides by the number of rows that
 * are not ignored (all ignored: 0/0 = NaN, as PyTorch). Rows are independent and run in
 * parallel; each writes its own loss, and the reduction sums those in a fixed order, so the
 * result has the same bits for any thread count.
 *
 * Saved for backward: the per-row log-sum-exp (CE), in the graph's arena.
 *
 * The fast path takes exp from vmath.h (ct_vexpf) and sums a row in 8 interleaved double sums
 * added in order (vmath.h's ct_vsum), so that the loops vectorise; with CT_KERNELS_REFERENCE it
 * is libm's expf and one running sum (tests/unit/test_fast_elementwise.c compares the two).
 */
#include <math.h>
#include <string.h>

#include "autograd/autograd_internal.h"
#include "ctrain/loss.h"
#include "kernels/vmath.h"
#include "ops/ops_internal.h"

#define LANES 8

/* sum_j exp(x_j - m) over a row of c logits, in vmath.h's order (ct_vsum's of the exps): the
 * exps of a chunk first, into a buffer, so that both loops vectorise. */
CT_HOT static double sum_exp_fast(const float *x, int64_t c, float m) {
    enum { CHUNK = 256 }; /* a multiple of LANES: chunks keep the lanes' order */
    float e[CHUNK];
    double acc[LANES] = {0};
    for (int64_t j0 = 0; j0 < c; j0 += CHUNK) {
        int64_t w = c - j0 < CHUNK ? c - j0 : CHUNK, j = 0;
        for (int64_t q = 0; q < w; q++)
            e[q] = ct_vexpf(x[j0 + q] - m);
        for (; j + LANES <= w; j += LANES)
            for (int k = 0; k < LANES; k++)
                acc[k] += (double)e[j + k];
        for (int k = 0; j < w; j++, k++)
            acc[k] += (double)e[j];
    }
    double s = 0.0;
    for (int k = 0; k < LANES; k++)
        s += acc[k];
    return s;
}

enum { ARG_REDUCTION, ARG_IGNORE, ARG_VALID };

ct_cross_entropy_params ct_cross_entropy_default_params(void) {
    ct_cross_entropy_params p = {0.0f, -100, CT_REDUCTION_MEAN};
    return p;
}

/* Checks x [N, C] f32 and target [N] indices in range (or ignored); counts the valid rows. */
static bool check_class_args(ct_graph *g,
                             const char *op,
                             const ct_tensor *x,
                             const ct_tensor *target,
                             int64_t ignore_index,
                             ct_reduction reduction,
                             int64_t *n_valid) {
    char xs[96], ts[96];
    if (!ct_ops_f32(g, op, "input", x) || !ct_ops_index(g, op, "target", target)) return false;
    if ((int)reduction < 0 || reduction >= CT_REDUCTION_COUNT) {
        CT_GRAPH_FAIL(g, CT_ERR_INVALID_ARG, "%s: reduction %d is not a ct_reduction", op,
                      (int)reduction);
        return false;
    }
    if (x->ndim != 2 || x->shape[1] < 1) {
        CT_GRAPH_FAIL(g, CT_ERR_SHAPE, "%s: input must be [N, C] with C >= 1, got %s", op,
                      ct_shape_str(x, xs, sizeof xs));
        return false;
    }
    if (target->ndim != 1 || target->shape[0] != x->shape[0]) {
        CT_GRAPH_FAIL(g, CT_ERR_SHAPE, "%s: target %s does not match input %s: expected [%lld]", op,
                      ct_shape_str(target, ts, sizeof ts), ct_shape_str(x, xs, sizeof xs),
                      (long long)x->shape[0]);
        return false;
    }
    int64_t n = x->shape[0], c = x->shape[1], valid = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t t = ct_ops_index_at(target, i);
        if (t == ignore_index) continue;
        if (t < 0 || t >= c) {
            CT_GRAPH_FAIL(g, CT_ERR_INVALID_ARG,
                          "%s: target %lld at sample %lld is out of range [0, %lld)", op,
                          (long long)t, (long long)i, (long long)c);
            return false;
        }
        valid++;
    }
    *n_valid = valid;
    return true;
}

/* The output: rows [N] as is for NONE, else their fixed-order sum (divided by n_valid for
 * MEAN) as a scalar. */
static ct_tensor *
reduce_rows(ct_graph *g, float *rows, int64_t n, int64_t n_valid, ct_reduction reduction) {
    if (reduction == CT_REDUCTION_NONE) return ct_graph_wrap(g, rows, CT_F32, 1, &n);
    ct_tensor *out = ct_graph_new(g, CT_F32, 0, NULL);
    if (!out) return NULL;
    double total = ct_ops_sum_f64(rows, n, 1);
    if (reduction == CT_REDUCTION_MEAN) total /= (double)n_valid;
    *(float *)out->data = (float)total;
    return out;
}

/* The weight of row i in d(out): the upstream gradient, scaled for MEAN. */
static float row_weight(const ct_node *n, const float *gout, int64_t i) {
    ct_reduction r = (ct_reduction)n->iarg[ARG_REDUCTION];
    if (r == CT_REDUCTION_NONE) return gout[i];
    if (r == CT_REDUCTION_SUM) return gout[0];
    return (float)((double)gout[0] / (double)n->iarg[ARG_VALID]);
}

/* ---- cross-entropy ---- */

CT_HOT static void ce_backward(ct_graph *g, ct_node *n) {
    ct_tensor *x = n->in[0], *target = n->in[1];
    /* a new buffer is written whole rather than zeroed first: 0 + the term, the same bits, and
     * zeros for ignored rows */
    bool fresh;
    float *gx = ct_graph_grad_fresh(g, x, &fresh);
    if (!gx) return;
    const float *gout = n->out->grad, *xd = x->data, *lse = n->saved;
    const int64_t rows = x->shape[0], c = x->shape[1], ignore = n->iarg[ARG_IGNORE];
    const float s = n->farg[0], off = s / (float)c, on = 1.0f - s;
    if (n->iarg[ARG_VALID] == 0) { /* every row ignored: no gradient */
        if (fresh) memset(gx, 0, (size_t)(rows * c) * sizeof(float));
        return;
    }
    int nt = ct_ops_threads(g, rows, 4 * c);
    bool fast = !ct_ops_reference(g);
    CT_PAR_FOR(nt, i, rows, {
        int64_t t = ct_ops_index_at(target, i);
        float *gi = gx + i * c;
        if (t == ignore) {
            if (fresh) memset(gi, 0, (size_t)c * sizeof(float));
            continue;
        }
        const float w = row_weight(n, gout, i), li = lse[i];
        const float *xi = xd + i * c;
        if (fresh && fast)
            for (int64_t j = 0; j < c; j++)
                gi[j] = 0.0f + w * (ct_vexpf(xi[j] - li) - off);
        else if (fresh)
            for (int64_t j = 0; j < c; j++)
                gi[j] = 0.0f + w * (expf(xi[j] - li) - off);
        else if (fast)
            for (int64_t j = 0; j < c; j++)
                gi[j] += w * (ct_vexpf(xi[j] - li) - off);
        else
            for (int64_t j = 0; j < c; j++)
                gi[j] += w * (expf(xi[j] - li) - off);
        gi[t] -= w * on;
    });
}

static const ct_op_def ce_def = {"cross_entropy", ce_backward};

CT_HOT ct_tensor *ct_loss_cross_entropy(ct_graph *g,
                                        ct_tensor *logits,
                                        ct_tensor *target,
                                        const ct_cross_entropy_params *params) {
    const char *op = "cross_entropy";
    if (!ct_ops_begin(g, op, 2, (ct_tensor *[]){logits, target})) return NULL;
    ct_cross_entropy_params p = params ? *params : ct_cross_entropy_default_params();
    if (!(p.label_smoothing >= 0.0f && p.label_smoothing <= 1.0f)) {
        CT_GRAPH_FAIL(g, CT_ERR_INVALID_ARG, "%s: label_smoothing must be in [0, 1], got %g", op,
                      (double)p.label_smoothing);
        return NULL;
    }
    int64_t n_valid;
    if (!check_class_args(g, op, logits, target, p.ignore_index, p.reduction, &n_valid))
        return NULL;
    const int64_t rows = logits->shape[0], c = logits->shape[1];
    float *loss = ct_graph_alloc(g, (size_t)(rows ? rows : 1) * sizeof(float));
    float *lse = ct_graph_alloc(g, (size_t)(rows ? rows : 1) * sizeof(float));
    if (!loss || !lse) return NULL;
    const float *xd = logits->data;
    const double s = (double)p.label_smoothing;
    const int64_t ignore = p.ignore_index;
    int nt = ct_ops_threads(g, rows, 4 * c);
    bool fast = !ct_ops_reference(g);
    CT_PAR_FOR(nt, i, rows, {
        const float *xi = xd + i * c;
        float m = xi[0];
        double se = 0.0, sx = 0.0;
        if (fast) {
            m = ct_vmax(xi, c);
            se = sum_exp_fast(xi, c, m);
            sx = ct_vsum(xi, c);
        } else {
            for (int64_t j = 1; j < c; j++)
                m = xi[j] > m ? xi[j] : m;
            for (int64_t j = 0; j < c; j++) {
                se += (double)expf(xi[j] - m);
                sx += (double)xi[j];
            }
        }
        double l = (double)m + log(se);
        lse[i] = (float)l;
        int64_t t = ct_ops_index_at(target, i);
        if (t == ignore) {
            loss[i] = 0.0f;
            continue;
        }
        loss[i] = (float)((1.0 - s) * (l - (double)xi[t]) + s * (l - sx / (double)c));
    });
    ct_tensor *out = reduce_rows(g, loss, rows, n_valid, p.reduction);
    if (!out) return NULL;
    if (ct_graph_needs_grad(g, 1, &logits)) {
        ct_node *n = ct_graph_record(g, &ce_def, out, 2, (ct_tensor *[]){logits, target});
        if (!n) return NULL;
        n->saved = lse;
        n->iarg[ARG_REDUCTION] = p.reduction;
        n->iarg[ARG_IGNORE] = ignore;
        n->iarg[ARG_VALID] = n_valid;
        n->farg[0] = p.label_smoothing;
    }
    return out;
}

/* ---- negative log-likelihood ---- */

static void nll_backward(ct_graph *g, ct_node *n) {
    ct_tensor *x = n->in[0], *target = n->in[1];
    float *gx = ct_graph_grad(g, x);
    if (!gx || n->iarg[ARG_VALID] == 0) return;
    const float *gout = n->out->grad;
    const int64_t rows = x->shape[0], c = x->shape[1], ignore = n->iarg[ARG_IGNORE];
    for (int64_t i = 0; i < rows; i++) {
        int64_t t = ct_ops_index_at(target, i);
        if (t != ignore) gx[i * c + t] -= row_weight(n, gout, i);
    }
}

static const ct_op_def nll_def = {"nll_loss", nll_backward};

ct_tensor *ct_loss_nll(
    ct_graph *g, ct_tensor *logp, ct_tensor *target, int64_t ignore_index, ct_reduction reduction) {
    const char *op = "nll_loss";
    if (!ct_ops_begin(g, op, 2, (ct_tensor *[]){logp, target})) return NULL;
    int64_t n_valid;
    if (!check_class_args(g, op, logp, target, ignore_index, reduction, &n_valid)) return NULL;
    const int64_t rows = logp->shape[0], c = logp->shape[1];
    float *loss = ct_graph_alloc(g, (size_t)(rows ? rows : 1) * sizeof(float));
    if (!loss) return NULL;
    const float *xd = logp->data;
    for (int64_t i = 0; i < rows; i++) {
        int64_t t = ct_ops_index_at(target, i);
        loss[i] = t == ignore_index ? 0.0f : -xd[i * c + t];
    }
    ct_tensor *out = reduce_rows(g, loss, rows, n_valid, reduction);
    if (!out) return NULL;
    if (ct_graph_needs_grad(g, 1, &logp)) {
        ct_node *n = ct_graph_record(g, &nll_def, out, 2, (ct_tensor *[]){logp, target});
        if (!n) return NULL;
        n->iarg[ARG_REDUCTION] = reduction;
        n->iarg[ARG_IGNORE] = ignore_index;
        n->iarg[ARG_VALID] = n_valid;
    }
    return out;
}
