/*
 * report.c - the run report: metrics.jsonl read into series, each plot drawn as SVG by hand
 * (axes with round-number ticks, one polyline per series, a legend, the best step marked), and
 * the HTML page around them. No script: the page reads the same in any browser or offline.
 * Losses and metrics are drawn twice, against the step and against the epoch: a record's epoch
 * is its step's place between the ends of epochs the records show (their `epoch` field, the
 * epoch from 1 that the step belongs to: an epoch ended at its last record once a record of a
 * later one follows), so an evaluation at an epoch's end sits at that epoch and a training
 * record at a fraction of one.
 * The confusion matrices label their classes with the names the run's config.yaml gives
 * (data.classes) when there are as many as the matrix has classes; else with their indices.
 * Whatever metrics.jsonl holds (1e308, 5e-324, a flat series at 1e17, steps of -1e18), every
 * loop counts integers up to a fixed bound, never steps a double, and every number printed is
 * an axis label or a position clamped to the plot: the page is bounded by the input's size.
 *
 * Ownership: every series and matrix is allocated from the context's allocator and freed
 * before ct_report_write returns.
 */
#include "ctrain/report.h"

#include "config/config_internal.h"
#include "ctrain/checkpoint.h"
#include "ctrain/config.h"

#include <errno.h>
#include <float.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_SERIES      256
#define MAX_CLASSES     64
#define MAX_EPOCH_MARKS 4096
#define MAX_TICKS       50 /* per axis: far more than the ~6 asked for, a bound all the same */
#define MAX_EPOCH_LINES 60 /* per plot: the epoch ends drawn are thinned to these */

typedef struct point {
    double step, value;
} point;

typedef struct series {
    char name[128]; /* "valid/acc", "lr" */
    point *pts;
    int64_t n, cap;
} series;

/* The last and the best-step confusion matrices of one split. */
typedef struct confusion {
    char split[64];
    int64_t n_classes;
    double last[MAX_CLASSES * MAX_CLASSES], best[MAX_CLASSES * MAX_CLASSES];
    int64_t last_step, best_step_seen;
    bool has_best;
} confusion;

typedef struct report {
    ct_ctx *ctx;
    const ct_report_params *p;
    series *s;
    int64_t n_series;
    confusion *cm;
    int64_t n_cm;
    int64_t best_step;                /* -1 when the run has no best checkpoint */
    double epoch_at[MAX_EPOCH_MARKS]; /* the step at which epoch k + 1 was complete (kept
                                         non-decreasing, so that epoch_of can bisect) */
    int64_t n_epochs;
    int64_t last_epoch;     /* the latest epoch the records named, and the step of its last */
    double last_epoch_step; /* record: where it ended if a record of a later epoch follows */
    char best_metric[128];
    int64_t points;
} report;

/* Whether the caller asked the report to stop (ct_report_params.cancelled). */
static bool stopped(const report *r) {
    return r->p->cancelled && r->p->cancelled(r->p->user);
}

static series *find_series(report *r, const char *name) {
    for (int64_t i = 0; i < r->n_series; i++)
        if (strcmp(r->s[i].name, name) == 0) return &r->s[i];
    if (r->n_series == MAX_SERIES) return NULL;
    series *s = &r->s[r->n_series++];
    memset(s, 0, sizeof *s);
    (void)snprintf(s->name, sizeof s->name, "%s", name);
    return s;
}

static bool add_point(report *r, series *s, double step, double value) {
    if (s->n == s->cap) {
        int64_t cap = s->cap ? 2 * s->cap : 64;
        point *np = ct_alloc(r->ctx, (size_t)cap * sizeof *np);
        if (!np) return false;
        if (s->n) memcpy(np, s->pts, (size_t)s->n * sizeof *np);
        ct_free(r->ctx, s->pts, (size_t)s->cap * sizeof *np);
        s->pts = np;
        s->cap = cap;
    }
    s->pts[s->n].step = step;
    s->pts[s->n].value = value;
    s->n++;
    return true;
}

static confusion *find_cm(report *r, const char *split) {
    for (int64_t i = 0; i < r->n_cm; i++)
        if (strcmp(r->cm[i].split, split) == 0) return &r->cm[i];
    if (r->n_cm == 4) return NULL;
    confusion *c = &r->cm[r->n_cm++];
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
    if (a < 0 || b < 0 || a >= MAX_CLASSES || b >= MAX_CLASSES) return false;
    memcpy(split, key, (size_t)(c - key));
    split[c - key] = '\0';
    *t = a;
    *p = b;
    return true;
}

