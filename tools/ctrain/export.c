/*
 * export.c - `ctrain export`: a run's model written for other runtimes, as an ONNX model
 * (ct_experiment_export_onnx, docs/onnx.md) or its weights as a safetensors file under PyTorch
 * state_dict names, tied weights under each of their names, in f32 or bf16
 * (ct_experiment_export_weights, docs/interop.md). The run is opened read-only, as eval opens
 * it; nothing is written into it.
 *
 * Ownership: the command opens and closes its context, configuration and experiment.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "ctrain/checkpoint.h"
#include "ctrain/export.h"

void cli_export_usage(FILE *f) {
    (void)fprintf(
        f,
        "usage: ctrain export RUN|CHECKPOINT -o OUT [--format safetensors|onnx]\n"
        "                     [--dtype f32|bf16] [--opset N] [--with-preprocessing]\n"
        "                     [--checkpoint WHICH] [--no-ema]\n\n"
        "Writes the model of a run directory (its best checkpoint, else latest; or WHICH),\n"
        "or of a checkpoint directory RUN/checkpoints/step-N, to OUT:\n"
        "  onnx         the model in evaluation mode as an ONNX graph (opset %d to %d,\n"
        "               default %d) with a dynamic batch dimension; --with-preprocessing\n"
        "               puts the evaluation transforms (scale, normalize) into the graph,\n"
        "               which then takes the raw features (u8 pixels) (docs/onnx.md)\n"
        "  safetensors  (the default) the model's tensors under their PyTorch names, a tied\n"
        "               weight under each of its names, as f32 or, with --dtype bf16,\n"
        "               rounded to bf16 (docs/interop.md)\n"
        "A run with trainer.ema exports its EMA weights unless --no-ema.\n",
        CT_ONNX_OPSET_MIN, CT_ONNX_OPSET_MAX, CT_ONNX_OPSET_DEFAULT);
}

typedef struct export_args {
    const char *src, *format, *output, *which, *dtype;
    long long opset;
    bool preprocessing, no_ema, opset_given;
} export_args;

/* 0, -1 after --help, or the exit code once the error is said. */
static int parse(int argc, char **argv, export_args *a) {
    static const struct option opts[] = {{"format", required_argument, NULL, 'f'},
                                         {"output", required_argument, NULL, 'o'},
                                         {"opset", required_argument, NULL, 'O'},
                                         {"with-preprocessing", no_argument, NULL, 'p'},
                                         {"checkpoint", required_argument, NULL, 'c'},
                                         {"no-ema", no_argument, NULL, 'E'},
                                         {"dtype", required_argument, NULL, 'd'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    *a = (export_args){.opset = CT_ONNX_OPSET_DEFAULT, .format = "safetensors", .dtype = NULL};
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, "o:h", opts, NULL)) != -1) {
        char *end = NULL;
        switch (c) {
        case 'f':
            a->format = optarg;
            break;
        case 'o':
            a->output = optarg;
            break;
        case 'c':
            a->which = optarg;
            break;
        case 'p':
            a->preprocessing = true;
            break;
        case 'E':
            a->no_ema = true;
            break;
        case 'd':
            a->dtype = optarg;
            break;
        case 'h':
            cli_export_usage(stdout);
            return -1;
        case 'O':
            a->opset = strtoll(optarg, &end, 10);
            a->opset_given = true;
            if (end == optarg || *end) {
                (void)fprintf(stderr, "ctrain export: --opset: expected a number, got '%s'\n",
                              optarg);
                return EXIT_USAGE;
            }
            break;
        default:
            (void)fprintf(stderr, "ctrain export: unknown option or missing value '%s'\n",
                          argv[optind - 1]);
            return EXIT_USAGE;
        }
    }
    if (optind < argc) a->src = argv[optind++];
    const char *bad = !a->src         ? "missing RUN or CHECKPOINT"
                      : optind < argc ? "one RUN or CHECKPOINT only"
                      : strcmp(a->format, "onnx") != 0 && strcmp(a->format, "safetensors") != 0
                          ? "--format: expected onnx or safetensors"
                      : a->dtype && strcmp(a->dtype, "f32") != 0 && strcmp(a->dtype, "bf16") != 0
                          ? "--dtype: expected f32 or bf16"
                      : a->dtype && strcmp(a->format, "onnx") == 0
                          ? "--dtype: only for --format safetensors (an ONNX graph computes in f32)"
                      : (a->opset_given || a->preprocessing) && strcmp(a->format, "onnx") != 0
                          ? "--opset and --with-preprocessing: only for --format onnx"
                      : !a->output ? "missing -o OUT"
                                   : NULL;
    if (bad) {
        (void)fprintf(stderr, "ctrain export: %s\n", bad);
        cli_export_usage(stderr);
        return EXIT_USAGE;
    }
    return 0;
}

