/*
 * registry.c - the table of built-in metric types. Adding a type is one vtable in a file in
 * src/metrics/ (declared in metrics_internal.h) and one line here; plugins pass their own
 * vtable in a ct_metric_spec instead.
 */
#include <string.h>

#include "metrics/metrics_internal.h"

static const ct_metric_vtable *const types[] = {
    /* one line per type; the comments keep clang-format from packing the table */
    &ct_metric_accuracy,      /* classification.c */
    &ct_metric_topk,          /* classification.c */
    &ct_metric_precision,     /* prf.c */
    &ct_metric_recall,        /* prf.c */
    &ct_metric_f1,            /* prf.c */
    &ct_metric_confusion,     /* confusion.c */
    &ct_metric_loss,          /* loss.c */
    &ct_metric_perplexity,    /* loss.c */
    &ct_metric_mse,           /* regression.c */
    &ct_metric_mae,           /* regression.c */
    &ct_metric_rmse,          /* regression.c */
    &ct_metric_r2,            /* regression.c */
    &ct_metric_exact_match,   /* text.c */
    &ct_metric_char_accuracy, /* text.c */
    &ct_metric_edit_distance, /* text.c */
    NULL,
};

const ct_metric_vtable *const *ct_metric_types(int64_t *count) {
    int64_t n = 0;
    while (types[n])
        n++;
    *count = n;
    return types;
}

const ct_metric_vtable *ct_metric_type_find(const char *name) {
    for (int64_t i = 0; name && types[i]; i++)
        if (strcmp(types[i]->name, name) == 0) return types[i];
    return NULL;
}
