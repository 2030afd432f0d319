/*
 * test_loader.c - the loader: epoch coverage and reproducible shuffling, exact sharding for
 * world sizes 1..5, save/restore at several cut points (with and without prefetch), transforms,
 * no allocation in the steady state, and parameter errors. The data is a dataset type defined
 * here through ct_dataset_open_with (the plugin path): sample i has x = (i, i + 0.5) and y = i,
 * or a 2x4x5 u8 image whose pixels encode i.
 */
#include <math.h>
#include <string.h>

#include "ctrain/ctrain.h"
#include "harness.h"
#include "test_alloc.h"

typedef struct toy {
    int64_t n;
    bool image;
} toy;

static ct_status toy_open(ct_ctx *ctx, const ct_options *opts, ct_dataset_info *info, void **self) {
    int64_t n;
    bool image;
    const char *const known[] = {"n", "image", NULL};
    CT_TRY(ct_options_check(ctx, opts, known));
    CT_TRY(ct_options_int(ctx, opts, "n", 10, 0, 1000000, &n));
    CT_TRY(ct_options_bool(ctx, opts, "image", false, &image));
    toy *t = ct_alloc(ctx, sizeof *t);
    if (!t) return CT_FAIL(ctx, CT_ERR_OOM, "toy");
    t->n = n;
    t->image = image;
    memset(info, 0, sizeof *info);
    info->n = n;
    if (image) {
        info->x_dtype = CT_U8;
        info->x_ndim = 3;
        info->x_shape[0] = 2;
        info->x_shape[1] = 4;
        info->x_shape[2] = 5;
    } else {
        info->x_dtype = CT_F32;
        info->x_ndim = 1;
        info->x_shape[0] = 2;
    }
    info->y_dtype = CT_I64;
    info->n_classes = n;
    *self = t;
    return CT_OK;
}

static ct_status toy_get(const void *self, int64_t i, void *x, void *y) {
    const toy *t = self;
    if (t->image) {
        unsigned char *px = x;
        for (int k = 0; k < 40; k++)
            px[k] = (unsigned char)((i * 7 + k) % 251);
    } else {
        float *fx = x;
        fx[0] = (float)i;
        fx[1] = (float)i + 0.5f;
    }
    *(int64_t *)y = i;
    return CT_OK;
}

static void toy_close(ct_ctx *ctx, void *self) {
    ct_free(ctx, self, sizeof(toy));
}

static const ct_dataset_vtable toy_vt = {0, "toy", toy_open, toy_get, toy_close, NULL, NULL, NULL};

static ct_ctx *ctx;

static ct_dataset *toy_dataset(int64_t n, bool image) {
    char nbuf[32];
    snprintf(nbuf, sizeof nbuf, "%lld", (long long)n);
    ct_option items[2] = {{"n", nbuf}, {"image", image ? "true" : "false"}};
    ct_options o = {items, 2, "test"};
    ct_dataset *ds = NULL;
    if (ct_dataset_open_with(ctx, &toy_vt, &o, &ds) != CT_OK) {
        fprintf(stderr, "%s\n", ct_last_error(ctx));
        abort();
    }
    return ds;
}

/* Reads one epoch's dataset indices from the loader into out; returns the count. */
static int64_t read_epoch(ct_loader *l, int64_t *out) {
    ct_batch b;
    int64_t k = 0;
    while (ct_loader_next(l, &b) == CT_OK && b.size > 0) {
        for (int64_t i = 0; i < b.size; i++) {
            out[k++] = b.index[i];
            CT_CHECK(((int64_t *)b.y.data)[i] == b.index[i]);
        }
    }
    return k;
}

