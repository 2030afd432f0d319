/*
 * cifar10.c - the "cifar10" dataset type: the CIFAR-10 binary version, one or more files of
 * fixed 3073-byte records (1 label byte, then 3072 pixel bytes: 32x32 red, green, blue planes).
 * Files may be gzip-compressed.
 *
 * Invariant: every file is a positive whole number of records and every label is in [0, 10)
 * before the dataset exists; samples are numbered through the files in the order given. Sample
 * x is u8 [3, 32, 32] (channel first), y an i64 class index.
 *
 * Ownership: the dataset owns each file's buffer (from the context's allocator) and serves
 * samples straight from the records, so nothing is copied at load.
 */
#include <string.h>

#include "data/data_internal.h"

enum { CIFAR_CLASSES = 10, CIFAR_PIXELS = 3 * 32 * 32, CIFAR_RECORD = 1 + CIFAR_PIXELS };

/* Sanity cap per file: the real files are 30 MB each. */
#define CIFAR_MAX_BYTES ((size_t)(SIZE_MAX > 0xFFFFFFFFu ? (uint64_t)4 << 30 : SIZE_MAX))

typedef struct cifar_file {
    unsigned char *data;
    size_t size;
    int64_t first; /* index of this file's first sample */
    int64_t n;     /* records in this file */
} cifar_file;

typedef struct cifar {
    cifar_file *files;
    int64_t n_files;
} cifar;

static void cifar_close(ct_ctx *ctx, void *self) {
    cifar *d = self;
    if (!d) return;
    for (int64_t f = 0; f < d->n_files; f++)
        ct_free(ctx, d->files[f].data, d->files[f].size);
    ct_free(ctx, d->files, (size_t)d->n_files * sizeof *d->files);
    ct_free(ctx, d, sizeof *d);
}

static ct_status check_file(ct_ctx *ctx, const char *path, const cifar_file *f) {
    if (f->size == 0 || f->size % CIFAR_RECORD != 0)
        return CT_FAIL(ctx, CT_ERR_FORMAT,
                       "%s: size %zu bytes: expected a positive multiple of the %d-byte record "
                       "(1 label + %d pixels), found %zu records and %zu extra bytes%s",
                       path, f->size, CIFAR_RECORD, CIFAR_PIXELS, f->size / CIFAR_RECORD,
                       f->size % CIFAR_RECORD,
                       f->size && f->size % (CIFAR_RECORD + 1) == 0
                           ? " (hint: 3074-byte records are CIFAR-100, which is not supported)"
                           : "");
    for (size_t r = 0; r < f->size / CIFAR_RECORD; r++) {
        unsigned label = f->data[r * CIFAR_RECORD];
        if (label >= CIFAR_CLASSES)
            return CT_FAIL(ctx, CT_ERR_FORMAT,
                           "%s: offset %zu (record %zu): expected a label in [0, %d), found %u",
                           path, r * CIFAR_RECORD, r, CIFAR_CLASSES, label);
    }
    return CT_OK;
}

/* Copies the comma-separated list into a NUL-separated buffer (entries trimmed of spaces);
 * counts entries. An empty entry is a config error. */
static ct_status split_paths(ct_ctx *ctx,
                             const ct_options *opts,
                             const char *list,
                             char **buf,
                             size_t *buf_size,
                             int64_t *count) {
    size_t len = strlen(list);
    char *b = ct_alloc(ctx, len + 1);
    if (!b) return CT_FAIL(ctx, CT_ERR_OOM, "cifar10: allocating the file list");
    int64_t n = 0;
    size_t o = 0;
    for (const char *p = list;;) {
        const char *end = strchr(p, ',');
        if (!end) end = p + strlen(p);
        const char *a = p, *z = end;
        while (a < z && (*a == ' ' || *a == '\t'))
            a++;
        while (z > a && (z[-1] == ' ' || z[-1] == '\t'))
            z--;
        if (a == z) {
            ct_free(ctx, b, len + 1);
            return CT_FAIL(ctx, CT_ERR_CONFIG,
                           "%s: key 'files': entry %lld of '%s' is empty (expected "
                           "comma-separated paths)",
                           ct_options_where(opts, "data"), (long long)n + 1, list);
        }
        memcpy(b + o, a, (size_t)(z - a));
        o += (size_t)(z - a);
        b[o++] = '\0';
        n++;
        if (!*end) break;
        p = end + 1;
    }
    *buf = b;
    *buf_size = len + 1;
    *count = n;
    return CT_OK;
}

