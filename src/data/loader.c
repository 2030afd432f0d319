/*
 * loader.c - batches from a dataset: per-epoch shuffling from (seed, epoch), exact sharding over
 * ranks, per-sample transforms, prefetching on a background thread, and a saveable position.
 *
 * Every batch is a pure function of (seed, epoch, batch number): the epoch's order comes from
 * a Philox stream split by epoch, and each sample's augmentation from a stream split by
 * (epoch, dataset index). So the prefetch thread's timing, a restore, or a different number of
 * compute threads never changes what a step sees.
 *
 * Threads: with prefetch > 0 a producer thread fills a ring of prefetch + 1 batch slots, all
 * allocated at create; the consumer (ct_loader_next) hands out one slot at a time and releases
 * it on the next call. The producer reads the dataset through its vtable's get, which must be
 * thread-safe and must not touch the context (the built-in datasets only copy from memory).
 * The context's error message is written by the consumer's thread only.
 *
 * Ownership: the loader borrows the dataset; it owns its slots, order buffers and thread.
 */
#include <pthread.h>
#include <string.h>

#include "data/data_internal.h"

#define STREAM_ORDER 0x6F72646572ull /* "order" */
#define STREAM_AUG   0x617567ull     /* "aug" */

typedef struct slot {
    unsigned char *x, *y; /* [B, sample] in the output dtypes */
    int64_t *index;       /* [B] dataset indices */
    int64_t size, epoch, number;
    ct_status status;
    int64_t failed_index;  /* the sample whose read failed */
    const char *bad_where; /* a class outside label_map or the one-hot classes, else NULL */
    int64_t bad_class, bad_limit;
} slot;

struct ct_loader {
    ct_ctx *ctx;
    const ct_dataset *ds;
    ct_loader_params p;
    int64_t n;           /* dataset samples */
    int64_t per_rank;    /* samples this rank reads per epoch */
    int64_t batches;     /* per epoch */
    size_t x_row, y_row; /* output bytes per sample */
    size_t raw_row;      /* dataset bytes per sample (features) */
    int64_t *label_map;  /* owned copy of p.label_map, or NULL */
    int64_t n_classes;   /* after mapping */
    ct_dtype y_dtype;    /* CT_F32 with one_hot, else the dataset's */
    int64_t raw_label;   /* one raw class index (producer) */
    int32_t x_ndim;
    int64_t x_shape[CT_MAX_DIMS];
    ct_dtype x_dtype;
    /* producer-side buffers */
    int64_t *order;      /* [n] the epoch's permutation (producer) */
    int64_t order_epoch; /* which epoch `order` holds; -1 none */
    unsigned char *raw;  /* one raw sample (producer) */
    float *tmp;          /* one f32 sample (transform scratch) */
    /* ring */
    slot *slots;
    int64_t n_slots;
    int64_t produced, consumed;   /* batches produced into / released from the ring */
    int64_t prod_epoch, prod_num; /* position of the next batch to produce */
    int64_t cons_epoch, cons_num; /* position of the next batch to hand out */
    bool holding;                 /* the consumer holds slot (consumed % n_slots) */
    ct_status failed;             /* a read failed: next() refuses until set_state */
    /* thread */
    bool threaded, running, stop;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
};

ct_loader_params ct_loader_default_params(void) {
    ct_loader_params p;
    memset(&p, 0, sizeof p);
    p.batch_size = 32;
    p.shuffle = true;
    p.world_size = 1;
    p.shard = CT_SHARD_TRAIN_DROP;
    p.prefetch = 2;
    p.to_f32 = true;
    return p;
}

/* ---- which samples, in which order ---- */

static void epoch_order(const ct_loader *l, int64_t epoch, int64_t *order) {
    int64_t n = l->n;
    for (int64_t i = 0; i < n; i++)
        order[i] = i;
    if (!l->p.shuffle || n < 2) return;
    ct_rng base = ct_rng_init(l->p.seed, STREAM_ORDER);
    ct_rng r = ct_rng_split(&base, (uint64_t)epoch);
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)ct_rng_below(&r, (uint64_t)i + 1);
        int64_t t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
}

