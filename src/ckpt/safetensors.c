/*
 * safetensors.c - writing and reading a ct_params store (or, for checkpoint.c, any list of
 * named tensors: the optimizer's buffers) as a safetensors file.
 *
 * Writing: the JSON header is built by hand (names escaped), padded with spaces to a multiple
 * of 8 bytes, and written with the data to path.tmp, which is flushed, fsynced and renamed over
 * path; the directory is fsynced after the rename. The writer also returns the file's size and
 * CRC-32C, computed from the bytes as they go out, for a checkpoint's state.json. Reading: the
 * header is parsed with jansson and every number in it is checked against the file before it is
 * used; tensor data is read straight into the store's tensors (bf16 converted in small chunks), so
 * loading never holds a second copy of the model.
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

static const st_dtype dtypes[] = {
    {"F32", 4, CT_F32},          {"BF16", 2, CT_F32},        {"I64", 8, CT_I64},
    {"I32", 4, CT_I32},          {"U8", 1, CT_U8},           {"F16", 2, CT_DTYPE_COUNT},
    {"F64", 8, CT_DTYPE_COUNT},  {"I8", 1, CT_DTYPE_COUNT},  {"I16", 2, CT_DTYPE_COUNT},
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

static ct_status io_fail(ct_ctx *ctx, const char *path, const char *op) {
    return CT_FAIL(ctx, CT_ERR_IO, "%s: %s failed: %s", path, op, strerror(errno));
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
    if (fd < 0) return io_fail(ctx, dir, "opening the directory");
    int r = fsync(fd);
    close(fd);
    return r == 0 ? CT_OK : io_fail(ctx, dir, "fsync of the directory");
}

/* fwrite that also counts the bytes and carries their CRC-32C. */
static bool put(FILE *f, const void *p, size_t n, uint64_t *bytes, uint32_t *crc) {
    if (n == 0) return true;
    *crc = ct_crc32c(*crc, p, n);
    *bytes += n;
    return fwrite(p, 1, n, f) == n;
}

