/*
 * bench_gemm.c - the ceiling the matrix products set on a reference model's training step: each
 * GEMM of the step (forward with its bias, input gradient, weight gradient of every linear
 * layer, at the example's batch) run alone through ctrain's GEMM (the tiles on oneDNN that
 * training runs, ct_k_gemm_bias for the forward products) on hot operands, and their FLOPs
 * over their summed times. bench/models.py sets this figure
 * beside each model's achieved GFLOP/s: a step can only approach it, since the rest of the step
 * (activations, losses, the optimizer, threads meeting) adds time and no FLOPs.
 *
 *   bench_gemm [--threads N] [--ms M] [--precision fp32|bf16] [--verbose]
 *
 * Prints one line per model, `gemm MODEL PRECISION THREADS GFLOPS` (MLP 784-512-256-10 at batch
 * 128; the GPT's linear layers, 4 blocks of d_model 128 and a 256-way head, at 16 x 128 tokens;
 * the CNN's convolutions are not GEMMs, so it has no line), and with --verbose each product's
 * shape, count per step and best time. Each product is timed as the best of rounds of about
 * M ms (default 100) each. bf16 runs the products on bf16 operands (ct_k_gemm_bf16) where
 * the CPU multiplies bf16 natively, and prints GFLOPS 0 where it does not.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ctrain/ctrain.h"
#include "kernels/kernels.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* One product of a step: C[m, n] = op(A) op(B) + beta C, or with bias op(A) op(B) + bias in
 * every row (ct_k_gemm_bias, a linear layer's forward), `count` times per step. */
typedef struct product {
    bool ta, tb;
    int64_t m, n, k;
    float beta;
    bool bias;
    int count;
} product;

enum { MAX_PRODUCTS = 32 };

/* The linear layer in -> out at `rows` rows (ct_op_linear: y = x W^T + b, dX = dY W,
 * dW += dY^T X), `count` of them per step; the first layer of a network has no dX. */
static int linear(product *p, int at, int64_t rows, int64_t in, int64_t out, int count, bool dx) {
    p[at++] = (product){false, true, rows, out, in, 0.0f, true, count};
    if (dx) p[at++] = (product){false, false, rows, in, out, 0.0f, false, count};
    p[at++] = (product){true, false, out, in, rows, 1.0f, false, count};
    return at;
}

static int mlp_products(product *p) {
    int at = linear(p, 0, 128, 784, 512, 1, false);
    at = linear(p, at, 128, 512, 256, 1, true);
    return linear(p, at, 128, 256, 10, 1, true);
}

static int gpt_products(product *p) {
    const int64_t rows = 16 * 128, d = 128;
    int at = linear(p, 0, rows, d, 3 * d, 4, true); /* qkv */
    at = linear(p, at, rows, d, d, 4, true);        /* attention projection */
    at = linear(p, at, rows, d, 4 * d, 4, true);    /* MLP up */
    at = linear(p, at, rows, 4 * d, d, 4, true);    /* MLP down */
    return linear(p, at, rows, d, 256, 1, true);    /* head */
}

/* The best time of one product (seconds), on operands allocated and filled here. */
static double time_product(ct_ctx *ctx, const product *p, bool bf16, double ms) {
    int64_t ar = p->ta ? p->k : p->m, ac = p->ta ? p->m : p->k;
    int64_t br = p->tb ? p->n : p->k, bc = p->tb ? p->k : p->n;
    size_t na = (size_t)(ar * ac), nb = (size_t)(br * bc), nc = (size_t)(p->m * p->n);
    float *a = malloc(na * sizeof(float)), *b = malloc(nb * sizeof(float));
    float *c = calloc(nc, sizeof(float)), *bias = calloc((size_t)p->n, sizeof(float));
    uint16_t *ah = malloc(na * sizeof(uint16_t)), *bh = malloc(nb * sizeof(uint16_t));
    double best = -1.0;
    if (a && b && c && bias && ah && bh) {
        for (size_t i = 0; i < na; i++) {
            a[i] = (float)(i % 13) * 0.01f - 0.06f;
            ah[i] = 0x3c00; /* bf16 1/128 */
        }
        for (size_t i = 0; i < nb; i++) {
            b[i] = (float)(i % 7) * 0.01f - 0.03f;
            bh[i] = 0xbc00;
        }
        for (int round = 0; round < 5; round++) {
            int reps = 0;
            double t0 = now_s(), t = t0;
            while (t - t0 < ms * 1e-3 || reps < 3) {
                if (p->bias)
                    ct_k_gemm_bias(ctx, bf16, p->ta, p->tb, p->m, p->n, p->k,
                                   bf16 ? (const void *)ah : (const void *)a, ac,
                                   bf16 ? (const void *)bh : (const void *)b, bc, bias, c, p->n);
                else if (bf16)
                    ct_k_gemm_bf16(ctx, p->ta, p->tb, p->m, p->n, p->k, 1.0f, ah, ac, bh, bc,
                                   p->beta, c, p->n);
                else
                    ct_k_gemm(ctx, p->ta, p->tb, p->m, p->n, p->k, 1.0f, a, ac, b, bc, p->beta, c,
                              p->n);
                reps++;
                t = now_s();
            }
            double each = (t - t0) / reps;
            if (best < 0.0 || each < best) best = each;
        }
    }
    free(a), free(b), free(c), free(bias), free(ah), free(bh);
    return best;
}

