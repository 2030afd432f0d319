/*
 * config.h - experiment files as a tree of nodes that remember where they came from: YAML (and
 * so JSON) parsed with libfyaml, command-line overrides in Hydra's grammar, and a YAML writer.
 *
 * The tree holds text only: every scalar is its source text (plus whether it was quoted), and
 * the schema (experiment.h) decides what is a number, a flag or a name. Each node keeps its
 * source (the file name, or "command line" for an override) and its 1-based line and column,
 * so that every later error can say "exp.yaml:12:5: key 'optimizer.lr': ...".
 *
 * Ownership: a ct_config owns all its nodes and strings; nodes are valid until the config is
 * destroyed or an override removes or replaces them, and a scalar's value string until
 * ct_config_set gives it another. It keeps the context it was made with, which must
 * outlive it.
 */
#ifndef CTRAIN_CONFIG_H
#define CTRAIN_CONFIG_H

#include <stdio.h>

#include "ctrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ct_cfg_kind {
    CT_CFG_SCALAR = 0, /* text, possibly empty; `null`, `~` and an empty value are null */
    CT_CFG_MAP,        /* keys unique, in source order */
    CT_CFG_SEQ,
    CT_CFG_KIND_COUNT
} ct_cfg_kind;

typedef struct ct_cfg_node {
    ct_cfg_kind kind;
    char *key;          /* the key in a map; NULL for a sequence item or the root */
    char *value;        /* a scalar's text; NULL for maps and sequences */
    bool quoted;        /* a quoted scalar: a string, never a number or null */
    bool null;          /* a plain null scalar (`null`, `~`, or nothing) */
    const char *source; /* the file's name, or "command line" */
    int32_t line, col;  /* 1-based start of the node (of its key, in a map) */
    struct ct_cfg_node *parent, *first, *next;
    int64_t n_children;
} ct_cfg_node;

typedef struct ct_config ct_config;

/* Parses a YAML or JSON file holding one mapping. A syntax error is CT_ERR_CONFIG with
 * "file:line:col: " and the parser's message; a file that cannot be opened or read (missing,
 * a directory, ...) CT_ERR_IO with the system's reason; a duplicate key, an empty file, more
 * than one document or a non-mapping root CT_ERR_CONFIG. Anchors and aliases are expanded (an
 * alias is a copy); a merge key (<<) or a tag is an error. */
CT_API ct_status ct_config_load_file(ct_ctx *ctx, const char *path, ct_config **out);
/* The same for text in memory; `name` stands for the file in messages. */
CT_API ct_status
ct_config_load_string(ct_ctx *ctx, const char *name, const char *text, size_t len, ct_config **out);
/* A config holding an empty mapping (to build one by overrides). */
CT_API ct_status ct_config_create_empty(ct_ctx *ctx, const char *name, ct_config **out);
CT_API void ct_config_destroy(ct_config *cfg);

CT_API ct_cfg_node *ct_config_root(const ct_config *cfg);
CT_API const char *ct_config_name(const ct_config *cfg);
/* The context the config was made with. */
CT_API ct_ctx *ct_config_ctx(const ct_config *cfg);

/* The node at a dotted path under `from` ("optimizer.lr"; a sequence item by its index:
 * "metrics.valid.0"), or NULL. */
CT_API ct_cfg_node *ct_config_find(const ct_cfg_node *from, const char *path);
/* The path of a node ("optimizer.lr", "metrics.valid.1") into buf, truncated to fit. */
CT_API void ct_config_path(const ct_cfg_node *node, char *buf, size_t size);

/*
 * Applies one override in Hydra's grammar:
 *     key.path=value    replaces an existing key (an error naming `+` when it is missing)
 *     +key.path=value   adds a key the config lacks (an error when it exists), making maps on
 *                       the way
 *     ++key.path=value  sets it whether or not it exists
 *     ~key.path         deletes a key (an error when it is missing)
 * The value is YAML: `lr=3e-4`, `name="001"` (quoted: a string), `hidden=[256,128]`,
 * `ema={decay: 0.99}`. Errors: CT_ERR_CONFIG naming the override and the problem.
 */
CT_API ct_status ct_config_override(ct_config *cfg, const char *arg);

/* Sets a scalar at a path (made when missing), as `++path=value` with a plain value. */
CT_API ct_status ct_config_set(ct_config *cfg, const char *path, const char *value, bool quoted);
/* Appends a copy of `src` (a subtree of any config) to the map or sequence `dst` under `key`
 * (NULL for a sequence item). */
CT_API ct_status ct_config_copy_into(
    ct_config *cfg, ct_cfg_node *dst, const char *key, const ct_cfg_node *src, ct_cfg_node **out);
/* Removes a node (and its subtree) from its parent. */
CT_API void ct_config_remove(ct_config *cfg, ct_cfg_node *node);

/* Writes the tree as block-style YAML that ct_config_load_* reads back to the same tree
 * (strings that would read as something else are double-quoted). */
CT_API ct_status ct_config_write(const ct_config *cfg, FILE *f);
/* The same YAML as a string (ct_alloc'd; free with ct_free(ctx, s, *len + 1)). */
CT_API ct_status ct_config_to_string(const ct_config *cfg, char **out, size_t *len);

#ifdef __cplusplus
}
#endif

#endif /* CTRAIN_CONFIG_H */
