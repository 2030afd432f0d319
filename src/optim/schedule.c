/*
 * schedule.c - learning-rate schedules found by name in one table; each type parses its options
 * and, except "plateau", gives the rate at step t in closed form.
 *
 * Invariant: for closed-form types s->lr == lr_at(s, s->steps) at all times, so the step count
 * alone is the state. "plateau" carries its rate and counters instead, all in double, so the
 * state restores it bit for bit. Formulas follow torch 1.13's lr_scheduler.py; the rates are
 * computed in double and converted to float only when returned.
 *
 * Ownership: the schedule owns its milestone array; nothing is borrowed from the options.
 */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core_internal.h"
#include "ctrain/schedule.h"

#define PI 3.14159265358979323846 /* Python's math.pi */

struct ct_schedule {
    ct_ctx *ctx;
    const ct_schedule_type *type;
    double base;
    int64_t *milestones; /* multistep, owned: cap_milestones allocated, n_milestones used */
    int64_t n_milestones, cap_milestones;
    union {
        struct {
            double factor;
            int64_t total;
        } constant;
        struct {
            int64_t step_size;
            double gamma;
        } step;
        struct {
            double gamma;
        } multistep, exponential;
        struct {
            int64_t t_max, warmup;
            double eta_min;
        } cosine;
        struct {
            int64_t warmup, total;
            double min_lr;
        } warm; /* warmup_linear, warmup_cosine */
        struct {
            int64_t total, n_phases;
            bool cos;
            double end[3], from[3], to[3]; /* each phase's last step (fractional) and rates */
        } onecycle;
        struct {
            int64_t total;
            double power, min_lr;
        } poly;
        struct {
            bool max, rel;
            double factor, threshold, min_lr, eps;
            int64_t patience, cooldown;
        } plateau;
    } p;
    /* state */
    int64_t steps;
    double lr;
    double best;
    int64_t bad_epochs, cooldown_left;
};

/* ---- option helpers ---- */

static ct_status need(ct_ctx *ctx, const ct_options *opts, const char *type, const char *key) {
    if (ct_options_get(opts, key)) return CT_OK;
    return CT_FAIL(ctx, CT_ERR_CONFIG, "%s: schedule '%s' needs key '%s'",
                   ct_options_where(opts, "schedule"), type, key);
}

/* A double in (0, hi]. */
static ct_status positive(
    ct_ctx *ctx, const ct_options *opts, const char *key, double fallback, double hi, double *out) {
    CT_TRY(ct_options_double(ctx, opts, key, fallback, 0.0, hi, out));
    if (*out > 0.0) return CT_OK;
    return CT_FAIL(ctx, CT_ERR_CONFIG, "%s: key '%s': expected a number > 0, got %g",
                   ct_options_where(opts, "schedule"), key, *out);
}

/* One of the NULL-terminated `values`; *out is its index. An error names the schedule when
 * the options do not say where they come from. */
static ct_status choice(
    ct_ctx *ctx, const ct_options *opts, const char *key, const char *const *values, int64_t *out) {
    ct_options named = {opts ? opts->items : NULL, opts ? opts->count : 0,
                        ct_options_where(opts, "schedule")};
    return ct_options_choice(ctx, &named, key, values, out);
}

/* "30,80" (spaces allowed) into an owned array of strictly increasing integers >= 0. */
static ct_status parse_milestones(ct_ctx *ctx, const ct_options *opts, ct_schedule *s) {
    const char *v = ct_options_get(opts, "milestones");
    int64_t n = 1;
    for (const char *c = v; *c; c++)
        n += *c == ',';
    s->milestones = ct_alloc(ctx, (size_t)n * sizeof *s->milestones);
    if (!s->milestones) return CT_FAIL(ctx, CT_ERR_OOM, "allocating %lld milestones", (long long)n);
    s->cap_milestones = n;
    s->n_milestones = 0;
    const char *c = v;
    for (;;) {
        char *end = NULL;
        errno = 0;
        long long x = strtoll(c, &end, 10);
        const char *e = end;
        while (*e == ' ')
            e++;
        if (end == c || (*e != ',' && *e != '\0') || errno == ERANGE)
            return CT_FAIL(ctx, CT_ERR_CONFIG,
                           "%s: key 'milestones': expected comma-separated integers like '30,80', "
                           "got '%s'",
                           ct_options_where(opts, "schedule"), v);
        if (x < 0 || (s->n_milestones > 0 && x <= s->milestones[s->n_milestones - 1]))
            return CT_FAIL(ctx, CT_ERR_CONFIG,
                           "%s: key 'milestones': '%s' must be strictly increasing and >= 0 "
                           "(at %lld)",
                           ct_options_where(opts, "schedule"), v, x);
        s->milestones[s->n_milestones++] = (int64_t)x;
        if (*e == '\0') break;
        c = e + 1;
    }
    return CT_OK;
}

