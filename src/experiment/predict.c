/*
 * predict.c - a trained experiment's model used on new inputs: predictions for a .npy array of
 * samples (class probabilities, logits or values, as CSV or .npy, or CSV to a stream; CSV
 * names each sample's class when data.classes gives names). They run in evaluation mode
 * without gradients, in trainer.precision, and change nothing in the run directory. Text from
 * a language model is generate.c's.
 *
 * Ownership: the caller loads the weights first (ct_experiment_load); what these functions
 * open (the input, a loader, a graph, buffers) they close before returning. Predictions are
 * written to OUTPUT.tmp and renamed over OUTPUT only when complete; a stream given in the
 * params is the caller's, flushed but not closed.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/core_internal.h"
#include "experiment_internal.h"

/* The .npy header for a float32 [n, c] array, padded so the data starts at a multiple of 64. */
static void write_npy_header(FILE *f, int64_t n, int64_t t, int64_t c) {
    char dict[128], shape[80];
    if (t > 0) /* a language model's [N, T, vocab] */
        (void)snprintf(shape, sizeof shape, "%lld, %lld, %lld", (long long)n, (long long)t,
                       (long long)(c / t));
    else
        (void)snprintf(shape, sizeof shape, "%lld, %lld", (long long)n, (long long)c);
    int len = snprintf(dict, sizeof dict,
                       "{'descr': '<f4', 'fortran_order': False, 'shape': (%s), }", shape);
    size_t total = 10 + (size_t)len + 1;
    size_t pad = (64 - total % 64) % 64;
    size_t hlen = (size_t)len + pad + 1;
    unsigned char pre[10] = {0x93,
                             'N',
                             'U',
                             'M',
                             'P',
                             'Y',
                             1,
                             0,
                             (unsigned char)(hlen & 0xff),
                             (unsigned char)(hlen >> 8)};
    (void)fwrite(pre, 1, sizeof pre, f);
    (void)fwrite(dict, 1, (size_t)len, f);
    for (size_t i = 0; i < pad; i++)
        (void)fputc(' ', f);
    (void)fputc('\n', f);
}

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

ct_status ct_exp_eval_graph(ct_experiment *e, ct_graph **g) {
    ct_graph_params gp = ct_graph_default_params();
    CT_TRY(ct_graph_create(e->ctx, &gp, g));
    CT_TRY(ct_graph_set_autocast(*g, ct_exp_precision_at(e)));
    ct_graph_set_grad_enabled(*g, false);
    ct_graph_set_training(*g, false);
    return CT_OK;
}

/* The status when the model gave no output: the graph's, with a message unless one was left. */
static ct_status forward_failed(ct_ctx *ctx, ct_graph *g, const char *what) {
    ct_status s = ct_graph_status(g) != CT_OK ? ct_graph_status(g) : CT_ERR_INTERNAL;
    if (ct_last_status(ctx) == CT_OK) s = CT_FAIL(ctx, s, "%s: the model failed", what);
    return s;
}

/* ---- predictions ---- */

/* What predict takes: a model that is not a language model (logits only from a classifier), a
 * .npy input and a .csv or .npy output (*npy_out) unless the rows go to a stream (CSV). */
static ct_status check_paths(ct_experiment *e,
                             const char *input,
                             const char *output,
                             const ct_predict_params *pp,
                             bool *npy_out) {
    ct_ctx *ctx = e->ctx;
    bool lm = e->task.kind == CT_TASK_LANGUAGE_MODEL;
    if (lm && (!pp->logits || pp->stream || !output || !ends_with(output, ".npy")))
        return CT_FAIL(ctx, CT_ERR_CONFIG,
                       "predict: a language model gives its logits: --logits with a .npy output "
                       "([N, T, vocab] float32 for token ids [N, T]); or --prompt TEXT to sample");
    if (pp->logits && !lm && e->task.kind != CT_TASK_CLASSIFICATION)
        return CT_FAIL(ctx, CT_ERR_CONFIG,
                       "predict: logits are a classifier's scores; this model's outputs are "
                       "its values");
    if (pp->stream) output = "stream.csv";
    if (!output || strlen(output) > 1000 || strlen(input) > 1000)
        return CT_FAIL(ctx, CT_ERR_CONFIG, "predict: a path longer than 1000 bytes, or none");
    *npy_out = ends_with(output, ".npy");
    if (!*npy_out && !ends_with(output, ".csv"))
        return CT_FAIL(ctx, CT_ERR_CONFIG, "predict: output '%s': expected a .csv or .npy name",
                       output);
    if (!ends_with(input, ".npy"))
        return CT_FAIL(ctx, CT_ERR_CONFIG, "predict: input '%s': expected a .npy array", input);
    return CT_OK;
}

