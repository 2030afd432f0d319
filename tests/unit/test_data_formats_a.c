/*
 * test_data_formats_a.c - the file reader (plain and gzip) and the idx, cifar10 and npy dataset
 * types: valid files in every supported variant, malformed ones failing with the status and a
 * message naming the file and the offset or expected-vs-found, header checks that happen before
 * any large allocation, no leaks when any allocation fails, and the real Fashion-MNIST when the
 * Debian package dataset-fashion-mnist is installed (skipped otherwise).
 *
 * Every file is written into a fresh mkdtemp directory under /tmp, removed at the end.
 */
#include <dirent.h>
#include <stdint.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "ctrain/ctrain.h"
#include "data/data_internal.h"
#include "harness.h"
#include "test_alloc.h"

static char tmp_dir[64];

/* ---- helpers ---- */

/* The counting allocator, plus the largest single request (for "no large allocation"). */
typedef struct big_alloc {
    test_alloc ta;
    size_t max_size;
} big_alloc;

static void *big_alloc_fn(void *user, size_t size) {
    big_alloc *b = user;
    if (size > b->max_size) b->max_size = size;
    return test_alloc_fn(&b->ta, size);
}

static void big_free_fn(void *user, void *ptr, size_t size) {
    test_free_fn(&((big_alloc *)user)->ta, ptr, size);
}

static ct_ctx *make_ctx(big_alloc *b) {
    ct_ctx_params p = ct_ctx_default_params();
    if (b) p.allocator = (ct_allocator){big_alloc_fn, big_free_fn, b};
    p.n_threads = 1;
    ct_ctx *ctx = NULL;
    if (ct_ctx_create(&p, &ctx) != CT_OK) abort();
    return ctx;
}

static void finish_ctx(ct_ctx *ctx, big_alloc *b) {
    ct_ctx_destroy(ctx);
    CT_CHECK_INT(b->ta.live, 0);
    CT_CHECK_INT(b->ta.size_mismatch, 0);
}

static const char *tpath(char *out, const char *name) {
    (void)snprintf(out, 256, "%s/%s", tmp_dir, name);
    return out;
}

/* Writes n bytes to tmp_dir/name, gzip-compressed when gz. */
static void write_file(const char *name, const void *data, size_t n, bool gz) {
    char p[256];
    tpath(p, name);
    if (gz) {
        gzFile f = gzopen(p, "wb");
        if (!f || (n && gzwrite(f, data, (unsigned)n) != (int)n) || gzclose(f) != Z_OK) abort();
        return;
    }
    FILE *f = fopen(p, "wb");
    if (!f || (n && fwrite(data, 1, n, f) != n) || fclose(f) != 0) abort();
}

/* Reads tmp_dir/name back (for corrupting files); caller frees. */
static unsigned char *slurp(const char *name, size_t *n) {
    char p[256];
    FILE *f = fopen(tpath(p, name), "rb");
    if (!f) abort();
    (void)fseek(f, 0, SEEK_END);
    long size = ftell(f);
    (void)fseek(f, 0, SEEK_SET);
    unsigned char *buf = malloc((size_t)size + 1);
    if (!buf || fread(buf, 1, (size_t)size, f) != (size_t)size) abort();
    (void)fclose(f);
    *n = (size_t)size;
    return buf;
}

static void put_be32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

static ct_status
open_opts(ct_ctx *ctx, const char *type, const ct_option *items, size_t count, ct_dataset **out) {
    ct_options o = {items, (int64_t)count, "test"};
    ct_status s = ct_dataset_open(ctx, type, &o, out);
    if (s != CT_OK && *out != NULL) {
        (void)fprintf(stderr, "dataset pointer not NULL after a failure\n");
        ct_test_failures++;
    }
    return s;
}
#define OPEN(ctx, type, out, ...)                                                                  \
    open_opts((ctx), (type), (ct_option[]){__VA_ARGS__},                                           \
              sizeof((ct_option[]){__VA_ARGS__}) / sizeof(ct_option), (out))

/* Checks a status and that the last error contains every given string. */
static void check_fails_at(const char *file,
                           int line,
                           ct_ctx *ctx,
                           ct_status got,
                           ct_status want,
                           const char *const *subs) {
    const char *msg = ct_last_error(ctx);
    const char *missing = NULL;
    for (; *subs && !missing; subs++)
        if (!strstr(msg, *subs)) missing = *subs;
    ct_test_checks++;
    if (got != want || missing) {
        ct_test_failures++;
        (void)fprintf(stderr, "%s:%d: %s: expected %s%s%s%s, got %s: %s\n", file, line,
                      ct_test_current, ct_status_str(want), missing ? " with '" : "",
                      missing ? missing : "", missing ? "'" : "", ct_status_str(got), msg);
    }
}
#define CHECK_FAILS(ctx, expr, want, ...)                                                          \
    check_fails_at(__FILE__, __LINE__, (ctx), (expr), (want),                                      \
                   (const char *const[]){__VA_ARGS__, NULL})

/* ---- idx builders ---- */

enum { N_IMG = 5, ROWS = 3, COLS = 4 };

static const unsigned char idx_labels_ok[N_IMG] = {3, 0, 9, 1, 7};

static unsigned char pixel(int i, int j) {
    return (unsigned char)(i * 16 + j * 3 + 1);
}

/* An images file with the given header and `n_pix` of the pixels. */
static void write_idx_images(const char *name,
                             uint32_t magic,
                             uint32_t n,
                             uint32_t rows,
                             uint32_t cols,
                             size_t n_pix,
                             bool gz) {
    unsigned char *buf = calloc(16 + n_pix + 1, 1);
    put_be32(buf, magic);
    put_be32(buf + 4, n);
    put_be32(buf + 8, rows);
    put_be32(buf + 12, cols);
    for (size_t k = 0; k < n_pix; k++)
        buf[16 + k] = pixel((int)(k / (ROWS * COLS)), (int)(k % (ROWS * COLS)));
    write_file(name, buf, 16 + n_pix, gz);
    free(buf);
}

static void write_idx_labels(const char *name,
                             uint32_t magic,
                             uint32_t n,
                             const unsigned char *labels,
                             size_t count,
                             bool gz) {
    unsigned char buf[64];
    put_be32(buf, magic);
    put_be32(buf + 4, n);
    memcpy(buf + 8, labels, count);
    write_file(name, buf, 8 + count, gz);
}

static void write_idx_ok(bool gz) {
    write_idx_images(gz ? "img.idx.gz" : "img.idx", 0x803, N_IMG, ROWS, COLS, N_IMG * ROWS * COLS,
                     gz);
    write_idx_labels(gz ? "lbl.idx.gz" : "lbl.idx", 0x801, N_IMG, idx_labels_ok, N_IMG, gz);
}

/* ---- npy builders ---- */

/* A .npy image: preamble, dict padded with spaces and '\n' to a multiple of 64, data. */
static unsigned char *
make_npy(int major, const char *dict, const void *data, size_t nbytes, size_t *size) {
    size_t pre = major == 1 ? 10 : 12, dl = strlen(dict);
    size_t hl = dl + 1;
    hl += (64 - (pre + hl) % 64) % 64;
    unsigned char *buf = malloc(pre + hl + nbytes + 1);
    memcpy(buf, "\x93NUMPY", 6);
    buf[6] = (unsigned char)major;
    buf[7] = 0;
    buf[8] = (unsigned char)hl;
    buf[9] = (unsigned char)(hl >> 8);
    if (major != 1) buf[10] = buf[11] = 0;
    memcpy(buf + pre, dict, dl);
    memset(buf + pre + dl, ' ', hl - dl - 1);
    buf[pre + hl - 1] = '\n';
    if (nbytes) memcpy(buf + pre + hl, data, nbytes);
    *size = pre + hl + nbytes;
    return buf;
}

