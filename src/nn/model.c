/*
 * model.c - sequential stacks of layers from the type table, residual blocks, and the model
 * handle: creation by spec or by builder name, initialisation, forward and parameter lookup.
 *
 * A model is a tree of ct_layer nodes whose root runs its children in order. Shapes are checked
 * once, at creation, by running each type's create on the sample shape its predecessor
 * produces; forward then only checks the model's input. The model owns its nodes; the caller's
 * ct_params store owns every tensor.
 */
#include <stdio.h>
#include <string.h>

#include "nn/nn_internal.h"

struct ct_model {
    ct_ctx *ctx;
    ct_params *params;
    ct_layer *root;
    ct_dtype in_dtype;
    int32_t in_ndim, out_ndim;
    int64_t in_shape[CT_MAX_DIMS], out_shape[CT_MAX_DIMS];
    bool var_len;
    const ct_model_vtable *vt; /* a user's model type instead of a root node */
    void *self;
    ct_layer **leaves; /* the named layers without children, in forward order (timed ones) */
    int64_t n_leaves;
};

/* ---- nodes ---- */

ct_layer *ct_layer_new(ct_ctx *ctx, const ct_layer_type *type, int64_t n_children) {
    ct_layer *l = ct_alloc(ctx, sizeof *l);
    if (!l) return NULL;
    memset(l, 0, sizeof *l);
    l->type = type;
    l->leaf = -1;
    if (n_children > 0) {
        l->children = ct_alloc(ctx, (size_t)n_children * sizeof *l->children);
        if (!l->children) {
            ct_free(ctx, l, sizeof *l);
            return NULL;
        }
        memset(l->children, 0, (size_t)n_children * sizeof *l->children);
        l->n_children = n_children;
    }
    return l;
}

void ct_layer_free(ct_ctx *ctx, ct_layer *l) {
    if (!l) return;
    for (int64_t i = 0; i < l->n_children; i++)
        ct_layer_free(ctx, l->children[i]);
    ct_free(ctx, l->children, (size_t)l->n_children * sizeof *l->children);
    if (l->name) ct_free(ctx, l->name, strlen(l->name) + 1);
    ct_free(ctx, l, sizeof *l);
}

void ct_layer_init_tree(ct_layer *l, ct_rng *rng) {
    if (l->type && l->type->init) l->type->init(l, rng);
    for (int64_t i = 0; i < l->n_children; i++)
        ct_layer_init_tree(l->children[i], rng);
}

/* A child's forward, its nodes tagged with its layer (an incident's examination reads the
 * tags) and timed as its layer when layers are timed (the trainer's profile). */
static ct_tensor *tagged_forward(ct_layer *c, ct_graph *g, ct_tensor *x) {
    ct_graph_layer_mark mark = ct_graph_begin_layer(g, c->leaf);
    x = c->type->forward(c, g, x);
    ct_graph_end_layer(g, mark);
    return x;
}

/* Whether children i, i+1, i+2 of l are conv2d, relu and a 2x2 stride-2 unpadded max pool:
 * ct_op_conv2d_relu_maxpool runs them as one op (any other window keeps the pool its own). */
static bool conv_relu_pool_at(const ct_layer *l, int64_t i, ct_pool2d_params *pool) {
    if (i + 2 >= l->n_children || l->children[i]->type != &ct_layer_conv2d ||
        l->children[i + 1]->type != &ct_layer_relu ||
        l->children[i + 2]->type != &ct_layer_maxpool2d)
        return false;
    *pool = ct_layer_pool2d_params(l->children[i + 2]);
    return pool->kernel[0] == 2 && pool->kernel[1] == 2 && pool->stride[0] == 2 &&
           pool->stride[1] == 2 && pool->padding[0] == 0 && pool->padding[1] == 0;
}

/* With gradients off, each child's activations are freed once the next child has read them
 * (ct_graph_scope_begin). */
