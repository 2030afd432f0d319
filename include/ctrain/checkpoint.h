/*
 * checkpoint.h - model weights in the safetensors format, as PyTorch's ecosystem writes them:
 * an 8-byte little-endian header length, a JSON header mapping each tensor name to its dtype,
 * shape and byte range ("data_offsets", relative to the end of the header), an optional
 * "__metadata__" object of string pairs (ctrain writes "format": "pt"), the header padded with
 * spaces to a multiple of 8 bytes, then the raw little-endian, row-major tensor data.
 * Names are the ct_params store's (PyTorch state_dict names), so the file loads into the
 * equivalent PyTorch module with load_state_dict(strict=True) through safetensors.torch.
 *
 * Checkpoint directories build on this (format version 2, docs/checkpoints.md):
 *
 *     <root>/checkpoints/step-00000120/   model.safetensors       the ct_params store
 *                                         ema.safetensors         an EMA store (optional)
 *                                         optimizer.safetensors   each optimizer buffer as a
 *                                                                 [numel] F32 tensor under its
 *                                                                 name, plus "steps" (I64 scalar)
 *                                         state.json              written last: its own crc32c
 *                                                                 (first line), format_version,
 *                                                                 ctrain_version, step, epoch,
 *                                                                 the caller's "state" object and
 *                                                                 "files": {name: {bytes, crc32c}}
 *     <root>/checkpoints/latest, best      pointer files: a directory name ("step-...") and its
 *                                          crc32c on a second line
 *
 * A save writes step-N.tmp/, fsyncs every file and the directory, renames it to step-N/,
 * fsyncs checkpoints/, then replaces the pointers (tmp + fsync + rename), and only then deletes
 * what retention drops. A load checks state.json against its own CRC-32C and every other file's
 * size and CRC-32C against state.json before reading any weights.
 *
 * Ownership: nothing returned here needs freeing except the JSON state of ct_checkpoint_load
 * (json_decref). Files are written to a temporary name, flushed to disk and renamed, so a crash
 * never leaves a half-written file under a final name.
 */
#ifndef CTRAIN_CHECKPOINT_H
#define CTRAIN_CHECKPOINT_H

#include "ctrain/crc32c.h"
#include "ctrain/nn.h"
#include "ctrain/optim.h"
#include "ctrain/options.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Writes every tensor of an allocated store (trainable and buffers, in declaration order),
 * then each alias (ct_params_alias) as a copy of its tensor under the alias's name, to path, so
 * that PyTorch's load_state_dict(strict=True) finds a tied weight under both of its names.
 * metadata (may be NULL) adds string pairs to "__metadata__" after "format": "pt". */
CT_API ct_status ct_safetensors_save(ct_ctx *ctx,
                                     const ct_params *params,
                                     const char *path,
                                     const ct_option *metadata,
                                     int64_t n_metadata);
/* ct_safetensors_save with the f32 tensors written as `dtype`: CT_F32, or CT_BF16 (rounded to
 * nearest even: half the size, about 3 significant digits). Other dtypes are written as they
 * are. CT_ERR_INVALID_ARG for another dtype. */
CT_API ct_status ct_safetensors_save_as(ct_ctx *ctx,
                                        const ct_params *params,
                                        const char *path,
                                        const ct_option *metadata,
                                        int64_t n_metadata,
                                        ct_dtype dtype);

typedef struct ct_safetensors_load_params {
    bool strict;        /* every store tensor must be in the file and every file tensor in the
                           store (PyTorch's strict=True); default true */
    const char *prefix; /* prepended to store names when looking them up in the file; NULL */
} ct_safetensors_load_params;

CT_API ct_safetensors_load_params ct_safetensors_load_default_params(void);