/* ---- the types: options and closed forms ---- */

static const char *const constant_keys[] = {"factor", "total", NULL};
static ct_status constant_parse(ct_ctx *ctx, const ct_options *opts, ct_schedule *s) {
    CT_TRY(positive(ctx, opts, "factor", 1.0, 1.0, &s->p.constant.factor));
    return ct_options_int(ctx, opts, "total", 0, 0, INT64_MAX, &s->p.constant.total);
}
static double constant_lr(const ct_schedule *s, int64_t t) {
    return t < s->p.constant.total ? s->base * s->p.constant.factor : s->base;
}

static const char *const step_keys[] = {"step_size", "gamma", NULL};
static ct_status step_parse(ct_ctx *ctx, const ct_options *opts, ct_schedule *s) {
    CT_TRY(need(ctx, opts, "step", "step_size"));
    CT_TRY(ct_options_int(ctx, opts, "step_size", 1, 1, INT64_MAX, &s->p.step.step_size));
    return positive(ctx, opts, "gamma", 0.1, 1e3, &s->p.step.gamma);
}
static double step_lr(const ct_schedule *s, int64_t t) {
    return s->base * pow(s->p.step.gamma, (double)(t / s->p.step.step_size));
}

static const char *const multistep_keys[] = {"milestones", "gamma", NULL};
static ct_status multistep_parse(ct_ctx *ctx, const ct_options *opts, ct_schedule *s) {
    CT_TRY(need(ctx, opts, "multistep", "milestones"));
    CT_TRY(parse_milestones(ctx, opts, s));
    return positive(ctx, opts, "gamma", 0.1, 1e3, &s->p.multistep.gamma);
}
static double multistep_lr(const ct_schedule *s, int64_t t) {
    int64_t k = 0; /* milestones passed: bisect_right(milestones, t) */
    while (k < s->n_milestones && s->milestones[k] <= t)
        k++;
    return s->base * pow(s->p.multistep.gamma, (double)k);
}

static const char *const exponential_keys[] = {"gamma", NULL};
static ct_status exponential_parse(ct_ctx *ctx, const ct_options *opts, ct_schedule *s) {
    CT_TRY(need(ctx, opts, "exponential", "gamma"));
    return positive(ctx, opts, "gamma", 1.0, 1e3, &s->p.exponential.gamma);
}
static double exponential_lr(const ct_schedule *s, int64_t t) {
    return s->base * pow(s->p.exponential.gamma, (double)t);
}

/* Linear warmup from 0 (LambdaLR t / warmup, as transformers' schedules); t < warmup. */
static double warmup_lr(double base, int64_t t, int64_t warmup) {
    return base * (double)t / (double)warmup;
}

static const char *const cosine_keys[] = {"t_max", "eta_min", "warmup", NULL};
static ct_status cosine_parse(ct_ctx *ctx, const ct_options *opts, ct_schedule *s) {
    CT_TRY(need(ctx, opts, "cosine", "t_max"));
    CT_TRY(ct_options_int(ctx, opts, "t_max", 1, 1, INT64_MAX, &s->p.cosine.t_max));
    CT_TRY(ct_options_double(ctx, opts, "eta_min", 0.0, 0.0, DBL_MAX, &s->p.cosine.eta_min));
    return ct_options_int(ctx, opts, "warmup", 0, 0, INT64_MAX, &s->p.cosine.warmup);
}
static double cosine_lr(const ct_schedule *s, int64_t t) {
    int64_t w = s->p.cosine.warmup;
    if (t < w) return warmup_lr(s->base, t, w);
    double lo = s->p.cosine.eta_min;
    /* CosineAnnealingLR's closed form, same operation order: cos(t * pi / T_max) */
    return lo +
           (s->base - lo) * (1.0 + cos((double)(t - w) * PI / (double)s->p.cosine.t_max)) / 2.0;
}

