/*
 * optim.c - SGD, Adam and AdamW as flat loops over the store's contiguous buffers.
 *
 * The arithmetic follows torch.optim (1.13, single-tensor path) operation by operation, in
 * f32, so that a model trained here and in PyTorch from the same weights and data produces the
 * same losses to rounding. Elementwise updates are parallel and thread-count independent.
 */
#include <math.h>
#include <string.h>

#include "core/core_internal.h"
#include "ctrain/optim.h"

struct ct_optim {
    ct_ctx *ctx;
    ct_params *params;
    ct_optim_params p;
    int64_t n;
    float *m; /* SGD momentum buffer, or Adam's first moment */
    float *v; /* Adam's second moment */
    int64_t steps;
};

ct_optim_params ct_optim_default_params(ct_optim_kind kind) {
    ct_optim_params p;
    memset(&p, 0, sizeof p);
    p.kind = kind;
    p.lr = 1e-3f;
    p.beta1 = 0.9f;
    p.beta2 = 0.999f;
    p.eps = 1e-8f;
    if (kind == CT_OPTIM_ADAMW) p.weight_decay = 1e-2f;
    return p;
}

static ct_status check_params(ct_ctx *ctx, const ct_optim_params *p) {
    if ((int)p->kind < 0 || p->kind >= CT_OPTIM_KIND_COUNT)
        return CT_FAIL(ctx, CT_ERR_INVALID_ARG, "optimizer kind %d is not a ct_optim_kind",
                       (int)p->kind);
    if (!(p->lr >= 0.0f) || !isfinite(p->lr))
        return CT_FAIL(ctx, CT_ERR_INVALID_ARG,
                       "optimizer lr: expected a finite value >= 0, got %g", (double)p->lr);
    if (!(p->weight_decay >= 0.0f) || !isfinite(p->weight_decay))
        return CT_FAIL(ctx, CT_ERR_INVALID_ARG, "optimizer weight_decay: expected >= 0, got %g",
                       (double)p->weight_decay);
    if (p->kind == CT_OPTIM_SGD) {
        if (!(p->dampening >= 0.0f && p->dampening <= 1.0f))
            return CT_FAIL(ctx, CT_ERR_INVALID_ARG, "SGD dampening: expected in [0, 1], got %g",
                           (double)p->dampening);
        if (!(p->momentum >= 0.0f) || !isfinite(p->momentum))
            return CT_FAIL(ctx, CT_ERR_INVALID_ARG, "SGD momentum: expected >= 0, got %g",
                           (double)p->momentum);
        if (p->nesterov && (p->momentum <= 0.0f || p->dampening != 0.0f))
            return CT_FAIL(ctx, CT_ERR_INVALID_ARG,
                           "SGD nesterov needs momentum > 0 and dampening 0 (got %g and %g)",
                           (double)p->momentum, (double)p->dampening);
    } else {
        if (!(p->beta1 >= 0.0f && p->beta1 < 1.0f) || !(p->beta2 >= 0.0f && p->beta2 < 1.0f))
            return CT_FAIL(ctx, CT_ERR_INVALID_ARG,
                           "Adam betas: expected each in [0, 1), got (%g, %g)", (double)p->beta1,
                           (double)p->beta2);
        if (!(p->eps >= 0.0f))
            return CT_FAIL(ctx, CT_ERR_INVALID_ARG, "Adam eps: expected >= 0, got %g",
                           (double)p->eps);
    }
    return CT_OK;
}

ct_status
ct_optim_create(ct_ctx *ctx, ct_params *params, const ct_optim_params *p, ct_optim **out) {
    *out = NULL;
    CT_TRY(check_params(ctx, p));
    if (!ct_params_values(params))
        return CT_FAIL(ctx, CT_ERR_INVALID_ARG, "optimizer: the parameter store is not allocated");
    ct_optim *o = ct_alloc(ctx, sizeof *o);
    if (!o) return CT_FAIL(ctx, CT_ERR_OOM, "allocating an optimizer");
    memset(o, 0, sizeof *o);
    o->ctx = ctx;
    o->params = params;
    o->p = *p;
    o->n = ct_params_numel(params);
    size_t bytes = (size_t)(o->n ? o->n : 1) * sizeof(float);
    bool need_m = p->kind != CT_OPTIM_SGD || p->momentum > 0.0f;
    bool need_v = p->kind != CT_OPTIM_SGD;
    if (need_m) o->m = ct_alloc(ctx, bytes);
    if (need_v) o->v = ct_alloc(ctx, bytes);
    if ((need_m && !o->m) || (need_v && !o->v)) {
        ct_optim_destroy(o);
        return CT_FAIL(ctx, CT_ERR_OOM, "allocating optimizer moments for %lld parameters",
                       (long long)o->n);
    }
    if (o->m) memset(o->m, 0, bytes);
    if (o->v) memset(o->v, 0, bytes);
    *out = o;
    return CT_OK;
}

