/*
 * test_fast_elementwise.c - the elementwise fast paths of a transformer step against their
 * one-element-at-a-time twins: Philox drawn many blocks at a time (ct_rng_bits,
 * ct_rng_uniform) against ct_rng_block and ct_rng_uniform_at, bit for bit; dropout's
 * integer comparison against the float decision u_i >= p it stands for; and the broadcasting
 * binary ops' contiguous paths against their general loops (CT_KERNELS_REFERENCE), bit for bit,
 * forward and backward, with 1 and 2 threads; linear's f32 bias gradient (column sums by row
 * blocks) against the column-at-a-time sums; layer_norm's vectorised row sums against the
 * left-to-right ones; cross_entropy's vmath.h exp against libm's; gelu_linear's one-pass
 * backward against gelu then linear; the gradients written without zeroing over a used arena.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "core/core_internal.h"
#include "ctrain/ctrain.h"
#include "harness.h"

static ct_ctx *make_ctx(int64_t threads, int reference) {
    ct_ctx_params p = ct_ctx_default_params();
    p.n_threads = threads;
    p.kernels = (ct_kernels)reference;
    ct_ctx *ctx = NULL;
    if (ct_ctx_create(&p, &ctx) != CT_OK) abort();
    return ctx;
}

static ct_graph *make_graph(ct_ctx *ctx, uint64_t seed) {
    ct_graph_params gp = ct_graph_default_params();
    gp.seed = seed;
    ct_graph *g = NULL;
    if (ct_graph_create(ctx, &gp, &g) != CT_OK) abort();
    return g;
}

/* Every word of ct_rng_bits is the word of ct_rng_block it stands for, for lengths around the
 * bulk size (64 words) and counters across the carry out of the counter's low word and the
 * wrap of the whole counter; ct_rng_uniform gives ct_rng_uniform_at's floats and advances by
 * ceil(n/4) blocks. */
static void rng_should_draw_in_bulk_the_words_of_single_blocks(void) {
    enum { MAX = 1100 };
    static uint32_t w[MAX + 1];
    static float u[MAX];
    const uint64_t counters[] = {0, 5, 0xFFFFFFF0ull, 0xFFFFFFFFull - 100, UINT64_MAX - 30};
    const int64_t lengths[] = {0, 1, 3, 4, 5, 63, 64, 65, 127, 128, 131, 1027, MAX};
    const ct_rng rngs[] = {ct_rng_init(0, 0), ct_rng_init(42, 7),
                           ct_rng_init(0xDEADBEEFCAFEF00Dull, 0x0123456789ABCDEFull)};
    long bad_words = 0, bad_floats = 0, bad_counters = 0, overrun = 0;
    for (size_t s = 0; s < sizeof rngs / sizeof rngs[0]; s++)
        for (size_t c = 0; c < sizeof counters / sizeof counters[0]; c++)
            for (size_t l = 0; l < sizeof lengths / sizeof lengths[0]; l++) {
                int64_t n = lengths[l];
                w[n] = 0xA5A5A5A5u;
                ct_rng_bits(&rngs[s], counters[c], w, n);
                overrun += w[n] != 0xA5A5A5A5u;
                for (int64_t i = 0; i < n; i++) {
                    uint32_t b[4];
                    ct_rng_block(&rngs[s], counters[c] + (uint64_t)(i / 4), b);
                    bad_words += w[i] != b[i % 4];
                }
                ct_rng r = rngs[s];
                r.counter = counters[c];
                ct_rng_uniform(&r, u, n);
                bad_counters += r.counter != counters[c] + (uint64_t)((n + 3) / 4);
                for (int64_t i = 0; i < n; i++)
                    bad_floats += u[i] != ct_rng_uniform_at(&rngs[s], counters[c], i);
            }
    CT_CHECK_INT(bad_words, 0);
    CT_CHECK_INT(bad_floats, 0);
    CT_CHECK_INT(bad_counters, 0);
    CT_CHECK_INT(overrun, 0);
}

/* Dropout keeps element i exactly when u_i >= p, u_i = ct_rng_uniform_at(start, counter, i),
 * for rates on and next to the 2^-24 grid of the u_i, where an integer threshold off by one
 * would show, and for 1 and 2 threads. */