static void loader_should_cover_an_epoch_and_reshuffle_per_epoch(void) {
    ct_dataset *ds = toy_dataset(23, false);
    ct_loader_params p = ct_loader_default_params();
    p.batch_size = 5;
    p.seed = 7;
    ct_loader *l;
    CT_CHECK_INT(ct_loader_create(ctx, ds, &p, &l), CT_OK);
    CT_CHECK_INT(ct_loader_batches_per_epoch(l), 5);
    int64_t e0[23], e1[23], seen[23] = {0};
    CT_CHECK_INT(read_epoch(l, e0), 23);
    CT_CHECK_INT(read_epoch(l, e1), 23);
    for (int i = 0; i < 23; i++)
        seen[e0[i]]++;
    for (int i = 0; i < 23; i++)
        CT_CHECK_INT(seen[i], 1);
    CT_CHECK(memcmp(e0, e1, sizeof e0) != 0); /* a new order each epoch */
    /* the same seed gives the same orders, and they match ct_loader_epoch_indices */
    ct_loader *l2;
    CT_CHECK_INT(ct_loader_create(ctx, ds, &p, &l2), CT_OK);
    int64_t f0[23], want[23];
    read_epoch(l2, f0);
    CT_CHECK(memcmp(e0, f0, sizeof e0) == 0);
    CT_CHECK_INT(ct_loader_epoch_indices(l2, 1, want), CT_OK);
    CT_CHECK(memcmp(e1, want, sizeof e1) == 0);
    ct_loader_destroy(l2);
    /* no shuffle: dataset order; drop_last drops the partial batch */
    p.shuffle = false;
    p.drop_last = true;
    CT_CHECK_INT(ct_loader_create(ctx, ds, &p, &l2), CT_OK);
    CT_CHECK_INT(read_epoch(l2, f0), 20);
    for (int i = 0; i < 20; i++)
        CT_CHECK_INT(f0[i], i);
    ct_loader_destroy(l2);
    ct_loader_destroy(l);
    ct_dataset_close(ds);
}

static void loader_should_shard_exactly(void) {
    int64_t sizes[] = {1, 7, 10, 13, 24};
    for (int si = 0; si < 5; si++) {
        int64_t n = sizes[si];
        ct_dataset *ds = toy_dataset(n, false);
        int64_t single[32] = {0}; /* the one-process evaluation order (w = 1 comes first) */
        for (int64_t w = 1; w <= 5; w++) {
            for (int mode = 0; mode < CT_SHARD_MODE_COUNT; mode++) {
                int64_t count[32] = {0}, total = 0, per[5], joined[32] = {0};
                for (int64_t r = 0; r < w; r++) {
                    ct_loader_params p = ct_loader_default_params();
                    p.batch_size = 3;
                    p.seed = 3;
                    p.rank = r;
                    p.world_size = w;
                    p.shard = (ct_shard_mode)mode;
                    p.prefetch = 0;
                    ct_loader *l;
                    CT_CHECK_INT(ct_loader_create(ctx, ds, &p, &l), CT_OK);
                    int64_t idx[32];
                    per[r] = read_epoch(l, idx);
                    CT_CHECK_INT(per[r], ct_loader_samples_per_epoch(l));
                    for (int64_t k = 0; k < per[r]; k++) {
                        count[idx[k]]++;
                        if (total + k < 32) joined[total + k] = idx[k];
                    }
                    total += per[r];
                    ct_loader_destroy(l);
                }
                for (int64_t r = 1; r < w; r++) {
                    if (mode == CT_SHARD_EVAL) /* whole batches of 3, counts within one batch */
                        CT_CHECK((per[r] + 2) / 3 == (per[0] + 2) / 3 ||
                                 (per[r] + 2) / 3 == (per[0] + 2) / 3 - 1);
                    else
                        CT_CHECK_INT(per[r], per[0]);
                }
                if (mode == CT_SHARD_EVAL) {
                    /* the ranks' shards, joined in rank order, are one process's epoch: every
                     * batch is the batch one process evaluates */
                    for (int64_t r = 0; r + 1 < w; r++)
                        if (per[r + 1] > 0) CT_CHECK_INT(per[r] % 3, 0);
                    if (w == 1)
                        memcpy(single, joined, sizeof single);
                    else
                        for (int64_t k = 0; k < n && k < 32; k++)
                            CT_CHECK_INT(joined[k], single[k]);
                }
                if (mode == CT_SHARD_TRAIN_DROP) {
                    CT_CHECK_INT(total, n - n % w);
                    for (int64_t i = 0; i < n; i++)
                        CT_CHECK(count[i] <= 1); /* disjoint */
                } else if (mode == CT_SHARD_TRAIN_PAD) {
                    CT_CHECK_INT(total, (n + w - 1) / w * w);
                    for (int64_t i = 0; i < n; i++)
                        CT_CHECK(count[i] >= 1); /* covered */
                } else {
                    CT_CHECK_INT(total, n);
                    for (int64_t i = 0; i < n; i++)
                        CT_CHECK_INT(count[i], 1); /* exactly once */
                }
            }
        }
        ct_dataset_close(ds);
    }
}

