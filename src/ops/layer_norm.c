/*
 * layer_norm.c - layer normalisation over the last dim, as F.layer_norm(x, (D,), w, b, eps).
 *
 * x is viewed as [N, D]. Each row's mean and biased variance are computed in double, two
 * passes, by the one thread that owns the row; mean and rstd = 1/sqrt(var + eps) are saved (as
 * f32, like PyTorch) for backward. Backward:
 *     xhat = (x - mean) rstd,  g = dy * w (dy without weight),
 *     dx  += rstd (g - mean(g) - xhat mean(g xhat)),
 *     dw  += sum_rows dy xhat,  db += sum_rows dy.
 * The fast backward is one pass over blocks of rows (their number and size depend on N alone):
 * each block gives its rows' dx and its partial sums of dw and db (double), and the partials are
 * then summed in block order. The reference reads the rows again for dw and db, each column
 * summed over all rows in order by one thread. Neither depends on the thread count.
 *
 * A row's sums (mean, variance; backward's mean(g) and mean(g xhat)) are in double in 8
 * interleaved running sums added in order at the end (vmath.h's order), so that the loops can
 * vectorise (gcc leaves the backward's scalar: it has an AVX-512 twin with the same bits); with
 * CT_KERNELS_REFERENCE each is one running sum from left to right. The two differ only in the
 * last bits of a double (tests/unit/test_fast_elementwise.c).
 */
#include <math.h>
#include <string.h>

#include "autograd/autograd_internal.h"
#include "kernels/vmath.h"
#include "ops/ops_internal.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define LN_X86 1
#include <immintrin.h>
#else
#define LN_X86 0
#endif

#define COL_BLOCK 64
#define LANES     8

/* sum_j (x_j - m)^2 in double, in vmath.h's order (LANES running sums, the tail spread over
 * them, added in order). */
static inline double sum_sq_dev(const float *x, int64_t n, double m) {
    double acc[LANES] = {0};
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int k = 0; k < LANES; k++)
            acc[k] += ((double)x[i + k] - m) * ((double)x[i + k] - m);
    for (int k = 0; i < n; i++, k++)
        acc[k] += ((double)x[i] - m) * ((double)x[i] - m);
    double s = 0.0;
    for (int k = 0; k < LANES; k++)
        s += acc[k];
    return s;
}

/* The end of a row's sums (grad_sums): elements [i, n) into the running sums ag and agx
 * (element i + k into sum k), then each set of LANES sums added in order. */
static inline void grad_sums_end(const float *x,
                                 const float *dy,
                                 const float *w,
                                 float mean,
                                 float rstd,
                                 int64_t i,
                                 int64_t n,
                                 double *ag,
                                 double *agx,
                                 double *sg,
                                 double *sgx) {
    for (int k = 0; i < n; i++, k++) {
        float xhat = (x[i] - mean) * rstd;
        float gj = w ? dy[i] * w[i] : dy[i];
        ag[k] += (double)gj;
        agx[k] += (double)gj * (double)xhat;
    }
    double a = 0.0, b = 0.0;
    for (int k = 0; k < LANES; k++) {
        a += ag[k];
        b += agx[k];
    }
    *sg = a;
    *sgx = b;
}

/* Backward's row sums sum_j g_j and sum_j g_j xhat_j (g = dy w, or dy without weight), in the
 * same order. */
static inline void grad_sums(const float *x,
                             const float *dy,
                             const float *w,
                             float mean,
                             float rstd,
                             int64_t n,
                             double *sg,
                             double *sgx) {
    double ag[LANES] = {0}, agx[LANES] = {0};
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int k = 0; k < LANES; k++) {
            float xhat = (x[i + k] - mean) * rstd;
            float gj = w ? dy[i + k] * w[i + k] : dy[i + k];
            ag[k] += (double)gj;
            agx[k] += (double)gj * (double)xhat;
        }
    grad_sums_end(x, dy, w, mean, rstd, i, n, ag, agx, sg, sgx);
}

#if LN_X86
/* grad_sums with AVX-512: the LANES running sums are the lanes of one vector of doubles, each
 * element's operations (f32 xhat and g, then in double the product and the sums) those of
 * grad_sums, so the same bits. gcc leaves grad_sums' loop scalar. */
