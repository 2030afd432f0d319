/*
 * policy_common.c - the option reader shared by the policies for copied names.
 * Nothing here allocates; names are copied into caller-provided fixed-size arrays.
 */
#include <stdio.h>
#include <string.h>

#include "train/train_internal.h"

ct_status ct_train_name(ct_ctx *ctx,
                        const ct_options *opts,
                        const char *key,
                        const char *fallback,
                        char *out,
                        size_t cap) {
    const char *v;
    CT_TRY(ct_options_string(ctx, opts, key, fallback, &v));
    size_t len = strlen(v);
    if (len == 0)
        return CT_FAIL(ctx, CT_ERR_CONFIG, "%s: key '%s': expected a metric name, got ''",
                       ct_options_where(opts, "options"), key);
    if (len >= cap)
        return CT_FAIL(ctx, CT_ERR_CONFIG,
                       "%s: key '%s': the name is %zu bytes long, at most %zu are kept",
                       ct_options_where(opts, "options"), key, len, cap - 1);
    memcpy(out, v, len + 1);
    return CT_OK;
}
