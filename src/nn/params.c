/*
 * params.c - the parameter store: declared tensors placed into three contiguous buffers.
 *
 * Entries are allocated one by one so that the tensor pointers handed out at ct_params_add stay
 * valid while the entry table grows. The store owns the entries, their names and the buffers.
 * An alias is a second name of an entry (a tied weight): it holds no storage of its own.
 */
#include <math.h>
#include <string.h>

#include "core/core_internal.h"
#include "ctrain/nn.h"

typedef struct param_entry {
    ct_tensor t;
    ct_param_kind kind;
    size_t name_size;
    char *name;
} param_entry;

typedef struct param_alias {
    char *name;
    size_t name_size;
    int64_t target; /* the entry it names */
} param_alias;

struct ct_params {
    ct_ctx *ctx;
    param_entry **entries;
    int64_t count, cap;
    float *values, *grads; /* n_trainable floats each; grads may be bound (not owned) */
    float *own_grads;      /* the store's gradient buffer (grads unless bound elsewhere) */
    int64_t n_trainable;
    size_t value_bytes; /* allocated size of values and of grads */
    unsigned char *buffers;
    size_t buffer_bytes;
    param_alias *aliases;
    int64_t n_aliases, alias_cap;
    bool allocated;
};

ct_status ct_params_create(ct_ctx *ctx, ct_params **out) {
    *out = NULL;
    ct_params *p = ct_alloc(ctx, sizeof *p);
    if (!p) return CT_FAIL(ctx, CT_ERR_OOM, "allocating a parameter store");
    memset(p, 0, sizeof *p);
    p->ctx = ctx;
    *out = p;
    return CT_OK;
}

void ct_params_destroy(ct_params *p) {
    if (!p) return;
    ct_ctx *ctx = p->ctx;
    for (int64_t i = 0; i < p->count; i++) {
        ct_free(ctx, p->entries[i]->name, p->entries[i]->name_size);
        ct_free(ctx, p->entries[i], sizeof(param_entry));
    }
    ct_free(ctx, p->entries, (size_t)p->cap * sizeof *p->entries);
    for (int64_t i = 0; i < p->n_aliases; i++)
        ct_free(ctx, p->aliases[i].name, p->aliases[i].name_size);
    ct_free(ctx, p->aliases, (size_t)p->alias_cap * sizeof *p->aliases);
    ct_free(ctx, p->values, p->value_bytes);
    ct_free(ctx, p->own_grads, p->value_bytes);
    ct_free(ctx, p->buffers, p->buffer_bytes);
    ct_free(ctx, p, sizeof *p);
}

ct_tensor *ct_params_find(const ct_params *p, const char *name) {
    for (int64_t i = 0; i < p->count; i++)
        if (strcmp(p->entries[i]->name, name) == 0) return &p->entries[i]->t;
    for (int64_t i = 0; i < p->n_aliases; i++)
        if (strcmp(p->aliases[i].name, name) == 0) return &p->entries[p->aliases[i].target]->t;
    return NULL;
}

ct_status ct_params_alias(ct_params *p, const char *alias, const char *target) {
    ct_ctx *ctx = p->ctx;
    if (!alias || !alias[0] || !target)
        return CT_FAIL(ctx, CT_ERR_INVALID_ARG, "an alias needs a non-empty name and a target");
    if (ct_params_find(p, alias))
        return CT_FAIL(ctx, CT_ERR_INVALID_ARG, "alias '%s': the name is already taken", alias);
    int64_t k = -1;
    for (int64_t i = 0; i < p->count && k < 0; i++)
        if (strcmp(p->entries[i]->name, target) == 0) k = i;
    if (k < 0)
        return CT_FAIL(ctx, CT_ERR_INVALID_ARG, "alias '%s': '%s' is not a declared tensor", alias,
                       target);
    if (p->n_aliases == p->alias_cap) {
        int64_t cap = p->alias_cap ? p->alias_cap * 2 : 4;
        param_alias *a = ct_alloc(ctx, (size_t)cap * sizeof *a);
        if (!a) return CT_FAIL(ctx, CT_ERR_OOM, "alias '%s': growing the alias table", alias);
        if (p->n_aliases) memcpy(a, p->aliases, (size_t)p->n_aliases * sizeof *a);
        ct_free(ctx, p->aliases, (size_t)p->alias_cap * sizeof *a);
        p->aliases = a;
        p->alias_cap = cap;
    }
    size_t nsz = strlen(alias) + 1;
    char *nm = ct_alloc(ctx, nsz);
    if (!nm) return CT_FAIL(ctx, CT_ERR_OOM, "alias '%s': allocating its name", alias);
    memcpy(nm, alias, nsz);
    p->aliases[p->n_aliases++] = (param_alias){nm, nsz, k};
    return CT_OK;
}