__attribute__((target("avx512f"))) static void grad_sums_avx512(const float *x,
                                                                const float *dy,
                                                                const float *w,
                                                                float mean,
                                                                float rstd,
                                                                int64_t n,
                                                                double *sg,
                                                                double *sgx) {
    const __m256 vm = _mm256_set1_ps(mean), vr = _mm256_set1_ps(rstd);
    __m512d ag = _mm512_setzero_pd(), agx = _mm512_setzero_pd();
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES) {
        __m256 xhat = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm), vr);
        __m256 g = _mm256_loadu_ps(dy + i);
        if (w) g = _mm256_mul_ps(g, _mm256_loadu_ps(w + i));
        __m512d gd = _mm512_cvtps_pd(g);
        ag = _mm512_add_pd(ag, gd);
        agx = _mm512_add_pd(agx, _mm512_mul_pd(gd, _mm512_cvtps_pd(xhat)));
    }
    double a8[LANES], b8[LANES];
    _mm512_storeu_pd(a8, ag);
    _mm512_storeu_pd(b8, agx);
    grad_sums_end(x, dy, w, mean, rstd, i, n, a8, b8, sg, sgx);
}
#endif

typedef struct ln_saved {
    float *mean; /* [N] */
    float *rstd; /* [N] */
} ln_saved;

/* Row r's part of dx: rstd (g - mean(g) - xhat mean(g xhat)), stored (fresh: 0 + the term) or
 * added. */
static inline void dx_row(const float *xr,
                          const float *dyr,
                          const float *wv,
                          float mean,
                          float rstd,
                          float mg,
                          float mgx,
                          bool fresh,
                          float *dxr,
                          int64_t D) {
    if (fresh)
        for (int64_t j = 0; j < D; j++) {
            float xhat = (xr[j] - mean) * rstd;
            float gj = wv ? dyr[j] * wv[j] : dyr[j];
            dxr[j] = 0.0f + rstd * (gj - mg - xhat * mgx);
        }
    else
        for (int64_t j = 0; j < D; j++) {
            float xhat = (xr[j] - mean) * rstd;
            float gj = wv ? dyr[j] * wv[j] : dyr[j];
            dxr[j] += rstd * (gj - mg - xhat * mgx);
        }
}

/* Rows per block of the fast backward: at least ROW_BLOCK, and at most MAX_BLOCKS blocks, so
 * that the blocks' partial sums stay small whatever N; a function of N alone. */
#define ROW_BLOCK  32
#define MAX_BLOCKS 64

static int64_t rows_per_block(int64_t N) {
    int64_t rb = (N + MAX_BLOCKS - 1) / MAX_BLOCKS;
    return rb > ROW_BLOCK ? rb : ROW_BLOCK;
}

/* Rows [r0, r1) of the fast backward: each row's dx (when dx is not NULL) and, added into aw
 * and ab (when they are not NULL), each column's dy xhat and dy; the row sums with AVX-512
 * where avx512. Restrict operands, so that the loops vectorise. */
CT_HOT static void block_rows(const float *restrict mean,
                              const float *restrict rstd,
                              const float *restrict xv,
                              const float *restrict dy,
                              const float *restrict wv,
                              float *restrict dx,
                              bool fresh,
                              double *restrict aw,
                              double *restrict ab,
                              int64_t r0,
                              int64_t r1,
                              int64_t D,
                              bool avx512) {
    for (int64_t r = r0; r < r1; r++) {
        const float *xr = xv + r * D, *dyr = dy + r * D;
        float m = mean[r], rs = rstd[r];
        if (dx) {
            double sg, sgx;
#if LN_X86
            if (avx512)
                grad_sums_avx512(xr, dyr, wv, m, rs, D, &sg, &sgx);
            else
#endif
                grad_sums(xr, dyr, wv, m, rs, D, &sg, &sgx);
            dx_row(xr, dyr, wv, m, rs, (float)(sg / (double)D), (float)(sgx / (double)D), fresh,
                   dx + r * D, D);
        }
        if (aw)
            for (int64_t j = 0; j < D; j++) {
                aw[j] += (double)(dyr[j] * ((xr[j] - m) * rs));
                ab[j] += (double)dyr[j];
            }
    }
}

/* The fast backward: one pass over blocks of rows (rows_per_block), each block giving its rows'
 * dx and its partial sums of dw and db (double, row after row); then each column's partials
 * summed in block order into dw and db. Rows are read once (the reference reads them again,
 * column block by column block), and the order of every sum depends on N and D only. */
