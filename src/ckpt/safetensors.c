/*
 * safetensors.c - writing and reading a ct_params store (or, for checkpoint.c, any list of
 * named tensors: the optimizer's buffers) as a safetensors file.
 *
 * Writing: the JSON header is built by hand (names escaped), padded with spaces to a multiple
 * of 8 bytes, and written with the data to path.tmp, which is flushed, fsynced and renamed over
 * path; the directory is fsynced after the rename. The writer also returns the file's size and
 * CRC-32C, computed from the bytes as they go out, for a checkpoint's state.json. Reading: the
 * header is parsed with jansson and every number in it is checked against the file before it is
 * used; tensor data is read straight into the store's tensors (BF16, F16 and F64 converted to
 * f32 in small chunks), so loading never holds a second copy of the model. A store's aliases
 * (tied weights) are written as copies under their own names and read under either name; a
 * tensor read twice under two names is compared, not loaded twice.
 *
 * Ownership: all temporary memory comes from the context's allocator and is freed before
 * returning; jansson's own allocations are freed with json_decref.
 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/ckpt_internal.h"

#define MAX_HEADER ((uint64_t)100 << 20) /* as the reference implementation */

typedef struct st_dtype {
    const char *name;
    size_t size;
    ct_dtype ct; /* the ctrain dtype it loads into, CT_DTYPE_COUNT when none */
} st_dtype;

/* F16 and F64 load into f32 tensors, converted on load (as BF16 is); the rest only as
 * themselves. */
static const st_dtype dtypes[] = {
    {"F32", 4, CT_F32},          {"BF16", 2, CT_F32},        {"I64", 8, CT_I64},
    {"I32", 4, CT_I32},          {"U8", 1, CT_U8},           {"F16", 2, CT_F32},
    {"F64", 8, CT_F32},          {"I8", 1, CT_DTYPE_COUNT},  {"I16", 2, CT_DTYPE_COUNT},
    {"U16", 2, CT_DTYPE_COUNT},  {"U32", 4, CT_DTYPE_COUNT}, {"U64", 8, CT_DTYPE_COUNT},
    {"BOOL", 1, CT_DTYPE_COUNT},
};

static const char *dtype_name_of(ct_dtype dt) {
    switch (dt) {
    case CT_F32:
        return "F32";
    case CT_BF16:
        return "BF16";
    case CT_I32:
        return "I32";
    case CT_I64:
        return "I64";
    case CT_U8:
        return "U8";
    case CT_DTYPE_COUNT:
        break;
    }
    return NULL;
}

static const st_dtype *find_dtype(const char *name) {
    for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
        if (strcmp(dtypes[i].name, name) == 0) return &dtypes[i];
    return NULL;
}

ct_safetensors_load_params ct_safetensors_load_default_params(void) {
    ct_safetensors_load_params p = {true, NULL};
    return p;
}

/* ---- writing ---- */

void ct_ckpt_buf_put(ct_ckpt_buf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 1024;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *q = ct_alloc(b->ctx, cap);
        if (!q) {
            b->oom = true;
            return;
        }
        if (b->len) memcpy(q, b->p, b->len);
        ct_free(b->ctx, b->p, b->cap);
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void sb_str(ct_ckpt_buf *b, const char *s) {
    ct_ckpt_buf_put(b, s, strlen(s));
}

/* A JSON string literal. */
static void sb_json(ct_ckpt_buf *b, const char *s) {
    ct_ckpt_buf_put(b, "\"", 1);
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if (*c == '"' || *c == '\\') {
            char e[2] = {'\\', (char)*c};
            ct_ckpt_buf_put(b, e, 2);
        } else if (*c < 0x20) {
            char e[8];
            (void)snprintf(e, sizeof e, "\\u%04x", *c);
            ct_ckpt_buf_put(b, e, 6);
        } else {
            ct_ckpt_buf_put(b, (const char *)c, 1);
        }
    }
    ct_ckpt_buf_put(b, "\"", 1);
}

/* fsync the directory holding path, so that a rename survives a crash. */
static ct_status sync_dir(ct_ctx *ctx, const char *path) {
    char dir[4096];
    const char *slash = strrchr(path, '/');
    if (!slash) {
        dir[0] = '.';
        dir[1] = '\0';
    } else {
        size_t n = (size_t)(slash - path);
        if (n == 0) n = 1; /* "/file" */
        if (n >= sizeof dir) return CT_FAIL(ctx, CT_ERR_IO, "%s: path too long", path);
        memcpy(dir, path, n);
        dir[n] = '\0';
    }
    int fd = open(dir, O_RDONLY);
    if (fd < 0) return ct_ckpt_io_fail(ctx, dir, "opening the directory");
    int r = fsync(fd);
    close(fd);
    return r == 0 ? CT_OK : ct_ckpt_io_fail(ctx, dir, "fsync of the directory");
}

/* fwrite that also counts the bytes and carries their CRC-32C. */
static bool put(FILE *f, const void *p, size_t n, uint64_t *bytes, uint32_t *crc) {
    if (n == 0) return true;
    *crc = ct_crc32c(*crc, p, n);
    *bytes += n;
    return fwrite(p, 1, n, f) == n;
}

/* The header: the metadata, then each tensor's dtype, shape and data offsets, padded with
 * spaces to a multiple of 8 bytes so that the data start aligned. The caller frees b->p (b->cap
 * bytes), also after a failure. */
