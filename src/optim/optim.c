/*
 * optim.c - SGD, Adam, AdamW, RMSprop and Adagrad as flat loops over the store's contiguous
 * buffers, with per-tensor parameter groups.
 *
 * The arithmetic follows torch.optim (1.13, single-tensor path) operation by operation, in
 * f32, so that a model trained here and in PyTorch from the same weights and data produces the
 * same parameters to rounding. Scalars PyTorch computes in Python (1 - beta1, bias corrections,
 * Adagrad's decayed rate) are computed here in double and rounded to float once, as PyTorch
 * rounds a Python float when it meets a float tensor.
 *
 * Every trainable tensor is a contiguous range of the flat buffers (declaration order, no
 * gaps). A step walks the ranges, merging neighbours with the same group settings, so without
 * groups it is one loop over everything. Updates are elementwise, hence independent of the
 * thread count.
 */
#include <assert.h>
#include <fnmatch.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "core/core_internal.h"
#include "ctrain/optim.h"
#include "kernels/vmath.h"
#include "optim/optim_internal.h"

#ifdef _OPENMP
#include <omp.h>
#endif

/* One trainable tensor's place in the flat buffers and its group settings. */
typedef struct range {
    int64_t off, n;
    const char *name; /* owned by the store */
    float lr_scale;
    float weight_decay;
} range;

struct ct_optim {
    ct_ctx *ctx;
    ct_params *params;
    ct_optim_params p;
    int64_t n;
    float *m; /* SGD or RMSprop momentum buffer, or Adam's first moment */
    float *v; /* Adam's second moment, RMSprop's square average or Adagrad's sum */
    float *a; /* centered RMSprop's gradient average */
    range *ranges;
    int64_t n_ranges;
    int64_t steps;
};

/* A run of ranges that share settings: what one kernel call updates. */
typedef struct span {
    float *w, *g, *m, *v, *a; /* n floats each (m, v, a NULL when the kind has none) */
    int64_t n;
    double lr; /* the optimizer's rate times the group's lr_scale */
    float wd;
    bool alone; /* run on the calling thread (already one of a team) */
    bool check; /* return the gradients' largest exponent field (else 0), for step_checked */
} span;

/* The threads for a span's loop: the span's choice, or 1 inside ct_optim_step_if_finite's team. */
static int span_threads(const ct_optim *o, const span *s, int64_t n, int64_t work) {
    return s->alone ? 1 : ct_threads_for(o->ctx, n, work);
}

static const char *const kind_names[] = {
    [CT_OPTIM_SGD] = "sgd",         [CT_OPTIM_ADAM] = "adam",       [CT_OPTIM_ADAMW] = "adamw",
    [CT_OPTIM_RMSPROP] = "rmsprop", [CT_OPTIM_ADAGRAD] = "adagrad",
};
static_assert(sizeof kind_names / sizeof kind_names[0] == CT_OPTIM_KIND_COUNT,
              "a name for each ct_optim_kind");

const char *ct_optim_kind_name(ct_optim_kind kind) {
    return (unsigned)kind < CT_OPTIM_KIND_COUNT ? kind_names[kind] : NULL;
}

bool ct_optim_kind_from_name(const char *name, ct_optim_kind *out) {
    for (int i = 0; i < CT_OPTIM_KIND_COUNT; i++)
        if (strcmp(name, kind_names[i]) == 0) {
            *out = (ct_optim_kind)i;
            return true;
        }
    return false;
}

ct_optim_params ct_optim_default_params(ct_optim_kind kind) {
    ct_optim_params p;
    memset(&p, 0, sizeof p);
    p.kind = kind;
    p.lr = 1e-3f;
    p.beta1 = 0.9f;
    p.beta2 = 0.999f;
    p.eps = 1e-8f;
    p.alpha = 0.99f;
    if (kind == CT_OPTIM_ADAMW) p.weight_decay = 1e-2f;
    if (kind == CT_OPTIM_RMSPROP || kind == CT_OPTIM_ADAGRAD) p.lr = 1e-2f;
    if (kind == CT_OPTIM_ADAGRAD) p.eps = 1e-10f;
    return p;
}

static bool finite_nonneg(float x) {
    return x >= 0.0f && isfinite(x);
}

