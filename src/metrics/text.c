/*
 * text.c - metrics of generated text against reference text (the decode engine's): exact
 * match, character accuracy and edit distance. Each update is one example: pred the output's
 * bytes and target the reference's, both u8 [len] (len may be 0). Every slot is an integer
 * count, so the values are exact under any sharding.
 *   exact_match     examples whose output equals the reference / examples
 *   char_accuracy   positions where output and reference hold the same byte / the positions
 *                   of the longer of the two, both summed over the examples
 *   edit_distance   the mean Levenshtein distance (insertions, deletions and substitutions
 *                   of bytes, each 1)
 * Ownership: edit_distance keeps its own row of max_length + 1 counts (allocated at open), so
 * that updates never allocate.
 */
#include <stdio.h>
#include <string.h>

#include "metrics/metrics_internal.h"

enum { SLOT_SUM, SLOT_COUNT, N_SLOTS };

typedef enum text_kind { EXACT, CHARS, EDIT } text_kind;

typedef struct text_metric {
    text_kind kind;
    int64_t max_length; /* edit_distance: the longest shorter text it takes */
    int64_t *row;       /* edit_distance: max_length + 1 counts */
} text_metric;

static ct_status open_text(ct_ctx *ctx,
                           const ct_options *opts,
                           text_kind kind,
                           const char *name,
                           void **self,
                           ct_metric_layout *layout) {
    static const char *const none[] = {NULL};
    static const char *const edit_keys[] = {"max_length", NULL};
    *self = NULL;
    CT_TRY(ct_options_check(ctx, opts, kind == EDIT ? edit_keys : none));
    text_metric cfg = {kind, 0, NULL};
    if (kind == EDIT)
        CT_TRY(ct_options_int(ctx, opts, "max_length", 4096, 1, 1 << 24, &cfg.max_length));
    text_metric *t = ct_alloc(ctx, sizeof *t);
    if (t && kind == EDIT) {
        cfg.row = ct_alloc(ctx, (size_t)(cfg.max_length + 1) * sizeof(int64_t));
        if (!cfg.row) {
            ct_free(ctx, t, sizeof *t);
            t = NULL;
        }
    }
    if (!t) return CT_FAIL(ctx, CT_ERR_OOM, "allocating metric %s", name);
    *t = cfg;
    *self = t;
    layout->n_accum = N_SLOTS;
    layout->n_values = 1;
    (void)snprintf(layout->name, sizeof layout->name, "%s", name);
    return CT_OK;
}

static ct_status exact_open(
    ct_ctx *ctx, const ct_options *opts, int64_t n_classes, void **self, ct_metric_layout *l) {
    (void)n_classes;
    return open_text(ctx, opts, EXACT, "exact_match", self, l);
}

static ct_status chars_open(
    ct_ctx *ctx, const ct_options *opts, int64_t n_classes, void **self, ct_metric_layout *l) {
    (void)n_classes;
    return open_text(ctx, opts, CHARS, "char_accuracy", self, l);
}

static ct_status edit_open(
    ct_ctx *ctx, const ct_options *opts, int64_t n_classes, void **self, ct_metric_layout *l) {
    (void)n_classes;
    return open_text(ctx, opts, EDIT, "edit_distance", self, l);
}

static void single_name(const void *self, int64_t i, char *buf, size_t size) {
    (void)self, (void)i;
    if (size) buf[0] = '\0';
}

static const char *kind_name(text_kind k) {
    return k == EXACT ? "exact_match" : k == CHARS ? "char_accuracy" : "edit_distance";
}

static ct_status
check(ct_ctx *ctx, const void *self, const ct_tensor *pred, const ct_tensor *target) {
    const text_metric *t = self;
    const ct_tensor *both[2] = {pred, target};
    for (int k = 0; k < 2; k++)
        if (both[k]->dtype != CT_U8 || both[k]->ndim != 1)
            return CT_FAIL(ctx, CT_ERR_SHAPE,
                           "%s: %s is %s of %d dims; expected the bytes of one text (u8 [len])",
                           kind_name(t->kind), k ? "target" : "pred", ct_dtype_name(both[k]->dtype),
                           (int)both[k]->ndim);
    int64_t shorter = pred->shape[0] < target->shape[0] ? pred->shape[0] : target->shape[0];
    if (t->kind == EDIT && shorter > t->max_length)
        return CT_FAIL(ctx, CT_ERR_SHAPE,
                       "edit_distance: texts of %lld and %lld bytes; the shorter may have at "
                       "most max_length = %lld (raise the option max_length)",
                       (long long)pred->shape[0], (long long)target->shape[0],
                       (long long)t->max_length);
    return CT_OK;
}

/* Levenshtein distance of a[0..n) and b[0..m), m <= the row's length - 1: one row of the
 * table, kept over b. */
static int64_t levenshtein(const uint8_t *a, int64_t n, const uint8_t *b, int64_t m, int64_t *row) {
    for (int64_t j = 0; j <= m; j++)
        row[j] = j;
    for (int64_t i = 1; i <= n; i++) {
        int64_t diag = row[0];
        row[0] = i;
        for (int64_t j = 1; j <= m; j++) {
            int64_t up = row[j];
            int64_t best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[m];
}

static void
update(const void *self, double *accum, const ct_tensor *pred, const ct_tensor *target) {
    const text_metric *t = self;
    const uint8_t *a = pred->data, *b = target->data;
    int64_t n = pred->shape[0], m = target->shape[0];
    int64_t common = n < m ? n : m;
    if (t->kind == EXACT) {
        accum[SLOT_SUM] += n == m && (n == 0 || memcmp(a, b, (size_t)n) == 0);
        accum[SLOT_COUNT] += 1;
    } else if (t->kind == CHARS) {
        int64_t agree = 0;
        for (int64_t i = 0; i < common; i++)
            agree += a[i] == b[i];
        accum[SLOT_SUM] += (double)agree;
        accum[SLOT_COUNT] += (double)(n > m ? n : m);
    } else {
        accum[SLOT_SUM] +=
            (double)(n >= m ? levenshtein(a, n, b, m, t->row) : levenshtein(b, m, a, n, t->row));
        accum[SLOT_COUNT] += 1;
    }
}

static void compute(const void *self, const double *accum, double *values) {
    (void)self;
    values[0] = ct_metric_ratio(accum[SLOT_SUM], accum[SLOT_COUNT]);
}

static void close_metric(ct_ctx *ctx, void *self) {
    text_metric *t = self;
    if (!t) return;
    if (t->row) ct_free(ctx, t->row, (size_t)(t->max_length + 1) * sizeof(int64_t));
    ct_free(ctx, t, sizeof *t);
}

const ct_metric_vtable ct_metric_exact_match = {
    0, "exact_match", exact_open, single_name, check, update, NULL, compute, close_metric,
};
const ct_metric_vtable ct_metric_char_accuracy = {
    0, "char_accuracy", chars_open, single_name, check, update, NULL, compute, close_metric,
};
const ct_metric_vtable ct_metric_edit_distance = {
    0, "edit_distance", edit_open, single_name, check, update, NULL, compute, close_metric,
};
