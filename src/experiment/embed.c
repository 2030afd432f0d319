/*
 * embed.c - the experiment API for programs that reach the library through a foreign-function
 * interface (the Python package in python/): a configuration loaded from a file or a run
 * directory with overrides, an experiment opened with flags and a plain progress callback
 * instead of the params and callback structs, and predictions for samples in memory.
 *
 * Ownership: the caller's progress struct, feature and output arrays are borrowed; what the
 * predictions open (a dataset over the caller's array, a loader, a graph) is closed before
 * ct_experiment_predict_array returns.
 */
#include <math.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "experiment_internal.h"

ct_status ct_experiment_load_config(ct_ctx *ctx,
                                    const char *path,
                                    const char *const *overrides,
                                    int64_t n_overrides,
                                    ct_config **out) {
    *out = NULL;
    if (!path || n_overrides < 0 || (n_overrides > 0 && !overrides))
        return CT_FAIL(ctx, CT_ERR_INVALID_ARG, "load_config: a path and the overrides' array");
    char run_config[PATH_MAX + 16], own_dir[2 * PATH_MAX + 2] = "", cwd[PATH_MAX];
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        if (path[0] == '/' || !getcwd(cwd, sizeof cwd))
            (void)snprintf(own_dir, sizeof own_dir, "%s", path);
        else
            (void)snprintf(own_dir, sizeof own_dir, "%s/%s", cwd, path);
        (void)snprintf(run_config, sizeof run_config, "%s/config.yaml", path);
        if (access(run_config, F_OK) != 0)
            return CT_FAIL(ctx, CT_ERR_IO,
                           "%s: a directory without config.yaml; expected an experiment file or "
                           "a run directory",
                           path);
        path = run_config;
    }
    ct_config *cfg = NULL;
    CT_TRY(ct_config_load_file(ctx, path, &cfg));
    /* set as text, not parsed as YAML, so any folder name is its own; absolute, as it was
       given from the current directory */
    ct_status s = own_dir[0] ? ct_config_set(cfg, "output_dir", own_dir, true) : CT_OK;
    for (int64_t i = 0; s == CT_OK && i < n_overrides; i++)
        s = ct_experiment_override(cfg, overrides[i]);
    if (s == CT_OK) s = ct_experiment_resolve(ctx, cfg);
    if (s != CT_OK) {
        ct_config_destroy(cfg);
        return s;
    }
    *out = cfg;
    return CT_OK;
}

/* ---- progress: the trainer's events as (event, step, epoch, values) ---- */

/* step: the steps made, or with made_steps false the step under way (a batch's, from 1). */
static ct_status report(ct_experiment_progress *p,
                        ct_trainer *t,
                        const char *event,
                        bool made_steps,
                        const ct_metric_value *values,
                        int64_t n) {
    int64_t step = ct_trainer_step(t) + (made_steps ? 0 : 1);
    return p->fn(p->user, event, step, ct_trainer_current_epoch(t), values, n);
}

static ct_status on_log(void *user, ct_trainer *t, const ct_metric_value *values, int64_t n) {
    return report(user, t, "log", true, values, n);
}

static ct_status
on_eval_end(void *user, ct_trainer *t, const char *key, const ct_metric_value *values, int64_t n) {
    (void)key; /* every value's name starts with it */
    return report(user, t, "eval", true, values, n);
}

/* Training micro-batches only: evaluations report once, at their end. */
static ct_status
on_batch(void *user, ct_trainer *t, const char *split, int64_t done, int64_t total, double loss) {
    if (strcmp(split, "train") != 0) return CT_OK;
    const ct_metric_value v[] = {
        {"loss", loss}, {"batch", (double)done}, {"batches", (double)total}};
    return report(user, t, "batch", false, v, 3);
}

static ct_status on_epoch_end(void *user, ct_trainer *t, int64_t epoch) {
    (void)epoch;
    return report(user, t, "epoch", true, NULL, 0);
}

static ct_status on_fit_end(void *user, ct_trainer *t) {
    return report(user, t, "end", true, NULL, 0);
}

