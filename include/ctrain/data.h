/*
 * data.h - datasets found by name, per-sample transforms, and a loader that shuffles
 * reproducibly, batches, prefetches on a background thread, shards exactly across ranks and
 * saves and restores its position.
 *
 * A dataset is N samples with random access: sample i is a feature tensor of a fixed shape and
 * dtype (info.x_*) and a target of a fixed shape and dtype (info.y_*; a class index is an i64
 * scalar). Datasets are opened by type name ("idx", "cifar10", "csv", "npy", "text", "tokens",
 * "synthetic", "arithmetic") with string options, as an experiment file gives them; an unknown
 * type, unknown option or bad value fails with CT_ERR_CONFIG naming it (ct_dataset_check finds
 * these without opening anything), and a bad file fails with CT_ERR_FORMAT or CT_ERR_IO naming the
 * file, the offset or line and what was expected.
 * Header sizes are validated against the file size before anything is allocated. The types that
 * read float values (csv, npy) refuse an inf or NaN at open, naming the file and the value's
 * place, unless their option nonfinite=allow (default error) keeps such values as they are.
 *
 * Ownership: ct_dataset_open returns a dataset the caller frees with ct_dataset_close. A
 * split (ct_dataset_split) borrows its parent, which must outlive it. A loader borrows its
 * dataset. Batches returned by ct_loader_next are owned by the loader and stay valid until the
 * next call to ct_loader_next (or ct_loader_destroy).
 */
#ifndef CTRAIN_DATA_H
#define CTRAIN_DATA_H

#include "ctrain/options.h"
#include "ctrain/rng.h"
#include "ctrain/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- datasets ---- */

typedef struct ct_dataset ct_dataset;

typedef struct ct_dataset_info {
    int64_t n;        /* number of samples */
    ct_dtype x_dtype; /* feature dtype as stored (u8 images, f32 tables, i64 tokens) */
    int32_t x_ndim;   /* per-sample feature shape, without the batch dim */
    int64_t x_shape[CT_MAX_DIMS];
    ct_dtype y_dtype; /* CT_I64 for class indices and tokens, CT_F32 for values */
    int32_t y_ndim;   /* 0 for one class index per sample */
    int64_t y_shape[CT_MAX_DIMS];
    int64_t n_classes; /* classes for classification data, vocab for text; else 0 */
} ct_dataset_info;

/* One example for decoding: a prompt and the text expected after it, borrowed from the
 * dataset (valid while it is open); not NUL-terminated. */
typedef struct ct_text_example {
    const char *prompt;
    size_t prompt_len;
    const char *reference;
    size_t reference_len;
} ct_text_example;

/* The functions behind a dataset type; built-in types and plugins provide one each. */
typedef struct ct_dataset_vtable {
    ct_plugin_tag tag; /* CT_PLUGIN_DATASET in a plugin, 0 in the library (status.h) */
    const char *name;  /* the type name in configs */
    /* Opens a dataset from options. On failure: a status and message; *self is NULL. */
    ct_status (*open)(ct_ctx *ctx, const ct_options *opts, ct_dataset_info *info, void **self);
    /* Writes sample i's features (info x shape and dtype) and target into x and y. */
    ct_status (*get)(const void *self, int64_t i, void *x, void *y);
    void (*close)(ct_ctx *ctx, void *self);
    /*
     * Optional: reads and checks the options as open does (unknown keys, types, ranges, enum
     * values, required keys) without opening a file or keeping anything, so that a
     * configuration can be checked before any data are read (ct_dataset_check_with). NULL: the
     * options are checked when the dataset is opened. Every built-in type has one.
     */
    ct_status (*check)(ct_ctx *ctx, const ct_options *opts);
    /*
     * Optional: the option keys open reads (NULL-terminated, static), for checking a
     * configuration's keys before any file is opened, and those among them whose values are
     * file paths (a list of them, or a comma-separated one, for `files`), which an experiment
     * makes absolute (docs/config.md, Paths). Every built-in type has both; a plugin's are not
     * read (its check, or its open, checks its options).
     */
    const char *const *keys;
    const char *const *path_keys;
} ct_dataset_vtable;

/* The built-in dataset types: a NULL-terminated table of *count; and the one of a name (NULL
 * for a name that is not one, or NULL). */
CT_API const ct_dataset_vtable *const *ct_dataset_types(int64_t *count);
CT_API const ct_dataset_vtable *ct_dataset_type_find(const char *name);

/* Checks options for a dataset of the named type, or through a caller-provided vtable
 * (plugins), without opening anything: vt->check, and CT_OK for a vtable without one. Fails as
 * opening with these options would (CT_ERR_CONFIG naming opts->where and the key; an unknown
 * type lists the known ones; CT_ERR_INVALID_ARG for a vtable without name, open, get or close).
 * For checking a configuration before any data are read; the files themselves are checked when
 * the dataset is opened. */
