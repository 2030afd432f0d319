/*
 * decode.c - decoding a sequence model token by token (model.h's ct_model_decoder): the gpt
 * model's key/value cache, run on the kernels without a graph, and the path that recomputes a
 * row's whole window through ct_model_forward, for every other model and setting.
 *
 * The cache path packs the new tokens of every row fed in a call into one matrix [P, C]
 * (a row's prompt, or its one new token; or its whole window again after a slide), so each
 * weight matrix is one GEMM over all of them, as the graph's linear op runs it
 * (ct_k_gemm_bias: oneDNN or OpenBLAS tiles). Attention is per (row, head): the row's new queries
 * against its cached keys and values, two GEMMs around the masked softmax rows of attention.c.
 * Layer norm, GELU and the sums are the ops' own formulas. Everything lives in buffers sized at
 * create for the largest call (the context, or the number of rows, whichever is larger: a
 * call with more packed tokens runs in several passes).
 *
 * Results do not depend on the thread count: each element is computed by one thread, in an
 * order fixed by the shapes (ct_k_gemm's contract).
 */
#include <math.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "kernels/kernels.h"
#include "kernels/vmath.h"
#include "nn/gpt_internal.h"

#define INV_SQRT_2 0.7071067811865476f
/* Segments of at most SHORT new tokens (decoding steps, short prompts) go through
 * small_linear; longer ones through a GEMM each. */
#define SHORT      8

struct ct_model_decoder {
    ct_ctx *ctx;
    ct_model *m;
    ct_dtype in_dtype;
    ct_dtype autocast;
    int64_t rows, T, V;
    bool cached;
    int64_t *hist;     /* [rows, T]: each row's window, oldest first */
    int64_t *hist_len; /* [rows] */
    /* the recomputing path */
    ct_graph *g;
    int32_t *ids32; /* [T]: a window as i32, for a model that takes i32 ids */
    /* the cache path */
    const ct_layer *root;
    int64_t L, C, H, R; /* layers, width, heads, packed tokens per pass */
    float *kc, *vc;     /* [L, rows, T, C]: keys and values by position */
    int64_t *clen;      /* [rows]: positions cached */
    int64_t *start;     /* [rows]: a call's first new position in each row (-1: not fed) */
    int64_t *tok, *pos; /* [R]: a pass's packed tokens and their positions */
    int64_t *seg_row, *seg_off, *seg_len, n_seg; /* [rows]: a pass's rows */
    int64_t n_short; /* a pass's first packed tokens, of segments of at most SHORT tokens */
    float *x, *h, *qkv, *y, *fc; /* [R, C] [R, C] [R, 3C] [R, C] [R, 4C] */
    float *scores;               /* [n_scores, T, T]: per thread */
    int64_t n_scores;
    float *lg; /* [rows, V]: a pass's logits */
};

/* ---- buffers ---- */

typedef struct buf_spec {
    void **p;
    size_t size;
} buf_spec;

static size_t fsz(int64_t n) {
    return (size_t)n * sizeof(float);
}

static size_t isz(int64_t n) {
    return (size_t)n * sizeof(int64_t);
}

