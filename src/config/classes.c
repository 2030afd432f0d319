/*
 * classes.c - the class names a configuration gives (data.classes): a list of names, or the
 * path of a text file with one name per line. The experiment checks them when it is created;
 * the report reads them back from a run's config.yaml to label its confusion matrices, so the
 * reading and its rules (no empty name, no name twice) live here, below both.
 *
 * Ownership: a list's names point into the configuration's nodes (valid while it lives); a
 * file's into text held by the result. ct_config_classes_fini frees what the result holds.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "config/config_internal.h"

#define MAX_FILE (16u << 20)

/* "FILE:L:C: key 'KEY': " for node n, into buf. */
static void key_where(const ct_cfg_node *n, const char *key, char *buf, size_t size) {
    if (n->line > 0)
        (void)snprintf(buf, size, "%s:%d:%d: key '%s': ", n->source, n->line, n->col, key);
    else
        (void)snprintf(buf, size, "%s: key '%s': ", n->source, key);
}

/* The file's text, NUL-terminated, into out->text. */
static ct_status read_text(ct_ctx *ctx, const char *at, const char *path, ct_config_classes *out) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return CT_FAIL(ctx, CT_ERR_CONFIG,
                       "%s%s: cannot open: %s; expected a text file with one "
                       "class name per line",
                       at, path, strerror(errno));
    out->text_size = MAX_FILE + 1;
    out->text = ct_alloc(ctx, out->text_size);
    if (!out->text) {
        (void)fclose(f);
        return CT_FAIL(ctx, CT_ERR_OOM, "%s%s: out of memory", at, path);
    }
    size_t n = fread(out->text, 1, MAX_FILE, f);
    bool err = ferror(f) != 0, more = !err && n == MAX_FILE && fgetc(f) != EOF;
    (void)fclose(f);
    if (err) return CT_FAIL(ctx, CT_ERR_IO, "%s%s: read failed", at, path);
    if (more) return CT_FAIL(ctx, CT_ERR_CONFIG, "%s%s: more than 16 MiB of class names", at, path);
    out->text[n] = '\0';
    if (memchr(out->text, '\0', n))
        return CT_FAIL(ctx, CT_ERR_CONFIG, "%s%s: a NUL byte; expected a text file", at, path);
    return CT_OK;
}

/* Splits the text into lines (a last newline ends the last name; "\r\n" ends a line too). */
static ct_status
split_lines(ct_ctx *ctx, const char *at, const char *path, ct_config_classes *out) {
    int64_t lines = 0;
    for (const char *p = out->text; *p; p++)
        lines += *p == '\n' || !p[1];
    out->names = ct_alloc(ctx, sizeof(char *) * (size_t)(lines + 1));
    if (!out->names) return CT_FAIL(ctx, CT_ERR_OOM, "%s%s: out of memory", at, path);
    out->names_size = sizeof(char *) * (size_t)(lines + 1);
    for (char *p = out->text; *p;) {
        char *nl = strchr(p, '\n'), *end = nl ? nl : p + strlen(p);
        if (end > p && end[-1] == '\r') end--;
        *end = '\0';
        if (!p[0])
            return CT_FAIL(ctx, CT_ERR_CONFIG,
                           "%s%s:%lld: an empty line; expected one class name per line", at, path,
                           (long long)out->n + 1);
        out->names[out->n++] = p;
        if (!nl) break;
        p = nl + 1;
    }
    if (out->n == 0)
        return CT_FAIL(ctx, CT_ERR_CONFIG, "%s%s: no class names; expected one per line", at, path);
    return CT_OK;
}

static ct_status
read_list(ct_ctx *ctx, const char *at, const ct_cfg_node *n, ct_config_classes *out) {
    if (n->n_children == 0)
        return CT_FAIL(ctx, CT_ERR_CONFIG, "%sno names; expected a list of class names", at);
    out->names_size = sizeof(char *) * (size_t)n->n_children;
    out->names = ct_alloc(ctx, out->names_size);
    if (!out->names) return CT_FAIL(ctx, CT_ERR_OOM, "%sout of memory", at);
    for (const ct_cfg_node *it = n->first; it; it = it->next) {
        if (it->kind != CT_CFG_SCALAR || it->null || !it->value[0])
            return CT_FAIL(ctx, CT_ERR_CONFIG, "%sclass %lld's name is %s; expected text", at,
                           (long long)out->n, it->kind != CT_CFG_SCALAR ? "not text" : "empty");
        out->names[out->n++] = it->value;
    }
    return CT_OK;
}

ct_status
ct_config_classes_read(ct_ctx *ctx, const ct_cfg_node *n, const char *key, ct_config_classes *out) {
    memset(out, 0, sizeof *out);
    char at[700];
    key_where(n, key, at, sizeof at);
    ct_status s;
    if (n->kind == CT_CFG_SEQ) {
        s = read_list(ctx, at, n, out);
    } else if (n->kind == CT_CFG_SCALAR && !n->null && n->value[0]) {
        s = read_text(ctx, at, n->value, out);
        if (s == CT_OK) s = split_lines(ctx, at, n->value, out);
    } else {
        s = CT_FAIL(ctx, CT_ERR_CONFIG,
                    "%sexpected a list of class names or the path of a file of them", at);
    }
    for (int64_t i = 0; s == CT_OK && i < out->n; i++)
        for (int64_t j = 0; j < i; j++)
            if (strcmp(out->names[i], out->names[j]) == 0) {
                s = CT_FAIL(ctx, CT_ERR_CONFIG,
                            "%sclasses %lld and %lld are both named '%s'; each class needs a "
                            "name of its own",
                            at, (long long)j, (long long)i, out->names[i]);
                break;
            }
    if (s != CT_OK) ct_config_classes_fini(ctx, out);
    return s;
}

void ct_config_classes_fini(ct_ctx *ctx, ct_config_classes *c) {
    ct_free(ctx, c->names, c->names_size);
    ct_free(ctx, c->text, c->text_size);
    memset(c, 0, sizeof *c);
}