static void dropout_should_keep_exactly_the_elements_whose_uniform_reaches_p(void) {
    enum { N = 5000 };
    static float x[N];
    for (int i = 0; i < N; i++)
        x[i] = 1.0f;
    /* the u_i of seed 3's first draw nearest 0.5, 0.1 and 0.9 make rates on the grid */
    ct_ctx *probe_ctx = make_ctx(1, 0);
    ct_graph *probe = make_graph(probe_ctx, 3);
    ct_rng start = *ct_graph_rng(probe);
    float grid[3] = {0.0f, 0.0f, 0.0f};
    const float targets[3] = {0.5f, 0.1f, 0.9f};
    for (int i = 0; i < N; i++) {
        float v = ct_rng_uniform_at(&start, start.counter, i);
        for (int k = 0; k < 3; k++)
            if (fabsf(v - targets[k]) < fabsf(grid[k] - targets[k])) grid[k] = v;
    }
    ct_graph_destroy(probe);
    ct_ctx_destroy(probe_ctx);
    float rates[] = {0.5f,
                     0.1f,
                     1e-9f,
                     0x1p-24f,
                     0.99999994f,
                     grid[0],
                     nextafterf(grid[0], 0.0f),
                     nextafterf(grid[0], 1.0f),
                     grid[1],
                     nextafterf(grid[1], 0.0f),
                     nextafterf(grid[1], 1.0f),
                     grid[2],
                     nextafterf(grid[2], 0.0f),
                     nextafterf(grid[2], 1.0f)};
    for (int64_t threads = 1; threads <= 2; threads++) {
        ct_ctx *ctx = make_ctx(threads, 0);
        for (size_t k = 0; k < sizeof rates / sizeof rates[0]; k++) {
            ct_graph *g = make_graph(ctx, 3);
            ct_rng s = *ct_graph_rng(g);
            ct_tensor *xt = ct_graph_wrap(g, x, CT_F32, 1, (int64_t[]){N});
            ct_tensor *y = xt ? ct_op_dropout(g, xt, rates[k]) : NULL;
            CT_CHECK(y != NULL);
            if (!y) break;
            long mismatch = 0;
            for (int i = 0; i < N; i++) {
                bool keep = ct_rng_uniform_at(&s, s.counter, i) >= rates[k];
                mismatch += keep != (((float *)y->data)[i] != 0.0f);
            }
            CT_CHECK_MSG(mismatch == 0, "p = %.9g, %ld threads: %ld elements differ",
                         (double)rates[k], (long)threads, mismatch);
            ct_graph_destroy(g);
        }
        ct_ctx_destroy(ctx);
    }
}

static float *rand_array(int64_t n, uint64_t seed, float lo, float hi) {
    float *x = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    ct_rng r = ct_rng_init(seed, 3);
    ct_rng_uniform(&r, x, n);
    for (int64_t i = 0; i < n; i++)
        x[i] = lo + (hi - lo) * x[i];
    return x;
}

static int64_t numel_of(int32_t nd, const int64_t *shape) {
    int64_t n = 1;
    for (int32_t d = 0; d < nd; d++)
        n *= shape[d];
    return n;
}

/* y = a op b with a seeded backward; y, da and db copied out (bytes compared by the caller). */
static void run_binary(ct_ctx *ctx,
                       int op,
                       int32_t na,
                       const int64_t *sa,
                       int32_t nb,
                       const int64_t *sb,
                       float *y,
                       float *da,
                       float *db) {
    ct_tensor *(*const fns[4])(ct_graph *, ct_tensor *, ct_tensor *) = {ct_op_add, ct_op_sub,
                                                                        ct_op_mul, ct_op_div};
    int64_t ca = numel_of(na, sa), cb = numel_of(nb, sb);
    float *av = rand_array(ca, 1, 0.5f, 2.0f), *bv = rand_array(cb, 2, 0.5f, 2.0f);
    ct_graph *g = make_graph(ctx, 0);
    ct_tensor *at = ct_graph_wrap(g, av, CT_F32, na, sa);
    ct_tensor *bt = ct_graph_wrap(g, bv, CT_F32, nb, sb);
    at->flags |= CT_TENSOR_REQUIRES_GRAD;
    bt->flags |= CT_TENSOR_REQUIRES_GRAD;
    ct_tensor *yt = fns[op](g, at, bt);
    CT_CHECK(yt != NULL);
    if (yt) {
        int64_t cy = ct_tensor_numel(yt);
        float *seed = rand_array(cy, 3, -1.0f, 1.0f);
        CT_CHECK_INT(ct_graph_backward_seed(g, yt, seed), CT_OK);
        memcpy(y, yt->data, (size_t)cy * sizeof(float));
        memcpy(da, at->grad, (size_t)ca * sizeof(float));
        memcpy(db, bt->grad, (size_t)cb * sizeof(float));
        free(seed);
    }
    ct_graph_destroy(g);
    free(av);
    free(bv);
}

