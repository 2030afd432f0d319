/*
 * test_tboard.c - TensorBoard event files read back: the TFRecord framing and its masked
 * CRC-32C, and each Event decoded by a small protobuf reader written here from the wire format
 * (tests/e2e/tensorboard.py also has protoc --decode_raw read a run's file), and the histogram
 * buckets against TensorFlow's layout and encoding (tensorflow/core/lib/histogram/histogram.cc);
 * the hparams plugin's records field by field against TensorBoard's plugin_data.proto and
 * api.proto, and their removal from a resumed run's files.
 */
#include <dirent.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctrain/ctrain.h"
#include "ctrain/tboard.h"
#include "harness.h"

static ct_ctx *ctx;

/* ---- a protobuf reader for the test ---- */

typedef struct field {
    unsigned num, wire;
    uint64_t v;             /* varint, or the bits of a fixed32/fixed64 */
    const unsigned char *p; /* length-delimited */
    size_t n;
} field;

static bool next_field(const unsigned char **at, const unsigned char *end, field *f) {
    if (*at >= end) return false;
    uint64_t key = 0;
    int shift = 0;
    while (*at < end) {
        unsigned char c = *(*at)++;
        key |= (uint64_t)(c & 0x7f) << shift;
        shift += 7;
        if (!(c & 0x80)) break;
    }
    f->num = (unsigned)(key >> 3);
    f->wire = (unsigned)(key & 7);
    f->v = 0;
    f->p = NULL;
    f->n = 0;
    if (f->wire == 0 || f->wire == 2) {
        uint64_t v = 0;
        shift = 0;
        while (*at < end) {
            unsigned char c = *(*at)++;
            v |= (uint64_t)(c & 0x7f) << shift;
            shift += 7;
            if (!(c & 0x80)) break;
        }
        if (f->wire == 0) {
            f->v = v;
        } else {
            if ((size_t)(end - *at) < v) return false;
            f->p = *at;
            f->n = (size_t)v;
            *at += v;
        }
    } else if (f->wire == 1 || f->wire == 5) {
        size_t k = f->wire == 1 ? 8 : 4;
        if ((size_t)(end - *at) < k) return false;
        for (size_t i = 0; i < k; i++)
            f->v |= (uint64_t)(*at)[i] << (8 * i);
        *at += k;
    } else {
        return false;
    }
    return true;
}

/* The first field `num` of a message, or false. */
static bool find(const unsigned char *p, size_t n, unsigned num, field *out) {
    const unsigned char *at = p, *end = p + n;
    field f;
    while (next_field(&at, end, &f))
        if (f.num == num) {
            *out = f;
            return true;
        }
    return false;
}

static double as_double(uint64_t bits) {
    double d;
    memcpy(&d, &bits, sizeof d);
    return d;
}

static float as_float(uint64_t bits) {
    uint32_t b = (uint32_t)bits;
    float x;
    memcpy(&x, &b, sizeof x);
    return x;
}

/* ---- the file ---- */

typedef struct record {
    unsigned char *data;
    size_t n;
} record;

/* Reads every TFRecord, checking both masked CRCs. */
static int read_records(const char *path, record *out, int cap) {
    FILE *f = fopen(path, "rb");
    CT_CHECK(f != NULL);
    if (!f) return 0;
    int k = 0;
    unsigned char head[12];
    while (k < cap && fread(head, 1, 12, f) == 12) {
        uint64_t len = 0;
        for (int i = 0; i < 8; i++)
            len |= (uint64_t)head[i] << (8 * i);
        uint32_t hc = 0, dc = 0;
        for (int i = 0; i < 4; i++)
            hc |= (uint32_t)head[8 + i] << (8 * i);
        CT_CHECK(hc == ct_tb_masked_crc(head, 8));
        out[k].data = malloc(len ? len : 1);
        out[k].n = len;
        unsigned char tail[4];
        CT_CHECK(fread(out[k].data, 1, len, f) == len);
        CT_CHECK(fread(tail, 1, 4, f) == 4);
        for (int i = 0; i < 4; i++)
            dc |= (uint32_t)tail[i] << (8 * i);
        CT_CHECK(dc == ct_tb_masked_crc(out[k].data, len));
        k++;
    }
    (void)fclose(f);
    return k;
}

