/*
 * rng.h - a counter-based random number generator (Philox-4x32-10).
 *
 * A stream is three integers: the seed, a stream id and a counter. Each counter value yields one
 * block of four 32-bit words that depends only on (seed, stream, counter), so draws can be made
 * in parallel, saved and restored exactly, and split into independent streams per worker, rank
 * or purpose without any shared state. The struct is a plain value the caller owns.
 */
#ifndef CTRAIN_RNG_H
#define CTRAIN_RNG_H

#include "ctrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ct_rng {
    uint64_t seed;    /* the Philox key */
    uint64_t stream;  /* high half of the Philox counter: selects an independent stream */
    uint64_t counter; /* low half of the counter: advances by one per block of four words */
} ct_rng;

/* The stream `stream` of generator `seed`, at counter 0. */
CT_API ct_rng ct_rng_init(uint64_t seed, uint64_t stream);
/* A new stream derived from r's stream and `id`; r itself is unchanged. Different ids (and
 * different parents) give streams that do not overlap. */
CT_API ct_rng ct_rng_split(const ct_rng *r, uint64_t id);

/* The raw Philox block for (r's seed, r's stream, counter); does not advance r. */
CT_API void ct_rng_block(const ct_rng *r, uint64_t counter, uint32_t out[4]);

/* Fills out[0..n) with uniform floats in [0, 1); advances r by ceil(n/4) blocks. */
CT_API void ct_rng_uniform(ct_rng *r, float *out, int64_t n);
/* Fills out[0..n) with normal floats (Box-Muller); advances r by ceil(n/2) blocks. */
CT_API void ct_rng_normal(ct_rng *r, float *out, int64_t n, float mean, float std);
/* A uniform integer in [0, n) (n >= 1; 0 gives 0), without modulo bias; advances r by at least
 * one block. */
CT_API uint64_t ct_rng_below(ct_rng *r, uint64_t n);

/* Element i of a uniform [0,1) sequence that starts at block `counter0`: the same value that
 * ct_rng_uniform would write at index i, computable independently for parallel kernels. */
CT_API float ct_rng_uniform_at(const ct_rng *r, uint64_t counter0, int64_t i);

#ifdef __cplusplus
}
#endif

#endif /* CTRAIN_RNG_H */
