/*
 * profile.c - the step profile: where each step's wall time goes (data, forward, backward,
 * communication, the update, evaluation, checkpoints, records, the rest), as totals and as
 * medians per step.
 *
 * The loop reads CLOCK_MONOTONIC at each phase boundary (ct_train_lap: one reading per
 * boundary, the end of one phase the start of the next) and adds into fixed arrays; nothing is
 * allocated while it runs, and with profiling off each boundary is one branch on a NULL pointer.
 * A step's overhead is its wall time less its measured phases, so the phases add up to the wall
 * time by construction. With layers, the graph adds each layer's forward and backward time into
 * tables the profile owns (ct_graph_set_layer_times), copied out when the fit ends. The medians are
 * exact over the last CT_PROFILE_MEDIAN_STEPS steps (a ring of their times), sorted in a copy when
 * asked for; the totals cover every step.
 */
#include <assert.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "train/train_internal.h"

static const char *const k_phase_names[] = {"data",       "forward",   "backward",
                                            "comm",       "optimizer", "eval",
                                            "checkpoint", "logging",   "overhead"};
static_assert(sizeof k_phase_names / sizeof k_phase_names[0] == CT_PROFILE_PHASE_COUNT,
              "a name per ct_profile_phase");

const char *ct_profile_phase_name(ct_profile_phase p) {
    return (int)p >= 0 && p < CT_PROFILE_PHASE_COUNT ? k_phase_names[p] : NULL;
}

