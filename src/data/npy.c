/*
 * npy.c - the "npy" dataset type: a features array and a labels array in NumPy .npy files
 * (format versions 1.0 and 2.0, little-endian, C order), plain or gzip-compressed.
 *
 * Invariant: both headers are parsed completely (a Python dict literal with exactly 'descr',
 * 'fortran_order' and 'shape'), every dimension and product is overflow-checked, and the data
 * size must equal the file size minus the header exactly, all before anything is allocated
 * beyond the file itself. Features keep u8 as u8 and become f32 otherwise (f8 and integers are
 * converted once, at load); integer labels become i64 class indices, float labels f32 values.
 * Float arrays are checked for inf and NaN in the same pass (one vectorised pass for f4 data
 * used in place), so that with nonfinite=error (the default) a bad value fails the open,
 * named by its offset and position, before any training starts; an f8 beyond the f32 range
 * counts as the inf it becomes.
 *
 * Ownership: the dataset owns one buffer for the features and one for the labels (the file
 * buffer itself when no conversion is needed), all from the context's allocator.
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "data/data_internal.h"

/* Sanity cap on one file's (decompressed) size, checked before it is allocated. */
#define NPY_MAX_BYTES ((size_t)(SIZE_MAX > 0xFFFFFFFFu ? (uint64_t)64 << 30 : SIZE_MAX))

enum {
    NPY_PREAMBLE_V1 = 10, /* magic(6) version(2) header_len(u16) */
    NPY_PREAMBLE_V2 = 12, /* magic(6) version(2) header_len(u32) */
    NPY_MAX_NDIM = 32,    /* numpy's own limit */
    NPY_MAX_CLASS =
        (1 << 24) - 1 /* as csv and one-hot: a corrupt label cannot make n_classes absurd */
};

/* One parsed .npy file: where its data is and what it holds. */
typedef struct npy_array {
    char kind;       /* 'f', 'i' or 'u' */
    size_t itemsize; /* 1, 4 or 8 */
    char descr[16];
    bool fortran;
    int32_t ndim;
    int64_t shape[NPY_MAX_NDIM];
    int64_t count;   /* elements */
    size_t data_off; /* file offset of the first element */
} npy_array;

typedef struct npy_ds {
    unsigned char *x_buf; /* owned; x_buf + x_off is the first sample */
    size_t x_buf_size, x_off, x_bytes;
    unsigned char *y_buf;
    size_t y_buf_size, y_off, y_bytes;
} npy_ds;

/* ---- little-endian loads (compilers turn these into plain loads on little-endian hosts) ---- */

static uint32_t le32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t le64(const unsigned char *p) {
    return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32;
}

static bool host_is_little_endian(void) {
    uint16_t one = 1;
    unsigned char b;
    memcpy(&b, &one, 1);
    return b == 1;
}

/* Element i of a little-endian array as a double / an integer. */
static double load_f(const unsigned char *p, size_t itemsize) {
    if (itemsize == 4) {
        uint32_t u = le32(p);
        float f;
        memcpy(&f, &u, 4);
        return (double)f;
    }
    uint64_t u = le64(p);
    double d;
    memcpy(&d, &u, 8);
    return d;
}

static int64_t load_i(const unsigned char *p, char kind, size_t itemsize) {
    if (itemsize == 1) return kind == 'u' ? (int64_t)p[0] : (int64_t)(int8_t)p[0];
    if (itemsize == 4) return (int64_t)(int32_t)le32(p);
    return (int64_t)le64(p);
}

/* Out-of-range doubles become infinities, as numpy's astype does (a plain cast is UB). */
static float to_f32(double v) {
    if (v > (double)FLT_MAX) return INFINITY;
    if (v < -(double)FLT_MAX) return -INFINITY;
    return (float)v;
}

/* ---- the header: a Python dict literal ---- */

typedef struct parser {
    ct_ctx *ctx;
    const char *path;
    const char *begin, *p, *end; /* the header text */
    size_t base;                 /* file offset of begin */
} parser;

static size_t at(const parser *ps, const char *p) {
    return ps->base + (size_t)(p - ps->begin);
}

