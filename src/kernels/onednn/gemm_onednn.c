/*
 * gemm_onednn.c - single-threaded GEMM tiles through oneDNN's matmul (brgemm kernels), which
 * reach 80-90% of this CPU's FMA peak where OpenBLAS reaches 60-70%.
 *
 * ct_k_gemm_blas cuts C into tiles that depend only on the shape and the machine and hands each
 * tile here. A plan (one matmul primitive, created as for one thread) is cached per tile
 * geometry in the context's oneDNN state; running it inside our OpenMP loop keeps oneDNN on the
 * calling thread, so a tile's result never depends on the thread count (oneDNN's own threading
 * would split K).
 *
 * bf16 plans (ct_k_gemm_bf16) read A and B as bf16 where the caller holds them (rounded once
 * per operand, not per tile) and multiply them with f32 accumulation into the f32 C.
 *
 * oneDNN's AMX matmul (the bf16 tile unit of Sapphire Rapids and later) takes only operands
 * whose rows are contiguous end to end: a tile of a larger matrix (a leading dimension above its
 * width) falls back to an AVX-512 kernel that runs several times slower. Where a bf16 tile is
 * strided and the same tile made dense goes to the AMX kernel, the plan copies the strided
 * operands into dense ones in the thread's scratch (and C back out), which costs a few percent
 * of the product. The choice is the plan's, made once per geometry: the bits still depend on the
 * shape and the machine only.
 */
#include "kernels/kernels.h"
#include "kernels/onednn/onednn_internal.h"

#ifdef _OPENMP

#include <omp.h>
#include <string.h>

#define PLAN_CAP 256 /* tile geometries kept per context */

typedef struct gemm_key {
    int64_t m, n, k, lda, ldb, ldc;
    int32_t trans_a, trans_b, bf16, bias;
    float alpha, beta;
} gemm_key;

typedef struct gemm_plan {
    gemm_key key;
    dnnl_primitive_t prim; /* NULL: oneDNN cannot do it (cached so we do not retry) */
    dnnl_memory_desc_t a_md, b_md, c_md, bias_md, scratch_md;
    size_t scratch_bytes; /* oneDNN's scratchpad and the dense copies below */
    /* operands copied dense before the product (C: in before it where beta is not 0, out
     * after it), at these byte offsets in the thread's scratch past oneDNN's scratchpad */
    bool pack_a, pack_b, pack_c;
    size_t at_a, at_b, at_c;
    struct gemm_plan *next;
} gemm_plan;

void ct_k_onednn_gemm_plans_free(ct_ctx *ctx, void *plans) {
    for (gemm_plan *p = plans; p;) {
        gemm_plan *next = p->next;
        if (p->prim) dnnl_primitive_destroy(p->prim);
        ct_free(ctx, p, sizeof *p);
        p = next;
    }
}

static size_t align64(size_t b) {
    return (b + 63) & ~(size_t)63;
}

/* The primitive descriptor of key k with the given leading dimensions, its operand
 * descriptors in p; NULL where oneDNN has no kernel for it. */
static dnnl_primitive_desc_t
plan_pd(onednn_state *st, const gemm_key *k, int64_t lda, int64_t ldb, int64_t ldc, gemm_plan *p) {
    dnnl_dims_t ad = {k->m, k->k}, bd = {k->k, k->n}, cd = {k->m, k->n};
    dnnl_dims_t as = {k->trans_a ? 1 : lda, k->trans_a ? lda : 1};
    dnnl_dims_t bs = {k->trans_b ? 1 : ldb, k->trans_b ? ldb : 1};
    dnnl_dims_t cs = {ldc, 1};
    dnnl_dims_t biasd = {1, k->n}, biass = {k->n, 1};
    dnnl_matmul_desc_t desc;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_data_type_t dt = k->bf16 ? dnnl_bf16 : dnnl_f32;
    bool ok =
        dnnl_memory_desc_init_by_strides(&p->a_md, 2, ad, dt, as) == dnnl_success &&
        dnnl_memory_desc_init_by_strides(&p->b_md, 2, bd, dt, bs) == dnnl_success &&
        dnnl_memory_desc_init_by_strides(&p->c_md, 2, cd, dnnl_f32, cs) == dnnl_success &&
        (!k->bias || dnnl_memory_desc_init_by_strides(&p->bias_md, 2, biasd, dnnl_f32, biass) ==
                         dnnl_success) &&
        dnnl_matmul_desc_init(&desc, &p->a_md, &p->b_md, k->bias ? &p->bias_md : NULL, &p->c_md) ==
            dnnl_success &&
        dnnl_primitive_attr_create(&attr) == dnnl_success &&
        dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) == dnnl_success;
    if (ok && k->alpha != 1.0f)
        ok = dnnl_primitive_attr_set_output_scales(attr, 1, 0, &k->alpha) == dnnl_success;
    if (ok && k->beta != 0.0f)
        ok = dnnl_post_ops_create(&po) == dnnl_success &&
             dnnl_post_ops_append_sum(po, k->beta) == dnnl_success &&
             dnnl_primitive_attr_set_post_ops(attr, po) == dnnl_success;
    if (ok && !ct_k_onednn_pd_create(&pd, &desc, attr, st->engine, NULL)) pd = NULL;
    if (po) dnnl_post_ops_destroy(po);
    if (attr) dnnl_primitive_attr_destroy(attr);
    return pd;
}

