/*
 * metrics.c - metric sets: specs opened through the type table, one flat f64 accumulator
 * buffer laid out metric after metric, and named values computed from it.
 *
 * Invariant: the buffer is the whole state of an evaluation. Its layout depends only on the
 * specs and n_classes, so equal sets on different ranks can sum their buffers. Everything is
 * allocated at create (slots, buffer, values, names); update and compute never allocate.
 *
 * Exact slots (a layout's first n_exact): a metric still adds into its double slots, but the
 * set feeds it one sample (one row along the first dimension) at a time and moves each slot's
 * value into an exact sum (ct_xsum) after every call, so only the set of samples decides the
 * sums, not their order, batches or ranks. The buffer handed out for the all-reduce is the
 * count slots followed by the exact sums' words (integers in doubles, so f64 sums of them
 * are exact too); while it is handed out (`exported`) those words are the state, and the
 * next update, or compute, reads them back first.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "metrics/metrics_internal.h"

typedef struct slot {
    const ct_metric_vtable *vt;
    void *self;
    int64_t accum_off, n_accum;
    int64_t n_exact;   /* the first n_exact of the metric's slots are kept exactly */
    int64_t exact_off; /* its first exact sum in ct_metrics.exact */
    int64_t value_off, n_values;
    char name[CT_METRIC_NAME_MAX]; /* "acc": the part between split/ and the value's part */
} slot;

struct ct_metrics {
    ct_ctx *ctx;
    slot *slots;
    int64_t n_slots;
    double *accum; /* n_accum slots, then n_exact * CT_XSUM_WORDS words */
    int64_t n_accum;
    ct_xsum *exact; /* n_exact */
    int64_t n_exact;
    bool exported;           /* the words at accum + n_accum hold the exact sums */
    double *raw;             /* n_values: what the vtables write */
    ct_metric_value *values; /* n_values: names into `names` */
    int64_t n_values;
    char *names; /* every full name, NUL-separated */
    char split[CT_METRIC_NAME_MAX];
    size_t names_size;
};

static ct_status unknown_type(ct_ctx *ctx, int64_t index, const char *type) {
    int64_t n;
    const ct_metric_vtable *const *t = ct_metric_types(&n);
    ct_unknown u;
    ct_unknown_init(&u, type);
    for (int64_t i = 0; i < n; i++)
        ct_unknown_add(&u, t[i]->name);
    char where[32];
    (void)snprintf(where, sizeof where, "metric %lld", (long long)index);
    return CT_FAIL_UNKNOWN(ctx, &u, where, "metric type");
}

static size_t buffer_bytes(const ct_metrics *m) {
    int64_t n = m->n_accum + m->n_exact * CT_XSUM_WORDS;
    return (size_t)(n ? n : 1) * sizeof(double);
}

void ct_metrics_destroy(ct_metrics *m) {
    if (!m) return;
    ct_ctx *ctx = m->ctx;
    for (int64_t i = 0; i < m->n_slots; i++)
        if (m->slots[i].vt && m->slots[i].vt->close) m->slots[i].vt->close(ctx, m->slots[i].self);
    ct_free(ctx, m->slots, (size_t)m->n_slots * sizeof *m->slots);
    ct_free(ctx, m->accum, buffer_bytes(m));
    ct_free(ctx, m->exact, (size_t)(m->n_exact ? m->n_exact : 1) * sizeof *m->exact);
    ct_free(ctx, m->raw, (size_t)m->n_values * sizeof *m->raw);
    ct_free(ctx, m->values, (size_t)m->n_values * sizeof *m->values);
    ct_free(ctx, m->names, m->names_size);
    ct_free(ctx, m, sizeof *m);
}