ct_tensor *ct_layer_forward_children(ct_layer *l, ct_graph *g, ct_tensor *x) {
    ct_graph_scope s = ct_graph_scope_begin(g, x);
    for (int64_t i = 0; i < l->n_children && x; i++) {
        ct_layer *c = l->children[i];
        ct_graph_scope_next(g, &s, x);
        ct_pool2d_params pool;
        if (conv_relu_pool_at(l, i, &pool)) {
            /* one fused op, the same values; tagged and timed as the convolution's */
            ct_graph_layer_mark mark = ct_graph_begin_layer(g, c->leaf);
            x = ct_layer_conv2d_relu_maxpool_forward(c, &pool, g, x);
            ct_graph_end_layer(g, mark);
            i += 2;
            continue;
        }
        if (c->type == &ct_layer_conv2d && i + 1 < l->n_children &&
            l->children[i + 1]->type == &ct_layer_relu) {
            /* one fused op, the same values; tagged and timed as the convolution's */
            ct_graph_layer_mark mark = ct_graph_begin_layer(g, c->leaf);
            x = ct_layer_conv2d_relu_forward(c, g, x);
            ct_graph_end_layer(g, mark);
            i++;
            continue;
        }
        x = c->leaf >= 0 ? tagged_forward(c, g, x) : c->type->forward(c, g, x);
    }
    ct_graph_scope_end(g, s, x);
    return x;
}

/* ---- helpers for layer types ---- */

static char *shape_str(int32_t ndim, const int64_t *shape, char *buf, size_t size) {
    ct_tensor t = ct_tensor_view(NULL, CT_F32, ndim, shape);
    return ct_shape_str(&t, buf, size);
}

ct_status ct_layer_declare(ct_layer_build *b,
                           ct_layer *l,
                           int slot,
                           const char *name,
                           ct_dtype dtype,
                           int32_t ndim,
                           const int64_t *shape,
                           ct_param_kind kind) {
    char full[256];
    int n = snprintf(full, sizeof full, "%s%s%s", b->prefix, b->prefix[0] ? "." : "", name);
    if (n < 0 || (size_t)n >= sizeof full)
        return CT_FAIL(b->ctx, CT_ERR_INVALID_ARG, "%s: parameter name '%s.%s' is too long",
                       b->where, b->prefix, name);
    ct_status s = ct_params_add(b->params, full, dtype, ndim, shape, kind, &l->t[slot]);
    if (s != CT_OK) return ct_err_wrap(b->ctx, "%s", b->where);
    return CT_OK;
}

ct_status ct_layer_bad_input(ct_layer_build *b, const char *expected) {
    if (b->check_only) return CT_OK; /* the options were read and are valid: that was all */
    char buf[96];
    return CT_FAIL(b->ctx, CT_ERR_SHAPE, "%s: input sample %s (%s), expected %s", b->where,
                   shape_str(b->in_ndim, b->in_shape, buf, sizeof buf), ct_dtype_name(b->in_dtype),
                   expected);
}

/* ---- sequences ---- */

/* Creates the layer of spec (position index) under b's prefix, with b's input shape. */
static ct_status create_one(ct_layer_build *parent,
                            const ct_layer_spec *spec,
                            int64_t index,
                            ct_layer_build *b,
                            ct_layer **out) {
    ct_ctx *ctx = parent->ctx;
    *out = NULL;
    char pos[32], prefix[256], where[1024];
    snprintf(pos, sizeof pos, "%lld", (long long)index);
    const char *name = spec->name ? spec->name : pos;
    int n = snprintf(prefix, sizeof prefix, "%s%s%s", parent->prefix, parent->prefix[0] ? "." : "",
                     name);
    if (n < 0 || (size_t)n >= sizeof prefix)
        return CT_FAIL(ctx, CT_ERR_INVALID_ARG, "layer name '%s.%s' is too long", parent->prefix,
                       name);
    /* a spec from a configuration file says where it was written: its errors name that too */
    snprintf(where, sizeof where, "%s%slayer %lld ('%s', %s)",
             spec->opts.where ? spec->opts.where : "", spec->opts.where ? ": " : "",
             (long long)index, prefix, spec->type ? spec->type : "(none)");
    const ct_layer_type *type = ct_layer_type_find(spec->type);
    if (!type) return ct_layer_unknown(ctx, where, spec->type);
    ct_options opts = spec->opts;
    if (!opts.where) opts.where = where;
    CT_TRY(ct_options_check(ctx, &opts, type->keys));
    *b = *parent;
    b->prefix = prefix;
    b->where = where;
    b->spec = spec;
    b->out_dtype = b->in_dtype;
    b->out_ndim = b->in_ndim;
    memcpy(b->out_shape, b->in_shape, sizeof b->out_shape);
    ct_layer *l = ct_layer_new(ctx, type, 0);
    ct_status s =
        l ? type->create(b, &opts, l) : CT_FAIL(ctx, CT_ERR_OOM, "%s: allocating a layer", where);
    b->prefix = b->where = NULL; /* they pointed at this frame */
    if (!l) return s;
    if (s == CT_OK && !(l->name = ct_alloc(ctx, (size_t)n + 1)))
        s = CT_FAIL(ctx, CT_ERR_OOM, "%s: allocating a layer", where);
    if (l->name) memcpy(l->name, prefix, (size_t)n + 1);
    if (s != CT_OK) {
        ct_layer_free(ctx, l);
        return s;
    }
    *out = l;
    return CT_OK;
}