/* The buffer table of d; its count. The same table frees them. */
static int buffers(ct_model_decoder *d, buf_spec *b) {
    int64_t rows = d->rows, T = d->T, C = d->C, R = d->R, L = d->L;
    int n = 0;
    b[n++] = (buf_spec){(void **)&d->hist, isz(rows * T)};
    b[n++] = (buf_spec){(void **)&d->hist_len, isz(rows)};
    b[n++] = (buf_spec){(void **)&d->ids32, (size_t)T * sizeof(int32_t)};
    if (!d->cached) return n;
    b[n++] = (buf_spec){(void **)&d->kc, fsz(L * rows * T * C)};
    b[n++] = (buf_spec){(void **)&d->vc, fsz(L * rows * T * C)};
    b[n++] = (buf_spec){(void **)&d->clen, isz(rows)};
    b[n++] = (buf_spec){(void **)&d->start, isz(rows)};
    b[n++] = (buf_spec){(void **)&d->tok, isz(R)};
    b[n++] = (buf_spec){(void **)&d->pos, isz(R)};
    b[n++] = (buf_spec){(void **)&d->seg_row, isz(rows)};
    b[n++] = (buf_spec){(void **)&d->seg_off, isz(rows)};
    b[n++] = (buf_spec){(void **)&d->seg_len, isz(rows)};
    b[n++] = (buf_spec){(void **)&d->x, fsz(R * C)};
    b[n++] = (buf_spec){(void **)&d->h, fsz(R * C)};
    b[n++] = (buf_spec){(void **)&d->qkv, fsz(R * 3 * C)};
    b[n++] = (buf_spec){(void **)&d->y, fsz(R * C)};
    b[n++] = (buf_spec){(void **)&d->fc, fsz(R * 4 * C)};
    b[n++] = (buf_spec){(void **)&d->scores, fsz(d->n_scores * T * T)};
    b[n++] = (buf_spec){(void **)&d->lg, fsz(rows * d->V)};
    return n;
}

void ct_model_decoder_destroy(ct_model_decoder *d) {
    if (!d) return;
    buf_spec b[24];
    int n = buffers(d, b);
    for (int i = 0; i < n; i++)
        ct_free(d->ctx, *b[i].p, b[i].size);
    ct_graph_destroy(d->g);
    ct_free(d->ctx, d, sizeof *d);
}

ct_model_decoder_params ct_model_decoder_default_params(void) {
    ct_model_decoder_params p = {.n_rows = 1, .use_cache = true, .autocast = CT_F32};
    return p;
}

/* Whether the cache path takes root: a gpt whose tensors are all f32 (they are as built). */
static bool cacheable(const ct_layer *root) {
    if (!ct_gpt_is_root(root) || root->n_children < 1) return false;
    for (int k = CT_GPT_WTE; k <= CT_GPT_HEAD; k++)
        if (root->t[k] && root->t[k]->dtype != CT_F32) return false;
    for (int64_t i = 0; i < root->n_children; i++)
        for (int k = 0; k < CT_LAYER_MAX_TENSORS; k++)
            if (root->children[i]->t[k] && root->children[i]->t[k]->dtype != CT_F32) return false;
    return true;
}

