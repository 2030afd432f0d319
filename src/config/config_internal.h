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

#endif /* CT_CONFIG_INTERNAL_H */