/* A short printable quote of the text at p, for messages. */
static void excerpt(const char *p, const char *end, char *out, size_t n) {
    if (p >= end) {
        (void)snprintf(out, n, "the end of the header");
        return;
    }
    size_t o = 0;
    out[o++] = '\'';
    for (; p < end && o + 5 < n; p++)
        out[o++] = (*p >= 32 && *p < 127) ? *p : '?';
    if (p < end) memcpy(out + o - 3, "...", 3);
    out[o++] = '\'';
    out[o] = '\0';
}

static ct_status expected(parser *ps, const char *what) {
    char found[40];
    excerpt(ps->p, ps->end, found, sizeof found);
    return CT_FAIL(ps->ctx, CT_ERR_FORMAT,
                   "%s: offset %zu: expected %s in the .npy header, found %s", ps->path,
                   at(ps, ps->p), what, found);
}

static void skip_ws(parser *ps) {
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r'))
        ps->p++;
}

static bool accept(parser *ps, char c) {
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == c) {
        ps->p++;
        return true;
    }
    return false;
}

static ct_status parse_string(parser *ps, char *out, size_t n) {
    skip_ws(ps);
    if (ps->p >= ps->end || (*ps->p != '\'' && *ps->p != '"')) return expected(ps, "a string");
    char q = *ps->p;
    const char *s = ps->p + 1, *e = s;
    while (e < ps->end && *e != q)
        e++;
    if (e >= ps->end) return expected(ps, "a closed string");
    if ((size_t)(e - s) >= n) {
        char what[48];
        (void)snprintf(what, sizeof what, "a string of at most %zu characters", n - 1);
        return expected(ps, what);
    }
    memcpy(out, s, (size_t)(e - s));
    out[e - s] = '\0';
    ps->p = e + 1;
    return CT_OK;
}

static ct_status parse_bool(parser *ps, bool *out) {
    skip_ws(ps);
    size_t left = (size_t)(ps->end - ps->p);
    if (left >= 4 && memcmp(ps->p, "True", 4) == 0) {
        *out = true;
        ps->p += 4;
    } else if (left >= 5 && memcmp(ps->p, "False", 5) == 0) {
        *out = false;
        ps->p += 5;
    } else {
        return expected(ps, "True or False");
    }
    return CT_OK;
}

static ct_status parse_dim(parser *ps, int64_t *out) {
    skip_ws(ps);
    if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9')
        return expected(ps, "a non-negative integer dimension");
    const char *start = ps->p;
    int64_t v = 0;
    while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') {
        int digit = *ps->p - '0';
        if (v > (INT64_MAX - digit) / 10) {
            ps->p = start;
            return expected(ps, "a dimension below 2^63");
        }
        v = v * 10 + digit;
        ps->p++;
    }
    if (ps->p < ps->end && *ps->p == 'L') ps->p++; /* Python 2 longs */
    *out = v;
    return CT_OK;
}

static ct_status parse_shape(parser *ps, npy_array *a) {
    if (!accept(ps, '(')) return expected(ps, "a shape tuple '(...)'");
    a->ndim = 0;
    if (accept(ps, ')')) return CT_OK;
    for (;;) {
        if (a->ndim == NPY_MAX_NDIM) return expected(ps, "at most 32 dimensions");
        CT_TRY(parse_dim(ps, &a->shape[a->ndim]));
        a->ndim++;
        if (accept(ps, ')')) return CT_OK;
        if (!accept(ps, ',')) return expected(ps, "',' or ')' in the shape");
        if (accept(ps, ')')) return CT_OK;
    }
}

/* Checks descr against the supported element types; sets kind and itemsize. */
static ct_status check_descr(parser *ps, const char *where_p, npy_array *a) {
    const char *d = a->descr;
    size_t off = at(ps, where_p);
    char order = d[0];
    if (order != '<' && order != '>' && order != '|' && order != '=')
        return CT_FAIL(ps->ctx, CT_ERR_FORMAT,
                       "%s: offset %zu: expected a descr with a byte order ('<f4'), found '%s'",
                       ps->path, off, d);
    const char *t = d + 1;
    static const struct {
        const char *name;
        char kind;
        size_t size;
    } types[] = {{"f4", 'f', 4}, {"f8", 'f', 8}, {"i8", 'i', 8}, {"i4", 'i', 4}, {"u1", 'u', 1}};
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        if (strcmp(t, types[k].name) != 0) continue;
        if (types[k].size > 1 && order == '>')
            return CT_FAIL(ps->ctx, CT_ERR_FORMAT,
                           "%s: offset %zu: expected little-endian data ('<%s'), found big-endian "
                           "'%s' (hint: save it with arr.astype('<%s'))",
                           ps->path, off, t, d, t);
        if (types[k].size > 1 && order != '<')
            return CT_FAIL(ps->ctx, CT_ERR_FORMAT,
                           "%s: offset %zu: expected the byte order '<' for '%s', found '%s'",
                           ps->path, off, t, d);
        a->kind = types[k].kind;
        a->itemsize = types[k].size;
        return CT_OK;
    }
    return CT_FAIL(ps->ctx, CT_ERR_FORMAT,
                   "%s: offset %zu: expected descr '<f4', '<f8', '<i8', '<i4' or '|u1', found '%s' "
                   "(hint: convert with arr.astype('<f4'))",
                   ps->path, off, d);
}