CT_HOT static void backward_fused(ct_graph *g,
                                  const ln_saved *s,
                                  const float *xv,
                                  const float *dy,
                                  const float *wv,
                                  float *dx,
                                  bool fresh,
                                  float *dw,
                                  float *db,
                                  int64_t N,
                                  int64_t D) {
    int64_t rb = rows_per_block(N), blocks = (N + rb - 1) / rb;
    bool sums = dw || db;
    ct_graph_mark mark = ct_graph_scratch_mark(g);
    double *parts = sums ? ct_graph_alloc(g, (size_t)(2 * blocks * D) * sizeof(double)) : NULL;
    if (sums && !parts) {
        ct_graph_scratch_release(g, mark);
        return;
    }
#if LN_X86
    bool avx512 = __builtin_cpu_supports("avx512f");
#else
    bool avx512 = false;
#endif
    int nt = ct_ops_threads(g, blocks, rb * D * 12);
    CT_PAR_FOR(nt, b, blocks, {
        int64_t r0 = b * rb, r1 = r0 + rb < N ? r0 + rb : N;
        double *aw = parts ? parts + 2 * b * D : NULL;
        if (aw) memset(aw, 0, (size_t)(2 * D) * sizeof(double));
        block_rows(s->mean, s->rstd, xv, dy, wv, dx, fresh, aw, aw ? aw + D : NULL, r0, r1, D,
                   avx512);
    });
    if (sums) {
        int nc = ct_ops_threads(g, D, blocks * 2);
        CT_OMP_FOR(nc)
        for (int64_t j = 0; j < D; j++) {
            double tw = 0.0, tb = 0.0;
            for (int64_t b = 0; b < blocks; b++) {
                tw += parts[2 * b * D + j];
                tb += parts[2 * b * D + D + j];
            }
            if (dw) dw[j] += (float)tw;
            if (db) db[j] += (float)tb;
        }
    }
    ct_graph_scratch_release(g, mark);
}

CT_HOT static void layer_norm_backward(ct_graph *g, ct_node *n) {
    const ln_saved *s = n->saved;
    int64_t N = n->iarg[0], D = n->iarg[1];
    ct_tensor *x = n->in[0];
    ct_tensor *w = n->iarg[2] >= 0 ? n->in[n->iarg[2]] : NULL;
    ct_tensor *b = n->iarg[3] >= 0 ? n->in[n->iarg[3]] : NULL;
    const float *xv = x->data, *dy = n->out->grad, *wv = w ? w->data : NULL;
    bool fresh; /* dx is written whole: 0 + the term where it has no earlier contribution */
    float *dx = ct_graph_grad_fresh(g, x, &fresh);
    float *dw = ct_graph_grad(g, w);
    float *db = ct_graph_grad(g, b);
    if (ct_graph_status(g) != CT_OK || N * D == 0) return;

    if (!ct_ops_reference(g)) {
        backward_fused(g, s, xv, dy, wv, dx, fresh, dw, db, N, D);
        return;
    }
    if (dx) {
        int nt = ct_ops_threads(g, N, D * 10);
        CT_OMP_FOR(nt)
        for (int64_t r = 0; r < N; r++) {
            const float *xr = xv + r * D, *dyr = dy + r * D;
            float mean = s->mean[r], rstd = s->rstd[r];
            double sg = 0.0, sgx = 0.0;
            for (int64_t j = 0; j < D; j++) {
                float xhat = (xr[j] - mean) * rstd;
                float gj = wv ? dyr[j] * wv[j] : dyr[j];
                sg += (double)gj;
                sgx += (double)gj * (double)xhat;
            }
            dx_row(xr, dyr, wv, mean, rstd, (float)(sg / (double)D), (float)(sgx / (double)D),
                   fresh, dx + r * D, D);
        }
    }
    if (dw || db) {
        int64_t n_blocks = (D + COL_BLOCK - 1) / COL_BLOCK;
        int nt = ct_ops_threads(g, n_blocks, N * COL_BLOCK * 4);
        CT_OMP_FOR(nt)
        for (int64_t blk = 0; blk < n_blocks; blk++) {
            int64_t j0 = blk * COL_BLOCK;
            int64_t len = D - j0 < COL_BLOCK ? D - j0 : COL_BLOCK;
            double aw[COL_BLOCK] = {0}, ab[COL_BLOCK] = {0};
            for (int64_t r = 0; r < N; r++) {
                const float *xr = xv + r * D + j0, *dyr = dy + r * D + j0;
                float mean = s->mean[r], rstd = s->rstd[r];
                for (int64_t j = 0; j < len; j++) {
                    aw[j] += (double)(dyr[j] * ((xr[j] - mean) * rstd));
                    ab[j] += (double)dyr[j];
                }
            }
            for (int64_t j = 0; j < len; j++) {
                if (dw) dw[j0 + j] += (float)aw[j];
                if (db) db[j0 + j] += (float)ab[j];
            }
        }
    }
}