int64_t ct_params_alias_count(const ct_params *p) {
    return p->n_aliases;
}

const char *ct_params_alias_at(const ct_params *p, int64_t i, ct_tensor **target) {
    if (target) *target = NULL;
    if (i < 0 || i >= p->n_aliases) return NULL;
    if (target) *target = &p->entries[p->aliases[i].target]->t;
    return p->aliases[i].name;
}

ct_status ct_params_add(ct_params *p,
                        const char *name,
                        ct_dtype dtype,
                        int32_t ndim,
                        const int64_t *shape,
                        ct_param_kind kind,
                        ct_tensor **out) {
    ct_ctx *ctx = p->ctx;
    *out = NULL;
    if (p->allocated)
        return CT_FAIL(ctx, CT_ERR_INVALID_ARG, "parameter '%s': declared after ct_params_alloc",
                       name);
    if (!name || !name[0])
        return CT_FAIL(ctx, CT_ERR_INVALID_ARG, "a parameter needs a non-empty name");
    if ((int)kind < 0 || kind >= CT_PARAM_KIND_COUNT)
        return CT_FAIL(ctx, CT_ERR_INVALID_ARG, "parameter '%s': kind %d is not a ct_param_kind",
                       name, (int)kind);
    if (kind == CT_PARAM_TRAINABLE && dtype != CT_F32)
        return CT_FAIL(ctx, CT_ERR_INVALID_ARG, "parameter '%s': trainable tensors are f32, got %s",
                       name, ct_dtype_name(dtype));
    if (ct_params_find(p, name))
        return CT_FAIL(ctx, CT_ERR_INVALID_ARG, "parameter '%s' is declared twice", name);
    if (ct_shape_check(ctx, dtype, ndim, shape, NULL) != CT_OK)
        return ct_err_wrap(ctx, "parameter '%s'", name);
    if (p->count == p->cap) {
        int64_t cap = p->cap ? p->cap * 2 : 16;
        param_entry **e = ct_alloc(ctx, (size_t)cap * sizeof *e);
        if (!e) return CT_FAIL(ctx, CT_ERR_OOM, "growing the parameter table");
        if (p->count) memcpy(e, p->entries, (size_t)p->count * sizeof *e);
        ct_free(ctx, p->entries, (size_t)p->cap * sizeof *e);
        p->entries = e;
        p->cap = cap;
    }
    param_entry *e = ct_alloc(ctx, sizeof *e);
    size_t nsz = strlen(name) + 1;
    char *nm = ct_alloc(ctx, nsz);
    if (!e || !nm) {
        ct_free(ctx, e, sizeof *e);
        ct_free(ctx, nm, nsz);
        return CT_FAIL(ctx, CT_ERR_OOM, "parameter '%s': allocating its entry", name);
    }
    memcpy(nm, name, nsz);
    e->t = ct_tensor_view(NULL, dtype, ndim, shape);
    e->t.name = nm;
    e->t.flags = CT_TENSOR_PARAM | (kind == CT_PARAM_TRAINABLE ? CT_TENSOR_REQUIRES_GRAD : 0u);
    e->kind = kind;
    e->name = nm;
    e->name_size = nsz;
    p->entries[p->count++] = e;
    *out = &e->t;
    return CT_OK;
}