static ct_status read_metrics(report *r, const char *run_dir) {
    char path[1100];
    (void)snprintf(path, sizeof path, "%s/metrics.jsonl", run_dir);
    FILE *f = fopen(path, "r");
    if (!f) return CT_FAIL(r->ctx, CT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    char *line = NULL;
    size_t cap = 0;
    int64_t lineno = 0;
    ct_status s = CT_OK;
    while (s == CT_OK) {
        if (lineno % 4096 == 0 && stopped(r)) {
            s = CT_STOP;
            break;
        }
        if (getline(&line, &cap, f) <= 0) break;
        lineno++;
        json_error_t err;
        json_t *o = json_loads(line, 0, &err);
        if (!json_is_object(o)) {
            json_decref(o);
            s = CT_FAIL(r->ctx, CT_ERR_FORMAT, "%s:%lld: expected a JSON object per line: %s", path,
                        (long long)lineno, err.text);
            break;
        }
        /* the step as the integer it is for the confusion matrices (a double of it near 2^63
           has no int64_t), as a double for the axes */
        int64_t istep = (int64_t)json_integer_value(json_object_get(o, "step"));
        double step = (double)istep;
        int64_t epoch = (int64_t)json_integer_value(json_object_get(o, "epoch"));
        if (epoch > r->last_epoch) { /* every epoch before this one has ended */
            /* at the last record of the latest one (epochs without records with it) */
            double end = r->last_epoch > 0 ? r->last_epoch_step : step;
            while (r->n_epochs < epoch - 1 && r->n_epochs < MAX_EPOCH_MARKS) {
                double prev = r->n_epochs > 0 ? r->epoch_at[r->n_epochs - 1] : end;
                r->epoch_at[r->n_epochs++] = fmax(end, prev);
            }
            r->last_epoch = epoch;
        }
        if (epoch == r->last_epoch) r->last_epoch_step = step;
        const char *key;
        json_t *v;
        json_object_foreach(o, key, v) {
            if (!strcmp(key, "step") || !strcmp(key, "epoch") || !strcmp(key, "time")) continue;
            if (!json_is_number(v)) continue; /* null: not finite */
            double x = json_number_value(v);
            char split[64];
            int64_t ti, pi;
            if (parse_confusion(key, split, sizeof split, &ti, &pi)) {
                confusion *c = find_cm(r, split);
                if (!c) continue;
                if (c->last_step != istep) {
                    memset(c->last, 0, sizeof c->last);
                    c->last_step = istep;
                }
                c->last[ti * MAX_CLASSES + pi] = x;
                if (ti + 1 > c->n_classes) c->n_classes = ti + 1;
                if (pi + 1 > c->n_classes) c->n_classes = pi + 1;
                if (istep == r->best_step) {
                    c->best[ti * MAX_CLASSES + pi] = x;
                    c->has_best = true;
                }
                continue;
            }
            series *se = find_series(r, key);
            if (se && !add_point(r, se, step, x)) {
                s = CT_FAIL(r->ctx, CT_ERR_OOM, "report: out of memory");
                break;
            }
            r->points++;
        }
        json_decref(o);
    }
    free(line);
    (void)fclose(f);
    if (s == CT_OK && stopped(r)) s = CT_STOP; /* a signal may have cut a read short */
    return s;
}

/* The fractional epoch of a step: k + the share of epoch k + 1's steps done, from the steps at
 * which the records say epochs ended; past the last end, at the last epoch's pace. NaN before
 * any epoch ended (nothing tells how long one is). */
static double epoch_of(const report *r, double step) {
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

/* ---- drawing ---- */

static void esc(FILE *f, const char *s) {
    for (; *s; s++) {
        switch (*s) {
        case '&':
            (void)fputs("&amp;", f);
            break;
        case '<':
            (void)fputs("&lt;", f);
            break;
        case '>':
            (void)fputs("&gt;", f);
            break;
        case '"':
            (void)fputs("&quot;", f);
            break;
        default:
            (void)fputc(*s, f);
        }
    }
}

static const char *const k_colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                       "#9467bd", "#8c564b", "#e377c2", "#17becf"};

/* A round tick spacing for a range of 2 * half: 1, 2 or 5 times a power of ten, about n ticks
 * (axis_make keeps half at least 1e-250, so the power of ten is a normal number). */
static double tick_step(double half, int n) {
    double raw = half / n * 2;
    if (!(raw > 0) || !isfinite(raw)) return 1;
    double mag = pow(10, floor(log10(raw))), f = raw / mag;
    if (!(mag > 0) || !isfinite(f)) return raw;
    return (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * mag;
}

/* Significant digits that write every tick of spacing `step` up to magnitude `mag` exactly
 * (1000.24 next to 1000.26), at least `least`: the labels are what a reader (or a test)
 * reads values back from. */
static int tick_digits(double mag, double step, int least) {
    int d = step > 0 && mag > 0 ? (int)ceil(log10(mag / step)) + 1 : least;
    return d < least ? least : d > 15 ? 15 : d;
}

/* One axis of a plot: the range drawn and its ticks, k0 * step, (k0 + 1) * step, ... */
typedef struct axis {
    double lo, hi; /* finite, lo < hi */
    double half;   /* hi / 2 - lo / 2: finite where hi - lo would overflow (-1e308 to 1e308) */
    double step, k0;
    int n_ticks; /* at most MAX_TICKS */
    int digits;  /* of the labels */
} axis;

/*
 * The axis of finite data from lo to hi. A range narrower than a millionth of a millionth of
 * its magnitude (a flat series, or one at 1e17 whose values differ by an ulp) has no room for
 * distinct ticks: it becomes `flat` either side of its middle (`centre`) or above it, or 5% of
 * the magnitude where that is more, so a flat 1e17 reads 9.6e16 ... 1.04e17. Then `pad` of the
 * range is added on each side, and the ends are kept finite. The tick indices are then at most
 * about 1e13, far below 2^53, so consecutive ticks are distinct doubles; their count is
 * clamped all the same.
 */
static axis
axis_make(double lo, double hi, double flat, bool centre, double pad, int n, int least) {
    if (!isfinite(lo) || !isfinite(hi) || lo > hi) {
        lo = 0;
        hi = 1;
    }
    double mag = fmax(fabs(lo), fabs(hi)), tiny = fmax(mag * 1e-12, 1e-250);
    if (hi / 2 - lo / 2 < tiny) {
        double w = fmax(flat, fmax(mag * 0.05, 2 * tiny));
        if (centre) {
            double c = lo / 2 + hi / 2;
            lo = c - w;
            hi = c + w;
        } else if (lo + w <= DBL_MAX) {
            hi = lo + w;
        } else {
            hi = DBL_MAX;
            lo = hi - w;
        }
    }
    double p = (hi / 2 - lo / 2) * 2 * pad;
    axis a;
    a.lo = fmax(lo - p, -DBL_MAX);
    a.hi = fmin(hi + p, DBL_MAX);
    a.half = a.hi / 2 - a.lo / 2;
    a.step = tick_step(a.half, n);
    a.k0 = ceil(a.lo / a.step - 1e-9);
    double count = floor(a.hi / a.step + 1e-9) - a.k0 + 1;
    a.n_ticks = !(count >= 1) ? 0 : count > MAX_TICKS ? MAX_TICKS : (int)count;
    a.digits = tick_digits(fmax(fabs(a.lo), fabs(a.hi)), a.step, least);
    return a;
}

/* Where v falls on the axis, 0 at lo and 1 at hi; clamped to a few plot sizes, so that a
 * point off the axis (a log plot's zero) still prints as a short number. */
static double axis_pos(const axis *a, double v) {
    double t = (v / 2 - a->lo / 2) / a->half;
    if (isnan(t)) return 0;
    return t > 10 ? 10 : t < -10 ? -10 : t;
}

/* The i-th tick's value; 0 written as 0, never as -0 or the rounding residue of k * step. */
static double axis_tick(const axis *a, int i) {
    double v = (a->k0 + i) * a->step;
    return fabs(v) < a->step * 1e-9 ? 0 : v;
}

enum { W = 640, H = 310, ML = 64, MR = 160, MT = 28, MB = 50 };

/* A chart being drawn: where to, what against what, its axes and its plot area. */
typedef struct canvas {
    FILE *f;
    const report *r;
    bool log_y, by_epoch;
    axis ax, ay;
    double pw, ph; /* the plot area's width and height */
} canvas;

/* A point's x: its step, or its place in the epochs. */
static double x_of(const canvas *c, point p) {
    return c->by_epoch ? epoch_of(c->r, p.step) : p.step;
}

/* Points not drawn: non-finite ones, and those at or below 0 on a log scale. */
static bool skipped(const canvas *c, point p) {
    return (c->log_y && !(p.value > 0)) || !isfinite(p.value) || !isfinite(x_of(c, p));
}

/* The value on the y axis: log10 of it on a log scale. */
static double y_of(const canvas *c, double value) {
    return c->log_y ? log10(value) : value;
}

/* Plot coordinates of an axis value. */
static double sx(const canvas *c, double x) {
    return ML + axis_pos(&c->ax, x) * c->pw;
}

static double sy(const canvas *c, double y) {
    return MT + (1 - axis_pos(&c->ay, y)) * c->ph;
}

/* The axes around the drawn points of the series; false when no point is drawn. */
static bool make_axes(canvas *c, series *const *s, int n) {
    double x0 = (double)INFINITY, x1 = -(double)INFINITY, y0 = (double)INFINITY,
           y1 = -(double)INFINITY;
    for (int k = 0; k < n; k++)
        for (int64_t i = 0; i < s[k]->n; i++) {
            if (skipped(c, s[k]->pts[i])) continue;
            double y = s[k]->pts[i].value, x = x_of(c, s[k]->pts[i]);
            x0 = fmin(x0, x);
            x1 = fmax(x1, x);
            y0 = fmin(y0, y_of(c, y));
            y1 = fmax(y1, y_of(c, y));
        }
    if (!isfinite(x0)) return false;
    c->ax = axis_make(x0, x1, 1, false, 0, 6, 6);
    c->ay = axis_make(y0, y1, 0.5, true, 0.05, 5, 4);
    if (c->log_y) c->ay.digits = 4;
    c->pw = W - ML - MR;
    c->ph = H - MT - MB;
    return true;
}

/* The svg element's start, its title and the chart's heading. */
static void draw_head(const canvas *c, const char *title, bool standalone) {
    FILE *f = c->f;
    (void)fprintf(f,
                  "<svg %sviewBox=\"0 0 %d %d\" width=\"%d\" height=\"%d\" role=\"img\" "
                  "font-family=\"sans-serif\" font-size=\"11\">\n",
                  standalone ? "xmlns=\"http://www.w3.org/2000/svg\" " : "", W, H, W, H);
    (void)fprintf(f, "<title>");
    esc(f, title);
    (void)fprintf(f, "</title>\n<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n", W, H);
    (void)fprintf(f, "<text x=\"%d\" y=\"18\" font-size=\"14\" font-weight=\"bold\">", ML);
    esc(f, title);
    (void)fprintf(f, "%s</text>\n", c->log_y ? " (log scale)" : "");
}

/* Grid and ticks: multiples of the spacing counted, not summed, so none drifts off the end (an
 * epoch axis 1, 1.2, ... reaches 3); then the plot's frame and the x axis's name. */
static void draw_axes(const canvas *c) {
    FILE *f = c->f;
    for (int i = 0; i < c->ay.n_ticks; i++) {
        double y = axis_tick(&c->ay, i), v = c->log_y ? pow(10, y) : y;
        if (!isfinite(v) || (c->log_y && !(v > 0))) continue; /* 10^309, 10^-330: no label */
        (void)fprintf(
            f,
            "<line class=\"ytick\" x1=\"%d\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" "
            "stroke=\"#ddd\"/><text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%.*g</text>\n",
            ML, ML + c->pw, sy(c, y), sy(c, y), ML - 4, sy(c, y) + 4, c->ay.digits, v);
    }
    for (int i = 0; i < c->ax.n_ticks; i++) {
        double x = axis_tick(&c->ax, i);
        (void)fprintf(f,
                      "<line class=\"xtick\" x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%.1f\" "
                      "stroke=\"#eee\"/><text x=\"%.1f\" y=\"%.1f\" "
                      "text-anchor=\"middle\">%.*g</text>\n",
                      sx(c, x), sx(c, x), MT, MT + c->ph, sx(c, x), MT + c->ph + 14, c->ax.digits,
                      x);
    }
    (void)fprintf(f,
                  "<rect x=\"%d\" y=\"%d\" width=\"%.0f\" height=\"%.0f\" fill=\"none\" "
                  "stroke=\"#888\"/>\n<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%s</text>\n",
                  ML, MT, c->pw, c->ph, ML + c->pw / 2, H - 6,
                  c->by_epoch ? "epoch (training records at the share of their epoch done)"
                              : "step (e1, e2, ...: the ends of epochs)");
}

/* Against the step: the ends of epochs as light lines, thinned to at most MAX_EPOCH_LINES,
 * labelled with the epoch, thinned to at most 12 labels (the epoch axis has its own ticks). */
static void draw_epoch_ends(const canvas *c) {
    const report *r = c->r;
    int64_t every = r->n_epochs > 12 ? (r->n_epochs + 11) / 12 : 1;
    int64_t every_line =
        r->n_epochs > MAX_EPOCH_LINES ? (r->n_epochs + MAX_EPOCH_LINES - 1) / MAX_EPOCH_LINES : 1;
    for (int64_t k = 0; k < r->n_epochs && !c->by_epoch; k++) {
        double x = r->epoch_at[k];
        bool label = (k + 1) % every == 0;
        if (x < c->ax.lo || x > c->ax.hi || (!label && (k + 1) % every_line != 0)) continue;
        (void)fprintf(c->f,
                      "<line class=\"epoch\" x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%.1f\" "
                      "stroke=\"#cce\" stroke-dasharray=\"1 2\"/>",
                      sx(c, x), sx(c, x), MT, MT + c->ph);
        if (label)
            (void)fprintf(c->f,
                          "<text x=\"%.1f\" y=\"%.1f\" font-size=\"9\" fill=\"#669\" "
                          "text-anchor=\"middle\">e%lld</text>",
                          sx(c, x), MT + c->ph + 26, (long long)(k + 1));
        (void)fputc('\n', c->f);
    }
}

/* The best checkpoint's step, dashed, when it is on the axis. */
static void draw_best(const canvas *c) {
    int64_t best_step = c->r->best_step;
    double bs = c->by_epoch ? epoch_of(c->r, (double)best_step) : (double)best_step;
    if (best_step >= 0 && bs >= c->ax.lo && bs <= c->ax.hi)
        (void)fprintf(c->f,
                      "<line class=\"best\" x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%.1f\" "
                      "stroke=\"#555\" stroke-dasharray=\"4 3\"/><text x=\"%.1f\" y=\"%d\" "
                      "font-size=\"10\">best</text>\n",
                      sx(c, bs), sx(c, bs), MT, MT + c->ph, sx(c, bs) + 3, MT + 10);
}

/* Series k's line (a dot for a single point) and its legend entry; returns the points drawn. */
static int64_t draw_series(const canvas *c, const series *s, int k) {
    FILE *f = c->f;
    const char *color = k_colors[k % 8];
    (void)fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" points=\"", color);
    int64_t drawn = 0;
    for (int64_t i = 0; i < s->n; i++) {
        if (skipped(c, s->pts[i])) continue;
        double y = s->pts[i].value, x = x_of(c, s->pts[i]);
        (void)fprintf(f, "%s%.1f,%.1f", drawn ? " " : "", sx(c, x), sy(c, y_of(c, y)));
        drawn++;
    }
    (void)fprintf(f, "\"/>\n");
    if (s->n == 1 && !skipped(c, s->pts[0])) /* one point: a dot, or it would not show */
        (void)fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"2.5\" fill=\"%s\"/>\n",
                      sx(c, x_of(c, s->pts[0])), sy(c, y_of(c, s->pts[0].value)), color);
    double ly = MT + 12 + 16 * k;
    (void)fprintf(f,
                  "<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
                  "stroke-width=\"2\"/><text x=\"%d\" y=\"%.1f\">",
                  W - MR + 10, W - MR + 28, ly, ly, color, W - MR + 32, ly + 4);
    esc(f, s->name);
    (void)fprintf(f, "</text>\n");
    return drawn;
}

