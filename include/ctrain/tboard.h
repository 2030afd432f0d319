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

/* TensorFlow's masked CRC-32C of a TFRecord: ((crc >> 15) | (crc << 17)) + 0xa282ead8. */
CT_API uint32_t ct_tb_masked_crc(const void *data, size_t n);

#ifdef __cplusplus
}
#endif

#endif /* CTRAIN_TBOARD_H */
