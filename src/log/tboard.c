/*
 * tboard.c - TensorBoard event files: a write-only protobuf encoder for the six messages
 * involved (Event, Summary, Summary.Value, HistogramProto, TensorProto with its shape,
 * SummaryMetadata) and the TFRecord framing. Field numbers are those of TensorBoard's
 * event.proto, summary.proto, histogram.proto and tensor.proto (docs/logging.md lists them).
 *
 * Ownership: the writer owns its FILE, its encoding buffers and the histogram's bucket limits,
 * all from the context's allocator except the FILE.
 */
#include "ctrain/tboard.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <png.h>
#include <setjmp.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include "ctrain/crc32c.h"

/* ---- a growable byte buffer and the protobuf wire format ---- */

typedef struct pb {
    ct_ctx *ctx;
    unsigned char *p;
    size_t n, cap;
    bool oom;
} pb;

static void pb_reserve(pb *b, size_t more) {
    if (b->oom || b->n + more <= b->cap) return;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->n + more)
        cap *= 2;
    unsigned char *np = ct_alloc(b->ctx, cap);
    if (!np) {
        b->oom = true;
        return;
    }
    if (b->n) memcpy(np, b->p, b->n);
    ct_free(b->ctx, b->p, b->cap);
    b->p = np;
    b->cap = cap;
}

static void pb_free(pb *b) {
    ct_free(b->ctx, b->p, b->cap);
    b->p = NULL;
    b->n = b->cap = 0;
}

static void pb_bytes(pb *b, const void *d, size_t n) {
    pb_reserve(b, n);
    if (b->oom) return;
    if (n) memcpy(b->p + b->n, d, n);
    b->n += n;
}

static void pb_varint(pb *b, uint64_t v) {
    unsigned char tmp[10];
    size_t k = 0;
    do {
        tmp[k++] = (unsigned char)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v);
    pb_bytes(b, tmp, k);
}

enum { WIRE_VARINT = 0, WIRE_I64 = 1, WIRE_LEN = 2, WIRE_I32 = 5 };

static void pb_key(pb *b, unsigned field, unsigned wire) {
    pb_varint(b, (uint64_t)field << 3 | wire);
}

static void pb_double(pb *b, unsigned field, double v) {
    uint64_t bits;
    memcpy(&bits, &v, sizeof bits);
    unsigned char le[8];
    for (int i = 0; i < 8; i++)
        le[i] = (unsigned char)(bits >> (8 * i));
    pb_key(b, field, WIRE_I64);
    pb_bytes(b, le, 8);
}

static void pb_float(pb *b, unsigned field, float v) {
    uint32_t bits;
    memcpy(&bits, &v, sizeof bits);
    unsigned char le[4];
    for (int i = 0; i < 4; i++)
        le[i] = (unsigned char)(bits >> (8 * i));
    pb_key(b, field, WIRE_I32);
    pb_bytes(b, le, 4);
}

static void pb_len(pb *b, unsigned field, const void *d, size_t n) {
    pb_key(b, field, WIRE_LEN);
    pb_varint(b, n);
    pb_bytes(b, d, n);
}

static void pb_string(pb *b, unsigned field, const char *s) {
    pb_len(b, field, s, strlen(s));
}

static void pb_child(pb *b, unsigned field, const pb *child) {
    if (child->oom) b->oom = true;
    pb_len(b, field, child->p, child->n);
}

/* Packed repeated doubles. */
static void pb_doubles(pb *b, unsigned field, const double *v, size_t n) {
    pb_key(b, field, WIRE_LEN);
    pb_varint(b, n * 8);
    for (size_t i = 0; i < n; i++) {
        uint64_t bits;
        memcpy(&bits, &v[i], sizeof bits);
        unsigned char le[8];
        for (int k = 0; k < 8; k++)
            le[k] = (unsigned char)(bits >> (8 * k));
        pb_bytes(b, le, 8);
    }
}

/* ---- the writer ---- */

struct ct_tb_writer {
    ct_ctx *ctx;
    FILE *f;
    char path[1024];
    pb event, summary, value, inner, inner2; /* reused encoding buffers */
    double *limits;                          /* TensorFlow's default bucket limits */
    double *counts;
    double *out_limits, *out_counts; /* the buckets a histogram writes */
    size_t n_limits;
};

