/*
 * autograd.h - the per-step graph: an arena for step tensors, a tape of operations and
 * reverse-mode differentiation.
 *
 * A ct_graph is created once and reused every step. Operations (ops.h, loss.h) compute their
 * result at once (eager) and, when gradients are enabled and an input requires them, append a
 * node to the tape. ct_graph_backward walks the tape backwards and accumulates (+=) gradients
 * into every tensor that requires them: parameter gradients live in the ct_params grad buffer
 * and keep accumulating until zeroed; step tensors get gradient buffers from the arena.
 *
 * Ownership and lifetime: every tensor, node and buffer the graph hands out lives in its arena
 * and dies at ct_graph_reset, which is O(1) and keeps the arena's memory, so that after the
 * first step a step makes no heap allocation. With gradients off, a container of layers frees
 * each layer's activations once the next layer has read them (the no-grad layer scopes below),
 * so an evaluation holds about two layers' activations at a time. Errors are sticky: an op that
 * fails records the message in the context, returns NULL, and every later op given a NULL input or
 * called on a failed graph returns NULL too; ct_graph_status tells what happened. ct_graph_reset
 * clears it.
 */
#ifndef CTRAIN_AUTOGRAD_H
#define CTRAIN_AUTOGRAD_H

#include "ctrain/rng.h"
#include "ctrain/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ct_graph ct_graph;
typedef struct ct_node ct_node;

/* Backward of one node: read ct_graph_grad of n->out and add into the inputs' gradients. */
typedef void (*ct_backward_fn)(ct_graph *g, ct_node *n);

/* An operation's identity on the tape. Each op file defines one as a static const. */
typedef struct ct_op_def {
    const char *name;
    ct_backward_fn backward;
} ct_op_def;

#define CT_NODE_MAX_IN 4

struct ct_node {
    const ct_op_def *op;
    ct_tensor *out;
    ct_tensor *in[CT_NODE_MAX_IN]; /* inputs; entries past n_in are NULL */
    int32_t n_in;
    void *saved;     /* op-owned data in the arena (masks, statistics) */
    int64_t iarg[8]; /* op-specific integer arguments */
    float farg[4];   /* op-specific float arguments */
    ct_node *prev;   /* the node recorded before this one */
    int32_t layer;   /* the layer whose forward recorded it (ct_graph_begin_layer); -1 none */
};

typedef struct ct_graph_params {
    size_t arena_chunk; /* bytes per arena chunk (0 = 4 MiB); larger requests get their own */
    uint64_t seed;      /* seed of the graph's RNG stream (dropout) */
} ct_graph_params;

CT_API ct_graph_params ct_graph_default_params(void);
CT_API ct_status ct_graph_create(ct_ctx *ctx, const ct_graph_params *params, ct_graph **out);
CT_API void ct_graph_destroy(ct_graph *g);
CT_API ct_ctx *ct_graph_ctx(const ct_graph *g);

/* Forgets every step tensor, node and gradient buffer in O(1) and clears the sticky status.
 * Training mode, grad mode and the RNG stream are kept. */
CT_API void ct_graph_reset(ct_graph *g);