CT_API ct_status ct_dataset_check(ct_ctx *ctx, const char *type, const ct_options *opts);
CT_API ct_status ct_dataset_check_with(ct_ctx *ctx,
                                       const ct_dataset_vtable *vt,
                                       const ct_options *opts);

/* Opens a dataset of the named type. An unknown type fails with CT_ERR_CONFIG listing the
 * known ones. *out is NULL on failure. */
CT_API ct_status ct_dataset_open(ct_ctx *ctx,
                                 const char *type,
                                 const ct_options *opts,
                                 ct_dataset **out);
/* Opens a dataset through a caller-provided vtable (plugins). */
CT_API ct_status ct_dataset_open_with(ct_ctx *ctx,
                                      const ct_dataset_vtable *vt,
                                      const ct_options *opts,
                                      ct_dataset **out);
CT_API void ct_dataset_close(ct_dataset *ds);
CT_API const ct_dataset_info *ct_dataset_info_of(const ct_dataset *ds);
/* Copies sample i into x and y (sizes from the info); fails on i out of [0, n). */
CT_API ct_status ct_dataset_get(const ct_dataset *ds, int64_t i, void *x, void *y);
/* Text examples, for an experiment's decode engine (docs/trainer.md): the number of
 * (prompt, reference) examples of a dataset whose type gives them, else -1. The `text` type
 * gives one per window: its first half (rounded up) as the prompt, the rest as the reference;
 * `arithmetic` one per problem ("12+345=", "357"). Other types, plugins' types and split or
 * standardised views give none. */
CT_API int64_t ct_dataset_n_examples(const ct_dataset *ds);
/* Example i into *out (borrowed from the dataset); fails on a dataset without examples or i
 * out of range (CT_ERR_INVALID_ARG). */
CT_API ct_status ct_dataset_example(const ct_dataset *ds, int64_t i, ct_text_example *out);

/*
 * A validation split carved from a dataset: a seeded permutation of [0, n) (independent of
 * everything else) puts round(fraction * n) samples in the validation part and the rest in
 * the training part, disjoint, and the same for the same (n, fraction, seed) in every run.
 * Both parts borrow `parent`. fraction in (0, 1).
 */
CT_API ct_status ct_dataset_split(
    ct_dataset *parent, double fraction, uint64_t seed, ct_dataset **train, ct_dataset **valid);

/*
 * A view of `ds` (f32 features) whose features are standardised element by element:
 * (x - mean) / std. The statistics are either computed over `stats_from` (the training split,
 * so that validation data never leaks into them; mean and population std in double, in sample
 * order; a std of 0 counts as 1) or, when stats_from is NULL, copied from mean and std (numel
 * of one sample each: statistics restored from a checkpoint). The view borrows ds.
 */
CT_API ct_status ct_dataset_standardize(ct_dataset *ds,
                                        const ct_dataset *stats_from,
                                        const float *mean,
                                        const float *std,
                                        ct_dataset **out);
/* The statistics of a standardised view (numel of one sample each), to store for evaluation.
 * Borrowed: valid while the view lives. Fails on a dataset that is not such a view. */
CT_API ct_status ct_dataset_standardize_stats(const ct_dataset *view,
                                              const float **mean,
                                              const float **std,
                                              int64_t *n);

/* ---- transforms (applied per sample, in order, after conversion to f32) ---- */

typedef enum ct_transform_kind {
    CT_TRANSFORM_SCALE = 0,   /* x * a + b (a: scale, b: shift), e.g. u8 pixels to [0, 1] */
    CT_TRANSFORM_NORMALIZE,   /* (x - mean[c]) / std[c] per channel (dim 0 of the sample) */
    CT_TRANSFORM_RANDOM_CROP, /* zero-pad by `pad` then crop back to HxW at a random offset */
    CT_TRANSFORM_HFLIP,       /* flip the last dim with probability p */
    CT_TRANSFORM_KIND_COUNT
} ct_transform_kind;

#define CT_TRANSFORM_MAX_CHANNELS 16

typedef struct ct_transform {
    ct_transform_kind kind;
    float a, b;                            /* SCALE */
    float mean[CT_TRANSFORM_MAX_CHANNELS]; /* NORMALIZE */
    float std[CT_TRANSFORM_MAX_CHANNELS];
    int64_t pad; /* RANDOM_CROP */
    float p;     /* HFLIP */
} ct_transform;

/* ---- the loader ---- */

typedef enum ct_shard_mode {
    CT_SHARD_TRAIN_DROP = 0, /* equal shards; the remainder of the permutation is dropped */
    CT_SHARD_TRAIN_PAD,      /* equal shards; the permutation is padded by repeating its start */
    CT_SHARD_EVAL,           /* unpadded runs of whole batches: every sample exactly once, in
                                the batches one process would make */
    CT_SHARD_MODE_COUNT
} ct_shard_mode;