typedef struct record {
    int64_t epoch, number, size;
    int64_t index[8];
    float x[8 * 40];
} record;

static int64_t run_batches(ct_loader *l, record *out, int64_t count) {
    int64_t k = 0;
    while (k < count) {
        ct_batch b;
        if (ct_loader_next(l, &b) != CT_OK) break;
        out[k].epoch = b.epoch;
        out[k].number = b.number;
        out[k].size = b.size;
        memset(out[k].index, 0, sizeof out[k].index);
        memset(out[k].x, 0, sizeof out[k].x);
        if (b.size > 0) {
            memcpy(out[k].index, b.index, (size_t)b.size * sizeof(int64_t));
            memcpy(out[k].x, b.x.data, ct_tensor_nbytes(&b.x));
        }
        k++;
    }
    return k;
}

static void loader_should_resume_exactly_after_restore(void) {
    ct_dataset *ds = toy_dataset(19, true);
    for (int pf = 0; pf <= 2; pf += 2) {
        ct_loader_params p = ct_loader_default_params();
        p.batch_size = 4;
        p.seed = 11;
        p.prefetch = pf;
        p.n_transforms = 3;
        p.transforms[0].kind = CT_TRANSFORM_SCALE;
        p.transforms[0].a = 1.0f / 255.0f;
        p.transforms[1].kind = CT_TRANSFORM_RANDOM_CROP;
        p.transforms[1].pad = 1;
        p.transforms[2].kind = CT_TRANSFORM_HFLIP;
        p.transforms[2].p = 0.5f;
        enum { TOTAL = 20 }; /* 5 batches + end marker per epoch: more than 3 epochs */
        static record full[TOTAL], part[TOTAL];
        ct_loader *l;
        CT_CHECK_INT(ct_loader_create(ctx, ds, &p, &l), CT_OK);
        CT_CHECK_INT(run_batches(l, full, TOTAL), TOTAL);
        ct_loader_destroy(l);
        /* cut after k items: 0 (start), 2 (mid-epoch), 5 (after the last batch, before the
         * end marker), 6 (at the epoch boundary), 9 (mid second epoch), 17 */
        int64_t cuts[] = {0, 2, 5, 6, 9, 17};
        for (int c = 0; c < 6; c++) {
            int64_t k = cuts[c];
            CT_CHECK_INT(ct_loader_create(ctx, ds, &p, &l), CT_OK);
            run_batches(l, part, k);
            ct_loader_state st = ct_loader_get_state(l);
            ct_loader_destroy(l);
            /* a fresh loader restored to that position continues like the uninterrupted one */
            CT_CHECK_INT(ct_loader_create(ctx, ds, &p, &l), CT_OK);
            CT_CHECK_INT(ct_loader_set_state(l, &st), CT_OK);
            int64_t got = run_batches(l, part, TOTAL - k);
            CT_CHECK_INT(got, TOTAL - k);
            /* exactly the rest of the uninterrupted sequence, end-of-epoch markers included */
            for (int64_t i = 0; i + k < TOTAL && i < got; i++)
                CT_CHECK_MSG(
                    full[i + k].epoch == part[i].epoch && full[i + k].number == part[i].number &&
                        full[i + k].size == part[i].size &&
                        memcmp(full[i + k].index, part[i].index, sizeof part[i].index) == 0 &&
                        memcmp(full[i + k].x, part[i].x, sizeof part[i].x) == 0,
                    "prefetch %d, cut %lld: item %lld differs", pf, (long long)k, (long long)i);
            ct_loader_destroy(l);
        }
        /* a position for another seed is refused */
        CT_CHECK_INT(ct_loader_create(ctx, ds, &p, &l), CT_OK);
        ct_loader_state bad = {0, 0, 12, 0};
        CT_CHECK_INT(ct_loader_set_state(l, &bad), CT_ERR_INVALID_ARG);
        bad.seed = 11;
        bad.next_batch = 99;
        CT_CHECK_INT(ct_loader_set_state(l, &bad), CT_ERR_INVALID_ARG);
        ct_loader_destroy(l);
    }
    ct_dataset_close(ds);
}

