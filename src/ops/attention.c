/*
 * attention.c - causal multi-head self-attention with a fused masked softmax, and its fast
 * kernel pair (the reference twin is src/kernels/ref/attention_ref.c).
 *
 * Forward does not keep the probabilities P [B, H, T, T]: backward computes them again from
 * qkv by the same code (attn_kernels.h), which PyTorch's math path would keep (16 MiB of the
 * GPT example's step at batch 16). The fast path parallelises over the
 * B*H heads; each head is two GEMMs (ct_k_gemm, head slices read in place through the row
 * stride 3C) around its softmax rows. With a single head, or too little work to split, the
 * head loop runs on one thread and the GEMM tiles and softmax rows inside spread over the
 * threads instead (nested regions inside the head loop are inactive). Either way each element
 * comes from the same calls in the same order, so results do not depend on the thread count.
 * Entering ct_k_gemm from several threads at once is safe because OpenBLAS runs single-threaded
 * (ct_ctx_set_threads) and ct_k_gemm_blas does its own tiling.
 *
 * The GEMMs compute full T x T score blocks; entries above the diagonal are overwritten with
 * exact zeros, which contribute nothing to P v or to the backward products.
 *
 * Under bf16 autocast (ct_graph_set_autocast) q, k and v are rounded to bf16 (a scratch copy
 * of qkv; backward rounds qkv again rather than keeping it) and so is the incoming gradient in
 * backward; the probabilities and the softmax gradient stay f32 inside the fused kernel, as a
 * fused attention kernel keeps them. Node: iarg = B, T, C, H, autocast flag.
 */
#include <math.h>

#include "kernels/attn_kernels.h"
#include "kernels/kernels.h"
#include "kernels/vmath.h"
#include "ops/ops_internal.h"

/* s[0..T): scores of query i; becomes the probabilities over j <= i and 0 beyond. */
CT_HOT static void causal_softmax_row(float *s, int64_t i, int64_t T) {
    float mx = s[0];
    for (int64_t j = 1; j <= i; j++)
        if (s[j] > mx) mx = s[j];
    /* the exponentials in one loop (it vectorises, on vmath.h's exp), the sum in another: in
       double and in order, as before */
    for (int64_t j = 0; j <= i; j++)
        s[j] = ct_vexpf(s[j] - mx);
    double sum = 0.0;
    for (int64_t j = 0; j <= i; j++)
        sum += (double)s[j];
    float inv = (float)(1.0 / sum);
    for (int64_t j = 0; j <= i; j++)
        s[j] *= inv;
    for (int64_t j = i + 1; j < T; j++)
        s[j] = 0.0f;
}

/* ds[0..T): dP of query i; becomes dS = scale * P (dP - sum_j P dP), 0 beyond the diagonal. */
CT_HOT static void
causal_softmax_bwd_row(float *ds, const float *p, int64_t i, int64_t T, float scale) {
    double dot = 0.0;
    for (int64_t j = 0; j <= i; j++)
        dot += (double)p[j] * (double)ds[j];
    float fdot = (float)dot;
    for (int64_t j = 0; j <= i; j++)
        ds[j] = scale * p[j] * (ds[j] - fdot);
    for (int64_t j = i + 1; j < T; j++)
        ds[j] = 0.0f;
}

/* One (b, h) of the forward. Called from a parallel loop over heads, the nested regions
 * (rows here, tiles in ct_k_gemm) are inactive and run on the calling thread; called alone,
 * they spread over the threads. Either way the same calls produce the same bits. */
/* One head's probabilities P = softmax(q k^T * scale) into att [T, T]: the forward's, and
 * again the backward's, by the same calls (so the same bits). */
CT_HOT static void probs_head(
    ct_ctx *ctx, float *att, const float *qkv, int64_t T, int64_t C, int64_t hd, float scale) {
    const float *q = qkv, *k = q + C;
    ct_k_gemm(ctx, false, true, T, T, hd, scale, q, 3 * C, k, 3 * C, 0.0f, att, T);
    int nt = ct_threads_for(ctx, T, T * 8);
    CT_OMP_FOR(nt)
    for (int64_t i = 0; i < T; i++)
        causal_softmax_row(att + i * T, i, T);
}

