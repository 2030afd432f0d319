/*
 * test_conv_pool.c - the fused conv2d -> ReLU -> 2x2 max pool (ct_op_conv2d_relu_maxpool)
 * against max_pool2d(conv2d_relu(...)): the same bits forward and for every gradient (x,
 * weight, bias), in f32 and under bf16 autocast, for 1 and 2 threads, on every kernel choice
 * (the oneDNN path keeps the convolution's output in its blocked layout; the others compose),
 * on shapes with channels that are not a multiple of 16, odd H and W (the pool drops the last
 * row and column), a batch that is not a multiple of the chunk count, and NaN and -0 in the
 * inputs, the bias and the incoming gradient (and again without NaN in x and dy, which would
 * make every weight gradient NaN). Then a model of conv2d, relu, maxpool2d layers
 * gives the same loss and gradients as the unfused ops, with gradients on and off.
 */
#include <math.h>
#include <string.h>

#include "ctrain/ctrain.h"
#include "harness.h"

#ifdef _OPENMP
#include <dnnl.h>

#include "kernels/onednn/onednn_internal.h"
#endif

typedef struct pool_case {
    const char *name;
    int64_t n, c, h, w, o, k, pad;
    bool bias;
    bool onednn_f32; /* oneDNN's f32 convolution takes it (else im2col: composed) */
} pool_case;

static const pool_case cases[] = {
    {"the CNN's first convolution, tail chunk", 11, 1, 28, 28, 32, 3, 1, true, true},
    {"20 channels, odd H and W", 5, 3, 11, 9, 20, 3, 1, true, false},
    {"32 to 64 channels, no bias", 3, 32, 14, 14, 64, 3, 1, false, true},
    {"8 channels, 7x7 (3x3 pooled)", 9, 8, 7, 7, 8, 3, 1, true, false},
    {"5x5 kernel, no padding, smallest pool", 2, 4, 6, 7, 16, 5, 0, true, true},
};

typedef struct outputs {
    float *y, *dx, *dw, *db;
    const char *op; /* the op that made y */
} outputs;

static void outputs_free(outputs *o) {
    free(o->y);
    free(o->dx);
    free(o->dw);
    free(o->db);
}

static float *copy_out(const float *src, int64_t n) {
    float *d = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    if (d && src) memcpy(d, src, (size_t)n * sizeof(float));
    return d;
}

/* Normal values with NaN and -0 sprinkled in (every `every`-th element, 0 for none), and a
 * stretch of zeros (windows of ties after the ReLU). */
static void fill(float *v, int64_t n, uint64_t seed, int64_t every) {
    ct_rng r = ct_rng_init(seed, 1);
    ct_rng_normal(&r, v, n, 0.0f, 1.0f);
    for (int64_t i = 0; every && i < n; i += every)
        v[i] = (i / every) % 2 ? NAN : -0.0f;
    for (int64_t i = n / 3; i < n / 3 + n / 10; i++)
        v[i] = 0.0f;
}

#ifdef _OPENMP
/* Whether the CPU has bf16 dot products, where oneDNN has bf16 convolutions. */
static bool onednn_has_bf16(void) {
    unsigned isa = (unsigned)dnnl_get_effective_cpu_isa(), bf16 = dnnl_cpu_isa_avx512_core_bf16;
    return (isa & bf16) == bf16;
}
#endif

typedef struct mode {
    bool bf16, fused;
    ct_kernels kernels;
    int64_t threads;
    bool finite; /* no NaN in x and dy: NaN there makes every weight gradient NaN, and equal */
} mode;