static void
write_npy(const char *name, int major, const char *dict, const void *data, size_t nbytes, bool gz) {
    size_t n;
    unsigned char *buf = make_npy(major, dict, data, nbytes, &n);
    write_file(name, buf, n, gz);
    free(buf);
}

static const float npy_x4[24] = {0.5f, 1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11,
                                 12,   13, 14, 15, 16, 17, 18, 19, 20, 21, 22, -23.25f};
static const int64_t npy_y4[4] = {2, 0, 5, 1};

/* features (4, 2, 3) <f4 and labels (4,) <i8, both valid */
static void write_npy_ok(void) {
    write_npy("x.npy", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (4, 2, 3), }", npy_x4,
              sizeof npy_x4, false);
    write_npy("y.npy", 1, "{'descr': '<i8', 'fortran_order': False, 'shape': (4,), }", npy_y4,
              sizeof npy_y4, false);
}

/* ---- the file reader ---- */

static void file_should_read_plain_and_gzip_files(void) {
    big_alloc b = {0};
    ct_ctx *ctx = make_ctx(&b);
    enum { N = 300000 };
    unsigned char *src = malloc(N);
    uint32_t r = 1;
    for (int i = 0; i < N; i++) {
        r = r * 1664525u + 1013904223u;
        src[i] =
            (unsigned char)(i % 7 == 0 ? r >> 24 : (uint32_t)i / 1000); /* partly compressible */
    }
    write_file("plain.bin", src, N, false);
    write_file("comp.bin.gz", src, N, true);
    write_file("empty.bin", "", 0, false);
    write_file("empty.gz", "", 0, true);
    char p[256];
    unsigned char *data;
    size_t size;
    CT_CHECK_INT(ct_data_read_file(ctx, tpath(p, "plain.bin"), N, &data, &size), CT_OK);
    CT_CHECK(size == N && memcmp(data, src, N) == 0);
    ct_free(ctx, data, size);
    CT_CHECK_INT(ct_data_read_file(ctx, tpath(p, "comp.bin.gz"), N, &data, &size), CT_OK);
    CT_CHECK(size == N && memcmp(data, src, N) == 0);
    ct_free(ctx, data, size);
    CT_CHECK_INT(ct_data_read_file(ctx, tpath(p, "empty.bin"), 100, &data, &size), CT_OK);
    CT_CHECK(size == 0 && data == NULL);
    CT_CHECK_INT(ct_data_read_file(ctx, tpath(p, "empty.gz"), 100, &data, &size), CT_OK);
    CT_CHECK(size == 0 && data == NULL);

    /* concatenated gzip members read as one stream, as gunzip does */
    size_t n1, n2;
    write_file("m1.gz", src, 1000, true);
    write_file("m2.gz", src + 1000, 2000, true);
    unsigned char *g1 = slurp("m1.gz", &n1), *g2 = slurp("m2.gz", &n2);
    unsigned char *cat = malloc(n1 + n2);
    memcpy(cat, g1, n1);
    memcpy(cat + n1, g2, n2);
    write_file("multi.gz", cat, n1 + n2, false);
    CT_CHECK_INT(ct_data_read_file(ctx, tpath(p, "multi.gz"), N, &data, &size), CT_OK);
    CT_CHECK(size == 3000 && memcmp(data, src, 3000) == 0);
    ct_free(ctx, data, size);
    /* trailing junk after the last member is an error with its offset */
    memcpy(cat + n1, "junk", 4);
    write_file("junk.gz", cat, n1 + 4, false);
    char off[32];
    (void)snprintf(off, sizeof off, "offset %zu", n1);
    CHECK_FAILS(ctx, ct_data_read_file(ctx, tpath(p, "junk.gz"), N, &data, &size), CT_ERR_FORMAT, p,
                off, "found bytes 6a 75");
    /* one byte after the last member is named as one byte */
    write_file("junk1.gz", cat, n1 + 1, false);
    CT_CHECK_INT(ct_data_read_file(ctx, tpath(p, "junk1.gz"), N, &data, &size), CT_ERR_FORMAT);
    const char *msg = ct_last_error(ctx), *tail = strstr(msg, "found the single byte 6a");
    CT_CHECK_MSG(tail && strcmp(tail, "found the single byte 6a") == 0, "message: %s", msg);
    free(g1);
    free(g2);
    free(cat);
    free(src);
    finish_ctx(ctx, &b);
}

static void file_should_fail_with_path_errno_and_limits(void) {
    big_alloc b = {0};
    ct_ctx *ctx = make_ctx(&b);
    char p[256];
    unsigned char *data = (unsigned char *)1;
    size_t size = 7;
    CHECK_FAILS(ctx, ct_data_read_file(ctx, tpath(p, "missing.bin"), 100, &data, &size), CT_ERR_IO,
                p, "No such file or directory");
    CT_CHECK(data == NULL && size == 0);
    CHECK_FAILS(ctx, ct_data_read_file(ctx, tmp_dir, 100, &data, &size), CT_ERR_IO, tmp_dir,
                "not a regular file");

    /* a plain file over the cap fails from its size, before allocating it */
    unsigned char junk[1000] = {0};
    write_file("big.bin", junk, sizeof junk, false);
    b.max_size = 0;
    CHECK_FAILS(ctx, ct_data_read_file(ctx, tpath(p, "big.bin"), 999, &data, &size), CT_ERR_FORMAT,
                p, "1000 bytes exceeds the limit of 999");
    CT_CHECK(b.max_size < 999);

    /* a gzip bomb: 4 MB of zeros in a few KB stops at the cap without allocating beyond it */
    enum { BOMB = 4 << 20 };
    unsigned char *zeros = calloc(BOMB, 1);
    write_file("bomb.gz", zeros, BOMB, true);
    b.max_size = 0;
    CHECK_FAILS(ctx, ct_data_read_file(ctx, tpath(p, "bomb.gz"), 65536, &data, &size),
                CT_ERR_FORMAT, p, "decompressed size exceeds 65536 bytes");
    CT_CHECK_MSG(b.max_size <= 65536, "largest allocation %zu", b.max_size);
    /* exactly at the cap is fine */
    write_file("exact.gz", zeros, 65536, true);
    CT_CHECK_INT(ct_data_read_file(ctx, tpath(p, "exact.gz"), 65536, &data, &size), CT_OK);
    CT_CHECK_INT(size, 65536);
    ct_free(ctx, data, size);
    free(zeros);

    /* corrupt and truncated streams name the file and zlib's complaint */
    unsigned char text[20000];
    uint32_t r = 7;
    for (size_t i = 0; i < sizeof text; i++) {
        r = r * 1664525u + 1013904223u;
        text[i] = (unsigned char)('a' + (r >> 24) % 16); /* compresses to about half */
    }
    write_file("comp2.gz", text, sizeof text, true);
    size_t n;
    unsigned char *gz = slurp("comp2.gz", &n);
    gz[n - 8] ^= 0x55; /* the CRC-32 in the trailer */
    write_file("badcrc.gz", gz, n, false);
    CHECK_FAILS(ctx, ct_data_read_file(ctx, tpath(p, "badcrc.gz"), 1 << 20, &data, &size),
                CT_ERR_FORMAT, p, "corrupt gzip", "incorrect data check");
    gz[n - 8] ^= 0x55;
    gz[n - 3] ^= 0x01; /* ISIZE: zlib checks it against the real length */
    write_file("badlen.gz", gz, n, false);
    CHECK_FAILS(ctx, ct_data_read_file(ctx, tpath(p, "badlen.gz"), 1 << 20, &data, &size),
                CT_ERR_FORMAT, p, "incorrect length check");
    gz[n - 3] ^= 0x01;
    gz[3] = 0xE0; /* reserved FLG bits */
    write_file("badhdr.gz", gz, n, false);
    CHECK_FAILS(ctx, ct_data_read_file(ctx, tpath(p, "badhdr.gz"), 1 << 20, &data, &size),
                CT_ERR_FORMAT, p, "corrupt gzip");
    gz[3] = 0;
    write_file("trunc.gz", gz, n / 2, false);
    CHECK_FAILS(ctx, ct_data_read_file(ctx, tpath(p, "trunc.gz"), 1 << 20, &data, &size),
                CT_ERR_FORMAT, p, "truncated gzip", "unexpected end of file");
    for (size_t i = 40; i < 200 && i < n - 8; i++)
        gz[i] = (unsigned char)(i * 37);
    write_file("garbled.gz", gz, n, false);
    CHECK_FAILS(ctx, ct_data_read_file(ctx, tpath(p, "garbled.gz"), 1 << 20, &data, &size),
                CT_ERR_FORMAT, p);
    free(gz);
    finish_ctx(ctx, &b);
}

