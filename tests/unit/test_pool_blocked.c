/*
 * test_pool_blocked.c - the blocked-layout 2x2 max pool kernels (src/kernels/onednn/
 * pool_blocked.c) against a scalar model of max_pool2d(relu(x)) and its backward routing, for
 * both tile transposes (portable C, and AVX-512 where the CPU has it): the same bits, on plane
 * sizes that are not a multiple of the 16-pixel tile (7x7, 14x14, 3x5), odd H and W, channel
 * counts that leave padding lanes, 8-channel blocks, channels last and plain NCHW, with NaN, -0,
 * subnormals and ties; and the routing rounded to bf16 in place (where the CPU has AVX512_BF16)
 * against the model's routing rounded as that CPU's conversion instruction rounds.
 */
#include <math.h>
#include <string.h>

#include "ctrain/ctrain.h"
#include "harness.h"
#include "kernels/cnn_kernels.h"

typedef struct blk_case {
    int64_t n, c, h, w, blk;
    bool last; /* channels last (nhwc), seen as blocks of blk channels blk apart */
} blk_case;

static const blk_case cases[] = {
    {2, 32, 28, 28, 16, false}, /* the CNN's first pool: 196 pixels, a 4-pixel last tile */
    {3, 64, 14, 14, 16, false}, /* the second: 49 pixels */
    {2, 20, 7, 11, 16, false},  /* padding lanes, odd H and W */
    {1, 40, 6, 10, 32, false},  /* a block past c: 8 channels of padding only... and 16 more */
    {2, 12, 9, 8, 8, false},    /* 8-channel blocks */
    {2, 5, 4, 6, 1, false},     /* plain NCHW */
    {2, 64, 14, 14, 16, true},  /* channels last, as oneDNN's AMX convolutions write it */
    {3, 32, 7, 9, 16, true},    /* channels last, odd H and W */
    {2, 24, 6, 4, 24, true},    /* channels last, one block of 24 (a partial vector) */
};

static ct_k_blocked view_of(const blk_case *bc) {
    int64_t nb = (bc->c + bc->blk - 1) / bc->blk;
    ct_k_blocked v = {bc->blk, 0, 0, 0, 0};
    if (bc->last) {
        v.sc = bc->blk;
        v.sw = bc->c;
        v.sh = bc->w * v.sw;
        v.sn = bc->h * v.sh;
        return v;
    }
    v.sw = bc->blk;
    v.sh = bc->w * bc->blk;
    v.sc = bc->h * v.sh;
    v.sn = nb * v.sc;
    return v;
}

static int64_t at(const ct_k_blocked *v, int64_t n, int64_t c, int64_t h, int64_t w) {
    return n * v->sn + (c / v->blk) * v->sc + h * v->sh + w * v->sw + c % v->blk;
}

/* Random values with NaN, -0 and runs of equal values (ties after the ReLU). */
static void fill(float *x, int64_t len, uint64_t seed) {
    ct_rng r = ct_rng_init(seed, 1);
    ct_rng_normal(&r, x, len, 0.0f, 1.0f);
    for (int64_t i = 0; i < len; i++) {
        if (i % 37 == 5) x[i] = NAN;
        if (i % 41 == 7) x[i] = -0.0f;
        if (i % 29 == 3) x[i] = 0.5f;
        if (i % 31 == 2) x[i] = i % 2 ? 1.0e-40f : -2.0e-39f; /* subnormal */
    }
}

static bool same_bits(const void *a, const void *b, size_t bytes) {
    return memcmp(a, b, bytes) == 0;
}

/* AVX512_BF16's rounding of one value (vcvtneps2bf16): to nearest even, a subnormal input
 * counted as a zero of its sign, NaN made quiet. */