/* The option keys, and those that name files (ct_dataset_vtable keys, path_keys). */
static const char *const cifar10_keys[] = {"files", "limit", NULL};
static const char *const cifar10_path_keys[] = {"files", NULL};

static ct_status
cifar_open(ct_ctx *ctx, const ct_options *opts, ct_dataset_info *info, void **self) {
    *self = NULL;
    const char *list;
    int64_t limit;
    CT_TRY(ct_options_check(ctx, opts, cifar10_keys));
    CT_TRY(ct_options_string(ctx, opts, "files", NULL, &list));
    CT_TRY(ct_options_int(ctx, opts, "limit", 0, 0, INT64_MAX, &limit));

    char *paths = NULL;
    size_t paths_size = 0;
    int64_t n_files = 0;
    CT_TRY(split_paths(ctx, opts, list, &paths, &paths_size, &n_files));
    if (!info) { /* cifar_check: the options only */
        ct_free(ctx, paths, paths_size);
        return CT_OK;
    }
    cifar *d = ct_alloc(ctx, sizeof *d);
    cifar_file *files = ct_alloc(ctx, (size_t)n_files * sizeof *files);
    if (!d || !files) {
        ct_free(ctx, d, sizeof *d);
        ct_free(ctx, files, (size_t)n_files * sizeof *files);
        ct_free(ctx, paths, paths_size);
        return CT_FAIL(ctx, CT_ERR_OOM, "cifar10: allocating the dataset");
    }
    memset(files, 0, (size_t)n_files * sizeof *files);
    d->files = files;
    d->n_files = n_files;
    ct_status s = CT_OK;
    int64_t total = 0;
    const char *path = paths;
    for (int64_t f = 0; f < n_files && s == CT_OK; f++, path += strlen(path) + 1) {
        cifar_file *cf = &files[f];
        s = ct_data_read_file(ctx, path, CIFAR_MAX_BYTES, &cf->data, &cf->size);
        if (s == CT_OK) s = check_file(ctx, path, cf);
        cf->first = total;
        cf->n = (int64_t)(cf->size / CIFAR_RECORD);
        total += cf->n;
    }
    ct_free(ctx, paths, paths_size);
    if (s != CT_OK) {
        cifar_close(ctx, d);
        return s;
    }
    memset(info, 0, sizeof *info);
    info->n = limit > 0 && limit < total ? limit : total;
    info->x_dtype = CT_U8;
    info->x_ndim = 3;
    info->x_shape[0] = 3;
    info->x_shape[1] = 32;
    info->x_shape[2] = 32;
    info->y_dtype = CT_I64;
    info->y_ndim = 0;
    info->n_classes = CIFAR_CLASSES;
    *self = d;
    return CT_OK;
}

static ct_status cifar_get(const void *self, int64_t i, void *x, void *y) {
    const cifar *d = self;
    const cifar_file *f = d->files;
    while (i >= f->first + f->n)
        f++; /* a handful of files: a scan beats a search */
    const unsigned char *rec = f->data + (size_t)(i - f->first) * CIFAR_RECORD;
    memcpy(x, rec + 1, CIFAR_PIXELS);
    int64_t label = rec[0];
    memcpy(y, &label, sizeof label);
    return CT_OK;
}

static ct_status cifar_check(ct_ctx *ctx, const ct_options *opts) {
    void *none;
    return cifar_open(ctx, opts, NULL, &none);
}

const ct_dataset_vtable ct_dataset_cifar10 = {
    0, "cifar10", cifar_open, cifar_get, cifar_close, cifar_check, cifar10_keys, cifar10_path_keys};