/* ---- idx ---- */

static void check_idx_samples(ct_ctx *ctx, ct_dataset *ds, int64_t n) {
    const ct_dataset_info *in = ct_dataset_info_of(ds);
    CT_CHECK_INT(in->n, n);
    CT_CHECK_INT(in->x_dtype, CT_U8);
    CT_CHECK_INT(in->x_ndim, 3);
    CT_CHECK(in->x_shape[0] == 1 && in->x_shape[1] == ROWS && in->x_shape[2] == COLS);
    CT_CHECK_INT(in->y_dtype, CT_I64);
    CT_CHECK_INT(in->y_ndim, 0);
    CT_CHECK_INT(in->n_classes, 10);
    for (int64_t i = 0; i < n; i++) {
        unsigned char x[ROWS * COLS];
        int64_t y = -1;
        CT_CHECK_INT(ct_dataset_get(ds, i, x, &y), CT_OK);
        CT_CHECK_INT(y, idx_labels_ok[i]);
        for (int j = 0; j < ROWS * COLS; j++)
            CT_CHECK_INT(x[j], pixel((int)i, j));
    }
    unsigned char x[ROWS * COLS];
    int64_t y;
    CHECK_FAILS(ctx, ct_dataset_get(ds, n, x, &y), CT_ERR_INVALID_ARG, "out of");
}

static void idx_should_load_plain_and_gzip_files(void) {
    big_alloc b = {0};
    ct_ctx *ctx = make_ctx(&b);
    write_idx_ok(false);
    write_idx_ok(true);
    char pi[256], pl[256], gi[256], gl[256];
    tpath(pi, "img.idx"), tpath(pl, "lbl.idx"), tpath(gi, "img.idx.gz"), tpath(gl, "lbl.idx.gz");
    ct_dataset *ds = NULL;
    CT_CHECK_INT(OPEN(ctx, "idx", &ds, {"images", pi}, {"labels", pl}), CT_OK);
    if (ds) check_idx_samples(ctx, ds, N_IMG);
    ct_dataset_close(ds);
    CT_CHECK_INT(OPEN(ctx, "idx", &ds, {"images", gi}, {"labels", gl}), CT_OK);
    if (ds) check_idx_samples(ctx, ds, N_IMG);
    ct_dataset_close(ds);
    CT_CHECK_INT(OPEN(ctx, "idx", &ds, {"images", gi}, {"labels", pl}, {"limit", "3"}), CT_OK);
    if (ds) check_idx_samples(ctx, ds, 3);
    ct_dataset_close(ds);
    CT_CHECK_INT(OPEN(ctx, "idx", &ds, {"images", pi}, {"labels", gl}, {"limit", "99"}), CT_OK);
    if (ds) check_idx_samples(ctx, ds, N_IMG);
    ct_dataset_close(ds);
    finish_ctx(ctx, &b);
}

static void idx_should_reject_bad_magic_and_options(void) {
    ct_ctx *ctx = make_ctx(NULL);
    write_idx_ok(false);
    char pi[256], pl[256], p[256];
    tpath(pi, "img.idx"), tpath(pl, "lbl.idx");
    ct_dataset *ds = NULL;
    /* the labels file given as images */
    CHECK_FAILS(ctx, OPEN(ctx, "idx", &ds, {"images", pl}, {"labels", pi}), CT_ERR_FORMAT, pl,
                "offset 0", "expected magic 0x00000803", "found 0x00000801", "swapped");
    write_idx_images("f32.idx", 0x00000D03u, N_IMG, ROWS, COLS, N_IMG * ROWS * COLS, false);
    CHECK_FAILS(ctx, OPEN(ctx, "idx", &ds, {"images", tpath(p, "f32.idx")}, {"labels", pl}),
                CT_ERR_FORMAT, p, "found 0x00000d03", "element type 0x0d with 3 dims");
    static const char zip[] = "PK\x03\x04 not an idx file";
    write_file("zip.idx", zip, sizeof zip - 1, false);
    CHECK_FAILS(ctx, OPEN(ctx, "idx", &ds, {"images", pi}, {"labels", tpath(p, "zip.idx")}),
                CT_ERR_FORMAT, p, "offset 0", "expected magic 0x00000801", "found 0x504b0304",
                "not an IDX file");
    write_file("short.idx", "\0\0\x08\x03\0\0", 6, false);
    CHECK_FAILS(ctx, OPEN(ctx, "idx", &ds, {"images", tpath(p, "short.idx")}, {"labels", pl}),
                CT_ERR_FORMAT, p, "expected a 16-byte IDX", "found a 6-byte file");
    CHECK_FAILS(ctx, OPEN(ctx, "idx", &ds, {"labels", pl}), CT_ERR_CONFIG, "'images'", "required");
    CHECK_FAILS(ctx, OPEN(ctx, "idx", &ds, {"images", pi}, {"labels", pl}, {"label", pl}),
                CT_ERR_CONFIG, "unknown key 'label'");
    CHECK_FAILS(ctx, OPEN(ctx, "idx", &ds, {"images", pi}, {"labels", pl}, {"limit", "-1"}),
                CT_ERR_CONFIG, "limit");
    CHECK_FAILS(ctx, OPEN(ctx, "idx", &ds, {"images", tpath(p, "nope.idx")}, {"labels", pl}),
                CT_ERR_IO, p, "No such file");
    /* a corrupt gzip images file names that file */
    write_idx_ok(true);
    size_t n;
    unsigned char *gz = slurp("img.idx.gz", &n);
    gz[n - 6] ^= 0xFF;
    write_file("bad.idx.gz", gz, n, false);
    free(gz);
    CHECK_FAILS(ctx, OPEN(ctx, "idx", &ds, {"images", tpath(p, "bad.idx.gz")}, {"labels", pl}),
                CT_ERR_FORMAT, p, "corrupt gzip");
    ct_ctx_destroy(ctx);
}