/*
 * Reads path into the tensors of an allocated store with the same names (a tensor's alias
 * names it too). Every header value is checked before it is used (header length against the
 * file, each range against the data, each range's length against its dtype and shape, ranges
 * disjoint and covering the data), and a file tensor must have the store tensor's shape.
 * F32 loads into f32 tensors as it is; BF16, F16 and F64 are converted to f32 (F64 rounded to
 * nearest), with a CT_LOG_INFO note naming the file, the dtypes and how many tensors; I64
 * loads into i64, I32 into i32, U8 into u8.
 * A tensor the file holds under two of its names (a tied weight under both) must have equal
 * values under both (else CT_ERR_FORMAT naming both and the first differing element).
 * Strict loading: every store tensor must be in the file (under any of its names) and every
 * file tensor must name one. Otherwise, as PyTorch's load_state_dict(strict=False) reports
 * them, a CT_LOG_WARN message lists the missing keys (store tensors left as they were) and
 * the unexpected keys (file tensors not used), and a file none of whose tensors matches is
 * CT_ERR_FORMAT (with both lists' first names and a hint about `prefix`).
 * Errors name the file, the tensor and the offset or what differs. On failure the store may be
 * partly written (load again, or reinitialise). *loaded (may be NULL) is the number of file
 * tensors read.
 */
CT_API ct_status ct_safetensors_load(ct_ctx *ctx,
                                     ct_params *params,
                                     const char *path,
                                     const ct_safetensors_load_params *p,
                                     int64_t *loaded);

/* ---- checkpoint directories ---- */

struct json_t; /* jansson's JSON value (json_t in <jansson.h>) */

/* The state.json format this ctrain writes and the newest it reads (1: without state.json's
 * own checksum and with bare pointer files, still read). */
#define CT_CHECKPOINT_FORMAT_VERSION 2

typedef struct ct_checkpoint_save_params {
    int64_t step;          /* names the directory step-%08lld; >= 0; required */
    int64_t epoch;         /* recorded in state.json; default 0 */
    const ct_params *ema;  /* a second store saved as ema.safetensors; NULL = none */
    const ct_optim *optim; /* its buffers and step count as optimizer.safetensors; NULL = none */
    struct json_t *state;  /* a JSON object (borrowed, not modified) saved as state.json's
                              "state": trainer, loader, RNG, scheduler, policy and user state;
                              NULL = {} */
    bool best;             /* also point `best` at this checkpoint; default false */
    int64_t keep;          /* after the save, delete all but the newest `keep` checkpoints, never
                              the ones `latest` and `best` point to; 0 (default) keeps all */
    bool replace;          /* an existing checkpoint of this step is replaced (with a warning):
                              a resumed run re-making the steps of a continuation it abandoned.
                              Default false: an existing step is an error, nothing is touched.
                              The old one is moved aside (*.tmp) before the new one is renamed
                              in, so a crash between the two leaves the older checkpoints for
                              `latest`'s fallback */
    int64_t spare_step;    /* retention never deletes this step's checkpoint either (a run
                              keeps the one it resumed from); -1 (default) = none */
    /* A verification hook: called after each file is written into step-N.tmp/ (file: its name,
       "model.safetensors", ...; state.json last), before the checkpoint is published. An error
       cancels the save as a failed write does. `ctrain verify-resume` ends the process here to
       test a save cut short. NULL (default) = none. */
    ct_status (*on_file)(void *user, const char *file);
    void *on_file_user;
} ct_checkpoint_save_params;

CT_API ct_checkpoint_save_params ct_checkpoint_save_default_params(void);

/*
 * Saves params (an allocated store; its trainable values and buffers) and what p adds as the
 * checkpoint <root>/checkpoints/step-<8 digits>/, creating root and checkpoints/ when missing,
 * and points `latest` (and `best` when asked) at it. Left-over *.tmp entries of an interrupted
 * save are removed first. saved_path (may be NULL) receives the directory's path.
 * Errors: CT_ERR_IO naming the path, the operation and strerror (a full disk, a directory
 * step-N that already exists, ...): the previous checkpoints and pointers are then unchanged
 * and nothing half-written has a final name. A failure to delete an old checkpoint after the
 * new one is published is only logged (CT_LOG_WARN): the save itself succeeded.
 */
CT_API ct_status ct_checkpoint_save(ct_ctx *ctx,
                                    const char *root,
                                    const ct_params *params,
                                    const ct_checkpoint_save_params *p,
                                    char *saved_path,
                                    size_t saved_path_size);

