/*
 * conv2d_onednn.c - 2-D convolution through oneDNN's JIT kernels, deterministic for any thread
 * count.
 *
 * oneDNN is fastest on its blocked layouts (nChw16c), so each call reorders the NCHW chunk in,
 * runs the primitive and reorders the result out; PyTorch's mkldnn path does the same. The
 * batch is cut into at most CHUNKS chunks whose size depends only on the shape; each chunk runs
 * on one thread, with primitives created for one thread (their blocking and reduction order
 * never change) and executed inside our OpenMP region (oneDNN then stays on the calling thread).
 * Weight and bias gradients of each chunk go to their own slot and are summed in chunk order.
 * So results do not depend on the thread count, which oneDNN's own threading would break.
 *
 * Ownership: plans (one per geometry and chunk size) are cached in the context's oneDNN state
 * and freed with the context. Scratch memory is the caller's (the graph arena): this file never
 * allocates per call. Any oneDNN failure makes the functions return false and the op falls back
 * to im2col + GEMM.
 */
#include "kernels/cnn_kernels.h"

#ifndef _OPENMP

/* oneDNN here runs on OpenMP; without OpenMP we cannot pin it to one thread per chunk, so the
 * op keeps to im2col + GEMM. */
bool ct_k_conv2d_onednn_scratch(ct_ctx *ctx,
                                const ct_k_conv2d_geom *s,
                                bool has_bias,
                                bool bf16,
                                bool backward,
                                int nt,
                                size_t *bytes) {
    (void)ctx, (void)s, (void)has_bias, (void)bf16, (void)backward, (void)nt;
    *bytes = 0;
    return false;
}

int64_t ct_k_onednn_bf16_convs(const ct_ctx *ctx) {
    (void)ctx;
    return 0;
}

int ct_k_conv2d_onednn_fwd(ct_ctx *ctx,
                           const ct_k_conv2d_geom *s,
                           bool bf16,
                           bool relu,
                           const float *x,
                           const float *w,
                           const float *b,
                           float *y,
                           void *scratch,
                           int nt) {
    (void)ctx, (void)s, (void)bf16, (void)relu, (void)x, (void)w, (void)b, (void)y, (void)scratch;
    (void)nt;
    return 0;
}

int ct_k_conv2d_onednn_bwd(ct_ctx *ctx,
                           const ct_k_conv2d_geom *s,
                           bool has_bias,
                           bool bf16,
                           const float *x,
                           const float *w,
                           const float *dy,
                           float *dx,
                           float *dw,
                           float *db,
                           void *scratch,
                           int nt) {
    (void)ctx, (void)s, (void)has_bias, (void)bf16, (void)x, (void)w, (void)dy, (void)dx, (void)dw;
    (void)db, (void)scratch, (void)nt;
    return 0;
}

bool ct_k_conv2d_pool_onednn_scratch(ct_ctx *ctx,
                                     const ct_k_conv2d_geom *s,
                                     bool has_bias,
                                     bool bf16,
                                     bool backward,
                                     int nt,
                                     size_t *bytes) {
    (void)ctx, (void)s, (void)has_bias, (void)bf16, (void)backward, (void)nt;
    *bytes = 0;
    return false;
}

size_t ct_k_conv2d_pool_onednn_keep_bytes(
    ct_ctx *ctx, const ct_k_conv2d_geom *s, bool has_bias, bool bf16, int nt) {
    (void)ctx, (void)s, (void)has_bias, (void)bf16, (void)nt;
    return 0;
}

int ct_k_conv2d_relu_pool_onednn_fwd(ct_ctx *ctx,
                                     const ct_k_conv2d_geom *s,
                                     bool bf16,
                                     const float *x,
                                     const float *w,
                                     const float *b,
                                     float *y,
                                     uint8_t *code,
                                     void *keep,
                                     void *scratch,
                                     int nt) {
    (void)ctx, (void)s, (void)bf16, (void)x, (void)w, (void)b, (void)y, (void)code, (void)keep;
    (void)scratch, (void)nt;
    return 0;
}

int ct_k_conv2d_relu_pool_onednn_bwd(ct_ctx *ctx,
                                     const ct_k_conv2d_geom *s,
                                     bool has_bias,
                                     bool bf16,
                                     const float *x,
                                     const float *w,
                                     const float *y,
                                     const uint8_t *code,
                                     const void *keep,
                                     const float *dy,
                                     float *dx,
                                     bool dx_fresh,
                                     float *dw,
                                     float *db,
                                     void *scratch,
                                     int nt) {
    (void)ctx, (void)s, (void)has_bias, (void)bf16, (void)x, (void)w, (void)y, (void)code;
    (void)keep, (void)dy, (void)dx, (void)dx_fresh, (void)dw, (void)db, (void)scratch, (void)nt;
    return 0;
}

#else

#include <omp.h>
#include <string.h>

#include <dnnl.h>

#include "kernels/onednn/onednn_internal.h"

#define CHUNKS   8
#define PLAN_CAP 64 /* geometries kept per context */