static uint16_t bf16_of(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7f800000u) == 0) return (uint16_t)((u >> 16) & 0x8000u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static float relu1(float v) {
    return 0.0f > v ? 0.0f : v;
}

static void blocked_pool_should_match_the_scalar_model(void) {
    bool avx512 = ct_k_pool_blocked_has_avx512();
    if (!avx512) printf("  (no AVX-512 on this CPU: the portable transposes only)\n");
    if (!ct_k_pool_blocked_has_bf16()) printf("  SKIP the bf16 routing: no AVX512_BF16 here\n");
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const blk_case *bc = &cases[ci];
        ct_k_blocked v = view_of(bc);
        int64_t ph = bc->h / 2, pw = bc->w / 2, lo = ph * pw, out = bc->n * bc->c * lo;
        int64_t len = bc->n * v.sn;
        float *src = malloc((size_t)len * sizeof(float));
        float *y_ref = malloc((size_t)out * sizeof(float)), *dy = malloc((size_t)out * 4);
        uint8_t *k_ref = malloc((size_t)out);
        float *d_ref = malloc((size_t)len * sizeof(float));
        fill(src, len, 11 + ci);
        fill(dy, out, 97 + ci);
        /* the model: pool.c's 2x2 rule on relu(x); the winner gets 0 + (y <= 0 ? 0 : 0 + dy),
         * the rest of its window and the padding lanes +0, a dropped row or column untouched */
        for (int64_t i = 0; i < len; i++)
            d_ref[i] = 42.0f;
        for (int64_t b = 0; b < bc->n; b++)
            for (int64_t cb = 0; cb < (bc->c + bc->blk - 1) / bc->blk * bc->blk; cb++)
                for (int64_t oh = 0; oh < ph; oh++)
                    for (int64_t ow = 0; ow < pw; ow++) {
                        int64_t pos[4] = {at(&v, b, cb, 2 * oh, 2 * ow),
                                          at(&v, b, cb, 2 * oh, 2 * ow + 1),
                                          at(&v, b, cb, 2 * oh + 1, 2 * ow),
                                          at(&v, b, cb, 2 * oh + 1, 2 * ow + 1)};
                        if (cb >= bc->c) {
                            for (int r = 0; r < 4; r++)
                                d_ref[pos[r]] = 0.0f;
                            continue;
                        }
                        float m = relu1(src[pos[0]]);
                        int k = 0;
                        for (int r = 1; r < 4; r++) {
                            float e = relu1(src[pos[r]]);
                            if (e > m || isnan(e)) m = e, k = r;
                        }
                        int64_t o = (b * bc->c + cb) * lo + oh * pw + ow;
                        y_ref[o] = m;
                        k_ref[o] = (uint8_t)k;
                        float g = 0.0f + (m <= 0.0f ? 0.0f : 0.0f + dy[o]);
                        for (int r = 0; r < 4; r++)
                            d_ref[pos[r]] = r == k ? g : 0.0f;
                    }
        for (int isa = 0; isa < (avx512 ? 2 : 1); isa++) {
            float *y = malloc((size_t)out * sizeof(float)), *d = malloc((size_t)len * 4);
            uint8_t *k = malloc((size_t)out);
            ct_k_relu_pool2x2_blocked_isa(isa, &v, src, bc->n, bc->c, ph, pw, y, k);
            CT_CHECK_MSG(same_bits(y, y_ref, (size_t)out * 4), "case %zu isa %d: y", ci, isa);
            CT_CHECK_MSG(same_bits(k, k_ref, (size_t)out), "case %zu isa %d: codes", ci, isa);
            memset(y, 0, (size_t)out * 4);
            ct_k_relu_pool2x2_blocked_isa(isa, &v, src, bc->n, bc->c, ph, pw, y, NULL);
            CT_CHECK_MSG(same_bits(y, y_ref, (size_t)out * 4), "case %zu isa %d: y, no codes", ci,
                         isa);
            for (int64_t i = 0; i < len; i++)
                d[i] = 42.0f;
            ct_k_pool2x2_scatter_blocked_isa(isa, &v, dy, y_ref, k_ref, bc->n, bc->c, ph, pw, d);
            CT_CHECK_MSG(same_bits(d, d_ref, (size_t)len * 4), "case %zu isa %d: routed dy", ci,
                         isa);
            free(y), free(d), free(k);
        }
        /* the routing rounded to bf16 in place, for the bf16 backward primitives */
        if (ct_k_pool_blocked_has_bf16() && bc->blk % 16 == 0) {
            uint16_t *h = malloc((size_t)len * sizeof(uint16_t));
            for (int64_t i = 0; i < len; i++)
                h[i] = bf16_of(42.0f);
            ct_k_pool2x2_scatter_blocked_bf16(&v, dy, y_ref, k_ref, bc->n, bc->c, ph, pw, h);
            int64_t bad = 0;
            for (int64_t i = 0; i < len; i++)
                bad += h[i] != bf16_of(d_ref[i]);
            CT_CHECK_MSG(bad == 0, "case %zu: routed dy in bf16, %lld values differ", ci,
                         (long long)bad);
            free(h);
        }
        free(src), free(y_ref), free(dy), free(k_ref), free(d_ref);
    }
}

int main(void) {
    CT_RUN(blocked_pool_should_match_the_scalar_model);
    return ct_test_finish();
}