void ct_optim_destroy(ct_optim *o) {
    if (!o) return;
    size_t bytes = (size_t)(o->n ? o->n : 1) * sizeof(float);
    ct_free(o->ctx, o->m, bytes);
    ct_free(o->ctx, o->v, bytes);
    ct_free(o->ctx, o, sizeof *o);
}

static void sgd_step(ct_optim *o, float *w, float *gr) {
    const float lr = o->p.lr, wd = o->p.weight_decay, mom = o->p.momentum;
    const float damp = o->p.dampening;
    const bool zero = o->p.zero_grad;
    const bool first = o->steps == 0, nesterov = o->p.nesterov;
    float *buf = o->m;
    int nt = ct_threads_for(o->ctx, o->n, 8);
    CT_OMP_FOR(nt)
    for (int64_t i = 0; i < o->n; i++) {
        float d = gr[i];
        if (zero) gr[i] = 0.0f;
        if (wd != 0.0f) d = d + wd * w[i];
        if (buf) {
            buf[i] = first ? d : mom * buf[i] + (1.0f - damp) * d;
            d = nesterov ? d + mom * buf[i] : buf[i];
        }
        w[i] = w[i] - lr * d;
    }
}

static void adam_step(ct_optim *o, float *w, float *gr) {
    const float lr = o->p.lr, wd = o->p.weight_decay, b1 = o->p.beta1, b2 = o->p.beta2;
    const float eps = o->p.eps;
    const bool zero = o->p.zero_grad;
    const bool decoupled = o->p.kind == CT_OPTIM_ADAMW;
    const double step = (double)(o->steps + 1);
    const float bc1 = (float)(1.0 - pow((double)b1, step));
    const float bc2 = (float)(1.0 - pow((double)b2, step));
    const float step_size = lr / bc1;
    const float bc2_sqrt = sqrtf(bc2);
    float *m = o->m, *v = o->v;
    int nt = ct_threads_for(o->ctx, o->n, 16);
    /* two loops rather than a branch inside one, so that each vectorises */
    if (decoupled) {
        const float shrink = 1.0f - lr * wd;
        CT_OMP_FOR(nt)
        for (int64_t i = 0; i < o->n; i++) {
            float g = gr[i];
            if (zero) gr[i] = 0.0f;
            w[i] = w[i] * shrink;
            m[i] = m[i] + (g - m[i]) * (1.0f - b1); /* torch uses lerp for the first moment */
            v[i] = v[i] * b2 + (1.0f - b2) * g * g;
            w[i] = w[i] - step_size * (m[i] / (sqrtf(v[i]) / bc2_sqrt + eps));
        }
    } else {
        CT_OMP_FOR(nt)
        for (int64_t i = 0; i < o->n; i++) {
            float g = wd != 0.0f ? gr[i] + wd * w[i] : gr[i]; /* unswitched by -O3 */
            if (zero) gr[i] = 0.0f;
            m[i] = m[i] + (g - m[i]) * (1.0f - b1);
            v[i] = v[i] * b2 + (1.0f - b2) * g * g;
            w[i] = w[i] - step_size * (m[i] / (sqrtf(v[i]) / bc2_sqrt + eps));
        }
    }
}

void ct_optim_step(ct_optim *o) {
    float *w = ct_params_values(o->params);
    float *g = ct_params_grads(o->params);
    if (o->p.kind == CT_OPTIM_SGD)
        sgd_step(o, w, g);
    else
        adam_step(o, w, g);
    o->steps++;
}

ct_status ct_optim_set_lr(ct_optim *o, float lr) {
    if (!(lr >= 0.0f) || !isfinite(lr))
        return CT_FAIL(o->ctx, CT_ERR_INVALID_ARG,
                       "optimizer lr: expected a finite value >= 0, got %g", (double)lr);
    o->p.lr = lr;
    return CT_OK;
}

float ct_optim_lr(const ct_optim *o) {
    return o->p.lr;
}

int64_t ct_optim_steps(const ct_optim *o) {
    return o->steps;
}
