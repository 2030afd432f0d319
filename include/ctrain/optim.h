/*
 * optim.h - optimizers over a ct_params store's flat value and gradient buffers.
 *
 * Each moment lives in one contiguous buffer with the parameters' layout, so a step is one
 * flat loop. Updates follow PyTorch's torch.optim formulas exactly (SGD with momentum,
 * dampening, Nesterov and L2 weight decay; Adam with L2 weight decay; AdamW with decoupled
 * decay), so losses match step for step.
 *
 * Ownership: the optimizer borrows the store, which must outlive it.
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
    CT_OPTIM_KIND_COUNT
} ct_optim_kind;

typedef struct ct_optim_params {
    ct_optim_kind kind;
    float lr;           /* default 1e-3 */
    float weight_decay; /* default 0 (AdamW: 1e-2 as PyTorch) */
    float momentum;     /* SGD; default 0 */
    float dampening;    /* SGD; default 0 */
    bool nesterov;      /* SGD; needs momentum > 0 and dampening 0 */
    float beta1;        /* Adam(W); default 0.9 */
    float beta2;        /* Adam(W); default 0.999 */
    float eps;          /* Adam(W); default 1e-8 */
    bool zero_grad;     /* the step sets each gradient to 0 once used, in the same pass over
                           memory: replaces a ct_params_zero_grad before the next backward */
} ct_optim_params;

typedef struct ct_optim ct_optim;

CT_API ct_optim_params ct_optim_default_params(ct_optim_kind kind);
/* The params are validated (lr >= 0, betas in [0, 1), ...); a bad one fails with
 * CT_ERR_INVALID_ARG naming it. The store must be allocated. */
CT_API ct_status ct_optim_create(ct_ctx *ctx,
                                 ct_params *params,
                                 const ct_optim_params *p,
                                 ct_optim **out);
CT_API void ct_optim_destroy(ct_optim *opt);

/* One update of every trainable parameter from its gradient, at the current learning rate. */
CT_API void ct_optim_step(ct_optim *opt);
/* Fails with CT_ERR_INVALID_ARG (and keeps the old rate) unless lr is finite and >= 0. */
CT_API ct_status ct_optim_set_lr(ct_optim *opt, float lr);
CT_API float ct_optim_lr(const ct_optim *opt);
/* Updates made so far. */
CT_API int64_t ct_optim_steps(const ct_optim *opt);

#ifdef __cplusplus
}
#endif

#endif /* CTRAIN_OPTIM_H */