int main(int argc, char **argv) {
    int64_t threads = 0;
    double ms = 100.0;
    bool bf16 = false, verbose = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--verbose") == 0) {
            verbose = true;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "usage: bench_gemm [--threads N] [--ms M] [--precision fp32|bf16] "
                            "[--verbose]\n");
            return 2;
        }
        const char *v = argv[++i];
        char *end = NULL;
        if (strcmp(argv[i - 1], "--threads") == 0) {
            threads = strtol(v, &end, 10);
        } else if (strcmp(argv[i - 1], "--ms") == 0) {
            ms = strtod(v, &end);
        } else if (strcmp(argv[i - 1], "--precision") == 0) {
            if (strcmp(v, "fp32") != 0 && strcmp(v, "bf16") != 0) {
                fprintf(stderr, "bench_gemm: --precision expects fp32 or bf16, got '%s'\n", v);
                return 2;
            }
            bf16 = strcmp(v, "bf16") == 0;
            continue;
        } else {
            fprintf(stderr, "bench_gemm: unknown option '%s'\n", argv[i - 1]);
            return 2;
        }
        /* threads: 0 (every core) or more; ms: a finite time above 0 */
        if (!end || *end || threads < 0 || !(ms > 0.0 && ms <= 1e6)) {
            fprintf(stderr, "bench_gemm: %s expects %s, got '%s'\n", argv[i - 1],
                    strcmp(argv[i - 1], "--ms") == 0 ? "milliseconds above 0" : "a count >= 0", v);
            return 2;
        }
    }
    ct_ctx_params cp = ct_ctx_default_params();
    cp.n_threads = threads;
    ct_ctx *ctx = NULL;
    if (ct_ctx_create(&cp, &ctx) != CT_OK) {
        fprintf(stderr, "bench_gemm: cannot create a context\n");
        return 1;
    }
    const char *prec = bf16 ? "bf16" : "fp32";
    int64_t nt = ct_ctx_threads(ctx);
    if (bf16 && !ct_k_gemm_bf16_native(ctx)) {
        printf("gemm mlp %s %lld 0\ngemm gpt %s %lld 0\n", prec, (long long)nt, prec,
               (long long)nt);
        ct_ctx_destroy(ctx);
        return 0;
    }
    const char *names[2] = {"mlp", "gpt"};
    for (int model = 0; model < 2; model++) {
        product p[MAX_PRODUCTS];
        int n = model == 0 ? mlp_products(p) : gpt_products(p);
        double flops = 0.0, secs = 0.0;
        for (int i = 0; i < n; i++) {
            double t = time_product(ctx, &p[i], bf16, ms);
            if (t <= 0.0) {
                fprintf(stderr, "bench_gemm: out of memory\n");
                ct_ctx_destroy(ctx);
                return 1;
            }
            double f = 2.0 * (double)p[i].m * (double)p[i].n * (double)p[i].k;
            flops += f * p[i].count;
            secs += t * p[i].count;
            if (verbose)
                printf("  %s %c%c m %lld n %lld k %lld x%d: %.1f us, %.1f GFLOP/s\n", names[model],
                       p[i].ta ? 'T' : 'N', p[i].tb ? 'T' : 'N', (long long)p[i].m,
                       (long long)p[i].n, (long long)p[i].k, p[i].count, t * 1e6, f / t * 1e-9);
        }
        printf("gemm %s %s %lld %.1f\n", names[model], prec, (long long)nt, flops / secs * 1e-9);
    }
    ct_ctx_destroy(ctx);
    return 0;
}
