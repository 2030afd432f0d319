/*
 * train_internal.h - helpers shared by the trainer module's files (option readers for enum
 * choices and names). Not installed; not part of the API.
 */
#ifndef CT_TRAIN_INTERNAL_H
#define CT_TRAIN_INTERNAL_H

#include "core/core_internal.h"
#include "ctrain/options.h"

/* The value of key, one of the NULL-terminated `values` (values[0] when absent); *out is its
 * index. An unknown value is a CT_ERR_CONFIG listing the accepted ones. */
CT_INTERNAL ct_status ct_train_choice(
    ct_ctx *ctx, const ct_options *opts, const char *key, const char *const *values, int64_t *out);
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

#endif /* CT_TRAIN_INTERNAL_H */
