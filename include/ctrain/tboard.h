/*
 * tboard.h - TensorBoard event files, written without TensorFlow: the TFRecord framing
 * (little-endian length, masked CRC-32C of the length, the record, masked CRC-32C of the
 * record) around Event protobuf messages from a small write-only encoder.
 *
 * A file is named events.out.tfevents.<10-digit unix time>.<host>.<pid>.<n>, as TensorBoard's
 * own writer names them, and starts with an Event whose file_version is "brain.Event:2".
 * Scalars are Summary.Value.simple_value (what PyTorch's SummaryWriter.add_scalar writes);
 * histograms are HistogramProto with TensorFlow's default bucket limits (+-1e-12 * 1.1^k below
 * 1e20, +-DBL_MAX and 0: 1551 limits) and its encoding (runs of empty buckets as one); text is a
 * DT_STRING tensor with the "text" plugin's metadata; images are PNG (libpng) in Summary.Image.
 *
 * HParams (TensorBoard's hparams plugin, its plugin_data.proto and api.proto): each record is a
 * Summary.Value whose metadata.plugin_data has plugin_name "hparams" and, as content, a
 * serialized HParamsPluginData (version 0, and one of experiment, session_start_info,
 * session_end_info), with an empty float tensor as the value, under the tags
 * _hparams_/experiment, _hparams_/session_start_info and _hparams_/session_end_info.
 * TensorBoard keeps the first metadata it reads for a tag of a run (a directory), reading the
 * files in name order: a run's first session start and first session end are the ones shown.
 *
 * Ownership: ct_tb_open returns a writer the caller closes with ct_tb_close, which flushes.
 * Records are buffered by stdio and flushed by ct_tb_flush (the command line flushes after each
 * logging point, so TensorBoard sees a live run).
 */
#ifndef CTRAIN_TBOARD_H
#define CTRAIN_TBOARD_H

#include "ctrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ct_tb_writer ct_tb_writer;

/* Creates dir/events.out.tfevents.... and writes the file_version event. The file's path goes
 * to path_out (may be NULL). Errors: CT_ERR_IO naming the path. */
CT_API ct_status
ct_tb_open(ct_ctx *ctx, const char *dir, char *path_out, size_t path_size, ct_tb_writer **out);
/* Flushes and closes; NULL is a no-op. */
CT_API void ct_tb_close(ct_tb_writer *w);
CT_API ct_status ct_tb_flush(ct_tb_writer *w);

/* wall_time: seconds since the epoch (0 = now). */
CT_API ct_status
ct_tb_scalar(ct_tb_writer *w, const char *tag, int64_t step, double wall_time, float value);
/* A histogram of n floats. Each value counts in the bucket of the first limit above it, as
 * TensorFlow's Histogram::Add (0.0 in the bucket that ends at 1e-12). Non-finite values are left
 * out of the buckets and counted in nothing: TensorBoard cannot draw them. */
CT_API ct_status ct_tb_histogram(
    ct_tb_writer *w, const char *tag, int64_t step, double wall_time, const float *v, int64_t n);
CT_API ct_status
ct_tb_text(ct_tb_writer *w, const char *tag, int64_t step, double wall_time, const char *text);

/* An RGB image (height x width x 3 bytes, rows top to bottom) as a PNG in Summary.Image. */
CT_API ct_status ct_tb_image(ct_tb_writer *w,
                             const char *tag,
                             int64_t step,
                             double wall_time,
                             const unsigned char *rgb,
                             int64_t height,
                             int64_t width);

/* One hyperparameter: a name (a dotted key, "optimizer.lr") and a number, a string or a bool
 * (google.protobuf.Value's number_value, string_value, bool_value). The strings are borrowed
 * for the call. */
typedef enum ct_tb_hparam_type {
    CT_TB_HPARAM_NUMBER = 0,
    CT_TB_HPARAM_STRING,
    CT_TB_HPARAM_BOOL,
    CT_TB_HPARAM_TYPE_COUNT
} ct_tb_hparam_type;

typedef struct ct_tb_hparam {
    const char *name;
    ct_tb_hparam_type type;
    double number;      /* CT_TB_HPARAM_NUMBER */
    const char *string; /* CT_TB_HPARAM_STRING */
    bool flag;          /* CT_TB_HPARAM_BOOL */
} ct_tb_hparam;

/* A session's end status: api.proto's Status, same numbers. */
typedef enum ct_tb_session_status {
    CT_TB_SESSION_UNKNOWN = 0,
    CT_TB_SESSION_SUCCESS = 1,
    CT_TB_SESSION_FAILURE = 2,
    CT_TB_SESSION_RUNNING = 3,
    CT_TB_SESSION_STATUS_COUNT
} ct_tb_session_status;

/* The session start of the run the file belongs to (_hparams_/session_start_info): its
 * hyperparameters hp[0..n) and start_time (seconds since the epoch, 0 = now). The session is
 * its own group (no group_name). Errors: CT_ERR_INVALID_ARG for an hparam without a name or an
 * unknown type, CT_ERR_OOM, CT_ERR_IO. */
CT_API ct_status ct_tb_session_start(ct_tb_writer *w,
                                     const ct_tb_hparam *hp,
                                     int64_t n,
                                     double start_time);
/* The session's end (_hparams_/session_end_info): status and end_time (0 = now). */
CT_API ct_status ct_tb_session_end(ct_tb_writer *w, ct_tb_session_status status, double end_time);
/* An experiment (_hparams_/experiment): the hyperparameters' names and types (from hp[0..n),
 * whose values are not written) and the metrics, scalar tags of the sessions' own directories
 * (metric tags[0..n_metrics), group ""). TensorBoard takes one experiment for the whole log
 * directory, from the run it finds first, and otherwise derives it from every run's session
 * start and scalars: write it once, in the log directory itself (the run ""), or not at all.
 * Errors as ct_tb_session_start. */
CT_API ct_status ct_tb_experiment(ct_tb_writer *w,
                                  const ct_tb_hparam *hp,
                                  int64_t n,
                                  const char *const *metric_tags,
                                  int64_t n_metrics,
                                  double time_created);
/* Rewrites every events file in dir (events.out.tfevents.*) that holds hparams records
 * without them, each through a temporary file renamed over it; files without any are left
 * untouched. A resumed run calls it before it opens its own file, so that its session start
 * and end are the ones TensorBoard keeps. A file whose framing breaks off (a killed writer's
 * last record) keeps its tail as it is. Errors: CT_ERR_IO naming the file, CT_ERR_OOM. */
CT_API ct_status ct_tb_remove_hparams(ct_ctx *ctx, const char *dir);

/* TensorFlow's masked CRC-32C of a TFRecord: ((crc >> 15) | (crc << 17)) + 0xa282ead8. */
CT_API uint32_t ct_tb_masked_crc(const void *data, size_t n);

#ifdef __cplusplus
}
#endif

#endif /* CTRAIN_TBOARD_H */
