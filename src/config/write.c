/*
 * write.c - the YAML writer of experiment-file trees (ct_config_write, ct_config_to_string):
 * block style, two-space indents, a mapping in a list starting on the line of its "-", scalars
 * plain where they read back as the same text and otherwise double-quoted, so that what it
 * writes parses to the same tree.
 *
 * Ownership: it writes to the caller's stream; ct_config_to_string's text is the caller's,
 * from the context's allocator.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config_internal.h"
#include "ctrain/config.h"

static bool plain_safe(const char *s, bool is_key) {
    if (s[0] == '\0') return false;
    /* "-", "?" and ":" start a plain scalar when a non-space follows (YAML 1.2, 7.3.3) */
    bool indicator_ok = strchr("-?:", s[0]) && s[1] != '\0' && s[1] != ' ' && s[1] != '\t';
    if (strchr("-?:,[]{}#&*!|>'\"%@` \t", s[0]) && !indicator_ok) return false;
    if (is_key && strcmp(s, "<<") == 0) return false; /* would read back as a merge key */
    if ((!strncmp(s, "---", 3) || !strncmp(s, "...", 3)) &&
        (s[3] == '\0' || s[3] == ' ' || s[3] == '\t'))
        return false; /* a document marker at the start of a line */
    if (strncmp(s, "\xef\xbb\xbf", 3) == 0) return false; /* U+FEFF: a byte-order mark */
    size_t n = strlen(s);
    if (s[n - 1] == ' ' || s[n - 1] == ':') return false;
    for (const char *p = s; *p; p++) {
        unsigned char c = (unsigned char)*p;
        if (c < 0x20 || c == 0x7f) return false;
        if (c == ':' && p[1] == ' ') return false;
        if (c == '#' && p > s && p[-1] == ' ') return false;
        if (is_key && strchr(",[]{}", c)) return false;
        /* quotes are written inside double quotes, where parse's check for runs of escaped
           single quotes never looks */
        if (c == '\'') return false;
    }
    return true;
}

static void write_quoted(FILE *f, const char *s) {
    (void)fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '"':
            (void)fputs("\\\"", f);
            break;
        case '\\':
            (void)fputs("\\\\", f);
            break;
        case '\'': /* quotes next to quotes as \x27: parse refuses four in a row */
            if (p[1] == '\'' || (p > (const unsigned char *)s && p[-1] == '\''))
                (void)fputs("\\x27", f);
            else
                (void)fputc('\'', f);
            break;
        case '\n':
            (void)fputs("\\n", f);
            break;
        case '\t':
            (void)fputs("\\t", f);
            break;
        case '\r':
            (void)fputs("\\r", f);
            break;
        default:
            if (*p < 0x20 || *p == 0x7f)
                (void)fprintf(f, "\\x%02x", *p);
            else
                (void)fputc(*p, f);
        }
    }
    (void)fputc('"', f);
}

static void write_scalar(FILE *f, const ct_cfg_node *n) {
    if (n->null)
        (void)fputs("null", f);
    else if (n->quoted || !plain_safe(n->value, false) || ct_config_is_null_text(n->value))
        write_quoted(f, n->value);
    else
        (void)fputs(n->value, f);
}

static void write_key(FILE *f, const char *k) {
    if (plain_safe(k, true) && !ct_config_is_null_text(k))
        (void)fputs(k, f);
    else
        write_quoted(f, k);
}

/* first_inline: the first entry goes on the current line, after a sequence's "- ", as in
 * "- type: dense", rather than on a line of its own below a lone "-". */
static void write_node(FILE *f, const ct_cfg_node *n, int indent, bool first_inline);

/* The value after "key:". */
static void write_value(FILE *f, const ct_cfg_node *v, int indent) {
    if (v->kind == CT_CFG_SCALAR) {
        (void)fputc(' ', f);
        write_scalar(f, v);
        (void)fputc('\n', f);
    } else if (v->n_children == 0) {
        (void)fputs(v->kind == CT_CFG_MAP ? " {}\n" : " []\n", f);
    } else {
        (void)fputc('\n', f);
        write_node(f, v, indent + 2, false);
    }
}

static void write_node(FILE *f, const ct_cfg_node *n, int indent, bool first_inline) {
    for (const ct_cfg_node *c = n->first; c; c = c->next) {
        if (!(first_inline && c == n->first)) (void)fprintf(f, "%*s", indent, "");
        if (n->kind == CT_CFG_MAP) {
            write_key(f, c->key);
            (void)fputc(':', f);
            write_value(f, c, indent);
        } else if (c->kind != CT_CFG_SCALAR && c->n_children > 0) {
            (void)fputs("- ", f);
            write_node(f, c, indent + 2, true);
        } else {
            (void)fputc('-', f);
            write_value(f, c, indent);
        }
    }
}

ct_status ct_config_write(const ct_config *cfg, FILE *f) {
    const ct_cfg_node *root = ct_config_root(cfg);
    if (root->n_children == 0)
        (void)fputs("{}\n", f);
    else
        write_node(f, root, 0, false);
    if (ferror(f))
        return CT_FAIL(ct_config_ctx(cfg), CT_ERR_IO, "writing the configuration failed");
    return CT_OK;
}

ct_status ct_config_to_string(const ct_config *cfg, char **out, size_t *len) {
    ct_ctx *ctx = ct_config_ctx(cfg);
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    if (!f) return CT_FAIL(ctx, CT_ERR_OOM, "writing the configuration: out of memory");
    ct_status s = ct_config_write(cfg, f);
    if (fclose(f) != 0 && s == CT_OK)
        s = CT_FAIL(ctx, CT_ERR_OOM, "writing the configuration: out of memory");
    if (s == CT_OK) {
        *out = ct_config_dup_n(ctx, buf, n);
        *len = n;
        if (!*out) s = CT_FAIL(ctx, CT_ERR_OOM, "writing the configuration: out of memory");
    }
    free(buf);
    return s;
}