static ct_status check_params(ct_ctx *ctx, const ct_optim_params *p) {
    if ((int)p->kind < 0 || p->kind >= CT_OPTIM_KIND_COUNT)
        return CT_FAIL(ctx, CT_ERR_INVALID_ARG, "optimizer kind %d is not a ct_optim_kind",
                       (int)p->kind);
    if (!finite_nonneg(p->lr))
        return CT_FAIL(ctx, CT_ERR_INVALID_ARG,
                       "optimizer lr: expected a finite value >= 0, got %g", (double)p->lr);
    if (!finite_nonneg(p->weight_decay))
        return CT_FAIL(ctx, CT_ERR_INVALID_ARG, "optimizer weight_decay: expected >= 0, got %g",
                       (double)p->weight_decay);
    switch (p->kind) {
    case CT_OPTIM_SGD:
        if (!(p->dampening >= 0.0f && p->dampening <= 1.0f))
            return CT_FAIL(ctx, CT_ERR_INVALID_ARG, "SGD dampening: expected in [0, 1], got %g",
                           (double)p->dampening);
        if (!finite_nonneg(p->momentum))
            return CT_FAIL(ctx, CT_ERR_INVALID_ARG, "SGD momentum: expected >= 0, got %g",
                           (double)p->momentum);
        if (p->nesterov && (p->momentum <= 0.0f || p->dampening != 0.0f))
            return CT_FAIL(ctx, CT_ERR_INVALID_ARG,
                           "SGD nesterov needs momentum > 0 and dampening 0 (got %g and %g)",
                           (double)p->momentum, (double)p->dampening);
        break;
    case CT_OPTIM_ADAM:
    case CT_OPTIM_ADAMW:
        if (!(p->beta1 >= 0.0f && p->beta1 < 1.0f) || !(p->beta2 >= 0.0f && p->beta2 < 1.0f))
            return CT_FAIL(ctx, CT_ERR_INVALID_ARG,
                           "Adam betas: expected each in [0, 1), got (%g, %g)", (double)p->beta1,
                           (double)p->beta2);
        if (!finite_nonneg(p->eps))
            return CT_FAIL(ctx, CT_ERR_INVALID_ARG, "Adam eps: expected >= 0, got %g",
                           (double)p->eps);
        break;
    case CT_OPTIM_RMSPROP:
        if (!(p->alpha >= 0.0f && p->alpha <= 1.0f))
            return CT_FAIL(ctx, CT_ERR_INVALID_ARG, "RMSprop alpha: expected in [0, 1], got %g",
                           (double)p->alpha);
        if (!finite_nonneg(p->eps))
            return CT_FAIL(ctx, CT_ERR_INVALID_ARG, "RMSprop eps: expected >= 0, got %g",
                           (double)p->eps);
        if (!finite_nonneg(p->momentum))
            return CT_FAIL(ctx, CT_ERR_INVALID_ARG, "RMSprop momentum: expected >= 0, got %g",
                           (double)p->momentum);
        break;
    case CT_OPTIM_ADAGRAD:
        if (!finite_nonneg(p->lr_decay))
            return CT_FAIL(ctx, CT_ERR_INVALID_ARG, "Adagrad lr_decay: expected >= 0, got %g",
                           (double)p->lr_decay);
        if (!finite_nonneg(p->initial_accumulator_value))
            return CT_FAIL(ctx, CT_ERR_INVALID_ARG,
                           "Adagrad initial_accumulator_value: expected >= 0, got %g",
                           (double)p->initial_accumulator_value);
        if (!finite_nonneg(p->eps))
            return CT_FAIL(ctx, CT_ERR_INVALID_ARG, "Adagrad eps: expected >= 0, got %g",
                           (double)p->eps);
        break;
    case CT_OPTIM_KIND_COUNT:
        break;
    }
    return CT_OK;
}

static size_t moment_bytes(int64_t n) {
    return (size_t)(n ? n : 1) * sizeof(float);
}