/*
 * Evaluation shards are runs of whole batches: the order cut into batches as one process cuts
 * it, rank r taking a contiguous run of them (runs differ by at most one batch). Each batch is
 * then the one a single process evaluates, so even per-batch reductions (the mean loss) give
 * the same bits. Samples [*start, *end) of the order are rank r's.
 */
static void eval_shard(const ct_loader_params *p, int64_t n, int64_t *start, int64_t *end) {
    int64_t w = p->world_size, r = p->rank, bs = p->batch_size;
    int64_t nb = (n + bs - 1) / bs, base = nb / w, rem = nb % w;
    int64_t first = r * base + (r < rem ? r : rem), count = base + (r < rem ? 1 : 0);
    *start = first * bs < n ? first * bs : n;
    *end = (first + count) * bs < n ? (first + count) * bs : n;
}

/* Position k (0 <= k < per_rank) of this rank's share of an epoch's order. */
static int64_t shard_index(const ct_loader *l, const int64_t *order, int64_t k) {
    int64_t w = l->p.world_size, r = l->p.rank;
    if (l->p.shard == CT_SHARD_EVAL) {
        int64_t start, end;
        eval_shard(&l->p, l->n, &start, &end);
        return order[start + k];
    }
    /* training: strided, as PyTorch's DistributedSampler; PAD wraps around the order */
    return order[(k * w + r) % l->n];
}

static int64_t compute_per_rank(const ct_loader_params *p, int64_t n) {
    int64_t w = p->world_size;
    switch (p->shard) {
    case CT_SHARD_TRAIN_DROP:
        return n / w;
    case CT_SHARD_TRAIN_PAD:
        return n == 0 ? 0 : (n + w - 1) / w;
    case CT_SHARD_EVAL: {
        int64_t start, end;
        eval_shard(p, n, &start, &end);
        return end - start;
    }
    case CT_SHARD_MODE_COUNT:
        break;
    }
    return 0;
}

/* ---- transforms ---- */

CT_HOT static void apply_transforms(const ct_loader *l, float *x, int64_t epoch, int64_t index) {
    int64_t c = l->x_ndim >= 1 ? l->x_shape[0] : 1;
    int64_t h = l->x_ndim >= 2 ? l->x_shape[l->x_ndim - 2] : 1;
    int64_t w = l->x_ndim >= 1 ? l->x_shape[l->x_ndim - 1] : 1;
    int64_t numel = 1;
    for (int32_t d = 0; d < l->x_ndim; d++)
        numel *= l->x_shape[d];
    int64_t plane = c > 0 ? numel / c : 0;
    ct_rng base = ct_rng_init(l->p.seed, STREAM_AUG);
    ct_rng per_epoch = ct_rng_split(&base, (uint64_t)epoch);
    ct_rng r = ct_rng_split(&per_epoch, (uint64_t)index);
    for (int32_t t = 0; t < l->p.n_transforms; t++) {
        const ct_transform *tf = &l->p.transforms[t];
        switch (tf->kind) {
        case CT_TRANSFORM_SCALE:
            for (int64_t i = 0; i < numel; i++)
                x[i] = x[i] * tf->a + tf->b;
            break;
        case CT_TRANSFORM_NORMALIZE:
            for (int64_t ch = 0; ch < c; ch++) {
                float m = tf->mean[ch], inv = 1.0f / tf->std[ch];
                for (int64_t i = 0; i < plane; i++)
                    x[ch * plane + i] = (x[ch * plane + i] - m) * inv;
            }
            break;
        case CT_TRANSFORM_RANDOM_CROP: {
            if (numel == 0) break;
            /* shift by (dy, dx) in [-pad, pad], filling with zeros: pad-then-crop */
            int64_t span = 2 * tf->pad + 1;
            int64_t dy = (int64_t)ct_rng_below(&r, (uint64_t)span) - tf->pad;
            int64_t dx = (int64_t)ct_rng_below(&r, (uint64_t)span) - tf->pad;
            float *tmp = l->tmp;
            memcpy(tmp, x, (size_t)numel * sizeof(float));
            for (int64_t ch = 0; ch < numel / (h * w); ch++)
                for (int64_t i = 0; i < h; i++)
                    for (int64_t j = 0; j < w; j++) {
                        int64_t si = i + dy, sj = j + dx;
                        x[(ch * h + i) * w + j] = (si >= 0 && si < h && sj >= 0 && sj < w)
                                                      ? tmp[(ch * h + si) * w + sj]
                                                      : 0.0f;
                    }
            break;
        }
        case CT_TRANSFORM_HFLIP: {
            if (numel == 0) break;
            float u;
            ct_rng_uniform(&r, &u, 1);
            if (u >= tf->p) break;
            for (int64_t row = 0; row < numel / w; row++)
                for (int64_t j = 0; j < w / 2; j++) {
                    float t2 = x[row * w + j];
                    x[row * w + j] = x[row * w + w - 1 - j];
                    x[row * w + w - 1 - j] = t2;
                }
            break;
        }
        case CT_TRANSFORM_KIND_COUNT:
            break;
        }
    }
}