static void binary_ops_should_give_the_general_loops_bits_on_their_fast_paths(void) {
    typedef struct {
        int32_t na, nb;
        int64_t sa[3], sb[3];
    } shapes;
    const shapes cases[] = {
        {3, 3, {3, 37, 70}, {3, 37, 70}}, /* equal */
        {3, 1, {3, 37, 70}, {1}},         /* scalar */
        {3, 2, {3, 37, 70}, {37, 70}},    /* suffix: position embedding */
        {3, 1, {3, 37, 70}, {70}},        /* suffix: bias */
        {3, 3, {3, 37, 70}, {1, 37, 70}}, /* suffix with a leading 1 */
        {2, 3, {37, 70}, {3, 37, 70}},    /* a is the suffix */
        {1, 3, {1}, {3, 37, 70}},         /* a scalar: the general loops */
        {3, 3, {3, 37, 70}, {3, 1, 70}},  /* a middle dim stretched: the general loops */
        {3, 2, {3, 37, 70}, {37, 1}},     /* not a suffix: the general loops */
        {3, 1, {3, 37, 5000}, {5000}},    /* rows longer than a span */
    };
    static float ref[3][3 * 37 * 5000], got[3][3 * 37 * 5000];
    ct_ctx *rctx = make_ctx(1, 1);
    for (int64_t threads = 1; threads <= 2; threads++) {
        ct_ctx *ctx = make_ctx(threads, 0);
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
            for (int op = 0; op < 4; op++) {
                const shapes *k = &cases[c];
                run_binary(rctx, op, k->na, k->sa, k->nb, k->sb, ref[0], ref[1], ref[2]);
                run_binary(ctx, op, k->na, k->sa, k->nb, k->sb, got[0], got[1], got[2]);
                int64_t ca = numel_of(k->na, k->sa), cb = numel_of(k->nb, k->sb);
                int64_t cy = ca > cb ? ca : cb;
                CT_CHECK_MSG(memcmp(ref[0], got[0], (size_t)cy * sizeof(float)) == 0 &&
                                 memcmp(ref[1], got[1], (size_t)ca * sizeof(float)) == 0 &&
                                 memcmp(ref[2], got[2], (size_t)cb * sizeof(float)) == 0,
                             "case %zu, op %d, %ld threads: y, da or db differ", c, op,
                             (long)threads);
            }
        ct_ctx_destroy(ctx);
    }
    ct_ctx_destroy(rctx);
}

