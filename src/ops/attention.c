/*
 * attention.c - causal multi-head self-attention with a fused masked softmax, and its fast
 * kernel pair (the reference twin is src/kernels/ref/attention_ref.c).
 *
 * Only the causal lower triangle is computed. Each head is cut into blocks of BLOCK query rows
 * (and, in the key/value gradients, BLOCK key columns); row block r meets only the keys up to
 * its own last row, so of the nb x nb score blocks only the nb (nb + 1) / 2 on or below the
 * diagonal are multiplied, forward and backward (at T = 128: 10 of 16; the saving tends to
 * half as T grows). Each block is a few block products (src/kernels/attn_block.c: register
 * tiles, no packing) with the scale folded into the score product and the mask and softmax
 * (attn_softmax.c) applied to the block's rows right after it, while they are in cache. The
 * forward leaves the exponentials unnormalised and scales each output row by its 1 / sum
 * instead (hd multiplies per row rather than one per key). Inside the diagonal
 * block the entries above the diagonal are set to exact zeros, which add nothing to P v or to
 * the backward products; blocks above it are never read or written. A pass first copies each
 * head's operands into the layouts the products stream (struct head): k and v transposed, and
 * contiguous rows of k, q, v and dout.
 *
 * Forward does not keep the probabilities P [B, H, T, T]: backward computes them again from
 * qkv by the same code (attn_kernels.h), which PyTorch's math path would keep (16 MiB of the
 * GPT example's step at batch 16).
 *
 * Parallel work items are whole heads where there are at least 4 per thread (whole_heads);
 * otherwise (head, pair of blocks): block p with block nb-1-p, so that every item does about
 * the same work (a row block's cost grows with its index, a key block's shrinks), in passes
 * over all heads. Forward and the first backward loop own query row blocks (their P, dS, out
 * and dq rows); the second backward loop owns key blocks (their dk and dv rows). Every element thus
 * comes from the same calls in the same order whatever the thread count, and the block
 * products sum in an order fixed by the shape (the same on every ISA).
 *
 * Under bf16 autocast (ct_graph_set_autocast) q, k and v are rounded to bf16 (a scratch copy
 * of qkv; backward rounds qkv again rather than keeping it) and so is the incoming gradient in
 * backward; the probabilities and the softmax gradient stay f32 inside the fused kernel, as a
 * fused attention kernel keeps them. Where the CPU has AVX512_BF16 (ct_k_attention_bf16_native)
 * q k^T and dout v^T multiply bf16 copies of their operands by bf16 dot products with f32
 * accumulation; every other product is the f32 block product of the rounded values. Node:
 * iarg = B, T, C, H, autocast flag.
 */
#include <math.h>
#include <string.h>

#include "autograd/autograd_internal.h"
#include "kernels/attn_kernels.h"
#include "kernels/vmath.h"
#include "ops/ops_internal.h"

#define BLOCK CT_K_ATTN_BLOCK

/* The head's geometry, shared by its work items. q, k and v are the head's slices of qkv (row
 * stride 3C); dq, dk, dv those of dqkv; o and dout the head's slices of [B, T, C] (stride C);
 * att and ds the head's [T, T] blocks. From the work buffer: kt and vt, k and v transposed
 * ([hd, T]), or for bf16 dot products (native) kt2 and vt2, the same as bf16 pairs along hd
 * ([hp, T]), with qb and dob, the rows of q and dout as pairs ([T, hp]); and vc, kc, qc and dc,
 * v, k, q and dout as contiguous rows ([T, hd]). The products stream rows of their B operand:
 * at the row strides of qkv (3C floats, a multiple of 2 KiB in the GPT example) all of them
 * fall in a few sets of the L1 cache and evict each other, contiguous rows spread over all. */
typedef struct head {
    const float *q, *k, *v, *dout;
    float *o, *dq, *dk, *dv, *att, *ds, *kt, *vt, *vc, *kc, *qc, *dc;
    uint32_t *kt2, *vt2, *qb, *dob;
    int64_t T, C, hd, hp;
    float scale;
    ct_k_attn_isa isa;
    bool native, round, acc; /* acc: dq, dk and dv add to what dqkv holds (else stored) */
} head;