typedef struct conv_plan {
    ct_k_conv2d_geom key; /* key.n is the chunk size */
    bool has_bias;
    bool bf16; /* bf16 src/weights/diff_dst; dst, diff_src, diff_weights and diff_bias f32 */
    bool ok_fwd, ok_bwd;
    dnnl_primitive_t fwd, bwd_data, bwd_w;
    /* the primitives' scratchpads (bf16 kernels keep transposed copies there), run on the
     * thread's own scratchpad in the oneDNN state; f32 plans take only kernels without one */
    dnnl_memory_desc_t sp_f, sp_b, sp_w;
    size_t sp_bytes; /* the largest of the three */
    /* plain (PyTorch) descriptors */
    dnnl_memory_desc_t x_md, w_md, b_md, y_md;
    /* the layouts the primitives chose */
    dnnl_memory_desc_t src_f, wei_f, dst_f;   /* forward */
    dnnl_memory_desc_t dsrc_b, wei_b, ddst_b; /* backward data */
    dnnl_memory_desc_t src_w, dwei_w, ddst_w; /* backward weights */
    /* reorders between them, NULL where the layouts agree */
    dnnl_primitive_t r_x_f, r_y_f, r_w_f;   /* x -> src_f, dst_f -> y, w -> wei_f */
    dnnl_primitive_t r_w_b, r_dy_b, r_dx_b; /* w -> wei_b, dy -> ddst_b, dx += dsrc_b */
    dnnl_primitive_t r_x_w, r_dy_w, r_dw_w; /* x -> src_w, dy -> ddst_w, dwei_w -> dw */
    /* the fused 2x2 max pool's dy, made in the forward's dst_f layout: dst_f -> ddst_b,
     * dst_f -> ddst_w (NULL where the layouts agree) */
    dnnl_primitive_t r_blk_b, r_blk_w;
    bool ok_pool_fwd, ok_pool_bwd; /* dst_f is f32 blocked by channels only (or plain) */
    /* a bf16 plan whose backward primitives both take dy in dst_f's layout as bf16: the fused
     * pool's routing writes it there rounded (ct_k_pool2x2_scatter_blocked_bf16), and
     * r_blk_b and r_blk_w are not run */
    bool bf16_scatter;
    size_t per_thread_fwd, per_thread_bwd;           /* scratch bytes per thread */
    size_t shared_fwd, shared_bwd;                   /* scratch bytes shared by the threads */
    size_t per_thread_pool_fwd, per_thread_pool_bwd; /* the same with the fused pool */
    struct conv_plan *next;
} conv_plan;

void ct_k_onednn_conv_plans_free(ct_ctx *ctx, void *plans) {
    for (conv_plan *c = plans; c;) {
        conv_plan *next = c->next;
        dnnl_primitive_t prims[] = {c->fwd,    c->bwd_data, c->bwd_w,   c->r_x_f,  c->r_y_f,
                                    c->r_w_f,  c->r_w_b,    c->r_dy_b,  c->r_dx_b, c->r_x_w,
                                    c->r_dy_w, c->r_dw_w,   c->r_blk_b, c->r_blk_w};
        for (size_t i = 0; i < sizeof prims / sizeof prims[0]; i++)
            if (prims[i]) dnnl_primitive_destroy(prims[i]);
        ct_free(ctx, c, sizeof *c);
        c = next;
    }
}

static int64_t chunk_size(int64_t n) {
    return (n + CHUNKS - 1) / CHUNKS;
}

static size_t align64(size_t b) {
    return (b + 63) & ~(size_t)63;
}

static size_t md_bytes(const dnnl_memory_desc_t *md) {
    return align64(dnnl_memory_desc_get_size(md));
}

static bool same(const dnnl_memory_desc_t *a, const dnnl_memory_desc_t *b) {
    return dnnl_memory_desc_equal(a, b) != 0;
}

/* The primitive's chosen layout for `what`, copied out of its descriptor. */
static dnnl_memory_desc_t query(const_dnnl_primitive_desc_t pd, dnnl_query_t what) {
    return *dnnl_primitive_desc_query_md(pd, what, 0);
}

/* The addressing of an f32 4-D layout blocked by channels only (nChw16c, nChw8c), channels
 * last (nhwc: the layout oneDNN's AMX convolutions choose), or plain (nchw); false for any
 * other. Channels last is seen as 16-channel blocks whose next block starts 16 elements on
 * (sc 16): the pool kernels then read 16 contiguous channels a vector, as in nChw16c; with a
 * channel count that is not a multiple of 16 it is one block of all the channels (at most 64)
 * or, wider, a channel at a time. */
bool ct_k_onednn_blocked_view(const dnnl_memory_desc_t *md, ct_k_blocked *v) {
    const dnnl_blocking_desc_t *b = &md->format_desc.blocking;
    if (md->ndims != 4 || md->format_kind != dnnl_blocked || md->data_type != dnnl_f32 ||
        md->offset0 != 0)
        return false;
    v->sn = b->strides[0];
    v->sc = b->strides[1];
    v->sh = b->strides[2];
    v->sw = b->strides[3];
    int64_t c = md->dims[1];
    if (b->inner_nblks == 0 && v->sc == 1 && c > 1 && md->padded_dims[1] == c) {
        v->blk = c % 16 == 0 ? 16 : c <= 64 ? c : 1;
        v->sc = v->blk;
    } else if (b->inner_nblks == 0) {
        v->blk = 1;
    } else if (b->inner_nblks == 1 && b->inner_idxs[0] == 1) {
        v->blk = b->inner_blks[0];
    } else {
        return false;
    }
    /* no wider block is tested (tests/unit/test_pool_blocked.c) */
    return v->blk >= 1 && v->blk <= 64;
}

static bool geom_equal(const ct_k_conv2d_geom *a, const ct_k_conv2d_geom *b) {
    return memcmp(a, b, sizeof *a) == 0;
}

/* Builds the forward and backward primitives of one chunk geometry, for one thread. */
/* A reorder primitive from smd to dmd (dst += src when accumulate); *out stays NULL when the
 * layouts agree and no accumulation is asked for. */
static bool make_reorder(onednn_state *st,
                         const dnnl_memory_desc_t *smd,
                         const dnnl_memory_desc_t *dmd,
                         bool accumulate,
                         dnnl_primitive_t *out) {
    *out = NULL;
    if (!accumulate && same(smd, dmd)) return true;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    dnnl_primitive_desc_t pd = NULL;
    /* Reorders run concurrently on several workers: that is allowed only for primitives that
     * keep no library-owned scratchpad, so ask for a user one and accept only size zero. */
    bool ok =
        dnnl_primitive_attr_create(&attr) == dnnl_success &&
        dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) == dnnl_success;
    if (ok && accumulate)
        ok = dnnl_post_ops_create(&po) == dnnl_success &&
             dnnl_post_ops_append_sum(po, 1.0f) == dnnl_success &&
             dnnl_primitive_attr_set_post_ops(attr, po) == dnnl_success;
    int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    ok = ok && dnnl_reorder_primitive_desc_create(&pd, smd, st->engine, dmd, st->engine, attr) ==
                   dnnl_success;
    omp_set_num_threads(saved);
    ok = ok &&
         dnnl_memory_desc_get_size(dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0)) ==
             0 &&
         dnnl_primitive_create(out, pd) == dnnl_success;
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (po) dnnl_post_ops_destroy(po);
    if (attr) dnnl_primitive_attr_destroy(attr);
    return ok;
}

