/*
 * ckpt_internal.h - what the files of the checkpoint module share: a text buffer and the
 * safetensors writer and reader over an arbitrary list of tensors (optimizer buffers are not a
 * ct_params store), from safetensors.c; the layout of checkpoint directories (names, pointers,
 * listing) from checkpoint.c, which load.c reads by. Not installed; not part of the API.
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

/* ct_st_write, with each f32 tensor written as f32_as (CT_F32, or CT_BF16 rounded to nearest
 * even); other dtypes as they are. */
CT_INTERNAL ct_status ct_st_write_as(ct_ctx *ctx,
                                     const char *path,
                                     const ct_tensor *const *tensors,
                                     int64_t n,
                                     const ct_option *metadata,
                                     int64_t n_metadata,
                                     ct_dtype f32_as,
                                     uint64_t *bytes,
                                     uint32_t *crc);

/* What a store's file holds: its tensors in declaration order, then each alias as a view of
 * its tensor under the alias's name (PyTorch's state_dict lists a tied weight under both). */
typedef struct ct_ckpt_list {
    ct_ctx *ctx;
    const ct_tensor **v; /* n entries */
    int64_t n;
    ct_tensor *views; /* the aliases' views */
    size_t v_size, views_size;
} ct_ckpt_list;

/* Lists store's tensors and aliases into *out (freed by ct_ckpt_list_fini, also on failure). */
CT_INTERNAL ct_status ct_ckpt_store_list(ct_ctx *ctx, const ct_params *store, ct_ckpt_list *out);
CT_INTERNAL void ct_ckpt_list_fini(ct_ckpt_list *l);

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

/* A safetensors file opened as it is, for reading tensors whatever their dtype (ct_st_open):
 * the header's tensors in the order of their data, each checked as ct_st_read checks them. */
typedef struct ct_st_tensor {
    const char *name;  /* borrowed from the reader */
    const char *dtype; /* the header's dtype name: "F32", "BF16", "I64", ... */
    size_t elem_size;  /* bytes per element */
    int64_t shape[CT_MAX_DIMS];
    int32_t ndim;
    int64_t numel;
    uint64_t nbytes;
} ct_st_tensor;

typedef struct ct_st_reader ct_st_reader;

/* Opens path and checks its header; *tensors (n of them) stay valid until ct_st_close. path is
 * borrowed for as long. On failure *out is NULL and the message names the file. */
CT_INTERNAL ct_status ct_st_open(
    ct_ctx *ctx, const char *path, ct_st_reader **out, const ct_st_tensor **tensors, int64_t *n);
/* Reads the raw little-endian bytes of tensors[i] (nbytes) into dst. */
CT_INTERNAL ct_status ct_st_read_raw(ct_st_reader *r, int64_t i, void *dst);
/* Closes the file and frees the reader; NULL is a no-op. */
CT_INTERNAL void ct_st_close(ct_st_reader *r);

/* ---- checkpoint directories (checkpoint.c) ---- */

#define CT_CKPT_PATH_SIZE      4096
/* state.json's first two lines: "{", then its own CRC-32C over every byte after that line */
#define CT_CKPT_STATE_CRC_KEY  "{\n  \"crc32c\": \""
#define CT_CKPT_STATE_HEAD_LEN (sizeof CT_CKPT_STATE_CRC_KEY - 1 + 11) /* key, 8 hex, "\",\n" */

/* CT_ERR_IO "path: op failed: <errno's text>". */
CT_INTERNAL ct_status ct_ckpt_io_fail(ct_ctx *ctx, const char *path, const char *op);
/* a/b into buf (CT_CKPT_PATH_SIZE bytes); CT_ERR_INVALID_ARG when it does not fit. */
CT_INTERNAL ct_status ct_ckpt_join(ct_ctx *ctx, char *buf, const char *a, const char *b);
/* A checkpoint's directory name, "step-%08lld", and its inverse: exactly that form, or false. */
CT_INTERNAL void ct_ckpt_step_name(int64_t step, char *buf, size_t size);
CT_INTERNAL bool ct_ckpt_parse_step_name(const char *name, int64_t *step);
/* The directory name the pointer file ckdir/name holds, into out; false when it is missing or
 * damaged. */
CT_INTERNAL bool ct_ckpt_read_pointer(const char *ckdir, const char *name, char *out, size_t size);
/* The same as a status: CT_ERR_IO (missing, unreadable) or CT_ERR_FORMAT (damaged, its bytes
 * shown escaped). */
CT_INTERNAL ct_status
ct_ckpt_pointer_at(ct_ctx *ctx, const char *ckdir, const char *name, char *dir, size_t size);

/* The steps of a directory's step-N checkpoints, newest first; freed by ct_ckpt_steps_fini. */
typedef struct ct_ckpt_steps {
    ct_ctx *ctx;
    int64_t *v;
    size_t n, cap;
} ct_ckpt_steps;

/* Lists the step-N directories of ckdir (none when ckdir is missing). */
CT_INTERNAL ct_status ct_ckpt_list_steps(ct_ctx *ctx, const char *ckdir, ct_ckpt_steps *out);
CT_INTERNAL void ct_ckpt_steps_fini(ct_ckpt_steps *s);

/* The optimizer's count buffers as [numel] F32 views plus "steps" (an I64 scalar) into views
 * and list (count + 1 entries each): what optimizer.safetensors holds. */
CT_INTERNAL ct_status ct_ckpt_optim_views(const ct_optim *opt,
                                          int64_t numel,
                                          int64_t *steps_value,
                                          ct_tensor *views,
                                          ct_tensor **list,
                                          int32_t count);

#endif /* CT_CKPT_INTERNAL_H */
