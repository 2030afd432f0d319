/*
 * run_records.c - a run's metrics.jsonl read into series for the report and the comparison of
 * runs, with the steps at which epochs ended: a record's epoch is its step's place between the
 * ends of epochs the records show (their `epoch` field, the epoch from 1 that the step belongs
 * to: an epoch ended at its last record once a record of a later one follows), so an
 * evaluation at an epoch's end sits at that epoch and a training record at a fraction of one.
 * Confusion matrices (SPLIT/confusion/T/P) are kept as matrices, the last evaluation's and the
 * best step's, not as series.
 *
 * Ownership: the series and matrices are allocated from the context's allocator and freed by
 * ct_rep_run_fini.
 */
#include "log/report_internal.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static ct_rep_series *find_series(ct_rep_run *r, const char *name) {
    for (int64_t i = 0; i < r->n_series; i++)
        if (strcmp(r->s[i].name, name) == 0) return &r->s[i];
    if (r->n_series == CT_REP_MAX_SERIES) return NULL;
    ct_rep_series *s = &r->s[r->n_series++];
    memset(s, 0, sizeof *s);
    (void)snprintf(s->name, sizeof s->name, "%s", name);
    return s;
}

/* Notes the split of a series name the first time the records name it: the order of the
 * splits (and so their colours) is the order of the file, whatever the plot. */
static void note_split(ct_rep_run *r, const char *name) {
    char split[64];
    if (!ct_rep_split_of(name, split, sizeof split)) return;
    for (int64_t k = 0; k < r->n_splits; k++)
        if (strcmp(r->splits[k], split) == 0) return;
    if (r->n_splits < CT_REP_MAX_SPLITS)
        (void)snprintf(r->splits[r->n_splits++], sizeof r->splits[0], "%s", split);
}

static bool add_point(ct_ctx *ctx, ct_rep_series *s, double step, double value) {
    if (s->n == s->cap) {
        int64_t cap = s->cap ? 2 * s->cap : 64;
        ct_rep_point *np = ct_alloc(ctx, (size_t)cap * sizeof *np);
        if (!np) return false;
        if (s->n) memcpy(np, s->pts, (size_t)s->n * sizeof *np);
        ct_free(ctx, s->pts, (size_t)s->cap * sizeof *np);
        s->pts = np;
        s->cap = cap;
    }
    s->pts[s->n].step = step;
    s->pts[s->n].value = value;
    s->n++;
    return true;
}

static ct_rep_confusion *find_cm(ct_rep_run *r, const char *split) {
    for (int64_t i = 0; i < r->n_cm; i++)
        if (strcmp(r->cm[i].split, split) == 0) return &r->cm[i];
    if (r->n_cm == CT_REP_MAX_CM) return NULL;
    ct_rep_confusion *c = &r->cm[r->n_cm++];
    memset(c, 0, sizeof *c);
    (void)snprintf(c->split, sizeof c->split, "%s", split);
    return c;
}

/* "valid/confusion/3/5" -> split "valid", true 3, predicted 5. */
static bool parse_confusion(const char *key, char *split, size_t size, int64_t *t, int64_t *p) {
    const char *c = strstr(key, "/confusion/");
    if (!c || (size_t)(c - key) >= size) return false;
    long long a, b;
    char tail;
    if (sscanf(c + 11, "%lld/%lld%c", &a, &b, &tail) != 2) return false;
    if (a < 0 || b < 0 || a >= CT_REP_MAX_CLASSES || b >= CT_REP_MAX_CLASSES) return false;
    memcpy(split, key, (size_t)(c - key));
    split[c - key] = '\0';
    *t = a;
    *p = b;
    return true;
}

/* A record's epoch: every epoch before a later one has ended, at the last record of the
 * latest one (epochs without records with it). */
static void note_epoch(ct_rep_run *r, int64_t epoch, double step) {
    if (epoch > r->last_epoch) {
        double end = r->last_epoch > 0 ? r->last_epoch_step : step;
        while (r->n_epochs < epoch - 1 && r->n_epochs < CT_REP_MAX_EPOCH_MARKS) {
            double prev = r->n_epochs > 0 ? r->epoch_at[r->n_epochs - 1] : end;
            r->epoch_at[r->n_epochs++] = fmax(end, prev);
        }
        r->last_epoch = epoch;
    }
    if (epoch == r->last_epoch) r->last_epoch_step = step;
}

/* One cell of a confusion matrix recorded at istep. */
static void
note_cell(ct_rep_run *r, const char *split, int64_t istep, int64_t t, int64_t p, double x) {
    ct_rep_confusion *c = find_cm(r, split);
    if (!c) return;
    if (c->last_step != istep) {
        memset(c->last, 0, sizeof c->last);
        c->last_step = istep;
    }
    c->last[t * CT_REP_MAX_CLASSES + p] = x;
    if (t + 1 > c->n_classes) c->n_classes = t + 1;
    if (p + 1 > c->n_classes) c->n_classes = p + 1;
    if (istep == r->best_step) {
        c->best[t * CT_REP_MAX_CLASSES + p] = x;
        c->has_best = true;
    }
}

