/*
 * bench_ops.c - ctrain's side of the micro-benchmarks that bench/run.py runs against PyTorch.
 *
 *   bench_ops CASE [--threads N] [--iters N]
 *
 * CASE is linear, conv2d, attention, mlp_step or mlp32_step (see bench/run.py for the shapes, which
 * both sides share), or attention_bf16 (attention's shapes under bf16 autocast, ctrain only).
 * Prints one line: "CASE median_ms min_ms iters". Each iteration is a forward and backward
 * (mlp_step: a whole training step with Adam) on a reset graph, after warm-up.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ctrain/ctrain.h"

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct bench {
    ct_ctx *ctx;
    ct_graph *g;
    ct_params *P;
    ct_optim *opt;
    ct_tensor *w[4];
    float *x;
    int64_t *labels;
    int64_t step;
} bench;

static ct_tensor *param(bench *b, const char *name, int32_t ndim, const int64_t *shape) {
    ct_tensor *t = NULL;
    if (ct_params_add(b->P, name, CT_F32, ndim, shape, CT_PARAM_TRAINABLE, &t) != CT_OK) {
        fprintf(stderr, "bench_ops: %s\n", ct_last_error(b->ctx));
        exit(1);
    }
    return t;
}

static float *randn(int64_t n, uint64_t seed) {
    float *x = malloc((size_t)n * sizeof(float));
    ct_rng r = ct_rng_init(seed, 0);
    ct_rng_normal(&r, x, n, 0.0f, 1.0f);
    return x;
}

static void setup(bench *b, const char *name) {
    ct_params_create(b->ctx, &b->P);
    if (strcmp(name, "linear") == 0) {
        b->w[0] = param(b, "weight", 2, (int64_t[]){512, 784});
        b->w[1] = param(b, "bias", 1, (int64_t[]){512});
        b->x = randn(128 * 784, 1);
    } else if (strcmp(name, "conv2d") == 0) {
        b->w[0] = param(b, "weight", 4, (int64_t[]){64, 32, 3, 3});
        b->w[1] = param(b, "bias", 1, (int64_t[]){64});
        b->x = randn(128 * 32 * 28 * 28, 1);
    } else if (strcmp(name, "attention") == 0 || strcmp(name, "attention_bf16") == 0) {
        b->x = randn(16 * 128 * 3 * 128, 1);
    } else if (strcmp(name, "mlp_step") == 0) {
        b->w[0] = param(b, "fc1.weight", 2, (int64_t[]){128, 784});
        b->w[1] = param(b, "fc1.bias", 1, (int64_t[]){128});
        b->w[2] = param(b, "fc2.weight", 2, (int64_t[]){10, 128});
        b->w[3] = param(b, "fc2.bias", 1, (int64_t[]){10});
        /* a stream of 256 different samples, so the model never collapses onto one */
        b->x = randn(256 * 784, 1);
        b->labels = calloc(256, sizeof(int64_t));
        for (int i = 0; i < 256; i++)
            b->labels[i] = i % 10;
    } else if (strcmp(name, "mlp32_step") == 0) {
        b->w[0] = param(b, "fc1.weight", 2, (int64_t[]){32, 32});
        b->w[1] = param(b, "fc1.bias", 1, (int64_t[]){32});
        b->w[2] = param(b, "fc2.weight", 2, (int64_t[]){10, 32});
        b->w[3] = param(b, "fc2.bias", 1, (int64_t[]){10});
        b->x = randn(256 * 32, 1);
        b->labels = calloc(256, sizeof(int64_t));
        for (int i = 0; i < 256; i++)
            b->labels[i] = i % 10;
    } else {
        fprintf(stderr,
                "bench_ops: unknown case '%s' (linear, conv2d, attention, attention_bf16, "
                "mlp_step, mlp32_step)\n",
                name);
        exit(2);
    }
    ct_params_alloc(b->P);
    ct_rng r = ct_rng_init(2, 0);
    for (int i = 0; i < 4; i++)
        if (b->w[i]) ct_nn_init_uniform(b->w[i], &r, -0.05f, 0.05f);
    ct_optim_params op = ct_optim_default_params(CT_OPTIM_ADAM);
    op.zero_grad = true; /* like PyTorch's zero_grad(set_to_none=True): no separate pass */
    ct_optim_create(b->ctx, b->P, &op, &b->opt);
}