/* Whether a primitive with this scratchpad can run in the plan; records the largest size. */
static bool scratchpad_ok(conv_plan *c, const dnnl_memory_desc_t *sp) {
    size_t bytes = dnnl_memory_desc_get_size(sp);
    /* f32 plans keep to the kernels they always had (none of them needs one) */
    if (bytes && !c->bf16) return false;
    if (bytes > c->sp_bytes) c->sp_bytes = bytes;
    return true;
}

static bool plan_build(onednn_state *st, conv_plan *c) {
    const ct_k_conv2d_geom *s = &c->key;
    int64_t grp = s->groups;
    dnnl_dims_t xd = {s->n, s->c, s->h, s->w}, yd = {s->n, s->o, s->oh, s->ow};
    dnnl_dims_t bd = {s->o};
    dnnl_dims_t wd5 = {grp, s->o / grp, s->c / grp, s->kh, s->kw};
    dnnl_dims_t wd4 = {s->o, s->c, s->kh, s->kw};
    dnnl_dims_t strides = {s->stride[0], s->stride[1]};
    dnnl_dims_t dil = {s->dilation[0] - 1, s->dilation[1] - 1};
    dnnl_dims_t pl = {s->padding[0], s->padding[1]};
    dnnl_dims_t pr = {
        (s->oh - 1) * s->stride[0] + (s->kh - 1) * s->dilation[0] + 1 - s->h - s->padding[0],
        (s->ow - 1) * s->stride[1] + (s->kw - 1) * s->dilation[1] + 1 - s->w - s->padding[1]};
    bool ok = dnnl_memory_desc_init_by_tag(&c->x_md, 4, xd, dnnl_f32, dnnl_nchw) == dnnl_success &&
              dnnl_memory_desc_init_by_tag(&c->y_md, 4, yd, dnnl_f32, dnnl_nchw) == dnnl_success &&
              dnnl_memory_desc_init_by_tag(&c->b_md, 1, bd, dnnl_f32, dnnl_x) == dnnl_success &&
              (grp > 1 ? dnnl_memory_desc_init_by_tag(&c->w_md, 5, wd5, dnnl_f32, dnnl_goihw)
                       : dnnl_memory_desc_init_by_tag(&c->w_md, 4, wd4, dnnl_f32, dnnl_oihw)) ==
                  dnnl_success;
    if (!ok) return false;
    /* The operands (lo) are bf16 in a bf16 plan, the results always f32: the primitives
     * accumulate in f32 and nothing is rounded after the products. */
    dnnl_data_type_t lo = c->bf16 ? dnnl_bf16 : dnnl_f32;
    dnnl_memory_desc_t x_any, y_any, w_any, x_lo, y_lo, w_lo;
    if (dnnl_memory_desc_init_by_tag(&x_any, 4, xd, dnnl_f32, dnnl_format_tag_any) ||
        dnnl_memory_desc_init_by_tag(&y_any, 4, yd, dnnl_f32, dnnl_format_tag_any) ||
        (grp > 1 ? dnnl_memory_desc_init_by_tag(&w_any, 5, wd5, dnnl_f32, dnnl_format_tag_any)
                 : dnnl_memory_desc_init_by_tag(&w_any, 4, wd4, dnnl_f32, dnnl_format_tag_any)) ||
        dnnl_memory_desc_init_by_tag(&x_lo, 4, xd, lo, dnnl_format_tag_any) ||
        dnnl_memory_desc_init_by_tag(&y_lo, 4, yd, lo, dnnl_format_tag_any) ||
        (grp > 1 ? dnnl_memory_desc_init_by_tag(&w_lo, 5, wd5, lo, dnnl_format_tag_any)
                 : dnnl_memory_desc_init_by_tag(&w_lo, 4, wd4, lo, dnnl_format_tag_any)))
        return false;

    /* Everything is created as for one thread (ct_k_onednn_pd_create): the kernels' blocking
     * and reduction order are then fixed, and they run on whichever thread executes them. */
    dnnl_primitive_attr_t attr = NULL;
    dnnl_primitive_desc_t fpd = NULL, bdpd = NULL, bwpd = NULL;
    dnnl_convolution_desc_t fd, bdd, bwd;
    ok = dnnl_primitive_attr_create(&attr) == dnnl_success &&
         dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) == dnnl_success &&
         dnnl_dilated_convolution_forward_desc_init(
             &fd, dnnl_forward_training, dnnl_convolution_direct, &x_lo, &w_lo,
             c->has_bias ? &c->b_md : NULL, &y_any, strides, dil, pl, pr) == dnnl_success &&
         ct_k_onednn_pd_create(&fpd, &fd, attr, st->engine, NULL);
    if (ok) {
        c->src_f = query(fpd, dnnl_query_src_md);
        c->wei_f = query(fpd, dnnl_query_weights_md);
        c->dst_f = query(fpd, dnnl_query_dst_md);
        c->sp_f = query(fpd, dnnl_query_scratchpad_md);
        ok = scratchpad_ok(c, &c->sp_f) && dnnl_primitive_create(&c->fwd, fpd) == dnnl_success;
    }
    c->ok_fwd = ok;
    bool okb = ok &&
               dnnl_dilated_convolution_backward_data_desc_init(&bdd, dnnl_convolution_direct,
                                                                &x_any, &w_lo, &y_lo, strides, dil,
                                                                pl, pr) == dnnl_success &&
               ct_k_onednn_pd_create(&bdpd, &bdd, attr, st->engine, fpd) &&
               dnnl_dilated_convolution_backward_weights_desc_init(
                   &bwd, dnnl_convolution_direct, &x_lo, &w_any, &c->b_md, &y_lo, strides, dil, pl,
                   pr) == dnnl_success &&
               ct_k_onednn_pd_create(&bwpd, &bwd, attr, st->engine, fpd);
    if (okb) {
        c->dsrc_b = query(bdpd, dnnl_query_diff_src_md);
        c->wei_b = query(bdpd, dnnl_query_weights_md);
        c->ddst_b = query(bdpd, dnnl_query_diff_dst_md);
        c->src_w = query(bwpd, dnnl_query_src_md);
        c->dwei_w = query(bwpd, dnnl_query_diff_weights_md);
        c->ddst_w = query(bwpd, dnnl_query_diff_dst_md);
        c->sp_b = query(bdpd, dnnl_query_scratchpad_md);
        c->sp_w = query(bwpd, dnnl_query_scratchpad_md);
        okb = scratchpad_ok(c, &c->sp_b) && scratchpad_ok(c, &c->sp_w) &&
              dnnl_primitive_create(&c->bwd_data, bdpd) == dnnl_success &&
              dnnl_primitive_create(&c->bwd_w, bwpd) == dnnl_success;
    }
    okb = okb && make_reorder(st, &c->w_md, &c->wei_b, false, &c->r_w_b) &&
          make_reorder(st, &c->y_md, &c->ddst_b, false, &c->r_dy_b) &&
          make_reorder(st, &c->dsrc_b, &c->x_md, true, &c->r_dx_b) &&
          make_reorder(st, &c->x_md, &c->src_w, false, &c->r_x_w) &&
          make_reorder(st, &c->y_md, &c->ddst_w, false, &c->r_dy_w) &&
          make_reorder(st, &c->dwei_w, &c->w_md, false, &c->r_dw_w);
    c->ok_bwd = okb;
    c->ok_pool_bwd = okb && make_reorder(st, &c->dst_f, &c->ddst_b, false, &c->r_blk_b) &&
                     make_reorder(st, &c->dst_f, &c->ddst_w, false, &c->r_blk_w);
    c->ok_fwd = c->ok_fwd && make_reorder(st, &c->x_md, &c->src_f, false, &c->r_x_f) &&
                make_reorder(st, &c->dst_f, &c->y_md, false, &c->r_y_f) &&
                make_reorder(st, &c->w_md, &c->wei_f, false, &c->r_w_f);
    if (fpd) dnnl_primitive_desc_destroy(fpd);
    if (bdpd) dnnl_primitive_desc_destroy(bdpd);
    if (bwpd) dnnl_primitive_desc_destroy(bwpd);
    if (attr) dnnl_primitive_attr_destroy(attr);
    if (!c->ok_fwd) return false;

    /* scratch: a layout that differs from the plain one needs its own buffer */
    c->shared_fwd = same(&c->wei_f, &c->w_md) ? 0 : md_bytes(&c->wei_f);
    c->per_thread_fwd = (same(&c->src_f, &c->x_md) ? 0 : md_bytes(&c->src_f)) +
                        (same(&c->dst_f, &c->y_md) ? 0 : md_bytes(&c->dst_f));
    if (c->ok_bwd) {
        c->shared_bwd = same(&c->wei_b, &c->w_md) ? 0 : md_bytes(&c->wei_b);
        c->per_thread_bwd = md_bytes(&c->dsrc_b) + (c->r_dw_w ? md_bytes(&c->dwei_w) : 0) +
                            (same(&c->ddst_b, &c->y_md) ? 0 : md_bytes(&c->ddst_b)) +
                            (same(&c->ddst_w, &c->y_md) ? 0 : md_bytes(&c->ddst_w)) +
                            (same(&c->src_w, &c->x_md) ? 0 : md_bytes(&c->src_w));
    }
    ct_k_blocked v = {1, 0, 0, 0, 0}; /* ct_k_onednn_blocked_view fills it where it succeeds */
    c->ok_pool_fwd = ct_k_onednn_blocked_view(&c->dst_f, &v);
    c->ok_pool_bwd = c->ok_pool_bwd && c->ok_pool_fwd;
    /* the rounding is the CPU's instruction, and oneDNN's reorders use the same one only where
     * its ISA has it (not where it is capped below, and emulates) */
    unsigned isa = (unsigned)dnnl_get_effective_cpu_isa(), isa_bf16 = dnnl_cpu_isa_avx512_core_bf16;
    if (c->ok_pool_bwd && c->bf16 && v.blk % 16 == 0 && (isa & isa_bf16) == isa_bf16 &&
        ct_k_pool_blocked_has_bf16()) {
        dnnl_memory_desc_t t = c->dst_f;
        t.data_type = dnnl_bf16;
        c->bf16_scatter = same(&t, &c->ddst_b) && same(&t, &c->ddst_w);
    }
    c->per_thread_pool_fwd =
        (same(&c->src_f, &c->x_md) ? 0 : md_bytes(&c->src_f)) + md_bytes(&c->dst_f);
    if (c->ok_pool_bwd)
        c->per_thread_pool_bwd = md_bytes(&c->dsrc_b) + (c->r_dw_w ? md_bytes(&c->dwei_w) : 0) +
                                 md_bytes(&c->dst_f) +
                                 (c->r_blk_b && !c->bf16_scatter ? md_bytes(&c->ddst_b) : 0) +
                                 (c->r_blk_w && !c->bf16_scatter ? md_bytes(&c->ddst_w) : 0) +
                                 (same(&c->src_w, &c->x_md) ? 0 : md_bytes(&c->src_w));
    return true;
}

