/*
 * common.c - the helpers of ops_internal.h.
 */
#include "kernels/vmath.h"
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

CT_HOT void ct_ops_round_bf16(ct_graph *g, const float *x, float *dst, int64_t n) {
    if (ct_ops_reference(g)) {
        for (int64_t i = 0; i < n; i++)
            dst[i] = ct_f32_from_bf16(ct_bf16_from_f32(x[i]));
        return;
    }
    int nt = ct_ops_threads(g, n, 2);
    CT_OMP_FOR(nt)
    for (int64_t i = 0; i < n; i++)
        dst[i] = ct_vround_bf16(x[i]);
}

const float *ct_ops_autocast(ct_graph *g, const float *x, int64_t n) {
    if (ct_graph_autocast(g) != CT_BF16) return x;
    float *dst = ct_graph_alloc(g, (size_t)(n > 0 ? n : 1) * sizeof(float));
    if (dst) ct_ops_round_bf16(g, x, dst, n);
    return dst;
}

void ct_ops_note_autocast(ct_graph *g, ct_node *node) {
    if (ct_graph_autocast(g) == CT_BF16) node->iarg[CT_OPS_AUTOCAST_ARG] = 1;
}

bool ct_ops_ran_autocast(const ct_node *n) {
    return n->iarg[CT_OPS_AUTOCAST_ARG] != 0;
}

/* The incoming gradient for a backward pass: rounded into scratch when the forward pass ran
 * under autocast, else dy itself; NULL on arena failure. */
const float *ct_ops_round_dy(ct_graph *g, const ct_node *n, const float *dy, int64_t count) {
    if (!ct_ops_ran_autocast(n)) return dy;
    float *r = ct_graph_alloc(g, (size_t)(count > 0 ? count : 1) * sizeof(float));
    if (r) ct_ops_round_bf16(g, dy, r, count);
    return r;
}

/* The operands a backward pass multiplies with: the inputs rounded again into scratch, or the
 * inputs' own data. */
const float *ct_ops_operand(ct_graph *g, const ct_node *n, int i) {
    const ct_tensor *t = n->in[i];
    if (!ct_ops_ran_autocast(n)) return t->data;
    int64_t count = ct_tensor_numel(t);
    float *r = ct_graph_alloc(g, (size_t)(count > 0 ? count : 1) * sizeof(float));
    if (r) ct_ops_round_bf16(g, t->data, r, count);
    return r;
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

/* Columns [j0, j0 + w) of ct_ops_colsum (w <= COLSUM_COLS), each in ct_ops_sum_f64's order
 * (blocks of 256 rows, left to right) while reading whole rows: the loops over the columns
 * vectorise, where a column at a time strides through memory one element per row. */
#define COLSUM_COLS 64
CT_HOT static void
colsum_block(const float *x, int64_t rows, int64_t cols, int64_t j0, int64_t w, float *db) {
    double total[COLSUM_COLS] = {0.0}, part[COLSUM_COLS];
    for (int64_t i0 = 0; i0 < rows; i0 += 256) {
        int64_t i1 = i0 + 256 < rows ? i0 + 256 : rows;
        for (int64_t j = 0; j < w; j++)
            part[j] = 0.0;
        for (int64_t i = i0; i < i1; i++)
            for (int64_t j = 0; j < w; j++)
                part[j] += (double)x[i * cols + j0 + j];
        for (int64_t j = 0; j < w; j++)
            total[j] += part[j];
    }
    for (int64_t j = 0; j < w; j++)
        db[j0 + j] += (float)total[j];
}

void ct_ops_colsum(ct_graph *g, const float *x, int64_t rows, int64_t cols, float *db) {
    if (ct_ops_reference(g)) {
        int nt = ct_ops_threads(g, cols, rows);
        CT_PAR_FOR(nt, j, cols, db[j] += (float)ct_ops_sum_f64(x + j, rows, cols););
        return;
    }
    int64_t blocks = (cols + COLSUM_COLS - 1) / COLSUM_COLS;
    int nt = ct_ops_threads(g, blocks, rows * COLSUM_COLS);
    CT_PAR_FOR(nt, b, blocks, {
        int64_t j0 = b * COLSUM_COLS;
        colsum_block(x, rows, cols, j0, j0 + COLSUM_COLS <= cols ? COLSUM_COLS : cols - j0, db);
    });
}
