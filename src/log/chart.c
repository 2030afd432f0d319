/*
 * chart.c - the report's line charts drawn as SVG by hand: axes with round-number ticks, one
 * polyline per curve, a legend, the ends of epochs and the best step marked, and a curve of
 * one point (the test evaluation at the end of a run) as a marker labelled with its value.
 * Every loop counts integers up to a fixed bound, never steps a double, and every number
 * printed is an axis label or a position clamped to the plot: a chart is bounded by its points.
 * The colours are fixed per split (train, valid, test, then the run's other splits), so a split
 * reads the same in every plot; a comparison colours by run and dashes by split.
 */
#include "log/report_internal.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <string.h>

#define MAX_TICKS       50 /* per axis: far more than the ~6 asked for, a bound all the same */
#define MAX_EPOCH_LINES 60 /* per plot: the epoch ends drawn are thinned to these */

/* Ten distinct colours (Tableau's): the splits', train blue, valid orange, test green, then
 * the others', and a comparison's runs'. */
static const char *const k_palette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                        "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f"};
#define N_PALETTE (int)(sizeof k_palette / sizeof k_palette[0])
static const char *const k_no_split = "#444444"; /* lr, grad_norm, throughput */
static const char *const k_dashes[] = {NULL, "7 4", "2 3", "10 3 2 3", "4 2 1 2", "1 4"};
#define N_DASHES (int)(sizeof k_dashes / sizeof k_dashes[0])

bool ct_rep_split_of(const char *name, char *out, size_t size) {
    const char *slash = strchr(name, '/');
    size_t n = slash ? (size_t)(slash - name) : 0;
    if (n >= size) n = size - 1;
    memcpy(out, name, n);
    out[n] = '\0';
    return slash != NULL;
}

const char *ct_rep_metric_of(const char *name) {
    const char *slash = strchr(name, '/');
    return slash ? slash + 1 : name;
}

static bool is_fixed_split(const char *split) {
    return !strcmp(split, "train") || !strcmp(split, "valid") || !strcmp(split, "test");
}

int ct_rep_split_rank(const ct_rep_run *run, const char *name) {
    static const char *const fixed[] = {"train", "valid", "test"};
    char split[64];
    if (!ct_rep_split_of(name, split, sizeof split)) return -1;
    for (int k = 0; k < 3; k++)
        if (strcmp(split, fixed[k]) == 0) return k;
    int rank = 3;
    for (int64_t k = 0; run && k < run->n_splits; k++) {
        if (strcmp(run->splits[k], split) == 0) return rank;
        rank += !is_fixed_split(run->splits[k]);
    }
    return rank;
}

const char *ct_rep_color(const ct_rep_run *run, const char *name) {
    int rank = ct_rep_split_rank(run, name);
    return rank < 0 ? k_no_split : k_palette[rank % N_PALETTE];
}

const char *ct_rep_run_color(int64_t k) {
    return k_palette[k % N_PALETTE];
}

const char *ct_rep_split_dash(int rank) {
    return rank <= 0 ? NULL : k_dashes[rank % N_DASHES];
}