static ct_status parse_dict(parser *ps, npy_array *a) {
    bool have_descr = false, have_fortran = false, have_shape = false;
    const char *descr_p = NULL;
    if (!accept(ps, '{')) return expected(ps, "'{'");
    for (;;) {
        if (accept(ps, '}')) break;
        char key[32];
        skip_ws(ps);
        const char *key_p = ps->p;
        CT_TRY(parse_string(ps, key, sizeof key));
        if (!accept(ps, ':')) return expected(ps, "':'");
        bool *have;
        if (strcmp(key, "descr") == 0) {
            have = &have_descr;
            skip_ws(ps);
            descr_p = ps->p;
            if (ps->p < ps->end && *ps->p == '[')
                return CT_FAIL(ps->ctx, CT_ERR_FORMAT,
                               "%s: offset %zu: expected a plain descr ('<f4'), found a structured "
                               "dtype (a list of fields), which is not supported",
                               ps->path, at(ps, ps->p));
            CT_TRY(parse_string(ps, a->descr, sizeof a->descr));
        } else if (strcmp(key, "fortran_order") == 0) {
            have = &have_fortran;
            CT_TRY(parse_bool(ps, &a->fortran));
        } else if (strcmp(key, "shape") == 0) {
            have = &have_shape;
            CT_TRY(parse_shape(ps, a));
        } else {
            return CT_FAIL(ps->ctx, CT_ERR_FORMAT,
                           "%s: offset %zu: expected the key 'descr', 'fortran_order' or 'shape' "
                           "in the .npy header, found '%s'",
                           ps->path, at(ps, key_p), key);
        }
        if (*have)
            return CT_FAIL(ps->ctx, CT_ERR_FORMAT,
                           "%s: offset %zu: the key '%s' appears twice in the .npy header",
                           ps->path, at(ps, key_p), key);
        *have = true;
        if (accept(ps, '}')) break;
        if (!accept(ps, ',')) return expected(ps, "',' or '}'");
    }
    skip_ws(ps);
    if (ps->p != ps->end) return expected(ps, "the end of the header after '}'");
    const char *missing = !have_descr     ? "descr"
                          : !have_fortran ? "fortran_order"
                          : !have_shape   ? "shape"
                                          : NULL;
    if (missing)
        return CT_FAIL(ps->ctx, CT_ERR_FORMAT,
                       "%s: offset %zu: expected the keys 'descr', 'fortran_order' and 'shape' in "
                       "the .npy header, found no '%s'",
                       ps->path, ps->base, missing);
    return check_descr(ps, descr_p, a);
}

static void shape_str(const npy_array *a, char *buf, size_t n) {
    size_t o = 0;
    o += (size_t)snprintf(buf, n, "(");
    for (int32_t d = 0; d < a->ndim && o < n; d++)
        o += (size_t)snprintf(buf + o, n - o, "%s%lld", d ? ", " : "", (long long)a->shape[d]);
    if (o < n) (void)snprintf(buf + o, n - o, a->ndim == 1 ? ",)" : ")");
}

