/*
 * optim.h - optimizers over a ct_params store's flat value and gradient buffers, parameter
 * groups, and gradient clipping.
 *
 * Each moment lives in one contiguous buffer with the parameters' layout, so a step is a flat
 * loop over a few contiguous ranges (one per run of tensors that share hyperparameters).
 * Updates follow PyTorch 1.13's torch.optim single-tensor formulas operation by operation (SGD
 * with momentum, dampening, Nesterov and L2 weight decay; Adam with L2 weight decay; AdamW with
 * decoupled decay; RMSprop, plain or centered, with momentum; Adagrad with learning-rate decay),
 * so parameters match PyTorch's step for step to rounding. Scalars derived from the
 * hyperparameters (1 - beta1, bias corrections, ...) are computed in double from the float
 * fields and rounded once, as PyTorch does with its Python floats. Results do not depend on the
 * context's thread count.
 *
 * Ownership: the optimizer borrows the store, which must outlive it. Group patterns are not
 * kept after ct_optim_add_group returns.
 */
#ifndef CTRAIN_OPTIM_H
#define CTRAIN_OPTIM_H

#include "ctrain/nn.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ct_optim_kind {
    CT_OPTIM_SGD = 0,
    CT_OPTIM_ADAM,
    CT_OPTIM_ADAMW,
    CT_OPTIM_RMSPROP,
    CT_OPTIM_ADAGRAD,
    CT_OPTIM_KIND_COUNT
} ct_optim_kind;

/* Defaults are those of ct_optim_default_params, which follow torch.optim's. */
typedef struct ct_optim_params {
    ct_optim_kind kind;
    float lr;           /* default 1e-3 (RMSprop, Adagrad: 1e-2 as PyTorch) */
    float weight_decay; /* L2 added to the gradient; default 0 (AdamW: 1e-2, decoupled) */
    float momentum;     /* SGD, RMSprop; default 0 */
    float dampening;    /* SGD; default 0 */
    bool nesterov;      /* SGD; needs momentum > 0 and dampening 0 */
    float beta1;        /* Adam(W); default 0.9 */
    float beta2;        /* Adam(W); default 0.999 */
    float eps;          /* Adam(W), RMSprop: default 1e-8; Adagrad: 1e-10 */
    bool zero_grad;     /* the step sets each gradient to 0 once used, in the same pass over
                           memory: replaces a ct_params_zero_grad before the next backward */
    float alpha;        /* RMSprop smoothing constant in [0, 1]; default 0.99 */
    bool centered;      /* RMSprop: normalise by the estimated variance; default false */
    float lr_decay;     /* Adagrad: lr / (1 + (step - 1) * lr_decay); default 0 */
    float initial_accumulator_value; /* Adagrad: start of the squared-gradient sum; default 0 */
} ct_optim_params;

typedef struct ct_optim ct_optim;

CT_API ct_optim_params ct_optim_default_params(ct_optim_kind kind);
/* The params are validated (lr >= 0, betas in [0, 1), alpha in [0, 1], every other number
 * finite and >= 0, ...); a bad one fails with CT_ERR_INVALID_ARG naming it. The store must be
 * allocated; its trainable tensors are the ones updated. Moments start at 0 (Adagrad's sum at
 * initial_accumulator_value). */
CT_API ct_status ct_optim_create(ct_ctx *ctx,
                                 ct_params *params,
                                 const ct_optim_params *p,
                                 ct_optim **out);
CT_API void ct_optim_destroy(ct_optim *opt);

/* A parameter group: the trainable tensors whose names match `pattern` are updated with
 * learning rate lr * lr_scale and with this weight decay instead of the optimizer's (AdamW:
 * decoupled as usual). `pattern` is a comma-separated list of shell globs (fnmatch, no flags)
 * matched against the store's names, e.g. "*.bias,*norm*.weight,*bn*.weight" for the usual
 * no-decay group; spaces around the commas are ignored. Groups may be added at any time; a
 * tensor takes the settings of the last group that matches it, the optimizer's otherwise.
 * Errors: CT_ERR_INVALID_ARG for an empty pattern or an lr_scale or weight_decay that is not
 * finite and >= 0; CT_ERR_CONFIG, naming the pattern, when it matches no trainable tensor.
 * On failure the groups are unchanged. */
CT_API ct_status ct_optim_add_group(ct_optim *opt,
                                    const char *pattern,
                                    float lr_scale,
                                    float weight_decay);