/* Whether pd runs on oneDNN's AMX kernels (its implementation's name says so). */
static bool runs_on_amx(const_dnnl_primitive_desc_t pd) {
    const char *impl = NULL;
    return dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success &&
           impl && strstr(impl, "amx") != NULL;
}

static void plan_build(onednn_state *st, gemm_plan *p) {
    const gemm_key *k = &p->key;
    dnnl_primitive_desc_t pd = plan_pd(st, k, k->lda, k->ldb, k->ldc, p);
    /* dense leading dimensions of the operands as stored (A [k, m] where transposed) */
    int64_t da = k->trans_a ? k->m : k->k, db = k->trans_b ? k->k : k->n, dc = k->n;
    unsigned isa = (unsigned)dnnl_get_effective_cpu_isa(), amx = dnnl_cpu_isa_avx512_core_amx;
    if (k->bf16 && (isa & amx) == amx && (k->lda != da || k->ldb != db || k->ldc != dc) &&
        (!pd || !runs_on_amx(pd))) {
        gemm_plan dense = *p;
        dnnl_primitive_desc_t dpd = plan_pd(st, k, da, db, dc, &dense);
        if (dpd && runs_on_amx(dpd)) {
            if (pd) dnnl_primitive_desc_destroy(pd);
            pd = dpd;
            *p = dense;
            p->pack_a = k->lda != da;
            p->pack_b = k->ldb != db;
            p->pack_c = k->ldc != dc;
        } else if (dpd) {
            dnnl_primitive_desc_destroy(dpd);
        }
    }
    bool ok = pd != NULL;
    if (ok) {
        /* brgemm packs B into a scratchpad: each thread gets its own (onednn_state); the dense
         * copies follow it */
        p->scratch_md = *dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
        size_t at = align64(dnnl_memory_desc_get_size(&p->scratch_md));
        p->at_a = at;
        at += p->pack_a ? align64((size_t)(k->m * k->k) * sizeof(uint16_t)) : 0;
        p->at_b = at;
        at += p->pack_b ? align64((size_t)(k->k * k->n) * sizeof(uint16_t)) : 0;
        p->at_c = at;
        at += p->pack_c ? align64((size_t)(k->m * k->n) * sizeof(float)) : 0;
        p->scratch_bytes = at;
        ok = dnnl_primitive_create(&p->prim, pd) == dnnl_success;
    }
    if (!ok && p->prim) {
        dnnl_primitive_destroy(p->prim);
        p->prim = NULL;
    }
    if (pd) dnnl_primitive_desc_destroy(pd);
}

static gemm_plan *plan_find(onednn_state *st, const gemm_key *key) {
    for (gemm_plan *p = st->gemm_plans; p; p = p->next)
        if (memcmp(&p->key, key, sizeof *key) == 0) return p;
    return NULL;
}

/* Bounded cache: past PLAN_CAP plans the oldest goes (a rebuilt plan computes the same bits).
 * Only called before inserting, so the plans a GEMM call just prepared stay. */
static void plan_evict(ct_ctx *ctx, onednn_state *st) {
    int count = 0;
    gemm_plan *last = NULL, *before_last = NULL;
    for (gemm_plan *p = st->gemm_plans; p; p = p->next) {
        count++;
        before_last = last;
        last = p;
    }
    if (count >= PLAN_CAP && before_last) {
        before_last->next = NULL;
        ct_k_onednn_gemm_plans_free(ctx, last);
    }
}

static gemm_key make_key(bool bf16,
                         bool bias,
                         bool ta,
                         bool tb,
                         int64_t m,
                         int64_t n,
                         int64_t k,
                         float alpha,
                         int64_t lda,
                         int64_t ldb,
                         float beta,
                         int64_t ldc) {
    gemm_key key;
    memset(&key, 0, sizeof key); /* padding too: keys are compared with memcmp */
    key.m = m;
    key.n = n;
    key.k = k;
    key.lda = lda;
    key.ldb = ldb;
    key.ldc = ldc;
    key.trans_a = ta;
    key.trans_b = tb;
    key.alpha = alpha;
    key.beta = beta;
    key.bf16 = bf16;
    key.bias = bias;
    return key;
}