/* A checkpoint directory (one holding model.safetensors, RUN/checkpoints/NAME) stands for its
 * run, two levels up, and that checkpoint. run (size bytes) receives the run directory. 0, or
 * the exit code once said (--checkpoint names another checkpoint than CHECKPOINT). */
static int split_source(export_args *a, char *run, size_t size) {
    struct stat st;
    char model[4200];
    (void)snprintf(model, sizeof model, "%s/model.safetensors", a->src);
    bool checkpoint = stat(model, &st) == 0;
    (void)snprintf(run, size, checkpoint ? "%s/../.." : "%s", a->src);
    if (checkpoint && a->which) {
        (void)fprintf(stderr,
                      "ctrain export: %s is a checkpoint; --checkpoint %s chooses one of a RUN "
                      "(give one or the other)\n",
                      a->src, a->which);
        return EXIT_USAGE;
    }
    if (checkpoint) a->which = a->src;
    return 0;
}

int cli_cmd_export(int argc, char **argv) {
    export_args a;
    int rc = parse(argc, argv, &a);
    if (rc) return rc < 0 ? 0 : rc;
    if (strcmp(a.format, "onnx") == 0 && !ct_onnx_export_available()) {
        (void)fprintf(stderr, "ctrain export: this ctrain was built without ONNX export (hint: "
                              "install libprotobuf-c-dev, protobuf-c-compiler and libonnx-dev, "
                              "then configure and build again)\n");
        return EXIT_USAGE;
    }
    char run[4200];
    if ((rc = split_source(&a, run, sizeof run)) != 0) return rc;
    session s;
    ct_ctx *ctx = NULL;
    if ((rc = cli_open_session(&s, &ctx)) != 0) return rc;
    s.quiet = true;
    s.progress = PROGRESS_NONE;
    ct_config *cfg = NULL;
    ct_experiment *e = NULL;
    ct_status st = cli_load_config(ctx, run, NULL, 0, &cfg);
    if (st == CT_OK) {
        ct_experiment_params ep = ct_experiment_default_params();
        ep.read_only = true;
        st = ct_experiment_create(ctx, cfg, &ep, &e);
    }
    if (st != CT_OK) rc = cli_fail(ctx, cli_setup_code(st));
    const char *which = a.which ? a.which : "best";
    int64_t step = 0;
    ct_weights_kind kind = CT_WEIGHTS_TRAINED;
    if (!rc) rc = cli_load_weights(ctx, e, &which, !a.no_ema, &step, &kind);
    if (!rc && strcmp(a.format, "onnx") == 0) {
        ct_onnx_export_params p = ct_onnx_export_default_params();
        p.opset = a.opset;
        p.with_preprocessing = a.preprocessing;
        st = ct_experiment_export_onnx(e, a.output, &p);
    } else if (!rc) {
        bool bf16 = a.dtype && strcmp(a.dtype, "bf16") == 0;
        st = ct_experiment_export_weights(e, a.output, bf16 ? CT_BF16 : CT_F32);
    }
    if (!rc && st != CT_OK) rc = cli_fail(ctx, st == CT_ERR_CONFIG ? EXIT_USAGE : EXIT_RUN_FAILED);
    if (!rc)
        (void)fprintf(stderr, "ctrain export: %s (%s%s) from %s weights of %s\n", a.output,
                      a.format, a.preprocessing ? ", with preprocessing" : "",
                      kind == CT_WEIGHTS_EMA ? "the EMA" : "the", which);
    ct_experiment_destroy(e);
    ct_config_destroy(cfg);
    ct_ctx_destroy(ctx);
    return rc;
}