ct_status ct_model_decoder_create(ct_model *m,
                                  const ct_model_decoder_params *params,
                                  ct_model_decoder **out) {
    *out = NULL;
    ct_model_decoder_params p = params ? *params : ct_model_decoder_default_params();
    ct_ctx *ctx;
    ct_dtype in_dtype;
    int32_t in_ndim;
    int64_t in_shape[CT_MAX_DIMS], oshape[CT_MAX_DIMS];
    bool var_len;
    ct_layer *root = ct_model_inside(m, &ctx, &in_dtype, &in_ndim, in_shape, &var_len);
    int32_t ond = ct_model_output_shape(m, oshape);
    if (in_ndim != 1 || (in_dtype != CT_I32 && in_dtype != CT_I64) || ond != 2 ||
        oshape[0] != in_shape[0] || oshape[1] < 1 || !var_len)
        return CT_FAIL(ctx, CT_ERR_CONFIG,
                       "decoder: the model must map token ids [T] to logits [T, vocab], for "
                       "any T up to its context (a gpt model)");
    if (p.n_rows < 1 || p.n_rows > (1 << 20) || (p.autocast != CT_F32 && p.autocast != CT_BF16))
        return CT_FAIL(ctx, CT_ERR_CONFIG,
                       "decoder: n_rows %lld, expected 1..1048576, and autocast f32 or bf16",
                       (long long)p.n_rows);
    ct_model_decoder *d = ct_alloc(ctx, sizeof *d);
    if (!d) return CT_FAIL(ctx, CT_ERR_OOM, "decoder: out of memory");
    memset(d, 0, sizeof *d);
    d->ctx = ctx;
    d->m = m;
    d->in_dtype = in_dtype;
    d->autocast = p.autocast;
    d->rows = p.n_rows;
    d->T = in_shape[0];
    d->V = oshape[1];
    d->cached = p.use_cache && p.autocast == CT_F32 && root && cacheable(root);
    if (d->cached) {
        d->root = root;
        d->L = root->n_children;
        d->C = root->t[CT_GPT_WTE]->shape[1];
        d->H = root->children[0]->i[CT_GPT_I_HEAD];
        d->R = d->T > d->rows ? d->T : d->rows;
        d->n_scores = ct_ctx_threads(ctx) > 0 ? ct_ctx_threads(ctx) : 1;
    }
    buf_spec b[24];
    int n = buffers(d, b);
    ct_status s = CT_OK;
    for (int i = 0; i < n && s == CT_OK; i++)
        if (!(*b[i].p = ct_alloc(ctx, b[i].size)))
            s = CT_FAIL(ctx, CT_ERR_OOM, "decoder: out of memory (%zu bytes)", b[i].size);
    if (s == CT_OK) {
        memset(d->hist_len, 0, isz(d->rows));
        if (d->cached) memset(d->clen, 0, isz(d->rows));
    }
    if (s == CT_OK && !d->cached) {
        ct_graph_params gp = ct_graph_default_params();
        s = ct_graph_create(ctx, &gp, &d->g);
        if (s == CT_OK) s = ct_graph_set_autocast(d->g, p.autocast);
        if (s == CT_OK) {
            ct_graph_set_grad_enabled(d->g, false);
            ct_graph_set_training(d->g, false);
        }
    }
    if (s != CT_OK) {
        ct_model_decoder_destroy(d);
        return s;
    }
    *out = d;
    return CT_OK;
}

bool ct_model_decoder_cached(const ct_model_decoder *d) {
    return d->cached;
}

int64_t ct_model_decoder_context(const ct_model_decoder *d) {
    return d->T;
}

int64_t ct_model_decoder_vocab(const ct_model_decoder *d) {
    return d->V;
}

void ct_model_decoder_reset(ct_model_decoder *d, int64_t r) {
    if (!d || r < 0 || r >= d->rows) return;
    d->hist_len[r] = 0;
    if (d->cached) d->clen[r] = 0;
}

/* Appends n ids to row r's window, keeping its last T. */
static void append(ct_model_decoder *d, int64_t r, const int64_t *ids, int64_t n) {
    int64_t T = d->T, *h = d->hist + r * T, len = d->hist_len[r];
    if (n >= T) {
        memcpy(h, ids + n - T, isz(T));
        d->hist_len[r] = T;
        return;
    }
    if (len + n > T) {
        int64_t drop = len + n - T;
        memmove(h, h + drop, isz(len - drop));
        len -= drop;
    }
    memcpy(h + len, ids, isz(n));
    d->hist_len[r] = len + n;
}

/* ---- the cache path ---- */

#define LANES 16

/* a[0..LANES) summed in a fixed order. */
static inline float lanes_sum(const float *a) {
    float s[LANES / 2];
    for (int l = 0; l < LANES / 2; l++)
        s[l] = a[l] + a[l + LANES / 2];
    for (int l = 0; l < LANES / 4; l++)
        s[l] = s[l] + s[l + LANES / 4];
    return (s[0] + s[2]) + (s[1] + s[3]);
}

/* y[r, o] = y[r, o] + x[r, :] . w[o, :] for the rows [0, m) and the outputs [o0, o1): each dot
 * product in LANES partial sums (k mod LANES, in order), added in a fixed order, then the
 * tail. Every lane is its own chain of multiplies and adds (no FMA: -ffp-contract=off), so
 * however the compiler vectorises it, an element has the same bits for any m, any block of
 * outputs and any thread. */
