/*
 * graph.c - the step graph: arena, tape, modes and reverse-mode differentiation.
 *
 * The tape is a singly linked list through ct_node.prev, newest first, so recording is O(1) and
 * needs no growable array. Reverse recording order is a valid topological order for backward
 * because an op can only consume tensors that exist when it runs.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "autograd/autograd_internal.h"
#include "core/core_internal.h"
#include "ctrain/autograd.h"

/* Leaves outside the arena whose gradient buffer lives in it: their grad is cleared at reset. */
typedef struct outside_leaf {
    ct_tensor *t;
    struct outside_leaf *next;
} outside_leaf;

/* A gradient buffer whose tensor's node has run its backward pass: no later node reads or
 * writes it, so ct_graph_grad hands it to another tensor (PyTorch frees such gradients too).
 * The entry lives in the buffer itself. */
typedef struct spare_grad {
    size_t bytes;
    struct spare_grad *next;
} spare_grad;

/* No-grad layer scopes: the arenas their children's activations take turns in, and how many
 * pins (live tensors, an enclosing allocation target) the pin stack holds on each. */
#define EVAL_ARENAS 8
#define EVAL_PINS   64

struct ct_graph {
    ct_ctx *ctx;
    spare_grad *spare; /* recycled gradient buffers of this backward pass */
    ct_arena arena;
    /* what ops allocate between a scratch mark and its release: kept apart, so that scratch
     * never leaves touched holes between the step's tensors (the arena would hold them to the
     * end of the step) and the step's peak holds the largest scratch once */
    ct_arena scratch;
    int64_t scratch_depth; /* marks not yet released */
    ct_node *tape;         /* newest node */
    outside_leaf *outside;
    bool grad_enabled;
    bool training;
    ct_dtype autocast; /* CT_F32 (off) or CT_BF16 */
    ct_rng rng;
    ct_status status;
    ct_grad_ready_fn grad_ready;
    void *grad_ready_user;
    ct_node_hook_fn node_hook;
    void *node_hook_user;
    /* per-layer timing: the tables (NULL: off) and the layer recording now (-1: none) */
    double *layer_fwd, *layer_bwd;
    int64_t n_layer_times;
    int32_t layer;
    void *casts; /* the ops' bf16 copies of weights (src/ops/bf16_cast.c), in the arena */
    /* no-grad scopes: where allocations go (-1: the arena), and the pins keeping arenas from
     * being reset while something in them may still be read */
    ct_arena eval[EVAL_ARENAS];
    int32_t target;
    int32_t pins[EVAL_ARENAS];
    int32_t pin_stack[EVAL_PINS];
    int32_t n_pins;
    bool pins_full;           /* a pin did not fit: no arena is reset until ct_graph_reset */
    const ct_tensor *donated; /* a child's input that no one else reads (ct_graph_scope_next) */
    size_t high_water;        /* the most bytes in use at once (ct_graph_arena_high_water) */
};

ct_graph_params ct_graph_default_params(void) {
    ct_graph_params p;
    memset(&p, 0, sizeof p);
    return p;
}

ct_status ct_graph_create(ct_ctx *ctx, const ct_graph_params *params, ct_graph **out) {
    ct_graph_params p = params ? *params : ct_graph_default_params();
    *out = NULL;
    ct_graph *g = ct_alloc(ctx, sizeof *g);
    if (!g) return CT_FAIL(ctx, CT_ERR_OOM, "allocating a graph");
    memset(g, 0, sizeof *g);
    g->ctx = ctx;
    ct_arena_init(&g->arena, ctx, p.arena_chunk);
    ct_arena_init(&g->scratch, ctx, p.arena_chunk);
    for (int i = 0; i < EVAL_ARENAS; i++)
        ct_arena_init(&g->eval[i], ctx, p.arena_chunk);
    g->target = -1;
    g->grad_enabled = true;
    g->training = true;
    g->autocast = CT_F32;
    g->layer = -1;
    g->rng = ct_rng_init(p.seed, 0x64726F70ull /* "drop" */);
    *out = g;
    return CT_OK;
}

