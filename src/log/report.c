/*
 * report.c - the run report: one HTML page around the charts of a run's metrics.jsonl
 * (chart.c, read by run_records.c), with a summary of each split's last values, the confusion
 * matrices as heat maps and the configuration as a table. No script: the page reads the same
 * in any browser or offline. Each split has one colour in every plot (ct_rep_color).
 * The confusion matrices label their classes with the names the run's config.yaml gives
 * (data.classes) when there are as many as the matrix has classes; else with their indices.
 * Whatever metrics.jsonl holds, the page is bounded by the input's size (chart.c).
 *
 * Ownership: the run's records are freed before ct_report_write returns.
 */
#include "ctrain/report.h"

#include "config/config_internal.h"
#include "ctrain/checkpoint.h"
#include "ctrain/config.h"
#include "log/report_internal.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Class k's label: its name (names[k], escaped), else its index. */
static void class_label(FILE *f, const char *const *names, int64_t k) {
    if (names)
        ct_rep_esc(f, names[k]);
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
    ct_rep_esc(f, title);
    (void)fprintf(f, "</title>\n");
    for (int64_t t = 0; t < n; t++) {
        double row = 0;
        for (int64_t p = 0; p < n; p++)
            row += m[t * CT_REP_MAX_CLASSES + p];
        for (int64_t p = 0; p < n; p++) {
            double c = m[t * CT_REP_MAX_CLASSES + p], frac = row > 0 && c > 0 ? c / row : 0;
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
    ct_rep_esc(f, title);
    (void)fprintf(f, "</figcaption></figure>\n<table><tr><th>class</th><th>precision</th>"
                     "<th>recall</th><th>support</th></tr>\n");
    for (int64_t c = 0; c < n; c++) {
        double tp = m[c * CT_REP_MAX_CLASSES + c], col = 0, row = 0;
        for (int64_t k = 0; k < n; k++) {
            col += m[k * CT_REP_MAX_CLASSES + c];
            row += m[c * CT_REP_MAX_CLASSES + k];
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
        ct_rep_esc(out, buf);
    }
    (void)fclose(f);
}

/* The class names of the run's config.yaml (data.classes) into *out; none (n 0) when it has
 * none or they cannot be read: the matrices are then labelled with indices. */
static void read_class_names(ct_ctx *ctx, const char *run_dir, ct_config_classes *out) {
    memset(out, 0, sizeof *out);
    char path[1100];
    (void)snprintf(path, sizeof path, "%s/config.yaml", run_dir);
    if (access(path, R_OK) != 0) return;
    ct_config *cfg = NULL;
    const ct_cfg_node *n = NULL;
    if (ct_config_load_file(ctx, path, &cfg) == CT_OK)
        n = ct_config_find(ct_config_root(cfg), "data.classes");
    if (n && ct_config_classes_read(ctx, n, "data.classes", out) == CT_OK && !out->text) {
        /* a list's names point into the tree, which goes: copied into text of their own */
        size_t bytes = 0;
        for (int64_t k = 0; k < out->n; k++)
            bytes += strlen(out->names[k]) + 1;
        char *text = ct_alloc(ctx, bytes);
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
            ct_config_classes_fini(ctx, out);
        }
    }
    ct_clear_error(ctx);
    ct_config_destroy(cfg);
}

/* The configuration as a table, one row per dotted key; the file itself when it does not
 * parse (or "(no config.yaml)"). */
static void config_table(ct_ctx *ctx, FILE *f, const char *path) {
    ct_config *cfg = NULL;
    ct_rep_flat flat;
    memset(&flat, 0, sizeof flat);
    if (ct_config_load_file(ctx, path, &cfg) != CT_OK ||
        ct_rep_flatten(ctx, ct_config_root(cfg), &flat) != CT_OK) {
        ct_clear_error(ctx);
        (void)fputs("<pre>", f);
        copy_file(f, path);
        (void)fputs("</pre>\n", f);
    } else {
        (void)fputs("<table><tr><th>key</th><th>value</th></tr>\n", f);
        for (int64_t i = 0; i < flat.n; i++) {
            (void)fprintf(f, "<tr><td style=\"text-align:left\">");
            ct_rep_esc(f, flat.key[i]);
            (void)fprintf(f, "</td><td style=\"text-align:left\">");
            ct_rep_esc(f, flat.value[i]);
            (void)fprintf(f, "</td></tr>\n");
        }
        (void)fputs("</table>\n", f);
    }
    ct_rep_flat_fini(ctx, &flat);
    ct_config_destroy(cfg);
}

/* The page's head, its title and the best checkpoint's step. */
static void write_head(const ct_rep_run *r, const char *run_dir, FILE *f) {
    char title[1200];
    (void)snprintf(title, sizeof title, "ctrain report: %s", run_dir);
    ct_rep_page_head(f, title);
    (void)fprintf(f, "<h1>");
    ct_rep_esc(f, run_dir);
    (void)fprintf(f, "</h1>\n");
    if (r->best_step >= 0)
        (void)fprintf(f, "<p>Best checkpoint: step %lld (dashed line).</p>\n",
                      (long long)r->best_step);
}

/* The series plotted alone, after the metrics, and their plots' titles. */
static const char *const k_singles[] = {"lr", "grad_norm", "samples_per_sec", NULL};
static const char *const k_single_titles[] = {"learning rate", "gradient norm",
                                              "throughput (samples/s)"};

/* The run's splits in their fixed order (ct_rep_split_rank) into split[], as the index of a
 * series of each; returns their number. */
static int ordered_splits(const ct_rep_run *r, int64_t *split) {
    int n = 0;
    for (int64_t i = 0; i < r->n_series; i++) {
        int rank = ct_rep_split_rank(r, r->s[i].name);
        bool seen = rank < 0;
        for (int k = 0; k < n && !seen; k++)
            seen = ct_rep_split_rank(r, r->s[split[k]].name) == rank;
        if (seen || n == CT_REP_MAX_SPLITS) continue;
        int at = n++;
        for (; at > 0 && ct_rep_split_rank(r, r->s[split[at - 1]].name) > rank; at--)
            split[at] = split[at - 1];
        split[at] = i;
    }
    return n;
}

/* The last value of split/metric, or NULL when the run has none. */
static const ct_rep_series *find(const ct_rep_run *r, const char *split, const char *metric) {
    for (int64_t i = 0; i < r->n_series; i++) {
        const char *name = r->s[i].name, *m = ct_rep_metric_of(name);
        if (m != name && strcmp(m, metric) == 0 && (size_t)(m - 1 - name) == strlen(split) &&
            strncmp(name, split, strlen(split)) == 0 && r->s[i].n > 0)
            return &r->s[i];
    }
    return NULL;
}

/* Each metric's last value per split, the splits in their colours: the test evaluation at
 * the end of a run is here, beside the last validation. */
static void write_summary(const ct_rep_run *r, FILE *f) {
    int64_t split[CT_REP_MAX_SPLITS];
    int n = ordered_splits(r, split);
    if (n == 0) return;
    char names[CT_REP_MAX_SPLITS][64];
    (void)fprintf(f, "<h2>Summary</h2><table class=\"summary\"><tr><th>last value</th>");
    for (int k = 0; k < n; k++) {
        const char *name = r->s[split[k]].name;
        (void)ct_rep_split_of(name, names[k], sizeof names[k]);
        (void)fprintf(f, "<th class=\"split\" style=\"border-bottom-color:%s\">",
                      ct_rep_color(r, name));
        ct_rep_esc(f, names[k]);
        (void)fprintf(f, "</th>");
    }
    (void)fprintf(f, "</tr>\n");
    for (int64_t i = 0; i < r->n_series; i++) {
        const char *m = ct_rep_metric_of(r->s[i].name);
        bool first = m != r->s[i].name;
        for (int64_t j = 0; j < i && first; j++)
            first = ct_rep_metric_of(r->s[j].name) == r->s[j].name ||
                    strcmp(ct_rep_metric_of(r->s[j].name), m) != 0;
        if (!first) continue;
        (void)fprintf(f, "<tr><td style=\"text-align:left\">");
        ct_rep_esc(f, m);
        (void)fprintf(f, "</td>");
        for (int k = 0; k < n; k++) {
            const ct_rep_series *s = find(r, names[k], m);
            if (s)
                (void)fprintf(f, "<td title=\"step %.0f\">%.6g</td>", s->pts[s->n - 1].step,
                              s->pts[s->n - 1].value);
            else
                (void)fprintf(f, "<td>&#8211;</td>");
        }
        (void)fprintf(f, "</tr>\n");
    }
    (void)fprintf(f, "</table>\n");
}

/* Each series' last value, its step, its minimum and maximum. */
static void write_final_values(const ct_rep_run *r, FILE *f) {
    (void)fprintf(f, "<h2>Final values</h2><table><tr><th>metric</th><th>last</th><th>at step"
                     "</th><th>min</th><th>max</th></tr>\n");
    for (int64_t i = 0; i < r->n_series; i++) {
        const ct_rep_series *s = &r->s[i];
        double mn = (double)INFINITY, mx = -(double)INFINITY;
        for (int64_t k = 0; k < s->n; k++) {
            mn = fmin(mn, s->pts[k].value);
            mx = fmax(mx, s->pts[k].value);
        }
        (void)fprintf(f, "<tr><td style=\"text-align:left\">");
        ct_rep_esc(f, s->name);
        (void)fprintf(f, "</td><td>%.6g</td><td>%.0f</td><td>%.6g</td><td>%.6g</td></tr>\n",
                      s->pts[s->n - 1].value, s->pts[s->n - 1].step, mn, mx);
    }
    (void)fprintf(f, "</table>\n");
}

static bool is_single(const char *name) {
    for (int k = 0; k_singles[k]; k++)
        if (strcmp(name, k_singles[k]) == 0) return true;
    return false;
}

/* The curves of one metric across the run's splits (at most 16), each in its split's colour,
 * marking done[] the series taken; returns their number. */
static int metric_curves(const ct_rep_run *r, const char *m, bool *done, ct_rep_curve *out) {
    int n = 0;
    for (int64_t j = 0; j < r->n_series && n < 16; j++)
        if (!done[j] && strchr(r->s[j].name, '/') &&
            strcmp(ct_rep_metric_of(r->s[j].name), m) == 0) {
            out[n] = (ct_rep_curve){&r->s[j], r, ct_rep_color(r, r->s[j].name), NULL, r->s[j].name};
            done[j] = true;
            n++;
        }
    return n;
}

/* One plot per metric name across splits, losses first (pass 0, on a log scale with log_y),
 * then the others; each again against the epoch once one has ended (before, nothing tells its
 * length). */
static ct_status
plot_metrics(ct_ctx *ctx, const ct_rep_run *r, const ct_report_params *p, FILE *f) {
    bool done[CT_REP_MAX_SERIES] = {false};
    for (int pass = 0; pass < 2; pass++)
        for (int64_t i = 0; i < r->n_series; i++) {
            if (done[i]) continue;
            const char *m = ct_rep_metric_of(r->s[i].name);
            if (is_single(r->s[i].name) || (pass == 0) != (strcmp(m, "loss") == 0)) continue;
            ct_rep_curve curves[16];
            int n = metric_curves(r, m, done, curves);
            if (n == 0) continue;
            ct_rep_chart c = {m, curves, n, NULL, 0, r, pass == 0 && p->log_y, false};
            CT_TRY(ct_rep_plot(ctx, f, p, &c));
            char by_epoch[160];
            (void)snprintf(by_epoch, sizeof by_epoch, "%s by epoch", m);
            c.title = by_epoch;
            c.by_epoch = true;
            if (r->n_epochs > 0) CT_TRY(ct_rep_plot(ctx, f, p, &c));
        }
    return CT_OK;
}

/* The learning rate, the gradient norm and the throughput, one plot each. */
static ct_status
plot_singles(ct_ctx *ctx, const ct_rep_run *r, const ct_report_params *p, FILE *f) {
    for (int k = 0; k_singles[k]; k++)
        for (int64_t i = 0; i < r->n_series; i++)
            if (strcmp(r->s[i].name, k_singles[k]) == 0) {
                ct_rep_curve one = {&r->s[i], r, ct_rep_color(r, r->s[i].name), NULL, r->s[i].name};
                ct_rep_chart c = {k_single_titles[k], &one, 1, NULL, 0, r, false, false};
                CT_TRY(ct_rep_plot(ctx, f, p, &c));
            }
    return CT_OK;
}

/* Each split's confusion matrices: at the last evaluation and at the best checkpoint, one
 * table when the two are the same evaluation. */
static ct_status write_confusions(const ct_rep_run *r,
                                  const ct_report_params *p,
                                  FILE *f,
                                  const ct_config_classes *names) {
    for (int64_t i = 0; i < r->n_cm; i++) {
        const ct_rep_confusion *c = &r->cm[i];
        if (c->n_classes == 0) continue;
        const char *const *nm = names->n == c->n_classes ? names->names : NULL;
        if (ct_rep_stopped(p)) return CT_STOP;
        char title[160];
        (void)fprintf(f, "<h2>Confusion: ");
        ct_rep_esc(f, c->split);
        (void)fprintf(f, "</h2>\n");
        bool same = c->has_best && c->last_step == r->best_step;
        (void)snprintf(title, sizeof title, "%s, %s (step %lld)", c->split,
                       same ? "last evaluation = best checkpoint" : "last evaluation",
                       (long long)c->last_step);
        heatmap(f, title, c->last, c->n_classes, nm);
        if (c->has_best && !same) {
            (void)snprintf(title, sizeof title, "%s, best checkpoint (step %lld)", c->split,
                           (long long)r->best_step);
            heatmap(f, title, c->best, c->n_classes, nm);
        }
    }
    return CT_OK;
}

static ct_status write_page(
    ct_ctx *ctx, const ct_rep_run *r, const char *run_dir, const ct_report_params *p, FILE *f) {
    write_head(r, run_dir, f);
    write_summary(r, f);
    write_final_values(r, f);
    (void)fprintf(f, "<h2>Curves</h2>\n");
    CT_TRY(plot_metrics(ctx, r, p, f));
    CT_TRY(plot_singles(ctx, r, p, f));
    ct_config_classes names;
    read_class_names(ctx, run_dir, &names);
    ct_status s = write_confusions(r, p, f, &names);
    ct_config_classes_fini(ctx, &names);
    CT_TRY(s);
    (void)fprintf(f, "<h2>Configuration</h2>\n");
    char path[1100];
    (void)snprintf(path, sizeof path, "%s/config.yaml", run_dir);
    config_table(ctx, f, path);
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

ct_status ct_rep_write_atomic(ct_ctx *ctx,
                              const char *html,
                              const ct_report_params *p,
                              ct_status (*page)(ct_ctx *, FILE *, const void *),
                              const void *arg) {
    char tmp[1200];
    /* a name of this process's own: a live report and `ctrain report` may write at once */
    (void)snprintf(tmp, sizeof tmp, "%s.%lld.tmp", html, (long long)getpid());
    ct_status s = CT_OK;
    if (p->svg_dir && mkdir(p->svg_dir, 0777) != 0 && errno != EEXIST)
        s = CT_FAIL(ctx, CT_ERR_IO, "%s: cannot create: %s", p->svg_dir, strerror(errno));
    FILE *f = NULL;
    if (s == CT_OK && !(f = fopen(tmp, "w")))
        s = CT_FAIL(ctx, CT_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
    if (s == CT_OK) s = page(ctx, f, arg);
    if (f) {
        if (fclose(f) != 0 && s == CT_OK)
            s = CT_FAIL(ctx, CT_ERR_IO, "%s: write failed: %s", tmp, strerror(errno));
        if (s == CT_OK && rename(tmp, html) != 0)
            s = CT_FAIL(ctx, CT_ERR_IO, "%s: cannot rename to %s: %s", tmp, html, strerror(errno));
        if (s != CT_OK) (void)remove(tmp);
    }
    return s;
}

/* What write_page needs, through ct_rep_write_atomic. */
typedef struct single_page {
    const ct_rep_run *run;
    const char *run_dir;
    const ct_report_params *p;
} single_page;

static ct_status single(ct_ctx *ctx, FILE *f, const void *arg) {
    const single_page *sp = arg;
    return write_page(ctx, sp->run, sp->run_dir, sp->p, f);
}

ct_status
ct_report_write(ct_ctx *ctx, const char *run_dir, const ct_report_params *pp, int64_t *n_points) {
    ct_report_params p = pp ? *pp : ct_report_default_params();
    if (strlen(run_dir) > 1000 || (p.html && strlen(p.html) > 1000) ||
        (p.svg_dir && strlen(p.svg_dir) > 1000))
        return CT_FAIL(ctx, CT_ERR_INVALID_ARG, "report: a path longer than 1000 bytes");
    ct_rep_run r;
    int64_t best = p.best_step >= 0 ? p.best_step : read_best(ctx, run_dir);
    ct_status s = ct_rep_run_read(ctx, run_dir, &p, best, &r);
    char html[1100];
    if (p.html)
        (void)snprintf(html, sizeof html, "%s", p.html);
    else
        (void)snprintf(html, sizeof html, "%s/report.html", run_dir);
    single_page sp = {&r, run_dir, &p};
    if (s == CT_OK) s = ct_rep_write_atomic(ctx, html, &p, single, &sp);
    if (s == CT_STOP)
        (void)CT_FAIL(ctx, CT_STOP, "%s: stopped before it was complete; not written", html);
    if (n_points) *n_points = r.points;
    ct_rep_run_fini(ctx, &r);
    return s;
}