CT_HOT static void dot_rows(const float *x, /* [m, K] */
                            int64_t m,
                            const float *w, /* [N, K] */
                            int64_t o0,
                            int64_t o1,
                            int64_t K,
                            float *y, /* [m, N] */
                            int64_t N) {
    int64_t K0 = K - K % LANES;
    for (int64_t r = 0; r < m; r++) {
        const float *xr = x + r * K;
        float *yr = y + r * N;
        int64_t o = o0;
        for (; o + 4 <= o1; o += 4) { /* four outputs share each load of x */
            const float *w0 = w + o * K, *w1 = w0 + K, *w2 = w1 + K, *w3 = w2 + K;
            float a0[LANES] = {0}, a1[LANES] = {0}, a2[LANES] = {0}, a3[LANES] = {0};
            for (int64_t k = 0; k < K0; k += LANES)
                for (int l = 0; l < LANES; l++) {
                    float xv = xr[k + l];
                    a0[l] += xv * w0[k + l];
                    a1[l] += xv * w1[k + l];
                    a2[l] += xv * w2[k + l];
                    a3[l] += xv * w3[k + l];
                }
            float s0 = lanes_sum(a0), s1 = lanes_sum(a1), s2 = lanes_sum(a2), s3 = lanes_sum(a3);
            for (int64_t k = K0; k < K; k++) {
                s0 += xr[k] * w0[k];
                s1 += xr[k] * w1[k];
                s2 += xr[k] * w2[k];
                s3 += xr[k] * w3[k];
            }
            yr[o] += s0;
            yr[o + 1] += s1;
            yr[o + 2] += s2;
            yr[o + 3] += s3;
        }
        for (; o < o1; o++) {
            const float *w0 = w + o * K;
            float a0[LANES] = {0};
            for (int64_t k = 0; k < K0; k += LANES)
                for (int l = 0; l < LANES; l++)
                    a0[l] += xr[k + l] * w0[k + l];
            float s0 = lanes_sum(a0);
            for (int64_t k = K0; k < K; k++)
                s0 += xr[k] * w0[k];
            yr[o] += s0;
        }
    }
}

/* y [m, N] = x [m, K] @ w^T + b by dot_rows, over blocks of 4 outputs spread on the threads:
 * for the decoding steps' few rows, where a GEMM would repack the whole weight matrix for
 * each call, and where a row's result must not depend on the rows beside it. */
static void small_linear(
    ct_ctx *ctx, const float *x, int64_t m, const ct_tensor *w, const ct_tensor *b, float *y) {
    int64_t N = w->shape[0], K = w->shape[1], blocks = (N + 3) / 4;
    for (int64_t r = 0; r < m; r++)
        if (b)
            memcpy(y + r * N, b->data, fsz(N));
        else
            memset(y + r * N, 0, fsz(N));
    const float *wv = w->data;
    int nt = ct_threads_for(ctx, blocks, 8 * m * K);
    CT_OMP_FOR(nt)
    for (int64_t i = 0; i < blocks; i++)
        dot_rows(x, m, wv, 4 * i, 4 * i + 4 < N ? 4 * i + 4 : N, K, y, N);
}

/* y [rows, out] = x [rows, in] @ w^T + b over a pass: the rows of short segments (the first
 * n_short) by small_linear, each longer segment (a prompt, a slid window) by one GEMM as the
 * linear op runs it (ct_k_gemm_bias). Which kernel a row meets depends only on its own
 * segment's length, so a prompt's results do not depend on the prompts beside it. */