void ct_graph_destroy(ct_graph *g) {
    if (!g) return;
    ct_ctx *ctx = g->ctx;
    for (outside_leaf *l = g->outside; l; l = l->next) {
        l->t->grad = NULL;
        l->t->flags &= ~(uint32_t)CT_TENSOR_GRAD_ARENA;
    }
    ct_arena_fini(&g->arena);
    ct_arena_fini(&g->scratch);
    for (int i = 0; i < EVAL_ARENAS; i++)
        ct_arena_fini(&g->eval[i]);
    ct_free(ctx, g, sizeof *g);
}

ct_ctx *ct_graph_ctx(const ct_graph *g) {
    return g->ctx;
}

void ct_graph_reset(ct_graph *g) {
    /* O(1) unless the caller flagged tensors of its own for gradients */
    for (outside_leaf *l = g->outside; l; l = l->next) {
        l->t->grad = NULL;
        l->t->flags &= ~(uint32_t)CT_TENSOR_GRAD_ARENA;
    }
    g->outside = NULL;
    ct_arena_reset(&g->arena);
    ct_arena_reset(&g->scratch);
    for (int i = 0; i < EVAL_ARENAS; i++) {
        ct_arena_reset(&g->eval[i]);
        g->pins[i] = 0;
    }
    g->target = -1;
    g->n_pins = 0;
    g->pins_full = false;
    g->donated = NULL;
    g->scratch_depth = 0;
    g->spare = NULL;
    g->tape = NULL;
    g->casts = NULL;
    g->status = CT_OK;
}

void ct_graph_set_grad_enabled(ct_graph *g, bool enabled) {
    g->grad_enabled = enabled;
}

bool ct_graph_grad_enabled(const ct_graph *g) {
    return g->grad_enabled;
}

void ct_graph_set_training(ct_graph *g, bool training) {
    g->training = training;
}

bool ct_graph_training(const ct_graph *g) {
    return g->training;
}

ct_status ct_graph_set_autocast(ct_graph *g, ct_dtype dtype) {
    if (dtype != CT_F32 && dtype != CT_BF16)
        return CT_GRAPH_FAIL(g, CT_ERR_INVALID_ARG,
                             "graph: autocast dtype must be f32 (off) or bf16, got %s",
                             ct_dtype_name(dtype));
    g->autocast = dtype;
    return CT_OK;
}

ct_dtype ct_graph_autocast(const ct_graph *g) {
    return g->autocast;
}

ct_rng *ct_graph_rng(ct_graph *g) {
    return &g->rng;
}

ct_status ct_graph_status(const ct_graph *g) {
    return g->status;
}

size_t ct_graph_arena_capacity(const ct_graph *g) {
    size_t c = g->arena.capacity + g->scratch.capacity;
    for (int i = 0; i < EVAL_ARENAS; i++)
        c += g->eval[i].capacity;
    return c;
}

int64_t ct_graph_arena_allocations(const ct_graph *g) {
    int64_t n = g->arena.n_allocations + g->scratch.n_allocations;
    for (int i = 0; i < EVAL_ARENAS; i++)
        n += g->eval[i].n_allocations;
    return n;
}

static size_t in_use(const ct_graph *g) {
    size_t u = g->arena.in_use + g->scratch.in_use;
    for (int i = 0; i < EVAL_ARENAS; i++)
        u += g->eval[i].in_use;
    return u;
}

size_t ct_graph_arena_in_use(const ct_graph *g) {
    return in_use(g);
}

size_t ct_graph_arena_high_water(const ct_graph *g) {
    return g->high_water;
}

void ct_graph_reset_high_water(ct_graph *g) {
    g->high_water = in_use(g);
}

void ct_graph_trim(ct_graph *g) {
    ct_graph_reset(g);
    ct_arena_trim(&g->arena);
    ct_arena_trim(&g->scratch);
    for (int i = 0; i < EVAL_ARENAS; i++)
        ct_arena_trim(&g->eval[i]);
}

ct_status
ct_graph_fail_at(ct_graph *g, ct_status code, const char *file, int line, const char *fmt, ...) {
    if (g->status != CT_OK) return g->status; /* keep the first failure's message */
    char msg[CT_ERRMSG_SIZE];
    va_list ap;
    va_start(ap, fmt);
    (void)vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    g->status = code;
    return ct_fail_at(g->ctx, code, file, line, "%s", msg);
}

