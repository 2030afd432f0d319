/*
 * file.c - reading a whole data file into memory, inflating it when it is gzip-compressed.
 *
 * Invariant: nothing larger than max_bytes is ever allocated for the contents. A plain file's
 * size comes from fstat and is checked before the one allocation; a gzip file is inflated into
 * a buffer that grows geometrically up to max_bytes, so a decompression bomb or a lying size
 * trailer fails with CT_ERR_FORMAT instead of exhausting memory.
 *
 * Ownership: the returned buffer comes from the context's allocator (zlib's own state too, via
 * zalloc/zfree) and the caller frees it with ct_free(ctx, data, size).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "data/data_internal.h"

enum {
    CHUNK = 1 << 18,         /* compressed bytes read per call */
    ZHDR = 64,               /* size header in front of zlib's blocks, keeping 64-byte alignment */
    MAX_DEFLATE_RATIO = 1032 /* deflate never expands more than this (zlib's FAQ) */
};

/* ---- zlib's allocations go through the context; ct_free needs the size, so keep it ---- */

static voidpf zalloc_ctx(voidpf opaque, uInt items, uInt size) {
    size_t n = (size_t)items * (size_t)size;
    if (size && n / size != items) return Z_NULL;
    unsigned char *p = ct_alloc(opaque, n + ZHDR);
    if (!p) return Z_NULL;
    memcpy(p, &n, sizeof n);
    return p + ZHDR;
}

static void zfree_ctx(voidpf opaque, voidpf addr) {
    if (!addr) return;
    unsigned char *p = (unsigned char *)addr - ZHDR;
    size_t n;
    memcpy(&n, p, sizeof n);
    ct_free(opaque, p, n + ZHDR);
}

/* ---- reading ---- */

/* Reads up to n bytes (fewer only at end of file); -1 on error with errno set. */
static ssize_t read_full(int fd, unsigned char *buf, size_t n) {
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return -1;
        if (r == 0) break;
        got += (size_t)r;
    }
    return (ssize_t)got;
}

static ct_status read_plain(
    ct_ctx *ctx, const char *path, int fd, size_t size, unsigned char **data, size_t *out_size) {
    if (size == 0) return CT_OK;
    unsigned char *buf = ct_alloc(ctx, size);
    if (!buf) return CT_FAIL(ctx, CT_ERR_OOM, "%s: allocating %zu bytes", path, size);
    ssize_t got = read_full(fd, buf, size);
    if (got < 0 || (size_t)got != size) {
        int err = errno;
        ct_free(ctx, buf, size);
        if (got < 0) return CT_FAIL(ctx, CT_ERR_IO, "%s: read: %s", path, strerror(err));
        return CT_FAIL(ctx, CT_ERR_IO,
                       "%s: file shrank while reading: expected %zu bytes, found %zd", path, size,
                       got);
    }
    *data = buf;
    *out_size = size;
    return CT_OK;
}

/* Moves the first `used` bytes of *buf (capacity *cap) into a new buffer of capacity new_cap. */
static bool resize(ct_ctx *ctx, unsigned char **buf, size_t *cap, size_t used, size_t new_cap) {
    unsigned char *nb = ct_alloc(ctx, new_cap);
    if (!nb) return false;
    if (used) memcpy(nb, *buf, used);
    ct_free(ctx, *buf, *cap);
    *buf = nb;
    *cap = new_cap;
    return true;
}

/* The gzip trailer's ISIZE (uncompressed size mod 2^32 of the last member): a first guess at
 * the output size, trusted only as far as max_bytes and deflate's maximum ratio allow. */
static size_t size_hint(int fd, size_t file_size, size_t max_bytes) {
    unsigned char t[4];
    size_t bound =
        file_size > max_bytes / MAX_DEFLATE_RATIO ? max_bytes : file_size * MAX_DEFLATE_RATIO;
    size_t guess = file_size < bound / 4 ? file_size * 4 : bound;
    if (file_size >= 18 && pread(fd, t, 4, (off_t)(file_size - 4)) == 4) {
        size_t isize = (size_t)t[0] | (size_t)t[1] << 8 | (size_t)t[2] << 16 | (size_t)t[3] << 24;
        if (isize > 0 && isize <= bound) guess = isize;
    }
    return guess;
}

/* One gzip file being inflated: the input chunk, the output buffer and where both stand. */
typedef struct inflater {
    ct_ctx *ctx;
    const char *path;
    int fd;
    size_t max_bytes;
    z_stream z;
    unsigned char *in; /* [in_cap] compressed bytes */
    size_t in_cap;
    unsigned char *out; /* [cap] decompressed bytes, the first `used` of them filled */
    size_t cap, used;
    size_t consumed; /* compressed bytes handed to zlib before the current chunk */
    bool at_eof;     /* no more input in the file */
} inflater;

