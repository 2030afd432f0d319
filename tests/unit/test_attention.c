/*
 * test_attention.c - the blocked causal attention kernels (src/ops/attention.c) against their
 * naive twin (src/kernels/ref/attention_ref.c): shapes around the block edges (T = 1, one row
 * short of or past a block, several blocks with a partial last one), several heads and
 * batches, in f32 and under bf16 autocast; the same bits for 1 and 2 threads; the blocks
 * above the diagonal neither written nor read; and the softmax rows' vectorised max, sum and
 * dot product (vmath.h) against plain loops, and blocks of rows against one row at a time.
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

/* B, T, C, H: T at and around the block edges, one head and several, one batch and several;
 * head sizes from 8 to 80 (the products' tiles are 32 columns wide, the layouts' 16 x 16) */
static const int64_t shapes[][4] = {
    {2, 1, 16, 2},           {1, BLK - 1, 24, 3}, {2, BLK, 32, 4},         {1, BLK + 1, 16, 1},
    {3, 2 * BLK + 5, 24, 2}, {1, 3 * BLK, 64, 2}, {2, 4 * BLK - 3, 32, 4}, {1, 5 * BLK + 7, 16, 2},
    {2, BLK + 7, 96, 2},     {1, 40, 80, 1},
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
    /* one head of several blocks (the threads share its block pairs), many heads (whole heads
     * as the items), and 4 heads: whole heads for 1 thread, block pairs for 2 */
    static const int64_t cases[][4] = {
        {1, 4 * BLK + 9, 32, 1}, {2, 3 * BLK - 1, 64, 4}, {1, 3 * BLK, 64, 4}};
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
    float *work = malloc((size_t)ct_k_attention_work(B, T, C, true) * 4);
    ct_k_attention_fwd(ctx, o, att, work, qkv, false, B, T, C, H);
    ct_k_attention_bwd(ctx, g, false, ds, work, dout, qkv, att, false, B, T, C, H);
    free(work);
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

/* The backward over a fresh gradient (unset memory, here NaN) stores each element: the bits of
 * adding to zeros, f32 and bf16, with the work cut into (head, block pair) items (4 heads) and
 * into whole heads (16). */
static void attention_backward_should_store_a_fresh_gradient_with_the_bits_of_adding(void) {
    for (int heads = 0; heads < 2; heads++) {
        for (int bf16 = 0; bf16 < 2; bf16++) {
            int64_t B = heads ? 8 : 2, T = 3 * BLK + 4, C = 32, H = 2;
            int64_t n_in = B * T * 3 * C, n_out = B * T * C, n_att = B * H * T * T;
            ct_ctx *ctx = make_ctx(2, CT_KERNELS_FAST);
            float *qkv = rand_array(n_in, 60, -2.0f, 2.0f),
                  *dout = rand_array(n_out, 61, -1.0f, 1.0f);
            float *att = malloc((size_t)n_att * 4), *ds = malloc((size_t)n_att * 4);
            float *o = malloc((size_t)n_out * 4);
            float *added = calloc((size_t)n_in, 4), *stored = malloc((size_t)n_in * 4);
            float *work = malloc((size_t)ct_k_attention_work(B, T, C, true) * 4);
            for (int64_t e = 0; e < n_in; e++)
                stored[e] = NAN;
            ct_k_attention_fwd(ctx, o, att, work, qkv, bf16, B, T, C, H);
            ct_k_attention_bwd(ctx, added, false, ds, work, dout, qkv, att, bf16, B, T, C, H);
            ct_k_attention_bwd(ctx, stored, true, ds, work, dout, qkv, att, bf16, B, T, C, H);
            CT_CHECK(memcmp(added, stored, (size_t)n_in * 4) == 0);
            ct_ctx_destroy(ctx);
            free(qkv), free(dout), free(att), free(ds), free(o), free(added), free(stored);
            free(work);
        }
    }
}

/* a(r, i) = a[r * rsa + i * csa] for [m, k]; b [k, n] at row stride ldb: the product in double. */
static double product_ref(const float *a,
                          int64_t rsa,
                          int64_t csa,
                          const float *b,
                          int64_t ldb,
                          int64_t k,
                          int64_t r,
                          int64_t j) {
    double s = 0.0;
    for (int64_t i = 0; i < k; i++)
        s += (double)a[r * rsa + i * csa] * (double)b[i * ldb + j];
    return s;
}

static void attention_block_product_should_give_the_same_bits_on_every_isa(void) {
    /* m, n, k around the tiles (8 or 6, 4, 2, 1 rows; 8, 16 and 32 columns), A read both ways */
    static const int64_t cases[][3] = {{1, 1, 1},    {32, 32, 32}, {7, 17, 5},   {13, 33, 64},
                                       {32, 96, 32}, {3, 16, 129}, {15, 50, 31}, {9, 8, 2}};
    ct_k_attn_isa best = ct_k_attn_isa_get();
    if (best < CT_K_ATTN_ISA_AVX512) printf("skip: no AVX-512 here (AVX2 and portable only)\n");
    for (ct_k_attn_isa isa = CT_K_ATTN_ISA_AVX2; isa <= best && isa <= CT_K_ATTN_ISA_AVX512; isa++)
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            int64_t m = cases[c][0], n = cases[c][1], k = cases[c][2], ld = n + 3;
            float *a = rand_array(m * k, 70 + c, -2.0f, 2.0f),
                  *b = rand_array(k * ld, 80 + c, -2.0f, 2.0f);
            float *c0 = rand_array(m * ld, 90 + c, -1.0f, 1.0f);
            float *c1 = malloc((size_t)(m * ld) * 4), *c2 = malloc((size_t)(m * ld) * 4);
            for (int mode = 0; mode < 4; mode++) {
                bool acc = mode & 1, trans = mode & 2;
                int64_t rsa = trans ? 1 : k, csa = trans ? m : 1;
                float alpha = acc ? 1.0f : 0.375f;
                memcpy(c1, c0, (size_t)(m * ld) * 4);
                memcpy(c2, c0, (size_t)(m * ld) * 4);
                ct_k_attn_mm(isa, m, n, k, alpha, a, rsa, csa, b, ld, acc, c1, ld);
                ct_k_attn_mm_portable(m, n, k, alpha, a, rsa, csa, b, ld, acc, c2, ld);
                CT_CHECK_MSG(memcmp(c1, c2, (size_t)(m * ld) * 4) == 0,
                             "isa %d m %lld n %lld k %lld mode %d", (int)isa, (long long)m,
                             (long long)n, (long long)k, mode);
                int64_t bad = 0;
                for (int64_t r = 0; r < m; r++)
                    for (int64_t j = 0; j < ld; j++) {
                        double want = j >= n ? (double)c0[r * ld + j]
                                             : alpha * ((acc ? (double)c0[r * ld + j] : 0.0) +
                                                        product_ref(a, rsa, csa, b, ld, k, r, j));
                        bad += !(fabs((double)c1[r * ld + j] - want) <= 1e-5 * (1.0 + (double)k));
                    }
                CT_CHECK_INT(bad, 0);
            }
            free(a), free(b), free(c0), free(c1), free(c2);
        }
}

