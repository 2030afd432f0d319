/*
 * model.h - models described by name: layer types found in a table, sequential stacks of them
 * (with residual blocks) and built-in model builders (mlp, cnn, gpt) configured by options.
 *
 * A model declares its parameters and buffers in a caller-owned ct_params store under PyTorch
 * state_dict names, so weights pass to and from the matching torch module unchanged:
 *   - a sequential stack names its layers like nn.Sequential, by position ("0.weight",
 *     "3.bias"), or by a spec's explicit name; a residual block is an nn.Sequential subclass
 *     whose forward returns x + body(x), so its children are "<i>.<j>.weight";
 *   - the gpt builder uses nanoGPT's names (transformer.wte.weight, transformer.h.0.ln_1.weight,
 *     ..., lm_head.weight).
 *
 * The sequence is always:
 *     ct_params_create -> ct_model_create/ct_model_build -> ct_params_alloc ->
 * ct_model_init_weights (or load weights) -> ct_model_forward each step -> ct_model_destroy ->
 * ct_params_destroy. ct_model_build_alloc does the middle three in one call.
 *
 * Sample shapes exclude the batch dimension: a model made for input sample [1, 28, 28] takes
 * x [B, 1, 28, 28]. Training or evaluation behaviour (dropout, batch norm) follows the graph's
 * training mode (ct_graph_set_training).
 *
 * Ownership: the model borrows the ct_params store (which must outlive it) and the specs and
 * options only during create; it owns nothing the caller sees. Tensors from ct_model_forward
 * are step tensors and die at ct_graph_reset. Errors name the layer (index, name and type), the
 * option key or the shapes involved:
 *     "layer 2 ('2', conv2d): input sample [64], expected [C, H, W]"
 */
#ifndef CTRAIN_MODEL_H
#define CTRAIN_MODEL_H

#include "ctrain/autograd.h"
#include "ctrain/nn.h"
#include "ctrain/options.h"
#include "ctrain/rng.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * One layer of a sequential stack. Built-in types and their options (defaults in brackets):
 *   linear       out, bias [true]; in = the input's last dim; input [..., in] -> [..., out]
 *   conv2d       out, kernel [3], stride [1], padding [0], dilation [1], groups [1],
 *                bias [true]; input [C, H, W]
 *   batchnorm    momentum [0.1], eps [1e-5], affine [true]; BatchNorm1d on [C], 2d on [C,H,W]
 *   layernorm    eps [1e-5], affine [true]; over the last dim
 *   relu, silu, tanh, sigmoid, flatten, global_avg_pool ([C,H,W] -> [C])    (no options)
 *   gelu         approx [none] | tanh
 *   leaky_relu   negative_slope [0.01]
 *   dropout      p [0.5]
 *   maxpool2d, avgpool2d   kernel [2], stride [= kernel], padding [0]
 *   embedding    vocab, dim; input integer ids [...] -> [..., dim]
 *   residual     children: x + children(x); the children must keep the shape
 * Parameters follow PyTorch's default initialisation for the same module.
 */
typedef struct ct_layer_spec {
    const char *type;                     /* a layer type name */
    const char *name;                     /* NULL: its position in the sequence ("0", "1", ...) */
    ct_options opts;                      /* the type's options (borrowed during create) */
    const struct ct_layer_spec *children; /* residual: the nested sequence */
    int64_t n_children;
} ct_layer_spec;

typedef struct ct_model ct_model;

/*
 * A sequential stack of n layers for input samples of (in_dtype, in_ndim, in_shape). Declares
 * every parameter and buffer in `params` (which must not be allocated yet). *out is NULL on
 * failure: CT_ERR_CONFIG for an unknown type (the message lists the known ones), an unknown or
 * bad option; CT_ERR_SHAPE when a layer cannot take its input (naming the layer and shapes).
 */
CT_API ct_status ct_model_create(ct_ctx *ctx,
                                 ct_params *params,
                                 ct_dtype in_dtype,
                                 int32_t in_ndim,
                                 const int64_t *in_shape,
                                 const ct_layer_spec *specs,
                                 int64_t n,
                                 ct_model **out);