/* The bias gradient of linear (f32) sums dy's columns in the same order on both paths. */
static void linear_should_sum_the_bias_gradient_as_the_reference_does(void) {
    enum { R = 600, IN = 3, OUT = 130 };
    float *x = rand_array(R * IN, 4, -1.0f, 1.0f), *w = rand_array(OUT * IN, 5, -1.0f, 1.0f);
    float *b = rand_array(OUT, 6, -1.0f, 1.0f), *seed = rand_array(R * OUT, 7, -1.0f, 1.0f);
    float db[3][OUT];
    for (int run = 0; run < 3; run++) { /* reference, fast with 1 thread, fast with 2 */
        ct_ctx *ctx = make_ctx(run == 2 ? 2 : 1, run == 0);
        ct_graph *g = make_graph(ctx, 0);
        ct_tensor *xt = ct_graph_wrap(g, x, CT_F32, 2, (int64_t[]){R, IN});
        ct_tensor *wt = ct_graph_wrap(g, w, CT_F32, 2, (int64_t[]){OUT, IN});
        ct_tensor *bt = ct_graph_wrap(g, b, CT_F32, 1, (int64_t[]){OUT});
        bt->flags |= CT_TENSOR_REQUIRES_GRAD;
        ct_tensor *y = ct_op_linear(g, xt, wt, bt);
        CT_CHECK(y != NULL);
        if (y) {
            CT_CHECK_INT(ct_graph_backward_seed(g, y, seed), CT_OK);
            memcpy(db[run], bt->grad, sizeof db[run]);
        }
        ct_graph_destroy(g);
        ct_ctx_destroy(ctx);
    }
    CT_CHECK(memcmp(db[0], db[1], sizeof db[0]) == 0);
    CT_CHECK(memcmp(db[0], db[2], sizeof db[0]) == 0);
    free(x);
    free(w);
    free(b);
    free(seed);
}

/* layer_norm's vectorised row sums against the left-to-right ones, N rows of D: the same values
 * to within the last bits (off-centre rows, with and without the affine parameters), and the
 * same bits for 1 and 2 threads. The fast backward sums dw and db by blocks of rows. */
static void layer_norm_case(int64_t N, int64_t D) {
    float *x = rand_array(N * D, 8, 2.0f, 4.0f), *w = rand_array(D, 9, 0.5f, 1.5f);
    float *b = rand_array(D, 10, -1.0f, 1.0f), *seed = rand_array(N * D, 11, -1.0f, 1.0f);
    float *out[3][4];
    for (int run = 0; run < 3; run++)
        for (int k = 0; k < 4; k++)
            out[run][k] = calloc((size_t)(N * D), sizeof(float));
    for (int affine = 0; affine < 2; affine++) {
        for (int run = 0; run < 3; run++) { /* reference, fast with 1 thread, fast with 2 */
            ct_ctx *ctx = make_ctx(run == 2 ? 2 : 1, run == 0);
            ct_graph *g = make_graph(ctx, 0);
            ct_tensor *xt = ct_graph_wrap(g, x, CT_F32, 2, (int64_t[]){N, D});
            ct_tensor *wt = affine ? ct_graph_wrap(g, w, CT_F32, 1, (int64_t[]){D}) : NULL;
            ct_tensor *bt = affine ? ct_graph_wrap(g, b, CT_F32, 1, (int64_t[]){D}) : NULL;
            xt->flags |= CT_TENSOR_REQUIRES_GRAD;
            if (affine) {
                wt->flags |= CT_TENSOR_REQUIRES_GRAD;
                bt->flags |= CT_TENSOR_REQUIRES_GRAD;
            }
            ct_tensor *y = ct_op_layer_norm(g, xt, wt, bt, 1e-5f);
            CT_CHECK(y != NULL);
            if (y) {
                CT_CHECK_INT(ct_graph_backward_seed(g, y, seed), CT_OK);
                memcpy(out[run][0], y->data, (size_t)(N * D) * sizeof(float));
                memcpy(out[run][1], xt->grad, (size_t)(N * D) * sizeof(float));
                if (affine) {
                    memcpy(out[run][2], wt->grad, (size_t)D * sizeof(float));
                    memcpy(out[run][3], bt->grad, (size_t)D * sizeof(float));
                }
            }
            ct_graph_destroy(g);
            ct_ctx_destroy(ctx);
        }
        CT_CHECK_ARRAYS("y", out[1][0], out[0][0], N * D, 1e-5, 1e-5);
        CT_CHECK_ARRAYS("dx", out[1][1], out[0][1], N * D, 1e-4, 1e-4);
        if (affine) {
            /* sums over N rows of terms up to about 4: tolerances grow with N */
            double tol = 1e-6 * (double)N;
            CT_CHECK_ARRAYS("dw", out[1][2], out[0][2], D, tol, 1e-4);
            CT_CHECK_ARRAYS("db", out[1][3], out[0][3], D, tol, 1e-5);
        }
        for (int k = 0; k < 4; k++)
            CT_CHECK(memcmp(out[1][k], out[2][k], (size_t)(N * D) * sizeof(float)) == 0);
    }
    for (int run = 0; run < 3; run++)
        for (int k = 0; k < 4; k++)
            free(out[run][k]);
    free(x);
    free(w);
    free(b);
    free(seed);
}