uint32_t ct_tb_masked_crc(const void *data, size_t n) {
    uint32_t c = ct_crc32c(0, data, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

static double now_or(double wall_time) {
    if (wall_time > 0) return wall_time;
    struct timeval tv;
    (void)gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + (double)tv.tv_usec * 1e-6;
}

/* Frames one Event (in w->event) as a TFRecord. */
static ct_status write_record(ct_tb_writer *w) {
    if (w->event.oom) return CT_FAIL(w->ctx, CT_ERR_OOM, "%s: encoding an event", w->path);
    unsigned char head[12];
    uint64_t len = w->event.n;
    for (int i = 0; i < 8; i++)
        head[i] = (unsigned char)(len >> (8 * i));
    uint32_t hc = ct_tb_masked_crc(head, 8);
    for (int i = 0; i < 4; i++)
        head[8 + i] = (unsigned char)(hc >> (8 * i));
    uint32_t dc = ct_tb_masked_crc(w->event.p, w->event.n);
    unsigned char tail[4];
    for (int i = 0; i < 4; i++)
        tail[i] = (unsigned char)(dc >> (8 * i));
    if (fwrite(head, 1, 12, w->f) != 12 || fwrite(w->event.p, 1, w->event.n, w->f) != w->event.n ||
        fwrite(tail, 1, 4, w->f) != 4)
        return CT_FAIL(w->ctx, CT_ERR_IO, "%s: write failed: %s", w->path, strerror(errno));
    return CT_OK;
}

/* Starts an Event with wall_time and step in w->event. */
static void begin_event(ct_tb_writer *w, int64_t step, double wall_time) {
    w->event.n = 0;
    w->event.oom = false;
    pb_double(&w->event, 1, now_or(wall_time));
    if (step != 0) {
        pb_key(&w->event, 2, WIRE_VARINT);
        pb_varint(&w->event, (uint64_t)step);
    }
}

/* Wraps w->value (one Summary.Value) into the Event's summary and writes it. */
static ct_status finish_value(ct_tb_writer *w) {
    w->summary.n = 0;
    w->summary.oom = false;
    pb_child(&w->summary, 1, &w->value);
    pb_child(&w->event, 5, &w->summary);
    return write_record(w);
}

static void reset(pb *b) {
    b->n = 0;
    b->oom = false;
}

ct_status
ct_tb_open(ct_ctx *ctx, const char *dir, char *path_out, size_t path_size, ct_tb_writer **out) {
    *out = NULL;
    ct_tb_writer *w = ct_alloc(ctx, sizeof *w);
    if (!w) return CT_FAIL(ctx, CT_ERR_OOM, "tensorboard: out of memory");
    memset(w, 0, sizeof *w);
    w->ctx = ctx;
    w->event.ctx = w->summary.ctx = w->value.ctx = w->inner.ctx = w->inner2.ctx = ctx;
    char host[256] = "localhost";
    (void)gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = '\0';
    struct timeval tv;
    (void)gettimeofday(&tv, NULL);
    ct_status s = CT_OK;
    /* the counter makes names unique when one process opens several in a second */
    for (int n = 0; n < 1000; n++) {
        (void)snprintf(w->path, sizeof w->path, "%s/events.out.tfevents.%010lld.%s.%lld.%d", dir,
                       (long long)tv.tv_sec, host, (long long)getpid(), n);
        if (access(w->path, F_OK) != 0) break;
    }
    w->f = fopen(w->path, "wb");
    if (!w->f) s = CT_FAIL(ctx, CT_ERR_IO, "%s: cannot create: %s", w->path, strerror(errno));
    /* TensorFlow's default buckets: +-1e-12 * 1.1^k below 1e20, +-DBL_MAX, and 0 */
    size_t half = 0;
    for (double v = 1e-12; v < 1e20; v *= 1.1)
        half++;
    half++; /* DBL_MAX */
    w->n_limits = 2 * half + 1;
    if (s == CT_OK) {
        size_t bytes = w->n_limits * sizeof(double);
        w->limits = ct_alloc(ctx, bytes);
        w->counts = ct_alloc(ctx, bytes);
        w->out_limits = ct_alloc(ctx, bytes);
        w->out_counts = ct_alloc(ctx, bytes);
        if (!w->limits || !w->counts || !w->out_limits || !w->out_counts)
            s = CT_FAIL(ctx, CT_ERR_OOM, "tensorboard: out of memory");
    }
    if (s == CT_OK) {
        size_t k = 0;
        double v = 1e-12;
        for (; k + 1 < half; k++, v *= 1.1)
            w->limits[half + 1 + k] = v;
        w->limits[2 * half] = DBL_MAX;
        w->limits[half] = 0.0;
        for (size_t i = 0; i < half; i++)
            w->limits[half - 1 - i] = -w->limits[half + 1 + i];
        /* the first record: the file's version */
        begin_event(w, 0, 0);
        pb_string(&w->event, 3, "brain.Event:2");
        s = write_record(w);
        if (s == CT_OK) s = ct_tb_flush(w);
    }
    if (s != CT_OK) {
        ct_tb_close(w);
        return s;
    }
    if (path_out) (void)snprintf(path_out, path_size, "%s", w->path);
    *out = w;
    return CT_OK;
}

void ct_tb_close(ct_tb_writer *w) {
    if (!w) return;
    ct_ctx *ctx = w->ctx;
    if (w->f) (void)fclose(w->f);
    pb_free(&w->event);
    pb_free(&w->summary);
    pb_free(&w->value);
    pb_free(&w->inner);
    pb_free(&w->inner2);
    size_t bytes = w->n_limits * sizeof(double);
    ct_free(ctx, w->limits, bytes);
    ct_free(ctx, w->counts, bytes);
    ct_free(ctx, w->out_limits, bytes);
    ct_free(ctx, w->out_counts, bytes);
    ct_free(ctx, w, sizeof *w);
}

ct_status ct_tb_flush(ct_tb_writer *w) {
    if (fflush(w->f) != 0)
        return CT_FAIL(w->ctx, CT_ERR_IO, "%s: write failed: %s", w->path, strerror(errno));
    return CT_OK;
}

ct_status
ct_tb_scalar(ct_tb_writer *w, const char *tag, int64_t step, double wall_time, float value) {
    begin_event(w, step, wall_time);
    reset(&w->value);
    pb_string(&w->value, 1, tag);
    pb_float(&w->value, 2, value);
    return finish_value(w);
}

ct_status ct_tb_histogram(
    ct_tb_writer *w, const char *tag, int64_t step, double wall_time, const float *v, int64_t n) {
    double mn = DBL_MAX, mx = -DBL_MAX, num = 0, sum = 0, sq = 0;
    memset(w->counts, 0, w->n_limits * sizeof(double));
    for (int64_t i = 0; i < n; i++) {
        double x = (double)v[i];
        if (!isfinite(x)) continue;
        /* bucket i holds [limit[i-1], limit[i]): the first limit > x, as TensorFlow's
         * std::upper_bound, so 0.0 counts in the bucket that ends at 1e-12. Only a value of
         * DBL_MAX would find none (a float never does): it goes in the last bucket. */
        size_t lo = 0, hi = w->n_limits - 1;
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            if (w->limits[mid] > x)
                hi = mid;
            else
                lo = mid + 1;
        }
        w->counts[lo] += 1;
        mn = x < mn ? x : mn;
        mx = x > mx ? x : mx;
        num += 1;
        sum += x;
        sq += x * x;
    }
    if (num == 0) mn = mx = 0;
    /* TensorFlow's encoding (Histogram::EncodeToProto without preserve_zero_buckets): every
     * bucket that holds values, and each run of empty buckets as one empty bucket at the run's
     * last limit, the trailing run up to DBL_MAX included; so every value's bucket has its
     * left edge, and a histogram of nothing is the one bucket (DBL_MAX, 0) */
    reset(&w->inner);
    pb_double(&w->inner, 1, mn);
    pb_double(&w->inner, 2, mx);
    pb_double(&w->inner, 3, num);
    pb_double(&w->inner, 4, sum);
    pb_double(&w->inner, 5, sq);
    size_t kept = 0;
    for (size_t i = 0; i < w->n_limits; i++) {
        bool run_goes_on = w->counts[i] == 0 && i + 1 < w->n_limits && w->counts[i + 1] == 0;
        if (run_goes_on) continue;
        w->out_limits[kept] = w->limits[i];
        w->out_counts[kept] = w->counts[i];
        kept++;
    }
    pb_doubles(&w->inner, 6, w->out_limits, kept);
    pb_doubles(&w->inner, 7, w->out_counts, kept);
    begin_event(w, step, wall_time);
    reset(&w->value);
    pb_string(&w->value, 1, tag);
    pb_child(&w->value, 5, &w->inner);
    return finish_value(w);
}

ct_status
ct_tb_text(ct_tb_writer *w, const char *tag, int64_t step, double wall_time, const char *text) {
    begin_event(w, step, wall_time);
    reset(&w->value);
    pb_string(&w->value, 1, tag);
    /* tensor=8 {dtype=1: DT_STRING (7), tensor_shape=2 {dim=2 {size=1: 1}}, string_val=8} */
    reset(&w->inner2);
    pb_key(&w->inner2, 1, WIRE_VARINT); /* TensorShapeProto.Dim.size */
    pb_varint(&w->inner2, 1);
    reset(&w->inner);
    pb_child(&w->inner, 2, &w->inner2); /* TensorShapeProto.dim */
    pb inner_copy = w->inner;           /* the shape, before inner is reused below */
    pb tensor = {w->ctx, NULL, 0, 0, false};
    pb_key(&tensor, 1, WIRE_VARINT);
    pb_varint(&tensor, 7);
    pb_child(&tensor, 2, &inner_copy);
    pb_len(&tensor, 8, text, strlen(text));
    pb_child(&w->value, 8, &tensor);
    pb_free(&tensor);
    /* metadata=9 {plugin_data=1 {plugin_name=1: "text"}} */
    reset(&w->inner2);
    pb_string(&w->inner2, 1, "text");
    reset(&w->inner);
    pb_child(&w->inner, 1, &w->inner2);
    pb_child(&w->value, 9, &w->inner);
    return finish_value(w);
}

/* ---- images ---- */

static void png_to_pb(png_structp png, png_bytep data, png_size_t n) {
    pb_bytes(png_get_io_ptr(png), data, n);
}

static void png_flush_nothing(png_structp png) {
    (void)png;
}

ct_status ct_tb_image(ct_tb_writer *w,
                      const char *tag,
                      int64_t step,
                      double wall_time,
                      const unsigned char *rgb,
                      int64_t height,
                      int64_t width) {
    if (height < 1 || width < 1 || height > 65536 || width > 65536)
        return CT_FAIL(w->ctx, CT_ERR_INVALID_ARG, "tensorboard image '%s': size %lldx%lld", tag,
                       (long long)height, (long long)width);
    /* the PNG goes into inner2 */
    reset(&w->inner2);
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    if (!png || !info) {
        png_destroy_write_struct(&png, &info);
        return CT_FAIL(w->ctx, CT_ERR_OOM, "tensorboard image '%s': out of memory", tag);
    }
    if (setjmp(png_jmpbuf(png))) {
        png_destroy_write_struct(&png, &info);
        return CT_FAIL(w->ctx, CT_ERR_INTERNAL, "tensorboard image '%s': PNG encoding failed", tag);
    }
    png_set_write_fn(png, &w->inner2, png_to_pb, png_flush_nothing);
    png_set_IHDR(png, info, (png_uint_32)width, (png_uint_32)height, 8, PNG_COLOR_TYPE_RGB,
                 PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_write_info(png, info);
    for (int64_t y = 0; y < height; y++)
        png_write_row(png, rgb + (size_t)y * (size_t)width * 3);
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    if (w->inner2.oom)
        return CT_FAIL(w->ctx, CT_ERR_OOM, "tensorboard image '%s': out of memory", tag);
    /* Summary.Image: height=1, width=2, colorspace=3 (RGB), encoded_image_string=4 */
    reset(&w->inner);
    pb_key(&w->inner, 1, WIRE_VARINT);
    pb_varint(&w->inner, (uint64_t)height);
    pb_key(&w->inner, 2, WIRE_VARINT);
    pb_varint(&w->inner, (uint64_t)width);
    pb_key(&w->inner, 3, WIRE_VARINT);
    pb_varint(&w->inner, 3);
    pb_child(&w->inner, 4, &w->inner2);
    begin_event(w, step, wall_time);
    reset(&w->value);
    pb_string(&w->value, 1, tag);
    pb_child(&w->value, 4, &w->inner);
    return finish_value(w);
}