ct_status ct_st_write(ct_ctx *ctx,
                      const char *path,
                      const ct_tensor *const *tensors,
                      int64_t n_tensors,
                      const ct_option *metadata,
                      int64_t n_metadata,
                      uint64_t *bytes_out,
                      uint32_t *crc_out) {
    for (int64_t i = 0; i < n_metadata; i++)
        if (strcmp(metadata[i].key, "format") == 0)
            return CT_FAIL(ctx, CT_ERR_INVALID_ARG, "%s: metadata key 'format' is reserved", path);
    ct_ckpt_buf b = {ctx, NULL, 0, 0, false};
    sb_str(&b, "{\"__metadata__\":{\"format\":\"pt\"");
    for (int64_t i = 0; i < n_metadata; i++) {
        sb_str(&b, ",");
        sb_json(&b, metadata[i].key);
        sb_str(&b, ":");
        sb_json(&b, metadata[i].value);
    }
    sb_str(&b, "}");
    uint64_t offset = 0;
    for (int64_t i = 0; i < n_tensors; i++) {
        const ct_tensor *t = tensors[i];
        const char *dn = dtype_name_of(t->dtype);
        if (!dn) {
            ct_free(ctx, b.p, b.cap);
            return CT_FAIL(ctx, CT_ERR_INVALID_ARG, "%s: tensor '%s' has dtype %d", path, t->name,
                           (int)t->dtype);
        }
        char num[64];
        sb_str(&b, ",");
        sb_json(&b, t->name);
        sb_str(&b, ":{\"dtype\":\"");
        sb_str(&b, dn);
        sb_str(&b, "\",\"shape\":[");
        for (int32_t d = 0; d < t->ndim; d++) {
            (void)snprintf(num, sizeof num, d ? ",%lld" : "%lld", (long long)t->shape[d]);
            sb_str(&b, num);
        }
        uint64_t end = offset + (uint64_t)ct_tensor_nbytes(t);
        (void)snprintf(num, sizeof num, "],\"data_offsets\":[%llu,%llu]}",
                       (unsigned long long)offset, (unsigned long long)end);
        sb_str(&b, num);
        offset = end;
    }
    sb_str(&b, "}");
    while (!b.oom && b.len % 8 != 0)
        sb_str(&b, " "); /* the data starts 8-byte aligned */
    if (b.oom) {
        ct_free(ctx, b.p, b.cap);
        return CT_FAIL(ctx, CT_ERR_OOM, "%s: building the header", path);
    }

    char tmp[4096];
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp", path) >= sizeof tmp) {
        ct_free(ctx, b.p, b.cap);
        return CT_FAIL(ctx, CT_ERR_IO, "%s: path too long", path);
    }
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        ct_free(ctx, b.p, b.cap);
        return io_fail(ctx, tmp, "opening for writing");
    }
    unsigned char len8[8];
    for (int i = 0; i < 8; i++)
        len8[i] = (unsigned char)((uint64_t)b.len >> (8 * i));
    uint64_t bytes = 0;
    uint32_t crc = 0;
    bool ok = put(f, len8, 8, &bytes, &crc) && put(f, b.p, b.len, &bytes, &crc);
    for (int64_t i = 0; ok && i < n_tensors; i++)
        ok = put(f, tensors[i]->data, ct_tensor_nbytes(tensors[i]), &bytes, &crc);
    ok = ok && fflush(f) == 0 && fsync(fileno(f)) == 0;
    ct_status s = ok ? CT_OK : io_fail(ctx, tmp, "writing");
    if (fclose(f) != 0 && s == CT_OK) s = io_fail(ctx, tmp, "closing");
    ct_free(ctx, b.p, b.cap);
    if (s == CT_OK && rename(tmp, path) != 0) s = io_fail(ctx, path, "renaming the .tmp file to");
    if (s != CT_OK) {
        (void)remove(tmp); /* the previous file at path, if any, is untouched */
        return s;
    }
    if (bytes_out) *bytes_out = bytes;
    if (crc_out) *crc_out = crc;
    return sync_dir(ctx, path);
}

