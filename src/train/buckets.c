/*
 * buckets.c - gradient buckets for data parallelism: ranges of the flat gradient buffer whose
 * all-reduce starts (non-blocking) during the backward pass of a window's last micro-batch, as
 * soon as the backward pass has finished every gradient in the range.
 *
 * The trainer owns the bucket tables (made at create); the requests are the communicator's.
 */
#include <string.h>

#include "train/train_internal.h"

/* Buckets of about bucket_bytes over the trainable tensors, from the last declared (whose
 * gradients the backward pass finishes first) to the first. */
ct_status ct_train_build_buckets(ct_trainer *t) {
    ct_ctx *ctx = t->ctx;
    const float *base = ct_params_values(t->params);
    int64_t count = ct_params_count(t->params), n = 0;
    for (int64_t i = 0; i < count; i++)
        n += ct_params_kind_at(t->params, i) == CT_PARAM_TRAINABLE;
    if (n == 0) return CT_OK;
    t->n_trainable = n; /* before the allocations: destroy frees with this size */
    t->param_start = ct_alloc(ctx, (size_t)n * sizeof(int64_t));
    t->param_bucket = ct_alloc(ctx, (size_t)n * sizeof(int64_t));
    t->buckets = ct_alloc(ctx, (size_t)n * sizeof(ct_train_bucket)); /* at most one per tensor */
    if (!t->param_start || !t->param_bucket || !t->buckets)
        return CT_FAIL(ctx, CT_ERR_OOM, "trainer: gradient buckets");
    for (int64_t i = 0, k = 0; i < count; i++)
        if (ct_params_kind_at(t->params, i) == CT_PARAM_TRAINABLE)
            t->param_start[k++] = (const float *)ct_params_at(t->params, i)->data - base;
    for (int64_t k = 1; k < n; k++)
        if (t->param_start[k] <= t->param_start[k - 1])
            return CT_FAIL(ctx, CT_ERR_INTERNAL, "trainer: parameters out of order in the store");
    int64_t total = ct_params_numel(t->params), end = total, nb = 0;
    ct_train_bucket *b = NULL;
    for (int64_t k = n - 1; k >= 0; k--) {
        if (!b) {
            b = &t->buckets[nb++];
            memset(b, 0, sizeof *b);
        }
        b->start = t->param_start[k];
        b->n = end - b->start;
        b->n_params++;
        t->param_bucket[k] = nb - 1;
        if ((size_t)b->n * sizeof(float) >= (size_t)t->p.bucket_bytes) {
            end = b->start;
            b = NULL;
        }
    }
    /* the first bucket also takes what lies before the first tensor (nothing, normally) */
    t->buckets[nb - 1].n += t->buckets[nb - 1].start;
    t->buckets[nb - 1].start = 0;
    t->n_buckets = nb;
    return CT_OK;
}

/* The backward pass says a parameter's gradient is final: when it completes a bucket, that
 * bucket's all-reduce starts, and the ones in flight get a chance to progress. */
static void on_grad_ready(void *user, ct_tensor *param) {
    ct_trainer *t = user;
    int64_t off = (const float *)param->data - ct_params_values(t->params);
    int64_t lo = 0, hi = t->n_trainable - 1;
    if (off < 0 || off >= ct_params_numel(t->params)) return; /* not one of the store's */
    while (lo < hi) { /* the last tensor starting at or before off */
        int64_t mid = (lo + hi + 1) / 2;
        if (t->param_start[mid] <= off)
            lo = mid;
        else
            hi = mid - 1;
    }
    if (t->param_start[lo] != off) return;
    ct_train_bucket *b = &t->buckets[t->param_bucket[lo]];
    if (b->pending > 0) b->pending--;
    /* buckets start in index order only, as every rank must issue its reductions in the same
       order: a bucket completed early (or a rank whose graph skipped some parameters) waits
       for the ones before it */
    float *grads = ct_params_grads(t->params);
    while (t->bucket_status == CT_OK && t->next_bucket < t->n_buckets &&
           t->buckets[t->next_bucket].pending == 0) {
        ct_train_bucket *nb = &t->buckets[t->next_bucket++];
        t->bucket_status = ct_comm_iallreduce_sum_f32(t->comm, grads + nb->start, nb->n, &nb->req);
        nb->started = t->bucket_status == CT_OK;
    }
    for (int64_t i = 0; i < t->next_bucket && t->bucket_status == CT_OK; i++)
        if (t->buckets[i].started) t->bucket_status = ct_comm_test(t->comm, &t->buckets[i].req);
}

/* Arms the buckets for the backward pass of a window's last micro-batch. */
void ct_train_arm_buckets(ct_trainer *t) {
    for (int64_t i = 0; i < t->n_buckets; i++) {
        t->buckets[i].pending = t->buckets[i].n_params;
        t->buckets[i].started = false;
    }
    t->next_bucket = 0;
    t->bucket_status = CT_OK;
    ct_graph_set_grad_ready(t->g, on_grad_ready, t);
}

/* The gradient sum over ranks: the buckets the backward pass did not start (parameters it
 * did not reach) are started now, continuing in index order, then all are waited for. */
ct_status ct_train_reduce_buckets(ct_trainer *t) {
    ct_graph_set_grad_ready(t->g, NULL, NULL);
    float *grads = ct_params_grads(t->params);
    ct_status s = t->bucket_status;
    for (; t->next_bucket < t->n_buckets && s == CT_OK; t->next_bucket++) {
        ct_train_bucket *b = &t->buckets[t->next_bucket];
        s = ct_comm_iallreduce_sum_f32(t->comm, grads + b->start, b->n, &b->req);
        b->started = s == CT_OK;
    }
    for (int64_t i = 0; i < t->n_buckets; i++) { /* every started one completes, failure or not */
        ct_status w = ct_comm_wait(t->comm, &t->buckets[i].req);
        if (s == CT_OK) s = w;
        t->buckets[i].started = false;
    }
    return s;
}

int64_t ct_trainer_buckets(const ct_trainer *t) {
    return t->n_buckets;
}