static outputs run(const pool_case *pc, mode m) {
    outputs out;
    memset(&out, 0, sizeof out);
    ct_ctx_params p = ct_ctx_default_params();
    p.n_threads = m.threads;
    p.kernels = m.kernels;
    p.bf16_kernels = CT_BF16_KERNELS_ONEDNN;
    ct_ctx *ctx = NULL;
    ct_graph *g = NULL;
    if (ct_ctx_create(&p, &ctx) != CT_OK || ct_graph_create(ctx, NULL, &g) != CT_OK) abort();
    if (m.bf16) CT_CHECK(ct_graph_set_autocast(g, CT_BF16) == CT_OK);
    ct_tensor *x = ct_graph_new(g, CT_F32, 4, (int64_t[]){pc->n, pc->c, pc->h, pc->w});
    ct_tensor *w = ct_graph_new(g, CT_F32, 4, (int64_t[]){pc->o, pc->c, pc->k, pc->k});
    ct_tensor *b = pc->bias ? ct_graph_new(g, CT_F32, 1, (int64_t[]){pc->o}) : NULL;
    fill(x->data, ct_tensor_numel(x), 1, m.finite ? 0 : 97);
    fill(w->data, ct_tensor_numel(w), 2, 0);
    if (b) {
        fill(b->data, pc->o, 3, 0);
        ((float *)b->data)[0] = -0.0f;
    }
    x->flags |= CT_TENSOR_REQUIRES_GRAD;
    w->flags |= CT_TENSOR_REQUIRES_GRAD;
    if (b) b->flags |= CT_TENSOR_REQUIRES_GRAD;
    ct_conv2d_params cp = ct_conv2d_default_params();
    cp.padding[0] = cp.padding[1] = pc->pad;
    ct_pool2d_params pp = {{2, 2}, {0, 0}, {0, 0}};
    ct_tensor *y = m.fused ? ct_op_conv2d_relu_maxpool(g, x, w, b, &cp, &pp)
                           : ct_op_max_pool2d(g, ct_op_conv2d_relu(g, x, w, b, &cp), &pp);
    CT_CHECK_MSG(y != NULL, "%s: %s", pc->name, ct_last_error(ctx));
    if (y) {
        int64_t ny = ct_tensor_numel(y);
        int64_t oh = pc->h + 2 * pc->pad - pc->k + 1, ow = pc->w + 2 * pc->pad - pc->k + 1;
        CT_CHECK(y->shape[1] == pc->o && y->shape[2] == oh / 2 && y->shape[3] == ow / 2);
        out.op = y->node ? y->node->op->name : "";
        float *seed = malloc((size_t)ny * sizeof(float));
        fill(seed, ny, 4, m.finite ? 0 : 13);
        out.y = copy_out(y->data, ny);
        CT_CHECK(ct_graph_backward_seed(g, y, seed) == CT_OK);
        out.dx = copy_out(x->grad, ct_tensor_numel(x));
        out.dw = copy_out(w->grad, ct_tensor_numel(w));
        if (b) out.db = copy_out(b->grad, pc->o);
        free(seed);
    }
    ct_graph_destroy(g);
    ct_ctx_destroy(ctx);
    return out;
}

static bool same_bits(const float *a, const float *b, int64_t n) {
    return a && b && memcmp(a, b, (size_t)n * sizeof(float)) == 0;
}

static bool all_same(const outputs *a, const outputs *b, const pool_case *pc) {
    int64_t oh = pc->h + 2 * pc->pad - pc->k + 1, ow = pc->w + 2 * pc->pad - pc->k + 1;
    int64_t ny = pc->n * pc->o * (oh / 2) * (ow / 2), nx = pc->n * pc->c * pc->h * pc->w;
    int64_t nw = pc->o * pc->c * pc->k * pc->k;
    return same_bits(a->y, b->y, ny) && same_bits(a->dx, b->dx, nx) &&
           same_bits(a->dw, b->dw, nw) && (!pc->bias || same_bits(a->db, b->db, pc->o));
}

/* Whether the fused path must run: on the fast kernels, where oneDNN's convolution takes the
 * geometry (oneDNN runs on OpenMP; its bf16 convolutions from 16 input channels where the CPU
 * multiplies bf16, else the f32 ones on rounded copies). */
static bool fused_path_expected(const pool_case *pc, mode m) {
#ifdef _OPENMP
    if (m.kernels != CT_KERNELS_FAST) return false;
    return (m.bf16 && pc->c >= 16 && onednn_has_bf16()) || pc->onednn_f32;
#else
    (void)pc, (void)m;
    return false;
#endif
}

