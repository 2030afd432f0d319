/*
 * bench_loader.c - ctrain's side of the loader benchmark that bench/run.py runs next to
 * PyTorch's DataLoader.
 *
 *   bench_loader CASE [--threads N] [--iters N]
 *
 * CASE: loader_plain (u8 -> f32, scale to [0, 1]) or loader_aug (plus normalize, random crop
 * with padding 2 and random horizontal flip), shuffled batches of 128 from the Fashion-MNIST
 * training images (60,000 x 28 x 28, Debian's dataset-fashion-mnist), prefetch 2. One iteration
 * is one epoch; prints "CASE median_ms min_ms iters samples_per_s".
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ctrain/ctrain.h"

#define FMNIST "/usr/share/datasets/fashion-mnist/"

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: bench_loader loader_plain|loader_aug [--iters N]\n");
        return 2;
    }
    const char *name = argv[1];
    bool aug = strcmp(name, "loader_aug") == 0;
    if (!aug && strcmp(name, "loader_plain") != 0) {
        fprintf(stderr, "bench_loader: unknown case '%s'\n", name);
        return 2;
    }
    long iters = 3;
    for (int i = 2; i + 1 < argc; i += 2)
        if (strcmp(argv[i], "--iters") == 0) iters = strtol(argv[i + 1], NULL, 10);
    if (iters < 1) iters = 1;
    ct_ctx *ctx;
    if (ct_ctx_create(NULL, &ctx) != CT_OK) return 1;
    ct_option items[2] = {{"images", FMNIST "train-images-idx3-ubyte.gz"},
                          {"labels", FMNIST "train-labels-idx1-ubyte.gz"}};
    ct_options o = {items, 2, "bench"};
    ct_dataset *ds;
    double t0 = now_ms();
    if (ct_dataset_open(ctx, "idx", &o, &ds) != CT_OK) {
        fprintf(stderr, "bench_loader: %s\n", ct_last_error(ctx));
        return 1;
    }
    double open_ms = now_ms() - t0;
    ct_loader_params p = ct_loader_default_params();
    p.batch_size = 128;
    p.seed = 1;
    p.n_transforms = aug ? 4 : 1;
    p.transforms[0].kind = CT_TRANSFORM_SCALE;
    p.transforms[0].a = 1.0f / 255.0f;
    p.transforms[1].kind = CT_TRANSFORM_NORMALIZE;
    p.transforms[1].mean[0] = 0.2860f;
    p.transforms[1].std[0] = 0.3530f;
    p.transforms[2].kind = CT_TRANSFORM_RANDOM_CROP;
    p.transforms[2].pad = 2;
    p.transforms[3].kind = CT_TRANSFORM_HFLIP;
    p.transforms[3].p = 0.5f;
    ct_loader *l;
    if (ct_loader_create(ctx, ds, &p, &l) != CT_OK) {
        fprintf(stderr, "bench_loader: %s\n", ct_last_error(ctx));
        return 1;
    }
    double *t = malloc((size_t)iters * sizeof(double));
    double checksum = 0.0;
    for (long it = 0; it < iters; it++) {
        double s = now_ms();
        ct_batch b;
        while (ct_loader_next(l, &b) == CT_OK && b.size > 0)
            checksum += (double)((const float *)b.x.data)[0]; /* touch the batch */
        t[it] = now_ms() - s;
    }
    qsort(t, (size_t)iters, sizeof(double), cmp_double);
    double samples = (double)ct_loader_samples_per_epoch(l);
    printf("%s %.6f %.6f %ld %.0f\n", name, t[iters / 2], t[0], iters,
           samples / (t[iters / 2] / 1e3));
    fprintf(stderr, "bench_loader: opened 60,000 gzip images in %.0f ms (checksum %g)\n", open_ms,
            checksum);
    free(t);
    ct_loader_destroy(l);
    ct_dataset_close(ds);
    ct_ctx_destroy(ctx);
    return 0;
}