/*
 * A built-in model by name, configured by opts (unknown keys fail with CT_ERR_CONFIG):
 *   mlp  hidden ["512,256"], activation [relu] (relu|gelu|silu|tanh|sigmoid|leaky_relu),
 *        dropout [0] (a dropout layer after each activation when > 0), out (required).
 *        Input [..., in]. Layers: linear, activation[, dropout] per hidden size, then linear.
 *   cnn  channels ["32,64"], out (required). Input [C, H, W]. Per stage: conv2d 3x3 padding 1,
 *        batchnorm, relu, maxpool2d 2; then global_avg_pool and linear.
 *   gpt  n_layer [2], n_head [2], d_model [64], context [64], vocab (required), dropout [0],
 *        tied [true], bias [true] (false: no biases in the linear and layer-norm layers, as
 *        nanoGPT's bias=False). Input ids [T] (i32 or i64, T <= context at forward), output logits
 *        [T, vocab]. nanoGPT's architecture and names: token + learned position embeddings,
 *        pre-LayerNorm blocks (causal attention: c_attn, c_proj; MLP: c_fc, exact erf GELU as
 *        nanoGPT's nn.GELU(), c_proj), final ln_f, lm_head without bias. Dropout is applied
 *        after the embeddings and each residual branch (nanoGPT's attention-weight dropout is
 *        not). With tied, lm_head.weight is transformer.wte.weight: the store holds it once,
 *        under "transformer.wte.weight", with "lm_head.weight" its alias (ct_params_alias);
 *        ct_model_param and ct_params_find find it under either name. (nanoGPT
 *        on torch < 2.0 also keeps causal-mask buffers "attn.bias" that are not weights.)
 *        ct_model_init_weights uses nanoGPT's init: N(0, 0.02) weights and embeddings, zero biases,
 *        c_proj weights N(0, 0.02 / sqrt(2 n_layer)).
 */
CT_API ct_status ct_model_build(ct_ctx *ctx,
                                const char *type,
                                const ct_options *opts,
                                ct_params *params,
                                ct_dtype in_dtype,
                                int32_t in_ndim,
                                const int64_t *in_shape,
                                ct_model **out);

/* ct_model_build, then ct_params_alloc and ct_model_init_weights(seed): a ready model. */
CT_API ct_status ct_model_build_alloc(ct_ctx *ctx,
                                      const char *type,
                                      const ct_options *opts,
                                      ct_params *params,
                                      ct_dtype in_dtype,
                                      int32_t in_ndim,
                                      const int64_t *in_shape,
                                      uint64_t seed,
                                      ct_model **out);

/*
 * A model type of the user's (a plugin's `symbol` in an experiment file): its own tensors and
 * forward, written with the ops of ops.h. The model calls:
 *   create   reads opts (unknown keys: fail with CT_ERR_CONFIG), checks the input sample
 *            (in_dtype, in_ndim, in_shape), declares its tensors in params with ct_params_add
 *            under state_dict names (keeping the ct_tensor pointers, whose data arrive with
 *            ct_params_alloc), writes the output sample shape (out_shape has CT_MAX_DIMS
 *            room) and sets *self to its state (may stay NULL);
 *   init     (may be NULL) initialises its tensors from rng at ct_model_init_weights;
 *   forward  x [B, in sample...] -> [B, out sample...], NULL on failure (graph status);
 *   destroy  (may be NULL) frees self at ct_model_destroy, or after a create that failed
 *            having set *self.
 * The vtable must outlive the model.
 */
typedef struct ct_model_vtable {
    ct_plugin_tag tag; /* CT_PLUGIN_MODEL in a plugin, 0 in the library (status.h) */
    const char *name;
    ct_status (*create)(ct_ctx *ctx,
                        const ct_options *opts,
                        ct_params *params,
                        ct_dtype in_dtype,
                        int32_t in_ndim,
                        const int64_t *in_shape,
                        int32_t *out_ndim,
                        int64_t *out_shape,
                        void **self);
    void (*init)(void *self, ct_rng *rng);
    ct_tensor *(*forward)(void *self, ct_graph *g, ct_tensor *x);
    void (*destroy)(ct_ctx *ctx, void *self);
    /* Optional (NULL: create checks them): the options' keys and values read as create reads
     * them, without the input shape, making nothing; `ctrain fit` calls it before any data
     * are opened, so a bad option is not reported after minutes of loading. */
    ct_status (*check)(ct_ctx *ctx, const ct_options *opts);
} ct_model_vtable;

/* A model of a user's type (see ct_model_vtable). Fails as vt->create does, or with
 * CT_ERR_INVALID_ARG for a vtable without create or forward. *out is NULL on failure. */
CT_API ct_status ct_model_create_with(ct_ctx *ctx,
                                      const ct_model_vtable *vt,
                                      const ct_options *opts,
                                      ct_params *params,
                                      ct_dtype in_dtype,
                                      int32_t in_ndim,
                                      const int64_t *in_shape,
                                      ct_model **out);

/* No-op for NULL. The parameters stay in the store. */
CT_API void ct_model_destroy(ct_model *m);

/* Initialises every parameter and buffer (PyTorch's defaults per layer; nanoGPT's for gpt)
 * from a stream of `seed`. Fails with CT_ERR_INVALID_ARG before ct_params_alloc. */
