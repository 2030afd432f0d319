/*
 * registry.c - the table of built-in dataset types. Adding a type is one file in src/data/
 * defining its ct_dataset_vtable, option keys included (declared in data_internal.h), and one
 * line here (and a line in `examples` for a type that gives text examples).
 */
#include <string.h>

#include "data/data_internal.h"

static const ct_dataset_vtable *const types[] = {
    /* one line per type; the comments keep clang-format from packing the table */
    &ct_dataset_csv,        /* csv.c */
    &ct_dataset_text,       /* text.c */
    &ct_dataset_tokens,     /* text.c */
    &ct_dataset_synthetic,  /* synthetic.c */
    &ct_dataset_idx,        /* idx.c */
    &ct_dataset_cifar10,    /* cifar10.c */
    &ct_dataset_npy,        /* npy.c */
    &ct_dataset_arithmetic, /* arithmetic.c */
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

static const ct_dataset_examples *const examples[] = {
    &ct_dataset_text_examples,       /* text.c */
    &ct_dataset_arithmetic_examples, /* arithmetic.c */
    NULL,
};

const ct_dataset_examples *ct_dataset_examples_of(const ct_dataset_vtable *vt) {
    for (int64_t i = 0; examples[i]; i++)
        if (examples[i]->vt == vt) return examples[i];
    return NULL;
}
