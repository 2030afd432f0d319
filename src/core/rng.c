/*
 * rng.c - Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", 2011).
 *
 * The 128-bit counter is (counter low, counter high, stream low, stream high) and the 64-bit
 * key is the seed. Every output is a pure function of (seed, stream, counter), which is what
 * makes saving, restoring, splitting and parallel generation exact.
 *
 * philox() computes one block; philox_lanes() computes PHILOX_LANES consecutive blocks at once,
 * each lane a column of arrays, so that the loops over the lanes vectorise (a 32x32->64-bit
 * product per lane is one vpmuludq lane). Both do the same integer arithmetic, so the bits are
 * the same (tests/unit/test_core.c compares ct_rng_bits with ct_rng_uniform_at element by
 * element, across the carry of the counter's low word).
 */
#include <math.h>

#include "core/core_internal.h"
#include "ctrain/rng.h"

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

static void philox(uint64_t seed, uint64_t stream, uint64_t counter, uint32_t out[4]) {
    uint32_t c0 = (uint32_t)counter, c1 = (uint32_t)(counter >> 32);
    uint32_t c2 = (uint32_t)stream, c3 = (uint32_t)(stream >> 32);
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)PHILOX_M0 * c0;
        uint64_t p1 = (uint64_t)PHILOX_M1 * c2;
        uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
        uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
        c0 = hi1 ^ c1 ^ k0;
        c1 = lo1;
        c2 = hi0 ^ c3 ^ k1;
        c3 = lo0;
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

#define PHILOX_LANES 16

/* Blocks counter .. counter + PHILOX_LANES - 1, block k's word j at out[4 k + j]. */
CT_HOT static void
philox_lanes(uint64_t seed, uint64_t stream, uint64_t counter, uint32_t out[4 * PHILOX_LANES]) {
    uint32_t c0[PHILOX_LANES], c1[PHILOX_LANES], c2[PHILOX_LANES], c3[PHILOX_LANES];
    for (int k = 0; k < PHILOX_LANES; k++) {
        uint64_t c = counter + (uint64_t)k;
        c0[k] = (uint32_t)c;
        c1[k] = (uint32_t)(c >> 32);
        c2[k] = (uint32_t)stream;
        c3[k] = (uint32_t)(stream >> 32);
    }
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int r = 0; r < 10; r++) {
        /* kept a loop: unrolled into 16 scalar copies, gcc would not vectorise it */
#pragma GCC unroll 1
        for (int k = 0; k < PHILOX_LANES; k++) {
            uint64_t p0 = (uint64_t)PHILOX_M0 * c0[k];
            uint64_t p1 = (uint64_t)PHILOX_M1 * c2[k];
            uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1[k] ^ k0;
            uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3[k] ^ k1;
            c1[k] = (uint32_t)p1;
            c3[k] = (uint32_t)p0;
            c0[k] = n0;
            c2[k] = n2;
        }
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
    for (int k = 0; k < PHILOX_LANES; k++) {
        out[4 * k + 0] = c0[k];
        out[4 * k + 1] = c1[k];
        out[4 * k + 2] = c2[k];
        out[4 * k + 3] = c3[k];
    }
}

void ct_rng_bits(const ct_rng *r, uint64_t counter0, uint32_t *out, int64_t n) {
    int64_t i = 0;
    for (; i + 4 * PHILOX_LANES <= n; i += 4 * PHILOX_LANES)
        philox_lanes(r->seed, r->stream, counter0 + (uint64_t)(i / 4), out + i);
    for (; i < n; i += 4) {
        uint32_t b[4];
        philox(r->seed, r->stream, counter0 + (uint64_t)(i / 4), b);
        for (int64_t j = 0; j < 4 && i + j < n; j++)
            out[i + j] = b[j];
    }
}

/* SplitMix64 finaliser: decorrelates stream ids derived from (parent, id). */
static uint64_t mix64(uint64_t x) {
    x ^= x >> 30;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 27;
    x *= 0x94D049BB133111EBull;
    x ^= x >> 31;
    return x;
}

ct_rng ct_rng_init(uint64_t seed, uint64_t stream) {
    ct_rng r = {seed, stream, 0};
    return r;
}

ct_rng ct_rng_split(const ct_rng *r, uint64_t id) {
    ct_rng c = {r->seed, mix64(mix64(r->stream + 0x9E3779B97F4A7C15ull) ^ (id + 1)), 0};
    return c;
}

void ct_rng_block(const ct_rng *r, uint64_t counter, uint32_t out[4]) {
    philox(r->seed, r->stream, counter, out);
}

static float u32_to_unit(uint32_t x) {
    return (float)(x >> 8) * (1.0f / 16777216.0f); /* 24 bits: exact in f32, in [0, 1) */
}

CT_HOT void ct_rng_uniform(ct_rng *r, float *out, int64_t n) {
    enum { CHUNK = 4 * PHILOX_LANES * 4 };
    uint32_t b[CHUNK];
    for (int64_t i = 0; i < n; i += CHUNK) {
        int64_t len = n - i < CHUNK ? n - i : CHUNK;
        ct_rng_bits(r, r->counter, b, len);
        r->counter += (uint64_t)((len + 3) / 4);
        for (int64_t j = 0; j < len; j++)
            out[i + j] = u32_to_unit(b[j]);
    }
}

float ct_rng_uniform_at(const ct_rng *r, uint64_t counter0, int64_t i) {
    uint32_t b[4];
    philox(r->seed, r->stream, counter0 + (uint64_t)(i / 4), b);
    return u32_to_unit(b[i % 4]);
}

void ct_rng_normal(ct_rng *r, float *out, int64_t n, float mean, float std) {
    uint32_t b[4];
    for (int64_t i = 0; i < n; i += 2) {
        philox(r->seed, r->stream, r->counter++, b);
        /* 53-bit uniforms in (0, 1] and [0, 1): log never sees 0 */
        double u1 = ((double)(((uint64_t)b[0] << 21) ^ (b[1] >> 11)) + 1.0) * 0x1p-53;
        double u2 = (double)(((uint64_t)b[2] << 21) ^ (b[3] >> 11)) * 0x1p-53;
        double rad = sqrt(-2.0 * log(u1));
        double th = 6.283185307179586476925 * u2;
        out[i] = (float)((double)mean + (double)std * rad * cos(th));
        if (i + 1 < n) out[i + 1] = (float)((double)mean + (double)std * rad * sin(th));
    }
}

uint64_t ct_rng_below(ct_rng *r, uint64_t n) {
    if (n == 0) return 0; /* documented: n >= 1; 0 must not divide by zero */
    /* Rejection sampling on 64-bit draws: unbiased for any n. */
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    for (;;) {
        uint32_t b[4];
        philox(r->seed, r->stream, r->counter++, b);
        uint64_t x = ((uint64_t)b[0] << 32) | b[1];
        if (x < limit) return x % n;
    }
}