void *ct_graph_alloc(ct_graph *g, size_t size) {
    ct_arena *a = g->scratch_depth > 0 ? &g->scratch
                  : g->target >= 0     ? &g->eval[g->target]
                                       : &g->arena;
    g->donated = NULL; /* an op made something: the donation was for the op before it */
    void *p = ct_arena_alloc(a, size);
    if (!p) CT_GRAPH_FAIL(g, CT_ERR_OOM, "graph arena: out of memory allocating %zu bytes", size);
    size_t u = in_use(g);
    if (u > g->high_water) g->high_water = u;
    return p;
}

void *ct_graph_alloc_kept(ct_graph *g, size_t size) {
    void *p = ct_arena_alloc(&g->arena, size);
    if (!p) CT_GRAPH_FAIL(g, CT_ERR_OOM, "graph arena: out of memory allocating %zu bytes", size);
    return p;
}

void **ct_graph_casts(ct_graph *g) {
    return &g->casts;
}

ct_graph_mark ct_graph_scratch_mark(ct_graph *g) {
    ct_graph_mark m;
    ct_arena_mark(&g->scratch, &m.chunk, &m.used, &m.in_use);
    g->scratch_depth++;
    return m;
}

void ct_graph_scratch_release(ct_graph *g, ct_graph_mark mark) {
    ct_arena_rewind(&g->scratch, mark.chunk, mark.used, mark.in_use);
    if (g->scratch_depth > 0) g->scratch_depth--;
}

/* ---- no-grad layer scopes ---- */

/* The evaluation arena holding p, or -1 (the arena, the scratch arena or outside the graph:
 * none of those is reset by a scope). */
static int32_t eval_arena_of(const ct_graph *g, const void *p) {
    if (!p) return -1;
    for (int32_t i = 0; i < EVAL_ARENAS; i++)
        if (g->eval[i].head && ct_arena_holds(&g->eval[i], p)) return i;
    return -1;
}

static void pin(ct_graph *g, int32_t i) {
    if (i < 0) return;
    if (g->n_pins == EVAL_PINS) {
        g->pins_full = true; /* from now on nothing is reset: safe, only less frugal */
        return;
    }
    g->pin_stack[g->n_pins++] = i;
    g->pins[i]++;
}

/* A tensor's struct and its data, which may lie in different arenas (a view). */
static void pin_tensor(ct_graph *g, const ct_tensor *t) {
    if (!t) return;
    pin(g, eval_arena_of(g, t));
    pin(g, eval_arena_of(g, t->data));
}

static void unpin_to(ct_graph *g, int32_t n) {
    while (g->n_pins > n)
        g->pins[g->pin_stack[--g->n_pins]]--;
}

ct_graph_scope ct_graph_scope_begin(ct_graph *g, const ct_tensor *x) {
    ct_graph_scope s = {false, -1, 0, 0};
    if (g->grad_enabled || g->status != CT_OK) return s;
    s.active = true;
    s.target = g->target;
    s.pin_base = g->n_pins;
    pin(g, g->target); /* what the enclosing layer made before calling us may be read after */
    pin_tensor(g, x);
    s.child_base = g->n_pins;
    return s;
}

void ct_graph_scope_next(ct_graph *g, ct_graph_scope *s, const ct_tensor *x) {
    g->donated = NULL;
    if (!s->active || g->status != CT_OK) return;
    /* the previous child's input and what it pinned are dead: only x is read from now on */
    unpin_to(g, s->child_base);
    if (g->pins_full) return; /* keep allocating where we are; nothing is reset */
    int32_t xs = eval_arena_of(g, x), xd = x ? eval_arena_of(g, x->data) : -1;
    /* x was made by an earlier child of this scope (its arenas hold no pin of anyone's): the
     * child may write its result over it */
    if (x && xd >= 0 && g->pins[xd] == 0 && (xs < 0 || g->pins[xs] == 0)) g->donated = x;
    pin_tensor(g, x);
    int32_t free_arena = -1;
    for (int32_t i = 0; i < EVAL_ARENAS && free_arena < 0; i++)
        if (g->pins[i] == 0) free_arena = i;
    if (free_arena < 0) {
        g->target = s->target; /* pinned, so never reset under us: only less frugal */
        return;
    }
    ct_arena_reset(&g->eval[free_arena]);
    g->target = free_arena;
}

void ct_graph_scope_end(ct_graph *g, ct_graph_scope s, const ct_tensor *y) {
    g->donated = NULL;
    if (!s.active) return;
    unpin_to(g, s.pin_base);
    g->target = s.target;
    /* y lives until the enclosing scope moves to its next child, or until ct_graph_reset */
    pin_tensor(g, y);
}