/* The arguments of one pass. */
typedef struct pass_args {
    float *out, *dqkv, *att, *ds, *work;
    const float *dout, *qkv;
    int64_t B, T, C, H;
    ct_k_attn_isa isa;
    bool native, round, acc;
} pass_args;

static head head_at(const pass_args *pa, int64_t bh) {
    int64_t T = pa->T, C = pa->C, H = pa->H, hd = C / H, hp = hd / 2, btc = pa->B * T * C;
    int64_t b = bh / H, off = b * T * 3 * C + (bh % H) * hd, ooff = b * T * C + (bh % H) * hd;
    head h;
    memset(&h, 0, sizeof h);
    h.q = pa->qkv + off;
    h.k = h.q + C;
    h.v = h.q + 2 * C;
    h.dout = pa->dout ? pa->dout + ooff : NULL;
    h.o = pa->out ? pa->out + ooff : NULL;
    if (pa->dqkv) {
        h.dq = pa->dqkv + off;
        h.dk = h.dq + C;
        h.dv = h.dq + 2 * C;
    }
    h.att = pa->att + bh * T * T;
    h.ds = pa->ds ? pa->ds + bh * T * T : NULL;
    /* slots of [B, T, C] floats, each head's T * hd of them in turn: forward kt (or kt2 and
     * qb), vc, qc; backward kt (kt2, qb), vt (vt2, dob), kc, qc, dc */
#define slot(i) (pa->work + (i)*btc + bh * T * hd)
    if (pa->native) {
        h.kt2 = (uint32_t *)(void *)slot(0);
        h.qb = h.kt2 + hp * T;
    } else {
        h.kt = slot(0);
    }
    if (!pa->dout) {
        h.vc = slot(1);
        if (!pa->native) h.qc = slot(2);
    } else {
        if (pa->native) {
            h.vt2 = (uint32_t *)(void *)slot(1);
            h.dob = h.vt2 + hp * T;
        } else {
            h.vt = slot(1);
        }
        h.kc = slot(2);
        h.qc = slot(3);
        h.dc = slot(4);
    }
#undef slot
    h.T = T;
    h.C = C;
    h.hd = hd;
    h.hp = hp;
    h.scale = (float)(1.0 / sqrt((double)hd));
    h.isa = pa->isa;
    h.native = pa->native;
    h.round = pa->round;
    h.acc = pa->acc;
    return h;
}

/* src [T, hd] at row stride ld as contiguous rows, rounded to bf16 if round. */
CT_HOT static void
rows(float *dst, const float *src, int64_t ld, int64_t T, int64_t hd, bool round) {
    for (int64_t i = 0; i < T; i++) {
        float *d = dst + i * hd;
        const float *x = src + i * ld;
        if (round)
            for (int64_t j = 0; j < hd; j++)
                d[j] = ct_vround_bf16(x[j]);
        else
            memcpy(d, x, (size_t)hd * sizeof(float));
    }
}

/* The head's operands in the layouts the block products read (head's comment), rounded to
 * bf16 under autocast: no product reads qkv or dout themselves. */
static void prepare_head(const head *h) {
    int64_t T = h->T, C3 = 3 * h->C, hd = h->hd, hp = h->hp;
    if (h->native) {
        ct_k_attn_pairs(h->isa, true, h->kt2, T, h->k, C3, T, hp);
        ct_k_attn_pairs(h->isa, false, h->qb, hp, h->q, C3, T, hp);
        if (h->vt2) ct_k_attn_pairs(h->isa, true, h->vt2, T, h->v, C3, T, hp);
        if (h->dob) ct_k_attn_pairs(h->isa, false, h->dob, hp, h->dout, h->C, T, hp);
    } else {
        ct_k_attn_transpose(h->isa, h->round, h->kt, T, h->k, C3, T, hd);
        if (h->vt) ct_k_attn_transpose(h->isa, h->round, h->vt, T, h->v, C3, T, hd);
    }
    if (h->vc) rows(h->vc, h->v, C3, T, hd, h->round);
    if (h->kc) rows(h->kc, h->k, C3, T, hd, h->round);
    if (h->qc) rows(h->qc, h->q, C3, T, hd, h->round);
    if (h->dc) rows(h->dc, h->dout, h->C, T, hd, h->round);
}

