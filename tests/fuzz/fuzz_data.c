/*
 * fuzz_data.c - libFuzzer target for the dataset types that read files (data.h): idx, npy,
 * csv, cifar10, text and tokens, plain or gzip-compressed.
 *
 * An input is a 4-byte header and a body:
 *   byte 0     the type (value % 6: idx, npy, csv, cifar10, text, tokens); with bit 7 set the
 *              first file is written gzip-compressed (a raw gzip stream in the body reaches the
 *              inflater with its damage; a compressed body reaches the parser behind it whole);
 *   bytes 1-2  where the body is cut in two for the types with two files (idx images | labels,
 *              npy features | labels, csv table | targets): a big-endian offset, capped at the
 *              body's size;
 *   byte 3     option bits: a limit of 2 samples (bit 0; not for text and tokens, which have
 *              no limit key); csv: no header (1), regression (2), ';' or space as the
 *              delimiter (3, 4), standardize (5), targets in a second file (6), else the target
 *              is the column named y (column 0 without a header); npy and csv: nonfinite=allow
 *              (7); text and tokens: the context (1 + bits 1-5, so 1 to 32), a stride of 2 (6);
 *              tokens: vocab 300 rather than 65536 (7).
 * A dataset that opens is read back: every sample up to the 256th and the last one, into
 * buffers of exactly the size its info gives (so ASan sees a write past them), and for text its
 * decoding examples. Whatever the bytes, an open either succeeds or fails with a status and a
 * message; nothing may crash, read or write out of bounds, or leak (every library allocation is
 * counted).
 *
 * Build and run: `make fuzz-data` (see the Makefile and docs/testing.md).
 */
#include <stdint.h>
#include <string.h>
#include <zlib.h>

#define FUZZ_NAME "fuzz_data"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { MAX_READ = 256 }; /* samples read back from a dataset that opens */

/* Writes size bytes to g_root/name, gzip-compressed when gz; the path goes to out. */
static const char *
put_file(char *out, size_t cap, const char *name, const uint8_t *d, size_t size, bool gz) {
    (void)snprintf(out, cap, "%s/%s", g_root, name);
    if (gz) {
        gzFile f = gzopen(out, "wb");
        if (!f || (size && gzwrite(f, d, (unsigned)size) != (int)size) || gzclose(f) != Z_OK)
            die(out);
        return out;
    }
    write_file(out, d, size);
    return out;
}

/* A sample's feature or target bytes: the product of the shape times the element size. */
static size_t sample_bytes(ct_dtype dt, int32_t ndim, const int64_t *shape) {
    size_t n = ct_dtype_size(dt);
    for (int32_t d = 0; d < ndim; d++) {
        if (shape[d] < 0) abort(); /* an info with a negative extent is a bug in itself */
        n *= (size_t)shape[d];
    }
    return n;
}