/* Opens spec i into s; errors are prefixed with the metric's place in the list. */
static ct_status
open_slot(ct_ctx *ctx, const ct_metric_spec *spec, int64_t i, int64_t n_classes, slot *s) {
    const ct_metric_vtable *vt = spec->vt ? spec->vt : ct_metric_type_find(spec->type);
    if (!vt) return unknown_type(ctx, i, spec->type);
    if (!vt->open || !vt->value_name || !vt->compute)
        return CT_FAIL(ctx, CT_ERR_INVALID_ARG,
                       "metric %lld ('%s'): a vtable needs open, value_name and compute",
                       (long long)i, vt->name ? vt->name : "(unnamed)");
    ct_metric_layout lay;
    memset(&lay, 0, sizeof lay);
    ct_status st = vt->open(ctx, &spec->opts, n_classes, &s->self, &lay);
    if (st != CT_OK) return ct_err_wrap(ctx, "metric %lld ('%s')", (long long)i, vt->name);
    s->vt = vt; /* from here on destroy closes it */
    if (lay.n_accum < 0 || lay.n_values < 1 || lay.n_accum > (INT64_C(1) << 40) ||
        lay.n_values > (INT64_C(1) << 40) || lay.n_exact < 0 || lay.n_exact > lay.n_accum ||
        lay.n_exact > 4096)
        return CT_FAIL(ctx, CT_ERR_INTERNAL,
                       "metric %lld ('%s'): bad layout (%lld slots, %lld exact, %lld values; "
                       "at most 4096 exact)",
                       (long long)i, vt->name, (long long)lay.n_accum, (long long)lay.n_exact,
                       (long long)lay.n_values);
    const char *name = spec->name ? spec->name : lay.name;
    if (!name[0] || strchr(name, '/') || strlen(name) >= sizeof s->name)
        return CT_FAIL(ctx, CT_ERR_CONFIG,
                       "metric %lld ('%s'): name '%s' must be non-empty, shorter than %d bytes "
                       "and without '/'",
                       (long long)i, vt->name, name, (int)sizeof s->name);
    memcpy(s->name, name, strlen(name) + 1);
    s->n_accum = lay.n_accum;
    s->n_exact = lay.n_exact;
    s->n_values = lay.n_values;
    return CT_OK;
}

/* Writes the full name of value v of slot s into buf; false when it does not fit. */
static bool full_name(const char *split, const slot *s, int64_t v, char *buf) {
    char part[CT_METRIC_NAME_MAX];
    part[0] = '\0';
    s->vt->value_name(s->self, v, part, sizeof part);
    size_t ls = strlen(split), ln = strlen(s->name), lp = strnlen(part, sizeof part - 1);
    if (ls + 1 + ln + lp >= CT_METRIC_NAME_MAX) {
        (void)snprintf(buf, CT_METRIC_NAME_MAX, "%.32s", split); /* enough for the message */
        return false;
    }
    memcpy(buf, split, ls);
    buf[ls] = '/';
    memcpy(buf + ls + 1, s->name, ln);
    memcpy(buf + ls + 1 + ln, part, lp);
    buf[ls + 1 + ln + lp] = '\0';
    return true;
}

static ct_status build(ct_metrics *m,
                       const char *split,
                       int64_t n_classes,
                       const ct_metric_spec *specs,
                       int64_t n_specs) {
    ct_ctx *ctx = m->ctx;
    for (int64_t i = 0; i < n_specs; i++) {
        slot *s = &m->slots[i];
        CT_TRY(open_slot(ctx, &specs[i], i, n_classes, s));
        for (int64_t j = 0; j < i; j++)
            if (strcmp(m->slots[j].name, s->name) == 0)
                return CT_FAIL(ctx, CT_ERR_CONFIG,
                               "metrics %lld and %lld are both named '%s/%s': give one a name",
                               (long long)j, (long long)i, split, s->name);
        s->accum_off = m->n_accum;
        s->exact_off = m->n_exact;
        s->value_off = m->n_values;
        m->n_accum += s->n_accum;
        m->n_exact += s->n_exact;
        m->n_values += s->n_values;
    }
    /* names: measure, then allocate once and fill */
    char buf[CT_METRIC_NAME_MAX];
    size_t total = 0;
    for (int64_t i = 0; i < n_specs; i++)
        for (int64_t v = 0; v < m->slots[i].n_values; v++) {
            if (!full_name(split, &m->slots[i], v, buf))
                return CT_FAIL(ctx, CT_ERR_CONFIG,
                               "metric %lld: a value name is longer than %d "
                               "bytes ('%s...')",
                               (long long)i, CT_METRIC_NAME_MAX - 1, buf);
            total += strlen(buf) + 1;
        }
    m->accum = ct_alloc(ctx, buffer_bytes(m));
    m->exact = ct_alloc(ctx, (size_t)(m->n_exact ? m->n_exact : 1) * sizeof *m->exact);
    m->raw = ct_alloc(ctx, (size_t)m->n_values * sizeof *m->raw);
    m->values = ct_alloc(ctx, (size_t)m->n_values * sizeof *m->values);
    m->names = ct_alloc(ctx, total);
    m->names_size = total;
    if (!m->accum || !m->exact || !m->raw || !m->values || !m->names)
        return CT_FAIL(ctx, CT_ERR_OOM, "allocating metrics '%s': %lld accumulators, %lld values",
                       split, (long long)m->n_accum, (long long)m->n_values);
    size_t off = 0;
    for (int64_t i = 0; i < n_specs; i++)
        for (int64_t v = 0; v < m->slots[i].n_values; v++) {
            full_name(split, &m->slots[i], v, buf);
            size_t len = strlen(buf) + 1;
            memcpy(m->names + off, buf, len);
            m->values[m->slots[i].value_off + v].name = m->names + off;
            m->values[m->slots[i].value_off + v].value = (double)NAN;
            off += len;
        }
    ct_metrics_reset(m);
    return CT_OK;
}

