/*
 * examine.c - an incident's examination: the step's layer outputs and where its first inf or
 * NaN appeared, read off the graph's tape of the window's last micro-batch.
 *
 * It runs only when an incident is reported, before the policy acts and before the next
 * micro-batch resets the graph: the tape then still holds every node's output as the forward
 * pass computed it (the weights an update may since have written are not read), each node
 * tagged with the model layer that recorded it (ct_graph_begin_layer, the layer profile's
 * mechanism), so nothing is computed again and a step that goes well pays nothing. The
 * intermediate gradients are gone by then (the backward pass recycles them), so the backward
 * pass is judged by the parameters' gradients, in the order it finishes them.
 */
#include "train/train_internal.h"

/* Whether t is an f32 tensor whose values hold an inf or a NaN. */
static bool holds_nonfinite(ct_ctx *ctx, const ct_tensor *t, const float *x) {
    bool ok = true;
    if (!x || t->dtype != CT_F32) return false;
    return ct_nonfinite_check(ctx, x, ct_tensor_numel(t), &ok) == CT_OK && !ok;
}

void ct_train_examine(ct_trainer *t, ct_incident *in, const ct_tensor **acts, int64_t n) {
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
    /* the backward pass runs the tape newest first: the first reader met of a parameter whose
       gradient is bad is where the pass had made it so */
    for (const ct_node *node = ct_graph_newest(t->g); node; node = node->prev)
        for (int32_t k = 0; k < node->n_in; k++) {
            const ct_tensor *p = node->in[k];
            if (!p || !(p->flags & CT_TENSOR_PARAM) || !holds_nonfinite(t->ctx, p, p->grad))
                continue;
            in->nonfinite_pass = "backward";
            in->nonfinite_layer = node->layer;
            in->nonfinite_op = node->op->name;
            in->nonfinite_param = p->name ? p->name : "";
            return;
        }
}