double ct_train_clock(void) {
    struct timespec ts;
    (void)clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The layer tables: names from the model, seconds per layer (forward, then backward, in one
 * block). */
static ct_status make_layers(ct_trainer *t, ct_train_profile *p) {
    int64_t n = ct_model_layer_count(t->model);
    if (n == 0) return CT_OK;
    p->n_layers = n; /* first: the sizes ct_train_profile_destroy frees either table with */
    p->layers = ct_alloc(t->ctx, (size_t)n * sizeof *p->layers);
    p->layer_fwd = ct_alloc(t->ctx, 2 * (size_t)n * sizeof *p->layer_fwd);
    if (!p->layers || !p->layer_fwd)
        return CT_FAIL(t->ctx, CT_ERR_OOM, "trainer: the profile of %lld layers", (long long)n);
    p->layer_bwd = p->layer_fwd + n;
    for (int64_t i = 0; i < n; i++) {
        p->layers[i].name = ct_model_layer_name(t->model, i);
        p->layers[i].type = ct_model_layer_type(t->model, i);
        p->layers[i].forward_seconds = p->layers[i].backward_seconds = 0.0;
    }
    return CT_OK;
}

ct_status ct_train_profile_create(ct_trainer *t) {
    if (t->p.profile == CT_PROFILE_MODE_OFF) return CT_OK;
    t->prof = ct_alloc(t->ctx, sizeof *t->prof);
    if (!t->prof) return CT_FAIL(t->ctx, CT_ERR_OOM, "trainer: the step profile");
    memset(t->prof, 0, sizeof *t->prof);
    return t->p.profile == CT_PROFILE_MODE_LAYERS ? make_layers(t, t->prof) : CT_OK;
}

void ct_train_profile_destroy(ct_trainer *t) {
    ct_train_profile *p = t->prof;
    if (!p) return;
    ct_free(t->ctx, p->layers, (size_t)p->n_layers * sizeof *p->layers);
    ct_free(t->ctx, p->layer_fwd, 2 * (size_t)p->n_layers * sizeof *p->layer_fwd);
    ct_free(t->ctx, p, sizeof *p);
    t->prof = NULL;
}

void ct_train_profile_begin(ct_trainer *t) {
    ct_train_profile *p = t->prof;
    if (!p) return;
    p->steps = 0;
    p->wall = 0.0;
    memset(p->cur, 0, sizeof p->cur);
    memset(p->total, 0, sizeof p->total);
    if (p->layers) {
        memset(p->layer_fwd, 0, 2 * (size_t)p->n_layers * sizeof *p->layer_fwd);
        ct_graph_set_layer_times(t->g, p->layer_fwd, p->layer_bwd, p->n_layers);
    }
    p->fit_start = p->step_start = p->mark = ct_train_clock();
    p->ran = true;
}

/* The step's measured phases into the totals (and the ring when `ring`), its overhead the rest
 * of `wall`. */
static void close_step(ct_train_profile *p, double wall, bool ring) {
    double measured = 0.0;
    for (int k = 0; k < CT_PROFILE_OVERHEAD; k++)
        measured += p->cur[k];
    p->cur[CT_PROFILE_OVERHEAD] = wall > measured ? wall - measured : 0.0;
    double *slot = ring ? p->ring[p->steps % CT_PROFILE_MEDIAN_STEPS] : NULL;
    for (int k = 0; k < CT_PROFILE_PHASE_COUNT; k++) {
        p->total[k] += p->cur[k];
        if (slot) slot[k] = p->cur[k];
        p->cur[k] = 0.0;
    }
    if (slot) slot[CT_PROFILE_PHASE_COUNT] = wall;
}

/* The step ends at the last reading (the loop's last lap), so that a step costs no reading of
 * its own: what runs between that reading and the next one is the next step's. */
void ct_train_profile_step(ct_trainer *t) {
    ct_train_profile *p = t->prof;
    if (!p) return;
    close_step(p, p->mark - p->step_start, true);
    p->steps++;
    p->step_start = p->mark;
}

void ct_train_profile_end(ct_trainer *t) {
    ct_train_profile *p = t->prof;
    if (!p || !p->ran) return;
    double now = ct_train_clock();
    close_step(p, now - p->step_start, false);
    p->step_start = p->mark = now;
    p->wall = now - p->fit_start;
    if (p->layers) { /* evaluations after fit (ct_trainer_evaluate) are not training */
        ct_graph_set_layer_times(t->g, NULL, NULL, 0);
        for (int64_t i = 0; i < p->n_layers; i++) {
            p->layers[i].forward_seconds = p->layer_fwd[i];
            p->layers[i].backward_seconds = p->layer_bwd[i];
        }
    }
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of column k of the ring's n rows, sorted in tmp[n]: the middle value, or the
 * mean of the two middle ones for an even n. */
static double ring_median(const ct_train_profile *p, int64_t n, int k, double *tmp) {
    for (int64_t i = 0; i < n; i++)
        tmp[i] = p->ring[i][k];
    qsort(tmp, (size_t)n, sizeof *tmp, by_value);
    return n % 2 ? tmp[n / 2] : 0.5 * (tmp[n / 2 - 1] + tmp[n / 2]);
}

ct_status ct_trainer_profile(const ct_trainer *t, ct_trainer_profile_info *out) {
    memset(out, 0, sizeof *out);
    const ct_train_profile *p = t->prof;
    if (!p || !p->ran) return CT_OK;
    int64_t n = p->steps < CT_PROFILE_MEDIAN_STEPS ? p->steps : CT_PROFILE_MEDIAN_STEPS;
    double *tmp = NULL;
    if (n > 0) {
        tmp = ct_alloc(t->ctx, (size_t)n * sizeof *tmp);
        if (!tmp) return CT_FAIL(t->ctx, CT_ERR_OOM, "trainer profile: %lld medians", (long long)n);
    }
    out->mode = t->p.profile;
    out->steps = p->steps;
    out->median_steps = n;
    /* during a fit (a callback asking): the time so far */
    out->wall_seconds = p->wall > 0.0 ? p->wall : ct_train_clock() - p->fit_start;
    for (int k = 0; k < CT_PROFILE_PHASE_COUNT; k++) {
        out->total[k] = p->total[k];
        if (n > 0) out->median[k] = ring_median(p, n, k, tmp);
    }
    if (n > 0) out->median_wall = ring_median(p, n, CT_PROFILE_PHASE_COUNT, tmp);
    out->layers = p->layers;
    out->n_layers = p->n_layers;
    ct_free(t->ctx, tmp, (size_t)n * sizeof *tmp);
    return CT_OK;
}