/* The input's samples must have the shape of the training data's. */
static ct_status check_input(ct_experiment *e, const char *input, const ct_dataset_info *di) {
    bool same = di->x_ndim == e->info.x_ndim &&
                memcmp(di->x_shape, e->info.x_shape, sizeof(int64_t) * (size_t)di->x_ndim) == 0;
    if (same) return CT_OK;
    char a[128] = "", b[128] = "";
    for (int32_t i = 0; i < di->x_ndim; i++)
        (void)snprintf(a + strlen(a), sizeof a - strlen(a), "%s%lld", i ? ", " : "",
                       (long long)di->x_shape[i]);
    for (int32_t i = 0; i < e->info.x_ndim; i++)
        (void)snprintf(b + strlen(b), sizeof b - strlen(b), "%s%lld", i ? ", " : "",
                       (long long)e->info.x_shape[i]);
    return CT_FAIL(e->ctx, CT_ERR_SHAPE,
                   "%s: samples of shape [%s], but the model takes the training data's [%s]", input,
                   a, b);
}

/* A CSV file's header line (index, the class and its name when data.classes gives names, then
 * a column per output), or the .npy header for n rows of c floats. */
static void write_header(FILE *f,
                         bool npy_out,
                         bool classify,
                         bool named,
                         bool logits,
                         int64_t n,
                         int64_t t,
                         int64_t c) {
    if (npy_out) {
        write_npy_header(f, n, t, c);
        return;
    }
    (void)fputs(!classify ? "index" : named ? "index,class,class_name" : "index,class", f);
    for (int64_t j = 0; j < c; j++)
        (void)fprintf(f, logits ? ",logit_%lld" : classify ? ",p_%lld" : ",y_%lld", (long long)j);
    (void)fputc('\n', f);
}

void ct_exp_predict_row(
    const float *r, int64_t c, bool classify, bool logits, float *row, int64_t *arg) {
    *arg = 0;
    if (!classify || logits) memcpy(row, r, sizeof(float) * (size_t)c);
    if (!classify) return;
    double mx = (double)r[0], sum = 0;
    for (int64_t j = 1; j < c; j++)
        if ((double)r[j] > mx) {
            mx = (double)r[j];
            *arg = j;
        }
    if (logits) return;
    for (int64_t j = 0; j < c; j++)
        sum += exp((double)r[j] - mx);
    for (int64_t j = 0; j < c; j++)
        row[j] = (float)(exp((double)r[j] - mx) / sum);
}

/* A CSV field: as it is, or in double quotes (doubled inside) when it holds a comma, a quote or
 * a line break (RFC 4180). */
static void write_field(FILE *f, const char *v) {
    if (!v[strcspn(v, ",\"\r\n")]) {
        (void)fputs(v, f);
        return;
    }
    (void)fputc('"', f);
    for (; *v; v++) {
        if (*v == '"') (void)fputc('"', f);
        (void)fputc(*v, f);
    }
    (void)fputc('"', f);
}

/* names: data.classes' names, or NULL; a class past them (a model with more outputs than the
 * data has classes) gets an empty name. */
static void write_row(FILE *f,
                      bool npy_out,
                      bool classify,
                      const ct_config_classes *names,
                      int64_t index,
                      int64_t arg,
                      const float *row,
                      int64_t c) {
    if (npy_out) {
        (void)fwrite(row, sizeof(float), (size_t)c, f);
        return;
    }
    (void)fprintf(f, "%lld", (long long)index);
    if (classify) (void)fprintf(f, ",%lld", (long long)arg);
    if (classify && names) {
        (void)fputc(',', f);
        write_field(f, arg < names->n ? names->names[arg] : "");
    }
    for (int64_t j = 0; j < c; j++)
        (void)fprintf(f, ",%.9g", (double)row[j]);
    (void)fputc('\n', f);
}

/* A language model's input: the batch's numbers (f32 from the .npy) as i64 token ids, each a
 * whole number in [0, vocab). */
static ct_status token_ids(ct_experiment *e, ct_graph *g, const ct_batch *b, ct_tensor **x) {
    int64_t shape[CT_MAX_DIMS];
    int32_t nd = ct_model_output_shape(e->model, shape);
    int64_t vocab = shape[nd - 1];
    ct_tensor *ids = ct_graph_new(g, CT_I64, (*x)->ndim, (*x)->shape);
    if (!ids) return forward_failed(e->ctx, g, "predict");
    const float *v = (*x)->data;
    int64_t *out = ids->data, n = ct_tensor_numel(ids), per = n / (*x)->shape[0];
    for (int64_t i = 0; i < n; i++) {
        if (!(v[i] >= 0.0f && v[i] < (float)vocab && v[i] == (float)(int64_t)v[i]))
            return CT_FAIL(e->ctx, CT_ERR_FORMAT,
                           "predict: sample %lld, position %lld: %.9g is not a token id in [0, "
                           "%lld)",
                           (long long)b->index[i / per], (long long)(i % per), (double)v[i],
                           (long long)vocab);
        out[i] = (int64_t)v[i];
    }
    *x = ids;
    return CT_OK;
}