static void attention_operand_layouts_should_match_plain_loops(void) {
    /* the transposes and bf16 pairs the block products read, around the 16 x 16 blocks, with
     * and without rounding to bf16 on the way */
    static const int64_t cases[][2] = {{1, 2}, {16, 32}, {17, 8}, {128, 32}, {33, 66}, {5, 40}};
    ct_k_attn_isa isa = ct_k_attn_isa_get();
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int64_t rows = cases[c][0], cols = cases[c][1], np = cols / 2, lds = cols + 5;
        float *src = rand_array(rows * lds, 140 + c, -3.0f, 3.0f);
        src[0] = NAN;
        int64_t n = cols * (rows + 3);
        float *t = malloc((size_t)n * 4);
        uint32_t *w = malloc((size_t)n * 4);
        for (int round = 0; round <= 1; round++) {
            for (int64_t i = 0; i < n; i++)
                t[i] = -7.0f;
            ct_k_attn_transpose(isa, round, t, rows + 3, src, lds, rows, cols);
            int64_t bad = 0;
            for (int64_t d = 0; d < cols; d++)
                for (int64_t j = 0; j < rows + 3; j++) {
                    float got = t[d * (rows + 3) + j], want = -7.0f;
                    if (j < rows)
                        want = round ? ct_vround_bf16(src[j * lds + d]) : src[j * lds + d];
                    bad += memcmp(&got, &want, 4) != 0;
                }
            CT_CHECK_INT(bad, 0);
        }
        for (int tr = 0; tr <= 1; tr++) {
            if (isa != CT_K_ATTN_ISA_AVX512_BF16) break; /* the AVX-512 pairs need AVX512_BF16 */
            int64_t ldd = tr ? rows + 3 : np + 3, bad = 0;
            memset(w, 0xAB, (size_t)n * 4);
            ct_k_attn_pairs(isa, tr, w, ldd, src, lds, rows, np);
            for (int64_t j = 0; j < rows; j++)
                for (int64_t p = 0; p < np; p++) {
                    uint32_t want = ct_k_attn_bf16_pair(ct_vround_bf16(src[j * lds + 2 * p]),
                                                        ct_vround_bf16(src[j * lds + 2 * p + 1]));
                    uint32_t got = w[tr ? p * ldd + j : j * ldd + p];
                    bool nan = (got & 0x7F80u) == 0x7F80u && (got & 0x7Fu); /* any quiet NaN */
                    bad += j == 0 && p == 0 ? !nan || (got >> 16) != (want >> 16) : got != want;
                }
            bad += tr ? w[rows] != 0xABABABABu : w[np] != 0xABABABABu; /* no more written */
            CT_CHECK_INT(bad, 0);
        }
        free(src), free(t), free(w);
    }
}