/* One range per trainable tensor, in declaration order, checked to tile the flat buffers. */
static ct_status make_ranges(ct_optim *o) {
    const ct_params *P = o->params;
    const float *values = ct_params_values(P);
    int64_t count = 0;
    for (int64_t i = 0; i < ct_params_count(P); i++)
        if (ct_params_kind_at(P, i) == CT_PARAM_TRAINABLE) count++;
    o->ranges = ct_alloc(o->ctx, (size_t)(count ? count : 1) * sizeof *o->ranges);
    if (!o->ranges)
        return CT_FAIL(o->ctx, CT_ERR_OOM, "allocating %lld optimizer ranges", (long long)count);
    o->n_ranges = count;
    int64_t k = 0, off = 0;
    for (int64_t i = 0; i < ct_params_count(P); i++) {
        if (ct_params_kind_at(P, i) != CT_PARAM_TRAINABLE) continue;
        const ct_tensor *t = ct_params_at(P, i);
        range *r = &o->ranges[k++];
        r->off = off;
        r->n = ct_tensor_numel(t);
        r->name = t->name;
        r->lr_scale = 1.0f;
        r->weight_decay = o->p.weight_decay;
        CT_ASSERT(r->n == 0 || (const float *)t->data == values + off);
        off += r->n;
    }
    CT_ASSERT(off == o->n);
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
    if (make_ranges(o) != CT_OK) {
        ct_optim_destroy(o);
        return CT_ERR_OOM;
    }
    size_t bytes = moment_bytes(o->n);
    bool need_m = p->kind == CT_OPTIM_ADAM || p->kind == CT_OPTIM_ADAMW ||
                  ((p->kind == CT_OPTIM_SGD || p->kind == CT_OPTIM_RMSPROP) && p->momentum > 0.0f);
    bool need_v = p->kind != CT_OPTIM_SGD;
    bool need_a = p->kind == CT_OPTIM_RMSPROP && p->centered;
    if (need_m) o->m = ct_alloc(ctx, bytes);
    if (need_v) o->v = ct_alloc(ctx, bytes);
    if (need_a) o->a = ct_alloc(ctx, bytes);
    if ((need_m && !o->m) || (need_v && !o->v) || (need_a && !o->a)) {
        const int64_t n = o->n; /* o is gone after destroy */
        ct_optim_destroy(o);
        double mib = (double)bytes / (1u << 20);
        return CT_FAIL(ctx, CT_ERR_OOM,
                       "out of memory allocating optimizer moments for %lld parameters (%.1f %s "
                       "each)",
                       (long long)n, mib < 1024 ? mib : mib / 1024, mib < 1024 ? "MiB" : "GiB");
    }
    if (o->m) memset(o->m, 0, bytes);
    if (o->a) memset(o->a, 0, bytes);
    if (o->v) {
        const float init = p->kind == CT_OPTIM_ADAGRAD ? p->initial_accumulator_value : 0.0f;
        for (int64_t i = 0; i < o->n; i++)
            o->v[i] = init;
    }
    *out = o;
    return CT_OK;
}

void ct_optim_destroy(ct_optim *o) {
    if (!o) return;
    size_t bytes = moment_bytes(o->n);
    ct_free(o->ctx, o->m, bytes);
    ct_free(o->ctx, o->v, bytes);
    ct_free(o->ctx, o->a, bytes);
    ct_free(o->ctx, o->ranges, (size_t)(o->n_ranges ? o->n_ranges : 1) * sizeof *o->ranges);
    ct_free(o->ctx, o, sizeof *o);
}

/* ---- parameter groups ---- */

/* Splits s (a copy of the pattern) in place into NUL-terminated globs, dropping the spaces
 * around them and empty items; returns how many. */
static int64_t split_globs(char *s) {
    int64_t count = 0;
    char *w = s;
    const char *r = s;
    while (*r) {
        while (*r == ' ')
            r++;
        char *start = w;
        while (*r && *r != ',')
            *w++ = *r++;
        while (w > start && w[-1] == ' ')
            w--;
        if (*r == ',') r++;
        if (w > start) {
            *w++ = '\0';
            count++;
        }
    }
    return count;
}

static bool match_any(const char *globs, int64_t count, const char *name) {
    for (int64_t k = 0; k < count; k++, globs += strlen(globs) + 1)
        if (fnmatch(globs, name, 0) == 0) return true;
    return false;
}

