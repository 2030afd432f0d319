/*
 * loss.h - loss functions as differentiable ops (see ops.h for the conventions).
 *
 * Each returns a step tensor: a scalar for CT_REDUCTION_MEAN and CT_REDUCTION_SUM, per-element
 * (per-sample for the class losses) values for CT_REDUCTION_NONE. Semantics match PyTorch's
 * functions of the same name, including how ignored targets count in the mean.
 */
#ifndef CTRAIN_LOSS_H
#define CTRAIN_LOSS_H

#include "ctrain/autograd.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ct_reduction {
    CT_REDUCTION_MEAN = 0,
    CT_REDUCTION_SUM,
    CT_REDUCTION_NONE,
    CT_REDUCTION_COUNT
} ct_reduction;

typedef struct ct_cross_entropy_params {
    float label_smoothing; /* in [0, 1]; default 0 */
    int64_t ignore_index;  /* targets equal to it add nothing; default -100 */
    ct_reduction reduction;
} ct_cross_entropy_params;

CT_API ct_cross_entropy_params ct_cross_entropy_default_params(void);

/* logits [N, C], target [N] class indices (i32/i64). A target outside [0, C) that is not
 * ignore_index fails with CT_ERR_INVALID_ARG naming the sample. */
CT_API ct_tensor *ct_loss_cross_entropy(ct_graph *g,
                                        ct_tensor *logits,
                                        ct_tensor *target,
                                        const ct_cross_entropy_params *p);
/* Negative log-likelihood: logp [N, C] log-probabilities, target [N]. */
CT_API ct_tensor *ct_loss_nll(
    ct_graph *g, ct_tensor *logp, ct_tensor *target, int64_t ignore_index, ct_reduction reduction);
/* Binary cross-entropy on logits; target f32 of the same shape, values in [0, 1]. */
CT_API ct_tensor *
ct_loss_bce_with_logits(ct_graph *g, ct_tensor *logits, ct_tensor *target, ct_reduction reduction);
/* (pred - target)^2, |pred - target|; same shapes. */
CT_API ct_tensor *ct_loss_mse(ct_graph *g, ct_tensor *pred, ct_tensor *target, ct_reduction r);
CT_API ct_tensor *ct_loss_l1(ct_graph *g, ct_tensor *pred, ct_tensor *target, ct_reduction r);
/* Smooth L1 with threshold beta >= 0 (PyTorch smooth_l1_loss; beta 0 is L1) and Huber with
 * delta > 0. */
CT_API ct_tensor *
ct_loss_smooth_l1(ct_graph *g, ct_tensor *pred, ct_tensor *target, float beta, ct_reduction r);
CT_API ct_tensor *
ct_loss_huber(ct_graph *g, ct_tensor *pred, ct_tensor *target, float delta, ct_reduction r);

#ifdef __cplusplus
}
#endif

#endif /* CTRAIN_LOSS_H */