static ct_status build_header(ct_ckpt_buf *b,
                              const char *path,
                              const ct_tensor *const *tensors,
                              int64_t n_tensors,
                              const ct_option *metadata,
                              int64_t n_metadata,
                              ct_dtype f32_as) {
    sb_str(b, "{\"__metadata__\":{\"format\":\"pt\"");
    for (int64_t i = 0; i < n_metadata; i++) {
        sb_str(b, ",");
        sb_json(b, metadata[i].key);
        sb_str(b, ":");
        sb_json(b, metadata[i].value);
    }
    sb_str(b, "}");
    uint64_t offset = 0;
    for (int64_t i = 0; i < n_tensors; i++) {
        const ct_tensor *t = tensors[i];
        ct_dtype dt = t->dtype == CT_F32 ? f32_as : t->dtype;
        const char *dn = dtype_name_of(dt);
        if (!dn)
            return CT_FAIL(b->ctx, CT_ERR_INVALID_ARG, "%s: tensor '%s' has dtype %d", path,
                           t->name, (int)t->dtype);
        char num[64];
        sb_str(b, ",");
        sb_json(b, t->name);
        sb_str(b, ":{\"dtype\":\"");
        sb_str(b, dn);
        sb_str(b, "\",\"shape\":[");
        for (int32_t d = 0; d < t->ndim; d++) {
            (void)snprintf(num, sizeof num, d ? ",%lld" : "%lld", (long long)t->shape[d]);
            sb_str(b, num);
        }
        uint64_t end = offset + (uint64_t)ct_tensor_numel(t) * ct_dtype_size(dt);
        (void)snprintf(num, sizeof num, "],\"data_offsets\":[%llu,%llu]}",
                       (unsigned long long)offset, (unsigned long long)end);
        sb_str(b, num);
        offset = end;
    }
    sb_str(b, "}");
    while (!b->oom && b->len % 8 != 0)
        sb_str(b, " ");
    if (b->oom) return CT_FAIL(b->ctx, CT_ERR_OOM, "%s: building the header", path);
    return CT_OK;
}

/* An f32 tensor's data as bf16, rounded in chunks (no copy of the tensor is held). */
static bool put_bf16(FILE *f, const ct_tensor *t, uint64_t *bytes, uint32_t *crc) {
    ct_bf16 chunk[4096];
    const float *x = t->data;
    int64_t n = ct_tensor_numel(t);
    bool ok = true;
    for (int64_t i = 0; ok && i < n; i += 4096) {
        int64_t k = n - i < 4096 ? n - i : 4096;
        ct_bf16_from_f32_n(chunk, x + i, k);
        ok = put(f, chunk, (size_t)k * sizeof *chunk, bytes, crc);
    }
    return ok;
}

/* Writes the header's length, the header and the tensors' data (f32 ones as f32_as) into f
 * (open on tmp), flushes them to disk and closes f. *bytes and *crc count what went out. */
static ct_status write_contents(ct_ctx *ctx,
                                FILE *f,
                                const char *tmp,
                                const ct_ckpt_buf *b,
                                const ct_tensor *const *tensors,
                                int64_t n_tensors,
                                ct_dtype f32_as,
                                uint64_t *bytes,
                                uint32_t *crc) {
    unsigned char len8[8];
    for (int i = 0; i < 8; i++)
        len8[i] = (unsigned char)((uint64_t)b->len >> (8 * i));
    bool ok = put(f, len8, 8, bytes, crc) && put(f, b->p, b->len, bytes, crc);
    for (int64_t i = 0; ok && i < n_tensors; i++)
        ok = tensors[i]->dtype == CT_F32 && f32_as == CT_BF16
                 ? put_bf16(f, tensors[i], bytes, crc)
                 : put(f, tensors[i]->data, ct_tensor_nbytes(tensors[i]), bytes, crc);
    ok = ok && fflush(f) == 0 && fsync(fileno(f)) == 0;
    ct_status s = ok ? CT_OK : ct_ckpt_io_fail(ctx, tmp, "writing");
    if (fclose(f) != 0 && s == CT_OK) s = ct_ckpt_io_fail(ctx, tmp, "closing");
    return s;
}

ct_status ct_st_write(ct_ctx *ctx,
                      const char *path,
                      const ct_tensor *const *tensors,
                      int64_t n_tensors,
                      const ct_option *metadata,
                      int64_t n_metadata,
                      uint64_t *bytes_out,
                      uint32_t *crc_out) {
    return ct_st_write_as(ctx, path, tensors, n_tensors, metadata, n_metadata, CT_F32, bytes_out,
                          crc_out);
}