static void attention_bf16_product_should_match_the_f32_product_of_the_same_values(void) {
    if (ct_k_attn_isa_get() != CT_K_ATTN_ISA_AVX512_BF16) {
        printf("skip: no AVX512_BF16 here\n");
        return;
    }
    static const int64_t cases[][3] = {{32, 32, 16}, {7, 17, 3}, {13, 33, 32}, {1, 100, 1}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int64_t m = cases[c][0], n = cases[c][1], kp = cases[c][2], k = 2 * kp;
        float *a = rand_array(m * k, 100 + c, -2.0f, 2.0f),
              *b = rand_array(k * n, 110 + c, -2.0f, 2.0f);
        for (int64_t i = 0; i < m * k; i++)
            a[i] = ct_f32_from_bf16(ct_bf16_from_f32(a[i]));
        for (int64_t i = 0; i < k * n; i++)
            b[i] = ct_f32_from_bf16(ct_bf16_from_f32(b[i]));
        uint32_t *a2 = malloc((size_t)(m * kp) * 4), *b2 = malloc((size_t)(kp * n) * 4);
        for (int64_t r = 0; r < m; r++)
            for (int64_t p = 0; p < kp; p++)
                a2[r * kp + p] = ct_k_attn_bf16_pair(a[r * k + 2 * p], a[r * k + 2 * p + 1]);
        for (int64_t p = 0; p < kp; p++)
            for (int64_t j = 0; j < n; j++)
                b2[p * n + j] = ct_k_attn_bf16_pair(b[2 * p * n + j], b[(2 * p + 1) * n + j]);
        float *got = malloc((size_t)(m * n) * 4), *want = malloc((size_t)(m * n) * 4);
        ct_k_attn_mm_bf16(CT_K_ATTN_ISA_AVX512_BF16, m, n, kp, 0.5f, a2, kp, b2, n, got, n);
        ct_k_attn_mm_portable(m, n, k, 0.5f, a, k, 1, b, n, false, want, n);
        /* the same exact products summed in another order: within k roundings of the sum of
         * their magnitudes (|a b| <= 4), 2^-24 each */
        CT_CHECK_ARRAYS("bf16 product", got, want, m * n,
                        0.5 * 2.0 * 4.0 * (double)(k * k) * 0x1p-24, 0.0);
        free(a), free(b), free(a2), free(b2), free(got), free(want);
    }
}