/* One line chart of the given series against the step, or the epoch; returns the points
 * drawn. */
static int64_t chart(FILE *f,
                     const report *r,
                     const char *title,
                     series *const *s,
                     int n,
                     bool log_y,
                     bool by_epoch,
                     bool standalone) {
    canvas c;
    memset(&c, 0, sizeof c);
    c.f = f;
    c.r = r;
    c.log_y = log_y;
    c.by_epoch = by_epoch;
    if (!make_axes(&c, s, n)) return 0;
    draw_head(&c, title, standalone);
    draw_axes(&c);
    draw_epoch_ends(&c);
    draw_best(&c);
    int64_t drawn = 0;
    for (int k = 0; k < n; k++)
        drawn += draw_series(&c, s[k], k);
    (void)fprintf(f, "</svg>\n");
    return drawn;
}

/* Class k's label: its name (names[k], escaped), else its index. */
static void class_label(FILE *f, const char *const *names, int64_t k) {
    if (names)
        esc(f, names[k]);
    else
        (void)fprintf(f, "%lld", (long long)k);
}

/* A confusion matrix as a heat map (rows normalised), with per-class precision and recall.
 * Counts are written with %.15g: an integer as itself, 1e308 in a few characters. names: the
 * n classes' names, written along both axes (the margin widened to the longest, about 6 px a
 * character at font-size 10, up to 40 characters' worth), or NULL for indices down the side. */
