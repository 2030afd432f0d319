/*
 * tboard.c - TensorBoard event files: a write-only protobuf encoder for the messages involved
 * (Event, Summary, Summary.Value, HistogramProto, TensorProto with its shape, SummaryMetadata,
 * and the hparams plugin's HParamsPluginData with what it holds) and the TFRecord framing.
 * Field numbers are those of TensorBoard's event.proto, summary.proto, histogram.proto,
 * tensor.proto, and plugins/hparams' plugin_data.proto and api.proto (docs/logging.md lists
 * them). The one reader here skims Events for their tags, to take hparams records out of the
 * files of a run that resumes.
 *
 * Ownership: the writer owns its FILE, its encoding buffers and the histogram's bucket limits,
 * all from the context's allocator except the FILE.
 */
#include "ctrain/tboard.h"

#include <dirent.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <png.h>
#include <setjmp.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
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

/* ---- hparams (TensorBoard's plugins/hparams: plugin_data.proto, api.proto) ---- */

static const char HPARAMS_PREFIX[] = "_hparams_/";

static void pb_init(pb *b, ct_ctx *ctx) {
    memset(b, 0, sizeof *b);
    b->ctx = ctx;
}

/* An HParamsPluginData holding `data` as its oneof field `field` (experiment = 2,
 * session_start_info = 3, session_end_info = 4) in a Value of `tag`, as TensorBoard's own
 * summary does it: the content in metadata (9) {plugin_data (1) {plugin_name (1) "hparams",
 * content (2)}, data_class (4) DATA_CLASS_TENSOR (2)}, and an empty tensor as the value.
 * HParamsPluginData.version (1) is 0, which proto3 leaves out. */
static ct_status
write_hparams(ct_tb_writer *w, const char *tag, unsigned field, const pb *data, double wall_time) {
    pb content, plugin, meta, tensor, shape, dim;
    pb_init(&content, w->ctx);
    pb_init(&plugin, w->ctx);
    pb_init(&meta, w->ctx);
    pb_init(&tensor, w->ctx);
    pb_init(&shape, w->ctx);
    pb_init(&dim, w->ctx);
    pb_child(&content, field, data);
    pb_string(&plugin, 1, "hparams");
    pb_child(&plugin, 2, &content);
    pb_child(&meta, 1, &plugin);
    pb_key(&meta, 4, WIRE_VARINT);
    pb_varint(&meta, 2);
    /* TensorProto {dtype (1) DT_FLOAT (1), tensor_shape (2) {dim (2) {size (1) 0, left out}}}:
     * the 6-byte float vector of length 0 that the plugin's own writer uses */
    pb_key(&tensor, 1, WIRE_VARINT);
    pb_varint(&tensor, 1);
    pb_child(&shape, 2, &dim);
    pb_child(&tensor, 2, &shape);
    begin_event(w, 0, wall_time);
    reset(&w->value);
    pb_string(&w->value, 1, tag);
    pb_child(&w->value, 8, &tensor);
    pb_child(&w->value, 9, &meta);
    ct_status s = finish_value(w);
    pb_free(&content);
    pb_free(&plugin);
    pb_free(&meta);
    pb_free(&tensor);
    pb_free(&shape);
    pb_free(&dim);
    return s;
}

static ct_status check_hparams(ct_tb_writer *w, const ct_tb_hparam *hp, int64_t n) {
    if (n < 0 || (n > 0 && !hp))
        return CT_FAIL(w->ctx, CT_ERR_INVALID_ARG, "tensorboard hparams: %lld of them at %p",
                       (long long)n, (const void *)hp);
    for (int64_t i = 0; i < n; i++) {
        if (!hp[i].name || !hp[i].name[0])
            return CT_FAIL(w->ctx, CT_ERR_INVALID_ARG, "tensorboard hparam %lld: no name",
                           (long long)i);
        if ((unsigned)hp[i].type >= CT_TB_HPARAM_TYPE_COUNT)
            return CT_FAIL(w->ctx, CT_ERR_INVALID_ARG, "tensorboard hparam '%s': type %d",
                           hp[i].name, (int)hp[i].type);
    }
    return CT_OK;
}