ct_status ct_optim_add_group(ct_optim *o, const char *pattern, float lr_scale, float weight_decay) {
    ct_ctx *ctx = o->ctx;
    if (!pattern) return CT_FAIL(ctx, CT_ERR_INVALID_ARG, "optimizer group: the pattern is NULL");
    if (!finite_nonneg(lr_scale))
        return CT_FAIL(ctx, CT_ERR_INVALID_ARG,
                       "optimizer group '%s': lr_scale: expected a finite value >= 0, got %g",
                       pattern, (double)lr_scale);
    if (!finite_nonneg(weight_decay))
        return CT_FAIL(ctx, CT_ERR_INVALID_ARG,
                       "optimizer group '%s': weight_decay: expected a finite value >= 0, got %g",
                       pattern, (double)weight_decay);
    size_t size = strlen(pattern) + 1;
    char *globs = ct_alloc(ctx, size);
    if (!globs) return CT_FAIL(ctx, CT_ERR_OOM, "optimizer group '%s': copying it", pattern);
    memcpy(globs, pattern, size);
    int64_t count = split_globs(globs), hits = 0;
    for (int64_t r = 0; r < o->n_ranges; r++)
        hits += match_any(globs, count, o->ranges[r].name);
    if (count > 0 && hits > 0)
        for (int64_t r = 0; r < o->n_ranges; r++)
            if (match_any(globs, count, o->ranges[r].name)) {
                o->ranges[r].lr_scale = lr_scale;
                o->ranges[r].weight_decay = weight_decay;
            }
    ct_free(ctx, globs, size);
    if (count == 0)
        return CT_FAIL(ctx, CT_ERR_INVALID_ARG,
                       "optimizer group '%s': the pattern has no glob (expected a "
                       "comma-separated list such as \"*.bias,*norm*.weight\")",
                       pattern);
    if (hits == 0)
        return CT_FAIL(ctx, CT_ERR_CONFIG,
                       "optimizer group '%s': the pattern matches no trainable parameter "
                       "(names look like '%s')",
                       pattern, o->n_ranges ? o->ranges[0].name : "(none)");
    return CT_OK;
}

/* ---- the update rules, one call per span ---- */

/* a * b + c. PyTorch's CPU kernels (AVX2 builds) evaluate add(x, y, alpha) as
 * fma(alpha, y, x) and addcmul(x, y, z, value) as fma(value * y, z, x); we do the same, so the
 * updates are bitwise those of torch.optim, in every build: a native build for a CPU with FMA
 * and the AVX2 and AVX-512 copies of the portable one (CT_HOT) fuse in hardware; the baseline
 * copy and the sanitizer builds call libm's exact fmaf, slower but the same bits. addcdiv is
 * x + value * y / z, unfused, everywhere. */
static inline float madd(float a, float b, float c) {
    return fmaf(a, b, c);
}

/* A float's exponent bits: all ones (EXP_MASK) for an inf or a NaN, less for any finite value;
 * so the largest over a buffer says whether it holds one, as ct_vnonfinite does. With `check`
 * each rule's loop below also returns this maximum over the gradients it read, for
 * ct_optim_step_checked: a test on a value already in a register, where a separate scan would
 * read every gradient once more. */
#define EXP_MASK 0x7f800000u

static inline uint32_t raise_exp(uint32_t top, float g) {
    uint32_t u;
    memcpy(&u, &g, sizeof u);
    u &= EXP_MASK;
    return u > top ? u : top;
}

/*
 * Each rule is a loop over elements [lo, hi) of a span, inlined where it is called with a
 * literal `check`, so that the loops without the test compile as if it did not exist. The *_span
 * functions (DEFINE_SPAN) run the loop with the test on the calling thread (the caller gives
 * each thread of its team a share: ct_optim_step_checked), and without it over one contiguous
 * block per thread. The literal must reach the loop inside the OpenMP-outlined body, which is
 * made before any inlining: a `check` variable there (or an OpenMP max reduction on the
 * result) pushes gcc past its unswitching budget and leaves the loops of Adam with weight decay
 * and of centered RMSprop with momentum scalar, 3-4x slower on two threads.
 */
static inline uint32_t
sgd_loop(const ct_optim *o, const span *s, int64_t lo, int64_t hi, bool check) {
    const float neg_lr = (float)-s->lr, wd = s->wd, mom = o->p.momentum;
    const float damp1 = (float)(1.0 - (double)o->p.dampening);
    const bool zero = o->p.zero_grad;
    const bool first = o->steps == 0, nesterov = o->p.nesterov;
    float *w = s->w, *gr = s->g, *buf = s->m;
    uint32_t top = 0;
    for (int64_t i = lo; i < hi; i++) {
        float d = gr[i];
        if (check) top = raise_exp(top, d);
        if (zero) gr[i] = 0.0f;
        if (wd != 0.0f) d = madd(wd, w[i], d);
        if (buf) {
            buf[i] = first ? d : madd(damp1, d, buf[i] * mom); /* torch clones d at first */
            d = nesterov ? madd(mom, buf[i], d) : buf[i];
        }
        w[i] = madd(neg_lr, d, w[i]);
    }
    return top;
}