/* The Summary.Value of an Event record. */
static bool event_value(const record *r, int64_t *step, field *value) {
    field f;
    *step = find(r->data, r->n, 2, &f) ? (int64_t)f.v : 0;
    field summary;
    if (!find(r->data, r->n, 5, &summary)) return false;
    return find(summary.p, summary.n, 1, value);
}

static void tboard_should_mask_crcs_like_tensorflow(void) {
    /* crc32c("123456789") = 0xE3069283; masked: rotate right by 15, add 0xa282ead8 */
    uint32_t c = 0xE3069283u;
    uint32_t want = ((c >> 15) | (c << 17)) + 0xa282ead8u;
    CT_CHECK_INT(ct_tb_masked_crc("123456789", 9), want);
    /* TensorFlow's framing of an empty record: the masked CRC of 8 zero bytes */
    unsigned char zero[8] = {0};
    CT_CHECK(ct_tb_masked_crc(zero, 8) != 0);
}

static void tboard_should_write_records_that_decode(void) {
    char tmpl[] = "/tmp/ct_tboard_XXXXXX";
    const char *dir = mkdtemp(tmpl);
    CT_CHECK(dir != NULL);
    if (!dir) return;
    ct_tb_writer *w = NULL;
    char path[1100];
    CT_CHECK_INT(ct_tb_open(ctx, dir, path, sizeof path, &w), CT_OK);
    CT_CHECK(strstr(path, "/events.out.tfevents.") != NULL);
    float v[1000];
    for (int i = 0; i < 1000; i++)
        v[i] = (float)(i - 500) * 0.01f;
    v[7] = NAN; /* left out */
    if (w) {
        CT_CHECK_INT(ct_tb_scalar(w, "train/loss", 42, 1700000000.5, 0.25f), CT_OK);
        CT_CHECK_INT(ct_tb_histogram(w, "weights/0.weight", 43, 0, v, 1000), CT_OK);
        CT_CHECK_INT(ct_tb_text(w, "config", 0, 0, "lr: 0.1"), CT_OK);
        ct_tb_close(w);
    }
    record r[8];
    int n = read_records(path, r, 8);
    CT_CHECK_INT(n, 4);
    if (n == 4) {
        field f;
        /* 1: the file version, with a wall time */
        CT_CHECK(find(r[0].data, r[0].n, 3, &f) && f.n == 13 &&
                 memcmp(f.p, "brain.Event:2", 13) == 0);
        CT_CHECK(find(r[0].data, r[0].n, 1, &f) && f.wire == 1 && as_double(f.v) > 1e9);
        /* 2: a scalar */
        int64_t step;
        field val;
        CT_CHECK(find(r[1].data, r[1].n, 1, &f) && as_double(f.v) == 1700000000.5);
        CT_CHECK(event_value(&r[1], &step, &val));
        CT_CHECK_INT(step, 42);
        CT_CHECK(find(val.p, val.n, 1, &f) && f.n == 10 && memcmp(f.p, "train/loss", 10) == 0);
        CT_CHECK(find(val.p, val.n, 2, &f) && f.wire == 5 && as_float(f.v) == 0.25f);
        /* 3: a histogram: 999 finite values, their min, max, sum, and the buckets add up */
        CT_CHECK(event_value(&r[2], &step, &val));
        CT_CHECK_INT(step, 43);
        field h;
        CT_CHECK(find(val.p, val.n, 5, &h));
        double mn = 0, mx = 0, num = 0, sum = 0, ref_sum = 0;
        for (int i = 0; i < 1000; i++)
            if (i != 7) ref_sum += (double)v[i];
        CT_CHECK(find(h.p, h.n, 1, &f) && (mn = as_double(f.v)) == (double)v[0]);
        CT_CHECK(find(h.p, h.n, 2, &f) && (mx = as_double(f.v)) == (double)v[999]);
        CT_CHECK(find(h.p, h.n, 3, &f) && (num = as_double(f.v)) == 999);
        CT_CHECK(find(h.p, h.n, 4, &f) && fabs((sum = as_double(f.v)) - ref_sum) < 1e-9);
        field lim, cnt;
        CT_CHECK(find(h.p, h.n, 6, &lim) && find(h.p, h.n, 7, &cnt) && lim.n == cnt.n &&
                 lim.n % 8 == 0 && lim.n > 8);
        if (lim.n == cnt.n && lim.n % 8 == 0) {
            double total = 0, prev = -INFINITY;
            bool increasing = true, covered = true;
            for (size_t k = 0; k < lim.n / 8; k++) {
                uint64_t lb = 0, cb = 0;
                for (int b = 0; b < 8; b++) {
                    lb |= (uint64_t)lim.p[8 * k + (size_t)b] << (8 * b);
                    cb |= (uint64_t)cnt.p[8 * k + (size_t)b] << (8 * b);
                }
                double l = as_double(lb), c = as_double(cb);
                increasing = increasing && l > prev;
                prev = l;
                total += c;
            }
            covered = prev >= mx; /* the last limit bounds the largest value */
            CT_CHECK(increasing && covered);
            CT_CHECK(total == 999);
        }
        (void)mn;
        (void)num;
        (void)sum;
        /* 4: text, as the text plugin reads it */
        CT_CHECK(event_value(&r[3], &step, &val));
        field t, md, pd;
        CT_CHECK(find(val.p, val.n, 8, &t));
        CT_CHECK(find(t.p, t.n, 1, &f) && f.v == 7); /* DT_STRING */
        CT_CHECK(find(t.p, t.n, 8, &f) && f.n == 7 && memcmp(f.p, "lr: 0.1", 7) == 0);
        CT_CHECK(find(val.p, val.n, 9, &md) && find(md.p, md.n, 1, &pd) &&
                 find(pd.p, pd.n, 1, &f) && f.n == 4 && memcmp(f.p, "text", 4) == 0);
    }
    for (int i = 0; i < n; i++)
        free(r[i].data);
    (void)unlink(path);
    (void)rmdir(dir);
    /* a directory that is not there: an I/O error naming the path */
    CT_CHECK_INT(ct_tb_open(ctx, "/nonexistent/dir", NULL, 0, &w), CT_ERR_IO);
    CT_CHECK(strstr(ct_last_error(ctx), "/nonexistent/dir/events.out.tfevents.") != NULL);
}

