/*
 * task.c - one batch through the task: its hooks where it sets them (prep_batch, loss,
 * loss_parts, train_step, eval_step), else the defaults of its kind, and the reshape of the
 * model's output and targets that losses and metrics take.
 *
 * Every tensor made here is a step tensor of the trainer's graph.
 */
#include <string.h>

#include "ctrain/loss.h"
#include "ctrain/ops.h"
#include "train/train_internal.h"

static ct_status default_prep(void *user,
                              ct_graph *g,
                              const ct_batch *b,
                              const char *split,
                              ct_tensor **input,
                              ct_tensor **target) {
    (void)user, (void)split;
    *input = ct_graph_wrap(g, b->x.data, b->x.dtype, b->x.ndim, b->x.shape);
    *target = ct_graph_wrap(g, b->y.data, b->y.dtype, b->y.ndim, b->y.shape);
    return ct_graph_status(g);
}

ct_status ct_task_flatten(ct_graph *g, ct_task_kind kind, ct_tensor **output, ct_tensor **target) {
    ct_tensor *o = *output, *y = *target;
    if (!o || !y) return ct_graph_status(g);
    if (kind == CT_TASK_LANGUAGE_MODEL && o->ndim >= 2) {
        int64_t v = o->shape[o->ndim - 1], rows = ct_tensor_numel(o) / (v ? v : 1);
        *output = ct_op_reshape(g, o, 2, (int64_t[]){rows, v});
        *target = ct_graph_wrap(g, y->data, y->dtype, 1, (int64_t[]){ct_tensor_numel(y)});
    } else if (kind == CT_TASK_REGRESSION && ct_tensor_numel(o) == ct_tensor_numel(y) &&
               !ct_tensor_same_shape(o, y)) {
        *output = ct_op_reshape(g, o, y->ndim, y->shape);
    } else {
        return CT_OK;
    }
    return *output && *target ? CT_OK : ct_graph_status(g);
}

static ct_tensor *default_loss(ct_trainer *t, ct_graph *g, ct_tensor *out, ct_tensor *y) {
    if (t->task.kind == CT_TASK_REGRESSION) return ct_loss_mse(g, out, y, CT_REDUCTION_MEAN);
    ct_cross_entropy_params ce = ct_cross_entropy_default_params();
    return ct_loss_cross_entropy(g, out, y, &ce);
}

/* Forward and loss of one batch; *items is the number of loss terms (samples or tokens). */
ct_tensor *ct_train_forward_loss(ct_trainer *t,
                                 const ct_batch *b,
                                 const char *split,
                                 ct_tensor **out,
                                 ct_tensor **target,
                                 int64_t *items) {
    ct_graph *g = t->g;
    memset(t->parts, 0, sizeof t->parts); /* no part from an earlier batch is reported again */
    bool training = strcmp(split, "train") == 0;
    ct_tensor *(*step)(void *, ct_graph *, ct_model *, const ct_batch *, ct_tensor **,
                       ct_tensor **) = training ? t->task.train_step : t->task.eval_step;
    if (step) { /* the task computes the whole forward pass itself */
        ct_tensor *o = NULL, *y = NULL;
        ct_tensor *loss = step(t->task.user, g, t->model, b, &o, &y);
        if (!loss) return NULL;
        if (!o || !y || loss->dtype != CT_F32 || ct_tensor_numel(loss) != 1) {
            CT_GRAPH_FAIL(g, CT_ERR_SHAPE,
                          "%s: the task's %s must return one f32 loss and set the output and "
                          "target",
                          split, training ? "train_step" : "eval_step");
            return NULL;
        }
        if (ct_task_flatten(g, t->task.kind, &o, &y) != CT_OK) return NULL;
        *out = o;
        *target = y;
        *items = t->task.kind == CT_TASK_REGRESSION ? b->size : ct_tensor_numel(y);
        return loss;
    }
    ct_tensor *x = NULL, *y = NULL;
    ct_status s = t->task.prep_batch ? t->task.prep_batch(t->task.user, g, b, split, &x, &y)
                                     : default_prep(NULL, g, b, split, &x, &y);
    if (s != CT_OK || !x || !y) {
        if (ct_graph_status(g) == CT_OK)
            CT_GRAPH_FAIL(g, s != CT_OK ? s : CT_ERR_INVALID_ARG,
                          "%s: prep_batch gave no input or target", split);
        return NULL;
    }
    ct_tensor *o = ct_model_forward(t->model, g, x);
    if (!o) return NULL;
    ct_tensor *loss;
    if (t->task.loss_parts) {
        loss = t->task.loss_parts(t->task.user, g, o, y, t->parts);
        if (ct_task_flatten(g, t->task.kind, &o, &y) != CT_OK) return NULL;
        for (int64_t k = 0; loss && k < t->n_parts; k++)
            if (t->parts[k] &&
                (t->parts[k]->dtype != CT_F32 || ct_tensor_numel(t->parts[k]) != 1)) {
                CT_GRAPH_FAIL(g, CT_ERR_SHAPE, "%s: loss part '%s' must be one f32 value", split,
                              t->part_name[k]);
                return NULL;
            }
    } else if (t->task.loss) {
        loss = t->task.loss(t->task.user, g, o, y);
        if (ct_task_flatten(g, t->task.kind, &o, &y) != CT_OK) return NULL;
    } else {
        if (ct_task_flatten(g, t->task.kind, &o, &y) != CT_OK) return NULL;
        loss = default_loss(t, g, o, y);
    }
    if (!loss) return NULL;
    if (loss->dtype != CT_F32 || ct_tensor_numel(loss) != 1) {
        CT_GRAPH_FAIL(g, CT_ERR_SHAPE, "%s: the task's loss must be one f32 value", split);
        return NULL;
    }
    *out = o;
    *target = y;
    *items = t->task.kind == CT_TASK_REGRESSION ? b->size : ct_tensor_numel(y);
    return loss;
}

/* The status of a failed forward or loss: the graph's, else the context's, else an internal
 * error (a task hook returned NULL without saying why). Never CT_OK. */
ct_status ct_train_failure(ct_trainer *t, const char *where) {
    ct_status s = ct_graph_status(t->g);
    if (s == CT_OK) s = ct_last_status(t->ctx);
    if (s == CT_OK || s == CT_STOP)
        return CT_FAIL(t->ctx, CT_ERR_INTERNAL, "%s: a task hook returned NULL without an error",
                       where);
    ct_err_wrap(t->ctx, "%s", where);
    return s;
}