static inline uint32_t
adam_loop(const ct_optim *o, const span *s, int64_t lo, int64_t hi, bool check) {
    const float wd = s->wd, b1 = o->p.beta1, b2 = o->p.beta2, eps = o->p.eps;
    const float b1c = (float)(1.0 - (double)b1), b2c = (float)(1.0 - (double)b2);
    const bool zero = o->p.zero_grad;
    const double step = (double)(o->steps + 1);
    const double bc1 = 1.0 - pow((double)b1, step);
    const double bc2 = 1.0 - pow((double)b2, step);
    const float neg_step_size = (float)(-(s->lr / bc1));
    const float bc2_sqrt = (float)sqrt(bc2);
    float *w = s->w, *gr = s->g, *m = s->m, *v = s->v;
    uint32_t top = 0;
    /* two loops rather than a branch inside one, so that each vectorises */
    if (o->p.kind == CT_OPTIM_ADAMW) {
        const float shrink = (float)(1.0 - s->lr * (double)wd);
        for (int64_t i = lo; i < hi; i++) {
            float g = gr[i];
            if (check) top = raise_exp(top, g);
            if (zero) gr[i] = 0.0f;
            w[i] = w[i] * shrink;
            m[i] = madd(b1c, g, m[i] * b1);
            v[i] = madd(b2c * g, g, v[i] * b2);
            w[i] = w[i] + neg_step_size * m[i] / (sqrtf(v[i]) / bc2_sqrt + eps);
        }
    } else {
        for (int64_t i = lo; i < hi; i++) {
            if (check) top = raise_exp(top, gr[i]);
            float g = wd != 0.0f ? madd(wd, w[i], gr[i]) : gr[i]; /* unswitched by -O3 */
            if (zero) gr[i] = 0.0f;
            m[i] = madd(b1c, g, m[i] * b1);
            v[i] = madd(b2c * g, g, v[i] * b2);
            w[i] = w[i] + neg_step_size * m[i] / (sqrtf(v[i]) / bc2_sqrt + eps);
        }
    }
    return top;
}

/* RMSprop over [lo, hi): inlined with constant `centered`, `momentum` and `check` below, so
 * that each variant is its own branch-free, vectorised loop. */
static inline uint32_t rmsprop_variant(const ct_optim *o,
                                       const span *s,
                                       int64_t lo,
                                       int64_t hi,
                                       bool centered,
                                       bool momentum,
                                       bool check) {
    const float wd = s->wd, alpha = o->p.alpha, eps = o->p.eps, mom = o->p.momentum;
    const float alpha_c = (float)(1.0 - (double)alpha), neg_lr = (float)-s->lr;
    const bool zero = o->p.zero_grad;
    float *w = s->w, *gr = s->g, *buf = s->m, *sq = s->v, *ga = s->a;
    uint32_t top = 0;
    for (int64_t i = lo; i < hi; i++) {
        if (check) top = raise_exp(top, gr[i]);
        float g = wd != 0.0f ? madd(wd, w[i], gr[i]) : gr[i];
        if (zero) gr[i] = 0.0f;
        sq[i] = madd(alpha_c * g, g, sq[i] * alpha);
        float avg;
        if (centered) {
            ga[i] = madd(alpha_c, g, ga[i] * alpha);
            avg = sqrtf(madd(-ga[i], ga[i], sq[i]));
        } else {
            avg = sqrtf(sq[i]);
        }
        avg = avg + eps;
        if (momentum) {
            buf[i] = buf[i] * mom + g / avg; /* the buffer starts at 0, unlike SGD's */
            w[i] = madd(neg_lr, buf[i], w[i]);
        } else {
            w[i] = w[i] + neg_lr * g / avg;
        }
    }
    return top;
}

/* Always inlined: an out-of-line copy (gcc makes one for the checked call, the four variants
 * being large) would be built for the baseline ISA, outside rmsprop_span's clones, with a
 * library call per fused multiply-add: 10x slower. */
__attribute__((always_inline)) static inline uint32_t
rmsprop_loop(const ct_optim *o, const span *s, int64_t lo, int64_t hi, bool check) {
    const bool centered = s->a != NULL, momentum = s->m != NULL;
    if (centered && momentum) return rmsprop_variant(o, s, lo, hi, true, true, check);
    if (centered) return rmsprop_variant(o, s, lo, hi, true, false, check);
    if (momentum) return rmsprop_variant(o, s, lo, hi, false, true, check);
    return rmsprop_variant(o, s, lo, hi, false, false, check);
}