static void idx_should_check_header_counts_before_allocating(void) {
    big_alloc b = {0};
    ct_ctx *ctx = make_ctx(&b);
    write_idx_ok(false);
    char p[256], pl[256];
    tpath(pl, "lbl.idx");
    ct_dataset *ds = NULL;
    /* truncated: 5 images announced, 4 present */
    write_idx_images("trunc.idx", 0x803, N_IMG, ROWS, COLS, 4 * ROWS * COLS, false);
    CHECK_FAILS(ctx, OPEN(ctx, "idx", &ds, {"images", tpath(p, "trunc.idx")}, {"labels", pl}),
                CT_ERR_FORMAT, p,
                "expected N*rows*cols = 5*3*4 = 60 bytes of pixels after the 16-byte header, "
                "found 48");
    /* extra bytes are as wrong as missing ones */
    write_idx_images("long.idx", 0x803, N_IMG, ROWS, COLS, 6 * ROWS * COLS, false);
    CHECK_FAILS(ctx, OPEN(ctx, "idx", &ds, {"images", tpath(p, "long.idx")}, {"labels", pl}),
                CT_ERR_FORMAT, p, "= 60 bytes", "found 72");
    /* absurd counts in a tiny file, plain and gzip: no allocation near the claimed size */
    for (int gz = 0; gz < 2; gz++) {
        const char *name = gz ? "absurd.idx.gz" : "absurd.idx";
        write_idx_images(name, 0x803, 0xFFFFFFFFu, 28, 28, 100, gz);
        b.max_size = 0;
        CHECK_FAILS(ctx, OPEN(ctx, "idx", &ds, {"images", tpath(p, name)}, {"labels", pl}),
                    CT_ERR_FORMAT, p, "4294967295*28*28 = 3367254359280 bytes", "found 100");
        /* the file, and zlib's state for the .gz: kilobytes, not terabytes */
        CT_CHECK_MSG(b.max_size <= 65536, "largest allocation %zu", b.max_size);
    }
    write_idx_images("over.idx", 0x803, 0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu, 10, false);
    CHECK_FAILS(ctx, OPEN(ctx, "idx", &ds, {"images", tpath(p, "over.idx")}, {"labels", pl}),
                CT_ERR_FORMAT, p, "more than 2^64", "found 10");
    write_idx_images("zero.idx", 0x803, N_IMG, 0, COLS, 0, false);
    CHECK_FAILS(ctx, OPEN(ctx, "idx", &ds, {"images", tpath(p, "zero.idx")}, {"labels", pl}),
                CT_ERR_FORMAT, p, "offset 8", "positive rows", "found 0");
    finish_ctx(ctx, &b);
}

static void idx_should_reject_bad_labels_and_count_mismatch(void) {
    ct_ctx *ctx = make_ctx(NULL);
    write_idx_ok(false);
    char p[256], pi[256];
    tpath(pi, "img.idx");
    ct_dataset *ds = NULL;
    const unsigned char bad[N_IMG] = {3, 0, 10, 1, 7};
    write_idx_labels("bad.lbl", 0x801, N_IMG, bad, N_IMG, false);
    CHECK_FAILS(ctx, OPEN(ctx, "idx", &ds, {"images", pi}, {"labels", tpath(p, "bad.lbl")}),
                CT_ERR_FORMAT, p, "offset 10 (label 2)", "expected a class in [0, 10)", "found 10");
    write_idx_labels("four.lbl", 0x801, 4, idx_labels_ok, 4, false);
    CHECK_FAILS(ctx, OPEN(ctx, "idx", &ds, {"images", pi}, {"labels", tpath(p, "four.lbl")}),
                CT_ERR_FORMAT, p, "expected 5 labels", pi, "found 4");
    write_idx_labels("short.lbl", 0x801, N_IMG, idx_labels_ok, 3, false);
    CHECK_FAILS(ctx, OPEN(ctx, "idx", &ds, {"images", pi}, {"labels", tpath(p, "short.lbl")}),
                CT_ERR_FORMAT, p, "expected N = 5 bytes of labels after the 8-byte header",
                "found 3");
    ct_ctx_destroy(ctx);
}

/* ---- cifar10 ---- */

enum { REC = 3073 };

/* n records; record r has label labels[r] and pixels (base + r) * 7 + j. */
static void write_cifar(const char *name, const unsigned char *labels, int n, int base, bool gz) {
    unsigned char *buf = malloc((size_t)n * REC);
    for (int r = 0; r < n; r++) {
        buf[(size_t)r * REC] = labels[r];
        for (int j = 0; j < 3072; j++)
            buf[(size_t)r * REC + 1 + (size_t)j] = (unsigned char)((base + r) * 7 + j);
    }
    write_file(name, buf, (size_t)n * REC, gz);
    free(buf);
}

static void cifar10_should_load_records_across_files(void) {
    big_alloc b = {0};
    ct_ctx *ctx = make_ctx(&b);
    const unsigned char la[2] = {6, 9}, lb[3] = {0, 4, 1};
    write_cifar("c1.bin", la, 2, 0, false);
    write_cifar("c2.bin.gz", lb, 3, 2, true);
    char p1[256], p2[256], list[600];
    (void)snprintf(list, sizeof list, "%s, %s", tpath(p1, "c1.bin"), tpath(p2, "c2.bin.gz"));
    ct_dataset *ds = NULL;
    CT_CHECK_INT(OPEN(ctx, "cifar10", &ds, {"files", list}), CT_OK);
    if (ds) {
        const ct_dataset_info *in = ct_dataset_info_of(ds);
        CT_CHECK_INT(in->n, 5);
        CT_CHECK(in->x_dtype == CT_U8 && in->x_ndim == 3 && in->x_shape[0] == 3 &&
                 in->x_shape[1] == 32 && in->x_shape[2] == 32);
        CT_CHECK(in->y_dtype == CT_I64 && in->y_ndim == 0 && in->n_classes == 10);
        const unsigned char labels[5] = {6, 9, 0, 4, 1};
        for (int64_t i = 0; i < 5; i++) {
            unsigned char x[3072];
            int64_t y = -1;
            CT_CHECK_INT(ct_dataset_get(ds, i, x, &y), CT_OK);
            CT_CHECK_INT(y, labels[i]);
            int bad = 0;
            for (int j = 0; j < 3072; j++)
                bad += x[j] != (unsigned char)(i * 7 + j);
            CT_CHECK_INT(bad, 0);
        }
    }
    ct_dataset_close(ds);
    CT_CHECK_INT(OPEN(ctx, "cifar10", &ds, {"files", list}, {"limit", "3"}), CT_OK);
    CT_CHECK(ds && ct_dataset_info_of(ds)->n == 3);
    ct_dataset_close(ds);
    finish_ctx(ctx, &b);
}

static void cifar10_should_reject_bad_files(void) {
    ct_ctx *ctx = make_ctx(NULL);
    const unsigned char la[3] = {1, 2, 3}, bad[3] = {1, 10, 3};
    write_cifar("ok.bin", la, 3, 0, false);
    char p[256], ok[256], list[600];
    tpath(ok, "ok.bin");
    ct_dataset *ds = NULL;
    size_t n;
    unsigned char *buf = slurp("ok.bin", &n);
    write_file("odd.bin", buf, 2 * REC + 5, false);
    (void)snprintf(list, sizeof list, "%s,%s", ok, tpath(p, "odd.bin"));
    CHECK_FAILS(ctx, OPEN(ctx, "cifar10", &ds, {"files", list}), CT_ERR_FORMAT, p,
                "size 6151 bytes", "expected a positive multiple of the 3073-byte record",
                "found 2 records and 5 extra bytes");
    write_file("c100.bin", buf, 2 * 3074, false);
    CHECK_FAILS(ctx, OPEN(ctx, "cifar10", &ds, {"files", tpath(p, "c100.bin")}), CT_ERR_FORMAT, p,
                "CIFAR-100");
    free(buf);
    write_file("empty.bin", "", 0, false);
    CHECK_FAILS(ctx, OPEN(ctx, "cifar10", &ds, {"files", tpath(p, "empty.bin")}), CT_ERR_FORMAT, p,
                "size 0 bytes");
    write_cifar("badlabel.bin", bad, 3, 0, false);
    (void)snprintf(list, sizeof list, "%s,%s", ok, tpath(p, "badlabel.bin"));
    CHECK_FAILS(ctx, OPEN(ctx, "cifar10", &ds, {"files", list}), CT_ERR_FORMAT, p,
                "offset 3073 (record 1)", "expected a label in [0, 10)", "found 10");
    (void)snprintf(list, sizeof list, "%s,,%s", ok, ok);
    CHECK_FAILS(ctx, OPEN(ctx, "cifar10", &ds, {"files", list}), CT_ERR_CONFIG, "'files'",
                "entry 2", "empty");
    CHECK_FAILS(ctx, OPEN(ctx, "cifar10", &ds, {"limit", "2"}), CT_ERR_CONFIG, "'files'",
                "required");
    (void)snprintf(list, sizeof list, "%s,%s", ok, tpath(p, "gone.bin"));
    CHECK_FAILS(ctx, OPEN(ctx, "cifar10", &ds, {"files", list}), CT_ERR_IO, p, "No such file");
    ct_ctx_destroy(ctx);
}

