/*
 * test_attention.c - the blocked causal attention kernels (src/ops/attention.c) against their
 * naive twin (src/kernels/ref/attention_ref.c): shapes around the block edges (T = 1, one row
 * short of or past a block, several blocks with a partial last one), several heads and
 * batches, in f32 and under bf16 autocast; the same bits for 1 and 2 threads; the blocks
 * above the diagonal neither written nor read; and the softmax rows' vectorised max, sum and
 * dot product (vmath.h) against plain loops.
 */
#include <math.h>
#include <string.h>

#include "ctrain/ctrain.h"
#include "harness.h"
#include "kernels/attn_kernels.h"
#include "kernels/vmath.h"

enum { BLK = CT_K_ATTN_BLOCK };

static ct_ctx *make_ctx(int64_t threads, ct_kernels kernels) {
    ct_ctx_params p = ct_ctx_default_params();
    p.n_threads = threads;
    p.kernels = kernels;
    ct_ctx *ctx = NULL;
    if (ct_ctx_create(&p, &ctx) != CT_OK) abort();
    return ctx;
}

static float *rand_array(int64_t n, uint64_t seed, float lo, float hi) {
    float *x = malloc((size_t)n * sizeof(float));
    ct_rng r = ct_rng_init(seed, 3);
    ct_rng_uniform(&r, x, n);
    for (int64_t i = 0; i < n; i++)
        x[i] = lo + (hi - lo) * x[i];
    return x;
}

/* Forward and backward (seeded with `seed`, under `autocast`) on a fresh graph; copies out. */
static void run(ct_ctx *ctx,
                ct_dtype autocast,
                float *qkv,
                const int64_t s[4],
                const float *seed,
                float *out,
                float *grad) {
    int64_t B = s[0], T = s[1], C = s[2], H = s[3];
    ct_graph *g = NULL;
    if (ct_graph_create(ctx, NULL, &g) != CT_OK) abort();
    CT_CHECK(ct_graph_set_autocast(g, autocast) == CT_OK);
    ct_tensor *x = ct_graph_wrap(g, qkv, CT_F32, 3, (int64_t[]){B, T, 3 * C});
    x->flags |= CT_TENSOR_REQUIRES_GRAD;
    ct_tensor *y = ct_op_causal_attention(g, x, H);
    CT_CHECK_MSG(y != NULL, "%s", ct_last_error(ctx));
    if (y) {
        memcpy(out, y->data, (size_t)(B * T * C) * sizeof(float));
        CT_CHECK_MSG(ct_graph_backward_seed(g, y, seed) == CT_OK, "%s", ct_last_error(ctx));
        memcpy(grad, x->grad, (size_t)(B * T * 3 * C) * sizeof(float));
    }
    ct_graph_destroy(g);
}

/* B, T, C, H: T at and around the block edges, one head and several, one batch and several */
static const int64_t shapes[][4] = {
    {2, 1, 16, 2},           {1, BLK - 1, 24, 3}, {2, BLK, 32, 4},         {1, BLK + 1, 16, 1},
    {3, 2 * BLK + 5, 24, 2}, {1, 3 * BLK, 64, 2}, {2, 4 * BLK - 3, 32, 4}, {1, 5 * BLK + 7, 16, 2},
};

static void attention_should_match_reference_around_block_edges(void) {
    ct_ctx *ref = make_ctx(2, CT_KERNELS_REFERENCE), *fast = make_ctx(2, CT_KERNELS_FAST);
    for (int ac = 0; ac <= 1; ac++) {
        ct_dtype autocast = ac ? CT_BF16 : CT_F32;
        for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++) {
            const int64_t *s = shapes[c];
            int64_t n_in = s[0] * s[1] * 3 * s[2], n_out = s[0] * s[1] * s[2];
            float *qkv = rand_array(n_in, 10 + c, -2.0f, 2.0f);
            float *seed = rand_array(n_out, 20 + c, -1.0f, 1.0f);
            float *o_ref = malloc((size_t)n_out * 4), *o_fast = malloc((size_t)n_out * 4);
            float *g_ref = malloc((size_t)n_in * 4), *g_fast = malloc((size_t)n_in * 4);
            run(ref, autocast, qkv, s, seed, o_ref, g_ref);
            run(fast, autocast, qkv, s, seed, o_fast, g_fast);
            CT_CHECK_ARRAYS("attention out", o_fast, o_ref, n_out, 1e-5, 1e-4);
            CT_CHECK_ARRAYS("attention dqkv", g_fast, g_ref, n_in, 1e-4, 1e-4);
            free(qkv), free(seed), free(o_ref), free(o_fast), free(g_ref), free(g_fast);
        }
    }
    ct_ctx_destroy(ref);
    ct_ctx_destroy(fast);
}