static void
heatmap(FILE *f, const char *title, const double *m, int64_t n, const char *const *names) {
    int cell = n <= 10 ? 32 : n <= 20 ? 20 : 10;
    int size = (int)n * cell, off = 60;
    for (int64_t k = 0; names && k < n; k++) {
        size_t len = strlen(names[k]);
        int want = 24 + 6 * (int)(len < 40 ? len : 40);
        off = want > off ? want : off;
    }
    (void)fprintf(f,
                  "<figure><svg viewBox=\"0 0 %d %d\" width=\"%d\" height=\"%d\" "
                  "font-family=\"sans-serif\" font-size=\"10\"><title>",
                  size + off + 10, size + off + 10, size + off + 10, size + off + 10);
    esc(f, title);
    (void)fprintf(f, "</title>\n");
    for (int64_t t = 0; t < n; t++) {
        double row = 0;
        for (int64_t p = 0; p < n; p++)
            row += m[t * MAX_CLASSES + p];
        for (int64_t p = 0; p < n; p++) {
            double c = m[t * MAX_CLASSES + p], frac = row > 0 && c > 0 ? c / row : 0;
            int shade = 255 - (int)(frac >= 0 && frac <= 1 ? frac * 200 : 0); /* NaN: inf/inf */
            (void)fprintf(f,
                          "<rect x=\"%lld\" y=\"%lld\" width=\"%d\" height=\"%d\" "
                          "fill=\"rgb(%d,%d,255)\" stroke=\"#fff\"/>",
                          (long long)(off + p * cell), (long long)(off + t * cell), cell, cell,
                          shade, shade);
            if (cell >= 20)
                (void)fprintf(f, "<text x=\"%lld\" y=\"%lld\" text-anchor=\"middle\">%.15g</text>",
                              (long long)(off + p * cell + cell / 2),
                              (long long)(off + t * cell + cell / 2 + 4), c);
        }
        (void)fprintf(f, "<text x=\"%d\" y=\"%lld\" text-anchor=\"end\">", off - 4,
                      (long long)(off + t * cell + cell / 2 + 4));
        class_label(f, names, t);
        (void)fprintf(f, "</text>\n");
    }
    for (int64_t p = 0; names && p < n; p++) { /* read upwards from above their column */
        (void)fprintf(f, "<text transform=\"translate(%lld,%d) rotate(-90)\">",
                      (long long)(off + p * cell + cell / 2 + 4), off - 4);
        class_label(f, names, p);
        (void)fprintf(f, "</text>\n");
    }
    (void)fprintf(f,
                  "<text x=\"%d\" y=\"14\">predicted &#8594;</text><text x=\"4\" y=\"%d\">true "
                  "&#8595;</text></svg>\n<figcaption>",
                  off, off - 6);
    esc(f, title);
    (void)fprintf(f, "</figcaption></figure>\n<table><tr><th>class</th><th>precision</th>"
                     "<th>recall</th><th>support</th></tr>\n");
    for (int64_t c = 0; c < n; c++) {
        double tp = m[c * MAX_CLASSES + c], col = 0, row = 0;
        for (int64_t k = 0; k < n; k++) {
            col += m[k * MAX_CLASSES + c];
            row += m[c * MAX_CLASSES + k];
        }
        /* a share of counts is in [0, 1]; one of made-up counts (negative, 1e308) is written
           nan, not in the 300 digits %.4f would give 1e300 */
        double pr = col > 0 ? tp / col : 0, rc = row > 0 ? tp / row : 0;
        (void)fprintf(f, "<tr><td>");
        class_label(f, names, c);
        (void)fprintf(f, "</td><td>%.4f</td><td>%.4f</td><td>%.15g</td></tr>\n",
                      fabs(pr) <= 1 ? pr : (double)NAN, fabs(rc) <= 1 ? rc : (double)NAN, row);
    }
    (void)fprintf(f, "</table>\n");
}

