/*
 * examine.c - an incident's examination: the step's layer outputs and where its first inf or
 * NaN appeared, from the graph's tape of the window's last micro-batch.
 *
 * It runs only when an incident is reported, before the policy acts and before the next
 * micro-batch resets the graph: the tape then still holds every node's output as the forward
 * pass computed it (where an `_over` op wrote over one, dropout's or gelu_linear_over's
 * derivative, that op's values, non-finite wherever the output was), each node tagged with the
 * model layer that recorded it (ct_graph_begin_layer, the layer profile's mechanism), so the
 * forward pass is read, not computed again, and a step that goes well pays nothing. The backward
 * pass recycles its intermediate gradients: when the forward pass was finite, it is run once more
 * over the same tape with a hook that checks what each node adds (ct_graph_set_node_hook), the
 * parameters' gradients kept aside and put back. That needs the weights the forward pass read;
 * where an update has been made since (one that checks the gradients as it applies them), the pass
 * is judged by the parameters' gradients.
 */
#include <string.h>

#include "train/train_internal.h"

/* Whether t is an f32 tensor whose values x hold an inf or a NaN. */
static bool holds_nonfinite(ct_ctx *ctx, const ct_tensor *t, const float *x) {
    bool ok = true;
    if (!x || t->dtype != CT_F32) return false;
    return ct_nonfinite_check(ctx, x, ct_tensor_numel(t), &ok) == CT_OK && !ok;
}

/* The backward pass's first node to leave an inf or a NaN in an input's gradient. */
typedef struct probe {
    ct_ctx *ctx;
    const ct_node *node;
    const ct_tensor *input;
} probe;

static void probe_node(void *user, const ct_node *node) {
    probe *p = user;
    if (p->node) return;
    for (int32_t k = 0; k < node->n_in; k++) {
        const ct_tensor *x = node->in[k];
        if (x && holds_nonfinite(p->ctx, x, x->grad)) {
            p->node = node;
            p->input = x;
            return;
        }
    }
}

/* The window's last backward pass again with the probe, from zeroed parameter gradients (the
 * window's are kept aside and put back, bit for bit). One process only: with several ranks the
 * gradients are shared buffers, and a bucket's reduction would start from the pass. */
static bool run_backward_again(ct_trainer *t, probe *p) {
    float *grads = ct_params_grads(t->params);
    int64_t n = ct_params_numel(t->params);
    if (!t->root || !grads || n <= 0 || t->shard || ct_comm_world_size(t->comm) > 1 ||
        ct_graph_status(t->g) != CT_OK)
        return false;
    size_t bytes = (size_t)n * sizeof *grads;
    float *kept = ct_alloc(t->ctx, bytes);
    if (!kept) return false;
    memcpy(kept, grads, bytes);
    memset(grads, 0, bytes);
    ct_train_profile *prof = t->prof;
    if (prof && prof->layers) ct_graph_set_layer_times(t->g, NULL, NULL, 0); /* not training */
    ct_graph_set_node_hook(t->g, probe_node, p);
    const float one = 1.0f;
    ct_status s = ct_graph_backward_seed(t->g, t->root, &one);
    ct_graph_set_node_hook(t->g, NULL, NULL);
    if (prof && prof->layers)
        ct_graph_set_layer_times(t->g, prof->layer_fwd, prof->layer_bwd, prof->n_layers);
    memcpy(grads, kept, bytes);
    ct_free(t->ctx, kept, bytes);
    return s == CT_OK;
}

void ct_train_examine(
    ct_trainer *t, ct_incident *in, const ct_tensor **acts, int64_t n, bool intact) {
    in->activations = acts;
    in->n_activations = n;
    in->nonfinite_pass = NULL;
    in->nonfinite_layer = -1;
    in->nonfinite_op = NULL;
    in->nonfinite_param = NULL;
    for (int64_t i = 0; i < n; i++)
        acts[i] = NULL;
    const ct_node *oldest_bad = NULL;
    /* newest to oldest: the first node met of a layer made its output; the last bad output
       met is the first the forward pass made */
    for (const ct_node *node = ct_graph_newest(t->g); node; node = node->prev) {
        const ct_tensor *out = node->out;
        if (node->layer >= 0 && node->layer < n && !acts[node->layer] && out->dtype == CT_F32)
            acts[node->layer] = out;
        if (holds_nonfinite(t->ctx, out, out->data)) oldest_bad = node;
    }
    if (oldest_bad) {
        in->nonfinite_pass = "forward";
        in->nonfinite_layer = oldest_bad->layer;
        in->nonfinite_op = oldest_bad->op->name;
        return;
    }
    if (in->kind != CT_INCIDENT_NONFINITE || in->grads_finite) return;
    probe p = {t->ctx, NULL, NULL};
    if (intact && run_backward_again(t, &p) && p.node) {
        in->nonfinite_pass = "backward";
        in->nonfinite_layer = p.node->layer;
        in->nonfinite_op = p.node->op->name;
        if (p.input->flags & CT_TENSOR_PARAM)
            in->nonfinite_param = p.input->name ? p.input->name : "";
        return;
    }
    /* the backward pass runs the tape newest first: the first reader met of a parameter whose
       gradient is bad is where the pass had made it so */
    for (const ct_node *node = ct_graph_newest(t->g); node; node = node->prev)
        for (int32_t k = 0; k < node->n_in; k++) {
            const ct_tensor *x = node->in[k];
            if (!x || !(x->flags & CT_TENSOR_PARAM) || !holds_nonfinite(t->ctx, x, x->grad))
                continue;
            in->nonfinite_pass = "backward";
            in->nonfinite_layer = node->layer;
            in->nonfinite_op = node->op->name;
            in->nonfinite_param = x->name ? x->name : "";
            return;
        }
}
