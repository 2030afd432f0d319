/*
 * paths.c - the paths an experiment names, made absolute when it is resolved.
 *
 * One rule for every path an experiment names: a relative path written in a file is taken
 * from that file's folder, one given on the command line from the current directory (as any
 * command-line argument), and resolving makes them absolute. So the resolved configuration,
 * the run's config.yaml, means the same from any directory. A plugin named without a '/' is a
 * library name that dlopen(3) looks up in its own folders, and is left alone. The paths are
 * the values of `output_dir`, `data.classes` (when it names a file), `decode.prompts_file`,
 * `model.init_from` (or its `path`), every `plugin`, and a built-in dataset type's path keys
 * (ct_dataset_vtable path_keys); a plugin's own options are handed over as written.
 *
 * Ownership: the paths made absolute replace their text in the config (ct_config_set); nothing
 * here keeps memory past a call.
 */
#define _XOPEN_SOURCE 700 /* realpath(3), which POSIX.1-2008 without XSI does not declare */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/core_internal.h"
#include "ctrain/data.h"
#include "experiment_internal.h"

#define MAX_PATH_TEXT 8192

/* The folder a node's relative paths start from, into buf: the current directory, or the
 * node's file's folder as realpath(3) gives it, so that the same file names the same paths
 * whichever directory it was given from ("../exp.yaml", "exp.yaml"). */
static ct_status base_of(ct_ctx *ctx, const ct_cfg_node *n, char *buf, size_t size) {
    char cwd[4096];
    if (!getcwd(cwd, sizeof cwd))
        return CT_FAIL(ctx, CT_ERR_IO, "cannot find the current directory: %s", strerror(errno));
    const char *file = n->line > 0 ? n->source : NULL; /* else the command line */
    const char *slash = file ? strrchr(file, '/') : NULL;
    int w;
    if (!slash) {
        w = snprintf(buf, size, "%s", cwd);
    } else {
        char dir[4096];
        w = snprintf(dir, sizeof dir, "%.*s", slash == file ? 1 : (int)(slash - file), file);
        char *real = w >= 0 && (size_t)w < sizeof dir ? realpath(dir, NULL) : NULL;
        if (real) /* else a name that is no file's (a config made in memory) */
            w = snprintf(buf, size, "%s", real);
        else if (dir[0] == '/')
            w = snprintf(buf, size, "%s", dir);
        else
            w = snprintf(buf, size, "%s/%s", cwd, dir);
        free(real);
    }
    if (w < 0 || (size_t)w >= size)
        return CT_FAIL(ctx, CT_ERR_CONFIG, "%s: its folder's path is too long", file ? file : cwd);
    return CT_OK;
}

/* Appends path, made absolute from base, to out[*at..]: "./x" and "x" give "BASE/x", and each
 * leading "../" takes the last folder off BASE (BASE holds no symbolic link, so that is the
 * folder "BASE/.." names). */
static bool join_path(const char *base, const char *path, size_t len, char *out, size_t *at) {
    if (!len || path[0] == '/') {
        int w = snprintf(out + *at, MAX_PATH_TEXT - *at, "%.*s", (int)len, path);
        if (w < 0 || (size_t)w >= MAX_PATH_TEXT - *at) return false;
        *at += (size_t)w;
        return true;
    }
    size_t blen = strlen(base);
    for (;;) {
        size_t skip = len >= 2 && !strncmp(path, "./", 2) ? 2 : 0;
        if (len >= 3 && !strncmp(path, "../", 3) && blen > 1) {
            while (blen > 1 && base[blen - 1] != '/')
                blen--;
            if (blen > 1) blen--; /* the slash, unless it is the root */
            skip = 3;
        }
        if (!skip) break;
        path += skip;
        len -= skip;
        while (len && path[0] == '/')
            path++, len--;
    }
    int w = snprintf(out + *at, MAX_PATH_TEXT - *at, "%.*s%s%.*s", (int)blen, base,
                     blen == 1 && base[0] == '/' ? "" : "/", (int)len, path);
    if (w < 0 || (size_t)w >= MAX_PATH_TEXT - *at) return false;
    *at += (size_t)w;
    return true;
}

/* How a scalar's text names paths. */
typedef enum path_kind {
    PATH_ONE = 0, /* the whole text */
    PATH_LIST,    /* comma-separated paths (a dataset's `files`) */
    PATH_PLUGIN   /* a path, or a bare library name that dlopen(3) looks up */
} path_kind;

