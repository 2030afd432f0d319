/*
 * idx.c - the "idx" dataset type: MNIST-style IDX files (MNIST, Fashion-MNIST, KMNIST), plain
 * or gzip-compressed, as an images file (magic 0x00000803: u8, 3 dims N x rows x cols) and a
 * labels file (magic 0x00000801: u8, N), all integers big-endian.
 *
 * Invariant: both headers are checked against the actual data sizes, the counts against each
 * other and every label against the class count before the dataset exists; get() then only
 * copies. Sample x is u8 [1, rows, cols] (channel first), y an i64 class index.
 *
 * Ownership: the dataset owns both file buffers (from the context's allocator) and samples are
 * served straight from them, so the pixels are held once, as u8.
 */
#include <stdio.h>
#include <string.h>

#include "data/data_internal.h"

enum { IDX_CLASSES = 10, IMAGES_HEADER = 16, LABELS_HEADER = 8 };

/* Sanity cap on a file's (decompressed) size: far above any IDX data set, far below memory
 * exhaustion, and checked before the size is allocated. */
#define IDX_MAX_BYTES ((size_t)(SIZE_MAX > 0xFFFFFFFFu ? (uint64_t)4 << 30 : SIZE_MAX))

typedef struct idx {
    unsigned char *images; /* the whole images file; pixels start at IMAGES_HEADER */
    size_t images_size;
    unsigned char *labels; /* the whole labels file; labels start at LABELS_HEADER */
    size_t labels_size;
    size_t pixels; /* rows * cols */
} idx;