ct_status ct_st_write_as(ct_ctx *ctx,
                         const char *path,
                         const ct_tensor *const *tensors,
                         int64_t n_tensors,
                         const ct_option *metadata,
                         int64_t n_metadata,
                         ct_dtype f32_as,
                         uint64_t *bytes_out,
                         uint32_t *crc_out) {
    if (f32_as != CT_F32 && f32_as != CT_BF16)
        return CT_FAIL(ctx, CT_ERR_INVALID_ARG,
                       "%s: f32 tensors are written as f32 or bf16, not %s", path,
                       ct_dtype_name(f32_as));
    for (int64_t i = 0; i < n_metadata; i++)
        if (strcmp(metadata[i].key, "format") == 0)
            return CT_FAIL(ctx, CT_ERR_INVALID_ARG, "%s: metadata key 'format' is reserved", path);
    ct_ckpt_buf b = {ctx, NULL, 0, 0, false};
    ct_status s = build_header(&b, path, tensors, n_tensors, metadata, n_metadata, f32_as);
    char tmp[4096];
    if (s == CT_OK && (size_t)snprintf(tmp, sizeof tmp, "%s.tmp", path) >= sizeof tmp)
        s = CT_FAIL(ctx, CT_ERR_IO, "%s: path too long", path);
    FILE *f = s == CT_OK ? fopen(tmp, "wb") : NULL;
    if (s == CT_OK && !f) s = ct_ckpt_io_fail(ctx, tmp, "opening for writing");
    if (s != CT_OK) {
        ct_free(ctx, b.p, b.cap);
        return s;
    }
    uint64_t bytes = 0;
    uint32_t crc = 0;
    s = write_contents(ctx, f, tmp, &b, tensors, n_tensors, f32_as, &bytes, &crc);
    ct_free(ctx, b.p, b.cap);
    if (s == CT_OK && rename(tmp, path) != 0)
        s = ct_ckpt_io_fail(ctx, path, "renaming the .tmp file to");
    if (s != CT_OK) {
        (void)remove(tmp); /* the previous file at path, if any, is untouched */
        return s;
    }
    if (bytes_out) *bytes_out = bytes;
    if (crc_out) *crc_out = crc;
    return sync_dir(ctx, path);
}

ct_status ct_ckpt_store_list(ct_ctx *ctx, const ct_params *store, ct_ckpt_list *out) {
    memset(out, 0, sizeof *out);
    out->ctx = ctx;
    int64_t n = ct_params_count(store), na = ct_params_alias_count(store);
    out->v_size = (size_t)(n + na + 1) * sizeof *out->v;
    out->views_size = (size_t)(na + 1) * sizeof *out->views;
    out->v = ct_alloc(ctx, out->v_size);
    out->views = ct_alloc(ctx, out->views_size);
    if (!out->v || !out->views) {
        ct_ckpt_list_fini(out);
        return CT_FAIL(ctx, CT_ERR_OOM, "listing %lld tensors", (long long)(n + na));
    }
    for (int64_t i = 0; i < n; i++)
        out->v[out->n++] = ct_params_at(store, i);
    for (int64_t i = 0; i < na; i++) {
        ct_tensor *t;
        const char *name = ct_params_alias_at(store, i, &t);
        out->views[i] = *t;
        out->views[i].name = name;
        out->v[out->n++] = &out->views[i];
    }
    return CT_OK;
}

void ct_ckpt_list_fini(ct_ckpt_list *l) {
    ct_free(l->ctx, l->v, l->v_size);
    ct_free(l->ctx, l->views, l->views_size);
    memset(l, 0, sizeof *l);
}

ct_status ct_safetensors_save(ct_ctx *ctx,
                              const ct_params *params,
                              const char *path,
                              const ct_option *metadata,
                              int64_t n_metadata) {
    return ct_safetensors_save_as(ctx, params, path, metadata, n_metadata, CT_F32);
}

ct_status ct_safetensors_save_as(ct_ctx *ctx,
                                 const ct_params *params,
                                 const char *path,
                                 const ct_option *metadata,
                                 int64_t n_metadata,
                                 ct_dtype dtype) {
    if (!ct_params_values(params) && ct_params_count(params) > 0)
        return CT_FAIL(ctx, CT_ERR_INVALID_ARG, "%s: the parameter store is not allocated", path);
    ct_ckpt_list l;
    if (ct_ckpt_store_list(ctx, params, &l) != CT_OK) return ct_err_wrap(ctx, "%s", path);
    ct_status s = ct_st_write_as(ctx, path, l.v, l.n, metadata, n_metadata, dtype, NULL, NULL);
    ct_ckpt_list_fini(&l);
    return s;
}

/* ---- reading ---- */

typedef struct entry {
    const char *name;
    const st_dtype *dt;
    int64_t shape[CT_MAX_DIMS];
    int32_t ndim;
    uint64_t begin, end;
} entry;

/* By (begin, end): an empty tensor at an offset sorts before the one that starts there, so
 * the order of the header's keys does not matter. */
static int cmp_begin(const void *a, const void *b) {
    const entry *x = a, *y = b;
    if (x->begin != y->begin) return (x->begin > y->begin) - (x->begin < y->begin);
    return (x->end > y->end) - (x->end < y->end);
}

static char *shape_text(const int64_t *shape, int32_t ndim, char *buf, size_t size) {
    size_t off = (size_t)snprintf(buf, size, "[");
    for (int32_t d = 0; d < ndim && off < size; d++)
        off += (size_t)snprintf(buf + off, size - off, d ? ",%lld" : "%lld", (long long)shape[d]);
    if (off < size) (void)snprintf(buf + off, size - off, "]");
    return buf;
}

