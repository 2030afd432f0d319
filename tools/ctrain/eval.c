/*
 * eval.c - the commands that open an experiment read-only: eval (score a checkpoint on every
 * evaluation dataset), predict (a checkpoint's predictions for a file, or text sampled from a
 * language model) and config (check a configuration and print it resolved). Nothing is
 * trained or written into the run directory; eval --follow (follow.c) writes RUN/eval/ only.
 *
 * Ownership: each command opens its context, configuration and experiment in ro_begin and
 * frees them in ro_end.
 */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "ctrain/checkpoint.h"

/* Whether the run's pointer file is there (whatever it holds, readable or not). */
bool cli_pointer_exists(const char *run, const char *name) {
    char path[4200];
    struct stat st;
    (void)snprintf(path, sizeof path, "%s/checkpoints/%s", run, name);
    return lstat(path, &st) == 0 || errno != ENOENT;
}

/* What the loaded weights are, for the messages: "the EMA weights of checkpoint latest (step
 * 12)", "the weights of FILE". */
static void
describe_weights(char *buf, size_t size, const char *which, int64_t step, ct_weights_kind kind) {
    if (kind == CT_WEIGHTS_FILE)
        (void)snprintf(buf, size, "the weights of %s", which);
    else
        (void)snprintf(buf, size, "the %s weights of checkpoint %s (step %lld)",
                       kind == CT_WEIGHTS_EMA ? "EMA" : "trained", which, (long long)step);
}

/* Loads `*which` into the experiment: 0, or the exit code once the reason is said. 1 is damage
 * (a checkpoint that fails its checks, a damaged `best` or one naming no checkpoint, a `latest`
 * with no intact checkpoint to fall back to), 2 a wrong request (no checkpoint there, or one
 * that does not fit the model, or a weights file that is not the model's). The default "best"
 * means "latest" in a run that never saved a best (no monitor), said on stderr; a damaged
 * `best` is never a reason to score other weights. A name ending in .safetensors is a weights
 * file, read whatever the run directory holds. */
static int load_checkpoint(ct_ctx *ctx,
                           ct_experiment *e,
                           const char **which,
                           bool ema,
                           int64_t *step,
                           ct_weights_kind *kind) {
    size_t n = strlen(*which), k = strlen(".safetensors");
    if (n > k && strcmp(*which + n - k, ".safetensors") == 0) {
        ct_status st = ct_experiment_load_with(e, *which, ema, step, kind);
        return st == CT_OK ? 0 : cli_fail(ctx, st == CT_ERR_OOM ? EXIT_RUN_FAILED : EXIT_USAGE);
    }
    const char *root = ct_experiment_output_dir(e);
    bool best = strcmp(*which, "best") == 0;
    if (best && !cli_pointer_exists(root, "best")) {
        (void)fprintf(stderr, "ctrain: %s has no best checkpoint: using latest\n", root);
        *which = "latest";
        best = false;
    }
    char dir[4200];
    ct_status st = ct_checkpoint_resolve(ctx, root, *which, dir, sizeof dir, NULL);
    if (st != CT_OK && best) {
        (void)ct_err_wrap(ctx, "the best checkpoint cannot be used (hint: --checkpoint latest or "
                               "step-N names another)");
        return cli_fail(ctx, EXIT_RUN_FAILED);
    }
    if (st != CT_OK) return cli_fail(ctx, st == CT_ERR_IO ? EXIT_USAGE : EXIT_RUN_FAILED);
    st = ct_experiment_load_with(e, dir, ema, step, kind);
    if (st != CT_OK) return cli_fail(ctx, st == CT_ERR_OOM ? EXIT_RUN_FAILED : EXIT_USAGE);
    return 0;
}

/* What eval, predict and config share: the arguments, the context and the configuration and
 * experiment opened read-only (nothing is trained or written into the run directory). */
typedef struct ro_cmd {
    cmd_args a;
    char **ov;
    session s;
    ct_ctx *ctx;
    ct_config *cfg;
    ct_experiment *e;
} ro_cmd;

/* Parses the arguments and, unless help was asked, opens everything. Returns -1 to go on, or
 * the exit code (0 after help) once ro_end has cleaned up. */