/* The metric part of a name: "acc" for "valid/acc", the name itself without a split. */
static const char *metric_of(const char *name) {
    const char *slash = strchr(name, '/');
    return slash ? slash + 1 : name;
}

static void slug(const char *title, char *out, size_t size) {
    size_t k = 0;
    for (const char *p = title; *p && k + 1 < size; p++)
        out[k++] = (char)((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') ? *p : '_');
    out[k] = '\0';
}

/* Draws one plot into the page and, with svg_dir, into its own file. */
static ct_status plot(report *r,
                      FILE *html,
                      const ct_report_params *p,
                      const char *title,
                      series *const *s,
                      int n,
                      bool log_y,
                      bool by_epoch) {
    if (stopped(r)) return CT_STOP;
    (void)fprintf(html, "<figure>\n");
    (void)chart(html, r, title, s, n, log_y, by_epoch, false);
    (void)fprintf(html, "</figure>\n");
    if (!p->svg_dir) return CT_OK;
    char name[128], path[1200];
    slug(title, name, sizeof name);
    (void)snprintf(path, sizeof path, "%s/%s.svg", p->svg_dir, name);
    FILE *f = fopen(path, "w");
    if (!f) return CT_FAIL(r->ctx, CT_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
    (void)fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    (void)chart(f, r, title, s, n, log_y, by_epoch, true);
    if (fclose(f) != 0) return CT_FAIL(r->ctx, CT_ERR_IO, "%s: write failed", path);
    return CT_OK;
}

/* The step the run's `best` pointer names; -1 when there is none, or it is damaged (a report
 * marks nothing then). */
static int64_t read_best(ct_ctx *ctx, const char *run_dir) {
    int64_t step = -1;
    if (ct_checkpoint_pointer(ctx, run_dir, "best", &step) != CT_OK) ct_clear_error(ctx);
    return step;
}

static void copy_file(FILE *out, const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) {
        (void)fputs("(no config.yaml)", out);
        return;
    }
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf - 1, f)) > 0) {
        buf[n] = '\0';
        esc(out, buf);
    }
    (void)fclose(f);
}