CT_API ct_status ct_model_init_weights(ct_model *m, uint64_t seed);

/* x [B, sample...] -> y [B, output sample...]. NULL on failure (sticky on the graph): an input
 * whose dtype or sample shape differs from the model's fails with CT_ERR_SHAPE. */
CT_API ct_tensor *ct_model_forward(ct_model *m, ct_graph *g, ct_tensor *x);

/* The layers per-layer timing measures (ct_graph_set_layer_times): the layers of the model's
 * specs that have no children of their own (a residual block's layers, not the block), in
 * forward order; a model type's own parts (gpt's blocks) are not among them. Their count, and
 * layer i's name (its parameters' prefix: "0", "2.1", a spec's name; NULL out of range). */
CT_API int64_t ct_model_layer_count(const ct_model *m);
CT_API const char *ct_model_layer_name(const ct_model *m, int64_t i);
/* Layer i's type ("linear", "relu"); NULL out of range. */
CT_API const char *ct_model_layer_type(const ct_model *m, int64_t i);

/* The output sample shape for the declared input: writes shape[0..ndim) (CT_MAX_DIMS room)
 * and returns ndim. */
CT_API int32_t ct_model_output_shape(const ct_model *m, int64_t *shape);

/*
 * Decoding a sequence model token by token: a model whose input sample is token ids [T] and
 * whose output is logits [T, vocab], that takes any T up to its context (the gpt builder's).
 * A decoder holds n_rows sequences side by side. Each ct_model_decoder_feed appends tokens to
 * some rows and gives, for each of them, the logits that follow its last token, as
 * ct_model_forward over the row's window (its last `context` tokens, positions from 0) gives
 * them at the window's last position.
 *
 * With use_cache, a gpt model without autocast keeps each row's keys and values per layer: a
 * row's new tokens (a prompt: one pass, the prefill; then one token per call) attend to the
 * cached ones, and the tokens of all rows fed in one call go through each weight matrix
 * together. It runs the kernels directly (no graph, no autograd tape) on buffers made at
 * create, so feeding allocates nothing. Rows hold their own lengths (no padding). When a row
 * outgrows the context, its window slides: the positions of every kept token change, so the
 * window's keys and values are computed again in one pass, as the recomputing path does. With
 * bf16 autocast or use_cache false the decoder recomputes the row's window through
 * ct_model_forward on a graph (evaluation mode, no gradients) for every call.
 *
 * The cache path's decoding steps (and any row fed at most 8 new tokens) go through a
 * dot-product kernel that reads each weight matrix once per call, with no repacking; a row fed
 * more (a prompt, a slid window) goes through the GEMM kernels on its own. So a row's logits
 * have the same bits whatever other rows are fed beside it, and whatever the thread count.
 * The two paths compute the same function of the weights and agree to float rounding (the
 * order of some sums differs), so they give the same greedy tokens unless two logits tie to
 * within that rounding. Ownership: the decoder borrows the model (which must outlive it
 * and keep its weights) and owns its buffers; destroy(NULL) is a no-op.
 */
typedef struct ct_model_decoder ct_model_decoder;

typedef struct ct_model_decoder_params {
    int64_t n_rows;    /* sequences decoded side by side [1] */
    bool use_cache;    /* keys and values cached where the model allows it [true] */
    ct_dtype autocast; /* the recomputing path's graph autocast (CT_F32: none; CT_BF16
                          recomputes even with use_cache) [CT_F32] */
} ct_model_decoder_params;

CT_API ct_model_decoder_params ct_model_decoder_default_params(void);

/* A decoder for m. CT_ERR_CONFIG for a model that is not ids [T] -> logits [T, vocab] for
 * every T up to its context, or n_rows < 1; CT_ERR_OOM. *out is NULL on failure. */
CT_API ct_status ct_model_decoder_create(ct_model *m,
                                         const ct_model_decoder_params *params,
                                         ct_model_decoder **out);
CT_API void ct_model_decoder_destroy(ct_model_decoder *d);

/* Whether the decoder runs the key/value cache (false: it recomputes each window). */
CT_API bool ct_model_decoder_cached(const ct_model_decoder *d);

/* The model's context (the longest window) and vocabulary size. */
CT_API int64_t ct_model_decoder_context(const ct_model_decoder *d);
CT_API int64_t ct_model_decoder_vocab(const ct_model_decoder *d);

/*
 * Appends ids[r][0..n_ids[r]) to row r, for each row with n_ids[r] > 0 (the others are left
 * as they are and their logits rows untouched), and writes the logits after each such row's
 * last token to logits[r * vocab .. (r + 1) * vocab). ids in [0, vocab). A row's tokens are
 * its history: feeding a prompt then one token per call is the same as feeding it all at
 * once. CT_ERR_INVALID_ARG for a token out of range (nothing fed); a failure inside the model
 * leaves the decoder's rows undefined (reset them).
 */
