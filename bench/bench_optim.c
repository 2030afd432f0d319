/*
 * bench_optim.c - the optimizer's update for every kind and variant, with and without the
 * non-finite test: a guard against loops that stop vectorising.
 *
 *   bench_optim [--threads N]
 *
 * Prints, per variant and size, the median time of ct_optim_step, of ct_optim_step_checked
 * (the test inside the update: the trainer's under on_nonfinite stop and rollback) and of
 * ct_optim_step_if_finite (every gradient scanned first: under skip). Each step first copies
 * one of two fixed gradients into the store, alternately (the copy is in every column alike):
 * with one gradient, weight decay drives each element's total gradient to zero and the moments
 * into denormal numbers, which would make Adam's small case 5x slower as the run goes on.
 * Sizes: the width-32 MLP (1,386 parameters) and the Fashion-MNIST MLP (203,530). Compare two
 * builds by running both: a loop that gcc leaves scalar shows as a variant 2-4x slower in one of
 * them (docs/benchmarks.md, docs/trainer.md "Overhead").
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ctrain/ctrain.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct variant {
    const char *name;
    ct_optim_params p;
} variant;

/* The variants of tests/unit/test_optim.c's optimizer_variants, named. */
static int variants(variant *v) {
    int k = 0;
    v[k++] = (variant){"sgd", ct_optim_default_params(CT_OPTIM_SGD)};
    v[k] = (variant){"sgd momentum", ct_optim_default_params(CT_OPTIM_SGD)};
    v[k].p.momentum = 0.9f;
    v[k++].p.dampening = 0.1f;
    v[k] = (variant){"sgd nesterov zero_grad", ct_optim_default_params(CT_OPTIM_SGD)};
    v[k].p.momentum = 0.9f;
    v[k].p.nesterov = true;
    v[k++].p.zero_grad = true;
    v[k] = (variant){"adam weight_decay", ct_optim_default_params(CT_OPTIM_ADAM)};
    v[k++].p.weight_decay = 0.01f;
    v[k++] = (variant){"adamw", ct_optim_default_params(CT_OPTIM_ADAMW)};
    v[k] = (variant){"adamw zero_grad", ct_optim_default_params(CT_OPTIM_ADAMW)};
    v[k++].p.zero_grad = true;
    v[k++] = (variant){"rmsprop", ct_optim_default_params(CT_OPTIM_RMSPROP)};
    v[k] = (variant){"rmsprop centered momentum", ct_optim_default_params(CT_OPTIM_RMSPROP)};
    v[k].p.centered = true;
    v[k++].p.momentum = 0.9f;
    v[k] = (variant){"adagrad weight_decay", ct_optim_default_params(CT_OPTIM_ADAGRAD)};
    v[k++].p.weight_decay = 0.01f;
    return k;
}

static void die(ct_ctx *ctx) {
    fprintf(stderr, "bench_optim: %s\n", ct_last_error(ctx));
    exit(1);
}

enum { REPEATS = 15, PLAIN = 0, CHECKED, GUARDED, ARMS };

/* Median microseconds per step of each arm, the arms interleaved repeat by repeat. */
static void measure(ct_ctx *ctx, const ct_optim_params *op, int64_t n, int64_t steps, double *us) {
    ct_params *P;
    ct_tensor *w;
    ct_optim *o;
    if (ct_params_create(ctx, &P) != CT_OK ||
        ct_params_add(P, "w.weight", CT_F32, 1, &n, CT_PARAM_TRAINABLE, &w) != CT_OK ||
        ct_params_alloc(P) != CT_OK || ct_optim_create(ctx, P, op, &o) != CT_OK)
        die(ctx);
    float *grad = malloc(2 * (size_t)n * sizeof(float)), *values = ct_params_values(P);
    if (!grad) exit(1);
    for (int64_t i = 0; i < n; i++) {
        values[i] = 0.02f * (float)(i % 97) - 0.97f;
        grad[i] = 0.01f * ((float)((i * 37) % 101) - 50.5f);
        grad[n + i] = 0.01f * ((float)((i * 53) % 89) - 44.5f);
    }
    double t[ARMS][REPEATS];
    for (int r = 0; r < REPEATS; r++)
        for (int a = 0; a < ARMS; a++) {
            double t0 = now_s();
            for (int64_t k = 0; k < steps; k++) {
                memcpy(ct_params_grads(P), grad + (k % 2) * n, (size_t)n * sizeof(float));
                bool ok = true;
                if (a == PLAIN)
                    ct_optim_step(o);
                else if (a == CHECKED)
                    ok = ct_optim_step_checked(o);
                else
                    ok = ct_optim_step_if_finite(o);
                if (!ok) {
                    fprintf(stderr, "bench_optim: finite gradients reported non-finite\n");
                    exit(1);
                }
            }
            t[a][r] = (now_s() - t0) / (double)steps;
        }
    for (int a = 0; a < ARMS; a++) {
        qsort(t[a], REPEATS, sizeof t[a][0], cmp_double);
        us[a] = t[a][REPEATS / 2] * 1e6;
    }
    free(grad);
    ct_optim_destroy(o);
    ct_params_destroy(P);
}

int main(int argc, char **argv) {
    ct_ctx_params cp = ct_ctx_default_params();
    cp.n_threads = 2;
    for (int i = 1; i + 1 < argc; i += 2)
        if (strcmp(argv[i], "--threads") == 0) cp.n_threads = strtol(argv[i + 1], NULL, 10);
    ct_ctx *ctx;
    if (ct_ctx_create(&cp, &ctx) != CT_OK) return 1;
    variant v[16];
    int count = variants(v);
    const int64_t sizes[2] = {1386, 203530}, steps[2] = {2000, 40};
    printf("optimizer update, %lld threads, median of %d runs (us per step, the gradient copy "
           "included)\n",
           (long long)cp.n_threads, REPEATS);
    printf("%-26s %8s %10s %10s %10s\n", "variant", "n", "step", "checked", "if_finite");
    for (int s = 0; s < 2; s++)
        for (int c = 0; c < count; c++) {
            double us[ARMS];
            measure(ctx, &v[c].p, sizes[s], steps[s], us);
            printf("%-26s %8lld %10.2f %10.2f %10.2f\n", v[c].name, (long long)sizes[s], us[PLAIN],
                   us[CHECKED], us[GUARDED]);
        }
    ct_ctx_destroy(ctx);
    return 0;
}