static inline uint32_t
adagrad_loop(const ct_optim *o, const span *s, int64_t lo, int64_t hi, bool check) {
    const float wd = s->wd, eps = o->p.eps;
    const double step = (double)(o->steps + 1);
    const float neg_clr = (float)-(s->lr / (1.0 + (step - 1.0) * (double)o->p.lr_decay));
    const bool zero = o->p.zero_grad;
    float *w = s->w, *gr = s->g, *sum = s->v;
    uint32_t top = 0;
    for (int64_t i = lo; i < hi; i++) {
        if (check) top = raise_exp(top, gr[i]);
        float g = wd != 0.0f ? madd(wd, w[i], gr[i]) : gr[i];
        if (zero) gr[i] = 0.0f;
        sum[i] = madd(g, g, sum[i]);
        w[i] = w[i] + neg_clr * g / (sqrtf(sum[i]) + eps);
    }
    return top;
}

/* name_span: the rule name_loop over a span, `work` its cost per element for ct_threads_for.
 * CT_PAR_FOR runs no region at all for one thread (one per span and step inside
 * ct_optim_step_if_finite's team otherwise). */
#define DEFINE_SPAN(name, work)                                                                    \
    CT_HOT static uint32_t name##_span(const ct_optim *o, const span *s) {                         \
        if (s->check) return name##_loop(o, s, 0, s->n, true);                                     \
        int nt = span_threads(o, s, s->n, work);                                                   \
        CT_PAR_FOR(nt, b, nt, {                                                                    \
            int64_t lo = s->n * b / nt, hi = s->n * (b + 1) / nt;                                  \
            (void)name##_loop(o, s, lo, hi, false);                                                \
        });                                                                                        \
        return 0;                                                                                  \
    }
DEFINE_SPAN(sgd, 8)
DEFINE_SPAN(adam, 16)
DEFINE_SPAN(rmsprop, 16)
DEFINE_SPAN(adagrad, 16)

/* One rule over a span; returns the largest exponent field of the gradients it read. */
typedef uint32_t (*span_fn)(const ct_optim *o, const span *s);

static const span_fn span_fns[] = {
    [CT_OPTIM_SGD] = sgd_span,         [CT_OPTIM_ADAM] = adam_span,
    [CT_OPTIM_ADAMW] = adam_span,      [CT_OPTIM_RMSPROP] = rmsprop_span,
    [CT_OPTIM_ADAGRAD] = adagrad_span,
};
static_assert(sizeof span_fns / sizeof span_fns[0] == CT_OPTIM_KIND_COUNT,
              "one update rule per ct_optim_kind");

static float *at(float *buf, int64_t off) {
    return buf ? buf + off : NULL;
}

void ct_optim_step(ct_optim *o) {
    ct_optim_step_range(o, 0, o->n);
}

/* The run of ranges with one group's settings that starts at ranges[r], cut to [lo, hi), as a
 * span (n = 0 when nothing of it is inside); returns the index after the run. */
static int64_t next_span(const ct_optim *o, int64_t r, int64_t lo, int64_t hi, span *s) {
    float *w = ct_params_values(o->params);
    float *g = ct_params_grads(o->params);
    const range *first = &o->ranges[r];
    int64_t n = first->n, e = r + 1;
    /* neighbours with the same settings run as one longer loop */
    while (e < o->n_ranges && o->ranges[e].lr_scale == first->lr_scale &&
           o->ranges[e].weight_decay == first->weight_decay)
        n += o->ranges[e++].n;
    int64_t off = first->off, end = off + n;
    /* the part of the run inside [lo, hi): the rules are elementwise, so a run cut anywhere
       updates each element as the whole run would */
    if (off < lo) off = lo;
    if (end > hi) end = hi;
    span sp = {at(w, off),
               at(g, off),
               at(o->m, off),
               at(o->v, off),
               at(o->a, off),
               end > off ? end - off : 0,
               (double)o->p.lr * (double)first->lr_scale,
               first->weight_decay,
               false,
               false};
    *s = sp;
    return e;
}

void ct_optim_step_range(ct_optim *o, int64_t lo, int64_t hi) {
    if (lo < 0) lo = 0;
    if (hi > o->n) hi = o->n;
    for (int64_t r = 0; r < o->n_ranges;) {
        span s;
        r = next_span(o, r, lo, hi, &s);
        if (s.n > 0) (void)span_fns[o->p.kind](o, &s);
    }
    o->steps++;
    ct_ctx_weights_changed(o->ctx);
}

/* s's elements [n t / T, n (t + 1) / T): thread t's share of it, for that thread alone. */
static span share(const span *s, int t, int T) {
    int64_t a = s->n * t / T, b = s->n * (t + 1) / T;
    span p = *s;
    p.w += a;
    p.g += a;
    if (p.m) p.m += a;
    if (p.v) p.v += a;
    if (p.a) p.a += a;
    p.n = b - a;
    p.alone = true;
    return p;
}

