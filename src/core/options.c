/*
 * options.c - typed readers over key=value options (strtoll/strtod with end-pointer and range
 * checks: no silent fallbacks), with errors naming the location and the key.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core_internal.h"
#include "ctrain/options.h"

const char *ct_options_where(const ct_options *opts, const char *fallback) {
    return opts && opts->where ? opts->where : fallback;
}

const char *ct_options_get(const ct_options *opts, const char *key) {
    if (!opts) return NULL;
    for (int64_t i = 0; i < opts->count; i++)
        if (strcmp(opts->items[i].key, key) == 0) return opts->items[i].value;
    return NULL;
}

ct_status ct_options_check(ct_ctx *ctx, const ct_options *opts, const char *const *known) {
    if (!opts) return CT_OK;
    for (int64_t i = 0; i < opts->count; i++) {
        const char *k = opts->items[i].key;
        bool found = false;
        for (const char *const *kn = known; *kn && !found; kn++)
            found = strcmp(*kn, k) == 0;
        if (!found) {
            if (!known[0])
                return CT_FAIL(ctx, CT_ERR_CONFIG, "%s: unknown key '%s' (it takes no options)",
                               ct_options_where(opts, "options"), k);
            ct_unknown u;
            ct_unknown_init(&u, k);
            for (const char *const *kn = known; *kn; kn++)
                ct_unknown_add(&u, *kn);
            return CT_FAIL_UNKNOWN(ctx, &u, ct_options_where(opts, "options"), "key");
        }
    }
    return CT_OK;
}

ct_status ct_options_string(
    ct_ctx *ctx, const ct_options *opts, const char *key, const char *fallback, const char **out) {
    const char *v = ct_options_get(opts, key);
    if (!v && !fallback)
        return CT_FAIL(ctx, CT_ERR_CONFIG, "%s: key '%s' is required",
                       ct_options_where(opts, "options"), key);
    *out = v ? v : fallback;
    return CT_OK;
}

ct_status ct_options_int(ct_ctx *ctx,
                         const ct_options *opts,
                         const char *key,
                         int64_t fallback,
                         int64_t lo,
                         int64_t hi,
                         int64_t *out) {
    const char *v = ct_options_get(opts, key);
    if (!v) {
        *out = fallback;
        return CT_OK;
    }
    char *end = NULL;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (end == v || *end != '\0' || errno == ERANGE)
        return CT_FAIL(ctx, CT_ERR_CONFIG, "%s: key '%s': expected an integer, got '%s'",
                       ct_options_where(opts, "options"), key, v);
    if (x < lo || x > hi)
        return CT_FAIL(ctx, CT_ERR_CONFIG, "%s: key '%s': %lld is out of range [%lld, %lld]",
                       ct_options_where(opts, "options"), key, x, (long long)lo, (long long)hi);
    *out = (int64_t)x;
    return CT_OK;
}

ct_status ct_options_double(ct_ctx *ctx,
                            const ct_options *opts,
                            const char *key,
                            double fallback,
                            double lo,
                            double hi,
                            double *out) {
    const char *v = ct_options_get(opts, key);
    if (!v) {
        *out = fallback;
        return CT_OK;
    }
    char *end = NULL;
    errno = 0;
    double x = strtod(v, &end);
    if (end == v || *end != '\0' || errno == ERANGE || !isfinite(x))
        return CT_FAIL(ctx, CT_ERR_CONFIG, "%s: key '%s': expected a number, got '%s'",
                       ct_options_where(opts, "options"), key, v);
    if (x < lo || x > hi)
        return CT_FAIL(ctx, CT_ERR_CONFIG, "%s: key '%s': %g is out of range [%g, %g]",
                       ct_options_where(opts, "options"), key, x, lo, hi);
    *out = x;
    return CT_OK;
}

ct_status ct_options_choice(
    ct_ctx *ctx, const ct_options *opts, const char *key, const char *const *values, int64_t *out) {
    const char *v;
    CT_TRY(ct_options_string(ctx, opts, key, values[0], &v));
    for (int64_t i = 0; values[i]; i++)
        if (strcmp(v, values[i]) == 0) {
            *out = i;
            return CT_OK;
        }
    char list[128];
    size_t off = 0;
    list[0] = '\0';
    for (int64_t i = 0; values[i] && off < sizeof list; i++)
        off += (size_t)snprintf(list + off, sizeof list - off, "%s%s", i ? ", " : "", values[i]);
    return CT_FAIL(ctx, CT_ERR_CONFIG, "%s: key '%s': unknown value '%s' (expected one of: %s)",
                   ct_options_where(opts, "options"), key, v, list);
}

ct_status
ct_options_bool(ct_ctx *ctx, const ct_options *opts, const char *key, bool fallback, bool *out) {
    const char *v = ct_options_get(opts, key);
    if (!v) {
        *out = fallback;
        return CT_OK;
    }
    if (!strcmp(v, "true") || !strcmp(v, "1") || !strcmp(v, "yes")) {
        *out = true;
    } else if (!strcmp(v, "false") || !strcmp(v, "0") || !strcmp(v, "no")) {
        *out = false;
    } else {
        return CT_FAIL(ctx, CT_ERR_CONFIG, "%s: key '%s': expected true or false, got '%s'",
                       ct_options_where(opts, "options"), key, v);
    }
    return CT_OK;
}