ct_status ct_params_alloc(ct_params *p) {
    ct_ctx *ctx = p->ctx;
    if (p->allocated) return CT_FAIL(ctx, CT_ERR_INVALID_ARG, "parameters allocated twice");
    int64_t n = 0;
    size_t bytes = 0;
    for (int64_t i = 0; i < p->count; i++) {
        param_entry *e = p->entries[i];
        /* each shape was checked alone; the totals must not overflow either */
        if (e->kind == CT_PARAM_TRAINABLE) {
            int64_t k = ct_tensor_numel(&e->t);
            if (k > INT64_MAX / 4 - n || (uint64_t)(n + k) > SIZE_MAX / sizeof(float))
                return CT_FAIL(ctx, CT_ERR_SHAPE,
                               "parameter '%s': the parameters add up to more than can be "
                               "addressed",
                               e->name);
            n += k;
        } else {
            size_t k = (ct_tensor_nbytes(&e->t) + 7) & ~(size_t)7; /* keep i64 aligned */
            if (k < ct_tensor_nbytes(&e->t) || k > SIZE_MAX - bytes)
                return CT_FAIL(ctx, CT_ERR_SHAPE,
                               "buffer '%s': the buffers add up to more than can be addressed",
                               e->name);
            bytes += k;
        }
    }
    size_t fbytes = (size_t)n * sizeof(float);
    size_t vsize = fbytes ? fbytes : 1, bsize = bytes ? bytes : 1;
    p->values = ct_alloc(ctx, vsize);
    p->grads = ct_alloc(ctx, vsize);
    p->buffers = ct_alloc(ctx, bsize);
    if (!p->values || !p->grads || !p->buffers) {
        ct_free(ctx, p->values, vsize);
        ct_free(ctx, p->grads, vsize);
        ct_free(ctx, p->buffers, bsize);
        p->values = p->grads = NULL;
        p->buffers = NULL;
        double mib = (double)fbytes / (1u << 20);
        return CT_FAIL(ctx, CT_ERR_OOM,
                       "out of memory allocating %lld parameters (%.1f %s for their values and "
                       "as much for their gradients) and %zu bytes of buffers",
                       (long long)n, mib < 1024 ? mib : mib / 1024, mib < 1024 ? "MiB" : "GiB",
                       bytes);
    }
    p->own_grads = p->grads;
    p->n_trainable = n;
    p->value_bytes = vsize;
    p->buffer_bytes = bsize;
    memset(p->values, 0, fbytes);
    memset(p->grads, 0, fbytes);
    memset(p->buffers, 0, bytes);
    int64_t off = 0;
    size_t boff = 0;
    for (int64_t i = 0; i < p->count; i++) {
        param_entry *e = p->entries[i];
        if (e->kind == CT_PARAM_TRAINABLE) {
            e->t.data = p->values + off;
            e->t.grad = p->grads + off;
            off += ct_tensor_numel(&e->t);
        } else {
            e->t.data = p->buffers + boff;
            boff += (ct_tensor_nbytes(&e->t) + 7) & ~(size_t)7;
        }
    }
    p->allocated = true;
    return CT_OK;
}

int64_t ct_params_count(const ct_params *p) {
    return p->count;
}

ct_tensor *ct_params_at(const ct_params *p, int64_t i) {
    return (i >= 0 && i < p->count) ? &p->entries[i]->t : NULL;
}

ct_param_kind ct_params_kind_at(const ct_params *p, int64_t i) {
    return (i >= 0 && i < p->count) ? p->entries[i]->kind : CT_PARAM_KIND_COUNT;
}

int64_t ct_params_numel(const ct_params *p) {
    return p->n_trainable;
}

float *ct_params_values(const ct_params *p) {
    return p->values;
}

float *ct_params_grads(const ct_params *p) {
    return p->grads;
}

ct_status ct_params_bind_grads(ct_params *p, float *buf) {
    if (!p->allocated)
        return CT_FAIL(p->ctx, CT_ERR_INVALID_ARG, "binding gradients: the store is not allocated");
    float *to = buf ? buf : p->own_grads;
    if (to == p->grads) return CT_OK;
    if (buf && p->grads != p->own_grads)
        return CT_FAIL(p->ctx, CT_ERR_INVALID_ARG,
                       "binding gradients: another buffer is bound (bind NULL first)");
    memcpy(to, p->grads, (size_t)p->n_trainable * sizeof(float));
    p->grads = to;
    int64_t off = 0;
    for (int64_t i = 0; i < p->count; i++) {
        param_entry *e = p->entries[i];
        if (e->kind != CT_PARAM_TRAINABLE) continue;
        e->t.grad = p->grads + off;
        off += ct_tensor_numel(&e->t);
    }
    return CT_OK;
}

void ct_params_zero_grad(ct_params *p) {
    if (p->grads) memset(p->grads, 0, (size_t)p->n_trainable * sizeof(float));
}

int64_t ct_nn_fan_in(const ct_tensor *w) {
    if (w->ndim < 2) return w->ndim == 1 ? w->shape[0] : 1;
    int64_t f = w->shape[1];
    for (int32_t i = 2; i < w->ndim; i++)
        f *= w->shape[i];
    return f;
}

void ct_nn_init_uniform(ct_tensor *t, ct_rng *rng, float lo, float hi) {
    float *x = t->data;
    int64_t n = ct_tensor_numel(t);
    ct_rng_uniform(rng, x, n);
    for (int64_t i = 0; i < n; i++)
        x[i] = lo + (hi - lo) * x[i];
}

void ct_nn_init_normal(ct_tensor *t, ct_rng *rng, float mean, float std) {
    ct_rng_normal(rng, t->data, ct_tensor_numel(t), mean, std);
}

void ct_nn_init_linear(ct_tensor *weight, ct_tensor *bias, ct_rng *rng) {
    int64_t fan_in = ct_nn_fan_in(weight);
    float bound = fan_in > 0 ? (float)(1.0 / sqrt((double)fan_in)) : 0.0f;
    ct_nn_init_uniform(weight, rng, -bound, bound);
    if (bias) ct_nn_init_uniform(bias, rng, -bound, bound);
}
