/*
 * nn_internal.h - the layer type table behind model.h.
 *
 * A layer is a generic node: its type (a vtable found by name in layer_registry.c), the tensors
 * it declared in the parameter store, a few integer and float settings, and children (for
 * sequences). So a layer type is one create/init/forward triple and needs no destructor: the
 * model frees every node the same way. The store owns the tensors; a layer only points at them.
 */
#ifndef CT_NN_INTERNAL_H
#define CT_NN_INTERNAL_H

#include "core/core_internal.h"
#include "ctrain/model.h"
#include "ctrain/ops.h"

#define CT_LAYER_MAX_TENSORS 12
#define CT_LAYER_ALL_SLOTS   ((1u << CT_LAYER_MAX_TENSORS) - 1)

typedef struct ct_layer ct_layer;

/* What a layer's create gets: where it sits and what comes in. It fills out_* (preset to the
 * input's, so shape-keeping layers need not touch them). */
typedef struct ct_layer_build {
    ct_ctx *ctx;
    ct_params *params;
    const char *prefix; /* state_dict prefix of this layer ("3", "2.0", "transformer.h.1") */
    const char *where;  /* "layer 3 ('3', conv2d)" for messages */
    const ct_layer_spec *spec;
    ct_dtype in_dtype;
    int32_t in_ndim;
    int64_t in_shape[CT_MAX_DIMS];
    ct_dtype out_dtype;
    int32_t out_ndim;
    int64_t out_shape[CT_MAX_DIMS];
    /* ct_layer_check: read and check the options only. There is no input (its dtype is
       CT_DTYPE_COUNT), and the first input check, through ct_layer_bad_input, ends the create
       with CT_OK: every create reads its options before it looks at its input. */
    bool check_only;
} ct_layer_build;

struct ct_layer {
    const ct_layer_type *type;
    ct_tensor *t[CT_LAYER_MAX_TENSORS]; /* the type's tensors in the store, by slot */
    int64_t i[8];                       /* the type's integer settings */
    float f[4];                         /* the type's float settings */
    ct_layer **children;
    int64_t n_children;
    uint32_t norm_slots; /* bit k: t[k] belongs to a batch or layer norm (set by the creator;
                            ct_model_param_is_norm reads it) */
    char *name;          /* a spec's layer: its state_dict prefix ("3", "2.0"); else NULL */
    int32_t leaf;        /* a named layer without children: its index among the model's, in
                            forward order (ct_model_layer_name); else -1 */
};

/* The error for a layer type that is not one: the known ones and the nearest
 * (layer_registry.c). */
CT_INTERNAL ct_status ct_layer_unknown(ct_ctx *ctx, const char *where, const char *type);

/* Declares "<prefix>.<name>" in the store (f32 trainable or a buffer) into l->t[slot]. */
CT_INTERNAL ct_status ct_layer_declare(ct_layer_build *b,
                                       ct_layer *l,
                                       int slot,
                                       const char *name,
                                       ct_dtype dtype,
                                       int32_t ndim,
                                       const int64_t *shape,
                                       ct_param_kind kind);
/* Fails with CT_ERR_SHAPE: "<where>: input sample [..], expected <what>". */
CT_INTERNAL ct_status ct_layer_bad_input(ct_layer_build *b, const char *expected);

/* Creates a child sequence of specs under prefix (model.c); children go into l->children. */
CT_INTERNAL ct_status ct_layer_create_children(ct_layer_build *b,
                                               ct_layer *l,
                                               const ct_layer_spec *specs,
                                               int64_t n);
/* Allocates an empty node with n children slots; freed by ct_layer_free. */
CT_INTERNAL ct_layer *ct_layer_new(ct_ctx *ctx, const ct_layer_type *type, int64_t n_children);
CT_INTERNAL void ct_layer_free(ct_ctx *ctx, ct_layer *l);
/* Runs init on l and its children, depth first. */
CT_INTERNAL void ct_layer_init_tree(ct_layer *l, ct_rng *rng);
/* Runs the children of l in order. */
CT_INTERNAL ct_tensor *ct_layer_forward_children(ct_layer *l, ct_graph *g, ct_tensor *x);
/* A conv2d layer's forward followed by ReLU, as one op (ct_op_conv2d_relu): what
 * ct_layer_forward_children runs for a conv2d layer that a relu layer follows. */
