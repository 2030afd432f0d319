/*
 * lm_logits.c - the reference logits of a language model run for the ONNX test (onnx_export.py):
 * `ctrain predict` writes a classifier's logits but not a language model's, so this loads the
 * run's latest checkpoint through the library as `ctrain predict` does (read-only experiment,
 * evaluation graph without gradients) and writes ct_model_forward's logits.
 *
 *     lm_logits RUN_DIR IDS.bin N T OUT.bin
 * IDS.bin: N*T little-endian int64 token ids; OUT.bin: N*T*vocab float32 logits.
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "ctrain/ctrain.h"
#include "ctrain/experiment.h"

static int fail(ct_ctx *ctx, const char *what) {
    (void)fprintf(stderr, "lm_logits: %s: %s\n", what, ctx ? ct_last_error(ctx) : "");
    return 1;
}

int main(int argc, char **argv) {
    if (argc != 6) {
        (void)fprintf(stderr, "usage: lm_logits RUN_DIR IDS.bin N T OUT.bin\n");
        return 2;
    }
    long long n = atoll(argv[3]), t = atoll(argv[4]);
    int64_t *ids = malloc((size_t)(n * t) * sizeof *ids);
    FILE *f = fopen(argv[2], "rb");
    if (!ids || !f || fread(ids, sizeof *ids, (size_t)(n * t), f) != (size_t)(n * t)) {
        (void)fprintf(stderr, "lm_logits: cannot read %lld ids from %s\n", n * t, argv[2]);
        return 1;
    }
    (void)fclose(f);
    /* absolute: a relative output_dir is read from the config's folder */
    char cwd[4096] = "", run[8200], path[8300];
    if (argv[1][0] != '/' && !getcwd(cwd, sizeof cwd)) return 1;
    (void)snprintf(run, sizeof run, "%s%s%s", cwd, cwd[0] ? "/" : "", argv[1]);
    (void)snprintf(path, sizeof path, "%s/config.yaml", run);
    ct_ctx *ctx = NULL;
    ct_config *cfg = NULL;
    ct_experiment *e = NULL;
    ct_graph *g = NULL;
    ct_experiment_params ep = ct_experiment_default_params();
    ep.read_only = true;
    ct_graph_params gp = ct_graph_default_params();
    int64_t step;
    if (ct_ctx_create(NULL, &ctx) != CT_OK) return 1;
    if (ct_config_load_file(ctx, path, &cfg) != CT_OK ||
        ct_config_set(cfg, "output_dir", run, true) != CT_OK ||
        ct_experiment_resolve(ctx, cfg) != CT_OK || ct_experiment_create(ctx, cfg, &ep, &e))
        return fail(ctx, "opening the run");
    if (ct_experiment_load(e, "latest", &step) != CT_OK) return fail(ctx, "loading");
    if (ct_graph_create(ctx, &gp, &g) != CT_OK) return fail(ctx, "graph");
    ct_graph_set_grad_enabled(g, false);
    ct_graph_set_training(g, false);
    ct_tensor *x = ct_graph_wrap(g, ids, CT_I64, 2, (int64_t[]){n, t});
    ct_tensor *y = x ? ct_model_forward(ct_experiment_model(e), g, x) : NULL;
    if (!y) return fail(ctx, "forward");
    f = fopen(argv[5], "wb");
    size_t numel = (size_t)ct_tensor_numel(y);
    if (!f || fwrite(y->data, sizeof(float), numel, f) != numel || fclose(f) != 0)
        return fail(NULL, argv[5]);
    ct_graph_destroy(g);
    ct_experiment_destroy(e);
    ct_config_destroy(cfg);
    ct_ctx_destroy(ctx);
    free(ids);
    return 0;
}
