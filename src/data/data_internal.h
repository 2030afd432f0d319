/*
 * data_internal.h - what the dataset implementations share: the dataset struct, the built-in
 * vtables (one per file in src/data/), and file-reading helpers that validate sizes before
 * allocating. Internal.
 */
#ifndef CT_DATA_INTERNAL_H
#define CT_DATA_INTERNAL_H

#include "core/core_internal.h"
#include "ctrain/data.h"

struct ct_dataset {
    ct_ctx *ctx;
    const ct_dataset_vtable *vt;
    void *self;
    ct_dataset_info info;
    size_t x_bytes, y_bytes; /* one sample's feature and target bytes */
};

/* Built-in dataset types (registry.c lists them). Each type's check is its open called with
 * info NULL: the open reads and checks its options as always, then returns CT_OK before it
 * opens a file or keeps anything (self stays NULL), so the two cannot disagree on what is
 * valid. */
extern const ct_dataset_vtable ct_dataset_idx;
extern const ct_dataset_vtable ct_dataset_cifar10;
extern const ct_dataset_vtable ct_dataset_csv;
extern const ct_dataset_vtable ct_dataset_npy;
extern const ct_dataset_vtable ct_dataset_text;
extern const ct_dataset_vtable ct_dataset_tokens;
extern const ct_dataset_vtable ct_dataset_synthetic;
extern const ct_dataset_vtable ct_dataset_arithmetic;

/* The text examples of a built-in type (ct_dataset_n_examples), kept beside its vtable so
 * that the vtable's layout, which plugins fill in, stays as it is. */
typedef struct ct_dataset_examples {
    const ct_dataset_vtable *vt;
    int64_t (*count)(const void *self);
    ct_status (*get)(const void *self, int64_t i, ct_text_example *out);
} ct_dataset_examples;
extern const ct_dataset_examples ct_dataset_text_examples;
extern const ct_dataset_examples ct_dataset_arithmetic_examples;
/* The examples of datasets of type vt, or NULL (registry.c). */
CT_INTERNAL const ct_dataset_examples *ct_dataset_examples_of(const ct_dataset_vtable *vt);

/*
 * The `nonfinite` option of the types that read float values (csv, npy): "error" (the default)
 * fails the open on the first inf or NaN, naming the file and where in it the value is;
 * "allow" keeps such values as they are. Any other value fails with CT_ERR_CONFIG naming
 * opts->where and the key. *allow is set on success.
 */
CT_INTERNAL ct_status ct_data_nonfinite_option(ct_ctx *ctx, const ct_options *opts, bool *allow);
/* The index of the first inf or NaN in x[0, n), or -1: a vectorised pass when there is none. */
CT_INTERNAL int64_t ct_data_find_nonfinite(const float *x, int64_t n);

/* Bytes of one sample's features / target for an info. */
CT_INTERNAL size_t ct_data_sample_bytes(ct_dtype dtype, int32_t ndim, const int64_t *shape);

/*
 * Reads a whole file into memory from the context's allocator; gzip files (magic 1f 8b) are
 * inflated with zlib. max_bytes caps the (decompressed) size: a file that would exceed it fails
 * with CT_ERR_FORMAT before allocating more. *data is freed with ct_free(ctx, *data, *size)
 * (size 0: *data may be NULL). Errors name the path and the errno text or zlib message.
 */
CT_INTERNAL ct_status ct_data_read_file(
    ct_ctx *ctx, const char *path, size_t max_bytes, unsigned char **data, size_t *size);

#endif /* CT_DATA_INTERNAL_H */