static conv_plan *plan_get(ct_ctx *ctx,
                           onednn_state *st,
                           const ct_k_conv2d_geom *s,
                           int64_t nb,
                           bool has_bias,
                           bool bf16) {
    ct_k_conv2d_geom key = *s;
    key.n = nb;
    int count = 0;
    conv_plan *last = NULL, *before_last = NULL;
    for (conv_plan *c = st->conv_plans; c; c = c->next) {
        if (c->has_bias == has_bias && c->bf16 == bf16 && geom_equal(&c->key, &key)) {
            if (last) { /* to the front: the plans a call holds are never the oldest, so the
                           eviction below cannot free one the caller still uses */
                last->next = c->next;
                c->next = st->conv_plans;
                st->conv_plans = c;
            }
            return c->ok_fwd ? c : NULL;
        }
        count++;
        before_last = last;
        last = c;
    }
    if (count >= PLAN_CAP && before_last) {
        /* bounded cache: drop the oldest plan (a rebuilt plan computes the same bits) */
        before_last->next = NULL;
        ct_k_onednn_conv_plans_free(ctx, last);
    }
    conv_plan *c = ct_alloc(ctx, sizeof *c);
    if (!c) return NULL;
    memset(c, 0, sizeof *c);
    c->key = key;
    c->has_bias = has_bias;
    c->bf16 = bf16;
    plan_build(st, c); /* a failed plan is cached too, so we do not retry every step */
    c->next = st->conv_plans;
    st->conv_plans = c;
    return c->ok_fwd ? c : NULL;
}