/* Writes one histogram of v[0..n) and reads back its bucket limits and counts (malloc'ed, the
 * caller frees them); returns how many, 0 on failure. */
static size_t histogram_buckets(const float *v, int64_t n, double **limits, double **counts) {
    *limits = *counts = NULL;
    char tmpl[] = "/tmp/ct_tboard_XXXXXX";
    const char *dir = mkdtemp(tmpl);
    CT_CHECK(dir != NULL);
    if (!dir) return 0;
    ct_tb_writer *w = NULL;
    char path[1100];
    CT_CHECK_INT(ct_tb_open(ctx, dir, path, sizeof path, &w), CT_OK);
    if (w) {
        CT_CHECK_INT(ct_tb_histogram(w, "h", 1, 0, v, n), CT_OK);
        ct_tb_close(w);
    }
    record r[4];
    int nr = w ? read_records(path, r, 4) : 0;
    size_t k = 0;
    int64_t step;
    field val, h, lim, cnt;
    if (nr == 2 && event_value(&r[1], &step, &val) && find(val.p, val.n, 5, &h) &&
        find(h.p, h.n, 6, &lim) && find(h.p, h.n, 7, &cnt) && lim.n == cnt.n && lim.n % 8 == 0) {
        k = lim.n / 8;
        *limits = malloc(k * sizeof(double));
        *counts = malloc(k * sizeof(double));
        for (size_t i = 0; i < k; i++) {
            uint64_t lb = 0, cb = 0;
            for (int b = 0; b < 8; b++) {
                lb |= (uint64_t)lim.p[8 * i + (size_t)b] << (8 * b);
                cb |= (uint64_t)cnt.p[8 * i + (size_t)b] << (8 * b);
            }
            (*limits)[i] = as_double(lb);
            (*counts)[i] = as_double(cb);
        }
    }
    CT_CHECK(k > 0);
    for (int i = 0; i < nr; i++)
        free(r[i].data);
    (void)unlink(path);
    (void)rmdir(dir);
    return k;
}