/* The values of one record. */
static ct_status read_record(ct_ctx *ctx, ct_rep_run *r, json_t *o) {
    /* the step as the integer it is for the confusion matrices (a double of it near 2^63
       has no int64_t), as a double for the axes */
    int64_t istep = (int64_t)json_integer_value(json_object_get(o, "step"));
    double step = (double)istep;
    note_epoch(r, (int64_t)json_integer_value(json_object_get(o, "epoch")), step);
    const char *key;
    json_t *v;
    json_object_foreach(o, key, v) {
        if (!strcmp(key, "step") || !strcmp(key, "epoch") || !strcmp(key, "time")) continue;
        if (!json_is_number(v)) continue; /* null: not finite */
        double x = json_number_value(v);
        char split[64];
        int64_t ti, pi;
        if (parse_confusion(key, split, sizeof split, &ti, &pi)) {
            note_cell(r, split, istep, ti, pi, x);
            continue;
        }
        ct_rep_series *se = find_series(r, key);
        if (se && !add_point(ctx, se, step, x))
            return CT_FAIL(ctx, CT_ERR_OOM, "report: out of memory");
        if (se) note_split(r, key);
        r->points++;
    }
    return CT_OK;
}

ct_status ct_rep_run_read(
    ct_ctx *ctx, const char *run_dir, const ct_report_params *p, int64_t best_step, ct_rep_run *r) {
    memset(r, 0, sizeof *r);
    r->best_step = best_step;
    r->s = ct_alloc(ctx, CT_REP_MAX_SERIES * sizeof *r->s);
    r->cm = ct_alloc(ctx, CT_REP_MAX_CM * sizeof *r->cm);
    if (!r->s || !r->cm) return CT_FAIL(ctx, CT_ERR_OOM, "report: out of memory");
    char path[1100];
    (void)snprintf(path, sizeof path, "%s/metrics.jsonl", run_dir);
    FILE *f = fopen(path, "r");
    if (!f) return CT_FAIL(ctx, CT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    char *line = NULL;
    size_t cap = 0;
    int64_t lineno = 0;
    ct_status s = CT_OK;
    while (s == CT_OK) {
        if (lineno % 4096 == 0 && ct_rep_stopped(p)) {
            s = CT_STOP;
            break;
        }
        ssize_t len = getline(&line, &cap, f);
        if (len <= 0) break;
        lineno++;
        /* a last line without its newline is a record being written (the run is live) or
           cut by a crash, which the run's resume drops: not part of the picture */
        if (line[len - 1] != '\n') break;
        json_error_t err;
        json_t *o = json_loads(line, 0, &err);
        if (!json_is_object(o))
            s = CT_FAIL(ctx, CT_ERR_FORMAT, "%s:%lld: expected a JSON object per line: %s", path,
                        (long long)lineno, err.text);
        else
            s = read_record(ctx, r, o);
        json_decref(o);
    }
    free(line);
    (void)fclose(f);
    if (s == CT_OK && ct_rep_stopped(p)) s = CT_STOP; /* a signal may have cut a read short */
    return s;
}

void ct_rep_run_fini(ct_ctx *ctx, ct_rep_run *r) {
    for (int64_t i = 0; r->s && i < r->n_series; i++)
        ct_free(ctx, r->s[i].pts, (size_t)r->s[i].cap * sizeof(ct_rep_point));
    ct_free(ctx, r->s, CT_REP_MAX_SERIES * sizeof *r->s);
    ct_free(ctx, r->cm, CT_REP_MAX_CM * sizeof *r->cm);
    r->s = NULL;
    r->cm = NULL;
    r->n_series = r->n_cm = 0;
}

/* The fractional epoch of a step: k + the share of epoch k + 1's steps done, from the steps at
 * which the records say epochs ended; past the last end, at the last epoch's pace. NaN before
 * any epoch ended (nothing tells how long one is). */
double ct_rep_epoch_of(const ct_rep_run *r, double step) {
    /* the first epoch end at or after the step (the ends do not decrease): a bisection, as
       this runs for every point of every plot against the epoch */
    int64_t lo = 0, hi = r->n_epochs;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (step <= r->epoch_at[mid])
            hi = mid;
        else
            lo = mid + 1;
    }
    int64_t k = lo, n = r->n_epochs;
    double start = k > 0 ? r->epoch_at[k - 1] : 0;
    if (k < n) {
        double end = r->epoch_at[k];
        return end > start ? (double)k + (step - start) / (end - start) : (double)(k + 1);
    }
    double pace = n == 0 ? 0 : r->epoch_at[n - 1] - (n >= 2 ? r->epoch_at[n - 2] : 0);
    return pace > 0 ? (double)n + (step - start) / pace : (double)NAN;
}
