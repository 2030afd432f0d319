/*
 * nn.h - parameter stores and initialisers.
 *
 * A ct_params store holds a model's named tensors: trainable parameters (f32) and buffers
 * (running statistics, counters; any dtype). Tensors are declared first (ct_params_add) and
 * then placed by ct_params_alloc into one contiguous buffer of values, one of gradients (same
 * layout) and one of buffers, in declaration order, without gaps. So the optimizer is one flat
 * loop, a checkpoint one write, and an allreduce one call over ct_params_grads.
 * Names follow PyTorch's state_dict ("fc1.weight", "bn1.running_mean") so weights pass between
 * the two unchanged.
 *
 * Ownership: the store owns every tensor it hands out; pointers stay valid until
 * ct_params_destroy. Data pointers are NULL until ct_params_alloc.
 */
#ifndef CTRAIN_NN_H
#define CTRAIN_NN_H

#include "ctrain/rng.h"
#include "ctrain/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ct_param_kind {
    CT_PARAM_TRAINABLE = 0, /* f32, has a gradient, updated by the optimizer */
    CT_PARAM_BUFFER,        /* saved with the model, not trained (running_mean, counters) */
    CT_PARAM_KIND_COUNT
} ct_param_kind;

typedef struct ct_params ct_params;

CT_API ct_status ct_params_create(ct_ctx *ctx, ct_params **out);
CT_API void ct_params_destroy(ct_params *p);

/* Declares a tensor. The name is copied and must be unique; trainable tensors must be f32.
 * Fails after ct_params_alloc. *out points at the store's tensor (data NULL until alloc). */
CT_API ct_status ct_params_add(ct_params *p,
                               const char *name,
                               ct_dtype dtype,
                               int32_t ndim,
                               const int64_t *shape,
                               ct_param_kind kind,
                               ct_tensor **out);
/* Allocates the buffers (zero-filled) and points every declared tensor into them. */
CT_API ct_status ct_params_alloc(ct_params *p);

/* Number of declared tensors, and the i-th in declaration order. */
CT_API int64_t ct_params_count(const ct_params *p);
CT_API ct_tensor *ct_params_at(const ct_params *p, int64_t i);
CT_API ct_param_kind ct_params_kind_at(const ct_params *p, int64_t i);
/* The tensor of that name (a declared name or an alias), or NULL. */
CT_API ct_tensor *ct_params_find(const ct_params *p, const char *name);

/*
 * Declares `alias` as a second name of the declared tensor `target`: one parameter known under
 * two state_dict names, as nanoGPT's tied lm_head.weight is transformer.wte.weight. The store
 * holds the tensor once (ct_params_count, the buffers and the optimizer see it once, under
 * `target`); ct_params_find answers either name; safetensors writers (ct_safetensors_save,
 * checkpoints) write it under both names, as PyTorch's state_dict lists it, and the reader
 * accepts either name or both (equal values). Before or after ct_params_alloc.
 * CT_ERR_INVALID_ARG when `alias` is already a tensor's or an alias's name, or `target` is not
 * a declared tensor's name (aliases of aliases are not made).
 */
CT_API ct_status ct_params_alias(ct_params *p, const char *alias, const char *target);
/* Number of aliases, and the i-th alias's name (NULL out of range), its tensor in *target
 * (may be NULL; NULL out of range). Names are the store's, valid until ct_params_destroy. */
CT_API int64_t ct_params_alias_count(const ct_params *p);
CT_API const char *ct_params_alias_at(const ct_params *p, int64_t i, ct_tensor **target);

/* The flat trainable values and gradients: ct_params_numel floats each (NULL before alloc). */
CT_API int64_t ct_params_numel(const ct_params *p);
CT_API float *ct_params_values(const ct_params *p);
CT_API float *ct_params_grads(const ct_params *p);
/* Sets every gradient to zero (one memset). */
CT_API void ct_params_zero_grad(ct_params *p);
/* Makes buf (ct_params_numel floats, borrowed, to outlive the binding) the gradient buffer:
 * the current gradients are copied into it and every trainable tensor's grad points into it,
 * so backward passes accumulate there (the trainer's sharded update binds a shared-memory
 * segment that the other ranks read). NULL returns to the store's own buffer, copying the
 * gradients back. Not while a graph holds a backward pass in progress.
 * Errors: CT_ERR_INVALID_ARG if the store is not allocated, or when buf is not NULL and
 * another buffer is bound already (one owner at a time: unbind first). */
CT_API ct_status ct_params_bind_grads(ct_params *p, float *buf);

/* Initialisers (f32 tensors). fan_in is shape[1] * prod(shape[2:]) as in PyTorch. */
CT_API int64_t ct_nn_fan_in(const ct_tensor *weight);
CT_API void ct_nn_init_uniform(ct_tensor *t, ct_rng *rng, float lo, float hi);
CT_API void ct_nn_init_normal(ct_tensor *t, ct_rng *rng, float mean, float std);
/* PyTorch's default for Linear and Conv2d: weight and bias uniform in +-1/sqrt(fan_in)
 * (kaiming_uniform with a = sqrt(5)). bias may be NULL. */
CT_API void ct_nn_init_linear(ct_tensor *weight, ct_tensor *bias, ct_rng *rng);

#ifdef __cplusplus
}
#endif

#endif /* CTRAIN_NN_H */
