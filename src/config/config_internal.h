/*
 * config_internal.h - what config.c (the parser, the tree and overrides) shares with write.c
 * (the YAML writer). Not installed; not part of the API.
 */
#ifndef CT_CONFIG_INTERNAL_H
#define CT_CONFIG_INTERNAL_H

#include "core/core_internal.h"
#include "ctrain/config.h"

/* A NUL-terminated copy of n bytes of s from the context's allocator (n + 1 bytes), or NULL. */
CT_INTERNAL char *ct_config_dup_n(ct_ctx *ctx, const char *s, size_t n);
/* Whether a plain scalar's text is YAML's null: empty, `~`, `null`, `Null` or `NULL`. */
CT_INTERNAL bool ct_config_is_null_text(const char *s);

/* The class names a configuration gives (data.classes): names[0..n) in class order. */
typedef struct ct_config_classes {
    const char **names;
    int64_t n;
    size_t names_size;
    char *text; /* a file's text, which its names point into; NULL for a list */
    size_t text_size;
} ct_config_classes;
/* The names at node n (`key` names it in messages): a list of names, or the path of a text
 * file with one name per line. An empty name, a name given twice or a file that cannot be read
 * is CT_ERR_CONFIG "FILE:L:C: key 'KEY': ..." (and *out holds nothing). */
CT_INTERNAL ct_status ct_config_classes_read(ct_ctx *ctx,
                                             const ct_cfg_node *n,
                                             const char *key,
                                             ct_config_classes *out);
CT_INTERNAL void ct_config_classes_fini(ct_ctx *ctx, ct_config_classes *c);

#endif /* CT_CONFIG_INTERNAL_H */
