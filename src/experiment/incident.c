/*
 * incident.c - incident bundles: for a step that on_nonfinite stopped, skipped or rolled back,
 * or a loss spike, RUN/incidents/step-N/ with incident.json (what happened, the window's
 * samples, the dropout stream, per-tensor statistics of weights and gradients) and a copy of
 * config.yaml.
 *
 * A bundle is a view of the run, as report.html is: it is written by rank 0 only, into
 * step-N.tmp/ then renamed, so a name without ".tmp" always holds a whole bundle, and a
 * failure to write it is a warning, kept out of the context's error (under on_nonfinite stop
 * that error is the run's; only running out of memory for the sample indices, where the
 * bundle says "samples": null, can replace it). At most trainer.max_incidents bundles per run
 * directory.
 */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ctrain/trainer.h"
#include "experiment/experiment_internal.h"

/* the run directory's folder, a bundle's path, a file's path in it */
#define DIR_SIZE  1100
#define PATH_SIZE 1200
#define FILE_SIZE 1240

ct_exp_stats ct_exp_stats_of(const float *x, int64_t n) {
    ct_exp_stats s = {.nonfinite = 0, .finite = 0, .min = 0.0, .max = 0.0, .l2 = 0.0};
    for (int64_t i = 0; i < n; i++) {
        double v = (double)x[i];
        if (!isfinite(v)) {
            s.nonfinite++;
            continue;
        }
        if (s.finite == 0 || v < s.min) s.min = v;
        if (s.finite == 0 || v > s.max) s.max = v;
        s.l2 += v * v;
        s.finite++;
    }
    s.l2 = sqrt(s.l2);
    return s;
}

/* A JSON number, or null for a value JSON cannot hold. */
static void put_num(FILE *f, double v) {
    if (isfinite(v))
        (void)fprintf(f, "%.9g", v);
    else
        (void)fputs("null", f);
}

/* s as a JSON string's contents (names come from the configuration: quotes and backslashes
 * escaped, control characters dropped). */
static void put_text(FILE *f, const char *s) {
    for (; s && *s; s++) {
        if (*s == '"' || *s == '\\') (void)fputc('\\', f);
        if ((unsigned char)*s >= 0x20) (void)fputc(*s, f);
    }
}

/* The statistics' entry of a tensor; l2 with 17 digits, which read back as the same double, so
 * that `ctrain replay` compares them bit for bit (min and max are floats: 9 digits do). */