static void conv_relu_maxpool_should_equal_the_composed_ops_bit_for_bit(void) {
    static const ct_kernels sets[] = {CT_KERNELS_FAST, CT_KERNELS_BLAS, CT_KERNELS_REFERENCE};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const pool_case *pc = &cases[k];
        /* each precision and kernel set, with NaN in x and dy and without */
        for (size_t i = 0; i < 4 * sizeof sets / sizeof sets[0]; i++) {
            mode m = {i % 2 == 1, true, sets[i / 4], 1, i / 2 % 2 == 1};
            outputs f1 = run(pc, m);
            m.threads = 2;
            outputs f2 = run(pc, m);
            m.fused = false;
            outputs u = run(pc, m);
            const char *want = "conv2d_relu_maxpool", *prec = m.bf16 ? "bf16" : "f32";
            const char *data = m.finite ? "finite" : "with NaN";
            CT_CHECK_MSG(!fused_path_expected(pc, m) || (f1.op && strcmp(f1.op, want) == 0),
                         "%s (%s, kernels %d): made by %s, expected %s", pc->name, prec,
                         (int)m.kernels, f1.op ? f1.op : "-", want);
            CT_CHECK_MSG(all_same(&f2, &u, pc),
                         "%s (%s, kernels %d, %s): fused and composed differ", pc->name, prec,
                         (int)m.kernels, data);
            CT_CHECK_MSG(all_same(&f1, &f2, pc), "%s (%s, kernels %d, %s): 1 and 2 threads differ",
                         pc->name, prec, (int)m.kernels, data);
            outputs_free(&f1);
            outputs_free(&f2);
            outputs_free(&u);
        }
    }
}

/* Any other pooling composes the ops: the same results as max_pool2d(conv2d_relu). */
static void conv_relu_maxpool_should_compose_other_pools(void) {
    ct_ctx *ctx = NULL;
    ct_graph *g = NULL;
    if (ct_ctx_create(NULL, &ctx) != CT_OK || ct_graph_create(ctx, NULL, &g) != CT_OK) abort();
    ct_tensor *x = ct_graph_new(g, CT_F32, 4, (int64_t[]){2, 3, 9, 9});
    ct_tensor *w = ct_graph_new(g, CT_F32, 4, (int64_t[]){16, 3, 3, 3});
    fill(x->data, ct_tensor_numel(x), 1, 0);
    fill(w->data, ct_tensor_numel(w), 2, 0);
    ct_pool2d_params pools[] = {{{3, 3}, {2, 2}, {1, 1}}, {{2, 2}, {1, 1}, {0, 0}}};
    for (size_t i = 0; i < 2; i++) {
        ct_tensor *f = ct_op_conv2d_relu_maxpool(g, x, w, NULL, NULL, &pools[i]);
        ct_tensor *u = ct_op_max_pool2d(g, ct_op_conv2d_relu(g, x, w, NULL, NULL), &pools[i]);
        CT_CHECK(f && u && ct_tensor_numel(f) == ct_tensor_numel(u) &&
                 same_bits(f->data, u->data, ct_tensor_numel(u)));
    }
    CT_CHECK(ct_op_conv2d_relu_maxpool(g, x, w, NULL, NULL, NULL) == NULL);
    CT_CHECK(strstr(ct_last_error(ctx), "max_pool2d") != NULL);
    ct_graph_destroy(g);
    ct_ctx_destroy(ctx);
}

/* A model's conv2d, relu, maxpool2d layers run as the fused op (where oneDNN takes them) and
 * give the composed ops' output and parameter gradients bit for bit; without gradients the same
 * output. */