/* Rows of 203 = 25 * 8 + 3 elements (the row sums' tails) in two blocks of rows, one short;
 * then 4,133 rows, more than 64 blocks of 32 (the most the backward's partial sums take): 64
 * blocks of 65 rows, the last one 38. */
static void layer_norm_should_match_the_reference_sums(void) {
    layer_norm_case(61, 203);
    layer_norm_case(4133, 24);
}

/* cross_entropy's vectorised exp and row sums against libm's expf and one running sum: the
 * same loss and gradients to within the exp's error (rows of 300 = a chunk of 256 and a tail
 * that is not a multiple of 8, label smoothing, an ignored row), and the same bits for 1 and 2
 * threads. */
static void cross_entropy_should_match_the_reference_exp(void) {
    enum { N = 37, C = 300 };
    float *x = rand_array(N * C, 12, -6.0f, 6.0f);
    int32_t target[N];
    for (int i = 0; i < N; i++)
        target[i] = (i * 53) % C;
    target[5] = -100;
    float loss[3], grad[3][N * C];
    for (int run = 0; run < 3; run++) { /* reference, fast with 1 thread, fast with 2 */
        ct_ctx *ctx = make_ctx(run == 2 ? 2 : 1, run == 0);
        ct_graph *g = make_graph(ctx, 0);
        ct_tensor *xt = ct_graph_wrap(g, x, CT_F32, 2, (int64_t[]){N, C});
        ct_tensor *tt = ct_graph_wrap(g, target, CT_I32, 1, (int64_t[]){N});
        xt->flags |= CT_TENSOR_REQUIRES_GRAD;
        ct_cross_entropy_params p = ct_cross_entropy_default_params();
        p.label_smoothing = 0.1f;
        ct_tensor *l = ct_loss_cross_entropy(g, xt, tt, &p);
        CT_CHECK(l != NULL);
        if (l) {
            CT_CHECK_INT(ct_graph_backward(g, l), CT_OK);
            loss[run] = *(float *)l->data;
            memcpy(grad[run], xt->grad, sizeof grad[run]);
        }
        ct_graph_destroy(g);
        ct_ctx_destroy(ctx);
    }
    CT_CHECK_CLOSE(loss[1], loss[0], 0.0, 1e-6);
    CT_CHECK_ARRAYS("dx", grad[1], grad[0], N * C, 1e-9, 1e-5);
    CT_CHECK(loss[1] == loss[2] && memcmp(grad[1], grad[2], sizeof grad[1]) == 0);
    free(x);
}

/* gelu_linear's one-pass backward (the activation again and gelu's derivative together) and
 * gelu_linear_over's (gelu' kept from the forward pass) give the bits of gelu then linear, for
 * each form of the activation they write: f32, f32 rounded to bf16 values (bf16 autocast
 * without the native bf16 GEMM: the BLAS kernel set) and bf16 (the native GEMM, where the CPU
 * has one). 97 x 100 activations: two parallel blocks of 4,096 and a shorter last one. */