/* Thread t of T's share of every span, stepped with the test; returns its maximum. */
static uint32_t step_share_checked(ct_optim *o, int t, int T) {
    uint32_t top = 0;
    for (int64_t r = 0; r < o->n_ranges;) {
        span s;
        r = next_span(o, r, 0, o->n, &s);
        span p = share(&s, t, T);
        p.check = true;
        if (p.n > 0) {
            uint32_t e = span_fns[o->p.kind](o, &p);
            top = e > top ? e : top;
        }
    }
    return top;
}

bool ct_optim_step_checked(ct_optim *o) {
    /* the rules test on one thread per share, so the team is made here (none for one thread:
       libgomp allocates a team even for a region of one) */
    int nt = ct_threads_for(o->ctx, o->n, 16);
    uint32_t top = 0;
    if (nt <= 1) {
        top = step_share_checked(o, 0, 1);
    } else {
#ifdef _OPENMP
#pragma omp parallel num_threads(nt) reduction(max : top)
        top = step_share_checked(o, omp_get_thread_num(), omp_get_num_threads());
#else
        top = step_share_checked(o, 0, 1);
#endif
    }
    o->steps++;
    ct_ctx_weights_changed(o->ctx);
    return top != EXP_MASK;
}

CT_HOT bool ct_optim_step_if_finite(ct_optim *o) {
    /* one team: each thread scans the shares it will update, and updates them once every
       thread has found its shares finite, so the scan brings each gradient into the cache of
       the core that uses it next (two separate passes, scan then step, read each from
       further away) */
    int nt = ct_threads_for(o->ctx, o->n, 16);
    if (nt <= 1) { /* no team to start (about a microsecond even for one thread) */
        for (int64_t r = 0; r < o->n_ranges;) {
            span s;
            r = next_span(o, r, 0, o->n, &s);
            if (ct_vnonfinite(s.g, s.n)) return false;
        }
        ct_optim_step_range(o, 0, o->n);
        return true;
    }
    unsigned bad = 0;
#ifdef _OPENMP
#pragma omp parallel num_threads(nt)
#endif
    {
        int T = 1, t = 0;
#ifdef _OPENMP
        T = omp_get_num_threads();
        t = omp_get_thread_num();
#endif
        unsigned mine = 0;
        for (int64_t r = 0; r < o->n_ranges;) {
            span s;
            r = next_span(o, r, 0, o->n, &s);
            span p = share(&s, t, T);
            mine |= ct_vnonfinite(p.g, p.n);
        }
        if (mine) {
#ifdef _OPENMP
#pragma omp atomic write
#endif
            bad = 1u;
        }
#ifdef _OPENMP
#pragma omp barrier
#pragma omp flush
#endif
        unsigned seen;
#ifdef _OPENMP
#pragma omp atomic read
#endif
        seen = bad;
        for (int64_t r = 0; !seen && r < o->n_ranges;) {
            span s;
            r = next_span(o, r, 0, o->n, &s);
            span p = share(&s, t, T);
            if (p.n > 0) (void)span_fns[o->p.kind](o, &p);
        }
    }
    if (bad) return false;
    o->steps++;
    ct_ctx_weights_changed(o->ctx);
    return true;
}