static const char *const warm_keys[] = {"warmup", "total", "min_lr", NULL};
static ct_status warm_parse(ct_ctx *ctx, const ct_options *opts, ct_schedule *s) {
    CT_TRY(need(ctx, opts, s->type->name, "total"));
    CT_TRY(ct_options_int(ctx, opts, "warmup", 0, 0, INT64_MAX - 1, &s->p.warm.warmup));
    CT_TRY(ct_options_int(ctx, opts, "total", 1, 1, INT64_MAX, &s->p.warm.total));
    if (s->p.warm.total <= s->p.warm.warmup)
        return CT_FAIL(ctx, CT_ERR_CONFIG,
                       "%s: key 'total': %lld steps, expected more than warmup (%lld); HINT: "
                       "a shorter warmup, or total: auto (the run's length)",
                       ct_options_where(opts, "schedule"), (long long)s->p.warm.total,
                       (long long)s->p.warm.warmup);
    return ct_options_double(ctx, opts, "min_lr", 0.0, 0.0, DBL_MAX, &s->p.warm.min_lr);
}
static double warmup_linear_lr(const ct_schedule *s, int64_t t) {
    int64_t w = s->p.warm.warmup, n = s->p.warm.total;
    if (t < w) return warmup_lr(s->base, t, w);
    double lo = s->p.warm.min_lr;
    if (t >= n) return lo;
    return lo + (s->base - lo) * ((double)(n - t) / (double)(n - w));
}
static double warmup_cosine_lr(const ct_schedule *s, int64_t t) {
    int64_t w = s->p.warm.warmup, n = s->p.warm.total;
    if (t < w) return warmup_lr(s->base, t, w);
    double lo = s->p.warm.min_lr;
    if (t >= n) return lo;
    return lo + (s->base - lo) * (1.0 + cos((double)(t - w) * PI / (double)(n - w))) / 2.0;
}

static const char *const onecycle_keys[] = {"max_lr",      "total",      "pct_start",
                                            "anneal",      "div_factor", "final_div_factor",
                                            "three_phase", NULL};
