/*
 * export.c - the export command: a run's or a checkpoint's trained weights as a file for other
 * frameworks. `ctrain export RUN_OR_CHECKPOINT -o OUT [--format safetensors] [--dtype f32|bf16]`
 * writes a safetensors file under PyTorch state_dict names, tied weights under each of their
 * names (ct_experiment_export_weights). A run directory exports its latest checkpoint; a
 * checkpoint directory (RUN/checkpoints/step-N) that one, with the run's config.yaml.
 *
 * Ownership: the context, configuration and experiment are opened and freed here.
 */
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

typedef struct export_args {
    const char *from, *out, *format, *dtype;
} export_args;

/* The arguments into *a: 0, -1 after --help, or the exit code once the error is said. */
static int parse_export(int argc, char **argv, export_args *a) {
    static const struct option opts[] = {{"output", required_argument, NULL, 'o'},
                                         {"format", required_argument, NULL, 'f'},
                                         {"dtype", required_argument, NULL, 'd'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    static const char usage[] = "usage: ctrain export RUN_OR_CHECKPOINT -o OUT [--format "
                                "safetensors] [--dtype f32|bf16]\n";
    *a = (export_args){NULL, NULL, "safetensors", "f32"};
    optind = 1;
    int c;
    while ((c = getopt_long(argc, argv, "o:h", opts, NULL)) != -1) {
        if (c == 'o') a->out = optarg;
        if (c == 'f') a->format = optarg;
        if (c == 'd') a->dtype = optarg;
        if (c == 'h') {
            (void)fputs(usage, stdout);
            return -1;
        }
        if (c == '?') {
            (void)fputs(usage, stderr);
            return EXIT_USAGE;
        }
    }
    a->from = optind == argc - 1 ? argv[optind] : NULL;
    const char *bad = !a->from  ? "expected one RUN_OR_CHECKPOINT"
                      : !a->out ? "-o OUT is required"
                      : strcmp(a->format, "safetensors") != 0
                          ? "--format: only safetensors is available here"
                      : strcmp(a->dtype, "f32") != 0 && strcmp(a->dtype, "bf16") != 0
                          ? "--dtype: expected f32 or bf16"
                          : NULL;
    if (!bad) return 0;
    (void)fprintf(stderr, "ctrain export: %s\n%s", bad, usage);
    return EXIT_USAGE;
}

int cli_cmd_export(int argc, char **argv) {
    export_args a;
    int rc = parse_export(argc, argv, &a);
    if (rc) return rc < 0 ? 0 : rc;
    /* a checkpoint directory holds state.json; its run is two levels up */
    char state[4200], run[4200];
    struct stat st;
    (void)snprintf(state, sizeof state, "%s/state.json", a.from);
    bool is_ckpt = stat(state, &st) == 0;
    (void)snprintf(run, sizeof run, is_ckpt ? "%s/../.." : "%s", a.from);
    session s;
    ct_ctx *ctx;
    if ((rc = cli_open_session(&s, &ctx)) != 0) return rc;
    s.quiet = true;
    ct_config *cfg = NULL;
    ct_experiment *e = NULL;
    ct_status r = cli_load_config(ctx, run, NULL, 0, &cfg);
    ct_experiment_params ep = ct_experiment_default_params();
    ep.read_only = true;
    if (r == CT_OK) r = ct_experiment_create(ctx, cfg, &ep, &e);
    rc = r == CT_OK ? 0 : cli_fail(ctx, cli_setup_code(r));
    int64_t step = 0;
    if (!rc && ct_experiment_load_with(e, is_ckpt ? a.from : "latest", false, &step, NULL) != CT_OK)
        rc = cli_fail(ctx, EXIT_USAGE);
    ct_dtype dt = strcmp(a.dtype, "bf16") == 0 ? CT_BF16 : CT_F32;
    if (!rc && ct_experiment_export_weights(e, a.out, dt) != CT_OK)
        rc = cli_fail(ctx, EXIT_RUN_FAILED);
    if (!rc)
        (void)fprintf(stderr, "ctrain export: the weights of step %lld -> %s (%s)\n",
                      (long long)step, a.out, a.dtype);
    ct_experiment_destroy(e);
    ct_config_destroy(cfg);
    ct_ctx_destroy(ctx);
    return rc;
}