static void tboard_should_bucket_like_tensorflow(void) {
    /* TensorFlow's default limits, built as histogram.cc builds them: 1e-12 * 1.1^k below 1e20
     * and DBL_MAX, their negatives, and 0 */
    double pos[800];
    size_t half = 0;
    for (double x = 1e-12; x < 1e20; x *= 1.1)
        pos[half++] = x;
    pos[half++] = DBL_MAX;
    size_t n_lim = 2 * half + 1;
    CT_CHECK_INT(n_lim, 1551);
    double tf[1551];
    if (n_lim != 1551) return;
    for (size_t i = 0; i < half; i++) {
        tf[half - 1 - i] = -pos[i];
        tf[half + 1 + i] = pos[i];
    }
    tf[half] = 0.0;

    /* one value inside every bucket a float can reach: bucket i holds [tf[i-1], tf[i]), and
     * bucket 0 (below -DBL_MAX) none; with no empty run but bucket 0, all 1551 limits come back */
    float v[1550];
    bool inside = true;
    for (size_t i = 1; i < n_lim; i++) {
        double lo = tf[i - 1], hi = tf[i];
        double mid = i == 1 ? -1e30 : i == n_lim - 1 ? 1e30 : lo + (hi - lo) / 2;
        v[i - 1] = (float)mid;
        inside = inside && (double)v[i - 1] >= lo && (double)v[i - 1] < hi;
    }
    CT_CHECK(inside);
    double *lim, *cnt;
    size_t k = histogram_buckets(v, 1550, &lim, &cnt);
    CT_CHECK_INT(k, 1551);
    if (k == 1551) {
        bool same = true, one_each = cnt[0] == 0;
        for (size_t i = 0; i < k; i++) {
            same = same && lim[i] == tf[i];
            one_each = one_each && (i == 0 || cnt[i] == 1);
        }
        CT_CHECK(same);
        CT_CHECK(one_each);
    }
    free(lim);
    free(cnt);

    /* a value equal to a limit counts in the bucket that limit starts (upper_bound), not the
     * one it ends. 0.0 is the only limit a float can equal (no 1e-12 * 1.1^k is a float), so
     * 0.0 and -0.0 both go in [0, 1e-12); the runs of empty buckets on either side are one
     * bucket each, the trailing one ending at DBL_MAX */
    const float zeros[2] = {0.0f, -0.0f};
    k = histogram_buckets(zeros, 2, &lim, &cnt);
    CT_CHECK_INT(k, 3);
    if (k == 3) {
        CT_CHECK(lim[0] == 0.0 && cnt[0] == 0);
        CT_CHECK(lim[1] == 1e-12 && cnt[1] == 2);
        CT_CHECK(lim[2] == DBL_MAX && cnt[2] == 0);
    }
    free(lim);
    free(cnt);

    /* two values far apart: an empty run before, between and after them */
    const float two[2] = {-1.0f, 3.0f};
    size_t b1 = 0, b3 = 0;
    while (tf[b1] <= -1.0)
        b1++;
    while (tf[b3] <= 3.0)
        b3++;
    k = histogram_buckets(two, 2, &lim, &cnt);
    CT_CHECK_INT(k, 5);
    if (k == 5) {
        CT_CHECK(lim[0] == tf[b1 - 1] && cnt[0] == 0);
        CT_CHECK(lim[1] == tf[b1] && cnt[1] == 1);
        CT_CHECK(lim[2] == tf[b3 - 1] && cnt[2] == 0);
        CT_CHECK(lim[3] == tf[b3] && cnt[3] == 1);
        CT_CHECK(lim[4] == DBL_MAX && cnt[4] == 0);
    }
    free(lim);
    free(cnt);

    /* nothing to count (NaN is left out): TensorFlow's one bucket (DBL_MAX, 0) */
    const float nan1[1] = {NAN};
    k = histogram_buckets(nan1, 1, &lim, &cnt);
    CT_CHECK_INT(k, 1);
    if (k == 1) CT_CHECK(lim[0] == DBL_MAX && cnt[0] == 0);
    free(lim);
    free(cnt);
}

