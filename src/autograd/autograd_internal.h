/*
 * autograd_internal.h - graph internals for the ops: memory that lives to the step's end
 * whatever scratch mark is open, and the slot where the ops keep their per-step cache of bf16
 * weight copies. Both die at ct_graph_reset. Internal.
 */
#ifndef CT_AUTOGRAD_INTERNAL_H
#define CT_AUTOGRAD_INTERNAL_H

#include "core/core_internal.h"
#include "ctrain/autograd.h"

/* size bytes of the graph's step arena (freed by ct_graph_reset), even inside a scratch mark;
 * NULL with the graph's failure recorded when it cannot grow. */
CT_INTERNAL void *ct_graph_alloc_kept(ct_graph *g, size_t size);
/* The graph's cast-cache slot: NULL after create and reset; its owner is src/ops/bf16_cast.c. */
CT_INTERNAL void **ct_graph_casts(ct_graph *g);

/* ct_graph_grad for a backward pass that writes every element of t's gradient. When this call
 * makes the buffer, it is left unzeroed and *fresh is true: the caller must then store
 * 0.0f + (its contribution) in every element, which has the bits that zeroing and adding give
 * (a GEMM that writes with beta 0 gives those too, but for the sign of a zero sum). Otherwise
 * as ct_graph_grad, with *fresh false. Saves a pass over the buffer per activation gradient. */
CT_INTERNAL float *ct_graph_grad_fresh(ct_graph *g, ct_tensor *t, bool *fresh);

#endif /* CT_AUTOGRAD_INTERNAL_H */