bool ct_k_onednn_bf16_native(ct_ctx *ctx) {
    switch (ctx->bf16_kernels) {
    case CT_BF16_KERNELS_ONEDNN:
        return true;
    case CT_BF16_KERNELS_AUTO: {
        unsigned isa = (unsigned)dnnl_get_effective_cpu_isa(), bf16 = dnnl_cpu_isa_avx512_core_bf16;
        return (isa & bf16) == bf16; /* the ISA values are nested bit sets */
    }
    case CT_BF16_KERNELS_F32:
    case CT_BF16_KERNELS_COUNT:
        break;
    }
    return false;
}

int64_t ct_k_onednn_bf16_gemms(const ct_ctx *ctx) {
    const onednn_state *st = ctx->onednn;
    return st ? __atomic_load_n(&st->bf16_gemms, __ATOMIC_RELAXED) : 0;
}

int64_t ct_k_onednn_bias_gemms(const ct_ctx *ctx) {
    const onednn_state *st = ctx->onednn;
    return st ? __atomic_load_n(&st->bias_gemms, __ATOMIC_RELAXED) : 0;
}

int64_t ct_k_onednn_packed_gemms(const ct_ctx *ctx) {
    const onednn_state *st = ctx->onednn;
    return st ? __atomic_load_n(&st->packed_gemms, __ATOMIC_RELAXED) : 0;
}

int64_t ct_k_onednn_gemm_plans_built(const ct_ctx *ctx) {
    const onednn_state *st = ctx->onednn;
    return st ? st->gemm_plans_built : 0;
}

bool ct_k_onednn_gemm_prepare(ct_ctx *ctx,
                              int nt,
                              bool bf16,
                              bool bias,
                              bool ta,
                              bool tb,
                              int64_t m,
                              int64_t n,
                              int64_t k,
                              float alpha,
                              int64_t lda,
                              int64_t ldb,
                              float beta,
                              int64_t ldc) {
    onednn_state *st = ct_k_onednn_state(ctx, nt);
    if (!st || k == 0) return false;
    gemm_key key = make_key(bf16, bias, ta, tb, m, n, k, alpha, lda, ldb, beta, ldc);
    gemm_plan *p = plan_find(st, &key);
    if (!p) {
        plan_evict(ctx, st);
        p = ct_alloc(ctx, sizeof *p);
        if (!p) return false;
        memset(p, 0, sizeof *p);
        p->key = key;
        plan_build(st, p);
        st->gemm_plans_built++;
        p->next = st->gemm_plans;
        st->gemm_plans = p;
    }
    return p->prim != NULL && ct_k_onednn_reserve_scratch(ctx, st, p->scratch_bytes);
}

/* rows x cols elements of es bytes at stride ld copied dense into dst; returns dst. */
static const void *
copy_rows(void *dst, const void *src, int64_t rows, int64_t cols, int64_t ld, size_t es) {
    const char *s = src;
    char *d = dst;
    for (int64_t r = 0; r < rows; r++)
        memcpy(d + (size_t)(r * cols) * es, s + (size_t)(r * ld) * es, (size_t)cols * es);
    return dst;
}