static ct_status onecycle_parse(ct_ctx *ctx, const ct_options *opts, ct_schedule *s) {
    static const char *const anneals[] = {"cos", "linear", NULL};
    double max_lr, pct, div, final_div;
    int64_t anneal;
    bool three;
    CT_TRY(need(ctx, opts, "onecycle", "total"));
    CT_TRY(positive(ctx, opts, "max_lr", s->base > 0.0 ? s->base : 1.0, DBL_MAX, &max_lr));
    CT_TRY(ct_options_int(ctx, opts, "total", 1, 2, INT64_MAX, &s->p.onecycle.total));
    CT_TRY(ct_options_double(ctx, opts, "pct_start", 0.3, 0.0, 1.0, &pct));
    CT_TRY(choice(ctx, opts, "anneal", anneals, &anneal));
    CT_TRY(positive(ctx, opts, "div_factor", 25.0, DBL_MAX, &div));
    CT_TRY(positive(ctx, opts, "final_div_factor", 1e4, DBL_MAX, &final_div));
    CT_TRY(ct_options_bool(ctx, opts, "three_phase", false, &three));
    double total = (double)s->p.onecycle.total, initial = max_lr / div;
    double lo = initial / final_div;
    /* OneCycleLR's phases: (last step, from, to) */
    double *end = s->p.onecycle.end, *from = s->p.onecycle.from, *to = s->p.onecycle.to;
    end[0] = pct * total - 1.0, from[0] = initial, to[0] = max_lr;
    if (three) {
        end[1] = 2.0 * pct * total - 2.0, from[1] = max_lr, to[1] = initial;
        end[2] = total - 1.0, from[2] = initial, to[2] = lo;
        s->p.onecycle.n_phases = 3;
    } else {
        end[1] = total - 1.0, from[1] = max_lr, to[1] = lo;
        s->p.onecycle.n_phases = 2;
    }
    s->p.onecycle.cos = anneal == 0;
    for (int64_t i = 0; i < s->p.onecycle.n_phases; i++) {
        double start = i ? end[i - 1] : 0.0;
        if (!(end[i] > start))
            return CT_FAIL(ctx, CT_ERR_CONFIG,
                           "%s: schedule 'onecycle': phase %lld would have no steps (total %lld, "
                           "pct_start %g); HINT: use a larger total or a pct_start nearer 0.3",
                           ct_options_where(opts, "schedule"), (long long)i + 1,
                           (long long)s->p.onecycle.total, pct);
    }
    return CT_OK;
}
static double onecycle_lr(const ct_schedule *s, int64_t t) {
    /* PyTorch raises past total - 1 (and extrapolates at total): hold the final rate instead */
    double x = (double)(t < s->p.onecycle.total ? t : s->p.onecycle.total - 1);
    double start = 0.0;
    int64_t last = s->p.onecycle.n_phases - 1;
    for (int64_t i = 0;; i++) {
        double end = s->p.onecycle.end[i];
        if (x <= end || i == last) {
            double pct = (x - start) / (end - start);
            double a = s->p.onecycle.from[i], b = s->p.onecycle.to[i];
            if (s->p.onecycle.cos) return b + (a - b) / 2.0 * (cos(PI * pct) + 1.0);
            return (b - a) * pct + a;
        }
        start = end;
    }
}

static const char *const poly_keys[] = {"total", "power", "min_lr", NULL};
static ct_status poly_parse(ct_ctx *ctx, const ct_options *opts, ct_schedule *s) {
    CT_TRY(need(ctx, opts, "polynomial", "total"));
    CT_TRY(ct_options_int(ctx, opts, "total", 1, 1, INT64_MAX, &s->p.poly.total));
    CT_TRY(ct_options_double(ctx, opts, "power", 1.0, 0.0, 1e3, &s->p.poly.power));
    return ct_options_double(ctx, opts, "min_lr", 0.0, 0.0, DBL_MAX, &s->p.poly.min_lr);
}
static double poly_lr(const ct_schedule *s, int64_t t) {
    int64_t n = s->p.poly.total;
    double lo = s->p.poly.min_lr;
    double f = pow(1.0 - (double)(t < n ? t : n) / (double)n, s->p.poly.power);
    return lo + (s->base - lo) * f;
}

static const char *const plateau_keys[] = {
    "mode", "factor", "patience", "threshold", "threshold_mode", "cooldown", "min_lr", "eps", NULL};
static ct_status plateau_parse(ct_ctx *ctx, const ct_options *opts, ct_schedule *s) {
    static const char *const modes[] = {"min", "max", NULL};
    static const char *const tmodes[] = {"rel", "abs", NULL};
    int64_t mode, tmode;
    CT_TRY(choice(ctx, opts, "mode", modes, &mode));
    CT_TRY(choice(ctx, opts, "threshold_mode", tmodes, &tmode));
    s->p.plateau.max = mode == 1;
    s->p.plateau.rel = tmode == 0;
    CT_TRY(ct_options_double(ctx, opts, "factor", 0.1, 0.0, 1.0, &s->p.plateau.factor));
    if (s->p.plateau.factor >= 1.0)
        return CT_FAIL(ctx, CT_ERR_CONFIG, "%s: key 'factor': expected a number < 1, got %g",
                       ct_options_where(opts, "schedule"), s->p.plateau.factor);
    CT_TRY(ct_options_int(ctx, opts, "patience", 10, 0, INT64_MAX - 1, &s->p.plateau.patience));
    CT_TRY(ct_options_double(ctx, opts, "threshold", 1e-4, 0.0, DBL_MAX, &s->p.plateau.threshold));
    CT_TRY(ct_options_int(ctx, opts, "cooldown", 0, 0, INT64_MAX, &s->p.plateau.cooldown));
    CT_TRY(ct_options_double(ctx, opts, "min_lr", 0.0, 0.0, DBL_MAX, &s->p.plateau.min_lr));
    return ct_options_double(ctx, opts, "eps", 1e-8, 0.0, DBL_MAX, &s->p.plateau.eps);
}