static void model_should_fuse_conv_relu_maxpool_layers(void) {
#define OPTS(...)                                                                                  \
    {                                                                                              \
        (const ct_option[]){__VA_ARGS__},                                                          \
            sizeof((const ct_option[]){__VA_ARGS__}) / sizeof(ct_option), NULL                     \
    }
    const ct_options none = {NULL, 0, NULL};
    ct_layer_spec specs[] = {{"conv2d", NULL, OPTS({"out", "32"}, {"padding", "1"}), NULL, 0},
                             {"relu", NULL, none, NULL, 0},
                             {"maxpool2d", NULL, none, NULL, 0},
                             {"conv2d", NULL, OPTS({"out", "16"}, {"padding", "1"}), NULL, 0},
                             {"relu", NULL, none, NULL, 0},
                             {"maxpool2d", NULL, OPTS({"kernel", "2"}, {"stride", "2"}), NULL, 0},
                             {"flatten", NULL, none, NULL, 0},
                             {"linear", NULL, OPTS({"out", "5"}), NULL, 0}};
#undef OPTS
    enum { B = 10, N_IN = B * 12 * 12, N_OUT = B * 5 };
    ct_ctx *ctx = NULL;
    ct_params *ps = NULL;
    ct_model *m = NULL;
    ct_graph *g = NULL;
    CT_CHECK_INT(ct_ctx_create(NULL, &ctx), CT_OK);
    CT_CHECK_INT(ct_params_create(ctx, &ps), CT_OK);
    CT_CHECK_INT(ct_graph_create(ctx, NULL, &g), CT_OK);
    ct_status st = ct_model_create(ctx, ps, CT_F32, 3, (const int64_t[]){1, 12, 12}, specs,
                                   (int64_t)(sizeof specs / sizeof specs[0]), &m);
    CT_CHECK_MSG(st == CT_OK, "%s", ct_last_error(ctx));
    if (st != CT_OK) return;
    CT_CHECK_INT(ct_params_alloc(ps), CT_OK);
    CT_CHECK_INT(ct_model_init_weights(m, 3), CT_OK);
    static float x[N_IN], seed[N_OUT], out[3][N_OUT];
    fill(x, N_IN, 7, 0);
    fill(seed, N_OUT, 8, 0);
    const int64_t shape[] = {B, 1, 12, 12};
    int64_t np = ct_params_numel(ps);
    float *grads[2] = {malloc((size_t)np * 4), malloc((size_t)np * 4)};
    for (int run = 0; run < 3; run++) {
        ct_graph_reset(g);
        ct_graph_set_grad_enabled(g, run < 2);
        ct_params_zero_grad(ps);
        ct_tensor *xt = ct_graph_wrap(g, x, CT_F32, 4, shape), *y;
        if (run == 1) {
            ct_tensor *t[6];
            for (int i = 0; i < 6; i++)
                t[i] = ct_params_at(ps, i);
            ct_conv2d_params cp = ct_conv2d_default_params();
            cp.padding[0] = cp.padding[1] = 1;
            ct_pool2d_params pp = {{2, 2}, {2, 2}, {0, 0}};
            ct_tensor *h = ct_op_max_pool2d(g, ct_op_conv2d_relu(g, xt, t[0], t[1], &cp), &pp);
            h = ct_op_max_pool2d(g, ct_op_conv2d_relu(g, h, t[2], t[3], &cp), &pp);
            y = ct_op_linear(g, ct_op_flatten(g, h, 1), t[4], t[5]);
        } else {
            y = ct_model_forward(m, g, xt);
        }
        CT_CHECK_MSG(y && ct_tensor_numel(y) == N_OUT, "run %d: %s", run, ct_last_error(ctx));
        if (!y) break;
        memcpy(out[run], y->data, sizeof out[run]);
        if (run == 0) {
            int fused = 0;
            for (const ct_node *nd = ct_graph_newest(g); nd; nd = nd->prev)
                fused += strcmp(nd->op->name, "conv2d_relu_maxpool") == 0;
#ifdef _OPENMP
            CT_CHECK_INT(fused, 2);
#endif
        }
        if (run < 2) {
            CT_CHECK(ct_graph_backward_seed(g, y, seed) == CT_OK);
            memcpy(grads[run], ct_params_grads(ps), (size_t)np * 4);
        }
    }
    ct_graph_set_grad_enabled(g, true);
    CT_CHECK(memcmp(out[0], out[1], sizeof out[0]) == 0);
    CT_CHECK(memcmp(out[0], out[2], sizeof out[0]) == 0);
    CT_CHECK(memcmp(grads[0], grads[1], (size_t)np * 4) == 0);
    free(grads[0]);
    free(grads[1]);
    ct_graph_destroy(g);
    ct_model_destroy(m);
    ct_params_destroy(ps);
    ct_ctx_destroy(ctx);
}