/* Resume on sharded loaders too: rank 1 of 2 with drop_last, and an empty eval shard. */
static void loader_should_resume_on_shards_and_empty_ranks(void) {
    struct {
        int64_t n, world, rank;
        ct_shard_mode shard;
        bool drop_last;
    } cases[] = {{19, 2, 1, CT_SHARD_TRAIN_DROP, true},
                 {19, 3, 2, CT_SHARD_TRAIN_PAD, false},
                 {1, 3, 2, CT_SHARD_EVAL, false}};
    for (int c = 0; c < 3; c++) {
        ct_dataset *ds = toy_dataset(cases[c].n, true);
        ct_loader_params p = ct_loader_default_params();
        p.batch_size = 4;
        p.seed = 3;
        p.world_size = cases[c].world;
        p.rank = cases[c].rank;
        p.shard = cases[c].shard;
        p.drop_last = cases[c].drop_last;
        p.prefetch = c == 1 ? 0 : 2;
        enum { TOTAL = 12 };
        static record full[TOTAL], part[TOTAL];
        ct_loader *l;
        CT_CHECK_INT(ct_loader_create(ctx, ds, &p, &l), CT_OK);
        CT_CHECK_INT(run_batches(l, full, TOTAL), TOTAL);
        ct_loader_destroy(l);
        for (int64_t k = 0; k < TOTAL; k++) {
            CT_CHECK_INT(ct_loader_create(ctx, ds, &p, &l), CT_OK);
            run_batches(l, part, k);
            ct_loader_state st = ct_loader_get_state(l);
            ct_loader_destroy(l);
            CT_CHECK_INT(ct_loader_create(ctx, ds, &p, &l), CT_OK);
            CT_CHECK_INT(ct_loader_set_state(l, &st), CT_OK);
            int64_t got = run_batches(l, part, TOTAL - k);
            for (int64_t i = 0; i < got; i++)
                CT_CHECK_MSG(
                    full[i + k].epoch == part[i].epoch && full[i + k].number == part[i].number &&
                        full[i + k].size == part[i].size &&
                        memcmp(full[i + k].index, part[i].index, sizeof part[i].index) == 0,
                    "case %d, cut %lld: item %lld differs", c, (long long)k, (long long)i);
            ct_loader_destroy(l);
        }
        ct_dataset_close(ds);
    }
}

/* N loaders (ranks of one run) read k batches each; M loaders placed by ct_loader_state_at at
 * the position they saved read the rest of the epoch: every sample of the epoch exactly once,
 * whatever N and M, when both share the global batch. */
static void loader_should_continue_an_epoch_on_another_world_size(void) {
    enum { N_SAMPLES = 24, GLOBAL = 6 };
    ct_dataset *ds = toy_dataset(N_SAMPLES, true);
    int64_t worlds[] = {1, 2, 3};
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 3; b++)
            for (int64_t k = 0; k <= N_SAMPLES / GLOBAL; k++) {
                int64_t seen[N_SAMPLES] = {0}, sample = -1;
                for (int64_t r = 0; r < worlds[a]; r++) {
                    ct_loader_params p = ct_loader_default_params();
                    p.batch_size = GLOBAL / worlds[a];
                    p.seed = 9;
                    p.world_size = worlds[a];
                    p.rank = r;
                    ct_loader *l;
                    CT_CHECK_INT(ct_loader_create(ctx, ds, &p, &l), CT_OK);
                    ct_batch bt;
                    for (int64_t i = 0; i < k; i++) {
                        CT_CHECK_INT(ct_loader_next(l, &bt), CT_OK);
                        for (int64_t j = 0; j < bt.size; j++)
                            seen[bt.index[j]]++;
                    }
                    sample = ct_loader_get_state(l).sample; /* after the last: the epoch's end */
                    ct_loader_destroy(l);
                }
                CT_CHECK_INT(sample, k * GLOBAL);
                for (int64_t r = 0; r < worlds[b]; r++) {
                    ct_loader_params p = ct_loader_default_params();
                    p.batch_size = GLOBAL / worlds[b];
                    p.seed = 9;
                    p.world_size = worlds[b];
                    p.rank = r;
                    ct_loader *l;
                    ct_loader_state st;
                    CT_CHECK_INT(ct_loader_create(ctx, ds, &p, &l), CT_OK);
                    CT_CHECK_INT(ct_loader_state_at(l, 0, sample, &st), CT_OK);
                    CT_CHECK_INT(ct_loader_set_state(l, &st), CT_OK);
                    ct_batch bt;
                    while (ct_loader_next(l, &bt) == CT_OK && bt.size > 0 && bt.epoch == 0)
                        for (int64_t j = 0; j < bt.size; j++)
                            seen[bt.index[j]]++;
                    ct_loader_destroy(l);
                }
                for (int64_t i = 0; i < N_SAMPLES; i++)
                    CT_CHECK_MSG(seen[i] == 1,
                                 "%lld -> %lld ranks after %lld batches: sample %lld "
                                 "read %lld times",
                                 (long long)worlds[a], (long long)worlds[b], (long long)k,
                                 (long long)i, (long long)seen[i]);
            }
    /* a position inside a global batch of the new geometry is refused */
    ct_loader_params p = ct_loader_default_params();
    p.batch_size = 4;
    ct_loader *l;
    ct_loader_state st;
    CT_CHECK_INT(ct_loader_create(ctx, ds, &p, &l), CT_OK);
    CT_CHECK_INT(ct_loader_state_at(l, 0, 6, &st), CT_ERR_INVALID_ARG);
    CT_CHECK_INT(ct_loader_state_at(l, 0, 8, &st), CT_OK);
    CT_CHECK_INT(st.next_batch, 2);
    CT_CHECK_INT(ct_loader_state_at(l, 0, N_SAMPLES, &st), CT_OK);
    CT_CHECK_INT(st.next_batch, ct_loader_batches_per_epoch(l));
    ct_loader_destroy(l);
    ct_dataset_close(ds);
}