/* Parses one header entry; false (and a message) when it is malformed. */
static ct_status parse_entry(
    ct_ctx *ctx, const char *path, const char *name, json_t *v, uint64_t data_size, entry *e) {
    json_t *dt = json_object_get(v, "dtype"), *sh = json_object_get(v, "shape");
    json_t *off = json_object_get(v, "data_offsets");
    if (!json_is_object(v) || !json_is_string(dt) || !json_is_array(sh) || !json_is_array(off) ||
        json_array_size(off) != 2 || json_object_size(v) != 3)
        return CT_FAIL(ctx, CT_ERR_FORMAT,
                       "%s: tensor '%s': expected {\"dtype\", \"shape\", \"data_offsets\": [begin, "
                       "end]}",
                       path, name);
    e->name = name;
    e->dt = find_dtype(json_string_value(dt));
    if (!e->dt)
        return CT_FAIL(ctx, CT_ERR_FORMAT, "%s: tensor '%s': unknown dtype '%s'", path, name,
                       json_string_value(dt));
    if (json_array_size(sh) > CT_MAX_DIMS)
        return CT_FAIL(ctx, CT_ERR_FORMAT, "%s: tensor '%s': %zu dimensions, at most %d", path,
                       name, json_array_size(sh), CT_MAX_DIMS);
    e->ndim = (int32_t)json_array_size(sh);
    uint64_t numel = 1;
    for (int32_t d = 0; d < e->ndim; d++) {
        json_t *x = json_array_get(sh, (size_t)d);
        if (!json_is_integer(x) || json_integer_value(x) < 0)
            return CT_FAIL(ctx, CT_ERR_FORMAT,
                           "%s: tensor '%s': shape entry %d is not a non-negative integer", path,
                           name, (int)d);
        e->shape[d] = (int64_t)json_integer_value(x);
        uint64_t dim = (uint64_t)e->shape[d];
        if (dim && numel > data_size / dim + 1)
            numel = data_size + 1; /* too big: caught below */
        else
            numel *= dim;
    }
    json_t *b0 = json_array_get(off, 0), *b1 = json_array_get(off, 1);
    if (!json_is_integer(b0) || !json_is_integer(b1) || json_integer_value(b0) < 0 ||
        json_integer_value(b1) < json_integer_value(b0))
        return CT_FAIL(ctx, CT_ERR_FORMAT,
                       "%s: tensor '%s': data_offsets must be two integers 0 <= begin <= end", path,
                       name);
    e->begin = (uint64_t)json_integer_value(b0);
    e->end = (uint64_t)json_integer_value(b1);
    if (e->end > data_size)
        return CT_FAIL(ctx, CT_ERR_FORMAT,
                       "%s: tensor '%s': data_offsets [%llu, %llu] run past the %llu bytes of data",
                       path, name, (unsigned long long)e->begin, (unsigned long long)e->end,
                       (unsigned long long)data_size);
    char sb[200];
    if (numel > data_size || numel * e->dt->size != e->end - e->begin)
        return CT_FAIL(ctx, CT_ERR_FORMAT,
                       "%s: tensor '%s': %s %s needs %llu bytes, data_offsets give %llu", path,
                       name, e->dt->name, shape_text(e->shape, e->ndim, sb, sizeof sb),
                       (unsigned long long)(numel > data_size ? numel : numel * e->dt->size),
                       (unsigned long long)(e->end - e->begin));
    return CT_OK;
}

static ct_status
read_at(ct_ctx *ctx, FILE *f, const char *path, uint64_t pos, void *dst, size_t n) {
    errno = 0;
    if (fseeko(f, (off_t)pos, SEEK_SET) != 0 || fread(dst, 1, n, f) != n)
        return CT_FAIL(ctx, CT_ERR_IO, "%s: reading %zu bytes at offset %llu failed%s%s", path, n,
                       (unsigned long long)pos, errno ? ": " : "", errno ? strerror(errno) : "");
    return CT_OK;
}

/* IEEE 754 half precision to single, subnormals, infinities and NaN included. */
static float f32_from_f16(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    uint32_t bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (man << 13);
    } else if (exp != 0) {
        bits = sign | ((exp + 112) << 23) | (man << 13);
    } else if (man == 0) {
        bits = sign;
    } else { /* man * 2^-24: normalised to 1.f * 2^(e - 127) */
        exp = 113;
        while (!(man & 0x400u)) {
            man <<= 1;
            exp--;
        }
        bits = sign | (exp << 23) | ((man & 0x3ffu) << 13);
    }
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* k elements of a BF16, F16 or F64 tensor's little-endian bytes as f32 (F64 rounded). */
static void convert_to_f32(const char *dtype, const unsigned char *src, float *dst, int64_t k) {
    if (strcmp(dtype, "BF16") == 0) {
        for (int64_t i = 0; i < k; i++) {
            uint32_t bits = (uint32_t)(src[2 * i] | src[2 * i + 1] << 8) << 16;
            memcpy(&dst[i], &bits, sizeof bits);
        }
    } else if (strcmp(dtype, "F16") == 0) {
        for (int64_t i = 0; i < k; i++)
            dst[i] = f32_from_f16((uint16_t)(src[2 * i] | src[2 * i + 1] << 8));
    } else {
        for (int64_t i = 0; i < k; i++) {
            double d;
            memcpy(&d, src + 8 * i, sizeof d);
            dst[i] = (float)d;
        }
    }
}

/* Whether entry e converts to f32 on load (rather than being read as it is). */
static bool converts(const entry *e, ct_dtype dst) {
    return dst == CT_F32 && e->dt->ct == CT_F32 && strcmp(e->dt->name, "F32") != 0;
}

/* Reads entry e's data into dst, numel elements of dtype dt (t names the target in messages):
 * the bytes as they are when the dtypes agree, else f32 from BF16, F16 or F64 in chunks. */
