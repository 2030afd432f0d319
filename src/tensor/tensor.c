/*
 * tensor.c - shape arithmetic, owned tensors, views and dtype conversion.
 *
 * Owned tensors are one allocation for the struct and one for the data; views copy the struct
 * and borrow the data. Shapes from outside (files, configs) go through ct_shape_check before
 * any allocation, so a bad header can never make us allocate more than it implies.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/core_internal.h"
#include "ctrain/tensor.h"

static const size_t dtype_sizes[] = {4, 2, 4, 8, 1};
static const char *const dtype_names[] = {"f32", "bf16", "i32", "i64", "u8"};
_Static_assert(sizeof(dtype_sizes) / sizeof(dtype_sizes[0]) == CT_DTYPE_COUNT,
               "dtype_sizes must cover every ct_dtype");
_Static_assert(sizeof(dtype_names) / sizeof(dtype_names[0]) == CT_DTYPE_COUNT,
               "dtype_names must cover every ct_dtype");

size_t ct_dtype_size(ct_dtype dt) {
    return ((int)dt >= 0 && dt < CT_DTYPE_COUNT) ? dtype_sizes[dt] : 0;
}

const char *ct_dtype_name(ct_dtype dt) {
    return ((int)dt >= 0 && dt < CT_DTYPE_COUNT) ? dtype_names[dt] : "unknown dtype";
}

int64_t ct_tensor_numel(const ct_tensor *t) {
    int64_t n = 1;
    for (int32_t i = 0; i < t->ndim; i++)
        n *= t->shape[i];
    return n;
}

size_t ct_tensor_nbytes(const ct_tensor *t) {
    return (size_t)ct_tensor_numel(t) * ct_dtype_size(t->dtype);
}

int64_t ct_tensor_dim(const ct_tensor *t, int32_t d) {
    if (d < 0) d += t->ndim;
    return (d >= 0 && d < t->ndim) ? t->shape[d] : 1;
}

bool ct_tensor_same_shape(const ct_tensor *a, const ct_tensor *b) {
    if (a->ndim != b->ndim) return false;
    for (int32_t i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return false;
    return true;
}

static char *shape_str(int32_t ndim, const int64_t *shape, char *buf, size_t size) {
    size_t off = 0;
    if (size == 0) return buf;
    buf[0] = '\0';
    off += (size_t)snprintf(buf, size, "[");
    for (int32_t i = 0; i < ndim && off < size; i++)
        off += (size_t)snprintf(buf + off, size - off, i ? ",%lld" : "%lld", (long long)shape[i]);
    if (off < size) (void)snprintf(buf + off, size - off, "]");
    return buf;
}

char *ct_shape_str(const ct_tensor *t, char *buf, size_t size) {
    return shape_str(t->ndim, t->shape, buf, size);
}

ct_status
ct_shape_check(ct_ctx *ctx, ct_dtype dtype, int32_t ndim, const int64_t *shape, int64_t *numel) {
    if ((int)dtype < 0 || dtype >= CT_DTYPE_COUNT)
        return CT_FAIL(ctx, CT_ERR_INVALID_ARG, "dtype %d is not a ct_dtype", (int)dtype);
    if (ndim < 0 || ndim > CT_MAX_DIMS)
        return CT_FAIL(ctx, CT_ERR_SHAPE, "%d dimensions, expected 0..%d", (int)ndim, CT_MAX_DIMS);
    int64_t n = 1, nonzero = 1;
    /* bytes must fit in both size_t and int64_t */
    int64_t limit = INT64_MAX / (int64_t)ct_dtype_size(dtype);
    for (int32_t i = 0; i < ndim; i++) {
        char buf[200];
        if (shape[i] < 0)
            return CT_FAIL(ctx, CT_ERR_SHAPE, "shape %s: dimension %d is negative",
                           shape_str(ndim, shape, buf, sizeof buf), (int)i);
        /* bound the product of the non-zero dims too, so that no partial product an op
         * forms can overflow, even when another dim is 0 */
        if (shape[i] > 0 && nonzero > limit / shape[i])
            return CT_FAIL(ctx, CT_ERR_SHAPE, "shape %s: %s tensor too large to address",
                           shape_str(ndim, shape, buf, sizeof buf), ct_dtype_name(dtype));
        if (shape[i] > 0) nonzero *= shape[i];
        n *= shape[i];
    }
    if (numel) *numel = n;
    return CT_OK;
}