ct_status
ct_tb_session_start(ct_tb_writer *w, const ct_tb_hparam *hp, int64_t n, double start_time) {
    CT_TRY(check_hparams(w, hp, n));
    pb info, entry, value;
    pb_init(&info, w->ctx);
    pb_init(&entry, w->ctx);
    pb_init(&value, w->ctx);
    /* SessionStartInfo.hparams (1): map<string, google.protobuf.Value>, on the wire one entry
     * message {key (1), value (2)} per hparam; Value's oneof: number_value (2, double),
     * string_value (3), bool_value (4). A oneof member is written even when it is 0 or false. */
    for (int64_t i = 0; i < n; i++) {
        reset(&value);
        if (hp[i].type == CT_TB_HPARAM_NUMBER) {
            pb_double(&value, 2, hp[i].number);
        } else if (hp[i].type == CT_TB_HPARAM_STRING) {
            pb_string(&value, 3, hp[i].string ? hp[i].string : "");
        } else {
            pb_key(&value, 4, WIRE_VARINT);
            pb_varint(&value, hp[i].flag ? 1 : 0);
        }
        reset(&entry);
        pb_string(&entry, 1, hp[i].name);
        pb_child(&entry, 2, &value);
        pb_child(&info, 1, &entry);
    }
    double t = now_or(start_time);
    pb_double(&info, 5, t); /* start_time_secs */
    ct_status s = write_hparams(w, "_hparams_/session_start_info", 3, &info, t);
    pb_free(&info);
    pb_free(&entry);
    pb_free(&value);
    return s;
}

ct_status ct_tb_session_end(ct_tb_writer *w, ct_tb_session_status status, double end_time) {
    if ((unsigned)status >= CT_TB_SESSION_STATUS_COUNT)
        return CT_FAIL(w->ctx, CT_ERR_INVALID_ARG, "tensorboard session end: status %d",
                       (int)status);
    pb info;
    pb_init(&info, w->ctx);
    /* SessionEndInfo {status (1), end_time_secs (2)}; STATUS_UNKNOWN (0) is proto3's default */
    if (status != CT_TB_SESSION_UNKNOWN) {
        pb_key(&info, 1, WIRE_VARINT);
        pb_varint(&info, (uint64_t)status);
    }
    double t = now_or(end_time);
    pb_double(&info, 2, t);
    ct_status s = write_hparams(w, "_hparams_/session_end_info", 4, &info, t);
    pb_free(&info);
    return s;
}

ct_status ct_tb_experiment(ct_tb_writer *w,
                           const ct_tb_hparam *hp,
                           int64_t n,
                           const char *const *metric_tags,
                           int64_t n_metrics,
                           double time_created) {
    CT_TRY(check_hparams(w, hp, n));
    if (n_metrics < 0 || (n_metrics > 0 && !metric_tags))
        return CT_FAIL(w->ctx, CT_ERR_INVALID_ARG, "tensorboard experiment: %lld metrics at %p",
                       (long long)n_metrics, (const void *)metric_tags);
    pb exp, info, name;
    pb_init(&exp, w->ctx);
    pb_init(&info, w->ctx);
    pb_init(&name, w->ctx);
    double t = now_or(time_created);
    pb_double(&exp, 3, t); /* Experiment.time_created_secs */
    /* hparam_infos (4): HParamInfo {name (1), type (4): DataType DATA_TYPE_STRING 1,
     * DATA_TYPE_BOOL 2, DATA_TYPE_FLOAT64 3}; no domain, so that it holds every run's values */
    for (int64_t i = 0; i < n; i++) {
        static const uint64_t data_type[CT_TB_HPARAM_TYPE_COUNT] = {3, 1, 2};
        reset(&info);
        pb_string(&info, 1, hp[i].name);
        pb_key(&info, 4, WIRE_VARINT);
        pb_varint(&info, data_type[hp[i].type]);
        pb_child(&exp, 4, &info);
    }
    /* metric_infos (5): MetricInfo {name (1): MetricName {group (1) "", left out; tag (2)}} */
    for (int64_t i = 0; i < n_metrics; i++) {
        reset(&name);
        pb_string(&name, 2, metric_tags[i] ? metric_tags[i] : "");
        reset(&info);
        pb_child(&info, 1, &name);
        pb_child(&exp, 5, &info);
    }
    ct_status s = write_hparams(w, "_hparams_/experiment", 2, &exp, t);
    pb_free(&exp);
    pb_free(&info);
    pb_free(&name);
    return s;
}