static ct_status load_entry(ct_ctx *ctx,
                            FILE *f,
                            const char *path,
                            uint64_t base,
                            const entry *e,
                            void *dst,
                            ct_dtype dt,
                            const ct_tensor *t) {
    size_t n = (size_t)(e->end - e->begin);
    const char *own = dtype_name_of(dt);
    if (own && strcmp(own, e->dt->name) == 0)
        return n ? read_at(ctx, f, path, base + e->begin, dst, n) : CT_OK;
    if (converts(e, dt)) {
        unsigned char chunk[4096 * 8];
        size_t esz = e->dt->size;
        int64_t total = (int64_t)(n / esz), per = (int64_t)(sizeof chunk / esz);
        for (int64_t i = 0; i < total; i += per) {
            int64_t k = total - i < per ? total - i : per;
            CT_TRY(
                read_at(ctx, f, path, base + e->begin + (uint64_t)i * esz, chunk, (size_t)k * esz));
            convert_to_f32(e->dt->name, chunk, (float *)dst + i, k);
        }
        return CT_OK;
    }
    return CT_FAIL(ctx, CT_ERR_FORMAT, "%s: tensor '%s': dtype %s cannot load into %s '%s'", path,
                   e->name, e->dt->name, ct_dtype_name(dt), t->name);
}

/* The target of a read: a store (params) or else a plain list of tensors, matched by name
 * after the prefix; `what` names it in messages. */
typedef struct st_target {
    ct_params *params;
    ct_tensor *const *list;
    int64_t n_list;
    const char *prefix;
    size_t plen;
    bool strict;
    const char *what;
} st_target;

static int64_t target_count(const st_target *tg) {
    return tg->params ? ct_params_count(tg->params) : tg->n_list;
}

static ct_tensor *target_at(const st_target *tg, int64_t i) {
    return tg->params ? ct_params_at(tg->params, i) : tg->list[i];
}

static ct_tensor *target_find(const st_target *tg, const char *name) {
    if (tg->params) return ct_params_find(tg->params, name);
    for (int64_t i = 0; i < tg->n_list; i++)
        if (strcmp(tg->list[i]->name, name) == 0) return tg->list[i];
    return NULL;
}

/* A safetensors file being read: its header, parsed and checked, and where its data lie. */
typedef struct st_file {
    ct_ctx *ctx;
    const char *path;
    FILE *f;
    char *header; /* hlen bytes */
    uint64_t hlen;
    json_t *root;
    entry *entries; /* count slots (the header's keys); n_entries of them tensors */
    size_t count, n_entries;
    uint64_t base, data_size; /* the data's offset in the file and their length */
} st_file;

/* Frees what reading sf holds and closes its file (when open). */
static void close_file(st_file *sf) {
    json_decref(sf->root);
    ct_free(sf->ctx, sf->entries, (sf->count ? sf->count : 1) * sizeof *sf->entries);
    ct_free(sf->ctx, sf->header, (size_t)sf->hlen);
    if (sf->f) (void)fclose(sf->f);
}

/* Reads the header's length and the JSON header, checked against the file's size. */
static ct_status read_header(st_file *sf) {
    ct_ctx *ctx = sf->ctx;
    const char *path = sf->path;
    struct stat stt;
    if (fstat(fileno(sf->f), &stt) != 0) return ct_ckpt_io_fail(ctx, path, "fstat");
    uint64_t size = (uint64_t)stt.st_size;
    unsigned char len8[8];
    if (size < 8 || fread(len8, 1, 8, sf->f) != 8)
        return CT_FAIL(ctx, CT_ERR_FORMAT, "%s: %llu bytes: too short for a safetensors file", path,
                       (unsigned long long)size);
    uint64_t hlen = 0;
    for (int i = 0; i < 8; i++)
        hlen |= (uint64_t)len8[i] << (8 * i);
    if (hlen > size - 8 || hlen > MAX_HEADER || hlen < 2)
        return CT_FAIL(ctx, CT_ERR_FORMAT,
                       "%s: offset 0: header length %llu does not fit the file of %llu bytes (or "
                       "exceeds %llu)",
                       path, (unsigned long long)hlen, (unsigned long long)size,
                       (unsigned long long)MAX_HEADER);
    sf->hlen = hlen;
    sf->header = ct_alloc(ctx, (size_t)hlen);
    if (!sf->header)
        return CT_FAIL(ctx, CT_ERR_OOM, "%s: allocating the %llu-byte header", path,
                       (unsigned long long)hlen);
    if (fread(sf->header, 1, (size_t)hlen, sf->f) != (size_t)hlen)
        return CT_FAIL(ctx, CT_ERR_IO, "%s: reading the header failed", path);
    json_error_t jerr;
    sf->root = json_loadb(sf->header, (size_t)hlen, JSON_REJECT_DUPLICATES, &jerr);
    if (!sf->root || !json_is_object(sf->root))
        return CT_FAIL(ctx, CT_ERR_FORMAT, "%s: header JSON, line %d column %d: %s", path,
                       sf->root ? 0 : jerr.line, sf->root ? 0 : jerr.column,
                       sf->root ? "expected an object" : jerr.text);
    sf->data_size = size - 8 - hlen;
    sf->base = 8 + hlen;
    return CT_OK;
}