ct_tensor ct_tensor_view(void *data, ct_dtype dtype, int32_t ndim, const int64_t *shape) {
    ct_tensor t;
    memset(&t, 0, sizeof t);
    t.data = data;
    t.dtype = dtype;
    t.ndim = ndim;
    for (int32_t i = 0; i < CT_MAX_DIMS; i++)
        t.shape[i] = i < ndim ? shape[i] : 1;
    return t;
}

ct_status
ct_tensor_create(ct_ctx *ctx, ct_dtype dtype, int32_t ndim, const int64_t *shape, ct_tensor **out) {
    int64_t numel;
    *out = NULL;
    CT_TRY(ct_shape_check(ctx, dtype, ndim, shape, &numel));
    ct_tensor *t = ct_alloc(ctx, sizeof *t);
    if (!t) return CT_FAIL(ctx, CT_ERR_OOM, "allocating a tensor header");
    *t = ct_tensor_view(NULL, dtype, ndim, shape);
    size_t bytes = (size_t)numel * ct_dtype_size(dtype);
    t->data = ct_alloc(ctx, bytes);
    if (!t->data) {
        ct_free(ctx, t, sizeof *t);
        char buf[200];
        return CT_FAIL(ctx, CT_ERR_OOM, "allocating %zu bytes for a %s tensor %s", bytes,
                       ct_dtype_name(dtype), shape_str(ndim, shape, buf, sizeof buf));
    }
    memset(t->data, 0, bytes);
    t->flags = CT_TENSOR_OWNS_DATA;
    *out = t;
    return CT_OK;
}

void ct_tensor_destroy(ct_ctx *ctx, ct_tensor *t) {
    if (!t) return;
    if (t->flags & CT_TENSOR_OWNS_DATA) ct_free(ctx, t->data, ct_tensor_nbytes(t));
    ct_free(ctx, t, sizeof *t);
}

ct_status ct_tensor_reshape(
    ct_ctx *ctx, const ct_tensor *t, int32_t ndim, const int64_t *shape, ct_tensor *out) {
    int64_t numel;
    CT_TRY(ct_shape_check(ctx, t->dtype, ndim, shape, &numel));
    if (numel != ct_tensor_numel(t)) {
        char a[200], b[200];
        return CT_FAIL(ctx, CT_ERR_SHAPE, "cannot reshape %s into %s: %lld vs %lld elements",
                       ct_shape_str(t, a, sizeof a), shape_str(ndim, shape, b, sizeof b),
                       (long long)ct_tensor_numel(t), (long long)numel);
    }
    *out = ct_tensor_view(t->data, t->dtype, ndim, shape);
    out->name = t->name;
    return CT_OK;
}

ct_status
ct_tensor_slice(ct_ctx *ctx, const ct_tensor *t, int64_t start, int64_t len, ct_tensor *out) {
    if (t->ndim < 1) return CT_FAIL(ctx, CT_ERR_SHAPE, "cannot slice a scalar");
    if (start < 0 || len < 0 || start > t->shape[0] || len > t->shape[0] - start)
        return CT_FAIL(ctx, CT_ERR_SHAPE, "slice [%lld, %lld) out of range for first dim %lld",
                       (long long)start, (long long)(start + len), (long long)t->shape[0]);
    size_t row = ct_tensor_nbytes(t) / (t->shape[0] ? (size_t)t->shape[0] : 1);
    *out = ct_tensor_view((char *)t->data + (size_t)start * row, t->dtype, t->ndim, t->shape);
    out->shape[0] = len;
    out->name = t->name;
    return CT_OK;
}