/* Rows [r0, r1) of the scores over the keys [0, r1), by the same calls in the forward and
 * again in the backward (so the same bits), as exp(s - max) per row with inv[i - r0] the
 * row's 1 / sum: the probabilities are the rows times it. */
CT_HOT static void probs_block(const head *h, int64_t r0, int64_t r1, float *inv) {
    int64_t T = h->T;
    float *p = h->att + r0 * T;
    if (h->native)
        ct_k_attn_mm_bf16(h->isa, r1 - r0, r1, h->hp, h->scale, h->qb + r0 * h->hp, h->hp, h->kt2,
                          T, p, T);
    else
        ct_k_attn_mm(h->isa, r1 - r0, r1, h->hd, h->scale, h->qc + r0 * h->hd, h->hd, 1, h->kt, T,
                     false, p, T);
    ct_k_attn_softmax_rows(h->isa, p, T, r0, r1, r1, inv);
}

/* Row block [r0, r1) of the forward: out = (exp(S - max) v) / sum per row over the keys
 * [0, r1): the 1 / sum scales the hd outputs of a row rather than its r1 exponentials. */
CT_HOT static void forward_block(const head *h, int64_t r0, int64_t r1) {
    float inv[BLOCK];
    probs_block(h, r0, r1, inv);
    float *o = h->o + r0 * h->C;
    ct_k_attn_mm(h->isa, r1 - r0, h->hd, r1, 1.0f, h->att + r0 * h->T, h->T, 1, h->vc, h->hd, false,
                 o, h->C);
    for (int64_t i = 0; i < r1 - r0; i++)
        for (int64_t d = 0; d < h->hd; d++)
            o[i * h->C + d] *= inv[i];
}

/* Row block [r0, r1) of the backward: the exponentials again, dP = dout v^T, then P and dS
 * over the keys [0, r1) in one pass per row, then dq += dS k (dS already carries the
 * 1/sqrt(hd)). */
CT_HOT static void backward_rows(const head *h, int64_t r0, int64_t r1) {
    int64_t T = h->T, C = h->C, C3 = 3 * C;
    float inv[BLOCK];
    probs_block(h, r0, r1, inv);
    float *ds = h->ds + r0 * T, *p = h->att + r0 * T;
    if (h->native)
        ct_k_attn_mm_bf16(h->isa, r1 - r0, r1, h->hp, 1.0f, h->dob + r0 * h->hp, h->hp, h->vt2, T,
                          ds, T);
    else
        ct_k_attn_mm(h->isa, r1 - r0, r1, h->hd, 1.0f, h->dc + r0 * h->hd, h->hd, 1, h->vt, T,
                     false, ds, T);
    ct_k_attn_softmax_bwd_rows(h->isa, ds, p, T, r0, r1, r1, inv, h->scale);
    ct_k_attn_mm(h->isa, r1 - r0, h->hd, r1, 1.0f, ds, T, 1, h->kc, h->hd, h->acc, h->dq + r0 * C3,
                 C3);
}

/* Key block [c0, c1) of the backward, over the queries [c0, T) (the earlier ones do not see
 * these keys): dv += P^T dout, dk += dS^T q. */
CT_HOT static void backward_keys(const head *h, int64_t c0, int64_t c1) {
    int64_t T = h->T, C = h->C, C3 = 3 * C, n = T - c0;
    const float *p = h->att + c0 * T + c0, *ds = h->ds + c0 * T + c0;
    ct_k_attn_mm(h->isa, c1 - c0, h->hd, n, 1.0f, p, 1, T, h->dc + c0 * h->hd, h->hd, h->acc,
                 h->dv + c0 * C3, C3);
    ct_k_attn_mm(h->isa, c1 - c0, h->hd, n, 1.0f, ds, 1, T, h->qc + c0 * h->hd, h->hd, h->acc,
                 h->dk + c0 * C3, C3);
}

typedef enum pass { PASS_FORWARD, PASS_BACKWARD_ROWS, PASS_BACKWARD_KEYS } pass;