static void attention_should_give_the_same_bits_for_1_and_2_threads(void) {
    /* one head of several blocks (the threads share its block pairs), and many heads */
    static const int64_t cases[][4] = {{1, 4 * BLK + 9, 32, 1}, {2, 3 * BLK - 1, 64, 4}};
    for (int ac = 0; ac <= 1; ac++) {
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            const int64_t *s = cases[c];
            int64_t n_in = s[0] * s[1] * 3 * s[2], n_out = s[0] * s[1] * s[2];
            float *qkv = rand_array(n_in, 30 + c, -2.0f, 2.0f);
            float *seed = rand_array(n_out, 40 + c, -1.0f, 1.0f);
            float *o1 = malloc((size_t)n_out * 4), *o2 = malloc((size_t)n_out * 4);
            float *g1 = malloc((size_t)n_in * 4), *g2 = malloc((size_t)n_in * 4);
            ct_ctx *ctx = make_ctx(1, CT_KERNELS_FAST);
            run(ctx, ac ? CT_BF16 : CT_F32, qkv, s, seed, o1, g1);
            ct_ctx_set_threads(ctx, 2);
            run(ctx, ac ? CT_BF16 : CT_F32, qkv, s, seed, o2, g2);
            CT_CHECK(memcmp(o1, o2, (size_t)n_out * 4) == 0);
            CT_CHECK(memcmp(g1, g2, (size_t)n_in * 4) == 0);
            ct_ctx_destroy(ctx);
            free(qkv), free(seed), free(o1), free(o2), free(g1), free(g2);
        }
    }
}

/* Whether entry (i, j) of a [T, T] matrix lies in a block above the diagonal block. */
static bool above_blocks(int64_t i, int64_t j) {
    return j / BLK > i / BLK;
}

static void attention_should_skip_the_blocks_above_the_diagonal(void) {
    /* The fast kernels on scratch whose blocks above the diagonal hold NaN: they must stay NaN
     * (never written) and the results must not see them (never read). */
    int64_t B = 2, T = 3 * BLK + 4, C = 32, H = 2, n_in = B * T * 3 * C, n_out = B * T * C;
    int64_t n_att = B * H * T * T;
    ct_ctx *ctx = make_ctx(2, CT_KERNELS_FAST);
    float *qkv = rand_array(n_in, 50, -2.0f, 2.0f), *dout = rand_array(n_out, 51, -1.0f, 1.0f);
    float *att = malloc((size_t)n_att * 4), *ds = malloc((size_t)n_att * 4);
    float *o = malloc((size_t)n_out * 4), *o_ref = malloc((size_t)n_out * 4);
    float *g = calloc((size_t)n_in, 4), *g_ref = calloc((size_t)n_in, 4);
    for (int64_t e = 0; e < n_att; e++)
        att[e] = ds[e] = NAN;
    ct_k_attention_fwd(ctx, o, att, qkv, B, T, C, H);
    ct_k_attention_bwd(ctx, g, ds, dout, qkv, att, B, T, C, H);
    int64_t kept = 0, above = 0;
    for (int64_t e = 0; e < n_att; e++) {
        int64_t i = (e / T) % T, j = e % T;
        if (!above_blocks(i, j)) continue;
        above++;
        kept += isnan(att[e]) && isnan(ds[e]);
    }
    CT_CHECK(above > 0);
    CT_CHECK_INT(kept, above);
    float *att_ref = malloc((size_t)n_att * 4), *ds_ref = malloc((size_t)n_att * 4);
    ct_k_attention_ref_fwd(ctx, o_ref, att_ref, qkv, B, T, C, H);
    ct_k_attention_ref_bwd(ctx, g_ref, ds_ref, dout, qkv, att_ref, B, T, C, H);
    CT_CHECK_ARRAYS("out", o, o_ref, n_out, 1e-5, 1e-4);
    CT_CHECK_ARRAYS("dqkv", g, g_ref, n_in, 1e-4, 1e-4);
    ct_ctx_destroy(ctx);
    free(qkv), free(dout), free(att), free(ds), free(o), free(o_ref), free(g), free(g_ref);
    free(att_ref), free(ds_ref);
}

static void softmax_reductions_should_match_plain_loops(void) {
    float *x = rand_array(100, 60, -30.0f, 30.0f), *y = rand_array(100, 61, -1.0f, 1.0f);
    for (int64_t n = 1; n <= 100; n++) {
        float mx = x[0];
        double sum = 0.0, dot = 0.0;
        for (int64_t i = 0; i < n; i++) {
            mx = x[i] > mx ? x[i] : mx;
            sum += (double)x[i];
            dot += (double)x[i] * (double)y[i];
        }
        CT_CHECK(ct_vmax(x, n) == mx);
        CT_CHECK_CLOSE(ct_vsum(x, n), sum, 1e-12, 1e-13);
        CT_CHECK_CLOSE(ct_vdot(x, y, n), dot, 1e-12, 1e-13);
    }
    free(x), free(y);
}

int main(void) {
    CT_RUN(attention_should_match_reference_around_block_edges);
    CT_RUN(attention_should_give_the_same_bits_for_1_and_2_threads);
    CT_RUN(attention_should_skip_the_blocks_above_the_diagonal);
    CT_RUN(softmax_reductions_should_match_plain_loops);
    return ct_test_finish();
}