static void gelu_linear_should_give_the_unfused_bits_in_one_backward_pass(void) {
    enum { R = 97, IN = 100, OUT = 9 };
    float *x = rand_array(R * IN, 13, -4.0f, 4.0f), *w = rand_array(OUT * IN, 14, -0.5f, 0.5f);
    float *b = rand_array(OUT, 15, -0.5f, 0.5f), *seed = rand_array(R * OUT, 16, -1.0f, 1.0f);
    static float zero[R * IN];
    static float out[3][4][R * IN];
    for (int cfg = 0; cfg < 4; cfg++) {
        bool bf16 = cfg & 1;
        ct_ctx *ctx = make_ctx(2, cfg & 2 ? CT_KERNELS_BLAS : CT_KERNELS_FAST);
        for (int form = 0; form < 3; form++) { /* unfused, fused, fused over x */
            ct_graph *g = make_graph(ctx, 0);
            if (bf16) ct_graph_set_autocast(g, CT_BF16);
            ct_tensor *xt = ct_graph_wrap(g, x, CT_F32, 2, (int64_t[]){R, IN});
            ct_tensor *zt = ct_graph_wrap(g, zero, CT_F32, 2, (int64_t[]){R, IN});
            ct_tensor *wt = ct_graph_wrap(g, w, CT_F32, 2, (int64_t[]){OUT, IN});
            ct_tensor *bt = ct_graph_wrap(g, b, CT_F32, 1, (int64_t[]){OUT});
            xt->flags |= CT_TENSOR_REQUIRES_GRAD;
            wt->flags |= CT_TENSOR_REQUIRES_GRAD;
            bt->flags |= CT_TENSOR_REQUIRES_GRAD;
            ct_tensor *h = ct_op_add(g, xt, zt); /* an op's output, as the _over form needs */
            ct_tensor *y = form == 2   ? ct_op_gelu_linear_over(g, h, CT_GELU_ERF, wt, bt)
                           : form == 1 ? ct_op_gelu_linear(g, h, CT_GELU_ERF, wt, bt)
                                       : ct_op_linear(g, ct_op_gelu(g, h, CT_GELU_ERF), wt, bt);
            CT_CHECK(y != NULL);
            if (y) {
                CT_CHECK_INT(ct_graph_backward_seed(g, y, seed), CT_OK);
                memcpy(out[form][0], y->data, R * OUT * sizeof(float));
                memcpy(out[form][1], xt->grad, R * IN * sizeof(float));
                memcpy(out[form][2], wt->grad, OUT * IN * sizeof(float));
                memcpy(out[form][3], bt->grad, OUT * sizeof(float));
            }
            ct_graph_destroy(g);
        }
        for (int form = 1; form < 3; form++)
            CT_CHECK_MSG(memcmp(out[0], out[form], sizeof out[0]) == 0,
                         "cfg %d form %d: y, dx, dw or db differ", cfg, form);
        ct_ctx_destroy(ctx);
    }
    free(x);
    free(w);
    free(b);
    free(seed);
}

/* One step of a transformer block's ops (linear, layer_norm, gelu_linear, dropout, the
 * residual add, the suffix add of a position table), its gradients copied out. With `zeroed`,
 * every intermediate's gradient buffer is made (zeroed) before the backward pass, so that no
 * op finds one to write without reading. */
static void
block_step(ct_graph *g, const float *x, float *const p[7], float *grads[8], bool zeroed) {
    enum { R = 24, C = 40, H = 72 };
    ct_tensor *xt = ct_graph_wrap(g, (void *)(uintptr_t)x, CT_F32, 3, (int64_t[]){2, R / 2, C});
    ct_tensor *pos = ct_graph_wrap(g, p[0], CT_F32, 2, (int64_t[]){R / 2, C});
    ct_tensor *w1 = ct_graph_wrap(g, p[1], CT_F32, 2, (int64_t[]){C, C});
    ct_tensor *lw = ct_graph_wrap(g, p[2], CT_F32, 1, (int64_t[]){C});
    ct_tensor *lb = ct_graph_wrap(g, p[3], CT_F32, 1, (int64_t[]){C});
    ct_tensor *w2 = ct_graph_wrap(g, p[4], CT_F32, 2, (int64_t[]){H, C});
    ct_tensor *w3 = ct_graph_wrap(g, p[5], CT_F32, 2, (int64_t[]){C, H});
    ct_tensor *b3 = ct_graph_wrap(g, p[6], CT_F32, 1, (int64_t[]){C});
    ct_tensor *all[8] = {xt, pos, w1, lw, lb, w2, w3, b3};
    for (int i = 0; i < 8; i++)
        all[i]->flags |= CT_TENSOR_REQUIRES_GRAD;
    ct_tensor *h = ct_op_add(g, xt, pos);
    ct_tensor *u = ct_op_layer_norm(g, ct_op_linear(g, h, w1, NULL), lw, lb, 1e-5f);
    ct_tensor *m = ct_op_linear(g, u, w2, NULL);
    ct_tensor *d = ct_op_dropout(g, ct_op_gelu_linear(g, m, CT_GELU_ERF, w3, b3), 0.25f);
    ct_tensor *y = ct_op_add(g, h, d);
    ct_tensor *yy = ct_op_mul(g, y, y);
    for (int i = 0; zeroed && i < 8; i++)
        CT_CHECK(ct_graph_grad(g, all[i]) != NULL);
    for (const ct_node *n = zeroed ? ct_graph_newest(g) : NULL; n; n = n->prev)
        CT_CHECK(ct_graph_grad(g, n->out) != NULL);
    CT_CHECK_INT(ct_graph_backward(g, ct_op_sum_all(g, yy)), CT_OK);
    if (ct_graph_status(g) != CT_OK) return;
    for (int i = 0; i < 8; i++)
        memcpy(grads[i], all[i]->grad, (size_t)ct_tensor_numel(all[i]) * sizeof(float));
}