/* __metadata__ is an object of strings. */
static ct_status check_metadata(const st_file *sf, json_t *meta) {
    if (!json_is_object(meta))
        return CT_FAIL(sf->ctx, CT_ERR_FORMAT, "%s: __metadata__ must be an object", sf->path);
    const char *mk;
    json_t *mv;
    json_object_foreach(meta, mk, mv) {
        if (!json_is_string(mv))
            return CT_FAIL(sf->ctx, CT_ERR_FORMAT, "%s: __metadata__ '%s' is not a string",
                           sf->path, mk);
    }
    return CT_OK;
}

/* Parses the header's tensor entries (parse_entry) and checks its metadata. */
static ct_status read_entries(st_file *sf) {
    sf->count = json_object_size(sf->root);
    sf->entries = ct_alloc(sf->ctx, (sf->count ? sf->count : 1) * sizeof *sf->entries);
    if (!sf->entries)
        return CT_FAIL(sf->ctx, CT_ERR_OOM, "%s: allocating %zu header entries", sf->path,
                       sf->count);
    const char *key;
    json_t *val;
    json_object_foreach(sf->root, key, val) {
        if (strcmp(key, "__metadata__") == 0) {
            CT_TRY(check_metadata(sf, val));
            continue;
        }
        CT_TRY(
            parse_entry(sf->ctx, sf->path, key, val, sf->data_size, &sf->entries[sf->n_entries]));
        sf->n_entries++;
    }
    return CT_OK;
}

/* The ranges must tile the data exactly: no overlap, no gap, nothing after. Sorts the entries
 * by offset. */
static ct_status check_tiling(st_file *sf) {
    qsort(sf->entries, sf->n_entries, sizeof *sf->entries, cmp_begin);
    uint64_t at = 0;
    for (size_t i = 0; i < sf->n_entries; i++) {
        const entry *e = &sf->entries[i];
        if (e->begin != at)
            return CT_FAIL(sf->ctx, CT_ERR_FORMAT,
                           "%s: tensor '%s': data starts at %llu, expected %llu (tensors must "
                           "tile the data without gaps or overlaps)",
                           sf->path, e->name, (unsigned long long)e->begin, (unsigned long long)at);
        at = e->end;
    }
    if (at != sf->data_size)
        return CT_FAIL(sf->ctx, CT_ERR_FORMAT, "%s: the tensors cover %llu of %llu bytes of data",
                       sf->path, (unsigned long long)at, (unsigned long long)sf->data_size);
    return CT_OK;
}

/* What a read found: for each target tensor the file name it was loaded from (NULL: not
 * loaded; a tied tensor met again under another name is compared, not loaded twice), and how
 * many tensors were loaded and converted on the way (BF16, F16, F64 to f32). */
typedef struct st_result {
    const char **from; /* target_count entries */
    size_t from_size;
    int64_t n_loaded;
    int64_t n_converted[3];
} st_result;

static const char *const converted_names[3] = {"BF16", "F16", "F64"};

static int64_t target_index(const st_target *tg, const ct_tensor *t) {
    for (int64_t i = 0; i < target_count(tg); i++)
        if (target_at(tg, i) == t) return i;
    return -1;
}

/* The target tensor entry e names (after the prefix), or NULL. */
static ct_tensor *target_of(const st_target *tg, const entry *e) {
    if (strncmp(e->name, tg->prefix, tg->plen) != 0) return NULL;
    return target_find(tg, e->name + tg->plen);
}

/* A tensor the file holds again under another of its names (a tied weight under both): the
 * values there must equal the ones loaded from `first`. */
static ct_status
check_same(const st_file *sf, const entry *e, const ct_tensor *t, const char *first) {
    size_t es = ct_dtype_size(t->dtype), size = (size_t)ct_tensor_numel(t) * es;
    unsigned char *tmp = ct_alloc(sf->ctx, size ? size : 1);
    if (!tmp)
        return CT_FAIL(sf->ctx, CT_ERR_OOM, "%s: tensor '%s': allocating %zu bytes to compare",
                       sf->path, e->name, size);
    ct_status s = load_entry(sf->ctx, sf->f, sf->path, sf->base, e, tmp, t->dtype, t);
    const unsigned char *have = t->data;
    if (s == CT_OK && size && memcmp(tmp, have, size) != 0) {
        size_t i = 0;
        while (memcmp(tmp + i * es, have + i * es, es) == 0)
            i++;
        char vals[96] = "";
        if (t->dtype == CT_F32) {
            float a, b;
            memcpy(&a, have + i * es, sizeof a);
            memcpy(&b, tmp + i * es, sizeof b);
            (void)snprintf(vals, sizeof vals, " (%.9g and %.9g)", (double)a, (double)b);
        }
        s = CT_FAIL(sf->ctx, CT_ERR_FORMAT,
                    "%s: tensors '%s' and '%s' name one tied parameter ('%s') but their values "
                    "differ at element %zu%s (hint: keep one of the names, or save the tied "
                    "model again)",
                    sf->path, first, e->name, t->name, i, vals);
    }
    ct_free(sf->ctx, tmp, size ? size : 1);
    return s;
}

/* Loads each entry into the target tensor of its name (shapes must agree); with strict, an
 * entry that names none is an error. */