/* ---- npy ---- */

static void npy_should_load_every_supported_variant(void) {
    big_alloc b = {0};
    ct_ctx *ctx = make_ctx(&b);
    write_npy_ok();
    char px[256], py[256];
    tpath(px, "x.npy"), tpath(py, "y.npy");
    ct_dataset *ds = NULL;
    float x[8];
    int64_t yi;
    float yf[2];

    /* v1, <f4 features (4, 2, 3), <i8 class labels */
    CT_CHECK_INT(OPEN(ctx, "npy", &ds, {"features", px}, {"labels", py}), CT_OK);
    if (ds) {
        const ct_dataset_info *in = ct_dataset_info_of(ds);
        CT_CHECK_INT(in->n, 4);
        CT_CHECK(in->x_dtype == CT_F32 && in->x_ndim == 2 && in->x_shape[0] == 2 &&
                 in->x_shape[1] == 3);
        CT_CHECK(in->y_dtype == CT_I64 && in->y_ndim == 0);
        CT_CHECK_INT(in->n_classes, 6);
        for (int64_t i = 0; i < 4; i++) {
            CT_CHECK_INT(ct_dataset_get(ds, i, x, &yi), CT_OK);
            CT_CHECK_INT(yi, npy_y4[i]);
            CT_CHECK(memcmp(x, npy_x4 + 6 * i, 6 * sizeof(float)) == 0);
        }
    }
    ct_dataset_close(ds);

    /* v2, <f8 features (3, 5) converted to f32, <f4 regression targets; double quotes, no
     * trailing comma, keys in another order, a Python 2 long */
    const double xd[15] = {1.5, -2.25, 1e300, -1e300, 3.0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 0.1};
    const float yr[3] = {0.5f, -1.0f, 2.5f};
    write_npy("xd.npy", 2, "{\"shape\": (3L,5), \"fortran_order\": False, \"descr\": \"<f8\"}", xd,
              sizeof xd, false);
    write_npy("yr.npy", 2, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,)}", yr, sizeof yr,
              false);
    char p1[256], p2[256];
    /* 1e300 is beyond the f32 range: refused by default, the inf it becomes with allow */
    CHECK_FAILS(
        ctx,
        OPEN(ctx, "npy", &ds, {"features", tpath(p1, "xd.npy")}, {"labels", tpath(p2, "yr.npy")}),
        CT_ERR_FORMAT, p1,
        "offset 144: element 2 (row 0, column 2) is 1e+300, beyond the f32 range",
        "'nonfinite': allow");
    CT_CHECK_INT(OPEN(ctx, "npy", &ds, {"features", tpath(p1, "xd.npy")},
                      {"labels", tpath(p2, "yr.npy")}, {"nonfinite", "allow"}),
                 CT_OK);
    if (ds) {
        const ct_dataset_info *in = ct_dataset_info_of(ds);
        CT_CHECK(in->n == 3 && in->x_dtype == CT_F32 && in->x_ndim == 1 && in->x_shape[0] == 5);
        CT_CHECK(in->y_dtype == CT_F32 && in->y_ndim == 0 && in->n_classes == 0);
        for (int64_t i = 0; i < 3; i++) {
            CT_CHECK_INT(ct_dataset_get(ds, i, x, yf), CT_OK);
            CT_CHECK(yf[0] == yr[i]);
            for (int j = 0; j < 5; j++)
                if (fabs(xd[5 * i + j]) < 1e30) CT_CHECK(x[j] == (float)xd[5 * i + j]);
        }
        CT_CHECK_INT(ct_dataset_get(ds, 0, x, yf), CT_OK);
        CT_CHECK(isinf(x[2]) && x[2] > 0 && isinf(x[3]) && x[3] < 0); /* out of f32 range */
    }
    ct_dataset_close(ds);

    /* |u1 features stay u8; |u1 class labels; gzip-compressed features */
    const unsigned char xu[12] = {0, 1, 2, 3, 250, 251, 252, 253, 7, 8, 9, 255};
    const unsigned char yu[3] = {1, 1, 3};
    write_npy("xu.npy.gz", 1, "{'descr': '|u1', 'fortran_order': False, 'shape': (3, 2, 2), }", xu,
              sizeof xu, true);
    write_npy("yu.npy", 1, "{'descr': '|u1', 'fortran_order': False, 'shape': (3,), }", yu,
              sizeof yu, false);
    CT_CHECK_INT(OPEN(ctx, "npy", &ds, {"features", tpath(p1, "xu.npy.gz")},
                      {"labels", tpath(p2, "yu.npy")}, {"limit", "2"}),
                 CT_OK);
    if (ds) {
        const ct_dataset_info *in = ct_dataset_info_of(ds);
        CT_CHECK(in->n == 2 && in->x_dtype == CT_U8 && in->x_ndim == 2 && in->n_classes == 4);
        unsigned char xb[4];
        CT_CHECK_INT(ct_dataset_get(ds, 1, xb, &yi), CT_OK);
        CT_CHECK(memcmp(xb, xu + 4, 4) == 0 && yi == 1);
    }
    ct_dataset_close(ds);

    /* <i8 features to f32, (N, k) <f8 targets to f32 [k] */
    const int64_t xi[6] = {-5, 1000000, 7, 0, -1, 16777217};
    const double yk[6] = {0.25, -0.5, 1, 2, 3, 4};
    write_npy("xi.npy", 1, "{'descr': '<i8', 'fortran_order': False, 'shape': (3, 2), }", xi,
              sizeof xi, false);
    write_npy("yk.npy", 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (3, 2), }", yk,
              sizeof yk, false);
    CT_CHECK_INT(
        OPEN(ctx, "npy", &ds, {"features", tpath(p1, "xi.npy")}, {"labels", tpath(p2, "yk.npy")}),
        CT_OK);
    if (ds) {
        const ct_dataset_info *in = ct_dataset_info_of(ds);
        CT_CHECK(in->x_dtype == CT_F32 && in->x_ndim == 1 && in->x_shape[0] == 2);
        CT_CHECK(in->y_dtype == CT_F32 && in->y_ndim == 1 && in->y_shape[0] == 2);
        CT_CHECK_INT(ct_dataset_get(ds, 0, x, yf), CT_OK);
        CT_CHECK(x[0] == -5.0f && x[1] == 1e6f && yf[0] == 0.25f && yf[1] == -0.5f);
        CT_CHECK_INT(ct_dataset_get(ds, 2, x, yf), CT_OK);
        CT_CHECK(x[1] == 16777216.0f && yf[0] == 3.0f && yf[1] == 4.0f);
    }
    ct_dataset_close(ds);

    /* 1-D features (one value per sample) and <i4 labels; fortran_order True is harmless in 1-D */
    const float x1[3] = {1, 2, 3};
    const int32_t y1[3] = {0, 2, 1};
    write_npy("x1.npy", 1, "{'descr': '<f4', 'fortran_order': True, 'shape': (3,), }", x1,
              sizeof x1, false);
    write_npy("y1.npy", 1, "{'descr': '<i4', 'fortran_order': False, 'shape': (3,), }", y1,
              sizeof y1, false);
    CT_CHECK_INT(
        OPEN(ctx, "npy", &ds, {"features", tpath(p1, "x1.npy")}, {"labels", tpath(p2, "y1.npy")}),
        CT_OK);
    if (ds) {
        const ct_dataset_info *in = ct_dataset_info_of(ds);
        CT_CHECK(in->x_ndim == 0 && in->y_dtype == CT_I64 && in->n_classes == 3);
        CT_CHECK_INT(ct_dataset_get(ds, 2, x, &yi), CT_OK);
        CT_CHECK(x[0] == 3.0f && yi == 1);
    }
    ct_dataset_close(ds);
    finish_ctx(ctx, &b);
}