/* Executes prim (a primitive or a reorder) on memory made from (md, ptr) pairs. */
static bool run(onednn_state *st,
                dnnl_stream_t stream,
                dnnl_primitive_t prim,
                int n,
                const int *arg_ids,
                const dnnl_memory_desc_t *const *mds,
                void *const *ptrs) {
    dnnl_memory_t mem[6] = {NULL};
    dnnl_exec_arg_t args[6];
    bool ok = n <= 6;
    for (int i = 0; ok && i < n; i++) {
        ok = dnnl_memory_create(&mem[i], mds[i], st->engine, ptrs[i]) == dnnl_success;
        args[i].arg = arg_ids[i];
        args[i].memory = mem[i];
    }
    ok = ok && dnnl_primitive_execute(prim, stream, n, args) == dnnl_success &&
         dnnl_stream_wait(stream) == dnnl_success;
    for (int i = 0; i < n; i++)
        if (mem[i]) dnnl_memory_destroy(mem[i]);
    return ok;
}

static bool run_reorder(onednn_state *st,
                        dnnl_stream_t stream,
                        dnnl_primitive_t prim,
                        const dnnl_memory_desc_t *smd,
                        const void *src,
                        const dnnl_memory_desc_t *dmd,
                        void *dst) {
    const int ids[2] = {DNNL_ARG_FROM, DNNL_ARG_TO};
    const dnnl_memory_desc_t *mds[2] = {smd, dmd};
    void *ptrs[2] = {(void *)(uintptr_t)src, dst};
    return run(st, stream, prim, 2, ids, mds, ptrs);
}

/* A reorder outside our parallel regions runs on oneDNN's own threads: give it ours. */
static bool weight_reorder(onednn_state *st,
                           int nt,
                           dnnl_primitive_t prim,
                           const dnnl_memory_desc_t *smd,
                           const void *src,
                           const dnnl_memory_desc_t *dmd,
                           void *dst) {
    int saved = ct_omp_swap_threads(nt);
    bool ok = run_reorder(st, st->streams[0], prim, smd, src, dmd, dst);
    ct_omp_swap_threads(saved);
    return ok;
}

/* Whether two plans (of different batch sizes) chose the same layout kinds: the memory
 * format tags of every tensor, compared through a descriptor of the other plan's batch. */
static bool same_format(const dnnl_memory_desc_t *a, const dnnl_memory_desc_t *b) {
    dnnl_memory_desc_t t = *a;
    t.dims[0] = b->dims[0];
    t.padded_dims[0] = b->padded_dims[0];
    return dnnl_memory_desc_equal(&t, b) != 0;
}

static bool same_layouts(const conv_plan *a, const conv_plan *b, bool backward) {
    bool ok = same_format(&a->src_f, &b->src_f) && same_format(&a->dst_f, &b->dst_f) &&
              dnnl_memory_desc_equal(&a->wei_f, &b->wei_f);
    if (ok && backward)
        ok = same_format(&a->dsrc_b, &b->dsrc_b) && same_format(&a->ddst_b, &b->ddst_b) &&
             same_format(&a->src_w, &b->src_w) && same_format(&a->ddst_w, &b->ddst_w) &&
             dnnl_memory_desc_equal(&a->wei_b, &b->wei_b) &&
             dnnl_memory_desc_equal(&a->dwei_w, &b->dwei_w);
    return ok;
}

/* Scratch is carved in this order; each piece 64-byte aligned. */
static char *take(char **cursor, size_t bytes) {
    char *p = *cursor;
    *cursor += bytes;
    return p;
}

/* Runs a convolution primitive on n (md, ptr) arguments (arrays with room for one more) and,
 * when the plan's kernels need one, the thread's scratchpad (ct_k_conv2d_onednn_scratch
 * reserved it for every plan). */
static bool run_conv(onednn_state *st,
                     int tid,
                     dnnl_primitive_t prim,
                     const dnnl_memory_desc_t *sp,
                     int n,
                     int *ids,
                     const dnnl_memory_desc_t **mds,
                     void **ptrs) {
    if (dnnl_memory_desc_get_size(sp) > 0) {
        ids[n] = DNNL_ARG_SCRATCHPAD;
        mds[n] = sp;
        ptrs[n] = st->scratch[tid];
        n++;
    }
    return run(st, st->streams[tid], prim, n, ids, mds, ptrs);
}

/* Whether a plan can run the fused ReLU and 2x2 max pool (pool) or the plain convolution. */
static bool plan_ok(const conv_plan *c, bool backward, bool pool) {
    if (!c || (backward && !c->ok_bwd)) return false;
    return !pool || (backward ? c->ok_pool_bwd : c->ok_pool_fwd);
}

static bool scratch_bytes(ct_ctx *ctx,
                          const ct_k_conv2d_geom *s,
                          bool has_bias,
                          bool bf16,
                          bool backward,
                          bool pool,
                          int nt,
                          size_t *bytes) {
    *bytes = 0;
    onednn_state *st = ct_k_onednn_state(ctx, nt);
    if (!st || s->n == 0) return false;
    int64_t nb = chunk_size(s->n), n_chunks = (s->n + nb - 1) / nb;
    conv_plan *c = plan_get(ctx, st, s, nb, has_bias, bf16);
    if (!plan_ok(c, backward, pool)) return false;
    size_t sp_bytes = c->sp_bytes;
    if (s->n % nb) {
        /* The tail chunk needs its own plan. Scratch is carved and weights are reordered with
         * the main plan's layouts, so the tail must have chosen the same ones (the batch size
         * does not change them in oneDNN 2.6; if it ever did, we keep to im2col). */
        conv_plan *t = plan_get(ctx, st, s, s->n % nb, has_bias, bf16);
        if (!plan_ok(t, backward, pool) || !same_layouts(t, c, backward) ||
            t->bf16_scatter != c->bf16_scatter)
            return false;
        if (t->sp_bytes > sp_bytes) sp_bytes = t->sp_bytes;
    }
    if (!ct_k_onednn_reserve_scratch(ctx, st, sp_bytes)) return false;
    if (!backward) {
        *bytes = c->shared_fwd + (size_t)nt * (pool ? c->per_thread_pool_fwd : c->per_thread_fwd);
    } else {
        size_t wbytes = align64((size_t)(s->o * (s->c / s->groups) * s->kh * s->kw) * 4);
        size_t bbytes = align64((size_t)s->o * 4);
        *bytes = c->shared_bwd + (size_t)n_chunks * (wbytes + bbytes) +
                 (size_t)nt * (pool ? c->per_thread_pool_bwd : c->per_thread_bwd);
    }
    return true;
}