static void prefetch_should_not_change_batches(void) {
    ct_dataset *ds = toy_dataset(37, true);
    static record a[30], b[30];
    for (int pf = 0; pf < 2; pf++) {
        ct_loader_params p = ct_loader_default_params();
        p.batch_size = 8;
        p.seed = 5;
        p.prefetch = pf ? 3 : 0;
        p.n_transforms = 1;
        p.transforms[0].kind = CT_TRANSFORM_HFLIP;
        p.transforms[0].p = 0.5f;
        ct_loader *l;
        CT_CHECK_INT(ct_loader_create(ctx, ds, &p, &l), CT_OK);
        CT_CHECK_INT(run_batches(l, pf ? b : a, 30), 30);
        ct_loader_destroy(l);
    }
    CT_CHECK(memcmp(a, b, sizeof a) == 0);
    ct_dataset_close(ds);
}

static void transforms_should_compute_documented_values(void) {
    ct_dataset *ds = toy_dataset(4, true);
    ct_loader_params p = ct_loader_default_params();
    p.batch_size = 4;
    p.shuffle = false;
    p.prefetch = 0;
    ct_loader *plain;
    CT_CHECK_INT(ct_loader_create(ctx, ds, &p, &plain), CT_OK);
    ct_batch b0;
    CT_CHECK_INT(ct_loader_next(plain, &b0), CT_OK);
    static float raw[4 * 40];
    memcpy(raw, b0.x.data, sizeof raw);
    CT_CHECK_INT(b0.x.ndim, 4);
    CT_CHECK_INT(b0.x.shape[0], 4);
    CT_CHECK_INT(b0.x.shape[3], 5);
    CT_CHECK(raw[40 + 3] == (float)((7 + 3) % 251)); /* sample 1, pixel 3 */
    ct_loader_destroy(plain);
    /* scale then normalize per channel */
    p.n_transforms = 2;
    p.transforms[0].kind = CT_TRANSFORM_SCALE;
    p.transforms[0].a = 0.5f;
    p.transforms[0].b = 1.0f;
    p.transforms[1].kind = CT_TRANSFORM_NORMALIZE;
    p.transforms[1].mean[0] = 1.0f;
    p.transforms[1].mean[1] = 2.0f;
    p.transforms[1].std[0] = 2.0f;
    p.transforms[1].std[1] = 4.0f;
    ct_loader *l;
    CT_CHECK_INT(ct_loader_create(ctx, ds, &p, &l), CT_OK);
    ct_batch b;
    CT_CHECK_INT(ct_loader_next(l, &b), CT_OK);
    const float *x = b.x.data;
    CT_CHECK_CLOSE(x[2], ((raw[2] * 0.5f + 1.0f) - 1.0f) / 2.0f, 1e-6, 0);
    CT_CHECK_CLOSE(x[20 + 2], ((raw[20 + 2] * 0.5f + 1.0f) - 2.0f) / 4.0f, 1e-6, 0);
    ct_loader_destroy(l);
    /* flip with p = 1 mirrors every row; crop with pad 0 is the identity */
    p.n_transforms = 2;
    p.transforms[0].kind = CT_TRANSFORM_HFLIP;
    p.transforms[0].p = 1.0f;
    p.transforms[1].kind = CT_TRANSFORM_RANDOM_CROP;
    p.transforms[1].pad = 0;
    CT_CHECK_INT(ct_loader_create(ctx, ds, &p, &l), CT_OK);
    CT_CHECK_INT(ct_loader_next(l, &b), CT_OK);
    x = b.x.data;
    for (int row = 0; row < 8; row++)
        for (int j = 0; j < 5; j++)
            CT_CHECK(x[row * 5 + j] == raw[row * 5 + 4 - j]);
    ct_loader_destroy(l);
    /* a crop shifts content and fills zeros: every value is 0 or one of the sample's pixels */
    p.n_transforms = 1;
    p.transforms[0].kind = CT_TRANSFORM_RANDOM_CROP;
    p.transforms[0].pad = 2;
    CT_CHECK_INT(ct_loader_create(ctx, ds, &p, &l), CT_OK);
    CT_CHECK_INT(ct_loader_next(l, &b), CT_OK);
    x = b.x.data;
    int zeros = 0;
    for (int k = 0; k < 160; k++)
        zeros += x[k] == 0.0f;
    CT_CHECK(zeros < 160);
    ct_loader_destroy(l);
    ct_dataset_close(ds);
}