static void linear(ct_model_decoder *d,
                   const float *x,     /* [rows, in] */
                   const ct_tensor *w, /* [out, in] */
                   const ct_tensor *b, /* [out] or NULL */
                   float *y) {         /* [rows, out] */
    ct_ctx *ctx = d->ctx;
    int64_t out = w->shape[0], in = w->shape[1];
    if (d->n_short > 0) small_linear(ctx, x, d->n_short, w, b, y);
    for (int64_t s = 0; s < d->n_seg; s++) {
        int64_t off = d->seg_off[s], rows = d->seg_len[s];
        if (off < d->n_short) continue;
        if (b)
            ct_k_gemm_bias(ctx, false, false, true, rows, out, in, x + off * in, in, w->data, in,
                           b->data, y + off * out, out);
        else
            ct_k_gemm(ctx, false, true, rows, out, in, 1.0f, x + off * in, in, w->data, in, 0.0f,
                      y + off * out, out);
    }
}

/* y = layer_norm(x) over rows of D, the layer_norm op's arithmetic (moments in double). */
CT_HOT static void layer_norm(ct_ctx *ctx,
                              const float *x, /* [N, D] */
                              int64_t N,
                              int64_t D,
                              const ct_tensor *w, /* [D] */
                              const ct_tensor *b, /* [D], NULL without bias */
                              float *y) {         /* [N, D] */
    const float *wv = w->data, *bv = b ? b->data : NULL;
    int nt = ct_threads_for(ctx, N, D * 8);
    CT_OMP_FOR(nt)
    for (int64_t r = 0; r < N; r++) {
        const float *xr = x + r * D;
        double m = 0.0, v = 0.0;
        for (int64_t j = 0; j < D; j++)
            m += (double)xr[j];
        m /= (double)D;
        for (int64_t j = 0; j < D; j++)
            v += ((double)xr[j] - m) * ((double)xr[j] - m);
        v /= (double)D;
        float mf = (float)m, rf = (float)(1.0 / sqrt(v + (double)CT_GPT_LN_EPS));
        float *yr = y + r * D;
        for (int64_t j = 0; j < D; j++)
            yr[j] = bv ? (xr[j] - mf) * rf * wv[j] + bv[j] : (xr[j] - mf) * rf * wv[j];
    }
}

CT_HOT static void add_into(ct_ctx *ctx, float *x, const float *y, int64_t n) {
    int nt = ct_threads_for(ctx, n, 2);
    CT_OMP_FOR(nt)
    for (int64_t i = 0; i < n; i++)
        x[i] = x[i] + y[i];
}

/* The exact GELU in place: vmath.h's erf with the fast kernels, libm's with the reference
 * ones, as the gelu ops choose. */
CT_HOT static void gelu(ct_ctx *ctx, float *x, int64_t n) {
    int nt = ct_threads_for(ctx, n, 16);
    if (ctx->kernels == CT_KERNELS_REFERENCE) {
        CT_OMP_FOR(nt)
        for (int64_t i = 0; i < n; i++)
            x[i] = 0.5f * x[i] * (1.0f + erff(x[i] * INV_SQRT_2));
        return;
    }
    CT_OMP_FOR(nt)
    for (int64_t i = 0; i < n; i++)
        x[i] = 0.5f * x[i] * (1.0f + ct_verff(x[i] * INV_SQRT_2));
}

/* s[0..n): the scores of the query at position i; becomes its probabilities over j <= i
 * and 0 beyond (the formula of src/kernels/attn_softmax.c). */
CT_HOT static void causal_softmax_row(float *s, int64_t i, int64_t n) {
    float mx = ct_vmax(s, i + 1);
    for (int64_t j = 0; j <= i; j++)
        s[j] = ct_vexpf(s[j] - mx);
    float inv = (float)(1.0 / ct_vsum(s, i + 1));
    for (int64_t j = 0; j <= i; j++)
        s[j] *= inv;
    for (int64_t j = i + 1; j < n; j++)
        s[j] = 0.0f;
}