static ct_status load_matching(const st_file *sf, const st_target *tg, st_result *r) {
    for (size_t i = 0; i < sf->n_entries; i++) {
        const entry *e = &sf->entries[i];
        ct_tensor *t = target_of(tg, e);
        if (!t) {
            if (tg->strict)
                return CT_FAIL(sf->ctx, CT_ERR_FORMAT,
                               "%s: tensor '%s' is not a %s of %s (strict loading)", sf->path,
                               e->name, tg->params ? "parameter or buffer" : "tensor", tg->what);
            continue;
        }
        char a[200], b2[200];
        if (e->ndim != t->ndim || memcmp(e->shape, t->shape, (size_t)e->ndim * 8) != 0)
            return CT_FAIL(sf->ctx, CT_ERR_SHAPE, "%s: tensor '%s': shape %s, %s expects %s",
                           sf->path, e->name, shape_text(e->shape, e->ndim, a, sizeof a), tg->what,
                           ct_shape_str(t, b2, sizeof b2));
        int64_t k = target_index(tg, t);
        if (r->from[k]) {
            CT_TRY(check_same(sf, e, t, r->from[k]));
            continue;
        }
        CT_TRY(load_entry(sf->ctx, sf->f, sf->path, sf->base, e, t->data, t->dtype, t));
        r->from[k] = e->name;
        r->n_loaded++;
        for (int c = 0; c < 3 && converts(e, t->dtype); c++)
            if (strcmp(e->dt->name, converted_names[c]) == 0) r->n_converted[c]++;
    }
    return CT_OK;
}

/* With strict: the first target tensor the file lacks (under every name) is an error. */
static ct_status check_complete(const st_file *sf, const st_target *tg, const st_result *r) {
    for (int64_t i = 0; i < target_count(tg); i++)
        if (!r->from[i])
            return CT_FAIL(sf->ctx, CT_ERR_FORMAT, "%s: %s's '%s%s' is missing (strict loading)",
                           sf->path, tg->what, tg->prefix, target_at(tg, i)->name);
    return CT_OK;
}

/* Appends name to a list of at most max names, then counts the rest in *more. */
static void list_name(ct_ckpt_buf *b, const char *prefix, const char *name, int64_t *n, int max) {
    if ((*n)++ >= max) return;
    if (*n > 1) ct_ckpt_buf_put(b, ", ", 2);
    ct_ckpt_buf_put(b, prefix, strlen(prefix));
    ct_ckpt_buf_put(b, name, strlen(name));
}

static const char *list_text(ct_ckpt_buf *b, int64_t n, int max, char *tail, size_t size) {
    tail[0] = '\0';
    if (n > max) (void)snprintf(tail, size, ", and %lld more", (long long)(n - max));
    return b->p ? b->p : "";
}

/* Without strict: what was left out, as PyTorch's load_state_dict(strict=False) returns it,
 * in a warning; a file none of whose tensors fits is an error. */
static ct_status report_partial(const st_file *sf, const st_target *tg, const st_result *r) {
    ct_ctx *ctx = sf->ctx;
    bool none = r->n_loaded == 0 && (sf->n_entries > 0 || target_count(tg) > 0);
    int max = none ? 4 : 12;
    ct_ckpt_buf miss = {ctx, NULL, 0, 0, false}, extra = {ctx, NULL, 0, 0, false};
    int64_t n_miss = 0, n_extra = 0;
    for (int64_t i = 0; i < target_count(tg); i++)
        if (!r->from[i]) list_name(&miss, tg->prefix, target_at(tg, i)->name, &n_miss, max);
    for (size_t i = 0; i < sf->n_entries; i++)
        if (!target_of(tg, &sf->entries[i]))
            list_name(&extra, "", sf->entries[i].name, &n_extra, max);
    char t1[48], t2[48];
    ct_status s = CT_OK;
    if (miss.oom || extra.oom) {
        s = CT_FAIL(ctx, CT_ERR_OOM, "%s: listing the tensors that were not loaded", sf->path);
    } else if (none) {
        s = CT_FAIL(ctx, CT_ERR_FORMAT,
                    "%s: no tensor of the file is one of %s (the file's: %s%s; %s's: %s%s) "
                    "(hint: a `prefix` prepended to %s's names, or the model of the file)",
                    sf->path, tg->what, list_text(&extra, n_extra, max, t1, sizeof t1), t1,
                    tg->what, list_text(&miss, n_miss, max, t2, sizeof t2), t2, tg->what);
    } else if (n_miss || n_extra) {
        ct_log(ctx, CT_LOG_WARN,
               "%s: loaded %lld of %lld tensors of %s (strict: false); missing keys, left at "
               "their initial values (%lld): [%s%s]; unexpected keys, not used (%lld): [%s%s]",
               sf->path, (long long)r->n_loaded, (long long)target_count(tg), tg->what,
               (long long)n_miss, list_text(&miss, n_miss, max, t1, sizeof t1), t1,
               (long long)n_extra, list_text(&extra, n_extra, max, t2, sizeof t2), t2);
    }
    ct_free(ctx, miss.p, miss.cap);
    ct_free(ctx, extra.p, extra.cap);
    return s;
}

/* A CT_LOG_INFO note of the tensors converted to f32 on load. */
static void note_conversions(const st_file *sf, const st_result *r) {
    char text[160] = "";
    size_t off = 0;
    for (int c = 0; c < 3; c++)
        if (r->n_converted[c] && off < sizeof text)
            off += (size_t)snprintf(text + off, sizeof text - off, "%s%lld %s", off ? ", " : "",
                                    (long long)r->n_converted[c], converted_names[c]);
    if (off)
        ct_log(sf->ctx, CT_LOG_INFO, "%s: converted to f32 on load: %s tensor(s)", sf->path, text);
}