bool ct_graph_donated(const ct_graph *g, const ct_tensor *x) {
    return x && g->donated == x && !g->grad_enabled;
}

static ct_tensor *
new_tensor(ct_graph *g, ct_dtype dtype, int32_t ndim, const int64_t *shape, bool zero, void *data) {
    if (g->status != CT_OK) return NULL;
    int64_t numel;
    if (ct_shape_check(g->ctx, dtype, ndim, shape, &numel) != CT_OK) {
        g->status = ct_last_status(g->ctx);
        return NULL;
    }
    ct_tensor *t = ct_graph_alloc(g, sizeof *t);
    if (!t) return NULL;
    *t = ct_tensor_view(data, dtype, ndim, shape);
    t->flags = CT_TENSOR_STEP;
    if (!data) {
        size_t bytes = (size_t)numel * ct_dtype_size(dtype);
        t->data = ct_graph_alloc(g, bytes);
        if (!t->data) return NULL;
        if (zero) memset(t->data, 0, bytes);
    }
    return t;
}

ct_tensor *ct_graph_new(ct_graph *g, ct_dtype dtype, int32_t ndim, const int64_t *shape) {
    return new_tensor(g, dtype, ndim, shape, false, NULL);
}

ct_tensor *ct_graph_zeros(ct_graph *g, ct_dtype dtype, int32_t ndim, const int64_t *shape) {
    return new_tensor(g, dtype, ndim, shape, true, NULL);
}

ct_tensor *
ct_graph_wrap(ct_graph *g, void *data, ct_dtype dtype, int32_t ndim, const int64_t *shape) {
    if (!data) {
        CT_GRAPH_FAIL(g, CT_ERR_INVALID_ARG, "ct_graph_wrap: data is NULL");
        return NULL;
    }
    return new_tensor(g, dtype, ndim, shape, false, data);
}

const ct_node *ct_graph_newest(const ct_graph *g) {
    return g->tape;
}

bool ct_graph_is_newest(const ct_graph *g, const ct_tensor *t) {
    return t && t->node && t->node == g->tape;
}

bool ct_graph_needs_grad(const ct_graph *g, int32_t n_in, ct_tensor *const *in) {
    if (!g->grad_enabled) return false;
    for (int32_t i = 0; i < n_in; i++)
        if (in[i] && (in[i]->flags & CT_TENSOR_REQUIRES_GRAD)) return true;
    return false;
}

ct_node *ct_graph_record(
    ct_graph *g, const ct_op_def *op, ct_tensor *out, int32_t n_in, ct_tensor *const *in) {
    if (n_in < 0 || n_in > CT_NODE_MAX_IN || !op || !out) {
        CT_GRAPH_FAIL(g, CT_ERR_INVALID_ARG,
                      "record: %d inputs (at most %d), op and out must be given", (int)n_in,
                      CT_NODE_MAX_IN);
        return NULL;
    }
    ct_node *n = ct_graph_alloc(g, sizeof *n);
    if (!n) return NULL;
    memset(n, 0, sizeof *n);
    n->op = op;
    n->out = out;
    n->n_in = n_in;
    for (int32_t i = 0; i < n_in; i++)
        n->in[i] = in[i];
    n->prev = g->tape;
    n->layer = g->layer;
    g->tape = n;
    out->node = n;
    out->flags |= CT_TENSOR_REQUIRES_GRAD;
    return n;
}

/* The smallest spare buffer that holds `bytes`, taken off the list; NULL when none does. */
static float *take_spare(ct_graph *g, size_t bytes) {
    if (bytes == 0) return NULL;
    spare_grad **best = NULL;
    for (spare_grad **s = &g->spare; *s; s = &(*s)->next) {
        if ((*s)->bytes >= bytes && (!best || (*s)->bytes < (*best)->bytes)) best = s;
        if ((*s)->bytes == bytes) break; /* no better fit */
    }
    if (!best) return NULL;
    spare_grad *found = *best;
    *best = found->next;
    return (float *)(void *)found;
}

/* After node's backward pass: its output's gradient is dead (every reader of the output is a
 * newer node and has run), so it becomes spare. Only buffers the graph handed out are: a
 * caller may have set the grad of an intermediate to a buffer of its own to read dL/dh. Tiny
 * buffers are not worth listing. */