ct_status ct_experiment_open(ct_ctx *ctx,
                             ct_config *resolved,
                             unsigned flags,
                             ct_experiment_progress *progress,
                             ct_experiment **out) {
    *out = NULL;
    if (flags & ~(CT_EXPERIMENT_READ_ONLY | CT_EXPERIMENT_RESTART))
        return CT_FAIL(ctx, CT_ERR_INVALID_ARG, "experiment_open: unknown flags 0x%x", flags);
    if (progress && !progress->fn)
        return CT_FAIL(ctx, CT_ERR_INVALID_ARG, "experiment_open: a progress without fn");
    const ct_cfg_node *threads = ct_config_find(ct_config_root(resolved), "threads");
    int64_t n_threads = 0; /* `auto`: every core */
    if (!threads || !threads->value || !ct_exp_parse_int(threads->value, &n_threads)) n_threads = 0;
    CT_TRY(ct_ctx_set_threads(ctx, n_threads));
    ct_experiment_params p = ct_experiment_default_params();
    p.read_only = (flags & CT_EXPERIMENT_READ_ONLY) != 0;
    p.restart = (flags & CT_EXPERIMENT_RESTART) != 0;
    if (progress) {
        p.callbacks.on_batch = on_batch;
        p.callbacks.on_log = on_log;
        p.callbacks.on_eval_end = on_eval_end;
        p.callbacks.on_epoch_end = on_epoch_end;
        p.callbacks.on_fit_end = on_fit_end;
        p.callbacks.user = progress;
    }
    return ct_experiment_create(ctx, resolved, &p, out);
}

int64_t ct_experiment_output_size(const ct_experiment *e) {
    int64_t shape[CT_MAX_DIMS];
    int32_t nd = ct_model_output_shape(e->model, shape);
    int64_t c = 1;
    for (int32_t i = 0; i < nd; i++)
        c *= shape[i];
    return c;
}

/* ---- predictions for samples in memory ---- */

/*
 * The caller's array as a dataset, so that the evaluation loader applies the same transforms as
 * to a file's samples. The dataset interface hands `open` only its options, so the options
 * struct is the first member of what it describes and open finds the array from it.
 */
typedef struct mem_samples {
    ct_options o; /* first: open's opts points here */
    const float *x;
    int64_t n;
    int32_t ndim;
    const int64_t *shape;
    size_t sample_floats;
} mem_samples;

static ct_status mem_open(ct_ctx *ctx, const ct_options *opts, ct_dataset_info *info, void **self) {
    (void)ctx;
    const mem_samples *m = (const mem_samples *)(const void *)opts;
    *self = NULL;
    if (!info) return CT_OK;
    memset(info, 0, sizeof *info);
    info->n = m->n;
    info->x_dtype = CT_F32;
    info->x_ndim = m->ndim;
    memcpy(info->x_shape, m->shape, sizeof(int64_t) * (size_t)m->ndim);
    info->y_dtype = CT_I64;       /* unlabelled: every target is class 0, as the npy type's */
    *self = (void *)(uintptr_t)m; /* the dataset only reads it (mem_get) */
    return CT_OK;
}

static ct_status mem_get(const void *self, int64_t i, void *x, void *y) {
    const mem_samples *m = self;
    memcpy(x, m->x + (size_t)i * m->sample_floats, sizeof(float) * m->sample_floats);
    *(int64_t *)y = 0;
    return CT_OK;
}

static void mem_close(ct_ctx *ctx, void *self) {
    (void)ctx;
    (void)self;
}

static const ct_dataset_vtable mem_type = {
    .name = "array", .open = mem_open, .get = mem_get, .close = mem_close};

/* What predict_array takes: a model that is not a language model (logits only from a
 * classifier), samples of the training data's shape, finite unless data.nonfinite allows, and
 * room for every row. */