/* Parses and validates a whole .npy file held in buf. */
static ct_status
parse_npy(ct_ctx *ctx, const char *path, const unsigned char *buf, size_t size, npy_array *a) {
    memset(a, 0, sizeof *a);
    if (size < NPY_PREAMBLE_V1 || memcmp(buf, "\x93NUMPY", 6) != 0) {
        char found[32] = "";
        size_t o = 0;
        for (size_t i = 0; i < 6 && i < size; i++)
            o += (size_t)snprintf(found + o, sizeof found - o, "%s%02x", i ? " " : "", buf[i]);
        return CT_FAIL(ctx, CT_ERR_FORMAT,
                       "%s: offset 0: expected the .npy magic 93 4e 55 4d 50 59 (\\x93NUMPY) and a "
                       "%d-byte preamble, found %s%s (%zu bytes)",
                       path, NPY_PREAMBLE_V1, size ? "" : "an empty file", found, size);
    }
    unsigned major = buf[6], minor = buf[7];
    size_t start, header_len;
    if (major == 1 && minor == 0) {
        start = NPY_PREAMBLE_V1;
        header_len = (size_t)buf[8] | (size_t)buf[9] << 8;
    } else if (major == 2 && minor == 0 && size >= NPY_PREAMBLE_V2) {
        start = NPY_PREAMBLE_V2;
        header_len = le32(buf + 8);
    } else {
        return CT_FAIL(ctx, CT_ERR_FORMAT,
                       "%s: offset 6: expected format version 1.0 or 2.0, found %u.%u%s", path,
                       major, minor, major == 2 && minor == 0 ? " (truncated preamble)" : "");
    }
    if (header_len > size - start)
        return CT_FAIL(ctx, CT_ERR_FORMAT,
                       "%s: offset 8: expected a header length of at most %zu (the rest of the "
                       "file), found %zu",
                       path, size - start, header_len);
    const char *text = (const char *)buf + start;
    parser ps = {ctx, path, text, text, text + header_len, start};
    CT_TRY(parse_dict(&ps, a));
    a->data_off = start + header_len;

    /* elements and bytes, overflow-checked, against what the file holds */
    char shape[160];
    shape_str(a, shape, sizeof shape);
    uint64_t count = 1;
    bool overflow = false;
    for (int32_t d = 0; d < a->ndim; d++)
        if (a->shape[d] == 0) count = 0; /* empty, however large the other dims */
    for (int32_t d = 0; d < a->ndim && count && !overflow; d++) {
        uint64_t dim = (uint64_t)a->shape[d];
        overflow = count > (uint64_t)INT64_MAX / dim;
        count *= overflow ? 1 : dim;
    }
    size_t found = size - a->data_off;
    if (overflow || count > (uint64_t)INT64_MAX / a->itemsize || count * a->itemsize != found) {
        char want[32] = "more than 2^63";
        if (!overflow && count <= (uint64_t)INT64_MAX / a->itemsize)
            (void)snprintf(want, sizeof want, "%llu", (unsigned long long)(count * a->itemsize));
        return CT_FAIL(
            ctx, CT_ERR_FORMAT,
            "%s: expected %s bytes of data (shape %s of '%s') after the %zu-byte header, "
            "found %zu",
            path, want, shape, a->descr, a->data_off, found);
    }
    a->count = (int64_t)count;
    if (a->fortran && a->ndim > 1)
        return CT_FAIL(ctx, CT_ERR_FORMAT,
                       "%s: expected fortran_order False (C order), found True for shape %s (hint: "
                       "save np.ascontiguousarray(arr))",
                       path, shape);
    return CT_OK;
}

/* ---- conversion ---- */

/* "element 7 (row 1, column 3)": where flat element i of a is, for messages. */
static void position_str(const npy_array *a, int64_t i, char *buf, size_t n) {
    size_t at = 0;
    int k = snprintf(buf, n, "element %lld", (long long)i);
    if (a->ndim == 1) (void)snprintf(buf + k, n - (size_t)k, " (row %lld)", (long long)i);
    if (a->ndim < 2) return;
    int64_t inner = a->count / a->shape[0], rest = i % inner;
    if (a->ndim == 2) {
        (void)snprintf(buf + k, n - (size_t)k, " (row %lld, column %lld)", (long long)(i / inner),
                       (long long)rest);
        return;
    }
    at = (size_t)k;
    at += (size_t)snprintf(buf + at, n - at, " (sample %lld, index [", (long long)(i / inner));
    for (int32_t d = 1; d < a->ndim && at < n; d++) {
        inner /= a->shape[d];
        at += (size_t)snprintf(buf + at, n - at, "%s%lld", d > 1 ? ", " : "",
                               (long long)(rest / inner));
        rest %= inner;
    }
    if (at < n) (void)snprintf(buf + at, n - at, "])");
}

