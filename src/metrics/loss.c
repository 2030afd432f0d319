/*
 * loss.c - loss averages and perplexity.
 *
 * "loss" averages the values reported through ct_metrics_update_loss: each report adds
 * value*count and count, for the total (component NULL) and for each component listed in the
 * `components` option; the listed set fixes the accumulator layout, so reports of unlisted
 * components are ignored rather than growing it. "perplexity" is exp of the mean token NLL,
 * either computed from logits (source=logits, log-softmax in double per token) or taken from
 * reported cross-entropy losses (source=loss). Every slot is exact (n_exact): the set keeps
 * the sums exactly, so neither order, batches (beyond what is reported) nor ranks change them
 * (metrics.h).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "metrics/metrics_internal.h"

#define MAX_COMPONENTS 32
#define COMPONENT_MAX  64

/* ---- loss ---- */

typedef struct loss {
    int64_t n; /* components */
    char names[MAX_COMPONENTS][COMPONENT_MAX];
} loss;

/* Splits a comma-separated list (spaces around names are dropped) into l->names. */
static ct_status parse_components(ct_ctx *ctx, const char *list, loss *l) {
    const char *p = list;
    l->n = 0;
    while (*p) {
        while (*p == ' ')
            p++;
        const char *end = p;
        while (*end && *end != ',')
            end++;
        size_t len = (size_t)(end - p);
        while (len > 0 && p[len - 1] == ' ')
            len--;
        if (len == 0 || len >= COMPONENT_MAX || memchr(p, '/', len))
            return CT_FAIL(ctx, CT_ERR_CONFIG,
                           "loss: key 'components': '%s' has an empty name, a name of %d bytes "
                           "or more, or a '/' (expected names like 'ce,aux')",
                           list, COMPONENT_MAX);
        if (l->n == MAX_COMPONENTS)
            return CT_FAIL(ctx, CT_ERR_CONFIG, "loss: key 'components': more than %d names",
                           MAX_COMPONENTS);
        memcpy(l->names[l->n], p, len);
        l->names[l->n][len] = '\0';
        for (int64_t j = 0; j < l->n; j++)
            if (strcmp(l->names[j], l->names[l->n]) == 0)
                return CT_FAIL(ctx, CT_ERR_CONFIG, "loss: key 'components': '%s' is listed twice",
                               l->names[j]);
        l->n++;
        p = *end ? end + 1 : end;
    }
    return CT_OK;
}

static ct_status loss_open(
    ct_ctx *ctx, const ct_options *opts, int64_t n_classes, void **self, ct_metric_layout *lay) {
    static const char *const known[] = {"components", NULL};
    (void)n_classes;
    *self = NULL;
    const char *list;
    CT_TRY(ct_options_check(ctx, opts, known));
    CT_TRY(ct_options_string(ctx, opts, "components", "", &list));
    loss *l = ct_alloc(ctx, sizeof *l);
    if (!l) return CT_FAIL(ctx, CT_ERR_OOM, "allocating metric loss");
    ct_status st = parse_components(ctx, list, l);
    if (st != CT_OK) {
        ct_free(ctx, l, sizeof *l);
        return st;
    }
    *self = l;
    lay->n_accum = 2 * (1 + l->n); /* (sum, count) for the total, then each component */
    lay->n_exact = lay->n_accum;
    lay->n_values = 1 + l->n;
    snprintf(lay->name, sizeof lay->name, "loss");
    return CT_OK;
}

static void loss_value_name(const void *self, int64_t i, char *buf, size_t size) {
    const loss *l = self;
    if (i == 0) {
        if (size) buf[0] = '\0';
    } else {
        snprintf(buf, size, "/%s", l->names[i - 1]);
    }
}

static void loss_update_loss(
    const void *self, double *accum, const char *component, double value, int64_t count) {
    const loss *l = self;
    int64_t at = -1;
    if (!component)
        at = 0;
    else
        for (int64_t j = 0; j < l->n && at < 0; j++)
            if (strcmp(l->names[j], component) == 0) at = 1 + j;
    if (at < 0) return;
    accum[2 * at] += value * (double)count;
    accum[2 * at + 1] += (double)count;
}

static void loss_compute(const void *self, const double *accum, double *values) {
    const loss *l = self;
    for (int64_t i = 0; i <= l->n; i++)
        values[i] = ct_metric_ratio(accum[2 * i], accum[2 * i + 1]);
}

static void loss_close(ct_ctx *ctx, void *self) {
    ct_free(ctx, self, sizeof(loss));
}

const ct_metric_vtable ct_metric_loss = {
    0, "loss", loss_open, loss_value_name, NULL, NULL, loss_update_loss, loss_compute, loss_close,
};

/* ---- perplexity ---- */