static void put_tensor(FILE *f, const ct_tensor *t, const float *x) {
    ct_exp_stats s = ct_exp_stats_of(x, ct_tensor_numel(t));
    (void)fputs("\"shape\": [", f);
    for (int32_t d = 0; d < t->ndim; d++)
        (void)fprintf(f, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
    (void)fprintf(f, "], \"nonfinite\": %lld, \"min\": ", (long long)s.nonfinite);
    put_num(f, s.finite ? s.min : (double)NAN);
    (void)fputs(", \"max\": ", f);
    put_num(f, s.finite ? s.max : (double)NAN);
    (void)fputs(", \"l2\": ", f);
    if (isfinite(s.l2))
        (void)fprintf(f, "%.17g", s.l2);
    else
        (void)fputs("null", f);
    (void)fputc('}', f);
}

/* "weights" and "gradients": one entry per parameter, in model order. */
static void put_tensors(FILE *f, const ct_params *p) {
    for (int pass = 0; pass < 2; pass++) {
        (void)fprintf(f, ",\n  \"%s\": [", pass ? "gradients" : "weights");
        for (int64_t i = 0, k = 0; i < ct_params_count(p); i++) {
            const ct_tensor *t = ct_params_at(p, i);
            const float *x = pass ? t->grad : (const float *)t->data;
            if (!x || t->dtype != CT_F32) continue;
            (void)fputs(k++ ? ",\n    " : "\n    ", f);
            (void)fputs("{\"name\": \"", f);
            put_text(f, t->name);
            (void)fputs("\", ", f);
            put_tensor(f, t, x);
        }
        (void)fputs("\n  ]", f);
    }
}

/* "activations": each model layer's output in the step's graph, in forward order (layers
 * without one left out). */
static void put_activations(FILE *f, ct_experiment *e, const ct_incident *in) {
    (void)fputs(",\n  \"activations\": [", f);
    for (int64_t i = 0, k = 0; i < in->n_activations; i++) {
        const ct_tensor *t = in->activations[i];
        if (!t) continue;
        (void)fputs(k++ ? ",\n    " : "\n    ", f);
        (void)fputs("{\"name\": \"", f);
        put_text(f, ct_model_layer_name(e->model, i));
        (void)fputs("\", \"type\": \"", f);
        put_text(f, ct_model_layer_type(e->model, i));
        (void)fputs("\", ", f);
        put_tensor(f, t, (const float *)t->data);
    }
    (void)fputs("\n  ]", f);
}

/* "first_nonfinite_layer": where the first inf or NaN appeared, or null. */
static void put_first_layer(FILE *f, ct_experiment *e, const ct_incident *in) {
    (void)fputs(",\n  \"first_nonfinite_layer\": ", f);
    if (!in->nonfinite_pass) {
        (void)fputs("null", f);
        return;
    }
    const char *name = ct_model_layer_name(e->model, in->nonfinite_layer);
    (void)fprintf(f, "{\"pass\": \"%s\", \"index\": %lld, \"name\": ", in->nonfinite_pass,
                  (long long)in->nonfinite_layer);
    if (name) {
        (void)fputc('"', f);
        put_text(f, name);
        (void)fputs("\", \"type\": \"", f);
        put_text(f, ct_model_layer_type(e->model, in->nonfinite_layer));
        (void)fputc('"', f);
    } else {
        (void)fputs("null, \"type\": null", f);
    }
    (void)fprintf(f, ", \"op\": \"%s\", \"param\": ", in->nonfinite_op ? in->nonfinite_op : "");
    if (in->nonfinite_param) {
        (void)fputc('"', f);
        put_text(f, in->nonfinite_param);
        (void)fputc('"', f);
    } else {
        (void)fputs("null", f);
    }
    (void)fputc('}', f);
}

/* The step of a checkpoint directory's name "step-N" (not "step-N.tmp"), or -1. */
static int64_t checkpoint_step(const char *name) {
    if (strncmp(name, "step-", 5) != 0 || name[5] < '0' || name[5] > '9') return -1;
    char *end = NULL;
    errno = 0;
    long long v = strtoll(name + 5, &end, 10);
    return errno || *end ? -1 : (int64_t)v;
}

/* "replay_from": the newest checkpoint of the run saved before the incident's step, which
 * `ctrain replay` resumes from, or null when there is none (it trains from the seed). Read off
 * the folder itself, so that the context's error (the run's, under on_nonfinite stop) stays. */
static void put_replay_from(FILE *f, ct_experiment *e, const ct_incident *in) {
    char dir[DIR_SIZE];
    (void)snprintf(dir, sizeof dir, "%s/checkpoints", e->out_dir);
    int64_t from = -1;
    DIR *d = opendir(dir);
    for (struct dirent *de; d && (de = readdir(d));) {
        int64_t step = checkpoint_step(de->d_name);
        if (step >= 0 && step < in->step && step > from) from = step;
    }
    if (d) (void)closedir(d);
    if (from < 0)
        (void)fputs(",\n  \"replay_from\": null", f);
    else
        (void)fprintf(f, ",\n  \"replay_from\": {\"step\": %lld, \"checkpoint\": \"step-%08lld\"}",
                      (long long)from, (long long)from);
}

/* The first parameter (in model order) whose gradient holds an inf or a NaN, or NULL. */
static const char *first_nonfinite_grad(const ct_params *p) {
    for (int64_t i = 0; i < ct_params_count(p); i++) {
        const ct_tensor *t = ct_params_at(p, i);
        if (t->grad && ct_exp_stats_of(t->grad, ct_tensor_numel(t)).nonfinite > 0)
            return t->name ? t->name : "";
    }
    return NULL;
}

ct_status ct_experiment_window_samples(const ct_experiment *e,
                                       int64_t batch_first,
                                       int64_t batch_last,
                                       int64_t *out,
                                       int64_t cap,
                                       int64_t *n_out) {
    *n_out = 0;
    ct_loader *l = e->train_loader;
    if (!l) return CT_FAIL(e->ctx, CT_ERR_INVALID_ARG, "window samples: no training data");
    int64_t n = ct_loader_samples_per_epoch(l);
    int64_t lo = batch_first * e->batch_size, hi = (batch_last + 1) * e->batch_size;
    if (hi > n) hi = n;
    if (lo >= hi) return CT_OK;
    int64_t *idx = ct_alloc(e->ctx, (size_t)n * sizeof *idx);
    if (!idx)
        return CT_FAIL(e->ctx, CT_ERR_OOM, "window samples: %lld sample indices", (long long)n);
    ct_status s = ct_loader_epoch_indices(l, ct_loader_get_state(l).epoch, idx);
    for (int64_t i = lo; s == CT_OK && i < hi; i++)
        if (i - lo < cap) out[i - lo] = idx[i];
    if (s == CT_OK) *n_out = hi - lo;
    ct_free(e->ctx, idx, (size_t)n * sizeof *idx);
    return s;
}

/* The loader's position and the dataset indices of the window's samples on this rank. */
static void put_samples(FILE *f, ct_experiment *e, const ct_incident *in) {
    ct_loader *l = e->train_loader;
    ct_loader_state st = ct_loader_get_state(l);
    (void)fprintf(f,
                  ",\n  \"loader\": {\"epoch\": %lld, \"next_batch\": %lld, \"seed\": %llu, "
                  "\"batch_size\": %lld, \"batch_first\": %lld, \"batch_last\": %lld}",
                  (long long)st.epoch, (long long)st.next_batch, (unsigned long long)st.seed,
                  (long long)e->batch_size, (long long)in->batch_first, (long long)in->batch_last);
    int64_t cap = (in->batch_last - in->batch_first + 1) * e->batch_size, n = 0;
    int64_t *idx = cap > 0 ? ct_alloc(e->ctx, (size_t)cap * sizeof *idx) : NULL;
    (void)fputs(",\n  \"samples\": ", f);
    /* out of memory is the one failure that may replace the context's error: said as null */
    if (!idx ||
        ct_experiment_window_samples(e, in->batch_first, in->batch_last, idx, cap, &n) != CT_OK ||
        n == 0) {
        (void)fputs("null", f);
    } else {
        (void)fputc('[', f);
        for (int64_t i = 0; i < n && i < cap; i++)
            (void)fprintf(f, "%s%lld", i ? ", " : "", (long long)idx[i]);
        (void)fputc(']', f);
    }
    if (idx) ct_free(e->ctx, idx, (size_t)cap * sizeof *idx);
}

static void put_incident(FILE *f, ct_experiment *e, const ct_incident *in) {
    (void)fprintf(f,
                  "{\n  \"kind\": \"%s\",\n  \"action\": \"%s\",\n  \"step\": %lld,\n"
                  "  \"epoch\": %lld,\n  \"loss\": ",
                  in->kind == CT_INCIDENT_SPIKE ? "spike" : "nonfinite", in->action,
                  (long long)in->step, (long long)in->epoch);
    put_num(f, in->loss);
    uint64_t bits;
    memcpy(&bits, &in->loss, sizeof bits);
    (void)fprintf(f, ",\n  \"loss_bits\": \"0x%016llx\"", (unsigned long long)bits);
    (void)fputs(",\n  \"grad_norm\": ", f);
    put_num(f, in->grad_norm);
    if (in->kind == CT_INCIDENT_SPIKE) {
        (void)fputs(",\n  \"spike\": {\"value\": ", f);
        put_num(f, in->value);
        (void)fputs(", \"median\": ", f);
        put_num(f, in->median);
        (void)fputs(", \"deviation\": ", f);
        put_num(f, in->deviation);
        (void)fputs(", \"threshold\": ", f);
        put_num(f, in->threshold);
        (void)fputc('}', f);
    } else {
        (void)fprintf(f, ",\n  \"loss_finite\": %s,\n  \"grads_finite\": %s",
                      in->loss_finite ? "true" : "false", in->grads_finite ? "true" : "false");
    }
    const char *bad = first_nonfinite_grad(e->params);
    (void)fprintf(f, ",\n  \"first_nonfinite_grad\": %s%s%s", bad ? "\"" : "", bad ? bad : "null",
                  bad ? "\"" : "");
    (void)fprintf(f, ",\n  \"rng\": {\"seed\": %llu, \"stream\": %llu, \"counter\": %llu}",
                  (unsigned long long)in->rng.seed, (unsigned long long)in->rng.stream,
                  (unsigned long long)in->rng.counter);
    put_first_layer(f, e, in);
    put_replay_from(f, e, in);
    (void)fprintf(f, ",\n  \"world_size\": %lld",
                  (long long)(e->p.comm ? ct_comm_world_size(e->p.comm) : 1));
    put_samples(f, e, in);
    put_tensors(f, e->params);
    put_activations(f, e, in);
    (void)fputs("\n}\n", f);
}

/* Copies the file src into f; false with errno. */
static bool copy_into(FILE *f, const char *src) {
    FILE *s = fopen(src, "r");
    if (!s) return false;
    char buf[8192];
    size_t n;
    bool ok = true;
    while (ok && (n = fread(buf, 1, sizeof buf, s)) > 0)
        ok = fwrite(buf, 1, n, f) == n;
    ok = ok && !ferror(s);
    (void)fclose(s);
    return ok;
}

/* Writes path from `in` (JSON) or by copying `src`, and fsyncs it; false with errno. */
static bool write_file(const char *path, ct_experiment *e, const ct_incident *in, const char *src) {
    FILE *f = fopen(path, "w");
    if (!f) return false;
    bool ok = true;
    if (in)
        put_incident(f, e, in);
    else
        ok = copy_into(f, src);
    ok = ok && !ferror(f) && fflush(f) == 0 && fsync(fileno(f)) == 0;
    return fclose(f) == 0 && ok;
}

/* The bundles in dir (names not ending in ".tmp"). */
static int64_t count_bundles(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int64_t n = 0;
    for (struct dirent *de; (de = readdir(d));) {
        size_t len = strlen(de->d_name);
        if (strncmp(de->d_name, "step-", 5) == 0 &&
            !(len > 4 && strcmp(de->d_name + len - 4, ".tmp") == 0))
            n++;
    }
    (void)closedir(d);
    return n;
}

/* The bundle's name: step-N, or step-N-2, -3... when an earlier incident at the same step (one
 * before a rollback) has it. */
static void bundle_name(const char *dir, int64_t step, char *name, size_t size) {
    char path[PATH_SIZE];
    (void)snprintf(name, size, "step-%08lld", (long long)step);
    for (int k = 2; k < 100000; k++) {
        (void)snprintf(path, sizeof path, "%s/%s", dir, name);
        if (access(path, F_OK) != 0) return;
        (void)snprintf(name, size, "step-%08lld-%d", (long long)step, k);
    }
}

/* Writes the bundle into dir/name.tmp and renames it; false with errno, the path that failed
 * in failed. */
static bool write_bundle(
    ct_experiment *e, const ct_incident *in, const char *dir, const char *name, char *failed) {
    char tmp[PATH_SIZE], file[FILE_SIZE], src[FILE_SIZE];
    (void)snprintf(tmp, sizeof tmp, "%s/%s.tmp", dir, name);
    (void)snprintf(failed, PATH_SIZE, "%s", tmp);
    if ((mkdir(dir, 0777) != 0 && errno != EEXIST) || (mkdir(tmp, 0777) != 0 && errno != EEXIST))
        return false;
    (void)snprintf(file, sizeof file, "%s/incident.json", tmp);
    if (!write_file(file, e, in, NULL)) return false;
    (void)snprintf(file, sizeof file, "%s/config.yaml", tmp);
    (void)snprintf(src, sizeof src, "%s/config.yaml", e->out_dir);
    if (!write_file(file, e, NULL, src)) return false;
    (void)snprintf(file, sizeof file, "%s/%s", dir, name);
    return rename(tmp, file) == 0;
}

void ct_exp_write_incident(ct_experiment *e, const ct_incident *in) {
    if (e->p.comm && !ct_comm_is_root(e->p.comm)) return;
    int64_t max = ct_exp_int_at(e, "trainer.max_incidents");
    if (max <= 0 || ct_exp_bool_at(e, "trainer.dev_run")) return;
    char dir[DIR_SIZE], name[64], failed[PATH_SIZE];
    (void)snprintf(dir, sizeof dir, "%s/incidents", e->out_dir);
    if (count_bundles(dir) >= max) {
        if (!e->incidents_capped)
            ct_log(e->ctx, CT_LOG_WARN,
                   "incidents: %s holds trainer.max_incidents = %lld bundles; no more are "
                   "written",
                   dir, (long long)max);
        e->incidents_capped = true;
        return;
    }
    bundle_name(dir, in->step, name, sizeof name);
    if (!write_bundle(e, in, dir, name, failed))
        ct_log(e->ctx, CT_LOG_WARN, "incidents: %s: cannot write: %s (the run goes on)", failed,
               strerror(errno));
}
