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
} ct_report_params;

CT_API ct_report_params ct_report_default_params(void);

/* Writes the report of run_dir. Errors: CT_ERR_IO (no metrics.jsonl, a file that cannot be
 * written, naming it), CT_ERR_FORMAT (a metrics.jsonl line that is not a JSON object, naming
 * the file and line). *n_points (may be NULL) receives the number of points plotted. */
CT_API ct_status ct_report_write(ct_ctx *ctx,
                                 const char *run_dir,
                                 const ct_report_params *p,
                                 int64_t *n_points);

#ifdef __cplusplus
}
#endif

#endif /* CTRAIN_REPORT_H */
