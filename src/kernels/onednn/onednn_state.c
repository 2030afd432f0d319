/*
 * onednn_state.c - the per-context oneDNN engine, streams and primitive caches.
 *
 * The state hangs off ct_ctx (ctx->onednn) and is freed by ct_ctx_destroy through
 * ctx->onednn_free, so the library keeps no global oneDNN objects of its own.
 */
#include "kernels/onednn/onednn_internal.h"

#ifdef _OPENMP

#include <omp.h>
#include <string.h>

static void state_free(ct_ctx *ctx, void *p) {
    onednn_state *st = p;
    if (!st) return;
    ct_k_onednn_conv_plans_free(ctx, st->conv_plans);
    ct_k_onednn_gemm_plans_free(ctx, st->gemm_plans);
    for (int i = 0; i < st->n_streams; i++) {
        dnnl_stream_destroy(st->streams[i]);
        ct_free(ctx, st->scratch[i], st->scratch_size);
    }
    if (st->engine) dnnl_engine_destroy(st->engine);
    ct_free(ctx, st, sizeof *st);
}

onednn_state *ct_k_onednn_state(ct_ctx *ctx, int nt) {
    onednn_state *st = ctx->onednn;
    if (!st) {
        st = ct_alloc(ctx, sizeof *st);
        if (!st) return NULL;
        memset(st, 0, sizeof *st);
        if (dnnl_engine_create(&st->engine, dnnl_cpu, 0) != dnnl_success) {
            ct_free(ctx, st, sizeof *st);
            return NULL;
        }
        ctx->onednn = st;
        ctx->onednn_free = state_free;
    }
    if (nt > CT_ONEDNN_MAX_STREAMS) return NULL;
    while (st->n_streams < nt) {
        int i = st->n_streams;
        if (st->scratch_size) {
            st->scratch[i] = ct_alloc(ctx, st->scratch_size);
            if (!st->scratch[i]) return NULL;
        }
        if (dnnl_stream_create(&st->streams[i], st->engine, dnnl_stream_default_flags) !=
            dnnl_success) {
            ct_free(ctx, st->scratch[i], st->scratch_size);
            st->scratch[i] = NULL;
            return NULL;
        }
        st->n_streams++;
    }
    return st;
}

bool ct_k_onednn_reserve_scratch(ct_ctx *ctx, onednn_state *st, size_t bytes) {
    if (bytes <= st->scratch_size) return true;
    void *fresh[CT_ONEDNN_MAX_STREAMS] = {NULL};
    for (int i = 0; i < st->n_streams; i++) {
        fresh[i] = ct_alloc(ctx, bytes);
        if (!fresh[i]) {
            for (int j = 0; j < i; j++)
                ct_free(ctx, fresh[j], bytes);
            return false;
        }
    }
    for (int i = 0; i < st->n_streams; i++) {
        ct_free(ctx, st->scratch[i], st->scratch_size);
        st->scratch[i] = fresh[i];
    }
    st->scratch_size = bytes;
    return true;
}

bool ct_k_onednn_pd_create(dnnl_primitive_desc_t *pd,
                           const_dnnl_op_desc_t desc,
                           const_dnnl_primitive_attr_t attr,
                           dnnl_engine_t engine,
                           const_dnnl_primitive_desc_t hint) {
    int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    bool ok = dnnl_primitive_desc_create(pd, desc, attr, engine, hint) == dnnl_success;
    omp_set_num_threads(saved);
    if (!ok) *pd = NULL;
    return ok;
}

#endif /* _OPENMP */
