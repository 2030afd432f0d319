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

#endif /* CT_AUTOGRAD_INTERNAL_H */