/* Segment s's new queries, head hh, against the row's cached keys and values of layer l. */
static void attend(ct_model_decoder *d, int64_t l, int64_t s, int64_t hh, float *sc) {
    ct_ctx *ctx = d->ctx;
    int64_t C = d->C, T = d->T, hd = C / d->H;
    int64_t off = d->seg_off[s], m = d->seg_len[s], p0 = d->pos[off], nk = p0 + m;
    size_t base = (size_t)((l * d->rows + d->seg_row[s]) * T * C + hh * hd);
    const float *q = d->qkv + off * 3 * C + hh * hd, *k = d->kc + base, *v = d->vc + base;
    float scale = (float)(1.0 / sqrt((double)hd));
    ct_k_gemm(ctx, false, true, m, nk, hd, scale, q, 3 * C, k, C, 0.0f, sc, nk);
    for (int64_t i = 0; i < m; i++)
        causal_softmax_row(sc + i * nk, p0 + i, nk);
    ct_k_gemm(ctx, false, false, m, hd, nk, 1.0f, sc, nk, v, C, 0.0f, d->y + off * C + hh * hd, C);
}

/* Layer l's keys and values of the pass's tokens into the cache. */
static void store_kv(ct_model_decoder *d, int64_t l) {
    int64_t C = d->C, T = d->T;
    for (int64_t s = 0; s < d->n_seg; s++) {
        int64_t off = d->seg_off[s], row = d->seg_row[s];
        for (int64_t i = off; i < off + d->seg_len[s]; i++) {
            size_t at = (size_t)(((l * d->rows + row) * T + d->pos[i]) * C);
            memcpy(d->kc + at, d->qkv + i * 3 * C + C, fsz(C));
            memcpy(d->vc + at, d->qkv + i * 3 * C + 2 * C, fsz(C));
        }
    }
}

static void block(ct_model_decoder *d, int64_t l, int64_t P) {
    ct_ctx *ctx = d->ctx;
    ct_tensor *const *t = d->root->children[l]->t;
    int64_t C = d->C, H = d->H, hd = C / H, T = d->T;
    layer_norm(ctx, d->x, P, C, t[CT_GPT_LN1_W], t[CT_GPT_LN1_B], d->h);
    linear(d, d->h, t[CT_GPT_ATT_W], t[CT_GPT_ATT_B], d->qkv);
    store_kv(d, l);
    /* over (row, head) pairs; each thread its own score block */
    int64_t items = d->n_seg * H;
    int nt = ct_threads_for(ctx, items, 4 * T * hd);
    if (nt > d->n_scores) nt = (int)d->n_scores;
    CT_OMP_FOR(nt)
    for (int64_t it = 0; it < items; it++) {
#ifdef _OPENMP
        int64_t tid = omp_get_thread_num();
#else
        int64_t tid = 0;
#endif
        attend(d, l, it / H, it % H, d->scores + tid * T * T);
    }
    linear(d, d->y, t[CT_GPT_APR_W], t[CT_GPT_APR_B], d->h);
    add_into(ctx, d->x, d->h, P * C);
    layer_norm(ctx, d->x, P, C, t[CT_GPT_LN2_W], t[CT_GPT_LN2_B], d->h);
    linear(d, d->h, t[CT_GPT_FC_W], t[CT_GPT_FC_B], d->fc);
    gelu(ctx, d->fc, P * 4 * C);
    linear(d, d->fc, t[CT_GPT_MPR_W], t[CT_GPT_MPR_B], d->h);
    add_into(ctx, d->x, d->h, P * C);
}