ct_bf16 ct_bf16_from_f32(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (ct_bf16)((u >> 16) | 0x0040u); /* quiet NaN */
    u += 0x7FFFu + ((u >> 16) & 1u); /* round to nearest, ties to even */
    return (ct_bf16)(u >> 16);
}

float ct_f32_from_bf16(ct_bf16 x) {
    uint32_t u = (uint32_t)x << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

void ct_bf16_from_f32_n(ct_bf16 *dst, const float *src, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        dst[i] = ct_bf16_from_f32(src[i]);
}

void ct_f32_from_bf16_n(float *dst, const ct_bf16 *src, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        dst[i] = ct_f32_from_bf16(src[i]);
}

float ct_tensor_get_f32(const ct_tensor *t, int64_t i) {
    switch (t->dtype) {
    case CT_F32:
        return ((const float *)t->data)[i];
    case CT_BF16:
        return ct_f32_from_bf16(((const ct_bf16 *)t->data)[i]);
    case CT_I32:
        return (float)((const int32_t *)t->data)[i];
    case CT_I64:
        return (float)((const int64_t *)t->data)[i];
    case CT_U8:
        return (float)((const uint8_t *)t->data)[i];
    case CT_DTYPE_COUNT:
        break;
    }
    return NAN;
}

void ct_tensor_set_f32(ct_tensor *t, int64_t i, float v) {
    switch (t->dtype) {
    case CT_F32:
        ((float *)t->data)[i] = v;
        break;
    case CT_BF16:
        ((ct_bf16 *)t->data)[i] = ct_bf16_from_f32(v);
        break;
    case CT_I32:
        ((int32_t *)t->data)[i] = (int32_t)v;
        break;
    case CT_I64:
        ((int64_t *)t->data)[i] = (int64_t)v;
        break;
    case CT_U8:
        ((uint8_t *)t->data)[i] = (uint8_t)v;
        break;
    case CT_DTYPE_COUNT:
        break;
    }
}

void ct_tensor_fill(ct_tensor *t, float v) {
    int64_t n = ct_tensor_numel(t);
    for (int64_t i = 0; i < n; i++)
        ct_tensor_set_f32(t, i, v);
}

ct_status ct_tensor_copy(ct_ctx *ctx, ct_tensor *dst, const ct_tensor *src) {
    int64_t n = ct_tensor_numel(src);
    if (n != ct_tensor_numel(dst)) {
        char a[200], b[200];
        return CT_FAIL(ctx, CT_ERR_SHAPE, "copy from %s into %s: element counts differ",
                       ct_shape_str(src, a, sizeof a), ct_shape_str(dst, b, sizeof b));
    }
    if (src->dtype == dst->dtype) {
        memmove(dst->data, src->data, ct_tensor_nbytes(src));
    } else if (src->dtype == CT_F32 && dst->dtype == CT_BF16) {
        ct_bf16_from_f32_n(dst->data, src->data, n);
    } else if (src->dtype == CT_BF16 && dst->dtype == CT_F32) {
        ct_f32_from_bf16_n(dst->data, src->data, n);
    } else if (src->dtype == CT_I64 && dst->dtype == CT_I32) {
        for (int64_t i = 0; i < n; i++)
            ((int32_t *)dst->data)[i] = (int32_t)((const int64_t *)src->data)[i];
    } else if (src->dtype == CT_I32 && dst->dtype == CT_I64) {
        for (int64_t i = 0; i < n; i++)
            ((int64_t *)dst->data)[i] = ((const int32_t *)src->data)[i];
    } else {
        for (int64_t i = 0; i < n; i++)
            ct_tensor_set_f32(dst, i, ct_tensor_get_f32(src, i));
    }
    return CT_OK;
}