/* ---- hparams: field numbers from tensorboard/plugins/hparams/plugin_data.proto and api.proto,
 * google/protobuf/struct.proto, and summary.proto / tensor.proto for the Value around them ---- */

/* The k-th (0-based) field `num` of a message, or false. */
static bool find_nth(const unsigned char *p, size_t n, unsigned num, int k, field *out) {
    const unsigned char *at = p, *end = p + n;
    field f;
    while (next_field(&at, end, &f))
        if (f.num == num && k-- == 0) {
            *out = f;
            return true;
        }
    return false;
}

static int count_fields(const unsigned char *p, size_t n, unsigned num) {
    const unsigned char *at = p, *end = p + n;
    field f;
    int k = 0;
    while (next_field(&at, end, &f))
        k += f.num == num;
    return k;
}

static bool is_str(const field *f, const char *s) {
    return f->wire == 2 && f->n == strlen(s) && memcmp(f->p, s, f->n) == 0;
}

/* An hparams record: Value.tag (1), Value.tensor (8) the empty float vector TensorBoard's
 * writer uses (TensorProto.dtype (1) DT_FLOAT = 1, tensor_shape (2) {dim (2) {size 0}}),
 * Value.metadata (9) {plugin_data (1) {plugin_name (1) "hparams", content (2)}, data_class (4)
 * DATA_CLASS_TENSOR = 2}; the content is an HParamsPluginData whose version (1) is 0 and whose
 * oneof data is `which` (experiment 2, session_start_info 3, session_end_info 4). */
static bool hparams_record(const record *r, const char *tag, unsigned which, field *data) {
    int64_t step;
    field val, f, t, shape, dim, md, pd, content;
    if (!event_value(r, &step, &val) || step != 0) return false;
    bool ok = find(val.p, val.n, 1, &f) && is_str(&f, tag);
    ok = ok && find(val.p, val.n, 8, &t) && find(t.p, t.n, 1, &f) && f.wire == 0 && f.v == 1;
    ok = ok && find(t.p, t.n, 2, &shape) && count_fields(shape.p, shape.n, 2) == 1 &&
         find(shape.p, shape.n, 2, &dim) && (!find(dim.p, dim.n, 1, &f) || f.v == 0);
    ok = ok && find(val.p, val.n, 9, &md) && find(md.p, md.n, 4, &f) && f.wire == 0 && f.v == 2;
    ok = ok && find(md.p, md.n, 1, &pd) && find(pd.p, pd.n, 1, &f) && is_str(&f, "hparams");
    ok = ok && find(pd.p, pd.n, 2, &content) && (!find(content.p, content.n, 1, &f) || f.v == 0);
    /* exactly one member of the oneof */
    ok = ok && count_fields(content.p, content.n, 2) + count_fields(content.p, content.n, 3) +
                       count_fields(content.p, content.n, 4) ==
                   1;
    return ok && find(content.p, content.n, which, data) && data->wire == 2;
}