/* A scalar holding paths made absolute in place (the node keeps its position for later
 * messages). */
static ct_status absolute(ct_ctx *ctx, ct_config *cfg, const ct_cfg_node *n, path_kind kind) {
    if (!n || n->kind != CT_CFG_SCALAR || n->null || !n->value[0]) return CT_OK;
    if (kind == PATH_PLUGIN && !strchr(n->value, '/')) return CT_OK;
    const char *sep = kind == PATH_LIST ? "," : "";
    bool relative = false;
    for (const char *p = n->value; *p; p += strcspn(p, sep), p += *p == ',')
        relative = relative || (p[0] != '/' && !(sep[0] && p[0] == ','));
    if (!relative) return CT_OK;
    char base[4096], path[512];
    CT_TRY(base_of(ctx, n, base, sizeof base));
    char *out = ct_alloc(ctx, MAX_PATH_TEXT);
    if (!out) return CT_FAIL(ctx, CT_ERR_OOM, "%s: out of memory", ct_config_name(cfg));
    size_t at = 0;
    bool ok = true;
    for (const char *p = n->value; ok; p++) {
        size_t len = strcspn(p, sep);
        ok = join_path(base, p, len, out, &at);
        p += len;
        if (!*p) break;
        ok = ok && at + 1 < MAX_PATH_TEXT;
        if (ok) out[at++] = ',';
    }
    ct_config_path(n, path, sizeof path);
    ct_status s = ok ? ct_config_set(cfg, path, out, n->quoted)
                     : ct_exp_key_error(ctx, n, path, "the path made absolute is too long");
    ct_free(ctx, out, MAX_PATH_TEXT);
    return s;
}

/* A dataset's path option: a path, or a list of them (in YAML, or with commas for `files`). */
static ct_status absolute_all(ct_ctx *ctx, ct_config *cfg, const ct_cfg_node *n) {
    path_kind kind = strcmp(n->key ? n->key : "", "files") == 0 ? PATH_LIST : PATH_ONE;
    if (n->kind != CT_CFG_SEQ) return absolute(ctx, cfg, n, kind);
    for (const ct_cfg_node *it = n->first; it; it = it->next)
        CT_TRY(absolute(ctx, cfg, it, PATH_ONE));
    return CT_OK;
}

/* Every `plugin` in the tree under n. */
static ct_status absolute_plugins(ct_ctx *ctx, ct_config *cfg, const ct_cfg_node *n) {
    for (const ct_cfg_node *c = n->first; c; c = c->next) {
        if (c->key && strcmp(c->key, "plugin") == 0)
            CT_TRY(absolute(ctx, cfg, c, PATH_PLUGIN));
        else if (c->kind != CT_CFG_SCALAR)
            CT_TRY(absolute_plugins(ctx, cfg, c));
    }
    return CT_OK;
}

ct_status ct_exp_resolve_paths(ct_ctx *ctx, ct_config *cfg) {
    ct_cfg_node *root = ct_config_root(cfg);
    CT_TRY(absolute(ctx, cfg, ct_config_find(root, "output_dir"), PATH_ONE));
    CT_TRY(absolute_plugins(ctx, cfg, root));
    CT_TRY(absolute(ctx, cfg, ct_config_find(root, "data.classes"), PATH_ONE));
    CT_TRY(absolute(ctx, cfg, ct_config_find(root, "decode.prompts_file"), PATH_ONE));
    static const char *const splits[] = {"data.train", "data.valid", "data.test"};
    for (int i = 0; i < 3; i++) {
        const ct_cfg_node *d = ct_config_find(root, splits[i]);
        bool builtin = d && d->kind == CT_CFG_MAP && !ct_config_find(d, "plugin");
        const ct_cfg_node *t = builtin ? ct_config_find(d, "type") : NULL;
        const ct_dataset_vtable *vt =
            t && t->kind == CT_CFG_SCALAR ? ct_dataset_type_find(t->value) : NULL;
        const char *const *keys = vt ? vt->path_keys : NULL;
        for (; keys && *keys; keys++) {
            const ct_cfg_node *k = ct_config_find(d, *keys);
            if (k) CT_TRY(absolute_all(ctx, cfg, k));
        }
    }
    const ct_cfg_node *init = ct_config_find(root, "model.init_from");
    if (init && init->kind == CT_CFG_MAP) init = ct_config_find(init, "path");
    return absolute(ctx, cfg, init, PATH_ONE);
}