/* Writes features with header `dict` (v1) and the given data over the valid labels file, then
 * opens; returns the status. */
static ct_status
open_bad_npy(ct_ctx *ctx, char *px, const char *dict, const void *data, size_t nbytes) {
    write_npy("bad.npy", 1, dict, data, nbytes, false);
    char py[256];
    ct_dataset *ds = NULL;
    ct_status s =
        OPEN(ctx, "npy", &ds, {"features", tpath(px, "bad.npy")}, {"labels", tpath(py, "y.npy")});
    ct_dataset_close(ds);
    return s;
}

static void npy_should_reject_malformed_headers(void) {
    big_alloc b = {0};
    ct_ctx *ctx = make_ctx(&b);
    write_npy_ok();
    char p[256];
    const float *d = npy_x4;
    const size_t nd = sizeof npy_x4;
#define DICT(descr, fortran, shape)                                                                \
    "{'descr': '" descr "', 'fortran_order': " fortran ", 'shape': " shape ", }"
    CHECK_FAILS(ctx, open_bad_npy(ctx, p, DICT(">f4", "False", "(4, 2, 3)"), d, nd), CT_ERR_FORMAT,
                p, "offset 20", "expected little-endian data ('<f4')", "big-endian '>f4'");
    CHECK_FAILS(ctx, open_bad_npy(ctx, p, DICT("<c8", "False", "(4, 2, 3)"), d, nd), CT_ERR_FORMAT,
                p, "expected descr '<f4', '<f8', '<i8', '<i4' or '|u1'", "found '<c8'");
    CHECK_FAILS(ctx, open_bad_npy(ctx, p, DICT("|f4", "False", "(4, 2, 3)"), d, nd), CT_ERR_FORMAT,
                p, "byte order '<'");
    CHECK_FAILS(ctx, open_bad_npy(ctx, p, DICT("<f4", "True", "(4, 2, 3)"), d, nd), CT_ERR_FORMAT,
                p, "expected fortran_order False", "found True");
    CHECK_FAILS(ctx, open_bad_npy(ctx, p, DICT("<f4", "Flase", "(4, 2, 3)"), d, nd), CT_ERR_FORMAT,
                p, "expected True or False", "found 'Flase");
    CHECK_FAILS(ctx, open_bad_npy(ctx, p, DICT("<f4", "False", "(99999999999999999999, 3)"), d, nd),
                CT_ERR_FORMAT, p, "expected a dimension below 2^63", "'99999999999999");
    CHECK_FAILS(ctx, open_bad_npy(ctx, p, DICT("<f4", "False", "(-4, 6)"), d, nd), CT_ERR_FORMAT, p,
                "non-negative integer");
    CHECK_FAILS(ctx, open_bad_npy(ctx, p, DICT("<f4", "False", "(4; 6)"), d, nd), CT_ERR_FORMAT, p,
                "expected ',' or ')'", "found '; 6)");
    CHECK_FAILS(ctx,
                open_bad_npy(ctx, p, DICT("<f4", "False", "(1099511627776, 1099511627776)"), d, nd),
                CT_ERR_FORMAT, p, "expected more than 2^63 bytes", "found 96");
    /* a huge N in a tiny file fails before any allocation near its claimed size */
    b.max_size = 0;
    CHECK_FAILS(ctx, open_bad_npy(ctx, p, DICT("<f4", "False", "(1099511627776, 4)"), d, 16),
                CT_ERR_FORMAT, p,
                "expected 17592186044416 bytes of data (shape (1099511627776, 4) of '<f4') after "
                "the 128-byte header, found 16");
    CT_CHECK_MSG(b.max_size < 4096, "largest allocation %zu", b.max_size);
    CHECK_FAILS(ctx, open_bad_npy(ctx, p, DICT("<f4", "False", "(4, 2, 3)"), d, nd - 4),
                CT_ERR_FORMAT, p, "expected 96 bytes", "found 92");
    unsigned char extra[100] = {0};
    CHECK_FAILS(ctx, open_bad_npy(ctx, p, DICT("<f4", "False", "(4, 2, 3)"), extra, 100),
                CT_ERR_FORMAT, p, "expected 96 bytes", "found 100");
    CHECK_FAILS(ctx, open_bad_npy(ctx, p, DICT("<f4", "False", "()"), d, 4), CT_ERR_FORMAT, p,
                "shape (N, ...)", "found shape ()");
    CHECK_FAILS(ctx, open_bad_npy(ctx, p, DICT("<f4", "False", "(0, 3)"), d, 0), CT_ERR_FORMAT, p,
                "positive dims", "(0, 3)");
    CHECK_FAILS(ctx, open_bad_npy(ctx, p, "{'descr': '<f4', 'fortran_order': False, }", d, nd),
                CT_ERR_FORMAT, p, "found no 'shape'");
    CHECK_FAILS(ctx,
                open_bad_npy(ctx, p,
                             "{'descr': '<f4', 'fortran_order': False, 'shape': (4, 6), "
                             "'extra': 1}",
                             d, nd),
                CT_ERR_FORMAT, p, "found 'extra'");
    CHECK_FAILS(ctx,
                open_bad_npy(ctx, p,
                             "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, "
                             "'shape': (4, 6)}",
                             d, nd),
                CT_ERR_FORMAT, p, "'descr' appears twice");
    CHECK_FAILS(ctx,
                open_bad_npy(ctx, p,
                             "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (4,)}", d,
                             nd),
                CT_ERR_FORMAT, p, "structured");
    CHECK_FAILS(ctx, open_bad_npy(ctx, p, "{'descr': '<f4', 'fortran_order': False", d, nd),
                CT_ERR_FORMAT, p, "expected ',' or '}'", "found the end of the header");
    CHECK_FAILS(ctx, open_bad_npy(ctx, p, "{'descr': '<f4}", d, nd), CT_ERR_FORMAT, p,
                "a closed string");
    CHECK_FAILS(ctx, open_bad_npy(ctx, p, "descr", d, nd), CT_ERR_FORMAT, p, "offset 10",
                "expected '{'");
#undef DICT

    /* the preamble: magic, version, header length */
    size_t n;
    unsigned char *buf =
        make_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (4, 6)}", d, nd, &n);
    char py[256];
    tpath(py, "y.npy");
    ct_dataset *ds = NULL;
    buf[5] = 'Z';
    write_file("magic.npy", buf, n, false);
    CHECK_FAILS(ctx, OPEN(ctx, "npy", &ds, {"features", tpath(p, "magic.npy")}, {"labels", py}),
                CT_ERR_FORMAT, p, "offset 0", "found 93 4e 55 4d 50 5a");
    buf[5] = 'Y';
    buf[6] = 3;
    write_file("v3.npy", buf, n, false);
    CHECK_FAILS(ctx, OPEN(ctx, "npy", &ds, {"features", tpath(p, "v3.npy")}, {"labels", py}),
                CT_ERR_FORMAT, p, "offset 6", "expected format version 1.0 or 2.0, found 3.0");
    buf[6] = 1;
    buf[8] = 0xFF, buf[9] = 0xFF;
    write_file("len.npy", buf, n, false);
    CHECK_FAILS(ctx, OPEN(ctx, "npy", &ds, {"features", tpath(p, "len.npy")}, {"labels", py}),
                CT_ERR_FORMAT, p, "offset 8", "found 65535");
    write_file("tiny.npy", buf, 5, false);
    CHECK_FAILS(ctx, OPEN(ctx, "npy", &ds, {"features", tpath(p, "tiny.npy")}, {"labels", py}),
                CT_ERR_FORMAT, p, "offset 0", "preamble", "(5 bytes)");
    free(buf);
    finish_ctx(ctx, &b);
}

