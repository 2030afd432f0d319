/*
 * registry.c - the table of built-in dataset types. Adding a type is one file in src/data/
 * defining its ct_dataset_vtable (declared in data_internal.h) and one line here.
 */
#include <assert.h>
#include <string.h>

#include "data/data_internal.h"

static const ct_dataset_vtable *const types[] = {
    /* one line per type; the comments keep clang-format from packing the table */
    &ct_dataset_csv,       /* csv.c */
    &ct_dataset_text,      /* text.c */
    &ct_dataset_tokens,    /* text.c */
    &ct_dataset_synthetic, /* synthetic.c */
    &ct_dataset_idx,       /* idx.c */
    &ct_dataset_cifar10,   /* cifar10.c */
    &ct_dataset_npy,       /* npy.c */
    NULL,
};

/* The option keys of each type above, in the same order. */
static const char *const *const type_keys[] = {
    ct_dataset_csv_keys,       /* csv.c */
    ct_dataset_text_keys,      /* text.c */
    ct_dataset_tokens_keys,    /* text.c */
    ct_dataset_synthetic_keys, /* synthetic.c */
    ct_dataset_idx_keys,       /* idx.c */
    ct_dataset_cifar10_keys,   /* cifar10.c */
    ct_dataset_npy_keys,       /* npy.c */
    NULL,
};
static_assert(sizeof type_keys / sizeof type_keys[0] == sizeof types / sizeof types[0],
              "a dataset type without its keys");

/* The keys among them that hold file paths, in the same order. */
static const char *const *const type_path_keys[] = {
    ct_dataset_csv_path_keys,       /* csv.c */
    ct_dataset_text_path_keys,      /* text.c */
    ct_dataset_tokens_path_keys,    /* text.c */
    ct_dataset_synthetic_path_keys, /* synthetic.c */
    ct_dataset_idx_path_keys,       /* idx.c */
    ct_dataset_cifar10_path_keys,   /* cifar10.c */
    ct_dataset_npy_path_keys,       /* npy.c */
    NULL,
};
static_assert(sizeof type_path_keys / sizeof type_path_keys[0] == sizeof types / sizeof types[0],
              "a dataset type without its path keys");

const char *const *ct_dataset_type_keys(const char *type) {
    for (int64_t i = 0; type && types[i]; i++)
        if (strcmp(types[i]->name, type) == 0) return type_keys[i];
    return NULL;
}

const char *const *ct_dataset_type_path_keys(const char *type) {
    for (int64_t i = 0; type && types[i]; i++)
        if (strcmp(types[i]->name, type) == 0) return type_path_keys[i];
    return NULL;
}

const ct_dataset_vtable *const *ct_dataset_types(int64_t *count) {
    int64_t n = 0;
    while (types[n])
        n++;
    *count = n;
    return types;
}