ct_status
ct_layer_create_children(ct_layer_build *b, ct_layer *l, const ct_layer_spec *specs, int64_t n) {
    ct_ctx *ctx = b->ctx;
    if (n < 0 || (n > 0 && !specs))
        return CT_FAIL(ctx, CT_ERR_INVALID_ARG, "%s: %lld layer specs", b->where, (long long)n);
    if (n > 0) {
        l->children = ct_alloc(ctx, (size_t)n * sizeof *l->children);
        if (!l->children) return CT_FAIL(ctx, CT_ERR_OOM, "%s: allocating layers", b->where);
        memset(l->children, 0, (size_t)n * sizeof *l->children);
        l->n_children = n;
    }
    ct_layer_build cur = *b;
    for (int64_t i = 0; i < n; i++) {
        ct_layer_build next;
        CT_TRY(create_one(&cur, &specs[i], i, &next, &l->children[i]));
        cur.in_dtype = next.out_dtype;
        cur.in_ndim = next.out_ndim;
        memcpy(cur.in_shape, next.out_shape, sizeof cur.in_shape);
    }
    b->out_dtype = cur.in_dtype;
    b->out_ndim = cur.in_ndim;
    memcpy(b->out_shape, cur.in_shape, sizeof b->out_shape);
    return CT_OK;
}

/* ---- residual: x + children(x) ---- */

static const char *const residual_keys[] = {NULL};

static ct_status residual_create(ct_layer_build *b, const ct_options *opts, ct_layer *l) {
    (void)opts;
    const ct_layer_spec *spec = b->spec;
    if (spec->n_children < 1)
        return CT_FAIL(b->ctx, CT_ERR_CONFIG, "%s: a residual block needs at least one layer",
                       b->where);
    CT_TRY(ct_layer_create_children(b, l, spec->children, spec->n_children));
    bool same = b->out_dtype == b->in_dtype && b->out_ndim == b->in_ndim;
    for (int32_t d = 0; same && d < b->in_ndim; d++)
        same = b->out_shape[d] == b->in_shape[d];
    if (!same) {
        char in[96], out[96];
        return CT_FAIL(b->ctx, CT_ERR_SHAPE,
                       "%s: the block maps sample %s to %s; a residual block must keep the shape",
                       b->where, shape_str(b->in_ndim, b->in_shape, in, sizeof in),
                       shape_str(b->out_ndim, b->out_shape, out, sizeof out));
    }
    return CT_OK;
}

static ct_tensor *residual_forward(ct_layer *l, ct_graph *g, ct_tensor *x) {
    return ct_op_add(g, x, ct_layer_forward_children(l, g, x));
}

const ct_layer_type ct_layer_residual = {"residual", residual_keys, residual_create, NULL,
                                         residual_forward};

static ct_tensor *sequence_forward(ct_layer *l, ct_graph *g, ct_tensor *x) {
    return ct_layer_forward_children(l, g, x);
}

static const ct_layer_type sequence_type = {"sequential", residual_keys, NULL, NULL,
                                            sequence_forward};

/* ---- the model ---- */

static ct_status check_input(ct_ctx *ctx, ct_dtype dtype, int32_t ndim, const int64_t *shape) {
    if (!shape && ndim > 0)
        return CT_FAIL(ctx, CT_ERR_INVALID_ARG, "model: input sample shape is NULL");
    return ct_shape_check(ctx, dtype, ndim, shape, NULL);
}

