/*
 * accum.c - gradient-accumulation windows: consecutive runs of accum_steps micro-batches from
 * the start of each epoch, the last one cut at the epoch's end and keeping its real length, so
 * that each micro-batch loss is divided by the number of batches actually accumulated.
 * Pure arithmetic; no state (the position follows from the batch index).
 */
#include <string.h>

#include "ctrain/policy.h"
#include "train/train_internal.h"

ct_status ct_accum_window(
    ct_ctx *ctx, int64_t batches_per_epoch, int64_t accum_steps, int64_t i, ct_accum_pos *out) {
    memset(out, 0, sizeof *out);
    if (batches_per_epoch < 1 || accum_steps < 1 || i < 0 || i >= batches_per_epoch)
        return CT_FAIL(ctx, CT_ERR_INVALID_ARG,
                       "accumulation window of batch %lld with %lld batches per epoch and "
                       "accum_steps %lld; expected 0 <= batch < batches per epoch, both >= 1",
                       (long long)i, (long long)batches_per_epoch, (long long)accum_steps);
    int64_t start = i / accum_steps * accum_steps;
    int64_t rest = batches_per_epoch - start;
    out->start = start;
    out->length = rest < accum_steps ? rest : accum_steps;
    out->index = i - start;
    out->last = out->index == out->length - 1;
    return CT_OK;
}