/* Gradient recording (default on). Off = no-grad mode for evaluation: no node is recorded. */
CT_API void ct_graph_set_grad_enabled(ct_graph *g, bool enabled);
CT_API bool ct_graph_grad_enabled(const ct_graph *g);
/* Training mode (default on): dropout drops and batch norm uses batch statistics. */
CT_API void ct_graph_set_training(ct_graph *g, bool training);
CT_API bool ct_graph_training(const ct_graph *g);
/* The graph's RNG stream (dropout). Borrowed; save and restore it by value. */
CT_API ct_rng *ct_graph_rng(ct_graph *g);
/* Mixed precision (default CT_F32: off). CT_BF16: matmul, linear and conv2d round their
 * operands to bf16 (nearest, ties to even) and multiply them with f32 accumulation into f32
 * outputs; their backward passes round the incoming gradient the same way and take the op's
 * gradients from it and the operands rounded again (the forward's rounded copies are scratch;
 * the same inputs round to the same bits). With native bf16 GEMMs (ct_ctx_params.bf16_kernels)
 * a parameter's rounded copy is kept to the next ct_graph_reset or optimizer update and shared
 * by the passes in between: reset the graph before writing parameter values yourself between
 * forward passes; and linear keeps the rounded copy of its input (2 bytes an element, to the
 * next ct_graph_reset) for its weight gradient. As in f32, an op's inputs must not be written
 * between its forward pass and the backward pass. causal_attention
 * rounds q, k, v and its incoming gradient (the probabilities stay f32 inside the fused
 * kernel). Every other op, the losses, the norms and the parameters (the master weights) and
 * their gradients stay f32. Any other dtype is a CT_ERR_INVALID_ARG (recorded as the graph's
 * failure) and leaves the setting as it was. Nodes remember how they ran: a backward pass
 * does not depend on the setting at the time it runs. */
CT_API ct_status ct_graph_set_autocast(ct_graph *g, ct_dtype dtype);
CT_API ct_dtype ct_graph_autocast(const ct_graph *g);

/* CT_OK, or the first failure since the last reset. */
CT_API ct_status ct_graph_status(const ct_graph *g);

/* Bytes the arena holds (capacity) and how many heap allocations it made in its life. */
CT_API size_t ct_graph_arena_capacity(const ct_graph *g);
CT_API int64_t ct_graph_arena_allocations(const ct_graph *g);
/* Bytes of the arena handed out and not yet freed (by a reset, a scratch release or a no-grad
 * scope moving on), and the most there were at once since the graph was created or
 * ct_graph_reset_high_water (which starts it again from what is in use now). */
CT_API size_t ct_graph_arena_in_use(const ct_graph *g);
CT_API size_t ct_graph_arena_high_water(const ct_graph *g);
CT_API void ct_graph_reset_high_water(ct_graph *g);
/* ct_graph_reset, then gives every chunk of the arena back to the allocator: the next steps
 * allocate afresh. For a change of workload (the trainer calls it around an evaluation, whose
 * batches differ in size and kind from the training steps'). */
CT_API void ct_graph_trim(ct_graph *g);

/* A step tensor with uninitialised (ct_graph_new) or zeroed (ct_graph_zeros) data. */
CT_API ct_tensor *ct_graph_new(ct_graph *g, ct_dtype dtype, int32_t ndim, const int64_t *shape);
CT_API ct_tensor *ct_graph_zeros(ct_graph *g, ct_dtype dtype, int32_t ndim, const int64_t *shape);
/* A step tensor that borrows caller data (a batch): no copy; the data must outlive the step. */
CT_API ct_tensor *
ct_graph_wrap(ct_graph *g, void *data, ct_dtype dtype, int32_t ndim, const int64_t *shape);
/* Arena scratch memory, 64-byte aligned, dies at reset. NULL (and a sticky failure) on OOM. */
CT_API void *ct_graph_alloc(ct_graph *g, size_t size);

/*
 * Backpropagates from `loss`, which must be an f32 tensor with one element: its gradient is
 * seeded with 1 and every node of the tape runs its backward, newest first. Gradients of
 * leaves (parameters, and tensors the caller flagged CT_TENSOR_REQUIRES_GRAD) accumulate;
 * gradients of intermediate tensors are recomputed on each call, so calling it twice in one
 * step (two losses) adds each loss's gradient to the leaves once. As in PyTorch, they are not
 * kept: once a node's backward has run, its output's gradient buffer is handed to the next
 * gradient that fits and the output's grad is NULL (this keeps the arena near the size of
 * the activations). A buffer of the caller's own set as an intermediate's grad before
 * backward (to read dL/dh) is left alone: only buffers the graph allocated
 * (CT_TENSOR_GRAD_ARENA) are reused.
 * A leaf that is neither a parameter nor a step tensor (an owned tensor flagged by the caller)
 * gets its gradient buffer from the arena; ct_graph_reset sets its grad back to NULL.
 */