/*
 * Loads a checkpoint. which is "latest", "best", the name of a directory under
 * <root>/checkpoints ("step-00000120") or any checkpoint directory's path. Before any tensor
 * is read, state.json must parse, its format_version must be at most
 * CT_CHECKPOINT_FORMAT_VERSION (a newer one fails with a hint to upgrade), and every file it
 * lists must have the recorded size and CRC-32C (a mismatch names the file and both checksums).
 * Then params, ema and optim (the last two may be NULL: not loaded) are loaded strictly: the
 * checkpoint must hold exactly their tensors, with their shapes; a requested ema or optimizer
 * file that the checkpoint lacks is an error.
 * For "latest" only: when the checkpoint `latest` names is damaged or incomplete (or the
 * pointer is missing), the newest checkpoint directory that verifies (not newer than the
 * damaged one) is loaded instead, with a CT_LOG_WARN message naming both; a newer format or a
 * model that does not fit is never a reason to fall back.
 * Outputs (each may be NULL): *state_out the saved "state" object, a new reference the caller
 * frees with json_decref; *step_out and *epoch_out; loaded_path the directory loaded. On failure
 * *state_out is NULL and the stores may be partly written (load again or reinitialise).
 */
CT_API ct_status ct_checkpoint_load(ct_ctx *ctx,
                                    const char *root,
                                    const char *which,
                                    ct_params *params,
                                    ct_params *ema,
                                    ct_optim *optim,
                                    struct json_t **state_out,
                                    int64_t *step_out,
                                    int64_t *epoch_out,
                                    char *loaded_path,
                                    size_t loaded_path_size);

/*
 * The checkpoint directory ct_checkpoint_load would load for `which` (the same resolution,
 * checks and "latest" fallback, with its warning), without loading it: its path into dir_out
 * (size bytes) and its step into *step (may be NULL; -1 on failure). Errors as the load's:
 * CT_ERR_IO when there is no checkpoint (or no `best`) to name, CT_ERR_FORMAT when what it names
 * is damaged (for "latest": every checkpoint there is), a newer format likewise.
 */
CT_API ct_status ct_checkpoint_resolve(
    ct_ctx *ctx, const char *root, const char *which, char *dir_out, size_t size, int64_t *step);

/*
 * Checks a checkpoint directory without loading it: state.json parses, its format version is
 * supported, and every listed file has its recorded size and CRC-32C. *step_out may be NULL.
 */
CT_API ct_status ct_checkpoint_verify(ct_ctx *ctx, const char *dir, int64_t *step_out);

/*
 * The steps of the checkpoint directories under <root>/checkpoints (step-N, not *.tmp),
 * newest first, without verifying them: up to cap of them in steps[] (may be NULL when cap is
 * 0), and the total in *count. A missing checkpoints/ directory gives 0.
 */
CT_API ct_status
ct_checkpoint_list(ct_ctx *ctx, const char *root, int64_t *steps, int64_t cap, int64_t *count);

/* Removes the left-over *.tmp entries of interrupted saves under <root>/checkpoints. */
CT_API ct_status ct_checkpoint_cleanup(ct_ctx *ctx, const char *root);

/*
 * The step of the checkpoint that the pointer file <root>/checkpoints/<name> names (name is
 * "latest" or "best"), without checking that checkpoint. Errors: CT_ERR_IO when the pointer is
 * missing; CT_ERR_FORMAT when it is damaged (not a checkpoint name with its matching crc32c
 * line), the message showing its bytes escaped. *step_out (may be NULL) is -1 on failure.
 */
CT_API ct_status ct_checkpoint_pointer(ct_ctx *ctx,
                                       const char *root,
                                       const char *name,
                                       int64_t *step_out);

/* Points <root>/checkpoints/<name> ("latest" or "best") at the checkpoint directory of step,
 * which must exist: tmp, fsync, rename, fsync of the directory, as a save does. */
CT_API ct_status ct_checkpoint_set_pointer(ct_ctx *ctx,
                                           const char *root,
                                           const char *name,
                                           int64_t step);

/* ---- comparing two checkpoints ---- */

/* How a tensor of one side compares with the tensor of that name on the other. */
typedef enum ct_diff_kind {
    CT_DIFF_SAME,   /* same dtype and shape, every element equal (within the tolerance) */
    CT_DIFF_VALUES, /* same dtype and shape, some elements differ */
    CT_DIFF_DTYPE,  /* same shape, another dtype: the values are compared as numbers */
    CT_DIFF_SHAPE,  /* another shape: the values are not compared */
    CT_DIFF_ONLY_A, /* in A only */
    CT_DIFF_ONLY_B, /* in B only */
    CT_DIFF_KIND_COUNT
} ct_diff_kind;