CT_INTERNAL ct_tensor *ct_layer_conv2d_relu_forward(ct_layer *l, ct_graph *g, ct_tensor *x);
/* The same followed by a max pool layer's window (ct_op_conv2d_relu_maxpool). */
CT_INTERNAL ct_tensor *ct_layer_conv2d_relu_maxpool_forward(ct_layer *l,
                                                            const ct_pool2d_params *pool,
                                                            ct_graph *g,
                                                            ct_tensor *x);
/* A maxpool2d or avgpool2d layer's window. */
CT_INTERNAL ct_pool2d_params ct_layer_pool2d_params(const ct_layer *l);

/* Built-in layer types (listed in layer_registry.c). */
extern const ct_layer_type ct_layer_linear;          /* layers_linear.c */
extern const ct_layer_type ct_layer_conv2d;          /* layers_linear.c */
extern const ct_layer_type ct_layer_embedding;       /* layers_linear.c */
extern const ct_layer_type ct_layer_batchnorm;       /* layers_norm.c */
extern const ct_layer_type ct_layer_layernorm;       /* layers_norm.c */
extern const ct_layer_type ct_layer_relu;            /* layers_act.c */
extern const ct_layer_type ct_layer_gelu;            /* layers_act.c */
extern const ct_layer_type ct_layer_silu;            /* layers_act.c */
extern const ct_layer_type ct_layer_tanh;            /* layers_act.c */
extern const ct_layer_type ct_layer_sigmoid;         /* layers_act.c */
extern const ct_layer_type ct_layer_leaky_relu;      /* layers_act.c */
extern const ct_layer_type ct_layer_dropout;         /* layers_act.c */
extern const ct_layer_type ct_layer_maxpool2d;       /* layers_pool.c */
extern const ct_layer_type ct_layer_avgpool2d;       /* layers_pool.c */
extern const ct_layer_type ct_layer_global_avg_pool; /* layers_pool.c */
extern const ct_layer_type ct_layer_flatten;         /* layers_pool.c */
extern const ct_layer_type ct_layer_residual;        /* model.c */

/* Built-in model types (model_builders.c, gpt.c): build fills a model's root from options;
 * check reads the same options without an input shape (the data's size key may be absent). */
extern const ct_model_type ct_model_mlp; /* model_builders.c */
extern const ct_model_type ct_model_cnn; /* model_builders.c */
extern const ct_model_type ct_model_gpt; /* gpt.c */

/* The error for a model type that is not one (layer_registry.c). */
CT_INTERNAL ct_status ct_model_unknown(ct_ctx *ctx, const char *where, const char *type);

/* A model around a root node made by a builder (model.c). A tied tensor's second name is an
 * alias in the store (ct_params_alias); var_len lets the first sample dim be shorter than declared
 * (sequences). */
CT_INTERNAL ct_status ct_model_wrap(ct_ctx *ctx,
                                    ct_params *params,
                                    ct_layer *root,
                                    const ct_layer_build *b,
                                    bool var_len,
                                    ct_model **out);

/* For code that walks a built model's nodes (src/export): the root (NULL for a user's model
 * type), and the heads of a gpt root's attention (-1 for any other node). The layer types'
 * settings sit in the slots their files name (layers_*.c). */
CT_INTERNAL const ct_layer *ct_model_root(const ct_model *m);
CT_INTERNAL int64_t ct_gpt_heads(const ct_layer *root);
/* What a decoder needs of a model (model.c): its context, its root node (NULL for a user's
 * model type), the declared input sample and whether its first dim may be shorter. */
CT_INTERNAL ct_layer *ct_model_inside(const ct_model *m,
                                      ct_ctx **ctx,
                                      ct_dtype *in_dtype,
                                      int32_t *in_ndim,
                                      int64_t *in_shape,
                                      bool *var_len);

#endif /* CT_NN_INTERNAL_H */
