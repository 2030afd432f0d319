/*
 * train_internal.h - helpers shared by the trainer module's files (the option reader for
 * names). Not installed; not part of the API.
 */
#ifndef CT_TRAIN_INTERNAL_H
#define CT_TRAIN_INTERNAL_H

#include "core/core_internal.h"
#include "ctrain/dist.h"
#include "ctrain/options.h"

/* Copies the string option key (fallback when absent) into out[cap]; a longer value or an
 * empty one is a CT_ERR_CONFIG. */
CT_INTERNAL ct_status ct_train_name(ct_ctx *ctx,
                                    const ct_options *opts,
                                    const char *key,
                                    const char *fallback,
                                    char *out,
                                    size_t cap);

/* buf[i] /= divisor for i < n (the mean of summed gradients, a division as
 * ct_comm_allreduce_mean_f32's), and, when ok is not NULL, *ok = no inf or NaN in the result:
 * ct_nonfinite_check's answer in the same pass over the buffer (nonfinite.c). */
CT_INTERNAL void ct_train_divide_check(ct_ctx *ctx, float *buf, int64_t n, float divisor, bool *ok);

/* The sharded optimizer update over shared memory (shard.c): a rank's part [lo, hi) of the
 * flat buffers of n floats. Creating and destroying (collective) are collective calls, and so
 * are reduce and gather, made by every rank once per step. */
typedef struct ct_train_shard ct_train_shard;
CT_INTERNAL ct_status ct_train_shard_create(ct_ctx *ctx,
                                            ct_comm *comm,
                                            int64_t n,
                                            ct_train_shard **out);
CT_INTERNAL void ct_train_shard_destroy(ct_train_shard *sh, bool collective);
CT_INTERNAL void
ct_train_shard_bounds(const ct_train_shard *sh, int64_t rank, int64_t *lo, int64_t *hi);
/* This rank's gradient segment (n floats), to bind as the store's gradients
 * (ct_params_bind_grads): the others read it. */
CT_INTERNAL float *ct_train_shard_grads(const ct_train_shard *sh);
/* Waits for every rank's gradients, then sets the segment's [lo, hi) to the mean over ranks
 * (summed in rank order); *ok (if not NULL): no inf or NaN in this rank's part; *sumsq (if not
 * NULL): the sum of that part's squares, in double, the same bits for any thread count. */
CT_INTERNAL ct_status ct_train_shard_reduce(ct_train_shard *sh, bool *ok, double *sumsq);
/* The segment's [lo, hi) *= scale. */
CT_INTERNAL void ct_train_shard_scale(const ct_train_shard *sh, float scale);
/* The segment's [lo, hi) clamped to [-clip, clip] (ct_optim_clip_grad_value on the part). */
CT_INTERNAL void ct_train_shard_clamp(const ct_train_shard *sh, float clip);
/* After the update: publishes weights[lo, hi), copies every other rank's part into weights
 * and zeroes the segment outside [lo, hi). */
CT_INTERNAL ct_status ct_train_shard_gather(ct_train_shard *sh, float *weights);
/* Instead of gather when the update is skipped: waits until no rank reads this one's
 * gradients, which may then be cleared. */
CT_INTERNAL ct_status ct_train_shard_settle(ct_train_shard *sh);
/* Every rank's part of buf (n floats) to every rank: an optimizer moment made whole. */
CT_INTERNAL ct_status ct_train_shard_share_buffer(ct_train_shard *sh, float *buf);

#endif /* CT_TRAIN_INTERNAL_H */