/* One work item: blocks p and nb-1-p of head bh (p alone in the middle of an odd nb). */
static void run_item(pass ps, const head *h, int64_t p, int64_t nb) {
    for (int64_t r = p;; r = nb - 1 - p) {
        int64_t lo = r * BLOCK, hi = lo + BLOCK < h->T ? lo + BLOCK : h->T;
        if (ps == PASS_FORWARD)
            forward_block(h, lo, hi);
        else if (ps == PASS_BACKWARD_ROWS)
            backward_rows(h, lo, hi);
        else
            backward_keys(h, lo, hi);
        if (r == nb - 1 - p) break;
    }
}

/* Every (head, block pair) item of one pass, over the threads. */
static void run_pass(ct_ctx *ctx, pass ps, const pass_args *pa) {
    int64_t T = pa->T, nb = (T + BLOCK - 1) / BLOCK, pairs_ = (nb + 1) / 2;
    int64_t items = pa->B * pa->H * pairs_;
    /* flops per item: two or four products of BLOCK x (T + BLOCK) x hd */
    int64_t work = (ps == PASS_FORWARD ? 4 : 8) * BLOCK * (T + BLOCK) * (pa->C / pa->H);
    int nt = ct_threads_for(ctx, items, work);
    CT_PAR_FOR(nt, it, items, {
        head h = head_at(pa, it / pairs_);
        run_item(ps, &h, it % pairs_, nb);
    });
}

/* The work buffer's layouts, one head per item. */
static void run_prepare(ct_ctx *ctx, const pass_args *pa) {
    int64_t heads = pa->B * pa->H;
    int nt = ct_threads_for(ctx, heads, 4 * pa->T * (pa->C / pa->H));
    CT_PAR_FOR(nt, bh, heads, {
        head h = head_at(pa, bh);
        prepare_head(&h);
    });
}

/* Whole heads as the work items, when there are enough of them to keep every thread busy: a
 * head's layouts, its probabilities and their gradient (64 KiB each at T = 128) then stay in
 * the core's cache from the pass that writes them to the one that reads them, where passes
 * over all heads leave them to the next level. Each element comes from the same calls either
 * way, so the bits do not depend on the choice. */
static bool whole_heads(ct_ctx *ctx, const pass_args *pa, int *nt) {
    int64_t heads = pa->B * pa->H, T = pa->T;
    *nt = ct_threads_for(ctx, heads, 8 * T * T * (pa->C / pa->H));
    return heads >= 4 * (int64_t)*nt;
}

static void run_head(const pass_args *pa, int64_t bh) {
    head h = head_at(pa, bh);
    prepare_head(&h);
    for (int64_t lo = 0; lo < h.T; lo += BLOCK) {
        int64_t hi = lo + BLOCK < h.T ? lo + BLOCK : h.T;
        if (!pa->dout)
            forward_block(&h, lo, hi);
        else
            backward_rows(&h, lo, hi);
    }
    if (pa->dout)
        for (int64_t lo = 0; lo < h.T; lo += BLOCK)
            backward_keys(&h, lo, lo + BLOCK < h.T ? lo + BLOCK : h.T);
}

bool ct_k_attention_bf16_native(ct_ctx *ctx, int64_t hd) {
    return ctx->kernels == CT_KERNELS_FAST && ctx->bf16_kernels != CT_BF16_KERNELS_F32 &&
           hd % 2 == 0 && ct_k_attn_isa_get() == CT_K_ATTN_ISA_AVX512_BF16;
}

static pass_args make_args(ct_ctx *ctx,
                           float *out,
                           float *dqkv,
                           float *att,
                           float *ds,
                           float *work,
                           const float *dout,
                           const float *qkv,
                           bool bf16,
                           int64_t B,
                           int64_t T,
                           int64_t C,
                           int64_t H) {
    pass_args pa = {out,   dqkv, att, ds, work, dout, qkv, B, T, C, H, ct_k_attn_isa_get(),
                    false, bf16, true};
    pa.native = bf16 && ct_k_attention_bf16_native(ctx, C / H);
    return pa;
}