#ifdef _OPENMP
/* The fused pool's addressing of the convolution outputs oneDNN chooses: channels last (its
 * AMX convolutions) as 16-channel blocks 16 apart, so the pool reads whole vectors of
 * channels; nChw16c as its blocks; plain NCHW a channel at a time; bf16 and doubly blocked
 * layouts refused. The case tests above take whichever layout this CPU's primitives choose. */
static void blocked_view_should_read_channels_last_as_16_channel_blocks(void) {
    dnnl_dims_t dims = {8, 64, 14, 14};
    dnnl_memory_desc_t md;
    ct_k_blocked v;
    CT_CHECK(dnnl_memory_desc_init_by_tag(&md, 4, dims, dnnl_f32, dnnl_acdb) == dnnl_success);
    CT_CHECK(ct_k_onednn_blocked_view(&md, &v));
    CT_CHECK(v.blk == 16 && v.sc == 16 && v.sw == 64 && v.sh == 14 * 64 && v.sn == 196 * 64);
    dims[1] = 24; /* not a multiple of 16: one block of every channel */
    CT_CHECK(dnnl_memory_desc_init_by_tag(&md, 4, dims, dnnl_f32, dnnl_acdb) == dnnl_success);
    CT_CHECK(ct_k_onednn_blocked_view(&md, &v));
    CT_CHECK(v.blk == 24 && v.sc == 24 && v.sw == 24);
    dims[1] = 72; /* wider: a channel at a time */
    CT_CHECK(dnnl_memory_desc_init_by_tag(&md, 4, dims, dnnl_f32, dnnl_acdb) == dnnl_success);
    CT_CHECK(ct_k_onednn_blocked_view(&md, &v));
    CT_CHECK(v.blk == 1 && v.sc == 1 && v.sw == 72);
    dims[1] = 20;
    CT_CHECK(dnnl_memory_desc_init_by_tag(&md, 4, dims, dnnl_f32, dnnl_aBcd16b) == dnnl_success);
    CT_CHECK(ct_k_onednn_blocked_view(&md, &v));
    CT_CHECK(v.blk == 16 && v.sc == 14 * 14 * 16 && v.sw == 16 && v.sn == 2 * v.sc);
    CT_CHECK(dnnl_memory_desc_init_by_tag(&md, 4, dims, dnnl_f32, dnnl_abcd) == dnnl_success);
    CT_CHECK(ct_k_onednn_blocked_view(&md, &v));
    CT_CHECK(v.blk == 1 && v.sc == 196 && v.sw == 1);
    CT_CHECK(dnnl_memory_desc_init_by_tag(&md, 4, dims, dnnl_bf16, dnnl_acdb) == dnnl_success);
    CT_CHECK(!ct_k_onednn_blocked_view(&md, &v));
    CT_CHECK(dnnl_memory_desc_init_by_tag(&md, 4, dims, dnnl_f32, dnnl_ABcd16a16b) == dnnl_success);
    CT_CHECK(!ct_k_onednn_blocked_view(&md, &v));
}
#endif

int main(void) {
#ifdef _OPENMP
    CT_RUN(blocked_view_should_read_channels_last_as_16_channel_blocks);
#endif
    CT_RUN(conv_relu_maxpool_should_equal_the_composed_ops_bit_for_bit);
    CT_RUN(conv_relu_maxpool_should_compose_other_pools);
    CT_RUN(model_should_fuse_conv_relu_maxpool_layers);
    return ct_test_finish();
}