/* The pass's P packed tokens through the model; each segment's last logits into logits. */
static void run_pass(ct_model_decoder *d, int64_t P, float *logits) {
    ct_ctx *ctx = d->ctx;
    const ct_layer *root = d->root;
    int64_t C = d->C, V = d->V;
    const float *wte = root->t[CT_GPT_WTE]->data, *wpe = root->t[CT_GPT_WPE]->data;
    for (int64_t i = 0; i < P; i++) {
        const float *a = wte + d->tok[i] * C, *b = wpe + d->pos[i] * C;
        float *xi = d->x + i * C;
        for (int64_t j = 0; j < C; j++)
            xi[j] = a[j] + b[j];
    }
    for (int64_t l = 0; l < d->L; l++)
        block(d, l, P);
    /* ln_f and the head over the segments' last tokens only */
    int64_t ns = d->n_seg;
    for (int64_t s = 0; s < ns; s++)
        memcpy(d->y + s * C, d->x + (d->seg_off[s] + d->seg_len[s] - 1) * C, fsz(C));
    layer_norm(ctx, d->y, ns, C, root->t[CT_GPT_LNF_W], root->t[CT_GPT_LNF_B], d->h);
    const ct_tensor *head = root->t[CT_GPT_HEAD] ? root->t[CT_GPT_HEAD] : root->t[CT_GPT_WTE];
    small_linear(ctx, d->h, ns, head, NULL, d->lg);
    for (int64_t s = 0; s < ns; s++)
        memcpy(logits + d->seg_row[s] * V, d->lg + s * V, fsz(V));
}

/* Adds row r's new tokens to the pass (running it first when they would not fit): its window
 * again after a slide or at its start, else the tokens after its cached ones. */
static void pack_row(ct_model_decoder *d, int64_t r, int64_t start, int64_t *P, float *logits) {
    int64_t len = d->hist_len[r] - start;
    if (*P + len > d->R) {
        run_pass(d, *P, logits);
        *P = 0;
        d->n_seg = 0;
        d->n_short = 0;
    }
    const int64_t *h = d->hist + r * d->T;
    for (int64_t j = 0; j < len; j++) {
        d->tok[*P + j] = h[start + j];
        d->pos[*P + j] = start + j;
    }
    d->seg_row[d->n_seg] = r;
    d->seg_off[d->n_seg] = *P;
    d->seg_len[d->n_seg] = len;
    d->n_seg++;
    if (len <= SHORT && *P == d->n_short) d->n_short += len;
    *P += len;
    d->clen[r] = d->hist_len[r];
}

/* Rows' new tokens, packed into passes of at most R tokens: the short segments first. */
static void feed_cached(ct_model_decoder *d, const int64_t *n_ids, float *logits) {
    int64_t T = d->T, P = 0;
    d->n_seg = 0;
    d->n_short = 0;
    /* the window slid (or the row starts): every position is new */
    for (int64_t r = 0; r < d->rows; r++)
        d->start[r] = n_ids[r] <= 0 ? -1 : d->clen[r] + n_ids[r] <= T ? d->clen[r] : 0;
    for (int pass = 0; pass < 2; pass++)
        for (int64_t r = 0; r < d->rows; r++)
            if (d->start[r] >= 0 && (d->hist_len[r] - d->start[r] <= SHORT) == (pass == 0))
                pack_row(d, r, d->start[r], &P, logits);
    if (P > 0) run_pass(d, P, logits);
}

/* ---- the recomputing path ---- */

static ct_status forward_window(ct_model_decoder *d, int64_t r, float *logits) {
    ct_ctx *ctx = d->ctx;
    int64_t len = d->hist_len[r], *h = d->hist + r * d->T;
    void *data = h;
    if (d->in_dtype == CT_I32) {
        for (int64_t j = 0; j < len; j++)
            d->ids32[j] = (int32_t)h[j];
        data = d->ids32;
    }
    ct_graph_reset(d->g);
    ct_tensor *x = ct_graph_wrap(d->g, data, d->in_dtype, 2, (int64_t[]){1, len});
    ct_tensor *y = x ? ct_model_forward(d->m, d->g, x) : NULL;
    if (!y) {
        ct_status s = ct_graph_status(d->g) != CT_OK ? ct_graph_status(d->g) : CT_ERR_INTERNAL;
        if (ct_last_status(ctx) == CT_OK) s = CT_FAIL(ctx, s, "decoder: the model failed");
        return s;
    }
    memcpy(logits + r * d->V, (const float *)y->data + (len - 1) * d->V, fsz(d->V));
    return CT_OK;
}