/* The failure for element i, whose value as stored is v (f8 beyond the f32 range: finite). */
static ct_status
nonfinite_error(ct_ctx *ctx, const char *path, const npy_array *a, int64_t i, double v) {
    char pos[256], what[64];
    position_str(a, i, pos, sizeof pos);
    if (isnan(v))
        (void)snprintf(what, sizeof what, "NaN");
    else if (isinf(v))
        (void)snprintf(what, sizeof what, "%s", v > 0 ? "inf" : "-inf");
    else
        (void)snprintf(what, sizeof what, "%g, beyond the f32 range (it would be %s)", v,
                       v > 0 ? "inf" : "-inf");
    return CT_FAIL(ctx, CT_ERR_FORMAT,
                   "%s: offset %zu: %s is %s: expected finite values (key 'nonfinite': allow "
                   "loads them as they are)",
                   path, a->data_off + (size_t)i * a->itemsize, pos, what);
}

/* The first inf or NaN among n little-endian f4 at src, or -1 (src need not be aligned: the
 * header length of a hand-made file can be anything). */
static int64_t find_nonfinite_f4(const unsigned char *src, int64_t n) {
    if ((uintptr_t)src % _Alignof(float) == 0)
        return ct_data_find_nonfinite((const float *)(const void *)src, n);
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(load_f(src + (size_t)i * 4, 4))) return i;
    return -1;
}

/* Makes the array's data f32 in host order: in place when elements are 4 bytes, else into a new
 * buffer that replaces *buf (which is freed). *off is then the offset of the first element.
 * A float array with an inf or a NaN among its first `check` elements fails (and *buf stays
 * the file's); check 0 checks nothing (nonfinite=allow). */
static ct_status to_f32_array(ct_ctx *ctx,
                              const char *path,
                              const npy_array *a,
                              int64_t check,
                              unsigned char **buf,
                              size_t *buf_size,
                              size_t *off) {
    size_t n = (size_t)a->count;
    const unsigned char *src = *buf + a->data_off;
    if (a->kind != 'f') check = 0;
    if (a->kind == 'f' && a->itemsize == 4 && host_is_little_endian()) {
        int64_t bad = find_nonfinite_f4(src, check);
        if (bad >= 0) return nonfinite_error(ctx, path, a, bad, load_f(src + (size_t)bad * 4, 4));
        *off = a->data_off;
        return CT_OK;
    }
    unsigned char *dst = *buf + a->data_off;
    unsigned char *fresh = NULL;
    if (a->itemsize != 4) {
        fresh = ct_alloc(ctx, n * 4);
        if (!fresh) return CT_FAIL(ctx, CT_ERR_OOM, "%s: allocating %zu bytes of f32", path, n * 4);
        dst = fresh;
    }
    /* in place, each element is read before its own 4 bytes are written */
    int64_t bad = -1;
    double bad_v = 0.0;
    for (size_t i = 0; i < n; i++) {
        const unsigned char *p = src + i * a->itemsize;
        float f;
        if (a->kind == 'f') {
            double v = load_f(p, a->itemsize);
            f = to_f32(v);
            if ((int64_t)i < check && bad < 0 && !isfinite(f)) bad = (int64_t)i, bad_v = v;
        } else {
            f = (float)load_i(p, a->kind, a->itemsize);
        }
        memcpy(dst + i * 4, &f, 4);
    }
    if (bad >= 0) {
        ct_free(ctx, fresh, n * 4);
        return nonfinite_error(ctx, path, a, bad, bad_v);
    }
    if (fresh) {
        ct_free(ctx, *buf, *buf_size);
        *buf = fresh;
        *buf_size = n * 4;
        *off = 0;
    } else {
        *off = a->data_off;
    }
    return CT_OK;
}

/* Integer labels to a new i64 buffer replacing *buf, checking each is a class index. */
static ct_status to_classes(ct_ctx *ctx,
                            const char *path,
                            const npy_array *a,
                            unsigned char **buf,
                            size_t *buf_size,
                            int64_t *n_classes) {
    size_t n = (size_t)a->count;
    int64_t max = -1;
    for (size_t i = 0; i < n; i++) {
        size_t off = a->data_off + i * a->itemsize;
        int64_t v = load_i(*buf + off, a->kind, a->itemsize);
        if (v < 0 || v > NPY_MAX_CLASS)
            return CT_FAIL(ctx, CT_ERR_FORMAT,
                           "%s: offset %zu (label %zu): expected a class index in [0, %d], found "
                           "%lld",
                           path, off, i, NPY_MAX_CLASS, (long long)v);
        if (v > max) max = v;
    }
    int64_t *y = ct_alloc(ctx, n * sizeof *y);
    if (!y) return CT_FAIL(ctx, CT_ERR_OOM, "%s: allocating %zu labels", path, n);
    for (size_t i = 0; i < n; i++)
        y[i] = load_i(*buf + a->data_off + i * a->itemsize, a->kind, a->itemsize);
    ct_free(ctx, *buf, *buf_size);
    *buf = (unsigned char *)y;
    *buf_size = n * sizeof *y;
    *n_classes = max + 1;
    return CT_OK;
}