CT_API ct_status ct_graph_backward(ct_graph *g, ct_tensor *loss);

/* Called during the next backward passes as soon as a parameter's gradient is final: when the
 * oldest node that reads it has run its backward (in the order of the backward pass, the same
 * in every process running the same graph). A parameter no node reads is not reported, and
 * nothing is reported in a pass whose tape has a node that does not list its inputs (concat).
 * For data-parallel training, which starts reducing gradients while the backward pass goes
 * on, and reduces whatever was not reported after it. fn NULL: none (the default); costs a
 * pass over the tape when set. */
typedef void (*ct_grad_ready_fn)(void *user, ct_tensor *param);
CT_API void ct_graph_set_grad_ready(ct_graph *g, ct_grad_ready_fn fn, void *user);
/* Called in the next backward passes after each node's backward (newest node first), while its
 * inputs' gradients hold what it added and its output's gradient is still there: for examining
 * a pass (the trainer's incidents). fn NULL: none (the default); costs a branch per node. */
typedef void (*ct_node_hook_fn)(void *user, const ct_node *node);
CT_API void ct_graph_set_node_hook(ct_graph *g, ct_node_hook_fn fn, void *user);
/*
 * Per-layer timing (the trainer's profile, CT_PROFILE_MODE_LAYERS): with tables fwd and bwd of
 * n seconds each (borrowed; NULL: off, the default), the forward pass of layer i between
 * ct_graph_begin_layer and ct_graph_end_layer adds its time to fwd[i], and the backward pass
 * adds each node's time to bwd[i] of the layer that recorded it. It costs one clock reading per
 * node in the backward pass and two per layer forward. Nothing is timed with gradients off.
 */
CT_API void ct_graph_set_layer_times(ct_graph *g, double *fwd, double *bwd, int64_t n);
/* Whether layers are timed now (tables set, gradients on). */
CT_API bool ct_graph_layer_timing(const ct_graph *g);
/* The forward pass of layer i begins; ct_graph_end_layer with what this returns ends it
 * (layers nest: the outer one is current again after). The nodes recorded in between carry i in
 * ct_node.layer whether or not layers are timed (only i < n is timed). */
typedef struct ct_graph_layer_mark {
    int32_t prev;
    double start;
} ct_graph_layer_mark;
CT_API ct_graph_layer_mark ct_graph_begin_layer(ct_graph *g, int32_t i);
CT_API void ct_graph_end_layer(ct_graph *g, ct_graph_layer_mark mark);
/* The tape's newest node (follow ct_node.prev for the older ones), or NULL when none has been
 * recorded since the last reset; valid until ct_graph_reset. */
CT_API const ct_node *ct_graph_newest(const ct_graph *g);
/* Backpropagates from any f32 tensor t that requires grad, with its gradient seeded from
 * seed[0..numel(t)) (added to what t already has). For vector-Jacobian products and tests. */
CT_API ct_status ct_graph_backward_seed(ct_graph *g, ct_tensor *t, const float *seed);

/* ---- for op authors (built-in ops and plugins) ---- */

/*
 * Temporary scratch inside an op: take a mark, allocate with ct_graph_alloc (or make step
 * tensors), and release the mark when done. Between a mark and its release every allocation
 * comes from a second arena of the graph's, rewound by the release, so a deep network holds the
 * largest scratch once, not the sum, and scratch never sits between the step's tensors. Nothing
 * allocated after the mark may outlive the release (allocate outputs and gradient buffers
 * before marking); marks nest, and every mark must be released (a failed graph is reset
 * anyway).
 */