/* ---- an events file without its hparams records ---- */

static bool rd_varint(const unsigned char **at, const unsigned char *end, uint64_t *v) {
    *v = 0;
    for (int shift = 0; *at < end && shift < 64; shift += 7) {
        unsigned char c = *(*at)++;
        *v |= (uint64_t)(c & 0x7f) << shift;
        if (!(c & 0x80)) return true;
    }
    return false;
}

/* The next field of a message: its number, and its bytes when it is length-delimited (*p
 * NULL otherwise). False at the end or where the bytes are no protobuf. */
static bool rd_field(const unsigned char **at,
                     const unsigned char *end,
                     unsigned *num,
                     const unsigned char **p,
                     size_t *n) {
    uint64_t key, v;
    if (*at >= end || !rd_varint(at, end, &key)) return false;
    *num = (unsigned)(key >> 3);
    *p = NULL;
    *n = 0;
    size_t left = (size_t)(end - *at);
    switch (key & 7) {
    case WIRE_VARINT:
        return rd_varint(at, end, &v);
    case WIRE_I64:
        if (left < 8) return false;
        *at += 8;
        return true;
    case WIRE_I32:
        if (left < 4) return false;
        *at += 4;
        return true;
    case WIRE_LEN:
        if (!rd_varint(at, end, &v) || v > (uint64_t)(end - *at)) return false;
        *p = *at;
        *n = (size_t)v;
        *at += v;
        return true;
    default:
        return false;
    }
}

/* Whether an Event holds a Summary.Value whose tag is an hparams plugin's: Event.summary (5),
 * Summary.value (1), Value.tag (1). */
static bool is_hparams_event(const unsigned char *ev, size_t len) {
    const unsigned char *at = ev, *p;
    unsigned num;
    size_t n;
    while (rd_field(&at, ev + len, &num, &p, &n)) {
        if (num != 5 || !p) continue;
        const unsigned char *sat = p, *vp;
        size_t vn;
        while (rd_field(&sat, p + n, &num, &vp, &vn)) {
            if (num != 1 || !vp) continue;
            const unsigned char *vat = vp, *tp;
            size_t tn;
            while (rd_field(&vat, vp + vn, &num, &tp, &tn))
                if (num == 1 && tp && tn >= sizeof HPARAMS_PREFIX - 1 &&
                    memcmp(tp, HPARAMS_PREFIX, sizeof HPARAMS_PREFIX - 1) == 0)
                    return true;
        }
    }
    return false;
}

/* Reads the records of `in` from its start; with `out`, copies every one that is no hparams
 * record, and a tail whose framing breaks off as it is. *found counts the hparams records. */