/* inf and NaN in float features or targets fail the open by default, named by the file, the
 * offset and the element's row and column (or sample and index); nonfinite=allow loads them as
 * they are; limit leaves the samples it drops unchecked. */
static void npy_should_refuse_nonfinite_values_unless_allowed(void) {
    ct_ctx *ctx = make_ctx(NULL);
    write_npy_ok();
    char px[256], p[256], py[256];
    tpath(px, "x.npy");
    ct_dataset *ds = NULL;
    float x2[12] = {0, 1, 2, 3, 4, 5, NAN, 7, 8, 9, 10, 11};
    write_npy("xnan.npy", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }", x2,
              sizeof x2, false);
    CHECK_FAILS(ctx, OPEN(ctx, "npy", &ds, {"features", tpath(p, "xnan.npy")}), CT_ERR_FORMAT, p,
                "offset 152: element 6 (row 1, column 2) is NaN: expected finite values",
                "key 'nonfinite': allow");
    CT_CHECK_INT(OPEN(ctx, "npy", &ds, {"features", p}, {"nonfinite", "allow"}), CT_OK);
    if (ds) {
        float x[4];
        int64_t y;
        CT_CHECK_INT(ct_dataset_get(ds, 1, x, &y), CT_OK);
        CT_CHECK(isnan(x[2]) && x[3] == 7.0f);
    }
    ct_dataset_close(ds);
    ds = NULL;
    CT_CHECK_INT(OPEN(ctx, "npy", &ds, {"features", p}, {"limit", "1"}), CT_OK);
    ct_dataset_close(ds);
    ds = NULL;
    CHECK_FAILS(ctx, OPEN(ctx, "npy", &ds, {"features", p}, {"nonfinite", "no"}), CT_ERR_CONFIG,
                "key 'nonfinite': expected error or allow, got 'no'");

    /* (2, 2, 3): the sample and the index within it; f8 converted, -inf */
    x2[6] = 6;
    x2[10] = INFINITY;
    write_npy("x3.npy", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2, 3), }", x2,
              sizeof x2, false);
    CHECK_FAILS(ctx, OPEN(ctx, "npy", &ds, {"features", tpath(p, "x3.npy")}), CT_ERR_FORMAT, p,
                "offset 168: element 10 (sample 1, index [1, 1]) is inf");
    const double d3[3] = {1, 2, -INFINITY};
    write_npy("xd1.npy", 2, "{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }", d3,
              sizeof d3, false);
    CHECK_FAILS(ctx, OPEN(ctx, "npy", &ds, {"features", tpath(p, "xd1.npy")}), CT_ERR_FORMAT, p,
                "offset 144: element 2 (row 2) is -inf");

    /* regression targets, (N,) f4 and (N, k) f8 */
    const float yf[4] = {0.5f, 1, 2, NAN};
    write_npy("yf.npy", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }", yf,
              sizeof yf, false);
    CHECK_FAILS(ctx, OPEN(ctx, "npy", &ds, {"features", px}, {"labels", tpath(py, "yf.npy")}),
                CT_ERR_FORMAT, py, "offset 140: element 3 (row 3) is NaN");
    CT_CHECK_INT(OPEN(ctx, "npy", &ds, {"features", px}, {"labels", py}, {"limit", "3"}), CT_OK);
    ct_dataset_close(ds);
    ds = NULL;
    const double yk[8] = {0, 1, 2, 3, 4, NAN, 6, 7};
    write_npy("yk.npy", 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (4, 2), }", yk,
              sizeof yk, false);
    CHECK_FAILS(ctx, OPEN(ctx, "npy", &ds, {"features", px}, {"labels", tpath(py, "yk.npy")}),
                CT_ERR_FORMAT, py, "offset 168: element 5 (row 2, column 1) is NaN");

    /* data at an offset that is not a multiple of 4 (a hand-made header) */
    const char dict[] = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }";
    size_t dl = sizeof dict - 1, hl = dl + 1;
    while ((10 + hl) % 4 != 1)
        hl++;
    unsigned char buf[256];
    memcpy(buf, "\x93NUMPY\x01\x00", 8);
    buf[8] = (unsigned char)hl;
    buf[9] = 0;
    memcpy(buf + 10, dict, dl);
    memset(buf + 10 + dl, ' ', hl - dl - 1);
    buf[10 + hl - 1] = '\n';
    const float odd[4] = {1, 2, 3, -INFINITY};
    memcpy(buf + 10 + hl, odd, sizeof odd);
    write_file("odd.npy", buf, 10 + hl + sizeof odd, false);
    char want[96];
    (void)snprintf(want, sizeof want, "offset %zu: element 3 (row 1, column 1) is -inf",
                   10 + hl + 12);
    CHECK_FAILS(ctx, OPEN(ctx, "npy", &ds, {"features", tpath(p, "odd.npy")}), CT_ERR_FORMAT, p,
                want);
    ct_ctx_destroy(ctx);
}

static void npy_should_reject_bad_labels(void) {
    ct_ctx *ctx = make_ctx(NULL);
    write_npy_ok();
    char px[256], p[256];
    tpath(px, "x.npy");
    ct_dataset *ds = NULL;
    const int64_t three[3] = {0, 1, 2}, neg[4] = {0, 1, -1, 2};
    write_npy("y3.npy", 1, "{'descr': '<i8', 'fortran_order': False, 'shape': (3,), }", three,
              sizeof three, false);
    CHECK_FAILS(ctx, OPEN(ctx, "npy", &ds, {"features", px}, {"labels", tpath(p, "y3.npy")}),
                CT_ERR_FORMAT, p, "expected 4 labels", px, "found 3");
    write_npy("yneg.npy", 1, "{'descr': '<i8', 'fortran_order': False, 'shape': (4,), }", neg,
              sizeof neg, false);
    CHECK_FAILS(ctx, OPEN(ctx, "npy", &ds, {"features", px}, {"labels", tpath(p, "yneg.npy")}),
                CT_ERR_FORMAT, p, "offset 144 (label 2)", "expected a class index", "found -1");
    write_npy("y2d.npy", 1, "{'descr': '<i8', 'fortran_order': False, 'shape': (4, 1), }", neg,
              sizeof neg, false);
    CHECK_FAILS(ctx, OPEN(ctx, "npy", &ds, {"features", px}, {"labels", tpath(p, "y2d.npy")}),
                CT_ERR_FORMAT, p, "expected labels of shape (N,)", "found shape (4, 1)");
    write_npy("ybe.npy", 1, "{'descr': '>i8', 'fortran_order': False, 'shape': (4,), }", neg,
              sizeof neg, false);
    CHECK_FAILS(ctx, OPEN(ctx, "npy", &ds, {"features", px}, {"labels", tpath(p, "ybe.npy")}),
                CT_ERR_FORMAT, p, "big-endian");
    /* without labels: unlabelled features (what ctrain predict reads), every target class 0 */
    CT_CHECK_INT(OPEN(ctx, "npy", &ds, {"features", px}), CT_OK);
    if (ds) {
        const ct_dataset_info *in = ct_dataset_info_of(ds);
        CT_CHECK_INT(in->n, 4);
        CT_CHECK(in->y_dtype == CT_I64 && in->y_ndim == 0 && in->n_classes == 0);
        float x[6];
        int64_t y = -1;
        CT_CHECK(in->x_ndim == 2 && in->x_shape[0] == 2 && in->x_shape[1] == 3);
        CT_CHECK_INT(ct_dataset_get(ds, 3, x, &y), CT_OK);
        CT_CHECK_INT(y, 0);
        CT_CHECK(memcmp(x, npy_x4 + 18, sizeof x) == 0); /* sample 3's six floats */
        ct_dataset_close(ds);
    }
    ct_ctx_destroy(ctx);
}