/* ReduceLROnPlateau.is_better; the first finite metric always improves on the +-inf start. */
static bool plateau_better(const ct_schedule *s, double a) {
    double best = s->best, th = s->p.plateau.threshold;
    if (!isfinite(a)) return false;
    if (isinf(best)) return true;
    if (s->p.plateau.max) return s->p.plateau.rel ? a > best * (th + 1.0) : a > best + th;
    return s->p.plateau.rel ? a < best * (1.0 - th) : a < best - th;
}

static void plateau_step(ct_schedule *s, double metric) {
    if (plateau_better(s, metric)) {
        s->best = metric;
        s->bad_epochs = 0;
    } else {
        s->bad_epochs++;
    }
    if (s->cooldown_left > 0) {
        s->cooldown_left--;
        s->bad_epochs = 0; /* bad results during cooldown are ignored */
    }
    if (s->bad_epochs > s->p.plateau.patience) {
        double lr = fmax(s->lr * s->p.plateau.factor, s->p.plateau.min_lr);
        if (s->lr - lr > s->p.plateau.eps) s->lr = lr;
        s->cooldown_left = s->p.plateau.cooldown;
        s->bad_epochs = 0;
    }
}

static const ct_schedule_type *const types[] = {
    &(const ct_schedule_type){"constant", constant_keys, constant_parse, constant_lr},
    &(const ct_schedule_type){"step", step_keys, step_parse, step_lr},
    &(const ct_schedule_type){"multistep", multistep_keys, multistep_parse, multistep_lr},
    &(const ct_schedule_type){"exponential", exponential_keys, exponential_parse, exponential_lr},
    &(const ct_schedule_type){"cosine", cosine_keys, cosine_parse, cosine_lr},
    &(const ct_schedule_type){"warmup_linear", warm_keys, warm_parse, warmup_linear_lr},
    &(const ct_schedule_type){"warmup_cosine", warm_keys, warm_parse, warmup_cosine_lr},
    &(const ct_schedule_type){"onecycle", onecycle_keys, onecycle_parse, onecycle_lr},
    &(const ct_schedule_type){"polynomial", poly_keys, poly_parse, poly_lr},
    &(const ct_schedule_type){"plateau", plateau_keys, plateau_parse, NULL},
    NULL,
};

const ct_schedule_type *const *ct_schedule_types(int64_t *count) {
    int64_t n = 0;
    while (types[n])
        n++;
    *count = n;
    return types;
}

const ct_schedule_type *ct_schedule_type_find(const char *name) {
    for (int64_t i = 0; name && types[i]; i++)
        if (strcmp(types[i]->name, name) == 0) return types[i];
    return NULL;
}

/* ---- the schedule ---- */

static void reset(ct_schedule *s) {
    s->steps = 0;
    s->bad_epochs = 0;
    s->cooldown_left = 0;
    if (s->type->lr_at) {
        s->best = 0.0;
        s->lr = s->type->lr_at(s, 0);
    } else {
        s->best = s->p.plateau.max ? -(double)INFINITY : (double)INFINITY;
        s->lr = s->base;
    }
}

static void destroy_parts(ct_schedule *s) {
    if (s->milestones) ct_free(s->ctx, s->milestones, (size_t)s->cap_milestones * sizeof(int64_t));
    ct_free(s->ctx, s, sizeof *s);
}