ct_status ct_safetensors_load(ct_ctx *ctx,
                              ct_params *params,
                              const char *path,
                              const ct_safetensors_load_params *lp,
                              int64_t *loaded) {
    if (loaded) *loaded = 0;
    if (!ct_params_values(params) && ct_params_count(params) > 0)
        return CT_FAIL(ctx, CT_ERR_INVALID_ARG, "%s: the parameter store is not allocated", path);
    return ct_st_read(ctx, path, params, NULL, 0, lp, "the model", loaded);
}

ct_status ct_st_read(ct_ctx *ctx,
                     const char *path,
                     ct_params *params,
                     ct_tensor *const *list,
                     int64_t n_list,
                     const ct_safetensors_load_params *lp,
                     const char *what,
                     int64_t *loaded) {
    ct_safetensors_load_params p = lp ? *lp : ct_safetensors_load_default_params();
    st_target tg = {params, list, n_list, p.prefix ? p.prefix : "", 0, p.strict, what};
    tg.plen = strlen(tg.prefix);
    if (loaded) *loaded = 0;
    st_result r;
    memset(&r, 0, sizeof r);
    r.from_size = (size_t)(target_count(&tg) + 1) * sizeof *r.from;
    r.from = ct_alloc(ctx, r.from_size);
    if (!r.from) return CT_FAIL(ctx, CT_ERR_OOM, "%s: listing %s's tensors", path, what);
    memset(r.from, 0, r.from_size);
    st_file sf;
    memset(&sf, 0, sizeof sf);
    sf.ctx = ctx;
    sf.path = path;
    sf.f = fopen(path, "rb");
    ct_status s = sf.f ? CT_OK : ct_ckpt_io_fail(ctx, path, "opening");
    if (s == CT_OK) s = read_header(&sf);
    if (s == CT_OK) s = read_entries(&sf);
    if (s == CT_OK) s = check_tiling(&sf);
    if (s == CT_OK) s = load_matching(&sf, &tg, &r);
    if (s == CT_OK) s = tg.strict ? check_complete(&sf, &tg, &r) : report_partial(&sf, &tg, &r);
    if (s == CT_OK) note_conversions(&sf, &r);
    if (s == CT_OK && loaded) *loaded = r.n_loaded;
    close_file(&sf);
    ct_free(ctx, r.from, r.from_size);
    return s;
}

/* ---- reading a file as it is ---- */

struct ct_st_reader {
    st_file sf;
    ct_st_tensor *tensors; /* sf.n_entries, in the order of their data */
};

void ct_st_close(ct_st_reader *r) {
    if (!r) return;
    ct_ctx *ctx = r->sf.ctx;
    ct_free(ctx, r->tensors, (r->sf.n_entries ? r->sf.n_entries : 1) * sizeof *r->tensors);
    close_file(&r->sf);
    ct_free(ctx, r, sizeof *r);
}

/* The reader's tensor list from the checked entries. */
static ct_status list_tensors(ct_st_reader *r) {
    size_t n = r->sf.n_entries;
    r->tensors = ct_alloc(r->sf.ctx, (n ? n : 1) * sizeof *r->tensors);
    if (!r->tensors)
        return CT_FAIL(r->sf.ctx, CT_ERR_OOM, "%s: listing %zu tensors", r->sf.path, n);
    for (size_t i = 0; i < n; i++) {
        const entry *e = &r->sf.entries[i];
        ct_st_tensor *t = &r->tensors[i];
        memset(t, 0, sizeof *t);
        t->name = e->name;
        t->dtype = e->dt->name;
        t->elem_size = e->dt->size;
        t->ndim = e->ndim;
        memcpy(t->shape, e->shape, sizeof t->shape);
        t->nbytes = e->end - e->begin;
        t->numel = (int64_t)(t->nbytes / e->dt->size);
    }
    return CT_OK;
}

ct_status ct_st_open(
    ct_ctx *ctx, const char *path, ct_st_reader **out, const ct_st_tensor **tensors, int64_t *n) {
    *out = NULL;
    *tensors = NULL;
    *n = 0;
    ct_st_reader *r = ct_alloc(ctx, sizeof *r);
    if (!r) return CT_FAIL(ctx, CT_ERR_OOM, "%s: allocating a reader", path);
    memset(r, 0, sizeof *r);
    r->sf.ctx = ctx;
    r->sf.path = path;
    r->sf.f = fopen(path, "rb");
    ct_status s = r->sf.f ? read_header(&r->sf) : ct_ckpt_io_fail(ctx, path, "opening");
    if (s == CT_OK) s = read_entries(&r->sf);
    if (s == CT_OK) s = check_tiling(&r->sf);
    if (s == CT_OK) s = list_tensors(r);
    if (s != CT_OK) {
        ct_st_close(r);
        return s;
    }
    *out = r;
    *tensors = r->tensors;
    *n = (int64_t)r->sf.n_entries;
    return CT_OK;
}

ct_status ct_st_read_raw(ct_st_reader *r, int64_t i, void *dst) {
    const entry *e = &r->sf.entries[i];
    size_t n = (size_t)(e->end - e->begin);
    return n ? read_at(r->sf.ctx, r->sf.f, r->sf.path, r->sf.base + e->begin, dst, n) : CT_OK;
}