/* ---- the dataset ---- */

static void npy_close(ct_ctx *ctx, void *self) {
    npy_ds *d = self;
    if (!d) return;
    ct_free(ctx, d->x_buf, d->x_buf_size);
    ct_free(ctx, d->y_buf, d->y_buf_size);
    ct_free(ctx, d, sizeof *d);
}

static ct_status check_features(ct_ctx *ctx, const char *path, const npy_array *a) {
    char shape[160];
    shape_str(a, shape, sizeof shape);
    if (a->ndim < 1 || a->ndim > CT_MAX_DIMS + 1)
        return CT_FAIL(ctx, CT_ERR_FORMAT,
                       "%s: expected features of shape (N, ...) with 1 to %d dims, found shape %s",
                       path, CT_MAX_DIMS + 1, shape);
    for (int32_t d = 0; d < a->ndim; d++)
        if (a->shape[d] == 0)
            return CT_FAIL(
                ctx, CT_ERR_FORMAT,
                "%s: expected positive dims (at least one sample of at least one value), "
                "found shape %s",
                path, shape);
    return CT_OK;
}

static ct_status
check_labels(ct_ctx *ctx, const char *path, const npy_array *a, const char *x_path, int64_t n) {
    char shape[160];
    shape_str(a, shape, sizeof shape);
    bool is_int = a->kind != 'f';
    if (a->ndim < 1 || a->ndim > 2 || (is_int && a->ndim != 1))
        return CT_FAIL(ctx, CT_ERR_FORMAT,
                       "%s: expected labels of shape (N,) (class indices or values) or (N, k) "
                       "(float targets), found shape %s of '%s'",
                       path, shape, a->descr);
    if (a->shape[0] != n)
        return CT_FAIL(ctx, CT_ERR_FORMAT,
                       "%s: expected %lld labels (the samples in %s), found %lld (shape %s)", path,
                       (long long)n, x_path, (long long)a->shape[0], shape);
    if (a->ndim == 2 && a->shape[1] == 0)
        return CT_FAIL(ctx, CT_ERR_FORMAT, "%s: expected a positive target size k, found shape %s",
                       path, shape);
    return CT_OK;
}