bool ct_k_conv2d_onednn_scratch(ct_ctx *ctx,
                                const ct_k_conv2d_geom *s,
                                bool has_bias,
                                bool bf16,
                                bool backward,
                                int nt,
                                size_t *bytes) {
    return scratch_bytes(ctx, s, has_bias, bf16, backward, false, nt, bytes);
}

bool ct_k_conv2d_pool_onednn_scratch(ct_ctx *ctx,
                                     const ct_k_conv2d_geom *s,
                                     bool has_bias,
                                     bool bf16,
                                     bool backward,
                                     int nt,
                                     size_t *bytes) {
    return s->oh >= 2 && s->ow >= 2 &&
           scratch_bytes(ctx, s, has_bias, bf16, backward, true, nt, bytes);
}

/* Whether the forward's converted x can serve the backward-weights pass: both convert x
 * (to a blocked or bf16 layout) and into the same one. */
static bool x_keepable(const conv_plan *c) {
    return c->r_x_f && c->r_x_w && same(&c->src_f, &c->src_w);
}

size_t ct_k_conv2d_pool_onednn_keep_bytes(
    ct_ctx *ctx, const ct_k_conv2d_geom *s, bool has_bias, bool bf16, int nt) {
    onednn_state *st = ct_k_onednn_state(ctx, nt);
    if (!st || s->n == 0) return 0;
    int64_t nb = chunk_size(s->n), n_chunks = (s->n + nb - 1) / nb;
    conv_plan *c = plan_get(ctx, st, s, nb, has_bias, bf16);
    if (!plan_ok(c, true, true) || !x_keepable(c)) return 0;
    if (s->n % nb) {
        conv_plan *t = plan_get(ctx, st, s, s->n % nb, has_bias, bf16);
        if (!plan_ok(t, true, true) || !x_keepable(t)) return 0;
    }
    return (size_t)n_chunks * md_bytes(&c->src_f); /* chunk i at i times the main chunk's */
}

int64_t ct_k_onednn_bf16_convs(const ct_ctx *ctx) {
    const onednn_state *st = ctx->onednn;
    return st ? __atomic_load_n(&st->bf16_convs, __ATOMIC_RELAXED) : 0;
}

static void count_bf16(onednn_state *st, const conv_plan *c) {
    if (c->bf16) __atomic_add_fetch(&st->bf16_convs, 1, __ATOMIC_RELAXED);
}

/* The forward pass; with pool, y is relu(conv) 2x2 max pooled [N, O, OH/2, OW/2], read from
 * the primitive's own layout, and code (or NULL) its winners. */
static int fwd_run(ct_ctx *ctx,
                   const ct_k_conv2d_geom *s,
                   bool bf16,
                   bool relu,
                   bool pool,
                   const float *x,
                   const float *w,
                   const float *b,
                   float *y,
                   uint8_t *code,
                   void *keep,
                   void *scratch,
                   int nt) {
    onednn_state *st = ct_k_onednn_state(ctx, nt);
    int64_t nb = chunk_size(s->n), n_chunks = (s->n + nb - 1) / nb;
    conv_plan *main_plan = st ? plan_get(ctx, st, s, nb, b != NULL, bf16) : NULL;
    if (!plan_ok(main_plan, false, pool)) return 0;
    /* the tail chunk's plan, looked up here: the cache is not touched inside the loop */
    conv_plan *tail = s->n % nb ? plan_get(ctx, st, s, s->n % nb, b != NULL, bf16) : NULL;
    if (tail && !plan_ok(tail, false, pool)) return 0;
    size_t mine_bytes = pool ? main_plan->per_thread_pool_fwd : main_plan->per_thread_fwd;
    int64_t ph = s->oh / 2, pw = s->ow / 2;
    char *cursor = scratch;
    const float *wf = w;
    if (main_plan->r_w_f) {
        float *buf = (float *)take(&cursor, main_plan->shared_fwd);
        if (!weight_reorder(st, nt, main_plan->r_w_f, &main_plan->w_md, w, &main_plan->wei_f, buf))
            return 0;
        wf = buf;
    }
    char *per_thread = cursor;
    int64_t in_sample = s->c * s->h * s->w;
    int64_t out_sample = pool ? s->o * ph * pw : s->o * s->oh * s->ow;
    bool chunk_ok[CHUNKS] = {false};
    int saved = ct_omp_swap_threads(nt); /* a one-thread region must not let oneDNN fork */
    CT_OMP_FOR(nt)
    for (int64_t i = 0; i < n_chunks; i++) {
        int tid = omp_get_thread_num();
        int64_t n0 = i * nb, len = s->n - n0 < nb ? s->n - n0 : nb;
        conv_plan *c = len == nb ? main_plan : tail;
        dnnl_stream_t stream = st->streams[tid];
        char *mine = per_thread + (size_t)tid * mine_bytes;
        const float *xc = x + n0 * in_sample;
        float *yc = y + n0 * out_sample;
        void *src = (void *)(uintptr_t)xc, *dst = yc;
        bool ok = c != NULL;
        if (ok && c->r_x_f) {
            /* into the copy kept for the backward pass, where there is one */
            src = keep ? (char *)keep + (size_t)i * md_bytes(&main_plan->src_f)
                       : take(&mine, md_bytes(&main_plan->src_f));
            ok = run_reorder(st, stream, c->r_x_f, &c->x_md, xc, &c->src_f, src);
        }
        if (ok && (pool || c->r_y_f)) dst = take(&mine, md_bytes(&main_plan->dst_f));
        if (ok) {
            int ids[5] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST, DNNL_ARG_BIAS};
            const dnnl_memory_desc_t *mds[5] = {&c->src_f, &c->wei_f, &c->dst_f, &c->b_md};
            void *ptrs[5] = {src, (void *)(uintptr_t)wf, dst, (void *)(uintptr_t)b};
            ok = run_conv(st, tid, c->fwd, &c->sp_f, b ? 4 : 3, ids, mds, ptrs);
        }
        if (ok && pool) {
            ct_k_blocked v;
            ct_k_onednn_blocked_view(&c->dst_f, &v); /* plan_ok checked it */
            ct_k_relu_pool2x2_blocked(&v, dst, len, s->o, ph, pw, yc,
                                      code ? code + n0 * out_sample : NULL);
        } else {
            if (ok && c->r_y_f)
                ok = run_reorder(st, stream, c->r_y_f, &c->dst_f, dst, &c->y_md, yc);
            if (ok && relu) ct_k_relu_inplace(yc, len * out_sample); /* while in cache */
        }
        if (ok) count_bf16(st, c);
        chunk_ok[i] = ok;
    }
    ct_omp_swap_threads(saved);
    for (int64_t i = 0; i < n_chunks; i++)
        if (!chunk_ok[i]) return -1;
    return 1;
}