CT_API ct_status ct_model_decoder_feed(ct_model_decoder *d,
                                       const int64_t *const *ids,
                                       const int64_t *n_ids,
                                       float *logits);

/* Forgets row r's tokens (its next feed starts a new sequence). */
CT_API void ct_model_decoder_reset(ct_model_decoder *d, int64_t r);

/*
 * Greedy continuation of n sequences: prompts[i][0..lens[i]) (lens[i] >= 1) are fed together,
 * then n_new tokens each taken as the largest logit (the lowest id on a tie), written to
 * out[i * n_new .. (i + 1) * n_new). A prompt longer than the context keeps its last
 * `context` tokens. use_cache as in ct_model_decoder_params. Fails as the decoder does.
 */
CT_API ct_status ct_model_generate(ct_model *m,
                                   const int64_t *const *prompts,
                                   const int64_t *lens,
                                   int64_t n,
                                   int64_t n_new,
                                   bool use_cache,
                                   int64_t *out);

/* The model's parameter or buffer of that state_dict name (aliases such as a tied
 * "lm_head.weight" included), or NULL. */
CT_API ct_tensor *ct_model_param(const ct_model *m, const char *name);

/* Whether t (a tensor of the model's store) belongs to a normalisation layer: a batchnorm or
 * layernorm layer of a sequential stack (named by position, "1.weight"), or gpt's ln_1, ln_2
 * and ln_f. By the layer that declared it, not by name. False for any other tensor, for a
 * user's model type (its layers are its own) and for NULL. */
CT_API bool ct_model_param_is_norm(const ct_model *m, const ct_tensor *t);

/*
 * The built-in layer types (a sequential model's layers) and model types (mlp, cnn, gpt), as
 * configurations name them, each with its option keys (NULL-terminated, static) for checking a
 * configuration before the data are opened. The other members are the library's own: the
 * layer's or model's construction, which ct_model_build and ct_model_create run.
 */
struct ct_layer;       /* a node of a built model */
struct ct_layer_build; /* where a layer is built and what comes in */
typedef struct ct_layer_type {
    const char *name;
    const char *const *keys;
    /* Reads options, checks the input sample shape, declares tensors, sets the output shape. */
    ct_status (*create)(struct ct_layer_build *b, const ct_options *opts, struct ct_layer *l);
    /* PyTorch's default initialisation of the layer's tensors (NULL: nothing to do). */
    void (*init)(struct ct_layer *l, ct_rng *rng);
    /* x [B, in sample...] -> [B, out sample...]; training mode from the graph. */
    ct_tensor *(*forward)(struct ct_layer *l, ct_graph *g, ct_tensor *x);
} ct_layer_type;

typedef struct ct_model_type {
    const char *name;
    const char *const *keys;
    /* Reads the options as build does, without an input shape (the size the data give may be
     * absent). */
    ct_status (*check)(ct_ctx *ctx, const ct_options *opts);
    /* Builds the model for the input sample shape into *out, declaring its tensors in params. */
    ct_status (*build)(ct_ctx *ctx,
                       const ct_options *opts,
                       ct_params *params,
                       ct_dtype in_dtype,
                       int32_t in_ndim,
                       const int64_t *in_shape,
                       ct_model **out);
} ct_model_type;

/* The built-in types: a NULL-terminated table of *count; and the one of a name (NULL for a
 * name that is not one, or NULL). */
CT_API const ct_layer_type *const *ct_layer_types(int64_t *count);
CT_API const ct_layer_type *ct_layer_type_find(const char *name);
CT_API const ct_model_type *const *ct_model_types(int64_t *count);
CT_API const ct_model_type *ct_model_type_find(const char *name);

/* Reads a built-in layer type's options as building it would (types, ranges, required keys,
 * enum values) without an input: CT_ERR_CONFIG naming opts->where and the key. For checking a
 * configuration before the data are opened; the input is checked when the model is built. */
CT_API ct_status ct_layer_check(ct_ctx *ctx, const char *type, const ct_options *opts);

/*
 * Checks a built-in model's options as ct_model_build would, without an input shape and
 * without building anything: the type, the keys and their values. The size the data give
 * (mlp's and cnn's `out`, gpt's `vocab`) may be absent. CT_ERR_CONFIG with ct_model_build's
 * messages; what depends on the input shape is checked when the model is built.
 */
CT_API ct_status ct_model_check(ct_ctx *ctx, const char *type, const ct_options *opts);

#ifdef __cplusplus
}
#endif

#endif /* CTRAIN_MODEL_H */