static const ct_op_def layer_norm_def = {"layer_norm", layer_norm_backward};

/* True when p is NULL or an f32 [D] vector. */
static bool
check_affine(ct_graph *g, const char *what, const ct_tensor *p, const ct_tensor *x, int64_t D) {
    if (!p) return true;
    if (!ct_ops_f32(g, "layer_norm", what, p)) return false;
    if (p->ndim == 1 && p->shape[0] == D) return true;
    char pb[160], xb[160];
    CT_GRAPH_FAIL(g, CT_ERR_SHAPE, "layer_norm: %s must be [%lld] (the last dim of x %s), got %s",
                  what, (long long)D, ct_shape_str(x, xb, sizeof xb),
                  ct_shape_str(p, pb, sizeof pb));
    return false;
}

CT_HOT ct_tensor *
ct_op_layer_norm(ct_graph *g, ct_tensor *x, ct_tensor *weight, ct_tensor *bias, float eps) {
    if (!ct_ops_begin(g, "layer_norm", 1, &x) || !ct_ops_f32(g, "layer_norm", "x", x)) return NULL;
    if (x->ndim < 1) {
        CT_GRAPH_FAIL(g, CT_ERR_SHAPE, "layer_norm: x must have at least one dim, got a scalar");
        return NULL;
    }
    if (!(eps >= 0.0f) || isinf(eps)) {
        CT_GRAPH_FAIL(g, CT_ERR_INVALID_ARG, "layer_norm: eps must be finite and >= 0, got %g",
                      (double)eps);
        return NULL;
    }
    int64_t D = x->shape[x->ndim - 1];
    int64_t N = D > 0 ? ct_tensor_numel(x) / D : 0;
    if (!check_affine(g, "weight", weight, x, D) || !check_affine(g, "bias", bias, x, D))
        return NULL;
    ct_tensor *y = ct_graph_new(g, CT_F32, x->ndim, x->shape);
    float *mean = ct_graph_alloc(g, (size_t)N * sizeof(float));
    float *rstd = ct_graph_alloc(g, (size_t)N * sizeof(float));
    if (!y || !mean || !rstd) return NULL;

    const float *xv = x->data, *wv = weight ? weight->data : NULL;
    const float *bv = bias ? bias->data : NULL;
    float *yv = y->data;
    bool fast = !ct_ops_reference(g);
    int nt = ct_ops_threads(g, N, D * 8);
    CT_OMP_FOR(nt)
    for (int64_t r = 0; r < N; r++) {
        const float *xr = xv + r * D;
        double m = 0.0, v = 0.0;
        if (fast) {
            m = ct_vsum(xr, D) / (double)D;
            v = sum_sq_dev(xr, D, m);
        } else {
            for (int64_t j = 0; j < D; j++)
                m += (double)xr[j];
            m /= (double)D;
            for (int64_t j = 0; j < D; j++)
                v += ((double)xr[j] - m) * ((double)xr[j] - m);
        }
        v /= (double)D;
        float mf = (float)m, rf = (float)(1.0 / sqrt(v + (double)eps));
        mean[r] = mf;
        rstd[r] = rf;
        float *yr = yv + r * D;
        for (int64_t j = 0; j < D; j++) {
            float t = (xr[j] - mf) * rf;
            if (wv) t *= wv[j];
            if (bv) t += bv[j];
            yr[j] = t;
        }
    }

    ct_tensor *in[3] = {x, NULL, NULL};
    int32_t n_in = 1;
    int64_t wi = -1, bi = -1;
    if (weight) {
        wi = n_in;
        in[n_in++] = weight;
    }
    if (bias) {
        bi = n_in;
        in[n_in++] = bias;
    }
    if (ct_graph_needs_grad(g, n_in, in)) {
        ln_saved *s = ct_graph_alloc(g, sizeof *s);
        if (!s) return NULL;
        s->mean = mean;
        s->rstd = rstd;
        ct_node *n = ct_graph_record(g, &layer_norm_def, y, n_in, in);
        if (!n) return NULL;
        n->saved = s;
        n->iarg[0] = N;
        n->iarg[1] = D;
        n->iarg[2] = wi;
        n->iarg[3] = bi;
    }
    return y;
}