static void loader_should_map_labels_and_one_hot_encode(void) {
    ct_dataset *ds = toy_dataset(6, false); /* y = i, n_classes = 6 */
    ct_loader_params p = ct_loader_default_params();
    p.batch_size = 6;
    p.shuffle = false;
    p.prefetch = 0;
    int64_t map[6] = {0, 0, 1, 1, 2, 2}; /* merge pairs of classes */
    p.label_map = map;
    p.label_map_len = 6;
    ct_loader *l;
    CT_CHECK_INT(ct_loader_create(ctx, ds, &p, &l), CT_OK);
    map[0] = 5; /* the loader keeps its own copy */
    ct_batch b;
    CT_CHECK_INT(ct_loader_next(l, &b), CT_OK);
    const int64_t *y = b.y.data;
    CT_CHECK(y[0] == 0 && y[3] == 1 && y[5] == 2);
    ct_loader_destroy(l);
    map[0] = 0;
    p.one_hot = true;
    CT_CHECK_INT(ct_loader_create(ctx, ds, &p, &l), CT_OK);
    CT_CHECK_INT(ct_loader_next(l, &b), CT_OK);
    CT_CHECK_INT(b.y.dtype, CT_F32);
    CT_CHECK_INT(b.y.ndim, 2);
    CT_CHECK_INT(b.y.shape[1], 3);
    const float *oh = b.y.data;
    CT_CHECK(oh[3 * 3 + 1] == 1.0f && oh[3 * 3 + 0] == 0.0f && oh[3 * 3 + 2] == 0.0f);
    ct_loader_destroy(l);
    /* one-hot without a map uses the dataset's classes */
    p.label_map = NULL;
    p.label_map_len = 0;
    CT_CHECK_INT(ct_loader_create(ctx, ds, &p, &l), CT_OK);
    CT_CHECK_INT(ct_loader_next(l, &b), CT_OK);
    CT_CHECK_INT(b.y.shape[1], 6);
    CT_CHECK(((const float *)b.y.data)[5 * 6 + 5] == 1.0f);
    ct_loader_destroy(l);
    /* a map too short for the data fails the batch, naming the sample, until repositioned */
    p.label_map = map;
    p.label_map_len = 4;
    p.one_hot = false;
    CT_CHECK_INT(ct_loader_create(ctx, ds, &p, &l), CT_OK);
    CT_CHECK_INT(ct_loader_next(l, &b), CT_ERR_CONFIG);
    CT_CHECK(strstr(ct_last_error(ctx),
                    "class 4 of sample 4 (epoch 0, batch 0) is outside label_map [0, 4)") != NULL);
    CT_CHECK_INT(ct_loader_next(l, &b), CT_ERR_CONFIG);
    CT_CHECK(strstr(ct_last_error(ctx), "an earlier read failed") != NULL);
    ct_loader_destroy(l);
    map[1] = -2;
    p.label_map_len = 6;
    CT_CHECK_INT(ct_loader_create(ctx, ds, &p, &l), CT_ERR_CONFIG);
    CT_CHECK(strstr(ct_last_error(ctx), "label_map[1] = -2") != NULL);
    ct_dataset_close(ds);
}