int ct_k_conv2d_onednn_fwd(ct_ctx *ctx,
                           const ct_k_conv2d_geom *s,
                           bool bf16,
                           bool relu,
                           const float *x,
                           const float *w,
                           const float *b,
                           float *y,
                           void *scratch,
                           int nt) {
    return fwd_run(ctx, s, bf16, relu, false, x, w, b, y, NULL, NULL, scratch, nt);
}

int ct_k_conv2d_relu_pool_onednn_fwd(ct_ctx *ctx,
                                     const ct_k_conv2d_geom *s,
                                     bool bf16,
                                     const float *x,
                                     const float *w,
                                     const float *b,
                                     float *y,
                                     uint8_t *code,
                                     void *keep,
                                     void *scratch,
                                     int nt) {
    return fwd_run(ctx, s, bf16, true, true, x, w, b, y, code, keep, scratch, nt);
}

/* The fused pool's forward results, from which its backward makes the convolution's dy. */
typedef struct pooled {
    const float *y;      /* [N, O, OH/2, OW/2] */
    const uint8_t *code; /* likewise */
    const void *keep;    /* x as the forward converted it (chunk after chunk), or NULL */
} pooled;

/* The backward pass; with pool, dy is the pooled output's gradient, routed to the winners and
 * masked by the ReLU straight in the primitives' layout. */
