/*
 * report.h - a run's report: one self-contained HTML file (inline SVG, no script, no network)
 * drawn from the run directory's metrics.jsonl, config.yaml and checkpoint pointers: loss and
 * metric curves per split against the step and (once an epoch has ended) against the epoch, the
 * learning rate, gradient norm and throughput,
 * the best checkpoint marked, confusion matrices (when a `confusion` metric was recorded) as
 * heat maps with per-class precision and recall, and tables of the final metrics and the
 * configuration. Optionally each plot as its own SVG file.
 *
 * Ownership: nothing is kept; the files are written whole under a temporary name and renamed,
 * so a reader (a browser refreshing a live report) never sees half a file.
 *
 * Any metrics.jsonl draws in bounded time and space: each axis is made wide enough for its
 * ticks to be distinct numbers (a flat series at 1e17, a range from -1e308 to 1e308), a plot
 * has at most 50 ticks per axis and 60 epoch lines, so the page grows with the points drawn and
 * the number of series, nothing else.
 */
#ifndef CTRAIN_REPORT_H
#define CTRAIN_REPORT_H

#include "ctrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ct_report_params {
    const char *html;    /* the HTML file to write; NULL = <run_dir>/report.html */
    const char *svg_dir; /* also one SVG file per plot there (created); NULL = none */
    bool log_y;          /* loss curves on a logarithmic axis */
    int64_t best_step;   /* the best checkpoint's step to mark; -1 (default) = the one that
                            run_dir/checkpoints/best names (a trainer that knows better, as
                            during an evaluation before its best checkpoint is saved, says so) */
    /* Asked with `user` before each plot and every 4096 metrics.jsonl lines: true stops the
       report (a signal the caller's handler noted, say), which then returns CT_STOP and leaves
       no file of the page behind (SVG files of the plots drawn before stay). NULL = never. */
    bool (*cancelled)(void *user);
    void *user;
} ct_report_params;

CT_API ct_report_params ct_report_default_params(void);

/* Writes the report of run_dir. Errors: CT_ERR_IO (no metrics.jsonl, a file that cannot be
 * written, naming it), CT_ERR_FORMAT (a metrics.jsonl line that is not a JSON object, naming
 * the file and line); CT_STOP (not an error) when p->cancelled said stop. *n_points (may be
 * NULL) receives the number of points plotted. */
CT_API ct_status ct_report_write(ct_ctx *ctx,
                                 const char *run_dir,
                                 const ct_report_params *p,
                                 int64_t *n_points);

#ifdef __cplusplus
}
#endif

#endif /* CTRAIN_REPORT_H */