/* The gradients that backward writes without zeroing first (ct_graph_grad_fresh) are written
 * whole and as adding to zeros would: a step over an arena full of an earlier step's NaNs
 * gives the bits of a step whose gradient buffers were all made zeroed beforehand. */
static void backward_should_write_whole_gradients_over_a_used_arena(void) {
    enum { R = 24, C = 40, H = 72 };
    const int64_t sizes[8] = {R * C, R / 2 * C, C * C, C, C, H * C, C * H, C};
    float *p[7], *grads[2][8];
    const int64_t psizes[7] = {R / 2 * C, C * C, C, C, H * C, C * H, C};
    for (int i = 0; i < 7; i++)
        p[i] = rand_array(psizes[i], 20 + (uint64_t)i, -0.5f, 0.5f);
    float *x = rand_array(R * C, 30, -2.0f, 2.0f), *nan = rand_array(R * C, 31, 0.0f, 1.0f);
    for (int i = 0; i < R * C; i++)
        nan[i] = NAN;
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < 8; i++)
            grads[k][i] = malloc((size_t)sizes[i] * sizeof(float));
    for (int64_t threads = 1; threads <= 2; threads++)
        for (int bf16 = 0; bf16 < 2; bf16++) {
            ct_ctx *ctx = make_ctx(threads, 0);
            ct_graph *fresh = make_graph(ctx, 5), *used = make_graph(ctx, 5);
            if (bf16) {
                ct_graph_set_autocast(fresh, CT_BF16);
                ct_graph_set_autocast(used, CT_BF16);
            }
            block_step(fresh, x, p, grads[0], true);
            ct_rng start = *ct_graph_rng(used);
            block_step(used, nan, p, grads[1], false); /* every buffer of the arena NaN */
            ct_graph_reset(used);
            *ct_graph_rng(used) = start;
            block_step(used, x, p, grads[1], false);
            for (int i = 0; i < 8; i++)
                CT_CHECK_MSG(memcmp(grads[0][i], grads[1][i], (size_t)sizes[i] * sizeof(float)) ==
                                 0,
                             "gradient %d, %ld threads, bf16 %d", i, (long)threads, bf16);
            ct_graph_destroy(fresh);
            ct_graph_destroy(used);
            ct_ctx_destroy(ctx);
        }
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < 8; i++)
            free(grads[k][i]);
    for (int i = 0; i < 7; i++)
        free(p[i]);
    free(x);
    free(nan);
}

int main(void) {
    CT_RUN(rng_should_draw_in_bulk_the_words_of_single_blocks);
    CT_RUN(dropout_should_keep_exactly_the_elements_whose_uniform_reaches_p);
    CT_RUN(binary_ops_should_give_the_general_loops_bits_on_their_fast_paths);
    CT_RUN(linear_should_sum_the_bias_gradient_as_the_reference_does);
    CT_RUN(layer_norm_should_match_the_reference_sums);
    CT_RUN(cross_entropy_should_match_the_reference_exp);
    CT_RUN(gelu_linear_should_give_the_unfused_bits_in_one_backward_pass);
    CT_RUN(backward_should_write_whole_gradients_over_a_used_arena);
    return ct_test_finish();
}