/* The offset in the file of the next compressed byte, for messages. */
static size_t offset(const inflater *g) {
    return g->consumed + (size_t)(g->z.next_in - g->in);
}

static ct_status inflater_open(
    inflater *g, ct_ctx *ctx, const char *path, int fd, size_t file_size, size_t max_bytes) {
    memset(g, 0, sizeof *g);
    g->ctx = ctx;
    g->path = path;
    g->fd = fd;
    g->max_bytes = max_bytes;
    g->cap = size_hint(fd, file_size, max_bytes); /* <= max_bytes; 0 only if that is 0 */
    g->in_cap = file_size < CHUNK ? file_size : CHUNK;
    g->in = ct_alloc(ctx, g->in_cap);
    g->out = g->cap ? ct_alloc(ctx, g->cap) : NULL;
    if (!g->in || (g->cap && !g->out)) {
        ct_free(ctx, g->in, g->in_cap);
        ct_free(ctx, g->out, g->cap);
        return CT_FAIL(ctx, CT_ERR_OOM, "%s: allocating %zu bytes to inflate into", path, g->cap);
    }
    g->z.zalloc = zalloc_ctx;
    g->z.zfree = zfree_ctx;
    g->z.opaque = ctx;
    int zr = inflateInit2(&g->z, 16 + MAX_WBITS);
    if (zr != Z_OK) {
        ct_free(ctx, g->in, g->in_cap);
        ct_free(ctx, g->out, g->cap);
        return CT_FAIL(ctx, zr == Z_MEM_ERROR ? CT_ERR_OOM : CT_ERR_INTERNAL,
                       "%s: inflateInit2: %s", path, zError(zr));
    }
    return CT_OK;
}

/* Reads the next chunk of the file into the input, after the `keep` bytes not yet inflated. */
static ct_status refill(inflater *g, uInt keep) {
    if (keep) memmove(g->in, g->z.next_in, keep);
    ssize_t r = read_full(g->fd, g->in + keep, g->in_cap - keep);
    if (r < 0) return CT_FAIL(g->ctx, CT_ERR_IO, "%s: read: %s", g->path, strerror(errno));
    g->consumed += g->z.next_in ? (size_t)(g->z.next_in - g->in) : 0; /* NULL before the first */
    g->at_eof = (size_t)r < g->in_cap - keep;
    g->z.next_in = g->in;
    g->z.avail_in = keep + (uInt)r;
    return CT_OK;
}

/* At the end of a gzip member: *more when another member follows (concatenated members, as
 * gunzip accepts them), none at the end of the file; anything else is junk. */
static ct_status next_member(inflater *g, bool *more) {
    z_stream *z = &g->z;
    *more = false;
    if (z->avail_in == 0 && g->at_eof) return CT_OK;
    /* a member boundary split across chunks: keep the byte for the next read */
    if (z->avail_in < 2 && !g->at_eof) CT_TRY(refill(g, z->avail_in));
    if (z->avail_in < 2 || z->next_in[0] != 0x1f || z->next_in[1] != 0x8b) {
        char found[32];
        if (z->avail_in > 1)
            (void)snprintf(found, sizeof found, "bytes %02x %02x", z->next_in[0], z->next_in[1]);
        else
            (void)snprintf(found, sizeof found, "the single byte %02x", z->next_in[0]);
        return CT_FAIL(g->ctx, CT_ERR_FORMAT,
                       "%s: offset %zu: expected the end of the file or another gzip "
                       "member (1f 8b), found %s",
                       g->path, offset(g), found);
    }
    inflateReset(z);
    *more = true;
    return CT_OK;
}

/* Makes room for more output than fits: grows geometrically, never beyond max_bytes. */
static ct_status grow(inflater *g) {
    if (g->cap >= g->max_bytes)
        return CT_FAIL(g->ctx, CT_ERR_FORMAT, "%s: decompressed size exceeds %zu bytes", g->path,
                       g->max_bytes);
    size_t new_cap = g->cap > g->max_bytes / 2 ? g->max_bytes : g->cap ? g->cap * 2 : 1;
    if (!resize(g->ctx, &g->out, &g->cap, g->used, new_cap))
        return CT_FAIL(g->ctx, CT_ERR_OOM, "%s: allocating %zu bytes to inflate into", g->path,
                       new_cap);
    return CT_OK;
}

/* One call to inflate into the rest of the output; *zr is zlib's answer. When the output is
 * full, inflates one byte aside to learn whether there is more, and grows the output if so. */
