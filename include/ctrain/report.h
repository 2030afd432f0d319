/*
 * report.h - a run's report: one self-contained HTML file (inline SVG, no script, no network)
 * drawn from the run directory's metrics.jsonl, config.yaml and checkpoint pointers: loss and
 * metric curves per split against the step and (once an epoch has ended) against the epoch, the
 * learning rate, gradient norm and throughput,
 * the best checkpoint marked, each split in one colour in every plot, a metric evaluated once
 * (the test split's) as a dot labelled with its value, confusion matrices (when a `confusion`
 * metric was recorded) as heat maps with per-class precision and recall, and tables of the
 * last values per split, the final metrics and the configuration. Optionally each plot as its
 * own SVG file. Or one page comparing several runs (ct_report_compare).
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

/* Writes one page comparing the runs of run_dirs[0..n_runs) (1 to 12 run directories):
 * each metric's curves of every run on one plot (a colour per run, a dash per split; the
 * legend names each run by its directory's name, with as many parent directories as tell two
 * apart), each run's last values and its values at its best evaluation by its own
 * checkpoint.monitor and checkpoint.mode (config.yaml), and the configuration keys (dotted,
 * from each config.yaml) on which the runs differ, with each run's value; the keys equal in
 * all runs are folded. p->html: NULL = report.html in the current directory; p->svg_dir,
 * log_y and cancelled as for ct_report_write; p->best_step is not used. Errors: as
 * ct_report_write, and CT_ERR_IO naming a path that is not a directory, CT_ERR_INVALID_ARG
 * for a number of runs out of range. *n_points (may be NULL) receives the values read. */
CT_API ct_status ct_report_compare(ct_ctx *ctx,
                                   const char *const *run_dirs,
                                   int64_t n_runs,
                                   const ct_report_params *p,
                                   int64_t *n_points);

#ifdef __cplusplus
}
#endif

#endif /* CTRAIN_REPORT_H */