static ct_status check_array(ct_experiment *e, const mem_samples *m, bool logits, int64_t count) {
    ct_ctx *ctx = e->ctx;
    if (e->task.kind == CT_TASK_LANGUAGE_MODEL)
        return CT_FAIL(ctx, CT_ERR_CONFIG, "predict: language models are not supported");
    if (logits && e->task.kind != CT_TASK_CLASSIFICATION)
        return CT_FAIL(ctx, CT_ERR_CONFIG,
                       "predict: logits are a classifier's scores; this model's outputs are "
                       "its values");
    char a[160] = "", b[160] = "";
    bool same = m->ndim == e->info.x_ndim;
    for (int32_t i = 0; i < m->ndim && i < CT_MAX_DIMS; i++) {
        (void)snprintf(a + strlen(a), sizeof a - strlen(a), "%s%lld", i ? ", " : "",
                       (long long)m->shape[i]);
        same = same && m->shape[i] == e->info.x_shape[i];
    }
    for (int32_t i = 0; i < e->info.x_ndim; i++)
        (void)snprintf(b + strlen(b), sizeof b - strlen(b), "%s%lld", i ? ", " : "",
                       (long long)e->info.x_shape[i]);
    if (!same || m->n < 0)
        return CT_FAIL(ctx, CT_ERR_SHAPE,
                       "predict: %lld samples of shape [%s], but the model takes the training "
                       "data's [%s]",
                       (long long)m->n, a, b);
    int64_t need = m->n * ct_experiment_output_size(e);
    if (count != need)
        return CT_FAIL(ctx, CT_ERR_SHAPE,
                       "predict: room for %lld outputs, expected %lld (%lld samples of %lld)",
                       (long long)count, (long long)need, (long long)m->n,
                       (long long)ct_experiment_output_size(e));
    if (strcmp(ct_exp_str_at(e, "data.nonfinite"), "allow") == 0) return CT_OK;
    size_t total = (size_t)m->n * m->sample_floats;
    for (size_t i = 0; i < total; i++)
        if (!isfinite(m->x[i]))
            return CT_FAIL(ctx, CT_ERR_FORMAT,
                           "predict: sample %lld, feature %lld is %g (data.nonfinite: allow keeps "
                           "such values)",
                           (long long)(i / m->sample_floats), (long long)(i % m->sample_floats),
                           (double)m->x[i]);
    return CT_OK;
}

ct_status ct_experiment_predict_array(ct_experiment *e,
                                      const float *x,
                                      int64_t n,
                                      const int64_t *sample_shape,
                                      int32_t ndim,
                                      bool logits,
                                      float *out,
                                      int64_t out_count) {
    ct_ctx *ctx = e->ctx;
    if (ndim < 0 || ndim > CT_MAX_DIMS || (ndim > 0 && !sample_shape) || (n > 0 && (!x || !out)))
        return CT_FAIL(ctx, CT_ERR_INVALID_ARG, "predict: a sample shape of 0..%d dims, and arrays",
                       CT_MAX_DIMS);
    mem_samples m = {.x = x, .n = n, .ndim = ndim, .shape = sample_shape, .sample_floats = 1};
    m.o.where = "predict: input";
    for (int32_t i = 0; i < ndim; i++)
        m.sample_floats *= (size_t)(sample_shape[i] > 0 ? sample_shape[i] : 0);
    CT_TRY(check_array(e, &m, logits, out_count));
    if (n == 0) return CT_OK;
    ct_dataset *ds = NULL;
    ct_loader *l = NULL;
    ct_graph *g = NULL;
    CT_TRY(ct_dataset_open_with(ctx, &mem_type, &m.o, &ds));
    ct_loader_params lp = e->eval_lp;
    lp.to_f32 = true;
    ct_status s = ct_loader_create(ctx, ds, &lp, &l);
    if (s == CT_OK) s = ct_exp_eval_graph(e, &g);
    int64_t c = ct_experiment_output_size(e);
    bool classify = e->task.kind == CT_TASK_CLASSIFICATION;
    ct_batch b;
    while (s == CT_OK && (s = ct_loader_next(l, &b)) == CT_OK && b.size > 0) {
        ct_graph_reset(g);
        ct_tensor *xt = ct_graph_wrap(g, b.x.data, b.x.dtype, b.x.ndim, b.x.shape);
        ct_tensor *y = xt ? ct_model_forward(e->model, g, xt) : NULL;
        if (!y) {
            s = ct_graph_status(g) != CT_OK ? ct_graph_status(g) : CT_ERR_INTERNAL;
            if (ct_last_status(ctx) == CT_OK) s = CT_FAIL(ctx, s, "predict: the model failed");
            break;
        }
        const float *yp = y->data;
        for (int64_t i = 0; i < b.size; i++) {
            int64_t arg;
            ct_exp_predict_row(yp + i * c, c, classify, logits, out + b.index[i] * c, &arg);
        }
    }
    ct_graph_destroy(g);
    ct_loader_destroy(l);
    ct_dataset_close(ds);
    return s;
}