static void forward_head(ct_ctx *ctx,
                         float *out,
                         float *att,
                         const float *qkv,
                         int64_t T,
                         int64_t C,
                         int64_t hd,
                         float scale) {
    probs_head(ctx, att, qkv, T, C, hd, scale);
    ct_k_gemm(ctx, false, false, T, hd, T, 1.0f, att, T, qkv + 2 * C, 3 * C, 0.0f, out, C);
}

CT_HOT static void backward_head(ct_ctx *ctx,
                                 float *dqkv,
                                 float *ds,
                                 const float *dout,
                                 const float *qkv,
                                 const float *p,
                                 int64_t T,
                                 int64_t C,
                                 int64_t hd,
                                 float scale) {
    const float *q = qkv, *k = q + C, *v = q + 2 * C;
    /* dP = dout v^T; dv += P^T dout */
    ct_k_gemm(ctx, false, true, T, T, hd, 1.0f, dout, C, v, 3 * C, 0.0f, ds, T);
    ct_k_gemm(ctx, true, false, T, hd, T, 1.0f, p, T, dout, C, 1.0f, dqkv + 2 * C, 3 * C);
    int nt = ct_threads_for(ctx, T, T * 4);
    CT_OMP_FOR(nt)
    for (int64_t i = 0; i < T; i++)
        causal_softmax_bwd_row(ds + i * T, p + i * T, i, T, scale);
    /* dq += dS k; dk += dS^T q (dS already carries the 1/sqrt(hd)) */
    ct_k_gemm(ctx, false, false, T, hd, T, 1.0f, ds, T, k, 3 * C, 1.0f, dqkv, 3 * C);
    ct_k_gemm(ctx, true, false, T, hd, T, 1.0f, ds, T, q, 3 * C, 1.0f, dqkv + C, 3 * C);
}

CT_HOT void ct_k_attention_fwd(ct_ctx *ctx,
                               float *out,
                               float *att,
                               const float *qkv,
                               int64_t B,
                               int64_t T,
                               int64_t C,
                               int64_t H) {
    int64_t hd = C / H;
    float scale = (float)(1.0 / sqrt((double)hd));
    int nt = ct_threads_for(ctx, B * H, 4 * T * T * hd);
    CT_OMP_FOR(nt)
    for (int64_t bh = 0; bh < B * H; bh++) {
        int64_t b = bh / H, h = bh % H;
        forward_head(ctx, out + b * T * C + h * hd, att + bh * T * T, qkv + b * T * 3 * C + h * hd,
                     T, C, hd, scale);
    }
}

CT_HOT void ct_k_attention_bwd(ct_ctx *ctx,
                               float *dqkv,
                               float *scratch,
                               const float *dout,
                               const float *qkv,
                               float *att,
                               int64_t B,
                               int64_t T,
                               int64_t C,
                               int64_t H) {
    int64_t hd = C / H;
    float scale = (float)(1.0 / sqrt((double)hd));
    int nt = ct_threads_for(ctx, B * H, 8 * T * T * hd);
    CT_OMP_FOR(nt)
    for (int64_t bh = 0; bh < B * H; bh++) {
        int64_t b = bh / H, h = bh % H;
        int64_t off = b * T * 3 * C + h * hd;
        probs_head(ctx, att + bh * T * T, qkv + off, T, C, hd, scale);
        backward_head(ctx, dqkv + off, scratch + bh * T * T, dout + b * T * C + h * hd, qkv + off,
                      att + bh * T * T, T, C, hd, scale);
    }
}