ct_status ct_safetensors_save(ct_ctx *ctx,
                              const ct_params *params,
                              const char *path,
                              const ct_option *metadata,
                              int64_t n_metadata) {
    if (!ct_params_values(params) && ct_params_count(params) > 0)
        return CT_FAIL(ctx, CT_ERR_INVALID_ARG, "%s: the parameter store is not allocated", path);
    int64_t n = ct_params_count(params);
    size_t size = (size_t)(n ? n : 1) * sizeof(ct_tensor *);
    const ct_tensor **list = ct_alloc(ctx, size);
    if (!list) return CT_FAIL(ctx, CT_ERR_OOM, "%s: listing %lld tensors", path, (long long)n);
    for (int64_t i = 0; i < n; i++)
        list[i] = ct_params_at(params, i);
    ct_status s = ct_st_write(ctx, path, list, n, metadata, n_metadata, NULL, NULL);
    ct_free(ctx, list, size);
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

/* Reads one entry's data into the store tensor t (shape already checked). */
static ct_status
load_entry(ct_ctx *ctx, FILE *f, const char *path, uint64_t base, const entry *e, ct_tensor *t) {
    size_t n = (size_t)(e->end - e->begin);
    bool bf16 = strcmp(e->dt->name, "BF16") == 0;
    if ((e->dt->ct == t->dtype && !bf16) || (bf16 && t->dtype == CT_BF16))
        return n ? read_at(ctx, f, path, base + e->begin, t->data, n) : CT_OK;
    if (strcmp(e->dt->name, "BF16") == 0 && t->dtype == CT_F32) {
        ct_bf16 chunk[4096];
        float *out = t->data;
        int64_t total = (int64_t)(n / 2);
        for (int64_t i = 0; i < total; i += 4096) {
            int64_t k = total - i < 4096 ? total - i : 4096;
            CT_TRY(read_at(ctx, f, path, base + e->begin + (uint64_t)i * 2, chunk, (size_t)k * 2));
            ct_f32_from_bf16_n(out + i, chunk, k);
        }
        return CT_OK;
    }
    return CT_FAIL(ctx, CT_ERR_FORMAT, "%s: tensor '%s': dtype %s cannot load into %s '%s'", path,
                   e->name, e->dt->name, ct_dtype_name(t->dtype), t->name);
}

/* The target of a read: a store, or a plain list of tensors. */
static int64_t target_count(const ct_params *params, int64_t n) {
    return params ? ct_params_count(params) : n;
}

static ct_tensor *target_at(const ct_params *params, ct_tensor *const *list, int64_t i) {
    return params ? ct_params_at(params, i) : list[i];
}

static ct_tensor *
target_find(const ct_params *params, ct_tensor *const *list, int64_t n, const char *name) {
    if (params) return ct_params_find(params, name);
    for (int64_t i = 0; i < n; i++)
        if (strcmp(list[i]->name, name) == 0) return list[i];
    return NULL;
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
    const char *prefix = p.prefix ? p.prefix : "";
    size_t plen = strlen(prefix);
    if (loaded) *loaded = 0;
    int64_t n_target = target_count(params, n_list);
    FILE *f = fopen(path, "rb");
    if (!f) return io_fail(ctx, path, "opening");
    struct stat stt;
    unsigned char len8[8];
    ct_status s = CT_OK;
    char *header = NULL;
    uint64_t hlen = 0;
    json_t *root = NULL;
    entry *entries = NULL;
    size_t n_entries = 0, count = 0;
    if (fstat(fileno(f), &stt) != 0) {
        s = io_fail(ctx, path, "fstat");
        goto done;
    }
    uint64_t size = (uint64_t)stt.st_size;
    if (size < 8 || fread(len8, 1, 8, f) != 8) {
        s = CT_FAIL(ctx, CT_ERR_FORMAT, "%s: %llu bytes: too short for a safetensors file", path,
                    (unsigned long long)size);
        goto done;
    }
    for (int i = 0; i < 8; i++)
        hlen |= (uint64_t)len8[i] << (8 * i);
    if (hlen > size - 8 || hlen > MAX_HEADER || hlen < 2) {
        s = CT_FAIL(ctx, CT_ERR_FORMAT,
                    "%s: offset 0: header length %llu does not fit the file of %llu bytes (or "
                    "exceeds %llu)",
                    path, (unsigned long long)hlen, (unsigned long long)size,
                    (unsigned long long)MAX_HEADER);
        goto done;
    }
    header = ct_alloc(ctx, (size_t)hlen);
    if (!header) {
        s = CT_FAIL(ctx, CT_ERR_OOM, "%s: allocating the %llu-byte header", path,
                    (unsigned long long)hlen);
        goto done;
    }
    if (fread(header, 1, (size_t)hlen, f) != (size_t)hlen) {
        s = CT_FAIL(ctx, CT_ERR_IO, "%s: reading the header failed", path);
        goto done;
    }
    json_error_t jerr;
    root = json_loadb(header, (size_t)hlen, JSON_REJECT_DUPLICATES, &jerr);
    if (!root || !json_is_object(root)) {
        s = CT_FAIL(ctx, CT_ERR_FORMAT, "%s: header JSON, line %d column %d: %s", path,
                    root ? 0 : jerr.line, root ? 0 : jerr.column,
                    root ? "expected an object" : jerr.text);
        goto done;
    }
    uint64_t data_size = size - 8 - hlen, base = 8 + hlen;
    count = json_object_size(root);
    entries = ct_alloc(ctx, (count ? count : 1) * sizeof *entries);
    if (!entries) {
        s = CT_FAIL(ctx, CT_ERR_OOM, "%s: allocating %zu header entries", path, count);
        goto done;
    }
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val) {
        if (strcmp(key, "__metadata__") == 0) {
            const char *mk;
            json_t *mv;
            if (!json_is_object(val)) {
                s = CT_FAIL(ctx, CT_ERR_FORMAT, "%s: __metadata__ must be an object", path);
                goto done;
            }
            json_object_foreach(val, mk, mv) {
                if (!json_is_string(mv)) {
                    s = CT_FAIL(ctx, CT_ERR_FORMAT, "%s: __metadata__ '%s' is not a string", path,
                                mk);
                    goto done;
                }
            }
            continue;
        }
        s = parse_entry(ctx, path, key, val, data_size, &entries[n_entries]);
        if (s != CT_OK) goto done;
        n_entries++;
    }
    /* the ranges must tile the data exactly: no overlap, no gap, nothing after */
    qsort(entries, n_entries, sizeof *entries, cmp_begin);
    uint64_t at = 0;
    for (size_t i = 0; i < n_entries; i++) {
        if (entries[i].begin != at) {
            s = CT_FAIL(ctx, CT_ERR_FORMAT,
                        "%s: tensor '%s': data starts at %llu, expected %llu (tensors must tile "
                        "the data without gaps or overlaps)",
                        path, entries[i].name, (unsigned long long)entries[i].begin,
                        (unsigned long long)at);
            goto done;
        }
        at = entries[i].end;
    }
    if (at != data_size) {
        s = CT_FAIL(ctx, CT_ERR_FORMAT, "%s: the tensors cover %llu of %llu bytes of data", path,
                    (unsigned long long)at, (unsigned long long)data_size);
        goto done;
    }
    /* match names; with strict, both sides must be complete */
    int64_t done_count = 0;
    for (size_t i = 0; i < n_entries; i++) {
        const entry *e = &entries[i];
        ct_tensor *t = NULL;
        if (strncmp(e->name, prefix, plen) == 0)
            t = target_find(params, list, n_list, e->name + plen);
        if (!t) {
            if (p.strict) {
                s = CT_FAIL(ctx, CT_ERR_FORMAT,
                            "%s: tensor '%s' is not a %s of %s (strict loading)", path, e->name,
                            params ? "parameter or buffer" : "tensor", what);
                goto done;
            }
            continue;
        }
        char a[200], b2[200];
        if (e->ndim != t->ndim || memcmp(e->shape, t->shape, (size_t)e->ndim * 8) != 0) {
            s = CT_FAIL(ctx, CT_ERR_SHAPE, "%s: tensor '%s': shape %s, %s expects %s", path,
                        e->name, shape_text(e->shape, e->ndim, a, sizeof a), what,
                        ct_shape_str(t, b2, sizeof b2));
            goto done;
        }
        s = load_entry(ctx, f, path, base, e, t);
        if (s != CT_OK) goto done;
        done_count++;
    }
    if (p.strict && done_count != n_target) {
        for (int64_t i = 0; i < n_target; i++) {
            const ct_tensor *t = target_at(params, list, i);
            bool found = false;
            for (size_t k = 0; k < n_entries && !found; k++)
                found = strncmp(entries[k].name, prefix, plen) == 0 &&
                        strcmp(entries[k].name + plen, t->name) == 0;
            if (!found) {
                s = CT_FAIL(ctx, CT_ERR_FORMAT, "%s: %s's '%s%s' is missing (strict loading)", path,
                            what, prefix, t->name);
                goto done;
            }
        }
    }
    if (loaded) *loaded = done_count;
done:
    json_decref(root);
    ct_free(ctx, entries, (count ? count : 1) * sizeof *entries);
    ct_free(ctx, header, (size_t)hlen);
    fclose(f);
    return s;
}