ct_status ct_optim_set_lr(ct_optim *o, float lr) {
    if (!finite_nonneg(lr))
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

bool ct_optim_zeroes_grads(const ct_optim *o) {
    return o->p.zero_grad; /* the ranges tile every trainable gradient (make_ranges) */
}

/* ---- gradient clipping ---- */

/* The norm's fixed reduction order: NORM_CHUNKS chunks whose bounds depend only on n, each
 * summed by ct_vsum_squares, then the chunks left to right. */
enum { NORM_CHUNKS = 256 };

static ct_status check_store(ct_ctx *ctx, const ct_params *params, const char *what) {
    if (!params || !ct_params_grads(params))
        return CT_FAIL(ctx, CT_ERR_INVALID_ARG, "%s: the parameter store is not allocated", what);
    return CT_OK;
}

CT_HOT ct_status ct_optim_clip_grad_norm(ct_ctx *ctx,
                                         ct_params *params,
                                         float max_norm,
                                         float *total_norm_out) {
    if (total_norm_out) *total_norm_out = 0.0f;
    if (isnan(max_norm))
        return CT_FAIL(ctx, CT_ERR_INVALID_ARG,
                       "clip_grad_norm max_norm: expected a number, got "
                       "NaN (use a value <= 0 to only measure the norm)");
    CT_TRY(check_store(ctx, params, "clip_grad_norm"));
    float *g = ct_params_grads(params);
    const int64_t n = ct_params_numel(params);
    const int64_t chunk = (n + NORM_CHUNKS - 1) / NORM_CHUNKS;
    double part[NORM_CHUNKS];
    int nt = ct_threads_for(ctx, NORM_CHUNKS, 2 * chunk);
    CT_OMP_FOR(nt)
    for (int c = 0; c < NORM_CHUNKS; c++) {
        int64_t lo = (int64_t)c * chunk, hi = lo + chunk;
        if (lo > n) lo = n;
        if (hi > n) hi = n;
        part[c] = ct_vsum_squares(g + lo, hi - lo);
    }
    double sum = 0.0;
    for (int c = 0; c < NORM_CHUNKS; c++)
        sum += part[c];
    const double total = sqrt(sum);
    if (total_norm_out) *total_norm_out = (float)total;
    if (!isfinite((float)total) || !(max_norm > 0.0f)) return CT_OK;
    const double coef = (double)max_norm / (total + 1e-6);
    if (coef >= 1.0) return CT_OK;
    const float scale = (float)coef;
    nt = ct_threads_for(ctx, n, 2);
    CT_OMP_FOR(nt)
    for (int64_t i = 0; i < n; i++)
        g[i] = g[i] * scale;
    return CT_OK;
}

CT_HOT ct_status ct_optim_clip_grad_value(ct_ctx *ctx, ct_params *params, float clip) {
    if (!finite_nonneg(clip))
        return CT_FAIL(ctx, CT_ERR_INVALID_ARG,
                       "clip_grad_value clip: expected a finite value >= 0, got %g", (double)clip);
    CT_TRY(check_store(ctx, params, "clip_grad_value"));
    float *g = ct_params_grads(params);
    const int64_t n = ct_params_numel(params);
    const float lo = -clip;
    int nt = ct_threads_for(ctx, n, 2);
    CT_OMP_FOR(nt)
    for (int64_t i = 0; i < n; i++) {
        float x = g[i];
        g[i] = x < lo ? lo : (x > clip ? clip : x); /* NaN fails both tests and stays */
    }
    return CT_OK;
}

/* The buffers in a fixed order, with the state names PyTorch gives them for this kind. */
static void put(const char **names, float **data, int32_t *k, const char *name, float *buf) {
    if (!buf) return;
    names[*k] = name;
    data[*k] = buf;
    (*k)++;
}

static int32_t list_buffers(const ct_optim *o, const char **names, float **data) {
    int32_t k = 0;
    switch (o->p.kind) {
    case CT_OPTIM_SGD:
        put(names, data, &k, "momentum_buffer", o->m);
        break;
    case CT_OPTIM_ADAM:
    case CT_OPTIM_ADAMW:
        put(names, data, &k, "exp_avg", o->m);
        put(names, data, &k, "exp_avg_sq", o->v);
        break;
    case CT_OPTIM_RMSPROP:
        put(names, data, &k, "square_avg", o->v);
        put(names, data, &k, "momentum_buffer", o->m);
        put(names, data, &k, "grad_avg", o->a);
        break;
    case CT_OPTIM_ADAGRAD:
        put(names, data, &k, "sum", o->v);
        break;
    case CT_OPTIM_KIND_COUNT:
        break;
    }
    return k;
}

int32_t ct_optim_buffer_count(const ct_optim *o) {
    const char *names[3];
    float *data[3];
    return list_buffers(o, names, data);
}

ct_status ct_optim_buffer(const ct_optim *o, int32_t i, const char **name, float **data) {
    const char *names[3];
    float *bufs[3];
    int32_t n = list_buffers(o, names, bufs);
    *name = NULL;
    *data = NULL;
    if (i < 0 || i >= n)
        return CT_FAIL(o->ctx, CT_ERR_INVALID_ARG, "optimizer: buffer %d of %d", (int)i, (int)n);
    *name = names[i];
    *data = bufs[i];
    return CT_OK;
}

ct_status ct_optim_set_steps(ct_optim *o, int64_t steps) {
    if (steps < 0)
        return CT_FAIL(o->ctx, CT_ERR_INVALID_ARG, "optimizer: step count %lld is negative",
                       (long long)steps);
    o->steps = steps;
    return CT_OK;
}
