/*
 * fixture.h - reads the golden fixtures written by tests/golden/gen_golden.py (tests only).
 *
 * Format (version 1), all integers little-endian:
 *     "CTGF" | u32 version | u32 count | count records of:
 *         u32 name_len | name bytes | u32 dtype (ct_dtype: 0 f32, 3 i64) | u32 ndim |
 *         ndim x i64 shape | raw row-major data
 * Files are looked up in the directory named by CT_FIXTURE_DIR (default: the source tree's
 * tests/golden/fixtures, compiled in as CT_FIXTURE_DIR_DEFAULT), which tests/CMakeLists.txt sets
 * for ctest. A missing or malformed file, or another version, is reported on stderr with the
 * hint to regenerate with /usr/bin/python3 tests/golden/gen_golden.py.
 *
 * Ownership: gf_load copies every array into its own heap block (aligned for its dtype);
 * gf_free releases them. Pointers from gf_get stay valid until gf_free.
 */
#ifndef CT_TEST_GOLDEN_FIXTURE_H
#define CT_TEST_GOLDEN_FIXTURE_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctrain/tensor.h"

#define GF_VERSION 1
#define GF_REGEN   "regenerate with /usr/bin/python3 tests/golden/gen_golden.py"

typedef struct gf_array {
    char *name;
    ct_dtype dtype;
    int32_t ndim;
    int64_t shape[CT_MAX_DIMS];
    int64_t numel;
    void *data;
} gf_array;

typedef struct gf_file {
    char path[1024];
    uint32_t count;
    gf_array *arrays;
} gf_file;

static inline void gf_free(gf_file *f) {
    if (!f->arrays) return;
    for (uint32_t i = 0; i < f->count; i++) {
        free(f->arrays[i].name);
        free(f->arrays[i].data);
    }
    free(f->arrays);
    f->arrays = NULL;
    f->count = 0;
}

/* A bounds-checked cursor over the file's bytes. */
typedef struct gf_reader {
    const unsigned char *p;
    size_t left;
} gf_reader;

static inline int gf_take(gf_reader *r, void *dst, size_t n) {
    if (r->left < n) return 0;
    memcpy(dst, r->p, n);
    r->p += n;
    r->left -= n;
    return 1;
}

static inline int gf_parse(gf_file *f, const unsigned char *buf, size_t size) {
    gf_reader r = {buf, size};
    char magic[4];
    uint32_t version = 0, count = 0;
    if (!gf_take(&r, magic, 4) || memcmp(magic, "CTGF", 4) != 0) {
        fprintf(stderr, "fixture '%s': bad magic (expected \"CTGF\"); %s\n", f->path, GF_REGEN);
        return 0;
    }
    if (!gf_take(&r, &version, 4) || version != GF_VERSION) {
        fprintf(stderr, "fixture '%s': version %u, expected %u; %s\n", f->path, version, GF_VERSION,
                GF_REGEN);
        return 0;
    }
    if (!gf_take(&r, &count, 4) || count > size / 13) {
        fprintf(stderr, "fixture '%s': bad record count %u; %s\n", f->path, count, GF_REGEN);
        return 0;
    }
    f->arrays = calloc(count ? count : 1, sizeof *f->arrays);
    if (!f->arrays) return 0;
    f->count = count;
    for (uint32_t i = 0; i < count; i++) {
        gf_array *a = &f->arrays[i];
        uint32_t len = 0, dtype = 0, ndim = 0;
        if (!gf_take(&r, &len, 4) || len == 0 || len > r.left) goto truncated;
        a->name = malloc(len + 1u);
        if (!a->name || !gf_take(&r, a->name, len)) goto truncated;
        a->name[len] = '\0';
        if (!gf_take(&r, &dtype, 4) || !gf_take(&r, &ndim, 4)) goto truncated;
        if ((dtype != CT_F32 && dtype != CT_I64) || ndim > CT_MAX_DIMS) {
            fprintf(stderr, "fixture '%s': array '%s': unsupported dtype %u or ndim %u; %s\n",
                    f->path, a->name, dtype, ndim, GF_REGEN);
            return 0;
        }
        a->dtype = (ct_dtype)dtype;
        a->ndim = (int32_t)ndim;
        a->numel = 1;
        for (int32_t d = 0; d < CT_MAX_DIMS; d++)
            a->shape[d] = 1;
        for (uint32_t d = 0; d < ndim; d++) {
            if (!gf_take(&r, &a->shape[d], 8)) goto truncated;
            if (a->shape[d] < 0 || a->shape[d] > (int64_t)size) goto truncated;
            a->numel *= a->shape[d];
        }
        size_t esize = dtype == CT_F32 ? 4 : 8;
        if (a->numel > (int64_t)(r.left / esize)) goto truncated;
        size_t bytes = (size_t)a->numel * esize;
        a->data = malloc(bytes ? bytes : 1);
        if (!a->data || !gf_take(&r, a->data, bytes)) goto truncated;
    }
    if (r.left != 0) {
        fprintf(stderr, "fixture '%s': %zu trailing bytes; %s\n", f->path, r.left, GF_REGEN);
        return 0;
    }
    return 1;
truncated:
    fprintf(stderr, "fixture '%s': truncated or corrupt record; %s\n", f->path, GF_REGEN);
    return 0;
}

/* Loads <CT_FIXTURE_DIR>/<file>. Returns 1, or 0 after printing why. */
static inline int gf_load(gf_file *f, const char *file) {
    memset(f, 0, sizeof *f);
    const uint16_t probe = 1;
    if (*(const unsigned char *)&probe != 1) {
        fprintf(stderr, "fixture '%s': this reader needs a little-endian host\n", file);
        return 0;
    }
    const char *dir = getenv("CT_FIXTURE_DIR");
    if (!dir || !dir[0]) dir = CT_FIXTURE_DIR_DEFAULT; /* the source tree's, set by CMake */
    snprintf(f->path, sizeof f->path, "%s/%s", dir, file);
    FILE *fp = fopen(f->path, "rb");
    if (!fp) {
        fprintf(stderr, "fixture '%s': cannot open: %s; %s\n", f->path, strerror(errno), GF_REGEN);
        return 0;
    }
    unsigned char *buf = NULL;
    size_t size = 0, cap = 0, n;
    do {
        if (size == cap) {
            cap = cap ? cap * 2 : 65536;
            unsigned char *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                fclose(fp);
                return 0;
            }
            buf = nb;
        }
        n = fread(buf + size, 1, cap - size, fp);
        size += n;
    } while (n > 0);
    int err = ferror(fp);
    fclose(fp);
    int ok = !err && gf_parse(f, buf, size);
    if (err) fprintf(stderr, "fixture '%s': read error\n", f->path);
    free(buf);
    if (!ok) gf_free(f);
    return ok;
}

/* The array of that name, or NULL (after printing that it is missing). */
static inline const gf_array *gf_get(const gf_file *f, const char *name) {
    for (uint32_t i = 0; i < f->count; i++)
        if (strcmp(f->arrays[i].name, name) == 0) return &f->arrays[i];
    fprintf(stderr, "fixture '%s': no array '%s'; %s\n", f->path, name, GF_REGEN);
    return NULL;
}

/* True when the fixture has that array (no message when not). */
static inline int gf_has(const gf_file *f, const char *name) {
    for (uint32_t i = 0; i < f->count; i++)
        if (strcmp(f->arrays[i].name, name) == 0) return 1;
    return 0;
}

#endif /* CT_TEST_GOLDEN_FIXTURE_H */