CT_HOT void ct_k_attention_fwd(ct_ctx *ctx,
                               float *out,
                               float *att,
                               float *work,
                               const float *qkv,
                               bool bf16,
                               int64_t B,
                               int64_t T,
                               int64_t C,
                               int64_t H) {
    pass_args pa = make_args(ctx, out, NULL, att, NULL, work, NULL, qkv, bf16, B, T, C, H);
    int nt;
    if (whole_heads(ctx, &pa, &nt)) {
        CT_PAR_FOR(nt, bh, B * H, { run_head(&pa, bh); });
        return;
    }
    run_prepare(ctx, &pa);
    run_pass(ctx, PASS_FORWARD, &pa);
}

CT_HOT void ct_k_attention_bwd(ct_ctx *ctx,
                               float *dqkv,
                               bool fresh,
                               float *scratch,
                               float *work,
                               const float *dout,
                               const float *qkv,
                               float *att,
                               bool bf16,
                               int64_t B,
                               int64_t T,
                               int64_t C,
                               int64_t H) {
    pass_args pa = make_args(ctx, NULL, dqkv, att, scratch, work, dout, qkv, bf16, B, T, C, H);
    pa.acc = !fresh;
    int nt;
    if (whole_heads(ctx, &pa, &nt)) {
        CT_PAR_FOR(nt, bh, B * H, { run_head(&pa, bh); });
        return;
    }
    run_prepare(ctx, &pa);
    /* the key blocks read P and dS rows of later row blocks: all rows first */
    run_pass(ctx, PASS_BACKWARD_ROWS, &pa);
    run_pass(ctx, PASS_BACKWARD_KEYS, &pa);
}

static void attention_backward(ct_graph *g, ct_node *n) {
    /* the fast kernels write every element of a fresh gradient: no zeroing first */
    bool fresh = false, fast = !ct_ops_reference(g);
    float *dqkv = fast ? ct_graph_grad_fresh(g, n->in[0], &fresh) : ct_graph_grad(g, n->in[0]);
    if (!dqkv) return;
    int64_t B = n->iarg[0], T = n->iarg[1], C = n->iarg[2], H = n->iarg[3];
    if (B * T == 0) return;
    ct_graph_mark mark = ct_graph_scratch_mark(g); /* dqkv was allocated above */
    float *scratch = ct_graph_alloc(g, (size_t)(B * H * T * T) * sizeof(float));
    float *att = ct_graph_alloc(g, (size_t)(B * H * T * T) * sizeof(float));
    if (!scratch || !att) return;
    const float *dout = n->out->grad, *qkv = n->in[0]->data;
    if (fast) { /* which rounds as it lays out q, k, v and dout */
        float *work = ct_graph_alloc(g, (size_t)ct_k_attention_work(B, T, C, true) * sizeof(float));
        if (work)
            ct_k_attention_bwd(ct_graph_ctx(g), dqkv, fresh, scratch, work, dout, qkv, att,
                               n->iarg[4] != 0, B, T, C, H);
        ct_graph_scratch_release(g, mark);
        return;
    }
    if (n->iarg[4]) { /* q, k, v and dout rounded as the forward pass rounded q, k, v */
        float *r = ct_graph_alloc(g, (size_t)(B * T * C) * sizeof(float));
        float *rq = ct_graph_alloc(g, (size_t)(B * T * 3 * C) * sizeof(float));
        if (!r || !rq) return;
        ct_ops_round_bf16(g, dout, r, B * T * C);
        ct_ops_round_bf16(g, qkv, rq, B * T * 3 * C);
        dout = r;
        qkv = rq;
    }
    ct_k_attention_ref_bwd(ct_graph_ctx(g), dqkv, scratch, dout, qkv, att, B, T, C, H);
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
    bool rounded = ct_graph_autocast(g) == CT_BF16;
    if (B * T > 0 && ct_ops_reference(g)) {
        const float *qv = ct_ops_autocast(g, qkv->data, ct_tensor_numel(qkv));
        if (!qv) return NULL;
        ct_k_attention_ref_fwd(ct_graph_ctx(g), y->data, att->data, qv, B, T, C, H);
    } else if (B * T > 0) { /* the fast path rounds as it lays out q, k and v */
        float *work =
            ct_graph_alloc(g, (size_t)ct_k_attention_work(B, T, C, false) * sizeof(float));
        if (!work) return NULL;
        ct_k_attention_fwd(ct_graph_ctx(g), y->data, att->data, work, qkv->data, rounded, B, T, C,
                           H);
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
