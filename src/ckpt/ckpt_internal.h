/*
 * ckpt_internal.h - what checkpoint.c shares with safetensors.c: a text buffer and the
 * safetensors writer and reader over an arbitrary list of tensors (optimizer buffers are not a
 * ct_params store). Not installed; not part of the API.
 */
#ifndef CT_CKPT_INTERNAL_H
#define CT_CKPT_INTERNAL_H

#include "core/core_internal.h"
#include "ctrain/checkpoint.h"

/* A growable text buffer from the context's allocator, always NUL-terminated once written to.
 * An allocation failure sets oom and makes later puts no-ops; the owner frees p (cap bytes). */
typedef struct ct_ckpt_buf {
    ct_ctx *ctx;
    char *p;
    size_t len, cap;
    bool oom;
} ct_ckpt_buf;

CT_INTERNAL void ct_ckpt_buf_put(ct_ckpt_buf *b, const char *s, size_t n);

/*
 * Writes the n tensors (names and data borrowed) as a safetensors file at path, through
 * path.tmp, fsync and rename, then fsyncs the directory. *bytes and *crc (may be NULL) receive
 * the file's size and CRC-32C, computed from the bytes as they were written.
 */
CT_INTERNAL ct_status ct_st_write(ct_ctx *ctx,
                                  const char *path,
                                  const ct_tensor *const *tensors,
                                  int64_t n,
                                  const ct_option *metadata,
                                  int64_t n_metadata,
                                  uint64_t *bytes,
                                  uint32_t *crc);

/*
 * Reads path into the tensors of `params` (when not NULL) or else into the n tensors of `list`
 * (names and data borrowed, shapes as expected), with ct_safetensors_load's checks. `what`
 * names the target in messages ("the model", "the optimizer").
 */
CT_INTERNAL ct_status ct_st_read(ct_ctx *ctx,
                                 const char *path,
                                 ct_params *params,
                                 ct_tensor *const *list,
                                 int64_t n,
                                 const ct_safetensors_load_params *p,
                                 const char *what,
                                 int64_t *loaded);

#endif /* CT_CKPT_INTERNAL_H */