typedef struct ct_graph_mark {
    void *chunk;
    size_t used;
    size_t in_use;
} ct_graph_mark;
CT_API ct_graph_mark ct_graph_scratch_mark(ct_graph *g);
CT_API void ct_graph_scratch_release(ct_graph *g, ct_graph_mark mark);

/*
 * No-grad layer scopes: how a container of layers run one after the other (a sequential stack,
 * the children of a residual block) lets the graph free each child's activations once the
 * next child has read them, instead of keeping every activation until ct_graph_reset. With
 * gradients off, each child's allocations go to one of a few evaluation arenas, the one the
 * scope picks and resets before the child runs: one that holds nothing that may still be read
 * (the child's input, the scope's input, what enclosing layers made, earlier scopes' results).
 * A deep stack then holds about two layers' activations at a time. The scope's result lives
 * until the enclosing scope moves to its next child, or until ct_graph_reset for an outermost
 * scope. With gradients on (every activation is needed by backward) the calls do nothing.
 *
 *     ct_graph_scope s = ct_graph_scope_begin(g, x);
 *     for (i = 0; i < n && x; i++) { ct_graph_scope_next(g, &s, x); x = child_i(g, x); }
 *     ct_graph_scope_end(g, s, x);
 *
 * The contract for a child: it reads its input and what it makes, nothing an earlier child made
 * except through its input. Scopes nest (end them in reverse order).
 */
typedef struct ct_graph_scope {
    bool active;        /* gradients were off at begin */
    int32_t target;     /* the enclosing allocation target, restored at end */
    int32_t pin_base;   /* the pin stack at begin */
    int32_t child_base; /* the pin stack after the scope's own pins */
} ct_graph_scope;
CT_API ct_graph_scope ct_graph_scope_begin(ct_graph *g, const ct_tensor *x);
/* Before each child, with the child's input x (which may be the scope's input). */
CT_API void ct_graph_scope_next(ct_graph *g, ct_graph_scope *s, const ct_tensor *x);
/* After the last child, with the scope's result y (NULL on failure). */
CT_API void ct_graph_scope_end(ct_graph *g, ct_graph_scope s, const ct_tensor *y);
/* For an op writing its result over its input: true when x is the input ct_graph_scope_next
 * was given, made by an earlier child of the scope and read by no one else, and nothing has
 * been allocated since (the child's first op reads it). Always false with gradients on. */
CT_API bool ct_graph_donated(const ct_graph *g, const ct_tensor *x);

/* True when an op with these inputs must record a node: grad mode is on and one requires grad. */
CT_API bool ct_graph_needs_grad(const ct_graph *g, int32_t n_in, ct_tensor *const *in);
/* True when t is the output of the newest node on the tape: no op that records a node has
 * read it since it was made (for ops that write over their input). */
CT_API bool ct_graph_is_newest(const ct_graph *g, const ct_tensor *t);
/* Appends a node producing `out` from the inputs and marks `out` as requiring grad. Returns
 * NULL (sticky failure) on OOM. Call only when ct_graph_needs_grad said yes. */
CT_API ct_node *ct_graph_record(
    ct_graph *g, const ct_op_def *op, ct_tensor *out, int32_t n_in, ct_tensor *const *in);
/* The f32 gradient buffer of t, zero-filled on first use; NULL when t does not require grad. */
CT_API float *ct_graph_grad(ct_graph *g, ct_tensor *t);
/* Records a sticky failure on the graph (and its context's message); returns code. */
CT_API ct_status ct_graph_fail_at(
    ct_graph *g, ct_status code, const char *file, int line, const char *fmt, ...) CT_PRINTF(5, 6);
#define CT_GRAPH_FAIL(g, code, ...) ct_graph_fail_at((g), (code), __FILE__, __LINE__, __VA_ARGS__)

#ifdef __cplusplus
}
#endif

#endif /* CTRAIN_AUTOGRAD_H */