static void tboard_should_write_hparams_records(void) {
    char tmpl[] = "/tmp/ct_tboard_XXXXXX";
    const char *dir = mkdtemp(tmpl);
    CT_CHECK(dir != NULL);
    if (!dir) return;
    ct_tb_writer *w = NULL;
    char path[1100];
    CT_CHECK_INT(ct_tb_open(ctx, dir, path, sizeof path, &w), CT_OK);
    if (!w) return;
    /* a zero and a false too: a oneof member is on the wire whatever its value */
    ct_tb_hparam hp[4] = {{"optimizer.lr", CT_TB_HPARAM_NUMBER, 0.1, NULL, false},
                          {"model.hidden", CT_TB_HPARAM_STRING, 0, "[256, 128]", false},
                          {"data.shuffle", CT_TB_HPARAM_BOOL, 0, NULL, false},
                          {"seed", CT_TB_HPARAM_NUMBER, 0.0, NULL, false}};
    const char *metrics[2] = {"train/loss", "valid/acc"};
    CT_CHECK_INT(ct_tb_session_start(w, hp, 4, 1700000000.25), CT_OK);
    CT_CHECK_INT(ct_tb_session_end(w, CT_TB_SESSION_SUCCESS, 1700000100.5), CT_OK);
    CT_CHECK_INT(ct_tb_session_end(w, CT_TB_SESSION_UNKNOWN, 1700000200.5), CT_OK);
    CT_CHECK_INT(ct_tb_experiment(w, hp, 4, metrics, 2, 1690000000.0), CT_OK);
    ct_tb_hparam bad = {"x", CT_TB_HPARAM_TYPE_COUNT, 0, NULL, false};
    CT_CHECK_INT(ct_tb_session_start(w, &bad, 1, 0), CT_ERR_INVALID_ARG);
    ct_tb_hparam unnamed = {"", CT_TB_HPARAM_NUMBER, 0, NULL, false};
    CT_CHECK_INT(ct_tb_experiment(w, &unnamed, 1, NULL, 0, 0), CT_ERR_INVALID_ARG);
    CT_CHECK_INT(ct_tb_session_end(w, CT_TB_SESSION_STATUS_COUNT, 0), CT_ERR_INVALID_ARG);
    ct_tb_close(w);

    record r[8];
    int n = read_records(path, r, 8);
    CT_CHECK_INT(n, 5);
    field f, d, e, v;
    if (n >= 2) {
        /* SessionStartInfo: hparams (1), a map<string, google.protobuf.Value>: one entry
         * {key (1), value (2)} each; Value: number_value (2, double), string_value (3),
         * bool_value (4); start_time_secs (5); the event's wall_time (1) is the start time */
        CT_CHECK(find(r[1].data, r[1].n, 1, &f) && as_double(f.v) == 1700000000.25);
        CT_CHECK(hparams_record(&r[1], "_hparams_/session_start_info", 3, &d));
        CT_CHECK_INT(count_fields(d.p, d.n, 1), 4);
        CT_CHECK(find(d.p, d.n, 5, &f) && f.wire == 1 && as_double(f.v) == 1700000000.25);
        CT_CHECK(find_nth(d.p, d.n, 1, 0, &e) && find(e.p, e.n, 1, &f) &&
                 is_str(&f, "optimizer.lr") && find(e.p, e.n, 2, &v) && find(v.p, v.n, 2, &f) &&
                 f.wire == 1 && as_double(f.v) == 0.1 && count_fields(v.p, v.n, 3) == 0);
        CT_CHECK(find_nth(d.p, d.n, 1, 1, &e) && find(e.p, e.n, 1, &f) &&
                 is_str(&f, "model.hidden") && find(e.p, e.n, 2, &v) && find(v.p, v.n, 3, &f) &&
                 is_str(&f, "[256, 128]"));
        CT_CHECK(find_nth(d.p, d.n, 1, 2, &e) && find(e.p, e.n, 1, &f) &&
                 is_str(&f, "data.shuffle") && find(e.p, e.n, 2, &v) && find(v.p, v.n, 4, &f) &&
                 f.wire == 0 && f.v == 0);
        CT_CHECK(find_nth(d.p, d.n, 1, 3, &e) && find(e.p, e.n, 1, &f) && is_str(&f, "seed") &&
                 find(e.p, e.n, 2, &v) && find(v.p, v.n, 2, &f) && f.wire == 1 &&
                 as_double(f.v) == 0.0);
    }
    if (n >= 4) {
        /* SessionEndInfo: status (1, api.proto's Status: STATUS_SUCCESS = 1; STATUS_UNKNOWN = 0
         * left out), end_time_secs (2) */
        CT_CHECK(hparams_record(&r[2], "_hparams_/session_end_info", 4, &d));
        CT_CHECK(find(d.p, d.n, 1, &f) && f.wire == 0 && f.v == 1);
        CT_CHECK(find(d.p, d.n, 2, &f) && f.wire == 1 && as_double(f.v) == 1700000100.5);
        CT_CHECK(hparams_record(&r[3], "_hparams_/session_end_info", 4, &d));
        CT_CHECK(!find(d.p, d.n, 1, &f));
        CT_CHECK(find(d.p, d.n, 2, &f) && as_double(f.v) == 1700000200.5);
    }
    if (n >= 5) {
        /* Experiment: time_created_secs (3), hparam_infos (4): HParamInfo {name (1), type (4):
         * DATA_TYPE_STRING 1, DATA_TYPE_BOOL 2, DATA_TYPE_FLOAT64 3}, metric_infos (5):
         * MetricInfo {name (1): MetricName {group (1), tag (2)}} */
        CT_CHECK(hparams_record(&r[4], "_hparams_/experiment", 2, &d));
        CT_CHECK(find(d.p, d.n, 3, &f) && f.wire == 1 && as_double(f.v) == 1690000000.0);
        CT_CHECK_INT(count_fields(d.p, d.n, 4), 4);
        const uint64_t types[4] = {3, 1, 2, 3};
        for (int i = 0; i < 4; i++)
            CT_CHECK(find_nth(d.p, d.n, 4, i, &e) && find(e.p, e.n, 1, &f) &&
                     is_str(&f, hp[i].name) && find(e.p, e.n, 4, &f) && f.v == types[i]);
        CT_CHECK_INT(count_fields(d.p, d.n, 5), 2);
        for (int i = 0; i < 2; i++)
            CT_CHECK(find_nth(d.p, d.n, 5, i, &e) && find(e.p, e.n, 1, &v) &&
                     find(v.p, v.n, 2, &f) && is_str(&f, metrics[i]) && !find(v.p, v.n, 1, &f));
    }
    for (int i = 0; i < n; i++)
        free(r[i].data);
    (void)unlink(path);
    (void)rmdir(dir);
}