static int ro_begin(ro_cmd *c, const char *name, int argc, char **argv) {
    memset(c, 0, sizeof *c);
    if (!(c->ov = calloc((size_t)argc + 1, sizeof(char *)))) return EXIT_RUN_FAILED;
    int rc = cli_parse_args(name, argc, argv, &c->a, c->ov);
    if (!rc && c->a.help) cli_cmd_usage(stdout, name);
    if (!rc && !c->a.help && !c->a.config) {
        (void)fprintf(stderr, "ctrain %s: missing CONFIG\n", name);
        rc = EXIT_USAGE;
    }
    if (!rc && !c->a.help && strcmp(name, "predict") == 0 && !c->a.prompt && !c->a.prompts_file &&
        (!c->a.input || !c->a.output)) {
        (void)fprintf(stderr, "ctrain predict: needs --input FILE and --output FILE, or "
                              "--prompt TEXT or --prompts-file FILE for a language model\n");
        rc = EXIT_USAGE;
    }
    if (rc || c->a.help) {
        free(c->ov);
        return rc;
    }
    if ((rc = cli_open_session(&c->s, &c->ctx)) != 0) {
        free(c->ov);
        return rc;
    }
    c->s.quiet = true;
    c->s.progress = PROGRESS_NONE;
    ct_status st = cli_load_config(c->ctx, c->a.config, c->a.overrides, c->a.n_overrides, &c->cfg);
    if (st == CT_OK) {
        const ct_cfg_node *threads = ct_config_find(ct_config_root(c->cfg), "threads");
        (void)ct_ctx_set_threads(c->ctx, atoll(threads->value));
        ct_experiment_params ep = ct_experiment_default_params();
        ep.read_only = true;
        st = ct_experiment_create(c->ctx, c->cfg, &ep, &c->e);
    }
    return st == CT_OK ? -1 : cli_fail(c->ctx, cli_setup_code(st));
}

static int ro_end(ro_cmd *c, int rc) {
    ct_experiment_destroy(c->e);
    ct_config_destroy(c->cfg);
    ct_ctx_destroy(c->ctx);
    free(c->ov);
    return rc;
}

int cli_cmd_predict(int argc, char **argv) {
    ro_cmd c;
    int rc = ro_begin(&c, "predict", argc, argv);
    if (rc >= 0) return c.ctx ? ro_end(&c, rc) : rc;
    const char *which = c.a.checkpoint;
    int64_t step = 0;
    ct_weights_kind kind = CT_WEIGHTS_TRAINED;
    int failed = load_checkpoint(c.ctx, c.e, &which, !c.a.no_ema, &step, &kind);
    if (failed) return ro_end(&c, failed);
    char weights[4400];
    describe_weights(weights, sizeof weights, which, step, kind);
    ct_status st;
    if (c.a.prompt || c.a.prompts_file) return ro_end(&c, cli_generate(c.ctx, c.e, &c.a, weights));
    ct_predict_params pp = ct_predict_default_params();
    pp.logits = c.a.logits;
    bool to_stdout = strcmp(c.a.output, "-") == 0;
    if (to_stdout) pp.stream = stdout;
    st = ct_experiment_predict_with(c.e, c.a.input, c.a.output, &pp);
    if (st != CT_OK)
        return ro_end(&c,
                      cli_fail(c.ctx, st == CT_ERR_OOM || st == CT_ERR_INTERNAL ? EXIT_RUN_FAILED
                                                                                : EXIT_USAGE));
    (void)fprintf(stderr, "ctrain predict: %s -> %s%s with %s\n", c.a.input,
                  to_stdout ? "stdout" : c.a.output, pp.logits ? " (logits)" : "", weights);
    return ro_end(&c, 0);
}

