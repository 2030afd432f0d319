/*
 * onednn_internal.h - the per-context oneDNN state shared by the oneDNN kernels (GEMM and
 * convolution): the engine, one stream per worker thread, and the caches of primitives.
 * Internal; only built with OpenMP (oneDNN's runtime here), see the kernels.
 *
 * Every primitive is created as for one thread (omp_set_num_threads(1) around creation) and run
 * by one of our OpenMP workers, so its blocking and reduction order never depend on the thread
 * count: that is how these kernels stay bitwise reproducible.
 */
#ifndef CT_ONEDNN_INTERNAL_H
#define CT_ONEDNN_INTERNAL_H

#include <dnnl.h>

#include "core/core_internal.h"
#include "kernels/cnn_kernels.h"

#define CT_ONEDNN_MAX_STREAMS 256

typedef struct onednn_state {
    dnnl_engine_t engine;
    dnnl_stream_t streams[CT_ONEDNN_MAX_STREAMS]; /* one per OpenMP thread number */
    int n_streams;
    void *scratch[CT_ONEDNN_MAX_STREAMS]; /* per-thread user scratchpads */
    size_t scratch_size;                  /* bytes of each */
    void *conv_plans;                     /* conv2d_onednn.c's cache */
    void *gemm_plans;                     /* gemm_onednn.c's cache */
    int64_t bf16_gemms;                   /* tiles run on bf16 plans (tests; atomic) */
    int64_t bias_gemms;                   /* tiles run on plans with a bias (tests; atomic) */
    int64_t packed_gemms;                 /* tiles run with operands copied dense (tests; atomic) */
    int64_t bf16_convs;                   /* conv chunks run on bf16 plans (tests; atomic) */
    int64_t gemm_plans_built;             /* GEMM primitives created (tests) */
} onednn_state;

/* The context's state with at least nt streams, made on first use; NULL when oneDNN cannot
 * start (no engine) or nt is too large. Not thread-safe: call outside parallel regions. */
CT_INTERNAL onednn_state *ct_k_onednn_state(ct_ctx *ctx, int nt);

/* Grows every thread's scratchpad (of the first n_streams) to at least `bytes`; false on OOM.
 * Call outside parallel regions. */
CT_INTERNAL bool ct_k_onednn_reserve_scratch(ct_ctx *ctx, onednn_state *st, size_t bytes);

/* Free the caches (called when the context is destroyed). */
CT_INTERNAL void ct_k_onednn_conv_plans_free(ct_ctx *ctx, void *plans);
CT_INTERNAL void ct_k_onednn_gemm_plans_free(ct_ctx *ctx, void *plans);

/* Creates a primitive descriptor as for one thread (see above). */
CT_INTERNAL bool ct_k_onednn_pd_create(dnnl_primitive_desc_t *pd,
                                       const_dnnl_op_desc_t desc,
                                       const_dnnl_primitive_attr_t attr,
                                       dnnl_engine_t engine,
                                       const_dnnl_primitive_desc_t hint);

/* How the fused 2x2 pool (pool_blocked.c) addresses an f32 convolution output of layout md:
 * false where it cannot (conv2d_onednn.c). */
CT_INTERNAL bool ct_k_onednn_blocked_view(const dnnl_memory_desc_t *md, ct_k_blocked *v);

#endif /* CT_ONEDNN_INTERNAL_H */
