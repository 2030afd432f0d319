/*
 * shard.c - the sharded optimizer update of a data-parallel run on one machine.
 *
 * With every rank on one machine, the ranks exchange gradients and weights through a shared
 * window (ct_comm_shared) instead of all-reducing the whole gradient: each rank's backward
 * passes accumulate straight into its segment (the parameter store's gradient buffer is bound
 * there), then each sums every rank's gradients over its own part [lo, hi) of the flat buffer,
 * updates only that part of the weights and the optimizer's moments (ct_optim_step_range),
 * publishes it and copies the other ranks' parts. The update, the run's one duplicated pass over
 * every weight and moment, is thus split between the ranks as threads split it in one process, and
 * no rank moves more than the buffer once in and once out (ZeRO-1 on shared memory;
 * docs/distributed.md).
 *
 * Each rank's segment holds n floats of its gradients, then room for the longest part: its
 * part of the updated weights. Another rank reads a rank's gradients (outside the
 * rank's own part) between the synchronisation of ct_train_shard_reduce and the next one
 * (ct_train_shard_gather's, or ct_train_shard_settle's when the update is skipped), and its
 * weights between gather's synchronisation and the next step's reduce: so no area is written
 * while another rank reads it, and the sum can go in place into the rank's own part.
 *
 * The moments of the other ranks' parts are stale on each rank; ct_train_shard_share_buffer
 * completes them (at a checkpoint and at the end of fit). The shard owns its shared memory;
 * it borrows the communicator.
 */
#include <string.h>

#include "kernels/vmath.h"
#include "train/train_internal.h"

struct ct_train_shard {
    ct_ctx *ctx;
    ct_comm *comm;
    ct_comm_shared *mem;
    int64_t rank, world, n;
    int64_t *bounds;  /* world + 1 offsets: rank k's part is [bounds[k], bounds[k + 1]) */
    float **seg;      /* world: each rank's published gradients (its segment's start) */
    int64_t max_part; /* the longest part: the size of each segment's weights area */
};

/* Parts start on multiples of 16 floats (64 bytes): each rank's vector loops start aligned
 * and no two ranks write one cache line of a private buffer's neighbour parts. */
enum { PART_ALIGN = 16 };

ct_status ct_train_shard_create(ct_ctx *ctx, ct_comm *comm, int64_t n, ct_train_shard **out) {
    *out = NULL;
    if (ct_comm_world_size(comm) < 2)
        return CT_FAIL(ctx, CT_ERR_INVALID_ARG, "sharded update: needs 2 ranks or more, got %lld",
                       (long long)ct_comm_world_size(comm));
    ct_train_shard *sh = ct_alloc(ctx, sizeof *sh);
    if (!sh) return CT_FAIL(ctx, CT_ERR_OOM, "sharded update: its state");
    memset(sh, 0, sizeof *sh);
    sh->ctx = ctx;
    sh->comm = comm;
    sh->rank = ct_comm_rank(comm);
    sh->world = ct_comm_world_size(comm);
    sh->n = n;
    sh->bounds = ct_alloc(ctx, (size_t)(sh->world + 1) * sizeof *sh->bounds);
    sh->seg = ct_alloc(ctx, (size_t)sh->world * sizeof *sh->seg);
    if (!sh->bounds || !sh->seg) {
        ct_train_shard_destroy(sh, false);
        return CT_FAIL(ctx, CT_ERR_OOM, "sharded update: its bounds");
    }
    for (int64_t k = 0; k <= sh->world; k++) {
        int64_t b = n * k / sh->world;
        b -= b % PART_ALIGN;
        sh->bounds[k] = k == sh->world ? n : b;
    }
    for (int64_t k = 0; k < sh->world; k++)
        if (sh->bounds[k + 1] - sh->bounds[k] > sh->max_part)
            sh->max_part = sh->bounds[k + 1] - sh->bounds[k];
    ct_status s = ct_comm_shared_create(comm, (size_t)(n + sh->max_part) * sizeof(float), &sh->mem);
    if (s != CT_OK) {
        ct_train_shard_destroy(sh, false);
        return ct_err_wrap(ctx, "sharded optimizer update");
    }
    for (int64_t k = 0; k < sh->world; k++)
        sh->seg[k] = ct_comm_shared_segment(sh->mem, k);
    *out = sh;
    return CT_OK;
}

void ct_train_shard_destroy(ct_train_shard *sh, bool collective) {
    if (!sh) return;
    /* freeing the window is collective: after a failure the other ranks may never get there,
       and the job is ending anyway (MPI_Finalize or the abort releases it) */
    if (collective) ct_comm_shared_destroy(sh->mem);
    ct_free(sh->ctx, sh->seg, (size_t)sh->world * sizeof *sh->seg);
    ct_free(sh->ctx, sh->bounds, (size_t)(sh->world + 1) * sizeof *sh->bounds);
    ct_free(sh->ctx, sh, sizeof *sh);
}

void ct_train_shard_bounds(const ct_train_shard *sh, int64_t rank, int64_t *lo, int64_t *hi) {
    *lo = sh->bounds[rank];
    *hi = sh->bounds[rank + 1];
}

/* Where rank publishes its part of the weights: after its gradients, the part's first
 * element first. */
static float *weights_of(const ct_train_shard *sh, int64_t rank) {
    return sh->seg[rank] + sh->n;
}

/* The work is in fixed chunks whose bounds depend only on the part's length, so the sum of
 * squares (each chunk's by ct_vsum_squares, then the chunks in order) has the same bits for
 * any thread count. */
enum { SUM_CHUNKS = 64 };

