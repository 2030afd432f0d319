/*
 * config.c - the experiment-file tree: parsing YAML/JSON with libfyaml's event API into nodes
 * that keep their line and column, and Hydra-style overrides (the YAML writer is write.c).
 *
 * libfyaml's document API does not expose node positions in the version Debian 12 ships, so
 * the tree is built from parser events, whose start marks carry them.
 *
 * Ownership: the ct_config owns every node and string, all from the context's allocator;
 * ct_config_destroy frees them. Anchors live only during a parse.
 */
#include "ctrain/config.h"

#include "config/config_internal.h"

#include <ctype.h>
#include <errno.h>
#include <libfyaml.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define CFG_MAX_DEPTH   64
#define CFG_MAX_ANCHORS 256
#define CFG_MAX_NODES   100000 /* a file this big is not an experiment: aliases run wild */

struct ct_config {
    ct_ctx *ctx;
    char *name;
    ct_cfg_node *root;
};

static const char k_cmdline[] = "command line";

/* ---- nodes ---- */

char *ct_config_dup_n(ct_ctx *ctx, const char *s, size_t n) {
    char *d = ct_alloc(ctx, n + 1);
    if (!d) return NULL;
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

static char *dup_s(ct_ctx *ctx, const char *s) {
    return ct_config_dup_n(ctx, s, strlen(s));
}

static void free_s(ct_ctx *ctx, char *s) {
    if (s) ct_free(ctx, s, strlen(s) + 1);
}

static void free_node(ct_ctx *ctx, ct_cfg_node *n) {
    while (n) {
        ct_cfg_node *next = n->next;
        free_node(ctx, n->first);
        free_s(ctx, n->key);
        free_s(ctx, n->value);
        ct_free(ctx, n, sizeof *n);
        n = next;
    }
}

static ct_cfg_node *new_node(ct_ctx *ctx, ct_cfg_kind kind, const char *source, int line, int col) {
    ct_cfg_node *n = ct_alloc(ctx, sizeof *n);
    if (!n) return NULL;
    memset(n, 0, sizeof *n);
    n->kind = kind;
    n->source = source;
    n->line = line;
    n->col = col;
    return n;
}

static void append_child(ct_cfg_node *parent, ct_cfg_node *child) {
    child->parent = parent;
    child->next = NULL;
    if (!parent->first) {
        parent->first = child;
    } else {
        ct_cfg_node *c = parent->first;
        while (c->next)
            c = c->next;
        c->next = child;
    }
    parent->n_children++;
}

static ct_cfg_node *map_get(const ct_cfg_node *map, const char *key, size_t len) {
    for (ct_cfg_node *c = map->first; c; c = c->next)
        if (c->key && strlen(c->key) == len && memcmp(c->key, key, len) == 0) return c;
    return NULL;
}

/* A deep copy of src; the copy's source pointer is src's (a string the config outlives). */
static ct_cfg_node *copy_tree(ct_ctx *ctx, const ct_cfg_node *src, const char *source) {
    ct_cfg_node *n = new_node(ctx, src->kind, source ? source : src->source, src->line, src->col);
    if (!n) return NULL;
    n->quoted = src->quoted;
    n->null = src->null;
    if ((src->key && !(n->key = dup_s(ctx, src->key))) ||
        (src->value && !(n->value = dup_s(ctx, src->value)))) {
        free_node(ctx, n);
        return NULL;
    }
    for (const ct_cfg_node *c = src->first; c; c = c->next) {
        ct_cfg_node *cc = copy_tree(ctx, c, source);
        if (!cc) {
            free_node(ctx, n);
            return NULL;
        }
        append_child(n, cc);
    }
    return n;
}

bool ct_config_is_null_text(const char *s) {
    return s[0] == '\0' || strcmp(s, "~") == 0 || strcmp(s, "null") == 0 ||
           strcmp(s, "Null") == 0 || strcmp(s, "NULL") == 0;
}

/* ---- parsing ---- */

typedef struct parse_state {
    ct_ctx *ctx;
    const char *source;
    ct_cfg_node *root;
    ct_cfg_node *stack[CFG_MAX_DEPTH];
    int depth;
    /* in a map: the key waiting for its value */
    char *pending_key;
    int key_line, key_col;
    struct {
        char *name;
        ct_cfg_node *node;
    } anchors[CFG_MAX_ANCHORS];
    int n_anchors;
    int docs;
    int64_t nodes;
    const char *text; /* the source, for the spans of single-quoted scalars */
    size_t len;
} parse_state;

static ct_status perr(parse_state *ps, int line, int col, const char *fmt, ...) CT_PRINTF(4, 5);
static ct_status perr(parse_state *ps, int line, int col, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    (void)vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return CT_FAIL(ps->ctx, CT_ERR_CONFIG, "%s:%d:%d: %s", ps->source, line, col, msg);
}

static ct_status
add_anchor(parse_state *ps, struct fy_token *anchor, ct_cfg_node *n, int line, int col) {
    if (!anchor) return CT_OK;
    size_t len = 0;
    const char *txt = fy_token_get_text(anchor, &len);
    if (!txt) return CT_OK;
    if (ps->n_anchors == CFG_MAX_ANCHORS) return perr(ps, line, col, "more than 256 anchors");
    char *name = ct_config_dup_n(ps->ctx, txt, len);
    if (!name) return CT_FAIL(ps->ctx, CT_ERR_OOM, "%s: out of memory", ps->source);
    ps->anchors[ps->n_anchors].name = name;
    ps->anchors[ps->n_anchors].node = n;
    ps->n_anchors++;
    return CT_OK;
}

/* Places a finished or opened node: as the value of the pending key, a sequence item, or the
 * root. */
static ct_status place(parse_state *ps, ct_cfg_node *n) {
    if (ps->depth == 0) {
        if (ps->root) return perr(ps, n->line, n->col, "more than one root node");
        ps->root = n;
        return CT_OK;
    }
    ct_cfg_node *top = ps->stack[ps->depth - 1];
    if (top->kind == CT_CFG_MAP) {
        n->key = ps->pending_key;
        n->line = ps->key_line;
        n->col = ps->key_col;
        ps->pending_key = NULL;
    }
    append_child(top, n);
    return CT_OK;
}

/* Nodes in a subtree and its depth (1 for a scalar). */
static int64_t subtree_size(const ct_cfg_node *n, int *depth) {
    int64_t count = 1;
    int deepest = 0;
    for (const ct_cfg_node *c = n->first; c; c = c->next) {
        int d = 0;
        count += subtree_size(c, &d);
        if (d > deepest) deepest = d;
    }
    *depth = deepest + 1;
    return count;
}

static ct_status count_node(parse_state *ps, int64_t more, int line, int col) {
    ps->nodes += more;
    if (ps->nodes > CFG_MAX_NODES)
        return perr(ps, line, col, "more than %d nodes (aliases expanding without end?)",
                    CFG_MAX_NODES);
    return CT_OK;
}

static bool awaiting_key(const parse_state *ps) {
    return ps->depth > 0 && ps->stack[ps->depth - 1]->kind == CT_CFG_MAP && !ps->pending_key;
}

static ct_status on_scalar(parse_state *ps, struct fy_event *ev, int line, int col) {
    if (ev->scalar.tag)
        return perr(ps, line, col, "YAML tags are not supported (quote the value instead)");
    size_t len = 0;
    const char *txt = fy_token_get_text(ev->scalar.value, &len);
    if (!txt) {
        txt = "";
        len = 0;
    }
    enum fy_scalar_style style = fy_token_scalar_style(ev->scalar.value);
    bool quoted = style != FYSS_PLAIN;
    if (memchr(txt, '\0', len)) return perr(ps, line, col, "a scalar holds a NUL character");
    if (awaiting_key(ps)) {
        char *key = ct_config_dup_n(ps->ctx, txt, len);
        if (!key) return CT_FAIL(ps->ctx, CT_ERR_OOM, "%s: out of memory", ps->source);
        ct_cfg_node *map = ps->stack[ps->depth - 1];
        ct_status s = CT_OK;
        if (!quoted && strcmp(key, "<<") == 0)
            s = perr(ps, line, col, "merge keys (<<) are not supported");
        else if (!quoted && ct_config_is_null_text(key))
            s = perr(ps, line, col, "a null key");
        else if (key[0] == '\0')
            s = perr(ps, line, col, "an empty key");
        else if (map_get(map, key, len))
            s = perr(ps, line, col, "duplicate key '%s'", key);
        else if (strchr(key, '.'))
            s = perr(ps, line, col, "key '%s' holds a '.', which separates the parts of a path",
                     key);
        if (s != CT_OK) {
            free_s(ps->ctx, key);
            return s;
        }
        ps->pending_key = key;
        ps->key_line = line;
        ps->key_col = col;
        return CT_OK;
    }
    CT_TRY(count_node(ps, 1, line, col));
    ct_cfg_node *n = new_node(ps->ctx, CT_CFG_SCALAR, ps->source, line, col);
    if (!n || !(n->value = ct_config_dup_n(ps->ctx, txt, len))) {
        free_node(ps->ctx, n);
        return CT_FAIL(ps->ctx, CT_ERR_OOM, "%s: out of memory", ps->source);
    }
    n->quoted = quoted;
    n->null = !quoted && ct_config_is_null_text(n->value);
    ct_status s = place(ps, n);
    if (s != CT_OK) {
        free_node(ps->ctx, n);
        return s;
    }
    return add_anchor(ps, ev->scalar.anchor, n, line, col);
}

static ct_status on_alias(parse_state *ps, struct fy_event *ev, int line, int col) {
    if (awaiting_key(ps)) return perr(ps, line, col, "an alias as a key");
    size_t len = 0;
    const char *txt = fy_token_get_text(ev->alias.anchor, &len);
    const ct_cfg_node *target = NULL;
    for (int i = ps->n_anchors - 1; i >= 0 && txt; i--)
        if (strlen(ps->anchors[i].name) == len && memcmp(ps->anchors[i].name, txt, len) == 0) {
            target = ps->anchors[i].node;
            break;
        }
    if (!target) return perr(ps, line, col, "unknown anchor");
    for (int d = 0; d < ps->depth; d++)
        if (ps->stack[d] == target)
            return perr(ps, line, col, "an alias to an enclosing node (a cycle)");
    int depth = 0;
    CT_TRY(count_node(ps, subtree_size(target, &depth), line, col));
    if (ps->depth + depth > CFG_MAX_DEPTH)
        return perr(ps, line, col, "nesting deeper than %d (through an alias)", CFG_MAX_DEPTH);
    ct_cfg_node *n = copy_tree(ps->ctx, target, ps->source);
    if (!n) return CT_FAIL(ps->ctx, CT_ERR_OOM, "%s: out of memory", ps->source);
    n->line = line;
    n->col = col;
    free_s(ps->ctx, n->key);
    n->key = NULL;
    ct_status s = place(ps, n);
    if (s != CT_OK) free_node(ps->ctx, n);
    return s;
}

static ct_status on_collection_start(parse_state *ps, struct fy_event *ev, int line, int col) {
    bool map = ev->type == FYET_MAPPING_START;
    struct fy_token *tag = map ? ev->mapping_start.tag : ev->sequence_start.tag;
    struct fy_token *anchor = map ? ev->mapping_start.anchor : ev->sequence_start.anchor;
    if (tag) return perr(ps, line, col, "YAML tags are not supported");
    if (awaiting_key(ps)) return perr(ps, line, col, "a mapping or sequence used as a key");
    if (ps->depth == CFG_MAX_DEPTH) return perr(ps, line, col, "nesting deeper than 64");
    CT_TRY(count_node(ps, 1, line, col));
    ct_cfg_node *n = new_node(ps->ctx, map ? CT_CFG_MAP : CT_CFG_SEQ, ps->source, line, col);
    if (!n) return CT_FAIL(ps->ctx, CT_ERR_OOM, "%s: out of memory", ps->source);
    ct_status s = place(ps, n);
    if (s != CT_OK) {
        free_node(ps->ctx, n);
        return s;
    }
    ps->stack[ps->depth++] = n;
    return add_anchor(ps, anchor, n, line, col);
}

/* The parser's own diagnostics are collected; the first error becomes the message. */
static ct_status syntax_error(parse_state *ps, struct fy_diag *diag) {
    void *it = NULL;
    struct fy_diag_error *e;
    while ((e = fy_diag_errors_iterate(diag, &it)) != NULL) {
        if (e->type < FYET_ERROR) continue;
        return CT_FAIL(ps->ctx, CT_ERR_CONFIG, "%s:%d:%d: YAML syntax error: %s", ps->source,
                       e->line > 0 ? e->line : 1, e->column > 0 ? e->column : 1,
                       e->msg ? e->msg : "unknown");
    }
    return CT_FAIL(ps->ctx, CT_ERR_CONFIG, "%s: YAML syntax error", ps->source);
}

/* The offset of the first byte that breaks UTF-8 (overlong forms, surrogates and code points
 * past U+10FFFF included), or len when the text is valid. */
static size_t utf8_error_at(const unsigned char *s, size_t len) {
    size_t i = 0;
    while (i < len) {
        unsigned char c = s[i];
        size_t k = c < 0x80             ? 1
                   : (c & 0xe0) == 0xc0 ? 2
                   : (c & 0xf0) == 0xe0 ? 3
                   : (c & 0xf8) == 0xf0 ? 4
                                        : 0;
        if (k == 0 || i + k > len) return i;
        uint32_t cp = k == 1 ? c : k == 2 ? c & 0x1fu : k == 3 ? c & 0x0fu : c & 0x07u;
        for (size_t j = 1; j < k; j++) {
            if ((s[i + j] & 0xc0) != 0x80) return i;
            cp = cp << 6 | (s[i + j] & 0x3fu);
        }
        static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < min_cp[k] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return i;
        i += k;
    }
    return len;
}

/* Where a position in the text is, for messages. */
static void line_col(const char *text, size_t at, int *line, int *col) {
    *line = 1;
    *col = 1;
    for (size_t i = 0; i < at; i++) {
        if (text[i] == '\n') {
            (*line)++;
            *col = 1;
        } else {
            (*col)++;
        }
    }
}

/* The offset of the first four single quotes in a row, or len. libfyaml 0.7.12 misreads
 * (and leaks) runs of escaped quotes in single-quoted scalars ('x''''y' reads as x''', longer
 * runs as heap garbage; fixed upstream). Telling a single-quoted scalar from plain text needs
 * YAML's whole grammar (anchors, tags, flow and block contexts), which a lighter lexer gets
 * wrong somewhere, so any such run is refused, wherever it is: it is never needed (a
 * double-quoted value spells a quote \x27, which is how the writer writes them). */
static size_t quote_run_at(const char *t, size_t len) {
    for (size_t i = 0; i + 4 <= len; i++)
        if (t[i] == '\'' && t[i + 1] == '\'' && t[i + 2] == '\'' && t[i + 3] == '\'') return i;
    return len;
}

/* Refuses what libfyaml 0.7.12 is never given: text that is not UTF-8 (it can loop on a
 * directive followed by an invalid byte) or holds a run of four single quotes (see
 * quote_run_at); both fixed upstream. */
static ct_status check_text(parse_state *ps, const char *text, size_t len) {
    size_t run = quote_run_at(text, len);
    if (run < len) {
        int line, col;
        line_col(text, run, &line, &col);
        return CT_FAIL(ps->ctx, CT_ERR_CONFIG,
                       "%s:%d:%d: four single quotes in a row, which the YAML library of this "
                       "system misreads; write the value in double quotes, with \\x27 for each "
                       "quote",
                       ps->source, line, col);
    }
    size_t bad = utf8_error_at((const unsigned char *)text, len);
    if (bad < len) {
        int line, col;
        line_col(text, bad, &line, &col);
        return CT_FAIL(ps->ctx, CT_ERR_CONFIG, "%s:%d:%d: not UTF-8 text (byte 0x%02x)", ps->source,
                       line, col, (unsigned)(unsigned char)text[bad]);
    }
    return CT_OK;
}

/* Where an event starts, 1-based. libfyaml marks a quoted scalar after its quote and an alias
 * after its '*'; this is the quote's or the '*''s column. */
static void event_start(struct fy_event *ev, int *line, int *col) {
    const struct fy_mark *m = fy_event_start_mark(ev);
    *line = m ? m->line + 1 : 1;
    *col = m ? m->column + 1 : 1;
    if (*col > 1 && ((ev->type == FYET_SCALAR &&
                      (fy_token_scalar_style(ev->scalar.value) == FYSS_SINGLE_QUOTED ||
                       fy_token_scalar_style(ev->scalar.value) == FYSS_DOUBLE_QUOTED)) ||
                     ev->type == FYET_ALIAS))
        (*col)--;
}

static ct_status on_event(parse_state *ps, struct fy_event *ev, int line, int col) {
    switch (ev->type) {
    case FYET_DOCUMENT_START:
        if (++ps->docs > 1) return perr(ps, line, col, "more than one YAML document");
        return CT_OK;
    case FYET_SCALAR:
        return on_scalar(ps, ev, line, col);
    case FYET_ALIAS:
        return on_alias(ps, ev, line, col);
    case FYET_MAPPING_START:
    case FYET_SEQUENCE_START:
        return on_collection_start(ps, ev, line, col);
    case FYET_MAPPING_END:
    case FYET_SEQUENCE_END:
        if (ps->depth > 0) ps->depth--;
        return CT_OK;
    default:
        return CT_OK;
    }
}

/* Builds the tree from the parser's events until the stream ends or an event is refused. */
static ct_status run_events(parse_state *ps, struct fy_parser *fyp, struct fy_diag *diag) {
    for (;;) {
        struct fy_event *ev = fy_parser_parse(fyp);
        if (!ev) return fy_parser_get_stream_error(fyp) ? syntax_error(ps, diag) : CT_OK;
        int line, col;
        event_start(ev, &line, &col);
        ct_status s = on_event(ps, ev, line, col);
        fy_parser_event_free(fyp, ev);
        if (s != CT_OK) return s;
    }
}

/* A document with a root, a mapping where map_root asks for one. */
static ct_status check_root(parse_state *ps, bool map_root) {
    if (!ps->root)
        return CT_FAIL(ps->ctx, CT_ERR_CONFIG,
                       "%s: the file is empty (expected a mapping of settings)", ps->source);
    if (map_root && ps->root->kind != CT_CFG_MAP)
        return CT_FAIL(ps->ctx, CT_ERR_CONFIG,
                       "%s:%d:%d: expected a mapping of settings at the top", ps->source,
                       ps->root->line, ps->root->col);
    return CT_OK;
}

/* Frees what only the parse needed (the pending key, the anchors) and, when it failed, the
 * tree it had built. */
static void end_parse(parse_state *ps, ct_status s) {
    free_s(ps->ctx, ps->pending_key);
    ps->pending_key = NULL;
    for (int i = 0; i < ps->n_anchors; i++)
        free_s(ps->ctx, ps->anchors[i].name);
    ps->n_anchors = 0;
    if (s != CT_OK) {
        free_node(ps->ctx, ps->root);
        ps->root = NULL;
    }
}

static ct_status parse(parse_state *ps, const char *text, size_t len, bool map_root) {
    ps->text = text;
    ps->len = len;
    CT_TRY(check_text(ps, text, len));
    struct fy_diag_cfg dcfg;
    fy_diag_cfg_default(&dcfg);
    dcfg.fp = NULL;
    dcfg.colorize = false;
    struct fy_diag *diag = fy_diag_create(&dcfg);
    if (!diag) return CT_FAIL(ps->ctx, CT_ERR_OOM, "%s: cannot create the YAML parser", ps->source);
    fy_diag_set_collect_errors(diag, true);
    struct fy_parse_cfg pcfg = {NULL, FYPCF_QUIET | FYPCF_DISABLE_RECYCLING, NULL, diag};
    struct fy_parser *fyp = fy_parser_create(&pcfg);
    ct_status s;
    if (!fyp || fy_parser_set_string(fyp, text, len) != 0)
        s = CT_FAIL(ps->ctx, CT_ERR_OOM, "%s: cannot create the YAML parser", ps->source);
    else
        s = run_events(ps, fyp, diag);
    if (s == CT_OK) s = check_root(ps, map_root);
    fy_parser_destroy(fyp);
    fy_diag_destroy(diag);
    end_parse(ps, s);
    return s;
}

static ct_status make_config(ct_ctx *ctx, const char *name, ct_config **out) {
    ct_config *c = ct_alloc(ctx, sizeof *c);
    if (!c) return CT_FAIL(ctx, CT_ERR_OOM, "%s: out of memory", name);
    memset(c, 0, sizeof *c);
    c->ctx = ctx;
    if (!(c->name = dup_s(ctx, name))) {
        ct_free(ctx, c, sizeof *c);
        return CT_FAIL(ctx, CT_ERR_OOM, "%s: out of memory", name);
    }
    *out = c;
    return CT_OK;
}

ct_status ct_config_load_string(
    ct_ctx *ctx, const char *name, const char *text, size_t len, ct_config **out) {
    if (!out) return CT_FAIL(ctx, CT_ERR_INVALID_ARG, "ct_config_load_string: out is NULL");
    *out = NULL;
    if (!name || (!text && len > 0))
        return CT_FAIL(ctx, CT_ERR_INVALID_ARG, "ct_config_load_string: NULL name or text");
    ct_config *c = NULL;
    CT_TRY(make_config(ctx, name, &c));
    parse_state *ps = ct_alloc(ctx, sizeof *ps);
    if (!ps) {
        ct_config_destroy(c);
        return CT_FAIL(ctx, CT_ERR_OOM, "%s: out of memory", name);
    }
    memset(ps, 0, sizeof *ps);
    ps->ctx = ctx;
    ps->source = c->name;
    ct_status s = parse(ps, text ? text : "", len, true);
    c->root = ps->root;
    ct_free(ctx, ps, sizeof *ps);
    if (s != CT_OK) {
        ct_config_destroy(c);
        return s;
    }
    *out = c;
    return CT_OK;
}

ct_status ct_config_load_file(ct_ctx *ctx, const char *path, ct_config **out) {
    if (!out) return CT_FAIL(ctx, CT_ERR_INVALID_ARG, "ct_config_load_file: out is NULL");
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return CT_FAIL(ctx, CT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    /* fopen takes a directory on Linux, and the first read fails with EISDIR */
    struct stat st;
    if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
        (void)fclose(f);
        return CT_FAIL(ctx, CT_ERR_IO, "%s: cannot read: %s (expected an experiment file)", path,
                       strerror(EISDIR));
    }
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    ct_status s = CT_OK;
    int err = 0;
    while (buf) {
        errno = 0;
        size_t got = fread(buf + len, 1, cap - len, f);
        if (got < cap - len && ferror(f)) err = errno;
        len += got;
        if (got == 0) break;
        if (len == cap) {
            if (cap >= (size_t)64 << 20) {
                s = CT_FAIL(ctx, CT_ERR_CONFIG, "%s: larger than 64 MiB: not an experiment file",
                            path);
                break;
            }
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
    }
    if (s == CT_OK && !buf) s = CT_FAIL(ctx, CT_ERR_OOM, "%s: out of memory", path);
    if (s == CT_OK && ferror(f))
        s = CT_FAIL(ctx, CT_ERR_IO, "%s: cannot read: %s", path,
                    err ? strerror(err) : "a read error");
    (void)fclose(f);
    if (s == CT_OK) s = ct_config_load_string(ctx, path, buf, len, out);
    free(buf);
    return s;
}

ct_status ct_config_create_empty(ct_ctx *ctx, const char *name, ct_config **out) {
    *out = NULL;
    ct_config *c = NULL;
    CT_TRY(make_config(ctx, name, &c));
    if (!(c->root = new_node(ctx, CT_CFG_MAP, c->name, 1, 1))) {
        ct_config_destroy(c);
        return CT_FAIL(ctx, CT_ERR_OOM, "%s: out of memory", name);
    }
    *out = c;
    return CT_OK;
}

void ct_config_destroy(ct_config *cfg) {
    if (!cfg) return;
    ct_ctx *ctx = cfg->ctx;
    free_node(ctx, cfg->root);
    free_s(ctx, cfg->name);
    ct_free(ctx, cfg, sizeof *cfg);
}

ct_cfg_node *ct_config_root(const ct_config *cfg) {
    return cfg->root;
}

const char *ct_config_name(const ct_config *cfg) {
    return cfg->name;
}

ct_ctx *ct_config_ctx(const ct_config *cfg) {
    return cfg->ctx;
}

/* ---- paths ---- */

static ct_cfg_node *child_by_segment(const ct_cfg_node *n, const char *seg, size_t len) {
    if (n->kind == CT_CFG_MAP) return map_get(n, seg, len);
    if (n->kind != CT_CFG_SEQ || len == 0 || len > 9) return NULL;
    int64_t idx = 0;
    for (size_t i = 0; i < len; i++) {
        if (!isdigit((unsigned char)seg[i])) return NULL;
        idx = idx * 10 + (seg[i] - '0');
    }
    ct_cfg_node *c = n->first;
    for (int64_t i = 0; c && i < idx; i++)
        c = c->next;
    return c;
}

ct_cfg_node *ct_config_find(const ct_cfg_node *from, const char *path) {
    const ct_cfg_node *n = from;
    const char *p = path;
    while (n && *p) {
        const char *dot = strchr(p, '.');
        size_t len = dot ? (size_t)(dot - p) : strlen(p);
        n = child_by_segment(n, p, len);
        if (!dot) break;
        p = dot + 1;
    }
    return (ct_cfg_node *)(uintptr_t)n;
}

void ct_config_path(const ct_cfg_node *node, char *buf, size_t size) {
    if (size == 0) return;
    const ct_cfg_node *chain[CFG_MAX_DEPTH + 2];
    int k = 0;
    for (const ct_cfg_node *n = node; n && n->parent && k < CFG_MAX_DEPTH + 2; n = n->parent)
        chain[k++] = n;
    size_t at = 0;
    buf[0] = '\0';
    for (int i = k - 1; i >= 0; i--) {
        const ct_cfg_node *n = chain[i];
        char idx[24];
        const char *seg = n->key;
        if (!seg) {
            int64_t j = 0;
            for (const ct_cfg_node *c = n->parent->first; c && c != n; c = c->next)
                j++;
            (void)snprintf(idx, sizeof idx, "%lld", (long long)j);
            seg = idx;
        }
        int w = snprintf(buf + at, size - at, "%s%s", at ? "." : "", seg);
        if (w < 0 || (size_t)w >= size - at) return;
        at += (size_t)w;
    }
}

/* ---- editing ---- */

void ct_config_remove(ct_config *cfg, ct_cfg_node *node) {
    ct_cfg_node *p = node->parent;
    if (!p) return;
    ct_cfg_node **link = &p->first;
    while (*link && *link != node)
        link = &(*link)->next;
    if (*link) {
        *link = node->next;
        p->n_children--;
    }
    node->next = NULL;
    free_node(cfg->ctx, node);
}

ct_status ct_config_copy_into(
    ct_config *cfg, ct_cfg_node *dst, const char *key, const ct_cfg_node *src, ct_cfg_node **out) {
    ct_ctx *ctx = cfg->ctx;
    ct_cfg_node *n = copy_tree(ctx, src, NULL);
    if (!n) return CT_FAIL(ctx, CT_ERR_OOM, "%s: out of memory", cfg->name);
    free_s(ctx, n->key);
    n->key = NULL;
    if (key && !(n->key = dup_s(ctx, key))) {
        free_node(ctx, n);
        return CT_FAIL(ctx, CT_ERR_OOM, "%s: out of memory", cfg->name);
    }
    append_child(dst, n);
    if (out) *out = n;
    return CT_OK;
}

/* Parses an override's value as YAML (any root); an empty value is a null scalar. */
static ct_status parse_value(ct_config *cfg, const char *text, ct_cfg_node **out) {
    ct_ctx *ctx = cfg->ctx;
    if (text[0] == '\0') {
        *out = new_node(ctx, CT_CFG_SCALAR, k_cmdline, 0, 0);
        if (!*out || !((*out)->value = dup_s(ctx, ""))) {
            free_node(ctx, *out);
            return CT_FAIL(ctx, CT_ERR_OOM, "override: out of memory");
        }
        (*out)->null = true;
        return CT_OK;
    }
    parse_state *ps = ct_alloc(ctx, sizeof *ps);
    if (!ps) return CT_FAIL(ctx, CT_ERR_OOM, "override: out of memory");
    memset(ps, 0, sizeof *ps);
    ps->ctx = ctx;
    ps->source = k_cmdline;
    ct_status s = parse(ps, text, strlen(text), false);
    *out = ps->root;
    ct_free(ctx, ps, sizeof *ps);
    return s;
}

static void mark_cmdline(ct_cfg_node *n) {
    for (; n; n = n->next) {
        n->source = k_cmdline;
        n->line = 0;
        n->col = 0;
        mark_cmdline(n->first);
    }
}

/* A plain scalar read as a number (a finite double and nothing after it), for same_value. */
static bool plain_number(const ct_cfg_node *n, double *x) {
    if (n->quoted || n->null || !n->value[0] || isspace((unsigned char)n->value[0])) return false;
    char *end = NULL;
    *x = strtod(n->value, &end);
    return *end == '\0' && isfinite(*x);
}

/* Equal YAML values, for ~key=value: the same kinds, keys and order; scalars with the same
 * text (a quoted number is text: '0.5' is not 0.5) or plain numbers of the same value (0.1 and
 * 1e-1); nulls only equal to nulls. */
static bool same_value(const ct_cfg_node *a, const ct_cfg_node *b) {
    if (a->kind != b->kind || a->n_children != b->n_children) return false;
    if (a->kind == CT_CFG_SCALAR) {
        double x = 0, y = 0;
        if (a->null || b->null) return a->null && b->null;
        bool na = plain_number(a, &x), nb = plain_number(b, &y);
        if (strcmp(a->value, b->value) == 0) return na == nb; /* '0.5' is text, 0.5 a number */
        return na && nb && x == y;
    }
    for (const ct_cfg_node *ca = a->first, *cb = b->first; ca && cb; ca = ca->next, cb = cb->next)
        if ((a->kind == CT_CFG_MAP && strcmp(ca->key, cb->key) != 0) || !same_value(ca, cb))
            return false;
    return true;
}

/* A node's value for a message: a scalar's text, else what it is. */
static const char *shown_value(const ct_cfg_node *n) {
    if (n->kind == CT_CFG_MAP) return "a mapping";
    if (n->kind == CT_CFG_SEQ) return "a list";
    return n->null ? "null" : n->value;
}

/* What an override does, by its prefix. */
typedef enum override_op {
    OVERRIDE_REPLACE, /* key=value: the key must be there */
    OVERRIDE_ADD,     /* +key=value: the key must not be there */
    OVERRIDE_FORCE,   /* ++key=value: either way */
    OVERRIDE_DELETE   /* ~key, ~key=value: the key goes (only when it holds that value) */
} override_op;

enum { OVERRIDE_KEY_MAX = 512 };

/* The operation an override's prefix asks for; *p moves past the prefix. */
static override_op read_op(const char **p) {
    if (strncmp(*p, "++", 2) == 0) {
        *p += 2;
        return OVERRIDE_FORCE;
    }
    if ((*p)[0] == '+') {
        (*p)++;
        return OVERRIDE_ADD;
    }
    if ((*p)[0] == '~') {
        (*p)++;
        return OVERRIDE_DELETE;
    }
    return OVERRIDE_REPLACE;
}

/* Copies the key path of arg (from p to eq or the end) into path (OVERRIDE_KEY_MAX bytes) and
 * checks it: not empty, UTF-8, no empty segment, no space, '=', '+' or '~'. */
static ct_status
read_path(ct_ctx *ctx, const char *arg, const char *p, const char *eq, char *path) {
    size_t klen = eq ? (size_t)(eq - p) : strlen(p);
    if (klen == 0 || klen >= OVERRIDE_KEY_MAX)
        return CT_FAIL(ctx, CT_ERR_CONFIG, "override '%s': empty or overlong key", arg);
    memcpy(path, p, klen);
    path[klen] = '\0';
    if (utf8_error_at((const unsigned char *)path, klen) < klen)
        return CT_FAIL(ctx, CT_ERR_CONFIG, "override '%s': the key is not UTF-8 text", arg);
    for (size_t i = 0; i < klen; i++) {
        unsigned char ch = (unsigned char)path[i];
        bool empty_seg = ch == '.' && (i == 0 || i + 1 == klen || path[i + 1] == '.');
        if (empty_seg || isspace(ch) || ch == '=' || ch == '+' || ch == '~')
            return CT_FAIL(ctx, CT_ERR_CONFIG, "override '%s': bad key path '%s'", arg, path);
    }
    return CT_OK;
}

/* Walks the section path (segments separated by '.') from the root, making the missing maps on
 * the way; *out is the deepest node reached. The walk stops early at a node that is not a map
 * (the caller says why), leaving path cut at the segment that was missing. */
static ct_status make_sections(ct_config *cfg, char *path, ct_cfg_node **out) {
    ct_ctx *ctx = cfg->ctx;
    ct_cfg_node *parent = cfg->root;
    char *seg = path;
    while (seg) {
        char *dot = strchr(seg, '.');
        if (dot) *dot = '\0';
        ct_cfg_node *c = child_by_segment(parent, seg, strlen(seg));
        if (!c) {
            if (parent->kind != CT_CFG_MAP) break;
            c = new_node(ctx, CT_CFG_MAP, k_cmdline, 0, 0);
            if (!c || !(c->key = dup_s(ctx, seg))) {
                free_node(ctx, c);
                return CT_FAIL(ctx, CT_ERR_OOM, "override: out of memory");
            }
            append_child(parent, c);
        }
        parent = c;
        if (dot) *dot = '.';
        seg = dot ? dot + 1 : NULL;
    }
    *out = parent;
    return CT_OK;
}

/* The node that holds the path's last segment (*leaf, pointing into path): the root, or the
 * section before the last '.', made on the way for + and ++. *parent is NULL when that section
 * is missing; a value where a section should be is an error. */
static ct_status find_parent(ct_config *cfg,
                             const char *arg,
                             override_op op,
                             char *path,
                             ct_cfg_node **parent,
                             const char **leaf) {
    char *last = strrchr(path, '.');
    *parent = cfg->root;
    *leaf = path;
    if (!last) return CT_OK;
    *last = '\0';
    *leaf = last + 1;
    *parent = ct_config_find(cfg->root, path);
    if (!*parent && (op == OVERRIDE_ADD || op == OVERRIDE_FORCE))
        CT_TRY(make_sections(cfg, path, parent));
    if (*parent && (*parent)->kind == CT_CFG_SCALAR)
        return CT_FAIL(cfg->ctx, CT_ERR_CONFIG, "override '%s': '%s' is a value, not a section",
                       arg, path);
    *last = '.';
    return CT_OK;
}

/* ~key, or ~key=value with v its parsed value: removes the key when it is there (and holds
 * that value). Takes v. */
static ct_status delete_key(ct_config *cfg,
                            const char *arg,
                            const char *path,
                            const char *eq,
                            ct_cfg_node *existing,
                            ct_cfg_node *v) {
    ct_status s = CT_OK;
    if (!existing)
        s = CT_FAIL(cfg->ctx, CT_ERR_CONFIG, "override '%s': key '%s' is not in %s", arg, path,
                    cfg->name);
    else if (v && !same_value(existing, v)) /* Hydra's ~key=value: only that value goes */
        s = CT_FAIL(cfg->ctx, CT_ERR_CONFIG,
                    "override '%s': key '%s' is %s in %s, not %s; nothing was deleted", arg, path,
                    shown_value(existing), cfg->name, eq[1] ? eq + 1 : "an empty value (null)");
    free_node(cfg->ctx, v);
    if (s == CT_OK) ct_config_remove(cfg, existing);
    return s;
}

/* Refuses what the operation does not allow: replacing a key that is not there, adding one
 * that is, or a key where none can go (a missing section, a list). */
static ct_status check_target(ct_config *cfg,
                              const char *arg,
                              const char *path,
                              override_op op,
                              const ct_cfg_node *parent,
                              const ct_cfg_node *existing) {
    if (op == OVERRIDE_REPLACE && !existing)
        return CT_FAIL(cfg->ctx, CT_ERR_CONFIG,
                       "override '%s': key '%s' is not in %s (to add it, write +%s)", arg, path,
                       cfg->name, arg);
    if (op == OVERRIDE_ADD && existing)
        return CT_FAIL(cfg->ctx, CT_ERR_CONFIG,
                       "override '%s': key '%s' is already set (to replace it, write %s)", arg,
                       path, arg + 1);
    if (!parent || (parent->kind != CT_CFG_MAP && !existing))
        return CT_FAIL(cfg->ctx, CT_ERR_CONFIG, "override '%s': cannot add '%s' there", arg, path);
    return CT_OK;
}

/* Puts v (taken) in place of existing, keeping its position among its siblings, or else under
 * parent as key leaf. */
static ct_status put_value(
    ct_config *cfg, ct_cfg_node *parent, ct_cfg_node *existing, const char *leaf, ct_cfg_node *v) {
    ct_ctx *ctx = cfg->ctx;
    mark_cmdline(v);
    if (existing) {
        v->key = existing->key;
        existing->key = NULL;
        v->parent = existing->parent;
        v->next = existing->next;
        ct_cfg_node **link = &parent->first;
        while (*link != existing)
            link = &(*link)->next;
        *link = v;
        existing->next = NULL;
        free_node(ctx, existing);
        return CT_OK;
    }
    if (!(v->key = dup_s(ctx, leaf))) {
        ct_status s = CT_FAIL(ctx, CT_ERR_OOM, "override: out of memory");
        free_node(ctx, v);
        return s;
    }
    append_child(parent, v);
    return CT_OK;
}

ct_status ct_config_override(ct_config *cfg, const char *arg) {
    ct_ctx *ctx = cfg->ctx;
    const char *p = arg;
    override_op op = read_op(&p);
    const char *eq = strchr(p, '=');
    if (op != OVERRIDE_DELETE && !eq)
        return CT_FAIL(ctx, CT_ERR_CONFIG,
                       "override '%s': expected key=value, +key=value, ++key=value or ~key", arg);
    char path[OVERRIDE_KEY_MAX];
    CT_TRY(read_path(ctx, arg, p, eq, path));
    /* the value first: a value that does not parse changes nothing (for a deletion, ~key=value,
       it is the value the key must hold) */
    ct_cfg_node *v = NULL;
    if (eq && parse_value(cfg, eq + 1, &v) != CT_OK) return ct_err_wrap(ctx, "override '%s'", arg);
    ct_cfg_node *parent;
    const char *leaf;
    ct_status s = find_parent(cfg, arg, op, path, &parent, &leaf);
    ct_cfg_node *existing =
        s == CT_OK && parent ? child_by_segment(parent, leaf, strlen(leaf)) : NULL;
    if (s == CT_OK && op == OVERRIDE_DELETE) return delete_key(cfg, arg, path, eq, existing, v);
    if (s == CT_OK) s = check_target(cfg, arg, path, op, parent, existing);
    if (s == CT_OK) return put_value(cfg, parent, existing, leaf, v);
    free_node(ctx, v);
    return s;
}

ct_status ct_config_set(ct_config *cfg, const char *path, const char *value, bool quoted) {
    ct_ctx *ctx = cfg->ctx;
    ct_cfg_node *n = ct_config_find(cfg->root, path);
    if (!n) {
        char arg[600];
        (void)snprintf(arg, sizeof arg, "++%s=", path);
        CT_TRY(ct_config_override(cfg, arg));
        n = ct_config_find(cfg->root, path);
        if (!n) return CT_FAIL(ctx, CT_ERR_INTERNAL, "ct_config_set: '%s' not made", path);
    }
    if (n->kind != CT_CFG_SCALAR)
        return CT_FAIL(ctx, CT_ERR_CONFIG, "%s: '%s' is a section, not a value", cfg->name, path);
    char *v = dup_s(ctx, value);
    if (!v) return CT_FAIL(ctx, CT_ERR_OOM, "%s: out of memory", cfg->name);
    free_s(ctx, n->value);
    n->value = v;
    n->quoted = quoted;
    n->null = !quoted && ct_config_is_null_text(v);
    return CT_OK;
}
