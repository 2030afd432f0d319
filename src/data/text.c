/*
 * text.c - language-modelling windows over a token stream: the "text" type (bytes of one or
 * more text files, concatenated in order; vocab 256) and the "tokens" type (a binary file of
 * little-endian uint16 token ids).
 *
 * Sample i is the window starting at token i * stride: x i64 [context] the tokens there, y i64
 * [context] the tokens one position later. n = (len - 1 - context) / stride + 1, so every target
 * lies inside the stream. The text type's examples for decoding are window i's first half
 * (prompt) and second half (reference). Invariant: every token is < n_classes (checked at open for
 * tokens). Ownership: the dataset owns the stream's bytes, as read (tokens are decoded on access,
 * so the host's byte order does not matter).
 */
#include <stdio.h>
#include <string.h>

#include "data/data_internal.h"

#define TEXT_MAX_BYTES   ((size_t)1 << 34) /* all files of a "text" dataset, decompressed */
#define TOKENS_MAX_BYTES ((size_t)1 << 34) /* a "tokens" file, decompressed */
#define MAX_CONTEXT      ((int64_t)1 << 24)

typedef struct windows {
    unsigned char *data; /* the stream (owned) */
    size_t size;         /* bytes in data */
    int64_t width;       /* bytes per token: 1 (text) or 2 (uint16 tokens) */
    int64_t len;         /* tokens in the stream */
    int64_t context, stride;
} windows;

static int64_t token_at(const windows *w, int64_t k) {
    const unsigned char *p = w->data + k * w->width;
    return w->width == 1 ? (int64_t)p[0] : (int64_t)((unsigned)p[0] | (unsigned)p[1] << 8);
}

static ct_status windows_get(const void *self, int64_t i, void *x, void *y) {
    const windows *w = self;
    int64_t *xs = x, *ys = y;
    int64_t start = i * w->stride;
    for (int64_t t = 0; t < w->context; t++) {
        xs[t] = token_at(w, start + t);
        ys[t] = token_at(w, start + t + 1);
    }
    return CT_OK;
}

/* The text type's examples: window i's first half (at least one byte) and its second. */
static int64_t text_n_examples(const void *self) {
    const windows *w = self;
    return (w->len - 1 - w->context) / w->stride + 1;
}

static ct_status text_example(const void *self, int64_t i, ct_text_example *out) {
    const windows *w = self;
    size_t half = (size_t)(w->context + 1) / 2;
    const char *start = (const char *)w->data + i * w->stride;
    out->prompt = start;
    out->prompt_len = half;
    out->reference = start + half;
    out->reference_len = (size_t)w->context - half;
    return CT_OK;
}

static void windows_close(ct_ctx *ctx, void *self) {
    windows *w = self;
    if (!w) return;
    ct_free(ctx, w->data, w->size);
    ct_free(ctx, w, sizeof *w);
}

/* Reads context and stride, the options both types share. */
static ct_status
window_options(ct_ctx *ctx, const ct_options *opts, int64_t *context, int64_t *stride) {
    CT_TRY(ct_options_int(ctx, opts, "context", -1, 1, MAX_CONTEXT, context));
    if (*context < 0)
        return CT_FAIL(ctx, CT_ERR_CONFIG, "%s: key 'context' is required",
                       ct_options_where(opts, "data"));
    return ct_options_int(ctx, opts, "stride", *context, 1, INT64_MAX, stride);
}

/* Takes ownership of data (freed on failure too), checks the length and fills info. */
static ct_status windows_make(ct_ctx *ctx,
                              unsigned char *data,
                              size_t size,
                              int64_t width,
                              int64_t context,
                              int64_t stride,
                              int64_t n_classes,
                              const char *what,
                              ct_dataset_info *info,
                              void **self) {
    CT_ASSERT(width >= 1 && context >= 1 && stride >= 1); /* the option ranges ensure it */
    int64_t len = (int64_t)(size / (size_t)width);
    if (len <= context) {
        ct_free(ctx, data, size);
        return CT_FAIL(ctx, CT_ERR_FORMAT,
                       "%s %lld %s, need at least context + 1 = %lld (lower context or add data)",
                       what, (long long)len, width == 1 ? "bytes" : "tokens",
                       (long long)context + 1);
    }
    windows *w = ct_alloc(ctx, sizeof *w);
    if (!w) {
        ct_free(ctx, data, size);
        return CT_FAIL(ctx, CT_ERR_OOM, "allocating a windows dataset");
    }
    w->data = data;
    w->size = size;
    w->width = width;
    w->len = len;
    w->context = context;
    w->stride = stride;
    info->n = (len - 1 - context) / stride + 1;
    info->x_dtype = CT_I64;
    info->x_ndim = 1;
    info->x_shape[0] = context;
    info->y_dtype = CT_I64;
    info->y_ndim = 1;
    info->y_shape[0] = context;
    info->n_classes = n_classes;
    *self = w;
    return CT_OK;
}

/* ---- text: bytes of files concatenated ---- */

typedef struct part {
    unsigned char *data;
    size_t size;
} part;

/* The option keys, and those that name files (ct_dataset_vtable keys, path_keys). */
static const char *const text_keys[] = {"files", "context", "stride", NULL};
static const char *const text_path_keys[] = {"files", NULL};