static void attention_should_use_bf16_dot_products_within_summation_order_of_f32(void) {
    /* Under bf16 autocast, bf16_kernels AUTO on a CPU with AVX512_BF16 multiplies q k^T and
     * dout v^T as bf16 dot products; CT_BF16_KERNELS_F32 multiplies the same rounded values in
     * f32. The products are exact in f32 either way: only their summation order differs. */
    ct_ctx_params p = ct_ctx_default_params();
    p.n_threads = 2;
    ct_ctx *native = NULL, *f32 = NULL;
    if (ct_ctx_create(&p, &native) != CT_OK) abort();
    p.bf16_kernels = CT_BF16_KERNELS_F32;
    if (ct_ctx_create(&p, &f32) != CT_OK) abort();
    bool has = ct_k_attn_isa_get() == CT_K_ATTN_ISA_AVX512_BF16;
    CT_CHECK(ct_k_attention_bf16_native(native, 32) == has);
    CT_CHECK(!ct_k_attention_bf16_native(native, 33)); /* pairs along hd */
    CT_CHECK(!ct_k_attention_bf16_native(f32, 32));
    if (!has) printf("skip: no AVX512_BF16 here, both runs take the f32 products\n");
    for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++) {
        const int64_t *s = shapes[c];
        int64_t n_in = s[0] * s[1] * 3 * s[2], n_out = s[0] * s[1] * s[2];
        float *qkv = rand_array(n_in, 120 + c, -2.0f, 2.0f);
        float *seed = rand_array(n_out, 130 + c, -1.0f, 1.0f);
        float *o_n = malloc((size_t)n_out * 4), *o_f = malloc((size_t)n_out * 4);
        float *g_n = malloc((size_t)n_in * 4), *g_f = malloc((size_t)n_in * 4);
        run(native, CT_BF16, qkv, s, seed, o_n, g_n);
        run(f32, CT_BF16, qkv, s, seed, o_f, g_f);
        /* scores differ by a few f32 roundings of sums of at most hd products of magnitude 4:
         * hd 32 gives 2e-6 relative to the score range; softmax and the products after it
         * carry that, not much amplified at these magnitudes */
        CT_CHECK_ARRAYS("out", o_n, o_f, n_out, 2e-6, 2e-5);
        CT_CHECK_ARRAYS("dqkv", g_n, g_f, n_in, 2e-6, 2e-5);
        if (has && s[1] > 1)
            CT_CHECK_MSG(memcmp(g_n, g_f, (size_t)n_in * 4) != 0, "shape %zu: the same bits", c);
        free(qkv), free(seed), free(o_n), free(o_f), free(g_n), free(g_f);
    }
    ct_ctx_destroy(native);
    ct_ctx_destroy(f32);
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

static void attention_softmax_blocks_should_give_the_bits_of_single_rows(void) {
    /* blocks of rows (four at a time on AVX-512, then the rest one by one) against one call
       per row, forward then backward, on every isa this CPU has */
    enum { LD = 70, ROWS = 40 };
    float *x = rand_array(LD * ROWS, 64, -30.0f, 10.0f),
          *dp = rand_array(LD * ROWS, 65, -2.0f, 2.0f);
    float *s1 = malloc(sizeof(float) * LD * ROWS), *s2 = malloc(sizeof(float) * LD * ROWS);
    float *d1 = malloc(sizeof(float) * LD * ROWS), *d2 = malloc(sizeof(float) * LD * ROWS);
    float inv1[ROWS], inv2[ROWS];
    const float scale = 0.125f;
    for (int isa = CT_K_ATTN_ISA_PORTABLE; isa <= (int)ct_k_attn_isa_get(); isa++)
        for (int64_t i0 = 0; i0 <= 30; i0 += 15)
            for (int64_t count = 1; count <= 9; count++)
                for (int64_t extra = 0; extra <= 3; extra += 3) {
                    int64_t i1 = i0 + count, n = i1 + extra;
                    memcpy(s1, x, sizeof(float) * LD * ROWS);
                    memcpy(s2, x, sizeof(float) * LD * ROWS);
                    memcpy(d1, dp, sizeof(float) * LD * ROWS);
                    memcpy(d2, dp, sizeof(float) * LD * ROWS);
                    ct_k_attn_softmax_rows((ct_k_attn_isa)isa, s1, LD, i0, i1, n, inv1);
                    ct_k_attn_softmax_bwd_rows((ct_k_attn_isa)isa, d1, s1, LD, i0, i1, n, inv1,
                                               scale);
                    for (int64_t i = i0; i < i1; i++) {
                        float *row = s2 + (i - i0) * LD;
                        inv2[i - i0] = ct_k_attn_softmax_row((ct_k_attn_isa)isa, row, i, n);
                        ct_k_attn_softmax_bwd_row((ct_k_attn_isa)isa, d2 + (i - i0) * LD, row, i, n,
                                                  inv2[i - i0], scale);
                    }
                    CT_CHECK_MSG(memcmp(s1, s2, sizeof(float) * LD * ROWS) == 0 &&
                                     memcmp(d1, d2, sizeof(float) * LD * ROWS) == 0 &&
                                     memcmp(inv1, inv2, sizeof(float) * (size_t)count) == 0,
                                 "isa %d rows %lld..%lld over %lld keys", isa, (long long)i0,
                                 (long long)i1, (long long)n);
                }
    free(x), free(dp), free(s1), free(s2), free(d1), free(d2);
}