typedef struct ppl {
    ct_cls_config cfg;
    bool from_loss;
    bool total; /* source=loss: take the total, not a component */
    char component[COMPONENT_MAX];
} ppl;

enum { SLOT_NLL, SLOT_COUNT };

static ct_status ppl_open(
    ct_ctx *ctx, const ct_options *opts, int64_t n_classes, void **self, ct_metric_layout *lay) {
    static const char *const known[] = {"source", "component", "ignore_index", NULL};
    *self = NULL;
    ppl p;
    memset(&p, 0, sizeof p);
    p.cfg = (ct_cls_config){"perplexity", n_classes, -100, true};
    const char *source, *component;
    CT_TRY(ct_options_check(ctx, opts, known));
    CT_TRY(ct_cls_read_options(ctx, opts, &p.cfg));
    CT_TRY(ct_options_string(ctx, opts, "source", "logits", &source));
    component = ct_options_get(opts, "component");
    if (strcmp(source, "logits") == 0) {
        if (component)
            return CT_FAIL(ctx, CT_ERR_CONFIG,
                           "perplexity: key 'component' needs source=loss (source is logits)");
    } else if (strcmp(source, "loss") == 0) {
        p.from_loss = true;
        p.total = component == NULL;
        if (component && strlen(component) >= sizeof p.component)
            return CT_FAIL(ctx, CT_ERR_CONFIG,
                           "perplexity: key 'component': '%s' is longer than "
                           "%d bytes",
                           component, COMPONENT_MAX - 1);
        if (component) memcpy(p.component, component, strlen(component) + 1);
    } else {
        return CT_FAIL(ctx, CT_ERR_CONFIG,
                       "perplexity: key 'source': unknown value '%s' (known: logits, loss)",
                       source);
    }
    ppl *s = ct_alloc(ctx, sizeof *s);
    if (!s) return CT_FAIL(ctx, CT_ERR_OOM, "allocating metric perplexity");
    *s = p;
    *self = s;
    lay->n_accum = 2;
    lay->n_exact = 2;
    lay->n_values = 1;
    snprintf(lay->name, sizeof lay->name, "perplexity");
    return CT_OK;
}

static void ppl_value_name(const void *self, int64_t i, char *buf, size_t size) {
    (void)self, (void)i;
    if (size) buf[0] = '\0';
}

static ct_status
ppl_check(ct_ctx *ctx, const void *self, const ct_tensor *pred, const ct_tensor *target) {
    const ppl *p = self;
    if (p->from_loss) return CT_OK;
    ct_cls_batch b;
    return ct_cls_check(ctx, &p->cfg, pred, target, &b);
}

/* -log softmax(row)[t] in double: logsumexp with the row max subtracted. */
static double token_nll(const ct_tensor *pred, int64_t row, int64_t c, int64_t t) {
    const int64_t base = row * c;
    double mx = -(double)INFINITY;
    for (int64_t j = 0; j < c; j++)
        mx = fmax(mx, ct_metric_real_at(pred, base + j));
    double s = 0.0;
    for (int64_t j = 0; j < c; j++)
        s += exp(ct_metric_real_at(pred, base + j) - mx);
    return mx + log(s) - ct_metric_real_at(pred, base + t);
}

static void
ppl_update(const void *self, double *accum, const ct_tensor *pred, const ct_tensor *target) {
    const ppl *p = self;
    if (p->from_loss) return;
    ct_cls_batch b;
    ct_cls_shape(&p->cfg, pred, target, &b);
    for (int64_t i = 0; i < b.n; i++) {
        int64_t t = ct_metric_index_at(target, i);
        if (t == p->cfg.ignore_index) continue;
        accum[SLOT_NLL] += token_nll(pred, i, b.c, t);
        accum[SLOT_COUNT] += 1.0;
    }
}

static void ppl_update_loss(
    const void *self, double *accum, const char *component, double value, int64_t count) {
    const ppl *p = self;
    if (!p->from_loss) return;
    bool match = p->total ? component == NULL : component && strcmp(component, p->component) == 0;
    if (!match) return;
    accum[SLOT_NLL] += value * (double)count;
    accum[SLOT_COUNT] += (double)count;
}

static void ppl_compute(const void *self, const double *accum, double *values) {
    (void)self;
    values[0] = exp(ct_metric_ratio(accum[SLOT_NLL], accum[SLOT_COUNT]));
}

static void ppl_close(ct_ctx *ctx, void *self) {
    ct_free(ctx, self, sizeof(ppl));
}

const ct_metric_vtable ct_metric_perplexity = {
    0,          "perplexity",    ppl_open,    ppl_value_name, ppl_check,
    ppl_update, ppl_update_loss, ppl_compute, ppl_close,
};
