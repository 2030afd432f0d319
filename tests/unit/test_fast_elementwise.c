/*
 * test_fast_elementwise.c - the elementwise fast paths of a transformer step against their
 * one-element-at-a-time twins: Philox drawn many blocks at a time (ct_rng_bits,
 * ct_rng_uniform) against ct_rng_block and ct_rng_uniform_at, bit for bit, and dropout's
 * integer comparison against the float decision u_i >= p it stands for.
 */
#include <math.h>
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

int main(void) {
    CT_RUN(rng_should_draw_in_bulk_the_words_of_single_blocks);
    CT_RUN(dropout_should_keep_exactly_the_elements_whose_uniform_reaches_p);
    return ct_test_finish();
}