static void attention_backward(ct_graph *g, ct_node *n) {
    float *dqkv = ct_graph_grad(g, n->in[0]);
    if (!dqkv) return;
    int64_t B = n->iarg[0], T = n->iarg[1], C = n->iarg[2], H = n->iarg[3];
    if (B * T == 0) return;
    ct_graph_mark mark = ct_graph_scratch_mark(g); /* dqkv was allocated above */
    float *scratch = ct_graph_alloc(g, (size_t)(B * H * T * T) * sizeof(float));
    float *att = ct_graph_alloc(g, (size_t)(B * H * T * T) * sizeof(float));
    if (!scratch || !att) return;
    const float *dout = n->out->grad, *qkv = n->in[0]->data;
    if (n->iarg[4]) { /* q, k, v and dout rounded as the forward pass rounded q, k, v */
        float *r = ct_graph_alloc(g, (size_t)(B * T * C) * sizeof(float));
        float *rq = ct_graph_alloc(g, (size_t)(B * T * 3 * C) * sizeof(float));
        if (!r || !rq) return;
        ct_ops_round_bf16(g, dout, r, B * T * C);
        ct_ops_round_bf16(g, qkv, rq, B * T * 3 * C);
        dout = r;
        qkv = rq;
    }
    if (ct_ops_reference(g))
        ct_k_attention_ref_bwd(ct_graph_ctx(g), dqkv, scratch, dout, qkv, att, B, T, C, H);
    else
        ct_k_attention_bwd(ct_graph_ctx(g), dqkv, scratch, dout, qkv, att, B, T, C, H);
    ct_graph_scratch_release(g, mark);
}

static const ct_op_def attention_def = {"causal_attention", attention_backward};

ct_tensor *ct_op_causal_attention(ct_graph *g, ct_tensor *qkv, int64_t n_head) {
    const char *op = "causal_attention";
    if (!ct_ops_begin(g, op, 1, &qkv) || !ct_ops_f32(g, op, "qkv", qkv)) return NULL;
    char buf[160];
    if (qkv->ndim != 3 || qkv->shape[2] == 0 || qkv->shape[2] % 3 != 0) {
        CT_GRAPH_FAIL(g, CT_ERR_SHAPE,
                      "%s: qkv must be [B, T, 3C] with C > 0 (q, k, v along the last dim), got %s",
                      op, ct_shape_str(qkv, buf, sizeof buf));
        return NULL;
    }
    int64_t B = qkv->shape[0], T = qkv->shape[1], C = qkv->shape[2] / 3;
    if (n_head < 1) {
        CT_GRAPH_FAIL(g, CT_ERR_INVALID_ARG, "%s: n_head must be >= 1, got %lld", op,
                      (long long)n_head);
        return NULL;
    }
    if (C % n_head != 0) {
        CT_GRAPH_FAIL(g, CT_ERR_SHAPE, "%s: n_head %lld does not divide C = %lld (qkv %s)", op,
                      (long long)n_head, (long long)C, ct_shape_str(qkv, buf, sizeof buf));
        return NULL;
    }
    int64_t H = n_head;
    ct_tensor *y = ct_graph_new(g, CT_F32, 3, (int64_t[]){B, T, C});
    if (!y) return NULL;
    /* the probabilities and rounded q, k, v are scratch: backward computes them again. A step
     * tensor rather than raw memory: ct_graph_new checks [B, H, T, T] for overflow */
    ct_graph_mark mark = ct_graph_scratch_mark(g);
    ct_tensor *att = ct_graph_new(g, CT_F32, 4, (int64_t[]){B, H, T, T});
    if (!att) return NULL;
    const float *qv = ct_ops_autocast(g, qkv->data, ct_tensor_numel(qkv));
    if (!qv) return NULL;
    bool rounded = qv != qkv->data;
    if (B * T > 0) {
        if (ct_ops_reference(g))
            ct_k_attention_ref_fwd(ct_graph_ctx(g), y->data, att->data, qv, B, T, C, H);
        else
            ct_k_attention_fwd(ct_graph_ctx(g), y->data, att->data, qv, B, T, C, H);
    }
    ct_graph_scratch_release(g, mark);
    if (ct_graph_needs_grad(g, 1, &qkv)) {
        ct_node *n = ct_graph_record(g, &attention_def, y, 1, &qkv);
        if (!n) return NULL;
        n->iarg[4] = rounded;
        n->iarg[0] = B;
        n->iarg[1] = T;
        n->iarg[2] = C;
        n->iarg[3] = H;
    }
    return y;
}