static uint32_t be32(const unsigned char *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

static void idx_close(ct_ctx *ctx, void *self) {
    idx *d = self;
    if (!d) return;
    ct_free(ctx, d->images, d->images_size);
    ct_free(ctx, d->labels, d->labels_size);
    ct_free(ctx, d, sizeof *d);
}

static ct_status check_magic(ct_ctx *ctx,
                             const char *path,
                             const unsigned char *buf,
                             size_t size,
                             size_t header,
                             uint32_t want,
                             const char *what) {
    uint32_t magic = size >= 4 ? be32(buf) : 0;
    if (size >= 4 && magic != want) {
        char hint[96] = " (hint: not an IDX file)";
        if (magic == 0x00000801u || magic == 0x00000803u)
            (void)snprintf(hint, sizeof hint, " (hint: 'images' and 'labels' look swapped)");
        else if ((magic & 0xFFFF0000u) == 0)
            (void)snprintf(hint, sizeof hint,
                           " (hint: IDX element type 0x%02x with %u dims; only u8 (0x08) is "
                           "supported)",
                           (unsigned)(magic >> 8 & 0xFF), (unsigned)(magic & 0xFF));
        return CT_FAIL(ctx, CT_ERR_FORMAT,
                       "%s: offset 0: expected magic 0x%08x (IDX %s), found 0x%08x%s", path,
                       (unsigned)want, what, (unsigned)magic, hint);
    }
    if (size < header)
        return CT_FAIL(ctx, CT_ERR_FORMAT,
                       "%s: offset 0: expected a %zu-byte IDX %s header, found a %zu-byte file",
                       path, header, what, size);
    return CT_OK;
}

/* Validates the images header and size; sets *n, *rows, *cols. */
static ct_status check_images(ct_ctx *ctx,
                              const char *path,
                              const unsigned char *buf,
                              size_t size,
                              int64_t *n,
                              int64_t *rows,
                              int64_t *cols) {
    CT_TRY(check_magic(ctx, path, buf, size, IMAGES_HEADER, 0x00000803u, "u8 3-dim images"));
    static const char *const dim_name[3] = {"image count", "rows", "cols"};
    uint32_t dim[3];
    for (int d = 0; d < 3; d++) {
        dim[d] = be32(buf + 4 + 4 * d);
        if (dim[d] == 0)
            return CT_FAIL(ctx, CT_ERR_FORMAT, "%s: offset %d: expected a positive %s, found 0",
                           path, 4 + 4 * d, dim_name[d]);
    }
    /* each dim < 2^32, so rows*cols fits in 64 bits; the product with N may not */
    uint64_t per = (uint64_t)dim[1] * dim[2];
    uint64_t found = size - IMAGES_HEADER;
    if (per > UINT64_MAX / dim[0] || per * dim[0] != found) {
        char expect[32] = "more than 2^64";
        if (per <= UINT64_MAX / dim[0])
            (void)snprintf(expect, sizeof expect, "%llu", (unsigned long long)(per * dim[0]));
        return CT_FAIL(ctx, CT_ERR_FORMAT,
                       "%s: expected N*rows*cols = %u*%u*%u = %s bytes of pixels after the "
                       "%d-byte header, found %llu",
                       path, (unsigned)dim[0], (unsigned)dim[1], (unsigned)dim[2], expect,
                       IMAGES_HEADER, (unsigned long long)found);
    }
    *n = dim[0];
    *rows = dim[1];
    *cols = dim[2];
    return CT_OK;
}

/* Validates the labels header, size, count and values. */
static ct_status check_labels(ct_ctx *ctx,
                              const char *path,
                              const unsigned char *buf,
                              size_t size,
                              const char *images_path,
                              int64_t n_images) {
    CT_TRY(check_magic(ctx, path, buf, size, LABELS_HEADER, 0x00000801u, "u8 1-dim labels"));
    uint32_t n = be32(buf + 4);
    if (n == 0)
        return CT_FAIL(ctx, CT_ERR_FORMAT, "%s: offset 4: expected a positive label count, found 0",
                       path);
    uint64_t found = size - LABELS_HEADER;
    if (found != n)
        return CT_FAIL(ctx, CT_ERR_FORMAT,
                       "%s: expected N = %u bytes of labels after the %d-byte header, found %llu",
                       path, (unsigned)n, LABELS_HEADER, (unsigned long long)found);
    if ((int64_t)n != n_images)
        return CT_FAIL(ctx, CT_ERR_FORMAT,
                       "%s: offset 4: expected %lld labels (the image count of %s), found %u", path,
                       (long long)n_images, images_path, (unsigned)n);
    for (size_t i = LABELS_HEADER; i < size; i++)
        if (buf[i] >= IDX_CLASSES)
            return CT_FAIL(ctx, CT_ERR_FORMAT,
                           "%s: offset %zu (label %zu): expected a class in [0, %d), found %u",
                           path, i, i - LABELS_HEADER, IDX_CLASSES, (unsigned)buf[i]);
    return CT_OK;
}

/* The option keys, and those that name files (ct_dataset_vtable keys, path_keys). */
static const char *const idx_keys[] = {"images", "labels", "limit", NULL};
static const char *const idx_path_keys[] = {"images", "labels", NULL};

static ct_status idx_open(ct_ctx *ctx, const ct_options *opts, ct_dataset_info *info, void **self) {
    *self = NULL;
    const char *images_path, *labels_path;
    int64_t limit;
    CT_TRY(ct_options_check(ctx, opts, idx_keys));
    CT_TRY(ct_options_string(ctx, opts, "images", NULL, &images_path));
    CT_TRY(ct_options_string(ctx, opts, "labels", NULL, &labels_path));
    CT_TRY(ct_options_int(ctx, opts, "limit", 0, 0, INT64_MAX, &limit));
    if (!info) return CT_OK; /* idx_check: the options only */

    idx *d = ct_alloc(ctx, sizeof *d);
    if (!d) return CT_FAIL(ctx, CT_ERR_OOM, "idx: allocating the dataset");
    memset(d, 0, sizeof *d);
    int64_t n = 0, rows = 0, cols = 0;
    ct_status s = ct_data_read_file(ctx, images_path, IDX_MAX_BYTES, &d->images, &d->images_size);
    if (s == CT_OK) s = check_images(ctx, images_path, d->images, d->images_size, &n, &rows, &cols);
    if (s == CT_OK)
        s = ct_data_read_file(ctx, labels_path, IDX_MAX_BYTES, &d->labels, &d->labels_size);
    if (s == CT_OK) s = check_labels(ctx, labels_path, d->labels, d->labels_size, images_path, n);
    if (s != CT_OK) {
        idx_close(ctx, d);
        return s;
    }
    d->pixels = (size_t)(rows * cols);
    memset(info, 0, sizeof *info);
    info->n = limit > 0 && limit < n ? limit : n;
    info->x_dtype = CT_U8;
    info->x_ndim = 3;
    info->x_shape[0] = 1;
    info->x_shape[1] = rows;
    info->x_shape[2] = cols;
    info->y_dtype = CT_I64;
    info->y_ndim = 0;
    info->n_classes = IDX_CLASSES;
    *self = d;
    return CT_OK;
}

static ct_status idx_get(const void *self, int64_t i, void *x, void *y) {
    const idx *d = self;
    memcpy(x, d->images + IMAGES_HEADER + (size_t)i * d->pixels, d->pixels);
    int64_t label = d->labels[LABELS_HEADER + (size_t)i];
    memcpy(y, &label, sizeof label);
    return CT_OK;
}

static ct_status idx_check(ct_ctx *ctx, const ct_options *opts) {
    void *none;
    return idx_open(ctx, opts, NULL, &none);
}

const ct_dataset_vtable ct_dataset_idx = {0,         "idx",     idx_open, idx_get,
                                          idx_close, idx_check, idx_keys, idx_path_keys};