static void spare_output_grad(ct_graph *g, ct_node *node) {
    ct_tensor *out = node->out;
    size_t bytes = (size_t)ct_tensor_numel(out) * sizeof(float);
    if (!out->grad || !(out->flags & CT_TENSOR_GRAD_ARENA) || bytes < sizeof(spare_grad)) return;
    out->flags &= ~(uint32_t)CT_TENSOR_GRAD_ARENA;
    spare_grad *s = (spare_grad *)(void *)out->grad;
    s->bytes = bytes;
    s->next = g->spare;
    g->spare = s;
    out->grad = NULL;
}

/* t's gradient buffer, made (zeroed when `zero`; *made set) on first use. */
static float *grad_buffer(ct_graph *g, ct_tensor *t, bool zero, bool *made) {
    *made = false;
    if (!t || !(t->flags & CT_TENSOR_REQUIRES_GRAD)) return NULL;
    if (!t->grad) {
        if (!(t->flags & (CT_TENSOR_STEP | CT_TENSOR_PARAM))) {
            outside_leaf *l = ct_graph_alloc(g, sizeof *l);
            if (!l) return NULL;
            l->t = t;
            l->next = g->outside;
            g->outside = l;
        }
        size_t bytes = (size_t)ct_tensor_numel(t) * sizeof(float);
        t->grad = take_spare(g, bytes);
        if (!t->grad) t->grad = ct_graph_alloc(g, bytes);
        if (t->grad) {
            if (zero) memset(t->grad, 0, bytes);
            t->flags |= CT_TENSOR_GRAD_ARENA;
            *made = true;
        }
    }
    return t->grad;
}

float *ct_graph_grad(ct_graph *g, ct_tensor *t) {
    bool made;
    return grad_buffer(g, t, true, &made);
}

float *ct_graph_grad_fresh(ct_graph *g, ct_tensor *t, bool *fresh) {
    return grad_buffer(g, t, false, fresh);
}

ct_status ct_graph_backward(ct_graph *g, ct_tensor *loss) {
    if (g->status != CT_OK) return g->status;
    if (!loss) return CT_GRAPH_FAIL(g, CT_ERR_INVALID_ARG, "backward: the loss is NULL");
    if (loss->dtype != CT_F32 || ct_tensor_numel(loss) != 1) {
        char buf[200];
        return CT_GRAPH_FAIL(g, CT_ERR_SHAPE,
                             "backward: the loss must be one f32 element, got %s %s",
                             ct_dtype_name(loss->dtype), ct_shape_str(loss, buf, sizeof buf));
    }
    const float one = 1.0f;
    return ct_graph_backward_seed(g, loss, &one);
}

