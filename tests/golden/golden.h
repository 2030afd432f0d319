/*
 * golden.h - runs one golden case of a fixture (see gen_golden.py for the naming): builds the
 * op from step copies of "<case>/<input>", compares the output with "<case>/out", backpropagates
 * L = sum(out * "<case>/r") and compares each input's gradient with "<case>/grad/<input>".
 * Inputs that have a stored gradient require grad; the others (indices, buffers) do not.
 * Comparisons are |got - ref| <= atol + rtol |ref| and report the worst index (harness.h).
 */
#ifndef CT_TEST_GOLDEN_H
#define CT_TEST_GOLDEN_H

#include "ctrain/ctrain.h"
#include "fixture.h"
#include "harness.h"

#define GOLD_MAX_IN 8
#define GOLD_ATOL   1e-5
#define GOLD_RTOL   1e-4

typedef ct_tensor *(*gold_fn)(ct_graph *g, ct_tensor **in, const void *user);

typedef struct gold {
    ct_ctx *ctx;
    ct_graph *g;
    gf_file f;
    int loaded;
    int64_t threads;
} gold;

static inline int gold_open(gold *gd, const char *file, int64_t threads) {
    memset(gd, 0, sizeof *gd);
    gd->threads = threads;
    ct_ctx_params p = ct_ctx_default_params();
    p.n_threads = threads;
    if (ct_ctx_create(&p, &gd->ctx) != CT_OK || ct_graph_create(gd->ctx, NULL, &gd->g) != CT_OK)
        return 0;
    gd->loaded = gf_load(&gd->f, file);
    CT_CHECK_MSG(gd->loaded, "cannot load fixture %s", file);
    return gd->loaded;
}

static inline void gold_close(gold *gd) {
    gf_free(&gd->f);
    ct_graph_destroy(gd->g);
    ct_ctx_destroy(gd->ctx);
    memset(gd, 0, sizeof *gd);
}

/* A step tensor holding a copy of the fixture array `name` (NULL when missing). */
static inline ct_tensor *gold_tensor(gold *gd, const char *name) {
    const gf_array *a = gf_get(&gd->f, name);
    if (!a) return NULL;
    ct_tensor *t = ct_graph_new(gd->g, a->dtype, a->ndim, a->shape);
    if (t) memcpy(t->data, a->data, ct_tensor_nbytes(t));
    return t;
}

/* Compares a tensor's f32 values (and shape) with the fixture array `name`. */
static inline int gold_compare(
    gold *gd, const char *name, const ct_tensor *t, const float *values, double atol, double rtol) {
    const gf_array *a = gf_get(&gd->f, name);
    CT_CHECK_MSG(a != NULL, "missing %s", name);
    if (!a) return 0;
    char buf[96], want[96];
    int same = t->ndim == a->ndim;
    for (int32_t d = 0; same && d < a->ndim; d++)
        same = t->shape[d] == a->shape[d];
    if (!same) {
        ct_tensor ref = ct_tensor_view(a->data, a->dtype, a->ndim, a->shape);
        CT_CHECK_MSG(same, "%s: shape %s, expected %s (%d threads)", name,
                     ct_shape_str(t, buf, sizeof buf), ct_shape_str(&ref, want, sizeof want),
                     (int)gd->threads);
        return 0;
    }
    if (a->dtype == CT_I64) {
        int eq = t->dtype == CT_I64 && memcmp(t->data, a->data, ct_tensor_nbytes(t)) == 0;
        CT_CHECK_MSG(eq, "%s: i64 values differ (%d threads)", name, (int)gd->threads);
        return eq;
    }
    char what[160];
    snprintf(what, sizeof what, "%s (%d threads)", name, (int)gd->threads);
    return CT_CHECK_ARRAYS(what, values, (const float *)a->data, a->numel, atol, rtol);
}

/*
 * Runs case `name` with the inputs named in ins[0..n). The step inputs are left in in_out (when
 * not NULL) for extra checks; they live until the next case. Returns the output or NULL.
 */
static inline ct_tensor *gold_case(gold *gd,
                                   const char *name,
                                   int n,
                                   const char *const *ins,
                                   gold_fn fn,
                                   const void *user,
                                   ct_tensor **in_out) {
    if (!gd->loaded) return NULL;
    ct_graph_reset(gd->g);
    ct_tensor *in[GOLD_MAX_IN] = {0};
    char key[256];
    int any_grad = 0;
    for (int i = 0; i < n; i++) {
        snprintf(key, sizeof key, "%s/%s", name, ins[i]);
        in[i] = gold_tensor(gd, key);
        CT_CHECK_MSG(in[i] != NULL, "%s: input %s", name, ins[i]);
        if (!in[i]) return NULL;
        snprintf(key, sizeof key, "%s/grad/%s", name, ins[i]);
        if (gf_has(&gd->f, key)) {
            in[i]->flags |= CT_TENSOR_REQUIRES_GRAD;
            any_grad = 1;
        }
    }
    ct_tensor *out = fn(gd->g, in, user);
    CT_CHECK_MSG(out != NULL, "%s: forward failed: %s", name, ct_last_error(gd->ctx));
    if (in_out)
        for (int i = 0; i < n; i++)
            in_out[i] = in[i];
    if (!out) return NULL;
    snprintf(key, sizeof key, "%s/out", name);
    gold_compare(gd, key, out, out->data, GOLD_ATOL, GOLD_RTOL);
    if (!any_grad) return out;
    snprintf(key, sizeof key, "%s/r", name);
    const gf_array *r = gf_get(&gd->f, key);
    CT_CHECK_MSG(r && r->numel == ct_tensor_numel(out), "%s: missing or mis-sized r", name);
    if (!r || r->numel != ct_tensor_numel(out)) return NULL;
    ct_status s = ct_graph_backward_seed(gd->g, out, r->data);
    CT_CHECK_MSG(s == CT_OK, "%s: backward failed: %s", name, ct_last_error(gd->ctx));
    if (s != CT_OK) return NULL;
    for (int i = 0; i < n; i++) {
        if (!(in[i]->flags & CT_TENSOR_REQUIRES_GRAD)) continue;
        snprintf(key, sizeof key, "%s/grad/%s", name, ins[i]);
        CT_CHECK_MSG(in[i]->grad != NULL, "%s: no gradient reached input %s", name, ins[i]);
        if (in[i]->grad) gold_compare(gd, key, in[i], in[i]->grad, GOLD_ATOL, GOLD_RTOL);
    }
    return out;
}

#endif /* CT_TEST_GOLDEN_H */
