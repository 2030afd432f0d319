/*
 * main.c - the ctrain command-line tool: fit, eval, predict, config, report, inspect, diff and
 * verify-resume over experiment files (include/ctrain/experiment.h), with progress on stderr, a
 * log.txt in the run directory, and the exit codes of docs/cli.md:
 *     0 success; 1 the run failed (a non-finite stop included; diff and verify-resume: a
 *     difference found); 2 a usage, configuration or
 *     input error; 75 fit preempted and its Slurm job requeued; 129 stopped by SIGHUP; 130
 *     interrupted by SIGINT; 143 stopped by SIGTERM.
 *
 * This file picks the command; cli.h lists the files that carry them out.
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"

int main(int argc, char **argv) {
    cli_omp_wait_setup(argc, argv);
    /* a file size limit (ulimit -f) makes a write fail with EFBIG, reported with the file's name
       like a full disk, instead of killing the process with no word */
    (void)signal(SIGXFSZ, SIG_IGN);
    if (argc < 2) {
        cli_usage(stderr);
        return EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "-V") == 0) {
        ct_experiment_write_build_info(stdout);
        cli_omp_wait_print(stdout);
        return 0;
    }
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
        cli_usage(stdout);
        cli_list_examples(stdout);
        return 0;
    }
    if (strcmp(cmd, "fit") == 0) return cli_cmd_fit(argc - 1, argv + 1);
    if (strcmp(cmd, "eval") == 0) return cli_cmd_eval(argc - 1, argv + 1);
    if (strcmp(cmd, "config") == 0) return cli_cmd_config(argc - 1, argv + 1);
    if (strcmp(cmd, "predict") == 0) return cli_cmd_predict(argc - 1, argv + 1);
    if (strcmp(cmd, "report") == 0) return cli_cmd_report(argc - 1, argv + 1);
    if (strcmp(cmd, "inspect") == 0) return cli_cmd_inspect(argc - 1, argv + 1);
    if (strcmp(cmd, "diff") == 0) return cli_cmd_diff(argc - 1, argv + 1);
    if (strcmp(cmd, "completion") == 0) return cli_cmd_completion(argc - 1, argv + 1);
    if (strcmp(cmd, "man") == 0) return cli_cmd_man(argc - 1, argv + 1);
    if (strcmp(cmd, "verify-resume") == 0) return cli_cmd_verify_resume(argc - 1, argv + 1);
    if (strcmp(cmd, "export") == 0) return cli_cmd_export(argc - 1, argv + 1);
    if (strcmp(cmd, "replay") == 0) return cli_cmd_replay(argc - 1, argv + 1);
    (void)fprintf(stderr, "ctrain: unknown %s '%s'\n", cmd[0] == '-' ? "option" : "command", cmd);
    cli_usage(stderr);
    return EXIT_USAGE;
}