/* Reads back what an opened dataset promises: its samples, and its examples where it has any. */
static void read_back(ct_dataset *ds) {
    const ct_dataset_info *info = ct_dataset_info_of(ds);
    if (info->n < 0 || info->x_ndim < 0 || info->x_ndim > CT_MAX_DIMS || info->y_ndim < 0 ||
        info->y_ndim > CT_MAX_DIMS)
        abort();
    size_t xb = sample_bytes(info->x_dtype, info->x_ndim, info->x_shape);
    size_t yb = sample_bytes(info->y_dtype, info->y_ndim, info->y_shape);
    /* exact sizes (at least one byte, for malloc), so that ASan catches a write past either */
    uint8_t *x = malloc(xb ? xb : 1), *y = malloc(yb ? yb : 1);
    if (!x || !y) abort();
    bool classes = info->y_dtype == CT_I64 && info->n_classes > 0;
    for (int64_t r = 0; r < info->n && r <= MAX_READ; r++) {
        int64_t i = r < MAX_READ ? r : info->n - 1;        /* the first MAX_READ, then the last */
        if (ct_dataset_get(ds, i, x, y) != CT_OK) abort(); /* an index in [0, n) must read */
        for (size_t j = 0; classes && j < yb / sizeof(int64_t); j++) {
            int64_t c; /* class targets (and tokens) lie in [0, n_classes) */
            memcpy(&c, y + j * sizeof c, sizeof c);
            if (c < 0 || c >= info->n_classes) abort();
        }
    }
    free(x);
    free(y);
    int64_t ne = ct_dataset_n_examples(ds);
    for (int64_t i = 0; i < ne && i < 4; i++) {
        ct_text_example ex;
        if (ct_dataset_example(ds, i, &ex) != CT_OK) abort();
        volatile char sink = 0;
        for (size_t j = 0; j < ex.prompt_len; j++)
            sink ^= ex.prompt[j];
        for (size_t j = 0; j < ex.reference_len; j++)
            sink ^= ex.reference[j];
        (void)sink;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    (void)fuzz_scratch();
    if (size < 4) return 0;
    enum { IDX, NPY, CSV, CIFAR10, TEXT, TOKENS, KINDS };
    static const char *const types[KINDS] = {"idx", "npy", "csv", "cifar10", "text", "tokens"};
    int kind = (data[0] & 0x7f) % KINDS;
    const char *type = types[kind];
    bool gz = (data[0] & 0x80) != 0;
    uint8_t bits = data[3];
    const uint8_t *body = data + 4;
    size_t n = size - 4, cut = (size_t)data[1] << 8 | data[2];
    if (cut > n) cut = n;

    char a[128], b[128], ctx_s[16];
    ct_option items[12];
    int64_t count = 0;
    if ((bits & 1) && kind != TEXT && kind != TOKENS) /* the windows have no limit key */
        items[count++] = (ct_option){"limit", "2"};
    if (kind == IDX) {
        items[count++] = (ct_option){"images", put_file(a, sizeof a, "images", body, cut, gz)};
        items[count++] =
            (ct_option){"labels", put_file(b, sizeof b, "labels", body + cut, n - cut, false)};
    } else if (kind == NPY) {
        items[count++] = (ct_option){"features", put_file(a, sizeof a, "x.npy", body, cut, gz)};
        items[count++] =
            (ct_option){"labels", put_file(b, sizeof b, "y.npy", body + cut, n - cut, false)};
        if (bits & 0x80) items[count++] = (ct_option){"nonfinite", "allow"};
    } else if (kind == CSV) {
        bool two = (bits & 0x40) != 0;
        items[count++] =
            (ct_option){"path", put_file(a, sizeof a, "t.csv", body, two ? cut : n, gz)};
        if (two)
            items[count++] = (ct_option){
                "target_path", put_file(b, sizeof b, "y.csv", body + cut, n - cut, false)};
        if (bits & 2) items[count++] = (ct_option){"header", "false"};
        if (!two) items[count++] = (ct_option){"target", (bits & 2) ? "0" : "y"};
        if (bits & 4) items[count++] = (ct_option){"task", "regression"};
        if (bits & 0x18) items[count++] = (ct_option){"delimiter", (bits & 0x08) ? ";" : "space"};
        if (bits & 0x20) items[count++] = (ct_option){"standardize", "true"};
        if (bits & 0x80) items[count++] = (ct_option){"nonfinite", "allow"};
    } else if (kind == CIFAR10) {
        items[count++] = (ct_option){"files", put_file(a, sizeof a, "batch.bin", body, n, gz)};
    } else {
        bool text = kind == TEXT;
        items[count++] = (ct_option){text ? "files" : "path",
                                     put_file(a, sizeof a, text ? "t.txt" : "t.tok", body, n, gz)};
        (void)snprintf(ctx_s, sizeof ctx_s, "%d", 1 + ((bits >> 1) & 31));
        items[count++] = (ct_option){"context", ctx_s};
        if (bits & 0x40) items[count++] = (ct_option){"stride", "2"};
        if (!text) items[count++] = (ct_option){"vocab", (bits & 0x80) ? "300" : "65536"};
    }
    ct_options opts = {items, count, "fuzz"};

    test_alloc ta = {0};
    ct_ctx *ctx = fuzz_ctx_create(&ta);
    if (ct_dataset_check(ctx, type, &opts) != CT_OK) {
        fprintf(stderr, FUZZ_NAME ": the options were refused: %s\n", ct_last_error(ctx));
        abort(); /* the target builds only valid option sets */
    }
    ct_dataset *ds = NULL;
    ct_status s = ct_dataset_open(ctx, type, &opts, &ds);
    if (s == CT_OK) {
        read_back(ds);
        ct_dataset_close(ds);
    } else if (ds != NULL || ct_last_error(ctx)[0] == '\0') {
        abort(); /* a failed open leaves nothing and says why */
    }
    fuzz_ctx_destroy(ctx, &ta);
    return 0;
}