static ct_status npy_load(ct_ctx *ctx,
                          npy_ds *d,
                          const char *x_path,
                          const char *y_path,
                          bool allow,
                          int64_t limit,
                          ct_dataset_info *info) {
    npy_array xa, ya;
    CT_TRY(ct_data_read_file(ctx, x_path, NPY_MAX_BYTES, &d->x_buf, &d->x_buf_size));
    CT_TRY(parse_npy(ctx, x_path, d->x_buf, d->x_buf_size, &xa));
    CT_TRY(check_features(ctx, x_path, &xa));
    /* the values of the samples in use (limit) are checked, unless allowed */
    int64_t rows = limit > 0 && limit < xa.shape[0] ? limit : xa.shape[0];
    int64_t x_check = allow ? 0 : rows * (xa.count / xa.shape[0]);
    if (!y_path) { /* unlabelled features (prediction): every target is class 0 */
        info->n = xa.shape[0];
        info->x_ndim = xa.ndim - 1;
        for (int32_t k = 1; k < xa.ndim; k++)
            info->x_shape[k - 1] = xa.shape[k];
        info->x_dtype = xa.kind == 'u' ? CT_U8 : CT_F32;
        if (xa.kind == 'u')
            d->x_off = xa.data_off;
        else
            CT_TRY(to_f32_array(ctx, x_path, &xa, x_check, &d->x_buf, &d->x_buf_size, &d->x_off));
        info->y_dtype = CT_I64;
        d->x_bytes = ct_data_sample_bytes(info->x_dtype, info->x_ndim, info->x_shape);
        d->y_bytes = sizeof(int64_t);
        return CT_OK;
    }
    CT_TRY(ct_data_read_file(ctx, y_path, NPY_MAX_BYTES, &d->y_buf, &d->y_buf_size));
    CT_TRY(parse_npy(ctx, y_path, d->y_buf, d->y_buf_size, &ya));
    CT_TRY(check_labels(ctx, y_path, &ya, x_path, xa.shape[0]));

    info->n = xa.shape[0];
    info->x_ndim = xa.ndim - 1;
    for (int32_t k = 1; k < xa.ndim; k++)
        info->x_shape[k - 1] = xa.shape[k];
    if (xa.kind == 'u') {
        info->x_dtype = CT_U8;
        d->x_off = xa.data_off;
    } else {
        info->x_dtype = CT_F32;
        CT_TRY(to_f32_array(ctx, x_path, &xa, x_check, &d->x_buf, &d->x_buf_size, &d->x_off));
    }
    if (ya.kind == 'f') {
        info->y_dtype = CT_F32;
        info->y_ndim = ya.ndim - 1;
        if (ya.ndim == 2) info->y_shape[0] = ya.shape[1];
        int64_t y_check = allow ? 0 : rows * (ya.count / ya.shape[0]);
        CT_TRY(to_f32_array(ctx, y_path, &ya, y_check, &d->y_buf, &d->y_buf_size, &d->y_off));
    } else {
        info->y_dtype = CT_I64;
        info->y_ndim = 0;
        CT_TRY(to_classes(ctx, y_path, &ya, &d->y_buf, &d->y_buf_size, &info->n_classes));
        d->y_off = 0;
    }
    d->x_bytes = ct_data_sample_bytes(info->x_dtype, info->x_ndim, info->x_shape);
    d->y_bytes = ct_data_sample_bytes(info->y_dtype, info->y_ndim, info->y_shape);
    return CT_OK;
}

/* The option keys, and those that name files (ct_dataset_vtable keys, path_keys). */
static const char *const npy_keys[] = {"features", "labels", "limit", "nonfinite", NULL};
static const char *const npy_path_keys[] = {"features", "labels", NULL};

static ct_status npy_open(ct_ctx *ctx, const ct_options *opts, ct_dataset_info *info, void **self) {
    *self = NULL;
    const char *x_path, *y_path;
    int64_t limit;
    bool allow;
    CT_TRY(ct_options_check(ctx, opts, npy_keys));
    CT_TRY(ct_options_string(ctx, opts, "features", NULL, &x_path));
    CT_TRY(ct_options_string(ctx, opts, "labels", "", &y_path));
    if (!y_path[0]) y_path = NULL;
    CT_TRY(ct_options_int(ctx, opts, "limit", 0, 0, INT64_MAX, &limit));
    CT_TRY(ct_data_nonfinite_option(ctx, opts, &allow));
    if (!info) return CT_OK; /* npy_check: the options only */
    npy_ds *d = ct_alloc(ctx, sizeof *d);
    if (!d) return CT_FAIL(ctx, CT_ERR_OOM, "npy: allocating the dataset");
    memset(d, 0, sizeof *d);
    memset(info, 0, sizeof *info);
    ct_status s = npy_load(ctx, d, x_path, y_path, allow, limit, info);
    if (s != CT_OK) {
        npy_close(ctx, d);
        memset(info, 0, sizeof *info);
        return s;
    }
    if (limit > 0 && limit < info->n) info->n = limit;
    *self = d;
    return CT_OK;
}

static ct_status npy_get(const void *self, int64_t i, void *x, void *y) {
    const npy_ds *d = self;
    memcpy(x, d->x_buf + d->x_off + (size_t)i * d->x_bytes, d->x_bytes);
    if (d->y_buf)
        memcpy(y, d->y_buf + d->y_off + (size_t)i * d->y_bytes, d->y_bytes);
    else
        memset(y, 0, d->y_bytes);
    return CT_OK;
}

static ct_status npy_check(ct_ctx *ctx, const ct_options *opts) {
    void *none;
    return npy_open(ctx, opts, NULL, &none);
}

const ct_dataset_vtable ct_dataset_npy = {0,         "npy",     npy_open, npy_get,
                                          npy_close, npy_check, npy_keys, npy_path_keys};