/* One row per setting of the resolved configuration: its dotted path and its value (a list
 * of values on one row). */
static void config_rows(FILE *f, const ct_cfg_node *n) {
    for (const ct_cfg_node *c = n->first; c; c = c->next) {
        bool flat = c->kind == CT_CFG_SCALAR || c->n_children == 0;
        if (c->kind == CT_CFG_SEQ && !flat) {
            flat = true;
            for (const ct_cfg_node *k = c->first; k; k = k->next)
                flat = flat && k->kind == CT_CFG_SCALAR;
        }
        if (!flat) {
            config_rows(f, c);
            continue;
        }
        char path[512];
        ct_config_path(c, path, sizeof path);
        (void)fprintf(f, "<tr><td style=\"text-align:left\">");
        esc(f, path);
        (void)fprintf(f, "</td><td style=\"text-align:left\">");
        if (c->kind == CT_CFG_SCALAR) {
            esc(f, c->null ? "null" : c->value);
        } else if (c->kind == CT_CFG_MAP) {
            (void)fputs("{}", f);
        } else {
            (void)fputc('[', f);
            for (const ct_cfg_node *k = c->first; k; k = k->next) {
                if (k != c->first) (void)fputs(", ", f);
                esc(f, k->value);
            }
            (void)fputc(']', f);
        }
        (void)fprintf(f, "</td></tr>\n");
    }
}

static void config_table(report *r, FILE *f, const char *path) {
    ct_config *cfg = NULL;
    if (ct_config_load_file(r->ctx, path, &cfg) != CT_OK) {
        ct_clear_error(r->ctx);
        (void)fputs("<pre>", f);
        copy_file(f, path);
        (void)fputs("</pre>\n", f);
        return;
    }
    (void)fputs("<table><tr><th>key</th><th>value</th></tr>\n", f);
    config_rows(f, ct_config_root(cfg));
    (void)fputs("</table>\n", f);
    ct_config_destroy(cfg);
}