/* One update of every trainable parameter from its gradient, at the current learning rate. */
CT_API void ct_optim_step(ct_optim *opt);
/* One update of the parameters at flat offsets [lo, hi) of the store's buffers (clamped to
 * [0, numel)), the others and their moments untouched; it counts as an update
 * (ct_optim_steps). Every rule is elementwise, so ranks that each step their own part of one
 * tiling compute, together, exactly what ct_optim_step computes: the sharded update of a
 * data-parallel run (docs/distributed.md). With params.zero_grad only [lo, hi) is zeroed. */
CT_API void ct_optim_step_range(ct_optim *opt, int64_t lo, int64_t hi);
/* ct_optim_step when every gradient is finite (no inf or NaN; the answer of
 * ct_nonfinite_check), otherwise nothing at all (weights, moments, gradients and the step
 * count stay): returns whether it stepped. Each thread scans the gradients it then updates, in
 * one team, so every gradient is read before anything is written (the trainer's check under
 * on_nonfinite skip in one process; costs: docs/trainer.md, "Overhead"). */
CT_API bool ct_optim_step_if_finite(ct_optim *opt);
/* ct_optim_step, returning whether every gradient it read was finite. The update is made
 * either way: when it returns false, weights and moments may hold inf or NaN (and the step is
 * counted), so the caller restores them (a snapshot, a checkpoint) or discards them, as the
 * trainer does under on_nonfinite stop and rollback (its default check in one process). The
 * test is on each gradient as the update loads it, so it costs next to nothing beside the
 * update, where ct_optim_step_if_finite reads every gradient before writing anything. */
CT_API bool ct_optim_step_checked(ct_optim *opt);
/* Fails with CT_ERR_INVALID_ARG (and keeps the old rate) unless lr is finite and >= 0. Groups
 * keep their lr_scale relative to it. */
CT_API ct_status ct_optim_set_lr(ct_optim *opt, float lr);
CT_API float ct_optim_lr(const ct_optim *opt);
/* Updates made so far. */
CT_API int64_t ct_optim_steps(const ct_optim *opt);
/* Whether ct_optim_step leaves every gradient of the store at 0 (params.zero_grad): then a
 * ct_params_zero_grad after it would only write the zeros again. */
CT_API bool ct_optim_zeroes_grads(const ct_optim *opt);

/*
 * State for checkpoints. The optimizer's buffers are flat arrays of ct_params_numel floats in
 * the parameters' layout, named as PyTorch's optimizer state: "momentum_buffer" (SGD with
 * momentum, RMSprop with momentum), "exp_avg" and "exp_avg_sq" (Adam, AdamW), "square_avg" and
 * "grad_avg" (RMSprop, the latter when centered), "sum" (Adagrad). Buffer i in [0, count) is
 * borrowed and may be written (to restore). ct_optim_set_steps restores the update count, which
 * drives the bias corrections and SGD's first-step rule.
 */
CT_API int32_t ct_optim_buffer_count(const ct_optim *opt);
CT_API ct_status ct_optim_buffer(const ct_optim *opt, int32_t i, const char **name, float **data);
CT_API ct_status ct_optim_set_steps(ct_optim *opt, int64_t steps);

/*
 * Gradient clipping over the store's trainable gradients (ct_params_grads), to call between
 * backward (and any all-reduce) and ct_optim_step.
 *
 * ct_optim_clip_grad_norm: torch.nn.utils.clip_grad_norm_ with the L2 norm. The total norm of
 * all gradients is accumulated in double in a fixed order (fixed-size blocks summed left to
 * right), so it is the same bits for any thread count. If max_norm / (total + 1e-6) < 1 every
 * gradient is multiplied by that factor. max_norm <= 0 only measures. A non-finite total (a
 * gradient is inf or NaN) leaves the gradients untouched: the caller's non-finite policy
 * decides. *total_norm_out (may be NULL) receives the norm before clipping, as a float, or 0
 * on failure.
 * Errors: CT_ERR_INVALID_ARG if max_norm is NaN or the store is not allocated.
 *
 * ct_optim_clip_grad_value: clamps every gradient to [-clip, clip] (NaN stays NaN).
 * Errors: CT_ERR_INVALID_ARG unless clip is finite and >= 0, or if the store is not allocated.
 */
CT_API ct_status ct_optim_clip_grad_norm(ct_ctx *ctx,
                                         ct_params *params,
                                         float max_norm,
                                         float *total_norm_out);
CT_API ct_status ct_optim_clip_grad_value(ct_ctx *ctx, ct_params *params, float clip);

#ifdef __cplusplus
}
#endif

#endif /* CTRAIN_OPTIM_H */