int cli_cmd_eval(int argc, char **argv) {
    ro_cmd c;
    int rc = ro_begin(&c, "eval", argc, argv);
    if (rc >= 0) return c.ctx ? ro_end(&c, rc) : rc;
    int64_t n_eng;
    const char *const *keys = ct_experiment_engines(c.e, &n_eng);
    if (n_eng == 0) {
        (void)fprintf(stderr, "ctrain eval: %s has no data.valid or data.test to evaluate on\n",
                      c.a.config);
        return ro_end(&c, EXIT_USAGE);
    }
    if (c.a.follow) return ro_end(&c, cli_follow(c.ctx, c.cfg, c.e, &c.a));
    const char *picked[16];
    int n_picked = 0;
    if (cli_choose_splits(c.e, c.a.split, picked, 16, &n_picked) != 0)
        return ro_end(&c, EXIT_USAGE);
    keys = picked;
    n_eng = n_picked;
    const char *which = c.a.checkpoint;
    int64_t step = 0;
    ct_weights_kind kind = CT_WEIGHTS_TRAINED;
    int failed = load_checkpoint(c.ctx, c.e, &which, !c.a.no_ema, &step, &kind);
    if (failed) return ro_end(&c, failed);
    char weights[4400];
    describe_weights(weights, sizeof weights, which, step, kind);
    (void)fprintf(stderr, "ctrain eval: scoring %s\n", weights);
    json_t *obj = json_object();
    (void)json_object_set_new(obj, "step",
                              step >= 0 ? json_integer((json_int_t)step) : json_null());
    (void)json_object_set_new(obj, "checkpoint", json_string(which));
    (void)json_object_set_new(obj, "weights",
                              json_string(kind == CT_WEIGHTS_EMA    ? "ema"
                                          : kind == CT_WEIGHTS_FILE ? "file"
                                                                    : "trained"));
    ct_trainer *t = ct_experiment_trainer(c.e);
    for (int64_t k = 0; k < n_eng && rc < 0; k++) {
        if (ct_trainer_evaluate(t, keys[k]) != CT_OK) {
            rc = cli_fail(c.ctx, EXIT_RUN_FAILED);
            break;
        }
        int64_t n;
        const ct_metric_value *v = ct_trainer_metrics(t, keys[k], &n);
        if (!c.a.json && step >= 0)
            (void)printf("%s (step %lld):", keys[k], (long long)step);
        else if (!c.a.json)
            (void)printf("%s (%s):", keys[k], which);
        for (int64_t i = 0; i < n; i++) {
            if (c.a.json)
                (void)json_object_set_new(
                    obj, v[i].name, isfinite(v[i].value) ? json_real(v[i].value) : json_null());
            else
                (void)printf(" %s %.6g", v[i].name, v[i].value);
        }
        if (!c.a.json) (void)printf("\n");
    }
    if (rc < 0 && c.a.json) {
        char *txt = json_dumps(obj, JSON_COMPACT | JSON_REAL_PRECISION(17));
        if (txt) (void)printf("%s\n", txt);
        free(txt);
    }
    json_decref(obj);
    return ro_end(&c, rc < 0 ? 0 : rc);
}

/* Valid means fit would start: ro_begin has checked the schema, built every component (their
 * keys checked, the data files opened) and filled in the `auto` lengths. */
int cli_cmd_config(int argc, char **argv) {
    /* --reference needs no CONFIG */
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--reference") == 0) {
            if (argc != 2) {
                (void)fprintf(stderr, "ctrain config: --reference takes no CONFIG\n");
                return EXIT_USAGE;
            }
            ct_experiment_write_reference(stdout);
            return 0;
        }
    ro_cmd c;
    int rc = ro_begin(&c, "config", argc, argv);
    if (rc >= 0) return c.ctx ? ro_end(&c, rc) : rc;
    char fp[17];
    ct_experiment_fingerprint(c.cfg, fp);
    (void)printf("# %s resolved (fingerprint %s)\n", c.a.config, fp);
    return ro_end(&c,
                  ct_config_write(c.cfg, stdout) == CT_OK ? 0 : cli_fail(c.ctx, EXIT_RUN_FAILED));
}

int cli_load_weights(ct_ctx *ctx,
                     ct_experiment *e,
                     const char **which,
                     bool ema,
                     int64_t *step,
                     ct_weights_kind *kind) {
    return load_checkpoint(ctx, e, which, ema, step, kind);
}