/* The page's head, its title and the best checkpoint's step. */
static void write_head(const report *r, const char *run_dir, FILE *f) {
    (void)fprintf(f, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                     "<title>ctrain report: ");
    esc(f, run_dir);
    (void)fprintf(f, "</title>\n<style>body{font-family:sans-serif;margin:2em;max-width:1100px}"
                     "figure{display:inline-block;margin:0.5em}table{border-collapse:collapse;"
                     "margin:0.5em 0}td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}"
                     "pre{background:#f6f6f6;padding:1em;overflow:auto}</style></head><body>\n"
                     "<h1>");
    esc(f, run_dir);
    (void)fprintf(f, "</h1>\n");
    if (r->best_step >= 0)
        (void)fprintf(f, "<p>Best checkpoint: step %lld (dashed line).</p>\n",
                      (long long)r->best_step);
}

/* Each series' last value, its step, its minimum and maximum. */
static void write_final_values(const report *r, FILE *f) {
    (void)fprintf(f, "<h2>Final values</h2><table><tr><th>metric</th><th>last</th><th>at step"
                     "</th><th>min</th><th>max</th></tr>\n");
    for (int64_t i = 0; i < r->n_series; i++) {
        const series *s = &r->s[i];
        double mn = (double)INFINITY, mx = -(double)INFINITY;
        for (int64_t k = 0; k < s->n; k++) {
            mn = fmin(mn, s->pts[k].value);
            mx = fmax(mx, s->pts[k].value);
        }
        (void)fprintf(f, "<tr><td style=\"text-align:left\">");
        esc(f, s->name);
        (void)fprintf(f, "</td><td>%.6g</td><td>%.0f</td><td>%.6g</td><td>%.6g</td></tr>\n",
                      s->pts[s->n - 1].value, s->pts[s->n - 1].step, mn, mx);
    }
    (void)fprintf(f, "</table>\n");
}

/* The series plotted alone, after the metrics, and their plots' titles. */
static const char *const k_singles[] = {"lr", "grad_norm", "samples_per_sec", NULL};
static const char *const k_single_titles[] = {"learning rate", "gradient norm",
                                              "throughput (samples/s)"};

static bool is_single(const char *name) {
    for (int k = 0; k_singles[k]; k++)
        if (strcmp(name, k_singles[k]) == 0) return true;
    return false;
}

/* One plot per metric name across splits, losses first (pass 0, on a log scale with log_y),
 * then the others; each again against the epoch once one has ended (before, nothing tells its
 * length). */
static ct_status plot_metrics(report *r, const ct_report_params *p, FILE *f) {
    bool done[MAX_SERIES] = {false};
    for (int pass = 0; pass < 2; pass++)
        for (int64_t i = 0; i < r->n_series; i++) {
            if (done[i]) continue;
            const char *m = metric_of(r->s[i].name);
            if (is_single(r->s[i].name) || (pass == 0) != (strcmp(m, "loss") == 0)) continue;
            series *group[16];
            int n = 0;
            for (int64_t j = i; j < r->n_series && n < 16; j++)
                if (!done[j] && strchr(r->s[j].name, '/') &&
                    strcmp(metric_of(r->s[j].name), m) == 0) {
                    group[n++] = &r->s[j];
                    done[j] = true;
                }
            if (n == 0) continue;
            CT_TRY(plot(r, f, p, m, group, n, pass == 0 && p->log_y, false));
            char by_epoch[160];
            (void)snprintf(by_epoch, sizeof by_epoch, "%s by epoch", m);
            if (r->n_epochs > 0)
                CT_TRY(plot(r, f, p, by_epoch, group, n, pass == 0 && p->log_y, true));
        }
    return CT_OK;
}

/* The learning rate, the gradient norm and the throughput, one plot each. */
static ct_status plot_singles(report *r, const ct_report_params *p, FILE *f) {
    for (int k = 0; k_singles[k]; k++)
        for (int64_t i = 0; i < r->n_series; i++)
            if (strcmp(r->s[i].name, k_singles[k]) == 0) {
                series *one = &r->s[i];
                CT_TRY(plot(r, f, p, k_single_titles[k], &one, 1, false, false));
            }
    return CT_OK;
}

/* The class names of the run's config.yaml (data.classes) into *out; none (n 0) when it has
 * none or they cannot be read: the matrices are then labelled with indices. */
static void read_class_names(report *r, const char *run_dir, ct_config_classes *out) {
    memset(out, 0, sizeof *out);
    char path[1100];
    (void)snprintf(path, sizeof path, "%s/config.yaml", run_dir);
    if (access(path, R_OK) != 0) return;
    ct_config *cfg = NULL;
    const ct_cfg_node *n = NULL;
    if (ct_config_load_file(r->ctx, path, &cfg) == CT_OK)
        n = ct_config_find(ct_config_root(cfg), "data.classes");
    if (n && ct_config_classes_read(r->ctx, n, "data.classes", out) == CT_OK && !out->text) {
        /* a list's names point into the tree, which goes: copied into text of their own */
        size_t bytes = 0;
        for (int64_t k = 0; k < out->n; k++)
            bytes += strlen(out->names[k]) + 1;
        char *text = ct_alloc(r->ctx, bytes);
        if (text) {
            out->text = text;
            out->text_size = bytes;
            for (int64_t k = 0; k < out->n; k++) {
                size_t len = strlen(out->names[k]) + 1;
                memcpy(text, out->names[k], len);
                out->names[k] = text;
                text += len;
            }
        } else {
            ct_config_classes_fini(r->ctx, out);
        }
    }
    ct_clear_error(r->ctx);
    ct_config_destroy(cfg);
}

