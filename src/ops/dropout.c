/*
 * dropout.c - inverted dropout: y = x * m / (1 - p) with m_i = (u_i >= p), u_i uniform [0, 1).
 *
 * The mask is a pure function of the graph's RNG stream at the start of the op and of the
 * element index: u_i is what ct_rng_uniform would write at index i from the stream's counter
 * (ct_rng_uniform_at), drawn in independent blocks by any number of threads (ct_rng_bits, many
 * Philox blocks at a time, compared as 24-bit integers); afterwards the
 * stream's counter advances by ceil(n/4). So the mask is the same for any thread count, and
 * saving and restoring the stream (ct_graph_rng) replays it. The mask is kept in the arena as
 * one byte per element for backward. In evaluation mode, or with p == 0, the op is the
 * identity and returns x itself (as PyTorch does), drawing nothing. ct_op_dropout_over writes
 * y over x's data (each element is read before it is written, by the same thread), for
 * callers that know x is dead; backward needs only the mask either way. It insists that x is
 * the newest node's output (no recorded op has read it; not a parameter or a leaf) and, when
 * no node is recorded, makes a fresh output instead (nothing says who owns x then).
 */
#include <math.h>

#include "autograd/autograd_internal.h"
#include "ops/ops_internal.h"

/* Elements per parallel work item; a multiple of 4 so that items start on a Philox block. */
#define DROP_CHUNK 1024

CT_HOT static void dropout_backward(ct_graph *g, ct_node *n) {
    bool fresh;
    float *dx = ct_graph_grad_fresh(g, n->in[0], &fresh);
    if (!dx) return;
    const uint8_t *mask = n->saved;
    const float *dy = n->out->grad;
    float scale = n->farg[0];
    int64_t count = n->iarg[0];
    int nt = ct_ops_threads(g, count, 2);
    if (fresh) { /* every element written: 0 + the term, as adding to a zeroed buffer */
        CT_OMP_FOR(nt)
        for (int64_t i = 0; i < count; i++)
            dx[i] = 0.0f + dy[i] * (mask[i] ? scale : 0.0f);
        return;
    }
    CT_OMP_FOR(nt)
    for (int64_t i = 0; i < count; i++)
        dx[i] += dy[i] * (mask[i] ? scale : 0.0f);
}

static const ct_op_def dropout_def = {"dropout", dropout_backward};

CT_HOT static ct_tensor *dropout(ct_graph *g, ct_tensor *x, float p, bool over) {
    if (!ct_ops_begin(g, "dropout", 1, &x) || !ct_ops_f32(g, "dropout", "x", x)) return NULL;
    if (!(p >= 0.0f && p < 1.0f)) {
        CT_GRAPH_FAIL(g, CT_ERR_INVALID_ARG,
                      "dropout: p must be in [0, 1), got %g (p = 1 would drop everything)",
                      (double)p);
        return NULL;
    }
    if (!ct_graph_training(g) || p == 0.0f) return x;
    if (over && !ct_graph_needs_grad(g, 1, &x)) {
        over = false; /* nothing records who made x: a fresh output is the safe choice */
    } else if (over && ((x->flags & CT_TENSOR_PARAM) || !ct_graph_is_newest(g, x))) {
        CT_GRAPH_FAIL(g, CT_ERR_INVALID_ARG,
                      "dropout_over: x must be the output of the op recorded just before (a "
                      "tensor no op has read yet), not a parameter or a leaf");
        return NULL;
    }

    int64_t count = ct_tensor_numel(x);
    ct_tensor *y = over ? ct_graph_wrap(g, x->data, CT_F32, x->ndim, x->shape)
                        : ct_graph_new(g, CT_F32, x->ndim, x->shape);
    uint8_t *mask = ct_graph_alloc(g, (size_t)count);
    if (!y || !mask) return NULL;
    ct_rng *rng = ct_graph_rng(g);
    const ct_rng start = *rng;
    float scale = 1.0f / (1.0f - p);
    /* u_i = (w_i >> 8) 2^-24 for the Philox word w_i, and p 2^24 is exact (a power-of-two
     * scaling), so u_i >= p exactly when the integer w_i >> 8 >= p 2^24, that is when
     * w_i >> 8 >= ceil(p 2^24) (<= 2^24 as p < 1): the same decisions without the floats */
    uint32_t threshold = (uint32_t)ceilf(p * 16777216.0f);
    const float *xv = x->data;
    float *yv = y->data;
    int64_t n_chunks = (count + DROP_CHUNK - 1) / DROP_CHUNK;
    int nt = ct_ops_threads(g, n_chunks, (int64_t)DROP_CHUNK * 40);
    CT_OMP_FOR(nt)
    for (int64_t c = 0; c < n_chunks; c++) {
        int64_t i0 = c * DROP_CHUNK;
        int64_t len = count - i0 < DROP_CHUNK ? count - i0 : DROP_CHUNK;
        /* from block i0/4 on, the words whose floats ct_rng_uniform_at(&start, start.counter,
         * i0 + i) gives */
        uint32_t w[DROP_CHUNK];
        ct_rng_bits(&start, start.counter + (uint64_t)(i0 / 4), w, len);
        for (int64_t i = 0; i < len; i++) {
            uint8_t keep = (uint8_t)((w[i] >> 8) >= threshold);
            mask[i0 + i] = keep;
            /* x * 0 rather than 0, so that inf and NaN propagate as in PyTorch */
            yv[i0 + i] = xv[i0 + i] * (keep ? scale : 0.0f);
        }
    }
    rng->counter = start.counter + (uint64_t)((count + 3) / 4);

    if (ct_graph_needs_grad(g, 1, &x)) {
        ct_node *n = ct_graph_record(g, &dropout_def, y, 1, &x);
        if (!n) return NULL;
        n->saved = mask;
        n->iarg[0] = count;
        n->farg[0] = scale;
    }
    return y;
}

ct_tensor *ct_op_dropout(ct_graph *g, ct_tensor *x, float p) {
    return dropout(g, x, p, false);
}

ct_tensor *ct_op_dropout_over(ct_graph *g, ct_tensor *x, float p) {
    return dropout(g, x, p, true);
}
