/*
 * registry.c - the table of built-in dataset types. Adding a type is one file in src/data/
 * defining its ct_dataset_vtable, option keys included (declared in data_internal.h), and one
 * line here.
 */
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

const ct_dataset_vtable *const *ct_dataset_types(int64_t *count) {
    int64_t n = 0;
    while (types[n])
        n++;
    *count = n;
    return types;
}

const ct_dataset_vtable *ct_dataset_type_find(const char *name) {
    for (int64_t i = 0; name && types[i]; i++)
        if (strcmp(types[i]->name, name) == 0) return types[i];
    return NULL;
}