ct_status ct_metrics_create(ct_ctx *ctx,
                            const char *split,
                            int64_t n_classes,
                            const ct_metric_spec *specs,
                            int64_t n_specs,
                            ct_metrics **out) {
    *out = NULL;
    if (!split || !split[0] || strchr(split, '/') || strlen(split) >= CT_METRIC_NAME_MAX)
        return CT_FAIL(ctx, CT_ERR_INVALID_ARG,
                       "metrics: split name '%s' must be non-empty, shorter than %d bytes and "
                       "without '/'",
                       split ? split : "(null)", CT_METRIC_NAME_MAX);
    if (n_classes < 0 || n_classes > INT32_MAX)
        return CT_FAIL(ctx, CT_ERR_INVALID_ARG, "metrics '%s': n_classes %lld is out of [0, %d]",
                       split, (long long)n_classes, INT32_MAX);
    if (n_specs < 1 || !specs)
        return CT_FAIL(ctx, CT_ERR_INVALID_ARG, "metrics '%s': no metrics given", split);
    ct_metrics *m = ct_alloc(ctx, sizeof *m);
    slot *slots = ct_alloc(ctx, (size_t)n_specs * sizeof *slots);
    if (!m || !slots) {
        ct_free(ctx, m, sizeof *m);
        ct_free(ctx, slots, (size_t)n_specs * sizeof *slots);
        return CT_FAIL(ctx, CT_ERR_OOM, "allocating metrics '%s' (%lld metrics)", split,
                       (long long)n_specs);
    }
    memset(m, 0, sizeof *m);
    memset(slots, 0, (size_t)n_specs * sizeof *slots);
    m->ctx = ctx;
    m->slots = slots;
    m->n_slots = n_specs;
    memcpy(m->split, split, strlen(split) + 1);
    ct_status st = build(m, split, n_classes, specs, n_specs);
    if (st != CT_OK) {
        ct_metrics_destroy(m);
        return st;
    }
    *out = m;
    return CT_OK;
}

/* After an export, the (possibly reduced) words are the exact sums again. */
static void take_back(ct_metrics *m) {
    if (!m->exported) return;
    const double *words = m->accum + m->n_accum;
    for (int64_t j = 0; j < m->n_exact; j++)
        ct_xsum_import(&m->exact[j], words + j * CT_XSUM_WORDS);
    m->exported = false;
}

/* Moves slot s's exact slots into its exact sums and zeroes them. */
static void fold(ct_metrics *m, const slot *s) {
    double *a = m->accum + s->accum_off;
    for (int64_t j = 0; j < s->n_exact; j++) {
        ct_xsum_add(&m->exact[s->exact_off + j], a[j]);
        a[j] = 0.0;
    }
}

/* Row r of t along its first dimension, as a view. */
static ct_tensor row_of(const ct_tensor *t, int64_t r) {
    ct_tensor v = *t;
    int64_t per = t->shape[0] ? ct_tensor_numel(t) / t->shape[0] : 0;
    v.data = (char *)t->data + (size_t)(r * per) * ct_dtype_size(t->dtype);
    v.shape[0] = 1;
    v.grad = NULL;
    v.node = NULL;
    return v;
}