static void build_init(ct_layer_build *b,
                       ct_ctx *ctx,
                       ct_params *params,
                       ct_dtype in_dtype,
                       int32_t in_ndim,
                       const int64_t *in_shape) {
    memset(b, 0, sizeof *b);
    b->ctx = ctx;
    b->params = params;
    b->prefix = "";
    b->where = "model";
    b->in_dtype = in_dtype;
    b->in_ndim = in_ndim;
    for (int32_t d = 0; d < CT_MAX_DIMS; d++)
        b->in_shape[d] = d < in_ndim ? in_shape[d] : 1;
}

/* The named layers without children under l, in forward order, into out (when not NULL) from
 * *n on; *n counts them. */
static void collect_leaves(ct_layer *l, ct_layer **out, int64_t *n) {
    if (l->n_children == 0 && l->name) {
        if (out) {
            l->leaf = (int32_t)*n;
            out[*n] = l;
        }
        (*n)++;
    }
    for (int64_t i = 0; i < l->n_children; i++)
        collect_leaves(l->children[i], out, n);
}

int64_t ct_model_layer_count(const ct_model *m) {
    return m->n_leaves;
}

const char *ct_model_layer_name(const ct_model *m, int64_t i) {
    return i >= 0 && i < m->n_leaves ? m->leaves[i]->name : NULL;
}

const char *ct_model_layer_type(const ct_model *m, int64_t i) {
    return i >= 0 && i < m->n_leaves ? m->leaves[i]->type->name : NULL;
}

ct_status ct_model_wrap(ct_ctx *ctx,
                        ct_params *params,
                        ct_layer *root,
                        const ct_layer_build *b,
                        bool var_len,
                        ct_model **out) {
    *out = NULL;
    ct_model *m = ct_alloc(ctx, sizeof *m);
    if (!m) {
        ct_layer_free(ctx, root);
        return CT_FAIL(ctx, CT_ERR_OOM, "allocating a model");
    }
    memset(m, 0, sizeof *m);
    m->ctx = ctx;
    m->params = params;
    m->root = root;
    m->in_dtype = b->in_dtype;
    m->in_ndim = b->in_ndim;
    memcpy(m->in_shape, b->in_shape, sizeof m->in_shape);
    m->out_ndim = b->out_ndim;
    memcpy(m->out_shape, b->out_shape, sizeof m->out_shape);
    m->var_len = var_len;
    collect_leaves(root, NULL, &m->n_leaves);
    if (m->n_leaves > 0) {
        m->leaves = ct_alloc(ctx, (size_t)m->n_leaves * sizeof *m->leaves);
        if (!m->leaves) {
            m->n_leaves = 0;
            ct_model_destroy(m);
            return CT_FAIL(ctx, CT_ERR_OOM, "allocating a model");
        }
        int64_t n = 0;
        collect_leaves(root, m->leaves, &n);
    }
    *out = m;
    return CT_OK;
}

ct_layer *ct_model_inside(const ct_model *m,
                          ct_ctx **ctx,
                          ct_dtype *in_dtype,
                          int32_t *in_ndim,
                          int64_t *in_shape,
                          bool *var_len) {
    *ctx = m->ctx;
    *var_len = m->var_len;
    *in_dtype = m->in_dtype;
    *in_ndim = m->in_ndim;
    memcpy(in_shape, m->in_shape, sizeof m->in_shape);
    return m->vt ? NULL : m->root;
}

ct_status ct_model_create(ct_ctx *ctx,
                          ct_params *params,
                          ct_dtype in_dtype,
                          int32_t in_ndim,
                          const int64_t *in_shape,
                          const ct_layer_spec *specs,
                          int64_t n,
                          ct_model **out) {
    *out = NULL;
    if (!params) return CT_FAIL(ctx, CT_ERR_INVALID_ARG, "model: the parameter store is NULL");
    CT_TRY(check_input(ctx, in_dtype, in_ndim, in_shape));
    ct_layer_build b;
    build_init(&b, ctx, params, in_dtype, in_ndim, in_shape);
    ct_layer *root = ct_layer_new(ctx, &sequence_type, 0);
    if (!root) return CT_FAIL(ctx, CT_ERR_OOM, "allocating a model");
    ct_status s = ct_layer_create_children(&b, root, specs, n);
    if (s != CT_OK) {
        ct_layer_free(ctx, root);
        return s;
    }
    return ct_model_wrap(ctx, params, root, &b, false, out);
}

