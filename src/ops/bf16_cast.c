/*
 * bf16_cast.c - operands of bf16 products as bf16 (2 bytes a value), for ct_k_gemm_bf16: the
 * rounding and the conversion are one pass, made once per operand of a product (not per GEMM
 * tile), and a weight's copy is made once and shared by the forward and backward passes.
 *
 * Weight copies live in the graph's step arena (freed by ct_graph_reset) on a list in the
 * graph's cast slot, each stamped with the context's weights_version: an optimizer update or an
 * EMA swap bumps the version, so a forward pass after an update rounds the new values. Only
 * parameters (CT_TENSOR_PARAM) are cached; anything else is rounded into scratch each time,
 * since its values may change between uses without the context knowing.
 */
#include "autograd/autograd_internal.h"
#include "kernels/kernels.h"
#include "kernels/vmath.h"
#include "ops/ops_internal.h"

#define BLOCK 4096 /* values per parallel chunk: the inner loop vectorises */

typedef struct cast {
    const float *data;
    int64_t n;
    uint64_t version;
    uint16_t *bf16;
    struct cast *next;
} cast;

bool ct_ops_bf16_native(ct_graph *g) {
    return ct_k_gemm_bf16_native(ct_graph_ctx(g));
}

/* x[0..n) rounded to bf16 (ties to even; NaN stays a quiet NaN) into dst. */
CT_HOT static void round_into(ct_graph *g, const float *x, uint16_t *dst, int64_t n) {
    int64_t blocks = (n + BLOCK - 1) / BLOCK;
    int nt = ct_ops_threads(g, blocks, 2 * BLOCK);
    CT_PAR_FOR(nt, b, blocks, {
        int64_t lo = b * BLOCK, hi = lo + BLOCK < n ? lo + BLOCK : n;
        for (int64_t i = lo; i < hi; i++) {
            float r = ct_vround_bf16(x[i]);
            uint32_t u;
            memcpy(&u, &r, sizeof u);
            dst[i] = (uint16_t)(u >> 16);
        }
    });
}

uint16_t *ct_ops_bf16(ct_graph *g, const float *x, int64_t n) {
    uint16_t *dst = ct_graph_alloc(g, (size_t)(n > 0 ? n : 1) * sizeof(uint16_t));
    if (dst) round_into(g, x, dst, n);
    return dst;
}

const uint16_t *ct_ops_bf16_tensor(ct_graph *g, const ct_tensor *t) {
    int64_t n = ct_tensor_numel(t);
    if (!(t->flags & CT_TENSOR_PARAM)) return ct_ops_bf16(g, t->data, n);
    uint64_t version = ct_graph_ctx(g)->weights_version;
    cast **list = (cast **)ct_graph_casts(g);
    for (cast *c = *list; c; c = c->next)
        if (c->data == t->data && c->n == n && c->version == version) return c->bf16;
    cast *c = ct_graph_alloc_kept(g, sizeof *c);
    uint16_t *copy = c ? ct_graph_alloc_kept(g, (size_t)(n > 0 ? n : 1) * sizeof(uint16_t)) : NULL;
    if (!copy) return NULL;
    round_into(g, t->data, copy, n);
    *c = (cast){t->data, n, version, copy, *list};
    *list = c;
    return copy;
}

static float widen(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float v;
    memcpy(&v, &u, sizeof v);
    return v;
}

/* Columns [j0, j0 + w) of ct_ops_colsum_bf16 (w <= COLS), summed row by row: each column in
 * ct_ops_sum_f64's order (blocks of 256 rows) while reading whole cache lines of rows. */
#define COLS 64
CT_HOT static void
colsum_block(const uint16_t *x, int64_t rows, int64_t cols, int64_t j0, int64_t w, float *db) {
    double total[COLS] = {0.0}, part[COLS];
    for (int64_t i0 = 0; i0 < rows; i0 += 256) {
        int64_t i1 = i0 + 256 < rows ? i0 + 256 : rows;
        for (int64_t j = 0; j < w; j++)
            part[j] = 0.0;
        for (int64_t i = i0; i < i1; i++)
            for (int64_t j = 0; j < w; j++)
                part[j] += (double)widen(x[i * cols + j0 + j]);
        for (int64_t j = 0; j < w; j++)
            total[j] += part[j];
    }
    for (int64_t j = 0; j < w; j++)
        db[j0 + j] += (float)total[j];
}

void ct_ops_colsum_bf16(ct_graph *g, const uint16_t *x, int64_t rows, int64_t cols, float *db) {
    int64_t blocks = (cols + COLS - 1) / COLS;
    int nt = ct_ops_threads(g, blocks, rows * COLS);
    CT_PAR_FOR(nt, b, blocks, {
        int64_t j0 = b * COLS;
        colsum_block(x, rows, cols, j0, j0 + COLS <= cols ? COLS : cols - j0, db);
    });
}