static double clock_seconds(void) {
    struct timespec ts;
    (void)clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void ct_graph_set_layer_times(ct_graph *g, double *fwd, double *bwd, int64_t n) {
    bool on = fwd && bwd && n > 0;
    g->layer_fwd = on ? fwd : NULL;
    g->layer_bwd = on ? bwd : NULL;
    g->n_layer_times = on ? n : 0;
    g->layer = -1;
}

bool ct_graph_layer_timing(const ct_graph *g) {
    return g->layer_fwd && g->grad_enabled;
}

ct_graph_layer_mark ct_graph_begin_layer(ct_graph *g, int32_t i) {
    ct_graph_layer_mark m = {g->layer, 0.0};
    if (i < 0) return m;
    g->layer = i; /* the tag costs a store: an incident's examination reads it (ct_node.layer) */
    if (ct_graph_layer_timing(g) && i < g->n_layer_times) m.start = clock_seconds();
    return m;
}

void ct_graph_end_layer(ct_graph *g, ct_graph_layer_mark mark) {
    if (g->layer_fwd && g->layer >= 0 && g->layer < g->n_layer_times && mark.start > 0.0)
        g->layer_fwd[g->layer] += clock_seconds() - mark.start;
    g->layer = mark.prev;
}

void ct_graph_set_node_hook(ct_graph *g, ct_node_hook_fn fn, void *user) {
    g->node_hook = fn;
    g->node_hook_user = user;
}

void ct_graph_set_grad_ready(ct_graph *g, ct_grad_ready_fn fn, void *user) {
    g->grad_ready = fn;
    g->grad_ready_user = user;
}

/* For the grad-ready hook: which node reads each parameter last in the backward pass (the
 * oldest on the tape). An open-addressing table keyed by the parameter, in the arena. */
typedef struct last_reader {
    const ct_tensor *param;
    const ct_node *node;
} last_reader;

static size_t reader_slot(const ct_tensor *p, size_t mask) {
    uint64_t h = (uint64_t)(uintptr_t)p;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    return (size_t)h & mask;
}

static last_reader *last_readers(ct_graph *g, size_t *mask, bool *hidden) {
    size_t refs = 0;
    *hidden = false;
    for (ct_node *node = g->tape; node; node = node->prev) {
        refs += (size_t)node->n_in;
        /* a node with no listed inputs (concat keeps its many in `saved`) may read any
           parameter: then no gradient is known final before the pass ends */
        if (node->n_in == 0) *hidden = true;
    }
    size_t cap = 16;
    while (cap < 2 * refs)
        cap *= 2;
    last_reader *tab = ct_graph_alloc(g, cap * sizeof *tab);
    if (!tab) return NULL;
    memset(tab, 0, cap * sizeof *tab);
    *mask = cap - 1;
    for (ct_node *node = g->tape; node; node = node->prev)
        for (int32_t i = 0; i < node->n_in; i++) {
            const ct_tensor *p = node->in[i];
            if (!p || !(p->flags & CT_TENSOR_PARAM)) continue;
            size_t k = reader_slot(p, *mask);
            while (tab[k].param && tab[k].param != p)
                k = (k + 1) & *mask;
            tab[k].param = p;
            tab[k].node = node; /* newest to oldest: the oldest reader is written last */
        }
    return tab;
}

static void report_ready(ct_graph *g, const ct_node *node, last_reader *tab, size_t mask) {
    for (int32_t i = 0; i < node->n_in; i++) {
        ct_tensor *p = node->in[i];
        if (!p || !(p->flags & CT_TENSOR_PARAM)) continue;
        size_t k = reader_slot(p, mask);
        while (tab[k].param != p)
            k = (k + 1) & mask;
        /* a node reading p twice reports it once: the entry is cleared */
        if (tab[k].node == node) {
            tab[k].node = NULL;
            g->grad_ready(g->grad_ready_user, p);
        }
    }
}

ct_status ct_graph_backward_seed(ct_graph *g, ct_tensor *t, const float *seed) {
    if (g->status != CT_OK) return g->status;
    if (!t || !seed || t->dtype != CT_F32)
        return CT_GRAPH_FAIL(g, CT_ERR_INVALID_ARG, "backward: needs an f32 tensor and a seed");
    if (!(t->flags & CT_TENSOR_REQUIRES_GRAD))
        return CT_GRAPH_FAIL(g, CT_ERR_INVALID_ARG,
                             "backward: the tensor does not depend on anything that requires "
                             "grad (was it computed with gradients disabled?)");
    /* intermediate gradients from an earlier backward in this step start again from zero */
    for (ct_node *node = g->tape; node; node = node->prev)
        if (node->out->grad)
            memset(node->out->grad, 0, (size_t)ct_tensor_numel(node->out) * sizeof(float));
    float *grad = ct_graph_grad(g, t);
    if (!grad) return g->status;
    int64_t n = ct_tensor_numel(t);
    for (int64_t i = 0; i < n; i++)
        grad[i] += seed[i];
    size_t mask = 0;
    bool hidden = false;
    last_reader *tab = g->grad_ready ? last_readers(g, &mask, &hidden) : NULL;
    if (g->grad_ready && !tab) return g->status;
    if (hidden) tab = NULL; /* nothing reported early; the caller reduces after the pass */
    double *bwd = g->layer_bwd, last = bwd ? clock_seconds() : 0.0;
    for (ct_node *node = g->tape; node && g->status == CT_OK; node = node->prev) {
        /* nothing flowed into this node: its parameters' gradients are final all the same */
        if (node->out->grad) node->op->backward(g, node);
        if (g->node_hook) g->node_hook(g->node_hook_user, node);
        spare_output_grad(g, node);
        if (tab && g->status == CT_OK) report_ready(g, node, tab, mask);
        if (bwd) { /* one reading per node: the time since the last one is this node's */
            double now = clock_seconds();
            if (node->layer >= 0 && node->layer < g->n_layer_times) bwd[node->layer] += now - last;
            last = now;
        }
    }
    return g->status;
}