static void standardize_should_use_training_statistics_only(void) {
    ct_dataset *all = toy_dataset(50, false); /* x = (i, i + 0.5) */
    ct_dataset *train, *valid;
    CT_CHECK_INT(ct_dataset_split(all, 0.3, 9, &train, &valid), CT_OK);
    ct_dataset *strain, *svalid;
    CT_CHECK_INT(ct_dataset_standardize(train, train, NULL, NULL, &strain), CT_OK);
    const float *mean, *sd;
    int64_t n;
    CT_CHECK_INT(ct_dataset_standardize_stats(strain, &mean, &sd, &n), CT_OK);
    CT_CHECK_INT(n, 2);
    /* the training part's own statistics, by hand */
    int64_t nt = ct_dataset_info_of(train)->n;
    double m = 0.0, v = 0.0;
    float x[2];
    int64_t y;
    for (int64_t i = 0; i < nt; i++) {
        ct_dataset_get(train, i, x, &y);
        m += x[0];
    }
    m /= (double)nt;
    for (int64_t i = 0; i < nt; i++) {
        ct_dataset_get(train, i, x, &y);
        v += (x[0] - m) * (x[0] - m);
    }
    v = sqrt(v / (double)nt);
    CT_CHECK_CLOSE(mean[0], m, 1e-5, 1e-6);
    CT_CHECK_CLOSE(mean[1], m + 0.5, 1e-5, 1e-6);
    CT_CHECK_CLOSE(sd[0], v, 1e-5, 1e-6);
    /* validation data is standardised with the training statistics, restored from numbers */
    CT_CHECK_INT(ct_dataset_standardize(valid, NULL, mean, sd, &svalid), CT_OK);
    float raw[2], z[2];
    ct_dataset_get(valid, 3, raw, &y);
    ct_dataset_get(svalid, 3, z, &y);
    CT_CHECK_CLOSE(z[1], (raw[1] - mean[1]) / sd[1], 1e-6, 1e-6);
    /* standardised training features have mean 0 and std 1 */
    double zm = 0.0, zv = 0.0;
    for (int64_t i = 0; i < nt; i++) {
        ct_dataset_get(strain, i, z, &y);
        zm += z[0];
        zv += (double)z[0] * z[0];
    }
    CT_CHECK_CLOSE(zm / (double)nt, 0.0, 1e-5, 0);
    CT_CHECK_CLOSE(zv / (double)nt, 1.0, 1e-4, 0);
    CT_CHECK_INT(ct_dataset_standardize_stats(train, &mean, &sd, &n), CT_ERR_INVALID_ARG);
    CT_CHECK(mean == NULL && sd == NULL && n == 0);
    /* statistics from a dataset with other (larger) targets: only features are compared */
    ct_option li[] = {{"kind", "linear"}, {"n", "10"}, {"features", "2"}, {"outputs", "40"}};
    ct_options lo = {li, 4, "test"};
    ct_dataset *lin, *sv;
    CT_CHECK_INT(ct_dataset_open(ctx, "synthetic", &lo, &lin), CT_OK);
    CT_CHECK_INT(ct_dataset_standardize(all, lin, NULL, NULL, &sv), CT_OK);
    ct_dataset_close(sv);
    ct_dataset_close(lin);
    ct_dataset *img = toy_dataset(4, true), *bad = (ct_dataset *)1;
    CT_CHECK_INT(ct_dataset_standardize(img, img, NULL, NULL, &bad), CT_ERR_CONFIG);
    CT_CHECK(bad == NULL);
    CT_CHECK(strstr(ct_last_error(ctx), "features must be f32") != NULL);
    ct_dataset_close(img);
    ct_dataset_close(svalid);
    ct_dataset_close(strain);
    ct_dataset_close(valid);
    ct_dataset_close(train);
    ct_dataset_close(all);
}

