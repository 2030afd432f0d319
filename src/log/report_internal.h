/*
 * report_internal.h - what the run report (report.c), the comparison of runs (compare.c) and
 * the line charts (chart.c) share: one run's records read from its metrics.jsonl, a chart of
 * curves drawn as SVG, the fixed colour of each split, and a configuration flattened into
 * dotted keys.
 *
 * Ownership: a ct_rep_run owns its series and matrices (ct_rep_run_fini frees them); a chart
 * only borrows the series and strings it is given; a ct_rep_flat owns its strings.
 */
#ifndef CT_LOG_REPORT_INTERNAL_H
#define CT_LOG_REPORT_INTERNAL_H

#include <stdio.h>

#include "core/core_internal.h"
#include "ctrain/config.h"
#include "ctrain/report.h"

#define CT_REP_MAX_SERIES      256
#define CT_REP_MAX_CLASSES     64
#define CT_REP_MAX_CM          4 /* splits with a confusion matrix */
#define CT_REP_MAX_SPLITS      16
#define CT_REP_MAX_EPOCH_MARKS 4096
#define CT_REP_MAX_RUNS        12 /* compared on one page: a colour and a legend row each */

typedef struct ct_rep_point {
    double step, value;
} ct_rep_point;

typedef struct ct_rep_series {
    char name[128]; /* "valid/acc", "lr" */
    ct_rep_point *pts;
    int64_t n, cap;
} ct_rep_series;

/* The last and the best-step confusion matrices of one split. */
typedef struct ct_rep_confusion {
    char split[64];
    int64_t n_classes;
    double last[CT_REP_MAX_CLASSES * CT_REP_MAX_CLASSES];
    double best[CT_REP_MAX_CLASSES * CT_REP_MAX_CLASSES];
    int64_t last_step;
    bool has_best;
} ct_rep_confusion;

/* One run's records. */
typedef struct ct_rep_run {
    ct_rep_series *s;
    int64_t n_series;
    ct_rep_confusion *cm;
    int64_t n_cm;
    int64_t best_step; /* the best checkpoint's step to mark; -1 none */
    /* the splits in the order metrics.jsonl first names them (their colours: ct_rep_color) */
    char splits[CT_REP_MAX_SPLITS][64];
    int64_t n_splits;
    double epoch_at[CT_REP_MAX_EPOCH_MARKS]; /* the step at which epoch k + 1 was complete (kept
                                                non-decreasing, so that epoch_of can bisect) */
    int64_t n_epochs;
    int64_t last_epoch;     /* the latest epoch the records named, and the step of its last */
    double last_epoch_step; /* record: where it ended if a record of a later epoch follows */
    int64_t points;
} ct_rep_run;

/* Whether the caller asked the report to stop (ct_report_params.cancelled). */
CT_INTERNAL bool ct_rep_stopped(const ct_report_params *p);

/* Reads <run_dir>/metrics.jsonl into *run (zeroed first; best_step: the step whose confusion
 * matrices are kept as the best's). Errors: CT_ERR_IO naming the file, CT_ERR_FORMAT naming
 * its line, CT_ERR_OOM, CT_STOP when p->cancelled said stop. ct_rep_run_fini frees it either
 * way. */
CT_INTERNAL ct_status ct_rep_run_read(ct_ctx *ctx,
                                      const char *run_dir,
                                      const ct_report_params *p,
                                      int64_t best_step,
                                      ct_rep_run *run);
CT_INTERNAL void ct_rep_run_fini(ct_ctx *ctx, ct_rep_run *run);

/* The fractional epoch of a step in the run (NaN before any epoch ended). */
CT_INTERNAL double ct_rep_epoch_of(const ct_rep_run *run, double step);

/* The split of a series name into out ("valid" of "valid/acc"); false (out "") without one. */
CT_INTERNAL bool ct_rep_split_of(const char *name, char *out, size_t size);
/* The metric part of a name: "acc" for "valid/acc", the name itself without a split. */
CT_INTERNAL const char *ct_rep_metric_of(const char *name);
/* The split's place in the fixed order: train 0, valid 1, test 2, then the run's other splits
 * in the order its metrics.jsonl first names them; -1 for a name without a split. */
CT_INTERNAL int ct_rep_split_rank(const ct_rep_run *run, const char *name);
/* The colour of a series in every plot of a run's report, from its split's rank. */
CT_INTERNAL const char *ct_rep_color(const ct_rep_run *run, const char *name);
/* The colour of the k-th run of a comparison. */
CT_INTERNAL const char *ct_rep_run_color(int64_t k);
/* The dash pattern of a split's rank in a comparison (NULL: solid, for train). */
CT_INTERNAL const char *ct_rep_split_dash(int rank);