static void attention_softmax_rows_should_give_the_same_bits_on_every_isa(void) {
    /* row lengths around the 16-lane vectors, diagonals inside and at the end of the row,
       scores spread far enough that some exponentials underflow to 0; forward, then backward
       from the forward's exponentials */
    float *x = rand_array(200, 62, -120.0f, 20.0f), *dp = rand_array(200, 63, -2.0f, 2.0f);
    float *s1 = malloc(200 * sizeof(float)), *s2 = malloc(200 * sizeof(float));
    float *d1 = malloc(200 * sizeof(float)), *d2 = malloc(200 * sizeof(float));
    ct_k_attn_isa best = ct_k_attn_isa_get();
    const float scale = 0.25f;
    for (int64_t n = 1; n <= 130; n += n < 40 ? 1 : 7)
        for (int64_t i = n > 20 ? n - 20 : 0; i < n; i += 3) {
            memcpy(s1, x, 200 * sizeof(float));
            memcpy(s2, x, 200 * sizeof(float));
            float v1 = ct_k_attn_softmax_row(best, s1, i, n);
            float v2 = ct_k_attn_softmax_row(CT_K_ATTN_ISA_PORTABLE, s2, i, n);
            CT_CHECK_MSG(memcmp(s1, s2, 200 * sizeof(float)) == 0 && v1 == v2, "n %lld i %lld",
                         (long long)n, (long long)i);
            memcpy(d1, dp, 200 * sizeof(float));
            memcpy(d2, dp, 200 * sizeof(float));
            ct_k_attn_softmax_bwd_row(best, d1, s1, i, n, v1, scale);
            ct_k_attn_softmax_bwd_row(CT_K_ATTN_ISA_PORTABLE, d2, s2, i, n, v2, scale);
            CT_CHECK_MSG(memcmp(s1, s2, 200 * sizeof(float)) == 0 &&
                             memcmp(d1, d2, 200 * sizeof(float)) == 0,
                         "backward: n %lld i %lld", (long long)n, (long long)i);
            /* against plain loops in double, and nothing past n touched */
            double mx = x[0], sum = 0.0, dot = 0.0;
            for (int64_t j = 0; j <= i; j++)
                mx = x[j] > mx ? x[j] : mx;
            for (int64_t j = 0; j <= i; j++)
                sum += exp((double)x[j] - mx);
            for (int64_t j = 0; j <= i; j++)
                dot += exp((double)x[j] - mx) / sum * dp[j];
            CT_CHECK_CLOSE((double)v1, 1.0 / sum, 0.0, 1e-6);
            int64_t bad = 0;
            for (int64_t j = 0; j < 200; j++) {
                double p = j >= n ? x[j] : j > i ? 0.0 : exp((double)x[j] - mx) / sum;
                double ds = j >= n ? dp[j] : j > i ? 0.0 : scale * p * (dp[j] - dot);
                bad += !(fabs((double)s1[j] - p) <= 1e-6 * fabs(p) + 1e-30);
                bad += !(fabs((double)d1[j] - ds) <= 1e-6);
            }
            CT_CHECK_INT(bad, 0);
        }
    free(x), free(dp), free(s1), free(s2), free(d1), free(d2);
}

int main(void) {
    CT_RUN(attention_should_match_reference_around_block_edges);
    CT_RUN(attention_should_give_the_same_bits_for_1_and_2_threads);
    CT_RUN(attention_should_skip_the_blocks_above_the_diagonal);
    CT_RUN(attention_backward_should_store_a_fresh_gradient_with_the_bits_of_adding);
    CT_RUN(softmax_reductions_should_match_plain_loops);
    CT_RUN(attention_block_product_should_give_the_same_bits_on_every_isa);
    CT_RUN(attention_softmax_rows_should_give_the_same_bits_on_every_isa);
    CT_RUN(attention_softmax_blocks_should_give_the_bits_of_single_rows);
    CT_RUN(attention_operand_layouts_should_match_plain_loops);
    CT_RUN(attention_bf16_product_should_match_the_f32_product_of_the_same_values);
    CT_RUN(attention_should_use_bf16_dot_products_within_summation_order_of_f32);
    return ct_test_finish();
}
