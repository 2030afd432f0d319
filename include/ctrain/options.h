/*
 * options.h - key=value options, the form in which a configuration section reaches the parts
 * it configures (datasets, schedules, metrics, layers), and typed readers whose errors name the
 * location, the key, what was found and what was expected:
 *     "exp.yaml: data.train: key 'limit': expected an integer, got 'abc'"
 *
 * Ownership: a ct_options borrows its items and strings; nothing here allocates.
 */
#ifndef CTRAIN_OPTIONS_H
#define CTRAIN_OPTIONS_H

#include <stdbool.h>

#include "ctrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ct_option {
    const char *key;
    const char *value;
} ct_option;

/* A borrowed list of options; `where` prefixes error messages ("exp.yaml: data.train"). */
typedef struct ct_options {
    const ct_option *items;
    int64_t count;
    const char *where;
} ct_options;

/* ---- typed readers, with errors naming the location and the key ---- */

/* The value of key, or NULL. */
CT_API const char *ct_options_get(const ct_options *opts, const char *key);
/* Fails with CT_ERR_CONFIG when a key is not in the NULL-terminated list `known`. */
CT_API ct_status ct_options_check(ct_ctx *ctx, const ct_options *opts, const char *const *known);
CT_API ct_status ct_options_string(ct_ctx *ctx,
                                   const ct_options *opts,
                                   const char *key,
                                   const char *fallback, /* NULL: the key is required */
                                   const char **out);
CT_API ct_status ct_options_int(ct_ctx *ctx,
                                const ct_options *opts,
                                const char *key,
                                int64_t fallback,
                                int64_t lo,
                                int64_t hi,
                                int64_t *out);
CT_API ct_status ct_options_double(ct_ctx *ctx,
                                   const ct_options *opts,
                                   const char *key,
                                   double fallback,
                                   double lo,
                                   double hi,
                                   double *out);
CT_API ct_status
ct_options_bool(ct_ctx *ctx, const ct_options *opts, const char *key, bool fallback, bool *out);

#ifdef __cplusplus
}
#endif

#endif /* CTRAIN_OPTIONS_H */