/* Each split's confusion matrices: at the last evaluation and at the best checkpoint. */
static ct_status write_confusions(report *r, FILE *f, const ct_config_classes *names) {
    for (int64_t i = 0; i < r->n_cm; i++) {
        confusion *c = &r->cm[i];
        if (c->n_classes == 0) continue;
        const char *const *nm = names->n == c->n_classes ? names->names : NULL;
        if (stopped(r)) return CT_STOP;
        char title[160];
        (void)fprintf(f, "<h2>Confusion: ");
        esc(f, c->split);
        (void)fprintf(f, "</h2>\n");
        (void)snprintf(title, sizeof title, "%s, last evaluation (step %lld)", c->split,
                       (long long)c->last_step);
        heatmap(f, title, c->last, c->n_classes, nm);
        if (c->has_best) {
            (void)snprintf(title, sizeof title, "%s, best checkpoint (step %lld)", c->split,
                           (long long)r->best_step);
            heatmap(f, title, c->best, c->n_classes, nm);
        }
    }
    return CT_OK;
}

static ct_status write_page(report *r, const char *run_dir, const ct_report_params *p, FILE *f) {
    write_head(r, run_dir, f);
    write_final_values(r, f);
    (void)fprintf(f, "<h2>Curves</h2>\n");
    CT_TRY(plot_metrics(r, p, f));
    CT_TRY(plot_singles(r, p, f));
    ct_config_classes names;
    read_class_names(r, run_dir, &names);
    ct_status s = write_confusions(r, f, &names);
    ct_config_classes_fini(r->ctx, &names);
    CT_TRY(s);
    (void)fprintf(f, "<h2>Configuration</h2>\n");
    char path[1100];
    (void)snprintf(path, sizeof path, "%s/config.yaml", run_dir);
    config_table(r, f, path);
    (void)fprintf(f,
                  "<p>Written by ctrain from metrics.jsonl (%lld values).</p>\n"
                  "</body></html>\n",
                  (long long)r->points);
    return CT_OK;
}

ct_report_params ct_report_default_params(void) {
    ct_report_params p = {NULL, NULL, false, -1, NULL, NULL};
    return p;
}

ct_status
ct_report_write(ct_ctx *ctx, const char *run_dir, const ct_report_params *pp, int64_t *n_points) {
    ct_report_params p = pp ? *pp : ct_report_default_params();
    if (strlen(run_dir) > 1000 || (p.html && strlen(p.html) > 1000) ||
        (p.svg_dir && strlen(p.svg_dir) > 1000))
        return CT_FAIL(ctx, CT_ERR_INVALID_ARG, "report: a path longer than 1000 bytes");
    report r;
    memset(&r, 0, sizeof r);
    r.ctx = ctx;
    r.p = &p;
    r.best_step = p.best_step >= 0 ? p.best_step : read_best(ctx, run_dir);
    r.s = ct_alloc(ctx, MAX_SERIES * sizeof *r.s);
    r.cm = ct_alloc(ctx, 4 * sizeof *r.cm);
    ct_status s = r.s && r.cm ? CT_OK : CT_FAIL(ctx, CT_ERR_OOM, "report: out of memory");
    if (s == CT_OK) s = read_metrics(&r, run_dir);
    char html[1100], tmp[1200];
    if (p.html)
        (void)snprintf(html, sizeof html, "%s", p.html);
    else
        (void)snprintf(html, sizeof html, "%s/report.html", run_dir);
    /* a name of this process's own: a live report and `ctrain report` may write at once */
    (void)snprintf(tmp, sizeof tmp, "%s.%lld.tmp", html, (long long)getpid());
    if (s == CT_OK && p.svg_dir && mkdir(p.svg_dir, 0777) != 0 && errno != EEXIST)
        s = CT_FAIL(ctx, CT_ERR_IO, "%s: cannot create: %s", p.svg_dir, strerror(errno));
    FILE *f = NULL;
    if (s == CT_OK && !(f = fopen(tmp, "w")))
        s = CT_FAIL(ctx, CT_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
    if (s == CT_OK) s = write_page(&r, run_dir, &p, f);
    if (f) {
        if (fclose(f) != 0 && s == CT_OK)
            s = CT_FAIL(ctx, CT_ERR_IO, "%s: write failed: %s", tmp, strerror(errno));
        if (s == CT_OK && rename(tmp, html) != 0)
            s = CT_FAIL(ctx, CT_ERR_IO, "%s: cannot rename to %s: %s", tmp, html, strerror(errno));
        if (s != CT_OK) (void)remove(tmp);
    }
    if (s == CT_STOP)
        (void)CT_FAIL(ctx, CT_STOP, "%s: stopped before it was complete; not written", html);
    if (n_points) *n_points = r.points;
    for (int64_t i = 0; r.s && i < r.n_series; i++)
        ct_free(ctx, r.s[i].pts, (size_t)r.s[i].cap * sizeof(point));
    ct_free(ctx, r.s, MAX_SERIES * sizeof *r.s);
    ct_free(ctx, r.cm, 4 * sizeof *r.cm);
    return s;
}