/* Converts one raw sample to f32. */
CT_HOT static void to_f32(ct_dtype dt, const unsigned char *src, float *dst, int64_t n) {
    switch (dt) {
    case CT_F32:
        memcpy(dst, src, (size_t)n * sizeof(float));
        break;
    case CT_U8:
        for (int64_t i = 0; i < n; i++)
            dst[i] = (float)src[i];
        break;
    case CT_BF16:
        ct_f32_from_bf16_n(dst, (const ct_bf16 *)(const void *)src, n);
        break;
    case CT_I32:
        for (int64_t i = 0; i < n; i++)
            dst[i] = (float)((const int32_t *)(const void *)src)[i];
        break;
    case CT_I64:
        for (int64_t i = 0; i < n; i++)
            dst[i] = (float)((const int64_t *)(const void *)src)[i];
        break;
    case CT_DTYPE_COUNT:
        break;
    }
}

/* Label mapping and one-hot encoding of one class index (producer side). */
static ct_status map_target(const ct_loader *l, slot *s, int64_t c, unsigned char *ydst) {
    s->bad_class = c;
    if (l->label_map) {
        if (c < 0 || c >= l->p.label_map_len) {
            s->bad_where = "label_map";
            s->bad_limit = l->p.label_map_len;
            return CT_ERR_CONFIG;
        }
        c = l->label_map[c];
    }
    if (!l->p.one_hot) {
        memcpy(ydst, &c, sizeof c);
        return CT_OK;
    }
    if (c < 0 || c >= l->n_classes) {
        s->bad_where = "the one-hot classes";
        s->bad_limit = l->n_classes;
        return CT_ERR_CONFIG;
    }
    float *row = (float *)(void *)ydst;
    memset(row, 0, (size_t)l->n_classes * sizeof(float));
    row[c] = 1.0f;
    return CT_OK;
}

/* ---- producing one batch (producer side; touches no context state) ---- */

CT_HOT static void produce(ct_loader *l, slot *s, int64_t epoch, int64_t number) {
    if (l->order_epoch != epoch) {
        epoch_order(l, epoch, l->order);
        l->order_epoch = epoch;
    }
    int64_t b = l->p.batch_size, k0 = number * b;
    int64_t size = l->per_rank - k0 < b ? l->per_rank - k0 : b;
    s->epoch = epoch;
    s->number = number;
    s->size = size;
    s->status = CT_OK;
    s->bad_where = NULL;
    const ct_dataset *ds = l->ds;
    int64_t numel = (int64_t)(l->raw_row / ct_dtype_size(ds->info.x_dtype));
    for (int64_t k = 0; k < size; k++) {
        int64_t idx = shard_index(l, l->order, k0 + k);
        s->index[k] = idx;
        unsigned char *xdst = s->x + (size_t)k * l->x_row;
        unsigned char *ydst = s->y + (size_t)k * l->y_row;
        void *raw = l->p.to_f32 ? (void *)l->raw : (void *)xdst;
        bool map_y = l->label_map || l->p.one_hot;
        ct_status st = ds->vt->get(ds->self, idx, raw, map_y ? (void *)&l->raw_label : ydst);
        if (st == CT_OK && map_y) st = map_target(l, s, l->raw_label, ydst);
        if (st != CT_OK) {
            s->status = st;
            s->failed_index = idx;
            return;
        }
        if (l->p.to_f32) {
            to_f32(ds->info.x_dtype, l->raw, (float *)(void *)xdst, numel);
            if (l->p.n_transforms) apply_transforms(l, (float *)(void *)xdst, epoch, idx);
        }
    }
}