ct_status ct_schedule_create(
    ct_ctx *ctx, const char *type, const ct_options *opts, float base_lr, ct_schedule **out) {
    *out = NULL;
    const ct_schedule_type *t = ct_schedule_type_find(type);
    if (!t) {
        ct_unknown u;
        ct_unknown_init(&u, type);
        for (int i = 0; types[i]; i++)
            ct_unknown_add(&u, types[i]->name);
        return CT_FAIL_UNKNOWN(ctx, &u, ct_options_where(opts, "schedule"), "schedule type");
    }
    if (!isfinite(base_lr) || base_lr < 0.0f)
        return CT_FAIL(ctx, CT_ERR_INVALID_ARG,
                       "schedule '%s': base learning rate %g, expected a finite number >= 0",
                       t->name, (double)base_lr);
    if (ct_options_check(ctx, opts, t->keys) != CT_OK)
        return ct_err_wrap(ctx, "creating a '%s' schedule", t->name);
    ct_schedule *s = ct_alloc(ctx, sizeof *s);
    if (!s) return CT_FAIL(ctx, CT_ERR_OOM, "allocating a schedule");
    memset(s, 0, sizeof *s);
    s->ctx = ctx;
    s->type = t;
    s->base = (double)base_lr;
    ct_status st = t->parse(ctx, opts, s);
    if (st != CT_OK) {
        destroy_parts(s);
        return ct_err_wrap(ctx, "creating a '%s' schedule", t->name);
    }
    reset(s);
    *out = s;
    return CT_OK;
}

void ct_schedule_destroy(ct_schedule *s) {
    if (!s) return;
    destroy_parts(s);
}

const char *ct_schedule_name(const ct_schedule *s) {
    return s->type->name;
}

bool ct_schedule_needs_metric(const ct_schedule *s) {
    return s->type->lr_at == NULL;
}

/* A rate too large for float becomes +inf (which ct_optim_set_lr refuses) rather than UB. */
static float to_float(double x) {
    return x > (double)FLT_MAX ? INFINITY : (float)x;
}

float ct_schedule_lr(const ct_schedule *s) {
    return to_float(s->lr);
}

int64_t ct_schedule_steps(const ct_schedule *s) {
    return s->steps;
}

float ct_schedule_step(ct_schedule *s) {
    if (s->steps < INT64_MAX) s->steps++;
    if (s->type->lr_at) s->lr = s->type->lr_at(s, s->steps);
    return to_float(s->lr);
}

float ct_schedule_step_metric(ct_schedule *s, double metric) {
    if (s->type->lr_at) return ct_schedule_step(s);
    if (s->steps < INT64_MAX) s->steps++;
    plateau_step(s, metric);
    return to_float(s->lr);
}

void ct_schedule_get_state(const ct_schedule *s, ct_schedule_state *out) {
    out->steps = s->steps;
    out->best = s->best;
    out->bad_epochs = s->bad_epochs;
    out->cooldown_left = s->cooldown_left;
    out->lr = s->lr;
}

ct_status ct_schedule_set_state(ct_schedule *s, const ct_schedule_state *st) {
    if (st->steps < 0)
        return CT_FAIL(s->ctx, CT_ERR_INVALID_ARG,
                       "schedule '%s': state has steps %lld, expected >= 0", s->type->name,
                       (long long)st->steps);
    if (s->type->lr_at) {
        s->steps = st->steps;
        s->lr = s->type->lr_at(s, s->steps);
        return CT_OK;
    }
    if (!isfinite(st->lr) || st->lr < 0.0 || isnan(st->best) || st->bad_epochs < 0 ||
        st->cooldown_left < 0 || st->cooldown_left > s->p.plateau.cooldown)
        return CT_FAIL(s->ctx, CT_ERR_INVALID_ARG,
                       "schedule 'plateau': bad state (lr %g, best %g, bad_epochs %lld, "
                       "cooldown_left %lld; expected lr finite >= 0, best not NaN, bad_epochs >= "
                       "0, cooldown_left in [0, %lld])",
                       st->lr, st->best, (long long)st->bad_epochs, (long long)st->cooldown_left,
                       (long long)s->p.plateau.cooldown);
    s->steps = st->steps;
    s->best = st->best;
    s->bad_epochs = st->bad_epochs;
    s->cooldown_left = st->cooldown_left;
    s->lr = st->lr;
    return CT_OK;
}
