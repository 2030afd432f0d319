/*
 * common.c - the helpers of ops_internal.h.
 */
#include "ops/ops_internal.h"

bool ct_ops_begin(ct_graph *g, const char *op, int32_t n, ct_tensor *const *in) {
    if (ct_graph_status(g) != CT_OK) return false;
    for (int32_t i = 0; i < n; i++) {
        if (!in[i]) {
            CT_GRAPH_FAIL(g, CT_ERR_INVALID_ARG, "%s: input %d is NULL", op, (int)i);
            return false;
        }
        if (!in[i]->data && ct_tensor_numel(in[i]) > 0) {
            CT_GRAPH_FAIL(g, CT_ERR_INVALID_ARG,
                          "%s: input %d ('%s') has no data (a parameter used before "
                          "ct_params_alloc?)",
                          op, (int)i, in[i]->name ? in[i]->name : "unnamed");
            return false;
        }
    }
    return true;
}

bool ct_ops_f32(ct_graph *g, const char *op, const char *what, const ct_tensor *t) {
    if (t->dtype == CT_F32) return true;
    CT_GRAPH_FAIL(g, CT_ERR_SHAPE, "%s: %s must be f32, got %s", op, what, ct_dtype_name(t->dtype));
    return false;
}

bool ct_ops_index(ct_graph *g, const char *op, const char *what, const ct_tensor *t) {
    if (t->dtype == CT_I32 || t->dtype == CT_I64) return true;
    CT_GRAPH_FAIL(g, CT_ERR_SHAPE, "%s: %s must be i32 or i64 indices, got %s", op, what,
                  ct_dtype_name(t->dtype));
    return false;
}

bool ct_ops_axis(ct_graph *g, const char *op, int32_t ndim, int32_t *axis) {
    int32_t a = *axis < 0 ? *axis + ndim : *axis;
    if (a < 0 || a >= ndim) {
        CT_GRAPH_FAIL(g, CT_ERR_SHAPE, "%s: axis %d out of range for %d dimensions", op, (int)*axis,
                      (int)ndim);
        return false;
    }
    *axis = a;
    return true;
}

int64_t ct_ops_index_at(const ct_tensor *t, int64_t i) {
    return t->dtype == CT_I64 ? ((const int64_t *)t->data)[i] : ((const int32_t *)t->data)[i];
}

void ct_ops_split_axis(
    const ct_tensor *t, int32_t axis, int64_t *outer, int64_t *dim, int64_t *inner) {
    int64_t o = 1, in = 1;
    for (int32_t i = 0; i < axis; i++)
        o *= t->shape[i];
    for (int32_t i = axis + 1; i < t->ndim; i++)
        in *= t->shape[i];
    *outer = o;
    *dim = t->shape[axis];
    *inner = in;
}

int ct_ops_threads(const ct_graph *g, int64_t n, int64_t work) {
    return ct_threads_for(ct_graph_ctx(g), n, work);
}

bool ct_ops_reference(const ct_graph *g) {
    return ct_graph_ctx(g)->kernels == CT_KERNELS_REFERENCE;
}

bool ct_ops_mul_ok(int64_t a, int64_t b, int64_t *r) {
    if (a < 0 || b < 0 || (a > 0 && b > INT64_MAX / a)) return false;
    *r = a * b;
    return true;
}

bool ct_ops_add_ok(int64_t a, int64_t b, int64_t *r) {
    if (a < 0 || b < 0 || a > INT64_MAX - b) return false;
    *r = a + b;
    return true;
}

double ct_ops_sum_f64(const float *x, int64_t n, int64_t stride) {
    double total = 0.0;
    for (int64_t i0 = 0; i0 < n; i0 += 256) {
        int64_t i1 = i0 + 256 < n ? i0 + 256 : n;
        double part = 0.0;
        for (int64_t i = i0; i < i1; i++)
            part += (double)x[i * stride];
        total += part;
    }
    return total;
}