ct_status ct_model_build(ct_ctx *ctx,
                         const char *type,
                         const ct_options *opts,
                         ct_params *params,
                         ct_dtype in_dtype,
                         int32_t in_ndim,
                         const int64_t *in_shape,
                         ct_model **out) {
    *out = NULL;
    const ct_model_type *mb = ct_model_type_find(type);
    const char *where = ct_options_where(opts, "model");
    if (!mb) return ct_model_unknown(ctx, where, type);
    if (!params) return CT_FAIL(ctx, CT_ERR_INVALID_ARG, "model: the parameter store is NULL");
    CT_TRY(check_input(ctx, in_dtype, in_ndim, in_shape));
    ct_options empty = {NULL, 0, where};
    ct_status s = mb->build(ctx, opts ? opts : &empty, params, in_dtype, in_ndim, in_shape, out);
    if (s != CT_OK) return ct_err_wrap(ctx, "building a '%s' model", mb->name);
    return CT_OK;
}

ct_status ct_layer_check(ct_ctx *ctx, const char *type, const ct_options *opts) {
    const ct_layer_type *lt = ct_layer_type_find(type);
    const char *where = ct_options_where(opts, "layer");
    if (!lt)
        return CT_FAIL(ctx, CT_ERR_CONFIG, "%s: unknown layer type '%s'", where,
                       type ? type : "(null)");
    if (!lt->keys[0]) return CT_OK; /* nothing to read (a residual block's layers are its own) */
    ct_options empty = {NULL, 0, where};
    ct_layer_build b;
    memset(&b, 0, sizeof b);
    b.ctx = ctx;
    b.where = where;
    b.in_dtype = CT_DTYPE_COUNT;
    b.check_only = true;
    ct_layer scratch;
    memset(&scratch, 0, sizeof scratch);
    scratch.type = lt;
    return lt->create(&b, opts ? opts : &empty, &scratch);
}

ct_status ct_model_check(ct_ctx *ctx, const char *type, const ct_options *opts) {
    const ct_model_type *mb = ct_model_type_find(type);
    const char *where = ct_options_where(opts, "model");
    if (!mb) return ct_model_unknown(ctx, where, type);
    ct_options empty = {NULL, 0, where};
    return mb->check(ctx, opts ? opts : &empty);
}

ct_status ct_model_build_alloc(ct_ctx *ctx,
                               const char *type,
                               const ct_options *opts,
                               ct_params *params,
                               ct_dtype in_dtype,
                               int32_t in_ndim,
                               const int64_t *in_shape,
                               uint64_t seed,
                               ct_model **out) {
    CT_TRY(ct_model_build(ctx, type, opts, params, in_dtype, in_ndim, in_shape, out));
    ct_status s = ct_params_alloc(params);
    if (s == CT_OK) s = ct_model_init_weights(*out, seed);
    if (s != CT_OK) {
        ct_model_destroy(*out);
        *out = NULL;
    }
    return s;
}

void ct_model_destroy(ct_model *m) {
    if (!m) return;
    ct_ctx *ctx = m->ctx;
    ct_layer_free(ctx, m->root);
    if (m->vt && m->vt->destroy) m->vt->destroy(ctx, m->self);
    ct_free(ctx, m->leaves, (size_t)m->n_leaves * sizeof *m->leaves);
    ct_free(ctx, m, sizeof *m);
}