void ct_rep_esc(FILE *f, const char *s) {
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

/* 800 x 360: readable on a laptop; the page scales it down (viewBox) where it is narrower */
enum { W = 800, H = 360, ML = 70, MR = 190, MT = 30, MB = 50 };

/* A chart being drawn: where to, what, its axes and its plot area. */
typedef struct canvas {
    FILE *f;
    const ct_rep_chart *c;
    axis ax, ay;
    double pw, ph; /* the plot area's width and height */
} canvas;

/* A point's x: its step, or its place in its run's epochs. */
static double x_of(const canvas *c, const ct_rep_run *run, ct_rep_point p) {
    return c->c->by_epoch ? ct_rep_epoch_of(run, p.step) : p.step;
}

/* Points not drawn: non-finite ones, and those at or below 0 on a log scale. */
static bool skipped(const canvas *c, const ct_rep_run *run, ct_rep_point p) {
    return (c->c->log_y && !(p.value > 0)) || !isfinite(p.value) || !isfinite(x_of(c, run, p));
}

/* The value on the y axis: log10 of it on a log scale. */
static double y_of(const canvas *c, double value) {
    return c->c->log_y ? log10(value) : value;
}

/* Plot coordinates of an axis value. */
static double sx(const canvas *c, double x) {
    return ML + axis_pos(&c->ax, x) * c->pw;
}

static double sy(const canvas *c, double y) {
    return MT + (1 - axis_pos(&c->ay, y)) * c->ph;
}

/* The axes around the drawn points of the curves; false when no point is drawn. */
static bool make_axes(canvas *c) {
    double x0 = (double)INFINITY, x1 = -(double)INFINITY, y0 = (double)INFINITY,
           y1 = -(double)INFINITY;
    for (int k = 0; k < c->c->n; k++) {
        const ct_rep_curve *cu = &c->c->curves[k];
        for (int64_t i = 0; i < cu->s->n; i++) {
            if (skipped(c, cu->run, cu->s->pts[i])) continue;
            double y = cu->s->pts[i].value, x = x_of(c, cu->run, cu->s->pts[i]);
            x0 = fmin(x0, x);
            x1 = fmax(x1, x);
            y0 = fmin(y0, y_of(c, y));
            y1 = fmax(y1, y_of(c, y));
        }
    }
    if (!isfinite(x0)) return false;
    c->ax = axis_make(x0, x1, 1, false, 0, 6, 6);
    c->ay = axis_make(y0, y1, 0.5, true, 0.05, 5, 4);
    if (c->c->log_y) c->ay.digits = 4;
    c->pw = W - ML - MR;
    c->ph = H - MT - MB;
    return true;
}

/* The svg element's start, its title and the chart's heading. */
static void draw_head(const canvas *c, bool standalone) {
    FILE *f = c->f;
    (void)fprintf(f,
                  "<svg %sviewBox=\"0 0 %d %d\" width=\"%d\" height=\"%d\" role=\"img\" "
                  "font-family=\"sans-serif\" font-size=\"12\">\n",
                  standalone ? "xmlns=\"http://www.w3.org/2000/svg\" " : "", W, H, W, H);
    (void)fprintf(f, "<title>");
    ct_rep_esc(f, c->c->title);
    (void)fprintf(f, "</title>\n<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n", W, H);
    (void)fprintf(f, "<text x=\"%d\" y=\"20\" font-size=\"15\" font-weight=\"bold\">", ML);
    ct_rep_esc(f, c->c->title);
    (void)fprintf(f, "%s</text>\n", c->c->log_y ? " (log scale)" : "");
}

/* Grid and ticks: multiples of the spacing counted, not summed, so none drifts off the end (an
 * epoch axis 1, 1.2, ... reaches 3); then the plot's frame and the x axis's name. */
static void draw_axes(const canvas *c) {
    FILE *f = c->f;
    for (int i = 0; i < c->ay.n_ticks; i++) {
        double y = axis_tick(&c->ay, i), v = c->c->log_y ? pow(10, y) : y;
        if (!isfinite(v) || (c->c->log_y && !(v > 0))) continue; /* 10^309, 10^-330: no label */
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
                  c->c->by_epoch ? "epoch (training records at the share of their epoch done)"
                  : c->c->marks  ? "step (e1, e2, ...: the ends of epochs)"
                                 : "step");
}

/* Against the step: the ends of epochs as light lines, thinned to at most MAX_EPOCH_LINES,
 * labelled with the epoch, thinned to at most 12 labels (the epoch axis has its own ticks). */
static void draw_epoch_ends(const canvas *c) {
    const ct_rep_run *r = c->c->marks;
    int64_t every = r->n_epochs > 12 ? (r->n_epochs + 11) / 12 : 1;
    int64_t every_line =
        r->n_epochs > MAX_EPOCH_LINES ? (r->n_epochs + MAX_EPOCH_LINES - 1) / MAX_EPOCH_LINES : 1;
    for (int64_t k = 0; k < r->n_epochs && !c->c->by_epoch; k++) {
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
    const ct_rep_run *r = c->c->marks;
    int64_t best_step = r->best_step;
    double bs = c->c->by_epoch ? ct_rep_epoch_of(r, (double)best_step) : (double)best_step;
    if (best_step >= 0 && bs >= c->ax.lo && bs <= c->ax.hi)
        (void)fprintf(c->f,
                      "<line class=\"best\" x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%.1f\" "
                      "stroke=\"#555\" stroke-dasharray=\"4 3\"/><text x=\"%.1f\" y=\"%d\" "
                      "font-size=\"10\">best</text>\n",
                      sx(c, bs), sx(c, bs), MT, MT + c->ph, sx(c, bs) + 3, MT + 10);
}

/* Writes label, one longer than 24 bytes as its first 10 and its last 12 around an ellipsis
 * (cut between UTF-8 characters), which fits the legend's width: a run's directory can be
 * long, and the page's tables give it whole. */
static void short_label(FILE *f, const char *label) {
    size_t n = strlen(label);
    if (n <= 24) {
        ct_rep_esc(f, label);
        return;
    }
    size_t head = 10, tail = n - 12;
    while (head > 0 && (label[head] & 0xC0) == 0x80)
        head--;
    while (tail < n && (label[tail] & 0xC0) == 0x80)
        tail++;
    char buf[16];
    memcpy(buf, label, head);
    buf[head] = '\0';
    ct_rep_esc(f, buf);
    (void)fputs("&#8230;", f);
    ct_rep_esc(f, label + tail);
}

/* A legend entry at row k: a short line of the colour and dash, and the label (shortened: a
 * key's; a curve's is what report_curves.py reads the curve's name from, the first <text>
 * after its polyline, and is written whole). */
static void draw_key(
    const canvas *c, int k, const char *label, const char *color, const char *dash, bool shorten) {
    double ly = MT + 12 + 17 * k;
    (void)fprintf(c->f,
                  "<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
                  "stroke-width=\"2.5\"%s%s%s/><text class=\"legend\" x=\"%d\" y=\"%.1f\">",
                  W - MR + 10, W - MR + 34, ly, ly, color, dash ? " stroke-dasharray=\"" : "",
                  dash ? dash : "", dash ? "\"" : "", W - MR + 38, ly + 4);
    if (shorten)
        short_label(c->f, label);
    else
        ct_rep_esc(c->f, label);
    (void)fprintf(c->f, "</text>\n");
}

/* A curve of one point (a test evaluated once, at the end): a marker large enough to be seen,
 * labelled with its value, on the side of it with room. */
static void draw_single(const canvas *c, const ct_rep_curve *cu, ct_rep_point p) {
    double x = sx(c, x_of(c, cu->run, p)), y = sy(c, y_of(c, p.value));
    bool left = x > ML + 0.75 * c->pw, below = y < MT + 24; /* clear of the frame's top */
    (void)fprintf(c->f,
                  "<circle class=\"single\" cx=\"%.1f\" cy=\"%.1f\" r=\"4.5\" fill=\"%s\" "
                  "stroke=\"white\"/><text class=\"value\" x=\"%.1f\" y=\"%.1f\" "
                  "text-anchor=\"%s\" fill=\"%s\" font-weight=\"bold\">%.4g</text>\n",
                  x, y, cu->color, left ? x - 7 : x + 7, below ? y + 17 : y - 7,
                  left ? "end" : "start", cu->color, p.value);
}

/* Curve k's line, its legend entry (row k) and, for one point, its marker; returns the points
 * drawn. */
static int64_t draw_curve(const canvas *c, const ct_rep_curve *cu, int k) {
    FILE *f = c->f;
    (void)fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.8\"", cu->color);
    if (cu->dash) (void)fprintf(f, " stroke-dasharray=\"%s\"", cu->dash);
    (void)fprintf(f, " points=\"");
    int64_t drawn = 0, last = -1;
    for (int64_t i = 0; i < cu->s->n; i++) {
        if (skipped(c, cu->run, cu->s->pts[i])) continue;
        double y = cu->s->pts[i].value, x = x_of(c, cu->run, cu->s->pts[i]);
        (void)fprintf(f, "%s%.1f,%.1f", drawn ? " " : "", sx(c, x), sy(c, y_of(c, y)));
        drawn++;
        last = i;
    }
    (void)fprintf(f, "\"/>\n");
    if (cu->label) draw_key(c, k, cu->label, cu->color, cu->dash, false);
    if (drawn == 1) draw_single(c, cu, cu->s->pts[last]);
    return drawn;
}

int64_t ct_rep_chart_draw(FILE *f, const ct_rep_chart *chart, bool standalone) {
    canvas c;
    memset(&c, 0, sizeof c);
    c.f = f;
    c.c = chart;
    if (!make_axes(&c)) return 0;
    draw_head(&c, standalone);
    draw_axes(&c);
    if (chart->marks) {
        draw_epoch_ends(&c);
        draw_best(&c);
    }
    int64_t drawn = 0;
    int row = 0;
    for (int k = 0; k < chart->n; k++) {
        drawn += draw_curve(&c, &chart->curves[k], row);
        row += chart->curves[k].label != NULL;
    }
    for (int k = 0; k < chart->n_keys; k++)
        draw_key(&c, row++, chart->keys[k].label, chart->keys[k].color, chart->keys[k].dash, true);
    (void)fprintf(f, "</svg>\n");
    return drawn;
}

static void slug(const char *title, char *out, size_t size) {
    size_t k = 0;
    for (const char *p = title; *p && k + 1 < size; p++)
        out[k++] = (char)((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') ? *p : '_');
    out[k] = '\0';
}

bool ct_rep_stopped(const ct_report_params *p) {
    return p->cancelled && p->cancelled(p->user);
}

ct_status ct_rep_plot(ct_ctx *ctx, FILE *html, const ct_report_params *p, const ct_rep_chart *c) {
    if (ct_rep_stopped(p)) return CT_STOP;
    (void)fprintf(html, "<figure class=\"chart\">\n");
    (void)ct_rep_chart_draw(html, c, false);
    (void)fprintf(html, "</figure>\n");
    if (!p->svg_dir) return CT_OK;
    char name[128], path[1200];
    slug(c->title, name, sizeof name);
    (void)snprintf(path, sizeof path, "%s/%s.svg", p->svg_dir, name);
    FILE *f = fopen(path, "w");
    if (!f) return CT_FAIL(ctx, CT_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
    (void)fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    (void)ct_rep_chart_draw(f, c, true);
    if (fclose(f) != 0) return CT_FAIL(ctx, CT_ERR_IO, "%s: write failed", path);
    return CT_OK;
}

void ct_rep_page_head(FILE *f, const char *title) {
    (void)fprintf(f, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                     "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
                     "<title>");
    ct_rep_esc(f, title);
    /* a chart is 800 px wide where there is room (two side by side from 1700 px), and shrinks
       with the window (viewBox) where there is not */
    (void)fprintf(f, "</title>\n<style>body{font-family:sans-serif;margin:2em;max-width:1720px}"
                     "figure{display:inline-block;margin:0.5em;vertical-align:top}"
                     "figure.chart{width:800px;max-width:100%%}"
                     "figure.chart svg{width:100%%;height:auto}"
                     "table{border-collapse:collapse;margin:0.5em 0}"
                     "td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}"
                     "th.split{border-bottom:4px solid}"
                     "pre{background:#f6f6f6;padding:1em;overflow:auto}</style></head><body>\n");
}
