/*
 * tensor.h - dtypes, shapes and contiguous row-major tensors, with views and bf16 conversion.
 *
 * A ct_tensor describes memory; it does not always own it. Three kinds exist:
 *   - owned tensors from ct_tensor_create, freed with ct_tensor_destroy (struct and data);
 *   - views (ct_tensor_view, ct_tensor_reshape, ct_tensor_slice): plain values that borrow the
 *     data of another tensor and go stale when it is freed;
 *   - step tensors made by the autograd graph (autograd.h), which live in the graph's arena and
 *     die at ct_graph_reset.
 * Parameters are views into one contiguous buffer owned by a ct_params store (nn.h).
 * All tensors are contiguous and row-major; the fields are public and read-only by convention.
 */
#ifndef CTRAIN_TENSOR_H
#define CTRAIN_TENSOR_H

#include <stdbool.h>

#include "ctrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CT_MAX_DIMS 8

/* Append-only: new dtypes go before CT_DTYPE_COUNT. */
typedef enum ct_dtype {
    CT_F32 = 0, /* compute type */
    CT_BF16,    /* storage and mixed precision */
    CT_I32,     /* labels, indices */
    CT_I64,     /* labels, indices, counters */
    CT_U8,      /* raw data */
    CT_DTYPE_COUNT
} ct_dtype;

typedef uint16_t ct_bf16;

enum {
    CT_TENSOR_REQUIRES_GRAD = 1u << 0, /* gradients flow into .grad */
    CT_TENSOR_OWNS_DATA = 1u << 1,     /* ct_tensor_destroy frees .data */
    CT_TENSOR_PARAM = 1u << 2,         /* a parameter view into a ct_params buffer */
    CT_TENSOR_STEP = 1u << 3,          /* made by a graph: lives in its arena until reset */
    CT_TENSOR_GRAD_ARENA = 1u << 4,    /* .grad came from the graph's arena (ct_graph_grad) */
};

struct ct_node;

typedef struct ct_tensor {
    void *data;                 /* numel * dtype size bytes, 64-byte aligned when allocated */
    float *grad;                /* f32 gradient, same shape; NULL when there is none yet */
    int64_t shape[CT_MAX_DIMS]; /* shape[ndim..] are 1 */
    int32_t ndim;               /* 0 (scalar) .. CT_MAX_DIMS */
    ct_dtype dtype;
    uint32_t flags;             /* CT_TENSOR_* */
    const struct ct_node *node; /* the graph node that produced it; NULL for leaves */
    const char *name;           /* borrowed; may be NULL */
} ct_tensor;

CT_API size_t ct_dtype_size(ct_dtype dt);
CT_API const char *ct_dtype_name(ct_dtype dt);

/* Number of elements (1 for a scalar). */
CT_API int64_t ct_tensor_numel(const ct_tensor *t);
CT_API size_t ct_tensor_nbytes(const ct_tensor *t);
/* Size of dimension d; negative d counts from the end. */
CT_API int64_t ct_tensor_dim(const ct_tensor *t, int32_t d);
CT_API bool ct_tensor_same_shape(const ct_tensor *a, const ct_tensor *b);
/* Writes "[2,3,4]" into buf (always NUL-terminated); returns buf. */
CT_API char *ct_shape_str(const ct_tensor *t, char *buf, size_t size);

/*
 * Checks a shape (0 <= ndim <= CT_MAX_DIMS, dims >= 0, element count and byte size without
 * overflow) and returns its element count in *numel. Fails with CT_ERR_SHAPE and a message.
 */
CT_API ct_status
ct_shape_check(ct_ctx *ctx, ct_dtype dtype, int32_t ndim, const int64_t *shape, int64_t *numel);

/* A zero-filled owned tensor. *out is NULL on failure. */
CT_API ct_status
ct_tensor_create(ct_ctx *ctx, ct_dtype dtype, int32_t ndim, const int64_t *shape, ct_tensor **out);
/* Frees an owned tensor (and its data when it owns it). NULL is a no-op. */
CT_API void ct_tensor_destroy(ct_ctx *ctx, ct_tensor *t);

/* A view of caller memory; the shape must be valid (unchecked: use ct_shape_check for input). */
CT_API ct_tensor ct_tensor_view(void *data, ct_dtype dtype, int32_t ndim, const int64_t *shape);
/* The same data under another shape with the same element count. */
CT_API ct_status ct_tensor_reshape(
    ct_ctx *ctx, const ct_tensor *t, int32_t ndim, const int64_t *shape, ct_tensor *out);
/* Rows [start, start+len) along the first axis, sharing data. */
CT_API ct_status
ct_tensor_slice(ct_ctx *ctx, const ct_tensor *t, int64_t start, int64_t len, ct_tensor *out);

/* Element access as f32 (converts any dtype); for tests and tools, not for kernels. */
CT_API float ct_tensor_get_f32(const ct_tensor *t, int64_t i);
CT_API void ct_tensor_set_f32(ct_tensor *t, int64_t i, float v);
/* Fills every element with v (converted to the tensor's dtype). */
CT_API void ct_tensor_fill(ct_tensor *t, float v);
/* Copies src into dst; same element count; converts between dtypes (f32 <-> bf16 rounds to
 * nearest even, float -> integer truncates). */
CT_API ct_status ct_tensor_copy(ct_ctx *ctx, ct_tensor *dst, const ct_tensor *src);

/* bf16 <-> f32. Rounding is to nearest, ties to even; NaN stays NaN (quiet). */
CT_API ct_bf16 ct_bf16_from_f32(float x);
CT_API float ct_f32_from_bf16(ct_bf16 x);
CT_API void ct_bf16_from_f32_n(ct_bf16 *dst, const float *src, int64_t n);
CT_API void ct_f32_from_bf16_n(float *dst, const ct_bf16 *src, int64_t n);

#ifdef __cplusplus
}
#endif

#endif /* CTRAIN_TENSOR_H */
