/*
 * checkpoint.h - model weights in the safetensors format, as PyTorch's ecosystem writes them:
 * an 8-byte little-endian header length, a JSON header mapping each tensor name to its dtype,
 * shape and byte range ("data_offsets", relative to the end of the header), an optional
 * "__metadata__" object of string pairs (ctrain writes "format": "pt"), the header padded with
 * spaces to a multiple of 8 bytes, then the raw little-endian, row-major tensor data.
 * Names are the ct_params store's (PyTorch state_dict names), so the file loads into the
 * equivalent PyTorch module with load_state_dict(strict=True) through safetensors.torch.
 *
 * Checkpoint directories (model, optimizer and trainer state, checksums, retention) build on
 * this with the checkpoint issue.
 *
 * Ownership: nothing returned here needs freeing; files are written to `path.tmp`, flushed to
 * disk and renamed over `path`, so a crash never leaves a half-written file under `path`.
 */
#ifndef CTRAIN_CHECKPOINT_H
#define CTRAIN_CHECKPOINT_H

#include "ctrain/nn.h"
#include "ctrain/options.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Writes every tensor of an allocated store (trainable and buffers, in declaration order) to
 * path. metadata (may be NULL) adds string pairs to "__metadata__" after "format": "pt". */
CT_API ct_status ct_safetensors_save(ct_ctx *ctx,
                                     const ct_params *params,
                                     const char *path,
                                     const ct_option *metadata,
                                     int64_t n_metadata);

typedef struct ct_safetensors_load_params {
    bool strict;        /* every store tensor must be in the file and every file tensor in the
                           store (PyTorch's strict=True); default true */
    const char *prefix; /* prepended to store names when looking them up in the file; NULL */
} ct_safetensors_load_params;

CT_API ct_safetensors_load_params ct_safetensors_load_default_params(void);

/*
 * Reads path into the tensors of an allocated store with the same names. Every header value is
 * checked before it is used (header length against the file, each range against the data,
 * each range's length against its dtype and shape, ranges disjoint and covering the data),
 * and a file tensor must have the store tensor's shape; F32 and BF16 load into f32 tensors,
 * I64 into i64. Errors name the file, the tensor and the offset or what differs. On failure
 * the store may be partly written (load again, or reinitialise). *loaded (may be NULL) is the
 * number of tensors read.
 */
CT_API ct_status ct_safetensors_load(ct_ctx *ctx,
                                     ct_params *params,
                                     const char *path,
                                     const ct_safetensors_load_params *p,
                                     int64_t *loaded);

#ifdef __cplusplus
}
#endif

#endif /* CTRAIN_CHECKPOINT_H */