ct_status ct_model_decoder_feed(ct_model_decoder *d,
                                const int64_t *const *ids,
                                const int64_t *n_ids,
                                float *logits) {
    ct_ctx *ctx = d->ctx;
    for (int64_t r = 0; r < d->rows; r++)
        for (int64_t j = 0; j < n_ids[r]; j++)
            if (ids[r][j] < 0 || ids[r][j] >= d->V)
                return CT_FAIL(ctx, CT_ERR_INVALID_ARG,
                               "decoder: row %lld, token %lld: id %lld, expected 0..%lld",
                               (long long)r, (long long)j, (long long)ids[r][j],
                               (long long)d->V - 1);
    for (int64_t r = 0; r < d->rows; r++)
        if (n_ids[r] > 0) append(d, r, ids[r], n_ids[r]);
    if (d->cached) {
        feed_cached(d, n_ids, logits);
        return CT_OK;
    }
    for (int64_t r = 0; r < d->rows; r++)
        if (n_ids[r] > 0) CT_TRY(forward_window(d, r, logits));
    return CT_OK;
}

/* ---- greedy generation ---- */

ct_status ct_model_generate(ct_model *m,
                            const int64_t *const *prompts,
                            const int64_t *lens,
                            int64_t n,
                            int64_t n_new,
                            bool use_cache,
                            int64_t *out) {
    ct_ctx *ctx;
    ct_dtype dt;
    int32_t nd;
    int64_t shape[CT_MAX_DIMS];
    bool var_len;
    (void)ct_model_inside(m, &ctx, &dt, &nd, shape, &var_len);
    if (n < 1 || n_new < 0)
        return CT_FAIL(ctx, CT_ERR_INVALID_ARG, "generate: %lld prompts, %lld new tokens",
                       (long long)n, (long long)n_new);
    for (int64_t i = 0; i < n; i++)
        if (lens[i] < 1)
            return CT_FAIL(ctx, CT_ERR_INVALID_ARG, "generate: prompt %lld is empty", (long long)i);
    ct_model_decoder_params dp = ct_model_decoder_default_params();
    dp.n_rows = n;
    dp.use_cache = use_cache;
    ct_model_decoder *d;
    CT_TRY(ct_model_decoder_create(m, &dp, &d));
    int64_t V = d->V;
    float *logits = ct_alloc(ctx, fsz(n * V));
    int64_t *one = ct_alloc(ctx, isz(n)), *cnt = ct_alloc(ctx, isz(n));
    const int64_t **ptr = ct_alloc(ctx, (size_t)n * sizeof *ptr);
    ct_status s = logits && one && cnt && ptr ? CT_OK : CT_FAIL(ctx, CT_ERR_OOM, "generate");
    if (s == CT_OK) s = ct_model_decoder_feed(d, prompts, lens, logits);
    for (int64_t k = 0; s == CT_OK && k < n_new; k++) {
        for (int64_t i = 0; i < n; i++) {
            const float *lg = logits + i * V;
            int64_t best = 0;
            for (int64_t v = 1; v < V; v++)
                if (lg[v] > lg[best]) best = v;
            out[i * n_new + k] = one[i] = best;
            ptr[i] = one + i;
            cnt[i] = 1;
        }
        if (k + 1 < n_new) s = ct_model_decoder_feed(d, ptr, cnt, logits);
    }
    ct_free(ctx, ptr, (size_t)n * sizeof *ptr);
    ct_free(ctx, cnt, isz(n));
    ct_free(ctx, one, isz(n));
    ct_free(ctx, logits, fsz(n * V));
    ct_model_decoder_destroy(d);
    return s;
}