static long file_bytes(const char *path, unsigned char *buf, size_t cap) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    size_t k = fread(buf, 1, cap, f);
    (void)fclose(f);
    return (long)k;
}

static void tboard_should_remove_hparams_records_of_a_directory(void) {
    char tmpl[] = "/tmp/ct_tboard_XXXXXX";
    const char *dir = mkdtemp(tmpl);
    CT_CHECK(dir != NULL);
    if (!dir) return;
    char p1[1100], p2[1100];
    ct_tb_writer *w1 = NULL, *w2 = NULL;
    CT_CHECK_INT(ct_tb_open(ctx, dir, p1, sizeof p1, &w1), CT_OK);
    CT_CHECK_INT(ct_tb_open(ctx, dir, p2, sizeof p2, &w2), CT_OK);
    if (!w1 || !w2) return;
    ct_tb_hparam hp = {"optimizer.lr", CT_TB_HPARAM_NUMBER, 0.1, NULL, false};
    CT_CHECK_INT(ct_tb_scalar(w1, "a", 1, 0, 1.0f), CT_OK);
    CT_CHECK_INT(ct_tb_session_start(w1, &hp, 1, 0), CT_OK);
    CT_CHECK_INT(ct_tb_scalar(w1, "b", 2, 0, 2.0f), CT_OK);
    CT_CHECK_INT(ct_tb_session_end(w1, CT_TB_SESSION_FAILURE, 0), CT_OK);
    CT_CHECK_INT(ct_tb_experiment(w1, &hp, 1, NULL, 0, 0), CT_OK);
    CT_CHECK_INT(ct_tb_scalar(w2, "c", 3, 0, 3.0f), CT_OK);
    ct_tb_close(w1);
    ct_tb_close(w2);
    /* what a writer killed in the middle of a record leaves: kept as it is */
    FILE *f = fopen(p1, "ab");
    CT_CHECK(f != NULL);
    if (f) {
        CT_CHECK(fwrite("\x20\0\0\0\0\0\0", 1, 7, f) == 7);
        (void)fclose(f);
    }
    static unsigned char before[65536], after[65536];
    long n2 = file_bytes(p2, before, sizeof before);
    CT_CHECK_INT(ct_tb_remove_hparams(ctx, dir), CT_OK);

    record r[8];
    int n = read_records(p1, r, 8);
    CT_CHECK_INT(n, 3);
    int64_t step;
    field val, tag;
    const char *const want[3] = {NULL, "a", "b"};
    for (int i = 1; i < n && i < 3; i++)
        CT_CHECK(event_value(&r[i], &step, &val) && find(val.p, val.n, 1, &tag) &&
                 is_str(&tag, want[i]));
    size_t framed = 0;
    for (int i = 0; i < n; i++)
        framed += 16 + r[i].n;
    static unsigned char kept[65536];
    long n1 = file_bytes(p1, kept, sizeof kept);
    CT_CHECK(n1 == (long)framed + 7 && memcmp(kept + framed, "\x20\0\0\0\0\0\0", 7) == 0);
    for (int i = 0; i < n; i++)
        free(r[i].data);
    /* a file without hparams records is not rewritten */
    CT_CHECK(n2 > 0 && file_bytes(p2, after, sizeof after) == n2 &&
             memcmp(before, after, (size_t)n2) == 0);
    /* and a second pass finds nothing more to take out */
    CT_CHECK_INT(ct_tb_remove_hparams(ctx, dir), CT_OK);
    CT_CHECK(file_bytes(p1, before, sizeof before) == n1 && memcmp(before, kept, (size_t)n1) == 0);
    DIR *d = opendir(dir);
    int entries = 0;
    for (struct dirent *ent; d && (ent = readdir(d)) != NULL;)
        entries += ent->d_name[0] != '.';
    if (d) (void)closedir(d);
    CT_CHECK_INT(entries, 2); /* no temporary file left */
    (void)unlink(p1);
    (void)unlink(p2);
    (void)rmdir(dir);
    CT_CHECK_INT(ct_tb_remove_hparams(ctx, "/nonexistent/dir"), CT_ERR_IO);
    CT_CHECK(strstr(ct_last_error(ctx), "/nonexistent/dir") != NULL);
}

int main(void) {
    if (ct_ctx_create(NULL, &ctx) != CT_OK) return 1;
    CT_RUN(tboard_should_mask_crcs_like_tensorflow);
    CT_RUN(tboard_should_write_records_that_decode);
    CT_RUN(tboard_should_bucket_like_tensorflow);
    CT_RUN(tboard_should_write_hparams_records);
    CT_RUN(tboard_should_remove_hparams_records_of_a_directory);
    ct_ctx_destroy(ctx);
    return ct_test_finish();
}
