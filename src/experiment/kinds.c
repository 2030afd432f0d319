/*
 * kinds.c - the names a configuration gives the kinds of loss (loss.type) and of task (task),
 * one table each, indexed by the kind; the schema's lists of valid values (schema.c) hold the
 * same names in the same order, as test_experiment_kinds checks. The optimizers' names are
 * their module's (ct_optim_kind_name, src/optim).
 *
 * Ownership: the names are static strings.
 */
#include <assert.h>
#include <string.h>

#include "experiment_internal.h"

static const char *const loss_names[] = {
    [CT_EXP_LOSS_AUTO] = "auto",
    [CT_EXP_LOSS_CE] = "cross_entropy",
    [CT_EXP_LOSS_MSE] = "mse",
    [CT_EXP_LOSS_L1] = "l1",
    [CT_EXP_LOSS_SMOOTH_L1] = "smooth_l1",
    [CT_EXP_LOSS_HUBER] = "huber",
};
static_assert(sizeof loss_names / sizeof loss_names[0] == CT_EXP_LOSS_COUNT,
              "a name for each ct_exp_loss_kind");

/* `task: auto` is no kind: the data decide it. */
static const char *const task_names[] = {
    [CT_TASK_CLASSIFICATION] = "classification",
    [CT_TASK_REGRESSION] = "regression",
    [CT_TASK_LANGUAGE_MODEL] = "language_model",
};
static_assert(sizeof task_names / sizeof task_names[0] == CT_TASK_KIND_COUNT,
              "a name for each ct_task_kind");

/* The index of name in names[0..n), -1 for none. */
static int index_of(const char *const *names, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (strcmp(name, names[i]) == 0) return i;
    return -1;
}

const char *ct_exp_loss_name(ct_exp_loss_kind kind) {
    return (unsigned)kind < CT_EXP_LOSS_COUNT ? loss_names[kind] : NULL;
}

bool ct_exp_loss_from_name(const char *name, ct_exp_loss_kind *out) {
    int i = index_of(loss_names, CT_EXP_LOSS_COUNT, name);
    if (i >= 0) *out = (ct_exp_loss_kind)i;
    return i >= 0;
}

const char *ct_exp_task_name(ct_task_kind kind) {
    return (unsigned)kind < CT_TASK_KIND_COUNT ? task_names[kind] : NULL;
}

bool ct_exp_task_from_name(const char *name, ct_task_kind *out) {
    int i = index_of(task_names, CT_TASK_KIND_COUNT, name);
    if (i >= 0) *out = (ct_task_kind)i;
    return i >= 0;
}