static ct_status inflate_some(inflater *g, int *zr) {
    z_stream *z = &g->z;
    unsigned char probe; /* one byte of look-ahead when out is full */
    bool probing = g->used == g->cap;
    z->next_out = probing ? &probe : g->out + g->used;
    z->avail_out = probing ? 1u : (uInt)(g->cap - g->used > UINT_MAX ? UINT_MAX : g->cap - g->used);
    uInt before = z->avail_out;
    *zr = inflate(z, Z_NO_FLUSH);
    size_t produced = before - z->avail_out;
    if (*zr == Z_NEED_DICT || *zr == Z_DATA_ERROR || *zr == Z_STREAM_ERROR)
        return CT_FAIL(g->ctx, CT_ERR_FORMAT,
                       "%s: corrupt gzip data near compressed offset %zu: %s (hint: the "
                       "download may be damaged; compare its checksum)",
                       g->path, offset(g), z->msg ? z->msg : zError(*zr));
    if (*zr == Z_MEM_ERROR)
        return CT_FAIL(g->ctx, CT_ERR_OOM, "%s: inflate: out of memory", g->path);
    if (probing && produced) {
        CT_TRY(grow(g));
        g->out[g->used++] = probe;
    } else {
        g->used += produced;
    }
    return CT_OK;
}

/* Inflates the whole file into g->out. */
static ct_status inflate_all(inflater *g) {
    bool member_end = false;
    for (;;) {
        if (g->z.avail_in == 0 && !g->at_eof) CT_TRY(refill(g, 0));
        if (member_end) {
            bool more;
            CT_TRY(next_member(g, &more));
            if (!more) return CT_OK;
            member_end = false;
        }
        int zr;
        CT_TRY(inflate_some(g, &zr));
        if (zr == Z_STREAM_END) {
            member_end = true;
            continue;
        }
        if (zr == Z_BUF_ERROR && g->z.avail_in == 0 && g->at_eof)
            return CT_FAIL(g->ctx, CT_ERR_FORMAT,
                           "%s: truncated gzip data: the stream ends after %zu compressed bytes "
                           "(%zu decompressed) without its end marker: unexpected end of file",
                           g->path, offset(g), g->used);
    }
}

/* Frees what g holds but the output, which goes to *data (NULL when empty), trimmed to its
 * exact size because the caller frees it with that size. On failure (st) the output is freed. */
static ct_status inflater_close(inflater *g, ct_status st, unsigned char **data, size_t *out_size) {
    inflateEnd(&g->z);
    ct_free(g->ctx, g->in, g->in_cap);
    if (st != CT_OK || g->used == 0) {
        ct_free(g->ctx, g->out, g->cap);
        return st;
    }
    if (g->used != g->cap && !resize(g->ctx, &g->out, &g->cap, g->used, g->used)) {
        ct_free(g->ctx, g->out, g->cap);
        return CT_FAIL(g->ctx, CT_ERR_OOM, "%s: allocating %zu bytes", g->path, g->used);
    }
    *data = g->out;
    *out_size = g->used;
    return CT_OK;
}

static ct_status read_gzip(ct_ctx *ctx,
                           const char *path,
                           int fd,
                           size_t file_size,
                           size_t max_bytes,
                           unsigned char **data,
                           size_t *out_size) {
    inflater g;
    CT_TRY(inflater_open(&g, ctx, path, fd, file_size, max_bytes));
    return inflater_close(&g, inflate_all(&g), data, out_size);
}

ct_status ct_data_read_file(
    ct_ctx *ctx, const char *path, size_t max_bytes, unsigned char **data, size_t *size) {
    *data = NULL;
    *size = 0;
    int fd;
    do {
        fd = open(path, O_RDONLY | O_CLOEXEC);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0) return CT_FAIL(ctx, CT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int err = errno;
        close(fd);
        return CT_FAIL(ctx, CT_ERR_IO, "%s: stat: %s", path, strerror(err));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return CT_FAIL(ctx, CT_ERR_IO, "%s: not a regular file", path);
    }
    unsigned char magic[2] = {0, 0};
    ssize_t got = sb.st_size >= 2 ? pread(fd, magic, 2, 0) : 0;
    if (got < 0) {
        int err = errno;
        close(fd);
        return CT_FAIL(ctx, CT_ERR_IO, "%s: read: %s", path, strerror(err));
    }
    uint64_t file_size = (uint64_t)sb.st_size;
    ct_status st;
    if (got == 2 && magic[0] == 0x1f && magic[1] == 0x8b) {
        st = read_gzip(ctx, path, fd, file_size > SIZE_MAX ? SIZE_MAX : (size_t)file_size,
                       max_bytes, data, size);
    } else if (file_size > max_bytes) {
        st = CT_FAIL(ctx, CT_ERR_FORMAT, "%s: file size %llu bytes exceeds the limit of %zu bytes",
                     path, (unsigned long long)file_size, max_bytes);
    } else {
        st = read_plain(ctx, path, fd, (size_t)file_size, data, size);
    }
    close(fd);
    return st;
}