static void advance(const ct_loader *l, int64_t *epoch, int64_t *num) {
    if (++*num >= l->batches) {
        *num = 0;
        ++*epoch;
    }
}

static void *producer_main(void *arg) {
    ct_loader *l = arg;
    pthread_mutex_lock(&l->mu);
    for (;;) {
        while (!l->stop && l->produced - l->consumed >= l->n_slots)
            pthread_cond_wait(&l->cv, &l->mu);
        if (l->stop) break;
        slot *s = &l->slots[l->produced % l->n_slots];
        int64_t e = l->prod_epoch, n = l->prod_num;
        pthread_mutex_unlock(&l->mu);
        produce(l, s, e, n); /* the slot is ours: the consumer does not read it yet */
        pthread_mutex_lock(&l->mu);
        if (l->stop) break;
        advance(l, &l->prod_epoch, &l->prod_num);
        l->produced++;
        pthread_cond_broadcast(&l->cv);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

static ct_status start_thread(ct_loader *l) {
    if (!l->threaded) return CT_OK;
    l->stop = false;
    int rc = pthread_create(&l->thread, NULL, producer_main, l);
    if (rc != 0)
        return CT_FAIL(l->ctx, CT_ERR_INTERNAL, "loader: cannot start the prefetch thread: %s",
                       strerror(rc));
    l->running = true;
    return CT_OK;
}

static void stop_thread(ct_loader *l) {
    if (!l->running) return;
    pthread_mutex_lock(&l->mu);
    l->stop = true;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
    pthread_join(l->thread, NULL);
    l->running = false;
}

/* ---- public ---- */

static size_t slot_bytes(const ct_loader *l) {
    return (size_t)l->p.batch_size * (l->x_row + l->y_row + sizeof(int64_t));
}

static void free_buffers(ct_loader *l) {
    ct_ctx *ctx = l->ctx;
    for (int64_t i = 0; l->slots && i < l->n_slots; i++) {
        ct_free(ctx, l->slots[i].x, (size_t)l->p.batch_size * l->x_row);
        ct_free(ctx, l->slots[i].y, (size_t)l->p.batch_size * l->y_row);
        ct_free(ctx, l->slots[i].index, (size_t)l->p.batch_size * sizeof(int64_t));
    }
    ct_free(ctx, l->slots, (size_t)l->n_slots * sizeof(slot));
    ct_free(ctx, l->order, (size_t)(l->n ? l->n : 1) * sizeof(int64_t));
    ct_free(ctx, l->raw, l->raw_row ? l->raw_row : 1);
    ct_free(ctx, l->tmp, l->x_row ? l->x_row : 1);
    ct_free(ctx, l->label_map, (size_t)(l->p.label_map_len ? l->p.label_map_len : 1) * 8);
}

static ct_status check_params(ct_ctx *ctx, const ct_dataset *ds, const ct_loader_params *p) {
    if (p->batch_size < 1)
        return CT_FAIL(ctx, CT_ERR_CONFIG, "loader: batch_size must be >= 1, got %lld",
                       (long long)p->batch_size);
    if (p->world_size < 1 || p->rank < 0 || p->rank >= p->world_size)
        return CT_FAIL(ctx, CT_ERR_CONFIG, "loader: rank %lld is not in [0, world_size %lld)",
                       (long long)p->rank, (long long)p->world_size);
    if ((int)p->shard < 0 || p->shard >= CT_SHARD_MODE_COUNT)
        return CT_FAIL(ctx, CT_ERR_CONFIG, "loader: shard mode %d is not a ct_shard_mode",
                       (int)p->shard);
    if (p->prefetch < 0 || p->prefetch > 64)
        return CT_FAIL(ctx, CT_ERR_CONFIG, "loader: prefetch must be in [0, 64], got %lld",
                       (long long)p->prefetch);
    if (p->n_transforms < 0 || p->n_transforms > CT_LOADER_MAX_TRANSFORMS)
        return CT_FAIL(ctx, CT_ERR_CONFIG, "loader: %d transforms, at most %d",
                       (int)p->n_transforms, CT_LOADER_MAX_TRANSFORMS);
    if (p->label_map || p->one_hot) {
        if (ds->info.y_dtype != CT_I64 || ds->info.y_ndim != 0)
            return CT_FAIL(ctx, CT_ERR_CONFIG,
                           "loader: label_map and one_hot need one class index per sample");
        if (p->label_map && (p->label_map_len < 1 || p->label_map_len > (int64_t)1 << 24))
            return CT_FAIL(ctx, CT_ERR_CONFIG,
                           "loader: label_map needs 1 to 2^24 entries, got %lld",
                           (long long)p->label_map_len);
        for (int64_t i = 0; p->label_map && i < p->label_map_len; i++)
            if (p->label_map[i] < 0 || p->label_map[i] >= (int64_t)1 << 24)
                return CT_FAIL(ctx, CT_ERR_CONFIG,
                               "loader: label_map[%lld] = %lld is not a class in [0, 2^24)",
                               (long long)i, (long long)p->label_map[i]);
        if (p->one_hot && !p->label_map &&
            (ds->info.n_classes < 1 || ds->info.n_classes > (int64_t)1 << 24))
            return CT_FAIL(ctx, CT_ERR_CONFIG,
                           "loader: one_hot needs the number of classes (1 to 2^24), the dataset "
                           "gives %lld",
                           (long long)ds->info.n_classes);
    }
    if (p->shard == CT_SHARD_EVAL && p->drop_last)
        return CT_FAIL(ctx, CT_ERR_CONFIG,
                       "loader: drop_last with eval sharding would skip samples that evaluation "
                       "must see exactly once");
    if (p->n_transforms && !p->to_f32)
        return CT_FAIL(ctx, CT_ERR_CONFIG, "loader: transforms need to_f32");
    const ct_dataset_info *in = &ds->info;
    if (in->x_ndim >= CT_MAX_DIMS || in->y_ndim >= CT_MAX_DIMS)
        return CT_FAIL(ctx, CT_ERR_CONFIG, "loader: samples need fewer than %d dims to batch",
                       CT_MAX_DIMS);
    int64_t c = in->x_ndim >= 1 ? in->x_shape[0] : 1;
    for (int32_t t = 0; t < p->n_transforms; t++) {
        const ct_transform *tf = &p->transforms[t];
        if ((int)tf->kind < 0 || tf->kind >= CT_TRANSFORM_KIND_COUNT)
            return CT_FAIL(ctx, CT_ERR_CONFIG, "loader: transform %d: kind %d is unknown", (int)t,
                           (int)tf->kind);
        if (tf->kind == CT_TRANSFORM_NORMALIZE) {
            if (c > CT_TRANSFORM_MAX_CHANNELS)
                return CT_FAIL(ctx, CT_ERR_CONFIG,
                               "loader: transform %d: normalize supports %d channels, the data "
                               "has %lld",
                               (int)t, CT_TRANSFORM_MAX_CHANNELS, (long long)c);
            for (int64_t ch = 0; ch < c; ch++)
                if (!(tf->std[ch] > 0.0f))
                    return CT_FAIL(ctx, CT_ERR_CONFIG,
                                   "loader: transform %d: normalize std[%lld] must be > 0, got %g",
                                   (int)t, (long long)ch, (double)tf->std[ch]);
        }
        if ((tf->kind == CT_TRANSFORM_RANDOM_CROP || tf->kind == CT_TRANSFORM_HFLIP) &&
            in->x_ndim < 2)
            return CT_FAIL(ctx, CT_ERR_CONFIG,
                           "loader: transform %d: crop and flip need image samples [C, H, W], "
                           "the data has %d dims",
                           (int)t, (int)in->x_ndim);
        if (tf->kind == CT_TRANSFORM_RANDOM_CROP && (tf->pad < 0 || tf->pad > 1024))
            return CT_FAIL(ctx, CT_ERR_CONFIG,
                           "loader: transform %d: crop pad must be in [0, 1024]", (int)t);
        if (tf->kind == CT_TRANSFORM_HFLIP && !(tf->p >= 0.0f && tf->p <= 1.0f))
            return CT_FAIL(ctx, CT_ERR_CONFIG, "loader: transform %d: flip p must be in [0, 1]",
                           (int)t);
    }
    return CT_OK;
}

ct_status ct_loader_create(ct_ctx *ctx,
                           const ct_dataset *ds,
                           const ct_loader_params *params,
                           ct_loader **out) {
    *out = NULL;
    ct_loader_params p = params ? *params : ct_loader_default_params();
    CT_TRY(check_params(ctx, ds, &p));
    ct_loader *l = ct_alloc(ctx, sizeof *l);
    if (!l) return CT_FAIL(ctx, CT_ERR_OOM, "allocating a loader");
    memset(l, 0, sizeof *l);
    l->ctx = ctx;
    l->ds = ds;
    l->p = p;
    l->n = ds->info.n;
    l->per_rank = compute_per_rank(&p, l->n);
    l->batches =
        p.drop_last ? l->per_rank / p.batch_size : (l->per_rank + p.batch_size - 1) / p.batch_size;
    l->x_ndim = ds->info.x_ndim;
    memcpy(l->x_shape, ds->info.x_shape, sizeof l->x_shape);
    l->x_dtype = p.to_f32 ? CT_F32 : ds->info.x_dtype;
    l->raw_row = ds->x_bytes;
    l->x_row = ct_data_sample_bytes(l->x_dtype, l->x_ndim, l->x_shape);
    l->y_row = ds->y_bytes;
    l->y_dtype = ds->info.y_dtype;
    l->n_classes = ds->info.n_classes;
    if (p.label_map) {
        l->n_classes = 0;
        for (int64_t i = 0; i < p.label_map_len; i++)
            if (p.label_map[i] + 1 > l->n_classes) l->n_classes = p.label_map[i] + 1;
    }
    if (p.one_hot) {
        l->y_dtype = CT_F32;
        l->y_row = (size_t)l->n_classes * sizeof(float);
    }
    l->order_epoch = -1;
    l->n_slots = p.prefetch + 1;
    l->threaded = p.prefetch > 0 && l->batches > 0; /* an empty shard has nothing to fetch */
    if ((size_t)p.batch_size > SIZE_MAX / 4 / (l->x_row + l->y_row + sizeof(int64_t) + 1)) {
        ct_free(ctx, l, sizeof *l);
        return CT_FAIL(ctx, CT_ERR_CONFIG, "loader: batch_size %lld is too large for the samples",
                       (long long)p.batch_size);
    }
    l->slots = ct_alloc(ctx, (size_t)l->n_slots * sizeof(slot));
    l->order = ct_alloc(ctx, (size_t)(l->n ? l->n : 1) * sizeof(int64_t));
    l->raw = ct_alloc(ctx, l->raw_row ? l->raw_row : 1);
    l->tmp = ct_alloc(ctx, l->x_row ? l->x_row : 1);
    if (p.label_map) {
        l->label_map = ct_alloc(ctx, (size_t)(p.label_map_len ? p.label_map_len : 1) * 8);
        if (l->label_map)
            memcpy(l->label_map, p.label_map, (size_t)p.label_map_len * sizeof(int64_t));
    }
    bool ok = l->slots && l->order && l->raw && l->tmp && (!p.label_map || l->label_map);
    if (l->slots) memset(l->slots, 0, (size_t)l->n_slots * sizeof(slot));
    for (int64_t i = 0; ok && i < l->n_slots; i++) {
        slot *s = &l->slots[i];
        s->x = ct_alloc(ctx, (size_t)p.batch_size * l->x_row);
        s->y = ct_alloc(ctx, (size_t)p.batch_size * l->y_row);
        s->index = ct_alloc(ctx, (size_t)p.batch_size * sizeof(int64_t));
        ok = s->x && s->y && s->index;
    }
    if (!ok) {
        size_t bytes = slot_bytes(l); /* l is gone below */
        free_buffers(l);
        ct_free(ctx, l, sizeof *l);
        return CT_FAIL(ctx, CT_ERR_OOM,
                       "loader: out of memory allocating %lld batch buffers of %zu bytes",
                       (long long)p.prefetch + 1, bytes);
    }
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cv, NULL);
    ct_status s = start_thread(l);
    if (s != CT_OK) {
        ct_loader_destroy(l);
        return s;
    }
    *out = l;
    return CT_OK;
}

void ct_loader_destroy(ct_loader *l) {
    if (!l) return;
    stop_thread(l);
    pthread_cond_destroy(&l->cv);
    pthread_mutex_destroy(&l->mu);
    free_buffers(l);
    ct_free(l->ctx, l, sizeof *l);
}

int64_t ct_loader_batches_per_epoch(const ct_loader *l) {
    return l->batches;
}

int64_t ct_loader_samples_per_epoch(const ct_loader *l) {
    return l->per_rank;
}

static void fill_batch(const ct_loader *l, const slot *s, ct_batch *b) {
    int64_t xs[CT_MAX_DIMS], ys[CT_MAX_DIMS];
    const ct_dataset_info *in = &l->ds->info;
    xs[0] = s->size;
    for (int32_t d = 0; d < l->x_ndim && d + 1 < CT_MAX_DIMS; d++)
        xs[d + 1] = l->x_shape[d];
    ys[0] = s->size;
    for (int32_t d = 0; d < in->y_ndim && d + 1 < CT_MAX_DIMS; d++)
        ys[d + 1] = in->y_shape[d];
    int32_t y_ndim = in->y_ndim + 1;
    if (l->p.one_hot) {
        ys[1] = l->n_classes;
        y_ndim = 2;
    }
    b->x = ct_tensor_view(s->x, l->x_dtype, l->x_ndim + 1, xs);
    b->y = ct_tensor_view(s->y, l->y_dtype, y_ndim, ys);
    b->index = s->index;
    b->size = s->size;
    b->epoch = s->epoch;
    b->number = s->number;
}

ct_status ct_loader_next(ct_loader *l, ct_batch *b) {
    memset(b, 0, sizeof *b);
    if (l->failed != CT_OK)
        return CT_FAIL(l->ctx, l->failed,
                       "loader: an earlier read failed; reposition with ct_loader_set_state");
    pthread_mutex_lock(&l->mu);
    if (l->holding) { /* release the batch handed out last time */
        l->consumed++;
        l->holding = false;
        pthread_cond_broadcast(&l->cv);
    }
    if (l->cons_num >= l->batches) { /* end of the epoch: an empty batch, then the next epoch */
        b->epoch = l->cons_epoch;
        b->number = l->cons_num;
        l->cons_num = 0;
        l->cons_epoch++;
        pthread_mutex_unlock(&l->mu);
        return CT_OK;
    }
    slot *s = &l->slots[l->consumed % l->n_slots];
    if (l->threaded) {
        while (l->produced <= l->consumed)
            pthread_cond_wait(&l->cv, &l->mu);
    } else {
        produce(l, s, l->prod_epoch, l->prod_num);
        advance(l, &l->prod_epoch, &l->prod_num);
        l->produced++;
    }
    pthread_mutex_unlock(&l->mu);
    if (s->status != CT_OK) {
        l->holding = true;
        l->failed = s->status;
        if (s->bad_where)
            return CT_FAIL(l->ctx, s->status,
                           "loader: class %lld of sample %lld (epoch %lld, batch %lld) is outside "
                           "%s [0, %lld)",
                           (long long)s->bad_class, (long long)s->failed_index, (long long)s->epoch,
                           (long long)s->number, s->bad_where, (long long)s->bad_limit);
        return CT_FAIL(l->ctx, s->status,
                       "loader: reading sample %lld of dataset '%s' (epoch %lld, batch %lld) "
                       "failed",
                       (long long)s->failed_index, l->ds->vt->name, (long long)s->epoch,
                       (long long)s->number);
    }
    l->holding = true;
    advance(l, &l->cons_epoch, &l->cons_num);
    /* advance() rolled to the next epoch after the last batch; keep the end marker first */
    if (l->cons_num == 0) {
        l->cons_epoch--;
        l->cons_num = l->batches;
    }
    fill_batch(l, s, b);
    return CT_OK;
}

ct_loader_state ct_loader_get_state(const ct_loader *l) {
    ct_loader_state st;
    st.epoch = l->cons_epoch;
    st.next_batch = l->cons_num;
    st.seed = l->p.seed;
    /* next_batch == batches: the epoch's end marker comes next, and a restore gives it too */
    st.sample = l->cons_num >= l->batches ? l->n : l->cons_num * l->p.batch_size * l->p.world_size;
    return st;
}

ct_status
ct_loader_state_at(const ct_loader *l, int64_t epoch, int64_t sample, ct_loader_state *out) {
    int64_t global = l->p.batch_size * l->p.world_size;
    if (epoch < 0 || sample < 0)
        return CT_FAIL(l->ctx, CT_ERR_INVALID_ARG,
                       "loader: position (epoch %lld, sample %lld) is negative", (long long)epoch,
                       (long long)sample);
    out->epoch = epoch;
    out->seed = l->p.seed;
    out->sample = sample;
    if (sample >= l->n || sample / global >= l->batches) { /* at or past this epoch's end */
        out->next_batch = l->batches;
        return CT_OK;
    }
    if (sample % global != 0)
        return CT_FAIL(l->ctx, CT_ERR_INVALID_ARG,
                       "loader: sample %lld of the epoch's order is inside a global batch of "
                       "%lld (%lld per process x %lld processes): the next batch would repeat or "
                       "skip samples",
                       (long long)sample, (long long)global, (long long)l->p.batch_size,
                       (long long)l->p.world_size);
    out->next_batch = sample / global;
    return CT_OK;
}

ct_status ct_loader_set_state(ct_loader *l, const ct_loader_state *s) {
    if (s->seed != l->p.seed)
        return CT_FAIL(l->ctx, CT_ERR_INVALID_ARG,
                       "loader: the saved position is for seed %llu, this loader has %llu",
                       (unsigned long long)s->seed, (unsigned long long)l->p.seed);
    if (s->epoch < 0 || s->next_batch < 0 || s->next_batch > l->batches)
        return CT_FAIL(l->ctx, CT_ERR_INVALID_ARG,
                       "loader: position (epoch %lld, batch %lld) is outside an epoch of %lld "
                       "batches",
                       (long long)s->epoch, (long long)s->next_batch, (long long)l->batches);
    stop_thread(l);
    l->cons_epoch = s->epoch;
    l->cons_num = s->next_batch;
    l->prod_epoch = s->epoch;
    l->prod_num = s->next_batch;
    if (s->next_batch == l->batches) { /* the end marker first; batches from the next epoch */
        l->prod_epoch = s->epoch + 1;
        l->prod_num = 0;
    }
    l->produced = l->consumed = 0;
    l->holding = false;
    l->failed = CT_OK;
    ct_status st = start_thread(l);
    if (st != CT_OK) l->failed = st; /* no producer: next() must refuse, not wait */
    return st;
}

ct_status ct_loader_epoch_indices(const ct_loader *l, int64_t epoch, int64_t *out) {
    size_t bytes = (size_t)(l->n ? l->n : 1) * sizeof(int64_t);
    int64_t *order = ct_alloc(l->ctx, bytes);
    if (!order) return CT_FAIL(l->ctx, CT_ERR_OOM, "loader: allocating an epoch order");
    epoch_order(l, epoch, order);
    for (int64_t k = 0; k < l->per_rank; k++)
        out[k] = shard_index(l, order, k);
    ct_free(l->ctx, order, bytes);
    return CT_OK;
}