static int bwd_run(ct_ctx *ctx,
                   const ct_k_conv2d_geom *s,
                   bool has_bias,
                   bool bf16,
                   const pooled *pool,
                   const float *x,
                   const float *w,
                   const float *dy,
                   float *dx,
                   bool dx_fresh,
                   float *dw,
                   float *db,
                   void *scratch,
                   int nt) {
    onednn_state *st = ct_k_onednn_state(ctx, nt);
    int64_t nb = chunk_size(s->n), n_chunks = (s->n + nb - 1) / nb;
    conv_plan *main_plan = st ? plan_get(ctx, st, s, nb, has_bias, bf16) : NULL;
    if (!plan_ok(main_plan, true, pool != NULL)) return 0;
    conv_plan *tail = s->n % nb ? plan_get(ctx, st, s, s->n % nb, has_bias, bf16) : NULL;
    if (tail && !plan_ok(tail, true, pool != NULL)) return 0;
    size_t mine_bytes = pool ? main_plan->per_thread_pool_bwd : main_plan->per_thread_bwd;
    int64_t ph = s->oh / 2, pw = s->ow / 2;
    int64_t wn = s->o * (s->c / s->groups) * s->kh * s->kw;
    size_t wbytes = align64((size_t)wn * 4), bbytes = align64((size_t)s->o * 4);
    char *cursor = scratch;
    const float *wb = w;
    if (dx && main_plan->r_w_b) {
        float *buf = (float *)take(&cursor, main_plan->shared_bwd);
        if (!weight_reorder(st, nt, main_plan->r_w_b, &main_plan->w_md, w, &main_plan->wei_b, buf))
            return 0;
        wb = buf;
    } else {
        cursor += main_plan->shared_bwd;
    }
    float *dw_parts = (float *)take(&cursor, (size_t)n_chunks * wbytes);
    float *db_parts = (float *)take(&cursor, (size_t)n_chunks * bbytes);
    char *per_thread = cursor;
    int64_t in_sample = s->c * s->h * s->w;
    int64_t out_sample = pool ? s->o * ph * pw : s->o * s->oh * s->ow;
    bool want_w = dw != NULL || db != NULL;
    bool chunk_ok[CHUNKS] = {false};
    int saved = ct_omp_swap_threads(nt); /* a one-thread region must not let oneDNN fork */
    CT_OMP_FOR(nt)
    for (int64_t i = 0; i < n_chunks; i++) {
        int tid = omp_get_thread_num();
        int64_t n0 = i * nb, len = s->n - n0 < nb ? s->n - n0 : nb;
        conv_plan *c = len == nb ? main_plan : tail;
        dnnl_stream_t stream = st->streams[tid];
        char *mine = per_thread + (size_t)tid * mine_bytes;
        const float *xc = x + n0 * in_sample, *dyc = dy + n0 * out_sample;
        bool ok = c != NULL && c->ok_bwd;
        void *ddst_data = NULL; /* dy in the backward-data layout, reused below when equal */
        float *dyblk = NULL;    /* with pool: dy in the forward's dst_f layout */
        if (ok && pool) {
            ct_k_blocked v;
            ct_k_onednn_blocked_view(&c->dst_f, &v); /* plan_ok checked it */
            dyblk = (float *)take(&mine, md_bytes(&main_plan->dst_f));
            if (s->oh % 2 || s->ow % 2) /* a row or column no window reaches */
                memset(dyblk, 0, dnnl_memory_desc_get_size(&c->dst_f));
            if (c->bf16_scatter) /* bf16 in the same place: the backward primitives' dy */
                ct_k_pool2x2_scatter_blocked_bf16(&v, dyc, pool->y + n0 * out_sample,
                                                  pool->code + n0 * out_sample, len, s->o, ph, pw,
                                                  (uint16_t *)(void *)dyblk);
            else
                ct_k_pool2x2_scatter_blocked(&v, dyc, pool->y + n0 * out_sample,
                                             pool->code + n0 * out_sample, len, s->o, ph, pw,
                                             dyblk);
        }
        if (ok && dx) {
            void *ddst = (void *)(uintptr_t)dyc;
            void *dsrc = take(&mine, md_bytes(&main_plan->dsrc_b));
            if (dyblk) {
                ddst = dyblk;
                if (c->r_blk_b && !c->bf16_scatter) {
                    ddst = take(&mine, md_bytes(&main_plan->ddst_b));
                    ok = run_reorder(st, stream, c->r_blk_b, &c->dst_f, dyblk, &c->ddst_b, ddst);
                }
            } else if (c->r_dy_b) {
                ddst = take(&mine, md_bytes(&main_plan->ddst_b));
                ok = run_reorder(st, stream, c->r_dy_b, &c->y_md, dyc, &c->ddst_b, ddst);
            }
            int ids[4] = {DNNL_ARG_DIFF_DST, DNNL_ARG_WEIGHTS, DNNL_ARG_DIFF_SRC};
            const dnnl_memory_desc_t *mds[4] = {&c->ddst_b, &c->wei_b, &c->dsrc_b};
            void *ptrs[4] = {ddst, (void *)(uintptr_t)wb, dsrc};
            /* an unset dx is zeroed here, the chunk's part by the chunk's thread just before
             * the reorder adds to it: the bits of a zeroed buffer, without a pass on one thread */
            if (ok && dx_fresh)
                memset(dx + n0 * in_sample, 0, (size_t)(len * in_sample) * sizeof(float));
            ok =
                ok && run_conv(st, tid, c->bwd_data, &c->sp_b, 3, ids, mds, ptrs) &&
                run_reorder(st, stream, c->r_dx_b, &c->dsrc_b, dsrc, &c->x_md, dx + n0 * in_sample);
            ddst_data = ddst;
        }
        if (ok && want_w) {
            void *src = (void *)(uintptr_t)xc, *ddst = (void *)(uintptr_t)dyc;
            float *dwc = dw_parts + i * (int64_t)(wbytes / 4);
            void *dwei = dwc;
            if (pool && pool->keep && x_keepable(c)) {
                src = (void *)(uintptr_t)((const char *)pool->keep +
                                          (size_t)i * md_bytes(&main_plan->src_f));
            } else if (c->r_x_w) {
                src = take(&mine, md_bytes(&main_plan->src_w));
                ok = run_reorder(st, stream, c->r_x_w, &c->x_md, xc, &c->src_w, src);
            }
            if (ok && ddst_data && same(&c->ddst_w, &c->ddst_b)) {
                ddst = ddst_data;
            } else if (ok && dyblk) {
                ddst = dyblk;
                if (c->r_blk_w && !c->bf16_scatter) {
                    ddst = take(&mine, md_bytes(&main_plan->ddst_w));
                    ok = run_reorder(st, stream, c->r_blk_w, &c->dst_f, dyblk, &c->ddst_w, ddst);
                }
            } else if (ok && c->r_dy_w) {
                ddst = take(&mine, md_bytes(&main_plan->ddst_w));
                ok = run_reorder(st, stream, c->r_dy_w, &c->y_md, dyc, &c->ddst_w, ddst);
            }
            if (c->r_dw_w) dwei = take(&mine, md_bytes(&main_plan->dwei_w));
            int ids[5] = {DNNL_ARG_SRC, DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_WEIGHTS,
                          DNNL_ARG_DIFF_BIAS};
            const dnnl_memory_desc_t *mds[5] = {&c->src_w, &c->ddst_w, &c->dwei_w, &c->b_md};
            void *ptrs[5] = {src, ddst, dwei, db_parts + i * (int64_t)(bbytes / 4)};
            ok = ok && run_conv(st, tid, c->bwd_w, &c->sp_w, 4, ids, mds, ptrs);
            if (ok && c->r_dw_w)
                ok = run_reorder(st, stream, c->r_dw_w, &c->dwei_w, dwei, &c->w_md, dwc);
        }
        if (ok) count_bf16(st, c);
        chunk_ok[i] = ok;
    }
    ct_omp_swap_threads(saved);
    for (int64_t i = 0; i < n_chunks; i++)
        if (!chunk_ok[i]) return -1;
    /* the chunks' weight and bias gradients, summed in chunk order */
    if (dw) {
        int ntw = ct_threads_for(ctx, wn, n_chunks);
        CT_OMP_FOR(ntw)
        for (int64_t j = 0; j < wn; j++) {
            float acc = 0.0f;
            for (int64_t i = 0; i < n_chunks; i++)
                acc += dw_parts[i * (int64_t)(wbytes / 4) + j];
            dw[j] += acc;
        }
    }
    if (db) {
        for (int64_t j = 0; j < s->o; j++) {
            float acc = 0.0f;
            for (int64_t i = 0; i < n_chunks; i++)
                acc += db_parts[i * (int64_t)(bbytes / 4) + j];
            db[j] += acc;
        }
    }
    return 1;
}

int ct_k_conv2d_onednn_bwd(ct_ctx *ctx,
                           const ct_k_conv2d_geom *s,
                           bool has_bias,
                           bool bf16,
                           const float *x,
                           const float *w,
                           const float *dy,
                           float *dx,
                           float *dw,
                           float *db,
                           void *scratch,
                           int nt) {
    return bwd_run(ctx, s, has_bias, bf16, NULL, x, w, dy, dx, false, dw, db, scratch, nt);
}

int ct_k_conv2d_relu_pool_onednn_bwd(ct_ctx *ctx,
                                     const ct_k_conv2d_geom *s,
                                     bool has_bias,
                                     bool bf16,
                                     const float *x,
                                     const float *w,
                                     const float *y,
                                     const uint8_t *code,
                                     const void *keep,
                                     const float *dy,
                                     float *dx,
                                     bool dx_fresh,
                                     float *dw,
                                     float *db,
                                     void *scratch,
                                     int nt) {
    pooled pool = {y, code, keep};
    return bwd_run(ctx, s, has_bias, bf16, &pool, x, w, dy, dx, dx_fresh, dw, db, scratch, nt);
}

#endif /* _OPENMP */