typedef struct ct_tensor_diff {
    const char *file; /* the checkpoint's file: "model.safetensors", "optimizer.safetensors", ... */
    const char *name; /* the tensor's name in that file */
    ct_diff_kind kind;
    char dtype_a[8], dtype_b[8]; /* safetensors dtype names ("F32"); "" on a side without it */
    int64_t shape_a[CT_MAX_DIMS], shape_b[CT_MAX_DIMS];
    int32_t ndim_a, ndim_b;
    int64_t numel;  /* elements compared: 0 for CT_DIFF_SHAPE and the ONLY kinds */
    int64_t n_diff; /* elements that differ */
    int64_t first;  /* flat (row-major) index of the first differing element; -1 when none */
    int64_t first_index[CT_MAX_DIMS]; /* the same per dimension (ndim_a of them) */
    double first_a, first_b;          /* the values there */
    double max_abs; /* the largest |a - b|; +inf where one side is NaN or they are unlike infs */
    double max_rel; /* the largest |a - b| / max(|a|, |b|) */
    double cosine;  /* of the two as vectors, over the elements finite on both sides; 1 when
                       both are zero, 0 when one is */
} ct_tensor_diff;

typedef struct ct_state_diff {
    const char *key;   /* the path into state.json: "step", "state.trainer.seed", "state.x[2]" */
    const char *a, *b; /* the value on each side as compact JSON; NULL on a side without it */
} ct_state_diff;

typedef struct ct_checkpoint_diff {
    const char *path_a, *path_b; /* what was read for each side: the checkpoint directory (a
                                    run's latest) or the safetensors file */
    ct_tensor_diff *tensors;     /* every tensor of either side, A's files and order first */
    int64_t n_tensors;
    int64_t n_same; /* those of kind CT_DIFF_SAME */
    ct_state_diff *state;
    int64_t n_state;
    bool state_compared; /* both sides are checkpoints, so their state.json were compared */
    bool identical;      /* no tensor and no state key differs */
    ct_ctx *ctx;
} ct_checkpoint_diff;

typedef struct ct_checkpoint_diff_params {
    double tolerance; /* finite, >= 0: elements with |a - b| <= tolerance count as equal (a NaN
                         only with a NaN). 0 (default): elements must be equal bit for bit
                         (-0.0 and 0.0, or two NaN payloads, differ) */
} ct_checkpoint_diff_params;

CT_API ct_checkpoint_diff_params ct_checkpoint_diff_default_params(void);

/*
 * Compares a and b, each a run directory (the checkpoint its `latest` names; with that pointer
 * missing or damaged, the newest checkpoint that verifies, as ct_checkpoint_resolve picks; when
 * a run being trained deletes that checkpoint while it is read, the comparison starts over from
 * the new `latest`, up to 4 times), a checkpoint directory or a safetensors file (weights only,
 * compared as a checkpoint's model.safetensors). Two checkpoints compare every safetensors file
 * that state.json lists on either side, tensor by tensor by name, and state.json key by key
 * (all but its own "crc32c" and its "files" checksums, which the tensors stand for); a file on
 * one side only gives tensors on one side only. Checksums are not required to match: a damaged
 * file is compared as it reads. *out (NULL on failure) is freed with
 * ct_checkpoint_diff_destroy; its strings live as long. Errors: CT_ERR_IO for a path that cannot
 * be read, CT_ERR_FORMAT for one that is not a run, a checkpoint or a safetensors file (the
 * message names it and what was expected), CT_ERR_INVALID_ARG for a tolerance that is negative
 * or not finite.
 */
CT_API ct_status ct_checkpoint_diff_create(ct_ctx *ctx,
                                           const char *a,
                                           const char *b,
                                           const ct_checkpoint_diff_params *p,
                                           ct_checkpoint_diff **out);
/* Frees a comparison; NULL is a no-op. */
CT_API void ct_checkpoint_diff_destroy(ct_checkpoint_diff *d);
/* "same", "values", "dtype", "shape", "only_a", "only_b". */
CT_API const char *ct_diff_kind_name(ct_diff_kind k);

#ifdef __cplusplus
}
#endif

#endif /* CTRAIN_CHECKPOINT_H */