/* The model over every batch of l, a row per sample into f; row holds c floats. */
static ct_status predict_batches(ct_experiment *e,
                                 ct_loader *l,
                                 ct_graph *g,
                                 FILE *f,
                                 bool npy_out,
                                 bool logits,
                                 float *row,
                                 int64_t c) {
    bool classify = e->task.kind == CT_TASK_CLASSIFICATION;
    const ct_config_classes *names = e->classes.n > 0 ? &e->classes : NULL;
    ct_status s;
    ct_batch b;
    while ((s = ct_loader_next(l, &b)) == CT_OK && b.size > 0) {
        ct_graph_reset(g);
        ct_tensor *x = ct_graph_wrap(g, b.x.data, b.x.dtype, b.x.ndim, b.x.shape);
        if (x && e->task.kind == CT_TASK_LANGUAGE_MODEL) CT_TRY(token_ids(e, g, &b, &x));
        ct_tensor *out = x ? ct_model_forward(e->model, g, x) : NULL;
        if (!out) return forward_failed(e->ctx, g, "predict");
        const float *outp = out->data;
        for (int64_t i = 0; i < b.size; i++) {
            int64_t arg;
            ct_exp_predict_row(outp + i * c, c, classify, logits, row, &arg);
            write_row(f, npy_out, classify, names, b.index[i], arg, row, c);
        }
    }
    return s;
}

/* Closes f, written as tmp: renamed to output when everything before succeeded (s) and the
 * data reached the disk, else removed. */
static ct_status
finish_output(ct_ctx *ctx, FILE *f, const char *tmp, const char *output, ct_status s) {
    if ((fflush(f) != 0 || ferror(f) || fsync(fileno(f)) != 0) && s == CT_OK)
        s = CT_FAIL(ctx, CT_ERR_IO, "%s: write failed: %s", tmp, strerror(errno));
    (void)fclose(f);
    if (s == CT_OK && rename(tmp, output) != 0)
        s = CT_FAIL(ctx, CT_ERR_IO, "%s: cannot rename to %s: %s", tmp, output, strerror(errno));
    if (s != CT_OK) (void)remove(tmp);
    return s;
}

/* Flushes the caller's stream: the status, a failure said when everything before succeeded. */
static ct_status finish_stream(ct_ctx *ctx, FILE *f, ct_status s) {
    if ((fflush(f) != 0 || ferror(f)) && s == CT_OK)
        s = CT_FAIL(ctx, CT_ERR_IO, "predict: writing the predictions failed: %s", strerror(errno));
    return s;
}

ct_predict_params ct_predict_default_params(void) {
    ct_predict_params p = {.logits = false, .stream = NULL};
    return p;
}

ct_status ct_experiment_predict(ct_experiment *e, const char *input, const char *output) {
    return ct_experiment_predict_with(e, input, output, NULL);
}

ct_status ct_experiment_predict_with(ct_experiment *e,
                                     const char *input,
                                     const char *output,
                                     const ct_predict_params *params) {
    ct_ctx *ctx = e->ctx;
    ct_predict_params pp = params ? *params : ct_predict_default_params();
    bool npy_out = false;
    CT_TRY(check_paths(e, input, output, &pp, &npy_out));
    ct_option items[2] = {{"features", input}, {"nonfinite", ct_exp_str_at(e, "data.nonfinite")}};
    ct_options o = {items, 2, "predict: input"};
    ct_dataset *ds = NULL;
    ct_loader *l = NULL;
    ct_graph *g = NULL;
    FILE *f = NULL;
    char tmp[1100];
    if (!pp.stream) (void)snprintf(tmp, sizeof tmp, "%s.tmp", output);
    CT_TRY(ct_dataset_open(ctx, "npy", &o, &ds));
    const ct_dataset_info *di = ct_dataset_info_of(ds);
    ct_status s = check_input(e, input, di);
    ct_loader_params lp = e->eval_lp;
    lp.to_f32 = true;
    if (s == CT_OK) s = ct_loader_create(ctx, ds, &lp, &l);
    if (s == CT_OK) s = ct_exp_eval_graph(e, &g);
    if (s == CT_OK && pp.stream) f = pp.stream;
    if (s == CT_OK && !f && !(f = fopen(tmp, "wb")))
        s = CT_FAIL(ctx, CT_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
    int64_t oshape[CT_MAX_DIMS];
    int32_t ond = ct_model_output_shape(e->model, oshape);
    int64_t c = 1;
    for (int32_t i = 0; i < ond; i++)
        c *= oshape[i];
    if (s == CT_OK)
        write_header(f, npy_out, e->task.kind == CT_TASK_CLASSIFICATION, e->classes.n > 0,
                     pp.logits, di->n, e->task.kind == CT_TASK_LANGUAGE_MODEL ? oshape[0] : 0, c);
    float *row = s == CT_OK ? ct_alloc(ctx, sizeof(float) * (size_t)c) : NULL;
    if (s == CT_OK && !row) s = CT_FAIL(ctx, CT_ERR_OOM, "predict: out of memory");
    if (s == CT_OK) s = predict_batches(e, l, g, f, npy_out, pp.logits, row, c);
    if (row) ct_free(ctx, row, sizeof(float) * (size_t)c);
    if (f && pp.stream)
        s = finish_stream(ctx, f, s);
    else if (f)
        s = finish_output(ctx, f, tmp, output, s);
    ct_graph_destroy(g);
    ct_loader_destroy(l);
    ct_dataset_close(ds);
    return s;
}
