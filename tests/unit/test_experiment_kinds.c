/*
 * test_experiment_kinds.c - the names of the optimizer, loss and task kinds, each in one table
 * (ct_optim_kind_name, ct_exp_loss_name, ct_exp_task_name): every kind has a name that finds it
 * again, no name finds a kind it is not, and the schema's lists of valid values for
 * optimizer.type, loss.type and task (what `ctrain config` checks and docs/config.md shows)
 * are exactly those names in the kinds' order.
 */
#include <stdio.h>
#include <string.h>

#include "ctrain/ctrain.h"
#include "ctrain/experiment.h"
#include "experiment/experiment_internal.h"
#include "harness.h"
#include "optim/optim_internal.h"

/* The schema's `choices` of key path ("a|b|c"), or NULL. */
static const char *schema_choices(const char *path) {
    int64_t n;
    const ct_key_def *defs = ct_experiment_schema(&n);
    for (int64_t i = 0; i < n; i++)
        if (strcmp(defs[i].path, path) == 0) return defs[i].choices;
    return NULL;
}

/* first (may be NULL), then names(0..count) joined with '|'. */
static void join(char *buf, size_t size, const char *first, const char *(*name)(int), int count) {
    size_t at = 0;
    buf[0] = '\0';
    if (first) at += (size_t)snprintf(buf, size, "%s", first);
    for (int i = 0; i < count && at < size; i++)
        at += (size_t)snprintf(buf + at, size - at, "%s%s", at ? "|" : "", name(i) ? name(i) : "?");
}

static const char *optim_name(int i) {
    return ct_optim_kind_name((ct_optim_kind)i);
}
static const char *loss_name(int i) {
    return ct_exp_loss_name((ct_exp_loss_kind)i);
}
static const char *task_name(int i) {
    return ct_exp_task_name((ct_task_kind)i);
}

static void experiment_kinds_should_find_each_optimizer_by_its_name(void) {
    for (int i = 0; i < CT_OPTIM_KIND_COUNT; i++) {
        const char *name = ct_optim_kind_name((ct_optim_kind)i);
        CT_CHECK_MSG(name != NULL, "optimizer kind %d has no name", i);
        ct_optim_kind k = CT_OPTIM_KIND_COUNT;
        CT_CHECK_MSG(name && ct_optim_kind_from_name(name, &k) && k == (ct_optim_kind)i,
                     "'%s' finds kind %d, not %d", name ? name : "", (int)k, i);
    }
    ct_optim_kind k = CT_OPTIM_SGD;
    CT_CHECK(ct_optim_kind_from_name("adamw", &k) && k == CT_OPTIM_ADAMW);
    CT_CHECK(ct_optim_kind_from_name("sgd", &k) && k == CT_OPTIM_SGD);
    k = CT_OPTIM_ADAGRAD;
    CT_CHECK(!ct_optim_kind_from_name("adam ", &k));
    CT_CHECK(!ct_optim_kind_from_name("Adam", &k));
    CT_CHECK(!ct_optim_kind_from_name("", &k));
    CT_CHECK_INT(k, CT_OPTIM_ADAGRAD); /* unchanged when nothing is found */
    CT_CHECK(ct_optim_kind_name(CT_OPTIM_KIND_COUNT) == NULL);
    CT_CHECK(ct_optim_kind_name((ct_optim_kind)-1) == NULL);
}

static void experiment_kinds_should_find_each_loss_and_task_by_its_name(void) {
    for (int i = 0; i < CT_EXP_LOSS_COUNT; i++) {
        const char *name = ct_exp_loss_name((ct_exp_loss_kind)i);
        ct_exp_loss_kind k = CT_EXP_LOSS_COUNT;
        CT_CHECK_MSG(name && ct_exp_loss_from_name(name, &k) && k == (ct_exp_loss_kind)i,
                     "loss kind %d: '%s' finds %d", i, name ? name : "(none)", (int)k);
    }
    for (int i = 0; i < CT_TASK_KIND_COUNT; i++) {
        const char *name = ct_exp_task_name((ct_task_kind)i);
        ct_task_kind k = CT_TASK_KIND_COUNT;
        CT_CHECK_MSG(name && ct_exp_task_from_name(name, &k) && k == (ct_task_kind)i,
                     "task kind %d: '%s' finds %d", i, name ? name : "(none)", (int)k);
    }
    ct_exp_loss_kind l = CT_EXP_LOSS_AUTO;
    CT_CHECK(ct_exp_loss_from_name("smooth_l1", &l) && l == CT_EXP_LOSS_SMOOTH_L1);
    CT_CHECK(!ct_exp_loss_from_name("l2", &l) && l == CT_EXP_LOSS_SMOOTH_L1);
    CT_CHECK(ct_exp_loss_name(CT_EXP_LOSS_COUNT) == NULL);
    ct_task_kind t = CT_TASK_REGRESSION;
    CT_CHECK(ct_exp_task_from_name("language_model", &t) && t == CT_TASK_LANGUAGE_MODEL);
    /* auto is the data's choice, no kind */
    CT_CHECK(!ct_exp_task_from_name("auto", &t) && t == CT_TASK_LANGUAGE_MODEL);
    CT_CHECK(ct_exp_task_name(CT_TASK_KIND_COUNT) == NULL);
}

static void experiment_kinds_should_be_the_schemas_valid_values(void) {
    char want[512];
    join(want, sizeof want, NULL, optim_name, CT_OPTIM_KIND_COUNT);
    const char *got = schema_choices("optimizer.type");
    CT_CHECK_MSG(got && strcmp(got, want) == 0, "optimizer.type: '%s', the table: '%s'",
                 got ? got : "(none)", want);
    join(want, sizeof want, NULL, loss_name, CT_EXP_LOSS_COUNT);
    got = schema_choices("loss.type");
    CT_CHECK_MSG(got && strcmp(got, want) == 0, "loss.type: '%s', the table: '%s'",
                 got ? got : "(none)", want);
    join(want, sizeof want, "auto", task_name, CT_TASK_KIND_COUNT);
    got = schema_choices("task");
    CT_CHECK_MSG(got && strcmp(got, want) == 0, "task: '%s', the table: '%s'", got ? got : "(none)",
                 want);
}

int main(void) {
    CT_RUN(experiment_kinds_should_find_each_optimizer_by_its_name);
    CT_RUN(experiment_kinds_should_find_each_loss_and_task_by_its_name);
    CT_RUN(experiment_kinds_should_be_the_schemas_valid_values);
    return ct_test_finish();
}
