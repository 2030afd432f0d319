/*
 * report.c - the report command: one self-contained HTML page (and optionally SVG files) from a
 * run's metrics.jsonl (ct_report_write), or one comparing several runs (ct_report_compare),
 * which a stop signal ends between plots, writing nothing.
 */
#include <getopt.h>
#include <stdio.h>

#include "cli.h"
#include "ctrain/report.h"

#define CLI_MAX_RUNS 12 /* as ct_report_compare takes */

int cli_cmd_report(int argc, char **argv) {
    static const struct option opts[] = {
        {"output", required_argument, NULL, 'o'},
        {"svg", required_argument, NULL, 's'},
        {"log", no_argument, NULL, 'l'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    ct_report_params rp = ct_report_default_params();
    const char *dirs[CLI_MAX_RUNS];
    int n_dirs = 0;
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, "-h", opts, NULL)) != -1) {
        switch (c) {
        case 1:
            if (n_dirs == CLI_MAX_RUNS) {
                (void)fprintf(stderr, "ctrain report: at most %d RUN_DIRs can be compared\n",
                              CLI_MAX_RUNS);
                return EXIT_USAGE;
            }
            dirs[n_dirs++] = optarg;
            break;
        case 'o':
            rp.html = optarg;
            break;
        case 's':
            rp.svg_dir = optarg;
            break;
        case 'l':
            rp.log_y = true;
            break;
        case 'h':
            cli_cmd_usage(stdout, "report");
            return 0;
        default:
            (void)fprintf(stderr, "ctrain report: unknown option '%s'\n", argv[optind - 1]);
            return EXIT_USAGE;
        }
    }
    if (n_dirs == 0) {
        (void)fprintf(stderr, "ctrain report: missing RUN_DIR\n");
        return EXIT_USAGE;
    }
    session s;
    ct_ctx *ctx;
    if (cli_open_session(&s, &ctx) != 0) return EXIT_RUN_FAILED;
    /* a stop signal ends the report between plots, leaving no file (a second one ends the
       process at once) */
    cli_catch_stop_signals();
    rp.cancelled = cli_signalled;
    int64_t points = 0;
    ct_status st = n_dirs == 1 ? ct_report_write(ctx, dirs[0], &rp, &points)
                               : ct_report_compare(ctx, dirs, n_dirs, &rp, &points);
    int rc = 0;
    if (st == CT_STOP) {
        rc = cli_stop_code();
        (void)fprintf(stderr, "ctrain report: stopped by %s; nothing written\n", cli_stop_name());
    } else if (st != CT_OK)
        rc = cli_fail(ctx, st == CT_ERR_OOM ? EXIT_RUN_FAILED : EXIT_USAGE);
    else if (n_dirs == 1 && !rp.html)
        (void)fprintf(stderr, "ctrain report: wrote %s/report.html (%lld values)\n", dirs[0],
                      (long long)points);
    else
        (void)fprintf(stderr, "ctrain report: wrote %s (%s%lld values)\n",
                      rp.html ? rp.html : "report.html", n_dirs > 1 ? "comparison of runs, " : "",
                      (long long)points);
    ct_ctx_destroy(ctx);
    return rc;
}