bool ct_k_onednn_gemm_run(ct_ctx *ctx,
                          bool bf16,
                          bool ta,
                          bool tb,
                          int64_t m,
                          int64_t n,
                          int64_t k,
                          float alpha,
                          const void *a,
                          int64_t lda,
                          const void *b,
                          int64_t ldb,
                          float beta,
                          const float *bias,
                          float *c,
                          int64_t ldc) {
    onednn_state *st = ctx->onednn;
    gemm_key key = make_key(bf16, bias != NULL, ta, tb, m, n, k, alpha, lda, ldb, beta, ldc);
    gemm_plan *p = st ? plan_find(st, &key) : NULL;
    if (!p || !p->prim) return false;
    int tid = omp_get_thread_num();
    if (tid >= st->n_streams) return false;
    if (p->scratch_bytes > st->scratch_size) return false;
    char *scratch = st->scratch[tid];
    const gemm_key *kk = &p->key;
    float *cd = c; /* where the primitive writes C */
    if (p->pack_a) {
        a = copy_rows(scratch + p->at_a, a, kk->trans_a ? k : m, kk->trans_a ? m : k, lda,
                      sizeof(uint16_t));
    }
    if (p->pack_b) {
        b = copy_rows(scratch + p->at_b, b, kk->trans_b ? n : k, kk->trans_b ? k : n, ldb,
                      sizeof(uint16_t));
    }
    if (p->pack_c) {
        cd = (float *)(void *)(scratch + p->at_c);
        if (beta != 0.0f) (void)copy_rows(cd, c, m, n, ldc, sizeof(float));
    }
    dnnl_memory_t ma = NULL, mb = NULL, mc = NULL, ms = NULL, mbias = NULL;
    bool ok = dnnl_memory_create(&ma, &p->a_md, st->engine, (void *)(uintptr_t)a) == dnnl_success &&
              dnnl_memory_create(&mb, &p->b_md, st->engine, (void *)(uintptr_t)b) == dnnl_success &&
              dnnl_memory_create(&mc, &p->c_md, st->engine, cd) == dnnl_success &&
              dnnl_memory_create(&ms, &p->scratch_md, st->engine, scratch) == dnnl_success &&
              (!bias || dnnl_memory_create(&mbias, &p->bias_md, st->engine,
                                           (void *)(uintptr_t)bias) == dnnl_success);
    /* A failure here happens before any arithmetic (argument checks; the CPU stream's wait
     * is a no-op), so C is untouched and the caller's OpenBLAS fallback cannot add twice. */
    if (ok) {
        dnnl_exec_arg_t args[5] = {{DNNL_ARG_SRC, ma},
                                   {DNNL_ARG_WEIGHTS, mb},
                                   {DNNL_ARG_DST, mc},
                                   {DNNL_ARG_SCRATCHPAD, ms},
                                   {DNNL_ARG_BIAS, mbias}};
        ok =
            dnnl_primitive_execute(p->prim, st->streams[tid], bias ? 5 : 4, args) == dnnl_success &&
            dnnl_stream_wait(st->streams[tid]) == dnnl_success;
    }
    if (ok && p->pack_c) /* rows of n back to rows of ldc */
        for (int64_t r = 0; r < m; r++)
            memcpy(c + r * ldc, cd + r * n, (size_t)n * sizeof(float));
    if (ok && bf16) __atomic_fetch_add(&st->bf16_gemms, 1, __ATOMIC_RELAXED);
    if (ok && bias) __atomic_fetch_add(&st->bias_gemms, 1, __ATOMIC_RELAXED);
    if (ok && (p->pack_a || p->pack_b || p->pack_c))
        __atomic_fetch_add(&st->packed_gemms, 1, __ATOMIC_RELAXED);
    if (ma) dnnl_memory_destroy(ma);
    if (mb) dnnl_memory_destroy(mb);
    if (mc) dnnl_memory_destroy(mc);
    if (ms) dnnl_memory_destroy(ms);
    if (mbias) dnnl_memory_destroy(mbias);
    return ok;
}

#else

bool ct_k_onednn_bf16_native(ct_ctx *ctx) {
    (void)ctx;
    return false; /* ct_k_gemm_bf16 runs the f32 kernels on the rounded values */
}

int64_t ct_k_onednn_bf16_gemms(const ct_ctx *ctx) {
    (void)ctx;
    return 0;
}

int64_t ct_k_onednn_bias_gemms(const ct_ctx *ctx) {
    (void)ctx;
    return 0;
}

int64_t ct_k_onednn_packed_gemms(const ct_ctx *ctx) {
    (void)ctx;
    return 0;
}

int64_t ct_k_onednn_gemm_plans_built(const ct_ctx *ctx) {
    (void)ctx;
    return 0;
}

bool ct_k_onednn_gemm_prepare(ct_ctx *ctx,
                              int nt,
                              bool bf16,
                              bool bias,
                              bool ta,
                              bool tb,
                              int64_t m,
                              int64_t n,
                              int64_t k,
                              float alpha,
                              int64_t lda,
                              int64_t ldb,
                              float beta,
                              int64_t ldc) {
    (void)ctx, (void)nt, (void)bf16, (void)bias, (void)ta, (void)tb, (void)m, (void)n, (void)k,
        (void)alpha, (void)lda;
    (void)ldb, (void)beta, (void)ldc;
    return false; /* without OpenMP we cannot pin oneDNN to one thread: OpenBLAS does it all */
}

bool ct_k_onednn_gemm_run(ct_ctx *ctx,
                          bool bf16,
                          bool ta,
                          bool tb,
                          int64_t m,
                          int64_t n,
                          int64_t k,
                          float alpha,
                          const void *a,
                          int64_t lda,
                          const void *b,
                          int64_t ldb,
                          float beta,
                          const float *bias,
                          float *c,
                          int64_t ldc) {
    (void)ctx, (void)bf16, (void)bias, (void)ta, (void)tb, (void)m, (void)n, (void)k, (void)alpha,
        (void)a, (void)lda;
    (void)b, (void)ldb, (void)beta, (void)c, (void)ldc;
    return false;
}

#endif /* _OPENMP */
