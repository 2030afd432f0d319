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

#ifdef __cplusplus
}
#endif

#endif /* CTRAIN_CHECKPOINT_H */