/* Writes s with &, <, >, " escaped. */
CT_INTERNAL void ct_rep_esc(FILE *f, const char *s);

/* One curve of a chart. */
typedef struct ct_rep_curve {
    const ct_rep_series *s;
    const ct_rep_run *run; /* its epochs, for the placement against the epoch */
    const char *color;
    const char *dash;  /* stroke-dasharray; NULL: solid */
    const char *label; /* its legend entry; NULL: none (the chart's keys say it) */
} ct_rep_curve;

/* A legend entry of its own: a line of the colour and dash, and the label. */
typedef struct ct_rep_key {
    const char *label, *color, *dash;
} ct_rep_key;

typedef struct ct_rep_chart {
    const char *title;
    const ct_rep_curve *curves;
    int n;
    const ct_rep_key *keys; /* legend entries after the curves' own */
    int n_keys;
    const ct_rep_run *marks; /* the run whose epoch ends and best step are marked; NULL none */
    bool log_y, by_epoch;
} ct_rep_chart;

/* Draws the chart as one <svg> element (standalone: with its namespace, for a file of its
 * own); a curve of one point is a marker labelled with its value. Returns the points drawn; 0
 * and nothing written when no point can be drawn. */
CT_INTERNAL int64_t ct_rep_chart_draw(FILE *f, const ct_rep_chart *c, bool standalone);

/* Draws the chart into the page, inside a <figure>, and with p->svg_dir also into
 * <svg_dir>/<title as a file name>.svg. Errors: CT_ERR_IO naming the file; CT_STOP. */
CT_INTERNAL ct_status ct_rep_plot(ct_ctx *ctx,
                                  FILE *html,
                                  const ct_report_params *p,
                                  const ct_rep_chart *c);

/* Writes the page that page(ctx, f, arg) writes to html, through a temporary file renamed
 * over it, so that a reader (a browser refreshing a live report) never sees half a page;
 * creates p->svg_dir first. On any failure, CT_STOP included, no file of the page is left and
 * an earlier html stays as it was. */
CT_INTERNAL ct_status ct_rep_write_atomic(ct_ctx *ctx,
                                          const char *html,
                                          const ct_report_params *p,
                                          ct_status (*page)(ct_ctx *, FILE *, const void *),
                                          const void *arg);

/* The page's start up to and including <body> (styles for the charts and tables). */
CT_INTERNAL void ct_rep_page_head(FILE *f, const char *title);

/* A configuration flattened into dotted keys and their values as text, in document order:
 * a list of scalars is one value ("[16, 8]"), an empty map "{}". */
typedef struct ct_rep_flat {
    char **key, **value;
    int64_t n, cap;
} ct_rep_flat;

/* Flattens the tree under root into *out (zeroed first). Errors: CT_ERR_OOM. */
CT_INTERNAL ct_status ct_rep_flatten(ct_ctx *ctx, const ct_cfg_node *root, ct_rep_flat *out);
/* The value of key in f; NULL when f has no such key. */
CT_INTERNAL const char *ct_rep_flat_get(const ct_rep_flat *f, const char *key);
CT_INTERNAL void ct_rep_flat_fini(ct_ctx *ctx, ct_rep_flat *f);

/* One key of the union of several configurations, and whether the runs disagree on it (a
 * different value, or a run without it). */
typedef struct ct_rep_diff_row {
    const char *key; /* borrowed from the flat configurations */
    bool differs;
} ct_rep_diff_row;

/* The keys of runs[0..n_runs) in order of first appearance, each marked with whether the runs
 * disagree on it, into *rows (ct_free'd by the caller: *n_rows entries of ct_rep_diff_row; NULL
 * when there are none). Errors: CT_ERR_OOM. */
CT_INTERNAL ct_status ct_rep_config_diff(
    ct_ctx *ctx, const ct_rep_flat *runs, int64_t n_runs, ct_rep_diff_row **rows, int64_t *n_rows);

/* A short label for each of the n (at most CT_REP_MAX_RUNS) run directories: its last path
 * component, with as many of the components above it as tell it apart from the others ("a/exp",
 * "b/exp"), and " (2)", " (3)" for the same directory named again. */
CT_INTERNAL void ct_rep_run_labels(const char *const *dirs, int64_t n, char (*out)[128]);

#endif /* CT_LOG_REPORT_INTERNAL_H */