/* out[a, b) = the sum over ranks in rank order, divided by d; returns nonzero when a result is
 * an inf or a NaN (its exponent all ones), and puts the sum of the squares in *sq when asked.
 * out is one of the segments (the rank's own), so the sums build up in a block on the stack
 * before they replace it; each loop vectorises. */
enum { SUM_BLOCK = 512 };
CT_HOT static unsigned sum_chunk(
    const float *const *seg, int64_t world, float *out, int64_t a, int64_t b, float d, double *sq) {
    uint32_t bad = 0;
    float block[SUM_BLOCK];
    for (int64_t at = a; at < b; at += SUM_BLOCK) {
        const int64_t m = b - at < SUM_BLOCK ? b - at : SUM_BLOCK;
        const float *s0 = seg[0] + at, *s1 = seg[1] + at;
        for (int64_t i = 0; i < m; i++)
            block[i] = s0[i] + s1[i];
        for (int64_t k = 2; k < world; k++) {
            const float *sk = seg[k] + at;
            for (int64_t i = 0; i < m; i++)
                block[i] += sk[i];
        }
        float *o = out + at;
        for (int64_t i = 0; i < m; i++) {
            float x = block[i] / d;
            o[i] = x;
            uint32_t u;
            memcpy(&u, &x, sizeof u);
            bad |= (u & 0x7f800000u) == 0x7f800000u;
        }
    }
    if (sq) *sq = ct_vsum_squares(out + a, b - a);
    return bad;
}

float *ct_train_shard_grads(const ct_train_shard *sh) {
    return sh->seg[sh->rank];
}

ct_status ct_train_shard_reduce(ct_train_shard *sh, bool *ok, double *sumsq) {
    /* every rank's backward passes are done: their gradients are final */
    CT_TRY(ct_comm_shared_sync(sh->mem));
    float *grads = sh->seg[sh->rank];
    const int64_t lo = sh->bounds[sh->rank], hi = sh->bounds[sh->rank + 1], len = hi - lo;
    const float divisor = (float)sh->world;
    const int64_t world = sh->world;
    const float *const *seg = (const float *const *)sh->seg;
    const int64_t chunk = (len + SUM_CHUNKS - 1) / SUM_CHUNKS;
    double part[SUM_CHUNKS];
    unsigned bad = 0;
    int nt = ct_threads_for(sh->ctx, SUM_CHUNKS, 2 * chunk * world);
    (void)nt; /* without OpenMP */
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) schedule(static) reduction(| : bad)
#endif
    for (int c = 0; c < SUM_CHUNKS; c++) {
        int64_t a = lo + (int64_t)c * chunk, b = a + chunk;
        if (a > hi) a = hi;
        if (b > hi) b = hi;
        part[c] = 0.0;
        bad |= sum_chunk(seg, world, grads, a, b, divisor, sumsq ? &part[c] : NULL);
    }
    if (ok) *ok = bad == 0;
    if (sumsq) {
        double total = 0.0;
        for (int c = 0; c < SUM_CHUNKS; c++)
            total += part[c];
        *sumsq = total;
    }
    return CT_OK;
}

CT_HOT void ct_train_shard_scale(const ct_train_shard *sh, float scale) {
    float *grads = sh->seg[sh->rank];
    const int64_t lo = sh->bounds[sh->rank], hi = sh->bounds[sh->rank + 1];
    int nt = ct_threads_for(sh->ctx, hi - lo, 2);
    CT_OMP_FOR(nt)
    for (int64_t i = lo; i < hi; i++)
        grads[i] = grads[i] * scale;
}

CT_HOT void ct_train_shard_clamp(const ct_train_shard *sh, float clip) {
    float *grads = sh->seg[sh->rank];
    const int64_t lo = sh->bounds[sh->rank], hi = sh->bounds[sh->rank + 1];
    const float neg = -clip;
    int nt = ct_threads_for(sh->ctx, hi - lo, 2);
    CT_OMP_FOR(nt)
    for (int64_t i = lo; i < hi; i++) {
        float x = grads[i];
        grads[i] = x < neg ? neg : (x > clip ? clip : x); /* NaN stays, as clip_grad_value */
    }
}

ct_status ct_train_shard_gather(ct_train_shard *sh, float *weights) {
    const int64_t lo = sh->bounds[sh->rank], hi = sh->bounds[sh->rank + 1];
    memcpy(weights_of(sh, sh->rank), weights + lo, (size_t)(hi - lo) * sizeof(float));
    CT_TRY(ct_comm_shared_sync(sh->mem));
    for (int64_t k = 0; k < sh->world; k++) {
        if (k == sh->rank) continue;
        int64_t a = sh->bounds[k], b = sh->bounds[k + 1];
        memcpy(weights + a, weights_of(sh, k), (size_t)(b - a) * sizeof(float));
    }
    /* past the synchronisation no rank reads this rank's gradients any more: the parts that
       the others applied are zeroed for the next accumulation (the optimizer zeroes or the
       trainer clears this rank's own part) */
    float *grads = sh->seg[sh->rank];
    memset(grads, 0, (size_t)lo * sizeof(float));
    memset(grads + hi, 0, (size_t)(sh->n - hi) * sizeof(float));
    return CT_OK;
}

ct_status ct_train_shard_settle(ct_train_shard *sh) {
    return ct_comm_shared_sync(sh->mem);
}

ct_status ct_train_shard_share_buffer(ct_train_shard *sh, float *buf) {
    for (int64_t k = 0; k < sh->world; k++) {
        int64_t a = sh->bounds[k], b = sh->bounds[k + 1];
        CT_TRY(ct_comm_broadcast(sh->comm, buf + a, (size_t)(b - a) * sizeof(float), k));
    }
    return CT_OK;
}