#define CT_LOADER_MAX_TRANSFORMS 8

typedef struct ct_loader_params {
    int64_t batch_size;  /* default 32 */
    bool shuffle;        /* a new permutation each epoch from (seed, epoch); default true */
    bool drop_last;      /* drop a last partial batch; default false */
    uint64_t seed;       /* default 0 */
    int64_t rank;        /* this process's rank, default 0 */
    int64_t world_size;  /* number of ranks, default 1 */
    ct_shard_mode shard; /* default CT_SHARD_TRAIN_DROP */
    int64_t prefetch;    /* batches assembled ahead on a background thread; 0 = none; 2 */
    bool to_f32;         /* convert features to f32 before the transforms; default true */
    /* Targets (class-index datasets only): label_map[c] replaces class c (copied at create; a
     * class outside [0, label_map_len) fails the batch naming the sample), and one_hot turns
     * the class into an f32 row of n_classes (after mapping: the largest mapped class + 1). */
    const int64_t *label_map;
    int64_t label_map_len;
    bool one_hot;
    int32_t n_transforms;
    ct_transform transforms[CT_LOADER_MAX_TRANSFORMS];
} ct_loader_params;

/* A batch: x [B, sample shape...] (f32 when to_f32, else the dataset's dtype) and y [B, ...]
 * (y [B, n_classes] f32 with one_hot). index[b] is the dataset index of row b. Owned by the
 * loader. */
typedef struct ct_batch {
    ct_tensor x, y;
    const int64_t *index;
    int64_t size;          /* B (the last batch may be smaller unless drop_last) */
    int64_t epoch, number; /* which batch of which epoch this is */
} ct_batch;

/* The position of a loader: restoring it yields exactly the batches an uninterrupted run
 * would have yielded next. Plain data, to save in checkpoints. */
typedef struct ct_loader_state {
    int64_t epoch;      /* epoch of the next batch */
    int64_t next_batch; /* index within that epoch of the next batch */
    uint64_t seed;      /* the loader's seed (checked on restore) */
    /* where every rank together stands in the epoch's order: the next batch of each rank starts
     * at position next_batch x batch_size x world_size of the permutation (the shards are
     * strided, so the samples read so far are exactly the positions before it), or the number
     * of samples at the epoch's end. Set by ct_loader_get_state; ct_loader_set_state ignores
     * it (ct_loader_state_at turns it into another geometry's state). */
    int64_t sample;
} ct_loader_state;

typedef struct ct_loader ct_loader;

CT_API ct_loader_params ct_loader_default_params(void);
CT_API ct_status ct_loader_create(ct_ctx *ctx,
                                  const ct_dataset *ds,
                                  const ct_loader_params *p,
                                  ct_loader **out);
CT_API void ct_loader_destroy(ct_loader *l);

/* Number of batches in one epoch on this rank, and samples this rank sees per epoch. */
CT_API int64_t ct_loader_batches_per_epoch(const ct_loader *l);
CT_API int64_t ct_loader_samples_per_epoch(const ct_loader *l);

/*
 * The next batch of the current epoch into *batch. At the end of an epoch it returns CT_OK with
 * batch->size == 0 and moves to the next epoch, so a loop is
 *     while (ct_loader_next(l, &b) == CT_OK && b.size > 0) { ... }
 * Errors (a failing dataset read) return a status with the message.
 */
CT_API ct_status ct_loader_next(ct_loader *l, ct_batch *batch);

CT_API ct_loader_state ct_loader_get_state(const ct_loader *l);
/* Repositions the loader (dropping prefetched batches). A state from a loader with another
 * seed, or past the end of its epoch, fails with CT_ERR_INVALID_ARG. */
CT_API ct_status ct_loader_set_state(ct_loader *l, const ct_loader_state *s);

/*
 * The state of this loader at global position `sample` of `epoch`'s order (a state's `sample`,
 * saved by a loader of another world size or batch size): the batch of this loader's geometry
 * that starts there, or the epoch's end marker when `sample` is at or past the last batch. So a
 * run stopped by N processes resumes on M at the next unread sample, none read twice and none
 * skipped. A position that falls inside one of this loader's global batches (not a multiple of
 * batch_size x world_size) fails with CT_ERR_INVALID_ARG naming both.
 */
CT_API ct_status ct_loader_state_at(const ct_loader *l,
                                    int64_t epoch,
                                    int64_t sample,
                                    ct_loader_state *out);

/* The dataset indices this rank reads in `epoch`, in order: samples_per_epoch entries into
 * out. For tests and tools. */
CT_API ct_status ct_loader_epoch_indices(const ct_loader *l, int64_t epoch, int64_t *out);

#ifdef __cplusplus
}
#endif

#endif /* CTRAIN_DATA_H */