static void run_once(bench *b, const char *name) {
    ct_graph *g = b->g;
    ct_graph_reset(g);
    ct_tensor *out;
    if (strcmp(name, "linear") == 0) {
        ct_tensor *x = ct_graph_wrap(g, b->x, CT_F32, 2, (int64_t[]){128, 784});
        x->flags |= CT_TENSOR_REQUIRES_GRAD;
        out = ct_op_sum_all(g, ct_op_linear(g, x, b->w[0], b->w[1]));
    } else if (strcmp(name, "conv2d") == 0) {
        ct_tensor *x = ct_graph_wrap(g, b->x, CT_F32, 4, (int64_t[]){128, 32, 28, 28});
        x->flags |= CT_TENSOR_REQUIRES_GRAD;
        ct_conv2d_params p = ct_conv2d_default_params();
        p.padding[0] = p.padding[1] = 1;
        out = ct_op_sum_all(g, ct_op_conv2d(g, x, b->w[0], b->w[1], &p));
    } else if (strncmp(name, "attention", 9) == 0) {
        if (strcmp(name, "attention_bf16") == 0) ct_graph_set_autocast(g, CT_BF16);
        ct_tensor *x = ct_graph_wrap(g, b->x, CT_F32, 3, (int64_t[]){16, 128, 384});
        x->flags |= CT_TENSOR_REQUIRES_GRAD;
        out = ct_op_sum_all(g, ct_op_causal_attention(g, x, 4));
    } else {
        int64_t in = strcmp(name, "mlp_step") == 0 ? 784 : 32, i = b->step++ % 256;
        ct_tensor *x = ct_graph_wrap(g, b->x + i * in, CT_F32, 2, (int64_t[]){1, in});
        ct_tensor *y = ct_graph_wrap(g, b->labels + i, CT_I64, 1, (int64_t[]){1});
        ct_tensor *h = ct_op_relu(g, ct_op_linear(g, x, b->w[0], b->w[1]));
        ct_cross_entropy_params ce = ct_cross_entropy_default_params();
        out = ct_loss_cross_entropy(g, ct_op_linear(g, h, b->w[2], b->w[3]), y, &ce);
    }
    if (ct_graph_backward(g, out) != CT_OK) {
        fprintf(stderr, "bench_ops: %s: %s\n", name, ct_last_error(b->ctx));
        exit(1);
    }
    if (strncmp(name, "mlp", 3) == 0) ct_optim_step(b->opt);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: bench_ops CASE [--threads N] [--iters N]\n");
        return 2;
    }
    const char *name = argv[1];
    long threads = 0, iters = 0;
    for (int i = 2; i + 1 < argc; i += 2) {
        char *end;
        long v = strtol(argv[i + 1], &end, 10);
        if (*end || v < 0) {
            fprintf(stderr, "bench_ops: %s expects a non-negative integer, got '%s'\n", argv[i],
                    argv[i + 1]);
            return 2;
        }
        if (strcmp(argv[i], "--threads") == 0)
            threads = v;
        else if (strcmp(argv[i], "--iters") == 0)
            iters = v;
        else {
            fprintf(stderr, "bench_ops: unknown option '%s'\n", argv[i]);
            return 2;
        }
    }
    bench b;
    memset(&b, 0, sizeof b);
    ct_ctx_params cp = ct_ctx_default_params();
    cp.n_threads = threads;
    if (ct_ctx_create(&cp, &b.ctx) != CT_OK || ct_graph_create(b.ctx, NULL, &b.g) != CT_OK)
        return 1;
    setup(&b, name);
    /* warm up, then size the run to about a second unless told */
    double t0 = now_ms();
    int warm = 0;
    while (warm < 3 || (now_ms() - t0 < 200.0 && warm < 1000)) {
        run_once(&b, name);
        warm++;
    }
    double per = (now_ms() - t0) / warm;
    if (iters == 0) iters = per > 0 ? (long)(1000.0 / per) : 1000;
    if (iters < 5) iters = 5;
    if (iters > 20000) iters = 20000;
    double *t = malloc((size_t)iters * sizeof(double));
    for (long i = 0; i < iters; i++) {
        double s = now_ms();
        run_once(&b, name);
        t[i] = now_ms() - s;
    }
    qsort(t, (size_t)iters, sizeof(double), cmp_double);
    printf("%s %.6f %.6f %ld\n", name, t[iters / 2], t[0], iters);
    free(t);
    free(b.x);
    free(b.labels);
    ct_optim_destroy(b.opt);
    ct_params_destroy(b.P);
    ct_graph_destroy(b.g);
    ct_ctx_destroy(b.ctx);
    return 0;
}