static void loader_should_not_allocate_in_the_steady_state(void) {
    test_alloc ta = {0};
    ct_ctx_params cp = ct_ctx_default_params();
    cp.allocator = test_allocator(&ta);
    ct_ctx *c2;
    CT_CHECK_INT(ct_ctx_create(&cp, &c2), CT_OK);
    ct_option items[1] = {{"n", "100"}};
    ct_options o = {items, 1, "test"};
    ct_dataset *ds;
    CT_CHECK_INT(ct_dataset_open_with(c2, &toy_vt, &o, &ds), CT_OK);
    ct_loader_params p = ct_loader_default_params();
    p.batch_size = 7;
    ct_loader *l;
    CT_CHECK_INT(ct_loader_create(c2, ds, &p, &l), CT_OK);
    long long before = ta.n_alloc;
    ct_batch b;
    for (int i = 0; i < 100; i++)
        CT_CHECK_INT(ct_loader_next(l, &b), CT_OK);
    CT_CHECK_INT(ta.n_alloc, before);
    ct_loader_destroy(l);
    ct_dataset_close(ds);
    ct_ctx_destroy(c2);
    CT_CHECK_INT(ta.live, 0);
}

static void loader_should_reject_bad_parameters(void) {
    ct_dataset *ds = toy_dataset(10, false);
    ct_loader_params p = ct_loader_default_params();
    ct_loader *l = (ct_loader *)1;
    p.batch_size = 0;
    CT_CHECK_INT(ct_loader_create(ctx, ds, &p, &l), CT_ERR_CONFIG);
    CT_CHECK(l == NULL);
    CT_CHECK(strstr(ct_last_error(ctx), "batch_size must be >= 1") != NULL);
    p = ct_loader_default_params();
    p.rank = 3;
    p.world_size = 3;
    CT_CHECK_INT(ct_loader_create(ctx, ds, &p, &l), CT_ERR_CONFIG);
    p = ct_loader_default_params();
    p.n_transforms = 1;
    p.transforms[0].kind = CT_TRANSFORM_HFLIP;
    p.transforms[0].p = 0.5f;
    CT_CHECK_INT(ct_loader_create(ctx, ds, &p, &l), CT_ERR_CONFIG); /* 1-D samples */
    CT_CHECK(strstr(ct_last_error(ctx), "crop and flip need image samples") != NULL);
    p.transforms[0].kind = CT_TRANSFORM_NORMALIZE; /* std 0 */
    CT_CHECK_INT(ct_loader_create(ctx, ds, &p, &l), CT_ERR_CONFIG);
    ct_dataset_close(ds);
    /* unknown option keys of a dataset type are named with the known ones */
    ct_option items[1] = {{"nn", "5"}};
    ct_options o = {items, 1, "exp.yaml: data.train"};
    ct_dataset *bad = (ct_dataset *)1;
    CT_CHECK_INT(ct_dataset_open_with(ctx, &toy_vt, &o, &bad), CT_ERR_CONFIG);
    CT_CHECK(bad == NULL);
    CT_CHECK(
        strstr(ct_last_error(ctx),
               "exp.yaml: data.train: unknown key 'nn' (did you mean 'n'?) (known: n, image)") !=
        NULL);
}

int main(void) {
    ct_ctx_params cp = ct_ctx_default_params();
    if (ct_ctx_create(&cp, &ctx) != CT_OK) return 1;
    CT_RUN(loader_should_cover_an_epoch_and_reshuffle_per_epoch);
    CT_RUN(loader_should_shard_exactly);
    CT_RUN(loader_should_resume_exactly_after_restore);
    CT_RUN(loader_should_resume_on_shards_and_empty_ranks);
    CT_RUN(loader_should_continue_an_epoch_on_another_world_size);
    CT_RUN(prefetch_should_not_change_batches);
    CT_RUN(transforms_should_compute_documented_values);
    CT_RUN(loader_should_map_labels_and_one_hot_encode);
    CT_RUN(standardize_should_use_training_statistics_only);
    CT_RUN(loader_should_not_allocate_in_the_steady_state);
    CT_RUN(loader_should_reject_bad_parameters);
    ct_ctx_destroy(ctx);
    return ct_test_finish();
}