/* ---- allocation failures, registry ---- */

/* Opens with the k-th allocation failing, for k = 1.. until it succeeds: each failure must be
 * CT_ERR_OOM and leave nothing allocated. */
static void check_oom_sweep(const char *type, const ct_option *o, size_t count) {
    big_alloc b = {0};
    ct_ctx *ctx = make_ctx(&b);
    long long base = b.ta.live;
    bool opened = false;
    for (long long k = 1; k < 200 && !opened; k++) {
        b.ta.fail_at = b.ta.n_alloc + k;
        ct_dataset *ds = NULL;
        ct_status s = open_opts(ctx, type, o, count, &ds);
        b.ta.fail_at = 0;
        if (s == CT_OK) {
            opened = true;
            ct_dataset_close(ds);
        } else {
            CT_CHECK_MSG(s == CT_ERR_OOM, "%s, k=%lld: %s: %s", type, k, ct_status_str(s),
                         ct_last_error(ctx));
        }
        CT_CHECK_MSG(b.ta.live == base, "%s, k=%lld: %lld bytes leaked", type, k, b.ta.live - base);
    }
    CT_CHECK_MSG(opened, "%s never opened", type);
    finish_ctx(ctx, &b);
}

static void datasets_should_not_leak_when_allocations_fail(void) {
    write_idx_ok(true);
    write_npy_ok();
    const unsigned char la[2] = {6, 9};
    write_cifar("c1.bin", la, 2, 0, false);
    write_cifar("c1.bin.gz", la, 2, 0, true);
    const double xd[4] = {1, 2, 3, 4};
    write_npy("xd2.npy", 2, "{'descr': '<f8', 'fortran_order': False, 'shape': (4, 1), }", xd,
              sizeof xd, false);
    char a[256], b2[256], c[256], list[600];
    check_oom_sweep(
        "idx",
        (ct_option[]){{"images", tpath(a, "img.idx.gz")}, {"labels", tpath(b2, "lbl.idx.gz")}}, 2);
    (void)snprintf(list, sizeof list, "%s,%s", tpath(a, "c1.bin"), tpath(b2, "c1.bin.gz"));
    check_oom_sweep("cifar10", (ct_option[]){{"files", list}}, 1);
    check_oom_sweep(
        "npy", (ct_option[]){{"features", tpath(a, "xd2.npy")}, {"labels", tpath(c, "y.npy")}}, 2);
}

static void registry_should_list_the_format_types(void) {
    const char *names[] = {"idx", "cifar10", "npy"};
    for (int i = 0; i < 3; i++) {
        const ct_dataset_vtable *vt = ct_dataset_type_find(names[i]);
        CT_CHECK_MSG(vt && strcmp(vt->name, names[i]) == 0, "%s", names[i]);
    }
}

/* ---- the real Fashion-MNIST (Debian: dataset-fashion-mnist) ---- */

static double now_s(void) {
    struct timespec t;
    (void)clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void check_fashion_mnist(ct_ctx *ctx, const char *dir, const char *split, int64_t n) {
    char pi[512], pl[512];
    (void)snprintf(pi, sizeof pi, "%s/%s-images-idx3-ubyte.gz", dir, split);
    (void)snprintf(pl, sizeof pl, "%s/%s-labels-idx1-ubyte.gz", dir, split);
    ct_dataset *ds = NULL;
    double t0 = now_s();
    ct_status s = OPEN(ctx, "idx", &ds, {"images", pi}, {"labels", pl});
    double t1 = now_s();
    CT_CHECK_MSG(s == CT_OK, "%s", ct_last_error(ctx));
    if (!ds) return;
    const ct_dataset_info *in = ct_dataset_info_of(ds);
    CT_CHECK_INT(in->n, n);
    CT_CHECK(in->x_ndim == 3 && in->x_shape[0] == 1 && in->x_shape[1] == 28 &&
             in->x_shape[2] == 28);
    int64_t counts[10] = {0}, bad = 0, sum = 0;
    unsigned char x[784];
    for (int64_t i = 0; i < in->n; i++) {
        int64_t y = -1;
        if (ct_dataset_get(ds, i, x, &y) != CT_OK || y < 0 || y > 9) {
            bad++;
            continue;
        }
        counts[y]++;
        sum += x[392];
    }
    CT_CHECK_INT(bad, 0);
    for (int c = 0; c < 10; c++)
        CT_CHECK_INT(counts[c], n / 10); /* balanced classes */
    CT_CHECK(sum > 0);
    printf("     fashion-mnist %s: %lld images opened in %.1f ms\n", split, (long long)n,
           1e3 * (t1 - t0));
    ct_dataset_close(ds);
}

static void idx_should_load_fashion_mnist_when_installed(void) {
    const char *dir = getenv("CT_FASHION_MNIST_DIR");
    if (!dir) dir = "/usr/share/datasets/fashion-mnist";
    char p[512];
    (void)snprintf(p, sizeof p, "%s/train-images-idx3-ubyte.gz", dir);
    if (access(p, R_OK) != 0) {
        printf("     skipped: %s not found (apt-get install dataset-fashion-mnist, or set "
               "CT_FASHION_MNIST_DIR)\n",
               p);
        return;
    }
    ct_ctx *ctx = make_ctx(NULL);
    check_fashion_mnist(ctx, dir, "train", 60000);
    check_fashion_mnist(ctx, dir, "t10k", 10000);
    ct_ctx_destroy(ctx);
}

/* ---- main ---- */

static void remove_tmp_dir(void) {
    DIR *d = opendir(tmp_dir);
    if (!d) return;
    struct dirent *e;
    char p[512];
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        (void)snprintf(p, sizeof p, "%s/%s", tmp_dir, e->d_name);
        (void)unlink(p);
    }
    (void)closedir(d);
    (void)rmdir(tmp_dir);
}

int main(void) {
    (void)snprintf(tmp_dir, sizeof tmp_dir, "/tmp/ct_data_a_XXXXXX");
    if (!mkdtemp(tmp_dir)) {
        perror("mkdtemp");
        return 1;
    }
    CT_RUN(file_should_read_plain_and_gzip_files);
    CT_RUN(file_should_fail_with_path_errno_and_limits);
    CT_RUN(idx_should_load_plain_and_gzip_files);
    CT_RUN(idx_should_reject_bad_magic_and_options);
    CT_RUN(idx_should_check_header_counts_before_allocating);
    CT_RUN(idx_should_reject_bad_labels_and_count_mismatch);
    CT_RUN(cifar10_should_load_records_across_files);
    CT_RUN(cifar10_should_reject_bad_files);
    CT_RUN(npy_should_load_every_supported_variant);
    CT_RUN(npy_should_reject_malformed_headers);
    CT_RUN(npy_should_reject_bad_labels);
    CT_RUN(npy_should_refuse_nonfinite_values_unless_allowed);
    CT_RUN(datasets_should_not_leak_when_allocations_fail);
    CT_RUN(registry_should_list_the_format_types);
    CT_RUN(idx_should_load_fashion_mnist_when_installed);
    remove_tmp_dir();
    return ct_test_finish();
}