static ct_status
text_open(ct_ctx *ctx, const ct_options *opts, ct_dataset_info *info, void **self) {
    *self = NULL;
    const char *files;
    int64_t context = 0, stride = 0;
    CT_TRY(ct_options_check(ctx, opts, text_keys));
    CT_TRY(ct_options_string(ctx, opts, "files", NULL, &files));
    CT_TRY(window_options(ctx, opts, &context, &stride));

    /* a writable copy of the list, split in place into NUL-terminated paths */
    size_t list_bytes = strlen(files) + 1;
    int64_t n_files = 1;
    for (const char *p = files; *p; p++)
        n_files += *p == ',';
    char *list = ct_alloc(ctx, list_bytes);
    part *parts = ct_alloc(ctx, (size_t)n_files * sizeof(part));
    if (!list || !parts) {
        ct_free(ctx, list, list_bytes);
        ct_free(ctx, parts, (size_t)n_files * sizeof(part));
        return CT_FAIL(ctx, CT_ERR_OOM, "allocating a list of %lld files", (long long)n_files);
    }
    memcpy(list, files, list_bytes);
    memset(parts, 0, (size_t)n_files * sizeof(part));
    ct_status s = CT_OK;
    size_t total = 0;
    char *p = list;
    for (int64_t i = 0; i < n_files && s == CT_OK; i++) {
        char *end = strchr(p, ',');
        if (end) *end = '\0';
        while (*p == ' ')
            p++;
        for (char *e = p + strlen(p); e > p && e[-1] == ' ';)
            *--e = '\0';
        if (!*p)
            s = CT_FAIL(ctx, CT_ERR_CONFIG, "%s: key 'files': empty path at position %lld in '%s'",
                        ct_options_where(opts, "data"), (long long)i + 1, files);
        else if (info) /* text_check (no info) reads the list only */
            s = ct_data_read_file(ctx, p, TEXT_MAX_BYTES - total, &parts[i].data, &parts[i].size);
        if (s != CT_OK) parts[i] = (part){NULL, 0};
        total += parts[i].size;
        p = end ? end + 1 : p;
    }
    unsigned char *data = NULL;
    if (s == CT_OK && n_files == 1) {
        data = parts[0].data; /* one file: keep its buffer */
        parts[0].data = NULL;
        parts[0].size = 0;
    } else if (s == CT_OK && total > 0) {
        data = ct_alloc(ctx, total);
        if (!data) s = CT_FAIL(ctx, CT_ERR_OOM, "allocating %zu bytes of text", total);
        size_t off = 0;
        for (int64_t i = 0; s == CT_OK && i < n_files; off += parts[i].size, i++)
            if (parts[i].size) memcpy(data + off, parts[i].data, parts[i].size);
    }
    for (int64_t i = 0; i < n_files; i++)
        ct_free(ctx, parts[i].data, parts[i].size);
    ct_free(ctx, parts, (size_t)n_files * sizeof(part));
    ct_free(ctx, list, list_bytes);
    if (s != CT_OK || !info) return s;
    char what[320];
    (void)snprintf(what, sizeof what, "%s '%.256s' %s", n_files == 1 ? "file" : "files", files,
                   n_files == 1 ? "holds" : "hold");
    return windows_make(ctx, data, total, 1, context, stride, 256, what, info, self);
}

static ct_status text_check(ct_ctx *ctx, const ct_options *opts) {
    void *none;
    return text_open(ctx, opts, NULL, &none);
}

const ct_dataset_vtable ct_dataset_text = {
    0, "text", text_open, windows_get, windows_close, text_check, text_keys, text_path_keys};
const ct_dataset_examples ct_dataset_text_examples = {&ct_dataset_text, text_n_examples,
                                                      text_example};

/* ---- tokens: little-endian uint16 ids ---- */

/* The option keys, and those that name files (ct_dataset_vtable keys, path_keys). */
static const char *const tokens_keys[] = {"path", "context", "stride", "vocab", NULL};
static const char *const tokens_path_keys[] = {"path", NULL};

static ct_status
tokens_open(ct_ctx *ctx, const ct_options *opts, ct_dataset_info *info, void **self) {
    *self = NULL;
    const char *path;
    int64_t context = 0, stride = 0, vocab = 0;
    CT_TRY(ct_options_check(ctx, opts, tokens_keys));
    CT_TRY(ct_options_string(ctx, opts, "path", NULL, &path));
    CT_TRY(window_options(ctx, opts, &context, &stride));
    CT_TRY(ct_options_int(ctx, opts, "vocab", -1, 1, 65536, &vocab));
    if (vocab < 0)
        return CT_FAIL(ctx, CT_ERR_CONFIG, "%s: key 'vocab' is required",
                       ct_options_where(opts, "data"));
    if (!info) return CT_OK; /* tokens_check: the options only */

    unsigned char *data = NULL;
    size_t size = 0;
    CT_TRY(ct_data_read_file(ctx, path, TOKENS_MAX_BYTES, &data, &size));
    if (size % 2) {
        ct_free(ctx, data, size);
        return CT_FAIL(ctx, CT_ERR_FORMAT,
                       "%s: size %zu bytes is odd; a tokens file holds little-endian uint16 "
                       "token ids (2 bytes each)",
                       path, size);
    }
    for (size_t k = 0; k < size; k += 2) {
        unsigned tok = (unsigned)data[k] | (unsigned)data[k + 1] << 8;
        if ((int64_t)tok >= vocab) {
            ct_free(ctx, data, size);
            return CT_FAIL(ctx, CT_ERR_FORMAT,
                           "%s: token %u at index %zu (byte offset %zu) is >= vocab %lld", path,
                           tok, k / 2, k, (long long)vocab);
        }
    }
    char what[320];
    (void)snprintf(what, sizeof what, "file '%.256s' holds", path);
    return windows_make(ctx, data, size, 2, context, stride, vocab, what, info, self);
}

static ct_status tokens_check(ct_ctx *ctx, const ct_options *opts) {
    void *none;
    return tokens_open(ctx, opts, NULL, &none);
}

const ct_dataset_vtable ct_dataset_tokens = {0,           "tokens",        tokens_open,
                                             windows_get, windows_close,   tokens_check,
                                             tokens_keys, tokens_path_keys};