static ct_status filter_records(ct_ctx *ctx,
                                const char *path,
                                FILE *in,
                                FILE *out,
                                const char *out_path,
                                pb *body,
                                int64_t *found) {
    *found = 0;
    struct stat st;
    if (fstat(fileno(in), &st) != 0)
        return CT_FAIL(ctx, CT_ERR_IO, "%s: cannot read: %s", path, strerror(errno));
    uint64_t size = (uint64_t)st.st_size, at = 0;
    for (;;) {
        unsigned char head[12], tail[4];
        size_t got = fread(head, 1, 12, in);
        if (got == 0) break;
        uint64_t len = 0;
        uint32_t hc = 0, dc = 0;
        for (int i = 0; got == 12 && i < 8; i++)
            len |= (uint64_t)head[i] << (8 * i);
        for (int i = 0; got == 12 && i < 4; i++)
            hc |= (uint32_t)head[8 + i] << (8 * i);
        bool framed = got == 12 && hc == ct_tb_masked_crc(head, 8) && len <= size - at - 12 &&
                      size - at - 12 - len >= 4;
        if (framed) {
            body->n = 0;
            pb_reserve(body, (size_t)len);
            if (body->oom) return CT_FAIL(ctx, CT_ERR_OOM, "%s: out of memory", path);
            framed = fread(body->p, 1, (size_t)len, in) == len && fread(tail, 1, 4, in) == 4;
            for (int i = 0; framed && i < 4; i++)
                dc |= (uint32_t)tail[i] << (8 * i);
            framed = framed && dc == ct_tb_masked_crc(body->p, (size_t)len);
        }
        if (!framed) {
            /* the rest as it is: what a killed writer left, which TensorBoard skips too */
            if (!out) break;
            if (fseek(in, (long)at, SEEK_SET) != 0)
                return CT_FAIL(ctx, CT_ERR_IO, "%s: cannot read: %s", path, strerror(errno));
            unsigned char buf[4096];
            size_t k;
            while ((k = fread(buf, 1, sizeof buf, in)) > 0)
                if (fwrite(buf, 1, k, out) != k)
                    return CT_FAIL(ctx, CT_ERR_IO, "%s: write failed: %s", out_path,
                                   strerror(errno));
            break;
        }
        at += 12 + len + 4;
        if (is_hparams_event(body->p, (size_t)len)) {
            (*found)++;
        } else if (out &&
                   (fwrite(head, 1, 12, out) != 12 || fwrite(body->p, 1, (size_t)len, out) != len ||
                    fwrite(tail, 1, 4, out) != 4)) {
            return CT_FAIL(ctx, CT_ERR_IO, "%s: write failed: %s", out_path, strerror(errno));
        }
    }
    if (ferror(in)) return CT_FAIL(ctx, CT_ERR_IO, "%s: cannot read: %s", path, strerror(errno));
    return CT_OK;
}

static ct_status remove_from_file(ct_ctx *ctx, const char *path, pb *body) {
    FILE *in = fopen(path, "rb");
    if (!in) return CT_FAIL(ctx, CT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    int64_t found = 0;
    ct_status s = filter_records(ctx, path, in, NULL, NULL, body, &found);
    if (s != CT_OK || found == 0) {
        (void)fclose(in);
        return s;
    }
    char tmp[1200];
    (void)snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *out = fopen(tmp, "wb");
    if (!out) {
        (void)fclose(in);
        return CT_FAIL(ctx, CT_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
    }
    rewind(in);
    s = filter_records(ctx, path, in, out, tmp, body, &found);
    if (s == CT_OK && (fflush(out) != 0 || fsync(fileno(out)) != 0))
        s = CT_FAIL(ctx, CT_ERR_IO, "%s: write failed: %s", tmp, strerror(errno));
    (void)fclose(in);
    (void)fclose(out);
    if (s == CT_OK && rename(tmp, path) != 0)
        s = CT_FAIL(ctx, CT_ERR_IO, "%s: rename to %s failed: %s", tmp, path, strerror(errno));
    if (s != CT_OK) (void)unlink(tmp);
    return s;
}

ct_status ct_tb_remove_hparams(ct_ctx *ctx, const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return CT_FAIL(ctx, CT_ERR_IO, "%s: cannot list: %s", dir, strerror(errno));
    pb body;
    pb_init(&body, ctx);
    ct_status s = CT_OK;
    static const char prefix[] = "events.out.tfevents.";
    struct dirent *ent;
    while (s == CT_OK && (ent = readdir(d)) != NULL) {
        size_t len = strlen(ent->d_name);
        if (strncmp(ent->d_name, prefix, sizeof prefix - 1) != 0 ||
            (len > 4 && strcmp(ent->d_name + len - 4, ".tmp") == 0))
            continue;
        char path[1100];
        (void)snprintf(path, sizeof path, "%s/%s", dir, ent->d_name);
        s = remove_from_file(ctx, path, &body);
    }
    (void)closedir(d);
    pb_free(&body);
    return s;
}
