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

#endif /* CT_TRAIN_INTERNAL_H */