ct_status ct_metrics_update(ct_metrics *m, const ct_tensor *pred, const ct_tensor *target) {
    for (int64_t i = 0; i < m->n_slots; i++) {
        const slot *s = &m->slots[i];
        if (!s->vt->update || !s->vt->check) continue;
        if (s->vt->check(m->ctx, s->self, pred, target) != CT_OK)
            return ct_err_wrap(m->ctx, "metric '%s/%s'", m->split, s->name);
    }
    take_back(m);
    /* rows are samples when pred and target agree on the first dimension */
    bool by_row = pred->ndim >= 1 && target->ndim >= 1 && pred->shape[0] == target->shape[0];
    for (int64_t i = 0; i < m->n_slots; i++) {
        const slot *s = &m->slots[i];
        if (!s->vt->update) continue;
        if (s->n_exact == 0 || !by_row) {
            s->vt->update(s->self, m->accum + s->accum_off, pred, target);
            fold(m, s);
            continue;
        }
        for (int64_t r = 0; r < pred->shape[0]; r++) {
            ct_tensor p = row_of(pred, r), t = row_of(target, r);
            s->vt->update(s->self, m->accum + s->accum_off, &p, &t);
            fold(m, s);
        }
    }
    return CT_OK;
}

ct_status
ct_metrics_update_loss(ct_metrics *m, const char *component, double value, int64_t count) {
    if (count < 0)
        return CT_FAIL(m->ctx, CT_ERR_INVALID_ARG,
                       "metrics '%s': loss '%s' reported over %lld items, expected >= 0", m->split,
                       component ? component : "(total)", (long long)count);
    take_back(m);
    for (int64_t i = 0; i < m->n_slots; i++) {
        const slot *s = &m->slots[i];
        if (!s->vt->update_loss) continue;
        s->vt->update_loss(s->self, m->accum + s->accum_off, component, value, count);
        fold(m, s);
    }
    return CT_OK;
}

void ct_metrics_reset(ct_metrics *m) {
    memset(m->accum, 0, buffer_bytes(m));
    for (int64_t j = 0; j < m->n_exact; j++)
        ct_xsum_reset(&m->exact[j]);
    m->exported = false;
}

void ct_metrics_accumulators(ct_metrics *m, double **buf, int64_t *n) {
    if (!m->exported) {
        double *words = m->accum + m->n_accum;
        for (int64_t j = 0; j < m->n_exact; j++)
            ct_xsum_export(&m->exact[j], words + j * CT_XSUM_WORDS);
        m->exported = true;
    }
    *buf = m->accum;
    *n = m->n_accum + m->n_exact * CT_XSUM_WORDS;
}

void ct_metrics_compute(ct_metrics *m) {
    take_back(m);
    for (int64_t i = 0; i < m->n_slots; i++) {
        const slot *s = &m->slots[i];
        double *a = m->accum + s->accum_off;
        for (int64_t j = 0; j < s->n_exact; j++) /* exact slots hold 0 between updates */
            a[j] = ct_xsum_value(&m->exact[s->exact_off + j]);
        s->vt->compute(s->self, a, m->raw + s->value_off);
        for (int64_t j = 0; j < s->n_exact; j++)
            a[j] = 0.0;
    }
    for (int64_t v = 0; v < m->n_values; v++)
        m->values[v].value = m->raw[v];
}

const ct_metric_value *ct_metrics_values(const ct_metrics *m, int64_t *n) {
    *n = m->n_values;
    return m->values;
}

ct_status ct_metrics_get(const ct_metrics *m, const char *name, double *value) {
    for (int64_t v = 0; name && v < m->n_values; v++)
        if (strcmp(m->values[v].name, name) == 0) {
            *value = m->values[v].value;
            return CT_OK;
        }
    *value = (double)NAN;
    return CT_FAIL(m->ctx, CT_ERR_INVALID_ARG, "metrics '%s': no value named '%s' (first: '%s')",
                   m->split, name ? name : "(null)", m->values[0].name);
}