ct_status ct_model_create_with(ct_ctx *ctx,
                               const ct_model_vtable *vt,
                               const ct_options *opts,
                               ct_params *params,
                               ct_dtype in_dtype,
                               int32_t in_ndim,
                               const int64_t *in_shape,
                               ct_model **out) {
    if (!out) return CT_FAIL(ctx, CT_ERR_INVALID_ARG, "ct_model_create_with: out is NULL");
    *out = NULL;
    if (!vt || !vt->create || !vt->forward || !params)
        return CT_FAIL(ctx, CT_ERR_INVALID_ARG,
                       "ct_model_create_with: a vtable with create and forward and a store are "
                       "required");
    /* the same input check as every other model: the batch dimension must fit in front */
    CT_TRY(check_input(ctx, in_dtype, in_ndim, in_shape));
    if (in_ndim >= CT_MAX_DIMS)
        return CT_FAIL(ctx, CT_ERR_INVALID_ARG, "model '%s': input samples of %d dims (at most %d)",
                       vt->name, (int)in_ndim, CT_MAX_DIMS - 1);
    ct_model *m = ct_alloc(ctx, sizeof *m);
    if (!m) return CT_FAIL(ctx, CT_ERR_OOM, "model '%s': out of memory", vt->name);
    memset(m, 0, sizeof *m);
    m->ctx = ctx;
    m->params = params;
    m->in_dtype = in_dtype;
    m->in_ndim = in_ndim;
    for (int32_t d = 0; d < in_ndim; d++)
        m->in_shape[d] = in_shape[d];
    ct_status s = vt->create(ctx, opts, params, in_dtype, in_ndim, in_shape, &m->out_ndim,
                             m->out_shape, &m->self);
    if (s == CT_OK && (m->out_ndim < 0 || m->out_ndim >= CT_MAX_DIMS))
        s = CT_FAIL(ctx, CT_ERR_INVALID_ARG, "model '%s': create gave an output of %d dims",
                    vt->name, (int)m->out_ndim);
    m->vt = vt;
    if (s != CT_OK) { /* a failed create frees what it made itself */
        if (m->self && vt->destroy) vt->destroy(ctx, m->self);
        ct_free(ctx, m, sizeof *m);
        return s;
    }
    *out = m;
    return CT_OK;
}

ct_status ct_model_init_weights(ct_model *m, uint64_t seed) {
    int64_t n = ct_params_count(m->params);
    for (int64_t i = 0; i < n; i++)
        if (!ct_params_at(m->params, i)->data)
            return CT_FAIL(m->ctx, CT_ERR_INVALID_ARG,
                           "model init: parameter '%s' has no memory yet (call ct_params_alloc "
                           "between ct_model_create and ct_model_init_weights)",
                           ct_params_at(m->params, i)->name);
    ct_rng rng = ct_rng_init(seed, 0x6D6F64656Cull /* "model" */);
    if (m->vt) {
        if (m->vt->init) m->vt->init(m->self, &rng);
    } else {
        ct_layer_init_tree(m->root, &rng);
    }
    return CT_OK;
}

static bool is_int(ct_dtype dt) {
    return dt == CT_I32 || dt == CT_I64;
}

ct_tensor *ct_model_forward(ct_model *m, ct_graph *g, ct_tensor *x) {
    if (!x || ct_graph_status(g) != CT_OK) return NULL;
    bool ok = x->ndim == m->in_ndim + 1 &&
              (x->dtype == m->in_dtype || (is_int(x->dtype) && is_int(m->in_dtype)));
    for (int32_t d = 0; ok && d < m->in_ndim; d++)
        ok = x->shape[d + 1] == m->in_shape[d] ||
             (m->var_len && d == 0 && x->shape[1] >= 1 && x->shape[1] <= m->in_shape[0]);
    if (!ok) {
        char got[96], want[96];
        ct_shape_str(x, got, sizeof got);
        shape_str(m->in_ndim, m->in_shape, want, sizeof want);
        CT_GRAPH_FAIL(g, CT_ERR_SHAPE, "model input %s %s, expected [B] + sample %s %s%s", got,
                      ct_dtype_name(x->dtype), want, ct_dtype_name(m->in_dtype),
                      m->var_len ? " (the first sample dim may be shorter)" : "");
        return NULL;
    }
    if (m->vt) return m->vt->forward(m->self, g, x);
    return m->root->type->forward(m->root, g, x);
}

int32_t ct_model_output_shape(const ct_model *m, int64_t *shape) {
    for (int32_t d = 0; d < m->out_ndim; d++)
        shape[d] = m->out_shape[d];
    return m->out_ndim;
}

ct_tensor *ct_model_param(const ct_model *m, const char *name) {
    return ct_params_find(m->params, name);
}

static bool is_norm_in(const ct_layer *l, const ct_tensor *t) {
    for (int k = 0; k < CT_LAYER_MAX_TENSORS; k++)
        if (l->t[k] == t) return (l->norm_slots >> k & 1u) != 0;
    for (int64_t i = 0; i < l->n_children; i++)
        if (is_norm_in(l->children[i], t)) return true;
    return false;
}

bool ct_model_param_is_norm(const ct_model *m, const ct_tensor *t) {
    return m && t && m->root && is_norm_in(m->root, t);
}

const ct_layer *ct_model_root(const ct_model *m) {
    return m->vt ? NULL : m->root;
}
